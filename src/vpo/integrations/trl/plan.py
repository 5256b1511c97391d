"""A TRL training run as a plan: the rows, their prompt style, the GRPOConfig overrides the prompt
format implies, the run's format record and its memory estimate, decided before the model loads
(``plan_training``) and finished once the tokenizer is known (``TrainPlan.for_tokenizer``).

Usage::

    plan = plan_training(task, method="vpo", answers=3, rl=RLConfig(), engine=TRLOptions(), out="runs/a",
                         model="./m", checkpoint=info, params={"size": 5})
    print(plan.memory)                                  # before the weights are read
    model, tokenizer = load_pretrained("./m")
    plan = plan.for_tokenizer(tokenizer)
    plan.trainer(model, tokenizer).train()              # VPOTrainer, its KL reference the policy as loaded

``vpo train`` is this plan behind flags; ``build_train_rows`` is its rows alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vpo.estimators.options import WeightOptions
from vpo.integrations.trl.config import RLConfig, TRLOptions
from vpo.weights import given_key

__all__ = ["TrainPlan", "build_train_rows", "grpo_config", "load_rows", "memory_line",
           "plan_training", "refuse_verl_row", "run_format_record"]


def load_rows(path: str) -> list[dict[str, Any]]:
    """The training rows of a data file or folder (``vpo.tasks.io.load_records``), as dicts."""
    from vpo.tasks.io import load_records

    return [dict(row) for row in load_records(path, split="train")]


def refuse_verl_row(row: Any, i: int, data: str | None) -> None:
    """Raise ValueError, naming ``data`` and the export to use, when row ``i`` has verl's layout
    (``vpo train`` reads the TRL one)."""
    if isinstance(row, dict) and "reward_model" in row and "data_source" in row and "example" not in row:
        raise ValueError(f"{data}: row {i} looks like a verl export (data_source, prompt, reward_model, "
                         "extra_info); `vpo train` reads the TRL layout: `vpo data export TASK --format trl`")


def _is_export_row(row: Any) -> bool:
    return isinstance(row, Mapping) and "prompt" in row and "example" in row


def _task_examples(task: Any, raw: list[Any], data: str) -> list[Any]:
    """``raw`` with its task records (rows that are not a TRL export's) in the task's example
    schema, as ``vpo eval`` and the export read them (LiveCodeBench records for code, raw EUREQA
    or ToolRL rows, ...): the task's own ``convert_all``, which passes schema rows through."""
    at = [i for i, row in enumerate(raw) if not _is_export_row(row)]
    if not at or not hasattr(task, "convert_all"):
        return raw
    converted = task.convert_all([raw[i] for i in at], data, "train")
    out = list(raw)
    for i, example in zip(at, converted, strict=True):  # convert_all is one example per record
        out[i] = example
    return out


def build_train_rows(task: Any, answers: int, *, data: str | None = None, n: int | None = None,
                     seed: int = 42, goals: WeightOptions | None = None, chat: bool = False,
                     loaded: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rows ``{prompt, example (JSON), task, answers, index, example_id}`` for TRL.

    ``data`` rows that already carry ``prompt`` and ``example`` (a TRL export) are used as they
    are (their ``answers`` must equal ``answers``); other rows are task examples and get their
    m-answer prompt here. Without ``data`` the task supplies its training split. ``goals``
    (goal-conditioned GRPO) gives each raw example its keyed goal weights (``vpo.goals``), which
    its prompt states; an export must already carry them. ``chat``: prompts as the task's chat
    turns (a TRL export's turns are used as written; a text export's are the task's turns),
    else as one string. ``loaded``: the rows of ``data``, when the caller has read them already.
    """
    if data is not None:
        raw = loaded if loaded is not None else load_rows(data)
        for i, row in enumerate(raw):
            refuse_verl_row(row, i, data)
        raw = _task_examples(task, raw, data)
        if n is not None:
            from vpo.tasks.io import select

            raw = select(raw, n=n, seed=seed)
    else:
        default_n = n if n is not None else (1000 if task.name == "maze" else None)
        raw = task.examples("train", default_n, seed=seed)
    if not raw:
        raise ValueError("no training examples")
    from vpo.export import example_key, trl_row
    from vpo.goals import GOAL_FIELD, attach_goal

    rows = []
    for i, row in enumerate(raw):
        if _is_export_row(row):
            if row.get("task") not in (None, task.name):
                raise ValueError(f"row {i}: the data is for task {row['task']!r}, not {task.name!r}")
            have = row.get("answers")
            if have is not None and int(have) != answers:
                raise ValueError(f"row {i}: the data was exported for answers={have}, but training uses "
                                 f"answers={answers}; pass --answers {have} or re-export")
            example = row["example"]
            text = example if isinstance(example, str) else json.dumps(example)
            if goals is not None and GOAL_FIELD not in json.loads(text):
                raise ValueError(f"row {i}: goal-conditioned training needs prompts that state goal weights; "
                                 "re-export with `vpo data export TASK --format trl --method goal_conditioned`")
            key = given_key(row.get("example_id"))  # the group key every engine uses for this row's weights
            prompt = row["prompt"]
            if chat != (not isinstance(prompt, str)):  # the export's other prompt style
                example = json.loads(text)
                prompt = task.messages(example, answers) if chat else task.prompt(example, answers)
            rows.append({"prompt": prompt, "example": text, "task": task.name, "answers": answers,
                         "index": int(row.get("index", i)),
                         "example_id": str(key) if key is not None else example_key(json.loads(text), "train", i)})
        else:
            example = task.validate(row, i)
            if goals is not None:
                example = attach_goal(task, example, key=example_key(example, "train", i), seed=goals.seed,
                                      alpha=goals.alpha, sampler=goals.sampler)
            rows.append(trl_row(task, example, index=i, split="train", answers=answers, chat=chat))
    return rows


def grpo_config(rl: RLConfig, engine: TRLOptions, out: str, *, task: str, answers: int, **derived: Any) -> Any:
    """The ``trl.GRPOConfig`` of a run: ``rl``'s presets, ``derived`` (settings the prompt format
    implies), then ``engine``'s TRL settings and ``--config`` values, which win."""
    return rl.to_grpo_config(out, task=task, answers=answers, **{**derived, **engine.grpo_values()})


def run_format_record(checkpoint: Any, task: Any, params: Mapping[str, Any], method: str, answers: int, *,
                      own: bool) -> dict[str, Any]:
    """The run's ``vpo_format.json``: the starting checkpoint's prompt format when it records one
    (the demo's compact maze format), else the task's own prompts (``"task"``); with the task, its
    parameters, the method and m, so ``vpo eval`` on the model or any of its ``checkpoint-N``
    prompts and samples it as trained. Your own reward functions record no task (their prompts
    are ``--source``'s). ``checkpoint``: the starting model's ``vpo.checkpoints`` info."""
    if own:
        return {"format": "task", "method": method, "answers": answers}
    kept = checkpoint.record if checkpoint.record is not None and checkpoint.format_applies else None
    record = dict(kept) if kept is not None and kept.get("format") != "task" else {"format": "task"}
    record.update(task=task.name, task_params=dict(params), method=method, answers=answers)
    return record


@dataclass
class TrainPlan:
    """What a ``VPOTrainer`` run trains on and how, decided before the model loads.

    ``rows``: the dataset (``prompt``, ``example`` JSON and the task's columns, or ``--source``'s
    columns for your own reward functions, ``own``); ``record``: the run's ``vpo_format.json``;
    ``memory``: the training memory estimate in words (None when the model's shape cannot be
    read); ``objectives``: D of the rows (None: your functions say it at the first step);
    ``args``: the ``GRPOConfig``; ``model_dir``: the checkpoint whose recorded prompt format the
    run keeps (None: the task's prompts); ``source``: the data the rows came from (None: the task's
    own split). ``for_tokenizer`` sets the prompt style: ``chat_prompts``
    (your functions' string prompts sent as one chat turn), ``fmt`` (the prompt format) and
    ``overrides`` (GRPOConfig values the format implies, in ``args``). ``lora_rank``: a LoRA
    adapter of that rank (None: all weights, and with ``args.beta != 0`` the loaded policy is the
    KL reference)."""

    task: Any
    method: str
    answers: int
    rows: list[dict[str, Any]]
    record: dict[str, Any]
    memory: str | None
    objectives: int | None
    args: Any
    rl: RLConfig
    engine: TRLOptions
    out: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)
    model_dir: str | None = None
    source: str | None = None
    own: bool = False
    scaling: Any = None
    lora_rank: int | None = None
    lora_alpha: int = 32
    chat_prompts: bool = False
    fmt: Any = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def for_tokenizer(self, tokenizer: Any, *, chat_template: bool = True) -> TrainPlan:
        """The plan with its prompt style for ``tokenizer``: the rows' prompts in the format the
        starting checkpoint records (with its completion budget unless one was given), as the
        task's chat turns when the tokenizer has a chat template (and ``chat_template``), else as
        one string; your functions' string prompts as one user turn. Raises ValueError for a
        combination that cannot be rendered."""
        from vpo.formats import FORMAT_FILE, TaskFormat, load_format

        fmt = load_format(self.model_dir, self.task, tokenizer=tokenizer, chat=False)
        rows = [dict(row) for row in self.rows]
        overrides: dict[str, Any] = {}
        chat_prompts = False
        templated = chat_template and bool(getattr(tokenizer, "chat_template", None))
        if self.own:
            if not isinstance(fmt, TaskFormat):
                raise ValueError(f"--reward-funcs trains on the prompts of --source, but {self.model} was trained on "
                                 f"the {fmt.name!r} prompt format; start from a checkpoint without {FORMAT_FILE}")
            if templated:
                # a string prompt goes to the model as one user turn (TRL applies the chat template); your
                # functions still get the string and text completions, as the check and eval give them
                chat_prompts = True
                overrides["chat_template_kwargs"] = {"enable_thinking": False}
            elif any(not isinstance(row["prompt"], str) for row in rows):
                raise ValueError(f"--source {self.source} has chat-turn prompts, but "
                                 + ("--no-chat-template is set" if not chat_template else
                                    f"the tokenizer of {self.model} has no chat template") + " to render them")
        elif not isinstance(fmt, TaskFormat):
            from vpo.estimators import get_spec

            if get_spec(self.method).conditions_prompt:
                raise ValueError(f"--method {self.method} states goal weights in the task's prompts, but {self.model} "
                                 f"was trained on the {fmt.name!r} prompt format, which has no place for them")
            examples = [json.loads(row["example"]) for row in rows]
            for row, example in zip(rows, examples, strict=True):
                row["prompt"] = fmt.prompt(example, self.answers)
            if self.rl.max_completion_length is None:
                overrides["max_completion_length"] = fmt.completion_budget(examples, self.answers)
        elif templated:
            # the rows hold the task's chat turns, as verl and evaluation send them (toolcall: system + user)
            overrides["chat_template_kwargs"] = {"enable_thinking": False}
        else:  # no chat template: one string per prompt, the task's merged prompt
            for row in rows:
                if not isinstance(row["prompt"], str):
                    row["prompt"] = self.task.prompt(json.loads(row["example"]), self.answers)
        args = (grpo_config(self.rl, self.engine, self.out, task=self.task.name, answers=self.answers, **overrides)
                if overrides else self.args)
        return dataclasses.replace(self, rows=rows, fmt=fmt, chat_prompts=chat_prompts, overrides=overrides,
                                   args=args)

    def trainer(self, model: Any, tokenizer: Any, *, untagged_fallback: bool = False) -> Any:
        """The plan's ``VPOTrainer`` on ``model`` (loaded) and ``tokenizer``: the task or your
        functions as objectives, a LoRA adapter when planned, and for full fine-tuning with a KL
        term the policy as loaded as the reference (``VPOTrainer(ref_model=)``)."""
        from datasets import Dataset

        from vpo.integrations.trl.trainer import VPOTrainer

        peft_config = None
        if self.lora_rank is not None:
            from peft import LoraConfig

            peft_config = LoraConfig(r=self.lora_rank, lora_alpha=self.lora_alpha, target_modules="all-linear",
                                     task_type="CAUSAL_LM")
        reference = model if peft_config is None and float(self.args.beta) != 0.0 else None
        objectives: dict[str, Any] = (
            {"task": self.task} if not self.own else  # your functions, each called once per step on all answers
            {"reward_funcs": self.task.reward_funcs, "reward_names": self.task.reward_names, "scaling": self.scaling,
             "reward_failures": self.task.failures.policy, "chat_prompts": self.chat_prompts})
        return VPOTrainer(model, answers=self.answers, estimator=self.method, estimator_options=self.options,
                          args=self.args, train_dataset=Dataset.from_list(self.rows), processing_class=tokenizer,
                          peft_config=peft_config, untagged_fallback=untagged_fallback, ref_model=reference,
                          **objectives)



def plan_training(task: Any, *, method: str, answers: int, rl: RLConfig, engine: TRLOptions, out: str, model: str,
                  checkpoint: Any, params: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
                  own: bool = False, scaling: Any = None, source: str | None = None, examples: int | None = None,
                  data_seed: int = 42, weights: WeightOptions | None = None, lora_rank: int | None = None,
                  lora_alpha: int = 32, loaded: list[dict[str, Any]] | None = None, args: Any = None) -> TrainPlan:
    """The ``TrainPlan`` of a run on ``task`` (your reward functions' task with ``own``), before
    the model loads: its rows (``source``, ``examples`` of them drawn with ``data_seed``, else the
    task's split; goal-conditioned methods state ``weights``' goal draws in the prompts), their
    D, the format record, and the memory estimate, refused in one line when the run cannot fit
    its device. ``checkpoint``: the starting model's ``vpo.checkpoints`` info (its recorded prompt
    format is kept); ``params``: the task's parameters as recorded; ``args``: the GRPOConfig
    already built from ``rl`` and ``engine`` (built here when None); ``loaded``: ``source``'s
    rows when already read. Raises ValueError for rows that cannot train."""
    from vpo.estimators import get_spec
    from vpo.formats import load_format

    if args is None:
        args = grpo_config(rl, engine, out, task=task.name, answers=answers)
    if own:  # the rows as they are: VPOTrainer(reward_funcs=) asks for m answers and passes columns
        from vpo.tasks.io import select

        rows = [task.validate(row, i) for i, row in enumerate(loaded if loaded is not None else load_rows(source))]
        rows = select(rows, n=examples, seed=data_seed if examples is not None else None)
        if not rows:
            raise ValueError(f"--source {source}: no training rows")
    else:
        goals = weights if get_spec(method).conditions_prompt else None
        rows = build_train_rows(task, answers, data=source, n=examples, seed=data_seed,
                                goals=goals, chat=True, loaded=loaded)
    model_dir = checkpoint.path if checkpoint.kind in ("folder", "lora") and checkpoint.format_applies else None
    memory = memory_line(model, args, rows, load_format(model_dir, task, chat=False), answers,
                         lora=lora_rank is not None, completion_given=rl.max_completion_length is not None)
    return TrainPlan(task=task, method=method, answers=answers, rows=rows,
                     record=run_format_record(checkpoint, task, params or {}, method, answers, own=own), memory=memory,
                     objectives=_objectives(task, rows, own), args=args, rl=rl, engine=engine, out=out, model=model,
                     options=dict(options or {}), model_dir=model_dir, source=source, own=own, scaling=scaling,
                     lora_rank=lora_rank, lora_alpha=lora_alpha)


def _objectives(task: Any, rows: list[dict[str, Any]], own: bool) -> int | None:
    """D of the training rows without scoring anything (None: your reward functions must score an
    answer first, which the trainer does at its first step)."""
    if not own:
        return task.num_objectives(json.loads(rows[0]["example"]))
    try:
        return task.num_objectives()  # declared by every function
    except ValueError:
        return None


def _prompt_text(prompt: Any) -> str:
    """A row's prompt as text: itself, or its chat turns' contents joined."""
    if isinstance(prompt, str):
        return prompt
    return "".join(str(turn.get("content", "")) for turn in prompt)


def memory_line(model: str, args: Any, rows: list[dict[str, Any]], fmt: Any, answers: int, *, lora: bool,
                completion_given: bool) -> str | None:
    """Refuse in one line, before ``model`` loads, a run whose weights, reference copy, gradients,
    optimiser state and generation batch (``vpo.workload.training_estimate``; ``args``: its
    GRPOConfig) exceed the memory of its device; the estimate in words, or None when the model's
    shape cannot be read (a .gguf file)."""
    from vpo.formats import TaskFormat
    from vpo.workload import check_memory, device_memory, optimizer_state_bytes, prompt_tokens, read_model_shape
    from vpo.workload import training_estimate

    shape = read_model_shape(model)
    if shape is None:
        return None
    if isinstance(fmt, TaskFormat):
        prompts = [_prompt_text(row["prompt"]) for row in rows]
        completion = args.max_completion_length
    else:  # a checkpoint's own format (the demo's) prompts, and sets the budget unless given
        examples = [json.loads(row["example"]) for row in rows]
        prompts = [fmt.prompt(example, answers) for example in examples]
        completion = args.max_completion_length if completion_given else fmt.completion_budget(examples, answers)
    import torch

    cpu = args.use_cpu or not torch.cuda.is_available()
    device = "cpu" if cpu else f"cuda:{int(os.environ.get('LOCAL_RANK') or 0)}"
    world = int(os.environ.get("WORLD_SIZE") or 1)
    chains = 0 if args.use_vllm else args.generation_batch_size // world   # vLLM sizes its own cache
    estimate = training_estimate(shape, chains=chains, tokens=prompt_tokens(prompts, shape.vocab) + completion,
                                 kv_itemsize=2 if args.bf16 else 4, reference=float(args.beta) != 0.0 and not lora,
                                 full=not lora, optimizer_bytes=optimizer_state_bytes(str(args.optim)))
    available = device_memory(device)
    check_memory(estimate, available=available,
                 what=f"training {model} ({shape.parameters / 1e6:,.2f}M parameters) on {device} with "
                      f"{chains} rollouts of up to {completion} tokens per generation batch",
                 lower="--per-device-train-batch-size or --steps-per-generation (the generation batch) or "
                       "--max-completion-length" + ("" if lora else ", or train with --lora")
                       + (" or --kl-beta 0 (no reference copy)" if float(args.beta) and not lora else ""))
    return estimate.describe(available)

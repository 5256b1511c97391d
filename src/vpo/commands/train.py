"""``vpo train``: RL-train a causal LM on a task with VPO or a baseline, through TRL.

Usage::

    vpo train --task maze --task-params size=5 --model ./tiny-model --method vpo --answers 3
    vpo train --task musique --data data/musique_trl --model Qwen/Qwen3-1.7B --method grpo --lora
    vpo train --task maze --model ./m --config grpo.yaml --report-to tensorboard --use-vllm --vllm-mode server
    vpo train --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source prompts.jsonl --model ./m

The run uses ``vpo.integrations.trl.VPOTrainer`` (TRL's GRPOTrainer with the advantage
replaced by the chosen estimator) and the paper's presets (docs/algorithm.md §7: lr 1e-6 constant,
AdamW (0.9, 0.999, wd 0.01), clip 0.2, KL 1e-3, G = 8, temperature 1, epochs per task, 2x the
completion budget for m > 1); every preset is a flag. TRL's run settings pass through under
their names (``--report-to``, ``--use-vllm``/``--vllm-mode``, ``--bf16``, ``--gradient-checkpointing``,
``--steps-per-generation``, ``--num-iterations``, ``--save-steps``, ``--resume-from-checkpoint``), and
``--config`` reads a TRL ``GRPOConfig`` YAML as ``trl grpo --config`` does: flags typed on the
command line win over its values, its values over the presets; unknown keys and the options
VPOTrainer replaces (``multi_objective_aggregation``, ``reward_weights``) fail at once, naming the
key; ``--scale-rewards`` sets the estimator's scale. Data: ``--data`` names a TRL export
(``prompt`` + ``example`` columns, from ``vpo data``; a ``datasets`` folder or a JSONL/JSON/
parquet file) or a file of raw task examples; without it the task generates (maze) or loads its
own training split. ``--reward-funcs`` (your own reward functions, TRL's contract) with
``--source`` (a prompt dataset: JSONL, parquet or a saved Hugging Face dataset folder with a
``prompt`` column) replace ``--task``: each function is one objective. Models: a local folder, a cached hub id (the hub is offline here) or a
``.gguf`` file. Prompts get the tokenizer's chat template (thinking off) when it has one.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpo.commands.options import (EstimatorOptions, RewardFuncsOptions, answers_for, check_estimator_options,
                                  estimator_options, resolve_answers, task_help)
from vpo.commands.rewards import apply_failure_policy, own_setup, resolve_task
from vpo.config import add_dataclass_args, check_fields, check_out_dir, dataclass_from_args, parse_params
from vpo.estimators.options import WeightOptions
from vpo.integrations.trl.config import (TASK_EPOCHS, VPO_OWNED, RLConfig, TRLOptions, check_engine, estimator_scale,
                                        read_grpo_yaml)
from vpo.weights import given_key

__all__ = ["RLConfig", "TASK_EPOCHS", "TRLOptions", "TrainArgs", "build_train_rows", "grpo_args", "parse_params",
           "resolve_answers", "train", "train_configs"]


HEARTBEAT_S = 30.0
"""Under --no-progress, the longest a training run stays silent between logged step lines."""


@dataclass
class TrainArgs(RewardFuncsOptions, EstimatorOptions):
    """What to train, on what, and where to write it (the RL hyperparameters are RLConfig's)."""

    task: str = field(default="", metadata={"help": task_help})
    model: str = field(default="", metadata={"help": "model folder, cached hub id, .gguf file, or smollm2"})
    answers: int | None = field(
        default=None, metadata={"help": "answers per rollout m (default 3 for multi-answer estimators, else 1)",
                                "min": 1})
    task_params: list[str] = field(
        default_factory=list, metadata={"help": "task constructor parameters, key=value (e.g. size=5)"})
    source: str | None = field(
        default=None, metadata={"help": "training data: TRL export or raw task examples (default: the task's own)",
                                "aliases": ("--data",)})
    examples: int | None = field(
        default=None, metadata={"help": "use at most this many training examples (default: all; maze: 1000)",
                                "aliases": ("--num-examples",), "min": 1})
    data_seed: int = field(default=42, metadata={"help": "seed of generated/subsampled training examples", "min": 0})
    out: str = field(default="runs/train", metadata={"help": "checkpoint and log folder (TRL's output_dir)",
                                                     "aliases": ("--output-dir",)})
    lora: bool = field(default=False, metadata={"help": "train a LoRA adapter (peft) instead of all weights"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank r", "min": 1})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha", "min": 1})
    chat_template: bool = field(
        default=True, metadata={"help": "wrap prompts in the tokenizer's chat template when it has one"})
    untagged_fallback: bool = field(default=False, metadata={
        "help": "m > 1: a completion with no parseable answer in its numbered tags counts as one answer, its "
                "whole text (a model that ignores the format still learns from its content; docs/own_rewards.md)"})
    save: bool = field(default=True, metadata={"help": "save the final model (or adapter) to output_dir"})
    progress: bool = field(default=True, metadata={
        "help": "a progress bar (--no-progress: no bar from any library); either way a line per stage (settings, "
                "loading with the memory estimate, training) and one short line per logged step (without a bar, a "
                "step line at least every 30 s between them), the full log in OUT/train_log.jsonl"})
    config: str | None = field(default=None, metadata={
        "help": "a TRL GRPOConfig YAML, as `trl grpo --config` reads it (flags typed here win over its values)"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the run already in --out (its checkpoint-N folders are deleted); without it such a "
                "folder is refused unless --resume-from-checkpoint continues that run"})


class _GivenOnly:
    """Adds options that leave no attribute unless typed on the command line (``default=SUPPRESS``),
    so ``train_configs`` tells a typed flag from a default: typed flags win over ``--config``
    values, defaults do not. The dataclass keeps the default, the help still shows it."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def add_argument(self, *flags: str, **kwargs: Any) -> argparse.Action:
        action = self.target.add_argument(*flags, **kwargs)
        if action.help:  # BooleanOptionalAction formats the default into the help at --help time
            action.help = action.help.replace("%(default)s", str(action.default))
        action.default = argparse.SUPPRESS
        return action


class _Refused(argparse.Action):
    """A GRPOConfig option VPOTrainer replaces: recorded as typed, refused by ``train_configs``."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="RL-train a model on a task with VPO or a baseline (TRL)",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_dataclass_args(_GivenOnly(parser), TrainArgs)
    add_dataclass_args(_GivenOnly(parser.add_argument_group("RL hyperparameters (paper presets)")), RLConfig)
    add_dataclass_args(_GivenOnly(parser.add_argument_group("TRL settings (GRPOConfig, under TRL's names)")),
                       TRLOptions)
    for name in VPO_OWNED:  # refused with what VPO does instead, in either spelling, whatever follows them
        parser.add_argument("--" + name.replace("_", "-"), "--" + name, dest=f"refused_{name}", nargs="*",
                            action=_Refused, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def _load_rows(path: str) -> list[dict[str, Any]]:
    from vpo.tasks.io import load_records

    return [dict(row) for row in load_records(path, split="train")]


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
        raw = loaded if loaded is not None else _load_rows(data)
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
        _refuse_verl_row(row, i, data)
        if "prompt" in row and "example" in row:
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


def _refuse_verl_row(row: Any, i: int, data: str | None) -> None:
    if isinstance(row, dict) and "reward_model" in row and "data_source" in row and "example" not in row:
        raise ValueError(f"{data}: row {i} looks like a verl export (data_source, prompt, reward_model, "
                         "extra_info); `vpo train` reads the TRL layout: `vpo data export TASK --format trl`")


def train_configs(args: argparse.Namespace) -> tuple[TrainArgs, RLConfig, TRLOptions]:
    """The configs of a parsed ``vpo train`` command line: the defaults (the paper's presets), then
    the ``--config`` YAML's values, then the flags typed (which win). Refused options fail here,
    before any file but the YAML is read."""
    for name, instead in VPO_OWNED.items():
        typed = getattr(args, f"refused_{name}", None)
        if typed:
            raise ValueError(f"{typed} is not a vpo train option: {instead}")
    from_yaml: dict[str, dict[str, Any]] = {"train": {}, "rl": {}, "trl": {}, "extra": {}}
    if getattr(args, "config", None):
        from_yaml = read_grpo_yaml(args.config, TrainArgs)
    typed_names = set(vars(args))

    def build(cls: type, owner: str) -> Any:
        return dataclass_from_args(cls, args, **{k: v for k, v in from_yaml[owner].items() if k not in typed_names})

    cfg, rl, engine = build(TrainArgs, "train"), build(RLConfig, "rl"), build(TRLOptions, "trl")
    engine.extra = dict(from_yaml["extra"])
    if engine.save_steps is not None and rl.save_strategy != "steps":
        if rl.save_strategy != RLConfig.save_strategy:  # set on purpose (flag or YAML) to something else
            raise ValueError(f"--save-steps {engine.save_steps} saves by steps, but --save-strategy is "
                             f"{rl.save_strategy!r}; give one of them")
        rl = dataclasses.replace(rl, save_strategy="steps")
    return cfg, rl, engine


def grpo_args(cfg: TrainArgs, rl: RLConfig, engine: TRLOptions, *, task: str, answers: int, **derived: Any) -> Any:
    """The ``trl.GRPOConfig`` of a ``vpo train`` run: RLConfig's presets, ``derived`` (settings the
    prompt format implies), then the TRL settings and ``--config`` values, which win."""
    return rl.to_grpo_config(cfg.out, task=task, answers=answers, **{**derived, **engine.grpo_values()})


def _resume_path(value: str | None, out: str) -> str | None:
    """The checkpoint folder ``--resume-from-checkpoint`` names ('latest': the last in ``out``)."""
    if value is None:
        return None
    if value == "latest":
        from vpo.checkpoints import latest_complete_checkpoint

        last = latest_complete_checkpoint(out)  # one half-written when the run was killed is skipped
        if last is None:
            raise FileNotFoundError(f"--resume-from-checkpoint latest: no checkpoint-N folder (written to the end) in "
                                    f"{out} (checkpoints are saved with --save-steps N)")
        return str(last)
    if not Path(value).is_dir():
        raise FileNotFoundError(f"--resume-from-checkpoint {value}: no such folder")
    return value


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg, rl, engine = train_configs(args)
    if not cfg.task and not cfg.reward_funcs:
        raise ValueError("--task is required (or --reward-funcs with --source)")
    if not cfg.model:
        raise ValueError("--model is required")
    return train(cfg, rl, engine)


@contextlib.contextmanager
def _reference_from_policy(model: Any, *, enabled: bool) -> Iterator[None]:
    """While TRL's GRPOTrainer is built, give it a frozen copy of ``model`` as the KL reference.

    For full fine-tuning with a KL term, GRPOTrainer re-loads the reference from
    ``model.config._name_or_path`` (``create_model_from_path``). That breaks for models that
    ``load_pretrained`` changed or that cannot be re-loaded by name: a ``.gguf`` file (its folder
    has no config.json: "Unrecognized model"), and any checkpoint that got a new ``<pad>`` token
    (the re-loaded reference lacks the resized embedding row, so pad ids index out of range).
    The reference is meant to be the initial policy, so a copy of the loaded model is exact.
    Without ``enabled`` (LoRA: TRL disables the adapter instead; beta 0: no reference) or if TRL
    no longer has that hook, nothing is patched.
    """
    from trl.trainer import grpo_trainer

    original = getattr(grpo_trainer, "create_model_from_path", None)
    if not enabled or original is None:
        yield
        return
    reference = [copy.deepcopy(model)]

    def create_reference(model_id: str, *args: Any, **kwargs: Any) -> Any:
        if not reference:  # any later call is not for the reference: TRL's own loader
            return original(model_id, *args, **kwargs)
        ref = reference.pop()
        dtype = kwargs.get("dtype")
        return ref.to(dtype) if dtype is not None and not isinstance(dtype, str) else ref

    grpo_trainer.create_model_from_path = create_reference
    try:
        yield
    finally:
        grpo_trainer.create_model_from_path = original


def _objectives(task: Any, rows: list[dict[str, Any]], own_name: str | None) -> int | None:
    """D of the training rows without scoring anything (None: your reward functions must score an
    answer first, which the trainer does at its first step)."""
    if own_name is None:
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


def _check_memory(model: str, args: Any, rows: list[dict[str, Any]], fmt: Any, answers: int, *, lora: bool,
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


def _format_record(info: Any, task: Any, params: dict[str, Any], method: str, answers: int, *,
                   own: bool) -> dict[str, Any]:
    """The run's ``vpo_format.json``: the starting checkpoint's prompt format when it records one
    (the demo's compact maze format), else the task's own prompts (``"task"``); with the task, its
    parameters, the method and m, so ``vpo eval`` on the model or any of its ``checkpoint-N``
    prompts and samples it as trained. Your own reward functions record no task (their prompts
    are ``--source``'s)."""
    if own:
        return {"format": "task", "method": method, "answers": answers}
    kept = info.record if info.record is not None and info.format_applies else None
    record = dict(kept) if kept is not None and kept.get("format") != "task" else {"format": "task"}
    record.update(task=task.name, task_params=params, method=method, answers=answers)
    return record


@contextlib.contextmanager
def _quiet_tied_keys(model: Any) -> Iterator[None]:
    """Drop transformers' "There were missing keys in the checkpoint model loaded" warning when
    every key it names is a tied weight (``lm_head.weight`` tied to the embeddings): a checkpoint
    saves a tied weight once, the resume ties it again, nothing is missing. Any other missing key
    is still reported."""
    import ast
    import logging

    prefix = "There were missing keys in the checkpoint model loaded: "
    names = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    tied = names - {name for name, _ in model.named_parameters()}

    class TiedKeys(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            message = record.getMessage()
            if not message.startswith(prefix):
                return True
            try:
                keys = ast.literal_eval(message[len(prefix):].rstrip("."))
            except (ValueError, SyntaxError):
                return True
            return not (keys and set(keys) <= tied)

    logger, quiet = logging.getLogger("transformers.trainer"), TiedKeys()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def finished_message(state: Mapping[str, Any], args: Any, checkpoint: str | Path, out: str | Path) -> str | None:
    """What to say instead of resuming from ``checkpoint`` (trainer ``state``, as
    ``check_resume_checkpoint`` read it) when its run already reached its length: ``--max-steps``
    (``args.max_steps`` > 0), else, with the epochs unchanged, the length the trainer computed for
    that run (its state's ``max_steps``). None when there is training left. Resuming a finished run
    would train one step past the end and save that model over the run's own."""
    step = int(state["global_step"])
    if args.max_steps > 0:
        length, flag, value = int(args.max_steps), "--max-steps", f"{args.max_steps}"
    elif state.get("max_steps") and state.get("num_train_epochs") == args.num_train_epochs:
        length, flag, value = int(state["max_steps"]), "--num-train-epochs", f"{args.num_train_epochs:g}"
    else:
        return None
    if step < length:
        return None
    from vpo.runs import TRAIN_RECORD, read_train_record

    saved = Path(out, TRAIN_RECORD)
    final = saved.is_file() and (read_train_record(saved).get("summary") or {}).get("steps") == step
    model = (f"its model is in {out}" if final else
             f"its final model was not saved to {out} (the run stopped after its last checkpoint): {checkpoint} is it")
    return (f"the run in {out} is finished: {checkpoint} is at step {step} of {length} ({flag} {value}); nothing to "
            f"train, nothing changed; {model}. To train on, raise {flag}; to start over, pass --overwrite")


def train(cfg: TrainArgs, rl: Any, engine: TRLOptions | None = None) -> int:
    """Run ``vpo train`` from its configs (``engine``: TRL's run settings, default TRL's own);
    returns 0. Prints where the model went."""
    from vpo.checkpoints import check_checkpoints, format_record_callback
    from vpo.estimators import get_spec
    from vpo.formats import FORMAT_FILE, TaskFormat, load_format, resolve_task_params
    from vpo.models import check_model_path, load_pretrained, resolve_model
    from vpo.runs import atomic_write_text, check_claim, claim_out_dir
    from vpo.tasks import get_task

    # every option and path is checked before TRL is imported or any data or model is read (seconds)
    check_fields(cfg)
    check_fields(rl)
    world = int(os.environ.get("WORLD_SIZE") or 1)  # processes of a distributed launch (accelerate, torchrun)
    if rl.per_device_train_batch_size * world * rl.gradient_accumulation_steps % rl.num_generations:
        raise ValueError(f"--per-device-train-batch-size ({rl.per_device_train_batch_size}) x "
                         f"--gradient-accumulation-steps ({rl.gradient_accumulation_steps})"
                         + (f" x {world} processes" if world > 1 else "")
                         + f" must be a multiple of --num-generations ({rl.num_generations}): a batch holds whole "
                         "groups")
    spec = get_spec(cfg.method)
    # the estimator's options (the weight flags and --estimator-options), their names checked here and their
    # values once the task gives D; VPOTrainer keys the weights on args.seed = --seed
    options = estimator_options(cfg)
    weight_options = WeightOptions(**{k: options[k] for k in ("num_weights", "alpha", "sampler") if k in options},
                                   seed=rl.seed)
    estimator_scale(getattr(engine, "scale_rewards", None), spec, options.get("scale"), flag=True)  # as VPOTrainer
    answers = answers_for(cfg.method, cfg.answers)  # VPOTrainer says the same, but only once the model has loaded
    cfg = copy.copy(cfg)
    cfg.model = resolve_model(cfg.model)  # an alias (smollm2) is its file from here on, as in every command
    check_model_path(cfg.model)
    # the first stage line, within seconds: TRL's import and the training rows come next
    print(f"train {cfg.method} (m = {answers}) from {cfg.model}: checking the settings, building the training rows",
          flush=True)
    if cfg.save:
        check_out_dir(cfg.out)
    engine = copy.copy(engine) if engine is not None else TRLOptions()
    check_fields(engine)
    check_engine(engine)
    engine.resume_from_checkpoint = _resume_path(engine.resume_from_checkpoint, cfg.out)
    if cfg.reward_funcs and cfg.task:
        raise ValueError("--task and --reward-funcs are alternatives: give one")
    own_name, own_params = resolve_task(cfg, None, source=cfg.source)
    scaling = None
    given = {} if own_name is not None else parse_params(cfg.task_params)
    if own_name is not None:
        params = own_params
        scaling = params.pop("scaling", None)  # the trainer's (minmax too: it has a batch); the task only reads rows
        task = get_task(own_name, **params)
    else:
        # a checkpoint that records its task (the demo's) is trained on that task, in its own format
        params = resolve_task_params(given, [cfg.model] if Path(cfg.model).is_dir() else [], task=cfg.task)
        task = apply_failure_policy(get_task(cfg.task, **params), cfg)
    source_rows = None
    if cfg.source and own_name is None:  # the layout of --source, read as it is: verl's is named at once
        source_rows = _load_rows(cfg.source)
        for i, row in enumerate(source_rows[:1]):
            _refuse_verl_row(row, i, cfg.source)
    _, (info,) = check_checkpoints([cfg.model], task=task.name, given=given)  # vouched for before the rows are built
    model_dir = info.path if info.kind in ("folder", "lora") and info.format_applies else None
    claim = dict(command="train", record={"method": cfg.method, "task": task.name, "answers": answers},
                 resume=engine.resume_from_checkpoint is not None, overwrite=cfg.overwrite)
    check_claim(cfg.out, **claim)  # a used --out, before the rows are built and the model is read
    args = grpo_args(cfg, rl, engine, task=task.name, answers=answers)  # TRL checks its values before the model loads
    if engine.resume_from_checkpoint is not None:
        from vpo.checkpoints import check_resume_checkpoint

        state = check_resume_checkpoint(engine.resume_from_checkpoint)  # its trainer state, each field checked
        finished = finished_message(state, args, engine.resume_from_checkpoint, cfg.out)
        if finished:  # resuming would train past the end and save over the run's model
            print(finished, flush=True)
            return 0
    if own_name is not None:  # the rows as they are: VPOTrainer(reward_funcs=) asks for m answers and passes columns
        from vpo.tasks.io import select

        rows = [task.validate(row, i) for i, row in enumerate(_load_rows(cfg.source))]
        rows = select(rows, n=cfg.examples, seed=cfg.data_seed if cfg.examples is not None else None)
        if not rows:
            raise ValueError(f"--source {cfg.source}: no training rows")
        own_setup(task, rows, answers, echo=False)  # a column your functions need: named before the model loads
    else:
        rows = build_train_rows(task, answers, data=cfg.source, n=cfg.examples, seed=cfg.data_seed,
                                goals=weight_options if spec.conditions_prompt else None, chat=True,
                                loaded=source_rows)
    check_estimator_options(cfg.method, options, answers=answers, objectives=_objectives(task, rows, own_name),
                            group_size=rl.num_generations)
    memory = _check_memory(cfg.model, args, rows, load_format(model_dir, task, chat=False), answers,
                           lora=cfg.lora, completion_given=rl.max_completion_length is not None)
    claim_out_dir(cfg.out, stale=("checkpoint-*",), **claim)
    record = _format_record(info, task, params, cfg.method, answers, own=own_name is not None)
    # the run's prompt format, task and m: in the run folder from the start (a checkpoint-N killed
    # before its own record landed inherits it), in every checkpoint-N, and beside the final model
    atomic_write_text(Path(cfg.out, FORMAT_FILE), json.dumps(record, indent=1, sort_keys=True, default=str))
    if engine.resume_from_checkpoint is not None:
        print(f"resuming from {engine.resume_from_checkpoint} (step {state['global_step']})", flush=True)
    from datasets import Dataset

    from vpo.integrations.trl import StepLines, VPOTrainer, chain_shares, label_progress

    from vpo.sampling import hide_library_progress

    hide_library_progress()  # transformers' weight loading and saving bars: noise between the step lines
    print(f"loading {cfg.model}" + (f" (memory: {memory})" if memory else ""), flush=True)
    model, tokenizer = load_pretrained(cfg.model)
    fmt = load_format(model_dir, task, tokenizer=tokenizer, chat=False)
    grpo_overrides: dict[str, Any] = {}
    chat_prompts = False
    if own_name is not None:
        if not isinstance(fmt, TaskFormat):
            raise ValueError(f"--reward-funcs trains on the prompts of --source, but {cfg.model} was trained on the "
                             f"{fmt.name!r} prompt format; start from a checkpoint without {FORMAT_FILE}")
        if cfg.chat_template and getattr(tokenizer, "chat_template", None):
            # a string prompt goes to the model as one user turn (TRL applies the chat template); your
            # functions still get the string and text completions, as the check and eval give them
            chat_prompts = True
            grpo_overrides["chat_template_kwargs"] = {"enable_thinking": False}
        elif any(not isinstance(row["prompt"], str) for row in rows):
            raise ValueError(f"--source {cfg.source} has chat-turn prompts, but "
                             + ("--no-chat-template is set" if not cfg.chat_template else
                                f"the tokenizer of {cfg.model} has no chat template") + " to render them")
    elif not isinstance(fmt, TaskFormat):
        if spec.conditions_prompt:
            raise ValueError(f"--method {cfg.method} states goal weights in the task's prompts, but {cfg.model} was "
                             f"trained on the {fmt.name!r} prompt format, which has no place for them")
        examples = [json.loads(row["example"]) for row in rows]
        for row, example in zip(rows, examples, strict=True):
            row["prompt"] = fmt.prompt(example, answers)
        if rl.max_completion_length is None:
            grpo_overrides["max_completion_length"] = fmt.completion_budget(examples, answers)
    elif cfg.chat_template and getattr(tokenizer, "chat_template", None):
        # the rows hold the task's chat turns, as verl and evaluation send them (toolcall: system + user)
        grpo_overrides["chat_template_kwargs"] = {"enable_thinking": False}
    else:  # no chat template: one string per prompt, the task's merged prompt
        for row in rows:
            if not isinstance(row["prompt"], str):
                row["prompt"] = task.prompt(json.loads(row["example"]), answers)
    dataset = Dataset.from_list(rows)
    if grpo_overrides:
        args = grpo_args(cfg, rl, engine, task=task.name, answers=answers, **grpo_overrides)

    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    with _reference_from_policy(model, enabled=peft_config is None and float(args.beta) != 0.0):
        objectives: dict[str, Any] = (
            {"task": task} if own_name is None else  # your functions, each called once per step on all answers
            {"reward_funcs": task.reward_funcs, "reward_names": task.reward_names, "scaling": scaling,
             "reward_failures": task.failures.policy, "chat_prompts": chat_prompts})
        trainer = VPOTrainer(model, answers=answers, estimator=cfg.method, estimator_options=options,
                             args=args, train_dataset=dataset, processing_class=tokenizer,
                             peft_config=peft_config, untagged_fallback=cfg.untagged_fallback, **objectives)
    # transformers hides the bar below its WARNING log level; its 40-key dicts per step go to the log file
    bar = cfg.progress and not trainer.args.disable_tqdm
    label_progress(trainer, f"train {cfg.method}", show=bar, logs=False)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    lines = StepLines(str(Path(cfg.out) / "train_log.jsonl"), heartbeat=None if bar else HEARTBEAT_S,
                      own_line=bar and not sys.stderr.isatty())
    trainer.add_callback(lines)
    trainer.add_callback(format_record_callback(record))
    length = (f"{args.max_steps} steps" if args.max_steps > 0 else
              f"{args.num_train_epochs:g} epoch(s) of {len(rows)} rows")
    for line in getattr(trainer, "vpo_length_budgets", ()):  # chain-level length budgets scaled by m
        print(line, flush=True)
    print(f"training: {length}, a line every {args.logging_steps} step(s) (the full log: "
          f"{Path(cfg.out) / 'train_log.jsonl'})", flush=True)
    with _quiet_tied_keys(trainer.model):  # a resume's harmless lm_head "missing keys" warning
        trainer.train(resume_from_checkpoint=engine.resume_from_checkpoint)
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    summary = {"task": task.name, "method": cfg.method, "answers": answers, "steps": trainer.state.global_step,
               "first_reward": rewards[0] if rewards else None, "last_reward": rewards[-1] if rewards else None,
               **chain_shares(trainer.state.log_history)}  # more than m answers, cut at the budget: run means
    if cfg.save:
        trainer.save_model(cfg.out)
        tokenizer.save_pretrained(cfg.out)
        atomic_write_text(Path(cfg.out, "vpo_train.json"), json.dumps(
            {"train": {k: v for k, v in vars(cfg).items()}, "rl": rl.as_dict(), "trl": dataclasses.asdict(engine),
             "summary": summary},
            indent=2, default=str))
        atomic_write_text(Path(cfg.out, FORMAT_FILE), json.dumps(record, indent=1, sort_keys=True, default=str))
    print(json.dumps(summary))
    if cfg.save:
        print(f"saved to {cfg.out}")
    note = unparsed_note(trainer.state.log_history, answers, Path(cfg.out) / "train_log.jsonl",
                         fallback=bool(getattr(cfg, "untagged_fallback", False)), own=own_name is not None)
    if not isinstance(fmt, TaskFormat):  # a checkpoint's own format (the demo's): its warm-up teaches it
        note = None
    if note:
        print(note, flush=True)
    return 0


def unparsed_note(history: list[dict[str, Any]], answers: int, log: Path, *, fallback: bool = False,
                  own: bool = True) -> str | None:
    """The exit line of an m-answer run in which no completion wrote its answers in the chain's
    numbered tags (``vpo/answers_parsed``, or the parse rate, 0 at every logged step): every
    reward was then 0 and nothing was learned, which the step lines alone do not say. None
    otherwise (m = 1 has no chain format; with the untagged fallback an untagged completion
    still scored). The parse-rate warning during the run names the same remedies; the chain
    warm-up (``vpo warmup``) is offered for your own reward functions (``own``), whose prompts it
    reads."""
    rates = [float(h[key]) for h in history for key in ("vpo/answers_parsed", "vpo/parse_rate") if key in h]
    if answers < 2 or fallback or not rates or max(rates) > 0:
        return None
    warmup = "warm the model up on m-answer chains of its own samples (`vpo warmup`), " if own else ""
    return (f"no completion wrote its answers in the numbered tags of an m = {answers} chain (vpo/answers_parsed "
            f"was 0 at every logged step, {log}), so every reward was 0 and the model got no gradient. Remedies: "
            f"`vpo train --untagged-fallback` (an untagged completion counts as one answer), {warmup}or ask for "
            "fewer answers (docs/own_rewards.md, 'A model that does not write m answers')")

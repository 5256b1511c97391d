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
from vpo.integrations.trl.plan import build_train_rows, grpo_config, load_rows, plan_training, refuse_verl_row

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
    return grpo_config(rl, engine, cfg.out, task=task, answers=answers, **derived)


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


def _checked(cfg: TrainArgs, rl: Any, engine: TRLOptions | None) -> tuple[TrainArgs, TRLOptions, dict[str, Any], int]:
    """``cfg`` (its model alias resolved) and ``engine`` (its resume folder found), the estimator's
    options and m, once every option and path is checked: before TRL is imported or any data or
    model is read (seconds). Prints the first stage line."""
    from vpo.estimators import get_spec
    from vpo.models import check_model_path, resolve_model

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
    return cfg, engine, options, answers


def _task(cfg: TrainArgs) -> tuple[Any, dict[str, Any], dict[str, Any], bool, Any]:
    """``(task, params, given, own, scaling)``: the task to train on with its parameters (``given``:
    those typed), whether it is your reward functions' (``own``) and their scaling."""
    from vpo.formats import resolve_task_params
    from vpo.tasks import get_task

    own_name, own_params = resolve_task(cfg, None, source=cfg.source)
    if own_name is not None:
        scaling = own_params.pop("scaling", None)  # the trainer's (minmax too: it has a batch); the task reads rows
        return get_task(own_name, **own_params), own_params, {}, True, scaling
    given = parse_params(cfg.task_params)
    # a checkpoint that records its task (the demo's) is trained on that task, in its own format
    params = resolve_task_params(given, [cfg.model] if Path(cfg.model).is_dir() else [], task=cfg.task)
    return apply_failure_policy(get_task(cfg.task, **params), cfg), params, given, False, None


def train(cfg: TrainArgs, rl: Any, engine: TRLOptions | None = None) -> int:
    """Run ``vpo train`` from its configs (``engine``: TRL's run settings, default TRL's own);
    returns 0. Prints where the model went. The run is a ``TrainPlan`` (``vpo.integrations.trl.plan``)."""
    from vpo.checkpoints import check_checkpoints, format_record_callback
    from vpo.formats import FORMAT_FILE, TaskFormat
    from vpo.models import load_pretrained
    from vpo.runs import atomic_write_text, check_claim, claim_out_dir

    cfg, engine, options, answers = _checked(cfg, rl, engine)
    task, params, given, own, scaling = _task(cfg)
    source_rows = None
    if cfg.source and not own:  # the layout of --source, read as it is: verl's is named at once
        source_rows = load_rows(cfg.source)
        for i, row in enumerate(source_rows[:1]):
            refuse_verl_row(row, i, cfg.source)
    _, (info,) = check_checkpoints([cfg.model], task=task.name, given=given)  # vouched for before the rows are built
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
    weights = WeightOptions(**{k: options[k] for k in ("num_weights", "alpha", "sampler") if k in options},
                            seed=rl.seed)
    plan = plan_training(task, method=cfg.method, answers=answers, rl=rl, engine=engine, out=cfg.out, model=cfg.model,
                         checkpoint=info, params=params, options=options, own=own, scaling=scaling,
                         source=cfg.source, examples=cfg.examples, data_seed=cfg.data_seed, weights=weights,
                         lora_rank=cfg.lora_rank if cfg.lora else None, lora_alpha=cfg.lora_alpha,
                         loaded=source_rows, args=args)
    if plan.own:  # a column your functions need: named before the model loads
        own_setup(task, plan.rows, answers, echo=False)
    check_estimator_options(cfg.method, options, answers=answers, objectives=plan.objectives,
                            group_size=rl.num_generations)
    claim_out_dir(cfg.out, stale=("checkpoint-*",), **claim)
    # the run's prompt format, task and m: in the run folder from the start (a checkpoint-N killed
    # before its own record landed inherits it), in every checkpoint-N, and beside the final model
    atomic_write_text(Path(cfg.out, FORMAT_FILE), json.dumps(plan.record, indent=1, sort_keys=True, default=str))
    if engine.resume_from_checkpoint is not None:
        print(f"resuming from {engine.resume_from_checkpoint} (step {state['global_step']})", flush=True)
    from vpo.integrations.trl import StepLines, chain_shares, label_progress
    from vpo.sampling import hide_library_progress

    hide_library_progress()  # transformers' weight loading and saving bars: noise between the step lines
    print(f"loading {cfg.model}" + (f" (memory: {plan.memory})" if plan.memory else ""), flush=True)
    model, tokenizer = load_pretrained(cfg.model)
    plan = plan.for_tokenizer(tokenizer, chat_template=cfg.chat_template)
    trainer = plan.trainer(model, tokenizer, untagged_fallback=cfg.untagged_fallback)
    args = plan.args
    # transformers hides the bar below its WARNING log level; its 40-key dicts per step go to the log file
    bar = cfg.progress and not trainer.args.disable_tqdm
    label_progress(trainer, f"train {cfg.method}", show=bar, logs=False)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    log = Path(cfg.out) / "train_log.jsonl"
    trainer.add_callback(StepLines(str(log), heartbeat=None if bar else HEARTBEAT_S,
                                   own_line=bar and not sys.stderr.isatty()))
    trainer.add_callback(format_record_callback(plan.record))
    length = (f"{args.max_steps} steps" if args.max_steps > 0 else
              f"{args.num_train_epochs:g} epoch(s) of {len(plan.rows)} rows")
    for line in getattr(trainer, "vpo_length_budgets", ()):  # chain-level length budgets scaled by m
        print(line, flush=True)
    print(f"training: {length}, a line every {args.logging_steps} step(s) (the full log: {log})", flush=True)
    with _quiet_tied_keys(trainer.model):  # a resume's harmless lm_head "missing keys" warning
        trainer.train(resume_from_checkpoint=engine.resume_from_checkpoint)
    history = trainer.state.log_history
    rewards = [h["reward"] for h in history if "reward" in h]
    summary = {"task": task.name, "method": cfg.method, "answers": answers, "steps": trainer.state.global_step,
               "first_reward": rewards[0] if rewards else None, "last_reward": rewards[-1] if rewards else None,
               **chain_shares(history)}  # more than m answers, cut at the budget: run means
    if cfg.save:
        _save(trainer, tokenizer, cfg, rl, engine, summary, plan.record)
    print(json.dumps(summary))
    if cfg.save:
        print(f"saved to {cfg.out}")
    note = unparsed_note(history, answers, log, fallback=bool(getattr(cfg, "untagged_fallback", False)),
                         own=plan.own)
    if note and isinstance(plan.fmt, TaskFormat):  # a checkpoint's own format (the demo's): its warm-up teaches it
        print(note, flush=True)
    return 0


def _save(trainer: Any, tokenizer: Any, cfg: TrainArgs, rl: Any, engine: TRLOptions, summary: dict[str, Any],
          record: dict[str, Any]) -> None:
    """The final model (or adapter) and tokenizer in ``cfg.out``, with the run's record
    (``vpo_train.json``: its configs and summary) and its prompt format."""
    from vpo.formats import FORMAT_FILE
    from vpo.runs import atomic_write_text

    trainer.save_model(cfg.out)
    tokenizer.save_pretrained(cfg.out)
    atomic_write_text(Path(cfg.out, "vpo_train.json"), json.dumps(
        {"train": dict(vars(cfg)), "rl": rl.as_dict(), "trl": dataclasses.asdict(engine), "summary": summary},
        indent=2, default=str))
    atomic_write_text(Path(cfg.out, FORMAT_FILE), json.dumps(record, indent=1, sort_keys=True, default=str))


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

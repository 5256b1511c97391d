"""``vpo data``: export task examples as veRL / TRL training tables, or preview a prompt.

Usage::

    vpo data export maze --out data/maze --format verl            # 1000 train (seed 42), 100 test (seed 4242)
    vpo data export musique --out data/musique --format trl --answers 3 \\
        --source 'musique_ans_v1.0_{split}.jsonl' --train 20000 --test 300
    vpo data export maze --out data/maze7 --size 7 --task-params reward_mode=convex_bonus
    vpo data preview toolcall --answers 3
    vpo data export --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source prompts.jsonl \\
        --out data/mine --format verl --answers 3

The test split's seed is ``100 * seed + 42`` (``vpo.export.test_seed``). ``--size`` only
reaches tasks that take a size (maze). ``--source`` is a local jsonl/json/parquet file or
folder (``{split}`` is replaced by the split name) or a Hugging Face dataset name; without it
the text tasks read their shipped fixtures, which are tiny samples, not the benchmarks.
``--reward-funcs`` (your own reward functions, TRL's contract) with ``--source`` (the prompts)
replace the task: the rows are the ``own_rewards`` task's, with the functions recorded in
``task_params``, so verl's ``compute_score``, OpenRLHF's reward file and ``trl grpo``'s
dotted-path rewards score them with your functions.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from vpo.commands.options import RewardFuncsOptions, estimator_names, task_help
from vpo.commands.rewards import failure_policy_given, resolve_task
from vpo.config import add_dataclass_args, check_out_dir, dataclass_from_args, field_like, parse_params
from vpo.estimators.options import WeightOptions

FORMATS = ("verl", "trl")


@dataclass
class ExportConfig(RewardFuncsOptions):
    """Flags of ``vpo data export``."""

    out: str | None = field(default=None,
                            metadata={"help": "output folder for train.parquet and test.parquet (required)"})
    format: str = field(default="verl", metadata={"help": "table layout", "choices": FORMATS})
    trl_prompt: str = field(default="chat", metadata={
        "help": "TRL prompt column: the task's chat turns (TRL's conversational format) or one merged string "
                "(text: for tokenizers without a chat template)", "choices": ("chat", "text")})
    size: int = field(default=9, metadata={"help": "grid size, for tasks that take one (maze)"})
    train: int = field(default=1000, metadata={"help": "train rows (0 skips the split)", "min": 0})
    test: int = field(default=100, metadata={"help": "test rows (0 skips the split)", "min": 0})
    seed: int = field(default=42, metadata={"help": "train seed; the test seed is 100*seed+42", "min": 0})
    answers: int | None = field(default=None, metadata={
        "help": "answers per generation m (m > 1: multi-answer prompt); default: the --method's own, as vpo train "
                "(3 for multi-answer estimators, else 1), and 1 without --method", "min": 1})
    source: str | None = field(default=None,
                               metadata={"help": "data file/folder/HF dataset name for file-backed tasks"})
    task_params: list[str] = field(default_factory=list, metadata={
        "help": "task parameters key=value (value JSON or text)", "aliases": ("--param",)})
    method: str = field(default="", metadata={
        "help": "the estimator the data is for, when its prompts differ (goal_conditioned: each prompt states "
                "its goal weights, also stored in the ground truth; the estimator sets m's default)",
        "choices": lambda: ["", *estimator_names()]})
    goal_seed: int = field(default=0, metadata={"help": "seed of the goal weights (--method goal_conditioned)",
                                                "min": 0})
    overlap: bool = field(default=False, metadata={
        "help": "let train and test share examples (by default a source that serves both splits the same rows is "
                "split: test first, train gets the rest)"})
    alpha: float = field_like(WeightOptions, "alpha",
                              help="Dirichlet concentration of the goal weights (--method goal_conditioned)")
    require_source: bool = field(default=False, metadata={
        "help": "stop, naming --source, when the rows would come from the task's shipped sample (a few invented "
                "rows for tests and demos) instead of real data; the training recipes pass it"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the export already in --out (without it such a folder is refused)"})


@dataclass
class PreviewConfig:
    """Flags of ``vpo data preview``."""

    answers: int = field(default=1, metadata={"help": "answers per generation m", "min": 1})
    index: int = field(default=0, metadata={"help": "which example to show", "min": 0})
    split: str = field(default="test", metadata={"help": "split to read"})
    size: int = field(default=9, metadata={"help": "grid size, for tasks that take one (maze)"})
    seed: int = field(default=42, metadata={"help": "seed of the split", "min": 0})
    source: str | None = field(default=None, metadata={"help": "data file/folder/HF dataset name"})
    task_params: list[str] = field(default_factory=list, metadata={
        "help": "task parameters key=value (value JSON or text)", "aliases": ("--param",)})


def _check_task(name: str, params: dict[str, Any], size: int) -> None:
    """Build the task once with --task-params alone, then with --size, so a bad value is named
    by its flag before any example is generated."""
    from vpo.export import make_task

    try:
        make_task(name, params)
    except ValueError as err:
        raise ValueError(f"--task-params: {err}" if params else str(err)) from None
    try:
        make_task(name, params, size=size)
    except ValueError as err:
        raise ValueError(f"--size {size}: {err}") from None


def _task_name(args: argparse.Namespace, cfg: Any) -> tuple[str, dict[str, Any] | None]:
    """The task to export and, for ``--reward-funcs``, its parameters (the positional TASK and
    ``--reward-funcs`` are alternatives)."""
    if cfg.reward_funcs:
        args.task_given = bool(args.task)
        name, params = resolve_task(cfg, args, source=cfg.source, task_flag="TASK")
        return name or "", params
    if not args.task:
        raise ValueError(f"give a TASK ({task_help()}) or --reward-funcs with --source")
    return args.task, None


def run_export(args: argparse.Namespace) -> int:
    from vpo.export import export

    cfg = dataclass_from_args(ExportConfig, args)
    if not cfg.out:
        raise ValueError("--out is required")
    check_out_dir(cfg.out)
    task_name, own_params = _task_name(args, cfg)
    if cfg.require_source:
        from vpo.export import reads_shipped_sample

        if reads_shipped_sample(task_name, cfg.source):
            raise ValueError(f"task {task_name} needs real data: pass --source FILE (e.g. with EXPORT_ARGS in the "
                             f"recipes); without it vpo exports the shipped sample, a few invented rows for tests"
                             + (f", and --source {cfg.source} is that sample" if cfg.source else ""))
    if cfg.trl_prompt != "chat" and cfg.format != "trl":
        raise ValueError("--trl-prompt applies to --format trl (verl rows always hold the chat turns)")
    task_params = own_params if own_params is not None else parse_params(cfg.task_params)
    if own_params is None and failure_policy_given(cfg):  # recorded in the rows, as --reward-funcs records them
        task_params["max_failure_rate"] = cfg.max_failure_rate
        if cfg.reward_time_limit is not None:
            task_params["time_limit"] = cfg.reward_time_limit
    _check_task(task_name, task_params, cfg.size)
    if own_params is not None:  # a column your functions need and the rows lack: named before a row is written
        from vpo.export import make_task

        own, _ = make_task(task_name, task_params)
        own.check_columns(own.examples("train", source=cfg.source))
    from vpo.runs import claim_out_dir

    claim_out_dir(cfg.out, command="data export", overwrite=cfg.overwrite, resume_flag="")
    goals = None
    answers = cfg.answers if cfg.answers is not None else 1
    if cfg.method:
        from vpo.commands.options import answers_for
        from vpo.estimators import get_spec

        answers = answers_for(cfg.method, cfg.answers)
        if get_spec(cfg.method).conditions_prompt:
            goals = WeightOptions(alpha=cfg.alpha, seed=cfg.goal_seed)
    result = export(task_name, cfg.out, fmt=cfg.format, train=cfg.train, test=cfg.test, seed=cfg.seed,
                    answers=answers, source=cfg.source, task_params=task_params,
                    size=cfg.size, goals=goals, overlap=cfg.overlap, chat=cfg.trl_prompt == "chat",
                    method=cfg.method or None)
    for split in ("train", "test"):
        if split in result:
            print(f"{split}: {result['counts'][split]} rows (seed {result['seeds'][split]}) -> {result[split]}")
    if result["overlap_removed"]:
        print(f"train and test share a source: the {result['overlap_removed']} test examples were left out of train "
              "(--overlap keeps them)")
    for line in result["short"]:
        print(f"warning: {line}")
    print(f"task {task_name} params {json.dumps(result['task_params'])}, format {cfg.format}, "
          f"answers {answers}" + (f" (--method {cfg.method}'s default)" if cfg.answers is None and cfg.method else ""))
    return 0


def run_preview(args: argparse.Namespace) -> int:
    from vpo.export import make_task

    cfg = dataclass_from_args(PreviewConfig, args)
    _check_task(args.task, parse_params(cfg.task_params), cfg.size)
    task, params = make_task(args.task, parse_params(cfg.task_params), size=cfg.size)
    kwargs: dict[str, Any] = {"seed": cfg.seed}
    if cfg.source is not None:
        kwargs["source"] = cfg.source
    examples = task.examples(cfg.split, cfg.index + 1, **kwargs)
    if len(examples) <= cfg.index:
        raise ValueError(f"split {cfg.split!r} has only {len(examples)} examples")
    example = examples[cfg.index]
    print(f"# task {task.name} {json.dumps(params)}; objectives: {', '.join(task.objective_names(example))}")
    chat = getattr(task, "messages", None)
    if callable(chat):
        for message in chat(example, cfg.answers):
            print(f"--- {message['role']} ---\n{message['content']}")
    else:
        print(task.prompt(example, cfg.answers))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="export task data for veRL / TRL, preview prompts",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    export_parser = sub.add_parser("export", help="write train.parquet and test.parquet for a task")
    export_parser.add_argument("task", nargs="?", default="", help=f"{task_help()}; or --reward-funcs")
    add_dataclass_args(export_parser, ExportConfig)
    export_parser.set_defaults(func=run_export)
    preview_parser = sub.add_parser("preview", help="print one example's prompt")
    preview_parser.add_argument("task", help=task_help())
    add_dataclass_args(preview_parser, PreviewConfig)
    preview_parser.set_defaults(func=run_preview)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)

"""``vpo advantages``: run an estimator on a batch and print scores and advantages.

Usage::

    vpo advantages --groups 2 --rollouts 4 --answers 3 --objectives 4 --estimator vpo
    vpo advantages --estimator grpo --answers 1 --seed 7
    vpo advantages --estimator grpo --estimator-options scale=none,eps=1e-4
    vpo advantages --task maze --task-params size=5 --estimator vpo
    vpo advantages --task math --completions samples.jsonl --answers 3

The batch is synthetic by default: each answer's reward vector has components in {0, 0.25, ...,
1}, and some answers are zero rows (what a duplicate or unparseable answer becomes after a task
deduplicates and pads a chain). With ``--task`` the rewards are the task's own: each of
``--groups`` examples gets ``--rollouts`` chains of m answers drawn (by ``--seed``) from the
example's oracle answers (``Task.oracle_answers``: the maze's three oracle routes, the gold
answer of the text tasks; a task without them is refused, naming the method to define, unless
``--completions`` gives the chains), each answer left blank with probability ``--zero-fraction``, scored
as training scores a chain (``task.score_chain``: parse, score, dedup, zero-pad). With
``--completions`` the chains are yours: rows with the task ``example`` (a dict or JSON, as
``vpo data export --format trl`` writes it) and the model's ``completion`` text; the rows of one
example form a group. The table shows each rollout's answers, its score (the per-rollout scalar
before normalisation) and its advantage, then the estimator's diagnostics.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.commands.options import (EstimatorOptions, answers_for, check_estimator_options, estimator_options,
                                  task_help)
from vpo.config import add_dataclass_args, check_fields, dataclass_from_args, parse_params


@dataclass
class AdvantagesConfig(EstimatorOptions):
    """Options of ``vpo advantages``."""

    groups: int = field(default=2, metadata={"help": "number of prompt groups G (with --task: examples)", "min": 1})
    rollouts: int = field(default=4, metadata={"help": "rollouts per group", "min": 1})
    answers: int | None = field(default=None, metadata={
        "help": "answers per rollout m (default, as vpo train: 3 for multi-answer estimators, else 1)", "min": 1})
    objectives: int = field(default=4, metadata={"help": "objectives D per answer (synthetic batch; a task sets "
                                                         "its own)", "min": 1})
    seed: int = field(default=0, metadata={"help": "seed of the batch and of the weights", "min": 0})
    zero_fraction: float = field(default=0.2, metadata={"help": "probability that an answer is a zero row (with "
                                                                "--task: a blank answer)", "min": 0.0, "max": 1.0})
    task: str = field(default="", metadata={"help": lambda: f"score a task's answers instead of a synthetic batch; "
                                                            f"{task_help()}"})
    task_params: list[str] = field(default_factory=list, metadata={
        "help": "task parameters key=value (value JSON or text), with --task", "aliases": ("--param",)})
    split: str = field(default="test", metadata={"help": "split of the task's examples, with --task"})
    source: str | None = field(default=None, metadata={"help": "data file/folder/HF dataset name of the task's "
                                                               "examples, with --task"})
    completions: str | None = field(default=None, metadata={
        "help": "score your model's completions instead of the oracle answers: a JSONL/JSON/parquet file of rows "
                "with 'example' (the task example) and 'completion' (the model's text), with --task"})


def random_batch(cfg: AdvantagesConfig) -> tuple[list[np.ndarray], list[str]]:
    """A reproducible synthetic batch: B = groups * rollouts matrices (answers, objectives)
    on a quarter grid, and the group label of each rollout ("p0", "p1", ...)."""
    check_fields(cfg)
    from vpo.estimators import get_spec
    from vpo.weights import keyed_rng

    rng = keyed_rng(cfg.seed, "vpo advantages: synthetic batch")
    num = cfg.groups * cfg.rollouts
    m = cfg.answers if cfg.answers is not None else get_spec(cfg.method).default_answers
    rewards = rng.integers(0, 5, size=(num, m, cfg.objectives)) / 4.0
    rewards[rng.random((num, m)) < cfg.zero_fraction] = 0.0
    labels = [f"p{g}" for g in range(cfg.groups) for _ in range(cfg.rollouts)]
    return list(rewards), labels


def chain_text(task: Any, answers: list[str]) -> str:
    """One generation holding ``answers`` in the task's chain format (``Task.format_chain``), as a
    model answering the m-answer prompt writes them; one answer is the text itself. Blank
    answers are left out (the task's parser drops them before scoring anyway)."""
    if len(answers) == 1:
        return answers[0]
    kept = [answer for answer in answers if answer.strip()]
    return task.format_chain(kept) if kept else ""


def task_examples(cfg: AdvantagesConfig, task: Any) -> list[dict[str, Any]]:
    """``--groups`` examples of ``--split`` (seeded by ``--seed``), each with oracle answers."""
    kwargs: dict[str, Any] = {"seed": cfg.seed}
    if cfg.source is not None:
        kwargs["source"] = cfg.source
    examples = task.examples(cfg.split, cfg.groups, **kwargs)
    if not examples:
        raise ValueError(f"task {task.name!r} gave no examples for split {cfg.split!r}")
    without = next((i for i, example in enumerate(examples) if not task.oracle_answers(example)), None)
    if without is not None:
        ident = examples[without].get("id", without) if isinstance(examples[without], dict) else without
        raise ValueError(f"task {task.name!r} has no oracle answers for example {ident!r}: define "
                         f"{type(task).__name__}.oracle_answers(example) (answer texts from the example's gold data; "
                         "docs/extending.md), or score your model's completions instead with --completions FILE")
    return examples


def oracle_batch(cfg: AdvantagesConfig, task: Any, examples: list[dict[str, Any]],
                 m: int) -> tuple[list[np.ndarray], list[str], list[str]]:
    """``--task``: (B reward matrices, group labels, one line per group naming its example) of
    ``--rollouts`` chains per example drawn from its oracle answers, each answer blank with
    probability ``zero_fraction``, scored by ``task.score_chain``."""
    from vpo.weights import keyed_rng

    rng = keyed_rng(cfg.seed, "vpo advantages: oracle chains")
    rewards, labels, legend = [], [], []
    for g, example in enumerate(examples):
        oracle = task.oracle_answers(example)
        label = f"p{g}"
        legend.append(f"{label} = example {example.get('id', g)} ({len(oracle)} oracle answer(s))")
        for _ in range(cfg.rollouts):
            picked = [oracle[int(i)] for i in rng.integers(0, len(oracle), size=m)]
            picked = ["" if rng.random() < cfg.zero_fraction else answer for answer in picked]
            rewards.append(task.score_chain(chain_text(task, picked), example, m))
            labels.append(label)
    return rewards, labels, legend


def read_completions(path: str, task: Any) -> list[tuple[dict[str, Any], str]]:
    """``--completions``: the file's (validated task example, completion text) rows."""
    from vpo.tasks.io import load_records

    rows = load_records(path, split="train")
    if not rows:
        raise ValueError(f"--completions {path}: no rows")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or row.get("example") is None or not isinstance(row.get("completion"), str):
            have = sorted(row) if isinstance(row, Mapping) else type(row).__name__
            raise ValueError(f"--completions {path}: row {i} needs an 'example' (the task example) and a "
                             f"'completion' (text); it has {have}")
        raw = row["example"]
        out.append((task.validate(json.loads(raw) if isinstance(raw, str) else dict(raw), i), row["completion"]))
    return out


def completions_batch(rows: list[tuple[dict[str, Any], str]], task: Any,
                      m: int) -> tuple[list[np.ndarray], list[str], list[str]]:
    """(reward matrices, group labels, legend) of ``read_completions`` rows, the rows of one example a group."""
    groups: dict[str, str] = {}
    rewards, labels = [], []
    for example, completion in rows:
        key = json.dumps(example, sort_keys=True, default=str)
        label = groups.setdefault(key, f"p{len(groups)}")
        rewards.append(task.score_chain(completion, example, m))
        labels.append(label)
    legend = [f"{label} = example {json.loads(key).get('id', '?')}" for key, label in groups.items()]
    return rewards, labels, legend


def _fmt(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text.replace("0.", ".", 1) if text.startswith("0.") else text or "0"


def format_table(rewards: list[np.ndarray], labels: list[str], scores: np.ndarray,
                 advantages: np.ndarray) -> str:
    """Plain-text table: group, rollout, answers' reward vectors, score, advantage."""
    cells = [" ".join("[" + " ".join(_fmt(x) for x in row) + "]" for row in matrix) or "(none)"
             for matrix in rewards]
    width = max(len("answers (reward vectors)"), *(len(c) for c in cells))
    lines = [f"{'group':<6} {'rollout':>7}  {'answers (reward vectors)':<{width}}  {'score':>7}  {'advantage':>9}"]
    lines.append("-" * len(lines[0]))
    seen: dict[str, int] = {}
    for label, cell, score, adv in zip(labels, cells, scores, advantages):
        index = seen[label] = seen.get(label, -1) + 1
        lines.append(f"{label:<6} {index:>7}  {cell:<{width}}  {score:>7.4f}  {adv:>+9.4f}")
    return "\n".join(lines)


def _task(cfg: AdvantagesConfig) -> Any:
    """The task of ``--task`` (None without it); the flags that need it, or clash with it, fail here."""
    if not cfg.task:
        for flag, value in (("--task-params", cfg.task_params), ("--source", cfg.source),
                            ("--completions", cfg.completions)):
            if value:
                raise ValueError(f"{flag} is for --task: give --task too")
        return None
    if cfg.objectives != AdvantagesConfig.objectives:
        raise ValueError("--objectives is for the synthetic batch: with --task the task's examples set D")
    if cfg.completions:  # the file sets the examples, the groups and the answers
        for name in ("groups", "rollouts", "zero_fraction", "split", "source"):
            if getattr(cfg, name) != getattr(AdvantagesConfig, name):
                raise ValueError(f"--{name.replace('_', '-')} is for the oracle chains: with --completions the "
                                 "file's rows are the rollouts, grouped by example")
    from vpo.tasks import get_task

    try:
        return get_task(cfg.task, **parse_params(cfg.task_params))
    except (TypeError, ValueError) as err:
        raise ValueError(f"--task {cfg.task}: {err}") from None


def run(args: argparse.Namespace) -> int:
    from vpo.estimators import get_spec

    cfg = dataclass_from_args(AdvantagesConfig, args)
    spec = get_spec(cfg.method)
    cfg = dataclasses.replace(cfg, answers=answers_for(cfg.method, cfg.answers))
    options = estimator_options(cfg, seed=cfg.seed)
    task = _task(cfg)
    if task is None:
        check_estimator_options(cfg.method, options, answers=cfg.answers, objectives=cfg.objectives,
                                group_size=cfg.rollouts)
        rewards, labels = random_batch(cfg)
        legend: list[str] = []
        source = f"{cfg.groups} groups x {cfg.rollouts} rollouts x {cfg.answers} answers x {cfg.objectives} objectives"
    elif cfg.completions:
        rows = read_completions(cfg.completions, task)
        sizes = Counter(json.dumps(example, sort_keys=True, default=str) for example, _ in rows)
        check_estimator_options(cfg.method, options, answers=cfg.answers, objectives=task.num_objectives(rows[0][0]),
                                group_size=min(sizes.values()))
        rewards, labels, legend = completions_batch(rows, task, cfg.answers)
        source = f"{len(rewards)} completions of {cfg.completions} on task {task.name} x {cfg.answers} answers"
    else:
        examples = task_examples(cfg, task)
        check_estimator_options(cfg.method, options, answers=cfg.answers,
                                objectives=task.num_objectives(examples[0]), group_size=cfg.rollouts)
        rewards, labels, legend = oracle_batch(cfg, task, examples, cfg.answers)
        source = (f"oracle answers of task {task.name}: {len(examples)} example(s) x {cfg.rollouts} rollouts x "
                  f"{cfg.answers} answers")
    result = spec.fn(rewards, labels, **options)
    shown = ", ".join(f"{k}={v}" for k, v in options.items())
    print(f"estimator {cfg.method}" + (f" ({shown})" if shown else "") + f": {source}")
    for line in legend:
        print(line)
    print(format_table(rewards, labels, result.scores, result.advantages))
    print()
    print("diagnostics:")
    for name, value in result.diagnostics.items():
        print(f"  {name:<28} {value:.6g}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "advantages", help="score a batch with an estimator and print advantages (synthetic, or a task's answers)",
        description=__doc__.split("\n\n")[0])
    add_dataclass_args(parser, AdvantagesConfig)
    parser.set_defaults(func=run)

"""``vpo advantages``: run an estimator on a random batch and print scores and advantages.

Usage::

    vpo advantages --groups 2 --rollouts 4 --answers 3 --objectives 4 --estimator vpo
    vpo advantages --estimator grpo --answers 1 --seed 7

The batch is synthetic: each answer's reward vector has components in {0, 0.25, ..., 1},
and some answers are zero rows (what a duplicate or unparseable answer becomes after a task
deduplicates and pads a chain). The table shows each rollout's answers, its score (the
per-rollout scalar before normalisation) and its advantage, then the estimator's diagnostics.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields

import numpy as np

from vpo.config import add_dataclass_args, check_fields, dataclass_from_args, field_like
from vpo.estimators.options import WeightOptions


def _estimator_names() -> list[str]:
    from vpo.estimators import list_estimators

    return list_estimators()


@dataclass
class AdvantagesConfig:
    """Options of ``vpo advantages``."""

    groups: int = field(default=2, metadata={"help": "number of prompt groups G", "min": 1})
    rollouts: int = field(default=4, metadata={"help": "rollouts per group", "min": 1})
    answers: int | None = field(default=None, metadata={
        "help": "answers per rollout m (default, as vpo train: 3 for multi-answer estimators, else 1)", "min": 1})
    objectives: int = field(default=4, metadata={"help": "objectives D per answer", "min": 1})
    method: str = field(default="vpo", metadata={"help": "advantage estimator", "choices": _estimator_names,
                                                 "aliases": ("--estimator",)})
    num_weights: int = field_like(WeightOptions, "num_weights", help="weights K per group (vpo)")
    alpha: float = field_like(WeightOptions, "alpha", help="Dirichlet concentration (vpo, random_weight)")
    sampler: str = field_like(WeightOptions, "sampler", help="simplex sampler (vpo, random_weight)")
    seed: int = field(default=0, metadata={"help": "seed of the batch and of the weights", "min": 0})
    zero_fraction: float = field(default=0.2, metadata={"help": "probability that an answer is a zero row",
                                                        "min": 0.0, "max": 1.0})


# Options of the config that some estimators take, and their defaults (to detect explicit use).
_SAMPLING_OPTIONS = ("num_weights", "alpha", "sampler")


def random_batch(cfg: AdvantagesConfig) -> tuple[list[np.ndarray], list[str]]:
    """A reproducible synthetic batch: B = groups * rollouts matrices (answers, objectives)
    on a quarter grid, and the group label of each rollout ("p0", "p1", ...)."""
    check_fields(cfg)
    from vpo.weights import keyed_rng

    from vpo.estimators import get_spec

    rng = keyed_rng(cfg.seed, "vpo advantages: synthetic batch")
    num = cfg.groups * cfg.rollouts
    m = cfg.answers if cfg.answers is not None else get_spec(cfg.method).default_answers
    rewards = rng.integers(0, 5, size=(num, m, cfg.objectives)) / 4.0
    rewards[rng.random((num, m)) < cfg.zero_fraction] = 0.0
    labels = [f"p{g}" for g in range(cfg.groups) for _ in range(cfg.rollouts)]
    return list(rewards), labels


def _options_for(cfg: AdvantagesConfig, accepted: tuple[str, ...]) -> dict:
    defaults = {f.name: f.default for f in fields(AdvantagesConfig)}
    options: dict = {}
    for name in _SAMPLING_OPTIONS:
        value = getattr(cfg, name)
        if name in accepted:
            options[name] = value
        elif value != defaults[name]:
            raise ValueError(f"--{name.replace('_', '-')} does not apply to estimator {cfg.method!r}")
    if "seed" in accepted:
        options["seed"] = cfg.seed
    return options


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


def run(args: argparse.Namespace) -> int:
    from vpo.estimators import get_estimator

    cfg = dataclass_from_args(AdvantagesConfig, args)
    if cfg.answers is None:
        from vpo.estimators import get_spec

        cfg = dataclasses.replace(cfg, answers=get_spec(cfg.method).default_answers)
    estimator = get_estimator(cfg.method)
    options = _options_for(cfg, estimator.options)
    rewards, labels = random_batch(cfg)
    try:
        result = estimator(rewards, labels, **options)
    except ValueError as err:
        if "one answer per rollout" in str(err):
            raise ValueError(f"{err}; try --answers 1") from None
        raise
    shown = ", ".join(f"{k}={v}" for k, v in options.items())
    print(f"estimator {cfg.method}" + (f" ({shown})" if shown else "")
          + f": {cfg.groups} groups x {cfg.rollouts} rollouts x {cfg.answers} answers x {cfg.objectives} objectives")
    print(format_table(rewards, labels, result.scores, result.advantages))
    print()
    print("diagnostics:")
    for name, value in result.diagnostics.items():
        print(f"  {name:<28} {value:.6g}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "advantages", help="score a random batch with an estimator and print advantages",
        description=__doc__.split("\n\n")[0])
    add_dataclass_args(parser, AdvantagesConfig)
    parser.set_defaults(func=run)

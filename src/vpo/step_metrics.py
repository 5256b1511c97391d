"""One metric vocabulary for every engine: the per-step chain and score metrics TRL, verl and
OpenRLHF log, made by one function each, under the same names.

Usage::

    from vpo.step_metrics import chain_metrics, score_metrics
    chain_metrics(answers=[3, 1], parsed=[3, 2], duplicates=[1, 0], best=[[1, 0.5], [0, 1]], names=["a", "b"])
    # {"vpo/answers_parsed": 2.0, "vpo/duplicate_rate": 0.2, "vpo/objective/a": 0.5, "vpo/objective/b": 0.75}
    score_metrics([0.2, 0.4, 0.9, 0.9], ["p", "p", "q", "q"])
    # {"vpo/score_mean": 0.6, "vpo/group_std": 0.05, "vpo/frac_zero_std": 0.5}

``METRICS`` names and explains each (``docs/algorithm.md`` §7 lists them per engine).

Shape glossary: B rollouts, G groups, D objectives.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import ZERO_STD

__all__ = ["METRICS", "chain_metrics", "score_metrics"]

METRICS: dict[str, str] = {
    "vpo/answers_parsed": "answers per rollout found in the chain's numbered tags (m = 1: 1 for non-blank text)",
    "vpo/duplicate_rate": "share of the step's non-blank answers that the task's dedup drops",
    "vpo/objective/<name>": "mean over rollouts of the best answer's value on objective <name>",
    "vpo/score_mean": "mean per-rollout score: the estimator's objective (its registered reduction)",
    "vpo/group_std": "mean over groups of the population std of the score within the group",
    "vpo/frac_zero_std": f"share of groups whose score std is below {ZERO_STD:g} (their advantages are 0)",
}
"""Every name this module makes, and what it measures."""


def chain_metrics(*, answers: Sequence[float], parsed: Sequence[float], duplicates: Sequence[float],
                  best: Any = None, names: Sequence[str] | None = None) -> dict[str, float]:
    """Chain metrics of one step's B rollouts.

    ``answers`` (B,) answers found in each chain's tags, ``parsed`` (B,) non-blank answers
    scored, ``duplicates`` (B,) those the dedup dropped, ``best`` (B, D) the best answer's value
    per objective (rows of D = ``len(names)``; None or ragged D: no objective metrics).
    """
    answers = np.asarray(answers, dtype=np.float64).reshape(-1)
    parsed_total = float(np.sum(parsed))
    out = {"vpo/answers_parsed": float(answers.mean()) if answers.size else 0.0,
           "vpo/duplicate_rate": float(np.sum(duplicates)) / parsed_total if parsed_total else 0.0}
    if best is not None and names:
        rows = [np.asarray(b, dtype=np.float64).reshape(-1) for b in best]
        if rows and all(r.shape == (len(names),) for r in rows):
            means = np.stack(rows).mean(axis=0)
            out.update({f"vpo/objective/{name}": float(v) for name, v in zip(names, means, strict=True)})
    return out


def score_metrics(scores: Sequence[float], group_ids: Sequence[Hashable]) -> dict[str, float]:
    """Score metrics of one step: the mean per-rollout score and its spread within groups
    (population std, the ``vpo`` estimator's; groups below ``ZERO_STD`` get zero advantages)."""
    from vpo.estimators.normalize import group_stats
    from vpo.objective import factorize

    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not values.size:
        return {}
    index, labels = factorize(list(group_ids), values.size)
    stds = group_stats(values, index, len(labels), 0)[2]
    return {"vpo/score_mean": float(values.mean()), "vpo/group_std": float(stds.mean()),
            "vpo/frac_zero_std": float((stds < ZERO_STD).mean())}

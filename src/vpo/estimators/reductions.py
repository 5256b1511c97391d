"""Per-rollout reductions: how one rollout's (M, D) reward matrix becomes the one number an
engine with scalar rewards (verl's ``compute_score``, OpenRLHF's reward function, a TRL reward
function) hands to the advantage rule, and, batched, the scores of the estimator itself.

Usage::

    from vpo.estimators import get_spec, reduction_context, rollout_score
    spec = get_spec("vpo")
    context = reduction_context(spec, key="train-3", dim=4, seed=0, step=7)   # the group's K weights
    rollout_score(spec, matrix, **context)      # == get_estimator("vpo")(...).scores[b]

A reduction is ``fn(matrix (M, D), *, <context>, <own options>) -> float``. Its keyword-only
parameters named in ``CONTEXT`` are supplied by the one writer of a group's context
(``vpo.estimators.context``: ``reduction_context`` builds them from the group key, the seed and
the step); any other keyword parameter is an option of the reduction, and of every estimator
registered with it.

The contract every reduction keeps (``check_estimator`` checks it): an empty matrix (M = 0,
nothing parseable) scores 0; for rewards >= 0 an all-zero row (what a task writes for a
duplicate or unparseable answer) scores like an absent answer, unless the estimator is
registered with ``counts_zero_rows=True`` and its docstring says why.

A reduction may carry a batched form (``@batched(form)``): ``form(stack, *, <context>, <own
options>) -> (G, N)`` scores every rollout of one D at once. ``stack`` is a
``vpo.objective.DimBucket``: ``padded`` (G, N, M, D) with ``counts`` (G, N) answers per slot
(rows past a rollout's count and filler slots hold ``pad_value`` <= every reward), or the real
rows ``rows`` (R, D) with ``row_slot`` / ``row_group`` and ``sum_rows``. Its context is the
per-rollout context stacked over the G groups: ``weights`` (G, K, D) (a
``vpo.objective.GroupWeights``: ``np.asarray(weights)``, or a block at a time), ``goal`` (G, D),
and ``scalar``. The estimator derived from a reduction calls the batched form once per D; without
one, it calls the reduction once per rollout (with the group's context built once per group).

Shape glossary: B rollouts, G groups, N rollouts per group, M answers per chain, D objectives,
K weights, R answer rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vpo.estimators.common import apply_scalar
from vpo.estimators.context import reduction_context
from vpo.estimators.spec import keyword_options

__all__ = ["CONTEXT", "batched", "fixed_scalar", "reduction_context", "rollout_score", "scalar_sum", "set_score",
           "weighted"]

CONTEXT = ("weights", "goal", "scalar")
"""What an adapter supplies to a reduction that names it:

* ``weights``: (K, D) the group's keyed weights (``vpo.weights.group_weights`` of the group key,
  seed and step, with the estimator's ``num_weights``, ``alpha`` and ``sampler``);
* ``goal``: (D,) the group's one weight vector: the one its prompt states (``conditions_prompt``)
  or the keyed draw ``group_weights([key], 1, D, seed=seed)`` fixed for the run;
* ``scalar``: the task's fixed scalarisation (N, D) -> (N,) (None: the mean over D).
"""


def batched(form: Callable[..., Any]) -> Callable[[Callable[..., float]], Callable[..., float]]:
    """Decorator: attach ``form`` as the batched form of a per-rollout reduction (``reduce.batched``).

    ``form(stack, *, <context stacked per group>, <own options>) -> (G, N)`` must equal the
    reduction on every rollout (``check_estimator`` checks it on every registered estimator).
    """
    def attach(reduce: Callable[..., float]) -> Callable[..., float]:
        reduce.batched = form  # type: ignore[attr-defined]
        return reduce

    return attach


def _single(stack: Any, name: str) -> None:
    most = int(stack.counts.max(initial=0))
    if most > 1:
        raise ValueError(f"{name} reduces one answer per rollout, got {most}")


def _set_score_batched(stack: Any, *, weights: Any) -> np.ndarray:
    from vpo.objective import GroupWeights, bucket_scores

    if not isinstance(weights, GroupWeights):
        weights = GroupWeights.stacked(np.asarray(weights, dtype=np.float64))
    scores = bucket_scores(stack.padded, weights)[0]  # a block of groups at a time, normalised after the max
    scores[stack.counts == 0] = 0.0  # an empty rollout scores 0 even when rewards can be < 0
    return scores


def _scalar_sum_batched(stack: Any, *, scalar: Callable | None = None) -> np.ndarray:
    return stack.sum_rows(apply_scalar(scalar, stack.rows))


def _fixed_scalar_batched(stack: Any, *, scalar: Callable | None = None) -> np.ndarray:
    _single(stack, "fixed_scalar")
    return _scalar_sum_batched(stack, scalar=scalar)


def _weighted_batched(stack: Any, *, goal: Any) -> np.ndarray:
    _single(stack, "weighted")
    goal = np.asarray(goal, dtype=np.float64)
    return stack.sum_rows(np.einsum("rd,rd->r", stack.rows, goal[stack.row_group]))


def _rows(matrix: Any) -> np.ndarray:
    rows = np.asarray(matrix, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"a reduction takes one rollout's (M, D) reward matrix, got shape {rows.shape}")
    return rows


@batched(_set_score_batched)
def set_score(matrix: Any, *, weights: Any) -> float:
    """VPO's set score E_w[max_i w . r_i] = (1/K) sum_k max_i w_k . r_i with the group's (K, D) weights."""
    from vpo.objective import set_scores

    rows = _rows(matrix)
    if rows.shape[0] == 0:
        return 0.0
    return float(np.asarray(set_scores([rows], np.asarray(weights, dtype=np.float64))).reshape(-1)[0])


@batched(_fixed_scalar_batched)
def fixed_scalar(matrix: Any, *, scalar: Callable | None = None) -> float:
    """The task's fixed scalar of the rollout's single answer (0 when it has none)."""
    rows = _rows(matrix)
    if rows.shape[0] > 1:
        raise ValueError(f"fixed_scalar reduces one answer per rollout, got {rows.shape[0]}")
    return float(apply_scalar(scalar, rows).sum())


@batched(_scalar_sum_batched)
def scalar_sum(matrix: Any, *, scalar: Callable | None = None) -> float:
    """The sum of the fixed scalar over the rollout's (deduplicated, zero-padded) answers."""
    return float(apply_scalar(scalar, _rows(matrix)).sum())


@batched(_weighted_batched)
def weighted(matrix: Any, *, goal: Any) -> float:
    """w . r of the rollout's single answer with the group's one weight vector ``goal`` (D,)."""
    rows = _rows(matrix)
    if rows.shape[0] > 1:
        raise ValueError(f"weighted reduces one answer per rollout, got {rows.shape[0]}")
    if rows.shape[0] == 0:
        return 0.0
    w = np.asarray(goal, dtype=np.float64).reshape(-1)
    if w.shape != (rows.shape[1],):
        raise ValueError(f"goal has {w.size} weights for D={rows.shape[1]} objectives")
    return float(rows[0] @ w)


def rollout_score(spec: Any, matrix: Any, **context: Any) -> float:
    """The per-rollout score of estimator ``spec`` for one rollout's (M, D) ``matrix``: its
    registered reduction called with ``context`` (what ``reduction_context`` builds, plus any of
    the reduction's own options). Context the reduction does not name is not passed; an
    option it does not take raises. ValueError for an estimator with no reduction (GDPO)."""
    if spec.reduce is None:
        raise ValueError(f"estimator {spec.name!r} has no per-rollout reduction (it needs the whole reward "
                         "vectors); an engine with one scalar reward per rollout cannot train it")
    accepted = keyword_options(spec.reduce)
    unknown = sorted(set(context) - set(accepted) - set(CONTEXT))
    if unknown:
        raise ValueError(f"estimator {spec.name!r}: its reduction takes no option(s) {', '.join(unknown)}; "
                         f"it takes {', '.join(accepted) or 'none'}")
    value = spec.reduce(matrix, **{k: v for k, v in context.items() if k in accepted})
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"estimator {spec.name!r}: its reduction returned {value}")
    return value

"""What every estimator shares: the result type, fixed scalars of answer rows, diagnostics.

Usage (inside an estimator)::

    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "grpo")             # ValueError naming a rollout with m > 1
    return make_result(batch, scores, advantages, group_std, prefix="grpo")

Shape glossary: B rollouts, G groups, M answers per chain, D objectives.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.objective import RewardBatch

__all__ = ["Diagnostics", "EstimatorResult", "ZERO_STD", "apply_scalar", "base_diagnostics", "make_result",
           "require_single_answer", "same_value"]

ZERO_STD = 1e-6
"""Groups whose score std is below this count in ``<name>/frac_zero_std``."""


@dataclass
class EstimatorResult:
    """What an estimator returns.

    ``advantages`` (B,) float64; ``scores`` (B,) the per-rollout scalar the advantage is
    computed from; ``diagnostics`` batch-level floats under stable ``<estimator>/...`` names
    (``vpo/...`` for VPO; a mapping, some of whose entries may be computed when first read:
    ``Diagnostics``); ``group_index`` (B,) index of each rollout's group in ``group_labels``
    (first-appearance order).
    """

    advantages: np.ndarray
    scores: np.ndarray
    diagnostics: Mapping[str, float] = field(default_factory=dict)
    group_index: np.ndarray | None = None
    group_labels: list[Hashable] | None = None


class Diagnostics(Mapping[str, float]):
    """An estimator's diagnostics: the ``ready`` ones, and those ``deferred()`` returns, computed
    the first time a name outside ``ready`` is read or the whole mapping is listed (they cost
    another pass over the batch, which a training step that reads none of them never pays)."""

    def __init__(self, ready: Mapping[str, float], deferred: Callable[[], Mapping[str, float]]) -> None:
        self._values = dict(ready)
        self._deferred: Callable[[], Mapping[str, float]] | None = deferred

    def _all(self) -> dict[str, float]:
        if self._deferred is not None:
            deferred, self._deferred = self._deferred, None
            self._values.update(deferred())
        return self._values

    def __getitem__(self, name: str) -> float:
        if name in self._values:
            return self._values[name]
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"Diagnostics({self._all()!r})"


def apply_scalar(scalar: Callable[[np.ndarray], Any] | None, rows: np.ndarray) -> np.ndarray:
    """Fixed scalarisation of answer rows: (N, D) -> (N,), checked (default: mean over D)."""
    if scalar is None:
        return rows.mean(axis=1) if rows.shape[0] else np.zeros(0)
    if not callable(scalar):
        raise ValueError(f"scalar must be a callable (N, D) -> (N,), got {type(scalar).__name__}")
    values = np.asarray(scalar(rows), dtype=np.float64).reshape(-1) if rows.shape[0] else np.zeros(0)
    if values.shape != (rows.shape[0],):
        raise ValueError(f"scalar returned shape {values.shape} for {rows.shape[0]} answer rows; expected ({rows.shape[0]},)")
    if not np.isfinite(values).all():
        raise ValueError("scalar returned NaN or inf")
    return values


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` for option values, identity for values with no single truth value (arrays)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a is b


def require_single_answer(batch: RewardBatch, name: str) -> None:
    """ValueError naming the first rollout with more than one answer."""
    many = batch.counts > 1
    if many.any():
        b = int(np.flatnonzero(many)[0])
        raise ValueError(f"estimator {name!r} takes one answer per rollout; rewards[{b}] has {batch.counts[b]} "
                         "(use 'vpo' or 'multi_rlvr' for multi-answer chains)")


def base_diagnostics(batch: RewardBatch, scores: np.ndarray, group_std: np.ndarray,
                     prefix: str = "vpo") -> dict[str, float]:
    """Batch diagnostics under ``<prefix>/...``: groups, score mean, group std, zero-std share,
    answers per group, empty-rollout share."""
    pool = np.bincount(batch.group_index, weights=batch.counts, minlength=batch.num_groups)
    std = group_std if group_std.ndim == 1 else group_std.mean(axis=1)
    return {
        f"{prefix}/num_groups": float(batch.num_groups),
        f"{prefix}/score_mean": float(scores.mean()) if scores.size else 0.0,
        f"{prefix}/group_std": float(std.mean()) if std.size else 0.0,
        f"{prefix}/frac_zero_std": float((std < ZERO_STD).mean()) if std.size else 0.0,
        f"{prefix}/mean_pool_size": float(pool.mean()) if pool.size else 0.0,
        f"{prefix}/frac_empty": float((batch.counts == 0).mean()) if batch.counts.size else 0.0,
    }


def make_result(batch: RewardBatch, scores: np.ndarray, advantages: np.ndarray, group_std: np.ndarray,
                extra: Mapping[str, float] | None = None, prefix: str = "vpo") -> EstimatorResult:
    diagnostics = base_diagnostics(batch, scores, group_std, prefix)
    diagnostics.update(extra or {})
    return EstimatorResult(advantages, scores, diagnostics, batch.group_index, batch.group_labels)

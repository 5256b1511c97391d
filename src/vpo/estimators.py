"""Advantage estimators: VPO and its baselines, one registry, engine-exact normalisation.

Usage::

    from vpo.estimators import get_estimator, list_estimators
    result = get_estimator("vpo")(rewards, group_ids, num_weights=100, seed=0, step=3)
    result.advantages      # (B,) float64, one per rollout (it multiplies all its tokens)
    result.scores          # (B,) per-rollout scalar before normalisation (VPO: R_g)
    result.diagnostics     # {"vpo/group_std": ..., "vpo/frac_zero_std": ..., ...}

Shape glossary: B rollouts, G groups, M answers per chain (m), D objectives, K weights.

Every estimator is called ``est(rewards, group_ids, **options)``: ``rewards`` is a list of B
reward matrices (m_i, D) (or one (B, M, D) array), ``group_ids`` (B,) hashable labels (a
group is a prompt; its rollouts need not be contiguous). Options are keyword-only and
checked: an unknown or inapplicable option raises ValueError naming it.

Built-in estimators (SPEC sections 1-2):

=============== ==================================================================== ==========================
name            per-rollout score                                                    advantage default
=============== ==================================================================== ==========================
``vpo``         R = mean_k max_i w_k . r_i, K weights per group shared by its rollouts population std, eps 1e-6, 0 if std < eps
``grpo``        fixed scalar of the single answer (m <= 1, m = 0 scores 0)            verl: Bessel std, eps 1e-6
``multi_rlvr``  sum of the fixed scalar over the (deduplicated, padded) rows          as grpo
``max_at_k``    Bagirov et al. unbiased E[max of k-subset] gradient weights           as grpo, one-member group 0
``gdpo``        z-norm each objective in the group, weighted sum, whiten over batch   verl gdpo
``maxrl``       (r - mean) / (mean + eps) of the fixed scalar                         one-member group 0
``random_weight`` w . r of the single answer, one w ~ Dir(alpha) per rollout          as grpo
=============== ==================================================================== ==========================

Normalisation knobs (``group_normalize``) reproduce each engine: ``std`` "population"
(ddof 0) or "sample" (ddof 1, Bessel); ``eps`` added to the std; ``degenerate`` "zero"
(a group with std < eps or one member gets 0: the VPO reference), "raw" (a one-member group
is normalised with mean 0 and std 1, no other guard: verl ``grpo``), "none" (no guard; a
one-member group has mean = its score so it gets 0: TRL); ``scale`` "group", "batch" (divide
by the std of the whole batch: TRL ``scale_rewards="batch"``) or "none" (Dr. GRPO).
TRL's own defaults are ``std="sample", eps=1e-4, degenerate="none", scale="group"``.

Weights (``vpo``, ``random_weight``): with ``seed`` a group's weights are a pure function of
(seed, group label, step) via ``vpo.weights.stream_keys`` / ``keyed_simplex``, so they are the
same on every rank and do not depend on which other groups share the batch. With ``rng`` they
are drawn from that Generator in first-appearance order of the groups. With neither, a fresh
OS-seeded Generator is used (not reproducible).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.objective import DimBucket, GroupWeights, RewardBatch, bucket_scores, check_weights
from vpo.weights import SAMPLERS, keyed_exponentials, keyed_simplex, sample_simplex, stream_keys

__all__ = [
    "EstimatorResult",
    "ZERO_STD",
    "get_estimator",
    "group_normalize",
    "list_estimators",
    "register_estimator",
]

ZERO_STD = 1e-6
"""Groups whose score std is below this count in ``vpo/frac_zero_std``."""

STD_MODES = ("population", "sample")
DEGENERATE_MODES = ("zero", "raw", "none")
SCALE_MODES = ("group", "batch", "none")
WHITEN_MODES = ("verl", "trl", "none")


@dataclass
class EstimatorResult:
    """What an estimator returns.

    ``advantages`` (B,) float64; ``scores`` (B,) the per-rollout scalar the advantage is
    computed from; ``diagnostics`` batch-level floats under stable ``vpo/...`` names;
    ``group_index`` (B,) index of each rollout's group in ``group_labels`` (first-appearance
    order).
    """

    advantages: np.ndarray
    scores: np.ndarray
    diagnostics: dict[str, float] = field(default_factory=dict)
    group_index: np.ndarray | None = None
    group_labels: list[Hashable] | None = None


Estimator = Callable[..., EstimatorResult]
_REGISTRY: dict[str, Estimator] = {}


def register_estimator(name: str) -> Callable[[Callable[..., EstimatorResult]], Estimator]:
    """Decorator: register ``fn(rewards, group_ids, *, option=default, ...)`` under ``name``.

    The registered callable rejects options that are not keyword-only parameters of ``fn``
    with a ValueError naming them. Registering a different function under a taken name raises.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"estimator name must be a non-empty string, got {name!r}")

    def decorator(fn: Callable[..., EstimatorResult]) -> Estimator:
        accepted = tuple(p.name for p in inspect.signature(fn).parameters.values()
                         if p.kind is inspect.Parameter.KEYWORD_ONLY)

        @functools.wraps(fn)
        def estimator(rewards: Any, group_ids: Any, **options: Any) -> EstimatorResult:
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise ValueError(f"estimator {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                                 f"accepted: {', '.join(accepted)}")
            return fn(rewards, group_ids, **options)

        estimator.options = accepted  # type: ignore[attr-defined]
        existing = _REGISTRY.get(name)
        if existing is not None and getattr(existing, "__wrapped__", None) is not fn:
            raise ValueError(f"estimator {name!r} is already registered to {existing.__wrapped__!r}")
        _REGISTRY[name] = estimator
        return estimator

    return decorator


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``; ValueError listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(list_estimators())}") from None


def list_estimators() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------------------
# normalisation
# --------------------------------------------------------------------------------------
def _choice(value: Any, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def _positive(value: Any, name: str, *, allow_zero: bool = True) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return number


def _group_stats(values: np.ndarray, group_index: np.ndarray, num_groups: int,
                 ddof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group (size (G,), mean (G, ...), std (G, ...)) of ``values`` (B, ...).

    The std of a group with size <= ddof is reported as 0 (callers apply their own rule).
    Two passes (mean, then squared deviations) keep the std exact for identical scores.
    """
    sizes = np.bincount(group_index, minlength=num_groups)
    shape = (num_groups,) + values.shape[1:]
    sums = np.zeros(shape)
    np.add.at(sums, group_index, values)
    safe = np.maximum(sizes, 1).reshape((-1,) + (1,) * (values.ndim - 1))
    means = sums / safe
    squares = np.zeros(shape)
    np.add.at(squares, group_index, (values - means[group_index]) ** 2)
    denom = (sizes - ddof).reshape(safe.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        stds = np.where(denom > 0, np.sqrt(squares / np.maximum(denom, 1)), 0.0)
    return sizes, means, stds


def group_normalize(scores: np.ndarray, group_index: np.ndarray, *, std: str = "population", eps: float = 1e-6,
                    degenerate: str = "zero", scale: str = "group") -> tuple[np.ndarray, np.ndarray]:
    """Group z-normalisation of ``scores`` (B,) or (B, D) (each column separately).

    ``group_index`` (B,) int in [0, G). Returns (advantages like ``scores``, group std
    (G,) or (G, D)). A = (s - mean_g) / (std + eps) where std is the group's ("group"), the
    batch's ("batch"), or no division ("none": A = s - mean_g). ``degenerate`` as in the
    module docstring.
    """
    _choice(std, STD_MODES, "std")
    _choice(degenerate, DEGENERATE_MODES, "degenerate")
    _choice(scale, SCALE_MODES, "scale")
    eps = _positive(eps, "eps")
    values = np.asarray(scores, dtype=np.float64)
    group_index = np.asarray(group_index, dtype=np.int64)
    num_groups = int(group_index.max()) + 1 if group_index.size else 0
    ddof = 1 if std == "sample" else 0
    sizes, means, stds = _group_stats(values, group_index, num_groups, ddof)
    singleton = (sizes == 1).reshape((-1,) + (1,) * (values.ndim - 1))
    if degenerate == "raw":
        # verl grpo: a one-member group uses mean 0 and std 1, so A = s / (1 + eps)
        means = np.where(singleton, 0.0, means)
        stds = np.where(singleton, 1.0, stds)
    centred = values - means[group_index]
    if scale == "group":
        divisor = stds[group_index]
    elif scale == "batch":
        batch_std = values.std(axis=0, ddof=ddof) if values.shape[0] > ddof else np.zeros(values.shape[1:])
        divisor = np.broadcast_to(batch_std, values.shape)
        if degenerate == "raw":
            divisor = np.where(singleton[group_index], 1.0, divisor)
    else:
        divisor = None  # Dr. GRPO: centre only (a "raw" one-member group keeps its score)
    advantages = centred / (divisor + eps) if divisor is not None else centred.copy()
    if degenerate == "zero":
        dead = (stds < eps) | singleton  # a one-member group has population std 0 anyway
        advantages[dead[group_index]] = 0.0
    group_std = np.where(singleton & (degenerate == "raw"), 0.0, stds)
    return advantages, group_std


def _whiten(values: np.ndarray, mode: str) -> np.ndarray:
    """Batch whitening of (B,): verl ``masked_whiten`` ((x - mean) / sqrt(var_bessel + 1e-8))
    with one weight per rollout, TRL ((x - mean) / (std_bessel + 1e-4)), or none."""
    if mode == "none" or values.size == 0:
        return values.copy()
    if values.size < 2:
        return np.zeros_like(values)
    centred = values - values.mean()
    if mode == "verl":
        return centred / np.sqrt(values.var(ddof=1) + 1e-8)
    return centred / (values.std(ddof=1) + 1e-4)


# --------------------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------------------
def _default_scalar(rows: np.ndarray) -> np.ndarray:
    return rows.mean(axis=1)


def _apply_scalar(scalar: Callable[[np.ndarray], Any] | None, rows: np.ndarray) -> np.ndarray:
    """Fixed scalarisation of answer rows: (N, D) -> (N,), checked."""
    if scalar is None:
        return _default_scalar(rows) if rows.shape[0] else np.zeros(0)
    if not callable(scalar):
        raise ValueError(f"scalar must be a callable (N, D) -> (N,), got {type(scalar).__name__}")
    values = np.asarray(scalar(rows), dtype=np.float64).reshape(-1) if rows.shape[0] else np.zeros(0)
    if values.shape != (rows.shape[0],):
        raise ValueError(f"scalar returned shape {values.shape} for {rows.shape[0]} answer rows; expected ({rows.shape[0]},)")
    if not np.isfinite(values).all():
        raise ValueError("scalar returned NaN or inf")
    return values


def _require_single_answer(batch: RewardBatch, name: str) -> None:
    many = batch.counts > 1
    if many.any():
        b = int(np.flatnonzero(many)[0])
        raise ValueError(f"estimator {name!r} takes one answer per rollout; rewards[{b}] has {batch.counts[b]} "
                         "(use 'vpo' or 'multi_rlvr' for multi-answer chains)")


def _row_scalars(batch: RewardBatch, scalar: Callable | None) -> np.ndarray:
    """Sum over each rollout's rows of the fixed scalar: (B,); empty rollouts 0."""
    out = np.zeros(batch.num_rollouts)
    for bucket in batch.buckets:
        values = _apply_scalar(scalar, bucket.rows)
        out += np.bincount(bucket.row_rollout, weights=values, minlength=batch.num_rollouts)
    return out


def _base_diagnostics(batch: RewardBatch, scores: np.ndarray, group_std: np.ndarray) -> dict[str, float]:
    pool = np.bincount(batch.group_index, weights=batch.counts, minlength=batch.num_groups)
    std = group_std if group_std.ndim == 1 else group_std.mean(axis=1)
    return {
        "vpo/num_groups": float(batch.num_groups),
        "vpo/score_mean": float(scores.mean()) if scores.size else 0.0,
        "vpo/group_std": float(std.mean()) if std.size else 0.0,
        "vpo/frac_zero_std": float((std < ZERO_STD).mean()) if std.size else 0.0,
        "vpo/mean_pool_size": float(pool.mean()) if pool.size else 0.0,
        "vpo/frac_empty": float((batch.counts == 0).mean()) if batch.counts.size else 0.0,
    }


def _result(batch: RewardBatch, scores: np.ndarray, advantages: np.ndarray, group_std: np.ndarray,
            extra: Mapping[str, float] | None = None) -> EstimatorResult:
    diagnostics = _base_diagnostics(batch, scores, group_std)
    diagnostics.update(extra or {})
    return EstimatorResult(advantages, scores, diagnostics, batch.group_index, batch.group_labels)


def _grpo_advantages(batch: RewardBatch, scores: np.ndarray, std: str, eps: float, degenerate: str,
                     scale: str, extra: Mapping[str, float] | None = None) -> EstimatorResult:
    advantages, group_std = group_normalize(scores, batch.group_index, std=std, eps=eps,
                                            degenerate=degenerate, scale=scale)
    return _result(batch, scores, advantages, group_std, extra)


# --------------------------------------------------------------------------------------
# weights per group
# --------------------------------------------------------------------------------------
def _check_sampling(num_weights: Any, alpha: Any, sampler: Any) -> tuple[int, float, str]:
    if isinstance(num_weights, bool) or not isinstance(num_weights, int | np.integer) or num_weights < 1:
        raise ValueError(f"num_weights (K) must be a positive integer, got {num_weights!r}")
    alpha = _positive(alpha, "alpha", allow_zero=False)
    _choice(sampler, SAMPLERS, "sampler")
    return int(num_weights), alpha, sampler


def _random_source(seed: Any, rng: Any, step: Any) -> np.random.Generator | None:
    """The Generator to draw from, or None when weights are keyed by ``seed``."""
    if seed is not None and rng is not None:
        raise ValueError("pass seed (keyed, batch-independent weights) or rng, not both")
    if step is not None and seed is None:
        raise ValueError("step is used only with seed (weights keyed by seed, group, step)")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if seed is None:
        return rng if rng is not None else np.random.default_rng()
    return None


def _bucket_labels(batch: RewardBatch, bucket: DimBucket) -> list[Hashable]:
    return [batch.group_labels[g] for g in bucket.groups.tolist()]


def _draw_group_weights(batch: RewardBatch, num: int, alpha: float, sampler: str, seed: Any, step: Any,
                        rng: np.random.Generator | None) -> list[GroupWeights]:
    """The K weights of every group, one ``GroupWeights`` per bucket of ``batch``.

    Keyed (``rng`` None) iid alpha = 1 weights are drawn block by block inside the scoring
    loop, unnormalised (``keyed_exponentials``), with 1 / sum as the block's scale: the same
    weights as ``keyed_simplex`` up to rounding, without a (G, K, D) array or a transpose.
    """
    if rng is None:
        out = []
        for bucket in batch.buckets:
            keys = stream_keys(_bucket_labels(batch, bucket), seed=seed, step=0 if step is None else step)
            if sampler == "iid" and alpha == 1.0 and bucket.dim > 1:
                out.append(GroupWeights(num, functools.partial(_keyed_block, keys, num, bucket.dim)))
            else:
                out.append(GroupWeights.stacked(keyed_simplex(keys, num, bucket.dim, alpha=alpha, method=sampler)))
        return out
    if len(batch.buckets) == 1 and sampler == "iid":
        # one draw consumes the stream exactly as group-by-group draws in first-appearance order
        bucket = batch.buckets[0]
        flat = sample_simplex(bucket.groups.size * num, bucket.dim, alpha=alpha, method="iid", rng=rng)
        return [GroupWeights.stacked(flat.reshape(bucket.groups.size, num, bucket.dim))]
    drawn: dict[int, np.ndarray] = {}
    dims = batch.group_dims
    for g in np.flatnonzero(dims > 0).tolist():  # first-appearance order
        drawn[g] = sample_simplex(num, int(dims[g]), alpha=alpha, method=sampler, rng=rng)
    return [GroupWeights.stacked(np.stack([drawn[g] for g in b.groups.tolist()])) for b in batch.buckets]


def _keyed_block(keys: np.ndarray, num: int, dim: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Keyed Dirichlet(1) weights of groups start..stop-1: (c, D, K) exponentials, scale 1 / sum."""
    exps = keyed_exponentials(keys[start:stop], num, dim)
    return exps, 1.0 / exps.sum(axis=1)


def _explicit_weights(batch: RewardBatch, weights: Any) -> list[np.ndarray | GroupWeights]:
    """Validated user weights: (K, D) per bucket, or per group from a label -> (K, D) map."""
    out: list[np.ndarray | GroupWeights] = []
    for bucket in batch.buckets:
        first = int(bucket.rollouts[0])
        if isinstance(weights, Mapping):
            mats = []
            for label in _bucket_labels(batch, bucket):
                if label not in weights:
                    raise ValueError(f"weights: no entry for group {label!r}")
                mats.append(check_weights(weights[label], f"weights[{label!r}]", bucket.dim, first))
            if len({m.shape[0] for m in mats}) > 1:
                raise ValueError(f"weights: groups with D={bucket.dim} must share one K")
            out.append(GroupWeights.stacked(np.stack(mats)))
        else:
            out.append(check_weights(weights, "weights", bucket.dim, first))
    return out


# --------------------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------------------
@register_estimator("vpo")
def vpo(rewards: Any, group_ids: Any, *, num_weights: int | None = None, alpha: float | None = None,
        sampler: str | None = None, seed: Any = None, rng: np.random.Generator | None = None, step: Any = None,
        weights: Any = None, std: str = "population", eps: float = 1e-6, degenerate: str = "zero",
        scale: str = "group") -> EstimatorResult:
    """VPO (SPEC section 1): R = mean_k max_i w_k . r_i with K weights per group, group z-norm.

    ``num_weights`` K (100), ``alpha`` (1.0), ``sampler`` "iid" | "sobol"; ``seed`` and ``step``
    key the weights per group, or ``rng`` draws them; ``weights`` fixes them instead: a (K, D)
    array shared by every group, or a mapping group label -> (K, D) (then none of the sampling
    options may be given). Defaults follow the authors: population std, eps 1e-6, zero
    advantages when a group's std < eps.
    Extra diagnostics: ``vpo/mean_own_pool_score`` (mean over groups of the mean R) and
    ``vpo/mean_group_max`` (mean over groups of mean_k max over the whole group's answers).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    if weights is not None:
        given = [n for n, v in (("num_weights", num_weights), ("alpha", alpha), ("sampler", sampler),
                                ("seed", seed), ("rng", rng), ("step", step)) if v is not None]
        if given:
            raise ValueError(f"weights= fixes the weights; do not also pass {', '.join(given)}")
        per_bucket = _explicit_weights(batch, weights)
    else:
        num, alpha_v, sampler_v = _check_sampling(100 if num_weights is None else num_weights,
                                                  1.0 if alpha is None else alpha,
                                                  "iid" if sampler is None else sampler)
        source = _random_source(seed, rng, step)
        per_bucket = _draw_group_weights(batch, num, alpha_v, sampler_v, seed, step, source)
    scores = np.zeros(batch.num_rollouts)
    group_max = np.zeros(batch.num_groups)
    for bucket, bucket_weights in zip(batch.buckets, per_bucket):
        own, best = bucket_scores(bucket.padded, bucket_weights)
        bucket.scatter(scores, own)
        group_max[bucket.groups] = best
    scores[batch.counts == 0] = 0.0  # an empty rollout scores 0 even when rewards can be < 0
    advantages, group_std = group_normalize(scores, batch.group_index, std=std, eps=eps,
                                            degenerate=degenerate, scale=scale)
    group_mean = np.bincount(batch.group_index, weights=scores, minlength=batch.num_groups) / np.maximum(
        batch.group_sizes, 1)
    extra = {
        "vpo/mean_own_pool_score": float(group_mean.mean()) if group_mean.size else 0.0,
        "vpo/mean_group_max": float(group_max.mean()) if group_max.size else 0.0,
    }
    return _result(batch, scores, advantages, group_std, extra)


@register_estimator("grpo")
def grpo(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, std: str = "sample", eps: float = 1e-6,
         degenerate: str = "raw", scale: str = "group") -> EstimatorResult:
    """GRPO: group z-norm of the fixed scalar of each rollout's single answer.

    m_i must be <= 1 (m_i = 0 scores 0). ``scalar`` (N, D) -> (N,) defaults to the mean over
    D. Defaults are verl's ``grpo``: Bessel std, eps 1e-6, a one-member group gives s / (1 + eps).
    TRL: ``std="sample", eps=1e-4, degenerate="none"`` (and ``scale`` as its ``scale_rewards``).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    _require_single_answer(batch, "grpo")
    return _grpo_advantages(batch, _row_scalars(batch, scalar), std, eps, degenerate, scale)


@register_estimator("multi_rlvr")
def multi_rlvr(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, std: str = "sample",
               eps: float = 1e-6, degenerate: str = "raw", scale: str = "group") -> EstimatorResult:
    """Multi-RLVR: score = sum over the rollout's rows (already deduplicated and zero-padded by
    the task) of the fixed scalar; GRPO advantage with grpo's defaults."""
    batch = RewardBatch.from_rewards(rewards, group_ids)
    return _grpo_advantages(batch, _row_scalars(batch, scalar), std, eps, degenerate, scale)


def max_at_k_weights(n: int, k: int) -> np.ndarray:
    """(n, n) matrix C with A_sorted = C @ r_sorted for ascending r_sorted (Bagirov et al.).

    Row i (0-based rank) holds C(i, k-1) on the diagonal and C(j-1, k-2) for j > i, divided
    by C(n, k): C(n, k) A_i is the sum, over the k-subsets that contain rollout i, of the
    subset's max. Exact with ties (the max value does not depend on how ties are ranked).
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    ranks = np.arange(n)
    coeff = np.zeros((n, n))
    coeff[ranks, ranks] = [math.comb(i, k - 1) for i in range(n)]
    if k >= 2:
        above = np.array([math.comb(j - 1, k - 2) if j >= 1 else 0 for j in range(n)], dtype=np.float64)
        coeff += np.triu(np.broadcast_to(above, (n, n)), k=1)
    return coeff / math.comb(n, k)


@register_estimator("max_at_k")
def max_at_k(rewards: Any, group_ids: Any, *, k: int | None = None, scalar: Callable | None = None,
             std: str = "sample", eps: float = 1e-6, degenerate: str = "none",
             scale: str = "group") -> EstimatorResult:
    """Max@K (Bagirov et al. 2025): per group of n single-answer rollouts, the unbiased
    gradient weights of E[max fixed scalar over a k-subset], then group z-norm.

    ``scores`` are those weights A_i. ``k`` defaults to max(2, n // 2) clamped to n - 1 (k = n
    makes every A equal, so it is rejected when given explicitly, as in the authors' release).
    One-member groups get 0. Normalisation defaults as the release: Bessel std, eps 1e-6.
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    _require_single_answer(batch, "max_at_k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    values = _row_scalars(batch, scalar)
    scores = np.zeros(batch.num_rollouts)
    order = np.argsort(batch.group_index, kind="stable")
    starts = np.concatenate([[0], np.cumsum(batch.group_sizes)[:-1]])
    for n in np.unique(batch.group_sizes).tolist():
        if n < 2:
            continue  # a one-member group: no subset comparison, advantage 0
        groups = np.flatnonzero(batch.group_sizes == n)
        k_n = min(max(2, n // 2), n - 1) if k is None else int(k)
        if k_n >= n:
            raise ValueError(f"max_at_k: k={k_n} must be < n={n} (group {batch.group_labels[groups[0]]!r})")
        members = order[starts[groups][:, None] + np.arange(n)[None, :]]  # (Gn, n) batch indices
        member_values = values[members]
        rank_order = np.argsort(member_values, axis=1, kind="stable")
        sorted_values = np.take_along_axis(member_values, rank_order, axis=1)
        weighted = sorted_values @ max_at_k_weights(n, k_n).T
        scores[np.take_along_axis(members, rank_order, axis=1)] = weighted
    result = _grpo_advantages(batch, scores, std, eps, degenerate, scale,
                              {"vpo/reward_mean": float(values.mean()) if values.size else 0.0})
    result.advantages[batch.group_sizes[batch.group_index] < 2] = 0.0
    return result


@register_estimator("gdpo")
def gdpo(rewards: Any, group_ids: Any, *, objective_weights: Any = None, std: str = "sample", eps: float = 1e-6,
         degenerate: str = "raw", whiten: str = "verl") -> EstimatorResult:
    """GDPO (arXiv 2601.05242): z-norm each objective within the group, weighted sum, then
    whiten over the batch.

    A rollout's vector is its single answer's (m = 1), the per-objective max over its answers
    (m > 1), or zeros (m = 0). ``objective_weights`` (D,) default ones. Per-objective
    normalisation defaults are verl's ``grpo`` (Bessel std, eps 1e-6); ``whiten`` "verl"
    ((x - mean) / sqrt(var_bessel + 1e-8), one weight per rollout rather than per token),
    "trl" ((x - mean) / (std_bessel + 1e-4), TRL's ``normalize_then_sum``) or "none".
    ``scores`` are the weighted sums of the raw vectors.
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    _choice(whiten, WHITEN_MODES, "whiten")
    summed = np.zeros(batch.num_rollouts)
    scores = np.zeros(batch.num_rollouts)
    stds = np.zeros(batch.num_groups)
    for bucket in batch.buckets:
        vectors = batch.reduce_rows(bucket, bucket.rows, "max")  # (n, D) in bucket.rollouts order
        if objective_weights is None:
            obj_w = np.ones(bucket.dim)
        else:
            obj_w = np.asarray(objective_weights, dtype=np.float64).reshape(-1)
            if obj_w.shape != (bucket.dim,) or not np.isfinite(obj_w).all():
                raise ValueError(f"objective_weights: expected {bucket.dim} finite numbers "
                                 f"(D of rewards[{int(bucket.rollouts[0])}]), got shape {obj_w.shape}")
        local_groups = np.searchsorted(bucket.groups, batch.group_index[bucket.rollouts])
        normed, group_std = group_normalize(vectors, local_groups, std=std, eps=eps, degenerate=degenerate)
        summed[bucket.rollouts] = normed @ obj_w
        scores[bucket.rollouts] = vectors @ obj_w
        stds[bucket.groups] = group_std.mean(axis=1)
    return _result(batch, scores, _whiten(summed, whiten), stds)


@register_estimator("maxrl")
def maxrl(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, eps: float = 1e-6,
          degenerate: str = "zero") -> EstimatorResult:
    """MaxRL (arXiv 2602.02710): A = (r - mean_g) / (mean_g + eps) of the fixed scalar.

    Single answer per rollout. A group whose rewards are all 0 gets 0. ``degenerate``: "zero"
    gives one-member groups 0; "raw" uses mean 0 for them (A = r / eps, the authors' release).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    _require_single_answer(batch, "maxrl")
    if degenerate not in ("zero", "raw"):
        raise ValueError(f"degenerate must be 'zero' or 'raw' for maxrl, got {degenerate!r}")
    eps = _positive(eps, "eps")
    values = _row_scalars(batch, scalar)
    sizes, means, stds = _group_stats(values, batch.group_index, batch.num_groups, 0)
    if degenerate == "raw":
        means = np.where(sizes == 1, 0.0, means)
    mean_b = means[batch.group_index]
    with np.errstate(divide="ignore", invalid="ignore"):
        advantages = np.where(mean_b + eps != 0, (values - mean_b) / (mean_b + eps), 0.0)
    if degenerate == "zero":
        advantages[sizes[batch.group_index] == 1] = 0.0
    return _result(batch, values, advantages, stds)


@register_estimator("random_weight")
def random_weight(rewards: Any, group_ids: Any, *, alpha: float = 1.0, sampler: str = "iid", seed: Any = None,
                  rng: np.random.Generator | None = None, step: Any = None, std: str = "sample", eps: float = 1e-6,
                  degenerate: str = "raw", scale: str = "group") -> EstimatorResult:
    """Random-weighting GRPO: each rollout draws its own w ~ Dir(alpha); its score is w . r of
    its single answer; GRPO advantage with grpo's defaults.

    With ``seed`` the weight of the j-th rollout (in batch order) of group g is row j of the
    group's keyed stream (``keyed_simplex``), so it does not depend on other groups; with
    ``rng`` rows are drawn in batch order.
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    _require_single_answer(batch, "random_weight")
    _, alpha_v, sampler_v = _check_sampling(1, alpha, sampler)
    source = _random_source(seed, rng, step)
    scores = np.zeros(batch.num_rollouts)
    for bucket in batch.buckets:
        rollout_w = np.zeros((batch.num_rollouts, bucket.dim))
        if source is None:
            keys = stream_keys(_bucket_labels(batch, bucket), seed=seed, step=0 if step is None else step)
            bucket.scatter(rollout_w, keyed_simplex(keys, bucket.slot.shape[1], bucket.dim, alpha=alpha_v,
                                                    method=sampler_v))
        else:
            in_order = np.sort(bucket.rollouts)
            rollout_w[in_order] = sample_simplex(in_order.size, bucket.dim, alpha=alpha_v, method=sampler_v,
                                                 rng=source)
        scores += np.bincount(bucket.row_rollout, minlength=batch.num_rollouts,
                              weights=np.einsum("rd,rd->r", bucket.rows, rollout_w[bucket.row_rollout]))
    return _grpo_advantages(batch, scores, std, eps, degenerate, scale)

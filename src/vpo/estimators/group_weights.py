"""The K weight vectors of every group of a batch, as the estimators consume them.

Usage (inside an estimator)::

    batch = RewardBatch.from_rewards(rewards, group_ids)
    per_bucket = draw_group_weights(batch, WeightOptions(num_weights=100), seed=0, step=3)
    per_bucket = draw_group_weights(batch, opts, rng=np.random.default_rng(0))   # from a Generator

Keyed draws are ``vpo.weights.group_weights`` of each group's weight key (its label, or the
``weight_keys`` an adapter passes), seed and step: the one keying of the project. The iid,
alpha = 1 fast path draws the same weights unnormalised, block by block, inside the scoring
loop (``keyed_exponentials``, 1 / sum as the block's scale), without a (G, K, D) array.

Shape glossary: B rollouts, G groups, K weights, D objectives.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import same_value
from vpo.estimators.options import WeightOptions
from vpo.objective import DimBucket, GroupWeights, RewardBatch, check_weights
from vpo.weights import FIXED, group_weights, keyed_exponentials, sample_simplex, stream_keys

__all__ = ["bucket_keys", "bucket_weights", "draw_group_weights", "explicit_goal_weights", "explicit_weights",
           "group_weight_keys", "materialise", "random_source"]


def random_source(seed: Any, rng: Any, step: Any) -> np.random.Generator | None:
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


def group_weight_keys(batch: RewardBatch, weight_keys: Sequence[Hashable] | None) -> list[Hashable]:
    """The key each group's weights are drawn from: (G,) in ``batch.group_labels`` order.

    ``weight_keys`` (B,) per-rollout keys (e.g. the prompt text when two groups of the batch can
    share one prompt); every rollout of a group must carry the same key. None: the group labels.
    """
    if weight_keys is None:
        return list(batch.group_labels)
    keys = list(weight_keys)
    if len(keys) != batch.num_rollouts:
        raise ValueError(f"weight_keys has {len(keys)} entries for {batch.num_rollouts} rollouts")
    out: list[Hashable | None] = [None] * batch.num_groups
    for b, g in enumerate(batch.group_index.tolist()):
        if out[g] is None:
            out[g] = keys[b]
        elif out[g] != keys[b]:
            raise ValueError(f"weight_keys: rollouts of group {batch.group_labels[g]!r} have different keys "
                             f"{out[g]!r} and {keys[b]!r}")
    return out  # type: ignore[return-value]


def bucket_keys(keys: list[Hashable], bucket: DimBucket) -> list[Hashable]:
    return [keys[g] for g in bucket.groups.tolist()]


def _keyed_block(keys: np.ndarray, num: int, dim: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Keyed Dirichlet(1) weights of groups start..stop-1: (c, D, K) exponentials, scale 1 / sum."""
    exps = keyed_exponentials(keys[start:stop], num, dim)
    return exps, 1.0 / exps.sum(axis=1)


def draw_group_weights(batch: RewardBatch, options: WeightOptions, *, seed: Any = None, step: Any = None,
                       rng: np.random.Generator | None = None,
                       weight_keys: Sequence[Hashable] | None = None) -> list[GroupWeights]:
    """The K weights of every group, one ``GroupWeights`` per bucket of ``batch``.

    With ``seed`` (``rng`` None) a group's weights are ``group_weights([key], K, D, seed=seed,
    step=step)`` (``step`` None: ``FIXED``), independent of the rest of the batch. With ``rng``
    they are drawn from it group by group in first-appearance order.
    """
    num, alpha, sampler = options.num_weights, options.alpha, options.sampler
    if rng is None:
        keys = group_weight_keys(batch, weight_keys)
        step = FIXED if step is None else step
        out = []
        for bucket in batch.buckets:
            labels = bucket_keys(keys, bucket)
            if sampler == "iid" and alpha == 1.0 and bucket.dim > 1:
                ints = stream_keys(labels, seed=seed, step=step)
                out.append(GroupWeights(num, functools.partial(_keyed_block, ints, num, bucket.dim)))
            else:
                out.append(GroupWeights.stacked(group_weights(labels, num, bucket.dim, seed=seed, step=step,
                                                              alpha=alpha, sampler=sampler)))
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


def explicit_weights(batch: RewardBatch, weights: Any) -> list[np.ndarray | GroupWeights]:
    """Validated user weights: (K, D) per bucket, or per group from a label -> (K, D) map."""
    out: list[np.ndarray | GroupWeights] = []
    for bucket in batch.buckets:
        first = int(bucket.rollouts[0])
        if isinstance(weights, Mapping):
            mats = []
            for label in bucket_keys(list(batch.group_labels), bucket):
                if label not in weights:
                    raise ValueError(f"weights: no entry for group {label!r}")
                mats.append(check_weights(weights[label], f"weights[{label!r}]", bucket.dim, first))
            if len({m.shape[0] for m in mats}) > 1:
                raise ValueError(f"weights: groups with D={bucket.dim} must share one K")
            out.append(GroupWeights.stacked(np.stack(mats)))
        else:
            out.append(check_weights(weights, "weights", bucket.dim, first))
    return out


def bucket_weights(batch: RewardBatch, options: Mapping[str, Any], defaults: Mapping[str, Any]
                   ) -> list[np.ndarray | GroupWeights]:
    """The K weights of every group, one entry per bucket of ``batch``, from an estimator's
    ``options`` (``num_weights``, ``alpha``, ``sampler``, ``seed``, ``rng``, ``step``,
    ``weight_keys``, ``weights``): the fixed ``weights`` (``explicit_weights``; then no sampling
    option may differ from its default in ``defaults``), else drawn (``draw_group_weights``)."""
    fixed = options.get("weights")
    if fixed is not None:
        given = [n for n in ("num_weights", "alpha", "sampler", "seed", "rng", "step", "weight_keys")
                 if options.get(n) is not None and not same_value(options[n], defaults.get(n))]
        if given:
            raise ValueError(f"weights= fixes the weights; do not also pass {', '.join(given)}")
        return explicit_weights(batch, fixed)
    drawn = WeightOptions(num_weights=options["num_weights"], alpha=options["alpha"], sampler=options["sampler"])
    seed, rng, step = options.get("seed"), options.get("rng"), options.get("step")
    return list(draw_group_weights(batch, drawn, seed=seed, step=step, rng=random_source(seed, rng, step),
                                   weight_keys=options.get("weight_keys")))


def _goal_error(label: Any, dim: int, w: np.ndarray) -> str | None:
    if dim and w.shape != (dim,):
        return f"goal_weights of group {label!r}: expected {dim} weights (its D), got {w.shape[0]}"
    if not np.isfinite(w).all() or (w < 0).any():
        return f"goal_weights of group {label!r} must be finite and non-negative"
    return None


def explicit_goal_weights(batch: RewardBatch, goal_weights: Any) -> np.ndarray:
    """(B, D_max) per-rollout goal weights from a label -> (D,) mapping or a (B, D) array,
    checked: finite, >= 0, the group's D, and one vector per group (the first broken rollout
    is named)."""
    width = max([int(d) for d in batch.group_dims] + [1])
    if isinstance(goal_weights, Mapping):
        by_group = np.zeros((batch.num_groups, width))
        for g, label in enumerate(batch.group_labels):  # first-appearance order: the first broken rollout's group
            if label not in goal_weights:
                raise ValueError(f"goal_weights: no entry for group {label!r}")
            w = np.asarray(goal_weights[label], dtype=np.float64).reshape(-1)
            error = _goal_error(label, int(batch.group_dims[g]), w)
            if error:
                raise ValueError(error)
            by_group[g, :min(w.size, width)] = w[:width]
        return by_group[batch.group_index]
    per_rollout = np.asarray(goal_weights, dtype=np.float64)
    if per_rollout.ndim != 2 or per_rollout.shape[0] != batch.num_rollouts:
        raise ValueError(f"goal_weights must map group labels to (D,) vectors or be a (B, D) array for "
                         f"B={batch.num_rollouts}, got shape {per_rollout.shape}")
    index = batch.group_index
    dims = batch.group_dims[index]
    first = np.empty(batch.num_groups, dtype=np.int64)
    first[index[::-1]] = np.arange(index.size)[::-1]
    with np.errstate(invalid="ignore"):
        broken = (((dims > 0) & (dims != per_rollout.shape[1])) | ~np.isfinite(per_rollout).all(axis=1)
                  | (per_rollout < 0).any(axis=1) | ~(per_rollout == per_rollout[first[index]]).all(axis=1))
    if broken.any():
        b = int(np.flatnonzero(broken)[0])
        label = batch.group_labels[index[b]]
        raise ValueError(_goal_error(label, int(dims[b]), per_rollout[b]) or (
            f"goal_weights: rollouts of group {label!r} have different weights; a group shares one weight vector"))
    rows = np.zeros((batch.num_rollouts, width))
    rows[:, :min(per_rollout.shape[1], width)] = per_rollout[:, :width]
    return rows


def materialise(weights: np.ndarray | GroupWeights, num_groups: int) -> np.ndarray:
    """(Gb, K, D) weights of a bucket's ``num_groups`` groups, as plain arrays: a shared (K, D)
    broadcast, or every block of a ``GroupWeights`` with its scale applied."""
    if isinstance(weights, np.ndarray):
        return np.broadcast_to(weights, (num_groups, *weights.shape))
    w, scale = weights.block(0, num_groups)  # (Gb, D, K), (Gb, K)
    if scale is not None:
        w = w * scale[:, None, :]
    return w.transpose(0, 2, 1)

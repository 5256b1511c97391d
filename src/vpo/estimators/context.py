"""The one writer of a group's context: the weights, the goal and the scalar a reduction names.

Usage::

    import numpy as np
    from vpo.estimators import get_spec
    from vpo.estimators.context import group_context, reduction_context
    spec = get_spec("vpo")
    context = group_context(spec, ["train-3", "train-4"], 4, seed=0, step=7)   # G = 2 groups, D = 4
    context["weights"].shape                     # (2, 100, 4): a GroupWeights, drawn once for the groups
    one = reduction_context(spec, key="train-4", dim=4, seed=0, step=7)        # one group: (K, D) arrays
    np.testing.assert_allclose(one["weights"], context["weights"][1])

Every path that scores rollouts asks this module for a group's context: the estimator derived
from the halves (``derive``: once per D of the batch, its groups stacked) and, one group at a
time through ``reduction_context``, the engines with one scalar reward per rollout (the rollout
scorer behind verl's and OpenRLHF's reward functions and TRL's rewards, ``VPOTrainer``). A
group's keyed weights are ``vpo.weights.group_weights([key], K, D, seed=seed, step=step)``, the
project's one keying, so every path and every rank sees the same K vectors (up to float
rounding: the batched form normalises them after the max over answers).

Shape glossary: B rollouts, G groups, K weights, D objectives.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.options import WeightOptions
from vpo.objective import GroupWeights, RewardBatch, check_weights
from vpo.weights import FIXED, group_weights, keyed_exponentials, sample_simplex, stream_keys

__all__ = ["explicit_goal_weights", "explicit_weights", "group_context", "group_weight_keys", "reduction_context"]


def _source(seed: Any, rng: Any, step: Any) -> np.random.Generator | None:
    """The Generator to draw from, or None when the weights are keyed by ``seed``."""
    if seed is not None and rng is not None:
        raise ValueError("pass seed (keyed, batch-independent weights) or rng, not both")
    if step is not None and seed is None:
        raise ValueError("step is used only with seed (weights keyed by seed, group, step)")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if seed is None:
        return rng if rng is not None else np.random.default_rng()
    return None


def _keyed_dirichlet(keys: np.ndarray, num: int, dim: int) -> GroupWeights:
    """Keyed Dirichlet(1) weights of the G groups ``keys``, drawn once for all of them: the (G, D, K)
    standard exponentials, a block of groups with its scale 1 / sum (taken while the block is in
    cache, applied after the max over answers), and, as rows, the exponentials normalised
    (``vpo.weights.keyed_simplex``, the same numbers)."""
    exps = keyed_exponentials(keys, num, dim)

    def block(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        drawn = exps[start:stop]
        return drawn, 1.0 / drawn.sum(axis=1)

    def rows(start: int, stop: int) -> np.ndarray:
        drawn = exps[start:stop]
        return (drawn / drawn.sum(axis=1, keepdims=True)).transpose(0, 2, 1)

    return GroupWeights(num, len(keys), dim, block, rows)


def _draw(keys: Sequence[Hashable], dim: int, options: WeightOptions, seed: Any, step: Any,
          rng: np.random.Generator | None) -> GroupWeights:
    """K weights for each of the G groups ``keys``: keyed on (seed, key, step), or from ``rng``."""
    num, alpha, sampler = options.num_weights, options.alpha, options.sampler
    if rng is not None:
        if sampler == "iid":  # one draw consumes the stream as group-by-group draws would, in this order
            flat = sample_simplex(len(keys) * num, dim, alpha=alpha, method="iid", rng=rng)
            return GroupWeights.stacked(flat.reshape(len(keys), num, dim))
        return GroupWeights.stacked(np.stack([sample_simplex(num, dim, alpha=alpha, method=sampler, rng=rng)
                                              for _ in keys]))
    step = FIXED if step is None else step
    if sampler == "iid" and alpha == 1.0 and dim > 1:
        return _keyed_dirichlet(stream_keys(keys, seed=seed, step=step), num, dim)
    return GroupWeights.stacked(group_weights(keys, num, dim, seed=seed, step=step, alpha=alpha, sampler=sampler))


def _given_weights(weights: Any, groups: int, dim: int) -> GroupWeights:
    """Fixed weights: a GroupWeights, (K, D) shared by the groups, or (G, K, D)."""
    if isinstance(weights, GroupWeights):
        return weights
    arr = np.asarray(weights, dtype=np.float64)
    if arr.ndim == 2:
        arr = np.broadcast_to(check_weights(arr, "weights", dim), (groups, *arr.shape))
    elif arr.ndim != 3 or arr.shape[0] != groups:
        raise ValueError(f"weights: expected (K, D) or (G, K, D) for G={groups}, got shape {arr.shape}")
    return GroupWeights.stacked(arr)


def group_context(spec: Any, keys: Sequence[Hashable], dim: int, *, seed: Any = None, step: Any = None,
                  rng: np.random.Generator | None = None, weights: Any = None, goal: Any = None,
                  scalar: Callable | None = None, num_weights: int | None = None, alpha: float | None = None,
                  sampler: str | None = None) -> dict[str, Any]:
    """The context ``spec.reduce`` names (``reductions.CONTEXT``) for the G groups ``keys``, all
    with D = ``dim`` objectives, stacked over the groups.

    * ``weights``: a ``vpo.objective.GroupWeights`` (G, K, D). ``weights=`` fixes them ((K, D)
      shared, or (G, K, D)); else ``rng`` draws them group by group; else group g's are keyed,
      ``vpo.weights.group_weights([keys[g]], K, D, seed=seed, step=step)`` (``step`` None:
      ``FIXED``). ``num_weights``, ``alpha``, ``sampler`` default to the estimator's defaults.
      Without ``seed`` and ``rng`` the draw is fresh (OS entropy).
    * ``goal``: (G, D), the ``goal=`` the prompts state, else one weight vector per group drawn
      as the weights are (K = 1).
    * ``scalar``: the task's fixed scalarisation (None: the mean over D), passed on.
    """
    needs = spec.context
    context: dict[str, Any] = {}
    if "scalar" in needs:
        context["scalar"] = scalar
    if not {"weights", "goal"} & set(needs):
        return context
    options = WeightOptions(
        num_weights=spec.defaults.get("num_weights", WeightOptions.num_weights) if num_weights is None else num_weights,
        alpha=spec.defaults.get("alpha", WeightOptions.alpha) if alpha is None else alpha,
        sampler=spec.defaults.get("sampler", WeightOptions.sampler) if sampler is None else sampler)
    keys = list(keys)
    if "weights" in needs:
        context["weights"] = (_given_weights(weights, len(keys), dim) if weights is not None
                              else _draw(keys, dim, options, seed, step, _source(seed, rng, step)))
    if "goal" in needs:
        if goal is None:
            one = WeightOptions(num_weights=1, alpha=options.alpha, sampler=options.sampler)
            goal = _draw(keys, dim, one, seed, step, _source(seed, rng, step)).dense()[:, 0]
        context["goal"] = np.asarray(goal, dtype=np.float64).reshape(len(keys), dim)
    return context


def reduction_context(spec: Any, *, key: Hashable, dim: int, seed: int = WeightOptions.seed, step: Any = None,
                      goal: Any = None, scalar: Callable | None = None, num_weights: int | None = None,
                      alpha: float | None = None, sampler: str | None = None) -> dict[str, Any]:
    """The context ``spec.reduce`` asks for, for the one group keyed ``key`` with D = ``dim``:
    ``group_context`` of that group, unstacked (``weights`` (K, D), ``goal`` (D,)).

    ``key`` is the group key every engine uses (the row's ``example_id``); ``step`` the training
    step, which keys the weights of a ``weights="per_step"`` estimator (the others keep a group's
    draw for the run: ``FIXED``); ``goal`` the weights the prompt states (an estimator that
    conditions its prompts needs it); ``scalar`` the task's fixed scalarisation.
    """
    stated = None
    if spec.conditions_prompt and "goal" in spec.context:
        if goal is None:
            raise ValueError(f"estimator {spec.name!r} needs the goal weights its prompt states (the example's "
                             f"'goal_weights'); export the data with --method {spec.name}")
        stated = np.asarray(goal, dtype=np.float64).reshape(1, -1)
        if stated.shape[1] != dim:
            raise ValueError(f"the goal weights have {stated.shape[1]} entries for D={dim} objectives")
    context = group_context(spec, [key], int(dim), seed=seed, step=step if spec.weights == "per_step" else None,
                            goal=stated, scalar=scalar, num_weights=num_weights, alpha=alpha, sampler=sampler)
    return {name: value[0] if name in ("weights", "goal") else value for name, value in context.items()}


def group_weight_keys(batch: RewardBatch, weight_keys: Sequence[Hashable] | None) -> list[Hashable]:
    """The key each group's weights are drawn from: (G,) in ``batch.group_labels`` order.

    ``weight_keys`` (B,) per-rollout keys (e.g. the rows' ``example_id`` when two groups of the
    batch can share one prompt); every rollout of a group must carry the same key. None: the
    group labels.
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


def explicit_weights(batch: RewardBatch, weights: Any) -> list[np.ndarray]:
    """Validated user weights, one entry per bucket of ``batch``: the (K, D) array shared by every
    group, or (Gb, K, D) from a mapping group label -> (K, D)."""
    out = []
    for bucket in batch.buckets:
        first = int(bucket.rollouts[0])
        if not isinstance(weights, Mapping):
            out.append(check_weights(weights, "weights", bucket.dim, first))
            continue
        mats = []
        for g in bucket.groups.tolist():
            label = batch.group_labels[g]
            if label not in weights:
                raise ValueError(f"weights: no entry for group {label!r}")
            mats.append(check_weights(weights[label], f"weights[{label!r}]", bucket.dim, first))
        if len({m.shape[0] for m in mats}) > 1:
            raise ValueError(f"weights: groups with D={bucket.dim} must share one K")
        out.append(np.stack(mats))
    return out


def _goal_error(label: Any, dim: int, w: np.ndarray) -> str | None:
    if dim and w.shape != (dim,):
        return f"goal_weights of group {label!r}: expected {dim} weights (its D), got {w.shape[0]}"
    if not np.isfinite(w).all() or (w < 0).any():
        return f"goal_weights of group {label!r} must be finite and non-negative"
    return None


def explicit_goal_weights(batch: RewardBatch, goal_weights: Any) -> list[np.ndarray]:
    """The stated goal weights, (Gb, D) per bucket of ``batch``, from a label -> (D,) mapping or a
    (B, D) array, checked: finite, >= 0, the group's D, and one vector per group (the first
    broken rollout is named)."""
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
        return [by_group[bucket.groups, :bucket.dim] for bucket in batch.buckets]
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
    return [per_rollout[first[bucket.groups], :bucket.dim] for bucket in batch.buckets]

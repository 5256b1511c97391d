"""The batched estimator derived from its two halves: the reduction over the whole batch, then
the advantage rule on the scores.

Usage::

    from vpo.estimators import get_spec
    spec = get_spec("grpo")
    spec.derived(rewards, group_ids)      # what get_estimator("grpo") runs
    spec.fn(rewards, group_ids)           # the same call through the registry

For each D of the batch (``vpo.objective.DimBucket``) the group context the reduction names is
built by the one writer, ``context.group_context``, for the bucket's groups stacked: the keyed
weights (G, K, D) (``vpo.weights.group_weights`` of the group key, seed and step, up to float
rounding; or drawn from ``rng``; or the fixed ``weights``), the goal (G, D) (drawn the same way
with K = 1, or the ``goal_weights`` the prompts state), the fixed scalar. The reduction's batched
form (``reductions.batched``) scores the whole bucket in one call; a reduction without one is
called once per rollout with its group's context. A rollout of a group with no answers at all
scores 0. The rule then turns the (B,) scores into advantages (its ``group_ids`` are the batch's
group index, ints in first-appearance order); the diagnostics are the shared ``<name>/...`` ones
(``common.base_diagnostics``), with the group std taken as the rule's ``std`` option says
(Bessel for "sample"; population otherwise), plus the estimator's own per-group ones
(``EstimatorSpec.diagnostics``), computed when they are first read.

Shape glossary: B rollouts, G groups, N rollouts per group, M answers per chain, D objectives,
K weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vpo.estimators.common import Diagnostics, EstimatorResult, make_result, require_single_answer, same_value
from vpo.estimators.context import explicit_goal_weights, explicit_weights, group_context, group_weight_keys
from vpo.estimators.normalize import group_stats
from vpo.objective import RewardBatch

__all__ = ["derived_estimate", "group_contexts", "reduce_batch"]

_SAMPLING = ("num_weights", "alpha", "sampler", "seed", "rng", "step", "weight_keys")


def group_contexts(spec: Any, batch: RewardBatch, options: dict[str, Any]) -> list[dict[str, Any]]:
    """The context ``spec.reduce`` names, per bucket of ``batch`` (``context.group_context`` of the
    bucket's groups), from the estimator's merged ``options``."""
    needs = spec.context
    fixed = options.get("weights") if "weights" in needs else None
    stated = options.get("goal_weights") if spec.conditions_prompt and "goal" in needs else None
    if fixed is not None:
        given = [n for n in _SAMPLING
                 if options.get(n) is not None and not same_value(options[n], spec.defaults.get(n))]
        if given:
            raise ValueError(f"weights= fixes the weights; do not also pass {', '.join(given)}")
    if stated is not None:
        given = [n for n in ("seed", "rng", "step", "weight_keys") if options.get(n) is not None]
        if given:
            raise ValueError(f"goal_weights= fixes the weights; do not also pass {', '.join(given)}")
    per_bucket_weights = explicit_weights(batch, fixed) if fixed is not None else [None] * len(batch.buckets)
    per_bucket_goals = explicit_goal_weights(batch, stated) if stated is not None else [None] * len(batch.buckets)
    keys = group_weight_keys(batch, options.get("weight_keys")) if {"weights", "goal"} & set(needs) else None
    sampling = {n: options.get(n) for n in ("num_weights", "alpha", "sampler", "seed", "step", "rng")}
    return [group_context(spec, [keys[g] for g in bucket.groups.tolist()] if keys else [], bucket.dim,
                          weights=weights, goal=goal, scalar=options.get("scalar"), **sampling)
            for bucket, weights, goal in zip(batch.buckets, per_bucket_weights, per_bucket_goals)]


def reduce_batch(spec: Any, batch: RewardBatch, contexts: list[dict[str, Any]], own: dict[str, Any]) -> np.ndarray:
    """(B,) scores: the reduction's batched form on each bucket, or the reduction per rollout."""
    scores = np.zeros(batch.num_rollouts)
    form = getattr(spec.reduce, "batched", None)
    for bucket, context in zip(batch.buckets, contexts):
        if form is not None:
            values = np.asarray(form(bucket, **context, **own), dtype=np.float64)
            if values.shape != bucket.slot.shape:
                raise ValueError(f"estimator {spec.name!r}: the batched form of {spec.reduce.__name__} returned shape "
                                 f"{values.shape}; expected (G, N) = {bucket.slot.shape}")
        else:
            values = np.zeros(bucket.slot.shape)
            counts = bucket.counts
            for g in range(bucket.groups.size):
                group = {k: (v[g] if k in ("weights", "goal") else v) for k, v in context.items()}
                for n in np.flatnonzero(bucket.slot[g] >= 0).tolist():
                    values[g, n] = float(spec.reduce(bucket.padded[g, n, :counts[g, n]], **group, **own))
        bucket.scatter(scores, values)
    bad = ~np.isfinite(scores)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        raise ValueError(f"estimator {spec.name!r}: its reduction {spec.reduce.__name__} returned {scores[b]} for "
                         f"rollout {b}")
    return scores


def _group_diagnostics(spec: Any, batch: RewardBatch, contexts: list[dict[str, Any]],
                       scores: np.ndarray) -> dict[str, float]:
    """``spec.diagnostics`` of each bucket, per group, averaged over the batch's G groups (a group
    with no answers at all counts 0)."""
    totals: dict[str, np.ndarray] = {}
    for bucket, context in zip(batch.buckets, contexts):
        mine = np.zeros(bucket.slot.shape)
        real = bucket.slot >= 0
        mine[real] = scores[bucket.slot[real]]
        for name, values in spec.diagnostics(bucket, mine, **context).items():
            totals.setdefault(name, np.zeros(batch.num_groups))[bucket.groups] = values
    return {f"{spec.name}/{name}": float(values.mean()) if values.size else 0.0 for name, values in totals.items()}


def derived_estimate(spec: Any, rewards: Any, group_ids: Any, **options: Any) -> EstimatorResult:
    """Estimator ``spec`` on a batch, from its halves: ``rewards`` (B arrays (m_i, D) or one
    (B, M, D) array), ``group_ids`` (B,) labels, ``options`` among ``spec.options`` (the rest
    take ``spec.defaults``)."""
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        raise ValueError(f"estimator {spec.name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"accepted: {', '.join(spec.options)}")
    merged = {**spec.defaults, **options}
    batch = RewardBatch.from_rewards(rewards, group_ids)
    if not spec.multi_answer:
        require_single_answer(batch, spec.name)
    own = {k: merged[k] for k in spec.own_reduction_options}
    contexts = group_contexts(spec, batch, merged)
    scores = reduce_batch(spec, batch, contexts, own)
    rule = {k: merged[k] for k in spec.advantage_options}
    advantages = np.asarray(spec.advantage(scores, batch.group_index, **rule), dtype=np.float64).reshape(-1)
    if advantages.shape != scores.shape:
        raise ValueError(f"estimator {spec.name!r}: its advantage rule {spec.advantage.__name__} returned "
                         f"{advantages.size} advantages for {scores.size} rollouts")
    ddof = 1 if rule.get("std") == "sample" else 0
    group_std = group_stats(scores, batch.group_index, batch.num_groups, ddof)[2]
    result = make_result(batch, scores, advantages, group_std, prefix=spec.name)
    if spec.diagnostics is not None:
        result.diagnostics = Diagnostics(result.diagnostics, lambda: _group_diagnostics(spec, batch, contexts, scores))
    return result

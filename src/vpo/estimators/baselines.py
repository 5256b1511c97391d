"""The paper's baselines (docs/algorithm.md §2), one function each, behind the same registry as VPO.

Usage::

    from vpo.estimators import get_estimator
    get_estimator("grpo")(rewards, group_ids)                      # one answer per rollout
    get_estimator("random_weight")(rewards, group_ids, seed=0)     # one w ~ Dir(1) per group
    get_estimator("goal_conditioned")(rewards, group_ids, goal_weights={"p1": w1, "p2": w2})

Each estimator's normalisation defaults are its reference's (``vpo.estimators.options``); its
diagnostics are named ``<estimator>/...``.

Shape glossary: B rollouts, G groups, N rollouts per group, M answers per chain, D objectives.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import (EstimatorResult, grpo_result, make_result, require_single_answer,
                                   row_scalars)
from vpo.estimators.group_weights import draw_group_weights, random_source
from vpo.estimators.normalize import group_normalize, group_stats
from vpo.estimators.normalize import whiten as whiten_values  # gdpo's option is named whiten
from vpo.estimators.options import GRPO_NORM, MAX_AT_K_NORM, WHITEN_MODES, WeightOptions, check_choice
from vpo.estimators.reductions import fixed_scalar, scalar_sum, weighted
from vpo.estimators.registry import register_estimator
from vpo.estimators.rules import check_k, group_norm, max_at_k_rule, max_at_k_weights, maxrl_rule
from vpo.objective import RewardBatch

__all__ = ["gdpo", "goal_conditioned", "grpo", "max_at_k", "max_at_k_weights", "maxrl", "multi_rlvr",
           "random_weight"]


@register_estimator("grpo", multi_answer=False, reduce=fixed_scalar, advantage=group_norm)
def grpo(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, std: str = GRPO_NORM.std,
         eps: float = GRPO_NORM.eps, degenerate: str = GRPO_NORM.degenerate,
         scale: str = GRPO_NORM.scale) -> EstimatorResult:
    """GRPO: group z-norm of the fixed scalar of each rollout's single answer.

    m_i must be <= 1 (m_i = 0 scores 0). ``scalar`` (N, D) -> (N,) defaults to the mean over
    D. Defaults are verl's ``grpo``: Bessel std, eps 1e-6, a one-member group gives s / (1 + eps).
    TRL: ``std="sample", eps=1e-4, degenerate="none"`` (and ``scale`` as its ``scale_rewards``).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "grpo")
    return grpo_result(batch, row_scalars(batch, scalar), std, eps, degenerate, scale, prefix="grpo")


@register_estimator("multi_rlvr", multi_answer=True, reduce=scalar_sum, advantage=group_norm)
def multi_rlvr(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, std: str = GRPO_NORM.std,
               eps: float = GRPO_NORM.eps, degenerate: str = GRPO_NORM.degenerate,
               scale: str = GRPO_NORM.scale) -> EstimatorResult:
    """Multi-RLVR: score = sum over the rollout's rows (already deduplicated and zero-padded by
    the task) of the fixed scalar; GRPO advantage with grpo's defaults."""
    batch = RewardBatch.from_rewards(rewards, group_ids)
    return grpo_result(batch, row_scalars(batch, scalar), std, eps, degenerate, scale, prefix="multi_rlvr")


@register_estimator("max_at_k", multi_answer=False, reduce=fixed_scalar, advantage=max_at_k_rule)
def max_at_k(rewards: Any, group_ids: Any, *, k: int | None = None, scalar: Callable | None = None,
             std: str = MAX_AT_K_NORM.std, eps: float = MAX_AT_K_NORM.eps, degenerate: str = MAX_AT_K_NORM.degenerate,
             scale: str = MAX_AT_K_NORM.scale) -> EstimatorResult:
    """Max@K (Bagirov et al. 2025): per group of N single-answer rollouts, the unbiased
    gradient weights of E[max fixed scalar over a k-subset], then group z-norm.

    ``scores`` are the fixed scalars the rule weights (what verl's ``compute_score`` returns;
    ``rules.max_at_k_rule`` turns them into advantages). ``k`` defaults to max(2, N // 2) clamped to N - 1 (k = N
    makes every A equal, so it is rejected when given explicitly, as in the authors' release).
    One-member groups get 0. Normalisation defaults as the release: Bessel std, eps 1e-6.
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "max_at_k")
    check_k(k)
    values = row_scalars(batch, scalar)
    result = grpo_result(batch, values, std, eps, degenerate, scale,
                         {"max_at_k/reward_mean": float(values.mean()) if values.size else 0.0}, prefix="max_at_k")
    result.advantages = max_at_k_rule(values, batch.group_index, k=k, std=std, eps=eps, degenerate=degenerate,
                                      scale=scale)
    return result


@register_estimator("gdpo", multi_answer=True)
def gdpo(rewards: Any, group_ids: Any, *, objective_weights: Any = None, std: str = GRPO_NORM.std,
         eps: float = GRPO_NORM.eps, degenerate: str = GRPO_NORM.degenerate, whiten: str = "verl", response_lengths: Sequence[float] | None = None) -> EstimatorResult:
    """GDPO (arXiv 2601.05242): z-norm each objective within the group, weighted sum, then
    whiten over the batch.

    A rollout's vector is its single answer's (m = 1), the per-objective max over its answers
    (m > 1), or zeros (m = 0). ``objective_weights`` (D,) default ones. Per-objective
    normalisation defaults are verl's ``grpo`` (Bessel std, eps 1e-6); ``whiten`` "verl"
    (verl's ``masked_whiten``: token-weighted when ``response_lengths`` (B,) gives each
    rollout's number of response tokens, as verl's own ``gdpo`` does; one weight per rollout
    without it), "trl" ((x - mean) / (std_bessel + 1e-4), TRL's ``normalize_then_sum``) or
    "none". ``scores`` are the weighted sums of the raw vectors.
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    check_choice(whiten, WHITEN_MODES, "whiten")
    if response_lengths is not None:
        if whiten != "verl":
            raise ValueError("gdpo: response_lengths weight verl's token-level whitening; use whiten='verl'")
        response_lengths = np.asarray(response_lengths, dtype=np.float64).reshape(-1)
        if response_lengths.shape != (batch.num_rollouts,):
            raise ValueError(f"gdpo: response_lengths has {response_lengths.size} entries for "
                             f"{batch.num_rollouts} rollouts")
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
    return make_result(batch, scores, whiten_values(summed, whiten, response_lengths), stds, prefix="gdpo")


@register_estimator("maxrl", multi_answer=False, reduce=fixed_scalar, advantage=maxrl_rule)
def maxrl(rewards: Any, group_ids: Any, *, scalar: Callable | None = None, eps: float = 1e-6,
          degenerate: str = "zero") -> EstimatorResult:
    """MaxRL (arXiv 2602.02710): A = (r - mean_g) / (mean_g + eps) of the fixed scalar.

    Single answer per rollout. A group whose rewards are all 0 gets 0. ``degenerate``: "zero"
    gives one-member groups 0; "raw" uses mean 0 for them (A = r / eps, the authors' release).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "maxrl")
    values = row_scalars(batch, scalar)
    advantages = maxrl_rule(values, batch.group_index, eps=eps, degenerate=degenerate)
    stds = group_stats(values, batch.group_index, batch.num_groups, 0)[2]
    return make_result(batch, values, advantages, stds, prefix="maxrl")


# ----- one weight vector per group: random weighting and goal conditioning ----------------
def _explicit_goal_weights(batch: RewardBatch, goal_weights: Any) -> np.ndarray:
    """(B, D_max) per-rollout goal weights from a label -> (D,) mapping or a (B, D) array,
    checked: finite, >= 0, the group's D, and one vector per group."""
    out: dict[int, np.ndarray] = {}
    per_rollout = None if isinstance(goal_weights, Mapping) else np.asarray(goal_weights, dtype=np.float64)
    if per_rollout is not None and (per_rollout.ndim != 2 or per_rollout.shape[0] != batch.num_rollouts):
        raise ValueError(f"goal_weights must map group labels to (D,) vectors or be a (B, D) array for "
                         f"B={batch.num_rollouts}, got shape {per_rollout.shape}")
    rows = np.zeros((batch.num_rollouts, max([int(d) for d in batch.group_dims] + [1])))
    for b, g in enumerate(batch.group_index.tolist()):
        label, dim = batch.group_labels[g], int(batch.group_dims[g])
        if per_rollout is not None:
            w = per_rollout[b]
        elif label in goal_weights:
            w = np.asarray(goal_weights[label], dtype=np.float64).reshape(-1)
        else:
            raise ValueError(f"goal_weights: no entry for group {label!r}")
        if dim and w.shape != (dim,):
            raise ValueError(f"goal_weights of group {label!r}: expected {dim} weights (its D), got {w.shape[0]}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"goal_weights of group {label!r} must be finite and non-negative")
        if g in out and not np.array_equal(out[g], w):
            raise ValueError(f"goal_weights: rollouts of group {label!r} have different weights; "
                             "a group shares one weight vector")
        out[g] = w
        rows[b, :w.shape[0]] = w
    return rows


def _one_weight_per_group(name: str, rewards: Any, group_ids: Any, explicit: Any, alpha: float, sampler: str,
                          seed: Any, rng: Any, step: Any, weight_keys: Any, scalar_norm: tuple[str, float, str, str]
                          ) -> EstimatorResult:
    """w . r of each rollout's single answer with one w per group, then GRPO's advantage."""
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, name)
    scores = np.zeros(batch.num_rollouts)
    if explicit is not None:
        given = [n for n, v in (("seed", seed), ("rng", rng), ("step", step), ("weight_keys", weight_keys))
                 if v is not None]
        if given:
            raise ValueError(f"goal_weights= fixes the weights; do not also pass {', '.join(given)}")
        rows = _explicit_goal_weights(batch, explicit)
        for bucket in batch.buckets:
            scores += np.bincount(bucket.row_rollout, minlength=batch.num_rollouts,
                                  weights=np.einsum("rd,rd->r", bucket.rows, rows[bucket.row_rollout, :bucket.dim]))
    else:
        options = WeightOptions(num_weights=1, alpha=alpha, sampler=sampler)
        source = random_source(seed, rng, step)
        for bucket, drawn in zip(batch.buckets, draw_group_weights(batch, options, seed=seed, step=step, rng=source,
                                                                   weight_keys=weight_keys)):
            w, block_scale = drawn.block(0, bucket.groups.size)  # (Gb, D, 1)
            w = w[:, :, 0] * (block_scale if block_scale is not None else 1.0)  # (Gb, D)
            by_group = np.zeros((batch.num_groups, bucket.dim))
            by_group[bucket.groups] = w
            rollout_w = by_group[batch.group_index[bucket.row_rollout]]
            scores += np.bincount(bucket.row_rollout, minlength=batch.num_rollouts,
                                  weights=np.einsum("rd,rd->r", bucket.rows, rollout_w))
    return grpo_result(batch, scores, *scalar_norm, prefix=name)


@register_estimator("random_weight", multi_answer=False, reduce=weighted, advantage=group_norm, weights="fixed")
def random_weight(rewards: Any, group_ids: Any, *, alpha: float = WeightOptions.alpha, sampler: str = "iid",
                  seed: Any = None, rng: np.random.Generator | None = None, step: Any = None,
                  weight_keys: Sequence[Hashable] | None = None, std: str = GRPO_NORM.std, eps: float = GRPO_NORM.eps,
                  degenerate: str = GRPO_NORM.degenerate, scale: str = GRPO_NORM.scale) -> EstimatorResult:
    """Random-weighting GRPO: one w ~ Dir(alpha) per group (prompt), shared by its rollouts; a
    rollout's score is w . r of its single answer; GRPO advantage with grpo's defaults.

    With ``seed`` the group's w is ``vpo.weights.group_weights([key], 1, D, seed=seed,
    step=step)`` (key: the group label or its ``weight_keys`` entry). The authors' release keeps
    a row's w for the whole run, so adapters pass no step (``FIXED``); with ``rng`` one w per
    group is drawn in first-appearance order. A group of identical answers gets zero advantages.
    """
    return _one_weight_per_group("random_weight", rewards, group_ids, None, alpha, sampler, seed, rng, step,
                                 weight_keys, (std, eps, degenerate, scale))


@register_estimator("goal_conditioned", multi_answer=False, reduce=weighted, advantage=group_norm, weights="fixed",
                    conditions_prompt=True)
def goal_conditioned(rewards: Any, group_ids: Any, *, goal_weights: Any = None, alpha: float = WeightOptions.alpha,
                     sampler: str = "iid", seed: Any = None, rng: np.random.Generator | None = None,
                     step: Any = None, weight_keys: Sequence[Hashable] | None = None, std: str = GRPO_NORM.std,
                     eps: float = GRPO_NORM.eps, degenerate: str = GRPO_NORM.degenerate,
                     scale: str = GRPO_NORM.scale) -> EstimatorResult:
    """Goal-conditioned GRPO: random weighting whose w is written into the prompt (docs/algorithm.md §2).

    ``goal_weights`` are the weights the prompts stated: a mapping group label -> (D,) or a
    (B, D) array (one vector per group); the adapters read them from the examples
    (``vpo.goals``). Without it the group's w is drawn exactly as ``random_weight`` draws it.
    Score w . r of the single answer, GRPO advantage.
    """
    return _one_weight_per_group("goal_conditioned", rewards, group_ids, goal_weights, alpha, sampler, seed, rng,
                                 step, weight_keys, (std, eps, degenerate, scale))

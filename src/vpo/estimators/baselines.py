"""The paper's baselines (docs/algorithm.md §2), each its two halves behind the same registry as
VPO; GDPO, which has no per-rollout score, is one whole-batch function.

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import EstimatorResult, make_result
from vpo.estimators.normalize import group_normalize
from vpo.estimators.normalize import whiten as whiten_values  # gdpo's option is named whiten
from vpo.estimators.options import GRPO_NORM, MAX_AT_K_NORM, WHITEN_MODES, check_choice
from vpo.estimators.reductions import fixed_scalar, scalar_sum, weighted
from vpo.estimators.registry import register_estimator
from vpo.estimators.rules import group_norm, max_at_k_rule, maxrl_rule
from vpo.objective import RewardBatch

__all__ = ["gdpo"]

register_estimator(
    "grpo", multi_answer=False, reduce=fixed_scalar, advantage=group_norm, defaults=GRPO_NORM.as_dict(),
    doc="""GRPO: group z-norm of the fixed scalar of each rollout's single answer.

m_i must be <= 1 (m_i = 0 scores 0). ``scalar`` (N, D) -> (N,) defaults to the mean over
D. Defaults are verl's ``grpo``: Bessel std, eps 1e-6, a one-member group gives s / (1 + eps).
TRL: ``std="sample", eps=1e-4, degenerate="none"`` (and ``scale`` as its ``scale_rewards``).
""")

register_estimator(
    "multi_rlvr", multi_answer=True, reduce=scalar_sum, advantage=group_norm, defaults=GRPO_NORM.as_dict(),
    doc="""Multi-RLVR: score = sum over the rollout's rows of the fixed scalar, GRPO advantage.

The rows are already deduplicated and zero-padded by the task; the advantage has grpo's defaults.
""")

register_estimator(
    "max_at_k", multi_answer=False, reduce=fixed_scalar, advantage=max_at_k_rule, defaults=MAX_AT_K_NORM.as_dict(),
    doc="""Max@K (Bagirov et al. 2025): unbiased gradient weights of E[max over a k-subset], group z-norm.

Per group of N single-answer rollouts, the weights of E[max fixed scalar over a k-subset].
``scores`` are the fixed scalars the rule weights (what verl's ``compute_score`` returns;
``rules.max_at_k_rule`` turns them into advantages). ``k`` defaults to max(2, N // 2) clamped to
N - 1 (k = N makes every A equal, so it is rejected when given explicitly, as in the authors'
release). One-member groups get 0. Normalisation defaults as the release: Bessel std, eps 1e-6.
""")

register_estimator(
    "maxrl", multi_answer=False, reduce=fixed_scalar, advantage=maxrl_rule,
    doc="""MaxRL (arXiv 2602.02710): A = (r - mean_g) / (mean_g + eps) of the fixed scalar.

Single answer per rollout. A group whose rewards are all 0 gets 0. ``degenerate``: "zero"
gives one-member groups 0; "raw" uses mean 0 for them (A = r / eps, the authors' release).
""")

register_estimator(
    "random_weight", multi_answer=False, reduce=weighted, advantage=group_norm, weights="fixed",
    defaults=GRPO_NORM.as_dict(),
    doc="""Random-weighting GRPO: one w ~ Dir(alpha) per group (prompt), score w . r, GRPO advantage.

The group's w is shared by its rollouts; a rollout's score is w . r of its single answer; the
advantage has grpo's defaults. With ``seed`` the group's w is ``vpo.weights.group_weights([key],
1, D, seed=seed, step=step)`` (key: the group label or its ``weight_keys`` entry). The authors'
release keeps a row's w for the whole run, so adapters pass no step (``FIXED``); with ``rng``
one w per group is drawn in first-appearance order. A group of identical answers gets zero
advantages.
""")

register_estimator(
    "goal_conditioned", multi_answer=False, reduce=weighted, advantage=group_norm, weights="fixed",
    conditions_prompt=True, defaults=GRPO_NORM.as_dict(),
    doc="""Goal-conditioned GRPO: random weighting whose w is written into the prompt (algorithm.md §2).

``goal_weights`` are the weights the prompts stated: a mapping group label -> (D,) or a
(B, D) array (one vector per group); the adapters read them from the examples
(``vpo.goals``). Without it the group's w is drawn exactly as ``random_weight`` draws it.
Score w . r of the single answer, GRPO advantage.
""")


@register_estimator("gdpo", multi_answer=True)
def gdpo(rewards: Any, group_ids: Any, *, objective_weights: Any = None, std: str = GRPO_NORM.std,
         eps: float = GRPO_NORM.eps, degenerate: str = GRPO_NORM.degenerate, whiten: str = "verl",
         response_lengths: Sequence[float] | None = None) -> EstimatorResult:
    """GDPO (arXiv 2601.05242): z-norm each objective within the group, weighted sum, then
    whiten over the batch.

    A rollout's vector is its single answer's (m = 1), the per-objective max over its answers
    (m > 1), or zeros (m = 0). ``objective_weights`` (D,) default ones. Per-objective
    normalisation defaults are verl's ``grpo`` (Bessel std, eps 1e-6); ``whiten`` "verl"
    (verl's ``masked_whiten``: token-weighted when ``response_lengths`` (B,) gives each
    rollout's number of response tokens, as verl's own ``gdpo`` does; one weight per rollout
    without it), "trl" ((x - mean) / (std_bessel + 1e-4), TRL's ``normalize_then_sum``) or
    "none". ``scores`` are the weighted sums of the raw vectors. It has no per-rollout
    reduction: the advantage needs each objective's group statistics, so it is one function.
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

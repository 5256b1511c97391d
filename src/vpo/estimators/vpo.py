"""The VPO estimator (docs/algorithm.md §1): the set score of each rollout, then group z-norm.

Usage::

    from vpo.estimators import get_estimator
    result = get_estimator("vpo")(rewards, group_ids, seed=0, step=3)   # K = 100, alpha = 1
    result.scores       # (B,) R_b = (1/K) sum_k max_i w_k . r_{b,i}
    result.advantages   # (B,) (R_b - mean_g) / (std_g + 1e-6), population std; 0 if std_g < 1e-6

VPO is its two halves, ``reductions.set_score`` and ``rules.group_norm``, like every estimator;
``vpo_blocked`` is its registered fast path (the keyed weights drawn unnormalised inside the
blocked scoring loop, normalised after the max, and two extra diagnostics), checked equal to the
derived function by ``check_estimator``; ``vpo_reference`` is the same estimator as a plain
loop, for reading and for tests.

Shape glossary: B rollouts, G groups, M answers per chain, D objectives, K weights.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import EstimatorResult, make_result
from vpo.estimators.group_weights import bucket_weights
from vpo.estimators.normalize import group_normalize
from vpo.estimators.options import VPO_NORM
from vpo.estimators.reductions import set_score
from vpo.estimators.registry import register_estimator
from vpo.estimators.rules import group_norm
from vpo.objective import RewardBatch, bucket_scores

__all__ = ["vpo_blocked", "vpo_reference"]



def vpo_reference(rewards: Sequence[np.ndarray], group_ids: Sequence[Hashable],
                  weights: Mapping[Hashable, np.ndarray], *, eps: float = VPO_NORM.eps
                  ) -> tuple[np.ndarray, np.ndarray]:
    """VPO as the paper writes it, one rollout and one group at a time.

    For rollout b of group g with answers r_{b,1..m} (rows of ``rewards[b]``, (m, D)) and the
    group's weights w_1..w_K (``weights[g]``, (K, D)):

        R_b = (1/K) * sum_k max_i (w_k . r_{b,i})        (R_b = 0 when m = 0)
        A_b = (R_b - mean_g R) / (std_g R + eps)          population std; A_b = 0 if std_g < eps

    Returns (scores (B,), advantages (B,)). The fast path ``vpo`` must agree with it.
    """
    scores = []
    for matrix, label in zip(rewards, group_ids, strict=True):
        matrix = np.asarray(matrix, dtype=np.float64)
        if matrix.shape[0] == 0:
            scores.append(0.0)
            continue
        w = np.asarray(weights[label], dtype=np.float64)
        best_per_weight = [max(float(w_k @ r_i) for r_i in matrix) for w_k in w]
        scores.append(sum(best_per_weight) / len(best_per_weight))
    advantages = []
    for b, label in enumerate(group_ids):
        members = [scores[j] for j, other in enumerate(group_ids) if other == label]
        mean = sum(members) / len(members)
        std = (sum((s - mean) ** 2 for s in members) / len(members)) ** 0.5
        advantages.append(0.0 if std < eps else (scores[b] - mean) / (std + eps))
    return np.array(scores), np.array(advantages)


@register_estimator("vpo", multi_answer=True, reduce=set_score, advantage=group_norm, weights="per_step",
                    defaults=VPO_NORM.as_dict())
def vpo_blocked(rewards: Any, group_ids: Any, *, num_weights: int, alpha: float, sampler: str, seed: Any,
                rng: np.random.Generator | None, step: Any, weight_keys: Sequence[Hashable] | None, weights: Any,
                std: str, eps: float, degenerate: str, scale: str) -> EstimatorResult:
    """VPO (docs/algorithm.md §1): R = mean_k max_i w_k . r_i with K weights per group, group z-norm.

    ``num_weights`` K, ``alpha``, ``sampler`` default to ``WeightOptions`` (100, 1.0, iid);
    its per-rollout reduction is ``reductions.set_score`` with the group's keyed weights;
    ``seed`` and ``step`` key the weights per group (``vpo.weights.group_weights`` of the group
    label, or of its ``weight_keys`` entry), or ``rng`` draws them; ``weights`` fixes them
    instead: a (K, D) array shared by every group, or a mapping group label -> (K, D) (then none
    of the sampling options may be given). Normalisation defaults follow the authors
    (``VPO_NORM``: population std, eps 1e-6, zero advantages when a group's std < eps).
    Extra diagnostics: ``vpo/mean_own_pool_score`` (mean over groups of the mean R) and
    ``vpo/mean_group_max`` (mean over groups of mean_k max over the whole group's answers).

    The fast path: keyed iid weights with alpha = 1 are drawn block by block inside the scoring
    loop and normalised after the max over answers (``vpo.objective.bucket_scores``).
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    options = dict(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed, rng=rng, step=step,
                   weight_keys=weight_keys, weights=weights)
    per_bucket = bucket_weights(batch, options, vpo_blocked.spec.defaults)
    scores = np.zeros(batch.num_rollouts)
    group_max = np.zeros(batch.num_groups)
    for bucket, weights_of_bucket in zip(batch.buckets, per_bucket):
        own, best = bucket_scores(bucket.padded, weights_of_bucket)
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
    return make_result(batch, scores, advantages, group_std, extra)

"""The VPO estimator (docs/algorithm.md §1): the set score of each rollout, then group z-norm.

Usage::

    from vpo.estimators import get_estimator
    result = get_estimator("vpo")(rewards, group_ids, seed=0, step=3)   # K = 100, alpha = 1
    result.scores       # (B,) R_b = (1/K) sum_k max_i w_k . r_{b,i}
    result.advantages   # (B,) (R_b - mean_g) / (std_g + 1e-6), population std; 0 if std_g < 1e-6

``vpo`` is the fast path (batched over groups, keyed weights drawn inside the scoring loop);
``vpo_reference`` is the same estimator as a plain loop, for reading and for tests.

Shape glossary: B rollouts, G groups, M answers per chain, D objectives, K weights.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import EstimatorResult, make_result
from vpo.estimators.group_weights import draw_group_weights, explicit_weights, random_source
from vpo.estimators.normalize import group_normalize
from vpo.estimators.options import VPO_NORM, WeightOptions
from vpo.estimators.reductions import set_score
from vpo.estimators.registry import register_estimator
from vpo.estimators.rules import group_norm
from vpo.objective import RewardBatch, bucket_scores

__all__ = ["vpo", "vpo_reference"]

_DEFAULT = WeightOptions()


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


@register_estimator("vpo", multi_answer=True, reduce=set_score, advantage=group_norm, weights="per_step")
def vpo(rewards: Any, group_ids: Any, *, num_weights: int = _DEFAULT.num_weights, alpha: float = _DEFAULT.alpha,
        sampler: str = _DEFAULT.sampler, seed: Any = None, rng: np.random.Generator | None = None, step: Any = None,
        weight_keys: Sequence[Hashable] | None = None, weights: Any = None, std: str = VPO_NORM.std,
        eps: float = VPO_NORM.eps, degenerate: str = VPO_NORM.degenerate,
        scale: str = VPO_NORM.scale) -> EstimatorResult:
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
    """
    batch = RewardBatch.from_rewards(rewards, group_ids)
    if weights is not None:
        drawn = (("num_weights", num_weights, _DEFAULT.num_weights), ("alpha", alpha, _DEFAULT.alpha),
                 ("sampler", sampler, _DEFAULT.sampler), ("seed", seed, None), ("rng", rng, None), ("step", step, None),
                 ("weight_keys", weight_keys, None))
        given = [n for n, v, default in drawn if v is not None and v != default]
        if given:
            raise ValueError(f"weights= fixes the weights; do not also pass {', '.join(given)}")
        per_bucket = explicit_weights(batch, weights)
    else:
        options = WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler)
        source = random_source(seed, rng, step)
        per_bucket = draw_group_weights(batch, options, seed=seed, step=step, rng=source, weight_keys=weight_keys)
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
    return make_result(batch, scores, advantages, group_std, extra)

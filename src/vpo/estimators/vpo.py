"""The VPO estimator (docs/algorithm.md §1): the set score of each rollout, then group z-norm.

Usage::

    from vpo.estimators import get_estimator
    result = get_estimator("vpo")(rewards, group_ids, seed=0, step=3)   # K = 100, alpha = 1
    result.scores       # (B,) R_b = (1/K) sum_k max_i w_k . r_{b,i}
    result.advantages   # (B,) (R_b - mean_g) / (std_g + 1e-6), population std; 0 if std_g < 1e-6

VPO is its two halves, ``reductions.set_score`` and ``rules.group_norm``, like every estimator:
``get_estimator("vpo")`` is the function derived from them (``derive``): the groups' keyed
weights drawn once, unnormalised (``vpo.estimators.context``), then scored a block of groups at a
time and normalised after the max (``vpo.objective.bucket_scores``); ``pool_scores`` are its two
extra diagnostics; ``vpo_reference`` is the same estimator as a plain loop, for reading and for
tests.

Shape glossary: B rollouts, G groups, M answers per chain, D objectives, K weights.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.options import VPO_NORM
from vpo.estimators.reductions import set_score
from vpo.estimators.registry import register_estimator
from vpo.estimators.rules import group_norm
from vpo.objective import GroupWeights, bucket_scores

__all__ = ["pool_scores", "vpo_reference"]


def vpo_reference(rewards: Sequence[np.ndarray], group_ids: Sequence[Hashable],
                  weights: Mapping[Hashable, np.ndarray], *, eps: float = VPO_NORM.eps
                  ) -> tuple[np.ndarray, np.ndarray]:
    """VPO as the paper writes it, one rollout and one group at a time.

    For rollout b of group g with answers r_{b,1..m} (rows of ``rewards[b]``, (m, D)) and the
    group's weights w_1..w_K (``weights[g]``, (K, D)):

        R_b = (1/K) * sum_k max_i (w_k . r_{b,i})        (R_b = 0 when m = 0)
        A_b = (R_b - mean_g R) / (std_g R + eps)          population std; A_b = 0 if std_g < eps

    Returns (scores (B,), advantages (B,)). ``get_estimator("vpo")`` must agree with it.
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


def pool_scores(stack: Any, scores: np.ndarray, *, weights: Any) -> dict[str, np.ndarray]:
    """VPO's per-group diagnostics (each (G,)), for one D of the batch: ``mean_own_pool_score``,
    the mean R of the group's rollouts (``scores`` (G, N), 0 in filler slots), and
    ``mean_group_max``, the set score of the group's whole pool, mean_k max over all its rollouts'
    answers (``stack.padded`` (G, N, M, D) as one rollout of N M answers; padding rows never win)."""
    real = stack.slot >= 0
    own_pool = scores.sum(axis=1) / np.maximum(real.sum(axis=1), 1)
    num_groups, num_slots, max_m, dim = stack.padded.shape
    pooled = stack.padded.reshape(num_groups, 1, num_slots * max_m, dim)
    group_max = bucket_scores(pooled, weights if isinstance(weights, GroupWeights)
                              else GroupWeights.stacked(np.asarray(weights, dtype=np.float64)))[0][:, 0]
    return {"mean_own_pool_score": own_pool, "mean_group_max": group_max}


register_estimator(
    "vpo", multi_answer=True, reduce=set_score, advantage=group_norm, weights="per_step",
    defaults=VPO_NORM.as_dict(), diagnostics=pool_scores,
    doc="""VPO (docs/algorithm.md §1): R = mean_k max_i w_k . r_i with K weights per group, group z-norm.

``num_weights`` K, ``alpha``, ``sampler`` default to ``WeightOptions`` (100, 1.0, iid); its
per-rollout reduction is ``reductions.set_score`` with the group's keyed weights; ``seed`` and
``step`` key the weights per group (``vpo.weights.group_weights`` of the group label, or of its
``weight_keys`` entry), or ``rng`` draws them; ``weights`` fixes them instead: a (K, D) array
shared by every group, or a mapping group label -> (K, D) (then none of the sampling options may
be given). Normalisation defaults follow the authors (``VPO_NORM``: population std, eps 1e-6,
zero advantages when a group's std < eps). Extra diagnostics (``pool_scores``, computed when
read): ``vpo/mean_own_pool_score`` (mean over groups of the mean R) and ``vpo/mean_group_max``
(mean over groups of mean_k max over the whole group's answers).
""")

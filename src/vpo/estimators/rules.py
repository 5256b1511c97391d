"""Advantage rules: per-rollout scores (B,) and group labels -> advantages (B,).

Usage::

    from vpo.estimators import advantages_from_scores, get_spec
    advantages_from_scores(get_spec("max_at_k"), scores, group_ids)      # its rule, its defaults
    group_norm(scores, group_ids, std="sample", eps=1e-6, degenerate="raw", scale="group")

An estimator registers its rule (``register_estimator(..., advantage=rule)``); an engine that
holds one scalar per rollout (verl's advantage estimators) calls it on the scores its reward
function returned, so the estimator need not run again. A rule's keyword options must be options
of the estimator: ``advantages_from_scores`` fills in the estimator's defaults.

Shape glossary: B rollouts, G groups, N rollouts per group.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vpo.estimators.normalize import group_normalize, group_stats
from vpo.estimators.options import check_nonnegative

__all__ = ["advantages_from_scores", "group_norm", "max_at_k_rule", "max_at_k_weights", "maxrl_rule"]


def _group_index(group_ids: Any, num: int) -> np.ndarray:
    from vpo.objective import factorize

    index, _ = factorize(group_ids, num)
    return index


def group_norm(scores: Any, group_ids: Any, *, std: str, eps: float, degenerate: str, scale: str) -> np.ndarray:
    """(s - mean_g) / (std + eps) within each group (``vpo.estimators.normalize.group_normalize``)."""
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    return group_normalize(values, _group_index(group_ids, values.size), std=std, eps=eps, degenerate=degenerate,
                           scale=scale)[0]


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


def max_at_k_weighted(values: np.ndarray, group_index: np.ndarray, group_sizes: np.ndarray, group_labels: Any,
                      k: int | None) -> np.ndarray:
    """Bagirov et al.'s unbiased gradient weights of E[max over a k-subset] for each rollout (B,)."""
    out = np.zeros(values.size)
    order = np.argsort(group_index, kind="stable")
    starts = np.concatenate([[0], np.cumsum(group_sizes)[:-1]])
    for n in np.unique(group_sizes).tolist():
        if n < 2:
            continue  # a one-member group: no subset comparison, advantage 0
        groups = np.flatnonzero(group_sizes == n)
        k_n = min(max(2, n // 2), n - 1) if k is None else int(k)
        if k_n >= n:
            raise ValueError(f"max_at_k: k={k_n} must be < n={n} (group {group_labels[groups[0]]!r})")
        members = order[starts[groups][:, None] + np.arange(n)[None, :]]  # (Gn, N) rollout indices
        member_values = values[members]
        rank_order = np.argsort(member_values, axis=1, kind="stable")
        sorted_values = np.take_along_axis(member_values, rank_order, axis=1)
        out[np.take_along_axis(members, rank_order, axis=1)] = sorted_values @ max_at_k_weights(n, k_n).T
    return out


def check_k(k: Any) -> None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")


def max_at_k_rule(scores: Any, group_ids: Any, *, k: int | None = None, std: str, eps: float, degenerate: str,
                  scale: str) -> np.ndarray:
    """Max@K: the k-subset gradient weights of the fixed scalars, group z-normalised; a
    one-member group gets 0."""
    from vpo.objective import factorize

    check_k(k)
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    index, labels = factorize(group_ids, values.size)
    sizes = np.bincount(index, minlength=len(labels))
    weighted = max_at_k_weighted(values, index, sizes, labels, k)
    advantages = group_normalize(weighted, index, std=std, eps=eps, degenerate=degenerate, scale=scale)[0]
    advantages[sizes[index] < 2] = 0.0
    return advantages


def maxrl_rule(scores: Any, group_ids: Any, *, eps: float = 1e-6, degenerate: str = "zero") -> np.ndarray:
    """MaxRL: (r - mean_g) / (mean_g + eps); "zero" gives one-member groups 0, "raw" uses mean 0 for them."""
    if degenerate not in ("zero", "raw"):
        raise ValueError(f"degenerate must be 'zero' or 'raw' for maxrl, got {degenerate!r}")
    eps = check_nonnegative(eps, "eps")
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    index = _group_index(group_ids, values.size)
    sizes, means, _ = group_stats(values, index, int(index.max()) + 1 if index.size else 0, 0)
    if degenerate == "raw":
        means = np.where(sizes == 1, 0.0, means)
    mean_b = means[index]
    with np.errstate(divide="ignore", invalid="ignore"):
        advantages = np.where(mean_b + eps != 0, (values - mean_b) / (mean_b + eps), 0.0)
    if degenerate == "zero":
        advantages[sizes[index] == 1] = 0.0
    return advantages


def advantages_from_scores(spec: Any, scores: Any, group_ids: Any, **options: Any) -> np.ndarray:
    """Advantages (B,) of estimator ``spec`` from per-rollout ``scores`` (B,): its registered rule
    with its defaults, overridden by ``options`` (each must be one of ``spec.advantage_options``)."""
    if spec.advantage is None:
        raise ValueError(f"estimator {spec.name!r} registers no advantage rule on per-rollout scores")
    unknown = sorted(set(options) - set(spec.advantage_options))
    if unknown:
        raise ValueError(f"estimator {spec.name!r}: {', '.join(unknown)} is not an option of its advantage rule "
                         f"(it takes {', '.join(spec.advantage_options) or 'none'})")
    merged = {name: spec.defaults[name] for name in spec.advantage_options if name in spec.defaults}
    merged.update(options)
    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    group_ids = list(group_ids)
    if len(group_ids) != values.size:
        raise ValueError(f"{len(group_ids)} group ids for {values.size} scores")
    return np.asarray(spec.advantage(values, group_ids, **merged), dtype=np.float64).reshape(-1)

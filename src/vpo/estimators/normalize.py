"""Group normalisation of per-rollout scores, reproducing each engine's conventions.

Usage::

    from vpo.estimators.normalize import group_normalize
    adv, group_std = group_normalize(scores, group_index, std="sample", eps=1e-4, degenerate="none")

Shape glossary: B rollouts, G groups, D objectives. ``NormOptions`` (``vpo.estimators.options``)
documents the knobs and holds each engine's presets.
"""

from __future__ import annotations

import numpy as np

from vpo.estimators.options import (DEGENERATE_MODES, SCALE_MODES, STD_MODES, WHITEN_MODES, check_choice,
                                    check_nonnegative)

__all__ = ["group_normalize", "group_stats", "whiten"]


def group_stats(values: np.ndarray, group_index: np.ndarray, num_groups: int,
                ddof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group (size (G,), mean (G, ...), std (G, ...)) of ``values`` (B, ...).

    The std of a group with size <= ddof is reported as 0 (callers apply their own rule).
    Two passes (mean, then squared deviations) keep the std exact for identical scores.
    """
    sizes = np.bincount(group_index, minlength=num_groups)
    shape = (num_groups,) + values.shape[1:]
    safe = np.maximum(sizes, 1).reshape((-1,) + (1,) * (values.ndim - 1))
    if values.ndim == 1:  # bincount adds in the same order as np.add.at, several times faster
        means = np.bincount(group_index, weights=values, minlength=num_groups) / safe
        squares = np.bincount(group_index, weights=(values - means[group_index]) ** 2, minlength=num_groups)
    else:
        sums = np.zeros(shape)
        np.add.at(sums, group_index, values)
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
    batch's ("batch"), or no division ("none": A = s - mean_g). ``degenerate`` as in
    ``NormOptions``.
    """
    check_choice(std, STD_MODES, "std")
    check_choice(degenerate, DEGENERATE_MODES, "degenerate")
    check_choice(scale, SCALE_MODES, "scale")
    eps = check_nonnegative(eps, "eps")
    values = np.asarray(scores, dtype=np.float64)
    group_index = np.asarray(group_index, dtype=np.int64)
    num_groups = int(group_index.max()) + 1 if group_index.size else 0
    ddof = 1 if std == "sample" else 0
    sizes, means, stds = group_stats(values, group_index, num_groups, ddof)
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


def whiten(values: np.ndarray, mode: str, lengths: np.ndarray | None = None) -> np.ndarray:
    """Batch whitening of per-rollout values (B,).

    ``verl``: verl's ``masked_whiten`` over response tokens, (x - mean) / sqrt(var + 1e-8) with
    the token-weighted mean and the Bessel-corrected token variance, where rollout b counts
    ``lengths[b]`` times (its response tokens; one each when ``lengths`` is None, as in TRL where
    an advantage is per rollout). ``trl``: (x - mean) / (std_bessel + 1e-4) over rollouts.
    ``none``: unchanged.
    """
    check_choice(mode, WHITEN_MODES, "whiten")
    if mode == "none" or values.size == 0:
        return values.copy()
    if mode == "trl":
        if values.size < 2:
            return np.zeros_like(values)
        return (values - values.mean()) / (values.std(ddof=1) + 1e-4)
    counts = np.ones_like(values) if lengths is None else np.asarray(lengths, dtype=np.float64).reshape(values.shape)
    if np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError("whiten: lengths must be finite and >= 0")
    total = counts.sum()
    if total < 2:
        return np.zeros_like(values)
    mean = (counts * values).sum() / total
    var = (counts * (values - mean) ** 2).sum() / (total - 1)  # verl masked_var(unbiased=True)
    return (values - mean) / np.sqrt(var + 1e-8)

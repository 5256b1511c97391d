"""The set objective: score a rollout's answers by E_w[max_i w . r_i].

Usage::

    from vpo.objective import set_scores
    rewards = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros((0, 2))]   # B = 2 rollouts
    weights = sample_simplex(100, 2, rng=np.random.default_rng(0))       # (K, D)
    set_scores(rewards, weights)            # (B,): mean_k max_i w_k . r_i; empty rollout -> 0
    set_scores(rewards, exact=True)         # D <= 2: the exact E_w under w ~ Uniform(simplex)

Shape glossary: B rollouts, G groups, M answers per chain (m), D objectives, K weights.

Rewards arrive as a list of B arrays (m_i, D_i); m_i may be 0 (an unparseable rollout, score
0) and m_i, D_i may vary per rollout. ``RewardBatch`` validates such a list once, groups the
rollouts, and lays them out as padded arrays so every score is computed by a few batched
matrix products with no Python loop over rollouts or groups. Padding rows hold the smallest
reward of their bucket (at most 0), which never raises a max over real rows when the weights are
non-negative: w . pad = pad * sum(w) <= w . r for every real row r.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RewardBatch", "set_scores", "exact_set_scores"]


def _as_reward_array(item: Any, index: int) -> np.ndarray:
    try:
        arr = np.asarray(item, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"rewards[{index}]: not a numeric (m, D) array ({err})") from None
    if arr.ndim != 2:
        raise ValueError(f"rewards[{index}]: expected a 2-D (m, D) array, got shape {arr.shape}")
    return arr


@dataclass
class DimBucket:
    """All rollouts whose group has D objectives, padded to one dense array (what a batched
    reduction receives: ``vpo.estimators.reductions``).

    ``rollouts`` (n,) batch indices in group order; ``groups`` (Gb,) group indices;
    ``rows`` (R, D) the real answer rows concatenated; ``row_rollout`` (R,) batch index of each
    row; ``padded`` (Gb, N, M, D) with N the largest group and M the largest m in the bucket;
    ``slot`` (Gb, N) batch index of each padded rollout, -1 for filler slots; ``pad_value``
    the value of padding rows, min(0, smallest reward of the bucket); ``rollout_counts`` (B,)
    answers of every rollout of the batch. When the rewards came as one array already in group
    order, ``rows`` and ``padded`` are views of it: read only.
    """

    dim: int
    rollouts: np.ndarray
    groups: np.ndarray
    rows: np.ndarray
    row_rollout: np.ndarray
    padded: np.ndarray
    slot: np.ndarray
    pad_value: float
    rollout_counts: np.ndarray

    def scatter(self, out: np.ndarray, values: np.ndarray) -> None:
        """Write per-slot ``values`` (Gb, N, ...) to their rollouts' rows of ``out`` (B, ...)."""
        real = self.slot >= 0
        out[self.slot[real]] = values[real]

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """(Gb, N) answers of each slot's rollout; 0 for filler slots."""
        return np.where(self.slot >= 0, self.rollout_counts[np.maximum(self.slot, 0)], 0)

    @functools.cached_property
    def row_slot(self) -> np.ndarray:
        """(R,) flat index into the (Gb, N) slots of each row's rollout."""
        real = self.slot >= 0
        where = np.full(int(self.rollouts.max()) + 1 if self.rollouts.size else 0, -1, dtype=np.int64)
        where[self.slot[real]] = np.flatnonzero(real.reshape(-1))
        return where[self.row_rollout]

    @functools.cached_property
    def row_group(self) -> np.ndarray:
        """(R,) index into ``groups`` (0..Gb-1) of each row's group."""
        return self.row_slot // self.slot.shape[1]

    def sum_rows(self, values: np.ndarray) -> np.ndarray:
        """Per-row ``values`` (R,) summed over each rollout's rows: (Gb, N), 0 for empty rollouts
        and filler slots."""
        return np.bincount(self.row_slot, weights=values, minlength=self.slot.size).reshape(self.slot.shape)


@dataclass
class RewardBatch:
    """A validated batch of per-rollout reward matrices, grouped and padded.

    ``counts`` (B,) answers per rollout; ``group_index`` (B,) index into ``group_labels``
    (first-appearance order); ``group_dims`` (G,) D of each group (0 when every rollout of the
    group is empty); ``group_sizes`` (G,); ``buckets`` one ``DimBucket`` per distinct D > 0.
    """

    num_rollouts: int
    counts: np.ndarray
    group_index: np.ndarray
    group_labels: list[Hashable]
    group_dims: np.ndarray
    group_sizes: np.ndarray
    buckets: list[DimBucket] = field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return len(self.group_labels)

    @classmethod
    def from_rewards(cls, rewards: Any, group_ids: Any = None) -> RewardBatch:
        """Validate ``rewards`` (list of B arrays (m_i, D_i), or one (B, M, D) array) and
        ``group_ids`` ((B,) hashable labels; None puts every rollout in its own group).

        Raises ValueError naming the rollout for a non-2-D array, NaN/inf, or a width that
        differs from the rest of its group (empty rollouts are exempt: they have no rows).
        """
        stacked, arrays = _stack(rewards)
        num = len(arrays) if stacked is None else stacked.shape[0]
        if group_ids is None:
            group_index = np.arange(num, dtype=np.int64)
            labels: list[Hashable] = list(range(num))
        else:
            group_index, labels = factorize(group_ids, num)
        num_groups = len(labels)

        if stacked is not None:
            counts = np.full(num, stacked.shape[1], dtype=np.int64)
            widths = np.full(num, stacked.shape[2], dtype=np.int64)
        else:
            counts = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=num)
            widths = np.fromiter((a.shape[1] for a in arrays), dtype=np.int64, count=num)

        # A group's D is the width of its first non-empty rollout; the others must agree.
        nonempty = counts > 0
        group_dims = np.zeros(num_groups, dtype=np.int64)
        ne_idx = np.flatnonzero(nonempty)
        first = np.full(num_groups, -1, dtype=np.int64)
        # reverse assignment leaves the first occurrence in place
        first[group_index[ne_idx[::-1]]] = ne_idx[::-1]
        has_rows = first >= 0
        group_dims[has_rows] = widths[first[has_rows]]
        mismatch = nonempty & (widths != group_dims[group_index])
        if mismatch.any():
            b = int(np.flatnonzero(mismatch)[0])
            g = group_index[b]
            raise ValueError(
                f"rewards[{b}]: width {widths[b]} differs from D={group_dims[g]} of its group "
                f"{labels[g]!r} (set by rewards[{first[g]}])"
            )
        if nonempty.any() and (widths[nonempty] == 0).any():
            b = int(np.flatnonzero(nonempty & (widths == 0))[0])
            raise ValueError(f"rewards[{b}]: has {counts[b]} answers but D = 0 objectives")

        group_sizes = np.bincount(group_index, minlength=num_groups)
        batch = cls(num, counts, group_index, labels, group_dims, group_sizes)
        rollout_dims = group_dims[group_index]
        for dim in np.unique(rollout_dims[rollout_dims > 0]).tolist():
            batch.buckets.append(_make_bucket(batch, int(dim), rollout_dims, stacked, arrays))
        return batch

    # ----- per-rollout reductions over answer rows -------------------------------------
    def reduce_rows(self, bucket: DimBucket, values: np.ndarray, how: str) -> np.ndarray:
        """Reduce per-row ``values`` (R, ...) of ``bucket`` to per-rollout (n, ...) in the
        order of ``bucket.rollouts``; how = "sum" or "max"; empty rollouts get 0."""
        pos = np.empty(self.num_rollouts, dtype=np.int64)
        pos[bucket.rollouts] = np.arange(bucket.rollouts.size)
        out = np.zeros((bucket.rollouts.size,) + values.shape[1:])
        target = pos[bucket.row_rollout]
        if how == "sum":
            np.add.at(out, target, values)
        elif how == "max":
            out[:] = -np.inf
            np.maximum.at(out, target, values)
            out[np.isneginf(out)] = 0.0
        else:
            raise ValueError(f"how must be 'sum' or 'max', got {how!r}")
        return out


def _stack(rewards: Any) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """Dense (B, M, D) float64 when every rollout has the same shape, else the list of arrays."""
    if isinstance(rewards, np.ndarray):
        if rewards.ndim != 3:
            raise ValueError(
                f"rewards: an array must be 3-D (B, M, D), got shape {rewards.shape}; "
                "pass a list of (m, D) arrays for ragged batches"
            )
        return np.asarray(rewards, dtype=np.float64), []
    if isinstance(rewards, str | bytes) or not isinstance(rewards, Sequence):
        raise ValueError(f"rewards must be a list of (m, D) arrays, got {type(rewards).__name__}")
    try:  # common case, equal shapes: numpy stacks the list in C
        dense = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        dense = None  # ragged or non-numeric: checked one by one below for a precise message
    if dense is not None and dense.ndim == 3 and dense.shape[0] == len(rewards):
        return dense, []
    arrays = [_as_reward_array(item, i) for i, item in enumerate(rewards)]
    if arrays and all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays), arrays
    return None, arrays


def factorize(group_ids: Any, num: int) -> tuple[np.ndarray, list[Hashable]]:
    """(B,) int64 group index and the G labels in first-appearance order.

    ``group_ids`` may be any sequence of hashable labels (ints, strings, tuples, mixed);
    groups need not be contiguous. Raises ValueError when its length differs from ``num``.
    """
    if isinstance(group_ids, str | bytes):
        raise ValueError("group_ids must be a sequence of labels, got a single string")
    try:
        length = len(group_ids)
    except TypeError:
        raise ValueError(f"group_ids must be a sequence, got {type(group_ids).__name__}") from None
    if length != num:
        raise ValueError(f"group_ids has length {length} but rewards has {num} rollouts")
    if not isinstance(group_ids, np.ndarray) and length and len(set(map(type, group_ids))) == 1 and isinstance(
            group_ids[0], int | str) and not isinstance(group_ids[0], bool):
        group_ids = np.asarray(group_ids)  # one plain type: numpy can factorize it without a Python loop
    if isinstance(group_ids, np.ndarray) and group_ids.ndim == 1 and group_ids.dtype.kind in "iu" and length:
        # already a first-appearance index (0, then each new label one above the largest so far:
        # contiguous groups, or a RewardBatch's own group_index): no sort needed
        ids = group_ids.astype(np.int64)
        running = np.maximum.accumulate(ids)
        if ids[0] == 0 and (ids[1:] <= running[:-1] + 1).all() and (ids >= 0).all():
            return ids, list(range(int(running[-1]) + 1))
    if isinstance(group_ids, np.ndarray) and group_ids.ndim == 1 and group_ids.dtype.kind in "biuUS":
        uniq, first, inverse = np.unique(group_ids, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # np.unique sorts; restore first appearance
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return rank[inverse.reshape(-1)].astype(np.int64), uniq[order].tolist()
    codes: dict[Hashable, int] = {}
    index = np.empty(num, dtype=np.int64)
    for b, label in enumerate(group_ids):
        if isinstance(label, np.generic):
            label = label.item()  # np.int64(3) and 3 are one group
        try:
            index[b] = codes.setdefault(label, len(codes))
        except TypeError:
            raise ValueError(f"group_ids[{b}] is not hashable: {label!r}") from None
    return index, list(codes)


def _make_bucket(batch: RewardBatch, dim: int, rollout_dims: np.ndarray, stacked: np.ndarray | None,
                 arrays: list[np.ndarray]) -> DimBucket:
    """The bucket of rollouts with D = ``dim``. ``stacked`` (B, M, D) when every rollout has the
    same shape (then rows are sliced, not gathered one by one), else ``arrays`` (B,) (m_i, D_i)."""
    rollouts = np.flatnonzero(rollout_dims == dim)
    index = batch.group_index[rollouts]
    if index.size and (index[1:] >= index[:-1]).all():  # contiguous groups in order (the common case): no sort
        start = np.flatnonzero(np.concatenate([[True], index[1:] != index[:-1]]))
        groups, sizes = index[start], np.diff(np.append(start, index.size))
    else:
        rollouts = rollouts[np.argsort(index, kind="stable")]
        groups, start, sizes = np.unique(batch.group_index[rollouts], return_index=True, return_counts=True)
    num_slots = int(sizes.max())
    counts = batch.counts[rollouts]
    if stacked is not None:
        in_order = rollouts.size == stacked.shape[0] and bool((rollouts == np.arange(rollouts.size)).all())
        rows_3d = stacked if in_order else stacked[rollouts]  # (n, M, D), a view when already in group order
        rows = rows_3d.reshape(-1, dim)
        row_rollout = np.repeat(rollouts, stacked.shape[1])
    else:
        has_rows = counts > 0
        nonempty = rollouts[has_rows]
        rows = (np.concatenate([arrays[b] for b in nonempty.tolist()]) if nonempty.size
                else np.zeros((0, dim)))
        row_rollout = np.repeat(nonempty, counts[has_rows])
    low = float(rows.min()) if rows.size else 0.0
    if not (np.isfinite(low) and np.isfinite(rows.max() if rows.size else 0.0)):  # min/max propagate NaN
        bad = ~np.isfinite(rows).all(axis=1)
        raise ValueError(f"rewards[{int(row_rollout[np.flatnonzero(bad)[0]])}]: contains NaN or inf")
    pad_value = min(0.0, low)
    if stacked is not None and (sizes == num_slots).all():  # equal groups: no filler slot, no padding copy
        slot = rollouts.reshape(groups.size, num_slots)
        padded = rows_3d.reshape(groups.size, num_slots, *rows_3d.shape[1:])
        return DimBucket(dim, rollouts, groups, rows, row_rollout, padded, slot, pad_value, batch.counts)
    local_group = np.repeat(np.arange(groups.size), sizes)
    position = np.arange(rollouts.size) - np.repeat(start, sizes)
    slot = np.full((groups.size, num_slots), -1, dtype=np.int64)
    slot[local_group, position] = rollouts
    padded = np.full((groups.size, num_slots, max(int(counts.max()), 1), dim), pad_value)
    if stacked is not None:
        padded[local_group, position] = rows_3d
    else:
        row_local = np.repeat(np.flatnonzero(has_rows), counts[has_rows])
        starts = np.cumsum(counts[has_rows]) - counts[has_rows]
        answer = np.arange(rows.shape[0]) - np.repeat(starts, counts[has_rows])
        padded[local_group[row_local], position[row_local], answer] = rows
    return DimBucket(dim, rollouts, groups, rows, row_rollout, padded, slot, pad_value, batch.counts)


def check_weights(weights: Any, name: str, dim: int | None = None, rollout: int | None = None) -> np.ndarray:
    """Validated float64 (K, D) weights: K >= 1, finite, non-negative, and D == ``dim`` when given
    (``rollout``, a batch index with that D, is named in the error)."""
    arr = np.asarray(weights, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name}: expected a (K, D) array with K >= 1, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        where = "the rewards have" if rollout is None else f"rewards[{rollout}] has"
        raise ValueError(f"{name}: has D={arr.shape[1]} columns but {where} D={dim}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name}: weights must be finite and non-negative")
    return arr


@dataclass(frozen=True)
class GroupWeights:
    """The K weight vectors of each of G groups with D objectives: a (G, K, D) array-like produced
    a block of groups at a time (what a reduction's batched form gets as its ``weights``).

    ``block(start, stop)`` gives ``(w, scale)`` for groups start..stop-1: ``w`` (c, D, K)
    non-negative, ``scale`` (c, K) positive or None (all ones). Weight vector k of group g is
    ``scale[g, k] * w[g, :, k]``; the scale is applied after the max over answers, since
    max_i (s w) . r_i = s max_i w . r_i for s > 0, so normalising unnormalised draws costs
    (c, K) work instead of a pass over the weights (``bucket_scores`` takes a block of groups at a
    time, so its products stay in cache). ``rows(start, stop)`` gives the same groups'
    weights as a (c, K, D) array (default: from ``block``). ``np.asarray(weights)`` is the whole
    (G, K, D) array and ``weights[g]`` group g's (K, D).
    """

    num: int
    """K, weight vectors per group."""
    groups: int
    """G."""
    dim: int
    """D."""
    block: Callable[[int, int], tuple[np.ndarray, np.ndarray | None]] = field(repr=False)
    rows: Callable[[int, int], np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def stacked(cls, weights: np.ndarray) -> GroupWeights:
        """From a ready (G, K, D) array."""
        return cls(weights.shape[1], weights.shape[0], weights.shape[2],
                   lambda start, stop: (weights[start:stop].transpose(0, 2, 1), None),
                   lambda start, stop: weights[start:stop])

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.groups, self.num, self.dim

    def __len__(self) -> int:
        return self.groups

    def dense(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(c, K, D) float64 weights of groups start..stop-1 (all by default)."""
        stop = self.groups if stop is None else stop
        if self.rows is not None:
            return np.asarray(self.rows(start, stop), dtype=np.float64)
        w, scale = self.block(start, stop)
        return (w if scale is None else w * scale[:, None, :]).transpose(0, 2, 1)

    def __getitem__(self, g: int) -> np.ndarray:
        """Group ``g``'s (K, D) weights."""
        g = range(self.groups)[g]  # IndexError past the end; negative indices count from it
        return self.dense(g, g + 1)[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)


_BLOCK_VALUES = 1 << 17
"""Products w . r computed per block of groups: 1 MiB of float64, so a block stays in a core's L2
cache (a block's scores do not depend on the block size; measured by benchmarks/estimators.py)."""


def _max_over_answers(values: np.ndarray, out: np.ndarray) -> None:
    """``out`` (c, N, K) = max over axis 2 of ``values`` (c, N, M, K): M - 1 elementwise maxima,
    faster than numpy's reduction over a short middle axis (and the same numbers)."""
    if values.shape[2] == 1:
        np.copyto(out, values[:, :, 0])
        return
    np.maximum(values[:, :, 0], values[:, :, 1], out=out)
    for m in range(2, values.shape[2]):
        np.maximum(out, values[:, :, m], out=out)


def bucket_scores(padded: np.ndarray, weights: np.ndarray | GroupWeights) -> tuple[np.ndarray, np.ndarray]:
    """Scores of padded rollouts and each group's best.

    ``padded`` (Gb, N, M, D); ``weights`` (K, D) shared by every group, or ``GroupWeights``.
    Returns ``scores`` (Gb, N) = mean_k max_m w_k . r and ``group_best`` (Gb,) = mean_k of the
    max over the group's rollouts and answers (filler slots hold pad rows, which never exceed a
    real row). Groups are processed in blocks of about ``_BLOCK_VALUES`` products, which keeps
    the (c, N, M, K) products, their max and the block's weights in cache.
    """
    num_groups, num_slots, max_m, dim = padded.shape
    shared = isinstance(weights, np.ndarray)
    num = weights.shape[0] if shared else weights.num
    step = min(num_groups, max(1, _BLOCK_VALUES // (num_slots * max_m * num)))
    scores = np.empty((num_groups, num_slots))
    group_best = np.empty(num_groups)
    # buffers reused by every block: fresh ones would be page-faulted in again each time
    values_buf = np.empty((step, num_slots * max_m, num))
    own_buf = np.empty((step, num_slots, num))
    for start in range(0, num_groups, step):
        stop = min(start + step, num_groups)
        block, values, own = padded[start:stop], values_buf[:stop - start], own_buf[:stop - start]
        if shared:  # one GEMM: (c N M, D) @ (D, K)
            np.matmul(block.reshape(-1, dim), weights.T, out=values.reshape(-1, num))
            scale = None
        else:
            w, scale = weights.block(start, stop)
            # a contiguous (c, D, K) operand keeps matmul on its batched-GEMM path
            np.matmul(block.reshape(stop - start, num_slots * max_m, dim), np.ascontiguousarray(w), out=values)
        _max_over_answers(values.reshape(stop - start, num_slots, max_m, num), own)  # (c, N, K)
        best = own.max(axis=1)  # (c, K)
        if scale is None:
            scores[start:stop] = own.mean(axis=-1)
            group_best[start:stop] = best.mean(axis=-1)
        else:  # the mean over k of scale * value, as one batched GEMV
            scale = scale / num
            scores[start:stop] = np.matmul(own, scale[:, :, None])[..., 0]
            group_best[start:stop] = np.einsum("ck,ck->c", best, scale)
    return scores, group_best


def set_scores(rewards: Any, weights: Any = None, *, exact: bool = False) -> np.ndarray:
    """Set score of each rollout: float64 (B,), score_b = mean_k max_i w_k . r_{b,i}.

    ``rewards``: list of B arrays (m_i, D_i) (m_i = 0 scores 0), or a (B, M, D) array.
    ``weights``: (K, D) shared by every rollout, or a list of B arrays (K_b, D_b) / a
    (B, K, D) array, one set per rollout. Weights must be non-negative (they need not sum to
    1). ``exact=True`` (weights must be None) returns E_w[max_i w . r_i] for w uniform on the
    simplex (Dirichlet(1)), in closed form; only D <= 2 is supported.
    """
    if exact:
        if weights is not None:
            raise ValueError("set_scores: exact=True integrates over the uniform simplex; pass weights=None")
        return exact_set_scores(rewards)
    if weights is None:
        raise ValueError("set_scores: pass weights (K, D), a list of B (K, D) arrays, or exact=True")
    batch = RewardBatch.from_rewards(rewards)
    scores = np.zeros(batch.num_rollouts)
    dense = weights if isinstance(weights, np.ndarray) else None
    if dense is None:
        try:
            dense = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            dense = None  # ragged list: one (K_b, D_b) set per rollout
    if dense is not None and dense.ndim == 2:
        matrix = check_weights(dense, "weights")
        for bucket in batch.buckets:
            check_weights(matrix, "weights", bucket.dim, int(bucket.rollouts[0]))
            bucket.scatter(scores, bucket_scores(bucket.padded, matrix)[0])
    else:
        if dense is not None and dense.ndim != 3:
            raise ValueError(f"weights: expected (K, D), (B, K, D) or a list of B (K, D) arrays, got shape {dense.shape}")
        per_rollout = dense if dense is not None else weights
        if len(per_rollout) != batch.num_rollouts:
            raise ValueError(f"weights: got {len(per_rollout)} weight sets for {batch.num_rollouts} rollouts")
        for bucket in batch.buckets:
            # set_scores puts every rollout in its own group: bucket slots are (n, 1)
            order = bucket.slot[:, 0]
            if dense is not None:
                stack = check_weights(dense[order].reshape(-1, dense.shape[2]), "weights", bucket.dim)
                stack = stack.reshape(order.size, dense.shape[1], bucket.dim)
            else:
                mats = [check_weights(per_rollout[b], f"weights[{b}]", bucket.dim) for b in order.tolist()]
                if len({m.shape[0] for m in mats}) > 1:
                    raise ValueError(f"weights: rollouts with D={bucket.dim} must share one K, "
                                     f"got {sorted({m.shape[0] for m in mats})}")
                stack = np.stack(mats)
            bucket.scatter(scores, bucket_scores(bucket.padded, GroupWeights.stacked(stack))[0])
    scores[batch.counts == 0] = 0.0
    return scores


def exact_set_scores(rewards: Any) -> np.ndarray:
    """E_{w ~ Uniform(simplex)}[max_i w . r_i] in closed form, for D <= 2: float64 (B,).

    D = 1: w = 1, the score is max_i r_i. D = 2: w = (t, 1 - t) with t ~ U(0, 1), so the
    integrand max_i (b_i + t (a_i - b_i)) is the upper envelope of m lines. It is piecewise
    linear with kinks only where two lines cross, so the trapezoid rule over {0, 1} and every
    pairwise crossing in (0, 1) integrates it exactly. Empty rollouts score 0.
    """
    batch = RewardBatch.from_rewards(rewards)
    scores = np.zeros(batch.num_rollouts)
    for bucket in batch.buckets:
        if bucket.dim > 2:
            b = int(bucket.rollouts[0])
            raise ValueError(f"exact=True supports D <= 2 only; rewards[{b}] has D={bucket.dim}")
        rows = bucket.padded.reshape(-1, bucket.padded.shape[2], bucket.dim)  # (n, M, D)
        if bucket.dim == 1:
            values = rows[:, :, 0].max(axis=1)
        else:
            at_one, at_zero = rows[:, :, 0], rows[:, :, 1]  # value of each line at t = 1 and t = 0
            slope = at_one - at_zero
            first, second = np.triu_indices(rows.shape[1], k=1)
            denom = slope[:, first] - slope[:, second]
            with np.errstate(divide="ignore", invalid="ignore"):
                cross = (at_zero[:, second] - at_zero[:, first]) / denom
            # parallel lines never cross; any t outside (0, 1) is harmless, clip it to an end
            cross = np.where(np.isfinite(cross), np.clip(cross, 0.0, 1.0), 0.0)
            points = np.sort(np.concatenate(
                [np.zeros((rows.shape[0], 1)), cross, np.ones((rows.shape[0], 1))], axis=1), axis=1)
            envelope = (at_zero[:, None, :] + points[:, :, None] * slope[:, None, :]).max(axis=2)
            values = (0.5 * (envelope[:, 1:] + envelope[:, :-1]) * np.diff(points, axis=1)).sum(axis=1)
        values = values.reshape(bucket.slot.shape)
        bucket.scatter(scores, values)
    scores[batch.counts == 0] = 0.0
    return scores

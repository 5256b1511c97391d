"""Evaluation metrics for answer pools: pass@k, best@k, coverage, diversity, Pareto, E_w[max].

Usage::

    from vpo import metrics
    metrics.pass_at_k(30, 4, 10)                          # Chen et al. unbiased pass@k
    metrics.best_at_k(scalars, 10)                        # expected max of 10 of the n values
    metrics.best_at_k_curve(scalars)                      # (n,): best@1 .. best@n
    metrics.preference_best_at_k(vectors, eval_w, 10)     # mean over weights of best@10 of w.r
    mean, low, high = metrics.mean_ci(per_example_scores)

Glossary of shapes: n answers in a pool (docs/algorithm.md §5 counts answers, not chains), D
objectives, K (or E) weight vectors, T tests. A pool's reward vectors are an (n, D) array with
entries in [0, 1]; its fixed scalars are an (n,) array.

Every estimator of a k-subset statistic is the exact expectation over the C(n, k) subsets of
size k drawn without replacement (an unbiased U-statistic), computed in closed form with
numerically stable weights (Chen et al. 2021; Walder & Karkhanis 2025), never by sampling
permutations. Bad input raises ValueError naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "pass_at_k",
    "best_at_k",
    "best_at_k_weights",
    "best_at_k_curve",
    "coverage_at_k",
    "diversity",
    "pareto_mask",
    "expected_max",
    "evaluation_weights",
    "preference_best_at_k",
    "preference_best_at_k_curve",
    "mean_ci",
    "paired_difference",
]


# ----- input checks ---------------------------------------------------------------------

def _as_int(value: Any, name: str) -> int:
    """``value`` as a Python int; ValueError naming ``name`` if it is not an integer."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        if isinstance(value, float | np.floating) and float(value).is_integer():
            return int(value)
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _check_k(k: Any, n: int, name: str = "k") -> int:
    k = _as_int(k, name)
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"{name}={k} exceeds the pool size n={n}")
    return k


def _values_1d(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n,), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def _vectors_2d(vectors: Any, name: str = "vectors") -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, D), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def _weights_2d(weights: Any, dim: int, name: str = "weights") -> np.ndarray:
    arr = np.asarray(weights, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be 2-D (K, D) with K >= 1, got shape {np.shape(weights)}")
    if arr.shape[1] != dim:
        raise ValueError(f"{name} have D={arr.shape[1]} but the vectors have D={dim}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


# ----- pass@k ---------------------------------------------------------------------------

def _pass_at_k_scalar(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    # 1 - C(n-c, k)/C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i): no large binomials.
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - k / i))


def _shown(values: np.ndarray) -> str:
    """Values as a reader writes them in a message: ``3`` or ``[1, 5]``, not ``array(3)``."""
    return repr(values.tolist())


def pass_at_k(n: Any, c: Any, k: int) -> float | np.ndarray:
    """Unbiased pass@k (Chen et al. 2021): P(at least one of k draws without replacement from
    n samples, c of them correct, is correct) = 1 - C(n-c, k) / C(n, k).

    ``n`` and ``c`` are integers or integer arrays of one shape (broadcast together), ``k`` an
    integer with 1 <= k <= min(n). Returns a float for scalar input, else an array of the
    broadcast shape. Stable product form 1 - prod_{i=n-c+1..n} (1 - k/i); exactly 1.0 when
    n - c < k. Raises ValueError for k < 1, k > n, c < 0 or c > n.
    """
    k = _as_int(k, "k")
    n_arr = np.asarray(n)
    c_arr = np.asarray(c)
    for name, arr in (("n", n_arr), ("c", c_arr)):
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                     or (np.issubdtype(arr.dtype, np.floating)
                                         and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)))):
            raise ValueError(f"{name} must hold integers, got {arr!r}")
    try:
        n_b, c_b = np.broadcast_arrays(n_arr.astype(np.int64), c_arr.astype(np.int64))
    except ValueError as exc:
        raise ValueError(f"n and c must broadcast together, got shapes {n_arr.shape} and {c_arr.shape}") from exc
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.any(c_b < 0):
        raise ValueError(f"c must be >= 0, got c={_shown(c_arr)}")
    if np.any(c_b > n_b):
        raise ValueError(f"c must be <= n, got c={_shown(c_arr)}, n={_shown(n_arr)}")
    if np.any(n_b < k):
        raise ValueError(f"k={k} exceeds the number of samples n={_shown(n_arr)}")
    out = np.array([_pass_at_k_scalar(int(nn), int(cc), k) for nn, cc in zip(n_b.ravel(), c_b.ravel())],
                   dtype=np.float64).reshape(n_b.shape)
    return float(out) if out.ndim == 0 else out


# ----- best@k (expected max of k) -------------------------------------------------------

def best_at_k_weights(n: int, k: int) -> np.ndarray:
    """Weights (n,) of the order statistics in best@k: entry i-1 is C(i-1, k-1) / C(n, k),
    the probability that the i-th smallest of n values is the max of a uniform k-subset.

    Computed by the recurrence w_n = k/n, w_{i-1} = w_i (i-k)/(i-1), which never forms a
    binomial coefficient, so it neither overflows nor underflows to an all-zero vector (at
    n = 2000, k = 1000, 1/C(n, k) alone underflows). Entries below index k-1 are 0; the
    weights sum to 1. Raises ValueError unless 1 <= k <= n.
    """
    n = _as_int(n, "n")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    k = _check_k(k, n)
    w = np.zeros(n, dtype=np.float64)
    # factors[j] multiplies w_{i} into w_{i-1} for i = n, n-1, ..., k+1
    i = np.arange(n, k, -1, dtype=np.float64)
    w[k - 1:][::-1] = (k / n) * np.concatenate(([1.0], np.cumprod((i - k) / (i - 1))))
    return w


def best_at_k(values: Sequence[float] | np.ndarray, k: int) -> float:
    """Unbiased best@k: expected max of k of the n ``values`` drawn without replacement.

    ``values``: (n,) scalars (e.g. a task's fixed scalar per answer). With r_(1) <= ... <= r_(n)
    sorted ascending (ties in any order), best@k = sum_{i=k..n} C(i-1, k-1)/C(n, k) r_(i)
    (Walder & Karkhanis 2025). best@1 is the mean, best@n the max; for 0/1 values it equals
    pass@k. Stable for n in the tens of thousands (see ``best_at_k_weights``).
    Raises ValueError for k < 1, k > n, or non-finite values.
    """
    arr = _values_1d(values, "values")
    k = _check_k(k, arr.size)
    return float(best_at_k_weights(arr.size, k) @ np.sort(arr))


def _check_ks(ks: Iterable[int] | None, n: int, pool: str) -> np.ndarray:
    if n < 1:
        raise ValueError(f"{pool} is empty (n = 0): best@k needs at least one value")
    if ks is None:
        return np.arange(1, n + 1, dtype=np.int64)
    if isinstance(ks, int | np.integer):
        ks = [ks]
    ks_list = [_check_k(k, n, "ks") for k in ks]
    if not ks_list:
        raise ValueError("ks must not be empty")
    return np.asarray(ks_list, dtype=np.int64)


def _curve_of_sorted(sorted_cols: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """best@k for every k in ``ks`` (L,) of each column of ``sorted_cols`` (n, E), sorted
    ascending along axis 0: returns (L, E). Runs the weight recurrence for all k at once,
    O(n * L * E) time and O((L + n) * E) memory."""
    n = sorted_cols.shape[0]
    kf = ks.astype(np.float64)
    w = kf / n                                   # w_n(k) for every k
    acc = np.outer(w, sorted_cols[n - 1])        # (L, E)
    for i in range(n, 1, -1):                    # w_{i-1} = w_i (i - k)/(i - 1), 0 once i <= k
        w = w * np.maximum(i - kf, 0.0) / (i - 1)
        if not np.any(w):
            break
        acc += np.outer(w, sorted_cols[i - 2])
    return acc


def best_at_k_curve(values: Sequence[float] | np.ndarray, ks: Iterable[int] | None = None) -> np.ndarray:
    """best@k for several k at once: (L,) for ``ks`` (default every k = 1..n, so (n,)).

    ``values``: (n,). One sort and one pass of the weight recurrence for all k together:
    O(n * L) time and O(n + L) memory (n = 30, all k: 900 multiply-adds; n = 10,000, all k:
    1e8, about a second). Raises ValueError if any k is outside 1..n.
    """
    arr = _values_1d(values, "values")
    ks_arr = _check_ks(ks, arr.size, "values")
    return _curve_of_sorted(np.sort(arr)[:, None], ks_arr)[:, 0]


# ----- coverage -------------------------------------------------------------------------

def coverage_at_k(test_matrix: Any, k: int) -> float:
    """Expected fraction of tests passed by at least one of k of the n samples.

    ``test_matrix``: (n, T) booleans or 0/1 (n samples x T tests). With c_j the number of
    samples passing test j, coverage@k = (1/T) sum_j pass@k(n, c_j, k) (linearity of
    expectation). Raises ValueError for non-0/1 entries, T = 0, k < 1 or k > n.
    """
    arr = np.asarray(test_matrix)
    if arr.ndim != 2:
        raise ValueError(f"test_matrix must be 2-D (n, T), got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError("test_matrix has no tests (T = 0)")
    if arr.dtype != bool:
        num = np.asarray(arr, dtype=np.float64)
        if not np.all((num == 0) | (num == 1)):
            raise ValueError("test_matrix must hold booleans or 0/1 values")
        arr = num.astype(bool)
    n = arr.shape[0]
    k = _check_k(k, n)
    return float(np.mean(pass_at_k(n, arr.sum(axis=0), k)))


# ----- pool statistics ------------------------------------------------------------------

def diversity(vectors: Any) -> float:
    """Mean pairwise L1 distance between the pool's reward vectors (docs/algorithm.md §5).

    ``vectors``: (n, D). Averages sum_d |r_i,d - r_j,d| over the n(n-1)/2 unordered pairs
    i < j (self-pairs excluded). Returns 0.0 when n < 2. Per objective, the pair sum is
    sum_j (2j - n + 1) x_(j) over the sorted column (0-based j): O(n log n D) time.
    """
    arr = _vectors_2d(vectors)
    n = arr.shape[0]
    if n < 2:
        return 0.0
    # sum over pairs of |x_i - x_j| per column, via sorting: sum_j (2j - n + 1) x_(j)
    srt = np.sort(arr, axis=0)
    coeff = 2.0 * np.arange(n, dtype=np.float64) - (n - 1)
    total = float(np.sum(coeff @ srt))
    return total / (n * (n - 1) / 2)


def pareto_mask(vectors: Any) -> np.ndarray:
    """(n,) bool: True for the non-dominated rows of ``vectors`` (n, D), higher is better.

    Row i is dominated when some row j is >= on every objective and > on at least one.
    Exact duplicates do not dominate each other, so every copy of a non-dominated row is
    kept (count distinct rows yourself if you want the Pareto set without repeats).
    O(n^2 D) time, processed in blocks to bound memory.
    """
    arr = _vectors_2d(vectors)
    n = arr.shape[0]
    mask = np.ones(n, dtype=bool)
    block = max(1, 4_000_000 // max(1, n * max(1, arr.shape[1])))
    for start in range(0, n, block):
        rows = arr[start:start + block]                       # (b, D)
        ge = np.all(arr[None, :, :] >= rows[:, None, :], axis=2)   # (b, n): j >= i everywhere
        gt = np.any(arr[None, :, :] > rows[:, None, :], axis=2)    # (b, n): j > i somewhere
        mask[start:start + block] = ~np.any(ge & gt, axis=1)
    return mask


def expected_max(vectors: Any, weights: Any) -> float:
    """E_w[max_i w . r_i] estimated over the given weights: (1/K) sum_k max_i w_k . r_i.

    ``vectors``: (n, D) reward vectors of the pool; ``weights``: (K, D) (a single (D,) vector
    is K = 1). This is the VPO set objective R(S) of docs/algorithm.md §1 for the whole pool. An
    empty pool (n = 0) scores 0.0, the floor of rewards in [0, 1], as an empty chain does.
    """
    arr = _vectors_2d(vectors)
    w = _weights_2d(weights, arr.shape[1])
    if arr.shape[0] == 0:
        return 0.0
    return float(np.mean(np.max(arr @ w.T, axis=0)))


def evaluation_weights(num: int, dim: int, *, seed: int = 0, alpha: float = 1.0) -> np.ndarray:
    """Fixed evaluation weights (num, dim) drawn iid from Dirichlet(alpha 1_dim) with
    ``numpy.random.default_rng(seed)``, for ``preference_best_at_k``. Raises ValueError for
    num < 1, dim < 1 or alpha <= 0."""
    num, dim = _as_int(num, "num"), _as_int(dim, "dim")
    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if not (isinstance(alpha, int | float | np.floating | np.integer) and alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    return np.random.default_rng(seed).dirichlet(np.full(dim, float(alpha)), size=num)


def preference_best_at_k_curve(vectors: Any, weights: Any, ks: Iterable[int] | None = None) -> np.ndarray:
    """Preference-weighted best@k for several k: (L,) (default every k = 1..n).

    ``vectors``: (n, D); ``weights``: (E, D) fixed evaluation weights (or one (D,) vector).
    Entry l is (1/E) sum_e best@ks[l] of the n scalars vectors @ w_e (docs/algorithm.md §5).
    O(n E D + n L E) time. Raises ValueError if any k is outside 1..n.
    """
    arr = _vectors_2d(vectors)
    w = _weights_2d(weights, arr.shape[1])
    ks_arr = _check_ks(ks, arr.shape[0], "vectors")
    scores = np.sort(arr @ w.T, axis=0)                         # (n, E), each column ascending
    return _curve_of_sorted(scores, ks_arr).mean(axis=1)


def preference_best_at_k(vectors: Any, weights: Any, k: int) -> float:
    """Preference-weighted best@k: mean over the E evaluation weights of best@k of the pool's
    scalars w . r (docs/algorithm.md §5). ``vectors``: (n, D); ``weights``: (E, D) or (D,).
    With one weight vector this is best_at_k(vectors @ w, k). Raises ValueError unless 1 <= k <= n."""
    arr = _vectors_2d(vectors)
    w = _weights_2d(weights, arr.shape[1])
    if arr.shape[0] == 0:
        raise ValueError("vectors is empty (n = 0): best@k needs at least one answer")
    k = _check_k(k, arr.shape[0])
    scores = np.sort(arr @ w.T, axis=0)                         # (n, E)
    return float(np.mean(best_at_k_weights(arr.shape[0], k) @ scores))


# ----- summaries for reports ------------------------------------------------------------

def _t_half_width(values: np.ndarray, confidence: float) -> float:
    from scipy import stats

    n = values.size
    if n < 2:
        return float("nan")
    sem = float(np.std(values, ddof=1)) / math.sqrt(n)
    return float(stats.t.ppf(0.5 + confidence / 2.0, df=n - 1)) * sem


def _check_confidence(confidence: Any) -> float:
    if not isinstance(confidence, int | float | np.floating) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


def mean_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t confidence interval of the mean of ``values`` (n,).

    Half-width t_{(1+confidence)/2, n-1} * s / sqrt(n) with the sample std s (ddof 1); it
    assumes roughly independent items (e.g. one score per test example). With n = 1 the
    bounds are NaN. Raises ValueError for an empty or non-finite input, or confidence
    outside (0, 1).
    """
    confidence = _check_confidence(confidence)
    arr = _values_1d(values, "values")
    if arr.size == 0:
        raise ValueError("values is empty")
    mean = float(arr.mean())
    half = _t_half_width(arr, confidence)
    return mean, mean - half, mean + half


def paired_difference(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                      confidence: float = 0.95) -> tuple[float, float]:
    """(mean of a - b, half-width of its Student-t interval) over paired items.

    ``a``, ``b``: (n,) scores of two methods on the same n items (same order). Pairing
    removes the between-item variance, so this is far tighter than comparing two
    ``mean_ci`` intervals. The difference is significant at ``confidence`` when
    |mean| > half-width. Half-width is NaN for n = 1. Raises ValueError on length mismatch.
    """
    confidence = _check_confidence(confidence)
    a_arr, b_arr = _values_1d(a, "a"), _values_1d(b, "b")
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"a and b must have the same length, got {a_arr.size} and {b_arr.size}")
    if a_arr.size == 0:
        raise ValueError("a and b are empty")
    diff = a_arr - b_arr
    return float(diff.mean()), _t_half_width(diff, confidence)


# ----- search metrics by difficulty level -----------------------------------------------

__all__ += ["search_curves_by_level", "search_gap_by_level"]  # appended: this section is added at the end


def _level_groups(levels: Sequence[Any], count: int, name: str = "levels") -> dict[str, list[int]]:
    """Example indices per level label (str; None -> "unknown"), levels in natural order
    (numbers numerically, then the rest alphabetically), then "all"."""
    levels = list(levels)
    if len(levels) != count:
        raise ValueError(f"{name} has {len(levels)} entries but there are {count} examples")
    groups: dict[str, list[int]] = {}
    for i, level in enumerate(levels):
        groups.setdefault("unknown" if level is None else str(level), []).append(i)

    def order(label: str) -> tuple[int, float, str]:
        try:
            return (0, float(label), label)
        except ValueError:
            return (1, 0.0, label)

    out = {label: groups[label] for label in sorted(groups, key=order)}
    out["all"] = list(range(count))
    return out


def _level_ks(ks: Iterable[int] | None, sizes: Sequence[int]) -> np.ndarray:
    """The ks of one level: every k = 1..min pool size by default, else ``ks`` (each <= min)."""
    n_min = min(sizes)
    return _check_ks(ks, n_min, f"the smallest pool (n = {n_min})")


def _ci_rows(per_example: np.ndarray, confidence: float) -> dict[str, list[float]]:
    """{"mean", "low", "high"} over axis 0 of (E, L) per-example values (Student-t)."""
    cols = [mean_ci(per_example[:, j], confidence) for j in range(per_example.shape[1])]
    return {"mean": [c[0] for c in cols], "low": [c[1] for c in cols], "high": [c[2] for c in cols]}


def search_curves_by_level(scalars: Sequence[Any], solved: Sequence[Any], levels: Sequence[Any],
                           tests: Sequence[Any] | None = None, ks: Iterable[int] | None = None,
                           confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """best@k, pass@k and coverage@k curves of one method's answer pools, per difficulty level.

    ``scalars``: one (n_e,) array of fixed scalars per example e (pools may differ in size);
    ``solved``: one (n_e,) bool / 0-1 array per example (pass@k counts these); ``levels``: one
    label per example (``task.difficulty(example)``; None is grouped as "unknown");
    ``tests``: optional, one (n_e, T_e) 0/1 test matrix per example, or None for examples
    without one (coverage@k is averaged over the examples that have one). ``ks``: the k values
    (default 1..the smallest pool of the level; each must fit every pool of the level).

    Returns ``{level: {"num_examples", "ks", "best_at_k", "pass_at_k", "coverage_at_k"}}``,
    levels in natural order and a last entry "all"; each curve is ``{"mean", "low", "high"}``
    (lists over ks; Student-t interval over the level's examples, NaN bounds for one example);
    ``coverage_at_k`` is None when no example of the level has a test matrix, and carries
    ``"num_examples"``. Per example the estimators are the unbiased ones of this module
    (``best_at_k_curve``, ``pass_at_k``, ``coverage_at_k``). Raises ValueError on ragged input.
    """
    confidence = _check_confidence(confidence)
    count = len(scalars)
    if count == 0:
        raise ValueError("scalars is empty: no examples")
    if len(solved) != count:
        raise ValueError(f"solved has {len(solved)} pools but scalars has {count}")
    if tests is not None and len(tests) != count:
        raise ValueError(f"tests has {len(tests)} entries but scalars has {count}")
    values = [_values_1d(s, f"scalars[{i}]") for i, s in enumerate(scalars)]
    flags = []
    for i, s in enumerate(solved):
        arr = np.asarray(s)
        if arr.shape != values[i].shape:
            raise ValueError(f"solved[{i}] has shape {arr.shape} but scalars[{i}] has {values[i].shape}")
        num = arr.astype(np.float64)
        if not np.all((num == 0) | (num == 1)):
            raise ValueError(f"solved[{i}] must hold booleans or 0/1 values")
        flags.append(num.astype(bool))
    ks_arg = None if ks is None else list([ks] if isinstance(ks, int | np.integer) else ks)
    out: dict[str, dict[str, Any]] = {}
    for label, idx in _level_groups(levels, count).items():
        ks_arr = _level_ks(ks_arg, [values[i].size for i in idx])
        best = np.stack([best_at_k_curve(values[i], ks_arr) for i in idx])
        passed = np.stack([[_pass_at_k_scalar(flags[i].size, int(flags[i].sum()), int(k)) for k in ks_arr]
                           for i in idx])
        with_tests = [i for i in idx if tests is not None and tests[i] is not None]
        coverage = None
        if with_tests:
            cov = np.stack([[coverage_at_k(tests[i], int(k)) for k in ks_arr] for i in with_tests])
            coverage = {**_ci_rows(cov, confidence), "num_examples": len(with_tests)}
        out[label] = {"num_examples": len(idx), "ks": [int(k) for k in ks_arr],
                      "best_at_k": _ci_rows(best, confidence), "pass_at_k": _ci_rows(passed, confidence),
                      "coverage_at_k": coverage}
    return out


def search_gap_by_level(a_pools: Sequence[Any], b_pools: Sequence[Any], levels: Sequence[Any],
                        ks: Iterable[int] | None = None, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """Paired gap best@k(a) - best@k(b) against k, per difficulty level (e.g. VPO - GRPO).

    ``a_pools``, ``b_pools``: one (n_e,) array of fixed scalars per example, the SAME examples
    in the same order for both methods (pool sizes may differ between methods and examples);
    pass 0/1 solved flags instead of scalars to get the pass@k gap (best@k of 0/1 values is
    pass@k). ``levels``: one label per example. ``ks``: default 1..the smallest pool of the
    level over both methods.

    Returns ``{level: {"num_examples", "ks", "mean", "half_width", "low", "high"}}`` (lists over
    ks; levels in natural order, then "all"): per k the mean over the level's examples of the
    per-example difference, with its paired Student-t half-width (``paired_difference``; NaN
    for one example). The gap is significant at ``confidence`` where low > 0 or high < 0.
    """
    confidence = _check_confidence(confidence)
    count = len(a_pools)
    if count == 0:
        raise ValueError("a_pools is empty: no examples")
    if len(b_pools) != count:
        raise ValueError(f"a_pools has {count} examples but b_pools has {len(b_pools)}; the gap is paired "
                         "over the same examples")
    a_vals = [_values_1d(p, f"a_pools[{i}]") for i, p in enumerate(a_pools)]
    b_vals = [_values_1d(p, f"b_pools[{i}]") for i, p in enumerate(b_pools)]
    ks_arg = None if ks is None else list([ks] if isinstance(ks, int | np.integer) else ks)
    out: dict[str, dict[str, Any]] = {}
    for label, idx in _level_groups(levels, count).items():
        ks_arr = _level_ks(ks_arg, [a_vals[i].size for i in idx] + [b_vals[i].size for i in idx])
        a_curves = np.stack([best_at_k_curve(a_vals[i], ks_arr) for i in idx])
        b_curves = np.stack([best_at_k_curve(b_vals[i], ks_arr) for i in idx])
        pairs = [paired_difference(a_curves[:, j], b_curves[:, j], confidence) for j in range(ks_arr.size)]
        mean = [p[0] for p in pairs]
        half = [p[1] for p in pairs]
        out[label] = {"num_examples": len(idx), "ks": [int(k) for k in ks_arr], "mean": mean,
                      "half_width": half, "low": [m - h for m, h in zip(mean, half, strict=True)],
                      "high": [m + h for m, h in zip(mean, half, strict=True)]}
    return out

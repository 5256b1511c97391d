"""vpo.metrics: exact hand cases, brute force over k-subsets, stability and properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from vpo import metrics as M


# ----- brute-force references -----------------------------------------------------------

def brute_best(values, k):
    subsets = list(itertools.combinations(values, k))
    return sum(max(s) for s in subsets) / len(subsets)


def brute_pass(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


def brute_coverage(matrix, k):
    matrix = np.asarray(matrix, dtype=bool)
    subsets = list(itertools.combinations(range(matrix.shape[0]), k))
    return sum(matrix[list(s)].any(axis=0).mean() for s in subsets) / len(subsets)


def brute_pareto(vectors):
    v = np.asarray(vectors, dtype=float)
    return np.array([not any(np.all(v[j] >= v[i]) and np.any(v[j] > v[i]) for j in range(len(v)))
                     for i in range(len(v))])


finite = st.floats(0.0, 1.0, allow_nan=False, width=32)


# ----- pass@k ---------------------------------------------------------------------------

def test_pass_at_k_hand_cases():
    assert M.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10, abs=1e-15)      # 1 - C(3,2)/C(5,2)
    assert M.pass_at_k(10, 3, 1) == pytest.approx(0.3, abs=1e-15)
    assert M.pass_at_k(10, 0, 4) == 0.0
    assert M.pass_at_k(10, 7, 4) == 1.0            # n - c = 3 < k: every 4-subset has a pass
    assert M.pass_at_k(4, 4, 4) == 1.0


def test_pass_at_k_brute_force():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert M.pass_at_k(n, c, k) == pytest.approx(brute_pass(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_vectorised_and_large():
    out = M.pass_at_k(np.array([5, 10, 10]), np.array([2, 0, 7]), 2)
    assert isinstance(out, np.ndarray) and out.shape == (3,)
    np.testing.assert_allclose(out, [0.7, 0.0, 1.0 - (3 * 2) / (10 * 9)], atol=1e-14)
    # broadcasting a scalar n against an array of c
    np.testing.assert_allclose(M.pass_at_k(6, [0, 1, 6], 3), [0.0, 0.5, 1.0], atol=1e-14)
    big = M.pass_at_k(10_000, 3, 5000)             # binomials of ~1e3000 never formed
    assert big == pytest.approx(1 - 0.5 * (4999 / 9999) * (4998 / 9998), rel=1e-12)


@pytest.mark.parametrize("args, name", [((3, 1, 4), "k"), ((3, 1, 0), "k"), ((3, 4, 1), "c"),
                                        ((3, -1, 1), "c"), ((3.5, 1, 1), "n"), ((3, 1, 1.5), "k")])
def test_pass_at_k_errors(args, name):
    with pytest.raises(ValueError, match=name):
        M.pass_at_k(*args)


def test_pass_at_k_errors_show_plain_numbers():
    with pytest.raises(ValueError, match=r"^k=5 exceeds the number of samples n=3$"):
        M.pass_at_k(3, 1, 5)
    with pytest.raises(ValueError, match=r"c=\[1, 5\], n=\[3, 4\]$"):
        M.pass_at_k([3, 4], [1, 5], 2)


# ----- best@k ---------------------------------------------------------------------------

def test_best_at_k_hand_cases():
    assert M.best_at_k([1, 2, 3, 4], 2) == pytest.approx(20 / 6, abs=1e-15)   # maxes 2,3,4,3,4,4
    assert M.best_at_k([4, 1, 3, 2], 1) == pytest.approx(2.5, abs=1e-15)
    assert M.best_at_k([4, 1, 3, 2], 4) == 4.0
    assert M.best_at_k([0.5, 0.5, 0.5], 2) == pytest.approx(0.5, abs=1e-15)
    np.testing.assert_allclose(M.best_at_k_weights(4, 2), [0, 1 / 6, 2 / 6, 3 / 6], atol=1e-15)


def test_best_at_k_brute_force_with_ties():
    rng = np.random.default_rng(0)
    for n in range(1, 8):
        for trial in range(3):
            values = rng.integers(0, 4, size=n) / 3.0 if trial else rng.random(n)
            for k in range(1, n + 1):
                assert M.best_at_k(values, k) == pytest.approx(brute_best(list(values), k), abs=1e-12)


def test_best_at_k_equals_pass_at_k_on_binary_values():
    for n in range(1, 9):
        for c in range(n + 1):
            values = [1.0] * c + [0.0] * (n - c)
            for k in range(1, n + 1):
                assert M.best_at_k(values, k) == pytest.approx(M.pass_at_k(n, c, k), abs=1e-12)


def test_best_at_k_stable_at_large_n():
    rng = np.random.default_rng(1)
    values = rng.random(10_000)
    mid = M.best_at_k(values, 5000)
    assert math.isfinite(mid) and values.min() <= mid <= values.max()
    assert mid > np.quantile(values, 0.99)          # the max of 5000 of 10000 uniforms is ~1
    assert M.best_at_k(values, 1) == pytest.approx(values.mean(), rel=1e-12)
    assert M.best_at_k(values, 10_000) == pytest.approx(values.max(), rel=1e-12)
    w = M.best_at_k_weights(2000, 1000)             # 1/C(2000, 1000) alone underflows to 0
    assert w.sum() == pytest.approx(1.0, abs=1e-12) and w[-1] == pytest.approx(0.5)
    # integer values with many ties at n = 10000: best@k = P(max of k >= 1) for 0/1 values
    binary = np.zeros(10_000)
    binary[:3] = 1.0
    assert M.best_at_k(binary, 5000) == pytest.approx(M.pass_at_k(10_000, 3, 5000), rel=1e-10)


def test_best_at_k_weights_sum_to_one():
    for n in (1, 2, 7, 30, 500):
        for k in {1, min(2, n), n // 2 or 1, n}:
            w = M.best_at_k_weights(n, k)
            assert w.shape == (n,) and np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
            assert np.all(w[: k - 1] == 0)


@pytest.mark.parametrize("values, k, name", [([1, 2], 3, "k"), ([1, 2], 0, "k"), ([], 1, "k"),
                                             ([1, np.nan], 1, "values"), ([[1, 2]], 1, "values")])
def test_best_at_k_errors(values, k, name):
    with pytest.raises(ValueError, match=name):
        M.best_at_k(values, k)


def test_best_at_k_curve_matches_pointwise():
    rng = np.random.default_rng(2)
    values = rng.random(30)
    curve = M.best_at_k_curve(values)
    assert curve.shape == (30,)
    np.testing.assert_allclose(curve, [M.best_at_k(values, k) for k in range(1, 31)], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(M.best_at_k_curve(values, [3, 1, 30]), curve[[2, 0, 29]], rtol=1e-12)
    np.testing.assert_allclose(M.best_at_k_curve(values, 5), curve[[4]], rtol=1e-12)
    big = rng.random(10_000)
    np.testing.assert_allclose(M.best_at_k_curve(big, [1, 5000, 10_000]),
                               [big.mean(), M.best_at_k(big, 5000), big.max()], rtol=1e-10)
    with pytest.raises(ValueError, match="ks"):
        M.best_at_k_curve(values, [0, 3])
    with pytest.raises(ValueError, match="ks"):
        M.best_at_k_curve(values, [31])
    with pytest.raises(ValueError, match="ks"):
        M.best_at_k_curve(values, [])
    with pytest.raises(ValueError, match="values is empty"):
        M.best_at_k_curve([])
    with pytest.raises(ValueError, match="vectors is empty"):
        M.preference_best_at_k_curve(np.zeros((0, 2)), [0.5, 0.5])


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_best_at_k_properties(values, rnd):
    curve = M.best_at_k_curve(values)
    assert np.all(np.diff(curve) >= -1e-12)                       # non-decreasing in k
    assert min(values) - 1e-12 <= curve[0] and curve[-1] <= max(values) + 1e-12
    assert curve[0] == pytest.approx(np.mean(values), abs=1e-9)
    shuffled = list(values)
    rnd.shuffle(shuffled)
    np.testing.assert_allclose(M.best_at_k_curve(shuffled), curve, atol=1e-12)   # order-free
    k = len(values) // 2 + 1
    if len(values) <= 8:
        assert curve[k - 1] == pytest.approx(brute_best(values, k), abs=1e-9)


# ----- coverage@k -----------------------------------------------------------------------

def test_coverage_hand_case():
    matrix = [[1, 0, 0], [0, 1, 0], [1, 0, 0]]     # tests passed by 2, 1, 0 of the 3 samples
    # k = 1: (2/3 + 1/3 + 0)/3; k = 2: (1 + 2/3 + 0)/3; k = 3: (1 + 1 + 0)/3
    assert M.coverage_at_k(matrix, 1) == pytest.approx(1 / 3, abs=1e-15)
    assert M.coverage_at_k(matrix, 2) == pytest.approx(5 / 9, abs=1e-15)
    assert M.coverage_at_k(np.array(matrix, dtype=bool), 3) == pytest.approx(2 / 3, abs=1e-15)


def test_coverage_brute_force():
    rng = np.random.default_rng(3)
    for n in range(1, 7):
        for t in (1, 3, 5):
            matrix = rng.random((n, t)) < 0.4
            for k in range(1, n + 1):
                assert M.coverage_at_k(matrix, k) == pytest.approx(brute_coverage(matrix, k), abs=1e-12)


@pytest.mark.parametrize("matrix, k, name", [([[1, 0]], 2, "k"), ([[0.5, 1]], 1, "test_matrix"),
                                             ([1, 0], 1, "test_matrix"), (np.zeros((3, 0)), 1, "test_matrix")])
def test_coverage_errors(matrix, k, name):
    with pytest.raises(ValueError, match=name):
        M.coverage_at_k(matrix, k)


# ----- diversity, Pareto, E_w[max] ------------------------------------------------------

def test_diversity_hand_cases():
    assert M.diversity([[0, 0], [1, 1], [0, 1]]) == pytest.approx((2 + 1 + 1) / 3, abs=1e-15)
    assert M.diversity([[0.3, 0.7]]) == 0.0
    assert M.diversity(np.zeros((0, 4))) == 0.0
    assert M.diversity([[1, 0, 0, 1]] * 5) == 0.0                  # a collapsed pool
    # a gold route and a diamond route (maze, D = 4): L1 distance 2
    assert M.diversity([[1, 1, 0, 1], [1, 0, 1, 1]]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="vectors"):
        M.diversity([0.1, 0.2])


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(0, 9), st.integers(1, 4)), elements=finite))
def test_diversity_matches_pairwise_definition(vectors):
    pairs = list(itertools.combinations(range(len(vectors)), 2))
    expected = np.mean([np.abs(vectors[i] - vectors[j]).sum() for i, j in pairs]) if pairs else 0.0
    assert M.diversity(vectors) == pytest.approx(expected, abs=1e-9)


def test_pareto_hand_cases():
    vectors = [[1, 0], [0, 1], [0, 0], [1, 0], [0.5, 0.5], [0.4, 0.5]]
    np.testing.assert_array_equal(M.pareto_mask(vectors), [True, True, False, True, True, False])
    np.testing.assert_array_equal(M.pareto_mask([[0.2, 0.2]]), [True])
    assert M.pareto_mask(np.zeros((0, 3))).shape == (0,)
    np.testing.assert_array_equal(M.pareto_mask([[1, 1], [1, 0.5], [1, 1]]), [True, False, True])


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 3)),
                  elements=st.sampled_from([0.0, 0.5, 1.0])))
def test_pareto_matches_definition(vectors):
    mask = M.pareto_mask(vectors)
    np.testing.assert_array_equal(mask, brute_pareto(vectors))
    assert mask.any()                                              # a finite pool has a front


def test_expected_max_hand_cases():
    pool = [[1, 0], [0, 1], [0.4, 0.4]]
    weights = [[1, 0], [0, 1], [0.5, 0.5]]
    # maxima per weight: 1, 1, max(0.5, 0.5, 0.4) = 0.5
    assert M.expected_max(pool, weights) == pytest.approx(2.5 / 3, abs=1e-15)
    assert M.expected_max(pool, [0.5, 0.5]) == pytest.approx(0.5)  # one (D,) weight is K = 1
    assert M.expected_max(np.zeros((0, 2)), weights) == 0.0
    # m = 1 and uniform weights: E_w[w . r] is the mean of r when the weights average to uniform
    assert M.expected_max([[0.2, 0.6]], [[1, 0], [0, 1]]) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="weights"):
        M.expected_max(pool, [[1, 0, 0]])
    with pytest.raises(ValueError, match="vectors"):
        M.expected_max([0.1, 0.2], weights)


def test_evaluation_weights():
    w = M.evaluation_weights(64, 4, seed=7)
    assert w.shape == (64, 4) and np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    np.testing.assert_array_equal(w, M.evaluation_weights(64, 4, seed=7))
    assert not np.array_equal(w, M.evaluation_weights(64, 4, seed=8))
    for bad, name in (((0, 4), "num"), ((3, 0), "dim")):
        with pytest.raises(ValueError, match=name):
            M.evaluation_weights(*bad)
    with pytest.raises(ValueError, match="alpha"):
        M.evaluation_weights(3, 2, alpha=0.0)


def test_preference_best_at_k_brute_force():
    rng = np.random.default_rng(4)
    vectors = rng.random((6, 3))
    weights = M.evaluation_weights(5, 3, seed=0)
    for k in range(1, 7):
        expected = np.mean([brute_best(list(vectors @ w), k) for w in weights])
        assert M.preference_best_at_k(vectors, weights, k) == pytest.approx(expected, abs=1e-12)
    curve = M.preference_best_at_k_curve(vectors, weights)
    np.testing.assert_allclose(curve, [M.preference_best_at_k(vectors, weights, k) for k in range(1, 7)],
                               atol=1e-12)
    # at k = n it is E_w[max] over the pool
    assert curve[-1] == pytest.approx(M.expected_max(vectors, weights), abs=1e-12)
    np.testing.assert_allclose(M.preference_best_at_k_curve(vectors, weights, [2, 4]), curve[[1, 3]])


def test_preference_best_at_k_separates_tied_scalars():
    # docs/algorithm.md §5: a gold route and a diamond route tie on the mean (0.75) ...
    gold, diamond = [1, 1, 0, 1], [1, 0, 1, 1]
    collapsed, diverse = np.array([gold] * 4), np.array([gold, diamond] * 2)
    assert M.best_at_k(collapsed.mean(axis=1), 2) == M.best_at_k(diverse.mean(axis=1), 2) == 0.75
    # ... but a selector with an unknown preference gains from the diverse pool
    weights = M.evaluation_weights(64, 4, seed=0)
    assert M.preference_best_at_k(diverse, weights, 2) > M.preference_best_at_k(collapsed, weights, 2) + 0.05
    assert M.preference_best_at_k(diverse, weights, 1) == pytest.approx(M.preference_best_at_k(collapsed, weights, 1)
                                                                        + (weights[:, 2] - weights[:, 1]).mean() / 2)


def test_preference_best_at_k_errors():
    with pytest.raises(ValueError, match="k"):
        M.preference_best_at_k(np.ones((3, 2)), np.ones((2, 2)) / 2, 4)
    with pytest.raises(ValueError, match="weights"):
        M.preference_best_at_k(np.ones((3, 2)), np.ones((2, 3)) / 3, 1)
    with pytest.raises(ValueError, match="vectors"):
        M.preference_best_at_k(np.ones((0, 2)), np.ones((2, 2)) / 2, 1)


# ----- report summaries -----------------------------------------------------------------

def test_mean_ci_hand_case():
    mean, low, high = M.mean_ci([1.0, 2.0, 3.0])
    half = 4.302652729749462 / math.sqrt(3)                       # t_{0.975, 2} * s / sqrt(n), s = 1
    assert mean == 2.0 and low == pytest.approx(2 - half, abs=1e-12) and high == pytest.approx(2 + half, abs=1e-12)
    data = np.random.default_rng(5).random(40)
    lo, hi = stats.t.interval(0.9, df=39, loc=data.mean(), scale=stats.sem(data))
    assert M.mean_ci(data, 0.9)[1:] == pytest.approx((lo, hi), abs=1e-12)
    m1, l1, h1 = M.mean_ci([0.3])
    assert m1 == 0.3 and math.isnan(l1) and math.isnan(h1)
    assert M.mean_ci([0.5] * 4) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="values"):
        M.mean_ci([])
    with pytest.raises(ValueError, match="confidence"):
        M.mean_ci([1, 2], confidence=1.0)


def test_paired_difference():
    diff, half = M.paired_difference([3.0, 4.0, 5.0], [2.0, 2.0, 2.0])   # differences 1, 2, 3
    assert diff == pytest.approx(2.0) and half == pytest.approx(4.302652729749462 / math.sqrt(3), abs=1e-12)
    # pairing removes the shared per-item offset: a constant gap has zero width
    items = np.random.default_rng(6).random(20)
    assert M.paired_difference(items + 0.1, items) == pytest.approx((0.1, 0.0), abs=1e-12)
    assert math.isnan(M.paired_difference([1.0], [0.0])[1])
    with pytest.raises(ValueError, match="same length"):
        M.paired_difference([1, 2], [1])

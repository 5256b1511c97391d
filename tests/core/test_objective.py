"""The set objective E_w[max_i w . r_i] (vpo.objective)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vpo.objective import RewardBatch, exact_set_scores, set_scores
from vpo.weights import sample_simplex

unit = st.floats(0.0, 1.0, allow_nan=False, width=64)


def reward_matrix(m_min=1, m_max=4, d=3):
    return st.integers(m_min, m_max).flatmap(lambda m: hnp.arrays(np.float64, (m, d), elements=unit))


def test_hand_case_shared_weights():
    rewards = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.2, 0.6]]), np.zeros((0, 2))]
    weights = np.array([[1.0, 0.0], [0.5, 0.5]])
    # rollout 0: w1 -> max(1, 0) = 1, w2 -> max(.5, .5) = .5; rollout 1: .2 and .4; empty -> 0
    np.testing.assert_allclose(set_scores(rewards, weights), [0.75, 0.3, 0.0])


def test_per_rollout_weights_and_ragged_shapes_match_a_loop():
    rng = np.random.default_rng(0)
    rewards = [rng.random((m, d)) for m, d in [(1, 2), (3, 4), (2, 2), (0, 3), (4, 4)]]
    weights = [sample_simplex(7, r.shape[1], rng=rng) for r in rewards]
    expected = [(r @ w.T).max(axis=0).mean() if len(r) else 0.0 for r, w in zip(rewards, weights)]
    np.testing.assert_allclose(set_scores(rewards, weights), expected, rtol=1e-12)


def test_dense_input_and_3d_weights():
    rng = np.random.default_rng(1)
    rewards = rng.random((5, 3, 4))
    weights = sample_simplex(9, 4, rng=rng)
    loop = [(r @ weights.T).max(axis=0).mean() for r in rewards]
    np.testing.assert_allclose(set_scores(rewards, weights), loop, rtol=1e-12)
    per = np.stack([weights] * 5)
    np.testing.assert_allclose(set_scores(rewards, per), loop, rtol=1e-12)


def test_negative_rewards_padding_never_wins():
    rewards = [np.array([[-1.0, -2.0]]), np.array([[-3.0, -3.0], [-1.0, -1.0]])]
    np.testing.assert_allclose(set_scores(rewards, np.array([[0.5, 0.5]])), [-1.5, -1.0])


def test_exact_hand_cases():
    rewards = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0]]), np.array([[0.5, 0.5], [1.0, 0.0]]),
               np.array([[0.3], [0.9]]), np.zeros((0, 2))]
    # int_0^1 max(t, 1-t) = 3/4; int t = 1/2; int max(1/2, t) = 1/4 + 3/8; D = 1: max
    np.testing.assert_allclose(exact_set_scores(rewards), [0.75, 0.5, 0.625, 0.9, 0.0], atol=1e-15)
    np.testing.assert_allclose(set_scores(rewards, exact=True), [0.75, 0.5, 0.625, 0.9, 0.0], atol=1e-15)


def test_exact_matches_a_million_samples():
    rng = np.random.default_rng(2)
    rewards = [rng.random((m, 2)) for m in (1, 2, 3, 5)] + [np.array([[0.4, 0.4], [0.4, 0.4], [0.1, 0.7]])]
    t = rng.random(1_000_000)
    weights = np.stack([t, 1 - t], axis=1)
    estimate = [(r @ weights.T).max(axis=0).mean() for r in rewards]
    np.testing.assert_allclose(exact_set_scores(rewards), estimate, atol=1e-3)


def test_exact_rejects_high_dimension_and_weights():
    with pytest.raises(ValueError, match=r"rewards\[1\] has D=3"):
        set_scores([np.ones((1, 2)), np.ones((2, 3))], exact=True)
    with pytest.raises(ValueError, match="weights=None"):
        set_scores([np.ones((1, 2))], np.ones((1, 2)), exact=True)


@given(reward_matrix(), st.integers(0, 10**6))
@settings(max_examples=40, deadline=None)
def test_permuting_answers_changes_nothing(matrix, seed):
    weights = sample_simplex(16, 3, rng=np.random.default_rng(seed))
    perm = np.random.default_rng(seed).permutation(len(matrix))
    a, b = set_scores([matrix, matrix[perm]], weights)
    assert a == pytest.approx(b, abs=1e-15)


@given(reward_matrix(), st.integers(0, 10**6), st.floats(0.0, 1.0))
@settings(max_examples=40, deadline=None)
def test_dominated_answer_or_zero_row_never_changes_the_score(matrix, seed, shrink):
    weights = sample_simplex(16, 3, rng=np.random.default_rng(seed))
    dominated = matrix[seed % len(matrix)] * shrink  # componentwise <= an existing answer
    padded = np.vstack([matrix, np.zeros((1, 3))])
    extended = np.vstack([matrix, dominated])
    base, with_zero, with_dominated = set_scores([matrix, padded, extended], weights)
    assert with_zero == base and with_dominated == base
    e0, e1 = exact_set_scores([matrix[:, :2], np.vstack([matrix[:, :2], np.zeros((1, 2))])])
    assert e0 == pytest.approx(e1, abs=1e-12)


@given(hnp.arrays(np.float64, (1, 4), elements=unit))
@settings(max_examples=20, deadline=None)
def test_single_answer_is_its_mean_within_monte_carlo_error(row):
    weights = sample_simplex(20_000, 4, rng=np.random.default_rng(0))
    # E_w[w . r] = mean(r) for Dirichlet(1); sd of w . r is at most 1 / sqrt(D + 1) * spread
    assert set_scores([row], weights)[0] == pytest.approx(row.mean(), abs=5 * 0.5 / np.sqrt(20_000))


def test_sobol_lowers_score_variance_at_equal_k():
    rng = np.random.default_rng(3)
    rewards = [rng.random((3, 4)) for _ in range(4)]
    def spread(method):
        draws = [set_scores(rewards, sample_simplex(64, 4, method=method, rng=np.random.default_rng(s)))
                 for s in range(200)]
        return np.var(draws, axis=0).mean()
    assert spread("sobol") < 0.7 * spread("iid")


@pytest.mark.parametrize("rewards, match", [
    ([np.array([[np.nan, 1.0]])], r"rewards\[0\]: contains NaN"),
    ([np.ones((1, 2)), np.array([[np.inf, 1.0]])], r"rewards\[1\]: contains NaN"),
    ([np.ones((1, 2)), np.ones(2)], r"rewards\[1\]: expected a 2-D"),
    ([np.ones((1, 2)), "text"], r"rewards\[1\]"),
    (np.ones((3, 2)), "3-D"),
])
def test_bad_rewards(rewards, match):
    with pytest.raises(ValueError, match=match):
        set_scores(rewards, np.ones((1, 2)) / 2)


def test_bad_weights():
    rewards = [np.ones((1, 2))]
    with pytest.raises(ValueError, match="D=3"):
        set_scores(rewards, np.ones((2, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        set_scores(rewards, np.array([[1.5, -0.5]]))
    with pytest.raises(ValueError, match="K >= 1"):
        set_scores(rewards, np.ones((0, 2)))
    with pytest.raises(ValueError, match="2 weight sets for 1"):
        set_scores(rewards, [np.ones((1, 2)), np.ones((1, 3))])


def test_reward_batch_groups_and_width_check():
    rewards = [np.ones((2, 3)), np.zeros((0, 5)), np.ones((1, 2)), np.ones((1, 3))]
    batch = RewardBatch.from_rewards(rewards, ["x", "x", "y", "x"])
    assert batch.group_labels == ["x", "y"] and batch.group_index.tolist() == [0, 0, 1, 0]
    assert batch.group_dims.tolist() == [3, 2]
    with pytest.raises(ValueError, match=r"rewards\[3\]: width 3 differs from D=2 of its group 'y'"):
        RewardBatch.from_rewards(rewards, ["x", "x", "y", "y"])
    with pytest.raises(ValueError, match="group_ids has length 3"):
        RewardBatch.from_rewards(rewards, ["x", "x", "y"])


def test_many_blocks_ragged_groups_and_dense_input_match_a_loop():
    # 300 rollouts with K = 50: bucket_scores works through several blocks of groups
    rng = np.random.default_rng(4)
    dense = rng.random((300, 3, 4))
    weights = sample_simplex(50, 4, rng=rng)
    loop = [(r @ weights.T).max(axis=0).mean() for r in dense]
    before = dense.copy()
    np.testing.assert_allclose(set_scores(dense, weights), loop, rtol=1e-12)
    per = rng.random((300, 50, 4))
    np.testing.assert_allclose(set_scores(dense, per), [(r @ w.T).max(axis=0).mean() for r, w in zip(dense, per)],
                               rtol=1e-12)
    np.testing.assert_array_equal(dense, before)  # rows may be views of the input: never written
    bad = dense.copy()
    bad[217, 1, 2] = np.inf
    with pytest.raises(ValueError, match=r"rewards\[217\]: contains NaN"):
        set_scores(bad, weights)


def test_reward_batch_equal_groups_out_of_order():
    rewards = np.arange(24, dtype=np.float64).reshape(4, 3, 2)
    batch = RewardBatch.from_rewards(rewards, ["b", "a", "b", "a"])
    (bucket,) = batch.buckets
    assert bucket.slot.tolist() == [[0, 2], [1, 3]]
    np.testing.assert_array_equal(bucket.padded, rewards[[0, 2, 1, 3]].reshape(2, 2, 3, 2))
    ragged = RewardBatch.from_rewards(rewards, ["b", "a", "b", "b"]).buckets[0]
    assert ragged.slot.tolist() == [[0, 2, 3], [1, -1, -1]]
    assert ragged.pad_value == 0.0 and np.all(ragged.padded[1, 1:] == 0.0)

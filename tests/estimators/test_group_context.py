"""One writer of a group's context (``vpo.estimators.context``): the stacked form the derived
estimator uses and the one-group form the engines use give the same weights, goal and scalar,
and both are ``vpo.weights.group_weights``."""

import numpy as np
import pytest

from vpo.estimators import get_estimator, get_spec, group_context, reduction_context, rollout_score
from vpo.objective import GroupWeights
from vpo.weights import group_weights, keyed_simplex, stream_keys

KEYS = ["train-3", "train-9", 17]


@pytest.mark.parametrize("sampler, alpha", [("iid", 1.0), ("iid", 0.5), ("sobol", 1.0)])
def test_stacked_and_one_group_contexts_are_the_keyed_weights(sampler, alpha):
    spec = get_spec("vpo")
    stacked = group_context(spec, KEYS, 4, seed=2, step=5, num_weights=7, alpha=alpha, sampler=sampler)
    weights = stacked["weights"]
    assert isinstance(weights, GroupWeights) and weights.shape == (3, 7, 4) and len(weights) == 3
    dense = np.asarray(weights)
    np.testing.assert_allclose(dense, group_weights(KEYS, 7, 4, seed=2, step=5, alpha=alpha, sampler=sampler),
                               rtol=1e-12, atol=0)
    for g, key in enumerate(KEYS):
        one = reduction_context(spec, key=key, dim=4, seed=2, step=5, num_weights=7, alpha=alpha, sampler=sampler)
        np.testing.assert_array_equal(one["weights"], weights[g])
        np.testing.assert_array_equal(one["weights"], dense[g])


def test_a_block_of_keyed_weights_is_their_unnormalised_draw_and_its_scale():
    weights = group_context(get_spec("vpo"), KEYS, 3, seed=0, step=1)["weights"]
    w, scale = weights.block(1, 3)  # (c, D, K), (c, K)
    np.testing.assert_allclose((w * scale[:, None, :]).transpose(0, 2, 1),
                               keyed_simplex(stream_keys(KEYS[1:], seed=0, step=1), 100, 3), rtol=1e-14)


def test_goal_scalar_and_fixed_weights():
    random_weight = get_spec("random_weight")
    context = group_context(random_weight, KEYS, 3, seed=4, step=None)
    np.testing.assert_array_equal(context["goal"], group_weights(KEYS, 1, 3, seed=4)[:, 0])
    assert set(context) == {"goal"}
    one = reduction_context(random_weight, key=KEYS[1], dim=3, seed=4, step=99)  # fixed for the run: no step
    np.testing.assert_array_equal(one["goal"], context["goal"][1])
    stated = reduction_context(get_spec("goal_conditioned"), key="x", dim=3, goal=[0.2, 0.3, 0.5])
    np.testing.assert_array_equal(stated["goal"], [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="needs the goal weights its prompt states"):
        reduction_context(get_spec("goal_conditioned"), key="x", dim=3)

    def scalar(rows):
        return rows[:, 0]

    assert group_context(get_spec("grpo"), KEYS, 3, scalar=scalar) == {"scalar": scalar}
    fixed = group_context(get_spec("vpo"), KEYS, 2, weights=np.array([[1.0, 0.0], [0.5, 0.5]]))["weights"]
    np.testing.assert_array_equal(np.asarray(fixed), np.broadcast_to([[1.0, 0.0], [0.5, 0.5]], (3, 2, 2)))
    with pytest.raises(ValueError, match="not both"):
        group_context(get_spec("vpo"), KEYS, 2, seed=0, rng=np.random.default_rng(0))


def test_the_estimator_and_the_per_rollout_reduction_read_one_context():
    """What the engines compute one rollout at a time is the estimator's score of that rollout."""
    rng = np.random.default_rng(0)
    rewards = [rng.random((3, 4)) for _ in range(6)]
    labels = ["a", "b", "a", "b", "a", "c"]
    result = get_estimator("vpo")(rewards, labels, seed=3, step=8, num_weights=33)
    spec = get_spec("vpo")
    for b, (matrix, label) in enumerate(zip(rewards, labels)):
        context = reduction_context(spec, key=label, dim=4, seed=3, step=8, num_weights=33)
        assert rollout_score(spec, matrix, **context) == pytest.approx(result.scores[b], rel=1e-12, abs=1e-15)

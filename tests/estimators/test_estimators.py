"""Advantage estimators (vpo.estimators): hand cases, brute force, properties, engine parity."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.estimators import (get_estimator, get_spec, group_normalize, list_estimators, max_at_k_weights,
                            register_estimator)

ALL = list_estimators()  # every registered estimator, entry-point ones included


def rows(*values):
    return [np.array([v], dtype=np.float64) for v in values]  # one answer (1, D) per rollout


def test_registry():
    assert set(ALL) <= set(list_estimators())
    with pytest.raises(ValueError, match="known: .*grpo.*vpo"):
        get_estimator("vpoo")
    with pytest.raises(ValueError, match="unknown option.*'num_weight'.*accepted: num_weights"):
        get_estimator("vpo")(rows([1.0], [0.0]), [0, 0], num_weight=5)
    with pytest.raises(ValueError, match="unknown option.*'num_weights'"):
        get_estimator("grpo")(rows([1.0], [0.0]), [0, 0], num_weights=5)
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("vpo")(lambda rewards, group_ids: None)


def test_vpo_hand_case_with_explicit_weights():
    rewards = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.2, 0.6]]), np.zeros((0, 2))]
    weights = np.array([[1.0, 0.0], [0.5, 0.5]])
    result = get_estimator("vpo")(rewards, ["a", "a", "a"], weights=weights)
    np.testing.assert_allclose(result.scores, [0.75, 0.3, 0.0])
    mean, sd = 0.35, np.std([0.75, 0.3, 0.0])  # population std
    np.testing.assert_allclose(result.advantages, (np.array([0.75, 0.3, 0.0]) - mean) / (sd + 1e-6))
    # group max per weight: w1 -> 1, w2 -> 0.5
    assert result.diagnostics["vpo/mean_group_max"] == pytest.approx(0.75)
    assert result.diagnostics["vpo/mean_pool_size"] == 3.0


def test_vpo_weights_by_label_and_conflicting_options():
    rewards = rows([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0])
    by_label = {"x": np.array([[1.0, 0.0]]), "y": np.array([[0.0, 1.0]])}
    result = get_estimator("vpo")(rewards, ["x", "x", "y", "y"], weights=by_label)
    np.testing.assert_allclose(result.scores, [1, 0, 0, 1])
    with pytest.raises(ValueError, match="do not also pass num_weights"):
        get_estimator("vpo")(rewards, ["x", "x", "y", "y"], weights=by_label, num_weights=3)
    with pytest.raises(ValueError, match="no entry for group 'y'"):
        get_estimator("vpo")(rewards, ["x", "x", "y", "y"], weights={"x": by_label["x"]})


def test_grpo_matches_verl_by_hand():
    # verl grpo: Bessel std, + 1e-6; a one-member group is mean 0 / std 1
    result = get_estimator("grpo")(rows([1.0], [0.0], [0.0], [1.0], [0.5]), ["a", "a", "a", "a", "b"])
    sd = math.sqrt(1 / 3)
    expected = [0.5 / (sd + 1e-6), -0.5 / (sd + 1e-6), -0.5 / (sd + 1e-6), 0.5 / (sd + 1e-6), 0.5 / (1 + 1e-6)]
    np.testing.assert_allclose(result.advantages, expected, rtol=1e-15)


def test_grpo_matches_verl_code():
    torch = pytest.importorskip("torch")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    rng = np.random.default_rng(0)
    scalars = rng.random(11)
    index = np.array(["a", "b", "a", "c", "b", "a", "b", "a", "d", "d", "d"], dtype=object)
    reward = torch.zeros(11, 3, dtype=torch.float64)
    reward[:, -1] = torch.from_numpy(scalars)
    adv, _ = core_algos.compute_grpo_outcome_advantage(reward, torch.ones(11, 3, dtype=torch.float64), index)
    ours = get_estimator("grpo")(rows(*[[s] for s in scalars]), index).advantages
    # verl's one-member group divides by float32 (1 + 1e-6): agreement to float32 rounding there
    np.testing.assert_allclose(ours, adv[:, 0].numpy(), rtol=1e-7, atol=1e-15)
    multi = np.array([len([i for i in index if i == label]) > 1 for label in index])
    np.testing.assert_allclose(ours[multi], adv[multi, 0].numpy(), rtol=1e-12)


def test_trl_normalisation_by_hand():
    # TRL: (r - mean) / (nanstd_bessel + 1e-4); scale_rewards="batch" divides by the batch std
    scalars = [0.2, 0.4, 0.9, 0.9]
    groups = [0, 0, 1, 1]
    trl = dict(std="sample", eps=1e-4, degenerate="none")
    result = get_estimator("grpo")(rows(*[[s] for s in scalars]), groups, **trl)
    sd0 = np.std([0.2, 0.4], ddof=1)
    np.testing.assert_allclose(result.advantages, [-0.1 / (sd0 + 1e-4), 0.1 / (sd0 + 1e-4), 0.0, 0.0])
    batch = get_estimator("grpo")(rows(*[[s] for s in scalars]), groups, scale="batch", **trl)
    sdb = np.std(scalars, ddof=1)
    np.testing.assert_allclose(batch.advantages, [-0.1 / (sdb + 1e-4), 0.1 / (sdb + 1e-4), 0.0, 0.0])
    none = get_estimator("grpo")(rows(*[[s] for s in scalars]), groups, scale="none", **trl)
    np.testing.assert_allclose(none.advantages, [-0.1, 0.1, 0.0, 0.0])


def test_group_normalize_vpo_guard():
    adv, std = group_normalize(np.array([0.5, 0.5 + 1e-8, 1.0, 0.0, 0.3]), np.array([0, 0, 1, 1, 2]))
    np.testing.assert_allclose(adv, [0.0, 0.0, 0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0])
    assert std[0] < 1e-6


def test_multi_rlvr_hand_case():
    rewards = [np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]), np.array([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])]
    result = get_estimator("multi_rlvr")(rewards, [0, 0], scalar=lambda r: r.max(axis=1))
    np.testing.assert_allclose(result.scores, [1.5, 1.0])
    sd = np.std([1.5, 1.0], ddof=1)
    np.testing.assert_allclose(result.advantages, [0.25 / (sd + 1e-6), -0.25 / (sd + 1e-6)])


def brute_force_max_at_k(values, k):
    n = len(values)
    totals = np.zeros(n)
    for subset in itertools.combinations(range(n), k):
        best = max(values[j] for j in subset)
        for i in subset:
            totals[i] += best
    return totals / math.comb(n, k)


@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 0.3]), min_size=3, max_size=8), st.data())
@settings(max_examples=40, deadline=None)
def test_max_at_k_matches_brute_force(values, data):
    n = len(values)
    k = data.draw(st.integers(1, n - 1))
    from vpo.estimators.rules import max_at_k_weighted

    result = get_estimator("max_at_k")(rows(*[[v] for v in values]), [0] * n, k=k)
    # the rollout's score is its fixed scalar (what verl's compute_score returns); the rule weights it
    np.testing.assert_allclose(result.scores, values, atol=1e-12)
    weighted = max_at_k_weighted(np.array(values), np.zeros(n, dtype=np.int64), np.array([n]), [0], k)
    np.testing.assert_allclose(weighted, brute_force_max_at_k(values, k), atol=1e-12)


def test_max_at_k_weights_hand_case_and_default_k():
    # n = 3, k = 2: rank 1 -> r1 + r2 + r3? no: subsets {1,2},{1,3} give r2 + r3; rank 3 -> 2 r3
    np.testing.assert_allclose(max_at_k_weights(3, 2) * 3, [[0, 1, 1], [0, 1, 1], [0, 0, 2]])
    values = [0.1, 0.9, 0.4, 0.7, 0.2, 0.3]  # n = 6: default k = 3
    result = get_estimator("max_at_k")(rows(*[[v] for v in values]), [0] * 6)
    weighted = brute_force_max_at_k(values, 3)
    np.testing.assert_allclose(result.advantages, (weighted - weighted.mean()) / (np.std(weighted, ddof=1) + 1e-6))
    with pytest.raises(ValueError, match="k=6 must be < n=6"):
        get_estimator("max_at_k")(rows(*[[v] for v in values]), [0] * 6, k=6)


def test_gdpo_hand_case():
    rewards = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0], [0.0, 0.5]]), np.array([[1.0, 1.0]]),
               np.array([[0.0, 0.0]])]
    result = get_estimator("gdpo")(rewards, [0, 0, 1, 1], whiten="none")
    z = 0.5 / (np.std([0.0, 1.0], ddof=1) + 1e-6)  # each objective of each group is {0, 1}
    np.testing.assert_allclose(result.advantages, [0.0, 0.0, 2 * z, -2 * z], atol=1e-12)
    whitened = get_estimator("gdpo")(rewards, [0, 0, 1, 1])
    x = np.array([0.0, 0.0, 2 * z, -2 * z])
    np.testing.assert_allclose(whitened.advantages, (x - x.mean()) / np.sqrt(x.var(ddof=1) + 1e-8))
    np.testing.assert_allclose(whitened.scores, [1.0, 1.0, 2.0, 0.0])  # per-objective max for m > 1


def test_maxrl_hand_case():
    result = get_estimator("maxrl")(rows([1.0], [0.0], [0.0], [1.0], [0.0], [0.0], [0.7]),
                                    [0, 0, 0, 0, 1, 1, 2])
    a = 0.5 / (0.5 + 1e-6)  # group 0 has mean 0.5; group 1 is all zero; group 2 has one member
    np.testing.assert_allclose(result.advantages, [a, -a, -a, a, 0.0, 0.0, 0.0])
    raw = get_estimator("maxrl")(rows([0.7]), [0], degenerate="raw")
    np.testing.assert_allclose(raw.advantages, [0.7 / 1e-6])


def test_random_weight_scores_are_w_dot_r_of_the_groups_keyed_weight():
    # one w per group (prompt), shared by its rollouts, keyed like VPO's weights
    from vpo.weights import group_weights, keyed_simplex, stream_keys

    rewards = rows([1.0, 0.0, 0.5], [0.2, 0.2, 0.2], [0.0, 1.0, 0.0])
    result = get_estimator("random_weight")(rewards, ["g", "g", "g"], seed=4, step=2)
    w = keyed_simplex(stream_keys(["g"], seed=4, step=2), 1, 3)[0, 0]
    np.testing.assert_allclose(w, group_weights(["g"], 1, 3, seed=4, step=2)[0, 0])
    np.testing.assert_allclose(result.scores, [w @ rewards[j][0] for j in range(3)])
    assert result.scores[1] == pytest.approx(0.2)
    # the same group keyed in another batch, beside other groups, gets the same w
    other = get_estimator("random_weight")(rewards + rows([0.3, 0.3, 0.4]), ["g", "g", "g", "h"], seed=4, step=2)
    np.testing.assert_allclose(other.scores[:3], result.scores)


@pytest.mark.parametrize("name", ALL)
def test_identical_rollouts_get_zero_advantages(name):
    rewards = [np.array([[0.3, 0.8, 0.1]])] * 5 + [np.array([[0.5, 0.5, 0.5]])] * 3
    groups = [0] * 5 + [1] * 3
    options = {"seed": 0} if get_spec(name).weights else {}
    result = get_estimator(name)(rewards, groups, **options)
    # random_weight and goal_conditioned too: one w per group, so identical answers tie
    np.testing.assert_allclose(result.advantages, 0.0, atol=1e-12)
    assert result.advantages.shape == (8,) and result.scores.shape == (8,)


@given(st.integers(0, 10**6), st.integers(1, 4))
@settings(max_examples=15, deadline=None)
def test_vpo_group_does_not_depend_on_other_groups(seed, extra_groups):
    rng = np.random.default_rng(seed)
    mine = [rng.random((3, 4)) for _ in range(6)]
    others = [rng.random((3, 4)) for _ in range(6 * extra_groups)]
    alone = get_estimator("vpo")(mine, ["me"] * 6, seed=seed, step=1)
    labels = [f"o{i // 6}" for i in range(len(others))]
    together = get_estimator("vpo")(others[:6] + mine + others[6:], labels[:6] + ["me"] * 6 + labels[6:],
                                    seed=seed, step=1)
    np.testing.assert_allclose(together.advantages[6:12], alone.advantages, rtol=1e-12, atol=1e-12)


@given(st.integers(0, 10**6))
@settings(max_examples=15, deadline=None)
def test_permuting_rollouts_and_answers_only_permutes(seed):
    rng = np.random.default_rng(seed)
    rewards = [rng.random((rng.integers(0, 4), 3)) for _ in range(9)]
    groups = ["a", "b", "c"] * 3
    perm = rng.permutation(9)
    shuffled = [rewards[i][rng.permutation(len(rewards[i]))] for i in perm]
    base = get_estimator("vpo")(rewards, groups, seed=1)
    moved = get_estimator("vpo")(shuffled, [groups[i] for i in perm], seed=1)
    np.testing.assert_allclose(moved.advantages, base.advantages[perm], atol=1e-12)
    np.testing.assert_allclose(moved.scores, base.scores[perm], atol=1e-14)


def test_vpo_single_answer_is_grpo_on_the_mean_within_monte_carlo_error():
    rng = np.random.default_rng(5)
    rewards = [rng.random((1, 4)) for _ in range(8)]
    result = get_estimator("vpo")(rewards, [0] * 8, num_weights=20_000, seed=2)
    np.testing.assert_allclose(result.scores, [r.mean() for r in rewards], atol=0.01)


def test_rng_draws_in_first_appearance_order():
    rng = np.random.default_rng(0)
    rewards = [rng.random((2, 3)) for _ in range(4)]
    a = get_estimator("vpo")(rewards, ["y", "x", "y", "x"], rng=np.random.default_rng(9), num_weights=5)
    from vpo.objective import set_scores
    from vpo.weights import sample_simplex

    source = np.random.default_rng(9)
    w_y, w_x = sample_simplex(5, 3, rng=source), sample_simplex(5, 3, rng=source)
    expected = set_scores(rewards, [w_y, w_x, w_y, w_x])
    np.testing.assert_allclose(a.scores, expected, rtol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_weights": 0}, "num_weights"), ({"num_weights": -3}, "num_weights"), ({"alpha": 0.0}, "alpha"),
    ({"alpha": -1.0}, "alpha"), ({"sampler": "halton"}, "sampler"), ({"seed": 0, "rng": np.random.default_rng()},
                                                                     "not both"),
    ({"step": 3}, "step is used only with seed"), ({"std": "bessel"}, "std"), ({"degenerate": "nan"}, "degenerate"),
    ({"scale": "global"}, "scale"), ({"eps": -1.0}, "eps"),
])
def test_vpo_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        get_estimator("vpo")(rows([1.0, 0.0], [0.0, 1.0]), [0, 0], **kwargs)


def test_bad_input_names_the_rollout_or_argument():
    est = get_estimator("vpo")
    with pytest.raises(ValueError, match="group_ids has length 1 but rewards has 2"):
        est(rows([1.0], [0.0]), [0], seed=0)
    with pytest.raises(ValueError, match=r"rewards\[1\]: contains NaN"):
        est(rows([1.0], [np.nan]), [0, 0], seed=0)
    with pytest.raises(ValueError, match=r"rewards\[2\]: width 3"):
        est([np.ones((2, 2)), np.ones((1, 2)), np.ones((1, 3))], [0, 0, 0], seed=0)
    with pytest.raises(ValueError, match=r"rewards\[1\] has 2"):
        get_estimator("grpo")([np.ones((1, 2)), np.ones((2, 2))], [0, 0])
    with pytest.raises(ValueError, match="scalar returned shape"):
        get_estimator("grpo")(rows([1.0, 0.0]), [0], scalar=lambda r: r)


def test_sobol_lowers_advantage_noise():
    rng = np.random.default_rng(11)
    rewards = [rng.random((3, 4)) for _ in range(8)]
    def noise(sampler):
        runs = [get_estimator("vpo")(rewards, [0] * 8, sampler=sampler, num_weights=64, seed=s).advantages
                for s in range(60)]
        return np.var(runs, axis=0).mean()
    assert noise("sobol") < 0.7 * noise("iid")


def test_mixed_dimensions_and_label_types():
    rewards = [np.ones((2, 2)) * 0.5, np.eye(2), np.ones((1, 5)), np.zeros((0, 5)), np.ones((3, 5)) * 0.2]
    labels = [("p", 1), ("p", 1), 7, 7, 7]
    result = get_estimator("vpo")(rewards, labels, seed=0)
    assert result.group_labels == [("p", 1), 7]
    assert result.scores[3] == 0.0 and result.scores[2] == pytest.approx(1.0)
    assert result.scores[4] == pytest.approx(0.2)


def test_keyed_vpo_scores_are_set_scores_with_the_keyed_simplex_weights():
    from vpo.objective import set_scores
    from vpo.weights import keyed_simplex, stream_keys

    # 200 groups x 4 rollouts, K = 100: the keyed weights are drawn over several blocks
    rng = np.random.default_rng(6)
    rewards = rng.random((800, 3, 3)) - 0.2
    labels = [f"p{b % 200}" for b in range(800)]  # groups interleaved, not contiguous
    result = get_estimator("vpo")(list(rewards), labels, seed=7, step=5)
    w = keyed_simplex(stream_keys([f"p{g}" for g in range(200)], seed=7, step=5), 100, 3)
    np.testing.assert_allclose(result.scores, set_scores(rewards, w[np.arange(800) % 200]), rtol=1e-13, atol=1e-15)
    one_d = get_estimator("vpo")([r[:, :1] for r in rewards[:8]], [0] * 8, seed=0)
    np.testing.assert_allclose(one_d.scores, rewards[:8, :, 0].max(axis=1), rtol=1e-15)


# ----------------------------------------------------------------------------------------
# the reference loop, the specs and the options, per-group weights
# ----------------------------------------------------------------------------------------
@given(st.integers(0, 10**6))
@settings(max_examples=25, deadline=None)
def test_vpo_fast_path_agrees_with_the_reference_loop(seed):
    from vpo.estimators import vpo_reference
    from vpo.weights import group_weights

    rng = np.random.default_rng(seed)
    num_groups, dim, k = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 40))
    labels, rewards = [], []
    for g in range(num_groups):
        for _ in range(int(rng.integers(1, 6))):
            labels.append(f"p{g}")
            rewards.append(rng.random((int(rng.integers(0, 4)), dim)) * (rng.random() < 0.8))
    order = rng.permutation(len(labels))  # groups need not be contiguous
    labels, rewards = [labels[i] for i in order], [rewards[i] for i in order]
    fast = get_estimator("vpo")(rewards, labels, num_weights=k, seed=seed, step=7)
    weights = {f"p{g}": group_weights([f"p{g}"], k, dim, seed=seed, step=7)[0] for g in range(num_groups)}
    scores, advantages = vpo_reference(rewards, labels, weights)
    np.testing.assert_allclose(fast.scores, scores, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fast.advantages, advantages, rtol=1e-6, atol=1e-6)


def test_vpo_reference_hand_case():
    from vpo.estimators import vpo_reference

    rewards = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.2, 0.6]]), np.zeros((0, 2))]
    weights = {"a": np.array([[1.0, 0.0], [0.5, 0.5]])}
    scores, advantages = vpo_reference(rewards, ["a"] * 3, weights)
    np.testing.assert_allclose(scores, [0.75, 0.3, 0.0])
    np.testing.assert_allclose(advantages, (scores - 0.35) / (np.std(scores) + 1e-6))


def test_specs_record_what_adapters_need():
    from vpo.estimators import get_spec

    assert get_spec("vpo").multi_answer and get_spec("vpo").weights == "per_step"
    from vpo.estimators import scalar_sum, set_score

    # the per-rollout reduction is a registered function now, not a name the adapters re-implement
    assert get_spec("vpo").reduce is set_score and get_spec("vpo").default_answers == 3
    assert not get_spec("grpo").multi_answer and get_spec("grpo").default_answers == 1
    assert get_spec("multi_rlvr").reduce is scalar_sum
    assert get_spec("random_weight").weights == "fixed" and not get_spec("random_weight").conditions_prompt
    assert get_spec("goal_conditioned").conditions_prompt
    assert get_spec("gdpo").reduce is None
    assert get_spec("vpo").defaults["num_weights"] == 100 and get_spec("vpo").defaults["alpha"] == 1.0
    assert "num_weights" in get_spec("vpo").options and get_spec("grpo").defaults["std"] == "sample"
    with pytest.raises(ValueError, match="known: "):
        get_spec("nope")


@pytest.mark.parametrize("bad,match", [({"num_weights": 0}, "num_weights"), ({"alpha": 0}, "alpha"),
                                       ({"alpha": -1.0}, "alpha"), ({"sampler": "lhs"}, "sampler")])
def test_zero_k_and_alpha_raise_everywhere_in_the_core(bad, match):
    from vpo.estimators import WeightOptions

    with pytest.raises(ValueError, match=match):
        WeightOptions(**bad)
    with pytest.raises(ValueError, match=match):
        get_estimator("vpo")(rows([1.0, 0.0], [0.0, 1.0]), [0, 0], seed=0, **bad)
    if "num_weights" not in bad:
        with pytest.raises(ValueError, match=match):
            get_estimator("random_weight")(rows([1.0, 0.0], [0.0, 1.0]), [0, 0], seed=0, **bad)


def test_random_weight_draws_one_w_per_group_from_a_generator():
    rewards = rows([1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0])
    result = get_estimator("random_weight")(rewards, ["a", "a", "a", "b", "b"], rng=np.random.default_rng(3))
    from vpo.weights import sample_simplex

    w = sample_simplex(2, 2, rng=np.random.default_rng(3))  # group a, then group b
    np.testing.assert_allclose(result.scores, [w[0, 0], w[0, 1], 0.5, w[1, 0], w[1, 1]])


def test_goal_conditioned_scores_with_the_stated_weights():
    rewards = rows([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6], [0.0, 0.0, 1.0])
    goals = {"x": [0.7, 0.2, 0.1], "y": [0.0, 0.5, 0.5]}
    result = get_estimator("goal_conditioned")(rewards, ["x", "x", "y", "y"], goal_weights=goals)
    np.testing.assert_allclose(result.scores, [0.7, 0.2, 0.4, 0.5])
    per_rollout = np.array([goals["x"], goals["x"], goals["y"], goals["y"]])
    same = get_estimator("goal_conditioned")(rewards, ["x", "x", "y", "y"], goal_weights=per_rollout)
    np.testing.assert_allclose(same.advantages, result.advantages)
    assert set(result.diagnostics) >= {"goal_conditioned/group_std"}
    with pytest.raises(ValueError, match="no entry for group 'y'"):
        get_estimator("goal_conditioned")(rewards, ["x", "x", "y", "y"], goal_weights={"x": goals["x"]})
    with pytest.raises(ValueError, match="shares one weight vector"):
        get_estimator("goal_conditioned")(rewards, ["x", "x", "y", "y"], goal_weights=per_rollout[[0, 2, 2, 3]])
    with pytest.raises(ValueError, match="expected 3 weights"):
        get_estimator("goal_conditioned")(rewards, ["x", "x", "y", "y"], goal_weights={"x": [1.0], "y": [1.0]})
    # identical answers in a group: zero advantages whatever the weights
    same_answers = get_estimator("goal_conditioned")(rows(*[[0.3, 0.9, 0.1]] * 4), ["x"] * 4, goal_weights=goals)
    np.testing.assert_allclose(same_answers.advantages, 0.0)


def test_weight_keys_key_groups_that_share_a_prompt_alike():
    rewards = rows([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0])
    keyed = get_estimator("vpo")(rewards, [0, 0, 1, 1], seed=2, step=1, weight_keys=["p", "p", "p", "p"])
    np.testing.assert_allclose(keyed.scores[:2], keyed.scores[2:])
    with pytest.raises(ValueError, match="different keys"):
        get_estimator("vpo")(rewards, [0, 0, 1, 1], seed=2, weight_keys=["p", "q", "p", "p"])


def test_gdpo_token_weighted_whitening_by_hand():
    rewards = rows([1.0], [0.0], [1.0], [0.0])
    per_rollout = get_estimator("gdpo")(rewards, [0, 0, 1, 1])
    lengths = [1, 3, 2, 2]
    tokens = get_estimator("gdpo")(rewards, [0, 0, 1, 1], response_lengths=lengths)
    summed = np.array([1, -1, 1, -1]) / (np.sqrt(0.5) + 1e-6)
    expanded = np.repeat(summed, lengths)
    expected = (summed - expanded.mean()) / np.sqrt(expanded.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(tokens.advantages, expected)
    assert not np.allclose(per_rollout.advantages, tokens.advantages)
    with pytest.raises(ValueError, match="response_lengths"):
        get_estimator("gdpo")(rewards, [0, 0, 1, 1], response_lengths=[1, 2])

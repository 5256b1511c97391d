"""An estimator is its two halves: the batched function derived from the reduction and the rule,
the reductions' batched forms, fast paths as checked overrides, and the zero-row contract."""

import dataclasses
import inspect

import numpy as np
import pytest

from vpo.estimators import (VPO_NORM, EstimatorResult, batched, fixed_scalar, get_estimator, get_spec, group_norm,
                            list_estimators, register_estimator, set_score)
from vpo.estimators.check import check_estimator
from vpo.estimators import registry as registry_module


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for the test: what it registers is gone afterwards."""
    list_estimators()
    monkeypatch.setattr(registry_module, "_REGISTRY", registry_module._REGISTRY.copy())
    monkeypatch.setattr(registry_module, "_INCOMPLETE", {})


def _batch(seed=0, groups=4, per_group=5, dim=3, multi=True):
    rng = np.random.default_rng(seed)
    rewards, labels = [], []
    for g in range(groups):
        for _ in range(per_group):
            m = int(rng.integers(0, 4)) if multi else int(rng.random() < 0.9)
            rewards.append(rng.integers(0, 5, size=(m, dim)) / 4.0)
            labels.append(f"q{g}")
    order = rng.permutation(len(labels))
    return [rewards[i] for i in order], [labels[i] for i in order]


def _unbatched(reduce):
    def one(matrix, **context):
        return reduce(matrix, **context)

    one.__signature__ = inspect.signature(reduce)
    one.__name__ = reduce.__name__
    return one


@pytest.mark.parametrize("name", ["grpo", "multi_rlvr", "max_at_k", "maxrl", "random_weight", "goal_conditioned",
                                  "vpo"])
def test_the_batched_form_equals_the_reduction_called_per_rollout(name):
    """Each built-in reduction's batched form against the same reduction called once per rollout
    (the derived function's path for a reduction without a batched form)."""
    spec = get_spec(name)
    rewards, labels = _batch(multi=spec.multi_answer)
    options = {"seed": 3, "step": 2} if spec.weights == "per_step" else {"seed": 3} if spec.weights else {}
    fast = spec.derived(rewards, labels, **options)
    slow = dataclasses.replace(spec, reduce=_unbatched(spec.reduce)).derived(rewards, labels, **options)
    np.testing.assert_allclose(fast.scores, slow.scores, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast.advantages, slow.advantages, rtol=1e-9, atol=1e-9)
    assert sorted(fast.diagnostics) == sorted(slow.diagnostics)


def test_every_built_in_estimator_is_its_halves_vpo_included():
    """One definition of VPO: no registered override beside the function derived from its halves."""
    for name in ("grpo", "multi_rlvr", "max_at_k", "maxrl", "random_weight", "goal_conditioned", "vpo"):
        spec = get_spec(name)
        assert spec.fast is None and spec.derived is not None and hasattr(spec.reduce, "batched")
    vpo = get_spec("vpo")
    assert vpo.reduce is set_score and vpo.advantage is group_norm
    rewards, labels = _batch(1)
    called, derived = vpo.fn(rewards, labels, seed=5, step=4), vpo.derived(rewards, labels, seed=5, step=4)
    np.testing.assert_array_equal(called.scores, derived.scores)
    assert "vpo/mean_group_max" in called.diagnostics and "vpo/mean_group_max" in derived.diagnostics
    assert dict(called.diagnostics) == dict(derived.diagnostics)
    assert get_spec("gdpo").derived is None and get_spec("gdpo").fast is None


def test_vpo_pool_diagnostics_by_hand_and_only_when_read():
    """vpo/mean_group_max is the set score of each group's whole pool; it costs a pass over the
    batch, so it is computed when the diagnostics are read, once."""
    from vpo.estimators import vpo as vpo_module

    rewards = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[0.5, 0.5]]), np.zeros((0, 2))]
    weights = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    calls = []
    real = get_spec("vpo").diagnostics
    spec = dataclasses.replace(get_spec("vpo"), diagnostics=lambda *a, **k: calls.append(1) or real(*a, **k))
    result = spec.derived(rewards, ["a", "a", "b", "b"], weights=weights)
    np.testing.assert_allclose(result.scores, [0.5, 0.5, 0.5, 0.0])  # (1 + 0 + 0.5) / 3 and so on
    assert result.diagnostics["vpo/score_mean"] == pytest.approx(0.375)
    assert calls == []  # a ready entry: no pass over the pools
    # group a pools [1, 0] and [0, 1]: max per weight 1, 1, 0.5; group b only [0.5, 0.5]: 0.5 each
    assert result.diagnostics["vpo/mean_group_max"] == pytest.approx(((1 + 1 + 0.5) / 3 + 0.5) / 2)
    assert result.diagnostics["vpo/mean_own_pool_score"] == pytest.approx((0.5 + 0.25) / 2)
    assert len(dict(result.diagnostics)) == len(result.diagnostics) and calls == [1]
    assert vpo_module.pool_scores is real


def test_one_reduction_is_an_estimator(registry):
    def best_mean(matrix, *, scalar=None, top: int = 1):
        """Mean of the ``top`` best fixed scalars of the rollout's answers (0 without answers)."""
        rows = np.asarray(matrix, dtype=float)
        values = np.sort(rows.mean(axis=1) if scalar is None else scalar(rows))[::-1]
        return float(values[:top].sum() / top) if values.size else 0.0

    register_estimator("best_mean", reduce=best_mean, advantage=group_norm, defaults=VPO_NORM.as_dict())
    spec = get_spec("best_mean")
    assert spec.options == ("scalar", "top", "std", "eps", "degenerate", "scale")
    assert spec.defaults["top"] == 1 and spec.defaults["std"] == "population" and spec.summary.startswith("Mean")
    check_estimator("best_mean")
    rewards = [np.array([[1.0, 1.0], [0.0, 0.5]]), np.array([[0.5, 0.5]]), np.zeros((0, 2))]
    result = get_estimator("best_mean")(rewards, ["a", "a", "a"], top=2)
    np.testing.assert_allclose(result.scores, [0.625, 0.25, 0.0])
    np.testing.assert_allclose(result.advantages, group_norm(result.scores, [0, 0, 0], **VPO_NORM.as_dict()))
    assert set(result.diagnostics) >= {"best_mean/group_std", "best_mean/score_mean"}
    with pytest.raises(ValueError, match="unknown option.*'beta'"):
        get_estimator("best_mean")(rewards, ["a"] * 3, beta=1.0)


def test_a_default_is_declared_once(registry):
    def reduce(matrix, *, scalar=None, eps=1e-3):
        return 0.0

    with pytest.raises(ValueError, match="option 'eps' defaults to 0.001 in its reduce reduce but 1e-06 in defaults="):
        register_estimator("twice", reduce=reduce, advantage=group_norm, defaults=VPO_NORM.as_dict())
    with pytest.raises(ValueError, match="defaults names 'beta', which is not an option of its halves"):
        register_estimator("twice", reduce=fixed_scalar, advantage=group_norm, defaults={"beta": 1.0})
    with pytest.raises(ValueError, match="give both reduce and advantage"):
        register_estimator("twice", reduce=fixed_scalar)
    register_estimator("open_defaults", reduce=fixed_scalar, advantage=group_norm)  # std, eps, ... have no default
    assert "open_defaults" not in list_estimators()
    with pytest.raises(ValueError, match="'open_defaults' is not registered: option.*std.*have no default"):
        get_spec("open_defaults")


def test_a_fast_path_that_disagrees_with_its_halves_is_caught(registry):
    @register_estimator("fast_wrong", multi_answer=False, reduce=fixed_scalar, advantage=group_norm,
                        defaults=VPO_NORM.as_dict())
    def fast_wrong(rewards, group_ids, *, scalar, std, eps, degenerate, scale):
        """Scores every rollout's single answer by its first objective, not the fixed scalar."""
        scores = np.array([float(np.asarray(m)[0, 0]) if len(m) else 0.0 for m in rewards])
        return EstimatorResult(group_norm(scores, group_ids, std=std, eps=eps, degenerate=degenerate, scale=scale),
                               scores)

    with pytest.raises(AssertionError, match="its reduction fixed_scalar gives|fast path fast_wrong"):
        check_estimator("fast_wrong")


def test_a_fast_path_may_leave_injected_options_to_the_derived_function(registry):
    calls = []

    @register_estimator("keyed_only", reduce=set_score, advantage=group_norm, weights="per_step",
                        defaults=VPO_NORM.as_dict())
    def keyed_only(rewards, group_ids, *, num_weights, alpha, sampler, seed, step, weight_keys, std, eps,
                   degenerate, scale):
        calls.append(seed)
        return get_spec("vpo").fn(rewards, group_ids, num_weights=num_weights, alpha=alpha, sampler=sampler,
                                  seed=seed, step=step, weight_keys=weight_keys, std=std, eps=eps,
                                  degenerate=degenerate, scale=scale)

    check_estimator("keyed_only")
    rewards, labels = _batch(2)
    calls.clear()
    get_estimator("keyed_only")(rewards, labels, seed=1)
    assert calls == [1]
    by_rng = get_estimator("keyed_only")(rewards, labels, rng=np.random.default_rng(0), num_weights=7)
    assert calls == [1] and by_rng.scores.shape == (len(rewards),)  # rng: the derived function ran
    with pytest.raises(ValueError, match="reduce set_score takes|does not accept"):
        @register_estimator("keyed_only", reduce=set_score, advantage=group_norm, weights="per_step",
                            defaults=VPO_NORM.as_dict())
        def no_k(rewards, group_ids, *, seed, step, std, eps, degenerate, scale):  # no num_weights: refused
            raise NotImplementedError
    assert get_spec("keyed_only").fast is not None  # the failed re-registration left the old one in place


def test_zero_rows_score_like_absent_answers_or_the_estimator_says_so(registry):
    def mean_of_answers(matrix, *, scalar=None):
        """Mean fixed scalar over the rollout's rows (0 without answers): zero rows pull it down."""
        rows = np.asarray(matrix, dtype=float)
        return float(rows.mean()) if rows.size else 0.0

    register_estimator("mean_of_answers", reduce=mean_of_answers, advantage=group_norm, defaults=VPO_NORM.as_dict())
    with pytest.raises(AssertionError, match="an all-zero row changes rollout"):
        check_estimator("mean_of_answers")
    register_estimator("mean_counting_pads", reduce=mean_of_answers, advantage=group_norm,
                       defaults=VPO_NORM.as_dict(), counts_zero_rows=True)
    check_estimator("mean_counting_pads")
    for name in ("vpo", "grpo", "multi_rlvr", "random_weight", "gdpo"):
        assert not get_spec(name).counts_zero_rows  # the built-in ones keep the rule (checked over the registry)


def test_an_empty_rollout_scores_zero(registry):
    def one_plus_sum(matrix, *, scalar=None):
        return 1.0 + float(np.asarray(matrix).sum())

    register_estimator("one_plus_sum", reduce=one_plus_sum, advantage=group_norm, defaults=VPO_NORM.as_dict(),
                       counts_zero_rows=True)
    with pytest.raises(AssertionError, match="scores an empty rollout|its reduction one_plus_sum gives"):
        check_estimator("one_plus_sum")


def test_a_batched_form_of_the_wrong_shape_is_refused(registry):
    @batched(lambda stack, *, scalar=None: np.zeros(stack.slot.size))  # flat, not (G, N)
    def flat(matrix, *, scalar=None):
        return 0.0

    register_estimator("flat", reduce=flat, advantage=group_norm, defaults=VPO_NORM.as_dict())
    with pytest.raises(ValueError, match=r"batched form of flat returned shape \(\d+,\); expected \(G, N\)"):
        get_estimator("flat")(*_batch())

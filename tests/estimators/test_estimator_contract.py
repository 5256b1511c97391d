"""The estimator contract: ``check_estimator`` over every registered estimator, and the spec
checked against the function at registration (a contradiction fails there, not at the first
training step)."""

import numpy as np
import pytest

from vpo.estimators import (EstimatorResult, get_spec, group_norm, list_estimators, reduction_context,
                            register_estimator, rollout_score, set_score, weighted)
from vpo.estimators.check import check_estimator


@pytest.mark.parametrize("name", list_estimators())
def test_every_registered_estimator_keeps_the_contract(name):
    check_estimator(name)
    check_estimator(name, seed=7)


def test_vpo_spec_states_its_real_defaults_and_groups_its_options():
    spec = get_spec("vpo")
    assert spec.defaults["num_weights"] == 100 and spec.defaults["alpha"] == 1.0 and spec.defaults["sampler"] == "iid"
    assert spec.reduction_options == ("num_weights", "alpha", "sampler", "seed")
    assert spec.advantage_options == ("std", "eps", "degenerate", "scale")
    assert set(spec.injected_options) == {"rng", "step", "weight_keys", "weights"}
    assert get_spec("max_at_k").advantage_options[0] == "k" and get_spec("gdpo").reduce is None


def _plain(rewards, group_ids, *, scalar=None, std="population", eps=1e-6, degenerate="zero", scale="group"):
    raise NotImplementedError  # never called: registration fails first


@pytest.mark.parametrize("kwargs, match", [
    (dict(reduce=set_score, advantage=group_norm), "keyed weights, but weights=None"),
    (dict(reduce=weighted, advantage=group_norm), "one weight vector per group"),
    (dict(reduce=lambda matrix, *, beta=1.0: 0.0, advantage=group_norm), "does not accept"),
    (dict(reduce=lambda matrix, *, scalar=None: 0.0, advantage=lambda s, g, *, k: s), "does not accept"),
    (dict(weights="per_step"), "needs a seed option"),
    (dict(conditions_prompt=True), "goal_weights"),
])
def test_a_spec_that_contradicts_its_function_fails_at_registration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        register_estimator("contradiction", multi_answer=False, **kwargs)(_plain)
    assert "contradiction" not in list_estimators()


def test_a_reduction_default_that_differs_from_the_estimator_fails_at_registration():
    def reduce(matrix, *, scalar=None, eps=1e-3):
        return 0.0

    with pytest.raises(ValueError, match="option 'eps' defaults to 1e-06 in the estimator but 0.001"):
        register_estimator("contradiction", multi_answer=False, reduce=reduce, advantage=group_norm)(_plain)


def _first_answer_mean(matrix, *, weights):
    """A reduction that does not match its estimator (the mean of the first answer's weighted values)."""
    return float((np.asarray(matrix)[:1] @ np.asarray(weights).T).mean()) if len(matrix) else 0.0


def test_check_estimator_catches_a_reduction_that_is_not_the_scores():
    # registered here, not at import, so the suite's loops over the registry never see it
    @register_estimator("misreduced", multi_answer=True, reduce=_first_answer_mean, advantage=group_norm,
                        weights="per_step")
    def misreduced(rewards, group_ids, *, num_weights=8, alpha=1.0, sampler="iid", seed=None, step=None,
                   weight_keys=None, std="population", eps=1e-6, degenerate="zero", scale="group"):
        """Scores with the set score (max over answers) but registers a first-answer reduction."""
        scores = np.array([rollout_score(get_spec("vpo"), m, **reduction_context(
            get_spec("vpo"), key=k, dim=np.asarray(m).shape[1], seed=seed, step=step, num_weights=num_weights))
            for m, k in zip(rewards, weight_keys or group_ids)])
        advantages = group_norm(scores, group_ids, std=std, eps=eps, degenerate=degenerate, scale=scale)
        return EstimatorResult(advantages, scores)

    with pytest.raises(AssertionError, match=r"check_estimator\('misreduced'\): its reduction _first_answer_mean"):
        check_estimator("misreduced")


def test_check_estimator_catches_batch_dependent_weights():
    @register_estimator("batch_drawn", multi_answer=False)
    def batch_drawn(rewards, group_ids, *, seed=None):
        rng = np.random.default_rng(len(rewards))  # depends on the batch size: not keyed on the group
        scores = np.array([float(np.sum(m)) * rng.random() for m in rewards])
        return EstimatorResult(np.zeros(len(rewards)), scores)

    with pytest.raises(AssertionError, match="change with the rest of the batch|not permutation"):
        check_estimator("batch_drawn")


def test_a_module_dropped_into_the_package_registers_itself(tmp_path, monkeypatch):
    """In-tree estimators and tasks need no import edit: every module of the package loads on
    first use of the registry (a temporary folder stands in for a new file in the package)."""
    import sys

    import vpo.estimators as estimators
    import vpo.tasks as tasks
    from vpo.estimators import registry

    (tmp_path / "est").mkdir()
    (tmp_path / "est" / "dropped_in.py").write_text(
        "import numpy as np\n"
        "from vpo.estimators import EstimatorResult, fixed_scalar, group_norm, register_estimator\n"
        "@register_estimator('dropped_in', multi_answer=False, reduce=fixed_scalar, advantage=group_norm)\n"
        "def dropped_in(rewards, group_ids, *, scalar=None, std='sample', eps=1e-6, degenerate='raw', "
        "scale='group'):\n"
        "    scores = np.array([fixed_scalar(m, scalar=scalar) for m in rewards])\n"
        "    return EstimatorResult(group_norm(scores, group_ids, std=std, eps=eps, degenerate=degenerate, "
        "scale=scale), scores)\n")
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "dropped_task.py").write_text(
        "import numpy as np\n"
        "from vpo.chains import RewriteRule\n"
        "from vpo.tasks import Task, register_task\n"
        "@register_task('dropped_task')\n"
        "class DroppedTask(Task):\n"
        "    objectives = ('x',)\n"
        "    rewrite_rule = RewriteRule('dropped', template='{m} answers in <{tag}_i>', pattern='A:', tag='a')\n"
        "    def prompt_single(self, example):\n"
        "        return 'A:'\n"
        "    def score(self, text, example):\n"
        "        return np.array([float('x' in text)])\n")
    # every real module registers into the real registries first: one first imported inside the
    # copies below would stay in sys.modules, its task or estimator lost with the copies
    tasks.list_tasks()
    list_estimators()
    monkeypatch.setattr(estimators, "__path__", [*estimators.__path__, str(tmp_path / "est")])
    monkeypatch.setattr(tasks, "__path__", [*tasks.__path__, str(tmp_path / "task")])
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    # the two registries get back their own dicts afterwards: the rest of the suite never sees these
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    monkeypatch.setattr(tasks, "_REGISTRY", tasks._REGISTRY.copy())
    for name in ("vpo.estimators.dropped_in", "vpo.tasks.dropped_task"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert "dropped_in" in list_estimators()
    check_estimator("dropped_in")
    assert tasks.get_task("dropped_task").score("x", {}).tolist() == [1.0]
    assert "dropped_task" in tasks.list_tasks()


def test_every_registered_estimator_pickles_as_its_name():
    """An estimator crosses process boundaries (spawned workers, Ray) as a module-level function did."""
    import pickle

    from vpo.estimators import get_estimator, list_estimators

    for name in list_estimators():
        assert pickle.loads(pickle.dumps(get_estimator(name))) is get_estimator(name)

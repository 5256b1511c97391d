"""Every registered task against the Task contract (vpo.tasks.check.check_task), Gymnasium's
``check_env`` pattern, and the checker itself on broken toy tasks."""

import numpy as np
import pytest

from vpo.chains import RewriteRule
from vpo.tasks import Task, get_task, list_tasks, register_task
from vpo.tasks.check import check_task

DEFAULT_PARAMS = {"maze": {"size": 5},
                  "own_rewards": {"reward_funcs": "own_reward_funcs:keyword,own_reward_funcs:brevity"}}


@pytest.mark.parametrize("name", list_tasks())
def test_every_registered_task_meets_the_contract(name):
    check_task(get_task(name, **DEFAULT_PARAMS.get(name, {})))


class _Toy(Task):
    objectives = ("a", "b")
    rewrite_rule = RewriteRule("toy", template="Give {m} answers in <answer_i> tags.", pattern=None, tag="answer")
    name = "toy-contract"

    def prompt_single(self, example):
        return f"Say a or b about {example['id']}."

    def score(self, text, example):
        return np.array([float("a" in text), float("b" in text)])

    def examples(self, split="train", n=None, *, seed=None, source=None):
        return [{"id": i} for i in range(n or 2)]


def test_a_correct_toy_task_passes_and_registers(monkeypatch):
    from vpo import tasks

    monkeypatch.setattr(tasks, "_REGISTRY", tasks._REGISTRY.copy())  # registered for this test only
    register_task("toy-contract")(_Toy)
    assert "toy-contract" in list_tasks()
    check_task(get_task("toy-contract"))


def test_broken_tasks_are_named():
    class OutOfRange(_Toy):
        def score(self, text, example):
            return np.array([2.0, 0.0]) if text else np.zeros(2)

    class Overrides(_Toy):
        def score_chain(self, text, example, m):
            return super().score_chain(text, example, m)

    class NonZeroOnEmpty(_Toy):
        def score(self, text, example):
            return np.array([0.5, 0.0])

    with pytest.raises(AssertionError, match=r"leaves \[0, 1\]"):
        check_task(OutOfRange())
    with pytest.raises(AssertionError, match="overrides score_chain"):
        check_task(Overrides())
    with pytest.raises(AssertionError, match="empty text must score the zero vector"):
        check_task(NonZeroOnEmpty())

"""vpo.rewards as a package: small rooms, every earlier public name still importable from
``vpo.rewards`` (renamed ones warning with a date), and TRL's hooks passed on per answer."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

import vpo.rewards as rewards
from vpo.rewards.hooks import AnswerLogExtra, hooks_per_answer

ROOMS = Path(rewards.__file__).parent

EARLIER_PUBLIC_NAMES = (
    "CHAIN_RULE", "CHAIN_TAG", "COLLINEAR_EFFECTIVE_DIM", "SCALINGS", "TRL_CHAIN_LEVEL", "TRL_HOOKS", "ChainRewards",
    "CollinearObjectivesWarning", "LengthBudget", "RewardScaleWarning", "ScoredAnswers", "at_answers",
    "cached_reward_model", "call_reward_funcs", "chain_level", "check_arguments", "check_columns", "check_scaling",
    "completion_form", "is_reward_model", "load_reward_model", "completion_text", "effective_dimension",
    "finish_chains", "function_name", "group_keys", "is_chain_level", "length_budget", "load_reward_funcs",
    "objective_diagnostics", "objective_names", "prompt_key", "rewrite_chain_prompt", "score_chains",
    "score_every_answer", "score_with_model", "single_answer", "score_answers",
)
"""What ``vpo.rewards`` exported as one module (its ``__all__`` and the deprecated ``score_answers``)."""


@pytest.mark.parametrize("path", sorted(ROOMS.glob("*.py")), ids=lambda p: p.name)
def test_no_room_of_the_package_is_over_400_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 400, f"{path.name} has {lines} lines"


@pytest.mark.parametrize("name", EARLIER_PUBLIC_NAMES)
def test_every_earlier_public_name_imports_from_vpo_rewards(name):
    namespace: dict = {}
    exec(f"from vpo.rewards import {name}", namespace)
    assert namespace[name] is not None


def test_the_package_face_exports_each_room_s_own_object():
    for name in rewards.__all__:
        value = getattr(rewards, name)
        home = getattr(value, "__module__", None)
        if home and home.startswith("vpo.rewards."):  # defined in a room: the same object there
            assert getattr(importlib.import_module(home), name) is value


@pytest.mark.parametrize("old,new", sorted(rewards.RENAMED.items()))
def test_renamed_functions_warn_with_a_date_and_do_what_the_new_name_does(old, new):
    assert new in rewards.__all__ and old not in rewards.__all__
    earlier = getattr(rewards, old)
    args = {
        "group_keys": ((["a", "b"], {"example_id": [7, " "]}), ["7", "b"]),  # a blank id is no key: the prompt
        "objective_names": (([len, np.mean], ["size", None]), ("size", "mean")),
        "score_answers": (([lambda completions, **_: [0.25] * len(completions)], ["p"], ["x"], 1), None),
    }[old]
    with pytest.warns(DeprecationWarning, match=rf"vpo.rewards.{old} is deprecated since 2026-11-28 .*"
                                                rf"vpo.rewards.{new}$"):
        got = earlier(*args[0], **({"tag": None} if old == "score_answers" else {}))
    if old == "score_answers":
        np.testing.assert_array_equal(got.values, [[0.25]])
    else:
        assert got == args[1]


def test_environments_are_among_trl_s_hooks():
    assert "environments" in rewards.TRL_HOOKS


def test_hooks_per_answer_give_each_answer_its_completion_s_environment_and_group_logs_per_completion():
    logged = []
    state = object()
    owners = np.array([0, 0, 2])  # completion 1 has no answer
    per_answer, extra = hooks_per_answer({"environments": ["e0", "e1", "e2"], "trainer_state": state,
                                          "log_extra": lambda column, values: logged.append((column, values))},
                                         owners, 3)
    assert per_answer["environments"] == ["e0", "e0", "e2"]
    assert per_answer["trainer_state"] is state
    assert isinstance(extra, AnswerLogExtra) and per_answer["log_extra"] is extra
    extra("judge", ["a", "b", "c"])   # one value per answer: grouped per completion
    extra("note", ["once"])           # anything else: passed on as it is
    extra.flush()
    assert logged == [("judge", [["a", "b"], [], ["c"]]), ("note", ["once"])]


def test_hooks_per_answer_pass_on_what_is_not_one_per_completion_and_keep_logs_ungrouped_when_asked():
    log = []
    per_answer, extra = hooks_per_answer({"environments": ["only-one"], "log_extra": log.append}, np.array([0, 1]),
                                         2, group_logs=False)
    assert per_answer == {"environments": ["only-one"], "log_extra": log.append}
    assert extra is None
    assert hooks_per_answer(None, np.zeros(0, dtype=np.int64), 0) == ({}, None)

"""vpo.reward_guard: a user's reward code behind one guard. A module that does not import is one line
naming the file and line of its error; a missing name lists what the module defines; an output that
is not one number (or None) per completion is named with what came back; a column the data lacks is
named before any call; a failed call takes the objective's worst value after scaling; a chain-level
length budget is one answer's, scaled by m."""

from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest

from vpo.reward_failures import FAILED_CALL, RewardContractError, RewardFailurePolicy, RewardFailures
from vpo.reward_guard import (TRL_HOOKS, at_answers, check_columns, checked_rewards, length_budget,
                              load_reward_funcs)
from vpo.rewards import RewardScaleWarning, chain_level, score_chains, score_every_answer


def chain(*answers):
    return "".join(f"<response_{i}>{a}</response_{i}>" for i, a in enumerate(answers, 1))


# ------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------
BROKEN_MODULES = {
    "syntax": ("def brevity(completions, **kwargs):\n    return [1.0 for c in completions\n", 2, "SyntaxError"),
    "dependency": ("import os\nimport not_a_real_package_xyz\n\ndef brevity(completions, **kwargs):\n"
                   "    return [1.0] * len(completions)\n", 2, "ModuleNotFoundError: No module named "
                                                                "'not_a_real_package_xyz'"),
    "raises": ("X = 1\nY = {}['missing key']\n\ndef brevity(completions, **kwargs):\n    return []\n", 2,
               "KeyError: 'missing key'"),
    "exits": ("import sys\nsys.exit('no API key')\n", 2, "SystemExit: no API key"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_MODULES))
def test_a_file_that_does_not_import_is_one_line_naming_its_file_and_line(kind, tmp_path):
    source, line, error = BROKEN_MODULES[kind]
    path = tmp_path / f"{kind}_rewards.py"
    path.write_text(source)
    with pytest.raises(ValueError) as caught:
        load_reward_funcs(f"{path}:brevity")
    message = str(caught.value)
    assert "\n" not in message
    assert f"{path}, line {line}" in message and error in message, message
    assert message.startswith(f"reward function '{path}:brevity': {path} does not import")
    assert f"vpo_user_rewards.{kind}_rewards" not in sys.modules  # a half-imported module is not left behind


def test_a_module_on_the_path_that_raises_in_a_library_names_both_lines(tmp_path, monkeypatch):
    (tmp_path / "helper_lib.py").write_text("def load():\n    raise RuntimeError('model file missing')\n")
    (tmp_path / "dotted_rewards.py").write_text("import helper_lib\n\nMODEL = helper_lib.load()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as caught:
        load_reward_funcs("dotted_rewards:brevity")
    message = str(caught.value)
    assert f"{tmp_path / 'dotted_rewards.py'}, line 3 (raised in {tmp_path / 'helper_lib.py'}, line 2)" in message
    assert "RuntimeError: model file missing" in message and "\n" not in message
    # a module that does not exist at all is still named as such
    with pytest.raises(ValueError, match=r"cannot import 'no_such_module_xyz'"):
        load_reward_funcs("no_such_module_xyz:f")


def test_a_missing_name_lists_what_the_module_defines(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text("from trl.rewards import think_format_reward\nfrom trl.rewards import get_soft_overlong_punishment"
                    "\n\nLIMIT = 3\n\ndef brevity(completions, **kwargs):\n    return [1.0] * len(completions)\n\n"
                    "def _helper():\n    pass\n\novershoot = get_soft_overlong_punishment(10, 2)\n")
    with pytest.raises(ValueError) as caught:
        load_reward_funcs(f"{path}:brevty")
    assert str(caught.value) == (f"reward function '{path}:brevty': '{path}' has no callable 'brevty'; it defines "
                                 "brevity, overshoot")
    with pytest.raises(ValueError, match="has 'LIMIT' as a int, not a function; it defines brevity, overshoot"):
        load_reward_funcs(f"{path}:LIMIT")


# ------------------------------------------------------------------------------------------------
# outputs
# ------------------------------------------------------------------------------------------------
def _generator(n):
    return (1.0 for _ in range(n))


BAD_OUTPUTS = [
    (lambda n: ["high"] * n, r"returned \['high', 'high'\]: completion 0 got 'high', a str; expected 2 numbers"),
    (lambda n: [1.0] * (n + 1), r"returned 3 rewards for 2 answers; expected a list of 2 numbers"),
    (lambda n: [[1.0, 0.0]] * n, r"returned \[\[1.0, 0.0\], \[1.0, 0.0\]\]: completion 0 got \[1.0, 0.0\], a list "
                                 r"\(a vector: a function that gives several objectives declares them"),
    (lambda n: {"score": [1.0] * n}, r"returned a dict with keys \['score'\]; expected a list of 2 numbers"),
    (_generator, r"returned a generator \(return a list\); expected a list of 2 numbers"),
    (lambda n: 0.5, r"returned 0.5, a float; expected a list of 2 numbers"),
    (lambda n: None, r"returned None, a NoneType"),
    (lambda n: "0.5 0.5", r"returned '0.5 0.5', a str"),
]


@pytest.mark.parametrize("make,message", BAD_OUTPUTS)
def test_an_output_that_is_not_one_number_per_completion_is_named_on_the_first_call(make, message):
    calls = []

    def grade(completions, **kwargs):
        calls.append(len(completions))
        return make(len(completions))

    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))
    for policy in (None, failures):  # raised as it is, with or without the failure policy
        with pytest.raises(RewardContractError, match=r"reward function 'grade' " + message):
            score_chains([grade], ["p"], [chain("a", "b")], answers=2, failures=policy)
    assert calls == [2, 2]  # named on the first call, never retried answer by answer
    assert failures.totals()["failed"] == 0


def test_a_tensor_on_another_device_is_named_and_one_on_the_cpu_is_read():
    torch = pytest.importorskip("torch")
    with pytest.raises(RewardContractError, match=r"'judge' returned a tensor on meta; expected a list of 2 numbers.*"
                                                  r"\.tolist\(\)"):
        checked_rewards(torch.zeros(2, device="meta"), 2, "judge")
    with pytest.raises(RewardContractError, match=r"completion 1 got tensor\(.*, a Tensor"):
        checked_rewards([0.5, torch.zeros((), device="meta")], 2, "judge")
    np.testing.assert_array_equal(checked_rewards(torch.tensor([0.5, 1.0]), 2, "judge"), [0.5, 1.0])
    np.testing.assert_array_equal(checked_rewards([torch.tensor(0.25), np.float32(1), True, None], 4, "judge"),
                                  [0.25, 1.0, 1.0, np.nan])
    np.testing.assert_array_equal(checked_rewards([[1, None], None], 2, "pair", width=2),
                                  [[1.0, np.nan], [np.nan, np.nan]])
    with pytest.raises(RewardContractError, match=r"completion 0 got 1.0, a float; expected 1 vector of 2 numbers"):
        checked_rewards([1.0], 1, "pair", width=2)


# ------------------------------------------------------------------------------------------------
# columns, before any call
# ------------------------------------------------------------------------------------------------
def test_a_column_the_data_lacks_is_named_before_any_call():
    def accuracy(completions, solution, **kwargs):
        return [1.0] * len(completions)

    def staged(completions, trainer_state, **kwargs):
        return [1.0] * len(completions)

    with pytest.raises(RewardContractError, match=r"'accuracy' needs the dataset column 'solution', which the data "
                                                  r"does not have \(its columns: keyword\)"):
        check_columns([accuracy], [{"keyword": "a"}, {"keyword": "b"}])
    with pytest.raises(RewardContractError, match=r"'accuracy' needs the dataset column 'solution', which row 1 of "
                                                  r"prompts.jsonl lacks \(every row needs it\)"):
        check_columns([accuracy], [{"solution": "4"}, {"keyword": "b"}], where="prompts.jsonl")
    check_columns([accuracy], [{"solution": "4"}])
    check_columns([accuracy], ["prompt", "solution"])  # a dataset's column names
    with pytest.raises(RewardContractError, match="'staged' needs 'trainer_state', which only a trainer passes"):
        check_columns([staged], ["prompt"])
    check_columns([staged], ["prompt"], trainer=True)
    assert "environments" in TRL_HOOKS  # TRL 1.16 passes environment instances to reward functions


def test_environments_reach_each_answer_with_its_completion_and_a_chain_level_function_as_they_are():
    seen = {}

    def per_answer(completions, environments, **kwargs):
        seen["answers"] = (list(completions), list(environments))
        return [1.0] * len(completions)

    @chain_level
    def whole(completions, environments, **kwargs):
        seen["chains"] = list(environments)
        return [1.0] * len(completions)

    envs = ["env-a", "env-b"]
    score_every_answer([per_answer, whole], ["p", "q"], [chain("x", "y"), chain("z")], 2, hooks={"environments": envs})
    assert seen["answers"] == (["x", "y", "z"], ["env-a", "env-a", "env-b"])
    assert seen["chains"] == envs


# ------------------------------------------------------------------------------------------------
# a failed call is never better than a real one
# ------------------------------------------------------------------------------------------------
def flaky(completions, **kwargs):
    """A penalty-like score in [-1, 0]: raises on answers holding "boom"."""
    if any("boom" in c for c in completions):
        raise ConnectionError("judge down")
    return [-0.5 if c == "mid" else -1.0 if c == "bad" else 0.0 for c in completions]


@pytest.mark.parametrize("scaling,expected", [
    ((-1.0, 0.0), {"good": 1.0, "mid": 0.5, "bad": 0.0, "boom": 0.0}),       # the low end of the range
    ("sigmoid", {"good": 0.5, "mid": 1 / (1 + math.e ** 0.5), "bad": 1 / (1 + math.e), "boom": 0.0}),
    ("minmax", {"good": 1.0, "mid": 0.5, "bad": 0.0, "boom": 0.0}),            # and the range is the real values'
    ("none", {"good": 0.0, "mid": -0.5, "bad": -1.0, "boom": -1.0}),           # the batch's lowest real value
])
def test_a_failed_call_takes_the_objectives_worst_value_after_scaling(scaling, expected):
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))
    answers = ["good", "mid", "bad", "boom"]
    with pytest.warns(RewardScaleWarning) if scaling == "none" else warnings.catch_warnings():
        warnings.simplefilter("always" if scaling == "none" else "error")
        scored = score_chains([flaky], ["p"] * 4, answers, answers=1, scaling=scaling, failures=failures)
    got = {a: float(m[0, 0]) for a, m in zip(answers, scored.matrices, strict=True)}
    assert got == pytest.approx(expected)
    assert got["boom"] <= min(v for a, v in got.items() if a != "boom")   # never better than a real call
    assert failures.totals()["failed"] == 1                                  # counted as before


def test_a_failed_call_in_zero_to_one_is_zero_and_a_reward_models_nan_too():
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))

    def rate(completions, **kwargs):
        return [math.nan if c == "n" else 0.75 for c in completions]

    scored = score_chains([rate], ["p"], [chain("a", "n")], answers=2, failures=failures)
    np.testing.assert_allclose(scored.matrices[0], [[0.75], [0.0]])
    cleaned = failures.clean_model_scores("rm", np.array([[1.0], [np.inf]]), FAILED_CALL)
    assert cleaned[1, 0] == FAILED_CALL


# ------------------------------------------------------------------------------------------------
# length budgets that mean the same at every m
# ------------------------------------------------------------------------------------------------
def test_a_chain_level_overlong_reward_at_three_answers_gives_a_chain_of_three_single_length_answers_the_value_of_one():
    pytest.importorskip("trl")
    from trl.rewards import get_soft_overlong_punishment

    overlong = get_soft_overlong_punishment(max_completion_len=40, soft_punish_cache=20)
    scaling = {"soft_overlong_punishment_reward": (-1.0, 0.0)}
    for length in (10, 30, 35, 45):  # under the cache, inside it twice, past the budget
        one = score_chains([overlong], ["p"], ["an answer"], answers=1, completion_ids=[[7] * length],
                           scaling=scaling)
        three = score_chains([overlong], ["p"], [chain("a1", "a2", "a3")], answers=3,
                             completion_ids=[[7] * (3 * length)], scaling=scaling)
        assert three.matrices[0][0, 0] == pytest.approx(one.matrices[0][0, 0]), length
        np.testing.assert_allclose(three.matrices[0][:, 0], one.matrices[0][0, 0])  # every row of the chain
    assert one.matrices[0][0, 0] == 0.0 and three.matrices[0][0, 0] == 0.0  # 45 > 40 tokens: the worst
    funcs, notes = at_answers([overlong], 3)
    assert (funcs[0].max_completion_len, funcs[0].soft_punish_cache) == (120, 60) and type(funcs[0]) is type(overlong)
    assert (overlong.max_completion_len, overlong.soft_punish_cache) == (40, 20)  # the user's object is untouched
    assert notes == ["soft_overlong_punishment_reward: a chain of 3 answers is judged against 3 x one answer's length "
                     "budget (max_completion_len 40 -> 120, soft_punish_cache 20 -> 60)"]
    assert at_answers(funcs, 3) == (funcs, [])  # built for 3: never scaled twice
    with pytest.raises(ValueError, match="scaled for chains of 3 answers"):
        at_answers(funcs, 2)
    assert at_answers([overlong], 1) == ([overlong], [])
    overlong.chain_level = False  # declared answer-level: each answer has its own budget, nothing to scale
    assert at_answers([overlong], 3) == ([overlong], [])


def test_a_length_budget_of_your_own_and_a_changed_trl_fail_or_scale_in_one_line():
    def make_brevity(max_chars):
        def brevity(completions, **kwargs):
            return [max(0.0, 1 - len(c) / max_chars) for c in completions]
        return brevity

    declared = length_budget(make_brevity, max_chars=10)
    assert declared.__name__ == "brevity" and declared(["abcde"]) == [0.5]   # as the stock GRPOTrainer calls it
    one = score_chains([declared], ["p"], ["abcde"], answers=1)
    three = score_chains([declared], ["p"], [chain("abcde", "fghij", "klmno")], answers=3)
    whole = len(chain("abcde", "fghij", "klmno"))
    assert three.matrices[0][0, 0] == pytest.approx(max(0.0, 1 - whole / 30))   # judged against 3 x 10 characters
    assert one.matrices[0][0, 0] == pytest.approx(0.5)
    _, notes = at_answers([declared], 3)
    assert notes == ["brevity: a chain of 3 answers is judged against 3 x one answer's length budget (max_chars 10 "
                     "-> 30)"]
    with pytest.raises(ValueError, match="budget's keyword arguments"):
        length_budget(make_brevity)

    class Changed:  # a TRL release whose overlong punishment keeps its budget elsewhere
        __module__ = "trl.rewards.other_rewards"
        __name__ = "soft_overlong_punishment_reward"

        def __call__(self, completion_ids, **kwargs):
            return [0.0] * len(completion_ids)

    with pytest.raises(ValueError) as caught:
        at_answers([Changed()], 3)
    assert "keeps no max_completion_len and soft_punish_cache" in str(caught.value)
    assert "length_budget(get_soft_overlong_punishment" in str(caught.value) and "\n" not in str(caught.value)

"""``vpo.reward_failures`` on its own (no engine): sync, async and multi-head functions, None is not
a failure, the per-thread count, the window check, and the own_rewards task under the policy."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time

import numpy as np
import pytest

from timed_checks import HANG_S, within_limit
from vpo.reward_failures import RewardFailureError, RewardFailurePolicy, RewardFailures
from vpo.rewards import score_chains


def picky(completions, **kwargs):
    """Raises on "x", NaN on "n", inf on "i", None on "-", else 1."""
    if any("x" in c for c in completions):
        raise ZeroDivisionError("x")
    return [math.nan if c == "n" else math.inf if c == "i" else None if c == "-" else 1.0 for c in completions]


def test_sync_failures_score_zero_none_passes_and_counts():
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))
    out = failures.guard(picky, "picky")(prompts=["p"] * 5, completions=["a", "x", "n", "i", "-"])
    assert out == [1.0, 0.0, 0.0, 0.0, None]
    assert failures.end_step() == {"vpo/reward_failures": 3.0, "vpo/reward_failures/picky": 3.0}
    assert failures.end_step() == {"vpo/reward_failures": 0.0, "vpo/reward_failures/picky": 0.0}  # a fresh step


def test_async_and_multi_head_functions():
    async def slow_async(completions, **kwargs):
        if "z" in completions:
            await asyncio.sleep(HANG_S)
        return [[1.0, math.nan] if c == "n" else [0.5, 0.5] for c in completions]

    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0, time_limit=0.2))
    guarded = failures.guard(slow_async, "pair", width=2)
    assert asyncio.iscoroutinefunction(guarded)  # TRL runs it with its async functions
    start = time.monotonic()
    out = asyncio.run(guarded(prompts=["p"] * 3, completions=["a", "z", "n"]))
    within_limit(time.monotonic() - start, 0.2)  # cancelled at the limit, not after HANG_S
    assert out == [[0.5, 0.5], [0.0, 0.0], [1.0, 0.0]]
    assert failures.end_step()["vpo/reward_failures/pair"] == 2


def test_threshold_message_and_window():
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=0.5, window=4))
    guarded = failures.guard(picky, "picky")
    guarded(prompts=["p"] * 2, completions=["x", "a"])
    failures.tick()  # 2 calls: the window is not full
    guarded(prompts=["p"] * 2, completions=["n", "x"])
    with pytest.raises(RewardFailureError, match=r"3 of 4 reward calls .* 'picky' \(3\).*max_failure_rate=0.5"):
        failures.tick()
    failures.tick(step=1)
    guarded(prompts=["p"], completions=["x"])
    with pytest.raises(RewardFailureError):
        failures.tick(step=2)  # a new step closes the last one


def test_per_thread_count_and_traceback_once(caplog):
    caplog.set_level(logging.WARNING, logger="vpo.rewards")
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))
    guarded = failures.guard(picky, "picky")
    counts = {}

    def rollout(name, completions):
        mine = failures.track()
        guarded(prompts=["p"] * len(completions), completions=completions)
        counts[name] = dict(mine)

    threads = [threading.Thread(target=rollout, args=(i, ["x"] * i + ["a"])) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts == {i: {"picky": i} for i in range(4)}
    assert sum("ZeroDivisionError" in r.getMessage() for r in caplog.records) == 1


def test_time_limit_abandons_a_hanging_call():
    release = threading.Event()

    def hangs(completions, **kwargs):
        if "h" in completions:
            release.wait(HANG_S)
        return [1.0] * len(completions)

    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0, time_limit=0.2))
    start = time.monotonic()
    out = failures.guard(hangs, "hangs")(prompts=["p"] * 4, completions=["a", "h", "b", "h"])
    within_limit(time.monotonic() - start, 2 * 0.2)  # the batch call, then its answers at once: about 2 limits
    release.set()
    assert out == [1.0, 0.0, 1.0, 0.0]


def test_score_chains_and_own_rewards_task_under_the_policy():
    from vpo.tasks.own_rewards import OwnRewardsTask

    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=1.0))
    chains = ["<response_1>a</response_1><response_2>x</response_2>", "<response_1>-</response_1>"]
    with pytest.raises(ZeroDivisionError):  # no policy: the function's error is the caller's
        score_chains([picky], ["q", "q"], chains, answers=2)
    result = score_chains([picky], ["q", "q"], chains, answers=2, failures=failures)
    np.testing.assert_array_equal(result.matrices[0], [[1.0], [0.0]])
    assert failures.end_step()["vpo/reward_failures/picky"] == 1
    task = OwnRewardsTask([picky], max_failure_rate=0.9, time_limit=5)
    example = {"prompt": "q"}
    np.testing.assert_array_equal(task.score_chain("<response_1>x</response_1><response_2>a</response_2>",
                                                   example, 2), [[0.0], [1.0]])
    assert task.failures.end_step()["vpo/reward_failures"] == 1
    with pytest.raises(ValueError, match="max_failure_rate"):
        OwnRewardsTask([picky], max_failure_rate=-0.1)
    with pytest.raises(ValueError, match="window"):
        RewardFailurePolicy(window=0)


def test_a_broken_contract_is_raised_not_scored():
    from vpo.reward_failures import RewardContractError

    def short(completions, **kwargs):
        return [1.0]

    guarded = RewardFailures(RewardFailurePolicy(time_limit=1.0)).guard(short, "short")
    with pytest.raises(RewardContractError, match="returned 1 rewards for 2 answers"):
        guarded(prompts=["p"] * 2, completions=["a", "b"])


def test_cli_flags_reach_the_policy_and_stop_with_a_message(tmp_path, capsys):
    import json

    from vpo.cli import main

    samples = tmp_path / "samples.jsonl"
    chains = ("<response_1>x</response_1><response_2>a</response_2>",
              "<response_1>n</response_1><response_2>-</response_2>")
    samples.write_text("".join(json.dumps({"prompt": "p", "completion": c}) + "\n" for c in chains))
    base = ["rewards", "check", "--reward-funcs", "test_reward_failures:picky", "--source", str(samples),
            "--answers", "2"]
    # 2 of 4 calls fail: not more than 0.5, so training would go on, but the check fails on any failure
    assert main([*base, "--out", str(tmp_path / "ok")]) == 1
    report = json.loads((tmp_path / "ok" / "metrics.json").read_text())
    assert report["reward_failures"]["failed"] == 2 and report["reward_failures"]["calls"] == 4
    assert report["reward_failures"]["by_function"]["picky"]["failed"] == 2 and report["failed_functions"] == ["picky"]
    assert report["matrices"][0] == [[0.0], [1.0]]
    capsys.readouterr()
    assert main([*base, "--max-failure-rate", "0.25"]) == 1
    err = capsys.readouterr().err.strip()
    assert "2 of 4 reward calls failed" in err and "'picky'" in err and "max_failure_rate=0.25" in err
    assert len(err.splitlines()) == 1
    assert main([*base, "--reward-time-limit", "0"]) == 2
    assert "--reward-time-limit must be" in capsys.readouterr().err



def test_own_task_params_record_the_policy():
    from vpo.commands.rewards import RewardFuncsOptions, own_task_params

    assert own_task_params(RewardFuncsOptions(reward_funcs="m:f")) == {"reward_funcs": "m:f"}
    params = own_task_params(RewardFuncsOptions(reward_funcs="m:f", max_failure_rate=0.1, reward_time_limit=3.0))
    assert params == {"reward_funcs": "m:f", "max_failure_rate": 0.1, "time_limit": 3.0}


def test_a_task_under_the_policy_pickles_for_workers():
    import pickle

    from vpo.tasks.own_rewards import OwnRewardsTask

    task = OwnRewardsTask([picky], max_failure_rate=0.9, time_limit=5)
    copy = pickle.loads(pickle.dumps(task))
    assert copy.failures.policy == task.failures.policy
    # one call that scores (a function failing its every call of a first step is a setup fault), one that fails
    np.testing.assert_array_equal(copy.score_chain("<response_1>a</response_1>", {"prompt": "q"}, 1), [[1.0]])
    np.testing.assert_array_equal(copy.score_chain("<response_1>x</response_1>", {"prompt": "q"}, 1), [[0.0]])
    assert copy.failures.end_step()["vpo/reward_failures/picky"] == 1


def test_the_rate_is_per_function_and_a_function_failing_every_first_call_is_a_setup_fault():
    def ok(completions, **kwargs):
        return [1.0] * len(completions)

    def bad(completions, **kwargs):
        raise KeyError("solution")

    def guarded(policy):
        failures = RewardFailures(policy)
        return failures, [failures.guard(f, f.__name__) for f in (ok, picky)] + [failures.guard(bad, "bad")]

    # 3 of 15 calls fail (20%), but they are 3 of picky's 5 (60%): past 0.5 for that function
    failures, (f_ok, f_picky, _) = guarded(RewardFailurePolicy(max_failure_rate=0.5))
    answers = ["a", "x", "n", "i", "b"]
    for f in (f_ok, f_picky, f_ok):
        f(prompts=["p"] * 5, completions=answers)
    with pytest.raises(RewardFailureError, match=r"3 of 15 reward calls failed in one step \(20%\), most in 'picky' "
                                                 r"\(3\), 60% of its 5 calls: more than max_failure_rate=0.5"):
        failures.end_step()
    # one function of three fails every call of its first step: a setup fault, named with its first error
    failures, (f_ok, f_picky, f_bad) = guarded(RewardFailurePolicy(max_failure_rate=0.9))
    for f in (f_ok, f_ok, f_bad):
        f(prompts=["p"] * 2, completions=["a", "b"])
    with pytest.raises(RewardFailureError, match=r"'bad' failed on every one of its 2 calls in its first step: a "
                                                 r"setup fault.*KeyError: 'solution'.*a dataset column"):
        failures.end_step()
    # later steps are judged by the rate alone; 1.0 never stops
    failures, (f_ok, f_picky, f_bad) = guarded(RewardFailurePolicy(max_failure_rate=1.0))
    f_bad(prompts=["p"], completions=["a"])
    assert failures.end_step()["vpo/reward_failures/bad"] == 1.0

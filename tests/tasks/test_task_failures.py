"""The reward failure policy for a task's own scorers, in every engine: a scorer that raises,
returns NaN or hangs on chosen answers (a bug: tasks promise never to raise on model text),
math-verify with no verdict in time, a sandbox that cannot run a program, and a reward model that
scores NaN. Each such answer scores 0, is counted in ``vpo/reward_failures`` and logged once per
kind; past ``max_failure_rate`` the run stops naming the scorer, the count and the option."""

from __future__ import annotations

import json
import logging
import math
import string
import threading
import time

import numpy as np
import pytest

from timed_checks import HANG_S, within_limit
from toy_tasks import LetterTask, RatesTask
from vpo.chains import RewriteRule
from vpo.reward_failures import FAILED_CALL, RewardFailureError, RewardFailurePolicy, RewardFailures
from vpo.tasks import register_task

SLEEP_S = HANG_S
RELEASE = threading.Event()
"""Ends a "slow" answer's hang (set by the test once it has its result)."""
NEVER_STOP = RewardFailurePolicy(max_failure_rate=1.0)


class BuggyAB(RatesTask):
    """The fractions of 'a' and 'b' in an answer, by a scorer that raises on "boom" and on every
    answer to an example with ``fails`` set, returns NaN (for 'a') on "nan" and hangs on "slow"
    (``SLEEP_S``, or until ``RELEASE``)."""

    name = "toy_buggy"  # not registered: the contract test runs over every registered task
    rewrite_rule = RewriteRule("toy_buggy", template=":{m}:", pattern=":")

    def score(self, text, example):
        s = text.strip()
        if "boom" in s or example.get("fails"):
            raise KeyError(f"no rule for {s!r}")
        if "slow" in s:
            RELEASE.wait(SLEEP_S)
        vector = super().score(text, example)
        return np.array([math.nan, vector[1]]) if "nan" in s else vector

    def examples(self, split="train", n=None, *, seed=None, source=None):
        return [{"id": i, "fails": i % 2 == 0} for i in range(n or 4)]


def messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "vpo.rewards"]


def test_failed_answers_score_zero_are_counted_and_each_kind_is_logged_once(caplog):
    caplog.set_level(logging.WARNING, logger="vpo.rewards")
    task = BuggyAB()
    task.failures = task.failures.with_policy(NEVER_STOP)
    ok = {"id": 1, "fails": False}
    matrix = task.score_chain("ab|boom a|nan b", ok, 3)
    # the batch raised: scored again answer by answer, only "boom a" fails; NaN is 0 on its objective
    np.testing.assert_array_equal(matrix, [[0.5, 0.5], [0.0, 0.0], [0.0, 0.2]])
    assert task.failures.end_step() == {"vpo/reward_failures": 2.0, "vpo/reward_failures/toy_buggy": 2.0}
    task.score_chain("boom|nan", ok, 2)
    assert task.failures.end_step()["vpo/reward_failures"] == 2.0
    logged = messages(caplog)
    for kind in ("KeyError", "NonFiniteReward"):
        assert len([m for m in logged if f"'toy_buggy' failed ({kind})" in m]) == 1, logged
    assert "no rule for 'boom a'" in next(m for m in logged if "(KeyError)" in m)
    assert task.failures.totals() == {"calls": 5, "failed": 4, "by_function": {"toy_buggy": 4}}


def test_a_scorer_past_the_time_limit_fails_its_call_and_the_rate_stops_the_run():
    task = BuggyAB()
    task.failures = task.failures.with_policy(RewardFailurePolicy(time_limit=0.3, max_failure_rate=0.4))
    RELEASE.clear()
    began = time.monotonic()
    matrix = task.score_chain("slow a|ab", {"id": 1, "fails": False}, 2)
    hanging = not RELEASE.is_set() and any(t.name == "vpo-reward-call" and t.is_alive() for t in threading.enumerate())
    assert time.monotonic() - began < SLEEP_S and hanging  # abandoned at the limit, not waited for
    within_limit(time.monotonic() - began, 0.3)
    RELEASE.set()
    np.testing.assert_array_equal(matrix, np.zeros((2, 2)))  # the call's answers all fail
    with pytest.raises(RewardFailureError, match=r"2 of 2 reward calls failed .*'toy_buggy' \(2\).*"
                                                 r"max_failure_rate=0.4"):
        task.failures.end_step()
    task.score_chain("ab|ba", {"id": 1, "fails": False}, 2)
    assert task.failures.end_step()["vpo/reward_failures"] == 0.0  # a fresh step


def test_a_wrong_shape_is_the_tasks_own_bug_and_raises():
    from vpo.reward_failures import RewardContractError

    class Flat(BuggyAB):
        def score_batch(self, answers, example):
            return np.zeros(len(answers))

    with pytest.raises(RewardContractError, match="score_batch returned shape"):
        Flat().score_chain("a|b", {"id": 1}, 2)


def test_math_verify_without_a_verdict_is_a_failed_call():
    pytest.importorskip("math_verify")
    from vpo.tasks import get_task

    task = get_task("math", timeout=0.3, workers=1)
    task.failures = task.failures.with_policy(NEVER_STOP)
    example = task.validate({"id": "q", "question": "Compute 1/2.", "answer": "\\frac{1}{2}"}, 0)
    assert task.score_chain("so \\boxed{\\frac{2}{4}}", example, 1)[0, 0] == 1.0
    assert task.failures.end_step()["vpo/reward_failures"] == 0.0
    assert task.score_chain("so \\boxed{9^{9^{9}}}", example, 1)[0, 0] == 0.0  # runs for minutes: killed
    assert task.failures.end_step() == {"vpo/reward_failures": 1.0, "vpo/reward_failures/math": 1.0}


def test_a_sandbox_that_cannot_run_a_program_is_a_failed_call_and_a_wrong_program_is_not(monkeypatch):
    from vpo.sandbox import Verdict
    from vpo.tasks import code as code_module
    from vpo.tasks import get_task

    task = get_task("code", timeout=2.0, max_tests=2)
    task.failures = task.failures.with_policy(NEVER_STOP)
    example = next(p for p in task.examples("test", source="fixtures") if p["id"] == "fx_sum")
    wrong = "```python\nprint(0)\n```"
    assert task.score_chain(wrong, example, 1).sum() == 0.0  # a real sandbox run: a verdict, not a failure
    assert task.failures.end_step()["vpo/reward_failures"] == 0.0

    def no_sandbox(jobs, workers=None):
        return [[Verdict("error", detail="sandbox failed to start: no /tmp", sandbox_fault=True)] * len(job.tests)
                for job in jobs]

    monkeypatch.setattr(code_module, "run_batch", no_sandbox)
    assert task.score_chain(wrong, example, 1).sum() == 0.0
    assert task.failures.end_step() == {"vpo/reward_failures": 1.0, "vpo/reward_failures/code": 1.0}


def test_a_reward_model_that_scores_nan_fails_those_answers():
    pytest.importorskip("transformers")
    import torch
    from test_rewards import ALPHABET, build_reward_model

    from vpo.models import build_char_tokenizer
    from vpo.rewards import call_reward_funcs, function_name

    tok = build_char_tokenizer(ALPHABET, padding_side="right")
    model = build_reward_model(tok, 1, 0)
    with torch.no_grad():
        model.score.weight.fill_(math.nan)
    name = function_name(model)
    failures = RewardFailures(NEVER_STOP, names=[name])
    (out,) = call_reward_funcs([model], ["pq", "pq"], ["ab", "xyz"], reward_processing_classes=[tok],
                               failures=failures)
    np.testing.assert_array_equal(out, [FAILED_CALL, FAILED_CALL])  # the objective's worst value once scaled: 0
    assert failures.end_step() == {"vpo/reward_failures": 2.0, f"vpo/reward_failures/{name}": 2.0}


# ----- engines --------------------------------------------------------------------------------

def test_vpo_trainer_logs_a_tasks_failures_per_step_and_stops_past_the_rate(tmp_path):
    pytest.importorskip("trl")
    from test_trl_integration import ALPHABET, make_config, make_dataset

    from vpo.integrations.trl import VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer(ALPHABET)
    task = BuggyAB()
    ds = make_dataset(task, 1, 2)  # prompts 0 (every answer fails) and 1
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), task=task, answers=1, args=make_config(tmp_path, max_steps=2),
                         train_dataset=ds, processing_class=tok)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "vpo/reward_failures" in h]
    assert len(logs) == 2
    for h in logs:  # 8 completions a step, 4 of them to prompt 0: half fail, not more than 0.5
        assert h["vpo/reward_failures"] == h["vpo/reward_failures/toy_buggy"] == 4.0

    strict = VPOTrainer(build_tiny_qwen2(tok, seed=0), task=BuggyAB(), answers=1,
                        args=make_config(tmp_path / "strict"), train_dataset=ds, processing_class=tok,
                        reward_failures=RewardFailurePolicy(max_failure_rate=0.25))
    with pytest.raises(RewardFailureError, match=r"4 of 8 reward calls failed .*'toy_buggy'.*max_failure_rate=0.25"):
        strict.train()


@pytest.fixture
def buggy_maze(monkeypatch):
    """The maze scorer with a bug: it raises on the route LEFT x4 and scores NaN on UP x4."""
    from vpo.tasks.maze.task import MazeTask

    original = MazeTask.score

    def score(self, text, example):
        if "LEFT LEFT LEFT LEFT" in text:
            raise ZeroDivisionError("a bug in the scorer")
        if "UP UP UP UP" in text:
            return np.full(4, math.nan)
        return original(self, text, example)

    monkeypatch.setattr(MazeTask, "score", score)


def test_verl_compute_score_counts_a_tasks_failures_per_rollout_and_stops_past_the_rate(buggy_maze):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from test_verl_integration import K, SEED, compose_verl, maze_row, routes, run_naive
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from vpo.integrations.verl import group_weights
    from vpo.models import build_char_tokenizer
    from vpo.objective import set_scores
    from vpo.tasks import get_task

    def manager(**policy):
        config = compose_verl(["algorithm.adv_estimator=vpo",
                               "reward.custom_reward_function.path=pkg://vpo.integrations.verl",
                               "reward.custom_reward_function.name=compute_score",
                               f"+reward.custom_reward_function.reward_kwargs.num_weights={K}",
                               f"+reward.custom_reward_function.reward_kwargs.seed={SEED}"]
                              + [f"+reward.custom_reward_function.reward_kwargs.{k}={v}" for k, v in policy.items()])
        return (get_reward_manager_cls("naive")(OmegaConf.create({}), build_char_tokenizer(string.printable),
                                                get_custom_reward_fn(config)), build_char_tokenizer(string.printable))

    task = get_task("maze", size=5)
    ex = task.examples("train", 1, seed=7)[0]
    gold = routes(ex)["gold"]
    pair = manager(max_failure_rate=0.9)
    keys = None
    for index, (text, failed) in enumerate([
            (f"<route_1>{gold}</route_1><route_2>LEFT LEFT LEFT LEFT</route_2><route_3>UP UP UP UP</route_3>", 2),
            (f"<route_1>{gold}</route_1>", 0)]):
        out = run_naive(pair, "maze", text, *maze_row(ex, index, 3))
        rows = np.array([task.score(gold, ex)] + [[0.0] * 4] * 2)
        weights = group_weights(f"train-{index}", 4, num_weights=K, seed=SEED)
        assert out["reward_score"] == pytest.approx(float(set_scores([rows], weights)[0]), abs=1e-12)
        info = out["reward_extra_info"]
        assert info["vpo/reward_failures"] == info["vpo/reward_failures/maze"] == failed
        keys = keys or sorted(info)
        assert sorted(info) == keys  # the same keys on every rollout (verl reads them off the first)

    pair = manager(max_failure_rate=0.4, failure_window=4)
    bad = "<route_1>LEFT LEFT LEFT LEFT</route_1><route_2>UP UP UP UP</route_2><route_3>DOWN</route_3>"
    run_naive(pair, "maze", bad, *maze_row(ex, 0, 3))  # 2 of 3: the window is not full
    with pytest.raises(RewardFailureError, match=r"4 of 6 reward calls failed .*'maze' \(4\).*max_failure_rate=0.4"):
        run_naive(pair, "maze", bad, *maze_row(ex, 1, 3))


def test_openrlhf_reward_func_reports_a_tasks_failures(buggy_maze):
    from vpo.integrations.openrlhf import make_label, reward_func
    from vpo.tasks import get_task

    ex = get_task("maze", size=5).examples("train", 1, seed=7)[0]
    label = make_label("maze", ex, m=2, index=0, task_params={"size": 5})
    out = reward_func(["q <route_1>LEFT LEFT LEFT LEFT</route_1><route_2>RIGHT</route_2>"], ["q"], [label])
    assert out["extra_logs"]["vpo/reward_failures"] == 1.0
    assert out["extra_logs"]["vpo/reward_failures/maze"] == 1.0


# ----- evaluation and search write the counts --------------------------------------------------

class BuggyLetters(LetterTask):
    """``LetterTask`` whose scorer raises on answers holding an 'e'."""

    def score(self, text, example):
        if "e" in text:
            raise ValueError("cannot score an e")
        return super().score(text, example)

    def examples(self, split="train", n=None, *, seed=None, source=None):
        return [{"id": i} for i in range(4 if n is None else n)]


def test_eval_and_search_write_the_failure_counts_and_stop_past_the_rate(tmp_path, capsys, monkeypatch):
    pytest.importorskip("transformers")
    from test_sampling import letters_checkpoint

    from vpo import tasks
    from vpo.cli import main

    # registered for this test only: the contract test runs over every registered task
    monkeypatch.setattr(tasks, "_REGISTRY", tasks._REGISTRY.copy())
    register_task("letters_buggy")(BuggyLetters)

    model = letters_checkpoint(tmp_path / "model", 0)
    common = ["--task", "letters_buggy", "--model", model, "--examples", "4", "--pool", "6", "--answers", "1",
              "--max-new-tokens", "10", "--no-progress"]
    assert main(["eval", *common, "--max-failure-rate", "1", "--out", str(tmp_path / "e")]) == 0
    texts = [t for line in (tmp_path / "e" / "pool.npz.jsonl").read_text().splitlines() for t in json.loads(line)]
    expected = {"calls": sum(bool(t.strip()) for t in texts), "failed": sum("e" in t for t in texts)}
    assert 0 < expected["failed"] < expected["calls"]  # a real test: some answers fail, some do not
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert metrics["reward_failures"] == {**expected, "by_function": {"letters_buggy": expected["failed"]}}
    assert f"{expected['failed']} of {expected['calls']} reward calls failed" in (tmp_path / "e" / "report.md").read_text()

    assert main(["search", "best-of-n", *common, "--max-failure-rate", "1", "--out", str(tmp_path / "s")]) == 0
    (entry,) = json.loads((tmp_path / "s" / "search.json").read_text())["checkpoints"].values()
    counts = entry["reward_failures"]  # 4 examples x 6 answers, blank ones not scored
    assert 0 < counts["failed"] < counts["calls"] <= 24 and counts["by_function"] == {"letters_buggy": counts["failed"]}

    capsys.readouterr()
    assert main(["eval", *common, "--max-failure-rate", "0.01", "--out", str(tmp_path / "e2")]) == 1
    err = capsys.readouterr().err
    assert "reward calls failed" in err and "'letters_buggy'" in err and "max_failure_rate=0.01" in err


def test_an_export_records_a_tasks_policy_and_verl_and_openrlhf_score_under_it(tmp_path):
    pytest.importorskip("pandas")
    import pandas as pd

    from vpo.cli import main
    from vpo.integrations import openrlhf, rollout_scorer, verl

    flags = ["--train", "2", "--test", "1", "--max-failure-rate", "0.2", "--reward-time-limit", "9"]
    assert main(["data", "export", "maze", "--format", "verl", "--out", str(tmp_path / "v"), *flags]) == 0
    row = pd.read_parquet(tmp_path / "v" / "train.parquet").iloc[0]
    verl.compute_score(row["data_source"], "no route", row["reward_model"]["ground_truth"], dict(row["extra_info"]))
    (task,) = [task for (name, params, _), task in rollout_scorer._TASK_CACHE.items()
               if name == "maze" and json.loads(params).get("max_failure_rate") == 0.2]
    assert task.failures.policy == RewardFailurePolicy(max_failure_rate=0.2, time_limit=9.0)

    assert openrlhf.convert(str(tmp_path / "v" / "train.parquet"), str(tmp_path / "o.jsonl")) == 2
    line = (tmp_path / "o.jsonl").read_text().splitlines()[0]
    label = json.loads(line)["label"]
    out = openrlhf.reward_func(["q no route"], ["q"], [label])
    assert out["extra_logs"]["vpo/reward_failures/maze"] == 0.0
    (task,) = [task for (name, params, _), task in rollout_scorer._TASK_CACHE.items()
               if name == "maze" and json.loads(params).get("max_failure_rate") == 0.2]  # the same task, rebuilt once
    assert openrlhf.parse_label(label)["task_params"]["time_limit"] == 9.0

"""The reward failure policy through ``VPOTrainer(reward_funcs=...)`` on tiny CPU runs: a function
that raises, one that returns NaN (and None, which is not a failure) and one that hangs, each on
chosen answers (by the dataset's ``index`` column)."""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from test_trl_own_rewards import PROMPTS, a_rate, b_rate, config, dataset, logged, shortness, tok  # noqa: E402,F401

from vpo.integrations.trl import VPOTrainer  # noqa: E402
from vpo.models import build_tiny_qwen2  # noqa: E402
from vpo.reward_failures import FAILED_CALL, RewardFailureError, RewardFailurePolicy  # noqa: E402

HANG_S = 1.0


def raises(completions, index, **kwargs):
    """Raises on the answers of even prompts."""
    if any(i % 2 == 0 for i in index):
        raise ValueError(f"cannot score prompt {[i for i in index if i % 2 == 0][0]}")
    return a_rate(completions)


def nan_or_none(completions, index, **kwargs):
    """NaN on prompt 1 (a failure), None on prompt 3 (does not apply: not a failure)."""
    return [math.nan if i == 1 else None if i == 3 else v for i, v in zip(index, b_rate(completions), strict=True)]


def hangs(completions, index, **kwargs):
    """Sleeps past the time limit when it sees prompt 3."""
    if 3 in index:
        time.sleep(HANG_S)
    return shortness(completions)


class Recording(VPOTrainer):
    """Keeps what each step's reward call returned, with the answers' prompt index."""

    def call_reward_funcs(self, prompts, completions, columns):
        outputs = super().call_reward_funcs(prompts, completions, columns)
        self.recorded.append((np.asarray(columns["index"]), [np.asarray(out, dtype=float) for out in outputs],
                              [a_rate(completions), b_rate(completions), shortness(completions)]))
        return outputs


def run(tmp_path, tok, policy, steps=2):
    trainer = Recording(build_tiny_qwen2(tok, seed=0), reward_funcs=[raises, nan_or_none, hangs],
                        args=config(tmp_path, max_steps=steps), train_dataset=dataset(), processing_class=tok,
                        answers=1, reward_failures=policy)
    trainer.recorded = []
    trainer.train()
    return trainer


def test_failing_answers_score_zero_are_counted_and_logged_once(tmp_path, tok, caplog):
    caplog.set_level(logging.WARNING, logger="vpo.rewards")
    trainer = run(tmp_path, tok, RewardFailurePolicy(time_limit=0.3))
    assert len(trainer.recorded) == 2
    expected_counts = []
    for index, (got_raises, got_nan, got_hangs), (a, b, short) in trainer.recorded:
        # the failing answers are FAILED_CALL (the objective's worst value once scaled: 0 here); the others keep
        # their values; None stays "does not apply" (NaN)
        np.testing.assert_allclose(got_raises, np.where(index % 2 == 0, FAILED_CALL, a))
        np.testing.assert_allclose(got_nan[index == 1], FAILED_CALL)
        assert np.isnan(got_nan[index == 3]).all()
        np.testing.assert_allclose(got_nan[(index != 1) & (index != 3)], np.asarray(b)[(index != 1) & (index != 3)])
        np.testing.assert_allclose(got_hangs, np.where(index == 3, FAILED_CALL, short))  # timed out
        expected_counts.append({"raises": int((index % 2 == 0).sum()), "nan_or_none": int((index == 1).sum()),
                                "hangs": int((index == 3).sum())})
    assert any(c["hangs"] for c in expected_counts) and any(c["nan_or_none"] for c in expected_counts)
    logs = logged(trainer, "vpo/reward_failures")
    assert len(logs) == 2
    for log, counts in zip(logs, expected_counts, strict=True):
        assert log["vpo/reward_failures"] == sum(counts.values())
        for name, count in counts.items():
            assert log[f"vpo/reward_failures/{name}"] == count
    messages = [r.getMessage() for r in caplog.records if r.name == "vpo.rewards"]
    for name, kind in (("raises", "ValueError"), ("nan_or_none", "NonFiniteReward"), ("hangs", "TimeoutError")):
        hits = [m for m in messages if f"reward function {name!r} failed ({kind})" in m]
        assert len(hits) == 1, (name, messages)  # the first of each kind only, though it failed in both steps
    assert "Traceback" in next(m for m in messages if "'raises' failed" in m)
    assert "cannot score prompt" in next(m for m in messages if "'raises' failed" in m)


def test_too_many_failures_stop_the_run_naming_function_count_and_option(tmp_path, tok):
    with pytest.raises(RewardFailureError, match=r"8 of 24 reward calls failed .* most in 'raises' \(4\).*"
                                                 r"max_failure_rate=0.25"):
        run(tmp_path, tok, RewardFailurePolicy(max_failure_rate=0.25, time_limit=0.3), steps=1)


def test_reward_failures_is_checked(tmp_path, tok):
    from test_trl_own_rewards import config as make_config

    with pytest.raises(ValueError, match="max_failure_rate"):
        RewardFailurePolicy(max_failure_rate=1.5)
    with pytest.raises(ValueError, match="time_limit"):
        RewardFailurePolicy(time_limit=0)
    with pytest.raises(ValueError, match="RewardFailurePolicy"):
        VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate], args=make_config(tmp_path),
                   train_dataset=dataset(), processing_class=tok, reward_failures={"max_failure_rate": 0.1})


def broken(completions, **kwargs):
    """A reward function whose every call fails (an API that is down)."""
    raise ConnectionError("reward server unreachable")


def test_vpo_train_flags_stop_a_run_whose_reward_function_always_fails(tmp_path, capsys):
    import json
    import string

    from vpo.cli import main
    from vpo.models import build_char_tokenizer

    char_tok = build_char_tokenizer(string.printable)
    model = tmp_path / "model"
    build_tiny_qwen2(char_tok, seed=0).save_pretrained(model)
    char_tok.save_pretrained(model)
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"Name a {w}."}) + "\n" for w in ("fruit", "colour")))
    base = ["train", "--reward-funcs", "test_trl_reward_failures:broken,test_trl_reward_failures:shortness",
            "--source", str(source), "--model", str(model), "--method", "grpo", "--max-steps", "1",
            "--num-generations", "2", "--per-device-train-batch-size", "4", "--max-completion-length", "8",
            "--force-cpu", "--no-save"]
    # half of the step's calls fail (every call of one of two functions): the rate is per function, and a
    # function that fails on every call of its first step is a setup fault, stopped at the default rate too
    assert main([*base, "--output-dir", str(tmp_path / "ok")]) == 1
    err = capsys.readouterr().err.strip()
    assert "'broken' failed on every one of its 4 calls in its first step" in err, err
    assert "ConnectionError: reward server unreachable" in err.splitlines()[-1]  # one line names both
    assert main([*base, "--output-dir", str(tmp_path / "stopped"), "--max-failure-rate", "0.4"]) == 1
    err = capsys.readouterr().err.strip()
    assert "4 of 8 reward calls failed" in err and "'broken' (4)" in err and "max_failure_rate=0.4" in err

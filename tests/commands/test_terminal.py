"""What the terminal shows: ``--no-progress`` means no bar from any library, ``vpo search
best-of-n`` one bar per checkpoint, ``vpo train`` one short line per step (the full log in a
file), Ctrl-C on a line of its own naming how to resume, ``vpo --version``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vpo.cli import main

BAR_MARKS = ("%|", "it/s", "s/it", "Loading weights", "Writing model shards", "\r")


def untrained_demo_checkpoint(path: Path, method: str) -> Path:
    """A random-init tiny Llama in the demo's compact maze format, recording ``method`` (seconds to build)."""
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.models import build_char_tokenizer, build_tiny_llama
    from transformers.utils import logging as hf_logging

    fmt = CompactMazeFormat()
    tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    model = build_tiny_llama(tokenizer, hidden=32, layers=1, heads=2, mlp=64, max_positions=256, seed=0)
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # its own saving bar is not what the tests look at
    try:
        model.save_pretrained(path)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(path)
    fmt.save(path, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method=method)
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return untrained_demo_checkpoint(tmp_path_factory.mktemp("ckpt") / "run-7", "vpo")


def _vpo(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m vpo ARGV`` in a fresh interpreter (what a user sees), with this checkout's code."""
    import vpo

    src = str(Path(vpo.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "vpo", *argv], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


@pytest.mark.parametrize("search", [False, True], ids=["pool report", "--search best-of-n"])
def test_eval_no_progress_shows_no_library_bars(checkpoint, tmp_path, search):
    """No bar from transformers (loading the weights) or anyone else on either stream; the
    pool report colours the checkpoint by the method it records."""
    argv = ["eval", "--model", str(checkpoint), "--answers", "3", "--pool", "3", "--examples", "2", "--threads", "1",
            "--no-progress", "--out", str(tmp_path / "eval")] + (["--search", "best-of-n"] if search else [])
    run = _vpo(argv, tmp_path)
    assert run.returncode == 0, run.stderr
    for mark in BAR_MARKS:
        assert mark not in run.stdout + run.stderr, (mark, run.stdout + run.stderr)
    assert run.stderr == ""
    if not search:
        metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
        assert metrics["methods"]["run-7"]["method"] == "vpo"


def test_best_of_n_draws_one_bar_per_checkpoint(checkpoint, tmp_path, capsys):
    """Per-example seeding used to draw a bar per example (100 for 2 checkpoints x 50 mazes)."""
    assert main(["search", "best-of-n", "--model", f"{checkpoint},{checkpoint}", "--labels", "a,b", "--answers", "3",
                 "--pool", "3", "--examples", "4", "--seeding", "batch", "--threads", "1",
                 "--out", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    for label in ("a", "b"):
        assert err.count(f"best-of-n {label}:   0%") == 1, err
    assert main(["search", "best-of-n", "--model", str(checkpoint), "--answers", "3", "--pool", "3",
                 "--examples", "2", "--threads", "1", "--no-progress", "--out", str(tmp_path / "quiet")]) == 0
    assert not any(mark in capsys.readouterr().err for mark in BAR_MARKS)


def test_train_prints_one_short_line_per_step_and_logs_the_rest(checkpoint, tmp_path, capsys, monkeypatch):
    import vpo.commands.train

    monkeypatch.setattr(vpo.commands.train, "HEARTBEAT_S", 0.0)  # every step is "slow": still one line each
    out = tmp_path / "run"
    assert main(["train", "--task", "maze", "--model", str(checkpoint), "--method", "vpo", "--examples", "8",
                 "--out", str(out), "--max-steps", "2", "--num-generations", "4", "--per-device-train-batch-size", "8",
                 "--kl-beta", "0.001", "--force-cpu", "--no-progress"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["1/2", "2/2"]
    for line in steps:  # at its longest here: four objectives, a tie, chains over and under m, cut, KL
        assert "objective " in line and "gold " in line and "KL " in line and "s/step" in line and len(line) < 180
    assert not any("'loss'" in line or "grad_norm" in line for line in lines)  # TRL's dict stays off the terminal
    assert not any(mark in captured.out + captured.err for mark in BAR_MARKS)
    logged = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in logged if "loss" in entry] == [1, 2]
    assert all("grad_norm" in entry and "vpo/objective/gold" in entry for entry in logged if "loss" in entry)
    # chains cut at the budget and chains with more than m answers: in the step line when not 0, run means in the summary
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    for key, shown, name in (("completions/clipped_ratio", "% cut", "chains_at_budget"),
                             ("vpo/over_m_rate", "% over m", "chains_over_m"),
                             ("vpo/under_m_rate", "% under m", "chains_under_m")):
        shares = [entry[key] for entry in logged if "loss" in entry]
        assert [shown in line for line in steps] == [share > 0 for share in shares], (key, shares, steps)
        assert summary[name] == pytest.approx(sum(shares) / len(shares), abs=1e-4)


@pytest.mark.parametrize("command,hint", [("train", "--resume-from-checkpoint latest"),
                                          ("demo", "run the same command again"), ("eval", None)])
def test_ctrl_c_lands_on_a_fresh_line_and_names_the_resume(monkeypatch, capsys, tmp_path, command, hint):
    import importlib

    def interrupted(_args):
        sys.stderr.write("train vpo:  50%|#####     | 1/2")  # a bar, mid-line
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(f"vpo.commands.{command}"), "run", interrupted)
    argv = {"train": ["train", "--task", "maze", "--model", str(tmp_path)], "demo": ["demo"],
            "eval": ["eval", "--model", str(tmp_path)]}[command]
    assert main(argv + ["--out", str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert err.startswith("train vpo:  50%|#####     | 1/2\n") and err.splitlines()[1].startswith(f"vpo {command}: ")
    assert (hint in err) if hint else err.rstrip().endswith("interrupted")


def test_version(capsys):
    import vpo

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"vpo {vpo.__version__}"


def test_a_quiet_training_terminal_gets_a_step_line_when_logged_steps_are_far_apart(capsys):
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from vpo.commands.train import HEARTBEAT_S
    from vpo.integrations.trl import StepLines

    now = [0.0]
    lines = StepLines(heartbeat=HEARTBEAT_S)
    lines.clock = lambda: now[0]
    args = SimpleNamespace(logging_steps=10)
    state = SimpleNamespace(global_step=0, max_steps=40, is_world_process_zero=True)
    lines.on_train_begin(args, state, None)
    printed = []
    for step in range(1, 41):  # 12 s a step, a logged step every 10
        now[0] += 12.0
        state.global_step = step
        lines.on_step_end(args, state, None)
        if step % 10 == 0:
            lines.on_log(args, state, None, logs={"reward": 0.5, "loss": 0.1})
        printed.extend(line for line in capsys.readouterr().out.splitlines() if line)
    beats = [line for line in printed if line.startswith("step ") and "next logged step line" in line]
    assert beats[:3] == ["step 3/40 (next logged step line: every 10 steps)",
                         "step 6/40 (next logged step line: every 10 steps)",
                         "step 9/40 (next logged step line: every 10 steps)"]
    assert len(printed) == 16  # 12 heartbeats (3 per 10 steps) and 4 logged step lines: never 30 s silent
    assert StepLines().heartbeat is None  # with a progress bar, no heartbeat lines


def test_step_lines_to_a_stage_log_are_spaced_first_and_last_always(capsys):
    """The demo's stage log gets a run's step lines through ``write``: 10 s steps with a 60 s spacing
    log steps 1, 7, 13, 19 and the last (20); 90 s steps log every step; nothing reaches the terminal."""
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from vpo.integrations.trl import StepLines

    def logged(seconds_per_step: float) -> list[str]:
        now, written = [0.0], []
        lines = StepLines(write=lambda line: written.append("RL VPO seed 0: " + line), spacing=60.0)
        lines.clock = lambda: now[0]
        args = SimpleNamespace(logging_steps=1)
        state = SimpleNamespace(global_step=0, max_steps=20, is_world_process_zero=True)
        lines.on_train_begin(args, state, None)
        for step in range(1, 21):
            now[0] += seconds_per_step
            state.global_step = step
            lines.on_log(args, state, None, logs={"reward": 0.25, "step_time": seconds_per_step})
        return written

    fast = logged(10.0)
    assert [line.split()[5] for line in fast] == ["1/20", "7/20", "13/20", "19/20", "20/20"], fast
    assert fast[0] == "RL VPO seed 0: step 1/20  objective 0.250  10.0 s/step"
    assert len(logged(90.0)) == 20
    assert capsys.readouterr().out == ""


def test_a_slow_logged_step_gets_its_step_line_only(capsys):
    """Steps slower than the heartbeat, each logged: one line per step, not a ``step N/M (next
    logged step line: every 1 steps)`` line before each step line."""
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from transformers.trainer_callback import DefaultFlowCallback, TrainerControl

    from vpo.commands.train import HEARTBEAT_S
    from vpo.integrations.trl import StepLines

    now = [0.0]
    lines = StepLines(heartbeat=HEARTBEAT_S)
    lines.clock = lambda: now[0]
    flow = DefaultFlowCallback()
    args = SimpleNamespace(logging_steps=1, logging_first_step=False, logging_strategy="steps", eval_strategy="no",
                           save_strategy="no", eval_delay=0)
    state = SimpleNamespace(global_step=0, max_steps=4, is_world_process_zero=True, logging_steps=1, eval_steps=None,
                            save_steps=None)
    lines.on_train_begin(args, state, None)
    for step in range(1, 5):  # 40 s a step, every step logged
        now[0] += 40.0
        state.global_step = step
        control = flow.on_step_end(args, state, TrainerControl())  # transformers' own flow runs first
        lines.on_step_end(args, state, control)
        lines.on_log(args, state, control, logs={"reward": 0.5, "loss": 0.1})
    printed = [line for line in capsys.readouterr().out.splitlines() if line]
    assert [line.split()[1] for line in printed] == ["1/4", "2/4", "3/4", "4/4"], printed
    assert not any("next logged step line" in line for line in printed)

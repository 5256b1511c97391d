"""Every subcommand refuses a bad option at once, in one line that names the flag as typed:
the ranges in the config dataclasses' field metadata (``vpo.config.check_fields``),
the rules that tie options together, and argparse's own errors (one line too)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vpo.cli import main
from vpo.config import check_fields, range_text

# (argv, the flag the message must name). {model}: an existing (empty) folder; {out}: a fresh folder.
BAD = [
    # vpo demo: each of these used to surface after the warm-up (tens of seconds) or never
    (["demo", "--pool", "0"], "--pool"),
    (["demo", "--pool", "31"], "--pool"),
    (["demo", "--alpha", "-1"], "--alpha"),
    (["demo", "--num-weights", "0"], "--num-weights"),
    (["demo", "--rl-steps", "0"], "--rl-steps"),
    (["demo", "--rl-generations", "1"], "--rl-generations"),
    (["demo", "--rl-lr", "0"], "--rl-lr"),
    (["demo", "--rl-beta", "-0.1"], "--rl-beta"),
    (["demo", "--seeds", "0"], "--seeds"),
    (["demo", "--answers", "10"], "--answers"),
    (["demo", "--size", "6"], "--size"),
    (["demo", "--hidden", "10", "--heads", "3"], "--hidden"),
    (["demo", "--warmup-single-fraction", "1.5"], "--warmup-single-fraction"),
    (["demo", "--warmup-examples", "10"], "--warmup-examples"),
    (["demo", "--eval-weights", "0"], "--eval-weights"),
    (["demo", "--eval-temperature", "0"], "--eval-temperature"),
    (["demo", "--eval-examples", "1"], "--eval-examples"),
    (["demo", "--workers", "-1"], "--workers"),
    (["demo", "--threads", "-1"], "--threads"),
    (["demo", "--methods", "grpo,ppo"], "--methods"),
    (["demo", "--reward-mode", "cubic"], "--reward-mode"),
    (["demo", "--pool", "x"], "--pool"),
    # vpo eval
    (["eval", "--model", "{model}", "--eval-weights", "0"], "--eval-weights"),
    (["eval", "--model", "{model}", "--pool", "0"], "--pool"),
    (["eval", "--model", "{model}", "--pool", "31", "--answers", "3"], "--pool"),
    (["eval", "--model", "{model}", "--answers", "0"], "--answers"),
    (["eval", "--model", "{model}", "--temperature", "0"], "--temperature"),
    (["eval", "--model", "{model}", "--top-p", "1.5"], "--top-p"),
    (["eval", "--model", "{model}", "--examples", "0"], "--examples"),
    (["eval", "--model", "{model}", "--batch-size", "-1"], "--batch-size"),
    (["eval", "--model", "{model}", "--max-new-tokens", "-1"], "--max-new-tokens"),
    (["eval", "--model", "{model}", "--search", "openevolve", "--task", "code", "--iterations", "0"],
     "--iterations"),
    (["eval", "--model", "{model}", "--search", "beam"], "--search"),
    # vpo search best-of-n: --select used to fail after the first checkpoint was sampled
    (["search", "best-of-n", "--task", "maze", "--model", "{model}", "--select", "1,2"], "--select"),
    (["search", "best-of-n", "--task", "maze", "--model", "{model}", "--select", "1,nan,0,0"], "--select"),
    (["search", "best-of-n", "--model", "{model}", "--pool", "0"], "--pool"),
    (["search", "best-of-n", "--model", "{model}", "--n", "0"], "--n"),
    (["search", "best-of-n", "--model", "{model}", "--m", "0"], "--m"),
    (["search", "best-of-n", "--model", "{model}", "--pool", "10", "--answers", "3"], "--pool"),
    (["search", "best-of-n", "--model", "{model}", "--temperature", "-1"], "--temperature"),
    (["search", "best-of-n", "--model", "{model}", "--max-new-tokens", "-1"], "--max-new-tokens"),
    # vpo search openevolve
    (["search", "openevolve", "--model", "{model}", "--iterations", "0"], "--iterations"),
    (["search", "openevolve", "--model", "{model}", "--chains", "0"], "--chains"),
    (["search", "openevolve", "--model", "{model}", "--workers", "0"], "--workers"),
    (["search", "openevolve", "--model", "{model}", "--islands", "0"], "--islands"),
    (["search", "openevolve", "--model", "{model}", "--test-timeout", "0"], "--test-timeout"),
    (["search", "openevolve", "--model", "{model}", "--max-tests", "0"], "--max-tests"),
    (["search", "openevolve", "--model", "{model}", "--limit", "-1"], "--limit"),
    (["search", "openevolve", "--model", "{model}", "--top-p", "0"], "--top-p"),
    # vpo train (options, then the batch/group rule, before TRL is imported)
    (["train", "--task", "maze", "--model", "{model}", "--max-steps", "0"], "--max-steps"),
    (["train", "--task", "maze", "--model", "{model}", "--num-generations", "1"], "--num-generations"),
    (["train", "--task", "maze", "--model", "{model}", "--learning-rate", "0"], "--learning-rate"),
    (["train", "--task", "maze", "--model", "{model}", "--adam-beta2", "1"], "--adam-beta2"),
    (["train", "--task", "maze", "--model", "{model}", "--num-train-epochs", "0"], "--num-train-epochs"),
    (["train", "--task", "maze", "--model", "{model}", "--loss-type", "ppo"], "--loss-type"),
    (["train", "--task", "maze", "--model", "{model}", "--lr-scheduler-type", "cosin"], "--lr-scheduler-type"),
    (["train", "--task", "maze", "--model", "{model}", "--answers", "0"], "--answers"),
    (["train", "--task", "maze", "--model", "{model}", "--num-examples", "0"], "--num-examples"),
    (["train", "--task", "maze", "--model", "{model}", "--lora-rank", "0"], "--lora-rank"),
    (["train", "--task", "maze", "--model", "{model}", "--per-device-train-batch-size", "6"],
     "--per-device-train-batch-size"),
    # vpo data export / preview
    (["data", "export", "maze", "--out", "{out}", "--train", "-1"], "--train"),
    (["data", "export", "maze", "--out", "{out}", "--answers", "0"], "--answers"),
    (["data", "export", "maze", "--out", "{out}", "--size", "4"], "--size"),
    (["data", "export", "maze", "--out", "{out}", "--task-params", "size=4"], "--task-params"),
    (["data", "export", "maze", "--out", "{out}", "--method", "ppo"], "--method"),
    (["data", "export", "maze", "--out", "{out}", "--method", "goal_conditioned", "--alpha", "0"], "--alpha"),
    (["data", "preview", "maze", "--index", "-1"], "--index"),
    # vpo advantages
    (["advantages", "--groups", "0"], "--groups"),
    (["advantages", "--objectives", "0"], "--objectives"),
    (["advantages", "--zero-fraction", "2"], "--zero-fraction"),
    (["advantages", "--alpha", "-1"], "--alpha"),
    (["advantages", "--estimator", "ppo"], "--estimator"),
]


@pytest.mark.parametrize("argv,flag", BAD, ids=[" ".join(a[:2] + a[-2:]) for a, _ in BAD])
def test_a_bad_option_is_one_line_at_once(argv, flag, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    out = tmp_path / "out"
    argv = [a.replace("{model}", str(model)).replace("{out}", str(out)) for a in argv]
    if "--out" not in argv and argv[0] != "advantages" and argv[:2] != ["data", "preview"]:
        argv += ["--out", str(out)]  # were a bad value let through, nothing is written in the working folder
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors (type, choices)
        code = stop.code
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert flag in err and "Traceback" not in err, err
    assert seconds < 10 and not out.exists()  # refused before any work: nothing written


def test_the_terminal_command_fails_fast_without_a_traceback(tmp_path):
    # the real entry point in a fresh interpreter: what a user sees, and how soon
    import os

    import vpo

    src = str(Path(vpo.__file__).resolve().parents[1])  # this checkout, whatever the working folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    for argv, flag in [(["demo", "--pool", "0"], "--pool"), (["demo", "--alpha", "-1"], "--alpha"),
                       (["eval", "--model", str(tmp_path), "--eval-weights", "0"], "--eval-weights")]:
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "vpo", *argv, "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        assert time.perf_counter() - start < 10
        assert run.returncode == 2 and run.stdout == ""
        assert run.stderr.count("\n") == 1 and flag in run.stderr and "Traceback" not in run.stderr
        assert not (tmp_path / "out").exists()


@dataclasses.dataclass
class _Knobs:
    pool: int = dataclasses.field(default=30, metadata={"min": 1})
    top_p: float = dataclasses.field(default=1.0, metadata={"above": 0.0, "max": 1.0})
    steps: int = dataclasses.field(default=-1, metadata={"min": 1, "also": (-1,)})
    answers: list[int] = dataclasses.field(default_factory=lambda: [1], metadata={"min": 1})
    limit: int | None = dataclasses.field(default=None, metadata={"min": 0})
    mode: str = dataclasses.field(default="a", metadata={"choices": ("a", "b")})


@pytest.mark.parametrize("change,message", [
    ({"pool": 0}, "--pool must be >= 1, got 0"),
    ({"top_p": 0.0}, "--top-p must be > 0 and <= 1, got 0.0"),
    ({"top_p": float("inf")}, "--top-p must be > 0 and <= 1, got inf"),
    ({"steps": 0}, "--steps must be >= 1 (or -1), got 0"),
    ({"answers": [1, 0]}, "--answers must be >= 1, got 0"),
    ({"limit": -1}, "--limit must be >= 0, got -1"),
    ({"mode": "c"}, "--mode must be one of a, b; got 'c'"),
])
def test_check_fields_names_the_flag(change, message):
    check_fields(_Knobs())  # the defaults pass (None included)
    check_fields(_Knobs(steps=5, limit=0, answers=[1, 3], top_p=1.0))
    with pytest.raises(ValueError) as caught:
        check_fields(dataclasses.replace(_Knobs(), **change))
    assert str(caught.value) == message
    assert range_text({"min": 0.0, "below": 1.0}) == ">= 0 and < 1"


def test_the_trl_choices_are_the_installed_libraries():
    pytest.importorskip("trl")
    import re

    from transformers.trainer_utils import SchedulerType
    from trl import GRPOConfig

    from vpo.integrations.trl.config import LOSS_TYPES, LR_SCHEDULERS

    assert set(LR_SCHEDULERS) == {s.value for s in SchedulerType}
    help_text = next(f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type").metadata["help"]
    listed = re.search(r"Supported values are (.*?)\. ", help_text).group(1)
    assert set(LOSS_TYPES) == set(re.findall(r"'(\w+)'", listed))


def _subparsers(parser, prefix=()):
    """(command words, parser) of every (sub)command under ``parser``."""
    import argparse

    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subparsers(sub, (*prefix, name))


# numeric options whose valid values the task decides (checked by building it, named by the flag)
TASK_CHECKED = {("data", "export", "--size"), ("data", "preview", "--size")}


def test_every_numeric_option_has_a_range():
    # the audit kept honest: a new int/float flag needs its range in the field metadata
    from vpo.cli import build_parser

    unchecked = []
    for words, parser in _subparsers(build_parser()):
        for action in parser._actions:
            listed = isinstance(action.default, list) and action.default  # comma-separated numbers (--answers 1,3)
            if action.type not in (int, float) and not (listed and all(isinstance(v, int | float) for v in listed)):
                continue
            key = (*words, action.option_strings[0])
            if "; >" not in (action.help or "") and "; <" not in (action.help or "") and key not in TASK_CHECKED:
                unchecked.append(" ".join(key))
    assert unchecked == []

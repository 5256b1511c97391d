"""Fault injection: every user-facing command (``vpo train``, ``vpo eval``, ``vpo search best-of-n``,
``vpo rewards check``, ``vpo warmup``, ``vpo data export``, and ``VPOTrainer`` from Python) run
against broken reward code, damaged records and interrupted runs, all checked by one rule: the
command ends in one line of error (no traceback), with the exit status the project gives that
fault (2 for a user's bad input, 1 for reward calls that fail, 130 for an interrupt, 0 where the
command never meets the fault), and every file the user had is left byte for byte as it was.

The cases are tables, one test id each: ``CODE_FAULTS`` x ``SURFACES`` and ``VPOTrainer``;
``FORMAT_DAMAGES`` x the commands that read a checkpoint's format record; ``RUN_RECORD_DAMAGES`` x
the commands that write an output folder; ``SOURCE_DAMAGES`` x the commands that read a task's
``--source`` (``vpo search openevolve`` among them); ``RESUME_FAULTS``; ``WARMUP_DATA_DAMAGES``; and the
interrupted runs of each command. The models are tiny and random, so each case takes seconds. The
behaviours have their own tests next to their code (tests/core/test_reward_guard.py,
tests/core/test_records.py, tests/commands/test_reward_guard_cli.py, tests/commands/test_resume.py);
this suite runs them all against every command in the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from test_first_messages import compact_checkpoint as maze_checkpoint  # noqa: F401  (a fixture: a maze checkpoint)
from test_warmup import tiny, write_jsonl  # noqa: F401  (a fixture: a tiny model and its prompts)
from vpo.cli import main

PROMPTS = [{"prompt": f"ab {'a' * i}", "keyword": "b"} for i in range(6)]
"""The prompts of ``tiny`` (tests/commands/test_warmup.py), with a ``keyword`` column."""


@pytest.fixture(scope="module")
def tiny_model(tiny):
    """A random tiny Qwen2 with a character tokenizer of few characters (no chat template): a random
    model that ends some answers before the budget (the warm-up keeps only complete answers)."""
    return tiny[0]


# ------------------------------------------------------------------------------------------------
# the rule every case ends by
# ------------------------------------------------------------------------------------------------
def snapshot(*folders: Path) -> dict[str, str]:
    """Every file under ``folders`` (a file's own path for a file) and a hash of its bytes."""
    files = {}
    for folder in folders:
        paths = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
        for path in paths:
            if "__pycache__" not in path.parts and path.name != ".lock":
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def assert_kept(before: dict[str, str]) -> None:
    """Every file of ``before`` is still there with the same bytes (new files may have appeared)."""
    changed = [p for p, digest in before.items() if not Path(p).is_file()
               or hashlib.sha256(Path(p).read_bytes()).hexdigest() != digest]
    assert not changed, f"the user's files changed or went missing: {changed}"


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``vpo ARGV`` in this process, its logging as in a terminal (pytest's log capture set aside, so
    that a record no handler of vpo's takes reaches stderr): (exit status, stdout, stderr)."""
    capsys.readouterr()
    kept, logging.root.handlers = logging.root.handlers, []
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        logging.root.handlers = kept
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


def assert_ends(code: int, out: str, err: str, want: int, needle: str | None = None) -> None:
    """Exit status ``want``; no traceback anywhere; a failure is one line of stderr (progress bars
    and one-line warnings aside) that holds ``needle``."""
    assert "Traceback" not in out + err, (out + err)[-3000:]
    assert code == want, f"exit {code}, expected {want}: {err[-1500:]}"
    if want == 0:
        return
    lines = [line for line in err.splitlines() if "error:" in line or line.endswith("interrupted")
             or ": interrupted; " in line]
    assert len(lines) == 1, err[-1500:]
    (line,) = lines
    stray = [l for l in err.splitlines() if l.strip() and l != line and not l.startswith("warning:")
             and "\r" not in l and "%|" not in l]
    assert not stray, f"more than one line of error: {err[-1500:]}"
    if needle is not None:
        assert needle in line, line


# ------------------------------------------------------------------------------------------------
# broken reward code, on every surface
# ------------------------------------------------------------------------------------------------
GOOD = "def score(completions, **kwargs):\n    return [1.0] * len(completions)\n"

CODE_FAULTS = {
    # fault: (the user's file, the substring the one line holds)
    "syntax error": ("def score(completions, **kwargs):\n    return [1.0 for c in completions\n",
                     "line 2: SyntaxError"),
    "missing dependency": ("import not_a_real_package_xyz\n" + GOOD,
                           "line 1: ModuleNotFoundError: No module named 'not_a_real_package_xyz'"),
    "exception at import": ("import os\nKEY = os.environ['NO_SUCH_REWARD_API_KEY_XYZ']\n" + GOOD,
                            "line 2: KeyError: 'NO_SUCH_REWARD_API_KEY_XYZ'"),
    "missing name": (GOOD.replace("score", "scores"), "has no callable 'score'; it defines scores"),
    "returns strings": ("def score(completions, **kwargs):\n    return ['high' for c in completions]\n",
                        "'score' returned ['high'"),
    "wrong length": ("def score(completions, **kwargs):\n    return [1.0] * (len(completions) + 1)\n",
                     "'score' returned"),
    "nested lists": ("def score(completions, **kwargs):\n    return [[1.0, 0.0] for c in completions]\n",
                     "'score' returned [[1.0, 0.0]"),
    "a dict": ("def score(completions, **kwargs):\n    return {'score': [1.0] * len(completions)}\n",
               "'score' returned"),
    "a generator": ("def score(completions, **kwargs):\n    return (1.0 for c in completions)\n",
                    "'score' returned"),
    "a tensor on another device": ("import torch\ndef score(completions, **kwargs):\n"
                                   "    return torch.zeros(len(completions), device='meta')\n",
                                   "'score' returned a tensor on meta"),
    "raises": ("def score(completions, **kwargs):\n    raise ConnectionError('reward server unreachable')\n",
               "ConnectionError: reward server unreachable"),
    "missing column": ("def score(completions, solution, **kwargs):\n    return [1.0] * len(completions)\n",
                       "'score' needs the dataset column 'solution'"),
}
IMPORT_FAULTS = ("syntax error", "missing dependency", "exception at import", "missing name")
OUTPUT_FAULTS = ("returns strings", "wrong length", "nested lists", "a dict", "a generator", "a tensor on another device")


def code_fault_exit(fault: str, surface: str) -> tuple[int, bool]:
    """(exit status, whether the one line names the fault) the project gives ``fault`` on ``surface``."""
    if surface == "data export" and fault in OUTPUT_FAULTS + ("raises",):
        return 0, False  # the export writes the data; it never calls the functions
    if fault == "raises":
        return 1, True   # a function that fails on every call of its first step: a setup fault, the run stops
    return 2, True


def surface_argv(surface: str, funcs: str, user: Path, model: Path, out: Path) -> list[str]:
    prompts, samples = str(user / "prompts.jsonl"), str(user / "samples.jsonl")
    sampled = ["--max-new-tokens", "6", "--no-progress"]
    return {
        "rewards check": ["rewards", "check", "--reward-funcs", funcs, "--source", samples, "--answers", "2"],
        "eval": ["eval", "--reward-funcs", funcs, "--source", prompts, "--model", str(model), "--out", str(out),
                 "--pool", "2", "--examples", "2", "--threads", "1", *sampled],
        "search": ["search", "best-of-n", "--reward-funcs", funcs, "--source", prompts, "--model", str(model),
                   "--out", str(out), "--pool", "2", "--examples", "2", "--threads", "1", *sampled],
        "warmup": ["warmup", "--reward-funcs", funcs, "--source", prompts, "--model", str(model), "--out", str(out),
                   "--answers", "2", "--samples", "6", "--max-new-tokens", "10", "--temperature", "1.0",
                   "--threads", "1", "--force-cpu", "--no-progress", "--eval-chains", "0", "--no-sft"],
        "data export": ["data", "export", "--reward-funcs", funcs, "--source", prompts, "--out", str(out),
                        "--train", "1", "--test", "1"],
        "train": ["train", "--reward-funcs", funcs, "--source", prompts, "--model", str(model), "--output-dir",
                  str(out), "--answers", "1", "--max-steps", "1", "--num-generations", "2",
                  "--per-device-train-batch-size", "2", "--max-completion-length", "6", "--force-cpu"],
    }[surface]


SURFACES = ("rewards check", "eval", "search", "warmup", "data export", "train")


@pytest.fixture
def user(tmp_path):
    """The user's folder: prompts (with a ``keyword`` column) and samples for ``vpo rewards check``."""
    folder = tmp_path / "user"
    folder.mkdir()
    write_jsonl(folder / "prompts.jsonl", PROMPTS)
    write_jsonl(folder / "samples.jsonl", [{**PROMPTS[1], "completion": "<response_1>ab</response_1>"
                                                                        "<response_2>b a</response_2>"}])
    return folder


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("fault", list(CODE_FAULTS))
def test_broken_reward_code_on_a_command(fault, surface, user, tiny_model, tmp_path, capsys):
    source, needle = CODE_FAULTS[fault]
    (user / "my_rewards.py").write_text(source)
    before = snapshot(user, tiny_model)
    argv = surface_argv(surface, f"{user / 'my_rewards.py'}:score", user, tiny_model, tmp_path / "out")
    code, out, err = run_cli(argv, capsys)
    want, named = code_fault_exit(fault, surface)
    assert_ends(code, out, err, want, needle if named else None)
    if fault in IMPORT_FAULTS:
        assert str(user / "my_rewards.py") in err  # the file is named
    assert_kept(before)


@pytest.mark.parametrize("fault", list(CODE_FAULTS))
def test_broken_reward_code_in_vpo_trainer(fault, user, tmp_path, capsys):
    pytest.importorskip("trl")
    from test_trl_own_rewards import config, dataset
    from vpo.integrations.trl import VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_qwen2
    from vpo.reward_failures import RewardFailureError
    from vpo.rewards import load_reward_funcs

    source, needle = CODE_FAULTS[fault]
    (user / "my_rewards.py").write_text(source)
    before = snapshot(user)
    tok = build_char_tokenizer(sorted(set("q0123:ab")))
    with pytest.raises((ValueError, RewardFailureError)) as caught:
        funcs = load_reward_funcs(f"{user / 'my_rewards.py'}:score")
        trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=funcs, answers=1,
                             args=config(tmp_path / "run", max_steps=1, max_completion_length=6),
                             train_dataset=dataset(), processing_class=tok)
        trainer.train()
    message = str(caught.value)
    assert needle in message and "\n" not in message.strip() and "Traceback" not in message, message
    assert isinstance(caught.value, RewardFailureError) == (fault == "raises")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert_kept(before)


# ------------------------------------------------------------------------------------------------
# damaged records: what one command wrote and another (or the same, later) reads back
# ------------------------------------------------------------------------------------------------
def _json_edit(**fields):
    return lambda text: json.dumps({**json.loads(text), **fields}).encode()


DAMAGES = {
    # damage: a function of the record's text giving the damaged bytes
    "truncated": lambda text: text.encode()[: len(text) // 2],
    "garbage": lambda text: b"\x00\xff\xfegarbage\x81",
    "not an object": lambda text: b"[1, 2]",
    "empty": lambda text: b"",
}

FORMAT_DAMAGES = {**DAMAGES,
                  "answers 0": _json_edit(answers=0),
                  "answers above max_answers": _json_edit(answers=5, max_answers=3),
                  "unknown format": _json_edit(format="no_such_format"),
                  "task_params not an object": _json_edit(task_params="size=5"),
                  "max_answers a string": _json_edit(max_answers="three")}


def checkpoint_argv(command: str, model: Path, out: Path) -> list[str]:
    """``command`` on the maze checkpoint ``model`` (the commands that read a checkpoint's format record)."""
    sampled = ["--max-new-tokens", "4", "--no-progress", "--threads", "1", "--out", str(out)]
    return {
        "train": ["train", "--task", "maze", "--task-params", "size=5", "--model", str(model), "--out", str(out),
                  "--examples", "2", "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size",
                  "2", "--max-completion-length", "6", "--force-cpu"],
        "eval": ["eval", "--task", "maze", "--model", str(model), "--pool", "3", "--examples", "1", *sampled],
        "search": ["search", "best-of-n", "--task", "maze", "--model", str(model), "--pool", "3", "--examples", "1",
                   *sampled],
    }[command]


@pytest.mark.parametrize("command", ("train", "eval", "search"))  # vpo warmup neither reads nor writes it
@pytest.mark.parametrize("damage", list(FORMAT_DAMAGES))
def test_a_damaged_format_record_in_a_checkpoint(damage, command, maze_checkpoint, tmp_path, capsys):
    model = tmp_path / "user" / "vpo-s0"
    shutil.copytree(maze_checkpoint, model)
    record = model / "vpo_format.json"
    record.write_bytes(FORMAT_DAMAGES[damage](record.read_text()))
    before = snapshot(model)
    code, out, err = run_cli(checkpoint_argv(command, model, tmp_path / "out"), capsys)
    assert_ends(code, out, err, 2, str(record))
    assert_kept(before)


RUN_RECORD_DAMAGES = {"truncated": b'{"command": "ev', "garbage": b"\x00\xff\xfe",
                      "command a number": b'{"command": 5}',
                      "not an object": b"[]"}


@pytest.mark.parametrize("surface", ("eval", "search", "warmup", "data export", "train"))
@pytest.mark.parametrize("damage", [*RUN_RECORD_DAMAGES, "results without a record"])
def test_a_damaged_output_folder(damage, surface, user, tiny_model, tmp_path, capsys):
    (user / "my_rewards.py").write_text(GOOD)
    out = user / "results"  # a folder of the user's: an earlier run's, its record damaged
    out.mkdir()
    (out / "report.md").write_text("an earlier run's results\n")
    (out / "metrics.json").write_text('{"score": 1}\n')
    if damage in RUN_RECORD_DAMAGES:
        (out / ".vpo_run.json").write_bytes(RUN_RECORD_DAMAGES[damage])
    before = snapshot(user, tiny_model)
    code, out_text, err = run_cli(surface_argv(surface, f"{user / 'my_rewards.py'}:score", user, tiny_model, out),
                                  capsys)
    assert_ends(code, out_text, err, 2, ".vpo_run.json" if damage in RUN_RECORD_DAMAGES else "--overwrite")
    assert_kept(before)


# ------------------------------------------------------------------------------------------------
# a damaged data file of the user's, read by every command that takes a task's --source
# ------------------------------------------------------------------------------------------------
def _code_problem(**fields) -> bytes:
    from vpo.tasks.code import FIXTURES  # the shipped problems: one is damaged here
    first = Path(FIXTURES).read_text().splitlines()[0]
    return (json.dumps({**json.loads(first), **fields}) + "\n").encode()


SOURCE_DAMAGES = {
    # damage: (the file's name, a function giving its bytes, the substring the one line holds)
    "truncated": ("problems.jsonl", lambda: _code_problem()[:150], "line 1 is not valid JSON"),
    "not UTF-8": ("problems.jsonl", lambda: b"\x00\xff\xfegarbage", "not UTF-8 text"),
    "empty": ("problems.jsonl", lambda: b"", "holds no rows"),
    "a gzip cut short": ("problems.jsonl.gz", lambda: b"\x1f\x8b\x08garbage", "not a readable gzip file"),
    "not parquet": ("problems.parquet", lambda: b"PAR1garbage", "not a readable parquet file"),
    "a field missing": ("problems.jsonl", lambda: b'{"question_id": "x"}\n', "missing field 'question_content'"),
    "tests not JSON": ("problems.jsonl", lambda: _code_problem(public_test_cases="not json"),
                       "public_test_cases is not valid JSON"),
    "metadata not JSON": ("problems.jsonl", lambda: _code_problem(metadata="{bad"), "metadata is not valid JSON"),
}


def source_argv(command: str, source: Path, model: Path, out: Path) -> list[str]:
    """``command`` on the code task with the user's problems ``source``."""
    return {
        "search openevolve": ["search", "openevolve", "--task", "code", "--source", str(source), "--model",
                              str(model), "--iterations", "1", "--chains", "1", "--m", "1", "--max-tokens", "4",
                              "--threads", "1", "--out", str(out)],
        "eval": ["eval", "--task", "code", "--source", str(source), "--model", str(model), "--pool", "1",
                 "--examples", "1", "--max-new-tokens", "4", "--threads", "1", "--no-progress", "--out", str(out)],
        "data export": ["data", "export", "code", "--source", str(source), "--out", str(out)],
        "train": ["train", "--task", "code", "--source", str(source), "--model", str(model), "--out", str(out),
                  "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2",
                  "--max-completion-length", "6", "--force-cpu"],
    }[command]


@pytest.mark.parametrize("command", ("search openevolve", "eval", "data export", "train"))
@pytest.mark.parametrize("damage", list(SOURCE_DAMAGES))
def test_a_damaged_source_file(damage, command, tiny_model, tmp_path, capsys):
    name, content, needle = SOURCE_DAMAGES[damage]
    user = tmp_path / "user"
    user.mkdir()
    source = user / name
    source.write_bytes(content())
    before = snapshot(user, tiny_model)
    code, out, err = run_cli(source_argv(command, source, tiny_model, tmp_path / "out"), capsys)
    assert_ends(code, out, err, 2, needle)
    if damage not in ("a field missing", "tests not JSON", "metadata not JSON"):  # a row's fault names the row
        assert str(source) in err
    assert_kept(before)


# ------------------------------------------------------------------------------------------------
# damaged resume state and warm-up data
# ------------------------------------------------------------------------------------------------
def train_argv(funcs: str, user: Path, model: Path, out: Path, steps: int, *extra: str) -> list[str]:
    argv = surface_argv("train", funcs, user, model, out)
    argv[argv.index("--max-steps") + 1] = str(steps)
    return [*argv, "--save-steps", "1", *extra]


@pytest.fixture(scope="module")
def trained_run(tiny_model, tmp_path_factory):
    """(the user's folder, a finished 2-step ``vpo train`` run in it with checkpoint-1 and checkpoint-2)."""
    user = tmp_path_factory.mktemp("faults") / "user"
    user.mkdir()
    write_jsonl(user / "prompts.jsonl", PROMPTS)
    (user / "my_rewards.py").write_text(GOOD)
    assert main(train_argv(f"{user / 'my_rewards.py'}:score", user, tiny_model, user / "run", 2)) == 0
    assert (user / "run" / "checkpoint-2" / "trainer_state.json").is_file()
    return user


def _state(text: str, **fields) -> bytes:
    return json.dumps({**json.loads(text), **fields}).encode()


RESUME_FAULTS = {
    # fault: (the file of the run damaged, its damage, which checkpoint to resume, the one line's needle)
    "trainer state truncated": ("checkpoint-2/trainer_state.json", DAMAGES["truncated"], "checkpoint-2",
                                "trainer_state.json is not readable JSON"),
    "trainer state garbage": ("checkpoint-2/trainer_state.json", DAMAGES["garbage"], "checkpoint-2",
                              "trainer_state.json is not readable JSON"),
    "trainer state not an object": ("checkpoint-2/trainer_state.json", DAMAGES["not an object"], "checkpoint-2",
                                    "trainer_state.json: it holds"),
    "global_step negative": ("checkpoint-2/trainer_state.json", lambda text: _state(text, global_step=-1),
                             "checkpoint-2", "field 'global_step' is -1"),
    "global_step missing": ("checkpoint-2/trainer_state.json", lambda text: _state(text, global_step=None),
                            "checkpoint-2", "field 'global_step' is missing"),
    "weights truncated": ("checkpoint-2/model.safetensors", None, "checkpoint-2", "model.safetensors"),
    "every checkpoint damaged, latest": ("checkpoint-*/trainer_state.json", DAMAGES["truncated"], "latest",
                                         "checkpoint"),
    "a checkpoint that is not there": (None, None, "checkpoint-7", "checkpoint-7"),
    "run record damaged": (".vpo_run.json", lambda text: RUN_RECORD_DAMAGES["command a number"], "latest",
                           ".vpo_run.json"),
    # a folder written before run records: its vpo_train.json says what ran there
    "train record damaged, no run record": ("vpo_train.json", DAMAGES["truncated"], "latest", "vpo_train.json"),
}


@pytest.mark.parametrize("fault", list(RESUME_FAULTS))
def test_a_damaged_run_resumed(fault, trained_run, tiny_model, tmp_path, capsys):
    user = tmp_path / "user"
    shutil.copytree(trained_run, user)
    run = user / "run"
    name, damage, resume, needle = RESUME_FAULTS[fault]
    if name == "vpo_train.json":
        (run / ".vpo_run.json").unlink()
    for path in run.glob(name) if name else ():
        if damage is None:  # weights cut short, as by a kill while they were written
            path.write_bytes(path.read_bytes()[:100])
        else:
            path.write_bytes(damage(path.read_text()))
    before = snapshot(user, tiny_model)
    resume_from = resume if resume == "latest" else str(run / resume)
    argv = train_argv(f"{user / 'my_rewards.py'}:score", user, tiny_model, run, 3, "--resume-from-checkpoint",
                      resume_from)
    code, out, err = run_cli(argv, capsys)
    assert_ends(code, out, err, 2, needle)
    assert_kept(before)


WARMUP_DATA_DAMAGES = {
    "truncated": lambda text: text.encode()[: len(text) // 2 + 3],
    "garbage": DAMAGES["garbage"],
    "empty": DAMAGES["empty"],
    "a row without a completion": lambda text: (json.dumps({"prompt": "ab"}) + "\n" + text).encode(),
    "one answer where m = 2": lambda text: (json.dumps({"prompt": "ab", "completion": "<response_1>a</response_1>"})
                                            + "\n").encode(),
}


@pytest.mark.parametrize("damage", list(WARMUP_DATA_DAMAGES))
def test_damaged_warmup_data_before_the_sft(damage, user, tiny_model, tmp_path, capsys, monkeypatch):
    from vpo.integrations.trl import warmup  # the chain warm-up reads its data back before the SFT

    read = warmup.read_warmup_data

    def damaged_then_read(path, task, m):  # the data file damaged between its writing and its reading
        Path(path).write_bytes(WARMUP_DATA_DAMAGES[damage](Path(path).read_text()))
        return read(path, task, m)

    monkeypatch.setattr(warmup, "read_warmup_data", damaged_then_read)
    (user / "my_rewards.py").write_text(GOOD)
    before = snapshot(user, tiny_model)
    argv = surface_argv("warmup", f"{user / 'my_rewards.py'}:score", user, tiny_model, tmp_path / "out")
    argv.remove("--no-sft")
    code, out, err = run_cli([*argv, "--sft-steps", "1"], capsys)
    assert_ends(code, out, err, 2, "data/train.jsonl")
    assert_kept(before)


# ------------------------------------------------------------------------------------------------
# interrupted runs: Ctrl-C, a kill in the middle of a save, the same command again, a finished run
# ------------------------------------------------------------------------------------------------
INTERRUPTIBLE = GOOD.replace("    return", "    if os.path.exists(STOP) and os.path.exists(AFTER):\n"
                                          "        raise KeyboardInterrupt\n    return", 1)
"""The user's reward function, interrupted (Ctrl-C while it runs) while the file ``STOP`` exists,
once ``AFTER`` exists."""


def interruptible(user: Path, stop: Path, after: Path) -> str:
    (user / "my_rewards.py").write_text(f"import os\nSTOP, AFTER = {str(stop)!r}, {str(after)!r}\n" + INTERRUPTIBLE)
    return f"{user / 'my_rewards.py'}:score"


def test_train_interrupted_killed_mid_save_resumed_and_resumed_again(user, tiny_model, tmp_path, capsys):
    run, stop = tmp_path / "run", tmp_path / "STOP"
    stop.touch()
    funcs = interruptible(user, stop, run / "checkpoint-2")
    before = snapshot(user, tiny_model)
    argv = train_argv(funcs, user, tiny_model, run, 4)
    code, out, err = run_cli(argv, capsys)  # Ctrl-C in step 3, after checkpoint-2
    assert_ends(code, out, err, 130, "interrupted; run the same command with --resume-from-checkpoint latest")
    assert (run / "checkpoint-2").is_dir() and not (run / "checkpoint-4").exists()
    stop.unlink()
    # a kill while checkpoint-3 was written: its trainer state cut short
    shutil.copytree(run / "checkpoint-2", run / "checkpoint-3")
    state = run / "checkpoint-3" / "trainer_state.json"
    state.write_bytes(state.read_bytes()[:20])
    assert_kept(before)

    code, out, err = run_cli(argv, capsys)  # the same command again: the folder holds that run
    assert_ends(code, out, err, 2, "pass --resume-from-checkpoint to continue it")

    code, out, err = run_cli([*argv, "--resume-from-checkpoint", "latest"], capsys)
    assert_ends(code, out, err, 0)
    assert json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    assert_kept(before)

    finished = snapshot(run)
    code, out, err = run_cli([*argv, "--resume-from-checkpoint", "latest"], capsys)
    assert_ends(code, out, err, 0)
    assert "nothing to train, nothing changed" in out
    assert snapshot(run) == finished
    assert_kept(before)


@pytest.mark.parametrize("surface", ("rewards check", "eval", "search", "warmup"))
def test_interrupted_run_again_and_once_more(surface, user, tiny_model, tmp_path, capsys):
    out, stop = tmp_path / "out", tmp_path / "STOP"
    stop.touch()
    funcs = interruptible(user, stop, stop)
    before = snapshot(user, tiny_model)
    argv = surface_argv(surface, funcs, user, tiny_model, out)
    code, text, err = run_cli(argv, capsys)  # Ctrl-C while the user's function scores
    assert_ends(code, text, err, 130, "interrupted")
    stop.unlink()
    code, text, err = run_cli(argv, capsys)  # again: an interrupted run wrote no results, its folder is reused
    assert_ends(code, text, err, 0)
    if surface != "rewards check":  # once more: the folder holds results now, refused and left as it is
        results = snapshot(out)
        code, text, err = run_cli(argv, capsys)
        assert_ends(code, text, err, 2, "--overwrite")
        assert snapshot(out) == results
    assert_kept(before)

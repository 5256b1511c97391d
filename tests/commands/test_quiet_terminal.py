"""A quiet terminal: ``--no-progress`` leaves no bar from any library (the GGUF conversion's
included) and none of transformers' warnings about the model; a step line has a line of its own
beside the bar; warnings come after ``vpo rewards check``'s tables; the install asks no package
for an extra under a name it does not provide. (The demo's lines per job: tests/demo/test_demo.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vpo.cli import main

BAR_MARKS = ("%|", "it/s", "s/it", "Loading weights", "Writing model shards", "de-quantizing", "\r")


def _vpo(argv: list[str], cwd: Path, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``python -m vpo ARGV`` in a fresh interpreter, with this checkout's code (and ``env`` on top)."""
    import vpo

    src = str(Path(vpo.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "vpo", *argv], text=True, timeout=900, cwd=cwd, env=env, **kwargs)


@pytest.mark.slow
def test_no_progress_with_a_gguf_model_shows_no_bar_and_no_embedding_warning(tmp_path):
    """SmolLM2-135M from its GGUF file: transformers' own conversion bar ignored its progress switch,
    and resizing the embeddings for the new <pad> token warned that they "will be initialized
    from a multivariate normal distribution", as if the model were being changed."""
    from vpo.models import find_smollm2_gguf

    try:
        gguf = find_smollm2_gguf()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    run = _vpo(["eval", "--task", "maze", "--task-params", "size=5", "--model", str(gguf), "--answers", "1",
                "--pool", "1", "--examples", "1", "--max-new-tokens", "4", "--threads", "1", "--no-progress",
                "--out", str(tmp_path / "eval")], tmp_path, capture_output=True)
    assert run.returncode == 0, run.stderr
    shown = run.stdout + run.stderr
    for mark in BAR_MARKS:
        assert mark not in shown, (mark, shown)
    assert "multivariate normal" not in shown and run.stderr == "", run.stderr


@pytest.mark.slow
def test_smollm2_by_its_alias_shows_no_warning_the_user_cannot_act_on(tmp_path):
    """The real model with transformers at a user's default verbosity: loading and decoding SmolLM2
    warned about ``clean_up_tokenization_spaces`` on every command (tests/core/test_models.py has
    the mechanism on a tiny BPE tokenizer)."""
    from vpo.models import find_smollm2_gguf

    try:
        find_smollm2_gguf()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    run = _vpo(["eval", "--task", "maze", "--task-params", "size=5", "--model", "smollm2", "--answers", "1",
                "--pool", "2", "--examples", "1", "--max-new-tokens", "4", "--threads", "1",
                "--out", str(tmp_path / "eval")], tmp_path, env={"TRANSFORMERS_VERBOSITY": "warning"},
               capture_output=True)
    assert run.returncode == 0, run.stderr
    shown = run.stdout + run.stderr
    assert "clean_up_tokenization_spaces" not in shown and "warning" not in shown.lower(), shown


def test_the_gguf_conversion_bar_follows_transformers_progress_switch():
    """The mechanism of the test above without the model: inside the loader's block, the GGUF
    module's tqdm is off when transformers' bars are off, and on again after it."""
    pytest.importorskip("gguf")
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from vpo.models import _gguf_bar_follows_transformers

    shown = hf_logging.is_progress_bar_enabled()
    original = gguf_utils.tqdm
    try:
        hf_logging.disable_progress_bar()
        with _gguf_bar_follows_transformers():
            assert gguf_utils.tqdm(range(3)).disable
        assert gguf_utils.tqdm is original
        hf_logging.enable_progress_bar()
        with _gguf_bar_follows_transformers():
            assert gguf_utils.tqdm is original
    finally:
        (hf_logging.enable_progress_bar if shown else hf_logging.disable_progress_bar)()


def test_a_step_line_is_a_line_of_its_own_beside_the_bar(tmp_path):
    """stdout and stderr into one log (``2>&1``): a bar frame ends in a carriage return, and the
    step line was written right after it, on the same line."""
    from vpo.models import build_char_tokenizer, build_tiny_llama
    from vpo.tasks.maze.format import CompactMazeFormat

    model = tmp_path / "model"
    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(model)
    tok.save_pretrained(model)
    fmt.save(model, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method="vpo")
    run = _vpo(["train", "--task", "maze", "--model", str(model), "--method", "vpo", "--examples", "4",
                "--out", str(tmp_path / "run"), "--max-steps", "2", "--num-generations", "2",
                "--per-device-train-batch-size", "4", "--kl-beta", "0", "--force-cpu", "--max-completion-length", "16"],
               tmp_path, env={"TRANSFORMERS_VERBOSITY": "warning"},  # a user's default (the suite sets error,
               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)          # which hides the training bar)
    assert run.returncode == 0, run.stdout
    assert "train vpo: " in run.stdout  # the bar is there, in the log
    steps = [line for line in run.stdout.split("\n") if "step 1/2" in line or "step 2/2" in line]
    assert len(steps) == 2 and all(line.startswith("step ") for line in steps), steps
    assert "Loading weights" not in run.stdout and "Writing model shards" not in run.stdout


def test_warnings_come_after_the_rewards_check_tables(tmp_path, capsys, monkeypatch):
    (tmp_path / "warning_rewards.py").write_text(
        "import warnings\n"
        "def loud(prompts, completions, **kwargs):\n"
        "    warnings.warn('loud saw an odd answer', UserWarning)\n"
        "    return [1.0 for _ in completions]\n"
        "def quiet(prompts, completions, **kwargs):\n"
        "    return [0.5 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"prompt": "p", "completion": f"<response_1>a{i}</response_1>"}) + "\n"
                               for i in range(3)))
    assert main(["rewards", "check", "--reward-funcs", "warning_rewards:loud,warning_rewards:quiet", "--source",
                 str(samples), "--answers", "1"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "m = 1: --answers" and "loud saw" not in captured.err
    warned = [i for i, line in enumerate(lines) if "loud saw an odd answer" in line]
    table = [i for i, line in enumerate(lines) if line.strip().startswith(("loud", "quiet"))]
    assert warned == [len(lines) - 1] and lines[-1].startswith("warning: UserWarning: ") and max(table) < warned[0]
    assert main(["rewards", "check", "--reward-funcs", "warning_rewards:quiet", "--source", str(samples)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("m = 3: the default of --answers (m is not read")


def test_no_extra_is_asked_of_a_package_under_a_name_it_does_not_provide():
    """pyproject's extras name their packages' extras as the installed metadata spells them: pip 23
    matched `math-verify[antlr4_9_3]` against math-verify's `antlr4-9-3` and warned at every
    install (and the antlr pin it stood for did not apply)."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    checked = 0
    for group, requirements in project["optional-dependencies"].items():
        for text in requirements:
            requirement = Requirement(text)
            if not requirement.extras or requirement.name == "vpo":
                continue
            try:
                provided = importlib.metadata.metadata(requirement.name).get_all("Provides-Extra") or []
            except importlib.metadata.PackageNotFoundError:
                continue
            checked += 1
            missing = sorted(requirement.extras - set(provided))
            assert not missing, f"[{group}] {text}: {requirement.name} provides {provided}, not {missing}"
    assert "antlr4-python3-runtime==4.9.3" in project["optional-dependencies"]["math"]
    assert importlib.metadata.version("antlr4-python3-runtime") == "4.9.3"


def test_a_warning_during_a_command_is_one_line(tmp_path):
    """Python shows a warning with the file, line and source line that raised it: inside vpo's
    trainer, "return self.trainer.score_completions(...)" under the ChainFormatWarning of a real
    run. A command shows ``warning: Category: message``, one line, as ``vpo rewards check`` does."""
    code = ("import sys, warnings\n"
            "import vpo.commands.demo as demo\n"
            "from vpo.step_metrics import ChainFormatWarning\n"
            "def run(args):\n"
            "    warnings.warn('only 0 of 8 completions parsed', ChainFormatWarning, stacklevel=1)\n"
            "    return 0\n"
            "demo.run = run\n"
            "from vpo.cli import main\n"
            "sys.exit(main(['demo']))\n")
    import vpo

    src = str(Path(vpo.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "warning: ChainFormatWarning: only 0 of 8 completions parsed\n", run.stderr

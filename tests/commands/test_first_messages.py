"""Every message true, and said before the work it makes pointless: a refusal the flags alone
decide comes before the model, the rows or the checkpoint are read (each test forbids that work
and times the refusal), advice names only what applies, and a run that learned nothing because
no completion wrote the m-answer format says so at exit."""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_checkpoints import _one_line_error as refusal  # (err, seconds) of a one-line refusal, exit 2
from vpo.cli import main

REFUSED_WITHIN_S = 10.0
"""A refusal decided by the flags and headers comes within this (it took 4 to 8 s after loading a
model or building rows; here the heavy step is forbidden outright, the bound is for the rest)."""


@pytest.fixture(scope="module")
def compact_checkpoint(tmp_path_factory):
    """A tiny random checkpoint in the demo's compact maze format (a 5x5 maze model, m = 3 by its VPO method)."""
    from vpo.models import build_char_tokenizer, build_tiny_llama
    from vpo.tasks.maze.format import CompactMazeFormat

    folder = tmp_path_factory.mktemp("ckpt") / "vpo-s0"
    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    fmt.save(folder, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method="vpo", seed=0)
    return folder


@pytest.fixture
def forbid(monkeypatch):
    """``forbid(module, name)``: the work a refusal must come before fails the test if it runs."""
    def forbid_one(target: object, name: str) -> None:
        def ran(*args, **kwargs):
            pytest.fail(f"{name} ran before the refusal")
        monkeypatch.setattr(target, name, ran)
    return forbid_one


# ----- refusals the flags alone decide ----------------------------------------------------------

def test_a_single_answer_method_with_several_answers_is_refused_before_the_model_loads(
        compact_checkpoint, tmp_path, capsys, forbid):
    # before: VPOTrainer said so after the model had loaded (6.8 s with SmolLM2)
    import vpo.models

    forbid(vpo.models, "load_pretrained")
    forbid(vpo.models, "check_model_path")  # before the model path is even looked at
    err, seconds = refusal(capsys, ["train", "--task", "maze", "--model", str(compact_checkpoint), "--method", "grpo",
                                    "--answers", "3", "--out", str(tmp_path / "run")])
    assert "--answers 3: --method grpo scores one answer per rollout" in err and "vpo" in err.split("(")[-1], err
    assert seconds < REFUSED_WITHIN_S


def test_a_truncated_checkpoint_is_refused_before_the_training_rows_are_built(
        compact_checkpoint, tmp_path, capsys, forbid):
    # before: after building the training rows (8 s)
    import vpo.integrations.trl.plan

    folder = tmp_path / "cut"
    shutil.copytree(compact_checkpoint, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    forbid(vpo.integrations.trl.plan, "build_train_rows")  # the rows are the plan's
    err, seconds = refusal(capsys, ["train", "--task", "maze", "--model", str(folder), "--out", str(tmp_path / "run")])
    assert "damaged weights" in err and str(folder) in err, err
    assert seconds < REFUSED_WITHIN_S


def test_a_used_out_folder_is_refused_before_the_checkpoint_is_read(compact_checkpoint, tmp_path, capsys, forbid):
    # before: after reading the model (4 s)
    import vpo.checkpoints
    from vpo.runs import claim_out_dir, release_out_dir

    out = tmp_path / "eval"
    claim_out_dir(out, command="eval")
    release_out_dir(out)
    (out / "metrics.json").write_text("{}")
    forbid(vpo.checkpoints, "check_checkpoints")
    err, seconds = refusal(capsys, ["eval", "--model", str(compact_checkpoint), "--out", str(out)])
    assert "holds an earlier vpo eval run" in err and "--overwrite" in err, err
    assert seconds < REFUSED_WITHIN_S


def test_yaml_errors_come_before_trl_is_imported(compact_checkpoint, tmp_path):
    # before: after TRL's import (5 to 6 s idle; 80 s on a loaded machine)
    bad_syntax = tmp_path / "syntax.yaml"
    bad_syntax.write_text("learning_rate: [1e-6\n")
    bad_key = tmp_path / "key.yaml"
    bad_key.write_text("learning_rate: 1e-6\nnot_an_option: 1\n")
    good = tmp_path / "good.yaml"
    good.write_text("learning_rate: 1e-6\nlogging_first_step: true\n")  # a GRPOConfig option vpo train passes on
    code = f"""
import sys, time
from vpo.cli import main
for path in ({str(bad_syntax)!r}, {str(bad_key)!r}):
    start = time.perf_counter()
    code = main(["train", "--task", "maze", "--model", {str(compact_checkpoint)!r}, "--config", path,
                 "--out", {str(tmp_path / "run")!r}])
    print(code, round(time.perf_counter() - start, 2), "trl" in sys.modules)
"""
    import vpo

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(vpo.__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    results = [line.split() for line in run.stdout.splitlines()]
    assert [(r[0], r[2]) for r in results] == [("2", "False"), ("2", "False")], run.stdout + run.stderr
    assert all(float(r[1]) < REFUSED_WITHIN_S for r in results), results
    errors = run.stderr.strip().splitlines()
    assert "not valid YAML" in errors[0] and "unknown key 'not_an_option': not a GRPOConfig option" in errors[1]
    # a key judged valid without TRL is still read with TRL's type for it
    from vpo.integrations.trl.config import read_grpo_yaml
    from vpo.commands.train import TrainArgs

    assert read_grpo_yaml(str(good), TrainArgs)["extra"] == {"logging_first_step": True}


# ----- advice that applies ----------------------------------------------------------------------

def test_an_unknown_task_is_named_as_unknown(compact_checkpoint, tmp_path, capsys):
    # before: "pass --task maze, or give --task-params to use it on mazee anyway"
    err, seconds = refusal(capsys, ["eval", "--task", "mazee", "--model", str(compact_checkpoint),
                                    "--out", str(tmp_path / "e")])
    assert "unknown task 'mazee'" in err and "maze" in err.split("known tasks:")[-1], err
    assert "--task-params" not in err and seconds < REFUSED_WITHIN_S


def test_openevolve_on_a_checkpoint_of_another_task_offers_no_flag_it_lacks(compact_checkpoint, tmp_path, capsys):
    # before: told to pass --task maze or --task-params, which `vpo search openevolve` refuses
    pytest.importorskip("openevolve")
    err, seconds = refusal(capsys, ["search", "openevolve", "--model", str(compact_checkpoint), "--source",
                                    "fixtures", "--out", str(tmp_path / "oe")])
    assert "trained on task 'maze'" in err and "vpo search openevolve works on task 'code' only" in err, err
    assert "--task maze" not in err and "--task-params" not in err and seconds < REFUSED_WITHIN_S


def test_a_missing_tokenizer_names_the_files_it_looked_for(compact_checkpoint, tmp_path):
    # before: "Couldn't instantiate the backend tokenizer from one of: ..." and no file named
    from vpo.checkpoints import CheckpointError, check_checkpoint

    folder = tmp_path / "no-tokenizer"
    shutil.copytree(compact_checkpoint, folder)
    (folder / "tokenizer.json").unlink()
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as caught:
        check_checkpoint(folder, task="maze")
    message = str(caught.value)
    assert "the tokenizer does not load" in message and "no tokenizer file" in message, message
    assert "tokenizer.json" in message and "tokenizer_config.json" in message  # looked for, and what is there
    assert time.perf_counter() - start < REFUSED_WITHIN_S


def test_a_truncated_safetensors_header_reads_as_a_cut_file(tmp_path):
    # before: "the header claims 3000 bytes but the file has 992", as if the file should be 3000 bytes
    import struct

    from vpo.checkpoints import read_safetensors_header

    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 3000) + b"{" * 992)
    with pytest.raises(ValueError) as caught:
        read_safetensors_header(path)
    message = str(caught.value)
    assert "model.safetensors is 1000 bytes, but its first 8 bytes announce a 3000-byte header" in message
    assert "cut short, or not safetensors" in message


# ----- checkpoints of a run, resumed and evaluated ---------------------------------------------

def _train_argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--task", "maze", "--model", str(model), "--method", "vpo", "--examples", "4", "--out", str(out),
            "--num-generations", "2", "--per-device-train-batch-size", "4", "--kl-beta", "0", "--force-cpu",
            "--no-progress", "--save-steps", "1", "--max-completion-length", "16", *extra]


def test_every_checkpoint_carries_the_run_format_and_a_resume_says_where_from(compact_checkpoint, tmp_path, capsys):
    """`vpo train --save-steps` writes the run's format record into every checkpoint-N; `vpo eval`
    on one prompts the compact format with the run's m (before: m = 1, the 9x9 text prompts, all
    zeros); one without a record inherits its run folder's and says so; a resume names its checkpoint."""
    run = tmp_path / "run"
    assert main(_train_argv(compact_checkpoint, run, "--max-steps", "2")) == 0
    capsys.readouterr()
    for step in (1, 2):
        record = json.loads((run / f"checkpoint-{step}" / "vpo_format.json").read_text())
        assert record["format"] == "maze-compact" and record["answers"] == 3 and record["method"] == "vpo"
        assert record["task"] == "maze" and record["task_params"] == {"size": 5, "reward_mode": "linear"}
    eval_argv = ["eval", "--pool", "3", "--examples", "2", "--max-new-tokens", "8", "--no-progress", "--threads", "1"]
    assert main([*eval_argv, "--model", str(run / "checkpoint-1"), "--out", str(tmp_path / "e1")]) == 0
    out = capsys.readouterr().out
    assert f"m = 3: recorded in {run / 'checkpoint-1' / 'vpo_format.json'}" in out, out
    metrics = json.loads((tmp_path / "e1" / "metrics.json").read_text())
    assert metrics["eval"]["answers"] == 3 and "maze-compact prompts" in metrics["intro"]
    assert metrics["task"]["params"] == {"size": 5, "reward_mode": "linear"}
    # the report's configuration holds what this evaluation used (not OpenEvolve's "iterations": 200),
    # its timings CPU seconds too, and it says what a reward call is (6 answers, some of them empty)
    assert "iterations" not in metrics["config"] and "search" not in metrics["config"]
    assert all(v["cpu"] is not None for v in metrics["timings"].values())
    calls = metrics["reward_failures"]["calls"]
    assert f"0 of {calls} reward calls failed" in " ".join(metrics["notes"])
    assert "A reward call scores one non-empty answer" in " ".join(metrics["notes"])
    assert "the 2 chains x m = 3 hold 6 answers" in " ".join(metrics["notes"])
    # best-of-n reads the same record, and says how many of its reward calls failed (search.json has them too)
    assert main(["search", "best-of-n", "--model", str(run / "checkpoint-2"), "--pool", "3", "--examples", "1",
                 "--max-new-tokens", "4", "--threads", "1", "--no-progress", "--out", str(tmp_path / "bon")]) == 0
    out = capsys.readouterr().out
    failures = json.loads((tmp_path / "bon" / "search.json").read_text())["checkpoints"]["checkpoint-2"][
        "reward_failures"]
    assert "checkpoint-2: m = 3: recorded in" in out
    assert f"checkpoint-2: 0 of {failures['calls']} reward calls failed (one call scores one non-empty answer" in out
    # a checkpoint-N written before records landed in each: its run folder's record, and the terminal says so
    (run / "checkpoint-1" / "vpo_format.json").unlink()
    assert main([*eval_argv, "--model", str(run / "checkpoint-1"), "--out", str(tmp_path / "e2")]) == 0
    out = capsys.readouterr().out
    assert f"m = 3: recorded in {run / 'vpo_format.json'} (inherited: checkpoint-1 has no vpo_format.json" in out, out
    assert "prompt format and task parameters: " in out
    assert "maze-compact prompts" in json.loads((tmp_path / "e2" / "metrics.json").read_text())["intro"]
    # the resume names its checkpoint and step before training goes on, and transformers' warning that
    # the tied lm_head.weight is "missing" from the checkpoint (saved once, with the embeddings) is gone
    import logging

    import transformers

    warned: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warned.append(record.getMessage())
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addHandler(handler)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    try:
        assert main(_train_argv(compact_checkpoint, run, "--max-steps", "3", "--resume-from-checkpoint",
                                "latest")) == 0
    finally:
        transformers.logging.set_verbosity(verbosity)
        trainer_logger.removeHandler(handler)
    assert not [message for message in warned if "missing keys" in message], warned
    lines = capsys.readouterr().out.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("resuming from ")]
    assert said and lines[said[0]] == f"resuming from {run / 'checkpoint-2'} (step 2)", lines
    assert said[0] < next(i for i, line in enumerate(lines) if line.startswith("training: "))
    assert json.loads((run / "checkpoint-3" / "vpo_format.json").read_text())["answers"] == 3


def test_a_run_in_which_no_completion_parsed_says_so_at_exit(tmp_path, capsys):
    # before: exit 0, "objective n/a", first_reward null, and the reason only in train_log.jsonl
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    model = tmp_path / "model"
    tok = build_char_tokenizer(string.printable)
    build_tiny_qwen2(tok, seed=0).save_pretrained(model)
    tok.save_pretrained(model)
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": p, "keyword": k}) + "\n"
                              for p, k in (("Name a red fruit.", "apple"), ("Name a colour.", "blue"))))
    assert main(["train", "--reward-funcs", "own_reward_funcs:keyword,own_reward_funcs:brevity", "--source",
                 str(source), "--model", str(model), "--method", "vpo", "--output-dir", str(tmp_path / "run"),
                 "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2",
                 "--max-completion-length", "8", "--force-cpu", "--no-progress", "--no-save"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("no completion wrote its answers in the numbered tags of an m = 3 chain"), lines
    assert json.loads(lines[-2])["steps"] == 1  # at exit, after the run's summary
    for remedy in ("--untagged-fallback", "`vpo warmup`", "fewer answers"):
        assert remedy in lines[-1]

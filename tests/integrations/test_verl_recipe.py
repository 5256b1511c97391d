"""``recipes/verl/run.sh``'s early stops and ``vpo.integrations.verl_recipe`` (no verl needed):
a text task without real data or with fewer rows than one step stops before any model loads,
verl's step count and checkpoint folders, and the per-step reward metrics by hand."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vpo.export import export, reads_shipped_sample
from vpo.integrations.verl_recipe import plan_run, reward_step_metrics, verl_steps

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "recipes" / "verl" / "run.sh"


def run_recipe(task: str, method: str, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, bool]:
    """run.sh for real (no DRY_RUN) with a model path that does not exist, and whether it started
    verl's entry point (``ENTRY``): its interpreter (``PYTHON``) is a wrapper that writes down each
    command line it runs, so a stop before verl is read, not timed."""
    calls = tmp_path / "python-calls.txt"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    entry = env.get("ENTRY", "vpo.integrations.verl_main")
    full = {**os.environ, "PYTHON": str(wrapper), "MODEL": str(tmp_path / "no-such-model"), "ENTRY": entry,
            "DATA_DIR": str(tmp_path / "data"), "CKPT_DIR": str(tmp_path / "ckpt"), **env}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run(["bash", str(RUN_SH), task, method], env=full, capture_output=True, text=True, timeout=600)
    ran = calls.read_text().splitlines() if calls.is_file() else []
    return out, any(line.startswith(f"-m {entry}") for line in ran)


@pytest.mark.parametrize("task", ["musique", "eureqa", "toolcall", "code"])
def test_text_task_without_source_stops_before_verl(task, tmp_path):
    out, verl_started = run_recipe(task, "vpo", tmp_path)
    assert out.returncode != 0
    assert "--source" in out.stderr and f"task {task} needs real data" in out.stderr
    assert not (tmp_path / "data" / "train.parquet").exists() and not (tmp_path / "ckpt").exists()
    assert "verl" not in out.stderr.lower() and not verl_started  # stopped at the data step, not in verl


def test_fixture_export_already_in_data_dir_stops_naming_source(tmp_path):
    export("musique", tmp_path / "data", fmt="verl", train=10, test=2, answers=3)  # the shipped sample
    out, _ = run_recipe("musique", "vpo", tmp_path)
    assert out.returncode == 1
    assert "shipped sample" in out.stderr and "--source" in out.stderr
    code_fixture = export("code", tmp_path / "code", fmt="verl", train=10, test=2, source="fixtures")
    assert code_fixture["counts"]["train"] > 0 and reads_shipped_sample("code", "fixtures")
    assert not reads_shipped_sample("maze", None) and reads_shipped_sample("musique", None)
    assert reads_shipped_sample("math", "fixture:gsm8k") and not reads_shipped_sample("musique", "data/m.jsonl")


def test_the_recipe_runner_sees_verl_start(tmp_path):
    """What the tests above read: with rows for a step, run.sh starts its entry point (here a
    module that only prints, in place of verl's)."""
    out, verl_started = run_recipe("maze", "grpo", tmp_path, ENTRY="platform", TRAIN_BATCH_SIZE="8",
                                   EXPORT_ARGS="--train 40 --test 4 --size 5")
    assert verl_started, out.stderr


def test_fewer_rows_than_a_step_stops_naming_train_batch_size(tmp_path):
    out, verl_started = run_recipe("maze", "grpo", tmp_path, EXPORT_ARGS="--train 40 --test 4 --size 5")
    assert out.returncode == 1 and (tmp_path / "data" / "train.parquet").exists()
    assert "40 rows, fewer than TRAIN_BATCH_SIZE=128" in out.stderr and "0 steps" in out.stderr
    assert not verl_started


def test_plan_counts_verl_steps_and_checkpoints(tmp_path):
    export("maze", tmp_path, fmt="verl", train=300, test=4, answers=3, size=5)
    plan = plan_run(tmp_path, task="maze", train_batch_size=128, epochs=2, save_freq=3, test_freq=2)
    assert (plan.train_rows, plan.steps_per_epoch, plan.total_steps) == (300, 2, 4)
    assert plan.checkpoints == (3, 4) and plan.validations == (2, 4)
    with pytest.raises(ValueError, match="holds 'maze' data, not 'musique'"):
        plan_run(tmp_path, task="musique", train_batch_size=128, epochs=1)
    out = subprocess.run([sys.executable, "-m", "vpo.integrations.verl_recipe", "plan", str(tmp_path), "--task", "maze",
                          "--train-batch-size", "100", "--epochs", "3", "--save-freq", "50", "--ckpt-dir", "ck"],
                         capture_output=True, text=True, check=True)
    assert "3 steps per epoch x 3 epochs = 9 steps" in out.stdout and "ck/global_step_9/actor" in out.stdout


def test_readme_merge_command_names_the_last_checkpoint():
    """The maze recipe (1000 train rows, 128 prompts a step, 2 epochs) ends at verl's step 14."""
    readme = (ROOT / "recipes" / "verl" / "README.md").read_text()
    steps = set(re.findall(r"maze-\w+/global_step_(\d+)/actor", readme))
    assert steps == {str(verl_steps(1000, 128, 2)[1])} == {"14"}


def test_reward_step_metrics_by_hand():
    infos = [  # two prompts: a has scores 1, 0 (std 0.5), b has 0.5, 0.5 (std 0: zero advantages)
        {"score": 1.0, "set_score": 1.0, "acc": 1.0, "answers_parsed": 3, "objective_best": "[1.0, 0.5]", "tag": "x"},
        {"score": 0.0, "set_score": 0.0, "acc": 0.0, "answers_parsed": 0, "objective_best": "[0.0, 0.0]", "tag": "y"},
        {"score": 0.5, "set_score": 0.5, "acc": 1.0, "answers_parsed": 2, "objective_best": "[0.5, 1.0]", "tag": "z"},
        {"score": 0.5, "set_score": 0.5, "acc": 0.0, "answers_parsed": 1, "objective_best": "[1.0, 0.5]", "tag": "w"},
    ]
    got = reward_step_metrics(infos, ["a", "a", "b", "b"])
    assert got == {  # the names TRL and OpenRLHF log too (vpo.step_metrics)
        "vpo/score_mean": 0.5, "vpo/set_score": 0.5, "vpo/acc": 0.5, "vpo/answers_parsed": 1.5,
        "vpo/duplicate_rate": 0.0, "vpo/objective/0": 0.625, "vpo/objective/1": 0.5,
        "vpo/group_std": 0.25, "vpo/frac_zero_std": 0.5,
    }
    ragged = [dict(infos[0], objective_best="[1.0]"), infos[1]]  # D varies (code): no per-index means
    assert not any("objective" in k for k in reward_step_metrics(ragged, ["a", "a"]))
    assert math.isclose(reward_step_metrics(ragged, ["a", "b"])["vpo/group_std"], 0.0)
    with pytest.raises(ValueError, match="2 reward infos for 1 group ids"):
        reward_step_metrics(infos[:2], ["a"])
    assert json.dumps(reward_step_metrics([], []))  == "{}"

"""Kill and resume: a ``vpo train`` run killed with SIGKILL after a checkpoint and resumed with
``--resume-from-checkpoint latest`` ends where the uninterrupted run ends; a folder holding another
run is refused."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_cli_train import _tiny_model_dir  # a tiny Qwen2 with a character tokenizer for 5x5 mazes

from vpo.cli import main

TIMING_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "step_time", "total_flos")
"""Log entries that measure time (they differ between any two runs)."""


def _train_argv(model, out, steps, *extra, method="vpo"):
    return ["train", "--task", "maze", "--task-params", "size=5", "--model", str(model), "--method", method,
            "--examples", "8", "--out", str(out), "--max-steps", str(steps), "--save-steps", "2",
            "--num-generations", "2", "--per-device-train-batch-size", "4", "--max-completion-length", "16",
            "--learning-rate", "1e-2", "--kl-beta", "0", "--force-cpu", *extra]


def _history(out, step):
    state = json.loads((out / f"checkpoint-{step}" / "trainer_state.json").read_text())
    return state["global_step"], [{k: v for k, v in entry.items() if k not in TIMING_KEYS and "time" not in k}
                                  for entry in state["log_history"]]


def _weights(folder):
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def test_train_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(tmp_path, capsys):
    import numpy as np

    model = _tiny_model_dir(tmp_path)
    steps = 6
    reference = tmp_path / "reference"
    assert main(_train_argv(model, reference, steps)) == 0
    expected = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])

    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "vpo", *_train_argv(model, killed, steps)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    from vpo.checkpoints import latest_complete_checkpoint

    # killed once checkpoint-2 is whole (its trainer_state.json can be seen half-written)
    while latest_complete_checkpoint(killed) is None:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "no checkpoint within 300 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (killed / f"checkpoint-{steps}").exists()  # really interrupted before the end

    # the same command again is refused (the folder holds that run); so is another method's resume
    assert main(_train_argv(model, killed, steps)) == 2
    assert "pass --resume-from-checkpoint to continue it" in capsys.readouterr().err
    assert main(_train_argv(model, killed, steps, "--resume-from-checkpoint", "latest", method="grpo")) == 2
    err = capsys.readouterr().err
    assert "method 'vpo' there, 'grpo' here" in err and len(err.strip().splitlines()) == 1

    assert main(_train_argv(model, killed, steps, "--resume-from-checkpoint", "latest")) == 0
    resumed = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])
    assert resumed == expected  # steps, first and last reward
    assert _history(killed, steps) == _history(reference, steps)  # every logged metric of every step
    want, got = _weights(reference), _weights(killed)
    assert want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)

    # the finished run resumed once more: it says so and changes nothing (before: "step 7/6", and the
    # model saved over the run's own)
    before = _files(killed)
    assert main(_train_argv(model, killed, steps, "--resume-from-checkpoint", "latest")) == 0
    out = capsys.readouterr().out
    assert f"is at step {steps} of {steps} (--max-steps {steps}); nothing to train, nothing changed" in out, out
    assert "step 7" not in out and _files(killed) == before


def _files(folder):
    """Every file under ``folder`` and a hash of its bytes (the lock file aside)."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("state,needle", [
    ('{"global_step": -1}', "field 'global_step' is -1, expected an integer >= 0"),
    ('{"log_history": []}', "field 'global_step' is missing"),
    ('{"global_step": 2', "trainer_state.json is not readable JSON"),
])
def test_a_damaged_trainer_state_is_named_before_the_resume(tmp_path, capsys, state, needle):
    # before: a KeyError / JSONDecodeError traceback from inside transformers' resume
    import shutil

    model = _tiny_model_dir(tmp_path)
    out = tmp_path / "run"
    shutil.copytree(model, out / "checkpoint-2")
    (out / "checkpoint-2" / "trainer_state.json").write_text(state)
    assert main(_train_argv(model, out, 4, "--resume-from-checkpoint", str(out / "checkpoint-2"))) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and str(out / "checkpoint-2" / "trainer_state.json") in err and len(err.splitlines()) == 1


def test_a_grpo_resume_of_a_vpo_folder_written_before_run_records_is_refused(tmp_path, capsys):
    # a folder from before run records: vpo_train.json's summary says what ran there
    out = tmp_path / "run"
    (out / "checkpoint-200").mkdir(parents=True)
    (out / "vpo_train.json").write_text(json.dumps({"summary": {"method": "vpo", "task": "maze", "answers": 3}}))
    model = _tiny_model_dir(tmp_path)
    assert main(["train", "--task", "maze", "--model", str(model), "--method", "grpo", "--out", str(out),
                 "--resume-from-checkpoint", str(out / "checkpoint-200")]) == 2
    err = capsys.readouterr().err
    assert "method 'vpo' there, 'grpo' here" in err, err


def test_trackers_that_cannot_start_fail_before_the_model_loads(tmp_path, monkeypatch, capsys):
    # before: wandb's own traceback about 24 s in, after the model loaded
    from transformers.integrations import integration_utils

    model = tmp_path / "model"
    model.mkdir()  # an empty folder: reaching the model check would print another error
    base = ["train", "--task", "maze", "--model", str(model), "--examples", "2", "--out", str(tmp_path / "run")]
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "NETRC", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(integration_utils, "is_wandb_available", lambda: True)
    monkeypatch.setattr(integration_utils, "is_mlflow_available", lambda: True)
    start = time.perf_counter()
    assert main(base + ["--report-to", "wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--report-to wandb: not logged in to api.wandb.ai" in err and "wandb login" in err
    assert len(err.splitlines()) == 1 and time.perf_counter() - start < 10
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert main(base + ["--report-to", "wandb"]) == 2
    assert "no config.json" in capsys.readouterr().err  # logged in: the next check speaks
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing listens
    assert main(base + ["--report-to", "mlflow"]) == 2
    assert "MLFLOW_TRACKING_URI http://127.0.0.1:9 does not answer" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "ftp://somewhere")
    assert main(base + ["--report-to", "mlflow"]) == 2
    assert "unknown scheme 'ftp'" in capsys.readouterr().err


def _results(out):
    """The numbers of a demo report that do not measure time (timings, load and paths differ)."""
    metrics = json.loads((out / "metrics.json").read_text())

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    # reward_failures counts an invocation's calls, not a result (NOT_RESULTS)
                    if not any(word in k for word in ("second", "wall", "cpu", "resumed_from", "reward_failures"))}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return {key: strip(metrics[key]) for key in ("methods", "paired", "training", "objective_space", "comparison",
                                                 "findings", "runs", "warmup")}


def test_demo_killed_in_the_middle_of_rl_reports_what_an_uninterrupted_run_reports(tmp_path, capsys):
    pytest.importorskip("trl")
    flags = ["demo", "--quick", "--methods", "vpo", "--warmup-examples", "256", "--rl-steps", "6", "--save-steps",
             "2", "--eval-examples", "2", "--pool", "6", "--workers", "1", "--no-progress"]
    assert main([*flags, "--out", str(tmp_path / "whole")]) == 0
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "vpo", *flags, "--out", str(killed)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run_dir = killed / "checkpoints" / "vpo-s0"
    deadline = time.time() + 600
    while not (run_dir / "trainer" / "checkpoint-2" / "trainer_state.json").is_file():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "no RL checkpoint within 600 s"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (run_dir / "done.json").exists()  # killed in the middle of RL
    capsys.readouterr()
    assert main([*flags, "--out", str(killed)]) == 0
    assert "vpo seed 0: resuming from" in capsys.readouterr().out
    assert _results(killed) == _results(tmp_path / "whole")
    # a resumed demo vouches for the finished checkpoints it reads: a damaged one is one line
    weights = killed / "checkpoints" / "warmup" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-50])
    (killed / "eval" / "warmup-m1.npz").unlink()  # so this invocation samples from the warm start again
    assert main([*flags, "--out", str(killed)]) == 2
    err = capsys.readouterr().err.strip()
    assert "checkpoints/warmup: damaged weights" in err and len(err.splitlines()) == 1

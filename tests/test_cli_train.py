"""``vpo train`` end to end: a config-built tiny Qwen2 saved to disk, the maze task, 2 steps."""

from __future__ import annotations

import json

import pytest

from vpo.cli import main
from vpo.commands.train import RLConfig, build_train_rows, parse_params, resolve_answers


def test_parse_params_and_answers():
    assert parse_params(["size=5", "reward_mode=linear", "x=1.5"]) == {
        "size": 5, "reward_mode": "linear", "x": 1.5}
    with pytest.raises(ValueError, match="key=value"):
        parse_params(["size"])
    assert resolve_answers("vpo", None) == 3 and resolve_answers("grpo", None) == 1
    assert resolve_answers("grpo", 2) == 2
    with pytest.raises(ValueError):
        resolve_answers("vpo", 0)


def test_help_lists_presets(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for flag in ("--method", "--lora", "--answers", "--data", "--kl-beta", "--clip-epsilon"):
        assert flag in out


def test_missing_required_flags(capsys):
    assert main(["train", "--model", "x"]) == 2
    assert "--task is required" in capsys.readouterr().err


def test_build_rows_from_task_and_export(tmp_path):
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    rows = build_train_rows(task, 3, n=3, seed=1)
    assert len(rows) == 3 and "<route_3>" in rows[0]["prompt"]
    assert json.loads(rows[0]["example"])["size"] == 5
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    again = build_train_rows(task, 3, data=str(path))
    assert [r["prompt"] for r in again] == [r["prompt"] for r in rows]
    with pytest.raises(ValueError, match="answers=3"):
        build_train_rows(task, 1, data=str(path))


def _tiny_model_dir(tmp_path):
    pytest.importorskip("trl")
    from vpo.models import build_char_tokenizer, build_tiny_qwen2
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    chars = set(task.prompt(example, 1) + task.prompt(example, 3)) | set("UDLR")
    tok = build_char_tokenizer(sorted(chars), extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])
    folder = tmp_path / "model"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("method,lora", [("vpo", False), ("grpo", True)])
def test_train_two_steps(tmp_path, capsys, method, lora):
    folder = _tiny_model_dir(tmp_path)
    out = tmp_path / "run"
    argv = ["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder),
            "--method", method, "--num-examples", "4", "--output-dir", str(out),
            "--max-steps", "2", "--num-generations", "4", "--per-device-train-batch-size", "4",
            "--max-completion-length", "6", "--learning-rate", "1e-3", "--force-cpu"]
    if lora:
        pytest.importorskip("peft")
        argv += ["--lora", "--lora-rank", "2", "--lora-alpha", "4", "--kl-beta", "0"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1])
    assert summary["steps"] == 2 and summary["method"] == method
    assert summary["answers"] == (3 if method == "vpo" else 1)
    record = json.loads((out / "vpo_train.json").read_text())
    assert record["rl"]["kl_beta"] == (0.0 if lora else 1e-3)
    assert (out / ("adapter_config.json" if lora else "config.json")).exists()
    assert (out / "tokenizer.json").exists()


def test_rl_config_defaults_are_the_paper_presets():
    cfg = RLConfig()
    assert (cfg.learning_rate, cfg.lr_scheduler_type, cfg.weight_decay) == (1e-6, "constant", 0.01)
    assert (cfg.clip_epsilon, cfg.kl_beta, cfg.num_generations, cfg.temperature) == (0.2, 1e-3, 8, 1.0)
    assert cfg.resolved_epochs("maze") == 2 and cfg.resolved_epochs("eureqa") == 6
    assert cfg.resolved_epochs("other") == 1
    assert cfg.resolved_completion_length(3) == 2 * cfg.resolved_completion_length(1)


def test_eval_reads_lora_adapter_checkpoint(tmp_path, capsys):
    # `vpo train --lora` saves only the adapter; `vpo eval` loads the base named in vpo_train.json
    pytest.importorskip("peft")
    import math

    folder = _tiny_model_dir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder), "--method", "grpo",
                 "--num-examples", "2", "--output-dir", str(out), "--max-steps", "1", "--num-generations", "2",
                 "--per-device-train-batch-size", "2", "--max-completion-length", "4", "--force-cpu",
                 "--lora", "--lora-rank", "2", "--lora-alpha", "4"]) == 0
    report = tmp_path / "eval"
    assert main(["eval", "--task", "maze", "--task-params", "size=5", "--model", str(out), "--pool", "2",
                 "--examples", "1", "--max-new-tokens", "4", "--no-progress", "--out", str(report)]) == 0
    metrics = json.loads((report / "metrics.json").read_text())
    (entry,) = metrics["methods"].values()
    assert all(math.isfinite(x) for x in entry["best_at_k"]["mean"])


def test_train_from_a_demo_checkpoint_keeps_its_format_and_task(tmp_path, capsys):
    # issue #16.2: the compact demo format and the recorded 5x5 task, not the task's own prompts
    pytest.importorskip("trl")
    from vpo.demo.format import CompactMazeFormat
    from vpo.formats import FORMAT_FILE, load_format
    from vpo.models import build_char_tokenizer, build_tiny_llama

    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    ckpt = tmp_path / "demo-vpo"
    build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    fmt.save(ckpt, task="maze", task_params={"size": 5, "reward_mode": "linear"}, method="vpo", seed=0)
    out = tmp_path / "run"
    argv = ["train", "--task", "maze", "--model", str(ckpt), "--method", "vpo", "--answers", "3", "--examples", "2",
            "--out", str(out), "--max-steps", "1", "--num-generations", "2", "--per-device-train-batch-size", "2",
            "--force-cpu", "--kl-beta", "0"]
    assert main(argv) == 0
    record = json.loads((out / FORMAT_FILE).read_text())
    assert record["format"] == "maze-compact" and record["task_params"] == {"size": 5, "reward_mode": "linear"}
    assert isinstance(load_format(out, None), CompactMazeFormat)
    capsys.readouterr()
    assert main(argv + ["--task-params", "size=9"]) == 2
    assert "size=9" in capsys.readouterr().err


def test_a_missing_model_fails_at_once_in_one_line(tmp_path, capsys):
    import time

    start = time.perf_counter()
    for model in (str(tmp_path / "nope"), "./nope", "nobody/not-cached-model", "x.gguf"):
        assert main(["train", "--task", "maze", "--model", model]) == 2
        err = capsys.readouterr().err.strip()
        assert "--model" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert time.perf_counter() - start < 10


def test_a_verl_export_given_to_train_is_named(tmp_path, capsys):
    from vpo.export import export

    export("maze", tmp_path / "data", fmt="verl", train=2, test=0, size=5)
    assert main(["train", "--task", "maze", "--task-params", "size=5", "--model", str(tmp_path),
                 "--source", str(tmp_path / "data" / "train.parquet")]) == 2
    err = capsys.readouterr().err
    assert "looks like a verl export" in err and "--format trl" in err


@pytest.mark.parametrize("argv", [
    ["train", "--task", "maze", "--model", "{model}"],
    ["eval", "--task", "maze", "--model", "{model}"],
    ["search", "best-of-n", "--task", "maze", "--model", "{model}"],
    ["search", "openevolve", "--task", "code", "--model", "{model}"],
    ["data", "export", "maze", "--train", "1", "--test", "0"],
    ["demo", "--quick"],
])
def test_out_pointing_at_a_file_is_one_line_at_once(tmp_path, capsys, argv):
    # issue #16.8: before any work, one line, no traceback
    import time

    model = tmp_path / "model"
    model.mkdir()
    afile = tmp_path / "taken.txt"
    afile.write_text("x")
    start = time.perf_counter()
    assert main([a.replace("{model}", str(model)) for a in argv] + ["--out", str(afile)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out" in err and "is a file" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert time.perf_counter() - start < 10 and afile.read_text() == "x"

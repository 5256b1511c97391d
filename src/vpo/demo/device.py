"""Which device the demo runs on: the memory its worker processes hold (on a GPU, each its own
share of the card), and what its report says about the device and the paper's setting.

Usage::

    from vpo.demo.device import describe_setting, device_record, plan_cuda, worker_memory
    peak, words = worker_memory(cfg, task, fmt, examples, workers=1)          # CPU
    plan = plan_cuda(cfg, fmt, examples, device="cuda", workers=0, jobs=10)  # a GPU: workers, shares, batch
    describe_setting(metrics, cfg, device_record(cfg.torch_device()))        # after build_metrics

On a GPU (docs/gpu.md, "The demo's workers on one GPU") the processes of a run take
``CARD_SHARE`` of the free memory together; each worker is capped at an equal part of it
(``torch.cuda.set_per_process_memory_fraction``, ``enter_share``), sizes its evaluation batch
inside that part, frees its cached blocks between its RL run and its evaluation
(``job_memory``), and records what it reserved beside the estimate (``logs/cuda_memory.jsonl``).
``--workers 0`` on a GPU takes ``CUDA_WORKERS`` workers at most, fewer where the memory holds fewer.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vpo.demo.config import DemoConfig
from vpo.demo.results import PAPER_REWARD
from vpo.workload import MemoryEstimate

CUDA_WORKERS = 2
"""Worker processes that share one GPU when ``--workers 0``. Basis, the first H100 run
(../shared/notes/gpu-first-run.md, the 27M preset): an RL step took 0.52 s (GRPO) and 0.99 s (VPO)
with 2 workers, and 0.94 s (GRPO, Max@K) and 2.1 s (VPO, Multi-RLVR) with 4, so the card ran about
3 RL steps a second either way. Processes time-share one GPU, and a small model's steps are bound by
kernel launches and Python, which the card's time slices serialise: past 2 workers, more only hold
more memory. The GPU check's step d records the gain again (the runs' summed seconds over the wall)."""
CARD_SHARE = 0.9
"""Share of the GPU's free memory (at the start) that a demo's processes hold together: the rest
is for their CUDA contexts (``vpo.workload.CUDA_CONTEXT_BYTES`` each, outside the allocator) and
headroom. ``VPO_DEMO_CARD_SHARE`` sets another share (the GPU check leaves room for its other steps)."""
PLAN_ENV = "VPO_DEMO_CUDA_PLAN"
"""Environment variable that hands the parent's ``CudaPlan`` to the worker processes it spawns."""


def device_record(device: str) -> dict[str, Any]:
    """{"device": "cuda" | "cpu", "name": what the report calls it, "torch": torch's version}; the
    GPU's name comes from torch (e.g. "NVIDIA H100 80GB HBM3")."""
    import torch

    record: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda"):
        record["name"] = torch.cuda.get_device_name(torch.device(device))
        record["cuda"] = torch.version.cuda
    else:
        record["name"] = "CPU"
    return record


def paper_setting(cfg: DemoConfig) -> bool:
    """Whether this run evaluates on the paper's own test mazes (size 9, the "paper" protocol)."""
    from vpo.tasks.maze.generator import default_protocol

    return default_protocol(cfg.size) == "paper" and cfg.size == 9


def describe_setting(metrics: dict[str, Any], cfg: DemoConfig, device: dict[str, Any]) -> None:
    """Name the device in the report's title, set-up and notes (``metrics`` from
    ``vpo.demo.results.build_metrics``, changed in place); on the paper's 9x9 mazes, say so
    beside the paper's best@30 table instead of calling the settings different."""
    params = metrics.get("warmup", {}).get("params")
    size = f"a {params / 1e6:.1f}M-parameter Llama" if params and params >= 1e6 else "a tiny Llama"
    metrics["title"] = f"VPO maze demo: {size} on {device['name']}"
    metrics["device"] = device
    ran_on = (f"Ran on {device['name']} (torch {device['torch']}"
              + (f", CUDA {device['cuda']})" if device.get("cuda") else ")") + ", float32 weights.")
    metrics.setdefault("notes", []).insert(0, ran_on)
    if cfg.preset != "none":
        metrics["notes"].insert(1, f"Preset {cfg.preset!r}" + (" with --quick: its smoke-test size, so the numbers "
                                                                "check the pipeline, not the methods."
                                                                if cfg.quick else "."))
    if not paper_setting(cfg) or not metrics.get("comparison"):
        return
    comparison = metrics["comparison"]
    comparison["caption"] = (
        f"This demo on the paper's own mazes: RL on its 1,000 train mazes, best@{cfg.pool} on the first "
        f"{cfg.eval_examples} of its 100 test mazes (9x9, {cfg.reward_mode} reward, m = {cfg.answers}), mean over "
        f"{cfg.seeds} seed(s), on {device['name']}. The mazes and the metric are the paper's"
        + ("" if (cfg.pool, cfg.eval_examples) == (30, 100) else
           " (the paper's own evaluation: best@30 on all 100 test mazes, as the preset without --quick does)")
        + f"; the model is not: {size} built from a config and warmed up on random walks, where the paper "
        "starts from Qwen3-4B, so the absolute values differ and the comparison is the methods' order and the "
        "diversity gap. " + PAPER_REWARD[cfg.reward_mode])



# ----- memory -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CudaPlan:
    """How a demo's processes share one GPU: ``workers`` processes, each capped at ``share``
    bytes of allocator reserve and sampling ``eval_batch`` chains per call; the estimates (live
    tensors) of one RL run, one evaluation batch and the warm-up, and the card's memory."""

    device: str
    workers: int
    share: int
    usable: int
    """Allocator reserve of all the processes together (the warm-up's cap, alone before the workers)."""
    card_share: float
    eval_batch: int
    rl: int
    pool: int
    warmup: int
    free: int
    total: int
    why: str
    answers: dict[str, int] = field(default_factory=dict)
    """m of each job name (``answer_counts``)."""
    by_answers: dict[str, dict[str, int]] = field(default_factory=dict)
    """{str(m): {"rl", "pool": live-tensor estimate}} of a job whose chains hold m answers; ``rl`` and
    ``pool`` are the largest of them."""

    def estimate(self, kind: str, job: str = "") -> int:
        """The live-tensor estimate of a ``kind`` ("rl", "pool", "warmup") job named ``job`` (e.g.
        "rl grpo-s0", "pool warmup-m1"): its own m's where the plan knows it, else the largest."""
        name = re.sub(r"-s\d+$", "", job.split(" ", 1)[-1])
        m = self.answers.get(name)
        return self.by_answers.get(str(m), {}).get(kind, getattr(self, kind))

    def words(self) -> str:
        from vpo.workload import human_bytes, reserved_bytes

        return (f"{self.workers} worker(s) of {human_bytes(self.share)} each ({self.card_share:g} of "
                f"{human_bytes(self.free)} free on a {human_bytes(self.total)} card); a worker's estimated reserve: "
                f"RL {human_bytes(reserved_bytes(self.rl))}, evaluation batch of {self.eval_batch} chains "
                f"{human_bytes(reserved_bytes(self.pool))}; warm-up {human_bytes(reserved_bytes(self.warmup))}")

    def export(self) -> None:
        """Hand this plan to the worker processes started after this call (``enter_share``)."""
        os.environ[PLAN_ENV] = json.dumps(asdict(self))


def card_share() -> float:
    """``CARD_SHARE``, or ``VPO_DEMO_CARD_SHARE`` when set (a number in (0, 1])."""
    text = os.environ.get("VPO_DEMO_CARD_SHARE", "")
    if not text:
        return CARD_SHARE
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"VPO_DEMO_CARD_SHARE={text}: must be a number in (0, 1]")
    return share


def demo_estimates(cfg: DemoConfig, fmt: Any, examples: list[dict[str, Any]], *, device: str,
                   eval_batch: int | None = None, m: int | None = None
                   ) -> tuple[Any, dict[str, MemoryEstimate], dict[str, int]]:
    """(shape, {"rl", "pool", "warmup": live-tensor estimates}, {"prompt", "tokens", "chains"}) of
    one process of the demo whose chains hold ``m`` answers (default ``cfg.answers``): an RL run
    (``vpo.workload.training_estimate``: weights, AdamW state, a generation batch of
    ``rl_prompts x rl_generations`` rollouts, their activations and TRL's fused LM-head tile), an
    evaluation batch of ``eval_batch`` chains (default ``cfg.eval_batch``, at most the pool's
    chains) and the warm-up (SFT on ``warmup_batch`` examples of up to ``cfg.answers`` routes).
    Weights stay float32. A chain's tokens are its prompt's characters (the character tokenizer;
    the demo applies no chat template) and ``m`` answers' completion budget.

    Measured on one H100 (torch 2.11, transformers 5.17, TRL 1.16; the paper-maze preset), against
    ``reserved_bytes`` of these estimates: warm-up reserved 1.26 GiB (allocated 0.86), estimate
    1.09 GiB (1.16x); RL m=3 1.73-1.77 GiB (allocated 1.26), estimate 1.65 GiB (1.05-1.07x); RL
    m=1 0.96-0.98 GiB (allocated 0.93-0.96), estimate 1.33 GiB (0.73-0.74x); evaluation batch of
    600 chains m=3 0.68 GiB (allocated 0.59), estimate 0.74 GiB (0.91x); m=1 0.60 GiB (allocated
    0.51), estimate 0.61 GiB (0.97x). The model's own forward and backward (B 64, T 195, padded)
    peaked at 0.37 GiB allocated there with SDPA's default and its efficient kernel alike (no
    T x T matrix kept; the math kernel 0.47), plus 32 MiB of cuBLAS workspace per thread; the
    rest of the warm-up's 0.86 is the fused head's tile. Before the fused-head tile and each job's own m were
    counted, the warm-up was estimated at 0.55 GiB (2.27x) and every job with m = 3. A second, reduced
    run on the H100 (20 mazes, 8 RL steps) confirmed the corrected estimate: warm-up 1.17x, RL 0.69x
    (m=1) and 1.10x (m=3), pools 0.98x (m=1); its m=3 pools (200 chains, less than a batch) were
    0.39x until the chains of a small evaluation were counted as ceil(pool / m) per example."""
    from vpo.workload import MemoryEstimate, generation_bytes, shape_from_config, training_estimate

    vocab = len(fmt.alphabet()) + len(fmt.extra_tokens()) + 4  # the character tokenizer: + pad, bos, eos, unk
    shape = shape_from_config({"hidden_size": cfg.hidden, "num_hidden_layers": cfg.layers,
                               "num_attention_heads": cfg.heads, "intermediate_size": cfg.mlp, "vocab_size": vocab})
    answers = max(cfg.answers, 1)
    m = answers if m is None else max(m, 1)

    def chain_tokens(k: int) -> tuple[int, int]:   # (prompt, prompt + completion) of a chain of k answers
        prompt = max((len(fmt.prompt(e, k)) for e in examples), default=0)
        return prompt, prompt + fmt.completion_budget(examples, k)

    prompt, tokens = chain_tokens(m)
    gpu = device.startswith("cuda")
    cache = "static" if gpu else "dynamic"
    rollouts = cfg.rl_prompts * cfg.rl_generations
    rl = training_estimate(shape, chains=rollouts, tokens=tokens, kv_itemsize=4, reference=cfg.rl_beta != 0,
                           micro_batch=rollouts, prompt=prompt, cache=cache, fused_head=gpu)
    # a pool of P answers is ceil(P / m) chains per example: a small evaluation holds fewer than a batch
    chains = min(cfg.eval_batch if eval_batch is None else eval_batch, len(examples) * -(-cfg.pool // m))
    pool = MemoryEstimate(weights=shape.parameters * 4, generation=generation_bytes(
        shape, chains=chains, tokens=tokens, prompt=prompt, itemsize=4, cache=cache))
    warmup = training_estimate(shape, chains=0, tokens=chain_tokens(answers)[1], kv_itemsize=4, reference=False,
                               micro_batch=cfg.warmup_batch, fused_head=gpu)
    return shape, {"rl": rl, "pool": pool, "warmup": warmup}, {"prompt": prompt, "tokens": tokens, "chains": chains}


def answer_counts(cfg: DemoConfig) -> dict[str, int]:
    """m of each job name of a demo (a method's runs and pools: ``vpo.demo.config.METHODS``; the
    warm-up's pools ``warmup-m<k>``)."""
    counts = {method: cfg.method_answers(method) for method in cfg.method_list()}
    for k in {1, max(cfg.answers, 1)}:
        counts[f"warmup-m{k}"] = k
    return counts


def worker_memory(cfg: DemoConfig, task: Any, fmt: Any, examples: list[dict[str, Any]], *,
                  workers: int) -> tuple[int, str]:
    """(bytes, words): what one worker process on CPU holds at its peak, the larger of an RL run
    and an evaluation batch (``demo_estimates``); ValueError naming the flags when ``workers`` of
    them exceed the memory available. (On a GPU ``plan_cuda`` shares the card out instead.)"""
    from vpo.workload import check_memory, device_memory, human_bytes

    device = cfg.torch_device()
    workers = max(workers, 1)
    shape, est, sizes = demo_estimates(cfg, fmt, examples, device=device)
    peak = max(est["rl"], est["pool"], key=lambda estimate: estimate.total)
    available = device_memory(device)
    check_memory(peak.scaled(workers), available=available,
                 what=f"{workers} worker process(es) on {device}, each an RL run of {cfg.rl_prompts} x "
                      f"{cfg.rl_generations} rollouts or an evaluation batch of {sizes['chains']} chains of up to "
                      f"{sizes['tokens']} tokens,",
                 lower="--eval-batch, --rl-prompts or --rl-generations" + (", or --workers" if workers > 1 else ""))
    return peak.total, (f"{shape.parameters / 1e6:.2f}M parameters; a worker's peak: RL "
                        f"{human_bytes(est['rl'].total)}, evaluation batch {human_bytes(est['pool'].total)}"
                        + (f" ({human_bytes(available)} available)" if available is not None else ""))


def plan_cuda(cfg: DemoConfig, fmt: Any, examples: list[dict[str, Any]], *, device: str, workers: int,
              jobs: int, free: int | None = None, total: int | None = None, estimates: Any = None,
              model_flags: str = "--hidden, --layers, --mlp") -> CudaPlan:
    """How the demo's processes share the GPU ``device`` (``free`` and ``total`` bytes: read from
    torch when None). ``workers`` 0: as many as the memory holds, at most ``CUDA_WORKERS`` and
    ``jobs``. The processes take ``card_share()`` of the free memory, less a CUDA context each; each
    worker an equal part, which must hold its RL run's reserve (``vpo.workload.reserved_bytes``) and
    the weights and one chain of an evaluation, and the warm-up (alone, before the workers) must
    fit in all of it. Its evaluation batch is ``cfg.eval_batch`` or what fits in its part. One-line
    ValueError naming the flags otherwise. ``estimates(eval_batch=, m=)``: the jobs' estimates
    (default: the maze demo's ``demo_estimates``; a pretrained model's ``pretrained_estimates``),
    and ``model_flags`` the flags that make the model smaller."""
    if estimates is None:
        estimates = functools.partial(demo_estimates, cfg, fmt, examples, device=device)
    from vpo.sampling import sampling_chains
    from vpo.workload import CUDA_CONTEXT_BYTES, cuda_memory, human_bytes, reserved_bytes

    if free is None or total is None:
        free, total = cuda_memory(device)
    share_of_card = card_share()
    shape, est, sizes = estimates(eval_batch=1)
    usable = int(free * share_of_card)
    need = max(reserved_bytes(est["rl"]), reserved_bytes(est["pool"]))   # RL, or the weights and one chain
    held = f"{share_of_card:g} of the {human_bytes(free)} free on {device}"
    if reserved_bytes(est["warmup"]) > usable - CUDA_CONTEXT_BYTES:
        raise ValueError(f"the warm-up (SFT on {cfg.warmup_batch} examples of up to {sizes['tokens']} tokens) needs "
                         f"about {human_bytes(reserved_bytes(est['warmup']))} of GPU memory ("
                         f"{est['warmup'].describe(None)}, allocator reserve included), and {held} is "
                         f"{human_bytes(usable)}; lower --warmup-batch, or the model ({model_flags})")
    fits = usable // (need + CUDA_CONTEXT_BYTES)
    if fits < 1:
        raise ValueError(f"an RL run of {cfg.rl_prompts} x {cfg.rl_generations} rollouts of up to {sizes['tokens']} "
                         f"tokens needs about {human_bytes(need)} of GPU memory ({est['rl'].describe(None)}, "
                         f"allocator reserve included), and {held} is {human_bytes(usable)}; lower --rl-prompts or "
                         f"--rl-generations, or the model ({model_flags})")
    if workers:
        if workers > fits:
            raise ValueError(f"--workers {workers}: each worker process needs about {human_bytes(need)} of GPU memory "
                             f"(an RL run of {cfg.rl_prompts} x {cfg.rl_generations} rollouts, allocator reserve "
                             f"included) and a CUDA context, and {held} holds {fits}; lower --workers (0: automatic), "
                             "--rl-prompts or --rl-generations")
        why = "--workers"
    else:
        workers = max(1, min(fits, CUDA_WORKERS, jobs))
        why = (f"on a GPU: at most {CUDA_WORKERS} (more share the card's time, not speed up: docs/gpu.md), "
               f"{held} holds {fits}")
    share = usable // workers - CUDA_CONTEXT_BYTES
    eval_batch = min(cfg.eval_batch, sampling_chains(shape, share, held=shape.parameters * 4, prompt=sizes["prompt"],
                                                     new_tokens=sizes["tokens"] - sizes["prompt"], itemsize=4,
                                                     cap=cfg.eval_batch))
    answers = answer_counts(cfg)
    by_answers = {}
    for m in sorted(set(answers.values())):
        _, sized, _ = estimates(eval_batch=eval_batch, m=m)
        by_answers[str(m)] = {"rl": sized["rl"].total, "pool": sized["pool"].total}
    return CudaPlan(device=device, workers=workers, share=int(share), usable=usable - CUDA_CONTEXT_BYTES,
                    card_share=share_of_card, eval_batch=int(eval_batch),
                    rl=max(e["rl"] for e in by_answers.values()), pool=max(e["pool"] for e in by_answers.values()),
                    warmup=sized["warmup"].total, free=int(free), total=int(total), why=why, answers=answers,
                    by_answers=by_answers)


def rl_kv_cache(cfg: DemoConfig) -> str | None:
    """The KV cache of the demo's RL rollouts (TRL's ``cache_implementation``): ``"static"`` on a
    GPU, as the evaluation's (a cache grown a token at a time leaves the allocator fragmented), and
    transformers' default on CPU (None)."""
    return "static" if cfg.torch_device().startswith("cuda") else None


def current_plan() -> CudaPlan | None:
    """The plan the parent process handed over (``CudaPlan.export``), or None."""
    text = os.environ.get(PLAN_ENV)
    return CudaPlan(**json.loads(text)) if text else None


_CAPPED: dict[str, int] = {}


def enter_share(share: int | None = None) -> CudaPlan | None:
    """In a process of a demo on a GPU: cap it at its share of the card (``share`` bytes, default
    the handed-over plan's), once per process. Returns the plan (None on CPU: nothing is done)."""
    plan = current_plan()
    if plan is None:
        return None
    share = plan.share if share is None else share
    if _CAPPED.get(plan.device) != share:
        from vpo.workload import cap_process_memory

        cap_process_memory(plan.device, share)
        _CAPPED[plan.device] = share
    return plan


def job_memory(out: Path, job: str, kind: str) -> None:
    """After a job of a demo on a GPU (``kind``: "rl", "pool" or "warmup"): append what this
    process reserved and allocated at its peak, beside the plan's estimate of that kind, to
    ``out/logs/cuda_memory.jsonl``; then reset the peak and give the cached blocks back (so the
    next job, e.g. the run's evaluation after its RL, starts from the live tensors alone)."""
    plan = current_plan()
    if plan is None:
        return
    import torch

    from vpo.sampling import release_cuda_cache
    from vpo.workload import reserved_bytes

    estimate = plan.estimate(kind, job)
    row = {"job": job, "kind": kind, "pid": os.getpid(), "estimate": estimate,
           "m": plan.answers.get(re.sub(r"-s\d+$", "", job.split(" ", 1)[-1])),
           "estimate_reserved": reserved_bytes(estimate), "share": plan.share if kind != "warmup" else None,
           "max_allocated": int(torch.cuda.max_memory_allocated(plan.device)),
           "max_reserved": int(torch.cuda.max_memory_reserved(plan.device))}
    row["reserved_over_estimate"] = row["max_reserved"] / max(row["estimate_reserved"], 1)
    path = out / "logs" / "cuda_memory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    release_cuda_cache()
    torch.cuda.reset_peak_memory_stats(plan.device)


def pretrained_estimates(cfg: DemoConfig, shape: Any, prompt: int, examples: int, *, device: str,
                         eval_batch: int | None = None, m: int | None = None
                         ) -> tuple[Any, dict[str, MemoryEstimate], dict[str, int]]:
    """``demo_estimates`` of a pretrained-model preset: the model's ``shape`` (``vpo.workload``,
    from its config or GGUF header), prompts of ``prompt`` tokens, chains of ``m`` answers of
    ``answer_tokens`` each (default ``cfg.answers``), ``examples`` held-out prompts. RL: all weights
    trained (or a LoRA adapter's few), float32 master weights; the warm-up: a batch of
    ``warmup_batch`` chains, with gradient checkpointing (TRL's SFT default). On a GPU the rollouts
    and pools run in bf16 (2-byte KV cache), and training under bf16 autocast with TRL's fused head."""
    from vpo.workload import MemoryEstimate, generation_bytes, training_estimate

    answers = max(cfg.answers, 1)
    m = answers if m is None else max(m, 1)
    tokens = prompt + cfg.answer_tokens * m
    gpu = device.startswith("cuda")
    cache, kv = ("static", 2) if gpu else ("dynamic", 4)
    rollouts = cfg.rl_prompts * cfg.rl_generations
    rl = training_estimate(shape, chains=rollouts, tokens=tokens, kv_itemsize=kv, reference=cfg.rl_beta != 0,
                           full=not cfg.lora, micro_batch=cfg.rl_micro_batch or rollouts, prompt=prompt, cache=cache,
                           fused_head=gpu, autocast=gpu)
    chains = min(cfg.eval_batch if eval_batch is None else eval_batch, examples * -(-cfg.pool // m))
    pool = MemoryEstimate(weights=shape.parameters * 4, generation=generation_bytes(
        shape, chains=chains, tokens=tokens, prompt=prompt, itemsize=kv, cache=cache))
    warmup = training_estimate(shape, chains=0, tokens=prompt + cfg.answer_tokens * answers, kv_itemsize=kv,
                               reference=False, full=not cfg.lora, micro_batch=cfg.warmup_batch, fused_head=gpu,
                               autocast=gpu, checkpointing=True)
    return shape, {"rl": rl, "pool": pool, "warmup": warmup}, {"prompt": prompt, "tokens": tokens, "chains": chains}


def pretrained_memory(cfg: DemoConfig, examples: list[dict[str, Any]], task: Any) -> tuple[int, str, CudaPlan | None]:
    """What a pretrained-model preset's worker holds at its peak (bytes, words) and, on a GPU, how
    its processes share the card (``plan_cuda`` on ``pretrained_estimates``); one-line ValueError
    naming the flags for what cannot fit. The model's shape comes from its config or GGUF header."""
    from vpo.models import resolve_model
    from vpo.workload import check_memory, device_memory, human_bytes, prompt_tokens, read_model_shape

    model = resolve_model(cfg.model)
    shape = read_model_shape(model)
    if shape is None:
        raise ValueError(f"--model {cfg.model}: no config.json or GGUF header to size the runs from")
    prompt = prompt_tokens([task.prompt(e, max(cfg.answers, 1)) for e in examples], shape.vocab)
    device = cfg.torch_device()
    estimates = functools.partial(pretrained_estimates, cfg, shape, prompt, len(examples), device=device)
    flags = "--lora, or a smaller --model"
    if device.startswith("cuda"):
        plan = plan_cuda(cfg, None, examples, device=device, workers=cfg.workers,
                         jobs=len(cfg.method_list()) * cfg.seeds + 2, estimates=estimates, model_flags=flags)
        return plan.share, plan.words(), plan
    workers = max(cfg.workers, 1)
    _, est, sizes = estimates()
    peak = max(est["rl"], est["pool"], est["warmup"], key=lambda estimate: estimate.total)
    available = device_memory(device)
    check_memory(peak.scaled(workers), available=available,
                 what=f"{workers} worker process(es) on {device}, each an RL run of {cfg.rl_prompts} x "
                      f"{cfg.rl_generations} rollouts of up to {sizes['tokens']} tokens or an evaluation batch of "
                      f"{sizes['chains']} chains,",
                 lower="--rl-micro-batch, --eval-batch, --answer-tokens, " + flags)
    return peak.total, (f"{shape.parameters / 1e6:.0f}M parameters; a worker's peak: RL "
                        f"{human_bytes(est['rl'].total)}, evaluation batch {human_bytes(est['pool'].total)}, "
                        f"warm-up {human_bytes(est['warmup'].total)}"
                        + (f" ({human_bytes(available)} available)" if available is not None else "")), None

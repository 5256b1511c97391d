"""Chains from a causal LM, many per call on one device: the sampler behind ``vpo eval``,
``vpo search best-of-n`` and the demo's evaluation.

Usage::

    from vpo.sampling import SamplingOptions, open_sampler
    options = SamplingOptions(device="auto", dtype="auto", batch_size=0).check(models=["runs/vpo"])
    sampler, tokenizer = open_sampler("runs/vpo", options)     # after the checks: nothing loads before
    rows = sampler.generate([[prompt_0] * 10, [prompt_1] * 10], temperature=0.7, top_p=1.0,
                            max_new_tokens=64, seed=0)           # G lists of C Generation

``prompts`` are G lists (one per example) of C strings (one per chain), already formatted
(chat template and all); the tokenizer encodes them with its own special tokens, as the
checkpoint was trained. A chain ends at EOS or after ``max_new_tokens``.

Seeding (``seeding``; the commands' ``--seeding auto`` picks ``"batch"`` for the hf backend on
CPU, so CPU reports reproduce those made before chains were seeded one by one, and ``"chain"`` on a GPU and with
vLLM, where the automatic batch size depends on the free memory):

* ``"chain"`` (the library default): chain c of example g has its own stream of uniforms u, from numpy's
  PCG64 seeded by (seed, g, c); at step t it takes the token whose cumulative probability
  (after temperature and top-p, exactly as transformers applies them) first exceeds u[t].
  A chain's tokens therefore do not depend on the batch size, on which chains share a call,
  or on the device's random generator (only float rounding of the logits, which can differ
  between batch shapes and devices, can move a draw that sits on a boundary).
* ``"batch"``: one ``torch.manual_seed(seed)`` per call, then ``generate(do_sample=True)``: the
  older stream of ``vpo eval``, which depends on the batch size; kept to reproduce
  reports made with it.

Backends: ``hf`` (transformers ``generate``, the default and the reference) and ``vllm``
(``vpo.sampling.vllm``, on a GPU; ``pip install 'vpo[vllm]'``).

Memory on a GPU (``HFSampler``; docs/gpu.md, "The memory model"): the process takes a stated
share of the free memory (``memory_share``, 0.5) and is capped at it
(``vpo.workload.cap_process_memory``); the auto batch size is what fits in that share by the
estimate of ``vpo.workload``; each call preallocates its KV cache (``kv_cache="static"``), and the
allocator's cached blocks are released after each call, so a pool of many calls holds what one
call needs. A call that still runs out of memory is retried at half the batch (chain seeding
only: the pool does not depend on the batch size).

Shapes: G examples, C chains per example, B chains per generate call, T new tokens, V vocabulary.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vpo.models import DTYPES
from vpo.workload import KV_CACHES  # how the hf backend keeps a call's KV cache (options: also auto)

BACKENDS = ("hf", "vllm")
SEEDINGS = ("chain", "batch")
"""What a sampler does; the options also take ``auto`` (see the module doc)."""
MEMORY_SHARE = 0.5
"""Share of a GPU's free memory (when sampling starts) that one sampling process takes by default."""
CPU_CHAINS_PER_CALL = 256
"""Auto batch size on CPU (what ``vpo eval`` always used: larger calls gain little there)."""
MAX_CHAINS_PER_CALL = 1024
"""Largest auto batch size on a GPU."""
VLLM_INSTALL = "pip install 'vpo[vllm]'"


# ----- options ----------------------------------------------------------------------------

@dataclass
class DeviceOptions:
    """Where a checkpoint is loaded (``vpo search openevolve``; the base of ``SamplingOptions``)."""

    device: str = field(default="auto", metadata={
        "help": "where the model runs: auto (cuda when available, else cpu), cpu, cuda or cuda:N"})
    dtype: str = field(default="auto", metadata={
        "help": "weight dtype: auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16 or float16",
        "choices": list(DTYPES)})

    def check_device(self) -> DeviceOptions:
        """A copy with ``device`` and ``dtype`` resolved (``auto`` replaced); ValueError naming
        ``--device`` / ``--dtype`` when this machine cannot honour them. Loads nothing."""
        from vpo.models import resolve_device, resolve_dtype

        device = resolve_device(self.device)
        return replace(self, device=device, dtype=resolve_dtype(self.dtype, device))


@dataclass
class SamplingOptions(DeviceOptions):
    """How ``vpo eval`` and ``vpo search best-of-n`` sample (one definition for both)."""

    backend: str = field(default="hf", metadata={
        "help": f"sampler: hf (transformers generate) or vllm (GPU; {VLLM_INSTALL})", "choices": list(BACKENDS)})
    batch_size: int = field(default=0, metadata={
        "help": f"chains per generate() call (0: auto, {CPU_CHAINS_PER_CALL} on CPU, as many as fit in "
                f"--memory-share of the GPU's free memory on a GPU, at most {MAX_CHAINS_PER_CALL}; a number given "
                "here is checked against the free memory, and the process is not capped)", "min": 0})
    seeding: str = field(default="auto", metadata={
        "help": "chain: every chain has its own seeded stream, so pools do not depend on --batch-size; "
                "batch: one seed per generate() call, the older stream of vpo eval (reproduces old "
                "reports; hf only); auto: batch for --backend hf on CPU, chain on a GPU and with vLLM",
        "choices": ["auto", *SEEDINGS]})
    threads: int = field(default=0, metadata={
        "help": "torch CPU threads (0: the cores free now, from a half-second sample of CPU use; shown when "
                "sampling starts)",
        "min": 0})
    kv_cache: str = field(default="auto", metadata={
        "help": "hf backend's KV cache: static (preallocated for the whole chain, one block per call: the GPU's "
                "allocator is not left fragmented), dynamic (transformers' default, grows a token at a time); "
                "auto: static on a GPU, dynamic on CPU", "choices": ["auto", *KV_CACHES]})
    memory_share: float = field(default=MEMORY_SHARE, metadata={
        "help": "share of the GPU's free memory this process may hold (weights, KV cache and all): the auto "
                "--batch-size fits in it, and the process is capped at it "
                "(torch.cuda.set_per_process_memory_fraction); not used on CPU", "above": 0.0, "max": 1.0})

    def check(self, models: Sequence[str | Path] = ()) -> SamplingOptions:
        """A copy with device and dtype resolved; one-line ValueError naming the flag for any
        option this machine or the checkpoints ``models`` cannot honour. Loads nothing, so a
        bad option fails before any model does."""
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend {self.backend}: expected one of {', '.join(BACKENDS)}")
        if self.seeding not in ("auto", *SEEDINGS):
            raise ValueError(f"--seeding {self.seeding}: expected one of auto, {', '.join(SEEDINGS)}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 0:
            raise ValueError(f"--batch-size {self.batch_size}: must be a positive number of chains, or 0 (auto)")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 0:
            raise ValueError(f"--threads {self.threads}: must be >= 0 (0: the cores free now)")
        if self.backend == "vllm":
            check_vllm(models, device=self.device, seeding="chain" if self.seeding == "auto" else self.seeding)
        resolved = self.check_device()
        if resolved.seeding == "auto":
            cpu_hf = resolved.backend == "hf" and resolved.device == "cpu"
            resolved = replace(resolved, seeding="batch" if cpu_hf else "chain")
        if resolved.kv_cache not in ("auto", *KV_CACHES):
            raise ValueError(f"--kv-cache {self.kv_cache}: expected one of auto, {', '.join(KV_CACHES)}")
        if not 0 < resolved.memory_share <= 1:
            raise ValueError(f"--memory-share {self.memory_share}: must be in (0, 1]")
        resolved = replace(resolved, kv_cache=resolve_kv_cache(resolved.kv_cache, resolved.device))
        if self.backend == "vllm" and not resolved.device.startswith("cuda"):
            raise ValueError(f"--backend vllm: needs a GPU (--device cuda), got --device {self.device}"
                             + (" and CUDA is not available" if self.device == "auto" else ""))
        if resolved.threads == 0:
            from vpo.cores import pick_threads

            threads, why = pick_threads()
            resolved = replace(resolved, threads=threads)
            print(f"torch threads: {threads} ({why}; --threads sets them)")
        return resolved


def check_vllm(models: Sequence[str | Path], *, device: str = "auto", seeding: str = "chain") -> None:
    """Fail at once (before anything loads) when ``--backend vllm`` cannot run: vLLM not
    installed (the message holds the install line), then ``check_vllm_inputs``."""
    if importlib.util.find_spec("vllm") is None:
        raise ValueError(f"--backend vllm: vLLM is not installed; {VLLM_INSTALL}")
    check_vllm_inputs(models, device=device, seeding=seeding)


def check_vllm_inputs(models: Sequence[str | Path], *, device: str = "auto", seeding: str = "chain") -> None:
    """ValueError naming the flag for what the vLLM backend does not take: ``--seeding batch``,
    ``--device cpu``, a ``.gguf`` file or a LoRA adapter folder as ``--model``."""
    if seeding != "chain":
        raise ValueError(f"--seeding {seeding}: only --backend hf replays the old batch stream; vLLM seeds each request")
    if str(device).strip().lower() == "cpu":
        raise ValueError("--backend vllm: needs a GPU (--device cuda), got --device cpu")
    for model in models:
        path = Path(model)
        if path.suffix == ".gguf":
            raise ValueError(f"--backend vllm: {path} is a .gguf file; give a checkpoint folder or use --backend hf")
        if (path / "adapter_config.json").is_file():
            raise ValueError(f"--backend vllm: {path} is a LoRA adapter folder; use --backend hf (it merges the "
                             "adapter into its base)")


def resolve_kv_cache(kv_cache: str, device: Any) -> str:
    """``auto`` resolved for ``device``: static on a GPU, dynamic on CPU (where it keeps the
    numbers of earlier versions and a cache's allocation pattern costs nothing)."""
    if kv_cache != "auto":
        return kv_cache
    return "static" if str(getattr(device, "type", device)).startswith("cuda") else "dynamic"


def sampling_share(free: int, share: float = MEMORY_SHARE) -> int:
    """Bytes a sampling process may hold on a GPU: ``share`` of its ``free`` memory."""
    return int(share * free)


def sampling_chains(shape: Any, share: int, *, held: int, prompt: int, new_tokens: int, itemsize: int,
                    kv_cache: str = "static", cap: int = MAX_CHAINS_PER_CALL) -> int:
    """Auto batch size on a GPU: the chains of ``prompt + new_tokens`` tokens whose generation
    batch (``vpo.workload.generation_bytes``), with the ``held`` bytes of live tensors (the
    weights), keeps the allocator's reserve (``vpo.workload.reserved_bytes``) within ``share``
    bytes; between 1 and ``cap``."""
    from vpo.workload import allocated_budget, chains_in_budget, generation_bytes

    per_chain = generation_bytes(shape, chains=1, tokens=prompt + new_tokens, prompt=prompt, itemsize=itemsize,
                                 cache=kv_cache)
    return chains_in_budget(allocated_budget(share) - held, per_chain, cap=cap)


def check_sampling_memory(model: str | Path, options: SamplingOptions, *, prompts: Sequence[str],
                          max_new_tokens: int, chains: int) -> str | None:
    """Refuse in one line, before ``model`` loads, sampling ``chains`` chains of up to
    ``max_new_tokens`` new tokens after ``prompts`` with checked ``options`` when its weights and
    one generation batch (``vpo.workload.MemoryEstimate``) exceed what the device allows: the
    free memory (RAM) on CPU; on a GPU the process's share (``options.memory_share`` of the free
    memory), counted as the allocator's reserve (``vpo.workload.reserved_bytes``). Returns the
    estimate in words for the stage line, or None when the checkpoint's shape cannot be read (a
    .gguf file). On a GPU the auto batch size fits by construction; vLLM sizes its own cache, so
    only its weights count."""
    from vpo.workload import (DTYPE_BYTES, MemoryEstimate, allocated_budget, check_memory, device_memory,
                              generation_bytes, human_bytes, prompt_tokens, read_model_shape)

    shape = read_model_shape(model)
    if shape is None:
        return None
    itemsize = DTYPE_BYTES.get(options.dtype, 4)
    weights = shape.parameters * itemsize
    gpu = options.device.startswith("cuda")
    available = device_memory(options.device)
    kv_cache = resolve_kv_cache(options.kv_cache, options.device)
    prompt = prompt_tokens(list(prompts), shape.vocab)
    tokens = prompt + max_new_tokens
    share = sampling_share(available, options.memory_share) if gpu and available is not None else None
    if options.backend == "vllm":
        per_call = 0
    elif options.batch_size or not gpu:
        per_call = min(chains, options.batch_size or CPU_CHAINS_PER_CALL)
    else:
        per_call = min(chains, sampling_chains(shape, share or 0, held=weights, prompt=prompt,
                                               new_tokens=max_new_tokens, itemsize=itemsize, kv_cache=kv_cache))
    estimate = MemoryEstimate(weights=weights, generation=generation_bytes(
        shape, chains=per_call, tokens=tokens, prompt=prompt, itemsize=itemsize, cache=kv_cache))
    batch = f"--batch-size {options.batch_size}" if options.batch_size else (
        "--batch-size 0" + ("" if gpu else f" ({CPU_CHAINS_PER_CALL} chains per call on CPU)"))
    lower = "--batch-size or --max-new-tokens" + (" (or --dtype bfloat16)" if itemsize > 2 else "")
    what = (f"{batch}: {model} in {options.dtype} on {options.device}, sampling {per_call:,} chains of up to "
            f"{tokens:,} tokens (prompt and new) at once,")
    if share is None or options.batch_size:
        # CPU, or a --batch-size given on a GPU: it must fit in the free memory (and the process is
        # not capped at the share: open_sampler)
        check_memory(estimate, available=available, what=what, lower=lower)
    else:  # the auto batch: weights and one chain must fit in the allocator's part of the share
        check_memory(estimate, available=allocated_budget(share),
                     what=what.rstrip(",") + f" within --memory-share {options.memory_share:g} of "
                                             f"{human_bytes(available)} free (less the allocator's own reserve),",
                     lower="--max-new-tokens or raise --memory-share")
    if share is None:
        return estimate.describe(available)
    return (estimate.describe(None) + f" ({per_call:,} chains per call, {kv_cache} KV cache, a share of "
            f"{human_bytes(share)} = {options.memory_share:g} x the free memory) of {human_bytes(available)} available")


# ----- the sampler interface ----------------------------------------------------------------

@dataclass
class Generation:
    """One chain: its text (decoded without special tokens), its new tokens up to EOS, and
    whether it hit ``max_new_tokens`` without EOS; ``ids``: its token ids as TRL passes a reward
    function ``completion_ids`` (the new tokens, the EOS included when one was generated), or
    None when the backend does not keep them."""

    text: str
    tokens: int
    truncated: bool
    ids: list[int] | None = None


def completion_ids(new: Sequence[int], truncated: bool, eos_id: int | None) -> list[int]:
    """A chain's ``completion_ids`` as TRL's ``GRPOTrainer`` gives them to reward functions: the new
    tokens (``finish_chain``'s) and the EOS that ended them."""
    return list(new) + ([eos_id] if not truncated and eos_id is not None else [])


class Sampler(Protocol):
    """What ``vpo.evaluation.sample_pools`` needs from a backend."""

    def generate(self, prompts: Sequence[Sequence[str]], *, temperature: float, top_p: float,
                 max_new_tokens: int, seed: int, progress: bool = False,
                 desc: str = "sampling") -> list[list[Generation]]:
        """G lists of C generations, one per prompt (``prompts``: G lists of C strings)."""
        ...


def check_sampling(temperature: float, top_p: float, max_new_tokens: int) -> None:
    """ValueError unless temperature > 0, 0 < top_p <= 1 and max_new_tokens >= 1."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (sampling), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def finish_chain(ids: Sequence[int], eos_id: int | None, pad_id: int | None) -> tuple[list[int], bool]:
    """(new tokens up to EOS without padding, truncated): the one reading of a generated row,
    for every backend. ``truncated`` is True when no EOS was generated."""
    ids = list(ids)
    truncated = eos_id not in ids
    if not truncated:
        ids = ids[:ids.index(eos_id)]
    return [t for t in ids if t != pad_id], truncated


def chain_seed(seed: int, *key: int) -> np.random.SeedSequence:
    """The seed sequence of (seed, example, chain) or (seed, example): seeds may be any int."""
    return np.random.SeedSequence([int(seed) % 2**64, *(int(k) for k in key)])


def chain_uniforms(seed: int, keys: Sequence[tuple[int, int]], steps: int) -> np.ndarray:
    """(B, T) uniforms in [0, 1): row b is the stream of chain ``keys[b]`` = (example, chain).
    A chain's first t uniforms are the same for any ``steps`` >= t."""
    return np.stack([np.random.Generator(np.random.PCG64(chain_seed(seed, g, c))).random(steps) for g, c in keys])


class ChainDraw:
    """Logits processor that samples each row from its own uniforms (``seeding="chain"``).

    Run inside ``generate(do_sample=False)``: it applies temperature and top-p (transformers'
    own warpers, as ``do_sample=True`` would), draws row b's token by inverse CDF with
    ``uniforms[b, t]`` (t = tokens generated so far), and returns scores that are -inf except
    at the drawn token, which greedy decoding then takes.
    """

    def __init__(self, uniforms: Any, prompt_length: int, *, temperature: float, top_p: float) -> None:
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.uniforms = uniforms                  # (B, T) float64 tensor on the model's device
        self.prompt_length = prompt_length
        self.warpers = ([TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []) + (
            [TopPLogitsWarper(top_p)] if top_p < 1.0 else [])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for warp in self.warpers:
            scores = warp(input_ids, scores)
        step = input_ids.shape[1] - self.prompt_length
        # softmax in float32 as transformers samples; the running sum in float64, so that a
        # 150k-entry vocabulary does not shift the boundaries by float32 rounding
        cdf = torch.softmax(scores.float(), dim=-1).cumsum(dim=-1, dtype=torch.float64)  # (B, V)
        target = (self.uniforms[:, step] * cdf[:, -1]).unsqueeze(1)                     # (B, 1)
        token = torch.searchsorted(cdf, target, right=True).clamp_(max=scores.shape[1] - 1)
        drawn = torch.full_like(scores, float("-inf"))
        return drawn.scatter_(1, token, 0.0)


# ----- transformers -------------------------------------------------------------------------

def kv_bytes_per_token(model: Any) -> int:
    """KV-cache bytes one token of one chain takes: 2 x layers x KV heads x head size x dtype size."""
    return model_shape(model).kv_bytes_per_token(next(model.parameters()).element_size())


def model_shape(model: Any) -> Any:
    """The ``vpo.workload.ModelShape`` of a loaded transformers model (its config; parameters counted)."""
    from vpo.workload import shape_from_config

    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    return shape_from_config(getattr(config, "to_dict", dict)(), parameters=sum(p.numel() for p in model.parameters()))


def release_cuda_cache(model: Any = None) -> None:
    """Drop ``model``'s kept static cache (transformers keeps the last one on the model as
    ``_cache``), collect garbage and give the allocator's cached blocks back to the GPU (no-op
    without CUDA)."""
    if model is not None and hasattr(model, "_cache"):
        del model._cache
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class HFSampler:
    """``Sampler`` over a transformers causal LM: left-padded batches of ``batch_size`` chains
    per ``generate`` call on the model's device (``batch_size=0``: ``CPU_CHAINS_PER_CALL`` on
    CPU; on a GPU what fits in ``share`` bytes, ``sampling_chains``); ``seeding`` as in the module doc.

    On a GPU: ``share`` is the allocator reserve this process may hold (None: what it holds now
    plus ``MEMORY_SHARE`` of the free memory); ``kv_cache`` (``KV_CACHES``, or ``auto``: static on
    a GPU) and ``release`` (free the allocator's cached blocks after every call) keep the reserve
    near the live tensors. ``last_batch`` is the batch size the last call settled on.
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 0, seeding: str = "chain",
                 kv_cache: str = "auto", share: int | None = None, release: bool = True) -> None:
        if seeding not in SEEDINGS:
            raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}, got {seeding!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size must be a positive number of chains or 0 (auto), got {batch_size!r}")
        if kv_cache not in ("auto", *KV_CACHES):
            raise ValueError(f"kv_cache must be one of auto, {', '.join(KV_CACHES)}, got {kv_cache!r}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.seeding = batch_size, seeding
        self.kv_cache = resolve_kv_cache(kv_cache, self.device)
        self.share, self.release = share, release
        self.last_batch = 0

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def chains_per_call(self, prompts: Sequence[Sequence[str]], max_new_tokens: int) -> int:
        """The batch size a call on ``prompts`` uses: ``batch_size``, or the auto one for this device."""
        if self.batch_size:
            return self.batch_size
        device = self.device
        if device.type != "cuda":
            return CPU_CHAINS_PER_CALL
        import torch

        longest = max((len(self.tokenizer(p)["input_ids"]) for row in prompts for p in set(row)), default=0)
        share = self.share
        if share is None:
            free, _ = torch.cuda.mem_get_info(device)
            share = torch.cuda.memory_reserved(device) + sampling_share(free)
        return sampling_chains(model_shape(self.model), share, held=torch.cuda.memory_allocated(device),
                               prompt=longest, new_tokens=max_new_tokens,
                               itemsize=next(self.model.parameters()).element_size(), kv_cache=self.kv_cache)

    def generate(self, prompts: Sequence[Sequence[str]], *, temperature: float, top_p: float,
                 max_new_tokens: int, seed: int, progress: bool = False,
                 desc: str = "sampling") -> list[list[Generation]]:
        import sys

        import torch
        from tqdm.auto import tqdm

        check_sampling(temperature, top_p, max_new_tokens)
        model, tokenizer = self.model, self.tokenizer
        jobs = [(g, c) for g, row in enumerate(prompts) for c in range(len(row))]
        out: list[list[Any]] = [[None] * len(row) for row in prompts]
        batch_size = self.batch_size or self.chains_per_call(prompts, max_new_tokens)
        cuda = self.device.type == "cuda"
        was_training = model.training
        model.eval()
        if self.seeding == "batch":
            torch.manual_seed(seed)
        old_side = getattr(tokenizer, "padding_side", "left")
        tokenizer.padding_side = "left"
        try:
            bar = tqdm(total=len(jobs), desc=desc, unit="chain", disable=not progress, leave=False)
            start = 0
            while start < len(jobs):
                batch = jobs[start:start + batch_size]
                try:
                    rows = self._generate_batch(prompts, batch, temperature=temperature, top_p=top_p,
                                                max_new_tokens=max_new_tokens, seed=seed)
                except torch.cuda.OutOfMemoryError:
                    # chain seeding: a smaller batch samples the same chains, so retry at half the size
                    if self.seeding != "chain" or batch_size == 1:
                        raise
                    release_cuda_cache(model)
                    batch_size = max(1, batch_size // 2)
                    print(f"{desc}: out of GPU memory at {len(batch)} chains per call; going on with {batch_size}",
                          file=sys.stderr, flush=True)
                    continue
                finally:
                    if cuda and self.release:   # the call's transient blocks; its static cache is reused
                        release_cuda_cache()
                for (g, c), generation in zip(batch, rows, strict=True):
                    out[g][c] = generation
                bar.update(len(batch))
                start += len(batch)
            bar.close()
        finally:
            tokenizer.padding_side = old_side
            model.train(was_training)
            if hasattr(model, "_cache"):   # transformers keeps the last static cache on the model: not past a pool
                del model._cache
            if cuda and self.release:
                release_cuda_cache()
        self.last_batch = batch_size
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[str]], batch: Sequence[tuple[int, int]], *,
                        temperature: float, top_p: float, max_new_tokens: int, seed: int) -> list[Generation]:
        """One ``generate`` call on the chains ``batch`` ((example, chain) pairs)."""
        import torch
        from transformers import LogitsProcessorList

        model, tokenizer, device = self.model, self.tokenizer, self.device
        eos_id = tokenizer.eos_token_id
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
        enc = tokenizer([prompts[g][c] for g, c in batch], return_tensors="pt", padding=True)
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_id, pad_token_id=pad_id)
        if self.kv_cache == "static":  # one preallocated block per layer; no torch.compile of the forward
            kwargs.update(cache_implementation="static", disable_compile=True)
        if self.seeding == "batch":
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            uniforms = torch.from_numpy(chain_uniforms(seed, batch, max_new_tokens)).to(device)
            draw = ChainDraw(uniforms, enc["input_ids"].shape[1], temperature=temperature, top_p=top_p)
            kwargs.update(do_sample=False, logits_processor=LogitsProcessorList([draw]))
        with torch.no_grad():
            ids = model.generate(**enc, **kwargs)
        rows = []
        for row in ids[:, enc["input_ids"].shape[1]:].tolist():
            new, truncated = finish_chain(row, eos_id, pad_id)
            rows.append(Generation(tokenizer.decode(new, skip_special_tokens=True), len(new), truncated,
                                   completion_ids(new, truncated, eos_id)))
        return rows


# ----- opening a checkpoint -----------------------------------------------------------------

def hide_library_progress() -> None:
    """No progress bar from the libraries in this process (and the processes it spawns after
    this call, through the environment): transformers' weight loading and saving, datasets' maps,
    the hub's downloads. ``--no-progress`` means no bar from anyone; our own bars take a
    ``progress`` argument."""
    import os

    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"   # transformers in a spawned worker reads it too
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        import datasets
    except ImportError:
        return
    datasets.disable_progress_bars()


def open_sampler(model: str | Path, options: SamplingOptions) -> tuple[Sampler, Any]:
    """``(sampler, tokenizer)`` of a checkpoint for checked ``options`` (``SamplingOptions.check``):
    ``hf`` loads it with ``vpo.models.load_checkpoint`` on the device in the dtype; ``vllm``
    starts a ``vllm.LLM`` on the folder. ``options.threads`` sets torch's CPU threads."""
    if options.threads > 0:
        import torch

        torch.set_num_threads(options.threads)
    if options.backend == "vllm":
        from vpo.sampling.vllm import VLLMSampler
        from vpo.models import checkpoint_tokenizer

        tokenizer = checkpoint_tokenizer(model)
        return VLLMSampler(model, tokenizer, dtype=options.dtype), tokenizer
    from vpo.models import load_checkpoint

    share = None
    if options.device.startswith("cuda"):
        from vpo.workload import cap_process_memory, cuda_memory

        free, _ = cuda_memory(options.device)   # before the weights load; fixes the allocator's setting first
        share = sampling_share(free, options.memory_share)
        if not options.batch_size:   # the auto batch fits in the share; a given --batch-size was checked on its own
            cap_process_memory(options.device, share)
    loaded, tokenizer = load_checkpoint(model, dtype=options.dtype, device=options.device)
    return HFSampler(loaded, tokenizer, batch_size=options.batch_size, seeding=options.seeding,
                     kv_cache=options.kv_cache, share=share), tokenizer


__all__ = ["BACKENDS", "KV_CACHES", "MEMORY_SHARE", "SEEDINGS", "ChainDraw", "DeviceOptions", "Generation",
           "HFSampler", "Sampler", "SamplingOptions", "chain_seed", "chain_uniforms", "check_sampling",
           "check_sampling_memory", "check_vllm", "check_vllm_inputs", "completion_ids",
           "finish_chain",
           "hide_library_progress", "kv_bytes_per_token", "model_shape", "open_sampler", "release_cuda_cache",
           "resolve_kv_cache", "sampling_chains", "sampling_share"]

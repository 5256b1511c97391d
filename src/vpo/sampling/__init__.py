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

BACKENDS = ("hf", "vllm")
SEEDINGS = ("chain", "batch")
"""What a sampler does; the options also take ``auto`` (see the module doc)."""
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
        "help": f"chains per generate() call; 0 is auto: {CPU_CHAINS_PER_CALL} on CPU, on a GPU as many as fit in "
                f"its free memory, up to {MAX_CHAINS_PER_CALL}", "min": 0})
    seeding: str = field(default="auto", metadata={
        "help": "chain: every chain has its own seeded stream, so pools do not depend on --batch-size; "
                "batch: one seed per generate() call, the older stream of vpo eval (reproduces old "
                "reports; hf only); auto: batch for --backend hf on CPU, chain on a GPU and with vLLM",
        "choices": ["auto", *SEEDINGS]})
    threads: int = field(default=0, metadata={
        "help": "torch CPU threads (0: the cores free now, from a half-second sample of CPU use; shown when "
                "sampling starts)",
        "min": 0})

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


def check_sampling_memory(model: str | Path, options: SamplingOptions, *, prompts: Sequence[str],
                          max_new_tokens: int, chains: int) -> str | None:
    """Refuse in one line, before ``model`` loads, sampling ``chains`` chains of up to
    ``max_new_tokens`` new tokens after ``prompts`` with checked ``options`` when its weights and
    one generation batch (``vpo.workload.MemoryEstimate``) exceed the free memory of the device;
    the estimate in words for the stage line, or None when the checkpoint's shape cannot be read
    (a .gguf file). On a GPU the auto batch size fits by construction; vLLM sizes its own cache,
    so only its weights count."""
    from vpo.workload import (DTYPE_BYTES, MemoryEstimate, check_memory, device_memory, generation_bytes,
                              prompt_tokens, read_model_shape)

    shape = read_model_shape(model)
    if shape is None:
        return None
    itemsize = DTYPE_BYTES.get(options.dtype, 4)
    weights = shape.parameters * itemsize
    available = device_memory(options.device)
    tokens = prompt_tokens(list(prompts), shape.vocab) + max_new_tokens
    if options.backend == "vllm":
        per_call = 0
    elif options.batch_size or options.device == "cpu":
        per_call = min(chains, options.batch_size or CPU_CHAINS_PER_CALL)
    else:
        free = (available if available is not None else 0) - weights
        per_call = min(chains, chains_per_call(free, kv_bytes_per_token=shape.kv_bytes_per_token(itemsize),
                                               tokens_per_chain=tokens, vocab=shape.vocab))
    estimate = MemoryEstimate(weights=weights,
                              generation=generation_bytes(shape, chains=per_call, tokens=tokens, itemsize=itemsize))
    batch = f"--batch-size {options.batch_size}" if options.batch_size else (
        f"--batch-size 0 ({CPU_CHAINS_PER_CALL} chains per call on CPU)")
    check_memory(estimate, available=available,
                 what=f"{batch}: {model} in {options.dtype} on {options.device}, sampling {per_call:,} chains of up to "
                      f"{tokens:,} tokens (prompt and new) at once,",
                 lower="--batch-size or --max-new-tokens" + (" (or --dtype bfloat16)" if itemsize > 2 else ""))
    return estimate.describe(available)


# ----- the sampler interface ----------------------------------------------------------------

@dataclass
class Generation:
    """One chain: its text (decoded without special tokens), its new tokens up to EOS, and
    whether it hit ``max_new_tokens`` without EOS."""

    text: str
    tokens: int
    truncated: bool


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

def chains_per_call(free_bytes: float, *, kv_bytes_per_token: float, tokens_per_chain: int, vocab: int,
                    cap: int = MAX_CHAINS_PER_CALL) -> int:
    """Auto batch size on a GPU: chains whose KV cache (twice over: transformers grows it by
    concatenation) and per-step logits, probabilities and CDF (``vpo.workload.LOGIT_BYTES_PER_ENTRY``
    per vocabulary entry) fit in half of ``free_bytes``; between 1 and ``cap``."""
    from vpo.workload import LOGIT_BYTES_PER_ENTRY

    per_chain = 2 * kv_bytes_per_token * tokens_per_chain + LOGIT_BYTES_PER_ENTRY * vocab
    return int(max(1, min(cap, (0.5 * free_bytes) // max(per_chain, 1))))


def kv_bytes_per_token(model: Any) -> int:
    """KV-cache bytes one token of one chain takes: 2 x layers x KV heads x head size x dtype size."""
    from vpo.workload import shape_from_config

    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    shape = shape_from_config(getattr(config, "to_dict", dict)(), parameters=0)
    return shape.kv_bytes_per_token(next(model.parameters()).element_size())


class HFSampler:
    """``Sampler`` over a transformers causal LM: left-padded batches of ``batch_size`` chains
    per ``generate`` call on the model's device (``batch_size=0``: ``CPU_CHAINS_PER_CALL`` on
    CPU, ``chains_per_call`` of the free GPU memory on a GPU); ``seeding`` as in the module doc."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 0, seeding: str = "chain") -> None:
        if seeding not in SEEDINGS:
            raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}, got {seeding!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size must be a positive number of chains or 0 (auto), got {batch_size!r}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.seeding = batch_size, seeding

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
        free, _ = torch.cuda.mem_get_info(device)
        return chains_per_call(free, kv_bytes_per_token=kv_bytes_per_token(self.model),
                               tokens_per_chain=longest + max_new_tokens, vocab=len(self.tokenizer))

    def generate(self, prompts: Sequence[Sequence[str]], *, temperature: float, top_p: float,
                 max_new_tokens: int, seed: int, progress: bool = False,
                 desc: str = "sampling") -> list[list[Generation]]:
        import torch
        from tqdm.auto import tqdm
        from transformers import LogitsProcessorList

        check_sampling(temperature, top_p, max_new_tokens)
        model, tokenizer = self.model, self.tokenizer
        jobs = [(g, c) for g, row in enumerate(prompts) for c in range(len(row))]
        out: list[list[Any]] = [[None] * len(row) for row in prompts]
        eos_id = tokenizer.eos_token_id
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
        device = self.device
        batch_size = self.batch_size or self.chains_per_call(prompts, max_new_tokens)
        was_training = model.training
        model.eval()
        if self.seeding == "batch":
            torch.manual_seed(seed)
        old_side = getattr(tokenizer, "padding_side", "left")
        tokenizer.padding_side = "left"
        try:
            bar = tqdm(total=len(jobs), desc=desc, unit="chain", disable=not progress, leave=False)
            for start in range(0, len(jobs), batch_size):
                batch = jobs[start:start + batch_size]
                enc = tokenizer([prompts[g][c] for g, c in batch], return_tensors="pt", padding=True)
                enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_id, pad_token_id=pad_id)
                if self.seeding == "batch":
                    kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
                else:
                    uniforms = torch.from_numpy(chain_uniforms(seed, batch, max_new_tokens)).to(device)
                    draw = ChainDraw(uniforms, enc["input_ids"].shape[1], temperature=temperature, top_p=top_p)
                    kwargs.update(do_sample=False, logits_processor=LogitsProcessorList([draw]))
                with torch.no_grad():
                    ids = model.generate(**enc, **kwargs)
                for (g, c), row in zip(batch, ids[:, enc["input_ids"].shape[1]:].tolist(), strict=True):
                    new, truncated = finish_chain(row, eos_id, pad_id)
                    out[g][c] = Generation(tokenizer.decode(new, skip_special_tokens=True), len(new), truncated)
                bar.update(len(batch))
            bar.close()
        finally:
            tokenizer.padding_side = old_side
            model.train(was_training)
        return out


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

    loaded, tokenizer = load_checkpoint(model, dtype=options.dtype, device=options.device)
    return HFSampler(loaded, tokenizer, batch_size=options.batch_size, seeding=options.seeding), tokenizer


__all__ = ["BACKENDS", "SEEDINGS", "ChainDraw", "DeviceOptions", "Generation", "HFSampler", "Sampler",
           "SamplingOptions", "chain_seed", "chain_uniforms", "chains_per_call", "check_sampling",
           "check_sampling_memory", "check_vllm", "check_vllm_inputs", "finish_chain", "hide_library_progress",
           "kv_bytes_per_token", "open_sampler"]

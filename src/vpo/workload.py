"""Estimating the work and memory of answer pools, and the memory of a model and its generation
batch, before sampling or loading anything, and refusing what cannot fit.

Usage::

    from vpo.workload import check_pool_workload
    work = check_pool_workload(examples=100, pool=30, m=3, objectives=4, max_new_tokens=256, eval_weights=64)
    work.chains, work.tokens, work.bytes        # chains to sample, tokens at most, bytes held at most

    from vpo.workload import MemoryEstimate, check_memory, device_memory, generation_bytes, read_model_shape
    shape = read_model_shape("runs/vpo")        # config.json and safetensors headers; no weight is read
    estimate = MemoryEstimate(weights=shape.parameters * 4,
                              generation=generation_bytes(shape, chains=256, tokens=1024, itemsize=4))
    check_memory(estimate, available=device_memory("cpu"), what="sampling", lower="--batch-size")

A pool of P answers for each of G examples (P / m chains of up to T tokens each) is held in memory
as its reward vectors (G, P, D), the raw generations, and, while its metrics are computed, one
score per example, evaluation weight and answer (G, K, P). ``check_pool_workload`` raises
ValueError naming the flag when that exceeds the memory this machine has available.

A model on its device holds its weights and, while it samples B chains of T tokens (prompt and
new) at once, their KV cache (2 x layers x KV heads x head size x dtype size x B x T), the
activations of the prompt's forward pass and one step's logits (``MemoryEstimate``,
``generation_bytes``); training adds gradients, the AdamW moments, a frozen KL reference copy
and, given the micro-batch, the activations the backward pass keeps (``training_estimate``).
``check_memory`` raises ValueError with the estimate, the device's free memory (``device_memory``:
RAM, or ``torch.cuda.mem_get_info`` for a CUDA device) and the flags to lower.

On a GPU the estimate is of what torch's caching allocator reserves (``reserved_bytes``:
``torch.cuda.max_memory_reserved``), not only of the live tensors: see "The memory model" in
docs/gpu.md. In short, the live tensors (above) are counted from the shapes; the allocator rounds
and caches their blocks, which ``RESERVED_PER_ALLOCATED`` and ``ALLOCATOR_OVERHEAD`` allow for,
provided nothing grows a block a token at a time (the sampler preallocates its KV cache:
``kv_cache="static"``) and segments are expandable (``prepare_cuda_allocator``). A process is
then held to its share of the card by ``cap_process_memory``
(``torch.cuda.set_per_process_memory_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLOCATOR_OVERHEAD", "AUTOCAST_BYTES_PER_ELEMENT", "CUDA_CONTEXT_BYTES", "DTYPE_BYTES", "KV_CACHES",
           "MemoryEstimate", "ModelShape", "PoolWorkload", "RESERVED_PER_ALLOCATED", "activation_bytes_per_token",
           "allocated_budget", "available_memory", "cap_process_memory", "chains_in_budget", "check_memory",
           "check_pool_workload", "cuda_memory", "device_memory", "fused_head_bytes", "generation_bytes",
           "human_bytes", "model_folder", "optimizer_state_bytes", "prefill_bytes_per_token", "prepare_cuda_allocator",
           "prompt_tokens", "gguf_shape", "read_model_shape", "reserved_bytes", "safetensors_parameters",
           "shape_from_config", "training_estimate"]

_BYTES_PER_ANSWER = 120
"""Python overhead of one answer's generation text and bookkeeping (a str object, list slots)."""
_BYTES_PER_TOKEN = 4
"""Characters a generated token may take in the stored text (one byte each)."""


@dataclass(frozen=True)
class PoolWorkload:
    """Work and memory of sampling and scoring pools (upper bounds)."""

    examples: int
    """G examples."""
    answers: int
    """G x P answers."""
    chains: int
    """G x P / m generations."""
    tokens: int
    """Generated tokens at most (every chain at its budget)."""
    bytes: int
    """Bytes held at most: vectors, generation texts and the metrics' (G, K, P) scores."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` of /proc/meminfo), or None
    where that is unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def human_bytes(count: float) -> str:
    """``1.5 GB``-style text."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1024 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TB"  # pragma: no cover


def check_pool_workload(*, examples: int, pool: int, m: int, objectives: int, max_new_tokens: int,
                        eval_weights: int = 0, checkpoints: int = 1, flag: str = "--pool",
                        available: int | None = None) -> PoolWorkload:
    """The workload of ``checkpoints`` pools of ``pool`` answers (``m`` per chain, up to
    ``max_new_tokens`` tokens a chain) on ``examples`` examples with ``objectives`` objectives,
    scored under ``eval_weights`` weights. ValueError naming ``flag`` when one checkpoint's pools
    need more than the ``available`` memory (default: ``available_memory()``)."""
    answers = examples * pool
    chains = answers // max(m, 1)
    tokens = chains * max_new_tokens
    per_checkpoint = (answers * objectives * 8 + answers * _BYTES_PER_ANSWER + tokens * _BYTES_PER_TOKEN
                      + examples * max(eval_weights, 1) * pool * 8)
    work = PoolWorkload(examples=examples, answers=answers * checkpoints, chains=chains * checkpoints,
                        tokens=tokens * checkpoints, bytes=per_checkpoint)
    limit = available_memory() if available is None else available
    if limit is not None and per_checkpoint > limit:
        raise ValueError(f"{flag} {pool}: {examples} examples x {pool} answers ({chains:,} chains of up to "
                         f"{max_new_tokens} tokens) would hold about {human_bytes(per_checkpoint)} in memory, and this "
                         f"machine has {human_bytes(limit)} available; lower {flag} or --examples")
    return work


# ----- model memory ---------------------------------------------------------------------------

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per weight of the dtypes a model is loaded in (``--dtype``)."""
LOGIT_BYTES_PER_ENTRY = 28
"""Bytes one vocabulary entry of one chain takes at a sampling step: the float32 logits,
probabilities and temperature-scaled copy, and the float64 CDF of per-chain seeding."""
ADAMW_STATE_BYTES = 8
"""AdamW's two float32 moments per trained parameter."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate needs of a causal LM, read from its config.json and safetensors
    headers (no weight is loaded)."""

    parameters: int
    """Parameters (the tensors of the safetensors headers, else a Llama-style count from the config)."""
    layers: int
    """Decoder layers."""
    kv_heads: int
    """Key/value heads per layer (fewer than the attention heads with grouped-query attention)."""
    head_dim: int
    """Size of one head."""
    vocab: int
    """Vocabulary entries (the logits of one step)."""
    hidden: int = 0
    """Hidden size (activations)."""
    mlp: int = 0
    """MLP width (activations)."""
    heads: int = 0
    """Attention heads (an attention matrix, where one is materialised)."""

    def kv_bytes_per_token(self, itemsize: int) -> int:
        """KV-cache bytes one token of one chain takes: 2 (keys, values) x layers x KV heads x head
        size x dtype size."""
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize


def shape_from_config(config: dict, parameters: int | None = None) -> ModelShape:
    """The ``ModelShape`` of a config.json dict (its ``text_config`` for a multimodal model);
    ``parameters``: counted elsewhere (safetensors headers), else estimated from the config as a
    Llama-style decoder (embeddings, attention, gated MLP; norms left out)."""
    config = config.get("text_config") or config

    def first(*names: str, default: int = 0) -> int:
        for name in names:
            if config.get(name):
                return int(config[name])
        return default

    hidden = first("hidden_size", "n_embd", "d_model")
    layers = first("num_hidden_layers", "n_layer", "num_layers")
    heads = first("num_attention_heads", "n_head", "num_heads", default=1)
    kv_heads = first("num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = first("head_dim", default=hidden // max(heads, 1))
    vocab = first("vocab_size")
    mlp = first("intermediate_size", "n_inner", default=4 * hidden)
    if parameters is None:
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
        parameters = embeddings + layers * (attention + 3 * hidden * mlp)
    return ModelShape(parameters=parameters, layers=layers, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab,
                      hidden=hidden, mlp=mlp, heads=heads)


def safetensors_parameters(files: list[Path]) -> int | None:
    """Elements in the tensors of ``files`` (from their JSON headers, read and checked by
    ``vpo.checkpoints.read_safetensors_header``, without reading the weights), or None when one
    cannot be read."""
    import math

    from vpo.checkpoints import read_safetensors_header

    total = 0
    for path in files:
        try:
            header = read_safetensors_header(path)
        except (OSError, ValueError):
            return None
        total += sum(math.prod(entry.get("shape", [])) for name, entry in header.items()
                     if name != "__metadata__" and isinstance(entry, dict))
    return total


def model_folder(model: str | Path) -> Path | None:
    """The folder holding the config.json of ``model``: itself, the base model of a LoRA adapter
    folder, or the cached snapshot of a hub id; None for a .gguf file or what is not found."""
    path = Path(model)
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        if (path / "adapter_config.json").is_file():
            from vpo.models import adapter_base

            base = adapter_base(path)
            return model_folder(base) if base else None
        return None
    if path.suffix == ".gguf" or path.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers always brings it
        return None
    found = try_to_load_from_cache(str(model), "config.json")
    return Path(found).parent if isinstance(found, str) else None


def gguf_shape(path: str | Path) -> ModelShape | None:
    """``ModelShape`` of a GGUF file from its header (the ``<arch>.*`` keys and the tensors'
    shapes, memory-mapped: no weight is read or de-quantised); None when it cannot be read."""
    import math

    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        arch = reader.fields["general.architecture"].contents()

        def value(key: str, default: int = 0) -> int:
            field = reader.fields.get(f"{arch}.{key}")
            return int(field.contents()) if field is not None else default

        heads = value("attention.head_count", 1)
        hidden = value("embedding_length")
        vocab = value("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
        return ModelShape(parameters=sum(math.prod(int(d) for d in t.shape) for t in reader.tensors),
                          layers=value("block_count"), kv_heads=value("attention.head_count_kv", heads),
                          head_dim=value("rope.dimension_count", hidden // max(heads, 1)), vocab=vocab,
                          hidden=hidden, mlp=value("feed_forward_length", 4 * hidden), heads=heads)
    except Exception:  # noqa: BLE001  (a header gguf cannot read: no estimate, as for an unknown folder)
        return None


def read_model_shape(model: str | Path) -> ModelShape | None:
    """``ModelShape`` of a checkpoint folder, LoRA adapter (its base), cached hub id or ``.gguf``
    file (``gguf_shape``), from config.json and the safetensors headers; None where none can be read."""
    import json

    if str(model).endswith(".gguf") and Path(model).is_file():
        return gguf_shape(model)
    folder = model_folder(model)
    if folder is None:
        return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    files = sorted(folder.glob("*.safetensors"))
    return shape_from_config(config, safetensors_parameters(files) if files else None)


def prompt_tokens(prompts: list[str], vocab: int) -> int:
    """Tokens of the longest of ``prompts`` (before the tokenizer is loaded): one per character
    for a character-level vocabulary (under 1024 entries), else one per two characters (English
    BPE takes about four; digits and code fewer), plus 32 for chat-template markup."""
    longest = max((len(p) for p in prompts), default=0)
    return (longest if vocab < 1024 else (longest + 1) // 2) + 32


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a run's live tensors take on its device at their peak (``reserved_bytes`` adds what
    torch's caching allocator holds on a GPU beyond them)."""

    weights: int
    """The model's weights (and the frozen KL reference copy when training keeps one, and under
    bf16 autocast its cached bf16 copies of them)."""
    generation: int
    """One generation batch: its KV cache (2 x layers x KV heads x head size x dtype size x chains
    x (prompt + new tokens)), the prompt's forward pass (``prefill_bytes_per_token``) and one
    step's logits (``LOGIT_BYTES_PER_ENTRY`` per vocabulary entry and chain)."""
    training: int = 0
    """Gradients and optimiser state of the trained parameters."""
    activations: int = 0
    """What the backward pass keeps of one micro-batch's forward pass (``activation_bytes_per_token``)."""

    @property
    def total(self) -> int:
        return self.weights + self.generation + self.training + self.activations

    def describe(self, available: int | None) -> str:
        """``weights 0.5 GB, generation batch 1.2 GB of 20.0 GB available``."""
        parts = [f"weights {human_bytes(self.weights)}"]
        if self.training:
            parts.append(f"gradients and optimiser {human_bytes(self.training)}")
        if self.activations:
            parts.append(f"activations {human_bytes(self.activations)}")
        parts.append(f"generation batch {human_bytes(self.generation)}")
        where = f" of {human_bytes(available)} available" if available is not None else ""
        return ", ".join(parts) + where

    def scaled(self, count: int) -> MemoryEstimate:
        """``count`` processes of this estimate."""
        return MemoryEstimate(weights=self.weights * count, generation=self.generation * count,
                              training=self.training * count, activations=self.activations * count)


KV_CACHES = ("static", "dynamic")
"""How a generate call keeps its KV cache: ``static`` preallocates (chains, prompt + new tokens)
per layer once (transformers' ``StaticCache``); ``dynamic`` (transformers' default) grows it by
one token a step by concatenation, so each step a layer briefly holds its old and its grown copy,
and a GPU's caching allocator is left with freed blocks of every size."""

PREFILL_ELEMENTS = (4, 3)
"""Elements per prompt token of the widest moment of an inference forward pass (no gradient: a
layer's tensors are freed before the next one runs), as (per hidden unit, per MLP unit): the
residual stream, its norm, the attention output and its projection (4 x hidden), the MLP's gate,
up and activated gate (3 x mlp). Measured on CPU with a tensor-counting dispatch mode
(tests/core/test_workload.py)."""

ACTIVATION_ELEMENTS = (12, 4)
"""Elements per token and layer that a decoder layer's forward pass keeps for the backward pass
(no gradient checkpointing), as (per hidden unit, per MLP unit): norms, queries, keys, values,
rotary copies, attention output, projections, residuals (12 x hidden); the MLP's gate, up, their
activation and product (4 x mlp). Measured on CPU with a tensor-counting dispatch mode
(tests/core/test_workload.py): 1,536 elements for hidden 64 / mlp 192, 3,072 for 128 / 384."""


def prefill_bytes_per_token(shape: ModelShape, itemsize: int, *, total_tokens: int) -> int:
    """Transient bytes one prompt token takes while the prompt's forward pass runs: the widest
    layer's tensors (``PREFILL_ELEMENTS``) and a float attention-mask row over the
    ``total_tokens`` the cache holds (torch's attention kernels, CPU ones included, do not keep a
    score matrix per head: measured)."""
    per_hidden, per_mlp = PREFILL_ELEMENTS
    return (per_hidden * shape.hidden + per_mlp * shape.mlp) * itemsize + total_tokens * 4


FUSED_HEAD_TILE = (4096, 32768)
"""(rows, columns) of the tile TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``, which
TRL's SFT and GRPO trainers install; TRL 1.16) projects into: its ``ChunkedLogProbFunction``
allocates one (min(positions, 4096), 32768) buffer in the compute dtype in the forward pass and
another in the backward pass, 32768 columns whatever the vocabulary (512 MiB in float32 for a
32-entry vocabulary). The backward's buffer is taken while the kept activations are still alive,
so it adds to their peak. On CUDA the scored positions are the labelled ones; elsewhere all.
On one H100 this tile was the difference between the demo's training peaks and the model's own
forward and backward (measured there with the preset's shapes; docs/gpu.md)."""


def fused_head_bytes(positions: int, itemsize: int) -> int:
    """Bytes of the fused LM head's tile (``FUSED_HEAD_TILE``) for a micro-batch of ``positions``
    token positions (0: none)."""
    rows, columns = FUSED_HEAD_TILE
    return min(max(positions, 0), rows) * columns * itemsize


AUTOCAST_BYTES_PER_ELEMENT = 2.75
"""Bytes per ``ACTIVATION_ELEMENTS`` element that a forward pass under bf16 autocast over float32
weights keeps (TRL's ``bf16=True``): the matmuls' inputs and outputs in bf16, the residual stream
and the norms in float32. Measured on an H200 (SmolLM2-135M, TRL 1.16's GRPO trainer with its fused
LM head, micro-batches of 32 x 85 and 32 x 228 tokens): allocated peaks of 5.45 and 9.81 GiB, 0.98
MiB a token between them, 2.6 bytes an element over 30 layers; rounded up (docs/gpu.md)."""


def activation_bytes_per_token(shape: ModelShape, itemsize: float, *, checkpointing: bool = False,
                               logits: bool = True) -> int:
    """Bytes the backward pass keeps per token of a micro-batch: ``ACTIVATION_ELEMENTS`` per
    layer (``itemsize`` bytes each; ``AUTOCAST_BYTES_PER_ELEMENT`` under bf16 autocast), or with
    gradient checkpointing one hidden state per layer plus one layer recomputed; outside the layers
    the embeddings' output and the final norm (2 x hidden); and with ``logits`` the float32 logits
    with what a loss derives from them (log-softmax, the probabilities of an entropy, their
    gradients: 8 x 4 bytes per vocabulary entry). TRL's fused LM head never holds the logits of a
    whole micro-batch (``logits=False``; its tile is ``fused_head_bytes``)."""
    per_hidden, per_mlp = ACTIVATION_ELEMENTS
    layer = (per_hidden * shape.hidden + per_mlp * shape.mlp) * itemsize
    kept = shape.layers * shape.hidden * itemsize + layer if checkpointing else shape.layers * layer
    return int(kept + 2 * shape.hidden * itemsize + (32 * shape.vocab if logits else 0))


def generation_bytes(shape: ModelShape, *, chains: int, tokens: int, itemsize: int, prompt: int = 0,
                     cache: str = "static") -> int:
    """Live bytes of one generation batch of ``chains`` chains of ``tokens`` tokens (``prompt`` of
    them the prompt; 0: the prompt's forward pass is not counted) at its peak, plus one step's
    logits. A ``static`` cache holds all ``tokens`` from the start, so the peak is the cache and the
    prompt's forward pass (``prefill_bytes_per_token``) together; a ``dynamic`` one grows, so the
    peak is the larger of the prompt's pass over its prompt-long cache and the full cache with one
    layer's grown copy (``KV_CACHES``)."""
    if cache not in KV_CACHES:
        raise ValueError(f"cache must be one of {', '.join(KV_CACHES)}, got {cache!r}")
    kv = shape.kv_bytes_per_token(itemsize)
    prefill = prompt * prefill_bytes_per_token(shape, itemsize, total_tokens=tokens) if prompt else 0
    if cache == "static":
        peak = kv * tokens + prefill
    else:
        peak = max(kv * prompt + prefill, kv * tokens + kv * tokens // max(shape.layers, 1))
    return chains * (peak + LOGIT_BYTES_PER_ENTRY * shape.vocab)


def chains_in_budget(budget: float, per_chain: int, *, cap: int) -> int:
    """How many chains of ``per_chain`` bytes fit in ``budget`` bytes: between 1 and ``cap``
    (one chain is the least a sampler can do; ``check_memory`` refuses what does not fit)."""
    return int(max(1, min(cap, budget // max(per_chain, 1))))


def optimizer_state_bytes(optim: str) -> int:
    """Optimiser state bytes per trained parameter for a transformers ``optim`` name: AdamW's
    two float32 moments, a quarter of that for the 8-bit ones; others are not counted (0)."""
    name = optim.lower()
    if "adam" not in name:
        return 0
    return ADAMW_STATE_BYTES // 4 if "8bit" in name else ADAMW_STATE_BYTES


# ----- what torch's CUDA caching allocator reserves -------------------------------------------

RESERVED_PER_ALLOCATED = 1.2
"""Bytes the caching allocator reserves per byte of live tensors at the peak, with a preallocated
KV cache and expandable segments: blocks are rounded up (512 B, large ones to 2 MB pages) and a
freed block is kept for the next request of its size. A cache grown a token at a time under the
default allocator has no such bound (the first H100 run: 56 GB reserved for 3.5 GB allocated);
the GPU check measures this ratio (docs/gpu.md)."""
ALLOCATOR_OVERHEAD = 64 * 2**20
"""Reserved bytes beyond the tensors: cuBLAS workspaces (32 MB on a Hopper GPU by torch's
default) and the 2 MB segments that small tensors share."""
CUDA_CONTEXT_BYTES = 512 * 2**20
"""What a CUDA process holds outside the allocator (its context, kernels, library handles): in
``torch.cuda.mem_get_info``'s used memory, never in ``max_memory_reserved``."""
CUDA_ALLOC_CONF = "expandable_segments:True"
"""The allocator setting vpo asks for when the user has set none (``prepare_cuda_allocator``)."""


def reserved_bytes(estimate: MemoryEstimate | int) -> int:
    """What the caching allocator reserves for a process whose live tensors peak at ``estimate``
    (bytes or a ``MemoryEstimate``): ``RESERVED_PER_ALLOCATED`` x them + ``ALLOCATOR_OVERHEAD``."""
    live = estimate.total if isinstance(estimate, MemoryEstimate) else int(estimate)
    return int(live * RESERVED_PER_ALLOCATED) + ALLOCATOR_OVERHEAD


def allocated_budget(reserved: float) -> int:
    """The live-tensor bytes that ``reserved`` bytes of allocator reserve hold (``reserved_bytes``'s
    inverse); 0 when the reserve is below the allocator's overhead."""
    return max(0, int((reserved - ALLOCATOR_OVERHEAD) / RESERVED_PER_ALLOCATED))


def prepare_cuda_allocator() -> str:
    """Ask for expandable segments (``CUDA_ALLOC_CONF``) in this process and the processes it
    starts, unless ``PYTORCH_CUDA_ALLOC_CONF`` or ``PYTORCH_ALLOC_CONF`` is set (the user's
    setting wins; ``expandable_segments:False`` turns it off). The allocator reads the variable
    when CUDA initialises, so this runs before the first CUDA call. Returns the setting in force."""
    import os

    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = CUDA_ALLOC_CONF
    return f"PYTORCH_CUDA_ALLOC_CONF={CUDA_ALLOC_CONF}"


def cuda_memory(device: str) -> tuple[int, int]:
    """(free, total) bytes of a CUDA device, from ``torch.cuda.mem_get_info`` (the allocator's
    setting is fixed first: ``prepare_cuda_allocator``)."""
    prepare_cuda_allocator()
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device))
    return int(free), int(total)


def device_memory(device: str) -> int | None:
    """Bytes a new allocation may take on ``device``: the free memory of a CUDA device (torch
    is imported here, only for one), else ``available_memory()``."""
    if str(device).startswith("cuda"):
        return cuda_memory(device)[0]
    return available_memory()


def cap_process_memory(device: str, share: int) -> float:
    """Hold this process to ``share`` bytes of the CUDA ``device``'s allocator reserve with
    ``torch.cuda.set_per_process_memory_fraction`` (past it the allocator frees its cached blocks
    and retries, then raises OutOfMemoryError instead of taking a neighbour's memory). Returns
    the fraction of the card set."""
    import torch

    # torch refuses "cuda" without an index here (unlike mem_get_info): the current device it means
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, max(share, 1) / total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction


def check_memory(estimate: MemoryEstimate, *, available: int | None, what: str, lower: str) -> None:
    """ValueError in one line when ``estimate`` exceeds ``available`` bytes (None: unknown, no
    check): ``what`` the run does, then the estimate, the memory available and the flags to lower."""
    if available is not None and estimate.total > available:
        raise ValueError(f"{what} needs about {human_bytes(estimate.total)} ({estimate.describe(None)}), and "
                         f"{human_bytes(available)} is available; lower {lower}")


def training_estimate(shape: ModelShape, *, chains: int, tokens: int, kv_itemsize: int, weight_bytes: int = 4,
                      reference: bool = True, full: bool = True, optimizer_bytes: int = ADAMW_STATE_BYTES,
                      micro_batch: int = 0, checkpointing: bool = False, prompt: int = 0,
                      cache: str = "static", fused_head: bool = False, autocast: bool = False) -> MemoryEstimate:
    """Memory of an RL run on one device: the policy's weights (``weight_bytes`` each; twice with
    a frozen KL ``reference`` copy), gradients and ``optimizer_bytes`` of optimiser state per
    parameter when ``full`` (all weights trained; a LoRA adapter's are a small share, not counted),
    the generation batch of ``chains`` rollouts of ``tokens`` tokens (``prompt`` of them the
    prompt; ``generation_bytes``), and the activations the backward pass keeps for a micro-batch
    of ``micro_batch`` rows of ``tokens`` tokens (``activation_bytes_per_token``; 0: not counted,
    and the estimate is a lower bound), with ``fused_head`` the tile of TRL's fused LM head
    in place of the logits (``fused_head_bytes``: on a GPU, whose allocator reserves all of it; on
    CPU only its first vocabulary columns are written, so few of its pages are ever touched).
    ``autocast``: bf16 autocast over the weights (TRL's ``bf16=True``): activations at
    ``AUTOCAST_BYTES_PER_ELEMENT``, a bf16 tile, and autocast's cached bf16 copies of the weights."""
    weights = shape.parameters * weight_bytes * (2 if reference else 1)
    training = shape.parameters * (weight_bytes + optimizer_bytes) if full else 0
    if autocast:
        weights += shape.parameters * DTYPE_BYTES["bfloat16"]
    itemsize = AUTOCAST_BYTES_PER_ELEMENT if autocast else weight_bytes
    activations = micro_batch * tokens * activation_bytes_per_token(shape, itemsize, checkpointing=checkpointing,
                                                                    logits=not fused_head)
    if fused_head and micro_batch:
        activations += fused_head_bytes(micro_batch * tokens, DTYPE_BYTES["bfloat16"] if autocast else weight_bytes)
    return MemoryEstimate(weights=weights, training=training, activations=activations,
                          generation=generation_bytes(shape, chains=chains, tokens=tokens, itemsize=kv_itemsize,
                                                      prompt=prompt, cache=cache))

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
new) at once, their KV cache (2 x layers x KV heads x head size x dtype size x B x T) and one
step's logits (``MemoryEstimate``, ``generation_bytes``); training adds gradients, the AdamW
moments and a frozen KL reference copy (``training_estimate``; the forward pass's activations are
not counted). ``check_memory`` raises ValueError with the estimate, the device's free memory
(``device_memory``: RAM, or ``torch.cuda.mem_get_info`` for a CUDA device) and the flags to lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DTYPE_BYTES", "MemoryEstimate", "ModelShape", "PoolWorkload", "available_memory", "check_memory",
           "check_pool_workload", "device_memory", "generation_bytes", "human_bytes", "model_folder",
           "optimizer_state_bytes", "prompt_tokens", "read_model_shape", "safetensors_parameters",
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
    if parameters is None:
        mlp = first("intermediate_size", "n_inner", default=4 * hidden)
        attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
        parameters = embeddings + layers * (attention + 3 * hidden * mlp)
    return ModelShape(parameters=parameters, layers=layers, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab)


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


def read_model_shape(model: str | Path) -> ModelShape | None:
    """``ModelShape`` of a checkpoint folder, LoRA adapter (its base) or cached hub id, from
    config.json and the safetensors headers; None where neither can be read (a .gguf file)."""
    import json

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
    """Bytes a run holds on its device at its peak (estimates; activations of the training
    forward pass are not counted, so training needs more than ``total``)."""

    weights: int
    """The model's weights (and the frozen KL reference copy when training keeps one)."""
    generation: int
    """KV cache of one generation batch (2 x layers x KV heads x head size x dtype size x chains x
    (prompt + new tokens)) and one step's logits (``LOGIT_BYTES_PER_ENTRY`` per vocabulary entry and chain)."""
    training: int = 0
    """Gradients and optimiser state of the trained parameters."""

    @property
    def total(self) -> int:
        return self.weights + self.generation + self.training

    def describe(self, available: int | None) -> str:
        """``weights 0.5 GB, generation batch 1.2 GB of 20.0 GB available``."""
        parts = [f"weights {human_bytes(self.weights)}"]
        if self.training:
            parts.append(f"gradients and optimiser {human_bytes(self.training)}")
        parts.append(f"generation batch {human_bytes(self.generation)}")
        where = f" of {human_bytes(available)} available" if available is not None else ""
        return ", ".join(parts) + where


def generation_bytes(shape: ModelShape, *, chains: int, tokens: int, itemsize: int) -> int:
    """KV cache and logits of ``chains`` chains of ``tokens`` tokens (prompt + new) sampled together."""
    return chains * (shape.kv_bytes_per_token(itemsize) * tokens + LOGIT_BYTES_PER_ENTRY * shape.vocab)


def optimizer_state_bytes(optim: str) -> int:
    """Optimiser state bytes per trained parameter for a transformers ``optim`` name: AdamW's
    two float32 moments, a quarter of that for the 8-bit ones; others are not counted (0)."""
    name = optim.lower()
    if "adam" not in name:
        return 0
    return ADAMW_STATE_BYTES // 4 if "8bit" in name else ADAMW_STATE_BYTES


def device_memory(device: str) -> int | None:
    """Bytes a new allocation may take on ``device``: the free memory of a CUDA device (torch
    is imported here, only for one), else ``available_memory()``."""
    if str(device).startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return available_memory()


def check_memory(estimate: MemoryEstimate, *, available: int | None, what: str, lower: str) -> None:
    """ValueError in one line when ``estimate`` exceeds ``available`` bytes (None: unknown, no
    check): ``what`` the run does, then the estimate, the memory available and the flags to lower."""
    if available is not None and estimate.total > available:
        raise ValueError(f"{what} needs about {human_bytes(estimate.total)} ({estimate.describe(None)}), and "
                         f"{human_bytes(available)} is available; lower {lower}")


def training_estimate(shape: ModelShape, *, chains: int, tokens: int, kv_itemsize: int, weight_bytes: int = 4,
                      reference: bool = True, full: bool = True,
                      optimizer_bytes: int = ADAMW_STATE_BYTES) -> MemoryEstimate:
    """Memory of an RL run on one device: the policy's weights (``weight_bytes`` each; twice with
    a frozen KL ``reference`` copy), gradients and ``optimizer_bytes`` of optimiser state per
    parameter when ``full`` (all weights trained; a LoRA adapter's are a small share, not counted),
    and the KV cache and logits of one generation batch of ``chains`` rollouts of ``tokens``
    tokens. Activations of the policy's forward pass are left out (they depend on the
    micro-batch, sequence length and gradient checkpointing): the estimate is a lower bound."""
    weights = shape.parameters * weight_bytes * (2 if reference else 1)
    training = shape.parameters * (weight_bytes + optimizer_bytes) if full else 0
    return MemoryEstimate(weights=weights, training=training,
                          generation=generation_bytes(shape, chains=chains, tokens=tokens, itemsize=kv_itemsize))

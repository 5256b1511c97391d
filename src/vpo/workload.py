"""Estimating the work and memory of answer pools before sampling them, and refusing what cannot fit.

Usage::

    from vpo.workload import check_pool_workload
    work = check_pool_workload(examples=100, pool=30, m=3, objectives=4, max_new_tokens=256, eval_weights=64)
    work.chains, work.tokens, work.bytes        # chains to sample, tokens at most, bytes held at most

A pool of P answers for each of G examples (P / m chains of up to T tokens each) is held in memory
as its reward vectors (G, P, D), the raw generations, and, while its metrics are computed, one
score per example, evaluation weight and answer (G, K, P). ``check_pool_workload`` raises
ValueError naming the flag when that exceeds the memory this machine has available.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PoolWorkload", "available_memory", "check_pool_workload", "human_bytes"]

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

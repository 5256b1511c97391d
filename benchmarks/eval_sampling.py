"""Answers per second when sampling answer pools (``vpo.evaluation.sample_pools``, HF backend).

Usage: ``python benchmarks/eval_sampling.py [--examples 20] [--pool 30] [--answers 1,3] [--threads 1]``

The policy is the demo's tiny Llama (``vpo.demo.config.DemoConfig``: hidden 96, 3 layers, the
compact maze format), randomly initialised: a random policy writes about as many tokens as a
trained one stops at, and the speed does not depend on the weights. Each example is a 5x5 maze
with a pool of ``--pool`` answers (pool / m chains of m answers, m from ``--answers``), scored as
``vpo eval`` scores them. Paths:

* ``per example (old search)``: one generate call per example (its pool / m chains), seeded per
  call, what ``vpo search best-of-n`` did before examples shared batched calls;
* ``batched, batch seeding``: ``--batch-size`` chains of all examples per call, one seed per
  call: the older stream of ``vpo eval`` (``--seeding batch``);
* ``batched, chain seeding``: the same calls, every chain drawn from its own seeded stream
  (``--seeding chain``, the default now), so the pool does not depend on the batch size.

Results print as a table and as one JSON line, with the load average (other processes on the
machine slow every number).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from vpo.demo.config import DemoConfig
from vpo.tasks.maze.format import CompactMazeFormat
from vpo.evaluation import sample_pools
from vpo.models import build_char_tokenizer, build_tiny_llama, resolve_device, resolve_dtype
from vpo.tasks import get_task


def demo_policy(device: str, dtype: str) -> tuple[object, object, CompactMazeFormat]:
    cfg = DemoConfig()
    fmt = CompactMazeFormat(max_answers=cfg.answers)
    tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    model = build_tiny_llama(tokenizer, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, mlp=cfg.mlp,
                             max_positions=256, seed=cfg.seed)
    return model.to(device=device, dtype=getattr(torch, dtype)).eval(), tokenizer, fmt


def run(path: str, model, tokenizer, fmt, task, examples, *, m: int, pool: int, batch_size: int) -> dict:
    max_new = fmt.completion_budget(examples, m)
    settings = dict(m=m, pool=pool, temperature=0.7, max_new_tokens=max_new, fmt=fmt, progress=False)
    start = time.perf_counter()
    if path == "per example (old search)":
        pools = [sample_pools(model, tokenizer, task, [example], batch_size=32, seeding="batch", seed=i, **settings)
                 for i, example in enumerate(examples)]
        calls, tokens = len(examples), sum(p.completion_tokens for p in pools) / len(pools)
    else:
        seeding = "batch" if "batch seeding" in path else "chain"
        pools = [sample_pools(model, tokenizer, task, examples, batch_size=batch_size, seeding=seeding, **settings)]
        calls, tokens = -(-len(examples) * (pool // m) // batch_size), pools[0].completion_tokens
    seconds = time.perf_counter() - start
    answers = len(examples) * pool
    per_call = min(32, pool // m) if "per example" in path else min(batch_size, len(examples) * (pool // m))
    return {"path": path, "m": m, "chains_per_call": per_call, "calls": calls,
            "seconds": seconds, "answers_per_s": answers / seconds, "tokens_per_chain": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--pool", type=int, default=30)
    parser.add_argument("--answers", default="1,3", help="answers per chain m, comma-separated")
    parser.add_argument("--batch-size", type=int, default=256, help="chains per call of the batched paths")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    model, tokenizer, fmt = demo_policy(device, dtype)
    task = get_task("maze", size=5, reward_mode="linear")
    examples = task.examples("test", args.examples)
    rows = []
    for m in (int(x) for x in args.answers.split(",")):
        sample_pools(model, tokenizer, task, examples[:1], m=m, pool=m, max_new_tokens=4, fmt=fmt, progress=False)
        for path in ("per example (old search)", "batched, batch seeding", "batched, chain seeding"):
            rows.append(run(path, model, tokenizer, fmt, task, examples, m=m, pool=args.pool,
                            batch_size=args.batch_size))
    load = os.getloadavg()[0]
    print(f"demo policy (random init) on {device} in {dtype}, {torch.get_num_threads()} torch thread(s); "
          f"{args.examples} mazes x pool {args.pool}; load average {load:.1f} on {os.cpu_count()} cores")
    print(f"{'path':<28}{'m':>3}{'chains/call':>12}{'calls':>7}{'tokens/chain':>14}{'seconds':>9}{'answers/s':>11}")
    for row in rows:
        print(f"{row['path']:<28}{row['m']:>3}{row['chains_per_call']:>12}{row['calls']:>7}{row['tokens_per_chain']:>14.1f}"
              f"{row['seconds']:>9.2f}{row['answers_per_s']:>11.1f}")
    print(json.dumps({"device": device, "dtype": dtype, "threads": torch.get_num_threads(), "loadavg_1min": load,
                      "cores": os.cpu_count(), "rows": rows}))


if __name__ == "__main__":
    main()

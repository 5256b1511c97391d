"""Pools of a finished ``vpo demo --preset smollm2`` run on the describe task's 32 ``extra`` held-out
topics, and the paired comparisons over the 16 shipped test topics, the 32 extra ones and all 48.

Usage::

    python scripts/demo_extra_pools.py sample runs/demo-smollm2-cpu grpo-s0 vpo-s0 warmup-m3
    python scripts/demo_extra_pools.py compare runs/demo-smollm2-cpu vpo-s0,vpo-s1 grpo-s0,grpo-s1

``sample`` writes ``<run>/eval-extra/<pool>.npz`` for each pool name the demo uses (``warmup-m1``,
``warmup-m3``, ``<method>-s<seed>``), sampled as the demo samples its pools (the same checkpoint,
m, pool size, temperature, token budget and chat format; every chain seeded by the run's seed and
its row). ``compare`` prints A - B at preference-weighted best@1 and best@<pool> (the demo's
best@30) and in diversity, paired over the topics and seed-averaged as the demo's report pairs
them (one pool name per seed, comma-separated, in seed order; a single seed's pools compare one
seed). Without extra pools it compares the shipped topics alone. The extra topics meet their own
fixed preference weights (the evaluation seed + 1), the same for every pool. An interval over 48
topics is about 0.6x the width of one over 16 (1/sqrt(3)).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

EXTRA_WEIGHT_SEED_OFFSET = 1
"""The extra topics' preference weights: ``example_weights`` seeded one above the shipped topics'."""


def run_config(run: Path) -> Any:
    """The finished run's configuration (its ``config.json``: every field that changes results)."""
    from vpo.demo.config import DemoConfig

    path = run / "config.json"
    if not path.is_file():
        raise SystemExit(f"{run} is not a finished demo run: no config.json")
    fields = {k: v for k, v in json.loads(path.read_text()).items() if k in DemoConfig.__dataclass_fields__}
    if fields.get("model") != "smollm2":
        raise SystemExit(f"{run} is not a --preset smollm2 run (model {fields.get('model')!r})")
    return DemoConfig(**fields, preset="smollm2", device="cpu", progress=False)


def sample(run: Path, names: list[str], eval_batch: int, topics: int | None = None) -> None:
    import dataclasses

    from vpo.demo.config import METHODS
    from vpo.demo.pretrained import PretrainedStages
    from vpo.demo.run import eval_jobs

    cfg = dataclasses.replace(run_config(run), eval_batch=eval_batch)
    stages = PretrainedStages(cfg)
    extra = stages.task.examples("extra")[:topics]
    stages.eval_examples = lambda: extra  # the demo's sampler, on the extra topics
    # the demo's own names: every method at every seed the names mention
    seeds = sorted({int(n.rsplit("-s", 1)[1]) for n in names if n.rsplit("-s", 1)[-1].isdigit()})
    jobs = {n: (ckpt, m) for n, ckpt, m in eval_jobs(cfg, list(METHODS), seeds, run)}
    for name in names:  # every name checked before the first pool's minutes of sampling
        if name not in jobs:
            raise SystemExit(f"{name!r} is not a pool name of the demo: warmup-m1, warmup-m{cfg.answers}, or "
                             f"<method>-s<seed> with a method of {', '.join(METHODS)}")
        if not (jobs[name][0] / "config.json").is_file():
            raise SystemExit(f"no checkpoint for pool {name!r} at {jobs[name][0]}")
    for name in names:
        ckpt, m = jobs[name]
        out = run / "eval-extra" / f"{name}.npz"
        t, c = time.time(), time.process_time()
        stages.sample_pool(name, ckpt, m, out, print)
        print(f"{out}: {len(extra)} topics x {cfg.pool} answers (m = {m}), {time.time() - t:.0f} s wall, "
              f"{time.process_time() - c:.0f} s CPU", flush=True)


def compare(run: Path, a: str, b: str) -> list[str]:
    from vpo.demo.pretrained import eval_examples, task_of
    from vpo.demo.run import EVAL_WEIGHT_SEED
    from vpo.evaluation import Pools, example_weights, paired, pool_metrics
    from vpo.records import RecordError

    cfg = run_config(run)
    task = task_of(cfg)
    shipped = eval_examples(cfg, task)
    dim = task.num_objectives(shipped[0])

    def weights(folder: str, topics: int) -> np.ndarray:
        offset = EXTRA_WEIGHT_SEED_OFFSET if folder == "eval-extra" else 0
        return example_weights(topics, dim, cfg.eval_weights, seed=cfg.seed + EVAL_WEIGHT_SEED + offset)

    if len(a.split(",")) != len(b.split(",")):
        raise SystemExit(f"{len(a.split(','))} pools against {len(b.split(','))}: give one per seed on each side")
    names = a.split(",") + b.split(",")
    missing = [name for name in names if not (run / "eval" / f"{name}.npz").is_file()]
    if missing:
        raise SystemExit(f"{run / 'eval'} has no pool {', '.join(missing)}: the demo samples a pool per method "
                         "and seed it ran (`vpo demo --seeds N` over the same folder adds seeds)")
    # the extra topics when every pool has them, the shipped topics alone when none has
    extra = [name for name in names if (run / "eval-extra" / f"{name}.npz").is_file()]
    if extra and len(extra) < len(names):
        absent = " ".join(sorted({name for name in names if name not in extra}))
        raise SystemExit(f"{run / 'eval-extra'} lacks the extra topics' pools of {absent}: sample them first "
                         f"(python scripts/demo_extra_pools.py sample {run} {absent})")
    folders = ("eval", "eval-extra") if extra else ("eval",)

    def per_seed(pools: str) -> list[dict[str, dict[str, np.ndarray]]]:
        out = []
        for name in pools.split(","):
            try:
                vectors = {folder: Pools.load(run / folder / f"{name}.npz").vectors for folder in folders}
            except RecordError as err:
                raise SystemExit(str(err)) from None
            parts = {folder: pool_metrics(v, task, eval_weights=weights(folder, len(v))) for folder, v in vectors.items()}
            if extra:
                parts["all"] = {k: np.concatenate([parts["eval"][k], parts["eval-extra"][k]]) for k in parts["eval"]}
            out.append(parts)
        return out

    seeds_a, seeds_b = per_seed(a), per_seed(b)
    if extra and len({len(s["eval-extra"]["diversity"]) for s in seeds_a + seeds_b}) != 1:
        raise SystemExit("the pools were sampled on different numbers of extra topics")
    pool = cfg.pool  # k up to the pool: the demo's best@30
    lines = [f"A = {a}, B = {b}; A - B, 95% interval over the topics (seed-averaged)"]
    parts = (("eval", "shipped"), ("eval-extra", "extra"), ("all", "all")) if extra else (("eval", "shipped"),)
    for part, label in parts:
        cells = []
        for key, k, shown in (("pref_best_at_k", 1, "pref best@1"), ("pref_best_at_k", pool, f"pref best@{pool}"),
                              ("diversity", None, "diversity")):
            r = paired([s[part] for s in seeds_a], [s[part] for s in seeds_b], key, k=k)
            cells.append(f"{shown} {r['mean']:+.3f} ± {r['half_width']:.3f}{' (significant)' if r['significant'] else ''}")
        level = [np.mean([s[part]["pref_best_at_k"][:, pool - 1].mean() for s in side]) for side in (seeds_a, seeds_b)]
        lines.append(f"{label} ({len(seeds_a[0][part]['diversity'])} topics): " + "; ".join(cells)
                     + f"; pref best@{pool} A {level[0]:.3f}, B {level[1]:.3f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="sample the extra topics' pools of a finished run")
    s.add_argument("run", type=Path)
    s.add_argument("pools", nargs="+", help="pool names: warmup-m1, warmup-m3, grpo-s0, vpo-s1, ...")
    s.add_argument("--eval-batch", type=int, default=160, help="chains per generate() call (the pools do not "
                   "depend on it)")
    s.add_argument("--topics", type=int, default=None, help="the first N extra topics only (default: all 32)")
    c = sub.add_parser("compare", help="paired A - B over the shipped, the extra and all held-out topics")
    c.add_argument("run", type=Path)
    c.add_argument("a", help="A's pool names, one per seed, comma-separated")
    c.add_argument("b", help="B's pool names, one per seed, comma-separated")
    args = parser.parse_args(argv)
    if args.command == "sample":
        sample(args.run, args.pools, args.eval_batch, args.topics)
    else:
        print("\n".join(compare(args.run, args.a, args.b)))


if __name__ == "__main__":
    main()

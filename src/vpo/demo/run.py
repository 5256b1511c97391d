"""The demo pipeline: warm-up -> RL per method and seed -> evaluation -> report, resumable.

Layout of the report folder (``--out``, default ``runs/demo``)::

    config.json                      the resolved DemoConfig (a re-run must match it)
    checkpoints/warmup/              tiny Llama after SFT (+ tokenizer, vpo_format.json, done.json)
    checkpoints/<method>-s<seed>/    after RL (done.json holds the training record)
    eval/<name>.npz (+ .jsonl)       answer pools: reward vectors (and the raw generations)
    logs/demo.log                    what ran, when, and how long it took
    metrics.json, report.md, report.html, plots/*.png

Each stage writes ``done.json`` (or the pool file) last, so a re-run of the same command skips
finished stages and resumes an interrupted training run from its newest TRL checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vpo.demo.config import METHODS, DemoConfig
from vpo.demo.format import CompactMazeFormat

PAPER = {"grpo": 0.432, "max_at_k": 0.577, "multi_rlvr": 0.436, "vpo": 0.593}
PAPER_DIVERSITY = (0.003, 1.01)


class _Log:
    def __init__(self, path: Path, progress: bool) -> None:
        self.path = path
        self.progress = progress
        self.start = time.time()
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - self.start:6.1f}s] {message}"
        with open(self.path, "a") as fh:
            fh.write(line + "\n")
        if self.progress:
            print(line, flush=True)


def _prepare_out(cfg: DemoConfig, out: Path) -> None:
    """Create ``out`` or check that the run in it has the same configuration."""
    path = out / "config.json"
    current = cfg.fingerprint()
    if path.is_file():
        saved = json.loads(path.read_text())
        diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if diff and not cfg.force:
            raise ValueError(f"{out} holds a demo run with a different configuration ({', '.join(diff)}); "
                             "re-run with the same flags to resume, pass --force to start over, or choose --out")
        if diff:
            for name in ("checkpoints", "eval", "plots", "logs"):
                shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=1, sort_keys=True))


def _write_json(path: Path, data: Any) -> None:
    from vpo.evaluation import sanitize

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sanitize(data), indent=1))
    tmp.replace(path)


def _done(path: Path) -> dict[str, Any] | None:
    done = path / "done.json"
    return json.loads(done.read_text()) if done.is_file() else None


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run (or resume) the whole demo; returns {"report": paths, "metrics": dict}."""
    cfg = cfg.resolved()
    out = Path(cfg.out)
    _prepare_out(cfg, out)
    log = _Log(out / "logs" / "demo.log", cfg.progress)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    from vpo.demo.warmup import run_warmup
    from vpo.tasks import get_task

    load_start = os.getloadavg()[0]
    t0 = time.time()
    task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
    fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))
    methods, seeds = cfg.method_list(), cfg.seed_list()
    log(f"demo: methods {methods}, seeds {seeds}, maze {cfg.size}x{cfg.size} ({cfg.reward_mode}), out {out}")

    # 1. warm-up ------------------------------------------------------------------------
    warm_dir = out / "checkpoints" / "warmup"
    warm = _done(warm_dir)
    if warm is None:
        log(f"warm-up: SFT on {cfg.warmup_examples} examples ({cfg.warmup_single_fraction:.0%} single-route)")
        warm = run_warmup(cfg, task, fmt, warm_dir, log=log)
        _write_json(warm_dir / "done.json", warm)
        shutil.rmtree(warm_dir / "trainer", ignore_errors=True)
    log(f"warm-up: done ({warm['seconds']:.0f} s, {warm['params']} parameters, final loss {warm['final_loss']:.3f})")

    # 2. RL -----------------------------------------------------------------------------
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    pending = []
    for seed in seeds:
        for method in methods:
            record = _done(out / "checkpoints" / f"{method}-s{seed}")
            if record is None:
                pending.append((method, seed))
            else:
                runs[(method, seed)] = record
    # longest jobs first (multi-answer chains are longer), so the workers finish together
    pending.sort(key=lambda job: -cfg.method_answers(job[0]))
    t_rl = time.time()
    if pending and cfg.workers > 1 and len(pending) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        log(f"RL: {len(pending)} runs on {min(cfg.workers, len(pending))} worker processes")
        with ProcessPoolExecutor(max_workers=min(cfg.workers, len(pending)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {job: pool.submit(_rl_job, cfg, job[0], job[1], log) for job in pending}
            for job, future in futures.items():
                runs[job] = future.result()
    else:
        for method, seed in pending:
            runs[(method, seed)] = _rl_job(cfg, method, seed, log, task=task)
    rl_wall_path = out / "logs" / "rl_wall.json"
    if pending:
        log(f"RL: {len(pending)} runs took {time.time() - t_rl:.0f} s wall")
        _write_json(rl_wall_path, {"wall": time.time() - t_rl, "runs": len(pending),
                                   "workers": min(max(cfg.workers, 1), len(pending))})
    for seed in seeds:
        for method in methods:
            log(f"RL: {method} seed {seed} done ({runs[(method, seed)]['seconds']:.0f} s)")

    # 3. evaluation ---------------------------------------------------------------------
    evaluated = _evaluate_all(cfg, task, fmt, methods, seeds, out, log)

    # 4. report -------------------------------------------------------------------------
    t_report = time.time()
    from vpo.report import write_report

    metrics = build_metrics(cfg, task, methods, seeds, warm, runs, evaluated)
    def both(records: list[dict[str, Any]]) -> dict[str, float | None]:
        if not records:
            return {"wall": None, "cpu": None}
        cpu = [r.get("cpu_seconds", r.get("cpu")) for r in records]
        return {"wall": float(sum(r.get("seconds", r.get("wall", 0.0)) for r in records)),
                "cpu": float(sum(cpu)) if all(c is not None for c in cpu) else None}

    timings: dict[str, Any] = {"warm-up (SFT)": both([warm])}
    for method in methods:
        timings[f"RL {METHODS[method][0]}, {len(seeds)} seed(s) (sum over runs)"] = both(
            [runs[(method, s)] for s in seeds])
    if rl_wall_path.is_file():
        rl_wall = json.loads(rl_wall_path.read_text())
        timings[f"RL, {rl_wall['runs']} run(s) on {rl_wall['workers']} worker process(es), wall"] = {
            "wall": rl_wall["wall"], "cpu": None}
    timings["evaluation (sampling, all pools)"] = both(list(evaluated["seconds"].values()))
    metrics["timings"] = timings
    paths = write_report(metrics, out)
    timings["report (this invocation)"] = {"wall": time.time() - t_report, "cpu": None}
    timings["this invocation"] = {"wall": time.time() - t0, "cpu": time.process_time()}
    metrics["load_average"] = {"start": load_start, "end": os.getloadavg()[0], "cpus": os.cpu_count()}
    metrics["notes"].append(
        f"Timings measured on this machine ({os.cpu_count()} CPUs, torch threads {cfg.threads}); the 1-minute "
        f"load average was {load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end, so the "
        "stages may have shared the CPUs with other work. Stages finished by an earlier invocation keep "
        "their original time.")
    paths = write_report(metrics, out)
    log(f"report: {paths['md']} ({time.time() - t0:.0f} s this invocation)")
    return {"report": paths, "metrics": metrics}


def _rl_job(cfg: DemoConfig, method: str, seed: int, log: Any, task: Any = None) -> dict[str, Any]:
    """Train one (method, seed) run and write its ``done.json``; also the body of a worker process."""
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    from vpo.demo.rl import rl_examples, run_rl
    from vpo.tasks import get_task

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if task is None:
        task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
    fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))
    out = Path(cfg.out)
    run_dir = out / "checkpoints" / f"{method}-s{seed}"
    log(f"RL: {METHODS[method][0]} (m={cfg.method_answers(method)}) seed {seed}, "
        f"{cfg.rl_steps} steps x {cfg.rl_prompts} mazes x {cfg.rl_generations} rollouts")
    record = run_rl(cfg, task, fmt, method, seed, out / "checkpoints" / "warmup", run_dir, rl_examples(task, cfg),
                    log=log)
    _write_json(run_dir / "done.json", record)
    return record


def _eval_jobs(cfg: DemoConfig, methods: list[str], seeds: list[int], out: Path) -> list[tuple[str, Path, int]]:
    """(pool name, checkpoint, m) of every evaluation: the warm-up in both formats, each run."""
    warm_dir = out / "checkpoints" / "warmup"
    jobs = [("warmup-m1", warm_dir, 1), (f"warmup-m{cfg.answers}", warm_dir, cfg.answers)]
    for method in methods:
        for seed in seeds:
            jobs.append((f"{method}-s{seed}", out / "checkpoints" / f"{method}-s{seed}", cfg.method_answers(method)))
    return jobs


def _evaluate_all(cfg: DemoConfig, task: Any, fmt: CompactMazeFormat, methods: list[str], seeds: list[int],
                  out: Path, log: Any) -> dict[str, Any]:
    """Sample (or load) every pool; per-example metrics of each. Returns {"examples", "pools", "metrics"}."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vpo.evaluation import Pools, example_weights, pool_metrics, sample_pools

    examples = task.examples("test", cfg.eval_examples)
    weights = example_weights(len(examples), task.num_objectives(), cfg.eval_weights, seed=cfg.seed + 4242)
    max_budget = max(int(e["budget"]) for e in examples)
    pools: dict[str, Pools] = {}
    per_example: dict[str, dict[str, np.ndarray]] = {}
    seconds_path = out / "eval" / "seconds.json"
    seconds = json.loads(seconds_path.read_text()) if seconds_path.is_file() else {}
    for name, ckpt, m in _eval_jobs(cfg, methods, seeds, out):
        path = out / "eval" / f"{name}.npz"
        if path.is_file():
            pools[name] = Pools.load(path)
        else:
            t, c = time.time(), time.process_time()
            model = AutoModelForCausalLM.from_pretrained(ckpt)
            tokenizer = AutoTokenizer.from_pretrained(ckpt)
            pools[name] = sample_pools(model, tokenizer, task, examples, m=m, pool=cfg.pool,
                                       temperature=cfg.eval_temperature, top_p=1.0,
                                       max_new_tokens=fmt.max_completion_tokens(max_budget, m),
                                       batch_size=cfg.eval_batch, fmt=fmt, seed=cfg.seed + 77,
                                       progress=cfg.progress, desc=f"eval {name}")
            pools[name].save(path)
            seconds[name] = {"wall": time.time() - t, "cpu": time.process_time() - c}
            _write_json(seconds_path, seconds)
            log(f"eval: {name} ({len(examples)} mazes x {cfg.pool} answers, {time.time() - t:.0f} s)")
        per_example[name] = pool_metrics(pools[name].vectors, task, eval_weights=weights)
    return {"examples": examples, "pools": pools, "metrics": per_example, "seconds": seconds,
            "oracle": oracle_reference(task, examples, weights)}


def oracle_reference(task: Any, examples: list[dict[str, Any]], weights: np.ndarray) -> dict[str, Any]:
    """The pool of the warm-up's demonstrations: the three oracle routes of each maze.

    ``weights`` (N, E, D): the evaluation weights. Returns {label, best_at_k, pref_best_at_k}:
    the fixed-scalar max and E_w[max] of that 3-route pool, averaged over the N mazes, i.e. what
    a policy that copies the demonstrations exactly reaches at any k >= 3.
    """
    from vpo.metrics import expected_max
    from vpo.tasks.maze import oracle_routes, simulate

    fixed, pref = [], []
    for example, w in zip(examples, weights, strict=True):
        vectors = np.array([simulate(example, r).vector for r in oracle_routes(example).values()])
        fixed.append(float(np.max(task.scalar(vectors))))
        pref.append(expected_max(vectors, w))
    return {"label": "oracle routes (the 3 demonstrations)", "best_at_k": float(np.mean(fixed)),
            "pref_best_at_k": float(np.mean(pref))}


def distinct_answers(pools: Any, fmt: CompactMazeFormat, examples: list[dict[str, Any]]) -> float:
    """Mean number of distinct non-empty routes (as move letters) in a maze's pool of answers."""
    counts = []
    for example, texts in zip(examples, pools.texts, strict=True):
        routes = {"".join(ch for ch in answer if ch in "UDLR")
                  for text in texts for answer in fmt.answers(text, example, pools.m)}
        counts.append(len(routes - {""}))
    return float(np.mean(counts))


def _series_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    steps = records[0]["steps"]
    series = {}
    for name in records[0]["series"]:
        rows = [r["series"][name] for r in records if len(r["series"][name]) == len(steps)]
        if not rows:
            continue
        arr = np.asarray(rows, dtype=np.float64)
        series[name] = {"mean": arr.mean(axis=0).tolist(), "low": arr.min(axis=0).tolist(),
                        "high": arr.max(axis=0).tolist()}
    return {"steps": steps, "series": series}


def build_metrics(cfg: DemoConfig, task: Any, methods: list[str], seeds: list[int], warm: dict[str, Any],
                  runs: dict[tuple[str, int], dict[str, Any]], evaluated: dict[str, Any]) -> dict[str, Any]:
    """The report's metrics dict (see ``vpo.report``) from the runs and the evaluated pools."""
    from vpo.evaluation import paired, summarize

    objectives = list(task.objective_names())
    per_ex, pools = evaluated["metrics"], evaluated["pools"]
    fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))
    m_multi = cfg.answers
    groups: dict[str, tuple[str, int, list[str]]] = {
        "warmup_m1": ("warm-up (m=1)", 1, ["warmup-m1"]),
        f"warmup_m{m_multi}": (f"warm-up (m={m_multi})", m_multi, [f"warmup-m{m_multi}"]),
    }
    for method in methods:
        m = cfg.method_answers(method)
        groups[method] = (f"{METHODS[method][0]} (m={m})", m, [f"{method}-s{s}" for s in seeds])
    entries, seed_metrics = {}, {}
    for key, (label, m, names) in groups.items():
        seed_metrics[key] = [per_ex[n] for n in names]
        tokens = [pools[n].completion_tokens for n in names]
        entries[key] = summarize(seed_metrics[key], label=label, m=m, objectives=objectives,
                                 seeds=seeds if key in methods else [cfg.seed],
                                 extra={"tokens_per_chain": float(np.mean(tokens)),
                                        "truncated": float(np.mean([pools[n].truncated for n in names])),
                                        "distinct_answers": float(np.mean([distinct_answers(
                                            pools[n], fmt, evaluated["examples"]) for n in names]))})
    pool = cfg.pool
    comparisons: list[tuple[str, str]] = []
    if "vpo" in methods and "grpo" in methods:
        comparisons.append(("vpo", "grpo"))
    for other in ("multi_rlvr", "max_at_k"):
        if other in methods and "vpo" in methods:
            comparisons.append(("vpo", other))
    for method in methods:
        comparisons.append((method, "warmup_m1" if cfg.method_answers(method) == 1 else f"warmup_m{m_multi}"))
    paired_rows = []
    for a, b in comparisons:
        for metric, k in (("pref_best_at_k", 1), ("pref_best_at_k", m_multi), ("pref_best_at_k", pool),
                          ("best_at_k", 1), ("best_at_k", pool), ("diversity", None)):
            row = paired(seed_metrics[a], seed_metrics[b], metric, k=k)
            paired_rows.append({"a": a, "b": b, "metric": metric, "k": k, **row})

    training = {}
    for method in methods:
        stats = _series_stats([runs[(method, s)] for s in seeds])
        training[method] = {"label": groups[method][0], **stats,
                            "seconds": float(np.mean([runs[(method, s)]["seconds"] for s in seeds]))}

    # objective space: the first three test mazes, seed-0 pool of each entry
    first = {key: names[0] for key, (_, _, names) in groups.items()}
    shown = list(range(min(3, len(evaluated["examples"]))))
    space = {"x": "gold", "y": "diamond", "color": "avoid_lava",
             "examples": [f"maze {i}" for i in shown],
             "vectors": {key: [pools[name].vectors[i].tolist() for i in shown] for key, name in first.items()}}

    metrics: dict[str, Any] = {
        "title": "VPO maze demo: a tiny Llama on CPU",
        "intro": (
            f"A {warm['params']:,}-parameter Llama-style model, trained from scratch: SFT warm-up on oracle routes "
            f"(TRL SFTTrainer), then {cfg.rl_steps} RL steps per method and seed with VPOTrainer (a TRL "
            f"GRPOTrainer subclass), {cfg.rl_prompts} mazes x {cfg.rl_generations} rollouts per step, from the "
            f"same warm-up checkpoint and on the same mazes. Evaluation on {cfg.eval_examples} held-out "
            f"{cfg.size}x{cfg.size} mazes with equal pools of {pool} answers (chains x m)."),
        "task": {"name": "maze", "params": {"size": cfg.size, "reward_mode": cfg.reward_mode},
                 "objectives": objectives},
        "eval": {"examples": cfg.eval_examples, "pool": pool, "temperature": cfg.eval_temperature, "top_p": 1.0,
                 "eval_weights": cfg.eval_weights, "ks_shown": [1, 3, 10, pool]},
        "methods": entries,
        "paired": paired_rows,
        "training": training,
        "objective_space": space,
        "references": [evaluated["oracle"]] if evaluated.get("oracle") else [],
        "config": dataclasses.asdict(cfg),
        "warmup": {k: v for k, v in warm.items() if k != "loss_curve"},
        "runs": {f"{m}-s{s}": {k: v for k, v in r.items() if k not in ("series", "reward", "steps")}
                 for (m, s), r in runs.items()},
    }
    metrics["paper"], metrics["comparison"] = _paper_tables(entries, methods, pool, cfg)
    metrics["findings"] = findings(entries, paired_rows, methods, pool, cfg)
    oracle = evaluated.get("oracle")
    if oracle:
        warm_key = f"warmup_m{m_multi}"
        metrics["findings"].append(
            f"Headroom: the pool of the three oracle routes per maze (what copying the warm-up's demonstrations "
            f"exactly would give at any k >= 3) scores {oracle['pref_best_at_k']:.3f} preference-weighted and "
            f"{oracle['best_at_k']:.3f} on the fixed scalar; the warm start reaches "
            f"{entries[warm_key]['pref_best_at_k']['mean'][pool - 1]:.3f} and "
            f"{entries[warm_key]['best_at_k']['mean'][pool - 1]:.3f} at k={pool} ({entries[warm_key]['label']}). "
            "Distinct routes per pool of "
            f"{pool}: " + ", ".join(f"{e['label']} {e['distinct_answers']:.1f}" for e in entries.values()) + ".")
    metrics["notes"] = _notes(cfg)
    return metrics


def _paper_tables(entries: dict[str, Any], methods: list[str], pool: int, cfg: DemoConfig) -> tuple[dict, dict]:
    order = ["grpo", "max_at_k", "multi_rlvr", "vpo"]
    cols = ["", "GRPO", "Max@K", "Multi-RLVR", "VPO", "diversity GRPO -> VPO"]
    paper = {"caption": "Paper (Qwen3-4B, 9x9 maze, 4 objectives): best@30 on the fixed scalar, m = 3.",
             "columns": cols,
             "rows": [["paper best@30"] + [f"{PAPER[k]:.3f}" for k in order]
                      + [f"{PAPER_DIVERSITY[0]} -> {PAPER_DIVERSITY[1]}"]]}

    def cell(key: str, metric: str) -> str:
        if key not in methods:
            return "not run"
        return f"{entries[key][metric]['mean'][pool - 1]:.3f}"

    div = "n/a"
    if "grpo" in methods and "vpo" in methods:
        div = f"{entries['grpo']['diversity']['mean']:.3f} -> {entries['vpo']['diversity']['mean']:.3f}"
    rows = [[f"ours best@{pool} (fixed scalar)"] + [cell(k, "best_at_k") for k in order] + [div],
            [f"ours preference-weighted best@{pool}"] + [cell(k, "pref_best_at_k") for k in order] + [""]]
    comparison = {"caption": (f"This demo (tiny Llama, {cfg.size}x{cfg.size} maze, {cfg.reward_mode} reward, mean "
                              f"over {cfg.seeds} seed(s)). Absolute values are not comparable to the paper's: "
                              "different maze size, model and scale; the comparison is the ordering and the "
                              "diversity gap."),
                  "columns": cols, "rows": rows}
    return paper, comparison


def _above_range(entry: dict[str, Any], base: dict[str, Any]) -> str:
    """Where (in k) the seed-averaged preference-weighted best@k curve of ``entry`` lies above ``base``'s."""
    diff = np.asarray(entry["pref_best_at_k"]["mean"]) - np.asarray(base["pref_best_at_k"]["mean"])
    above = [k for k, d in enumerate(diff, start=1) if d > 0]
    if not above:
        return "; its preference-weighted best@k curve is below the warm start's at every k"
    if above == list(range(1, above[-1] + 1)):
        span = f"k = 1..{above[-1]}" if above[-1] > 1 else "k = 1"
        rest = f" and below from k = {above[-1] + 1}" if above[-1] < len(diff) else ""
        return f"; its preference-weighted best@k curve is above the warm start's for {span}{rest}"
    return f"; its preference-weighted best@k curve is above the warm start's at {len(above)} of {len(diff)} k"


def _fmt_diff(row: dict[str, Any]) -> str:
    half = row.get("half_width")
    sig = "significant" if row.get("significant") else "not significant"
    return f"{row['mean']:+.3f} ± {half:.3f} ({sig})" if half is not None else f"{row['mean']:+.3f}"


def findings(entries: dict[str, Any], paired_rows: list[dict[str, Any]], methods: list[str], pool: int,
             cfg: DemoConfig) -> list[str]:
    """Plain statements read off the numbers (no thresholds tuned to a conclusion)."""
    def find(a: str, b: str, metric: str, k: int | None) -> dict[str, Any] | None:
        for row in paired_rows:
            if (row["a"], row["b"], row["metric"], row["k"]) == (a, b, metric, k):
                return row
        return None

    out = []
    if "vpo" in methods and "grpo" in methods:
        for metric, name in (("pref_best_at_k", "preference-weighted best@k"), ("best_at_k", "fixed-scalar best@k")):
            hi, lo = find("vpo", "grpo", metric, pool), find("vpo", "grpo", metric, 1)
            def verdict(d: float) -> str:
                return "level with" if abs(d) < 5e-4 else "above" if d > 0 else "below"

            verdict_hi, verdict_lo = verdict(hi["mean"]), verdict(lo["mean"])
            out.append(f"{name}: VPO is {verdict_hi} GRPO at k={pool}, VPO - GRPO = {_fmt_diff(hi)}; "
                       f"at k=1 VPO is {verdict_lo} GRPO, {_fmt_diff(lo)} (paired over {hi['n']} mazes, "
                       f"seed-averaged).")
        g, v = entries["grpo"]["diversity"]["mean"], entries["vpo"]["diversity"]["mean"]
        ratio = f"{v / g:.1f}x" if g > 0 else "infinitely"
        out.append(f"Reward diversity of the pools (mean pairwise L1): GRPO {g:.3f}, VPO {v:.3f} ({ratio}); "
                   f"the paper reports {PAPER_DIVERSITY[0]} -> {PAPER_DIVERSITY[1]} on its 9x9 maze.")
    for method in methods:
        base = "warmup_m1" if cfg.method_answers(method) == 1 else f"warmup_m{cfg.answers}"
        r1, rk = find(method, base, "pref_best_at_k", 1), find(method, base, "pref_best_at_k", pool)
        rm = find(method, base, "pref_best_at_k", cfg.answers)
        f1, fk = find(method, base, "best_at_k", 1), find(method, base, "best_at_k", pool)
        out.append(f"{METHODS[method][0]} vs its warm start ({entries[base]['label']}): preference-weighted "
                   f"best@1 {_fmt_diff(r1)}, best@{cfg.answers} {_fmt_diff(rm)}, best@{pool} {_fmt_diff(rk)}; "
                   f"fixed-scalar best@1 {_fmt_diff(f1)}, "
                   f"best@{pool} {_fmt_diff(fk)}{_above_range(entries[method], entries[base])}.")
    if "vpo" in entries and "grpo" in entries:
        tv, tg = entries["vpo"].get("tokens_per_chain"), entries["grpo"].get("tokens_per_chain")
        if tv and tg:
            out.append(f"Compute: at equal RL steps a VPO chain holds {cfg.answers} routes and costs about "
                       f"{tv / tg:.1f}x the tokens of a GRPO completion ({tv:.1f} vs {tg:.1f} tokens at evaluation).")
    return out


INVESTIGATION = (
    "How the defaults were chosen, and the configurations tried to make RL add to the warm start at "
    "k = 30 (maze size and reward mode, warm-up length and mixture, learning rate, steps, batch, group size, "
    "KL, m, alpha, evaluation temperature), with their numbers: docs/demo/investigation.md in the vpo "
    "repository.")
"""Pointer to the development log, kept in every report so a reader sees what was tried."""


TRUNCATED_RULES = {"zero": "scored as a format failure (the all-zero matrix)",
                   "mask": "left out of the loss (TRL's mask_truncated_completions)",
                   "keep": "scored as parsed"}


def _notes(cfg: DemoConfig) -> list[str]:
    notes = [
        "k counts answers: a multi-answer method gets pool/m chains, a single-answer method pool samples. Each "
        "answer of a chain is scored on its own; duplicates are kept (as repeated samples of a single-answer "
        "method are), an unparseable or missing answer is the zero vector.",
        "best@k and pass@k are exact expectations over k-subsets of the pool (unbiased estimators), not one "
        "random permutation. Preference-weighted best@k averages best@k of w.r over fixed Dirichlet(1) weights "
        "per maze, the same weights for every method.",
        "On a small maze a lava-free gold route and a lava-free diamond route often tie on the fixed scalar "
        "(mean of the 4 objectives), so fixed-scalar best@k at large k saturates for any method that finds both "
        "kinds of route or either; the preference-weighted metric tells them apart.",
        "pass@k counts an answer as correct when every objective is at its maximum; no maze route can collect "
        "all gold and all diamonds within the budget (the generator rejects such mazes), so pass@k is 0 by design.",
        f"Training differs from the paper for CPU: {cfg.rl_steps} steps, lr {cfg.rl_lr:g}, no KL term "
        f"(beta {cfg.rl_beta:g}), G = {cfg.rl_generations}, {cfg.rl_prompts} mazes per step; a training rollout "
        "cut at the token limit without EOS is " + TRUNCATED_RULES[cfg.rl_truncated] + ".",
    ]
    notes.append(INVESTIGATION)
    if cfg.quick:
        notes.insert(0, "--quick: a smoke-test configuration (tiny model, few steps, one seed). Its numbers "
                        "check the pipeline, not the method.")
    return notes

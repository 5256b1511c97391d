"""The demo pipeline: warm-up -> RL per method and seed -> evaluation -> report, resumable.

The warm-up runs alone on ``--warmup-threads`` threads; then the RL runs and the evaluation
pools run in worker processes, each run sampling its own pool as soon as it is trained: as many
at once as the cores free when a job could start hold (a 1 s CPU sample, ``vpo.cores.WorkerBudget``),
or ``--workers``. Thread counts are settings and every job seeds itself, so the load changes how
long the demo takes, never its numbers.

Layout of the report folder (``--out``, default ``runs/demo``)::

    config.json                      the resolved DemoConfig (a re-run must match it)
    checkpoints/warmup/              tiny Llama after SFT (+ tokenizer, vpo_format.json, done.json)
    checkpoints/<method>-s<seed>/    after RL (done.json holds the training record)
    eval/<name>.npz (+ .jsonl)       answer pools: reward vectors (and the raw generations)
    eval/<name>.seconds.json         how long sampling the pool took
    logs/demo.log                    what ran, when, and how long it took
    metrics.json, report.md, report.html, plots/*.png

Each stage writes ``done.json`` (or the pool file) last, so a re-run of the same command skips
finished stages and resumes an interrupted training run from its newest TRL checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vpo.demo.config import METHODS, DemoConfig
from vpo.demo.device import CudaPlan, describe_setting, device_record, enter_share, job_memory, plan_cuda
from vpo.demo.device import worker_memory  # noqa: F401  (re-exported: the memory estimate of a worker)
from vpo.tasks.maze.format import CompactMazeFormat, GoalPerChainFormat
from vpo.demo.plots import headline_plots
from vpo.demo.results import build_metrics, numbers_machine, oracle_reference, pipeline_checks
from vpo.checkpoints import check_checkpoint
from vpo.cores import WorkerBudget, run_parallel, sample_cpu
from vpo.runs import lock_folder  # noqa: F401  (re-exported: the demo's lock is every command's)
from vpo.records import Field, RecordError, check_fields, read_json, read_record
from vpo.runs import atomic_write_text, claim_out_dir, release_out_dir

_REDO = "pass --force to start the demo over"
EVAL_WEIGHT_SEED = 4242
"""The pools' fixed preference weights: ``example_weights(..., seed=cfg.seed + EVAL_WEIGHT_SEED)``."""
_SECONDS = {"seconds": Field(float, required=True, low=0), "cpu_seconds": Field(float, low=0)}
WARMUP_FIELDS = {**_SECONDS, "params": Field(int, required=True, low=0), "final_loss": Field(float, required=True),
                 "examples": Field(int, low=0), "loss_curve": Field(list, items=Field(float))}
"""What the warm-up's ``done.json`` holds (the report reads these)."""
FAILURE_COUNTS = Field(dict, fields={"calls": Field(int, required=True, low=0),
                                     "failed": Field(int, required=True, low=0)})
RL_FIELDS = {**_SECONDS, "method": Field(str), "seed": Field(int), "m": Field(int, low=1),
             "steps": Field(list, required=True, items=Field(int, low=0)),
             "series": Field(dict, required=True, items=Field(list, items=Field(float))),
             "completion_tokens": Field(float), "reward": Field(list, items=Field(float)),
             "resumed_from": Field(str), "reward_failures": FAILURE_COUNTS}
"""What an RL run's ``done.json`` holds (its training record; NaN is written as null)."""
POOL_SECONDS_FIELDS = {"wall": Field(float, required=True, low=0), "cpu": Field(float, low=0),
                       "reward_failures": FAILURE_COUNTS}
RL_WALL_FIELDS = {"wall": Field(float, required=True, low=0), "runs": Field(int, required=True, low=0),
                  "workers": Field(int, required=True, low=0)}
INVOCATION_FIELDS = {"wall": Field(float, required=True, low=0)}


class _Log:
    """The stage log: each line to ``logs/demo.log`` and to the terminal (``--no-progress`` hides
    the progress bars, never these lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = time.time()
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - self.start:6.1f}s] {message}"
        with open(self.path, "a") as fh:
            fh.write(line + "\n")
        print(line, flush=True)


def _prepare_out(cfg: DemoConfig, out: Path) -> None:
    """Create ``out`` or check that the run in it has the same configuration."""
    path = out / "config.json"
    current = cfg.fingerprint()
    if path.is_file():
        try:
            saved = check_fields(read_json(path, hint=_REDO), path, {})
        except RecordError:
            if not cfg.force:
                raise
            saved = {}  # damaged: --force starts over
        diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if diff and not cfg.force:
            raise ValueError(f"{out} holds a demo run with a different configuration ({', '.join(diff)}); "
                             "re-run with the same flags to resume, pass --force to start over, or choose --out")
        if diff:
            for name in ("checkpoints", "eval", "plots", "logs"):
                shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(current, indent=1, sort_keys=True))


def _write_json(path: Path, data: Any) -> None:
    from vpo.evaluation import sanitize

    atomic_write_text(path, json.dumps(sanitize(data), indent=1))


def _done(path: Path, fields: dict[str, Field]) -> dict[str, Any] | None:
    """The stage record ``path/done.json`` (None: the stage has not finished), its ``fields`` checked."""
    done = path / "done.json"
    if not done.is_file():
        return None
    return read_record(done, fields, hint=f"delete it to run that stage again, or {_REDO}")


class MazeStages:
    """What the maze demo does at each stage (``stages_for``): its task and prompt format, the
    warm-up on walks or routes, RL with the maze scorer, pools of routes, and the maze report.
    A pretrained-model preset has its own (``vpo.demo.pretrained.PretrainedStages``)."""

    unit = "mazes"
    """What the evaluation examples are, in the log and the report."""
    scorer = "the maze scorer on one non-empty answer"
    """What one reward call is, in the report's note on failed calls."""

    def __init__(self, cfg: DemoConfig) -> None:
        from vpo.tasks import get_task

        self.cfg = cfg
        self.task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
        self.fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))

    def check_workload(self) -> tuple[int, str, CudaPlan | None]:
        """Refuse, before the folder is touched, evaluation pools that cannot fit in memory (the
        estimate of ``vpo.workload``, for the largest pool: single-answer chains), and a worker
        process whose model, RL run or evaluation batch cannot (``worker_memory``; on a GPU
        ``plan_cuda``, which also shares the card out). Returns the bytes one worker holds at its
        peak, the estimate in words and the GPU plan (None on CPU)."""
        from vpo.workload import check_pool_workload

        cfg, task, fmt = self.cfg, self.task, self.fmt
        examples = self.eval_examples()
        check_pool_workload(examples=len(examples), pool=cfg.pool, m=1, objectives=task.num_objectives(examples[0]),
                            max_new_tokens=fmt.completion_budget(examples, 1), eval_weights=cfg.eval_weights)
        device = cfg.torch_device()
        if device.startswith("cuda"):
            plan = plan_cuda(cfg, fmt, examples, device=device, workers=cfg.workers,
                             jobs=len(cfg.method_list()) * cfg.seeds + 2)
            return plan.share, plan.words(), plan
        return (*worker_memory(cfg, task, fmt, examples, workers=cfg.workers or 1), None)

    def setting(self) -> str:
        cfg = self.cfg
        return f"maze {cfg.size}x{cfg.size} ({cfg.reward_mode}, protocol {self.task.protocol})"

    def warmup(self, warm_dir: Path, log: Any) -> dict[str, Any]:
        from vpo.demo.warmup import run_warmup

        cfg = self.cfg
        data = "random walks that reach the exit" if cfg.warmup_data == "random_walk" else "oracle routes"
        log(f"warm-up: SFT on {cfg.warmup_examples} examples of {data} ({cfg.warmup_single_fraction:.0%} single-route)")
        return run_warmup(cfg, self.task, self.fmt, warm_dir, log=log)

    def train(self, method: str, seed: int, warm_dir: Path, run_dir: Path, log: Any) -> dict[str, Any]:
        from vpo.demo.rl import rl_examples, run_rl

        cfg = self.cfg
        log(f"RL: {METHODS[method][0]} (m={cfg.method_answers(method)}) seed {seed}, "
            f"{cfg.rl_steps} steps x {cfg.rl_prompts} mazes x {cfg.rl_generations} rollouts")
        return run_rl(cfg, self.task, self.fmt, method, seed, warm_dir, run_dir, rl_examples(self.task, cfg), log=log)

    def eval_examples(self) -> list[dict[str, Any]]:
        return self.task.examples("test", self.cfg.eval_examples)

    def sample_pool(self, name: str, ckpt: Path, m: int, path: Path, log: Any) -> dict[str, Any]:
        """Sample evaluation pool ``name`` of ``ckpt`` (chains of ``m`` routes) into ``path``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from vpo.evaluation import sample_pools

        cfg, task, fmt = self.cfg, self.task, self.fmt
        examples = self.eval_examples()
        max_budget = max(int(e["budget"]) for e in examples)
        model = AutoModelForCausalLM.from_pretrained(ckpt).to(cfg.torch_device())
        tokenizer = AutoTokenizer.from_pretrained(ckpt)
        goal_run = name.startswith("goal_conditioned-")
        job_fmt = GoalPerChainFormat(fmt, seed=cfg.seed + 4242) if goal_run else fmt
        pools = sample_pools(model, tokenizer, task, examples, m=m, pool=cfg.pool, temperature=cfg.eval_temperature,
                             top_p=1.0, max_new_tokens=fmt.max_completion_tokens(max_budget, m),
                             batch_size=cfg.eval_batch, fmt=job_fmt, seed=cfg.seed + 77, progress=cfg.progress,
                             desc=f"eval {name}")
        pools.save(path)
        return {}

    def reference(self, examples: list[dict[str, Any]], weights: np.ndarray) -> dict[str, Any] | None:
        return oracle_reference(self.task, examples, weights)

    def metrics(self, methods: list[str], seeds: list[int], warm: dict[str, Any],
                runs: dict[tuple[str, int], dict[str, Any]], evaluated: dict[str, Any]) -> dict[str, Any]:
        metrics = build_metrics(self.cfg, self.task, methods, seeds, warm, runs, evaluated)
        describe_setting(metrics, self.cfg, device_record(self.cfg.torch_device()))
        return metrics


def stages_for(cfg: DemoConfig) -> Any:
    """The stages of ``cfg``'s demo: the maze's, or a pretrained-model preset's."""
    if cfg.model:
        from vpo.demo.pretrained import PretrainedStages

        return PretrainedStages(cfg)
    return MazeStages(cfg)


def _check_workload(cfg: DemoConfig) -> tuple[int, str, CudaPlan | None]:
    """``stages_for(cfg).check_workload()``: what one worker holds at its peak, in bytes and in
    words, and the GPU plan (None on CPU); refuses what cannot fit, before any work."""
    return stages_for(cfg).check_workload()


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run (or resume) the whole demo; returns {"report": paths, "metrics": dict}."""
    cfg = cfg.resolved()
    out = Path(cfg.out)
    stages = stages_for(cfg)
    peak, memory, plan = stages.check_workload()
    if plan is not None:  # a GPU: the workers' shares of the card and their evaluation batch (plan_cuda)
        cfg = dataclasses.replace(cfg, eval_batch=plan.eval_batch)
        plan.export()
    # a re-run resumes (its config.json must match, see _prepare_out); --force starts over
    claim_out_dir(out, command="demo", resume=True, overwrite=cfg.force, resume_flag="", overwrite_flag="--force")
    try:
        return _run_demo(cfg, out, peak, memory, plan, stages)
    finally:
        release_out_dir(out)


RECHECK_S = 20.0
"""While jobs wait and fewer workers run than may, how often the CPU is sampled again."""


@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` (0: left as they are) inside the block."""
    import torch

    before = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def worker_budget(cfg: DemoConfig, peak: int, plan: CudaPlan | None = None) -> WorkerBudget:
    """How many worker processes the demo may run at once (``vpo.cores.WorkerBudget``): on a GPU
    the ``plan``'s count (``plan_cuda``: from its memory, docs/gpu.md); else ``--workers``, else
    the cores free at each job's start, capped by the memory that holds ``peak`` bytes per worker
    (a worker's RL run or evaluation batch, ``worker_memory``): the running workers plus as many
    as the memory free now holds, and never more than the memory free when none of them ran last."""
    from vpo.workload import device_memory, human_bytes

    before = device_memory(cfg.torch_device())  # free while no worker of this run holds any
    size = max(peak, 1)

    def memory_cap(running: int) -> tuple[int, str]:
        nonlocal before
        available = device_memory(cfg.torch_device())
        if not running:  # read again: what other work held at the start may be free now
            before = available
        if available is None or before is None:
            return 1 << 30, "memory not known"
        # a running worker's memory is no longer free: it counts as one worker's planned peak
        most = max(1, min(before // size, running + available // size))
        beside = f" beside {running} running" if running else ""
        return most, f"{human_bytes(available)} of memory free{beside} holds {most}"

    jobs = len(cfg.method_list()) * cfg.seeds + 2
    if plan is not None:
        return WorkerBudget(jobs=jobs, threads=max(1, cfg.threads), fixed=plan.workers, fixed_why=plan.why)
    return WorkerBudget(jobs=jobs, threads=max(1, cfg.threads), fixed=cfg.workers,
                        caps=[] if cfg.workers else [memory_cap])


def run_jobs(cfg: DemoConfig, jobs: list[tuple[str, Any, Any]], budget: WorkerBudget, log: Any, *,
             stages: Any = None) -> tuple[dict[tuple[str, Any, Any], Any], int]:
    """Run the RL and pool ``jobs`` (``_job``) with ``vpo.cores.run_parallel``: as many at once as
    ``budget`` allows when each could start. Returns each job's result and the most that ran at
    once. Every job seeds itself, so neither the worker count nor the order changes a number."""
    def in_process(job: tuple[str, Any, Any], worker: bool) -> Any:  # this process's stages (and task), reused
        return _job(cfg, job, log, stages=stages)

    def say(line: str) -> None:
        log(f"RL and evaluation: {line}")

    # a worker process gets a picklable function; run_parallel alone decides where the jobs run
    return run_parallel(jobs, functools.partial(_job, cfg, log=log), budget, log=say, recheck=RECHECK_S,
                        local=in_process)


def _run_demo(cfg: DemoConfig, out: Path, peak: int, memory: str, plan: CudaPlan | None = None,
              stages: Any = None) -> dict[str, Any]:
    """The demo in ``out`` (claimed); ``peak``: bytes one worker process holds at most, and
    ``memory`` that estimate in words (``worker_memory``); ``plan``: how its processes share a GPU."""
    _prepare_out(cfg, out)
    log = _Log(out / "logs" / "demo.log")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    if cfg.threads > 0:  # a pool sampled here (one an earlier invocation lost) runs on the workers' threads
        torch.set_num_threads(cfg.threads)
    from vpo.demo.warmup import quiet_libraries

    quiet_libraries(cfg.progress)  # also when a resumed run goes straight to evaluation
    stages = stages if stages is not None else stages_for(cfg)
    task = stages.task
    load_start = os.getloadavg()[0]
    t0 = time.time()
    start_sample = sample_cpu()  # what the machine was doing at the start: the report's note on its timings
    budget = worker_budget(cfg, peak, plan)
    most, why = budget.most()
    methods, seeds = cfg.method_list(), cfg.seed_list()
    log(f"demo: methods {methods}, seeds {seeds}, {stages.setting()}, device "
        f"{device_record(cfg.torch_device())['name']}, out {out}")
    how = "" if budget.fixed else ", as many as the free cores hold when each job starts"
    log(f"demo: up to {most} worker process(es) of {cfg.threads or 'default'} torch thread(s) ({why}){how}; the "
        f"warm-up on {cfg.warmup_threads or 'default'} thread(s). Thread counts are settings, not the load's: the "
        "numbers do not depend on the load")
    log(f"demo: memory: {memory}")

    # 1. warm-up ------------------------------------------------------------------------
    warm_dir = out / "checkpoints" / "warmup"
    warm = _done(warm_dir, WARMUP_FIELDS)
    if warm is None:
        with torch_threads(cfg.warmup_threads):  # the warm-up runs alone, on threads the configuration fixes
            enter_share(plan.usable if plan else None)  # a GPU: alone, it may take all the workers' shares
            warm = stages.warmup(warm_dir, log)
            job_memory(out, "warm-up", "warmup")        # and gives them back before the workers start
        _write_json(warm_dir / "done.json", warm)
        shutil.rmtree(warm_dir / "trainer", ignore_errors=True)
    log(f"warm-up: done ({warm['seconds']:.0f} s, {warm['params']} parameters, final loss {warm['final_loss']:.3f})")

    # 2. RL, and each run's evaluation pool, in worker processes -------------------------
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    pending: list[tuple[str, Any, Any]] = []
    for seed in seeds:
        for method in methods:
            record = _done(out / "checkpoints" / f"{method}-s{seed}", RL_FIELDS)
            if record is None:
                pending.append(("rl", method, seed))
            else:
                runs[(method, seed)] = record
    # longest jobs first (multi-answer chains are longer), so the workers finish together; the
    # short pool jobs (the warm start's, and pools of runs finished by an earlier invocation) last
    pending.sort(key=lambda job: -cfg.method_answers(job[1]))
    training = {f"{method}-s{seed}" for _, method, seed in pending}  # these jobs sample their own pool
    pending += [("pool", name, None) for name, _, _ in eval_jobs(cfg, methods, seeds, out)
                if name not in training and not (out / "eval" / f"{name}.npz").is_file()]
    # the finished checkpoints this invocation reads are vouched for first: one line for a damaged one
    folders = {name: folder for name, folder, _ in eval_jobs(cfg, methods, seeds, out)}
    reads = {warm_dir} if any(job[0] == "rl" for job in pending) else set()
    reads |= {folders[job[1]] for job in pending if job[0] == "pool"}
    for folder in sorted(reads):
        check_checkpoint(folder, task=task.name)
    t_rl = time.time()
    n_rl = sum(job[0] == "rl" for job in pending)
    used = 0  # the most worker processes that ran at once (0: every job was done before)
    if pending:
        budget.jobs = len(pending)
        results, used = run_jobs(cfg, pending, budget, log, stages=stages)
        for job, result in results.items():
            if job[0] == "rl":
                runs[(job[1], job[2])] = result
    rl_wall_path = out / "logs" / "rl_wall.json"
    if n_rl:
        log(f"RL: {n_rl} runs (and their pools) took {time.time() - t_rl:.0f} s wall")
        _write_json(rl_wall_path, {"wall": time.time() - t_rl, "runs": n_rl, "workers": used})
    for seed in seeds:
        for method in methods:
            log(f"RL: {method} seed {seed} done ({runs[(method, seed)]['seconds']:.0f} s)")

    # 3. metrics of every pool (a pool still missing is sampled here) --------------------
    evaluated = _evaluate_all(cfg, stages, methods, seeds, out, log)

    # 4. report -------------------------------------------------------------------------
    t_report = time.time()
    from vpo.report import write_report

    metrics = stages.metrics(methods, seeds, warm, runs, evaluated)
    metrics["reward_failures"] = failure_counts(runs.values(), evaluated["seconds"].values())
    metrics["notes"].append(failure_note(metrics["reward_failures"], stages.scorer))
    record = device_record(cfg.torch_device())
    metrics["notes"].append(reproducibility_note(numbers_machine(), record["name"] if "cuda" in record else None))
    metrics["headline_plots"] = headline_plots(metrics, out)
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
        rl_wall = read_record(rl_wall_path, RL_WALL_FIELDS, hint=f"delete it (the report's timing of RL), or {_REDO}")
        timings[f"RL, {rl_wall['runs']} run(s) and their pools on {rl_wall['workers']} worker process(es), wall"] = {
            "wall": rl_wall["wall"], "cpu": None}
    timings["evaluation (sampling, all pools; sum over pools)"] = both(list(evaluated["seconds"].values()))
    metrics["timings"] = timings
    paths = write_report(metrics, out)
    if cfg.quick:  # plumbing checks instead of findings, plots included
        drawn = list(paths["plots"]) + [out / figure["file"] for figure in metrics["headline_plots"]]
        metrics["checks"] = pipeline_checks(metrics, cfg, [p.name for p in drawn if p.is_file()], unit=stages.unit)
    timings["report (this invocation)"] = {"wall": time.time() - t_report, "cpu": None}
    timings["this invocation"] = {"wall": time.time() - t0, "cpu": time.process_time()}
    load_end = os.getloadavg()[0]
    metrics["load_average"] = {"start": load_start, "end": load_end, "cpus": os.cpu_count()}
    # every invocation's wall time, so a resumed run still knows what the whole run took
    invocations_path = out / "logs" / "invocations.json"
    invocations = _invocations(invocations_path)
    invocations.append({"wall": time.time() - t0, "load_start": load_start, "load_end": load_end,
                        "busy_start": start_sample.busy, "cpus": os.cpu_count(), "workers": used,
                        "threads": cfg.threads, "warmup_threads": cfg.warmup_threads})
    _write_json(invocations_path, invocations)
    metrics["run_wall"] = {"seconds": sum(i["wall"] for i in invocations), "invocations": invocations}
    metrics["notes"].append(load_note(os.cpu_count() or 1, used, cfg.threads, load_start, load_end,
                                      busy_start=start_sample.busy))
    paths = write_report(metrics, out)
    log(f"report: {paths['md']} ({time.time() - t0:.0f} s this invocation)")
    return {"report": paths, "metrics": metrics}


def _invocations(path: Path) -> list[dict[str, Any]]:
    """The earlier invocations' records (``logs/invocations.json``), each checked."""
    if not path.is_file():
        return []
    hint = f"delete it (the report's record of earlier invocations), or {_REDO}"
    records = read_json(path, hint=hint)
    if not isinstance(records, list):
        raise RecordError(f"{path} holds no list of invocations; {hint}")
    return [check_fields(r, path, INVOCATION_FIELDS, prefix=f"[{i}].", hint=hint) for i, r in enumerate(records)]


def failure_counts(runs: Any, pools: Any) -> dict[str, dict[str, int] | None]:
    """Reward calls and failed ones (``vpo.reward_failures``) of the RL runs (their rollouts, as
    the trainer scored them) and of the evaluation pools; None for a part run before the demo
    counted them."""
    def total(records: list[Any]) -> dict[str, int] | None:
        counts = [r.get("reward_failures") for r in records]
        if not counts or any(c is None for c in counts):
            return None
        # a resumed run counts the calls of its last invocation only (from its checkpoint on)
        return {"calls": sum(int(c["calls"]) for c in counts), "failed": sum(int(c["failed"]) for c in counts),
                "resumed": sum(1 for r in records if r.get("resumed_from"))}

    return {"training": total(list(runs)), "evaluation": total(list(pools))}


def failure_note(counts: dict[str, dict[str, int] | None], scorer: str = "the maze scorer on one non-empty answer"
                 ) -> str:
    """The report's line on failed reward calls: an answer the scorer (``scorer``, in words) could
    not score (raised, NaN) scores 0 and is counted, in training and in the pools."""
    parts = [f"{what}: {c['failed']:,} of {c['calls']:,} failed"
             + (f" ({c['resumed']} resumed run(s) counted from their checkpoint on)" if c.get("resumed") else "")
             if c is not None else f"{what}: not counted (run before the demo counted them)"
             for what, c in (("training", counts["training"]), ("evaluation pools", counts["evaluation"]))]
    return (f"Reward calls ({scorer}; a failed call, one that raised or gave NaN, "
            "scores 0 and is counted): " + "; ".join(parts) + ".")


def reproducibility_note(machine: dict[str, str], gpu: str | None = None) -> str:
    """The report's line on which machines give its numbers to the digit (``numbers_machine``);
    for a run on the GPU named ``gpu``, that this is unchecked there."""
    if gpu is not None:
        return (f"These numbers were computed on a GPU ({gpu}, torch {machine['torch']}): whether a repeat gives "
                "them to the digit has not been checked there (bf16 autocast and CUDA's kernels; on CPU a "
                "repeat does: README, Reproducibility).")
    return (f"These numbers come out to the digit again on the same kind of machine ({machine['cpu']}, torch's "
            f"{machine['cpu_capability']} CPU kernels, torch {machine['torch']}), whatever its load, the number of "
            "worker processes and the order of the jobs: thread counts are settings and every run seeds itself. A "
            "CPU with other vector instructions rounds floats differently, and RL carries the difference into the "
            "second digit (README, Reproducibility).")


def load_note(cpus: int, workers: int, threads: int, load_start: float, load_end: float, *,
              busy_start: float | None = None) -> str:
    """The report's sentence on the machine the timings were measured on, read off the CPU use
    sampled at the start (``busy_start`` cores busy; else the 1-minute load average there, which
    still counts work that just ended; the one at the end counts this run's own work)."""
    from vpo.cores import IDLE_LOAD

    load = (f"1-minute load average {load_start:.1f} at the start, {load_end:.1f} at the end with this run's "
            "own work")
    if busy_start is not None:
        load = f"{busy_start:.1f} cores busy in a 1 s sample at the start; {load}"
    busy = busy_start if busy_start is not None else load_start
    machine = (f"the CPUs were otherwise idle at the start ({load}; work that came later is in the log's "
               "'workers' lines, each job start's sample)" if busy < IDLE_LOAD else
               f"other work shared the CPUs ({load}), so the stages ran slower than they would on an idle machine")
    return (f"Timings measured on this machine ({cpus} CPUs, up to {workers} worker process(es) at once, torch "
            f"threads {threads or 'default'}): {machine}. Stages finished by an earlier invocation keep their original "
            "time.")


def _job(cfg: DemoConfig, job: tuple[str, Any, Any], log: Any, stages: Any = None, *,
         worker: bool = False) -> dict[str, Any]:
    """One unit of parallel work, also the body of a worker process: ("rl", method, seed) trains a
    run, writes its ``done.json`` and samples its evaluation pool; ("pool", name, None) samples
    the pool ``name``. Returns the training record (or the pool's timing). ``worker``: in a
    worker process, whose bars would overwrite each other's lines: stage lines only."""
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    if worker:
        from vpo.demo.warmup import quiet_libraries

        cfg = dataclasses.replace(cfg, progress=False)
        quiet_libraries(False)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if stages is None or worker:
        stages = stages_for(cfg)
    out = Path(cfg.out)
    kind, name, seed = job
    enter_share()  # a GPU: this process's share of the card (no-op on CPU)
    if kind == "pool":
        result = _sample_pool(cfg, stages, name, out, log)
        job_memory(out, f"pool {name}", "pool")
        return result
    method = name
    run_dir = out / "checkpoints" / f"{method}-s{seed}"
    record = stages.train(method, seed, out / "checkpoints" / "warmup", run_dir, log)
    _write_json(run_dir / "done.json", record)
    job_memory(out, f"rl {method}-s{seed}", "rl")  # a GPU: its peak beside the estimate; cached blocks freed
    if not (out / "eval" / f"{method}-s{seed}.npz").is_file():
        _sample_pool(cfg, stages, f"{method}-s{seed}", out, log)
        job_memory(out, f"pool {method}-s{seed}", "pool")
    return record


def eval_jobs(cfg: DemoConfig, methods: list[str], seeds: list[int], out: Path) -> list[tuple[str, Path, int]]:
    """(pool name, checkpoint, m) of every evaluation: the warm-up in both formats, each run."""
    warm_dir = out / "checkpoints" / "warmup"
    jobs = [("warmup-m1", warm_dir, 1), (f"warmup-m{cfg.answers}", warm_dir, cfg.answers)]
    for method in methods:
        for seed in seeds:
            jobs.append((f"{method}-s{seed}", out / "checkpoints" / f"{method}-s{seed}", cfg.method_answers(method)))
    return jobs


def _sample_pool(cfg: DemoConfig, stages: Any, name: str, out: Path, log: Any) -> dict[str, float]:
    """Sample evaluation pool ``name`` (see ``eval_jobs``) and write ``eval/<name>.npz`` and its
    timing ``eval/<name>.seconds.json``. Returns {"wall", "cpu", "reward_failures"}."""
    (ckpt, m), = [(c, m) for n, c, m in eval_jobs(cfg, cfg.method_list(), cfg.seed_list(), out) if n == name]
    task = stages.task
    t, c = time.time(), time.process_time()
    before = task.failures.totals()
    (out / "eval").mkdir(parents=True, exist_ok=True)
    stages.sample_pool(name, ckpt, m, out / "eval" / f"{name}.npz", log)
    task.failures.end_step()  # the last window of reward calls: RewardFailureError past its rate
    seconds = {"wall": time.time() - t, "cpu": time.process_time() - c,
               "reward_failures": task.failures.totals_since(before)}
    _write_json(out / "eval" / f"{name}.seconds.json", seconds)
    log(f"eval: {name} ({len(stages.eval_examples())} {stages.unit} x {cfg.pool} answers, {seconds['wall']:.0f} s)")
    return seconds


def _evaluate_all(cfg: DemoConfig, stages: Any, methods: list[str], seeds: list[int], out: Path,
                  log: Any) -> dict[str, Any]:
    """Load (or sample) every pool; per-example metrics of each. Returns {"examples", "pools", "metrics"}."""
    from vpo.evaluation import Pools, example_weights, pool_metrics

    task = stages.task
    examples = stages.eval_examples()
    weights = example_weights(len(examples), task.num_objectives(examples[0]), cfg.eval_weights,
                              seed=cfg.seed + EVAL_WEIGHT_SEED)
    pools: dict[str, Pools] = {}
    per_example: dict[str, dict[str, np.ndarray]] = {}
    seconds: dict[str, Any] = {}
    for name, _, _ in eval_jobs(cfg, methods, seeds, out):
        path = out / "eval" / f"{name}.npz"
        if not path.is_file():
            _sample_pool(cfg, stages, name, out, log)
        pools[name] = Pools.load(path)
        timing = out / "eval" / f"{name}.seconds.json"
        if timing.is_file():
            seconds[name] = read_record(timing, POOL_SECONDS_FIELDS, hint="delete it and the pool to sample it again")
        per_example[name] = pool_metrics(pools[name].vectors, task, eval_weights=weights)
    return {"examples": examples, "pools": pools, "metrics": per_example, "seconds": seconds,
            "oracle": stages.reference(examples, weights)}

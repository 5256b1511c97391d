"""CPU threads and worker processes picked from what the machine can do now: a short sample of
CPU use (``/proc/stat`` over about a second), not the cores the machine has nor the 1-minute
load average, which still reads 1.5 a minute after a finished install on an idle machine. On a
machine shared with other jobs, more torch threads than free cores spin against each other
(``vpo eval`` took 46-53 s with torch's default threads where 1 thread took 8 s).

Only *how many* threads or processes run follows this sample. Thread counts that change the
arithmetic of a result (the demo's warm-up, RL and evaluation) are configuration, never load.

Usage::

    from vpo.cores import WorkerBudget, pick_threads, sample_cpu
    threads, why = pick_threads()   # e.g. (1, "1 of 2 cores free: 0.9 busy over a 1.0 s sample")
    budget = WorkerBudget(jobs=12, threads=1, caps=[lambda running: (3, "memory holds 3")])
    workers, why = budget.allowed(running=1)   # re-checked whenever a job may start
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from dataclasses import dataclass, field
from typing import Any

IDLE_LOAD = 0.5
"""A 1-minute load average below this (half a core busy) reads as an otherwise idle machine
(the reports' note on the machine their timings were measured on)."""

SAMPLE_SECONDS = 1.0
"""How long ``sample_cpu`` watches the CPUs by default."""


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; all of them off Linux)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def read_cpu_times(path: str = "/proc/stat") -> dict[int, tuple[int, int]] | None:
    """``{cpu: (busy, total)}`` clock ticks since boot, per CPU, from ``/proc/stat``; None where
    the file is missing (not Linux). Idle time is ``idle + iowait``; guest time is already in
    ``user``."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    times: dict[int, tuple[int, int]] = {}
    for line in lines:
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        ticks = [int(v) for v in values[:8]] + [0] * (8 - len(values[:8]))
        total = sum(ticks)
        times[int(name[3:])] = (total - ticks[3] - ticks[4], total)
    return times or None


@dataclass(frozen=True)
class CpuSample:
    """CPU use over a short sample: ``busy`` cores of ``usable`` (every process's work, ours too)."""

    busy: float
    usable: int
    seconds: float
    source: str = "/proc/stat"
    """``/proc/stat``, or ``load average`` where there is none (the 1-minute average)."""

    def free(self, own: float = 0.0) -> int:
        """Cores free for more work (at least 1): the usable ones less the busy ones, where
        ``own`` of the busy cores are this program's own work and count as free."""
        others = max(0.0, self.busy - own)
        return max(1, min(self.usable, int(self.usable - others + 0.5)))

    def describe(self, own: float = 0.0) -> str:
        free = self.free(own)
        if self.source == "load average":
            return f"{free} of {self.usable} cores free: load average {self.busy:.1f}"
        mine = f", {own:g} of them this run's" if own else ""
        return f"{free} of {self.usable} cores free: {self.busy:.1f} busy{mine} over a {self.seconds:.1f} s sample"


def sample_cpu(seconds: float = SAMPLE_SECONDS, *, read: Callable[[], dict[int, tuple[int, int]] | None] = read_cpu_times,
               sleep: Callable[[float], None] = time.sleep) -> CpuSample:
    """How busy the usable CPUs are now: ``/proc/stat`` read twice, ``seconds`` apart (``read``
    and ``sleep`` are there for tests). Without ``/proc/stat``, the 1-minute load average."""
    cpus = usable_cpus()
    first = read()
    if first is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: assume idle
            load = 0.0
        return CpuSample(busy=load, usable=len(cpus), seconds=60.0, source="load average")
    sleep(seconds)
    second = read() or {}
    busy = 0.0
    for cpu in cpus:
        if cpu in first and cpu in second:
            ticks = second[cpu][1] - first[cpu][1]
            if ticks > 0:
                busy += min(1.0, max(0.0, (second[cpu][0] - first[cpu][0]) / ticks))
    return CpuSample(busy=busy, usable=len(cpus), seconds=seconds)


def pick_threads(workers: int = 1, seconds: float = SAMPLE_SECONDS / 2) -> tuple[int, str]:
    """Torch threads per process for ``workers`` processes sharing the free cores (at least 1),
    and why, in words (a half-second sample: a command waits for it before its work)."""
    sample = sample_cpu(seconds)
    return max(1, sample.free() // max(1, workers)), sample.describe()


Cap = Callable[[int], tuple[int, str]]
"""A limit on worker processes besides the cores: ``(running) -> (at most, why)``, e.g. how many
workers the memory holds; ``running``: this run's workers already started (what they hold is
part of the memory no longer free, so a cap counts it as theirs, as the CPU sample counts their
cores as free)."""


@dataclass
class WorkerBudget:
    """How many worker processes of ``threads`` torch threads may run at once *now*: as many as
    the free cores hold (a fresh ``sample_cpu`` on every call, this run's running workers counted
    as free), at most ``jobs`` and at most each of ``caps``; ``fixed`` (``--workers N``, or a GPU
    plan of its memory, ``fixed_why`` naming it) replaces the cores. The scheduler asks again
    whenever a job could start, so a machine that was busy at the start and idle later gets its
    second worker then.

    Usage::

        budget = WorkerBudget(jobs=14, threads=1, caps=[memory_cap])
        allowed, why = budget.allowed(running=0)
    """

    jobs: int
    threads: int = 1
    fixed: int = 0
    fixed_why: str = "--workers"
    """Why ``fixed`` is the count (a plan of the GPU's memory names itself here)."""
    caps: Sequence[Cap] = field(default_factory=list)
    seconds: float = SAMPLE_SECONDS
    sample: Callable[[float], CpuSample] | None = None
    """How the CPU is sampled (None: ``sample_cpu``, looked up when called)."""

    def ceiling(self) -> tuple[int, str]:
        """The most workers this run could ever use (``fixed``, else the usable cores), before caps:
        a cap reads the machine now, and what it holds back may be free later."""
        most, why = (self.fixed, self.fixed_why) if self.fixed else (len(usable_cpus()) // max(1, self.threads),
                                                                    "usable cores")
        return max(1, min(self.jobs, most)), why

    def most(self) -> tuple[int, str]:
        """``ceiling``, after the caps as they read now."""
        return self._capped(*self.ceiling(), running=0)

    def allowed(self, running: int = 0) -> tuple[int, str]:
        """(workers, why): how many may run now, ``running`` of them already started (at least
        ``max(1, running)``: a running job is never stopped)."""
        if self.fixed:
            return self._capped(max(1, min(self.jobs, self.fixed)), self.fixed_why, running)
        sample = (self.sample or sample_cpu)(self.seconds)
        free = sample.free(own=running * self.threads)
        return self._capped(max(1, min(self.jobs, free // max(1, self.threads))), sample.describe(running * self.threads),
                            running)

    def _capped(self, workers: int, why: str, running: int) -> tuple[int, str]:
        for cap in self.caps:
            most, reason = cap(running)
            if most < workers:
                workers, why = max(1, most), f"{why}; {reason}"
        return workers, why


def run_parallel(jobs: Sequence[Hashable], work: Callable[..., Any], budget: WorkerBudget, *,
                 log: Callable[[str], None] = print, recheck: float = 20.0,
                 executor: Callable[[int], Executor] | None = None,
                 local: Callable[..., Any] | None = None) -> tuple[dict[Any, Any], int]:
    """Run ``work(job, worker=...)`` for every job, in order, as many at once as ``budget``
    allows when each could start: the budget is asked again whenever a job ends and, while jobs
    wait with fewer workers running than ``budget.ceiling()``, every ``recheck`` seconds: a machine
    busy when the jobs start gets its second worker once it frees. With one worker at most ever
    (``ceiling``: ``--workers 1``, one usable core, one job), the jobs run in this process
    (``local`` if given, else ``work``, with ``worker=False``: it need not pickle); else in ``executor(n)``
    (default: a pool of ``n`` spawned processes; ``worker=True``). A line goes to ``log``
    whenever the number allowed changes. Returns each job's result and the most jobs that ran at
    once; the first job that raises stops the run (the running ones finish first)."""
    most, _ = budget.ceiling()
    if most <= 1 or len(jobs) <= 1:
        log(f"{len(jobs)} job(s) in this process")
        here = local or work
        return {job: here(job, worker=False) for job in jobs}, 1 if jobs else 0
    if executor is None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        def executor(n: int) -> Executor:
            return ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))

    queue, running, results, used, said = list(jobs), {}, {}, 0, None
    log(f"{len(jobs)} jobs on up to {most} worker processes")
    with executor(most) as pool:
        while queue or running:
            if queue and len(running) < most:
                allowed, why = budget.allowed(running=len(running))
                allowed = min(allowed, most)
                if allowed != said:
                    log(f"workers: {allowed} ({why})")
                    said = allowed
                while queue and len(running) < allowed:
                    job = queue.pop(0)
                    running[pool.submit(work, job, worker=True)] = job
                used = max(used, len(running))
            waiting = bool(queue) and len(running) < most
            done, _ = wait(list(running), timeout=recheck if waiting else None, return_when=FIRST_COMPLETED)
            for future in done:
                results[running.pop(future)] = future.result()
    return {job: results[job] for job in jobs}, used


__all__ = ["IDLE_LOAD", "SAMPLE_SECONDS", "Cap", "CpuSample", "WorkerBudget", "pick_threads", "read_cpu_times",
           "run_parallel", "sample_cpu", "usable_cpus"]

"""Worker processes from what the CPUs do now (``vpo.cores``): a sample of ``/proc/stat``, taken
again whenever a job could start, so a machine busy at the start gets its second worker once it
is idle; the 1-minute load average (1.5 a minute after an install) no longer decides."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from vpo.cores import CpuSample, WorkerBudget, read_cpu_times, run_parallel, sample_cpu

PROC_STAT = """cpu  200 0 100 700 0 0 0 0 0 0
cpu0 150 0 50 300 0 0 0 0 0 0
cpu1 50 0 50 400 0 0 0 0 0 0
intr 12345
ctxt 999
"""


def test_proc_stat_is_read_per_cpu(tmp_path):
    path = tmp_path / "stat"
    path.write_text(PROC_STAT)
    assert read_cpu_times(str(path)) == {0: (200, 500), 1: (100, 500)}
    assert read_cpu_times(str(tmp_path / "missing")) is None


def test_a_sample_counts_busy_cores_between_two_reads(monkeypatch):
    monkeypatch.setattr("vpo.cores.usable_cpus", lambda: [0, 1])
    reads = iter([{0: (100, 1000), 1: (100, 1000)},     # busy, total ticks since boot
                  {0: (190, 1100), 1: (150, 1100)}])    # cpu0 90% busy, cpu1 50% busy
    slept = []
    sample = sample_cpu(1.0, read=lambda: next(reads), sleep=slept.append)
    assert slept == [1.0] and sample.busy == pytest.approx(1.4) and sample.usable == 2
    assert sample.free() == 1                            # 0.6 of a core free: one worker
    assert sample.free(own=1.0) == 2                     # one of the busy cores is this run's own worker
    assert "1 of 2 cores free: 1.4 busy over a 1.0 s sample" == sample.describe()


def test_without_proc_stat_the_load_average_is_the_fallback(monkeypatch):
    monkeypatch.setattr("vpo.cores.usable_cpus", lambda: [0, 1])
    monkeypatch.setattr("os.getloadavg", lambda: (1.5, 1.0, 0.5))
    sample = sample_cpu(1.0, read=lambda: None, sleep=lambda s: pytest.fail("nothing to wait for"))
    assert sample.source == "load average" and sample.free() == 1 and "load average 1.5" in sample.describe()


class BusyThenIdle:
    """A simulated machine: other work holds 1.8 of 2 cores for the first ``busy_calls`` samples, then none."""

    def __init__(self, busy_calls: int) -> None:
        self.calls, self.busy_calls, self.lock = 0, busy_calls, threading.Lock()

    def __call__(self, seconds: float) -> CpuSample:
        with self.lock:
            self.calls += 1
            busy = self.calls <= self.busy_calls
        return CpuSample(busy=1.8 if busy else 0.0, usable=2, seconds=seconds)


def test_the_budget_reads_the_cpu_anew_each_time(monkeypatch):
    monkeypatch.setattr("vpo.cores.usable_cpus", lambda: [0, 1])
    budget = WorkerBudget(jobs=12, threads=1, sample=BusyThenIdle(busy_calls=1))
    assert budget.most() == (2, "usable cores")
    first, why = budget.allowed(running=0)
    assert first == 1 and "1.8 busy" in why                   # busy at the start: one worker
    assert budget.allowed(running=1)[0] == 2                  # idle now: a second one
    capped = WorkerBudget(jobs=12, sample=BusyThenIdle(0), caps=[lambda running: (1, "memory holds 1")])
    assert capped.allowed(0) == (1, "2 of 2 cores free: 0.0 busy over a 1.0 s sample; memory holds 1")
    assert WorkerBudget(jobs=12, fixed=3).allowed(0) == (3, "--workers")


def test_jobs_start_one_at_a_time_on_a_busy_cpu_and_two_at_once_when_it_is_idle(monkeypatch):
    """The scheduler itself, with jobs that sleep in threads: while the simulated machine is busy
    one job runs; from the first sample that reads idle, two."""
    monkeypatch.setattr("vpo.cores.usable_cpus", lambda: [0, 1])
    machine = BusyThenIdle(busy_calls=2)
    running, most_at_once, order, lock = [0], [0], [], threading.Lock()

    def work(job: int, worker: bool) -> int:
        assert worker
        with lock:
            running[0] += 1
            most_at_once.append(running[0])
            order.append(("start", job, machine.calls))
        time.sleep(0.15)
        with lock:
            running[0] -= 1
        return job * 10

    lines: list[str] = []
    results, used = run_parallel(list(range(6)), work, WorkerBudget(jobs=6, sample=machine), log=lines.append,
                                 recheck=0.05, executor=lambda n: ThreadPoolExecutor(max_workers=n))
    assert results == {job: job * 10 for job in range(6)} and list(results) == list(range(6))
    assert used == 2 and max(most_at_once) == 2
    starts = [entry for entry in order if entry[0] == "start"]
    # the first job started alone, on the busy reading, and nothing joined it while the machine was busy
    assert starts[0][1:] == (0, 1) and starts[1][2] >= 3
    assert [line.split(" (")[0] for line in lines] == ["6 jobs on up to 2 worker processes", "workers: 1",
                                                       "workers: 2"]


def test_a_cap_that_holds_one_worker_at_the_start_is_asked_again():
    """Memory other work held when the jobs started is free later: the jobs still run in workers,
    and the second joins once the cap allows it (before, one job in this process after another)."""
    reads = []

    def memory(running: int) -> tuple[int, str]:
        reads.append(running)
        return (1, "busy") if len(reads) <= 2 else (2, "free")

    seen, lock = [], threading.Lock()

    def work(job: int, worker: bool) -> int:
        with lock:
            seen.append(worker)
        time.sleep(0.15)
        return job

    lines: list[str] = []
    budget = WorkerBudget(jobs=4, fixed=2, caps=[memory])
    assert budget.most()[0] == 1 and budget.ceiling()[0] == 2
    results, used = run_parallel(list(range(4)), work, budget, log=lines.append, recheck=0.05,
                                 executor=lambda n: ThreadPoolExecutor(max_workers=n))
    assert results == {job: job for job in range(4)} and seen == [True] * 4 and used == 2
    assert [line.split(" (")[0] for line in lines] == ["4 jobs on up to 2 worker processes", "workers: 1",
                                                       "workers: 2"]


def test_one_worker_runs_the_jobs_in_this_process():
    calls = []
    results, used = run_parallel(["a", "b"], lambda job, worker: calls.append((job, worker)) or job.upper(),
                                 WorkerBudget(jobs=2, fixed=1), log=lambda line: None)
    assert results == {"a": "A", "b": "B"} and used == 1 and calls == [("a", False), ("b", False)]

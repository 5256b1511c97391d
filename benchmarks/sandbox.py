"""Throughput of vpo.sandbox against a naive runner (one ``subprocess.run`` per test), side by side.

Usage::

    python benchmarks/sandbox.py                       # 200 programs x 16 tests, 2 workers
    python benchmarks/sandbox.py --programs 50 --timeout 1 --workers 2 --repeat 3 --json out.json
    python benchmarks/sandbox.py --shares 0             # only the workload without timeouts

The workload is a stdin problem (sum of a list) with 16 tests and a mix of programs: correct
ones, wrong ones (off by one on some tests, or crashing), and, in the first mix, timing-out
ones (an infinite loop on one test; ``--shares`` lists the timing-out shares, one workload
each: by default 5 % and none). Both runners get the same programs, the same per-test
wall-clock limit (``--timeout``; the sandbox also has a CPU limit of the same length), the same
interpreter (the sandbox's, ``/usr/bin/python3`` when present) and the same number of worker
threads. The naive one runs ``python -c code`` once per test with no isolation at all; the
sandbox runs with full isolation (bubblewrap when available) on its warm workers. Verdicts of
the two are checked to agree.

Printed per workload and runner: wall seconds (best and median of ``--repeat`` alternating
runs), tests per second, CPU milliseconds per test (the sandbox: the caller plus what the
workers report from inside; the naive runner: the caller plus its reaped children) and the
1-minute load average before and after (the machine may be shared: compare the two runners
of one workload, not runs on different loads). A timing-out test spins for its whole limit,
so ``floor s`` = timing-out tests x ``--timeout`` / workers is a wall time no runner can beat
with that many workers, and ``max/s`` the tests per second it allows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from vpo.sandbox import Limits, Program, compare_stdin, default_workers, isolation_mode, run_batch
from vpo.sandbox import _interpreter as sandbox_interpreter
from vpo.sandbox.pool import sandbox_cpu_seconds

CORRECT = "n = int(input())\nprint(sum(map(int, input().split())))\n"
OFF_BY_ONE = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) + (n % 3 == 0))\n"
CRASH = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) // (n % 4))\n"
LOOPS = "n = int(input())\nxs = list(map(int, input().split()))\nwhile n == {n}:\n    pass\nprint(sum(xs))\n"


def make_workload(n_programs: int, n_tests: int, seed: int = 0,
                  timing_out_share: float = 0.05) -> tuple[list[tuple[str, str]], list[str]]:
    rng = random.Random(seed)
    tests = []
    for k in range(n_tests):
        n = k + 1
        xs = [rng.randint(-10**6, 10**6) for _ in range(n)]
        tests.append((f"{n}\n{' '.join(map(str, xs))}\n", f"{sum(xs)}\n"))
    n_loop = round(n_programs * timing_out_share)
    programs = []
    for i in range(n_programs):
        if i < n_loop:
            programs.append(LOOPS.format(n=rng.randint(1, n_tests)))
        else:
            programs.append([CORRECT, OFF_BY_ONE, CRASH][i % 3])
    rng.shuffle(programs)
    return tests, programs


def naive_run(code: str, tests: list[tuple[str, str]], timeout: float, python: str) -> list[str]:
    """The baseline: a fresh interpreter per test, no limits but the wall timeout."""
    out = []
    for test_in, expected in tests:
        try:
            done = subprocess.run([python, "-c", code], input=test_in, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            out.append("timeout")
            continue
        if done.returncode != 0:
            out.append("error")
        else:
            out.append("pass" if compare_stdin(done.stdout, expected) else "wrong")
    return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def bench_workload(share: float, args: argparse.Namespace, workers: int, python: str) -> dict:
    tests, programs = make_workload(args.programs, args.tests, timing_out_share=share)
    n_tests = len(programs) * len(tests)
    n_loop = sum(code.startswith("n = int(input())\nxs = list(map(int, input().split()))\nwhile")
                 for code in programs)
    limits = Limits(timeout=args.timeout, wall_timeout=args.timeout)
    jobs = [Program(code, tests) for code in programs]
    run_batch(jobs[:workers], workers=workers, limits=limits)  # set-up and warm workers, untimed
    times: dict[str, list[float]] = {"sandbox": [], "naive": []}
    cpu: dict[str, list[float]] = {"sandbox": [], "naive": []}
    load = [_load()]
    verdicts: list = []
    naive: list[list[str]] = []
    for _ in range(args.repeat):
        cpu0, inside0, started = time.process_time(), sandbox_cpu_seconds(), time.perf_counter()
        verdicts = run_batch(jobs, workers=workers, limits=limits)
        times["sandbox"].append(time.perf_counter() - started)
        cpu["sandbox"].append(time.process_time() - cpu0 + sandbox_cpu_seconds() - inside0)
        if not args.skip_naive:
            cpu0, kids0, started = time.process_time(), _children_cpu(), time.perf_counter()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                naive = list(pool.map(lambda code: naive_run(code, tests, args.timeout, python), programs))
            times["naive"].append(time.perf_counter() - started)
            cpu["naive"].append(time.process_time() - cpu0 + _children_cpu() - kids0)
        load.append(_load())
    floor = n_loop * args.timeout / workers
    result: dict = {"timing_out_share": share, "programs": len(programs), "tests": n_tests,
                    "timing_out_tests": n_loop, "floor_s": round(floor, 2),
                    "max_tests_per_s": round(n_tests / floor, 1) if floor else None, "load_avg_1min": load}
    for runner in ("sandbox", "naive"):
        if not times[runner]:
            continue
        best = min(times[runner])
        result[runner] = {"s": round(best, 2), "s_median": round(statistics.median(times[runner]), 2),
                          "tests_per_s": round(n_tests / best, 1),
                          "cpu_ms_per_test": round(1000 * min(cpu[runner]) / n_tests, 3)}
    counts: dict[str, int] = {}
    for row in verdicts:
        for v in row:
            counts[v.status] = counts.get(v.status, 0) + 1
    result["verdicts"] = counts
    if naive:
        ours = [[v.status for v in row] for row in verdicts]
        result["speedup"] = round(result["naive"]["s"] / result["sandbox"]["s"], 2)
        result["speedup_median"] = round(result["naive"]["s_median"] / result["sandbox"]["s_median"], 2)
        result["verdict_disagreements"] = sum(a != b for ra, rb in zip(ours, naive, strict=True)
                                              for a, b in zip(ra, rb, strict=True))
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--tests", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=None, help="default: the cores (2 here: the issue's setting)")
    parser.add_argument("--shares", default="0.05,0", help="timing-out shares, one workload each")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two runners this many times")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    shares = [float(s) for s in args.shares.split(",") if s.strip()]
    if args.programs < 1 or args.tests < 1 or args.timeout <= 0 or args.repeat < 1 or not shares \
            or not all(0 <= s <= 1 for s in shares):
        raise ValueError("--programs, --tests, --timeout and --repeat must be positive, --shares in [0, 1]")
    workers = args.workers or default_workers()
    python = sandbox_interpreter()
    out = {"workers": workers, "timeout_s": args.timeout, "isolation": isolation_mode(), "python": python,
           "repeat": args.repeat, "cores": default_workers(), "workloads": []}
    for share in shares:
        out["workloads"].append(bench_workload(share, args, workers, python))

    print(f"vpo.sandbox ({out['isolation']}) vs naive, {workers} workers, {args.programs} programs x {args.tests} "
          f"tests, limit {args.timeout:g} s, {args.repeat} run(s) each, best shown")
    print(f"{'timing out':>10} {'runner':>8} {'wall s':>7} {'median':>7} {'tests/s':>8} {'CPU ms/test':>12} "
          f"{'speedup':>8} {'floor s':>8} {'max/s':>7} {'load 1m':>15}")
    for w in out["workloads"]:
        for runner in ("sandbox", "naive"):
            if runner not in w:
                continue
            r = w[runner]
            speed = f"{w['speedup']:.2f}x" if runner == "sandbox" and "speedup" in w else ""
            print(f"{w['timing_out_tests']:>10} {runner:>8} {r['s']:>7.2f} {r['s_median']:>7.2f} "
                  f"{r['tests_per_s']:>8.0f} {r['cpu_ms_per_test']:>12.3f} {speed:>8} {w['floor_s']:>8.2f} "
                  f"{(w['max_tests_per_s'] or float('inf')):>7.0f} {' -> '.join(map(str, w['load_avg_1min'][::len(w['load_avg_1min']) - 1 or 1])):>15}")
        line = f"{'':>10} verdicts {w['verdicts']}"
        if "verdict_disagreements" in w:
            line += f"; disagreements with naive: {w['verdict_disagreements']}"
        print(line)
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return out


if __name__ == "__main__":
    main()

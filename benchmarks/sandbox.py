"""Throughput of vpo.sandbox against a naive runner (one ``subprocess.run`` per test).

Usage::

    python benchmarks/sandbox.py                       # 200 programs x 16 tests, 2 workers
    python benchmarks/sandbox.py --programs 50 --timeout 1 --workers 2 --repeat 3 --json out.json

The workload is a stdin problem (sum of a list) with 16 tests and a mix of programs: correct
ones, wrong ones (off by one on some tests, or crashing), and timing-out ones (an infinite
loop on one test). Both runners get the same programs, the same per-test wall-clock limit
(``--timeout``; the sandbox also has a CPU limit of the same length), the same interpreter
(the sandbox's, ``/usr/bin/python3`` when present) and the same number of worker threads.
The naive one runs ``python -c code`` once per test with no isolation at all; the sandbox
runs with full isolation (bubblewrap when available). Verdicts of the two are checked to
agree. With ``--repeat N`` the two alternate N times (so both see the same machine load) and
the best and median times are reported; the load average is reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from vpo.sandbox import Limits, Program, compare_stdin, default_workers, isolation_mode, run_batch
from vpo.sandbox import _interpreter as sandbox_interpreter

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
    n_loop = max(1, round(n_programs * timing_out_share))
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--tests", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timing-out-share", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two runners this many times")
    parser.add_argument("--skip-naive", action="store_true")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    if args.programs < 1 or args.tests < 1 or args.timeout <= 0 or args.repeat < 1:
        raise ValueError("--programs, --tests, --timeout and --repeat must be positive")
    workers = args.workers or default_workers()
    tests, programs = make_workload(args.programs, args.tests, timing_out_share=args.timing_out_share)
    n_tests = len(programs) * len(tests)
    limits = Limits(timeout=args.timeout, wall_timeout=args.timeout)
    mode = isolation_mode()
    python = sandbox_interpreter()
    jobs = [Program(code, tests) for code in programs]
    run_batch(jobs[:1], workers=1, limits=limits)  # one-time set-up (probe, driver build)

    sandbox_times: list[float] = []
    naive_times: list[float] = []
    load = [round(os.getloadavg()[0], 2)]
    naive: list[list[str]] = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        verdicts = run_batch(jobs, workers=workers, limits=limits)
        sandbox_times.append(time.perf_counter() - started)
        if not args.skip_naive:
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                naive = list(pool.map(lambda code: naive_run(code, tests, args.timeout, python), programs))
            naive_times.append(time.perf_counter() - started)
        load.append(round(os.getloadavg()[0], 2))
    ours = [[v.status for v in vs] for vs in verdicts]
    sandbox_s = min(sandbox_times)
    result = {"programs": len(programs), "tests_per_program": len(tests), "workers": workers,
              "timeout_s": args.timeout, "isolation": mode, "python": python, "repeat": args.repeat,
              "load_avg_1min": load, "sandbox_s": round(sandbox_s, 2),
              "sandbox_s_median": round(statistics.median(sandbox_times), 2),
              "sandbox_tests_per_s": round(n_tests / sandbox_s, 1)}
    counts: dict[str, int] = {}
    for row in ours:
        for status in row:
            counts[status] = counts.get(status, 0) + 1
    result["verdicts"] = counts

    if not args.skip_naive:
        naive_s = min(naive_times)
        result.update(naive_s=round(naive_s, 2), naive_s_median=round(statistics.median(naive_times), 2),
                      naive_tests_per_s=round(n_tests / naive_s, 1), speedup=round(naive_s / sandbox_s, 2),
                      speedup_median=round(statistics.median(naive_times) / statistics.median(sandbox_times), 2))
        disagree = sum(a != b for ra, rb in zip(ours, naive, strict=True) for a, b in zip(ra, rb, strict=True))
        result["verdict_disagreements"] = disagree

    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()

"""Reward throughput under verl's threads: ``compute_score`` called from 1 thread and from many.

Usage::

    python benchmarks/reward_threads.py                     # 1 and 16 threads, math and code
    python benchmarks/reward_threads.py --threads 1,4,16 --math-answers 96 --code-programs 32 --json out.json

verl calls ``compute_score`` from many threads at once. Each workload is scored once per thread
count, every call split evenly over the threads:

* math: ``--math-answers`` answers, half right and half wrong, all fractions (so each goes to
  the math-verify workers, not the in-process integer check); answers/s; with the task's 4
  checking processes and with 1 (as before the pool), and again with one right answer in 8
  replaced by one whose check never ends (killed at the 1 s limit, the worker restarted);
* code: ``--code-programs`` programs on the fixture problem ``fx_sum`` (its tests), half right
  and half wrong; tests/s (every test of every program is run).

Printed per workload and thread count: wall seconds, answers (or tests) per second, the speed-up
over one thread, and the 1-minute load average before and after (the machine may be shared).
Verdicts are checked against the one-thread run's: a different verdict is an error.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor


def math_calls(n: int, offset: int = 0, hang_every: int = 0, workers: int = 4) -> list[tuple]:
    """``n`` calls, right and wrong in turn, on problems ``offset``.. (fresh text: no cache hit);
    every ``hang_every``-th right answer replaced by one whose check never ends (killed at the
    1 s limit); scored by a math task with ``workers`` checking processes."""
    from vpo.export import export_rows
    from vpo.tasks import get_task

    task = get_task("math", workers=workers)
    examples = [task.validate({"id": f"q{k}", "question": f"Compute {k + 1}/{k + 2}.",
                               "answer": f"\\frac{{{k + 1}}}{{{k + 2}}}"}, k)
                for k in range(offset, offset + (n + 1) // 2)]
    calls = []
    rows = export_rows(task, examples, split="test", fmt="verl", answers=1, task_params={"workers": workers})
    for k, row in enumerate(rows, start=offset):
        truth, info = row["reward_model"]["ground_truth"], dict(row["extra_info"])
        hang = hang_every and (k - offset) % hang_every == hang_every - 1
        calls.append(("math", "\\boxed{9^{9^{9}}}" if hang else f"\\boxed{{\\frac{{{2 * k + 2}}}{{{2 * k + 4}}}}}",
                      truth, info))
        calls.append(("math", f"\\boxed{{\\frac{{{k + 2}}}{{{k + 1}}}}}", truth, info))
    return calls[:n]


def code_calls(n: int) -> tuple[list[tuple], int]:
    from vpo.export import export_rows
    from vpo.tasks import get_task

    task = get_task("code")
    problem = next(p for p in task.examples("test", source="fixtures") if p["id"] == "fx_sum")
    row = export_rows(task, [problem], split="test", fmt="verl", answers=1)[0]
    truth, info = row["reward_model"]["ground_truth"], dict(row["extra_info"])
    right = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
    wrong = "```python\nn = int(input())\nprint(n)\n```"
    tests = len(problem["tests"]) if "tests" in problem else len(json.loads(truth).get("tests", [])) or 1
    return [("code", right if i % 2 == 0 else wrong, truth, info) for i in range(n)], tests


def timed(calls: list[tuple], threads: int) -> tuple[float, list[float]]:
    from vpo.integrations.verl import compute_score

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        scores = list(pool.map(lambda call: compute_score(*call, method="grpo")["score"], calls))
    return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,16", help="comma-separated thread counts (the first is the baseline)")
    parser.add_argument("--math-answers", type=int, default=64)
    parser.add_argument("--code-programs", type=int, default=32)
    parser.add_argument("--json", default="", help="also write the table as JSON here")
    args = parser.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    code, tests_per_program = code_calls(args.code_programs)
    n = args.math_answers
    workloads = {"math (answers/s)": (lambda j: math_calls(n, offset=(j + 1) * n), 1, 0),
                 "math, 1 worker": (lambda j: math_calls(n, offset=(j + 9) * n, workers=1), 1, 0),
                 "math 1/8 hanging": (lambda j: math_calls(n, offset=(j + 17) * n, hang_every=8), 1, 8),
                 "  same, 1 worker": (lambda j: math_calls(n, offset=(j + 25) * n, hang_every=8, workers=1), 1, 8),
                 "code (tests/s)": (lambda j: code, tests_per_program, 0)}
    for workers in (4, 1):  # start every math worker (each imports sympy): not timed
        timed(math_calls(4 * max(counts), offset=100 * n, workers=workers), max(counts))
    timed(code[:max(counts)], max(counts))  # warm the sandbox workers
    rows = []
    print(f"{'workload':18} {'threads':>7} {'wall s':>8} {'per s':>8} {'speed-up':>8} {'load':>11}")
    for name, (make, unit, hang_every) in workloads.items():
        base_rate = None
        for j, threads in enumerate(counts):
            calls = make(j)
            load = os.getloadavg()[0]
            wall, scores = timed(calls, threads)
            want = [float(i % 2 == 0 and not (hang_every and (i // 2) % hang_every == hang_every - 1))
                    for i in range(len(calls))]  # right, wrong, right, ... (a hanging answer scores 0)
            if scores != want:
                raise SystemExit(f"{name}: {threads} threads gave a wrong verdict")
            rate = len(calls) * unit / wall
            base_rate = base_rate or rate
            rows.append({"workload": name, "threads": threads, "wall": wall, "rate": rate,
                         "speedup": rate / base_rate, "load_before": load, "load_after": os.getloadavg()[0]})
            print(f"{name:18} {threads:>7} {wall:>8.2f} {rate:>8.1f} {rate / base_rate:>7.2f}x "
                  f"{load:>5.1f}->{os.getloadavg()[0]:<4.1f}")
    print(f"({os.cpu_count()} CPUs; math workers per task: 4, started on first use)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()

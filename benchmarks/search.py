"""Candidate evaluations per second through the OpenEvolve evaluator (vpo.sandbox underneath).

Usage: ``python benchmarks/search.py [--candidates 24] [--tests 8] [--iterations 24]``

Candidates are programs for the fixture problem ``fx_sum`` (n integers, print their sum) with
its ``--tests`` smallest tests, cycling through a mix: correct, wrong answer, runtime error,
syntax error (scored without a sandbox) and, with ``--hostile``, an infinite loop (costs one
CPU timeout per test, ``--test-timeout`` seconds). Measured:

* ``direct``: ``evaluate(program_path)`` of the per-problem evaluator file, called in a loop
  (one candidate at a time, as one OpenEvolve worker does);
* ``threads2``: the same calls from 2 threads (OpenEvolve's parent evaluates seeds this way;
  each call runs its own sandbox process, so this is what 2 cores give);
* ``openevolve``: a real OpenEvolve run (``vpo.integrations.openevolve.evolve``) whose scripted
  stand-in LLM answers with the same mix, ``--workers`` forked workers: evaluations per second
  of the whole loop (prompt building, database, process pool, evaluator), setup included.

Results print as a table and as one JSON line; the load average is printed because other
processes on the machine slow every number.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vpo.integrations import openevolve as oe
from vpo.integrations.openevolve_evaluator import evaluate_path, write_evaluator
from vpo.sandbox import Limits, isolation_mode
from vpo.tasks import get_task

MIX = {
    "correct": "n = int(input())\nprint(sum(map(int, input().split())))\n",
    "wrong": "n = int(input())\nprint(n)\n",
    "runtime_error": "n = int(input())\nprint(1 // 0)\n",
    "syntax_error": "def solve(:\n    pass\n",
}
HANG = "while True:\n    pass\n"


def candidates(count: int, hostile: bool) -> list[str]:
    kinds = list(MIX.values()) + ([HANG] if hostile else [])
    return [kinds[i % len(kinds)] + f"# candidate {i}\n" for i in range(count)]


def time_direct(programs: list[str], evaluator_dir: Path, threads: int) -> float:
    problem = evaluator_dir / "problem.json"
    paths = []
    for i, code in enumerate(programs):
        path = evaluator_dir / f"cand_{i}.py"
        path.write_text(code)
        paths.append(path)
    start = time.perf_counter()
    if threads == 1:
        scores = [evaluate_path(p, problem).metrics["combined_score"] for p in paths]
    else:
        with ThreadPoolExecutor(threads) as pool:
            scores = [r.metrics["combined_score"] for r in pool.map(lambda p: evaluate_path(p, problem), paths)]
    elapsed = time.perf_counter() - start
    assert all(0.0 <= s <= 1.0 for s in scores)
    return len(paths) / elapsed


def time_openevolve(problem: dict, programs: list[str], iterations: int, workers: int, limits: Limits,
                    out: Path) -> tuple[float, int]:
    responses = [f"```python\n{code}```" for code in programs]
    start = time.perf_counter()
    result = oe.evolve(problem, [MIX["wrong"]], client=oe.scripted_client(responses), model_name="scripted",
                       iterations=iterations, output_dir=out, workers=workers, limits=limits, start_method="fork")
    elapsed = time.perf_counter() - start
    return result.evaluations / elapsed, result.evaluations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--tests", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--test-timeout", type=float, default=1.0)
    parser.add_argument("--hostile", action="store_true", help="add an infinite loop to the mix")
    args = parser.parse_args()

    limits = Limits(timeout=args.test_timeout)
    problem = next(e for e in get_task("code").examples(source="fixtures") if e["id"] == "fx_sum")
    problem["tests"] = problem["tests"][:args.tests]
    programs = candidates(args.candidates, args.hostile)
    results = {"isolation": isolation_mode(), "tests": len(problem["tests"]), "cores": os.cpu_count(),
               "hostile": args.hostile}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        write_evaluator(problem, tmp_path / "eval", limits=limits)
        results["direct_per_s"] = time_direct(programs, tmp_path / "eval", 1)
        results["threads2_per_s"] = time_direct(programs, tmp_path / "eval", 2)
        rate, count = time_openevolve(problem, candidates(args.iterations, args.hostile), args.iterations,
                                      args.workers, limits, tmp_path / "oe")
        results["openevolve_per_s"], results["openevolve_evaluations"] = rate, count
    results["loadavg_1min"] = os.getloadavg()[0]
    print(f"isolation {results['isolation']}, {results['tests']} tests per candidate, "
          f"load average {results['loadavg_1min']:.1f} on {results['cores']} cores")
    print(f"{'path':<34}{'evaluations/s':>14}")
    print(f"{'evaluator, 1 caller':<34}{results['direct_per_s']:>14.1f}")
    print(f"{'evaluator, 2 threads':<34}{results['threads2_per_s']:>14.1f}")
    print(f"{'OpenEvolve loop, ' + str(args.workers) + ' workers':<34}{results['openevolve_per_s']:>14.1f}"
          f"   ({results['openevolve_evaluations']} evaluations incl. the seed)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()

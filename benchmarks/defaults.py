"""What the thread and worker defaults give: wall seconds of ``vpo eval`` with ``--threads 0``
(the cores free now, ``vpo.cores``) against fixed thread counts, and optionally of ``vpo demo
--quick`` with ``--workers 0`` against fixed worker counts, each in a fresh interpreter as a user
runs it.

Usage: ``python benchmarks/defaults.py [--repeats 3] [--examples 60] [--demo]``

The eval policy is the demo's tiny Llama in its compact maze format, randomly initialised (a
random policy writes about as many tokens as a trained one, and the speed does not depend on
the weights); pools of 30 answers (10 chains of m = 3) on ``--examples`` 5x5 mazes. Every row
prints the 1-minute load average before it ran and what ``--threads 0`` / ``--workers 0`` picked,
because other processes on the machine change every number: run it on an idle machine and
under load (e.g. ``stress --cpu 2``) to see both sides.

Measured on 2 cores shared with other jobs (load average 7 to 13), ``--repeats 2 --examples 60``
(wall seconds of each repeat): ``--threads 0`` picked 1 thread and took 23.6 and 22.3; ``--threads
1`` 62.0 and 61.2 (the load rose between the rows); ``--threads 2``, what torch's default gave
before, 297.1 and 245.2: on a busy machine the second thread spins against the other jobs.
On the same 2 cores idle (load average 0.1 to 0.7), same arguments: ``--threads 0`` picked 2
threads and took 9.5 and 8.8; ``--threads 1`` 9.6 and 10.3; ``--threads 2`` 8.8 and 9.5. Idle,
the choice costs nothing; loaded, the free-core count avoids the 10x slowdown. ``--repeats 1
--demo`` right after (load average 0.8 to 1.0, left by the runs before, so ``0`` counted 1 free
core): ``vpo eval`` 9.4 / 10.3 / 9.8 s for ``--threads 0`` / ``1`` / ``2``; ``vpo demo --quick``
47.0 / 44.0 / 45.3 s for ``--workers 0`` (picked 1) / ``1`` / ``2``: at the quick size the worker
count hardly matters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def policy(folder: Path) -> Path:
    from vpo.demo.config import DemoConfig
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.models import build_char_tokenizer, build_tiny_llama

    cfg, fmt = DemoConfig(), CompactMazeFormat()
    tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    model = build_tiny_llama(tokenizer, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, mlp=cfg.mlp,
                             max_positions=256, seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    fmt.save(folder, task="maze", task_params={"size": cfg.size, "reward_mode": cfg.reward_mode}, method="vpo")
    return folder


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of ``python -m vpo ARGV`` and the line that says what --threads/--workers 0 picked."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "vpo", *argv], capture_output=True, text=True, cwd=cwd,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - start
    if run.returncode:
        raise SystemExit(f"vpo {' '.join(argv)} failed:\n{run.stderr[-2000:]}")
    picked = [line for line in (run.stdout + run.stderr).splitlines()
              if "torch threads:" in line or "worker process" in line]
    return seconds, picked[0].split("] ")[-1] if picked else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--demo", action="store_true", help="also time vpo demo --quick per --workers")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = policy(work / "policy")
        for threads in (0, 1, 2):
            for r in range(args.repeats):
                load = os.getloadavg()[0]
                seconds, picked = timed(["eval", "--model", str(model), "--answers", "3", "--pool", "30",
                                         "--examples", str(args.examples), "--threads", str(threads), "--no-progress",
                                         "--out", str(work / f"eval-{threads}-{r}")], work)
                rows.append({"command": "vpo eval", "setting": f"--threads {threads}", "repeat": r,
                             "load_before": round(load, 2), "seconds": round(seconds, 1), "picked": picked})
                print(json.dumps(rows[-1]), flush=True)
        if args.demo:
            for workers in (0, 1, 2):
                load = os.getloadavg()[0]
                seconds, picked = timed(["demo", "--quick", "--workers", str(workers), "--no-progress",
                                         "--out", str(work / f"demo-{workers}")], work)
                rows.append({"command": "vpo demo --quick", "setting": f"--workers {workers}", "repeat": 0,
                             "load_before": round(load, 2), "seconds": round(seconds, 1), "picked": picked})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{os.cpu_count()} CPUs")
    print(f"{'command':<18} {'setting':<12} {'seconds (each repeat)':<26} {'median':>7}  load before  picked by 0")
    for command, setting in dict.fromkeys((r["command"], r["setting"]) for r in rows):
        mine = [r for r in rows if (r["command"], r["setting"]) == (command, setting)]
        each = ", ".join(f"{r['seconds']:.1f}" for r in mine)
        loads = ", ".join(f"{r['load_before']:.1f}" for r in mine)
        print(f"{command:<18} {setting:<12} {each:<26} {statistics.median(r['seconds'] for r in mine):>7.1f}  "
              f"{loads:<11}  {mine[0]['picked']}")
    print(json.dumps({"cpus": os.cpu_count(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``vpo demo``: the CPU maze demo (warm-up, GRPO vs VPO, evaluation, report).

Usage::

    vpo demo                      # about 11 minutes on 2 idle cores (RL in 2 worker processes) -> runs/demo/report.md
    vpo demo --quick              # smoke test, about 1 minute -> runs/demo-quick/
    vpo demo --methods all        # adds Multi-RLVR and Max@K
    vpo demo --preset paper-maze  # the paper's 9x9 mazes, 27M parameters, 2 seeds: about 15 min on one H100 (estimated)

Re-running the same command after an interruption resumes where it stopped.
"""

from __future__ import annotations

import argparse

from vpo.config import add_dataclass_args, check_out_dir, dataclass_from_args
from vpo.demo.config import DemoConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="train a tiny model on mazes with GRPO and VPO on CPU and write a report",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_args(parser, DemoConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vpo.demo.run import run_demo

    cfg = dataclass_from_args(DemoConfig, args)
    check_out_dir(cfg.resolved().out)
    result = run_demo(cfg)
    paths = result["report"]
    print(f"report: {paths['md']}  (html: {paths['html']}, metrics: {paths['json']}, "
          f"{len(paths['plots'])} plots)")
    for line in result["metrics"].get("findings", []):
        print(f"- {line}")
    return 0

"""``vpo demo``: the CPU maze demo (warm-up, GRPO, Max@K, Multi-RLVR and VPO, evaluation, report),
and the same pipeline on a pretrained model (``--preset smollm2``).

Usage: see ``vpo demo --help`` (its measured times come from ``vpo.demo.config.MEASURED_RUNS``).
Re-running the same command after an interruption resumes where it stopped.
"""

from __future__ import annotations

import argparse

from vpo.config import TYPED_FLAGS, add_dataclass_args, check_out_dir, dataclass_from_args
from vpo.demo.config import DemoConfig, measured_time


def description() -> str:
    """The help text's head, with the measured times."""
    return (f"""The CPU maze demo: warm-up, then GRPO, Max@K, Multi-RLVR and VPO, evaluation, report.

Usage::

    vpo demo                      # {measured_time('default')} -> runs/demo/report.md
    vpo demo --quick              # smoke test ({measured_time('quick')}) -> runs/demo-quick/
    vpo demo --methods grpo,vpo   # two of the paper's four methods (all four is the default)
    vpo demo --preset paper-maze  # the paper's 9x9 mazes, 4 methods x 2 seeds (one GPU; --device cpu: the CPU proxy)
    vpo demo --preset smollm2     # a pretrained model (SmolLM2-135M) on the describe task: chain warm-up, then
                                  # 4 methods x 2 seeds on a GPU, GRPO and VPO x 1 seed on CPU (docs/demo/smollm2.md)

Re-running the same command after an interruption resumes where it stopped.
""")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="train a tiny model on mazes with GRPO and VPO on CPU and write a report",
        description=description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_args(parser, DemoConfig, skip=("given",))
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> DemoConfig:
    """The demo's config from its flags; the flags typed are ``given``: a flag typed with its default's
    value is still the user's choice, which a preset must not replace."""
    return dataclass_from_args(DemoConfig, args, given=tuple(sorted(getattr(args, TYPED_FLAGS, {}))))


def run(args: argparse.Namespace) -> int:
    from vpo.demo.run import run_demo

    cfg = config_from_args(args)
    check_out_dir(cfg.resolved().out)
    result = run_demo(cfg)
    paths, metrics = result["report"], result["metrics"]
    plots = len(paths["plots"]) + len(metrics.get("headline_plots") or [])
    print(f"report: {paths['md']}  (html: {paths['html']}, metrics: {paths['json']}, {plots} plots)")
    for line in metrics.get("findings", []) + metrics.get("checks", []):
        print(f"- {line}")
    return 1 if any(line.startswith("FAILED") for line in metrics.get("checks", [])) else 0

"""The README's results and times are the shipped reports' (docs/demo/report.md and the other
reports under docs/), read from them here so they cannot go stale; every command is in its
commands table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPORT = ROOT / "docs" / "demo" / "report.md"
DIFFERENCE = re.compile(r"([+-]\d+\.\d{3}) ± (\d+\.\d{3}), (significant|not significant)")
"""A paired difference as the README states it: ``+0.017 ± 0.019, not significant``."""


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_every_difference_the_readme_states_is_a_shipped_reports():
    readme = _flat(README)
    stated = DIFFERENCE.findall(readme)
    assert stated, "the README states no paired difference: this test reads them"
    reports = [_flat(path) for path in sorted((ROOT / "docs").rglob("report.md"))]
    for mean, half_width, verdict in stated:
        shown = f"{mean} ± {half_width} ({verdict},"
        assert any(shown in report for report in reports), f"README: {mean} ± {half_width}, {verdict}: in no report"


def test_vpo_over_its_warm_start_at_k_30_is_the_reports():
    line = next(line for line in REPORT.read_text().splitlines() if line.startswith("- VPO vs its warm start"))
    mean, half_width, verdict = re.search(r"best@30 ([+-]\d\.\d{3}) ± (\d\.\d{3}) \((significant|not significant)",
                                          line).groups()
    assert f"at k = 30 small and {verdict} ({mean} ± {half_width}, {verdict})" in _flat(README)


def test_the_readme_demo_time_is_the_reports_and_names_its_machine():
    from vpo.demo.config import MEASURED_RUNS, measured_time

    timings = REPORT.read_text().split("## Timings", 1)[1]
    wall = float(re.search(r"^\| this invocation \| ([\d.]+) \|", timings, re.MULTILINE).group(1))
    assert MEASURED_RUNS["default"]["seconds"] == round(wall)
    machine = re.search(r"same kind of machine \((AMD EPYC|Intel [^,]+), torch's (AVX\d*)", _flat(REPORT))
    assert machine, "the report names the CPU it ran on"
    readme = _flat(README)
    assert f"{measured_time('default')} of an {machine.group(1)} with AVX-512 (the machine of the shipped" in readme
    assert "on 2 cores shared with other jobs" in readme  # and how far the time is from a shared machine's


def test_every_command_is_in_the_readme_commands_table():
    import argparse

    from vpo.cli import build_parser

    table = README.read_text().split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `vpo ")]
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in commands:
        assert any(row.startswith(f"| `vpo {name} ") or row.startswith(f"| `vpo {name}`") for row in rows), name

"""Pin the ``vpo demo --quick`` numbers of this commit in ``docs/demo/quick_numbers.json``, beside
the shipped ``docs/demo/report.md`` made from the same commit; ``tests/demo/test_demo.py`` then checks
that HEAD's quick run still gives them, to the last bit, on the same kind of machine.

Usage::

    vpo demo --quick --out runs/demo-quick && python scripts/pin_quick_numbers.py runs/demo-quick

Run it whenever the default report is regenerated (or when a change is meant to move the numbers:
then regenerate the report too).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(run_dir: str) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from vpo.demo.results import PINNED_NUMBERS, pin_record

    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    if not metrics.get("checks"):
        raise SystemExit(f"{run_dir} is not a vpo demo --quick run (its metrics.json has no pipeline checks)")
    record = pin_record(metrics)
    (ROOT / PINNED_NUMBERS).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"pinned {record['count']} numbers ({record['digest'][:12]}) of {run_dir} in {PINNED_NUMBERS}, made on "
          f"{record['machine']['cpu']} ({record['machine']['cpu_capability']}, torch {record['machine']['torch']})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1]))

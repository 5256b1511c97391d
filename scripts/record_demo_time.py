"""Record a demo run's measured wall time in ``vpo.demo.config.MEASURED_RUNS``, the numbers that
``vpo demo --help`` and the README state (``measured_time``).

Usage::

    vpo demo --quick --out runs/demo-quick && python scripts/record_demo_time.py runs/demo-quick quick
    vpo demo && python scripts/record_demo_time.py runs/demo default

Reads the run's ``metrics.json`` (``run_wall``: every invocation's wall time and load average) and
rewrites that kind's line of ``MEASURED_RUNS``; then update the README sentence it prints.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "src" / "vpo" / "demo" / "config.py"


def main(run_dir: str, kind: str) -> int:
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    wall = metrics.get("run_wall")
    if not wall:
        raise SystemExit(f"{run_dir}/metrics.json has no run_wall (written by vpo demo since it records invocations)")
    first = wall["invocations"][0]
    entry = {"seconds": round(wall["seconds"]), "cpus": first["cpus"], "load": round(first["load_start"], 1),
             "workers": first["workers"]}
    if first.get("busy_start") is not None:  # recorded since the demo samples the CPU at its start
        entry["busy"] = round(first["busy_start"], 1)
    text = CONFIG.read_text()
    line = re.compile(rf'^    "{kind}": \{{.*\}},$', re.M)
    if not line.search(text):
        raise SystemExit(f"no {kind!r} line in MEASURED_RUNS of {CONFIG}")
    CONFIG.write_text(line.sub(f'    "{kind}": {json.dumps(entry).replace("null", "None")},', text, count=1))
    from importlib import reload

    import vpo.demo.config as config

    print(f"{kind}: {reload(config).measured_time(kind)}"
          + (f" ({len(wall['invocations'])} invocations: resumed)" if len(wall["invocations"]) > 1 else ""))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("default", "quick"):
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

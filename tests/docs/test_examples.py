"""The newcomer scripts in examples/ run end to end (CI runs them, as the README promises)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script", ["grpo_to_vpo_trl.py", "own_rewards_trl.py", "maze_loop.py"])
def test_example_runs(script, tmp_path):
    pytest.importorskip("trl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip(), "the example printed nothing"

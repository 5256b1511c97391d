"""The newcomer scripts in examples/ run end to end (CI runs them, as the README promises):
``maze_loop.py`` line for line at a small size in the default suite, at its own size with ``-m slow``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SMALL_MAZE_LOOP = [
    ("warmup_records(task, fmt, 10000, ", "warmup_records(task, fmt, 64, "),
    ('task.examples("rl", 20 * 4, seed=1)', 'task.examples("rl", 2 * 4, seed=1)'),
    ("max_steps=20, ", "max_steps=2, "),
    ("logging_steps=5, ", "logging_steps=1, "),
    ('task.examples("test", 20)', 'task.examples("test", 2)'),
]
"""What ``maze_loop.py`` does at a few seconds' size: 64 warm-up records, 2 RL steps, 2 held-out mazes
(the script itself: a 10,000-record warm-up, 20 steps and 20 mazes, minutes of CPU)."""


def _run(path: Path, cwd: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip(), "the example printed nothing"


@pytest.mark.parametrize("script", ["grpo_to_vpo_trl.py", "own_rewards_trl.py",
                                    pytest.param("maze_loop.py", marks=pytest.mark.slow)])
def test_example_runs(script, tmp_path):
    pytest.importorskip("trl")
    _run(EXAMPLES / script, tmp_path)


def test_maze_loop_runs_at_a_small_size(tmp_path):
    """Every line of ``maze_loop.py`` (task, model, warm-up, VPOTrainer, pools and metrics) at the
    sizes of ``SMALL_MAZE_LOOP``; each size must still be in the script, once."""
    pytest.importorskip("trl")
    source = (EXAMPLES / "maze_loop.py").read_text()
    for full, small in SMALL_MAZE_LOOP:
        assert source.count(full) == 1, f"maze_loop.py no longer holds {full!r} once: update SMALL_MAZE_LOOP"
        source = source.replace(full, small)
    script = tmp_path / "maze_loop_small.py"
    script.write_text(source)
    _run(script, tmp_path)

"""Maze task: walk from S to E within a step budget, collecting gold and diamonds, avoiding lava.

Usage::

    from vpo.tasks import get_task
    from vpo.tasks.maze import route_via_gold, simulate
    task = get_task("maze", size=9)                      # the paper's grid and mazes; 5 and 7 for CPU
    example = task.examples("train", 8)[0]               # JSON-serialisable dict, id maze9-paper-train-s42-0
    print(task.prompt(example, m=3))                     # asks for <route_1>..<route_3>
    task.score("<answer>RIGHT RIGHT DOWN</answer>", example)   # (4,) in [0, 1]
    simulate(example, route_via_gold(example)).vector   # oracle route -> (4,)

Reward vector (D = 4), in this order: ``completion, gold, diamond, avoid_lava``. All four are 0
unless the route steps on E. Then completion = 1, gold = gold tiles collected / gold tiles,
diamond likewise, avoid_lava = 1 - lava tiles stepped on / lava tiles (1 when the maze has no
lava). ``reward_mode="convex_bonus"`` (the authors' released generator) squares gold, diamond
and avoid_lava, multiplies them by 1.5 when the route visited the bonus tile B before E, and
clamps to 1; ``"linear"`` (the default, the paper's notes) leaves B without effect. The fixed
scalar (GRPO, evaluation) is the mean of the four components.

Multi-answer chains: the prompt's output-format sentence is replaced by a request for m
genuinely different routes in ``<route_1>..</route_1>`` ... tags (fallbacks: ``---``, several
``<answer>`` blocks, the whole text as route 1). Two routes of a chain are duplicates when
their parsed move lists are identical (``MazeTask.dedup_key``).

The package, one module per concern:

- ``generator``: ``MazeConfig`` and the per-size defaults, the two generator protocols ("paper":
  the authors' released generator call for call, default at size 9, so ``task.examples`` gives
  the paper's 1000 train / 100 test mazes; "vpo": this project's generator, default at every
  other size, unchanged so the CPU demo's mazes are too) and the split seeds.
- ``simulator``: the walk, the reward, oracle routes, rendering, and the validate-once cache.
- ``parse``: moves out of model text.
- ``schema``: tiles, objectives and the example validator.
- ``task``: ``MazeTask`` (prompts, scoring, data).

(The modules are not called ``generate`` / ``simulate`` so that they do not clash with the
functions of those names exported here.)

Shape glossary: M answers per chain (m), D objectives (4 here).
"""

from __future__ import annotations

from vpo.tasks.maze.generator import (
    PROTOCOLS,
    SIZE_DEFAULTS,
    SPLIT_SEEDS,
    SPLIT_SIZES,
    MazeConfig,
    attempt_seeds,
    config_for_size,
    default_protocol,
    generate,
    split_examples,
)
from vpo.tasks.maze.parse import MOVES, parse_moves
from vpo.tasks.maze.schema import (
    BONUS,
    DIAMOND,
    EXIT,
    GOLD,
    LAVA,
    OBJECTIVES,
    OPEN,
    REWARD_MODES,
    START,
    TILES,
    WALL,
    validate_example,
)
from vpo.tasks.maze.simulator import (
    Trajectory,
    _reward,  # noqa: F401 - scripts/maze_headroom.py reuses the task's own reward formula
    checked_grid,
    oracle_routes,
    random_exit_walk,
    render,
    route_via_diamond,
    route_via_gold,
    shortest_safe_route,
    simulate,
)
from vpo.tasks.maze.task import MazeTask

__all__ = [
    "BONUS",
    "DIAMOND",
    "EXIT",
    "GOLD",
    "LAVA",
    "MOVES",
    "OBJECTIVES",
    "OPEN",
    "PROTOCOLS",
    "REWARD_MODES",
    "SIZE_DEFAULTS",
    "SPLIT_SEEDS",
    "SPLIT_SIZES",
    "START",
    "TILES",
    "WALL",
    "MazeConfig",
    "MazeTask",
    "Trajectory",
    "attempt_seeds",
    "checked_grid",
    "config_for_size",
    "default_protocol",
    "generate",
    "oracle_routes",
    "parse_moves",
    "random_exit_walk",
    "render",
    "route_via_diamond",
    "route_via_gold",
    "shortest_safe_route",
    "simulate",
    "split_examples",
    "validate_example",
]

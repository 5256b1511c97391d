"""The maze task: prompts, scoring and data for ``get_task("maze", ...)``.

Usage::

    from vpo.tasks import get_task
    task = get_task("maze", size=9)                  # the paper's grid and mazes (protocol "paper")
    train = task.examples("train")                   # the paper's 1000 train mazes, ids maze9-paper-train-s42-<i>
    task.score("<answer>RIGHT DOWN</answer>", train[0])   # (4,) completion, gold, diamond, avoid_lava
    demo = get_task("maze", size=5)                  # CPU demo grid, protocol "vpo"

Examples are validated when loaded (``examples``, ``validate``) and, for dicts that did not come
from there, the first time scoring sees their content (``simulator.checked_grid``); scoring an
answer then costs a cache lookup, the parse and the walk.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import register_task
from vpo.tasks.base import Example, Task
from vpo.tasks.maze.generator import (
    PROTOCOLS,
    SPLIT_SEEDS,
    SPLIT_SIZES,
    config_for_size,
    default_protocol,
    generate,
    split_examples,
)
from vpo.tasks.maze.parse import _answer_region, _iter_moves
from vpo.tasks.maze.schema import OBJECTIVES, REWARD_MODES, _is_int, _validate
from vpo.tasks.maze.simulator import (
    Trajectory,
    checked_grid,
    oracle_routes,
    render,
    route_via_diamond,
    route_via_gold,
    shortest_safe_route,
    simulate,
)

__all__ = ["MazeTask"]


# ----------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------
_FORMAT_SENTENCE = "Answer with the moves only, separated by spaces, inside <answer>...</answer>, " \
                   "for example <answer>RIGHT DOWN DOWN</answer>."
_FORMAT_PATTERN = r"Answer with the moves only, separated by spaces, inside <answer>\.\.\.</answer>, " \
                  r"for example <answer>[A-Z ]*</answer>\."
_MULTI_TEMPLATE = ("Give {m} genuinely different routes from S to E, each within the step budget on its "
                   "own. Put route i inside <{tag}_i>...</{tag}_i>, from <{tag}_1>...</{tag}_1> to "
                   "<{tag}_{m}>...</{tag}_{m}>, with only the moves, separated by spaces, inside each "
                   "tag, for example <{tag}_1>RIGHT DOWN DOWN</{tag}_1>.")
_BONUS_RULE = {
    "linear": "- B is the bonus tile; in this maze it has no effect on the score.",
    "convex_bonus": "- Gold, diamond and lava scores are squared; visiting the bonus tile B before E "
                    "multiplies each of them by 1.5 (capped at 1).",
}


def _prompt(example: Mapping[str, Any]) -> str:
    size = example["size"]
    grid = "\n".join(" ".join(row) for row in example["grid"])
    n_gold, n_diamond, n_lava = len(example["gold"]), len(example["diamond"]), len(example["lava"])
    n_bonus = 0 if example.get("bonus") is None else 1
    return (
        f"Find a route through this {size}x{size} maze from S (start) to E (exit). "
        "Collect gold and diamonds and avoid lava.\n\n"
        f"{grid}\n\n"
        "Tiles: S start, E exit, G gold, D diamond, L lava, B bonus, # wall, . empty. "
        "Row 0 is the top row.\n"
        "Rules:\n"
        "- Each move is UP, DOWN, LEFT or RIGHT and takes one step.\n"
        "- A move into a wall (#) or off the grid leaves you where you are but still uses the step.\n"
        f"- A route may use at most {example['budget']} steps; moves after that are ignored.\n"
        "- The route ends as soon as you step on E; moves after that are ignored. "
        "A route that never reaches E scores zero on everything.\n"
        "- Scores (each 0 to 1): reaching E; the share of gold tiles collected; the share of "
        "diamond tiles collected; one minus the share of lava tiles stepped on. "
        "Each tile counts once.\n"
        f"{_BONUS_RULE[example['reward_mode']]}\n"
        f"This maze has {n_gold} gold, {n_diamond} diamond, {n_lava} lava and {n_bonus} bonus tiles.\n"
        f"{_FORMAT_SENTENCE}"
    )



# ----------------------------------------------------------------------------------------
# The task
# ----------------------------------------------------------------------------------------
@register_task("maze")
class MazeTask(Task):
    """Grid maze with a (completion, gold, diamond, avoid_lava) reward vector.

    Parameters: ``size`` (odd, >= 5; 9 is the paper's grid), ``reward_mode`` ("linear" |
    "convex_bonus", stamped on generated examples; scoring follows the example's own field),
    ``strict_moves`` (a non-move word in an answer zeroes it), ``protocol`` ("paper" | "vpo",
    the generator; default "paper" for size 9, "vpo" otherwise; see ``vpo.tasks.maze.generator``),
    and any ``MazeConfig`` field (``budget_slack=3``, ``lava=(1, 3)``, ...) to override the
    per-size defaults.
    """

    objectives = OBJECTIVES
    rewrite_rule = RewriteRule("maze", template=_MULTI_TEMPLATE, pattern=_FORMAT_PATTERN, tag="route")
    parse_fallbacks = True
    ability = "planning"

    def __init__(self, size: int = 9, reward_mode: str = "linear", strict_moves: bool = False,
                 protocol: str | None = None, **overrides: Any) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"maze: reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if protocol is not None and protocol not in PROTOCOLS:
            raise ValueError(f"maze: protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.config = config_for_size(size, **overrides)
        self.size = size
        self.reward_mode = reward_mode
        self.strict_moves = bool(strict_moves)
        self.protocol = default_protocol(size) if protocol is None else protocol

    def __repr__(self) -> str:
        return (f"MazeTask(size={self.size}, reward_mode={self.reward_mode!r}, "
                f"strict_moves={self.strict_moves}, protocol={self.protocol!r})")

    # ----- data ----------------------------------------------------------------------
    @staticmethod
    def check_example(example: Any, row: int | None = None) -> None:
        """Raise ValueError naming the field and row if ``example`` is malformed."""
        _validate(example, row)

    def validate(self, example: Any, row: int | None = None) -> Example:
        checked_grid(example, row, strict=True)  # and compiles it: scoring it validates nothing
        return dict(example)

    def generate(self, seed: int) -> tuple[Example | None, str]:
        """One maze from an attempt seed: ``(example, "ok")`` or ``(None, rejection reason)``."""
        return generate(seed, self.config, self.reward_mode, self.protocol)

    def example_id(self, split: str, seed: int, index: int) -> str:
        """Id of the ``index``-th accepted maze of a split: ``maze{size}-{split}-s{seed}-{index}``
        ("vpo"), ``maze{size}-paper-{split}-s{seed}-{index}`` ("paper"; the paper's sets are
        ``maze9-paper-train-s42-0`` .. ``-999`` and ``maze9-paper-test-s4242-0`` .. ``-99``)."""
        kind = "paper-" if self.protocol == "paper" else ""
        return f"maze{self.size}-{kind}{split}-s{seed}-{index}"

    def iter_examples(self, seed: int, *, split: str = "stream") -> Iterator[Example]:
        """Endless stream of the accepted mazes of ``seed`` (``generator.attempt_seeds``), with ids
        (``example_id``): ``itertools.islice(task.iter_examples(step), 8)``.

        Under "paper" the attempt seeds count up from ``seed``, so the stream of seed s + 1 is
        the stream of seed s without its first attempt: space stream seeds far apart (e.g.
        ``step * 10**6``).
        """
        for index, example in enumerate(split_examples(self.config, seed, reward_mode=self.reward_mode,
                                                       protocol=self.protocol)):
            example["id"] = self.example_id(split, seed, index)
            yield example

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[Example]:
        """Generated mazes of a split (train: seed 42, 1000 by default; test: seed 4242, 100;
        with protocol "paper" at size 9 these are the paper's sets), or the validated rows of a
        local ``source`` file (JSONL / JSON / parquet of examples).

        Other split names need an explicit ``seed``. ``n`` defaults to the paper's split size.
        """
        if n is not None and (not _is_int(n) or n < 0):
            raise ValueError(f"maze: n must be a non-negative integer, got {n!r}")
        if source is not None:
            from vpo.tasks.io import load_records

            rows = load_records(source, split=split)
            rows = rows if n is None else rows[:n]
            return [self.validate(row, i) for i, row in enumerate(rows)]
        if seed is None:
            if split not in SPLIT_SEEDS:
                raise ValueError(f"maze: split {split!r} has no default seed (known: {sorted(SPLIT_SEEDS)}); "
                                 "pass seed=")
            seed = SPLIT_SEEDS[split]
        count = SPLIT_SIZES.get(split, 100) if n is None else int(n)
        stream = self.iter_examples(seed, split=split)
        out = [next(stream) for _ in range(count)]
        for example in out:
            checked_grid(example)  # validated once, here; scoring then finds the compiled grid
        return out

    # ----- prompts -------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        checked_grid(example)  # ValueError naming the field on malformed data
        return _prompt(example)

    # ----- scoring -------------------------------------------------------------------
    def _run_text(self, text: Any, example: Example) -> Trajectory:
        grid = checked_grid(example)  # validated on first sight only; malformed data raises ValueError
        if not isinstance(text, str):
            return grid.run(())
        moves = _iter_moves(_answer_region(text), self.strict_moves)
        return grid.run(() if moves is None else moves)

    def simulate_text(self, text: str, example: Example) -> Trajectory:
        """Trajectory of an answer text under this task's parsing rules."""
        return self._run_text(text, example)

    def score(self, text: str, example: Example) -> np.ndarray:
        """(4,) reward of one answer text (completion, gold, diamond, avoid_lava); never raises
        on model text (garbage -> zeros)."""
        return self._run_text(text, example).vector

    def dedup_key(self, answer: str, vector: np.ndarray, example: Example) -> Hashable:
        """The parsed move list (docs/algorithm.md §3): routes that differ only after the exit, or in
        moves beyond the budget, are different routes."""
        moves = _iter_moves(_answer_region(answer), self.strict_moves) if isinstance(answer, str) else None
        return () if moves is None else tuple(moves)

    # ----- oracles -------------------------------------------------------------------
    def oracle_answers(self, example: Example) -> list[str]:
        """The distinct oracle routes (shortest safe, via the gold, via the diamonds) as answers."""
        routes = dict.fromkeys(" ".join(route) for route in oracle_routes(example).values())
        return [f"<answer>{route}</answer>" for route in routes]

    shortest_safe_route = staticmethod(shortest_safe_route)
    route_via_gold = staticmethod(route_via_gold)
    route_via_diamond = staticmethod(route_via_diamond)
    oracle_routes = staticmethod(oracle_routes)
    simulate = staticmethod(simulate)
    render = staticmethod(render)

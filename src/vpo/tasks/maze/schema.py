"""The maze example schema: tiles, objectives, reward modes, and the example validator.

Usage::

    from vpo.tasks.maze.schema import validate_example
    validate_example(example, row=3)   # ValueError "maze: row 3: field 'budget' ..." if malformed

An example is a JSON-serialisable dict: ``size`` (int), ``grid`` (``size`` strings of
``size`` tiles out of ``# . S E G D L B``), ``start`` / ``exit`` / ``bonus`` ([row, col]; bonus
may be absent or None when the grid has no ``B``), ``budget`` (steps, > 0), ``gold`` /
``diamond`` / ``lava`` (lists of [row, col], exactly the grid's tiles of that kind),
``reward_mode`` (``"linear"`` | ``"convex_bonus"``). Generated examples add bookkeeping
(``seed``, ``id``, ``via_gold``, ...; see ``generate``), which the validator does not check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["OBJECTIVES", "REWARD_MODES", "TILES", "validate_example"]

WALL, OPEN, START, EXIT, GOLD, DIAMOND, LAVA, BONUS = "#", ".", "S", "E", "G", "D", "L", "B"
TILES = frozenset("#.SEGDLB")
OBJECTIVES = ("completion", "gold", "diamond", "avoid_lava")
"""The D = 4 objectives, in reward-vector order."""
REWARD_MODES = ("linear", "convex_bonus")


def _err(row: int | None, field: str, why: str) -> ValueError:
    return ValueError(f"maze: row {row}: field {field!r} {why}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_pos(example: Mapping[str, Any], field: str, size: int, row: int | None) -> tuple[int, int]:
    value = example.get(field)
    if not isinstance(value, list | tuple) or len(value) != 2 or not all(_is_int(v) for v in value):
        raise _err(row, field, f"must be a [row, col] pair of integers, got {value!r}")
    r, c = int(value[0]), int(value[1])
    if not (0 <= r < size and 0 <= c < size):
        raise _err(row, field, f"position {[r, c]} lies outside the {size}x{size} grid")
    return r, c


def _validate(example: Any, row: int | None) -> None:
    if not isinstance(example, Mapping):
        raise ValueError(f"maze: row {row}: example must be a mapping, got {type(example).__name__}")
    for field in ("size", "grid", "start", "exit", "budget", "gold", "diamond", "lava", "reward_mode"):
        if field not in example:
            raise _err(row, field, "is missing")
    size = example["size"]
    if not _is_int(size) or size < 2:
        raise _err(row, "size", f"must be an integer >= 2, got {size!r}")
    size = int(size)
    grid = example["grid"]
    if not isinstance(grid, list | tuple) or len(grid) != size:
        raise _err(row, "grid", f"must be a list of {size} row strings")
    for i, line in enumerate(grid):
        if not isinstance(line, str) or len(line) != size:
            raise _err(row, "grid", f"row {i} must be a string of {size} tiles, got {line!r}")
        bad = set(line) - TILES
        if bad:
            raise _err(row, "grid",
                       f"row {i} has unknown tile(s) {sorted(bad)}; tiles are {''.join(sorted(TILES))}")
    flat = "".join(grid)
    for field, tile in (("start", START), ("exit", EXIT)):
        r, c = _check_pos(example, field, size, row)
        if flat.count(tile) != 1:
            raise _err(row, "grid", f"must hold exactly one {tile!r}, found {flat.count(tile)}")
        if grid[r][c] != tile:
            raise _err(row, field, f"{[r, c]} is {grid[r][c]!r} in the grid, expected {tile!r}")
    budget = example["budget"]
    if not _is_int(budget) or budget < 1:
        raise _err(row, "budget", f"must be a positive integer, got {budget!r}")
    for field, tile in (("gold", GOLD), ("diamond", DIAMOND), ("lava", LAVA)):
        value = example[field]
        if not isinstance(value, list | tuple):
            raise _err(row, field, f"must be a list of [row, col] positions, got {type(value).__name__}")
        listed = set()
        for j, pos in enumerate(value):
            if not isinstance(pos, list | tuple) or len(pos) != 2 or not all(_is_int(v) for v in pos):
                raise _err(row, field, f"entry {j} must be a [row, col] pair of integers, got {pos!r}")
            listed.add((int(pos[0]), int(pos[1])))
        in_grid = {divmod(i, size) for i, ch in enumerate(flat) if ch == tile}
        if listed != in_grid or len(listed) != len(value):
            raise _err(row, field,
                       f"lists {sorted(listed)} but the grid's {tile!r} tiles are {sorted(in_grid)}")
        if tile != LAVA and not in_grid:
            raise _err(row, field, f"needs at least one {tile!r} tile")
    bonus = example.get("bonus")
    n_bonus = flat.count(BONUS)
    if bonus is None:
        if n_bonus:
            raise _err(row, "bonus", f"is missing but the grid has {n_bonus} 'B' tile(s)")
    else:
        r, c = _check_pos(example, "bonus", size, row)
        if n_bonus != 1 or grid[r][c] != BONUS:
            raise _err(row, "bonus", f"{[r, c]} must be the grid's only 'B' tile")
    if example["reward_mode"] not in REWARD_MODES:
        raise _err(row, "reward_mode", f"must be one of {REWARD_MODES}, got {example['reward_mode']!r}")


def validate_example(example: Any, row: int | None = None) -> None:
    """Raise ValueError naming the field (and ``row``) if ``example`` is not a valid maze."""
    _validate(example, row)

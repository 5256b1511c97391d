"""Simulating routes in a maze: grid geometry, trajectories, rewards, oracle routes, rendering.

Usage::

    from vpo.tasks.maze import simulate, oracle_routes, render
    traj = simulate(example, ["DOWN", "RIGHT"])     # or answer text; Trajectory with .vector (4,)
    routes = oracle_routes(example)                 # {"safe": [...], "gold": [...], "diamond": [...]}
    print(render(example, routes["gold"]))          # the grid with the route drawn as *

Rules (docs/algorithm.md §4): moves beyond ``budget`` are dropped; a move into a wall or off the grid
leaves the agent in place but spends the step; lava is walkable and each lava tile counts once;
each item counts once; the route ENDS on the step that enters E (later moves are ignored, an
item on a later step does not count). Reward (D = 4): all zero unless E is reached; then
completion 1, gold / diamond = share collected, avoid_lava = 1 - share of lava stepped on (1
without lava); ``convex_bonus`` squares the last three, x1.5 if B was visited, clamped to 1.

Validation happens once per example: ``checked_grid`` validates an example the first time its
content is seen and keeps the compiled ``_Grid`` in a bounded cache keyed by that content, so
scoring many answers to one example (or to an equal copy decoded again from JSON, as the verl
reward function does per rollout) validates it once. Before, every answer re-validated its
example (53% of the scoring time under cProfile) and rebuilt its grid; with the cache and the
faster parser, the benchmark's maze mix scores about 60k answers per CPU-second instead of 17k.

Cells are flat indices ``r * size + c`` inside this module; positions in examples are
[row, col] lists.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from vpo.tasks.maze.parse import MOVES, _as_moves
from vpo.tasks.maze.schema import BONUS, DIAMOND, GOLD, LAVA, OPEN, REWARD_MODES, WALL, _validate

__all__ = ["Trajectory", "checked_grid", "oracle_routes", "random_exit_walk", "render", "route_via_diamond",
           "route_via_gold", "shortest_safe_route", "simulate"]

_INF = 1 << 30


# ----------------------------------------------------------------------------------------
# Grid geometry on flat indices (cell = r * size + c)
# ----------------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def _neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    """In-grid neighbours of every cell, in UP, DOWN, LEFT, RIGHT order."""
    out = []
    for r in range(size):
        for c in range(size):
            out.append(tuple(nr * size + nc for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                             if 0 <= nr < size and 0 <= nc < size))
    return tuple(out)


def _bfs(passable: Sequence[bool], size: int, source: int, blocked: Iterable[int] = ()) -> list[int]:
    """Shortest step counts from ``source`` to every cell (``_INF`` if unreachable).

    ``blocked`` cells are never entered (the source itself always counts as reached).
    """
    nbrs = _neighbours(size)
    dist = [_INF] * (size * size)
    for cell in blocked:
        dist[cell] = -1  # sentinel: never entered
    dist[source] = 0
    queue = [source]
    for cell in queue:  # the list grows while iterating: a FIFO queue
        d = dist[cell] + 1
        for nxt in nbrs[cell]:
            if dist[nxt] == _INF and passable[nxt]:
                dist[nxt] = d
                queue.append(nxt)
    return [_INF if d < 0 else d for d in dist]


def _bfs_path(passable: Sequence[bool], size: int, source: int, target: int,
              blocked: Iterable[int] = ()) -> list[int] | None:
    """Cells of a shortest path source -> target (both included), or None.

    Ties are broken deterministically by the UP, DOWN, LEFT, RIGHT neighbour order.
    """
    nbrs = _neighbours(size)
    parent = [-2] * (size * size)  # -2 unvisited, -3 blocked
    for cell in blocked:
        parent[cell] = -3
    parent[source] = -1
    queue = [source]
    for cell in queue:
        if cell == target:
            break
        for nxt in nbrs[cell]:
            if parent[nxt] == -2 and passable[nxt]:
                parent[nxt] = cell
                queue.append(nxt)
    if parent[target] < -1 or (target != source and parent[target] == -1):
        return None
    path = [target]
    while path[-1] != source:
        path.append(parent[path[-1]])
    path.reverse()
    return path


def _path_moves(path: Sequence[int], size: int) -> list[str]:
    moves = []
    for a, b in zip(path, path[1:]):
        diff = b - a
        moves.append("UP" if diff == -size else "DOWN" if diff == size else "LEFT" if diff == -1 else "RIGHT")
    return moves


# ----------------------------------------------------------------------------------------
# Simulation and scoring
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trajectory:
    """What a route did in a maze (``simulate``)."""

    moves: tuple[str, ...]
    """The moves actually executed: cut at the budget and after the step onto E."""
    cells: tuple[tuple[int, int], ...]
    """Positions (row, col): the start, then one per executed move (a blocked move repeats)."""
    reached_exit: bool
    gold: int
    """Distinct gold tiles stepped on before E."""
    diamond: int
    lava: int
    """Distinct lava tiles stepped on before E."""
    bonus: bool
    """Whether the bonus tile B was visited before E."""
    vector: np.ndarray
    """(4,) reward: completion, gold, diamond, avoid_lava."""


def _reward(reached: bool, gold: int, diamond: int, lava: int, bonus: bool,
            totals: tuple[int, int, int], mode: str) -> np.ndarray:
    if not reached:
        return np.zeros(4)
    n_gold, n_diamond, n_lava = totals
    parts = [gold / n_gold if n_gold else 1.0, diamond / n_diamond if n_diamond else 1.0,
             1.0 - lava / n_lava if n_lava else 1.0]
    if mode == "convex_bonus":
        factor = 1.5 if bonus else 1.0
        parts = [min(1.0, factor * p * p) for p in parts]
    return np.array([1.0, *parts], dtype=np.float64)


class _Grid:
    """Flat-index view of a validated example, for simulation and oracle routes."""

    __slots__ = ("size", "chars", "passable", "start", "exit", "budget", "gold", "diamond", "lava",
                 "mode", "totals")

    def __init__(self, example: Mapping[str, Any]) -> None:
        self.size = size = int(example["size"])
        self.chars = "".join(example["grid"])
        if len(self.chars) != size * size:
            raise ValueError("grid does not match size")
        self.passable = [ch != WALL for ch in self.chars]
        self.start = int(example["start"][0]) * size + int(example["start"][1])
        self.exit = int(example["exit"][0]) * size + int(example["exit"][1])
        self.budget = int(example["budget"])
        self.gold = [i for i, ch in enumerate(self.chars) if ch == GOLD]
        self.diamond = [i for i, ch in enumerate(self.chars) if ch == DIAMOND]
        self.lava = [i for i, ch in enumerate(self.chars) if ch == LAVA]
        self.mode = example["reward_mode"]
        if self.mode not in REWARD_MODES:
            raise ValueError("unknown reward_mode")
        self.totals = (len(self.gold), len(self.diamond), len(self.lava))

    def run(self, moves: Iterable[str]) -> Trajectory:
        size, chars, passable = self.size, self.chars, self.passable
        cell = self.start
        r, c = divmod(cell, size)
        executed: list[str] = []
        cells = [(r, c)]
        seen: set[int] = set()
        reached = False
        for move in moves:
            if len(executed) >= self.budget:
                break
            dr, dc = MOVES[move]
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and passable[nr * size + nc]:
                r, c = nr, nc
                cell = nr * size + nc
            executed.append(move)
            cells.append((r, c))
            if cell == self.exit:
                reached = True
                break
            seen.add(cell)
        gold = sum(chars[x] == GOLD for x in seen)
        diamond = sum(chars[x] == DIAMOND for x in seen)
        lava = sum(chars[x] == LAVA for x in seen)
        bonus = any(chars[x] == BONUS for x in seen)
        vector = _reward(reached, gold, diamond, lava, bonus, self.totals, self.mode)
        return Trajectory(tuple(executed), tuple(cells), reached, gold, diamond, lava, bonus, vector)

    # ----- oracle routes ---------------------------------------------------------------
    def _leg(self, source: int, target: int, avoid_lava: bool) -> list[int] | None:
        blocked = set(self.lava) if avoid_lava else set()
        if target != self.exit:
            blocked.add(self.exit)  # stepping on E before the end would stop the route
        blocked.discard(target)
        blocked.discard(source)
        return _bfs_path(self.passable, self.size, source, target, blocked)

    def safe_route(self) -> list[str] | None:
        path = self._leg(self.start, self.exit, avoid_lava=True)
        if path is None or len(path) - 1 > self.budget:
            return None
        return _path_moves(path, self.size)

    def collect_route(self, items: Sequence[int]) -> tuple[list[str] | None, int]:
        """Greedy route collecting ``items`` then reaching E within the budget: (moves, n items).

        Pass 1 never enters lava. If it collects nothing, pass 2 allows lava on a leg only when
        the lava-free leg would not leave enough budget to finish. Each step goes to the
        nearest remaining item whose detour still lets the route reach E in budget.
        """
        best: tuple[list[str] | None, int] = (None, 0)
        for strict_safe in (True, False):
            moves, got = self._greedy(items, strict_safe)
            if moves is not None and (got > best[1] or best[0] is None):
                best = (moves, got)
            if got:
                break
        return best

    def _greedy(self, items: Sequence[int], strict_safe: bool) -> tuple[list[str] | None, int]:
        size, budget = self.size, self.budget
        lava = self.lava
        to_exit_safe = _bfs(self.passable, size, self.exit, blocked=lava)
        to_exit_any = to_exit_safe if strict_safe else _bfs(self.passable, size, self.exit)
        cur, steps, moves = self.start, 0, []
        remaining = set(items)
        collected = 0
        while remaining:
            no_exit = [self.exit]
            d_safe = _bfs(self.passable, size, cur, blocked=[*lava, *no_exit])
            d_any = d_safe if strict_safe else _bfs(self.passable, size, cur, blocked=no_exit)
            options = []
            for item in remaining:
                if steps + d_safe[item] + to_exit_any[item] <= budget:
                    options.append((d_safe[item], item, True))
                elif not strict_safe and steps + d_any[item] + to_exit_any[item] <= budget:
                    options.append((d_any[item], item, False))
            if not options:
                break
            _, item, leg_safe = min(options)
            path = self._leg(cur, item, avoid_lava=leg_safe)
            if path is None:  # cannot happen: the distance above was finite
                break
            for cell in path[1:]:
                if cell in remaining:
                    remaining.discard(cell)
                    collected += 1
            moves += _path_moves(path, size)
            steps += len(path) - 1
            cur = path[-1]
        final = None
        if steps + to_exit_safe[cur] <= budget:
            final = self._leg(cur, self.exit, avoid_lava=True)
        if final is None and not strict_safe and steps + to_exit_any[cur] <= budget:
            final = self._leg(cur, self.exit, avoid_lava=False)
        if final is None:
            return None, 0
        return moves + _path_moves(final, size), collected


# ----------------------------------------------------------------------------------------
# Validate once: compiled grids cached by example content
# ----------------------------------------------------------------------------------------
_CACHE_SIZE = 2048
_GRIDS: dict[Hashable, _Grid] = {}
_GRIDS_LOCK = threading.Lock()


def _content_key(example: Mapping[str, Any]) -> Hashable:
    """Every field the validator reads, as a hashable tuple (raises on malformed data).

    Equal keys mean equal validation outcome and equal scores, so a hit needs no validation.
    (Numbers compare by value: an example whose budget is ``14.0`` where a validated one has
    ``14`` shares its entry and scores identically.)
    """
    bonus = example.get("bonus")
    return (example["size"], tuple(example["grid"]), tuple(example["start"]), tuple(example["exit"]),
            example["budget"], example["reward_mode"], tuple(map(tuple, example["gold"])),
            tuple(map(tuple, example["diamond"])), tuple(map(tuple, example["lava"])),
            None if bonus is None else tuple(bonus))


def checked_grid(example: Any, row: int | None = None, *, strict: bool = False) -> _Grid:
    """The compiled grid of ``example``, validating it the first time its content is seen.

    ``strict`` validates even when the content is cached (the cache compares numbers by value,
    so ``budget=True`` would match a validated ``budget=1``); ``MazeTask.validate`` uses it.
    Raises ValueError naming the field (and ``row``) when the example is malformed (never cached).
    """
    try:
        key = _content_key(example)
        grid = _GRIDS.get(key)
    except Exception:  # noqa: BLE001 - malformed beyond hashing: the validator names the field
        key, grid = None, None
    if grid is not None and not strict:
        return grid
    _validate(example, row)
    if grid is not None:
        return grid
    grid = _Grid(example)
    if key is not None:
        with _GRIDS_LOCK:
            if len(_GRIDS) >= _CACHE_SIZE:
                del _GRIDS[next(iter(_GRIDS))]  # oldest first: a batch scores its examples in turn
            _GRIDS[key] = grid
    return grid


# ----------------------------------------------------------------------------------------
# Public helpers on examples
# ----------------------------------------------------------------------------------------
def simulate(example: Mapping[str, Any], moves: str | Iterable[str]) -> Trajectory:
    """Run ``moves`` (a list of UP/DOWN/LEFT/RIGHT or U/D/L/R, or answer text) in ``example``.

    Returns the ``Trajectory`` with its (4,) reward ``vector``. Raises ValueError on a malformed
    example or an unknown move in a list (text is parsed leniently, like ``score``).
    """
    return checked_grid(example).run(_as_moves(moves))


def render(example: Mapping[str, Any], moves: str | Iterable[str] | None = None) -> str:
    """The grid as rows of space-separated tiles (as in the prompt).

    With ``moves``, the open cells (``.``) the route visits are drawn as ``*``.
    """
    checked_grid(example)
    rows = [list(row) for row in example["grid"]]
    if moves is not None:
        for r, c in simulate(example, moves).cells:
            if rows[r][c] == OPEN:
                rows[r][c] = "*"
    return "\n".join(" ".join(row) for row in rows)


def shortest_safe_route(example: Mapping[str, Any]) -> list[str]:
    """A shortest lava-free route S -> E (ValueError if none fits the budget)."""
    moves = checked_grid(example).safe_route()
    if moves is None:
        raise ValueError("maze: no lava-free route from S to E fits the budget")
    return moves


def _via(example: Mapping[str, Any], kind: str) -> list[str]:
    grid = checked_grid(example)
    moves, _ = grid.collect_route(grid.gold if kind == "gold" else grid.diamond)
    if moves is None:
        raise ValueError(f"maze: no route via the {kind} tiles reaches E within the budget")
    return moves


def route_via_gold(example: Mapping[str, Any]) -> list[str]:
    """Greedy route collecting gold tiles (nearest first, while the budget still lets it reach E),
    lava-free when that collects any gold, then to E. Always fits the budget."""
    return _via(example, "gold")


def route_via_diamond(example: Mapping[str, Any]) -> list[str]:
    """Like ``route_via_gold`` for the diamond tiles."""
    return _via(example, "diamond")


def oracle_routes(example: Mapping[str, Any]) -> dict[str, list[str]]:
    """The three oracle routes: ``{"safe": ..., "gold": ..., "diamond": ...}``."""
    return {"safe": shortest_safe_route(example), "gold": route_via_gold(example),
            "diamond": route_via_diamond(example)}


def random_exit_walk(example: Mapping[str, Any], rng: Any) -> list[str]:
    """A random walk from S that reaches E within the budget, blind to items and lava.

    Each move is drawn uniformly (with ``rng.choice``, e.g. a ``random.Random``) among the moves
    into an open cell from which E is still reachable in the steps left, so the walk never hits a
    wall, may revisit cells and walk on lava, and ends on the step that enters E. It is what a
    policy knows that has learned the format and the walls but was never shown a good route (the
    demo's default warm-up data).
    """
    grid = checked_grid(example)
    size, exit_ = grid.size, grid.exit
    to_exit = _bfs(grid.passable, size, exit_)
    if to_exit[grid.start] > grid.budget:
        raise ValueError("maze: E is not reachable from S within the budget")
    nbrs = _neighbours(size)
    cell, left, path = grid.start, grid.budget, [grid.start]
    while cell != exit_:
        left -= 1
        cell = rng.choice([n for n in nbrs[cell] if grid.passable[n] and to_exit[n] <= left])
        path.append(cell)
    return _path_moves(path, size)


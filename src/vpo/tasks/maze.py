"""Maze task: walk from S to E within a step budget, collecting gold and diamonds, avoiding lava.

Usage::

    from vpo.tasks import get_task
    from vpo.tasks.maze import route_via_gold, simulate
    task = get_task("maze", size=5)                      # 9 = the paper's grid; 5 and 7 for CPU
    example = task.examples("train", 8)[0]               # JSON-serialisable dict
    print(task.prompt(example, m=3))                     # asks for <route_1>..<route_3>
    task.score("<answer>RIGHT RIGHT DOWN</answer>", example)   # (4,) in [0, 1]
    simulate(example, route_via_gold(example)).vector   # oracle route -> (4,)

Reward vector (D = 4), in this order: ``completion, gold, diamond, avoid_lava``.
All four are 0 unless the route steps on E. Then completion = 1, gold = gold tiles collected /
gold tiles, diamond likewise, avoid_lava = 1 - lava tiles stepped on / lava tiles (1 when the
maze has no lava). ``reward_mode="convex_bonus"`` (the authors' released generator) squares
gold, diamond and avoid_lava, multiplies them by 1.5 when the route visited the bonus tile B
before E, and clamps to 1; ``"linear"`` (the default, the paper's notes) leaves B without
effect. The fixed scalar (GRPO, evaluation) is the mean of the four components.

Simulation (SPEC section 4): moves beyond ``budget`` are dropped; a move into a wall or off the
grid leaves the agent in place but spends the step; lava is walkable and each lava tile counts
once; each item counts once; the route ENDS on the step that enters E (later moves are ignored,
an item on a later step does not count).

Answer text (``parse_moves``): if an ``<answer>`` block is present (case-insensitive; an
unclosed one runs to the end of the text) only its content is read, else the whole text. The
text is cut into maximal runs of ASCII letters (any other character separates). A run that is
``UP``/``DOWN``/``LEFT``/``RIGHT`` (any case) is one move; a run made only of the letters
``U D L R`` (any case) is one move per letter, so ``"RRDDL"`` and ``"r r d d l"`` both work;
every other run is a non-move token. Non-move tokens are ignored by default (as in the authors'
release, which reads the four words wherever they stand); with ``strict_moves=True`` a single
non-move token makes the whole answer unparseable (zero vector). Parsing is one linear pass.

Multi-answer chains: the prompt's output-format sentence is replaced by a request for m
genuinely different routes in ``<route_1>..</route_1>`` ... tags (fallbacks: ``---``, several
``<answer>`` blocks, the whole text as route 1). Two routes of a chain are duplicates when
the moves they actually execute (after the cut at E and at the budget) are identical; the
SPEC's "identical move lists", made robust against padding a route with moves after E.

Generator (``generate``, per-size parameters in ``SIZE_DEFAULTS``; SPEC section 4):

1. Prim's algorithm on a size x size grid of walls (cell variant: a frontier wall cell opens
   when exactly one of its 4 neighbours is open), then ``openings`` extra wall cells that touch
   >= 2 open cells are opened (cycles).
2. S and E on opposite corners (random corner for S, E diagonally opposite); the two other
   corners become the gold corner and the diamond corner at random; the centre is the bonus
   tile B. Corners and centre are forced open.
3. ``via_gold = BFS(S, gold corner) + BFS(gold corner, E)``, ``via_diamond`` likewise;
   ``budget = max(via_gold, via_diamond) + budget_slack``.
4. Conflict: reject when S -> gold corner -> diamond corner -> E fits the budget, in EITHER
   order. The two orders cost ``d(S,G) + d(G,D) + d(D,E)`` and ``d(S,D) + d(D,G) + d(G,E)``;
   neither bounds the other, so checking one order only (the authors' release checks gold
   first) lets mazes through where a route reaching both corners fits.
5. Items: ``items`` gold tiles among the open cells within Manhattan ``zone_radius`` of the gold
   corner (the corner included), diamonds likewise; ``lava`` tiles on open interior cells (rows
   and columns ``lava_margin .. size-1-lava_margin``, not B). Reject if a zone has fewer than
   ``min_zone_open`` open cells or the interior fewer than ``lava[0]``. The table guarantees
   ``2 * zone_radius < size - 1`` (zones never touch another corner or B) and
   ``zone_radius < 2 * lava_margin`` (lava never lies in a zone).
6. Reject if no lava-free S -> E route fits the budget, or if the oracle via-gold route
   (``route_via_gold``) collects no gold or the via-diamond route no diamond (so both
   objectives are reachable; this rejects well under 1% of the draws).
7. Optional (``strict_conflict=True``, off by default): also reject when some route could
   collect a gold tile and a diamond tile within the budget. The corner check of step 4
   leaves that possible for roughly 50% (9x9), 70% (5x5) and 85% (7x7) of the default mazes:
   such routes score e.g. (1, 1/3, 1/3, 1), a compromise rather than a clean trade-off.

Per-size defaults (5 follows the CPU prototype, 9 the paper, 7 interpolates; other odd sizes
>= 11 scale the 9x9 counts by area)::

    size  openings  zone_radius  items  min_zone_open  lava  lava_margin  budget_slack  budgets
       5    (3, 5)            1  (2,3)              2  (1,2)          1            2    10-18
       7   (8, 13)            2  (2,4)              3  (2,3)          2            4    16-28
       9  (18, 28)            2  (3,5)              3  (3,5)          2            7    23-33

(``strict_conflict`` defaults to False everywhere; "budgets" is the range seen over 1000
train mazes.) Generation takes about 0.2 / 0.3 / 0.65 ms per accepted maze at 5 / 7 / 9 on
one CPU core, rejections included, so fresh mazes can be drawn for every batch.

Determinism: only ``random.Random.random()`` is used (its stream is the one the Python docs
guarantee across versions); integers, shuffles and samples are derived from it here. A split
draws per-attempt seeds from ``random.Random(seed)``; rejected attempts simply continue the
stream, so ``examples("train", 10)`` is a prefix of ``examples("train", 1000)`` and every
example records the attempt ``seed`` that rebuilds it with ``generate(seed, config)``.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import register_task
from vpo.tasks.base import Example, Task

__all__ = [
    "MazeConfig",
    "MazeTask",
    "SIZE_DEFAULTS",
    "Trajectory",
    "config_for_size",
    "generate",
    "oracle_routes",
    "parse_moves",
    "render",
    "route_via_diamond",
    "route_via_gold",
    "shortest_safe_route",
    "simulate",
]

WALL, OPEN, START, EXIT, GOLD, DIAMOND, LAVA, BONUS = "#", ".", "S", "E", "G", "D", "L", "B"
TILES = frozenset("#.SEGDLB")
MOVES: dict[str, tuple[int, int]] = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
_LETTERS = {"U": "UP", "D": "DOWN", "L": "LEFT", "R": "RIGHT"}
OBJECTIVES = ("completion", "gold", "diamond", "avoid_lava")
REWARD_MODES = ("linear", "convex_bonus")
SPLIT_SEEDS = {"train": 42, "test": 4242}
SPLIT_SIZES = {"train": 1000, "test": 100}
_INF = 1 << 30


# ----------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MazeConfig:
    """Generator parameters of one grid size (see the module docstring's table)."""

    size: int
    """Grid side, odd and >= 5."""
    openings: tuple[int, int]
    """Inclusive range of extra wall cells opened after Prim's algorithm."""
    zone_radius: int
    """Manhattan radius of the gold and diamond zones around their corners."""
    items: tuple[int, int]
    """Inclusive range of gold tiles (and, drawn separately, of diamond tiles)."""
    min_zone_open: int
    """Reject a maze whose gold or diamond zone has fewer open cells."""
    lava: tuple[int, int]
    """Inclusive range of lava tiles."""
    lava_margin: int
    """Lava lies on rows and columns lava_margin .. size-1-lava_margin."""
    budget_slack: int
    """budget = max(via_gold, via_diamond) + budget_slack."""
    strict_conflict: bool = False
    """Also reject a maze where some route could collect a gold tile AND a diamond tile within
    the budget (the SPEC's corner check alone leaves that possible in about half the mazes)."""

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"MazeConfig: {field}={getattr(self, field)!r} {why}")

        if not isinstance(self.size, int) or self.size < 5 or self.size % 2 == 0:
            raise bad("size", "must be an odd integer >= 5")
        for field in ("openings", "items", "lava"):
            lo_hi = getattr(self, field)
            if (not isinstance(lo_hi, tuple) or len(lo_hi) != 2
                    or not all(isinstance(v, int) for v in lo_hi) or not 0 <= lo_hi[0] <= lo_hi[1]):
                raise bad(field, "must be a (lo, hi) pair of integers with 0 <= lo <= hi")
        if self.items[0] < 1:
            raise bad("items", "must place at least one item per zone")
        if (not isinstance(self.zone_radius, int) or self.zone_radius < 0
                or 2 * self.zone_radius >= self.size - 1):
            raise bad("zone_radius", f"must satisfy 0 <= 2 * zone_radius < size - 1 = {self.size - 1}")
        if not isinstance(self.lava_margin, int) or not 1 <= self.lava_margin <= self.size // 2:
            raise bad("lava_margin", "must be in 1 .. size // 2")
        if self.zone_radius >= 2 * self.lava_margin:
            raise bad("zone_radius",
                      f"must be < 2 * lava_margin = {2 * self.lava_margin} (lava outside the zones)")
        if not isinstance(self.min_zone_open, int) or self.min_zone_open < self.items[0]:
            raise bad("min_zone_open", f"must be an integer >= items[0] = {self.items[0]}")
        if not isinstance(self.budget_slack, int) or self.budget_slack < 0:
            raise bad("budget_slack", "must be a non-negative integer")
        if not isinstance(self.strict_conflict, bool):
            raise bad("strict_conflict", "must be a bool")


SIZE_DEFAULTS: dict[int, MazeConfig] = {
    5: MazeConfig(5, openings=(3, 5), zone_radius=1, items=(2, 3), min_zone_open=2,
                  lava=(1, 2), lava_margin=1, budget_slack=2),
    7: MazeConfig(7, openings=(8, 13), zone_radius=2, items=(2, 4), min_zone_open=3,
                  lava=(2, 3), lava_margin=2, budget_slack=4),
    9: MazeConfig(9, openings=(18, 28), zone_radius=2, items=(3, 5), min_zone_open=3,
                  lava=(3, 5), lava_margin=2, budget_slack=7),
}
"""Generator defaults per grid size (9 = the paper; 5 = the CPU prototype; 7 in between)."""


def config_for_size(size: int, **overrides: Any) -> MazeConfig:
    """The default ``MazeConfig`` of ``size`` with ``overrides`` (field=value) applied.

    Sizes without a table entry (odd, >= 11) scale the 9x9 openings and lava counts by area.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 5 or size % 2 == 0:
        raise ValueError(f"maze: size must be an odd integer >= 5, got {size!r}")
    base = SIZE_DEFAULTS.get(size)
    if base is None:
        area = size * size / 81.0
        base = dataclasses.replace(
            SIZE_DEFAULTS[9], size=size,
            openings=(round(18 * area), round(28 * area)), lava=(round(3 * area), round(5 * area)))
    fields = {f.name for f in dataclasses.fields(MazeConfig)} - {"size"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"maze: unknown parameter(s) {unknown}; known: size, reward_mode, strict_moves, "
                         f"{', '.join(sorted(fields))}")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return dataclasses.replace(base, **fixed)


# ----------------------------------------------------------------------------------------
# Deterministic randomness from random.Random.random() only
# ----------------------------------------------------------------------------------------
def _below(rng: random.Random, n: int) -> int:
    """Uniform integer in [0, n) (n >= 1) from one ``random()`` draw."""
    return min(n - 1, int(rng.random() * n))


def _randint(rng: random.Random, lo: int, hi: int) -> int:
    return lo + _below(rng, hi - lo + 1)


def _sample(rng: random.Random, items: Sequence[int], k: int) -> list[int]:
    """k distinct elements of ``items`` in random order (partial Fisher-Yates)."""
    pool = list(items)
    for i in range(k):
        j = i + _below(rng, len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


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
# Generator
# ----------------------------------------------------------------------------------------
def _prim(rng: random.Random, size: int) -> list[bool]:
    """Open cells of a Prim's-algorithm maze (cell variant) on a size x size grid."""
    nbrs = _neighbours(size)
    n = size * size
    is_open = [False] * n
    queued = [False] * n
    first = _below(rng, n)
    is_open[first] = queued[first] = True
    frontier = []
    for nxt in nbrs[first]:
        queued[nxt] = True
        frontier.append(nxt)
    while frontier:
        i = _below(rng, len(frontier))
        cell = frontier[i]
        frontier[i] = frontier[-1]
        frontier.pop()
        # a frontier cell's count of open neighbours only grows, so a cell rejected here
        # (>= 2 open neighbours) stays a wall for good and is never queued again
        if sum(is_open[x] for x in nbrs[cell]) != 1:
            continue
        is_open[cell] = True
        for nxt in nbrs[cell]:
            if not queued[nxt]:
                queued[nxt] = True
                frontier.append(nxt)
    return is_open


def _zone(size: int, corner: int, radius: int) -> list[int]:
    r0, c0 = divmod(corner, size)
    return [r * size + c for r in range(size) for c in range(size) if abs(r - r0) + abs(c - c0) <= radius]


def _pos(cell: int, size: int) -> list[int]:
    return list(divmod(cell, size))


def generate(seed: int, config: MazeConfig, reward_mode: str = "linear") -> tuple[Example | None, str]:
    """Build one maze from ``seed``: ``(example, "ok")`` or ``(None, reason)`` when rejected.

    Reasons: ``unreachable`` (S cannot reach E or a corner), ``no_conflict`` (both corners fit the
    budget), ``small_zone``, ``small_interior``, ``mixed_fits`` (``strict_conflict`` only),
    ``no_safe_route``, ``oracle`` (an oracle route collects none of its items).
    """
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"maze: reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
    rng = random.Random(seed)
    size = config.size
    n = size * size
    nbrs = _neighbours(size)
    is_open = _prim(rng, size)

    candidates = [cell for cell in range(n) if not is_open[cell] and sum(is_open[x] for x in nbrs[cell]) >= 2]
    k = min(len(candidates), _randint(rng, *config.openings))
    for cell in _sample(rng, candidates, k):
        is_open[cell] = True

    corners = [0, size - 1, n - size, n - 1]  # TL, TR, BL, BR; corners[3 - i] is opposite corners[i]
    s_idx = _below(rng, 4)
    start, exit_ = corners[s_idx], corners[3 - s_idx]
    others = [corners[i] for i in (1, 2)] if s_idx in (0, 3) else [corners[i] for i in (0, 3)]
    swap = _below(rng, 2)
    gold_corner, diamond_corner = (others[1], others[0]) if swap else (others[0], others[1])
    centre = (size // 2) * size + size // 2
    for cell in (*corners, centre):
        is_open[cell] = True

    d_s = _bfs(is_open, size, start)
    d_e = _bfs(is_open, size, exit_)
    d_g = _bfs(is_open, size, gold_corner)
    if max(d_s[exit_], d_s[gold_corner], d_s[diamond_corner]) >= _INF:
        return None, "unreachable"
    via_gold = d_s[gold_corner] + d_e[gold_corner]
    via_diamond = d_s[diamond_corner] + d_e[diamond_corner]
    budget = max(via_gold, via_diamond) + config.budget_slack
    both_corners = min(d_s[gold_corner] + d_g[diamond_corner] + d_e[diamond_corner],
                       d_s[diamond_corner] + d_g[diamond_corner] + d_e[gold_corner])
    if both_corners <= budget:
        return None, "no_conflict"

    special = {start, exit_, centre}
    zones = []
    for corner in (gold_corner, diamond_corner):
        zone = [cell for cell in _zone(size, corner, config.zone_radius)
                if is_open[cell] and cell not in special]
        if len(zone) < config.min_zone_open:
            return None, "small_zone"
        zones.append(zone)
    lo, hi = config.items
    gold = sorted(_sample(rng, zones[0], _randint(rng, lo, min(hi, len(zones[0])))))
    diamond = sorted(_sample(rng, zones[1], _randint(rng, lo, min(hi, len(zones[1])))))
    taken = special | set(gold) | set(diamond)
    lo_m, hi_m = config.lava_margin, size - 1 - config.lava_margin
    interior = [r * size + c for r in range(lo_m, hi_m + 1) for c in range(lo_m, hi_m + 1)
                if is_open[r * size + c] and r * size + c not in taken]
    if len(interior) < config.lava[0]:
        return None, "small_interior"
    if config.strict_conflict:
        # shortest walk S -> a gold tile -> a diamond tile -> E (either order), E not excluded
        # on the way: a lower bound, so rejecting when it fits is conservative
        for g in gold:
            d_item = _bfs(is_open, size, g)
            for d in diamond:
                if min(d_s[g] + d_item[d] + d_e[d], d_s[d] + d_item[d] + d_e[g]) <= budget:
                    return None, "mixed_fits"
    lava = sorted(_sample(rng, interior, min(len(interior), _randint(rng, *config.lava))))
    safe = _bfs(is_open, size, start, blocked=lava)[exit_]
    if safe > budget:
        return None, "no_safe_route"

    chars = [OPEN if o else WALL for o in is_open]
    for cell in gold:
        chars[cell] = GOLD
    for cell in diamond:
        chars[cell] = DIAMOND
    for cell in lava:
        chars[cell] = LAVA
    chars[start], chars[exit_], chars[centre] = START, EXIT, BONUS
    example: Example = {
        "size": size,
        "grid": ["".join(chars[r * size:(r + 1) * size]) for r in range(size)],
        "start": _pos(start, size),
        "exit": _pos(exit_, size),
        "budget": budget,
        "gold": [_pos(c, size) for c in gold],
        "diamond": [_pos(c, size) for c in diamond],
        "lava": [_pos(c, size) for c in lava],
        "bonus": _pos(centre, size),
        "gold_corner": _pos(gold_corner, size),
        "diamond_corner": _pos(diamond_corner, size),
        "reward_mode": reward_mode,
        "via_gold": via_gold,
        "via_diamond": via_diamond,
        "both_corners": both_corners,
        "safe_distance": safe,
        "seed": seed,
    }
    grid = _Grid(example)
    if grid.collect_route(grid.gold)[1] == 0 or grid.collect_route(grid.diamond)[1] == 0:
        return None, "oracle"
    return example, "ok"


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
# Parsing model text
# ----------------------------------------------------------------------------------------
_RUN = re.compile(r"[A-Za-z]+")
_WORDS = frozenset(MOVES)


def _answer_region(text: str) -> str:
    """Content of the first ``<answer>`` block (case-insensitive), else the whole text."""
    lowered = text.lower()
    start = lowered.find("<answer>")
    if start < 0:
        return text
    end = lowered.find("</answer>", start + 8)
    return text[start + 8:] if end < 0 else text[start + 8:end]


def _iter_moves(text: str, strict: bool) -> Iterator[str] | None:
    """Moves of ``text`` lazily (non-strict), or a list (strict: None if any non-move token)."""
    if not strict:
        return _lazy_moves(text)
    moves: list[str] = []
    for match in _RUN.finditer(text):
        word = match.group().upper()
        if word in _WORDS:
            moves.append(word)
        elif word.strip("UDLR"):
            return None
        else:
            moves.extend(_LETTERS[ch] for ch in word)
    return iter(moves)


def _lazy_moves(text: str) -> Iterator[str]:
    for match in _RUN.finditer(text):
        word = match.group().upper()
        if word in _WORDS:
            yield word
        elif not word.strip("UDLR"):
            for ch in word:
                yield _LETTERS[ch]


def parse_moves(text: Any, *, strict: bool = False, answer_block: bool = True) -> list[str]:
    """The moves (``"UP"``, ``"DOWN"``, ``"LEFT"``, ``"RIGHT"``) of an answer text.

    ``answer_block``: read only inside the first ``<answer>`` block when one is present.
    ``strict``: any non-move token gives ``[]`` (unparseable). Never raises; linear time.
    """
    if not isinstance(text, str):
        return []
    region = _answer_region(text) if answer_block else text
    moves = _iter_moves(region, strict)
    return [] if moves is None else list(moves)


def _as_moves(moves: str | Iterable[str]) -> list[str]:
    if isinstance(moves, str):
        return parse_moves(moves)
    out = []
    for i, move in enumerate(moves):
        if not isinstance(move, str):
            raise ValueError(f"maze: move {i} is {type(move).__name__}, expected a string")
        word = move.upper()
        if word in _WORDS:
            out.append(word)
        elif word in _LETTERS:
            out.append(_LETTERS[word])
        else:
            raise ValueError(f"maze: move {i} is {move!r}, expected UP/DOWN/LEFT/RIGHT or U/D/L/R")
    return out


# ----------------------------------------------------------------------------------------
# Public helpers on examples
# ----------------------------------------------------------------------------------------
def simulate(example: Mapping[str, Any], moves: str | Iterable[str]) -> Trajectory:
    """Run ``moves`` (a list of UP/DOWN/LEFT/RIGHT or U/D/L/R, or answer text) in ``example``.

    Returns the ``Trajectory`` with its (4,) reward ``vector``. Raises ValueError on a malformed
    example or an unknown move in a list (text is parsed leniently, like ``score``).
    """
    MazeTask.check_example(example)
    return _Grid(example).run(_as_moves(moves))


def render(example: Mapping[str, Any], moves: str | Iterable[str] | None = None) -> str:
    """The grid as rows of space-separated tiles (as in the prompt).

    With ``moves``, the open cells (``.``) the route visits are drawn as ``*``.
    """
    MazeTask.check_example(example)
    rows = [list(row) for row in example["grid"]]
    if moves is not None:
        for r, c in simulate(example, moves).cells:
            if rows[r][c] == OPEN:
                rows[r][c] = "*"
    return "\n".join(" ".join(row) for row in rows)


def shortest_safe_route(example: Mapping[str, Any]) -> list[str]:
    """A shortest lava-free route S -> E (ValueError if none fits the budget)."""
    MazeTask.check_example(example)
    moves = _Grid(example).safe_route()
    if moves is None:
        raise ValueError("maze: no lava-free route from S to E fits the budget")
    return moves


def _via(example: Mapping[str, Any], kind: str) -> list[str]:
    MazeTask.check_example(example)
    grid = _Grid(example)
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
# Validation
# ----------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------
# The task
# ----------------------------------------------------------------------------------------
@register_task("maze")
class MazeTask(Task):
    """Grid maze with a (completion, gold, diamond, avoid_lava) reward vector.

    Parameters: ``size`` (odd, >= 5; 9 is the paper's grid), ``reward_mode`` ("linear" |
    "convex_bonus", stamped on generated examples; scoring follows the example's own field),
    ``strict_moves`` (a non-move token in an answer zeroes it), and any ``MazeConfig`` field
    (``budget_slack=3``, ``lava=(1, 3)``, ...) to override the per-size defaults.
    """

    objectives = OBJECTIVES
    rewrite_rule = RewriteRule("maze", template=_MULTI_TEMPLATE, pattern=_FORMAT_PATTERN, tag="route")
    parse_fallbacks = True
    ability = "planning"

    def __init__(self, size: int = 9, reward_mode: str = "linear", strict_moves: bool = False,
                 **overrides: Any) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"maze: reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        self.config = config_for_size(size, **overrides)
        self.size = size
        self.reward_mode = reward_mode
        self.strict_moves = bool(strict_moves)

    def __repr__(self) -> str:
        return (f"MazeTask(size={self.size}, reward_mode={self.reward_mode!r}, "
                f"strict_moves={self.strict_moves})")

    # ----- data ----------------------------------------------------------------------
    @staticmethod
    def check_example(example: Any, row: int | None = None) -> None:
        """Raise ValueError naming the field and row if ``example`` is malformed."""
        _validate(example, row)

    def validate(self, example: Any, row: int | None = None) -> Example:
        _validate(example, row)
        return dict(example)

    def generate(self, seed: int) -> tuple[Example | None, str]:
        """One maze from an attempt seed: ``(example, "ok")`` or ``(None, rejection reason)``."""
        return generate(seed, self.config, self.reward_mode)

    def iter_examples(self, seed: int, *, split: str = "stream") -> Iterator[Example]:
        """Endless stream of accepted mazes drawn from ``random.Random(seed)`` (fresh mazes per
        batch: ``itertools.islice(task.iter_examples(step), 8)``); ids ``maze{size}-{split}-s{seed}-{i}``."""
        master = random.Random(seed)
        index = 0
        while True:
            attempt = int(master.random() * 2.0 ** 53)
            example, _ = generate(attempt, self.config, self.reward_mode)
            if example is not None:
                example["id"] = f"maze{self.size}-{split}-s{seed}-{index}"
                index += 1
                yield example

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[Example]:
        """Generated mazes of a split (train: seed 42, 1000 by default; test: seed 4242, 100),
        or the validated rows of a local ``source`` file (JSONL / JSON / parquet of examples).

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
        return [next(stream) for _ in range(count)]

    # ----- prompts -------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        _validate(example, None)
        return _prompt(example)

    # ----- scoring -------------------------------------------------------------------
    def _run_text(self, text: Any, example: Example) -> Trajectory:
        _validate(example, None)  # malformed data raises (ValueError naming the field)
        grid = _Grid(example)
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
        """The parsed move list (SPEC section 3): routes that differ only after the exit, or in
        moves beyond the budget, are different routes."""
        moves = _iter_moves(_answer_region(answer), self.strict_moves) if isinstance(answer, str) else None
        return () if moves is None else tuple(moves)

    # ----- oracles -------------------------------------------------------------------
    shortest_safe_route = staticmethod(shortest_safe_route)
    route_via_gold = staticmethod(route_via_gold)
    route_via_diamond = staticmethod(route_via_diamond)
    oracle_routes = staticmethod(oracle_routes)
    simulate = staticmethod(simulate)
    render = staticmethod(render)

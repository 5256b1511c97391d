"""Maze generators: the per-size configuration and the two generation protocols.

Usage::

    from vpo.tasks.maze import config_for_size, generate, split_examples
    example, reason = generate(42, config_for_size(9), protocol="paper")   # the paper's train maze 0
    mazes = split_examples(config_for_size(9), seed=42, n=1000, protocol="paper")  # its train split
    example, reason = generate(4, config_for_size(5))                      # (None, "unreachable")

Both protocols follow the rules of docs/algorithm.md §4: a Prim's-algorithm maze, extra openings
(cycles), S and E on opposite corners, gold / diamond corners, bonus B in the centre,
budget = max(via_gold, via_diamond) + slack, conflict rejection, items in the corner zones, lava
inside, a lava-free route must fit. They differ in how they draw random numbers and in a few
rejections, so the same seed gives different mazes:

``"paper"`` (default for size 9): the authors' released generator, call for call. The paper's
sets are exactly what it produced: train = the first 1000 accepted mazes of attempt seeds
42, 43, 44, ...; test = the first 100 of 4242, 4243, ... (rejected attempts are skipped, so
train uses attempt seeds 42..1119 and test 4242..4345). Each attempt is ``random.Random(seed)``
consumed in this order: ``randrange(size)`` twice (Prim's first cell, row then column); Prim's
loop ``randrange(len(frontier))`` with the frontier a list popped at that index, in which a
cell may appear several times (neighbours are appended UP, DOWN, LEFT, RIGHT); ``randint`` of the
opening count, then ``shuffle`` of the row-major list of wall cells with >= 2 open neighbours
(the first ``count`` are opened); ``choice`` between the diagonals (top-left, bottom-right) and
(top-right, bottom-left), S at the top end; ``shuffle`` of the two remaining corners (row-major),
the first becomes the gold corner; ``randint`` of the gold count, ``randint`` of the diamond
count, ``sample`` of each zone (row-major, open cells other than S, E, B); ``randint`` of the
lava count, ``sample`` of the interior (row-major). Its rejections: S cannot reach E; a
via_gold / via_diamond / via_centre detour longer than 90 steps (an unreachable leg counts 98);
S -> gold corner -> diamond corner -> E fits the budget (gold corner first only); a zone with
fewer than ``min_zone_open`` open cells; no lava-free S -> E route within the budget. Lava is
``min(count, interior cells)``, never a rejection. With another ``MazeConfig`` (size 5, 7,
``budget_slack=...``) the protocol keeps this order of calls with the new parameters;
``strict_conflict`` adds its rejection after the draws.

``"vpo"`` (default for every other size, hence for ``vpo demo``): this project's first
generator, kept unchanged so that every maze it ever produced (and the digests pinned in the
tests) stays reproducible. Only ``random.Random.random()`` is used (the one stream the Python
docs promise across versions); integers, shuffles and samples are derived from it here. A
split draws attempt seeds from ``random.Random(seed)`` (``int(random() * 2**53)``) instead of
counting up. Rejections: the paper's (without the 90-step cap: any unreachable corner
rejects), except that the conflict check takes both corner orders (``d(S,G) + d(G,D) + d(D,E)``
and ``d(S,D) + d(D,G) + d(G,E)``: checking one order lets mazes through where a route reaching
both corners fits; the paper's 1000 train mazes happen to pass both orders, 3 of 5000 "paper"
mazes in general do not), an interior with fewer than ``lava[0]`` cells is rejected, and so is
a maze where the greedy via-gold route collects no gold or the via-diamond route no diamond
(well under 1% of draws). ``strict_conflict`` rejects before the lava draw.

The "paper" protocol relies on ``randrange``, ``randint``, ``choice``, ``shuffle`` and
``sample`` keeping their algorithms for integer arguments, as they have since Python 3.2; the
pinned digests in tests/tasks/test_maze.py would show a change.

Per-size defaults (5 follows the CPU prototype, 9 the paper, 7 interpolates; other odd sizes
>= 11 scale the 9x9 counts by area)::

    size  openings  zone_radius  items  min_zone_open  lava  lava_margin  budget_slack  budgets
       5    (3, 5)            1  (2,3)              2  (1,2)          1            2    10-18
       7   (8, 13)            2  (2,4)              3  (2,3)          2            4    16-28
       9  (18, 28)            2  (3,5)              3  (3,5)          2            7    23-33

Generation takes 0.10 / 0.16 / 0.25 ms per accepted maze at 5 / 7 / 9 ("paper") and 0.17 /
0.28 / 0.45 ms ("vpo", whose oracle check costs more) of CPU time on one core, rejections
included, so fresh mazes can be drawn every batch.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vpo.tasks.base import Example
from vpo.tasks.maze.schema import BONUS, DIAMOND, EXIT, GOLD, LAVA, OPEN, REWARD_MODES, START, WALL
from vpo.tasks.maze.simulator import _INF, _bfs, _Grid, _neighbours

__all__ = ["PROTOCOLS", "SIZE_DEFAULTS", "SPLIT_SEEDS", "SPLIT_SIZES", "MazeConfig", "attempt_seeds",
           "config_for_size", "default_protocol", "generate", "split_examples"]

PROTOCOLS = ("paper", "vpo")
"""Generator protocols: "paper" (the authors' released generator) and "vpo" (this project's)."""
SPLIT_SEEDS = {"train": 42, "test": 4242}
"""The paper's split seeds."""
SPLIT_SIZES = {"train": 1000, "test": 100}
"""The paper's split sizes."""


def default_protocol(size: int) -> str:
    """"paper" for the paper's 9x9 grid, "vpo" for every other size (the CPU demo's 5x5 included)."""
    return "paper" if size == 9 else "vpo"


def _check_protocol(protocol: Any) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"maze: protocol must be one of {PROTOCOLS}, got {protocol!r}")
    return protocol


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
    the budget (the corner check of docs/algorithm.md §4 alone leaves that possible in about half the mazes)."""

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
        raise ValueError(f"maze: unknown parameter(s) {unknown}; known: size, reward_mode, strict_moves, protocol, "
                         f"{', '.join(sorted(fields))}")
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return dataclasses.replace(base, **fixed)


# ----------------------------------------------------------------------------------------
# Protocol "vpo": randomness from random.Random.random() only
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



def _generate_vpo(seed: int, config: MazeConfig, reward_mode: str) -> tuple[Example | None, str]:
    """The "vpo" protocol: one maze from ``seed``, ``(example, "ok")`` or ``(None, reason)``.

    Reasons: ``unreachable`` (S cannot reach E or a corner), ``no_conflict`` (both corners fit the
    budget), ``small_zone``, ``small_interior``, ``mixed_fits`` (``strict_conflict`` only),
    ``no_safe_route``, ``oracle`` (an oracle route collects none of its items).
    """
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

    example = _example(size, is_open, start, exit_, centre, gold, diamond, lava, gold_corner, diamond_corner,
                       reward_mode, budget, (via_gold, via_diamond), both_corners, safe, seed, protocol=None)
    grid = _Grid(example)
    if grid.collect_route(grid.gold)[1] == 0 or grid.collect_route(grid.diamond)[1] == 0:
        return None, "oracle"
    return example, "ok"


# ----------------------------------------------------------------------------------------
# Protocol "paper": the released generator's order of calls on random.Random
# ----------------------------------------------------------------------------------------
_RELEASE_UNREACHABLE = 98
"""What the release counts for a leg with no path (a 99-cell stand-in path)."""
_RELEASE_VIA_CAP = 90
"""The release rejects a maze whose via_gold, via_diamond or via_centre exceeds this."""


def _prim_paper(rng: random.Random, size: int) -> list[bool]:
    """Open cells of the release's Prim's maze: the frontier is a list that may hold a cell
    several times, popped at a random index (``list.pop`` keeps the others' order, which the
    next index depends on)."""
    nbrs = _neighbours(size)
    is_open = [False] * (size * size)
    row = rng.randrange(size)
    col = rng.randrange(size)
    first = row * size + col
    is_open[first] = True
    frontier = list(nbrs[first])
    while frontier:
        cell = frontier.pop(rng.randrange(len(frontier)))
        if is_open[cell] or sum(is_open[x] for x in nbrs[cell]) != 1:
            continue
        is_open[cell] = True
        frontier.extend(x for x in nbrs[cell] if not is_open[x])
    return is_open


def _leg(distance: int) -> int:
    return distance if distance < _INF else _RELEASE_UNREACHABLE


def _generate_paper(seed: int, config: MazeConfig, reward_mode: str) -> tuple[Example | None, str]:
    """The "paper" protocol: one maze from attempt ``seed`` (module docstring), or a rejection."""
    rng = random.Random(seed)
    size = config.size
    n = size * size
    nbrs = _neighbours(size)
    is_open = _prim_paper(rng, size)

    count = rng.randint(*config.openings)  # drawn before the shuffle (the release's argument order)
    candidates = [cell for cell in range(n) if not is_open[cell] and sum(is_open[x] for x in nbrs[cell]) >= 2]
    rng.shuffle(candidates)
    for cell in candidates[:count]:
        is_open[cell] = True

    top_left, top_right, bottom_left, bottom_right = 0, size - 1, n - size, n - 1
    start, exit_ = rng.choice(((top_left, bottom_right), (top_right, bottom_left)))
    others = [c for c in (top_left, top_right, bottom_left, bottom_right) if c not in (start, exit_)]
    rng.shuffle(others)
    gold_corner, diamond_corner = others
    centre = (size // 2) * size + size // 2
    for cell in (start, exit_, gold_corner, diamond_corner, centre):
        is_open[cell] = True

    d_s = _bfs(is_open, size, start)
    if d_s[exit_] >= _INF:
        return None, "unreachable"
    d_e = _bfs(is_open, size, exit_)
    via_gold = _leg(d_s[gold_corner]) + _leg(d_e[gold_corner])
    via_diamond = _leg(d_s[diamond_corner]) + _leg(d_e[diamond_corner])
    via_centre = _leg(d_s[centre]) + _leg(d_e[centre])
    if max(via_gold, via_diamond, via_centre) > _RELEASE_VIA_CAP:
        return None, "unreachable"
    budget = max(via_gold, via_diamond) + config.budget_slack
    d_g = _bfs(is_open, size, gold_corner)
    gold_first = _leg(d_s[gold_corner]) + _leg(d_g[diamond_corner]) + _leg(d_e[diamond_corner])
    if gold_first <= budget:
        return None, "no_conflict"

    special = {start, exit_, centre}
    zones = [[cell for cell in _zone(size, corner, config.zone_radius) if is_open[cell] and cell not in special]
             for corner in (gold_corner, diamond_corner)]
    if min(len(zones[0]), len(zones[1])) < config.min_zone_open:
        return None, "small_zone"
    lo, hi = config.items
    n_gold = rng.randint(lo, min(hi, len(zones[0])))  # both counts are drawn before both samples
    n_diamond = rng.randint(lo, min(hi, len(zones[1])))
    gold = sorted(rng.sample(zones[0], n_gold))
    diamond = sorted(rng.sample(zones[1], n_diamond))
    taken = special | set(gold) | set(diamond)
    lo_m, hi_m = config.lava_margin, size - 1 - config.lava_margin
    interior = [r * size + c for r in range(lo_m, hi_m + 1) for c in range(lo_m, hi_m + 1)
                if is_open[r * size + c] and r * size + c not in taken]
    lava = sorted(rng.sample(interior, min(rng.randint(*config.lava), len(interior))))
    safe = _bfs(is_open, size, start, blocked=lava)[exit_]
    if safe > budget:
        return None, "no_safe_route"
    if config.strict_conflict and _mixed_fits(is_open, size, d_s, d_e, gold, diamond, budget):
        return None, "mixed_fits"
    # recorded like the "vpo" protocol's field: the cheaper corner order (the check used gold first)
    diamond_first = _leg(d_s[diamond_corner]) + _leg(d_g[diamond_corner]) + _leg(d_e[gold_corner])
    example = _example(size, is_open, start, exit_, centre, gold, diamond, lava, gold_corner, diamond_corner,
                       reward_mode, budget, (via_gold, via_diamond), min(gold_first, diamond_first), safe, seed)
    return example, "ok"


def _mixed_fits(is_open: Sequence[bool], size: int, d_s: Sequence[int], d_e: Sequence[int],
                gold: Sequence[int], diamond: Sequence[int], budget: int) -> bool:
    """Whether a walk S -> a gold tile -> a diamond tile -> E (either order) fits the budget.

    E is not excluded on the way, so this is a lower bound and rejecting on it is conservative.
    """
    for g in gold:
        d_item = _bfs(is_open, size, g)
        for d in diamond:
            if min(d_s[g] + d_item[d] + d_e[d], d_s[d] + d_item[d] + d_e[g]) <= budget:
                return True
    return False


def _example(size: int, is_open: Sequence[bool], start: int, exit_: int, centre: int, gold: Sequence[int],
             diamond: Sequence[int], lava: Sequence[int], gold_corner: int, diamond_corner: int, reward_mode: str,
             budget: int, via: tuple[int, int], both_corners: int, safe: int, seed: int,
             protocol: str | None = "paper") -> Example:
    """The example dict (schema in ``vpo.tasks.maze.schema``) of a finished grid. "vpo" examples
    carry no ``protocol`` key (``protocol=None``), so they stay byte for byte what they were."""
    chars = [OPEN if o else WALL for o in is_open]
    for cells, tile in ((gold, GOLD), (diamond, DIAMOND), (lava, LAVA)):
        for cell in cells:
            chars[cell] = tile
    chars[start], chars[exit_], chars[centre] = START, EXIT, BONUS
    return {
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
        "via_gold": via[0],
        "via_diamond": via[1],
        "both_corners": both_corners,
        "safe_distance": safe,
        "seed": seed,
    } | ({"protocol": protocol} if protocol else {})


# ----------------------------------------------------------------------------------------
# Dispatch and splits
# ----------------------------------------------------------------------------------------
def generate(seed: int, config: MazeConfig, reward_mode: str = "linear",
             protocol: str | None = None) -> tuple[Example | None, str]:
    """Build one maze from attempt ``seed``: ``(example, "ok")`` or ``(None, reason)`` when rejected.

    ``protocol``: "paper" or "vpo" (default: ``default_protocol(config.size)``). Reasons:
    ``unreachable`` (S cannot reach E or a corner), ``no_conflict`` (both corners fit the
    budget), ``small_zone``, ``small_interior`` ("vpo"), ``mixed_fits`` (``strict_conflict``
    only), ``no_safe_route``, ``oracle`` ("vpo": an oracle route collects none of its items).
    """
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"maze: reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
    protocol = default_protocol(config.size) if protocol is None else _check_protocol(protocol)
    build = _generate_paper if protocol == "paper" else _generate_vpo
    return build(seed, config, reward_mode)


def attempt_seeds(seed: int, protocol: str) -> Iterator[int]:
    """The endless sequence of attempt seeds a split with ``seed`` tries, in order.

    "paper": ``seed, seed + 1, seed + 2, ...`` (the release). "vpo": ``int(random() * 2**53)``
    draws of ``random.Random(seed)``, so streams with nearby seeds do not share mazes.
    """
    if _check_protocol(protocol) == "paper":
        attempt = int(seed)
        while True:
            yield attempt
            attempt += 1
    master = random.Random(seed)
    while True:
        yield int(master.random() * 2.0 ** 53)


def split_examples(config: MazeConfig, seed: int, n: int | None = None, *, reward_mode: str = "linear",
                   protocol: str | None = None) -> Iterator[Example] | list[Example]:
    """The first ``n`` accepted mazes of the split with ``seed`` (endless iterator when n is None),
    without ids (``MazeTask.examples`` adds them)."""
    protocol = default_protocol(config.size) if protocol is None else _check_protocol(protocol)

    def stream() -> Iterator[Example]:
        for attempt in attempt_seeds(seed, protocol):
            example, _ = generate(attempt, config, reward_mode, protocol)
            if example is not None:
                yield example

    if n is None:
        return stream()
    it = stream()
    return [next(it) for _ in range(n)]

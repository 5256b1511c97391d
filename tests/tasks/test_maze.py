"""Maze task: generator properties over 1000 seeds per size, simulator rules, parsing, chains.

The property sweep re-derives every distance with its own BFS (``_dist`` below) instead of
trusting the generator's bookkeeping.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import subprocess
import sys
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.chains import rewrite_prompt
from vpo.tasks import get_task
from vpo.tasks.maze import (
    SIZE_DEFAULTS,
    MazeConfig,
    MazeTask,
    attempt_seeds,
    config_for_size,
    default_protocol,
    generate,
    oracle_routes,
    parse_moves,
    render,
    route_via_diamond,
    route_via_gold,
    shortest_safe_route,
    simulate,
    split_examples,
)

STEP = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}

# sha256 of json.dumps(task.examples(split, 100), sort_keys=True) under protocol "vpo" (this
# project's generator; the default at every size but 9): the generator's output is part of the
# contract (same seed, same maze on every machine and Python version).
DIGESTS = {
    (5, "train"): "1eb6ce940eaa2ec5d2600667ba86ec34b7a85db3410cea8c046a980e472efc93",
    (9, "train"): "a1ca216b02d65caa3cfd3e737ab7e9e6c148ee4eadf1eecf96942175a03e3e3a",
    (9, "test"): "b912209399a2913944915cd4a69137579b4b36b75d5681c12d4df665b4220d9c",
}

# The paper's maze sets (protocol "paper", the default at size 9), digests computed by running
# the authors' released generator (github.com/ryanboldi/vpo, vpo_tasks/maze.py, _make_split with
# train seed 42 / test seed 4242) and mapping its rows to this task's schema: grid_text -> grid
# rows, start, end -> exit, max_steps -> budget, gold / diamond / lava = the grid's tiles,
# extra_info.bonus_cell -> bonus. A maze's digest is sha256 of json.dumps({f: maze[f] for f in
# PAPER_FIELDS}, sort_keys=True, separators=(",", ":")); a split's digest hashes the list of those.
PAPER_FIELDS = ("size", "grid", "start", "exit", "budget", "gold", "diamond", "lava", "bonus")
PAPER_DIGESTS = {
    "train": ["36dd69de12ee7e174b4ee6c94ef1e170b2fcdabaac29943827410588990c6dad",
              "b23e6b6714212fe4716d154dc0a84984c925e55beab3cfda8ddaf0a3d261d353",
              "99426c98d5367727251c03de3e645aacce077b5ca52ddc98632bb040b771f2e6"],
    "test": ["c17f5bff9c9804c77ef06ac69fa7f03376b380feb42f3603598780db99e57742",
             "3a47d67e3426d200a785f8e0eb55a59a54b2f60ad9d4b278d207492f5963d72b",
             "eb0704b6fbd026a3c0bf928e90f8d02162a32883abcb97f468327dc088c63af4"],
}
PAPER_SPLIT_DIGESTS = {  # all 1000 train / all 100 test mazes
    "train": "90c532dbcbc55028a357acc04fe4ee13337c72dbd2f59031d7af7ebb26048263",
    "test": "2ac34a4ed9e391a4a2fc2f6472f651fef421e10c200489013f9539cfe8844d81",
}
# attempt seeds of the first and last accepted maze (rejected attempts are skipped)
PAPER_SEED_RANGE = {"train": (42, 1119), "test": (4242, 4345)}


def _paper_digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _paper_core(example: dict) -> dict:
    return {field: example[field] for field in PAPER_FIELDS}


def _digest(examples: list[dict]) -> str:
    return hashlib.sha256(json.dumps(examples, sort_keys=True).encode()).hexdigest()


def _dist(grid: list[str], src: tuple[int, int], blocked: str = "#") -> dict[tuple[int, int], int]:
    """Independent BFS over the grid strings: step counts from src avoiding ``blocked`` tiles."""
    n = len(grid)
    dist = {src: 0}
    queue = deque([src])
    while queue:
        r, c = queue.popleft()
        for dr, dc in STEP.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and grid[nr][nc] not in blocked and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


def _tiles(grid: list[str], tile: str) -> set[tuple[int, int]]:
    return {(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == tile}


# ----------------------------------------------------------------------------------------
# Generator properties, 1000 seeds per size
# ----------------------------------------------------------------------------------------
_SWEEP: dict[tuple[int, str], list[dict]] = {}
# (size, protocol): the "vpo" generator at every size, and the paper's own 1000 train mazes
SWEEPS = [(5, "vpo"), (7, "vpo"), (9, "vpo"), (9, "paper")]


def _sweep(size: int, protocol: str) -> list[dict]:
    if (size, protocol) not in _SWEEP:
        _SWEEP[(size, protocol)] = get_task("maze", size=size, protocol=protocol).examples("train", 1000)
    return _SWEEP[(size, protocol)]


@pytest.mark.parametrize(("size", "protocol"), SWEEPS)
def test_generator_properties_1000_seeds(size, protocol):
    # The paper protocol checks the corner conflict in one order only (gold corner first), yet
    # its 1000 train mazes satisfy both orders too (3 in 5000 of its mazes in general do not).
    cfg = SIZE_DEFAULTS[size]
    task = get_task("maze", size=size, protocol=protocol)
    examples = _sweep(size, protocol)
    assert len(examples) == 1000
    assert len({ex["seed"] for ex in examples}) == 1000
    n = size - 1
    corners = {(0, 0), (0, n), (n, 0), (n, n)}
    centre = (size // 2, size // 2)
    for i, ex in enumerate(examples):
        task.validate(ex, i)
        grid = ex["grid"]
        start, exit_ = tuple(ex["start"]), tuple(ex["exit"])
        gold_corner, diamond_corner = tuple(ex["gold_corner"]), tuple(ex["diamond_corner"])
        # S and E on opposite corners, the two others are the item corners, B in the centre
        assert {start, exit_, gold_corner, diamond_corner} == corners, i
        assert start[0] + exit_[0] == n and start[1] + exit_[1] == n, i
        assert tuple(ex["bonus"]) == centre and grid[centre[0]][centre[1]] == "B", i
        assert all(grid[r][c] != "#" for r, c in corners | {centre}), i
        # budget formula
        d_s, d_e, d_g = _dist(grid, start), _dist(grid, exit_), _dist(grid, gold_corner)
        via_gold = d_s[gold_corner] + d_e[gold_corner]
        via_diamond = d_s[diamond_corner] + d_e[diamond_corner]
        assert ex["budget"] == max(via_gold, via_diamond) + cfg.budget_slack, i
        assert (ex["via_gold"], ex["via_diamond"]) == (via_gold, via_diamond), i
        # conflict: visiting both corners does not fit, in either order
        gold_first = d_s[gold_corner] + d_g[diamond_corner] + d_e[diamond_corner]
        diamond_first = d_s[diamond_corner] + d_g[diamond_corner] + d_e[gold_corner]
        assert min(gold_first, diamond_first) > ex["budget"], i
        # zones
        for tile, corner in (("G", gold_corner), ("D", diamond_corner)):
            cells = _tiles(grid, tile)
            assert cfg.items[0] <= len(cells) <= cfg.items[1], i
            assert all(abs(r - corner[0]) + abs(c - corner[1]) <= cfg.zone_radius for r, c in cells), i
        # lava: on interior cells, count in range
        lava = _tiles(grid, "L")
        lo, hi = cfg.lava_margin, size - 1 - cfg.lava_margin
        assert cfg.lava[0] <= len(lava) <= cfg.lava[1], i
        assert all(lo <= r <= hi and lo <= c <= hi for r, c in lava), i
        # a lava-free route fits the budget
        assert _dist(grid, start, blocked="#L").get(exit_, 10**9) <= ex["budget"], i


@pytest.mark.parametrize(("size", "protocol"), SWEEPS)
def test_oracle_routes_1000_seeds(size, protocol):
    task = get_task("maze", size=size, protocol=protocol)
    for i, ex in enumerate(_sweep(size, protocol)):
        routes = oracle_routes(ex)
        for name, moves in routes.items():
            assert len(moves) <= ex["budget"], (i, name)
        safe = task.score(" ".join(routes["safe"]), ex)
        gold = task.score(" ".join(routes["gold"]), ex)
        diamond = task.score(" ".join(routes["diamond"]), ex)
        assert safe[0] == 1 and safe[3] == 1, i
        assert len(routes["safe"]) == ex["safe_distance"], i
        assert gold[0] == 1 and gold[1] > 0, i
        assert diamond[0] == 1 and diamond[2] > 0, i
        # the conflict shows in the rewards: no oracle route gets both item kinds fully
        assert not (gold[1] == 1 and gold[2] == 1), i


# ----------------------------------------------------------------------------------------
# Determinism
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("size", "split"), sorted(DIGESTS))
def test_fixed_seed_fixed_digest(size, split):
    assert _digest(get_task("maze", size=size, protocol="vpo").examples(split, 100)) == DIGESTS[(size, split)]
    if size != 9:
        assert _digest(get_task("maze", size=size).examples(split, 100)) == DIGESTS[(size, split)]  # the default


def test_digest_identical_in_subprocess():
    code = ("import hashlib, json; from vpo.tasks import get_task; "
            "print(hashlib.sha256(json.dumps(get_task('maze', size=9, protocol='vpo').examples('train', 100), "
            "sort_keys=True).encode()).hexdigest()); "
            "print(hashlib.sha256(json.dumps([{k: e[k] for k in " + repr(PAPER_FIELDS) + "} "
            "for e in get_task('maze', size=9).examples('test')], sort_keys=True, "
            "separators=(',', ':')).encode()).hexdigest())")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    assert out.stdout.split() == [DIGESTS[(9, "train")], PAPER_SPLIT_DIGESTS["test"]]


def test_splits_streams_and_regeneration():
    task = get_task("maze", size=5)
    train = task.examples("train", 20)
    assert task.examples("train", 5) == train[:5]  # rejected draws continue one stream
    assert task.examples("train", 5, seed=42) == train[:5]
    test = task.examples("test", 5)
    assert {ex["seed"] for ex in test}.isdisjoint(ex["seed"] for ex in train)
    assert [ex["id"] for ex in train[:2]] == ["maze5-train-s42-0", "maze5-train-s42-1"]
    rebuilt, reason = task.generate(train[3]["seed"])
    assert reason == "ok"
    assert {k: v for k, v in rebuilt.items()} == {k: v for k, v in train[3].items() if k != "id"}
    with pytest.raises(ValueError, match="seed"):
        task.examples("validation", 3)
    assert len(task.examples("validation", 3, seed=7)) == 3
    assert len(get_task("maze", size=9).examples("test")) == 100


def test_examples_json_roundtrip_and_source(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    task = get_task("maze", size=7)
    examples = task.examples("test", 4)
    path = tmp_path / "mazes.jsonl"
    path.write_text("".join(json.dumps(ex) + "\n" for ex in examples))
    loaded = task.examples("test", source=str(path))
    assert loaded == examples
    pq.write_table(pa.Table.from_pylist(examples), tmp_path / "mazes.parquet")
    assert task.examples("test", 2, source=str(tmp_path / "mazes.parquet")) == examples[:2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(examples[0]) + "\n" + json.dumps(dict(examples[1], budget=-1)) + "\n")
    with pytest.raises(ValueError, match="row 1: field 'budget'"):
        task.examples("test", source=str(bad))
    moves = " ".join(route_via_gold(examples[0]))
    assert np.array_equal(task.score(moves, loaded[0]), task.score(moves, examples[0]))



# ----------------------------------------------------------------------------------------
# The paper's maze sets (protocol "paper")
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "test"])
def test_paper_sets_match_the_release(split):
    task = get_task("maze", size=9)
    assert task.protocol == "paper"
    examples = task.examples(split)
    assert len(examples) == {"train": 1000, "test": 100}[split]
    cores = [_paper_core(ex) for ex in examples]
    assert [_paper_digest(core) for core in cores[:3]] == PAPER_DIGESTS[split]
    assert _paper_digest(cores) == PAPER_SPLIT_DIGESTS[split]  # every maze of the split
    seed = {"train": 42, "test": 4242}[split]
    seeds = [ex["seed"] for ex in examples]
    assert (seeds[0], seeds[-1]) == PAPER_SEED_RANGE[split] and seeds == sorted(set(seeds))
    assert [ex["id"] for ex in examples[:2]] == [f"maze9-paper-{split}-s{seed}-0", f"maze9-paper-{split}-s{seed}-1"]
    assert examples[-1]["id"] == f"maze9-paper-{split}-s{seed}-{len(examples) - 1}"
    assert all(ex["protocol"] == "paper" and ex["reward_mode"] == "linear" for ex in examples)
    # the release stamps reward mode convex_bonus: the same mazes with that mode
    convex = get_task("maze", size=9, reward_mode="convex_bonus").examples(split, 3)
    assert [_paper_digest(_paper_core(ex)) for ex in convex] == PAPER_DIGESTS[split]
    assert all(ex["reward_mode"] == "convex_bonus" for ex in convex)


def test_paper_first_train_maze_by_hand():
    ex = get_task("maze", size=9).examples("train", 1)[0]
    assert ex["grid"] == ["S.....DDD", ".......D.", "....L...#", ".........", "....B....",
                          "#..L.....", "G.....L..", "GG.......", "GG......E"]
    assert (ex["start"], ex["exit"], ex["budget"], ex["bonus"]) == ([0, 0], [8, 8], 25, [4, 4])
    assert (ex["gold_corner"], ex["diamond_corner"]) == ([8, 0], [0, 8])
    assert (ex["via_gold"], ex["via_diamond"], ex["safe_distance"], ex["seed"]) == (18, 18, 16, 42)


def test_protocol_defaults_and_parameters():
    assert get_task("maze", size=9).protocol == "paper"
    for size in (5, 7, 11):
        assert get_task("maze", size=size).protocol == "vpo"
    assert default_protocol(9) == "paper" and default_protocol(5) == "vpo"
    with pytest.raises(ValueError, match="protocol"):
        get_task("maze", size=9, protocol="release")
    with pytest.raises(ValueError, match="protocol"):
        generate(42, config_for_size(9), protocol="v2")
    # the demo's grid keeps its mazes: the default at size 5 is the "vpo" generator
    five = get_task("maze", size=5)
    assert five.examples("train", 20) == get_task("maze", size=5, protocol="vpo").examples("train", 20)
    assert "protocol" not in five.examples("train", 1)[0]
    # attempt seeds: consecutive under "paper", drawn from random.Random(seed) under "vpo"
    assert list(itertools.islice(attempt_seeds(42, "paper"), 3)) == [42, 43, 44]
    drawn = list(itertools.islice(attempt_seeds(42, "vpo"), 3))
    assert drawn == [int(random.Random(42).random() * 2.0 ** 53)] + drawn[1:] and len(set(drawn)) == 3
    # the generate function and the task agree, and an attempt seed rebuilds its maze
    paper = get_task("maze", size=9)
    first = paper.examples("test", 2)
    rebuilt, reason = paper.generate(first[1]["seed"])
    assert reason == "ok" and rebuilt == {k: v for k, v in first[1].items() if k != "id"}
    assert generate(first[1]["seed"], config_for_size(9))[0] == rebuilt
    assert generate(first[1]["seed"], config_for_size(9), protocol="vpo")[0] != rebuilt
    # split_examples is the id-less stream; examples is a prefix of the longer split
    assert split_examples(config_for_size(9), 4242, 2) == [{k: v for k, v in e.items() if k != "id"} for e in first]
    assert paper.examples("train", 5) == paper.examples("train", 20)[:5]
    assert [e["id"] for e in itertools.islice(paper.iter_examples(7, split="rl"), 2)] == [
        "maze9-paper-rl-s7-0", "maze9-paper-rl-s7-1"]


@pytest.mark.parametrize("size", [5, 7, 11])
def test_paper_protocol_other_sizes(size):
    cfg = config_for_size(size)
    task = get_task("maze", size=size, protocol="paper")
    examples = task.examples("train", 50)
    n = size - 1
    for i, ex in enumerate(examples):
        task.validate(ex, i)
        grid, start, exit_ = ex["grid"], tuple(ex["start"]), tuple(ex["exit"])
        assert start[0] == 0 and exit_ == (n, n - start[1]), i  # S at the top end of a diagonal
        d_s, d_e = _dist(grid, start), _dist(grid, exit_)
        gold_corner, diamond_corner = tuple(ex["gold_corner"]), tuple(ex["diamond_corner"])
        assert ex["budget"] == max(d_s[gold_corner] + d_e[gold_corner],
                                   d_s[diamond_corner] + d_e[diamond_corner]) + cfg.budget_slack, i
        # the release's conflict check: gold corner first
        d_g = _dist(grid, gold_corner)
        assert d_s[gold_corner] + d_g[diamond_corner] + d_e[diamond_corner] > ex["budget"], i
        assert cfg.items[0] <= len(ex["gold"]) <= cfg.items[1] and cfg.items[0] <= len(ex["diamond"]) <= cfg.items[1]
        assert len(ex["lava"]) <= cfg.lava[1], i
        assert _dist(grid, start, blocked="#L").get(exit_, 10**9) <= ex["budget"], i
    assert [ex["seed"] for ex in examples] == sorted({ex["seed"] for ex in examples})


# ----------------------------------------------------------------------------------------
# Simulator rules on a hand-made maze
# ----------------------------------------------------------------------------------------
def _hand_maze(budget: int = 14, mode: str = "linear") -> dict:
    grid = ["S.#GG",
            "..#.G",
            ".LB..",
            "D..L.",
            "DD..E"]
    return {"size": 5, "grid": grid, "start": [0, 0], "exit": [4, 4], "budget": budget,
            "gold": [[0, 3], [0, 4], [1, 4]], "diamond": [[3, 0], [4, 0], [4, 1]],
            "lava": [[2, 1], [3, 3]], "bonus": [2, 2], "reward_mode": mode}


DIAMOND_ROUTE = "DOWN DOWN DOWN DOWN RIGHT RIGHT RIGHT RIGHT"                # 8 steps, 3 diamonds
GOLD_ROUTE = "D D D R R U R U U R D D D D"                                   # 14 steps via B


def test_simulator_hand_maze_vectors():
    task = get_task("maze", size=5)
    ex = task.validate(_hand_maze())
    assert task.score(DIAMOND_ROUTE, ex).tolist() == [1, 0, 1, 1]
    assert task.score(GOLD_ROUTE, ex).tolist() == pytest.approx([1, 1, 1 / 3, 1])
    traj = simulate(ex, GOLD_ROUTE)
    assert traj.reached_exit and traj.bonus and (traj.gold, traj.diamond, traj.lava) == (3, 1, 0)
    assert traj.cells[-1] == (4, 4) and len(traj.cells) == 15


def test_route_stopping_before_exit_scores_zero():
    task = get_task("maze", size=5)
    ex = _hand_maze()
    assert task.score("DOWN DOWN DOWN DOWN RIGHT RIGHT RIGHT", ex).tolist() == [0, 0, 0, 0]
    assert task.score("", ex).tolist() == [0, 0, 0, 0]


def test_moves_after_exit_do_not_count():
    task = get_task("maze", size=5)
    ex = _hand_maze()
    # after E, UP UP UP would walk onto the gold tile at (1, 4)
    assert task.score(DIAMOND_ROUTE + " UP UP UP", ex).tolist() == [1, 0, 1, 1]
    assert simulate(ex, DIAMOND_ROUTE + " UP UP UP").moves == tuple(DIAMOND_ROUTE.split())


def test_walls_and_border_spend_a_step():
    ex = _hand_maze(budget=8)
    task = get_task("maze", size=5)
    assert task.score(DIAMOND_ROUTE, ex)[0] == 1                   # exactly 8 steps fits
    bumped = "LEFT " + DIAMOND_ROUTE                                # off the grid: in place, 1 step
    assert simulate(ex, bumped).cells[:2] == ((0, 0), (0, 0))
    assert task.score(bumped, ex).tolist() == [0, 0, 0, 0]          # 9th move dropped
    assert task.score(bumped, _hand_maze(budget=9))[0] == 1
    wall = "RIGHT RIGHT"                                            # (0, 2) is a wall
    assert simulate(ex, wall).cells == ((0, 0), (0, 1), (0, 1))


def test_lava_and_items_count_once():
    task = get_task("maze", size=5)
    ex = _hand_maze()
    # (2, 1) is lava: step on it twice out of 2 lava tiles -> 1 - 1/2
    twice = "RIGHT DOWN DOWN UP DOWN DOWN DOWN RIGHT RIGHT RIGHT"
    traj = simulate(ex, twice)
    assert traj.lava == 1 and traj.reached_exit
    assert task.score(twice, ex).tolist() == pytest.approx([1, 0, 1 / 3, 0.5])
    # diamond at (3, 0) stepped on twice counts once
    back = "DOWN DOWN DOWN UP DOWN DOWN RIGHT RIGHT RIGHT RIGHT"
    assert simulate(ex, back).diamond == 3
    assert task.score(back, ex).tolist() == [1, 0, 1, 1]


def test_budget_cut():
    task = get_task("maze", size=5)
    assert task.score(DIAMOND_ROUTE, _hand_maze(budget=7)).tolist() == [0, 0, 0, 0]
    assert simulate(_hand_maze(budget=7), DIAMOND_ROUTE).moves == tuple(DIAMOND_ROUTE.split()[:7])


def test_convex_bonus_mode():
    task = get_task("maze", size=5, reward_mode="convex_bonus")
    ex = _hand_maze(mode="convex_bonus")
    # via B: gold 1 * 1.5 -> 1, diamond (1/3)^2 * 1.5, lava 1 * 1.5 -> 1
    assert task.score(GOLD_ROUTE, ex).tolist() == pytest.approx([1, 1, 1.5 / 9, 1])
    # no B: squares only; lava twice out of 2 -> (1/2)^2
    twice = "RIGHT DOWN DOWN UP DOWN DOWN DOWN RIGHT RIGHT RIGHT"
    assert task.score(twice, ex).tolist() == pytest.approx([1, 0, 1 / 9, 0.25])
    # the example's own reward_mode decides, whatever the task's default
    assert get_task("maze", size=5).score(GOLD_ROUTE, ex).tolist() == pytest.approx([1, 1, 1.5 / 9, 1])
    generated = task.examples("train", 2)
    assert all(e["reward_mode"] == "convex_bonus" for e in generated)
    assert "1.5" in task.prompt(generated[0])


def test_render_and_oracles_on_hand_maze():
    ex = _hand_maze()
    assert render(ex).splitlines()[0] == "S . # G G"
    assert render(ex, DIAMOND_ROUTE).splitlines()[4] == "D D * * E"
    assert shortest_safe_route(ex) == DIAMOND_ROUTE.split()
    task = get_task("maze", size=5)
    assert task.score(" ".join(route_via_gold(ex)), ex)[1] > 0
    assert task.score(" ".join(route_via_diamond(ex)), ex)[2] == 1
    blocked = dict(ex, grid=["S.#GG", "..#.G", "LLB..", "D..L.", "DD..E"], lava=[[2, 0], [2, 1], [3, 3]])
    assert task.validate(blocked)
    with pytest.raises(ValueError, match="lava-free"):
        shortest_safe_route(blocked)


# ----------------------------------------------------------------------------------------
# Parsing model text
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "DOWN DOWN DOWN DOWN RIGHT RIGHT RIGHT RIGHT",
    "down down down down right right right right",
    "DDDDRRRR",
    "D D D D R R R R",
    "dddd rrrr",
    "D, D, D, D -> R, R, R, R",
    "I think so.\n<answer>DOWN DOWN DOWN DOWN RIGHT RIGHT RIGHT RIGHT</answer> UP",
    "<ANSWER>DDDD RRRR",  # unclosed block runs to the end
])
def test_move_formats(text):
    assert get_task("maze", size=5).score(text, _hand_maze()).tolist() == [1, 0, 1, 1]


def test_a_one_letter_label_before_full_move_words_is_not_a_move():
    # "SG./..D/..E": RIGHT RIGHT DOWN DOWN passes G and D and exits; read as moves, the label D
    # would walk DOWN first, miss the gold and score [1, 0, 1, 1]
    ex = {"size": 5, "grid": ["SG...", "..D..", "..E..", ".....", "....."], "start": [0, 0], "exit": [2, 2],
          "budget": 6, "gold": [[0, 1]], "diamond": [[1, 2]], "lava": [], "bonus": None, "reward_mode": "linear"}
    task = get_task("maze", size=5)
    assert task.score("RIGHT RIGHT DOWN DOWN", ex).tolist() == [1, 1, 1, 1]
    assert task.score("Option D: RIGHT RIGHT DOWN DOWN", ex).tolist() == [1, 1, 1, 1]


def test_non_move_tokens_ignored_or_strict():
    ex = _hand_maze()
    text = "go DOWN DOWN DOWN DOWN then RIGHT RIGHT RIGHT RIGHT"
    assert parse_moves(text) == DIAMOND_ROUTE.split()
    assert get_task("maze", size=5).score(text, ex).tolist() == [1, 0, 1, 1]
    strict = get_task("maze", size=5, strict_moves=True)
    assert strict.score(text, ex).tolist() == [0, 0, 0, 0]
    assert strict.score(DIAMOND_ROUTE, ex).tolist() == [1, 0, 1, 1]
    assert parse_moves("UPDOWN") == []            # neither a move word nor U/D/L/R letters only
    assert parse_moves("UP2 R3") == ["UP", "RIGHT"]  # digits separate, they are not counts



@pytest.mark.parametrize(("text", "moves"), [
    ("I'd go DOWN then RIGHT", ["DOWN", "RIGHT"]),             # the d of I'd is not a move
    ("I'll take a route: R R D", ["RIGHT", "RIGHT", "DOWN"]),   # nor the ll of I'll; a is prose
    ("we\u2019d go U", ["UP"]),                                # typographic apostrophe too
    ("R's and D's", []),                                        # possessives are words
    ("'D' 'R'", ["DOWN", "RIGHT"]),                             # quoted moves still count
    ("D-D-R", ["DOWN", "DOWN", "RIGHT"]),                       # hyphens separate
    ("Dé R", ["RIGHT"]),                                        # a non-ASCII letter joins the word
    ("UP2 R3", ["UP", "RIGHT"]),
    ("RRDD", ["RIGHT", "RIGHT", "DOWN", "DOWN"]),
    ("UPDOWN", []),
    ("a", []),
    ("Option D: RIGHT RIGHT DOWN DOWN", ["RIGHT", "RIGHT", "DOWN", "DOWN"]),  # a label before full words
    ("Option D: R R", ["DOWN", "RIGHT", "RIGHT"]),             # before letters it cannot be told apart
])
def test_move_words(text, moves):
    assert parse_moves(text) == moves


def test_strict_rejects_contractions():
    assert parse_moves("I'd DOWN", strict=True) == []
    assert parse_moves("DOWN, R -> r", strict=True) == ["DOWN", "RIGHT", "RIGHT"]


def test_answer_region_case_and_unicode():
    assert parse_moves("UP <Answer>down</ANSWER> LEFT") == ["DOWN"]
    assert parse_moves("UP <answer>down</answer>", answer_block=False) == ["UP", "DOWN"]
    # "İ".lower() is two characters: the region must not shift (it did with text.lower().find)
    assert parse_moves("İİİ <answer>RIGHT</answer> DOWN") == ["RIGHT"]
    # re.ASCII: the long s and the Kelvin sign do not spell the tag
    assert parse_moves("<an\u017fwer>UP</an\u017fwer> DOWN") == ["UP", "DOWN"]
    assert parse_moves("<answer>UP</answer> <answer>DOWN</answer>") == ["UP"]


_MOVE_WORDS = st.sampled_from(["UP", "DOWN", "LEFT", "RIGHT", "up", "Down", "U", "d", "l", "R", "RRDD", "udlr"])
_SEPARATORS = st.sampled_from([" ", ", ", "\n", " -> ", "; ", "1", " . ", "\t", "|"])
_PROSE = st.sampled_from(["I'd", "I'll", "we'd", "you'll", "a", "then", "go", "UPDOWN", "R's", "Dé", "don't"])


def _expected(word: str) -> list[str]:
    up = word.upper()
    return [up] if up in STEP else [{"U": "UP", "D": "DOWN", "L": "LEFT", "R": "RIGHT"}[ch] for ch in up]


def _expected_tokens(tokens: list[str], prose: set[str]) -> list[str]:
    """Moves of the tokens; a one-letter word between a prose word and a full move word is a label."""
    out = []
    for i, tok in enumerate(tokens):
        if tok in prose:
            continue
        label = (len(tok) == 1 and i > 0 and tokens[i - 1] in prose and i + 1 < len(tokens)
                 and tokens[i + 1].upper() in STEP)
        out += [] if label else _expected(tok)
    return out


@settings(max_examples=300, deadline=None)
@given(words=st.lists(_MOVE_WORDS, max_size=20), seps=st.lists(_SEPARATORS, min_size=21, max_size=21),
       prose=st.lists(st.tuples(st.integers(0, 20), _PROSE), max_size=5))
def test_parse_moves_property(words, seps, prose):
    """Move words joined by any separators parse to their moves; prose words add none."""
    tokens = list(words)
    for position, word in sorted(prose, reverse=True):
        tokens.insert(min(position, len(tokens)), word)
    expected = _expected_tokens(tokens, {word for _, word in prose})
    text = "".join(tok + seps[i % len(seps)] for i, tok in enumerate(tokens))
    assert parse_moves(text) == expected
    assert parse_moves(text, strict=True) == ([] if prose else expected)
    assert parse_moves(f"think {text} <answer>{text}</answer> UP") == expected


@pytest.mark.parametrize("big", ["RIGHT " * 200_000, "x" * 1_000_000, "<answer>" * 100_000],
                         ids=["moves", "plain", "open answers"])
def test_parse_is_linear_and_fast(big):
    from timed_checks import assert_linear

    task = get_task("maze", size=9)
    ex = task.examples("test", 1)[0]
    assert_linear(lambda text: task.score(text, ex), big)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400))
def test_score_never_raises_on_arbitrary_text(text):
    task = get_task("maze", size=5)
    vec = task.score(text, _hand_maze())
    assert vec.shape == (4,) and np.all((vec >= 0) & (vec <= 1))
    mat = task.score_chain(text, _hand_maze(), 3)
    assert mat.shape == (3, 4) and np.all((mat >= 0) & (mat <= 1))


_TOKENS = ["UP", "down", "Left", "RIGHT", "U", "d", "l", "R", "RRDD", "x", "--", "---", "<answer>",
           "</answer>", "<route_1>", "</route_1>", "<route_2>", "<route_3>", "</route_3>", " ", "\n"]


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from(_TOKENS), max_size=60),
       mode=st.sampled_from(["linear", "convex_bonus"]))
def test_score_in_unit_box_on_move_soup(tokens, mode):
    task = get_task("maze", size=5)
    ex = _hand_maze(mode=mode)
    text = " ".join(tokens)
    vec = task.score(text, ex)
    assert vec.shape == (4,) and np.all((vec >= 0) & (vec <= 1))
    assert vec[0] in (0.0, 1.0) and (vec[0] == 1 or not vec.any())
    mat = task.score_chain(text, ex, 3)
    assert mat.shape == (3, 4) and np.all((mat >= 0) & (mat <= 1))


# ----------------------------------------------------------------------------------------
# Chains and prompts
# ----------------------------------------------------------------------------------------
def test_score_chain_dedups_and_pads():
    task = get_task("maze", size=5)
    ex = _hand_maze()
    text = (f"<route_1>{DIAMOND_ROUTE}</route_1>\n<route_2>DDDDRRRR</route_2>\n"
            f"<route_3>{GOLD_ROUTE}</route_3>")
    mat = task.score_chain(text, ex, 3)
    assert mat.shape == (3, 4)
    assert mat[0].tolist() == [1, 0, 1, 1]
    assert mat[1].tolist() == pytest.approx([1, 1, 1 / 3, 1])
    assert mat[2].tolist() == [0, 0, 0, 0]                    # the duplicate became padding
    # dedup compares the parsed move lists (docs/algorithm.md §3): moves after E make a
    # different route (same vector, so it counts for Multi-RLVR); an identical route does not
    padded = f"<route_1>{DIAMOND_ROUTE}</route_1><route_2>{DIAMOND_ROUTE} UP UP</route_2>"
    both = task.score_chain(padded, ex, 3)
    assert both[1].tolist() == both[0].tolist() and both[2].tolist() == [0] * 4
    same = f"<route_1>{DIAMOND_ROUTE}</route_1><route_2>{DIAMOND_ROUTE}</route_2>"
    assert task.score_chain(same, ex, 3)[1:].tolist() == [[0] * 4, [0] * 4]
    # missing block -> empty answer; fallbacks when no numbered tag exists
    assert task.score_chain(f"<route_2>{GOLD_ROUTE}</route_2>", ex, 3)[0][1] == 1
    fallback = task.score_chain(f"{DIAMOND_ROUTE}\n---\n{GOLD_ROUTE}", ex, 3)
    assert fallback[:, 0].tolist() == [1, 1, 0]
    answers = task.score_chain(f"<answer>{GOLD_ROUTE}</answer> <answer>{DIAMOND_ROUTE}</answer>", ex, 2)
    assert answers[:, 1].tolist() == [1, 0]
    assert task.score_chain(GOLD_ROUTE, ex, 1).shape == (1, 4)
    assert task.dedup_key("DDDD RRRR", np.zeros(4), ex) == tuple(DIAMOND_ROUTE.split())


def test_prompts():
    task = get_task("maze", size=9)
    ex = task.examples("test", 1)[0]
    single = task.prompt(ex)
    assert single == task.prompt(ex, m=1)
    assert "<answer>" in single and str(ex["budget"]) in single
    assert "\n".join(" ".join(row) for row in ex["grid"]) in single
    assert f"{len(ex['gold'])} gold, {len(ex['diamond'])} diamond, {len(ex['lava'])} lava" in single
    multi = task.prompt(ex, m=3)
    assert "<route_1>" in multi and "<route_3>...</route_3>" in multi and "<answer>" not in multi
    assert "3 genuinely different routes" in multi
    mangled = single.replace("inside <answer>", "in <answer>")
    with pytest.raises(ValueError, match="'maze'"):
        rewrite_prompt(mangled, 3, task.rewrite_rule)
    # the example's own prompt text works through the rule for any m
    assert "<route_5>" in rewrite_prompt(single, 5, task.rewrite_rule)


# ----------------------------------------------------------------------------------------
# Validation and parameters
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mutate", "field"), [
    (lambda e: e.pop("grid"), "grid"),
    (lambda e: e.__setitem__("grid", e["grid"][:4]), "grid"),
    (lambda e: e.__setitem__("grid", ["S.#GG", "..#.G", ".LB..", "D..L.", "DD..X"]), "grid"),
    (lambda e: e.__setitem__("start", [0, 1]), "start"),
    (lambda e: e.__setitem__("exit", [9, 9]), "exit"),
    (lambda e: e.__setitem__("budget", 0), "budget"),
    (lambda e: e.__setitem__("budget", "12"), "budget"),
    (lambda e: e.__setitem__("gold", [[0, 3]]), "gold"),
    (lambda e: e.__setitem__("lava", [[2, 1], [3, 3], [3, 3]]), "lava"),
    (lambda e: e.__setitem__("diamond", "none"), "diamond"),
    (lambda e: e.__setitem__("bonus", [1, 1]), "bonus"),
    (lambda e: e.__setitem__("reward_mode", "cubic"), "reward_mode"),
    (lambda e: e.__setitem__("size", True), "size"),
])
def test_validate_names_field_and_row(mutate, field):
    task = get_task("maze", size=5)
    ex = _hand_maze()
    mutate(ex)
    with pytest.raises(ValueError, match=rf"row 7: field '{field}'"):
        task.validate(ex, 7)
    with pytest.raises(ValueError, match=rf"field '{field}'"):
        task.score(DIAMOND_ROUTE, ex)  # malformed data raises; model text never does
    with pytest.raises(ValueError, match="row 3"):
        task.validate([1, 2], 3)


def test_scoring_validates_each_example_once(monkeypatch):
    import vpo.tasks.maze.simulator as sim

    calls = []
    real = sim._validate
    monkeypatch.setattr(sim, "_validate", lambda ex, row: (calls.append(row), real(ex, row))[1])
    monkeypatch.setattr(sim, "_GRIDS", {})  # an empty cache: independent of the other tests
    task = get_task("maze", size=5)
    ex = _hand_maze(budget=17)  # content no other test uses, so the first score validates
    for _ in range(50):
        assert task.score(DIAMOND_ROUTE, ex).tolist() == [1, 0, 1, 1]
    task.score_chain(f"<route_1>{DIAMOND_ROUTE}</route_1><route_2>{GOLD_ROUTE}</route_2>", ex, 3)
    task.prompt(ex, m=3)
    assert len(calls) == 1
    # an equal copy decoded again from JSON (the verl reward function's case) is not re-validated
    assert task.score(DIAMOND_ROUTE, json.loads(json.dumps(ex))).tolist() == [1, 0, 1, 1]
    assert len(calls) == 1
    # changing a field in place is new content: validated again, and the error names the field
    ex["budget"] = 0
    with pytest.raises(ValueError, match="field 'budget'"):
        task.score(DIAMOND_ROUTE, ex)
    ex["budget"] = 16  # again content no other test scores
    assert task.score(DIAMOND_ROUTE, ex).tolist() == [1, 0, 1, 1]
    assert len(calls) == 3
    # generated examples are validated when loaded, so scoring them validates nothing
    fresh = get_task("maze", size=7).examples("test", 3, seed=987654)
    before = len(calls)
    for example in fresh:
        task.score("RIGHT", example)
    assert len(calls) == before
    assert len(sim._GRIDS) <= sim._CACHE_SIZE
    # validate() is type-strict even for cached content (the cache compares numbers by value)
    same = _hand_maze(budget=1)
    task.score("", same)
    with pytest.raises(ValueError, match="row 2: field 'budget'"):
        task.validate(dict(same, budget=True), 2)
    # rows loaded through validate() are compiled there: scoring them validates nothing more
    loaded = task.validate(_hand_maze(budget=18), 0)
    before = len(calls)
    task.score(DIAMOND_ROUTE, loaded)
    assert len(calls) == before


def test_parameters():
    task = get_task("maze", size=5)
    assert isinstance(task, MazeTask)
    assert task.objective_names() == ("completion", "gold", "diamond", "avoid_lava")
    assert task.scalar(np.array([1.0, 1.0, 0.0, 1.0])) == 0.75
    for bad in (4, 6, 8.0, True):
        with pytest.raises(ValueError, match="size"):
            get_task("maze", size=bad)
    with pytest.raises(ValueError, match="reward_mode"):
        get_task("maze", size=5, reward_mode="cubic")
    with pytest.raises(ValueError, match="unknown parameter"):
        get_task("maze", size=5, slack=3)
    custom = get_task("maze", size=5, budget_slack=4, lava=[1, 1])
    assert custom.config.budget_slack == 4 and custom.config.lava == (1, 1)
    exs = custom.examples("train", 50)
    assert all(len(ex["lava"]) == 1 for ex in exs)
    assert all(ex["budget"] == max(ex["via_gold"], ex["via_diamond"]) + 4 for ex in exs)
    with pytest.raises(ValueError, match="zone_radius"):
        MazeConfig(5, openings=(1, 2), zone_radius=2, items=(1, 2), min_zone_open=2, lava=(1, 1),
                   lava_margin=1, budget_slack=2)
    big = config_for_size(11)
    assert big.openings == (27, 42) and big.zone_radius == 2
    assert len(get_task("maze", size=11).examples("train", 5)) == 5


@pytest.mark.parametrize("size", [5, 7, 9])
def test_strict_conflict_no_route_gets_both_item_kinds(size):
    task = get_task("maze", size=size, strict_conflict=True)
    for i, ex in enumerate(task.examples("train", 100)):
        grid, budget = ex["grid"], ex["budget"]
        d_s, d_e = _dist(grid, tuple(ex["start"])), _dist(grid, tuple(ex["exit"]))
        for g in map(tuple, ex["gold"]):
            d_g = _dist(grid, g)
            for d in map(tuple, ex["diamond"]):
                assert min(d_s[g] + d_g[d] + d_e[d], d_s[d] + d_g[d] + d_e[g]) > budget, i
    loose = get_task("maze", size=size).examples("train", 100)
    assert loose != task.examples("train", 100)  # the default keeps such mazes (paper rules)

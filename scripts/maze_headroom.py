"""How much room the maze demo leaves above its demonstrations (docs/demo/investigation.md).

    .venv/bin/python scripts/maze_headroom.py [--size 5] [--reward-mode linear] [--examples 60]

For each held-out maze of ``vpo demo`` it scores two pools with the demo's evaluation weights:
the three oracle routes the warm-up imitates, and every route that fits the step budget (an
exhaustive search over (cell, tiles visited) states; the reward only depends on which gold,
diamond, lava and bonus tiles were visited before E). It prints E_w[max] (preference-weighted)
and the best fixed scalar of each pool, averaged over the mazes.
"""

from __future__ import annotations

import argparse

import numpy as np

from vpo.evaluation import example_weights
from vpo.metrics import expected_max
from vpo.tasks import get_task
from vpo.tasks.maze import MOVES, _reward, oracle_routes, simulate  # _reward: the task's own formula


def reachable_vectors(task, example) -> np.ndarray:
    """(P, D) reward vectors of every route from S that reaches E within the budget."""
    size, rows = example["size"], example["grid"]
    special = [(r, c) for r in range(size) for c in range(size) if rows[r][c] in "GDLB"]
    bit = {cell: 1 << i for i, cell in enumerate(special)}
    start, exit_ = tuple(example["start"]), tuple(example["exit"])
    frontier = {(start, bit.get(start, 0))}
    seen, endings = set(frontier), set()
    for _ in range(example["budget"]):
        step = set()
        for (r, c), mask in frontier:
            for dr, dc in MOVES.values():
                nr, nc = r + dr, c + dc
                if not (0 <= nr < size and 0 <= nc < size) or rows[nr][nc] == "#":
                    continue  # a blocked move only wastes a step: the same state, one step later
                if (nr, nc) == exit_:
                    endings.add(mask)
                    continue
                state = ((nr, nc), mask | bit.get((nr, nc), 0))
                if state not in seen:
                    seen.add(state)
                    step.add(state)
        frontier = step
    vectors = []
    for mask in endings:
        # replay a representative route through the visited tiles with the task's own scorer
        visited = [cell for cell in special if mask & bit[cell]]
        vectors.append(_score_visits(task, example, visited))
    return np.array(vectors)


def _score_visits(task, example, visited) -> np.ndarray:
    """The reward vector of a route that visits exactly ``visited`` special tiles, then E."""
    kinds = {"G": "gold", "D": "diamond", "L": "lava"}
    counts = {"gold": 0, "diamond": 0, "lava": 0}
    bonus = False
    for r, c in visited:
        ch = example["grid"][r][c]
        if ch == "B":
            bonus = True
        else:
            counts[kinds[ch]] += 1
    totals = (len(example["gold"]), len(example["diamond"]), len(example["lava"]))
    return _reward(True, counts["gold"], counts["diamond"], counts["lava"], bonus, totals, example["reward_mode"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5)
    parser.add_argument("--reward-mode", default="linear", choices=["linear", "convex_bonus"])
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0, help="the demo's --seed (fixes the evaluation weights)")
    args = parser.parse_args()
    task = get_task("maze", size=args.size, reward_mode=args.reward_mode)
    examples = task.examples("test", args.examples)
    weights = example_weights(len(examples), task.num_objectives(), 64, seed=args.seed + 4242)
    rows = {"oracle routes (3)": [], "every route in budget": []}
    for example, w in zip(examples, weights, strict=True):
        oracle = np.array([simulate(example, r).vector for r in oracle_routes(example).values()])
        for name, pool in (("oracle routes (3)", oracle), ("every route in budget", reachable_vectors(task, example))):
            rows[name].append((expected_max(pool, w), float(np.max(task.scalar(pool)))))
    print(f"maze {args.size}x{args.size} {args.reward_mode}, {len(examples)} held-out mazes")
    print(f"{'pool':<24} {'E_w[max]':>9} {'fixed scalar':>13}")
    for name, values in rows.items():
        pref, fixed = np.mean(values, axis=0)
        print(f"{name:<24} {pref:9.3f} {fixed:13.3f}")


if __name__ == "__main__":
    main()

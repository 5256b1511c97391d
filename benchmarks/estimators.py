"""Timing of the VPO estimator against a per-group Python loop and a matmul floor.

Usage: ``python benchmarks/estimators.py [--repeats 7]``

Shapes: G groups x 8 rollouts x m = 3 answers x D objectives, K = 100 weights.
* ``vpo``: ``get_estimator("vpo")(rewards, group_ids, seed=0)`` on a list of B (3, D) arrays,
  weight sampling, validation and normalisation included;
* ``loop``: a plain implementation, one Python iteration per group (draw K Dirichlet weights with
  ``Generator.dirichlet``, score each rollout, z-normalise);
* ``floor``: one batched matmul of ready arrays, (G, 8*3, D) @ (G, D, K), then max and mean.
Also times ``vpo.chains.parse_answers`` on 1 MB adversarial texts (target < 1 s each).
Times are the minimum over repeats, in milliseconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vpo.chains import parse_answers
from vpo.estimators import get_estimator

ROLLOUTS, ANSWERS, NUM_WEIGHTS = 8, 3, 100


def best_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def loop_vpo(rewards: list[np.ndarray], group_ids: list[int], rng: np.random.Generator) -> np.ndarray:
    members: dict[int, list[int]] = {}
    for index, label in enumerate(group_ids):
        members.setdefault(label, []).append(index)
    advantages = np.zeros(len(rewards))
    for indices in members.values():
        dim = rewards[indices[0]].shape[1]
        weights = rng.dirichlet(np.ones(dim), size=NUM_WEIGHTS)
        scores = np.array([(rewards[i] @ weights.T).max(axis=0).mean() for i in indices])
        spread = scores.std()
        advantages[indices] = 0.0 if spread < 1e-6 else (scores - scores.mean()) / (spread + 1e-6)
    return advantages


def bench_case(groups: int, dim: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    dense = rng.random((groups * ROLLOUTS, ANSWERS, dim))
    rewards = list(dense)
    group_ids = [b // ROLLOUTS for b in range(len(rewards))]
    estimator = get_estimator("vpo")
    padded = dense.reshape(groups, ROLLOUTS * ANSWERS, dim)
    ready_weights = rng.dirichlet(np.ones(dim), size=(groups, NUM_WEIGHTS)).transpose(0, 2, 1).copy()

    def floor() -> np.ndarray:
        values = np.matmul(padded, ready_weights).reshape(groups, ROLLOUTS, ANSWERS, NUM_WEIGHTS)
        return values.max(axis=2).mean(axis=-1)

    return {
        "vpo": best_of(lambda: estimator(rewards, group_ids, seed=0, step=1), repeats),
        "loop": best_of(lambda: loop_vpo(rewards, group_ids, np.random.default_rng(1)), max(2, repeats // 3)),
        "floor": best_of(floor, repeats),
    }


def adversarial_texts(size: int = 1 << 20) -> dict[str, str]:
    return {
        "'<route_' repeats": ("<route_" * (size // 7 + 1))[:size],
        "nested unclosed tags": ("<route_1><route_2><answer>" * (size // 26 + 1))[:size],
        "'---' runs": ("---" * (size // 3 + 1))[:size],
        "'<answer>' unclosed": ("<answer>x" * (size // 9 + 1))[:size],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{'shape (G x 8 x 3 x D, K=100)':<30} {'vpo ms':>8} {'loop ms':>8} {'floor ms':>9} "
          f"{'vpo/floor':>9} {'loop/vpo':>9}")
    for groups, dim in [(128, 4), (1024, 16)]:
        t = bench_case(groups, dim, args.repeats)
        print(f"{f'{groups} x 8 x 3 x {dim}':<30} {t['vpo']:>8.1f} {t['loop']:>8.1f} {t['floor']:>9.1f} "
              f"{t['vpo'] / t['floor']:>9.2f} {t['loop'] / t['vpo']:>9.1f}")
    print("targets at 1024 x 16: vpo/floor <= 4, loop/vpo >= 3")
    print()
    print(f"{'parse_answers on 1 MB':<30} {'ms':>8}  (target < 1000)")
    for name, text in adversarial_texts().items():
        for fallbacks in (False, True):
            ms = best_of(lambda: parse_answers(text, 3, tag="route", fallbacks=fallbacks), 1)
            print(f"{name + (' +fallbacks' if fallbacks else ''):<30} {ms:>8.1f}")


if __name__ == "__main__":
    main()

"""Timing of the VPO estimator against a per-group Python loop and a matmul floor.

Usage: ``python benchmarks/estimators.py [--repeats 7]``

Shapes: G groups x 8 rollouts x m = 3 answers x D objectives, K = 100 weights, all float64.
* ``vpo``: ``get_estimator("vpo")(rewards, group_ids, seed=0, step=1)`` on a list of B (3, D)
  arrays: keying, weight sampling, validation, scoring and normalisation included;
* ``loop``: a plain implementation, one Python iteration per group (draw K Dirichlet weights with
  ``Generator.dirichlet``, one (8, 3, D) @ (D, K) matmul, max over answers, mean over K,
  z-normalise);
* ``floor``: the issue's floor, one batched float64 matmul of ready arrays,
  (G, 8*3, D) @ (G, D, K), then max over answers and mean over K (no sampling, no validation);
* ``blocked``: the same floor computed in blocks of about 2**16 products, as ``vpo`` does, so
  that each block's products stay in cache; shown for reference, it is not the target's floor.
Also times ``vpo.chains.parse_answers`` on 1 MB adversarial texts (target < 1 s each).
Times are the minimum over repeats, in wall-clock milliseconds; the load average is printed
because other processes on the machine inflate them.
"""

from __future__ import annotations

import argparse
import os
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
        group = np.stack([rewards[i] for i in indices])  # (N, M, D): this benchmark's groups share m
        weights = rng.dirichlet(np.ones(group.shape[2]), size=NUM_WEIGHTS)  # (K, D)
        scores = (group @ weights.T).max(axis=1).mean(axis=1)  # (N,)
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

    def floor(start: int = 0, stop: int = groups) -> np.ndarray:
        values = np.matmul(padded[start:stop], ready_weights[start:stop])
        return values.reshape(stop - start, ROLLOUTS, ANSWERS, NUM_WEIGHTS).max(axis=2).mean(axis=-1)

    step = max(1, 2**16 // (ROLLOUTS * ANSWERS * NUM_WEIGHTS))

    def blocked() -> list[np.ndarray]:
        return [floor(start, min(start + step, groups)) for start in range(0, groups, step)]

    return {
        "vpo": best_of(lambda: estimator(rewards, group_ids, seed=0, step=1), repeats),
        "loop": best_of(lambda: loop_vpo(rewards, group_ids, np.random.default_rng(1)), max(2, repeats // 3)),
        "floor": best_of(floor, repeats),
        "blocked": best_of(blocked, repeats),
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
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'shape (G x 8 x 3 x D, K=100)':<26} {'vpo ms':>7} {'loop ms':>8} {'floor ms':>9} {'blocked':>8} "
          f"{'vpo/floor':>9} {'loop/vpo':>9}")
    for groups, dim in [(128, 4), (1024, 16)]:
        t = bench_case(groups, dim, args.repeats)
        print(f"{f'{groups} x 8 x 3 x {dim}':<26} {t['vpo']:>7.1f} {t['loop']:>8.1f} {t['floor']:>9.1f} "
              f"{t['blocked']:>8.1f} {t['vpo'] / t['floor']:>9.2f} {t['loop'] / t['vpo']:>9.1f}")
    print("targets at 1024 x 16: vpo/floor <= 4, loop/vpo >= 3")
    print()
    print(f"{'parse_answers on 1 MB':<30} {'ms':>8}  (target < 1000)")
    for name, text in adversarial_texts().items():
        for fallbacks in (False, True):
            ms = best_of(lambda: parse_answers(text, 3, tag="route", fallbacks=fallbacks), 1)
            print(f"{name + (' +fallbacks' if fallbacks else ''):<30} {ms:>8.1f}")


if __name__ == "__main__":
    main()

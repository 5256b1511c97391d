"""Timing of the estimators: each derived from its two halves, against the batched functions the
baselines replaced, and VPO against a per-group Python loop and the batched-matmul floor.

Usage: ``python benchmarks/estimators.py [--repeats 7] [--groups 1024] [--clock cpu]``

Shapes: G groups x 8 rollouts (G = 1024 by default: 8,192 rollouts), m = 3 answers for the
multi-answer estimators and 1 for the others, D objectives, K = 100 weights, all float64; the
rewards come as a list of B (m, D) arrays, as the adapters pass them.

Table 1, every baseline with a reduction, same run:
* ``derived``: ``get_estimator(name)``, the function derived from its reduction and its rule:
  validation, group context, the reduction's batched form, the rule, diagnostics;
* ``batched``: the estimator as one hand-written batched function, as the package had it before
  its estimators became their halves (``REFERENCE`` below). Kept here only, as the yardstick;
  the ``same`` column is the largest difference between its advantages and the derived ones;
* ``per-rollout``: the derived function with the reduction's batched form hidden, so the
  reduction runs once per rollout (what a contributor's reduction without a batched form costs).
Target: derived / batched <= 1.5 for every baseline.

Table 2, VPO (G x 8 x 3 x D, K = 100):
* ``vpo``: ``get_estimator("vpo")(rewards, group_ids, seed=0, step=1)``, the function derived from
  ``set_score`` and ``group_norm`` (VPO has no other definition): keying, weight sampling,
  validation, scoring and normalisation included;
* ``batch``, ``keys``, ``draw``: three of its parts alone, for where the time goes: the
  ``RewardBatch`` of the list of arrays, the G blake2b stream keys, and the G K D keyed
  exponentials (``vpo.weights.keyed_exponentials``: two rounds of a 32-bit hash and a float32
  log each, the same numbers on every engine) drawn in one call;
* ``floor``: one batched float64 matmul of ready arrays, (G, 8*3, D) @ (G, D, K), then max over
  answers and mean over K (no sampling, no validation);
* ``blocked``: the same floor in blocks of about ``vpo.objective._BLOCK_VALUES`` products, as
  ``vpo`` scores (so that each block's products stay in cache); for reference, not the floor;
* ``loop``: a plain implementation, one Python iteration per group.
Target at G = 1024, D = 4 and D = 16: vpo / floor <= 1.5. The floor draws no weights; ``vpo``
draws G K D keyed exponentials, which weighs more as D grows. ``vpo/(floor+draw)`` is VPO against
the floor plus that draw alone: what VPO costs beyond the matmul and the weights it cannot skip
(a keyed, batch-independent draw needs a float32 log and two hash rounds per value: about 6 ns
each on one core, against about 0.4 ns per multiply-add of the floor, at D = 16).

Also times ``vpo.chains.parse_answers`` on 1 MB adversarial texts (target < 1 s each).
Times are the minimum over repeats, in milliseconds of wall-clock time (``--clock cpu``: of this
thread's CPU time, which other processes on a loaded machine inflate far less; numpy here runs
these shapes on one thread); the load average is printed because other processes inflate them.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vpo import objective
from vpo.chains import parse_answers
from vpo.estimators import get_estimator, get_spec
from vpo.estimators.common import apply_scalar, make_result, require_single_answer
from vpo.estimators.context import explicit_goal_weights
from vpo.estimators.normalize import group_normalize, group_stats
from vpo.estimators.options import GRPO_NORM, MAX_AT_K_NORM
from vpo.estimators.rules import max_at_k_rule, maxrl_rule
from vpo.objective import RewardBatch
from vpo.weights import keyed_exponentials, keyed_simplex, stream_keys

ROLLOUTS, ANSWERS, NUM_WEIGHTS = 8, 3, 100


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times) * 1e3


# ----- the batched functions the baselines were before they became their halves (the yardstick) -----
def _row_sums(batch: RewardBatch, scalar: Any) -> np.ndarray:
    out = np.zeros(batch.num_rollouts)
    for bucket in batch.buckets:
        out += np.bincount(bucket.row_rollout, weights=apply_scalar(scalar, bucket.rows), minlength=batch.num_rollouts)
    return out


def _normalised(batch: RewardBatch, scores: np.ndarray, prefix: str, norm: Any = GRPO_NORM) -> Any:
    advantages, group_std = group_normalize(scores, batch.group_index, **norm.as_dict())
    return make_result(batch, scores, advantages, group_std, prefix=prefix)


def reference_grpo(rewards: Any, group_ids: Any) -> Any:
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "grpo")
    return _normalised(batch, _row_sums(batch, None), "grpo")


def reference_multi_rlvr(rewards: Any, group_ids: Any) -> Any:
    batch = RewardBatch.from_rewards(rewards, group_ids)
    return _normalised(batch, _row_sums(batch, None), "multi_rlvr")


def reference_max_at_k(rewards: Any, group_ids: Any) -> Any:
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "max_at_k")
    values = _row_sums(batch, None)
    result = _normalised(batch, values, "max_at_k", MAX_AT_K_NORM)
    result.advantages = max_at_k_rule(values, batch.group_index, k=None, **MAX_AT_K_NORM.as_dict())
    return result


def reference_maxrl(rewards: Any, group_ids: Any) -> Any:
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "maxrl")
    values = _row_sums(batch, None)
    advantages = maxrl_rule(values, batch.group_index, eps=1e-6, degenerate="zero")
    return make_result(batch, values, advantages, group_stats(values, batch.group_index, batch.num_groups, 0)[2],
                       prefix="maxrl")


def _one_weight_per_group(name: str, rewards: Any, group_ids: Any, goal_weights: Any = None, seed: Any = None) -> Any:
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, name)
    scores = np.zeros(batch.num_rollouts)
    goals = (explicit_goal_weights(batch, goal_weights) if goal_weights is not None else
             [keyed_simplex(stream_keys([batch.group_labels[g] for g in bucket.groups.tolist()], seed=seed), 1,
                            bucket.dim)[:, 0] for bucket in batch.buckets])
    for bucket, goal in zip(batch.buckets, goals):
        by_group = np.zeros((batch.num_groups, bucket.dim))
        by_group[bucket.groups] = goal
        rollout_w = by_group[batch.group_index[bucket.row_rollout]]
        scores += np.bincount(bucket.row_rollout, minlength=batch.num_rollouts,
                              weights=np.einsum("rd,rd->r", bucket.rows, rollout_w))
    return _normalised(batch, scores, name)


REFERENCE: dict[str, Callable[..., Any]] = {
    "grpo": reference_grpo,
    "multi_rlvr": reference_multi_rlvr,
    "max_at_k": reference_max_at_k,
    "maxrl": reference_maxrl,
    "random_weight": functools.partial(_one_weight_per_group, "random_weight"),
    "goal_conditioned": functools.partial(_one_weight_per_group, "goal_conditioned"),
}


def per_rollout(spec: Any) -> Any:
    """``spec`` with its reduction's batched form hidden: the derived function calls it per rollout."""
    reduce = spec.reduce

    @functools.wraps(reduce)
    def one_at_a_time(matrix: Any, **context: Any) -> float:
        return reduce(matrix, **context)

    del one_at_a_time.batched  # functools.wraps copied the attribute
    return dataclasses.replace(spec, reduce=one_at_a_time)


def baseline_case(name: str, groups: int, dim: int, repeats: int) -> dict[str, float]:
    spec = get_spec(name)
    rng = np.random.default_rng(0)
    m = ANSWERS if spec.multi_answer else 1
    rewards = list(rng.integers(0, 5, size=(groups * ROLLOUTS, m, dim)) / 4.0)
    group_ids = [b // ROLLOUTS for b in range(len(rewards))]
    options: dict[str, Any] = {}
    if spec.conditions_prompt:
        options["goal_weights"] = {g: w for g, w in enumerate(rng.dirichlet(np.ones(dim), size=groups))}
    elif "seed" in spec.options:
        options["seed"] = 0
    derived = functools.partial(spec.fn, rewards, group_ids, **options)
    batched = functools.partial(REFERENCE[name], rewards, group_ids, **options)
    slow = per_rollout(spec).derived
    return {
        "derived": best_of(derived, repeats),
        "batched": best_of(batched, repeats),
        "per-rollout": best_of(functools.partial(slow, rewards, group_ids, **options), 1),
        "same": float(np.abs(derived().advantages - batched().advantages).max()),
    }


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


def vpo_case(groups: int, dim: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    dense = rng.random((groups * ROLLOUTS, ANSWERS, dim))
    rewards = list(dense)
    group_ids = [b // ROLLOUTS for b in range(len(rewards))]
    estimator = get_estimator("vpo")
    padded = dense.reshape(groups, ROLLOUTS * ANSWERS, dim)
    ready_weights = rng.dirichlet(np.ones(dim), size=(groups, NUM_WEIGHTS)).transpose(0, 2, 1).copy()
    keys = stream_keys(range(groups), seed=0, step=1)

    def floor(start: int = 0, stop: int = groups) -> np.ndarray:
        values = np.matmul(padded[start:stop], ready_weights[start:stop])
        return values.reshape(stop - start, ROLLOUTS, ANSWERS, NUM_WEIGHTS).max(axis=2).mean(axis=-1)

    step = max(1, objective._BLOCK_VALUES // (ROLLOUTS * ANSWERS * NUM_WEIGHTS))

    def blocked() -> list[np.ndarray]:
        return [floor(start, min(start + step, groups)) for start in range(0, groups, step)]

    return {
        "vpo": best_of(lambda: estimator(rewards, group_ids, seed=0, step=1), repeats),
        "batch": best_of(lambda: RewardBatch.from_rewards(rewards, group_ids), repeats),
        "keys": best_of(lambda: stream_keys(range(groups), seed=0, step=1), repeats),
        "draw": best_of(lambda: keyed_exponentials(keys, NUM_WEIGHTS, dim), repeats),
        "floor": best_of(floor, repeats),
        "blocked": best_of(blocked, repeats),
        "loop": best_of(lambda: loop_vpo(rewards, group_ids, np.random.default_rng(1)), max(2, repeats // 3)),
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
    parser.add_argument("--groups", type=int, default=1024, help="groups of 8 rollouts in the estimator table")
    parser.add_argument("--dim", type=int, default=4, help="objectives D in the estimator table")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall-clock time, or this thread's CPU time (steadier on a loaded machine)")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.clock} time")
    print(f"\n{args.groups} x 8 rollouts, D = {args.dim} (m = 3 for multi-answer estimators, else 1)")
    print(f"{'estimator':<18} {'derived ms':>10} {'batched ms':>10} {'ratio':>6} {'per-rollout ms':>14} {'same':>8}")
    for name in REFERENCE:
        t = baseline_case(name, args.groups, args.dim, args.repeats)
        print(f"{name:<18} {t['derived']:>10.2f} {t['batched']:>10.2f} {t['derived'] / t['batched']:>6.2f} "
              f"{t['per-rollout']:>14.1f} {t['same']:>8.1e}")
    print("target: derived / batched <= 1.5 for every baseline")

    print(f"\n{'VPO, G x 8 x 3 x D, K=100':<26} {'vpo ms':>7} {'batch':>6} {'keys':>5} {'draw':>5} {'floor ms':>9} "
          f"{'blocked':>8} {'loop ms':>8} {'vpo/floor':>9} {'vpo/(floor+draw)':>16}")
    for groups, dim in [(128, 4), (args.groups, 4), (args.groups, 16)]:
        t = vpo_case(groups, dim, args.repeats)
        print(f"{f'{groups} x 8 x 3 x {dim}':<26} {t['vpo']:>7.1f} {t['batch']:>6.1f} {t['keys']:>5.1f} "
              f"{t['draw']:>5.1f} {t['floor']:>9.1f} {t['blocked']:>8.1f} {t['loop']:>8.1f} "
              f"{t['vpo'] / t['floor']:>9.2f} {t['vpo'] / (t['floor'] + t['draw']):>16.2f}")
    print(f"target at {args.groups} x 8, D = 4 and D = 16: vpo/floor <= 1.5")
    print()
    print(f"{'parse_answers on 1 MB':<30} {'ms':>8}  (target < 1000)")
    for name, text in adversarial_texts().items():
        for fallbacks in (False, True):
            ms = best_of(lambda: parse_answers(text, 3, tag="route", fallbacks=fallbacks), 1)
            print(f"{name + (' +fallbacks' if fallbacks else ''):<30} {ms:>8.1f}")


if __name__ == "__main__":
    main()

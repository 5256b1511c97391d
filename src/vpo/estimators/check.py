"""``check_estimator``: check a registered estimator against the estimator contract, the way
``vpo.tasks.check.check_task`` checks a task. The registry refuses at registration only what
would train silently wrong; this checks the rest of the spec and the behaviour. The test suite
runs it over every registered estimator (built-in and entry-point ones); run it on your own
before training.

Usage::

    from vpo.estimators.check import check_estimator
    check_estimator("vpo")           # raises AssertionError naming the first broken rule

What it checks: the halves take what the derived function passes them (the reduction one
matrix, the rule the scores and the group ids, their options keyword-only), and a spec that
keys weights has a reduction that reads them; then, on small random batches with the options an
adapter would inject (a seed, a step for per-step weights, the stated goal weights for
prompt-conditioned estimators):
advantages and scores have shape (B,) and are finite; a batch whose groups hold identical
rollouts gets zero advantages; permuting the rollouts permutes the results (groups need not be
contiguous); a group's scores do not depend on the rest of the batch (keyed weights); the
registered reduction (``spec.reduce``), one rollout at a time, gives the estimator's own
``scores``, and an empty rollout scores 0; the registered advantage rule (``spec.advantage``)
gives its advantages from those scores; a fast path (``spec.fast``) equals the function derived
from the halves (``spec.derived``); and the zero-row rule: with rewards >= 0, an all-zero row
(a task's padding for a duplicate or unparseable answer) scores like an absent answer, unless
the estimator is registered with ``counts_zero_rows=True``.

Shape glossary: B rollouts, G groups, N rollouts per group, M answers per chain, D objectives.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable
from typing import Any

import numpy as np

from vpo.estimators.reductions import reduction_context, rollout_score
from vpo.estimators.registry import EstimatorSpec, get_spec
from vpo.estimators.rules import advantages_from_scores

__all__ = ["check_estimator"]

_DIM, _GROUPS, _PER_GROUP, _STEP = 3, 3, 4, 3


def _fail(spec: EstimatorSpec, what: str) -> AssertionError:
    return AssertionError(f"check_estimator({spec.name!r}): {what}")


def _batch(spec: EstimatorSpec, rng: np.random.Generator) -> tuple[list[np.ndarray], list[Hashable]]:
    """G groups of N rollouts, labels shuffled; m in 0..3 answers (1 for single-answer
    estimators, some empty), rewards on a quarter grid with zero rows."""
    labels: list[Hashable] = []
    rewards: list[np.ndarray] = []
    for g in range(_GROUPS):
        for _ in range(_PER_GROUP):
            m = int(rng.integers(0, 4)) if spec.multi_answer else int(rng.random() < 0.9)
            rows = rng.integers(0, 5, size=(m, _DIM)) / 4.0
            rows[rng.random(m) < 0.2] = 0.0
            rewards.append(rows)
            labels.append(f"row-{g}")
    order = rng.permutation(len(labels))
    return [rewards[i] for i in order], [labels[i] for i in order]


def _goals(labels: list[Hashable], seed: int) -> dict[Hashable, np.ndarray]:
    from vpo.weights import group_weights

    return {label: group_weights([f"goal-{label}"], 1, _DIM, seed=seed)[0, 0] for label in set(labels)}


def _options(spec: EstimatorSpec, labels: list[Hashable], seed: int) -> dict[str, Any]:
    """What an adapter injects for this spec (and the seed of its keyed weights)."""
    options: dict[str, Any] = {}
    if spec.conditions_prompt:
        options["goal_weights"] = _goals(labels, seed)
    elif "seed" in spec.options:
        options["seed"] = seed
        if spec.weights == "per_step" or (spec.weights is None and "step" in spec.options):
            options["step"] = _STEP
    return options


def _run(spec: EstimatorSpec, rewards: list[np.ndarray], labels: list[Hashable], seed: int) -> Any:
    result = spec.fn(rewards, labels, **_options(spec, labels, seed))
    b = len(rewards)
    for what in ("advantages", "scores"):
        value = np.asarray(getattr(result, what, None), dtype=np.float64)
        if value.shape != (b,):
            raise _fail(spec, f"{what} has shape {value.shape} for B={b} rollouts; expected ({b},)")
        if not np.isfinite(value).all():
            raise _fail(spec, f"{what} holds NaN or inf")
    return result


def _check_halves(spec: EstimatorSpec) -> None:
    """The halves' signatures: what the derived function and the engines pass them."""
    for role, rule, takes in (("reduce", spec.reduce, "matrix"), ("advantage", spec.advantage, "scores, group_ids")):
        if rule is None:
            continue
        positional = [p for p in inspect.signature(rule).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != takes.count(",") + 1:
            raise _fail(spec, f"its {role} {rule.__name__} must take {takes} positionally and its options "
                              "keyword-only")
    if spec.reduce is not None and spec.weights is not None and not {"weights", "goal"} & set(spec.context):
        raise _fail(spec, f"weights={spec.weights!r} keys the group's weights, but its reduction "
                          f"{spec.reduce.__name__} takes neither the group's weights nor its goal")


def check_estimator(name: str | EstimatorSpec, *, seed: int = 0, atol: float = 1e-9) -> None:
    """Raise AssertionError naming the first broken rule of the estimator contract; returns None."""
    spec = name if isinstance(name, EstimatorSpec) else get_spec(name)
    _check_halves(spec)
    rng = np.random.default_rng(seed)
    rewards, labels = _batch(spec, rng)
    result = _run(spec, rewards, labels, seed)
    scores, advantages = np.asarray(result.scores, dtype=np.float64), np.asarray(result.advantages, dtype=np.float64)

    first_of = {label: rewards[labels.index(label)] for label in labels}
    same = [first_of[label].copy() for label in labels]
    flat = np.asarray(_run(spec, same, labels, seed).advantages, dtype=np.float64)
    if np.abs(flat).max(initial=0.0) > atol:
        raise _fail(spec, f"identical rollouts in a group get advantages up to {np.abs(flat).max():.3g}; expected 0")

    perm = rng.permutation(len(labels))
    permuted = _run(spec, [rewards[i] for i in perm], [labels[i] for i in perm], seed)
    for what, before in (("scores", scores), ("advantages", advantages)):
        if not np.allclose(np.asarray(getattr(permuted, what)), before[perm], atol=atol, rtol=1e-9):
            raise _fail(spec, f"permuting the rollouts changes their {what} (not permutation equivariant)")

    for label in dict.fromkeys(labels):
        members = [b for b, other in enumerate(labels) if other == label]
        alone = _run(spec, [rewards[b] for b in members], [label] * len(members), seed)
        if not np.allclose(np.asarray(alone.scores), scores[members], atol=atol, rtol=1e-9):
            raise _fail(spec, f"the scores of group {label!r} change with the rest of the batch (weights must be "
                              "keyed on the group, not drawn in batch order)")

    if spec.reduce is not None:
        goals = _goals(labels, seed) if spec.conditions_prompt else {}
        step = _options(spec, labels, seed).get("step")
        for b, (matrix, label) in enumerate(zip(rewards, labels, strict=True)):
            context = reduction_context(spec, key=label, dim=_DIM, seed=seed, step=step, goal=goals.get(label))
            try:
                value = rollout_score(spec, matrix, **context)
            except ValueError as err:
                raise _fail(spec, f"its reduction fails on rollout {b} ({matrix.shape[0]} answers): {err}") from None
            if not np.isclose(value, scores[b], atol=atol, rtol=1e-9):
                raise _fail(spec, f"its reduction {spec.reduce.__name__} gives {value!r} for rollout {b}, but the "
                                  f"estimator's scores[{b}] is {scores[b]!r}")
            empty = rollout_score(spec, np.zeros((0, _DIM)), **context)
            if abs(empty) > atol:
                raise _fail(spec, f"its reduction {spec.reduce.__name__} scores an empty rollout (no answers) "
                                  f"{empty!r}; expected 0 (a rollout of a group with no answers gets 0 without a call)")
    if spec.advantage is not None:
        from_scores = advantages_from_scores(spec, scores, labels)
        if not np.allclose(from_scores, advantages, atol=1e-7, rtol=1e-6):
            raise _fail(spec, f"its advantage rule {spec.advantage.__name__} on its scores differs from its "
                              f"advantages by up to {np.abs(from_scores - advantages).max():.3g}")
    if spec.fast is not None:
        _check_fast(spec, rewards, labels, seed, result, atol)
    if not spec.counts_zero_rows:
        _check_zero_rows(spec, rewards, labels, seed, scores, atol)


def _check_fast(spec: EstimatorSpec, rewards: list[np.ndarray], labels: list[Hashable], seed: int, fast: Any,
                atol: float) -> None:
    """The fast path (what ``spec.fn`` ran) equals the function derived from the halves: scores,
    advantages, and the diagnostics both report."""
    derived = spec.derived(rewards, labels, **_options(spec, labels, seed))
    for what, tol in (("scores", (atol, 1e-9)), ("advantages", (1e-7, 1e-6))):
        mine, theirs = np.asarray(getattr(fast, what)), np.asarray(getattr(derived, what))
        if mine.shape != theirs.shape or not np.allclose(mine, theirs, atol=tol[0], rtol=tol[1]):
            raise _fail(spec, f"its fast path {spec.fast.__name__} and the function derived from its halves give "
                              f"different {what}")
    shared = dict(getattr(fast, "diagnostics", {}) or {})
    for key, value in (getattr(derived, "diagnostics", {}) or {}).items():
        if key in shared and not np.isclose(shared[key], value, atol=1e-7, rtol=1e-6):
            raise _fail(spec, f"its fast path {spec.fast.__name__} gives diagnostic {key!r} = {shared[key]!r}, "
                              f"the derived function {value!r}")


def _check_zero_rows(spec: EstimatorSpec, rewards: list[np.ndarray], labels: list[Hashable], seed: int,
                     scores: np.ndarray, atol: float) -> None:
    """With rewards >= 0 an all-zero row scores like an absent answer: appended to every rollout
    (multi-answer), or standing in for an empty one (single-answer), it changes no score."""
    zero = np.zeros((1, _DIM))
    if spec.multi_answer:
        padded = [np.concatenate([m, zero]) for m in rewards]
    else:
        padded = [zero if m.shape[0] == 0 else m for m in rewards]
    changed = _run(spec, padded, labels, seed).scores
    diff = np.abs(np.asarray(changed, dtype=np.float64) - scores)
    if diff.max(initial=0.0) > atol:
        b = int(np.argmax(diff))
        raise _fail(spec, f"an all-zero row changes rollout {b}'s score from {scores[b]!r} to {changed[b]!r}; a zero "
                          "row is a padded (duplicate or unparseable) answer and must score like an absent one for "
                          "rewards >= 0 (register with counts_zero_rows=True, and say why in its docstring, if the "
                          "estimator means to count it)")

"""Goal conditioning: a per-prompt weight vector w written into the prompt (goal-conditioned
GRPO, docs/algorithm.md §2).

Usage::

    from vpo.goals import attach_goal, goal_of, goal_text
    example = attach_goal(task, example, key="train-17", seed=0)   # adds "goal_weights": [w_1..w_D]
    task.prompt(example)            # ends with the sentence goal_text(...) states the weights in
    goal_of(example)                # (D,) the stated weights, or None

The weights of a row are random-weighting GRPO's goal for that row, from the one writer of a
group's context (``vpo.estimators.reduction_context``: ``vpo.weights.group_weights([key], 1, D,
seed=seed)``), fixed for the whole run (as in the authors' release). They travel inside the
example (the verl ground truth, the TRL ``example`` column), so the reward uses exactly the
weights the prompt stated.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["GOAL_FIELD", "attach_goal", "goal_of", "goal_text"]

GOAL_FIELD = "goal_weights"
"""The example field holding the stated weights (a list of D floats summing to 1)."""


def goal_text(weights: Sequence[float], names: Sequence[str]) -> str:
    """The sentence that states the weights: one ``name: weight`` per objective."""
    if len(weights) != len(names):
        raise ValueError(f"goal_text: {len(weights)} weights for {len(names)} objectives")
    listed = ", ".join(f"{name} {float(w):.2f}" for name, w in zip(names, weights, strict=True))
    return (f"Goal weights for this prompt: {listed}. Your answer is scored by the weighted sum of "
            "these objectives; aim for the answer that maximises it.")


def goal_of(example: Mapping[str, Any]) -> np.ndarray | None:
    """The (D,) weights stated in ``example``'s prompt, or None when it states none."""
    value = example.get(GOAL_FIELD) if isinstance(example, Mapping) else None
    if value is None:
        return None
    weights = np.asarray(value, dtype=np.float64).reshape(-1)
    if weights.size == 0 or not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(f"field {GOAL_FIELD!r} must be a non-empty list of non-negative numbers, got {value!r}")
    return weights


def attach_goal(task: Any, example: Mapping[str, Any], *, key: Hashable, seed: int = 0, alpha: float = 1.0,
                sampler: str = "iid") -> dict[str, Any]:
    """A copy of ``example`` with its goal weights: the row's keyed draw w ~ Dir(alpha) over
    the task's D objectives for this example."""
    from vpo.estimators import get_spec, reduction_context

    dim = task.num_objectives(example)
    weights = reduction_context(get_spec("random_weight"), key=key, dim=dim, seed=seed, alpha=alpha,
                                sampler=sampler)["goal"]
    return {**example, GOAL_FIELD: [round(float(w), 6) for w in weights]}

"""Timing helpers the training benchmarks share (run from this folder: ``python benchmarks/x.py``).

Usage::

    from _timing import StepTimer, time_calls
    timer = StepTimer()                       # pass in callbacks=[timer]; timer.marks: step starts + end
    spent = time_calls(trainer, "compute_advantages")   # spent[0]: seconds inside that method
    share = StepShare(spent)                  # share.per_step: those seconds split by optimiser step
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """perf_counter() at every step's start and at the end of training (np.diff gives step times)."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.marks.append(time.perf_counter())

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.marks.append(time.perf_counter())


def time_calls(obj: Any, name: str) -> list[float]:
    """Wrap ``obj.name`` so the seconds spent inside it add up in the returned one-item list."""
    original = getattr(obj, name)
    spent = [0.0]

    def wrapper(*a: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            spent[0] += time.perf_counter() - start

    setattr(obj, name, wrapper)
    return spent


class StepShare(TrainerCallback):
    """A ``time_calls`` total split into per-step seconds (``per_step``, one per optimiser step)."""

    def __init__(self, spent: list[float]) -> None:
        self.spent, self.per_step, self.last = spent, [], 0.0

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.per_step.append(self.spent[0] - self.last)
        self.last = self.spent[0]

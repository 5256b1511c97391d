"""What TRL passes a reward function besides the dataset's columns (``TRL_HOOKS``), passed on
to the functions that see one answer at a time.

Usage::

    import numpy as np
    from vpo.rewards.hooks import hooks_per_answer
    per_answer, log = hooks_per_answer({"environments": ["env0", "env1"]}, owners=np.array([0, 0, 1]), num=2)
    per_answer["environments"]    # ["env0", "env0", "env1"]: each answer gets its completion's

Hooks are passed as they are, except ``environments`` (one per completion: each answer gets its
completion's) and ``log_extra`` (values logged per answer reach the trainer grouped per completion).
Chain-level functions get every hook as it is. Shapes: B completions, P answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vpo.reward_guard import TRL_HOOKS

__all__ = ["AnswerLogExtra", "TRL_HOOKS", "hooks_per_answer"]


class AnswerLogExtra:
    """``log_extra`` for the answer-level call: values logged per answer reach the trainer's
    ``log_extra`` grouped per completion (one list each), so its table keeps one row per completion."""

    def __init__(self, log_extra: Callable[[str, list], None], owners: np.ndarray, num: int) -> None:
        self.log_extra, self.owners, self.num = log_extra, owners, num
        self.pending: dict[str, list[Any]] = {}

    def __call__(self, column: str, values: list) -> None:
        self.pending.setdefault(column, []).extend(values)

    def flush(self) -> None:
        for column, values in self.pending.items():
            if len(values) != self.owners.size:  # not one per answer: passed on as it is
                self.log_extra(column, values)
                continue
            grouped: list[list[Any]] = [[] for _ in range(self.num)]
            for owner, value in zip(self.owners, values, strict=True):
                grouped[int(owner)].append(value)
            self.log_extra(column, grouped)


def hooks_per_answer(hooks: Mapping[str, Any] | None, owners: np.ndarray, num: int, *,
                     group_logs: bool = True) -> tuple[dict[str, Any], AnswerLogExtra | None]:
    """The hooks (``TRL_HOOKS``) the answer-level functions get, and the ``log_extra`` to flush after
    their call (None: none to flush). ``owners`` (P,) is each answer's completion among ``num`` (B).
    ``environments`` with one entry per completion becomes one per answer (its completion's); with
    ``group_logs``, ``log_extra`` is wrapped so that per-answer values reach the trainer grouped per
    completion (``AnswerLogExtra``). Every other hook is passed as it is."""
    per_answer = dict(hooks or {})
    environments = per_answer.get("environments")
    if isinstance(environments, list | tuple) and len(environments) == num:
        per_answer["environments"] = [environments[int(b)] for b in owners]
    extra = None
    if group_logs and per_answer.get("log_extra"):
        extra = per_answer["log_extra"] = AnswerLogExtra(per_answer["log_extra"], owners, num)
    return per_answer, extra

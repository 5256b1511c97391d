"""``describe``: one-sentence descriptions of everyday things, judged by three readers.

Usage::

    from vpo.tasks import get_task
    task = get_task("describe")
    example = task.examples("train")[0]     # {"prompt": [chat turn], "topic": ..., "known_facts": ...}
    text = task.format_chain(["It is good.", "A thing.", "Nice."])
    task.score_chain(text, example, 3)      # (3, 3): brevity, facts, flair of each answer

From the command line, as your own reward functions: ``vpo train --model smollm2 --source
src/vpo/tasks/describe/train.jsonl --reward-funcs vpo.tasks.describe.rewards:brevity,...``.

The pretrained-model task of ``vpo demo --preset smollm2`` (docs/demo/smollm2.md says why this
one). A prompt asks for a one-sentence description of a topic (``"Describe a lemon in one
sentence."``); each answer gets a vector of three objectives, one per reader: ``brevity`` (the
skimmer), ``facts`` (the student) and ``flair`` (the copywriter), the plain TRL-style functions of
``vpo.tasks.describe.rewards``. The rows are a prompt dataset as a TRL user has one: a ``prompt``
column (chat turns) and the columns the functions read (``topic``, ``known_facts``). 98 topics
(fruit, vegetables, animals, objects, places, weather, food, vehicles): 50 train and 16 held-out
test rows, and 32 more held-out rows (``extra``, written later to narrow the intervals over the
test prompts), each topic in one split only.

The task is the ``own_rewards`` task with those functions and rows built in: every engine and
command that takes ``--reward-funcs ... --source ...`` runs it the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vpo.reward_failures import RewardFailurePolicy
from vpo.tasks import register_task
from vpo.tasks.own_rewards import OwnRewardsTask

__all__ = ["DescribeTask", "REWARD_FUNCS", "SPLITS"]

HERE = Path(__file__).parent
SPLITS = {"train": HERE / "train.jsonl", "test": HERE / "test.jsonl", "extra": HERE / "extra.jsonl"}
"""The shipped rows of each split (disjoint topics)."""

REWARD_FUNCS = ("vpo.tasks.describe.rewards:brevity", "vpo.tasks.describe.rewards:facts",
                "vpo.tasks.describe.rewards:flair")
"""The three objectives as ``--reward-funcs`` names them."""


@register_task("describe")
class DescribeTask(OwnRewardsTask):
    """``own_rewards`` over the shipped topics with the three readers' reward functions."""

    ability = "describe"
    fixture = SPLITS["test"]

    def __init__(self, reward_funcs: Any = None, *, max_failure_rate: float = RewardFailurePolicy.max_failure_rate,
                 time_limit: float | None = RewardFailurePolicy.time_limit, **kwargs: Any) -> None:
        super().__init__(list(REWARD_FUNCS) if reward_funcs is None else reward_funcs,
                         max_failure_rate=max_failure_rate, time_limit=time_limit, **kwargs)

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[dict[str, Any]]:
        """The rows of ``split`` (``train``, ``test`` or ``extra``; other names read ``test``), or of ``source``."""
        if source is None:
            source = str(SPLITS.get(split, SPLITS["test"]))
        return super().examples(split, n, seed=seed, source=source)

"""``check_task``: check a task against the Task contract, the way Gymnasium's ``check_env``
checks an environment. Run over every registered task by the test suite; run it on your own
task before training on it.

Usage::

    from vpo.tasks import get_task
    from vpo.tasks.check import check_task
    check_task(get_task("maze", size=5))            # raises AssertionError naming what is wrong

What it checks, on a few of the task's own examples: examples are JSON-serialisable dicts that
``validate`` accepts unchanged; prompts and chat messages are non-empty text and the m-answer
prompt differs from the single one; scoring arbitrary text (empty, garbage, tags, 1 MB) never
raises and gives a (D,) vector in [0, 1]; empty text scores zero; ``score_batch`` agrees with
``score``; ``score_chain`` has the documented shapes; ``scalar``, ``solved``, ``dedup_key`` and
``difficulty`` have their types; ``score_chain`` is not overridden; ``format_chain`` writes chains
that ``parse_chain`` reads back answer for answer.

Shape glossary: M answers per chain (m), D objectives.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from vpo.tasks.base import Example, Task

__all__ = ["check_task"]

_PROBES = ("", "garbage", "<answer></answer>", "<response_1>x</response_1><route_1>UP</route_1>",
           "```python\nprint(1)\n```", "x" * 1_000_000)


def _fail(task: Task, what: str) -> AssertionError:
    return AssertionError(f"check_task({task.name or type(task).__name__}): {what}")


def _check_vector(task: Task, vector: Any, dim: int, what: str) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float64)
    if arr.shape != (dim,):
        raise _fail(task, f"{what} has shape {arr.shape}, expected ({dim},)")
    if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
        raise _fail(task, f"{what} leaves [0, 1]: {arr.tolist()}")
    return arr


def check_task(task: Task, examples: Sequence[Example] | None = None, *, n: int = 2, m: int = 3,
               probes: Sequence[str] = _PROBES) -> None:
    """Raise AssertionError naming the first broken rule of the Task contract; returns None.

    ``examples``: what to check on (default: the first ``n`` of ``task.examples("test")``).
    """
    if not isinstance(task, Task):
        raise AssertionError(f"check_task: {type(task).__name__} is not a vpo.tasks.Task")
    if type(task).score_chain is not Task.score_chain:
        raise _fail(task, "overrides score_chain; use the hooks (parse_chain, score_batch, dedup_key)")
    if not isinstance(task.name, str) or not task.name:
        raise _fail(task, "has no registry name (decorate the class with @register_task)")
    if not isinstance(task.ability, str) or not task.ability:
        raise _fail(task, "ability must be a non-empty string")
    if examples is None:
        examples = task.examples("test", n)
    if not examples:
        raise _fail(task, "examples('test') returned no examples")
    for row, example in enumerate(examples):
        if not isinstance(example, dict):
            raise _fail(task, f"example {row} is a {type(example).__name__}, not a dict")
        try:
            round_trip = json.loads(json.dumps(example))
        except (TypeError, ValueError) as err:
            raise _fail(task, f"example {row} is not JSON-serialisable: {err}") from None
        if task.validate(round_trip, row) != task.validate(example, row):
            raise _fail(task, f"example {row} changes through a JSON round trip and validate")
        names = task.objective_names(example)
        dim = task.num_objectives(example)
        if dim < 1 or len(names) != dim or not all(isinstance(x, str) for x in names):
            raise _fail(task, f"example {row}: objective_names {names!r} do not give D >= 1 names")
        single, multi = task.prompt(example, 1), task.prompt(example, m)
        if not isinstance(single, str) or not single.strip() or not isinstance(multi, str) or multi == single:
            raise _fail(task, f"example {row}: prompt(m=1) must be text and prompt(m={m}) a different text")
        for count in (1, m):
            turns = task.messages(example, count)
            if not turns or not all(isinstance(t, dict) and isinstance(t.get("content"), str) and t.get("role") in
                                    ("system", "user", "assistant") for t in turns) or turns[-1]["role"] != "user":
                raise _fail(task, f"example {row}: messages(m={count}) must be role/content turns ending with the user")
        vectors = [_check_vector(task, task.score(text, example), dim, f"score({text[:20]!r}...)") for text in probes]
        if "" in probes and np.any(vectors[list(probes).index("")]):
            raise _fail(task, "empty text must score the zero vector")
        batch = np.asarray(task.score_batch(list(probes[:3]), example), dtype=np.float64)
        if batch.shape != (min(3, len(probes)), dim) or not np.allclose(batch, np.stack(vectors[:3])):
            raise _fail(task, "score_batch disagrees with score")
        for text in probes[:4]:
            one = np.asarray(task.score_chain(text, example, 1))
            chain = np.asarray(task.score_chain(text, example, m))
            if one.shape != (1, dim):
                raise _fail(task, f"score_chain(m=1) has shape {one.shape}, expected (1, {dim})")
            rows = chain.shape[0]
            if chain.ndim != 2 or chain.shape[1] != dim or (rows != m if task.pad_chains else rows > m):
                raise _fail(task, f"score_chain(m={m}) has shape {chain.shape}")
            for r in range(rows):
                _check_vector(task, chain[r], dim, f"score_chain row {r}")
            scalars = np.asarray(task.scalar(chain))
            if rows and scalars.shape != (rows,):
                raise _fail(task, f"scalar of a ({rows}, {dim}) matrix has shape {scalars.shape}")
        if not isinstance(task.solved(vectors[0]), bool):
            raise _fail(task, "solved must return a bool")
        if not isinstance(task.dedup_key("garbage", vectors[0], example), Hashable):
            raise _fail(task, "dedup_key must return a hashable key")
        level = task.difficulty(example)
        if level is not None and not isinstance(level, str):
            raise _fail(task, f"difficulty must be a str or None, got {type(level).__name__}")
        _check_chain_format(task, example, [*task.oracle_answers(example), *probes], m)


def _check_chain_format(task: Task, example: Example, candidates: Sequence[str], m: int) -> None:
    """``format_chain`` is ``parse_chain``'s inverse: up to m of ``candidates`` that can stand in a
    chain, formatted into one, parse back to answers that each score as the answer did alone, and
    ``tagged_answers`` counts every one of them."""
    ready: list[str] = []
    for text in candidates:
        if len(text) > 10_000 or text in ready or len(ready) == m:
            continue
        try:
            task.format_chain([text])
        except ValueError:
            continue
        ready.append(text)
    if not ready:
        raise _fail(task, "format_chain accepts none of the oracle answers and probes")
    chain = task.format_chain(ready)
    parsed = task.parse_chain(chain, len(ready))
    if task.tagged_answers(chain, len(ready)) != len(ready):
        raise _fail(task, f"tagged_answers counts {task.tagged_answers(chain, len(ready))} of the {len(ready)} "
                          f"answers format_chain wrote: {chain[:80]!r}")
    for i, (answer, back) in enumerate(zip(ready, parsed, strict=True)):
        alone = np.asarray(task.score(answer, example), dtype=np.float64)
        if not back.strip() or not np.allclose(np.asarray(task.score(back, example), dtype=np.float64), alone):
            raise _fail(task, f"format_chain then parse_chain changes answer {i + 1} ({answer[:40]!r} came back as "
                              f"{back[:40]!r})")

"""Turn a task's examples into training tables for veRL and TRL (``vpo data export``).

Usage::

    from vpo.export import export, verl_row, trl_row, example_from_row
    paths = export("maze", "data/maze", fmt="verl", task_params={"size": 9})   # train/test.parquet
    row = verl_row(task, example, index=0, split="train", answers=3, task_params={"size": 9})
    example = example_from_row(row)            # back to the example dict, ready for task.score

Seeds: the train split is drawn with ``seed`` and the test split with
``test_seed(seed) = 100 * seed + 42``, so the defaults (seed 42) give the paper's maze seeds,
train 42 and test 4242.

veRL rows (verl's RLHF parquet schema; ``reward.custom_reward_function`` reads them)::

    data_source   task name, e.g. "maze"
    prompt        [{"role": "user", "content": ...}]  (toolcall: a system turn first)
    ability       the task's ability tag, e.g. "planning"
    reward_model  {"style": "rule", "ground_truth": JSON string of the example}
    extra_info    {"index", "split", "task", "answers" (m), "task_params" (JSON string),
                   "example_id" (str; a stable group key)}

TRL rows (``GRPOTrainer`` passes the extra columns to reward functions as kwargs)::

    prompt        the task's chat turns, TRL's conversational format (toolcall: a system turn
                  first; m-answer prompt when answers > 1); ``chat=False``
                  (``--trl-prompt text``): one merged string, for tokenizers without a chat template
    example       JSON string of the example (a reward function json.loads it)
    task, answers, index, split, task_params (JSON string), example_id
    method        the estimator, when the export names one (``--method``): what
                  ``vpo.integrations.trl.estimator_reward`` trains each row with

The example is stored whole, so scoring needs nothing but the row:
``get_task(row task, **json.loads(task_params)).score_chain(text, example, answers)``.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vpo.records import Field, read_record
from vpo.runs import atomic_write_text
from vpo.tasks import Example, Task, get_task, task_class
from vpo.tasks.base import FileTask
from vpo.weights import given_key

__all__ = ["EXPORT_FIELDS", "EXPORT_RECORD", "FORMATS", "example_from_row", "example_key", "export", "export_rows",
           "make_task", "read_export_record", "reads_shipped_sample", "test_seed", "trl_row", "verl_row",
           "write_parquet"]

FORMATS = ("verl", "trl")


def test_seed(seed: int) -> int:
    """Seed of the test split derived from the export seed: ``100 * seed + 42`` (42 -> 4242)."""
    return 100 * int(seed) + 42


test_seed.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _given_id(example: Any) -> str | None:
    """An example's ``id`` as text, or None when it has none (absent, not a str or int, or blank)."""
    ident = given_key(example.get("id")) if isinstance(example, Mapping) else None
    return str(ident) if isinstance(ident, str | int) and not isinstance(ident, bool) else None


def example_key(example: Mapping[str, Any], split: str, index: int) -> str:
    """A stable key of an example: its ``id``, else ``<split>-<index>`` (keys goal weights and groups)."""
    ident = _given_id(example)
    return ident if ident is not None else f"{split}-{index}"


def _identity(example: Mapping[str, Any], file_backed: bool) -> str | None:
    """What makes a train example the same as a test one: its ``id``; without one, for examples read
    from a file (a source may serve both splits the same rows), the whole row; None for a generated
    example without an id (each split draws its own from its seed)."""
    ident = _given_id(example)
    if ident is not None:
        return ident
    return "row " + _dumps(example) if file_backed else None


def verl_row(task: Task, example: Example, *, index: int, split: str, answers: int = 1,
             task_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One row of verl's RLHF parquet schema (see the module docstring)."""
    return {
        "data_source": task.name,
        "prompt": [dict(turn) for turn in task.messages(example, answers)],
        "ability": task.ability,
        "reward_model": {"style": "rule", "ground_truth": _dumps(example)},
        "extra_info": {"index": int(index), "split": split, "task": task.name, "answers": int(answers),
                       "task_params": _dumps(dict(task_params or {})),
                       "example_id": example_key(example, split, index)},
    }


def trl_row(task: Task, example: Example, *, index: int, split: str, answers: int = 1,
            task_params: Mapping[str, Any] | None = None, chat: bool = True, method: str | None = None
            ) -> dict[str, Any]:
    """One row of the TRL table (see the module docstring): the prompt as the task's chat turns,
    or with ``chat=False`` as one string (``task.prompt``); ``method`` adds the ``method`` column."""
    prompt = [dict(turn) for turn in task.messages(example, answers)] if chat else task.prompt(example, answers)
    row = {"prompt": prompt, "example": _dumps(example), "task": task.name,
           "answers": int(answers), "index": int(index), "split": split,
           "task_params": _dumps(dict(task_params or {})),
           "example_id": example_key(example, split, index)}
    if method:
        row["method"] = method
    return row


def example_from_row(row: Mapping[str, Any]) -> Example:
    """The example stored in an exported row (veRL or TRL layout), decoded from JSON."""
    if "reward_model" in row:
        truth = row["reward_model"]["ground_truth"]
    elif "example" in row:
        truth = row["example"]
    else:
        raise ValueError("row has neither 'reward_model' (veRL) nor 'example' (TRL)")
    return json.loads(truth) if isinstance(truth, str) else dict(truth)


def export_rows(task: Task, examples: Sequence[Example], *, split: str, fmt: str = "verl", answers: int = 1,
                task_params: Mapping[str, Any] | None = None, goals: Any = None,
                chat: bool = True, method: str | None = None) -> list[dict[str, Any]]:
    """Rows of one split in format ``fmt`` ("verl" or "trl"); ``chat`` (TRL): chat turns or one
    string; ``method`` (TRL): the estimator's name in each row's ``method`` column.

    ``goals`` (a ``WeightOptions``; goal-conditioned GRPO): each example gets its keyed goal
    weights (``vpo.goals.attach_goal``, keyed on ``example_key``), stated in its prompt and
    stored in its ground truth.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not isinstance(answers, int) or answers < 1:
        raise ValueError(f"answers must be a positive integer, got {answers!r}")
    build = verl_row if fmt == "verl" else trl_row
    if goals is not None:
        from vpo.goals import attach_goal

        examples = [attach_goal(task, ex, key=example_key(ex, split, i), seed=goals.seed, alpha=goals.alpha,
                                sampler=goals.sampler) for i, ex in enumerate(examples)]
    extra = {"chat": chat, "method": method} if fmt == "trl" else {}
    return [build(task, example, index=i, split=split, answers=answers, task_params=task_params, **extra)
            for i, example in enumerate(examples)]


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write rows as a parquet file (parent folders created); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no rows to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path


def make_task(name: str, params: Mapping[str, Any] | None = None, *,
              size: int | None = None) -> tuple[Task, dict[str, Any]]:
    """``get_task(name, **params)``, adding ``size`` only when the task's constructor takes it.

    Returns the task and the parameters actually used (recorded in every exported row).
    """
    params = dict(params or {})
    if size is not None and "size" not in params and _accepts(name, "size"):
        params["size"] = size
    try:
        return get_task(name, **params), params
    except TypeError as err:  # unknown keyword for this task
        raise ValueError(f"task {name!r} does not accept parameters {params}: {err}") from err


def reads_shipped_sample(task_name: str, source: str | os.PathLike[str] | None) -> bool:
    """Whether ``task_name``'s examples from ``source`` are the sample shipped with vpo (a few
    invented rows for tests and demos) rather than real data: no source for a task that has a
    ``fixture``, the sources ``fixtures`` / ``fixture:NAME``, or a file in ``vpo/tasks/fixtures``."""
    if source is None:
        return getattr(task_class(task_name), "fixture", None) is not None
    text = str(source)
    if text == "fixtures" or text.startswith("fixture:"):
        return True
    shipped = (Path(__file__).parent / "tasks" / "fixtures").resolve()
    return shipped == Path(text).resolve() or shipped in Path(text).resolve().parents


def _accepts(name: str, param: str) -> bool:
    """Whether task ``name``'s constructor takes keyword ``param`` (checked on the class)."""
    cls = task_class(name)  # raises the registry's "unknown task" error
    if cls.__init__ is object.__init__:
        return False
    accepted = inspect.signature(cls.__init__).parameters
    return param in accepted or any(p.kind is p.VAR_KEYWORD for p in accepted.values())


def _examples(task: Task, split: str, n: int, seed: int, source: str | None) -> list[Example]:
    kwargs: dict[str, Any] = {"seed": seed}
    if source is not None:
        kwargs["source"] = source
    return task.examples(split, n, **kwargs)


def _all_taken_by_test(rows: int) -> str:
    """Why train is empty when a source serving both splits the same ``rows`` rows gave them all to
    test, and the flags that split it: a tenth (at least one row) held out for test."""
    shared = (f"the source serves both splits the same rows and the test split took every one of them ({rows})")
    if rows < 2:
        return f"{shared}; pass --test 0 (no test split) or --overlap (both splits share it)"
    test = max(1, rows // 10)
    return (f"{shared}; pass --train {rows - test} --test {test} (a tenth held out for test), --test 0 (no test "
            "split), or --overlap (both splits share them)")


def export(task_name: str, out_dir: str | os.PathLike[str], *, fmt: str = "verl", train: int = 1000,
           test: int = 100, seed: int = 42, answers: int = 1, source: str | None = None,
           task_params: Mapping[str, Any] | None = None, size: int | None = 9, goals: Any = None,
           overlap: bool = False, chat: bool = True, method: str | None = None) -> dict[str, Any]:
    """Write ``train.parquet`` and ``test.parquet`` for ``task_name`` into ``out_dir``, and
    ``export.json`` (what was asked, what was written, and why any split is short).

    ``size`` goes to tasks whose constructor takes it (maze). Train rows use ``seed``, test
    rows ``test_seed(seed)``. A split asked for 0 rows is skipped. The splits never share an
    example (by its ``id``, else, for rows read from a file, by the whole row) unless
    ``overlap``: when a source serves the same rows to both splits (a single file, the shipped
    fixtures, HumanEval), the test split is drawn first and train gets the rest. A split may
    hold fewer rows than asked (a small source); the result's ``short`` says so. Returns
    ``{"train": path, "test": path, "counts": {...}, "requested": {...}, "short": [...],
    "task_params": {...}, "seeds": {...}}``. ``goals``, ``method`` as in ``export_rows``.
    """
    task, params = make_task(task_name, task_params, size=size)
    seeds = {"train": int(seed), "test": test_seed(seed)}
    requested = {"train": int(train), "test": int(test)}
    result: dict[str, Any] = {"counts": {}, "requested": requested, "task_params": params, "seeds": seeds,
                              "short": [], "overlap_removed": 0}
    chosen: dict[str, list[Example]] = {}
    for split in ("test", "train"):  # test first: with a shared source, train gets what test did not take
        n = requested[split]
        if n <= 0:
            continue
        if overlap or "test" not in chosen:
            chosen[split] = _examples(task, split, n, seeds[split], source)
            continue
        file_backed = isinstance(task, FileTask)
        taken = {_identity(ex, file_backed) for ex in chosen["test"]} - {None}
        pool = _examples(task, split, n + len(taken), seeds[split], source)
        kept = [ex for ex in pool if _identity(ex, file_backed) not in taken or _identity(ex, file_backed) is None]
        result["overlap_removed"] = len(pool) - len(kept)
        chosen[split] = kept[:n]
    for split in ("train", "test"):
        if split not in chosen:
            continue
        if not chosen[split]:
            why = (_all_taken_by_test(result["overlap_removed"]) if split == "train" and result["overlap_removed"] else
                   f"the source has no {split} examples" + (f" ({source})" if source else ""))
            raise ValueError(f"nothing to write to {Path(out_dir) / f'{split}.parquet'}: {why}")
        rows = export_rows(task, chosen[split], split=split, fmt=fmt, answers=answers, task_params=params, chat=chat,
                           goals=goals, method=method)
        result[split] = write_parquet(rows, Path(out_dir) / f"{split}.parquet")
        result["counts"][split] = len(rows)
        if len(rows) < requested[split]:
            result["short"].append(f"{split}: {len(rows)} rows written, {requested[split]} asked (the source "
                                   + ("holds no more" if not result["overlap_removed"] or split == "test" else
                                      f"holds no more once the {result['overlap_removed']} test examples are left "
                                      "out") + ")")
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in result.items()}
    meta.update(task=task.name, format=fmt, answers=int(answers), source=source, overlap=bool(overlap))
    atomic_write_text(Path(out_dir) / EXPORT_RECORD, json.dumps(meta, indent=1, default=str))
    return result


EXPORT_RECORD = "export.json"
"""What ``export`` writes beside the tables: what was asked, what was written, and why a split is short."""

_SPLIT_COUNTS = Field(dict, fields={"train": Field(int, low=0), "test": Field(int, low=0)})
EXPORT_FIELDS = {"task": Field(str, required=True), "format": Field(str, choices=FORMATS), "source": Field(str),
                 "answers": Field(int, low=1), "counts": _SPLIT_COUNTS, "requested": _SPLIT_COUNTS,
                 "task_params": Field(dict), "short": Field(list, items=Field(str))}
"""What ``export.json`` holds that is read back (the verl recipe checks the data against it)."""


def read_export_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``export.json`` at ``path``, its fields checked (``EXPORT_FIELDS``); RecordError naming the
    file and the field."""
    return read_record(path, EXPORT_FIELDS, hint="export the data again (vpo data export ... --overwrite)")

"""The math task: data (GSM8K, MATH and the task's own schema), prompts and the reward vector.

Usage::

    from vpo.tasks.math.task import MathTask, from_record
    from_record({"question": "2 + 2?", "answer": "It is 4.\\n#### 4"}, 0)   # GSM8K -> {..., "answer": "4"}
    MathTask(timeout=1.0).objective_names()    # ('correct',)

The extraction of final answers is ``vpo.tasks.math.extract``, the equivalence checks
``vpo.tasks.math.verify``; the package docstring (``vpo.tasks.math``) describes the task.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import Example, register_task
from vpo.tasks.base import FileTask
from vpo.tasks.io import need
from vpo.tasks.math.extract import MAX_ANSWER_CHARS, _as_int, _clean, final_answer, last_boxed, split_parts
from vpo.tasks.math.verify import CheckerPool, _match_parts

__all__ = ["FIXTURES", "MathTask", "from_record"]

_FIXTURE_DIR = Path(__file__).parents[1] / "fixtures"
FIXTURES = {"gsm8k": _FIXTURE_DIR / "math_gsm8k.jsonl", "math": _FIXTURE_DIR / "math_competition.jsonl"}
"""Shipped samples, loadable as ``source="fixture:gsm8k"`` / ``"fixture:math"``."""

_MAX_GOLD_CHARS = 10_000

_SINGLE_INSTRUCTION = "Reason step by step, then give the final answer in \\boxed{} at the end."
_MULTI_TEMPLATE = (
    "Write {m} genuinely different solutions: different methods, or different final answers "
    "where you are unsure, not rewordings of one solution. Put solution i inside "
    "<{tag}_i>...</{tag}_i> (i = 1..{m}), and end each with its own final answer in \\boxed{{}}:\n"
    "<{tag}_1>reasoning ... \\boxed{{answer}}</{tag}_1>\n"
    "...\n"
    "<{tag}_{m}>reasoning ... \\boxed{{answer}}</{tag}_{m}>"
)
_PROMPT = "Solve the following math problem.\n\nProblem: {question}\n\n"  # + _SINGLE_INSTRUCTION (has braces)


def _level(value: Any, row: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"math: row {row}: field 'level' must be 1-5 or 'Level N', got {value!r}")
    if isinstance(value, int):
        level = value
    elif isinstance(value, str) and re.fullmatch(r"(?:Level\s*)?(\d|\?)", value.strip(), re.IGNORECASE):
        digit = value.strip()[-1]
        if digit == "?":  # a few MATH records say "Level ?"
            return None
        level = int(digit)
    else:
        raise ValueError(f"math: row {row}: field 'level' must be 1-5 or 'Level N', got {value!r}")
    if not 1 <= level <= 5:
        raise ValueError(f"math: row {row}: field 'level' must be between 1 and 5, got {level}")
    return level


def from_record(record: Any, row: int | None = None) -> Any:
    """A GSM8K or MATH record in the task schema; other records are returned unchanged for
    ``validate`` to check."""
    if not isinstance(record, Mapping):
        return record
    task = "math"
    if "problem" in record or "solution" in record:  # MATH
        problem = need(record, "problem", str, task, row)
        solution = need(record, "solution", str, task, row)
        answer = last_boxed(solution, _MAX_GOLD_CHARS)
        if not answer:
            raise ValueError(f"{task}: row {row}: field 'solution' has no \\boxed{{}} final answer")
        out = {"id": record.get("id", record.get("unique_id", row)), "question": problem,
               "answer": answer, "solution": solution, "level": _level(record.get("level"), row),
               "type": record.get("type")}
        if record.get("difficulty") is not None:
            out["difficulty"] = record["difficulty"]
        return out
    answer = record.get("answer")
    if isinstance(answer, str) and "####" in answer:  # GSM8K
        need(record, "question", str, task, row)
        final = answer.rsplit("####", 1)[1].strip()
        if not final:
            raise ValueError(f"{task}: row {row}: field 'answer' has nothing after '####'")
        out = dict(record)
        out.update(answer=final, solution=answer)
        out.setdefault("id", row)
        return out
    return record if "id" in record or row is None else {"id": row, **record}


@register_task("math")
class MathTask(FileTask):
    """Math word problems with math-verify answer checking; one component per answer part."""

    objectives = ("correct",)
    rewrite_rule = RewriteRule("math", template=_MULTI_TEMPLATE, pattern=re.escape(_SINGLE_INSTRUCTION),
                               tag="solution")
    ability = "math"
    fixture = FIXTURES["gsm8k"]

    def __init__(self, timeout: float = 1.0, grace: float | None = None,
                 max_answer_chars: int = MAX_ANSWER_CHARS, workers: int = 4) -> None:
        """``timeout``: seconds per answer (parse and every comparison) in the worker; ``grace``:
        extra seconds before a stuck worker is killed (default max(0.5, timeout / 2));
        ``max_answer_chars``: longer final answers score zero unparsed; ``workers``: checking
        processes at most, one per thread scoring at the same time (started on first use)."""
        import importlib.util

        if importlib.util.find_spec("math_verify") is None:
            raise ModuleNotFoundError("the math task needs math-verify: pip install 'vpo[math]'")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.max_answer_chars = int(max_answer_chars)
        self._checker = CheckerPool(int(workers), self.timeout,
                                     max(0.5, self.timeout / 2) if grace is None else float(grace))
        self._keys: OrderedDict[tuple, tuple] = OrderedDict()

    # ----- data ---------------------------------------------------------------------------
    def read_records(self, source: Any, split: str) -> list[Any]:
        if isinstance(source, str) and source.startswith("fixture:"):
            name = source.split(":", 1)[1]
            if name not in FIXTURES:
                raise ValueError(f"math: unknown fixture {name!r}; known: {', '.join(FIXTURES)}")
            source = FIXTURES[name]
        return super().read_records(source, split)

    def convert(self, record: Any, row: int) -> Any:
        return from_record(record, row)

    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example of the task schema; fills ``kind`` and ``parts`` (the gold answer cut
        by ``split_parts``) unless the record gives them."""
        example = super().validate(example, row)
        name = self.name
        need(example, "id", (str, int), name, row)
        question = need(example, "question", str, name, row)
        if not question.strip():
            raise ValueError(f"{name}: row {row}: field 'question' is empty")
        answer = need(example, "answer", (str, int, float), name, row)
        answer = str(answer).strip()
        if not answer:
            raise ValueError(f"{name}: row {row}: field 'answer' is empty")
        if len(answer) > _MAX_GOLD_CHARS:
            raise ValueError(f"{name}: row {row}: field 'answer' is longer than {_MAX_GOLD_CHARS} characters")
        example["answer"] = answer
        if "parts" in example and example["parts"] is not None:
            parts = example["parts"]
            if not isinstance(parts, list) or not parts or not all(isinstance(p, str) and p.strip() for p in parts):
                raise ValueError(f"{name}: row {row}: field 'parts' must be a non-empty list of non-empty str")
            kind = example.get("kind", "set" if len(parts) > 1 else "single")
            if kind not in ("single", "set", "tuple") or (kind == "single") != (len(parts) == 1):
                raise ValueError(f"{name}: row {row}: field 'kind' must be 'single' (one part), 'set' or "
                                 f"'tuple' (2+ parts), got {kind!r} with {len(parts)} parts")
        else:
            kind, parts = split_parts(answer, question)
        example["kind"], example["parts"] = kind, [p.strip() for p in parts]
        example["level"] = _level(example.get("level"), row)
        for field in ("type", "solution"):
            if example.get(field) is not None and not isinstance(example[field], str):
                raise ValueError(f"{name}: row {row}: field {field!r} must be str")
        return example

    # ----- prompts ------------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        return _PROMPT.format(question=example["question"].strip()) + _SINGLE_INSTRUCTION

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        if example is None or len(example["parts"]) == 1:
            return self.objectives
        return (*(f"part_{i + 1}" for i in range(len(example["parts"]))), "no_extra")

    def difficulty(self, example: Example) -> str | None:
        """MATH ``level`` ("1".."5"), else the ``difficulty`` field, else None."""
        if isinstance(example, Mapping) and example.get("level") is not None:
            return str(example["level"])
        return super().difficulty(example)

    def oracle_answers(self, example: Example) -> list[str]:
        """The gold final answer, boxed."""
        return [f"The answer is \\boxed{{{example['answer']}}}."]

    # ----- scoring ------------------------------------------------------------------------
    def _pred(self, text: Any, example: Example) -> tuple[str, tuple[str, ...]] | None:
        final = final_answer(text, self.max_answer_chars)
        if final is None:
            return None
        kind, parts = split_parts(final, example["question"])
        if example["kind"] == "single":
            parts = [_clean(final)]  # one gold part: the whole answer is compared as one value
        return _clean(final), tuple(parts)

    def _remember(self, pred: tuple[str, tuple[str, ...]], kind: str, key: tuple) -> None:
        self._keys[(kind, pred)] = key
        if len(self._keys) > 65536:
            self._keys.popitem(last=False)

    def score(self, text: str, example: Example) -> np.ndarray:
        """Reward vector (D,) of one answer text; never raises on text."""
        return self.score_batch([text], example)[0]

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) vectors; the answers that need sympy go to the worker in one batch."""
        gold_parts = tuple(example["parts"])
        kind, gold_whole = example["kind"], _clean(example["answer"])
        dim = 1 if kind == "single" else len(gold_parts) + 1
        out = np.zeros((len(answers), dim), dtype=np.float64)
        pending: list[tuple[int, tuple]] = []
        gold_ints = [_as_int(g) for g in gold_parts]
        for row, text in enumerate(answers):
            try:
                pred = self._pred(text, example)
            except Exception:  # noqa: BLE001 - model text never raises
                pred = None
            if pred is None:
                continue
            pred_whole, pred_parts = pred
            pred_ints = [_as_int(p) for p in pred_parts]
            if None not in gold_ints and None not in pred_ints:
                # plain integers on both sides: exact in-process comparison (GSM8K's common case)
                hits, precision = _match_parts(kind, gold_ints, pred_ints, lambda a, b: a == b)
                canon = [str(v) for v in pred_ints]
                key = tuple(sorted(set(canon))) if kind == "set" else tuple(canon)
                self._remember(pred, kind, (kind, key))
                out[row] = hits if kind == "single" else (*hits, precision)
            else:
                pending.append((row, (kind, gold_whole, gold_parts, pred_whole, pred_parts), pred))
        if pending:
            results = self._checker.run([item for _, item, _ in pending])
            for (row, _, pred), result in zip(pending, results, strict=True):
                if result is None:
                    continue  # timed out or failed: the zero vector
                hits, precision, key = result
                self._remember(pred, kind, key)
                out[row] = hits if kind == "single" else (*hits, precision)
            lost = sum(result is None for result in results)
            if lost:  # math-verify gave no verdict: failed reward calls (vpo.reward_failures)
                self.report_failures(TimeoutError(f"math-verify gave no verdict within timeout={self.timeout} s "
                                                  f"(or its worker failed) for {lost} of {len(results)} answers"),
                                     lost)
        return out

    def scalar(self, vectors: np.ndarray | Sequence[float]) -> np.ndarray | float:
        """D = 1: the value. D > 1: F1 of the parts, recall = mean of ``part_i`` (all columns but
        the last), precision = ``no_extra`` (the last column); 0 when both are 0."""
        arr = np.asarray(vectors, dtype=np.float64)
        if arr.shape[-1] <= 1:
            out = arr[..., 0] if arr.shape[-1] else np.zeros(arr.shape[:-1])
        else:
            recall, precision = arr[..., :-1].mean(axis=-1), arr[..., -1]
            total = recall + precision
            out = np.where(total > 0, 2 * recall * precision / np.where(total > 0, total, 1.0), 0.0)
        return float(out) if np.ndim(out) == 0 else out

    def dedup_key(self, answer: str, vector: np.ndarray, example: Example) -> Hashable:
        """Answers whose final values are equivalent count once (Multi-RLVR).

        The key is (reward vector, canonical value): integers as integers, numeric
        expressions as their value to 10 significant digits (``\\frac{1}{2}`` = ``0.5``,
        ``\\sqrt{8}`` = ``2\\sqrt{2}``), other expressions as sympy's expanded form, sets as
        sorted element keys. A key is a function of one answer, so equivalence that sympy's
        canonical forms miss (e.g. ``0.333333`` vs ``\\frac{1}{3}``, which math-verify accepts
        at 6 digits) keeps both answers. Answers without a final value share one key. Keys are
        computed while scoring (``score_chain`` scores before it dedups) and kept per task
        object; an answer not scored yet is scored first."""
        try:
            pred = self._pred(answer, example)
        except Exception:  # noqa: BLE001
            pred = None
        if pred is None:
            return (vector.tobytes(), None)
        key = self._keys.get((example["kind"], pred))
        if key is None:  # not scored by this task object yet (or evicted): score it now
            self.score_batch([answer], example)
            key = self._keys.get((example["kind"], pred))
        if key is None:  # the worker failed or ran out of time: the whitespace-free text
            key = ("raw", "".join(pred[0].split()))
        return (vector.tobytes(), key)

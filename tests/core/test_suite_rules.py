"""Rules of the test suite itself, read from its source: no test holds a measured time to a fixed
bound under ``timed_checks.MIN_FIXED_BOUND_S`` (a loaded machine fails such a test by chance; see
tests/timed_checks.py for the ways the suite checks speed instead)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import timed_checks
from timed_checks import LINEAR_MARGIN, MIN_FIXED_BOUND_S, assert_linear

TESTS = Path(__file__).resolve().parents[1]
TIMERS = {"perf_counter", "monotonic", "process_time", "thread_time", "time"}
DURATION_NAMES = {"seconds", "elapsed"}
"""Names the suite gives measured durations when they come back from a helper."""


def _is_timer(node: ast.AST) -> bool:
    """``time.perf_counter()`` and the like (or ``perf_counter()`` imported by name)."""
    if not isinstance(node, ast.Call) or node.args:
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in TIMERS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in TIMERS - {"time"}


class _Scope(ast.NodeVisitor):
    """Every ``assert`` in a module whose comparison holds a measured duration to a bound below
    ``MIN_FIXED_BOUND_S`` that is fixed (numbers and module constants only)."""

    def __init__(self, constants: dict[str, float]) -> None:
        self.constants = constants
        self.stamps: set[str] = set()
        self.durations: set[str] = set(DURATION_NAMES)
        self.deadlines: dict[str, ast.AST] = {}
        self.found: list[tuple[int, str]] = []

    def value(self, node: ast.AST) -> float | None:
        """The number a fixed bound stands for, or None when it is not fixed here."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            return None if inner is None else -inner
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            if left is None or right is None:
                return None
            ops = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
            return ops.get(type(node.op))
        return None

    def is_time(self, node: ast.AST) -> bool:
        return _is_timer(node) or (isinstance(node, ast.Name) and node.id in self.stamps)

    def is_duration(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.durations
        if isinstance(node, ast.Subscript):  # a (seconds, line) pair's seconds
            return self.is_duration(node.value)
        return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and self.is_time(node.left)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        inner = _Scope(self.constants)
        for statement in node.body:
            inner.visit(statement)
        self.found.extend(inner.found)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if _is_timer(node.value):
            self.stamps.update(names)
        elif self.is_duration(node.value) or (isinstance(node.value, ast.ListComp | ast.GeneratorExp) and any(
                self.is_duration(part) for part in ast.walk(node.value))):  # [(seconds, line) for ...]
            self.durations.update(names)
        elif isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) and self.is_time(node.value.left):
            self.deadlines.update({name: node.value.right for name in names})
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            left = compare.left
            for op, right in zip(compare.ops, compare.comparators, strict=True):
                bound = None
                if isinstance(op, ast.Lt | ast.LtE) and self.is_duration(left):
                    bound = right
                elif isinstance(op, ast.Gt | ast.GtE) and self.is_duration(right):
                    bound = left
                elif isinstance(op, ast.Lt | ast.LtE) and self.is_time(left) and isinstance(right, ast.Name):
                    bound = self.deadlines.get(right.id)
                seconds = self.value(bound) if bound is not None else None
                if seconds is not None and seconds < MIN_FIXED_BOUND_S:
                    self.found.append((node.lineno, ast.unparse(compare)))
                left = right


def fixed_time_bounds(source: str) -> list[tuple[int, str]]:
    """``(line, comparison)`` of each assert in ``source`` that holds a measured time to a fixed
    bound under ``MIN_FIXED_BOUND_S``."""
    tree = ast.parse(source)
    # a bound of LIMIT_SLACK times a limit is how a test of a time limit is written: not a fixed bound
    constants = {name: float(value) for name, value in vars(timed_checks).items()
                 if isinstance(value, int | float) and not isinstance(value, bool) and name != "LIMIT_SLACK"}
    scope = _Scope(constants)
    for node in tree.body:  # module constants first: SLEEP_S = 1.0
        if isinstance(node, ast.Assign):
            number = scope.value(node.value)
            if number is not None:
                constants.update({t.id: number for t in node.targets if isinstance(t, ast.Name)})
    scope.visit(tree)
    return scope.found


def test_no_test_holds_a_measured_time_to_a_small_fixed_bound():
    found = [f"{path.relative_to(TESTS)}:{line}: {text}" for path in sorted(TESTS.rglob("*.py"))
             for line, text in fixed_time_bounds(path.read_text())]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("source", [
    "import time\ndef test():\n    start = time.process_time()\n    run()\n    assert time.process_time() - start < 2.0\n",
    "import time\ndef test():\n    t = time.perf_counter()\n    elapsed = time.perf_counter() - t\n    assert elapsed < 1.0\n",
    "import time\nSLEEP_S = 1.0\ndef test():\n    began = time.monotonic()\n    run()\n"
    "    assert x and time.monotonic() - began < SLEEP_S\n",
    "import time\ndef test():\n    deadline = time.monotonic() + 2\n    assert time.monotonic() < deadline\n",
    "def test():\n    err, seconds = refusal()\n    assert seconds < 5, seconds\n",
    "import time\ndef test():\n    begin = time.monotonic()\n    assert 0.85 > time.monotonic() - begin\n",
    "import time\ndef test():\n    start = time.monotonic()\n    lines = [(time.monotonic() - start, x) for x in out]\n"
    "    assert lines[0][0] < 5.0, lines\n",
])
def test_the_rule_finds_each_way_a_small_fixed_bound_is_written(source):
    assert len(fixed_time_bounds(source)) == 1


@pytest.mark.parametrize("source", [
    "import time\ndef test():\n    start = time.perf_counter()\n    assert time.perf_counter() - start < 10\n",
    "import time\ndef test():\n    start = time.monotonic()\n    within_limit(time.monotonic() - start, 0.2)\n",
    "import time\ndef test():\n    start = time.monotonic()\n    assert time.monotonic() - start < LIMIT_SLACK * 0.3\n",
    "import time\ndef test():\n    start = time.monotonic()\n    assert time.monotonic() - start < limits.wall + 10\n",
    "def test():\n    assert len(x) < 2.0\n",
])
def test_the_rule_lets_wide_and_relative_bounds_through(source):
    assert fixed_time_bounds(source) == []


def test_the_linear_check_fails_quadratic_work():
    """``assert_linear`` against work that grows with the square of the text: 100x for 10x the text."""
    text = "ab" * 500_000

    def quadratic(t):
        return sum(t.count(t[i]) for i in range(0, len(t), 200))

    with pytest.raises(AssertionError, match="not linear"):
        assert_linear(quadratic, text)
    assert_linear(lambda t: t.count("a"), text)
    assert LINEAR_MARGIN * 10 < 100  # the margin sits between linear (10x) and quadratic (100x)

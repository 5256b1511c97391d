"""OpenEvolve evaluator for code problems: every candidate runs in ``vpo.sandbox``.

Usage (OpenEvolve loads evaluator *files*; ``vpo.integrations.openevolve`` writes a small
per-problem file that binds the problem and calls ``evaluate_path``)::

    from vpo.integrations.openevolve_evaluator import write_evaluator, evaluate_code
    evaluator_file = write_evaluator(example, "runs/oe/fx_sum", limits=Limits(timeout=2.0))
    result = evaluate_code("print(sum(map(int, open(0).read().split()[1:])))", example)
    result.metrics["combined_score"]          # fraction of tests passed, in [0, 1]

This module is itself a valid evaluator file too: its ``evaluate(program_path)`` reads the
problem from the JSON file named by the environment variable ``VPO_OPENEVOLVE_PROBLEM``
(for ``openevolve-run`` users).

Metrics of a candidate (all floats, so OpenEvolve never averages booleans):

* ``combined_score``: fraction of the problem's D tests passed (OpenEvolve's fitness; a
  failure scores 0.0, never a negative number, since OpenEvolve scores its own timeouts and
  errors 0.0 and a negative score would rank below them);
* ``test_0`` .. ``test_{D-1}``: 1.0 when that test passed;
* ``passed``, ``num_tests``; ``solved``: 1.0 when every test passed.

Artifacts (fed back into OpenEvolve's next prompt): the verdict summary, or the syntax
error. A candidate that does not parse is scored 0 without starting a sandbox. A candidate
that hangs, crashes, floods output or attacks the machine is contained by the sandbox (a
killable process group, rlimits, bubblewrap when present) and costs one evaluation; any
unexpected failure while evaluating a candidate is reported as a 0 score, never raised, so
OpenEvolve neither retries it nor stops.
"""

from __future__ import annotations

import ast
import json
import os
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "EVALUATOR_FILE_NAME",
    "PROBLEM_ENV",
    "PROBLEM_FILE_NAME",
    "evaluate",
    "evaluate_code",
    "evaluate_path",
    "evaluation_timeout",
    "load_problem",
    "write_evaluator",
]

PROBLEM_ENV = "VPO_OPENEVOLVE_PROBLEM"
PROBLEM_FILE_NAME = "problem.json"
EVALUATOR_FILE_NAME = "evaluator.py"

_EVALUATOR_TEMPLATE = '''"""OpenEvolve evaluator for problem {problem_id} (written by vpo; edit the problem JSON, not this)."""

import os

from vpo.integrations.openevolve_evaluator import evaluate_path

PROBLEM = os.path.join(os.path.dirname(os.path.abspath(__file__)), {problem_name!r})


def evaluate(program_path):
    return evaluate_path(program_path, PROBLEM)
'''


def _limits_from(problem: Mapping[str, Any]) -> Any:
    from vpo.sandbox import Limits

    raw = problem.get("limits") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"problem {problem.get('id')!r}: 'limits' must be a mapping of vpo.sandbox.Limits fields")
    return Limits(**raw)


def _task_for(problem: Mapping[str, Any]) -> Any:
    from vpo.tasks.code import CodeTask

    return CodeTask(limits=_limits_from(problem), workers=1)


def load_problem(path: str | Path) -> dict[str, Any]:
    """Read and validate a problem JSON (a ``code`` task example plus optional ``limits``)."""
    path = Path(path)
    try:
        problem = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the OpenEvolve problem file {path}: {exc}") from exc
    _task_for(problem).validate(problem)
    return problem


def evaluation_timeout(problem: Mapping[str, Any], slack: float = 30.0) -> int:
    """Seconds OpenEvolve should allow one evaluation: the sandbox's own backstop for this
    problem (sum of per-test wall limits plus its slack) plus ``slack``. The sandbox always
    returns before that, so OpenEvolve's un-killable thread timeout never fires."""
    limits = _limits_from(problem)
    tests = len(problem["tests"])
    jobs = tests if problem.get("mode") == "humaneval" else 1   # humaneval script tests run one job each
    return int(tests * (limits.wall + 0.5) + 10.0 * jobs + slack) + 1


def _result(metrics: dict[str, float], artifacts: dict[str, str]) -> Any:
    from openevolve.evaluation_result import EvaluationResult

    return EvaluationResult(metrics=metrics, artifacts=artifacts)


def _zero_metrics(dim: int) -> dict[str, float]:
    metrics = {"combined_score": 0.0, "passed": 0.0, "num_tests": float(dim), "solved": 0.0}
    metrics.update({f"test_{j}": 0.0 for j in range(dim)})
    return metrics


def evaluate_code(code: str, problem: Mapping[str, Any]) -> Any:
    """Score one candidate program on ``problem``: an OpenEvolve ``EvaluationResult``
    (metrics as in the module docstring, artifacts with the verdict summary).

    Never raises because of the candidate; raises ValueError for a malformed problem."""
    dim = len(problem["tests"])
    task = _task_for(problem)
    if not isinstance(code, str) or not code.strip():
        return _result(_zero_metrics(dim), {"verdict": "empty program"})
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return _result(_zero_metrics(dim), {"verdict": f"does not parse: {type(exc).__name__}: {exc}"[:500]})
    try:
        row = task.score_programs([code], dict(problem))[0]
    except Exception as exc:  # noqa: BLE001 - a candidate must never stop the search
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return _result(_zero_metrics(dim), {"verdict": f"evaluation failed: {detail}"[:500]})
    passed = [bool(x >= 1.0) for x in row]
    metrics = {"combined_score": float(min(1.0, max(0.0, sum(passed) / dim))), "passed": float(sum(passed)),
               "num_tests": float(dim), "solved": float(all(passed))}
    metrics.update({f"test_{j}": float(ok) for j, ok in enumerate(passed)})
    failing = [str(j) for j, ok in enumerate(passed) if not ok]
    summary = f"passed {sum(passed)} of {dim} tests"
    if failing:
        summary += f"; failing tests: {', '.join(failing[:16])}" + (" ..." if len(failing) > 16 else "")
    return _result(metrics, {"verdict": summary})


def evaluate_path(program_path: str | Path, problem_path: str | Path) -> Any:
    """``evaluate_code`` on the program file ``program_path`` for the problem JSON at
    ``problem_path`` (what the per-problem evaluator file calls)."""
    problem = load_problem(problem_path)
    try:
        code = Path(program_path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return _result(_zero_metrics(len(problem["tests"])), {"verdict": f"cannot read the program: {exc}"})
    return evaluate_code(code, problem)


def evaluate(program_path: str) -> Any:
    """OpenEvolve entry point when this module is used as the evaluator file directly: the
    problem JSON is named by the ``VPO_OPENEVOLVE_PROBLEM`` environment variable."""
    problem_path = os.environ.get(PROBLEM_ENV)
    if not problem_path:
        raise ValueError(f"set {PROBLEM_ENV} to the problem JSON file (or use write_evaluator)")
    return evaluate_path(program_path, problem_path)


def write_evaluator(problem: Mapping[str, Any], directory: str | Path, *, limits: Any = None) -> Path:
    """Write ``directory/problem.json`` (the problem, with ``limits`` when given, a
    ``vpo.sandbox.Limits``) and ``directory/evaluator.py`` bound to it (by a path relative to
    itself, so the folder can move); returns the evaluator file's path (absolute, as
    OpenEvolve's workers need)."""
    from dataclasses import asdict

    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    data = dict(problem)
    if limits is not None:
        data["limits"] = {k: v for k, v in asdict(limits).items() if v is not None}
    _task_for(data).validate(data)
    problem_path = directory / PROBLEM_FILE_NAME
    problem_path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    evaluator_path = directory / EVALUATOR_FILE_NAME
    evaluator_path.write_text(_EVALUATOR_TEMPLATE.format(problem_id=str(data.get("id", "?")).replace('"', "'"),
                                                         problem_name=PROBLEM_FILE_NAME), encoding="utf-8")
    return evaluator_path

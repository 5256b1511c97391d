"""Verdicts from raw outputs, with LiveCodeBench's comparison semantics; runs in the trusted
parent, which alone holds the expected outputs.

Usage::

    from vpo.sandbox.compare import compare_stdin, compare_functional
    compare_stdin("2.50\\n", "2.5")          # True (Decimal-equal tokens)
    compare_functional("[0, 1]", "[0,1]")    # True
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from vpo.sandbox.limits import Verdict


def _decimal_tokens(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def compare_stdin(output: str, expected: str) -> bool:
    """LiveCodeBench's stdin check: strip both texts, split on newlines, strip each line;
    line counts must match; each line is equal, or its whitespace tokens parse as ``Decimal``
    and are equal pairwise."""
    got_lines = output.strip().split("\n")
    want_lines = expected.strip().split("\n")
    if len(got_lines) != len(want_lines):
        return False
    for got, want in zip(got_lines, want_lines, strict=True):
        got, want = got.strip(), want.strip()
        if got == want:
            continue
        got_num, want_num = _decimal_tokens(got), _decimal_tokens(want)
        if got_num is None or want_num is None or got_num != want_num:
            return False
    return True


def compare_functional(result_json: str | None, expected: str) -> bool:
    """LiveCodeBench's functional check: the JSON-encoded return value (tuples already
    lists) equals ``json.loads(expected)`` under ``==``."""
    if result_json is None:
        return False
    try:
        got = json.loads(result_json)
    except ValueError:
        return False
    want = json.loads(expected)
    if isinstance(got, tuple):
        got = list(got)
    return bool(got == want)


def verdict(entry: dict[str, Any], expected: str, mode: str) -> Verdict:
    """The ``Verdict`` of one driver report (``{"status", "time", "wall", "out", "detail"}``)."""
    status = entry.get("status")
    cpu = float(entry.get("time", 0.0) or 0.0)
    wall = float(entry.get("wall", 0.0) or 0.0)
    detail = str(entry.get("detail", ""))
    if status == "ok":
        out = entry.get("out")
        if mode == "stdin":
            good = isinstance(out, str) and compare_stdin(out, expected)
        else:
            good = compare_functional(out if isinstance(out, str) else None, expected)
        return Verdict("pass" if good else "wrong", cpu, wall, "" if good else detail or "wrong answer")
    if status in ("timeout", "error", "memory"):
        return Verdict(status, cpu, wall, detail)
    return Verdict("error", cpu, wall, f"unknown driver status {status!r}")

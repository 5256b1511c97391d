"""How the suite checks speed without failing by chance on a shared, loaded machine.

* A linear-time check compares sizes in one run: ``assert_linear`` times the work on a text and on
  a tenth of it (its head and its tail), and allows the large one ``LINEAR_MARGIN`` times the tenfold (CPU time, the best
  of a few runs of the small one). Linear code takes about 10x; quadratic code takes 100x.
* A test of a time limit it set allows ``LIMIT_SLACK`` times that limit (``within_limit``), and the
  call the limit cuts short hangs far longer (``HANG_S``): only a limit that does not act fails it.
* No test compares a measured time with a fixed bound under ``MIN_FIXED_BOUND_S`` seconds
  (tests/core/test_suite_rules.py reads every test for it).

Usage::

    from timed_checks import assert_linear, within_limit
    assert_linear(lambda text: parse_answers(text, 8, tag="route"), "<route_1>" * 111_112)
    within_limit(seconds, limit=0.3)
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

LINEAR_MARGIN = 4.0
"""How many times the tenfold of the small text's time the large text may take (linear: 1x)."""

FLOOR_S = 0.005
"""The small text's time counts as at least this (CPU-timer resolution, fixed costs)."""

LIMIT_SLACK = 20.0
"""A test of a time limit it set allows this many times the limit (threads and processes start late
on a loaded machine); what it guards against, a call that is not stopped, runs ``HANG_S``."""

HANG_S = 120.0
"""How long a call that a test's time limit must cut short would run."""

MIN_FIXED_BOUND_S = 10.0
"""The least fixed bound a test may hold a measured time to (a refusal before any work: 0.1-2 s idle)."""


def cpu_seconds(run: Callable[[str], Any], text: str) -> float:
    """CPU seconds of ``run(text)`` in this process (robust to other processes on shared cores).
    The garbage collector is off while it runs: a full collection walks every object the process
    holds, so work that makes many objects looks superlinear late in a long test session. (No
    collection before it either: late in a session one costs more than the work measured.)"""
    was_on = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time()
        run(text)
        return time.process_time() - start
    finally:
        if was_on:
            gc.enable()


def assert_linear(run: Callable[[str], Any], text: str, *, share: int = 10, repeats: int = 3,
                  attempts: int = 3) -> None:
    """``run`` is linear in the length of ``text``: its CPU time on ``text`` is at most
    ``LINEAR_MARGIN`` x ``share`` x its time on ``1/share`` of ``text``, half from its head and
    half from its tail (the best of ``repeats`` runs, at least ``FLOOR_S``). A machine busy with
    other work slows one measurement more than another (shared caches and cores): up to
    ``attempts`` rounds measure both again, and the best times of all rounds count; quadratic
    work fails every round."""
    half = len(text) // share // 2
    small = text[:half] + text[-half:]  # its head and its tail: the closing tags a parser looks for too
    small_s = large_s = float("inf")
    for _ in range(attempts):
        small_s = min([small_s] + [cpu_seconds(run, small) for _ in range(repeats)])
        large_s = min(large_s, cpu_seconds(run, text))
        bound = LINEAR_MARGIN * share * max(small_s, FLOOR_S)
        if large_s <= bound:
            return
    raise AssertionError(f"{large_s:.3f} s on {len(text):,} characters against {small_s:.4f} s on {len(small):,}: "
                         f"more than {LINEAR_MARGIN:g} x {share} times in each of {attempts} rounds (not linear)")


def within_limit(seconds: float, limit: float) -> None:
    """A call cut short at ``limit`` seconds took at most ``LIMIT_SLACK`` times that."""
    assert seconds < LIMIT_SLACK * limit, f"{seconds:.2f} s for a limit of {limit:g} s (x{LIMIT_SLACK:g} allowed)"

"""CPU threads and worker processes picked from the cores that are free now, not from the cores
the machine has: on a machine shared with other jobs, more torch threads than free cores spin
against each other (``vpo eval`` took 46-53 s with torch's default threads where 1 thread took 8 s).

Usage::

    from vpo.cores import pick_threads
    threads, why = pick_threads()   # e.g. (1, "1 of 2 cores free: load average 1.3")
"""

from __future__ import annotations

import os

IDLE_LOAD = 0.5
"""A 1-minute load average below this (half a core busy) reads as an otherwise idle machine."""


def free_cores() -> tuple[int, int, float]:
    """(free, usable, load): the cores this process may run on, the 1-minute load average, and
    how many of the cores that leaves free (at least 1)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: assume idle
        load = 0.0
    return max(1, min(usable, round(usable - load))), usable, load


def _why(free: int, usable: int, load: float) -> str:
    return f"{free} of {usable} cores free: load average {load:.1f}"


def pick_threads(workers: int = 1) -> tuple[int, str]:
    """Torch threads per process for ``workers`` processes sharing the free cores (at least 1),
    and why, in words."""
    free, usable, load = free_cores()
    return max(1, free // max(1, workers)), _why(free, usable, load)


def pick_workers(jobs: int, threads: int = 1) -> tuple[int, str]:
    """Worker processes for ``jobs`` jobs of ``threads`` torch threads each: as many as the free
    cores hold (at least 1, at most ``jobs``), and why, in words."""
    free, usable, load = free_cores()
    return max(1, min(jobs, free // max(1, threads))), _why(free, usable, load)


__all__ = ["IDLE_LOAD", "free_cores", "pick_threads", "pick_workers"]

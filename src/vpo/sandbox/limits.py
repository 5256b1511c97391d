"""The value types of ``vpo.sandbox``: per-test ``Limits``, a test's ``Verdict``, a ``Program``.

Usage::

    from vpo.sandbox import Limits, Program
    Program("print(input())", [("a\\n", "a")], limits=Limits(timeout=2.0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VERDICTS = ("pass", "wrong", "timeout", "error", "memory")
MODES = ("stdin", "functional")


@dataclass(frozen=True)
class Limits:
    """Per-test resource limits. ``wall_timeout`` defaults to ``2 * timeout + 1`` seconds."""

    timeout: float = 6.0
    """CPU seconds per test (LiveCodeBench: 6)."""
    wall_timeout: float | None = None
    """Wall-clock seconds per test (covers sleeping and blocked programs)."""
    memory_mb: int = 1024
    """Address-space limit per test (RLIMIT_AS), MiB."""
    file_size_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE), MiB."""
    tmp_size_mb: int = 64
    """Size of the private /tmp (bubblewrap mode), MiB."""
    open_files: int = 64
    """RLIMIT_NOFILE."""
    processes: int = 16
    """Extra processes/threads the program may create (RLIMIT_NPROC headroom)."""
    output_bytes: int = 4 << 20
    """Cap on a test's captured output; more is an ``error``."""

    def __post_init__(self) -> None:
        for name in ("timeout", "memory_mb", "file_size_mb", "tmp_size_mb", "open_files", "output_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if not math.isfinite(self.timeout):
            raise ValueError(f"Limits.timeout must be finite, got {self.timeout!r}")
        if isinstance(self.processes, bool) or not isinstance(self.processes, int) or self.processes < 0:
            raise ValueError(f"Limits.processes must be an integer >= 0, got {self.processes!r}")
        if self.wall_timeout is not None and not (
                isinstance(self.wall_timeout, int | float) and math.isfinite(self.wall_timeout)
                and self.wall_timeout > 0):
            raise ValueError(f"Limits.wall_timeout must be a positive number, got {self.wall_timeout!r}")
        if self.memory_mb < 64:
            raise ValueError(f"Limits.memory_mb must be at least 64 (the interpreter needs it), got {self.memory_mb}")

    @property
    def wall(self) -> float:
        """The effective wall-clock limit per test."""
        return float(self.wall_timeout) if self.wall_timeout is not None else 2.0 * self.timeout + 1.0


@dataclass(frozen=True)
class Verdict:
    """Outcome of one test."""

    status: str
    """One of ``VERDICTS``."""
    time: float = 0.0
    """CPU seconds the test used."""
    wall: float = 0.0
    """Wall-clock seconds of the test."""
    detail: str = ""
    """Why (error message, limit hit); empty on pass."""
    sandbox_fault: bool = False
    """True when the sandbox itself could not judge the test (it failed to start, or its worker
    ended before the test reported), as opposed to anything the program did: a reward failure
    (``vpo.reward_failures``), not a verdict on the program."""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class Program:
    """One program and its tests, for ``run_batch``."""

    code: str
    tests: Sequence[Any]
    mode: str = "stdin"
    fn_name: str | None = None
    limits: Limits | None = None

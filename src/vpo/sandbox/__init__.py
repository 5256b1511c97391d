"""Run untrusted Python programs against test cases: one verdict per test, every test run.

Usage::

    from vpo.sandbox import Limits, run_tests, run_batch
    verdicts = run_tests("print(int(input()) * 2)", [("21\\n", "42"), ("1\\n", "3")])
    [v.status for v in verdicts]                      # ['pass', 'wrong']
    run_tests(src, [("[1, 2]\\n3", "[0, 1]")], mode="functional", fn_name="twoSum",
              limits=Limits(timeout=2.0))
    run_batch([Program(src_a, tests), Program(src_b, tests)])   # parallel, one list each
    shutdown()                                        # stop the warm workers (also at exit)

Verdicts: ``pass``, ``wrong``, ``timeout``, ``error`` (runtime error, crash, output over its
cap, or the sandbox lost the test) and ``memory`` (``MemoryError`` under the address-space
limit), each with its CPU and wall time.

Modules: ``limits`` (``Limits``, ``Verdict``, ``Program``), ``compare`` (LiveCodeBench
comparison, in the parent), ``isolation`` (bubblewrap, uid, environment), ``pool`` (warm
workers), ``driver`` (stdlib-only, runs inside the sandbox).

How a program runs. Warm workers: a worker is a sandbox started once (bubblewrap
and the system interpreter, the driver and the preamble's modules imported) that runs
programs one at a time, sent over a pipe. For each program it forks a fresh *leader*, which
forks one fresh *test* process per test with the test's limits and a wall deadline, so a
timeout or crash loses only that test; after each test every other process of the program is
killed. The pool keeps idle workers between calls (``run_batch`` and ``run_tests`` reuse
them); ``run_batch`` uses ``workers`` threads (default: the cores), each holding one worker.
The parent keeps a backstop (the sum of the per-test wall limits plus slack); tests not
reported by then are ``timeout``. A worker that dies mid-program is replaced and the
program's unreported tests run once more in the new one; still unreported, they are
``error``.

Threat model. A program is untrusted code; it runs as an unprivileged uid (``nobody`` when
we are root) with no capabilities, and, with bubblewrap, in its own user, pid, ipc, uts,
network (none) and mount namespaces with a read-only ``/usr`` and a size-capped private
tmpfs at ``/tmp``, its working directory, under a seccomp filter that denies the kernel
keyring calls (keys outlive namespaces and are listed to every process of the uid). Per
test: CPU, address-space, file-size, open-file, process and message-queue rlimits. Expected outputs never enter the sandbox: the
driver returns raw outputs and the parent compares (``compare_stdin``, ``compare_functional``).

What one program can and cannot do to the next program in the same worker:

* It cannot change the worker's Python state (``sys.modules``, builtins, the stdlib): it runs
  in forked copies, and the worker itself never runs program code. It cannot read the worker's
  or leader's memory or file descriptors (both non-dumpable), nor find an earlier program's
  source or outputs in the memory it was forked from (leaders parse their frame; the worker
  zeroes the frame buffer and never sees outputs, which leaders send straight to the parent).
* It cannot kill or stop the worker from inside (the worker is pid 1 of the namespace, which
  ignores unhandled signals from it); killing its leader loses only its own remaining tests.
* It cannot leave processes (all killed after each test and again after the program), files
  (the worker empties ``/tmp`` after every program), System V IPC objects (the worker checks
  its ipc namespace and is replaced when any exist), POSIX message queues (capped at 0
  bytes) or keys (denied by the seccomp filter; the worker also checks ``/proc/keys``).
* It can change, as the same uid, the worker's rlimits, nice value, scheduler policy and CPU
  affinity: the worker compares them with their start-up values after every program and is
  replaced on any change. Not checked: its I/O priority (``ioprio_set``), which affects only
  speed, not verdicts (the tmpfs is in memory).
* The tests of one program share its ``/tmp`` and can see each other's inputs, as before.
* Denial of service only: a program that stops its own leader (``SIGSTOP``) holds its worker
  until the backstop, as it held its sandbox before; one that changes the worker's state
  costs the next program a worker start-up.

Without bubblewrap (rlimit-only mode, ``RuntimeWarning`` once) there are no namespaces: only
the rlimits, the uid drop and a private working directory per worker (emptied after every
program, removed with the worker) apply; files readable by the sandbox user stay readable,
and a program can signal other processes of that uid, workers included (a killed worker is
replaced; a killed test is an ``error``).

``VPO_SANDBOX_ISOLATION=auto|bwrap|rlimit`` overrides the isolation choice.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from vpo.sandbox import isolation
from vpo.sandbox.compare import compare_functional, compare_stdin
from vpo.sandbox.isolation import _interpreter, isolation_mode
from vpo.sandbox.limits import MODES, VERDICTS, Limits, Program, Verdict
from vpo.sandbox.pool import Slot, _driver_bundle, run_program, shutdown, worker_pids

__all__ = [
    "Limits",
    "MODES",
    "Program",
    "Verdict",
    "VERDICTS",
    "compare_functional",
    "compare_stdin",
    "default_workers",
    "isolation_mode",
    "run_batch",
    "run_tests",
    "shutdown",
]

_ = (isolation, _interpreter, worker_pids)  # re-exported for benchmarks and tests


def _normalise_tests(tests: Sequence[Any], mode: str) -> tuple[list[str], list[str]]:
    if isinstance(tests, str | bytes) or not isinstance(tests, Sequence):
        raise ValueError(f"tests must be a sequence of (input, output) pairs or mappings, got {type(tests).__name__}")
    inputs, outputs = [], []
    for i, test in enumerate(tests):
        if isinstance(test, Mapping):
            if "input" not in test or "output" not in test:
                raise ValueError(f"test {i}: a mapping needs 'input' and 'output' keys")
            test_in, test_out = test["input"], test["output"]
        elif isinstance(test, Sequence) and not isinstance(test, str | bytes) and len(test) == 2:
            test_in, test_out = test
        else:
            raise ValueError(f"test {i}: expected an (input, output) pair or a mapping, got {test!r:.80}")
        if not isinstance(test_in, str) or not isinstance(test_out, str):
            raise ValueError(f"test {i}: input and output must be strings")
        if mode == "functional":
            for part, what in ((test_out, "output"), *((line, "input line") for line in test_in.split("\n")
                                                       if line.strip())):
                try:
                    json.loads(part)
                except ValueError as exc:
                    raise ValueError(f"test {i}: functional {what} is not JSON: {part[:80]!r}") from exc
        inputs.append(test_in)
        outputs.append(test_out)
    return inputs, outputs


def _check_call(code: Any, mode: str, fn_name: str | None) -> None:
    if not isinstance(code, str):
        raise ValueError(f"code must be a string, got {type(code).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "functional" and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ValueError(f"functional mode needs fn_name, a Python identifier; got {fn_name!r}")


def run_tests(code: str, tests: Sequence[Any], *, mode: str = "stdin", fn_name: str | None = None,
              limits: Limits | None = None) -> list[Verdict]:
    """Run ``code`` on every test; one ``Verdict`` per test, in order.

    ``tests``: (input, expected output) pairs or ``{"input", "output"}`` mappings of strings.
    ``mode="stdin"``: input on stdin, stdout compared by ``compare_stdin``.
    ``mode="functional"``: ``input`` holds one JSON argument per line; ``Solution().fn_name``
    (or a top-level function ``fn_name``) is called and compared by ``compare_functional``.
    Raises ValueError for malformed arguments; never raises because of the program.
    """
    _check_call(code, mode, fn_name)
    limits = limits if limits is not None else Limits()
    if not isinstance(limits, Limits):
        raise ValueError(f"limits must be a vpo.sandbox.Limits, got {type(limits).__name__}")
    inputs, outputs = _normalise_tests(tests, mode)
    if not inputs:
        return []
    mode_now = isolation_mode()
    slot = Slot()
    try:
        return run_program(code, inputs, outputs, mode, fn_name, limits, mode_now, slot)
    finally:
        slot.release()


def default_workers() -> int:
    """Pool size for ``run_batch``: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_batch(programs: Sequence[Program | Mapping[str, Any]], *, workers: int | None = None,
              limits: Limits | None = None) -> list[list[Verdict]]:
    """Run many programs in parallel on ``workers`` warm workers (default: the core count).

    Each item is a ``Program`` or a mapping with its fields (``code``, ``tests``, optional
    ``mode``, ``fn_name``, ``limits``); ``limits`` here is the default for items without one.
    Returns one verdict list per program, in order. Arguments are checked before anything runs.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    prepared: list[tuple[Program, Limits, list[str], list[str]]] = []
    for i, item in enumerate(programs):
        if isinstance(item, Mapping):
            unknown = set(item) - {"code", "tests", "mode", "fn_name", "limits"}
            if unknown or "code" not in item or "tests" not in item:
                raise ValueError(f"program {i}: needs 'code' and 'tests' (unknown keys: {sorted(unknown)})")
            item = Program(**item)
        if not isinstance(item, Program):
            raise ValueError(f"program {i}: expected a Program or a mapping, got {type(item).__name__}")
        _check_call(item.code, item.mode, item.fn_name)
        item_limits = item.limits if item.limits is not None else (limits if limits is not None else Limits())
        if not isinstance(item_limits, Limits):
            raise ValueError(f"program {i}: limits must be a vpo.sandbox.Limits, got {type(item_limits).__name__}")
        inputs, outputs = _normalise_tests(item.tests, item.mode)
        prepared.append((item, item_limits, inputs, outputs))
    if not prepared:
        return []
    mode_now = isolation_mode()  # probe (and warn) once, before the threads start
    _driver_bundle(_interpreter())
    results: list[list[Verdict]] = [[] for _ in prepared]
    order = iter(i for i, item in enumerate(prepared) if item[2])
    order_lock = threading.Lock()

    def take() -> int | None:
        with order_lock:
            return next(order, None)

    def worker() -> None:
        slot = Slot()
        try:
            while (index := take()) is not None:
                job, job_limits, inputs, outputs = prepared[index]
                results[index] = run_program(job.code, inputs, outputs, job.mode, job.fn_name, job_limits,
                                             mode_now, slot)
        finally:
            slot.release()

    n_jobs = sum(1 for item in prepared if item[2])
    n_workers = min(workers or default_workers(), max(1, n_jobs))
    if n_workers == 1:
        worker()
        return results
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="vpo-sandbox") as pool:
        for future in [pool.submit(worker) for _ in range(n_workers)]:
            future.result()
    return results

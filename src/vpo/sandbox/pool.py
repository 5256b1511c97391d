"""Warm sandboxed workers: each starts once (bubblewrap, interpreter, driver imports) and then
runs programs one at a time, sent over a pipe; the pool keeps idle workers for later calls.

Usage::

    from vpo.sandbox.pool import Slot, run_program, shutdown
    slot = Slot()                          # one thread's hold on a worker
    verdicts = run_program(code, inputs, outputs, "stdin", None, Limits(), "bwrap", slot)
    slot.release()                         # back to the pool for the next caller
    shutdown()                             # stop every idle worker (also done at exit)

A worker is replaced when it dies, overruns its backstop or reports that it could not restore
itself after a program (``dirty``). A program whose worker died before all its tests
reported has those tests run once more in a new worker; tests still missing then are
``error`` (``timeout`` when the backstop was reached). The threat model is in the package
docstring (``vpo.sandbox``); the worker's side is ``vpo.sandbox.driver``.
"""

from __future__ import annotations

import json
import marshal
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vpo.sandbox.compare import verdict
from vpo.sandbox.isolation import (_as_sandbox_user, _bwrap_command, _count_processes_of, _environment,
                                   _interpreter, _sandbox_user, _seccomp_fd)
from vpo.sandbox.limits import Limits, Verdict
from vpo.warm_pool import WarmPool

_DRIVER_PATH = Path(__file__).with_name("driver.py")
_FRAME_HEADER = 8
_ERR_CAP = 1 << 16

# ----- the driver, compiled once per interpreter ---------------------------------------------

_driver_source_cache: list[str] = []


def _driver_source() -> str:
    if not _driver_source_cache:
        _driver_source_cache.append(_DRIVER_PATH.read_text(encoding="utf-8"))
    return _driver_source_cache[0]


# The driver runs as bytecode compiled once per interpreter by that interpreter (so marshal's
# code format always matches), sent on stdin ahead of the programs; ``-S`` skips ``site``,
# whose ``sys.path`` the build records for the driver to restore.
_BOOTSTRAP = ("import marshal,sys;c,b=marshal.load(sys.stdin.buffer);"
              "exec(c,{'__name__':'__main__','_VPO_BUILD':b})")
_BUILD_SCRIPT = """\
import marshal, sys
code = compile(sys.stdin.read(), "<vpo-sandbox-driver>", "exec", dont_inherit=True)
path = [p for p in sys.path if p not in ("", ".")]
sys.stdout.buffer.write(marshal.dumps((code, {"path": path})))
"""
_bundle_lock = threading.Lock()
_bundle_cache: dict[str, bytes | None] = {}


def _driver_bundle(python: str) -> bytes | None:
    """The marshalled (driver bytecode, build info) for ``python``; None if the build fails
    (the driver then runs from source)."""
    with _bundle_lock:
        if python not in _bundle_cache:
            cmd, kwargs = _as_sandbox_user([python, "-s", "-B", "-c", _BUILD_SCRIPT])
            bundle = None
            try:
                done = subprocess.run(cmd, input=_driver_source().encode(), capture_output=True, timeout=60,
                                      env=_environment(), cwd="/", **kwargs)
                if done.returncode == 0 and done.stdout:
                    bundle = done.stdout
            except (OSError, subprocess.SubprocessError):
                pass
            _bundle_cache[python] = bundle
        return _bundle_cache[python]


# ----- starting processes from one long-lived thread ----------------------------------------

# ``bwrap --die-with-parent`` (PR_SET_PDEATHSIG) fires when the *thread* that started it ends,
# and workers outlive the threads of the ``run_batch`` call that started them: every worker is
# started from this one thread, which lives as long as the process.
_spawner_lock = threading.Lock()
_spawner: list[Any] = [None, None]  # [executor, owner pid]


def _spawn(fn: Any) -> Any:
    with _spawner_lock:
        if _spawner[0] is None or _spawner[1] != os.getpid():
            _spawner[0] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vpo-sandbox-spawner")
            _spawner[1] = os.getpid()
        executor = _spawner[0]
    return executor.submit(fn).result()


# ----- one worker ------------------------------------------------------------------------------


def _remove_tree(path: str) -> None:
    def make_writable(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable)


class _Worker:
    """A started sandbox running ``driver.main`` (see its docstring for the protocol)."""

    def __init__(self, isolation: str, tmp_size_mb: int) -> None:
        self.key = (isolation, int(tmp_size_mb))
        self.isolation = isolation
        self.usable = True
        self.ready = False
        self.programs = 0
        self.err = bytearray()
        self.workdir: str | None = None
        python = _interpreter()
        bundle = _driver_bundle(python)
        if bundle is not None:
            driver = [python, "-S", "-s", "-B", "-c", _BOOTSTRAP]
        else:
            driver, bundle = [python, "-s", "-B", "-c", _driver_source()], b""
        self._unsent = bundle
        seccomp_fd = None
        if isolation == "bwrap":
            seccomp_fd = _seccomp_fd()
            cmd, cwd = _bwrap_command(python, tmp_size_mb, seccomp_fd) + driver, "/"
        else:
            # Without bubblewrap: a private directory per worker, emptied by the worker after
            # every program.
            self.workdir = tempfile.mkdtemp(prefix="vpo-sandbox-")
            user = _sandbox_user()
            if user is not None:
                os.chown(self.workdir, user[0], user[1])
            os.chmod(self.workdir, 0o700)
            cmd, cwd = driver, self.workdir
        cmd, kwargs = _as_sandbox_user(cmd)
        try:
            self.proc = _spawn(lambda: subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                env=_environment(), cwd=cwd, start_new_session=True, close_fds=True,
                pass_fds=() if seccomp_fd is None else (seccomp_fd,), **kwargs))
        except BaseException:
            if self.workdir is not None:
                _remove_tree(self.workdir)
            raise
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def run(self, frame: bytes, n_tests: int, deadline: float) -> tuple[dict[int, dict[str, Any]], str, str]:
        """Send one program, collect its reports by test index until the worker says it is done.

        Returns (reports, outcome, detail); outcome is ``done``, ``dirty`` (done, but the worker
        must be replaced), ``lost`` (the worker ended first) or ``backstop`` (``deadline``
        passed; the worker is then killed)."""
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        in_fd, out_fd, err_fd = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        # Before the worker says it is ready only the driver bundle is sent: its bootstrap reads
        # with a buffered reader, which must not swallow part of a frame.
        to_send = memoryview(self._unsent + frame if self.ready else self._unsent)
        self._unsent = b""
        frame_queued = self.ready
        reports: dict[int, dict[str, Any]] = {}
        buf = bytearray()
        scan = 0
        outcome, detail = "", ""
        sel = selectors.DefaultSelector()
        try:
            sel.register(out_fd, selectors.EVENT_READ)
            sel.register(err_fd, selectors.EVENT_READ)
            writing = False
            while not outcome:
                if to_send and not writing:
                    sel.register(in_fd, selectors.EVENT_WRITE)
                    writing = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    outcome = "backstop"
                    break
                for key, _ in sel.select(min(remaining, 5.0)):
                    fd = key.fd
                    if fd == in_fd:
                        try:
                            sent = os.write(in_fd, to_send[: 1 << 16])
                        except BlockingIOError:
                            continue
                        except OSError:
                            sent = len(to_send)  # the worker is gone: its stdout will say so
                        to_send = to_send[sent:]
                        if not to_send:
                            sel.unregister(in_fd)
                            writing = False
                        continue
                    try:
                        chunk = os.read(fd, 1 << 18)
                    except OSError:
                        chunk = b""
                    if fd == err_fd:
                        if not chunk:
                            sel.unregister(err_fd)
                        else:
                            self.err += chunk
                            del self.err[: max(0, len(self.err) - _ERR_CAP)]
                        continue
                    if not chunk:
                        outcome = "lost"
                        break
                    buf += chunk
                    start = 0
                    while True:
                        end = buf.find(b"\n", scan)
                        if end < 0:
                            break
                        line = bytes(buf[start:end])
                        start = scan = end + 1
                        if not line.strip():
                            continue
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue
                        if not isinstance(entry, dict):
                            continue
                        if entry.get("done") is True:
                            dirty = entry.get("dirty")
                            cpu = entry.get("cpu")
                            if isinstance(cpu, list) and len(cpu) == 2 and all(isinstance(c, float) for c in cpu):
                                _note_cpu(self, float(cpu[0]), float(cpu[1]))
                            outcome, detail = ("dirty", str(dirty)) if dirty is not None else ("done", "")
                            break
                        if entry.get("ready") is True and not self.ready:
                            self.ready = True
                            if not frame_queued:
                                to_send = memoryview(bytes(to_send) + frame)
                                frame_queued = True
                            continue
                        i = entry.get("i")
                        if isinstance(i, int) and 0 <= i < n_tests:
                            reports.setdefault(i, entry)
                    del buf[:start]
                    scan -= start
                    if outcome:
                        break
        finally:
            sel.close()
        self.programs += 1
        if outcome != "done":
            self.usable = False
            if outcome == "lost":
                self._drain_err()
                detail = self.err.decode("utf-8", "replace")[-500:].strip()
            self.close()
        return reports, outcome, detail

    def _drain_err(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        os.set_blocking(fd, False)
        try:
            while len(self.err) < 4 * _ERR_CAP:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                self.err += chunk
        except OSError:
            pass

    def alive(self) -> bool:
        return self.usable and self.proc.poll() is None

    def close(self) -> None:
        """Kill the worker and everything in its sandbox (bubblewrap: the namespace ends with
        its pid 1), reap it and remove its directory."""
        self.usable = False
        proc = self.proc
        if proc.returncode is None:
            # Not reaped yet, so its pid (and group id) cannot have been reused.
            for kill in (os.killpg, os.kill):
                try:
                    kill(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self.workdir is not None:
            _remove_tree(self.workdir)
            self.workdir = None


_cpu_lock = threading.Lock()
_cpu_seen: dict[int, tuple[float, float]] = {}
_cpu_total = [0.0]


def _note_cpu(worker: _Worker, own: float, children: float) -> None:
    """Add what a worker's sandbox used since its last report (as reported from inside it)."""
    with _cpu_lock:
        last = _cpu_seen.get(id(worker), (0.0, 0.0))
        _cpu_total[0] += max(0.0, own - last[0]) + max(0.0, children - last[1])
        _cpu_seen[id(worker)] = (own, children)


def sandbox_cpu_seconds() -> float:
    """CPU seconds used inside the sandboxes so far (worker, leaders, tests), as the workers
    report after each program; for benchmarks (a worker's last program before it died or was
    replaced is not counted)."""
    with _cpu_lock:
        return _cpu_total[0]


# ----- the pool ----------------------------------------------------------------------------------


def _max_idle() -> int:
    from vpo.sandbox import default_workers

    return max(4, 2 * default_workers())


# Workers by key (isolation, tmp size), each used by one thread at a time; the pool grows with
# its callers (``run_batch`` bounds them) and keeps ``_max_idle()`` idle ones. A forked copy of
# this process starts its own and never uses or kills its parent's (vpo.warm_pool).
_POOL: WarmPool[_Worker] = WarmPool(start=lambda key: _Worker(*key), stop=_Worker.close, alive=_Worker.alive,
                                    max_idle=_max_idle)


def shutdown() -> None:
    """Stop every worker of this process's pool (idle or busy); later calls start new ones."""
    _POOL.close()


def worker_pids() -> set[int]:
    """Pids of this process's live workers (their bubblewrap or interpreter processes)."""
    return {worker.pid for worker in _POOL.workers()}


class Slot:
    """One thread's hold on a worker across programs (no pool lock per program)."""

    def __init__(self) -> None:
        self.worker: _Worker | None = None

    def get(self, key: tuple[str, int]) -> _Worker:
        if self.worker is not None and (self.worker.key != key or not self.worker.usable):
            self.release()
        if self.worker is None:
            self.worker = _POOL.acquire(key)
        return self.worker

    def release(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            _POOL.release(worker)


# ----- one program ---------------------------------------------------------------------------------


def _frame(code: str, inputs: list[str], mode: str, fn_name: str | None, limits: Limits, isolation: str) -> bytes:
    nproc = limits.processes + 3  # the worker, the program's leader, the test process
    if isolation != "bwrap":
        # Without a user namespace RLIMIT_NPROC counts every process of the uid.
        user = _sandbox_user()
        nproc += _count_processes_of(user[0] if user is not None else os.getuid())
    payload = {
        "code": code,
        "inputs": inputs,
        "mode": mode,
        "fn_name": fn_name,
        "limits": {
            "timeout": float(limits.timeout),
            "wall_timeout": limits.wall,
            "memory_mb": int(limits.memory_mb),
            "file_size_mb": int(limits.file_size_mb),
            "open_files": int(limits.open_files),
            "nproc": int(nproc),
            "output_bytes": int(limits.output_bytes),
        },
    }
    data = marshal.dumps(payload, 4)
    return len(data).to_bytes(_FRAME_HEADER, "big") + data


def run_program(code: str, inputs: list[str], outputs: list[str], mode: str, fn_name: str | None,
                limits: Limits, isolation: str, slot: Slot) -> list[Verdict]:
    """Run one program on a worker of ``slot``: one verdict per test, in order."""
    began = time.monotonic()
    # The same backstop as a fresh sandbox per program had: every test's wall limit plus slack.
    deadline = began + len(inputs) * (limits.wall + 0.5) + 10.0
    reports: dict[int, dict[str, Any]] = {}
    todo = list(range(len(inputs)))
    outcome, detail = "lost", ""
    for _attempt in range(2):
        try:
            worker = slot.get((isolation, int(limits.tmp_size_mb)))
        except OSError as exc:
            outcome, detail = "failed", f"sandbox failed to start: {exc}"
            break
        frame = _frame(code, [inputs[i] for i in todo], mode, fn_name, limits, isolation)
        got, outcome, detail = worker.run(frame, len(todo), deadline)
        for j, entry in got.items():
            reports[todo[j]] = entry
        if not worker.usable:
            slot.release()
        todo = [i for i in todo if i not in reports]
        # Only a worker that died is retried (once): a program that merely lost its own
        # leader, or hit the backstop, keeps what it got.
        if outcome != "lost" or not todo or time.monotonic() >= deadline:
            break
    elapsed = time.monotonic() - began
    verdicts = []
    for i, expected in enumerate(outputs):
        if i in reports:
            verdicts.append(verdict(reports[i], expected, mode))
        elif outcome == "backstop":
            verdicts.append(Verdict("timeout", 0.0, elapsed, "sandbox backstop reached before this test reported"))
        elif outcome == "failed":
            verdicts.append(Verdict("error", 0.0, 0.0, detail, sandbox_fault=True))
        elif outcome == "lost":
            verdicts.append(Verdict("error", 0.0, elapsed,
                                    f"sandbox worker ended before this test reported: {detail}".strip(": "),
                                    sandbox_fault=True))
        else:
            verdicts.append(Verdict("error", 0.0, elapsed, "the program's processes ended before this test reported"))
    return verdicts

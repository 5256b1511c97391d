"""In-sandbox driver of ``vpo.sandbox``: runs one program on its test inputs, one fork per test.

Usage (done by ``vpo.sandbox``, never by hand)::

    python3 -s -B -c "$(cat sandbox_driver.py)" < payload.json > results.jsonl

Standard library only: it runs under the system interpreter (``/usr/bin/python3``) inside
bubblewrap, or under the current interpreter in the rlimit-only mode.

The payload (one JSON object on stdin) holds the program's source, the test *inputs* only,
the mode (``stdin`` or ``functional``), ``fn_name`` and the limits. Expected outputs never
enter the sandbox: this driver reports each test's raw output (stdin mode) or its
JSON-encoded return value (functional mode) and the trusted parent compares.

For every test the driver forks a grandchild that sets its own limits (CPU, address space,
file size, open files, processes), re-enables its dumpability, and runs the program with the
test's input as stdin. The driver reads the grandchild's output with a byte cap and a wall
deadline, then kills every other process of the sandbox before the next test (``kill(-1)``
inside bubblewrap's pid namespace; a descendant scan under ``PR_SET_CHILD_SUBREAPER``
otherwise). The driver itself is non-dumpable, so the candidate (same uid) can neither read
its memory nor open its file descriptors through ``/proc``.

Output: one JSON line per test, ``{"i", "status", "time", "wall", "out", "detail"}`` with
status ``ok`` (ran to completion: compare ``out``), ``timeout``, ``memory`` or ``error``;
then ``{"done": true}``.
"""

import builtins
import ctypes
import gc
import io
import json
import math
import os
import resource
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

# Names LeetCode-style starter code expects without importing them (LiveCodeBench prepends a
# similar block). Imported once in the driver, so each forked test only binds names.
PREAMBLE = """\
from typing import *
from collections import *
from itertools import *
from functools import *
from heapq import *
from bisect import *
from math import *
from string import *
from operator import *
import collections, itertools, functools, heapq, bisect, math, string, operator
import re, sys, os, io, copy, json, time
"""
# Heavier modules (random, decimal, fractions, statistics, datetime) are left to the program's
# own imports: importing them here would slow every sandbox start for the few that use them.

MEMORY_MSG = b'{"status": "memory"}'
# Private references: a program rebinding json.dumps/loads only changes its own calls.
_dumps = json.dumps
_loads = json.loads


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _libc()


def _prctl(option, value):
    if LIBC is None:
        return False
    return LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


def _set_limit(which, soft, hard=None):
    """Set an rlimit, clamped to the current hard limit (raising it would fail)."""
    hard = soft if hard is None else hard
    _, cur_hard = resource.getrlimit(which)
    if cur_hard != resource.RLIM_INFINITY:
        soft = min(soft, cur_hard)
        hard = min(hard, cur_hard)
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


# ----- the grandchild: runs the candidate on one test ------------------------------------


def _child_limits(limits):
    cpu = max(1, int(math.ceil(limits["timeout"])))
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    mem = limits["memory_mb"] * 1024 * 1024
    _set_limit(resource.RLIMIT_AS, mem)
    _set_limit(resource.RLIMIT_DATA, mem)
    _set_limit(resource.RLIMIT_FSIZE, limits["file_size_mb"] * 1024 * 1024)
    _set_limit(resource.RLIMIT_NOFILE, limits["open_files"])
    _set_limit(resource.RLIMIT_NPROC, limits["nproc"])
    _set_limit(resource.RLIMIT_CORE, 0)


def _run_child(code_obj, base_scope, mode, fn_name, test_input, in_fd, out_w, res_w, limits):
    """Body of the forked grandchild; never returns."""
    try:
        os.setpgid(0, 0)
        os.dup2(in_fd, 0)
        os.dup2(out_w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        if res_w != 3:
            os.dup2(res_w, 3)
            res_w = 3
        os.closerange(4, 65536)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_DUMPABLE, 1)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        _child_limits(limits)
        sys.setrecursionlimit(50000)
        if hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(50000)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                     encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                                      encoding="utf-8", errors="replace", line_buffering=False)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="replace", write_through=True)
        sys.argv = ["solution.py"]
    except BaseException as exc:  # setup failure is the harness's, report it plainly
        _write_all(res_w, _dumps({"status": "error", "detail": "setup: %r" % (exc,)}).encode())
        os._exit(0)

    report = {"status": "ok"}
    try:
        scope = dict(base_scope)
        exec(code_obj, scope)
        if mode == "functional":
            args = [_loads(line) for line in test_input.split("\n") if line.strip()]
            solution = scope.get("Solution")
            if isinstance(solution, type) and hasattr(solution, fn_name):
                target = getattr(solution(), fn_name)
            elif fn_name in scope:
                target = scope[fn_name]
            else:
                raise NameError("no Solution.%s or function %s defined" % (fn_name, fn_name))
            result = target(*args)
            if isinstance(result, tuple):
                result = list(result)
            try:
                report["out"] = _dumps(result)
            except (TypeError, ValueError) as exc:
                report = {"status": "ok", "out": None,
                          "detail": "result is not JSON-serialisable: %s" % type(result).__name__}
        sys.stdout.flush()
    except SystemExit:
        try:
            sys.stdout.flush()
        except BaseException:
            pass
    except MemoryError:
        report = None
    except RecursionError:
        report = {"status": "error", "detail": "RecursionError"}
    except BaseException as exc:
        try:
            report = {"status": "error", "detail": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
        except BaseException:
            report = {"status": "error", "detail": "exception"}
    try:
        if report is None:
            _write_all(res_w, MEMORY_MSG)
        else:
            _write_all(res_w, _dumps(report).encode())
    except MemoryError:
        _write_all(res_w, MEMORY_MSG)
    except BaseException:
        pass
    os._exit(0)


# ----- the driver ------------------------------------------------------------------------


def _other_pids():
    """Pids in this pid namespace other than init (1) and ourselves."""
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]


def _descendants():
    """Pids whose parent chain leads to us (scan of /proc; used without a pid namespace)."""
    me = os.getpid()
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        try:
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            continue
        parent[int(name)] = ppid
    found = []
    for pid in parent:
        seen = 0
        p = parent.get(pid)
        while p is not None and seen < 10000:
            if p == me:
                found.append(pid)
                break
            p = parent.get(p)
            seen += 1
    return found


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_all(pidns):
    """Kill every process of the sandbox but us (and init), then reap our children."""
    for _ in range(1000):
        if pidns:
            try:
                os.kill(-1, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            victims = _other_pids()
        else:
            victims = _descendants()
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        _reap()
        if not victims:
            return
        time.sleep(0.001)


def _read_test(pid, out_r, res_r, limits, started):
    """Collect one grandchild's output and report; returns (out_bytes, res_bytes, why)."""
    cap = limits["output_bytes"]
    deadline = started + limits["wall_timeout"]
    out, res = bytearray(), bytearray()
    open_fds = {out_r: out, res_r: res}
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    why = None
    exited = False
    try:
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = "wall"
                break
            wait_ms = int(remaining * 1000) + 1 if pidfd is not None else min(10, int(remaining * 1000) + 1)
            events = poller.poll(wait_ms)
            if pidfd is None and not events:
                # No pidfd: peek at the child's exit without reaping it (rusage comes later).
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    exited = True
            for fd, _ev in events:
                if fd == pidfd:
                    exited = True
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    poller.unregister(fd)
                    del open_fds[fd]
                    continue
                buf = open_fds[fd]
                buf += chunk
                if len(out) > cap or len(res) > cap:
                    why = "output"
                    break
            if why:
                break
        if exited and why is None:
            # Drain what the program wrote before exiting (at most a pipe buffer each).
            for fd in list(open_fds):
                os.set_blocking(fd, False)
                while True:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except (BlockingIOError, OSError):
                        break
                    if not chunk:
                        break
                    open_fds[fd] += chunk
                    if len(out) > cap or len(res) > cap:
                        why = "output"
                        break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    return bytes(out), bytes(res), why


def _run_one(code_obj, compile_error, payload, index, test_input):
    limits = payload["limits"]
    mode = payload["mode"]
    if compile_error is not None:
        return {"status": "error", "time": 0.0, "wall": 0.0, "out": None, "detail": compile_error}
    data = test_input.encode("utf-8", "surrogatepass") if mode == "stdin" else b""
    if hasattr(os, "memfd_create"):
        in_fd = os.memfd_create("stdin", 0)
    else:
        in_fd = os.open(os.getcwd(), os.O_TMPFILE | os.O_RDWR, 0o600)
    _write_all(in_fd, data)
    os.lseek(in_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(res_r)
        _run_child(code_obj, payload["base_scope"], mode, payload.get("fn_name"), test_input, in_fd,
                   out_w, res_w, limits)
        os._exit(0)  # not reached
    os.close(in_fd)
    os.close(out_w)
    os.close(res_w)
    try:
        out, res, why = _read_test(pid, out_r, res_r, limits, started)
    finally:
        os.close(out_r)
        os.close(res_r)
    if why is not None:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    _, status_word, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    wall = time.monotonic() - started
    _kill_all(payload.get("pidns", False))

    entry = {"time": round(cpu, 4), "wall": round(wall, 4), "out": None, "detail": ""}
    timeout = limits["timeout"]
    killed_by = os.WTERMSIG(status_word) if os.WIFSIGNALED(status_word) else None
    try:
        report = json.loads(res.decode("utf-8", "replace")) if res else None
        if not isinstance(report, dict):
            report = None
    except ValueError:
        report = None
    if why == "wall":
        entry.update(status="timeout", detail="wall-clock limit %.1fs" % limits["wall_timeout"])
    elif why == "output":
        entry.update(status="error", detail="output limit of %d bytes exceeded" % limits["output_bytes"])
    elif killed_by in (signal.SIGXCPU,) or (killed_by == signal.SIGKILL and cpu >= timeout * 0.9):
        entry.update(status="timeout", detail="CPU limit %.1fs" % timeout)
    elif cpu > timeout:
        entry.update(status="timeout", detail="CPU time %.2fs over the %.1fs limit" % (cpu, timeout))
    elif killed_by is not None:
        entry.update(status="error", detail="killed by signal %d" % killed_by)
    elif report is None:
        entry.update(status="error", detail="exited without reporting a result")
    elif report.get("status") == "memory":
        entry.update(status="memory", detail="MemoryError")
    elif report.get("status") == "ok":
        entry["status"] = "ok"
        if mode == "stdin":
            entry["out"] = out.decode("utf-8", "replace")
        else:
            out_value = report.get("out")
            entry["out"] = out_value if isinstance(out_value, str) else None
        entry["detail"] = str(report.get("detail", ""))[:300]
    else:
        entry.update(status="error", detail=str(report.get("detail", "error"))[:300])
    return entry


def main():
    raw = sys.stdin.buffer.read()
    payload = json.loads(raw.decode("utf-8"))
    del raw
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    _prctl(PR_SET_DUMPABLE, 0)
    pidns = bool(payload.get("pidns")) and os.getpid() <= 3
    payload["pidns"] = pidns
    if not pidns:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    limits = payload["limits"]
    _set_limit(resource.RLIMIT_CORE, 0)
    _set_limit(resource.RLIMIT_FSIZE, limits["file_size_mb"] * 1024 * 1024)
    _set_limit(resource.RLIMIT_NPROC, limits["nproc"])
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # The preamble's names, bound once: each forked test starts from a copy of this scope.
    base_scope = {"__name__": "__main__", "__builtins__": builtins}
    exec(PREAMBLE, base_scope)
    payload["base_scope"] = base_scope

    compile_error = None
    code_obj = None
    try:
        code_obj = compile(payload["code"], "<solution>", "exec", dont_inherit=True)
    except MemoryError:
        compile_error = "compile: MemoryError"
    except BaseException as exc:
        compile_error = "compile: %s: %s" % (type(exc).__name__, str(exc)[:200])

    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in the forked tests
    for index, test_input in enumerate(payload["inputs"]):
        entry = _run_one(code_obj, compile_error, payload, index, test_input)
        entry["i"] = index
        line = json.dumps(entry) + "\n"
        _write_all(1, line.encode("utf-8", "replace"))
    _kill_all(pidns)
    _write_all(1, b'{"done": true}\n')


if __name__ == "__main__":
    main()

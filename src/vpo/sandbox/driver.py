"""In-sandbox driver of ``vpo.sandbox``: a warm worker that runs programs one after another,
with one fresh forked process per program and per test.

Usage (done by ``vpo.sandbox.pool``, never by hand)::

    python3 -S -s -B -c "$BOOTSTRAP"          # stdin: driver bytecode, then framed programs
    python3 -s -B -c "$(cat driver.py)"        # fallback: stdin holds the framed programs only

Standard library only: it runs under the system interpreter (``/usr/bin/python3``) inside
bubblewrap (as the namespace's pid 1, ``bwrap --as-pid-1``), or under the current
interpreter in the rlimit-only mode.

Protocol. The worker writes ``{"ready": true}`` once its imports are done, then loops: it
reads one frame from stdin (8-byte big-endian length, then a ``marshal``-encoded dict written
by the trusted parent: the program's source, the test *inputs* only, the mode, ``fn_name`` and
the limits), runs the program, and writes one JSON line per test followed by
``{"done": true, "dirty": reason-or-null}``. Expected outputs never enter the sandbox: the
driver reports each test's raw output (stdin mode) or its JSON-encoded return value
(functional mode) and the trusted parent compares. Test lines are
``{"i", "status", "time", "wall", "out", "detail"}`` with status ``ok`` (ran to completion:
compare ``out``), ``timeout``, ``memory`` or ``error``.

Process tree and why:

* The worker imports the preamble's modules once and never runs program code. It reads each
  frame into one reused buffer, forks a *leader* for the program and then zeroes that
  buffer, so nothing of an earlier program (its source, its outputs) is in the memory that a
  later program's processes are forked from.
* The leader parses the frame, compiles the program, writes the results straight to the
  parent and forks one *test* process per test, which sets its own limits (CPU, address
  space, file size, open files, processes, message queues), re-enables its dumpability and
  runs the program with the test's input as stdin. The leader reads its output with a byte
  cap and a wall deadline, then kills every other process of the program before the next
  test (``kill(-1)`` inside the pid namespace, which spares pid 1 and the caller; a
  descendant scan under ``PR_SET_CHILD_SUBREAPER`` otherwise).
* When the leader has exited, the worker kills whatever is left, empties its working
  directory (the private ``/tmp``) and checks that nothing a program can change about it
  changed (its rlimits, nice value, scheduler and CPU affinity, which a same-uid process may
  alter; System V IPC objects and keys in its namespaces). Anything it cannot restore is
  reported as ``dirty`` and the worker exits; the parent starts a new one.
* The worker and the leader are non-dumpable, so a test (same uid) can neither read their
  memory nor open their file descriptors through ``/proc``. As pid 1 of its namespace the
  worker cannot be killed from inside it (the kernel drops signals to a namespace's init that
  it does not handle); a program that kills its leader loses its own remaining tests only.
"""

import builtins
import gc
import io
import marshal
import math
import os
import resource
import select
import sys
import time

import _signal as signal  # the C module: ``signal`` would import ``enum`` (slow start-up)

PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

# Names LeetCode-style starter code expects without importing them (LiveCodeBench prepends a
# similar block). The worker binds them once; each program starts from a copy of that scope.
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
# Names through which a program can reach its globals without naming them: a program whose
# code mentions any of them gets the whole preamble scope.
DYNAMIC_NAMES = frozenset((
    "eval", "exec", "compile", "globals", "locals", "vars", "dir", "getattr", "__import__",
    "__dict__", "__globals__", "__builtins__", "f_globals", "f_locals", "inspect", "importlib",
    "breakpoint", "help", "__future__", "get_type_hints", "__annotations__"))
# Side-effect-free standard modules a program's leader imports when the program mentions
# them, so each forked test finds them loaded (``random`` is left out: its seed would be
# shared by every test). The worker itself keeps only the preamble's modules: a smaller
# process forks faster (benchmarks/sandbox.py: less sandbox CPU per test than preloading all).
PRELOAD = ("signal", "enum", "ctypes", "struct", "types", "contextlib", "decimal", "fractions", "numbers",
           "array", "datetime", "dataclasses", "typing", "collections", "itertools", "functools", "heapq",
           "bisect", "math", "string", "operator", "re", "copy", "json", "io", "time")

PRELOAD_SET = frozenset(PRELOAD)
MEMORY_MSG = b"memory"
# Set by the launcher (``vpo.sandbox``) when it runs this driver as precompiled bytecode:
# {"path": sys.path of a normal start}.
BUILD = globals().get("_VPO_BUILD")
FRAME_HEADER = 8


def _load_ctypes():
    """``prctl`` through the bare ``_ctypes`` module (``import ctypes`` costs milliseconds)."""
    try:
        import _ctypes
    except ImportError:
        return None

    class _Int(_ctypes._SimpleCData):
        _type_ = "i"

    class _ULong(_ctypes._SimpleCData):
        _type_ = "L"

    class _Func(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Int
        _argtypes_ = (_Int, _ULong, _ULong, _ULong, _ULong)

    try:
        return _Func(_ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl"))
    except (OSError, AttributeError, TypeError):
        return None


PRCTL = _load_ctypes()


def _prctl(option, value):
    if PRCTL is None:
        return False
    return PRCTL(option, value, 0, 0, 0) == 0


def _encode_entry(entry):
    """One result line as JSON, without the ``json`` package (it imports ``re``)."""
    out = entry["out"]
    return ('{"i": %d, "status": %s, "time": %r, "wall": %r, "out": %s, "detail": %s}\n' % (
        entry["i"], _ENCODE(entry["status"]), float(entry["time"]), float(entry["wall"]),
        "null" if out is None else _ENCODE(out), _ENCODE(entry["detail"]))).encode("ascii")


try:
    from _json import encode_basestring_ascii as _ENCODE
except ImportError:  # pragma: no cover - CPython always has _json
    from json.encoder import py_encode_basestring_ascii as _ENCODE


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
    """(resource, (soft, hard)) pairs for a test, clamped to the driver's hard limits (which
    the tests inherit); computed once, set by each forked test."""
    cpu = max(1, int(math.ceil(limits["timeout"])))
    mem = limits["memory_mb"] * 1024 * 1024
    wanted = [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_AS, mem, mem),
              (resource.RLIMIT_DATA, mem, mem),
              (resource.RLIMIT_FSIZE, limits["file_size_mb"] * 1024 * 1024, None),
              (resource.RLIMIT_NOFILE, limits["open_files"], None),
              (resource.RLIMIT_NPROC, limits["nproc"], None), (resource.RLIMIT_CORE, 0, None)]
    if hasattr(resource, "RLIMIT_MSGQUEUE"):  # POSIX message queues outlive their creator
        wanted.append((resource.RLIMIT_MSGQUEUE, 0, None))
    pairs = []
    for which, soft, hard in wanted:
        hard = soft if hard is None else hard
        _, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        pairs.append((which, (soft, hard)))
    return pairs


def _child_stdio():
    """The test's ``sys.stdin/stdout/stderr``, built once in the driver (each fork gets a
    pristine copy). Built while fds 0 and 2 are what a test has there (a memfd, /dev/null),
    so cached properties such as seekability match; the driver's own fd 2 is restored."""
    saved_err = os.dup(2)
    try:
        in_fd = _memfd()
        os.dup2(in_fd, 0)
        os.close(in_fd)
        os.dup2(DEVNULL, 2)
        stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding="utf-8", errors="replace")
        stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                                  encoding="utf-8", errors="replace", line_buffering=False)
        stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="replace", write_through=True)
    finally:
        os.dup2(saved_err, 2)
        os.close(saved_err)
    return stdin, stdout, stderr


def _memfd():
    if hasattr(os, "memfd_create"):
        return os.memfd_create("stdin", 0)
    return os.open(os.getcwd(), os.O_TMPFILE | os.O_RDWR, 0o600)


DEVNULL = os.open(os.devnull, os.O_WRONLY)


def _run_child(code_obj, base_scope, mode, fn_name, test_input, in_fd, out_w, res_w, limits, codec):
    """Body of the forked grandchild; never returns.

    Its report on fd 3 is one message: ``ok`` (stdin mode), ``ok`` + newline + the JSON of
    the return value (functional mode), ``okx`` + newline + a type name (not serialisable),
    ``memory`` or ``error`` + newline + a detail. Anything else counts as no report."""
    try:
        os.setpgid(0, 0)
        os.dup2(in_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(DEVNULL, 2)
        if res_w != 3:
            os.dup2(res_w, 3)
            res_w = 3
        os.closerange(4, 65536)
        if not limits["pidns"]:
            # Without a pid namespace nothing else ends a test whose worker died. (With one,
            # the namespace ends with its pid 1.) The test stays non-dumpable like its leader:
            # ``/proc/self`` and ``/dev/stdin`` still work for itself, and each ctypes call
            # costs a forked test ~0.1 ms of page faults.
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        for which, pair in limits["rlimits"]:
            try:
                resource.setrlimit(which, pair)
            except (ValueError, OSError):
                pass
        sys.setrecursionlimit(50000)
        if hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(50000)
        sys.stdin, sys.stdout, sys.stderr = limits["stdio"]
        sys.argv = ["solution.py"]
    except BaseException as exc:  # setup failure is the harness's, report it plainly
        _write_all(res_w, ("error\nsetup: %r" % (exc,)).encode("utf-8", "replace"))
        os._exit(0)

    report = b"ok"
    try:
        scope = dict(base_scope)
        exec(code_obj, scope)
        if mode == "functional":
            dumps, loads = codec
            args = [loads(line) for line in test_input.split("\n") if line.strip()]
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
                report = b"ok\n" + dumps(result).encode("utf-8", "surrogatepass")
            except (TypeError, ValueError):
                report = b"okx\n" + type(result).__name__.encode("utf-8", "replace")
        sys.stdout.flush()
    except SystemExit:
        try:
            sys.stdout.flush()
        except BaseException:
            pass
    except MemoryError:
        report = None
    except RecursionError:
        report = b"error\nRecursionError"
    except BaseException as exc:
        try:
            report = ("error\n%s: %s" % (type(exc).__name__, str(exc)[:200])).encode("utf-8", "replace")
        except BaseException:
            report = b"error\nexception"
    try:
        _write_all(res_w, MEMORY_MSG if report is None else report)
    except MemoryError:
        _write_all(res_w, MEMORY_MSG)
    except BaseException:
        pass
    os._exit(0)


def _parse_report(res):
    """(kind, text) from a grandchild's report, or None when it is not exactly one report."""
    if res in (b"ok", MEMORY_MSG):
        return res.decode(), None
    kind, sep, body = res.partition(b"\n")
    if not sep or kind not in (b"ok", b"okx", b"error"):
        return None
    return kind.decode(), body.decode("utf-8", "replace")


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
            except ProcessLookupError:  # nothing to signal: no other process (not even a zombie)
                _reap()
                return
            except PermissionError:
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
    in_fd = _memfd()
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
                   out_w, res_w, limits, payload.get("codec"))
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
    report = _parse_report(res) if res else None
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
    elif report[0] == "memory":
        entry.update(status="memory", detail="MemoryError")
    elif report[0] == "ok":
        entry["status"] = "ok"
        entry["out"] = out.decode("utf-8", "replace") if mode == "stdin" else report[1]
    elif report[0] == "okx":
        entry.update(status="ok", out=None, detail="result is not JSON-serialisable: %s" % report[1][:200])
    else:
        entry.update(status="error", detail=report[1][:300])
    return entry


def _site_builtins():
    """``exit``/``quit``/``help``/``copyright``/... as ``site`` defines them (run with -S)."""
    if hasattr(builtins, "exit"):
        return
    try:
        import site
        site.setquit()
        site.setcopyright()
        site.sethelper()
    except BaseException:
        pass


def _code_names(code_obj):
    """Every name the program's code objects mention (globals, attributes, imports)."""
    names, stack, code_type = set(), [code_obj], type(code_obj)
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(const for const in code.co_consts if isinstance(const, code_type))
    return names


def _scope_for(names, full):
    """The program's starting globals: the preamble's bindings of the names it mentions (the
    same values the whole preamble gives them), or all of them if it can look names up
    dynamically. Each test copies this dict, touching every value's reference count, so a
    small dict means fewer copy-on-write page faults per forked test."""
    if names & DYNAMIC_NAMES:
        return full
    scope = {"__name__": "__main__", "__builtins__": builtins}
    for name in names:
        if name in full:
            scope[name] = full[name]
    return scope


# ----- the leader: one program --------------------------------------------------------------


def _leader(frame, cmd_fd, pidns, base_scope, stdio, codec):
    """Body of the per-program process forked by the worker; never returns."""
    try:
        os.close(cmd_fd)  # the parent's command pipe is the worker's alone
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # Orphans of the tests reparent here (not to the worker, busy waiting for us), so they
        # are reaped between tests and the descendant scan finds them without a pid namespace.
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        payload = marshal.loads(frame)
        limits = payload["limits"]
        limits["rlimits"] = _child_limits(limits)
        limits["stdio"] = stdio
        limits["pidns"] = pidns
        payload["pidns"] = pidns
        payload["base_scope"] = base_scope
        payload["codec"] = codec
        compile_error = None
        code_obj = None
        try:
            code_obj = compile(payload["code"], "<solution>", "exec", dont_inherit=True)
        except MemoryError:
            compile_error = "compile: MemoryError"
        except BaseException as exc:
            compile_error = "compile: %s: %s" % (type(exc).__name__, str(exc)[:200])
        if code_obj is not None:
            names = _code_names(code_obj)
            payload["base_scope"] = _scope_for(names, base_scope)
            for module in sorted(names & PRELOAD_SET):
                try:
                    __import__(module)
                except ImportError:
                    pass
        gc.freeze()  # fewer copy-on-write faults in the forked tests
        for index, test_input in enumerate(payload["inputs"]):
            entry = _run_one(code_obj, compile_error, payload, index, test_input)
            entry["i"] = index
            _write_all(1, _encode_entry(entry))
        _kill_all(pidns)
    except BaseException:
        pass
    os._exit(0)


# ----- the worker: many programs, one at a time -------------------------------------------


def _read_into(fd, view):
    """Fill ``view`` from ``fd``; False on end of file."""
    got = 0
    while got < len(view):
        try:
            n = os.readv(fd, [view[got:]])
        except InterruptedError:
            continue
        if n == 0:
            return False
        got += n
    return True


def _remove_contents(path):
    """Empty a directory the program could write (same uid: every mode can be restored)."""
    os.chmod(path, 0o700)
    with os.scandir(path) as it:
        entries = list(it)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_contents(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def _read_text(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _state(pidns):
    """What a program could change about the worker from outside it (same uid)."""
    limits = tuple(resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                   if name.startswith("RLIMIT_"))
    state = [limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
             os.sched_getscheduler(0), os.getcwd()]
    if pidns:
        # System V IPC objects of the private ipc namespace are this worker's programs'; keys
        # cannot be made inside (seccomp), but any listed for the uid are compared too.
        ipc = [_read_text("/proc/sysvipc/" + kind) for kind in ("shm", "msg", "sem")]
        state += [[None if text is None else text.count(b"\n") for text in ipc], _read_text("/proc/keys")]
    return state


def _clean(workdir, baseline, pidns):
    """None when the worker is as it started, else why not (then it must be replaced)."""
    try:
        _remove_contents(workdir)
        if os.listdir(workdir):
            return "files left in the working directory"
        if os.stat(workdir).st_mode & 0o7777 != 0o700:
            return "working directory mode changed"
    except BaseException as exc:
        return "cannot clean the working directory: %s" % type(exc).__name__
    if pidns and _other_pids():
        return "processes left"
    try:
        now = _state(pidns)
    except BaseException as exc:
        return "cannot read own state: %s" % type(exc).__name__
    if now != baseline:
        return "worker state changed"
    return None


def main():
    if BUILD is not None:
        sys.path[:] = list(BUILD["path"])
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    _site_builtins()
    _prctl(PR_SET_DUMPABLE, 0)
    pidns = os.getpid() == 1
    if not pidns:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # As pid 1 only handled signals reach us; Python's SIGINT handler would be one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _set_limit(resource.RLIMIT_CORE, 0)
    cmd_fd = os.dup(0)  # not inheritable across exec; the leader closes it after fork
    null_in = os.open(os.devnull, os.O_RDONLY)

    # The preamble, bound once (its modules stay loaded): each program starts from part of it.
    base_scope = {"__name__": "__main__", "__builtins__": builtins}
    exec(PREAMBLE, base_scope)
    import json
    # Private references: a program rebinding json.dumps/loads only changes its own calls.
    codec = (json.dumps, json.loads)
    stdio = _child_stdio()
    os.dup2(null_in, 0)
    workdir = os.getcwd()
    baseline = _state(pidns)
    gc.collect()
    gc.freeze()

    buf = bytearray(1 << 16)
    header = bytearray(FRAME_HEADER)
    _write_all(1, b'{"ready": true}\n')
    while True:
        if not _read_into(cmd_fd, memoryview(header)):
            break
        size = int.from_bytes(header, "big")
        if size > len(buf):
            buf = bytearray(size)
        view = memoryview(buf)[:size]
        if not _read_into(cmd_fd, view):
            break
        pid = os.fork()
        if pid == 0:
            _leader(view, cmd_fd, pidns, base_scope, stdio, codec)
        view[:] = bytes(size)  # the next program is forked from this memory
        view.release()
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        _kill_all(pidns)
        dirty = _clean(workdir, baseline, pidns)
        # A leader killed mid-line leaves a partial line: the newline ends it.
        # The worker's CPU seconds so far, its own and its reaped descendants' (for benchmarks).
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        _write_all(1, b'\n{"done": true, "dirty": %s, "cpu": [%r, %r]}\n' % (
            b"null" if dirty is None else _ENCODE(dirty).encode(), own.ru_utime + own.ru_stime,
            kids.ru_utime + kids.ru_stime))
        if dirty is not None:
            break


if __name__ == "__main__":
    main()

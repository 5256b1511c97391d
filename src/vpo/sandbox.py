"""Run untrusted Python programs against test cases: one verdict per test, every test run.

Usage::

    from vpo.sandbox import Limits, run_tests, run_batch
    verdicts = run_tests("print(int(input()) * 2)", [("21\\n", "42"), ("1\\n", "3")])
    [v.status for v in verdicts]                      # ['pass', 'wrong']
    run_tests(src, [("[1, 2]\\n3", "[0, 1]")], mode="functional", fn_name="twoSum",
              limits=Limits(timeout=2.0))
    run_batch([Program(src_a, tests), Program(src_b, tests)])   # parallel, one list each

Verdicts: ``pass``, ``wrong``, ``timeout``, ``error`` (runtime error, crash, output over its
cap, or the sandbox lost the test) and ``memory`` (``MemoryError`` under the address-space
limit), each with its CPU and wall time.

How a program runs (see ``vpo.sandbox_driver``):

* One fresh interpreter per program, started with ``exec`` through ``subprocess`` (never a
  fork of the calling process), in a new session whose process group is killed at the end.
* Inside it, the driver forks one grandchild per test with its own CPU, address-space, file
  size, open-file and process limits and a wall deadline, so a timeout or crash loses only
  that test. After each test every other process of the sandbox is killed.
* The parent keeps a backstop (the sum of the per-test wall limits plus slack); tests not
  reported by then count as ``timeout`` (or ``error`` when the sandbox died early); reported
  ones are kept.
* Expected outputs never enter the sandbox: the driver returns raw outputs and this module
  compares them (LiveCodeBench semantics: ``compare_stdin``, ``compare_functional``).
* Isolation: with Debian's ``bubblewrap`` (``bwrap``) the program gets no network, its own
  pid/ipc/uts namespaces, a read-only view of ``/usr`` only (the project, ``/root``,
  ``/home``, ``/etc`` and the host's ``/tmp`` are not visible) and a size-capped private
  tmpfs at ``/tmp`` as its working directory, gone when it ends. Without bwrap a one-time
  ``RuntimeWarning`` is issued and only the rlimits, a private temporary directory (removed
  afterwards) and the uid drop apply; files readable by the sandbox user stay readable.
* As root the sandbox runs as ``nobody`` (so ``RLIMIT_NPROC`` holds and root-only files stay
  closed) under the system ``/usr/bin/python3``; the uid switch is done by util-linux
  ``setpriv`` when present, so ``subprocess`` can ``vfork`` instead of copying the caller.

Start-up cost (issue #5): the driver is compiled once per interpreter and sent as bytecode,
the interpreter starts without ``site`` (``-S``; the driver restores ``sys.path`` and the
``exit``/``quit`` builtins) and imports only the preamble parts the program mentions, and
``run_batch`` starts each worker's next sandbox while the current program's tests run.

``VPO_SANDBOX_ISOLATION=auto|bwrap|rlimit`` overrides the isolation choice.
"""

from __future__ import annotations

import json
import marshal
import math
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

__all__ = [
    "Limits",
    "Program",
    "Verdict",
    "VERDICTS",
    "compare_functional",
    "compare_stdin",
    "default_workers",
    "isolation_mode",
    "run_batch",
    "run_tests",
]

VERDICTS = ("pass", "wrong", "timeout", "error", "memory")
MODES = ("stdin", "functional")
_DRIVER_PATH = Path(__file__).with_name("sandbox_driver.py")
_SYSTEM_PYTHON = "/usr/bin/python3"
_NOBODY = "nobody"


# ----- limits and results ------------------------------------------------------------


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


# ----- comparison (LiveCodeBench semantics) -------------------------------------------


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


# ----- isolation choice ------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_result: dict[str, Any] = {}
_warned = False


def _running_as_root() -> bool:
    return os.geteuid() == 0


def _sandbox_user() -> tuple[int, int] | None:
    """(uid, gid) to run as when root, else None (run as ourselves)."""
    if not _running_as_root():
        return None
    try:
        entry = pwd.getpwnam(_NOBODY)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


_SETPRIV = "/usr/bin/setpriv"


def _as_sandbox_user(cmd: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(command, Popen kwargs) that run ``cmd`` as the sandbox user (when we are root).

    util-linux ``setpriv`` switches the real, effective and saved ids and clears the
    supplementary groups, like ``Popen(user=, group=, extra_groups=[])``; but the latter makes
    ``subprocess`` fork the whole calling process (no ``vfork`` with a uid change), which costs
    milliseconds per launch for a small caller and ~80 ms for one holding 2 GB."""
    user = _sandbox_user()
    if user is None:
        return cmd, {}
    if os.access(_SETPRIV, os.X_OK):
        return [_SETPRIV, "--reuid", str(user[0]), "--regid", str(user[1]), "--clear-groups", "--", *cmd], {}
    return cmd, {"user": user[0], "group": user[1], "extra_groups": []}


def _interpreter() -> str:
    if os.path.exists(_SYSTEM_PYTHON) and os.access(_SYSTEM_PYTHON, os.X_OK):
        return _SYSTEM_PYTHON
    return sys.executable


def _root_binds(python: str) -> list[str]:
    """bwrap arguments giving a read-only view of what the interpreter needs, nothing else."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    real = os.path.realpath(python)
    if not real.startswith("/usr/"):
        prefix = Path(real).parent.parent  # .../bin/python3 -> its installation prefix
        args += ["--ro-bind", str(prefix), str(prefix)]
    return args


def _bwrap_command(python: str, limits: Limits) -> list[str]:
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    tmp_bytes = int(limits.tmp_size_mb) * 1024 * 1024
    return [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            *_root_binds(python), "--proc", "/proc", "--dev", "/dev",
            "--size", str(tmp_bytes), "--perms", "0700", "--tmpfs", "/tmp",
            # bwrap's own root and /dev are unbounded tmpfs: make them read-only (device nodes
            # such as /dev/null stay writable), so only the size-capped /tmp takes writes.
            "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"]


def _probe_bwrap() -> tuple[bool, str]:
    """Does bubblewrap start a sandboxed interpreter here (as the sandbox user)?"""
    if shutil.which("bwrap") is None:
        return False, "bwrap not found (install Debian's bubblewrap)"
    python = _interpreter()
    cmd, kwargs = _as_sandbox_user(_bwrap_command(python, Limits()) + [python, "-c", "print(6 * 7)"])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_environment(),
                              cwd="/", **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap failed to start: {exc}"
    if done.returncode != 0 or done.stdout.strip() != "42":
        return False, f"bwrap probe failed (rc {done.returncode}): {done.stderr.strip()[:200]}"
    return True, ""


def isolation_mode() -> str:
    """``"bwrap"`` when bubblewrap works here, else ``"rlimit"`` (warning once).

    ``VPO_SANDBOX_ISOLATION`` forces ``bwrap`` (error if unusable) or ``rlimit``.
    """
    global _warned
    wanted = os.environ.get("VPO_SANDBOX_ISOLATION", "auto").strip().lower() or "auto"
    if wanted not in ("auto", "bwrap", "rlimit"):
        raise ValueError(f"VPO_SANDBOX_ISOLATION must be auto, bwrap or rlimit, got {wanted!r}")
    if wanted == "rlimit":
        return "rlimit"
    with _probe_lock:
        if "ok" not in _probe_result:
            ok, why = _probe_bwrap()
            _probe_result.update(ok=ok, why=why)
        ok, why = _probe_result["ok"], _probe_result["why"]
        if ok:
            return "bwrap"
        if wanted == "bwrap":
            raise RuntimeError(f"VPO_SANDBOX_ISOLATION=bwrap but bubblewrap is unusable: {why}")
        if not _warned:
            _warned = True
            warnings.warn(
                f"vpo.sandbox: {why}; falling back to rlimit-only isolation (no network or "
                "filesystem isolation: untrusted code can read what the sandbox user can read "
                "and reach the network)", RuntimeWarning, stacklevel=2)
        return "rlimit"


# ----- running ---------------------------------------------------------------------------


def _environment() -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",  # per-thread malloc arenas would eat the address-space limit
    }


def _count_processes_of(uid: int) -> int:
    """Processes currently owned by ``uid`` (they count against its RLIMIT_NPROC)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


_driver_source_cache: list[str] = []


def _driver_source() -> str:
    if not _driver_source_cache:
        _driver_source_cache.append(_DRIVER_PATH.read_text(encoding="utf-8"))
    return _driver_source_cache[0]


# The driver runs as bytecode compiled once per interpreter by that interpreter (so marshal's
# code format always matches), sent ahead of the payload on stdin; ``-S`` skips ``site``, whose
# ``sys.path`` the build records for the driver to restore.
_BOOTSTRAP = ("import marshal,sys;c,b=marshal.load(sys.stdin.buffer);"
              "exec(c,{'__name__':'__main__','_VPO_BUILD':b})")
_BUILD_SCRIPT = """\
import marshal, sys
code = compile(sys.stdin.read(), "<vpo-sandbox-driver>", "exec", dont_inherit=True)
ns = {"__name__": "vpo_sandbox_driver_build"}
exec(code, ns)
star = {m: sorted(ns["_star_names"](m)) for m in ns["STAR_MODULES"]}
path = [p for p in sys.path if p not in ("", ".")]
sys.stdout.buffer.write(marshal.dumps((code, {"path": path, "star": star})))
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


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # Called before the process is reaped, so its pid (and group id) cannot have been reused.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _communicate(proc: subprocess.Popen[bytes], payload: bytes, backstop: float) -> tuple[bytes, bytes, bool]:
    """Feed the payload, collect stdout/stderr until EOF or the backstop; True if it hit."""
    deadline = time.monotonic() + backstop
    out, err = bytearray(), bytearray()
    err_cap = 1 << 16
    sel = selectors.DefaultSelector()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    os.set_blocking(proc.stdin.fileno(), False)
    view = memoryview(payload)
    sel.register(proc.stdin, selectors.EVENT_WRITE)
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    hit = False
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                hit = True
                break
            for key, _ in sel.select(min(remaining, 1.0)):
                fileobj = key.fileobj
                if fileobj is proc.stdin:
                    try:
                        sent = os.write(proc.stdin.fileno(), view[: 1 << 16])
                    except BlockingIOError:
                        continue
                    except (BrokenPipeError, OSError):
                        sent = len(view)
                    view = view[sent:]
                    if not view:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(fileobj.fileno(), 1 << 18)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(fileobj)
                    continue
                if fileobj is proc.stdout:
                    out += chunk
                elif len(err) < err_cap:
                    err += chunk[: err_cap - len(err)]
    finally:
        sel.close()
    return bytes(out), bytes(err), hit


@dataclass
class _Started:
    """A sandbox started ahead of its program: the driver waits for its payload on stdin."""

    proc: subprocess.Popen[bytes] | None
    prefix: bytes
    """Sent before the payload (the driver's bytecode)."""
    workdir: str | None
    error: OSError | None = None

    def discard(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.proc.wait()
            _close_streams(self.proc)
        if self.workdir is not None:
            _remove_tree(self.workdir)


def _close_streams(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def _start(limits: Limits, isolation: str) -> _Started:
    """Start a sandbox (bubblewrap, interpreter, driver) that then waits for its program."""
    python = _interpreter()
    user = _sandbox_user()
    workdir: str | None = None
    bundle = _driver_bundle(python)
    if bundle is not None:
        driver = [python, "-S", "-s", "-B", "-c", _BOOTSTRAP]
    else:
        driver, bundle = [python, "-s", "-B", "-c", _driver_source()], b""
    try:
        if isolation == "bwrap":
            cmd = _bwrap_command(python, limits) + driver
            cwd = "/"
        else:
            workdir = tempfile.mkdtemp(prefix="vpo-sandbox-")
            if user is not None:
                os.chown(workdir, user[0], user[1])
            os.chmod(workdir, 0o700)
            cmd = driver
            cwd = workdir
        cmd, kwargs = _as_sandbox_user(cmd)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_environment(), cwd=cwd,
                                start_new_session=True, close_fds=True, **kwargs)
    except OSError as exc:
        if workdir is not None:
            _remove_tree(workdir)
        return _Started(None, b"", None, exc)
    return _Started(proc, bundle, workdir)


def _launch(code: str, inputs: list[str], mode: str, fn_name: str | None, limits: Limits,
            isolation: str, started: _Started) -> tuple[dict[int, dict[str, Any]], bool, str]:
    """Run the driver of ``started`` on one program; (reports by test index, backstop hit,
    stderr tail). Always disposes of ``started``."""
    try:
        if started.error is not None:
            raise started.error
        proc = started.proc
        if proc is None:
            raise OSError("sandbox not started")
        user = _sandbox_user()
        nproc = limits.processes + 3  # bwrap's init, the driver, the per-test grandchild
        if isolation != "bwrap":
            # Without a user namespace RLIMIT_NPROC counts every process of the uid.
            nproc += _count_processes_of(user[0] if user is not None else os.getuid())
        payload = {
            "code": code,
            "inputs": inputs,
            "mode": mode,
            "fn_name": fn_name,
            "pidns": isolation == "bwrap",
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
        backstop = len(inputs) * (limits.wall + 0.5) + 10.0
        out, err, hit = _communicate(proc, started.prefix + marshal.dumps(payload, 4), backstop)
    finally:
        started.discard()
    reports: dict[int, dict[str, Any]] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("i"), int) and 0 <= entry["i"] < len(inputs):
            reports.setdefault(entry["i"], entry)
    return reports, hit, err.decode("utf-8", "replace")[-500:]


def _remove_tree(path: str) -> None:
    def make_writable(func: Any, target: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable)


def _verdict(entry: dict[str, Any], expected: str, mode: str) -> Verdict:
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
    isolation = isolation_mode()
    return _run_program(code, inputs, outputs, mode, fn_name, limits, isolation, _start(limits, isolation))


def _run_program(code: str, inputs: list[str], outputs: list[str], mode: str, fn_name: str | None,
                 limits: Limits, isolation: str, started: _Started) -> list[Verdict]:
    began = time.monotonic()
    try:
        reports, hit, err_tail = _launch(code, inputs, mode, fn_name, limits, isolation, started)
    except OSError as exc:
        return [Verdict("error", 0.0, 0.0, f"sandbox failed to start: {exc}") for _ in inputs]
    elapsed = time.monotonic() - began
    verdicts = []
    for i, expected in enumerate(outputs):
        if i in reports:
            verdicts.append(_verdict(reports[i], expected, mode))
        elif hit:
            verdicts.append(Verdict("timeout", 0.0, elapsed, "sandbox backstop reached before this test reported"))
        else:
            why = "sandbox ended before this test reported"
            verdicts.append(Verdict("error", 0.0, elapsed, f"{why}: {err_tail}".strip(": ")))
    return verdicts


def default_workers() -> int:
    """Pool size for ``run_batch``: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_batch(programs: Sequence[Program | Mapping[str, Any]], *, workers: int | None = None,
              limits: Limits | None = None) -> list[list[Verdict]]:
    """Run many programs in parallel (``workers`` threads, default the core count, each
    running one program's tests at a time while the sandbox of its next program starts).

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
    isolation = isolation_mode()  # probe (and warn) once, before the threads start
    _driver_bundle(_interpreter())
    results: list[list[Verdict]] = [[] for _ in prepared]
    order = iter(i for i, item in enumerate(prepared) if item[2])
    order_lock = threading.Lock()

    def take() -> int | None:
        with order_lock:
            return next(order, None)

    def start(index: int | None) -> tuple[int, _Started] | None:
        if index is None:
            return None
        return index, _start(prepared[index][1], isolation)

    def worker() -> None:
        # Each worker starts its next program's sandbox before running the current one, so
        # the next start-up (bubblewrap, interpreter, driver imports) overlaps these tests.
        pending = start(take())
        try:
            while pending is not None:
                index, started = pending
                pending = None
                pending = start(take())
                job, job_limits, inputs, outputs = prepared[index]
                results[index] = _run_program(job.code, inputs, outputs, job.mode, job.fn_name, job_limits,
                                              isolation, started)
        finally:
            if pending is not None:
                pending[1].discard()

    n_workers = min(workers or default_workers(), len(prepared))
    if n_workers == 1:
        worker()
        return results
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="vpo-sandbox") as pool:
        for future in [pool.submit(worker) for _ in range(n_workers)]:
            future.result()
    return results

"""How a sandbox is confined: bubblewrap or rlimit-only, the unprivileged uid, the environment.

Usage::

    from vpo.sandbox.isolation import isolation_mode
    isolation_mode()                  # "bwrap" when bubblewrap works here, else "rlimit" (warns once)

``VPO_SANDBOX_ISOLATION=auto|bwrap|rlimit`` overrides the choice. With bubblewrap the worker
gets no network, its own user/pid/ipc/uts/mount namespaces (it is their pid 1), a read-only
view of ``/usr`` only, a size-capped private tmpfs at ``/tmp`` as its working directory and
a seccomp filter denying the kernel keyring calls.
As root everything runs as ``nobody`` (so ``RLIMIT_NPROC`` holds and root-only files stay
closed) under the system ``/usr/bin/python3``; the uid switch is done by util-linux
``setpriv`` when present, so ``subprocess`` can ``vfork`` instead of copying the caller.
"""

from __future__ import annotations

import os
import pwd
import shutil
import struct
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

_SYSTEM_PYTHON = "/usr/bin/python3"
_NOBODY = "nobody"
_SETPRIV = "/usr/bin/setpriv"

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


# seccomp filter (classic BPF) denying, with EPERM, the kernel keyring calls (add_key,
# request_key, keyctl) and every syscall of a foreign ABI (i386, x32) that could reach them
# under another number. Keys outlive the namespaces of the process that made them (the kernel
# collects them minutes later) and their descriptions are listed to every process of the uid
# in ``/proc/keys``: without this filter one program could leave a message for the next.
_KEY_SYSCALLS = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}
_SECCOMP_ALLOW = 0x7FFF0000
_SECCOMP_EPERM = 0x00050000 | 1


def _seccomp_filter() -> bytes | None:
    """The filter as bwrap's ``--seccomp`` reads it (struct sock_filter[]), None on other
    architectures."""
    arch = _KEY_SYSCALLS.get(os.uname().machine)
    if arch is None:
        return None
    audit_arch, (add_key, request_key, keyctl) = arch
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    program = [
        (ld_abs, 0, 0, 4),                 # 0: seccomp_data.arch
        (jeq, 1, 0, audit_arch),           # 1: native ABI: go on at 3
        (ret, 0, 0, _SECCOMP_EPERM),       # 2: foreign ABI: denied
        (ld_abs, 0, 0, 0),                 # 3: seccomp_data.nr
        (jge, 4, 0, 0x40000000),           # 4: x32 numbers: denied (9)
        (jeq, 3, 0, add_key),              # 5
        (jeq, 2, 0, request_key),          # 6
        (jeq, 1, 0, keyctl),               # 7
        (ret, 0, 0, _SECCOMP_ALLOW),       # 8
        (ret, 0, 0, _SECCOMP_EPERM),       # 9
    ]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def _seccomp_fd() -> int | None:
    """A new file descriptor holding ``_seccomp_filter()`` at offset 0 (the caller closes it)."""
    data = _seccomp_filter()
    if data is None or not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create("vpo-seccomp", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _bwrap_command(python: str, tmp_size_mb: int, seccomp_fd: int | None = None) -> list[str]:
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    tmp_bytes = int(tmp_size_mb) * 1024 * 1024
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", *seccomp,
            # The command is the pid namespace's init: signals from inside the namespace that
            # it does not handle (SIGKILL included) never reach it, and its exit ends the
            # namespace with every process in it.
            "--as-pid-1",
            *_root_binds(python), "--proc", "/proc", "--dev", "/dev",
            "--size", str(tmp_bytes), "--perms", "0700", "--tmpfs", "/tmp",
            # bwrap's own root and /dev are unbounded tmpfs: make them read-only (device nodes
            # such as /dev/null stay writable), so only the size-capped /tmp takes writes.
            "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"]


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


def _probe_bwrap() -> tuple[bool, str]:
    """Does bubblewrap start a sandboxed interpreter here (as the sandbox user)?"""
    if shutil.which("bwrap") is None:
        return False, "bwrap not found (install Debian's bubblewrap)"
    python = _interpreter()
    seccomp_fd = _seccomp_fd()
    cmd, kwargs = _as_sandbox_user(_bwrap_command(python, 64, seccomp_fd) + [python, "-c", "print(6 * 7)"])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_environment(),
                              cwd="/", pass_fds=() if seccomp_fd is None else (seccomp_fd,), **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap failed to start: {exc}"
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
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

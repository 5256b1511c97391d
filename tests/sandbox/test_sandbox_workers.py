"""What a shared warm worker makes possible, each followed by a program that must
see a clean slate and get the right verdict.

A program A runs, then a program B in the same worker (the pool hands the most recently
released worker to the next caller; ``_pair`` checks that no worker was started for B when A
left its worker clean). B either checks the slate itself (printing ``clean``) or is simply a
correct program that must pass.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import threading
import time

import pytest

import vpo.sandbox as sandbox
from timed_checks import LIMIT_SLACK
from vpo.sandbox import Limits, Program, run_batch, run_tests

pytestmark = pytest.mark.skipif(sandbox.isolation_mode() != "bwrap",
                                reason="shared-worker isolation needs bubblewrap's namespaces")

LIMITS = Limits(timeout=1.0, wall_timeout=2.0, memory_mb=256, file_size_mb=8, tmp_size_mb=32,
                processes=16, output_bytes=1 << 20)
CORRECT = ("print(int(input()) + 1)", [("1\n", "2"), ("41\n", "42")])
MEMORY_LIMITS = dataclasses.replace(LIMITS, wall_timeout=LIMIT_SLACK * LIMITS.wall)
"""For programs that must end on the memory limit: a loaded machine can starve one past a 2 s
wall-clock limit before it has allocated 256 MB (a timeout verdict instead of a memory one)."""


def _statuses(verdicts: list) -> list[str]:
    return [v.status for v in verdicts]


def _pair(a: str, a_tests: list, b: str, b_tests: list, a_limits: Limits = LIMITS) -> tuple[list, list, bool]:
    """Run A then B; (A's verdicts, B's verdicts, whether B ran in A's worker)."""
    run_tests("print(1)", [("", "1")], limits=LIMITS)  # a warm worker for A
    va = run_tests(a, a_tests, limits=a_limits)
    after_a = sandbox.worker_pids()
    vb = run_tests(b, b_tests, limits=LIMITS)
    return va, vb, sandbox.worker_pids() == after_a


def test_files_left_in_tmp_are_gone_for_the_next_program() -> None:
    a = ("import os\nos.makedirs('deep/er/est', exist_ok=True)\nopen('deep/er/est/x', 'w').write('x')\n"
         "open('/tmp/answer.txt', 'w').write('42')\nos.mkfifo('fifo')\nos.symlink('/usr', 'link')\n"
         "os.chmod('deep/er', 0)\nos.chmod('deep', 0o100)\nos.chmod('/tmp', 0o500)\nprint(1)\n")
    b = ("import os\nprint('clean' if os.listdir('/tmp') == [] and os.getcwd() == '/tmp'"
         " and os.stat('/tmp').st_mode & 0o777 == 0o700 else sorted(os.listdir('/tmp')))\n")
    va, vb, same = _pair(a, [("", "1")], b, [("", "clean")])
    assert _statuses(va) == ["pass"] and _statuses(vb) == ["pass"], (va, vb)
    assert same


def test_full_tmp_is_emptied_for_the_next_program() -> None:
    a = ("try:\n    with open('fill', 'wb') as fh:\n        while True:\n            fh.write(b'x' * (1 << 20))\n"
         "except OSError:\n    pass\nprint(1)\n")
    # B needs most of the 32 MiB /tmp itself
    b = ("with open('mine', 'wb') as fh:\n    for _ in range(6):\n        fh.write(b'y' * (1 << 20))\nprint('clean')\n")
    va, vb, same = _pair(a, [("", "1")], b, [("", "clean")])
    assert _statuses(vb) == ["pass"], vb
    assert same


def test_background_process_does_not_reach_the_next_program(survivors) -> None:
    token = "vpo-worker-" + secrets.token_hex(8)
    a = ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
         f"        os.execv('/usr/bin/sleep', [{token!r}, '1000'])\n    os._exit(0)\nos.wait()\nprint(1)\n")
    b = ("import os\nmine = {str(os.getpid()), str(os.getppid()), '1'}\n"
         "others = [p for p in os.listdir('/proc') if p.isdigit() and p not in mine]\n"
         "print('clean' if not others else others)\n")
    va, vb, same = _pair(a, [("", "1")], b, [("", "clean")])
    assert _statuses(va) == ["pass"] and _statuses(vb) == ["pass"], (va, vb)
    assert same
    assert survivors(token) == []


def test_poisoned_modules_builtins_and_stdlib_stay_in_their_program() -> None:
    a = ("import sys, builtins, json, math, collections, os\n"
         "sys.modules['json'] = None\nmath.sqrt = lambda x: -1\ncollections.Counter = None\n"
         "builtins.print = lambda *a, **k: None\nbuiltins.sorted = None\nos.environ['PYTHONPATH'] = '/tmp'\n"
         "sys.path.insert(0, '/tmp')\nopen('/tmp/heapq.py', 'w').write('raise SystemExit(9)')\n"
         "leaks = []\nimport glob\nfor p in glob.glob('/usr/lib/python3*/json/__init__.py'):\n"
         "    try:\n        open(p, 'a').write('pwned')\n        leaks.append(p)\n    except OSError:\n        pass\n"
         "sys.stdout.write('blocked\\n' if not leaks else str(leaks))\n")
    b = ("import json, heapq, sys, os\nh = [3, 1, 2]\nheapq.heapify(h)\n"
         "print(json.dumps([sorted([4])[0], sqrt(16), Counter('aab')['a'], h[0], 'PYTHONPATH' in os.environ,"
         " '/tmp' in sys.path]))\n")
    va, vb, same = _pair(a, [("", "blocked")], b, [("", '[4, 4.0, 2, 1, false, false]')])
    assert _statuses(va) == ["pass"], va
    assert _statuses(vb) == ["pass"], vb
    assert same


def test_fd_exhaustion_then_a_correct_program() -> None:
    a = ("import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
         "except OSError:\n    pass\nr, w = os.pipe() if len(fds) < 60 else (None, None)\nprint(len(fds) < 64)\n")
    va, vb, same = _pair(a, [("", "True"), ("", "True")], *CORRECT)
    assert _statuses(va) == ["pass", "pass"], va
    assert _statuses(vb) == ["pass", "pass"], vb
    assert same


def test_memory_exhaustion_then_a_correct_program() -> None:
    a = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n"
    va, vb, same = _pair(a, [("", "1"), ("", "1")], *CORRECT, a_limits=MEMORY_LIMITS)
    assert _statuses(va) == ["memory", "memory"], va
    assert _statuses(vb) == ["pass", "pass"], vb
    assert same


def test_earlier_programs_source_and_outputs_are_not_in_the_next_programs_memory() -> None:
    secret = "VPOPRIOR" + secrets.token_hex(16)
    comment = "VPOSOURCE" + secrets.token_hex(16)
    a = f"# {comment}\nprint(input())\n"
    # B reads every readable mapping of its own address space (forked from the worker).
    b = ("import re, ctypes\npat = re.compile(rb'VPO(PRIOR|SOURCE)[0-9a-f]{32}')\nfound = set()\nscanned = 0\n"
         "for line in open('/proc/self/maps').read().splitlines():\n    parts = line.split()\n"
         "    lo, hi = (int(x, 16) for x in parts[0].split('-'))\n"
         "    if not parts[1].startswith('r') or (len(parts) > 5 and parts[5].startswith('[v')):\n        continue\n"
         "    found.update(m.group(0) for m in pat.finditer(ctypes.string_at(lo, hi - lo)))\n    scanned += hi - lo\n"
         "print(b' '.join(sorted(found)).decode() or ('none' if scanned > 1 << 20 else 'not scanned'))\n")
    # A's frame is longer than B's, so B's frame does not simply overwrite it in the buffer.
    va, vb, same = _pair(a, [(secret + "\n" + "x" * 4000 + "\n" + secret + "\n", secret)] * 2, b, [("", secret)])
    assert _statuses(va) == ["pass", "pass"], va
    assert _statuses(vb) == ["wrong"], vb  # it found nothing to print
    assert same


def test_program_that_tries_to_kill_its_worker() -> None:
    a = ("import os, signal\nfor pid in (1, os.getppid(), -1):\n    for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
         "        try:\n            os.kill(pid, sig)\n        except OSError:\n            pass\nprint(1)\n")
    va, vb, same = _pair(a, [("", "1"), ("", "1")], *CORRECT)
    assert _statuses(va) == ["error", "error"], va  # its own leader died with it
    assert _statuses(vb) == ["pass", "pass"], vb
    assert same  # pid 1 of the namespace does not take signals from inside it


def test_same_uid_changes_to_the_worker_replace_it() -> None:
    a = ("import os, resource, ctypes\n"
         "for change in (lambda: os.setpriority(os.PRIO_PROCESS, 1, 19), lambda: os.sched_setaffinity(1, {0}),\n"
         "               lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (8, 8)),\n"
         "               lambda: resource.prlimit(1, resource.RLIMIT_CPU, (1, 1))):\n"
         "    try:\n        change()\n    except OSError:\n        pass\n"
         "libc = ctypes.CDLL(None)\nlibc.shmget(4242, 4096, 0o1666)\n"
         "print(1)\n")
    # (Keys stay listed in /proc/keys for the uid until the kernel collects them, minutes after
    # their namespace is gone, with or without warm workers; B checks what the worker holds.)
    b = ("import os, resource\nshm = open('/proc/sysvipc/shm').read().splitlines()[1:]\n"
         f"print('clean' if os.getpriority(os.PRIO_PROCESS, 0) == {os.getpriority(os.PRIO_PROCESS, 0)} and resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 8"
         f" and resource.getrlimit(resource.RLIMIT_CPU)[1] > 1 and os.sched_getaffinity(0) == {os.sched_getaffinity(0)!r}"
         " and not shm else (os.getpriority(os.PRIO_PROCESS, 0), shm))\n")
    va, vb, same = _pair(a, [("", "1")], b, [("", "clean"), ("", "clean")])
    assert _statuses(va) == ["pass"], va
    assert _statuses(vb) == ["pass", "pass"], vb
    assert not same  # the worker saw what it could not restore and was replaced


def test_worker_killed_mid_batch_loses_nothing() -> None:
    sandbox.shutdown()
    slow = "import time\ntime.sleep(0.15)\nprint(int(input()) * 2)\n"
    programs = [Program(slow, [(f"{i}\n", str(2 * i)), (f"{i + 1}\n", str(2 * i + 2))]) for i in range(12)]
    results: list = []
    thread = threading.Thread(target=lambda: results.append(run_batch(programs, workers=2, limits=LIMITS)))
    thread.start()
    killed = set()
    deadline = time.monotonic() + 10
    while len(killed) < 2 and time.monotonic() < deadline and thread.is_alive():
        for pid in sandbox.worker_pids() - killed:
            time.sleep(0.4)  # mid-program: each takes ~0.3 s
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
    thread.join(60)
    assert len(killed) == 2
    assert [_statuses(r) for r in results[0]] == [["pass", "pass"]] * len(programs)


def test_concurrent_callers_and_a_forked_caller() -> None:
    # Threads share the pool (one worker per caller at a time); a forked copy of this process
    # starts its own workers instead of using (or killing) its parent's.
    programs = [Program("print(int(input()) * 3)", [(f"{i}\n", str(3 * i))] * 3) for i in range(6)]
    results: dict[int, list] = {}

    def call(k: int) -> None:
        results[k] = run_batch(programs, workers=2, limits=LIMITS) if k % 2 else \
            [run_tests(p.code, p.tests, limits=LIMITS) for p in programs]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all([_statuses(r) for r in results[k]] == [["pass"] * 3] * 6 for k in range(4)), results
    parent_workers = sandbox.worker_pids()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = _statuses(run_tests(*CORRECT, limits=LIMITS)) == ["pass", "pass"]
            ok = ok and not (sandbox.worker_pids() & parent_workers)
            sandbox.shutdown()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert sandbox.worker_pids() == parent_workers
    assert _statuses(run_tests(*CORRECT, limits=LIMITS)) == ["pass", "pass"]

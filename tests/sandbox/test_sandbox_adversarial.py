"""Hostile programs against vpo.sandbox, each with its expected verdict.

After every program: the verdicts are right, the run ended within its limits, no process of
it survives (spawned processes carry a unique token in their argv), a canary directory and
the project stayed unchanged, and a benign program still runs normally.

Programs that check isolation print "blocked" when every attempt failed (expected output
"blocked", so ``pass`` means the isolation held). Programs that try to read expected
outputs print what they find; the expected output is a fresh secret, so ``wrong`` means
nothing leaked.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

import vpo
import vpo.sandbox as sandbox
from timed_checks import LIMIT_SLACK
from vpo.sandbox import Limits, run_tests

pytestmark = pytest.mark.skipif(sandbox.isolation_mode() != "bwrap",
                                reason="full isolation needs bubblewrap (rlimit mode is covered in test_sandbox.py)")

LIMITS = Limits(timeout=1.0, wall_timeout=2.0, memory_mb=256, file_size_mb=8, tmp_size_mb=32,
                processes=16, output_bytes=1 << 20)
REPO = Path(vpo.__file__).resolve().parents[2]
FIXTURES = Path(vpo.__file__).resolve().parent / "tasks" / "fixtures" / "code_problems.jsonl"
SLEEP = "/usr/bin/sleep"


def _snapshot(path: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p): (p.stat().st_mode, p.read_bytes() if p.is_file() else b"") for p in sorted(path.rglob("*"))}


@pytest.fixture(scope="module")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("canary")
    os.chmod(root, 0o777)
    os.chmod(root.parent, 0o755)
    (root / "canary.txt").write_text("canary")
    os.chmod(root / "canary.txt", 0o666)
    secret_file = root / "expected_outputs.txt"
    secret_file.write_text("VPOSECRET-" + "ab" * 16)
    os.chmod(secret_file, 0o644)
    return root


@pytest.fixture(scope="module")
def listener() -> tuple[int, list[int]]:
    """A TCP server on the host's loopback; counts connections it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=2)
    server.close()


def _spawn_sleeper(token: str) -> str:
    """Source of a helper that execs a long sleep whose argv[0] is the token."""
    return f"def _sleeper():\n    os.execv({SLEEP!r}, [{token!r}, '1000'])\n"


def hostile_cases(token: str, canary: Path, port: int) -> dict[str, tuple[str, list, str, str | None, list[str]]]:
    """name -> (code, tests, mode, fn_name, expected statuses)."""
    sleeper = _spawn_sleeper(token)
    secret_prefix = "VPOSECRET-"
    one = [("", "blocked")]
    cases = {
        "infinite_loop": ("while True:\n    pass\n", [("", "1")], "stdin", None, ["timeout"]),
        "fork_bomb": ("import os\n" + sleeper + "while True:\n    try:\n        if os.fork() == 0:\n"
                      "            _sleeper()\n    except OSError:\n        pass\n",
                      [("", "1")], "stdin", None, ["timeout"]),
        "fork_bomb_capped": ("import os\n" + sleeper + "n = 0\nfor _ in range(500):\n    try:\n"
                             "        pid = os.fork()\n    except OSError:\n        break\n"
                             "    if pid == 0:\n        _sleeper()\n    n += 1\n"
                             "print('blocked' if n <= 16 else n)\n", one, "stdin", None, ["pass"]),
        "busy_threads": ("import threading\ndef spin():\n    while True:\n        pass\n"
                         "for _ in range(8):\n    threading.Thread(target=spin, daemon=True).start()\n"
                         "spin()\n", [("", "1")], "stdin", None, ["timeout"]),
        "thread_bomb_capped": ("import threading, time\nn = 0\nfor _ in range(500):\n    try:\n"
                               "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                               "    except RuntimeError:\n        break\n    n += 1\n"
                               "print('blocked' if n <= 16 else n)\n", one, "stdin", None, ["pass"]),
        "memory_bomb_alloc": ("x = bytearray(10**10)\n", [("", "1")], "stdin", None, ["memory"]),
        "memory_bomb_growth": ("chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n",
                               [("", "1")], "stdin", None, ["memory"]),
        "disk_fill_one_file": ("with open('big.bin', 'wb') as fh:\n    while True:\n"
                               "        fh.write(b'x' * (1 << 20))\n        fh.flush()\n",
                               [("", "1")], "stdin", None, ["error"]),
        "disk_fill_many_files": ("import os\ntotal = 0\ntry:\n    for i in range(1000):\n"
                                 "        with open(f'f{i}', 'wb') as fh:\n            fh.write(b'x' * (4 << 20))\n"
                                 "        total += 4\nexcept OSError:\n    pass\n"
                                 "print('blocked' if total <= 32 else total)\n", one, "stdin", None, ["pass"]),
        "huge_stdout": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
                        [("", "1")], "stdin", None, ["error"]),
        "deep_recursion": ("def f(n):\n    return f(n + 1) + 1\nprint(f(0))\n", [("", "1")], "stdin", None, ["error"]),
        "segfault_ctypes": ("import ctypes\nctypes.string_at(0)\n", [("", "1")], "stdin", None, ["error"]),
        "os_exit_after_answer": ("import os, sys\nprint(1)\nsys.stdout.flush()\nos._exit(0)\n",
                                 [("", "1")], "stdin", None, ["error"]),
        "ignore_signals": ("import signal\nfor s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGALRM):\n"
                           "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
                           [("", "1")], "stdin", None, ["timeout"]),
        "setsid_double_fork": ("import os\n" + sleeper + "if os.fork() == 0:\n    os.setsid()\n"
                               "    if os.fork() == 0:\n        _sleeper()\n    os._exit(0)\nos.wait()\nprint(42)\n",
                               [("", "42"), ("", "42")], "stdin", None, ["pass", "pass"]),
        "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(1)\n",
                        [("", "1"), ("", "1"), ("", "1")], "stdin", None, ["error", "error", "error"]),
        "kill_everything": ("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(1)\n",
                            [("", "1"), ("", "1")], "stdin", None, ["error", "error"]),
        "network": (f"import socket\nleaks = []\nfor host, port in (('1.1.1.1', 53), ('127.0.0.1', {port}),"
                    f" ('8.8.8.8', 443)):\n    try:\n        socket.create_connection((host, port), timeout=0.5)\n"
                    f"        leaks.append(host)\n    except OSError:\n        pass\n"
                    f"try:\n    socket.getaddrinfo('example.com', 80)\n    leaks.append('dns')\nexcept OSError:\n"
                    f"    pass\nprint(leaks or 'blocked')\n", one, "stdin", None, ["pass"]),
        "read_etc_shadow": ("leaks = []\nfor p in ('/etc/shadow', '/etc/passwd', '/root/.bashrc'):\n    try:\n"
                            "        open(p).read()\n        leaks.append(p)\n    except OSError:\n        pass\n"
                            "print(leaks or 'blocked')\n", one, "stdin", None, ["pass"]),
        "read_project_files": (f"import os\nleaks = []\nfor p in ({str(REPO / 'pyproject.toml')!r}, {str(FIXTURES)!r},"
                               f" {str(REPO / 'src' / 'vpo' / 'sandbox.py')!r}):\n    try:\n"
                               f"        open(p).read()\n        leaks.append(p)\n    except OSError:\n        pass\n"
                               f"if os.path.exists({str(REPO)!r}):\n    leaks.append('repo visible')\n"
                               f"print(leaks or 'blocked')\n", one, "stdin", None, ["pass"]),
        "write_outside_tmp": (f"import os, shutil\nleaks = []\nfor p in ({str(canary / 'canary.txt')!r},"
                              f" {str(canary / 'new.txt')!r}, {str(REPO / 'pwned.txt')!r}, '/usr/pwned',"
                              f" '/pwned', '/dev/pwned', '/etc/pwned'):\n    try:\n"
                              f"        with open(p, 'w') as fh:\n            fh.write('pwned')\n"
                              f"        leaks.append(p)\n    except OSError:\n        pass\n"
                              f"try:\n    shutil.rmtree({str(canary)!r})\n    leaks.append('rmtree')\n"
                              f"except OSError:\n    pass\nprint(leaks or 'blocked')\n", one, "stdin", None, ["pass"]),
        "fake_eq_functional": ("class Yes:\n    def __eq__(self, other):\n        return True\n"
                               "class Solution:\n    def solve(self, x):\n        return Yes()\n",
                               [("1", '"' + secrets.token_hex(8) + '"')], "functional", "solve", ["wrong"]),
        "int_subclass_eq": ("class Liar(int):\n    def __eq__(self, other):\n        return True\n"
                            "    __hash__ = int.__hash__\n"
                            "class Solution:\n    def solve(self, x):\n        return Liar(0)\n",
                            [("1", str(10**12 + 7))], "functional", "solve", ["wrong"]),
        "patch_builtins_and_json": ("import builtins, json\nbuiltins.print = lambda *a, **k: None\n"
                                    "json.dumps = lambda *a, **k: '\"anything\"'\njson.loads = lambda *a, **k: True\n"
                                    "str.__eq__\nclass Solution:\n    def solve(self, x):\n        return x\n",
                                    [("1", '"' + secrets.token_hex(8) + '"')], "functional", "solve", ["wrong"]),
        "read_parent_memory": (
            "import os, re\npat = re.compile(rb'" + secret_prefix + "[0-9a-f]{32}')\nfound = set()\n"
            "for pid in [p for p in os.listdir('/proc') if p.isdigit()] + [str(os.getppid()), '1']:\n"
            "    for part in ('cmdline', 'environ'):\n        try:\n"
            "            found.update(pat.findall(open(f'/proc/{pid}/{part}', 'rb').read()))\n"
            "        except OSError:\n            pass\n    try:\n"
            "        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
            "        mem = open(f'/proc/{pid}/mem', 'rb')\n    except OSError:\n        continue\n"
            "    for line in maps:\n        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
            "        if 'r' not in line.split()[1] or hi - lo > 1 << 26:\n            continue\n"
            "        try:\n            mem.seek(lo)\n            found.update(pat.findall(mem.read(hi - lo)))\n"
            "        except (OSError, ValueError, OverflowError):\n            pass\n"
            "print(b' '.join(sorted(found)).decode() or 'none')\n",
            [("", secret_prefix + secrets.token_hex(16))], "stdin", None, ["wrong"]),
        "read_expected_files": (
            "import os, re\npat = re.compile(rb'" + secret_prefix + "[0-9a-f]{32}')\nfound = set()\n"
            f"paths = [{str(canary / 'expected_outputs.txt')!r}, {str(FIXTURES)!r}]\n"
            "for top in ('/', '/tmp', '/proc/1/root', '/proc/self/cwd'):\n"
            "    for root, dirs, files in os.walk(top):\n"
            "        dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev', 'usr')]\n"
            "        paths += [os.path.join(root, f) for f in files]\n"
            "for p in paths:\n    try:\n        found.update(pat.findall(open(p, 'rb').read(1 << 20)))\n"
            "    except OSError:\n        pass\nprint(b' '.join(sorted(found)).decode() or 'none')\n",
            [("", secret_prefix + secrets.token_hex(16))], "stdin", None, ["wrong"]),
        "forge_driver_results": (
            "import os, json\nfake = json.dumps({'i': 1, 'status': 'ok', 'time': 0, 'wall': 0, 'out': 'forged',"
            " 'detail': ''}) + '\\n'\nfor pid in ('1', str(os.getppid())):\n"
            "    try:\n        fds = os.listdir(f'/proc/{pid}/fd')\n    except OSError:\n        continue\n"
            "    for fd in fds:\n        try:\n            with open(f'/proc/{pid}/fd/{fd}', 'w') as fh:\n"
            "                fh.write(fake)\n        except OSError:\n            pass\n"
            "os.write(3, json.dumps({'status': 'ok'}).encode())\nprint('forged')\n",
            # its own report channel gets two reports: unreadable, so error; never a pass
            [("", "x"), ("", "forged-" + secrets.token_hex(4))], "stdin", None, ["error", "error"]),
        # kernel keys outlive the sandbox's namespaces and are listed to the whole uid: a
        # message for a later program (the seccomp filter denies the keyring calls)
        "keyring_message": ("import ctypes, os\nlibc = ctypes.CDLL(None)\n"
                            "add_key, keyctl = {'aarch64': (217, 219)}.get(os.uname().machine, (248, 250))\n"
                            "made = [libc.syscall(add_key, b'user', b'vpo-msg', b'left', 4, ring) for ring in (-4, -3, -5)]\n"
                            "made += [libc.syscall(keyctl, 0, -4, 0, 0, 0)]\n"
                            "print('blocked' if all(r == -1 for r in made) else made)\n", one, "stdin", None,
                            ["pass"]),
        "sleep_forever": ("import time\ntime.sleep(1000)\n", [("", "1")], "stdin", None, ["timeout"]),
        "close_pipes_and_hang": ("import os, time\nos.close(1)\nos.close(3)\ntime.sleep(1000)\n",
                                 [("", "1")], "stdin", None, ["timeout"]),
        "exec_shell": ("import os\nos.execv('/bin/sh', ['sh', '-c', 'while :; do :; done'])\n",
                       [("", "1")], "stdin", None, ["timeout"]),
    }
    return cases


CASE_NAMES = list(hostile_cases("t", Path("/nonexistent"), 1))


def test_at_least_25_hostile_programs() -> None:
    assert len(CASE_NAMES) >= 25


@pytest.mark.parametrize("name", CASE_NAMES)
def test_hostile_program(name: str, canary: Path, listener: tuple[int, list[int]], survivors) -> None:
    port, accepted = listener
    token = "vpo-hostile-" + secrets.token_hex(8)
    code, tests, mode, fn_name, expected = hostile_cases(token, canary, port)[name]
    before = _snapshot(canary)
    repo_top = sorted(p.name for p in REPO.iterdir())
    # a program that must end on the memory limit gets time for it on a loaded machine (a 2 s wall-clock
    # limit can end a starved one first: a timeout verdict instead of a memory one)
    limits = dataclasses.replace(LIMITS, wall_timeout=LIMIT_SLACK * LIMITS.wall) if "memory" in expected else LIMITS
    started = time.monotonic()
    verdicts = run_tests(code, tests, mode=mode, fn_name=fn_name, limits=limits)
    elapsed = time.monotonic() - started
    assert [v.status for v in verdicts] == expected, [(v.status, v.detail) for v in verdicts]
    # ended within its limits: per-test wall limits, before the pool's backstop (their sum plus 10 s) had to act
    assert elapsed < len(tests) * (limits.wall + 0.5) + 10.0
    for v in verdicts:
        assert v.time <= LIMITS.timeout + 1.5
    # nothing of it survives (give the kernel a moment to tear the namespace down)
    deadline = time.monotonic() + 2.0
    while survivors(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors(token) == []
    # nothing outside its temporary directory changed
    assert _snapshot(canary) == before
    assert sorted(p.name for p in REPO.iterdir()) == repo_top
    assert accepted == []
    # the next program runs normally
    follow = run_tests("print(int(input()) + 1)", [("1\n", "2"), ("2\n", "3")], limits=LIMITS)
    assert [v.status for v in follow] == ["pass", "pass"]


def test_sandbox_user_and_namespaces() -> None:
    """As seen from inside: unprivileged uid, own pid namespace, no capabilities, private /tmp."""
    code = ("import os\nstatus = open('/proc/self/status').read()\n"
            "cap = [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')][0]\n"
            "print(os.getuid() != 0, int(cap, 16) == 0, len([p for p in os.listdir('/proc') if p.isdigit()]) < 8,"
            " os.getcwd(), os.listdir('.'))\n")
    verdicts = run_tests(code, [("", "True True True /tmp []")], limits=LIMITS)
    assert [v.status for v in verdicts] == ["pass"], verdicts

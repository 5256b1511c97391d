"""vpo.sandbox: verdicts, LiveCodeBench comparison semantics, limits, batch API, both isolation modes."""

from __future__ import annotations

import pytest

import vpo.sandbox as sandbox
from vpo.sandbox import Limits, Program, Verdict, compare_functional, compare_stdin, run_batch, run_tests

FAST = Limits(timeout=1.0, wall_timeout=2.0, memory_mb=256)
DOUBLE = "print(int(input()) * 2)"
SOLUTION = """
class Solution:
    def pairSum(self, nums: List[int], target: int) -> Tuple[int, int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return (seen[target - x], i)
            seen[x] = i
"""


def statuses(verdicts: list[Verdict]) -> list[str]:
    return [v.status for v in verdicts]


# ----- comparison semantics -----------------------------------------------------------


@pytest.mark.parametrize(("out", "expected", "ok"), [
    ("42\n", "42", True),
    ("  42  \n\n", "42\n", True),
    ("1 2\n3\n", "1 2\n3", True),
    ("1  2\n", "1 2", True),            # whitespace tokens, Decimal-equal
    ("2.50\n", "2.5", True),            # Decimal fallback
    ("2.5000000001", "2.5", False),     # exact decimal equality, no tolerance
    ("1e3", "1000", True),
    ("a b", "a  b", False),             # non-numeric token that differs textually
    ("1\n2", "1 2", False),             # line counts differ
    ("Yes", "yes", False),
    ("", "", True),
])
def test_compare_stdin(out: str, expected: str, ok: bool) -> None:
    assert compare_stdin(out, expected) is ok


@pytest.mark.parametrize(("got", "expected", "ok"), [
    ("[0, 1]", "[0, 1]", True),
    ("[0, 1]", "[0,1]", True),
    ("1.0", "1", True),
    ("true", "true", True),
    ("[1, 0]", "[0, 1]", False),
    ("\"1\"", "1", False),
    (None, "1", False),
    ("not json", "1", False),
])
def test_compare_functional(got: str | None, expected: str, ok: bool) -> None:
    assert compare_functional(got, expected) is ok


# ----- running -------------------------------------------------------------------------


def test_stdin_mode_every_test_runs_after_failures() -> None:
    tests = [("x\n", "1"), ("21\n", "42"), ("1\n", "3"), ("5\n", "10")]
    verdicts = run_tests(DOUBLE, tests, limits=FAST)
    assert statuses(verdicts) == ["error", "pass", "wrong", "pass"]
    assert "ValueError" in verdicts[0].detail
    assert all(v.time >= 0 and v.wall > 0 for v in verdicts)


def test_functional_mode_solution_class_tuple_as_list() -> None:
    tests = [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]"},
             {"input": "[3, 3]\n6", "output": "[0, 1]"},
             {"input": "[1, 2]\n3", "output": "[1, 0]"}]
    assert statuses(run_tests(SOLUTION, tests, mode="functional", fn_name="pairSum", limits=FAST)) == [
        "pass", "pass", "wrong"]


def test_functional_mode_plain_function_and_missing_function() -> None:
    code = "def add(a, b):\n    return a + b\n"
    tests = [("1\n2", "3"), ("[1]\n[2]", "[1, 2]")]
    assert statuses(run_tests(code, tests, mode="functional", fn_name="add", limits=FAST)) == ["pass", "pass"]
    missing = run_tests(code, tests, mode="functional", fn_name="nowhere", limits=FAST)
    assert statuses(missing) == ["error", "error"]
    assert "nowhere" in missing[0].detail


def test_unserialisable_result_is_wrong_not_pass() -> None:
    code = "class Any_:\n    def __eq__(self, other):\n        return True\n\ndef f():\n    return Any_()\n"
    assert statuses(run_tests(code, [("", "1")], mode="functional", fn_name="f", limits=FAST)) == ["wrong"]


def test_tests_are_isolated_from_each_other() -> None:
    # a global mutated by one test is fresh in the next (one fork per test)
    code = "import builtins\nn = getattr(builtins, 'counter', 0) + 1\nbuiltins.counter = n\nprint(n)\n"
    assert statuses(run_tests(code, [("", "1")] * 3, limits=FAST)) == ["pass"] * 3


def test_system_exit_keeps_output_and_main_guard_runs() -> None:
    code = "import sys\ndef main():\n    print(7)\n    sys.exit(3)\nif __name__ == '__main__':\n    main()\n"
    assert statuses(run_tests(code, [("", "7")], limits=FAST)) == ["pass"]


def test_stdin_reading_styles() -> None:
    code = ("import sys\nn = int(sys.stdin.readline())\nrest = sys.stdin.read().split()\n"
            "print(n + sum(map(int, rest)))\n")
    assert statuses(run_tests(code, [("3\n1 2\n3\n", "9")], limits=FAST)) == ["pass"]
    code2 = "data = open(0).read().split()\nprint(sum(map(int, data)))\n"
    assert statuses(run_tests(code2, [("1 2 3", "6")], limits=FAST)) == ["pass"]


def test_preamble_names_and_large_output() -> None:
    code = "print(gcd(12, 18), sqrt(16), list(accumulate([1, 2])))\nprint('y' * 200000)\n"
    expected = "6 4.0 [1, 3]\n" + "y" * 200000
    assert statuses(run_tests(code, [("", expected)], limits=FAST)) == ["pass"]


def test_limits_timeout_memory_output_compile() -> None:
    tests = [("", "1")]
    assert statuses(run_tests("while True:\n    pass\n", tests, limits=FAST)) == ["timeout"]
    assert statuses(run_tests("x = bytearray(4 * 10**9)\n", tests, limits=FAST)) == ["memory"]
    small_output = Limits(timeout=1.0, wall_timeout=2.0, memory_mb=256, output_bytes=1000)
    out = run_tests("print('z' * 5000)\n", tests, limits=small_output)
    assert statuses(out) == ["error"] and "output limit" in out[0].detail
    bad = run_tests("def f(:\n", tests * 2, limits=FAST)
    assert statuses(bad) == ["error", "error"] and "SyntaxError" in bad[0].detail


def test_timeout_loses_only_that_test() -> None:
    code = "n = int(input())\nwhile n == 0:\n    pass\nprint(n)\n"
    verdicts = run_tests(code, [("1\n", "1"), ("0\n", "0"), ("2\n", "2")], limits=FAST)
    assert statuses(verdicts) == ["pass", "timeout", "pass"]
    assert verdicts[1].time > 0.1 and verdicts[1].wall >= 0.9  # loaded machines: CPU share varies


def test_subsecond_cpu_limit_is_enforced_after_the_fact() -> None:
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\nprint(1)\n"
    limits = Limits(timeout=0.3, wall_timeout=3.0, memory_mb=256)
    assert statuses(run_tests(code, [("", "1")], limits=limits)) == ["timeout"]


def test_empty_tests_and_bad_arguments() -> None:
    assert run_tests(DOUBLE, []) == []
    with pytest.raises(ValueError, match="mode"):
        run_tests(DOUBLE, [("1", "2")], mode="repl")
    with pytest.raises(ValueError, match="fn_name"):
        run_tests(DOUBLE, [("1", "2")], mode="functional")
    with pytest.raises(ValueError, match="code"):
        run_tests(b"print(1)", [("1", "2")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="test 0"):
        run_tests(DOUBLE, [("1",)])
    with pytest.raises(ValueError, match="not JSON"):
        run_tests(SOLUTION, [("[1, 2\n3", "[0, 1]")], mode="functional", fn_name="pairSum")
    with pytest.raises(ValueError, match="limits"):
        run_tests(DOUBLE, [("1", "2")], limits={"timeout": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [
    {"timeout": 0}, {"timeout": -1.0}, {"timeout": float("inf")}, {"memory_mb": 10},
    {"processes": -1}, {"wall_timeout": 0}, {"output_bytes": 0}, {"open_files": True},
])
def test_limits_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Limits(**kwargs)


def test_limits_wall_default() -> None:
    assert Limits(timeout=2.0).wall == 5.0
    assert Limits(timeout=2.0, wall_timeout=3.0).wall == 3.0


def test_run_batch_parallel_in_order() -> None:
    programs = [Program(DOUBLE, [("1\n", "2"), ("2\n", "4")]),
                {"code": "print(input())", "tests": [("a\n", "a"), ("b\n", "c")]},
                Program(SOLUTION, [("[1, 2]\n3", "[0, 1]")], mode="functional", fn_name="pairSum"),
                Program("while True: pass", [("", "")])]
    results = run_batch(programs, workers=2, limits=FAST)
    assert [statuses(r) for r in results] == [["pass", "pass"], ["pass", "wrong"], ["pass"], ["timeout"]]
    assert run_batch([]) == []
    with pytest.raises(ValueError, match="workers"):
        run_batch(programs, workers=0)
    with pytest.raises(ValueError, match="program 0"):
        run_batch([{"code": "x"}])
    assert sandbox.default_workers() >= 1


def test_isolation_mode_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", "rlimit")
    assert sandbox.isolation_mode() == "rlimit"
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", "docker")
    with pytest.raises(ValueError, match="VPO_SANDBOX_ISOLATION"):
        sandbox.isolation_mode()


def test_missing_bwrap_warns_once_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VPO_SANDBOX_ISOLATION", raising=False)
    # the probe's state lives in vpo.sandbox.isolation (the package split)
    monkeypatch.setattr(sandbox.isolation, "_probe_result", {})
    monkeypatch.setattr(sandbox.isolation, "_warned", False)
    monkeypatch.setattr(sandbox.isolation.shutil, "which", lambda name: None)
    with pytest.warns(RuntimeWarning, match="rlimit-only"):
        assert sandbox.isolation_mode() == "rlimit"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sandbox.isolation_mode() == "rlimit"   # no second warning
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", "bwrap")
    with pytest.raises(RuntimeError, match="bubblewrap"):
        sandbox.isolation_mode()


def test_rlimit_only_mode_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", "rlimit")
    tests = [("x\n", "1"), ("21\n", "42"), ("1\n", "3")]
    assert statuses(run_tests(DOUBLE, tests, limits=FAST)) == ["error", "pass", "wrong"]
    assert statuses(run_tests("while True:\n    pass\n", [("", "")], limits=FAST)) == ["timeout"]
    assert statuses(run_tests("x = bytearray(4 * 10**9)\n", [("", "")], limits=FAST)) == ["memory"]
    # RLIMIT_NPROC holds (as root the sandbox runs as nobody)
    code = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    n += 1\nprint('capped' if n < 100 else n)\n")
    assert statuses(run_tests(code, [("", "capped")], limits=FAST)) == ["pass"]


# ----- start-up shortcuts keep the semantics ----------------------------------


def test_partial_preamble_binds_full_preamble_values() -> None:
    # Only the preamble parts a program mentions are imported, but each mentioned name has
    # the value the whole preamble gives it (typing.Counter is overridden by collections',
    # math.pow by operator's).
    code = ("import typing\nprint(List is typing.List, Counter is collections.Counter, pow is operator.pow,"
            " sqrt(16), deque.__module__)\n")
    assert statuses(run_tests(code, [("", "True True True 4.0 collections")], limits=FAST)) == ["pass"]
    # a program mentioning no preamble name
    assert statuses(run_tests("print(sum(map(int, input().split())))", [("1 2\n", "3")], limits=FAST)) == ["pass"]


def test_dynamic_access_sees_whole_preamble() -> None:
    code = "print(globals()['gcd'](4, 6), eval('lcm(4, 6)'), 'heappush' in dir())\n"
    assert statuses(run_tests(code, [("", "2 12 True")], limits=FAST)) == ["pass"]


def test_site_builtins_and_stdin_seek() -> None:
    # the driver starts without site: exit/quit still exist, and stdin is a seekable file
    code = ("data = input()\nimport sys\nsys.stdin.seek(0)\nprint(data, sys.stdin.read().strip(),"
            " sys.stdin.seekable(), open('/dev/stdin').read() is not None)\nexit(0)\nprint('after exit')\n")
    verdicts = run_tests(code, [("abc\n", "abc abc True True"), ("xy\n", "xy xy True True")], limits=FAST)
    assert statuses(verdicts) == ["pass", "pass"], verdicts
    assert statuses(run_tests("print(1)\nquit()\nprint(2)\n", [("", "1")], limits=FAST)) == ["pass"]


@pytest.mark.parametrize("isolation", ["auto", "rlimit"])
def test_runs_without_any_privilege(isolation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", isolation)
    code = ("import os\nr, e, s = os.getresuid()\nst = open('/proc/self/status').read()\n"
            "cap = [l.split()[1] for l in st.splitlines() if l.startswith('CapEff')][0]\n"
            "print(0 not in (r, e, s) + os.getresgid(), os.getgroups() == [] or os.getgroups() == [os.getgid()],"
            " int(cap, 16) == 0)\n")
    assert statuses(run_tests(code, [("", "True True True")], limits=FAST)) == ["pass"]


def test_timing_out_test_costs_its_wall_limit_once() -> None:
    import time
    limits = Limits(timeout=1.0, wall_timeout=1.0, memory_mb=256)
    started = time.monotonic()
    verdicts = run_tests("while True:\n    pass\n", [("", "1")], limits=limits)
    assert statuses(verdicts) == ["timeout"]
    # its wall limit ended it, once: not the pool's backstop, which acts 10 s after every test's wall limit
    assert time.monotonic() - started < limits.wall + 0.5 + 10.0


@pytest.mark.parametrize("isolation", ["auto", "rlimit"])
def test_run_batch_leaves_nothing_behind_but_warm_workers(isolation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import glob
    import os
    monkeypatch.setenv("VPO_SANDBOX_ISOLATION", isolation)
    workdirs = set(glob.glob("/tmp/vpo-sandbox-*"))

    def children() -> set[int]:
        found = set()
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        stat = fh.read()
                except OSError:
                    continue
                if int(stat[stat.rindex(b")") + 2:].split()[1]) == os.getpid():
                    found.add(int(name))
        return found

    # Earlier tests in the same pytest process may leave long-lived helpers (e.g. a
    # multiprocessing resource tracker); only children that run_batch created count.
    before = children()
    programs = [Program(DOUBLE, [(f"{i}\n", str(2 * i))]) for i in range(7)] + [Program(DOUBLE, [])]
    programs[3] = Program("while True: pass", [("", "")])
    results = run_batch(programs, workers=2, limits=FAST)
    assert [statuses(r) for r in results] == [["pass"]] * 3 + [["timeout"]] + [["pass"]] * 3 + [[]]
    # The warm workers stay for the next call; nothing else of the batch survives,
    # and after shutdown() not even they do.
    assert children() - before - sandbox.worker_pids() == set()
    sandbox.shutdown()
    assert children() - before == set()
    assert set(glob.glob("/tmp/vpo-sandbox-*")) <= workdirs
    with pytest.raises(ValueError, match="program 0: limits"):
        run_batch([Program(DOUBLE, [("1", "2")], limits={"timeout": 1})])  # type: ignore[arg-type]

"""Reward workers under verl's threads: 16 threads call ``compute_score`` at once with a mix of
right, wrong, hostile and hanging programs and math answers. Every verdict must be the one the
same call gets alone (no cross-talk), every thread must finish (no deadlock), and closing the
workers must leave no process behind. Throughput: ``benchmarks/reward_threads.py``."""

from __future__ import annotations

import json
import os
import random
import threading

import pytest

pytest.importorskip("math_verify")

THREADS = 16


def _children() -> set[int]:
    """Process ids whose parent is this process."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
                if int(fields[1]) == os.getpid():
                    found.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def reward_calls(math_problems: int = 6, hanging: int = 1, code_timeout: float = 1.0) -> list[tuple]:
    """``(data_source, solution_str, ground_truth, extra_info)`` of a mixed load: per math problem
    a right and a wrong answer (a fraction unique to the problem, so a verdict that went to the
    wrong caller shows), ``hanging`` answers whose check runs for minutes (killed at the time
    limit), and per code problem a right and a wrong program, one that tries to kill its worker
    and one that never ends."""
    from vpo.export import export_rows
    from vpo.tasks import get_task

    calls = []
    math_task = get_task("math", timeout=1.0, workers=2)  # two checking processes: a small pool, quick to start
    examples = [math_task.validate({"id": f"q{k}", "question": f"Compute {k + 1}/{k + 2}.",
                                    "answer": f"\\frac{{{k + 1}}}{{{k + 2}}}"}, k) for k in range(math_problems)]
    for example, row in zip(examples, export_rows(math_task, examples, split="test", fmt="verl", answers=1,
                                                  task_params={"timeout": 1.0, "workers": 2}), strict=True):
        k = int(example["id"][1:])
        info = dict(row["extra_info"])
        truth = row["reward_model"]["ground_truth"]
        calls.append(("math", f"so it is \\boxed{{\\frac{{{2 * k + 2}}}{{{2 * k + 4}}}}}", truth, info))
        calls.append(("math", f"so it is \\boxed{{\\frac{{{k + 2}}}{{{k + 1}}}}}", truth, info))
        if k < hanging:
            calls.append(("math", "so it is \\boxed{9^{9^{9}}}", truth, info))
    code_task = get_task("code", timeout=code_timeout, max_tests=2)  # a program that never ends costs 2 limits
    problems = [p for p in code_task.examples("test", source="fixtures") if p["id"] in ("fx_sum", "fx_avg")]
    programs = {
        "fx_sum": "n = int(input())\nprint(sum(map(int, input().split())))\n",
        "fx_avg": "n = int(input())\na = list(map(int, input().split()))\nprint(f'{sum(a) / n:.2f}')\n",
    }
    rows = export_rows(code_task, problems, split="test", fmt="verl", answers=1,
                       task_params={"timeout": code_timeout, "max_tests": 2})
    for problem, row in zip(problems, rows, strict=True):
        truth, info = row["reward_model"]["ground_truth"], dict(row["extra_info"])
        hostile = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"  # tries to kill its worker
        for code in (programs[problem["id"]], "print(0)\n", hostile, "while True:\n    pass\n"):
            calls.append(("code", f"```python\n{code}```", truth, info))
    return calls


def test_sixteen_threads_of_mixed_rewards_get_their_own_verdicts_and_leave_no_process(monkeypatch):
    from vpo.integrations import rollout_scorer, verl

    monkeypatch.setattr(rollout_scorer, "_TASK_CACHE", {})  # this test's tasks, closed at its end
    before = _children()
    calls = reward_calls()
    scores = [verl.compute_score(*call, method="grpo")["score"] for call in calls]  # alone, one at a time
    right = [s for call, s in zip(calls, scores, strict=True) if "9^{9^{9}}" not in call[1]]
    assert scores.count(1.0) == 6 + 2 and all(s == 0.0 for s in scores if s != 1.0), scores
    assert len(right) == len(calls) - 1

    rng = random.Random(0)
    plan = [rng.sample(range(len(calls)), 6) for _ in range(THREADS)]  # each call about 4 times, shuffled
    got: dict[tuple[int, int], float] = {}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in plan[t]:
                got[(t, i)] = verl.compute_score(*calls[i], method="grpo")["score"]
        except BaseException as err:  # noqa: BLE001  (reported below)
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not [t for t in threads if t.is_alive()], "a reward call never returned (deadlock)"
    assert not errors, errors
    assert {key: got[key] for key in sorted(got)} == {(t, i): scores[i] for t in range(THREADS) for i in plan[t]}

    math_task = next(task for (name, *_), task in rollout_scorer._TASK_CACHE.items() if name == "math")
    assert 2 <= math_task._checker.peak <= math_task._checker.size  # answers were checked in parallel
    assert len(math_task._checker.processes) <= math_task._checker.size
    math_task._checker.close()
    from vpo.sandbox.pool import shutdown

    shutdown()
    leaked = _children() - before
    assert not leaked, [open(f"/proc/{pid}/cmdline").read().replace("\0", " ") for pid in leaked]
    json.dumps(scores)  # plain floats

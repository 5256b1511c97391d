"""Scoring throughput of each task on one core: answers scored per second.

Usage: ``python benchmarks/tasks.py [--seconds 1.0] [--tasks maze,musique,eureqa,toolcall,code,math,math-comp]``

For every task it scores a fixed mix of answers (right, partly right, wrong, garbage) with
``task.score`` (single answers) and ``task.score_chain(m=3)`` (three answers per text, parse +
dedup + pad included), repeating the mix for about ``--seconds`` each, and prints a table.
Target: >= 5000 answers/s for the maze and the text tasks (code runs programs, so it is
reported but has no target); >= 2000 for math on the GSM8K-style mix (math-comp, the
MATH-style mix, is reported without a target; the math rows add a cold-cache line). Thread
pools are pinned to 1 so the figure is per core.

Code: 6 fixture problems padded to 16 tests each, answers right, wrong, crashing and not
parsing; a single answer runs on one warm sandbox worker, a chain's three in one
``run_batch`` (the sandbox's workers, one per core). Also printed: tests per second and
whether the right answers pass and the others fail.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

TARGET = 5000.0


def _maze_answers(task, examples, rng):
    # random routes of half, full and over-budget length plus a refusal, per maze; the mazes are
    # the first 4 of the paper's test set (size 9 -> protocol "paper"), validated once at load
    moves = ("UP", "DOWN", "LEFT", "RIGHT")
    out = []
    for example in examples:
        budget = int(example.get("budget", example.get("max_steps", 40)) or 40)
        for length in (budget // 2, budget, budget + 5):
            out.append((" ".join(rng.choice(moves) for _ in range(length)), example))
        out.append(("I cannot solve this.", example))
    return out


def _musique_answers(task, examples, rng):
    out = []
    for ex in examples:
        gold = [s["paragraph_support_idx"] for s in ex["question_decomposition"]]
        idxs = [p["idx"] for p in ex["paragraphs"]]
        out += [(f"Reasoning about the paragraphs... <support>{', '.join(map(str, gold))}</support>"
                 f"<answer>{ex['answer']}</answer>", ex),
                (f"<support>{rng.choice(idxs)}, {gold[0]}</support><answer>{ex['answer'].split()[0]} maybe</answer>", ex),
                (f"<support>{', '.join(map(str, idxs))}</support><answer>no idea</answer>", ex),
                ("I think the answer is somewhere in paragraph 3.", ex)]
    return out


def _eureqa_answers(task, examples, rng):
    out = []
    for ex in examples:
        names = {k: (v if isinstance(v, str) else v[0]) for k, v in ex["entities"].items()}
        full = "\n".join(f"<entity_{k}>{v}</entity_{k}>" for k, v in names.items())
        half = "\n".join(f"<entity_{k}>{v if k in 'AC' else 'Someone_Else'}</entity_{k}>" for k, v in names.items())
        out += [("Working backwards from the last sentence...\n" + full, ex), (half, ex),
                ("<entity_A>Unknown</entity_A>", ex), ("no tags at all", ex)]
    return out


def _toolcall_answers(task, examples, rng):
    out = []
    for ex in examples:
        calls = "\n".join(json.dumps(c) for c in ex["gold_calls"])
        action = f"<tool_call>\n{calls}\n</tool_call>" if calls else "<response> Could you tell me more? </response>"
        gold = "<think> The user needs this. </think>\n" + action
        wrong = '<think> hm </think>\n<tool_call>\n{"name": "other_tool", "parameters": {"q": "x"}}\n</tool_call>'
        out += [(gold, ex), (wrong, ex), ("<think> no tool </think><response> Done. </response>", ex),
                ("random text {\"name\": 1", ex)]
    return out


# Code: the bundled fixture problems, each padded to 16 tests (its tests repeated), with a
# right, a wrong, a crashing and an unparseable answer per problem; every parsed answer runs
# all 16 tests in the sandbox's warm workers. No infinite loops: a timing-out test costs its
# limit (6 s by default) whatever the sandbox does.
CODE_TESTS = 16
_CODE_RIGHT = {
    "fx_sum": "n = int(input())\nprint(sum(map(int, input().split())))",
    "fx_avg": "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.2f}')",
    "fx_mirror": "r = int(input())\nfor _ in range(r):\n    print(input()[::-1])",
    "fx_pair": ("class Solution:\n    def pairWithSum(self, nums: List[int], target: int) -> List[int]:\n"
                "        seen = {}\n        for j, x in enumerate(nums):\n            if target - x in seen:\n"
                "                return [seen[target - x], j]\n            seen.setdefault(x, j)\n        return []"),
    "fx_vowels": ("class Solution:\n    def countVowels(self, s: str) -> int:\n"
                  "        return sum(c in 'aeiouAEIOU' for c in s)"),
    "fx_minmax": ("class Solution:\n    def minMax(self, nums: List[int]) -> List[int]:\n"
                  "        return [min(nums), max(nums)]"),
}


def _code_examples(task, examples):
    padded = []
    for ex in task.examples(source="fixtures"):
        if ex["id"] in _CODE_RIGHT:
            tests = ex["tests"]
            padded.append({**ex, "tests": [dict(tests[i % len(tests)]) for i in range(CODE_TESTS)]})
    return padded


def _code_answers(task, examples, rng):
    out = []
    for ex in _code_examples(task, examples):
        right = _CODE_RIGHT[ex["id"]]
        wrong = right.replace("sum(", "len(").replace("[::-1]", "").replace("min(nums)", "max(nums)")
        if wrong == right:
            wrong = right + "\n# and an off-by-one\n" + ("print(0)" if ex["mode"] == "stdin" else "")
            if ex["mode"] != "stdin":
                wrong = right.replace("return [seen[target - x], j]", "return [j, seen[target - x]]")
        crash = right.replace("int(input())", "int(input()) // 0") if ex["mode"] == "stdin" else \
            right.replace("        return", "        raise ValueError\n        return", 1)
        for code in (right, wrong, crash):
            out.append((f"```python\n{code}\n```", ex))
        out.append(("I would write a loop here.", ex))
    return out


# ----- math: GSM8K-style and MATH-style mixes -------------------------------------------------
# The task caches parses (worker) and dedup keys (caller), and bench() below warms up on the
# mix before timing, so its rows are the warm rate; math_cold() scores never-seen answers
# with a fresh task, which is what a training step meets. Target 2000 answers/s (GSM8K mix).


def _math_answers(task, examples, rng):
    out = []
    for ex in examples:
        a = ex["answer"]
        wrong = int(a.replace(",", "")) + rng.randint(1, 9)
        out += [(f"Let me work it out step by step... so the answer is \\boxed{{{a}}}.", ex),
                (f"First, ... Then ... I get \\boxed{{{wrong}}}.", ex),
                (f"The total is {a}.\n#### {a}", ex),
                (f"It costs \\boxed{{\\${a}}}", ex),           # not a plain integer: math-verify
                ("I could not solve this one.", ex)]
    return out


def _math_comp_answers(task, examples, rng):
    out = []
    for ex in examples:
        r = rng.randint(2, 99)
        out += [(f"Working... $\\boxed{{{ex['answer']}}}$", ex),
                (f"... hence \\boxed{{\\frac{{{r}}}{{{r + 5}}}}}", ex),
                (f"... hence \\boxed{{{r}}}", ex),
                (f"... so \\boxed{{x = {r}.5}}", ex),
                ("no boxed answer here", ex)]
    return out


def math_cold(mix: str, count: int = 400) -> dict:
    """Answers/s of ``count`` never-seen answers scored once each by a fresh task (cold caches)."""
    from vpo.tasks import get_task

    task = get_task("math")
    examples = task.examples("test") if mix == "math" else task.examples("test", source="fixture:math")
    build = _math_answers if mix == "math" else _math_comp_answers
    rng = random.Random(1)
    pairs: list = []
    while len(pairs) < count:
        pairs += build(task, examples, rng)
    pairs = pairs[:count]
    task.score("\\boxed{\\frac{1}{3}}", examples[0])  # start the worker (imports sympy): not timed
    start = time.perf_counter()
    for text, example in pairs:
        task.score(text, example)
    return {"task": mix + " cold", "mix": count, "single": count / (time.perf_counter() - start)}


BUILDERS: dict[str, tuple[dict, Callable]] = {
    "maze": ({"size": 9}, _maze_answers),
    "musique": ({}, _musique_answers),
    "eureqa": ({}, _eureqa_answers),
    "toolcall": ({}, _toolcall_answers),
    "code": ({}, _code_answers),
    "math": ({}, _math_answers),
    "math-comp": ({}, _math_comp_answers),   # the "math" task on the MATH-style fixture
}
TARGETS = {"code": None, "math": 2000.0, "math-comp": None}
"""Per-task answers/s targets where they differ from TARGET (None: reported, no target)."""


def _rate(fn: Callable[[], int], seconds: float) -> float:
    """Units per second of ``fn`` (which returns how many units one call processed)."""
    fn()  # warm-up
    done, start = 0, time.perf_counter()
    while True:
        done += fn()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def bench(name: str, seconds: float) -> dict:
    from vpo.tasks import get_task

    params, build = BUILDERS[name]
    try:
        task = get_task("math" if name == "math-comp" else name, **params)
        if name == "math-comp":
            examples = task.examples("test", source="fixture:math")
        else:
            examples = task.examples("test", 4, seed=0) if name != "maze" else task.examples("test", 4)
    except Exception as err:  # noqa: BLE001 - a missing optional task is reported, not fatal
        return {"task": name, "skipped": f"{type(err).__name__}: {err}"[:70]}
    pairs = build(task, examples, random.Random(0))
    if not pairs:
        return {"task": name, "skipped": "no examples"}
    if name == "code":
        from vpo.sandbox import run_tests

        run_tests("print(1)", [("", "1")])  # the sandbox's one-time set-up and a warm worker
        scored = [task.score(text, example) for text, example in pairs]
        extra = {"tests_per_answer": CODE_TESTS,
                 "right_answers_pass": all(v.all() for v, (t, _e) in zip(scored[0::4], pairs[0::4], strict=True)),
                 "others_fail": not any(v.all() for i, v in enumerate(scored) if i % 4)}
    else:
        extra = {}

    def single() -> int:
        for text, example in pairs:
            task.score(text, example)
        return len(pairs)

    tag = task.rewrite_rule.tag

    def joined(j: int) -> str:
        texts = [pairs[(j + i) % len(pairs)][0] for i in range(3)]
        if name == "code":  # m fenced blocks separated by ---
            return "\n---\n".join(texts)
        return "\n".join(f"<{tag}_{i + 1}>{t}</{tag}_{i + 1}>" for i, t in enumerate(texts))

    chains = [(joined(j), pairs[j][1]) for j in range(len(pairs))]

    def chain() -> int:
        for text, example in chains:
            task.score_chain(text, example, 3)
        return 3 * len(chains)

    return {"task": name, "mix": len(pairs), "single": _rate(single, seconds), "chain": _rate(chain, seconds),
            **extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per measurement")
    parser.add_argument("--tasks", default=",".join(BUILDERS), help="comma-separated task names")
    args = parser.parse_args(argv)
    print(f"{'task':<10} {'mix':>4} {'score ans/s':>12} {'us/ans':>8} {'chain m=3 ans/s':>16} {'target':>8}")
    ok = True
    for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        row = bench(name, args.seconds)
        if "skipped" in row:
            print(f"{name:<10} skipped ({row['skipped']})")
            continue
        target = TARGETS.get(name, TARGET)
        passed = target is None or min(row["single"], row["chain"]) >= target
        ok &= passed
        print(f"{name:<10} {row['mix']:>4} {row['single']:>12,.0f} {1e6 / row['single']:>8.1f} "
              f"{row['chain']:>16,.0f} {(f'>={target:.0f} ' + ('ok' if passed else 'LOW')) if target else '-':>8}")
        if name in ("math", "math-comp"):
            cold = math_cold(name)
            print(f"{cold['task']:<10} {cold['mix']:>4} {cold['single']:>12,.0f} {1e6 / cold['single']:>8.1f} "
                  f"{'':>16} {'(new answers, fresh caches)'}")
        if name == "code":
            # Answers that parse run every test; a quarter of the mix does not parse.
            ran = 3 / 4 * CODE_TESTS
            print(f"{'':<10} code: {row['tests_per_answer']} tests per answer; {row['single'] * ran:,.0f} and "
                  f"{row['chain'] * ran:,.0f} tests/s; right answers pass: {row['right_answers_pass']}, "
                  f"others fail: {row['others_fail']}; load average {os.getloadavg()[0]:.2f}")
            ok &= row["right_answers_pass"] and row["others_fail"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

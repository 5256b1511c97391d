"""Scoring throughput of each task on one core: answers scored per second.

Usage: ``python benchmarks/tasks.py [--seconds 1.0] [--tasks maze,musique,eureqa,toolcall,code]``

For every task it scores a fixed mix of answers (right, partly right, wrong, garbage) with
``task.score`` (single answers) and ``task.score_chain(m=3)`` (three answers per text, parse +
dedup + pad included), repeating the mix for about ``--seconds`` each, and prints a table.
Target: >= 5000 answers/s for the maze and the text tasks (code runs programs, so it is
reported but has no target). Thread pools are pinned to 1 so the figure is per core.
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


def _code_answers(task, examples, rng):
    return [("```python\nprint(input())\n```", ex) for ex in examples[:2]]


BUILDERS: dict[str, tuple[dict, Callable]] = {
    "maze": ({"size": 9}, _maze_answers),
    "musique": ({}, _musique_answers),
    "eureqa": ({}, _eureqa_answers),
    "toolcall": ({}, _toolcall_answers),
    "code": ({}, _code_answers),
}


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
        task = get_task(name, **params)
        examples = task.examples("test", 4, seed=0) if name != "maze" else task.examples("test", 4)
    except Exception as err:  # noqa: BLE001 - a missing optional task is reported, not fatal
        return {"task": name, "skipped": f"{type(err).__name__}: {err}"[:70]}
    pairs = build(task, examples, random.Random(0))
    if not pairs:
        return {"task": name, "skipped": "no examples"}
    if name == "code":
        seconds = min(seconds, 0.2)

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

    return {"task": name, "mix": len(pairs), "single": _rate(single, seconds), "chain": _rate(chain, seconds)}


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
        target = TARGET if name != "code" else None
        passed = target is None or min(row["single"], row["chain"]) >= target
        ok &= passed
        print(f"{name:<10} {row['mix']:>4} {row['single']:>12,.0f} {1e6 / row['single']:>8.1f} "
              f"{row['chain']:>16,.0f} {('>=5000 ' + ('ok' if passed else 'LOW')) if target else '-':>8}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

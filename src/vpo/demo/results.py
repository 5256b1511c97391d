"""The demo's results: metrics of every method against its warm start, the paper's numbers
beside ours, the oracle ceiling, distinct routes, and the findings written at the top of the
report.

Usage::

    from vpo.demo.results import build_metrics
    metrics = build_metrics(cfg, task, methods, seeds, warm, runs, evaluated)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from vpo.demo.config import METHODS, DemoConfig
from vpo.tasks.maze.format import CompactMazeFormat

PAPER = {"grpo": 0.432, "max_at_k": 0.577, "multi_rlvr": 0.436, "vpo": 0.593}
"""The paper's maze best@30 (9x9, Qwen3-4B), docs/algorithm.md §6."""
PAPER_DIVERSITY = (0.003, 1.01)
"""The paper's reward diversity on the maze, GRPO -> VPO."""
PAPER_REWARD = {
    "linear": ("Reward: linear, as the paper's notes describe it (gold, diamond and avoid-lava as fractions; the bonus "
               "tile B has no effect). The authors' released generator stamps convex_bonus on these mazes instead "
               "(those three squared, x1.5 after visiting B, clamped to 1), so the paper's numbers may be on that "
               "scale, not this run's; --reward-mode convex_bonus scores as the release does."),
    "convex_bonus": ("Reward: convex_bonus, as the authors' released generator stamps on these mazes (gold, diamond "
                     "and avoid-lava squared, x1.5 after visiting the bonus tile B, clamped to 1); the paper's notes "
                     "describe linear fractions instead."),
}
"""The reward mode's sentence beside the paper's table: the paper's notes and its released generator
disagree (docs/fidelity.md), and the report says which one its numbers use."""
SMOKE_TEST = ("This is a --quick smoke run (one seed, a smaller model, few steps and mazes): it checks that every "
              "stage runs, and its numbers say nothing about the methods. Run `vpo demo` for results.")


WARMUP_STORY = {
    "random_walk": ("on random walks that reach the exit within the budget, blind to gold, diamonds and lava (each "
                    "move uniform among the moves into an open cell from which the exit is still reachable), so "
                    "the warm start knows the format and the walls but was never shown a good route, like a "
                    "pretrained LLM that knows the format but not the task"),
    "oracle": ("on the three oracle routes of every maze (shortest lava-free, via gold, via diamond), which puts "
               "the warm start close to the ceiling, so RL can only sharpen it"),
}
"""What the report says the warm start was trained on, and why (by ``--warmup-data``)."""


def oracle_vectors(example: dict[str, Any]) -> list[list[float]]:
    """Reward vectors (3, D) of the three oracle routes of ``example``."""
    from vpo.tasks.maze import oracle_routes, simulate

    return [simulate(example, r).vector.tolist() for r in oracle_routes(example).values()]


def oracle_reference(task: Any, examples: list[dict[str, Any]], weights: np.ndarray) -> dict[str, Any]:
    """The oracle ceiling: the pool of the three oracle routes of each maze (shortest lava-free,
    via gold, via diamond; the demonstrations of ``--warmup-data oracle``).

    ``weights`` (N, E, D): the evaluation weights. Returns {label, best_at_k, pref_best_at_k}:
    the fixed-scalar max and E_w[max] of that 3-route pool, averaged over the N mazes, i.e. what
    a policy that always proposes those three routes reaches at any k >= 3.
    """
    from vpo.metrics import expected_max

    fixed, pref = [], []
    for example, w in zip(examples, weights, strict=True):
        vectors = np.array(oracle_vectors(example))
        fixed.append(float(np.max(task.scalar(vectors))))
        pref.append(expected_max(vectors, w))
    return {"label": "the 3 oracle routes", "best_at_k": float(np.mean(fixed)),
            "pref_best_at_k": float(np.mean(pref))}


def distinct_answers(pools: Any, fmt: CompactMazeFormat, examples: list[dict[str, Any]]) -> float:
    """Mean number of distinct non-empty routes (as move letters) in a maze's pool of answers."""
    counts = []
    for example, texts in zip(examples, pools.texts, strict=True):
        routes = {"".join(ch for ch in answer if ch in "UDLR")
                  for text in texts for answer in fmt.answers(text, example, pools.m)}
        counts.append(len(routes - {""}))
    return float(np.mean(counts))


def _series_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    steps = records[0]["steps"]
    series = {}
    for name in records[0]["series"]:
        rows = [r["series"][name] for r in records if len(r["series"][name]) == len(steps)]
        if not rows:
            continue
        arr = np.asarray(rows, dtype=np.float64)
        series[name] = {"mean": arr.mean(axis=0).tolist(), "low": arr.min(axis=0).tolist(),
                        "high": arr.max(axis=0).tolist()}
    return {"steps": steps, "series": series}


def method_entries(cfg: DemoConfig, methods: list[str], seeds: list[int], evaluated: dict[str, Any],
                   objectives: list[str], distinct: Any) -> tuple[dict[str, tuple[str, int, list[str]]],
                                                              dict[str, Any], dict[str, list[Any]]]:
    """(groups, entries, seed_metrics) of a demo's pools: the warm start in both formats and every
    method, each entry ``vpo.evaluation.summarize`` of its per-seed metrics with the pools' tokens
    per chain, truncation and ``distinct(pools, examples)`` answers per pool."""
    from vpo.evaluation import summarize

    per_ex, pools = evaluated["metrics"], evaluated["pools"]
    m_multi = cfg.answers
    groups: dict[str, tuple[str, int, list[str]]] = {
        "warmup_m1": ("warm-up (m=1)", 1, ["warmup-m1"]),
        f"warmup_m{m_multi}": (f"warm-up (m={m_multi})", m_multi, [f"warmup-m{m_multi}"]),
    }
    for method in methods:
        m = cfg.method_answers(method)
        groups[method] = (f"{METHODS[method][0]} (m={m})", m, [f"{method}-s{s}" for s in seeds])
    entries, seed_metrics = {}, {}
    for key, (label, m, names) in groups.items():
        seed_metrics[key] = [per_ex[n] for n in names]
        tokens = [pools[n].completion_tokens for n in names]
        entries[key] = summarize(seed_metrics[key], label=label, m=m, objectives=objectives,
                                 seeds=seeds if key in methods else [cfg.seed],
                                 extra={"tokens_per_chain": float(np.mean(tokens)),
                                        "truncated": float(np.mean([pools[n].truncated for n in names])),
                                        "distinct_answers": float(np.mean([distinct(
                                            pools[n], evaluated["examples"]) for n in names]))})
    return groups, entries, seed_metrics


def paired_comparisons(cfg: DemoConfig, methods: list[str], seed_metrics: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Paired differences over the same examples: VPO against each other method, and every method
    against its own warm start (same m), at k = 1, m and the pool, and the pools' diversity."""
    from vpo.evaluation import paired

    pool, m_multi = cfg.pool, cfg.answers
    comparisons: list[tuple[str, str]] = []
    if "vpo" in methods and "grpo" in methods:
        comparisons.append(("vpo", "grpo"))
    for other in ("multi_rlvr", "max_at_k"):
        if other in methods and "vpo" in methods:
            comparisons.append(("vpo", other))
    for method in methods:
        comparisons.append((method, "warmup_m1" if cfg.method_answers(method) == 1 else f"warmup_m{m_multi}"))
    rows = []
    for a, b in comparisons:
        for metric, k in (("pref_best_at_k", 1), ("pref_best_at_k", m_multi), ("pref_best_at_k", pool),
                          ("best_at_k", 1), ("best_at_k", pool), ("diversity", None)):
            rows.append({"a": a, "b": b, "metric": metric, "k": k, **paired(seed_metrics[a], seed_metrics[b], metric,
                                                                             k=k)})
    return rows


def training_curves(methods: list[str], seeds: list[int], groups: dict[str, Any],
                    runs: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Each method's logged series over RL steps (mean, min and max over seeds) and its mean seconds."""
    training = {}
    for method in methods:
        stats = _series_stats([runs[(method, s)] for s in seeds])
        training[method] = {"label": groups[method][0], **stats,
                            "seconds": float(np.mean([runs[(method, s)]["seconds"] for s in seeds]))}
    return training


def build_metrics(cfg: DemoConfig, task: Any, methods: list[str], seeds: list[int], warm: dict[str, Any],
                  runs: dict[tuple[str, int], dict[str, Any]], evaluated: dict[str, Any]) -> dict[str, Any]:
    """The report's metrics dict (see ``vpo.report``) from the runs and the evaluated pools."""
    objectives = list(task.objective_names())
    pools = evaluated["pools"]
    fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))
    m_multi = cfg.answers
    groups, entries, seed_metrics = method_entries(
        cfg, methods, seeds, evaluated, objectives, lambda p, examples: distinct_answers(p, fmt, examples))
    pool = cfg.pool
    paired_rows = paired_comparisons(cfg, methods, seed_metrics)
    training = training_curves(methods, seeds, groups, runs)

    # objective space: the first three test mazes, seed-0 pool of each entry
    first = {key: names[0] for key, (_, _, names) in groups.items()}
    shown = list(range(min(3, len(evaluated["examples"]))))
    space = {"x": "gold", "y": "diamond", "color": "avoid_lava",
             "examples": [f"maze {i}" for i in shown],
             "vectors": {key: [pools[name].vectors[i].tolist() for i in shown] for key, name in first.items()}}
    # the headline figure's maze: the one (of the first ten) whose pools, all methods together, reach
    # the most distinct (gold, diamond) points, so the figure shows spread; no method is favoured
    def spread(i: int) -> int:
        return len({(round(v[1], 4), round(v[2], 4)) for name in first.values() for v in pools[name].vectors[i]})

    pick = max(range(min(10, len(evaluated["examples"]))), key=lambda i: (spread(i), -i))
    story_space = {"x": "gold", "y": "diamond", "color": "avoid_lava", "examples": [f"maze {pick}"],
                   "vectors": {key: [pools[name].vectors[pick].tolist()] for key, name in first.items()},
                   "oracle": [oracle_vectors(evaluated["examples"][pick])], "oracle_label": "the three oracle routes"}

    metrics: dict[str, Any] = {
        "title": "VPO maze demo: a tiny Llama on CPU",
        "intro": (
            f"A {warm['params']:,}-parameter Llama-style model, trained from scratch: SFT warm-up "
            f"{WARMUP_STORY[cfg.warmup_data]} (TRL SFTTrainer), then {cfg.rl_steps} RL steps per method and seed "
            "with VPOTrainer (a TRL "
            f"GRPOTrainer subclass), {cfg.rl_prompts} mazes x {cfg.rl_generations} rollouts per step, from the "
            f"same warm-up checkpoint and on the same mazes. Evaluation on {cfg.eval_examples} held-out "
            f"{cfg.size}x{cfg.size} mazes with equal pools of {pool} answers (chains x m)."),
        "task": {"name": "maze", "params": {"size": cfg.size, "reward_mode": cfg.reward_mode},
                 "objectives": objectives},
        "eval": {"examples": cfg.eval_examples, "pool": pool, "temperature": cfg.eval_temperature, "top_p": 1.0,
                 "eval_weights": cfg.eval_weights, "ks_shown": [1, 3, 10, pool]},
        "methods": entries,
        "paired": paired_rows,
        "training": training,
        "objective_space": space,
        "story_space": story_space,
        "references": [evaluated["oracle"]] if evaluated.get("oracle") else [],
        "paper_best_at_30": dict(PAPER),
        "config": dataclasses.asdict(cfg),
        "warmup": {k: v for k, v in warm.items() if k != "loss_curve"},
        "runs": {f"{m}-s{s}": {k: v for k, v in r.items() if k not in ("series", "reward", "steps")}
                 for (m, s), r in runs.items()},
    }
    metrics["paper"], metrics["comparison"] = _paper_tables(entries, methods, pool, cfg)
    metrics["findings"] = findings(entries, paired_rows, methods, pool, cfg)
    if cfg.quick:  # a smoke run's numbers say nothing about the methods: it reports plumbing checks instead
        metrics["findings"] = [SMOKE_TEST]
        metrics["intro"] = SMOKE_TEST + " " + metrics["intro"]
    oracle = evaluated.get("oracle")
    if oracle and not cfg.quick:
        warm_key = f"warmup_m{m_multi}"
        metrics["findings"].append(
            "Headroom: the pool of the three oracle routes per maze (shortest lava-free, via gold, via diamond; "
            + ("what copying the warm-up's demonstrations exactly would give" if cfg.warmup_data == "oracle"
               else "routes the random-walk warm-up never saw") + ", at any k >= 3) scores "
            f"{oracle['pref_best_at_k']:.3f} preference-weighted and "
            f"{oracle['best_at_k']:.3f} on the fixed scalar; the warm start reaches "
            f"{entries[warm_key]['pref_best_at_k']['mean'][pool - 1]:.3f} and "
            f"{entries[warm_key]['best_at_k']['mean'][pool - 1]:.3f} at k={pool} ({entries[warm_key]['label']}). "
            "Distinct routes per pool of "
            f"{pool}: " + ", ".join(f"{e['label']} {e['distinct_answers']:.1f}" for e in entries.values()) + ".")
    metrics["notes"] = _notes(cfg)
    return metrics


def pipeline_checks(metrics: dict[str, Any], cfg: DemoConfig, plots: list[str], unit: str = "mazes") -> list[str]:
    """What a smoke run checks, one line each, "ok: ..." or "FAILED: ...": every RL run logged its
    steps, every pool has its mazes and answers, every number is finite, best@k never falls as k
    grows, every plot was written (``plots``: the PNG files found)."""
    def line(ok: bool, text: str) -> str:
        return ("ok: " if ok else "FAILED: ") + text

    methods = metrics["methods"]
    training = metrics.get("training") or {}
    steps_ok = all(run.get("steps") and run["steps"][-1] == cfg.rl_steps for run in training.values())
    shapes_ok = all(len(e["best_at_k"]["mean"]) == cfg.pool for e in methods.values())
    numbers = [float(x) for e in methods.values() for key in ("best_at_k", "pref_best_at_k")
               for x in e[key]["mean"]]
    numbers += [float(row["mean"]) for row in metrics.get("paired") or []]
    numbers += [float(x) for run in training.values() for series in run["series"].values() for x in series["mean"]]
    finite_ok = bool(numbers) and all(np.isfinite(numbers))
    monotone_ok = all(np.all(np.diff(e["best_at_k"]["mean"]) >= -1e-9) for e in methods.values())
    expected = ["best_at_k.png", "training.png", "objective_space.png", "story_best_at_k.png",
                "story_diversity.png", "story_objective_space.png"]
    missing = [name for name in expected if name not in plots]
    return [
        line(steps_ok, f"{len(training)} RL runs logged {cfg.rl_steps} steps each"),
        line(shapes_ok, f"{len(methods)} pools of {cfg.eval_examples} {unit} x {cfg.pool} answers scored"),
        line(finite_ok, f"{len(numbers)} reported numbers (best@k curves, paired differences, training series) "
                        "are finite"),
        line(monotone_ok, "every best@k curve is non-decreasing in k"),
        line(not missing, f"{len(expected) - len(missing)} of {len(expected)} plots written"
                          + (f" (missing: {', '.join(missing)})" if missing else "")),
    ]


def _paper_tables(entries: dict[str, Any], methods: list[str], pool: int, cfg: DemoConfig) -> tuple[dict, dict]:
    order = ["grpo", "max_at_k", "multi_rlvr", "vpo"]
    cols = ["", "GRPO", "Max@K", "Multi-RLVR", "VPO", "diversity GRPO -> VPO"]
    paper = {"caption": "Paper (Qwen3-4B, 9x9 maze, 4 objectives): best@30 on the fixed scalar, m = 3.",
             "columns": cols,
             "rows": [["paper best@30"] + [f"{PAPER[k]:.3f}" for k in order]
                      + [f"{PAPER_DIVERSITY[0]} -> {PAPER_DIVERSITY[1]}"]]}

    def cell(key: str, metric: str) -> str:
        if key not in methods:
            return "not run"
        return f"{entries[key][metric]['mean'][pool - 1]:.3f}"

    div = "n/a"
    if "grpo" in methods and "vpo" in methods:
        div = f"{entries['grpo']['diversity']['mean']:.3f} -> {entries['vpo']['diversity']['mean']:.3f}"
    rows = [[f"ours best@{pool} (fixed scalar)"] + [cell(k, "best_at_k") for k in order] + [div],
            [f"ours preference-weighted best@{pool}"] + [cell(k, "pref_best_at_k") for k in order] + [""]]
    comparison = {"caption": (f"This demo (tiny Llama, {cfg.size}x{cfg.size} maze, {cfg.reward_mode} reward, mean "
                              f"over {cfg.seeds} seed(s)). Absolute values are not comparable to the paper's: "
                              "different maze size, model and scale; the comparison is the ordering and the "
                              "diversity gap. " + PAPER_REWARD[cfg.reward_mode]),
                  "columns": cols, "rows": rows}
    return paper, comparison


def _above_range(entry: dict[str, Any], base: dict[str, Any]) -> str:
    """Where (in k) the seed-averaged preference-weighted best@k curve of ``entry`` lies above ``base``'s."""
    diff = np.asarray(entry["pref_best_at_k"]["mean"]) - np.asarray(base["pref_best_at_k"]["mean"])
    above = [k for k, d in enumerate(diff, start=1) if d > 0]
    if not above:
        return "; its preference-weighted best@k curve is below the warm start's at every k"
    if above == list(range(1, above[-1] + 1)):
        span = f"k = 1..{above[-1]}" if above[-1] > 1 else "k = 1"
        rest = f" and below from k = {above[-1] + 1}" if above[-1] < len(diff) else ""
        return f"; its preference-weighted best@k curve is above the warm start's for {span}{rest}"
    return f"; its preference-weighted best@k curve is above the warm start's at {len(above)} of {len(diff)} k"


def _fmt_diff(row: dict[str, Any], unit: str = "mazes") -> str:
    """``+0.028 ± 0.018 (significant, 300 mazes)``: a paired difference with the test-set size it
    was measured on (the width of the interval depends on it)."""
    half = row.get("half_width")
    size = f", {row['n']} {unit}" if row.get("n") else ""
    sig = "significant" if row.get("significant") else "not significant"
    return f"{row['mean']:+.3f} ± {half:.3f} ({sig}{size})" if half is not None else f"{row['mean']:+.3f}"


def findings(entries: dict[str, Any], paired_rows: list[dict[str, Any]], methods: list[str], pool: int,
             cfg: DemoConfig, unit: str = "mazes", answer: str = "routes") -> list[str]:
    """Plain statements read off the numbers (no thresholds tuned to a conclusion); ``unit`` names
    the evaluation examples and ``answer`` what a chain holds."""
    diff = functools.partial(_fmt_diff, unit=unit)
    def find(a: str, b: str, metric: str, k: int | None) -> dict[str, Any] | None:
        for row in paired_rows:
            if (row["a"], row["b"], row["metric"], row["k"]) == (a, b, metric, k):
                return row
        return None

    def versus_warm_start(out: list[str], method: str) -> None:
        base = "warmup_m1" if cfg.method_answers(method) == 1 else f"warmup_m{cfg.answers}"
        r1, rk = find(method, base, "pref_best_at_k", 1), find(method, base, "pref_best_at_k", pool)
        rm = find(method, base, "pref_best_at_k", cfg.answers)
        f1, fk = find(method, base, "best_at_k", 1), find(method, base, "best_at_k", pool)
        out.append(f"{METHODS[method][0]} vs its warm start ({entries[base]['label']}): preference-weighted "
                   f"best@1 {diff(r1)}, best@{cfg.answers} {diff(rm)}, best@{pool} {diff(rk)}; "
                   f"fixed-scalar best@1 {diff(f1)}, "
                   f"best@{pool} {diff(fk)}{_above_range(entries[method], entries[base])}.")

    out: list[str] = []
    if "vpo" in methods:
        versus_warm_start(out, "vpo")
    if "vpo" in methods and "grpo" in methods:
        for metric, name in (("pref_best_at_k", "preference-weighted best@k"), ("best_at_k", "fixed-scalar best@k")):
            hi, lo = find("vpo", "grpo", metric, pool), find("vpo", "grpo", metric, 1)
            def verdict(d: float) -> str:
                return "level with" if abs(d) < 5e-4 else "above" if d > 0 else "below"

            verdict_hi, verdict_lo = verdict(hi["mean"]), verdict(lo["mean"])
            out.append(f"{name}: VPO is {verdict_hi} GRPO at k={pool}, VPO - GRPO = {diff(hi)}; "
                       f"at k=1 VPO is {verdict_lo} GRPO, {diff(lo)} (paired over the same {unit}, "
                       f"seed-averaged).")
        g, v = entries["grpo"]["diversity"]["mean"], entries["vpo"]["diversity"]["mean"]
        ratio = f"{v / g:.1f}x" if g > 0 else "infinitely"
        out.append(f"Reward diversity of the pools (mean pairwise L1): GRPO {g:.3f}, VPO {v:.3f} ({ratio}); "
                   f"the paper reports {PAPER_DIVERSITY[0]} -> {PAPER_DIVERSITY[1]} on its 9x9 maze.")
    for other in ("multi_rlvr", "max_at_k"):
        if other in methods and "vpo" in methods:
            parts = [f"best@{k} {diff(find('vpo', other, 'pref_best_at_k', k))}"
                     for k in dict.fromkeys((1, cfg.answers, pool))]
            out.append(f"VPO vs {METHODS[other][0]} (preference-weighted): " + ", ".join(parts) + ".")
    for method in methods:
        if method != "vpo":
            versus_warm_start(out, method)
    if "vpo" in entries and "grpo" in entries:
        tv, tg = entries["vpo"].get("tokens_per_chain"), entries["grpo"].get("tokens_per_chain")
        if tv and tg:
            out.append(f"Compute: at equal RL steps a VPO chain holds {cfg.answers} {answer} and costs about "
                       f"{tv / tg:.1f}x the tokens of a GRPO completion ({tv:.1f} vs {tg:.1f} tokens at evaluation).")
    return out


def story_checks(entries: dict[str, Any], paired_rows: list[dict[str, Any]], methods: list[str], pool: int,
                 cfg: DemoConfig, unit: str = "mazes") -> list[str]:
    """The paper's four claims as checks, each with its paired interval over the same ``unit``:
    VPO above GRPO at preference-weighted best@pool (significantly); GRPO first at preference-weighted
    best@1; VPO's pools more diverse than GRPO's (significantly); VPO at or above its own warm start
    at best@pool (not significantly below). "held" or "not held" is read off the numbers, never
    tuned; a check whose methods were not run says so."""
    def find(a: str, b: str, metric: str, k: int | None) -> dict[str, Any] | None:
        return next((row for row in paired_rows if (row["a"], row["b"], row["metric"], row["k"]) == (a, b, metric, k)),
                    None)

    def verdict(ok: bool) -> str:
        return "held" if ok else "NOT held"

    diff = functools.partial(_fmt_diff, unit=unit)
    if not {"vpo", "grpo"} <= set(methods):
        return ["Checks: the paper's four claims compare VPO with GRPO; run both (--methods) to check them."]
    hi, lo = find("vpo", "grpo", "pref_best_at_k", pool), find("vpo", "grpo", "pref_best_at_k", 1)
    div = find("vpo", "grpo", "diversity", None)
    warm = find("vpo", f"warmup_m{cfg.answers}", "pref_best_at_k", pool)
    firsts = {m: entries[m]["pref_best_at_k"]["mean"][0] for m in methods}
    leader = max(firsts, key=firsts.get)
    below = (warm["half_width"] is not None and warm["mean"] < -warm["half_width"])
    return [
        f"Check 1, VPO above GRPO at preference-weighted best@{pool}, significantly: "
        f"{verdict(hi['mean'] > 0 and hi['significant'])}: VPO - GRPO = {diff(hi)}.",
        f"Check 2, GRPO first at preference-weighted best@1: {verdict(leader == 'grpo')}: "
        + ", ".join(f"{entries[m]['label']} {v:.3f}" for m, v in sorted(firsts.items(), key=lambda kv: -kv[1]))
        + f"; VPO - GRPO = {diff(lo)}.",
        f"Check 3, VPO's pools more diverse than GRPO's, significantly (mean pairwise L1 of the answers' reward "
        f"vectors): {verdict(div['mean'] > 0 and div['significant'])}: VPO - GRPO = {diff(div)} "
        f"({entries['grpo']['diversity']['mean']:.3f} -> {entries['vpo']['diversity']['mean']:.3f}).",
        f"Check 4, VPO at or above its warm start ({entries[f'warmup_m{cfg.answers}']['label']}) at "
        f"preference-weighted best@{pool}, not significantly below: {verdict(not below)}: VPO - warm start = "
        f"{diff(warm)}.",
    ]


INVESTIGATION = (
    "How the defaults were chosen, and the configurations tried to make RL add to the warm start at "
    "k = 30 (maze size and reward mode, warm-up length and mixture, learning rate, steps, batch, group size, "
    "KL, m, alpha, evaluation temperature), with their numbers: docs/demo/investigation.md in the vpo "
    "repository.")
"""Pointer to the development log, kept in every report so a reader sees what was tried."""


TRUNCATED_RULES = {"zero": "scored as a format failure (the all-zero matrix)",
                   "mask": "left out of the loss (TRL's mask_truncated_completions)",
                   "keep": "scored as parsed"}


def _notes(cfg: DemoConfig) -> list[str]:
    notes = [
        "k counts answers: a multi-answer method gets pool/m chains, a single-answer method pool samples. Each "
        "answer of a chain is scored on its own; duplicates are kept (as repeated samples of a single-answer "
        "method are), an unparseable or missing answer is the zero vector.",
        "best@k and pass@k are exact expectations over k-subsets of the pool (unbiased estimators), not one "
        "random permutation. Preference-weighted best@k averages best@k of w.r over fixed Dirichlet(1) weights "
        "per maze, the same weights for every method.",
        "On a small maze a lava-free gold route and a lava-free diamond route often tie on the fixed scalar "
        "(mean of the 4 objectives), so fixed-scalar best@k at large k saturates for any method that finds both "
        "kinds of route or either; the preference-weighted metric tells them apart.",
        "pass@k counts an answer as correct when every objective is at its maximum; no maze route can collect "
        "all gold and all diamonds within the budget (the generator rejects such mazes), so pass@k is 0 by design.",
        f"Training differs from the paper for CPU: {cfg.rl_steps} steps, lr {cfg.rl_lr:g}, no KL term "
        f"(beta {cfg.rl_beta:g}), G = {cfg.rl_generations}, {cfg.rl_prompts} mazes per step; a training rollout "
        "cut at the token limit without EOS is " + TRUNCATED_RULES[cfg.rl_truncated] + ".",
    ]
    notes.append(INVESTIGATION)
    if cfg.quick:
        notes.insert(0, "--quick: a smoke-test configuration (tiny model, few steps, one seed). Its numbers "
                        "check the pipeline, not the method.")
    return notes


# ----- reproducibility ------------------------------------------------------------------------

RESULT_PARTS = ("methods", "paired", "training", "warmup", "runs", "references", "comparison")
"""The parts of a demo's ``metrics.json`` that hold results (the rest: timings, paths, prose)."""
NOT_RESULTS = frozenset({"seconds", "cpu_seconds", "wall", "cpu", "resumed_from", "reward_failures", "label"})
"""Keys inside those parts that are not results: timings, the resume point, call counts."""
PINNED_NUMBERS = "docs/demo/quick_numbers.json"
"""The ``vpo demo --quick`` numbers of the commit the shipped ``docs/demo/report.md`` was made from
(``scripts/pin_quick_numbers.py``); a test compares HEAD's quick run with them."""


def result_numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """Every number of a demo's results, by path (``methods/vpo/best_at_k/mean/29``), timings
    and counts of calls left out: what must come out the same whatever the load, the worker
    count or the order of the jobs."""
    out: dict[str, float] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key not in NOT_RESULTS:
                    walk(item, f"{path}/{key}")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{path}/{i}")
        elif isinstance(value, int | float | np.number) and not isinstance(value, bool):
            out[path] = float(value)

    for part in RESULT_PARTS:
        walk(metrics.get(part), part)
    return out


def numbers_digest(numbers: dict[str, float]) -> str:
    """sha256 of every number to the last bit (``float.hex``), in path order."""
    import hashlib

    text = "\n".join(f"{path} {float(value).hex()}" for path, value in sorted(numbers.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def headline_numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The few numbers a reader compares, rounded as the report prints them: best@k and
    preference-weighted best@k at k = 1, 3, 10 and the pool per method, and the warm-up's final
    loss."""
    pool = int(metrics["eval"]["pool"])
    out = {"warmup/final_loss": round(float(metrics["warmup"]["final_loss"]), 3)}
    for key, entry in metrics["methods"].items():
        for metric in ("best_at_k", "pref_best_at_k"):
            for k in (1, 3, 10, pool):
                out[f"{key}/{metric}@{k}"] = round(float(entry[metric]["mean"][k - 1]), 3)
    return out


def numbers_machine() -> dict[str, str]:
    """What the numbers' float rounding depends on besides the code: the CPU's kernels (torch's
    CPU capability and the processor) and torch's build."""
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": cpu}


def pin_record(metrics: dict[str, Any]) -> dict[str, Any]:
    """What ``PINNED_NUMBERS`` holds for a quick run's ``metrics``."""
    numbers = result_numbers(metrics)
    return {"command": "vpo demo --quick", "machine": numbers_machine(), "digest": numbers_digest(numbers),
            "count": len(numbers), "headline": headline_numbers(metrics)}

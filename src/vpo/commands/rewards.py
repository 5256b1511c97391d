"""``vpo rewards check``: score a file of sample completions with your own reward functions, before a GPU run.

Usage::

    vpo rewards check --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source samples.jsonl
    vpo rewards check --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source samples.jsonl \\
        --answers 3 --out runs/rewards-check

``--source`` rows hold a ``prompt`` (a string or chat turns), a ``completion`` (the model's text,
with m = ``--answers`` answers in ``<response_i>`` tags; a string or assistant turns) and any
other columns, which the reward functions receive as TRL passes dataset columns. Every
completion is scored as ``VPOTrainer(reward_funcs=...)`` scores it (``vpo.rewards.score_chains``):
printed is each completion's (m, D) reward matrix, then per objective its mean, range and
``None`` count over the answers, then the objectives' correlation and effective dimension
(1: collinear, D: independent). ``--out`` gets report.md / report.html / metrics.json and the
correlation heatmap.

The same ``--reward-funcs`` (with ``--source`` naming the prompt dataset) replace ``--task`` in
``vpo train``, ``vpo eval``, ``vpo search best-of-n`` and ``vpo data export``: they wrap the
functions and the dataset as the ``own_rewards`` task (``vpo.tasks.own_rewards``).
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vpo.config import TYPED_FLAGS, add_dataclass_args, check_fields, check_out_dir, dataclass_from_args

OWN_TASK = "own_rewards"
"""The registry name of the task that wraps reward functions and a prompt dataset."""


@dataclass
class RewardFuncsOptions:
    """The user's own reward functions in place of ``--task`` (shared by every command that takes a task)."""

    reward_funcs: str = field(default="", metadata={
        "help": "your own reward functions instead of --task, TRL's reward_funcs contract: 'pkg.mod:f1,pkg.mod:f2' "
                "(or dotted paths, or model ids); one objective per function (a function returning vectors gives "
                "several); the prompts are the rows of --source (a prompt column)"})
    reward_names: list[str] = field(default_factory=list, metadata={
        "help": "names of the objectives --reward-funcs give, one per function (default: the functions' names)"})
    scaling: list[str] = field(default_factory=list, metadata={
        "help": "per-objective scaling into [0, 1]: one spec for all, or name=spec entries; a spec is none, sigmoid "
                "(reward-model logits), minmax (over the batch's answers; not in tasks) or low:high (a known range, "
                "clipped); default none, with a warning when an objective leaves [0, 1]"})
    max_failure_rate: float = field(default=0.5, metadata={
        "help": "stop when more than this fraction of one step's reward calls (functions x answers; a task's "
                "scorer x answers) fail: raise, return NaN/inf, time out, or get no verdict from math-verify or the "
                "sandbox; a failed call scores 0 and is counted (vpo/reward_failures); 1 never stops",
        "min": 0.0, "max": 1.0})
    reward_time_limit: float | None = field(default=None, metadata={
        "help": "seconds one reward call (a --reward-funcs function on a batch of answers, or a task's scorer on "
                "one chain) may run before its answers count as failed (the call is abandoned, its thread keeps "
                "running); default: no limit (math-verify and the sandbox have their own)", "above": 0.0})


def parse_scaling(items: Sequence[str]) -> Any:
    """``--scaling`` entries as ``vpo.rewards``' ``scaling``: None, one spec, or {name: spec};
    ``low:high`` becomes the pair ``[low, high]`` (JSON, so an export can record it)."""
    from vpo.rewards import check_scaling

    def spec(text: str) -> Any:
        text = text.strip()
        if ":" in text:
            low, _, high = text.partition(":")
            try:
                return [float(low), float(high)]
            except ValueError:
                raise ValueError(f"--scaling {text!r}: a range is low:high with two numbers") from None
        return text

    if not items:
        return None
    named = [item for item in items if "=" in item]
    if named and len(named) != len(items):
        raise ValueError(f"--scaling {','.join(items)}: give one spec for every objective, or name=spec entries, "
                         "not both")
    scaling = ({k.strip(): spec(v) for k, _, v in (item.partition("=") for item in items)} if named
               else spec(items[0]) if len(items) == 1 else None)
    if scaling is None:
        raise ValueError(f"--scaling {','.join(items)}: several specs need objective names (name=spec)")
    try:
        check_scaling(scaling)
    except ValueError as err:
        raise ValueError(f"--scaling: {err}") from None
    return scaling


def own_task_params(opts: RewardFuncsOptions) -> dict[str, Any]:
    """The ``own_rewards`` task's parameters (JSON: an export records them) from the options."""
    params: dict[str, Any] = {"reward_funcs": opts.reward_funcs}
    if opts.reward_names:
        params["reward_names"] = list(opts.reward_names)
    scaling = parse_scaling(opts.scaling)
    if scaling is not None:
        params["scaling"] = scaling
    if opts.max_failure_rate != RewardFuncsOptions.max_failure_rate:
        params["max_failure_rate"] = opts.max_failure_rate
    if opts.reward_time_limit is not None:
        params["time_limit"] = opts.reward_time_limit
    return params


def failure_policy_given(opts: RewardFuncsOptions) -> bool:
    """Whether ``--max-failure-rate`` or ``--reward-time-limit`` was set."""
    return opts.max_failure_rate != RewardFuncsOptions.max_failure_rate or opts.reward_time_limit is not None


def apply_failure_policy(task: Any, opts: RewardFuncsOptions) -> Any:
    """``task`` with its scorers under ``--max-failure-rate`` and ``--reward-time-limit`` when
    either was given (``--reward-funcs`` carries them in the ``own_rewards`` task's parameters)."""
    from vpo.reward_failures import RewardFailurePolicy

    if failure_policy_given(opts) and not opts.reward_funcs:
        task.failures = task.failures.with_policy(RewardFailurePolicy(max_failure_rate=opts.max_failure_rate,
                                                                      time_limit=opts.reward_time_limit))
    return task


def resolve_task(opts: Any, args: argparse.Namespace | None, *, source: str | None,
                 task_flag: str = "--task") -> tuple[str | None, dict[str, Any] | None]:
    """``(task name, parameters)`` when ``--reward-funcs`` replaces the task, else ``(None, None)``.

    With ``--reward-funcs``: ``--task`` and ``--task-params`` typed too are refused (one of them
    would be ignored), and ``--source`` is required (it holds the prompts). ``--reward-names``,
    ``--scaling`` without ``--reward-funcs`` is refused (the failure policy applies to a task's
    scorers too: ``apply_failure_policy``)."""
    if not opts.reward_funcs:
        given = (("--reward-names", opts.reward_names), ("--scaling", opts.scaling))
        flag = next((flag for flag, value in given if value), None)
        if flag is not None:
            raise ValueError(f"{flag} is for the objectives of --reward-funcs; give --reward-funcs too")
        return None, None
    typed = dict(getattr(args, TYPED_FLAGS, {}) or {}) if args is not None else {}
    if typed.get("task") or (args is not None and getattr(args, "task_given", False)):
        raise ValueError(f"{task_flag} and --reward-funcs are alternatives: give one")
    if getattr(opts, "task_params", None):
        raise ValueError("--task-params is for --task; --reward-funcs takes no task parameters")
    if not source:
        raise ValueError("--reward-funcs needs --source: the prompt dataset (JSONL, parquet or a saved Hugging Face "
                         "dataset folder with a 'prompt' column)")
    return OWN_TASK, own_task_params(opts)


# ----------------------------------------------------------------------------------------------
# vpo rewards check
# ----------------------------------------------------------------------------------------------
@dataclass
class CheckConfig(RewardFuncsOptions):
    """Options of ``vpo rewards check``."""

    reward_funcs: str = field(default="", metadata={  # the shared help names --task, which this command has not
        "help": "your own reward functions, TRL's reward_funcs contract: 'pkg.mod:f1,pkg.mod:f2' (or dotted paths, "
                "or model ids); one objective per function (a function returning vectors gives several)"})
    source: str = field(default="", metadata={
        "help": "samples: JSONL/JSON/parquet file (or saved Hugging Face dataset folder) with prompt and completion "
                "columns (required)"})
    answers: int = field(default=3, metadata={"help": "answers per completion m", "min": 1})
    examples: int = field(default=0, metadata={"help": "score at most this many rows (0: all)", "min": 0})
    show: int = field(default=10, metadata={"help": "matrices printed (0: none; the summary covers all rows)",
                                            "min": 0})
    out: str = field(default="", metadata={"help": "report folder (report.md, metrics.json, the heatmap); "
                                                   "default: print only"})


COMPLETION_COLUMN = "completion"
"""The samples' column holding the model's text."""


def read_samples(source: str, limit: int = 0) -> list[dict[str, Any]]:
    """Rows of ``source`` with a ``prompt`` and a ``completion``; ValueError naming the row otherwise."""
    from vpo.tasks.io import load_records

    rows = load_records(source, "train")
    if limit:
        rows = rows[:limit]
    if not rows:
        raise ValueError(f"--source {source}: no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"--source {source}: row {i} is a {type(row).__name__}, not an object")
        missing = [c for c in ("prompt", COMPLETION_COLUMN) if row.get(c) is None]
        if missing:
            raise ValueError(f"--source {source}: row {i} has no {' or '.join(repr(c) for c in missing)} column "
                             f"(it has {sorted(row)})")
    return [dict(row) for row in rows]


def diagnostics_of(vectors: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """``objective_diagnostics`` of (P, D) answer vectors (rows with NaN left out), JSON-ready for reports."""
    from vpo.rewards import objective_diagnostics

    vectors = np.asarray(vectors, dtype=np.float64)
    diag = objective_diagnostics(vectors)
    corr = np.asarray(diag["correlation"], dtype=np.float64)
    return {"objectives": list(names), "answers": int(np.isfinite(vectors).all(axis=1).sum()),
            "correlation": [[None if not np.isfinite(v) else float(v) for v in row] for row in corr],
            "effective_dim": float(diag["effective_dim"])}


def _matrix_text(matrix: np.ndarray, names: Sequence[str], kept: Sequence[int]) -> str:
    head = "   row " + " ".join(f"{n:>12.12}" for n in names)
    lines = [head]
    shown = set(int(k) for k in kept)
    for r, row in enumerate(np.asarray(matrix, dtype=np.float64)):
        cells, values = [], iter(row)
        for j in range(len(names)):
            cells.append(f"{next(values):12.4f}" if j in shown else f"{'dropped':>12}")
        lines.append(f"{r + 1:>6} " + " ".join(cells))
    return "\n".join(lines)


def check_rewards(cfg: CheckConfig, *, echo: bool = True) -> dict[str, Any]:
    """Score ``cfg.source``'s completions; print (``echo``) and return the matrices, the per-objective
    summary and the diagnostics (and write the report when ``cfg.out`` is set)."""
    from vpo.reward_failures import RewardFailurePolicy, RewardFailures
    from vpo.rewards import RewardScaleWarning, load_reward_funcs, score_chains

    check_fields(cfg)
    if not cfg.reward_funcs:
        raise ValueError("--reward-funcs is required ('pkg.mod:f1,pkg.mod:f2')")
    if not cfg.source:
        raise ValueError("--source is required (a file of prompt/completion rows)")
    if cfg.out:
        check_out_dir(cfg.out)
    funcs = load_reward_funcs(cfg.reward_funcs)
    rows = read_samples(cfg.source, cfg.examples)
    columns = {key: [row.get(key) for row in rows] for key in sorted({k for row in rows for k in row})
               if key not in ("prompt", COMPLETION_COLUMN)}
    scaling = parse_scaling(cfg.scaling)
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=cfg.max_failure_rate,
                                                  time_limit=cfg.reward_time_limit))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RewardScaleWarning)
        result = score_chains(funcs, [row["prompt"] for row in rows], [row[COMPLETION_COLUMN] for row in rows],
                              answers=cfg.answers, reward_names=cfg.reward_names or None, scaling=scaling,
                              failures=failures, **columns)
    failed = failures.end_step()  # RewardFailureError past --max-failure-rate
    leaves = [str(w.message).split("'")[1] for w in caught if issubclass(w.category, RewardScaleWarning)]
    for w in caught:  # the others (your functions' own) were swallowed here: on to the caller
        if not issubclass(w.category, RewardScaleWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    names = tuple(result.names)
    dim = len(names)
    vectors = np.asarray(result.vectors, dtype=np.float64).reshape(-1, dim)  # every parsed answer, NaN: dropped
    summary = {}
    for j, name in enumerate(names):
        values = vectors[np.isfinite(vectors[:, j]), j]
        summary[name] = {"mean": float(values.mean()) if values.size else None,
                         "min": float(values.min()) if values.size else None,
                         "max": float(values.max()) if values.size else None,
                         "completions_dropped": sum(j not in set(np.asarray(k).tolist()) for k in result.kept)}
    diagnostics = diagnostics_of(vectors, names) if dim >= 2 else None
    stats = {k: float(v) for k, v in dict(result.stats).items() if isinstance(v, int | float | np.number)}
    report = {"objectives": list(names), "matrices": [np.asarray(m).tolist() for m in result.matrices],
              "kept": [np.asarray(k).tolist() for k in result.kept], "summary": summary, "stats": stats,
              "objective_diagnostics": diagnostics, "source": cfg.source, "answers": cfg.answers,
              "completions": len(rows), "unscaled_outside_unit": leaves, "reward_failures": failed}
    if echo:
        print(f"{len(rows)} completions of {cfg.source}, m = {cfg.answers}, objectives: {', '.join(names)}")
        for i in range(min(cfg.show, len(rows))):
            print(f"\n# completion {i} (prompt {_short(rows[i]['prompt'])})")
            print(_matrix_text(result.matrices[i], names, result.kept[i]))
        print("\nper objective, over the parsed answers (before dedup) of the completions that kept it:")
        print(f"{'objective':>20} {'mean':>8} {'min':>8} {'max':>8} {'dropped':>8}")
        for name, s in summary.items():
            cells = " ".join("     n/a" if s[k] is None else f"{s[k]:8.4f}" for k in ("mean", "min", "max"))
            print(f"{name:>20.20} {cells} {s['completions_dropped']:>8}")
        if stats:
            print("stats: " + ", ".join(f"{k} {v:g}" for k, v in stats.items()))
        for name in leaves:
            print(f"warning: objective {name!r} leaves [0, 1] and has no scaling; E_w[max_i w . r_i] assumes "
                  f"rewards in [0, 1]: pass --scaling {name}=sigmoid (logits) or {name}=LOW:HIGH (a known range)")
        if diagnostics:
            print(f"effective dimension {diagnostics['effective_dim']:.2f} of D = {dim} over {len(vectors)} answers "
                  "(1: collinear, D: independent); correlation:")
            for name, line in zip(names, diagnostics["correlation"], strict=True):
                print(f"{name:>20.20} " + " ".join("     n/a" if v is None else f"{v:8.3f}" for v in line))
    if cfg.out:
        report["report"] = {k: str(v) for k, v in write_check_report(report, cfg.out).items()}
        if echo:
            print(f"report: {report['report']['md']}")
    return report


def _short(prompt: Any, width: int = 60) -> str:
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    return repr(text[:width] + ("..." if len(text) > width else ""))


def write_check_report(report: Mapping[str, Any], out: str | Path) -> dict[str, Path]:
    """report.md, report.html, metrics.json and (D >= 2) plots/objective_correlation.png under ``out``."""
    from vpo.evaluation import sanitize
    from vpo.report import PLOT_DIR, _Doc, _num, diagnostics_section, plot_correlation

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    doc = _Doc()
    doc.h(1, "Reward check")
    doc.p(f"{report['completions']} completions of {report['source']} with m = {report['answers']} answers each, "
          f"scored as VPOTrainer scores them (vpo.rewards.score_chains).")
    doc.h(2, "Per objective")
    doc.p("Over the parsed answers (before dedup) of the completions that kept the objective.")
    for name in report.get("unscaled_outside_unit") or []:
        doc.p(f"Warning: objective {name!r} leaves [0, 1] without scaling (--scaling {name}=sigmoid or LOW:HIGH).")
    doc.table(["objective", "mean", "min", "max", "completions that dropped it (None rule)"],
              [[n, _num(s["mean"], 4), _num(s["min"], 4), _num(s["max"], 4), s["completions_dropped"]]
               for n, s in report["summary"].items()])
    if report.get("stats"):
        doc.ul([f"{k}: {v:g}" for k, v in report["stats"].items()])
    plot = None
    diagnostics = report.get("objective_diagnostics")
    if diagnostics:
        try:
            (folder / PLOT_DIR).mkdir(exist_ok=True)
            plot_correlation(diagnostics["objectives"], diagnostics["correlation"],
                             folder / PLOT_DIR / "objective_correlation.png",
                             title=f"Correlation of the objectives (effective dimension "
                                   f"{_num(diagnostics['effective_dim'], 2)} of {len(diagnostics['objectives'])})")
            plot = f"{PLOT_DIR}/objective_correlation.png"
        except ImportError:  # matplotlib is the plot extra
            plot = None
        diagnostics_section(doc, diagnostics, plot)
    paths = {"md": folder / "report.md", "html": folder / "report.html", "json": folder / "metrics.json"}
    paths["md"].write_text(doc.markdown())
    paths["html"].write_text(doc.html("Reward check"))
    paths["json"].write_text(json.dumps(sanitize(dict(report)), indent=1, allow_nan=False))
    if plot:
        paths["plot"] = folder / plot
    return paths


def run_check(args: argparse.Namespace) -> int:
    cfg = dataclass_from_args(CheckConfig, args)
    typed = "answers" in (getattr(args, TYPED_FLAGS, None) or {})
    print(f"m = {cfg.answers}: " + ("--answers" if typed else "the default of --answers (m is not read from the "
                                    "samples; pass --answers M when their completions hold M answers)"), flush=True)
    with warnings.catch_warnings(record=True) as caught:  # said after the tables, not in the middle of one
        warnings.simplefilter("default")
        check_rewards(cfg)
    for line in dict.fromkeys(f"warning: {w.category.__name__}: {w.message}" for w in caught):  # each once
        print(line)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rewards", help="check your own reward functions on sample completions",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="rewards_command", metavar="ACTION")
    check = sub.add_parser("check", help="print the reward matrices, a per-objective summary and the objectives' "
                                         "correlation for a file of prompts and completions")
    add_dataclass_args(check, CheckConfig)
    check.set_defaults(func=run_check)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)

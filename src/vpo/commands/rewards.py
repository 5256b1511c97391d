"""``vpo rewards check``: score a file of sample completions with your own reward functions, before a GPU run.

Usage::

    vpo rewards check --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source samples.jsonl
    vpo rewards check --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source samples.jsonl \\
        --answers 3 --out runs/rewards-check
    vpo rewards check --reward-funcs my_rewards.py:overlong --source samples.jsonl --tokenizer smollm2

``--source`` rows hold a ``prompt`` (a string or chat turns), a ``completion`` (the model's text,
with m = ``--answers`` answers in ``<response_i>`` tags; a string or assistant turns) and any
other columns, which the reward functions receive as TRL passes dataset columns. Every
completion is scored as ``VPOTrainer(reward_funcs=...)`` scores it (``vpo.rewards.score_chains``;
a string completion to a chat prompt reaches the functions as assistant turns, as TRL generates
them; ``completion_ids`` are a ``completion_ids`` column's, or ``--tokenizer``'s tokens of the
text; a chain-level length budget is scaled by m, and said): printed is each completion's (m, D)
reward matrix, each function's failed calls, then per objective its mean, range and ``None``
count over the answers, then the objectives' correlation and effective dimension (1: collinear,
D: independent). Any failed call (raised, NaN, past
``--reward-time-limit``; a dataset column the samples lack is named as such) makes the command
exit 1. ``--out`` gets report.md / report.html / metrics.json and the correlation heatmap (a
folder holding an earlier check needs ``--overwrite``).

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

from vpo.commands.options import RewardFuncsOptions
from vpo.config import TYPED_FLAGS, add_dataclass_args, check_fields, check_out_dir, dataclass_from_args
from vpo.reward_failures import RewardFailureError, RewardFailurePolicy, RewardFailures

OWN_TASK = "own_rewards"
"""The registry name of the task that wraps reward functions and a prompt dataset."""


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
    if failure_policy_given(opts) and not opts.reward_funcs:
        task.failures = task.failures.with_policy(RewardFailurePolicy(max_failure_rate=opts.max_failure_rate,
                                                                      time_limit=opts.reward_time_limit))
    return task


def own_setup(task: Any, examples: Sequence[Any], m: int, *, echo: bool = True) -> list[str]:
    """For your own reward functions (the ``own_rewards`` task), before any model loads: a column a
    function needs that a row of ``examples`` lacks is a one-line error, and the length budgets for
    chains of ``m`` answers are built and said (one line each, printed with ``echo``). Returns
    those lines; nothing for another task."""
    if not hasattr(task, "functions_at"):
        return []
    task.check_columns(examples)
    _, notes = task.functions_at(m)
    if echo:
        for line in notes:
            print(line, flush=True)
    return list(notes)


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
    tokenizer: str = field(default="", metadata={
        "help": "the tokenizer of the model you train (a folder, a .gguf file, smollm2 or a cached hub id): "
                "completion_ids are the completions' tokens, as training passes them; needed by functions that "
                "count tokens (TRL's overlong, repetition and cosine rewards) unless the samples have a "
                "completion_ids column"})
    examples: int = field(default=0, metadata={"help": "score at most this many rows (0: all)", "min": 0})
    show: int = field(default=10, metadata={"help": "matrices printed (0: none; the summary covers all rows)",
                                            "min": 0})
    out: str = field(default="", metadata={"help": "report folder (report.md, metrics.json, the heatmap); "
                                                   "default: print only"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the earlier check (or other results) in --out; without it such a folder is refused"})


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


def as_trained(prompt: Any, completion: Any) -> Any:
    """``completion`` in the form training passes it for ``prompt`` (``vpo.rewards.completion_form``):
    a file's string completion to a chat prompt becomes one assistant turn, and turns to a string
    prompt become their text."""
    from vpo.rewards import completion_form

    return completion_form(prompt, completion)


def missing_columns(func: Any, error: BaseException, columns: Sequence[str]) -> list[str]:
    """The dataset column reward function ``func``'s ``error`` says it needed and the samples lack:
    a key read from its ``**kwargs`` (KeyError). A required parameter that no column fills never
    reaches a call: ``vpo.rewards.check_arguments`` refuses it first, naming the column."""
    import inspect

    from vpo.rewards import TRL_HOOKS

    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # a model, a builtin: no signature to read
        return []
    if not (isinstance(error, KeyError) and error.args and isinstance(error.args[0], str)
            and any(p.kind is p.VAR_KEYWORD for p in params.values())):
        return []
    have = {*columns, "prompts", "completions", "completion_ids", *TRL_HOOKS}
    return [] if error.args[0] in have else [error.args[0]]


def diagnostics_of(vectors: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """``objective_diagnostics`` of (P, D) answer vectors (rows with NaN left out), JSON-ready for
    reports. An objective that did not vary has no correlation: its row and column are None, and
    it is listed in ``constant``."""
    from vpo.rewards import objective_diagnostics

    vectors = np.asarray(vectors, dtype=np.float64)
    finite = vectors[np.isfinite(vectors).all(axis=1)]
    diag = objective_diagnostics(vectors)
    corr = np.asarray(diag["correlation"], dtype=np.float64)
    constant = np.ptp(finite, axis=0) <= 1e-12 if len(finite) else np.ones(len(names), dtype=bool)
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    return {"objectives": list(names), "answers": int(len(finite)),
            "correlation": [[None if not np.isfinite(v) else float(v) for v in row] for row in corr],
            "constant": [name for name, flat in zip(names, constant, strict=True) if flat],
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


class FirstErrors(RewardFailures):
    """A failure tally that also keeps each function's first error, for ``vpo rewards check``'s
    report (the tally itself logs the first traceback of each kind)."""

    def __init__(self, policy: RewardFailurePolicy | None = None, names: Sequence[str] = ()) -> None:
        super().__init__(policy, names)
        self.first: dict[str, BaseException] = {}

    def report(self, name: str, error: BaseException) -> None:
        self.first.setdefault(name, error)
        super().report(name, error)


def _failure_rows(funcs: Sequence[Any], calls: Mapping[str, int], by_function: Mapping[str, int],
                  first: Mapping[str, BaseException], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per reward function: its calls (``calls``: one per parsed answer, or per completion for a
    chain-level function), failed calls, and for a failing one its first error and the dataset
    columns it lacked."""
    from vpo.rewards import function_name

    rows = {}
    for func in funcs:
        name = function_name(func)
        error = first.get(name)
        failed = int(by_function.get(name, 0))
        rows[name] = {"calls": int(calls.get(name, 0)), "failed": failed,
                      "first_error": None if error is None or not failed else f"{type(error).__name__}: {error}",
                      "missing_columns": [] if error is None or not failed else missing_columns(func, error, columns)}
    return rows


def _failure_text(name: str, row: Mapping[str, Any]) -> str:
    """One line on a function that failed: the count, the missing column, the first error."""
    what = (f"the samples have no column {', '.join(repr(c) for c in row['missing_columns'])}, which it reads"
            if row["missing_columns"] else f"first error: {row['first_error']}")
    return f"{name}: {row['failed']} of {row['calls']} reward calls failed (scored 0); {what}"


def _check_tokens(funcs: Sequence[Any], cfg: CheckConfig, *, given: bool) -> None:
    """Before any call: a function that counts tokens (``vpo.rewards.needs_completion_ids``) with no
    tokens to count is refused in one line naming the flag (a ``completion_ids`` column holds a
    whole completion's tokens: enough for a chain-level function, or at m = 1)."""
    from vpo.rewards import function_name, is_chain_level
    from vpo.reward_guard import needs_completion_ids

    if cfg.tokenizer:
        return
    lacking = [function_name(f) for f in funcs if needs_completion_ids(f)
               and not (given and (is_chain_level(f) or cfg.answers == 1))]
    if lacking:
        raise ValueError(f"{', '.join(lacking)} count(s) the completion's tokens (completion_ids), as training passes "
                         "them: give --tokenizer MODEL (the model you train: a folder, a .gguf file or smollm2)"
                         + ("" if given else " or a completion_ids column in --source"))


def _load_tokenizer(model: str) -> Any:
    """The tokenizer of ``model`` (a folder, a .gguf file, ``smollm2``, a cached hub id), nothing else."""
    from vpo.models import check_model_path, checkpoint_tokenizer, resolve_model

    path = resolve_model(model)
    check_model_path(path, flag="--tokenizer")
    if path.endswith(".gguf"):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name)
    return checkpoint_tokenizer(path)


def check_rewards(cfg: CheckConfig, *, echo: bool = True) -> dict[str, Any]:
    """Score ``cfg.source``'s completions; print (``echo``) and return the matrices, the per-objective
    summary, each function's failed calls and the diagnostics (and write the report when ``cfg.out``
    is set). Every call runs and every failure is reported; then, when training would stop at
    its first step under ``--max-failure-rate``, the ``RewardFailureError`` training would raise."""
    from vpo.rewards import RewardScaleWarning, at_answers, check_columns, load_reward_funcs, score_chains

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
    ids = columns.pop("completion_ids", None)  # TRL passes the tokens apart from the columns
    check_columns(funcs, [{k: v for k, v in row.items() if k not in ("prompt", COMPLETION_COLUMN)} for row in rows],
                  where=cfg.source)
    _check_tokens(funcs, cfg, given=ids is not None)
    funcs, budgets = at_answers(funcs, cfg.answers)
    tokenizer = _load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None
    scaling = parse_scaling(cfg.scaling)
    if cfg.out:
        from vpo.runs import claim_out_dir

        claim_out_dir(cfg.out, command="rewards check", overwrite=cfg.overwrite, resume_flag="",
                      stale=("plots", "report.md", "report.html", "metrics.json"))
    errors = FirstErrors(RewardFailurePolicy(max_failure_rate=cfg.max_failure_rate, time_limit=cfg.reward_time_limit))
    prompts = [row["prompt"] for row in rows]
    completions = [as_trained(row["prompt"], row[COMPLETION_COLUMN]) for row in rows]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RewardScaleWarning)
        result = score_chains(funcs, prompts, completions, answers=cfg.answers, reward_names=cfg.reward_names or None,
                              scaling=scaling, failures=errors, completion_ids=ids, tokenizer=tokenizer, **columns)
    totals = errors.totals()
    try:  # every call has run: the verdict training would reach on this step, raised after the report
        errors.end_step()
        stop = None
    except RewardFailureError as err:
        stop = err
    failures = _failure_rows(funcs, errors.calls_by_function(), totals["by_function"], errors.first, list(columns))
    failed = {name: row for name, row in failures.items() if row["failed"]}
    rate = totals["failed"] / totals["calls"] if totals["calls"] else 0.0
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
              "completions": len(rows), "unscaled_outside_unit": leaves, "length_budgets": budgets,
              "completion_ids": "column" if ids is not None else "tokenizer" if tokenizer is not None else None,
              "reward_failures": {"calls": totals["calls"], "failed": totals["failed"], "rate": rate,
                                  "max_failure_rate": cfg.max_failure_rate, "by_function": failures},
              "failed_functions": sorted(failed)}
    if echo:
        print(f"{len(rows)} completions of {cfg.source}, m = {cfg.answers}, objectives: {', '.join(names)}")
        for line in budgets:
            print(line)
        for i in range(min(cfg.show, len(rows))):
            print(f"\n# completion {i} (prompt {_short(rows[i]['prompt'])})")
            print(_matrix_text(result.matrices[i], names, result.kept[i]))
        print("\nper reward function, over the parsed answers:")
        print(f"{'function':>20} {'calls':>8} {'failed':>8}")
        for name, row in failures.items():
            print(f"{name:>20.20} {row['calls']:>8} {row['failed']:>8}")
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
            print(f"effective dimension {diagnostics['effective_dim']:.2f} of D = {dim} over "
                  f"{diagnostics['answers']} answers (1: collinear, D: independent); correlation:")
            for name, line in zip(names, diagnostics["correlation"], strict=True):
                print(f"{name:>20.20} " + " ".join("     n/a" if v is None else f"{v:8.3f}" for v in line))
            for name in diagnostics["constant"]:
                print(f"objective {name!r} did not vary over these answers: it has no correlation")
        for name, row in failed.items():
            print(f"error: {_failure_text(name, row)}")
        if failed:
            print(f"{totals['failed']} of {totals['calls']} reward calls failed ({rate:.0%}); training would "
                  + ("stop (below)" if stop else "score them 0 and go on")
                  + f" at --max-failure-rate {cfg.max_failure_rate:g}")
    if cfg.out:
        report["report"] = {k: str(v) for k, v in write_check_report(report, cfg.out).items()}
        if echo:
            print(f"report: {report['report']['md']}")
    if stop is not None:
        raise stop
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
    for line in report.get("length_budgets") or []:
        doc.p(f"Length budget: {line}.")
    failures = report.get("reward_failures") or {}
    by_function = failures.get("by_function") or {}
    doc.h(2, "Reward functions")
    failed = [name for name, row in by_function.items() if row["failed"]]
    doc.p(f"{failures.get('failed', 0)} of {failures.get('calls', 0)} reward calls (one function on one answer) "
          "failed: raised, returned NaN or an infinity, or ran past --reward-time-limit. A failed call scores 0."
          + (" **Failed: " + ", ".join(failed) + ".**" if failed else ""))
    doc.table(["function", "calls", "failed", "first error"],
              [[name, row["calls"], row["failed"],
                (f"no column {', '.join(repr(c) for c in row['missing_columns'])} in the samples"
                 if row["missing_columns"] else row["first_error"] or "")]
               for name, row in by_function.items()])
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
    """``vpo rewards check``: 1 when any reward call failed (the command exists to find them)."""
    cfg = dataclass_from_args(CheckConfig, args)
    typed = "answers" in (getattr(args, TYPED_FLAGS, None) or {})
    print(f"m = {cfg.answers}: " + ("--answers" if typed else "the default of --answers (m is not read from the "
                                    "samples; pass --answers M when their completions hold M answers)"), flush=True)
    with warnings.catch_warnings(record=True) as caught:  # said after the tables, not in the middle of one
        warnings.simplefilter("default")
        report = check_rewards(cfg)
    for line in dict.fromkeys(f"warning: {w.category.__name__}: {w.message}" for w in caught):  # each once
        print(line)
    return 1 if report["failed_functions"] else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("rewards", help="check your own reward functions on sample completions",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="rewards_command", metavar="ACTION")
    check = sub.add_parser("check", help="print the reward matrices, a per-objective summary and the objectives' "
                                         "correlation for a file of prompts and completions")
    add_dataclass_args(check, CheckConfig)
    check.set_defaults(func=run_check)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)

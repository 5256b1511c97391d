"""Test-time search with a policy: best-of-n selection, and best@k / pass@k / coverage@k curves.

Usage::

    from vpo.search import best_of_n, select_best, search_curves, plot_search_curves
    result = best_of_n(model, tokenizer, task, example, n=30, m=3)          # task scalar
    result = best_of_n(model, tokenizer, task, example, n=30, m=3, select=[0.7, 0.1, 0.1, 0.1])
    result = best_of_n(..., select=lambda vector, answer: vector[1] - 0.01 * len(answer))
    result.best, result.best_vector, result.vectors        # the pick and the scored pool

    curves = search_curves([pool_1, pool_2, ...], task)    # pools: (P, D_i) per example
    plot_search_curves({"GRPO": curves_a, "VPO": curves_b}, "curves.png")

Shapes: P answers per example pool (n answers = n // m chains of m answers; docs/algorithm.md §5
counts answers, not chains), D objectives (for code D = number of tests and varies per
example, so pools are passed as a list of (P, D_i) arrays, never one stacked array).

Selection rules (``select``):

* ``"scalar"`` (default): the task's fixed scalar (``task.scalar``), e.g. the fraction of
  tests passed for code, the mean of the four maze components;
* a weight vector (D,): the score ``w . r`` of each answer's reward vector r;
* a callable ``select(vector, answer) -> float`` with the (D,) reward vector and the answer
  text.

The highest score wins; ties go to the earliest answer in the pool (chain-major order).

Curves (``search_curves``), averaged over examples, for k = 1..P:

* ``best_at_k``: unbiased expected max of the task scalar over k answers;
* ``pass_at_k``: unbiased pass@k, "correct" = every component at its maximum (1);
* ``coverage_at_k``: expected fraction of the D components that at least one of k answers
  gets to its maximum (code: the fraction of tests some answer passes).

``run_search_eval`` samples the pools of several checkpoints and writes the side-by-side
plot and a JSON with the curves (the body of ``vpo eval --search best-of-n`` and of
``vpo search best-of-n``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vpo import metrics as M
from vpo.runs import atomic_write_text
from vpo.tasks.base import SOLVED_TOL, Example, Task

__all__ = [
    "CURVE_NAMES",
    "SearchResult",
    "Selector",
    "best_of_n",
    "plot_search_curves",
    "levels_of_pools",
    "plot_gap_by_level",
    "pool_curves",
    "run_search_eval",
    "select_best",
    "selection_scores",
    "search_curves",
]

CURVE_NAMES = ("best_at_k", "pass_at_k", "coverage_at_k")
CURVE_TITLES = {"best_at_k": "best@k (task scalar)", "pass_at_k": "pass@k (all objectives at max)",
                "coverage_at_k": "coverage@k (objectives reached)"}
# coverage@k counts a component at its maximum as ``Task.solved`` does; an answer is solved when
# ``task.solved`` says so, the one definition ``vpo eval`` uses too.

Selector = str | Sequence[float] | np.ndarray | Callable[[np.ndarray, str], float]


# ----- selection ----------------------------------------------------------------------------

def _pool_2d(vectors: Any, name: str = "vectors") -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (P, D) array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def selection_scores(vectors: Any, select: Selector = "scalar", *, task: Task | None = None,
                     answers: Sequence[str] | None = None) -> np.ndarray:
    """(P,) selection score of each answer of a pool ``vectors`` (P, D) under ``select``.

    ``task`` is needed for ``"scalar"``; ``answers`` (P strings) is passed to a callable
    selector (empty strings when not given). Raises ValueError for an unknown selector
    name, a weight vector whose length is not D or that is not finite, or a callable that
    returns something that is not a finite number.
    """
    arr = _pool_2d(vectors)
    pool, dim = arr.shape
    if answers is not None and len(answers) != pool:
        raise ValueError(f"answers has {len(answers)} entries but the pool has {pool} vectors")
    if isinstance(select, str):
        if select != "scalar":
            raise ValueError(f"select must be 'scalar', a weight vector or a callable, got {select!r}")
        if task is None:
            raise ValueError("select='scalar' needs the task (task=...)")
        return np.asarray(task.scalar(arr), dtype=np.float64).reshape(pool)
    if callable(select):
        texts = list(answers) if answers is not None else [""] * pool
        out = np.empty(pool, dtype=np.float64)
        for i in range(pool):
            value = select(arr[i].copy(), texts[i])
            try:
                out[i] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"select callable returned {value!r} for answer {i}, expected a number") from None
            if not math.isfinite(out[i]):
                raise ValueError(f"select callable returned a non-finite score {value!r} for answer {i}")
        return out
    weights = np.asarray(select, dtype=np.float64)
    if weights.shape != (dim,):
        raise ValueError(f"select weights must have shape ({dim},) to match D={dim}, got {weights.shape}")
    if not np.all(np.isfinite(weights)):
        raise ValueError("select weights must be finite")
    return arr @ weights


def select_best(vectors: Any, select: Selector = "scalar", *, task: Task | None = None,
                answers: Sequence[str] | None = None) -> tuple[int, np.ndarray]:
    """(index of the best answer, (P,) scores): the first answer with the highest score."""
    scores = selection_scores(vectors, select, task=task, answers=answers)
    return int(np.argmax(scores)), scores


# ----- best-of-n ----------------------------------------------------------------------------

@dataclass
class SearchResult:
    """Best-of-n outcome on one example, with the whole scored pool.

    ``answers``: P answer strings (chain-major: answers of chain c are c*m .. c*m+m-1; a
    missing answer is ""); ``vectors``: (P, D) reward vectors; ``scores``: (P,) selection
    scores; ``chains``: the P // m raw generations.
    """

    best_index: int
    answers: list[str]
    vectors: np.ndarray
    scores: np.ndarray
    chains: list[str] = field(default_factory=list)
    m: int = 1

    @property
    def best(self) -> str:
        """The selected answer's text."""
        return self.answers[self.best_index]

    @property
    def best_vector(self) -> np.ndarray:
        """(D,) reward vector of the selected answer."""
        return self.vectors[self.best_index]

    @property
    def best_score(self) -> float:
        """Selection score of the selected answer."""
        return float(self.scores[self.best_index])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable copy."""
        return {"best_index": self.best_index, "best": self.best, "best_score": self.best_score,
                "best_vector": self.best_vector.tolist(), "answers": list(self.answers),
                "vectors": self.vectors.tolist(), "scores": self.scores.tolist(),
                "chains": list(self.chains), "m": self.m}


def best_of_n(model: Any, tokenizer: Any, task: Task, example: Example, *, n: int = 30, m: int = 1,
              select: Selector = "scalar", temperature: float = 0.7, top_p: float = 1.0,
              max_new_tokens: int = 256, batch_size: int = 0, fmt: Any = None, chat: bool | None = None,
              seed: int = 0, seeding: str = "chain", sampler: Any = None, progress: bool = False) -> SearchResult:
    """Sample ``n`` answers (``n // m`` chains of ``m``) from a causal LM for ``example``,
    score every answer's reward vector and return the best one under ``select``.

    ``model``/``tokenizer``: any transformers causal LM and its tokenizer (or None and a
    ``sampler``, e.g. ``vpo.sampling.vllm.VLLMSampler``). ``fmt``: a prompt format
    (``vpo.evaluation.PromptFormat``); default the task's own prompts, wrapped in the
    tokenizer's chat template when it has one (``chat=None``) or when ``chat=True``.
    Sampling is ``vpo.evaluation.sample_chains`` (temperature, top-p, ``batch_size`` chains per
    call, ``seed`` and ``seeding``: see ``vpo.sampling``); each answer is scored on its own with
    ``task.score`` (a missing answer is the zero vector). Raises ValueError unless ``m`` divides ``n``.
    """
    from vpo.evaluation import sample_chains

    _check_n_m(n, m)
    fmt = _task_format(task, fmt, tokenizer if sampler is None else getattr(sampler, "tokenizer", None), chat)
    (row,) = sample_chains(model, tokenizer, [example], m=m, chains=n // m, fmt=fmt, temperature=temperature,
                           top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size, seeding=seeding,
                           seed=seed, sampler=sampler, progress=progress, desc="best-of-n")
    return scored_result(task, fmt, example, row, m, select)


def _check_n_m(n: Any, m: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or isinstance(m, bool) or not isinstance(m, int) \
            or n < 1 or m < 1 or n % m:
        raise ValueError(f"n ({n!r}) must be a positive multiple of m ({m!r})")


def _task_format(task: Task, fmt: Any, tokenizer: Any, chat: bool | None) -> Any:
    """``fmt``, or the task's own prompts (in the chat template when ``chat`` or, with ``chat=None``,
    when the tokenizer has one)."""
    if fmt is not None:
        return fmt
    from vpo.evaluation import TaskFormat

    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    return TaskFormat(task, chat=use_chat, tokenizer=tokenizer)


def scored_result(task: Task, fmt: Any, example: Example, chains: Sequence[Any], m: int,
                  select: Selector = "scalar") -> SearchResult:
    """The ``SearchResult`` of an example's generated ``chains`` (texts, or ``Generation``s with their
    tokens): every answer parsed by ``fmt`` and scored as ``vpo eval`` scores it
    (``vpo.evaluation.score_pool``), the best under ``select``."""
    from vpo.evaluation import score_pool

    texts = [c if isinstance(c, str) else c.text for c in chains]
    answers: list[str] = []
    for text in texts:
        parsed = list(fmt.answers(text, example, m))[:m]
        answers.extend(parsed + [""] * (m - len(parsed)))
    vectors = score_pool(task, fmt, chains, example, m)
    index, scores = select_best(vectors, select, task=task, answers=answers)
    return SearchResult(best_index=index, answers=answers, vectors=vectors, scores=scores, chains=texts, m=m)


# ----- curves -------------------------------------------------------------------------------

def pool_curves(vectors: Any, task: Task, ks: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """best@k, pass@k and coverage@k (each (L,)) of ONE pool ``vectors`` (P, D), for ``ks``
    (default every k = 1..P)."""
    arr = _pool_2d(vectors)
    pool = arr.shape[0]
    ks_list = list(range(1, pool + 1)) if ks is None else [int(k) for k in ks]
    if not ks_list or min(ks_list) < 1 or max(ks_list) > pool:
        raise ValueError(f"ks must lie in 1..{pool} (the pool size), got {ks_list}")
    scalars = np.asarray(task.scalar(arr), dtype=np.float64).reshape(pool)
    at_max = arr >= 1.0 - SOLVED_TOL                                  # (P, D)
    solved = sum(task.solved(row) for row in arr)
    return {
        "best_at_k": M.best_at_k_curve(scalars, ks_list),
        "pass_at_k": np.array([M.pass_at_k(pool, solved, k) for k in ks_list], dtype=np.float64),
        "coverage_at_k": np.array([M.coverage_at_k(at_max, k) for k in ks_list], dtype=np.float64),
    }


def search_curves(pools: Sequence[Any], task: Task, ks: Sequence[int] | None = None) -> dict[str, Any]:
    """Mean curves over examples: {"ks": [...], "best_at_k": [...], "pass_at_k": [...],
    "coverage_at_k": [...], "per_example": {name: N lists}, "ci": {name: {"low": [...],
    "high": [...]}}, "num_examples": N, "pool": P}; ``ci`` is the 95% Student-t interval over
    examples at each k (``vpo.metrics.mean_ci``; None with one example).

    ``pools``: one (P, D_i) array per example; every pool must hold the same P answers (D may
    differ). Returns plain lists (JSON-ready).
    """
    arrays = [_pool_2d(p, f"pools[{i}]") for i, p in enumerate(pools)]
    if not arrays:
        raise ValueError("search_curves needs at least one example's pool")
    sizes = {a.shape[0] for a in arrays}
    if len(sizes) != 1:
        raise ValueError(f"every pool must hold the same number of answers, got sizes {sorted(sizes)}")
    pool = sizes.pop()
    ks_list = list(range(1, pool + 1)) if ks is None else [int(k) for k in ks]
    per = [pool_curves(a, task, ks_list) for a in arrays]
    out: dict[str, Any] = {"ks": ks_list, "num_examples": len(arrays), "pool": pool, "per_example": {}, "ci": {}}
    for name in CURVE_NAMES:
        stack = np.stack([p[name] for p in per])                        # (N, L)
        out[name] = stack.mean(axis=0).tolist()
        out["per_example"][name] = stack.tolist()
        bounds = [M.mean_ci(stack[:, j])[1:] for j in range(stack.shape[1])]
        out["ci"][name] = {"low": [_finite_or_none(low) for low, _ in bounds],
                           "high": [_finite_or_none(high) for _, high in bounds]}
    return out


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def plot_search_curves(curves: Mapping[str, Mapping[str, Any]], path: str | Path, *,
                       names: Sequence[str] = CURVE_NAMES, title: str | None = None,
                       methods: Mapping[str, str | None] | None = None,
                       folders: Mapping[str, str | None] | None = None) -> Path:
    """One PNG with a panel per curve (best@k, pass@k, coverage@k against k) and one line per
    checkpoint, with its 95% band over examples when ``ci`` has one. ``curves``: {label: output
    of ``search_curves``}; ``methods``: {label: the method a checkpoint records}, for its colour
    (``vpo.report.line_styles``; without it the checkpoint's folder name in ``folders``, then the
    label, names the method). Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vpo.report import line_styles, plain_log_k

    if not curves:
        raise ValueError("plot_search_curves needs the curves of at least one checkpoint")
    for name in names:
        if name not in CURVE_NAMES:
            raise ValueError(f"unknown curve {name!r}; known: {', '.join(CURVE_NAMES)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    styles = line_styles({label: {"label": str(label), "method": (methods or {}).get(label),
                                  "folder": (folders or {}).get(label)} for label in curves})
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for label, entry in curves.items():
            ax.plot(entry["ks"], entry[name], marker="o", markersize=3, label=str(label), **styles[label])
            band = (entry.get("ci") or {}).get(name)
            if band and all(x is not None for x in (*band["low"], *band["high"])):
                ax.fill_between(entry["ks"], band["low"], band["high"], color=styles[label]["color"], alpha=0.15)
        ax.set_xlabel("k (answers)")
        ax.set_title(CURVE_TITLES[name])
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        kmax = max(max(entry["ks"]) for entry in curves.values())
        if kmax >= 16:
            plain_log_k(ax, kmax)
    axes[0][0].legend(fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ----- by difficulty ------------------------------------------------------------------------

def levels_of_pools(task: Task, pools: Sequence[Any], levels: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """best@k, pass@k and coverage@k per difficulty level of pools (one (P, D) array per
    example; ``levels`` from ``task.difficulty``): ``vpo.metrics.search_curves_by_level``."""
    arrays = [_pool_2d(p) for p in pools]
    return M.search_curves_by_level([np.asarray(task.scalar(a), dtype=np.float64).reshape(-1) for a in arrays],
                                    [[task.solved(row) for row in a] for a in arrays], list(levels),
                                    tests=[a >= 1.0 - SOLVED_TOL for a in arrays])


def plot_gap_by_level(gap: Mapping[str, Any], path: str | Path, *, title: str = "") -> Path | None:
    """best@k gap against k (log axis), one line per level with its 95% band; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from vpo.report import plain_log_k

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for level, entry in gap.items():
        ks = np.asarray(entry["ks"], dtype=float)
        style = {"color": "black", "linewidth": 2.2} if level == "all" else {}
        line, = ax.plot(ks, entry["mean"], label=f"{level} (n={entry['num_examples']})", **style)
        low, high = np.asarray(entry["low"], dtype=float), np.asarray(entry["high"], dtype=float)
        if np.isfinite(low).any():
            ax.fill_between(ks, low, high, color=line.get_color(), alpha=0.15)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    plain_log_k(ax, int(max(max(entry["ks"]) for entry in gap.values())))
    ax.set_xlabel("k (answers)")
    ax.set_ylabel("best@k gap")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, title="level")
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# ----- several checkpoints ------------------------------------------------------------------

def run_search_eval(checkpoints: Sequence[tuple[str, Any]], task: Task, examples: Sequence[Example],
                    out_dir: str | Path, *, n: int = 30, m: int | Sequence[int] = 1, select: Selector = "scalar",
                    temperature: float = 0.7, top_p: float = 1.0, max_new_tokens: int = 256,
                    chat: bool | None = None, seed: int = 0, options: Any = None,
                    loader: Callable[[Any], tuple[Any, Any]] | None = None,
                    progress: bool = True) -> dict[str, Any]:
    """Best-of-n for several checkpoints on the same examples; writes
    ``out_dir/search_curves.png`` and ``out_dir/search.json``; returns the JSON dict.

    ``checkpoints``: (label, model) pairs where model is a path (a folder, or a ``.gguf``
    file) or an already loaded ``(model, tokenizer)`` pair. ``options``: a
    ``vpo.sampling.SamplingOptions`` (default: auto device and dtype, hf backend, auto batch
    size, chain seeding); a path is opened with ``vpo.sampling.open_sampler`` under it, or with
    ``loader`` (path -> (model, tokenizer)) when given. ``m``: answers per chain, one for all or
    one per checkpoint (every pool holds n answers). A folder is prompted in the format it was
    trained on (``vpo.evaluation.load_format``: e.g. the demo's compact maze format).

    Sampling: with ``seeding="chain"`` every example's chains are sampled in the same batched
    calls (``options.batch_size`` chains each), chain c of example i seeded by (seed, i, c), as
    ``vpo eval`` does; ``seeding="batch"`` replays the older per-call stream (one call
    per example, seeded ``seed + i``). The JSON holds per label the curves with their 95%
    intervals over examples and, per example, the selected answer's index, score and reward vector.
    """
    import gc

    from vpo.evaluation import load_format, sample_chains
    from vpo.sampling import HFSampler, SamplingOptions, open_sampler

    if not checkpoints:
        raise ValueError("run_search_eval needs at least one checkpoint")
    if not examples:
        raise ValueError("run_search_eval needs at least one example")
    labels = [label for label, _ in checkpoints]
    if len(set(labels)) != len(labels):
        raise ValueError(f"checkpoint labels must be distinct, got {labels}")
    per_checkpoint_m = [int(m)] * len(checkpoints) if isinstance(m, int | np.integer) else [int(x) for x in m]
    if len(per_checkpoint_m) != len(checkpoints):
        raise ValueError(f"m: one value or one per checkpoint ({len(checkpoints)}), got {list(m)}")
    for m_label in per_checkpoint_m:
        _check_n_m(n, m_label)
    options = (options or SamplingOptions()).check([s for _, s in checkpoints if not isinstance(s, tuple)])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shown_m = per_checkpoint_m[0] if len(set(per_checkpoint_m)) == 1 else dict(zip(labels, per_checkpoint_m))
    report: dict[str, Any] = {"task": task.name, "n": n, "m": shown_m, "temperature": temperature, "top_p": top_p,
                              "select": select if isinstance(select, str) else (
                                  "callable" if callable(select) else np.asarray(select).tolist()),
                              "seed": seed, "seeding": options.seeding, "backend": options.backend,
                              "examples": [str(ex.get("id", i)) for i, ex in enumerate(examples)],
                              "checkpoints": {}}
    curves: dict[str, dict[str, Any]] = {}
    all_pools: dict[str, list[np.ndarray]] = {}
    levels = [task.difficulty(ex) for ex in examples]
    has_levels = any(level is not None for level in levels)
    for (label, source), m_label in zip(checkpoints, per_checkpoint_m, strict=True):
        if isinstance(source, tuple) or loader is not None:
            model, tokenizer = source if isinstance(source, tuple) else loader(source)
            sampler = HFSampler(model, tokenizer, batch_size=options.batch_size, seeding=options.seeding)
        else:
            sampler, tokenizer = open_sampler(source, options)
        fmt = None
        if not isinstance(source, tuple) and Path(source).is_dir():
            fmt = load_format(source, task, tokenizer=tokenizer, chat=chat)   # e.g. the demo's compact maze
        fmt = _task_format(task, fmt, tokenizer, chat)
        budget = max_new_tokens if max_new_tokens > 0 else fmt.completion_budget(examples, m_label)  # 0: the format's
        settings = dict(m=m_label, chains=n // m_label, fmt=fmt, temperature=temperature, top_p=top_p,
                        max_new_tokens=budget, sampler=sampler, progress=progress, desc=f"best-of-n {label}")
        if options.seeding == "batch":     # the old stream: one call per example, seeded seed + i
            from tqdm.auto import tqdm

            settings["progress"] = False   # one bar over the examples, not one per example
            rows = []
            for i, example in enumerate(tqdm(examples, desc=f"best-of-n {label}", unit="example",
                                             disable=not progress, leave=False)):
                rows.append(sample_chains(None, None, [example], seed=seed + i, **settings)[0])
        else:
            rows = sample_chains(None, None, examples, seed=seed, **settings)
        del sampler
        gc.collect()
        picks, pools = [], []
        before = task.failures.totals()
        for i, (example, row) in enumerate(zip(examples, rows, strict=True)):
            result = scored_result(task, fmt, example, row, m_label, select)
            pools.append(result.vectors)
            picks.append({"example": report["examples"][i], "best_index": result.best_index,
                          "best_score": result.best_score, "best_vector": result.best_vector.tolist(),
                          "best_solved": bool(task.solved(result.best_vector))})
        task.failures.end_step()  # the last window of reward calls: RewardFailureError past max_failure_rate
        curves[label] = search_curves(pools, task)
        report["checkpoints"][label] = {"source": source if isinstance(source, str | Path) else "in-memory",
                                        "m": m_label, "curves": curves[label], "picks": picks,
                                        "reward_failures": task.failures.totals_since(before)}
        all_pools[label] = pools
        if has_levels:
            report["checkpoints"][label]["by_level"] = levels_of_pools(task, pools, levels)
        report["checkpoints"][label]["source"] = str(report["checkpoints"][label]["source"])
    from vpo.formats import recorded_method

    methods = {label: recorded_method(source) if isinstance(source, str | Path) and Path(source).is_dir() else None
               for label, source in checkpoints}
    folders = {label: Path(source).stem if isinstance(source, str | Path) else None for label, source in checkpoints}
    plot = plot_search_curves(curves, out_dir / "search_curves.png", methods=methods, folders=folders,
                              title=f"{task.name}: best-of-n, n={n}, m={','.join(map(str, sorted(set(per_checkpoint_m))))}")
    report["plot"] = plot.name
    if has_levels and len(checkpoints) >= 2:
        # the last checkpoint against the first (list the baseline first: --model grpo,vpo)
        a, b = labels[-1], labels[0]
        gap = M.search_gap_by_level([task.scalar(_pool_2d(p)) for p in all_pools[a]],
                                    [task.scalar(_pool_2d(p)) for p in all_pools[b]], levels)
        report["gap_by_level"] = {"a": a, "b": b, "levels": gap}
        gap_plot = plot_gap_by_level(gap, out_dir / "gap_by_level.png", title=f"best@k({a}) - best@k({b}) by level")
        if gap_plot is not None:
            report["gap_plot"] = gap_plot.name
    from vpo.evaluation import sanitize

    atomic_write_text(out_dir / "search.json", json.dumps(sanitize(report), indent=1, allow_nan=False))
    return report

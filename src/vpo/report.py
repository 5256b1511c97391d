"""Evaluation reports: report.md, report.html, PNG plots and metrics.json from a metrics dict.

Usage::

    from vpo.report import write_report
    paths = write_report(metrics, "runs/demo")   # {"md": ..., "html": ..., "json": ..., "plots": [...]}

The metrics dict (what ``vpo demo`` and ``vpo eval`` build; every key but ``methods`` optional):

* ``title``, ``intro`` (a paragraph), ``task`` {name, params, objectives}, ``eval`` {examples,
  pool, temperature, top_p, eval_weights, ks_shown};
* ``methods``: {key: entry from ``vpo.evaluation.summarize``}: curves ``best_at_k``,
  ``pref_best_at_k``, ``pass_at_k`` and scalars ``diversity``, ``completion_rate``,
  ``pareto_fraction``, ``objective_mean`` {name: stat}, each stat {mean, ci_examples,
  ci_seeds, per_seed}; plus ``label``, ``m``, ``num_seeds`` and optional ``tokens_per_chain``,
  ``truncated`` and ``distinct_answers`` (distinct answers per pool);
* ``paired``: list of {a, b, metric, k, mean, half_width, n, significant};
* ``paper``: {caption, columns, rows: [[cells...]]}: a reference table shown verbatim;
* ``comparison``: {caption, columns, rows}: our numbers laid out like the paper's;
* ``training``: {key: {label, steps, series: {name: {mean, low, high}}, seconds}}: curves
  over RL steps (e.g. the reward diversity of the training rollouts);
* ``objective_space``: {x, y, color, examples: [titles], vectors: {key: [(P, D) lists]}}:
  reward vectors of a few examples' pools, drawn in objective space;
* ``objective_diagnostics``: {objectives: [D names], correlation: (D, D) lists, effective_dim,
  answers: how many answer vectors they come from}: whether the objectives are worth a vector
  (``vpo.rewards.objective_diagnostics``), shown as a table and a correlation heatmap;
* ``references``: list of {label, best_at_k, pref_best_at_k}: constant levels (e.g. the pool
  of a task's oracle answers) drawn as dashed lines in the best@k plot;
* ``findings``, ``notes``: lists of sentences; ``checks``: a smoke run's pipeline checks (lines);
  ``timings``: {stage: seconds}; ``config``; ``unit``: what the examples are, plural ("mazes",
  the default, or "prompts"), for the captions.

Plots need matplotlib (the ``plot`` extra); without it the report is written without them and
says so. Numbers that are missing (NaN, a CI from one seed) print as "n/a".
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vpo.evaluation import sanitize
from vpo.runs import atomic_write_text

PLOT_DIR = "plots"


# ----- formatting -------------------------------------------------------------------------

def _num(x: Any, digits: int = 3) -> str:
    if x is None or isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    return f"{float(x):.{digits}f}"


def _half(ci: Sequence[Any] | None) -> float | None:
    if not ci or ci[0] is None or ci[1] is None:
        return None
    return (float(ci[1]) - float(ci[0])) / 2.0


def _cell(stat: Mapping[str, Any], index: int | None = None, digits: int = 3) -> str:
    """``mean ±ex (±seeds)`` for a stat (at curve position ``index``)."""
    mean = stat["mean"] if index is None else stat["mean"][index]
    ci_ex = stat["ci_examples"] if index is None else stat["ci_examples"][index]
    ci_sd = stat["ci_seeds"] if index is None else stat["ci_seeds"][index]
    text = _num(mean, digits)
    h_ex, h_sd = _half(ci_ex), _half(ci_sd)
    if h_ex is not None:
        text += f" ±{_num(h_ex, digits)}"
    if h_sd is not None:
        text += f" (±{_num(h_sd, digits)})"
    return text


def _ks(metrics: Mapping[str, Any], pool: int) -> list[int]:
    shown = (metrics.get("eval") or {}).get("ks_shown") or [1, 3, 10, pool]
    return sorted({int(k) for k in shown if 1 <= int(k) <= pool})


def _pool_size(metrics: Mapping[str, Any]) -> int:
    for entry in metrics["methods"].values():
        return len(entry["best_at_k"]["mean"])
    return 0


# ----- document model: blocks rendered to markdown and html -------------------------------

class _Doc:
    def __init__(self) -> None:
        self.blocks: list[tuple[Any, ...]] = []

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def ul(self, items: Sequence[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(("table", [str(c) for c in columns], [[str(c) for c in r] for r in rows]))

    def img(self, path: str, caption: str) -> None:
        self.blocks.append(("img", path, caption))

    def code(self, text: str, language: str = "") -> None:
        """A preformatted block: fenced in Markdown, ``<pre>`` in HTML."""
        self.blocks.append(("code", text, language))

    def markdown(self) -> str:
        out: list[str] = []
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out.append("#" * block[1] + " " + block[2])
            elif kind == "p":
                out.append(block[1])
            elif kind == "ul":
                out.append("\n".join(f"- {item}" for item in block[1]))
            elif kind == "table":
                cols, rows = block[1], block[2]
                lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
                out.append("\n".join(lines))
            elif kind == "img":
                out.append(f"![{block[2]}]({block[1]})\n\n*{block[2]}*")
            elif kind == "code":
                out.append(f"```{block[2]}\n{block[1]}\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        esc = html.escape
        out = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{esc(title)}</title>",
               "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
               "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
               "td,th{border:1px solid #bbb;padding:3px 7px;text-align:right}"
               "th{background:#eee}td:first-child{text-align:left}img{max-width:100%}"
               "figcaption{font-style:italic;color:#444}"
               "pre{background:#f5f5f5;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:0.85em}"
               "</style></head><body>"]
        for block in self.blocks:
            kind = block[0]
            if kind == "h":
                out.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
            elif kind == "p":
                out.append(f"<p>{esc(block[1])}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in block[1]) + "</ul>")
            elif kind == "table":
                head = "".join(f"<th>{esc(c)}</th>" for c in block[1])
                body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block[2])
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif kind == "img":  # a click opens the PNG at full size
                out.append(f"<figure><a href='{esc(block[1])}'><img src='{esc(block[1])}' alt='{esc(block[2])}'></a>"
                           f"<figcaption>{esc(block[2])}</figcaption></figure>")
            elif kind == "code":
                out.append(f"<pre><code>{esc(block[1])}</code></pre>")
        out.append("</body></html>\n")
        return "\n".join(out)


# ----- plots ------------------------------------------------------------------------------

METHOD_STYLES: dict[str, dict[str, Any]] = {
    "vpo": {"color": "tab:blue", "linestyle": "-"},
    "grpo": {"color": "tab:red", "linestyle": "--"},
    "max_at_k": {"color": "tab:orange", "linestyle": "-."},
    "multi_rlvr": {"color": "tab:green", "linestyle": (0, (5, 1.5, 1, 1.5, 1, 1.5))},
    "goal_conditioned": {"color": "tab:purple", "linestyle": (0, (8, 2))},
}
"""One colour and line style per method for every figure (the demo's, ``vpo eval``'s and ``vpo
search``'s): a reader who learns "blue = VPO" from one figure reads every other one right."""
WARM_START_STYLES = ({"color": "black", "linestyle": ":"}, {"color": "dimgray", "linestyle": ":"})
"""The warm start (a checkpoint before RL) is black and dotted; a second warm-start entry (its
multi-answer pool) dark grey."""
OTHER_COLORS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")
"""Colours, in order, of lines that are no known method (never a method's colour)."""
WARM_START_PREFIXES = ("warmup", "warm_up", "warm_start")


def method_of(*names: Any) -> str | None:
    """The method (a ``METHOD_STYLES`` key, or "warm_start") that a report key, label or recorded
    method names, or None: ``"vpo-s0"``, ``"VPO (m=3)"`` and ``"vpo"`` are VPO, ``"Max@K"`` is
    max_at_k, ``"warmup-m3"`` the warm start. The first name that resolves wins."""
    for name in names:
        if not name:
            continue
        text = str(name).strip().lower().replace("@", "_at_")
        for sep in ("-", " ", "."):
            text = text.replace(sep, "_")
        if text.startswith(WARM_START_PREFIXES):
            return "warm_start"
        for method in sorted(METHOD_STYLES, key=len, reverse=True):
            if text == method or text.startswith(method) and not text[len(method)].isalpha():
                return method
    return None


def line_styles(entries: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """{key: matplotlib line style (color, linestyle, linewidth)} for the entries of a figure:
    ``entries`` maps a key to its report entry (a dict with optional ``label``, ``method``, the
    method its checkpoint records, and ``folder``, the checkpoint's folder name) or to a label.
    The colour follows the recorded method, else the folder name, else the key or label (a
    label the user typed, ``--labels warm,VPO``, cannot turn a warm start into another method).
    Methods get ``METHOD_STYLES``, warm starts ``WARM_START_STYLES``, the rest ``OTHER_COLORS``
    in order."""
    styles: dict[str, dict[str, Any]] = {}
    warm = other = 0
    for key, entry in entries.items():
        label, method, folder = ((entry.get("label"), entry.get("method"), entry.get("folder"))
                                 if isinstance(entry, Mapping) else (entry, None, None))
        found = method_of(method, folder, key, label)
        if found == "warm_start":
            style = WARM_START_STYLES[min(warm, len(WARM_START_STYLES) - 1)]
            warm += 1
        elif found is not None:
            style = METHOD_STYLES[found]
        else:
            style = {"color": OTHER_COLORS[other % len(OTHER_COLORS)], "linestyle": "-"}
            other += 1
        styles[key] = {"linewidth": 1.8, **style}
    return styles


def _plot_best_at_k(metrics: Mapping[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    panels = [("best_at_k", "best@k, fixed scalar"), ("pref_best_at_k", "preference-weighted best@k")]
    if any(any(v for v in e["pass_at_k"]["mean"]) for e in metrics["methods"].values()):
        panels.append(("pass_at_k", "pass@k (all objectives at max)"))  # all-zero curves are not drawn
    styles = line_styles(metrics["methods"])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4.0))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for name, entry in metrics["methods"].items():
            stat = entry[key]
            ks = list(range(1, len(stat["mean"]) + 1))
            ax.plot(ks, stat["mean"], label=entry.get("label", name), marker=".", markersize=3, **styles[name])
            band = stat["ci_seeds"] if entry.get("num_seeds", 1) > 1 else stat["ci_examples"]
            if band and all(b[0] is not None for b in band):
                ax.fill_between(ks, [b[0] for b in band], [b[1] for b in band], alpha=0.15,
                                color=styles[name]["color"])
        for ref in metrics.get("references") or []:
            if ref.get(key) is not None:
                ax.axhline(ref[key], color="grey", linestyle="--", linewidth=1, label=ref.get("label", "reference"))
                ax.set_ylim(top=max(ax.get_ylim()[1], ref[key] + 0.02))
        plain_log_k(ax, max(len(e[key]["mean"]) for e in metrics["methods"].values()))
        ax.set_xlabel("k (answers)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    # one legend below the panels: inside an axes it covered the lines (the oracle ceiling at the top)
    handles, labels = axes[0].get_legend_handles_labels()
    ncol = min(len(labels), 4)
    rows = -(-len(labels) // ncol)
    fig.set_figheight(fig.get_figheight() + 0.3 * rows)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, (0.05 + 0.3 * rows) / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


K_TICKS = (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000)
"""Ticks of a log k axis, written as plain numbers."""


def plain_log_k(ax: Any, kmax: int) -> None:
    """A log-scale k axis (k = 1 .. ``kmax``) whose ticks read 1, 2, 3, 5, 10, 20, 30, not
    10^0, 10^1 or 2^5."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ticks = [k for k in K_TICKS if k <= max(1, kmax)]
    if kmax not in ticks and kmax > 1 and kmax / ticks[-1] > 1.25:
        ticks.append(int(kmax))
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points (shorter at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def training_window(num_steps: int) -> int:
    """Moving-average window of the training plot: about a tenth of the steps (1 below 20)."""
    return 1 if num_steps < 20 else max(2, num_steps // 10)


TRAINING_COLUMNS = 2
"""Panels per row of the training plot: four panels in one row came out 2420 px wide, which the
HTML report (about 1100 px wide) shrank to unreadable type; two per row stay near full size."""


def training_figure(training: Mapping[str, Any]) -> Any:
    """The training plot as a matplotlib figure: one panel per logged series (a grid of
    ``TRAINING_COLUMNS`` columns), one line per run, and one legend above the panels."""
    import matplotlib.pyplot as plt

    names: list[str] = []
    for run in training.values():
        for name in run.get("series", {}):
            if name not in names:
                names.append(name)
    cols = min(TRAINING_COLUMNS, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows + 0.5), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    styles = line_styles(training)
    for ax, name in zip(axes.flat, names):
        for key, run in training.items():
            series = run.get("series", {}).get(name)
            if not series:
                continue
            steps = run["steps"]
            win = training_window(len(steps))
            ax.plot(steps, smooth(series["mean"], win), label=run.get("label", ""), **styles[key])
            if series.get("low") and all(v is not None for v in series["low"]):
                ax.fill_between(steps, smooth(series["low"], win), smooth(series["high"], win), alpha=0.15,
                                color=styles[key]["color"])
        ax.set_xlabel("RL step")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    # four "Multi-RLVR (m=3)"-long entries in one row overran the figure's width: two rows of two
    ncol = max(1, len(labels) if len(labels) <= 3 else 2 if len(labels) == 4 else 3)
    legend_rows = -(-len(labels) // ncol)
    fig.set_figheight(fig.get_figheight() + 0.25 * (legend_rows - 1))
    fig.legend(handles, labels, loc="upper center", ncol=ncol, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.2 + 0.25 * legend_rows) / fig.get_figheight()))
    return fig


def _plot_training(training: Mapping[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = training_figure(training)
    fig.savefig(path, dpi=110)
    plt.close(fig)


OBJECTIVE_SPACE_COLUMNS = 3
"""Panels per row of the objective-space figure: six pools side by side came out 1920 px wide,
shown at about 1000 px with 6 px text; three per row stay near full size."""


ZERO_SPOT = -0.16
"""Where an objective-space panel marks its all-zero answers (a red x): below and left of (0, 0),
apart from answers that score 0 on the two axes but not on every objective."""


def _plot_objective_space(space: Mapping[str, Any], objectives: Sequence[str], entries: Mapping[str, Any],
                          path: Path) -> None:
    """One panel per (pool, example): a row per pool with a column per example, or, for one
    example, the pools in rows of ``OBJECTIVE_SPACE_COLUMNS``. ``entries``: the report's methods
    ({key: entry with its label and method}); panel titles carry the method's colour (``line_styles``)."""
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np

    keys = list(space["vectors"])
    titles = space.get("examples") or []
    n_examples = len(space["vectors"][keys[0]])
    panels = [(key, row) for key in keys for row in range(n_examples)]
    cols = n_examples if n_examples > 1 else min(OBJECTIVE_SPACE_COLUMNS, len(keys))
    rows = -(-len(panels) // cols)
    styles = line_styles({key: entries.get(key, key) for key in keys})
    labels = {key: entries[key].get("label", key) if isinstance(entries.get(key), Mapping)
              else str(entries.get(key, key)) for key in keys}
    xi, yi = objectives.index(space["x"]), objectives.index(space["y"])
    ci = objectives.index(space["color"]) if space.get("color") in objectives else None
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + (0.9 if ci is not None else 0), 3.0 * rows + 0.8),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    mappable = None
    for i, (key, row) in enumerate(panels):
        ax = axes.flat[i]
        vec = np.asarray(space["vectors"][key][row], dtype=float)
        if vec.size:
            uniq, counts = np.unique(np.round(vec, 4), axis=0, return_counts=True)
            zero = ~np.any(uniq > 0, axis=1)
            shade = {} if ci is None else {"c": uniq[~zero, ci], "cmap": "viridis", "vmin": 0, "vmax": 1}
            mappable = ax.scatter(uniq[~zero, xi], uniq[~zero, yi], s=25 + 18 * counts[~zero], edgecolors="k",
                                  linewidths=0.4, **shade)
            if zero.any():  # a spot of their own, off (0, 0), where answers that score elsewhere can sit
                n = int(counts[zero].sum())
                ax.scatter([ZERO_SPOT], [ZERO_SPOT], marker="x", color="red", s=min(40 + 6 * n, 160), clip_on=False)
                ax.annotate(f"{n} zero", (ZERO_SPOT + 0.07, ZERO_SPOT), fontsize=9, color="red", va="center")
        if space.get("oracle"):  # reference answers of the example (the demo: its oracle routes)
            ref = np.asarray(space["oracle"][row], dtype=float)
            ax.scatter(ref[:, xi], ref[:, yi], marker="*", s=110, facecolors="none", edgecolors="red",
                       linewidths=1.0)
        ax.set_xlim(ZERO_SPOT - 0.09, 1.08)
        ax.set_ylim(ZERO_SPOT - 0.09, 1.08)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0])  # no negative ticks: the zero spot is no value
        ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
        ax.grid(alpha=0.3)
        example = titles[row] if row < len(titles) else str(row)
        title = labels.get(key, key) + (f", {example}" if n_examples > 1 else "")
        ax.set_title(title, fontsize=10, color=styles[key]["color"], fontweight="bold")
        if i % cols == 0:
            ax.set_ylabel(space["y"], fontsize=10)
        if i + cols >= len(panels):
            ax.set_xlabel(space["x"], fontsize=10)
    if ci is not None and mappable is not None:
        fig.colorbar(mappable, ax=axes, label=space["color"], shrink=0.6)
    heading = ("Reward vectors of each answer pool" + (f" ({titles[0]})" if n_examples == 1 and titles else "")
               + ": marker size = number of answers; red x below (0, 0): answers that score 0 on every objective"
               + (f"; red stars: {space.get('oracle_label', 'reference answers')}" if space.get("oracle") else ""))
    width_chars = int(fig.get_figwidth() * 72 / (11 * 0.55))  # about one line per figure width at 11 pt
    fig.suptitle(textwrap.fill(heading, width_chars), fontsize=11)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_correlation(objectives: Sequence[str], correlation: Any, path: str | Path, *,
                     title: str = "Correlation of the objectives") -> Path:
    """A (D, D) correlation matrix as a heatmap with the values written in; returns ``path``.
    NaN or None cells (an objective constant over the answers) are grey and read "did not vary".
    The title is wrapped to the figure's width."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    corr = np.array([[np.nan if v is None else v for v in row] for row in correlation], dtype=float)
    dim = corr.shape[0]
    side = 1.6 + 0.7 * dim
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    title = "\n".join(textwrap.wrap(title, width=max(16, int((side + 1.2) * 72 / (10 * 0.62)))))
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#cccccc")
    image = ax.imshow(np.ma.masked_invalid(corr), cmap=cmap, vmin=-1, vmax=1)
    ax.set_xticks(range(dim), list(objectives), rotation=45, ha="right")
    ax.set_yticks(range(dim), list(objectives))
    for i in range(dim):
        for j in range(dim):
            value = corr[i, j]
            ax.text(j, i, "did not\nvary" if not np.isfinite(value) else f"{value:.2f}", ha="center", va="center",
                    fontsize=9 if np.isfinite(value) else 7,
                    color="white" if np.isfinite(value) and abs(value) > 0.6 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def diagnostics_section(doc: _Doc, diagnostics: Mapping[str, Any], plot: str | None = None) -> None:
    """The objectives' correlation and effective dimension: are they worth a vector?"""
    names = list(diagnostics["objectives"])
    dim = len(names)
    doc.h(2, "Are the objectives worth a vector?")
    doc.p(f"Effective dimension {_num(diagnostics.get('effective_dim'), 2)} of D = {dim}, over "
          f"{diagnostics.get('answers', '?')} answer vectors: the participation ratio of the eigenvalues of their "
          "covariance, 1 when the objectives are collinear (the simplex collapses to a line and a vector reward "
          f"adds nothing over their sum) and {dim} when they vary independently.")
    rows = [[name] + [_num(v, 2) for v in row] for name, row in zip(names, diagnostics["correlation"], strict=True)]
    doc.table(["correlation"] + names, rows)
    if diagnostics.get("constant"):
        doc.p(f"Did not vary over these answers (no correlation, n/a): {', '.join(diagnostics['constant'])}.")
    if plot:
        doc.img(plot, "Correlation of the objectives over the answers (grey: an objective that did not vary).")


def make_plots(metrics: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write the PNG plots the metrics allow under ``out_dir/plots``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    plot_dir = Path(out_dir) / PLOT_DIR
    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    if metrics.get("methods"):
        _plot_best_at_k(metrics, plot_dir / "best_at_k.png")
        paths.append(plot_dir / "best_at_k.png")
    if metrics.get("training"):
        _plot_training(metrics["training"], plot_dir / "training.png")
        paths.append(plot_dir / "training.png")
    space = metrics.get("objective_space")
    objectives = list((metrics.get("task") or {}).get("objectives") or [])
    if space and space.get("vectors") and objectives:
        _plot_objective_space(space, objectives, metrics["methods"], plot_dir / "objective_space.png")
        paths.append(plot_dir / "objective_space.png")
    diagnostics = metrics.get("objective_diagnostics")
    if diagnostics and len(diagnostics.get("objectives") or ()) >= 2:
        paths.append(plot_correlation(diagnostics["objectives"], diagnostics["correlation"],
                                      plot_dir / "objective_correlation.png",
                                      title=f"Correlation of the objectives (effective dimension "
                                            f"{_num(diagnostics.get('effective_dim'), 2)} of "
                                            f"{len(diagnostics['objectives'])})"))
    return paths


# ----- the report -------------------------------------------------------------------------

def by_level_section(doc: _Doc, by_level: Mapping[str, Any], pool: int) -> None:
    """Per difficulty level: best@k and pass@k (mean, 95% CI over the level's examples)."""
    doc.h(2, "By difficulty")
    doc.p("One row per difficulty level of the examples (``task.difficulty``), the last over all of them; "
          "mean over the level's examples [95% CI].")
    for label, levels in by_level.items():
        first = next(iter(levels.values()))
        ks = [k for k in (1, 3, 10, pool) if k in first["ks"]] or first["ks"][-1:]
        cols = ["level", "examples"] + [f"best@{k}" for k in ks] + [f"pass@{k}" for k in ks]
        rows = []
        for level, entry in levels.items():
            idx = [entry["ks"].index(k) for k in ks]
            cell = lambda c, i: f"{_num(c['mean'][i])} [{_num(c['low'][i])}, {_num(c['high'][i])}]"  # noqa: E731
            rows.append([level, entry["num_examples"]] + [cell(entry["best_at_k"], i) for i in idx]
                        + [cell(entry["pass_at_k"], i) for i in idx])
        if len(by_level) > 1:
            doc.h(3, label)
        doc.table(cols, rows)


def build_document(metrics: Mapping[str, Any], plots: Sequence[Path]) -> _Doc:
    doc = _Doc()
    doc.h(1, metrics.get("title", "Evaluation report"))
    if metrics.get("intro"):
        doc.p(metrics["intro"])
    for figure in metrics.get("headline_plots") or []:  # drawn by the caller (the demo), shown first
        doc.img(figure["file"], figure["caption"])
    ev = metrics.get("eval") or {}
    task = metrics.get("task") or {}
    pool = _pool_size(metrics)
    setup = [f"task: {task.get('name', '?')} {json.dumps(task.get('params', {}), sort_keys=True)}",
             f"objectives: {', '.join(task.get('objectives', []))}",
             f"held-out examples: {ev.get('examples', '?')}; pool: {pool} answers per example "
             f"(chains x m); temperature {ev.get('temperature', '?')}, top-p {ev.get('top_p', '?')}",
             f"preference-weighted metrics: {ev.get('eval_weights', '?')} fixed Dirichlet(1) weights per example"]
    doc.h(2, "Setup")
    doc.ul(setup)
    if metrics.get("findings"):
        doc.h(2, "Findings")
        doc.ul(metrics["findings"])
    if metrics.get("checks"):
        doc.h(2, "Pipeline checks")
        doc.ul(metrics["checks"])
    if metrics.get("comparison") or metrics.get("paper"):
        doc.h(2, "Next to the paper")
        for key in ("paper", "comparison"):
            tab = metrics.get(key)
            if tab:
                doc.p(tab.get("caption", ""))
                doc.table(tab["columns"], tab["rows"])
    methods = metrics["methods"]
    objectives = list(task.get("objectives") or [])
    if metrics.get("by_level"):
        by_level_section(doc, metrics["by_level"], pool)
    doc.h(2, "Results")
    doc.p("Cells: mean over held-out examples ±95% CI over examples (±95% CI over training seeds, when "
          "there are several). k counts answers; best@k is the exact expectation of the max of k of the "
          f"pool's {pool} answers.")
    ks = _ks(metrics, pool)
    cols = ["method", "m", "seeds"] + [f"best@{k}" for k in ks] + [f"pref best@{k}" for k in ks]
    rows = [[e.get("label", key), e.get("m", "?"), e.get("num_seeds", 1)]
            + [_cell(e["best_at_k"], k - 1) for k in ks] + [_cell(e["pref_best_at_k"], k - 1) for k in ks]
            for key, e in methods.items()]
    doc.table(cols, rows)
    distinct = any(e.get("distinct_answers") is not None for e in methods.values())
    cols = ["method", "pass@1", f"pass@{pool}", "diversity (L1)", "completion rate", "Pareto fraction",
            "tokens/chain", "chains without EOS"] + (["distinct answers"] if distinct else [])
    rows = [[e.get("label", key), _cell(e["pass_at_k"], 0), _cell(e["pass_at_k"], pool - 1),
             _cell(e["diversity"]), _cell(e["completion_rate"]), _cell(e["pareto_fraction"]),
             _num(e.get("tokens_per_chain"), 1), _num(e.get("truncated"), 2)]
            + ([_num(e.get("distinct_answers"), 1)] if distinct else []) for key, e in methods.items()]
    doc.table(cols, rows)
    if objectives:
        doc.p("Per-objective mean over the pool's answers (and best in the pool, mean over examples).")
        cols = ["method"] + [f"{o} mean" for o in objectives] + [f"{o} best" for o in objectives]
        rows = [[e.get("label", key)] + [_cell(e["objective_mean"][o]) for o in objectives]
                + [_num(e["objective_best"][o]["mean"]) for o in objectives] for key, e in methods.items()]
        doc.table(cols, rows)
    if metrics.get("objective_diagnostics"):
        shown = f"{PLOT_DIR}/objective_correlation.png" if any(p.name == "objective_correlation.png"
                                                                for p in plots) else None
        diagnostics_section(doc, metrics["objective_diagnostics"], shown)
    if metrics.get("paired"):
        doc.h(2, "Paired differences (same examples)")
        doc.p("a - b, per example averaged over seeds, then mean ±95% half-width over examples; "
              "significant when |mean| exceeds the half-width.")
        label = {k: v.get("label", k) for k, v in methods.items()}
        rows = [[label.get(d["a"], d["a"]), label.get(d["b"], d["b"]),
                 d["metric"] + (f"@{d['k']}" if d.get("k") else ""), _num(d["mean"], 4),
                 _num(d.get("half_width"), 4), d.get("n", "?"), "yes" if d.get("significant") else "no"]
                for d in metrics["paired"]]
        doc.table(["a", "b", "metric", "a - b", "±", "n", "significant"], rows)
    names = {p.name: p for p in plots}
    captions = {"best_at_k.png": "best@k, preference-weighted best@k (and pass@k when not all zero) against k (log scale); "
                                 "bands: 95% CI over seeds (over examples for single-seed rows).",
                "training.png": "Training rollouts over RL steps (temperature of training; mean over seeds, band = "
                                "min..max over seeds; trailing moving average over about a tenth of the steps). "
                                "Diversity: mean pairwise L1 between the reward vectors of all answers to a "
                                f"{str(metrics.get('unit', 'mazes')).removesuffix('s')}.",
                "objective_space.png": "Reward vectors of a few held-out examples' answer pools in objective space."}
    if plots:
        doc.h(2, "Plots")
        for name in ("best_at_k.png", "training.png", "objective_space.png"):
            if name in names:
                doc.img(f"{PLOT_DIR}/{name}", captions[name])
    elif methods:
        doc.p("Plots were not drawn (matplotlib is not installed: pip install vpo[plot]).")
    training = metrics.get("training") or {}
    if training:
        doc.h(2, "Training")
        rows = []
        for key, run in training.items():
            last = {}
            for name, series in run.get("series", {}).items():
                tail = series.get("mean") or []
                tail = tail[-max(1, len(tail) // 10):]
                last[name] = sum(tail) / len(tail) if tail else None
            rows.append([run.get("label", key), len(run.get("steps", [])) and run["steps"][-1],
                         _num(run.get("seconds"), 0)] + [_num(last.get(n)) for n in sorted(last)])
        first = next(iter(training.values()))
        doc.table(["run", "steps", "seconds (mean per seed)"]
                  + [f"{n}, last 10% of steps" for n in sorted(first.get("series", {}))], rows)
    if metrics.get("timings"):
        doc.h(2, "Timings")
        doc.p("Wall seconds as measured (other work on the machine slows them down); CPU seconds of this "
              "process (with one torch thread, about the wall time on an otherwise idle machine).")
        rows = [[k, _num(v.get("wall"), 1), _num(v.get("cpu"), 1)] if isinstance(v, Mapping) else [k, _num(v, 1), "n/a"]
                for k, v in metrics["timings"].items()]
        doc.table(["stage", "wall seconds", "CPU seconds"], rows)
    if metrics.get("notes"):
        doc.h(2, "Notes")
        doc.ul(metrics["notes"])
    if metrics.get("config"):
        doc.h(2, "Configuration")
        doc.code(json.dumps(metrics["config"], indent=1, sort_keys=True), "json")
    return doc


def write_report(metrics: Mapping[str, Any], out_dir: str | Path, *, plots: bool = True) -> dict[str, Any]:
    """Write ``report.md``, ``report.html``, ``metrics.json`` and ``plots/*.png`` under ``out_dir``.

    Returns {"md", "html", "json": paths, "plots": [paths]}. Raises ValueError if
    ``metrics`` has no ``methods``.
    """
    if not metrics.get("methods"):
        raise ValueError("metrics has no 'methods' to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clean = sanitize(metrics)
    plot_paths: list[Path] = []
    if plots:
        try:
            plot_paths = make_plots(clean, out)
        except ImportError:
            plot_paths = []
    doc = build_document(clean, plot_paths)
    md, page, js = out / "report.md", out / "report.html", out / "metrics.json"
    # through a temporary name: a run killed while writing never leaves a half report
    atomic_write_text(md, doc.markdown())
    atomic_write_text(page, doc.html(clean.get("title", "Evaluation report")))
    atomic_write_text(js, json.dumps(clean, indent=1, allow_nan=False))
    return {"md": md, "html": page, "json": js, "plots": plot_paths}

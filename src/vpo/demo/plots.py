"""The demo's three headline figures, drawn from its metrics dict and shown at the top of the report.

Usage::

    from vpo.demo.plots import headline_plots
    metrics["headline_plots"] = headline_plots(metrics, out_dir)   # [{"file", "caption"}]

* ``story_best_at_k.png``: best@k against k (log scale) for every method and the warm start, on the
  fixed scalar (with the paper's best@30 marked at k = 30) and preference-weighted, the oracle
  ceiling dashed;
* ``story_diversity.png``: reward diversity of the training rollouts over RL steps;
* ``story_objective_space.png``: one held-out maze (of the first ten, the one whose pools together
  reach the most distinct gold x diamond points), every pool's answers in that plane.

Legends sit outside the axes so no curve is hidden. Needs matplotlib (``vpo[plot]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vpo.report import line_styles, plain_log_k

PLOT_DIR = "plots"


PAPER_STAR_SPREAD = 1.07
"""The paper's best@30 stars sit side by side from k = 30 rightwards, each this factor further
along the log axis, so stars with close values do not hide one another."""


def _best_at_k(metrics: Mapping[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    paper = metrics.get("paper_best_at_30") or {}
    pool = int(metrics["eval"]["pool"])
    styles = line_styles(metrics["methods"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, (key, title) in zip(axes, (("best_at_k", "best@k, fixed scalar (the paper's metric)"),
                                       ("pref_best_at_k", "preference-weighted best@k")), strict=True):
        for name, entry in metrics["methods"].items():
            mean = entry[key]["mean"]
            ks = list(range(1, len(mean) + 1))
            ax.plot(ks, mean, label=entry.get("label", name), **dict(styles[name], linewidth=2.0))
        for ref in metrics.get("references") or []:
            if ref.get(key) is not None:
                ax.axhline(ref[key], color="grey", linestyle="--", linewidth=1.2,
                           label="oracle ceiling (3 oracle routes)")
        if key == "best_at_k":
            stars = [name for name in paper if name in metrics["methods"]]
            for i, name in enumerate(stars):
                ax.plot([pool * PAPER_STAR_SPREAD ** i], [paper[name]], marker="*", markersize=13, linestyle="none",
                        color=styles[name]["color"], markeredgecolor="k",
                        label=f"paper: {metrics['methods'][name].get('label', name).split(' (')[0]} "
                              f"{paper[name]:.3f}")
        plain_log_k(ax, pool * PAPER_STAR_SPREAD ** max(0, len(paper) - 1))
        ax.set_xlabel("k (answers)")
        ax.set_title(title, fontsize=11)
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes:  # one legend for both panels, outside on the right
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.76, 0.5), fontsize=9, frameon=False,
               title="stars: paper's best@30,\n9x9 maze, Qwen3-4B" if paper else None, title_fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.75, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _diversity(metrics: Mapping[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    from vpo.report import smooth, training_window

    styles = line_styles(metrics["training"])
    fig, ax = plt.subplots(figsize=(8.5, 4))
    for name, run in metrics["training"].items():
        series = (run.get("series") or {}).get("diversity")
        if not series:
            continue
        steps, win = run["steps"], training_window(len(run["steps"]))
        style = dict(styles[name], linewidth=2.0)
        ax.plot(steps, smooth(series["mean"], win), label=run.get("label", name), **style)
        if series.get("low"):
            ax.fill_between(steps, smooth(series["low"], win), smooth(series["high"], win), alpha=0.15,
                            color=style["color"])
    ax.set_xlabel("RL step")
    ax.set_ylabel("mean pairwise L1 of reward vectors")
    ax.set_title(f"Diversity of the training rollouts' answers per {_one(metrics)}", fontsize=11)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _objective_space(metrics: Mapping[str, Any], path: Path) -> None:
    from vpo.report import _plot_objective_space

    _plot_objective_space(metrics["story_space"], list(metrics["task"]["objectives"]), metrics["methods"], path)


def _one(metrics: Mapping[str, Any]) -> str:
    """One evaluation example, in words: "maze" (the maze demo), "prompt" (a pretrained model's)."""
    return str(metrics.get("unit", "mazes")).removesuffix("s")


MAZE_CAPTIONS = {
    "story_best_at_k.png": "best@k against k (log scale) on the held-out mazes, mean over seeds: every method, the "
                           "warm start (dotted) and the oracle ceiling (dashed); stars: the paper's best@30 on its "
                           "9x9 maze with Qwen3-4B (not comparable in absolute value; the ordering is what to compare).",
    "story_diversity.png": "Reward diversity of the training rollouts (mean pairwise L1 between the reward vectors of "
                           "all answers to a maze) over RL steps; mean over seeds, band = min..max over seeds.",
    "story_objective_space.png": "One held-out maze (of the first ten, the one where all pools together reach the "
                                 "most distinct gold x diamond points): where each pool's answers land.",
}


def captions(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The three figures' captions: the maze demo's, or in a pretrained-model report's own words."""
    if "unit" not in metrics or metrics["unit"] == "mazes":
        return MAZE_CAPTIONS
    space = metrics.get("story_space") or {}
    return {
        "story_best_at_k.png": "best@k against k (log scale) on the held-out prompts, mean over seeds: every method "
                               "and the warm start (dotted); left the mean of the objectives, right preference-"
                               "weighted (the mean over fixed Dirichlet(1) weights of the best w . r).",
        "story_diversity.png": "Reward diversity of the training rollouts (mean pairwise L1 between the reward vectors "
                               "of all answers to a prompt) over RL steps; mean over seeds, band = min..max over seeds.",
        "story_objective_space.png": f"One held-out prompt ({', '.join(space.get('examples', []))}: of the first ten, "
                                     f"the one where all pools together reach the most distinct {space.get('x')} x "
                                     f"{space.get('y')} points): where each pool's answers land.",
    }


def headline_plots(metrics: Mapping[str, Any], out_dir: str | Path) -> list[dict[str, str]]:
    """Draw the three figures under ``out_dir/plots``; returns [{"file", "caption"}] (relative paths).

    Returns [] when matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    plot_dir = Path(out_dir) / PLOT_DIR
    plot_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, draw, needs in (("story_best_at_k.png", _best_at_k, "methods"),
                              ("story_diversity.png", _diversity, "training"),
                              ("story_objective_space.png", _objective_space, "story_space")):
        if metrics.get(needs):
            draw(metrics, plot_dir / name)
            drawn.append({"file": f"{PLOT_DIR}/{name}", "caption": captions(metrics)[name]})
    return drawn

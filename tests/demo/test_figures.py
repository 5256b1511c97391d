"""Every figure of a report, read from the plotting calls (not from pixels): one colour and line
style per method across the demo's, ``vpo eval``'s and ``vpo search``'s figures, and text that
stays readable (at least 9 px) at the width a figure is shown, inside the canvas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_evaluation import LetterTask
from vpo.evaluation import example_weights, pool_metrics, summarize

pytest.importorskip("matplotlib")

SHOWN_WIDTH = 1000
"""Pixels a figure is shown at, at most: the HTML report's column is 1100 px wide at a 1400 px
window, a rendered Markdown page's narrower."""
MIN_TEXT_PX = 9

DEMO_ENTRIES = {  # key: (label, method)
    "warmup_m1": ("warm-up (m=1)", "warm_start"),
    "warmup_m3": ("warm-up (m=3)", "warm_start"),
    "grpo": ("GRPO (m=1)", "grpo"),
    "vpo": ("VPO (m=3)", "vpo"),
    "multi_rlvr": ("Multi-RLVR (m=3)", "multi_rlvr"),
    "max_at_k": ("Max@K (m=1)", "max_at_k"),
}


@pytest.fixture
def drawn(monkeypatch):
    """Records every line drawn ({"label", "color", "linestyle", "marker"}) and every figure
    saved ({"path", "width_px", "text_px", "outside"}: the smallest text in pixels as shown,
    and the texts that stick out of the canvas)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    lines: list[dict] = []
    figures: list[dict] = []

    def recording(method):
        def wrapper(self, *args, **kwargs):
            out = method(self, *args, **kwargs)
            for line in out:
                lines.append({"label": line.get_label(), "color": to_hex(line.get_color()),
                              "linestyle": str(line.get_linestyle()), "marker": str(line.get_marker()),
                              "x": [float(x) for x in line.get_xdata()]})
            return out
        return wrapper

    save = Figure.savefig

    def saving(self, path, *args, **kwargs):
        save(self, path, *args, **kwargs)
        self.canvas.draw()  # the layout again, at the figure's own dpi (the extents below are in it)
        dpi = kwargs.get("dpi") or self.dpi
        width_px = self.get_figwidth() * dpi
        scale = min(1.0, SHOWN_WIDTH / width_px)
        renderer = self.canvas.get_renderer()
        canvas = self.bbox
        tick_labels, drawn_ticks = set(), set()  # a tick outside the axis' view is not drawn
        for ax in self.axes:
            for axis in (ax.xaxis, ax.yaxis):
                for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                    tick_labels |= {id(tick.label1), id(tick.label2)}
                if ax.get_visible():
                    drawn_ticks |= {id(tick.label1) for tick in axis._update_ticks()}
                    drawn_ticks |= {id(tick.label2) for tick in axis._update_ticks()}
        sizes, outside = [], []
        for text in self.findobj(Text):
            if not text.get_text().strip() or not text.get_visible() or text.axes is not None and (
                    not text.axes.get_visible()) or id(text) in tick_labels and id(text) not in drawn_ticks:
                continue
            sizes.append(text.get_fontsize() * dpi / 72 * scale)
            box = text.get_window_extent(renderer)
            if box.x0 < -1 or box.y0 < -1 or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1:
                outside.append((text.get_text(), [round(v) for v in box.extents]))
        figures.append({"path": Path(path).name, "width_px": width_px, "text_px": min(sizes),
                        "outside": outside})

    set_title = Axes.set_title

    def titling(self, label, *args, **kwargs):  # objective-space panels: the title carries the colour
        if "color" in kwargs:
            lines.append({"label": label.split(", ")[0], "color": to_hex(kwargs["color"]), "linestyle": "None",
                          "marker": "title", "x": []})
        return set_title(self, label, *args, **kwargs)

    monkeypatch.setattr(Axes, "set_title", titling)
    monkeypatch.setattr(Axes, "plot", recording(Axes.plot))
    monkeypatch.setattr(Axes, "step", recording(Axes.step))
    monkeypatch.setattr(Figure, "savefig", saving)
    return lines, figures


def _stat(curve):
    curve = list(curve)
    return {"mean": curve, "ci_examples": [[v - 0.01, v + 0.01] for v in curve],
            "ci_seeds": [[v - 0.02, v + 0.02] for v in curve], "per_seed": [curve]}


def demo_metrics() -> dict:
    """A metrics dict shaped like the demo's (every figure it draws has something to draw)."""
    task = LetterTask()
    rng = np.random.default_rng(0)
    weights = example_weights(4, 3, 8, seed=0)
    methods, vectors = {}, {}
    for i, (key, (label, _)) in enumerate(DEMO_ENTRIES.items()):
        pools = (rng.random((4, 6, 3)) > 0.3 + 0.05 * i).astype(float)
        methods[key] = summarize([pool_metrics(pools, task, eval_weights=weights)], label=label,
                                 m=3 if "m=3" in label else 1, objectives=task.objectives)
        vectors[key] = [pools[j].tolist() for j in range(3)]
    steps = list(range(1, 31))
    series = {"mean": [0.5] * 30, "low": [0.4] * 30, "high": [0.6] * 30}
    training = {key: {"label": label, "steps": steps, "seconds": 1.0,
                      "series": {"diversity": series, "answer scalar": series}}
                for key, (label, method) in DEMO_ENTRIES.items() if method != "warm_start"}
    return {"title": "demo-shaped", "task": {"name": "letters", "params": {}, "objectives": list(task.objectives)},
            "eval": {"examples": 4, "pool": 6, "temperature": 0.7, "top_p": 1.0, "eval_weights": 8},
            "methods": methods, "training": training,
            "objective_space": {"x": "a", "y": "b", "color": "c", "examples": ["ex 0", "ex 1", "ex 2"],
                                "vectors": vectors},
            "story_space": {"x": "a", "y": "b", "color": "c", "examples": ["ex 1"],
                            "vectors": {k: [v[1]] for k, v in vectors.items()},
                            "oracle": [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], "oracle_label": "oracle answers"},
            "references": [{"label": "oracle", "best_at_k": 0.9, "pref_best_at_k": 0.95}],
            "paper_best_at_30": {"grpo": 0.438, "max_at_k": 0.513, "multi_rlvr": 0.512, "vpo": 0.593}}


def _method_of_label(label: str) -> str | None:
    for key, (name, method) in DEMO_ENTRIES.items():
        plain = name.split(" (")[0]
        if label in (name, key, f"{key}-s0") or label.startswith(f"paper: {plain} "):
            return method
    return None


def test_one_colour_and_line_style_per_method_in_every_figure(drawn, tmp_path):
    from vpo.demo.plots import headline_plots
    from vpo.integrations.openevolve import plot_solved
    from vpo.report import write_report
    from vpo.search import plot_search_curves

    lines, figures = drawn
    metrics = demo_metrics()
    write_report(metrics, tmp_path / "demo")
    headline_plots(metrics, tmp_path / "demo")
    # vpo eval of a checkpoint whose folder name says nothing: its recorded method colours it
    one = demo_metrics()
    one["methods"] = {"run-7": dict(one["methods"]["vpo"], label="run-7 (m=3)", method="vpo")}
    one["objective_space"]["vectors"] = {"run-7": one["objective_space"]["vectors"]["vpo"]}
    del one["training"]
    write_report(one, tmp_path / "eval")
    curve = {"ks": [1, 2, 4], "best_at_k": [0.1, 0.2, 0.3], "pass_at_k": [0.0, 0.1, 0.1],
             "coverage_at_k": [0.1, 0.2, 0.2]}
    # vpo search: checkpoints named as the demo names them, one of them known only by its record
    plot_search_curves({"grpo-s0": curve, "vpo-s0": curve, "best": curve}, tmp_path / "search.png",
                       methods={"best": "max_at_k"})
    plot_solved({"problems": ["p"], "iterations": 2, "labels": {
        "grpo-s0": {"solved_by_iteration": [0, 0, 1], "mean_best_by_iteration": [0.1, 0.2, 1.0]},
        "vpo-s0": {"solved_by_iteration": [0, 1, 1], "mean_best_by_iteration": [0.2, 1.0, 1.0]}}},
        tmp_path / "solved.png")
    assert {f["path"] for f in figures} >= {"best_at_k.png", "training.png", "story_best_at_k.png",
                                            "story_diversity.png", "search.png", "solved.png"}
    styles: dict[str, set] = {}
    for line in lines:
        method = {"best": "max_at_k", "run-7 (m=3)": "vpo"}.get(line["label"]) or _method_of_label(line["label"])
        if method is None:
            continue
        styles.setdefault(method, set()).add(line["color"])
        if line["linestyle"] not in ("None", ""):  # the paper's stars are markers only
            styles.setdefault(method + " linestyle", set()).add(line["linestyle"])
    for method in ("grpo", "vpo", "multi_rlvr", "max_at_k"):
        assert len(styles[method]) == 1, (method, styles[method])
        assert len(styles[method + " linestyle"]) == 1, (method, styles[method + " linestyle"])
    colours = [next(iter(styles[m])) for m in ("grpo", "vpo", "multi_rlvr", "max_at_k")]
    assert len(set(colours)) == 4 and not set(colours) & styles["warm_start"]


def test_paper_stars_do_not_overlap(drawn, tmp_path):
    from vpo.demo.plots import headline_plots

    lines, _ = drawn
    metrics = demo_metrics()
    metrics["paper_best_at_30"] = {"grpo": 0.5, "max_at_k": 0.5, "multi_rlvr": 0.5, "vpo": 0.5}
    headline_plots(metrics, tmp_path)
    xs = [line["x"][0] for line in lines if line["marker"] == "*"]
    assert len(xs) == 4 and len(set(xs)) == 4 and min(xs) >= 6  # side by side, from k = pool on


def test_every_figure_reads_at_the_width_it_is_shown(drawn, tmp_path):
    from vpo.demo.plots import headline_plots
    from vpo.report import write_report

    _, figures = drawn
    metrics = demo_metrics()
    write_report(metrics, tmp_path / "demo")
    headline_plots(metrics, tmp_path / "demo")
    one = demo_metrics()  # vpo eval: one checkpoint
    one["methods"] = {"vpo-s0": one["methods"]["vpo"]}
    one["objective_space"]["vectors"] = {"vpo-s0": one["objective_space"]["vectors"]["vpo"]}
    del one["training"]
    one["objective_diagnostics"] = {"objectives": ["a", "b", "c"], "effective_dim": 2.5, "answers": 24,
                                    "correlation": [[1.0, 0.2, -0.1], [0.2, 1.0, float("nan")],
                                                    [-0.1, float("nan"), 1.0]]}
    write_report(one, tmp_path / "eval")
    assert len(figures) == 9
    for figure in figures:
        assert figure["text_px"] >= MIN_TEXT_PX, figure
        assert not figure["outside"], figure


@pytest.fixture
def saved_axes(monkeypatch):
    """For every figure saved: its axes' k tick labels as drawn, and whether its legend overlaps an axes."""
    from matplotlib.figure import Figure

    seen: list[dict] = []
    save = Figure.savefig

    def saving(self, path, *args, **kwargs):
        save(self, path, *args, **kwargs)
        self.canvas.draw()
        renderer = self.canvas.get_renderer()
        legends = list(self.legends) + [ax.get_legend() for ax in self.axes if ax.get_legend() is not None]
        boxes = [ax.get_window_extent(renderer) for ax in self.axes if ax.get_visible()]
        seen.append({"path": Path(path).name,
                     "ticks": [[t.get_text() for t in ax.get_xticklabels() if t.get_text()] for ax in self.axes],
                     "legend_over_axes": any(leg.get_window_extent(renderer).overlaps(box)
                                             for leg in legends for box in boxes)})

    monkeypatch.setattr(Figure, "savefig", saving)
    return seen


def test_k_axes_read_plain_numbers_and_the_best_at_k_legend_covers_no_line(saved_axes, tmp_path):
    """In the shipped best_at_k.png the legend sat inside the left panel, over the oracle line, and
    the log k axis read 10^0, 10^1 (2^0 .. 2^5 in the search curves)."""
    from vpo.demo.plots import headline_plots
    from vpo.report import write_report
    from vpo.search import plot_search_curves

    metrics = demo_metrics()
    write_report(metrics, tmp_path / "demo")
    headline_plots(metrics, tmp_path / "demo")
    ks = [1, 2, 4, 8, 16, 32]
    curve = {"ks": ks, "best_at_k": [0.1 * i for i in range(6)], "pass_at_k": [0.0] * 6, "coverage_at_k": [0.1] * 6}
    plot_search_curves({"grpo-s0": curve}, tmp_path / "search.png")
    by_name = {figure["path"]: figure for figure in saved_axes}
    assert not by_name["best_at_k.png"]["legend_over_axes"]
    for name in ("best_at_k.png", "story_best_at_k.png", "search.png"):
        for ticks in by_name[name]["ticks"]:
            assert ticks and all(t.isdigit() for t in ticks), (name, ticks)
    assert by_name["search.png"]["ticks"][0] == ["1", "2", "3", "5", "10", "20", "30"]


def test_colours_follow_the_recorded_method_then_the_folder_never_a_typed_label(drawn, tmp_path):
    """`vpo search --labels warm,VPO`: the warm start was brown (the label "warm" names no method);
    its folder, checkpoints/warmup, says what it is. A recorded method wins over both."""
    from vpo.report import WARM_START_STYLES, METHOD_STYLES, line_styles
    from vpo.search import plot_search_curves

    styles = line_styles({"warm": {"label": "warm", "method": None, "folder": "warmup"},
                          "VPO": {"label": "VPO", "method": None, "folder": "vpo-s0"},
                          "mine": {"label": "mine", "method": "grpo", "folder": "vpo-s1"}})
    assert styles["warm"]["color"] == WARM_START_STYLES[0]["color"]
    assert styles["VPO"]["color"] == METHOD_STYLES["vpo"]["color"]
    assert styles["mine"]["color"] == METHOD_STYLES["grpo"]["color"]  # the record beats the folder
    lines, _ = drawn
    curve = {"ks": [1, 2, 3], "best_at_k": [0.1, 0.2, 0.3], "pass_at_k": [0.0] * 3, "coverage_at_k": [0.1] * 3}
    plot_search_curves({"warm": curve, "VPO": curve}, tmp_path / "s.png", methods={"warm": None, "VPO": "vpo"},
                       folders={"warm": "warmup", "VPO": "vpo-s0"})
    from matplotlib.colors import to_hex

    assert {line["color"] for line in lines if line["label"] == "warm"} == {to_hex(WARM_START_STYLES[0]["color"])}


def test_the_zero_answers_mark_sits_apart_from_every_answer(monkeypatch, tmp_path):
    """The red x of the all-zero answers was drawn at (0, 0), on top of answers that score 0 on the
    two plotted objectives but not on the third (a yellow marker), and read as theirs."""
    from matplotlib.axes import Axes

    from vpo.report import ZERO_SPOT, _plot_objective_space

    calls: list[tuple[str, list]] = []
    scatter = Axes.scatter

    def recording(self, x, y, *args, **kwargs):
        calls.append((str(kwargs.get("marker", "o")), list(zip(np.ravel(x), np.ravel(y)))))
        return scatter(self, x, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "scatter", recording)
    # one pool: two all-zero answers, and one that scores 0 on a and b but 1 on c (it sits at (0, 0))
    space = {"x": "a", "y": "b", "color": "c", "examples": ["ex"],
             "vectors": {"vpo": [[[0, 0, 0], [0, 0, 0], [0, 0, 1], [1, 0.5, 0]]]}}
    _plot_objective_space(space, ["a", "b", "c"], {"vpo": {"label": "VPO (m=3)", "method": "vpo"}},
                          tmp_path / "space.png")
    zero = [points for marker, points in calls if marker == "x"]
    answers = [point for marker, points in calls if marker != "x" for point in points]
    assert zero == [[(ZERO_SPOT, ZERO_SPOT)]] and (0.0, 0.0) in answers
    assert all(min(x, y) >= 0 for x, y in answers)  # no answer anywhere near the zero spot

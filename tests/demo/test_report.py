"""Tests of vpo.report: files written from a synthetic metrics dict, numbers rendered, plots drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest

from test_evaluation import LetterTask
from vpo.evaluation import example_weights, paired, pool_metrics, summarize
from vpo.report import build_document, write_report


def _metrics(seeds: int = 3) -> dict:
    task = LetterTask()
    rng = np.random.default_rng(1)
    w = example_weights(5, 3, 8, seed=0)
    runs = {key: [pool_metrics((rng.random((5, 6, 3)) > p).astype(float), task, eval_weights=w)
                  for _ in range(seeds)] for key, p in (("grpo", 0.6), ("vpo", 0.4))}
    methods = {key: summarize(v, label=key.upper(), m=1 if key == "grpo" else 3, objectives=task.objectives)
               for key, v in runs.items()}
    methods["vpo"]["tokens_per_chain"] = 12.5
    vectors = {key: [(rng.random((6, 3)) > 0.5).astype(float).tolist() for _ in range(2)] for key in methods}
    return {
        "title": "Synthetic report",
        "task": {"name": "letters", "params": {}, "objectives": list(task.objectives)},
        "eval": {"examples": 5, "pool": 6, "temperature": 0.7, "top_p": 1.0, "eval_weights": 8, "ks_shown": [1, 6]},
        "methods": methods,
        "paired": [{"a": "vpo", "b": "grpo", "metric": "pref_best_at_k", "k": 6,
                    **paired(runs["vpo"], runs["grpo"], "pref_best_at_k", k=6)}],
        "paper": {"caption": "paper", "columns": ["method", "best@30"], "rows": [["VPO", "0.593"]]},
        "training": {"vpo": {"label": "VPO", "steps": [1, 2, 3],
                             "series": {"diversity": {"mean": [0.1, 0.2, 0.3], "low": [0.0, 0.1, 0.2],
                                                      "high": [0.2, 0.3, 0.4]}}, "seconds": 12.0}},
        "objective_space": {"x": "a", "y": "b", "color": "c", "examples": ["ex 0", "ex 1"], "vectors": vectors},
        "findings": ["VPO above GRPO"],
        "timings": {"eval": 1.5},
        "notes": ["synthetic"],
        "config": {"seed": 0},
    }


def test_write_report_files_and_numbers(tmp_path):
    pytest.importorskip("matplotlib")
    metrics = _metrics()
    paths = write_report(metrics, tmp_path)
    for key in ("md", "html", "json"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0
    names = sorted(p.name for p in paths["plots"])
    assert names == ["best_at_k.png", "objective_space.png", "training.png"]
    for p in paths["plots"]:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["md"].read_text()
    best6 = metrics["methods"]["vpo"]["best_at_k"]["mean"][5]
    assert f"{best6:.3f}" in md
    assert "pref best@6" in md and "VPO above GRPO" in md and "plots/best_at_k.png" in md
    assert "<table>" in paths["html"].read_text()
    loaded = json.loads(paths["json"].read_text())
    assert loaded["methods"]["grpo"]["m"] == 1


def test_single_seed_cis_render_as_missing(tmp_path):
    metrics = _metrics(seeds=1)
    doc = build_document(metrics, [])
    md = doc.markdown()
    table = md.split("| method | m | seeds |")[1].split("\n\n")[0]
    assert " (±" not in table  # no CI over seeds with one seed
    assert " ±" in table  # the CI over examples is there


def test_write_report_needs_methods(tmp_path):
    with pytest.raises(ValueError):
        write_report({"title": "x"}, tmp_path)


def test_smooth_and_window():
    from vpo.report import smooth, training_window

    assert smooth([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert smooth([5.0, 7.0], 1) == [5.0, 7.0]
    assert training_window(8) == 1 and training_window(60) == 6


def test_configuration_renders_as_code(tmp_path):
    # a fenced block in Markdown, <pre> in HTML (it was one ```...``` paragraph)
    metrics = _metrics()
    metrics["config"] = {"seed": 0, "out": "runs/<demo>", "rl_lr": 0.0003}
    paths = write_report(metrics, tmp_path, plots=False)
    md = paths["md"].read_text()
    block = md.split("## Configuration\n\n")[1]
    assert block.startswith("```json\n{\n") and "\n```\n" in block
    assert json.loads(block.split("```json\n")[1].split("\n```")[0]) == metrics["config"]
    page = paths["html"].read_text()
    pre = page.split("<h2>Configuration</h2>")[1]
    assert pre.lstrip().startswith("<pre><code>{") and "&lt;demo&gt;" in pre and "```" not in page


def test_training_plot_fits_the_html_page_with_a_legend(tmp_path):
    # four panels in one row were 2420 px wide, shrunk to unreadable type in the
    # ~1100 px HTML column; now two per row, with one legend for every panel
    pytest.importorskip("matplotlib")
    import struct

    from vpo.report import training_figure

    metrics = _metrics()
    steps = list(range(1, 41))
    series = {"mean": [0.5] * 40, "low": [0.4] * 40, "high": [0.6] * 40}
    metrics["training"] = {key: {"label": label, "steps": steps, "seconds": 1.0,
                                 "series": {name: series for name in ("diversity", "answer scalar",
                                                                      "completion rate", "truncated rollouts")}}
                           for key, label in (("grpo", "GRPO"), ("vpo", "VPO"))}
    write_report(metrics, tmp_path)
    width, height = struct.unpack(">II", (tmp_path / "plots" / "training.png").read_bytes()[16:24])
    assert width <= 1200 and height >= 0.5 * width  # a 2 x 2 grid shown near full size
    fig = training_figure(metrics["training"])
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["GRPO", "VPO"]
    assert sum(ax.get_visible() for ax in fig.axes) == 4
    page = (tmp_path / "report.html").read_text()
    assert "<a href='plots/training.png'><img src='plots/training.png'" in page

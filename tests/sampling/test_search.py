"""vpo.search: best-of-n selection rules, k-curves against brute force, plots, several checkpoints."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from vpo.search import (
    best_of_n,
    plot_search_curves,
    pool_curves,
    run_search_eval,
    search_curves,
    select_best,
    selection_scores,
)
from vpo.tasks import get_task


@pytest.fixture(scope="module")
def maze():
    return get_task("maze", size=5)


POOL = np.array([[0.0, 0.0, 0.0, 0.0],
                 [1.0, 1.0, 0.0, 1.0],
                 [1.0, 0.0, 1.0, 1.0],
                 [1.0, 1.0, 1.0, 1.0],
                 [1.0, 0.5, 0.5, 0.0]])


# ----- selection ------------------------------------------------------------------------------

def test_scalar_selection_uses_the_task_scalar(maze):
    index, scores = select_best(POOL, "scalar", task=maze)
    np.testing.assert_allclose(scores, POOL.mean(axis=1))
    assert index == 3


def test_weight_selection_picks_the_preferred_trade_off():
    gold = np.array([0.0, 1.0, 0.0, 0.0])
    diamond = np.array([0.0, 0.0, 1.0, 0.0])
    pool = POOL[:3]                                   # answer 1 has gold, answer 2 has diamond
    assert select_best(pool, gold)[0] == 1
    assert select_best(pool, diamond)[0] == 2
    np.testing.assert_allclose(selection_scores(pool, [0.25] * 4), pool.mean(axis=1))


def test_callable_selection_sees_vector_and_answer_and_ties_go_first():
    answers = ["a", "bbb", "cc", "bbb", "d"]
    index, scores = select_best(POOL, lambda vector, answer: len(answer), answers=answers)
    assert index == 1 and scores.tolist() == [1, 3, 2, 3, 1]
    assert select_best(POOL, lambda vector, answer: vector[0])[0] == 1    # first of four ties


@pytest.mark.parametrize("select, message", [
    ("mean", "select must be"),
    ([1.0, 0.0], "shape"),
    ([np.nan, 0, 0, 0], "finite"),
    (lambda v, a: float("nan"), "non-finite"),
    (lambda v, a: "high", "expected a number"),
])
def test_bad_selectors_raise(maze, select, message):
    with pytest.raises(ValueError, match=message):
        selection_scores(POOL, select, task=maze)


def test_scalar_needs_task_and_pool_must_be_2d():
    with pytest.raises(ValueError, match="needs the task"):
        selection_scores(POOL)
    with pytest.raises(ValueError, match=r"\(P, D\)"):
        selection_scores(np.zeros((0, 4)), [0.25] * 4)
    with pytest.raises(ValueError, match="answers has"):
        selection_scores(POOL, lambda v, a: 0.0, answers=["x"])


# ----- curves ---------------------------------------------------------------------------------

def _brute(vectors: np.ndarray, k: int) -> tuple[float, float, float]:
    """best@k, pass@k, coverage@k by enumerating every k-subset."""
    best, solved, covered = [], [], []
    for subset in itertools.combinations(range(len(vectors)), k):
        sub = vectors[list(subset)]
        best.append(sub.mean(axis=1).max())
        solved.append(float(np.any(np.all(sub >= 1.0, axis=1))))
        covered.append(np.mean(np.any(sub >= 1.0, axis=0)))
    return float(np.mean(best)), float(np.mean(solved)), float(np.mean(covered))


def test_pool_curves_match_brute_force(maze):
    rng = np.random.default_rng(3)
    pool = rng.choice([0.0, 0.5, 1.0], size=(7, 4), p=[0.3, 0.2, 0.5])
    curves = pool_curves(pool, maze)
    for k in range(1, 8):
        best, passed, covered = _brute(pool, k)
        assert curves["best_at_k"][k - 1] == pytest.approx(best)
        assert curves["pass_at_k"][k - 1] == pytest.approx(passed)
        assert curves["coverage_at_k"][k - 1] == pytest.approx(covered)


def test_search_curves_average_examples_of_different_widths():
    code = get_task("code")
    pools = [np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1]], float), np.array([[0, 1], [1, 0], [0, 0]], float)]
    out = search_curves(pools, code, ks=[1, 3])
    assert out["ks"] == [1, 3] and out["num_examples"] == 2 and out["pool"] == 3
    # example 1: mean scalar 5/9, pass 1/3 -> 1 at k = 3; example 2: mean 1/3, never solved
    assert out["best_at_k"] == pytest.approx([(5 / 9 + 1 / 3) / 2, (1.0 + 0.5) / 2])
    assert out["pass_at_k"] == pytest.approx([(1 / 3) / 2, 0.5])
    assert out["coverage_at_k"][1] == pytest.approx(1.0)        # every test passed by someone
    json.dumps(out)                                              # JSON-ready
    with pytest.raises(ValueError, match="same number of answers"):
        search_curves([pools[0], pools[1][:2]], code)
    with pytest.raises(ValueError, match="ks must lie"):
        pool_curves(pools[0], code, ks=[4])


def test_plot_search_curves_writes_a_png(tmp_path, maze):
    rng = np.random.default_rng(0)
    curves = {label: search_curves([rng.random((6, 4)) for _ in range(3)], maze) for label in ("GRPO", "VPO")}
    path = plot_search_curves(curves, tmp_path / "sub" / "curves.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="unknown curve"):
        plot_search_curves(curves, tmp_path / "x.png", names=["best"])


# ----- with a real (tiny, random) causal LM ---------------------------------------------------

@pytest.fixture(scope="module")
def tiny_models():
    import torch

    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # tiny matrices: extra threads only spin on a shared 2-core machine
    tokenizer = build_char_tokenizer("UDLR <>_/rouet123\n")
    yield [(build_tiny_qwen2(tokenizer, seed=s), tokenizer) for s in (0, 1)]
    torch.set_num_threads(threads)


def test_best_of_n_returns_the_scored_pool_and_the_pick(maze, tiny_models):
    model, tokenizer = tiny_models[0]
    example = maze.examples("test", 1, seed=0)[0]
    longest = lambda vector, answer: len(answer)                             # noqa: E731
    result = best_of_n(model, tokenizer, maze, example, n=6, m=3, select=longest, max_new_tokens=24, seed=1)
    assert len(result.chains) == 2 and len(result.answers) == 6 and result.vectors.shape == (6, 4)
    assert result.best == max(result.answers, key=len)
    lengths = [len(a) for a in result.answers]
    assert result.best_index == lengths.index(max(lengths))
    for answer, vector in zip(result.answers, result.vectors, strict=True):   # every answer scored on its own
        expected = maze.score(answer, example) if answer.strip() else np.zeros(4)
        np.testing.assert_allclose(vector, expected)
    again = best_of_n(model, tokenizer, maze, example, n=6, m=3, max_new_tokens=24, seed=1)
    assert again.chains == result.chains                                      # seeded sampling
    assert again.best_index == int(np.argmax(maze.scalar(again.vectors)))
    with pytest.raises(ValueError, match="multiple of m"):
        best_of_n(model, tokenizer, maze, example, n=5, m=3)


def test_run_search_eval_compares_checkpoints(tmp_path, maze, tiny_models):
    examples = maze.examples("test", 2, seed=0)
    report = run_search_eval([("a", tiny_models[0]), ("b", tiny_models[1])], maze, examples, tmp_path,
                             n=4, m=2, max_new_tokens=16, progress=False)
    saved = json.loads((tmp_path / "search.json").read_text())
    assert saved["checkpoints"].keys() == {"a", "b"} and report["plot"] == "search_curves.png"
    assert (tmp_path / "search_curves.png").stat().st_size > 1000
    for entry in saved["checkpoints"].values():
        assert entry["curves"]["ks"] == [1, 2, 3, 4] and len(entry["picks"]) == 2
        assert all(0.0 <= x <= 1.0 for x in entry["curves"]["best_at_k"])
        assert entry["curves"]["best_at_k"] == sorted(entry["curves"]["best_at_k"])   # non-decreasing in k
    with pytest.raises(ValueError, match="distinct"):
        run_search_eval([("a", tiny_models[0]), ("a", tiny_models[1])], maze, examples, tmp_path)


# ----- command line ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_checkpoints(tmp_path_factory, tiny_models):
    paths = []
    for i, (model, tokenizer) in enumerate(tiny_models):
        path = tmp_path_factory.mktemp(f"ckpt{i}")
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths.append(str(path))
    return paths


def test_cli_best_of_n_plots_two_checkpoints(tmp_path, saved_checkpoints, capsys):
    from vpo.cli import main

    rc = main(["search", "best-of-n", "--task", "maze", "--task-params", "size=5", "--model",
               ",".join(saved_checkpoints), "--labels", "GRPO,VPO", "--examples", "2", "--n", "4", "--m", "2",
               "--select", "0.7,0.1,0.1,0.1", "--max-new-tokens", "16", "--out", str(tmp_path)])
    assert rc == 0
    saved = json.loads((tmp_path / "search.json").read_text())
    assert list(saved["checkpoints"]) == ["GRPO", "VPO"] and saved["select"] == [0.7, 0.1, 0.1, 0.1]
    assert "GRPO: best@1" in capsys.readouterr().out
    assert main(["search", "best-of-n", "--model", saved_checkpoints[0], "--select", "best",
                 "--out", str(tmp_path)]) == 2                                   # clear error, no traceback
    assert main(["search", "best-of-n", "--model", "a,b", "--labels", "x", "--out", str(tmp_path)]) == 2


def test_eval_search_bridge_runs_best_of_n(tmp_path, saved_checkpoints):
    from vpo.commands.eval import EvalConfig
    from vpo.commands.search import search_from_eval_config

    cfg = EvalConfig(task="maze", task_params="size=5", model=",".join(saved_checkpoints), label="a,b",
                     answers=2, pool=4, examples=1, max_new_tokens=16, out=str(tmp_path))
    report = search_from_eval_config("best-of-n", cfg)
    assert set(report["checkpoints"]) == {"a", "b"} and (tmp_path / "search_curves.png").exists()
    with pytest.raises(ValueError, match="best-of-n or openevolve"):
        search_from_eval_config("beam", cfg)
    with pytest.raises(ValueError, match="--task code"):
        search_from_eval_config("openevolve", cfg)


def test_vpo_eval_search_flag_plots_checkpoints_side_by_side(tmp_path, saved_checkpoints):
    from vpo.cli import main

    rc = main(["eval", "--search", "best-of-n", "--task", "maze", "--task-params", "size=5",
               "--model", ",".join(saved_checkpoints), "--label", "a,b", "--answers", "2", "--pool", "4",
               "--examples", "1", "--max-new-tokens", "16", "--out", str(tmp_path)])
    assert rc == 0
    saved = json.loads((tmp_path / "search.json").read_text())
    assert set(saved["checkpoints"]) == {"a", "b"} and (tmp_path / "search_curves.png").exists()


# ----- checkpoints that record their task ---------------------------------------
def _compact_checkpoint(folder, size=5):
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.models import build_char_tokenizer, build_tiny_llama

    fmt = CompactMazeFormat(max_answers=3)
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    build_tiny_llama(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    fmt.save(folder, task="maze", task_params={"size": size, "reward_mode": "linear"})
    return folder


def test_search_uses_the_task_params_a_checkpoint_records(tmp_path, capsys):
    from vpo.cli import main

    ckpt = _compact_checkpoint(tmp_path / "vpo-s0")
    out = tmp_path / "search"
    argv = ["search", "best-of-n", "--task", "maze", "--model", f"{ckpt},{ckpt}", "--labels", "GRPO,VPO",
            "--answers", "1,3", "--pool", "3", "--examples", "2", "--max-new-tokens", "8", "--out", str(out)]
    assert main(argv) == 0
    report = json.loads((out / "search.json").read_text())
    assert all(e.startswith("maze5-") for e in report["examples"])          # 5x5, as recorded, not 9x9
    assert report["m"] == {"GRPO": 1, "VPO": 3}
    assert [report["checkpoints"][k]["m"] for k in ("GRPO", "VPO")] == [1, 3]
    capsys.readouterr()
    assert main(argv + ["--task-params", "size=9"]) == 2
    err = capsys.readouterr().err
    assert "size=9" in err and "size=5" in err and "vpo_format.json" in err
    assert main(argv[:-2] + ["--answers", "1,2,3", "--out", str(out)]) == 2
    assert "one per --model" in capsys.readouterr().err
    other = _compact_checkpoint(tmp_path / "seven", size=7)
    assert main(["search", "best-of-n", "--task", "maze", "--model", f"{ckpt},{other}", "--pool", "2",
                 "--out", str(out)]) == 2
    assert "record different task parameters" in capsys.readouterr().err


def test_search_reports_curves_and_the_gap_by_level(tmp_path):
    # per-level curves per checkpoint, and the last checkpoint against the first
    from vpo.search import run_search_eval
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    examples = [dict(e, difficulty=("easy" if i % 2 else "hard")) for i, e in enumerate(task.examples("test", 4))]
    ckpt = _compact_checkpoint(tmp_path / "c")
    report = run_search_eval([("GRPO", str(ckpt)), ("VPO", str(ckpt))], task, examples, tmp_path / "out", n=3,
                             m=[1, 3], max_new_tokens=6, progress=False)
    levels = report["checkpoints"]["VPO"]["by_level"]
    assert list(levels) == ["easy", "hard", "all"] and levels["easy"]["num_examples"] == 2
    assert len(levels["all"]["best_at_k"]["mean"]) == 3 and levels["all"]["coverage_at_k"] is not None
    gap = report["gap_by_level"]
    assert (gap["a"], gap["b"]) == ("VPO", "GRPO") and set(gap["levels"]) == {"easy", "hard", "all"}
    assert (tmp_path / "out" / "gap_by_level.png").read_bytes()[:4] == b"\x89PNG"
    json.loads((tmp_path / "out" / "search.json").read_text())  # strict JSON (NaN bounds become null)


def test_eval_reports_by_level(tmp_path):
    from vpo.cli import main
    from vpo.tasks import get_task

    examples = [dict(e, difficulty=str(1 + i % 2)) for i, e in enumerate(get_task("maze", size=5).examples("test", 4))]
    source = tmp_path / "mazes.jsonl"
    source.write_text("\n".join(json.dumps(e) for e in examples))
    ckpt = _compact_checkpoint(tmp_path / "c")
    out = tmp_path / "eval"
    assert main(["eval", "--task", "maze", "--model", str(ckpt), "--source", str(source), "--examples", "4",
                 "--pool", "3", "--answers", "3", "--max-new-tokens", "6", "--no-progress", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    (levels,) = metrics["by_level"].values()
    assert list(levels) == ["1", "2", "all"] and levels["all"]["num_examples"] == 4
    assert "## By difficulty" in (out / "report.md").read_text()


# ----- batched sampling, threads and intervals -----------------------------------

def _counting(model):
    calls = []
    generate = model.generate

    def counted(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)

    model.generate = counted
    return calls


def test_search_samples_all_examples_in_shared_calls_and_any_batch_size_gives_the_same_pools(tmp_path, maze,
                                                                                            tiny_models):
    from vpo.sampling import SamplingOptions

    examples = maze.examples("test", 3, seed=0)
    model, tokenizer = tiny_models[0]
    calls = _counting(model)
    try:
        reports = {}
        for batch in (4, 1, 0):
            calls.clear()
            reports[batch] = run_search_eval([("a", (model, tokenizer))], maze, examples, tmp_path / str(batch), n=4,
                                             m=2, max_new_tokens=12, progress=False,
                                             options=SamplingOptions(device="cpu", batch_size=batch, seeding="chain"))
            assert calls == {4: [4, 2], 1: [1] * 6, 0: [6]}[batch]     # 3 examples x 2 chains, across examples
    finally:
        del model.generate
    curves = [r["checkpoints"]["a"]["curves"] for r in reports.values()]
    picks = [r["checkpoints"]["a"]["picks"] for r in reports.values()]
    assert curves[0] == curves[1] == curves[2] and picks[0] == picks[1] == picks[2]


def test_best_of_n_draws_the_chains_vpo_eval_draws(maze, tiny_models):
    from vpo.evaluation import TaskFormat, sample_pools

    model, tokenizer = tiny_models[1]
    example = maze.examples("test", 1, seed=3)[0]
    result = best_of_n(model, tokenizer, maze, example, n=6, m=3, max_new_tokens=20, seed=4)
    pools = sample_pools(model, tokenizer, maze, [example], m=3, pool=6, max_new_tokens=20, seed=4, progress=False,
                         fmt=TaskFormat(maze, chat=False, tokenizer=tokenizer))
    assert result.chains == pools.texts[0]                  # chain c of example 0 is seeded (4, 0, c) in both
    np.testing.assert_array_equal(result.vectors, pools.vectors[0])


def test_search_curves_carry_95_percent_intervals_over_examples(maze):
    from vpo import metrics as M

    pools = [POOL, POOL[::-1], np.zeros_like(POOL)]
    curves = search_curves(pools, maze)
    for name in ("best_at_k", "pass_at_k", "coverage_at_k"):
        per_example = np.asarray(curves["per_example"][name])
        for j in range(per_example.shape[1]):
            _, low, high = M.mean_ci(per_example[:, j])
            assert curves["ci"][name]["low"][j] == pytest.approx(low)
            assert curves["ci"][name]["high"][j] == pytest.approx(high)
    single = search_curves([POOL], maze)
    assert set(single["ci"]["best_at_k"]["low"]) == {None}                  # one example: no interval


def test_cli_best_of_n_prints_intervals_and_takes_threads(tmp_path, saved_checkpoints, capsys):
    import torch

    from vpo.cli import main
    from vpo.commands.search import curve_line

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["search", "best-of-n", "--task", "maze", "--task-params", "size=5", "--model",
                     saved_checkpoints[0], "--labels", "A", "--examples", "3", "--pool", "4", "--answers", "2",
                     "--max-new-tokens", "12", "--threads", "1", "--out", str(tmp_path)]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    curves = json.loads((tmp_path / "search.json").read_text())["checkpoints"]["A"]["curves"]
    line = curve_line("A", curves)
    assert line in out and line.count("±") == 4
    half = (curves["ci"]["best_at_k"]["high"][0] - curves["ci"]["best_at_k"]["low"][0]) / 2
    assert f"best@1 {curves['best_at_k'][0]:.3f} ±{half:.3f}" in line
    assert main(["search", "best-of-n", "--model", saved_checkpoints[0], "--threads", "-1",
                 "--out", str(tmp_path)]) == 2


def test_eval_bridge_to_openevolve_refuses_sampling_options_it_does_not_use(tmp_path):
    from vpo.commands.eval import EvalConfig
    from vpo.commands.search import search_from_eval_config

    for options, message in (({"batch_size": 8}, "--batch-size 8: --search openevolve does not use it"),
                             ({"seeding": "batch"}, "--seeding batch: --search openevolve does not use it"),
                             ({"backend": "vllm"}, "--backend vllm: --search openevolve samples with transformers")):
        cfg = EvalConfig(task="code", model=str(tmp_path), out=str(tmp_path / "o"), **options)
        with pytest.raises(ValueError, match=message):
            search_from_eval_config("openevolve", cfg)

"""Tests of the maze demo: compact format, config, warm-up data, resume checks, and the
``vpo demo --quick`` smoke run (finite numbers, plots, resume, ``vpo eval`` on its checkpoint)."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest

from vpo.demo.config import QUICK, DemoConfig
from vpo.tasks.maze.format import CompactMazeFormat
from vpo.tasks import get_task


@pytest.fixture(scope="module")
def task():
    return get_task("maze", size=5)


def test_compact_format_scores_oracle_routes(task):
    from vpo.tasks.maze import oracle_routes, simulate

    fmt = CompactMazeFormat()
    for example in task.examples("train", 20, seed=3):
        prompt = fmt.prompt(example, 3)
        assert len(prompt) == 35 and prompt.startswith(f"3 {example['budget']:02d} ")
        assert not set(prompt) & set("UDLR")  # tiles never share a token with moves
        routes = list(oracle_routes(example).values())
        expected = np.array([simulate(example, r).vector for r in routes])
        single = task.score_chain(fmt.completion(routes[1:2]), example, 1)
        np.testing.assert_allclose(single[0], expected[1])
        chain = fmt.completion(routes)
        assert [fmt.answers(chain, example, 3)[i] == "".join(mv[0] for mv in r) for i, r in enumerate(routes)]
        rows = task.score_chain(chain, example, 3)
        # the task dedups identical executed routes; every distinct oracle vector is among the rows
        for vec in expected:
            assert any(np.allclose(vec, row) for row in rows)


def test_oracle_reference_is_the_three_route_pool(task):
    from vpo.demo.results import oracle_reference
    from vpo.tasks.maze import oracle_routes, simulate

    examples = task.examples("test", 4)
    completion_only = np.tile([1.0, 0.0, 0.0, 0.0], (4, 1, 1))  # every oracle route reaches E
    ref = oracle_reference(task, examples, completion_only)
    assert ref["pref_best_at_k"] == pytest.approx(1.0)
    gold_only = np.tile([0.0, 1.0, 0.0, 0.0], (4, 1, 1))
    expected_gold = np.mean([max(simulate(e, r).vector[1] for r in oracle_routes(e).values()) for e in examples])
    assert oracle_reference(task, examples, gold_only)["pref_best_at_k"] == pytest.approx(expected_gold)
    expected_fixed = np.mean([max(simulate(e, r).vector.mean() for r in oracle_routes(e).values()) for e in examples])
    assert ref["best_at_k"] == pytest.approx(expected_fixed)


def test_distinct_answers_counts_routes_across_chains(task):
    from vpo.demo.results import distinct_answers
    from vpo.evaluation import Pools

    examples = task.examples("test", 2)
    fmt = CompactMazeFormat()
    texts = [["<route_1>RR<route_2>DD<route_3>RR", "<route_1>DD<route_2>UL<route_3>"],  # RR DD UL (empty: none)
             ["<route_1>R<route_2>R<route_3>R", "<route_1>R<route_2>R<route_3>R"]]     # R
    pools = Pools(vectors=np.zeros((2, 6, 4)), m=3, texts=texts)
    assert distinct_answers(pools, fmt, examples) == pytest.approx((3 + 1) / 2)


def test_above_range_reads_the_crossing():
    from vpo.demo.results import _above_range

    def entry(curve):
        return {"pref_best_at_k": {"mean": curve}}

    assert "k = 1..2 and below from k = 3" in _above_range(entry([0.5, 0.6, 0.6]), entry([0.4, 0.5, 0.7]))
    assert "below the warm start's at every k" in _above_range(entry([0.1, 0.2]), entry([0.2, 0.3]))
    assert "for k = 1..2" in _above_range(entry([0.3, 0.4]), entry([0.2, 0.3]))
    assert "at 1 of 3 k" in _above_range(entry([0.1, 0.6, 0.6]), entry([0.2, 0.5, 0.7]))


def test_compact_format_tokenizer_roundtrip(task):
    pytest.importorskip("transformers")
    from vpo.models import build_char_tokenizer

    fmt = CompactMazeFormat()
    tok = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    example = task.examples("test", 1)[0]
    text = fmt.prompt(example, 3) + "<route_1>RRD<route_2>DDR<route_3>UL"
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids
    assert len(ids) == 35 + 3 + 8
    assert tok.decode(ids) == text


def test_compact_format_spec_roundtrip(tmp_path, task):
    from vpo.evaluation import load_format

    fmt = CompactMazeFormat(max_answers=4)
    fmt.save(tmp_path, task="maze")
    back = load_format(tmp_path, task)
    assert isinstance(back, CompactMazeFormat) and back.max_answers == 4
    with pytest.raises(ValueError):
        fmt.prompt(task.examples("test", 1)[0], 5)


def test_quick_overrides_only_defaults():
    cfg = DemoConfig(quick=True, rl_steps=5).resolved()
    assert cfg.rl_steps == 5  # explicit value wins
    assert cfg.seeds == QUICK["seeds"] and cfg.hidden == QUICK["hidden"]
    assert DemoConfig().resolved().seeds == 3
    assert DemoConfig(methods="all").method_list() == ["grpo", "vpo", "multi_rlvr", "max_at_k"]
    with pytest.raises(ValueError):
        DemoConfig(methods="grpo,ppo").resolved()
    with pytest.raises(ValueError):
        DemoConfig(pool=31).resolved()


def test_truncated_rollouts_score_zero():
    from vpo.demo.rl import truncated_rollouts, zero_truncated

    cut = truncated_rollouts([[5, 6, 1], [5, 6, 7], [], [5, 0]], {1, 0})  # eos 1, pad 0
    assert cut == [False, True, True, False]
    mats = [np.ones((3, 4)) for _ in cut]
    out = zero_truncated(mats, cut)
    assert [float(m.sum()) for m in out] == [12.0, 0.0, 0.0, 12.0]
    assert DemoConfig().rl_truncated == "zero"
    assert "workers" not in DemoConfig().fingerprint()  # parallelism does not change results


def test_warmup_records_mixture(task):
    from vpo.demo.warmup import warmup_records

    fmt = CompactMazeFormat()
    records = warmup_records(task, fmt, 400, m=3, single_fraction=0.75, seed=0)
    single = [r for r in records if r["prompt"].startswith("1 ")]
    multi = [r for r in records if r["prompt"].startswith("3 ")]
    assert len(single) + len(multi) == 400
    assert 0.65 < len(single) / 400 < 0.85
    assert all("<route_" not in r["completion"] for r in single)
    assert all(r["completion"].count("<route_") == 3 for r in multi)
    assert warmup_records(task, fmt, 50, m=3, single_fraction=0.75, seed=0) == records[:50]


def test_random_walk_warmup_reaches_the_exit_blind_to_items(task):
    """The default warm-up data: every route reaches E within the budget and never walks into a
    wall, but it was not chosen for items (a pool of walks collects less than the oracle routes)."""
    import random

    from vpo.demo.warmup import warmup_records
    from vpo.tasks.maze import checked_grid, oracle_routes, random_exit_walk, simulate

    rng = random.Random(0)
    walk_items, oracle_items = [], []
    for example in task.examples("test", 40):
        grid = checked_grid(example)
        for _ in range(5):
            moves = random_exit_walk(example, rng)
            traj = simulate(example, moves)
            assert traj.reached_exit and len(moves) <= int(example["budget"])
            assert len(set(traj.cells)) > 1 and all(  # every move changes the cell: no wall, no edge
                a != b for a, b in zip(traj.cells, traj.cells[1:]))
            walk_items.append(traj.gold + traj.diamond)
        assert grid.exit not in {r * grid.size + c for r, c in traj.cells[:-1]}
        oracle_items += [simulate(example, r).gold + simulate(example, r).diamond
                         for r in oracle_routes(example).values()]
    assert np.mean(walk_items) < 0.8 * np.mean(oracle_items)
    fmt = CompactMazeFormat()
    records = warmup_records(task, fmt, 60, m=3, single_fraction=0.5, seed=0)
    assert records == warmup_records(task, fmt, 60, m=3, single_fraction=0.5, seed=0, data="random_walk")
    assert records != warmup_records(task, fmt, 60, m=3, single_fraction=0.5, seed=0, data="oracle")
    with pytest.raises(ValueError, match="--warmup-data"):
        warmup_records(task, fmt, 1, m=3, single_fraction=0.5, seed=0, data="walks")


def test_changed_config_is_refused(tmp_path):
    from vpo.demo.run import _prepare_out

    cfg = DemoConfig(out=str(tmp_path)).resolved()
    _prepare_out(cfg, tmp_path)
    _prepare_out(cfg, tmp_path)  # same config: fine (resume)
    (tmp_path / "checkpoints").mkdir()
    other = DemoConfig(out=str(tmp_path), rl_lr=1e-3).resolved()
    with pytest.raises(ValueError, match="rl_lr"):
        _prepare_out(other, tmp_path)
    forced = DemoConfig(out=str(tmp_path), rl_lr=1e-3, force=True).resolved()
    _prepare_out(forced, tmp_path)
    assert not (tmp_path / "checkpoints").exists()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    pytest.importorskip("trl")
    pytest.importorskip("matplotlib")
    from vpo.demo.run import run_demo

    import contextlib
    import io

    out = tmp_path_factory.mktemp("demo-quick")
    start = time.time()
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        # two workers whatever the load, so the parallel path runs (--workers 0 picks from the free cores)
        result = run_demo(DemoConfig(quick=True, out=str(out), progress=False, workers=2))
    # what this process showed on the terminal (the RL workers print from their own processes)
    out.with_name(out.name + "-terminal.json").write_text(json.dumps({"stdout": stdout.getvalue(),
                                                                      "stderr": stderr.getvalue()}))
    return out, result, time.time() - start


def test_quick_demo_report(quick_run, numbers_in):
    out, result, _seconds = quick_run
    for name in ("report.md", "report.html", "metrics.json"):
        assert (out / name).is_file()
    for name in ("best_at_k.png", "training.png", "objective_space.png", "story_best_at_k.png",
                 "story_diversity.png", "story_objective_space.png"):
        assert (out / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    metrics = json.loads((out / "metrics.json").read_text())
    # the three headline figures come first in the HTML, before any section
    page = (out / "report.html").read_text()
    figures = [page.index(f"plots/story_{n}.png") for n in ("best_at_k", "diversity", "objective_space")]
    assert figures == sorted(figures) and figures[-1] < page.index("<h2>")
    assert "random walks" in metrics["intro"] and "never shown a good route" in metrics["intro"]
    assert set(metrics["methods"]) == {"warmup_m1", "warmup_m3", "grpo", "vpo", "multi_rlvr", "max_at_k"}
    for key, entry in metrics["methods"].items():
        assert len(entry["best_at_k"]["mean"]) == 30
        assert all(0.0 <= v <= 1.0 for v in entry["pref_best_at_k"]["mean"])
        assert entry["best_at_k"]["mean"] == sorted(entry["best_at_k"]["mean"])  # best@k grows with k
    numbers = numbers_in(metrics)
    assert numbers and all(math.isfinite(x) for x in numbers)
    assert metrics["training"]["vpo"]["steps"][-1] == QUICK["rl_steps"]
    assert (out / "checkpoints" / "vpo-s0" / "vpo_format.json").is_file()
    md = (out / "report.md").read_text()
    assert "0.593" in md and "plots/best_at_k.png" in md
    assert 0.0 < metrics["references"][0]["pref_best_at_k"] <= 1.0
    # a smoke run says so first, on the terminal (findings) and in the report
    assert metrics["findings"][0].startswith("This is a --quick smoke run")
    assert md.split("\n\n")[1].startswith("This is a --quick smoke run")
    # and it states no finding about the methods (8 steps of sparse reward leave pools identical):
    # plumbing checks instead, every one passed, the six plots among them
    assert len(metrics["findings"]) == 1 and "significant" not in md.split("## Results")[0]
    assert "Headroom:" not in md and "## Pipeline checks" in md
    assert len(metrics["checks"]) == 5 and all(line.startswith("ok: ") for line in metrics["checks"])
    assert "ok: 6 of 6 plots written" in metrics["checks"]


def test_demo_command_prints_the_checks_and_counts_every_plot(quick_run, monkeypatch, capsys):
    import argparse

    import vpo.demo.run
    from vpo.commands.demo import run

    out, result, _ = quick_run
    monkeypatch.setattr(vpo.demo.run, "run_demo", lambda cfg: result)
    args = argparse.Namespace(**{**dataclasses.asdict(DemoConfig(quick=True, out=str(out))), "progress": False})
    assert run(args) == 0
    printed = capsys.readouterr().out
    assert "6 plots)" in printed and "- ok: 6 of 6 plots written" in printed and "significant" not in printed


def test_no_progress_hides_the_bars_not_the_stage_log(quick_run):
    # --no-progress (progress=False) used to silence the stage lines too
    out, _, _ = quick_run
    terminal = json.loads(out.with_name(out.name + "-terminal.json").read_text())
    lines = terminal["stdout"].splitlines()
    for stage in ("warm-up: SFT on", "warm-up: done", "RL and evaluation: ", "RL: vpo seed 0 done", "report: "):
        assert any(stage in line for line in lines), stage
    log = (out / "logs" / "demo.log").read_text()
    assert all(line in log for line in lines if line.startswith("["))  # the terminal shows the log's lines
    assert "%|" not in terminal["stderr"] + terminal["stdout"] and "it/s]" not in terminal["stderr"]


def test_quick_demo_resumes_without_retraining(quick_run):
    from vpo.demo.run import run_demo

    out, _, _ = quick_run
    done = out / "checkpoints" / "grpo-s0" / "done.json"
    before = done.stat().st_mtime
    (out / "eval" / "vpo-s0.npz").unlink()  # lose one pool: only it is re-sampled
    run_demo(DemoConfig(quick=True, out=str(out), progress=False))
    assert done.stat().st_mtime == before
    assert (out / "eval" / "vpo-s0.npz").is_file()
    log = (out / "logs" / "demo.log").read_text()
    assert log.count("eval: vpo-s0") == 2 and log.count("eval: grpo-s0") == 1


def test_eval_command_on_demo_checkpoint(quick_run, tmp_path):
    from vpo.commands.eval import EvalConfig, run_eval

    out, _, _ = quick_run
    result = run_eval(EvalConfig(model=str(out / "checkpoints" / "vpo-s0"), answers=3, pool=6, examples=4,
                                 out=str(tmp_path), progress=False))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    (entry,) = metrics["methods"].values()
    assert len(entry["best_at_k"]["mean"]) == 6 and entry["m"] == 3
    assert result["report"]["md"].is_file()
    assert metrics["task"]["params"] == {"size": 5, "reward_mode": "linear"}


def test_train_then_eval_on_a_demo_checkpoint(quick_run, tmp_path, capsys):
    """`vpo train` from a demo checkpoint trains in its compact format with a
    non-zero reward, keeps vpo_format.json, and `vpo eval` of the result reads that format and
    scores too."""
    import transformers

    from vpo.cli import main

    out, _, _ = quick_run
    trained = tmp_path / "trained"
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()  # transformers shows the training bar from WARNING on
    try:
        # the GRPO checkpoint: the --quick run's best scorer (its m=3 VPO chains mostly hit the token limit)
        assert main(["train", "--task", "maze", "--model", str(out / "checkpoints" / "grpo-s0"), "--method", "grpo",
                     "--examples", "8", "--out", str(trained), "--max-steps", "2", "--num-generations", "8",
                     "--per-device-train-batch-size", "32", "--learning-rate", "1e-5", "--kl-beta", "0",
                     "--force-cpu"]) == 0
    finally:
        transformers.logging.set_verbosity(verbosity)
    captured = capsys.readouterr()
    summary = json.loads([line for line in captured.out.splitlines() if line.startswith("{")][-1])
    # measured: 0.016 and 0.027 (mean task scalar of the 32 rollouts of each step)
    assert summary["steps"] == 2 and summary["first_reward"] + summary["last_reward"] > 0
    assert "train grpo: " in captured.err  # the bar names its stage
    record = json.loads((trained / "vpo_format.json").read_text())
    assert record["format"] == "maze-compact" and record["task_params"] == {"size": 5, "reward_mode": "linear"}
    assert main(["eval", "--model", str(trained), "--pool", "12", "--examples", "6", "--no-progress",
                 "--out", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    (entry,) = metrics["methods"].values()
    assert entry["best_at_k"]["mean"][-1] > 0 and "maze-compact" in metrics["intro"]


class BusyThenIdle:
    """A simulated 2-core machine: other work holds 1.8 cores for the first ``busy_calls`` CPU samples, then none."""

    def __init__(self, busy_calls: int) -> None:
        self.calls, self.busy_calls = 0, busy_calls

    def __call__(self, seconds: float = 1.0):
        from vpo.cores import CpuSample

        self.calls += 1
        return CpuSample(busy=1.8 if self.calls <= self.busy_calls else 0.0, usable=2, seconds=seconds)


def run_busy_then_idle(config: DemoConfig, done: Path, out: Path, monkeypatch) -> tuple[dict, BusyThenIdle, list[str]]:
    """``config`` run again in ``out`` from ``done``'s warm-up on a simulated machine busy at the start
    and idle later (``--workers 0``: one worker, then two, the jobs on other processes in another
    order). Returns (the run's result, the simulated machine, the worker counts its log states)."""
    import dataclasses
    import shutil

    import vpo.cores
    import vpo.demo.run
    from vpo.demo.run import run_demo

    out.mkdir()
    shutil.copy(done / "config.json", out / "config.json")
    shutil.copytree(done / "checkpoints" / "warmup", out / "checkpoints" / "warmup")
    machine = BusyThenIdle(busy_calls=3)  # the start sample, then two at job starts
    monkeypatch.setattr(vpo.cores, "sample_cpu", machine)
    monkeypatch.setattr(vpo.cores, "usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(vpo.demo.run, "RECHECK_S", 0.2)
    result = run_demo(dataclasses.replace(config, out=str(out), workers=0))
    log = (out / "logs" / "demo.log").read_text()
    said = [line.split("RL and evaluation: ")[1].split(" (")[0] for line in log.splitlines()
            if "RL and evaluation: workers: " in line]
    return result, machine, said


@pytest.mark.slow  # the same guarantee on a small demo: test_small_demo_numbers_do_not_depend_on_the_workers_...
def test_quick_demo_numbers_do_not_depend_on_the_workers_the_load_or_the_job_order(quick_run, tmp_path,
                                                                                     monkeypatch, capfd):
    """The same numbers, to the last bit, from --workers 2 (the fixture), --workers 1 (every job in
    this process, in order), and --workers 0 on a machine busy at the start and idle later (one
    worker, then two: the jobs land on other processes in another order). Before, the warm-up's
    threads were threads x workers, and the worker count followed the load. Both runs show their
    bars (the default), and print a few lines per job (before: 2,682 lines for the default demo,
    376 of them transformers' weight loading and saving bars)."""
    from vpo.demo.results import result_numbers
    from vpo.demo.run import run_demo

    _, result, _ = quick_run
    reference = result_numbers(result["metrics"])
    assert len(reference) > 1000
    capfd.readouterr()
    alone = run_demo(DemoConfig(quick=True, out=str(tmp_path / "one"), workers=1))
    assert result_numbers(alone["metrics"]) == reference
    jobs = 6  # four RL runs (and their pools), the warm start's two pools
    printed = capfd.readouterr()
    lines = (printed.out + printed.err).split("\n")  # a bar's frames share a line: they end in "\r"
    assert len(lines) <= 5 * jobs + 10, "\n".join(lines)
    assert not any(mark in printed.out + printed.err for mark in ("Loading weights", "Writing model shards"))
    # busy, then idle: the warm-up of the run above, then the jobs on what the simulated CPU allows
    loaded, machine, said = run_busy_then_idle(DemoConfig(quick=True), tmp_path / "one", tmp_path / "busy-then-idle",
                                               monkeypatch)
    assert result_numbers(loaded["metrics"]) == reference
    printed = capfd.readouterr()  # the worker processes print to the same terminal: stage lines, no bars
    lines = (printed.out + printed.err).split("\n")
    assert len(lines) <= 5 * jobs + 10 and "%|" not in printed.out + printed.err, "\n".join(lines)
    assert said == ["workers: 1", "workers: 2"]
    assert machine.calls >= 4


SMALL_DEMO = dict(quick=True, methods="grpo,vpo", seeds=1, warmup_examples=64, rl_steps=2, eval_examples=2, pool=6,
                  progress=False)
"""A demo of four jobs (two RL runs with their pools, the warm start's two pools): seconds, not minutes."""


def test_small_demo_numbers_do_not_depend_on_the_workers_the_load_or_the_job_order(tmp_path, monkeypatch):
    """The guarantee of the quick demo's test above (slow) on a small demo: the same numbers, to the
    last bit, from --workers 2, --workers 1 (every job in this process, in order), and --workers 0 on
    a machine busy at the start and idle later (one worker, then two: the jobs land on other
    processes in another order)."""
    pytest.importorskip("trl")
    from vpo.demo.results import result_numbers
    from vpo.demo.run import run_demo

    two = run_demo(DemoConfig(**SMALL_DEMO, out=str(tmp_path / "two"), workers=2))
    reference = result_numbers(two["metrics"])
    assert len(reference) > 100
    alone = run_demo(DemoConfig(**SMALL_DEMO, out=str(tmp_path / "one"), workers=1))
    assert result_numbers(alone["metrics"]) == reference
    loaded, _, said = run_busy_then_idle(DemoConfig(**SMALL_DEMO), tmp_path / "one", tmp_path / "busy-then-idle",
                                         monkeypatch)
    assert result_numbers(loaded["metrics"]) == reference
    assert said == ["workers: 1", "workers: 2"]


def test_the_shipped_quick_numbers_come_out_of_head(quick_run):
    """docs/demo/quick_numbers.json pins the quick run of the commit docs/demo/report.md was made
    from (scripts/pin_quick_numbers.py): a change that moves the demo's numbers fails here until the
    report and the pin are made again. Float rounding differs between CPUs, so another machine skips."""
    from pathlib import Path

    from vpo.demo.results import PINNED_NUMBERS, headline_numbers, numbers_digest, numbers_machine, result_numbers

    pinned = json.loads((Path(__file__).resolve().parents[2] / PINNED_NUMBERS).read_text())
    if pinned["machine"] != numbers_machine():
        pytest.skip(f"{PINNED_NUMBERS} was made on {pinned['machine']}, this machine is {numbers_machine()}: "
                    "its float rounding differs")
    _, result, _ = quick_run
    metrics = result["metrics"]
    assert headline_numbers(metrics) == pinned["headline"]
    numbers = result_numbers(metrics)
    assert (len(numbers), numbers_digest(numbers)) == (pinned["count"], pinned["digest"])



def test_a_report_made_on_a_gpu_does_not_promise_its_digits_again():
    """The reproducibility note vouches for repeats on the same CPU kind; a GPU run's note says a
    repeat is unchecked there instead (bf16 autocast, CUDA's kernels)."""
    from vpo.demo.results import numbers_machine
    from vpo.demo.run import reproducibility_note

    machine = numbers_machine()
    assert reproducibility_note(machine).startswith("These numbers come out to the digit again on the same kind")
    on_gpu = reproducibility_note(machine, "NVIDIA H200")
    assert "NVIDIA H200" in on_gpu and "has not been checked there" in on_gpu and "come out to the digit" not in on_gpu

def test_headroom_script_search_contains_the_oracle_routes(task):
    """scripts/maze_headroom.py's exhaustive search must find every oracle route's reward vector."""
    import importlib.util
    from pathlib import Path

    from vpo.tasks.maze import oracle_routes, simulate

    path = Path(__file__).resolve().parents[2] / "scripts" / "maze_headroom.py"
    spec = importlib.util.spec_from_file_location("maze_headroom", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for example in task.examples("test", 8):
        reachable = script.reachable_vectors(task, example)
        for route in oracle_routes(example).values():
            vector = simulate(example, route).vector
            assert np.any(np.all(np.isclose(reachable, vector), axis=1))
        assert np.all(reachable[:, 0] == 1.0)  # only routes that reach E are listed


def test_a_second_demo_in_the_same_folder_is_refused(tmp_path, capsys):
    # the folder lock
    from vpo.cli import main
    from vpo.demo.run import lock_folder

    held = lock_folder(tmp_path / "demo")
    try:
        assert main(["demo", "--quick", "--out", str(tmp_path / "demo")]) == 2
        err = capsys.readouterr().err
        assert "in use by another vpo demo" in err and f"pid {__import__('os').getpid()}" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        held.close()
    again = lock_folder(tmp_path / "demo")  # released: the next run gets it
    again.close()


def test_compact_format_states_goal_weights_and_evaluation_varies_them_per_chain():
    # goal-conditioned GRPO in the demo
    from vpo.demo.config import DemoConfig
    from vpo.tasks.maze.format import CompactMazeFormat, GoalPerChainFormat
    from vpo.goals import attach_goal
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("test", 1)[0]
    fmt = CompactMazeFormat()
    goal = attach_goal(task, example, key=example["id"], seed=0)
    percents = "".join(f"{min(99, round(100 * w)):02d}" for w in goal["goal_weights"])
    stated = fmt.prompt(goal, 1)
    assert f" {percents} " in stated and stated.replace(f"{percents} ", "", 1) == fmt.prompt(example, 1)
    assert set(fmt.prompt(goal, 1)) <= set(fmt.alphabet())
    per_chain = GoalPerChainFormat(fmt, seed=1)
    prompts = {per_chain.chain_prompt(example, 1, c) for c in range(5)}
    assert len(prompts) == 5 and per_chain.chain_prompt(example, 1, 2) == per_chain.chain_prompt(example, 1, 2)
    assert DemoConfig(methods="all").method_list() == ["grpo", "vpo", "multi_rlvr", "max_at_k"]
    assert DemoConfig(methods="grpo,goal_conditioned").method_list() == ["grpo", "goal_conditioned"]


@pytest.mark.slow
def test_quick_demo_with_goal_conditioned_grpo(tmp_path):
    from vpo.demo.config import DemoConfig
    from vpo.demo.run import run_demo

    result = run_demo(DemoConfig(quick=True, out=str(tmp_path), methods="grpo,goal_conditioned", progress=False))
    metrics = result["metrics"]
    assert {"grpo", "goal_conditioned"} <= set(metrics["methods"])
    assert all(0.0 <= v <= 1.0 for v in metrics["methods"]["goal_conditioned"]["pref_best_at_k"]["mean"])


def test_the_memory_cap_counts_a_running_workers_memory_as_its_own(monkeypatch):
    """A worker's memory is no longer free while it runs: with one RL worker holding its share, the
    memory free beside it (13.6 GB against a 9 GB peak) still holds a second, as the 22.7 GB free at
    the start held two. Before, the free memory alone capped every worker, so the smollm2 CPU demo's
    warm-start pools waited for VPO's 45-minute RL run on an idle core. Never more than the start held;
    fewer when something else took the memory."""
    from vpo.demo.run import worker_budget

    gb = 1 << 30
    free = [int(22.7 * gb)]
    monkeypatch.setattr("vpo.workload.device_memory", lambda device: free[0])
    budget = worker_budget(DemoConfig(workers=0), 9 * gb)
    (cap,) = budget.caps
    assert cap(0)[0] == 2
    free[0] = int(13.6 * gb)
    assert cap(1) == (2, "13.6 GB of memory free beside 1 running holds 2")
    free[0] = 40 * gb                       # more than at the start: still what the start held
    assert cap(1)[0] == 2
    free[0] = 5 * gb                        # something else took it: only the running one
    assert cap(1)[0] == 1


def test_the_memory_cap_reads_the_machine_again_while_no_worker_runs(monkeypatch):
    """Other work that held memory when the demo started and has ended since no longer caps it: with
    none of its workers running, the memory free now is the memory free before they hold any."""
    from vpo.demo.run import worker_budget

    gb = 1 << 30
    free = [int(16.0 * gb)]                 # two pools of another run beside the start
    monkeypatch.setattr("vpo.workload.device_memory", lambda device: free[0])
    (cap,) = worker_budget(DemoConfig(workers=0), int(9.3 * gb)).caps
    assert cap(0)[0] == 1
    free[0] = int(22.8 * gb)                # they ended
    assert cap(1)[0] == 1                   # one running: what it holds is not known, the old reading stands
    assert cap(0)[0] == 2
    free[0] = int(13.6 * gb)
    assert cap(1) == (2, "13.6 GB of memory free beside 1 running holds 2")

"""Every estimator option reaches the CLI (``--estimator-options k=v``), checked against the
estimator's spec before any work; help that names estimators comes from the registry; m follows
the estimator's default everywhere (the export too); ``vpo advantages --task`` scores a task's
oracle answers or a file of completions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpo.cli import build_parser, main
from vpo.commands.options import check_estimator_options, estimator_options, settable_options
from vpo.estimators import get_spec, list_estimators


# ----- --estimator-options: names and values checked against the spec ---------------------------

@pytest.mark.parametrize("argv,needle", [
    (["--estimator", "grpo", "--estimator-options", "foo=1"],
     "--estimator-options foo: estimator 'grpo' has no option 'foo'; its options: std, eps, degenerate, scale"),
    (["--estimator", "grpo", "--estimator-options", "std=median"], "std must be one of ('population', 'sample')"),
    (["--estimator", "max_at_k", "--answers", "1", "--estimator-options", "k=4"], "k=4 must be < n=4"),
    (["--estimator", "vpo", "--estimator-options", "seed=3"], "--estimator-options seed: the weights' seed is --seed"),
    (["--estimator", "vpo", "--estimator-options", "step=3"], "--estimator-options step: set by vpo itself"),
    (["--estimator", "vpo", "--num-weights", "5", "--estimator-options", "num_weights=7"],
     "--num-weights 5 and --estimator-options num_weights=7 disagree"),
    (["--estimator", "gdpo", "--estimator-options", "objective_weights=[1,2]"], "objective_weights: expected 4"),
    (["--estimator", "grpo", "--estimator-options", "eps"], "--estimator-options entries must be key=value"),
])
def test_advantages_refuses_a_bad_estimator_option_in_one_line(argv, needle, capsys):
    assert main(["advantages", *argv]) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and captured.err.count("\n") == 1 and not captured.out


def test_advantages_passes_the_options_to_the_estimator(capsys):
    assert main(["advantages", "--estimator", "grpo", "--estimator-options", "scale=none,eps=0.5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("estimator grpo (scale=none, eps=0.5): ")
    # scale=none centres without dividing: each advantage is the score minus its group's mean
    rows = [line.split() for line in out.splitlines() if line.startswith(("p0 ", "p1 "))]
    scores, advantages = np.array([[float(r[-2]), float(r[-1])] for r in rows]).T
    for group in (slice(0, 4), slice(4, 8)):
        assert np.allclose(advantages[group], scores[group] - scores[group].mean(), atol=1e-4)


def test_every_user_option_of_every_estimator_is_reachable():
    # the options a user sets are the spec's, less those the adapters fill in and the seed (--seed)
    for name in list_estimators():
        spec = get_spec(name)
        settable = settable_options(name)
        assert set(settable) == set(spec.options) - set(spec.injected_options) - {"seed"}
        parser = build_parser()
        for option in settable:
            text = f"{option}={json.dumps(spec.defaults.get(option))}"
            args = parser.parse_args(["advantages", "--estimator", name, "--estimator-options", text])
            from vpo.commands.advantages import AdvantagesConfig
            from vpo.config import dataclass_from_args

            cfg = dataclass_from_args(AdvantagesConfig, args)
            assert estimator_options(cfg)[option] == spec.defaults.get(option)


def test_check_estimator_options_without_d_leaves_the_objective_weights_to_the_first_step():
    check_estimator_options("gdpo", {"objective_weights": [1.0, 2.0, 3.0]}, answers=3, objectives=None, group_size=4)
    with pytest.raises(ValueError, match="objective_weights"):
        check_estimator_options("gdpo", {"objective_weights": [1.0, 2.0, 3.0]}, answers=3, objectives=2, group_size=4)


def test_train_refuses_a_bad_estimator_option_before_the_model_loads(tmp_path, capsys):
    missing = str(tmp_path / "no-such-model")  # never reached: the option's name fails first
    assert main(["train", "--task", "maze", "--model", missing, "--method", "grpo",
                 "--estimator-options", "num_weights=5"]) == 2
    assert "--estimator-options num_weights: estimator 'grpo' has no option" in capsys.readouterr().err
    assert main(["train", "--task", "maze", "--model", missing, "--method", "grpo", "--num-weights", "5"]) == 2
    assert "--num-weights does not apply to estimator 'grpo'" in capsys.readouterr().err


def test_train_hands_the_options_to_vpo_trainer(tmp_path, capsys, monkeypatch):
    pytest.importorskip("trl")
    from test_cli_train import _tiny_model_dir

    import vpo.integrations.trl.trainer as trl_module  # where the plan builds its VPOTrainer

    folder = _tiny_model_dir(tmp_path)
    argv = ["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder), "--num-examples", "4",
            "--output-dir", str(tmp_path / "run"), "--max-steps", "1", "--num-generations", "4",
            "--per-device-train-batch-size", "4", "--max-completion-length", "6", "--force-cpu"]
    # a value the estimator refuses fails before the model loads
    assert main([*argv, "--method", "max_at_k", "--estimator-options", "k=4"]) == 2
    captured = capsys.readouterr()
    assert "k=4 must be < n=4" in captured.err and "loading" not in captured.out

    seen = {}

    class Stop(Exception):
        pass

    def recorder(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(trl_module, "VPOTrainer", recorder)
    with pytest.raises(Stop):
        main([*argv, "--method", "vpo", "--alpha", "0.5", "--estimator-options", "eps=1e-4,degenerate=none"])
    assert seen["estimator"] == "vpo" and seen["answers"] == 3
    assert seen["estimator_options"] == {"num_weights": 100, "alpha": 0.5, "sampler": "iid", "eps": 1e-4,
                                         "degenerate": "none"}


# ----- help from the registry ---------------------------------------------------------------

def test_help_names_every_registered_estimator_and_its_options(monkeypatch):
    from vpo.estimators import register_estimator
    from vpo.estimators.registry import _REGISTRY
    from vpo.estimators.rules import group_norm
    from vpo.estimators.reductions import fixed_scalar

    @register_estimator("toy_help_rule", multi_answer=False, reduce=fixed_scalar, advantage=group_norm)
    def toy(rewards, group_ids, *, scalar=None, std="sample", eps=1e-6, degenerate="raw", scale="group"):
        raise NotImplementedError

    try:
        parser = build_parser()
        for command in ("train", "advantages"):
            sub = parser._subparsers._group_actions[0].choices[command]
            text = " ".join(sub.format_help().split())
            for name in list_estimators():
                assert name in text, (command, name)
            assert "toy_help_rule: std, eps, degenerate, scale" in text
            taking = ", ".join(n for n in list_estimators() if "alpha" in get_spec(n).options)
            assert {"goal_conditioned", "random_weight", "vpo"} <= set(taking.split(", "))
            assert f"Dirichlet concentration alpha ({taking})" in text
    finally:
        _REGISTRY.pop("toy_help_rule")


# ----- m follows the estimator's default, the export included --------------------------------

def test_export_follows_the_method_default_m(tmp_path, capsys):
    import pyarrow.parquet as pq

    for method, m in (("vpo", 3), ("grpo", 1), ("", 1)):
        out = tmp_path / (method or "plain")
        argv = ["data", "export", "maze", "--out", str(out), "--size", "5", "--train", "2", "--test", "0"]
        assert main([*argv, *(["--method", method] if method else [])]) == 0
        assert f"answers {m}" in capsys.readouterr().out
        (row, _) = pq.read_table(out / "train.parquet").to_pylist()
        assert row["extra_info"]["answers"] == m
    assert main(["data", "export", "maze", "--out", str(tmp_path / "x"), "--method", "grpo", "--answers", "3"]) == 2
    assert "scores one answer per rollout" in capsys.readouterr().err


# ----- vpo advantages --task ------------------------------------------------------------------

def test_advantages_scores_a_tasks_oracle_answers(capsys):
    from vpo.tasks import get_task
    from vpo.tasks.maze import oracle_routes, simulate

    assert main(["advantages", "--task", "maze", "--task-params", "size=5", "--groups", "2", "--rollouts", "3",
                 "--zero-fraction", "0"]) == 0
    out = capsys.readouterr().out
    assert "oracle answers of task maze: 2 example(s) x 3 rollouts x 3 answers" in out.splitlines()[0]
    # every row printed is one of the example's oracle route vectors (or a padded zero row)
    task = get_task("maze", size=5)
    examples = task.examples("test", 2, seed=0)
    for g, example in enumerate(examples):
        allowed = {tuple(simulate(example, r).vector.tolist()) for r in oracle_routes(example).values()}
        rows = [line for line in out.splitlines() if line.startswith(f"p{g} ") and " = example " not in line]
        assert len(rows) == 3
        for line in rows:
            cell = line[line.index("["):].rsplit("]", 1)[0] + "]"
            vectors = [tuple(float(x.replace(".", "0.", 1) if x.startswith(".") else x) for x in v.split())
                       for v in cell.strip("[]").split("] [")]
            assert all(v in allowed or not any(v) for v in vectors), (line, allowed)


def test_advantages_scores_a_file_of_completions(tmp_path, capsys):
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("test", 1, seed=0)[0]
    good = task.oracle_answers(example)[0]
    rows = [{"example": json.dumps(example), "completion": f"<route_1>{good}</route_1>"},
            {"example": example, "completion": "no route"},
            {"example": json.dumps(example), "completion": f"<route_1>{good}</route_1><route_2>{good}</route_2>"}]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["advantages", "--task", "maze", "--task-params", "size=5", "--completions", str(path),
                 "--estimator", "multi_rlvr", "--answers", "2"]) == 0
    out = capsys.readouterr().out
    assert "p0 = example maze5-test-s0-0" in out
    lines = [line for line in out.splitlines() if line.startswith("p0 ") and " = example " not in line]
    assert len(lines) == 3  # one group: the rows share their example
    assert "[0 0 0 0] [0 0 0 0]" in lines[1]  # no route: two zero rows
    from vpo.commands.advantages import _fmt

    vector = "[" + " ".join(_fmt(x) for x in task.score(good, example)) + "]"
    assert f"{vector} [0 0 0 0]" in lines[0]  # m = 2: the missing answer pads
    assert lines[2].count("[0 0 0 0]") == 1  # the second identical route is a duplicate: dropped, padded
    assert float(lines[0].split()[-2]) == float(lines[2].split()[-2])


@pytest.mark.parametrize("argv,needle", [
    (["--task", "code"], "task 'code' has no oracle answers"),
    (["--completions", "x.jsonl"], "--completions is for --task"),
    (["--task", "maze", "--objectives", "3"], "--objectives is for the synthetic batch"),
    (["--task", "nope"], "--task nope"),
])
def test_advantages_task_errors(argv, needle, capsys):
    assert main(["advantages", *argv]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("name", ["maze", "math", "musique", "eureqa", "toolcall"])
def test_oracle_answers_score_the_gold(name):
    if name == "math":
        pytest.importorskip("math_verify")
    from vpo.tasks import get_task

    task = get_task(name, **({"size": 5} if name == "maze" else {}))
    for example in task.examples("test", 3):
        answers = task.oracle_answers(example)
        assert answers and all(isinstance(a, str) and a for a in answers)
        vectors = [task.score(a, example) for a in answers]
        if name == "maze":  # the three oracle routes, as the simulator scores them
            from vpo.tasks.maze import oracle_routes, simulate

            expected = {tuple(simulate(example, r).vector) for r in oracle_routes(example).values()}
            assert {tuple(v) for v in vectors} == expected
        else:
            assert all(task.solved(v) for v in vectors), (name, answers, vectors)


def test_advantages_completions_refuse_the_oracle_chain_flags(tmp_path, capsys):
    path = tmp_path / "samples.jsonl"
    path.write_text("")
    assert main(["advantages", "--task", "maze", "--completions", str(path), "--rollouts", "8"]) == 2
    assert "--rollouts is for the oracle chains" in capsys.readouterr().err

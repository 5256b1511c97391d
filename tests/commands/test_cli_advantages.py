"""`vpo advantages`: the random-batch table through vpo.cli.main and python -m vpo."""

import subprocess
import sys

from vpo.cli import main


def test_table_and_diagnostics(capsys):
    assert main(["advantages", "--groups", "2", "--rollouts", "3", "--answers", "2", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("estimator vpo (num_weights=100")
    body = [line for line in lines if line.startswith(("p0 ", "p1 "))]
    assert len(body) == 6
    advantages = [float(line.split()[-1]) for line in body]
    assert abs(sum(advantages[:3])) < 1e-3 and abs(sum(advantages[3:])) < 1e-3  # z-scores centre per group
    assert "vpo/group_std" in out and "vpo/mean_group_max" in out


def test_same_seed_same_output(capsys):
    main(["advantages", "--seed", "3"])
    first = capsys.readouterr().out
    main(["advantages", "--seed", "3"])
    assert capsys.readouterr().out == first


def test_single_answer_estimator_errors_and_hints(capsys):
    assert main(["advantages", "--estimator", "grpo", "--answers", "3"]) == 2
    assert "try --answers 1" in capsys.readouterr().err
    # without --answers, m follows the estimator as in vpo train (1 for GRPO, 3 for VPO)
    assert main(["advantages", "--estimator", "grpo"]) == 0
    assert "x 1 answers" in capsys.readouterr().out
    assert main(["advantages"]) == 0 and "x 3 answers" in capsys.readouterr().out
    assert main(["advantages", "--estimator", "grpo", "--answers", "1", "--num-weights", "5"]) == 2
    assert "--num-weights does not apply" in capsys.readouterr().err
    assert main(["advantages", "--estimator", "max_at_k", "--answers", "1", "--rollouts", "6"]) == 0
    assert main(["advantages", "--groups", "0"]) == 2


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "vpo", "advantages", "--estimator", "multi_rlvr", "--groups", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert "estimator multi_rlvr" in out and out.count("\np0 ") == 4


def test_a_task_without_oracle_answers_is_refused_in_one_line_and_scores_completions(tmp_path, monkeypatch, capsys):
    """docs/extending.md's task template without ``oracle_answers``: ``--task`` alone names what is
    missing (exit 2, one line, before any scoring); ``--completions`` needs no oracle answers."""
    import json

    import numpy as np

    import vpo.tasks as tasks
    from vpo.chains import RewriteRule
    from vpo.tasks import Task, list_tasks, register_task

    list_tasks()
    monkeypatch.setattr(tasks, "_REGISTRY", tasks._REGISTRY.copy())

    @register_task("vowels_without_gold")
    class Vowels(Task):
        objectives = ("a", "e", "i", "o", "u")
        rewrite_rule = RewriteRule("vowels", template="Give {m} different answers, each in <{tag}_i> tags.",
                                   pattern=r"Answer:", tag="answer")

        def prompt_single(self, example):
            return f"Write a word for {example['topic']}. Answer:"

        def score(self, text, example):
            return np.array([float(v in text.lower()) for v in "aeiou"])

        def examples(self, split="train", n=None, *, seed=None, source=None):
            return [{"id": f"{split}-{i}", "topic": t} for i, t in enumerate(["sea", "food"][:n])]

    assert main(["advantages", "--task", "vowels_without_gold"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no oracle answers for example 'test-0'" in err and "Vowels.oracle_answers(example)" in err
    assert "--completions FILE" in err
    rows = [{"example": {"id": "q", "topic": "sea"}, "completion": c}
            for c in ("<answer_1>ocean</answer_1><answer_2>sky</answer_2>", "<answer_1>sky</answer_1>", "none")]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["advantages", "--task", "vowels_without_gold", "--completions", str(path), "--answers", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 completions of" in out and "p0 = example q" in out

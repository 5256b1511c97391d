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

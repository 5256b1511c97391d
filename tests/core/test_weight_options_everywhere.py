"""An explicit zero K or alpha is an error at every entry point, never a silent default:
the core, the CLI (before any model loads), the TRL, verl and OpenRLHF adapters."""

import pytest

from vpo.cli import main
from vpo.estimators import WeightOptions

BAD = [("--num-weights", "0", "num_weights"), ("--alpha", "0", "alpha"), ("--alpha", "-1", "alpha")]


@pytest.mark.parametrize("flag,value,name", BAD)
def test_the_cli_rejects_them_before_any_work(flag, value, name, capsys, tmp_path):
    # the message names the flag as typed, not the field (name)
    missing_model = str(tmp_path / "no-such-model")  # never reached: the options fail first
    assert main(["train", "--task", "maze", "--model", missing_model, flag, value]) == 2
    assert flag in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path / "demo"), flag, value]) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
    assert main(["advantages", flag, value]) == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("name,value", [("num_weights", 0), ("alpha", 0.0), ("alpha", -1.0)])
def test_the_adapters_reject_them(name, value):
    with pytest.raises(ValueError, match=name):
        WeightOptions(**{name: value})
    from vpo.integrations.openrlhf import make_label

    with pytest.raises(ValueError, match=name):
        make_label("maze", {"id": 0}, m=1, index=0, **{name: value})
    pytest.importorskip("verl")
    from vpo.export import verl_row
    from vpo.integrations.verl import compute_score
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    row = verl_row(task, task.examples("test", 1)[0], index=0, split="test", answers=3, task_params={"size": 5})
    with pytest.raises(ValueError, match=rf"reward_kwargs\.{name}"):
        compute_score("maze", "UP", row["reward_model"]["ground_truth"], row["extra_info"], **{name: value})


@pytest.mark.parametrize("name,value", [("num_weights", 0), ("alpha", 0.0)])
def test_trl_reward_and_trainer_reject_them(name, value):
    pytest.importorskip("trl")
    from vpo.integrations.trl import VPOReward
    from vpo.tasks import get_task

    with pytest.raises(ValueError, match=name):
        VPOReward(get_task("maze", size=5), answers=3, **{name: value})

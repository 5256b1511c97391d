"""The one rollout scorer of the scalar engines: verl's compute_score, OpenRLHF's reward_func and
TRL's stock rewards share ``vpo.integrations.rollout_scorer``, not each other; VPO's set score of
another method costs a draw only when asked for; the earlier names still work, with a dated
warning."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from vpo.export import verl_row
from vpo.integrations import openrlhf, rollout_scorer
from vpo.integrations.verl import compute_score
from vpo.tasks import get_task
from vpo.tasks.maze import route_via_diamond, route_via_gold

SRC = Path(__file__).resolve().parents[2] / "src" / "vpo" / "integrations"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_openrlhf_and_verl_share_the_scorer_module_not_each_other():
    openrlhf_imports = _imports(SRC / "openrlhf.py")
    verl_imports = _imports(SRC / "verl.py")
    assert "vpo.integrations.rollout_scorer" in openrlhf_imports and "vpo.integrations.rollout_scorer" in verl_imports
    assert not {m for m in openrlhf_imports if m.startswith("vpo.integrations.verl")}
    assert not {m for m in verl_imports if m.startswith("vpo.integrations.openrlhf")}
    assert "vpo.integrations.rollout_scorer" in _imports(SRC / "trl" / "rewards.py")
    scorer = _imports(SRC / "rollout_scorer.py")
    assert not {m for m in scorer if m.startswith(("vpo.integrations.", "verl", "openrlhf", "trl"))}
    assert openrlhf.score_rollout is rollout_scorer.score_rollout  # one function, not a copy


def _row_and_text(m: int):
    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    row = verl_row(task, example, index=0, split="train", answers=m, task_params={"size": 5})
    gold, diamond = " ".join(route_via_gold(example)), " ".join(route_via_diamond(example))
    text = f"<route_1>{gold}</route_1><route_2>{diamond}</route_2>" if m > 1 else gold
    return row, text


def test_the_set_score_of_another_method_is_drawn_only_when_asked_for(monkeypatch):
    row, text = _row_and_text(1)
    truth, info = row["reward_model"]["ground_truth"], row["extra_info"]
    drawn = []
    real = rollout_scorer.method_score
    monkeypatch.setattr(rollout_scorer, "method_score", lambda spec, *a, **k: drawn.append(spec.name) or real(
        spec, *a, **k))
    plain = compute_score("maze", text, truth, info, method="grpo")
    assert "set_score" not in plain and drawn == ["grpo"]
    asked = compute_score("maze", text, truth, info, method="grpo", set_score=True)
    assert drawn == ["grpo", "grpo", "vpo"] and asked["score"] == plain["score"]
    vpo = compute_score("maze", text, truth, info)  # vpo: its score is the set score, no second draw
    assert drawn[3:] == ["vpo"] and vpo["set_score"] == vpo["score"] == asked["set_score"]
    assert sorted(set(asked) - set(plain)) == ["set_score"]


def test_openrlhf_reward_func_scores_through_it():
    row, text = _row_and_text(3)
    label = openrlhf.make_label("maze", json.loads(row["reward_model"]["ground_truth"]), m=3, index=0,
                                task_params={"size": 5}, example_id=row["extra_info"]["example_id"])
    out = openrlhf.reward_func(["q " + text], ["q "], [label])
    direct = rollout_scorer.score_rollout("maze", text, json.loads(row["reward_model"]["ground_truth"]), m=3,
                                          key=row["extra_info"]["example_id"], task_params={"size": 5})
    assert out["rewards"] == direct["score"] == compute_score("maze", text, row["reward_model"]["ground_truth"],
                                                              row["extra_info"])["score"]
    assert out["extra_logs"]["vpo/set_score"] == out["rewards"]
    single, gold = _row_and_text(1)
    example = json.loads(single["reward_model"]["ground_truth"])
    for asked in (None, True):
        label = openrlhf.make_label("maze", example, m=1, index=0, task_params={"size": 5}, method="grpo",
                                    example_id=single["extra_info"]["example_id"], set_score=asked)
        logs = openrlhf.reward_func(["q " + gold], ["q "], [label])["extra_logs"]
        assert ("vpo/set_score" in logs) is bool(asked)


def test_earlier_names_still_work_and_warn_with_a_date():
    from vpo.weights import group_weights

    def warns(old: str, new: str):
        return pytest.warns(DeprecationWarning, match=rf"{old} is deprecated since 2026-11-28 .*{new}")

    import vpo.integrations.verl as verl
    import vpo.rewards as rewards

    with warns("vpo.integrations.verl.group_weights", "vpo.weights.group_weights"):
        np.testing.assert_array_equal(verl.group_weights("k", 3, num_weights=5, seed=2, step=4),
                                      group_weights(["k"], 5, 3, seed=2, step=4)[0])
    with warns("vpo.rewards.score_answers", "vpo.rewards.score_every_answer"):
        scored = rewards.score_answers([lambda prompts, completions, **_: [0.5] * len(completions)], ["p"], ["x"], 1,
                                       tag=None)
    assert scored.num_chains == 1
    pytest.importorskip("trl")
    import vpo.integrations.trl as trl
    import vpo.integrations.trl.rewards as trl_rewards
    import vpo.integrations.trl.scorers as scorers

    with warns("vpo.integrations.trl.rewards.group_weights", "vpo.weights.group_weights"):
        np.testing.assert_array_equal(trl_rewards.group_weights(2, "k", 4, 5, 3),
                                      group_weights(["k"], 5, 3, seed=2, step=4)[0])
    for module in (trl, trl_rewards):
        with warns("vpo.integrations.trl.rewards.TaskScalarReward", "vpo.integrations.trl.rewards.TaskReward"):
            assert module.TaskScalarReward is trl_rewards.TaskReward
    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    for module in (trl, scorers):
        with warns("vpo.integrations.trl.scorers.score_and_log", "score_task_chains"):
            (matrix,) = module.score_and_log(task, ["UP"], [example], 1, None)
        assert matrix.shape == (1, 4)


def test_the_trl_config_module_and_tasks_require_warn():
    pytest.importorskip("trl")
    import sys

    from vpo.tasks import require

    sys.modules.pop("vpo.integrations.trl_config", None)
    with pytest.warns(DeprecationWarning, match="vpo.integrations.trl_config is deprecated since 2026-11-28"):
        from vpo.integrations.trl_config import RLConfig
    from vpo.integrations.trl.config import RLConfig as current

    assert RLConfig is current
    with pytest.warns(DeprecationWarning, match=r"vpo\.tasks\.require is deprecated.*vpo\.tasks\.io\.need"):
        assert require({"a": 1}, "a", int, "t", 3) == 1
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="t: row 3: missing field 'b'"):
        require({"a": 1}, "b", int, "t", 3)


def test_an_export_with_a_method_feeds_estimator_reward(tmp_path):
    """``vpo data export --format trl --method NAME`` writes the ``method`` column that
    ``trl grpo --reward_funcs vpo.integrations.trl.estimator_reward`` reads."""
    pytest.importorskip("trl")
    import pyarrow.parquet as pq

    from vpo.cli import main
    from vpo.integrations.trl import EstimatorReward, estimator_reward

    assert main(["data", "export", "maze", "--size", "5", "--format", "trl", "--method", "multi_rlvr", "--train", "2",
                 "--test", "0", "--out", str(tmp_path / "d")]) == 0
    rows = pq.read_table(tmp_path / "d" / "train.parquet").to_pylist()
    assert {row["method"] for row in rows} == {"multi_rlvr"} and {row["answers"] for row in rows} == {3}
    task = get_task("maze", size=5)
    texts = []
    for row in rows:
        example = json.loads(row["example"])
        texts.append(f"<route_1>{' '.join(route_via_gold(example))}</route_1>")
    columns = {key: [r[key] for r in rows] for key in rows[0] if key != "prompt"}
    prompts = [r["prompt"] for r in rows]
    got = estimator_reward(prompts, texts, **columns)
    want = EstimatorReward(task, "multi_rlvr")(prompts, texts, example=columns["example"],
                                               example_id=columns["example_id"])
    assert got == want and all(0 < value <= 1 for value in got)

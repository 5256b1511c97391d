"""Goal-conditioned GRPO: the row's weights are stated in its prompt, stored in its
ground truth, and the reward uses exactly them, in TRL, verl and the exports."""

import json
import re

import numpy as np
import pytest

from vpo.goals import GOAL_FIELD, attach_goal, goal_of, goal_text
from vpo.tasks import get_task
from vpo.weights import group_weights

TASK = get_task("maze", size=5)


def stated(prompt: str) -> list[float]:
    match = re.search(r"Goal weights for this prompt: (.*?)\. Your answer", prompt)
    assert match, prompt[-300:]
    return [float(part.rsplit(" ", 1)[1]) for part in match.group(1).split(", ")]


def test_attach_goal_is_the_rows_keyed_draw_and_the_prompt_states_it():
    example = TASK.examples("train", 1, seed=0)[0]
    goal = attach_goal(TASK, example, key="row-7", seed=3)
    w = np.asarray(goal[GOAL_FIELD])
    np.testing.assert_allclose(w, group_weights(["row-7"], 1, 4, seed=3)[0, 0], atol=1e-6)
    assert w.sum() == pytest.approx(1.0, abs=1e-5) and GOAL_FIELD not in example
    prompt = TASK.prompt(goal, 1)
    assert prompt.startswith(TASK.prompt(example, 1).rstrip())
    np.testing.assert_allclose(stated(prompt), w, atol=0.006)   # two decimals
    assert "completion" in prompt and "avoid_lava" in prompt
    assert TASK.messages(goal, 1)[-1]["content"] == prompt
    assert goal_of(example) is None and np.allclose(goal_of(goal), w)
    with pytest.raises(ValueError, match="objectives"):
        goal_text([0.5, 0.5], ["a"])


def test_toolcall_states_the_goal_in_its_user_turn():
    task = get_task("toolcall")
    example = attach_goal(task, task.examples("test", 1)[0], key=0)
    turns = task.messages(example, 3)
    assert turns[0]["role"] == "system" and "Goal weights" not in turns[0]["content"]
    assert len(stated(turns[1]["content"])) == 4


@pytest.mark.parametrize("fmt", ["verl", "trl"])
def test_export_writes_the_weights_into_prompt_and_ground_truth(tmp_path, fmt):
    from vpo.estimators.options import WeightOptions
    from vpo.export import example_from_row, export_rows

    examples = TASK.examples("test", 3)
    rows = export_rows(TASK, examples, split="test", fmt=fmt, answers=1, goals=WeightOptions(seed=5))
    for i, row in enumerate(rows):
        truth = example_from_row(row)
        w = np.asarray(truth[GOAL_FIELD])
        prompt = row["prompt"][-1]["content"]  # both layouts hold the task's chat turns
        np.testing.assert_allclose(stated(prompt), w, atol=0.006)
        np.testing.assert_allclose(w, group_weights([examples[i]["id"]], 1, 4, seed=5)[0, 0], atol=1e-6)
    assert len({tuple(example_from_row(r)[GOAL_FIELD]) for r in rows}) == 3  # one draw per row


def test_verl_compute_score_uses_the_stated_weights():
    pytest.importorskip("verl")
    from vpo.estimators.options import WeightOptions
    from vpo.export import export_rows
    from vpo.integrations.verl import compute_score
    from vpo.tasks.maze import route_via_gold

    example = TASK.examples("test", 1)[0]
    (row,) = export_rows(TASK, [example], split="test", fmt="verl", answers=1, goals=WeightOptions(seed=1))
    truth = json.loads(row["reward_model"]["ground_truth"])
    text = " ".join(route_via_gold(example))
    out = compute_score("maze", text, row["reward_model"]["ground_truth"], row["extra_info"],
                        method="goal_conditioned")
    vector = TASK.score(text, example)
    assert out["score"] == pytest.approx(float(vector @ np.asarray(truth[GOAL_FIELD])))
    plain = export_rows(TASK, [example], split="test", fmt="verl", answers=1)[0]
    with pytest.raises(ValueError, match="goal weights"):
        compute_score("maze", text, plain["reward_model"]["ground_truth"], plain["extra_info"],
                      method="goal_conditioned")


def test_trl_rows_and_trainer_use_the_stated_weights(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig

    from vpo.commands.train import build_train_rows
    from vpo.estimators.options import WeightOptions
    from vpo.integrations.trl import VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    rows = build_train_rows(TASK, 1, n=2, seed=0, goals=WeightOptions(seed=2))
    goals = [np.asarray(json.loads(r["example"])[GOAL_FIELD]) for r in rows]
    for row, w in zip(rows, goals, strict=True):
        np.testing.assert_allclose(stated(row["prompt"]), w, atol=0.006)
    with pytest.raises(ValueError, match="state goal weights"):
        path = tmp_path / "plain.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in build_train_rows(TASK, 1, n=2, seed=0)))
        build_train_rows(TASK, 1, data=str(path), goals=WeightOptions())
    tok = build_char_tokenizer(sorted(set("".join(r["prompt"] for r in rows)) | set("UDLR")))
    args = GRPOConfig(output_dir=str(tmp_path / "t"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=4, max_steps=1, use_cpu=True, bf16=False, report_to="none",
                      gradient_checkpointing=False, remove_unused_columns=False)
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), task=TASK, estimator="goal_conditioned", args=args,
                         train_dataset=Dataset.from_list(rows), processing_class=tok)
    vectors = [np.array([[1.0, 1.0, 0.0, 1.0]]), np.array([[1.0, 0.0, 1.0, 1.0]])]
    _, diagnostics = trainer.compute_advantages(vectors, ["p", "p"], 2, goals=[goals[0], goals[0]])
    scores = [float(v[0] @ goals[0]) for v in vectors]
    assert diagnostics["goal_conditioned/score_mean"] == pytest.approx(np.mean(scores))
    with pytest.raises(ValueError, match="goal weights its prompts state"):
        trainer.compute_advantages(vectors, ["p", "p"], 2, goals=[None, None])


def test_vpo_train_method_goal_conditioned_runs(tmp_path, capsys):
    pytest.importorskip("trl")
    import string

    from vpo.cli import main
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer(string.printable)
    folder = tmp_path / "model"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    out = tmp_path / "run"
    assert main(["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder), "--method",
                 "goal_conditioned", "--examples", "2", "--out", str(out), "--max-steps", "1", "--num-generations", "2",
                 "--per-device-train-batch-size", "2", "--max-completion-length", "4", "--force-cpu",
                 "--kl-beta", "0"]) == 0
    summary = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])
    assert summary["method"] == "goal_conditioned" and summary["steps"] == 1

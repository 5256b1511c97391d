"""A toy estimator registered here, in a test module, is usable from `vpo advantages`,
`vpo train --method`, VPOTrainer and the verl plugin without editing any other file: every
adapter reads the registry and the estimator's spec."""

import json

import numpy as np
import pytest

from vpo.cli import main
from vpo.estimators import get_spec, list_estimators, register_estimator
from vpo.estimators.common import grpo_result, require_single_answer, row_scalars
from vpo.objective import RewardBatch


@register_estimator("toy_centred", multi_answer=False, rollout_score="scalar")
def toy_centred(rewards, group_ids, *, scalar=None, shift: float = 0.0):
    """Toy: the fixed scalar centred on its group mean (Dr. GRPO), plus a constant shift."""
    batch = RewardBatch.from_rewards(rewards, group_ids)
    require_single_answer(batch, "toy_centred")
    result = grpo_result(batch, row_scalars(batch, scalar), "population", 0.0, "none", "none", prefix="toy_centred")
    result.advantages = result.advantages + shift
    return result


def test_the_registry_and_spec_know_it():
    assert "toy_centred" in list_estimators()
    spec = get_spec("toy_centred")
    assert not spec.multi_answer and spec.default_answers == 1 and spec.options == ("scalar", "shift")


def test_vpo_advantages_runs_it(capsys):
    assert main(["advantages", "--estimator", "toy_centred", "--answers", "1", "--groups", "2",
                 "--rollouts", "3"]) == 0
    out = capsys.readouterr().out
    assert "estimator toy_centred" in out and "toy_centred/group_std" in out


def _tiny_model_dir(tmp_path):
    pytest.importorskip("trl")
    from vpo.models import build_char_tokenizer, build_tiny_qwen2
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    tok = build_char_tokenizer(sorted(set(task.prompt(example, 1)) | set("UDLR")),
                               extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])
    folder = tmp_path / "model"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_vpo_train_and_vpotrainer_train_with_it(tmp_path, capsys):
    folder = _tiny_model_dir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder),
                 "--method", "toy_centred", "--examples", "2", "--out", str(out), "--max-steps", "2",
                 "--num-generations", "2", "--per-device-train-batch-size", "2", "--max-completion-length", "6",
                 "--learning-rate", "1e-3", "--force-cpu", "--kl-beta", "0"]) == 0
    summary = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])
    assert summary["method"] == "toy_centred" and summary["steps"] == 2 and summary["answers"] == 1


def test_vpotrainer_passes_its_options_and_rejects_unknown_ones(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from vpo.commands.train import build_train_rows
    from vpo.integrations.trl import VPOTrainer
    from vpo.tasks import get_task

    folder = _tiny_model_dir(tmp_path)
    task = get_task("maze", size=5)
    dataset = Dataset.from_list(build_train_rows(task, 1, n=2, seed=0))
    args = GRPOConfig(output_dir=str(tmp_path / "t"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=6, max_steps=1, use_cpu=True, bf16=False, report_to="none",
                      gradient_checkpointing=False, remove_unused_columns=False, logging_steps=1)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match="does not accept option"):
        VPOTrainer(model, task=task, estimator="toy_centred", estimator_options={"k": 2}, args=args,
                   train_dataset=dataset, processing_class=tok)
    with pytest.raises(ValueError, match="one answer per rollout"):
        VPOTrainer(model, task=task, answers=3, estimator="toy_centred", args=args, train_dataset=dataset,
                   processing_class=tok)
    trainer = VPOTrainer(model, task=task, estimator="toy_centred", estimator_options={"shift": 5.0}, args=args,
                         train_dataset=dataset, processing_class=tok)
    advantages, diagnostics = trainer.compute_advantages([np.array([[0.0, 1.0, 1.0, 0.0]]), np.zeros((1, 4))],
                                                         ["p", "p"], 2)
    np.testing.assert_allclose(advantages, [5.25, 4.75])
    assert "toy_centred/group_std" in diagnostics


def test_the_verl_plugin_registers_it():
    pytest.importorskip("verl")
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from vpo.integrations import verl_plugin
    from vpo.integrations.verl import compute_score

    assert "toy_centred" in verl_plugin.register() or "toy_centred" in ADV_ESTIMATOR_REGISTRY
    scores = [0.0, 1.0, 0.5, 0.5]
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor(scores)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 3)},
                               non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    config = OmegaConf.create({"vpo_options": {"shift": 1.0}})
    adv = compute_advantage(data, adv_estimator="toy_centred", config=config).batch["advantages"][:, 0]
    np.testing.assert_allclose(adv.numpy(), [0.5, 1.5, 1.0, 1.0], atol=1e-6)
    # and compute_score scores rollouts for it (its spec says: the fixed scalar of the one answer)
    from vpo.export import verl_row
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    row = verl_row(task, example, index=0, split="train", answers=1, task_params={"size": 5})
    out = compute_score("maze", "UP", row["reward_model"]["ground_truth"], row["extra_info"], method="toy_centred")
    assert out["score"] == pytest.approx(float(task.scalar(task.score("UP", example))))

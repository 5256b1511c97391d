"""The contributor's path: estimators defined and registered here, in a test module (each one
per-rollout reduction and an advantage rule, with no second score), run with no other edit
through `vpo advantages`, `vpo train --method`, VPOTrainer, verl's compute_score and
compute_advantage and OpenRLHF's reward function; in each engine the per-rollout score is the
estimator's own ``scores``."""

import json

import numpy as np
import pytest

from vpo.cli import main
from vpo.estimators import fixed_scalar, get_spec, group_norm, list_estimators, reduction_context, register_estimator
from vpo.estimators import rollout_score
from vpo.estimators.check import check_estimator


def centred(scores, group_ids, *, shift: float = 0.0):
    """Dr. GRPO's centring (no division), plus a constant shift."""
    return group_norm(scores, group_ids, std="population", eps=0.0, degenerate="none", scale="none") + shift


register_estimator("toy_centred", multi_answer=False, reduce=fixed_scalar, advantage=centred,
                   doc="Toy: the fixed scalar centred on its group mean (Dr. GRPO), plus a constant shift.")


def softmax_best(matrix, *, weights, beta: float = 5.0):
    """Softmax-weighted best of the set: mean over the K weights of sum_i softmax(beta v)_i v_i,
    v_i = w_k . r_i (beta -> inf: VPO's set score). It averages over the rows, so a zero
    (padding) row counts as an answer of value 0: registered with counts_zero_rows=True."""
    rows = np.asarray(matrix, dtype=np.float64)
    if rows.shape[0] == 0:
        return 0.0
    values = np.asarray(weights) @ rows.T  # (K, M)
    soft = np.exp(beta * (values - values.max(axis=1, keepdims=True)))
    return float(((soft / soft.sum(axis=1, keepdims=True)) * values).sum(axis=1).mean())


register_estimator("toy_softmax", multi_answer=True, reduce=softmax_best, advantage=group_norm, weights="per_step",
                   defaults={"std": "population", "eps": 1e-6, "degenerate": "zero", "scale": "group"},
                   counts_zero_rows=True)


BETA, K = 3.0, 16


def test_the_registry_and_spec_know_them_and_they_keep_the_contract():
    assert {"toy_centred", "toy_softmax"} <= set(list_estimators())
    spec = get_spec("toy_centred")
    assert not spec.multi_answer and spec.default_answers == 1 and spec.options == ("scalar", "shift")
    soft = get_spec("toy_softmax")
    assert soft.reduction_options == ("num_weights", "alpha", "sampler", "seed", "beta")
    assert soft.advantage_options == ("std", "eps", "degenerate", "scale")
    check_estimator("toy_centred")
    check_estimator("toy_softmax")


def test_vpo_advantages_runs_it(capsys):
    from vpo.commands.advantages import AdvantagesConfig, random_batch

    assert main(["advantages", "--estimator", "toy_centred", "--answers", "1", "--groups", "2",
                 "--rollouts", "3"]) == 0
    out = capsys.readouterr().out
    assert "estimator toy_centred" in out and "toy_centred/group_std" in out
    assert main(["advantages", "--estimator", "toy_softmax", "--groups", "2", "--rollouts", "3", "--seed", "4"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("p")]
    rewards, labels = random_batch(AdvantagesConfig(groups=2, rollouts=3, method="toy_softmax", seed=4))
    spec = get_spec("toy_softmax")
    own = [rollout_score(spec, m, **reduction_context(spec, key=k, dim=4, seed=4)) for m, k in zip(rewards, labels)]
    np.testing.assert_allclose([float(cells[-2]) for cells in lines], own, atol=5e-5)


def _tiny_model_dir(tmp_path):
    pytest.importorskip("trl")
    from vpo.models import build_char_tokenizer, build_tiny_qwen2
    from vpo.tasks import get_task

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    tok = build_char_tokenizer(sorted(set(task.prompt(example, 3)) | set("UDLR<>/_123")),
                               extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])
    folder = tmp_path / "model"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_vpo_train_trains_with_them(tmp_path, capsys):
    folder = _tiny_model_dir(tmp_path)
    for method in ("toy_centred", "toy_softmax"):
        out = tmp_path / method
        assert main(["train", "--task", "maze", "--task-params", "size=5", "--model", str(folder),
                     "--method", method, "--examples", "2", "--out", str(out), "--max-steps", "2",
                     "--num-generations", "2", "--per-device-train-batch-size", "2", "--max-completion-length", "6",
                     "--learning-rate", "1e-3", "--force-cpu", "--kl-beta", "0"]) == 0
        summary = json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])
        assert summary["method"] == method and summary["steps"] == 2
        assert summary["answers"] == get_spec(method).default_answers


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
                      gradient_checkpointing=False, remove_unused_columns=False, logging_steps=1, seed=5)
    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ValueError, match="does not accept option"):
        VPOTrainer(model, task=task, estimator="toy_centred", estimator_options={"k": 2}, args=args,
                   train_dataset=dataset, processing_class=tok)
    with pytest.raises(ValueError, match="one answer per rollout"):
        VPOTrainer(model, task=task, answers=3, estimator="toy_centred", args=args, train_dataset=dataset,
                   processing_class=tok)
    with pytest.raises(ValueError, match=r"\['weight_keys'\] are set by VPOTrainer"):
        VPOTrainer(model, task=task, answers=3, estimator="toy_softmax", estimator_options={"weight_keys": ["a"]},
                   args=args, train_dataset=dataset, processing_class=tok)
    trainer = VPOTrainer(model, task=task, estimator="toy_centred", estimator_options={"shift": 5.0}, args=args,
                         train_dataset=dataset, processing_class=tok)
    advantages, diagnostics = trainer.compute_advantages([np.array([[0.0, 1.0, 1.0, 0.0]]), np.zeros((1, 4))],
                                                         ["p", "p"], 2)
    np.testing.assert_allclose(advantages, [5.25, 4.75])
    assert "toy_centred/group_std" in diagnostics

    # the softmax toy: VPOTrainer keys its weights on the example ids, with the run's seed and step
    trainer = VPOTrainer(model, task=task, answers=3, estimator="toy_softmax",
                         estimator_options={"beta": BETA, "num_weights": K}, args=args, train_dataset=dataset,
                         processing_class=tok)
    rng = np.random.default_rng(0)
    matrices = [rng.integers(0, 3, size=(3, 4)) / 2.0 for _ in range(4)]
    keys = ["train-0", "train-0", "train-1", "train-1"]
    advantages, _ = trainer.compute_advantages(matrices, keys, 2)
    spec = get_spec("toy_softmax")
    own = [rollout_score(spec, m, beta=BETA, **reduction_context(spec, key=k, dim=4, seed=5, step=0, num_weights=K))
           for m, k in zip(matrices, keys)]
    np.testing.assert_allclose(advantages, group_norm(own, [0, 0, 1, 1], std="population", eps=1e-6,
                                                      degenerate="zero", scale="group"), atol=1e-9)
    assert np.ptp(advantages) > 0.5


def _maze_rows(m: int):
    from vpo.export import verl_row
    from vpo.tasks import get_task
    from vpo.tasks.maze import route_via_diamond, route_via_gold

    task = get_task("maze", size=5)
    rows, texts = [], []
    for i, example in enumerate(task.examples("train", 2, seed=0)):
        gold, diamond = " ".join(route_via_gold(example)), " ".join(route_via_diamond(example))
        row = verl_row(task, example, index=i, split="train", answers=m, task_params={"size": 5})
        for text in (f"<route_1>{gold}</route_1><route_2>{diamond}</route_2>", f"<route_1>{diamond}</route_1>",
                     f"<route_1>{gold}</route_1>", "no route"):
            rows.append(row)
            texts.append(text)
    return task, rows, texts


def test_verl_compute_score_and_compute_advantage_serve_them():
    pytest.importorskip("verl")
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from vpo.integrations import verl_plugin
    from vpo.integrations.verl import compute_score

    verl_plugin.register()
    assert {"toy_centred", "toy_softmax"} <= set(ADV_ESTIMATOR_REGISTRY)
    scores = [0.0, 1.0, 0.5, 0.5]
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor(scores)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 3)},
                               non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    config = OmegaConf.create({"vpo_options": {"shift": 1.0}})
    adv = compute_advantage(data, adv_estimator="toy_centred", config=config).batch["advantages"][:, 0]
    np.testing.assert_allclose(adv.numpy(), [0.5, 1.5, 1.0, 1.0], atol=1e-6)

    # the softmax toy end to end: its reduction option reaches compute_score, its scores are its own
    task, rows, texts = _maze_rows(3)
    step = 2
    got = [compute_score("maze", text, row["reward_model"]["ground_truth"], {**row["extra_info"], "global_steps": step},
                         method="toy_softmax", num_weights=K, beta=BETA)["score"] for row, text in zip(rows, texts)]
    matrices = [task.score_chain(text, json.loads(row["reward_model"]["ground_truth"]), 3)
                for row, text in zip(rows, texts)]
    ids = [row["extra_info"]["example_id"] for row in rows]
    result = get_spec("toy_softmax").fn(matrices, ids, num_weights=K, beta=BETA, seed=0, step=step)
    np.testing.assert_allclose(got, result.scores, rtol=1e-12, atol=1e-12)
    hard = compute_score("maze", texts[0], rows[0]["reward_model"]["ground_truth"], rows[0]["extra_info"],
                         method="toy_softmax", num_weights=K, beta=200.0)["score"]
    assert abs(hard - got[0]) > 1e-3  # beta acts: it is not VPO's hard max under another name
    with pytest.raises(ValueError, match=r"vpo_options.*beta"):
        compute_advantage(data, adv_estimator="toy_softmax", config=OmegaConf.create({"vpo_options": {"beta": 1.0}}))
    with pytest.raises(ValueError, match="advantage rule"):
        compute_score("maze", texts[0], rows[0]["reward_model"]["ground_truth"], rows[0]["extra_info"],
                      method="toy_softmax", eps=0.1)
    bs = len(got)
    token_rewards = torch.zeros(bs, 4, dtype=torch.float64)
    token_rewards[:, -1] = torch.tensor(got, dtype=torch.float64)
    batch = DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": torch.ones(bs, 4)},
                                non_tensors={"uid": np.array(ids, dtype=object)})
    adv = compute_advantage(batch, adv_estimator="toy_softmax", config=OmegaConf.create({})).batch["advantages"]
    np.testing.assert_allclose(adv[:, 0].numpy(), result.advantages, atol=1e-6)
    assert np.ptp(result.advantages) > 0.5


def test_openrlhf_reward_function_serves_them():
    from vpo.integrations import openrlhf

    task, rows, texts = _maze_rows(3)
    got = []
    for row, text in zip(rows, texts):
        label = openrlhf.make_label("maze", json.loads(row["reward_model"]["ground_truth"]), m=3,
                                    index=row["extra_info"]["index"], task_params={"size": 5}, method="toy_softmax",
                                    num_weights=K, example_id=row["extra_info"]["example_id"],
                                    options={"beta": BETA})
        got.append(openrlhf.reward_func(["prompt: " + text], ["prompt: "], [label])["rewards"])
    matrices = [task.score_chain(text, json.loads(row["reward_model"]["ground_truth"]), 3)
                for row, text in zip(rows, texts)]
    ids = [row["extra_info"]["example_id"] for row in rows]
    result = get_spec("toy_softmax").fn(matrices, ids, num_weights=K, beta=BETA, seed=0)
    np.testing.assert_allclose(got, result.scores, rtol=1e-12, atol=1e-12)
    assert np.ptp(got) > 0.1


def _trl_rows(m: int, method: str):
    from vpo.export import trl_row
    from vpo.tasks import get_task
    from vpo.tasks.maze import route_via_diamond, route_via_gold

    task = get_task("maze", size=5)
    rows, texts = [], []
    for i, example in enumerate(task.examples("train", 2, seed=0)):
        gold, diamond = " ".join(route_via_gold(example)), " ".join(route_via_diamond(example))
        row = {**trl_row(task, example, index=i, split="train", answers=m, task_params={"size": 5}), "method": method}
        for text in (f"<route_1>{gold}</route_1><route_2>{diamond}</route_2>", f"<route_1>{diamond}</route_1>",
                     f"<route_1>{gold}</route_1>", "no route"):
            rows.append(row)
            texts.append(text)
    return task, rows, texts


def test_the_stock_grpo_trainer_and_trl_grpo_take_them(tmp_path):
    """A group-norm estimator reaches TRL's stock GRPOTrainer (EstimatorReward) and ``trl grpo
    --reward_funcs vpo.integrations.trl.estimator_reward`` (the rows' method column) with no edit:
    the reward is its own score; one that needs its own advantage rule is refused."""
    pytest.importorskip("trl")
    import importlib
    from types import SimpleNamespace

    from vpo.integrations.trl import EstimatorReward

    task, rows, texts = _trl_rows(3, "toy_softmax")
    prompts, ids = [r["prompt"] for r in rows], [r["example_id"] for r in rows]
    state, step = SimpleNamespace(global_step=2), 2
    reward = EstimatorReward(task, "toy_softmax", seed=0, num_weights=K, beta=BETA)
    assert reward.answers == 3 and reward.__name__ == "toy_softmax"
    got = reward(prompts, texts, example=[r["example"] for r in rows], example_id=ids, trainer_state=state)
    matrices = [task.score_chain(text, json.loads(row["example"]), 3) for row, text in zip(rows, texts)]
    result = get_spec("toy_softmax").fn(matrices, ids, num_weights=K, beta=BETA, seed=0, step=step)
    np.testing.assert_allclose(got, result.scores, rtol=1e-12, atol=1e-12)
    assert np.ptp(got) > 0.1

    module, name = "vpo.integrations.trl.estimator_reward".rsplit(".", 1)  # how `trl grpo --reward_funcs` loads it
    by_path = getattr(importlib.import_module(module), name)
    columns = {key: [r[key] for r in rows] for key in ("task", "task_params", "answers", "example", "example_id",
                                                       "method")}
    n = len(rows)
    np.testing.assert_allclose(by_path(prompts, texts, **columns, num_weights=[K] * n, trainer_state=state),
                               EstimatorReward(task, "toy_softmax", seed=0, num_weights=K)(
                                   prompts, texts, example=columns["example"], example_id=ids, trainer_state=state),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="'method' column"):
        by_path(prompts, texts, **{k: v for k, v in columns.items() if k != "method"})
    with pytest.raises(ValueError, match="needs its own advantage rule.*VPOTrainer"):
        EstimatorReward(task, "toy_centred")
    with pytest.raises(ValueError, match="not an option of its reduction"):
        EstimatorReward(task, "toy_softmax", eps=0.1)

    # one real step of the stock trainer with it
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from vpo.commands.train import build_train_rows

    folder = _tiny_model_dir(tmp_path)
    args = GRPOConfig(output_dir=str(tmp_path / "stock"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=6, max_steps=1, use_cpu=True, bf16=False, report_to="none",
                      gradient_checkpointing=False, remove_unused_columns=False, logging_steps=1, seed=5)
    trainer = GRPOTrainer(AutoModelForCausalLM.from_pretrained(folder),
                          reward_funcs=EstimatorReward(task, "toy_softmax", num_weights=K), args=args,
                          train_dataset=Dataset.from_list(build_train_rows(task, 3, n=2, seed=0)),
                          processing_class=AutoTokenizer.from_pretrained(folder))
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/toy_softmax/mean" in entry]
    assert logged and np.isfinite(logged[0]["rewards/toy_softmax/mean"])

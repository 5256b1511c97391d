"""VPOTrainer's KL reference from a model object (``ref_model=``): built by TRL's own loader from
the policy's weights as they are, so it equals the deep copy ``vpo train`` used to hand TRL
(same weights, same dtype), also for a policy that cannot be re-loaded by its name."""

from __future__ import annotations

import copy
import json
import tempfile

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from vpo.integrations.trl import VPOTrainer  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.tasks import get_task  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return get_task("maze", size=5)


@pytest.fixture(scope="module")
def tok(task):
    example = task.examples("train", 1, seed=0)[0]
    return build_char_tokenizer(sorted(set(task.prompt(example, 1)) | set("UDLR")))


def _dataset(task):
    rows = [{"prompt": task.prompt(ex, 1), "example": json.dumps(ex)} for ex in task.examples("train", 2, seed=0)]
    return Dataset.from_list(rows)


def _config(tmp_path, beta):
    return GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                      bf16=False, gradient_checkpointing=False, beta=beta)


def _changed_policy(tok, tmp_path, dtype):
    """A policy whose checkpoint on disk is not what it is now: one embedding row added after loading
    (as ``load_pretrained`` adds ``<pad>``), in ``dtype``."""
    folder = tmp_path / "saved"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.resize_token_embeddings(model.get_input_embeddings().num_embeddings + 1)
    return model, folder


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reference_is_the_policy_as_it_was(task, tok, tmp_path, dtype, monkeypatch):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    model, _ = _changed_policy(tok, tmp_path, dtype)
    before = copy.deepcopy(model)  # what `vpo train` handed TRL as the reference until now
    name = model.config._name_or_path
    trainer = VPOTrainer(model, task=task, estimator="grpo", args=_config(tmp_path, 0.04),
                         train_dataset=_dataset(task), processing_class=tok, ref_model=model)
    ref = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert ref is not model and ref is not trainer.model
    assert ref.dtype == before.dtype == dtype
    expected, got = before.state_dict(), ref.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, key
        torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=key)
    assert model.config._name_or_path == name  # the policy's name is its own again
    assert not any(temporary.iterdir())  # the folder TRL loaded it from is gone
    trainer.train()  # a step with the KL term runs on it
    assert "kl" in trainer.state.log_history[0]


def test_without_it_trl_reloads_the_policy_by_name_and_gets_the_old_rows(task, tok, tmp_path):
    # the failure ref_model= exists for: TRL's reference is the checkpoint on disk, not the policy
    model, _ = _changed_policy(tok, tmp_path, torch.float32)
    trainer = VPOTrainer(model, task=task, estimator="grpo", args=_config(tmp_path, 0.04),
                         train_dataset=_dataset(task), processing_class=tok)
    ref = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert ref.get_input_embeddings().num_embeddings == model.get_input_embeddings().num_embeddings - 1


def test_a_reference_nothing_would_use_is_refused(task, tok, tmp_path):
    model = build_tiny_qwen2(tok, seed=0)
    with pytest.raises(ValueError, match="beta is 0"):
        VPOTrainer(model, task=task, estimator="grpo", args=_config(tmp_path, 0.0), train_dataset=_dataset(task),
                   processing_class=tok, ref_model=model)
    with pytest.raises(ValueError, match="processing_class"):
        VPOTrainer(model, task=task, estimator="grpo", args=_config(tmp_path, 0.04), train_dataset=_dataset(task),
                   ref_model=model)
    with pytest.raises(ValueError, match="transformers model"):
        VPOTrainer(model, task=task, estimator="grpo", args=_config(tmp_path, 0.04), train_dataset=_dataset(task),
                   processing_class=tok, ref_model="policy")

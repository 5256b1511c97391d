"""Tests that need a CUDA GPU (marker ``gpu``; they skip with the reason elsewhere, see
conftest.py): bf16 sampling against fp32, a VPOTrainer step on cuda, the auto batch size in real
GPU memory, chain-seeded pools on cuda independent of the batch size, verl's advantage path on
cuda tensors, and ``vpo train``'s CUDA defaults. ``scripts/gpu_check.sh`` runs them
(``pytest -m gpu``); ``tests/demo/test_demo_paper_maze.py`` holds the demo's own gpu test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toy_tasks import LetterTask

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

ALPHABET = "abcdefghij <>_/ANSWERgiv0123456789"
PROMPTS = [[f"{i} ANSWER"] * 6 for i in (1, 10, 100, 1000)]  # four prompt lengths: left padding


@pytest.fixture(scope="module")
def letters(tmp_path_factory):
    """A tiny config-built Qwen2 with a character tokenizer, saved (the sampling tests' model)."""
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    folder = tmp_path_factory.mktemp("letters") / "model"
    tok = build_char_tokenizer(ALPHABET, extra_tokens=["<ans_1>", "</ans_1>", "<ans_2>", "</ans_2>"])
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _sample(folder, dtype, batch_size, seed=5):
    from vpo.models import load_checkpoint
    from vpo.sampling import HFSampler

    model, tok = load_checkpoint(folder, dtype=dtype, device="cuda")
    sampler = HFSampler(model, tok, batch_size=batch_size, seeding="chain")
    return sampler, sampler.generate(PROMPTS, temperature=0.7, top_p=0.9, max_new_tokens=16, seed=seed)


def test_bf16_sampling_tracks_fp32(letters):
    from vpo.models import load_checkpoint

    models = {dtype: load_checkpoint(letters, dtype=dtype, device="cuda") for dtype in ("float32", "bfloat16")}
    (m32, tok), (m16, _) = models["float32"], models["bfloat16"]
    assert next(m16.parameters()).dtype == torch.bfloat16
    ids = tok(["10 ANSWER", "1000 ANSWER"], return_tensors="pt", padding=True).to("cuda")
    with torch.no_grad():
        p32 = torch.softmax(m32(**ids).logits[:, -1].float(), dim=-1)
        p16 = torch.softmax(m16(**ids).logits[:, -1].float(), dim=-1)
    assert torch.max(torch.abs(p32 - p16)).item() < 0.02  # bf16 keeps ~3 significant digits
    # chain-seeded draws: a bf16 chain leaves the fp32 one only where a uniform falls in a rounding band
    _, rows32 = _sample(letters, "float32", 8)
    _, rows16 = _sample(letters, "bfloat16", 8)
    same = np.mean([a.text == b.text for r32, r16 in zip(rows32, rows16, strict=True)
                    for a, b in zip(r32, r16, strict=True)])
    assert same >= 0.5, same


def test_chain_seeded_pools_do_not_depend_on_the_batch_size_on_cuda(letters):
    runs = {bs: _sample(letters, "bfloat16", bs)[1] for bs in (1, 5, 24)}
    assert runs[1] == runs[5] == runs[24]
    assert len({g.text for row in runs[1] for g in row}) > 1


def test_auto_batch_size_fits_in_gpu_memory(letters):
    from vpo.sampling import MAX_CHAINS_PER_CALL

    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    sampler, _ = _sample(letters, "bfloat16", 0)
    prompts = [[f"{i} ANSWER"] * 64 for i in range(40)]  # 2,560 chains: several auto-sized calls
    chosen = sampler.chains_per_call(prompts, 64)
    assert 1 < chosen <= MAX_CHAINS_PER_CALL
    torch.cuda.reset_peak_memory_stats()
    rows = sampler.generate(prompts, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=0)
    assert sum(len(row) for row in rows) == 2560
    assert torch.cuda.max_memory_allocated() < 0.75 * free  # sized for half the free memory, with margin


def test_vpo_trainer_step_on_cuda(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset

    from vpo.integrations.trl import RLConfig, VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    task = LetterTask()
    tok = build_char_tokenizer(ALPHABET, extra_tokens=["<ans_1>", "</ans_1>", "<ans_2>", "</ans_2>"])
    model = build_tiny_qwen2(tok, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    rows = [{"prompt": task.prompt({"id": i}, 2), "example": json.dumps({"id": i})} for i in range(4)]
    args = RLConfig(num_generations=4, per_device_train_batch_size=8, max_completion_length=12,
                    learning_rate=1e-3, kl_beta=0.0).to_grpo_config(str(tmp_path), answers=2, max_steps=2,
                                                                   report_to="none", save_strategy="no")
    assert not args.use_cpu and args.bf16 == torch.cuda.is_bf16_supported() and args.gradient_checkpointing
    trainer = VPOTrainer(model, task=task, answers=2, estimator="vpo", args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tok)
    trainer.train()
    assert next(trainer.model.parameters()).device.type == "cuda"
    after = [p.detach().cpu() for p in trainer.model.parameters()]
    assert any(not torch.equal(a, b.cpu()) for a, b in zip(after, before, strict=True))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(np.isfinite(losses))


def test_verl_advantages_on_cuda_tensors_match_cpu():
    pytest.importorskip("verl", reason="verl is not installed (pip install -e .[verl])")
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import vpo.integrations.verl_plugin  # noqa: F401  (registers the estimators, as verl's entry point does)
    from vpo.objective import set_scores

    rng = np.random.default_rng(0)
    uids = [f"uid-{i // 4}" for i in range(12)]
    matrices = [rng.uniform(size=(3, 4)) for _ in uids]
    scores = set_scores(matrices, rng.dirichlet(np.ones(4), size=64)).tolist()

    def advantages(device):
        lengths = torch.tensor([3 + (5 * i) % 9 for i in range(12)])
        mask = (torch.arange(12)[None, :] < lengths[:, None]).float()
        rewards = torch.zeros(12, 12)
        rewards[torch.arange(12), lengths - 1] = torch.tensor(scores, dtype=torch.float32)
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards.to(device), "response_mask": mask.to(device)},
                                   non_tensors={"uid": np.array(uids, dtype=object)})
        out = compute_advantage(data, adv_estimator="vpo", num_repeat=4, norm_adv_by_std_in_grpo=True)
        adv = out.batch["advantages"]
        assert adv.device.type == device
        return adv[:, 0].double().cpu().numpy()

    on_cuda, on_cpu = advantages("cuda"), advantages("cpu")
    np.testing.assert_allclose(on_cuda, on_cpu, rtol=1e-5, atol=1e-5)
    assert np.ptp(on_cuda) > 0.5
    for g in range(3):  # within each group: centred, and in the order of the set scores
        group = slice(4 * g, 4 * g + 4)
        assert abs(on_cuda[group].sum()) < 1e-4
        assert list(np.argsort(on_cuda[group])) == list(np.argsort(scores[group]))


def test_vpo_train_turns_on_bf16_and_checkpointing_on_cuda():
    from vpo.integrations.trl import RLConfig

    cfg = RLConfig().to_grpo_config("out", task="maze", answers=3)
    assert not cfg.use_cpu and cfg.gradient_checkpointing
    assert cfg.bf16 == torch.cuda.is_bf16_supported()
    forced = RLConfig(force_cpu=True).to_grpo_config("out", task="maze")
    assert forced.use_cpu and not forced.bf16

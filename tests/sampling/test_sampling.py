"""vpo.sampling: per-chain seeded draws (hand-computed), batch-size independence, the old stream
replayed exactly, option checks that fail before any model loads, and the vLLM adapter's pure parts.

The pinned numbers below were recorded with ``vpo eval`` and ``vpo search best-of-n`` at commit
0120449 (before chains were seeded one by one), on the checkpoints ``letters_checkpoint`` builds.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from vpo.sampling import (ChainDraw, HFSampler, SamplingOptions, chain_uniforms, check_vllm_inputs, finish_chain,
                          kv_bytes_per_token, sampling_chains)
from vpo.tasks import register_task
from toy_tasks import LetterTask

torch = pytest.importorskip("torch")

ALPHABET = "abcdefghij <>_/ANSWERgiv0123456789"
HAS_CUDA = torch.cuda.is_available()
HAS_VLLM = importlib.util.find_spec("vllm") is not None


@register_task("sampling-letters")
class SamplingLetters(LetterTask):
    """``LetterTask`` under its own registered name (the CLI tests run it by name)."""

    def examples(self, split="train", n=None, *, seed=None, source=None):
        return [{"id": i} for i in range(4 if n is None else n)]


def letters_checkpoint(folder, seed):
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer(ALPHABET, extra_tokens=["<ans_1>", "</ans_1>", "<ans_2>", "</ans_2>"])
    build_tiny_qwen2(tok, seed=seed).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # the pinned numbers were recorded with one thread
    root = tmp_path_factory.mktemp("letters")
    yield letters_checkpoint(root / "a", 0), letters_checkpoint(root / "b", 1)
    torch.set_num_threads(threads)


# ----- the draw -------------------------------------------------------------------------------

def _draw(probs, uniforms, **kw):
    scores = torch.log(torch.tensor([probs] * len(uniforms), dtype=torch.float32))
    draw = ChainDraw(torch.tensor([[u] for u in uniforms], dtype=torch.float64), prompt_length=3, **kw)
    out = draw(torch.zeros((len(uniforms), 3), dtype=torch.long), scores)
    assert torch.all((out == 0) | torch.isinf(out)) and torch.all((out == 0).sum(dim=1) == 1)
    return out.argmax(dim=1).tolist()


def test_chain_draw_takes_the_token_whose_cumulative_probability_passes_u():
    probs = [0.1, 0.2, 0.3, 0.4]                                 # cdf 0.1 0.3 0.6 1.0
    assert _draw(probs, [0.05, 0.15, 0.35, 0.65, 0.999], temperature=1.0, top_p=1.0) == [0, 1, 2, 3, 3]
    # temperature 0.5: p^2 / 0.30 -> cdf 0.033 0.167 0.467 1.0
    assert _draw(probs, [0.02, 0.1, 0.3, 0.5], temperature=0.5, top_p=1.0) == [0, 1, 2, 3]
    # top-p 0.7 keeps 0.3 and 0.4 (transformers drops the tail whose mass is <= 0.3): 3/7, 4/7
    assert _draw(probs, [0.0, 0.42, 0.43, 0.9], temperature=1.0, top_p=0.7) == [2, 2, 3, 3]


def test_chain_draw_reads_the_uniform_of_the_current_step():
    uniforms = torch.tensor([[0.05, 0.95]], dtype=torch.float64)
    draw = ChainDraw(uniforms, prompt_length=2, temperature=1.0, top_p=1.0)
    scores = torch.log(torch.tensor([[0.5, 0.5]]))
    assert draw(torch.zeros((1, 2), dtype=torch.long), scores).argmax().item() == 0   # step 0
    assert draw(torch.zeros((1, 3), dtype=torch.long), scores).argmax().item() == 1   # step 1


def test_chain_uniforms_are_per_chain_and_do_not_depend_on_their_batch():
    both = chain_uniforms(7, [(0, 0), (0, 1)], 6)
    alone = chain_uniforms(7, [(0, 1)], 4)
    np.testing.assert_array_equal(both[1, :4], alone[0])          # same chain, other batch, shorter
    assert not np.allclose(both[0], both[1])
    assert not np.allclose(chain_uniforms(8, [(0, 0)], 6)[0], both[0])
    assert np.all((both >= 0) & (both < 1))
    chain_uniforms(-1, [(0, 0)], 2)                               # any int seeds


def test_finish_chain_cuts_at_eos_and_drops_padding():
    assert finish_chain([5, 6, 2, 7, 0], eos_id=2, pad_id=0) == ([5, 6], False)
    assert finish_chain([5, 0, 6], eos_id=2, pad_id=0) == ([5, 6], True)
    assert finish_chain([2, 2], eos_id=2, pad_id=2) == ([], False)


def test_auto_batch_size_fills_the_share_of_the_free_memory():
    """A Qwen2.5-1.5B-like cache: 28 layers x 2 KV heads x 128 x 2 bytes x 2 (K and V) = 28672 B per
    token; hidden 1536, MLP 8960, 12 heads, vocabulary 151,936; 100 prompt + 2,000 new tokens."""
    from vpo.workload import ModelShape, allocated_budget, reserved_bytes

    shape = ModelShape(parameters=1_500_000_000, layers=28, kv_heads=2, head_dim=128, vocab=151936, hidden=1536,
                       mlp=8960, heads=12)
    assert shape.kv_bytes_per_token(2) == 28672
    # one chain: its static KV cache, the prompt's forward pass (widest layer 4 x 1536 + 3 x 8960 elements of
    # 2 bytes, a float mask row over 2,100 tokens) and one step's logits (28 B a vocabulary entry)
    per_chain = 28672 * 2100 + 100 * ((4 * 1536 + 3 * 8960) * 2 + 2100 * 4) + 28 * 151936   # 71,910,208 B
    weights = 3_000_000_000
    share = 40e9                                                  # MEMORY_SHARE (0.5) of 80 GB free
    chains = sampling_chains(shape, share, held=weights, prompt=100, new_tokens=2000, itemsize=2)
    assert chains == (allocated_budget(share) - weights) // per_chain == 421
    assert reserved_bytes(weights + chains * per_chain) <= share < reserved_bytes(weights + (chains + 1) * per_chain)
    # a dynamic cache peaks either over the prompt (its prompt-long cache and the prompt's pass) or at the end
    # (the full cache and one layer's grown copy): the live tensors, not what the allocator keeps of them
    dynamic = max(28672 * 100 + 100 * ((4 * 1536 + 3 * 8960) * 2 + 2100 * 4), 28672 * 2100 + 28672 * 2100 // 28)
    assert sampling_chains(shape, share, held=weights, prompt=100, new_tokens=2000, itemsize=2, kv_cache="dynamic") \
        == (allocated_budget(share) - weights) // (dynamic + 28 * 151936) == 454
    assert sampling_chains(shape, 1e3, held=weights, prompt=100, new_tokens=2000, itemsize=2) == 1
    tiny = ModelShape(parameters=1000, layers=1, kv_heads=1, head_dim=8, vocab=40, hidden=8, mlp=16, heads=1)
    assert sampling_chains(tiny, 80e9, held=0, prompt=10, new_tokens=90, itemsize=4) == 1024   # the cap


def test_static_and_dynamic_kv_caches_sample_the_same_chains(checkpoints):
    """The preallocated cache only changes where the keys live: the same chains on CPU."""
    from vpo.models import load_checkpoint

    model, tok = load_checkpoint(checkpoints[0])
    prompts = [[f"{i} ANSWER"] * 4 for i in (1, 10, 100, 1000)]   # four prompt lengths: left padding
    runs = {cache: HFSampler(model, tok, batch_size=6, kv_cache=cache).generate(
        prompts, temperature=0.7, top_p=0.9, max_new_tokens=12, seed=5) for cache in ("static", "dynamic")}
    assert runs["static"] == runs["dynamic"]
    assert HFSampler(model, tok).kv_cache == "dynamic"            # auto on CPU
    assert not hasattr(model, "_cache")                           # a static cache is not kept between pools
    with pytest.raises(ValueError, match="kv_cache must be one of auto, static, dynamic"):
        HFSampler(model, tok, kv_cache="paged")


def test_a_call_out_of_gpu_memory_is_retried_at_half_the_batch_with_the_same_chains(checkpoints, capsys):
    from vpo.models import load_checkpoint

    model, tok = load_checkpoint(checkpoints[0])
    prompts = [[f"{i} ANSWER"] * 4 for i in (1, 10, 100)]
    settings = dict(temperature=0.7, top_p=0.9, max_new_tokens=10, seed=3)
    expected = HFSampler(model, tok, batch_size=3).generate(prompts, **settings)
    generate = model.generate

    def small_gpu(**kwargs):   # a card that holds 3 chains a call
        if kwargs["input_ids"].shape[0] > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (faked)")
        return generate(**kwargs)

    model.generate = small_gpu
    try:
        sampler = HFSampler(model, tok, batch_size=12)
        assert sampler.generate(prompts, desc="pool", **settings) == expected and sampler.last_batch == 3
        assert "pool: out of GPU memory at 12 chains per call; going on with 6" in capsys.readouterr().err
        with pytest.raises(torch.cuda.OutOfMemoryError):   # batch seeding: a smaller batch is another stream
            HFSampler(model, tok, batch_size=12, seeding="batch").generate(prompts, **settings)
    finally:
        del model.generate


def test_kv_bytes_per_token_of_a_tiny_llama():
    from vpo.models import build_char_tokenizer, build_tiny_llama

    model = build_tiny_llama(build_char_tokenizer("ab"), hidden=16, layers=3, heads=2, mlp=32)
    assert kv_bytes_per_token(model) == 2 * 3 * 2 * 8 * 4
    assert kv_bytes_per_token(model.to(torch.bfloat16)) == 2 * 3 * 2 * 8 * 2


# ----- the transformers sampler ----------------------------------------------------------------

def test_chain_seeding_gives_the_same_pools_for_any_batch_size(checkpoints):
    from vpo.models import load_checkpoint

    model, tok = load_checkpoint(checkpoints[0])
    prompts = [[f"{i} ANSWER"] * 3 for i in (1, 10, 100)]          # three prompt lengths: left padding
    runs = {bs: HFSampler(model, tok, batch_size=bs).generate(prompts, temperature=0.7, top_p=0.9,
                                                               max_new_tokens=12, seed=5)
            for bs in (1, 8)}
    assert runs[1] == runs[8]
    texts = [g.text for row in runs[1] for g in row]
    assert len(set(texts)) > 1                                    # chains differ from each other
    again = HFSampler(model, tok, batch_size=2).generate(prompts, temperature=0.7, top_p=0.9, max_new_tokens=12,
                                                         seed=6)
    assert again != runs[1]                                       # another seed, other chains
    assert all(0 <= g.tokens <= 12 for row in runs[1] for g in row)


def test_sampler_checks_its_arguments(checkpoints):
    from vpo.models import load_checkpoint

    model, tok = load_checkpoint(checkpoints[0])
    with pytest.raises(ValueError, match="seeding"):
        HFSampler(model, tok, seeding="global")
    with pytest.raises(ValueError, match="batch_size"):
        HFSampler(model, tok, batch_size=-1)
    with pytest.raises(ValueError, match="temperature"):
        HFSampler(model, tok).generate([["x"]], temperature=0.0, top_p=1.0, max_new_tokens=4, seed=0)


# ----- the old stream, replayed (same numbers as before) -------------------------------------------

OLD_EVAL_M1_TEXTS = [
    ["R7g<ans_2>", "/6<ans_1>834EE_", "j<ans_1>eehA4>j", "R</ans_1>Eaa684gW", "e9", "48Eeg9_R8"],
    ["hh/vei1N", "R2 v<ans_1>4fee<ans_1>", "8g72>h<ans_1>W", "><8eR6/b5<ans_2>", "<ans_1>veh813A8",
     "Rjc<ans_1>3<ans_2>b</ans_1><ans_1>j"],
    ["R<ans_2>_ea", "29dgR4ehi2", "3a</ans_2>Sh_N901", "1E<ans_1>7b<ans_2>", "7c<ans_2>Ngce", "AR 3c4N3a6"],
    ["egb<ans_1><ans_1>NN99N", "</ans_1>f A6AvN<ans_2>", "gdEAAi2E", "<</ans_1>N4i3E", "1E></ans_1>/A>0hb",
     " </ans_1>ic76R<ans_2>//"]]
OLD_EVAL_M1 = {
    "best_at_k": [0.3888888888888889, 0.5388888888888889, 0.5999999999999999, 0.6333333333333333,
                  0.6527777777777779, 0.6666666666666666],
    "pref_best_at_k": [0.38597761975969835, 0.5466255847644748, 0.626283899906122, 0.681392504098456,
                       0.7216525707472305, 0.7511878082200532],
    "pass_at_k": [0.04166666666666666, 0.08333333333333331, 0.125, 0.16666666666666666, 0.20833333333333334, 0.25],
    "diversity": 1.0333333333333334, "completion_rate": 0.7916666666666667}
OLD_EVAL_M2_B4_TEXTS = [
    ["Wefg99g<ans_2>", "/>2A<68<9", "jh<ans_1>3e1<ans_1>292"], ["e2R1 </ans_1>2jE", "", "R7<ans_1>EEd Ne"],
    ["hE/e</ans_2>bWev", "</ans_1></ans_1>E c<ans_1>fiav", "2f7E"],
    ["eg34S3RRci", "hS<ans_1></ans_1> e8h<ans_1>/", "<ans_1>7 c<<ans_1>3bA7"]]
OLD_EVAL_M2_B4 = {
    "best_at_k": [0.027777777777777776, 0.05555555555555555, 0.08333333333333333, 0.1111111111111111,
                  0.1388888888888889, 0.16666666666666666],
    "pref_best_at_k": [0.02909580009561013, 0.05819160019122026, 0.0872874002868304, 0.11638320038244052,
                       0.14547900047805068, 0.1745748005736608],
    "pass_at_k": [0.0] * 6, "diversity": 0.16666666666666666, "completion_rate": 0.08333333333333333}
OLD_SEARCH = {
    "A": {"best_at_k": [0.16666666666666666, 0.25925925925925924, 0.3055555555555555, 0.3333333333333333],
          "pass_at_k": [0.0] * 4,
          "coverage_at_k": [0.16666666666666666, 0.27777777777777773, 0.3611111111111111, 0.4444444444444444],
          "picks": [0, 1, 2]},
    "B": {"best_at_k": [0.0] * 4, "pass_at_k": [0.0] * 4, "coverage_at_k": [0.0] * 4, "picks": [0, 0, 0]}}
REFERENCE = ["--backend", "hf", "--device", "cpu", "--dtype", "float32"]


def _eval(model, out, *extra):
    from vpo.cli import main

    assert main(["eval", "--task", "sampling-letters", "--model", model, "--examples", "4", "--pool", "6",
                 "--max-new-tokens", "10", "--no-progress", "--out", str(out), *extra]) == 0
    (entry,) = json.loads((out / "metrics.json").read_text())["methods"].values()
    texts = [json.loads(line) for line in (out / "pool.npz.jsonl").read_text().splitlines()]
    return entry, texts


@pytest.mark.parametrize("seeding", [["--seeding", "batch"], []], ids=["batch", "default"])
def test_vpo_eval_with_seeding_batch_reproduces_the_numbers_before_chain_seeding(checkpoints, tmp_path, seeding):
    # the default (--seeding auto) is the old stream for --backend hf on CPU
    for extra, texts, numbers in ((["--answers", "1"], OLD_EVAL_M1_TEXTS, OLD_EVAL_M1),
                                  (["--answers", "2", "--batch-size", "4"], OLD_EVAL_M2_B4_TEXTS, OLD_EVAL_M2_B4)):
        entry, got = _eval(checkpoints[0], tmp_path / extra[1], *REFERENCE, *seeding, *extra)
        assert got == texts
        for key, value in numbers.items():
            assert entry[key]["mean"] == pytest.approx(value, abs=1e-12), key


def test_vpo_search_with_seeding_batch_reproduces_the_numbers_before_chain_seeding(checkpoints, tmp_path):
    from vpo.cli import main

    assert main(["search", "best-of-n", "--task", "sampling-letters", "--model", ",".join(checkpoints),
                 "--labels", "A,B", "--answers", "1,2", "--pool", "4", "--examples", "3", "--max-new-tokens", "10",
                 "--out", str(tmp_path), *REFERENCE, "--seeding", "batch"]) == 0
    report = json.loads((tmp_path / "search.json").read_text())
    for label, old in OLD_SEARCH.items():
        entry = report["checkpoints"][label]
        assert [p["best_index"] for p in entry["picks"]] == old["picks"]
        for name in ("best_at_k", "pass_at_k", "coverage_at_k"):
            assert entry["curves"][name] == pytest.approx(old[name], abs=1e-12), (label, name)


def test_vpo_eval_pools_do_not_depend_on_the_batch_size(checkpoints, tmp_path):
    (entry_1, texts_1), (entry_8, texts_8) = (
        _eval(checkpoints[0], tmp_path / f"b{bs}", "--answers", "2", "--batch-size", str(bs), "--seeding", "chain")
        for bs in (1, 8))
    assert texts_1 == texts_8 and entry_1["best_at_k"] == entry_8["best_at_k"]
    assert np.load(tmp_path / "b1" / "pool.npz")["vectors"].tolist() == \
        np.load(tmp_path / "b8" / "pool.npz")["vectors"].tolist()
    metrics = json.loads((tmp_path / "b1" / "metrics.json").read_text())
    assert metrics["sampling"] == {"backend": "hf", "device": "cuda" if HAS_CUDA else "cpu",
                                   "dtype": "bfloat16" if HAS_CUDA else "float32", "seeding": "chain",
                                   "batch_size": 1}


def test_vpo_eval_runs_in_bfloat16_on_cpu(checkpoints, tmp_path):
    # the GPU path (a half-precision model and its draws) on the CPU
    entry, texts = _eval(checkpoints[0], tmp_path, "--device", "cpu", "--dtype", "bfloat16", "--answers", "1")
    assert len(texts) == 4 and all(len(row) == 6 for row in texts)
    assert 0 <= entry["best_at_k"]["mean"][-1] <= 1
    assert json.loads((tmp_path / "metrics.json").read_text())["sampling"]["dtype"] == "bfloat16"


# ----- options fail before any model loads ------------------------------------------------------

@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("argv", [
    ["eval", "--task", "sampling-letters"],
    ["search", "best-of-n", "--task", "sampling-letters"],
    ["search", "openevolve", "--task", "code", "--problems", "fixtures"],
    ["eval", "--search", "best-of-n", "--task", "sampling-letters"],
])
def test_device_cuda_without_cuda_is_one_line(argv, tmp_path, capsys):
    from vpo.cli import main

    not_a_checkpoint = tmp_path / "empty"          # loading it would fail with another message
    not_a_checkpoint.mkdir()
    assert main([*argv, "--model", str(not_a_checkpoint), "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--device cuda: CUDA is not available")


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed")
@pytest.mark.parametrize("command", [["eval"], ["search", "best-of-n"]])
def test_backend_vllm_without_vllm_names_the_install_line(command, tmp_path, capsys):
    from vpo.cli import main

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*command, "--task", "sampling-letters", "--model", str(empty), "--backend", "vllm",
                 "--out", str(tmp_path / "o")]) == 2
    assert "--backend vllm: vLLM is not installed; pip install 'vpo[vllm]'" in capsys.readouterr().err


def test_sampling_options_name_the_flag():
    with pytest.raises(ValueError, match=r"^--device tpu: expected auto, cpu, cuda or cuda:N$"):
        SamplingOptions(device="tpu").check()
    with pytest.raises(ValueError, match=r"^--dtype float64: expected one of auto, float32, bfloat16, float16$"):
        SamplingOptions(dtype="float64").check()
    with pytest.raises(ValueError, match=r"^--batch-size -2"):
        SamplingOptions(batch_size=-2).check()
    with pytest.raises(ValueError, match=r"^--threads -1"):
        SamplingOptions(threads=-1).check()
    resolved = SamplingOptions(device="cpu", dtype="auto").check()
    assert (resolved.device, resolved.dtype) == ("cpu", "float32")
    assert resolved.kv_cache == "dynamic" and SamplingOptions(device="cpu", kv_cache="static").check().kv_cache == "static"
    with pytest.raises(ValueError, match=r"^--kv-cache paged: expected one of auto, static, dynamic$"):
        SamplingOptions(kv_cache="paged").check()
    with pytest.raises(ValueError, match=r"^--memory-share 1.5: must be in \(0, 1\]$"):
        SamplingOptions(memory_share=1.5).check()
    assert SamplingOptions(device="cpu", dtype="float16").check().dtype == "float16"


def test_backend_vllm_refuses_what_it_cannot_sample(tmp_path):
    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "adapter_config.json").write_text("{}")
    (tmp_path / "full").mkdir()
    with pytest.raises(ValueError, match=r"^--seeding batch: only --backend hf"):
        check_vllm_inputs([], seeding="batch")
    with pytest.raises(ValueError, match=r"^--backend vllm: needs a GPU \(--device cuda\), got --device cpu$"):
        check_vllm_inputs([], device="cpu")
    with pytest.raises(ValueError, match=r"m.gguf is a .gguf file"):
        check_vllm_inputs([tmp_path / "m.gguf"])
    with pytest.raises(ValueError, match="is a LoRA adapter folder"):
        check_vllm_inputs([tmp_path / "full", tmp_path / "lora"])
    check_vllm_inputs([tmp_path / "full"], device="cuda")


def test_eval_rejects_bad_sampling_values_by_flag(checkpoints, tmp_path, capsys):
    from vpo.cli import main

    base = ["eval", "--task", "sampling-letters", "--model", checkpoints[0], "--out", str(tmp_path)]
    for extra, message in ((["--temperature", "0"], "--temperature must be > 0, got 0.0"),
                           (["--top-p", "1.5"], "--top-p must be > 0 and <= 1, got 1.5"),
                           (["--pool", "5", "--answers", "2"], "--pool (5) must be a multiple of --answers (2)")):
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err


# ----- the vLLM adapter's own logic (vLLM itself needs a GPU) -----------------------------------

def test_vllm_requests_share_a_prompt_or_go_per_chain():
    from vpo.sampling.vllm import plan_requests

    assert plan_requests([["p0"] * 3, ["q0", "q1"], ["r"]]) == [(0, [0, 1, 2], (0,)), (1, [0], (1, 0)),
                                                                 (1, [1], (1, 1)), (2, [0], (2,))]


def test_vllm_completions_are_read_like_transformers_rows():
    from vpo.sampling.vllm import read_completion
    from vpo.models import build_char_tokenizer

    tok = build_char_tokenizer("ab")
    ids = tok("abba")["input_ids"]
    stopped = read_completion(ids + [tok.eos_token_id], "stop", tok)
    assert (stopped.text, stopped.tokens, stopped.truncated) == ("abba", 4, False)
    cut = read_completion(ids, "length", tok)
    assert (cut.text, cut.tokens, cut.truncated) == ("abba", 4, True)

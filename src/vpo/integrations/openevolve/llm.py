"""OpenEvolve's LLM slot filled by a local policy: ``TransformersLLM`` (any transformers causal
LM or ``.gguf`` file, loaded lazily once per process), ``ScriptedLLM`` (canned answers, for tests
and benchmarks), and the ``init_client`` factories.

Usage::

    from vpo.integrations.openevolve.llm import transformers_client
    LLMModelConfig(name="runs/vpo", init_client=transformers_client(threads=1))
"""

from __future__ import annotations

import functools
import gc
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openevolve.llm.base import LLMInterface


DEFAULT_SYSTEM_TEMPLATE = (
    "You are an expert competitive programmer. You improve a Python 3 program until it solves "
    "the problem below. The fitness score is the fraction of hidden tests the program passes "
    "(1.0 = every test). Always answer with the complete program in one ```python code block.\n\n"
    "# Problem\n{problem}"
)
"""System message of every OpenEvolve prompt; ``{problem}`` is the task's single-answer prompt."""

_NEVER_RECYCLE = 2**31 - 1
_FENCE_RE = re.compile(r"^[ \t]*```", re.MULTILINE)
_DIFF_MARKER = "<<<<<<< SEARCH"


def postprocess_response(text: Any) -> str:
    """An LLM answer as OpenEvolve should see it: unchanged when it holds a fenced code block
    or a SEARCH/REPLACE diff, else ``""``. OpenEvolve's full-rewrite parser would otherwise run
    bare prose as the program; an empty answer is a failed mutation instead (no evaluation)."""
    if not isinstance(text, str):
        return ""
    if _FENCE_RE.search(text) or _DIFF_MARKER in text:
        return text
    return ""



# ----- LLM adapters ---------------------------------------------------------------------------

_MODEL_CACHE: dict[tuple[str, str, str], tuple[Any, Any]] = {}


def clear_model_cache() -> None:
    """Drop the models this process loaded (frees their memory)."""
    _MODEL_CACHE.clear()
    gc.collect()


def _load_cached(path: str, dtype: str, device: str) -> tuple[Any, Any]:
    key = (str(path), dtype, device)
    if key not in _MODEL_CACHE:
        from vpo.models import load_checkpoint

        if not Path(path).exists():
            raise FileNotFoundError(f"model not found: {path} (a model folder or a .gguf file)")
        _MODEL_CACHE[key] = load_checkpoint(path, dtype=dtype, device=device)
    return _MODEL_CACHE[key]


class TransformersLLM(LLMInterface):
    """OpenEvolve LLM backed by a local transformers causal LM (no server).

    Built by OpenEvolve from an ``LLMModelConfig``: ``name`` is the checkpoint (folder or
    ``.gguf``), ``temperature``/``top_p``/``max_tokens``/``random_seed`` control sampling
    (``max_tokens`` new tokens, default 512). The model loads on the first generation and is
    shared by every instance of the process. ``chat``: use the tokenizer's chat template
    (None: when it has one); ``device``/``dtype``: where and how the weights load
    (``vpo.models.load_checkpoint``; "auto" for either); ``threads``: torch intra-op threads for
    this process (None: leave torch's setting); ``max_context``: prompt + completion budget in tokens (the prompt
    is left-truncated to fit; None: the model's ``max_position_embeddings``).
    """

    def __init__(self, model_cfg: Any, *, dtype: str = "float32", device: str = "cpu", chat: bool | None = None,
                 threads: int | None = None, max_context: int | None = None,
                 require_code_block: bool = True) -> None:
        if not getattr(model_cfg, "name", None):
            raise ValueError("TransformersLLM needs LLMModelConfig.name = the model folder or .gguf file")
        self.model = str(model_cfg.name)          # OpenEvolve logs vars(client)["model"]
        self.dtype, self.device, self.chat, self.threads = dtype, device, chat, threads
        self.max_context = max_context
        self.require_code_block = require_code_block
        self.temperature = 0.7 if model_cfg.temperature is None else float(model_cfg.temperature)
        self.top_p = 1.0 if model_cfg.top_p is None else float(model_cfg.top_p)
        self.max_tokens = int(model_cfg.max_tokens) if model_cfg.max_tokens else 512
        self.seed = int(model_cfg.random_seed) if model_cfg.random_seed is not None else 0
        self.system_message = model_cfg.system_message
        self.calls = 0
        self.last_usage: dict[str, int] | None = None

    # --- loading and prompting --------------------------------------------------------------
    def _loaded(self) -> tuple[Any, Any]:
        if self.threads is not None:
            import torch

            torch.set_num_threads(max(1, int(self.threads)))
        return _load_cached(self.model, self.dtype, self.device)

    def _use_chat(self, tokenizer: Any) -> bool:
        return bool(getattr(tokenizer, "chat_template", None)) if self.chat is None else bool(self.chat)

    def render(self, system_message: str | None, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text: the chat template over [system, *messages] when used, else the
        contents joined by blank lines."""
        _, tokenizer = self._loaded()
        turns = ([{"role": "system", "content": system_message}] if system_message else []) + [
            {"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in messages]
        if self._use_chat(tokenizer):
            return tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(t["content"] for t in turns) + "\n\n"

    def sample(self, prompt_text: str, num: int = 1, *, temperature: float | None = None,
               top_p: float | None = None, max_tokens: int | None = None, seed: int | None = None) -> list[str]:
        """``num`` completions of a rendered prompt (one batch). Sampling is seeded by
        ``seed`` (default: the config seed, the call count and a CRC of the prompt, so
        reruns repeat and different prompts or calls differ)."""
        import torch

        model, tokenizer = self._loaded()
        temperature = self.temperature if temperature is None else float(temperature)
        top_p = self.top_p if top_p is None else float(top_p)
        new_tokens = self.max_tokens if max_tokens is None else int(max_tokens)
        context = self.max_context or int(getattr(model.config, "max_position_embeddings", 0) or 4096)
        budget = max(16, context - new_tokens)
        # a chat template writes its own special tokens; a plain prompt gets the tokenizer's (e.g. BOS)
        ids = tokenizer(prompt_text, return_tensors="pt",
                        add_special_tokens=not self._use_chat(tokenizer))["input_ids"][:, -budget:]
        ids = ids.repeat(num, 1).to(model.device)
        if seed is None:
            seed = (self.seed * 1_000_003 + self.calls * 7919 + zlib.crc32(prompt_text.encode("utf-8"))) % (2**31)
        self.calls += 1
        torch.manual_seed(seed)
        kwargs: dict[str, Any] = dict(max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        new = out[:, ids.shape[1]:]
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        pad = tokenizer.pad_token_id
        completion = int((new != pad).sum()) if pad is not None else int(new.numel())
        self.last_usage = {"prompt_tokens": int(ids.numel()), "completion_tokens": completion,
                           "total_tokens": int(ids.numel()) + completion}
        return texts

    # --- OpenEvolve's interface ---------------------------------------------------------------
    async def generate(self, prompt: str, **kwargs: Any) -> str:
        return await self.generate_with_context(self.system_message or "", [{"role": "user", "content": prompt}],
                                                **kwargs)

    async def generate_with_context(self, system_message: str, messages: list[dict[str, str]],
                                    **kwargs: Any) -> str:
        text = self.sample(self.render(system_message, messages), 1, temperature=kwargs.get("temperature"),
                           top_p=kwargs.get("top_p"), max_tokens=kwargs.get("max_tokens"))[0]
        return postprocess_response(text) if self.require_code_block else text


class ScriptedLLM(LLMInterface):
    """Stand-in LLM replaying fixed responses in order (cycling), for offline tests and
    benchmarks of the OpenEvolve loop. Each worker process replays from the start."""

    def __init__(self, model_cfg: Any, *, responses: Sequence[str], require_code_block: bool = True) -> None:
        if not responses or not all(isinstance(r, str) for r in responses):
            raise ValueError("ScriptedLLM needs a non-empty sequence of response strings")
        self.model = "scripted"
        self.responses = list(responses)
        self.require_code_block = require_code_block
        self.calls = 0
        self.last_usage = None

    async def generate(self, prompt: str, **kwargs: Any) -> str:
        return await self.generate_with_context("", [{"role": "user", "content": prompt}])

    async def generate_with_context(self, system_message: str, messages: list[dict[str, str]],
                                    **kwargs: Any) -> str:
        text = self.responses[self.calls % len(self.responses)]
        self.calls += 1
        return postprocess_response(text) if self.require_code_block else text


def transformers_client(**options: Any) -> Callable[[Any], TransformersLLM]:
    """``init_client`` for ``TransformersLLM`` with ``options`` (dtype, device, chat, threads,
    max_context, require_code_block); picklable, as spawned workers need."""
    return functools.partial(TransformersLLM, **options)


def scripted_client(responses: Sequence[str], **options: Any) -> Callable[[Any], ScriptedLLM]:
    """``init_client`` for ``ScriptedLLM`` replaying ``responses``; picklable."""
    return functools.partial(ScriptedLLM, responses=list(responses), **options)



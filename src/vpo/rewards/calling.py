"""The default call loop: each reward function once on all P answers (callables, async ones
together, model ids and sequence-classification models), ``None`` as NaN, outputs checked.

Usage::

    from vpo.rewards.calling import call_reward_funcs
    def is_red(completions, **kwargs): return [None if c == "?" else float("red" in c) for c in completions]
    values = call_reward_funcs([is_red], ["Name a colour."] * 3, ["red", "blue", "?"])
    values[0]        # (P,) = [1, 0, nan]: None is NaN

Shapes: P answers, H heads of a multi-head function or model.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.reward_failures import FAILED_CALL, RewardFailures
from vpo.reward_guard import check_arguments, checked_rewards, function_name, is_reward_model
from vpo.rewards.answers import completion_text
from vpo.rewards.loading import cached_reward_model, declared_heads

__all__ = ["call_reward_funcs", "score_with_model"]


def _model_texts(prompts: Sequence[Any], completions: Sequence[Any], tokenizer: Any) -> list[str]:
    """prompt + answer as TRL's GRPOTrainer feeds a reward model: plain concatenation, or the chat
    template of the prompt's messages followed by the answer's."""
    if prompts and not isinstance(prompts[0], str):
        return [tokenizer.apply_chat_template(list(p) + list(c), tokenize=False)
                for p, c in zip(prompts, completions, strict=True)]
    return [p + c for p, c in zip(prompts, completions, strict=True)]


def score_with_model(model: Any, tokenizer: Any, prompts: Sequence[Any], completions: Sequence[Any],
                      batch_size: int = 64) -> np.ndarray:
    """All logits (P, num_labels) of a sequence classifier on prompt + answer, in batches."""
    import torch

    if tokenizer is None:
        raise ValueError(f"reward model {function_name(model)!r} needs a tokenizer: pass reward_processing_classes")
    texts = _model_texts(prompts, completions, tokenizer)
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                              padding_side="right", add_special_tokens=False)
            batch = {k: v.to(device) for k, v in batch.items()}
            out.append(model(**batch).logits.float().cpu().numpy())
    labels = int(getattr(model.config, "num_labels", 1) or 1)
    return np.concatenate(out, axis=0) if out else np.zeros((0, labels))


def call_reward_funcs(reward_funcs: Sequence[Any], prompts: Sequence[Any], completions: Sequence[Any],
                      columns: Mapping[str, Sequence[Any]] | None = None, *,
                      reward_processing_classes: Sequence[Any] | Any = None,
                      completion_ids: Sequence[Any] | None = None,
                      failures: RewardFailures | None = None, tokenizer: Any = None) -> list[np.ndarray]:
    """Each function once on all P answers: one (P,) or (P, H) array per function, ``None`` as NaN.

    Callables get ``prompts=, completions=, completion_ids=, **columns`` (async ones run together;
    ``columns`` may hold ``TRL_HOOKS`` and ``completion_ids``, passed as they are). Without
    ``completion_ids``, a ``tokenizer`` gives each completion's tokens (its text, no special
    tokens: what ``VPOTrainer`` passes an answer). A callable with a required argument that is none
    of these raises ``RewardContractError`` naming the missing dataset column
    (``check_arguments``), before any call, and an output that is not one number (or ``None``) per
    answer raises it naming what came back (``vpo.reward_guard.checked_rewards``); a model id is
    loaded once (``load_reward_model``) and a model scores prompt + answer with its processing
    class, all heads. The default ``call`` of ``score_chains``. With ``failures``
    (``vpo.reward_failures``), callables run under its policy: a call that raises, returns NaN or
    an infinity, or runs past the time limit is ``FAILED_CALL`` (``finish_chains`` gives it the
    objective's worst value after scaling) and is counted there; a model's NaN or infinite scores
    count the same way (``RewardFailures.clean_model_scores``).
    """
    columns = dict(columns or {})
    if "completion_ids" in columns:  # TRL passes the ids apart from the columns
        given_ids = columns.pop("completion_ids")
        completion_ids = given_ids if completion_ids is None else completion_ids
    if completion_ids is None and tokenizer is not None:
        tokens = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        completion_ids = tokens(text=[completion_text(c) for c in completions], add_special_tokens=False)["input_ids"]
    funcs = list(reward_funcs)
    classes = reward_processing_classes
    if classes is None or not isinstance(classes, list | tuple):
        classes = [classes] * len(funcs)
    if len(classes) != len(funcs):
        raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(funcs)} reward functions")
    n = len(completions)
    outputs: list[np.ndarray | None] = [None] * len(funcs)
    pending = []
    for i, func in enumerate(funcs):
        name = function_name(func)
        model = isinstance(func, str) or is_reward_model(func)
        heads = None if model else declared_heads(func)
        if not model:
            check_arguments(func, name, columns)
        if failures is not None and callable(func) and not model:
            func = failures.guard(func, name, len(heads or (None,)), failed_value=FAILED_CALL)
        if model:
            tokenizer_i = classes[i]
            if isinstance(func, str):
                func, loaded = cached_reward_model(func)
                tokenizer_i = tokenizer_i or loaded
            scores = _model_output(score_with_model(func, tokenizer_i, prompts, completions))
            outputs[i] = scores if failures is None else failures.clean_model_scores(name, scores, FAILED_CALL)
        elif inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
            pending.append((i, name, heads, func(prompts=list(prompts), completions=list(completions),
                                                 completion_ids=completion_ids, **columns)))
        else:
            outputs[i] = checked_rewards(func(prompts=list(prompts), completions=list(completions),
                                              completion_ids=completion_ids, **columns),
                                         n, name, None if heads is None else len(heads))
    if pending:
        async def together() -> list[Any]:
            return await asyncio.gather(*(coro for *_, coro in pending))

        for (i, name, heads, _), output in zip(pending, _run_async(together), strict=True):
            outputs[i] = checked_rewards(output, n, name, None if heads is None else len(heads))
    return outputs  # type: ignore[return-value]


def _model_output(logits: np.ndarray) -> np.ndarray:
    return logits[:, 0] if logits.ndim == 2 and logits.shape[1] == 1 else logits


def _run_async(make: Callable[[], Any]) -> Any:
    """Run the coroutine ``make()`` to completion, also from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()

"""Reward functions' objective names and reward models loaded from a checkpoint (once per process).

Usage::

    from vpo.rewards.loading import reward_objective_names
    def is_red(completions, **kwargs): return [float("red" in c) for c in completions]
    reward_objective_names([is_red, len])                     # ("is_red", "len")

Checking a function's arguments and outputs, and loading ``pkg.mod:f`` specs, is ``vpo.reward_guard``'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from vpo.reward_guard import function_name, is_reward_model

__all__ = ["cached_reward_model", "declared_heads", "load_reward_model", "reward_objective_names"]


def declared_heads(func: Any) -> tuple[str, ...] | None:
    """Head names a function declares: ``objective_names`` on a callable, or a model's
    ``id2label`` when it has more than one label (transformers' default ``LABEL_j`` become "j")."""
    declared = getattr(func, "objective_names", None)
    if declared is not None and not is_reward_model(func):
        names = tuple(str(n) for n in declared)
        if not names:
            raise ValueError(f"reward function {function_name(func)!r}: objective_names is empty")
        return names
    if is_reward_model(func):
        labels = int(getattr(func.config, "num_labels", 1) or 1)
        if labels <= 1:
            return None
        id2label = getattr(func.config, "id2label", None) or {}
        names = tuple(str(id2label.get(j, f"LABEL_{j}")) for j in range(labels))
        if all(re.fullmatch(r"LABEL_\d+", n) for n in names):
            return tuple(str(j) for j in range(labels))
        return names
    return None


def reward_objective_names(reward_funcs: Sequence[Any], reward_names: Sequence[Any] | None = None,
                    widths: Sequence[int] | None = None) -> tuple[str, ...]:
    """The D objective names of ``reward_funcs``: a function's name (TRL's: ``__name__``, or a
    model's checkpoint name), and ``name/head`` for each head of a multi-head one. ``reward_names``
    (one per function) renames: a string replaces the function's name, a sequence names its heads.
    ``widths`` gives each function's number of heads when known from its output."""
    funcs = list(reward_funcs)
    if reward_names is not None and len(reward_names) != len(funcs):
        raise ValueError(f"reward_names has {len(reward_names)} entries for {len(funcs)} reward functions")
    names: list[str] = []
    for i, func in enumerate(funcs):
        heads = declared_heads(func)
        width = widths[i] if widths is not None else (len(heads) if heads else 1)
        given = None if reward_names is None else reward_names[i]
        if given is not None and not isinstance(given, str):
            given = tuple(str(n) for n in given)
            if len(given) != width:
                raise ValueError(f"reward_names[{i}] names {len(given)} objectives, but the function gives {width}")
            names.extend(given)
            continue
        own = getattr(func, "objective_names", None) is not None and not is_reward_model(func)
        if own and given is None and heads is not None and len(heads) == width:
            names.extend(heads)  # a callable's own names for its objectives
            continue
        base = given if given is not None else function_name(func)
        if width == 1:
            names.append(base)
        else:
            labels = heads if heads is not None and len(heads) == width else tuple(str(j) for j in range(width))
            names.extend(f"{base}/{label}" for label in labels)
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"objective names must be distinct, got {dupes} twice; pass reward_names=[...]")
    return tuple(names)


def load_reward_model(name: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a sequence-classification checkpoint id or folder, in eval mode, with
    all of its labels (a multi-head checkpoint gives several objectives)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(name)
    tokenizer = AutoTokenizer.from_pretrained(name, padding_side="right")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


_LOADED_MODELS: dict[str, tuple[Any, Any]] = {}


def cached_reward_model(name: str) -> tuple[Any, Any]:
    """``load_reward_model(name)``, loaded once per process (the default call loop scores with it)."""
    if name not in _LOADED_MODELS:
        _LOADED_MODELS[name] = load_reward_model(name)
    return _LOADED_MODELS[name]

"""Score B m-answer chains with a user's reward functions: split each chain into its answers,
call the functions (``score_every_answer``), then finish the chains' (M, D) matrices
(``score_chains``, through ``vpo.rewards.finishing.finish_chains``).

Usage::

    from vpo.rewards.scoring import score_chains
    def is_red(completions, **kwargs): return [float("apple" in c) for c in completions]
    scored = score_chains([is_red], ["Name a fruit."], ["<response_1>apple</response_1><response_2>pear</response_2>"],
                          answers=3)
    scored.matrices[0]        # (3, 1): [[1], [0], [0]], the absent third answer a zero row

Shapes: B completions, P answers, M answers per chain, D objectives.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.chains import parse_answers
from vpo.reward_failures import RewardFailures
from vpo.reward_guard import at_answers, is_chain_level
from vpo.rewards.answers import CHAIN_TAG, ScoredAnswers, completion_text, rollout_group_keys, single_answer
from vpo.rewards.calling import call_reward_funcs
from vpo.rewards.finishing import ChainRewards, check_scaling, finish_chains
from vpo.rewards.hooks import hooks_per_answer
from vpo.rewards.loading import declared_heads, reward_objective_names

__all__ = ["score_chains", "score_every_answer"]


def score_every_answer(reward_funcs: Sequence[Any], prompts: Sequence[Any], completions: Sequence[Any],
                       answers: int = 3, *, reward_names: Sequence[Any] | None = None,
                       reward_processing_classes: Any = None, call: Callable[..., Any] | None = None,
                       tag: str | None = CHAIN_TAG, failures: RewardFailures | None = None,
                       untagged_fallback: bool = False, completion_ids: Sequence[Any] | None = None,
                       hooks: Mapping[str, Any] | None = None, tokenizer: Any = None,
                       **columns: Sequence[Any]) -> ScoredAnswers:
    """Split the B chains into their non-blank answers and score them all: the first half of
    ``score_chains`` (``finish_chains`` is the second). ``prompts`` are the single-answer prompts
    the functions see. ``call(prompts, completions, columns)`` evaluates the answer-level functions
    on the flat answers (default ``call_reward_funcs``) and returns one (P,) or (P, H) array per
    function; chain-level functions (``is_chain_level``) are evaluated once on the B completions
    (with ``completion_ids``), and with any of them ``call`` also gets ``funcs=`` (the functions of
    that call). ``columns`` (B,) are repeated per answer; ``hooks`` (``TRL_HOOKS``) passed as they
    are (``environments``, one per completion: each answer gets its completion's). ``tag=None``
    (with ``answers=1``) skips the chain format: each completion, as it is, is its one answer (what
    ``GRPOTrainer`` scores). ``untagged_fallback``: a completion with no answer in its tags counts
    as one answer, its whole (stripped) text. ``failures`` and ``tokenizer`` (the tokens of what has
    no ``completion_ids``): the default call's (``call_reward_funcs``)."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if not funcs:
        raise ValueError("reward_funcs is empty: give at least one reward function")
    num = len(completions)
    if len(prompts) != num:
        raise ValueError(f"{len(prompts)} prompts for {num} completions")
    for key, values in columns.items():
        if values is None or len(values) != num:
            raise ValueError(f"column {key!r} has {0 if values is None else len(values)} values for {num} completions")
    if completion_ids is not None and len(completion_ids) != num:
        raise ValueError(f"{len(completion_ids)} completion_ids for {num} completions")
    if tag is None and answers != 1:
        raise ValueError(f"tag=None scores each whole completion as its one answer; it needs answers=1, got {answers}")
    owners: list[int] = []
    positions: list[int] = []
    flat_completions: list[Any] = []
    tagged = np.zeros(num, dtype=np.int64)
    for b, completion in enumerate(completions):
        text = completion_text(completion)
        if tag is None:  # the completion is the answer, as GRPOTrainer scores it
            owners.append(b)
            positions.append(0)
            flat_completions.append(completion)
            tagged[b] = int(bool(text.strip()))
            continue
        found = [(slot, answer) for slot, answer in enumerate(parse_answers(text, answers, tag=tag)) if answer]
        tagged[b] = len(found)
        if not found and untagged_fallback and text.strip():
            found = [(0, text.strip())]  # no answer in tags: the whole completion is one answer
        owners.extend([b] * len(found))
        positions.extend(slot for slot, _ in found)
        flat_completions.extend(single_answer(completion, answer) for _, answer in found)
    owner_array = np.asarray(owners, dtype=np.int64)
    chain_funcs = [i for i, f in enumerate(funcs) if is_chain_level(f)]
    answer_funcs = [i for i in range(len(funcs)) if i not in chain_funcs]
    passed = dict(hooks or {})
    per_answer, extra = hooks_per_answer(passed, owner_array, num, group_logs=tag is not None)
    if call is None:
        every = funcs
        classes = reward_processing_classes
        if isinstance(classes, list | tuple) and len(classes) != len(every):
            raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(every)} reward functions")

        def call(p: Sequence[Any], c: Sequence[Any], cols: Mapping[str, Sequence[Any]],
                 funcs: Sequence[Any] = every) -> list[np.ndarray]:
            mine = [classes[every.index(f)] for f in funcs] if isinstance(classes, list | tuple) else classes
            return call_reward_funcs(funcs, p, c, cols, reward_processing_classes=mine, failures=failures,
                                     tokenizer=tokenizer)

    def evaluate(indices: list[int], p: Sequence[Any], c: Sequence[Any], cols: dict[str, Any]) -> list[np.ndarray]:
        subset = {"funcs": [funcs[i] for i in indices]} if chain_funcs else {}
        outputs = [np.asarray(out, dtype=np.float64) for out in call(p, c, cols, **subset)]
        if len(outputs) != len(indices):
            raise ValueError(f"call returned {len(outputs)} outputs for {len(indices)} reward functions")
        return outputs

    outputs: list[np.ndarray | None] = [None] * len(funcs)
    if answer_funcs and flat_completions:
        cols = {key: [values[b] for b in owners] for key, values in columns.items()}
        if tag is None and completion_ids is not None:
            cols["completion_ids"] = list(completion_ids)
        cols.update(per_answer)
        for i, out in zip(answer_funcs, evaluate(answer_funcs, [prompts[b] for b in owners], flat_completions,
                                                 cols), strict=True):
            outputs[i] = out.reshape(len(flat_completions), -1) if out.ndim > 1 else out
        if extra is not None:
            extra.flush()
    if chain_funcs and num:
        cols = {key: list(values) for key, values in columns.items()}
        if completion_ids is not None:
            cols["completion_ids"] = list(completion_ids)
        cols.update(passed)
        for i, out in zip(chain_funcs, evaluate(chain_funcs, list(prompts), list(completions), cols), strict=True):
            outputs[i] = out
    widths = [len(declared_heads(f) or (None,)) if out is None else 1 if out.ndim == 1 else out.shape[1]
              for f, out in zip(funcs, outputs, strict=True)]
    names = reward_objective_names(funcs, reward_names, widths)
    values = np.full((len(owners), len(names)), np.nan)
    chain_values = np.full((num, len(names)), np.nan)
    level = np.zeros(len(names), dtype=bool)
    start = 0
    for i, (out, width) in enumerate(zip(outputs, widths, strict=True)):
        target = chain_values if i in chain_funcs else values
        level[start:start + width] = i in chain_funcs
        if out is not None:
            target[:, start:start + width] = out.reshape(target.shape[0], width)
        start += width
    return ScoredAnswers(owner_array, values, names, num, tagged, level, chain_values,
                         np.asarray(positions, dtype=np.int64))


_DEFAULT_TAG = object()
"""``score_chains``' default tag: the chain tag for m > 1, the whole completion at m = 1."""


def score_chains(reward_funcs: Any, prompts: Sequence[Any], completions: Sequence[Any], answers: int = 3, *,
                 reward_names: Sequence[Any] | None = None, scaling: Any = None,
                 group_ids: Sequence[Hashable] | None = None, reward_processing_classes: Any = None,
                 call: Callable[..., Any] | None = None, tag: Any = _DEFAULT_TAG,
                 failures: RewardFailures | None = None, untagged_fallback: bool = False,
                 completion_ids: Sequence[Any] | None = None, tokenizer: Any = None,
                 **columns: Sequence[Any]) -> ChainRewards:
    """The (M, D) reward matrix of each of B m-answer ``completions``, scored by ``reward_funcs``.

    ``prompts`` (B,) are the single-answer prompts the functions see; ``columns`` are dataset
    columns (B,) each, repeated per answer. ``group_ids`` (B,) defaults to ``rollout_group_keys`` (the
    ``example_id`` column, else the prompt). ``scaling``: see ``SCALINGS`` (None: no scaling).
    ``call``, ``failures``, ``untagged_fallback``, ``completion_ids`` (the completions' tokens,
    for chain-level functions that read them) and ``tokenizer`` (tokens where none are given): see
    ``score_every_answer``. ``tag``: the chains' numbered tag; by default ``CHAIN_TAG`` for m > 1, and at
    m = 1 the whole completion is the one answer, as ``GRPOTrainer`` and ``VPOTrainer`` score it
    (pass ``tag=CHAIN_TAG`` to read a tagged single answer). Length budgets are scaled for chains of
    ``answers`` (``at_answers``), as the trainer scales them. Raises ValueError for misaligned
    inputs or bad options.
    """
    check_scaling(scaling)
    if isinstance(answers, bool) or not isinstance(answers, int) or answers < 1:
        raise ValueError(f"answers must be a positive integer, got {answers!r}")
    if tag is _DEFAULT_TAG:
        tag = CHAIN_TAG if answers > 1 else None
    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if call is None:  # a caller's own call loop holds the functions it was given
        funcs, _ = at_answers(funcs, answers)
    scored = score_every_answer(funcs, prompts, completions, answers, reward_names=reward_names,
                                reward_processing_classes=reward_processing_classes, call=call, tag=tag,
                                failures=failures, untagged_fallback=untagged_fallback, completion_ids=completion_ids,
                                tokenizer=tokenizer, **columns)
    groups = rollout_group_keys(prompts, columns) if group_ids is None else list(group_ids)
    return finish_chains(scored, answers, groups, scaling=scaling)

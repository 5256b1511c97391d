"""A user's own reward functions as VPO's objectives: split each m-answer chain, score every answer
with each function, and build the chain's (M, D) reward matrix.

Usage::

    from vpo.rewards import score_chains, rewrite_chain_prompt
    prompt_m = rewrite_chain_prompt("Name a fruit.", 3)    # asks for <response_1>..<response_3>
    scored = score_chains([is_red, is_short], prompts, completions, answers=3, label=labels)
    scored.matrices[0]        # (3, 2): distinct answers' vectors, zero rows appended
    scored.names              # ("is_red", "is_short")
    scored.stats              # {"answers_parsed": ..., "none/is_red": ..., "effective_dim": ...}

A reward function is what TRL's ``GRPOTrainer(reward_funcs=...)`` takes: a callable (sync or async)
``f(prompts=, completions=, completion_ids=, **columns) -> list[float | None]``, a Hugging Face
model id, or a sequence-classification ``PreTrainedModel`` (its logits score prompt + answer). Each
function is one objective; a model with several labels, or a callable with an ``objective_names``
attribute returning one vector per completion, gives one objective per head. The functions see one
answer at a time (``completions`` holds single answers, strings or one assistant message as the
chain was), with every dataset column repeated per answer, and are called once for all answers.

A function that judges the whole completion (length, format, thinking tags: ``is_chain_level``,
declared with ``chain_level(f)`` or ``f.chain_level = True``; TRL's ``think_format_reward``, soft
overlong punishment and repetition penalty are by nature) is called once per completion instead,
and its value is a shared objective: the same on every row of the chain's matrix, padding included.
A length budget is one answer's: a chain of m answers is judged against m times it (``at_answers``).
Completions take the form of the data's prompt everywhere (``completion_form``): text for a string
prompt, assistant turns for chat turns. Loading, arguments and outputs are checked by
``vpo.reward_guard`` (one line naming the fault).

``None`` means "this function does not apply to this sample" (TRL's meaning): a function that
returns ``None`` for every answer of a group (the rollouts of one prompt) is dropped from that
group's matrices; any other ``None`` counts as 0 and is counted in ``stats``. Matrices follow the
authors' generic chain (``<response_i>`` tags, duplicates = identical score vectors, first kept,
zero rows up to m: ``vpo.chains.finish_chain``); docs/own_rewards.md is the contract.

Shapes: B completions, P answers (all chains' parsed answers together), M answers per chain, D
objectives. Only numpy is imported here; torch and transformers are imported when a reward
function is a model id or a model.

The package's rooms, one job each: ``answers`` (chains in, single answers out, group keys),
``loading`` (objective names, reward models), ``calling`` (the default call loop), ``hooks`` (TRL's
hooks passed on per answer), ``scoring`` (``score_every_answer``, ``score_chains``), ``finishing``
(the ``None`` rule, scaling, dedup and padding) and ``diagnostics`` (correlation, effective
dimension). Every name below is importable from ``vpo.rewards`` itself.
"""

from __future__ import annotations

from typing import Any

from vpo.reward_guard import (TRL_CHAIN_LEVEL, TRL_HOOKS, LengthBudget, at_answers, chain_level, check_arguments,
                              check_columns, function_name, is_chain_level, is_reward_model, length_budget,
                              load_reward_funcs)
from vpo.rewards.answers import (CHAIN_RULE, CHAIN_TAG, ScoredAnswers, completion_form, completion_text, prompt_key,
                                 rewrite_chain_prompt, rollout_group_keys, single_answer)
from vpo.rewards.calling import call_reward_funcs, score_with_model
from vpo.rewards.diagnostics import (COLLINEAR_EFFECTIVE_DIM, CollinearObjectivesWarning, effective_dimension,
                                     objective_diagnostics)
from vpo.rewards.finishing import SCALINGS, ChainRewards, RewardScaleWarning, check_scaling, finish_chains
from vpo.rewards.hooks import hooks_per_answer
from vpo.rewards.loading import cached_reward_model, load_reward_model, reward_objective_names
from vpo.rewards.scoring import score_chains, score_every_answer

__all__ = [
    "CHAIN_RULE",
    "CHAIN_TAG",
    "COLLINEAR_EFFECTIVE_DIM",
    "SCALINGS",
    "TRL_CHAIN_LEVEL",
    "TRL_HOOKS",
    "ChainRewards",
    "CollinearObjectivesWarning",
    "LengthBudget",
    "RewardScaleWarning",
    "ScoredAnswers",
    "at_answers",
    "cached_reward_model",
    "call_reward_funcs",
    "chain_level",
    "check_arguments",
    "check_columns",
    "check_scaling",
    "completion_form",
    "completion_text",
    "effective_dimension",
    "finish_chains",
    "function_name",
    "hooks_per_answer",
    "is_chain_level",
    "is_reward_model",
    "length_budget",
    "load_reward_funcs",
    "load_reward_model",
    "objective_diagnostics",
    "prompt_key",
    "reward_objective_names",
    "rewrite_chain_prompt",
    "rollout_group_keys",
    "score_chains",
    "score_every_answer",
    "score_with_model",
    "single_answer",
]

RENAMED = {
    "score_answers": "score_every_answer",
    "group_keys": "rollout_group_keys",  # vpo.integrations.trl.scorers.group_keys takes example ids
    "objective_names": "reward_objective_names",  # a task's objective_names(example) is a method
}
"""Earlier names of this package's functions -> their names now: each still imports, and warns
with a date when called (``vpo.deprecation``)."""


def __getattr__(name: str) -> Any:
    """An earlier name (``RENAMED``): the function under its new name, warning with a date on each call."""
    if name in RENAMED:
        from vpo.deprecation import deprecated

        new = RENAMED[name]
        return deprecated(globals()[new], f"{__name__}.{name}", f"{__name__}.{new}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

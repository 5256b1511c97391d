"""The user's own reward functions over a prompt dataset, as a task (``own_rewards``).

Usage::

    from vpo.tasks import get_task
    task = get_task("own_rewards", reward_funcs="mypkg.rewards:accuracy,mypkg.rewards:brevity")
    examples = task.examples("train", source="prompts.jsonl")   # rows with a `prompt` column
    task.messages(examples[0], m=3)                              # the prompt asking for 3 answers
    task.score_chain(text, examples[0], 3)                       # (3, D): what vpo.rewards.score_chains gives
    task.score_generations([text], examples[0], 3)               # (1, 3, D): every answer slot, as vpo eval pools

``vpo train``, ``vpo eval``, ``vpo search best-of-n`` and ``vpo data export`` build it from
``--reward-funcs ... --source ...``; its parameters are JSON, so an export records them and verl's
``compute_score``, OpenRLHF's reward file and ``trl grpo``'s dotted-path rewards rebuild it from
the row.

Examples are the dataset's rows as they are: a ``prompt`` (a string, or chat turns as TRL's
conversational format has them) and any other columns, which every reward function receives
as keyword arguments, one value per answer, as TRL passes dataset columns. Chains are scored by
the trainer's own functions (``score_generations``: ``vpo.rewards.score_every_answer`` and
``finish_chains``, what ``VPOTrainer`` runs): each function once on all the answers given, a
chain-level one once per chain with its value on every row, length budgets scaled by m
(``vpo.rewards.at_answers``), completions in the form of the row's prompt, ``completion_ids``
from the sampler or a tokenizer, the scaling and the failure policy. An example's chains are one
group of the ``None`` rule; a ``None`` left in a row scores 0. The batch-relative ``minmax``
scaling is refused (the chains of one example are not the trainer's batch: give a ``(low,
high)`` range). D comes from the functions' declarations (a callable: one objective, or its
``objective_names``; a reward model: its labels). ``max_failure_rate`` and ``time_limit`` are the
reward failure policy (``vpo.reward_failures``): a call that raises, returns NaN or runs too long
takes the objective's worst value and is counted in ``task.failures``, per function; the engine
that scores the task closes its steps (``vpo.tasks.base``).

Shape glossary: M answers per chain (m), D objectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.reward_failures import RewardFailurePolicy, RewardFailures
from vpo.rewards import (CHAIN_RULE, CHAIN_TAG, ChainRewards, at_answers, check_columns, check_scaling,
                         completion_form, finish_chains, function_name, load_reward_funcs,
                         reward_objective_names, score_every_answer)
from vpo.tasks import register_task
from vpo.tasks.base import Example, FileTask

__all__ = ["OwnRewardsTask", "PROMPT_COLUMN"]

PROMPT_COLUMN = "prompt"
"""The dataset column holding the prompt (TRL's name)."""

_NOT_COLUMNS = frozenset({PROMPT_COLUMN, "completion", "completion_ids"})
"""Row fields TRL does not pass to reward functions as columns."""


def _decode_scaling(scaling: Any) -> Any:
    """``scaling`` from its JSON form (an export's task parameters turn ``(low, high)`` into a list)."""
    if isinstance(scaling, Mapping):
        return {str(k): _decode_scaling(v) for k, v in scaling.items()}
    if isinstance(scaling, list):
        return tuple(scaling)
    return scaling


def _is_chat(prompt: Any) -> bool:
    return (isinstance(prompt, Sequence) and not isinstance(prompt, str) and len(prompt) > 0
            and all(isinstance(turn, Mapping) and isinstance(turn.get("content"), str) for turn in prompt))


@register_task("own_rewards")
class OwnRewardsTask(FileTask):
    """Reward functions of the TRL contract (callables, async callables, model ids or
    sequence-classification models; a function may return one vector per answer) as a task over
    the rows of a prompt dataset."""

    ability = "own_rewards"
    rewrite_rule = CHAIN_RULE
    scores_under_policy = True  # each function runs under ``failures`` (call_reward_funcs)
    fixture = Path(__file__).with_name("fixtures") / "own_rewards.jsonl"
    """Four invented prompts with a ``keyword`` column (tests and examples; ``--source`` is the real data)."""

    def __init__(self, reward_funcs: Any = None, *, reward_names: Sequence[str] | None = None,
                 scaling: Any = None, reward_processing_classes: Any = None,
                 max_failure_rate: float = RewardFailurePolicy.max_failure_rate,
                 time_limit: float | None = RewardFailurePolicy.time_limit) -> None:
        if reward_funcs is None or (isinstance(reward_funcs, str | Sequence) and not reward_funcs):
            raise ValueError("own_rewards needs reward_funcs (--reward-funcs pkg.mod:f1,pkg.mod:f2)")
        self.reward_funcs = load_reward_funcs(reward_funcs) if isinstance(reward_funcs, str) or all(
            isinstance(f, str) for f in reward_funcs) else list(reward_funcs)
        self.reward_names = list(reward_names) if reward_names else None
        self.scaling = check_scaling(_decode_scaling(scaling))
        specs = self.scaling.values() if isinstance(self.scaling, Mapping) else [self.scaling]
        if "minmax" in specs:
            raise ValueError("scaling 'minmax' is relative to the trainer's batch of answers; a task scores one "
                             "chain at a time: give the objective's range as (low, high), or 'sigmoid'")
        self.reward_processing_classes = reward_processing_classes
        self.failures = RewardFailures(RewardFailurePolicy(max_failure_rate=max_failure_rate, time_limit=time_limit),
                                       names=[function_name(f) for f in self.reward_funcs])
        self._names: tuple[str, ...] | None = None

    # ----- data --------------------------------------------------------------------------
    def validate(self, example: Any, row: int | None = None) -> Example:
        """A row with a ``prompt``: a non-empty string or non-empty chat turns."""
        if not isinstance(example, Mapping):
            raise ValueError(f"{self.name}: row {row}: example must be a mapping, got {type(example).__name__}")
        prompt = example.get(PROMPT_COLUMN)
        if prompt is None:
            raise ValueError(f"{self.name}: row {row}: missing field {PROMPT_COLUMN!r} (the prompt column)")
        if not (isinstance(prompt, str) and prompt.strip()) and not _is_chat(prompt):
            raise ValueError(f"{self.name}: row {row}: field {PROMPT_COLUMN!r} must be a non-empty string or chat "
                             f"turns [{{'role': ..., 'content': ...}}], got {type(prompt).__name__}")
        out = dict(example)
        if not isinstance(prompt, str):
            out[PROMPT_COLUMN] = [dict(turn) for turn in prompt]
        return out

    def columns(self, example: Example) -> dict[str, Any]:
        """The row's columns a reward function receives (all but the prompt, as TRL passes them)."""
        return {k: v for k, v in example.items() if k not in _NOT_COLUMNS}

    # ----- prompts -------------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        prompt = example[PROMPT_COLUMN]
        if isinstance(prompt, str):
            return prompt
        users = [turn["content"] for turn in prompt if turn.get("role", "user") == "user"]
        return users[-1] if users else prompt[-1]["content"]

    def messages(self, example: Example, m: int = 1) -> list[dict[str, str]]:
        """The row's chat turns (a string prompt: one user turn) with the last user turn asking
        for ``m`` answers."""
        prompt = example[PROMPT_COLUMN]
        if isinstance(prompt, str):
            return [{"role": "user", "content": self.prompt(example, m)}]
        turns = [dict(turn) for turn in prompt]
        last = max((i for i, t in enumerate(turns) if t.get("role", "user") == "user"), default=len(turns) - 1)
        turns[last]["content"] = self.prompt(example, m)
        return turns

    # ----- scoring -------------------------------------------------------------------------
    def functions_at(self, m: int) -> tuple[list[Any], list[str]]:
        """The reward functions for chains of ``m`` answers (length budgets x m,
        ``vpo.rewards.at_answers``) and one line per budget scaled, built once per m."""
        built = self.__dict__.setdefault("_at", {})
        if m not in built:
            built[m] = at_answers(self.reward_funcs, m)
        return built[m]

    def check_columns(self, examples: Sequence[Example], where: str = "--source") -> None:
        """Before any work: ``RewardContractError`` naming a column a function needs that a row of
        ``examples`` lacks (``vpo.rewards.check_columns``)."""
        check_columns(self.reward_funcs, [self.columns(example) for example in examples], where=where)

    def score_chains_of(self, texts: Sequence[str], example: Example, m: int, *,
                        completion_ids: Sequence[Sequence[int]] | None = None, tokenizer: Any = None) -> ChainRewards:
        """The C chains ``texts`` generated for ``example`` scored as ``VPOTrainer`` scores a group of
        rollouts (``vpo.rewards.score_every_answer``, ``finish_chains``): the functions for m answers, the
        row's prompt and columns, each completion in the prompt's form, ``completion_ids`` (C,) the
        chains' tokens (from ``tokenizer`` when not given), the scaling and the failure policy."""
        funcs, _ = self.functions_at(m)
        prompt = example[PROMPT_COLUMN]
        columns = {k: [v] * len(texts) for k, v in self.columns(example).items()}
        scored = score_every_answer(funcs, [prompt] * len(texts), [completion_form(prompt, t) for t in texts], m,
                               reward_names=self.reward_names, reward_processing_classes=self.reward_processing_classes,
                               tag=CHAIN_TAG if m > 1 else None, failures=self.failures,
                               completion_ids=None if completion_ids is None else list(completion_ids),
                               tokenizer=tokenizer, **columns)
        if self._names is None:
            self._names = scored.names
        elif scored.names != self._names:
            raise ValueError(f"{self.name}: the reward functions gave objectives {list(scored.names)}, earlier "
                             f"{list(self._names)}; every call must return the same heads")
        return finish_chains(scored, m, [0] * len(texts), scaling=self.scaling)  # one example: one group

    def score_generations(self, texts: Sequence[str], example: Example, m: int, *,
                          completion_ids: Sequence[Sequence[int]] | None = None, tokenizer: Any = None) -> np.ndarray:
        """(C, m, D) every answer slot of the C chains ``texts`` (``score_chains_of``), before dedup: an
        answer's vector in its slot, a slot without one zeros with the chain's chain-level values,
        a dropped objective 0 (``ChainRewards.slots``). What ``vpo eval`` and best-of-n pool."""
        if not texts:
            return np.zeros((0, m, self.num_objectives(example)))
        return self.score_chains_of(texts, example, m, completion_ids=completion_ids, tokenizer=tokenizer).slots(m)

    def score_parsed(self, text: str, answers: Sequence[str], example: Example,
                     m: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The chain's answers and its padding row as the trainer scores them (``score_chains_of``:
        a chain-level function once on ``text``, its value on every row), for ``score_chain``."""
        chains = self.score_chains_of([text], example, m)
        return np.nan_to_num(chains.vectors, nan=0.0), chains.chain_values[0]

    def tagged_answers(self, text: str, m: int) -> int:
        """As the default parser counts them: the tags are counted, not the chain parsed a second time."""
        return self._tagged_blocks(text, m)

    def score(self, text: str, example: Example) -> np.ndarray:
        if not isinstance(text, str) or not text.strip():
            return np.zeros(self.num_objectives(example))
        return self.score_generations([text], example, 1)[0, 0]

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D): each non-blank answer scored as a single-answer completion (m = 1, one group)."""
        dim = self.num_objectives(example)
        texts = [a if isinstance(a, str) else "" for a in answers]
        live = [i for i, a in enumerate(texts) if a.strip()]
        out = np.zeros((len(texts), dim), dtype=np.float64)
        if live:
            out[live] = self.score_generations([texts[i] for i in live], example, 1)[:, 0]
        return out

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        """The D names, from the functions' declarations (a callable gives one objective, or its
        ``objective_names``; a reward model its labels: a model id is loaded for them), with
        ``reward_names`` applied."""
        if self._names is None:
            from vpo.rewards import cached_reward_model

            funcs = [cached_reward_model(f)[0] if isinstance(f, str) else f for f in self.reward_funcs]
            self._names = reward_objective_names(funcs, self.reward_names)
        return self._names

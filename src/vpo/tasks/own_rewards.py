"""The user's own reward functions over a prompt dataset, as a task (``own_rewards``).

Usage::

    from vpo.tasks import get_task
    task = get_task("own_rewards", reward_funcs="mypkg.rewards:accuracy,mypkg.rewards:brevity")
    examples = task.examples("train", source="prompts.jsonl")   # rows with a `prompt` column
    task.messages(examples[0], m=3)                              # the prompt asking for 3 answers
    task.score_chain(text, examples[0], 3)                       # (3, D): what vpo.rewards.score_chains gives

``vpo train``, ``vpo eval``, ``vpo search best-of-n`` and ``vpo data export`` build it from
``--reward-funcs ... --source ...``; its parameters are JSON, so an export records them and verl's
``compute_score``, OpenRLHF's reward file and ``trl grpo``'s dotted-path rewards rebuild it from
the row.

Examples are the dataset's rows as they are: a ``prompt`` (a string, or chat turns as TRL's
conversational format has them) and any other columns, which every reward function receives
as keyword arguments, one value per answer, as TRL passes dataset columns. The answers of a
chain are scored together by ``vpo.rewards``' own machinery (``call_reward_funcs``: each function
once on all of them; ``finish_chains``: names, scaling, the ``None`` rule), so the objectives,
their scaling and the chain's (M, D) matrix are what ``score_chains`` gives the trainer. A ``None``
scores 0 here (a task scores one chain, it has no group to drop an objective for), and the
batch-relative ``minmax`` scaling is refused (one chain is not the trainer's batch: give a
``(low, high)`` range). D is the number of objectives the functions give, read from one scoring
of an example when ``reward_names`` does not name them. ``max_failure_rate`` and ``time_limit``
are the reward failure policy (``vpo.reward_failures``): a call that raises, returns NaN or runs
too long scores 0 and is counted in ``task.failures``, per function; the engine that scores the
task closes its steps (``vpo.tasks.base``).

Shape glossary: M answers per chain (m), D objectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.reward_failures import RewardFailurePolicy, RewardFailures
from vpo.rewards import (CHAIN_RULE, ScoredAnswers, call_reward_funcs, check_scaling, finish_chains,
                         function_name, is_chain_level, load_reward_funcs, objective_names, single_answer)
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
    def _score(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) scaled vectors of ``answers`` to ``example``, each function called once on all of
        them; a ``None`` (or an objective ``None`` for all of them) scores 0."""
        n = len(answers)
        prompt = example[PROMPT_COLUMN]
        form: Any = "" if isinstance(prompt, str) else [{"role": "assistant", "content": ""}]
        columns = {k: [v] * n for k, v in self.columns(example).items()}
        outputs = call_reward_funcs(self.reward_funcs, [prompt] * n, [single_answer(form, a) for a in answers],
                                    columns, reward_processing_classes=self.reward_processing_classes,
                                    failures=self.failures)
        widths = [1 if np.ndim(out) == 1 else np.shape(out)[1] for out in outputs]
        names = objective_names(self.reward_funcs, self.reward_names, widths)
        if self._names is None:
            self._names = names
        elif names != self._names:
            raise ValueError(f"{self.name}: the reward functions gave objectives {list(names)}, earlier "
                             f"{list(self._names)}; every call must return the same heads")
        values = np.concatenate([np.asarray(out, dtype=np.float64).reshape(n, -1) for out in outputs], axis=1)
        scored = ScoredAnswers(np.arange(n, dtype=np.int64), values, names, n)
        chains = finish_chains(scored, 1, list(range(n)), scaling=self.scaling)  # one chain per answer
        return np.stack([chains.dense(i)[0] for i in range(n)]) if n else np.zeros((0, len(names)))

    def parse_chain(self, text: str, m: int) -> list[str]:
        """The chain's answers; ValueError for m > 1 when a function judges the whole completion
        (``vpo.rewards.is_chain_level``): a task scores a chain's answers one by one, so its value
        would become a per-answer one. ``VPOTrainer``, ``vpo train`` and ``vpo rewards check`` score
        such functions once per completion."""
        chain_level = [function_name(f) for f in self.reward_funcs if is_chain_level(f)] if m > 1 else []
        if chain_level:
            raise ValueError(f"{self.name}: {', '.join(chain_level)} judge(s) the whole completion, but this path "
                             f"scores the {m} answers of a chain one by one; train with `vpo train` / VPOTrainer "
                             "(once per completion), or evaluate single answers (m = 1)")
        return super().parse_chain(text, m)

    def tagged_answers(self, text: str, m: int) -> int:
        """As the default parser counts them (``parse_chain`` above only adds a refusal): the tags
        are counted, not the chain parsed a second time."""
        return self._tagged_blocks(text, m)

    def score(self, text: str, example: Example) -> np.ndarray:
        if not isinstance(text, str) or not text.strip():
            return np.zeros(self.num_objectives(example))
        return self._score([text], example)[0]

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        dim = self.num_objectives(example)
        texts = [a if isinstance(a, str) else "" for a in answers]
        live = [i for i, a in enumerate(texts) if a.strip()]
        out = np.zeros((len(texts), dim), dtype=np.float64)
        if live:
            out[live] = self._score([texts[i] for i in live], example)
        return out

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        """The D names: declared by every function (``objective_names``), else what one scoring
        of ``example`` (the answer "probe") reports, with ``reward_names`` applied."""
        if self._names is None and all(getattr(f, "objective_names", None) is not None and not hasattr(f, "forward")
                                       for f in self.reward_funcs):
            self._names = objective_names(self.reward_funcs, self.reward_names)  # declared: no call needed
        if self._names is None:
            if example is None:
                raise ValueError(f"{self.name}: the objective names come from scoring an example; pass one (or "
                                 "give the functions an objective_names attribute)")
            self._score(["probe"], example)
        return self._names or ()

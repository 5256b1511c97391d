"""The two scorers behind ``VPOTrainer``: a task's and a user's reward functions'. Each turns one
process's completions into their (M, D) reward matrices, and logs the chain metrics of that same
pass; the trainer reduces the matrices to the estimator's per-rollout scores.

Usage::

    from vpo.integrations.trl.scorers import FunctionScorer, TaskScorer
    scorer = TaskScorer(task, answers=3, log=lambda name, value: print(name, value))
    chains = scorer.score(prompts, completions, completion_ids, {"example": examples_json})
    chains.matrices, chains.keys, chains.parsed, chains.total

A scorer takes what TRL passes a reward function (the dataset's columns and ``TRL_HOOKS``) and
returns ``ScoredChains``. ``chain_prompt`` is what the trainer sends the model: a task's data
already asks for m answers (``vpo data export``); a user's prompts are rewritten to ask for m
answers in ``<response_i>`` tags, and the functions still see the user's own prompt.

Shape glossary: B completions (this process), M answers per chain, D objectives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.chains import finish_chain, written_answers
from vpo.rewards import (CHAIN_TAG, TRL_HOOKS, ScoredAnswers, completion_form, completion_text, finish_chains,
                         prompt_key, rewrite_chain_prompt, score_every_answer)
from vpo.step_metrics import answer_count_metrics, chain_metrics, pool_metrics
from vpo.tasks.base import Example, Task

__all__ = ["FunctionScorer", "ScoredChains", "TaskScorer", "decode_examples", "group_keys", "parse_example",
           "score_task_chains"]

Log = Callable[[str, float], None]


@dataclass
class ScoredChains:
    """One process's completions, scored: what the trainer reduces and watches."""

    matrices: list[np.ndarray]
    """(B,) reward matrices (M, D_i)."""
    keys: list[str]
    """(B,) group keys: the ``example_id`` column, else the prompt."""
    goals: list[np.ndarray | None]
    """(B,) the weights each prompt states (goal-conditioned estimators), else None."""
    parsed: int = 0
    """Completions whose chain parsed (an answer in its tags), of ``total``."""
    total: int = 0
    """Completions counted for ``parsed`` (a user's functions: the whole batch's, every process)."""
    effective_dim: float = math.nan
    """The objectives' effective dimension over the answers (a user's functions; NaN: not measured)."""
    dim: int = field(default=0)
    """D, for ``effective_dim``."""
    names: tuple[str, ...] = ()
    """The D objective names of ``answer_values``."""
    answer_values: np.ndarray | None = None
    """(P, D) the values of the scored answers (a task's: the matrix rows of the chains that
    parsed; a user's functions': every answer of the batch, NaN where an objective has none)."""


def group_keys(prompts: Sequence[Any], example_ids: Sequence[Any] | None) -> list[str]:
    """The group key of each row: its ``example_id`` (the key every engine uses) when the data
    has that column, else the prompt text (``vpo.rewards.rollout_group_keys``, the one keying)."""
    from vpo.rewards import rollout_group_keys as keys_of

    return keys_of(prompts, None if example_ids is None else {"example_id": example_ids})


def parse_example(value: Any, row: int | None = None) -> Example:
    """A task example from a dataset cell: a dict, or its JSON string."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"row {row}: the 'example' column is not valid JSON ({err})") from err
        if isinstance(parsed, Mapping):
            return dict(parsed)
    raise ValueError(f"row {row}: the 'example' column must hold a dict or its JSON string, "
                     f"got {type(value).__name__}")


def decode_examples(values: Sequence[Any]) -> list[Example]:
    """Examples of a batch's ``example`` cells, each distinct cell decoded once (the N rollouts
    of a prompt share one)."""
    decoded: dict[Any, Example] = {}
    out = []
    for row, value in enumerate(values):
        if value is None:
            raise ValueError(f"row {row}: the dataset needs an 'example' column (the task example as JSON); "
                             "build it with `vpo data export TASK --format trl`")
        cache_key = value if isinstance(value, str) else id(value)
        if cache_key not in decoded:
            decoded[cache_key] = parse_example(value, row)
        out.append(decoded[cache_key])
    return out


def score_task_chains(task: Task, texts: Sequence[str], examples: Sequence[Example], m: int, *,
                      log: Log | None = None, untagged_fallback: bool = False) -> tuple[list[np.ndarray], list[int]]:
    """The (m, D) matrices of ``texts`` (one parse and one scoring each) and each chain's count of
    answers in its tags; through ``log``, the chain metrics of that same pass
    (``vpo.step_metrics.chain_metrics``, the names every engine logs: ``vpo/answers_parsed``,
    ``vpo/parse_rate``, ``vpo/duplicate_rate``, ``vpo/objective/<name>``; ``vpo/over_m_rate`` and
    ``vpo/under_m_rate`` for m > 1) and ``vpo/reward_failures`` (the step's failed reward calls,
    ``task.failures``; past its ``max_failure_rate`` this raises ``RewardFailureError``). ``untagged_fallback``: a chain with no parseable answer (m > 1) is
    scored as one answer, its whole text (``task.score_chain(text, example, 1)``), padded as the
    task pads."""
    counts: dict[str, list[int]] = {"answers": [], "parsed": [], "duplicates": []}
    matrices = []
    for text, example in zip(texts, examples, strict=True):
        stats: dict[str, int] = {}
        matrix = np.asarray(task.score_chain(text, example, m, stats=stats), dtype=np.float64)
        if untagged_fallback and m > 1 and not stats.get("parsed") and isinstance(text, str) and text.strip():
            whole = np.asarray(task.score_chain(text, example, 1), dtype=np.float64)
            matrix, _ = finish_chain(whole, m, pad=task.pad_chains)
            stats["parsed"] = 1
        matrices.append(matrix)
        for key, values in counts.items():
            values.append(stats.get(key, 0))
    failed = task.failures.end_step()  # one call per step: RewardFailureError past max_failure_rate
    if callable(log):
        for name, value in failed.items():
            log(name, value)
        names = task.objective_names(examples[0]) if examples else ()
        best = [mat.max(axis=0) if mat.size else np.zeros(mat.shape[1]) for mat in matrices]
        written = [written_answers(text, task.rewrite_rule.tag) for text in texts] if m > 1 else None
        for name, value in chain_metrics(**counts, best=best, names=names, parse_rate=True, written=written,
                                         m=m).items():
            log(name, value)
    return matrices, counts["answers"]


class TaskScorer:
    """A ``vpo.tasks`` task's scorer: reads the ``example`` column, scores each chain once
    (``score_task_chains``), keys groups on ``example_id`` and reads goal weights from the examples
    (``goals``: the estimator conditions its prompts). ``rollouts(prompts, completions,
    completion_ids, examples) -> matrices`` is the trainer's overridable hook (default ``chains``)."""

    name = "task"
    """The name TRL logs the estimator's score under (``rewards/task/mean``)."""

    def __init__(self, task: Task, answers: int, *, log: Log | None = None,
                 rollouts: Callable[..., list[np.ndarray]] | None = None, untagged_fallback: bool = False,
                 goals: bool = False) -> None:
        self.task, self.answers, self.log = task, answers, log
        self.rollouts = rollouts or self.chains
        self.untagged_fallback, self.goals = untagged_fallback, goals
        self._tagged: list[int] = []

    def chain_prompt(self, prompt: Any) -> Any:
        """The prompt as the data has it: a task's export already asks for m answers."""
        return prompt

    def chains(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any],
               examples: Sequence[Example]) -> list[np.ndarray]:
        """The (m, D) matrix of each completion, each scored once, the chain metrics logged."""
        matrices, tagged = score_task_chains(self.task, [completion_text(c) for c in completions], examples,
                                             self.answers, log=self.log, untagged_fallback=self.untagged_fallback)
        self._tagged.extend(tagged)
        return matrices

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any],
              columns: Mapping[str, Any]) -> ScoredChains:
        """Score this process's completions; ``columns``: what TRL passes a reward function."""
        from vpo.goals import goal_of

        values = columns.get("example")
        examples = decode_examples(values if values is not None else [None] * len(completions))
        self._tagged = []
        matrices = [np.asarray(m, dtype=np.float64) for m in self.rollouts(prompts, completions, completion_ids,
                                                                             examples)]
        if len(matrices) != len(completions):
            raise RuntimeError(f"score_rollouts returned {len(matrices)} matrices for {len(completions)} completions")
        keys = group_keys(prompts, columns.get("example_id"))
        if callable(self.log):
            for name, value in pool_metrics([m.shape[0] for m in matrices], keys).items():
                self.log(name, value)
        goals = [goal_of(ex) for ex in examples] if self.goals else [None] * len(matrices)
        scored = ([m for m, t in zip(matrices, self._tagged, strict=True) if t > 0]
                  if len(self._tagged) == len(matrices) else matrices)  # an own score_rollouts: every chain
        names = tuple(self.task.objective_names(examples[0])) if examples else ()
        same_d = bool(names) and all(m.ndim == 2 and m.shape[1] == len(names) for m in scored)
        values = np.concatenate(scored) if scored and same_d else None  # per-example D: not watched
        return ScoredChains(matrices, keys, goals, sum(1 for t in self._tagged if t > 0), len(self._tagged),
                            names=names, answer_values=values)


class FunctionScorer:
    """A user's reward functions as the objectives: each answer-level function called once per step
    on every answer of the process's chains (by ``call``, the trainer's call loop), each chain-level
    one once per completion; the raw values of every process gathered (``gather``) and finished
    together (``vpo.rewards.finish_chains``: the ``None`` rule per group, ``scaling`` over the
    batch, dedup, padding), so every process holds the same batch and takes its own rows
    (``rank``). ``keep_columns``: matrices keep only a group's objectives (estimators that draw
    weights over them); otherwise a dropped objective is a zero column (sums, TRL's nansum).
    ``chat_prompts``: a string prompt is sent as one user turn (TRL applies the chat template to
    it); the functions still get the string, and each completion as its text
    (``vpo.rewards.completion_form``: the data's form, as every other path gives it)."""

    name = "reward_funcs"
    """The name TRL logs the estimator's score under (``rewards/reward_funcs/mean``)."""

    def __init__(self, funcs: list[Any], answers: int, *, names: tuple[str, ...], call: Callable[..., Any],
                 gather: Callable[[list[Any]], list[Any]], rank: Callable[[], int], log: Log | None = None,
                 failures: Any = None, reward_names: Sequence[Any] | None = None, scaling: Any = None,
                 keep_columns: bool = True, untagged_fallback: bool = False, chat_prompts: bool = False) -> None:
        self.funcs, self.answers, self.names = funcs, answers, names
        self.chat_prompts = chat_prompts
        self.call, self.gather, self.rank, self.log, self.failures = call, gather, rank, log, failures
        self.reward_names, self.scaling, self.keep_columns = reward_names, scaling, keep_columns
        self.untagged_fallback = untagged_fallback
        self._singles: dict[str, Any] = {}

    def chain_prompt(self, prompt: Any) -> Any:
        """The m-answer prompt of a dataset prompt (``vpo.rewards.rewrite_chain_prompt``), remembered
        so the functions get the dataset's own prompt back (a string one, with ``chat_prompts``, as one
        user turn)."""
        chain = prompt if self.answers == 1 else rewrite_chain_prompt(prompt, self.answers)
        if self.chat_prompts and isinstance(chain, str):
            chain = [{"role": "user", "content": chain}]
        if chain is not prompt:
            self._singles.setdefault(prompt_key(chain), prompt)
        return chain

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any],
              columns: Mapping[str, Any]) -> ScoredChains:
        """Score this process's completions (``prompts`` as the model saw them; ``columns``: what TRL
        passes a reward function, its hooks included, all passed on)."""
        singles = [self._singles.get(prompt_key(p), p) for p in prompts]
        completions = [completion_form(single, c) for single, c in zip(singles, completions, strict=True)]
        hooks = {k: v for k, v in columns.items() if k in TRL_HOOKS}
        data = {k: v for k, v in columns.items() if k not in TRL_HOOKS}
        scored = score_every_answer(self.funcs, singles, completions, self.answers, reward_names=self.reward_names,
                               call=self.call, tag=CHAIN_TAG if self.answers > 1 else None,
                               untagged_fallback=self.untagged_fallback, completion_ids=completion_ids, hooks=hooks,
                               **data)
        if self.failures is not None:
            for name, value in self.failures.end_step().items():  # RewardFailureError past the rate
                self._log(name, value)
        if scored.names != self.names:
            raise ValueError(f"the reward functions gave objectives {list(scored.names)}, expected {list(self.names)}: "
                             "a callable returning one vector per completion must declare them (f.objective_names = "
                             "(...))")
        keys = group_keys(singles, data.get("example_id"))
        parts = self.gather([(scored, keys)])
        batch = ScoredAnswers.concat([part for part, _ in parts])
        every_key = [key for _, part_keys in parts for key in part_keys]
        chains = finish_chains(batch, self.answers, every_key, scaling=self.scaling)
        start = sum(part.num_chains for part, _ in parts[:self.rank()])
        matrices = [self._matrix(chains, i) for i in range(start, start + len(completions))]
        self._log_batch(chains, every_key)
        written = [written_answers(completion_text(c), CHAIN_TAG) for c in completions] if self.answers > 1 else []
        for name, value in answer_count_metrics(written, self.answers).items():  # this process's share: TRL averages
            self._log(name, value)
        return ScoredChains(matrices, keys, [None] * len(matrices), int(np.count_nonzero(batch.tagged)),
                            batch.num_chains, chains.stats["effective_dim"], len(self.names), tuple(self.names),
                            chains.vectors)

    def _matrix(self, chains: Any, i: int) -> np.ndarray:
        if not self.keep_columns:  # sums and per-objective norms: a dropped objective is a zero column
            return chains.dense(i)
        matrix = chains.matrices[i]  # weights drawn over the objectives a group kept; none kept: scores 0
        return matrix if matrix.shape[1] else np.zeros((0, 1))

    def _log(self, name: str, value: float) -> None:
        if callable(self.log) and math.isfinite(float(value)):
            self.log(name, float(value))

    def _log_batch(self, chains: Any, keys: Sequence[str]) -> None:
        """The batch's chain metrics, and the correlation of each pair of objectives (D <= 4) that
        both varied over the answers (a constant objective has none, and no answers give none)."""
        for key, value in chains.stats.items():
            self._log(f"vpo/{key}", value)
        for name, value in pool_metrics([m.shape[0] for m in chains.matrices], keys).items():
            self._log(name, value)
        names = chains.names
        if not 2 <= len(names) <= 4:
            return
        complete = chains.vectors[~np.isnan(chains.vectors).any(axis=1)]
        varied = complete.std(axis=0) > 1e-12 if complete.shape[0] >= 2 else np.zeros(len(names), dtype=bool)
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                if varied[a] and varied[b]:
                    self._log(f"vpo/correlation/{names[a]}~{names[b]}", float(chains.correlation[a, b]))


def __getattr__(name: str) -> Any:
    """``score_and_log``: the earlier name of ``score_task_chains``' matrices (dated deprecation)."""
    if name == "score_and_log":
        from vpo.deprecation import deprecated

        def matrices(task: Task, texts: Sequence[str], examples: Sequence[Example], m: int, log: Log | None,
                     *, untagged_fallback: bool = False) -> list[np.ndarray]:
            return score_task_chains(task, texts, examples, m, log=log, untagged_fallback=untagged_fallback)[0]

        return deprecated(matrices, f"{__name__}.score_and_log", f"{__name__}.score_task_chains(...)[0]")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The Task contract: prompts, answer parsing and a reward vector in [0, 1]^D per answer.

A task is a small environment in the Gymnasium / MO-Gymnasium spirit, except that one
"step" is a whole generation::

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]      # a JSON-serialisable dict, validated
    task.messages(example, m=3)                         # chat turns every engine trains on
    matrix = task.score_chain(model_text, example, m=3) # (3, D), deduplicated, zero-padded
    task.scalar(matrix)                                 # (3,) fixed scalars (GRPO / evaluation)

What a subclass writes: ``prompt_single`` and ``score`` (or ``score_batch`` when answers are
cheaper to score together, as code is), the class attributes, and ``validate``. Everything an
engine needs goes through ``messages`` (the prompt) and ``score_chain`` (the reward matrix), which
subclasses do not override: ``rewrite_rule``, ``parse_chain`` (with its inverse ``format_chain``),
``score_batch`` and ``dedup_key`` are the hooks. ``vpo.tasks.check.check_task`` checks a task against this contract.

Examples are validated once, when they are loaded (``examples``, ``validate``); scoring
assumes a validated example. Scoring never raises on model text: garbage scores the zero
vector. Malformed *examples* (data, not model output) raise ValueError naming the field and
the row.

A scorer that breaks that promise anyway (a bug that raises on one strange answer, a NaN, a
call past ``RewardFailurePolicy.time_limit``) is a failed reward call: ``score_answers``, which
``score_chain`` and evaluation score through, gives that answer 0 on that objective, counts it
in ``task.failures`` (``vpo.reward_failures``, the policy every engine applies to the user's own
reward functions too) and logs the first traceback of each kind once. Scorers with their own
time limits (math-verify, the sandbox) report the answers they give up on with
``report_failures``. The engine closes each step with ``task.failures.end_step()``, which stops
the run past ``max_failure_rate``.

Shape glossary: M answers per chain (m), D objectives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from vpo.chains import RewriteRule, finish_chain, parse_answers, rewrite_prompt
from vpo.reward_failures import NonFiniteReward, RewardContractError, RewardFailures, run_limited

Example = dict[str, Any]

SOLVED_TOL = 1e-9
"""A component is at its maximum when it is >= 1 - SOLVED_TOL (float rounding of 1.0)."""


class Task(ABC):
    """Base class of every task. Subclasses set the class attributes and implement
    ``prompt_single`` and ``score``; the rest has working defaults."""

    name: ClassVar[str] = ""
    """Registry name."""
    ability: ClassVar[str] = "reasoning"
    """What the task exercises, e.g. "planning" (verl's ``ability`` column)."""
    objectives: tuple[str, ...] = ()
    """Names of the D objectives, in reward-vector order (per-example tasks override
    ``objective_names``)."""
    rewrite_rule: ClassVar[RewriteRule]
    """How the single-answer prompt becomes the m-answer prompt."""
    parse_fallbacks: ClassVar[bool] = False
    """Use the maze fallbacks of ``parse_answers`` when no numbered tag is found."""
    pad_chains: ClassVar[bool] = True
    """Zero-pad chain matrices to exactly m rows (code tasks keep them unpadded)."""
    scores_under_policy: ClassVar[bool] = False
    """True when ``score_batch`` itself runs every reward call under ``failures`` (``own_rewards``
    guards each of the user's functions), so ``score_answers`` adds no guard of its own."""

    # ----- prompts -------------------------------------------------------------------
    @abstractmethod
    def prompt_single(self, example: Example) -> str:
        """The single-answer prompt (the format GRPO trains on)."""

    def prompt(self, example: Example, m: int = 1) -> str:
        """Prompt asking for ``m`` answers as one string; m = 1 is the single-answer prompt.
        An example with goal weights (``vpo.goals``) gets the sentence that states them."""
        single = self.prompt_single(example)
        text = single if m == 1 else rewrite_prompt(single, m, self.rewrite_rule)
        return self.with_goal(text, example)

    def with_goal(self, text: str, example: Example) -> str:
        """``text`` followed by the statement of ``example``'s goal weights, when it has them
        (goal-conditioned GRPO); unchanged otherwise."""
        from vpo.goals import goal_of, goal_text

        weights = goal_of(example)
        if weights is None:
            return text
        return f"{text.rstrip()}\n\n{goal_text(weights, self.objective_names(example))}"

    def messages(self, example: Example, m: int = 1) -> list[dict[str, str]]:
        """The chat turns asking for ``m`` answers: what every engine (TRL, verl, OpenRLHF,
        evaluation) sends to the model. Default: one user turn holding ``prompt(example, m)``."""
        return [{"role": "user", "content": self.prompt(example, m)}]

    # ----- scoring -------------------------------------------------------------------
    @abstractmethod
    def score(self, text: str, example: Example) -> np.ndarray:
        """Reward vector (D,) in [0, 1] of one answer text. Never raises on model text."""

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) reward vectors of ``n`` answers to one example. Override when answers are
        cheaper scored together (one sandbox batch for code)."""
        dim = self.num_objectives(example)
        rows = [np.asarray(self.score(a, example), dtype=np.float64).reshape(-1) for a in answers]
        return np.array(rows, dtype=np.float64).reshape(len(rows), dim)

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        """The D objective names (for ``example`` where D varies per example)."""
        return self.objectives

    def num_objectives(self, example: Example | None = None) -> int:
        """D for ``example``."""
        return len(self.objective_names(example))

    def parse_chain(self, text: str, m: int) -> list[str]:
        """Exactly ``m`` answer strings of an m-answer generation (missing ones empty)."""
        return parse_answers(text, m, tag=self.rewrite_rule.tag, fallbacks=self.parse_fallbacks)

    def format_chain(self, answers: Sequence[str]) -> str:
        """The m-answer generation holding ``answers`` (single answers, as a model writes them for
        the single-answer prompt) in this task's chain format, as the m-answer prompt asks for it:
        ``parse_chain``'s inverse (``parse_chain(format_chain(a), len(a))`` gives each answer back,
        as the task reads it, and ``tagged_answers`` counts all of them). Default: each answer in the
        rule's numbered tags (``vpo.chains.format_chain``). ValueError for an answer that cannot
        stand in a chain (blank, or holding the chain's own markup)."""
        from vpo.chains import format_chain

        return format_chain(answers, self.rewrite_rule.tag)

    def tagged_answers(self, text: str, m: int) -> int:
        """How many of the chain's answers stand in its numbered tags (``<tag_i>``), as opposed to
        the fallbacks (``---`` pieces, the whole text) that ``parse_chain`` also reads. A task
        with its own ``parse_chain`` and no override here: every answer it parses counts."""
        if type(self).parse_chain is not Task.parse_chain:
            return sum(1 for a in self.parse_chain(text, m) if isinstance(a, str) and a.strip())
        return self._tagged_blocks(text, m)

    def _tagged_blocks(self, text: str, m: int) -> int:
        """Non-blank answers in the chain's numbered tags (the default parser's tags)."""
        from vpo.chains import numbered_blocks

        blocks, _ = numbered_blocks(text if isinstance(text, str) else "", m, self.rewrite_rule.tag)
        return sum(1 for block in blocks if block.strip())

    # ----- reward failures ------------------------------------------------------------
    @property
    def failures(self) -> RewardFailures:
        """This task's reward failure tally (``vpo.reward_failures``), one per task object, under
        the default ``RewardFailurePolicy`` until one is set (``task.failures = RewardFailures(policy)``)."""
        tally = self.__dict__.get("_failures")
        if tally is None:  # setdefault: threads scoring at once share one tally
            tally = self.__dict__.setdefault("_failures", RewardFailures(names=(self.name,)))
        return tally

    @failures.setter
    def failures(self, tally: RewardFailures) -> None:
        if not isinstance(tally, RewardFailures):
            raise TypeError(f"failures must be a vpo.reward_failures.RewardFailures, got {type(tally).__name__}")
        self.__dict__["_failures"] = tally

    def report_failures(self, error: BaseException, count: int = 1) -> None:
        """Count ``count`` answers the scorer gave up on itself (math-verify past its time limit, a
        sandbox that could not start) as failed reward calls; they score 0 in ``score_batch``.
        ``error`` says why, logged once per kind."""
        self.failures.report(self.name, error)
        self.failures.record(self.name, 0, count)

    def score_answers(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) ``score_batch`` of ``answers`` under the reward failure policy: an answer whose
        scoring raises scores the zero vector, a NaN or infinite component scores 0, a call past
        ``failures.policy.time_limit`` scores all its answers 0; each such answer is a failed call,
        counted in ``failures`` (a batch that raises is scored again answer by answer, so only the
        answers that fail count). A wrong shape is the task's own bug and raises
        ``RewardContractError``."""
        dim = self.num_objectives(example)
        batch = list(answers)
        if self.scores_under_policy or not batch:
            return self._checked_vectors(self.score_batch(batch, example), len(batch), dim)
        tally = self.failures
        limit = tally.policy.time_limit

        def scored(part: list[str]) -> np.ndarray:
            return self._checked_vectors(run_limited(lambda: self.score_batch(part, example), {}, limit),
                                         len(part), dim)

        failed = np.zeros(len(batch), dtype=bool)
        try:
            vectors = scored(batch)
        except RewardContractError:
            raise
        except Exception as err:  # noqa: BLE001 - a scorer bug on model text is counted, not fatal
            tally.report(self.name, err)
            vectors = np.zeros((len(batch), dim), dtype=np.float64)
            failed[:] = True
            if len(batch) > 1 and not isinstance(err, TimeoutError):
                for i, answer in enumerate(batch):
                    try:
                        vectors[i], failed[i] = scored([answer])[0], False
                    except RewardContractError:
                        raise
                    except Exception as one:  # noqa: BLE001
                        tally.report(self.name, one)
        if not np.isfinite(vectors).all():  # the rare case: find the answers
            bad = ~np.isfinite(vectors)
            rows = bad.any(axis=1)
            tally.report(self.name, NonFiniteReward(f"{self.name} scored NaN or an infinity for "
                                                    f"{int(rows.sum())} of {len(batch)} answers"))
            vectors = np.where(bad, 0.0, vectors)
            failed |= rows
        tally.record(self.name, len(batch), int(np.count_nonzero(failed)))
        return vectors

    def _checked_vectors(self, vectors: Any, n: int, dim: int) -> np.ndarray:
        out = np.asarray(vectors, dtype=np.float64)
        if out.shape != (n, dim):
            raise RewardContractError(f"{self.name}: score_batch returned shape {out.shape} for {n} answers, "
                                      f"expected ({n}, {dim})")
        return out

    def score_parsed(self, text: str, answers: Sequence[str], example: Example,
                     m: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The (n, D) vectors of an m-answer chain's ``n`` non-blank ``answers`` (``score_answers``)
        and the (D,) row its absent answers take (None: zeros), for ``score_chain``. A task with
        objectives that judge the whole chain ``text`` (``own_rewards``' chain-level functions)
        overrides it."""
        return self.score_answers(answers, example), None

    def dedup_key(self, answer: str, vector: np.ndarray, example: Example) -> Hashable:
        """Answers of one chain with equal keys count once (default: identical reward vectors)."""
        return vector.tobytes()

    def oracle_answers(self, example: Example) -> list[str]:
        """Answer texts written from the example's gold data, in the format its prompt asks for
        (``vpo advantages --task`` scores chains of them). Default: none (a task without gold
        answers, such as your own reward functions)."""
        return []

    def score_chain(self, text: str, example: Example, m: int, *,
                    stats: dict[str, int] | None = None) -> np.ndarray:
        """(m, D) reward matrix of one generation: parse, score (``score_answers``: under the
        reward failure policy), dedup, zero-pad.

        m = 1 scores the whole text as the single answer, so it is (1, D). Blank answers are
        dropped before scoring; the first of answers with equal ``dedup_key`` is kept. With
        ``pad_chains`` False the matrix is (n <= m, D), one row per kept answer. ``stats``, when
        given, accumulates ``answers`` (non-blank answers found in the chain's tags,
        ``tagged_answers``; m = 1: 1 for non-blank text), ``parsed`` (non-blank answers scored,
        fallbacks included) and ``duplicates`` (those the dedup dropped), so a caller logs them
        without parsing the text again.
        """
        dim = self.num_objectives(example)
        if m == 1:
            text = text if isinstance(text, str) else ""
            if stats is not None:
                stats["answers"] = stats.get("answers", 0) + int(bool(text.strip()))
                stats["parsed"] = stats.get("parsed", 0) + int(bool(text.strip()))
            return self.score_answers([text], example).reshape(1, dim)
        answers = [a for a in self.parse_chain(text, m) if isinstance(a, str) and a.strip()]
        vectors, fill = self.score_parsed(text, answers, example, m)
        vectors = np.asarray(vectors, dtype=np.float64).reshape(len(answers), dim) + 0.0  # -0.0 -> 0.0 for the keys
        matrix, duplicates = finish_chain(vectors, m, pad=self.pad_chains, fill=fill,
                                          keys=[self.dedup_key(a, v, example) for a, v in zip(answers, vectors)])
        if stats is not None:
            stats["answers"] = stats.get("answers", 0) + min(self.tagged_answers(text, m), len(answers))
            stats["parsed"] = stats.get("parsed", 0) + len(answers)
            stats["duplicates"] = stats.get("duplicates", 0) + duplicates
        return matrix

    def scalar(self, vectors: np.ndarray | Sequence[float]) -> np.ndarray | float:
        """The task's fixed scalarisation (GRPO and evaluation): (..., D) -> (...). Default mean."""
        arr = np.asarray(vectors, dtype=np.float64)
        out = arr.mean(axis=-1) if arr.shape[-1] else np.zeros(arr.shape[:-1])
        return float(out) if out.ndim == 0 else out

    def solved(self, vector: np.ndarray | Sequence[float]) -> bool:
        """True when every component is at its maximum (1): the one definition of "solved"
        (pass@k counts these)."""
        arr = np.asarray(vector, dtype=np.float64)
        return bool(arr.size and np.all(arr >= 1.0 - SOLVED_TOL))

    def difficulty(self, example: Example) -> str | None:
        """The example's difficulty level for per-level search metrics, or None. Default: its
        ``difficulty`` field when present."""
        level = example.get("difficulty") if isinstance(example, Mapping) else None
        return None if level is None else str(level)

    # ----- data ----------------------------------------------------------------------
    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example's fields; raise ValueError naming the field and row. Returns it."""
        if not isinstance(example, Mapping):
            raise ValueError(f"{self.name}: row {row}: example must be a mapping, got {type(example).__name__}")
        return dict(example)

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[Example]:
        """Examples of a split: generated (maze) or loaded from ``source`` (a file, a local
        parquet, or a Hugging Face dataset name), validated."""
        raise ValueError(f"task {self.name!r} needs a data source (source=...)")


class FileTask(Task):
    """A task whose examples are records of a file or a Hugging Face dataset (all text tasks).

    Subclasses set ``fixture`` (the shipped sample used when no source is given) and convert a
    raw record with ``convert``; ``read_records`` and ``convert_all`` are the hooks for sources
    that need more (several files, a named built-in set).
    """

    fixture: ClassVar[Path | None] = None
    """The shipped sample (for tests and demos, not the benchmark); it serves every split."""

    def read_records(self, source: Any, split: str) -> list[Any]:
        """Raw records of ``source`` for ``split`` (``vpo.tasks.io.load_records``)."""
        from vpo.tasks.io import load_records

        return load_records(source, split)

    def convert(self, record: Any, row: int) -> Any:
        """One raw record in the task's example schema (default: the record itself)."""
        return record

    def convert_all(self, records: list[Any], source: Any, split: str) -> list[Any]:
        """Every record converted (default: ``convert`` one by one)."""
        return [self.convert(record, i) for i, record in enumerate(records)]

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[Example]:
        """Validated examples of ``split`` from ``source`` (default: the shipped ``fixture``).

        ``n`` rows: the first ones, or a seeded random subset when ``seed`` is given.
        """
        from vpo.tasks.io import select

        src = source if source is not None else self.fixture
        if src is None:
            raise ValueError(f"task {self.name!r} needs a data source (source=...)")
        records = self.read_records(src, split)
        converted = self.convert_all(records, src, split)
        return select([self.validate(ex, i) for i, ex in enumerate(converted)], n, seed)


def require(example: Mapping[str, Any], field: str, types: type | tuple[type, ...], task: str,
            row: int | None) -> Any:
    """``example[field]`` checked against ``types``: the earlier name of ``vpo.tasks.io.need``
    (deprecated, with a date; the same checks and messages)."""
    from vpo.deprecation import warn_deprecated
    from vpo.tasks.io import need

    warn_deprecated("vpo.tasks.require", "vpo.tasks.io.need")
    return need(example, field, types, task, row)

"""One metric vocabulary for every engine: the per-step chain and score metrics TRL, verl and
OpenRLHF log, made by one function each, under the same names, and the watches on the chain format
and on objectives that never move.

Usage::

    from vpo.step_metrics import ParseWatch, StillObjectiveWatch, chain_metrics, score_metrics
    chain_metrics(answers=[3, 1], parsed=[3, 2], duplicates=[1, 0], best=[[1, 0.5], [0, 1]], names=["a", "b"])
    # {"vpo/answers_parsed": 2.0, "vpo/duplicate_rate": 0.2, "vpo/objective/a": 0.5, "vpo/objective/b": 0.75}
    score_metrics([0.2, 0.4, 0.9, 0.9], ["p", "p", "q", "q"])
    # {"vpo/score_mean": 0.6, "vpo/group_std": 0.05, "vpo/frac_zero_std": 0.5}
    watch = ParseWatch(answers=3)
    watch.update(parsed=1, total=16)       # warns once (ChainFormatWarning): few chains parse at the start
    still = StillObjectiveWatch()
    still.update([[0.0, 0.3], [0.0, 0.7]], ["accuracy", "brevity"])   # after STILL_BATCHES such batches:
    # warns once (StillObjectiveWarning) that 'accuracy' never moved

``METRICS`` names and explains each (``docs/algorithm.md`` §9 lists them per engine).

Shape glossary: B rollouts, G groups, D objectives, P answers.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from vpo.estimators.common import ZERO_STD

__all__ = ["LOW_PARSE_RATE", "METRICS", "PARSE_WATCH_BATCHES", "STILL_BATCHES", "ChainFormatWarning", "ParseWatch",
           "StillObjectiveWarning", "StillObjectiveWatch", "answer_count_metrics", "chain_metrics", "pool_metrics",
           "score_metrics"]

METRICS: dict[str, str] = {
    "vpo/answers_parsed": "answers per rollout found in the chain's numbered tags (m = 1: 1 for non-blank text)",
    "vpo/parse_rate": "share of rollouts whose chain parsed: at least one answer in its numbered tags (m = 1: "
                      "non-blank text); the untagged fallback's whole-completion answers do not count",
    "vpo/duplicate_rate": "share of the step's non-blank answers that the task's dedup drops",
    "vpo/over_m_rate": "share of rollouts whose chain wrote more than m non-blank answers in numbered tags (m > 1; "
                       "the answers past m are not scored)",
    "vpo/under_m_rate": "share of rollouts whose chain wrote at least one but fewer than m non-blank answers in "
                        "numbered tags (m > 1; a missing answer is a zero row: it never lowers VPO's max, and in "
                        "an evaluation pool it is an answer that scores 0)",
    "vpo/objective/<name>": "mean over rollouts of the best answer's value on objective <name>",
    "vpo/mean_pool_size": "mean over groups of the answers (matrix rows, padding included) their rollouts hold",
    "vpo/score_mean": "mean per-rollout score: the estimator's objective (its registered reduction)",
    "vpo/group_std": "mean over groups of the population std of the score within the group",
    "vpo/frac_zero_std": f"share of groups whose score std is below {ZERO_STD:g} (their advantages are 0)",
}
"""Every name this module makes, and what it measures."""

LOW_PARSE_RATE = 0.5
"""A parse rate below this over the first batches of a run warns (``ParseWatch``)."""

PARSE_WATCH_BATCHES = 3
"""How many generation batches at the start of a run ``ParseWatch`` watches."""


STILL_BATCHES = 5
"""Generation batches with scored answers at the start of a run over which an objective that
keeps one value warns (``StillObjectiveWatch``)."""


class ChainFormatWarning(UserWarning):
    """Few completions wrote a parseable m-answer chain at the start of a run."""


class StillObjectiveWarning(UserWarning):
    """An objective kept one value on every answer at the start of a run: it gives no gradient."""


def chain_metrics(*, answers: Sequence[float], parsed: Sequence[float], duplicates: Sequence[float],
                  best: Any = None, names: Sequence[str] | None = None, parse_rate: bool = False,
                  written: Sequence[int] | None = None, m: int = 1) -> dict[str, float]:
    """Chain metrics of one step's B rollouts.

    ``answers`` (B,) answers found in each chain's tags, ``parsed`` (B,) non-blank answers
    scored, ``duplicates`` (B,) those the dedup dropped, ``best`` (B, D) the best answer's value
    per objective (rows of D = ``len(names)``; NaN where a rollout has no value for the objective,
    left out of its mean; None or ragged D: no objective metrics). ``parse_rate`` adds
    ``vpo/parse_rate``, the share of rollouts with at least one answer in their tags. ``written``
    (B,) the non-blank answers each chain wrote in numbered tags, past m too
    (``vpo.chains.written_answers``), adds ``vpo/over_m_rate`` and ``vpo/under_m_rate`` for m > 1.
    """
    answers = np.asarray(answers, dtype=np.float64).reshape(-1)
    parsed_total = float(np.sum(parsed))
    out = {"vpo/answers_parsed": float(answers.mean()) if answers.size else 0.0,
           "vpo/duplicate_rate": float(np.sum(duplicates)) / parsed_total if parsed_total else 0.0}
    if parse_rate:
        out["vpo/parse_rate"] = float(np.mean(answers > 0)) if answers.size else 0.0
    if written is not None:
        out.update(answer_count_metrics(written, m))
    if best is not None and names:
        rows = [np.asarray(b, dtype=np.float64).reshape(-1) for b in best]
        if rows and all(r.shape == (len(names),) for r in rows):
            stacked = np.stack(rows)
            present = ~np.isnan(stacked)
            sums = np.where(present, stacked, 0.0).sum(axis=0)
            counts = present.sum(axis=0)
            means = np.divide(sums, counts, out=np.zeros(len(names)), where=counts > 0)
            out.update({f"vpo/objective/{name}": float(v) for name, v in zip(names, means, strict=True)})
    return out


def answer_count_metrics(written: Sequence[int], m: int) -> dict[str, float]:
    """``vpo/over_m_rate`` and ``vpo/under_m_rate``: the shares of B chains that wrote more than
    ``m`` answers, and at least one but fewer than ``m`` (a chain with none is a parse failure,
    ``vpo/parse_rate``), from ``written`` (B,) each chain's non-blank answers in numbered tags
    (``vpo.chains.written_answers``); nothing for m = 1 (no tags)."""
    counts = np.asarray(written, dtype=np.float64).reshape(-1)
    if m < 2:
        return {}
    if not counts.size:
        return {"vpo/over_m_rate": 0.0, "vpo/under_m_rate": 0.0}
    return {"vpo/over_m_rate": float(np.mean(counts > m)),
            "vpo/under_m_rate": float(np.mean((counts >= 1) & (counts < m)))}


def pool_metrics(rows: Sequence[int], group_ids: Sequence[Hashable]) -> dict[str, float]:
    """``vpo/mean_pool_size``: the mean over groups of the rows (answers, padding included) of
    their rollouts' matrices; ``rows`` (B,) each rollout's row count."""
    from vpo.objective import factorize

    counts = np.asarray(rows, dtype=np.float64).reshape(-1)
    if not counts.size:
        return {}
    index, labels = factorize(list(group_ids), counts.size)
    return {"vpo/mean_pool_size": float(np.bincount(index, weights=counts, minlength=len(labels)).mean())}


def score_metrics(scores: Sequence[float], group_ids: Sequence[Hashable]) -> dict[str, float]:
    """Score metrics of one step: the mean per-rollout score and its spread within groups
    (population std, the ``vpo`` estimator's; groups below ``ZERO_STD`` get zero advantages)."""
    from vpo.estimators.normalize import group_stats
    from vpo.objective import factorize

    values = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not values.size:
        return {}
    index, labels = factorize(list(group_ids), values.size)
    stds = group_stats(values, index, len(labels), 0)[2]
    return {"vpo/score_mean": float(values.mean()), "vpo/group_std": float(stds.mean()),
            "vpo/frac_zero_std": float((stds < ZERO_STD).mean())}


class ParseWatch:
    """Warns once (``ChainFormatWarning``) when, over the first ``PARSE_WATCH_BATCHES`` generation
    batches of a run, fewer than ``LOW_PARSE_RATE`` of the m-answer completions parsed: a model
    that does not write the ``<tag_i>`` format scores nothing and trains on nothing, in silence.
    ``fallback`` says whether the untagged fallback is on (the message then says so); ``where``
    names the caller in the message. m = 1 has no chain format and never warns."""

    def __init__(self, answers: int, *, fallback: bool = False, where: str = "VPOTrainer") -> None:
        self.answers, self.fallback, self.where = int(answers), bool(fallback), where
        self.batches = self.parsed = self.total = 0
        self.warned = False

    def update(self, parsed: int, total: int) -> None:
        """Count one generation batch: ``parsed`` of its ``total`` completions parsed."""
        if self.answers < 2 or self.warned or self.batches >= PARSE_WATCH_BATCHES or total <= 0:
            return
        self.batches += 1
        self.parsed += int(parsed)
        self.total += int(total)
        rate = self.parsed / self.total
        if rate >= LOW_PARSE_RATE:
            return
        self.warned = True
        fallback = ("the untagged fallback is on, so an untagged completion trains as one answer; to get "
                    "several answers per completion, " if self.fallback else
                    "a completion with no answer scores nothing and gives no gradient. Remedies: turn on the "
                    "untagged fallback (untagged_fallback=True, `vpo train --untagged-fallback`: an untagged "
                    "completion counts as one answer), ")
        warnings.warn(
            f"{self.where}: only {self.parsed} of {self.total} completions ({rate:.0%}) over the first "
            f"{self.batches} batch(es) wrote their answers in the numbered tags of an m = {self.answers} chain "
            f"(vpo/parse_rate): the model does not follow the format yet; {fallback}warm the model up on m-answer "
            "chains of its own samples (`vpo warmup`)" + ("" if self.fallback else ", or ask for fewer answers")
            + " (docs/own_rewards.md, 'A model that does not write m answers')",
            ChainFormatWarning, stacklevel=3)


class StillObjectiveWatch:
    """Warns once (``StillObjectiveWarning``) naming each objective that had one value on every
    scored answer over the first ``STILL_BATCHES`` generation batches of a run (TRL's
    ``accuracy_reward`` at 0 when the model never writes ``\\boxed{}``): such an objective gives
    no gradient, under any method, until it moves. Batches without a scored answer are not
    counted (``ParseWatch`` speaks for those); an objective with no value yet is not judged.
    ``where`` names the caller in the message."""

    def __init__(self, *, where: str = "VPOTrainer") -> None:
        self.where = where
        self.names: tuple[str, ...] | None = None
        self.batches = self.answers = 0
        self.low = self.high = np.zeros(0)
        self.done = False

    def update(self, values: Any, names: Sequence[str]) -> None:
        """Count one generation batch: ``values`` (P, D) its scored answers' values on the D
        objectives ``names`` (NaN: no value)."""
        names = tuple(names)
        rows = np.asarray(values, dtype=np.float64).reshape(-1, len(names)) if names else np.zeros((0, 0))
        if self.done or not rows.shape[0]:
            return
        if self.names is None:
            self.names, self.low, self.high = names, np.full(len(names), np.inf), np.full(len(names), -np.inf)
        elif names != self.names:  # the objectives changed under the watch: nothing to say
            self.done = True
            return
        present = ~np.isnan(rows)
        self.low = np.minimum(self.low, np.where(present, rows, np.inf).min(axis=0))
        self.high = np.maximum(self.high, np.where(present, rows, -np.inf).max(axis=0))
        self.batches += 1
        self.answers += rows.shape[0]
        if self.batches < STILL_BATCHES:
            return
        self.done = True
        still = [f"{name!r} ({self.low[j]:g})" for j, name in enumerate(self.names)
                 if np.isfinite(self.low[j]) and self.low[j] == self.high[j]]
        if still:
            warnings.warn(
                f"{self.where}: objective{'s' if len(still) > 1 else ''} {', '.join(still)} had one value on every "
                f"one of the {self.answers} answers of the first {self.batches} batches: it gives no gradient until "
                "it moves (a reward the model never earns, or one that reads a format the answers do not have; "
                "check it on the model's own answers with `vpo rewards check`)", StillObjectiveWarning, stacklevel=3)

"""MuSiQue multi-hop question answering with per-hop evidence rewards (docs/algorithm.md §4).

Usage::

    from vpo.tasks import get_task
    task = get_task("musique")                       # block="first", citations="comma" (the release)
    lenient = get_task("musique", block="last", citations="any")
    example = task.examples("test", 1)[0]            # shipped fixture (a tiny sample, not the benchmark)
    rows = task.examples("dev", source="data/musique_ans_v1.0_{split}.jsonl")   # the real data
    task.score("<support>3, 7</support><answer>Paris</answer>", example)  # (5,) vector
    eval_set = hop_stratified(rows, per_hop=100, seed=0)   # the paper's 300-question selection

Objectives (D = 5, each in [0, 1]):

* ``hop_1`` .. ``hop_4``: 1 if the gold supporting paragraph of decomposition step i is among
  the first 4 distinct indices cited in ``<support>``; steps beyond the question's hop count
  score 1. Only 4 citations count, so citing every paragraph does not pay.
* ``answer_f1``: SQuAD token F1 of ``<answer>`` against the answer and its aliases (max).

An answer without a ``<answer>...</answer>`` block (or with an empty one) scores the zero
vector. The fixed scalar is ``(hop_1 + hop_2 + hop_3 + hop_4 + 3 * answer_f1) / 7``.

Options (keyword arguments of ``get_task``; JSON strings, so they travel in ``task_params``):

* ``block="first"`` (default) reads the first ``<support>`` and the first ``<answer>`` block,
  as the authors' release does; ``block="last"`` reads the last ones (a model that echoes
  the requested format in its reasoning then still gets its final answer read).
* ``citations="comma"`` (default) splits ``<support>`` on commas and counts an item only
  when it is a bare integer (digits 0-9 once stripped), as the release does (the prompt asks
  for this form): ``3, 7`` cites 3 and 7; ``[3, 7]`` and ``3 7`` cite nothing; ``[3, 7, 9]``
  cites 7. ``citations="any"`` counts every integer written in ``<support>`` (``[3, 7]``,
  ``3 and 7``, ``#3 #7`` all cite 3 and 7).

The defaults reproduce the release, whose rewards the paper's results were trained and
measured with (docs/fidelity.md lists every such choice).

m-answer chains put each answer in ``<response_i><support>..</support><answer>..</answer>
</response_i>``; duplicates are answers with identical score vectors.

Data: MuSiQue-Ans JSONL rows ``{id, paragraphs: [{idx, title, paragraph_text,
is_supporting}], question, question_decomposition: [{id, question, answer,
paragraph_support_idx}], answer, answer_aliases, answerable}`` (``answer_aliases``,
``answerable``, ``is_supporting`` and the decomposition's ``id/question/answer`` are
optional). ``source`` is any source ``vpo.tasks.io.load_records`` accepts; the default is the
shipped fixture ``fixtures/musique.jsonl`` (6 invented questions, used for every split).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import Example, register_task
from vpo.tasks.base import FileTask
from vpo.tasks.io import need, select
from vpo.tasks.text import (BLOCK_CHOICES, check_option, max_token_f1, parse_comma_indices, parse_indices,
                            pick_tag)

__all__ = ["CITATION_CHOICES", "FIXTURE", "MAX_CITATIONS", "MusiqueTask", "hop_count", "hop_stratified"]

FIXTURE = Path(__file__).with_name("fixtures") / "musique.jsonl"
MAX_HOPS = 4
MAX_CITATIONS = 4
"""Only the first this-many distinct cited indices count (anti "cite everything")."""
CITATION_CHOICES = ("comma", "any")
"""How ``<support>`` is read: ``comma`` = comma-separated bare integers only (the release),
``any`` = every integer written in it."""

_SINGLE_INSTRUCTION = (
    "Reason step by step. Then give the indices of the paragraphs that support your answer "
    "(only the first 4 count) and a short final answer, in exactly this form:\n"
    "<support>indices, comma-separated</support>\n"
    "<answer>short answer</answer>"
)

_MULTI_TEMPLATE = (
    "Reason step by step. Then give {m} genuinely different answers: each should rest on a "
    "different set of supporting paragraphs or reach a different final answer, not reword "
    "another one. Put answer i inside <{tag}_i>...</{tag}_i> (i = 1..{m}); each holds its own "
    "supporting paragraph indices (only the first 4 count) and short final answer:\n"
    "<{tag}_1><support>indices, comma-separated</support><answer>short answer</answer></{tag}_1>\n"
    "...\n"
    "<{tag}_{m}><support>indices, comma-separated</support><answer>short answer</answer></{tag}_{m}>"
)

_PROMPT = (
    "Answer the question using the numbered paragraphs below. The question takes several "
    "reasoning steps, and each step is supported by one of the paragraphs.\n\n"
    "{paragraphs}\n\n"
    "Question: {question}\n\n"
    + _SINGLE_INSTRUCTION
)

_HOP_PREFIX = re.compile(r"([1-9])hop")


def _format_paragraphs(paragraphs: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(f"[{p['idx']}] (Title: {p['title']}) {p['paragraph_text']}" for p in paragraphs)


def hop_count(example: Mapping[str, Any]) -> int:
    """Number of hops: from the id prefix (``2hop__``, ``3hop1__``, ``4hop3__``), else the
    length of ``question_decomposition``."""
    match = _HOP_PREFIX.match(str(example.get("id", "")))
    if match:
        return int(match.group(1))
    return len(example.get("question_decomposition") or ())


def hop_stratified(examples: Sequence[Example], per_hop: int = 100, hops: Sequence[int] = (2, 3, 4),
                   seed: int = 0) -> list[Example]:
    """The paper's evaluation selection: ``per_hop`` questions of each hop count (by id prefix).

    For each hop count in ``hops`` (in that order) the questions with that count are shuffled
    with ``random.Random(seed + hops)`` and the first ``per_hop`` kept, so adding hop counts
    never changes another group's draw. Raises ValueError when a group is too small.
    Default: 100 each of 2-, 3-, 4-hop = 300 questions.
    """
    groups: dict[int, list[Example]] = {h: [] for h in hops}
    for example in examples:
        h = hop_count(example)
        if h in groups:
            groups[h].append(example)
    out: list[Example] = []
    for h in hops:
        group = groups[h]
        if len(group) < per_hop:
            raise ValueError(f"hop_stratified: only {len(group)} {h}-hop questions, need {per_hop}")
        out.extend(select(group, per_hop, seed=seed + h))
    return out


@register_task("musique")
class MusiqueTask(FileTask):
    """MuSiQue-Ans: cite supporting paragraphs and answer; vector [hop_1..hop_4, answer_f1]."""

    objectives = ("hop_1", "hop_2", "hop_3", "hop_4", "answer_f1")
    rewrite_rule = RewriteRule("musique", template=_MULTI_TEMPLATE, pattern=re.escape(_SINGLE_INSTRUCTION),
                               tag="response")
    ability = "multi_hop_qa"
    fixture = FIXTURE

    def __init__(self, block: str = "first", citations: str = "comma") -> None:
        self.block = check_option("musique", "block", block, BLOCK_CHOICES)
        self.citations = check_option("musique", "citations", citations, CITATION_CHOICES)

    def __repr__(self) -> str:
        return f"MusiqueTask(block={self.block!r}, citations={self.citations!r})"

    # ----- prompts -------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        return _PROMPT.format(paragraphs=_format_paragraphs(example["paragraphs"]),
                              question=example["question"])

    # ----- scoring -------------------------------------------------------------------
    def oracle_answers(self, example: Example) -> list[str]:
        """The gold supporting paragraphs of the decomposition steps and the gold answer."""
        support = ", ".join(str(step["paragraph_support_idx"]) for step in example["question_decomposition"]
                            if step.get("paragraph_support_idx") is not None)
        return [f"<support>{support}</support><answer>{example['answer']}</answer>"]

    def score(self, text: str, example: Example) -> np.ndarray:
        """[hop_1, hop_2, hop_3, hop_4, answer_f1] of one answer text; never raises on text."""
        out = np.zeros(len(self.objectives), dtype=np.float64)
        answer = pick_tag(text, "answer", self.block)
        if not answer:
            return out
        support = pick_tag(text, "support", self.block) or ""
        indices = parse_comma_indices(support) if self.citations == "comma" else parse_indices(support)
        cited: list[int] = []
        for idx in indices:
            if idx not in cited:
                cited.append(idx)
                if len(cited) == MAX_CITATIONS:
                    break
        steps = example["question_decomposition"]
        for i in range(MAX_HOPS):
            out[i] = 1.0 if i >= len(steps) or steps[i]["paragraph_support_idx"] in cited else 0.0
        out[MAX_HOPS] = max_token_f1(answer, [example["answer"], *example.get("answer_aliases", ())])
        return out

    def scalar(self, vectors: np.ndarray | Sequence[float]) -> np.ndarray | float:
        """(hop_1 + hop_2 + hop_3 + hop_4 + 3 * answer_f1) / 7 over the last axis."""
        arr = np.asarray(vectors, dtype=np.float64)
        out = (arr[..., :MAX_HOPS].sum(axis=-1) + 3.0 * arr[..., MAX_HOPS]) / (MAX_HOPS + 3)
        return float(out) if np.ndim(out) == 0 else out

    # ----- data ----------------------------------------------------------------------
    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check a MuSiQue-Ans row; returns a copy with ``answer_aliases`` defaulted to []."""
        example = super().validate(example, row)
        name = self.name
        need(example, "id", str, name, row)
        need(example, "question", str, name, row)
        need(example, "answer", str, name, row)
        aliases = example.get("answer_aliases")
        if aliases is None:
            aliases = []
        if not isinstance(aliases, list | tuple) or not all(isinstance(a, str) for a in aliases):
            raise ValueError(f"{name}: row {row}: field 'answer_aliases' must be a list of str")
        example["answer_aliases"] = list(aliases)
        if example.get("answerable", True) is False:
            raise ValueError(f"{name}: row {row}: field 'answerable' is false; only answerable "
                             "(MuSiQue-Ans) questions can be scored")
        paragraphs = need(example, "paragraphs", list, name, row)
        if not paragraphs:
            raise ValueError(f"{name}: row {row}: field 'paragraphs' is empty")
        indices = set()
        for j, para in enumerate(paragraphs):
            where = f"paragraphs[{j}]"
            indices.add(need(para, "idx", int, name, row, where))
            need(para, "title", str, name, row, where)
            need(para, "paragraph_text", str, name, row, where)
        steps = need(example, "question_decomposition", list, name, row)
        if not 1 <= len(steps) <= MAX_HOPS:
            raise ValueError(f"{name}: row {row}: field 'question_decomposition' must have 1..{MAX_HOPS} "
                             f"steps, got {len(steps)}")
        for j, step in enumerate(steps):
            where = f"question_decomposition[{j}]"
            support = need(step, "paragraph_support_idx", int, name, row, where)
            if support not in indices:
                raise ValueError(f"{name}: row {row}: field '{where}.paragraph_support_idx' = {support} "
                                 "is not the idx of any paragraph")
        return example

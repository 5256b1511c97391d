"""EUREQA entity back-chaining: resolve five masked entities of a narrative (docs/algorithm.md §4).

Usage::

    from vpo.tasks import get_task
    task = get_task("eureqa")                      # block="first" (the release); block="last"
    example = task.examples("test", 1)[0]          # shipped fixture (a tiny sample, not the benchmark)
    task.score("<entity_A>Ada_Lovelace</entity_A> ...", example)   # (5,) vector of 0/1
    # rows = task.examples("test", source="vincentleebang/EUREQA:default")  # HF rows (the Hub) are converted

Objectives (D = 5): ``entity_A`` .. ``entity_E``, 1 when the text of ``<entity_X>...</entity_X>``
(tag name matched case-insensitively, as in the release) equals the gold name after
normalisation (``_`` -> space, lowercase, drop punctuation and the articles a/an/the, collapse
whitespace), else 0. ``entity_A`` is the answer to the question; B..E are the intermediate
entities of the chain. A gold value may list aliases; matching any counts. An empty
prediction never matches. The fixed scalar is the mean.

Option ``block`` (a keyword of ``get_task``, JSON-serialisable for ``task_params``): which
``<entity_X>`` block counts when a letter's tag occurs more than once. ``"first"`` (default)
reads the first one, as the authors' release does (so the paper's rewards are reproduced);
``"last"`` reads the last one (the answer after the reasoning, which may echo the format).

m-answer chains put each resolution in ``<response_i>`` holding all five entity tags;
duplicates are answers with identical score vectors.

Example schema (what ``validate`` checks; JSON-serialisable)::

    {"id": "eq-0001",                         # str or int
     "narrative": "Person A directed Film B, ...",   # str: the story with masked entities
     "masks": ["Person A", "Film B", "Person C", "Country D", "City E"],  # 5 str: the labels
     "entities": {"A": "Robert_Rodriguez", "B": "...", "C": "...", "D": "...", "E": "..."}}
                                              # gold names; a value may be a list of aliases

Raw EUREQA rows as published (``{idx, question: [sentences], entity_masks: [...],
entities: [...]}``, at least 5 of each) are converted on load: the narrative is the sentences
joined by newlines, and A..E are the first five masks / entities. The default source is the
shipped fixture ``fixtures/eureqa.json`` (4 invented stories, used for every split).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import Example, register_task
from vpo.tasks.base import FileTask
from vpo.tasks.io import need
from vpo.tasks.text import BLOCK_CHOICES, check_option, normalize_entity, pick_tag

__all__ = ["FIXTURE", "LETTERS", "EureqaTask", "from_eureqa_row"]

FIXTURE = Path(__file__).with_name("fixtures") / "eureqa.json"
LETTERS = ("A", "B", "C", "D", "E")

_TAGS_BLOCK = "\n".join(f"<entity_{x}>name</entity_{x}>" for x in LETTERS)
_SINGLE_INSTRUCTION = (
    "After your reasoning, end with exactly these five tags, one name in each:\n" + _TAGS_BLOCK
)
_MULTI_TEMPLATE = (
    "After your reasoning, give {m} genuinely different resolutions of the chain (different "
    "candidate entities, not rewordings of one resolution). Wrap resolution i in "
    "<{tag}_i>...</{tag}_i> (i = 1..{m}); each holds all five tags, one name in each:\n"
    "<{tag}_1>\n" + _TAGS_BLOCK + "\n</{tag}_1>\n"
    "...\n"
    "<{tag}_{m}>\n" + _TAGS_BLOCK + "\n</{tag}_{m}>"
)
_PROMPT = (
    "The story below describes a chain of real-world entities but hides five of them behind "
    "labels. Use the relations in the story to work out what each label stands for; the last "
    "sentence names a known entity, so work backwards from it.\n\n"
    "Story:\n{narrative}\n\n"
    "Hidden entities:\n{masks}\n\n"
    "Write each hidden entity's canonical Wikipedia-style name, with underscores for spaces "
    "(for example Ada_Lovelace or Treaty_of_Paris_(1783)). The answer to the question is "
    "entity A.\n\n" + _SINGLE_INSTRUCTION
)


def _gold_names(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def from_eureqa_row(row: Any, index: int | None = None) -> Example:
    """Convert a published EUREQA row (``idx, question, entity_masks, entities``) to the
    example schema above; a row already in that schema is returned unchanged."""
    if not isinstance(row, Mapping) or "entity_masks" not in row:
        return row  # validate() reports what is wrong with it
    task = "eureqa"
    masks = need(row, "entity_masks", list, task, index)
    entities = need(row, "entities", list, task, index)
    question = need(row, "question", (list, str), task, index)
    for field, values in (("entity_masks", masks), ("entities", entities)):
        if len(values) < len(LETTERS):
            raise ValueError(f"{task}: row {index}: field {field!r} needs at least {len(LETTERS)} "
                             f"items, got {len(values)}")
    if isinstance(question, list) and not all(isinstance(s, str) for s in question):
        raise ValueError(f"{task}: row {index}: field 'question' must be a str or a list of str")
    narrative = question if isinstance(question, str) else "\n".join(question)
    return {"id": row.get("idx", row.get("id", index)), "narrative": narrative,
            "masks": list(masks[: len(LETTERS)]),
            "entities": dict(zip(LETTERS, entities[: len(LETTERS)], strict=True))}


@register_task("eureqa")
class EureqaTask(FileTask):
    """EUREQA: name the five masked entities; vector of exact matches [entity_A..entity_E]."""

    objectives = tuple(f"entity_{x}" for x in LETTERS)
    rewrite_rule = RewriteRule("eureqa", template=_MULTI_TEMPLATE, pattern=re.escape(_SINGLE_INSTRUCTION),
                               tag="response")
    ability = "entity_reasoning"
    fixture = FIXTURE

    def __init__(self, block: str = "first") -> None:
        self.block = check_option("eureqa", "block", block, BLOCK_CHOICES)

    def __repr__(self) -> str:
        return f"EureqaTask(block={self.block!r})"

    def prompt_single(self, example: Example) -> str:
        masks = "\n".join(f"{x}: {mask}" for x, mask in zip(LETTERS, example["masks"], strict=True))
        return _PROMPT.format(narrative=example["narrative"], masks=masks)

    def oracle_answers(self, example: Example) -> list[str]:
        """The gold name of every entity (the first one where the data lists aliases)."""
        return ["\n".join(f"<entity_{key}>{_gold_names(value)[0]}</entity_{key}>"
                          for key, value in example["entities"].items())]

    def score(self, text: str, example: Example) -> np.ndarray:
        """Exact-match vector [entity_A..entity_E] of one answer text; never raises on text."""
        out = np.zeros(len(LETTERS), dtype=np.float64)
        if not isinstance(text, str) or "<" not in text:
            return out
        entities = example["entities"]
        for i, letter in enumerate(LETTERS):
            pred = normalize_entity(pick_tag(text, f"entity_{letter}", self.block, ignore_case=True))
            if pred and any(pred == normalize_entity(g) for g in _gold_names(entities[letter])):
                out[i] = 1.0
        return out

    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example in the schema of the module docstring (raw EUREQA rows: convert
        with ``from_eureqa_row`` first; ``examples`` does)."""
        example = super().validate(example, row)
        name = self.name
        need(example, "id", (str, int), name, row)
        need(example, "narrative", str, name, row)
        masks = need(example, "masks", list, name, row)
        if len(masks) != len(LETTERS) or not all(isinstance(m, str) for m in masks):
            raise ValueError(f"{name}: row {row}: field 'masks' must be a list of {len(LETTERS)} str")
        entities = need(example, "entities", dict, name, row)
        for letter in LETTERS:
            gold = need(entities, letter, (str, list), name, row, "entities")
            names = _gold_names(gold)
            if not names or not all(isinstance(g, str) for g in names) or not any(
                    normalize_entity(g) for g in names):
                raise ValueError(f"{name}: row {row}: field 'entities.{letter}' must be a non-empty "
                                 "name or a non-empty list of names")
        return example

    def convert(self, record: Any, row: int) -> Example:
        """A raw EUREQA row (or a row already in the example schema) as an example."""
        return from_eureqa_row(record, row)

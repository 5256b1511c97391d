"""The ``describe`` task's reward functions, written as a TRL user writes them.

Usage::

    from vpo.tasks.describe.rewards import brevity, facts, flair
    columns = {"topic": ["lemon", "lemon"], "known_facts": ["sour yellow citrus juice", "sour yellow citrus juice"]}
    answers = ["A sour lemon.", "A zesty, golden lemon: sour, yellow citrus full of juice."]
    brevity(answers, **columns), facts(answers, **columns), flair(answers, **columns)   # as GRPOTrainer calls them

Each is a plain callable ``f(completions, **kwargs) -> list[float]`` reading the dataset columns
``topic`` (the thing described, e.g. ``"lemon"``) and ``known_facts`` (words that state something true
and typical about it, space-separated), as TRL passes columns. Each scores what one reader of a
one-sentence description wants, in [0, 1]:

* ``brevity``, the reader who skims: few words (1 up to ``BRIEF_WORDS``, 0 from ``LONG_WORDS``),
  and only for an answer that names the topic and states at least one true fact about it;
* ``facts``, the student: distinct true facts stated, ``FACTS_FOR_FULL`` of them for 1;
* ``flair``, the copywriter: distinct evocative words (``FLAIR_WORDS``), ``FLAIR_FOR_FULL`` of
  them for 1, for an answer that names the topic.

No answer maxes all three: full facts and flair take more words than brevity allows. None
can be maxed by a trivial answer: each needs the topic named, and two need knowledge of it (or a
vocabulary the model must produce). Scoring is exact word matching, cheap and offline.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["BRIEF_WORDS", "FACTS_FOR_FULL", "FLAIR_FOR_FULL", "FLAIR_WORDS", "LONG_WORDS", "brevity", "facts",
           "flair", "words"]

BRIEF_WORDS = 5
"""An answer of at most this many words gets the full ``brevity``."""
LONG_WORDS = 15
"""From this many words on, ``brevity`` is 0 (linear in between)."""
FACTS_FOR_FULL = 4
"""Distinct true facts for a full ``facts`` score."""
FLAIR_FOR_FULL = 3
"""Distinct evocative words for a full ``flair`` score."""

FLAIR_WORDS = frozenset("""
beautiful majestic stunning magnificent elegant graceful gorgeous lovely breathtaking enchanting delightful
delicious glorious mysterious vibrant radiant dazzling exquisite splendid wonderful marvelous marvellous serene
charming captivating charismatic mesmerizing mesmerising spectacular striking vivid luminous gleaming glistening
shimmering sparkling glowing velvety silky luscious succulent heavenly divine magical whimsical playful joyful
cheerful cozy cosy rustic timeless iconic legendary noble proud fierce powerful mighty gentle tender delicate
dainty exotic fragrant aromatic zesty refreshing invigorating soothing tranquil peaceful idyllic picturesque
awe awesome amazing incredible extraordinary remarkable fascinating intriguing irresistible indulgent decadent
rich lush vast boundless endless ancient enduring bold daring wild untamed fearless regal royal opulent ornate
""".split())
"""Evocative words a copywriter reaches for (an answer's words are matched after
``normal``: lower case, a plural ``-s`` dropped)."""

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def normal(word: str) -> str:
    """A word's matching form: lower case, a plural's ``-s`` / ``-ies`` undone (``berries`` ->
    ``berry``, ``lemons`` -> ``lemon``; ``glass`` stays)."""
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """The answer's words, lower case, possessives kept whole (``lion's``)."""
    return _WORD.findall(text.lower())


def _text(completion: Any) -> str:
    """A completion as text: TRL gives a string, or chat turns for a conversational dataset."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def _column(values: Any, n: int, name: str) -> list[Any]:
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
    return values


def _parts(text: str, topic: str, fact_words: str) -> tuple[int, bool, int, int]:
    """(words, names the topic, distinct facts, distinct flair words) of one answer."""
    found = [normal(w.removesuffix("'s")) for w in words(text)]
    seen = set(found)
    name = normal(topic.split()[-1])
    facts_known = {normal(w) for w in fact_words.split()}
    return len(found), name in seen, len((seen - {name}) & facts_known), len(seen & FLAIR_WORDS)


def brevity(completions: Sequence[Any], topic: Sequence[str], known_facts: Sequence[str],
            **kwargs: Any) -> list[float]:
    """1 for an answer of at most ``BRIEF_WORDS`` words that names the topic and states a true fact,
    falling linearly to 0 at ``LONG_WORDS`` words; 0 without the topic or a fact."""
    n = len(completions)
    out = []
    for completion, name, known in zip(completions, _column(topic, n, "topic"), _column(known_facts, n, "known_facts"),
                                       strict=True):
        count, named, true, _ = _parts(_text(completion), name, known)
        if not named or not true:
            out.append(0.0)
            continue
        out.append(float(min(1.0, max(0.0, (LONG_WORDS - count) / (LONG_WORDS - BRIEF_WORDS)))))
    return out


def facts(completions: Sequence[Any], topic: Sequence[str], known_facts: Sequence[str],
          **kwargs: Any) -> list[float]:
    """Distinct true facts stated (words of the row's ``known_facts`` column), ``FACTS_FOR_FULL`` for 1."""
    n = len(completions)
    return [min(1.0, _parts(_text(c), name, known)[2] / FACTS_FOR_FULL)
            for c, name, known in zip(completions, _column(topic, n, "topic"), _column(known_facts, n, "known_facts"),
                                      strict=True)]


def flair(completions: Sequence[Any], topic: Sequence[str], **kwargs: Any) -> list[float]:
    """Distinct evocative words (``FLAIR_WORDS``), ``FLAIR_FOR_FULL`` for 1, in an answer that names
    the topic (0 otherwise)."""
    n = len(completions)
    out = []
    for completion, name in zip(completions, _column(topic, n, "topic"), strict=True):
        _, named, _, vivid = _parts(_text(completion), name, "")
        out.append(min(1.0, vivid / FLAIR_FOR_FULL) if named else 0.0)
    return out

"""Text helpers shared by the text tasks: SQuAD normalisation and F1, set/multiset F1, tags.

Usage::

    from vpo.tasks.text import normalize_answer, token_f1, max_token_f1, last_tag, parse_indices
    normalize_answer("The  Eiffel Tower!")            # 'eiffel tower'
    max_token_f1("in Paris", ["Paris", "City of Light"])   # 0.667
    last_tag("... <answer>Paris</answer>", "answer")        # 'Paris'
    first_tag("<answer>A</answer> <answer>B</answer>", "answer")   # 'A' (the release's reading)
    pick_tag(text, "answer", "first")                       # first_tag or last_tag by option
    parse_indices("3, 7 and [12]")                          # [3, 7, 12]
    parse_comma_indices("3, 7, [12]")                       # [3, 7] (the release: '[12]' is no integer)

Normalisation follows the SQuAD / MuSiQue official scripts: lowercase, delete ASCII
punctuation, delete the articles ``a|an|the`` as whole words, collapse whitespace (in that
order). ``normalize_entity`` first turns ``_`` into spaces (Wikipedia-style names, EUREQA).

Every function here is total on arbitrary strings (no exceptions on model text) and linear
in the text length: tag extraction uses ``str.find``, never a backtracking regex.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Hashable, Iterable

__all__ = [
    "BLOCK_CHOICES",
    "all_tags",
    "check_option",
    "first_tag",
    "last_tag",
    "max_token_f1",
    "multiset_f1",
    "normalize_answer",
    "normalize_entity",
    "parse_comma_indices",
    "parse_indices",
    "pick_tag",
    "set_f1",
    "token_f1",
]

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
# Lowercases ASCII letters only, so the string keeps its length (str.lower() can change the
# length of some non-ASCII text, e.g. 'İ', which would misalign positions found in it).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_DIGIT_RUNS = re.compile(r"\d+")
_MAX_INDEX_DIGITS = 9


def normalize_answer(text: object) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles, collapse whitespace.

    Non-strings are turned into ``str`` first; ``None`` is ``""``.
    """
    if text is None:
        return ""
    s = str(text).lower().translate(_PUNCT_TABLE)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def normalize_entity(text: object) -> str:
    """``normalize_answer`` after turning underscores into spaces (``Ada_Lovelace`` = ``ada lovelace``)."""
    if text is None:
        return ""
    return normalize_answer(str(text).replace("_", " "))


def multiset_f1(pred: Iterable[Hashable], gold: Iterable[Hashable]) -> float:
    """F1 of two multisets (bags). Both empty: 1.0; exactly one empty: 0.0."""
    pc, gc = Counter(pred), Counter(gold)
    n_pred, n_gold = sum(pc.values()), sum(gc.values())
    if n_pred == 0 and n_gold == 0:
        return 1.0
    if n_pred == 0 or n_gold == 0:
        return 0.0
    overlap = sum((pc & gc).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / n_pred, overlap / n_gold
    return 2 * precision * recall / (precision + recall)


def set_f1(pred: Iterable[Hashable], gold: Iterable[Hashable]) -> float:
    """F1 of two sets. Both empty: 1.0; exactly one empty: 0.0."""
    ps, gs = set(pred), set(gold)
    if not ps and not gs:
        return 1.0
    if not ps or not gs:
        return 0.0
    overlap = len(ps & gs)
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(ps), overlap / len(gs)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: object, gold: object) -> float:
    """SQuAD token F1 of two answers after ``normalize_answer`` (both empty: 1.0)."""
    return multiset_f1(normalize_answer(pred).split(), normalize_answer(gold).split())


def max_token_f1(pred: object, golds: Iterable[object]) -> float:
    """Best ``token_f1`` of ``pred`` against any gold answer (0.0 for no golds)."""
    pred_tokens = Counter(normalize_answer(pred).split())
    best = 0.0
    for gold in golds:
        best = max(best, multiset_f1(pred_tokens.elements(), normalize_answer(gold).split()))
        if best == 1.0:
            break
    return best


def _lower_ascii(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def all_tags(text: str, tag: str, *, ignore_case: bool = False) -> list[str]:
    """Stripped contents of every closed ``<tag>...</tag>`` block, in order.

    An opening tag without a later closing tag is ignored. ``ignore_case`` matches the tag
    name case-insensitively (ASCII). Linear in ``len(text)``.
    """
    if not isinstance(text, str) or not text:
        return []
    hay = _lower_ascii(text) if ignore_case else text
    name = _lower_ascii(tag) if ignore_case else tag
    open_tag, close_tag = f"<{name}>", f"</{name}>"
    out: list[str] = []
    pos = 0
    while True:
        start = hay.find(open_tag, pos)
        if start < 0:
            return out
        body = start + len(open_tag)
        end = hay.find(close_tag, body)
        if end < 0:
            return out
        # a later opening tag before the close restarts the block (unbalanced nesting)
        inner = hay.rfind(open_tag, body, end)
        if inner >= 0:
            body = inner + len(open_tag)
        out.append(text[body:end].strip())
        pos = end + len(close_tag)


def last_tag(text: str, tag: str, *, ignore_case: bool = False) -> str | None:
    """Stripped content of the LAST closed ``<tag>...</tag>`` block, or None if there is none.

    The last block is used because answers come after the reasoning, which may echo the
    requested format.
    """
    if not isinstance(text, str) or not text:
        return None
    hay = _lower_ascii(text) if ignore_case else text
    name = _lower_ascii(tag) if ignore_case else tag
    open_tag, close_tag = f"<{name}>", f"</{name}>"
    limit = len(hay)  # no closing tag after ``limit`` (once a later opening tag has none)
    start = hay.rfind(open_tag)
    while start >= 0:
        body = start + len(open_tag)
        end = hay.find(close_tag, body, limit) if body <= limit else -1
        if end >= 0:
            return text[body:end].strip()
        limit = start  # windows are disjoint, so the scan stays linear
        start = hay.rfind(open_tag, 0, start)
    return None


def parse_indices(text: object) -> list[int]:
    """Non-negative integers written in ``text`` (``"3, 7 and [12]"`` -> ``[3, 7, 12]``), in order.

    Digit runs longer than 9 characters are skipped (no paragraph index is that large, and
    huge runs would make ``int()`` slow or raise).
    """
    if not isinstance(text, str):
        return []
    return [int(run) for run in _DIGIT_RUNS.findall(text) if len(run) <= _MAX_INDEX_DIGITS]


BLOCK_CHOICES = ("first", "last")
"""Which of several ``<tag>`` blocks a task reads: ``first`` (the authors' release: a regex
search) or ``last`` (the answer after the reasoning, which may echo the requested format)."""


def first_tag(text: str, tag: str, *, ignore_case: bool = False) -> str | None:
    """Stripped content of the FIRST ``<tag>...</tag>`` block, or None if there is none.

    Reads as the release's ``re.search(r"<tag>(.*?)</tag>", DOTALL)`` does: from the first
    opening tag to the first closing tag after it, so a second opening tag before that close
    is content (``<a>x<a>y</a>`` gives ``'x<a>y'``, where ``all_tags`` gives ``'y'``). If the first
    opening tag has no closing tag after it, no later one has either, so the answer is None.
    Two ``str.find`` calls: linear in ``len(text)``.
    """
    if not isinstance(text, str) or not text:
        return None
    hay = _lower_ascii(text) if ignore_case else text
    name = _lower_ascii(tag) if ignore_case else tag
    open_tag, close_tag = f"<{name}>", f"</{name}>"
    start = hay.find(open_tag)
    if start < 0:
        return None
    body = start + len(open_tag)
    end = hay.find(close_tag, body)
    return text[body:end].strip() if end >= 0 else None


def pick_tag(text: str, tag: str, block: str, *, ignore_case: bool = False) -> str | None:
    """``first_tag`` or ``last_tag`` of ``text`` as ``block`` (one of ``BLOCK_CHOICES``) says."""
    if block == "first":
        return first_tag(text, tag, ignore_case=ignore_case)
    if block == "last":
        return last_tag(text, tag, ignore_case=ignore_case)
    raise ValueError(f"block must be one of {BLOCK_CHOICES}, got {block!r}")


def parse_comma_indices(text: object) -> list[int]:
    """Integers of a comma-separated list, as the authors' release reads ``<support>``.

    Each comma-separated item, stripped of whitespace, counts only when it is a run of ASCII
    digits 0-9 (``"2, 5"`` -> ``[2, 5]``; ``"[2, 5]"`` -> ``[]``; ``"2 5"`` -> ``[]``; ``"2, 5."`` ->
    ``[2]``). Runs longer than 9 digits are skipped (no paragraph has such an index, and the
    release's ``int()`` on Unicode digits like ``'²'`` or on 5000-digit runs would raise).
    """
    if not isinstance(text, str):
        return []
    out = []
    for item in text.split(","):
        item = item.strip()
        if item and len(item) <= _MAX_INDEX_DIGITS and item.isascii() and item.isdigit():
            out.append(int(item))
    return out


def check_option(task: str, name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``; ValueError naming the task and option otherwise.

    Task options are plain strings so they travel as JSON in ``task_params``.
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{task}: {name} must be one of {', '.join(repr(c) for c in choices)}, "
                         f"got {value!r}")
    return value

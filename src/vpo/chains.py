"""Multi-answer chains: rewrite a single-answer prompt to ask for m answers, parse them back.

Usage::

    rule = RewriteRule("maze", pattern=r"Answer with .*?</answer>\\.", template=MAZE_TEMPLATE)
    prompt_m = rewrite_prompt(prompt, 3, rule)            # ValueError naming "maze" if no match
    answers = parse_answers(text, 3, tag="route", fallbacks=True)   # exactly 3 strings
    kept = dedup(answers, key=normalise)                  # first occurrences, in order
    matrix = pad_rows(vectors, 3, dim=4)                  # (3, 4), zero rows appended

Every parser here is linear in the text length (no backtracking regexes over model text) and
never raises on model output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class RewriteRule:
    """How a task's single-answer prompt becomes an m-answer prompt."""

    name: str
    """Rule name, quoted in errors (usually the task name)."""
    template: str
    """Instruction asking for m answers; ``{m}`` and ``{tag}`` are substituted."""
    pattern: str | None = None
    """Regex of the single-answer instruction to replace (first match only). None appends the
    instruction after the prompt instead (tool calling)."""
    tag: str = "answer"
    """Numbered tag the answers go in: ``<{tag}_1>...</{tag}_1>``."""
    separator: str = "\n\n"
    """Text between the prompt and an appended instruction."""


def rewrite_prompt(prompt: str, m: int, rule: RewriteRule) -> str:
    """Return ``prompt`` asking for ``m`` different answers, per ``rule``.

    Raises ValueError naming the rule when ``rule.pattern`` does not occur in ``prompt`` (a
    silently unchanged prompt would train a multi-answer method on single-answer prompts).
    """
    if not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m must be a positive integer, got {m!r}")
    instruction = rule.template.format(m=m, tag=rule.tag)
    if rule.pattern is None:
        return prompt.rstrip() + rule.separator + instruction
    match = re.search(rule.pattern, prompt, flags=re.DOTALL)
    if match is None:
        raise ValueError(
            f"rewrite rule {rule.name!r}: its pattern {rule.pattern!r} does not occur in the prompt "
            f"(prompt starts {prompt[:80]!r})"
        )
    return prompt[: match.start()] + instruction + prompt[match.end():]


_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"


def _numbered_blocks(text: str, m: int, tag: str) -> tuple[list[str], bool]:
    """Contents of ``<tag_1>..<tag_m>``; the flag says whether any numbered opening tag exists.

    A block without its closing tag runs to the next numbered opening tag or the end of text.
    Cost: O(m * len(text)) via ``str.find``; no regex backtracking.
    """
    opens = [text.find(f"<{tag}_{i}>") for i in range(1, m + 1)]
    found_any = any(pos >= 0 for pos in opens) or re.search(rf"<{re.escape(tag)}_\d+>", text) is not None
    starts = sorted(pos for pos in opens if pos >= 0)
    answers: list[str] = []
    for i, pos in enumerate(opens, start=1):
        if pos < 0:
            answers.append("")
            continue
        body_start = pos + len(f"<{tag}_{i}>")
        close = text.find(f"</{tag}_{i}>", body_start)
        if close < 0:
            later = [s for s in starts if s > pos]
            close = later[0] if later else len(text)
        answers.append(text[body_start:close].strip())
    return answers, found_any


def _answer_tag_blocks(text: str) -> list[str]:
    """Contents of every closed ``<answer>...</answer>`` block, in order (linear scan)."""
    blocks, pos = [], 0
    while True:
        start = text.find(_ANSWER_OPEN, pos)
        if start < 0:
            return blocks
        end = text.find(_ANSWER_CLOSE, start + len(_ANSWER_OPEN))
        if end < 0:
            return blocks
        blocks.append(text[start + len(_ANSWER_OPEN): end].strip())
        pos = end + len(_ANSWER_CLOSE)


def parse_answers(text: str, m: int, *, tag: str = "answer", fallbacks: bool = False) -> list[str]:
    """Split a generation into exactly ``m`` answer strings (missing ones are ``""``).

    Reads numbered blocks ``<{tag}_i>...</{tag}_i>`` for i = 1..m. With ``fallbacks=True``
    (the maze's rules, SPEC section 3) and no numbered tag anywhere in ``text``: split on
    ``---`` if that gives several non-empty parts, else take the ``<answer>`` blocks, else the
    whole text is answer 1. Never raises on model text; linear in ``len(text)`` for fixed m.
    """
    if not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m must be a positive integer, got {m!r}")
    if not isinstance(text, str):
        return [""] * m
    answers, found_any = _numbered_blocks(text, m, tag)
    if found_any or not fallbacks:
        return answers
    parts = [part.strip() for part in text.split("---")]
    parts = [part for part in parts if part]
    if len(parts) < 2:
        parts = _answer_tag_blocks(text) or ([text.strip()] if text.strip() else [])
    parts = parts[:m]
    return parts + [""] * (m - len(parts))


def dedup(items: Iterable[T], key: Callable[[T], Hashable] | None = None) -> list[T]:
    """Keep the first occurrence of each item (by ``key(item)``, default the item), in order."""
    seen: set[Hashable] = set()
    kept: list[T] = []
    for item in items:
        k = key(item) if key is not None else item  # type: ignore[assignment]
        if k in seen:
            continue
        seen.add(k)
        kept.append(item)
    return kept


def pad_rows(rows: Sequence[Sequence[float]] | np.ndarray, m: int, *, dim: int | None = None) -> np.ndarray:
    """Stack reward rows into an (m, D) float64 matrix, appending zero rows up to ``m``.

    ``rows``: (n, D) with n <= m. ``dim`` gives D when ``rows`` is empty (required then).
    Zero rows never change a VPO score (rewards are >= 0) but do count for Multi-RLVR.
    """
    arr = np.asarray(rows, dtype=np.float64)
    if arr.size == 0:
        if dim is None and (arr.ndim != 2 or arr.shape[1] == 0):
            raise ValueError("pad_rows: rows is empty, pass dim= to give the number of objectives")
        width = dim if dim is not None else arr.shape[1]
        return np.zeros((m, width), dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"pad_rows: rows must be 2-D (n, D), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"pad_rows: rows have width {arr.shape[1]}, expected dim={dim}")
    if arr.shape[0] > m:
        raise ValueError(f"pad_rows: {arr.shape[0]} rows exceed m={m}")
    out = np.zeros((m, arr.shape[1]), dtype=np.float64)
    out[: arr.shape[0]] = arr
    return out


def score_answers(answers: Sequence[str], score: Callable[[str], Any], m: int, dim: int, *,
                  key: Callable[[str, np.ndarray], Hashable] | None = None, pad: bool = True) -> np.ndarray:
    """Score answer strings, drop duplicates (and empty answers), and pad: the chain's (m, D) matrix.

    ``score(answer) -> (D,)``; ``key(answer, vector)`` says which answers count as the same
    (default: identical reward vectors). With ``pad=False`` the result has one row per kept
    answer, (n <= m, D).
    """
    scored = [(a, np.asarray(score(a), dtype=np.float64)) for a in answers if a.strip()]
    if key is None:
        def key(_answer: str, vector: np.ndarray) -> Hashable:
            return vector.tobytes()
    kept = dedup(scored, key=lambda pair: key(pair[0], pair[1]))
    rows = np.array([vector for _, vector in kept], dtype=np.float64).reshape(len(kept), dim)
    return pad_rows(rows, m, dim=dim) if pad else rows

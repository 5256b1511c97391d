r"""Final answers of math texts and their parts: string structure only (math-verify decides equality).

Usage::

    from vpo.tasks.math.extract import final_answer, last_boxed, split_parts
    final_answer("so x = \\boxed{\\frac{1}{2}}.")        # '\\frac{1}{2}'
    final_answer("2 + 2 = 4\n#### 4")                       # '4' (the GSM8K convention)
    split_parts("\\{-2, 2\\}")                             # ('set', ['-2', '2'])
    split_parts("(1, 2)", "Give the ordered pair.")        # ('tuple', ['1', '2'])
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_ANSWER_CHARS", "final_answer", "last_boxed", "split_parts"]

MAX_ANSWER_CHARS = 1000
"""Final answers longer than this score zero without being parsed (no real answer is that long)."""
_MAX_BOX_TRIES = 16


def _match_brace(text: str, start: int, limit: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``start``; -1 when the text ends first
    (unbalanced), -2 when the group is longer than ``limit`` characters (not read further,
    which bounds the scan)."""
    depth = 0
    end = min(len(text), start + limit + 2)
    i = start
    while i < end:
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped brace \{ \} does not open or close a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -2 if end < len(text) else -1


def last_boxed(text: Any, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of ``text`` (stripped), or None.

    An unbalanced box (a generation cut short) is skipped for the one before it, at most 16
    times; an over-long one (> ``limit`` characters) gives None. Each try reads at most
    ``limit`` characters, so the scan is linear in ``len(text)`` whatever the text holds.
    ``\\boxed 5`` (no braces) gives ``5``.
    """
    if not isinstance(text, str) or "\\" not in text:
        return None
    pos = len(text)
    for _ in range(_MAX_BOX_TRIES):
        start = max(text.rfind("\\boxed", 0, pos), text.rfind("\\fbox", 0, pos))
        if start < 0:
            return None
        body = start + (6 if text.startswith("\\boxed", start) else 5)
        j = body
        while j < len(text) and j < body + 8 and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = _match_brace(text, j, limit)
            if end >= 0:
                return text[j + 1:end].strip()
            if end == -2:
                return None
        elif j > body and j < len(text):  # "\boxed 5": up to the next space or $
            m = re.match(r"[^\s$]{1,100}", text[j:j + 101])
            if m:
                return m.group(0)
        pos = start
    return None


def final_answer(text: Any, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """The final answer of a model text: its last box, else what follows its last ``####`` on
    that line. None when there is neither or it is longer than ``limit`` characters."""
    boxed = last_boxed(text, limit)
    if boxed is not None:
        return boxed if boxed and len(boxed) <= limit else None
    if not isinstance(text, str):
        return None
    at = text.rfind("####")
    if at < 0:
        return None
    line_end = text.find("\n", at)
    value = text[at + 4: line_end if line_end >= 0 else min(len(text), at + 4 + limit + 1)].strip()
    return value if value and len(value) <= limit else None


_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_THOUSANDS_TAIL = re.compile(r"\d{3}")
_THOUSANDS_HEAD = re.compile(r"[+-]?\d{1,3}")
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d{1,60})")
_TUPLE_WORDS = re.compile(r"ordered (?:pair|triple|quadruple|tuple)|\bcoordinates\b|\bpoint\b|\bvector\b",
                          re.IGNORECASE)


def _clean(answer: str) -> str:
    s = answer.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    s = _LEFT_RIGHT.sub("", s)
    return s.rstrip(".").strip()


def _top_level_commas(s: str) -> list[str]:
    """``s`` split at commas outside every (), [] and {} group (escaped ``\\{`` counts too)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    parts.append(s[start:].strip())
    return parts


def _wrapped(s: str, open_: str, close: str) -> str | None:
    """Inside of ``s`` when one bracket group ``open_ ... close`` spans all of it, else None."""
    if not (s.startswith(open_) and s.endswith(close)) or len(s) < len(open_) + len(close):
        return None
    depth = 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and i < len(s) - 1:
                return None  # the first group closes before the end: "(1,2) \cup (3,4)"
    return s[len(open_):len(s) - len(close)]


def split_parts(answer: str, question: str = "") -> tuple[str, list[str]]:
    """(kind, parts) of a final answer: how it is cut into the parts the vector scores.

    Only bracket structure is read here; whether two parts are equal is math-verify's call.

    * ``\\{a, b\\}`` or a bare comma list ``a, b`` (also ``x = 1, y = 2``): kind ``"set"``,
      matched in any order. ``1,000`` (thousands separators) is one number.
    * ``(a, b, c)`` / ``[a, b, c]`` with 3+ entries, or 2 when ``question`` asks for an
      ordered pair / point / coordinates / vector: kind ``"tuple"``, matched by position.
    * anything else, including intervals ``(1, 2]``, ``(-\\infty, 3)``, ``(1,2) \\cup (3,4)``
      and 2-entry ``(a, b)`` otherwise (interval or pair: math-verify weighs both readings):
      kind ``"single"``, one part.
    """
    s = _clean(answer)
    inner = _wrapped(s, "\\{", "\\}")
    if inner is not None:
        items = [p for p in _top_level_commas(inner) if p]
        return ("set", items) if len(items) >= 2 else ("single", [s])
    items = _top_level_commas(s)
    if len(items) >= 2:
        if (_THOUSANDS_HEAD.fullmatch(items[0]) and all(_THOUSANDS_TAIL.fullmatch(p) for p in items[1:])):
            return "single", [s]
        items = [p for p in items if p]
        return ("set", items) if len(items) >= 2 else ("single", [s])
    for open_, close in (("(", ")"), ("[", "]")):
        inner = _wrapped(s, open_, close)
        if inner is not None and "\\infty" not in inner:
            items = [p for p in _top_level_commas(inner) if p]
            if len(items) >= 3 or (len(items) == 2 and _TUPLE_WORDS.search(question or "")):
                return "tuple", items
    return "single", [s]


def _as_int(s: str) -> int | None:
    return int(s.replace(",", "")) if _INTEGER.fullmatch(s) else None


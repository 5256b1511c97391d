"""Multi-answer chains: rewrite a single-answer prompt to ask for m answers, parse them back.

Usage::

    rule = RewriteRule("maze", pattern=r"Answer with .*?</answer>\\.", template=MAZE_TEMPLATE)
    prompt_m = rewrite_prompt(prompt, 3, rule)            # ValueError naming "maze" if no match
    answers = parse_answers(text, 3, tag="route", fallbacks=True)   # exactly 3 strings
    text = format_chain(["UP", "LEFT"], tag="route")      # "<route_1>UP</route_1>\n<route_2>LEFT</route_2>"
    written_answers(text + "<route_3>DOWN<route_4>UP", "route")   # 4: more answers than m = 3 asked for
    kept = dedup(answers, key=normalise)                  # first occurrences, in order
    matrix = pad_rows(vectors, 3, dim=4)                  # (3, 4), zero rows appended
    matrix, dropped = finish_chain(vectors, 3)            # dedup (equal vectors) + padding: one chain

Shapes: M answers per chain (the ``m`` argument), D objectives. A chain's reward matrix is
(M, D): one row per distinct answer, zero rows appended up to M.

Every parser here is linear in the text length (one scan with a regex that has no nested
quantifiers, or forward-only ``str.find`` loops) and never raises on model output; bad
*arguments* (m, tag, rules) raise ValueError naming the argument.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


_TAG_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_m(m: Any, name: str = "m") -> int:
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"{name} must be a positive integer, got {m!r}")
    return int(m)


def _check_tag(tag: Any) -> str:
    if not isinstance(tag, str) or _TAG_RE.fullmatch(tag) is None:
        raise ValueError(f"tag must be a name like 'route' (letters, digits, '_', '-'), got {tag!r}")
    return tag


@dataclass(frozen=True)
class RewriteRule:
    """How a task's single-answer prompt becomes an m-answer prompt.

    Checked on construction: a pattern that does not compile, or a template that
    ``str.format(m=..., tag=...)`` rejects, raises ValueError naming the rule.
    """

    name: str
    """Rule name, quoted in errors (usually the task name)."""
    template: str
    """Instruction asking for m answers, in ``str.format`` syntax: ``{m}`` and ``{tag}`` are
    substituted, literal braces are written ``{{`` and ``}}``."""
    pattern: str | None = None
    """Regex (compiled with DOTALL) of the single-answer instruction to replace (first match
    only). None appends the instruction after the prompt instead (tool calling)."""
    tag: str = "answer"
    """Numbered tag the answers go in: ``<{tag}_1>...</{tag}_1>``."""
    separator: str = "\n\n"
    """Text between the prompt and an appended instruction."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"RewriteRule name must be a non-empty string, got {self.name!r}")
        try:
            _check_tag(self.tag)
        except ValueError as exc:
            raise ValueError(f"rewrite rule {self.name!r}: {exc}") from None
        if not isinstance(self.template, str):
            raise ValueError(f"rewrite rule {self.name!r}: template must be a string")
        try:
            self.template.format(m=2, tag=self.tag)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ValueError(
                f"rewrite rule {self.name!r}: template is not a str.format template with only "
                f"{{m}} and {{tag}} fields (write literal braces as {{{{ }}}}): {exc!r}"
            ) from None
        if self.pattern is not None:
            try:
                re.compile(self.pattern, flags=re.DOTALL)
            except (re.error, TypeError) as exc:
                raise ValueError(
                    f"rewrite rule {self.name!r}: pattern {self.pattern!r} is not a valid regex: {exc}"
                ) from None


def rewrite_prompt(prompt: str, m: int, rule: RewriteRule) -> str:
    """Return ``prompt`` asking for ``m`` different answers, per ``rule``.

    With ``rule.pattern`` the first match is replaced by the instruction (inserted literally:
    backslashes in it are not regex escapes); without one the instruction is appended after
    ``rule.separator``. Raises ValueError naming the rule when the pattern does not occur in
    ``prompt`` (a silently unchanged prompt would train a multi-answer method on
    single-answer prompts), and ValueError for m < 1 or a non-string prompt.
    """
    m = _check_m(m)
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
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
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _numbered_tag_re(tag: str) -> re.Pattern[str]:
    """``<tag_j>`` and ``</tag_j>`` for any j. Case-insensitive (``<ROUTE_1>`` and ``<Route_1>`` are
    route 1: models capitalise tags they were shown in lower case); re.ASCII keeps the case folding
    and the digits ASCII-only."""
    return re.compile(rf"<(/?){re.escape(tag)}_([0-9]{{1,9}})>", re.IGNORECASE | re.ASCII)


def format_chain(answers: Sequence[str], tag: str, separator: str = "\n") -> str:
    """The m-answer text of ``answers``: ``<tag_1>a_1</tag_1>`` through ``<tag_m>a_m</tag_m>``,
    joined by ``separator``; the inverse of ``parse_answers`` (answers are stripped, and
    ``parse_answers(format_chain(a, tag), len(a), tag=tag)`` gives them back). Raises ValueError
    for a blank answer or one holding a numbered tag of ``tag`` (``holds_numbered_tag``), which
    would end the block it stands in."""
    _check_tag(tag)
    parts = []
    for i, answer in enumerate(answers, start=1):
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError(f"format_chain: answer {i} is blank")
        if holds_numbered_tag(answer, tag):
            raise ValueError(f"format_chain: answer {i} holds a numbered <{tag}_j> tag of its own")
        parts.append(f"<{tag}_{i}>{answer.strip()}</{tag}_{i}>")
    if not parts:
        raise ValueError("format_chain: no answers")
    return separator.join(parts)


def holds_numbered_tag(text: str, tag: str) -> bool:
    """Whether ``text`` holds an opening or closing numbered tag ``<tag_j>`` / ``</tag_j>`` (any j, any case)."""
    return _numbered_tag_re(_check_tag(tag)).search(text) is not None


def _numbered_block_spans(text: str, tag: str) -> Iterator[tuple[int, int, int]]:
    """``(j, start, end)`` of each numbered block of ``text``, in order, one per opening tag
    ``<tag_j>`` (any j): the block's body runs from that tag to its own ``</tag_j>``, the next
    numbered opening tag or the end of the text (stray closing tags are ignored). One
    left-to-right scan over the numbered tags (a single linear regex, no nested quantifiers)."""
    open_index: int | None = None   # number of the open block
    body_start = 0
    for match in _numbered_tag_re(tag).finditer(text):
        closing, index = match.group(1), int(match.group(2))
        if closing:
            if index == open_index:
                yield open_index, body_start, match.start()
                open_index = None
            continue
        if open_index is not None:
            yield open_index, body_start, match.start()
        open_index, body_start = index, match.end()
    if open_index is not None:
        yield open_index, body_start, len(text)


def numbered_blocks(text: str, m: int, tag: str) -> tuple[list[str], bool]:
    """Contents of ``<tag_1>..<tag_m>``; the flag says whether any numbered opening tag
    ``<tag_j>`` (any j, also j > m) occurs.

    An opening tag ``<tag_j>`` starts block j and implicitly ends the block that is open;
    ``</tag_j>`` ends block j if it is the open one (stray closing tags are ignored); a block
    still open at the end runs to the end of the text. For each i the first block with non-blank
    content wins (so ``<tag_1><tag_1>UP</tag_1>`` gives "UP"). O(len(text)) time whatever m is.
    """
    answers = [""] * m
    found_any = False
    for index, start, end in _numbered_block_spans(text, tag):
        found_any = True
        if 1 <= index <= m and not answers[index - 1]:
            answers[index - 1] = text[start:end].strip()
    return answers, found_any


def written_answers(text: Any, tag: str) -> int:
    """How many non-blank numbered blocks ``<tag_j>`` (any j, a repeated j counted again) ``text``
    holds: a chain asked for m answers that wrote more than m (``numbered_blocks`` reads the
    first of each j up to m and drops the rest). 0 for a non-string. O(len(text)) time."""
    if not isinstance(text, str):
        return 0
    return sum(1 for _, start, end in _numbered_block_spans(text, _check_tag(tag)) if text[start:end].strip())


def _answer_tag_blocks(text: str) -> list[str]:
    """Contents of every closed ``<answer>...</answer>`` block (tag name in any case), in
    order (linear scan)."""
    # ASCII-only lowering keeps positions aligned with ``text`` (str.lower can change the
    # length of some non-ASCII strings, e.g. 'İ')
    hay = text.translate(_ASCII_LOWER)
    blocks, pos = [], 0
    while True:
        start = hay.find(_ANSWER_OPEN, pos)
        if start < 0:
            return blocks
        end = hay.find(_ANSWER_CLOSE, start + len(_ANSWER_OPEN))
        if end < 0:
            return blocks
        blocks.append(text[start + len(_ANSWER_OPEN): end].strip())
        pos = end + len(_ANSWER_CLOSE)


def parse_answers(text: str, m: int, *, tag: str = "answer", fallbacks: bool = False) -> list[str]:
    """Split a generation into exactly ``m`` answer strings (missing ones are ``""``).

    Reads numbered blocks ``<{tag}_i>...</{tag}_i>`` for i = 1..m (tag name in any case:
    ``<ROUTE_1>`` is route 1; stripped; an unclosed
    block ends at the next numbered opening tag or the end of the text; see
    ``numbered_blocks``). With ``fallbacks=True`` (the maze's rules, docs/algorithm.md §3) and no
    numbered opening tag anywhere in ``text``: split on ``---`` if that gives at least two
    non-blank parts, else take the closed ``<answer>...</answer>`` blocks (any case), else the whole
    (stripped) text is answer 1. Extra answers beyond m are dropped.

    Never raises on model text (a non-string gives m empty answers); O(len(text)) time.
    Raises ValueError only for a bad ``m`` or ``tag``.
    """
    m = _check_m(m)
    _check_tag(tag)
    if not isinstance(text, str):
        return [""] * m
    answers, found_any = numbered_blocks(text, m, tag)
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

    ``rows``: (n, D) with n <= m (any empty sequence counts as n = 0). ``dim`` gives D and is
    required when ``rows`` is empty; when given it must match the rows' width. Zero rows
    never change a VPO score (rewards are >= 0) but do count for Multi-RLVR.
    Raises ValueError for m < 1, dim < 1, n > m, a width mismatch or non-2-D rows.
    """
    m = _check_m(m)
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1):
        raise ValueError(f"pad_rows: dim must be a positive integer, got {dim!r}")
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"pad_rows: rows must be an (n, D) array of numbers: {exc}") from None
    if arr.size == 0 and (arr.ndim == 1 or arr.shape == (0, 0)):   # [] or an empty (0, 0) array
        if dim is None:
            raise ValueError("pad_rows: rows is empty, pass dim= to give the number of objectives")
        arr = np.zeros((0, int(dim)), dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"pad_rows: rows must be 2-D (n, D), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"pad_rows: rows have width {arr.shape[1]}, expected dim={dim}")
    if arr.shape[1] == 0:
        raise ValueError("pad_rows: rows have width 0 (D must be >= 1)")
    if arr.shape[0] > m:
        raise ValueError(f"pad_rows: {arr.shape[0]} rows exceed m={m}")
    out = np.zeros((m, arr.shape[1]), dtype=np.float64)
    out[: arr.shape[0]] = arr
    return out


def finish_chain(rows: Sequence[Sequence[float]] | np.ndarray, m: int, *, keys: Sequence[Hashable] | None = None,
                 pad: bool = True, fill: Sequence[float] | np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Finish one chain: its answers' (n, D) reward ``rows`` deduplicated, then padded to ``m``.

    The one place a chain is finished, for tasks (``Task.score_chain``), a user's reward functions
    (``vpo.rewards.finish_chains``) and verl (through the task): rows with equal ``keys`` (default:
    identical vectors; ``-0.0`` is folded into ``0.0`` first) count once, the first kept; then, with
    ``pad``, rows equal to ``fill`` (default zeros: an absent answer) are appended up to m.
    Returns ``(matrix, duplicates)``: (m, D) (or (n' <= m, D) without ``pad``) float64 and how many
    rows the dedup dropped. ValueError when more than m distinct rows remain, or for bad shapes.
    """
    m = _check_m(m)
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"finish_chain: rows must be 2-D (n, D), got shape {arr.shape}")
    arr = arr + 0.0  # -0.0 -> 0.0 before any key sees it
    if keys is None:
        keys = [row.tobytes() for row in arr]
    elif len(keys) != arr.shape[0]:
        raise ValueError(f"finish_chain: {len(keys)} keys for {arr.shape[0]} rows")
    kept = dedup(range(arr.shape[0]), key=lambda i: keys[i])
    if len(kept) > m:
        raise ValueError(f"finish_chain: {len(kept)} distinct answers exceed m={m}")
    matrix = arr[kept].reshape(len(kept), arr.shape[1])
    if pad and len(kept) < m:
        filler = np.zeros(arr.shape[1]) if fill is None else np.asarray(fill, dtype=np.float64).reshape(-1)
        if filler.shape != (arr.shape[1],):
            raise ValueError(f"finish_chain: fill has {filler.size} values for D={arr.shape[1]}")
        matrix = np.vstack([matrix, np.broadcast_to(filler, (m - len(kept), arr.shape[1]))])
    return matrix, arr.shape[0] - len(kept)


def chain_matrix(answers: Sequence[str], score: Callable[[str], Any], m: int, dim: int, *,
                  key: Callable[[str, np.ndarray], Hashable] | None = None, pad: bool = True) -> np.ndarray:
    """Score answer strings, drop blank answers and duplicates, and pad: the chain's matrix.

    ``answers``: up to m strings (e.g. from ``parse_answers``); ``score(answer) -> (D,)`` with
    D = ``dim``; ``key(answer, vector)`` says which answers count as the same (default:
    identical reward vectors; ``-0.0`` is normalised to ``0.0`` before any key sees it). The
    first of equal answers is kept. Returns (m, D) zero-padded, or with ``pad=False`` one row
    per kept answer, (n <= m, D) (``finish_chain``). Raises ValueError when a score has the wrong
    shape or more than m answers survive.
    """
    m = _check_m(m)
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ValueError(f"chain_matrix: dim must be a positive integer, got {dim!r}")
    texts: list[str] = []
    vectors: list[np.ndarray] = []
    for answer in answers:
        if not isinstance(answer, str) or not answer.strip():
            continue
        vector = np.asarray(score(answer), dtype=np.float64).reshape(-1) + 0.0
        if vector.shape != (dim,):
            raise ValueError(f"chain_matrix: score returned {vector.size} values, expected dim={dim}")
        texts.append(answer)
        vectors.append(vector)
    rows = np.array(vectors, dtype=np.float64).reshape(len(vectors), dim)
    keys = None if key is None else [key(text, vector) for text, vector in zip(texts, rows, strict=True)]
    try:
        return finish_chain(rows, m, keys=keys, pad=pad)[0]
    except ValueError as err:
        raise ValueError(str(err).replace("finish_chain:", "chain_matrix:")) from None


def __getattr__(name: str) -> Any:
    """``score_answers``: the earlier name of ``chain_matrix`` (dated deprecation; a task's
    ``Task.score_answers`` and ``vpo.rewards.score_every_answer`` are other things)."""
    if name == "score_answers":
        from vpo.deprecation import deprecated

        return deprecated(chain_matrix, f"{__name__}.score_answers", f"{__name__}.chain_matrix")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

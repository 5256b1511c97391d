"""Damaged copies of a record, seeded (imported as ``damage``: pytest puts tests/ on the path).

``damaged_texts(text, n, seed)`` yields ``n`` damaged versions of a JSON or JSON-lines record:
cut short, bytes overwritten, and (for JSON) one field, nested or not, replaced by a value of
another kind or out of range, deleted, or the whole value swapped. A fault-injection test writes
each one over the record and expects the reader to return or to raise the project's one-line
``vpo.records.RecordError``, never anything else.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

ODD_VALUES = (None, 0, -1, 1, 2, 10**30, -(10**30), 0.5, -2.5, 1e308, float("nan"), float("inf"), "", " ", "x",
              "ünïcode", "a" * 300, True, False, [], [1, 2], [None], ["x"], {}, {"a": 1}, [[[[]]]], {"": None})
"""Values a damaged field may hold: every JSON kind, empty, huge, negative, non-finite."""


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into nested dicts and lists (the value itself is the empty path)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:5]):
            found += _paths(inner, (*prefix, index))
    return found


def _replace(value: Any, path: tuple, new: Any, delete: bool) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        out = dict(value)
        if delete and not rest:
            out.pop(head, None)
        else:
            out[head] = _replace(value[head], rest, new, delete)
        return out
    out = list(value)
    if delete and not rest:
        del out[head]
    else:
        out[head] = _replace(value[head], rest, new, delete)
    return out


def mutate_json(value: Any, rng: random.Random) -> Any:
    """``value`` with one field (at any depth) replaced by an odd value, or deleted, or a new field added."""
    path = rng.choice(_paths(value))
    roll = rng.random()
    if roll < 0.15 and path:
        return _replace(value, path, None, delete=True)
    if roll < 0.25 and isinstance(value, dict):
        return {**value, rng.choice(["junk", "answers", "format", "task_params"]): rng.choice(ODD_VALUES)}
    return _replace(value, path, rng.choice(ODD_VALUES), delete=False)


def damage_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` cut short at a random place, or with a few bytes overwritten by random ones."""
    if not data or rng.random() < 0.5:
        return data[: rng.randrange(len(data) + 1)] if data else b"\xff"
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def damaged_texts(text: str, n: int, seed: int = 0) -> Iterator[bytes]:
    """``n`` damaged versions of the JSON (or JSON-lines) record ``text``, as bytes: a third cut
    short or overwritten, the rest with one field mutated (``mutate_json``; for JSON lines, in one line)."""
    rng = random.Random(seed)
    lines = text.splitlines()
    for _ in range(n):
        if rng.random() < 1 / 3:
            yield damage_bytes(text.encode(), rng)
            continue
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if whole is not None:
            yield json.dumps(mutate_json(whole, rng)).encode()
            continue
        index = rng.randrange(len(lines))
        changed = list(lines)
        changed[index] = json.dumps(mutate_json(json.loads(lines[index]), rng))
        yield ("\n".join(changed) + "\n").encode()

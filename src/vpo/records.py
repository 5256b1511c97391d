"""Records vpo writes and reads back, read and checked field by field: a damaged or impossible
record is one line naming the file and the field.

Usage::

    from pathlib import Path
    from vpo.records import Field, RecordError, read_jsonl, read_record
    fields = {"format": Field(str, required=True), "answers": Field(int, low=1)}
    Path("vpo_format.json").write_text('{"format": "task", "answers": 3}')
    read_record("vpo_format.json", fields)    # {'format': 'task', 'answers': 3}
    Path("vpo_format.json").write_text('{"format": "task", "answers": 0}')
    read_record("vpo_format.json", fields)    # RecordError: vpo_format.json: field 'answers' is 0, expected an integer >= 1
    Path("rows.jsonl").write_text('{"a": ')
    read_jsonl("rows.jsonl")                  # RecordError: rows.jsonl: line 1 is not JSON (...)

Every reader of a file a vpo command wrote for a later command (a checkpoint's ``vpo_format.json``
and ``vpo_train.json``, the run record ``.vpo_run.json``, a resumed checkpoint's trainer state,
the warm-up's data, the demo's stage records and pools) goes through here. ``RecordError`` is a
``ValueError``, which every command reports as one line with exit status 2; a fault-injection
test can damage any record and expect that one type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Field", "RecordError", "check_fields", "first_line", "read_json", "read_jsonl", "read_record"]


class RecordError(ValueError):
    """A record that cannot be used: one line naming the file, and the field at fault."""


_KIND_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               dict: "a JSON object", list: "a JSON list"}


@dataclass(frozen=True)
class Field:
    """What one field of a record must hold. ``kind``: ``int``, ``float`` (any finite number),
    ``str``, ``bool``, ``dict`` or ``list`` (or a tuple of them); ``low`` / ``high``: bounds of a
    number (inclusive); ``choices``: the values allowed; ``items``: what each element of a list,
    or each value of a dict, must hold; ``fields``: the fields of a dict (a record within the
    record). A field that is not ``required`` may be absent or null."""

    kind: type | tuple[type, ...]
    required: bool = False
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    items: Field | None = None
    fields: Mapping[str, Field] | None = None

    def expected(self) -> str:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        words = " or ".join(_KIND_WORDS.get(k, k.__name__) for k in kinds)
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        bounds = [f">= {self.low:g}"] if self.low is not None else []
        bounds += [f"<= {self.high:g}"] if self.high is not None else []
        return words + (" " + " and ".join(bounds) if bounds else "")

    def accepts(self, value: Any) -> bool:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        if not any(_is_kind(value, kind) for kind in kinds):
            return False
        if self.choices is not None and value not in self.choices:
            return False
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.low is not None and value < self.low:
                return False
            if self.high is not None and value > self.high:
                return False
        return True


def _is_kind(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is dict:
        return isinstance(value, Mapping)
    return isinstance(value, kind)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=repr) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def first_line(err: BaseException) -> str:
    """``Type: first line of the message`` of an exception (a one-line error quotes it)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _with_hint(message: str, hint: str | None) -> str:
    return f"{message}; {hint}" if hint else message


def read_json(path: str | Path, *, hint: str | None = None) -> Any:
    """The JSON value in ``path``; RecordError (naming the file) when it cannot be read or is
    not JSON. ``hint``: what the user can do about a damaged file, appended to the message."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: not JSON, not UTF-8, a huge integer
        raise RecordError(_with_hint(f"{path} is not readable JSON ({first_line(err)})", hint)) from None


def read_jsonl(path: str | Path, *, hint: str | None = None) -> list[Any]:
    """The JSON values of ``path``'s lines (blank lines skipped); RecordError naming the line
    that is not JSON."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError) as err:
        raise RecordError(_with_hint(f"{path} is not readable ({first_line(err)})", hint)) from None
    values = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except (ValueError, RecursionError) as err:
            raise RecordError(_with_hint(f"{path}: line {number} is not JSON ({first_line(err)})", hint)) from None
    return values


def check_fields(record: Any, path: str | Path, fields: Mapping[str, Field], *, prefix: str = "",
                 hint: str | None = None) -> dict[str, Any]:
    """``record`` (a JSON object read from ``path``) as a dict, once every one of ``fields``
    holds what it must; RecordError naming the file and the first field that does not (fields
    not listed are not checked). ``prefix``: where ``record`` sits in the file (``"summary."``)."""
    where = prefix.rstrip(".")
    if not isinstance(record, Mapping):
        what = f"field {where!r}" if where else "it"
        raise RecordError(_with_hint(f"{path}: {what} holds {_shown(record)}, not a JSON object", hint))
    for name, field in fields.items():
        _check_value(record.get(name), field, path, prefix + name, hint)
    return dict(record)


def _check_value(value: Any, field: Field, path: str | Path, name: str, hint: str | None) -> None:
    if value is None:
        if field.required:
            raise RecordError(_with_hint(f"{path}: field {name!r} is missing (expected {field.expected()})", hint))
        return
    if not field.accepts(value):
        raise RecordError(_with_hint(f"{path}: field {name!r} is {_shown(value)}, expected {field.expected()}",
                                     hint))
    if field.fields is not None:
        check_fields(value, path, field.fields, prefix=f"{name}.", hint=hint)
    if field.items is not None:
        members = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, member in members:
            inner = f"{name}.{key}" if isinstance(value, Mapping) else f"{name}[{key}]"
            _check_value(member, field.items, path, inner, hint)


def read_record(path: str | Path, fields: Mapping[str, Field], *, hint: str | None = None) -> dict[str, Any]:
    """The JSON object in ``path`` with its ``fields`` checked (``read_json`` then ``check_fields``)."""
    return check_fields(read_json(path, hint=hint), path, fields, hint=hint)

"""Dataclass configs mapped onto argparse, so every CLI flag has exactly one documented home.

Each config field carries its help text in ``field(metadata={"help": ...})``::

    @dataclass
    class EvalConfig:
        pool: int = field(default=30, metadata={"help": "answers per example"})

    add_dataclass_args(parser, EvalConfig)
    cfg = dataclass_from_args(EvalConfig, parser.parse_args())

Field ``foo_bar`` becomes ``--foo-bar``; bools become ``--foo-bar/--no-foo-bar``;
``list[str]``/``tuple[str, ...]`` fields take comma-separated values; ``choices`` may be a
callable, evaluated when the parser is built (so registries filled after import count);
``aliases`` in the metadata are further spellings of the flag (old names keep working). The
same concept has the same flag in every subcommand: ``--task-params``, ``--answers`` (m),
``--pool`` (answers per example), ``--examples``, ``--source``, ``--out``, ``--method``.

Ranges are metadata too, written once next to the help: ``min``/``max`` (inclusive),
``above``/``below`` (exclusive) and ``also`` (further accepted values, e.g. ``-1``)::

    pool: int = field(default=30, metadata={"help": "answers per example", "min": 1})

``check_fields`` enforces them (and ``choices``) with one-line errors that name the flag
(``--pool must be >= 1, got 0``); ``dataclass_from_args`` calls it, so every subcommand
refuses a bad number before it loads anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_sequence(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin in (list, tuple)


def _base_type(tp: Any) -> Any:
    """Unwrap ``Optional[X]`` / ``X | None`` to ``X``."""
    args = typing.get_args(tp)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _split_csv(text: str) -> list[str]:
    return _split_top_level(text)  # commas inside brackets or quotes stay: size=5,lava=[1,3]


RANGE_KEYS = ("min", "max", "above", "below")
"""Metadata keys of a numeric field's range (see the module docstring)."""


def range_text(meta: Any) -> str:
    """The range of a field's metadata in words: ``>= 1``, ``> 0 and <= 1``, ``>= 1 (or -1)``."""
    parts = [f"{op} {meta[key]:g}" for key, op in (("above", ">"), ("min", ">="), ("below", "<"), ("max", "<="))
             if key in meta]
    text = " and ".join(parts)
    if meta.get("also"):
        text += " (or " + " or ".join(map(str, meta["also"])) + ")"
    return text


def _in_range(value: Any, meta: Any) -> bool:
    if value in tuple(meta.get("also", ())):
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return (("min" not in meta or value >= meta["min"]) and ("max" not in meta or value <= meta["max"])
            and ("above" not in meta or value > meta["above"]) and ("below" not in meta or value < meta["below"]))


def check_fields(cfg: T, typed: dict[str, str] | None = None) -> T:
    """``cfg`` (a dataclass instance) if every field is within its metadata ``choices`` and range;
    else ValueError naming the flag: ``--pool must be >= 1, got 0``. None (an unset optional)
    passes; a list field's range applies to each item. ``typed``: field -> the spelling of its
    flag on the command line (an alias such as ``--n``), which the message then uses."""
    for f in dataclasses.fields(cfg):  # type: ignore[arg-type]
        value = getattr(cfg, f.name)
        if value is None:
            continue
        flag = (typed or {}).get(f.name) or _flag(f.name)
        choices = f.metadata.get("choices")
        if callable(choices):
            choices = list(choices())
        if choices is not None and value not in choices:
            shown = ", ".join(repr(c) if c == "" else str(c) for c in choices)
            raise ValueError(f"{flag} must be one of {shown}; got {value!r}")
        if not any(key in f.metadata for key in RANGE_KEYS):
            continue
        for item in (value if isinstance(value, list | tuple) else [value]):
            if not _in_range(item, f.metadata):
                raise ValueError(f"{flag} must be {range_text(f.metadata)}, got {item!r}")
    return cfg


def field_like(cls: type, name: str, *, default: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A dataclass field with the default and metadata (help, range, choices) of ``cls``'s field
    ``name``, ``metadata`` added on top (a key given as None is dropped: a bound that does not apply)
    and ``default`` in place of its default when given: one option shared by several configs keeps
    one rule::

        num_weights: int = field_like(WeightOptions, "num_weights", help="weights K per group")
    """
    source = next(f for f in dataclasses.fields(cls) if f.name == name)
    merged = {key: value for key, value in {**source.metadata, **metadata}.items() if value is not None}
    return dataclasses.field(default=source.default if default is dataclasses.MISSING else default, metadata=merged)


TYPED_FLAGS = "_vpo_typed_flags"
"""Namespace attribute: {field: the spelling of its flag that was typed} (an alias or the flag)."""


def _record_typed(namespace: argparse.Namespace, dest: str, option_string: str | None) -> None:
    setattr(namespace, TYPED_FLAGS, {**getattr(namespace, TYPED_FLAGS, {}), dest: option_string})


class _StoreTyped(argparse.Action):
    """argparse's ``store``, also recording which spelling of the flag was typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        _record_typed(namespace, self.dest, option_string)


class _BoolTyped(argparse.BooleanOptionalAction):
    """argparse's ``--flag / --no-flag``, also recording which spelling was typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _record_typed(namespace, self.dest, option_string)


def _default_text(help_text: str, default: Any, form: str = "; default {}") -> str:
    """`` (default: X)`` for a flag's help, or nothing when there is no default to show (an empty
    string, None) or the help already says what the default is."""
    if default in ("", None) or "default" in help_text.lower():
        return ""
    return form.format(default)


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """Add one flag per field of dataclass ``cls`` to ``parser`` (defaults taken from the class)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        tp = _base_type(hints[f.name])
        help_text = f.metadata.get("help", "")
        if callable(help_text):  # computed when the parser is built (e.g. the registered tasks)
            help_text = help_text()
        if any(key in f.metadata for key in RANGE_KEYS):
            help_text = f"{help_text}; {range_text(f.metadata)}"
        flags = (_flag(f.name), *f.metadata.get("aliases", ()))  # old spellings keep working
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None  # type: ignore[misc]
        )
        if tp is bool:
            parser.add_argument(*flags, dest=f.name, action=_BoolTyped,
                                default=default, help=help_text)
        elif _is_sequence(tp):
            (item_type, *_) = typing.get_args(tp) or (str,)
            parser.add_argument(*flags, dest=f.name, default=default, action=_StoreTyped,
                                type=lambda s, t=item_type: [t(x) for x in _split_csv(s)],
                                help=f"{help_text} (comma-separated"
                                     f"{_default_text(help_text, ','.join(map(str, default or [])))})")
        else:
            choices = f.metadata.get("choices")
            if callable(choices):  # computed when the parser is built (e.g. the estimator registry)
                choices = list(choices())
            parser.add_argument(*flags, dest=f.name, type=tp if tp in (int, float, str) else str,
                                default=default, choices=choices, action=_StoreTyped,
                                help=f"{help_text}{_default_text(help_text, default, ' (default: {})')}")


def dataclass_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the parsed namespace (fields absent from it keep their defaults) and
    ``check_fields`` it: a value outside its range is a one-line ValueError naming the flag."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
              if f.init and hasattr(args, f.name)}
    for name, value in list(values.items()):
        if isinstance(value, list) and typing.get_origin(typing.get_type_hints(cls)[name]) is tuple:
            values[name] = tuple(value)
    values.update(overrides)
    return check_fields(cls(**values), getattr(args, TYPED_FLAGS, None))


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets, braces or quotes (``lava=[1,3],size=5``)."""
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_params(items: str | list[str] | tuple[str, ...], flag: str = "--task-params") -> dict[str, Any]:
    """Task parameters from the command line: ``["size=5", "reward_mode=linear"]`` or
    ``"size=5,lava=[1,3]"`` -> ``{"size": 5, "reward_mode": "linear", "lava": [1, 3]}``.

    Values are parsed as JSON when they are JSON, else kept as strings; ``flag`` names the
    option in the error for an entry that is not ``key=value``.
    """
    entries = _split_top_level(items) if isinstance(items, str) else [
        part for item in items for part in _split_top_level(item)]
    params: dict[str, Any] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} entries must be key=value, got {entry!r}")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return params


def check_out_dir(path: str | os.PathLike[str], flag: str = "--out") -> None:
    """Fail at once, naming ``flag``, when ``path`` cannot be the output folder: an existing
    file, or a folder (or the nearest existing parent) this process cannot write to."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{flag} {target} is a file; give a folder")
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(f"{flag} {target}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"{flag} {target}: {probe} is not writable")

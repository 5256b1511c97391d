"""Loading raw task rows from local files or the Hugging Face hub, and picking subsets.

Usage::

    from vpo.tasks.io import load_records, select
    rows = load_records("data/musique_ans_v1.0_{split}.jsonl", split="dev")   # list[dict]
    # rows = load_records("dgslibisey/MuSiQue", split="validation")          # HF dataset (the Hub)
    picked = select(rows, n=100, seed=0)                                      # seeded subset

A ``source`` is resolved in this order:

1. ``{split}`` inside the string is replaced by the split name.
2. An existing directory: the first of ``<split>.jsonl``, ``<split>.json``,
   ``<split>.parquet`` (also ``.jsonl.gz``) found in it; for ``test`` also ``validation`` and
   ``dev`` are tried.
3. An existing file: read whole (the split is not used): ``.jsonl`` / ``.jsonl.gz`` (one JSON
   object a line), ``.json`` (a JSON array, an object holding one list under ``data`` /
   ``rows`` / ``examples``, or JSON lines as the BFCL files are), ``.parquet``.
   A folder written by ``datasets``' ``save_to_disk`` is read with ``load_from_disk`` (the
   split's rows of a ``DatasetDict``, with the same aliases; every row of a ``Dataset``).
4. Anything that looks like a path (absolute, ``./``, ``~``, or a known suffix) but does not
   exist: ``FileNotFoundError``.
5. Otherwise a Hugging Face dataset name, ``name`` or ``name:config``, loaded with
   ``datasets.load_dataset(name, config, split=split)`` (imported only then). Offline
   (``HF_HUB_OFFLINE=1``) or unknown names give a ValueError saying so.

Rows come back as plain dicts in source order; the tasks validate and convert them.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["is_saved_dataset", "load_json_rows", "load_records", "need", "resolve_path", "select"]

_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
_SPLIT_ALIASES = {"test": ("test", "validation", "dev"), "validation": ("validation", "dev", "test"),
                  "dev": ("dev", "validation", "test"), "train": ("train",)}
_LIST_KEYS = ("data", "rows", "examples")


def _has_suffix(name: str) -> bool:
    return name.lower().endswith(_SUFFIXES)


def _looks_like_path(source: str) -> bool:
    return (source.startswith(("/", "./", "../", "~")) or _has_suffix(source)
            or os.sep in source.rstrip(os.sep) and source.count("/") > 1)


def resolve_path(source: str | os.PathLike[str], split: str | None = None) -> Path | None:
    """The local file ``source`` names for ``split``; None when it is not a local path.

    Raises FileNotFoundError for a path-like source that does not exist, or a directory
    without a file for the split.
    """
    text = os.fspath(source)
    if split is not None and "{split}" in text:
        text = text.replace("{split}", split)
    path = Path(text).expanduser()
    if path.is_dir():
        names = _SPLIT_ALIASES.get(split or "train", (split,)) if split else ("train",)
        for name in names:
            for suffix in _SUFFIXES:
                candidate = path / f"{name}{suffix}"
                if candidate.is_file():
                    return candidate
        raise FileNotFoundError(
            f"no file for split {split!r} in directory {path} (looked for "
            f"{', '.join(n + s for n in names for s in _SUFFIXES)})")
    if path.is_file():
        return path
    if _looks_like_path(text):
        raise FileNotFoundError(f"data source {text!r} does not exist")
    return None


def _read_json_lines(lines: Sequence[str], path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {lineno} is not valid JSON: {err.msg}") from None
    return rows


def load_json_rows(path: str | os.PathLike[str]) -> list[Any]:
    """Rows of a JSON / JSON-lines file (see the module docstring for the accepted layouts)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
            text = handle.read()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
                         "save it as UTF-8 JSON or JSON lines") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # a .gz cut short or not gzip at all
        raise ValueError(f"{path}: not a readable gzip file ({err or type(err).__name__})") from None
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return _read_json_lines(text.splitlines(), path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # JSON lines in a .json file (BFCL)
            return _read_json_lines(text.splitlines(), path)
        raise ValueError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}") from None
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in _LIST_KEYS:
            if isinstance(data.get(key), list):
                return data[key]
        return [data]
    raise ValueError(f"{path}: expected a JSON array or object, got {type(data).__name__}")


def _load_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as err:  # a truncated or foreign file: pyarrow's message names no file
        raise ValueError(f"{path}: not a readable parquet file ({err})") from None


def _load_hf(name: str, split: str | None) -> list[dict[str, Any]]:
    dataset, _, config = name.partition(":")
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ValueError(
            f"data source {name!r} is not a local file and the 'datasets' package is not installed "
            f"to load it from the Hugging Face hub (pip install datasets), or pass a local path") from err
    try:
        loaded = datasets.load_dataset(dataset, config or None, split=split or "train")
    except Exception as err:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ...)
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or os.environ.get(
            "HF_DATASETS_OFFLINE", "") not in ("", "0")
        hint = (" HF_HUB_OFFLINE is set, so nothing can be downloaded: pass a local "
                "jsonl/json/parquet file or directory instead." if offline else
                " Pass a local jsonl/json/parquet file or directory if the hub is unreachable.")
        raise ValueError(f"could not load Hugging Face dataset {name!r} (split {split!r}): "
                         f"{type(err).__name__}: {err}.{hint}") from err
    return [dict(row) for row in loaded]


_SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")
"""Files that mark a folder written by ``datasets``' ``save_to_disk``."""


def is_saved_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    folder = Path(path).expanduser()
    return folder.is_dir() and any((folder / name).is_file() for name in _SAVED_DATASET_FILES)


def _load_saved(path: Path, split: str | None) -> list[dict[str, Any]]:
    from datasets import DatasetDict, load_from_disk

    loaded = load_from_disk(str(path))
    if isinstance(loaded, DatasetDict):
        names = _SPLIT_ALIASES.get(split or "train", (split,))
        found = next((name for name in names if name in loaded), None)
        if found is None:
            raise FileNotFoundError(f"saved dataset {path} has no split {split!r} (it has {sorted(loaded)})")
        loaded = loaded[found]
    return [dict(row) for row in loaded]


def load_records(source: str | os.PathLike[str], split: str | None = None) -> list[Any]:
    """Raw rows of ``source`` for ``split`` (a local file or directory, a folder saved by
    ``datasets``' ``save_to_disk``, or an HF dataset name)."""
    if is_saved_dataset(os.fspath(source).replace("{split}", split or "train")):
        return _load_saved(Path(os.fspath(source).replace("{split}", split or "train")).expanduser(), split)
    path = resolve_path(source, split)
    if path is None:
        return _load_hf(os.fspath(source), split)
    if path.name.endswith(".parquet"):
        rows = _load_parquet(path)
    elif path.name.endswith((".json", ".jsonl", ".jsonl.gz", ".json.gz")):
        rows = load_json_rows(path)
    else:
        raise ValueError(f"{path}: unknown file type (expected one of {', '.join(_SUFFIXES)})")
    if not rows:  # said here, where the file is known, not later as "no examples" of a task
        raise ValueError(f"{path}: holds no rows")
    return rows


def select(rows: Sequence[Any], n: int | None = None, seed: int | None = None) -> list[Any]:
    """``n`` rows (all when None or larger than available): the first ones when ``seed`` is None,
    else a uniformly random subset in random order (``random.Random(seed)``, reproducible)."""
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    items = list(rows)
    if seed is not None:
        random.Random(seed).shuffle(items)
    return items if n is None else items[:n]


def need(mapping: Any, key: str, types: type | tuple[type, ...], task: str, row: int | None,
         where: str | None = None) -> Any:
    """``mapping[key]`` checked against ``types`` (bool is not an int here unless listed).

    ValueError otherwise, naming the task, the row and the field path (``where.key``), e.g.
    ``musique: row 3: missing field 'paragraphs[0].idx'``.
    """
    label = f"{where}.{key}" if where else key
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{task}: row {row}: field {where or 'row'!r} must be a mapping, "
                         f"got {type(mapping).__name__}")
    if key not in mapping:
        raise ValueError(f"{task}: row {row}: missing field {label!r}")
    value = mapping[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = "/".join(t.__name__ for t in allowed)
        raise ValueError(f"{task}: row {row}: field {label!r} must be {names}, got {type(value).__name__}")
    return value

"""One run per output folder: the folder lock, the run record, and writes a kill cannot leave half done.

Usage::

    from vpo.runs import atomic_write_text, claim_out_dir
    claim_out_dir("runs/eval", command="eval", record={"task": "maze"}, overwrite=False)   # before any work
    atomic_write_text(Path("runs/eval/report.md"), text)        # temp name + rename

``claim_out_dir`` takes an exclusive lock on the folder (held until the process exits or
``release_out_dir``), refuses a folder that holds another run's results unless the user said
resume or overwrite, checks that a resumed run agrees with the recorded one (method, task, m), and
writes the run record ``.vpo_run.json``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vpo.records import Field, RecordError, read_record

__all__ = ["FORMAT_FILE", "LOCK_FILE", "RUN_FIELDS", "RUN_FILE", "TRAIN_RECORD", "atomic_write_text", "check_claim",
           "claim_out_dir", "lock_folder", "read_train_record", "release_out_dir", "run_record"]

LOCK_FILE = ".lock"
FORMAT_FILE = "vpo_format.json"
"""File in a checkpoint folder naming the prompt format it was trained on (and its task params);
``vpo.formats`` reads it."""
RUN_FILE = ".vpo_run.json"
"""The run record: which vpo command wrote the folder, and what a resume must agree with."""

RESULT_FILES = ("report.md", "metrics.json", "pool.npz", "search.json", "openevolve_search.json", "vpo_train.json",
                "checkpoint-*", "model.safetensors", "adapter_model.safetensors", "train.parquet", "test.parquet",
                "done.json", "config.json")
"""Names a vpo command writes into ``--out``: a folder holding one of them holds a run's results
(also a folder written before run records existed)."""

RESUME_KEYS = ("method", "task", "answers")
"""What a resumed run must share with the recorded one."""

RUN_FIELDS = {"command": Field(str, required=True), "method": Field(str), "task": Field(str),
              "answers": Field(int, low=1)}
"""What a run record holds (besides the command's other options, which are not read back)."""

TRAIN_RECORD = "vpo_train.json"
"""What ``vpo train`` writes beside the model it saves: its options and a summary with m."""

TRAIN_FIELDS = {"train": Field(dict, fields={"model": Field(str)}), "rl": Field(dict), "trl": Field(dict),
                "summary": Field(dict, fields={"task": Field(str), "method": Field(str), "answers": Field(int, low=1),
                                               "steps": Field(int, low=0)})}
"""What ``vpo_train.json`` holds that is read back: the starting model (a LoRA adapter's base) and
the summary (what a resume must agree with, and m)."""

_HELD: dict[Path, Any] = {}


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary name in the same folder and a rename, so a
    process killed mid-write leaves the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def lock_folder(out: str | os.PathLike[str], what: str = "vpo run") -> Any:
    """Hold an exclusive lock on ``out`` for this process (released when it exits or the returned
    file is closed); BlockingIOError naming the holder's pid when another process holds it: two
    runs writing one folder would race on the same files."""
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK_FILE, "a+")  # noqa: SIM115  (held for the whole run)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise BlockingIOError(f"{out} is in use by another {what} ({holder}); wait for it or choose another "
                              "--out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def read_train_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``vpo_train.json`` at ``path``, its fields checked (``TRAIN_FIELDS``); RecordError naming the
    file and the field."""
    return read_record(path, TRAIN_FIELDS)


def run_record(out: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run record of ``out``; for a ``vpo train`` folder written before run records, its
    ``vpo_train.json`` summary (method, task, answers); None when there is neither. A damaged one
    is a RecordError naming the file and the field."""
    out = Path(out)
    if (out / RUN_FILE).is_file():
        return read_record(out / RUN_FILE, RUN_FIELDS)
    if (out / TRAIN_RECORD).is_file():
        summary = read_train_record(out / TRAIN_RECORD).get("summary")
        if summary:
            return {"command": "train", **summary}
    return None


def _results_in(out: Path) -> list[str]:
    if not out.is_dir():
        return []
    names = [child.name for child in out.iterdir()]
    return sorted({name for name in names for pattern in RESULT_FILES if fnmatch.fnmatch(name, pattern)})


def release_out_dir(out: str | os.PathLike[str] | None = None) -> None:
    """Release the lock this process holds on ``out`` (None: on every folder)."""
    for key in [Path(out).resolve()] if out is not None else list(_HELD):
        handle = _HELD.pop(key, None)
        if handle is not None:
            handle.close()


def claim_out_dir(out: str | os.PathLike[str], *, command: str, record: Mapping[str, Any] | None = None,
                  resume: bool = False, overwrite: bool = False, flag: str = "--out",
                  resume_flag: str = "--resume-from-checkpoint", overwrite_flag: str = "--overwrite",
                  stale: Sequence[str] = ()) -> Path:
    """Make ``out`` this run's folder, before any work: lock it (``lock_folder``), then

    * a folder holding another command's run, or results with no run record, is refused unless
      ``overwrite``;
    * a folder holding a run of the same command is refused unless ``resume`` (the run goes on;
      its ``record`` must agree on method, task and m) or ``overwrite`` (the names in ``stale``,
      glob patterns such as ``checkpoint-*``, are deleted so nothing of the old run is resumed).

    Then writes the run record (``command`` and ``record``). Returns the folder. ValueError (one
    line naming the flags) for a refused folder; BlockingIOError when another process holds it.
    """
    from vpo.config import check_out_dir

    check_out_dir(out, flag)
    folder = Path(out)
    key = folder.resolve()
    release_out_dir(key)  # this process claiming the folder again (a second command in one session)
    handle = lock_folder(folder, f"vpo {command}")
    try:
        _check_claim(folder, command, dict(record or {}), resume, overwrite, flag, resume_flag, overwrite_flag)
        if overwrite:
            for child in list(folder.iterdir()):
                if any(fnmatch.fnmatch(child.name, pattern) for pattern in stale):
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        atomic_write_text(folder / RUN_FILE, json.dumps({"command": command, **dict(record or {})}, indent=1,
                                                        sort_keys=True, default=str))
    except BaseException:
        handle.close()
        raise
    _HELD[key] = handle
    return folder


def check_claim(out: str | os.PathLike[str], *, command: str, record: Mapping[str, Any] | None = None,
                resume: bool = False, overwrite: bool = False, flag: str = "--out",
                resume_flag: str = "--resume-from-checkpoint", overwrite_flag: str = "--overwrite") -> None:
    """The refusals of ``claim_out_dir`` (same arguments), without locking, creating or writing
    anything: a command says them before its work, so a used ``--out`` is refused in its first
    second rather than after the model was read. ``claim_out_dir`` still claims the folder later."""
    folder = Path(out)
    if folder.is_dir():
        _check_claim(folder, command, dict(record or {}), resume, overwrite, flag, resume_flag, overwrite_flag)


def _check_claim(folder: Path, command: str, record: dict[str, Any], resume: bool, overwrite: bool, flag: str,
                 resume_flag: str, overwrite_flag: str) -> None:
    if overwrite:  # whatever the folder holds, even a damaged run record, is replaced
        return
    try:
        previous = run_record(folder)
    except RecordError as err:
        raise RecordError(f"{err}; pass {overwrite_flag} to replace the run in {folder}, or choose another "
                          f"{flag}") from None
    results = _results_in(folder)
    if previous is None and not results:
        return
    if previous is None and resume:  # a folder from before run records: the command's own checks apply
        return
    where = f"{flag} {folder}"
    if previous is None:
        raise ValueError(f"{where} already holds results ({', '.join(results[:4])}); pass {overwrite_flag} to "
                         "replace them or choose another folder")
    if previous.get("command") != command:
        raise ValueError(f"{where} holds a vpo {previous.get('command')} run; pass {overwrite_flag} to replace it "
                         "or choose another folder")
    if not results:  # an earlier run of this command that wrote nothing (it failed or was stopped early)
        return
    if not resume:
        ways = f"pass {resume_flag} to continue it or {overwrite_flag} to replace it" if resume_flag else \
            f"pass {overwrite_flag} to replace it"
        raise ValueError(f"{where} holds an earlier vpo {command} run; {ways}, or choose another folder")
    differ = [key for key in RESUME_KEYS if key in previous and key in record and previous[key] != record[key]]
    if differ:
        pairs = ", ".join(f"{key} {previous[key]!r} there, {record[key]!r} here" for key in differ)
        raise ValueError(f"{resume_flag}: {folder} holds a run that differs ({pairs}); resume it with the same "
                         f"options, pass {overwrite_flag} to start over, or choose another folder")

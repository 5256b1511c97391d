"""Vouching for a checkpoint before any work: its weights, its tokenizer and the task it records.

Usage::

    from vpo.checkpoints import check_checkpoint, checkpoint_answers
    info = check_checkpoint("runs/demo/checkpoints/vpo-s0", task="maze")   # CheckpointError if unusable
    info.task_params          # what vpo_format.json records for that task ({} when it names another task)
    m, why = checkpoint_answers(info)                # 3, "recorded in .../vpo_format.json"

Every command that reads a checkpoint (``vpo eval``, ``vpo search``, ``vpo train``, the demo's
resume) calls ``check_checkpoint`` first. It reads only headers: the safetensors header of each
weight file (whose tensor sizes must add up to the file's length, so a truncated file is caught),
``config.json``, the tokenizer (loaded: it is small), and ``vpo_format.json`` (each field checked:
``vpo.formats.read_format_record``). A fault raises ``CheckpointError`` (a ``vpo.records.RecordError``,
so a ``ValueError``): one line naming the folder or file and what is wrong.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpo.formats import FORMAT_FILE, format_record, read_format_record, recorded_format
from vpo.records import Field, RecordError, first_line, read_json, read_record
from vpo.runs import TRAIN_RECORD, read_train_record

__all__ = ["CheckpointError", "CheckpointInfo", "TRAINER_STATE_FIELDS", "chain_answers", "check_checkpoint",
           "check_checkpoints", "check_resume_checkpoint", "checkpoint_answers", "describe_record",
           "format_record_callback", "latest_complete_checkpoint", "read_safetensors_header"]

TRAINER_STATE_FIELDS = {"global_step": Field(int, required=True, low=0), "max_steps": Field(int, low=0),
                        "num_train_epochs": Field(float, low=0), "log_history": Field(list)}
"""What a resume reads from a TRL checkpoint's ``trainer_state.json`` (transformers' ``TrainerState``)."""

_SAFETENSORS_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
                            "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class CheckpointError(RecordError):
    """A checkpoint that cannot be used: the message is one line naming the folder and the fault."""


@dataclass
class CheckpointInfo:
    """What ``check_checkpoint`` found in a checkpoint."""

    path: Path
    """The checkpoint as given (a folder, a ``.gguf`` file or a cached hub id)."""
    kind: str
    """``folder`` (full weights), ``lora`` (an adapter on a base model), ``gguf`` or ``hub``."""
    record: dict[str, Any] | None = None
    """``vpo_format.json`` as read (None: the folder has none)."""
    task: str | None = None
    """The task the checkpoint records having been trained on (None: it records none)."""
    task_params: dict[str, Any] = field(default_factory=dict)
    """The recorded task parameters that apply to the command's task ({} when it names another task)."""
    format_applies: bool = True
    """False when the recorded prompt format is for another task (the task's own prompts are used)."""
    train_record: dict[str, Any] | None = None
    """``vpo_train.json`` as read, when present."""
    record_path: Path | None = None
    """The ``vpo_format.json`` read (the checkpoint's own, or its run folder's: ``inherited``)."""
    inherited: bool = False
    """True when the record is the run folder's: a ``checkpoint-N`` without one of its own."""


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a ``.safetensors`` file; ValueError when the header is unreadable or the
    tensors it lists do not fill the file exactly (a truncated or padded file)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{path.name} is {size} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise ValueError(f"{path.name} is {size} bytes, but its first 8 bytes announce a {length}-byte header: "
                             "the file is cut short, or not safetensors")
        try:
            header = json.loads(fh.read(length))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the parser's depth
            raise ValueError(f"{path.name}: the safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: the safetensors header is not a JSON object")
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = (int(x) for x in entry["data_offsets"])
            count = 1
            for dim in entry["shape"]:
                count *= int(dim)
            width = _SAFETENSORS_DTYPE_BYTES.get(str(entry["dtype"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path.name}: malformed header entry for tensor {name!r}") from None
        if width is not None and stop - start != count * width:
            raise ValueError(f"{path.name}: tensor {name!r} has {stop - start} bytes for shape {entry['shape']}")
        end = max(end, stop)
    if end != size - 8 - length:
        raise ValueError(f"{path.name} holds {size - 8 - length} bytes of tensor data where its header lists {end} "
                         "(a truncated or damaged file)")
    return header


def _read_json(path: Path) -> Any:
    try:
        return read_json(path)
    except RecordError as err:
        raise CheckpointError(str(err)) from None


def _check_weights(folder: Path, stem: str) -> None:
    """The weight files of ``folder`` named ``stem`` (``model`` or ``adapter_model``): one
    safetensors file, a sharded index whose shards all exist, or a torch ``.bin`` file."""
    single, index = folder / f"{stem}.safetensors", folder / f"{stem}.safetensors.index.json"
    files: list[Path] = []
    if single.is_file():
        files = [single]
    elif index.is_file():
        listed = _read_json(index)
        weight_map = listed.get("weight_map") if isinstance(listed, Mapping) else None
        if not isinstance(weight_map, Mapping) or not weight_map:
            raise CheckpointError(f"{folder}: {index.name} has no weight_map")
        files = [folder / name for name in sorted(set(map(str, weight_map.values())))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{folder}: weight shard(s) missing: {', '.join(missing[:3])}")
    else:
        binaries = [folder / f"{stem}.bin", folder / f"{stem.replace('model', 'pytorch_model')}.bin"]
        found = [b for b in binaries if b.is_file()]
        if not found and not (folder / f"{stem.replace('model', 'pytorch_model')}.bin.index.json").is_file():
            raise CheckpointError(f"{folder}: no weights ({single.name} or a sharded index is missing)")
        if found and found[0].stat().st_size == 0:
            raise CheckpointError(f"{folder}: {found[0].name} is empty")
        return
    for file in files:
        try:
            read_safetensors_header(file)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{folder}: damaged weights: {err}") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json")
"""Files a saved tokenizer is made of (``tokenizer.json`` for a fast one; ``tokenizer.model``, or
``vocab.json`` with ``merges.txt``, for the older slow layouts)."""


def _check_tokenizer(folder: Path) -> None:
    from vpo.models import load_tokenizer

    try:
        load_tokenizer(folder)
    except Exception as err:  # noqa: BLE001  (any loader failure is this one fault)
        present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        weights = ("tokenizer.json", "tokenizer.model", "vocab.json")
        if not any(name in present for name in weights):  # transformers' own words name no file
            detail = (f"it has no tokenizer file: none of {', '.join(weights)}"
                      + (f" (only {', '.join(present)})" if present else "")
                      + "; save the tokenizer beside the model (tokenizer.save_pretrained)")
        else:
            detail = f"{first_line(err)}; its tokenizer files: {', '.join(present)}"
        raise CheckpointError(f"{folder}: the tokenizer does not load: {detail}") from None


def check_checkpoint(model: str | Path, *, task: str | None = None, params_given: bool = False,
                     flag: str = "--model", tokenizer: bool = True, only: str | None = None) -> CheckpointInfo:
    """Check the checkpoint ``model`` before any work, and read what it records.

    * a folder: ``config.json`` (or, for a LoRA adapter, ``adapter_config.json`` and a base model
      that exists), weight files whose headers read and whose sizes add up, a tokenizer that
      loads (skipped with ``tokenizer=False``), and a readable ``vpo_format.json`` when present;
    * a ``.gguf`` file: its magic bytes; a cached hub id: nothing more (``check_model_path``).

    ``task``: the command's task. When ``vpo_format.json`` names another task, that is an error
    naming both, unless ``params_given`` (the user passed the task's parameters explicitly): then
    the recorded parameters and prompt format are not used (``format_applies`` is False).
    ``only``: the command when its task is fixed (``vpo search openevolve`` works on code): a
    checkpoint of another task is then refused without advice to change the task.
    Raises ``CheckpointError`` (one line, naming the checkpoint and the fault) or FileNotFoundError.
    """
    from vpo.models import check_model_path, resolve_model

    path = Path(resolve_model(model))
    check_model_path(path if path.exists() else str(model), flag=flag)
    if not path.exists():
        return CheckpointInfo(path=Path(str(model)), kind="hub")
    if path.is_file():
        if path.suffix != ".gguf":
            raise CheckpointError(f"{flag} {path}: a file that is not .gguf; give a checkpoint folder or a .gguf file")
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise CheckpointError(f"{path}: not a GGUF file (its first bytes are not GGUF)")
        return CheckpointInfo(path=path, kind="gguf")
    try:
        train_record = read_train_record(path / TRAIN_RECORD) if (path / TRAIN_RECORD).is_file() else None
    except RecordError as err:
        raise CheckpointError(str(err)) from None
    if (path / "adapter_config.json").is_file():
        adapter = _read_json(path / "adapter_config.json")
        if not isinstance(adapter, Mapping):
            raise CheckpointError(f"{path / 'adapter_config.json'} is not a JSON object")
        _check_weights(path, "adapter_model")
        base = ((train_record or {}).get("train") or {}).get("model") or adapter.get("base_model_name_or_path")
        if not base:
            raise CheckpointError(f"{path}: LoRA adapter without a base model (no {TRAIN_RECORD} or "
                                  "base_model_name_or_path)")
        try:
            check_model_path(base, flag=f"{path}: its base model")
        except FileNotFoundError as err:
            raise CheckpointError(str(err)) from None
        kind = "lora"
    else:
        if not (path / "config.json").is_file():
            raise CheckpointError(f"{flag} {path}: no config.json (not a transformers checkpoint folder)")
        config = _read_json(path / "config.json")
        if not isinstance(config, Mapping) or "model_type" not in config:
            raise CheckpointError(f"{path}: config.json names no model_type")
        _check_weights(path, "model")
        kind = "folder"
    if tokenizer:
        _check_tokenizer(path)
    info = CheckpointInfo(path=path, kind=kind, train_record=train_record)
    record_path, inherited = format_record(path)
    if record_path is not None:
        try:
            record = read_format_record(record_path)
        except RecordError as err:
            raise CheckpointError(str(err)) from None
        params = record.get("task_params") or {}
        info.record, info.task = dict(record), record.get("task")
        info.task_params = dict(params)
        info.record_path, info.inherited = record_path, inherited
        if task is not None and info.task is not None and info.task != task:
            # the task's own prompts ("task") suit any task; another format (the demo's) does not
            if only is not None and record["format"] != "task":
                raise CheckpointError(
                    f"{path} was trained on task {info.task!r} in its {record['format']!r} prompt format "
                    f"({record_path.name}); {only} works on task {task!r} only: give a checkpoint trained on {task} "
                    f"or one that records no task-specific format")
            if not params_given and record["format"] != "task":
                raise CheckpointError(
                    f"{path} was trained on task {info.task!r} ({record_path.name}), not {task!r}: pass --task "
                    f"{info.task}, or give --task-params to use it on {task} anyway")
            info.task_params, info.format_applies = {}, False
        if task is not None and info.format_applies and info.task_params:
            _check_task_params(task, info.task_params, record_path)
        if info.format_applies and record["format"] != "task":
            try:
                recorded_format(record, record_path)  # the format's own fields (the compact maze's max_answers)
            except RecordError as err:
                raise CheckpointError(str(err)) from None
    return info


def _check_task_params(task: str, params: Mapping[str, Any], record_path: Path) -> None:
    """The recorded ``task_params`` build the task (a value the task refuses, or a parameter it
    does not take, is the record's fault, named as such)."""
    from vpo.tasks import get_task

    try:
        get_task(task, **params)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{record_path}: field 'task_params' does not build task {task!r} "
                              f"({first_line(err)})") from None


def describe_record(info: CheckpointInfo) -> str:
    """Where ``info``'s format record comes from, in words: its own ``vpo_format.json``, or its
    run folder's (a ``checkpoint-N`` without one inherits it)."""
    if info.record_path is None:
        return "no vpo_format.json"
    if info.inherited:
        return f"{info.record_path} (inherited: {info.path.name} has no {FORMAT_FILE} of its own)"
    return str(info.record_path)


def format_record_callback(record: Mapping[str, Any]) -> Any:
    """A transformers ``TrainerCallback`` that writes ``record`` as ``vpo_format.json`` into every
    ``checkpoint-N`` the trainer saves (``on_save`` runs once the checkpoint is written), so each
    one is evaluated in the run's format and m; a checkpoint killed before its record landed
    inherits the run folder's (``vpo.formats.format_record``)."""
    from transformers import TrainerCallback

    from vpo.runs import atomic_write_text

    text = json.dumps(dict(record), indent=1, sort_keys=True)

    class FormatRecord(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                atomic_write_text(folder / FORMAT_FILE, text)

    return FormatRecord()


def checkpoint_answers(info: CheckpointInfo) -> tuple[int, str]:
    """``(m, why)``: the answers per chain the checkpoint was trained for, and where that comes
    from: ``vpo_format.json``'s ``answers``, else ``vpo_train.json``'s summary, else the default
    m of the recorded method (a demo checkpoint records its method), else 1. CheckpointError when
    ``vpo_train.json`` records an m the recorded format has no place for (more than its ``max_answers``)."""
    from vpo.estimators import get_spec

    record = info.record if info.format_applies else None
    if record and isinstance(record.get("answers"), int) and record["answers"] >= 1:
        return int(record["answers"]), f"recorded in {describe_record(info)}"
    summary = (info.train_record or {}).get("summary") or {}
    if isinstance(summary.get("answers"), int) and summary["answers"] >= 1:
        most = (record or {}).get("max_answers")
        if most is not None and summary["answers"] > most:  # m the recorded format has no place for
            raise CheckpointError(f"{info.path / TRAIN_RECORD}: field 'summary.answers' is {summary['answers']}, more "
                                  f"than the 'max_answers' {most} of {describe_record(info)}")
        return int(summary["answers"]), f"recorded in {info.path / TRAIN_RECORD}"
    method = (record or {}).get("method")
    if isinstance(method, str):
        try:
            m = get_spec(method).default_answers
        except (KeyError, ValueError):
            m = None
        if m is not None:
            m = min(m, int(record.get("max_answers", m)))  # type: ignore[union-attr]
            return m, f"the default of method {method!r}, recorded in {describe_record(info)}"
    return 1, "the checkpoint records no m"


def check_checkpoints(models: list[str] | list[Path], *, task: str, given: Mapping[str, Any], flag: str = "--model",
                      tokenizer: bool = True, only: str | None = None) -> tuple[dict[str, Any], list[CheckpointInfo]]:
    """``check_checkpoint`` for every one of ``models`` (the checks of a command that reads them),
    then the task parameters to use them with: what they record for ``task``, completed by the
    ``given`` ones (``vpo.formats.resolve_task_params``). Returns ``(params, infos)``."""
    from vpo.formats import resolve_task_params

    from vpo.tasks import task_class

    task_class(task)  # an unknown --task is named as such, not as a checkpoint of another task
    infos = [check_checkpoint(model, task=task, params_given=bool(given), flag=flag, tokenizer=tokenizer, only=only)
             for model in models]
    folders = [info.path for info in infos if info.kind in ("folder", "lora") and info.format_applies]
    return resolve_task_params(given, folders, task=task), infos


def chain_answers(info: CheckpointInfo, given: int | None, flag: str = "--answers") -> tuple[int, str]:
    """``(m, why)`` for sampling from ``info``'s checkpoint: ``given`` when the user typed it,
    else what the checkpoint records (``checkpoint_answers``)."""
    if given is not None:
        return int(given), f"{flag} {given}"
    return checkpoint_answers(info)


def latest_complete_checkpoint(folder: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` folder of a TRL run in ``folder`` that was written to the end
    (``trainer_state.json`` readable, written last by the trainer, and weight headers whole), or
    None. A checkpoint half-written when the process was killed is skipped, never resumed from."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = []
    for child in folder.iterdir():
        step = child.name.removeprefix("checkpoint-")
        if child.is_dir() and child.name.startswith("checkpoint-") and step.isdigit():
            found.append((int(step), child))
    for _, child in sorted(found, reverse=True):
        try:
            check_resume_checkpoint(child)
        except (OSError, ValueError):
            continue
        return child
    return None


def check_resume_checkpoint(folder: str | Path) -> dict[str, Any]:
    """The trainer state of the TRL checkpoint ``folder`` a run resumes from (``trainer_state.json``,
    which the trainer writes last, its fields checked: ``TRAINER_STATE_FIELDS``), once its weight
    headers are whole; CheckpointError naming the file and the field otherwise."""
    folder = Path(folder)
    try:
        state = read_record(folder / "trainer_state.json", TRAINER_STATE_FIELDS,
                            hint="the checkpoint was not written to the end: resume from an earlier one")
    except RecordError as err:
        raise CheckpointError(str(err)) from None
    _check_weights(folder, "adapter_model" if (folder / "adapter_config.json").is_file() else "model")
    return state

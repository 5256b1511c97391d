"""Prompt formats: how a checkpoint is prompted, how its generations split into answers, and
how many tokens a generation may take.

Usage::

    from vpo.formats import TaskFormat, load_format
    fmt = load_format("runs/demo/checkpoints/vpo-s0", task, tokenizer=tok)   # what it was trained on
    fmt.prompt(example, 3); fmt.answers(text, example, 3)
    fmt.completion_budget(examples, 3)          # generation budget in tokens for these examples

The default is the task's own prompts (``TaskFormat``). A checkpoint whose folder holds
``vpo_format.json`` names another registered format (the CPU demo's compact maze format);
formats register with ``@register_format(name)`` and are found by name, so nothing here knows
any task's schema. A built-in format's module (the maze's) names its formats in
``PROMPT_FORMATS`` instead of importing this module: it sits below it.

Shape glossary: M answers per chain (m).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vpo.records import Field, RecordError, read_record
from vpo.runs import FORMAT_FILE
from vpo.tasks.base import Example, Task

__all__ = ["DEFAULT_TOKENS_PER_ANSWER", "FORMAT_FIELDS", "FORMAT_FILE", "PromptFormat", "TaskFormat", "format_record",
           "load_format", "read_format_record", "recorded_format", "recorded_method", "recorded_task_params",
           "register_format", "resolve_task_params"]

DEFAULT_TOKENS_PER_ANSWER = 256
"""Generation budget per answer of the task's own format (``vpo train``'s preset)."""


class PromptFormat(Protocol):
    """How a checkpoint is prompted and how its generations split into answers."""

    name: str

    def prompt(self, example: Example, m: int) -> str:
        """Prompt text asking for ``m`` answers (m = 1: the single-answer prompt)."""

    def answers(self, text: str, example: Example, m: int) -> list[str]:
        """Exactly ``m`` answer strings of one generation (missing ones are ``""``)."""

    def completion_budget(self, examples: Sequence[Example], m: int) -> int:
        """Tokens one m-answer generation may take, for the longest of ``examples``."""


@dataclass
class TaskFormat:
    """The task's own prompts (``task.prompt``) and parser (``task.parse_chain``).

    ``chat``: wrap the prompt in the tokenizer's chat template (the task's chat turns plus the
    generation prompt); needs ``tokenizer`` with a ``chat_template``.
    """

    task: Task
    chat: bool = False
    tokenizer: Any = None
    name: str = "task"

    def prompt(self, example: Example, m: int) -> str:
        if not self.chat:
            return self.task.prompt(example, m)
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("chat=True needs a tokenizer with a chat_template")
        # enable_thinking=False as in `vpo train` (its chat_template_kwargs), so a thinking
        # model (Qwen3) is evaluated on the prompts it was trained on; templates without
        # that switch ignore the extra variable.
        return self.tokenizer.apply_chat_template(self.task.messages(example, m), add_generation_prompt=True,
                                                  tokenize=False, enable_thinking=False)

    def answers(self, text: str, example: Example, m: int) -> list[str]:
        return [text] if m == 1 else self.task.parse_chain(text, m)

    def completion_budget(self, examples: Sequence[Example], m: int) -> int:
        return DEFAULT_TOKENS_PER_ANSWER * m


_FORMATS: dict[str, Callable[[Mapping[str, Any]], PromptFormat]] = {}
_BUILTIN_FORMATS = {"maze-compact": "vpo.tasks.maze.format"}
"""Format name -> module whose ``PROMPT_FORMATS`` ({name: class with ``from_dict``}) holds it."""


def register_format(name: str) -> Callable[[type], type]:
    """Class decorator: ``cls.from_dict(spec)`` builds the format named ``name`` from its
    ``vpo_format.json``."""

    def decorator(cls: type) -> type:
        _FORMATS[name] = cls.from_dict
        return cls

    return decorator


def format_record(model_dir: str | Path | None) -> tuple[Path | None, bool]:
    """``(path, inherited)``: the ``vpo_format.json`` that describes the checkpoint folder
    ``model_dir``: its own, else, for a ``checkpoint-N`` folder that has none (written before
    its run recorded formats in every checkpoint, or killed before the record landed), the one
    of the run folder that holds it (``inherited`` True); ``(None, False)`` when there is none."""
    if model_dir is None:
        return None, False
    folder = Path(model_dir)
    own = folder / FORMAT_FILE
    if own.is_file():
        return own, False
    parent = folder.parent / FORMAT_FILE
    step = folder.name.removeprefix("checkpoint-")
    if folder.name.startswith("checkpoint-") and step.isdigit() and parent.is_file():
        return parent, True
    return None, False


FORMAT_FIELDS = {"format": Field(str, required=True), "task": Field(str), "task_params": Field(dict),
                 "method": Field(str), "answers": Field(int, low=1), "max_answers": Field(int, low=1),
                 "seed": Field(int)}
"""What ``vpo_format.json`` holds: the prompt format's name, the task it was trained on and its
parameters, the RL method, m (``answers``; at most the format's ``max_answers``) and the seed."""


def read_format_record(path: str | Path) -> dict[str, Any]:
    """The ``vpo_format.json`` at ``path``, each field checked (``FORMAT_FIELDS``); RecordError
    naming the file and the field when it is damaged or holds an impossible value."""
    hint = "the checkpoint's format record is damaged: restore it, or delete it to use the task's own prompts"
    record = read_record(path, FORMAT_FIELDS, hint=hint)
    answers, most = record.get("answers"), record.get("max_answers")
    if answers is not None and most is not None and answers > most:
        raise RecordError(f"{path}: field 'answers' is {answers}, more than its 'max_answers' {most}; {hint}")
    return record


def _read_record(model_dir: str | Path | None) -> tuple[Path | None, dict[str, Any] | None]:
    path, _ = format_record(model_dir)
    if path is None:
        return None, None
    return path, read_format_record(path)


def load_format(model_dir: str | Path | None, task: Task, *, tokenizer: Any = None,
                chat: bool | None = None) -> PromptFormat:
    """The prompt format a checkpoint was trained on.

    A checkpoint folder with ``vpo_format.json`` (``vpo demo`` and ``vpo train`` write it; a
    ``checkpoint-N`` without one inherits its run folder's, ``format_record``) names its format,
    e.g. the demo's compact maze format; ``"task"`` (and no record) means the task's own
    prompts, wrapped in the tokenizer's chat template when ``chat`` is True (None: when the
    tokenizer has one). A format recorded for another task than ``task`` does not apply: the
    task's own prompts are used (``vpo.checkpoints.check_checkpoint`` allows that only when the
    task parameters are given).
    """
    spec_path, spec = _read_record(model_dir)
    if spec is not None and task is not None and spec.get("task") not in (None, task.name):
        spec = None
    if spec is not None and spec.get("format") != TaskFormat.name:
        return recorded_format(spec, spec_path)
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    return TaskFormat(task, chat=chat, tokenizer=tokenizer)


def recorded_format(spec: Mapping[str, Any], spec_path: str | Path | None) -> PromptFormat:
    """The registered prompt format a ``vpo_format.json`` record (``spec``, read from ``spec_path``)
    names, built from its fields; RecordError naming the file when the name is unknown or the
    format refuses its fields (the task's own format, ``"task"``, is ``load_format``'s)."""
    name = spec.get("format")
    if name not in _FORMATS and name in _BUILTIN_FORMATS:
        for known, cls in importlib.import_module(_BUILTIN_FORMATS[name]).PROMPT_FORMATS.items():
            _FORMATS.setdefault(known, cls.from_dict)
    if name not in _FORMATS:
        raise RecordError(f"{spec_path}: field 'format' names an unknown prompt format {name!r} (known: "
                          f"{', '.join(sorted(set(_FORMATS) | set(_BUILTIN_FORMATS) | {TaskFormat.name}))})")
    try:
        return _FORMATS[name](spec)
    except (TypeError, ValueError) as err:  # a registered format's own reading of its fields
        raise RecordError(f"{spec_path}: the {name!r} format does not read it: {err}") from None


def recorded_task_params(model_dir: str | Path, task: str | None = None) -> dict[str, Any] | None:
    """The task parameters a checkpoint folder records (``vpo_format.json``, written by ``vpo
    demo`` and ``vpo train``; inherited by a ``checkpoint-N`` without one), or None (also when it
    records another task than ``task``)."""
    _, spec = _read_record(model_dir)
    if spec is None:
        return None
    if task is not None and spec.get("task") not in (None, task):
        return None
    params = spec.get("task_params")
    return dict(params) if isinstance(params, Mapping) else None


def recorded_method(model_dir: str | Path | None) -> str | None:
    """The RL method a checkpoint folder records (``vpo_format.json``: ``vpo demo`` and ``vpo
    train`` write it), or None; the reports colour a checkpoint by it."""
    _, spec = _read_record(model_dir)
    method = (spec or {}).get("method")
    return str(method) if method else None


def resolve_task_params(given: Mapping[str, Any], checkpoints: Sequence[str | Path],
                        flag: str = "--task-params", task: str | None = None) -> dict[str, Any]:
    """The task parameters to evaluate ``checkpoints`` with: what they record, completed by the
    ``given`` ones. ValueError when two checkpoints record different parameters (their pools
    would be on different examples) or when a given value contradicts a recorded one (e.g.
    searching 9x9 mazes with a model trained on 5x5). Records of another task than ``task``
    (when given) are skipped."""
    recorded: dict[str, Any] = {}
    source: dict[str, str] = {}
    for path in checkpoints:
        params = recorded_task_params(path, task) if Path(path).is_dir() else None
        for key, value in (params or {}).items():
            if key in recorded and recorded[key] != value:
                raise ValueError(f"checkpoints {source[key]} and {path} record different task parameters "
                                 f"({key}={recorded[key]!r} and {key}={value!r}); search them separately")
            recorded.setdefault(key, value)
            source.setdefault(key, str(path))
    for key, value in given.items():
        if key in recorded and recorded[key] != value:
            raise ValueError(f"{flag} {key}={value!r} contradicts {key}={recorded[key]!r} recorded by the checkpoint "
                             f"{source[key]} ({FORMAT_FILE}); drop it from {flag} or pass the recorded value")
    return {**recorded, **dict(given)}

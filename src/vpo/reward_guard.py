"""A user's reward code behind one guard: how it is loaded, named and declared, which arguments it
needs, what it may return, and length budgets that mean the same at every m.

Usage::

    from vpo.reward_guard import at_answers, check_columns, checked_rewards, load_reward_funcs
    funcs = load_reward_funcs("my_rewards.py:accuracy,my_rewards.py:overlong")   # one line if it does not import
    check_columns(funcs, [{"solution": "4"}])           # a column a function needs and a row lacks: one line
    funcs, notes = at_answers(funcs, 3)                 # chain-level length budgets x 3 (notes say so)
    values = checked_rewards([1.0, None], 2, "accuracy")   # (2,) float64, None as NaN
    checked_rewards(["high", "low"], 2, "accuracy")     # RewardContractError: ... completion 0 got 'high', a str

Every command and ``VPOTrainer`` goes through these, so a fault in the user's code is one line:

* an import that fails (a syntax error, a missing dependency, an exception at import) names the
  file and line of the error (``load_reward_funcs``), and a missing name lists what the module
  defines; both are ``ValueError``, so the command exits 2 before any model loads;
* a required argument that no column fills (``check_columns``, before any work; ``check_arguments``
  again before each call) is a ``RewardContractError`` naming the column;
* an output that is not one number (or ``None``) per completion (``checked_rewards``, on every
  call) is a ``RewardContractError`` naming what came back and what was expected.

A function that judges the whole completion (``is_chain_level``) is scored once per chain; when it
measures length, its budget is one answer's, and a chain of m answers is judged against m times it
(``at_answers``): TRL's ``get_soft_overlong_punishment`` is rebuilt with the budget scaled, and
``length_budget`` declares the same for a function of your own.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import numbers
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.reward_failures import RewardContractError, reward_list

__all__ = ["TRL_CHAIN_LEVEL", "TRL_HOOKS", "LengthBudget", "at_answers", "chain_level", "check_arguments",
           "check_columns", "checked_rewards", "function_name", "is_chain_level", "is_reward_model",
           "length_budget", "load_reward_funcs", "needs_completion_ids"]

TRL_HOOKS = ("trainer_state", "log_extra", "log_metric", "environments")
"""What ``GRPOTrainer`` passes a reward function besides the dataset columns: passed on as they
are (never repeated per answer; ``environments``, one per completion, goes to each answer with
its completion's); values given to ``log_extra`` per answer are grouped per completion."""

TRL_CHAIN_LEVEL = ("think_format_reward", "soft_overlong_punishment_reward", "repetition_penalty_reward")
"""TRL 1.16's shipped reward functions (``trl.rewards``, by ``__name__``) that judge the whole
completion by nature: its format (``think_format_reward``), its token length
(``get_soft_overlong_punishment``) and its repeated n-grams (``get_repetition_penalty_reward``).
``is_chain_level`` treats them as chain-level unless they say otherwise."""

_TRL_OVERLONG = "soft_overlong_punishment_reward"
_TRL_OVERLONG_BUDGET = ("max_completion_len", "soft_punish_cache")
"""TRL's soft overlong punishment keeps its budget in these attributes (and takes them, in this
order, in its constructor): what ``at_answers`` scales."""


# ------------------------------------------------------------------------------------------------
# what a reward function is called and declares
# ------------------------------------------------------------------------------------------------
def is_reward_model(func: Any) -> bool:
    """Whether ``func`` is a model (scored on its logits) rather than a callable."""
    return hasattr(func, "config") and callable(getattr(func, "forward", None))


def function_name(func: Any) -> str:
    """A reward function's name as TRL names it: ``__name__``, a model's checkpoint name."""
    if isinstance(func, str):
        return func.rstrip("/").split("/")[-1]
    if is_reward_model(func):
        return str(getattr(func.config, "_name_or_path", "") or type(func).__name__).rstrip("/").split("/")[-1]
    name = getattr(func, "__name__", None)
    if name is None and hasattr(func, "func"):  # functools.partial
        name = getattr(func.func, "__name__", None)
    return str(name or type(func).__name__)


def is_chain_level(func: Any) -> bool:
    """Whether ``func`` judges the whole completion (called once per completion, its value shared by
    every row of the chain) rather than one answer: its ``chain_level`` attribute when set, else
    True for the functions of ``TRL_CHAIN_LEVEL`` (``trl.rewards``)."""
    declared = getattr(func, "chain_level", None)
    if declared is not None:
        return bool(declared)
    if isinstance(func, str) or is_reward_model(func):
        return False
    return _from_trl(func) and function_name(func) in TRL_CHAIN_LEVEL


def _from_trl(func: Any) -> bool:
    module = getattr(func, "__module__", "") if inspect.isfunction(func) else type(func).__module__
    return str(module or "").startswith("trl.rewards")


def chain_level(func: Any) -> Any:
    """Declare that reward function ``func`` judges the whole completion (length, format, thinking
    tags): ``VPOTrainer``, ``score_chains``, ``vpo rewards check``, ``vpo eval`` and best-of-n call
    it once per completion and give its value to every row of the chain (a shared objective;
    docs/own_rewards.md). Returns ``func`` (usable as a decorator); a callable that takes no
    attributes is wrapped."""
    try:
        func.chain_level = True
        return func
    except (AttributeError, TypeError):
        def judged(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        judged.__name__ = function_name(func)
        judged.chain_level = True  # type: ignore[attr-defined]
        return judged


# ------------------------------------------------------------------------------------------------
# loading: an import that fails is one line naming the file and the line
# ------------------------------------------------------------------------------------------------
def load_reward_funcs(spec: str | Sequence[str]) -> list[Any]:
    """Reward functions from ``"pkg.mod:f1,pkg.mod:f2"`` (also dotted ``"pkg.mod.f"`` and
    ``"path/to/file.py:f"``), or a list of such strings. An entry without ``:`` that contains a
    ``/`` (or names an existing folder) is a reward-model id or path and is returned as is.
    ValueError in one line when a module does not import (naming the file and line of its error)
    or lacks the name (naming what it defines)."""
    entries = [spec] if isinstance(spec, str) else list(spec)
    parts = [part.strip() for entry in entries for part in str(entry).split(",") if part.strip()]
    if not parts:
        raise ValueError(f"no reward functions in {spec!r}; write them as pkg.mod:f1,pkg.mod:f2")
    return [_load_one(part) for part in parts]


def _load_one(part: str) -> Any:
    if ":" not in part and ("/" in part or Path(part).is_dir()):
        return part  # a reward model id or folder, loaded like TRL loads one
    module_name, _, attr = part.rpartition(":") if ":" in part else part.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"reward function {part!r} must be written pkg.mod:name or pkg.mod.name")
    try:
        module = _import(part, module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise ValueError(f"reward function {part!r}: cannot import {module_name!r} ({err})") from None
        raise ValueError(_import_failure(part, module_name, err)) from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure at import is the user's module's
        raise ValueError(_import_failure(part, module_name, err)) from None
    func = getattr(module, attr, None)
    if func is None or not callable(func):
        what = (f"has no callable {attr!r}" if func is None else
                f"has {attr!r} as a {type(func).__name__}, not a function")
        defined = ", ".join(_defined_callables(module)) or "no function"
        raise ValueError(f"reward function {part!r}: {module_name!r} {what}; it defines {defined}")
    return func


def _import(part: str, module_name: str) -> Any:
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name)
    if not path.is_file():
        raise ValueError(f"reward function {part!r}: no file {module_name}")
    module_spec = importlib.util.spec_from_file_location(f"vpo_user_rewards.{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_spec.name, None)
        raise
    return module


def _import_failure(part: str, module_name: str, err: BaseException) -> str:
    """One line: the module that did not import, where its error is (file, line) and the error."""
    if isinstance(err, ValueError) and str(err).startswith(f"reward function {part!r}"):
        return str(err)  # ours: no such file
    message = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if isinstance(err, SyntaxError) and err.filename:
        where = f"{err.filename}, line {err.lineno}"
        message = f"{type(err).__name__}: {err.msg}"
    else:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if not _is_machinery(f.filename)]
        where = "?"
        if frames:
            deepest = frames[-1]
            where = f"{deepest.filename}, line {deepest.lineno}"
            own = next((f for f in frames if f.name == "<module>"), None)  # the line of the user's module
            if own is not None and own is not deepest:
                where = f"{own.filename}, line {own.lineno} (raised in {where})"
    return f"reward function {part!r}: {module_name} does not import: {where}: {message}".replace("\n", " ")


def _is_machinery(filename: str) -> bool:
    """Whether a traceback frame is the import machinery's or this module's, not the user's code."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>
        return True
    path = Path(filename).resolve()
    return path == Path(__file__).resolve() or path.is_relative_to(Path(importlib.__file__).resolve().parent)


def _defined_callables(module: Any, limit: int = 12) -> list[str]:
    """The public callables ``module`` defines itself (functions, classes, callable objects such as
    ``get_soft_overlong_punishment(...)``), in definition order."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value) or not callable(value):
            continue
        home = getattr(value, "__module__", None) if inspect.isfunction(value) or inspect.isclass(value) else None
        if home is None or home == module.__name__:
            names.append(name)
    return names[:limit] + (["..."] if len(names) > limit else [])


# ------------------------------------------------------------------------------------------------
# arguments: a column the data lacks is named before any work
# ------------------------------------------------------------------------------------------------
def _required(func: Any) -> list[str]:
    """The parameters ``func`` must be given by name (no default); none for models and builtins."""
    if isinstance(func, str) or is_reward_model(func):
        return []
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return []
    return [p.name for p in parameters if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def check_arguments(func: Any, name: str, columns: Iterable[str]) -> None:
    """``RewardContractError`` when ``func`` has a required argument that a call with ``columns``
    (dataset columns and ``TRL_HOOKS``) does not pass: a dataset column the data lacks, or a
    trainer hook outside a trainer."""
    columns = set(columns)
    missing = [p for p in _required(func) if p not in {"prompts", "completions", "completion_ids", *columns}]
    if not missing:
        return
    data = sorted(k for k in columns if k not in TRL_HOOKS)
    if missing[0] in TRL_HOOKS:
        raise RewardContractError(f"reward function {name!r} needs {missing[0]!r}, which only a trainer passes "
                                  f"(GRPOTrainer, VPOTrainer); give it a default (e.g. {missing[0]}=None)")
    raise RewardContractError(f"reward function {name!r} needs the dataset column {missing[0]!r}, which the data does "
                              f"not have (its columns: {', '.join(data) or 'none besides the prompt'})")


def check_columns(funcs: Sequence[Any], rows: Sequence[Any], *, trainer: bool = False,
                  where: str = "the data") -> None:
    """Before any work: ``RewardContractError`` when a function needs a column that ``rows`` lack.
    ``rows``: the dataset's rows (mappings; a column must be in every row, and a row without it is
    named) or its column names. ``trainer``: the calls come from a trainer, which passes
    ``TRL_HOOKS`` too."""
    mappings = [row for row in rows if isinstance(row, dict)]
    every = set.intersection(*(set(row) for row in mappings)) if mappings else {str(c) for c in rows}
    given = every | set(TRL_HOOKS if trainer else ())
    for func in funcs:
        name = function_name(func)
        for column in _required(func):
            if column in given or column in ("prompts", "completions", "completion_ids"):
                continue
            lacking = next((i for i, row in enumerate(mappings) if column not in row), None)
            if lacking is not None and any(column in row for row in mappings):
                raise RewardContractError(f"reward function {name!r} needs the dataset column {column!r}, which row "
                                          f"{lacking} of {where} lacks (every row needs it)")
            check_arguments(func, name, given - {"prompt", "completion"})


def needs_completion_ids(func: Any) -> bool:
    """Whether ``func`` is one of TRL's shipped functions that count the completion's tokens
    (``completion_ids``: the overlong, repetition and cosine-scaled rewards). They cannot run where
    no tokenizer gives the tokens (``vpo rewards check`` without ``--tokenizer``); a function of
    your own gets ``completion_ids=None`` there, as its signature may not need them."""
    return _from_trl(func) and "completion_ids" in _required(func)


# ------------------------------------------------------------------------------------------------
# outputs: one number (or None) per completion
# ------------------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    if isinstance(value, bool | numbers.Real | np.bool_ | np.number):
        return True
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "biuf"
    return _is_tensor(value) and value.ndim == 0 and value.device.type == "cpu"


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "device") and hasattr(value, "ndim")


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def checked_rewards(output: Any, n: int, name: str, width: int | None = None) -> np.ndarray:
    """One call's ``output`` for ``n`` completions as (n,) float64, or (n, width) for a function that
    declares ``width`` objectives (``objective_names``), ``None`` as NaN. Anything else is a
    ``RewardContractError`` naming what came back and what was expected: not a list (a generator,
    a dict, a string, a number), a tensor on another device than the CPU, the wrong length, a
    string or a nested list where a number belongs."""
    expected = (f"{n} number{'s' * (n != 1)} (float, int, bool or None), one per completion" if width is None else
                f"{n} vector{'s' * (n != 1)} of {width} numbers (or None), one per completion (objective_names "
                f"declares {width})")
    values = reward_list(output, n, name, expected)

    def refuse(i: int, value: Any, why: str = "") -> RewardContractError:
        return RewardContractError(f"reward function {name!r} returned {_short(values)}: completion {i} got "
                                   f"{_short(value, 30)}, a {type(value).__name__}{why}; expected {expected}")

    if width is None:
        out = np.empty(n, dtype=np.float64)
        for i, value in enumerate(values):
            if value is None:
                out[i] = np.nan
            elif _is_number(value):
                out[i] = float(value)
            else:
                why = (" (a vector: a function that gives several objectives declares them, f.objective_names = "
                       "(...))") if isinstance(value, list | tuple | np.ndarray) or _is_tensor(value) else ""
                raise refuse(i, value, why)
        return out
    rows = np.empty((n, width), dtype=np.float64)
    for i, value in enumerate(values):
        if value is None:
            rows[i] = np.nan
            continue
        if width == 1 and _is_number(value):
            rows[i, 0] = float(value)
            continue
        if _is_tensor(value) and value.device.type == "cpu":
            value = value.tolist()
        items = list(value) if isinstance(value, list | tuple | np.ndarray) else None
        if items is None or len(items) != width or not all(v is None or _is_number(v) for v in items):
            raise refuse(i, value)
        rows[i] = [np.nan if v is None else float(v) for v in items]
    return rows


# ------------------------------------------------------------------------------------------------
# length budgets: one answer's, m times for a chain of m answers
# ------------------------------------------------------------------------------------------------
class LengthBudget:
    """A chain-level length reward whose budget is one answer's: ``factory(**budget)`` at m = 1,
    ``factory(**{k: v * m})`` for a chain of m answers (``at_answers``), so a chain of m answers of
    one answer's length scores what one such answer scores at m = 1. Called directly (the stock
    ``GRPOTrainer``), it is ``factory(**budget)``."""

    chain_level = True

    def __init__(self, factory: Callable[..., Any], /, **budget: float) -> None:
        if not callable(factory):
            raise ValueError(f"length_budget needs a factory that builds the reward function, got {factory!r}")
        if not budget:
            raise ValueError("length_budget needs the budget's keyword arguments, e.g. max_tokens=96")
        for key, value in budget.items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
                raise ValueError(f"length_budget: {key} must be a number >= 0, got {value!r}")
        self.factory, self.budget = factory, dict(budget)
        self.func = factory(**budget)
        self.__name__ = function_name(self.func)
        self.__signature__ = inspect.signature(self.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def at_answers(self, m: int) -> Any:
        """The reward function for chains of ``m`` answers: built with every budget value x m."""
        func = chain_level(self.factory(**{k: type(v)(v * m) for k, v in self.budget.items()}))
        func.budget_answers = m
        return func


def length_budget(factory: Callable[..., Any], /, **budget: float) -> LengthBudget:
    """Declare a chain-level length reward whose budget is one answer's (``LengthBudget``):
    ``length_budget(make_brevity, max_tokens=96)`` is ``make_brevity(max_tokens=96)`` at m = 1 and
    ``make_brevity(max_tokens=288)`` for chains of 3 answers. TRL's ``get_soft_overlong_punishment``
    needs no declaration (``at_answers`` scales it)."""
    return LengthBudget(factory, **budget)


def at_answers(funcs: Sequence[Any], m: int) -> tuple[list[Any], list[str]]:
    """``funcs`` for chains of ``m`` answers and one line per function whose budget was scaled:
    a ``LengthBudget`` (or any function with an ``at_answers(m)`` method) is rebuilt by it, and
    TRL's chain-level ``soft_overlong_punishment_reward`` is rebuilt with ``max_completion_len`` and
    ``soft_punish_cache`` x m (ValueError in one line when TRL's object no longer keeps them). At
    m = 1 the functions are returned as built, budgets unscaled. A function this built (it carries
    ``budget_answers``) is returned as it is for the same m, so scaling twice is impossible."""
    out, notes = [], []
    for func in funcs:
        name = function_name(func)
        built_for = getattr(func, "budget_answers", None)
        if built_for is not None:
            if built_for != m:
                raise ValueError(f"reward function {name!r} has its length budget scaled for chains of {built_for} "
                                 f"answers; pass the function as you built it to score chains of {m}")
            out.append(func)
            continue
        if hasattr(func, "at_answers") and callable(func.at_answers) and not isinstance(func, str):
            built = func.at_answers(m)
            out.append(built)
            budget = getattr(func, "budget", None)
            if m > 1 and budget:
                notes.append(f"{name}: a chain of {m} answers is judged against {m} x one answer's length budget ("
                             + ", ".join(f"{k} {v:g} -> {v * m:g}" for k, v in budget.items()) + ")")
            continue
        if m > 1 and _from_trl(func) and name == _TRL_OVERLONG and is_chain_level(func):
            func, note = _scaled_trl_overlong(func, m)
            notes.append(note)
        out.append(func)
    return out, notes


def _scaled_trl_overlong(func: Any, m: int) -> tuple[Any, str]:
    """TRL's soft overlong punishment with its budget x ``m`` (a new object of TRL's own class)."""
    import trl

    budget = [getattr(func, key, None) for key in _TRL_OVERLONG_BUDGET]
    try:
        if any(not isinstance(v, numbers.Real) for v in budget):
            raise TypeError("no budget attributes")
        scaled = type(func)(*(int(v * m) for v in budget))
    except TypeError:
        raise ValueError(f"TRL's {_TRL_OVERLONG} (trl {trl.__version__}) keeps no {' and '.join(_TRL_OVERLONG_BUDGET)} "
                         f"that vpo can scale for chains of m = {m} answers; declare the budget yourself: "
                         "vpo.rewards.length_budget(get_soft_overlong_punishment, max_completion_len=..., "
                         "soft_punish_cache=...)") from None
    for key, value in vars(func).items():  # what the user set on it (chain_level) comes along
        if key not in _TRL_OVERLONG_BUDGET:
            setattr(scaled, key, value)
    scaled.budget_answers = m
    note = (f"{_TRL_OVERLONG}: a chain of {m} answers is judged against {m} x one answer's length budget ("
            + ", ".join(f"{k} {v:g} -> {int(v * m)}" for k, v in zip(_TRL_OVERLONG_BUDGET, budget, strict=True)) + ")")
    return scaled, note

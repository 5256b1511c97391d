"""Task registry: ``get_task(name, **params)`` and ``list_tasks()``.

Usage::

    from vpo.tasks import get_task, list_tasks
    task = get_task("maze", size=5, reward_mode="linear")
    task = get_task("math", max_failure_rate=0.2)     # any task: its scorers' failure policy

Built-in tasks live one per module of this package (the task ``X`` in ``vpo/tasks/X.py`` or
``vpo/tasks/X/``) and register themselves when first used: a new module here needs no other
edit. Third-party tasks register
with ``@register_task("name")`` on a ``Task`` subclass, or from another package through an
entry point of the group ``vpo.tasks`` naming the module that registers them (or the ``Task``
subclass itself, registered under the entry point's name)::

    [project.entry-points."vpo.tasks"]
    sudoku = "mypkg.sudoku"

``vpo.tasks.check.check_task`` checks any task against the contract (``vpo.tasks.base``).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from vpo.tasks.base import Example, Task, require

__all__ = ["Example", "Task", "get_task", "list_tasks", "register_task", "require", "task_class"]

logger = logging.getLogger(__name__)

_REGISTRY: dict[str, type[Task]] = {}
_PLUGINS_LOADED = False



def _in_tree_modules() -> list[str]:
    """The modules of this package (each task module registers its task on import)."""
    import pkgutil

    return [info.name for info in pkgutil.iter_modules(__path__)]


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator adding a Task subclass to the registry under ``name``."""

    def decorator(cls: type[Task]) -> type[Task]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"task {name!r} is already registered to {existing.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def _load_builtin(name: str) -> None:
    """Import ``vpo.tasks.<name>`` when it exists and ``name`` is not registered yet."""
    if name not in _REGISTRY and name in _in_tree_modules():
        importlib.import_module(f"{__name__}.{name}")


def _load_plugins() -> None:
    """Load the entry points of the group ``vpo.tasks`` (once); a broken one is logged, not fatal."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="vpo.tasks"):
        try:
            loaded = ep.load()
            if isinstance(loaded, type) and issubclass(loaded, Task) and ep.name not in _REGISTRY:
                register_task(ep.name)(loaded)
        except Exception as err:
            logger.warning("vpo.tasks entry point %r (%s) failed to load: %s", ep.name, ep.value, err)


def task_class(name: str) -> type[Task]:
    """The Task subclass registered as ``name`` (not instantiated)."""
    _load_builtin(name)
    if name not in _REGISTRY:
        _load_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(list_tasks())}")
    return _REGISTRY[name]


FAILURE_PARAMS = ("max_failure_rate", "time_limit")
"""Parameters every task takes: its scorers' reward failure policy (``vpo.reward_failures``), so an
export records it in the rows and verl and OpenRLHF rebuild the task under it."""


def get_task(name: str, **params: Any) -> Task:
    """Instantiate the task registered as ``name`` with its parameters; ``FAILURE_PARAMS`` that
    its constructor does not take set its scorers' ``RewardFailurePolicy``."""
    cls = task_class(name)
    own = inspect.signature(cls.__init__).parameters
    policy = {key: params.pop(key) for key in FAILURE_PARAMS if key in params and key not in own}
    task = cls(**params)
    if policy:
        from vpo.reward_failures import RewardFailurePolicy

        task.failures = task.failures.with_policy(RewardFailurePolicy(**policy))
    return task


def list_tasks() -> list[str]:
    """Names of all available tasks (built-in ones whose module imports, ``vpo.tasks`` plugins,
    and any registered since)."""
    for module in _in_tree_modules():
        try:
            importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError:  # a task whose optional dependency is missing
            continue
    _load_plugins()
    return sorted(_REGISTRY)

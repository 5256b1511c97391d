"""Dated deprecations: an old public name keeps working, warns once per call site, and says what
replaces it and from when.

Usage::

    from vpo.deprecation import deprecated, warn_deprecated
    def new(x): return x + 1
    old = deprecated(new, "mypkg.old", "mypkg.new")      # calling old(1) warns, then returns new(1)
    warn_deprecated("mypkg.Thing", "mypkg.Other")        # for names reached another way (a module __getattr__)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["DEPRECATED_ON", "REMOVED_AFTER", "deprecated", "warn_deprecated"]

DEPRECATED_ON = "2026-11-28"
"""The date the names deprecated by this release were deprecated."""
REMOVED_AFTER = "2027-05-31"
"""The date after which they may be removed."""


def warn_deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that ``old`` is deprecated in favour of ``new``."""
    warnings.warn(f"{old} is deprecated since {DEPRECATED_ON} and may be removed after {REMOVED_AFTER}; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def deprecated(fn: Callable[..., Any], old: str, new: str) -> Callable[..., Any]:
    """``fn`` under its old name ``old``: each call warns, then runs ``fn``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warn_deprecated(old, new)
        return fn(*args, **kwargs)

    wrapper.__name__ = old.rsplit(".", 1)[-1]
    wrapper.__qualname__ = wrapper.__name__
    wrapper.__doc__ = f"Deprecated since {DEPRECATED_ON}: use ``{new}``.\n\n{fn.__doc__ or ''}"
    return wrapper

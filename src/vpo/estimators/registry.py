"""The estimator registry: every fact an engine needs about an estimator, next to its function.

Usage::

    from vpo.estimators import register_estimator, get_spec

    @register_estimator("my_rule", multi_answer=False, rollout_score="scalar")
    def my_rule(rewards, group_ids, *, scalar=None, eps=1e-6):
        ...                                    # returns an EstimatorResult

    spec = get_spec("my_rule")                 # what TRL, verl, OpenRLHF and the CLI read
    spec.options, spec.multi_answer, spec.default_answers

A third-party package adds estimators without editing this one: declare an entry point in the
group ``vpo.estimators`` naming a module whose import registers them
(``[project.entry-points."vpo.estimators"] mine = "mypkg.estimators"``).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["ROLLOUT_SCORES", "WEIGHT_KEYING", "EstimatorSpec", "get_estimator", "get_spec", "list_estimators",
           "register_estimator"]

logger = logging.getLogger(__name__)

ROLLOUT_SCORES = ("set_score", "scalar", "scalar_sum", "weighted", "vector")
"""How a rollout's (m, D) reward matrix becomes the one number an engine with scalar rewards
(verl, OpenRLHF, a TRL reward function) hands to the advantage rule:

* ``set_score``: VPO's E_w[max_i w . r_i] with the group's K keyed weights;
* ``scalar``: the task's fixed scalar of the single answer;
* ``scalar_sum``: the sum of the fixed scalar over the (deduplicated, zero-padded) answers;
* ``weighted``: w . r of the single answer with the group's one keyed weight vector;
* ``vector``: the rule needs the whole vectors (GDPO); only engines that pass them can run it.
"""

WEIGHT_KEYING = (None, "per_step", "fixed")
"""Keyed weights of an estimator: none; drawn anew each step, keyed on (seed, group, step); or
one draw per group for the whole run, keyed on (seed, group) (``vpo.weights.group_weights``)."""


@dataclass(frozen=True)
class EstimatorSpec:
    """What an adapter needs to know about a registered estimator."""

    name: str
    """Registry name (``--method``, ``algorithm.adv_estimator``, ``estimator=``)."""
    fn: Callable[..., Any] = field(repr=False)
    """The checked estimator ``fn(rewards, group_ids, **options) -> EstimatorResult``."""
    multi_answer: bool
    """Takes m > 1 answers per rollout (multi-answer chains); False: exactly one answer."""
    rollout_score: str
    """One of ``ROLLOUT_SCORES``."""
    weights: str | None
    """One of ``WEIGHT_KEYING``: whether the estimator draws keyed weights, and how."""
    conditions_prompt: bool
    """The group's weight vector is written into its prompt (goal-conditioned GRPO)."""
    group_norm: bool
    """The advantage is a group z-normalisation of the rollout score, so an engine with only a
    group-norm estimator (OpenRLHF's ``group_norm``) trains it from the score alone."""
    options: tuple[str, ...]
    """Keyword options the estimator accepts."""
    defaults: Mapping[str, Any]
    """Default value of each option."""
    summary: str
    """First line of the estimator's docstring."""

    @property
    def default_answers(self) -> int:
        """m when the user gives none: 3 for multi-answer estimators (the paper), else 1."""
        return 3 if self.multi_answer else 1


_REGISTRY: dict[str, EstimatorSpec] = {}
_PLUGINS_LOADED = False


def register_estimator(name: str, *, multi_answer: bool = True, rollout_score: str = "vector",
                       weights: str | None = None, conditions_prompt: bool = False, group_norm: bool = False
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(rewards, group_ids, *, option=default, ...)`` under ``name``
    with the facts of its ``EstimatorSpec``.

    The registered callable rejects options that are not keyword-only parameters of ``fn``
    with a ValueError naming them. Registering a different function under a taken name raises.
    The defaults (multi-answer, needs vectors) are the safe ones: an adapter that cannot serve
    a rule says so instead of running it wrongly.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"estimator name must be a non-empty string, got {name!r}")
    if rollout_score not in ROLLOUT_SCORES:
        raise ValueError(f"rollout_score must be one of {ROLLOUT_SCORES}, got {rollout_score!r}")
    if weights not in WEIGHT_KEYING:
        raise ValueError(f"weights must be one of {WEIGHT_KEYING}, got {weights!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        accepted = tuple(p.name for p in params)

        @functools.wraps(fn)
        def estimator(rewards: Any, group_ids: Any, **options: Any) -> Any:
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise ValueError(f"estimator {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                                 f"accepted: {', '.join(accepted)}")
            return fn(rewards, group_ids, **options)

        estimator.options = accepted  # type: ignore[attr-defined]
        existing = _REGISTRY.get(name)
        if existing is not None and getattr(existing.fn, "__wrapped__", None) is not fn:
            raise ValueError(f"estimator {name!r} is already registered to {existing.fn.__wrapped__!r}")
        doc = inspect.getdoc(fn) or ""
        _REGISTRY[name] = EstimatorSpec(
            name=name, fn=estimator, multi_answer=bool(multi_answer), rollout_score=rollout_score, weights=weights,
            conditions_prompt=bool(conditions_prompt), group_norm=bool(group_norm), options=accepted,
            defaults=MappingProxyType({p.name: p.default for p in params if p.default is not inspect.Parameter.empty}),
            summary=doc.split("\n", 1)[0])
        estimator.spec = _REGISTRY[name]  # type: ignore[attr-defined]
        return estimator

    return decorator


def _load_plugins() -> None:
    """Import the modules named by entry points of the group ``vpo.estimators`` (once)."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="vpo.estimators"):
        try:
            ep.load()
        except Exception as err:  # a broken plugin must not hide the built-in estimators
            logger.warning("vpo.estimators entry point %r (%s) failed to load: %s", ep.name, ep.value, err)


def get_spec(name: str) -> EstimatorSpec:
    """The spec of estimator ``name``; ValueError listing the known names otherwise."""
    _load_plugins()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(list_estimators())}") from None


def get_estimator(name: str) -> Callable[..., Any]:
    """The registered estimator ``name``; ValueError listing the known names otherwise."""
    return get_spec(name).fn


def list_estimators() -> list[str]:
    """Registered estimator names, sorted (built-in ones and those of ``vpo.estimators`` plugins)."""
    _load_plugins()
    return sorted(_REGISTRY)

"""The estimator registry: every fact an engine needs about an estimator, next to its function.

Usage::

    from vpo.estimators import register_estimator, get_spec

    @register_estimator("my_rule", multi_answer=False, reduce=fixed_scalar, advantage=group_norm)
    def my_rule(rewards, group_ids, *, scalar=None, std="sample", eps=1e-6, degenerate="raw", scale="group"):
        ...                                    # returns an EstimatorResult

    spec = get_spec("my_rule")                 # what TRL, verl, OpenRLHF and the CLI read
    spec.options, spec.multi_answer, spec.reduce, spec.reduction_options, spec.advantage_options

``docs/extending.md`` walks through a new estimator end to end.

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

__all__ = ["INJECTED_OPTIONS", "WEIGHT_KEYING", "WEIGHT_OPTIONS", "EstimatorSpec", "get_estimator", "get_spec",
           "list_estimators", "register_estimator"]

logger = logging.getLogger(__name__)

WEIGHT_KEYING = (None, "per_step", "fixed")
"""Keyed weights of an estimator: none; drawn anew each step, keyed on (seed, group, step); or
one draw per group for the whole run, keyed on (seed, group) (``vpo.weights.group_weights``)."""

WEIGHT_OPTIONS = ("num_weights", "alpha", "sampler", "seed")
"""Options that shape a group's keyed weights: they act where the per-rollout score is computed
(a reduction option: verl's ``reward_kwargs``, OpenRLHF's label), not in the advantage rule."""

INJECTED_OPTIONS = ("scalar", "rng", "step", "weight_keys", "weights", "goal_weights", "response_lengths")
"""Options the adapters fill in themselves (a user setting one is refused): the task's fixed
scalar, the step, the group keys, the weights a prompt states, the response lengths."""


@dataclass(frozen=True)
class EstimatorSpec:
    """What an adapter needs to know about a registered estimator."""

    name: str
    """Registry name (``--method``, ``algorithm.adv_estimator``, ``estimator=``)."""
    fn: Callable[..., Any] = field(repr=False)
    """The checked estimator ``fn(rewards, group_ids, **options) -> EstimatorResult``."""
    multi_answer: bool
    """Takes m > 1 answers per rollout (multi-answer chains); False: exactly one answer."""
    reduce: Callable[..., float] | None = field(repr=False)
    """The per-rollout reduction ``reduce(matrix (M, D), **context) -> float`` that equals the
    estimator's ``scores`` (``vpo.estimators.reductions``); None: the rule needs the whole
    vectors (GDPO), and engines with one scalar reward per rollout refuse it."""
    advantage: Callable[..., Any] | None = field(repr=False)
    """The advantage rule ``advantage(scores (B,), group_ids, **options) -> (B,)``
    (``vpo.estimators.rules``) an engine applies to the reduced scores; None: none registered."""
    weights: str | None
    """One of ``WEIGHT_KEYING``: whether the estimator draws keyed weights, and how."""
    conditions_prompt: bool
    """The group's weight vector is written into its prompt (goal-conditioned GRPO)."""
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

    @property
    def context(self) -> tuple[str, ...]:
        """The ``reductions.CONTEXT`` entries the reduction names (what an adapter supplies)."""
        from vpo.estimators.reductions import CONTEXT, reduce_parameters

        return tuple(p for p in reduce_parameters(self.reduce) if p in CONTEXT) if self.reduce else ()

    @property
    def reduction_options(self) -> tuple[str, ...]:
        """User options that act in the per-rollout reduction: the weight options and the
        reduction's own (they go where the score is computed: verl's ``compute_score``)."""
        from vpo.estimators.reductions import CONTEXT, reduce_parameters

        own = [p for p in reduce_parameters(self.reduce) if p not in CONTEXT] if self.reduce else []
        return tuple(o for o in self.options if o in WEIGHT_OPTIONS or o in own)

    @property
    def advantage_options(self) -> tuple[str, ...]:
        """User options of the advantage rule (they go where the advantages are computed)."""
        from vpo.estimators.reductions import reduce_parameters

        return reduce_parameters(self.advantage) if self.advantage else ()

    @property
    def injected_options(self) -> tuple[str, ...]:
        """Options of this estimator the adapters set (``INJECTED_OPTIONS``)."""
        return tuple(o for o in self.options if o in INJECTED_OPTIONS)

    @property
    def group_norm(self) -> bool:
        """The advantage is a group z-normalisation of the rollout score, so an engine with only a
        group-norm estimator (OpenRLHF's ``group_norm``) trains it from the score alone."""
        from vpo.estimators.rules import group_norm

        return self.reduce is not None and self.advantage is group_norm


_REGISTRY: dict[str, EstimatorSpec] = {}
_PLUGINS_LOADED = False


def _check_against_signature(name: str, accepted: tuple[str, ...], defaults: Mapping[str, Any],
                             reduce: Callable | None, advantage: Callable | None, weights: str | None,
                             conditions_prompt: bool) -> None:
    """ValueError when the spec contradicts the estimator's signature (caught at registration,
    not at the first training step)."""
    from vpo.estimators.reductions import CONTEXT

    def fail(reason: str) -> None:
        raise ValueError(f"register_estimator({name!r}): {reason}")

    if conditions_prompt and "goal_weights" not in accepted:
        fail("conditions_prompt=True needs a goal_weights option (the weights the prompts state)")
    if weights is not None and "seed" not in accepted:
        fail(f"weights={weights!r} needs a seed option (the weights are keyed on seed, group and step)")
    if weights == "per_step" and "step" not in accepted:
        fail("weights='per_step' needs a step option")
    for role, rule in (("reduce", reduce), ("advantage", advantage)):
        if rule is None:
            continue
        if not callable(rule):
            fail(f"{role} must be a function, got {type(rule).__name__}")
        params = list(inspect.signature(rule).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != (1 if role == "reduce" else 2):
            fail(f"{role} {rule.__name__} must take {'matrix' if role == 'reduce' else 'scores, group_ids'} "
                 "positionally and its options keyword-only")
        for p in params:
            if p.kind is not p.KEYWORD_ONLY or (role == "reduce" and p.name in CONTEXT):
                continue
            if p.name not in accepted:
                fail(f"{role} {rule.__name__} takes option {p.name!r}, which the estimator does not accept")
            if p.default is not p.empty and defaults.get(p.name, p.empty) != p.default:
                fail(f"option {p.name!r} defaults to {defaults.get(p.name)!r} in the estimator but {p.default!r} "
                     f"in its {role} {rule.__name__}")
            if role == "advantage" and p.default is p.empty and p.name not in defaults:
                fail(f"option {p.name!r} of the advantage rule needs a default in the estimator")
    if reduce is not None:
        context = [p for p in inspect.signature(reduce).parameters if p in CONTEXT]
        if "weights" in context and weights is None:
            fail("its reduction takes the group's keyed weights, but weights=None")
        if "goal" in context and weights != "fixed" and not conditions_prompt:
            fail("its reduction takes one weight vector per group (goal): give weights='fixed' or "
                 "conditions_prompt=True")
        if advantage is not None:
            from vpo.estimators.reductions import reduce_parameters

            grouped = set(WEIGHT_OPTIONS) | set(INJECTED_OPTIONS) | set(reduce_parameters(reduce)) | set(
                reduce_parameters(advantage))
            stray = [o for o in accepted if o not in grouped]
            if stray:
                fail(f"option(s) {', '.join(stray)} belong to neither its reduction nor its advantage rule, so an "
                     "engine with scalar rewards could not pass them")


def register_estimator(name: str, *, multi_answer: bool = True, reduce: Callable[..., float] | None = None,
                       advantage: Callable[..., Any] | None = None, weights: str | None = None,
                       conditions_prompt: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn(rewards, group_ids, *, option=default, ...)`` under ``name``
    with the facts of its ``EstimatorSpec``.

    ``reduce`` is its per-rollout reduction (``reduce(matrix, *, <context>, <options>) ->
    float``, equal to the estimator's ``scores``; ``vpo.estimators.reductions``) and
    ``advantage`` its rule on those scores (``vpo.estimators.rules``). The spec is checked
    against the signature here (``_check_against_signature``); ``vpo.estimators.check.
    check_estimator`` checks the behaviour. The registered callable rejects options that are
    not keyword-only parameters of ``fn`` with a ValueError naming them. Registering a
    function of another module or name under a taken name raises. The defaults (multi-answer, no reduction)
    are the safe ones: an adapter that cannot serve a rule says so instead of running it wrongly.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"estimator name must be a non-empty string, got {name!r}")
    if weights not in WEIGHT_KEYING:
        raise ValueError(f"weights must be one of {WEIGHT_KEYING}, got {weights!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        accepted = tuple(p.name for p in params)
        defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
        _check_against_signature(name, accepted, defaults, reduce, advantage, weights, bool(conditions_prompt))

        @functools.wraps(fn)
        def estimator(rewards: Any, group_ids: Any, **options: Any) -> Any:
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise ValueError(f"estimator {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                                 f"accepted: {', '.join(accepted)}")
            return fn(rewards, group_ids, **options)

        estimator.options = accepted  # type: ignore[attr-defined]
        existing = _REGISTRY.get(name)
        before = getattr(existing.fn, "__wrapped__", None) if existing is not None else None
        if before is not None and (before.__module__, before.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"estimator {name!r} is already registered to {before!r}")  # a reload may re-register
        doc = inspect.getdoc(fn) or ""
        _REGISTRY[name] = EstimatorSpec(
            name=name, fn=estimator, multi_answer=bool(multi_answer), reduce=reduce, advantage=advantage,
            weights=weights, conditions_prompt=bool(conditions_prompt), options=accepted,
            defaults=MappingProxyType(defaults), summary=doc.split("\n", 1)[0])
        estimator.spec = _REGISTRY[name]  # type: ignore[attr-defined]
        return estimator

    return decorator


def _load_plugins() -> None:
    """Import every module of this package (in-tree estimators register themselves on import,
    so a new module here needs no other edit) and the modules named by entry points of the
    group ``vpo.estimators`` (once)."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    import importlib
    import pkgutil
    from importlib.metadata import entry_points

    import vpo.estimators as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")

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

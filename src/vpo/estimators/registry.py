"""The estimator registry: an estimator is its two halves, a per-rollout reduction and an
advantage rule; the batched function every engine calls is derived from them.

Usage::

    from vpo.estimators import GRPO_NORM, fixed_scalar, get_estimator, get_spec, group_norm, register_estimator

    register_estimator("my_grpo", multi_answer=False, reduce=fixed_scalar, advantage=group_norm,
                       defaults=GRPO_NORM.as_dict())
    get_estimator("my_grpo")(rewards, group_ids)   # derived: the batched reduction, then the rule
    spec = get_spec("my_grpo")                     # what TRL, verl, OpenRLHF and the CLI read
    spec.options, spec.multi_answer, spec.reduce, spec.reduction_options, spec.advantage_options

An estimator's options are the halves' keyword options (each declared once: in the half's
signature or in ``defaults=``) plus the options that build the reduction's context (the keyed
weights' ``num_weights``, ``alpha``, ``sampler``, ``seed``, ...; ``SOURCE_OPTIONS``). An estimator
that needs the whole reward vectors (GDPO) registers one function and no halves. Registration
refuses only what would train silently wrong (a spec its halves contradict, a default declared
twice with two values, a taken name); ``check.check_estimator`` checks the rest, and the
behaviour. ``docs/extending.md`` walks through a new estimator end to end.

A third-party package adds estimators without editing this one: declare an entry point in the
group ``vpo.estimators`` naming a module whose import registers them
(``[project.entry-points."vpo.estimators"] mine = "mypkg.estimators"``).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from vpo.estimators.common import same_value
from vpo.estimators.spec import (INJECTED_OPTIONS, SOURCE_OPTIONS, WEIGHT_KEYING, WEIGHT_OPTIONS, EstimatorSpec,
                                 keyword_options)

__all__ = ["INJECTED_OPTIONS", "SOURCE_OPTIONS", "WEIGHT_KEYING", "WEIGHT_OPTIONS", "EstimatorSpec",
           "get_estimator", "get_spec", "list_estimators", "register_estimator"]

logger = logging.getLogger(__name__)

_SOURCE_NAMES = {o for options in SOURCE_OPTIONS.values() for o in options} | {"goal_weights"}
_EMPTY = inspect.Parameter.empty


_REGISTRY: dict[str, EstimatorSpec] = {}
_INCOMPLETE: dict[str, str] = {}
"""Names registered with halves that leave an option without a default: why ``get_spec`` cannot
return them."""
_PLUGINS_LOADED = False


def _options_of_halves(name: str, reduce: Any, advantage: Any, weights: str | None, conditions_prompt: bool,
                       defaults: Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    """The derived estimator's options and the defaults declared for them; ValueError for a spec
    its halves contradict, or a default declared twice with two values (each would train
    silently wrong: the adapters key, prompt and default by the spec, the estimator by its halves)."""
    from vpo.estimators.reductions import CONTEXT

    def fail(reason: str) -> None:
        raise ValueError(f"register_estimator({name!r}): {reason}")

    context = [o for o in keyword_options(reduce) if o in CONTEXT]
    if "weights" in context and weights is None:
        fail("its reduction takes the group's keyed weights, but weights=None")
    if "goal" in context and weights != "fixed" and not conditions_prompt:
        fail("its reduction takes one weight vector per group (goal): give weights='fixed' or conditions_prompt=True")
    if conditions_prompt and "goal" not in context:
        fail("conditions_prompt=True needs a goal_weights option (the weights the prompts state): its reduction "
             "must take the group's goal")
    options = ["goal_weights"] if conditions_prompt else []
    options += [o for entry in CONTEXT if entry in context for o in SOURCE_OPTIONS[entry] if o not in options]
    declared: dict[str, tuple[Any, str]] = {"goal_weights": (None, "the registry")} if conditions_prompt else {}
    sources = [(f"its {role} {rule.__name__}",
                {p.name: p.default for p in inspect.signature(rule).parameters.values()
                 if p.kind is p.KEYWORD_ONLY and not (role == "reduce" and p.name in CONTEXT)})
               for role, rule in (("reduce", reduce), ("advantage", advantage))]
    unknown = sorted(set(defaults or {}) - set(options) - {o for _, params in sources for o in params})
    if unknown:
        every = options + [o for _, params in sources for o in params]
        fail(f"defaults names {unknown[0]!r}, which is not an option of its halves (options: "
             f"{', '.join(dict.fromkeys(every)) or 'none'})")
    for where, params in [*sources, ("defaults=", dict(defaults or {}))]:
        for option, default in params.items():
            if option not in options:
                options.append(option)
            if default is _EMPTY:
                continue
            if option in declared and not same_value(declared[option][0], default):
                fail(f"option {option!r} defaults to {declared[option][0]!r} in {declared[option][1]} but "
                     f"{default!r} in {where}")
            declared.setdefault(option, (default, where))
    return options, {o: value for o, (value, _) in declared.items()}


def _with_fast_path(name: str, options: list[str], defaults: dict[str, Any], fast: Callable[..., Any]) -> None:
    """A fast path must take every option of the halves the adapters do not inject, with the
    same defaults (it runs for the calls whose options it takes: a missing option or another
    default would score differently there than in the engines' per-rollout reduction);
    ``defaults`` gains those the halves leave open."""
    params = {p.name: p.default for p in inspect.signature(fast).parameters.values() if p.kind is p.KEYWORD_ONLY}
    for option in options:
        if option not in params and option not in INJECTED_OPTIONS:
            raise ValueError(f"register_estimator({name!r}): its halves take option {option!r}, which the estimator "
                             f"{fast.__name__} does not accept")
    stray = [o for o in params if o not in options]
    if stray:
        raise ValueError(f"register_estimator({name!r}): option(s) {', '.join(stray)} belong to neither its reduction "
                         "nor its advantage rule, so an engine with scalar rewards could not pass them")
    for option, default in params.items():
        if default is _EMPTY:
            continue
        if option in defaults and not same_value(defaults[option], default):
            raise ValueError(f"register_estimator({name!r}): option {option!r} defaults to {default!r} in the "
                             f"estimator but {defaults[option]!r} in its halves")
        defaults.setdefault(option, default)


def _check_name_free(name: str, reduce: Any, advantage: Any, whole: Any = None, fast: Any = None) -> None:
    """ValueError when ``name`` is taken by another estimator (a module reloaded may re-register its own)."""
    existing = _REGISTRY.get(name)
    if existing is None:
        return

    def where(fn: Any) -> Any:
        return getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))

    held_whole = None if existing.reduce is not None else getattr(existing.fn, "__wrapped__", None)
    same = [where(f) for f in (existing.reduce, existing.advantage, held_whole)] == [
        where(f) for f in (reduce, advantage, whole)]
    if not same or (existing.fast and fast and where(existing.fast) != where(fast)):
        held = existing.fast or existing.reduce or held_whole
        raise ValueError(f"estimator {name!r} is already registered to {held!r}")


class RegisteredEstimator:
    """The callable ``get_estimator`` returns: the checked estimator of one registered name. It
    pickles as that name (``get_estimator(name)`` in the process that loads it), as a module-level
    function would; the closure inside it could not be pickled."""

    def __init__(self, name: str, call: Callable[..., Any], doc: str, module: str, wrapped: Any) -> None:
        self._call = call
        self.__name__ = self.__qualname__ = name
        self.__doc__, self.__module__ = doc, module
        if wrapped is not None:
            self.__wrapped__ = wrapped

    def __call__(self, rewards: Any, group_ids: Any, **given: Any) -> Any:
        return self._call(rewards, group_ids, **given)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return get_estimator, (self.__name__,)

    def __repr__(self) -> str:
        return f"<estimator {self.__name__!r}>"


def _install(name: str, options: list[str], defaults: Mapping[str, Any], fast: Any, whole: Any, doc: str | None,
             module: str, **facts: Any) -> RegisteredEstimator:
    """Build the checked callable and the spec, and register them under ``name``."""
    accepted = tuple(options)
    fast_accepts = frozenset(keyword_options(fast)) if fast is not None else frozenset()
    holder: list[EstimatorSpec] = []

    def estimator(rewards: Any, group_ids: Any, **given: Any) -> Any:
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                             f"accepted: {', '.join(accepted)}")
        if whole is not None:
            return whole(rewards, group_ids, **given)
        if fast is not None and fast_accepts.issuperset(given):
            return fast(rewards, group_ids, **{**{k: defaults[k] for k in fast_accepts}, **given})
        from vpo.estimators.derive import derived_estimate

        return derived_estimate(holder[0], rewards, group_ids, **given)

    text = doc if doc is not None else inspect.getdoc(whole or fast or facts["reduce"]) or ""
    own = whole or fast
    callable_ = RegisteredEstimator(name, estimator, text, getattr(own, "__module__", None) or module, own)
    callable_.options = accepted  # type: ignore[attr-defined]
    _check_name_free(name, facts["reduce"], facts["advantage"], whole, fast)
    spec = EstimatorSpec(name=name, fn=callable_, options=accepted, defaults=MappingProxyType(dict(defaults)),
                         summary=text.split("\n", 1)[0], fast=fast, **facts)
    holder.append(spec)
    callable_.spec = spec  # type: ignore[attr-defined]
    _REGISTRY[name] = spec
    _INCOMPLETE.pop(name, None)
    return callable_


def register_estimator(name: str, *, multi_answer: bool = True, reduce: Callable[..., float] | None = None,
                       advantage: Callable[..., Any] | None = None, weights: str | None = None,
                       conditions_prompt: bool = False, defaults: Mapping[str, Any] | None = None,
                       counts_zero_rows: bool = False, diagnostics: Callable[..., Any] | None = None,
                       doc: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register estimator ``name`` from its two halves, or from one whole-batch function.

    With ``reduce`` (the per-rollout reduction ``reduce(matrix, *, <context>, <options>) ->
    float``; ``vpo.estimators.reductions``) and ``advantage`` (the rule on the scores;
    ``vpo.estimators.rules``) the estimator is registered at once: its batched function is
    derived from them (``vpo.estimators.derive``), its options are theirs (each default declared
    once: in the half's signature or in ``defaults=``) plus the options that build the context
    (``SOURCE_OPTIONS``). ``doc`` is its docstring (the spec's summary is its first line);
    ``diagnostics`` its own per-group diagnostics (``EstimatorSpec.diagnostics``). Speed comes
    from the reduction's batched form (``reductions.batched``), not from a second definition of
    the estimator; used as a decorator with halves, the call still registers the decorated
    ``fast(rewards, group_ids, *, options...)`` as an override for the calls whose options it
    takes (it must take every option but the adapter-injected ones, with the halves' defaults;
    ``check_estimator`` checks that it equals the derived function). Without halves the decorated
    function is the estimator itself, for rules with no per-rollout score (GDPO).

    ``weights`` (``WEIGHT_KEYING``) and ``conditions_prompt`` say how the group's weights are
    drawn; ``counts_zero_rows=True`` exempts the reduction from the zero-row rule (its docstring
    says why). The defaults (multi-answer, no reduction) are the safe ones: an adapter that
    cannot serve a rule says so instead of running it wrongly. A contradiction raises ValueError
    here; registering another estimator under a taken name raises. Halves that leave an option
    without a default register nothing: ``get_spec`` says why.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"estimator name must be a non-empty string, got {name!r}")
    if weights not in WEIGHT_KEYING:
        raise ValueError(f"weights must be one of {WEIGHT_KEYING}, got {weights!r}")
    if (reduce is None) != (advantage is None):
        raise ValueError(f"register_estimator({name!r}): give both reduce and advantage (the batched function is "
                         "derived from them), or neither (a whole-batch estimator such as gdpo)")
    facts = dict(multi_answer=bool(multi_answer), reduce=reduce, advantage=advantage, weights=weights,
                 conditions_prompt=bool(conditions_prompt), counts_zero_rows=bool(counts_zero_rows),
                 diagnostics=diagnostics, doc=doc, module=sys._getframe(1).f_globals.get("__name__", __name__))
    if reduce is None:
        def whole(fn: Callable[..., Any]) -> Callable[..., Any]:
            params = inspect.signature(fn).parameters.values()
            own = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.default is not _EMPTY}
            accepted = keyword_options(fn)
            # the adapters key and prompt by the spec: a function that cannot would train on unkeyed draws
            needed = (["goal_weights"] if conditions_prompt else []) + (["seed"] if weights else []) + (
                ["step"] if weights == "per_step" else [])
            for option in (o for o in needed if o not in accepted):
                why = {"goal_weights": "conditions_prompt=True needs a goal_weights option (the weights the prompts "
                                       "state)",
                       "seed": f"weights={weights!r} needs a seed option (the weights are keyed on seed, group and "
                               "step)",
                       "step": "weights='per_step' needs a step option"}[option]
                raise ValueError(f"register_estimator({name!r}): {why}")
            return _install(name, list(accepted), own, None, fn, **facts)

        return whole
    options, declared = _options_of_halves(name, reduce, advantage, weights, bool(conditions_prompt), defaults)
    _check_name_free(name, reduce, advantage)
    missing = [o for o in options if o not in declared and o not in _SOURCE_NAMES]
    previous = _REGISTRY.get(name)
    if missing:
        _INCOMPLETE[name] = (f"option(s) {', '.join(missing)} have no default; give them in defaults= to "
                             "register_estimator")
    else:
        _install(name, options, _filled(options, declared), None, None, **facts)

    def with_fast_path(fn: Callable[..., Any]) -> Callable[..., Any]:
        filled = dict(declared)
        try:
            _with_fast_path(name, options, filled, fn)
            left = [o for o in options if o not in filled and o not in _SOURCE_NAMES]
            if left:
                raise ValueError(f"register_estimator({name!r}): option(s) {', '.join(left)} have no default; give "
                                 "them in defaults=")
            return _install(name, options, _filled(options, filled), fn, None, **facts)
        except ValueError:  # undo the registration of the halves above
            if previous is None:
                _REGISTRY.pop(name, None)
            else:
                _REGISTRY[name] = previous
            _INCOMPLETE.pop(name, None)
            raise

    return with_fast_path


def _filled(options: list[str], declared: Mapping[str, Any]) -> dict[str, Any]:
    """The declared defaults, the context options' defaults filling the rest (``WeightOptions``, else None)."""
    from vpo.estimators.options import WeightOptions

    def source_default(option: str) -> Any:
        return getattr(WeightOptions, option) if option in ("num_weights", "alpha", "sampler") else None

    return {o: declared[o] if o in declared else source_default(o) for o in options}


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
        if isinstance(name, str) and name in _INCOMPLETE:
            raise ValueError(f"estimator {name!r} is not registered: {_INCOMPLETE[name]}") from None
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(list_estimators())}") from None


def get_estimator(name: str) -> Callable[..., Any]:
    """The registered estimator ``name``; ValueError listing the known names otherwise."""
    return get_spec(name).fn


def list_estimators() -> list[str]:
    """Registered estimator names, sorted (built-in ones and those of ``vpo.estimators`` plugins)."""
    _load_plugins()
    return sorted(_REGISTRY)

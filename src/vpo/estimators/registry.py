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

import functools
import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from vpo.estimators.common import same_value

__all__ = ["INJECTED_OPTIONS", "SOURCE_OPTIONS", "WEIGHT_KEYING", "WEIGHT_OPTIONS", "EstimatorSpec",
           "get_estimator", "get_spec", "list_estimators", "register_estimator"]

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

SOURCE_OPTIONS = {
    "weights": ("num_weights", "alpha", "sampler", "seed", "rng", "step", "weight_keys", "weights"),
    "goal": ("alpha", "sampler", "seed", "rng", "step", "weight_keys"),
    "scalar": ("scalar",),
}
"""The options an estimator gets for each context its reduction names
(``vpo.estimators.reductions.CONTEXT``, written by ``vpo.estimators.context``): how the group's
weights are drawn (K, alpha, sampler, keyed on seed, step and ``weight_keys``, or drawn from
``rng``), or fixed (``weights``); a prompt-conditioning estimator also takes ``goal_weights``,
the weights its prompts state."""

_SOURCE_NAMES = {o for options in SOURCE_OPTIONS.values() for o in options} | {"goal_weights"}
_EMPTY = inspect.Parameter.empty


def keyword_options(fn: Callable) -> tuple[str, ...]:
    """The keyword-only parameter names of a reduction, an advantage rule or an estimator."""
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY)


@dataclass(frozen=True)
class EstimatorSpec:
    """What an adapter needs to know about a registered estimator."""

    name: str
    """Registry name (``--method``, ``algorithm.adv_estimator``, ``estimator=``)."""
    fn: Callable[..., Any] = field(repr=False)
    """The checked estimator ``fn(rewards, group_ids, **options) -> EstimatorResult``: the function
    derived from the halves (or a registered override, ``fast``, for the calls it takes), or, for
    an estimator with no halves, its own function."""
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
    fast: Callable[..., Any] | None = field(default=None, repr=False)
    """An override registered with the halves, ``fast(rewards, group_ids, **options)``, run for
    the calls whose options it takes (``check_estimator`` checks it equals ``derived``); None for
    every built-in estimator: a reduction's batched form is where speed goes."""
    counts_zero_rows: bool = False
    """Its reduction scores an all-zero row as an answer (a mean, a softmax), not as an absent
    one; ``check_estimator`` skips the zero-row rule (``vpo.estimators.reductions``)."""
    diagnostics: Callable[..., Any] | None = field(default=None, repr=False)
    """Per-group diagnostics of the derived function, ``diagnostics(stack, scores (G, N),
    **context) -> {name: (G,)}`` for one D of the batch, reported as ``<estimator>/<name>``
    (their mean over the batch's groups) when the result's diagnostics are read; None: none."""

    @property
    def derived(self) -> Callable[..., Any] | None:
        """The batched function derived from the halves, ``derived(rewards, group_ids,
        **options)`` (``vpo.estimators.derive``); None for an estimator with no halves."""
        if self.reduce is None or self.advantage is None:
            return None
        from vpo.estimators.derive import derived_estimate

        return functools.partial(derived_estimate, self)

    @property
    def default_answers(self) -> int:
        """m when the user gives none: 3 for multi-answer estimators (the paper), else 1."""
        return 3 if self.multi_answer else 1

    @functools.cached_property
    def context(self) -> tuple[str, ...]:
        """The ``reductions.CONTEXT`` entries the reduction names (what an adapter supplies)."""
        from vpo.estimators.reductions import CONTEXT

        return tuple(p for p in keyword_options(self.reduce) if p in CONTEXT) if self.reduce else ()

    @functools.cached_property
    def own_reduction_options(self) -> tuple[str, ...]:
        """The reduction's own keyword options (not its context)."""
        from vpo.estimators.reductions import CONTEXT

        return tuple(p for p in keyword_options(self.reduce) if p not in CONTEXT) if self.reduce else ()

    @functools.cached_property
    def reduction_options(self) -> tuple[str, ...]:
        """User options that act in the per-rollout reduction: the weight options and the
        reduction's own (they go where the score is computed: verl's ``compute_score``)."""
        own = self.own_reduction_options
        return tuple(o for o in self.options if o in WEIGHT_OPTIONS or o in own)

    @functools.cached_property
    def advantage_options(self) -> tuple[str, ...]:
        """User options of the advantage rule (they go where the advantages are computed)."""
        return keyword_options(self.advantage) if self.advantage else ()

    @functools.cached_property
    def injected_options(self) -> tuple[str, ...]:
        """Options of this estimator the adapters set (``INJECTED_OPTIONS``)."""
        return tuple(o for o in self.options if o in INJECTED_OPTIONS)

    @property
    def group_norm(self) -> bool:
        """The advantage is a group z-normalisation of the rollout score, so an engine with only a
        group-norm estimator (OpenRLHF's ``group_norm``, TRL's stock ``GRPOTrainer``) trains it
        from the score alone."""
        from vpo.estimators.rules import group_norm

        return self.reduce is not None and self.advantage is group_norm


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
    sources = [(f"its {role} {rule.__name__}", {p.name: p.default for p in inspect.signature(rule).parameters.values()
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


def _check_name_free(name: str, spec: EstimatorSpec) -> None:
    """ValueError when ``name`` is taken by another estimator (a module reloaded may re-register its own)."""
    existing = _REGISTRY.get(name)
    if existing is None:
        return

    def where(fn: Any) -> Any:
        return getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))

    def own(s: EstimatorSpec) -> Any:  # a whole-batch estimator's function
        return None if s.reduce is not None else getattr(s.fn, "__wrapped__", None)

    same = [where(f) for f in (existing.reduce, existing.advantage, own(existing))] == [
        where(f) for f in (spec.reduce, spec.advantage, own(spec))]
    if not same or (existing.fast and spec.fast and where(existing.fast) != where(spec.fast)):
        held = existing.fast or existing.reduce or own(existing)
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
    spec = EstimatorSpec(name=name, fn=callable_, options=accepted, defaults=MappingProxyType(dict(defaults)),
                         summary=text.split("\n", 1)[0], fast=fast, **facts)
    _check_name_free(name, spec)
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

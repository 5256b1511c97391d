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
weights' ``num_weights``, ``alpha``, ``sampler``, ``seed``, ...; ``SOURCE_OPTIONS``). A fast path
is an optional override registered with the halves (``@register_estimator(...)`` on a function
``fast(rewards, group_ids, *, options...)``); ``check_estimator`` checks that it equals the derived
function. An estimator that needs the whole reward vectors (GDPO) registers a function and no
halves. ``docs/extending.md`` walks through a new estimator end to end.

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
(``vpo.estimators.reductions.CONTEXT``): how the group's weights are drawn (K, alpha, sampler,
keyed on seed, step and ``weight_keys``, or drawn from ``rng``), or fixed (``weights``); a
prompt-conditioning estimator also takes ``goal_weights``, the weights its prompts state."""


def _source_default(option: str) -> Any:
    from vpo.estimators.options import WeightOptions

    return getattr(WeightOptions, option) if option in ("num_weights", "alpha", "sampler") else None


@dataclass(frozen=True)
class EstimatorSpec:
    """What an adapter needs to know about a registered estimator."""

    name: str
    """Registry name (``--method``, ``algorithm.adv_estimator``, ``estimator=``)."""
    fn: Callable[..., Any] = field(repr=False)
    """The checked estimator ``fn(rewards, group_ids, **options) -> EstimatorResult``: the fast
    path when one is registered and takes the call's options, else the derived function (or,
    for an estimator with no halves, its own function)."""
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
    """The registered fast path ``fast(rewards, group_ids, **options)``, run for calls whose
    options it takes (``check_estimator`` checks it equals ``derived``); None: none."""
    counts_zero_rows: bool = False
    """Its reduction scores an all-zero row as an answer (a mean, a softmax), not as an absent
    one; ``check_estimator`` skips the zero-row rule (``vpo.estimators.reductions``)."""

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
        from vpo.estimators.reductions import CONTEXT, reduce_parameters

        return tuple(p for p in reduce_parameters(self.reduce) if p in CONTEXT) if self.reduce else ()

    @functools.cached_property
    def own_reduction_options(self) -> tuple[str, ...]:
        """The reduction's own keyword options (not its context)."""
        from vpo.estimators.reductions import CONTEXT, reduce_parameters

        return tuple(p for p in reduce_parameters(self.reduce) if p not in CONTEXT) if self.reduce else ()

    @functools.cached_property
    def reduction_options(self) -> tuple[str, ...]:
        """User options that act in the per-rollout reduction: the weight options and the
        reduction's own (they go where the score is computed: verl's ``compute_score``)."""
        own = self.own_reduction_options
        return tuple(o for o in self.options if o in WEIGHT_OPTIONS or o in own)

    @functools.cached_property
    def advantage_options(self) -> tuple[str, ...]:
        """User options of the advantage rule (they go where the advantages are computed)."""
        from vpo.estimators.reductions import reduce_parameters

        return reduce_parameters(self.advantage) if self.advantage else ()

    @functools.cached_property
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
_INCOMPLETE: dict[str, str] = {}
"""Names registered with halves that leave an option without a default and no fast path yet:
why ``get_spec`` cannot return them."""
_PLUGINS_LOADED = False
_EMPTY = inspect.Parameter.empty


def _refuse(name: str, reason: str) -> None:
    raise ValueError(f"register_estimator({name!r}): {reason}")


def _keyword_parameters(fn: Callable) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]


def _qualname(fn: Any) -> tuple[Any, Any]:
    return getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))


@dataclass
class _Halves:
    """The options of an estimator derived from its halves, with where each default comes from."""

    options: list[str]
    defaults: dict[str, Any]
    origin: dict[str, str]
    roles: dict[str, str]
    """For the reduction's own and the advantage rule's options: ``"reduce NAME"`` / ``"advantage NAME"``."""

    def add(self, option: str, default: Any, where: str, fail: Callable[[str], None]) -> None:
        if option not in self.options:
            self.options.append(option)
        if default is _EMPTY:
            return
        if option in self.defaults and not same_value(self.defaults[option], default):
            fail(f"option {option!r} defaults to {self.defaults[option]!r} in {self.origin[option]} but "
                 f"{default!r} in {where}")
        self.defaults.setdefault(option, default)
        self.origin.setdefault(option, where)

    @property
    def missing(self) -> list[str]:
        return [o for o in self.options if o not in self.defaults and o not in _SOURCE_NAMES]


_SOURCE_NAMES = {o for options in SOURCE_OPTIONS.values() for o in options} | {"goal_weights"}


def _halves(name: str, reduce: Any, advantage: Any, weights: str | None, conditions_prompt: bool,
            defaults: Mapping[str, Any] | None) -> _Halves:
    """The derived estimator's options and defaults; ValueError when the halves contradict the
    spec or each other (caught at registration, not at the first training step)."""
    from vpo.estimators.reductions import CONTEXT

    fail = functools.partial(_refuse, name)
    for role, rule in (("reduce", reduce), ("advantage", advantage)):
        if not callable(rule):
            fail(f"{role} must be a function, got {type(rule).__name__}")
        params = list(inspect.signature(rule).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != (1 if role == "reduce" else 2):
            fail(f"{role} {rule.__name__} must take {'matrix' if role == 'reduce' else 'scores, group_ids'} "
                 "positionally and its options keyword-only")
    reduce_params = _keyword_parameters(reduce)
    context = [p.name for p in reduce_params if p.name in CONTEXT]
    if "weights" in context and weights is None:
        fail("its reduction takes the group's keyed weights, but weights=None")
    if "goal" in context and weights != "fixed" and not conditions_prompt:
        fail("its reduction takes one weight vector per group (goal): give weights='fixed' or conditions_prompt=True")
    if conditions_prompt and "goal" not in context:
        fail("conditions_prompt=True needs a goal_weights option (the weights the prompts state): its reduction "
             "must take the group's goal")
    if weights is not None and not {"weights", "goal"} & set(context):
        fail(f"weights={weights!r} needs a seed option (the weights are keyed on seed, group and step), but its "
             "reduction takes neither the group's weights nor its goal")

    halves = _Halves([], {}, {}, {})
    if conditions_prompt:
        halves.add("goal_weights", None, "the registry", fail)
    for entry in (e for e in CONTEXT if e in context):
        for option in SOURCE_OPTIONS[entry]:
            halves.add(option, _EMPTY, "", fail)
    for role, rule, params in (("reduce", reduce, reduce_params), ("advantage", advantage,
                                                                   _keyword_parameters(advantage))):
        for p in params:
            if role == "reduce" and p.name in CONTEXT:
                continue
            halves.roles.setdefault(p.name, f"{role} {rule.__name__}")
            halves.add(p.name, p.default, f"its {role} {rule.__name__}", fail)
    for option, value in (defaults or {}).items():
        if option not in halves.options:
            fail(f"defaults names {option!r}, which is not an option of its halves (options: "
                 f"{', '.join(halves.options) or 'none'})")
        halves.add(option, value, "defaults=", fail)
    return halves


def _with_fast(name: str, halves: _Halves, fast: Callable[..., Any]) -> None:
    """Check the fast path ``fast`` against the halves (it must take every option that has an
    effect when absent; it may leave the injected ones to the derived function) and take the
    defaults the halves leave open from its signature."""
    fail = functools.partial(_refuse, name)
    params = _keyword_parameters(fast)
    accepted = [p.name for p in params]
    for option in halves.options:
        if option not in accepted and option not in INJECTED_OPTIONS:
            role = halves.roles.get(option, "reduction context")
            fail(f"{role} takes option {option!r}, which the estimator {fast.__name__} does not accept")
    stray = [o for o in accepted if o not in halves.options]
    if stray:
        fail(f"option(s) {', '.join(stray)} belong to neither its reduction nor its advantage rule, so an engine "
             "with scalar rewards could not pass them")
    for p in params:
        if p.default is _EMPTY:
            continue
        if p.name in halves.defaults and not same_value(halves.defaults[p.name], p.default):
            fail(f"option {p.name!r} defaults to {p.default!r} in the estimator but {halves.defaults[p.name]!r} in "
                 f"{halves.origin[p.name]}")
        halves.defaults.setdefault(p.name, p.default)
        halves.origin.setdefault(p.name, f"the estimator {fast.__name__}")


def _check_whole(name: str, accepted: tuple[str, ...], weights: str | None, conditions_prompt: bool) -> None:
    """ValueError when a whole-batch estimator's signature lacks what its spec says it keys on."""
    fail = functools.partial(_refuse, name)
    if conditions_prompt and "goal_weights" not in accepted:
        fail("conditions_prompt=True needs a goal_weights option (the weights the prompts state)")
    if weights is not None and "seed" not in accepted:
        fail(f"weights={weights!r} needs a seed option (the weights are keyed on seed, group and step)")
    if weights == "per_step" and "step" not in accepted:
        fail("weights='per_step' needs a step option")


def _check_name_free(name: str, reduce: Any, advantage: Any, fn: Any) -> None:
    """ValueError when ``name`` is taken by another estimator (a reload may re-register the same one)."""
    existing = _REGISTRY.get(name)
    if existing is None:
        return
    if existing.reduce is not None and existing.advantage is not None:
        same = (reduce is not None and (_qualname(existing.reduce), _qualname(existing.advantage)) ==
                (_qualname(reduce), _qualname(advantage)))
        same = same and (fn is None or existing.fast is None or _qualname(existing.fast) == _qualname(fn))
        held = existing.fast or existing.reduce
    else:
        held = getattr(existing.fn, "__wrapped__", existing.fn)
        same = reduce is None and fn is not None and _qualname(held) == _qualname(fn)
    if not same:
        raise ValueError(f"estimator {name!r} is already registered to {held!r}")


class RegisteredEstimator:
    """The callable ``get_estimator`` returns: the checked estimator of one registered name. It
    pickles as that name (``get_estimator(name)`` in the process that loads it), as a module-level
    function would; the closure inside it could not be pickled."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def __call__(self, rewards: Any, group_ids: Any, **given: Any) -> Any:
        return self._call(rewards, group_ids, **given)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return get_estimator, (self.__name__,)

    def __repr__(self) -> str:
        return f"<estimator {self.__name__!r}>"


def _install(name: str, *, multi_answer: bool, reduce: Any, advantage: Any, weights: str | None,
             conditions_prompt: bool, options: tuple[str, ...], defaults: Mapping[str, Any], fast: Any,
             whole: Any, doc: str | None, counts_zero_rows: bool, module: str) -> Callable[..., Any]:
    """Build the checked callable and the spec, and register them under ``name``."""
    accepted = tuple(options)
    fast_accepts = frozenset(p.name for p in _keyword_parameters(fast)) if fast is not None else frozenset()
    holder: dict[str, EstimatorSpec] = {}

    def estimator(rewards: Any, group_ids: Any, **given: Any) -> Any:
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
                             f"accepted: {', '.join(accepted)}")
        spec = holder["spec"]
        if whole is not None:
            return whole(rewards, group_ids, **given)
        if fast is not None and fast_accepts.issuperset(given):
            return fast(rewards, group_ids, **{**{k: spec.defaults[k] for k in fast_accepts}, **given})
        from vpo.estimators.derive import derived_estimate

        return derived_estimate(spec, rewards, group_ids, **given)

    text = doc if doc is not None else inspect.getdoc(whole or fast or reduce) or ""
    estimator = RegisteredEstimator(estimator)
    estimator.__name__ = estimator.__qualname__ = name
    estimator.__module__ = getattr(whole or fast, "__module__", None) or module
    estimator.__doc__ = text
    if whole is not None or fast is not None:
        estimator.__wrapped__ = whole or fast  # type: ignore[attr-defined]
    estimator.options = accepted  # type: ignore[attr-defined]
    spec = EstimatorSpec(
        name=name, fn=estimator, multi_answer=bool(multi_answer), reduce=reduce, advantage=advantage,
        weights=weights, conditions_prompt=bool(conditions_prompt), options=accepted,
        defaults=MappingProxyType(dict(defaults)), summary=text.split("\n", 1)[0], fast=fast,
        counts_zero_rows=bool(counts_zero_rows))
    holder["spec"] = spec
    estimator.spec = spec  # type: ignore[attr-defined]
    _REGISTRY[name] = spec
    _INCOMPLETE.pop(name, None)
    return estimator


def register_estimator(name: str, *, multi_answer: bool = True, reduce: Callable[..., float] | None = None,
                       advantage: Callable[..., Any] | None = None, weights: str | None = None,
                       conditions_prompt: bool = False, defaults: Mapping[str, Any] | None = None,
                       counts_zero_rows: bool = False, doc: str | None = None
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register estimator ``name`` from its two halves, or from one whole-batch function.

    With ``reduce`` (the per-rollout reduction ``reduce(matrix, *, <context>, <options>) ->
    float``; ``vpo.estimators.reductions``) and ``advantage`` (the rule on the scores;
    ``vpo.estimators.rules``) the estimator is registered at once: its batched function is
    derived from them (``vpo.estimators.derive``), its options are theirs (each default declared
    once: in the half's signature or in ``defaults=``) plus the options that build the context
    (``SOURCE_OPTIONS``). ``doc`` is its docstring (the spec's summary is its first line).

    Used as a decorator the call also registers the decorated ``fast(rewards, group_ids, *,
    options...)`` as the estimator's fast path: it runs for the calls whose options it takes,
    is checked against the halves here (it takes every option except the adapter-injected ones,
    with the same defaults; a default the halves leave open is taken from it) and against the
    derived function by ``check_estimator``. Without halves the decorated function is the
    estimator itself, for rules with no per-rollout score (GDPO).

    ``weights`` (``WEIGHT_KEYING``) and ``conditions_prompt`` say how the group's weights are
    drawn; ``counts_zero_rows=True`` exempts the reduction from the zero-row rule (its docstring
    says why). The defaults (multi-answer, no reduction) are the safe ones: an adapter that
    cannot serve a rule says so instead of running it wrongly. A contradiction raises ValueError
    here; registering another estimator under a taken name raises. Halves that leave an option
    without a default, with no fast path to state it, register nothing: ``get_spec`` says why.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"estimator name must be a non-empty string, got {name!r}")
    if weights not in WEIGHT_KEYING:
        raise ValueError(f"weights must be one of {WEIGHT_KEYING}, got {weights!r}")
    if (reduce is None) != (advantage is None):
        raise ValueError(f"register_estimator({name!r}): give both reduce and advantage (the batched function is "
                         "derived from them), or neither (a whole-batch estimator such as gdpo)")
    # the registering module names the estimator's callable (as namedtuple names its classes)
    module = sys._getframe(1).f_globals.get("__name__", __name__)
    facts = dict(multi_answer=multi_answer, reduce=reduce, advantage=advantage, weights=weights,
                 conditions_prompt=conditions_prompt, doc=doc, counts_zero_rows=counts_zero_rows, module=module)
    halves, previous = None, _REGISTRY.get(name)
    if reduce is not None:
        halves = _halves(name, reduce, advantage, weights, bool(conditions_prompt), defaults)
        _check_name_free(name, reduce, advantage, None)
        if halves.missing:
            _INCOMPLETE[name] = (f"option(s) {', '.join(halves.missing)} have no default; give them in defaults= "
                                 "to register_estimator")
        else:
            _install(name, options=tuple(halves.options), defaults=_filled(halves), fast=None, whole=None, **facts)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if halves is None:
            params = _keyword_parameters(fn)
            accepted = tuple(p.name for p in params)
            _check_whole(name, accepted, weights, bool(conditions_prompt))
            _check_name_free(name, None, None, fn)
            own = {p.name: p.default for p in params if p.default is not _EMPTY}
            return _install(name, options=accepted, defaults=own, fast=None, whole=fn, **facts)
        try:
            _check_name_free(name, reduce, advantage, fn)
            _with_fast(name, halves, fn)
            if halves.missing:
                _refuse(name, f"option(s) {', '.join(halves.missing)} have no default; give them in defaults=")
        except ValueError:  # undo the registration of the halves above
            if previous is None:
                _REGISTRY.pop(name, None)
            else:
                _REGISTRY[name] = previous
            _INCOMPLETE.pop(name, None)
            raise
        return _install(name, options=tuple(halves.options), defaults=_filled(halves), fast=fn, whole=None, **facts)

    return decorator


def _filled(halves: _Halves) -> dict[str, Any]:
    """The halves' defaults, the context options' defaults filling the rest (``WeightOptions``, else None)."""
    return {o: halves.defaults[o] if o in halves.defaults else _source_default(o) for o in halves.options}


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

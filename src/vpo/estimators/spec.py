"""What an adapter reads about a registered estimator: its ``EstimatorSpec``, and the option
groups every spec sorts its options into.

Usage::

    from vpo.estimators import get_spec
    spec = get_spec("vpo")
    spec.reduce, spec.advantage, spec.weights      # its two halves, and how its weights are keyed
    spec.reduction_options, spec.advantage_options # where each option acts (verl: reward_kwargs / vpo_options)
    spec.injected_options                          # what the adapters set themselves

The registry (``registry.register_estimator``) builds the specs; adapters only read them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INJECTED_OPTIONS", "SOURCE_OPTIONS", "WEIGHT_KEYING", "WEIGHT_OPTIONS", "EstimatorSpec", "keyword_options"]

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

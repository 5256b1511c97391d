"""Advantage estimators: VPO and its baselines behind one registry, engine-exact normalisation.

Usage::

    from vpo.estimators import get_estimator, get_spec, list_estimators
    result = get_estimator("vpo")(rewards, group_ids, seed=0, step=3)
    result.advantages      # (B,) float64, one per rollout (it multiplies all its tokens)
    result.scores          # (B,) per-rollout scalar before normalisation (VPO: R_g)
    result.diagnostics     # {"vpo/group_std": ..., "vpo/frac_zero_std": ..., ...}
    get_spec("grpo").multi_answer    # False: what the adapters read about an estimator

Shape glossary: B rollouts, G groups, N rollouts per group, M answers per chain (m),
D objectives, K weights.

Every estimator is called ``est(rewards, group_ids, **options)``: ``rewards`` is a list of B
reward matrices (m_i, D) (or one (B, M, D) array), ``group_ids`` (B,) hashable labels (a
group is a prompt; its rollouts need not be contiguous). Options are keyword-only and
checked: an unknown or inapplicable option raises ValueError naming it.

Built-in estimators (``docs/algorithm.md`` §1-2 has the formulas):

==================== ========================================================== ==========================
name                 per-rollout score                                          advantage default
==================== ========================================================== ==========================
``vpo``              R = mean_k max_i w_k . r_i, K weights per group             population std, eps 1e-6, 0 if std < eps
``grpo``             fixed scalar of the single answer                           verl: Bessel std, eps 1e-6
``multi_rlvr``       sum of the fixed scalar over the (deduplicated, padded) rows as grpo
``max_at_k``         Bagirov et al. unbiased E[max of k-subset] gradient weights  as grpo, one-member group 0
``gdpo``             z-norm each objective in the group, sum, whiten the batch   verl gdpo
``maxrl``            (r - mean) / (mean + eps) of the fixed scalar               one-member group 0
``random_weight``    w . r of the single answer, one w ~ Dir(alpha) per group    as grpo
``goal_conditioned`` as random_weight, with w written into the prompt            as grpo
==================== ========================================================== ==========================

An estimator is its two halves: its per-rollout reduction (``reductions``: how one rollout's
(m, D) matrix becomes its score) and its advantage rule on those scores (``rules``).
``register_estimator`` derives the batched function from them (``derive``: the reduction's
batched form over each D of the batch, then the rule); VPO is one such derivation, like every
baseline. A group's context (its keyed weights, its goal, the task's scalar) has one writer,
``context.group_context``, which the derived function and every engine ask. GDPO, which has no
per-rollout score, is one whole-batch function. Engines with one scalar reward per rollout
(verl, OpenRLHF, TRL's stock trainer) call the two halves through ``reduction_context``,
``rollout_score`` and ``advantages_from_scores``. ``check.check_estimator`` checks an estimator
against the contract.

Modules: ``registry`` (registration and look-up), ``spec`` (what an adapter reads),
``reductions``, ``rules``, ``derive``, ``context`` (the group context: keyed weights, goal,
scalar), ``check``, ``options`` (the knobs and engine presets), ``normalize``, ``vpo`` (with
``vpo_reference``, a plain loop), ``baselines``.
"""

from __future__ import annotations

from vpo.estimators.common import ZERO_STD, EstimatorResult
from vpo.estimators.context import group_context
from vpo.estimators.normalize import group_normalize
from vpo.estimators.options import (GRPO_NORM, OPENRLHF_NORM, TRL_NORM, VPO_NORM, NormOptions,
                                    WeightOptions)
from vpo.estimators.reductions import (CONTEXT, batched, fixed_scalar, reduction_context, rollout_score,
                                       scalar_sum, set_score, weighted)
from vpo.estimators.registry import (INJECTED_OPTIONS, SOURCE_OPTIONS, WEIGHT_OPTIONS, EstimatorSpec, get_estimator,
                                     get_spec, list_estimators, register_estimator)
from vpo.estimators.rules import advantages_from_scores, group_norm, max_at_k_rule, max_at_k_weights, maxrl_rule
from vpo.estimators.vpo import vpo_reference

__all__ = [
    "CONTEXT",
    "EstimatorResult",
    "EstimatorSpec",
    "GRPO_NORM",
    "INJECTED_OPTIONS",
    "NormOptions",
    "OPENRLHF_NORM",
    "SOURCE_OPTIONS",
    "TRL_NORM",
    "VPO_NORM",
    "WEIGHT_OPTIONS",
    "WeightOptions",
    "ZERO_STD",
    "advantages_from_scores",
    "batched",
    "fixed_scalar",
    "get_estimator",
    "group_context",
    "get_spec",
    "group_norm",
    "group_normalize",
    "list_estimators",
    "max_at_k_rule",
    "max_at_k_weights",
    "maxrl_rule",
    "reduction_context",
    "register_estimator",
    "rollout_score",
    "scalar_sum",
    "set_score",
    "vpo_reference",
    "weighted",
]

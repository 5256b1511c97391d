"""verl 0.9.1 adapter: a ``compute_score`` for verl's reward loop and advantage estimators.

Usage (verl command line; ``recipes/verl/run.sh`` writes all of it)::

    vpo data export maze --format verl --answers 3 --out data/maze
    python -m verl.trainer.main_ppo ... \\
        data.train_files=data/maze/train.parquet \\
        reward.custom_reward_function.path=pkg://vpo.integrations.verl \\
        reward.custom_reward_function.name=compute_score \\
        +reward.custom_reward_function.reward_kwargs.method=vpo \\
        algorithm.adv_estimator=vpo

(``vpo`` as an estimator name comes from the ``vpo.integrations.verl_plugin`` entry point.)

Why two halves. In verl's default (v1) trainer an advantage estimator sees only
``token_level_rewards`` (one scalar per rollout at its last token), the response mask, the
group ids (``uid``) and ``config.algorithm``; the reward vectors never reach it. So all the
vector work happens in :func:`compute_score` (one rollout at a time, in a reward worker),
which reduces the rollout's (m, D) reward matrix to the method's per-rollout scalar; the
registered estimator then turns those scalars into advantages with the method's rule.

Reward methods (``reward_kwargs.method``) are the registered estimators (``vpo.estimators``)
that register a per-rollout reduction (``EstimatorSpec.reduce``); compute_score scores the
rollout with the one rollout scorer (``vpo.integrations.rollout_scorer.score_rollout``, which
OpenRLHF's reward function and TRL's stock rewards call too), whose score is that reduction on
the rollout's (m, D) matrix: the estimator's own ``scores`` entry for that rollout:

================ ====== ===================================================== =================
method           m      per-rollout score (its reduction)                     adv_estimator
================ ====== ===================================================== =================
vpo              any    ``set_score``: R = (1/K) sum_k max_i w_k . r_i, K      vpo
                        weights ~ Dir(alpha) shared by the prompt's group
multi_rlvr       any    ``scalar_sum``: the task's fixed scalar summed over    multi_rlvr (or grpo)
                        the deduplicated, zero-padded answers
grpo             1      ``fixed_scalar``: the task's fixed scalar              grpo (verl's own)
max_at_k         1      ``fixed_scalar``                                       max_at_k
maxrl            1      ``fixed_scalar``                                       maxrl
random_weight    1      ``weighted``: w . r, one keyed w per prompt            random_weight (or grpo)
goal_conditioned 1      ``weighted`` with the w the prompt states              goal_conditioned (or grpo)
================ ====== ===================================================== =================

GDPO registers no reduction (it needs the per-objective rewards), so compute_score refuses it
as a method. verl runs it with its own ``gdpo`` estimator on compute_score's per-objective
fields: ``algorithm.adv_estimator=gdpo`` and ``+algorithm.gdpo_reward_keys=[best_<name>, ...]``
(any reward method; the ``best_<name>`` fields are the per-objective maxima over the answers,
the rollout vector ``vpo.estimators`` gdpo uses). verl passes that estimator the response
lengths, so its whitening is token-weighted, equal to ``get_estimator("gdpo")(...,
response_lengths=...)``. TRL passes no lengths (per-rollout whitening, as TRL's own
``normalize_then_sum``); OpenRLHF cannot run GDPO (one scalar reward per sample).

Advantage estimators: every reward method with an advantage rule (``EstimatorSpec.advantage``)
except verl's own ``grpo`` is registered in verl under its name (multi-turn rollouts need verl's
``grpo``, the only one that gets the per-session broadcast). Each takes the per-rollout score
``token_level_rewards.sum(-1)``, groups it by ``uid`` and applies the estimator's rule
(``vpo.estimators.advantages_from_scores``) without running the estimator again, so the
advantages equal ``get_estimator(...)`` on the rollouts' own reward matrices with the same weights.

Options split in two (``EstimatorSpec.reduction_options`` and ``.advantage_options``): the
weight options (``num_weights``, ``alpha``, ``sampler``, ``seed``) and a reduction's own options
go in ``reward.custom_reward_function.reward_kwargs``; the advantage rule's (``std``, ``eps``,
``degenerate``, ``scale``; ``k`` for ``max_at_k``) in ``+algorithm.vpo_options.NAME=VALUE``. An
option on the wrong side, or one the estimator does not take, raises naming it.
``algorithm.norm_adv_by_std_in_grpo=false`` is rejected by these estimators rather than
ignored (use ``+algorithm.vpo_options.scale=none`` for centring without division).

Shared weights. verl passes no uid and no step to ``compute_score``; the weights of a prompt
are ``vpo.weights.group_weights([extra_info["example_id"]], K, D, seed=seed, step=step)`` (through
``vpo.estimators.reduction_context``, the one writer of a group's context), the project's one
keying (the key TRL and OpenRLHF use too; data exported without ``example_id``
falls back to ``extra_info["index"]``), so all N rollouts of a prompt use the same K weights
(common random numbers, docs/algorithm.md §1). ``step`` is ``extra_info["global_steps"]`` when
the data carries it (a custom dataset or reward manager can add it); verl 0.9.1's reward loop does
not, and then the step is ``FIXED``: a prompt keeps its K weights for the whole run (a fixed bank
of K draws per prompt). ``docs/algorithm.md`` lists this as a deviation.

Input checks (a misconfigured run fails on its first reward call, naming the option, instead
of training on wrong rewards): unknown task in ``data_source``; ``extra_info`` without
``example_id`` and ``index``, or without ``answers``; ``reward_kwargs.m`` different from the prompt's ``answers``; a
single-answer method on an m-answer prompt; an unknown ``reward_kwargs`` option.

Diagnostics that cost a draw run only when asked for: ``set_score`` (VPO's set score with the
prompt's weights) is returned for ``method=vpo`` (it is the score) and, for the other methods,
with ``+reward.custom_reward_function.reward_kwargs.set_score=true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.options import WeightOptions
from vpo.integrations.rollout_scorer import group_key, reward_methods, score_rollout
from vpo.reward_failures import RewardFailurePolicy
from vpo.weights import FIXED, given_key

__all__ = [
    "VERL_ESTIMATORS",
    "VERL_OWN",
    "compute_score",
    "reward_methods",
    "row_key",
    "score_rollout",
    "verl_estimators",
]


# --------------------------------------------------------------------------------------
# Reward side
# --------------------------------------------------------------------------------------

VERL_OWN = ("grpo", "gdpo")
"""verl's own estimator names: used as they are, never registered by vpo."""


# Keyword arguments some verl reward managers add at call time; accepted and ignored.
_ENGINE_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


def _load_json(value: Any, what: str) -> Any:
    """``value`` itself when already decoded, else ``json.loads(value)`` with a named error."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{what} is not valid JSON ({err.msg} at char {err.pos}); "
                             f"it starts {value[:80]!r}") from None
    if isinstance(value, Mapping):
        return _plain(value)
    return value


def _plain(value: Any) -> Any:
    """Mappings (incl. OmegaConf DictConfig) and sequences as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):  # incl. OmegaConf ListConfig
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def row_key(extra_info: Mapping[str, Any]) -> int | str:
    """The group key of an exported row: its ``example_id`` (the key every engine uses), or its
    ``index`` for data exported without one."""
    key = given_key(extra_info.get("example_id"))
    return group_key(extra_info["index"] if key is None else key)


def _keyed_weights(key: Any, dim: int, *, num_weights: int = WeightOptions.num_weights,
                   alpha: float = WeightOptions.alpha, sampler: str = WeightOptions.sampler,
                   seed: int = WeightOptions.seed, step: Any = FIXED) -> np.ndarray:
    """The (K, D) weights of the prompt with group ``key`` at ``step``: ``vpo.weights.group_weights``."""
    from vpo.weights import group_weights as keyed

    return keyed([group_key(key)], int(num_weights), int(dim), seed=int(seed), step=step, alpha=float(alpha),
                 sampler=sampler)[0]


def __getattr__(name: str) -> Any:
    """``group_weights``: the earlier name of a prompt's keyed weights here (dated deprecation)."""
    if name == "group_weights":
        from vpo.deprecation import deprecated

        return deprecated(_keyed_weights, "vpo.integrations.verl.group_weights",
                          "vpo.weights.group_weights([key], K, D, seed=seed, step=step)[0]")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  *, method: str = "vpo", m: int | None = None, num_weights: int = WeightOptions.num_weights,
                  alpha: float = WeightOptions.alpha, sampler: str = WeightOptions.sampler,
                  seed: int = WeightOptions.seed, task_params: Mapping[str, Any] | str | None = None,
                  max_failure_rate: float | None = None, failure_window: int | None = None,
                  time_limit: float | None = None, set_score: bool | None = None,
                  **engine_kwargs: Any) -> dict[str, Any]:
    """verl's reward function for every vpo task: one rollout in, a flat dict out.

    Arguments from verl (``naive`` reward manager, one sample per call): ``data_source`` (the
    task name), ``solution_str`` (the response only, special tokens skipped),
    ``ground_truth`` (JSON string of the task example) and ``extra_info`` (``index``,
    ``answers`` = m, ``task_params`` JSON string; ``split`` and ``task`` optional), all as
    written by ``vpo data export TASK --format verl``.

    Options (``reward.custom_reward_function.reward_kwargs``; they override call kwargs):
    ``method`` (see the module table, default ``vpo``), ``m`` (optional; must equal the
    prompt's ``extra_info.answers``), ``num_weights`` K (100), ``alpha`` (1.0), ``sampler``
    (``iid`` | ``sobol``), ``seed`` (0), ``task_params`` (dict overriding the exported ones), and
    the reward failure policy of the task's scorers (``vpo.reward_failures.RewardFailurePolicy``;
    unset: its defaults, or what an ``own_rewards`` export recorded): ``max_failure_rate`` (0.5),
    ``failure_window`` (256 calls: verl passes no step unless the data carries
    ``extra_info.global_steps``, so the rate is checked over each window) and ``time_limit``
    (seconds per scoring call; none by default: math-verify and the sandbox have their own), and
    ``set_score`` (true: log VPO's set score for every method, a draw of K weights per rollout;
    by default only ``method=vpo`` returns it, as its score).

    Returns ``score_rollout``'s dict; ``score`` is what verl puts at the last response token.
    """
    spec = reward_methods().get(method)
    own = sorted(set(spec.reduction_options) - {"num_weights", "alpha", "sampler", "seed"}) if spec else []
    unknown = set(engine_kwargs) - _ENGINE_KWARGS - set(own)
    if unknown:
        advantage_side = sorted(unknown & set(spec.advantage_options)) if spec else []
        if advantage_side:
            raise ValueError(f"reward_kwargs {advantage_side} are options of {method!r}'s advantage rule; set "
                             f"+algorithm.vpo_options.{advantage_side[0]} instead")
        raise ValueError(f"unknown reward_kwargs option(s) {', '.join(sorted(unknown))}; known: method, m, "
                         "num_weights, alpha, sampler, seed, task_params, max_failure_rate, failure_window, "
                         f"time_limit, set_score{''.join(', ' + o for o in own)}")
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"data_source must be a vpo task name, got {data_source!r}")
    if not isinstance(extra_info, Mapping):
        raise ValueError(f"extra_info must be a mapping with index and answers (vpo data export), got "
                         f"{type(extra_info).__name__}")
    if given_key(extra_info.get("example_id")) is None and extra_info.get("index") is None:
        raise ValueError("extra_info.example_id (and extra_info.index) is missing: the prompt's weights are keyed on "
                         "it; export the data with `vpo data export TASK --format verl`")
    prompt_m = extra_info.get("answers")
    if prompt_m is None:
        if m is None:
            raise ValueError("extra_info.answers (m of the prompt) is missing and reward_kwargs.m is not set")
        prompt_m = m
    if isinstance(prompt_m, np.generic):
        prompt_m = prompt_m.item()
    if m is not None and int(m) != prompt_m:
        raise ValueError(f"reward_kwargs.m={m} but the prompt asks for extra_info.answers={prompt_m} answers; "
                         "re-export the data or fix reward_kwargs.m")
    exported_task = extra_info.get("task")
    if exported_task not in (None, data_source):
        raise ValueError(f"data_source={data_source!r} but extra_info.task={exported_task!r}")

    params = _load_json(extra_info.get("task_params") or {}, "extra_info.task_params")
    if not isinstance(params, Mapping):
        raise ValueError(f"extra_info.task_params must be a JSON object, got {type(params).__name__}")
    override = _load_json(task_params or {}, "reward_kwargs.task_params")
    if not isinstance(override, Mapping):
        raise ValueError(f"reward_kwargs.task_params must be a mapping, got {type(override).__name__}")
    params = {**params, **override}

    example = _load_json(ground_truth, "reward_model.ground_truth")
    if not isinstance(example, Mapping):
        raise ValueError(f"reward_model.ground_truth must be the JSON of a task example (an object), got "
                         f"{type(example).__name__}")
    step = extra_info.get("global_steps")
    step = FIXED if step is None else int(step.item() if isinstance(step, np.generic) else step)
    policy = None
    if (max_failure_rate, failure_window, time_limit) != (None, None, None):
        defaults = RewardFailurePolicy()
        try:
            policy = RewardFailurePolicy(
                max_failure_rate=defaults.max_failure_rate if max_failure_rate is None else max_failure_rate,
                window=defaults.window if failure_window is None else failure_window, time_limit=time_limit)
        except ValueError as err:
            raise ValueError(f"reward_kwargs: {err}") from None
    return score_rollout(data_source, solution_str, example, m=prompt_m, key=row_key(extra_info), method=method,
                         num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed, step=step,
                         task_params=params, options={k: engine_kwargs[k] for k in own if k in engine_kwargs},
                         failure_policy=policy, set_score=set_score)


# --------------------------------------------------------------------------------------
# Advantage side (registered in verl by vpo.integrations.verl_plugin)
# --------------------------------------------------------------------------------------

def _config_get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        return config.get(key, default)
    return getattr(config, key, default)


def _scalar_advantage(name: str, token_level_rewards, response_mask, config, index):
    """Shared body of the registered estimators: the estimator's advantage rule on the per-rollout
    scores compute_score returned (its reduction), grouped by uid -> (bs, L)."""
    import torch

    from vpo.estimators import advantages_from_scores, get_spec

    if index is None:
        raise ValueError(f"advantage estimator {name!r} needs the group ids (verl's non_tensor_batch['uid'])")
    if _config_get(config, "norm_adv_by_std_in_grpo", True) is False:
        raise ValueError(f"algorithm.norm_adv_by_std_in_grpo=false is not supported by advantage estimator {name!r}; "
                         "use algorithm.adv_estimator=grpo for unscaled advantages")
    spec = get_spec(name)
    user = _config_get(config, "vpo_options", None)
    options: dict[str, Any] = {}
    if user is not None:
        if not isinstance(user, Mapping):
            raise ValueError(f"algorithm.vpo_options must be a mapping of estimator options, got {type(user).__name__}")
        options = _plain(user)
        misplaced = sorted(set(options) & set(spec.reduction_options))
        if misplaced:
            raise ValueError(f"algorithm.vpo_options {misplaced} do nothing in advantage estimator {name!r}: they act "
                             "in the per-rollout score; set reward.custom_reward_function.reward_kwargs."
                             f"{misplaced[0]} instead")
        injected = sorted(set(options) & set(spec.injected_options))
        if injected:
            raise ValueError(f"algorithm.vpo_options {injected} are set by the adapter, not by the user")
    scores = token_level_rewards.detach().sum(dim=-1).to(torch.float64).cpu().numpy()
    group_ids = [g.item() if isinstance(g, np.generic) else g for g in index]
    if len(group_ids) != len(scores):
        raise ValueError(f"advantage estimator {name!r}: {len(group_ids)} group ids for {len(scores)} rollouts")
    try:
        values = advantages_from_scores(spec, scores, group_ids, **options)
    except ValueError as err:
        if user:
            raise ValueError(f"advantage estimator {name!r} with algorithm.vpo_options={dict(_plain(user))}: "
                             f"{err}") from None
        raise
    adv = torch.as_tensor(values, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
    advantages = adv.unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    return advantages, advantages.clone()


def _verl_estimator(name: str):
    """verl's form of the registered estimator ``name`` (``(advantages, returns)``, both (bs, L))."""

    def estimator(token_level_rewards, response_mask, config=None, index=None, reward_baselines=None,
                  non_tensor_batch=None, **kwargs):
        return _scalar_advantage(name, token_level_rewards, response_mask, config, index)

    estimator.__name__ = estimator.__qualname__ = f"{name}_advantage"
    estimator.__doc__ = (f"verl estimator ``{name}``: the advantage rule of ``vpo.estimators`` {name!r} on the "
                         "per-rollout scores grouped by uid (``+algorithm.vpo_options.NAME`` passes its options). "
                         "``non_tensor_batch`` is accepted (newer verl passes it) and unused.")
    return estimator


VERL_ESTIMATORS: dict[str, Any] = {}
"""Names registered in verl's ``ADV_ESTIMATOR_REGISTRY`` by the plugin (all lowercase)."""


def verl_estimators() -> dict[str, Any]:
    """``VERL_ESTIMATORS`` with an entry for every registered estimator verl can run (a per-rollout
    reduction and an advantage rule, not one of ``VERL_OWN``); estimators registered since the last
    call are added."""
    for name, spec in reward_methods().items():
        if spec.advantage is not None and name not in VERL_OWN and name not in VERL_ESTIMATORS:
            if name != name.lower():
                raise ValueError(f"estimator {name!r}: verl lower-cases plugin names; register it in lower case")
            VERL_ESTIMATORS[name] = _verl_estimator(name)
    return VERL_ESTIMATORS


verl_estimators()

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
that register a per-rollout reduction (``EstimatorSpec.reduce``); compute_score calls that
reduction (``vpo.estimators.rollout_score``) on the rollout's (m, D) matrix, so the score is
the estimator's own ``scores`` entry for that rollout:

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
are ``vpo.weights.group_weights([extra_info["example_id"]], K, D, seed=seed, step=step)``, the
project's one keying (the key TRL and OpenRLHF use too; data exported without ``example_id``
falls back to ``extra_info["index"]``), so all N rollouts of a prompt use the same K weights
(common random numbers, docs/algorithm.md §1). ``step`` is ``extra_info["global_steps"]`` when
the data carries it (a custom dataset or reward manager can add it); verl 0.9.1's reward loop does
not, and then the step is ``FIXED``: a prompt keeps its K weights for the whole run (a fixed bank
of K draws per prompt). ``docs/algorithm.md`` lists this as a deviation.

Input checks (a misconfigured run fails on its first reward call, naming the option, instead
of training on wrong rewards): unknown task in ``data_source``; ``extra_info`` without
``example_id`` and ``index``, or without ``answers``; ``reward_kwargs.m`` different from the prompt's ``answers``; a
single-answer method on an m-answer prompt; an unknown ``reward_kwargs`` option.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from vpo.estimators.options import WeightOptions
from vpo.reward_failures import FAILURE_METRIC, RewardFailurePolicy
from vpo.weights import FIXED, given_key

__all__ = [
    "VERL_ESTIMATORS",
    "VERL_OWN",
    "compute_score",
    "group_weights",
    "reward_methods",
    "score_rollout",
    "verl_estimators",
]


# --------------------------------------------------------------------------------------
# Reward side
# --------------------------------------------------------------------------------------

VERL_OWN = ("grpo", "gdpo")
"""verl's own estimator names: used as they are, never registered by vpo."""


def reward_methods() -> dict[str, Any]:
    """The registered estimators compute_score can score for (those with a per-rollout
    reduction): name -> ``EstimatorSpec``."""
    from vpo.estimators import get_spec, list_estimators

    return {name: get_spec(name) for name in list_estimators() if get_spec(name).reduce is not None}


# Keyword arguments some verl reward managers add at call time; accepted and ignored.
_ENGINE_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})

_TASK_CACHE: dict[tuple[str, str], Any] = {}
_TASK_LOCK = threading.Lock()


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


def _get_task(name: str, params: Mapping[str, Any], policy: Any = None):
    """The task ``name`` with ``params`` (and its scorers under the reward failure ``policy``, when
    given), built once per process (compute_score runs in threads)."""
    from vpo.tasks import get_task, list_tasks

    key = (name, json.dumps(params, sort_keys=True, default=str), repr(policy))
    task = _TASK_CACHE.get(key)
    if task is not None:
        return task
    with _TASK_LOCK:
        task = _TASK_CACHE.get(key)
        if task is None:
            try:
                task = get_task(name, **params)
            except ValueError as err:
                if name not in list_tasks():
                    raise ValueError(f"data_source {name!r} is not a vpo task (known: {', '.join(list_tasks())}); "
                                     "export the data with `vpo data export TASK --format verl`") from None
                raise ValueError(f"task {name!r} rejected extra_info.task_params {dict(params)}: {err}") from None
            except TypeError as err:
                raise ValueError(f"task {name!r} rejected extra_info.task_params {dict(params)}: {err}") from None
            if policy is not None:
                task.failures = task.failures.with_policy(policy)
            _TASK_CACHE[key] = task
    return task


def _group_key(key: Any) -> int | str:
    """The prompt's group key as a plain int or str (numpy scalars hash like Python ones)."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise ValueError(f"the group key (extra_info.example_id) must be a str or an int, got "
                         f"{type(key).__name__} {key!r}")
    return key


def row_key(extra_info: Mapping[str, Any]) -> int | str:
    """The group key of an exported row: its ``example_id`` (the key every engine uses), or its
    ``index`` for data exported without one."""
    key = given_key(extra_info.get("example_id"))
    return _group_key(extra_info["index"] if key is None else key)


@lru_cache(maxsize=8192)
def _cached_weights(seed: int, key: int | str, step: Any, dim: int, num_weights: int, alpha: float,
                    sampler: str) -> np.ndarray:
    from vpo.weights import group_weights as keyed

    weights = np.asarray(keyed([key], num_weights, dim, seed=seed, step=step, alpha=alpha, sampler=sampler)[0],
                         dtype=np.float64)
    weights.setflags(write=False)
    return weights


def group_weights(key: Any, dim: int, *, num_weights: int = WeightOptions.num_weights,
                  alpha: float = WeightOptions.alpha, sampler: str = WeightOptions.sampler,
                  seed: int = WeightOptions.seed, step: Any = FIXED) -> np.ndarray:
    """The (K, D) Dirichlet weights of the prompt with group ``key`` (its ``example_id``) at
    ``step``: identical for every rollout of that prompt, in every process and engine
    (``vpo.weights.group_weights``). Read-only."""
    return _cached_weights(int(seed), _group_key(key), step, int(dim), int(num_weights), float(alpha), sampler)


def _check_options(method: str, num_weights: Any, alpha: Any, sampler: Any, seed: Any) -> WeightOptions:
    methods = reward_methods()
    if method not in methods:
        raise ValueError(f"reward_kwargs.method={method!r} is not one of {', '.join(methods)}")
    try:
        return WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)
    except ValueError as err:
        raise ValueError(f"reward_kwargs.{err}") from None  # the message starts with the field name


def score_rollout(task_name: Any, text: str, example: Mapping[str, Any], *, m: int, key: Any,
                  method: str = "vpo", num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                  sampler: str = WeightOptions.sampler, seed: int = WeightOptions.seed, step: Any = FIXED,
                  task_params: Mapping[str, Any] | None = None,
                  options: Mapping[str, Any] | None = None, failure_policy: Any = None) -> dict[str, Any]:
    """Score one rollout (engine-free; verl's and OpenRLHF's adapters call this). ``task_name``:
    a registered task's name (built with ``task_params``), or a ``Task`` instance.

    ``key`` is the prompt's group key (the exported ``example_id``); ``options`` the method's
    own reduction options (``EstimatorSpec.reduction_options`` beyond the weight options);
    ``failure_policy`` a ``RewardFailurePolicy`` for the task's scorers (None: the task's own).
    Returns a flat dict: ``score`` (the method's per-rollout score: its registered reduction,
    ``vpo.estimators.rollout_score``), ``set_score`` (VPO's R_g with the prompt's shared
    weights, logged for every method), ``fixed_scalar`` (best fixed scalar among the answers),
    ``fixed_scalar_sum``, ``nonzero_answers`` (distinct answers with a non-zero reward vector),
    ``acc`` (1.0 when some answer is solved), ``answers_parsed`` (non-blank answers found in the
    chain's tags, at most m), ``scored_answers`` (non-blank answers scored, fallbacks included),
    ``duplicate_answers`` (those dropped as duplicates), ``best_<objective>``
    per objective for tasks with fixed objective names, ``objective_best`` (JSON list of the
    per-objective maxima, for every task), ``vpo/reward_failures`` (this rollout's failed reward
    calls, ``task.failures``) and ``vpo/reward_failures/<name>`` per scorer. The keys depend only
    on the task, so they are identical for every rollout of a run. ``step`` also closes the
    failure tally's step: past ``max_failure_rate`` this raises ``RewardFailureError``.
    """
    from vpo.estimators import reduction_context, rollout_score
    from vpo.goals import goal_of
    from vpo.objective import set_scores

    weight_options = _check_options(method, num_weights, alpha, sampler, seed)
    spec = reward_methods()[method]
    own = dict(options or {})
    unknown = sorted(set(own) - (set(spec.reduction_options) - {"num_weights", "alpha", "sampler", "seed"}))
    if unknown:
        raise ValueError(f"method={method!r}: {', '.join(unknown)} is not an option of its reduction (its options: "
                         f"{', '.join(spec.reduction_options) or 'none'})")
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m (extra_info.answers) must be a positive integer, got {m!r}")
    if not spec.multi_answer and m != 1:
        raise ValueError(f"reward_kwargs.method={method!r} trains single-answer rollouts but the prompt asks for "
                         f"m={m} answers (extra_info.answers); export with --answers 1 or use method vpo/multi_rlvr")
    key = _group_key(key)
    # a Task instance scores as it is (vpo.integrations.verl_rewards: a user's compute_score as a task)
    task = task_name if not isinstance(task_name, str) else _get_task(task_name, dict(task_params or {}),
                                                                      failure_policy)
    example = task.validate(example, row=key)

    dim = task.num_objectives(example)
    parsed: dict[str, int] = {}
    tally = task.failures
    if step is not FIXED:
        tally.tick(step)  # the first rollout of a new step closes the last one (RewardFailureError past the rate)
    failed = tally.track()
    matrix = np.asarray(task.score_chain(text if isinstance(text, str) else "", example, int(m), stats=parsed),
                        dtype=np.float64)
    if step is FIXED:
        tally.tick()  # no step from the engine: the rate is checked over each window of calls
    matrix = matrix.reshape(-1, dim)
    rows = matrix if matrix.shape[0] else np.zeros((1, dim))  # code chains are unpadded: keep one row
    scalars = np.atleast_1d(np.asarray(task.scalar(rows), dtype=np.float64))

    weights = group_weights(key, dim, num_weights=weight_options.num_weights, alpha=weight_options.alpha,
                            sampler=weight_options.sampler, seed=weight_options.seed, step=step)
    set_score = float(np.asarray(set_scores([rows], weights), dtype=np.float64).reshape(-1)[0])
    stated = goal_of(example) if spec.conditions_prompt else None
    if stated is not None and stated.shape != (dim,):
        raise ValueError(f"the example's goal weights have {stated.shape[0]} entries for D={dim} objectives")
    try:
        context = reduction_context(spec, key=key, dim=dim, seed=weight_options.seed, step=step, goal=stated,
                                    scalar=task.scalar, num_weights=weight_options.num_weights,
                                    alpha=weight_options.alpha, sampler=weight_options.sampler)
    except ValueError as err:
        raise ValueError(f"{err} (`vpo data export {task_name} --format verl --method {method}`)") from None
    score = rollout_score(spec, matrix, **context, **own)

    best = rows.max(axis=0)
    out: dict[str, Any] = {
        "score": score,
        "set_score": set_score,
        "fixed_scalar": float(scalars.max()),
        "fixed_scalar_sum": float(scalars.sum()),
        "nonzero_answers": int(np.count_nonzero(np.any(matrix != 0.0, axis=1))) if matrix.size else 0,
        "acc": float(any(task.solved(row) for row in rows)),
        "answers_parsed": int(parsed.get("answers", 0)),
        "scored_answers": int(parsed.get("parsed", 0)),
        "duplicate_answers": int(parsed.get("duplicates", 0)),
    }
    if type(task).objectives:  # fixed objective names: one flat key per objective
        for name, value in zip(task.objective_names(example), best, strict=True):
            out[f"best_{name}"] = float(value)
    out["objective_best"] = json.dumps([round(float(v), 6) for v in best])
    out[FAILURE_METRIC] = float(sum(failed.values()))  # this rollout's failed reward calls
    out.update({f"{FAILURE_METRIC}/{name}": float(count) for name, count in failed.items()})
    return out


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  *, method: str = "vpo", m: int | None = None, num_weights: int = WeightOptions.num_weights,
                  alpha: float = WeightOptions.alpha, sampler: str = WeightOptions.sampler,
                  seed: int = WeightOptions.seed, task_params: Mapping[str, Any] | str | None = None,
                  max_failure_rate: float | None = None, failure_window: int | None = None,
                  time_limit: float | None = None, **engine_kwargs: Any) -> dict[str, Any]:
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
    (seconds per scoring call; none by default: math-verify and the sandbox have their own).

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
                         f"time_limit{''.join(', ' + o for o in own)}")
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
                         failure_policy=policy)


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

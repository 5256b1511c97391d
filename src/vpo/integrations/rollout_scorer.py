"""The one rollout scorer of the engines with one scalar reward per rollout: a rollout's text, its
example and its group key in; its method's score and the rollout's metrics out.

Usage::

    from vpo.integrations.rollout_scorer import method_score, reward_step_metrics, score_rollout
    from vpo.tasks import get_task
    example = get_task("maze", size=5).examples("train", 1, seed=0)[0]
    out = score_rollout("maze", "<route_1>UP</route_1>", example, m=3, key="train-0", task_params={"size": 5})
    out["score"], out["set_score"]        # the method's score (its registered reduction); vpo: the set score
    score_rollout("maze", "UP", example, m=1, key="train-0", method="grpo", task_params={"size": 5},
                  set_score=True)["set_score"]   # VPO's set score of a baseline's rollout: only when asked for
    reward_step_metrics([out], ["train-0"])      # the vpo/... step metrics of a step's dicts

verl's ``compute_score`` (``vpo.integrations.verl``, ``vpo.integrations.verl_rewards``),
OpenRLHF's ``reward_func`` (``vpo.integrations.openrlhf``) and the rewards of TRL's stock
``GRPOTrainer`` (``vpo.integrations.trl.rewards``: any registered estimator whose advantage is a
group z-norm) call this module, and none of them imports another. The score is the method's
registered reduction (``vpo.estimators.rollout_score``) with its group's context from the one
writer (``vpo.estimators.reduction_context``: the K weights keyed on (seed, group key, step)), so
it equals the estimator's own ``scores`` entry for that rollout in every engine.

Shape glossary: M answers per chain, D objectives, K weights.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.options import WeightOptions
from vpo.reward_failures import FAILURE_METRIC
from vpo.weights import FIXED

__all__ = ["group_key", "method_score", "reward_methods", "reward_step_metrics", "score_rollout", "task_for"]

_TASK_CACHE: dict[tuple[str, str, str], Any] = {}
_TASK_LOCK = threading.Lock()


def reward_methods() -> dict[str, Any]:
    """The registered estimators a rollout can be scored for (those with a per-rollout
    reduction): name -> ``EstimatorSpec``."""
    from vpo.estimators import get_spec, list_estimators

    return {name: get_spec(name) for name in list_estimators() if get_spec(name).reduce is not None}


def group_key(key: Any) -> int | str:
    """A prompt's group key as a plain int or str (numpy scalars key like Python ones)."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise ValueError(f"the group key (extra_info.example_id) must be a str or an int, got "
                         f"{type(key).__name__} {key!r}")
    return key


def task_for(name: str, params: Mapping[str, Any], policy: Any = None) -> Any:
    """The task ``name`` with ``params`` (its scorers under the reward failure ``policy``, when
    given), built once per process (reward functions run in threads)."""
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


def method_score(spec: Any, matrix: np.ndarray, *, key: Hashable, step: Any = FIXED, options: WeightOptions,
                 goal: Any = None, scalar: Callable | None = None, own: Mapping[str, Any] | None = None) -> float:
    """The per-rollout score of estimator ``spec`` for one rollout's (M, D) ``matrix``: its
    reduction with the context of the group keyed ``key`` at ``step`` (the weight ``options``,
    the ``goal`` its prompt states, the task's ``scalar``) and the reduction's ``own`` options."""
    from vpo.estimators import reduction_context, rollout_score

    context = reduction_context(spec, key=key, dim=matrix.shape[1], seed=options.seed,
                                step=None if step is FIXED else step, goal=goal, scalar=scalar,
                                num_weights=options.num_weights, alpha=options.alpha, sampler=options.sampler)
    return rollout_score(spec, matrix, **context, **dict(own or {}))


def _weight_options(method: str, num_weights: Any, alpha: Any, sampler: Any, seed: Any) -> WeightOptions:
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
                  task_params: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
                  failure_policy: Any = None, set_score: bool | None = None) -> dict[str, Any]:
    """Score one rollout, engine-free. ``task_name``: a registered task's name (built with
    ``task_params``), or a ``Task`` instance.

    ``key`` is the prompt's group key (the exported ``example_id``); ``options`` the method's
    own reduction options (``EstimatorSpec.reduction_options`` beyond the weight options);
    ``failure_policy`` a ``RewardFailurePolicy`` for the task's scorers (None: the task's own);
    ``set_score``: also return VPO's set score with the prompt's weights (None: when it is free,
    i.e. the method's own score is the set score; True for every method, at the cost of a draw
    of K weights per rollout). Returns a flat dict: ``score`` (the method's per-rollout score:
    its registered reduction, ``method_score``), ``set_score`` (as asked), ``fixed_scalar`` (best
    fixed scalar among the answers), ``fixed_scalar_sum``, ``nonzero_answers`` (distinct answers
    with a non-zero reward vector), ``acc`` (1.0 when some answer is solved), ``answers_parsed``
    (non-blank answers found in the chain's tags, at most m), ``scored_answers`` (non-blank
    answers scored, fallbacks included), ``duplicate_answers`` (those dropped as duplicates),
    ``best_<objective>`` per objective for tasks with fixed objective names, ``objective_best``
    (JSON list of the per-objective maxima, for every task), ``vpo/reward_failures`` (this
    rollout's failed reward calls, ``task.failures``) and ``vpo/reward_failures/<name>`` per
    scorer. The keys depend only on the task and the options, so they are identical for every
    rollout of a run. ``step`` also closes the failure tally's step: past ``max_failure_rate``
    this raises ``RewardFailureError``.
    """
    from vpo.goals import goal_of

    weight_options = _weight_options(method, num_weights, alpha, sampler, seed)
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
    key = group_key(key)
    # a Task instance scores as it is (vpo.integrations.verl_rewards: a user's compute_score as a task)
    task = task_name if not isinstance(task_name, str) else task_for(task_name, dict(task_params or {}),
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

    stated = goal_of(example) if spec.conditions_prompt else None
    try:
        score = method_score(spec, matrix, key=key, step=step, options=weight_options, goal=stated,
                             scalar=task.scalar, own=own)
    except ValueError as err:
        if stated is None and spec.conditions_prompt:
            raise ValueError(f"{err} (`vpo data export {getattr(task, 'name', task_name)} --format verl --method "
                             f"{method}`)") from None
        raise

    best = rows.max(axis=0)
    out: dict[str, Any] = {"score": score}
    if set_score or (set_score is None and method == "vpo"):
        out["set_score"] = score if method == "vpo" else method_score(reward_methods()["vpo"], matrix, key=key,
                                                                       step=step, options=weight_options)
    out.update({
        "fixed_scalar": float(scalars.max()),
        "fixed_scalar_sum": float(scalars.sum()),
        "nonzero_answers": int(np.count_nonzero(np.any(matrix != 0.0, axis=1))) if matrix.size else 0,
        "acc": float(any(task.solved(row) for row in rows)),
        "answers_parsed": int(parsed.get("answers", 0)),
        "scored_answers": int(parsed.get("parsed", 0)),
        "duplicate_answers": int(parsed.get("duplicates", 0)),
    })
    if type(task).objectives:  # fixed objective names: one flat key per objective
        for name, value in zip(task.objective_names(example), best, strict=True):
            out[f"best_{name}"] = float(value)
    out["objective_best"] = json.dumps([round(float(v), 6) for v in best])
    out[FAILURE_METRIC] = float(sum(failed.values()))  # this rollout's failed reward calls
    out.update({f"{FAILURE_METRIC}/{name}": float(count) for name, count in failed.items()})
    return out


_CHAIN_KEYS = ("answers_parsed", "scored_answers", "duplicate_answers", "objective_best", "score")
"""Keys of ``score_rollout``'s dict that ``reward_step_metrics`` reports under the shared names."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        return _number(value.item())
    return None


def reward_step_metrics(infos: Sequence[Mapping[str, Any]], group_ids: Sequence[Hashable], *,
                        prefix: str = "vpo/") -> dict[str, float]:
    """Per-step metrics from the dicts ``score_rollout`` returned for one step's rollouts.

    ``infos[i]``: rollout i's dict (verl's ``reward_extra_info``), ``group_ids[i]`` its prompt.
    Returns the names TRL logs too (``vpo.step_metrics``): ``vpo/answers_parsed``,
    ``vpo/duplicate_rate``, ``vpo/objective/<name>`` (objective names from the ``best_<name>``
    keys, else their index), ``vpo/score_mean``, ``vpo/group_std``, ``vpo/frac_zero_std``; and
    ``{prefix}<key>`` for the mean of every other numeric key (``set_score``, ``fixed_scalar``,
    ``acc`` ...).
    """
    from vpo.step_metrics import chain_metrics, score_metrics

    if len(infos) != len(group_ids):
        raise ValueError(f"{len(infos)} reward infos for {len(group_ids)} group ids")
    out: dict[str, float] = {}
    if not infos:
        return out
    keys = list(dict.fromkeys(k for info in infos for k in info))
    named = [k[len("best_"):] for k in keys if k.startswith("best_")]
    for key in keys:
        if key in _CHAIN_KEYS or key.startswith("best_"):
            continue
        values = [_number(info.get(key)) for info in infos]
        values = [v for v in values if v is not None]
        if values:  # a key already named as a metric (vpo/reward_failures) keeps its name
            out[key if key.startswith(prefix) else f"{prefix}{key}"] = sum(values) / len(values)
    best = [json.loads(info["objective_best"]) for info in infos if isinstance(info.get("objective_best"), str)]
    if len(best) != len(infos) or len({len(b) for b in best}) != 1:
        best = []
    names = named if best and len(named) == len(best[0]) else [str(d) for d in range(len(best[0]))] if best else []
    out.update(chain_metrics(answers=[_number(i.get("answers_parsed")) or 0.0 for i in infos],
                             parsed=[_number(i.get("scored_answers", i.get("answers_parsed"))) or 0.0 for i in infos],
                             duplicates=[_number(i.get("duplicate_answers")) or 0.0 for i in infos],
                             best=best or None, names=names))
    scored = [(g, _number(i.get("score"))) for i, g in zip(infos, group_ids, strict=True)]
    scored = [(g, v) for g, v in scored if v is not None]
    if scored:
        out.update(score_metrics([v for _, v in scored], [g for g, _ in scored]))
    return out

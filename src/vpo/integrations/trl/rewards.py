"""VPO's rewards as reward functions for TRL's stock ``GRPOTrainer`` (public API only) and for ``trl grpo``.

Usage::

    from trl import GRPOTrainer
    from vpo.integrations.trl import EstimatorReward, TaskReward, VPOReward
    GRPOTrainer(model, reward_funcs=TaskReward(task), args=cfg, train_dataset=ds)              # GRPO
    GRPOTrainer(model, reward_funcs=VPOReward(task, answers=3), args=cfg, train_dataset=ds)    # VPO
    GRPOTrainer(model, reward_funcs=EstimatorReward(task, "multi_rlvr", answers=3), args=cfg, train_dataset=ds)
    #   trl grpo --model_name_or_path M --dataset_name DIR --reward_funcs vpo.integrations.trl.vpo_reward
    #   trl grpo ... --reward_funcs vpo.integrations.trl.estimator_reward     # the rows' 'method' column

The dataset needs a ``prompt`` column (string or chat messages) and an ``example`` column (the
task example as a dict or its JSON string), as written by ``vpo data export TASK --format trl``;
an ``answers`` column, when present, must match the reward's m. The dotted-path rewards
``task_reward``, ``vpo_reward`` and ``estimator_reward`` also read ``task`` (the task's name),
``task_params`` (JSON of its constructor parameters; default none) and ``answers`` (m; default 1)
from each row, and ``estimator_reward`` its ``method`` (``vpo data export --format trl --method
NAME`` writes it), so they need no Python: every column of that export is what they read.

``EstimatorReward`` serves any registered estimator whose advantage is a group z-norm of its
per-rollout score (``EstimatorSpec.group_norm``), so a new one reaches the stock trainer with no
edit here: the stock trainer normalises the rewards itself. Its score is the rollout scorer's
(``vpo.integrations.rollout_scorer.method_score``, the one verl's ``compute_score`` and
OpenRLHF's reward function use); the others (``max_at_k``, ``maxrl``, ``gdpo``) need their own
advantage rule: ``VPOTrainer``.

Shared weights: the K Dirichlet weights of a prompt group are
``vpo.weights.group_weights([example_id], K, D, seed=seed, step=global_step)``, the project's one
keying (``example_id`` is the exported column verl and OpenRLHF key on too; data without it falls
back to the prompt text, ``prompt_key``), so every rollout of the group and every rank sees the
same K vectors without communication.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators import WeightOptions, get_spec
from vpo.integrations.rollout_scorer import method_score
from vpo.integrations.trl.scorers import decode_examples, group_keys, parse_example, score_task_chains
from vpo.rewards import completion_text, prompt_key
from vpo.step_metrics import ParseWatch
from vpo.tasks.base import Task

__all__ = ["EstimatorReward", "TaskReward", "VPOReward", "estimator_reward", "parse_example", "task_reward",
           "vpo_reward"]

_COLUMNS = {"example": "the task example as JSON", "task": "the task's name",
            "method": "the registered estimator each row trains with; `vpo data export TASK --format trl "
                      "--method NAME` writes it"}


def _keyed_weights(seed: int, key: str, step: int, num: int, dim: int, *, alpha: float = 1.0,
                   sampler: str = "iid") -> np.ndarray:
    """The (K, D) Dirichlet weights shared by a prompt group at ``step``: ``vpo.weights.group_weights``."""
    from vpo.weights import group_weights as keyed

    return keyed([str(key)], int(num), int(dim), seed=int(seed), step=int(step), alpha=alpha, sampler=sampler)[0]


def _row_values(kwargs: Mapping[str, Any], column: str, n: int) -> list[Any]:
    values = kwargs.get(column)
    if values is None:
        raise ValueError(f"the dataset needs a {column!r} column ({_COLUMNS.get(column, column)}); "
                         "build it with `vpo data export TASK --format trl`")
    if len(values) != n:
        raise ValueError(f"column {column!r} has {len(values)} values for {n} completions")
    return list(values)


def _check_answers(kwargs: Mapping[str, Any], answers: int, reward: str) -> None:
    """The rows' ``answers`` column (when the data has one) must be the m the reward scores: a
    prompt asking for 3 answers scored as 1 (or the reverse) would train on the wrong chains."""
    asked = sorted({int(a) for a in kwargs.get("answers") or () if a is not None})
    if asked and asked != [answers]:
        raise ValueError(f"the data was built for answers={asked[0] if len(asked) == 1 else asked} (column "
                         f"'answers'), but {reward} scores answers={answers}; give both the same m")


class TaskReward:
    """The GRPO reward of a task for the stock trainer: the task's fixed scalar of the best answer
    of each chain.

    ``TaskReward(task, answers=1, untagged_fallback=False)``: with m = 1 it is the GRPO reward (the
    answer's fixed scalar), so GRPO -> VPO in the stock ``GRPOTrainer`` is ``TaskReward(task)`` ->
    ``VPOReward(task, answers=3)`` (with data whose prompts ask for 3 answers). Reads the
    ``example`` column, checks ``answers`` when present and logs the chain metrics through TRL's
    ``log_metric`` (``vpo/objective/<name>``, ``vpo/answers_parsed``, ``vpo/parse_rate``,
    ``vpo/duplicate_rate``, ``vpo/reward_failures``); warns once when few chains parse at the start
    (``vpo.step_metrics.ParseWatch``). ``untagged_fallback``: a completion with no parseable answer
    counts as one answer, its whole text (docs/own_rewards.md).
    """

    __name__ = "task"

    def __init__(self, task: Task, answers: int = 1, *, untagged_fallback: bool = False) -> None:
        if not isinstance(answers, int) or isinstance(answers, bool) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        self.task = task
        self.answers = answers
        self.untagged_fallback = bool(untagged_fallback)
        self.watch = ParseWatch(answers, fallback=self.untagged_fallback, where=type(self).__name__)

    def from_matrices(self, matrices: Sequence[np.ndarray]) -> list[float]:
        """The reward of already scored chains: max over answers of the fixed scalar (0 if none)."""
        return [float(np.max(self.task.scalar(mat))) if mat.shape[0] else 0.0 for mat in matrices]

    def matrices(self, completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        """The (m, D) matrices of ``completions`` (TRL's reward-function arguments in ``kwargs``),
        with the step's chain metrics logged and the parse rate watched."""
        _check_answers(kwargs, self.answers, type(self).__name__)
        examples = decode_examples(_row_values(kwargs, "example", len(completions)))
        matrices, tagged = score_task_chains(self.task, [completion_text(c) for c in completions], examples,
                                             self.answers, log=kwargs.get("log_metric"),
                                             untagged_fallback=self.untagged_fallback)
        self.watch.update(sum(1 for t in tagged if t > 0), len(tagged))
        return matrices

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        return self.from_matrices(self.matrices(completions, kwargs))


class EstimatorReward(TaskReward):
    """A registered estimator's per-rollout score as a TRL reward function (one float per
    completion), for the stock ``GRPOTrainer``, which normalises it within each group itself.

    ``EstimatorReward(task, estimator, answers=None, seed=0, num_weights=100, alpha=1.0,
    sampler="iid", untagged_fallback=False, **options)``: ``estimator`` is any registered name
    whose advantage is a group z-norm of its score (``EstimatorSpec.group_norm``: ``vpo``,
    ``grpo``, ``multi_rlvr``, ``random_weight``, ``goal_conditioned``, and yours); ``answers`` m
    (default: the estimator's, 3 for multi-answer ones, else 1); ``options`` its reduction's own.
    Each completion is scored once (``task.score_chain(text, example, m)`` -> (m, D)) and reduced by
    the rollout scorer (``vpo.integrations.rollout_scorer.method_score``), with the group's weights
    keyed on (seed, example_id, global step) as every engine keys them (the prompt text keys data
    without an ``example_id`` column) and the goal weights the examples state for a
    prompt-conditioning estimator. Needs the dataset column ``example``; logs and watches as
    ``TaskReward``. The weight options are ``WeightOptions``'s, checked the same way.
    """

    def __init__(self, task: Task, estimator: str, answers: int | None = None, *, seed: int = WeightOptions.seed,
                 num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                 sampler: str = WeightOptions.sampler, untagged_fallback: bool = False, **options: Any) -> None:
        spec = get_spec(estimator)  # ValueError naming the known ones
        if not spec.group_norm:
            raise ValueError(f"estimator {estimator!r} needs its own advantage rule, which the stock GRPOTrainer "
                             "(group normalisation of the reward) cannot apply: train it with "
                             f"vpo.integrations.trl.VPOTrainer(estimator={estimator!r})")
        answers = spec.default_answers if answers is None else answers
        if not spec.multi_answer and answers != 1:
            raise ValueError(f"estimator {estimator!r} scores one answer per rollout; use answers=1")
        own = sorted(set(options) - (set(spec.reduction_options) - set(WeightOptions().as_dict())))
        if own:
            raise ValueError(f"estimator {estimator!r}: {', '.join(own)} is not an option of its reduction (its "
                             f"options: {', '.join(spec.reduction_options) or 'none'})")
        super().__init__(task, answers, untagged_fallback=untagged_fallback)
        self.spec, self.own = spec, dict(options)
        self.options = WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)
        self.__name__ = estimator

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        from vpo.goals import goal_of

        matrices = self.matrices(completions, kwargs)
        step = int(getattr(kwargs.get("trainer_state"), "global_step", 0) or 0)
        examples = decode_examples(kwargs["example"]) if self.spec.conditions_prompt else [None] * len(matrices)
        out = []
        for key, matrix, example in zip(group_keys(prompts, kwargs.get("example_id")), matrices, examples,
                                        strict=True):
            goal = goal_of(example) if example is not None else None
            out.append(method_score(self.spec, matrix, key=key, step=step, options=self.options, goal=goal,
                                    scalar=self.task.scalar, own=self.own))
        return out


class VPOReward(EstimatorReward):
    """VPO set score as a TRL reward function (one float per completion): ``EstimatorReward`` of
    ``vpo``.

    ``VPOReward(task, answers=m, seed=0, num_weights=100, alpha=1.0, sampler="iid",
    untagged_fallback=False)`` scores each completion with ``task.score_chain(text, example, m)``
    -> (m, D) and returns R = mean_k max_i w_k . r_i (``vpo.estimators.set_score``, VPO's
    registered reduction), with the K weights of a prompt keyed on (seed, example_id, global step)
    (``weights``: identical for all N rollouts of the prompt on every rank; the prompt text keys
    data without an ``example_id`` column).
    """

    def __init__(self, task: Task, answers: int = 3, *, seed: int = WeightOptions.seed,
                 num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                 sampler: str = WeightOptions.sampler, untagged_fallback: bool = False) -> None:
        super().__init__(task, "vpo", answers, seed=seed, num_weights=num_weights, alpha=alpha, sampler=sampler,
                         untagged_fallback=untagged_fallback)

    def weights(self, prompt: Any, step: int, dim: int) -> np.ndarray:
        """The (K, D) weights of the group keyed ``prompt`` (its example_id or prompt text) at ``step``
        (the one writer of a group's context, ``vpo.estimators.reduction_context``)."""
        from vpo.estimators import reduction_context

        o = self.options
        return reduction_context(self.spec, key=prompt_key(prompt), dim=dim, seed=o.seed, step=step,
                                 num_weights=o.num_weights, alpha=o.alpha, sampler=o.sampler)["weights"]


def __getattr__(name: str) -> Any:
    """The earlier names: ``TaskScalarReward`` (``TaskReward``) and ``group_weights`` (a prompt
    group's keyed weights; ``vpo.weights.group_weights``), with a dated deprecation."""
    from vpo.deprecation import deprecated, warn_deprecated

    if name == "TaskScalarReward":
        warn_deprecated(f"{__name__}.TaskScalarReward", f"{__name__}.TaskReward")
        return TaskReward
    if name == "group_weights":
        return deprecated(_keyed_weights, f"{__name__}.group_weights",
                          "vpo.weights.group_weights([key], K, D, seed=seed, step=step)[0]")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------
# the same rewards by dotted path, for TRL's own CLI (``trl grpo --reward_funcs``)
# ----------------------------------------------------------------------------------------------
_ROW_REWARDS: dict[tuple[Any, ...], Any] = {}
"""One reward object per (kind, task, task parameters, m, weight options) the rows name."""

_WEIGHT_COLUMNS = ("num_weights", "alpha", "sampler", "seed")
"""Columns a row may carry to set its weight options (``vpo_reward``)."""


def _reward_for(kind: str, name: str, params: str, answers: int, weights: tuple[tuple[str, Any], ...] = ()) -> Any:
    """The reward object of ``kind`` ("task", or an estimator's name) for a task, its parameters, m
    and the weight options, built once."""
    from vpo.export import make_task

    key = (kind, name, params, answers, weights)
    if key not in _ROW_REWARDS:
        try:
            decoded = json.loads(params)
        except json.JSONDecodeError:
            decoded = None
        if not isinstance(decoded, Mapping):
            raise ValueError(f"column 'task_params' must hold a JSON object, got {params!r}")
        task, _ = make_task(name, decoded)
        _ROW_REWARDS[key] = (TaskReward(task, answers=answers) if kind == "task"
                             else EstimatorReward(task, kind, answers, **dict(weights)))
    return _ROW_REWARDS[key]


def _run_seed(kwargs: Mapping[str, Any]) -> int | None:
    """The seed of the TRL run calling the reward (``--seed``): TRL passes its trainer's bound
    ``_log_metric`` as ``log_metric``, and the trainer holds the run's arguments."""
    trainer = getattr(kwargs.get("log_metric"), "__self__", None)
    seed = getattr(getattr(trainer, "args", None), "seed", None)
    return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None


def _row_rewards(kind: str | None, prompts: Sequence[Any], completions: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> list[float]:
    """Score each row with the reward its ``task``, ``task_params`` and ``answers`` columns name,
    ``kind`` being "task" (``TaskReward``), an estimator's name, or None: each row's ``method``
    column (rows of one setting are scored together, so a mixed dataset works too). For an
    estimator the weight options come from the row's ``num_weights``, ``alpha``, ``sampler``,
    ``seed`` columns when it has them, else the seed is the run's (TRL's ``--seed``) and the rest
    ``WeightOptions``' defaults."""
    n = len(completions)
    names = _row_values(kwargs, "task", n)
    kinds = [str(k) for k in _row_values(kwargs, "method", n)] if kind is None else [kind] * n
    params = [p if isinstance(p, str) else json.dumps(p or {}, sort_keys=True)
              for p in (kwargs.get("task_params") or [None] * n)]
    answers = [1 if a is None else int(a) for a in (kwargs.get("answers") or [None] * n)]
    run_seed = _run_seed(kwargs) if kind != "task" else None

    def weights_of(i: int) -> tuple[tuple[str, Any], ...]:
        if kinds[i] == "task":
            return ()
        given = {c: kwargs[c][i] for c in _WEIGHT_COLUMNS if kwargs.get(c) is not None and kwargs[c][i] is not None}
        if "seed" not in given and run_seed is not None:
            given["seed"] = run_seed
        return tuple(sorted((c, v.item() if isinstance(v, np.generic) else v) for c, v in given.items()))

    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, setting in enumerate(zip(kinds, names, params, answers, strict=True)):
        groups.setdefault((setting[0], str(setting[1]), setting[2] or "{}", setting[3], weights_of(i)), []).append(i)
    shared = {k: kwargs[k] for k in ("trainer_state", "log_metric") if k in kwargs}
    ids = kwargs.get("example_id")
    out = [0.0] * n
    for (method, name, task_params, m, weights), rows in groups.items():
        reward = _reward_for(method, name, task_params, m, weights)
        scores = reward([prompts[i] for i in rows], [completions[i] for i in rows],
                        example=[kwargs["example"][i] for i in rows] if "example" in kwargs else None,
                        example_id=[ids[i] for i in rows] if ids is not None else None, **shared)
        for i, score in zip(rows, scores, strict=True):
            out[i] = score
    return out


def task_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """``TaskReward`` by dotted path (``trl grpo --reward_funcs vpo.integrations.trl.task_reward``):
    the GRPO reward of each row's task (columns ``task``, ``task_params``, ``answers``, ``example``)."""
    return _row_rewards("task", prompts, completions, kwargs)


def vpo_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """``VPOReward`` by dotted path (``trl grpo --reward_funcs vpo.integrations.trl.vpo_reward``):
    the set score of each row's m-answer chain (columns ``task``, ``task_params``, ``answers``,
    ``example``, ``example_id``). K, alpha, the sampler and the seed come from the row's
    ``num_weights``, ``alpha``, ``sampler`` and ``seed`` columns when it has them; otherwise the
    seed is the run's (``trl grpo --seed``) and the others ``WeightOptions``' defaults (100, 1, iid)."""
    return _row_rewards("vpo", prompts, completions, kwargs)


def estimator_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """``EstimatorReward`` by dotted path (``trl grpo --reward_funcs vpo.integrations.trl.estimator_reward``):
    the score of each row's chain under the registered estimator its ``method`` column names
    (columns ``task``, ``task_params``, ``answers``, ``example``, ``example_id``, ``method``; the
    weight options as ``vpo_reward``). Any estimator whose advantage is a group z-norm of its score
    works, a new one included."""
    return _row_rewards(None, prompts, completions, kwargs)

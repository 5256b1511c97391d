"""VPO's rewards as reward functions for TRL's stock ``GRPOTrainer`` (public API only) and for ``trl grpo``.

Usage::

    from trl import GRPOTrainer
    from vpo.integrations.trl import TaskReward, VPOReward
    GRPOTrainer(model, reward_funcs=TaskReward(task), args=cfg, train_dataset=ds)              # GRPO
    GRPOTrainer(model, reward_funcs=VPOReward(task, answers=3), args=cfg, train_dataset=ds)    # VPO
    #   trl grpo --model_name_or_path M --dataset_name DIR --reward_funcs vpo.integrations.trl.vpo_reward

The dataset needs a ``prompt`` column (string or chat messages) and an ``example`` column (the
task example as a dict or its JSON string), as written by ``vpo data export TASK --format trl``;
an ``answers`` column, when present, must match the reward's m. The dotted-path rewards
``task_reward`` and ``vpo_reward`` also read ``task`` (the task's name), ``task_params`` (JSON of
its constructor parameters; default none) and ``answers`` (m; default 1) from each row, so they
need no Python: every column of that export is what they read.

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

from vpo.estimators import WeightOptions, get_spec, rollout_score
from vpo.integrations.trl.scorers import decode_examples, group_keys, parse_example, score_task_chains
from vpo.rewards import completion_text, prompt_key
from vpo.step_metrics import ParseWatch
from vpo.tasks.base import Task

__all__ = ["TaskReward", "TaskScalarReward", "VPOReward", "group_weights", "parse_example", "task_reward",
           "vpo_reward"]

_COLUMNS = {"example": "the task example as JSON", "task": "the task's name"}


def group_weights(seed: int, key: str, step: int, num: int, dim: int, *, alpha: float = 1.0,
                  sampler: str = "iid") -> np.ndarray:
    """The (K, D) Dirichlet weights shared by a prompt group at ``step``: the project's one keying,
    ``vpo.weights.group_weights([key], K, D, seed=seed, step=step)``."""
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


TaskScalarReward = TaskReward
"""The earlier name of ``TaskReward``."""


class VPOReward(TaskReward):
    """VPO set score as a TRL reward function (one float per completion).

    ``VPOReward(task, answers=m, seed=0, num_weights=100, alpha=1.0, sampler="iid",
    untagged_fallback=False)`` scores each completion with ``task.score_chain(text, example, m)``
    -> (m, D) and returns R = mean_k max_i w_k . r_i (``vpo.estimators.set_score``, VPO's
    registered reduction), with the K weights of a prompt keyed on (seed, example_id, global step)
    (``group_weights``: identical for all N rollouts of the prompt on every rank; the prompt text
    keys data without an ``example_id`` column). Needs the dataset column ``example``; logs and
    watches as ``TaskReward``. The weight options are ``WeightOptions``'s, checked the same way.
    """

    __name__ = "vpo"

    def __init__(self, task: Task, answers: int = 3, *, seed: int = WeightOptions.seed,
                 num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                 sampler: str = WeightOptions.sampler, untagged_fallback: bool = False) -> None:
        super().__init__(task, answers, untagged_fallback=untagged_fallback)
        self.options = WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)

    def weights(self, prompt: Any, step: int, dim: int) -> np.ndarray:
        """The (K, D) weights of the group keyed ``prompt`` (its example_id or prompt text) at ``step``."""
        o = self.options
        return group_weights(o.seed, prompt_key(prompt), step, o.num_weights, dim, alpha=o.alpha, sampler=o.sampler)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        matrices = self.matrices(completions, kwargs)
        step = int(getattr(kwargs.get("trainer_state"), "global_step", 0) or 0)
        cache: dict[tuple[str, int], np.ndarray] = {}
        spec = get_spec("vpo")
        out = []
        for key, matrix in zip(group_keys(prompts, kwargs.get("example_id")), matrices, strict=True):
            if (key, matrix.shape[1]) not in cache:
                cache[key, matrix.shape[1]] = self.weights(key, step, matrix.shape[1])
            out.append(rollout_score(spec, matrix, weights=cache[key, matrix.shape[1]]))
        return out


# ----------------------------------------------------------------------------------------------
# the same rewards by dotted path, for TRL's own CLI (``trl grpo --reward_funcs``)
# ----------------------------------------------------------------------------------------------
_ROW_REWARDS: dict[tuple[Any, ...], Any] = {}
"""One reward object per (kind, task, task parameters, m, weight options) the rows name."""

_WEIGHT_COLUMNS = ("num_weights", "alpha", "sampler", "seed")
"""Columns a row may carry to set its weight options (``vpo_reward``)."""


def _reward_for(kind: str, name: str, params: str, answers: int, weights: tuple[tuple[str, Any], ...] = ()) -> Any:
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
        _ROW_REWARDS[key] = (VPOReward(task, answers=answers, **dict(weights)) if kind == "vpo"
                             else TaskReward(task, answers=answers))
    return _ROW_REWARDS[key]


def _run_seed(kwargs: Mapping[str, Any]) -> int | None:
    """The seed of the TRL run calling the reward (``--seed``): TRL passes its trainer's bound
    ``_log_metric`` as ``log_metric``, and the trainer holds the run's arguments."""
    trainer = getattr(kwargs.get("log_metric"), "__self__", None)
    seed = getattr(getattr(trainer, "args", None), "seed", None)
    return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None


def _row_rewards(kind: str, prompts: Sequence[Any], completions: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> list[float]:
    """Score each row with the reward its ``task``, ``task_params`` and ``answers`` columns name
    (rows of one setting are scored together, so a mixed dataset works too). For ``vpo`` the
    weight options come from the row's ``num_weights``, ``alpha``, ``sampler``, ``seed`` columns
    when it has them, else the seed is the run's (TRL's ``--seed``) and the rest
    ``WeightOptions``' defaults."""
    n = len(completions)
    names = _row_values(kwargs, "task", n)
    params = [p if isinstance(p, str) else json.dumps(p or {}, sort_keys=True)
              for p in (kwargs.get("task_params") or [None] * n)]
    answers = [1 if a is None else int(a) for a in (kwargs.get("answers") or [None] * n)]
    run_seed = _run_seed(kwargs) if kind == "vpo" else None

    def weights_of(i: int) -> tuple[tuple[str, Any], ...]:
        if kind != "vpo":
            return ()
        given = {c: kwargs[c][i] for c in _WEIGHT_COLUMNS if kwargs.get(c) is not None and kwargs[c][i] is not None}
        if "seed" not in given and run_seed is not None:
            given["seed"] = run_seed
        return tuple(sorted((c, v.item() if isinstance(v, np.generic) else v) for c, v in given.items()))

    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, setting in enumerate(zip(names, params, answers, strict=True)):
        groups.setdefault((str(setting[0]), setting[1] or "{}", setting[2], weights_of(i)), []).append(i)
    shared = {k: kwargs[k] for k in ("trainer_state", "log_metric") if k in kwargs}
    ids = kwargs.get("example_id")
    out = [0.0] * n
    for (name, task_params, m, weights), rows in groups.items():
        reward = _reward_for(kind, name, task_params, m, weights)
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

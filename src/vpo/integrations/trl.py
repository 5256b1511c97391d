"""VPO for TRL 1.16: reward functions for the stock ``GRPOTrainer`` (and for ``trl grpo``) and a
``GRPOTrainer`` subclass that swaps TRL's advantages for any registered estimator.

Usage::

    from trl import GRPOConfig, GRPOTrainer
    from vpo.integrations.trl import TaskReward, VPOReward, VPOTrainer, RLConfig
    task = get_task("maze", size=5)

    # A. stock trainer: GRPO -> VPO is the reward line (TRL keeps its own group normalisation)
    GRPOTrainer(model, reward_funcs=TaskReward(task), args=cfg, train_dataset=ds)              # GRPO
    GRPOTrainer(model, reward_funcs=VPOReward(task, answers=3), args=cfg, train_dataset=ds)    # VPO

    # A'. TRL's own CLI, on a `vpo data export TASK --format trl` folder
    #     trl grpo --model_name_or_path M --dataset_name DIR --reward_funcs vpo.integrations.trl.vpo_reward

    # B. subclass: the estimator sees every rollout's (m, D) reward matrix after the gather
    VPOTrainer(model, task=task, answers=3, estimator="vpo", args=cfg, train_dataset=ds,
               processing_class=tok).train()

    # C. your own reward functions as the objectives: a GRPOTrainer script, class and answers= changed
    VPOTrainer(model, reward_funcs=[accuracy, format_ok, brevity], answers=3, args=cfg,
               train_dataset=ds_with_a_prompt_column).train()          # docs/own_rewards.md

    cfg = RLConfig().to_grpo_config("out", task="maze", answers=3)   # the paper's presets
                                                   # (vpo.integrations.trl_config)

With a task (A, A', B), the dataset needs a ``prompt`` column (string or chat messages) and an
``example`` column (the task example as a dict or its JSON string), as written by ``vpo data export TASK --format trl``; an
``answers`` column, when present, must match the reward's m. The dotted-path rewards
``task_reward`` and ``vpo_reward`` also read ``task`` (the task's name), ``task_params`` (JSON of
its constructor parameters; default none) and ``answers`` (m; default 1) from each row, so they
need no Python: every column of that export is what they read.

Shared weights: the K Dirichlet weights of a prompt group are
``vpo.weights.group_weights([example_id], K, D, seed=seed, step=global_step)``, the project's one
keying (``example_id`` is the exported column verl and OpenRLHF key on too; data without it falls
back to the prompt text, ``prompt_key``), so every rollout of the group and every rank sees the
same K vectors without communication, and ``VPOReward``, ``VPOTrainer(estimator="vpo")`` and the
other engines give the same set scores for the same row, seed and step.

Data flows one way in ``VPOTrainer``: ``_calculate_rewards`` decodes each prompt's example once,
scores the local rollouts with the public hook ``score_rollouts`` (override it to change the
scoring, as the demo does), logs chain metrics from those matrices, and returns the best answer's
task scalar as TRL's reward; ``_generate_and_score_completions`` gathers the matrices and
replaces TRL's advantages with the estimator's.

``VPOTrainer`` relies on two private TRL methods, ``_calculate_rewards`` and
``_generate_and_score_completions`` (the TRL maintainers endorse overriding them in subclasses);
``check_trl_hooks`` verifies their signatures at construction and fails with a clear message if
a TRL release changed them.
"""

from __future__ import annotations

import inspect
import json
import math
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from vpo.estimators import WeightOptions, get_spec, rollout_score
from vpo.integrations.trl_config import TASK_EPOCHS, RLConfig
from vpo.reward_failures import RewardFailurePolicy, RewardFailures
from vpo.rewards import completion_text, prompt_key
from vpo.tasks.base import Example, Task

__all__ = [
    "EXPECTED_TRL_HOOKS",
    "RLConfig",
    "StageProgress",
    "StepLines",
    "TASK_EPOCHS",
    "TaskReward",
    "TaskScalarReward",
    "VPOReward",
    "VPOTrainer",
    "check_trl_hooks",
    "completion_text",
    "group_weights",
    "label_progress",
    "parse_example",
    "group_keys",
    "prompt_key",
    "score_and_log",
    "step_line",
    "task_reward",
    "vpo_reward",
]

EXPECTED_TRL_HOOKS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
}
"""Parameter names of the private GRPOTrainer methods VPOTrainer overrides (TRL 1.16)."""


# ----------------------------------------------------------------------------------------------
# helpers shared by the reward function and the trainer
# ----------------------------------------------------------------------------------------------
def check_trl_hooks(cls: type | None = None) -> None:
    """Raise RuntimeError if ``cls`` (default ``GRPOTrainer``) lacks the private hooks with the
    parameter names VPOTrainer was written against."""
    cls = GRPOTrainer if cls is None else cls
    import trl

    problems = []
    for name, expected in EXPECTED_TRL_HOOKS.items():
        method = getattr(cls, name, None)
        if method is None:
            problems.append(f"{name} is missing")
            continue
        got = tuple(inspect.signature(method).parameters)
        if got != expected:
            problems.append(f"{name}{got} != expected {expected}")
    import trl.trainer.grpo_trainer as grpo_module

    if not callable(getattr(grpo_module, "gather", None)):  # _local_rewards switches it off
        problems.append("trl.trainer.grpo_trainer.gather is missing")
    if problems:
        raise RuntimeError(
            f"VPOTrainer needs GRPOTrainer's private hooks as in trl 1.16, but trl {trl.__version__} has: "
            + "; ".join(problems)
            + ". Pin trl==1.16.*, or use VPOReward with the stock GRPOTrainer (public API).")


def group_keys(prompts: Sequence[Any], example_ids: Sequence[Any] | None) -> list[str]:
    """The group key of each row: its ``example_id`` (the key every engine uses) when the data
    has that column, else the prompt text (``vpo.rewards.group_keys``, the one keying)."""
    from vpo.rewards import group_keys as keys_of

    return keys_of(prompts, None if example_ids is None else {"example_id": example_ids})


def parse_example(value: Any, row: int | None = None) -> Example:
    """A task example from a dataset cell: a dict, or its JSON string."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"row {row}: the 'example' column is not valid JSON ({err})") from err
        if isinstance(parsed, Mapping):
            return dict(parsed)
    raise ValueError(f"row {row}: the 'example' column must hold a dict or its JSON string, "
                     f"got {type(value).__name__}")


def group_weights(seed: int, key: str, step: int, num: int, dim: int, *, alpha: float = 1.0,
                  sampler: str = "iid") -> np.ndarray:
    """The (K, D) Dirichlet weights shared by a prompt group at ``step``: the project's one keying,
    ``vpo.weights.group_weights([key], K, D, seed=seed, step=step)``."""
    from vpo.weights import group_weights as keyed

    return keyed([str(key)], int(num), int(dim), seed=int(seed), step=int(step), alpha=alpha, sampler=sampler)[0]


def decode_examples(values: Sequence[Any]) -> list[Example]:
    """Examples of a batch's ``example`` cells, each distinct cell decoded once (the N rollouts
    of a prompt share one)."""
    decoded: dict[Any, Example] = {}
    out = []
    for row, value in enumerate(values):
        if value is None:
            raise ValueError(f"row {row}: the dataset needs an 'example' column (the task example as JSON); "
                             "build it with `vpo data export TASK --format trl`")
        cache_key = value if isinstance(value, str) else id(value)
        if cache_key not in decoded:
            decoded[cache_key] = parse_example(value, row)
        out.append(decoded[cache_key])
    return out


_COLUMNS = {"example": "the task example as JSON", "task": "the task's name"}


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


def score_and_log(task: Task, texts: Sequence[str], examples: Sequence[Example], m: int,
                  log: Callable[[str, float], None] | None) -> list[np.ndarray]:
    """The (m, D) matrices of ``texts`` (one parse and one scoring each) and, through ``log``,
    the chain metrics of that same pass (``vpo.step_metrics.chain_metrics``, the names every
    engine logs): ``vpo/answers_parsed`` (answers per chain found in its tags),
    ``vpo/duplicate_rate`` (share of the answers the task's dedup drops),
    ``vpo/objective/<name>`` (mean over chains of the best answer's value per objective) and
    ``vpo/reward_failures`` (the step's failed reward calls, ``task.failures``; past its
    ``max_failure_rate`` this raises ``RewardFailureError``)."""
    from vpo.step_metrics import chain_metrics

    counts = {"answers": [], "parsed": [], "duplicates": []}
    matrices = []
    for text, example in zip(texts, examples, strict=True):
        stats: dict[str, int] = {}
        matrices.append(np.asarray(task.score_chain(text, example, m, stats=stats), dtype=np.float64))
        for key, values in counts.items():
            values.append(stats.get(key, 0))
    failed = task.failures.end_step()  # one call per step: RewardFailureError past max_failure_rate
    if callable(log):
        for name, value in failed.items():
            log(name, value)
        names = task.objective_names(examples[0]) if examples else ()
        best = [mat.max(axis=0) if mat.size else np.zeros(mat.shape[1]) for mat in matrices]
        for name, value in chain_metrics(**counts, best=best, names=names).items():
            log(name, value)
    return matrices


# ----------------------------------------------------------------------------------------------
# A. reward functions for the stock GRPOTrainer
# ----------------------------------------------------------------------------------------------
class VPOReward:
    """VPO set score as a TRL reward function (one float per completion).

    ``VPOReward(task, answers=m, seed=0, num_weights=100, alpha=1.0, sampler="iid")`` scores each
    completion with ``task.score_chain(text, example, m)`` -> (m, D) and returns
    R = mean_k max_i w_k . r_i (``vpo.estimators.set_score``, VPO's registered reduction), with
    the K weights of a prompt keyed on (seed, example_id, global step) (``group_weights``:
    identical for all N rollouts of the prompt on every rank; the prompt text keys data without
    an ``example_id`` column). Needs the dataset column ``example``. Logs through TRL's
    ``log_metric``: ``vpo/objective/<name>`` (best answer's value per objective, mean over
    rollouts), ``vpo/answers_parsed`` and ``vpo/duplicate_rate``. The weight options are
    ``WeightOptions``'s, checked the same way.
    """

    __name__ = "vpo"

    def __init__(self, task: Task, answers: int = 3, *, seed: int = WeightOptions.seed,
                 num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                 sampler: str = WeightOptions.sampler) -> None:
        if not isinstance(answers, int) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        self.task = task
        self.answers = answers
        self.options = WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)

    def weights(self, prompt: Any, step: int, dim: int) -> np.ndarray:
        """The (K, D) weights of the group keyed ``prompt`` (its example_id or prompt text) at ``step``."""
        o = self.options
        return group_weights(o.seed, prompt_key(prompt), step, o.num_weights, dim, alpha=o.alpha, sampler=o.sampler)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        n = len(completions)
        _check_answers(kwargs, self.answers, "VPOReward")
        examples = decode_examples(_row_values(kwargs, "example", n))
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        texts = [completion_text(c) for c in completions]
        matrices = score_and_log(self.task, texts, examples, self.answers, kwargs.get("log_metric"))
        cache: dict[tuple[str, int], np.ndarray] = {}
        spec = get_spec("vpo")
        out = []
        for key, matrix in zip(group_keys(prompts, kwargs.get("example_id")), matrices, strict=True):
            if (key, matrix.shape[1]) not in cache:
                cache[key, matrix.shape[1]] = self.weights(key, step, matrix.shape[1])
            out.append(rollout_score(spec, matrix, weights=cache[key, matrix.shape[1]]))
        return out


class TaskReward:
    """The GRPO twin of ``VPOReward``: the task's fixed scalar of the best answer of each chain.

    ``TaskReward(task, answers=1)``: with m = 1 it is the GRPO reward (the answer's fixed scalar),
    so GRPO -> VPO in the stock ``GRPOTrainer`` is ``TaskReward(task)`` -> ``VPOReward(task,
    answers=3)`` (with data whose prompts ask for 3 answers). Reads the ``example`` column, checks
    ``answers`` when present and logs the same chain metrics as ``VPOReward``
    (``vpo/objective/<name>``, ``vpo/answers_parsed``, ``vpo/duplicate_rate``). ``VPOTrainer``
    hands TRL the estimator's own per-rollout score in its place (``reward``, ``rewards/task/mean``).
    """

    __name__ = "task"

    def __init__(self, task: Task, answers: int = 1) -> None:
        if not isinstance(answers, int) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        self.task = task
        self.answers = answers

    def from_matrices(self, matrices: Sequence[np.ndarray]) -> list[float]:
        """The reward of already scored chains: max over answers of the fixed scalar (0 if none)."""
        return [float(np.max(self.task.scalar(mat))) if mat.shape[0] else 0.0 for mat in matrices]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        _check_answers(kwargs, self.answers, "TaskReward")
        examples = decode_examples(_row_values(kwargs, "example", len(completions)))
        texts = [completion_text(c) for c in completions]
        return self.from_matrices(score_and_log(self.task, texts, examples, self.answers, kwargs.get("log_metric")))


TaskScalarReward = TaskReward
"""The earlier name of ``TaskReward``."""


# ----------------------------------------------------------------------------------------------
# A'. the same rewards by dotted path, for TRL's own CLI (``trl grpo --reward_funcs``)
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


# ----------------------------------------------------------------------------------------------
# B. GRPOTrainer subclass with pluggable estimators
# ----------------------------------------------------------------------------------------------
class VPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from a ``vpo.estimators`` estimator computed on the
    gathered (m, D) reward matrices of the whole generation batch.

    Two ways to give the objectives, exactly one of them:

    * ``VPOTrainer(model, reward_funcs=[f1, f2, f3], answers=m, estimator="vpo", args=GRPOConfig(...),
      train_dataset=ds)``: a ``GRPOTrainer`` script switched by its class name and ``answers=``. Each
      reward function (what ``GRPOTrainer`` takes: callables, sync or async, model ids, sequence-
      classification models with ``reward_processing_classes``) is one objective (a multi-head model,
      or a callable with ``objective_names``, several). With m > 1 each prompt is rewritten to ask
      for m answers in ``<response_i>`` tags, every answer is scored on its own by TRL's own
      reward machinery (``GRPOTrainer._calculate_rewards``, once per step on all answers), and
      ``vpo.rewards.finish_chains`` applies the ``None`` rule, ``scaling`` (per objective, see
      ``vpo.rewards.SCALINGS``) and the dedup and zero padding; ``reward_names`` renames the
      objectives. With m = 1 the completion is scored as ``GRPOTrainer`` scores it.
    * ``VPOTrainer(model, task=task, answers=m, ...)``: a ``vpo.tasks`` task scores the chains.

    ``estimator`` is any registered name; what the trainer passes follows its ``EstimatorSpec``:
    ``group_ids`` (G contiguous rows per prompt, in TRL's global order), ``scalar`` (the task's
    fixed scalarisation, or the sum of the objectives weighted by ``reward_weights`` as TRL adds
    them) where accepted, ``seed`` (default ``args.seed``), ``step`` (the global step, for weights
    drawn per step) and ``weight_keys`` (the rows' ``example_id``, else the prompts, so the weights
    are keyed on (seed, example_id, step) exactly as ``VPOReward``, verl and OpenRLHF key them) for
    estimators with keyed weights, and ``goal_weights`` (read from the examples) for
    goal-conditioned estimators.
    ``estimator_options`` are the estimator's other options (``num_weights``, ``alpha``,
    ``sampler``, ``std``, ``eps``, ``degenerate``, ``scale``, ``k``, ...; each estimator's
    defaults are the authors'; TRL's normalisation is ``TRL_NORM``). Diagnostics are logged as
    TRL metrics under the estimator's names.

    TRL options with a VPO meaning are mapped, the others refused (``map_trl_options``):
    ``scale_rewards`` becomes the estimator's ``scale``; ``multi_objective_aggregation=
    "normalize_then_sum"`` is TRL's GDPO (``estimator="gdpo"``); ``reward_weights`` weights the
    scalar baselines' sum (and GDPO's objectives) and is refused by estimators that draw weights.
    """

    def __init__(self, model: Any, reward_funcs: Any = None, args: GRPOConfig | None = None,
                 train_dataset: Any = None, *, task: Task | None = None, answers: int = 1,
                 estimator: str = "vpo", estimator_options: Mapping[str, Any] | None = None,
                 scaling: Any = None, reward_names: Sequence[Any] | None = None,
                 reward_processing_classes: Any = None, reward_failures: Any = None, **kwargs: Any) -> None:
        check_trl_hooks(GRPOTrainer)
        if (task is None) == (reward_funcs is None):
            raise ValueError("VPOTrainer takes exactly one of task= (a vpo task scores the chains) and "
                             "reward_funcs= (your reward functions, one objective each)")
        if not isinstance(answers, int) or isinstance(answers, bool) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        spec = get_spec(estimator)  # ValueError for unknown names
        if not spec.multi_answer and answers != 1:
            raise ValueError(f"estimator {estimator!r} scores one answer per rollout; use answers=1 "
                             "(or 'vpo' / 'multi_rlvr' for multi-answer chains)")
        if task is not None and (scaling is not None or reward_names is not None):
            raise ValueError("scaling= and reward_names= apply to reward_funcs=; a task's objectives are in [0, 1] "
                             "and named by the task")
        if reward_failures is not None and not isinstance(reward_failures, RewardFailurePolicy):
            raise ValueError("reward_failures must be a vpo.reward_failures.RewardFailurePolicy, got "
                             f"{type(reward_failures).__name__}")
        if task is not None and reward_failures is not None:  # the task's scorers under this policy
            task.failures = task.failures.with_policy(reward_failures)
        self.vpo_task = task
        self.vpo_answers = answers
        self.vpo_spec = spec
        self.vpo_estimator_name = estimator
        self.vpo_estimator = spec.fn
        self.vpo_options = dict(estimator_options or {})
        # a Python caller may give its own fixed scalar; the other injected options are the trainer's
        clash = sorted((set(spec.injected_options) - {"scalar"}) & set(self.vpo_options))
        if clash:
            raise ValueError(f"estimator_options {clash} are set by VPOTrainer (weights are keyed on (seed, "
                             "example_id, global_step); goal weights come from the examples); remove them")
        unknown = sorted(set(self.vpo_options) - set(spec.options))
        if unknown:
            raise ValueError(f"estimator {estimator!r} does not accept option(s) {unknown}; "
                             f"it accepts {sorted(spec.options)}")
        if spec.weights is not None:  # explicit zero K or alpha raise here, not at the first step
            WeightOptions(**{k: v for k, v in self.vpo_options.items() if k in ("num_weights", "alpha", "sampler")})
        self._vpo_batch: Any = None
        self._vpo_single_prompts: list[Any] | None = None
        self._vpo_low_dim_steps = 0
        self._vpo_warned_collinear = False
        self._vpo_chain_prompts: dict[str, Any] = {}
        self._vpo_answer_ids: list[Any] | None = None
        columns = getattr(train_dataset, "column_names", None)
        if task is not None:
            if columns is not None and "example" not in columns:
                raise ValueError(f"train_dataset needs an 'example' column (task example as JSON); it has {columns}")
            self.vpo_reward = TaskReward(task, answers)
            self.map_trl_options(args, (1,))
            self._vpo_scalar = task.scalar
            funcs: list[Any] = [self.vpo_reward]
        else:
            from vpo.rewards import check_scaling, function_name, load_reward_model, objective_names

            funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
            if not funcs:
                raise ValueError("reward_funcs is empty: give at least one reward function")
            classes = reward_processing_classes
            classes = list(classes) if isinstance(classes, list | tuple) else [classes] * len(funcs)
            if len(classes) != len(funcs):
                raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(funcs)} reward "
                                 "functions")
            for i, func in enumerate(funcs):
                if isinstance(func, str):  # loaded with all its labels (TRL would keep only the first)
                    funcs[i], tokenizer = load_reward_model(func)
                    classes[i] = classes[i] if classes[i] is not None else tokenizer
            reward_processing_classes = classes
            self.vpo_reward_names = reward_names
            self.vpo_failures = RewardFailures(reward_failures, names=[function_name(f) for f in funcs])
            self.vpo_objective_names = objective_names(funcs, reward_names)
            self.vpo_scaling = check_scaling(scaling, self.vpo_objective_names)
            widths = tuple(_function_width(f) for f in funcs)
            self._vpo_first_columns = np.cumsum((0,) + widths[:-1])
            reward_weights = self.map_trl_options(args, widths)
            self._vpo_scalar = _WeightedSum(reward_weights if reward_weights is not None
                                            else np.ones(len(self.vpo_objective_names)))
        super().__init__(model, reward_funcs=funcs, args=args, train_dataset=train_dataset,
                         reward_processing_classes=reward_processing_classes, **kwargs)
        if self.vpo_options.get("seed") is None and "seed" in spec.options:
            self.vpo_options["seed"] = int(self.args.seed)

    # -- TRL's options that VPO maps or refuses --------------------------------------------------
    def map_trl_options(self, args: GRPOConfig | None, widths: Sequence[int]) -> np.ndarray | None:
        """Map ``args.scale_rewards``, ``multi_objective_aggregation`` and ``reward_weights`` onto the
        estimator's options, or raise ValueError saying why one cannot be honoured. Returns the
        per-objective weights of ``reward_weights`` (each function's weight on each of its
        ``widths`` objectives), or None."""
        name, spec, options = self.vpo_estimator_name, self.vpo_spec, self.vpo_options
        scale = getattr(args, "scale_rewards", "group")
        scale = {True: "group", False: "none"}.get(scale, scale)
        if scale != "group":  # TRL's default is the estimators' default too
            if "scale" not in spec.options:
                raise ValueError(f"scale_rewards={scale!r}: estimator {name!r} has no 'scale' option to map it "
                                 "onto; leave scale_rewards at 'group'")
            if options.get("scale", scale) != scale:
                raise ValueError(f"scale_rewards={scale!r} and estimator_options scale={options['scale']!r} "
                                 "disagree; give one of them")
            options["scale"] = scale
        aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
        if aggregation != "sum_then_normalize":
            if name != "gdpo":
                raise ValueError(f"multi_objective_aggregation={aggregation!r} is TRL's GDPO; VPOTrainer combines "
                                 f"the objectives with its estimator ({name!r}): pass estimator='gdpo' for GDPO, "
                                 "or leave multi_objective_aggregation at 'sum_then_normalize'")
            options.setdefault("whiten", "trl")  # TRL's normalize_then_sum whitens as "trl"
        weights = getattr(args, "reward_weights", None)
        if weights is None:
            return None
        if self.vpo_task is not None:
            raise ValueError("reward_weights: with task= the task is the only reward function and the estimator "
                             "weights its objectives; remove reward_weights")
        if len(weights) != len(widths):
            raise ValueError(f"reward_weights has {len(weights)} entries for {len(widths)} reward functions")
        per_objective = np.repeat(np.asarray(weights, dtype=np.float64), widths)
        if spec.weights is not None or spec.conditions_prompt:
            raise ValueError(f"reward_weights: estimator {name!r} draws its own weights over the objectives, so "
                             "fixed reward_weights would be ignored; remove them (or use a scalar baseline such "
                             "as 'grpo' or 'multi_rlvr', which sums the objectives with them, or 'gdpo')")
        if "objective_weights" in spec.options:
            if options.get("objective_weights") is not None:
                raise ValueError("give reward_weights or estimator_options objective_weights, not both")
            options["objective_weights"] = per_objective
        elif "scalar" not in spec.options:
            raise ValueError(f"reward_weights: estimator {name!r} takes neither a scalar nor objective weights; "
                             "remove reward_weights")
        return per_objective

    # -- the public hook -------------------------------------------------------------------------
    def score_rollouts(self, prompts: Sequence[Any], completions: Sequence[Any],
                       completion_ids: Sequence[Sequence[int]], examples: Sequence[Example]) -> list[np.ndarray]:
        """The (m, D) reward matrix of each local completion, each scored once (the chain metrics
        are logged from the same pass). Override to change how rollouts are scored (the demo zeroes
        truncated ones); the estimator and TRL's logged reward read what this returns. Used with
        ``task=``."""
        return score_and_log(self.vpo_task, [completion_text(c) for c in completions], examples, self.vpo_answers,
                             self._log_metric)

    def chain_prompt(self, prompt: Any) -> Any:
        """The m-answer prompt of a dataset prompt (``vpo.rewards.rewrite_chain_prompt``), cached."""
        from vpo.rewards import rewrite_chain_prompt

        key = prompt_key(prompt)
        if key not in self._vpo_chain_prompts:
            self._vpo_chain_prompts[key] = rewrite_chain_prompt(prompt, self.vpo_answers)
        return self._vpo_chain_prompts[key]

    # -- TRL hook 1: score the local rollouts once; TRL's reward is the estimator's per-rollout score --
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self.vpo_task is None:
            return self._score_with_reward_funcs(inputs, prompts, completions, completion_ids_list)
        from accelerate.utils import gather

        examples = decode_examples([row.get("example") for row in inputs])
        matrices = self.score_rollouts(prompts, completions, completion_ids_list, examples)
        if len(matrices) != len(completions):
            raise RuntimeError(f"score_rollouts returned {len(matrices)} matrices for {len(completions)} completions")
        goals = [_goal(ex) for ex in examples] if self.vpo_spec.conditions_prompt else [None] * len(matrices)
        keys = group_keys(prompts, [row.get("example_id") for row in inputs] if any(
            "example_id" in row for row in inputs) else None)
        self._vpo_batch = list(zip(keys, matrices, goals, strict=True))
        rewards = torch.tensor(self.rollout_scores(matrices, keys, goals), dtype=torch.float32,
                               device=self.accelerator.device).reshape(-1, 1)
        return gather(rewards)

    def _score_with_reward_funcs(self, inputs, prompts, completions, completion_ids_list):
        """Score this process's chains answer by answer; TRL gets, per completion and function, the
        best raw value of the function's (first) objective over the chain's answers (its logs)."""
        from accelerate.utils import gather

        from vpo.rewards import CHAIN_TAG, group_keys, score_answers

        singles = self._vpo_single_prompts
        self._vpo_single_prompts = None
        if singles is None or len(singles) != len(prompts):
            singles = list(prompts)
        columns = {key: [row.get(key) for row in inputs] for key in inputs[0]
                   if key not in ("prompt", "completion", "completion_ids")}
        extra_lengths = {key: len(values) for key, values in self._pending_extra_logs.items()}
        # one answer per completion: the functions get the generated ids, as from GRPOTrainer
        self._vpo_answer_ids = list(completion_ids_list) if self.vpo_answers == 1 else None
        scored = score_answers(self.reward_funcs, singles, completions, self.vpo_answers,
                               reward_names=self.vpo_reward_names, call=self.call_reward_funcs,
                               tag=CHAIN_TAG if self.vpo_answers > 1 else None, **columns)
        mode = "train" if self.model.training else "eval"
        for name, value in self.vpo_failures.end_step().items():  # RewardFailureError past the threshold
            self._metrics[mode][name].append(value)
        if scored.names != self.vpo_objective_names:
            raise ValueError(f"the reward functions gave objectives {list(scored.names)}, expected "
                             f"{list(self.vpo_objective_names)}: a callable returning one vector per completion "
                             "must declare them (f.objective_names = (...))")
        self._regroup_extra_logs(extra_lengths, scored.owners, len(completions))
        self._vpo_batch = (scored, group_keys(singles, columns))
        best = np.full((len(completions), len(self.reward_funcs)), -np.inf)
        for i, column in enumerate(self._vpo_first_columns):
            values = scored.values[:, column]
            finite = ~np.isnan(values)
            np.maximum.at(best[:, i], scored.owners[finite], values[finite])
        best[np.isneginf(best)] = np.nan
        return gather(torch.tensor(best, dtype=torch.float32, device=self.accelerator.device))

    def call_reward_funcs(self, prompts: Sequence[Any], completions: Sequence[Any],
                          columns: Mapping[str, Sequence[Any]]) -> list[np.ndarray]:
        """The ``call`` of ``vpo.rewards.score_answers`` in this trainer: every function once on this
        process's P single answers, one (P,) or (P, H) array each. Functions with one objective go
        through TRL's own ``GRPOTrainer._calculate_rewards`` (models, async functions, ``None``,
        ``trainer_state`` / ``log_metric`` / ``log_extra``), with its cross-process gather off (the
        trainer gathers the answers itself); multi-head models and callables that declare
        ``objective_names`` are scored by ``vpo.rewards`` with every head."""
        from vpo.rewards import call_reward_funcs, function_name, is_reward_model, score_with_model

        ids, self._vpo_answer_ids = self._vpo_answer_ids, None
        if ids is None or len(ids) != len(completions):
            tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
            ids = tokenizer(text=[completion_text(c) for c in completions], add_special_tokens=False)["input_ids"]
        own = [i for i, f in enumerate(self.reward_funcs) if _function_width(f) > 1
               or getattr(f, "objective_names", None) is not None and not is_reward_model(f)]
        outputs: list[Any] = [None] * len(self.reward_funcs)
        shared = [i for i in range(len(self.reward_funcs)) if i not in own]
        if shared:
            rows = [{**{key: values[p] for key, values in columns.items()}, "prompt": prompts[p]}
                    for p in range(len(completions))]
            saved = self.reward_funcs, self.reward_processing_classes, self.reward_func_names
            try:
                self.reward_funcs, self.reward_processing_classes, self.reward_func_names = (
                    [seq[i] for i in shared] for seq in saved)
                # each callable under the failure policy, wrapped before TRL turns its None into NaN
                self.reward_funcs = [f if is_reward_model(f) else self.vpo_failures.guard(f, function_name(f))
                                     for f in self.reward_funcs]
                with _local_rewards():
                    table = GRPOTrainer._calculate_rewards(self, rows, list(prompts), list(completions), ids)
            finally:
                self.reward_funcs, self.reward_processing_classes, self.reward_func_names = saved
            table = table.float().cpu().numpy()
            for j, i in enumerate(shared):
                func = self.reward_funcs[i]
                outputs[i] = (self.vpo_failures.clean_model_scores(function_name(func), table[:, j])
                              if is_reward_model(func) else table[:, j])
        hooks = {"trainer_state": self.state, "log_extra": self._log_completion_extra, "log_metric": self._log_metric}
        for i in own:
            func = self.reward_funcs[i]
            if is_reward_model(func):
                outputs[i] = self.vpo_failures.clean_model_scores(
                    function_name(func), score_with_model(func, self.reward_processing_classes[i], prompts, completions))
            else:
                outputs[i] = call_reward_funcs([func], prompts, completions, {**columns, **hooks},
                                               completion_ids=ids, failures=self.vpo_failures)[0]
        return outputs

    def _regroup_extra_logs(self, before: Mapping[str, int], owners: np.ndarray, num: int) -> None:
        """Columns a reward function logged per answer (``log_extra``) become one list per completion,
        so TRL's completions table stays one row per completion."""
        for key, values in self._pending_extra_logs.items():
            new = values[before.get(key, 0):]
            if len(new) != owners.size or owners.size == num and self.vpo_answers == 1:
                continue
            grouped: list[list[Any]] = [[] for _ in range(num)]
            for owner, value in zip(owners, new, strict=True):
                grouped[int(owner)].append(value)
            self._pending_extra_logs[key] = list(values[:before.get(key, 0)]) + grouped

    def rollout_scores(self, matrices: Sequence[np.ndarray], keys: Sequence[str], goals: Sequence[Any]) -> list[float]:
        """What TRL logs as ``reward``: the estimator's own per-rollout score (its registered
        reduction, keyed as the estimator keys its weights), so the headline of a run is the
        objective it trains; the best answer's fixed scalar for an estimator with no reduction."""
        from vpo.estimators import WEIGHT_OPTIONS, reduction_context

        spec = self.vpo_spec
        if spec.reduce is None:
            return self.vpo_reward.from_matrices(matrices)
        options = self.vpo_options
        own = {k: v for k, v in options.items() if k in spec.reduction_options and k not in WEIGHT_OPTIONS}
        step = int(self.state.global_step)
        scores = []
        for matrix, key, goal in zip(matrices, keys, goals, strict=True):
            context = reduction_context(spec, key=key, dim=matrix.shape[1], seed=options.get("seed", self.args.seed),
                                        step=step, goal=goal, scalar=options.get("scalar", self.vpo_task.scalar),
                                        num_weights=options.get("num_weights"), alpha=options.get("alpha"),
                                        sampler=options.get("sampler"))
            scores.append(rollout_score(spec, matrix, **context, **own))
        return scores

    # -- TRL hook 2: replace the advantages with the estimator's, computed on the global batch --
    def _generate_and_score_completions(self, inputs):
        if self.vpo_task is None:
            self._vpo_single_prompts = [row["prompt"] for row in inputs]
            if self.vpo_answers > 1:
                inputs = [{**row, "prompt": self.chain_prompt(row["prompt"])} for row in inputs]
        out = super()._generate_and_score_completions(inputs)
        if "advantages" not in out:
            raise RuntimeError("VPOTrainer: TRL's batch has no 'advantages' (TRL internals changed)")
        mode = "train" if self.model.training else "eval"
        local, self._vpo_batch = self._vpo_batch, None
        if local is None:
            raise RuntimeError("VPOTrainer: _calculate_rewards did not run for this batch")
        num_gen = self.num_generations if mode == "train" else (
            getattr(self, "num_generations_eval", None) or self.num_generations)
        if self.vpo_task is not None:
            gathered = gather_object(local)
            n_local = len(local)
            advantages, diagnostics = self.compute_advantages(
                [mat for _, mat, _ in gathered], [k for k, _, _ in gathered], num_gen, goals=[g for _, _, g in gathered])
        else:
            n_local = local[0].num_chains
            matrices, keys, diagnostics = self._chain_matrices(gather_object([local]), mode)
            advantages, estimator_diagnostics = self.compute_advantages(matrices, keys, num_gen)
            diagnostics.update(estimator_diagnostics)
        start = self.accelerator.process_index * n_local
        local_adv = advantages[start:start + n_local]
        out["advantages"] = torch.as_tensor(local_adv, dtype=out["advantages"].dtype,
                                            device=out["advantages"].device)
        self._patch_logged_advantages(advantages)
        for name, value in diagnostics.items():
            if isinstance(value, int | float | np.floating | np.integer) and math.isfinite(float(value)):
                self._metrics[mode][name].append(float(value))
        return out

    def _chain_matrices(self, gathered: Sequence[tuple[Any, list[Any]]], mode: str
                        ) -> tuple[list[np.ndarray], list[Any], dict[str, float]]:
        """The global batch's matrices (from every process's scored answers, in TRL's global
        order), their group keys and the per-step objective metrics."""
        from vpo.rewards import ScoredAnswers, finish_chains

        offset, owners, values, keys = 0, [], [], []
        for scored, local_keys in gathered:
            owners.append(scored.owners + offset)
            values.append(scored.values)
            keys.extend(local_keys)
            offset += scored.num_chains
        names = self.vpo_objective_names
        combined = ScoredAnswers(np.concatenate(owners), np.concatenate(values).reshape(-1, len(names)), names,
                                 offset)
        chains = finish_chains(combined, self.vpo_answers, keys, scaling=self.vpo_scaling)
        if self.vpo_spec.weights is not None or self.vpo_spec.conditions_prompt:
            # weights drawn over the objectives a group kept; a group that kept none scores nothing
            matrices = [mat if mat.shape[1] else np.zeros((0, 1)) for mat in chains.matrices]
        else:  # sums and per-objective norms: a dropped objective is a zero column (TRL's nansum)
            matrices = [chains.dense(i) for i in range(len(chains.matrices))]
        metrics = {f"vpo/{key}": value for key, value in chains.stats.items()}
        if 2 <= len(names) <= 4:
            for a in range(len(names)):
                for b in range(a + 1, len(names)):
                    metrics[f"vpo/correlation/{names[a]}~{names[b]}"] = float(chains.correlation[a, b])
        if mode == "train":
            self._check_collinear(chains.stats["effective_dim"], len(names))
        return matrices, keys, metrics

    def _check_collinear(self, effective_dim: float, dim: int) -> None:
        """Warn once when the effective dimension of D >= 2 objectives stays below
        ``COLLINEAR_EFFECTIVE_DIM`` for ``COLLINEAR_STEPS`` generation batches in a row."""
        from vpo.rewards import COLLINEAR_EFFECTIVE_DIM, CollinearObjectivesWarning

        if dim < 2 or not math.isfinite(effective_dim):
            return
        self._vpo_low_dim_steps = self._vpo_low_dim_steps + 1 if effective_dim < COLLINEAR_EFFECTIVE_DIM else 0
        if self._vpo_low_dim_steps >= COLLINEAR_STEPS and not self._vpo_warned_collinear:
            self._vpo_warned_collinear = True
            warnings.warn(
                f"the {dim} objectives' effective dimension stayed below {COLLINEAR_EFFECTIVE_DIM} for "
                f"{COLLINEAR_STEPS} batches (last {effective_dim:.3f}): the answers vary along about one direction "
                "(collinear objectives, or one that varies far more than the others: see scaling=), so a reward "
                "vector adds little over their sum (vpo/effective_dim, vpo/correlation/*; docs/own_rewards.md)",
                CollinearObjectivesWarning, stacklevel=2)

    def compute_advantages(self, rewards: Sequence[np.ndarray], keys: Sequence[str], num_generations: int,
                           goals: Sequence[Any] | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """Global advantages (B,) and diagnostics for matrices in TRL's global order (groups of
        ``num_generations`` contiguous rows, group keys ``keys``: example ids or prompt texts).
        Identical on every rank."""
        total = len(rewards)
        if total % num_generations:
            raise RuntimeError(f"VPOTrainer: {total} rollouts are not whole groups of {num_generations}")
        group_ids = np.arange(total) // num_generations
        spec = self.vpo_spec
        options = dict(self.vpo_options)
        if "scalar" in spec.options:
            options.setdefault("scalar", self._vpo_scalar)
        if spec.conditions_prompt:  # the weights are the ones the prompts state, not drawn here
            if goals is None or any(g is None for g in goals):
                raise ValueError(f"estimator {self.vpo_estimator_name!r} needs the goal weights its prompts state; "
                                 "build the data with goal weights (vpo train does; `vpo data export --method "
                                 f"{self.vpo_estimator_name}`)")
            options.pop("seed", None)
            options["goal_weights"] = np.stack(goals)
        elif spec.weights is not None:
            # keyed on the row's example_id, so two groups of one row get its weights, as in every engine
            options["weight_keys"] = list(keys)
            if spec.weights == "per_step":
                options["step"] = int(self.state.global_step)
        elif "step" in spec.options:
            options["step"] = int(self.state.global_step)
        result = self.vpo_estimator(list(rewards), group_ids, **options)
        advantages = np.asarray(result.advantages, dtype=np.float64).reshape(-1)
        if advantages.shape[0] != total:
            raise RuntimeError(f"estimator {self.vpo_estimator_name!r} returned {advantages.shape[0]} "
                               f"advantages for {total} rollouts")
        advantages = np.nan_to_num(advantages, nan=0.0)
        from vpo.step_metrics import score_metrics

        diagnostics = dict(getattr(result, "diagnostics", {}) or {})
        diagnostics.update(score_metrics(result.scores, group_ids))  # the names every engine logs
        return advantages, diagnostics

    def _patch_logged_advantages(self, advantages: np.ndarray) -> None:
        logged = self._logs.get("advantages")
        if logged is None:
            return
        values = list(logged)
        n = min(len(advantages), len(values))
        if n:
            values[-n:] = [float(a) for a in advantages[-n:]]
        maxlen = logged.maxlen if isinstance(logged, deque) else None
        self._logs["advantages"] = deque(values, maxlen=maxlen)


COLLINEAR_STEPS = 3
"""Generation batches in a row with a low effective dimension before ``VPOTrainer`` warns."""


class _WeightedSum:
    """The scalar baselines' reward of reward functions: sum_j weight_j r_j over the D objectives
    (TRL's ``reward_weights``, default all 1)."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = np.asarray(weights, dtype=np.float64)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows, dtype=np.float64) @ self.weights


def _function_width(func: Any) -> int:
    """How many objectives a reward function gives (a model's labels, a callable's declared names)."""
    from vpo.rewards import is_reward_model

    if is_reward_model(func):
        return int(getattr(func.config, "num_labels", 1) or 1)
    declared = getattr(func, "objective_names", None)
    return len(declared) if declared is not None else 1


@contextmanager
def _local_rewards():
    """``GRPOTrainer._calculate_rewards`` without its cross-process gather: the answers of a chain
    batch differ in number across processes, so VPOTrainer gathers them itself."""
    import trl.trainer.grpo_trainer as grpo_module

    saved = grpo_module.gather
    grpo_module.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo_module.gather = saved


def _goal(example: Example) -> np.ndarray | None:
    from vpo.goals import goal_of

    return goal_of(example)


class StageProgress(ProgressCallback):
    """transformers' training progress bar, labelled with its stage (tqdm ``desc``: ``warm-up: 40%|...``);
    ``logs=False`` keeps the per-step log dicts off the terminal (they stay in ``state.log_history``)."""

    def __init__(self, desc: str, *, logs: bool = True) -> None:
        super().__init__()
        self.desc, self.logs = desc, logs

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from tqdm.auto import tqdm

        if state.is_world_process_zero:  # as ProgressCallback's, with the label from the first frame
            self.training_bar = tqdm(total=state.max_steps, dynamic_ncols=True, desc=self.desc)
        self.current_step = 0

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.logs:
            super().on_log(args, state, control, logs=logs, **kwargs)


def step_line(logs: Mapping[str, Any], step: int, max_steps: int) -> str | None:
    """One short line for a training log (None for a log without a reward, e.g. the run's
    summary): step, objective (TRL's ``reward``: the set score the estimator optimises), the
    mean reward per objective, KL and seconds per step, each only when logged as a number."""
    def number(key: str) -> float | None:
        value = logs.get(key)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    if "reward" not in logs:
        return None
    parts = [f"step {step}/{max_steps}"]
    objective = number("reward")
    parts.append(f"objective {objective:.3f}" if objective is not None else "objective n/a")
    prefix = "vpo/objective/"
    per_objective = [f"{key[len(prefix):]} {number(key):.3f}" for key in logs
                     if key.startswith(prefix) and number(key) is not None]
    if per_objective:
        parts.append("(" + ", ".join(per_objective) + ")")
    if number("kl") is not None:
        parts.append(f"KL {number('kl'):.4f}")
    if number("step_time") is not None:
        parts.append(f"{number('step_time'):.2f} s/step")
    return "  ".join(parts)


class StepLines(TrainerCallback):
    """A compact line per logged training step on the terminal (``step_line``), and every log
    dict in full, one JSON object per line, in ``log_file`` (the trackers of ``report_to`` get
    them in full as well). With ``heartbeat`` (seconds; for a terminal without a progress bar),
    a step that ends that long after the last line prints ``step N/M`` too, so a run whose
    logged steps are far apart still shows it is alive."""

    def __init__(self, log_file: str | None = None, *, print_lines: bool = True,
                 heartbeat: float | None = None) -> None:
        self.log_file, self.print_lines, self.heartbeat = log_file, print_lines, heartbeat
        self.clock: Callable[[], float] = time.monotonic
        self._last_line = self.clock()

    def _write(self, line: str) -> None:
        from tqdm.auto import tqdm

        tqdm.write(line)   # above the progress bar, which then redraws
        self._last_line = self.clock()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last_line = self.clock()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if (self.heartbeat is not None and self.print_lines and state.is_world_process_zero
                and self.clock() - self._last_line >= self.heartbeat):
            total = f"/{state.max_steps}" if state.max_steps and state.max_steps > 0 else ""
            self._write(f"step {state.global_step}{total} (next logged step line: "
                        f"every {args.logging_steps} steps)")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if self.log_file:
            with open(self.log_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}, default=str) + "\n")
        line = step_line(logs, state.global_step, state.max_steps)
        if line and self.print_lines:
            self._write(line)


def label_progress(trainer: Any, desc: str, *, show: bool = True, logs: bool = True) -> None:
    """Give a transformers ``Trainer`` (TRL's included) a progress bar labelled ``desc``, or none
    (``show=False``; the terminal then gets no per-step lines either, only what the caller logs)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if show:
        trainer.add_callback(StageProgress(desc, logs=logs))

"""VPO for TRL 1.16: a reward function for the stock ``GRPOTrainer`` and a ``GRPOTrainer``
subclass that swaps TRL's advantages for any registered estimator.

Usage::

    from trl import GRPOConfig, GRPOTrainer
    from vpo.integrations.trl import VPOReward, VPOTrainer, RLConfig
    task = get_task("maze", size=5)

    # A. stock trainer, VPO set score as the reward (TRL keeps its own group normalisation)
    GRPOTrainer(model, reward_funcs=VPOReward(task, answers=3), args=cfg, train_dataset=ds)

    # B. subclass: the estimator sees every rollout's (m, D) reward matrix after the gather
    VPOTrainer(model, task=task, answers=3, estimator="vpo", args=cfg, train_dataset=ds,
               processing_class=tok).train()

    cfg = RLConfig().to_grpo_config("out", task="maze", answers=3)   # the paper's presets
                                                   # (RLConfig lives in vpo.commands.train)

The dataset needs a ``prompt`` column (string or chat messages) and an ``example`` column (the
task example as a dict or its JSON string), as written by ``vpo data --format trl``.

Shared weights: the K Dirichlet weights of a prompt group are drawn from
``keyed_rng(seed, prompt_key, global_step)``, a stable hash, so every rollout of the group and
every rank sees the same K vectors without communication, and ``VPOReward`` and
``VPOTrainer(estimator="vpo")`` give the same set scores.

``VPOTrainer`` relies on two private TRL methods, ``_calculate_rewards`` and
``_generate_and_score_completions`` (maintainer-endorsed for subclassing, TRL #4525);
``check_trl_hooks`` verifies their signatures at construction and fails with a clear message if
a TRL release changed them.
"""

from __future__ import annotations

import inspect
import json
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer

from vpo.commands.train import TASK_EPOCHS, RLConfig  # re-exported: the presets live with the CLI
from vpo.tasks.base import Example, Task

__all__ = [
    "EXPECTED_TRL_HOOKS",
    "RLConfig",
    "TASK_EPOCHS",
    "VPOReward",
    "VPOTrainer",
    "check_trl_hooks",
    "completion_text",
    "group_weights",
    "parse_example",
    "prompt_key",
]

EXPECTED_TRL_HOOKS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
}
"""Parameter names of the private GRPOTrainer methods VPOTrainer overrides (TRL 1.16)."""

WEIGHTED_ESTIMATORS = frozenset({"vpo"})
"""Estimators that receive the shared per-group weights keyed on (seed, prompt, step)."""

SINGLE_ANSWER_ESTIMATORS = frozenset({"grpo", "max_at_k", "maxrl", "random_weight"})
"""Built-in estimators that take one answer per rollout (answers must be 1)."""


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
    if problems:
        raise RuntimeError(
            f"VPOTrainer needs GRPOTrainer's private hooks as in trl 1.16, but trl {trl.__version__} has: "
            + "; ".join(problems)
            + ". Pin trl==1.16.*, or use VPOReward with the stock GRPOTrainer (public API).")


def prompt_key(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """Stable text key of a prompt: the string itself, or the canonical JSON of chat messages."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(list(prompt), sort_keys=True, ensure_ascii=False, default=str)


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The generated text of a completion: a string, or the concatenated ``content`` of the
    assistant messages of a chat completion."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
            content = message.get("content", "")
            if isinstance(content, list):  # content blocks
                content = "".join(block.get("text", "") for block in content if isinstance(block, Mapping))
            parts.append(str(content or ""))
    return "".join(parts)


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
    """The (K, D) Dirichlet weights shared by a prompt group at ``step``:
    ``sample_simplex(K, D, alpha, method=sampler, rng=keyed_rng(seed, key, step))``."""
    from vpo.weights import keyed_rng, sample_simplex

    return np.asarray(sample_simplex(num, dim, alpha=alpha, method=sampler,
                                     rng=keyed_rng(int(seed), str(key), int(step))), dtype=np.float64)


def _answer_stats(task: Task, text: str, m: int) -> tuple[int, int]:
    """(non-empty answers parsed, textual duplicates among them) of one generation."""
    if m == 1:
        return (1 if text.strip() else 0), 0
    answers = [" ".join(a.split()) for a in task.parse_chain(text, m)]
    answers = [a for a in answers if a]
    return len(answers), len(answers) - len(set(answers))


def _row_values(kwargs: Mapping[str, Any], column: str, n: int) -> list[Any]:
    values = kwargs.get(column)
    if values is None:
        raise ValueError(f"the dataset needs an {column!r} column (the task example as JSON); "
                         "build it with `vpo data --format trl` or vpo.integrations.trl helpers")
    if len(values) != n:
        raise ValueError(f"column {column!r} has {len(values)} values for {n} completions")
    return list(values)


def _log_chain_metrics(log: Callable[[str, float], None], task: Task, examples: Sequence[Example],
                       texts: Sequence[str], matrices: Sequence[np.ndarray], m: int) -> None:
    """Per-objective best-in-chain means, answers parsed per chain, duplicate rate."""
    parsed = dup = 0
    for text in texts:
        n_ans, n_dup = _answer_stats(task, text, m)
        parsed += n_ans
        dup += n_dup
    log("vpo/answers_parsed", parsed / max(len(texts), 1))
    log("vpo/duplicate_rate", dup / parsed if parsed else 0.0)
    names = task.objective_names(examples[0]) if examples else ()
    if names and all(mat.shape[1] == len(names) for mat in matrices):
        best = np.stack([mat.max(axis=0) if mat.size else np.zeros(len(names)) for mat in matrices])
        for j, name in enumerate(names):
            log(f"vpo/objective/{name}", float(best[:, j].mean()))


# ----------------------------------------------------------------------------------------------
# A. reward function for the stock GRPOTrainer
# ----------------------------------------------------------------------------------------------
class VPOReward:
    """VPO set score as a TRL reward function (one float per completion).

    ``VPOReward(task, answers=m, seed=0, num_weights=100, alpha=1.0, sampler="iid")`` scores each
    completion with ``task.score_chain(text, example, m)`` -> (m, D) and returns
    R = mean_k max_i w_k . r_i, with the K weights of a prompt drawn from
    ``keyed_rng(seed, prompt_key(prompt), global_step)`` (identical for all G rollouts of the
    prompt on every rank). Needs the dataset column ``example``. Logs through TRL's
    ``log_metric``: ``vpo/objective/<name>`` (best answer's value per objective, mean over
    rollouts), ``vpo/answers_parsed`` and ``vpo/duplicate_rate``.
    """

    __name__ = "vpo"

    def __init__(self, task: Task, answers: int = 3, *, seed: int = 0, num_weights: int = 100,
                 alpha: float = 1.0, sampler: str = "iid") -> None:
        if not isinstance(answers, int) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        if num_weights < 1:
            raise ValueError(f"num_weights must be >= 1, got {num_weights}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.task = task
        self.answers = answers
        self.seed = int(seed)
        self.num_weights = int(num_weights)
        self.alpha = float(alpha)
        self.sampler = sampler

    def weights(self, prompt: Any, step: int, dim: int) -> np.ndarray:
        """The (K, D) weights of ``prompt``'s group at ``step``."""
        return group_weights(self.seed, prompt_key(prompt), step, self.num_weights, dim,
                             alpha=self.alpha, sampler=self.sampler)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        n = len(completions)
        raw_examples = _row_values(kwargs, "example", n)
        examples = [parse_example(value, row) for row, value in enumerate(raw_examples)]
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        texts = [completion_text(c) for c in completions]
        matrices = [np.asarray(self.task.score_chain(t, ex, self.answers), dtype=np.float64)
                    for t, ex in zip(texts, examples, strict=True)]
        cache: dict[tuple[str, int], np.ndarray] = {}
        row_weights = []
        for prompt, matrix in zip(prompts, matrices, strict=True):
            key = (prompt_key(prompt), matrix.shape[1])
            if key not in cache:
                cache[key] = self.weights(prompt, step, matrix.shape[1])
            row_weights.append(cache[key])
        from vpo.objective import set_scores

        scores = [float(x) for x in set_scores(matrices, row_weights)] if matrices else []
        log = kwargs.get("log_metric")
        if callable(log):
            _log_chain_metrics(log, self.task, examples, texts, matrices, self.answers)
        return scores


# ----------------------------------------------------------------------------------------------
# B. GRPOTrainer subclass with pluggable estimators
# ----------------------------------------------------------------------------------------------
class _ChainScalarReward:
    """VPOTrainer's internal TRL reward: the best answer's fixed task scalar per chain.

    TRL logs it as ``rewards/task/mean`` and ``reward``; its advantages are replaced. It reads the
    matrices the trainer scored just before, so nothing is scored twice.
    """

    __name__ = "task"

    def __init__(self, trainer: VPOTrainer) -> None:
        self._trainer = trainer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        matrices = self._trainer._vpo_local_matrices
        if matrices is None or len(matrices) != len(completions):
            raise RuntimeError("VPOTrainer: reward matrices missing for this batch (TRL hook order changed?)")
        task = self._trainer.vpo_task
        return [float(np.max(task.scalar(mat))) if mat.shape[0] else 0.0 for mat in matrices]


class VPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from a ``vpo.estimators`` estimator computed on the
    gathered (m, D) reward matrices of the whole generation batch.

    ``VPOTrainer(model, task=task, answers=m, estimator="vpo", estimator_options=None,
    args=GRPOConfig(...), train_dataset=ds, processing_class=tok, ...)``; other keyword arguments
    go to ``GRPOTrainer`` (``reward_funcs`` is not accepted: the task supplies the reward).

    ``estimator_options`` are the estimator's own options (``num_weights``, ``alpha``,
    ``sampler``, ``seed``, ``std``, ``eps``, ``degenerate``, ``scale``, ``k``, ...; each
    estimator's defaults are the authors'; TRL's normalisation is ``std="sample", eps=1e-4,
    degenerate="none"``). The trainer supplies ``group_ids`` (G contiguous rows per prompt, in
    TRL's global order), ``scalar`` (the task's fixed scalarisation) where accepted, ``step``
    (the global step) and ``seed`` (default ``args.seed``) where accepted, and, for ``vpo``,
    explicit ``weights`` per group drawn from (seed, prompt, step) exactly as ``VPOReward``
    draws them. Diagnostics are logged as TRL metrics under their ``vpo/...`` names.
    """

    def __init__(self, model: Any, *, task: Task, answers: int = 1, estimator: str = "vpo",
                 estimator_options: Mapping[str, Any] | None = None, args: GRPOConfig | None = None,
                 **kwargs: Any) -> None:
        check_trl_hooks(GRPOTrainer)
        if "reward_funcs" in kwargs:
            raise ValueError("VPOTrainer computes rewards from task=; do not pass reward_funcs "
                             "(use the stock GRPOTrainer with VPOReward for a reward-function setup)")
        if not isinstance(answers, int) or answers < 1:
            raise ValueError(f"answers must be a positive integer, got {answers!r}")
        if estimator in SINGLE_ANSWER_ESTIMATORS and answers != 1:
            raise ValueError(f"estimator {estimator!r} scores one answer per rollout; use answers=1 "
                             "(or 'vpo' / 'multi_rlvr' for multi-answer chains)")
        from vpo.estimators import get_estimator

        self.vpo_task = task
        self.vpo_answers = answers
        self.vpo_estimator_name = estimator
        self.vpo_estimator = get_estimator(estimator)  # ValueError for unknown names
        self.vpo_options = dict(estimator_options or {})
        accepted = set(getattr(self.vpo_estimator, "options", ()) or ())
        reserved = {"weights", "rng", "step"} if estimator in WEIGHTED_ESTIMATORS else {"rng", "step"}
        clash = sorted(reserved & set(self.vpo_options))
        if clash:
            raise ValueError(f"estimator_options {clash} are set by VPOTrainer (weights and steps are keyed on "
                             "(seed, prompt, global_step)); remove them")
        unknown = sorted(set(self.vpo_options) - accepted) if accepted else []
        if unknown:
            raise ValueError(f"estimator {estimator!r} does not accept option(s) {unknown}; "
                             f"it accepts {sorted(accepted)}")
        self._vpo_local_matrices: list[np.ndarray] | None = None
        self._vpo_local_keys: list[str] | None = None
        train_dataset = kwargs.get("train_dataset")
        columns = getattr(train_dataset, "column_names", None)
        if columns is not None and "example" not in columns:
            raise ValueError(f"train_dataset needs an 'example' column (task example as JSON); it has {columns}")
        super().__init__(model, reward_funcs=[_ChainScalarReward(self)], args=args, **kwargs)
        if self.vpo_options.get("seed") is None and (estimator in WEIGHTED_ESTIMATORS or "seed" in accepted):
            self.vpo_options["seed"] = int(self.args.seed)

    # -- hook 1: score the local completions, stash the matrices, let TRL run its reward funcs --
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        raw = [row.get("example") for row in inputs]
        if any(value is None for value in raw):
            raise ValueError("VPOTrainer: every row needs an 'example' column (the task example as JSON)")
        examples = [parse_example(value, row) for row, value in enumerate(raw)]
        texts = [completion_text(c) for c in completions]
        self._vpo_local_matrices = [
            np.asarray(self.vpo_task.score_chain(t, ex, self.vpo_answers), dtype=np.float64)
            for t, ex in zip(texts, examples, strict=True)]
        self._vpo_local_keys = [prompt_key(p) for p in prompts]
        _log_chain_metrics(self._log_metric, self.vpo_task, examples, texts,
                           self._vpo_local_matrices, self.vpo_answers)
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    # -- hook 2: replace the advantages with the estimator's, computed on the global batch --
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if "advantages" not in out:
            raise RuntimeError("VPOTrainer: TRL's batch has no 'advantages' (TRL internals changed)")
        mode = "train" if self.model.training else "eval"
        local = self._vpo_local_matrices
        keys = self._vpo_local_keys
        self._vpo_local_matrices = self._vpo_local_keys = None
        if local is None or keys is None:
            raise RuntimeError("VPOTrainer: _calculate_rewards did not run for this batch")
        gathered = gather_object(list(zip(keys, local, strict=True)))
        all_keys = [k for k, _ in gathered]
        rewards = [mat for _, mat in gathered]
        num_gen = self.num_generations if mode == "train" else (
            getattr(self, "num_generations_eval", None) or self.num_generations)
        advantages, diagnostics = self.compute_advantages(rewards, all_keys, num_gen)
        n_local = len(local)
        start = self.accelerator.process_index * n_local
        local_adv = advantages[start:start + n_local]
        out["advantages"] = torch.as_tensor(local_adv, dtype=out["advantages"].dtype,
                                            device=out["advantages"].device)
        self._patch_logged_advantages(advantages)
        for name, value in diagnostics.items():
            if isinstance(value, int | float | np.floating | np.integer) and math.isfinite(float(value)):
                self._metrics[mode][name].append(float(value))
        return out

    def compute_advantages(self, rewards: Sequence[np.ndarray], keys: Sequence[str],
                           num_generations: int) -> tuple[np.ndarray, dict[str, float]]:
        """Global advantages (B,) and diagnostics for matrices in TRL's global order (groups of
        ``num_generations`` contiguous rows). Identical on every rank."""
        total = len(rewards)
        if total % num_generations:
            raise RuntimeError(f"VPOTrainer: {total} rollouts are not whole groups of {num_generations}")
        group_ids = np.arange(total) // num_generations
        step = int(self.state.global_step)
        options = dict(self.vpo_options)
        accepted = set(getattr(self.vpo_estimator, "options", ()) or ())
        if "scalar" in accepted:
            options.setdefault("scalar", self.vpo_task.scalar)
        if self.vpo_estimator_name in WEIGHTED_ESTIMATORS:
            # the weights VPOReward would draw: keyed on (seed, prompt, step), one set per group
            seed = options.pop("seed")
            num = int(options.pop("num_weights", None) or 100)
            alpha = float(options.pop("alpha", None) or 1.0)
            sampler = str(options.pop("sampler", None) or "iid")
            options["weights"] = {
                int(g): group_weights(seed, keys[g * num_generations], step, num,
                                      rewards[g * num_generations].shape[1], alpha=alpha, sampler=sampler)
                for g in range(total // num_generations)}
        elif "step" in accepted:
            options["step"] = step
        result = self.vpo_estimator(list(rewards), group_ids, **options)
        advantages = np.asarray(result.advantages, dtype=np.float64).reshape(-1)
        if advantages.shape[0] != total:
            raise RuntimeError(f"estimator {self.vpo_estimator_name!r} returned {advantages.shape[0]} "
                               f"advantages for {total} rollouts")
        advantages = np.nan_to_num(advantages, nan=0.0)
        return advantages, dict(getattr(result, "diagnostics", {}) or {})

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

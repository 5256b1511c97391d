"""``VPOTrainer``: TRL's ``GRPOTrainer`` whose advantages come from any registered estimator.

Usage::

    from vpo.integrations.trl import VPOTrainer
    VPOTrainer(model, task=task, answers=3, estimator="vpo", args=cfg, train_dataset=ds,
               processing_class=tok).train()                                   # a vpo task scores the chains
    VPOTrainer(model, reward_funcs=[accuracy, format_ok, brevity], answers=3, args=cfg,
               train_dataset=ds_with_a_prompt_column).train()                  # docs/own_rewards.md

One path for both: TRL calls the trainer's one reward function, which scores the local
completions with its scorer (``TaskScorer`` or ``FunctionScorer``: the (M, D) matrices, once) and
returns the estimator's per-rollout score (its registered reduction, ``rollout_score``); TRL
gathers those scores, the trainer applies the estimator's advantage rule to them
(``advantages_from_scores``), as the verl plugin does, and installs the advantages in TRL's batch.
GDPO, which has no per-rollout reduction, gets the gathered matrices instead.

Private TRL members touched (``PRIVATE_MEMBERS``, checked at construction: a TRL without one fails
in one line): ``GRPOTrainer._calculate_rewards`` and ``_generate_and_score_completions`` (overridden,
each calling TRL's own), ``_log_metric`` (behind the public ``log_metric``) and ``_logs`` (the
completions table's advantages).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer

from vpo.estimators import (WEIGHT_OPTIONS, WeightOptions, advantages_from_scores, get_spec, reduction_context,
                            rollout_score)
from vpo.integrations.trl.config import map_trl_options
from vpo.integrations.trl.scorers import FunctionScorer, ScoredChains, TaskScorer
from vpo.reward_failures import RewardFailurePolicy, RewardFailures
from vpo.step_metrics import ParseWatch, StillObjectiveWatch, score_metrics
from vpo.tasks.base import Example, Task

__all__ = ["COLLINEAR_STEPS", "EXPECTED_TRL_HOOKS", "PRIVATE_MEMBERS", "TRL_VERSIONS", "VPOTrainer",
           "check_trl_hooks", "reference_checkpoint"]

TRL_VERSIONS = "1.16.*"
"""The TRL releases VPOTrainer is written against (pyproject's ``trl`` pin)."""

EXPECTED_TRL_HOOKS: dict[str, tuple[str, ...]] = {
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_log_metric": ("self", "name", "value"),
}
"""Parameter names of the private GRPOTrainer methods VPOTrainer overrides or calls (TRL 1.16)."""

PRIVATE_MEMBERS = (*EXPECTED_TRL_HOOKS, "_logs")
"""Every private GRPOTrainer member VPOTrainer touches (``_logs``: an attribute set by ``__init__``)."""

COLLINEAR_STEPS = 3
"""Generation batches in a row with a low effective dimension before ``VPOTrainer`` warns."""


def _unsupported(member: str, why: str) -> RuntimeError:
    import trl

    return RuntimeError(f"VPOTrainer needs GRPOTrainer.{member} ({why}), which trl {trl.__version__} does not have; it "
                        f"supports trl {TRL_VERSIONS} (pip install 'trl=={TRL_VERSIONS}'), or use VPOReward with the "
                        "stock GRPOTrainer (public API)")


def check_trl_hooks(cls: type | None = None) -> None:
    """Raise RuntimeError, in one line naming the member and the supported TRL versions, if ``cls``
    (default ``GRPOTrainer``) lacks a private method VPOTrainer uses, or has it with other parameters."""
    cls = GRPOTrainer if cls is None else cls
    for name, expected in EXPECTED_TRL_HOOKS.items():
        method = getattr(cls, name, None)
        if method is None:
            raise _unsupported(name, "a private method")
        got = tuple(inspect.signature(method).parameters)
        if got != expected:
            raise _unsupported(f"{name}{expected}".replace("'", ""), f"a private method, here {name}{got}")


class _ScoreColumn:
    """The one reward function TRL calls: the estimator's per-rollout scores of the local completions."""

    def __init__(self, name: str, trainer: VPOTrainer) -> None:
        self.__name__ = name
        self.trainer = trainer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any],
                 **columns: Any) -> list[float]:
        return self.trainer.score_completions(prompts, completions, completion_ids, columns)


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


def _cut_budgets(funcs: Sequence[Any], args: Any) -> list[str]:
    """A line for each of TRL's overlong punishments whose length budget lies past the completion
    length the trainer generates: a chain is cut before it could be punished in full."""
    limit = getattr(args, "max_completion_length", None)
    lines = []
    for func in funcs:
        budget = getattr(func, "max_completion_len", None)
        if isinstance(limit, int) and isinstance(budget, int) and budget > limit:
            lines.append(f"warning: {getattr(func, '__name__', 'overlong')} punishes past {budget} tokens, but "
                         f"completions stop at max_completion_length {limit}: raise it to {budget} or more, or the "
                         "punishment never reaches its full value")
    return lines


def _reward_funcs(reward_funcs: Any, classes: Any) -> tuple[list[Any], list[Any]]:
    """The functions as a list, model ids loaded with all their labels (TRL would keep the first),
    and one processing class each (a model without one gets its checkpoint's tokenizer, as in TRL)."""
    from vpo.rewards import is_reward_model, load_reward_model

    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if not funcs:
        raise ValueError("reward_funcs is empty: give at least one reward function")
    classes = list(classes) if isinstance(classes, list | tuple) else [classes] * len(funcs)
    if len(classes) != len(funcs):
        raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(funcs)} reward functions")
    for i, func in enumerate(funcs):
        if isinstance(func, str):
            funcs[i], tokenizer = load_reward_model(func)
            classes[i] = classes[i] if classes[i] is not None else tokenizer
        elif is_reward_model(func) and classes[i] is None:
            from transformers import AutoTokenizer

            classes[i] = AutoTokenizer.from_pretrained(func.config._name_or_path)
        if is_reward_model(funcs[i]):
            if classes[i].pad_token_id is None:
                classes[i].pad_token = classes[i].eos_token
            funcs[i].config.pad_token_id = classes[i].pad_token_id
    return funcs, classes


def _check_ref_model(ref_model: Any, model: Any, args: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse a ``ref_model`` GRPOTrainer would not use (no KL term, or LoRA, whose reference is the
    model with its adapter off) or could not be given (no ``config``, no processing class)."""
    if ref_model is None:
        return
    if getattr(ref_model, "config", None) is None or not hasattr(ref_model, "save_pretrained"):
        raise ValueError(f"ref_model must be a transformers model (save_pretrained, config), got "
                         f"{type(ref_model).__name__}")
    if isinstance(model, str):
        raise ValueError("ref_model= needs the policy as a model object, not a name: TRL loads a named policy's "
                         "reference by that name")
    beta = float(getattr(args, "beta", 0.0) or 0.0) if args is not None else 0.0
    if beta == 0.0:
        raise ValueError("ref_model= is the KL reference, but args.beta is 0 (no KL term): drop ref_model or set beta")
    if kwargs.get("peft_config") is not None or getattr(model, "peft_config", None):
        raise ValueError("ref_model= is for full fine-tuning: with a LoRA adapter TRL's reference is the model with "
                         "its adapter off")
    if kwargs.get("processing_class") is None:
        raise ValueError("ref_model= needs processing_class= (the policy's tokenizer)")


@contextlib.contextmanager
def reference_checkpoint(policy: Any, reference: Any) -> Iterator[str]:
    """While GRPOTrainer builds its KL reference, the policy's name (``config._name_or_path``, what
    TRL re-loads the reference from) is a temporary folder holding ``reference``'s weights
    (``save_pretrained``; the same object as ``policy``: its weights now). Yields the folder;
    the name is restored and the folder removed on exit. The folder lies in the system's
    temporary directory (``TMPDIR``), one per process, as large as the weights."""
    import tempfile

    kept = policy.config._name_or_path
    with tempfile.TemporaryDirectory(prefix="vpo-kl-reference-") as folder:
        reference.save_pretrained(folder)
        policy.config._name_or_path = folder
        try:
            yield folder
        finally:
            policy.config._name_or_path = kept


class VPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from a ``vpo.estimators`` estimator on the whole
    generation batch. Two ways to give the objectives, exactly one of them:

    * ``VPOTrainer(model, reward_funcs=[f1, f2, f3], answers=m, estimator="vpo", args=GRPOConfig(...),
      train_dataset=ds)``: a ``GRPOTrainer`` script switched by its class name and ``answers=``. Each
      reward function (what ``GRPOTrainer`` takes: callables, sync or async, model ids, sequence-
      classification models with ``reward_processing_classes``) is one objective (a multi-head model,
      or a callable with ``objective_names``, several). With m > 1 each prompt is rewritten to ask
      for m answers in ``<response_i>`` tags, and every answer is scored on its own by the trainer's
      call loop (``call_reward_funcs``: each function once per step on all answers, with what TRL
      passes: the dataset's columns, ``trainer_state``, ``log_metric``, ``log_extra``); a
      chain-level function (``vpo.rewards.is_chain_level``) is called once per completion and is a
      shared objective. ``vpo.rewards.finish_chains`` applies the ``None`` rule, ``scaling`` (per
      objective, ``vpo.rewards.SCALINGS``), dedup and padding; ``reward_names`` renames the
      objectives. With m = 1 the completion is scored as ``GRPOTrainer`` scores it.
    * ``VPOTrainer(model, task=task, answers=m, ...)``: a ``vpo.tasks`` task scores the chains
      (the dataset's ``example`` column; override ``score_rollouts`` to change how).

    ``estimator`` is any registered name. Its per-rollout score (``reduction_context``: keyed
    weights on (seed, example_id, global step) as ``VPOReward``, verl and OpenRLHF key them, the
    task's fixed scalar or the ``reward_weights`` sum, the goal weights the examples state) is
    TRL's reward (``reward``, ``rewards/<scorer>/mean``); its advantage rule runs on the scores
    TRL gathered. ``estimator_options`` are the estimator's other options (each estimator's
    defaults are the authors'; TRL's normalisation is ``TRL_NORM``).

    ``untagged_fallback``: a completion with no parseable answer counts as one answer, its whole
    text (docs/own_rewards.md). ``chat_prompts``: string prompts are sent as one user turn (the
    chat template), while the functions get the strings and text completions, as in the data. A
    chain-level length budget is one answer's, scaled by m (``vpo.rewards.at_answers``; said in
    ``vpo_length_budgets``), and a column a function requires and ``train_dataset`` lacks is named
    at construction. ``reward_failures``: the ``RewardFailurePolicy`` of the functions
    (or of the task's scorers). TRL options with a VPO meaning are mapped, the others refused
    (``vpo.integrations.trl.config.map_trl_options``).

    ``ref_model``: the KL reference's weights, a model object (``model`` itself: its weights as they
    are now, before training), for full fine-tuning with ``beta != 0``. Without it GRPOTrainer
    re-loads the reference by the policy's name (``config._name_or_path``), which fails for a
    model that cannot be re-loaded so or was changed after loading: a ``.gguf`` file, a tokenizer's
    new ``<pad>`` row (``vpo.models.load_pretrained``). With it, TRL loads its reference, as ever,
    from a folder that holds ``ref_model``'s weights (``reference_checkpoint``), so it gets TRL's
    dtype, attention and dropout settings and placement.
    """

    def __init__(self, model: Any, reward_funcs: Any = None, args: GRPOConfig | None = None,
                 train_dataset: Any = None, *, task: Task | None = None, answers: int = 1,
                 estimator: str = "vpo", estimator_options: Mapping[str, Any] | None = None,
                 scaling: Any = None, reward_names: Sequence[Any] | None = None,
                 reward_processing_classes: Any = None, reward_failures: Any = None,
                 untagged_fallback: bool = False, chat_prompts: bool = False, ref_model: Any = None,
                 **kwargs: Any) -> None:
        check_trl_hooks(GRPOTrainer)
        _check_ref_model(ref_model, model, args, kwargs)
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
        for flag, value in (("untagged_fallback", untagged_fallback), ("chat_prompts", chat_prompts)):
            if not isinstance(value, bool):
                raise ValueError(f"{flag} must be True or False, got {value!r}")
        if chat_prompts and task is not None:
            raise ValueError("chat_prompts= applies to reward_funcs=; a task's data holds its own chat turns")
        self.vpo_task, self.vpo_answers, self.vpo_spec = task, answers, spec
        self.vpo_estimator_name, self.vpo_estimator = estimator, spec.fn
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
        idle = sorted(set(self.vpo_options) - set(spec.reduction_options) - set(spec.advantage_options) - {"scalar"})
        if self._by_rule(spec) and idle:  # the rule path runs the two halves only: say so rather than ignore
            raise ValueError(f"estimator {estimator!r}: option(s) {idle} act in neither its per-rollout reduction nor "
                             "its advantage rule, which are what VPOTrainer runs; remove them")
        if spec.weights is not None:  # explicit zero K or alpha raise here, not at the first step
            WeightOptions(**{k: v for k, v in self.vpo_options.items() if k in ("num_weights", "alpha", "sampler")})
        self._vpo_chains: ScoredChains | None = None
        self._vpo_advantages: np.ndarray | None = None
        self._vpo_low_dim_steps = 0
        self._vpo_warned_collinear = False
        self._vpo_parse_watch = ParseWatch(answers, fallback=untagged_fallback)
        self._vpo_still_watch = StillObjectiveWatch()
        self.vpo_scorer: TaskScorer | FunctionScorer
        if task is not None:
            columns = getattr(train_dataset, "column_names", None)
            if columns is not None and "example" not in columns:
                raise ValueError(f"train_dataset needs an 'example' column (task example as JSON); it has {columns}")
            if reward_failures is not None:  # the task's scorers under this policy
                task.failures = task.failures.with_policy(reward_failures)
            map_trl_options(args, spec, self.vpo_options, None)
            self._vpo_scalar = task.scalar
            self.vpo_scorer = TaskScorer(task, answers, log=self.log_metric, rollouts=self.score_rollouts,
                                         untagged_fallback=untagged_fallback, goals=spec.conditions_prompt)
        else:
            from vpo.rewards import at_answers, check_columns, check_scaling, function_name, reward_objective_names

            self.vpo_funcs, self.vpo_classes = _reward_funcs(reward_funcs, reward_processing_classes)
            columns = getattr(train_dataset, "column_names", None)
            if columns is not None:  # a column a function needs and the data lacks: named before any step
                check_columns(self.vpo_funcs, columns, trainer=True, where="train_dataset")
            # a chain-level length budget is one answer's: m answers are judged against m times it
            self.vpo_funcs, self.vpo_length_budgets = at_answers(self.vpo_funcs, answers)
            self.vpo_length_budgets += _cut_budgets(self.vpo_funcs, args)
            self.vpo_failures = RewardFailures(reward_failures, names=[function_name(f) for f in self.vpo_funcs])
            self.vpo_objective_names = reward_objective_names(self.vpo_funcs, reward_names)
            scaling = check_scaling(scaling, self.vpo_objective_names)
            weights = map_trl_options(args, spec, self.vpo_options, [_function_width(f) for f in self.vpo_funcs])
            self._vpo_scalar = _WeightedSum(weights if weights is not None
                                            else np.ones(len(self.vpo_objective_names)))
            self.vpo_scorer = FunctionScorer(
                self.vpo_funcs, answers, names=self.vpo_objective_names, call=self.call_reward_funcs,
                gather=gather_object, rank=lambda: self.accelerator.process_index, log=self.log_metric,
                failures=self.vpo_failures, reward_names=reward_names, scaling=scaling,
                keep_columns=spec.weights is not None or spec.conditions_prompt, untagged_fallback=untagged_fallback,
                chat_prompts=chat_prompts)
        # TRL sees one reward function, the estimator's score: its reward_weights were mapped above
        kept_weights = getattr(args, "reward_weights", None)
        if kept_weights is not None:
            args.reward_weights = None
        reference = reference_checkpoint(model, ref_model) if ref_model is not None else contextlib.nullcontext()
        try:
            with reference:
                super().__init__(model, reward_funcs=_ScoreColumn(self.vpo_scorer.name, self), args=args,
                                 train_dataset=train_dataset, **kwargs)
        finally:
            if kept_weights is not None:
                args.reward_weights = kept_weights
        if not isinstance(getattr(self, "_logs", None), dict):
            raise _unsupported("_logs", "the completions table GRPOTrainer.__init__ sets")
        if len(self.reward_funcs) != 1:
            raise ValueError("VPOTrainer scores the rollouts itself: an environment_factory whose environments define "
                             "get_reward would add a reward VPO cannot see; give that reward as a reward function")
        self._prepare_reward_models()
        if self.vpo_options.get("seed") is None and "seed" in spec.options:
            self.vpo_options["seed"] = int(self.args.seed)

    @staticmethod
    def _trains_on_a_scalar(spec: Any) -> bool:
        """Whether ``spec``'s per-rollout score is a fixed scalar of the objectives (no weights
        drawn or stated, a reduction that needs no whole vectors): GRPO, MaxRL, max@k, multi-RLVR."""
        return spec.reduce is not None and spec.weights is None and not spec.conditions_prompt

    @staticmethod
    def _by_rule(spec: Any) -> bool:
        """Whether the trainer runs ``spec`` as its two halves (a reduction TRL gets, a rule on what
        TRL gathered); otherwise the whole estimator on the gathered matrices (GDPO)."""
        return spec.reduce is not None and spec.advantage is not None

    def _prepare_reward_models(self) -> None:
        """Reward models on the training device in evaluation mode, as GRPOTrainer places its own."""
        from vpo.rewards import is_reward_model

        for i, func in enumerate(getattr(self, "vpo_funcs", ())):
            if is_reward_model(func):
                if self.is_deepspeed_enabled:
                    from trl.models import prepare_deepspeed

                    self.vpo_funcs[i] = prepare_deepspeed(func, self.accelerator)
                else:
                    self.vpo_funcs[i] = self.accelerator.prepare_model(func, evaluation_mode=True,
                                                                       device_placement=True)

    # -- the public hooks ------------------------------------------------------------------------
    def log_metric(self, name: str, value: float) -> None:
        """Log a scalar for the current generation batch: the one way VPOTrainer and its subclasses
        log. Values are averaged over the batch's calls and over the processes, and written with the
        step's logs (TRL's ``log_metric``, the hook its reward functions get)."""
        self._log_metric(name, float(value))

    def score_rollouts(self, prompts: Sequence[Any], completions: Sequence[Any],
                       completion_ids: Sequence[Sequence[int]], examples: Sequence[Example]) -> list[np.ndarray]:
        """With ``task=``: the (m, D) reward matrix of each local completion, each scored once (the
        chain metrics are logged from the same pass). Override to change how rollouts are scored
        (the demo zeroes truncated ones); the estimator and TRL's logged reward read what this returns."""
        return self.vpo_scorer.chains(prompts, completions, completion_ids, examples)

    def chain_prompt(self, prompt: Any) -> Any:
        """The prompt the model is sent for a dataset prompt (m answers asked for in tags)."""
        return self.vpo_scorer.chain_prompt(prompt)

    def call_reward_funcs(self, prompts: Sequence[Any], completions: Sequence[Any],
                          columns: Mapping[str, Sequence[Any]], funcs: Sequence[Any] | None = None) -> list[np.ndarray]:
        """The trainer's call loop (``vpo.rewards.call_reward_funcs``): each of ``funcs`` (default: the
        answer-level reward functions) once on the P given answers, one (P,) or (P, H) array each,
        under the failure policy. ``columns`` hold the dataset columns and what TRL passes
        (``trainer_state``, ``log_metric``, ``log_extra``, ``completion_ids``: each answer's tokens,
        from the processing class when missing). Models score with every head, async functions run
        together, ``None`` is NaN."""
        from vpo.rewards import call_reward_funcs, is_chain_level

        if funcs is None:
            funcs = [f for f in self.vpo_funcs if not is_chain_level(f)]
        classes = [self.vpo_classes[next(i for i, f in enumerate(self.vpo_funcs) if f is func)] for func in funcs]
        return call_reward_funcs(funcs, prompts, completions, columns, reward_processing_classes=classes,
                                 failures=self.vpo_failures, tokenizer=self.processing_class)

    def score_completions(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any],
                          columns: Mapping[str, Any]) -> list[float]:
        """The reward TRL gets for this process's completions: the scorer's matrices, reduced to the
        estimator's per-rollout scores (``rollout_scores``); the parse rate and the objectives'
        effective dimension are watched."""
        chains = self.vpo_scorer.score(prompts, completions, completion_ids, columns)
        if len(chains.matrices) != len(completions):
            raise RuntimeError(f"the scorer gave {len(chains.matrices)} matrices for {len(completions)} completions")
        self._vpo_chains = chains
        if self.model.training:
            if self.accelerator.is_main_process:
                self._vpo_parse_watch.update(chains.parsed, chains.total)
                if chains.answer_values is not None:
                    self._vpo_still_watch.update(chains.answer_values, chains.names)
            self._check_collinear(chains.effective_dim, chains.dim)
        return self.rollout_scores(chains.matrices, chains.keys, chains.goals)

    def rollout_scores(self, matrices: Sequence[np.ndarray], keys: Sequence[str], goals: Sequence[Any]) -> list[float]:
        """The estimator's own per-rollout score (its registered reduction, keyed as the estimator
        keys its weights): what TRL logs as ``reward`` and gathers for the advantage rule; the best
        answer's fixed scalar for an estimator with no reduction (GDPO)."""
        spec, options = self.vpo_spec, self.vpo_options
        scalar = options.get("scalar", self._vpo_scalar)
        if spec.reduce is None:
            return [float(np.max(scalar(mat))) if mat.shape[0] else 0.0 for mat in matrices]
        own = {k: v for k, v in options.items() if k in spec.reduction_options and k not in WEIGHT_OPTIONS}
        step = int(self.state.global_step)
        scores = []
        for matrix, key, goal in zip(matrices, keys, goals, strict=True):
            context = reduction_context(spec, key=key, dim=matrix.shape[1], seed=options.get("seed", self.args.seed),
                                        step=step, goal=goal, scalar=scalar, num_weights=options.get("num_weights"),
                                        alpha=options.get("alpha"), sampler=options.get("sampler"))
            scores.append(rollout_score(spec, matrix, **context, **own))
        return scores

    def batch_advantages(self, scores: Any) -> np.ndarray:
        """Advantages (B,) of the global batch from the per-rollout ``scores`` TRL gathered (TRL's
        order: groups of ``num_generations`` contiguous rows): the estimator's advantage rule
        (``advantages_from_scores``), or for an estimator without a reduction the estimator on the
        gathered matrices (``compute_advantages``). Logs ``vpo.step_metrics.score_metrics`` (or the
        estimator's diagnostics). Identical on every rank."""
        values = np.asarray(scores.detach().double().cpu() if torch.is_tensor(scores) else scores,
                            dtype=np.float64).reshape(-1)
        num_generations = self.num_generations if self.model.training else self.num_generations_eval
        if values.size % num_generations:
            raise RuntimeError(f"VPOTrainer: {values.size} rollouts are not whole groups of {num_generations}")
        if not self._by_rule(self.vpo_spec):
            local = self._vpo_chains
            parts = gather_object([(local.matrices, local.keys, local.goals)])
            goals = [g for _, _, gs in parts for g in gs]
            advantages, diagnostics = self.compute_advantages(
                [m for ms, _, _ in parts for m in ms], [k for _, ks, _ in parts for k in ks], num_generations,
                goals=goals if self.vpo_spec.conditions_prompt else None)
        else:
            group_ids = np.arange(values.size) // num_generations
            options = {k: v for k, v in self.vpo_options.items() if k in self.vpo_spec.advantage_options}
            advantages = advantages_from_scores(self.vpo_spec, values, group_ids, **options)
            diagnostics = score_metrics(values, group_ids)  # the names every engine logs
        for name, value in diagnostics.items():
            if isinstance(value, int | float | np.floating | np.integer) and math.isfinite(float(value)):
                self.log_metric(name, float(value))
        return np.nan_to_num(np.asarray(advantages, dtype=np.float64).reshape(-1), nan=0.0)

    def compute_advantages(self, rewards: Sequence[np.ndarray], keys: Sequence[str], num_generations: int,
                           goals: Sequence[Any] | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """The estimator itself on matrices in TRL's global order (groups of ``num_generations``
        contiguous rows, group keys ``keys``: example ids or prompt texts): global advantages (B,)
        and the estimator's diagnostics. Identical on every rank; what the trainer runs for an
        estimator without a per-rollout reduction (GDPO)."""
        from vpo.step_metrics import score_metrics as spread

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
        diagnostics = dict(getattr(result, "diagnostics", {}) or {})
        diagnostics.update(spread(result.scores, group_ids))  # the names every engine logs
        return np.nan_to_num(advantages, nan=0.0), diagnostics

    # -- TRL hook 1: TRL calls the one reward function and gathers; the advantage rule runs on that --
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        table = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._vpo_advantages = self.batch_advantages(table[:, 0])
        return table

    # -- TRL hook 2: the prompts the model is sent; the estimator's advantages in TRL's batch --
    def _generate_and_score_completions(self, inputs):
        inputs = [{**row, "prompt": self.vpo_scorer.chain_prompt(row["prompt"])} for row in inputs]
        out = super()._generate_and_score_completions(inputs)
        advantages, self._vpo_advantages, self._vpo_chains = self._vpo_advantages, None, None
        if advantages is None:
            raise RuntimeError("VPOTrainer: _calculate_rewards did not run for this batch (TRL internals changed)")
        local = out.get("advantages")
        if local is None:
            raise RuntimeError("VPOTrainer: TRL's batch has no 'advantages' (TRL internals changed)")
        start = self.accelerator.process_index * local.shape[0]
        out["advantages"] = torch.as_tensor(advantages[start:start + local.shape[0]], dtype=local.dtype,
                                            device=local.device)
        self._patch_logged_advantages(advantages)
        return out

    def _check_collinear(self, effective_dim: float, dim: int) -> None:
        """Warn once when the effective dimension of D >= 2 objectives stays below
        ``COLLINEAR_EFFECTIVE_DIM`` for ``COLLINEAR_STEPS`` generation batches in a row, for an
        estimator that reads the reward vector (weights drawn or stated, per-objective norms): one
        that trains on a fixed scalar of the objectives (GRPO and the other scalar baselines) has
        nothing to gain from a vector, so the advice does not apply."""
        from vpo.rewards import COLLINEAR_EFFECTIVE_DIM, CollinearObjectivesWarning

        if dim < 2 or not math.isfinite(effective_dim) or self._trains_on_a_scalar(self.vpo_spec):
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

    def _patch_logged_advantages(self, advantages: np.ndarray) -> None:
        """The completions table's advantages (TRL's ``_logs``, filled with TRL's own) made the estimator's."""
        logged = self._logs.get("advantages")
        if logged is None:
            return
        values = list(logged)
        n = min(len(advantages), len(values))
        if n:
            values[-n:] = [float(a) for a in advantages[-n:]]
        maxlen = logged.maxlen if isinstance(logged, deque) else None
        self._logs["advantages"] = deque(values, maxlen=maxlen)

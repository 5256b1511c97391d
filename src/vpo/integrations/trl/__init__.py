"""VPO for TRL 1.16: reward functions for the stock ``GRPOTrainer`` (and for ``trl grpo``), and
``VPOTrainer``, a ``GRPOTrainer`` whose advantages come from any registered estimator.

Usage::

    from trl import GRPOTrainer
    from vpo.integrations.trl import EstimatorReward, RLConfig, TaskReward, VPOReward, VPOTrainer
    task = get_task("maze", size=5)

    # A. stock trainer: GRPO -> VPO is the reward line (TRL keeps its own group normalisation)
    GRPOTrainer(model, reward_funcs=TaskReward(task), args=cfg, train_dataset=ds)              # GRPO
    GRPOTrainer(model, reward_funcs=VPOReward(task, answers=3), args=cfg, train_dataset=ds)    # VPO
    GRPOTrainer(model, reward_funcs=EstimatorReward(task, "random_weight"), args=cfg, train_dataset=ds)

    # A'. TRL's own CLI, on a `vpo data export TASK --format trl` folder
    #     trl grpo --model_name_or_path M --dataset_name DIR --reward_funcs vpo.integrations.trl.vpo_reward
    #     (or vpo.integrations.trl.estimator_reward: the estimator each row's `method` column names)

    # B. subclass: the estimator's reduction is TRL's reward, its advantage rule runs on what TRL gathered
    VPOTrainer(model, task=task, answers=3, estimator="vpo", args=cfg, train_dataset=ds,
               processing_class=tok).train()

    # C. your own reward functions as the objectives: a GRPOTrainer script, class and answers= changed
    VPOTrainer(model, reward_funcs=[accuracy, format_ok, brevity], answers=3, args=cfg,
               train_dataset=ds_with_a_prompt_column).train()          # docs/own_rewards.md

    cfg = RLConfig().to_grpo_config("out", task="maze", answers=3)   # the paper's presets

Modules (imported on first use, so ``config`` stays light for the CLI): ``rewards`` (A, A'),
``scorers`` (a task's and a user's functions' scorer), ``trainer`` (B, C), ``config`` (presets,
TRL's run settings and options), ``plan`` (a run's rows, prompt style and memory before the model
loads: ``vpo train``), ``progress`` (terminal).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "config": ("GRPO_NAMES", "LOSS_TYPES", "LR_SCHEDULERS", "RLConfig", "TASK_EPOCHS", "TRLOptions", "VPO_OWNED",
               "check_engine", "estimator_scale", "map_trl_options", "read_grpo_yaml"),
    "rewards": ("EstimatorReward", "TaskReward", "VPOReward", "estimator_reward", "task_reward", "vpo_reward"),
    "scorers": ("FunctionScorer", "ScoredChains", "TaskScorer", "decode_examples", "group_keys", "parse_example",
                "score_task_chains"),
    "trainer": ("COLLINEAR_STEPS", "EXPECTED_TRL_HOOKS", "PRIVATE_MEMBERS", "TRL_VERSIONS", "VPOTrainer",
                "check_trl_hooks", "reference_checkpoint"),
    "plan": ("TrainPlan", "plan_training"),
    "progress": ("BUDGET_KEY", "StageProgress", "StepLines", "chain_shares", "label_progress", "step_line"),
}
_SHARED = {"completion_text": "vpo.rewards", "prompt_key": "vpo.rewards"}
"""Names re-exported from the core (they were importable from here)."""
_DEPRECATED = {"TaskScalarReward": f"{__name__}.rewards", "group_weights": f"{__name__}.rewards",
               "score_and_log": f"{__name__}.scorers"}
"""Earlier names, still importable (their modules warn with a date)."""
_WHERE = {name: f"{__name__}.{module}" for module, names in _EXPORTS.items() for name in names} | _SHARED

__all__ = sorted(_WHERE)
_WHERE |= _DEPRECATED


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    if name not in _DEPRECATED:  # an earlier name warns on every import, so it is not kept here
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

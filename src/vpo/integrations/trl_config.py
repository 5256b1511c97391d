"""TRL presets: the paper's RL hyperparameters (docs/algorithm.md §7) as a dataclass mapped onto TRL's
``GRPOConfig``. Light to import (torch and TRL load inside ``to_grpo_config``), so the CLI can
build its flags from it.

Usage::

    from vpo.integrations.trl_config import RLConfig
    args = RLConfig(learning_rate=1e-6).to_grpo_config("runs/out", task="maze", answers=3)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LOSS_TYPES", "LR_SCHEDULERS", "RLConfig", "TASK_EPOCHS"]

TASK_EPOCHS: dict[str, float] = {"maze": 2, "musique": 1, "eureqa": 6, "toolcall": 20}
"""Epochs per task in the paper's runs (docs/algorithm.md §7); other tasks default to 1."""

LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                 "warmup_stable_decay", "greedy")
"""``transformers.SchedulerType`` values (transformers 5.x), so a typo fails before the model loads."""
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
"""TRL 1.16's ``GRPOConfig.loss_type`` values (tests/test_cli_train.py compares both lists with the
installed libraries)."""


@dataclass
class RLConfig:
    """RL hyperparameters with the paper's presets (docs/algorithm.md §7), mapped to TRL's
    ``GRPOConfig`` by ``to_grpo_config``. Fields left at None are resolved per task and number
    of answers. Importing this module stays cheap: torch and TRL load inside the method.
    """

    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate", "above": 0.0})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "learning-rate schedule",
                                                                 "choices": LR_SCHEDULERS})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1", "min": 0.0, "below": 1.0})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2", "min": 0.0, "below": 1.0})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "min": 0.0})
    clip_epsilon: float = field(default=0.2, metadata={"help": "PPO clip range epsilon", "above": 0.0})
    kl_beta: float = field(default=1e-3, metadata={"help": "KL penalty coefficient (0: no reference model)",
                                                   "min": 0.0})
    num_generations: int = field(default=8, metadata={
        "help": "rollouts per prompt N (G groups of N make a batch)", "min": 2})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts",
                                                      "above": 0.0})
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "completions per device per micro-batch", "min": 1})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimiser step",
                                                                  "min": 1})
    num_train_epochs: float | None = field(
        default=None, metadata={"help": "epochs (default per task: maze 2, musique 1, eureqa 6, toolcall 20, else 1)",
                                "above": 0.0})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (-1: run the epochs)",
                                                 "min": 1, "also": (-1,)})
    max_completion_length: int | None = field(
        default=None, metadata={"help": "max new tokens per rollout (default 256; x the factor below when m > 1)",
                                "min": 1})
    multi_answer_length_factor: float = field(
        default=2.0, metadata={"help": "completion-budget multiplier for m > 1 when max_completion_length is unset",
                               "above": 0.0})
    loss_type: str = field(default="dapo", metadata={"help": "TRL loss aggregation (dapo: token-mean)",
                                                     "choices": LOSS_TYPES})
    seed: int = field(default=0, metadata={"help": "seed of training and of the shared VPO weights", "min": 0})
    logging_steps: int = field(default=1, metadata={"help": "log every N steps", "min": 1})
    save_strategy: str = field(default="no", metadata={"help": "checkpoints", "choices": ("no", "steps", "epoch")})
    force_cpu: bool = field(default=False, metadata={"help": "train on CPU even when CUDA is available"})

    def resolved_epochs(self, task: str | None) -> float:
        """Epochs for ``task``: the explicit value, else the paper's count, else 1."""
        if self.num_train_epochs is not None:
            return float(self.num_train_epochs)
        return float(TASK_EPOCHS.get(task or "", 1))

    def resolved_completion_length(self, answers: int) -> int:
        """Completion budget: the explicit value, else 256 (x the factor when m > 1)."""
        if self.max_completion_length is not None:
            return int(self.max_completion_length)
        return int(round(256 * self.multi_answer_length_factor)) if answers > 1 else 256

    def to_grpo_config(self, output_dir: str, *, task: str | None = None, answers: int = 1,
                       **overrides: Any) -> Any:
        """A ``trl.GRPOConfig`` with these settings. Without CUDA (or with ``force_cpu``) it
        sets ``use_cpu=True, bf16=False, gradient_checkpointing=False``. ``overrides`` are
        GRPOConfig fields and win."""
        import torch
        from trl import GRPOConfig

        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (group normalisation), got {self.num_generations}")
        cpu = self.force_cpu or not torch.cuda.is_available()
        values: dict[str, Any] = dict(
            output_dir=output_dir,
            learning_rate=self.learning_rate,
            lr_scheduler_type=self.lr_scheduler_type,
            optim="adamw_torch",
            adam_beta1=self.adam_beta1,
            adam_beta2=self.adam_beta2,
            weight_decay=self.weight_decay,
            epsilon=self.clip_epsilon,
            beta=self.kl_beta,
            num_generations=self.num_generations,
            temperature=self.temperature,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            num_train_epochs=self.resolved_epochs(task),
            max_steps=self.max_steps,
            max_completion_length=self.resolved_completion_length(answers),
            loss_type=self.loss_type,
            seed=self.seed,
            logging_steps=self.logging_steps,
            save_strategy=self.save_strategy,
            report_to="none",
            remove_unused_columns=False,
            use_cpu=cpu,
            bf16=(not cpu) and torch.cuda.is_bf16_supported(),
            gradient_checkpointing=not cpu,
        )
        values.update(overrides)
        return GRPOConfig(**values)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for run records)."""
        return asdict(self)

"""From GRPO to VPO in TRL: the few lines that change.

Run: ``python examples/grpo_to_vpo_trl.py`` (CPU, under a minute, nothing downloaded).

The model is a tiny random-init Qwen2 with a character tokenizer, so the rewards stay near
zero: this shows the wiring, not learning. Swap in a real checkpoint
(``vpo.models.load_pretrained(path)``) for real runs, or use ``vpo train``.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from vpo.export import example_from_row, trl_row  # noqa: E402
from vpo.integrations.trl import VPOReward, VPOTrainer, completion_text  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.tasks import get_task  # noqa: E402

task = get_task("maze", size=5)  # reward vector: completion, gold, diamond, avoid_lava
examples = task.examples("train", 4, seed=0)


def dataset(answers: int) -> Dataset:
    """Columns: prompt (asks for `answers` routes), example (JSON), task, answers, index, ..."""
    return Dataset.from_list([trl_row(task, ex, index=i, split="train", answers=answers)
                              for i, ex in enumerate(examples)])


# A tokenizer covering every character of the prompts, plus the move words as whole tokens.
chars = sorted({c for ex in examples for m in (1, 3) for c in task.prompt(ex, m)})
tokenizer = build_char_tokenizer(chars, extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])


def config(name: str, completion_length: int) -> GRPOConfig:
    return GRPOConfig(output_dir=os.path.join(tempfile.mkdtemp(), name), max_steps=2,
                      per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=completion_length, learning_rate=1e-4, logging_steps=1,
                      use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
                      save_strategy="no", disable_tqdm=True)


# ---- 1. Plain GRPO: one answer per rollout, the task's fixed scalar (mean of the 4) -------
def maze_scalar(completions, example, **kwargs):
    return [float(task.scalar(task.score_chain(completion_text(c), example_from_row({"example": e}), 1))[0])
            for c, e in zip(completions, example)]


grpo = GRPOTrainer(build_tiny_qwen2(tokenizer), reward_funcs=maze_scalar, args=config("grpo", 16),
                   train_dataset=dataset(answers=1), processing_class=tokenizer)
grpo.train()

# ---- 2. VPO, the reward-function route: three changes ------------------------------------
vpo = GRPOTrainer(build_tiny_qwen2(tokenizer),
                  reward_funcs=VPOReward(task, answers=3),        # (1) set score E_w[max_i w.r_i]
                  args=config("vpo", 32),                         # (2) ~2x the completion budget
                  train_dataset=dataset(answers=3),               # (3) prompts ask for 3 routes
                  processing_class=tokenizer)
vpo.train()

# ---- 3. VPO, the trainer route: the authors' normalisation, or any other estimator -------
# VPOTrainer scores the chains itself (no reward_funcs) and computes the advantages on the
# gathered (m, D) reward matrices: estimator="vpo" | "grpo" | "multi_rlvr" | "max_at_k" | ...
vpo_trainer = VPOTrainer(build_tiny_qwen2(tokenizer), task=task, answers=3, estimator="vpo",
                         args=config("vpo-trainer", 32), train_dataset=dataset(answers=3),
                         processing_class=tokenizer)
vpo_trainer.train()

for name, trainer in (("GRPO", grpo), ("VPO (VPOReward)", vpo), ("VPO (VPOTrainer)", vpo_trainer)):
    last = [h for h in trainer.state.log_history if "reward" in h][-1]
    diag = {k: round(v, 3) for k, v in last.items() if k.startswith("vpo/objective/")}
    print(f"{name:18s} reward {last['reward']:.3f} {diag}")

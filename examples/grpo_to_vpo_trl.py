"""From GRPO to VPO in TRL: one changed line.

Run: ``python examples/grpo_to_vpo_trl.py`` (CPU, under a minute, nothing downloaded).

The model is a tiny random-init Qwen2 with a character tokenizer, so the rewards stay near
zero: this shows the wiring, not learning. Swap in a real checkpoint
(``vpo.models.load_pretrained(path)``) for real runs, or use ``vpo train``. Without Python:
``vpo data export maze --format trl --answers 3 --out data`` and
``trl grpo --dataset_name data --reward_funcs vpo.integrations.trl.vpo_reward ...``.
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from vpo.export import trl_row  # noqa: E402
from vpo.integrations.trl import TaskReward, VPOReward, VPOTrainer  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.tasks import get_task  # noqa: E402

task = get_task("maze", size=5)  # reward vector: completion, gold, diamond, avoid_lava
examples = task.examples("train", 4, seed=0)


def dataset(answers: int) -> Dataset:
    """Columns: prompt (asks for `answers` routes; one string: this tokenizer has no chat template),
    example (JSON), task, answers, index, example_id, ..."""
    return Dataset.from_list([trl_row(task, ex, index=i, split="train", answers=answers, chat=False)
                              for i, ex in enumerate(examples)])


# A tokenizer covering every character of the prompts, plus the move words as whole tokens.
chars = sorted({c for ex in examples for m in (1, 3) for c in task.prompt(ex, m)})
tokenizer = build_char_tokenizer(chars, extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])


def config(name: str, answers: int) -> GRPOConfig:
    # m answers need room: the paper doubles the completion budget for m > 1
    return GRPOConfig(output_dir=os.path.join(tempfile.mkdtemp(), name), max_steps=2,
                      per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16 if answers == 1 else 32, learning_rate=1e-4, logging_steps=1,
                      use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
                      save_strategy="no", disable_tqdm=True)


def train(name: str, reward: TaskReward | VPOReward) -> GRPOTrainer:
    """The stock GRPOTrainer; the prompts ask for as many answers as the reward scores."""
    trainer = GRPOTrainer(build_tiny_qwen2(tokenizer), reward_funcs=reward, args=config(name, reward.answers),
                          train_dataset=dataset(reward.answers), processing_class=tokenizer)
    trainer.train()
    return trainer


# ---- 1. Plain GRPO: one answer per rollout, rewarded by the task's fixed scalar --------------
grpo = train("grpo", TaskReward(task))

# ---- 2. VPO: the one changed line. Three answers per rollout, rewarded by their set score ----
vpo = train("vpo", VPOReward(task, answers=3))  # E_w[max_i w.r_i], w ~ Dirichlet(1)

# ---- 3. VPO, the trainer route: the authors' normalisation, or any other estimator -------
# VPOTrainer scores the chains itself (no reward_funcs) and computes the advantages on the
# gathered (m, D) reward matrices: estimator="vpo" | "grpo" | "multi_rlvr" | "max_at_k" | ...
vpo_trainer = VPOTrainer(build_tiny_qwen2(tokenizer), task=task, answers=3, estimator="vpo",
                         args=config("vpo-trainer", 3), train_dataset=dataset(answers=3),
                         processing_class=tokenizer)
vpo_trainer.train()

for name, trainer in (("GRPO", grpo), ("VPO (VPOReward)", vpo), ("VPO (VPOTrainer)", vpo_trainer)):
    last = [h for h in trainer.state.log_history if "reward" in h][-1]
    diag = {k: round(v, 3) for k, v in last.items() if k.startswith("vpo/objective/")}
    print(f"{name:18s} reward {last['reward']:.3f} {diag}")

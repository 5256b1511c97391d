"""The VPO loop on mazes, end to end, in one short script (a few minutes on a laptop CPU).

    python examples/maze_loop.py

1. a maze task with a 4-objective reward vector (completion, gold, diamond, avoid_lava);
2. a tiny Llama and a character tokenizer built locally (no downloads);
3. a supervised warm-up on oracle routes (TRL SFTTrainer);
4. RL with VPOTrainer: each rollout holds m = 3 routes, scored as a set by E_w[max_i w . r_i];
5. evaluation: 30-answer pools per held-out maze, best@k and diversity.

``vpo demo`` is the full version (GRPO next to VPO, several seeds, confidence intervals, a
report); this script shows the moving parts.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from trl import GRPOConfig, SFTConfig, SFTTrainer

from vpo.tasks.maze.format import CompactMazeFormat
from vpo.demo.warmup import warmup_records
from vpo.evaluation import example_weights, pool_metrics, sample_pools
from vpo.integrations.trl import VPOTrainer
from vpo.models import build_char_tokenizer, build_tiny_llama
from vpo.tasks import get_task

torch.set_num_threads(1)  # one thread is fastest for a model this small (and on a busy machine)
M = 3  # routes per rollout

# 1. Task: a 5x5 maze; every answer gets a reward vector in [0, 1]^4.
task = get_task("maze", size=5)
fmt = CompactMazeFormat()  # 35-character prompts, letter routes, <route_i> tags
maze = task.examples("train", 1)[0]
print(task.render(maze), "\nprompt:", fmt.prompt(maze, M))

# 2. Model: the demo's 0.36M-parameter Llama over a 32-token character vocabulary.
tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
model = build_tiny_llama(tokenizer, hidden=96, layers=3, heads=4, mlp=288, seed=0)

cpu = dict(use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none")

# 3. Warm-up: oracle routes, single-route and 3-route formats mixed.
sft_data = Dataset.from_list(warmup_records(task, fmt, 10000, m=M, single_fraction=0.5, seed=0))
SFTTrainer(model=model, train_dataset=sft_data, processing_class=tokenizer,
           args=SFTConfig(output_dir="runs/maze_loop/sft", per_device_train_batch_size=64, learning_rate=2e-3,
                          lr_scheduler_type="cosine", num_train_epochs=1, save_strategy="no", **cpu)).train()

# 4. RL with VPO: the dataset holds the prompt and the maze (JSON) the reward needs.
mazes = task.examples("rl", 20 * 4, seed=1)
rl_data = Dataset.from_dict({"prompt": [fmt.prompt(e, M) for e in mazes],
                             "example": [json.dumps(e) for e in mazes]})
args = GRPOConfig(output_dir="runs/maze_loop/rl", per_device_train_batch_size=4 * 8, num_generations=8,
                  max_completion_length=fmt.max_completion_tokens(16, M), max_steps=20, learning_rate=1e-4,
                  beta=0.0, remove_unused_columns=False, save_strategy="no", logging_steps=5, **cpu)
trainer = VPOTrainer(model, task=task, answers=M, estimator="vpo", estimator_options={"num_weights": 100},
                     args=args, train_dataset=rl_data, processing_class=tokenizer)
trainer.train()

# 5. Evaluation: 10 chains x 3 routes = 30 answers per held-out maze.
test = task.examples("test", 20)
pools = sample_pools(trainer.model, tokenizer, task, test, m=M, pool=30, temperature=0.7,
                     max_new_tokens=fmt.max_completion_tokens(16, M), fmt=fmt)
scores = pool_metrics(pools.vectors, task, eval_weights=example_weights(len(test), 4, 64))
for k in (1, 3, 10, 30):
    print(f"best@{k:<2} fixed scalar {scores['best_at_k'][:, k - 1].mean():.3f}   "
          f"preference-weighted {scores['pref_best_at_k'][:, k - 1].mean():.3f}")
print(f"diversity {scores['diversity'].mean():.3f}, routes reaching the exit {scores['completion_rate'].mean():.0%}")
print("a chain:", pools.texts[0][0])

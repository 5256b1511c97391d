"""Your own reward functions as VPO's objectives in TRL: a GRPO script switched in one line.

Run: ``python examples/own_rewards_trl.py`` (CPU, about a minute, nothing downloaded).

Three reward functions that pull apart (more 'a', more 'b', shorter) train a tiny random model
first with TRL's stock ``GRPOTrainer`` (which adds them up), then with ``VPOTrainer``, which
asks for 3 answers per generation and keeps the three rewards as a vector: the change is the
class name and ``answers=3``. The model is random, so this shows the wiring, not learning.
docs/own_rewards.md has the contract (scaling, the ``None`` rule, the diagnostics).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from vpo.integrations.trl import VPOTrainer  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.rewards import completion_text, rewrite_chain_prompt  # noqa: E402


# ---- the user's rewards: one float (or None) per completion, as TRL calls them ----------------
def a_rate(completions, **kwargs):
    """Share of the letters that are 'a'."""
    texts = [completion_text(c).strip() for c in completions]
    return [t.count("a") / len(t) if t else 0.0 for t in texts]


def b_rate(completions, **kwargs):
    """Share of the letters that are 'b'."""
    texts = [completion_text(c).strip() for c in completions]
    return [t.count("b") / len(t) if t else 0.0 for t in texts]


def brevity(completions, max_letters, **kwargs):
    """1 for a one-letter answer, down to 0 at the row's max_letters (a dataset column)."""
    texts = [completion_text(c).strip() for c in completions]
    return [max(0.0, 1.0 - (len(t) - 1) / (limit - 1)) if t else 0.0 for t, limit in zip(texts, max_letters)]


prompts = [f"Write a word of a and b ({i})." for i in range(4)]
dataset = Dataset.from_list([{"prompt": p, "max_letters": 6} for p in prompts])

# A character tokenizer covering the prompts (and their 3-answer rewrite), with the chain tags
# as whole tokens so that even a random model writes some.
chars = sorted({c for p in prompts for c in p + rewrite_chain_prompt(p, 3)})
tags = [f"<{slash}response_{i}>" for i in (1, 2, 3) for slash in ("", "/")]
tokenizer = build_char_tokenizer(chars, extra_tokens=tags)


def config(name: str, completion_length: int) -> GRPOConfig:
    return GRPOConfig(output_dir=os.path.join(tempfile.mkdtemp(), name), max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=completion_length, learning_rate=1e-4,
                      logging_steps=1, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
                      save_strategy="no", disable_tqdm=True, seed=0)


# ---- 1. the GRPO script ------------------------------------------------------------------------
grpo = GRPOTrainer(build_tiny_qwen2(tokenizer), reward_funcs=[a_rate, b_rate, brevity],
                   args=config("grpo", 16), train_dataset=dataset, processing_class=tokenizer)
grpo.train()

# ---- 2. the same script on VPO: the class name and answers=3 (m answers need about 2x the room) -
vpo = VPOTrainer(build_tiny_qwen2(tokenizer), reward_funcs=[a_rate, b_rate, brevity], answers=3,
                 args=config("vpo", 32), train_dataset=dataset, processing_class=tokenizer)
vpo.train()

last = [h for h in grpo.state.log_history if "reward" in h][-1]
print(f"GRPO  reward (sum of the three) {last['reward']:.3f}")
last = [h for h in vpo.state.log_history if "vpo/effective_dim" in h or "vpo/answers_parsed" in h][-1]
objectives = {k.removeprefix("vpo/objective/"): round(v, 3) for k, v in last.items() if k.startswith("vpo/objective/")}
print(f"VPO   best answer per objective {objectives}; answers parsed per chain {last['vpo/answers_parsed']:.2f}; "
      f"effective dimension {last.get('vpo/effective_dim', float('nan')):.2f} of 3")

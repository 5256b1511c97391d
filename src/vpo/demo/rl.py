"""RL from the warm-up checkpoint with ``VPOTrainer`` (a TRL ``GRPOTrainer`` subclass).

Every method runs the same number of steps on the same mazes in the same order (the sampler
is seeded by the training seed), from the same warm-up checkpoint; only the prompt format
(m = 1 or m routes) and the advantage estimator differ:

* GRPO (m = 1): group z-norm of the fixed scalar (mean of the 4 objectives);
* VPO (m routes): group z-norm of E_w[max_i w . r_i] with K Dirichlet(alpha) weights shared
  by the group;
* Multi-RLVR (m routes): group z-norm of the sum of the deduplicated answers' scalars;
* Max@K (m = 1): the unbiased max@k gradient weights, k = G // 2.

``DemoTrainer`` only adds logging: per step, the mean pairwise L1 diversity of the reward
vectors of each maze's training answers (every answer of every rollout, scored on its own as in
the evaluation), the answers' mean fixed scalar and the share of answers that reach the exit.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vpo.demo.config import METHODS, DemoConfig
from vpo.tasks.maze.format import CompactMazeFormat

LOGGED_SERIES = {"demo/diversity": "diversity", "demo/answer_scalar": "answer scalar",
                 "demo/completion": "completion rate", "demo/truncated": "truncated rollouts"}


def truncated_rollouts(completion_ids: list[list[int]], stop_ids: set[int]) -> list[bool]:
    """Which rollouts were cut at the token limit: no ids, or the last id is not EOS/padding
    (TRL's own test for ``mask_truncated_completions``)."""
    return [not ids or ids[-1] not in stop_ids for ids in completion_ids]


def zero_truncated(matrices: list[np.ndarray], cut: list[bool]) -> list[np.ndarray]:
    """The demo's format rule: a rollout cut at the token limit is unfinished and scores the
    all-zero matrix (docs/algorithm.md §1: an unparseable rollout), so running on past the exit, or
    never closing a chain, costs reward instead of being free."""
    return [np.zeros_like(mat) if is_cut else mat for mat, is_cut in zip(matrices, cut, strict=True)]


def _trainer_class() -> type:
    """``DemoTrainer`` (defined lazily: it subclasses VPOTrainer, which imports TRL)."""
    from vpo import metrics as M
    from vpo.evaluation import score_generation
    from vpo.integrations.trl import VPOTrainer, completion_text, prompt_key

    class DemoTrainer(VPOTrainer):
        """VPOTrainer plus per-step diversity logging of the rollouts' answers, and the demo's
        rule for rollouts cut at the token limit."""

        def __init__(self, *args: Any, fmt: CompactMazeFormat, truncated: str = "keep", **kwargs: Any) -> None:
            self.demo_format = fmt
            self.demo_truncated = truncated
            super().__init__(*args, **kwargs)

        def score_rollouts(self, prompts, completions, completion_ids, examples):
            cut = truncated_rollouts(completion_ids, {self.processing_class.eos_token_id,
                                                      self.processing_class.pad_token_id})
            groups: dict[str, list[np.ndarray]] = defaultdict(list)
            for prompt, completion, example in zip(prompts, completions, examples, strict=True):
                groups[prompt_key(prompt)].append(score_generation(
                    self.vpo_task, self.demo_format, completion_text(completion), example, self.vpo_answers))
            pools = [np.concatenate(rows) for rows in groups.values()]
            self.log_metric("demo/diversity", float(np.mean([M.diversity(p) for p in pools])))
            answers = np.concatenate(pools)
            self.log_metric("demo/answer_scalar", float(np.mean(self.vpo_task.scalar(answers))))
            self.log_metric("demo/completion", float(np.mean(np.any(answers > 0, axis=1))))
            self.log_metric("demo/truncated", float(np.mean(cut)))
            matrices = super().score_rollouts(prompts, completions, completion_ids, examples)
            return zero_truncated(matrices, cut) if self.demo_truncated == "zero" else matrices

    return DemoTrainer


def rl_examples(task: Any, cfg: DemoConfig) -> list[dict[str, Any]]:
    """The RL mazes, shared by every method and seed: ``rl_steps * rl_prompts`` fresh mazes, or
    under the "paper" protocol (size 9) the paper's 1,000 train mazes repeated to that count
    (TRL's sampler shuffles them by the training seed)."""
    n = cfg.rl_steps * cfg.rl_prompts
    if getattr(task, "protocol", None) == "paper":
        train = task.examples("train")
        return [train[i % len(train)] for i in range(n)]
    stream = task.iter_examples(cfg.stream_seed(2000), split="rl")
    return [next(stream) for _ in range(n)]


def run_rl(cfg: DemoConfig, task: Any, fmt: CompactMazeFormat, method: str, seed: int, warmup_dir: Path,
           out_dir: Path, examples: list[dict[str, Any]], *, log: Any = print) -> dict[str, Any]:
    """Train ``method`` with training seed ``seed`` from ``warmup_dir``; save to ``out_dir``.

    Resumes from the newest ``checkpoint-*`` under ``out_dir/trainer``. Returns the run's
    record: seconds, steps, completion tokens, and the per-step logged series.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from vpo.checkpoints import latest_complete_checkpoint
    from vpo.demo.device import rl_kv_cache

    _, _, estimator = METHODS[method]
    m = cfg.method_answers(method)
    start, cpu_start = time.time(), time.process_time()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(warmup_dir)
    tokenizer = AutoTokenizer.from_pretrained(warmup_dir)
    from vpo.estimators import get_spec

    if get_spec(estimator).conditions_prompt:  # each maze states its own goal w, fixed for the run
        from vpo.goals import attach_goal

        examples = [attach_goal(task, e, key=e["id"], seed=cfg.seed) for e in examples]
    dataset = Dataset.from_dict({"prompt": [fmt.prompt(e, m) for e in examples],
                                 "example": [json.dumps(e) for e in examples]})
    max_budget = max(int(e["budget"]) for e in examples)
    trainer_dir = out_dir / "trainer"
    args = GRPOConfig(
        output_dir=str(trainer_dir),
        per_device_train_batch_size=cfg.rl_prompts * cfg.rl_generations,
        num_generations=cfg.rl_generations,
        max_completion_length=fmt.max_completion_tokens(max_budget, m),
        max_steps=cfg.rl_steps,
        learning_rate=cfg.rl_lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        temperature=cfg.rl_temperature,
        top_k=0,
        top_p=1.0,
        beta=cfg.rl_beta,
        mask_truncated_completions=cfg.rl_truncated == "mask",
        epsilon=0.2,
        loss_type="dapo",
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=1,
        seed=seed,
        data_seed=seed,
        use_cpu=cfg.torch_device() == "cpu",
        cache_implementation=rl_kv_cache(cfg),  # a GPU: rollouts in a preallocated KV cache (vpo.demo.device)
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        remove_unused_columns=False,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )
    accepted = get_spec(estimator).options
    options = {name: getattr(cfg, name) for name in ("num_weights", "alpha") if name in accepted}
    from vpo.demo.warmup import quiet_libraries, quiet_trainer

    quiet_libraries(cfg.progress)
    trainer = _trainer_class()(model, task=task, answers=m, estimator=estimator, estimator_options=options,
                               args=args, train_dataset=dataset, processing_class=tokenizer, fmt=fmt,
                               truncated=cfg.rl_truncated)
    quiet_trainer(trainer, cfg.progress, f"RL {METHODS[method][0]} seed {seed}", log=log)
    # every checkpoint-N carries the run's format and m (vpo eval on one prompts it as trained)
    from vpo.checkpoints import format_record_callback

    record = {**fmt.to_dict(), "task": "maze", "task_params": {"size": cfg.size, "reward_mode": cfg.reward_mode},
              "method": method, "seed": seed, "answers": m}
    trainer.add_callback(format_record_callback(record))
    last = latest_complete_checkpoint(trainer_dir)  # one half-written when the run was killed is skipped
    last = str(last) if last is not None else None
    if last:
        log(f"{method} seed {seed}: resuming from {last}")
    before = task.failures.totals()
    trainer.train(resume_from_checkpoint=last)
    trainer.model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    fmt.save(out_dir, **{k: v for k, v in record.items() if k not in fmt.to_dict()})
    history = [h for h in trainer.state.log_history if "step" in h and "demo/diversity" in h]
    record = {
        "method": method, "seed": seed, "m": m, "estimator": estimator,
        "seconds": time.time() - start, "cpu_seconds": time.process_time() - cpu_start, "resumed_from": last,
        "steps": [int(h["step"]) for h in history],
        "series": {name: [float(h[key]) for h in history] for key, name in LOGGED_SERIES.items()},
        "completion_tokens": float(np.mean([h.get("completions/mean_length", np.nan) for h in history]))
        if history else None,
        "reward": [float(h.get("reward", np.nan)) for h in history],
        # this invocation's calls (a resumed run counts from its checkpoint on)
        "reward_failures": task.failures.totals_since(before),
    }
    shutil.rmtree(trainer_dir, ignore_errors=True)  # optimizer states: only needed to resume
    return record

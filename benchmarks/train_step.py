"""Seconds per RL step of TRL's stock GRPOTrainer versus VPOTrainer, on the CPU demo setting.

Usage::

    python benchmarks/train_step.py                 # the demo's setting: 16 prompts x 8 generations, 5 timed steps
    python benchmarks/train_step.py --steps 8 --threads 2 --hidden 128 --layers 4

Setting: the demo's 0.36M-parameter Llama (hidden 96, 3 layers, MLP 288, tied embeddings), one
torch thread as in each demo RL worker, a character tokenizer; 5x5 maze prompts in the demo's
compact format (35 tokens, ``vpo.demo``; the full text prompt if that module is unavailable);
16 prompts x 8 generations = 128
completions per step; a random-init model rarely stops early, so completions run to their
budget (m * 18 + tags + EOS tokens) and every row does the same work.

Rows (same seed, same model init, same data: each pair generates identical completions):

* ``grpo stock``: GRPOTrainer + a plain reward function (the task's fixed scalar, m = 1)
* ``grpo VPOTrainer``: VPOTrainer(estimator="grpo", TRL normalisation), m = 1
* ``vpo stock+VPOReward``: GRPOTrainer + VPOReward(m = 3, K = 100)
* ``vpo VPOTrainer``: VPOTrainer(estimator="vpo"), m = 3, K = 100

The overhead column compares each VPOTrainer row with the stock row of the same m; "adapter
ms" is the time per step in ``VPOTrainer.rollout_scores`` and ``batch_advantages`` (the keyed
weights, the estimator's reduction and its advantage rule; chain scoring costs the same as in
the stock reward function). The first step is a warm-up and not timed;
the table reports the median over timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_prompts(task, examples, m):
    try:
        from vpo.tasks.maze.format import CompactMazeFormat

        fmt = CompactMazeFormat(max_answers=3)
        return [fmt.prompt(ex, m) for ex in examples], fmt.alphabet(), fmt.extra_tokens(), "compact"
    except ImportError:
        prompts = [task.prompt(ex, m) for ex in examples]
        chars = sorted({c for p in prompts for c in p} | set("UDLR"))
        return prompts, chars, ["<route_1>", "<route_2>", "<route_3>"], "text"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per prompt (G)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--hidden", type=int, default=96)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--route-tokens", type=int, default=18, help="completion tokens per route")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from datasets import Dataset
    from _timing import StepTimer, time_calls
    from trl import GRPOConfig, GRPOTrainer

    from vpo.export import trl_row
    from vpo.integrations.trl import VPOReward, VPOTrainer, completion_text, parse_example
    from vpo.models import build_char_tokenizer, build_tiny_llama, count_parameters
    from vpo.tasks import get_task

    torch.set_num_threads(args.threads)
    task = get_task("maze", size=5)
    examples = task.examples("train", args.prompts * (args.steps + 1), seed=0)

    def dataset(m):
        prompts, _, _, _ = build_prompts(task, examples, m)
        rows = []
        for i, (ex, prompt) in enumerate(zip(examples, prompts, strict=True)):
            row = trl_row(task, ex, index=i, split="train", answers=m)
            row["prompt"] = prompt
            rows.append(row)
        return Dataset.from_list(rows)

    _, alphabet, extra, prompt_format = build_prompts(task, examples[:1], 1)
    tok = build_char_tokenizer(alphabet, extra_tokens=extra)

    def scalar_reward(completions, example, **kwargs):
        return [float(task.scalar(task.score_chain(completion_text(c), parse_example(e), 1))[0])
                for c, e in zip(completions, example, strict=True)]
    scalar_reward.__name__ = "task"

    def run(label, m, kind):
        route_budget = args.route_tokens
        completion = m * route_budget + (m if m > 1 else 0) + 1
        cfg = GRPOConfig(
            output_dir=tempfile.mkdtemp(), max_steps=args.steps + 1, seed=0,
            per_device_train_batch_size=args.prompts * args.generations, num_generations=args.generations,
            max_completion_length=completion, learning_rate=1e-4, beta=0.0, logging_steps=1,
            use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
            disable_tqdm=True, shuffle_dataset=False)
        model = build_tiny_llama(tok, hidden=args.hidden, layers=args.layers, heads=4, mlp=3 * args.hidden, seed=0)
        data = dataset(m)
        timer = StepTimer()
        spent = None
        if kind == "stock":
            reward = scalar_reward if m == 1 else VPOReward(task, answers=m, seed=0)
            trainer = GRPOTrainer(model, reward_funcs=reward, args=cfg, train_dataset=data,
                                  processing_class=tok, callbacks=[timer])
        else:
            options = {"std": "sample", "eps": 1e-4, "degenerate": "none"} if m == 1 else {}
            trainer = VPOTrainer(model, task=task, answers=m, estimator="grpo" if m == 1 else "vpo",
                                 estimator_options=options, args=cfg, train_dataset=data,
                                 processing_class=tok, callbacks=[timer])
            spent = [time_calls(trainer, "rollout_scores"), time_calls(trainer, "batch_advantages")]
        trainer.train()
        steps = np.diff(timer.marks)[1:]  # drop the warm-up step
        tokens = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
        return {"row": label, "m": m, "params": count_parameters(model), "completion_budget": completion,
                "mean_completion_len": float(np.mean(tokens)) if tokens else None,
                "median_s": float(statistics.median(steps)), "min_s": float(np.min(steps)),
                "adapter_ms": None if spent is None else 1000 * sum(part[0] for part in spent) / (args.steps + 1)}

    rows = [run("grpo stock", 1, "stock"), run("grpo VPOTrainer", 1, "vpo"),
            run("vpo stock+VPOReward", 3, "stock"), run("vpo VPOTrainer", 3, "vpo")]
    base = {1: rows[0]["median_s"], 3: rows[2]["median_s"]}
    print(f"\nmodel {rows[0]['params'] / 1e6:.2f}M params, {args.prompts} prompts x {args.generations} "
          f"generations, {prompt_format} maze-5 prompts, {args.threads} threads, {args.steps} timed steps")
    print(f"{'row':22s} {'m':>2s} {'tokens':>7s} {'median s/step':>14s} {'min s/step':>11s} "
          f"{'vs stock':>9s} {'adapter ms':>11s}")
    for row in rows:
        overhead = row["median_s"] / base[row["m"]] - 1
        adapter = "" if row["adapter_ms"] is None else f"{row['adapter_ms']:.1f}"
        print(f"{row['row']:22s} {row['m']:2d} {row['mean_completion_len'] or 0:7.1f} {row['median_s']:14.3f} "
              f"{row['min_s']:11.3f} {overhead:+8.1%} {adapter:>11s}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

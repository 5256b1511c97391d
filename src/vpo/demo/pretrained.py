"""The demo on a pretrained language model (``vpo demo --preset smollm2``): chain warm-up from the
model's own samples, then GRPO, Multi-RLVR, Max@K and VPO from that warm start with the task's own
reward functions, equal pools of answers on held-out prompts, and the maze demo's report.

Usage::

    vpo demo --preset smollm2                    # on a GPU: 4 methods x 2 seeds; on CPU: the reduced size
    vpo demo --preset smollm2 --quick            # smoke run (CI)

The stages, each resumable (a stage's ``done.json`` or pool file is written last):

1. warm-up: the model's own single answers to the training prompts, ``--warmup-samples`` each; the m
   that together score highest under the set score become the prompt's m-answer chain, and a short
   SFT through TRL teaches the chain format (``vpo.integrations.trl.warmup``, as ``vpo warmup``);
2. RL: each method and seed from that warm start through ``VPOTrainer`` with the task's reward
   functions (the path a TRL user's own functions take), the same prompts in the same order;
3. pools: ``--pool`` answers per held-out prompt (chains x m), the warm start in both formats;
4. the report: best@k and preference-weighted best@k for k = 1..pool, diversity, per-objective
   means and bests, distinct answers, parse rate, answers in objective space, and the paper's
   four checks with their intervals.

Layout of ``--out`` as the maze demo's (``vpo.demo.run``). Shape glossary: G prompts, P answers
per pool, M answers per chain, D objectives.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vpo.demo.config import METHODS, DemoConfig

PRESET_TASKS = {"smollm2": "describe"}
SMOKE_TEST = ("This is a --quick smoke run (one seed, a few prompts, steps and answers): it checks that every stage "
              "runs on the pretrained model, and its numbers say nothing about the methods. Run `vpo demo --preset "
              "smollm2` for results.")
"""The task each pretrained-model preset trains and evaluates on."""


def task_of(cfg: DemoConfig) -> Any:
    """The preset's task (its reward functions and its train and test prompts)."""
    from vpo.tasks import get_task

    return get_task(PRESET_TASKS[cfg.preset])


def eval_examples(cfg: DemoConfig, task: Any) -> list[dict[str, Any]]:
    """The held-out prompts of the pools (the task's test split, the first ``eval_examples``)."""
    return task.examples("test")[: cfg.eval_examples]


def train_examples(cfg: DemoConfig, task: Any) -> list[dict[str, Any]]:
    """The training prompts: the task's train split (RL draws ``rl_prompts`` of them per step, in
    an order the training seed shuffles; the warm-up uses the first ``warmup_examples``)."""
    return task.examples("train")


def format_of(task: Any, **extra: Any) -> dict[str, Any]:
    """A checkpoint's ``vpo_format.json``: the task's own prompts (chat turns), its name and ``extra``
    (the method and m of an RL run), so ``vpo eval`` on it prompts and samples it as trained."""
    return {"format": "task", "task": task.name, "task_params": {}, **extra}


def write_format(out_dir: Path, task: Any, **extra: Any) -> None:
    from vpo.runs import FORMAT_FILE, atomic_write_text

    atomic_write_text(Path(out_dir) / FORMAT_FILE, json.dumps(format_of(task, **extra), indent=1, sort_keys=True))


# ----- the warm start ---------------------------------------------------------------------------

def run_chain_warmup(cfg: DemoConfig, task: Any, out_dir: Path, *, log: Any = print) -> dict[str, Any]:
    """The chain warm-up of the pretrained model into ``out_dir``; returns its record ({seconds,
    cpu_seconds, params, final_loss, rows, ...})."""
    from vpo.integrations.trl.warmup import ChainWarmup, chain_warmup
    from vpo.models import count_parameters, load_pretrained, resolve_model

    start, cpu_start = time.time(), time.process_time()
    log(f"warm-up: loading {cfg.model}")
    model, tokenizer = load_pretrained(resolve_model(cfg.model))
    plan = ChainWarmup(answers=cfg.answers, samples=cfg.warmup_samples, max_new_tokens=cfg.answer_tokens,
                       temperature=cfg.warmup_temperature, sft_steps=cfg.warmup_steps, learning_rate=cfg.warmup_lr,
                       batch_size=cfg.warmup_batch, lora=cfg.lora, lora_rank=cfg.lora_rank,
                       lora_alpha=2 * cfg.lora_rank, seed=cfg.seed, progress=cfg.progress, rank=True,
                       device=cfg.torch_device())
    prompts = train_examples(cfg, task)[: cfg.warmup_examples]
    record = chain_warmup(model, tokenizer, task, prompts, plan, out_dir, log=lambda line: log(f"warm-up: {line}"))
    write_format(out_dir, task)
    record.update(seconds=time.time() - start, cpu_seconds=time.process_time() - cpu_start,
                  params=count_parameters(record.pop("model")))
    return record


# ----- RL ---------------------------------------------------------------------------------------

def _trainer_class() -> type:
    """``PretrainedDemoTrainer`` (defined lazily: VPOTrainer imports TRL)."""
    from collections import defaultdict

    from vpo import metrics as M
    from vpo.integrations.trl import VPOTrainer

    class PretrainedDemoTrainer(VPOTrainer):
        """VPOTrainer plus the demo's per-step logs (the diversity of each prompt's answers in the
        training rollouts, their mean objective value) and its rule for rollouts cut at the token
        limit (``--rl-truncated``)."""

        def __init__(self, *args: Any, truncated: str = "keep", **kwargs: Any) -> None:
            self.demo_truncated = truncated
            self._demo_cut: list[bool] | None = None
            super().__init__(*args, **kwargs)

        def score_completions(self, prompts, completions, completion_ids, columns):
            from vpo.demo.rl import truncated_rollouts

            tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
            self._demo_cut = truncated_rollouts([list(ids) for ids in completion_ids],
                                                {tokenizer.eos_token_id, tokenizer.pad_token_id})
            self.log_metric("demo/truncated", float(np.mean(self._demo_cut)))
            try:
                return super().score_completions(prompts, completions, completion_ids, columns)
            finally:
                self._demo_cut = None

        def rollout_scores(self, matrices, keys, goals):
            groups: dict[str, list[np.ndarray]] = defaultdict(list)
            for matrix, key in zip(matrices, keys, strict=True):
                groups[key].append(matrix)
            pools = [np.concatenate(rows) for rows in groups.values()]
            self.log_metric("demo/diversity", float(np.mean([M.diversity(p) for p in pools])))
            answers = np.concatenate(pools)
            live = answers[np.any(answers > 0, axis=1)]
            self.log_metric("demo/answer_scalar", float(live.mean()) if live.size else 0.0)
            if self.demo_truncated == "zero" and self._demo_cut is not None:
                from vpo.demo.rl import zero_truncated

                matrices = zero_truncated(list(matrices), self._demo_cut)
            return super().rollout_scores(matrices, keys, goals)

    return PretrainedDemoTrainer


LOGGED_SERIES = {"demo/diversity": "diversity", "demo/answer_scalar": "answer scalar",
                 "demo/truncated": "truncated rollouts"}


def run_rl(cfg: DemoConfig, task: Any, method: str, seed: int, warmup_dir: Path, out_dir: Path, *,
           log: Any = print) -> dict[str, Any]:
    """Train ``method`` with seed ``seed`` from ``warmup_dir`` into ``out_dir`` (resuming from its
    newest complete TRL checkpoint); returns the run's record."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from vpo.checkpoints import format_record_callback, latest_complete_checkpoint
    from vpo.demo.warmup import quiet_libraries, quiet_trainer
    from vpo.estimators import get_spec
    from vpo.models import load_pretrained

    _, _, estimator = METHODS[method]
    m = cfg.method_answers(method)
    start, cpu_start = time.time(), time.process_time()
    torch.manual_seed(seed)
    model, tokenizer = load_pretrained(warmup_dir)
    rows = train_examples(cfg, task)
    repeat = -(-cfg.rl_steps * cfg.rl_prompts // len(rows))  # whole epochs of the train prompts, shuffled by seed
    trainer_dir = out_dir / "trainer"
    device = cfg.torch_device()
    rollouts = cfg.rl_prompts * cfg.rl_generations
    micro = cfg.rl_micro_batch or rollouts
    args = GRPOConfig(
        output_dir=str(trainer_dir), per_device_train_batch_size=micro, gradient_accumulation_steps=rollouts // micro,
        num_generations=cfg.rl_generations, max_completion_length=cfg.answer_tokens * m, max_steps=cfg.rl_steps,
        num_train_epochs=repeat, learning_rate=cfg.rl_lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, temperature=cfg.rl_temperature, top_k=0, top_p=1.0, beta=cfg.rl_beta,
        mask_truncated_completions=cfg.rl_truncated == "mask", epsilon=0.2, loss_type="dapo", logging_steps=1,
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=1, seed=seed, data_seed=seed,
        use_cpu=device == "cpu", bf16=device != "cpu", gradient_checkpointing=False, report_to="none",
        remove_unused_columns=False, disable_tqdm=False, dataloader_num_workers=0,
        chat_template_kwargs={"enable_thinking": False})
    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    accepted = get_spec(estimator).options
    options = {name: getattr(cfg, name) for name in ("num_weights", "alpha") if name in accepted}
    quiet_libraries(cfg.progress)
    trainer = _trainer_class()(model, reward_funcs=task.reward_funcs, answers=m, estimator=estimator,
                               estimator_options=options, reward_failures=task.failures.policy, args=args,
                               train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                               peft_config=peft_config, truncated=cfg.rl_truncated)
    quiet_trainer(trainer, cfg.progress, f"RL {METHODS[method][0]} seed {seed}", log=log)
    trainer.add_callback(format_record_callback(format_of(task, method=method, answers=m)))
    last = latest_complete_checkpoint(trainer_dir)
    last = str(last) if last is not None else None
    if last:
        log(f"{method} seed {seed}: resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    trained = trainer.model.merge_and_unload() if cfg.lora else trainer.model
    trained.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    write_format(out_dir, task, method=method, answers=m)
    history = [h for h in trainer.state.log_history if "step" in h and "demo/diversity" in h]
    failures = trainer.vpo_failures.totals() if hasattr(trainer, "vpo_failures") else None
    shutil.rmtree(trainer_dir, ignore_errors=True)  # optimizer states: only needed to resume
    return {
        "method": method, "seed": seed, "m": m, "estimator": estimator,
        "seconds": time.time() - start, "cpu_seconds": time.process_time() - cpu_start, "resumed_from": last,
        "steps": [int(h["step"]) for h in history],
        "series": {name: [float(h.get(key, np.nan)) for h in history] for key, name in LOGGED_SERIES.items()},
        "completion_tokens": float(np.mean([h.get("completions/mean_length", np.nan) for h in history]))
        if history else None,
        "reward": [float(h.get("reward", np.nan)) for h in history],
        "reward_failures": failures,
    }


# ----- the stages -------------------------------------------------------------------------------

class PretrainedStages:
    """The stages of a pretrained-model preset, for ``vpo.demo.run`` (the maze demo's are
    ``vpo.demo.run.MazeStages``): the preset's task, the chain warm-up, RL with the task's reward
    functions, pools with the chat template, and the report."""

    unit = "prompts"
    scorer = "one reward function on one non-empty answer"

    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        self.task = task_of(cfg)

    def setting(self) -> str:
        cfg = self.cfg
        return (f"model {cfg.model}{' (LoRA)' if cfg.lora else ''}, task {self.task.name} "
                f"({', '.join(self.task.objective_names(self.eval_examples()[0]))})")

    def check_workload(self) -> tuple[int, str, Any]:
        from vpo.demo.device import pretrained_memory

        return pretrained_memory(self.cfg, self.eval_examples(), self.task)

    def warmup(self, warm_dir: Path, log: Any) -> dict[str, Any]:
        cfg = self.cfg
        log(f"warm-up: {cfg.warmup_samples} answers of {cfg.model} to each of {cfg.warmup_examples} prompts "
            f"(temperature {cfg.warmup_temperature:g}), "
            f"the {cfg.answers} that together score highest as one chain, then {cfg.warmup_steps} SFT steps")
        return run_chain_warmup(cfg, self.task, warm_dir, log=log)

    def train(self, method: str, seed: int, warm_dir: Path, run_dir: Path, log: Any) -> dict[str, Any]:
        cfg = self.cfg
        log(f"RL: {METHODS[method][0]} (m={cfg.method_answers(method)}) seed {seed}, "
            f"{cfg.rl_steps} steps x {cfg.rl_prompts} prompts x {cfg.rl_generations} rollouts")
        return run_rl(cfg, self.task, method, seed, warm_dir, run_dir, log=log)

    def eval_examples(self) -> list[dict[str, Any]]:
        return eval_examples(self.cfg, self.task)

    def sample_pool(self, name: str, ckpt: Path, m: int, path: Path, log: Any) -> dict[str, Any]:
        """Sample ``cfg.pool`` answers per held-out prompt from ``ckpt`` (chains of ``m`` answers of
        ``answer_tokens`` each, the chat template as in training) into ``path``."""
        from vpo.evaluation import sample_pools
        from vpo.formats import TaskFormat
        from vpo.models import load_pretrained

        cfg = self.cfg
        model, tokenizer = load_pretrained(ckpt)
        model.to(cfg.torch_device())
        fmt = TaskFormat(self.task, chat=True, tokenizer=tokenizer)
        pools = sample_pools(model, tokenizer, self.task, self.eval_examples(), m=m, pool=cfg.pool,
                             temperature=cfg.eval_temperature, top_p=1.0, max_new_tokens=cfg.answer_tokens * m,
                             batch_size=cfg.eval_batch, fmt=fmt, seed=cfg.seed + 77, progress=cfg.progress,
                             desc=f"eval {name}")
        pools.save(path)
        return {}

    def reference(self, examples: list[dict[str, Any]], weights: np.ndarray) -> None:
        return None  # no oracle answers: the ceiling of a description is not known

    def metrics(self, methods: list[str], seeds: list[int], warm: dict[str, Any],
                runs: dict[tuple[str, int], dict[str, Any]], evaluated: dict[str, Any]) -> dict[str, Any]:
        return pretrained_metrics(self.cfg, self.task, methods, seeds, warm, runs, evaluated)


# ----- the report ------------------------------------------------------------------------------

def chain_format(pools: Any, task: Any, m: int) -> dict[str, float]:
    """How a pool's chains follow the chain format: ``parsed`` (share with an answer in the
    numbered tags), ``complete`` (share with m of them), ``over`` (share writing more than m tagged
    answers, the extra ones unread: ``vpo.chains.written_answers``, as training's step line counts
    them). For m = 1 a non-empty completion is its answer."""
    from vpo.chains import written_answers

    texts = [text for row in pools.texts for text in row]
    if not texts:
        return {"parsed": float("nan"), "complete": float("nan"), "over": float("nan")}
    if m == 1:
        share = float(np.mean([bool(text.strip()) for text in texts]))
        return {"parsed": share, "complete": share, "over": 0.0}
    counts = [task.tagged_answers(text, m) for text in texts]
    over = [written_answers(text, task.rewrite_rule.tag) > m for text in texts]
    return {"parsed": float(np.mean([c >= 1 for c in counts])), "complete": float(np.mean([c >= m for c in counts])),
            "over": float(np.mean(over))}


def distinct_texts(pools: Any, task: Any, examples: list[dict[str, Any]]) -> float:
    """Mean number of distinct non-empty answers (up to case and spacing) in a prompt's pool."""
    from vpo.formats import TaskFormat
    from vpo.integrations.trl.warmup import normal_answer

    fmt = TaskFormat(task)
    counts = []
    for example, texts in zip(examples, pools.texts, strict=True):
        answers = {normal_answer(a) for text in texts for a in fmt.answers(text, example, pools.m)}
        counts.append(len(answers - {""}))
    return float(np.mean(counts))


PRETRAINED_INVESTIGATION = (
    "How the preset's values were chosen, and every configuration tried on the pretrained model (the task and "
    "its readers, warm-up size, learning rate, steps, batch and micro-batch, truncation rule), with their "
    "numbers and what did not work: docs/demo/smollm2.md in the vpo repository.")
"""The pretrained-model report's pointer to its development log."""


def pretrained_metrics(cfg: DemoConfig, task: Any, methods: list[str], seeds: list[int], warm: dict[str, Any],
                       runs: dict[tuple[str, int], dict[str, Any]], evaluated: dict[str, Any]) -> dict[str, Any]:
    """The report's metrics dict (``vpo.report``) of a pretrained-model preset."""
    from vpo.demo.config import MAZE_ONLY
    from vpo.demo.results import (TRUNCATED_RULES, findings, method_entries,
                                  paired_comparisons, story_checks, training_curves)

    examples, pools = evaluated["examples"], evaluated["pools"]
    objectives = list(task.objective_names(examples[0]))
    groups, entries, seed_metrics = method_entries(cfg, methods, seeds, evaluated, objectives,
                                                   lambda p, ex: distinct_texts(p, task, ex))
    for key, (_, m, names) in groups.items():
        rates = [chain_format(pools[n], task, m) for n in names]
        entries[key].update({f"chains_{k}": float(np.mean([r[k] for r in rates])) for k in rates[0]})
    pool = cfg.pool
    paired_rows = paired_comparisons(cfg, methods, seed_metrics)
    training = training_curves(methods, seeds, groups, runs)
    x, y = objectives[:2]
    color = objectives[2] if len(objectives) > 2 else None
    first = {key: names[0] for key, (_, _, names) in groups.items()}
    shown = list(range(min(3, len(examples))))
    space = {"x": x, "y": y, "color": color, "examples": [examples[i].get("topic", f"prompt {i}") for i in shown],
             "vectors": {key: [pools[name].vectors[i].tolist() for i in shown] for key, name in first.items()}}

    def spread(i: int) -> int:  # distinct (x, y) points all pools reach together: no method is favoured
        return len({(round(v[0], 4), round(v[1], 4)) for name in first.values() for v in pools[name].vectors[i]})

    pick = max(range(min(10, len(examples))), key=lambda i: (spread(i), -i))
    story_space = {"x": x, "y": y, "color": color, "examples": [examples[pick].get("topic", f"prompt {pick}")],
                   "vectors": {key: [pools[name].vectors[pick].tolist()] for key, name in first.items()}}
    model = "SmolLM2-135M-Instruct" if cfg.model == "smollm2" else cfg.model
    intro = (f"{model} ({warm['params']:,} parameters, pretrained){' with LoRA adapters' if cfg.lora else ''}: a "
             f"chain warm-up from its own samples ({warm.get('rows', '?')} chains of m = {cfg.answers} of its "
             f"answers sampled at temperature {cfg.warmup_temperature:g}, no labels, {cfg.warmup_steps} SFT steps "
             f"through TRL), then {cfg.rl_steps} RL steps per "
             f"method and seed with VPOTrainer and the {task.name} task's own reward functions "
             f"({', '.join(objectives)}), {cfg.rl_prompts} prompts x {cfg.rl_generations} rollouts per step, from "
             f"the same warm start on the same prompts. Evaluation on {len(examples)} held-out prompts with "
             f"equal pools of {pool} answers (chains x m), each answer's budget {cfg.answer_tokens} tokens.")
    notes = [
        "k counts answers: a multi-answer method gets pool/m chains, a single-answer method pool samples. Each "
        "answer of a chain is scored on its own by the same reward functions as in training; an unparsed or "
        "missing answer is the zero vector.",
        "best@k and pass@k are exact expectations over k-subsets of the pool. Preference-weighted best@k averages "
        "best@k of w.r over fixed Dirichlet(1) weights per prompt, the same weights for every method; best@k "
        "(fixed scalar) is the mean of the objectives.",
        f"Training: {cfg.rl_steps} steps, lr {cfg.rl_lr:g}, KL beta {cfg.rl_beta:g}, G = {cfg.rl_generations}, "
        f"temperature {cfg.rl_temperature:g}, {cfg.rl_prompts} prompts per step; a rollout cut at the token limit "
        "without EOS is " + TRUNCATED_RULES[cfg.rl_truncated] + ".",
        "Chain format of each pool (share of chains): "
        + "; ".join(f"{e['label']} parsed {e['chains_parsed']:.0%}, {e['m']} tagged answers {e['chains_complete']:.0%},"
                    f" more than m {e['chains_over']:.0%}, at the token budget {e['truncated']:.0%}"
                    for e in entries.values()) + ".",
        PRETRAINED_INVESTIGATION,
    ]
    metrics: dict[str, Any] = {
        "title": f"VPO on a pretrained model: {model} on {task.name}",
        "intro": intro,
        "unit": "prompts",
        "task": {"name": task.name, "params": {}, "objectives": objectives},
        "eval": {"examples": len(examples), "pool": pool, "temperature": cfg.eval_temperature, "top_p": 1.0,
                 "eval_weights": cfg.eval_weights, "ks_shown": [1, cfg.answers, 10, pool]},
        "methods": entries, "paired": paired_rows, "training": training,
        "objective_space": space, "story_space": story_space, "references": [],
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in MAZE_ONLY},
        "warmup": {k: v for k, v in warm.items() if k not in ("loss_curve", "choices")},
        "runs": {f"{m}-s{s}": {k: v for k, v in r.items() if k not in ("series", "reward", "steps")}
                 for (m, s), r in runs.items()},
        "notes": notes,
    }
    means = "; ".join(f"{e['label']}: " + ", ".join(
        f"{name} {e['objective_mean'][name]['mean']:.2f} (best {e['objective_best'][name]['mean']:.2f})"
        for name in objectives) for e in entries.values())
    metrics["findings"] = (story_checks(entries, paired_rows, methods, pool, cfg, unit="prompts")
                           + findings(entries, paired_rows, methods, pool, cfg, unit="prompts", answer="answers")
                           + [f"Per-objective mean (and best) over each pool's answers: {means}.",
                              f"Distinct answers per pool of {pool}: "
                              + ", ".join(f"{e['label']} {e['distinct_answers']:.1f}" for e in entries.values())
                              + "."])
    if cfg.quick:  # a smoke run's numbers say nothing about the methods
        metrics["findings"] = [SMOKE_TEST]
        metrics["intro"] = SMOKE_TEST + " " + intro
    return metrics

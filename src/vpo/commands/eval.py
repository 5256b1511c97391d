"""``vpo eval``: sample equal answer pools from any causal LM checkpoint and write a report.

Usage::

    vpo eval --task maze --task-params size=5 --model runs/demo/checkpoints/vpo-s0 --answers 3
    vpo eval --task maze --model PATH --pool 30 --examples 100 --out runs/eval-vpo
    vpo eval --task math --model PATH --pool 30 --examples 300 --max-new-tokens 2048 --backend vllm
    vpo eval --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source prompts.jsonl --model PATH

``--reward-funcs`` (your own reward functions, TRL's contract) with ``--source`` (the prompts)
replace ``--task``: the report's metrics are then on your objectives (``vpo rewards check``).

A checkpoint written by ``vpo demo`` carries ``vpo_format.json`` and is prompted in its compact
format; any other checkpoint gets the task's own prompts (wrapped in the tokenizer's chat
template when it has one, unless --no-chat). Without --answers, m is the one the checkpoint
records (vpo_format.json or vpo_train.json; else 1), and the terminal says which and why. The
checkpoint is checked before any work (``vpo.checkpoints``), and --out must not hold another
run's results (--overwrite replaces them). Writes report.md, report.html, metrics.json,
plots/ and the pool (pool.npz + pool.npz.jsonl with the raw generations) under --out. With two or
more objectives the report also gives their correlation over the pool's answers, a heatmap, and
their effective dimension (1: collinear, a vector reward adds nothing; D: independent).

Sampling (``vpo.sampling``): on --device (auto: cuda when available) in --dtype (auto: bfloat16
on a GPU, float32 on CPU), --batch-size chains per generate() call (0: auto). --seeding auto replays the old stream (one
seed per call) for the hf backend on CPU and seeds every chain on its own on a GPU, so GPU pools
do not depend on the batch size (--seeding chain does that on CPU too). --backend vllm
samples with vLLM on a GPU (pip install 'vpo[vllm]').
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from vpo.commands.options import PoolOptions, RewardFuncsOptions, task_help
from vpo.commands.rewards import apply_failure_policy, own_setup, resolve_task
from vpo.config import add_dataclass_args, check_fields, check_out_dir, dataclass_from_args, parse_params
from vpo.sampling import SamplingOptions


@dataclass
class EvalConfig(RewardFuncsOptions, PoolOptions, SamplingOptions):
    """Options of ``vpo eval`` (the pool ones, --temperature to --pool, from ``PoolOptions``; the
    sampling ones, --device to --threads, from ``SamplingOptions``)."""

    task: str = field(default="maze", metadata={"help": task_help})
    task_params: str = field(default="", metadata={
        "help": "task parameters as key=value pairs, comma-separated (e.g. size=5,reward_mode=linear); "
                "default: those recorded in the checkpoint's vpo_format.json, if any"})
    model: str = field(default="", metadata={
        "help": "checkpoint folder (transformers save_pretrained layout, or a LoRA adapter from vpo train --lora) "
                "or a .gguf file, or smollm2"})
    answers: int | None = field(default=None, metadata={
        "help": "answers per chain m (the pool holds pool/m chains); default: the m the checkpoint records "
                "(vpo_format.json or vpo_train.json), else 1", "min": 1})
    source: str = field(default="", metadata={"help": "data file/dataset for tasks that are not generated"})
    eval_weights: int = field(default=64, metadata={"help": "fixed Dirichlet(1) weights per example", "min": 1})
    seed: int = field(default=0, metadata={"help": "sampling seed and evaluation-weight seed", "min": 0})
    chat: bool | None = field(default=None, metadata={
        "help": "wrap prompts in the tokenizer's chat template (default: when it has one)"})
    label: str = field(default="", metadata={"help": "name of the checkpoint in the report (default: folder name)"})
    out: str = field(default="runs/eval", metadata={"help": "report folder"})
    progress: bool = field(default=True, metadata={"help": "progress bars"})
    search: str = field(default="", metadata={
        "help": "test-time search instead of the pool report: best-of-n (curves for one or more "
                "comma-separated --model checkpoints) or openevolve (--task code)",
        "choices": ["", "best-of-n", "openevolve"]})
    iterations: int = field(default=200, metadata={
        "help": "OpenEvolve iterations per problem (--search openevolve)", "min": 1})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the results already in --out (without it such a folder is refused)"})


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="sample answer pools from a checkpoint, compute best@k/pass@k/diversity, write a report",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataclass_args(parser, EvalConfig)
    parser.set_defaults(func=run)


def run_eval(cfg: EvalConfig, args: argparse.Namespace | None = None) -> dict:
    """Evaluate ``cfg.model``; returns {"report": paths, "metrics": dict}. ``args``: the parsed
    command line, whose typed flags tell ``--task`` given alongside ``--reward-funcs``."""
    import os
    import time

    check_fields(cfg)  # a config built in Python gets the CLI's checks
    if cfg.answers is not None and cfg.pool % cfg.answers:
        raise ValueError(f"--pool ({cfg.pool}) must be a multiple of --answers ({cfg.answers}) for equal pools")
    check_out_dir(cfg.out)
    from vpo.runs import check_claim

    check_claim(cfg.out, command="eval", overwrite=cfg.overwrite, resume_flag="")  # a used --out: before any read
    own_name, own_params = resolve_task(cfg, args, source=cfg.source)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vpo.checkpoints import chain_answers, check_checkpoints, describe_record
    from vpo.evaluation import example_weights, load_format, pool_metrics, sample_pools, summarize
    from vpo.formats import TaskFormat, recorded_method
    from vpo.report import write_report
    from vpo.runs import claim_out_dir
    from vpo.sampling import check_sampling, check_sampling_memory, open_sampler
    from vpo.search import levels_of_pools
    from vpo.tasks import get_task
    from vpo.workload import check_pool_workload, human_bytes

    if not cfg.model:
        raise ValueError("--model is required (a checkpoint folder, a .gguf file or smollm2)")
    from vpo.models import resolve_model

    model_dir = Path(resolve_model(cfg.model))  # an alias (smollm2): its file
    gguf = model_dir.suffix == ".gguf" and model_dir.is_file()
    if not model_dir.is_dir() and not gguf:
        raise FileNotFoundError(f"no checkpoint folder or .gguf file {model_dir}")
    options = cfg.check([model_dir])              # --backend/--device/--dtype fail here, before any load
    # your reward functions load (an import of your module) before the checkpoint is read, as an option would
    own_task = get_task(own_name, **own_params) if own_name is not None else None
    # with --reward-funcs, a checkpoint recording another task is refused (its prompts are not --source's)
    params, (info,) = check_checkpoints([model_dir], task=own_name or cfg.task,
                                        given={} if own_name is not None else parse_params(cfg.task_params))
    if own_name is not None:
        params = own_params
    m, why = chain_answers(info, cfg.answers)
    if cfg.pool % m:
        raise ValueError(f"--pool ({cfg.pool}) must be a multiple of m = {m} ({why}) for equal pools")
    print(f"m = {m}: {why}", flush=True)
    if info.inherited:
        print(f"prompt format and task parameters: {describe_record(info)}", flush=True)
    if not cfg.progress:
        from vpo.sampling import hide_library_progress

        hide_library_progress()
    task = own_task if own_task is not None else apply_failure_policy(get_task(cfg.task, **params), cfg)
    examples = task.examples(cfg.split, cfg.examples, source=cfg.source or None)
    if not examples:
        raise ValueError(f"task {task.name!r} gave no examples for split {cfg.split!r}")
    budgets = own_setup(task, examples, m)  # a column your functions need: named before the model loads
    format_dir = None if gguf or not info.format_applies else model_dir
    plain = load_format(format_dir, task, chat=False)
    budget = cfg.max_new_tokens or plain.completion_budget(examples, m)
    work = check_pool_workload(examples=len(examples), pool=cfg.pool, m=m, objectives=task.num_objectives(examples[0]),
                               max_new_tokens=budget, eval_weights=cfg.eval_weights)
    memory = check_sampling_memory(model_dir, options, prompts=[plain.prompt(e, m) for e in examples],
                                   max_new_tokens=budget, chains=work.chains)
    claim_out_dir(cfg.out, command="eval", overwrite=cfg.overwrite, resume_flag="")
    print(f"loading {model_dir}, then sampling {work.chains:,} chains of up to {budget} tokens "
          f"({len(examples)} examples x {cfg.pool} answers, about {human_bytes(work.bytes)} held"
          + (f"; memory: {memory}" if memory else "") + ")", flush=True)
    start, cpu_start = time.time(), time.process_time()
    sampler, tokenizer = open_sampler(model_dir, options)
    fmt = load_format(format_dir, task, tokenizer=tokenizer, chat=cfg.chat)
    if own_name is not None and not isinstance(fmt, TaskFormat):
        raise ValueError(f"--reward-funcs evaluates on the prompts of --source, but {model_dir} was trained on the "
                         f"{fmt.name!r} prompt format")
    max_new = cfg.max_new_tokens
    if max_new <= 0:
        max_new = fmt.completion_budget(examples, m)
    check_sampling(cfg.temperature, cfg.top_p, max_new)
    pools = sample_pools(None, None, task, examples, m=m, pool=cfg.pool, temperature=cfg.temperature,
                         top_p=cfg.top_p, max_new_tokens=max_new, fmt=fmt, seed=cfg.seed, sampler=sampler,
                         progress=cfg.progress)
    task.failures.end_step()  # the last window of reward calls: RewardFailureError past --max-failure-rate
    failures = task.failures.totals()
    out = Path(cfg.out)
    pools.save(out / "pool.npz")
    dims = {task.num_objectives(e) for e in examples}
    if len(dims) != 1:
        raise ValueError(f"task {task.name!r}: examples have different numbers of objectives {sorted(dims)}; "
                         "pool metrics need one D")
    weights = example_weights(len(examples), dims.pop(), cfg.eval_weights, seed=cfg.seed)
    per_example = pool_metrics(pools.vectors, task, eval_weights=weights)
    levels = [task.difficulty(e) for e in examples]
    label = cfg.label or (model_dir.stem if gguf else model_dir.name)
    objectives = list(task.objective_names(examples[0]))
    entry = summarize([per_example], label=f"{label} (m={m})", m=m, objectives=objectives,
                      extra={"tokens_per_chain": pools.completion_tokens, "truncated": pools.truncated,
                             "method": None if gguf else recorded_method(model_dir),   # its colour in the plots,
                             "folder": model_dir.stem if gguf else model_dir.name})    # else its folder's name
    shown = list(range(min(3, len(examples))))
    metrics = {
        "title": f"Evaluation of {label} on {task.name}",
        "intro": f"Checkpoint {model_dir} ({fmt.name} prompts), {len(examples)} examples of split {cfg.split!r}, "
                 f"pools of {cfg.pool} answers ({cfg.pool // m} chains x m = {m}).",
        "task": {"name": task.name, "params": params, "objectives": objectives},
        "eval": {"examples": len(examples), "pool": cfg.pool, "answers": m, "answers_from": why,
                 "temperature": cfg.temperature, "top_p": cfg.top_p,
                 "eval_weights": cfg.eval_weights, "ks_shown": [1, 3, 10, cfg.pool]},
        "methods": {label: entry},
        "by_level": ({label: levels_of_pools(task, list(pools.vectors), levels)}
                     if any(level is not None for level in levels) else None),
        "timings": {"loading, sampling and scoring": {"wall": time.time() - start,
                                                      "cpu": time.process_time() - cpu_start}},
        "sampling": {"backend": options.backend, "device": options.device, "dtype": options.dtype,
                     "seeding": options.seeding, "batch_size": options.batch_size or "auto"},
        # the options this evaluation used (not --search's: --iterations belongs to openevolve)
        "config": {**{k: getattr(cfg, k) for k in cfg.__dataclass_fields__ if k not in ("search", "iterations")},
                   "task": task.name},  # with --reward-funcs: own_rewards, not the --task default
        "reward_failures": failures,
        **({"length_budgets": budgets} if budgets else {}),
        "notes": [*budgets,
                  f"{pools.truncated:.0%} of the chains hit the generation budget ({max_new} tokens) without EOS.",
                  f"{failures['failed']:,} of {failures['calls']:,} reward calls failed (raised, NaN, or no verdict in "
                  "time) and scored 0" + ("; the log has the first traceback of each kind" if failures["failed"] else "")
                  + (f". A reward call is one function on one answer (a function that judges the whole completion: "
                     f"on one chain, its value on each of the chain's m = {m} slots, as in training); a slot with no "
                     "answer is the zero vector, with the chain's value in those functions' objectives."
                     if own_name is not None else
                     f". A reward call scores one non-empty answer: the {len(examples) * cfg.pool // m:,} chains x m = "
                     f"{m} hold {len(examples) * cfg.pool:,} answers, and a missing or unparsed one is the zero vector "
                     "without a call.")],
    }
    if len(objectives) >= 2:
        from vpo.commands.rewards import diagnostics_of

        metrics["objective_diagnostics"] = diagnostics_of(pools.vectors.reshape(-1, len(objectives)), objectives)
        x, y = objectives[1:3] if len(objectives) >= 3 else objectives[:2]
        metrics["objective_space"] = {
            "x": x, "y": y, "color": objectives[3] if len(objectives) >= 4 else None,
            "examples": [str(examples[i].get("id", i)) for i in shown],
            "vectors": {label: [pools.vectors[i].tolist() for i in shown]}}
    return {"report": write_report(metrics, out), "metrics": metrics}


def run(args: argparse.Namespace) -> int:
    cfg = dataclass_from_args(EvalConfig, args)
    if cfg.search:
        resolve_task(cfg, args, source=cfg.source)  # --task typed alongside --reward-funcs fails here too
        from vpo.commands.search import search_from_eval_config

        search_from_eval_config(cfg.search, cfg)
        print(f"search results: {cfg.out}")
        return 0
    result = run_eval(cfg, args)
    paths = result["report"]
    print(f"report: {paths['md']}  (html: {paths['html']}, metrics: {paths['json']})")
    return 0

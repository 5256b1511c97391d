"""OpenEvolve 0.4.x with a local policy: an in-process LLM adapter, a sandboxed code evaluator,
and an initial population seeded with the policy's own samples.

Usage::

    from vpo.integrations.openevolve import evolve, search_problems, transformers_client
    # one problem, seeds given, any transformers causal LM as the mutation operator
    result = evolve(example, seeds=[code_a, code_b], client=transformers_client(),
                    model_name="runs/vpo/checkpoint", iterations=50, output_dir="runs/oe/p1")
    result.first_solved, result.best_score, result.best_by_iteration()

    # a problem set, seeds sampled from the policy itself (n chains x m answers, all kept)
    report = search_problems(examples, models=[("VPO", "runs/vpo"), ("GRPO", "runs/grpo")],
                             iterations=200, output_dir="runs/oe", chains=10, m=3)

The same is ``vpo search openevolve --task code --problems FILE --model PATH --iterations 200``.

How it plugs into OpenEvolve (notes/engines.md section 5):

* **LLM.** ``LLMModelConfig.init_client`` returns a ``TransformersLLM``: async ``generate``
  and ``generate_with_context``, a ``model`` attribute (OpenEvolve logs it), the checkpoint
  given by ``LLMModelConfig.name`` (a model folder or a ``.gguf`` file) and loaded lazily on
  the first call, once per process (OpenEvolve calls ``init_client`` twice in the parent and
  twice per worker; the parent never loads it). No HTTP server.
* **Workers.** OpenEvolve generates and evaluates in a ``ProcessPoolExecutor``. By default
  the workers are *spawned* (fresh interpreters, safe after the parent has used torch to
  sample the seeds): OpenEvolve passes ``max_tasks_per_child`` to the pool, and any value
  makes Python 3.11+ use ``spawn``; it is set so high that a worker is never recycled.
  ``start_method="fork"`` is faster to start and fine when the parent never touched torch.
* **Evaluator.** A per-problem evaluator *file* (OpenEvolve rebuilds callables from their
  source, so a file is the robust form) written by
  ``vpo.integrations.openevolve_evaluator.write_evaluator``: every candidate runs in
  ``vpo.sandbox``; fitness ``combined_score`` = fraction of tests passed, failures 0.
* **Seeds.** All programs of the policy's chains (every one of the m answers), deduplicated
  by AST, are evaluated and added to the database at iteration 0, spread over the islands
  round-robin; OpenEvolve's ``run()`` then skips its own initial program.
* **Bad input.** A candidate that hangs, crashes or attacks the evaluator costs one
  evaluation and scores 0. An LLM answer with no code block (and no SEARCH/REPLACE diff) is
  turned into an empty response, which OpenEvolve counts as a failed mutation (no evaluation).

Iterations are counted 1..N (the t-th LLM mutation); seeds are iteration 0. A problem is
solved at the first iteration whose program passes every test.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import os
import re
import signal
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from openevolve.llm.base import LLMInterface
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without the extra
    raise ModuleNotFoundError(
        "vpo.integrations.openevolve needs OpenEvolve: pip install 'vpo[openevolve]' (openevolve==0.4.*)"
    ) from exc

from vpo.integrations.openevolve_evaluator import evaluation_timeout, write_evaluator

__all__ = [
    "DEFAULT_SYSTEM_TEMPLATE",
    "EvolveResult",
    "ScriptedLLM",
    "TransformersLLM",
    "clear_model_cache",
    "evolve",
    "make_config",
    "plot_solved",
    "postprocess_response",
    "sample_seed_programs",
    "scripted_client",
    "search_problems",
    "seed_programs_from_text",
    "transformers_client",
]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_TEMPLATE = (
    "You are an expert competitive programmer. You improve a Python 3 program until it solves "
    "the problem below. The fitness score is the fraction of hidden tests the program passes "
    "(1.0 = every test). Always answer with the complete program in one ```python code block.\n\n"
    "# Problem\n{problem}"
)
"""System message of every OpenEvolve prompt; ``{problem}`` is the task's single-answer prompt."""

_NEVER_RECYCLE = 2**31 - 1
_FENCE_RE = re.compile(r"^[ \t]*```", re.MULTILINE)
_DIFF_MARKER = "<<<<<<< SEARCH"


def postprocess_response(text: Any) -> str:
    """An LLM answer as OpenEvolve should see it: unchanged when it holds a fenced code block
    or a SEARCH/REPLACE diff, else ``""``. OpenEvolve's full-rewrite parser would otherwise run
    bare prose as the program; an empty answer is a failed mutation instead (no evaluation)."""
    if not isinstance(text, str):
        return ""
    if _FENCE_RE.search(text) or _DIFF_MARKER in text:
        return text
    return ""


# ----- LLM adapters ---------------------------------------------------------------------------

_MODEL_CACHE: dict[tuple[str, str, str], tuple[Any, Any]] = {}


def clear_model_cache() -> None:
    """Drop the models this process loaded (frees their memory)."""
    _MODEL_CACHE.clear()
    gc.collect()


def _load_cached(path: str, dtype: str, device: str) -> tuple[Any, Any]:
    key = (str(path), dtype, device)
    if key not in _MODEL_CACHE:
        from vpo.models import load_checkpoint

        if not Path(path).exists():
            raise FileNotFoundError(f"model not found: {path} (a model folder or a .gguf file)")
        model, tokenizer = load_checkpoint(path, dtype=dtype)
        model.to(device)
        model.eval()
        _MODEL_CACHE[key] = (model, tokenizer)
    return _MODEL_CACHE[key]


class TransformersLLM(LLMInterface):
    """OpenEvolve LLM backed by a local transformers causal LM (no server).

    Built by OpenEvolve from an ``LLMModelConfig``: ``name`` is the checkpoint (folder or
    ``.gguf``), ``temperature``/``top_p``/``max_tokens``/``random_seed`` control sampling
    (``max_tokens`` new tokens, default 512). The model loads on the first generation and is
    shared by every instance of the process. ``chat``: use the tokenizer's chat template
    (None: when it has one); ``threads``: torch intra-op threads for this process (None:
    leave torch's setting); ``max_context``: prompt + completion budget in tokens (the prompt
    is left-truncated to fit; None: the model's ``max_position_embeddings``).
    """

    def __init__(self, model_cfg: Any, *, dtype: str = "float32", device: str = "cpu", chat: bool | None = None,
                 threads: int | None = None, max_context: int | None = None,
                 require_code_block: bool = True) -> None:
        if not getattr(model_cfg, "name", None):
            raise ValueError("TransformersLLM needs LLMModelConfig.name = the model folder or .gguf file")
        self.model = str(model_cfg.name)          # OpenEvolve logs vars(client)["model"]
        self.dtype, self.device, self.chat, self.threads = dtype, device, chat, threads
        self.max_context = max_context
        self.require_code_block = require_code_block
        self.temperature = 0.7 if model_cfg.temperature is None else float(model_cfg.temperature)
        self.top_p = 1.0 if model_cfg.top_p is None else float(model_cfg.top_p)
        self.max_tokens = int(model_cfg.max_tokens) if model_cfg.max_tokens else 512
        self.seed = int(model_cfg.random_seed) if model_cfg.random_seed is not None else 0
        self.system_message = model_cfg.system_message
        self.calls = 0
        self.last_usage: dict[str, int] | None = None

    # --- loading and prompting --------------------------------------------------------------
    def _loaded(self) -> tuple[Any, Any]:
        if self.threads is not None:
            import torch

            torch.set_num_threads(max(1, int(self.threads)))
        return _load_cached(self.model, self.dtype, self.device)

    def _use_chat(self, tokenizer: Any) -> bool:
        return bool(getattr(tokenizer, "chat_template", None)) if self.chat is None else bool(self.chat)

    def render(self, system_message: str | None, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text: the chat template over [system, *messages] when used, else the
        contents joined by blank lines."""
        _, tokenizer = self._loaded()
        turns = ([{"role": "system", "content": system_message}] if system_message else []) + [
            {"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in messages]
        if self._use_chat(tokenizer):
            return tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(t["content"] for t in turns) + "\n\n"

    def sample(self, prompt_text: str, num: int = 1, *, temperature: float | None = None,
               top_p: float | None = None, max_tokens: int | None = None, seed: int | None = None) -> list[str]:
        """``num`` completions of a rendered prompt (one batch). Sampling is seeded by
        ``seed`` (default: the config seed, the call count and a CRC of the prompt, so
        reruns repeat and different prompts or calls differ)."""
        import torch

        model, tokenizer = self._loaded()
        temperature = self.temperature if temperature is None else float(temperature)
        top_p = self.top_p if top_p is None else float(top_p)
        new_tokens = self.max_tokens if max_tokens is None else int(max_tokens)
        context = self.max_context or int(getattr(model.config, "max_position_embeddings", 0) or 4096)
        budget = max(16, context - new_tokens)
        # a chat template writes its own special tokens; a plain prompt gets the tokenizer's (e.g. BOS)
        ids = tokenizer(prompt_text, return_tensors="pt",
                        add_special_tokens=not self._use_chat(tokenizer))["input_ids"][:, -budget:]
        ids = ids.repeat(num, 1).to(model.device)
        if seed is None:
            seed = (self.seed * 1_000_003 + self.calls * 7919 + zlib.crc32(prompt_text.encode("utf-8"))) % (2**31)
        self.calls += 1
        torch.manual_seed(seed)
        kwargs: dict[str, Any] = dict(max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        new = out[:, ids.shape[1]:]
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        pad = tokenizer.pad_token_id
        completion = int((new != pad).sum()) if pad is not None else int(new.numel())
        self.last_usage = {"prompt_tokens": int(ids.numel()), "completion_tokens": completion,
                           "total_tokens": int(ids.numel()) + completion}
        return texts

    # --- OpenEvolve's interface ---------------------------------------------------------------
    async def generate(self, prompt: str, **kwargs: Any) -> str:
        return await self.generate_with_context(self.system_message or "", [{"role": "user", "content": prompt}],
                                                **kwargs)

    async def generate_with_context(self, system_message: str, messages: list[dict[str, str]],
                                    **kwargs: Any) -> str:
        text = self.sample(self.render(system_message, messages), 1, temperature=kwargs.get("temperature"),
                           top_p=kwargs.get("top_p"), max_tokens=kwargs.get("max_tokens"))[0]
        return postprocess_response(text) if self.require_code_block else text


class ScriptedLLM(LLMInterface):
    """Stand-in LLM replaying fixed responses in order (cycling), for offline tests and
    benchmarks of the OpenEvolve loop. Each worker process replays from the start."""

    def __init__(self, model_cfg: Any, *, responses: Sequence[str], require_code_block: bool = True) -> None:
        if not responses or not all(isinstance(r, str) for r in responses):
            raise ValueError("ScriptedLLM needs a non-empty sequence of response strings")
        self.model = "scripted"
        self.responses = list(responses)
        self.require_code_block = require_code_block
        self.calls = 0
        self.last_usage = None

    async def generate(self, prompt: str, **kwargs: Any) -> str:
        return await self.generate_with_context("", [{"role": "user", "content": prompt}])

    async def generate_with_context(self, system_message: str, messages: list[dict[str, str]],
                                    **kwargs: Any) -> str:
        text = self.responses[self.calls % len(self.responses)]
        self.calls += 1
        return postprocess_response(text) if self.require_code_block else text


def transformers_client(**options: Any) -> Callable[[Any], TransformersLLM]:
    """``init_client`` for ``TransformersLLM`` with ``options`` (dtype, device, chat, threads,
    max_context, require_code_block); picklable, as spawned workers need."""
    return functools.partial(TransformersLLM, **options)


def scripted_client(responses: Sequence[str], **options: Any) -> Callable[[Any], ScriptedLLM]:
    """``init_client`` for ``ScriptedLLM`` replaying ``responses``; picklable."""
    return functools.partial(ScriptedLLM, responses=list(responses), **options)


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

    def to_dict(self) -> dict[str, Any]:
        return {"problem_id": self.problem_id, "iterations": self.iterations, "first_solved": self.first_solved,
                "best_score": self.best_score, "best_code": self.best_code, "num_seeds": self.num_seeds,
                "evaluations": self.evaluations, "failed_mutations": self.failed_mutations,
                "seconds": self.seconds, "best_by_iteration": self.best_by_iteration(), "history": self.history,
                "output_dir": self.output_dir}


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


def _record_adds(database: Any, history: list[dict[str, Any]], offset: int) -> None:
    """Record every program OpenEvolve's database admits, with its iteration (wraps this
    database instance's ``add``; migrant copies are skipped)."""
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
           log_level: str = "WARNING") -> EvolveResult:
    """Run OpenEvolve on one code problem (a ``code`` task example) from ``seeds``.

    ``seeds``: candidate programs (deduplicated by AST here; none: the problem's starter code
    is the initial program). ``client``: an ``init_client`` (``transformers_client()``,
    ``scripted_client([...])``); ``model_name``: what it loads (a checkpoint path for
    ``TransformersLLM``). ``limits``: ``vpo.sandbox.Limits`` per test (default the code
    task's). Writes the evaluator, the problem and OpenEvolve's output under ``output_dir``.
    Must run on the main thread, outside an event loop (OpenEvolve installs signal handlers
    and calls ``asyncio.run``); the previous SIGINT/SIGTERM handlers and root-logger handlers
    are restored afterwards.
    """
    from openevolve.controller import OpenEvolve

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
    try:
        controller = OpenEvolve(str(initial_path), str(evaluator_file), config, output_dir=str(out / "openevolve"))
        _record_adds(controller.database, history, offset=1 if programs else 0)
        asyncio.run(_seed_and_run(controller, programs, iterations, num_islands))
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
                          seconds=time.monotonic() - started, output_dir=str(out), num_seeds=len(programs))
    (out / "result.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result


# ----- seeds from the policy --------------------------------------------------------------------

def sample_seed_programs(model_path: str, task: Any, examples: Sequence[Mapping[str, Any]], *, chains: int = 10,
                         m: int = 3, temperature: float = 0.7, top_p: float = 1.0, max_tokens: int = 512,
                         seed: int = 0, chat: bool | None = None, threads: int | None = None) -> list[list[str]]:
    """The policy's own programs for each example: ``chains`` generations of the m-answer
    prompt (``m=1``: the single-answer prompt), every answer kept (``seed_programs_from_text``).
    Loads ``model_path`` in this process (cached; ``clear_model_cache`` frees it)."""
    from openevolve.config import LLMModelConfig

    cfg = LLMModelConfig(name=str(model_path), temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                         random_seed=seed)
    llm = TransformersLLM(cfg, chat=chat, threads=threads, require_code_block=False)
    out = []
    for i, example in enumerate(examples):
        prompt = llm.render(None, [{"role": "user", "content": task.prompt(dict(example), m)}])
        texts = llm.sample(prompt, chains, seed=seed * 1_000_003 + i)
        out.append(seed_programs_from_text(texts, m))
    return out


# ----- a problem set --------------------------------------------------------------------------

def _cache_gguf(model_path: str, directory: Path) -> str:
    """A ``.gguf`` checkpoint saved once as a transformers folder (workers then load
    safetensors instead of de-quantising the GGUF file again per problem and worker)."""
    if not str(model_path).endswith(".gguf"):
        return str(model_path)
    target = directory / (Path(model_path).stem + "-hf")
    if not (target / "config.json").is_file():
        model, tokenizer = _load_cached(str(model_path), "float32", "cpu")
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
    return str(target)


def search_problems(problems: Sequence[Mapping[str, Any]], *, models: Sequence[tuple[str, Any]], iterations: int,
                    output_dir: str | Path, chains: int = 10, m: int = 3, workers: int = 1, num_islands: int = 2,
                    seed: int = 0, limits: Any = None, temperature: float = 0.7, top_p: float = 1.0,
                    max_tokens: int = 512, seed_max_tokens: int | None = None, threads: int | None = None,
                    diff_based: bool = False, seeds: Mapping[str, Sequence[Sequence[str]]] | None = None,
                    client: Callable[[Any], Any] | None = None, start_method: str = "spawn",
                    progress: Callable[[str], None] | None = print) -> dict[str, Any]:
    """OpenEvolve over a problem set for one or more policies; writes
    ``output_dir/openevolve_search.json`` (what was solved when) and
    ``output_dir/solved_vs_iteration.png``; returns the JSON dict.

    ``models``: (label, checkpoint path) pairs. Per label, the seeds of every problem are the
    policy's own programs (``chains`` x ``m`` answers, all kept) unless ``seeds[label]`` gives
    them (one list of programs per problem); then each problem is evolved with the policy as
    the mutation LLM (``client`` overrides that, e.g. a ``scripted_client`` in tests).
    ``threads``: torch threads per worker (default: cores // workers; on a machine shared
    with other jobs 1 is often much faster, since idle torch threads spin).
    A ``.gguf`` policy is saved once as a transformers folder under ``output_dir/_models``
    (about 4 bytes per parameter), which the workers load instead of de-quantising the GGUF.
    """
    from vpo.sandbox import Limits
    from vpo.tasks import get_task

    if not problems:
        raise ValueError("search_problems needs at least one problem")
    if not models:
        raise ValueError("search_problems needs at least one (label, model) pair")
    labels = [label for label, _ in models]
    if len(set(labels)) != len(labels):
        raise ValueError(f"model labels must be distinct, got {labels}")
    limits = limits if limits is not None else Limits()
    task = get_task("code", limits=limits)
    examples = [task.validate(dict(p), i) for i, p in enumerate(problems)]
    ids = [str(ex.get("id", i)) for i, ex in enumerate(examples)]
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids must be distinct")
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    say = progress or (lambda _msg: None)
    report: dict[str, Any] = {"iterations": iterations, "chains": chains, "m": m, "workers": workers,
                              "num_islands": num_islands, "problems": ids, "labels": {}}
    for label, model_path in models:
        started = time.monotonic()
        given = (seeds or {}).get(label)
        worker_model = str(model_path)
        if given is None:
            say(f"[{label}] sampling {chains} x {m} seed programs per problem from {model_path}")
            seed_lists = sample_seed_programs(str(model_path), task, examples, chains=chains, m=m,
                                              temperature=temperature, top_p=top_p,
                                              max_tokens=seed_max_tokens or max_tokens, seed=seed,
                                              threads=threads)
            worker_model = _cache_gguf(str(model_path), out / "_models")
            clear_model_cache()
        else:
            if len(given) != len(examples):
                raise ValueError(f"seeds[{label!r}] has {len(given)} lists for {len(examples)} problems")
            seed_lists = [list(s) for s in given]
        mutation_client = client or transformers_client(threads=threads)
        results: dict[str, Any] = {}
        for pid, example, programs in zip(ids, examples, seed_lists, strict=True):
            say(f"[{label}] problem {pid}: {len(programs)} seed programs, {iterations} iterations")
            res = evolve(example, programs, client=mutation_client, model_name=worker_model, iterations=iterations,
                         output_dir=out / _safe_name(label) / _safe_name(pid), workers=workers,
                         num_islands=num_islands, seed=seed, limits=limits, diff_based=diff_based,
                         temperature=temperature, top_p=top_p, max_tokens=max_tokens, start_method=start_method)
            say(f"[{label}] problem {pid}: best {res.best_score:.3f}, solved at "
                f"{res.first_solved if res.first_solved is not None else 'never'}, "
                f"{res.evaluations} evaluations, {res.failed_mutations} failed mutations, {res.seconds:.0f}s")
            results[pid] = res.to_dict()
        solved_by = [sum(1 for r in results.values() if r["first_solved"] is not None and r["first_solved"] <= t)
                     for t in range(iterations + 1)]
        mean_best = [sum(r["best_by_iteration"][t] for r in results.values()) / len(results)
                     for t in range(iterations + 1)]
        report["labels"][label] = {"model": str(model_path), "problems": results, "solved_by_iteration": solved_by,
                                   "mean_best_by_iteration": mean_best, "seconds": time.monotonic() - started}
    plot = plot_solved(report, out / "solved_vs_iteration.png")
    report["plot"] = plot.name if plot is not None else None
    (out / "openevolve_search.json").write_text(json.dumps(report, indent=1))
    return report


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text))[:80] or "_"


def plot_solved(report: Mapping[str, Any], path: str | Path) -> Path | None:
    """Two panels against iteration: problems solved so far, and the mean best score so far,
    one line per policy. Returns the PNG path, or None without matplotlib."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        logger.warning("matplotlib is not installed: no solved-vs-iteration plot")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    total = len(report["problems"])
    for label, entry in report["labels"].items():
        steps = list(range(len(entry["solved_by_iteration"])))
        ax1.step(steps, entry["solved_by_iteration"], where="post", label=str(label))
        ax2.plot(steps, entry["mean_best_by_iteration"], label=str(label))
    ax1.set_xlabel("iteration (0 = the policy's own samples)")
    ax1.set_ylabel(f"problems solved (of {total})")
    ax1.set_ylim(-0.05 * max(1, total), total * 1.05 + 0.05)
    ax1.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("mean best fraction of tests passed")
    ax2.set_ylim(-0.02, 1.02)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"OpenEvolve: {total} problems, {report['iterations']} iterations")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""OpenEvolve 0.4.x with a local policy: an in-process LLM adapter, a sandboxed code evaluator,
and an initial population seeded with the policy's own samples.

Modules: ``llm`` (the policy as OpenEvolve's LLM), ``evolve`` (one problem), ``problems`` (a
problem set). Usage::

    from vpo.integrations.openevolve import evolve, search_problems, transformers_client
    # one problem, seeds given, any transformers causal LM as the mutation operator
    result = evolve(example, seeds=[code_a, code_b], client=transformers_client(),
                    model_name="runs/vpo/checkpoint", iterations=50, output_dir="runs/oe/p1")
    result.first_solved, result.best_score, result.best_by_iteration()

    # a problem set, seeds sampled from the policy itself (n chains x m answers, all kept)
    report = search_problems(examples, models=[("VPO", "runs/vpo"), ("GRPO", "runs/grpo")],
                             iterations=200, output_dir="runs/oe", chains=10, m=3)

The same is ``vpo search openevolve --task code --problems FILE --model PATH --iterations 200``.

How it plugs into OpenEvolve:

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

try:
    import openevolve as _openevolve  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without the extra
    raise ModuleNotFoundError(
        "vpo.integrations.openevolve needs OpenEvolve: pip install 'vpo[openevolve]' (openevolve==0.4.*)"
    ) from exc

from vpo.integrations.openevolve.evolve import (EvolveResult, evolve, make_config, sample_seed_programs,
                                                seed_programs_from_text)
from vpo.integrations.openevolve.llm import (_MODEL_CACHE, DEFAULT_SYSTEM_TEMPLATE,  # noqa: F401  (tests read the cache)
                                             ScriptedLLM, TransformersLLM,
                                             clear_model_cache, postprocess_response, scripted_client,
                                             transformers_client)
from vpo.integrations.openevolve.problems import plot_solved, search_problems

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

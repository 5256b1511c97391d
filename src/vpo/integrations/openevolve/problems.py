"""OpenEvolve over a problem set for one or more policies, seeded with each policy's own samples;
what was solved when, as JSON and a plot.

Usage::

    from vpo.integrations.openevolve.problems import search_problems
    report = search_problems(examples, models=[("VPO", "runs/vpo")], iterations=200, output_dir="runs/oe")
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from vpo.integrations.openevolve.evolve import evolve, sample_seed_programs
from vpo.integrations.openevolve.llm import _load_cached, clear_model_cache, transformers_client
from vpo.models import resolve_model
from vpo.runs import atomic_write_text

logger = logging.getLogger(__name__)

# ----- a problem set --------------------------------------------------------------------------

@contextlib.contextmanager
def worker_model(model_path: str, directory: str | Path | None = None) -> Iterator[str]:
    """What OpenEvolve's workers load for ``model_path``, for the duration of the block: a
    ``.gguf`` checkpoint saved as a transformers folder in a temporary folder (under
    ``directory``, default the system's), so each worker reads safetensors instead of
    de-quantising the GGUF again, and removed afterwards (SmolLM2-135M in float32 is about
    0.5 GB); any other checkpoint as it is."""
    if not str(model_path).endswith(".gguf"):
        yield str(model_path)
        return
    with tempfile.TemporaryDirectory(prefix="vpo-openevolve-model-", dir=directory) as folder:
        model, tokenizer = _load_cached(str(model_path), "float32", "cpu")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        yield folder


def search_problems(problems: Sequence[Mapping[str, Any]], *, models: Sequence[tuple[str, Any]], iterations: int,
                    output_dir: str | Path, chains: int = 10, m: int = 3, workers: int = 1, num_islands: int = 2,
                    seed: int = 0, limits: Any = None, temperature: float = 0.7, top_p: float = 1.0,
                    max_tokens: int = 512, seed_max_tokens: int | None = None, threads: int | None = None,
                    diff_based: bool = False, device: str = "cpu", dtype: str = "float32",
                    seeds: Mapping[str, Sequence[Sequence[str]]] | None = None,
                    client: Callable[[Any], Any] | None = None, start_method: str = "spawn",
                    progress: Callable[[str], None] | None = print, progress_bar: bool = True) -> dict[str, Any]:
    """OpenEvolve over a problem set for one or more policies; writes
    ``output_dir/openevolve_search.json`` (what was solved when) and
    ``output_dir/solved_vs_iteration.png``; returns the JSON dict.

    ``models``: (label, checkpoint) pairs; a checkpoint is a folder, a ``.gguf`` file or
    ``smollm2`` (``vpo.models.resolve_model``), recorded in the JSON as given. Per label, the seeds of every
    problem are the policy's own programs (``chains`` x ``m`` answers, all kept) unless
    ``seeds[label]`` gives them (one list of programs per problem); then each problem is evolved
    with the policy as the mutation LLM (``client`` overrides that, e.g. a ``scripted_client`` in
    tests). ``threads``: torch threads per worker (default: the free cores // workers,
    ``vpo.cores.pick_threads``; more threads than free cores spin against each other). ``device``/``dtype``:
    where every process loads the policy (``vpo.models.load_checkpoint``; "auto" for either). A ``.gguf`` policy is
    saved as a transformers folder in a temporary folder for the workers while its problems run,
    then removed (``worker_model``). ``progress``: where the stage lines go (None: nowhere);
    ``progress_bar``: a bar per policy over its problems x iterations, labelled ``openevolve
    LABEL``. Paths in the JSON are relative to ``output_dir``.
    """
    from tqdm.auto import tqdm

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
    if threads is None:
        from vpo.cores import pick_threads

        threads, why = pick_threads(workers)
        if progress is not None:
            progress(f"torch threads per process: {threads} ({why}; --threads sets them)")
    quiet_shutdown_warning()
    if not progress_bar:
        from vpo.sampling import hide_library_progress

        hide_library_progress()

    def say(message: str) -> None:
        if progress is print and progress_bar:
            tqdm.write(message)  # printed above the bar, which then redraws
        elif progress is not None:
            progress(message)

    report: dict[str, Any] = {"iterations": iterations, "chains": chains, "m": m, "workers": workers,
                              "num_islands": num_islands, "problems": ids, "labels": {}}
    for label, model in models:
        started = time.monotonic()
        given = (seeds or {}).get(label)
        path = resolve_model(model)
        if given is None:
            say(f"[{label}] sampling {chains} x {m} seed programs per problem from {model}")
            seed_lists = sample_seed_programs(path, task, examples, chains=chains, m=m,
                                              temperature=temperature, top_p=top_p,
                                              max_tokens=seed_max_tokens or max_tokens, seed=seed,
                                              threads=threads, device=device, dtype=dtype)
        else:
            if len(given) != len(examples):
                raise ValueError(f"seeds[{label!r}] has {len(given)} lists for {len(examples)} problems")
            seed_lists = [list(s) for s in given]
        mutation_client = client or transformers_client(threads=threads, device=device, dtype=dtype)
        results: dict[str, Any] = {}
        bar = tqdm(total=len(examples) * iterations, desc=f"openevolve {label}", unit="it", disable=not progress_bar)

        def advance(to: int) -> None:
            if to > bar.n:
                bar.update(to - bar.n)

        with worker_model(path) as loaded:  # a .gguf policy: converted once, removed after its problems
            clear_model_cache()  # the workers load their own copy
            for k, (pid, example, programs) in enumerate(zip(ids, examples, seed_lists, strict=True)):
                say(f"[{label}] problem {pid}: {len(programs)} seed programs, {iterations} iterations")
                done = k * iterations
                res = evolve(example, programs, client=mutation_client, model_name=loaded, iterations=iterations,
                             output_dir=out / _safe_name(label) / _safe_name(pid), workers=workers,
                             num_islands=num_islands, seed=seed, limits=limits, diff_based=diff_based,
                             temperature=temperature, top_p=top_p, max_tokens=max_tokens, start_method=start_method,
                             log_level="WARNING" if progress_bar else "ERROR",   # quiet: OpenEvolve's errors only
                             on_iteration=lambda t, done=done: advance(done + min(t, iterations)))
                advance(done + iterations)
                say(f"[{label}] problem {pid}: best {res.best_score:.3f}, solved at "
                    f"{res.first_solved if res.first_solved is not None else 'never'}, "
                    f"{res.evaluations} evaluations, {res.failed_mutations} failed mutations, {res.seconds:.0f}s"
                    + (" (no mutation produced a program: counted as failed, the search goes on)" if res.error else ""))
                results[pid] = res.to_dict(relative_to=out)
        bar.close()
        solved_by = [sum(1 for r in results.values() if r["first_solved"] is not None and r["first_solved"] <= t)
                     for t in range(iterations + 1)]
        mean_best = [sum(r["best_by_iteration"][t] for r in results.values()) / len(results)
                     for t in range(iterations + 1)]
        report["labels"][label] = {"model": str(model), "problems": results, "solved_by_iteration": solved_by,
                                   "mean_best_by_iteration": mean_best, "seconds": time.monotonic() - started}
    plot = plot_solved(report, out / "solved_vs_iteration.png")
    report["plot"] = plot.name if plot is not None else None
    atomic_write_text(out / "openevolve_search.json", json.dumps(report, indent=1))
    return report


def quiet_shutdown_warning() -> None:
    """No "resource_tracker: There appear to be 1 leaked semaphore objects" at exit: OpenEvolve's
    process pool leaves a semaphore that multiprocessing's resource tracker then removes itself, so
    the warning reports a clean-up, not a leak. The tracker process takes this interpreter's -W
    options when it starts (with the first semaphore), hence the filter in ``sys.warnoptions``."""
    import sys

    rule = "ignore:resource_tracker:UserWarning"
    if rule not in sys.warnoptions:
        sys.warnoptions.append(rule)


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
    from vpo.report import line_styles

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    total = len(report["problems"])
    styles = line_styles({label: str(label) for label in report["labels"]})
    for label, entry in report["labels"].items():
        steps = list(range(len(entry["solved_by_iteration"])))
        ax1.step(steps, entry["solved_by_iteration"], where="post", label=str(label), **styles[label])
        ax2.plot(steps, entry["mean_best_by_iteration"], label=str(label), **styles[label])
    ax1.set_xlabel("iteration (0 = the policy's own samples)")
    ax1.set_ylabel(f"problems solved (of {total})")
    ax1.set_ylim(-0.05 * max(1, total), total * 1.05 + 0.05)
    ax1.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("mean best fraction of tests passed")
    ax2.set_ylim(-0.02, 1.02)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # iterations are whole
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    iterations = report["iterations"]
    fig.suptitle(f"OpenEvolve: {total} problem{'s' * (total != 1)}, {iterations} iteration{'s' * (iterations != 1)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""Sample equal answer pools from a causal LM on a task, and compute every pool metric.

Usage::

    from vpo.evaluation import TaskFormat, sample_pools, pool_metrics, summarize
    pools = sample_pools(model, tokenizer, task, examples, m=3, pool=30, temperature=0.7)   # vpo.sampling
    per_example = pool_metrics(pools.vectors, task, eval_weights=weights)   # dict of arrays
    entry = summarize([per_example], label="VPO", m=3)      # one method, one or more seeds

docs/algorithm.md §5: k counts ANSWERS, not chains. A method with m answers per chain gets
``pool // m`` chains per example, a single-answer method ``pool`` samples, so every pool holds
the same number of answers. Each answer of a chain is scored on its own with ``task.score``
(a missing answer scores the zero vector); duplicates inside a chain are kept as answers,
exactly as repeated samples of a single-answer method are, so neither format is favoured. Your
own reward functions score an example's chains as the trainer does (``score_pool``): a function
that judges the whole completion once per chain, its value on every slot of the chain.

Metrics per example (all estimators exact, from ``vpo.metrics``):

* ``best_at_k``: (P,) unbiased best@k of the task's fixed scalar, k = 1..P;
* ``pref_best_at_k``: (P,) preference-weighted best@k over fixed Dirichlet(1) evaluation
  weights of that example (``pref_best_at_k[P-1]`` is the pool's E_w[max]);
* ``pass_at_k``: (P,) with "correct" = every component at its maximum;
* ``diversity``: mean pairwise L1 distance of the pool's reward vectors;
* ``completion_rate``: fraction of answers whose reward vector is not all zero (maze: the
  answer reached the exit);
* ``pareto_fraction``: fraction of the pool's answers that are non-dominated and not all zero
  (a pool of failed answers has fraction 0, not 1);
* ``objective_mean`` / ``objective_best``: (D,) per-objective mean and max over the pool.

``summarize`` turns per-example metrics of one method (one dict per training seed, same
examples in the same order) into means with confidence intervals over examples and over
seeds; ``paired`` gives paired differences between two methods on the same examples.

Shape glossary: G examples (prompts, one group each), P answers per pool, M answers per chain
(m), D objectives, K evaluation weights, L points of a curve, S training seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vpo import metrics as M
from vpo.formats import FORMAT_FILE, PromptFormat, TaskFormat, load_format  # noqa: F401  (re-exported)
from vpo.sampling import Generation, HFSampler, Sampler
from vpo.tasks.base import Example, Task

SCALAR_METRICS = ("diversity", "completion_rate", "pareto_fraction")
CURVE_METRICS = ("best_at_k", "pref_best_at_k", "pass_at_k")


# ----- sampling ---------------------------------------------------------------------------

@dataclass
class Pools:
    """Answer pools of one checkpoint on G examples (prompts).

    ``vectors``: (G, P, D) reward vectors, P = chains x m answers per example, chain-major
    (answers of chain c are rows c*m .. c*m+m-1). ``texts``: G lists of the raw generations
    (pool // m per example). ``completion_tokens``: mean generated tokens per chain;
    ``truncated``: fraction of chains that hit ``max_new_tokens`` without EOS.
    """

    vectors: np.ndarray
    m: int
    texts: list[list[str]] = field(default_factory=list)
    completion_tokens: float = float("nan")
    truncated: float = float("nan")

    def save(self, path: str | Path) -> None:
        """Write ``path`` (.npz with the vectors) and ``path`` + ``.jsonl`` (the texts)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, vectors=self.vectors, m=self.m,
                            completion_tokens=self.completion_tokens, truncated=self.truncated)
        with open(str(path) + ".jsonl", "w") as fh:
            for row in self.texts:
                fh.write(json.dumps(row) + "\n")
        tmp.replace(path)  # the .npz appears last: its presence means the pool is complete

    @classmethod
    def load(cls, path: str | Path) -> Pools:
        """The pools ``save`` wrote to ``path``; RecordError naming the file and the array or line
        that is damaged or impossible (vectors not (G, P, D) finite numbers, P not a multiple of m,
        texts not G lists of P // m strings)."""
        import zipfile
        import zlib

        from vpo.records import RecordError, first_line, read_jsonl

        path = Path(path)
        hint = "delete it to sample the pool again"
        names = ("vectors", "m", "completion_tokens", "truncated")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: np.asarray(data[name]) for name in names if name in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as err:
            raise RecordError(f"{path} is not a readable pool file ({first_line(err)}); {hint}") from None
        for name in names:
            if name not in arrays:
                raise RecordError(f"{path}: array {name!r} is missing; {hint}")
        vectors, m = arrays["vectors"], arrays["m"]
        if m.shape != () or m.dtype.kind not in "iu" or int(m) < 1:
            raise RecordError(f"{path}: array 'm' is {m.tolist()!r}, expected one integer >= 1; {hint}")
        m = int(m)
        if vectors.ndim != 3 or vectors.dtype.kind not in "fiu" or not np.isfinite(vectors).all() \
                or vectors.shape[1] % m:
            raise RecordError(f"{path}: array 'vectors' has shape {vectors.shape} of {vectors.dtype}, expected "
                              f"(G, P, D) finite numbers with P a multiple of m = {m}; {hint}")
        scalars = {}
        for name in ("completion_tokens", "truncated"):
            if arrays[name].shape != () or arrays[name].dtype.kind not in "fiu":
                raise RecordError(f"{path}: array {name!r} is not one number; {hint}")
            scalars[name] = float(arrays[name])
        texts_path = Path(str(path) + ".jsonl")
        texts = read_jsonl(texts_path, hint=hint) if texts_path.is_file() else []
        chains = vectors.shape[1] // m
        for row, chain_texts in enumerate(texts, start=1):
            if not isinstance(chain_texts, list) or len(chain_texts) != chains \
                    or not all(isinstance(t, str) for t in chain_texts):
                raise RecordError(f"{texts_path}: line {row} is not a list of {chains} generations; {hint}")
        if texts and len(texts) != vectors.shape[0]:
            raise RecordError(f"{texts_path}: {len(texts)} lines for {vectors.shape[0]} examples; {hint}")
        return cls(vectors=vectors.astype(np.float64), m=m, texts=texts, completion_tokens=scalars["completion_tokens"],
                   truncated=scalars["truncated"])


def score_generation(task: Task, fmt: PromptFormat, text: str, example: Example, m: int) -> np.ndarray:
    """(m, D) reward vectors of one generation's answers, each scored on its own (no dedup;
    an empty answer is the zero vector), under the task's reward failure policy
    (``Task.score_answers``; the rate is checked over each window of calls)."""
    dim = task.num_objectives(example)
    rows = np.zeros((m, dim), dtype=np.float64)
    answers = fmt.answers(text, example, m)[:m]
    live = [i for i, answer in enumerate(answers) if answer.strip()]
    if live:
        rows[live] = task.score_answers([answers[i] for i in live], example)
    task.failures.tick()  # RewardFailureError when a window of calls fails past max_failure_rate
    return rows


def score_pool(task: Task, fmt: PromptFormat, generations: Sequence[Generation | str], example: Example,
               m: int) -> np.ndarray:
    """(C * m, D) reward vectors of one example's C generations, answer slot by answer slot.

    A task that scores chains together as a trainer does (``score_generations``: your own reward
    functions, ``own_rewards``) gets them all at once in its own format, with each chain's tokens
    (``Generation.ids``, else the format's tokenizer counts them): chain-level functions once per
    chain, their value on each of its slots. Any other task: each generation by
    ``score_generation``. Under the task's reward failure policy either way."""
    texts = [g if isinstance(g, str) else g.text for g in generations]
    whole = getattr(task, "score_generations", None)
    if whole is None or not isinstance(fmt, TaskFormat):
        return np.concatenate([score_generation(task, fmt, text, example, m) for text in texts]) if texts else \
            np.zeros((0, task.num_objectives(example)))
    ids = [getattr(g, "ids", None) for g in generations]
    vectors = whole(texts, example, m, completion_ids=None if any(i is None for i in ids) else ids,
                    tokenizer=fmt.tokenizer)
    task.failures.tick()  # RewardFailureError when a window of calls fails past max_failure_rate
    return vectors.reshape(len(texts) * m, -1)


def pool_prompts(fmt: PromptFormat, examples: Sequence[Example], m: int, chains: int) -> list[list[str]]:
    """G lists of ``chains`` prompts: ``fmt.prompt(example, m)`` for every chain, or
    ``fmt.chain_prompt(example, m, chain)`` when the format prompts each chain on its own (the
    demo's goal-conditioned policy gets a different stated goal per chain)."""
    chain_prompt = getattr(fmt, "chain_prompt", None)
    return [[chain_prompt(example, m, c) for c in range(chains)] if chain_prompt is not None
            else [fmt.prompt(example, m)] * chains for example in examples]


def sample_chains(model: Any, tokenizer: Any, examples: Sequence[Example], *, m: int, chains: int,
                  fmt: PromptFormat, temperature: float = 0.7, top_p: float = 1.0, max_new_tokens: int = 64,
                  batch_size: int = 0, seeding: str = "chain", seed: int = 0, sampler: Sampler | None = None,
                  progress: bool = True, desc: str = "sampling") -> list[list[Generation]]:
    """G lists of ``chains`` generations of the m-answer prompts of ``examples`` (``pool_prompts``).

    The sampler is ``sampler`` when given (then ``model`` and ``tokenizer`` must be None and
    ``batch_size``/``seeding`` are the sampler's own), else ``vpo.sampling.HFSampler`` over
    ``model`` and ``tokenizer`` with ``batch_size`` (0: auto) and ``seeding``.
    """
    if sampler is None:
        sampler = HFSampler(model, tokenizer, batch_size=batch_size, seeding=seeding)
    elif model is not None or tokenizer is not None:
        raise ValueError("give either sampler= or a model and tokenizer, not both")
    return sampler.generate(pool_prompts(fmt, examples, m, chains), temperature=temperature, top_p=top_p,
                            max_new_tokens=max_new_tokens, seed=seed, progress=progress, desc=desc)


def sample_pools(model: Any, tokenizer: Any, task: Task, examples: Sequence[Example], *, m: int = 1,
                 pool: int = 30, temperature: float = 0.7, top_p: float = 1.0,
                 max_new_tokens: int = 64, batch_size: int = 0, fmt: PromptFormat | None = None,
                 seed: int = 0, seeding: str = "chain", sampler: Sampler | None = None,
                 progress: bool = True, desc: str = "sampling") -> Pools:
    """Generate ``pool // m`` chains per example and score every answer: a ``Pools``.

    Sampling (``sample_chains``): left-padded batches of ``batch_size`` chains per
    ``model.generate`` call (0: auto, ``vpo.sampling.HFSampler``), temperature and top-p
    (top-k off), seeded by ``seed``: with ``seeding="chain"`` every chain has its own stream, so
    the pool does not depend on ``batch_size``; ``"batch"`` replays the older per-call
    stream (one seed per generate call). ``sampler`` (e.g. ``vpo.sampling.vllm.VLLMSampler``) replaces the model and
    tokenizer. Raises ValueError unless ``m`` divides ``pool``.
    """
    if m < 1 or pool < 1 or pool % m:
        raise ValueError(f"pool ({pool}) must be a positive multiple of m ({m})")
    if not examples:
        raise ValueError("no examples to evaluate")
    dims = {task.num_objectives(example) for example in examples}
    if len(dims) > 1:  # the (G, P, D) pool array needs one D; ragged tasks go through vpo.search
        raise ValueError(f"task {task.name!r} has a different number of objectives per example "
                         f"({sorted(dims)}); use `vpo eval --search best-of-n` (vpo.search), "
                         "which handles ragged pools")
    fmt = fmt or TaskFormat(task)
    rows = sample_chains(model, tokenizer, examples, m=m, chains=pool // m, fmt=fmt, temperature=temperature,
                         top_p=top_p, max_new_tokens=max_new_tokens, batch_size=batch_size, seeding=seeding,
                         seed=seed, sampler=sampler, progress=progress, desc=desc)
    vectors = np.zeros((len(examples), pool, dims.pop()), dtype=np.float64)
    for i, (example, row) in enumerate(zip(examples, rows, strict=True)):
        vectors[i] = score_pool(task, fmt, row, example, m)
    chains = [generation for row in rows for generation in row]
    return Pools(vectors=vectors, m=m, texts=[[generation.text for generation in row] for row in rows],
                 completion_tokens=float(np.mean([g.tokens for g in chains])),
                 truncated=float(np.mean([g.truncated for g in chains])))


# ----- metrics ------------------------------------------------------------------------------

def example_weights(num_examples: int, dim: int, num: int = 64, *, seed: int = 0) -> np.ndarray:
    """(G, K, D) fixed Dirichlet(1) evaluation weights, one set per example, reproducible from
    ``seed`` and the example's index (so every method meets the same weights on an example)."""
    return np.stack([M.evaluation_weights(num, dim, seed=seed * 1_000_003 + i) for i in range(num_examples)])


def pool_metrics(vectors: np.ndarray, task: Task, *, eval_weights: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example metrics of pools ``vectors`` (G, P, D); ``eval_weights`` (G, K, D) or (K, D).

    Returns a dict of arrays with leading axis G (see the module docstring for the keys).
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 3:
        raise ValueError(f"vectors must be (G, P, D), got shape {vectors.shape}")
    n_ex, pool, dim = vectors.shape
    weights = np.asarray(eval_weights, dtype=np.float64)
    if weights.ndim == 2:
        weights = np.broadcast_to(weights, (n_ex, *weights.shape))
    if weights.shape[0] != n_ex or weights.shape[2] != dim:
        raise ValueError(f"eval_weights {weights.shape} do not match vectors {vectors.shape}")
    out: dict[str, list[Any]] = {key: [] for key in (*CURVE_METRICS, *SCALAR_METRICS, "objective_mean",
                                                    "objective_best")}
    for i in range(n_ex):
        pool_i = vectors[i]
        scalars = np.asarray(task.scalar(pool_i), dtype=np.float64).reshape(pool)
        solved = sum(task.solved(v) for v in pool_i)
        out["best_at_k"].append(M.best_at_k_curve(scalars))
        out["pref_best_at_k"].append(M.preference_best_at_k_curve(pool_i, weights[i]))
        out["pass_at_k"].append(np.array([M.pass_at_k(pool, solved, k) for k in range(1, pool + 1)]))
        out["diversity"].append(M.diversity(pool_i))
        out["completion_rate"].append(float(np.mean(np.any(pool_i > 0, axis=1))))
        out["pareto_fraction"].append(float(np.mean(M.pareto_mask(pool_i) & np.any(pool_i > 0, axis=1))))
        out["objective_mean"].append(pool_i.mean(axis=0))
        out["objective_best"].append(pool_i.max(axis=0))
    return {key: np.asarray(value, dtype=np.float64) for key, value in out.items()}


def _ci(values: np.ndarray) -> list[float | None]:
    """[low, high] of the mean of ``values`` (None when fewer than 2 values)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return [None, None]
    _, low, high = M.mean_ci(values)
    return [_finite(low), _finite(high)]


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _stat(per_seed: list[np.ndarray]) -> dict[str, Any]:
    """Mean with CIs over examples (seed-averaged per example) and over seed means.

    ``per_seed``: S arrays of shape (G,) or (G, L). Scalars give floats, curves lists."""
    stack = np.stack([np.asarray(a, dtype=np.float64) for a in per_seed])       # (S, G[, L])
    per_example = stack.mean(axis=0)                                             # (G[, L])
    seed_means = stack.mean(axis=1)                                              # (S[, L])
    if per_example.ndim == 1:
        return {"mean": float(per_example.mean()), "ci_examples": _ci(per_example),
                "ci_seeds": _ci(seed_means), "per_seed": [float(x) for x in seed_means]}
    return {"mean": [float(x) for x in per_example.mean(axis=0)],
            "ci_examples": [_ci(per_example[:, j]) for j in range(per_example.shape[1])],
            "ci_seeds": [_ci(seed_means[:, j]) for j in range(per_example.shape[1])],
            "per_seed": [[float(x) for x in row] for row in seed_means]}


def summarize(per_seed: Sequence[Mapping[str, np.ndarray]], *, label: str, m: int,
              objectives: Sequence[str], seeds: Sequence[Any] | None = None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One method's report entry from its per-example metrics, one dict per training seed.

    Every curve and scalar gets ``mean``, ``ci_examples`` (95% Student-t over examples of the
    seed-averaged value), ``ci_seeds`` (over the seed means; None with one seed) and
    ``per_seed``; per-objective metrics are keyed by objective name.
    """
    if not per_seed:
        raise ValueError("summarize needs the metrics of at least one seed")
    entry: dict[str, Any] = {"label": label, "m": int(m), "num_seeds": len(per_seed),
                             "seeds": list(seeds) if seeds is not None else list(range(len(per_seed))),
                             "num_examples": int(np.asarray(per_seed[0]["diversity"]).shape[0])}
    for key in (*CURVE_METRICS, *SCALAR_METRICS):
        entry[key] = _stat([d[key] for d in per_seed])
    for key in ("objective_mean", "objective_best"):
        entry[key] = {name: _stat([np.asarray(d[key])[:, j] for d in per_seed])
                      for j, name in enumerate(objectives)}
    if extra:
        entry.update(extra)
    return entry


def seed_average(per_seed: Sequence[Mapping[str, np.ndarray]], key: str, k: int | None = None) -> np.ndarray:
    """(G,) per-example value of ``key`` (at ``k`` for curves, 1-based), averaged over seeds."""
    arrays = [np.asarray(d[key], dtype=np.float64) for d in per_seed]
    if k is not None:
        arrays = [a[:, k - 1] for a in arrays]
    return np.mean(np.stack(arrays), axis=0)


def paired(a: Sequence[Mapping[str, np.ndarray]], b: Sequence[Mapping[str, np.ndarray]], key: str,
           k: int | None = None) -> dict[str, Any]:
    """Paired difference a - b of ``key`` (at ``k``) over the same examples, seed-averaged per
    example: {mean, half_width (95%), n, significant}."""
    x, y = seed_average(a, key, k), seed_average(b, key, k)
    mean, half = M.paired_difference(x, y)
    half_f = _finite(half)
    return {"mean": float(mean), "half_width": half_f, "n": int(x.size),
            "significant": bool(half_f is not None and abs(mean) > half_f)}


def per_example_to_json(d: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """JSON-able copy of per-example metrics (arrays to nested lists)."""
    return {k: np.asarray(v).tolist() for k, v in d.items()}


def per_example_from_json(d: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}


def sanitize(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays turned into Python values and NaN/inf into None."""
    if isinstance(obj, Mapping):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [sanitize(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return sanitize(obj.tolist())
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return _finite(float(obj))
    return obj


def evaluate_checkpoint(model: Any, tokenizer: Any, task: Task, examples: Sequence[Example], *,
                        m: int, pool: int, label: str, eval_weights: np.ndarray,
                        fmt: PromptFormat | None = None, temperature: float = 0.7, top_p: float = 1.0,
                        max_new_tokens: int = 64, batch_size: int = 0, seed: int = 0, seeding: str = "chain",
                        sampler: Sampler | None = None, progress: bool = True,
                        on_pools: Callable[[Pools], None] | None = None) -> tuple[Pools, dict[str, np.ndarray]]:
    """Sample a checkpoint's pools and compute its per-example metrics (one call for ``vpo eval``)."""
    pools = sample_pools(model, tokenizer, task, examples, m=m, pool=pool, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, batch_size=batch_size, fmt=fmt, seed=seed, seeding=seeding,
                         sampler=sampler, progress=progress, desc=f"eval {label}")
    if on_pools is not None:
        on_pools(pools)
    return pools, pool_metrics(pools.vectors, task, eval_weights=eval_weights)

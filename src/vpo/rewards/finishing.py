"""Raw answer values to the chains' (M, D) matrices: the ``None`` rule per group, per-objective
scaling, failed calls at the objective's worst value, dedup and padding (``finish_chains``).

Usage::

    import numpy as np
    from vpo.rewards.answers import ScoredAnswers
    from vpo.rewards.finishing import check_scaling, finish_chains
    scored = ScoredAnswers(owners=np.array([0, 0, 1]), values=np.array([[2.0], [6.0], [4.0]]), names=("length",),
                           num_chains=2)
    rewards = finish_chains(scored, answers=2, group_ids=["p", "p"], scaling="minmax")
    rewards.matrices[0]       # [[0], [1]]: minmax over the batch's answers
    check_scaling({"length": (0, 512)}, names=("length",))

Shapes: B completions, P answers, M answers per chain, D objectives.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.chains import finish_chain
from vpo.reward_failures import FAILED_CALL
from vpo.rewards.answers import ScoredAnswers
from vpo.rewards.diagnostics import objective_diagnostics

__all__ = ["SCALINGS", "ChainRewards", "RewardScaleWarning", "check_scaling", "finish_chains"]

SCALINGS = ("none", "sigmoid", "minmax")
"""Per-objective scalings by name (a ``(low, high)`` pair is the fourth form):

* ``none``: the values as returned (the default; warns once if they leave [0, 1]);
* ``sigmoid``: 1 / (1 + e^-x), for reward-model logits (a Bradley-Terry win probability);
* ``minmax``: (x - min) / (max - min) over the batch's answers (0 when they are all equal);
* ``(low, high)``: (x - low) / (high - low), clipped to [0, 1]: a fixed, known range.
"""


class RewardScaleWarning(UserWarning):
    """An objective without scaling left [0, 1] (shown once per objective)."""


@dataclass


class ChainRewards:
    """The reward matrices of B chains scored by a user's reward functions."""

    matrices: list[np.ndarray]
    """One (M, D_i) float64 per completion: its distinct answers' vectors, rows of an absent answer
    appended up to M (zeros, with the chain's value in chain-level objectives); D_i < D where the
    ``None`` rule dropped objectives for the completion's group."""
    names: tuple[str, ...]
    """The D objective names."""
    kept: list[np.ndarray]
    """Per completion, int indices into ``names`` of the columns of its matrix."""
    stats: dict[str, float]
    """Metric-ready numbers: ``answers_parsed`` (tagged answers per chain), ``parse_rate`` (share of
    chains with a tagged answer), ``duplicate_rate``, ``unparseable`` (share of chains without an
    answer, fallback included), ``none/<name>`` (``None`` counted as 0), ``dropped/<name>``
    (groups that lost the objective), ``objective/<name>`` (mean over the chains that kept the
    objective of their best answer's value),
    ``effective_dim`` and ``mean_abs_correlation`` (``objective_diagnostics`` of the answers whose
    group kept every objective)."""
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(P, D) every parsed answer's scaled vector (before dedup), NaN where dropped."""
    owners: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(P,) the completion of each row of ``vectors``."""
    correlation: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(D, D) the objectives' correlation over the answers (``objective_diagnostics``)."""
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(P,) each row of ``vectors``' slot in its chain (``ScoredAnswers.positions``)."""
    chain_values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(B, D) each completion's scaled chain-level values (0 in answer-level and dropped columns)."""
    duplicates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """(B,) answers of each chain that the dedup dropped."""

    def dense(self, i: int) -> np.ndarray:
        """Completion ``i``'s matrix with all D columns, zeros where an objective was dropped."""
        out = np.zeros((self.matrices[i].shape[0], len(self.names)))
        out[:, self.kept[i]] = self.matrices[i]
        return out

    def slots(self, answers: int) -> np.ndarray:
        """(B, M, D) every answer slot of every chain, before dedup: an answer's scaled vector in its
        slot, a slot without an answer zeros with the chain's chain-level values (as the rows that
        pad a matrix), a dropped objective 0. An evaluation pool's rows (``vpo eval``, best-of-n)."""
        out = np.repeat(self.chain_values[:, None, :], answers, axis=1) if self.chain_values.size else \
            np.zeros((len(self.matrices), answers, len(self.names)))
        out[self.owners, self.positions] = np.nan_to_num(self.vectors, nan=0.0)
        return out


def check_scaling(scaling: Any, names: Sequence[str] | None = None) -> dict[str, Any] | Any:
    """``scaling`` checked: None, one spec for every objective, or a mapping objective name ->
    spec, where a spec is one of ``SCALINGS`` or a ``(low, high)`` pair with low < high. With
    ``names``, a mapping's keys must be among them. Returns it unchanged; ValueError otherwise."""
    if scaling is None:
        return None
    specs = scaling.items() if isinstance(scaling, Mapping) else [("(all)", scaling)]
    for name, spec in specs:
        _check_spec(name, spec)
    if isinstance(scaling, Mapping) and names is not None:
        unknown = sorted(set(scaling) - set(names))
        if unknown:
            raise ValueError(f"scaling names unknown objective(s) {unknown}; the objectives are {list(names)}")
    return scaling


def _check_spec(name: str, spec: Any) -> None:
    if isinstance(spec, str):
        if spec not in SCALINGS:
            raise ValueError(f"scaling of {name!r} must be one of {SCALINGS} or (low, high), got {spec!r}")
        return
    try:
        low, high = (float(x) for x in spec)
    except (TypeError, ValueError):
        raise ValueError(f"scaling of {name!r} must be one of {SCALINGS} or (low, high), got {spec!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"scaling of {name!r}: (low, high) must be finite with low < high, got {spec!r}")


def _spec_of(scaling: Any, name: str) -> Any:
    if scaling is None:
        return "none"
    if isinstance(scaling, Mapping):
        return scaling.get(name, "none")
    return scaling


def _scale(values: np.ndarray, spec: Any) -> np.ndarray:
    """One objective's finite values (n,) under ``spec``."""
    if isinstance(spec, str):
        if spec == "none":
            return values
        if spec == "sigmoid":
            return 1.0 / (1.0 + np.exp(-np.clip(values, -500, 500)))
        low, high = (values.min(), values.max()) if values.size else (0.0, 0.0)
        return (values - low) / (high - low) if high > low else np.zeros_like(values)
    low, high = (float(x) for x in spec)
    return np.clip((values - low) / (high - low), 0.0, 1.0)


def finish_chains(scored: ScoredAnswers, answers: int, group_ids: Sequence[Hashable], *,
                  scaling: Any = None) -> ChainRewards:
    """The ``None`` rule, scaling, dedup and padding of ``scored``: the chains' matrices.

    ``group_ids`` (B,) says which chains share a prompt: an objective that is NaN for every value
    a group has (its answers; a chain-level objective: its completions) is dropped from the
    group's matrices; other NaN become 0 after scaling. Each objective is scaled by its ``scaling``
    spec over the batch's values (answers, or completions for a chain-level one); one still
    outside [0, 1] without a scaling warns once (``RewardScaleWarning``). A failed call
    (``FAILED_CALL``) takes the objective's worst value after scaling, never a better one than a
    real call's: 0 (the low end of a range, of the sigmoid, of minmax; without scaling, 0 or the
    batch's lowest real value when that is below 0), and it never widens minmax's range. Each chain is then
    finished by ``vpo.chains.finish_chain`` (rows with equal vectors kept once, the first; rows of
    an absent answer up to ``answers``: zeros, with the chain's value in its chain-level
    objectives) and its metrics are ``vpo.step_metrics.chain_metrics``' (in ``stats``, without
    the ``vpo/`` prefix).
    """
    from vpo.step_metrics import chain_metrics

    names, values, owners = scored.names, scored.values, scored.owners
    num, dim = scored.num_chains, len(names)
    level, chain_values = scored.chain_level, scored.chain_values
    check_scaling(scaling, names)
    if len(group_ids) != num:
        raise ValueError(f"{len(group_ids)} group ids for {num} completions")
    labels: dict[Hashable, int] = {}
    chain_group = np.array([labels.setdefault(g, len(labels)) for g in group_ids], dtype=np.int64)
    answer_group = chain_group[owners] if owners.size else np.zeros(0, dtype=np.int64)
    groups = len(labels)
    # None rule: group g drops objective j when every value it has there is NaN (a group with no value keeps it)
    missing, chain_missing = np.isnan(values), np.isnan(chain_values)
    dropped = np.zeros((groups, dim), dtype=bool)
    for j in range(dim):
        group_of, absent = (chain_group, chain_missing[:, j]) if level[j] else (answer_group, missing[:, j])
        counts = np.bincount(group_of, minlength=groups)
        dropped[:, j] = (counts > 0) & (np.bincount(group_of, weights=absent, minlength=groups) == counts)

    vectors = np.full(values.shape, np.nan)
    chain_scaled = np.zeros((num, dim))
    stats: dict[str, float] = {}
    for j, name in enumerate(names):
        group_of, raw_values, absent = ((chain_group, chain_values[:, j], chain_missing[:, j]) if level[j]
                                        else (answer_group, values[:, j], missing[:, j]))
        usable = ~dropped[group_of, j] if group_of.size else np.zeros(0, dtype=bool)
        failed = raw_values == FAILED_CALL
        finite = usable & ~absent & ~failed
        spec = _spec_of(scaling, name)
        raw = raw_values[finite]
        if spec == "none" and raw.size and (raw.min() < 0.0 or raw.max() > 1.0):
            warnings.warn(
                f"objective {name!r} has values outside [0, 1] and no scaling: E_w[max_i w . r_i] assumes rewards in "
                f"[0, 1] (zero padding, the weights' balance); set scaling={{{name!r}: 'sigmoid' | 'minmax' | "
                "(low, high)} (docs/own_rewards.md)", RewardScaleWarning, stacklevel=3)
        column = np.zeros(raw_values.shape[0])
        column[finite] = _scale(raw, spec)
        column[usable & failed] = min(0.0, float(column[finite].min())) if spec == "none" and raw.size else 0.0
        column[~usable] = np.nan
        if level[j]:
            chain_scaled[:, j] = np.nan_to_num(column)
            vectors[:, j] = column[owners] if owners.size else column[:0]
        else:
            vectors[:, j] = column
        stats[f"none/{name}"] = float((usable & absent).sum())
        stats[f"dropped/{name}"] = float(dropped[:, j].sum())

    matrices, kept = [], []
    order = np.argsort(owners, kind="stable")
    starts = np.searchsorted(owners[order], np.arange(num + 1))
    duplicates = np.zeros(num)
    best = np.full((num, dim), np.nan)
    for b in range(num):
        keep = np.flatnonzero(~dropped[chain_group[b]]) if dim else np.zeros(0, dtype=np.int64)
        rows = vectors[order[starts[b]:starts[b + 1]]][:, keep]
        matrix, duplicates[b] = finish_chain(rows, answers, fill=chain_scaled[b, keep])
        best[b, keep] = matrix.max(axis=0) if matrix.shape[0] else 0.0
        matrices.append(matrix)
        kept.append(keep)
    counts = np.bincount(owners, minlength=num)
    metrics = chain_metrics(answers=scored.tagged, parsed=counts, duplicates=duplicates, best=best, names=names,
                            parse_rate=True)
    stats.update({key[len("vpo/"):]: value for key, value in metrics.items()})
    stats["unparseable"] = float(np.mean(counts == 0)) if num else 0.0
    complete = vectors[~np.isnan(vectors).any(axis=1)] if dim else vectors
    diagnostics = objective_diagnostics(complete)
    stats["effective_dim"] = diagnostics["effective_dim"]
    stats["mean_abs_correlation"] = diagnostics["mean_abs_correlation"]
    return ChainRewards(matrices, names, kept, stats, vectors, owners, diagnostics["correlation"], scored.positions,
                        chain_scaled, duplicates)

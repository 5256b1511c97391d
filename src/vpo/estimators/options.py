"""The algorithm's knobs, written once: weight sampling (K, alpha, sampler, seed) and group
normalisation (std, eps, one-member-group rule, scale), with each engine's presets.

Usage::

    from vpo.estimators.options import WeightOptions, NormOptions, VPO_NORM, TRL_NORM
    WeightOptions()                        # K = 100, alpha = 1.0, iid, seed 0
    WeightOptions(num_weights=0)           # ValueError: num_weights (K) must be a positive integer
    NormOptions(**TRL_NORM.as_dict())      # TRL's group normalisation

Every estimator's default option values, every adapter (TRL, verl, OpenRLHF, the CLI) and the
demo read these dataclasses; no other file writes K = 100 or alpha = 1.0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vpo.weights import SAMPLERS

__all__ = [
    "DEGENERATE_MODES",
    "GRPO_NORM",
    "MAX_AT_K_NORM",
    "NormOptions",
    "OPENRLHF_NORM",
    "SCALE_MODES",
    "STD_MODES",
    "TRL_NORM",
    "VPO_NORM",
    "WHITEN_MODES",
    "WeightOptions",
    "check_choice",
    "check_nonnegative",
]

STD_MODES = ("population", "sample")
DEGENERATE_MODES = ("zero", "raw", "none")
SCALE_MODES = ("group", "batch", "none")
WHITEN_MODES = ("verl", "trl", "none")


def check_choice(value: Any, allowed: tuple[str, ...], name: str) -> str:
    """``value`` if it is one of ``allowed``; ValueError naming ``name`` otherwise."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_nonnegative(value: Any, name: str, *, allow_zero: bool = True) -> float:
    """``value`` as a finite float >= 0 (> 0 without ``allow_zero``); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return number


@dataclass(frozen=True)
class WeightOptions:
    """How the K weight vectors of a group are drawn (docs/algorithm.md §1). Invalid values raise at
    construction: an explicit ``num_weights=0`` or ``alpha=0`` is an error, never a default."""

    num_weights: int = field(default=100, metadata={"help": "Dirichlet weights K per group", "min": 1})
    """K, the number of weight vectors per group (the authors use 100)."""
    alpha: float = field(default=1.0, metadata={"help": "Dirichlet concentration alpha", "above": 0.0})
    """Concentration of Dir(alpha 1_D); 1.0 is uniform on the simplex."""
    sampler: str = field(default="iid", metadata={"help": "simplex sampler", "choices": SAMPLERS})
    """``iid`` Dirichlet draws (the paper's runs) or ``sobol`` quasi-Monte-Carlo (lower noise)."""
    seed: int = field(default=0, metadata={"help": "seed of the keyed weights"})
    """Weights are keyed on (seed, group label, step): the same on every rank and process."""

    def __post_init__(self) -> None:
        k = self.num_weights
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"num_weights (K) must be a positive integer, got {k!r}")
        object.__setattr__(self, "num_weights", int(k))
        object.__setattr__(self, "alpha", check_nonnegative(self.alpha, "alpha", allow_zero=False))
        check_choice(self.sampler, SAMPLERS, "sampler")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NormOptions:
    """Group normalisation A = (s - mean_g) / (std + eps), with each engine's conventions."""

    std: str = field(default="population", metadata={"choices": STD_MODES})
    """``population`` (ddof 0, the VPO reference) or ``sample`` (ddof 1, Bessel: verl, TRL)."""
    eps: float = 1e-6
    """Added to the std (verl and the authors 1e-6, TRL 1e-4, OpenRLHF 1e-9)."""
    degenerate: str = field(default="zero", metadata={"choices": DEGENERATE_MODES})
    """``zero``: a group with std < eps or one member gets 0 (the VPO reference); ``raw``: a
    one-member group is normalised with mean 0 and std 1 (verl ``grpo``); ``none``: no guard
    (TRL; a one-member group has mean = its score, so 0)."""
    scale: str = field(default="group", metadata={"choices": SCALE_MODES})
    """Divide by the group's std, the whole batch's (TRL ``scale_rewards="batch"``), or not at
    all (``none``: Dr. GRPO, centring only)."""

    def __post_init__(self) -> None:
        check_choice(self.std, STD_MODES, "std")
        check_choice(self.degenerate, DEGENERATE_MODES, "degenerate")
        check_choice(self.scale, SCALE_MODES, "scale")
        object.__setattr__(self, "eps", check_nonnegative(self.eps, "eps"))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


VPO_NORM = NormOptions("population", 1e-6, "zero", "group")
"""The authors' VPO normalisation (docs/algorithm.md §1)."""
GRPO_NORM = NormOptions("sample", 1e-6, "raw", "group")
"""verl's ``grpo`` (Bessel std, eps 1e-6, a one-member group gives s / (1 + eps))."""
MAX_AT_K_NORM = NormOptions("sample", 1e-6, "none", "group")
"""The authors' Max@K release (one-member groups get 0 in the estimator itself)."""
TRL_NORM = NormOptions("sample", 1e-4, "none", "group")
"""TRL 1.16's ``scale_rewards="group"`` (``"batch"``: scale="batch"; ``"none"``: scale="none")."""
OPENRLHF_NORM = NormOptions("sample", 1e-9, "none", "group")
"""OpenRLHF 0.11's ``group_norm``."""

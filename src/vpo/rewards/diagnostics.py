"""Are the objectives worth a vector? Their correlation over the answers and effective dimension.

Usage::

    import numpy as np
    from vpo.rewards.diagnostics import objective_diagnostics
    vectors = np.random.default_rng(0).random((256, 3))       # (P, D)
    objective_diagnostics(vectors)["effective_dim"]           # near 3: independent objectives

Shapes: P answers, D objectives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COLLINEAR_EFFECTIVE_DIM", "CollinearObjectivesWarning", "effective_dimension", "objective_diagnostics"]

COLLINEAR_EFFECTIVE_DIM = 1.2
"""An effective dimension below this (with D >= 2 objectives) counts as "near 1": the objectives
move together and the vector adds little over their sum (docs/own_rewards.md)."""


class CollinearObjectivesWarning(UserWarning):
    """The objectives' effective dimension stayed near 1."""


def _finite_rows(vectors: Any) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"vectors must be (P, D), got shape {arr.shape}")
    return arr[np.isfinite(arr).all(axis=1)]


def effective_dimension(vectors: Any) -> float:
    """Participation ratio (sum lambda)^2 / sum lambda^2 of the eigenvalues of the (D, D)
    covariance of ``vectors`` (P, D): 1 when the objectives are collinear, D when they are
    independent with equal variance. Rows with NaN are left out; NaN when fewer than 2 rows remain
    or nothing varies."""
    rows = _finite_rows(vectors)
    if rows.shape[0] < 2 or rows.shape[1] == 0:
        return float("nan")
    cov = np.atleast_2d(np.cov(rows, rowvar=False, ddof=0))
    eig = np.clip(np.linalg.eigvalsh(cov), 0.0, None)
    total = float(eig.sum())
    if total <= 1e-12:
        return float("nan")
    return total ** 2 / float((eig ** 2).sum())


def objective_diagnostics(vectors: Any) -> dict[str, Any]:
    """Correlation (D, D) of the objectives over ``vectors`` (P, D) (a constant objective
    correlates 0 with the others), their ``effective_dim`` and ``mean_abs_correlation`` (mean
    |correlation| off the diagonal; NaN for D < 2). Rows with NaN are left out."""
    rows = _finite_rows(vectors)
    dim = rows.shape[1]
    corr = np.eye(dim)
    if rows.shape[0] >= 2 and dim:
        centred = rows - rows.mean(axis=0)
        std = np.sqrt((centred ** 2).mean(axis=0))
        varying = std > 1e-12
        scaled = np.zeros_like(centred)
        scaled[:, varying] = centred[:, varying] / std[varying]
        corr = (scaled.T @ scaled) / rows.shape[0]
        np.fill_diagonal(corr, 1.0)
        corr = np.clip(corr, -1.0, 1.0)
    off = corr[~np.eye(dim, dtype=bool)]
    return {"correlation": corr, "effective_dim": effective_dimension(rows),
            "mean_abs_correlation": float(np.abs(off).mean()) if off.size else float("nan")}

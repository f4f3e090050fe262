"""Bootstrap resampling that respects clusters (subjects).

Several images of one person are not independent observations, so confidence
intervals resample *subjects* with replacement and carry all their images
along (a cluster bootstrap). Resampling is expressed as integer weights: for
replicate ``b``, ``weights[b, s]`` is how many times subject ``s`` was drawn.
Any statistic that is a function of weighted counts or weighted sums can then
be computed for all replicates at once with a matrix product or ``bincount``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fairvision.errors import FairvisionError


def cluster_bootstrap_weights(n_clusters: int, n_boot: int, rng: np.random.Generator | int | None = 0) -> np.ndarray:
    """Multinomial draw counts, shape ``(n_boot, n_clusters)``; each row sums to ``n_clusters``.

    Row ``b`` is the number of times each cluster appears in bootstrap sample
    ``b`` when ``n_clusters`` clusters are drawn with replacement.
    """
    if n_clusters <= 0:
        raise FairvisionError("bootstrap needs at least one subject")
    rng = np.random.default_rng(rng)
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot).astype(np.float64)


def percentile_ci(replicates: np.ndarray, level: float = 0.95, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap replicates along ``axis`` (NaN replicates ignored)."""
    alpha = (1.0 - level) / 2.0
    lo = np.nanquantile(replicates, alpha, axis=axis)
    hi = np.nanquantile(replicates, 1.0 - alpha, axis=axis)
    return lo, hi


def bootstrap_ci(
    statistic: Callable[[np.ndarray], np.ndarray],
    clusters: np.ndarray,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
) -> dict:
    """Percentile CI of ``statistic(row_weights)`` under a cluster bootstrap.

    Parameters
    ----------
    statistic : callable
        Takes per-row weights of shape ``(n_boot, n_rows)`` (or ``(n_rows,)``
        for the point estimate) and returns one value per replicate, shape
        ``(n_boot, ...)``.
    clusters : array of int
        Cluster (subject) code of every row, ``0 .. n_clusters-1``. Pass
        ``np.arange(n_rows)`` for an ordinary (row) bootstrap.

    Returns
    -------
    dict with ``estimate``, ``ci_low``, ``ci_high``, ``se`` and ``n_boot``.
    """
    clusters = np.asarray(clusters)
    n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    w = cluster_bootstrap_weights(n_clusters, n_boot, seed)[:, clusters]
    est = statistic(np.ones(clusters.size))
    reps = statistic(w)
    lo, hi = percentile_ci(reps, level)
    return {"estimate": est, "ci_low": lo, "ci_high": hi, "se": np.nanstd(reps, axis=0, ddof=1), "n_boot": n_boot}


def bias_corrected_ci(
    replicates: np.ndarray,
    estimate: float,
    level: float = 0.95,
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> tuple[float, float]:
    """Percentile interval after removing the bootstrap estimate of bias, clipped to ``bounds``.

    Dispersion metrics such as NSD are biased away from their boundary in
    finite samples: a perfectly balanced dataset (NSD = 0) has resampled NSDs
    that are all positive, so a plain percentile interval would exclude the
    observed 0. Shifting the replicates by ``mean(replicates) - estimate``
    (Efron and Tibshirani 1993, section 10.6) keeps the interval's width and
    centres it on the estimate.
    """
    reps = np.asarray(replicates, dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0 or not np.isfinite(estimate):
        return float("nan"), float("nan")
    shifted = reps - (reps.mean() - estimate)
    lo, hi = percentile_ci(shifted, level)
    return float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))

"""The cluster bootstrap: confidence intervals that resample subjects, not images.

Several images of one person are not independent observations, so every
confidence interval in fairvision resamples *subjects* (clusters) with
replacement and carries all their images along (docs/METHODS.md §4.2). With no
subject column every row is its own cluster and this is the ordinary bootstrap.

Resampling is expressed as integer weights: for replicate ``b``,
``weights[b, s]`` is how many times subject ``s`` was drawn. Any statistic that
is a function of weighted counts or weighted sums is then computed for all
replicates at once with a matrix product, never a loop over replicates:

- :func:`cluster_bootstrap` is the general entry point: give it a statistic of
  the subject weights and get a :class:`BootstrapResult`;
- :func:`group_mean_replicates` / :func:`group_mean_ci`: per-group means (model
  audit, error modelling, any per-group score);
- :func:`bootstrap_counts`: per-cell counts (group sizes, shares, NSD, ...),
  drawn through subject *profiles*, which is exact and much faster when many
  subjects share the same memberships;
- :func:`percentile_ci` and :func:`bias_corrected_ci` turn replicates into an
  interval.

This module is the only place that draws bootstrap weights.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.errors import FairvisionError
from fairvision.stats.results import Estimate

DEFAULT_LEVEL = 0.95
CI_METHODS = ("percentile", "bias-corrected")
_MAX_PROFILES = 20000


def cluster_bootstrap_weights(n_clusters: int, n_boot: int, seed: np.random.Generator | int | None = 0) -> np.ndarray:
    """Multinomial draw counts of a cluster bootstrap.

    Parameters
    ----------
    n_clusters : int
        Number of clusters (subjects); must be positive.
    n_boot : int
        Number of replicates.
    seed : int, numpy.random.Generator or None
        Seed or generator (a generator is used as is, so successive calls
        continue its stream).

    Returns
    -------
    numpy.ndarray, shape (n_boot, n_clusters), float64
        Row ``b`` is the number of times each cluster appears in bootstrap
        sample ``b``; each row sums to ``n_clusters``.
    """
    if n_clusters <= 0:
        raise FairvisionError("bootstrap needs at least one subject")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot).astype(np.float64)


def percentile_ci(replicates: np.ndarray, level: float = DEFAULT_LEVEL, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap replicates.

    Parameters
    ----------
    replicates : array_like
        Bootstrap replicates; NaN replicates are ignored.
    level : float
        Two-sided level of the interval.
    axis : int
        Axis along which the replicates run.

    Returns
    -------
    ci_low, ci_high : numpy.ndarray
        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (NaN where
        every replicate is NaN, without a warning).
    """
    alpha = (1.0 - level) / 2.0
    with warnings.catch_warnings():  # all-NaN slices (empty groups) are NaN by design
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = np.nanquantile(replicates, alpha, axis=axis)
        hi = np.nanquantile(replicates, 1.0 - alpha, axis=axis)
    return lo, hi


def bias_corrected_ci(
    replicates: np.ndarray,
    estimate: float,
    level: float = DEFAULT_LEVEL,
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> tuple[float, float]:
    """Percentile interval after removing the bootstrap estimate of bias, clipped to ``bounds``.

    Dispersion metrics such as NSD are biased away from their boundary in
    finite samples: a perfectly balanced dataset (NSD = 0) has resampled NSDs
    that are all positive, so a plain percentile interval would exclude the
    observed 0. Shifting the replicates by ``mean(replicates) - estimate``
    (Efron and Tibshirani 1993, section 10.6) keeps the interval's width and
    centres it on the estimate (docs/METHODS.md §4.2).

    Parameters
    ----------
    replicates : array_like, shape (n_boot,)
        Bootstrap replicates of one statistic; non-finite ones are ignored.
    estimate : float
        The statistic on the full sample.
    level : float
        Two-sided level of the interval.
    bounds : (float, float)
        The range of the statistic; the interval is clipped to it.

    Returns
    -------
    ci_low, ci_high : float
        NaN when there is no finite replicate or the estimate is not finite.
    """
    reps = np.asarray(replicates, dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0 or not np.isfinite(estimate):
        return float("nan"), float("nan")
    shifted = reps - (reps.mean() - estimate)
    lo, hi = percentile_ci(shifted, level)
    return float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))


@dataclass
class BootstrapResult(Estimate):
    """A cluster-bootstrap estimate: :class:`~fairvision.stats.results.Estimate` plus ``se``, ``n_boot``.

    ``estimate``, ``ci_low``, ``ci_high`` and ``se`` are floats for a scalar
    statistic and arrays for a vector-valued one.
    """

    se: float | np.ndarray = float("nan")
    n_boot: int = 0
    method: str = "percentile"


def _check_ci_method(method: str) -> None:
    if method not in CI_METHODS:
        raise FairvisionError(f"unknown CI method {method!r}; choose one of {', '.join(CI_METHODS)}")


def cluster_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    clusters: np.ndarray | None,
    *,
    n_rows: int | None = None,
    n_boot: int = 1000,
    level: float = DEFAULT_LEVEL,
    seed: np.random.Generator | int | None = 0,
    method: str = "percentile",
    bounds: tuple[float, float] = (-np.inf, np.inf),
) -> BootstrapResult:
    """Cluster-bootstrap CI of any statistic that is a function of subject weights.

    Parameters
    ----------
    statistic : callable
        ``statistic(weights)`` with ``weights`` of shape ``(m, n_clusters)``
        (how many times each cluster is drawn in each of ``m`` samples)
        returns shape ``(m,)`` or ``(m, k)``. It is called once with a row of
        ones (the point estimate) and once with all replicates.
    clusters : int array of length n_rows, or None
        Cluster (subject) code ``0 .. n_clusters-1`` of every row; None makes
        every row its own cluster (then give ``n_rows``).
    n_rows : int, optional
        Number of rows when ``clusters`` is None.
    n_boot : int
        Number of replicates.
    level : float
        Two-sided level of the interval.
    seed : int, numpy.random.Generator or None
        Randomness.
    method : {"percentile", "bias-corrected"}
        ``"bias-corrected"`` shifts the replicates by their estimated bias
        before taking percentiles (see :func:`bias_corrected_ci`; used for
        dispersion metrics such as NSD); only for a scalar statistic.
    bounds : (float, float)
        Range the bias-corrected interval is clipped to.

    Returns
    -------
    BootstrapResult
    """
    _check_ci_method(method)
    if clusters is None:
        if n_rows is None:
            raise FairvisionError("cluster_bootstrap: give clusters or n_rows")
        n_clusters = int(n_rows)
    else:
        clusters = np.asarray(clusters)
        n_clusters = int(clusters.max()) + 1 if clusters.size else 0
    weights = cluster_bootstrap_weights(n_clusters, n_boot, seed)
    est = np.asarray(statistic(np.ones((1, n_clusters))), dtype=float)[0]
    reps = np.asarray(statistic(weights), dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(reps, axis=0, ddof=1) if n_boot > 1 else np.full(est.shape, np.nan)
    if method == "bias-corrected":
        if est.ndim:
            raise FairvisionError("the bias-corrected interval needs a scalar statistic")
        lo, hi = bias_corrected_ci(reps, float(est), level, bounds)
    else:
        lo, hi = percentile_ci(reps, level)
    scal = (lambda v: float(v)) if est.ndim == 0 else (lambda v: np.asarray(v, dtype=float))
    return BootstrapResult(scal(est), scal(lo), scal(hi), level, se=scal(se), n_boot=n_boot, method=method)


def _cluster_group_matrices(values: np.ndarray, groups: np.ndarray, clusters: np.ndarray, n_clusters: int, n_groups: int):
    """Sparse (n_clusters, n_groups) matrices of per-subject sums and counts."""
    ones = np.ones(values.size)
    sums = sparse.csr_matrix((values, (clusters, groups)), shape=(n_clusters, n_groups))
    counts = sparse.csr_matrix((ones, (clusters, groups)), shape=(n_clusters, n_groups))
    return sums, counts


def group_mean_replicates(
    values,
    groups,
    clusters,
    weights: np.ndarray,
    *,
    n_groups: int | None = None,
) -> np.ndarray:
    """Per-group means under given cluster-bootstrap weights.

    Parameters
    ----------
    values : float array (n,)
        One value per row; NaN rows are left out.
    groups : int array (n,)
        Group code ``0 .. n_groups-1`` of each row.
    clusters : int array (n,)
        Cluster (subject) code of each row, ``< weights.shape[1]``.
    weights : numpy.ndarray, shape (n_boot, n_clusters)
        Draw counts from :func:`cluster_bootstrap_weights`. Passing the same
        weights for several groups or metrics gives joint replicates, so a
        difference between two groups has a proper bootstrap distribution.
    n_groups : int, optional
        Number of groups (default: ``groups.max() + 1``).

    Returns
    -------
    numpy.ndarray, shape (n_boot, n_groups)
        Replicate means; NaN where a group has no row in a replicate.
    """
    values = np.asarray(values, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    clusters = np.asarray(clusters, dtype=np.int64)
    ok = ~np.isnan(values)
    values, groups, clusters = values[ok], groups[ok], clusters[ok]
    g = (int(groups.max()) + 1 if groups.size else 0) if n_groups is None else int(n_groups)
    sums, counts = _cluster_group_matrices(values, groups, clusters, weights.shape[1], g)
    wt = np.ascontiguousarray(weights.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(sums.T @ wt).T / np.asarray(counts.T @ wt).T


def group_mean_ci(
    values,
    groups,
    clusters=None,
    *,
    n_groups: int | None = None,
    n_boot: int = 1000,
    level: float = DEFAULT_LEVEL,
    seed: np.random.Generator | int | None = 0,
    chunk: int = 500,
) -> pd.DataFrame:
    """Per-group means with cluster-bootstrap standard errors and percentile CIs.

    Parameters
    ----------
    values : float array (n,)
        One value per row; NaN rows are left out.
    groups : int array (n,)
        Group code ``0 .. n_groups-1`` of each row.
    clusters : int array (n,), optional
        Subject code of each row; default: every row its own subject.
    n_groups : int, optional
        Number of groups (default: ``groups.max() + 1``).
    n_boot, level, seed
        Replicates, two-sided level, randomness.
    chunk : int
        Replicates drawn per matrix product (bounds memory to
        ``chunk x n_clusters``); the draws do not depend on it.

    Returns
    -------
    pandas.DataFrame
        Indexed by group code ``0 .. n_groups-1``: ``estimate`` (the mean),
        ``se``, ``ci_low``, ``ci_high``, ``level``. A group absent from a
        replicate gives no value there (ignored).
    """
    values = np.asarray(values, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    clusters = np.arange(values.size) if clusters is None else np.asarray(clusters, dtype=np.int64)
    g = (int(groups.max()) + 1 if groups.size else 0) if n_groups is None else int(n_groups)
    c = int(clusters.max()) + 1 if clusters.size else 0
    rng = np.random.default_rng(seed)
    reps = np.empty((n_boot, g))
    for start in range(0, n_boot, max(1, int(chunk))):
        stop = min(n_boot, start + max(1, int(chunk)))
        w = cluster_bootstrap_weights(c, stop - start, rng)
        reps[start:stop] = group_mean_replicates(values, groups, clusters, w, n_groups=g)
    est = group_mean_replicates(values, groups, clusters, np.ones((1, c)), n_groups=g)[0]
    lo, hi = percentile_ci(reps, level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(reps, axis=0, ddof=1)
    return pd.DataFrame({"estimate": est, "se": se, "ci_low": lo, "ci_high": hi, "level": level})


def bootstrap_counts(
    rows: np.ndarray,
    codes: np.ndarray,
    n_cells: int,
    n_rows: int,
    clusters: np.ndarray | None,
    n_boot: int,
    seed: np.random.Generator | int | None = 0,
) -> np.ndarray:
    """Cluster-bootstrap replicates of per-cell counts, shape ``(n_boot, n_cells)``.

    Resampling subjects with replacement and re-counting group members is, for
    counts, the same as drawing how many times each *profile* (a subject's
    vector of memberships over the cells) is picked: subjects with the same
    profile are exchangeable. With one image per subject the profiles are just
    the groups, so ``n_boot`` replicates cost one multinomial draw over a
    handful of profiles instead of ``n_boot`` passes over the data. Above
    20,000 distinct profiles it falls back to one draw per replicate.

    Parameters
    ----------
    rows, codes : int arrays
        Long-form membership: row ``rows[i]`` is in cell ``codes[i]`` (a row
        may be in several cells, for multi-valued attributes).
    n_cells : int
        Number of cells (declared groups).
    n_rows : int
        Rows in the table (rows without membership still count as draws).
    clusters : int array of length ``n_rows`` or None
        Subject code of every row; None resamples rows.
    n_boot : int
        Number of replicates.
    seed : int, numpy.random.Generator or None
        Randomness.

    Returns
    -------
    numpy.ndarray, shape (n_boot, n_cells), float64
    """
    rng = np.random.default_rng(seed)
    cl_of_row = np.arange(n_rows, dtype=np.int64) if clusters is None else np.asarray(clusters, np.int64)
    n_clusters = int(cl_of_row.max()) + 1 if n_rows else 0
    entry_cluster = cl_of_row[rows]
    # profile hash of every cluster: two exact integer-valued float sums of random keys
    keyrng = np.random.default_rng(12345)
    k1 = keyrng.integers(1, 2**20, size=n_cells).astype(np.float64)
    k2 = keyrng.integers(1, 2**20, size=n_cells).astype(np.float64)
    h1 = np.bincount(entry_cluster, weights=k1[codes], minlength=n_clusters)
    h2 = np.bincount(entry_cluster, weights=k2[codes], minlength=n_clusters)
    keys = np.stack([h1, h2], axis=1)
    _, first, inverse, mult = np.unique(keys, axis=0, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    n_prof = len(mult)
    if n_prof <= _MAX_PROFILES:
        is_rep = np.zeros(n_clusters, bool)
        is_rep[first] = True
        sel = is_rep[entry_cluster]
        prof = np.bincount(inverse[entry_cluster[sel]] * n_cells + codes[sel], minlength=n_prof * n_cells).reshape(n_prof, n_cells)
        draws = rng.multinomial(n_clusters, mult / n_clusters, size=n_boot)
        return draws @ prof.astype(np.float64)
    out = np.empty((n_boot, n_cells))
    for b in range(n_boot):  # one bincount per replicate: too many distinct profiles to tabulate
        w = cluster_bootstrap_weights(n_clusters, 1, rng)[0]
        out[b] = np.bincount(codes, weights=w[entry_cluster], minlength=n_cells)
    return out


def count_shares(counts: np.ndarray) -> np.ndarray:
    """Shares of each cell in count replicates (rows summing to 0 give NaN).

    Parameters
    ----------
    counts : numpy.ndarray, shape (n_boot, n_cells)
        Output of :func:`bootstrap_counts`.

    Returns
    -------
    numpy.ndarray, shape (n_boot, n_cells)
    """
    tot = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, tot, out=np.full(counts.shape, np.nan), where=tot > 0)


def bootstrap_column_sums(mat, n_boot: int, seed=0, max_cells: int = 20_000_000) -> np.ndarray:
    """Column sums of a per-subject matrix under cluster-bootstrap weights (docs/METHODS.md §4.2).

    Parameters
    ----------
    mat : scipy.sparse matrix or array, shape (n_subjects, cols)
        Per-subject sums of whatever is resampled (values and counts of cells).
    n_boot : int
    seed : int, Generator or None
    max_cells : int
        The weights are drawn in chunks of at most this many numbers (the draws do not depend on the chunk).

    Returns
    -------
    numpy.ndarray, shape (n_boot, cols)
    """
    from scipy import sparse  # scipy.sparse only for callers that pass a sparse matrix

    mat = sparse.csr_matrix(mat)
    n_clusters = mat.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_boot, max_cells // max(1, n_clusters)))
    out = np.empty((n_boot, mat.shape[1]))
    # a dense per-subject matrix turns each chunk into one BLAS product; sparse when it would be large
    per_subject = mat.toarray() if mat.shape[0] * mat.shape[1] <= max_cells else None
    mt = mat.T.tocsr()
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        w = cluster_bootstrap_weights(n_clusters, stop - start, rng)
        out[start:stop] = w @ per_subject if per_subject is not None else np.asarray(mt @ w.T).T
    return out

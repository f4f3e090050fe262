"""Plain per-group statistics of a score: size, subjects, mean, median, standard deviation.

Vectorised over groups (``numpy.bincount`` and one sort), for long-form
memberships where a row may be listed once per group (multi-valued
attributes). Confidence intervals come from :mod:`fairvision.stats.resample`;
see docs/METHODS.md §6.2.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def group_medians(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of every group (NaN for an empty group).

    Parameters
    ----------
    values : numpy.ndarray of float
        Scores, no NaN.
    groups : numpy.ndarray of int
        Group code ``0 .. n_groups-1`` of every score.
    n_groups : int
        Number of groups.

    Returns
    -------
    numpy.ndarray, shape (n_groups,)
    """
    values = np.asarray(values, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    n = np.bincount(groups, minlength=n_groups)
    xs = values[np.lexsort((values, groups))]
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    nz = n > 0
    med = np.full(n_groups, np.nan)
    med[nz] = 0.5 * (xs[starts[nz] + (n[nz] - 1) // 2] + xs[starts[nz] + n[nz] // 2])
    return med


def group_summary(values, groups, clusters, n_groups: int) -> pd.DataFrame:
    """Size, subjects, mean, median and standard deviation of a score in every group.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        One score per row; NaN rows (not scored) are left out.
    groups : array_like of int, shape (n,)
        Group code ``0 .. n_groups-1`` of every row.
    clusters : array_like of int, shape (n,)
        Subject code of every row.
    n_groups : int
        Number of groups (empty groups get a row of zeros and NaN).

    Returns
    -------
    pandas.DataFrame
        Indexed by group code: ``n_samples``, ``n_subjects``, ``mean``,
        ``median``, ``sd`` (``ddof=1``; NaN with fewer than two values).
    """
    x = np.asarray(values, dtype=float)
    codes = np.asarray(groups, dtype=np.int64)
    subj = np.asarray(clusters, dtype=np.int64)
    ok = ~np.isnan(x)
    x, codes, subj = x[ok], codes[ok], subj[ok]
    n = np.bincount(codes, minlength=n_groups)
    pairs = np.unique(np.stack([codes, subj], 1), axis=0) if codes.size else np.zeros((0, 2), np.int64)
    n_subj = np.bincount(pairs[:, 0], minlength=n_groups)
    sums = np.bincount(codes, weights=x, minlength=n_groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = sums / n
        sq = np.bincount(codes, weights=(x - mean[codes]) ** 2, minlength=n_groups)
        sd = np.sqrt(sq / (n - 1))
    return pd.DataFrame({"n_samples": n, "n_subjects": n_subj, "mean": mean,
                         "median": group_medians(x, codes, n_groups), "sd": sd})


def cluster_means(values, groups, clusters) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean score of every subject within every group it has scores in.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        Scores; NaN rows are left out.
    groups, clusters : array_like of int, shape (n,)
        Group and subject code of every row.

    Returns
    -------
    means, groups, clusters : numpy.ndarray
        One entry per (group, subject) pair, sorted by group then subject.
    """
    x = np.asarray(values, dtype=float)
    codes = np.asarray(groups, dtype=np.int64)
    subj = np.asarray(clusters, dtype=np.int64)
    ok = ~np.isnan(x)
    x, codes, subj = x[ok], codes[ok], subj[ok]
    if x.size == 0:
        return x, codes, subj
    keys, inv = np.unique(np.stack([codes, subj], 1), axis=0, return_inverse=True)
    inv = np.asarray(inv).ravel()
    means = np.bincount(inv, weights=x) / np.bincount(inv)
    return means, keys[:, 0], keys[:, 1]

"""Plain per-group statistics of a score: size, subjects, mean, median, standard deviation; and the
Kruskal-Wallis test of whether a score differs between groups at all.

Vectorised over groups (``numpy.bincount`` and one sort), for long-form
memberships where a row may be listed once per group (multi-valued
attributes). Confidence intervals come from :mod:`fairvision.stats.resample`;
see docs/METHODS.md §6.2. The Kruskal-Wallis test is the omnibus test of the
visual statistics (docs/METHODS.md §13.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from fairvision.errors import FairvisionError
from fairvision.stats.results import TestResult


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


@dataclass
class KruskalResult(TestResult):
    """Result of :func:`kruskal_test`.

    Attributes
    ----------
    statistic : float
        Kruskal-Wallis H, corrected for ties (NaN when every value is the same).
    pvalue : float
        Upper tail of the chi-square distribution with ``df`` degrees of freedom (NaN with ``statistic``).
    df : int
        Non-empty groups minus one.
    n : int
        Values tested (NaN values left out).
    n_groups : int
        Non-empty groups.
    """

    df: int = 0
    n: int = 0
    n_groups: int = 0


def kruskal_test(values, groups) -> KruskalResult:
    """Kruskal-Wallis H test: do the values of the groups come from the same distribution?
    (docs/METHODS.md §13.3)

    ``H = (12 / (N (N + 1)) sum_g R_g^2 / n_g - 3 (N + 1)) / (1 - sum_t (t^3 - t) / (N^3 - N))`` with ``R_g`` the
    sum of the (average, for ties) ranks of group g in the pooled sample and ``t`` the sizes of the tie blocks;
    the p-value is the chi-square upper tail with ``k - 1`` degrees of freedom (``k`` non-empty groups), as
    :func:`scipy.stats.kruskal`. One sort and ``numpy.bincount``; no loop over groups.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        Scores; NaN values are left out.
    groups : array_like, shape (n,)
        Group label (or code) of every score.

    Returns
    -------
    KruskalResult
        ``statistic`` (H), ``pvalue``, ``df``, ``n``, ``n_groups``. When every value is the same, H is undefined
        (scipy raises): ``statistic`` and ``pvalue`` are NaN.

    Raises
    ------
    FairvisionError
        Values and groups of different lengths, or fewer than two groups with a value.
    """
    x = np.asarray(values, dtype=float).ravel()
    g = np.asarray(groups).ravel()
    if x.shape != g.shape:
        raise FairvisionError(f"kruskal_test: {x.size} values but {g.size} group labels")
    ok = ~np.isnan(x)
    if g.dtype == object:
        ok &= pd.notna(g)
    x, g = x[ok], g[ok]
    codes = pd.factorize(g)[0] if x.size else np.zeros(0, np.int64)
    k = int(codes.max()) + 1 if codes.size else 0
    if k < 2:
        raise FairvisionError(f"kruskal_test: needs at least 2 groups with values, got {k}")
    n = x.size
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    inv = np.asarray(inv).ravel()
    # average rank of every tie block: the ranks before it plus (t + 1) / 2
    block_rank = np.cumsum(counts) - counts + (counts + 1) / 2.0
    ranks = block_rank[inv]
    n_g = np.bincount(codes, minlength=k)
    r_g = np.bincount(codes, weights=ranks, minlength=k)
    ties = 1.0 - float(np.sum(counts.astype(float) ** 3 - counts)) / (float(n) ** 3 - n)
    res = KruskalResult(statistic=np.nan, pvalue=np.nan, df=k - 1, n=int(n), n_groups=k)
    if ties <= 0:  # every value the same
        return res
    h = (12.0 / (n * (n + 1.0)) * float(np.sum(r_g ** 2 / n_g)) - 3.0 * (n + 1.0)) / ties
    h = max(h, 0.0)  # rounding
    res.statistic = h
    res.pvalue = float(special.chdtrc(k - 1, h))
    return res

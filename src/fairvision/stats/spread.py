"""How much one subject's measurement moves between their images: per-subject spread, category flips, spread by
group with subject-bootstrap intervals, and a test of whether spread differs between groups (docs/METHODS.md §2.6).

Pure numerics on arrays: every function takes values and integer subject (or group) codes and works with
``numpy.bincount`` and one sort, never a loop over subjects. Angles (the hue h*) are handled on the circle:
the deviations of a subject's angles from their circular mean are wrapped to [-180, 180) degrees before the
standard deviation and range are taken, so 359 and 1 degrees are 2 degrees apart, not 358.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from fairvision.errors import FairvisionError
from fairvision.groups import distinct_counts
from fairvision.stats.proportions import wilson_interval
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci
from fairvision.stats.results import TestResult

__all__ = ["subject_spread", "category_flips", "weighted_medians", "group_spread", "flip_shares",
           "RankCorrelation", "rank_correlation"]


def _codes(subjects, n: int) -> tuple[np.ndarray, int]:
    s = np.asarray(subjects, dtype=np.int64).ravel()
    if s.size != n:
        raise FairvisionError(f"{n} values but {s.size} subject codes")
    if s.size and s.min() < 0:
        raise FairvisionError("subject codes must be 0 or more")
    return s, (int(s.max()) + 1 if s.size else 0)


def subject_spread(values, subjects, *, circular: bool = False, n_subjects: int | None = None) -> pd.DataFrame:
    """Number of values, mean, standard deviation and range of one measurement within every subject
    (docs/METHODS.md §2.6).

    Parameters
    ----------
    values : array_like of float, shape (n,)
        One value per image; NaN values are left out.
    subjects : array_like of int, shape (n,)
        Subject code ``0 .. n_subjects-1`` of every image.
    circular : bool
        The values are angles in degrees (hue h*): the subject's mean is the circular mean (the direction of
        the mean unit vector), every deviation from it is wrapped to [-180, 180), the SD is taken of the wrapped
        deviations and the range is the largest minus the smallest wrapped deviation. For angles spread over
        less than a half circle this equals the SD and range of the values unwrapped around their mean.
    n_subjects : int, optional
        Number of subjects (default: the largest code plus one).

    Returns
    -------
    pandas.DataFrame
        Indexed by subject code: ``n`` (finite values), ``mean`` (circular mean in [0, 360) when
        ``circular``), ``sd`` (``ddof=1``; NaN with fewer than two values) and ``range`` (NaN with none).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    s, k = _codes(subjects, x.size)
    k = k if n_subjects is None else int(n_subjects)
    ok = np.isfinite(x)
    x, s = x[ok], s[ok]
    n = np.bincount(s, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if circular:
            rad = np.radians(x)
            mean = np.degrees(np.arctan2(np.bincount(s, np.sin(rad), k), np.bincount(s, np.cos(rad), k))) % 360.0
            dev = (x - mean[s] + 180.0) % 360.0 - 180.0
            centre = np.bincount(s, dev, k) / n  # the wrapped deviations' own mean (0 for a symmetric spread)
        else:
            mean = np.bincount(s, x, k) / n
            dev = x - mean[s]
            centre = np.zeros(k)
        sd = np.sqrt(np.bincount(s, (dev - centre[s]) ** 2, k) / (n - 1))
    sd[n < 2] = np.nan
    hi = np.full(k, -np.inf)
    lo = np.full(k, np.inf)
    np.maximum.at(hi, s, dev)
    np.minimum.at(lo, s, dev)
    rng = np.where(n > 0, hi - lo, np.nan)
    mean[n == 0] = np.nan
    return pd.DataFrame({"n": n.astype(np.int64), "mean": mean, "sd": sd, "range": rng})


def category_flips(codes, subjects, *, n_subjects: int | None = None) -> pd.DataFrame:
    """Whether a subject's category changes between their images (docs/METHODS.md §2.6).

    Parameters
    ----------
    codes : array_like of int, shape (n,)
        Category code of every image; negative codes are missing (left out).
    subjects : array_like of int, shape (n,)
        Subject code of every image.
    n_subjects : int, optional
        Number of subjects (default: the largest code plus one).

    Returns
    -------
    pandas.DataFrame
        Indexed by subject code: ``n`` (images with a category), ``n_categories`` (distinct categories among
        them) and ``flips`` (True when there are two or more; False for a subject with under two images).
    """
    c = np.asarray(codes, dtype=np.int64).ravel()
    s, k = _codes(subjects, c.size)
    k = k if n_subjects is None else int(n_subjects)
    ok = c >= 0
    c, s = c[ok], s[ok]
    n = np.bincount(s, minlength=k)
    n_cat = distinct_counts(s, c, k)
    return pd.DataFrame({"n": n, "n_categories": n_cat, "flips": n_cat >= 2})


def weighted_medians(values, weights) -> np.ndarray:
    """Median of ``values`` under each row of integer (or real) ``weights`` (docs/METHODS.md §2.6).

    With whole-number weights (bootstrap draw counts) this is the ordinary median of the sample in which value
    ``i`` appears ``weights[b, i]`` times: the mean of the lower and upper middle values. All replicates at
    once: one sort of the values and a cumulative sum per replicate, no loop.

    Parameters
    ----------
    values : array_like of float, shape (n,)
    weights : array_like, shape (m, n)

    Returns
    -------
    numpy.ndarray, shape (m,)
        NaN where a row's weights sum to 0 (or there are no values).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if w.shape[1] != x.size:
        raise FairvisionError(f"{x.size} values but weights for {w.shape[1]}")
    out = np.full(w.shape[0], np.nan)
    if x.size == 0:
        return out
    order = np.argsort(x, kind="stable")
    xs = x[order]
    cum = np.cumsum(w[:, order], axis=1)
    total = cum[:, -1]
    half = total / 2.0
    lower = np.minimum((cum < half[:, None] - 1e-9).sum(axis=1), x.size - 1)  # first index with cum >= half
    upper = np.minimum((cum <= half[:, None] + 1e-9).sum(axis=1), x.size - 1)  # first index with cum > half
    good = total > 0
    out[good] = 0.5 * (xs[lower[good]] + xs[upper[good]])
    return out


def group_spread(sd, groups, n_groups: int, *, n_boot: int = 1000, level: float = 0.95, seed=0) -> pd.DataFrame:
    """Median and mean of the per-subject SDs in every group, with subject-bootstrap percentile intervals
    (docs/METHODS.md §2.6, §4.2).

    Parameters
    ----------
    sd : array_like of float, shape (n_subjects,)
        One per-subject SD (or any per-subject number); NaN subjects are left out.
    groups : array_like of int, shape (n_subjects,)
        Group code ``0 .. n_groups-1`` of every subject (a subject in several groups is listed once per
        group, with its SD repeated).
    n_groups : int
    n_boot, level, seed
        Replicates (0: no intervals), two-sided level and randomness. Subjects are the resampled units: every
        group's subjects are drawn with replacement from that group (stratified by group).

    Returns
    -------
    pandas.DataFrame
        Indexed by group code: ``n_subjects``, ``median``, ``median_ci_low``, ``median_ci_high``, ``mean``,
        ``mean_ci_low``, ``mean_ci_high``.
    """
    x = np.asarray(sd, dtype=np.float64).ravel()
    g = np.asarray(groups, dtype=np.int64).ravel()
    if g.size != x.size:
        raise FairvisionError(f"{x.size} values but {g.size} group codes")
    ok = np.isfinite(x)
    x, g = x[ok], g[ok]
    rng = np.random.default_rng(seed)
    rows = []
    for j in range(int(n_groups)):  # a loop over groups (few), never over subjects or replicates
        v = x[g == j]
        row = {"n_subjects": int(v.size), "median": float(np.median(v)) if v.size else np.nan,
               "mean": float(v.mean()) if v.size else np.nan}
        if v.size and n_boot > 0:
            w = cluster_bootstrap_weights(v.size, n_boot, rng)
            lo, hi = percentile_ci(weighted_medians(v, w), level)
            row.update(median_ci_low=float(lo), median_ci_high=float(hi))
            lo, hi = percentile_ci(w @ v / v.size, level)
            row.update(mean_ci_low=float(lo), mean_ci_high=float(hi))
        else:
            row.update(median_ci_low=np.nan, median_ci_high=np.nan, mean_ci_low=np.nan, mean_ci_high=np.nan)
        rows.append(row)
    cols = ["n_subjects", "median", "median_ci_low", "median_ci_high", "mean", "mean_ci_low", "mean_ci_high"]
    return pd.DataFrame(rows, columns=cols)


def flip_shares(flips, groups, n_groups: int, *, level: float = 0.95) -> pd.DataFrame:
    """Share of subjects whose category flips, per group, with Wilson intervals (docs/METHODS.md §2.6, §4.4).

    Parameters
    ----------
    flips : array_like of bool, shape (n_subjects,)
    groups : array_like of int, shape (n_subjects,)
        Group code of every subject.
    n_groups : int
    level : float

    Returns
    -------
    pandas.DataFrame
        Indexed by group code: ``n_subjects``, ``n_flip``, ``share``, ``ci_low``, ``ci_high``.
    """
    f = np.asarray(flips, dtype=bool).ravel()
    g = np.asarray(groups, dtype=np.int64).ravel()
    n = np.bincount(g, minlength=n_groups)
    k = np.bincount(g, weights=f.astype(np.float64), minlength=n_groups)
    lo, hi = wilson_interval(k, n, level)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, k / np.maximum(n, 1), np.nan)
    return pd.DataFrame({"n_subjects": n, "n_flip": k.astype(np.int64), "share": share, "ci_low": lo, "ci_high": hi})


@dataclass
class RankCorrelation(TestResult):
    """Spearman's rank correlation: ``statistic`` is rho, ``pvalue`` the two-sided p-value, ``n`` the pairs."""

    n: int = 0


def rank_correlation(x, y) -> RankCorrelation:
    """Spearman's rank correlation of two measurements, pairs with a NaN left out (docs/METHODS.md §2.7).

    Parameters
    ----------
    x, y : array_like of float, shape (n,)

    Returns
    -------
    RankCorrelation
        rho and its two-sided p-value (:func:`scipy.stats.spearmanr`); NaN with fewer than three pairs or
        when either side is constant.
    """
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.size != b.size:
        raise FairvisionError(f"rank_correlation: {a.size} and {b.size} values")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return RankCorrelation(np.nan, np.nan, n=int(a.size))
    res = sps.spearmanr(a, b)
    return RankCorrelation(float(res.statistic), float(res.pvalue), n=int(a.size))

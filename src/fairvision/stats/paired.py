"""Paired bootstrap comparisons: is one model's disparity larger than another's on the same test set?

Several models (one per training subset of a bias-transfer study) are scored
on one common test set. Resampling the test *subjects* once and scoring every
model on the same resample gives joint replicates, so the difference between
two models' OD has a bootstrap distribution that carries the pairing (both
models saw the same hard and easy faces). See docs/METHODS.md §11.3.

- :func:`paired_difference_test`: difference of two statistics from their
  joint replicates: percentile CI, bootstrap standard error and a two-sided
  p-value from it.
- :func:`paired_od_tests`: every pair of models on one test set: OD
  difference, CI, p-value and the p-value adjusted across the pairs.

Paired scores of one task before and after an edit of the images (in-painting, docs/METHODS.md §13.11):

- :func:`paired_differences`: per score column and group of samples, the mean
  difference after - before with a subject-bootstrap interval and a Wilcoxon
  signed-rank test of the subjects' mean differences, corrected across all.
- :func:`signed_rank`: that signed-rank test for one set of samples.
- :func:`group_heterogeneity`: per score column and attribute, a
  Kruskal-Wallis test of whether the groups' subjects changed differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.stats import norm

from fairvision.errors import FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.groupwise import kruskal_test
from fairvision.stats.multiclass import disparity_replicates
from fairvision.stats.resample import DEFAULT_LEVEL, cluster_bootstrap_weights, group_mean_replicates, percentile_ci
from fairvision.stats.results import TestResult


#: relative size below which a bootstrap standard error is float noise (treated as zero)
ZERO_SE_RTOL = 1e-12
#: bootstrap weights drawn per matrix product in :func:`paired_differences`: bounds memory to about this many floats
BOOT_CELLS = 5_000_000


@dataclass
class PairedDifferenceResult(TestResult):
    """Difference ``a - b`` of two statistics with a paired-bootstrap CI and p-value (docs/METHODS.md §11.3).

    ``statistic`` and ``estimate`` are both the observed difference;
    ``ci_low``, ``ci_high`` its percentile interval at ``level``; ``se`` the
    bootstrap standard error; ``pvalue`` the two-sided p-value of
    ``statistic / se``; ``n_boot`` the replicates that were finite for both
    statistics.
    """

    estimate: float = float("nan")
    se: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    level: float = DEFAULT_LEVEL
    n_boot: int = 0


def paired_difference_test(estimate_a: float, estimate_b: float, replicates_a, replicates_b, *,
                           level: float = DEFAULT_LEVEL) -> PairedDifferenceResult:
    """Paired-bootstrap test of ``a - b`` from joint replicates (docs/METHODS.md §11.3).

    Replicate ``i`` of ``a`` and of ``b`` must come from the same resample.
    The CI is the percentile interval of ``d* = a* - b*``; the p-value is the
    two-sided normal tail of ``z = (a - b) / se`` with ``se`` the standard
    deviation of ``d*`` (a Wald test with a bootstrap standard error). A
    p-value counted from the replicates could not go below ``2 / (B + 1)``,
    which no correction across many pairs survives at the usual ``B``.

    Parameters
    ----------
    estimate_a, estimate_b : float
        The two statistics on the full test set.
    replicates_a, replicates_b : array_like, shape (B,)
        Their joint bootstrap replicates; pairs with a non-finite member are
        left out.
    level : float
        Two-sided level of the interval.

    Returns
    -------
    PairedDifferenceResult
        NaN everywhere when no replicate pair is finite. A standard error
        of at most ``1e-12 * max(1, |a|, |b|)`` counts as zero (all
        replicates alike, e.g. one subject): then ``pvalue`` is 1 when the
        difference is zero too and NaN (not testable) otherwise, never 0.
    """
    ra = np.asarray(replicates_a, dtype=float)
    rb = np.asarray(replicates_b, dtype=float)
    if ra.shape != rb.shape or ra.ndim != 1:
        raise FairvisionError("paired_difference_test: the two replicate vectors must have the same length")
    d = ra - rb
    d = d[np.isfinite(d)]
    diff = float(estimate_a) - float(estimate_b)
    if d.size == 0 or not np.isfinite(diff):
        return PairedDifferenceResult(diff, float("nan"), diff, float("nan"), float("nan"), float("nan"), level, 0)
    lo, hi = percentile_ci(d, level)
    se = float(np.std(d, ddof=1)) if d.size > 1 else float("nan")
    # a standard error at float-noise size is zero: identical resamples (one subject) carry no variability
    tol = ZERO_SE_RTOL * max(1.0, abs(float(estimate_a)), abs(float(estimate_b)))
    if not np.isfinite(se):
        p = float("nan")
    elif se <= tol:
        se = 0.0
        p = 1.0 if abs(diff) <= tol else float("nan")
    else:
        p = float(2.0 * norm.sf(abs(diff) / se))
    return PairedDifferenceResult(diff, p, diff, se, float(lo), float(hi), level, int(d.size))


def paired_od_tests(y_true, predictions: Mapping[str, object], groups, *, subjects=None, n_boot: int = 1000,
                    level: float = DEFAULT_LEVEL, seed: np.random.Generator | int | None = 0,
                    correction: str = DEFAULT_CORRECTION) -> pd.DataFrame:
    """OD of several models on one test set, compared in every pair with a paired bootstrap (docs/METHODS.md §11.3).

    One set of subject draws (:func:`~fairvision.stats.resample.cluster_bootstrap_weights`)
    scores every model (:func:`~fairvision.stats.multiclass.disparity_replicates`),
    so each pair's difference is paired; p-values are adjusted across the
    pairs with ``correction``.

    Parameters
    ----------
    y_true : array_like
        True class of every test sample.
    predictions : mapping of str to array_like
        Model name -> predicted class of every test sample (same order).
    groups : array_like
        Demographic group of every test sample.
    subjects : array_like, optional
        Subject of every sample (default: every sample its own subject).
    n_boot, level, seed
        Replicates, two-sided level, randomness.
    correction : {"holm", "bonferroni", "bh", "none"}
        Multiple-testing correction across the pairs.

    Returns
    -------
    pandas.DataFrame
        One row per pair ``(a, b)`` in the order of ``predictions``:
        ``od_a``, ``od_b``, ``estimate`` (``od_a - od_b``), ``ci_low``,
        ``ci_high``, ``level``, ``statistic`` (the same difference),
        ``pvalue``, ``pvalue_adjusted``.
    """
    names = list(predictions)
    if len(names) < 2:
        raise FairvisionError("paired_od_tests: give the predictions of at least two models")
    y_true = np.asarray(y_true, dtype=object)
    if subjects is None:
        subj = np.arange(len(y_true))
    else:
        subj = pd.factorize(pd.Series(np.asarray(subjects, dtype=object)), sort=False)[0].astype(np.int64)
        if (subj < 0).any():
            raise FairvisionError(f"paired_od_tests: subject {int(np.flatnonzero(subj < 0)[0]) + 1} is missing")
    S = int(subj.max()) + 1
    w = cluster_bootstrap_weights(S, n_boot, seed)
    one = np.ones((1, S))
    est, reps = {}, {}
    for n in names:
        est[n] = float(disparity_replicates(y_true, predictions[n], groups, subj, one)["od"][0])
        reps[n] = disparity_replicates(y_true, predictions[n], groups, subj, w)["od"]
    rows = []
    for a, b in combinations(names, 2):
        r = paired_difference_test(est[a], est[b], reps[a], reps[b], level=level)
        rows.append({"a": a, "b": b, "od_a": est[a], "od_b": est[b], "estimate": r.estimate, "ci_low": r.ci_low,
                     "ci_high": r.ci_high, "level": level, "statistic": r.statistic, "pvalue": r.pvalue})
    out = pd.DataFrame(rows)
    out["pvalue_adjusted"] = adjust_pvalues(out["pvalue"].to_numpy(dtype=float), correction)
    return out


# ----------------------------------------------------------------------------- scores before and after an edit


@dataclass
class SignedRankResult(TestResult):
    """Wilcoxon signed-rank test of subjects' mean differences (docs/METHODS.md §13.11).

    ``statistic`` and ``pvalue`` as :func:`scipy.stats.wilcoxon`; ``n`` the subjects with a difference,
    ``n_nonzero`` those whose mean difference is not zero (the ones ranked).
    """

    n: int = 0
    n_nonzero: int = 0


def _subject_means(differences: np.ndarray, subjects: np.ndarray) -> np.ndarray:
    """Each subject's mean difference (NaN left out), rounded to 12 decimals (see :func:`signed_rank`)."""
    ok = ~np.isnan(differences)
    _, inv = np.unique(subjects[ok], return_inverse=True)
    return np.round(np.bincount(inv, weights=differences[ok]) / np.bincount(inv), 12)


def signed_rank(differences, subjects) -> SignedRankResult:
    """Two-sided Wilcoxon signed-rank test of the subjects' mean differences (docs/METHODS.md §13.11).

    Parameters
    ----------
    differences : float array (n,)
        One paired difference per sample (after - before); NaN entries are left out.
    subjects : array (n,)
        Subject of each sample: several images of a person count once, through their mean difference.

    Returns
    -------
    SignedRankResult
        :func:`scipy.stats.wilcoxon` of the subjects' means with zeros dropped. The means are rounded to 12
        decimals first, so floating-point noise neither breaks a tie (0.8 - 0.7 and 0.4 - 0.5 are the same
        distance from 0) nor turns an unchanged score into a change. No non-zero mean gives statistic 0 and
        p = 1.
    """
    per = _subject_means(np.asarray(differences, dtype=float), np.asarray(subjects))
    nz = per[per != 0]
    if not nz.size:
        return SignedRankResult(0.0, 1.0, n=int(per.size), n_nonzero=0)
    res = sps.wilcoxon(nz)
    return SignedRankResult(float(res.statistic), float(res.pvalue), n=int(per.size), n_nonzero=int(nz.size))


def paired_differences(before, after, subjects, cells: Sequence[tuple[str, str, np.ndarray]],
                       metrics: Sequence[str], *, n_boot: int = 1000, level: float = DEFAULT_LEVEL,
                       seed: np.random.Generator | int | None = 0, correction: str = DEFAULT_CORRECTION,
                       alpha: float = 0.05, min_subjects: int = 10) -> pd.DataFrame:
    """Mean paired difference after - before per score column and cell, with a subject-bootstrap interval and a
    Wilcoxon signed-rank test of the subjects' mean differences (docs/METHODS.md §13.11).

    Parameters
    ----------
    before, after : numpy.ndarray, shape (n, k)
        Scores of ``n`` samples on ``k`` columns; NaN: not scored (left out of that column).
    subjects : int array (n,)
        Subject code ``0 .. n_subjects-1`` of each sample.
    cells : sequence of (attribute, group, rows)
        The samples of each group (rows may repeat across cells).
    metrics : sequence of str
        Names of the ``k`` columns.
    n_boot, level, seed
        Subject-bootstrap replicates, two-sided level of the percentile interval, randomness.
    correction, alpha
        Multiple-testing correction across every column and cell, and the level of ``significant``.
    min_subjects : int
        A cell with fewer subjects gets an interval but no test.

    Returns
    -------
    pandas.DataFrame
        One row per column and cell: ``metric``, ``attribute``, ``group``, ``n``, ``n_subjects``,
        ``mean_before``, ``mean_after``, ``estimate`` (the mean difference), ``ci_low``, ``ci_high``, ``level``,
        ``statistic``, ``pvalue`` (:func:`signed_rank`), ``tested``, ``pvalue_adjusted``, ``significant``. All
        columns and cells share the same bootstrap draws of subjects; the mean weights every sample equally.
    """
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    d = after - before
    n, k = d.shape
    subjects = np.asarray(subjects, dtype=np.int64)
    n_subj = int(subjects.max()) + 1 if n else 0
    rows = np.concatenate([c[2] for c in cells]).astype(np.int64)
    cell_of = np.repeat(np.arange(len(cells)), [len(c[2]) for c in cells])
    n_cells = len(cells)
    groups = (np.arange(k)[:, None] * n_cells + cell_of[None, :]).ravel()
    values = d[rows].T.ravel()
    clusters = np.tile(subjects[rows], k)
    reps = np.full((n_boot, k * n_cells), np.nan)
    if n_boot and n_subj:
        rng = np.random.default_rng(seed)
        step = max(1, min(n_boot, BOOT_CELLS // max(1, n_subj)))
        for start in range(0, n_boot, step):
            w = cluster_bootstrap_weights(n_subj, min(step, n_boot - start), rng)
            reps[start:start + len(w)] = group_mean_replicates(values, groups, clusters, w, n_groups=k * n_cells)
    lo, hi = percentile_ci(reps, level) if n_boot else (np.full(k * n_cells, np.nan),) * 2
    out = []
    for j, metric in enumerate(metrics):
        for c, (attr, group, r) in enumerate(cells):
            dj, bj, aj, sj = d[r, j], before[r, j], after[r, j], subjects[r]
            ok = ~np.isnan(dj)
            dj, bj, aj, sj = dj[ok], bj[ok], aj[ok], sj[ok]
            n_s = int(np.unique(sj).size)
            row = {"metric": metric, "attribute": attr, "group": group, "n": int(dj.size), "n_subjects": n_s,
                   "mean_before": bj.mean() if dj.size else np.nan, "mean_after": aj.mean() if dj.size else np.nan,
                   "estimate": dj.mean() if dj.size else np.nan, "ci_low": lo[j * n_cells + c],
                   "ci_high": hi[j * n_cells + c], "level": level, "statistic": np.nan, "pvalue": np.nan,
                   "tested": n_s >= min_subjects}
            if row["tested"]:
                res = signed_rank(dj, sj)
                row["statistic"], row["pvalue"] = res.statistic, res.pvalue
            out.append(row)
    table = pd.DataFrame(out)
    table["pvalue_adjusted"] = adjust_pvalues(table["pvalue"].to_numpy(), correction)
    table["significant"] = (table["pvalue_adjusted"] < alpha).fillna(False).astype(bool)
    return table


def group_heterogeneity(differences, subjects, cells: Sequence[tuple[str, str, np.ndarray]], metrics: Sequence[str],
                        *, correction: str = DEFAULT_CORRECTION, alpha: float = 0.05,
                        min_subjects: int = 10) -> pd.DataFrame:
    """Do the groups of an attribute change differently? (docs/METHODS.md §13.11)

    Parameters
    ----------
    differences : numpy.ndarray, shape (n, k)
        Paired differences of ``n`` samples on ``k`` columns (NaN left out).
    subjects : int array (n,)
        Subject code of each sample.
    cells : sequence of (attribute, group, rows)
        The samples of each group; cells of attribute ``"all"`` are skipped.
    metrics : sequence of str
        Names of the ``k`` columns.
    correction, alpha
        Multiple-testing correction across columns and attributes, and the level of ``differs``.
    min_subjects : int
        Only groups with at least this many subjects take part.

    Returns
    -------
    pandas.DataFrame
        Per column and attribute: ``metric``, ``attribute``, ``n_groups`` (groups tested), ``statistic`` and
        ``pvalue`` of a Kruskal-Wallis test (:func:`fairvision.stats.groupwise.kruskal_test`) of the subjects'
        mean differences across the groups, ``pvalue_adjusted``, ``differs``. No spread at all (every subject's
        difference the same) gives statistic 0 and p = 1; fewer than two tested groups, no test (NaN).
    """
    differences = np.asarray(differences, dtype=float)
    subjects = np.asarray(subjects)
    rows = []
    attrs = list(dict.fromkeys(a for a, _, _ in cells if a != "all"))
    for j, metric in enumerate(metrics):
        for attr in attrs:
            vals, labs = [], []
            for a, g, r in cells:
                if a != attr:
                    continue
                per = _subject_means(differences[r, j], subjects[r])
                if per.size >= min_subjects:
                    vals.append(per)
                    labs.append(np.full(per.size, g, dtype=object))
            row = {"metric": metric, "attribute": attr, "n_groups": len(vals), "statistic": np.nan, "pvalue": np.nan}
            if len(vals) >= 2:
                v = np.concatenate(vals)
                res = kruskal_test(v, np.concatenate(labs)) if np.ptp(v) > 0 else None
                row["statistic"], row["pvalue"] = (res.statistic, res.pvalue) if res is not None else (0.0, 1.0)
            rows.append(row)
    het = pd.DataFrame(rows, columns=["metric", "attribute", "n_groups", "statistic", "pvalue"])
    het["pvalue_adjusted"] = adjust_pvalues(het["pvalue"].to_numpy(dtype=float), correction)
    het["differs"] = (het["pvalue_adjusted"] < alpha).fillna(False).astype(bool)
    return het

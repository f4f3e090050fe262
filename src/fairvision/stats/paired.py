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
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd
from scipy.stats import norm

from fairvision.errors import FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.multiclass import disparity_replicates
from fairvision.stats.resample import DEFAULT_LEVEL, cluster_bootstrap_weights, percentile_ci
from fairvision.stats.results import TestResult


#: relative size below which a bootstrap standard error is float noise (treated as zero)
ZERO_SE_RTOL = 1e-12


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

"""Each group against the rest of the audit (docs/METHODS.md §12.1).

The procedure the zero-shot and the visual question answering probes share: per (group, quantity) cell the rate
of a 0/1 outcome in the group and in everyone else, subject-bootstrap percentile intervals of the rate and of the
difference, a subject-level Rao-Scott test next to the image-level 2 x 2 chi-square test, a multiple-testing
correction that counts the two rows of a two-group attribute once, and the count of flagged differences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import chi2 as chi2_dist

from fairvision.stats.chisquare import chi2_test
from fairvision.stats.clustered import group_vs_rest_design_effect
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.resample import bootstrap_column_sums, percentile_ci


@dataclass(frozen=True)
class GroupVsRest:
    """Each group against the rest of the audit, per quantity, from one per-subject matrix (docs/METHODS.md §12.1).

    Arrays of shape ``(G, Q)`` unless stated: ``sums`` and ``counts`` of each group's cells, ``all_sums`` and
    ``all_counts`` (``(Q,)``) over every row, the group's rate ``estimate`` and the ``rest``'s, the subject-bootstrap
    percentile interval of the rate (``ci_low``, ``ci_high``) and of the rate minus the rest's (``diff_ci_low``,
    ``diff_ci_high``), the subject-level Rao-Scott ``statistic`` and ``design_effect``, and the bootstrap
    replicates of the totals ``all_rep_sums`` and ``all_rep_counts`` (``(n_boot, Q)``).
    """

    sums: np.ndarray
    counts: np.ndarray
    all_sums: np.ndarray
    all_counts: np.ndarray
    estimate: np.ndarray
    rest: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    diff_ci_low: np.ndarray
    diff_ci_high: np.ndarray
    statistic: np.ndarray
    design_effect: np.ndarray
    all_rep_sums: np.ndarray
    all_rep_counts: np.ndarray


def group_vs_rest(mat, n_groups: int, n_quantities: int, *, n_boot: int, seed=0, level: float = 0.95) -> GroupVsRest:
    """Rates of each group and of the rest, subject-bootstrap CIs and the Rao-Scott test (docs/METHODS.md §12.1).

    Parameters
    ----------
    mat : scipy.sparse matrix, shape (n_subjects, 2 G Q + 2 Q)
        Per-subject sums: the 0/1 values of each (group, quantity) cell (G x Q columns, group-major), their
        counts (G x Q), then the values and counts of all rows (Q and Q), as
        :func:`fairvision.stats.clustered.group_vs_rest_design_effect` takes them.
    n_groups, n_quantities : int
        G and Q.
    n_boot : int
        Subject-bootstrap replicates (:func:`fairvision.stats.resample.bootstrap_column_sums`).
    seed : int, Generator or None
    level : float
        Two-sided level of the percentile intervals.

    Returns
    -------
    GroupVsRest
        NaN rates and intervals where a group, the rest or every replicate is empty.
    """
    g, q = int(n_groups), int(n_quantities)
    gq = g * q
    full = np.asarray(mat.sum(axis=0)).ravel()
    reps = bootstrap_column_sums(mat, n_boot, seed)
    est_s, est_n = full[:gq].reshape(g, q), full[gq:2 * gq].reshape(g, q)
    all_s, all_n = full[2 * gq:2 * gq + q], full[2 * gq + q:]
    rep_s, rep_n = reps[:, :gq].reshape(n_boot, g, q), reps[:, gq:2 * gq].reshape(n_boot, g, q)
    rep_as, rep_an = reps[:, 2 * gq:2 * gq + q], reps[:, 2 * gq + q:]
    with np.errstate(invalid="ignore", divide="ignore"):
        est = est_s / est_n
        rest = (all_s - est_s) / (all_n - est_n)
        rep = rep_s / rep_n
        rep_diff = rep - (rep_as[:, None, :] - rep_s) / (rep_an[:, None, :] - rep_n)
    lo, hi = percentile_ci(rep, level)
    dlo, dhi = percentile_ci(rep_diff, level)
    stat_rs, deff = group_vs_rest_design_effect(mat, g, q)
    return GroupVsRest(sums=est_s, counts=est_n, all_sums=all_s, all_counts=all_n, estimate=est, rest=rest,
                       ci_low=lo, ci_high=hi, diff_ci_low=dlo, diff_ci_high=dhi, statistic=stat_rs,
                       design_effect=deff, all_rep_sums=rep_as, all_rep_counts=rep_an)


def group_vs_rest_pvalue(a: float, b: float, c: float, d: float, statistic: float, *, seed=0,
                         too_small: bool = False) -> tuple[float, float]:
    """p-value of one group against the rest (docs/METHODS.md §12.1).

    Parameters
    ----------
    a, b : float
        Sum of the 0/1 values and number of values of the group.
    c, d : float
        The same for the rest.
    statistic : float
        The subject-level Rao-Scott statistic (:attr:`GroupVsRest.statistic`).
    seed : int
        Seed of the exact fallback of :func:`fairvision.stats.chisquare.chi2_test`.
    too_small : bool
        The group has too few subjects to be tested.

    Returns
    -------
    statistic, pvalue : float
        The Rao-Scott statistic and the larger of the image-level 2 x 2 chi-square p-value (exact fallback for
        small counts) and the Rao-Scott one (valid when either assumption holds); the image-level p-value alone
        where the Rao-Scott statistic is not finite. Both NaN (untested) for a group that is too small, an empty
        group or rest, or a quantity that never varies (every value 0 or every value 1: nothing can differ, and
        a p-value of 1 would only weaken the correction of the others).
    """
    if not (b > 0 and d > 0 and not too_small and 0 < a + c < b + d):
        return np.nan, np.nan
    res = chi2_test(np.array([[a, b - a], [c, d - c]]), seed=seed, warn=False)
    pvalue = max(float(res.pvalue), float(chi2_dist.sf(statistic, 1))) if np.isfinite(statistic) else float(res.pvalue)
    return statistic, pvalue


def adjust_group_tests(rates: pd.DataFrame, by: list[str], correction: str) -> pd.DataFrame:
    """Correct the group-vs-rest p-values of ``rates`` once per distinct test (docs/METHODS.md §12.1).

    Within each block of rows sharing ``attribute`` and the columns ``by`` (the quantity, and the tone for VQA),
    an attribute with exactly two non-empty groups A and B has "A vs rest" and "B vs rest" as one and the same
    test (A vs B). The second row then gets ``same_test_as`` = A, the first row's p-value, and is left out of the
    correction family; it takes the first row's adjusted p-value. Returns ``rates`` with ``same_test_as`` (None
    elsewhere) and ``pvalue_adjusted``.
    """
    rates = rates.copy()
    same = np.full(len(rates), None, dtype=object)
    pairs: list[tuple[int, int]] = []  # (repeating row, first row)
    p = rates["pvalue"].to_numpy(float).copy()
    if len(rates):
        nonempty = rates["n_samples"].to_numpy() > 0
        keys = [rates["attribute"].astype(str)] + [rates[c].astype(str) for c in by]
        block = pd.MultiIndex.from_arrays(keys).factorize()[0]
        sizes = np.bincount(block[nonempty], minlength=int(block.max()) + 1)
        first_of: dict[int, int] = {}
        groups = rates["group"].astype(str).to_numpy()
        for i in np.flatnonzero(nonempty & (sizes[block] == 2)):  # two rows per such block
            j = first_of.setdefault(int(block[i]), int(i))
            if j != i and np.isfinite(p[j]) and np.isfinite(p[i]):
                same[i] = groups[j]
                p[i] = p[j]
                pairs.append((int(i), j))
    rates["pvalue"] = p
    rates["same_test_as"] = same
    padj = np.full(len(rates), np.nan)
    family = np.isfinite(p) & pd.isna(same)
    if family.any():
        padj[family] = adjust_pvalues(p[family], correction)
    for i, j in pairs:
        padj[i] = padj[j]
    rates["pvalue_adjusted"] = padj
    return rates


def count_flagged(rates: pd.DataFrame) -> int:
    """Flagged differences, each counted once: a row that repeats another's test (``same_test_as``) is not."""
    if not len(rates):
        return 0
    flagged = rates["flagged"].astype(bool)
    if "same_test_as" in rates.columns:
        flagged &= rates["same_test_as"].isna()
    return int(flagged.sum())


def flag_differences(rates: pd.DataFrame, alpha: float, *, low: str = "diff_ci_low",
                     high: str = "diff_ci_high") -> pd.Series:
    """Rows to flag (docs/METHODS.md §12.1): adjusted p-value below ``alpha``, an interval of the difference
    (columns ``low`` and ``high``) that excludes 0, and a group large enough to judge (not ``too_small``)."""
    excludes = (rates[low] > 0) | (rates[high] < 0)
    return (rates["pvalue_adjusted"] < alpha) & excludes & ~rates["too_small"].astype(bool)

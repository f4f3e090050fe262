"""Tests for outcomes clustered in subjects: several images of one person are not independent.

- :func:`group_vs_rest_design_effect`: each group's rate against the rest's, with a subject-level (Rao-Scott
  type) variance, and its design effect (docs/METHODS.md §12.1).
- :func:`clustered_mcnemar`: McNemar's paired test with images clustered in subjects (Durkalski et al. 2003;
  docs/METHODS.md §12.2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.stats import chi2 as chi2_dist


def group_vs_rest_design_effect(per_subject, n_groups: int, n_quantities: int) -> tuple[np.ndarray, np.ndarray]:
    """Subject-level (Rao-Scott) chi-square of each group against the rest, and its design effect
    (docs/METHODS.md §12.1).

    Parameters
    ----------
    per_subject : scipy.sparse matrix, shape (n_subjects, 2 G Q + 2 Q)
        Per-subject sums: the values of each (group, quantity) cell (G x Q columns, group-major), their
        counts (G x Q), then the values and counts of all images (Q and Q). Values are 0/1 outcomes.
    n_groups, n_quantities : int
        G and Q.

    Returns
    -------
    statistic : numpy.ndarray, shape (G, Q)
        ``d**2 / max(v_subject, v_binomial)``: ``d`` the group's rate minus the rest's, ``v_binomial`` its
        variance under no difference with images independent (``p0 (1 - p0) (1/N_g + 1/N_r)``, so with a
        design effect of 1 this is Pearson's 2 x 2 chi-square), ``v_subject`` the cluster-robust (score-type)
        variance of ``d`` under no difference, summed over subjects with the factor ``C / (C - 1)``.
        Compared with chi-square on 1 df. NaN where the group or the rest is empty or ``p0`` is 0 or 1.
    design_effect : numpy.ndarray, shape (G, Q)
        ``max(1, v_subject / v_binomial)``.
    """
    g, q = int(n_groups), int(n_quantities)
    gq = g * q
    m = sparse.csc_matrix(per_subject)
    n_clusters = m.shape[0]
    full = np.asarray(m.sum(axis=0)).ravel()
    s_g, n_g = full[:gq], full[gq:2 * gq]
    s_all, n_all = full[2 * gq:2 * gq + q], full[2 * gq + q:]
    with np.errstate(invalid="ignore", divide="ignore"):
        p0 = s_all / n_all
        # per-subject residuals under no difference: e (all images of the subject), a (its images in the group)
        e = m[:, 2 * gq:2 * gq + q].toarray() - m[:, 2 * gq + q:].toarray() * p0
        a = (m[:, :gq] - m[:, gq:2 * gq].multiply(np.tile(p0, g)[None, :])).tocoo()
        col = a.col
        saa = np.bincount(col, a.data ** 2, minlength=gq)
        sae = np.bincount(col, a.data * e[a.row, col % q], minlength=gq)
        see = np.tile((e ** 2).sum(axis=0), g)
        n_r = np.tile(n_all, g) - n_g
        w = 1.0 / n_g + 1.0 / n_r
        v_subject = (w ** 2 * saa - 2.0 * w / n_r * sae + see / n_r ** 2) * n_clusters / max(n_clusters - 1, 1)
        p0t = np.tile(p0, g)
        v_binom = p0t * (1.0 - p0t) * w
        d = s_g / n_g - (np.tile(s_all, g) - s_g) / n_r
        stat = d ** 2 / np.maximum(v_subject, v_binom)
        deff = np.maximum(1.0, v_subject / v_binom)
    bad = ~((n_g > 0) & (n_r > 0) & (v_binom > 0))
    stat[bad], deff[bad] = np.nan, np.nan
    return stat.reshape(g, q), deff.reshape(g, q)


def clustered_mcnemar(diff, codes, clusters, n_groups: int) -> pd.DataFrame:
    """McNemar's test with images clustered in subjects (Durkalski et al. 2003), per group (docs/METHODS.md §12.2).

    Parameters
    ----------
    diff : numpy.ndarray
        Per image ``b_i - a_i`` in {-1, 0, 1} (label in the second variant minus in the first).
    codes, clusters : numpy.ndarray of int
        Group and subject of each image.
    n_groups : int

    Returns
    -------
    pandas.DataFrame
        One row per group code (``0 .. n_groups - 1``), columns ``statistic`` and ``pvalue``:
        ``(sum_s d_s)**2 / sum_s d_s**2`` with ``d_s`` the sum of ``diff`` over subject ``s``'s images in the
        group (with one image per subject, McNemar's chi-square ``(c - b)**2 / (b + c)`` without continuity
        correction), against chi-square on 1 df; 0 and 1 where no image changed.
    """
    codes, clusters = np.asarray(codes), np.asarray(clusters)
    key = clusters.astype(np.int64) * int(n_groups) + codes
    pair, inv = np.unique(key, return_inverse=True)
    d_s = np.bincount(inv.ravel(), np.asarray(diff, dtype=float), minlength=pair.size)
    grp = pair % int(n_groups)
    num = np.bincount(grp, d_s, minlength=n_groups) ** 2
    den = np.bincount(grp, d_s ** 2, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = np.where(den > 0, num / den, 0.0)
    return pd.DataFrame({"statistic": stat, "pvalue": np.where(den > 0, chi2_dist.sf(stat, 1), 1.0)},
                        index=pd.RangeIndex(int(n_groups), name="group"))

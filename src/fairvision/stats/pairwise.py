"""All-pairs Mann-Whitney U tests and the FHIBE min-max disparity D.

Implements the FHIBE benchmarking analysis (docs/METHODS.md §6.3): for every
pair of groups a two-sided Mann-Whitney U test, a multiple-comparison
correction (Holm by default; ``correction="bonferroni"`` is the paper's), the disparity
``D = 1 - MED(worst) / MED(best)`` and the best and worst group of each pair.

P-values equal :func:`scipy.stats.mannwhitneyu` with ``alternative="two-sided"``
and ``method="auto"`` (scipy 1.17): the *exact* null distribution when at least
one sample has at most 8 values and the pair has no tied values, otherwise the
normal approximation with tie correction and continuity correction.

Speed: scipy ranks every pair separately. Here every score is sorted once
(``np.unique``) into tie blocks and ``K[a, v]`` counts group a's scores in
block v (a sparse matrix). Then
``U_ab = sum_{x in a} #{y in b: y < x} + 0.5 #{y in b: y = x}
= sum_v K[a, v] (C[b, v] + 0.5 K[b, v])`` with ``C`` the cumulative counts,
one sparse-dense product per block of groups b; the tie term of a pair,
``sum_v t^3 - t`` with ``t = K_a + K_b``, expands into per-group terms plus
``3 sum_v K_a K_b (K_a + K_b)``, two sparse products over the tied blocks.
There is no Python loop over pairs.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb
from typing import Any, Mapping

import numpy as np
import pandas as pd
from scipy import sparse, special

from fairvision.errors import FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.groupwise import group_medians

#: scipy's ``method="auto"`` uses the exact distribution when min(n1, n2) <= this and there are no ties.
EXACT_MAX_N = 8
_CHUNK_ELEMENTS = 4_000_000


def disparity(med_worst, med_best, *, higher_is_better: bool = True):
    """FHIBE min-max disparity ``D = 1 - MED(worst) / MED(best)`` (docs/METHODS.md §6.3).

    Parameters
    ----------
    med_worst, med_best : float or array_like
        Median score of the worst and of the best group.
    higher_is_better : bool
        ``False`` for errors and distances (LPIPS): then the worst group has the
        *larger* median and ``D = 1 - MED(best) / MED(worst)``, so that D stays
        in [0, 1] (the public FHIBE evaluation code gets this wrong for LPIPS).

    Returns
    -------
    float or numpy.ndarray
        D in [0, 1]. Edge cases: a zero denominator with a zero numerator
        (both medians 0) gives 0; a worst median of 0 against a positive best
        gives 1. NaN where a median is NaN or negative (a ratio of medians
        needs non-negative scores).

    Raises
    ------
    FairvisionError
        If the "worst" median is better than the "best" one.
    """
    w = np.asarray(med_worst, dtype=float)
    b = np.asarray(med_best, dtype=float)
    num, den = (w, b) if higher_is_better else (b, w)
    bad_order = np.isfinite(num) & np.isfinite(den) & (num > den)
    if np.any(bad_order):
        raise FairvisionError(
            "disparity: the worst group's median is better than the best group's "
            f"({'higher' if higher_is_better else 'lower'} is better)"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        d = 1.0 - num / den
    d = np.where((den == 0) & (num == 0), 0.0, d)
    d = np.where((num < 0) | (den < 0), np.nan, d)
    return float(d) if d.ndim == 0 else d


@lru_cache(maxsize=256)
def exact_u_counts(m: int, n: int) -> np.ndarray:
    """Null distribution of the Mann-Whitney U statistic without ties, as exact counts.

    The counts are the coefficients of the Gaussian binomial
    ``[m+n choose m]_q = prod_{k=1..m} (1 - q^(n+k)) / (1 - q^k)``.

    Parameters
    ----------
    m, n : int
        The two sample sizes (order does not matter).

    Returns
    -------
    numpy.ndarray, shape (m*n + 1,)
        Number of arrangements giving U = 0 .. m*n (int64, or Python
        integers when the total ``comb(m+n, m)`` exceeds 2**61); they sum to
        ``comb(m+n, m)``.
    """
    m, n = min(m, n), max(m, n)
    dtype = np.int64 if comb(m + n, m) < 2**61 else object
    poly = np.ones(1, dtype=dtype)
    for k in range(1, m + 1):
        d = n + k
        grown = np.zeros(poly.size + d, dtype=dtype)
        grown[: poly.size] += poly
        grown[d:] -= poly
        # divide by (1 - q^k): r[i] = g[i] + r[i-k], a strided cumulative sum
        size = grown.size - k
        padded = np.zeros(-(-grown.size // k) * k, dtype=dtype)
        padded[: grown.size] = grown
        poly = np.cumsum(padded.reshape(-1, k), axis=0).ravel()[:size]
    return poly


def _exact_two_sided(u_max: np.ndarray, n1: np.ndarray, n2: np.ndarray) -> np.ndarray:
    """Two-sided exact p-value ``2 P(U >= u_max)`` (u_max >= n1 n2 / 2), one distribution per shape."""
    p = np.empty(u_max.shape)
    lo, hi = np.minimum(n1, n2), np.maximum(n1, n2)
    shapes, inv = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    inv = np.asarray(inv).ravel()
    for s, (a, b) in enumerate(shapes):
        counts = exact_u_counts(int(a), int(b))
        total = comb(int(a) + int(b), int(a))
        cdf = np.cumsum(counts)  # exact integers
        sel = inv == s
        kc = (int(a) * int(b) - u_max[sel]).astype(np.int64)  # P(U >= u) = P(U <= mn - u) by symmetry
        p[sel] = np.array([int(cdf[k]) / total for k in kc], dtype=float) if cdf.dtype == object else cdf[kc] / total
    return np.clip(2.0 * p, 0.0, 1.0)


def _factorize(groups: Any) -> tuple[np.ndarray, list]:
    values = pd.Series(list(groups) if not isinstance(groups, (pd.Series, np.ndarray)) else groups)
    try:
        codes, uniques = pd.factorize(values, sort=True)
    except TypeError:
        codes, uniques = pd.factorize(values, sort=False)
    return np.asarray(codes), list(uniques)


def u_statistics(x: np.ndarray, codes: np.ndarray, n_groups: int):
    """U statistics and tie terms of every ordered pair of groups.

    Parameters
    ----------
    x : ndarray of float
        Scores, no NaN.
    codes : ndarray of int
        Group code ``0 .. n_groups-1`` of every score; every group non-empty.
    n_groups : int
        Number of groups.

    Returns
    -------
    u : ndarray, shape (G, G)
        ``u[a, b]`` = Mann-Whitney U of group a against group b (scipy's
        statistic for ``mannwhitneyu(x[a], x[b])``).
    tie_term : ndarray, shape (G, G)
        ``sum (t^3 - t)`` over the tie blocks of the pooled sample of a and b.
    counts : ndarray, shape (G,)
        Number of scores per group.
    """
    counts = np.bincount(codes, minlength=n_groups)
    if np.any(counts == 0):
        raise FairvisionError("u_statistics: every group needs at least one score")
    uniq, blk = np.unique(x, return_inverse=True)
    blk = np.asarray(blk).ravel()
    nblk = uniq.size
    # K[a, v]: how many scores of group a fall in tie block v (sorted values)
    K = sparse.csr_matrix((np.ones(x.size), (codes, blk)), shape=(n_groups, nblk))
    K.sum_duplicates()
    u = np.empty((n_groups, n_groups))
    chunk = max(1, min(n_groups, _CHUNK_ELEMENTS // max(1, nblk)))
    order = np.argsort(codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for c0 in range(0, n_groups, chunk):
        c1 = min(n_groups, c0 + chunk)
        idx = order[bounds[c0]:bounds[c1]]
        w = c1 - c0
        kt = np.bincount(blk[idx] * w + (codes[idx] - c0), minlength=nblk * w).reshape(nblk, w).astype(float)
        below = np.cumsum(kt, axis=0)
        below -= 0.5 * kt  # #b < v + 0.5 #b == v, for every block v and group b of the chunk
        u[:, c0:c1] = K @ below  # u[a, b] = sum_v K[a, v] below[v, b]
    if nblk < x.size:
        tied = np.flatnonzero(np.bincount(blk, minlength=nblk) > 1)
        Kt = K[:, tied]
        Kt2 = Kt.multiply(Kt).tocsr()
        self_tie = np.asarray(Kt2.multiply(Kt).sum(axis=1)).ravel() - np.asarray(Kt.sum(axis=1)).ravel()
        cross = (Kt2 @ Kt.T + Kt @ Kt2.T).toarray()  # sum_v K_a K_b (K_a + K_b)
        tie = self_tie[:, None] + self_tie[None, :] + 3.0 * cross
    else:
        tie = np.zeros((n_groups, n_groups))
    return u, tie, counts


def pairwise_mannwhitney(
    scores,
    groups=None,
    correction: str = DEFAULT_CORRECTION,
    *,
    higher_is_better: bool = True,
    min_size: int = 1,
    subjects=None,
    alpha: float = 0.05,
    method: str = "auto",
) -> pd.DataFrame:
    """Two-sided Mann-Whitney U test for every pair of groups, with correction and disparity.

    The FHIBE benchmarking analysis (docs/METHODS.md §6.3; FHIBE paper,
    Methods, "Benchmarking analysis").

    Parameters
    ----------
    scores : array_like of float, or mapping group -> array_like
        One score per sample (or a dict of scores per group, then ``groups``
        is not given). A sample that belongs to several groups (multi-valued
        attributes) is simply listed once per group.
    groups : array_like, optional
        Group label of every score (any hashable; tuples for intersections).
    correction : {"holm", "bonferroni", "bh", "none"}
        Multiple-comparison correction over the pairs tested in this call
        (default :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`,
        Holm). Bonferroni's ``pvalue_adjusted < alpha`` is the paper's
        ``p < 0.05 / m``.
    higher_is_better : bool
        ``False`` for errors and distances: the group with the larger median
        is then the worst.
    min_size : int
        Groups with fewer than ``min_size`` members (distinct ``subjects`` if
        given, else scores) are not tested; they are listed in
        ``result.attrs["too_small"]``. FHIBE uses 10 subjects.
    subjects : array_like, optional
        Subject id of every score, to count subjects for ``min_size``.
    alpha : float
        Significance level applied to ``pvalue_adjusted``.
    method : {"auto", "asymptotic", "exact"}
        As scipy's ``mannwhitneyu``; ``"exact"`` ignores ties, like scipy.

    Returns
    -------
    pandas.DataFrame
        One row per pair (``group_a`` before ``group_b`` in sorted order):
        ``group_a, group_b, n_a, n_b, median_a, median_b, u`` (U of a against
        b, scipy's statistic), ``statistic`` (= ``u``), ``pvalue``,
        ``pvalue_adjusted``, ``significant``, ``method``,
        ``rank_biserial`` (``2 u / (n_a n_b) - 1``: +1 when every a beats every
        b), ``best``, ``worst``, ``median_best``, ``median_worst``,
        ``disparity`` (D for every pair; the paper reports it for significant
        pairs), ``effect_size`` (rank-biserial of best against worst; best and
        worst are ranked by median, so it is negative in the rare pairs where
        the medians and the rank sums disagree).
        ``attrs`` holds ``n_tests``, ``correction``, ``alpha``, ``too_small``.
    """
    if method not in ("auto", "asymptotic", "exact"):
        raise FairvisionError(f"unknown method {method!r}; choose auto, asymptotic or exact")
    if isinstance(scores, Mapping):
        if groups is not None:
            raise FairvisionError("pass either a mapping of scores per group or scores with groups, not both")
        labels, vals = [], []
        for g, v in scores.items():
            v = np.atleast_1d(np.asarray(v, dtype=float))
            vals.append(v)
            labels.extend([g] * v.size)
        x = np.concatenate(vals) if vals else np.zeros(0)
        groups = np.empty(len(labels), dtype=object)
        groups[:] = labels
    else:
        if groups is None:
            raise FairvisionError("pairwise_mannwhitney: groups are required")
        try:
            x = np.asarray(scores, dtype=float).ravel()
        except (TypeError, ValueError):
            raise FairvisionError("pairwise_mannwhitney: scores must be numbers") from None
    codes, labels = _factorize(groups)
    if codes.size != x.size:
        raise FairvisionError(f"pairwise_mannwhitney: {x.size} scores but {codes.size} group labels")
    if np.isnan(x).any():
        raise FairvisionError(f"pairwise_mannwhitney: score {int(np.flatnonzero(np.isnan(x))[0]) + 1} is NaN; drop missing scores first")
    if (codes < 0).any():
        raise FairvisionError(f"pairwise_mannwhitney: group label of score {int(np.flatnonzero(codes < 0)[0]) + 1} is missing")
    n_all = len(labels)
    if subjects is not None:
        subj_codes, _ = _factorize(subjects)
        if subj_codes.size != x.size:
            raise FairvisionError(f"pairwise_mannwhitney: {x.size} scores but {subj_codes.size} subject ids")
        pairs = np.unique(np.stack([codes, subj_codes], 1), axis=0)
        size = np.bincount(pairs[:, 0], minlength=n_all)
    else:
        size = np.bincount(codes, minlength=n_all)
    keep = size >= max(1, int(min_size))
    too_small = [labels[i] for i in np.flatnonzero(~keep)]
    remap = np.cumsum(keep) - 1
    sel = keep[codes]
    x, codes = x[sel], remap[codes[sel]]
    kept = [labels[i] for i in np.flatnonzero(keep)]
    G = len(kept)
    cols = ["group_a", "group_b", "n_a", "n_b", "median_a", "median_b", "u", "statistic", "pvalue",
            "pvalue_adjusted", "significant", "method", "rank_biserial", "best", "worst", "median_best",
            "median_worst", "disparity", "effect_size"]
    if G < 2:
        out = pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
        out.attrs.update(n_tests=0, correction=correction, alpha=alpha, too_small=too_small, higher_is_better=higher_is_better)
        return out

    u_mat, tie_mat, counts = u_statistics(x, codes, G)
    med = group_medians(x, codes, G)
    ia, ib = np.triu_indices(G, 1)
    n1 = counts[ia].astype(np.int64)
    n2 = counts[ib].astype(np.int64)
    u1 = u_mat[ia, ib]
    tie = tie_mat[ia, ib]
    u2 = n1 * n2 - u1
    umax = np.maximum(u1, u2)
    if method == "auto":
        exact = (np.minimum(n1, n2) <= EXACT_MAX_N) & ~(tie > 0)
    else:
        exact = np.full(u1.shape, method == "exact")
    p = np.empty(u1.shape)
    asym = ~exact
    if asym.any():
        a1, a2, t = n1[asym], n2[asym], tie[asym]
        mu = a1 * a2 / 2
        nn = a1 + a2
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.sqrt(a1 * a2 / 12 * ((nn + 1) - t / (nn * (nn - 1))))
            numerator = umax[asym] - mu
            numerator -= 0.5
            z = numerator / s
        p[asym] = np.clip(special.ndtr(-z) * 2, 0.0, 1.0)
    if exact.any():
        p[exact] = _exact_two_sided(np.floor(umax[exact]), n1[exact], n2[exact])  # scipy truncates U
    p_adj = adjust_pvalues(p, correction)

    ma, mb = med[ia], med[ib]
    a_better = ma >= mb if higher_is_better else ma <= mb
    best_i = np.where(a_better, ia, ib)
    worst_i = np.where(a_better, ib, ia)
    med_best, med_worst = med[best_i], med[worst_i]
    d = disparity(med_worst, med_best, higher_is_better=higher_is_better)
    rb = 2.0 * u1 / (n1 * n2) - 1.0
    # effect size oriented from the worst to the best group
    u_best = np.where(best_i == ia, u1, u2)
    eff = 2.0 * u_best / (n1 * n2) - 1.0
    if not higher_is_better:
        eff = -eff
    lab = np.empty(G, dtype=object)
    lab[:] = kept
    out = pd.DataFrame({
        "group_a": lab[ia], "group_b": lab[ib], "n_a": n1, "n_b": n2, "median_a": ma, "median_b": mb,
        "u": u1, "statistic": u1, "pvalue": p, "pvalue_adjusted": p_adj,
        "significant": p_adj < alpha, "method": np.where(exact, "exact", "asymptotic"),
        "rank_biserial": rb, "best": lab[best_i], "worst": lab[worst_i], "median_best": med_best,
        "median_worst": med_worst, "disparity": d, "effect_size": eff,
    })
    out.attrs.update(n_tests=int(len(out)), correction=correction, alpha=alpha, too_small=too_small,
                     higher_is_better=higher_is_better)
    return out


def top_pair(result: pd.DataFrame, *, significant_only: bool = True) -> pd.Series | None:
    """The pair with the largest disparity D (among significant pairs by default).

    Parameters
    ----------
    result : pandas.DataFrame
        Output of :func:`pairwise_mannwhitney`.
    significant_only : bool
        Only consider pairs that are significant after correction.

    Returns
    -------
    pandas.Series or None
        The row of that pair; None when no pair qualifies.
    """
    df = result[result["significant"].astype(bool)] if significant_only else result
    df = df[np.isfinite(df["disparity"].astype(float))]
    if df.empty:
        return None
    return df.loc[df["disparity"].astype(float).idxmax()]


#: columns of a model audit's ``top_disparities`` table, one row per metric and attribute set (FHIBE Extended
#: Data Table 2 layout)
TOP_DISPARITY_COLUMNS = ["metric", "intersection", "k", "disparity", "worst_group", "best_group", "median_worst",
                         "median_best", "n_worst", "n_best", "pvalue", "pvalue_adjusted", "effect_size", "n_tests"]


def significant_pairs(result: pd.DataFrame | None) -> pd.DataFrame | None:
    """The pairs of a :func:`pairwise_mannwhitney` table flagged ``significant`` (None for no table or no rows)."""
    return result[result["significant"].astype(bool)] if result is not None and len(result) else None


def significance_summary(result: pd.DataFrame | None) -> tuple[int, float]:
    """``(n_significant, disparity)`` of one pairwise table (docs/METHODS.md §6.3).

    Parameters
    ----------
    result : pandas.DataFrame or None
        Output of :func:`pairwise_mannwhitney`.

    Returns
    -------
    tuple of (int, float)
        The number of pairs flagged ``significant`` and the largest D among them (0.0 when none or all D are
        missing).
    """
    sig = significant_pairs(result)
    if sig is None or not len(sig):
        return 0, 0.0
    d = sig["disparity"].astype(float)
    return int(len(sig)), float(d.max()) if d.notna().any() else 0.0


def top_disparity_row(metric: str, intersection: str, k: int, result: pd.DataFrame | None) -> dict | None:
    """One row of a top-disparities table (:data:`TOP_DISPARITY_COLUMNS`; docs/METHODS.md §6.3).

    Parameters
    ----------
    metric, intersection : str
        The metric and the attribute set that ``result`` compares groups of.
    k : int
        Number of attributes in the attribute set.
    result : pandas.DataFrame or None
        Output of :func:`pairwise_mannwhitney`.

    Returns
    -------
    dict or None
        The significant pair with the largest D; None when no pair is significant (or none has a D).
    """
    sig = significant_pairs(result)
    if sig is None or not len(sig):
        return None
    d = sig["disparity"].astype(float)
    if not d.notna().any():
        return None
    best = sig.loc[d.idxmax()]
    return {"metric": metric, "intersection": intersection, "k": k, "disparity": float(best["disparity"]),
            "worst_group": best["worst"], "best_group": best["best"],
            "median_worst": best["median_worst"], "median_best": best["median_best"],
            "n_worst": int(best["n_a"] if best["worst"] == best["group_a"] else best["n_b"]),
            "n_best": int(best["n_a"] if best["best"] == best["group_a"] else best["n_b"]),
            "pvalue": float(best["pvalue"]), "pvalue_adjusted": float(best["pvalue_adjusted"]),
            "effect_size": float(best["effect_size"]), "n_tests": len(result)}

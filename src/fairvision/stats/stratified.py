"""Stratified and paired comparisons: van Elteren, Cochran-Mantel-Haenszel, McNemar.

Confounder control (docs/METHODS.md §7.3; FHIBE: "no statistically
significant differences across skin tones within a subset of images with a
high number of visible keypoints") compares two groups *within* strata of a
suspected confounder and pools the evidence across strata:

* :func:`van_elteren` - the stratified Wilcoxon-Mann-Whitney test (van
  Elteren 1960) for continuous or ordinal scores.
* :func:`cochran_mantel_haenszel` - the CMH test for binary outcomes in a
  2 x 2 x K table, with the Mantel-Haenszel common odds ratio and its
  Robins-Breslow-Greenland confidence interval.
* :func:`mcnemar` - the paired test for two binary outcomes of the same
  samples (Thong et al. section 4.3: manipulated vs reconstructed images;
  docs/METHODS.md §7.4).

All return :class:`~fairvision.stats.results.TestResult` objects with
``statistic`` and ``pvalue`` (and ``df`` for the chi-square statistics) like
scipy.stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.errors import FairvisionError
from fairvision.stats.results import TestResult


@dataclass
class VanElterenResult(TestResult):
    """Stratified Wilcoxon-Mann-Whitney test (a z test: no degrees of freedom).

    Attributes
    ----------
    statistic : float
        Standardised statistic ``Z`` (positive: group ``x`` tends to be larger).
    pvalue : float
        Two-sided normal p-value (or one-sided per ``alternative``).
    auc : float
        Weighted mean over strata of ``P(x > y) + P(x = y)/2``, with the van
        Elteren weights ``n1 n2 / (N + 1)``; 0.5 means no difference.
    n_strata : int
        Strata where both groups were present (the others carry no information).
    alternative : str
        ``"two-sided"``, ``"greater"`` or ``"less"``.
    strata : DataFrame
        Per stratum: ``n_x``, ``n_y``, ``W`` (rank sum of ``x``), ``expected``,
        ``variance``, ``auc`` and ``used``.
    """

    auc: float
    n_strata: int
    alternative: str = "two-sided"
    strata: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    def to_frame(self) -> pd.DataFrame:
        """The per-stratum table (:attr:`strata`)."""
        return self.strata


def _strata_codes(strata, n: int, name: str) -> tuple[np.ndarray, list]:
    s = pd.Series(np.asarray(strata, dtype=object) if not isinstance(strata, pd.Series) else strata.to_numpy(dtype=object))
    if len(s) != n:
        raise FairvisionError(f"{name}: strata has {len(s)} entries for {n} observations")
    if s.isna().any():
        raise FairvisionError(f"{name}: strata has a missing value at position {int(np.flatnonzero(s.isna().to_numpy())[0]) + 1}")
    codes, uniques = pd.factorize(s, sort=True)
    return codes, list(uniques)


def _pvalue_from_z(z: float, alternative: str) -> float:
    if not np.isfinite(z):
        return float("nan")
    if alternative == "two-sided":
        return float(min(1.0, 2.0 * _st.norm.sf(abs(z))))
    if alternative == "greater":
        return float(_st.norm.sf(z))
    if alternative == "less":
        return float(_st.norm.cdf(z))
    raise FairvisionError(f"unknown alternative {alternative!r}; use two-sided, greater or less")


def van_elteren(x, y, x_strata, y_strata, *, alternative: str = "two-sided") -> VanElterenResult:
    """Van Elteren's stratified Wilcoxon rank-sum test of ``x`` against ``y``.

    Within stratum ``k`` (sizes ``n1, n2``, ``N = n1 + n2``) ``W_k`` is the sum
    of the mid-ranks of ``x`` among the pooled stratum, with ``E W_k = n1 (N +
    1) / 2`` and tie-corrected variance ``n1 n2 / 12 * (N + 1 - sum(t^3 - t) /
    (N (N - 1)))``. The statistic is ``T = sum_k W_k / (N_k + 1)``, and
    ``Z = (T - E T) / sqrt(Var T)`` is referred to the standard normal
    (van Elteren 1960; Lehmann, *Nonparametrics*, 1975, section 3.3). With a
    single stratum this is the large-sample Mann-Whitney test without
    continuity correction.

    Parameters
    ----------
    x, y : array_like
        Scores of the two groups (NaN not allowed).
    x_strata, y_strata : array_like
        Stratum label of every score.
    alternative : {"two-sided", "greater", "less"}
        ``greater``: ``x`` tends to be larger than ``y``.

    Returns
    -------
    VanElterenResult
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if np.isnan(x).any() or np.isnan(y).any():
        raise FairvisionError("van_elteren: scores contain NaN; drop missing scores first")
    values = np.concatenate([x, y])
    is_x = np.concatenate([np.ones(x.size, bool), np.zeros(y.size, bool)])
    labels = np.concatenate([np.asarray(x_strata, dtype=object).ravel(), np.asarray(y_strata, dtype=object).ravel()])
    if labels.size != values.size:
        raise FairvisionError("van_elteren: each score needs exactly one stratum label")
    codes, uniq = _strata_codes(labels, values.size, "van_elteren")
    k = len(uniq)
    # mid-ranks within strata, all strata at once: sort by (stratum, value)
    order = np.lexsort((values, codes))
    sv, sc = values[order], codes[order]
    new_run = np.ones(values.size, bool)
    new_run[1:] = (sv[1:] != sv[:-1]) | (sc[1:] != sc[:-1])
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_len = np.diff(np.append(run_start, values.size))
    stratum_start = np.searchsorted(sc, np.arange(k))
    pos = np.arange(values.size) - stratum_start[sc]  # 0-based position within stratum
    mid = (pos[run_start] + (run_len - 1) / 2.0 + 1.0)[run_id]
    ranks = np.empty(values.size)
    ranks[order] = mid
    n1 = np.bincount(codes[is_x], minlength=k).astype(float)
    n2 = np.bincount(codes[~is_x], minlength=k).astype(float)
    big_n = n1 + n2
    w_sum = np.bincount(codes[is_x], weights=ranks[is_x], minlength=k)
    ties = np.bincount(sc[run_start], weights=run_len.astype(float) ** 3 - run_len, minlength=k)
    used = (n1 > 0) & (n2 > 0)
    expected = n1 * (big_n + 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = np.where(used, n1 * n2 / 12.0 * (big_n + 1 - ties / (big_n * (big_n - 1))), 0.0)
        auc = np.where(used, (w_sum - n1 * (n1 + 1) / 2.0) / (n1 * n2), np.nan)
    weight = np.where(used, 1.0 / (big_n + 1), 0.0)
    t = float(np.sum(weight * np.where(used, w_sum - expected, 0.0)))
    var_t = float(np.sum(weight ** 2 * variance))
    z = t / np.sqrt(var_t) if var_t > 0 else float("nan")
    aw = np.where(used, n1 * n2 / (big_n + 1), 0.0)
    pooled_auc = float(np.sum(aw * np.nan_to_num(auc)) / aw.sum()) if aw.sum() > 0 else float("nan")
    table = pd.DataFrame(
        {"n_x": n1.astype(int), "n_y": n2.astype(int), "W": w_sum, "expected": expected,
         "variance": variance, "auc": auc, "used": used},
        index=pd.Index(uniq, name="stratum"),
    )
    return VanElterenResult(statistic=float(z), pvalue=_pvalue_from_z(z, alternative), auc=pooled_auc,
                            n_strata=int(used.sum()), alternative=alternative, strata=table)


@dataclass
class CMHResult(TestResult):
    """Cochran-Mantel-Haenszel test for a 2 x 2 x K table.

    Attributes
    ----------
    statistic : float
        CMH chi-square statistic.
    pvalue : float
    df : int
        Degrees of freedom of the chi-square reference (always 1).
    odds_ratio : float
        Mantel-Haenszel common odds ratio ``sum(a d / n) / sum(b c / n)`` (the
        estimate).
    ci_low, ci_high : float
        Robins-Breslow-Greenland confidence interval of the odds ratio.
    level : float
        Two-sided level of that interval.
    n_strata : int
        Strata with at least two observations (the others carry no information).
    continuity : bool
        Whether the continuity correction was applied.
    strata : DataFrame
        ``a, b, c, d`` per stratum (rows: group x / group y; columns: outcome
        true / false) and the per-stratum odds ratio.
    """

    df: int
    odds_ratio: float
    ci_low: float
    ci_high: float
    level: float
    n_strata: int
    continuity: bool = True
    strata: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    def to_frame(self) -> pd.DataFrame:
        """The per-stratum table (:attr:`strata`)."""
        return self.strata


def cochran_mantel_haenszel(tables, *, continuity: bool = True, level: float = 0.95) -> CMHResult:
    """CMH test of conditional independence and the common odds ratio.

    For stratum ``k`` with table ``[[a, b], [c, d]]`` (rows: group x, group y;
    columns: outcome present, absent) and ``n = a + b + c + d``:
    ``E a = (a + b)(a + c) / n`` and ``Var a = (a + b)(c + d)(a + c)(b + d) /
    (n^2 (n - 1))``; the statistic is ``(|sum(a - E a)| - 0.5)^2 / sum Var a``
    (the ``- 0.5`` only with ``continuity``), chi-square with 1 df (Mantel and
    Haenszel 1959; Agresti, *Categorical Data Analysis*, 3rd ed., 6.4.2). The
    common odds ratio is ``sum(a d / n) / sum(b c / n)``; its CI uses the
    Robins, Breslow and Greenland (1986) variance of its logarithm.

    Parameters
    ----------
    tables : array_like, shape (K, 2, 2) or (2, 2)
        Counts per stratum.
    continuity : bool
        Continuity correction (default true, as in R's ``mantelhaen.test``).
    level : float
        Two-sided confidence level of the odds-ratio interval.

    Returns
    -------
    CMHResult
        ``statistic``, ``pvalue``, ``df`` (1), ``odds_ratio`` with ``ci_low``,
        ``ci_high`` and ``level``, and the per-stratum table.
    """
    t = np.asarray(tables, dtype=float)
    if t.ndim == 2:
        t = t[None]
    if t.ndim != 3 or t.shape[1:] != (2, 2):
        raise FairvisionError(f"cochran_mantel_haenszel: expected tables of shape (K, 2, 2), got {t.shape}")
    if (t < 0).any() or np.isnan(t).any():
        raise FairvisionError("cochran_mantel_haenszel: counts must be non-negative numbers")
    a, b, c, d = t[:, 0, 0], t[:, 0, 1], t[:, 1, 0], t[:, 1, 1]
    n = a + b + c + d
    use = n > 1
    a, b, c, d, n = a[use], b[use], c[use], d[use], n[use]
    used_mask = use
    ea = (a + b) * (a + c) / n
    va = (a + b) * (c + d) * (a + c) * (b + d) / (n ** 2 * (n - 1))
    diff = abs(float(np.sum(a - ea)))
    if continuity:
        diff = max(0.0, diff - 0.5)
    vsum = float(np.sum(va))
    stat = diff ** 2 / vsum if vsum > 0 else float("nan")
    p = float(_st.chi2.sf(stat, 1)) if np.isfinite(stat) else float("nan")
    r, s = a * d / n, b * c / n
    rs, ss = float(r.sum()), float(s.sum())
    orr = rs / ss if ss > 0 else (float("inf") if rs > 0 else float("nan"))
    if rs > 0 and ss > 0:
        pp, qq = (a + d) / n, (b + c) / n
        var_log = (np.sum(pp * r) / (2 * rs ** 2) + np.sum(pp * s + qq * r) / (2 * rs * ss) + np.sum(qq * s) / (2 * ss ** 2))
        zc = _st.norm.ppf(0.5 + level / 2)
        lo, hi = float(np.exp(np.log(orr) - zc * np.sqrt(var_log))), float(np.exp(np.log(orr) + zc * np.sqrt(var_log)))
    else:
        lo, hi = float("nan"), float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        per = pd.DataFrame({"a": t[:, 0, 0], "b": t[:, 0, 1], "c": t[:, 1, 0], "d": t[:, 1, 1],
                            "odds_ratio": (t[:, 0, 0] * t[:, 1, 1]) / (t[:, 0, 1] * t[:, 1, 0]), "used": used_mask})
    return CMHResult(statistic=float(stat), pvalue=p, df=1, odds_ratio=float(orr), ci_low=lo, ci_high=hi, level=level,
                     n_strata=int(use.sum()), continuity=continuity, strata=per)


def cmh_from_samples(outcome, group, strata, *, x, y, continuity: bool = True, level: float = 0.95) -> CMHResult:
    """CMH test comparing groups ``x`` and ``y`` on a binary ``outcome`` within ``strata``.

    Builds the 2 x 2 x K table from per-sample arrays (rows of other groups
    are ignored) and calls :func:`cochran_mantel_haenszel`.

    Parameters
    ----------
    outcome : array_like
        Binary outcome per sample (0/1 or booleans, no missing values).
    group : array_like
        Group label per sample.
    strata : array_like
        Stratum label per sample (no missing values).
    x, y : hashable
        The two groups compared (``x`` is the first row of every 2 x 2 table).
    continuity : bool
        Continuity correction of the CMH statistic.
    level : float
        Two-sided confidence level of the odds-ratio interval.

    Returns
    -------
    CMHResult
        As :func:`cochran_mantel_haenszel`; the per-stratum table is indexed
        by stratum label.
    """
    o = np.asarray(outcome)
    g = np.asarray(group, dtype=object)
    keep = (g == x) | (g == y)
    o, g = o[keep], g[keep]
    codes, uniq = _strata_codes(np.asarray(strata, dtype=object)[keep], o.size, "cmh")
    try:
        ob = o.astype(bool) if o.dtype == bool else np.asarray(o, dtype=float)
    except (TypeError, ValueError):
        raise FairvisionError("cmh: the outcome must be binary (0/1 or true/false)") from None
    if ob.dtype != bool:
        if np.isnan(ob).any() or not np.isin(ob, (0.0, 1.0)).all():
            raise FairvisionError("cmh: the outcome must be binary (0/1 or true/false) without missing values")
        ob = ob.astype(bool)
    is_x = g == x
    k = len(uniq)
    tab = np.zeros((k, 2, 2))
    tab[:, 0, 0] = np.bincount(codes[is_x & ob], minlength=k)
    tab[:, 0, 1] = np.bincount(codes[is_x & ~ob], minlength=k)
    tab[:, 1, 0] = np.bincount(codes[~is_x & ob], minlength=k)
    tab[:, 1, 1] = np.bincount(codes[~is_x & ~ob], minlength=k)
    res = cochran_mantel_haenszel(tab, continuity=continuity, level=level)
    res.strata.index = pd.Index(uniq, name="stratum")
    return res


@dataclass
class McNemarResult(TestResult):
    """McNemar's test for paired binary outcomes.

    Attributes
    ----------
    statistic : float
        Chi-square statistic (chi-square method) or ``min(b, c)`` (exact method).
    pvalue : float
        Two-sided p-value.
    df : int or None
        1 for the chi-square method; None for the exact binomial method.
    b, c : int
        Discordant counts: ``b`` = first true and second false, ``c`` = first
        false and second true.
    method : str
        ``"exact"`` (binomial) or ``"chi2"``.
    continuity : bool
        Whether the chi-square statistic was continuity-corrected.
    """

    df: int | None
    b: int
    c: int
    method: str
    continuity: bool = False


def mcnemar(first, second=None, *, exact: bool | None = None, continuity: bool = True, exact_below: int = 25) -> McNemarResult:
    """McNemar's test of marginal homogeneity for paired binary outcomes.

    Only the discordant pairs matter: ``b`` pairs with ``first`` true and
    ``second`` false, ``c`` the reverse. Exact version: under H0 ``b ~
    Binomial(b + c, 1/2)`` and the two-sided p-value is ``min(1, 2 P(B <=
    min(b, c)))``. Chi-square version: ``(|b - c| - 1)^2 / (b + c)`` with
    Edwards' continuity correction (without it ``(b - c)^2 / (b + c)``), 1 df
    (McNemar 1947; Agresti, *Categorical Data Analysis*, 3rd ed., 11.1).

    Parameters
    ----------
    first, second : array_like of bool
        Paired outcomes (e.g. "prediction correct" on the reconstructed and
        on the manipulated image). Alternatively pass a 2 x 2 table as
        ``first`` and leave ``second`` out: ``[[both, b], [c, neither]]``.
    exact : bool, optional
        Force the exact or the chi-square version; default: exact when
        ``b + c < exact_below`` (25).
    continuity : bool
        Continuity correction of the chi-square version.
    exact_below : int
        Discordant-pair count below which the exact version is the default.

    Returns
    -------
    McNemarResult
        ``statistic``, ``pvalue``, ``df`` (1, or None for the exact version),
        the discordant counts and the method used.
    """
    if second is None:
        tab = np.asarray(first, dtype=float)
        if tab.shape != (2, 2) or (tab < 0).any():
            raise FairvisionError("mcnemar: pass two paired boolean arrays or one 2 x 2 table of counts")
        b, c = int(tab[0, 1]), int(tab[1, 0])
    else:
        f = np.asarray(first)
        s = np.asarray(second)
        if f.shape != s.shape:
            raise FairvisionError(f"mcnemar: paired outcomes differ in length ({f.size} vs {s.size})")
        f, s = f.astype(bool), s.astype(bool)
        b, c = int(np.count_nonzero(f & ~s)), int(np.count_nonzero(~f & s))
    nd = b + c
    if exact is None:
        exact = nd < exact_below
    if nd == 0:
        return McNemarResult(statistic=0.0, pvalue=1.0, df=None if exact else 1, b=b, c=c,
                             method="exact" if exact else "chi2", continuity=continuity and not exact)
    if exact:
        p = float(min(1.0, 2.0 * _st.binom.cdf(min(b, c), nd, 0.5)))
        return McNemarResult(statistic=float(min(b, c)), pvalue=p, df=None, b=b, c=c, method="exact", continuity=False)
    num = abs(b - c) - (1.0 if continuity else 0.0)
    stat = max(0.0, num) ** 2 / nd
    return McNemarResult(statistic=float(stat), pvalue=float(_st.chi2.sf(stat, 1)), df=1, b=b, c=c, method="chi2",
                         continuity=continuity)

"""Distribution parity of top-K retrieval results (docs/METHODS.md §8.1, §8.2).

Khaziev et al., "Recommendation or Discrimination?: Quantifying Distribution
Parity in Information Retrieval Systems".

A retrieval system has *distribution parity* for a protected attribute Z when
the distribution of Z among the top-K results does not depend on the value of Z
of the query. This module builds the paper's contingency table (one row per
query value z^q counting the values of its results, plus a ``catalog`` row
counting the values in the catalog) and tests it:

- the **omnibus** chi-square test of independence on the whole table, on the
  top-K set (the paper's *weak* condition, eq. 2 and 3; docs/METHODS.md §8.1);
- the same test **per rank** (the *strong* condition, eq. 1), with a
  multiple-comparison correction over ranks;
- a **contrast** test per value (the paper's Table 2: a 2 x 2 table of results
  equal / not equal to z^q for queries with z^q against the catalog), its risk
  ratio RR (eq. 5) with a Katz-log confidence interval, the normalised risk
  ratio nRR (eq. 6) and the 80% rule (fair when nRR >= 0.8;
  docs/METHODS.md §8.2).

The chi-square tests are those of :mod:`fairvision.stats.chisquare`
(docs/METHODS.md §4.1). Choices the paper leaves open, made explicit here:

- **Continuity correction** (Yates) of the 2 x 2 contrast tables is off by
  default (``continuity=False``): the paper's statistic is the Pearson
  chi-square with 1 degree of freedom, and the power analysis of
  :mod:`fairvision.stats.power` uses the same statistic. Note that
  :func:`scipy.stats.chi2_contingency` applies Yates' correction to 2 x 2
  tables unless told ``correction=False``. Pass ``continuity=True`` for the
  more conservative corrected statistic.
- **Small expected counts.** The chi-square approximation needs expected
  counts that are not small. Following Cochran's rule (no expected count below
  1 and at most 20% below 5; for a 2 x 2 table none below 5) the test then
  warns and, with ``exact="auto"`` (default), reports an exact p-value
  instead: Fisher's exact test for a 2 x 2 contrast table, and for the omnibus
  and per-rank tables a Monte Carlo test conditional on the table's margins.
  The paper's dresses catalog with 2 ST1 queries is exactly this case.
- **Multiple comparisons.** The paper proposes no correction. The contrast and
  per-rank p-values are adjusted with
  :data:`fairvision.stats.corrections.DEFAULT_CORRECTION` (Holm's step-down
  method: it controls the family-wise error rate like Bonferroni and is
  uniformly more powerful); ``correction`` accepts ``"none"``,
  ``"bonferroni"``, ``"holm"`` and ``"bh"`` (docs/METHODS.md §4.3).
- **Significance level**: ``alpha=0.01``, the paper's level.
- **Options** of how the tests are computed (continuity correction, exact
  fallback, Monte Carlo draws, the smallest judged value) travel together as a
  :class:`ParityOptions`.
- **Risk ratio CI** at the edges follows the epitools convention that
  :func:`scipy.stats.contingency.relative_risk` uses, except that when no
  result of a query value carries that value (RR = 0) the interval is
  reported as [0, inf], as in the paper's Table 7, rather than [0, NaN].
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import special as _special

from fairvision.errors import FairvisionError, ParameterError
from fairvision.stats.chisquare import (
    DEFAULT_MC_SAMPLES,
    ChiSquareResult,
    SmallExpectedCountWarning,
    chi2_test,
)
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues

CATALOG_ROW = "catalog"
DEFAULT_ALPHA = 0.01
FAIR_NRR = 0.8

#: columns of a per-rank table (one chi-square test per rank)
_RANK_FIELDS = ("statistic", "df", "pvalue", "p_asymptotic", "method", "min_expected", "small_expected")


# ---------------------------------------------------------------------------
# risk ratio
# ---------------------------------------------------------------------------


def risk_ratio(a, n1, c, n2, *, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Risk ratio (a/n1) / (c/n2) with the Katz log confidence interval, vectorised.

    See docs/METHODS.md §8.2.

    Parameters
    ----------
    a, n1 : array_like
        Results equal to z^q and all results, for queries with z^q.
    c, n2 : array_like
        Catalog items equal to z^q and the catalog size.
    level : float
        Two-sided level of the interval.

    Returns
    -------
    rr, ci_low, ci_high : numpy.ndarray
        ``RR exp(-+ z se)`` with ``se = sqrt(1/a - 1/n1 + 1/c - 1/n2)``
        (Katz et al. 1978, the method of
        :func:`scipy.stats.contingency.relative_risk`). Edge cases: a = 0 ->
        RR 0, CI [0, inf]; c = 0 -> RR inf, CI [NaN, inf]; both 0 or an empty
        group -> NaN.
    """
    a, n1, c, n2 = (np.asarray(x, dtype=float) for x in (a, n1, c, n2))
    z = _special.ndtri(1 - (1 - level) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        rr = (a / n1) / (c / n2)
        se = np.sqrt(1 / a - 1 / n1 + 1 / c - 1 / n2)
        low = rr * np.exp(-z * se)
        high = rr * np.exp(z * se)
    empty = (n1 == 0) | (n2 == 0) | ((a == 0) & (c == 0))
    a0 = (a == 0) & ~empty
    c0 = (c == 0) & ~empty & ~a0
    rr = np.where(empty, np.nan, np.where(a0, 0.0, np.where(c0, np.inf, rr)))
    low = np.where(empty, np.nan, np.where(a0, 0.0, np.where(c0, np.nan, low)))
    high = np.where(empty, np.nan, np.where(a0 | c0, np.inf, high))
    return rr, low, high


def normalized_rr(rr) -> np.ndarray:
    """Normalised risk ratio nRR = RR if RR <= 1 else 1/RR (paper eq. 6; docs/METHODS.md §8.2).

    Parameters
    ----------
    rr : array_like
        Risk ratios.

    Returns
    -------
    numpy.ndarray
        nRR in [0, 1]; NaN stays NaN.
    """
    rr = np.asarray(rr, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(rr <= 1, rr, 1.0 / rr)


# ---------------------------------------------------------------------------
# the contingency table
# ---------------------------------------------------------------------------


def _categories(values: Sequence, given: Sequence | None) -> list:
    if given is not None:
        return list(given)
    vals = pd.Series(values)
    if isinstance(vals.dtype, pd.CategoricalDtype):
        return list(vals.cat.categories)
    uniq = pd.unique(vals.dropna())
    try:
        return sorted(uniq)
    except TypeError:
        return list(uniq)


def contingency(query_values, result_values, catalog_values, categories: Sequence | None = None) -> pd.DataFrame:
    """The paper's contingency table (Table 1; docs/METHODS.md §8.1).

    Parameters
    ----------
    query_values : array_like
        For every (query, result) pair, the protected value of the query.
    result_values : array_like
        For every pair, the protected value of the retrieved item.
    catalog_values : array_like
        The protected value of every catalog item.
    categories : sequence, optional
        The values in order (default: categorical order, else sorted).

    Returns
    -------
    pandas.DataFrame
        Rows: one per value z^q (name ``query``), then ``catalog``; columns:
        the values (name ``result``); integer counts. A value no query has
        keeps an all-zero row.
    """
    if categories is not None:
        cats = list(categories)
    elif isinstance(pd.Series(catalog_values).dtype, pd.CategoricalDtype):
        cats = list(pd.Series(catalog_values).cat.categories)
    else:
        cats = _categories(pd.concat([pd.Series(catalog_values, dtype=object), pd.Series(result_values, dtype=object),
                                      pd.Series(query_values, dtype=object)]), None)
    v = len(cats)
    code = {c: i for i, c in enumerate(cats)}
    qc = pd.Series(query_values).astype(object).map(code).to_numpy()
    rc = pd.Series(result_values).astype(object).map(code).to_numpy()
    cc = pd.Series(catalog_values).astype(object).map(code).to_numpy()
    for name, arr, src in (("query", qc, query_values), ("result", rc, result_values), ("catalog", cc, catalog_values)):
        bad = pd.isna(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FairvisionError(f"{name} value {list(pd.Series(src))[i]!r} (position {i + 1}) is not one of {cats}")
    qc, rc, cc = qc.astype(np.int64), rc.astype(np.int64), cc.astype(np.int64)
    body = np.bincount(qc * v + rc, minlength=v * v).reshape(v, v)
    cat_row = np.bincount(cc, minlength=v)
    df = pd.DataFrame(np.vstack([body, cat_row[None, :]]), index=[*cats, CATALOG_ROW], columns=list(cats))
    df.index.name = "query"
    df.columns.name = "result"
    return df


# ---------------------------------------------------------------------------
# contrasts
# ---------------------------------------------------------------------------


def contrast_tests(
    data: pd.DataFrame,
    *,
    n_queries: pd.Series | None = None,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    continuity: bool = False,
    exact: str = "auto",
    level: float = 0.95,
    min_queries: int = 10,
) -> pd.DataFrame:
    """Contrast test, risk ratio and 80% rule for every query value (paper Table 2, eq. 4-6).

    See docs/METHODS.md §8.2.

    Parameters
    ----------
    data : pandas.DataFrame
        The contingency table of :func:`contingency` (values x values plus
        ``catalog``).
    n_queries : pandas.Series, optional
        Number of queries per value (for the report and the ``too_small``
        flag); default NaN (not known from the table alone).
    alpha : float
        Significance level of ``reject``.
    correction : {"none", "bonferroni", "holm", "bh"}
        Multiple-comparison correction over the values
        (:func:`fairvision.stats.corrections.adjust_pvalues`).
    continuity : bool
        Yates' continuity correction of the 2 x 2 tables (default off).
    exact : {"auto", "never", "always"}
        Fisher's exact test when expected counts are small
        (:func:`fairvision.stats.chisquare.chi2_test`).
    level : float
        Two-sided level of the risk-ratio interval.
    min_queries : int
        Values with fewer queries are flagged ``too_small``.

    Returns
    -------
    pandas.DataFrame
        Indexed by value: ``n_queries``, ``n_results``, ``same`` (a: results
        equal to z^q), ``share`` (a / n_results), ``catalog_share``,
        ``statistic``, ``df``, ``pvalue`` (exact when ``method`` is
        ``fisher``), ``p_asymptotic``, ``method``, ``min_expected``,
        ``pvalue_adjusted``, ``reject`` (pvalue_adjusted < alpha), ``rr``,
        ``rr_ci_low``, ``rr_ci_high``, ``nrr``, ``fair_80`` (nRR >= 0.8;
        missing when RR is undefined, e.g. no queries), ``too_small``.
    """
    values = [c for c in data.columns]
    body = data.loc[values, values].to_numpy(dtype=np.int64)
    cat = data.loc[CATALOG_ROW, values].to_numpy(dtype=np.int64)
    a = np.diag(body)
    n1 = body.sum(axis=1)
    c = cat
    n2 = int(cat.sum())
    rows = []
    for i, v in enumerate(values):
        if n1[i] == 0:
            rows.append(dict(statistic=np.nan, df=np.nan, pvalue=np.nan, p_asymptotic=np.nan, method="no queries",
                             min_expected=np.nan))
            continue
        tab = np.array([[a[i], n1[i] - a[i]], [c[i], n2 - c[i]]])
        res = chi2_test(tab, continuity=continuity, exact=exact, label=f"contrast {v!r}")
        rows.append(dict(statistic=res.statistic, df=res.df, pvalue=res.pvalue, p_asymptotic=res.p_asymptotic,
                         method=res.method, min_expected=res.min_expected))
    out = pd.DataFrame(rows, index=pd.Index(values, name="value"))
    rr, lo, hi = risk_ratio(a, n1, c, n2, level=level)
    nq = (pd.Series(n_queries).reindex(values).to_numpy(dtype=float) if n_queries is not None else np.full(len(values), np.nan))
    out.insert(0, "n_queries", nq)
    out.insert(1, "n_results", n1)
    out.insert(2, "same", a)
    with np.errstate(invalid="ignore", divide="ignore"):
        out.insert(3, "share", np.where(n1 > 0, a / np.maximum(n1, 1), np.nan))
        out.insert(4, "catalog_share", c / n2 if n2 else np.nan)
    out["pvalue_adjusted"] = adjust_pvalues(out["pvalue"].to_numpy(dtype=float), correction)
    out["reject"] = out["pvalue_adjusted"].to_numpy(dtype=float) < alpha
    out["rr"] = rr
    out["rr_ci_low"] = lo
    out["rr_ci_high"] = hi
    out["nrr"] = normalized_rr(rr)
    nrr = out["nrr"].to_numpy(dtype=float)
    out["fair_80"] = pd.array([None if np.isnan(x) else bool(x >= FAIR_NRR) for x in nrr], dtype="boolean")  # NA: not judged
    out["too_small"] = (np.nan_to_num(nq, nan=np.inf) < min_queries) | (out["min_expected"].to_numpy(dtype=float) < 5) | (n1 == 0)
    return out


# ---------------------------------------------------------------------------
# the whole test
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ParityOptions:
    """How the parity tests are computed, and which values are too small to judge (docs/METHODS.md §8.1, §8.2).

    Parameters
    ----------
    continuity : bool
        Yates' continuity correction of the 2 x 2 contrast tables (default off, as the paper).
    exact : {"auto", "never", "always"}
        Exact / Monte Carlo p-values when expected counts are small
        (:func:`fairvision.stats.chisquare.chi2_test`).
    mc_samples : int
        Tables drawn for a Monte Carlo p-value.
    min_queries : int
        Values with fewer queries are flagged ``too_small``.
    """

    continuity: bool = False
    exact: str = "auto"
    mc_samples: int = DEFAULT_MC_SAMPLES
    min_queries: int = 10


@dataclass
class ParityResult:
    """Distribution parity test of top-K results (docs/METHODS.md §8.1, §8.2).

    Test-like: ``statistic``, ``pvalue`` and ``df`` are those of the omnibus
    test.

    Attributes
    ----------
    table : pandas.DataFrame
        Contingency table: rows per query value plus ``catalog``; columns per
        result value (top-K set, the weak condition).
    omnibus : ChiSquareResult
        Chi-square test of the whole table (``statistic``, ``df``, ``pvalue``).
    contrasts : pandas.DataFrame
        One row per value (see :func:`contrast_tests`).
    per_rank : pandas.DataFrame
        Strong condition: the omnibus test for each rank 1..K (``statistic``,
        ``df``, ``pvalue``, ``p_asymptotic``, ``method``, ``min_expected``,
        ``small_expected``, ``pvalue_adjusted``, ``reject``).
    rank_tables : dict
        The contingency table of every rank.
    k : int
        The top-K cut-off.
    alpha, correction, continuity
        The options of the test.
    n_queries, n_catalog : int
        Queries and catalog items that entered the test.
    warnings : list of str
        Small-expected-count warnings raised by the tests.
    dropped : dict
        Counts of pairs / catalog items left out (missing attribute).
    """

    table: pd.DataFrame
    omnibus: ChiSquareResult
    contrasts: pd.DataFrame
    per_rank: pd.DataFrame
    rank_tables: dict
    k: int
    alpha: float
    correction: str
    continuity: bool
    n_queries: int
    n_catalog: int
    warnings: list[str] = field(default_factory=list)
    dropped: dict = field(default_factory=dict)

    @property
    def statistic(self) -> float:
        """X^2 of the omnibus test."""
        return self.omnibus.statistic

    @property
    def pvalue(self) -> float:
        """p-value of the omnibus test."""
        return self.omnibus.pvalue

    @property
    def df(self) -> int:
        """Degrees of freedom of the omnibus test."""
        return self.omnibus.df

    @property
    def contingency(self) -> pd.DataFrame:
        """The contingency table (alias of :attr:`table`)."""
        return self.table

    @property
    def fair(self) -> bool:
        """No significant omnibus bias and every judged value within the 80% rule."""
        return bool(self.omnibus.pvalue >= self.alpha and self.contrasts["fair_80"].fillna(True).all())

    def to_frame(self) -> pd.DataFrame:
        """The contrasts table with an ``omnibus`` row first."""
        om = pd.DataFrame(
            [{"statistic": self.omnibus.statistic, "df": self.omnibus.df, "pvalue": self.omnibus.pvalue,
              "p_asymptotic": self.omnibus.p_asymptotic, "method": self.omnibus.method,
              "min_expected": self.omnibus.min_expected, "reject": self.omnibus.pvalue < self.alpha,
              "n_queries": float(self.n_queries)}],
            index=pd.Index(["omnibus"], name=self.contrasts.index.name),
        )
        return pd.concat([om, self.contrasts.astype({"method": object})], axis=0)


def parity_test(
    query_values,
    result_values,
    catalog_values,
    *,
    query_ids=None,
    ranks=None,
    k: int | None = None,
    categories: Sequence | None = None,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    level: float = 0.95,
    seed: int | np.random.Generator | None = 0,
    options: ParityOptions | None = None,
) -> ParityResult:
    """Distribution parity test of retrieval results (docs/METHODS.md §8.1, §8.2).

    The inputs are aligned arrays with one entry per (query, result) pair.
    Reading results and item tables (ids, missing attributes) is done by
    :func:`fairvision.audits.retrieval.parity_from_results`.

    Parameters
    ----------
    query_values : array_like
        For every pair, the protected value of the query.
    result_values : array_like
        For every pair, the protected value of the retrieved item.
    catalog_values : array_like
        The protected value of every catalog item.
    query_ids : array_like, optional
        For every pair, the id of its query (counts the queries per value).
        Default: every pair is a query of its own (K = 1).
    ranks : array_like of int, optional
        For every pair, its 1-based rank. Default: the position of the pair
        among the pairs of its query, in order of appearance.
    k : int, optional
        Top-K cut-off: pairs with rank > ``k`` are ignored (paper: 6).
        Default: no cut-off (K = the largest rank).
    categories : sequence, optional
        The values in order (default: categorical order, else sorted).
    alpha : float
        Significance level (paper: 0.01).
    correction : {"none", "bonferroni", "holm", "bh"}
        Multiple-comparison correction of the contrast and per-rank tests.
    level : float
        Two-sided level of the risk-ratio intervals.
    seed : int, numpy.random.Generator or None
        Randomness of the Monte Carlo tests.
    options : ParityOptions, optional
        Continuity correction, exact fallback, Monte Carlo draws and the
        smallest judged value (default ``ParityOptions()``).

    Returns
    -------
    ParityResult
        ``statistic``, ``pvalue``, ``df`` of the omnibus test; ``omnibus``,
        ``contrasts``, ``per_rank``, ``table``.
    """
    options = options or ParityOptions()
    if not 0 < alpha < 1:
        raise ParameterError("alpha", f"must be in (0, 1), got {alpha}")
    qid, qv, rv, rk, k = _top_k_pairs(query_values, result_values, query_ids, ranks, k)
    cats = _categories(pd.concat([pd.Series(catalog_values, dtype=object), rv, qv]), categories)
    exact, mc_samples = options.exact, options.mc_samples
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as wlist:
        warnings.simplefilter("always", SmallExpectedCountWarning)
        table = contingency(qv, rv, catalog_values, cats)
        omnibus = chi2_test(table.to_numpy(), exact=exact, mc_samples=mc_samples, seed=seed, label="omnibus table")
        qdf = pd.DataFrame({"q": qid, "v": qv.to_numpy()}).drop_duplicates("q")
        n_queries = qdf["v"].value_counts().reindex(cats, fill_value=0)
        contr = contrast_tests(table, n_queries=n_queries, alpha=alpha, correction=correction,
                               continuity=options.continuity, exact=exact, level=level, min_queries=options.min_queries)
        per_rank, rank_tables = _rank_tests(qv, rv, rk, k, catalog_values, cats, exact, mc_samples, seed)
        caught = [str(w.message) for w in wlist if issubclass(w.category, SmallExpectedCountWarning)]
    for msg in caught:
        warnings.warn(msg, SmallExpectedCountWarning, stacklevel=2)
    per_rank["pvalue_adjusted"] = adjust_pvalues(per_rank["pvalue"].to_numpy(dtype=float), correction)
    per_rank["reject"] = per_rank["pvalue_adjusted"] < alpha
    return ParityResult(
        table=table, omnibus=omnibus, contrasts=contr, per_rank=per_rank, rank_tables=rank_tables, k=int(k),
        alpha=float(alpha), correction=correction, continuity=bool(options.continuity), n_queries=int(len(qdf)),
        n_catalog=int(len(catalog_values)), warnings=caught,
    )


def _top_k_pairs(query_values, result_values, query_ids, ranks, k: int | None):
    """The (query id, query value, result value, rank) of every pair of rank <= ``k``, checked and aligned;
    and ``k`` (default: the largest rank)."""
    if k is not None and int(k) < 1:
        raise ParameterError("k", f"must be at least 1, got {k}")
    qv_all = np.asarray(query_values, dtype=object)
    rv_all = np.asarray(result_values, dtype=object)
    if qv_all.shape != rv_all.shape:
        raise FairvisionError(f"{qv_all.size} query values for {rv_all.size} result values")
    if query_ids is None:
        query_ids = np.arange(qv_all.size)
    qid_all = np.asarray(query_ids, dtype=object)
    if qid_all.shape != qv_all.shape:
        raise FairvisionError(f"{qid_all.size} query ids for {qv_all.size} pairs")
    if ranks is None:
        ranks = pd.Series(qid_all).groupby(qid_all, sort=False).cumcount().to_numpy() + 1
    ranks = np.asarray(ranks)
    if ranks.shape != qv_all.shape:
        raise FairvisionError(f"{ranks.size} ranks for {qv_all.size} pairs")
    if k is None:
        k = int(ranks.max()) if ranks.size else 1
    keep = ranks <= k
    qid = qid_all[keep]
    if qid.size == 0:
        raise FairvisionError(f"no results with rank <= {k}")
    return qid, pd.Series(qv_all[keep]), pd.Series(rv_all[keep]), ranks[keep], k


def _rank_tests(qv: pd.Series, rv: pd.Series, rk: np.ndarray, k: int, catalog_values, cats: list, exact: str,
                mc_samples: int, seed) -> tuple[pd.DataFrame, dict]:
    """The omnibus test of every rank 1..k (the strong condition) and the contingency table of each rank."""
    rank_rows, rank_tables = [], {}
    for r in range(1, int(k) + 1):
        sel = rk == r
        if not sel.any():
            continue
        tr = contingency(qv[sel].to_numpy(), rv[sel].to_numpy(), catalog_values, cats)
        rank_tables[r] = tr
        res = chi2_test(tr.to_numpy(), exact=exact, mc_samples=mc_samples, seed=seed, label=f"rank {r} table")
        rank_rows.append({"rank": r, **{f: getattr(res, f) for f in _RANK_FIELDS}})
    return pd.DataFrame(rank_rows, columns=["rank", *_RANK_FIELDS]).set_index("rank"), rank_tables

"""Distribution parity of top-K retrieval results (METHODS.md section 5).

Khaziev et al., "Recommendation or Discrimination?: Quantifying Distribution
Parity in Information Retrieval Systems" (distribution-parity-retrieval.txt).

A retrieval system has *distribution parity* for a protected attribute Z when
the distribution of Z among the top-K results does not depend on the value of Z
of the query. This module builds the paper's contingency table (one row per
query value z^q counting the values of its results, plus a ``catalog`` row
counting the values in the catalog) and tests it:

- the **omnibus** chi-square test of independence on the whole table, on the
  top-K set (the paper's *weak* condition, eq. 2 and 3);
- the same test **per rank** (the *strong* condition, eq. 1), with a
  multiple-comparison correction over ranks;
- a **contrast** test per value (the paper's Table 2: a 2 x 2 table of results
  equal / not equal to z^q for queries with z^q against the catalog), its risk
  ratio RR (eq. 5) with a 95% Katz-log confidence interval, the normalised risk
  ratio nRR (eq. 6) and the 80% rule (fair when nRR >= 0.8).

Choices the paper leaves open, made explicit here:

- **Yates' continuity correction** of the 2 x 2 contrast tables is off by
  default (``yates=False``): the paper's statistic is the Pearson chi-square
  with 1 degree of freedom, and the power analysis of
  :mod:`fairvision.stats.power` uses the same statistic. Note that
  :func:`scipy.stats.chi2_contingency` applies Yates' correction to 2 x 2
  tables unless told ``correction=False``. Pass ``yates=True`` for the more
  conservative corrected statistic.
- **Small expected counts.** The chi-square approximation needs expected
  counts that are not small. Following Cochran's rule (no expected count below
  1 and at most 20% below 5; for a 2 x 2 table none below 5) the test then
  warns and, with ``exact="auto"`` (default), reports an exact p-value
  instead: Fisher's exact test for a 2 x 2 contrast table, and for the omnibus
  and per-rank tables a Monte Carlo test conditional on the table's margins
  (random tables with the observed margins drawn by sequential hypergeometric
  sampling, p = (1 + #{X^2_sim >= X^2_obs}) / (B + 1)). The paper's dresses
  catalog with 2 ST1 queries is exactly this case.
- **Multiple comparisons.** The paper proposes no correction (its section 5).
  The contrast p-values are adjusted with Holm's step-down method by default
  (it controls the family-wise error rate like Bonferroni and is uniformly more
  powerful); ``correction`` accepts ``"none"``, ``"bonferroni"``, ``"holm"``
  and ``"bh"`` (Benjamini-Hochberg, false discovery rate), see
  :func:`fairvision.stats.corrections.adjust_pvalues`.
- **Significance level**: ``alpha=0.01``, the paper's level.
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
from scipy import stats as _st

from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.corrections import adjust_pvalues

CATALOG_ROW = "catalog"
DEFAULT_ALPHA = 0.01
DEFAULT_CORRECTION = "holm"
DEFAULT_MC_SAMPLES = 10_000
FAIR_NRR = 0.8


class SmallExpectedCountWarning(UserWarning):
    """Expected counts too small for the chi-square approximation."""


# ---------------------------------------------------------------------------
# chi-square machinery
# ---------------------------------------------------------------------------


@dataclass
class ChiSquareResult:
    """Result of a chi-square test of independence on a contingency table.

    Attributes
    ----------
    statistic : float
        Pearson's X^2 on the table with all-zero rows and columns removed.
    dof : int
        Degrees of freedom, (rows - 1) x (columns - 1) of that reduced table.
    p_value : float
        The p-value used for decisions: asymptotic chi-square, or the exact /
        Monte Carlo p-value when ``method`` says so.
    p_asymptotic : float
        The chi-square p-value, always reported.
    method : str
        ``"chi2"``, ``"monte-carlo"`` or ``"fisher"``.
    min_expected : float
        The smallest expected count.
    small_expected : bool
        True when Cochran's rule is violated.
    """

    statistic: float
    dof: int
    p_value: float
    p_asymptotic: float
    method: str = "chi2"
    min_expected: float = float("nan")
    small_expected: bool = False

    @property
    def pvalue(self) -> float:
        """Alias of :attr:`p_value`, like :mod:`scipy.stats` results."""
        return self.p_value

    def to_dict(self) -> dict:
        return {
            "statistic": self.statistic,
            "dof": self.dof,
            "p_value": self.p_value,
            "p_asymptotic": self.p_asymptotic,
            "method": self.method,
            "min_expected": self.min_expected,
            "small_expected": self.small_expected,
        }


def _reduce(table: np.ndarray) -> np.ndarray:
    """Drop all-zero rows and columns (they carry no information and break E > 0)."""
    t = np.asarray(table, dtype=float)
    return t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]


def pearson_chi2(table, *, yates: bool = False) -> tuple[float, int, np.ndarray]:
    """Pearson's chi-square statistic of independence for one table.

    Parameters
    ----------
    table : array_like, shape (r, c)
        Counts. All-zero rows and columns are dropped first.
    yates : bool
        Apply Yates' continuity correction (only for a 2 x 2 table, as
        :func:`scipy.stats.chi2_contingency` does): each |O - E| is reduced
        by 0.5, but not below 0.

    Returns
    -------
    statistic, dof, expected
        ``dof`` is 0 (and the statistic 0) when the reduced table has one row
        or one column.
    """
    t = _reduce(table)
    if t.shape[0] < 2 or t.shape[1] < 2:
        return 0.0, 0, t
    n = t.sum()
    expected = np.outer(t.sum(axis=1), t.sum(axis=0)) / n
    dev = np.abs(t - expected)
    if yates and t.shape == (2, 2):
        dev = np.maximum(dev - 0.5, 0.0)
    stat = float(np.sum(dev**2 / expected))
    return stat, int((t.shape[0] - 1) * (t.shape[1] - 1)), expected


def cochran_violated(expected: np.ndarray) -> bool:
    """Cochran's rule: any expected count < 1, or more than 20% below 5 (any below 5 for 2 x 2)."""
    e = np.asarray(expected, dtype=float)
    if e.size == 0:
        return False
    if e.shape == (2, 2):
        return bool((e < 5).any())
    return bool((e < 1).any() or (e < 5).mean() > 0.2)


def random_tables(row_sums, col_sums, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random contingency tables with the given margins, uniformly over permutations.

    The cells are drawn row by row and column by column from the hypergeometric
    distribution (the conditional null distribution of a table given its
    margins; the same scheme as R's ``r2dtable``), vectorised over ``size``
    tables: (rows - 1) x (columns - 1) numpy calls in all.

    Returns
    -------
    numpy.ndarray, shape (size, rows, columns), int64
    """
    rows = np.asarray(row_sums, dtype=np.int64)
    cols = np.asarray(col_sums, dtype=np.int64)
    if rows.sum() != cols.sum():
        raise FairvisionError("random_tables: row and column totals differ")
    r, c = rows.size, cols.size
    out = np.zeros((size, r, c), dtype=np.int64)
    col_rem = np.tile(cols, (size, 1))
    for i in range(r - 1):
        need = np.full(size, rows[i], dtype=np.int64)
        rest = col_rem.sum(axis=1)
        for j in range(c - 1):
            rest = rest - col_rem[:, j]
            x = rng.hypergeometric(col_rem[:, j], rest, need)
            out[:, i, j] = x
            need -= x
            col_rem[:, j] -= x
        out[:, i, c - 1] = need
        col_rem[:, c - 1] -= need
    out[:, r - 1, :] = col_rem
    return out


def batch_chi2(tables: np.ndarray, *, yates: bool = False) -> np.ndarray:
    """Pearson X^2 of many tables at once, shape (..., r, c) -> (...).

    Cells whose expected count is 0 (an empty row or column) contribute 0,
    which is the statistic of the table with that row/column removed.
    """
    t = np.asarray(tables, dtype=float)
    rs = t.sum(axis=-1, keepdims=True)
    cs = t.sum(axis=-2, keepdims=True)
    n = t.sum(axis=(-2, -1), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = rs * cs / n
        dev = np.abs(t - e)
        if yates and t.shape[-2:] == (2, 2):
            dev = np.maximum(dev - 0.5, 0.0)
        contrib = np.where(e > 0, dev**2 / np.where(e > 0, e, 1.0), 0.0)
    return contrib.sum(axis=(-2, -1))


def chi2_test(
    table,
    *,
    yates: bool = False,
    exact: str = "auto",
    mc_samples: int = DEFAULT_MC_SAMPLES,
    seed: int | None = 0,
    label: str = "table",
    warn: bool = True,
) -> ChiSquareResult:
    """Chi-square test of independence with a fallback for small expected counts.

    Parameters
    ----------
    table : array_like, shape (r, c)
        Counts.
    yates : bool
        Yates' continuity correction for 2 x 2 tables (default off; see the
        module notes).
    exact : {"auto", "never", "always"}
        ``"auto"``: when Cochran's rule is violated, warn and report an exact
        p-value (Fisher's exact test for 2 x 2, otherwise a Monte Carlo test
        conditional on the margins with ``mc_samples`` tables).
    label : str
        Names the table in the warning.

    Returns
    -------
    ChiSquareResult
    """
    if exact not in ("auto", "never", "always"):
        raise FairvisionError(f"exact must be 'auto', 'never' or 'always', not {exact!r}")
    t = _reduce(table)
    stat, dof, expected = pearson_chi2(t, yates=yates)
    if dof == 0:
        return ChiSquareResult(0.0, 0, 1.0, 1.0, "chi2", float("nan"), False)
    p_asym = float(_st.chi2.sf(stat, dof))
    small = cochran_violated(expected)
    min_e = float(expected.min())
    if small and warn:
        warnings.warn(
            f"{label}: smallest expected count {min_e:.3g}; the chi-square approximation is unreliable"
            + ("; using an exact test" if exact == "auto" else ""),
            SmallExpectedCountWarning,
            stacklevel=2,
        )
    if exact == "always" or (exact == "auto" and small):
        ti = np.rint(t).astype(np.int64)
        if ti.shape == (2, 2):
            p = float(_st.fisher_exact(ti).pvalue)
            return ChiSquareResult(stat, dof, p, p_asym, "fisher", min_e, small)
        rng = np.random.default_rng(seed)
        sims = random_tables(ti.sum(axis=1), ti.sum(axis=0), int(mc_samples), rng)
        sim_stat = batch_chi2(sims, yates=yates)
        # relative tolerance guards against equal tables differing by rounding
        hits = int(np.count_nonzero(sim_stat >= stat * (1 - 1e-12) - 1e-12))
        p = (1 + hits) / (int(mc_samples) + 1)
        return ChiSquareResult(stat, dof, p, p_asym, "monte-carlo", min_e, small)
    return ChiSquareResult(stat, dof, p_asym, p_asym, "chi2", min_e, small)


# ---------------------------------------------------------------------------
# risk ratio
# ---------------------------------------------------------------------------


def risk_ratio(a, n1, c, n2, *, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Risk ratio (a/n1) / (c/n2) with the Katz log confidence interval, vectorised.

    Parameters
    ----------
    a, n1 : array_like
        Results equal to z^q and all results, for queries with z^q.
    c, n2 : array_like
        Catalog items equal to z^q and the catalog size.
    confidence : float
        Two-sided level of the interval.

    Returns
    -------
    rr, low, high : numpy.ndarray
        ``RR exp(-+ z se)`` with ``se = sqrt(1/a - 1/n1 + 1/c - 1/n2)``
        (Katz et al. 1978, the method of
        :func:`scipy.stats.contingency.relative_risk`). Edge cases: a = 0 ->
        RR 0, CI [0, inf]; c = 0 -> RR inf, CI [NaN, inf]; both 0 or an empty
        group -> NaN.
    """
    a, n1, c, n2 = (np.asarray(x, dtype=float) for x in (a, n1, c, n2))
    z = _special.ndtri(1 - (1 - confidence) / 2)
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
    """nRR = RR if RR <= 1 else 1/RR (paper eq. 6), in [0, 1]; NaN stays NaN."""
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
    """The paper's contingency table (Table 1).

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
    table: pd.DataFrame,
    *,
    n_queries: pd.Series | None = None,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    yates: bool = False,
    exact: str = "auto",
    confidence: float = 0.95,
    min_queries: int = 10,
) -> pd.DataFrame:
    """Contrast test, risk ratio and 80% rule for every query value (paper Table 2, eq. 4-6).

    Parameters
    ----------
    table : pandas.DataFrame
        The output of :func:`contingency` (values x values plus ``catalog``).
    n_queries : pandas.Series, optional
        Number of queries per value (for the report and the ``too_small``
        flag); default: row total / K is not known here, so NaN.
    alpha, correction, yates, exact, confidence
        See the module notes.
    min_queries : int
        Values with fewer queries are flagged ``too_small``.

    Returns
    -------
    pandas.DataFrame
        Indexed by value: ``n_queries``, ``n_results``, ``same`` (a: results
        equal to z^q), ``share`` (a / n_results), ``catalog_share``, ``chi2``,
        ``dof``, ``p_value`` (exact when ``method`` is ``fisher``),
        ``p_asymptotic``, ``method``, ``min_expected``, ``p_adj``, ``reject``
        (p_adj < alpha), ``rr``, ``rr_low``, ``rr_high``, ``nrr``, ``fair_80``
        (nRR >= 0.8; missing when RR is undefined, e.g. no queries), ``too_small``.
    """
    values = [c for c in table.columns]
    body = table.loc[values, values].to_numpy(dtype=np.int64)
    cat = table.loc[CATALOG_ROW, values].to_numpy(dtype=np.int64)
    a = np.diag(body)
    n1 = body.sum(axis=1)
    c = cat
    n2 = int(cat.sum())
    rows = []
    for i, v in enumerate(values):
        if n1[i] == 0:
            rows.append(dict(chi2=np.nan, dof=np.nan, p_value=np.nan, p_asymptotic=np.nan, method="no queries", min_expected=np.nan))
            continue
        tab = np.array([[a[i], n1[i] - a[i]], [c[i], n2 - c[i]]])
        res = chi2_test(tab, yates=yates, exact=exact, label=f"contrast {v!r}")
        rows.append(dict(chi2=res.statistic, dof=res.dof, p_value=res.p_value, p_asymptotic=res.p_asymptotic,
                         method=res.method, min_expected=res.min_expected))
    out = pd.DataFrame(rows, index=pd.Index(values, name="value"))
    rr, lo, hi = risk_ratio(a, n1, c, n2, confidence=confidence)
    nq = (pd.Series(n_queries).reindex(values).to_numpy(dtype=float) if n_queries is not None else np.full(len(values), np.nan))
    out.insert(0, "n_queries", nq)
    out.insert(1, "n_results", n1)
    out.insert(2, "same", a)
    with np.errstate(invalid="ignore", divide="ignore"):
        out.insert(3, "share", np.where(n1 > 0, a / np.maximum(n1, 1), np.nan))
        out.insert(4, "catalog_share", c / n2 if n2 else np.nan)
    out["p_adj"] = adjust_pvalues(out["p_value"].to_numpy(dtype=float), correction)
    out["reject"] = out["p_adj"].to_numpy(dtype=float) < alpha
    out["rr"] = rr
    out["rr_low"] = lo
    out["rr_high"] = hi
    out["nrr"] = normalized_rr(rr)
    nrr = out["nrr"].to_numpy(dtype=float)
    out["fair_80"] = pd.array([None if np.isnan(x) else bool(x >= FAIR_NRR) for x in nrr], dtype="boolean")  # NA: not judged
    out["too_small"] = (np.nan_to_num(nq, nan=np.inf) < min_queries) | (out["min_expected"].to_numpy(dtype=float) < 5) | (n1 == 0)
    return out


# ---------------------------------------------------------------------------
# the whole test
# ---------------------------------------------------------------------------


@dataclass
class ParityResult:
    """Distribution parity test of top-K results (METHODS.md section 5).

    Attributes
    ----------
    table : pandas.DataFrame
        Contingency table: rows per query value plus ``catalog``; columns per
        result value (top-K set, the weak condition).
    omnibus : ChiSquareResult
        Chi-square test of the whole table (``statistic``, ``dof``,
        ``p_value``).
    contrasts : pandas.DataFrame
        One row per value (see :func:`contrast_tests`).
    per_rank : pandas.DataFrame
        Strong condition: the omnibus test for each rank 1..K (``statistic``,
        ``dof``, ``p_value``, ``method``, ``p_adj``, ``reject``).
    rank_tables : dict
        The contingency table of every rank.
    """

    table: pd.DataFrame
    omnibus: ChiSquareResult
    contrasts: pd.DataFrame
    per_rank: pd.DataFrame
    rank_tables: dict
    k: int
    alpha: float
    correction: str
    yates: bool
    n_queries: int
    n_catalog: int
    warnings: list[str] = field(default_factory=list)
    dropped: dict = field(default_factory=dict)

    @property
    def contingency(self) -> pd.DataFrame:
        return self.table

    @property
    def fair(self) -> bool:
        """No significant omnibus bias and every judged value within the 80% rule."""
        return bool(self.omnibus.p_value >= self.alpha and self.contrasts["fair_80"].fillna(True).all())

    def to_frame(self) -> pd.DataFrame:
        """The contrasts table with an ``omnibus`` row first (statistic in ``chi2``)."""
        om = pd.DataFrame(
            [{"chi2": self.omnibus.statistic, "dof": self.omnibus.dof, "p_value": self.omnibus.p_value,
              "p_asymptotic": self.omnibus.p_asymptotic, "method": self.omnibus.method,
              "min_expected": self.omnibus.min_expected, "reject": self.omnibus.p_value < self.alpha,
              "n_queries": float(self.n_queries)}],
            index=pd.Index(["omnibus"], name=self.contrasts.index.name),
        )
        return pd.concat([om, self.contrasts.astype({"method": object})], axis=0)


def parity_from_arrays(
    query_ids,
    ranks,
    query_values,
    result_values,
    catalog_values,
    *,
    k: int = 6,
    categories: Sequence | None = None,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    yates: bool = False,
    exact: str = "auto",
    mc_samples: int = DEFAULT_MC_SAMPLES,
    seed: int | None = 0,
    min_queries: int = 10,
    confidence: float = 0.95,
) -> ParityResult:
    """Distribution parity test from aligned arrays, one entry per (query, result) pair.

    ``ranks`` are 1-based positions; pairs with rank > ``k`` are ignored.
    See :func:`parity_test` for the parameters.
    """
    if int(k) < 1:
        raise FairvisionError(f"k must be at least 1, got {k}")
    if not 0 < alpha < 1:
        raise FairvisionError(f"alpha must be in (0, 1), got {alpha}")
    ranks = np.asarray(ranks)
    keep = ranks <= k
    qid = np.asarray(query_ids, dtype=object)[keep]
    qv = pd.Series(np.asarray(query_values, dtype=object)[keep])
    rv = pd.Series(np.asarray(result_values, dtype=object)[keep])
    rk = ranks[keep]
    if qid.size == 0:
        raise FairvisionError(f"no results with rank <= {k}")
    cats = _categories(pd.concat([pd.Series(catalog_values, dtype=object), rv, qv]), categories)
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as wlist:
        warnings.simplefilter("always", SmallExpectedCountWarning)
        table = contingency(qv, rv, catalog_values, cats)
        omnibus = chi2_test(table.to_numpy(), yates=False, exact=exact, mc_samples=mc_samples, seed=seed, label="omnibus table")
        qdf = pd.DataFrame({"q": qid, "v": qv.to_numpy()}).drop_duplicates("q")
        n_queries = qdf["v"].value_counts().reindex(cats, fill_value=0)
        contr = contrast_tests(table, n_queries=n_queries, alpha=alpha, correction=correction, yates=yates, exact=exact,
                               confidence=confidence, min_queries=min_queries)
        rank_rows, rank_tables = [], {}
        for r in range(1, int(k) + 1):
            sel = rk == r
            if not sel.any():
                continue
            tr = contingency(qv[sel].to_numpy(), rv[sel].to_numpy(), catalog_values, cats)
            rank_tables[r] = tr
            res = chi2_test(tr.to_numpy(), exact=exact, mc_samples=mc_samples, seed=seed, label=f"rank {r} table")
            rank_rows.append({"rank": r, **res.to_dict()})
        caught = [str(w.message) for w in wlist if issubclass(w.category, SmallExpectedCountWarning)]
    for msg in caught:
        warnings.warn(msg, SmallExpectedCountWarning, stacklevel=2)
    per_rank = pd.DataFrame(rank_rows).set_index("rank")
    per_rank["p_adj"] = adjust_pvalues(per_rank["p_value"].to_numpy(dtype=float), correction)
    per_rank["reject"] = per_rank["p_adj"] < alpha
    return ParityResult(
        table=table, omnibus=omnibus, contrasts=contr, per_rank=per_rank, rank_tables=rank_tables, k=int(k),
        alpha=float(alpha), correction=correction, yates=bool(yates), n_queries=int(len(qdf)),
        n_catalog=int(len(catalog_values)), warnings=caught,
    )


def parity_test(
    results: pd.DataFrame,
    items: pd.DataFrame,
    attribute: str,
    k: int = 6,
    *,
    catalog: pd.DataFrame | None = None,
    item_col: str = "item_id",
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    yates: bool = False,
    exact: str = "auto",
    mc_samples: int = DEFAULT_MC_SAMPLES,
    seed: int | None = 0,
    min_queries: int = 10,
    categories: Sequence | None = None,
    confidence: float = 0.95,
) -> ParityResult:
    """Test top-K retrieval results for distribution parity (METHODS.md section 5).

    Parameters
    ----------
    results : pandas.DataFrame
        Columns ``query_id``, ``rank`` (1 = best) and ``item_id``.
    items : pandas.DataFrame
        One row per item with the id column ``item_col`` and ``attribute``.
        Query ids are looked up here too (queries may be catalog items).
        Items whose attribute is missing are left out (the paper keeps only
        images with an ITA value); their count is in ``result.dropped``.
    attribute : str
        The protected attribute column.
    k : int
        Top-K cut-off (paper: 6).
    catalog : pandas.DataFrame, optional
        The catalog (needs ``item_col`` and ``attribute``); default ``items``.
    alpha : float
        Significance level (paper: 0.01).
    correction : {"holm", "bonferroni", "bh", "none"}
        Multiple-comparison correction of the contrast and per-rank tests.
    yates : bool
        Yates' continuity correction of the 2 x 2 contrast tables (default off).
    exact : {"auto", "never", "always"}
        Exact / Monte Carlo p-values when expected counts are small.

    Returns
    -------
    ParityResult
    """
    for name, df, cols in (("results", results, ("query_id", "rank", "item_id")), ("items", items, (item_col, attribute))):
        if not isinstance(df, pd.DataFrame):
            raise FairvisionError(f"{name}: expected a DataFrame, got {type(df).__name__}")
        for col in cols:
            if col not in df.columns:
                raise ColumnError(f"{name}: missing column {col!r}; columns are {', '.join(map(str, df.columns))}")
    catalog = items if catalog is None else catalog
    for col in (item_col, attribute):
        if col not in catalog.columns:
            raise ColumnError(f"catalog: missing column {col!r}; columns are {', '.join(map(str, catalog.columns))}")
    ids = items[item_col].astype(str)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ColumnError(f"items: row {i + 1}: duplicate {item_col} {ids.iloc[i]!r}")
    attr = items[attribute]
    missing = attr.isna().to_numpy()
    lookup = pd.Series(attr.to_numpy(dtype=object)[~missing], index=ids.to_numpy()[~missing])
    known = set(ids)
    qids = results["query_id"].astype(str)
    iids = results["item_id"].astype(str)
    for name, col in (("query_id", qids), ("item_id", iids)):
        unknown = ~col.isin(known).to_numpy()
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise FairvisionError(f"results: row {i + 1}: {name} {col.iloc[i]!r} is not in the items table")
    qv = qids.map(lookup)
    rv = iids.map(lookup)
    ok = qv.notna().to_numpy() & rv.notna().to_numpy()
    cat_vals = catalog[attribute]
    cat_ok = cat_vals.notna().to_numpy()
    if categories is None and isinstance(attr.dtype, pd.CategoricalDtype):
        categories = list(attr.cat.categories)
    res = parity_from_arrays(
        qids.to_numpy()[ok], pd.to_numeric(results["rank"]).to_numpy()[ok], qv.to_numpy()[ok], rv.to_numpy()[ok],
        cat_vals.to_numpy(dtype=object)[cat_ok], k=k, categories=categories, alpha=alpha, correction=correction,
        yates=yates, exact=exact, mc_samples=mc_samples, seed=seed, min_queries=min_queries, confidence=confidence,
    )
    res.dropped = {"result_pairs_missing_attribute": int((~ok).sum()), "catalog_items_missing_attribute": int((~cat_ok).sum())}
    return res

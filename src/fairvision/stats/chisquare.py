"""Chi-square tests of contingency tables: the one implementation fairvision uses.

Pearson's X^2 test of independence (or, equivalently, of homogeneity of the
rows) with the choices documented in docs/METHODS.md §4.1:

- all-zero rows and columns are dropped first (they carry no information and
  would make an expected count 0); the dropped labels are reported;
- no continuity correction unless ``continuity=True`` (then Yates' correction,
  only for a 2 x 2 table, as :func:`scipy.stats.chi2_contingency` does by
  default);
- small expected counts are judged by Cochran's rule (no expected count below
  1 and at most 20% below 5; for a 2 x 2 table none below 5). With
  ``exact="auto"`` the test then warns and reports an exact p-value instead:
  Fisher's exact test for 2 x 2, otherwise a Monte Carlo test conditional on
  the margins (random tables drawn by sequential hypergeometric sampling,
  p = (1 + #{X^2_sim >= X^2_obs}) / (B + 1)). The asymptotic p-value is
  always reported too.
- Cramér's V is reported as the effect size.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.errors import FairvisionError
from fairvision.stats.results import TestResult

DEFAULT_MC_SAMPLES = 10_000
EXACT_MODES = ("auto", "never", "always")


class SmallExpectedCountWarning(UserWarning):
    """Expected counts too small for the chi-square approximation."""


@dataclass
class ChiSquareResult(TestResult):
    """Result of a chi-square test of independence / homogeneity.

    Attributes
    ----------
    statistic : float
        Pearson's X^2 on the table with all-zero rows and columns removed.
    pvalue : float
        The p-value used for decisions: asymptotic, or the exact / Monte Carlo
        p-value when ``method`` says so.
    df : int
        Degrees of freedom, (rows - 1) x (columns - 1) of the reduced table.
    p_asymptotic : float
        The chi-square p-value, always reported.
    method : str
        ``"chi2"``, ``"monte-carlo"`` or ``"fisher"``.
    min_expected : float
        The smallest expected count.
    small_expected : bool
        True when Cochran's rule is violated.
    n : int
        Total count of the reduced table.
    cramers_v : float
        Effect size, sqrt(X^2 / (n (min(r, c) - 1))).
    expected : pandas.DataFrame or None
        Expected counts of the reduced table (labelled when the input was).
    dropped : tuple of str
        Labels of the all-zero rows and columns left out.
    """

    df: int = 0
    p_asymptotic: float = float("nan")
    method: str = "chi2"
    min_expected: float = float("nan")
    small_expected: bool = False
    n: int = 0
    cramers_v: float = float("nan")
    expected: pd.DataFrame | None = field(default=None, repr=False)
    dropped: tuple = ()

    @property
    def reliable(self) -> bool:
        """True when the chi-square approximation is trustworthy (Cochran's rule holds)."""
        return bool(self.df > 0 and not self.small_expected)


def _labelled(table) -> pd.DataFrame:
    if isinstance(table, pd.DataFrame):
        return table.astype(float)
    t = np.asarray(table, dtype=float)
    if t.ndim != 2:
        raise FairvisionError(f"a contingency table must be 2-dimensional, not shape {t.shape}")
    return pd.DataFrame(t)


def reduce_table(table) -> np.ndarray:
    """Drop all-zero rows and columns of a count table.

    Parameters
    ----------
    table : array_like, shape (r, c)

    Returns
    -------
    numpy.ndarray
        The table without its all-zero rows and columns, as float.
    """
    t = np.asarray(table, dtype=float)
    return t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]


def pearson_chi2(table, *, continuity: bool = False) -> tuple[float, int, np.ndarray]:
    """Pearson's chi-square statistic of independence for one table.

    Parameters
    ----------
    table : array_like, shape (r, c)
        Counts. All-zero rows and columns are dropped first.
    continuity : bool
        Apply Yates' continuity correction (only for a 2 x 2 table, as
        :func:`scipy.stats.chi2_contingency` does): each |O - E| is reduced
        by 0.5, but not below 0.

    Returns
    -------
    statistic, df, expected
        ``df`` is 0 (and the statistic 0) when the reduced table has one row
        or one column.
    """
    t = reduce_table(table)
    if t.shape[0] < 2 or t.shape[1] < 2:
        return 0.0, 0, t
    n = t.sum()
    expected = np.outer(t.sum(axis=1), t.sum(axis=0)) / n
    dev = np.abs(t - expected)
    if continuity and t.shape == (2, 2):
        dev = np.maximum(dev - 0.5, 0.0)
    stat = float(np.sum(dev**2 / expected))
    return stat, int((t.shape[0] - 1) * (t.shape[1] - 1)), expected


def cochran_violated(expected: np.ndarray) -> bool:
    """Cochran's rule for the chi-square approximation.

    Parameters
    ----------
    expected : array_like
        Expected counts.

    Returns
    -------
    bool
        True when any expected count is below 1 or more than 20% are below 5
        (for a 2 x 2 table: any below 5).
    """
    e = np.asarray(expected, dtype=float)
    if e.size == 0:
        return False
    if e.shape == (2, 2):
        return bool((e < 5).any())
    return bool((e < 1).any() or (e < 5).mean() > 0.2)


def cramers_v(chi2: float, n: int, shape: tuple[int, int]) -> float:
    """Cramér's V = sqrt(chi2 / (n (min(r, c) - 1))), in [0, 1].

    Parameters
    ----------
    chi2 : float
        Pearson's X^2 (without continuity correction).
    n : int
        Total count.
    shape : (int, int)
        Shape of the (reduced) table.

    Returns
    -------
    float
        NaN when ``n`` is 0 or the table has one row or column.
    """
    k = min(shape) - 1
    if n <= 0 or k <= 0:
        return float("nan")
    return float(np.sqrt(chi2 / (n * k)))


def random_tables(row_sums, col_sums, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random contingency tables with the given margins, uniformly over permutations.

    The cells are drawn row by row and column by column from the hypergeometric
    distribution (the conditional null distribution of a table given its
    margins; the same scheme as R's ``r2dtable``), vectorised over ``size``
    tables: (rows - 1) x (columns - 1) numpy calls in all.

    Parameters
    ----------
    row_sums, col_sums : array_like of int
        The margins; their totals must agree.
    size : int
        Number of tables.
    rng : numpy.random.Generator

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


def batch_chi2(tables: np.ndarray, *, continuity: bool = False) -> np.ndarray:
    """Pearson X^2 of many tables at once.

    Parameters
    ----------
    tables : array_like, shape (..., r, c)
        Counts.
    continuity : bool
        Yates' correction for 2 x 2 tables.

    Returns
    -------
    numpy.ndarray, shape (...)
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
        if continuity and t.shape[-2:] == (2, 2):
            dev = np.maximum(dev - 0.5, 0.0)
        contrib = np.where(e > 0, dev**2 / np.where(e > 0, e, 1.0), 0.0)
    return contrib.sum(axis=(-2, -1))


def chi2_test(
    table,
    *,
    continuity: bool = False,
    exact: str = "auto",
    mc_samples: int = DEFAULT_MC_SAMPLES,
    seed: int | np.random.Generator | None = 0,
    label: str = "table",
    warn: bool = True,
) -> ChiSquareResult:
    """Chi-square test of independence with a fallback for small expected counts.

    Parameters
    ----------
    table : array_like or pandas.DataFrame, shape (r, c)
        Counts. A DataFrame's labels name the dropped rows/columns and label
        the expected counts.
    continuity : bool
        Yates' continuity correction for 2 x 2 tables (default off).
    exact : {"auto", "never", "always"}
        ``"auto"``: when Cochran's rule is violated, report an exact p-value
        (Fisher's exact test for 2 x 2, otherwise a Monte Carlo test
        conditional on the margins with ``mc_samples`` tables). ``"never"``:
        always the asymptotic p-value.
    mc_samples : int
        Tables drawn for the Monte Carlo test.
    seed : int, numpy.random.Generator or None
        Randomness of the Monte Carlo test.
    label : str
        Names the table in the warning.
    warn : bool
        Emit :class:`SmallExpectedCountWarning` when Cochran's rule is violated.

    Returns
    -------
    ChiSquareResult
        With ``df = 0``, ``statistic = 0`` and ``pvalue = 1`` when the reduced
        table has a single row or column (nothing to test).
    """
    if exact not in EXACT_MODES:
        raise FairvisionError(f"exact must be 'auto', 'never' or 'always', not {exact!r}")
    lab = _labelled(table)
    raw = lab.to_numpy(dtype=float)
    keep_r, keep_c = raw.sum(axis=1) > 0, raw.sum(axis=0) > 0
    dropped = tuple(str(v) for v in lab.index[~keep_r]) + tuple(str(v) for v in lab.columns[~keep_c])
    sub = lab.loc[keep_r, keep_c]
    t = sub.to_numpy(dtype=float)
    n = int(round(t.sum()))
    stat, df, expected = pearson_chi2(t, continuity=continuity)
    if df == 0:
        return ChiSquareResult(0.0, 1.0, df=0, p_asymptotic=1.0, n=n, dropped=dropped)
    expected_df = pd.DataFrame(expected, index=sub.index, columns=sub.columns)
    p_asym = float(_st.chi2.sf(stat, df))
    small = cochran_violated(expected)
    min_e = float(expected.min())
    plain = stat if not continuity else pearson_chi2(t)[0]
    v = cramers_v(plain, n, t.shape)
    common = dict(df=df, p_asymptotic=p_asym, min_expected=min_e, small_expected=small, n=n, cramers_v=v,
                  expected=expected_df, dropped=dropped)
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
            return ChiSquareResult(stat, p, method="fisher", **common)
        rng = np.random.default_rng(seed)
        sims = random_tables(ti.sum(axis=1), ti.sum(axis=0), int(mc_samples), rng)
        sim_stat = batch_chi2(sims, continuity=continuity)
        # relative tolerance guards against equal tables differing by rounding
        hits = int(np.count_nonzero(sim_stat >= stat * (1 - 1e-12) - 1e-12))
        p = (1 + hits) / (int(mc_samples) + 1)
        return ChiSquareResult(stat, p, method="monte-carlo", **common)
    return ChiSquareResult(stat, p_asym, method="chi2", **common)

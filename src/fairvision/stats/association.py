"""Association between two attributes: NPMI, NMI, chi-square test and Cramér's V.

These measure *stereotypical* bias in the sense of the bias-transfer paper
(METHODS.md section 7): how much knowing one attribute (e.g. gender) tells
about another (e.g. age group or a target label) in a dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _sps

from fairvision.errors import FairvisionError


def contingency_table(table: pd.DataFrame, x: str, y: str, schema=None) -> pd.DataFrame:
    """Counts of samples per ``(x, y)`` value pair, declared categories kept (zeros included).

    ``table`` is a sample table; ``schema`` (a :class:`fairvision.schema.Schema`)
    supplies declared categories, bins, multi-valued and hierarchical
    expansion. If ``table`` is already a contingency table (numeric, with ``x``
    and ``y`` as its index and column names), it is returned as is.
    """
    from fairvision.groups import cross_counts

    if _is_contingency(table, x, y):
        return table.astype(float)
    return cross_counts(table, x, y, schema=schema)


def _is_contingency(table: pd.DataFrame, x: str, y: str) -> bool:
    return table.index.name == x and table.columns.name == y and all(
        np.issubdtype(dt, np.number) for dt in table.dtypes
    )


def _joint(table, x, y, schema) -> pd.DataFrame:
    ct = contingency_table(table, x, y, schema)
    if ct.to_numpy().sum() <= 0:
        raise FairvisionError(f"no samples with both {x!r} and {y!r}")
    return ct


def npmi(table: pd.DataFrame, x: str, y: str, *, schema=None) -> pd.DataFrame:
    """Normalized pointwise mutual information of every value pair (METHODS.md 7).

    ``NPMI(x, y) = ln(p(x,y) / (p(x) p(y))) / (-ln p(x,y))``, in [-1, 1]:
    -1 when the pair never occurs, 0 under independence, 1 when the two values
    always occur together. Values of ``x`` or ``y`` with no samples at all give
    NaN (their association is undefined).

    Returns
    -------
    pandas.DataFrame
        Index: values of ``x``; columns: values of ``y``.
    """
    ct = _joint(table, x, y, schema)
    n = ct.to_numpy(dtype=float)
    total = n.sum()
    pxy = n / total
    px = pxy.sum(axis=1, keepdims=True)
    py = pxy.sum(axis=0, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(pxy / (px * py))
        out = np.where(pxy >= 1.0, 1.0, pmi / -np.log(pxy))
    out = np.where(pxy == 0, -1.0, out)
    out = np.where((px == 0) | (py == 0), np.nan, out)
    return pd.DataFrame(out, index=ct.index, columns=ct.columns)


def nmi(table: pd.DataFrame, x: str, y: str, *, schema=None) -> float:
    """Normalized mutual information ``I(X;Y) / H(X,Y)`` (Bouma 2009; METHODS.md 7), in [0, 1]."""
    ct = _joint(table, x, y, schema)
    return nmi_from_counts(ct.to_numpy(dtype=float))


def nmi_from_counts(n: np.ndarray) -> float:
    """NMI of a contingency table of counts (``0 log 0 = 0``); 0 when ``H(X,Y) = 0``."""
    pxy = n / n.sum()
    px = pxy.sum(axis=1, keepdims=True)
    py = pxy.sum(axis=0, keepdims=True)
    nz = pxy > 0
    mi = float(np.sum(pxy[nz] * np.log(pxy[nz] / (px @ py)[nz])))
    hxy = float(-np.sum(pxy[nz] * np.log(pxy[nz])))
    if hxy <= 0:
        return 0.0
    return max(0.0, min(1.0, mi / hxy))


@dataclass
class ChiSquareResult:
    """Chi-square test of independence (scipy.stats-like result)."""

    statistic: float
    pvalue: float
    dof: int
    cramers_v: float
    n: int
    min_expected: float
    expected: pd.DataFrame
    dropped: tuple[str, ...] = ()

    @property
    def small_expected(self) -> bool:
        """True when some expected count is below 5 (the chi-square approximation is then doubtful)."""
        return self.min_expected < 5

    def to_dict(self) -> dict:
        return {
            "statistic": self.statistic, "pvalue": self.pvalue, "dof": self.dof, "cramers_v": self.cramers_v,
            "n": self.n, "min_expected": self.min_expected, "small_expected": self.small_expected,
            "dropped_empty_values": list(self.dropped),
        }


def chi2_independence(table: pd.DataFrame, x: str, y: str, *, schema=None) -> ChiSquareResult:
    """Pearson chi-square test of independence of ``x`` and ``y`` with Cramér's V.

    Declared values with no samples are dropped from the test (their expected
    counts are zero) and listed in ``dropped``. No continuity correction is
    applied, whatever the table's shape.
    """
    ct = _joint(table, x, y, schema)
    keep_r = ct.sum(axis=1) > 0
    keep_c = ct.sum(axis=0) > 0
    dropped = tuple(f"{x}={v}" for v in ct.index[~keep_r]) + tuple(f"{y}={v}" for v in ct.columns[~keep_c])
    sub = ct.loc[keep_r, keep_c]
    if sub.shape[0] < 2 or sub.shape[1] < 2:
        raise FairvisionError(f"chi-square test of {x!r} x {y!r} needs at least two observed values of each")
    res = _sps.chi2_contingency(sub.to_numpy(dtype=float), correction=False)
    n = int(sub.to_numpy().sum())
    v = cramers_v(res.statistic, n, sub.shape)
    expected = pd.DataFrame(res.expected_freq, index=sub.index, columns=sub.columns)
    return ChiSquareResult(float(res.statistic), float(res.pvalue), int(res.dof), v, n, float(res.expected_freq.min()), expected, dropped)


def cramers_v(chi2: float, n: int, shape: tuple[int, int]) -> float:
    """Cramér's V = sqrt(chi2 / (n * (min(r, c) - 1))), in [0, 1]."""
    k = min(shape) - 1
    if n <= 0 or k <= 0:
        return float("nan")
    return float(np.sqrt(chi2 / (n * k)))

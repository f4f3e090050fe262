"""Association between two attributes: NPMI, NMI, chi-square test and Cramér's V.

These measure *stereotypical* bias in the sense of the bias-transfer paper
(docs/METHODS.md §5.2): how much knowing one attribute (e.g. gender) tells
about another (e.g. age group or a target label) in a dataset. The chi-square
test itself is :func:`fairvision.stats.chisquare.chi2_test` (docs/METHODS.md §4.1).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError
from fairvision.groups import cross_counts
from fairvision.stats.chisquare import ChiSquareResult, chi2_test


def contingency_table(data: pd.DataFrame, x: str, y: str, schema=None) -> pd.DataFrame:
    """Counts of samples per ``(x, y)`` value pair, declared categories kept (zeros included).

    Parameters
    ----------
    data : pandas.DataFrame
        A sample table (one row per sample), or already a contingency table
        (numeric, with ``x`` and ``y`` as its index and column names), which
        is returned as is.
    x, y : str
        Attribute columns (or schema names).
    schema : fairvision.schema.Schema, optional
        Declared categories, bins, multi-valued and hierarchical expansion.

    Returns
    -------
    pandas.DataFrame
        Index: values of ``x``; columns: values of ``y``; float counts.
    """
    if _is_contingency(data, x, y):
        return data.astype(float)
    return cross_counts(data, x, y, schema=schema)


def _is_contingency(data: pd.DataFrame, x: str, y: str) -> bool:
    return data.index.name == x and data.columns.name == y and all(
        np.issubdtype(dt, np.number) for dt in data.dtypes
    )


def _joint(data, x, y, schema) -> pd.DataFrame:
    ct = contingency_table(data, x, y, schema)
    if ct.to_numpy().sum() <= 0:
        raise FairvisionError(f"no samples with both {x!r} and {y!r}")
    return ct


def npmi(data: pd.DataFrame, x: str, y: str, *, schema=None) -> pd.DataFrame:
    """Normalized pointwise mutual information of every value pair (docs/METHODS.md §5.2).

    ``NPMI(x, y) = ln(p(x,y) / (p(x) p(y))) / (-ln p(x,y))``, in [-1, 1]:
    -1 when the pair never occurs, 0 under independence, 1 when the two values
    always occur together. Values of ``x`` or ``y`` with no samples at all give
    NaN (their association is undefined).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table or contingency table (see :func:`contingency_table`).
    x, y : str
        Attribute columns.
    schema : fairvision.schema.Schema, optional
        Declared categories.

    Returns
    -------
    pandas.DataFrame
        Index: values of ``x``; columns: values of ``y``.
    """
    ct = _joint(data, x, y, schema)
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


def nmi(data: pd.DataFrame, x: str, y: str, *, schema=None) -> float:
    """Normalized mutual information ``I(X;Y) / H(X,Y)`` (Bouma 2009; docs/METHODS.md §5.2).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table or contingency table (see :func:`contingency_table`).
    x, y : str
        Attribute columns.
    schema : fairvision.schema.Schema, optional
        Declared categories.

    Returns
    -------
    float
        In [0, 1]: 0 under independence, 1 when each attribute determines the other.
    """
    ct = _joint(data, x, y, schema)
    return nmi_from_counts(ct.to_numpy(dtype=float))


def nmi_from_counts(n: np.ndarray) -> float:
    """NMI of a contingency table of counts (docs/METHODS.md §5.2).

    Parameters
    ----------
    n : numpy.ndarray, shape (r, c)
        Counts (``0 log 0 = 0``).

    Returns
    -------
    float
        ``I(X;Y) / H(X,Y)`` clipped to [0, 1]; 0 when ``H(X,Y) = 0``.
    """
    pxy = n / n.sum()
    px = pxy.sum(axis=1, keepdims=True)
    py = pxy.sum(axis=0, keepdims=True)
    nz = pxy > 0
    mi = float(np.sum(pxy[nz] * np.log(pxy[nz] / (px @ py)[nz])))
    hxy = float(-np.sum(pxy[nz] * np.log(pxy[nz])))
    if hxy <= 0:
        return 0.0
    return max(0.0, min(1.0, mi / hxy))


def chi2_independence(data: pd.DataFrame, x: str, y: str, *, schema=None) -> ChiSquareResult:
    """Pearson chi-square test of independence of ``x`` and ``y`` with Cramér's V (docs/METHODS.md §4.1).

    Declared values with no samples are dropped from the test (their expected
    counts are zero) and listed in ``dropped`` as ``"x=value"``. No continuity
    correction is applied, whatever the table's shape, and the p-value is the
    asymptotic one (``small_expected`` says when Cochran's rule is violated).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table or contingency table (see :func:`contingency_table`).
    x, y : str
        Attribute columns.
    schema : fairvision.schema.Schema, optional
        Declared categories.

    Returns
    -------
    fairvision.stats.chisquare.ChiSquareResult
        ``statistic``, ``pvalue``, ``df``, ``cramers_v``, ``n``,
        ``min_expected``, ``small_expected``, ``expected``, ``dropped``.

    Raises
    ------
    FairvisionError
        When fewer than two values of ``x`` or of ``y`` are observed.
    """
    ct = _joint(data, x, y, schema)
    keep_r = ct.sum(axis=1) > 0
    keep_c = ct.sum(axis=0) > 0
    dropped = tuple(f"{x}={v}" for v in ct.index[~keep_r]) + tuple(f"{y}={v}" for v in ct.columns[~keep_c])
    sub = ct.loc[keep_r, keep_c]
    if sub.shape[0] < 2 or sub.shape[1] < 2:
        raise FairvisionError(f"chi-square test of {x!r} x {y!r} needs at least two observed values of each")
    res = chi2_test(sub, exact="never", warn=False, label=f"{x} x {y}")
    return dataclasses.replace(res, dropped=dropped)

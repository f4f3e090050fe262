"""Agreement between annotators: Krippendorff's alpha and the Jaccard index of label sets.

Krippendorff's alpha (Krippendorff 2011, "Computing Krippendorff's alpha-reliability"; docs/METHODS.md §13.4)
for a units x coders matrix with missing values, from the coincidence matrix
``o_ck = sum_u (n_uc n_uk - [c = k] n_uc) / (m_u - 1)`` over the units with ``m_u >= 2`` values:
``alpha = 1 - (n - 1) sum_ck o_ck d_ck / sum_ck n_c n_k d_ck`` with ``n_c = sum_k o_ck``, ``n = sum_c n_c``
and the difference function ``d`` of the level of measurement (nominal, ordinal, interval, ratio).
The coincidence matrix is one matrix product of the units x values count matrix, so the bootstrap over
units is a batch of weighted products, no loop over units or replicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError
from fairvision.stats.resample import DEFAULT_LEVEL, cluster_bootstrap
from fairvision.stats.results import Estimate

#: levels of measurement of :func:`krippendorff_alpha`
METRICS = ("nominal", "ordinal", "interval", "ratio")


@dataclass
class AlphaResult(Estimate):
    """Krippendorff's alpha with a bootstrap interval over units.

    Attributes
    ----------
    estimate, ci_low, ci_high, level
        Alpha and its percentile interval (NaN bounds without a bootstrap).
    n_units : int
        Units with at least two values (pairable).
    n_values : int
        Pairable values ``n``.
    metric : str
        Level of measurement.
    """

    n_units: int = 0
    n_values: int = 0
    metric: str = "nominal"


def _codes(data) -> tuple[np.ndarray, np.ndarray]:
    """Integer value codes (-1 missing) of a units x coders table and the sorted distinct values."""
    df = pd.DataFrame(data)
    flat = df.to_numpy(dtype=object).ravel()
    miss = pd.isna(flat)
    vals = flat[~miss]
    try:
        uniq = np.unique(vals.astype(float)) if vals.size and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in vals) else None
    except (TypeError, ValueError):
        uniq = None
    if uniq is not None:
        codes = np.full(flat.size, -1, np.int64)
        codes[~miss] = np.searchsorted(uniq, vals.astype(float))
        return codes.reshape(df.shape), uniq
    c, u = pd.factorize(pd.Series(vals).astype(str), sort=True)
    codes = np.full(flat.size, -1, np.int64)
    codes[~miss] = c
    return codes.reshape(df.shape), np.asarray(u, dtype=object)


def _difference(values: np.ndarray, marginals: np.ndarray, metric: str) -> np.ndarray:
    """Squared difference ``d_ck`` of every pair of values (Krippendorff 2011, section C).

    ``marginals`` has shape (m, k); the result (m, k, k) (the ordinal distance depends on the marginals).
    """
    k = len(values)
    m = marginals.shape[0]
    if metric == "nominal":
        return np.broadcast_to(1.0 - np.eye(k), (m, k, k))
    if metric == "ordinal":
        cum = np.concatenate([np.zeros((m, 1)), np.cumsum(marginals, axis=1)], axis=1)
        lo, hi = np.minimum.outer(np.arange(k), np.arange(k)), np.maximum.outer(np.arange(k), np.arange(k))
        s = cum[:, hi + 1] - cum[:, lo] - (marginals[:, lo] + marginals[:, hi]) / 2
        return s ** 2
    v = values.astype(float)
    if metric == "interval":
        d = np.subtract.outer(v, v) ** 2
    elif metric == "ratio":
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.nan_to_num((np.subtract.outer(v, v) / np.add.outer(v, v)) ** 2, nan=0.0)
    else:
        raise FairvisionError(f"unknown level of measurement {metric!r}; choose one of {', '.join(METRICS)}")
    return np.broadcast_to(d, (m, k, k))


def coincidence_matrix(data) -> pd.DataFrame:
    """Krippendorff's coincidence matrix of a units x coders table (docs/METHODS.md §13.4).

    Parameters
    ----------
    data : array_like or pandas.DataFrame, shape (n_units, n_coders)
        One row per unit (item), one column per coder; NaN / None for a missing value.

    Returns
    -------
    pandas.DataFrame
        ``o_ck`` indexed and labelled by the distinct values; units with fewer than two values are left out.
    """
    codes, values = _codes(data)
    o, _ = _coincidences(codes, len(values), None)
    return pd.DataFrame(o[0], index=values, columns=values)


def _coincidences(codes: np.ndarray, k: int, weights: np.ndarray | None):
    """Coincidence matrices, shape (m, k, k), under unit weights (m, n_units); and the pairable-unit mask."""
    n_units = codes.shape[0]
    ok = codes >= 0
    rows = np.repeat(np.arange(n_units), codes.shape[1])[ok.ravel()]
    counts = np.zeros((n_units, k))
    np.add.at(counts, (rows, codes.ravel()[ok.ravel()]), 1.0)
    m = counts.sum(1)
    pair = m >= 2
    counts, m = counts[pair], m[pair]
    w = np.ones((1, n_units)) if weights is None else np.asarray(weights, dtype=float)
    w = w[:, pair] / (m - 1)[None, :]
    # o[b] = N^T diag(w_b) N - diag(sum_u w_bu n_uc)
    o = np.einsum("bu,uc,uk->bck", w, counts, counts, optimize=True)
    diag = w @ counts
    idx = np.arange(k)
    o[:, idx, idx] -= diag
    return o, pair


def _alpha_from(o: np.ndarray, values: np.ndarray, metric: str) -> np.ndarray:
    nc = o.sum(2)
    n = nc.sum(1)
    d = _difference(values, nc, metric)
    obs = (o * d).sum((1, 2))
    exp = np.einsum("bc,bk,bck->b", nc, nc, d)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(exp > 0, 1.0 - (n - 1) * obs / np.where(exp > 0, exp, 1), np.nan)


def krippendorff_alpha(
    data,
    metric: str = "nominal",
    *,
    n_boot: int = 0,
    level: float = DEFAULT_LEVEL,
    seed: np.random.Generator | int | None = 0,
    clusters=None,
) -> AlphaResult:
    """Krippendorff's alpha of a units x coders table with missing values (docs/METHODS.md §13.4).

    Parameters
    ----------
    data : array_like or pandas.DataFrame, shape (n_units, n_coders)
        One row per unit, one column per coder (annotator); NaN / None where a coder gave no value. Values
        are numbers or labels (labels only for ``"nominal"``).
    metric : {"nominal", "ordinal", "interval", "ratio"}
        Level of measurement: the difference function of Krippendorff (2011).
    n_boot : int
        Bootstrap replicates for the interval (0: no interval). Units are resampled (or ``clusters`` of
        units, e.g. the subject of each unit) with :func:`fairvision.stats.resample.cluster_bootstrap`.
    level : float
        Two-sided level of the interval.
    seed : int, numpy.random.Generator or None
        Randomness of the bootstrap.
    clusters : array_like (n_units,), optional
        Cluster (subject) of every unit for the bootstrap; default every unit its own cluster.

    Returns
    -------
    AlphaResult
        ``estimate`` is alpha: 1 for perfect agreement, 0 for agreement at chance, negative below chance;
        NaN with fewer than two pairable values or no variation (every value the same).
    """
    if metric not in METRICS:
        raise FairvisionError(f"unknown level of measurement {metric!r}; choose one of {', '.join(METRICS)}")
    codes, values = _codes(data)
    if metric != "nominal" and values.dtype == object:
        raise FairvisionError(f"krippendorff_alpha: the {metric} level needs numeric values")
    k = len(values)
    o, pair = _coincidences(codes, k, None)
    est = float(_alpha_from(o, values, metric)[0]) if k else float("nan")
    n_values = int(o[0].sum()) if k else 0
    lo = hi = float("nan")
    if n_boot > 0 and k and pair.any():
        if clusters is None:
            cl = np.arange(codes.shape[0])
        else:
            cl, _ = pd.factorize(pd.Series(np.asarray(clusters)), sort=False)
            if cl.size != codes.shape[0]:
                raise FairvisionError(f"krippendorff_alpha: {codes.shape[0]} units but {cl.size} clusters")
        def stat(w):  # each unit weighted by its cluster's draw count
            return _alpha_from(_coincidences(codes, k, w[..., cl])[0], values, metric)

        res = cluster_bootstrap(stat, cl, n_boot=n_boot, level=level, seed=seed)
        lo, hi = float(res.ci_low), float(res.ci_high)
    return AlphaResult(est, lo, hi, level, n_units=int(pair.sum()), n_values=n_values, metric=metric)


def label_indicators(labels, vocabulary=None) -> tuple[np.ndarray, list]:
    """Boolean indicator matrix of label sets, for :func:`jaccard`.

    Parameters
    ----------
    labels : sequence
        One entry per item: a label, a list / set of labels (multi-label), or None / NaN (no label).
    vocabulary : sequence, optional
        Label order (default: the sorted distinct labels).

    Returns
    -------
    indicators : numpy.ndarray of bool, shape (n_items, n_labels)
    vocabulary : list
    """
    sets = []
    for v in labels:
        if isinstance(v, (list, tuple, set, frozenset, np.ndarray)):
            sets.append({str(x) for x in v if not pd.isna(x)})
        elif v is None or (not isinstance(v, str) and pd.isna(v)):
            sets.append(set())
        else:
            sets.append({str(v)})
    vocab = sorted(set().union(*sets)) if vocabulary is None else [str(x) for x in vocabulary]
    pos = {lab: i for i, lab in enumerate(vocab)}
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    cols = np.fromiter((pos[x] for s in sets for x in s), dtype=np.int64, count=int(rows.size))
    out = np.zeros((len(sets), len(vocab)), dtype=bool)
    out[rows, cols] = True
    return out, vocab


def jaccard(a, b) -> np.ndarray:
    """Jaccard index ``|A ∩ B| / |A ∪ B|`` of paired label sets (docs/METHODS.md §13.4).

    Parameters
    ----------
    a, b : array_like of bool, shape (n_items, n_labels)
        Indicator matrices of the two coders' label sets (see :func:`label_indicators`; a single-label
        attribute gives 1 for the same label, 0 otherwise).

    Returns
    -------
    numpy.ndarray, shape (n_items,)
        1 where both sets are empty (both coders say no label applies).
    """
    x = np.asarray(a, dtype=bool)
    y = np.asarray(b, dtype=bool)
    if x.shape != y.shape:
        raise FairvisionError(f"jaccard: indicator shapes differ: {x.shape} vs {y.shape}")
    x = x.reshape(len(x), -1)
    y = y.reshape(len(y), -1)
    inter = (x & y).sum(1)
    union = (x | y).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 1.0)

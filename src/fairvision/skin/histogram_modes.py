"""Histogram modes of skin pixel values: Sturges' rule, the mode of one histogram, and the modes of many
groups of pixels at once (docs/METHODS.md §2.2).

The Thong et al. estimators (:mod:`fairvision.skin.thong`, :mod:`fairvision.skin.thong_published`) take
the mode of each cluster's L* and h* histogram; these functions compute those modes, vectorised over the
clusters (:func:`cluster_histogram_modes`) or over the rows of a histogram on a regular grid
(:func:`grid_modes`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["sturges_bins", "histogram_mode", "cluster_histogram_modes", "grid_modes"]


def sturges_bins(n: int) -> int:
    """Number of histogram bins by Sturges' rule, ceil(log2 n + 1) (as numpy's ``bins='sturges'``)."""
    return int(np.ceil(np.log2(max(int(n), 1)) + 1.0))


def histogram_mode(x: np.ndarray, *, edge: str = "center") -> float:
    """Mode of a Sturges-rule histogram of ``x``.

    Parameters
    ----------
    x : 1-D array
    edge : {"center", "left"}
        Report the centre of the fullest bin (default) or its left edge (the
        published code's choice, biased low by half a bin). Ties go to the
        first (lowest) bin, like ``numpy.argmax``.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return float("nan")
    if edge == "left":
        counts, edges = np.histogram(x, bins="sturges")
        return float(edges[counts.argmax()])
    lo, hi = float(x.min()), float(x.max())
    if hi == lo:
        return lo
    counts, edges = np.histogram(x, bins=sturges_bins(x.size), range=(lo, hi))
    j = int(counts.argmax())
    return float(0.5 * (edges[j] + edges[j + 1]))


def _sturges(counts: np.ndarray) -> np.ndarray:
    """:func:`sturges_bins` of every entry of ``counts``."""
    return np.ceil(np.log2(np.maximum(np.asarray(counts, dtype=np.int64), 1)) + 1.0).astype(np.int64)


def _group_sort(groups: np.ndarray, X: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Group sizes and the columns of ``X`` (d, N) reordered by group (one stable O(N) radix sort of
    the small-integer group labels)."""
    groups = np.asarray(groups)
    counts = np.bincount(groups, minlength=G)
    key = groups.astype(np.uint8 if G <= 256 else np.uint16 if G <= 65536 else np.int64, copy=False)
    return counts, X.take(np.argsort(key, kind="stable"), axis=1)


def _sorted_modes(xs: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sturges-histogram mode (bin centre) of every row of ``xs`` (d, N) within each run of
    ``counts`` consecutive columns (the groups, in order). ``xs`` is overwritten.

    Group ranges come from ``reduceat`` and all (row, group, bin) counts from one ``bincount``.
    Bin indices follow ``numpy.histogram`` (``floor((x - lo) * nbins / (hi - lo))``, the maximum
    going into the last bin), computed in the dtype of ``xs``. Returns (G, d) float64 modes,
    NaN for empty groups.
    """
    counts = np.asarray(counts)
    d = xs.shape[0]
    modes = np.full((counts.size, d), np.nan)
    nz = np.flatnonzero(counts)
    if nz.size == 0:
        return modes
    cnt = counts[nz]
    ng = nz.size
    starts = np.cumsum(cnt) - cnt
    lo = np.minimum.reduceat(xs, starts, axis=1)  # (d, ng)
    span = np.maximum.reduceat(xs, starts, axis=1) - lo
    nb = _sturges(cnt)
    norm = np.divide(nb.astype(xs.dtype), span, out=np.zeros_like(span), where=span > 0)
    stride = int(nb.max()) + 1  # one spare slot per group: the group maximum lands in bin nb
    offs = np.arange(ng) * stride  # flat bin offset of each group
    ends = starts + cnt
    for i in range(ng):  # in place on each group's contiguous slice (no per-pixel parameter arrays)
        part = xs[:, starts[i]:ends[i]]
        part -= lo[:, i:i + 1]
        part *= norm[:, i:i + 1]
    idx = np.empty(xs.shape[1], dtype=np.intp)  # one row at a time (a small reused buffer)
    hist = np.empty((d, ng, stride), dtype=np.intp)
    for j in range(d):
        np.copyto(idx, xs[j], casting="unsafe")  # floor of non-negative values
        for i in range(ng):
            idx[starts[i]:ends[i]] += offs[i]
        hist[j] = np.bincount(idx, minlength=ng * stride).reshape(ng, stride)
    r = np.arange(ng)
    hist[:, r, nb - 1] += hist[:, r, nb]  # the maximum goes into the last bin
    hist[:, r, nb] = 0
    b = hist.argmax(axis=2)  # ties to the lowest bin
    lo = lo.astype(np.float64)
    span = span.astype(np.float64)
    modes[nz] = np.where(span > 0, lo + (b + 0.5) * span / nb, lo).T
    return modes


def _grouped_modes(groups: np.ndarray, X: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Group sizes (G,) and Sturges-histogram modes (G, d) of every row of ``X`` (d, N) within every group."""
    counts, xs = _group_sort(groups, X, G)
    return counts, _sorted_modes(xs, counts)


def cluster_histogram_modes(labels: np.ndarray, cols: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sturges-histogram mode (bin centre) of every column within every cluster, vectorised.

    Equivalent to calling :func:`histogram_mode` per cluster and column, but
    all clusters and columns are binned at once: pixels are grouped by cluster
    with one O(N) radix sort, per-cluster ranges come from ``reduceat`` and
    the per-(column, cluster, bin) counts from one ``bincount``. Bin indices
    follow ``numpy.histogram`` (``floor((x - lo) * nbins / (hi - lo))``, the
    maximum going into the last bin).

    Returns
    -------
    counts : (k,) int
        Cluster sizes.
    modes : (k, len(cols)) float
        NaN for empty clusters.
    """
    X = np.stack([np.asarray(c) for c in cols])
    if not np.issubdtype(X.dtype, np.floating):
        X = X.astype(np.float64)
    return _grouped_modes(labels, X, k)


def grid_modes(hist: np.ndarray) -> np.ndarray:
    """Sturges-histogram mode of every row of a histogram on a regular grid, in grid units.

    Row ``g`` of ``hist`` (G, V) counts the values ``0, 1, ..., V-1`` (cell indices). Its mode is
    what :func:`histogram_mode` returns for those values repeated by their counts: Sturges' number
    of bins ``nb`` for the row's total over the range ``[lo, hi]`` of its occupied cells; value ``j``
    falls in bin ``floor((j - lo) nb / (hi - lo))`` in exact integer arithmetic (the maximum in the
    last bin); the fullest bin (ties to the lowest) gives ``lo + (b + 1/2)(hi - lo)/nb``. Vectorised over
    rows (docs/METHODS.md §2.2). Returns (G,) float, NaN for empty rows.
    """
    hist = np.asarray(hist)
    G, V = hist.shape
    occ = hist > 0
    has = occ.any(axis=1)
    lo = occ.argmax(axis=1)
    hi = V - 1 - occ[:, ::-1].argmax(axis=1)
    span = np.maximum(hi - lo, 0)
    nb = _sturges(hist.sum(axis=1).round())
    stride = int(nb.max())
    if hist.dtype.kind in "iu":  # (np.issubdtype costs more than this whole branch on a few rows)
        # bin t holds the cells lo + [ceil(t span / nb), ceil((t + 1) span / nb)) and the last bin also hi (the
        # same integer binning): its count is a difference of the row's cumulative counts at those edges
        t = np.arange(stride + 1)[None, :]
        edges = lo[:, None] - (-t * np.maximum(span, 1)[:, None]) // nb[:, None]
        np.copyto(edges, (hi + 1)[:, None], where=t >= nb[:, None])
        cum = np.zeros((G, V + 1), dtype=np.int64)
        np.cumsum(hist, axis=1, out=cum[:, 1:])
        at = cum[np.arange(G)[:, None], edges]
        best = np.subtract(at[:, 1:], at[:, :-1]).argmax(axis=1)  # ties to the lowest bin
    else:
        b = (np.arange(V)[None, :] - lo[:, None]) * nb[:, None] // np.maximum(span, 1)[:, None]
        np.maximum(b, 0, out=b)  # cells outside [lo, hi] are empty
        np.minimum(b, (nb - 1)[:, None], out=b)
        counts = np.bincount((b + (np.arange(G) * stride)[:, None]).ravel(),
                             weights=hist.ravel().astype(np.float64), minlength=G * stride).reshape(G, stride)
        best = counts.argmax(axis=1)
    out = np.where(span > 0, lo + (best + 0.5) * span / nb, lo.astype(np.float64))
    out[~has] = np.nan
    return out

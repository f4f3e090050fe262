"""Skin colour estimators over the skin pixels of one image.

Each estimator turns the CIELAB values of one image's skin pixels into one
colour (L*, a*, b*, hue, chroma, ITA). They are pure numpy functions of the
pixel arrays; :func:`fairvision.skin.measurement.measure` adds image reading, masks,
smoothing, spread, stability and quality flags.

Methods
-------
``thong``
    Thong et al. (ICCV 2023; docs/METHODS.md §2.2), made deterministic and
    order-free. The skin pixels are summarised by a histogram of
    (L*, signed h*) on a fixed grid (cells of 0.25 L* x 0.5 deg, halved while
    wider than 1/8 of the Sturges bin of all pixels over their range; every
    pixel counts at its cell's centre), which is the same for any order of
    the pixels and for a mirrored image. K-Means (k = 5) runs on the
    non-empty cells with their counts as weights: quantile seeds from the
    weighted histogram, weighted Lloyd to a fixed point on blocks of 16 x 16
    and then 4 x 4 cells (each at the weighted mean of its cells), then
    every pixel goes to its nearest centre. For each cluster the mode of a
    Sturges-rule histogram of its L* (and h*, C*) cell values (bin centre,
    exact integer binning; all clusters at once); keep the 3 clusters with
    the highest L* mode; pixel-count-weighted mean of their modes. Hue is
    clustered and averaged as a signed angle in (-180, 180] so that reddish
    pixels just below 0 deg (b* < 0) stay next to those just above it; the
    result is reported in [0, 360). Chroma is estimated the same way as L*
    and h* (weighted mean of the kept clusters' chroma modes), so
    a* = C cos h, b* = C sin h; the paper itself only defines L* and h*.
    The stability bootstrap (:func:`thong_bootstrap`) redraws all n pixels
    as multinomial counts over the same summary. Cost on a 1024 x 1024
    portrait with 108k skin pixels: about 9.7 ms for the whole
    :func:`fairvision.skin.measurement.measure` (smoothing, CIELAB,
    estimate, spread, flags) and 1.8 ms more for the 10-replicate stability
    bootstrap (benchmarks/bench_skin_estimator.py).
``thong-published``
    The published code's choices (SonyResearch/apparent_skincolor): scikit-learn
    ``KMeans(5, n_init=1, random_state=2021)`` (k-means++ seeding), hue
    arctan(b*/a*) (a* < 0 gives negative angles), the histogram mode at the
    LEFT bin edge, and Gaussian smoothing of the whole image (background
    included) before the mask is applied. Kept for comparison with published
    numbers; its answer depends on the seed. Smoothing runs in float64 and
    CIELAB follows scikit-image's ``rgb2lab`` constants (:func:`published_lab`),
    so the published numbers are reproduced exactly (docs/METHODS.md §2.2:
    60.3 / 28.0 with ``n_init=1`` and 58.1 / 62.3 with ``n_init=10`` on the
    reference sample).
``mean``
    Mean L*, a*, b* of the skin pixels (BiasPainter-style mean colour).
``median_ita``
    Khaziev et al.: the median of the per-pixel ITA. L*, a*, b* are reported
    as per-channel medians.
``gray_mean``
    BiasPainter (docs/METHODS.md §2.3): mean grey level (BT.601 luma, 0-255)
    of the face-skin pixels. L*, a*, b* are the mean Lab.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.skin.colour import hue_angle, ita as _ita

__all__ = [
    "METHODS",
    "sturges_bins",
    "histogram_mode",
    "cluster_histogram_modes",
    "kmeans_lloyd",
    "quantile_seeds",
    "weighted_quantile_seeds",
    "grid_modes",
    "cell_size",
    "thong",
    "thong_features",
    "thong_from_features",
    "thong_bootstrap",
    "ThongFit",
    "thong_published",
    "mean",
    "median_ita",
    "gray_mean",
    "estimate",
    "published_lab",
]

METHODS = ("thong", "thong-published", "mean", "median_ita", "gray_mean")


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


def quantile_seeds(X: np.ndarray, k: int) -> np.ndarray:
    """Deterministic K-Means seeds: sort by the first column (L*), cut into ``k``
    equal-count slices and take each slice's mean."""
    order = np.argsort(X[:, 0], kind="stable")
    return np.array([X[idx].mean(axis=0) for idx in np.array_split(order, k)])


def _nearest(Xc: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Index of the nearest centre for every column of the centred planar data ``Xc`` (d, N)
    (ties to the lowest index). Squared distances minus the constant |x|^2 come from
    ``(k, d) @ (d, N)`` products, |x - c|^2 - |x|^2 = |c|^2 - 2 c.x, in blocks of
    :data:`_BLOCK` columns (one small distance buffer, reused: cache-friendly, no large temporaries)."""
    W = (-2.0 * C).astype(Xc.dtype)
    c2 = (C ** 2).sum(axis=1).astype(Xc.dtype)[:, None]
    n = Xc.shape[1]
    if n <= _BLOCK:
        D = W @ Xc
        D += c2
        return _argmin_rows(D)
    labels = np.empty(n, dtype=np.uint8 if C.shape[0] < 256 else np.intp)
    D = np.empty((C.shape[0], _BLOCK), dtype=Xc.dtype)
    for s in range(0, n, _BLOCK):
        e = min(s + _BLOCK, n)
        Db = np.matmul(W, Xc[:, s:e], out=D[:, : e - s])
        Db += c2
        labels[s:e] = _argmin_rows(Db)
    return labels


_BLOCK = 32768


def _argmin_rows(D: np.ndarray) -> np.ndarray:
    """``D.argmin(axis=0)`` for a short first axis, as k branch-free passes over N (numpy's argmin
    along a short axis and boolean-mask assignment are both slow); ties go to the lowest index."""
    best = D[0].copy()
    labels = np.zeros(D.shape[1:], dtype=np.uint8 if D.shape[0] < 256 else np.intp)
    for j in range(1, D.shape[0]):
        closer = D[j] < best
        np.minimum(best, D[j], out=best)
        # j exceeds every label so far, so max(labels, j * closer) sets exactly the closer rows to j
        np.maximum(labels, closer.view(np.uint8) * labels.dtype.type(j) if labels.dtype == np.uint8
                   else closer * j, out=labels)
    return labels


def kmeans_lloyd(X: np.ndarray, centers: np.ndarray, *, sample_weight: np.ndarray | None = None, max_iter: int = 300,
                 tol: float = 1e-4) -> tuple[np.ndarray, np.ndarray, int]:
    """Lloyd's algorithm, vectorised and deterministic.

    Stops when no assignment changes or when the total squared centre shift
    falls to ``tol`` times the mean per-feature variance (scikit-learn's
    criterion); the returned labels are the nearest-centre assignment to the
    returned centres. Squared distances come from one ``(k, 3) @ (3, N)``
    product on centred data (|x - c|^2 minus the constant |x|^2). An empty
    cluster keeps its previous centre. With ``sample_weight`` the centres are
    weighted means and the variance in the stopping rule is weighted (what
    :func:`thong` runs on its histogram cells, docs/METHODS.md §2.2; all in float64).

    Returns
    -------
    labels : (N,) int
    centers : (k, d)
    n_iter : int
    """
    if sample_weight is not None:
        return _weighted_lloyd(np.asarray(X, dtype=np.float64).T, sample_weight, centers, max_iter=max_iter, tol=tol)
    X = np.asarray(X, dtype=np.float64)
    mu = X.mean(axis=0)
    cols = [np.ascontiguousarray(X[:, d] - mu[d]) for d in range(X.shape[1])]  # contiguous for bincount
    Xc = np.array(cols, dtype=np.float32)
    labels, C, it = _lloyd(Xc, cols, np.array(centers, dtype=np.float64) - mu, max_iter=max_iter, tol=tol)
    return labels, C + mu, it


def _lloyd(Xc: np.ndarray, cols, C: np.ndarray, *, max_iter: int = 300, tol: float = 1e-4):
    """Lloyd's algorithm on centred planar data ``Xc`` (d, N) (float32, for the distances) with the
    centred feature rows ``cols`` (for the centre updates) from centred centres ``C``; see
    :func:`kmeans_lloyd`."""
    C = np.array(C, dtype=np.float64)
    k = C.shape[0]
    thresh = tol * float(np.mean([np.var(col, dtype=np.float64) for col in cols]))
    nd, n = Xc.shape
    if n > _BLOCK:
        nearest = _nearest
    else:  # small: [x, 1] rows and reused buffers, so one product gives |c|^2 - 2 c.x
        X1 = np.empty((nd + 1, n), dtype=np.float32)
        X1[:nd] = Xc
        X1[nd] = 1.0
        W = np.empty((k, nd + 1), dtype=np.float32)
        D = np.empty((k, n), dtype=np.float32)

        def nearest(_, C):
            W[:, :nd] = -2.0 * C
            W[:, nd] = (C * C).sum(axis=1)
            return _argmin_rows(np.matmul(W, X1, out=D))
    labels = None
    it = 0
    for it in range(1, max_iter + 1):
        new = nearest(Xc, C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        li = labels.astype(np.intp)  # once, not in every bincount
        counts = np.bincount(li, minlength=k)
        nz = counts > 0
        C_old = C.copy()
        for d, col in enumerate(cols):
            np.divide(np.bincount(li, weights=col, minlength=k), counts, out=C[:, d], where=nz)
        shift = C - C_old
        if np.vdot(shift, shift) <= thresh:
            labels = nearest(Xc, C)
            break
    return labels, C, it


def _cluster_modes(labels: np.ndarray, cols: list[np.ndarray], k: int, edge: str):
    """Per-cluster histogram modes, one ``numpy.histogram`` call per cluster and column."""
    counts = np.bincount(labels, minlength=k)
    modes = np.full((k, len(cols)), np.nan)
    for c in range(k):
        if counts[c]:
            sel = labels == c
            for j, col in enumerate(cols):
                modes[c, j] = histogram_mode(col[sel], edge=edge)
    return counts, modes


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


def _combine_top(counts, modes, top):
    valid = np.flatnonzero(counts > 0)
    order = valid[np.argsort(-modes[valid, 0], kind="stable")][:top]
    w = counts[order].astype(np.float64)
    est = (modes[order] * w[:, None]).sum(axis=0) / w.sum()
    spread = np.sqrt(((modes[order] - est) ** 2 * w[:, None]).sum(axis=0) / w.sum())
    return est, spread, order


def _result(L, a, b, hue, ita_value=None, gray=None, **extra) -> dict:
    lab = np.array([L, a, b], dtype=np.float64)
    return {
        "L": float(L),
        "a": float(a),
        "b": float(b),
        "hue": float(hue_angle(lab)),
        "chroma": float(np.hypot(a, b)),
        "ita": float(_ita(lab)) if ita_value is None else float(ita_value),
        "gray": None if gray is None else float(gray),
        "extra": extra,
    }


def thong_features(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pixel (L*, signed h*, C*) in float32: what :func:`thong` summarises."""
    lab = np.asarray(lab)
    a = np.ascontiguousarray(lab[:, 1], dtype=np.float32)
    b = np.ascontiguousarray(lab[:, 2], dtype=np.float32)
    h = np.arctan2(b, a)
    h *= np.float32(180.0 / np.pi)  # degrees in (-180, 180]
    C = a * a
    C += b * b
    np.sqrt(C, out=C)
    return np.ascontiguousarray(lab[:, 0], dtype=np.float32), h, C


#: Largest cell size of the order-free summary of :func:`thong` (docs/METHODS.md §2.2): L* units, degrees of h*,
#: C* units. Every skin pixel counts at the centre of its cell. A cell is halved (see :func:`cell_size`) until
#: it is at most 1/:data:`CELLS_PER_BIN` of the Sturges bin of all the pixels over their range, so a
#: cluster's Sturges bins are many cells wide.
CELL_L, CELL_H, CELL_C = 0.25, 0.5, 0.25
CELLS_PER_BIN = 8


def cell_size(x: np.ndarray, largest: float, n: int | None = None) -> float:
    """Cell size of the :func:`thong` summary for the values ``x``: ``largest`` halved until it is at most
    ``(max x - min x) / (CELLS_PER_BIN * sturges_bins(n))`` (at most 12 halvings; docs/METHODS.md §2.2).
    Depends on the values only through their range, so not on their order."""
    n = x.size if n is None else n
    target = (float(x.max()) - float(x.min())) / (CELLS_PER_BIN * sturges_bins(n))
    step = float(largest)
    if target <= 0:  # all values equal: nothing to resolve
        return step
    for _ in range(12):
        if step <= target:
            break
        step *= 0.5
    return step
#: Coarse-to-fine clustering: Lloyd's algorithm first on blocks of 16 x 16 cells (4 L* x 8 deg), then of
#: 4 x 4 cells (1 L* x 2 deg), then on the cells themselves.
COARSE_BLOCKS = (16, 4)


def weighted_quantile_seeds(X: np.ndarray, w: np.ndarray, k: int, *, ordered: bool = False) -> np.ndarray:
    """Deterministic K-Means seeds of weighted points ``X`` (d, M) (docs/METHODS.md §2.2).

    Order the points by the first row (L*; ties keep the given order; ``ordered=True``: they already
    are), cut the cumulative weight into ``k`` equal parts (a point on a cut is split between the two
    parts) and take each part's weighted mean: :func:`quantile_seeds` of the pixels the weights stand for.
    """
    if ordered:
        Xs, ws = X, w
    else:
        order = np.argsort(X[0], kind="stable")
        Xs, ws = X[:, order], w[order]
    cum = np.cumsum(ws)
    start = cum - ws
    cuts = cum[-1] * np.arange(k + 1) / k
    first = np.searchsorted(cum, cuts[:-1], side="right")  # the points each part overlaps: first ...
    last = np.minimum(np.searchsorted(cum, cuts[1:], side="left") + 1, cum.size)  # ... to last (exclusive)
    seeds = np.empty((k, X.shape[0]))
    for j in range(k):
        sl = slice(first[j], max(last[j], first[j] + 1))
        part = np.clip(np.minimum(cum[sl], cuts[j + 1]) - np.maximum(start[sl], cuts[j]), 0.0, None)
        seeds[j] = (Xs[:, sl] @ part) / part.sum()
    return seeds


def _weighted_lloyd(X: np.ndarray, w: np.ndarray, C: np.ndarray, *, max_iter: int = 300, tol: float = 1e-4):
    """Lloyd's algorithm on weighted points ``X`` (d, M) (float64) from centres ``C`` (k, d).

    Distances |c|^2 - 2 c.x (the constant |x|^2 dropped) from one ``(k, d+1) @ (d+1, M)`` product; ties
    to the lowest index; an empty cluster keeps its centre. Stops when no assignment changes or when the
    total squared centre shift is at most ``tol`` times the mean weighted per-feature variance
    (scikit-learn's rule, on the pixels the weights stand for), then reassigns once. Returns labels (M,),
    centres (k, d) and the number of iterations.
    """
    X = np.asarray(X, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    C = np.array(C, dtype=np.float64)
    k, d = C.shape
    thresh = 0.0
    if tol > 0:
        W = float(w.sum())
        mean = (X @ w) / W
        thresh = tol * float((((X - mean[:, None]) ** 2) @ w).mean() / W)
    X1 = np.vstack([X, np.ones((1, X.shape[1]))])
    wX = X * w
    Wm = np.empty((k, d + 1))

    def nearest(C):
        Wm[:, :d] = -2.0 * C
        Wm[:, d] = (C * C).sum(axis=1)
        return _argmin_rows(Wm @ X1)

    labels = None
    it = 0
    for it in range(1, max_iter + 1):
        new = nearest(C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        cnt = np.bincount(labels, weights=w, minlength=k)
        nz = cnt > 0
        C_old = C.copy()
        for j in range(d):
            np.divide(np.bincount(labels, weights=wX[j], minlength=k), cnt, out=C[:, j], where=nz)
        shift = C - C_old
        if np.vdot(shift, shift) <= thresh:
            labels = nearest(C)
            break
    return labels, C, it


def _sq_dist_rows(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """|x - c|^2 - |x|^2 = |c|^2 - 2 c.x for every centre (rows) and point ``X`` (d, M) (columns)."""
    D = (-2.0 * C) @ X
    D += (C * C).sum(axis=1)[:, None]
    return D


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
    b = (np.arange(V)[None, :] - lo[:, None]) * nb[:, None] // np.maximum(span, 1)[:, None]
    np.clip(b, 0, (nb - 1)[:, None], out=b)  # cells outside [lo, hi] are empty
    stride = int(nb.max())
    counts = np.bincount((b + (np.arange(G) * stride)[:, None]).ravel(), weights=hist.ravel().astype(np.float64),
                         minlength=G * stride).reshape(G, stride)
    best = counts.argmax(axis=1)
    out = np.where(span > 0, lo + (best + 0.5) * span / nb, lo.astype(np.float64))
    out[~has] = np.nan
    return out


class ThongFit:
    """The order-free summary behind a :func:`thong` estimate (docs/METHODS.md §2.2).

    Attributes
    ----------
    cells : (2, M) float64
        (L*, signed h*) centres of the non-empty histogram cells, in canonical (L*, then h*) order.
    weights : (M,) int64
        Pixels per cell.
    labels : (M,) int
        Cluster of each cell's centre (a cell that a cluster boundary crosses has pixels in both clusters).
    centers : (k, 2)
        Converged cluster centres (L*, signed h*).
    sizes : (k,) int64
        Pixels per cluster (every pixel in the cluster of its nearest centre).
    L_hist, h_hist : (k, V) int64
        Per-cluster marginal histograms on the L* and h* cell grids (what the modes are taken of).
    L0, h0 : float
        Value of the first grid column's centre (L* and h*).
    steps : (float, float)
        Cell size in L* and h* (:func:`cell_size`).
    ranges : ((float, float), (float, float))
        Smallest and largest pixel L* and h* (modes are clipped to them).
    k, top, n_iter : int
    """

    __slots__ = ("cells", "weights", "labels", "centers", "sizes", "L_hist", "h_hist", "L0", "h0", "steps", "ranges", "k",
                 "top", "n_iter")

    def __init__(self, **kw):
        for key, val in kw.items():
            setattr(self, key, val)

    @property
    def n(self) -> int:
        """Number of pixels summarised."""
        return int(self.weights.sum())


def _cell_index(x: np.ndarray, step: float, offset: float = 0.0) -> np.ndarray:
    """``floor((x + offset) / step)`` as int32, elementwise (so the same pixel always gets the same cell)."""
    y = x + np.float32(offset) if offset else x.copy()
    y *= np.float32(1.0 / step)
    np.floor(y, out=y)
    return y.astype(np.int32)


def _modes_to_values(idx: np.ndarray, first: float, step: float) -> np.ndarray:
    """Grid units (column 0 centred on ``first``) to values."""
    return first + idx * step


def _thong_fit(L, h, *, k: int = 5, top: int = 3, init_centers=None) -> tuple[ThongFit, np.ndarray]:
    """Histogram, clustering and per-cluster marginals (docs/METHODS.md §2.2); also returns every
    pixel's cluster (for the chroma histogram)."""
    n = L.shape[0]
    if n < k:
        raise FairvisionError(f"the thong estimator needs at least {k} pixels, got {n}")
    sL, sh = cell_size(L, CELL_L), cell_size(h, CELL_H)
    iL = _cell_index(L, sL)
    ih = _cell_index(h, sh, 180.0)
    np.clip(ih, 0, int(round(360.0 / sh)) - 1, out=ih)  # h* = 180 exactly joins the last cell
    iL0, ih0 = int(iL.min()), int(ih.min())
    nL, nh = int(iL.max()) - iL0 + 1, int(ih.max()) - ih0 + 1
    iL -= np.int32(iL0)  # grid row and column of every pixel
    ih -= np.int32(ih0)
    key = iL * np.int32(nh)
    key += ih
    counts = np.bincount(key, minlength=nL * nh)
    nz = np.flatnonzero(counts)
    w = counts[nz]
    row, col = np.divmod(nz, nh)
    L0 = (iL0 + 0.5) * sL
    h0 = (ih0 + 0.5) * sh - 180.0
    X = np.vstack([L0 + row * sL, h0 + col * sh])  # cell centres (binary fractions: sums are exact)
    wf = w.astype(np.float64)
    # quantile seeds from the cells, then Lloyd to a fixed point on blocks of 16 x 16 and then 4 x 4 cells (each
    # block at the weighted mean of its cells, so block sums are exact), each level from the previous centres
    if init_centers is None:  # the cells are in (L*, h*) order already
        C = weighted_quantile_seeds(X, wf, k, ordered=True)
    else:
        C = np.asarray(init_centers, dtype=np.float64).reshape(k, 2)
    n_iter = 0
    for block in COARSE_BLOCKS:
        bn = (nh + block - 1) // block
        bkey = (row // block) * bn + col // block
        bw = np.bincount(bkey, weights=wf)
        bnz = np.flatnonzero(bw)
        bwv = bw[bnz]
        BX = np.vstack([np.bincount(bkey, weights=wf * X[j])[bnz] / bwv for j in range(2)])
        _, C, it = _weighted_lloyd(BX, bwv, C, tol=0.0)  # to a fixed point: cheap on blocks
        n_iter += it
    # every pixel to the centre nearest its own (L*, h*) (float64; ties to the lowest index). A cell lies
    # wholly in one Voronoi region when its centre is closer to that region's centre than to any other by a
    # margin of more than 2 * (largest centre gap) * (half the cell diagonal); its pixels take the cell's
    # label, the pixels of the other cells are assigned one by one
    D = _sq_dist_rows(X, C)  # |c|^2 - 2 c.x for every cell centre, (k, M)
    labels = _argmin_rows(D)
    best = D.min(axis=0)
    D[labels, np.arange(labels.size)] = np.inf
    gap = float(np.sqrt(((C[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)).max())
    cut = D.min(axis=0) - best <= 2.0 * gap * (0.5 * np.hypot(sL, sh) * (1 + 1e-6) + 1e-9)  # slack for rounding
    table = np.zeros(nL * nh, dtype=np.int32)
    table[nz] = labels
    pl = table.take(key)
    if cut.any():
        flag = np.zeros(nL * nh, dtype=bool)
        flag[nz[cut]] = True
        idx = np.flatnonzero(flag.take(key))
        P = np.empty((3, idx.size))
        P[0] = L.take(idx)
        P[1] = h.take(idx)
        P[2] = 1.0
        W = np.empty((k, 3))
        W[:, :2] = -2.0 * C
        W[:, 2] = (C * C).sum(axis=1)
        pl[idx] = _argmin_rows(W @ P)
    L_hist = np.bincount(pl * np.int32(nL) + iL, minlength=k * nL).reshape(k, nL)
    h_hist = np.bincount(pl * np.int32(nh) + ih, minlength=k * nh).reshape(k, nh)
    sizes = L_hist.sum(axis=1).astype(np.int64)
    fit = ThongFit(cells=X, weights=w, labels=labels, centers=C, sizes=sizes, L_hist=L_hist, h_hist=h_hist,
                   L0=L0, h0=h0, steps=(sL, sh), ranges=((float(L.min()), float(L.max())), (float(h.min()), float(h.max()))),
                   k=k, top=top, n_iter=n_iter)
    return fit, pl


def thong_from_features(L, h, C, *, k: int = 5, top: int = 3, details: bool = True, init_centers=None):
    """The :func:`thong` estimate from precomputed :func:`thong_features`, and the summary behind it.

    Parameters
    ----------
    L, h, C : (N,) float32 arrays
        Per-pixel L*, signed hue angle h* (degrees) and chroma C*.
    k, top, details, init_centers
        As for :func:`thong`.

    Returns
    -------
    result : dict
        As :func:`thong` returns it.
    fit : ThongFit
        The histogram summary, clusters and marginals, for :func:`thong_bootstrap`.
    """
    L = np.ascontiguousarray(L, dtype=np.float32)
    h = np.ascontiguousarray(h, dtype=np.float32)
    C = np.ascontiguousarray(C, dtype=np.float32)
    fit, pixel_labels = _thong_fit(L, h, k=k, top=top, init_centers=init_centers)
    sC = cell_size(C, CELL_C)
    iC = _cell_index(C, sC)
    nC = int(iC.max()) + 1
    iC += pixel_labels * np.int32(nC)
    C_hist = np.bincount(iC, minlength=k * nC).reshape(k, nC)
    modes = np.column_stack([
        _modes_to_values(grid_modes(fit.L_hist), fit.L0, fit.steps[0]),
        _modes_to_values(grid_modes(fit.h_hist), fit.h0, fit.steps[1]),
        _modes_to_values(grid_modes(C_hist), 0.5 * sC, sC),
    ])
    # a cell centre can lie up to half a cell beyond the data (all-white skin: L* 100.125): clip to the pixels' range
    for j, (lo, hi) in enumerate((*fit.ranges, (float(C.min()), float(C.max())))):
        np.clip(modes[:, j], lo, hi, out=modes[:, j])
    est, spread, kept = _combine_top(fit.sizes, modes, top)
    Lm, hm, Cm = est
    rad = np.radians(hm)
    extra = {}
    if details:
        extra = {
            "cluster_centers": fit.centers.tolist(),
            "cluster_sizes": fit.sizes.tolist(),
            "cluster_modes": modes.tolist(),
            "kept_clusters": kept.tolist(),
            "L_mode_spread": float(spread[0]),
            "hue_mode_spread": float(spread[1]),
            "n_iter": int(fit.n_iter),
            "n_cells": int(fit.weights.size),
        }
    return _result(Lm, Cm * np.cos(rad), Cm * np.sin(rad), None, **extra), fit


def thong(lab: np.ndarray | None, *, k: int = 5, top: int = 3, details: bool = True,
          init_centers: np.ndarray | None = None, features: tuple | None = None) -> dict:
    """Deterministic, order-free Thong et al. estimator (docs/METHODS.md §2.2) on CIELAB pixels.

    The pixels are summarised by a histogram of (L*, signed h*) on a fixed grid of cells of at most
    :data:`CELL_L` x :data:`CELL_H` (:func:`cell_size`; every pixel counts at its cell's centre),
    which does not depend on the order of the pixels. K-Means (``k`` clusters) runs on the non-empty
    cells with their pixel counts as weights (quantile seeds from the weighted histogram, weighted
    Lloyd to a fixed point on blocks of 16 x 16 and then 4 x 4 cells, then every pixel to its nearest
    centre); the mode of each cluster's Sturges histogram of L*, h* (and C*, on its own grid of at
    most :data:`CELL_C`) is taken from its cells (:func:`grid_modes`); the ``top`` clusters with the
    highest L* mode are averaged, weighted by pixel count. The same pixels in any order give
    bit-identical results (so does a mirrored image with its mirrored mask through
    :func:`fairvision.skin.measurement.measure`, whose smoothing is mirror-exact).

    Parameters
    ----------
    lab : (N, 3) array
        CIELAB of the (already smoothed) skin pixels.
    k, top : int
        Number of clusters (5) and of kept clusters with the highest L* mode (3).
    init_centers : (k, 2) array, optional
        Start the clustering from these (L*, signed h*) centres instead of the quantile seeds.
    features : tuple of 3 arrays, optional
        Precomputed :func:`thong_features` (then ``lab`` is ignored).

    Returns
    -------
    dict with ``L``, ``a``, ``b``, ``hue`` (degrees, [0, 360)), ``chroma``,
    ``ita`` and ``extra`` (cluster centres, sizes, modes, kept clusters, the
    weighted spread of the kept modes as the published code reports, iterations and cells).
    """
    L, h, C = thong_features(lab) if features is None else features
    return thong_from_features(L, h, C, k=k, top=top, details=details, init_centers=init_centers)[0]


def thong_bootstrap(fit: ThongFit, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(L*, signed h*) estimates of ``n_boot`` bootstrap replicates of all ``n`` pixels (docs/METHODS.md §2.2).

    A replicate redraws the ``n`` pixels with replacement, as counts over the summary: the cluster
    sizes are multinomial with the full-sample cluster proportions, and within each cluster the L*
    and the h* histograms are multinomial with that cluster's L* and h* proportions (each exactly
    its distribution under pixel resampling; only the coupling between a cluster's L* and h*
    counts is dropped). Pixels keep their full-sample clusters: re-running the clustering per
    replicate (about 5 ms each on a 1024 x 1024 face) is left out, so the SD leaves out the times the
    quantile seeds would fall into another local optimum (docs/METHODS.md §2.2).
    The Sturges modes, the top-``top`` choice by L* mode and the count-weighted mean are recomputed
    for all replicates at once. All draws run over the canonical cell order, so the replicates do
    not depend on the order of the pixels either.

    Parameters
    ----------
    fit : ThongFit
        From :func:`thong_from_features`.
    n_boot : int
        Number of replicates.
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray, shape (n_boot, 2)
        Replicate estimates of L* and signed h*.
    """
    k, top, R = fit.k, fit.top, int(n_boot)
    n = fit.n
    sizes = rng.multinomial(n, fit.sizes / n, size=R)  # (R, k)
    Lh = np.zeros((R, k, fit.L_hist.shape[1]), dtype=np.int64)
    hh = np.zeros((R, k, fit.h_hist.shape[1]), dtype=np.int64)
    for c in range(k):
        if fit.sizes[c] == 0:
            continue
        for hist, out in ((fit.L_hist[c], Lh), (fit.h_hist[c], hh)):
            occ = np.flatnonzero(hist)  # only occupied cells can be drawn
            out[:, c, occ] = rng.multinomial(sizes[:, c], hist[occ] / fit.sizes[c])
    Lm = np.clip(_modes_to_values(grid_modes(Lh.reshape(R * k, -1)), fit.L0, fit.steps[0]), *fit.ranges[0]).reshape(R, k)
    hm = np.clip(_modes_to_values(grid_modes(hh.reshape(R * k, -1)), fit.h0, fit.steps[1]), *fit.ranges[1]).reshape(R, k)
    key = np.where(sizes > 0, -Lm, np.inf)
    kept = np.argsort(key, axis=1, kind="stable")[:, :top]
    w = np.take_along_axis(sizes, kept, axis=1).astype(np.float64)
    out = np.empty((R, 2))
    for j, m in enumerate((Lm, hm)):
        out[:, j] = (np.nan_to_num(np.take_along_axis(m, kept, axis=1)) * w).sum(axis=1) / w.sum(axis=1)
    return out


def thong_published(lab: np.ndarray, *, k: int = 5, top: int = 3, kmeans_seed: int = 2021, n_init: int = 1) -> dict:
    """The published Thong et al. choices (see module docstring), for comparison.

    The returned ``hue`` is the published arctan(b*/a*) angle (it can be
    negative); a*, b* are the weighted means of the kept clusters' a*, b* modes
    taken the same way (left bin edges).
    """
    from sklearn.cluster import KMeans

    lab = np.asarray(lab, dtype=np.float64)
    if lab.shape[0] < k:
        raise FairvisionError(f"the thong estimator needs at least {k} pixels, got {lab.shape[0]}")
    L = lab[:, 0]
    h = hue_angle(lab, convention="arctan")
    X = np.column_stack([L, h])
    labels = KMeans(k, n_init=n_init, random_state=kmeans_seed).fit(X).labels_
    counts, modes = _cluster_modes(labels, [L, h, lab[:, 1], lab[:, 2]], k, "left")
    est, spread, kept = _combine_top(counts, modes, top)
    out = _result(est[0], est[2], est[3], None, L_mode_spread=float(spread[0]), hue_mode_spread=float(spread[1]),
                  kept_clusters=kept.tolist(), kmeans_seed=kmeans_seed, n_init=n_init)
    out["hue"] = float(est[1])
    return out


_SK_XYZ_FROM_RGB = np.array([[0.412453, 0.357580, 0.180423], [0.212671, 0.715160, 0.072169], [0.019334, 0.119193, 0.950227]])
_SK_WHITE = np.array([0.95047, 1.0, 1.08883])


def published_lab(rgb01: np.ndarray) -> np.ndarray:
    """CIELAB exactly as scikit-image's ``rgb2lab`` computes it (what the published Thong code uses).

    scikit-image uses its own unrounded sRGB matrix, the white (0.95047, 1,
    1.08883) and the rounded CIE constants 0.008856 / 7.787; the results
    differ from :func:`fairvision.skin.srgb_to_lab` by up to ~0.03. Only the
    ``thong-published`` compatibility mode uses this, so that it reproduces
    published numbers to the last digit.
    """
    c = np.asarray(rgb01, dtype=np.float64)
    lin = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    t = (lin @ _SK_XYZ_FROM_RGB.T) / _SK_WHITE
    f = np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 16.0 / 116.0)
    return np.stack([116.0 * f[..., 1] - 16.0, 500.0 * (f[..., 0] - f[..., 1]), 200.0 * (f[..., 1] - f[..., 2])], axis=-1)


def mean(lab: np.ndarray) -> dict:
    """Mean CIELAB of the skin pixels; hue, chroma and ITA of that mean colour."""
    m = np.asarray(lab, dtype=np.float64).mean(axis=0)
    return _result(m[0], m[1], m[2], None)


def median_ita(lab: np.ndarray) -> dict:
    """Khaziev et al.: median of the per-pixel ITA (docs/METHODS.md §2.3).

    ``ita`` is the median ITA; ``L``, ``a``, ``b`` are per-channel medians and
    ``hue`` / ``chroma`` belong to that median colour.
    """
    lab = np.asarray(lab)
    med = np.median(lab, axis=0).astype(np.float64)
    return _result(med[0], med[1], med[2], None, ita_value=float(np.median(_ita(lab))))


def gray_mean(lab: np.ndarray, gray: np.ndarray) -> dict:
    """BiasPainter: mean grey level (0-255) of the skin pixels; L*, a*, b* are the mean Lab."""
    out = mean(lab)
    out["gray"] = float(np.mean(gray, dtype=np.float64))
    return out


def estimate(method: str, lab: np.ndarray, gray: np.ndarray | None = None, **kw) -> dict:
    """Dispatch to the estimator named ``method`` (one of :data:`METHODS`)."""
    if method == "thong":
        out = thong(lab, **kw)
    elif method == "thong-published":
        out = thong_published(lab, **kw)
    elif method == "mean":
        out = mean(lab)
    elif method == "median_ita":
        out = median_ita(lab)
    elif method == "gray_mean":
        if gray is None:
            raise FairvisionError("the gray_mean estimator needs the RGB pixels")
        out = gray_mean(lab, gray)
    else:
        raise FairvisionError(f"unknown skin colour method {method!r}; choose one of {', '.join(METHODS)}")
    if out["gray"] is None and gray is not None:
        out["gray"] = float(np.mean(gray, dtype=np.float64))
    return out

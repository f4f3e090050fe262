"""Skin colour estimators over the skin pixels of one image.

Each estimator turns the CIELAB values of one image's skin pixels into one
colour (L*, a*, b*, hue, chroma, ITA). They are pure numpy functions of the
pixel arrays; :func:`fairvision.skin.measurement.measure` adds image reading, masks,
smoothing, spread, stability and quality flags.

Methods
-------
``thong``
    Thong et al. (ICCV 2023; docs/METHODS.md §2.2), made deterministic:
    K-Means (k = 5) on per-pixel (L*, h*) with quantile seeding and a
    vectorised Lloyd's algorithm (coarse-to-fine: converged on fixed strided
    subsamples of 4000, 16000 ... pixels, stopping with scikit-learn's
    tolerance rule; on all pixels when there are at most twice the last
    level, which is at most :data:`MAX_CLUSTER_PIXELS`, otherwise every pixel
    is assigned once to the nearest centre of the last level); for
    each cluster the mode of a Sturges-rule histogram over ALL its pixels
    (bin centre; all clusters and columns binned by one ``bincount``); keep the
    3 clusters with the highest L* mode; pixel-count-weighted mean of their
    modes. Hue is clustered and averaged as a signed angle in (-180, 180]
    so that reddish pixels just below 0 deg (b* < 0) stay next to those just
    above it; the result is reported in [0, 360). Chroma is estimated the same
    way as L* and h* (weighted mean of the kept clusters' chroma modes), so
    a* = C cos h, b* = C sin h; the paper itself only defines L* and h*.
    Features, distances and histograms are float32 (centres and modes
    float64). Cost on a 1024 x 1024 portrait with 108k skin pixels: about
    10 ms for the whole :func:`fairvision.skin.measurement.measure` (smoothing,
    CIELAB, estimate, spread, flags), about 3 ms more for the 10-replicate
    stability bootstrap (benchmarks/bench_skin_estimator.py).
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


def kmeans_lloyd(X: np.ndarray, centers: np.ndarray, *, max_iter: int = 300, tol: float = 1e-4) -> tuple[np.ndarray, np.ndarray, int]:
    """Lloyd's algorithm, vectorised and deterministic.

    Stops when no assignment changes or when the total squared centre shift
    falls to ``tol`` times the mean per-feature variance (scikit-learn's
    criterion); the returned labels are the nearest-centre assignment to the
    returned centres. Squared distances come from one ``(k, 3) @ (3, N)``
    product on centred data (|x - c|^2 minus the constant |x|^2). An empty
    cluster keeps its previous centre.

    Returns
    -------
    labels : (N,) int
    centers : (k, d)
    n_iter : int
    """
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
    """Per-pixel (L*, signed h*, C*) in float32: what :func:`thong` clusters and takes modes of."""
    lab = np.asarray(lab)
    a = np.ascontiguousarray(lab[:, 1], dtype=np.float32)
    b = np.ascontiguousarray(lab[:, 2], dtype=np.float32)
    h = np.arctan2(b, a)
    h *= np.float32(180.0 / np.pi)  # degrees in (-180, 180]
    C = a * a
    C += b * b
    np.sqrt(C, out=C)
    return np.ascontiguousarray(lab[:, 0], dtype=np.float32), h, C


#: Largest coarse-to-fine level of Lloyd's algorithm (a strided subsample of about this many pixels); images
#: with more than twice the last level's pixels are then assigned to its centres in one pass.
MAX_CLUSTER_PIXELS = 20000


class ThongFit:
    """What a :func:`thong` fit leaves behind for :func:`thong_bootstrap`: centred data, labels, centres."""

    __slots__ = ("Xc", "labels", "C", "mu", "k", "top", "counts", "Lh_sorted")

    def __init__(self, Xc, labels, C, mu, k, top):
        self.Xc, self.labels, self.C, self.mu, self.k, self.top = Xc, labels, C, mu, k, top
        self.counts = self.Lh_sorted = None  # cluster sizes and (L*, h*) grouped by cluster


def _thong_fit(L, h, C, *, k: int = 5, top: int = 3, coarse: int = 4000, init_centers=None):
    n = L.shape[0]
    if n < k:
        raise FairvisionError(f"the thong estimator needs at least {k} pixels, got {n}")
    mu = np.array([L.mean(dtype=np.float64), h.mean(dtype=np.float64)])
    Xc = np.empty((2, n), dtype=np.float32)  # centred planar (L*, h*)
    np.subtract(L, np.float32(mu[0]), out=Xc[0])
    np.subtract(h, np.float32(mu[1]), out=Xc[1])
    Cc = None if init_centers is None else np.asarray(init_centers, dtype=np.float64) - mu
    # coarse to fine: converge on strided subsamples of coarse, 4 coarse, 16 coarse ... pixels (at most
    # MAX_CLUSTER_PIXELS), each level starting from the previous centres, the first from the quantile seeds
    size = int(coarse)
    while 2 * size < n and size <= MAX_CLUSTER_PIXELS:
        sub = np.ascontiguousarray(Xc[:, :: max(1, n // size)])
        if Cc is None:
            Cc = quantile_seeds(sub.T.astype(np.float64), k)
        labels, Cc, n_iter = _lloyd(sub, sub, Cc)
        size *= 4
    if size <= MAX_CLUSTER_PIXELS or Cc is None:  # few pixels: finish on all of them (converged on all pixels)
        if Cc is None:
            Cc = quantile_seeds(Xc.T.astype(np.float64), k)
        labels, Cc, n_iter = _lloyd(Xc, Xc, Cc)
    else:  # assign every pixel once to the centres converged on the last subsample
        labels = _nearest(Xc, Cc)
    return ThongFit(Xc, labels, Cc, mu, k, top), n_iter


def thong_from_features(L, h, C, *, k: int = 5, top: int = 3, coarse: int = 4000, details: bool = True,
                         init_centers=None):
    """The :func:`thong` estimate from precomputed :func:`thong_features`, and the fit behind it.

    Parameters
    ----------
    L, h, C : (N,) float32 arrays
        Per-pixel L*, signed hue angle h* (degrees) and chroma C*.
    k, top, coarse, details, init_centers
        As for :func:`thong`.

    Returns
    -------
    result : dict
        As :func:`thong` returns it.
    fit : ThongFit
        Centred data, labels and centres, for :func:`thong_bootstrap`.
    """
    fit, n_iter = _thong_fit(L, h, C, k=k, top=top, coarse=coarse, init_centers=init_centers)
    counts, xs = _group_sort(fit.labels, np.stack([L, h, C]), k)
    fit.counts, fit.Lh_sorted = counts, xs[:2].copy()
    modes = _sorted_modes(xs, counts)
    est, spread, kept = _combine_top(counts, modes, top)
    Lm, hm, Cm = est
    rad = np.radians(hm)
    extra = {}
    if details:
        extra = {
            "cluster_centers": (fit.C + fit.mu).tolist(),
            "cluster_sizes": counts.tolist(),
            "cluster_modes": modes.tolist(),
            "kept_clusters": kept.tolist(),
            "L_mode_spread": float(spread[0]),
            "hue_mode_spread": float(spread[1]),
            "n_iter": int(n_iter),
        }
    return _result(Lm, Cm * np.cos(rad), Cm * np.sin(rad), None, **extra), fit


def thong(lab: np.ndarray | None, *, k: int = 5, top: int = 3, coarse: int = 4000, details: bool = True,
          init_centers: np.ndarray | None = None, features: tuple | None = None) -> dict:
    """Deterministic Thong et al. estimator (docs/METHODS.md §2.2) on CIELAB pixels.

    Parameters
    ----------
    lab : (N, 3) array
        CIELAB of the (already smoothed) skin pixels.
    k, top : int
        Number of clusters (5) and of kept clusters with the highest L* mode (3).
    coarse : int
        Size of the first strided subsample (the quantile seeds come from
        it): Lloyd's algorithm converges on ``coarse``, ``4 coarse`` ...
        pixels while a level is at most :data:`MAX_CLUSTER_PIXELS`, each
        level starting from the previous centres; then on all pixels if
        there are at most twice the last level, otherwise every pixel is
        assigned once to the nearest of the last level's centres. The
        histogram modes use every pixel.
    init_centers : (k, 2) array, optional
        Start Lloyd's algorithm from these (L*, signed h*) centres instead of
        the quantile seeds.
    features : tuple of 3 arrays, optional
        Precomputed :func:`thong_features` (then ``lab`` is ignored).

    Returns
    -------
    dict with ``L``, ``a``, ``b``, ``hue`` (degrees, [0, 360)), ``chroma``,
    ``ita`` and ``extra`` (cluster centres, sizes, modes, kept clusters and the
    weighted spread of the kept modes, as the published code reports).
    """
    L, h, C = thong_features(lab) if features is None else (np.ascontiguousarray(f, dtype=np.float32) for f in features)
    return thong_from_features(L, h, C, k=k, top=top, coarse=coarse, details=details, init_centers=init_centers)[0]


def thong_bootstrap(fit: ThongFit, n_boot: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """(L*, signed h*) estimates of ``n_boot`` bootstrap replicates of ``m`` pixels, all at once.

    Each replicate resamples ``m`` pixels with replacement and keeps the
    full-sample cluster memberships (the replicate is warm-started from the
    full solution, whose labels are the nearest-centre assignment to its
    centres; re-running Lloyd's algorithm moves only a few boundary pixels and
    leaves the spread of the answer unchanged). Drawn stratified, which is the
    same distribution: the replicate's cluster sizes are multinomial with the
    full cluster proportions and the pixels are uniform within each cluster,
    so every replicate arrives grouped by cluster with no sort. The
    Sturges-histogram modes (bin centres over each replicate cluster's own
    range and with Sturges' bin count for its own size), the top-``top``
    selection by L* mode and the count-weighted mean are then recomputed for
    all replicates at once.

    Parameters
    ----------
    fit : ThongFit
        From :func:`thong_from_features`.
    n_boot : int
        Number of replicates.
    m : int
        Pixels per replicate.
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray, shape (n_boot, 2)
        Replicate estimates of L* and signed h*.
    """
    k, top = fit.k, fit.top
    R = int(n_boot)
    n = int(fit.counts.sum())
    sizes = rng.multinomial(m, fit.counts / n, size=R)  # (R, k) replicate cluster sizes
    starts = np.cumsum(fit.counts) - fit.counts
    modes = np.empty((R, k, 2))
    per = max(1, (1 << 18) // max(m, 1))  # replicates per chunk (bounded temporaries)
    for r0 in range(0, R, per):
        r1 = min(r0 + per, R)
        idx = np.empty(int(sizes[r0:r1].sum()), dtype=np.intp)
        pos = 0
        for r in range(r0, r1):
            for c in range(k):
                s = int(sizes[r, c])
                if s:
                    idx[pos:pos + s] = rng.integers(starts[c], starts[c] + fit.counts[c], size=s)
                    pos += s
        modes[r0:r1] = _sorted_modes(fit.Lh_sorted.take(idx, axis=1), sizes[r0:r1].ravel()).reshape(r1 - r0, k, 2)
    key = np.where(sizes > 0, -modes[..., 0], np.inf)
    kept = np.argsort(key, axis=1, kind="stable")[:, :top]
    w = np.take_along_axis(sizes, kept, axis=1).astype(np.float64)
    mk = np.nan_to_num(np.take_along_axis(modes, kept[..., None], axis=1))
    return (mk * w[..., None]).sum(axis=1) / w.sum(axis=1)[:, None]


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

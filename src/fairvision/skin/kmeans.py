"""Deterministic K-Means (Lloyd's algorithm) for skin pixel clustering (docs/METHODS.md §2.2).

Quantile seeds (:func:`quantile_seeds`, :func:`weighted_quantile_seeds`) and a vectorised Lloyd's algorithm
on plain or weighted points (:func:`kmeans_lloyd`); :func:`argmin_rows` is the nearest-centre step they share
with the Thong et al. estimator (:mod:`fairvision.skin.thong`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["quantile_seeds", "weighted_quantile_seeds", "kmeans_lloyd", "argmin_rows"]


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
        return argmin_rows(D)
    labels = np.empty(n, dtype=np.uint8 if C.shape[0] < 256 else np.intp)
    D = np.empty((C.shape[0], _BLOCK), dtype=Xc.dtype)
    for s in range(0, n, _BLOCK):
        e = min(s + _BLOCK, n)
        Db = np.matmul(W, Xc[:, s:e], out=D[:, : e - s])
        Db += c2
        labels[s:e] = argmin_rows(Db)
    return labels


_BLOCK = 32768


def argmin_rows(D: np.ndarray) -> np.ndarray:
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
            return argmin_rows(np.matmul(W, X1, out=D))
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
    M = X.shape[1]
    X1 = np.vstack([X, np.ones((1, M))])
    wX = X * w
    Wm = np.empty((k, d + 1))
    D = np.empty((k, M))
    best = np.empty(M)
    closer = np.empty(M, dtype=bool)
    mask = np.empty(M, dtype=np.uint8)
    sums = np.empty((d, k))

    def nearest(C):
        # the same products as ``argmin_rows(Wm @ X1)`` into reused buffers (this loop runs some 40 times on
        # a few thousand points: numpy call overhead, not arithmetic, is its cost)
        np.multiply(C, -2.0, out=Wm[:, :d])
        Wm[:, d] = (C * C).sum(axis=1)
        np.matmul(Wm, X1, out=D)
        best[:] = D[0]
        labels = np.zeros(M, dtype=np.uint8 if k < 256 else np.intp)
        for j in range(1, k):
            np.less(D[j], best, out=closer)
            np.minimum(best, D[j], out=best)
            if k < 256:  # j exceeds every label so far: max(labels, j * closer) sets the closer points to j
                np.multiply(closer.view(np.uint8), np.uint8(j), out=mask)
                np.maximum(labels, mask, out=labels)
            else:
                labels[closer] = j
        return labels

    labels = None
    it = 0
    for it in range(1, max_iter + 1):
        new = nearest(C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        li = labels.astype(np.intp)  # once for the three sums
        cnt = np.bincount(li, weights=w, minlength=k)
        nz = cnt > 0
        C_old = C.copy()
        for j in range(d):
            sums[j] = np.bincount(li, weights=wX[j], minlength=k)
        np.divide(sums.T, cnt[:, None], out=C, where=nz[:, None])
        shift = C - C_old
        if np.vdot(shift, shift) <= thresh:
            labels = nearest(C)
            break
    return labels, C, it

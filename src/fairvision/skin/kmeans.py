"""Deterministic K-Means (Lloyd's algorithm) for skin pixel clustering (docs/METHODS.md §2.2).

Quantile seeds (:func:`quantile_seeds`, :func:`weighted_quantile_seeds`) and a vectorised Lloyd's algorithm
on plain or weighted points (:func:`kmeans_lloyd`), and the same iterations on weighted points whose sums are
exact (:func:`lloyd_exact_sums`, what the Thong et al. estimator :mod:`fairvision.skin.thong` runs on its
histogram blocks); :func:`argmin_rows`, :func:`first_at_min`, :func:`nearest_two` and :func:`second_within` are
the nearest-centre steps.
"""

from __future__ import annotations

import numpy as np

__all__ = ["quantile_seeds", "weighted_quantile_seeds", "kmeans_lloyd", "lloyd_exact_sums", "argmin_rows",
           "first_at_min", "nearest_two", "second_within"]


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


def first_at_min(D: np.ndarray, best: np.ndarray) -> np.ndarray:
    """The first row of ``D`` (k, M) that reaches ``best`` (its column minima) in every column: the label
    :func:`argmin_rows` gives (ties to the lowest index), from the same comparisons in three passes over
    the whole matrix, ``k - max_j (k - j) [D_j = best]``."""
    return _first_at_min(D, best)[0]


def _first_at_min(D: np.ndarray, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`first_at_min` and the mask of the rows that reach the minimum."""
    k = D.shape[0]
    eq = D == best
    if k < 256:
        return k - (eq.view(np.uint8) * (k - np.arange(k, dtype=np.uint8))[:, None]).max(axis=0), eq
    return k - (eq * (k - np.arange(k))[:, None]).max(axis=0), eq


def second_within(D: np.ndarray, best: np.ndarray, bound: float) -> np.ndarray:
    """Columns of ``D`` (k, M) whose second-nearest row is within ``bound`` of the nearest (``best``, the column
    minima; a row tied with the nearest counts): ``nearest_two(D)[1] <= bound``, the same test in three
    passes, since ``D_j - best`` rounds monotonely in ``D_j`` (the smallest difference is the difference to
    the smallest value). ``D`` is overwritten with ``D - best``."""
    D -= best
    return np.add.reduce(D <= bound, axis=0, dtype=np.uint8 if D.shape[0] < 256 else np.intp) > 1


def nearest_two(D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest row of every column of ``D`` (k, M) (ties to the lowest index, as :func:`argmin_rows`) and the
    margin to the next nearest row, ``D_second - D_nearest`` (0 where two rows tie). ``D`` is overwritten."""
    best = np.minimum.reduce(D, axis=0)
    labels, eq = _first_at_min(D, best)
    ties = np.add.reduce(eq.view(np.uint8), axis=0, dtype=np.uint8) > 1
    np.copyto(D, np.inf, where=eq)
    margin = np.minimum.reduce(D, axis=0)
    margin -= best
    np.copyto(margin, 0.0, where=ties)
    return labels, margin


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


def weighted_quantile_seeds(X: np.ndarray, w: np.ndarray, k: int, *, ordered: bool = False,
                            whole: bool = False) -> np.ndarray:
    """Deterministic K-Means seeds of weighted points ``X`` (d, M) (docs/METHODS.md §2.2).

    Order the points by the first row (L*; ties keep the given order; ``ordered=True``: they already
    are), cut the cumulative weight into ``k`` equal parts (a point on a cut is split between the two
    parts) and take each part's weighted mean: :func:`quantile_seeds` of the pixels the weights stand for.
    ``whole=True`` promises whole-number weights (their cumulative sums below 2**53, so exact): then a
    point inside a part counts with its weight as it is and only the two points at the part's ends are
    split (the same numbers, with a few numpy calls per part instead of a dozen).
    """
    if ordered:
        Xs, ws = X, w
    else:
        order = np.argsort(X[0], kind="stable")
        Xs, ws = X[:, order], w[order]
    cum = np.cumsum(ws)
    cuts = cum[-1] * np.arange(k + 1) / k
    first = np.searchsorted(cum, cuts[:-1], side="right").tolist()  # the points each part overlaps: first ...
    last = np.minimum(np.searchsorted(cum, cuts[1:], side="left") + 1, cum.size).tolist()  # ... to last (excl.)
    seeds = np.empty((k, X.shape[0]))
    if whole:
        cl = cuts.tolist()
        for j in range(k):
            a, b = first[j], max(last[j], first[j] + 1)
            part = ws[a:b].copy()
            # inside the part, min(cum, upper cut) - max(cum - w, lower cut) is cum - (cum - w) = w (exact);
            # at its two ends the cuts split the point's weight
            for i in {a, b - 1}:
                ci = float(cum[i])
                part[i - a] = max(min(ci, cl[j + 1]) - max(ci - float(ws[i]), cl[j]), 0.0)
            seeds[j] = (Xs[:, a:b] @ part) / part.sum()
        return seeds
    for j in range(k):
        sl = slice(first[j], max(last[j], first[j] + 1))
        part = np.minimum(cum[sl], cuts[j + 1])  # the share of each point's weight in [cuts[j], cuts[j + 1]]
        part -= np.maximum(cum[sl] - ws[sl], cuts[j])  # (cum - ws: where the point's weight starts)
        np.maximum(part, 0.0, out=part)
        seeds[j] = (Xs[:, sl] @ part) / part.sum()
    return seeds


def _weighted_lloyd(X: np.ndarray, w: np.ndarray, C: np.ndarray, *, max_iter: int = 300, tol: float = 1e-4):
    """Lloyd's algorithm on weighted points ``X`` (d, M) (float64) from centres ``C`` (k, d).

    Distances |c|^2 - 2 c.x (the constant |x|^2 dropped) from one ``(k, d+1) @ (d+1, M)`` product; ties
    to the lowest index; an empty cluster keeps its centre. Stops when no assignment changes or when the
    total squared centre shift is at most ``tol`` times the mean weighted per-feature variance
    (scikit-learn's rule, on the pixels the weights stand for), then reassigns once. Returns labels (M,),
    centres (k, d) and the number of iterations.

    The loop runs some 40 times on a few thousand points, so numpy's per-call overhead, not arithmetic, is
    its cost: an iteration is a dozen calls into reused buffers. The nearest centre is the first row that
    reaches the column minimum (``k - max_j (k - j) [D_j = min D]``: the same comparisons as a sequential
    argmin), and the weights and weighted coordinates of every cluster come from one ``bincount`` over
    ``d + 1`` disjoint ranges of bins (each bin summed in point order, as separate bincounts would).
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
    vals = np.vstack([w, X * w]).ravel()  # [w; w x_1; ...; w x_d]: what one bincount sums per cluster
    offs = (np.arange(d + 1) * k)[:, None]  # bin offset of each of the d + 1 sums
    keys = np.empty((d + 1, M), dtype=np.intp)
    small = k <= 255
    rank = (k - np.arange(k, dtype=np.uint8 if small else np.intp))[:, None]  # k - j for row j
    eq = np.empty((k, M), dtype=bool)
    hit = np.empty((k, M), dtype=rank.dtype)
    Wm = np.empty((k, d + 1))
    D = np.empty((k, M))
    best = np.empty(M)

    def nearest(C):
        np.multiply(C, -2.0, out=Wm[:, :d])
        np.einsum("ij,ij->i", C, C, out=Wm[:, d])
        np.matmul(Wm, X1, out=D)
        np.minimum.reduce(D, axis=0, out=best)
        np.equal(D, best, out=eq)
        np.multiply(eq.view(np.uint8) if small else eq, rank, out=hit)
        return k - hit.max(axis=0)  # the first row at the minimum: ties to the lowest index

    labels = None
    it = 0
    for it in range(1, max_iter + 1):
        new = nearest(C)
        if labels is not None and new.tobytes() == labels.tobytes():
            break
        labels = new
        np.add(offs, labels, out=keys)
        sums = np.bincount(keys.ravel(), weights=vals, minlength=(d + 1) * k).reshape(d + 1, k)
        cnt = sums[0]
        C_old = C.copy()
        np.divide(sums[1:].T, cnt[:, None], out=C, where=(cnt > 0)[:, None])
        shift = C - C_old
        if np.vdot(shift, shift) <= thresh:
            labels = nearest(C)
            break
    return labels, C, it



#: :func:`lloyd_exact_sums` re-examines only the points whose margin (distance to the second-nearest centre
#: minus that to the nearest, at the last pass over all points) is at most this many times the distance the
#: centres moved in the iteration before that pass (and at least :data:`_ACTIVE_MIN`, in the units of the
#: points) ...
_ACTIVE_SHIFTS = 8.0
_ACTIVE_MIN = 0.5
#: ... while the two largest distances centres have moved since, plus this slack (far above the rounding
#: of the distances), stay below that margin
_MARGIN_SLACK = 1e-4
#: with at most this many points every iteration examines all of them (up to some 16,000 points the filter's own
#: passes cost about what they save)
_ALL_POINTS = 4096


def lloyd_exact_sums(X: np.ndarray, S: np.ndarray, w: np.ndarray, C: np.ndarray, *,
                     max_iter: int = 300) -> tuple[np.ndarray, np.ndarray, int]:
    """Weighted Lloyd's algorithm to a fixed point on points ``X`` (d, M) whose weighted coordinates
    ``S = w X`` (d, M) add up exactly in any order: whole-number weights ``w`` and binary-fraction sums of
    coordinates, as the histogram cells and blocks of :func:`fairvision.skin.thong.thong` have
    (docs/METHODS.md §2.2).

    The iterations are those of ``kmeans_lloyd(X.T, C, sample_weight=w, tol=0)`` with every centre taken
    as (sum of ``S``) / (sum of ``w``) over its cluster: the same distances (``|c|^2 - 2 c.x``, ties to the
    lowest index), labels, centres and number of iterations. This loop runs some 10 to 60 times on a few
    hundred to a few thousand points, so numpy's per-call overhead is its cost, and an iteration makes about
    ten calls (the distance product, the nearest centres, the points that changed):

    - since the sums are exact, a point whose label changed is moved from one cluster's sums to the
      other's, and the k x d centre arithmetic runs on Python floats (IEEE doubles, as numpy's);
    - with more than :data:`_ALL_POINTS` points only the points near a boundary are re-examined: a point
      whose margin (distance to its second-nearest centre minus that to its nearest, at the last pass over
      all points) exceeds the sum of the two largest distances the centres have moved since, plus a slack
      far above rounding, keeps its label (triangle inequality); once the centres have moved further, all
      points are examined again. With fewer points every iteration examines all of them (the filter's
      margins cost as much as they save).

    Returns labels (M,), centres (k, d) and the number of iterations.
    """
    X = np.asarray(X, dtype=np.float64)
    k, d = np.shape(C)
    M = X.shape[1]
    X1 = np.empty((d + 1, M))
    X1[:d] = X
    X1[d] = 1.0
    vals = np.empty((d + 1, M))  # [w; S]
    vals[0] = w
    vals[1:] = S
    small = k < 256
    rank = (k - np.arange(k, dtype=np.uint8 if small else np.intp))[:, None]  # k - label: the first row wins
    cen = np.array(C, dtype=np.float64).tolist()  # k lists of d floats
    W = []  # rows (-2 c, |c|^2) of the distance product, as Python floats
    for c in cen:
        sq = c[0] * c[0]
        for v in c[1:]:
            sq += v * v
        W.append([-2.0 * v for v in c] + [sq])
    offs = (np.arange(d + 1) * (k + 1))[:, None]  # bin offsets of the d + 1 sums (by rank 0 .. k) in one bincount

    def full_sums(r):  # [w, S] summed over every cluster (exact sums), as k lists of d + 1 floats
        t = np.bincount((r + offs).ravel(), weights=vals.ravel(), minlength=(d + 1) * (k + 1))
        return t.reshape(d + 1, k + 1)[:, :0:-1].T.tolist()  # rank r is cluster k - r

    if M <= _ALL_POINTS:
        return _lloyd_all_points(X1, vals, W, cen, rank, full_sums, max_iter)
    r_all = sums = act = VT = r_a = xsq = None
    everything = False  # the active points are all the points
    budget = -np.inf  # the first two iterations examine every point
    moves = [0.0] * k  # distance each centre moved since the last pass over all points
    last = 0.0
    it = 0
    for it in range(1, max_iter + 1):
        # the product is always taken over all the points: BLAS may round a column differently in a product
        # with other columns, and these are the distances of kmeans_lloyd
        D = np.array(W) @ X1
        if sum(sorted(moves)[-2:]) + _MARGIN_SLACK >= budget:  # a pass over all points
            if act is not None and not everything:
                r_all[act] = r_a
            best = np.minimum.reduce(D, axis=0)
            eq = D == best
            r = np.maximum.reduce((eq.view(np.uint8) if small else eq) * rank, axis=0)
            if r_all is None:
                sums = full_sums(r.astype(np.intp))
            else:
                ch = (r != r_all).nonzero()[0]
                if ch.size == 0:
                    break
                if ch.size > 16:  # (a sum from scratch is exact too, and then cheaper)
                    sums = full_sums(r.astype(np.intp))
                else:
                    for a, b, x in zip(r[ch].tolist(), r_all[ch].tolist(), vals[:, ch].T.tolist()):
                        sa, sb = sums[k - a], sums[k - b]
                        for j in range(d + 1):
                            sa[j] += x[j]
                            sb[j] -= x[j]
            r_all = r
            act = None
            if it > 1:
                if xsq is None:
                    xsq = (X * X).sum(axis=0)  # |x|^2: distances from D = |c|^2 - 2 c.x for the margins
                budget = max(_ACTIVE_MIN, _ACTIVE_SHIFTS * last)
                ties = np.add.reduce(eq.view(np.uint8), axis=0, dtype=np.uint8 if small else np.intp) > 1
                np.copyto(D, np.inf, where=eq)
                second = np.minimum.reduce(D, axis=0)
                second += xsq
                best += xsq
                np.maximum(second, 0.0, out=second)
                np.maximum(best, 0.0, out=best)
                mu = np.sqrt(second, out=second)
                mu -= np.sqrt(best, out=best)
                mu[ties] = 0.0
                act = (mu <= budget).nonzero()[0]
                everything = act.size == M
                if everything:
                    r_a, VT = r_all, vals.T
                else:
                    r_a, VT = r_all[act], vals[:, act].T
                moves = [0.0] * k
        else:  # only the points near a boundary
            Da = D if everything else D.take(act, axis=1)
            best = np.minimum.reduce(Da, axis=0)
            eq = Da == best
            r = np.maximum.reduce((eq.view(np.uint8) if small else eq) * rank, axis=0)
            if r.tobytes() == r_a.tobytes():
                break
            _move_points(sums, r, r_a, (r != r_a).nonzero()[0], VT)
            r_a = r
            if everything:
                r_all = r
        last = _update_centres(sums, cen, W, moves, d)
        if last is False:  # no centre moved: the labels are the nearest centres already
            break
    if act is not None and not everything:
        r_all[act] = r_a
    return k - r_all.astype(np.intp), np.array(cen), it


def _move_points(sums: list, r_new: np.ndarray, r_old: np.ndarray, ch: np.ndarray, VT: np.ndarray) -> None:
    """Move the points ``ch`` from cluster ``k - r_old`` to cluster ``k - r_new`` in the exact per-cluster sums
    ``sums`` (k lists of [weight, weighted coordinates]; ``VT`` (M, d + 1): every point's values)."""
    k = len(sums)
    for a, b, x in zip(r_new[ch].tolist(), r_old[ch].tolist(), VT[ch].tolist()):
        sa, sb = sums[k - a], sums[k - b]
        for j, v in enumerate(x):
            sa[j] += v
            sb[j] -= v


def _lloyd_all_points(X1, vals, W, cen, rank, full_sums, max_iter):
    """:func:`lloyd_exact_sums` examining every point every iteration (``W``, ``cen``: the Python rows of the
    distance product and the centres, updated in place)."""
    k, d = len(cen), len(cen[0])
    VT = vals.T
    small = rank.dtype == np.uint8
    r_old = sums = None
    it = 0
    for it in range(1, max_iter + 1):
        # the product is always taken over all the points (BLAS may round a column differently in a product
        # with other columns): the distances of kmeans_lloyd
        D = np.array(W) @ X1
        eq = D == np.minimum.reduce(D, axis=0)
        r = np.maximum.reduce((eq.view(np.uint8) if small else eq) * rank, axis=0)  # k - (first row at the min)
        if r_old is None:
            sums = full_sums(r.astype(np.intp))
        else:
            if r.tobytes() == r_old.tobytes():
                break
            ch = (r != r_old).nonzero()[0]
            if ch.size > 16:  # (a sum from scratch is exact too, and then cheaper)
                sums = full_sums(r.astype(np.intp))
            else:
                _move_points(sums, r, r_old, ch, VT)
        r_old = r
        if not _update_centres(sums, cen, W, None, d):  # no centre moved: the labels are the nearest already
            break
    return k - r_old.astype(np.intp), np.array(cen), it


def _update_centres(sums, cen, W, moves, d):
    """The centres (sum of S) / (sum of w) of the cluster ``sums`` into ``cen`` (an empty cluster keeps its centre)
    and their rows ``(-2 c, |c|^2)`` into ``W``. Without ``moves``: returns whether a centre moved. With it: adds
    the distance each centre moved to ``moves`` and returns the largest, or False when none moved."""
    moved = False
    last = 0.0
    for j, sj in enumerate(sums):
        s0 = sj[0]
        if s0 > 0:
            cj = cen[j]
            new = [v / s0 for v in sj[1:]]
            if new != cj:
                moved = True
                new = [c if c != o else o for c, o in zip(new, cj)]  # (an unchanged coordinate stays as it was)
                sq = new[0] * new[0]
                for v in new[1:]:
                    sq += v * v
                W[j] = [-2.0 * v for v in new] + [sq]
                if moves is not None:
                    step = 0.0
                    for m in range(d):
                        step += (new[m] - cj[m]) ** 2
                    step = step ** 0.5 * (1 + 1e-9)
                    moves[j] += step
                    last = max(last, step)
                cen[j] = new
    if moves is None:
        return moved
    return last if moved else False

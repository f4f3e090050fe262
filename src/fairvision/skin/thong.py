"""The Thong et al. skin colour estimator (ICCV 2023; docs/METHODS.md §2.2), made deterministic and order-free.

The skin pixels are summarised by a histogram of (L*, signed h*) on a fixed grid (cells of 0.25 L* x
0.5 deg, halved while wider than 1/8 of the Sturges bin of all pixels over their range; every pixel counts
at its cell's centre), which is the same for any order of the pixels and for a mirrored image. K-Means
(k = 5) runs on the non-empty cells with their counts as weights: quantile seeds from the weighted
histogram, weighted Lloyd to a fixed point on blocks of 16 x 16 and then 4 x 4 cells (each at the weighted
mean of its cells), then every pixel goes to its nearest centre. For each cluster the mode of a
Sturges-rule histogram of its L* (and h*, C*) cell values (bin centre, exact integer binning; all clusters
at once); keep the 3 clusters with the highest L* mode; pixel-count-weighted mean of their modes. Hue is
clustered and averaged as a signed angle in (-180, 180] so that reddish pixels just below 0 deg (b* < 0)
stay next to those just above it; the result is reported in [0, 360). Chroma is estimated the same way as
L* and h* (weighted mean of the kept clusters' chroma modes), so a* = C cos h, b* = C sin h; the paper
itself only defines L* and h*. The stability bootstrap (:func:`thong_bootstrap`) redraws all n pixels as
multinomial counts over the same summary (each histogram's ends cell by cell, the rest straight into the
Sturges bins: :func:`bootstrap_grid_modes`).

Speed: the cell keys are whole numbers computed in float32 and the extreme cells from the extreme values (the
cell index is monotone), the blocks are summed from the cells and the 16 x 16 blocks from the 4 x 4 ones
(exact sums), and the Lloyd iterations run on exact cluster sums (:func:`fairvision.skin.kmeans.lloyd_exact_sums`:
moved points only, the centre arithmetic on Python floats). Exact sums can put a centre one or two units in the
last place away from a sum of rounded block means, and a fixed point can then be reached an iteration earlier
(``n_iter``); the estimates, modes, clusters and stability are unchanged. The cost is numpy's per-call overhead
more than arithmetic: on the bundled portraits' median face-mesh mask (001.jpg, 25,642 pixels), 1 thread, the
whole estimate with its 10-replicate stability takes about 3.3 ms, of which the Lloyd iterations about 1.2 ms
(45 iterations, 6 on 162 blocks and 39 on 1,849 blocks at some 25-30 us each: a slow drift, other portraits
need 8 to 16 on the finer level), the histogram, seeds, blocks and the assignment of the pixels about 1.1 ms,
the modes 0.3 ms and the stability bootstrap 0.5 ms (a quarter of it the multinomial draws themselves); see
benchmarks/bench_skin_estimator.py.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.skin.histogram_modes import grid_modes, sturges_bins
from fairvision.skin.kmeans import (argmin_rows, first_at_min, lloyd_exact_sums, second_within,
                                    weighted_quantile_seeds)
from fairvision.skin.simple_estimators import colour_result

__all__ = [
    "CELL_L", "CELL_H", "CELL_C", "CELLS_PER_BIN", "COARSE_BLOCKS", "EDGE_CELLS", "ThongFit", "bootstrap_grid_modes",
    "cell_size", "combine_top_clusters", "thong", "thong_bootstrap", "thong_features", "thong_from_features",
]


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
    return _step_for_range(float(x.min()), float(x.max()), largest, n)


def _range(x: np.ndarray) -> tuple[float, float]:
    return float(np.minimum.reduce(x)), float(np.maximum.reduce(x))


def _step_for_range(lo: float, hi: float, largest: float, n: int) -> float:
    """:func:`cell_size` from the smallest and largest value."""
    target = (hi - lo) / (CELLS_PER_BIN * sturges_bins(n))
    step = float(largest)
    if target <= 0:  # all values equal: nothing to resolve
        return step
    for _ in range(12):
        if step <= target:
            break
        step *= 0.5
    return step


def _scaled_floor(x: np.ndarray, step: float, offset: float = 0.0) -> np.ndarray:
    """``floor((x + offset) / step)`` elementwise in float32 (a new array of whole numbers): the cell of
    every value, the same for a pixel wherever it is in the array. Monotone in ``x``, so the cell of the
    smallest value is the smallest cell."""
    if offset:
        y = x + np.float32(offset)
        y *= np.float32(1.0 / step)
    else:
        y = x * np.float32(1.0 / step)
    return np.floor(y, out=y)


#: Coarse-to-fine clustering: Lloyd's algorithm first on blocks of 16 x 16 cells (4 L* x 8 deg), then of
#: 4 x 4 cells (1 L* x 2 deg), then on the cells themselves.
COARSE_BLOCKS = (16, 4)
#: cell keys are computed in float32, exact for whole numbers below this
_EXACT_F32 = 2 ** 24


def combine_top_clusters(counts: np.ndarray, modes: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The last step of both Thong et al. estimators (docs/METHODS.md §2.2): keep the ``top`` non-empty clusters
    with the highest first mode (L*; ties to the lower index) and average their ``modes`` (k, d) weighted by
    pixel ``counts`` (k,). Returns the estimate (d,), the weighted spread of the kept modes (d,) and the kept
    clusters."""
    valid = np.flatnonzero(counts > 0)
    order = valid[np.argsort(-modes[valid, 0], kind="stable")][:top]
    w = counts[order].astype(np.float64)
    est = (modes[order] * w[:, None]).sum(axis=0) / w.sum()
    spread = np.sqrt(((modes[order] - est) ** 2 * w[:, None]).sum(axis=0) / w.sum())
    return est, spread, order


def _sq_dist_rows(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """|x - c|^2 - |x|^2 = |c|^2 - 2 c.x for every centre (rows) and point ``X`` (d, M) (columns)."""
    D = (-2.0 * C) @ X
    D += (C * C).sum(axis=1)[:, None]
    return D


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


def _modes_to_values(idx: np.ndarray, first: float, step: float) -> np.ndarray:
    """Grid units (column 0 centred on ``first``) to values."""
    return first + idx * step


def _shift_or_div(x: np.ndarray, f: int) -> np.ndarray:
    """``x // f`` for non-negative integers (a bit shift when ``f`` is a power of two)."""
    return x >> (f.bit_length() - 1) if f & (f - 1) == 0 else x // f


def _coarse_levels(row, col, nL: int, nh: int, wf, X) -> dict:
    """Block means (2, B), weighted sums (2, B) and weights (B,) of the occupied blocks of every size in
    :data:`COARSE_BLOCKS`, in (block row, block column) order. The finest level is summed from the cells,
    each coarser one from the next finer level: weights are whole numbers and the weighted coordinates
    binary fractions (cell centres), so every sum is exact and the same whichever way it is grouped."""
    out = {}
    r, c, v, prev = row, col, (wf, wf * X[0], wf * X[1]), 1
    for b in sorted(COARSE_BLOCKS):
        if b % prev:  # not nested in the finer level: from the cells
            r, c, v, prev = row, col, (wf, wf * X[0], wf * X[1]), 1
        f = b // prev
        bn = -(-nh // b)
        bkey = _shift_or_div(r, f)
        bkey *= bn
        bkey += _shift_or_div(c, f)
        bw = np.bincount(bkey, weights=v[0])
        bnz = np.flatnonzero(bw)
        bw = bw[bnz]
        S = np.empty((2, bnz.size))
        for j in range(2):
            S[j] = np.bincount(bkey, weights=v[j + 1])[bnz]
        out[b] = (S / bw, S, bw)
        r = bnz // bn
        c = bnz - r * bn
        v, prev = (bw, S[0], S[1]), b
    return out


def _thong_fit(L, h, *, k: int = 5, top: int = 3, init_centers=None) -> tuple[ThongFit, np.ndarray]:
    """Histogram, clustering and per-cluster marginals (docs/METHODS.md §2.2); also returns every
    pixel's cluster (for the chroma histogram)."""
    n = L.shape[0]
    if n < k:
        raise FairvisionError(f"the thong estimator needs at least {k} pixels, got {n}")
    (Lmin, Lmax), (hmin, hmax) = _range(L), _range(h)
    sL, sh = _step_for_range(Lmin, Lmax, CELL_L, n), _step_for_range(hmin, hmax, CELL_H, n)
    last_h = float(int(round(360.0 / sh)) - 1)  # h* = 180 exactly joins the last cell
    # the cells of the extreme values are the extreme cells (the cell index is monotone)
    eL = _scaled_floor(np.array([Lmin, Lmax], dtype=np.float32), sL)
    eh = np.minimum(np.maximum(_scaled_floor(np.array([hmin, hmax], dtype=np.float32), sh, 180.0), 0.0), last_h)
    iL0, ih0 = int(eL[0]), int(eh[0])
    nL, nh = int(eL[1]) - iL0 + 1, int(eh[1]) - ih0 + 1
    rows = _scaled_floor(L, sL)  # grid row and column of every pixel (whole numbers in float32)
    rows -= np.float32(iL0)
    cols = _scaled_floor(h, sh, 180.0)
    np.maximum(cols, 0.0, out=cols)
    np.minimum(cols, last_h, out=cols)
    cols -= np.float32(ih0)
    exact = max(nL * nh, k * nL, k * nh) < _EXACT_F32  # every key a whole number below 2**24: exact in float32
    if exact:
        key = rows * np.float32(nh)
        key += cols
        key = key.astype(np.intp)
    else:
        rows, cols = rows.astype(np.intp), cols.astype(np.intp)
        key = rows * nh + cols
    counts = np.bincount(key, minlength=nL * nh)
    nz = np.flatnonzero(counts > 0)  # (a boolean scan is faster than one of the counts)
    w = counts[nz]
    del counts  # (large temporaries are released as soon as they are used: fresh pages cost page faults)
    row = nz // nh
    col = nz - row * nh
    L0 = (iL0 + 0.5) * sL
    h0 = (ih0 + 0.5) * sh - 180.0
    X = np.empty((2, nz.size))  # cell centres (binary fractions: sums are exact)
    np.multiply(row, sL, out=X[0])
    X[0] += L0
    np.multiply(col, sh, out=X[1])
    X[1] += h0
    wf = w.astype(np.float64)
    # quantile seeds from the cells, then Lloyd to a fixed point on blocks of 16 x 16 and then 4 x 4 cells (each
    # block at the weighted mean of its cells, so block sums are exact), each level from the previous centres
    if init_centers is None:  # the cells are in (L*, h*) order already
        C = weighted_quantile_seeds(X, wf, k, ordered=True, whole=True)
    else:
        C = np.asarray(init_centers, dtype=np.float64).reshape(k, 2)
    n_iter = 0
    levels = _coarse_levels(row, col, nL, nh, wf, X)
    del row, col, wf
    for block in COARSE_BLOCKS:
        BX, BS, bwv = levels[block]
        _, C, it = lloyd_exact_sums(BX, BS, bwv, C)  # to a fixed point: cheap on blocks
        n_iter += it
    # every pixel to the centre nearest its own (L*, h*) (float64; ties to the lowest index). A cell lies
    # wholly in one Voronoi region when its centre is closer to that region's centre than to any other by a
    # margin of more than 2 * (largest centre gap) * (half the cell diagonal); its pixels take the cell's
    # label, the pixels of the other cells are assigned one by one
    D = _sq_dist_rows(X, C)  # |c|^2 - 2 c.x for every cell centre, (k, M)
    best = np.minimum.reduce(D, axis=0)
    labels = first_at_min(D, best)
    gap = float(np.sqrt(((C[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)).max())
    cut = second_within(D, best, 2.0 * gap * (0.5 * np.hypot(sL, sh) * (1 + 1e-6) + 1e-9))  # slack for rounding
    table = np.empty(nL * nh, dtype=np.uint8 if 2 * k <= 255 else np.intp)  # only occupied cells are read
    code = cut.astype(table.dtype)
    code *= table.dtype.type(k)
    code += labels  # label + k: assign pixel by pixel
    table[nz] = code
    pl = table.take(key)
    if cut.any():
        idx = np.flatnonzero(pl >= k)
        P = np.empty((3, idx.size))
        P[0] = L.take(idx)
        P[1] = h.take(idx)
        P[2] = 1.0
        W = np.empty((k, 3))
        W[:, :2] = -2.0 * C
        W[:, 2] = (C * C).sum(axis=1)
        pl[idx] = argmin_rows(W @ P)
    lab = pl if exact else pl.astype(np.intp)  # (cluster, row) and (cluster, column) keys
    rows += lab * (np.float32(nL) if exact else nL)
    cols += lab * (np.float32(nh) if exact else nh)
    L_hist = np.bincount(rows.astype(np.intp, copy=False), minlength=k * nL).reshape(k, nL)
    h_hist = np.bincount(cols.astype(np.intp, copy=False), minlength=k * nh).reshape(k, nh)
    sizes = L_hist.sum(axis=1).astype(np.int64)
    fit = ThongFit(cells=X, weights=w, labels=labels, centers=C, sizes=sizes, L_hist=L_hist, h_hist=h_hist,
                   L0=L0, h0=h0, steps=(sL, sh), ranges=((Lmin, Lmax), (hmin, hmax)), k=k, top=top, n_iter=n_iter)
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
    Cmin, Cmax = _range(C)
    sC = _step_for_range(Cmin, Cmax, CELL_C, C.size)
    nC = int(_scaled_floor(np.array([Cmax], dtype=np.float32), sC)[0]) + 1
    iC = _scaled_floor(C, sC)  # (cluster, C* cell) keys: whole numbers, exact in float32 below 2**24
    if k * nC < _EXACT_F32:
        iC += pixel_labels * np.float32(nC)
    else:
        iC = iC.astype(np.intp) + pixel_labels.astype(np.intp) * nC
    C_hist = np.bincount(iC.astype(np.intp, copy=False), minlength=k * nC).reshape(k, nC)
    hists = (fit.L_hist, fit.h_hist, C_hist)
    both = np.zeros((3 * k, max(x.shape[1] for x in hists)), dtype=np.int64)  # one call: rows are independent
    for j, x in enumerate(hists):
        both[j * k:(j + 1) * k, :x.shape[1]] = x
    g = grid_modes(both).reshape(3, k)
    modes = np.column_stack([_modes_to_values(g[0], fit.L0, fit.steps[0]), _modes_to_values(g[1], fit.h0, fit.steps[1]),
                             _modes_to_values(g[2], 0.5 * sC, sC)])
    # a cell centre can lie up to half a cell beyond the data (all-white skin: L* 100.125): clip to the pixels' range
    lo, hi = np.array([*fit.ranges, (Cmin, Cmax)]).T
    np.minimum(np.maximum(modes, lo, out=modes), hi, out=modes)
    est, spread, kept = combine_top_clusters(fit.sizes, modes, top)
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
    return colour_result(Lm, Cm * np.cos(rad), Cm * np.sin(rad), **extra), fit


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


#: Occupied cells drawn one by one at each end of a cluster's histogram in :func:`thong_bootstrap`.
EDGE_CELLS = 4


def _edge_positions(hist: np.ndarray, e: int):
    """Per row of ``hist`` (G, V): the first and the last ``e`` occupied cells (positions (G, e) each; 0 where a
    row has fewer than ``e`` occupied cells) and the number of occupied cells."""
    G = hist.shape[0]
    rows, cols = np.nonzero(hist > 0)  # row by row, left to right
    m = np.bincount(rows, minlength=G)
    left = np.zeros((G, e), dtype=np.intp)
    right = np.zeros((G, e), dtype=np.intp)
    if cols.size == 0:
        return left, right, m
    end = np.cumsum(m)
    j = np.arange(e)
    pos = (end - m)[:, None] + j  # the j-th occupied cell of each row from the left ...
    np.copyto(left, cols.take(np.minimum(pos, cols.size - 1)), where=j < m[:, None])
    pos = end[:, None] - e + j  # ... and the (e - 1 - j)-th from the right
    np.copyto(right, cols.take(np.maximum(pos, 0)), where=j >= e - m[:, None])
    return left, right, m


def bootstrap_grid_modes(hist: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:func:`grid_modes` of multinomial redraws of every row of a histogram (docs/METHODS.md §2.2).

    A Sturges mode needs the lowest and highest occupied cells (the range), the total (the number of bins)
    and the count of each bin, not the count of each cell. So each draw is made in two exact steps: the
    first and the last :data:`EDGE_CELLS` occupied cells one by one and the cells between them as one
    category (one multinomial), which gives the range; then the count between is spread over the Sturges
    bins of that range (a multinomial over the bins, with the bins' shares of the middle cells: the
    aggregate of a multinomial is multinomial). A draw in which all the cells at an end stay empty (the range
    ends inside the middle) redraws its middle cell by cell. Clusters with at most ``2 EDGE_CELLS + 1``
    occupied cells are drawn cell by cell. The result has exactly the distribution of the cell-by-cell draw,
    with about a fifth of the binomial draws.

    Parameters
    ----------
    hist : (k, V) int array
        Counts of the cells ``0 .. V-1`` of each row.
    sizes : (R, k) int array
        Values redrawn for row ``c`` in replicate ``r``.
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray, shape (R, k)
        Modes in grid units (NaN where ``sizes`` is 0).
    """
    k, V = hist.shape
    R = sizes.shape[0]
    e = EDGE_CELLS
    out = np.full((R, k), np.nan)
    total = hist.sum(axis=1)
    left, right, m = _edge_positions(hist, e)
    split = m > 2 * e + 1
    # small clusters: cell by cell
    for c in np.flatnonzero((m > 0) & ~split):
        occ = np.flatnonzero(hist[c])
        draws = np.zeros((R, V), dtype=np.int64)
        draws[:, occ] = rng.multinomial(sizes[:, c], hist[c, occ] / total[c])
        out[:, c] = grid_modes(draws)
        out[sizes[:, c] == 0, c] = np.nan
    cs = np.flatnonzero(split)
    if cs.size == 0:
        return out
    # one row per (replicate, cluster) with pixels
    rr, ci = np.nonzero(sizes[:, cs] > 0)
    c = cs[ci]
    n = sizes[rr, c]
    G = c.size
    if G == 0:
        return out
    ends = np.concatenate([left[c], right[c]], axis=1)  # (G, 2e) cell positions
    g_rows = np.arange(G)[:, None]  # (fancy indexing along rows: take_along_axis without its Python overhead)
    ecounts = hist[c[:, None], ends]
    middle = total[c] - ecounts.sum(axis=1)
    P = np.concatenate([ecounts[:, :e], middle[:, None], ecounts[:, e:]], axis=1) / total[c][:, None]
    X = rng.multinomial(n, P)  # (G, 2e + 1)
    xl, xm, xr = X[:, :e], X[:, e], X[:, e + 1:]
    has_lo, has_hi = xl.any(axis=1), xr.any(axis=1)
    lo = left[c, (xl > 0).argmax(axis=1)]
    hi = right[c, e - 1 - (xr[:, ::-1] > 0).argmax(axis=1)]
    nb = np.ceil(np.log2(np.maximum(n, 1)) + 1.0).astype(np.int64)  # Sturges bins of the replicate's total
    stride = int(nb.max())
    mid_hist = hist.copy()
    mid_hist[np.arange(k)[:, None], np.concatenate([left, right], axis=1)] = 0  # middle cells only
    cum = np.zeros((k, V + 1), dtype=np.int64)
    np.cumsum(mid_hist, axis=1, out=cum[:, 1:])
    ok = np.flatnonzero(has_lo & has_hi)
    counts = np.zeros((G, stride), dtype=np.int64)
    if ok.size:
        span = (hi - lo)[ok]  # > 0: lo is left of the middle, hi right of it
        # bin t holds the cells lo + [ceil(t span / nb), ceil((t + 1) span / nb)) (grid_modes' exact integer
        # binning); bins past a row's nb are empty
        t = np.minimum(np.arange(stride + 1)[None, :], nb[ok, None])
        edges = lo[ok, None] - (-t * span[:, None]) // nb[ok, None]
        at = cum[c[ok][:, None], edges]
        mass = np.diff(at, axis=1).astype(np.float64)
        counts[ok] = rng.multinomial(xm[ok], mass / mass.sum(axis=1, keepdims=True))
        eb = (ends[ok] - lo[ok, None]) * nb[ok, None] // span[:, None]  # the end cells' bins
        np.maximum(eb, 0, out=eb)
        np.minimum(eb, (nb[ok] - 1)[:, None], out=eb)
        eb += g_rows[ok] * stride
        counts += np.bincount(eb.ravel(), weights=np.concatenate([xl[ok], xr[ok]], axis=1).ravel(),
                              minlength=G * stride).reshape(G, stride).astype(np.int64)  # whole numbers: exact
        best = counts[ok].argmax(axis=1)
        out[rr[ok], c[ok]] = lo[ok] + (best + 0.5) * span / nb[ok]
    for g in np.flatnonzero(~(has_lo & has_hi)):  # the range ends in the middle: redraw it cell by cell
        row = np.zeros(V, dtype=np.int64)
        row[ends[g]] = np.concatenate([xl[g], xr[g]])
        occ = np.flatnonzero(mid_hist[c[g]])
        row[occ] = rng.multinomial(xm[g], mid_hist[c[g], occ] / middle[g])
        out[rr[g], c[g]] = grid_modes(row[None, :])[0]
    return out


def thong_bootstrap(fit: ThongFit, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(L*, signed h*) estimates of ``n_boot`` bootstrap replicates of all ``n`` pixels (docs/METHODS.md §2.2).

    A replicate redraws the ``n`` pixels with replacement, as counts over the summary: the cluster
    sizes are multinomial with the full-sample cluster proportions, and within each cluster the L*
    and the h* histograms are multinomial with that cluster's L* and h* proportions (each exactly
    its distribution under pixel resampling; only the coupling between a cluster's L* and h*
    counts is dropped). Pixels keep their full-sample clusters: re-running the clustering per
    replicate (about 5 ms each on a 1024 x 1024 face) is left out, so the SD leaves out the times the
    quantile seeds would fall into another local optimum (docs/METHODS.md §2.2).
    The Sturges modes of the redrawn histograms come from their ranges and bin counts, drawn in
    two exact steps (:func:`bootstrap_grid_modes`); the top-``top`` choice by L* mode and the
    count-weighted mean are recomputed for all replicates at once. All draws run over the canonical
    cell order, so the replicates do not depend on the order of the pixels either.

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
    n = int(fit.sizes.sum())  # = fit.n (every pixel is in one cluster), from k numbers
    sizes = rng.multinomial(n, fit.sizes / n, size=R)  # (R, k)
    # the L* and h* histograms of all clusters as the rows of one table (padded with empty cells), drawn at once
    both = np.zeros((2 * k, max(fit.L_hist.shape[1], fit.h_hist.shape[1])), dtype=fit.L_hist.dtype)
    both[:k, :fit.L_hist.shape[1]] = fit.L_hist
    both[k:, :fit.h_hist.shape[1]] = fit.h_hist
    modes = bootstrap_grid_modes(both, np.concatenate([sizes, sizes], axis=1), rng)
    Lm = np.minimum(np.maximum(_modes_to_values(modes[:, :k], fit.L0, fit.steps[0]), fit.ranges[0][0]),
                    fit.ranges[0][1])
    hm = np.minimum(np.maximum(_modes_to_values(modes[:, k:], fit.h0, fit.steps[1]), fit.ranges[1][0]),
                    fit.ranges[1][1])
    key = np.where(sizes > 0, -Lm, np.inf)
    kept = np.argsort(key, axis=1, kind="stable")[:, :top]
    r_rows = np.arange(R)[:, None]
    w = sizes[r_rows, kept].astype(np.float64)
    out = np.empty((R, 2))
    for j, m in enumerate((Lm, hm)):
        v = m[r_rows, kept]
        out[:, j] = (np.where(v == v, v, 0.0) * w).sum(axis=1) / w.sum(axis=1)  # NaN (an empty cluster) as 0
    return out

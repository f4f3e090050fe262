"""The faster paths of the ``thong`` estimator (docs/METHODS.md §2.2) against straightforward versions:
the bootstrap's two-step multinomial draw against the exact distribution of a cell-by-cell draw
(enumerated), the buffered weighted Lloyd iterations against plain ones (bit-identical), the exact-sum Lloyd
iterations (moved sums, only the points near a boundary re-examined) against plain iterations and against
``kmeans_lloyd`` (bit-identical), the nearest-two-centres step against sorting, and the histogram cells
against ``numpy.unique``."""

import itertools
from math import factorial

import numpy as np
import pytest
from scipy import stats

from fairvision.skin.histogram_modes import grid_modes
from fairvision.skin.kmeans import argmin_rows, kmeans_lloyd, lloyd_exact_sums, nearest_two
from fairvision.skin.thong import EDGE_CELLS, bootstrap_grid_modes, cell_size, thong_features, thong_from_features


def _exact_mode_distribution(row: np.ndarray, n: int) -> dict:
    """Distribution of grid_modes of Multinomial(n, row / row.sum()) over the row's cells, by enumeration."""
    occ = np.flatnonzero(row)
    p = row[occ] / row.sum()
    outcomes = list(itertools.combinations_with_replacement(range(occ.size), n))
    H = np.zeros((len(outcomes), row.size), dtype=np.int64)
    prob = np.empty(len(outcomes))
    for i, o in enumerate(outcomes):
        x = np.bincount(o, minlength=occ.size)
        H[i, occ] = x
        prob[i] = factorial(n) / np.prod([factorial(v) for v in x]) * np.prod(p ** x)
    modes = grid_modes(H)
    out = {}
    for m, q in zip(modes, prob):
        out[m] = out.get(m, 0.0) + q
    assert abs(sum(out.values()) - 1) < 1e-9
    return out


def _gof_pvalue(draws: np.ndarray, exact: dict) -> float:
    values = np.array(sorted(exact))
    expected = np.array([exact[v] for v in values]) * draws.size
    observed = np.array([np.count_nonzero(draws == v) for v in values])
    assert observed.sum() == draws.size  # no mode outside the exact support
    big = expected >= 5  # pool the rare modes into one cell
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp).pvalue)


def test_two_step_draw_has_the_exact_mode_distribution():
    # row 0: 11 occupied cells with gaps (more than 2 * EDGE_CELLS + 1: the two-step path, and with n = 6
    # all four cells at an end stay empty often enough to exercise the cell-by-cell fallback); row 1: 6
    # occupied cells (drawn cell by cell); row 2: an empty cluster
    hist = np.array([[1, 0, 2, 1, 3, 0, 5, 2, 1, 1, 0, 2, 1, 1],
                     [0, 0, 4, 1, 0, 2, 2, 0, 1, 1, 0, 0, 0, 0],
                     [0] * 14])
    assert np.count_nonzero(hist[0]) > 2 * EDGE_CELLS + 1
    R = 20000
    sizes = np.tile([6, 5, 0], (R, 1))
    modes = bootstrap_grid_modes(hist, sizes, np.random.default_rng(0))
    assert np.isnan(modes[:, 2]).all()
    for c, n in ((0, 6), (1, 5)):
        p = _gof_pvalue(modes[:, c], _exact_mode_distribution(hist[c], n))
        assert p > 1e-3, (c, p)


def test_two_step_draw_matches_cell_by_cell_draws_on_a_wide_histogram():
    # sizes as the stability score uses them (thousands of pixels, ~100 occupied cells): the two samplers'
    # mode distributions agree (two-sample chi-square), and the replicates' SDs are close
    rng = np.random.default_rng(5)
    hist = np.zeros((2, 160), dtype=np.int64)
    hist[0, 10:150] = np.round(300 * np.exp(-0.5 * ((np.arange(10, 150) - 70) / 18.0) ** 2)).astype(int)
    hist[1, 30:90] = rng.integers(0, 40, 60)
    R = 3000
    sizes = np.column_stack([rng.binomial(hist.sum(), 0.5, R), rng.binomial(hist[1].sum(), 0.9, R)])
    fast = bootstrap_grid_modes(hist, sizes, np.random.default_rng(1))
    draws = np.zeros((R, 2, 160), dtype=np.int64)
    slow_rng = np.random.default_rng(2)
    for c in range(2):
        occ = np.flatnonzero(hist[c])
        draws[:, c, occ] = slow_rng.multinomial(sizes[:, c], hist[c, occ] / hist[c].sum())
    slow = grid_modes(draws.reshape(2 * R, 160)).reshape(R, 2)
    for c in range(2):
        values = np.union1d(fast[:, c], slow[:, c])
        table = np.array([[np.count_nonzero(x[:, c] == v) for v in values] for x in (fast, slow)])
        table = table[:, table.sum(axis=0) >= 10]
        assert stats.chi2_contingency(table)[1] > 1e-3, c
        assert fast[:, c].std() == pytest.approx(slow[:, c].std(), rel=0.15)


def _plain_weighted_lloyd(X, w, C, tol):
    """Weighted Lloyd's algorithm written plainly: all distances and three bincounts every iteration."""
    X = np.asarray(X, dtype=np.float64)
    thresh = 0.0
    if tol > 0:
        W = w.sum()
        mean = (X @ w) / W
        thresh = tol * float((((X - mean[:, None]) ** 2) @ w).mean() / W)
    return _plain_lloyd(X, X * w, w, C, thresh)


def _plain_exact_lloyd(X, S, w, C):
    """Lloyd's algorithm written plainly with exact centres (sum of S) / (sum of w) over each cluster: every
    distance every iteration (the product ``kmeans_lloyd`` takes), every sum from scratch."""
    return _plain_lloyd(X, S, w, C, 0.0)


@pytest.mark.parametrize("tol", [0.0, 1e-4])
def test_weighted_lloyd_is_bit_identical_to_plain_iterations(tol):
    rng = np.random.default_rng(0)
    for trial in range(40):
        M, k = int(rng.integers(20, 3000)), int(rng.integers(2, 7))
        X = np.vstack([rng.normal(60, 10, M), rng.normal(30, 25, M)])
        if trial % 2:
            X = np.round(X * 4) / 4  # on a grid, as the estimator's cells: ties between centres
        w = rng.integers(1, 40, M).astype(np.float64)
        C0 = X[:, rng.choice(M, k, replace=False)].T.copy()
        labels, C, it = kmeans_lloyd(X.T, C0, sample_weight=w, tol=tol)
        ref_labels, ref_C, ref_it = _plain_weighted_lloyd(X, w, C0, tol)
        assert it == ref_it and np.array_equal(labels, ref_labels) and np.array_equal(C, ref_C), trial


def _plain_lloyd(X, S, w, C, thresh):
    """The loop both plain references share: centres (sum of S) / (sum of w), stop when the labels repeat or the
    centres move by at most ``thresh`` (squared)."""
    C = np.array(C, dtype=np.float64)
    k, d = C.shape
    X1 = np.vstack([X, np.ones((1, X.shape[1]))])

    def nearest(C):
        Wm = np.empty((k, d + 1))
        Wm[:, :d] = -2.0 * C
        Wm[:, d] = (C * C).sum(axis=1)
        return argmin_rows(Wm @ X1)

    labels = None
    for it in range(1, 301):
        new = nearest(C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        cnt = np.bincount(labels, weights=w, minlength=k)
        old = C.copy()
        for j in range(d):
            np.divide(np.bincount(labels, weights=S[j], minlength=k), cnt, out=C[:, j], where=cnt > 0)
        if np.vdot(C - old, C - old) <= thresh:
            labels = nearest(C)
            break
    return labels, C, it


def _grid_points(rng, M, d, step):
    """Points on a grid of binary-fraction step (exact sums), with whole-number weights."""
    X = np.round(np.vstack([rng.normal(60, 12, M), rng.normal(30, 25, M), rng.normal(20, 8, M)][:d]) / step) * step
    return X, rng.integers(1, 60, M).astype(np.float64)


def test_exact_sum_lloyd_is_bit_identical_to_plain_iterations():
    rng = np.random.default_rng(3)
    for trial in range(60):
        M, k, d = int(rng.integers(30, 2500)), int(rng.integers(2, 8)), 2 + trial % 2
        X, w = _grid_points(rng, M, d, 0.25 if trial % 3 else 1.0)  # a coarse grid: many ties
        if trial % 4 == 0:  # block means: inexact coordinates, exact sums
            S = X * w
            X = S / w * (1 + 1e-13 * rng.normal(size=M))
        else:
            S = X * w
        C0 = X[:, rng.choice(M, k, replace=False)].T.copy()
        if trial % 5 == 0:
            C0[-1] = 1e4  # a centre no point is nearest to: its cluster stays empty
        labels, C, it = lloyd_exact_sums(X, S, w, C0)
        ref_labels, ref_C, ref_it = _plain_exact_lloyd(X, S, w, C0)
        assert it == ref_it and np.array_equal(labels, ref_labels) and np.array_equal(C, ref_C), trial


def test_exact_sum_lloyd_equals_kmeans_lloyd_where_products_are_exact():
    # cells of a grid with whole-number weights: w * x is exact, so kmeans_lloyd's sums are the exact ones
    rng = np.random.default_rng(8)
    for trial in range(30):
        M, k = int(rng.integers(50, 3000)), int(rng.integers(2, 7))
        X, w = _grid_points(rng, M, 2, 0.125)
        C0 = X[:, rng.choice(M, k, replace=False)].T.copy()
        labels, C, it = lloyd_exact_sums(X, X * w, w, C0)
        ref_labels, ref_C, ref_it = kmeans_lloyd(X.T, C0, sample_weight=w, tol=0.0)
        assert it == ref_it and np.array_equal(labels, ref_labels) and np.array_equal(C, ref_C), trial


def test_nearest_two_against_sorting():
    rng = np.random.default_rng(1)
    for k in (1, 2, 5, 9):
        D = np.round(rng.normal(size=(k, 500)) * 4) / 4  # rounded: ties between rows
        labels, margin = nearest_two(D.copy())
        assert np.array_equal(labels, argmin_rows(D))
        s = np.sort(D, axis=0)
        want = s[1] - s[0] if k > 1 else np.full(500, np.inf)
        np.testing.assert_array_equal(margin, want)


def test_histogram_cells_against_numpy_unique():
    rng = np.random.default_rng(0)
    lab = np.column_stack([rng.normal(62, 6, 20000), rng.normal(14, 4, 20000), rng.normal(-3, 6, 20000)])
    L, h, C = thong_features(lab.astype(np.float32))
    _, fit = thong_from_features(L, h, C)
    sL, sh = cell_size(L, 0.25), cell_size(h, 0.5)
    # the cell of a pixel: floor(L* / sL) and floor((h* + 180) / sh), in float32 as the estimator defines it
    iL = np.floor(L * np.float32(1 / sL)).astype(np.float64)
    ih = np.floor((h + np.float32(180)) * np.float32(1 / sh)).astype(np.float64)
    cells, counts = np.unique(np.column_stack([iL, ih]), axis=0, return_counts=True)
    np.testing.assert_array_equal(fit.weights, counts)
    np.testing.assert_array_equal(fit.cells, ((cells + 0.5) * [sL, sh] - [0.0, 180.0]).T)
    assert fit.sizes.sum() == L.size and fit.L_hist.sum() == fit.h_hist.sum() == L.size


def test_whole_number_keys_in_float32_equal_integer_keys(monkeypatch):
    # cell and (cluster, cell) keys are whole numbers computed in float32 below 2**24; above it they are
    # computed in int64: both give the same answer (9 clusters: keys past 255 for uint8 labels)
    import fairvision.skin.thong as thong_module

    rng = np.random.default_rng(2)
    lab = np.column_stack([rng.normal(58, 9, 15000), rng.normal(13, 6, 15000), rng.normal(16, 7, 15000)])
    features = thong_features(lab.astype(np.float32))
    for k, top in ((5, 3), (9, 4)):
        want = thong_from_features(*features, k=k, top=top)[0]
        monkeypatch.setattr(thong_module, "_EXACT_F32", 1)
        got = thong_from_features(*features, k=k, top=top)[0]
        monkeypatch.undo()
        assert repr(got) == repr(want)

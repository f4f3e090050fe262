"""The faster steps of the ``thong`` estimator (docs/METHODS.md §2.2) against plain versions written here:
exact-sum Lloyd iterations (moved sums, points near a boundary re-examined, every point re-examined when there
are few) against textbook weighted Lloyd iterations on random weighted points with ties and empty clusters;
the whole-number quantile seeds against the general rule; the first-row-at-the-minimum and
second-nearest-within-a-bound tests against sorting; the grid modes' integer path against a brute-force
binning; and the measurement's spread and stability against numpy's percentile and standard deviation."""

import numpy as np
import pytest

import fairvision.skin.kmeans as kmeans_module
from fairvision.skin.colour import srgb_to_lab
from fairvision.skin.histogram_modes import grid_modes, sturges_bins
from fairvision.skin.kmeans import first_at_min, lloyd_exact_sums, nearest_two, second_within, weighted_quantile_seeds
from fairvision.skin.measurement import measure_pixels
from fairvision.skin.thong import thong_bootstrap, thong_features, thong_from_features


def _textbook_lloyd(X, S, w, C0, max_iter=300):
    """Weighted Lloyd's algorithm as a textbook writes it: every distance ``|c|^2 - 2 c.x`` of every point every
    iteration (one product over all the points), the nearest centre by ``numpy.argmin`` (ties to the lowest
    index), every centre from scratch as (sum of S) / (sum of w) over its cluster, an empty cluster keeping its
    centre; stop when no label or no centre changes (then the labels of the final centres)."""
    C = np.array(C0, dtype=np.float64)
    k, d = C.shape
    X1 = np.vstack([X, np.ones((1, X.shape[1]))])

    def labels_of(C):
        W = np.hstack([-2.0 * C, (C * C).sum(axis=1, keepdims=True)])
        return np.argmin(W @ X1, axis=0)

    labels = None
    it = 0
    for it in range(1, max_iter + 1):
        new = labels_of(C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        old = C.copy()
        cnt = np.bincount(labels, weights=w, minlength=k)
        for j in range(d):
            sj = np.bincount(labels, weights=S[j], minlength=k)
            C[:, j] = np.where(cnt > 0, sj / np.where(cnt > 0, cnt, 1.0), C[:, j])
        if np.array_equal(C, old):
            labels = labels_of(C)
            break
    return labels, C, it


def _weighted_grid_points(rng, M, d, step, blobs):
    """Weighted points on a grid of binary-fraction step (exact sums), from ``blobs`` overlapping Gaussians."""
    centres = rng.normal([60, 20, 15][:d], [6, 12, 5][:d], size=(blobs, d))
    X = centres[rng.integers(0, blobs, M)].T + rng.normal(0, [[5], [9], [4]][:d], size=(d, M))
    X = np.round(X / step) * step
    return X, rng.integers(1, 50, M).astype(np.float64)


@pytest.mark.parametrize("seed", range(4))
def test_exact_sum_lloyd_equals_textbook_lloyd(seed):
    rng = np.random.default_rng(100 + seed)
    iters = []
    for trial in range(30):
        M = int(rng.choice([int(rng.integers(3, 60)), int(rng.integers(300, 500)), int(rng.integers(500, 2500))]))
        k, d = int(rng.integers(1, 9)), 2 + trial % 2
        X, w = _weighted_grid_points(rng, M, d, [0.25, 1.0, 4.0][trial % 3], int(rng.integers(1, 4)))  # 4.0: ties
        S = X * w
        if trial % 4 == 0:  # block means: inexact coordinates, exact sums
            X = S / w * (1 + 1e-13 * rng.normal(size=M))
        C0 = X[:, rng.choice(M, min(k, M), replace=M < k)].T.copy()
        if trial % 5 == 1:
            C0[-1] = 1e4  # no point is nearest to it: an empty cluster that keeps its centre
        if trial % 5 == 2 and k > 1:
            C0[1] = C0[0]  # a duplicate centre: always tied, its cluster stays empty
        if trial % 5 == 3 and k > 1:  # two centres placed symmetrically about grid points: exact ties
            C0[1] = C0[0] + 2.0
        got = lloyd_exact_sums(X, S, w, C0)
        want = _textbook_lloyd(X, S, w, C0)
        assert got[2] == want[2], (seed, trial)
        assert np.array_equal(got[0], want[0]) and got[1].tobytes() == want[1].tobytes(), (seed, trial)
        iters.append(got[2])
    assert max(iters) >= 10  # some slow drifts: many partial passes and later passes over all points


def test_exact_sum_lloyd_does_not_depend_on_when_it_examines_all_points(monkeypatch):
    # the filters only skip points that provably keep their labels: examining every point every iteration,
    # or re-examining all points after every iteration, gives the same labels, centres and iterations
    rng = np.random.default_rng(7)
    for trial in range(12):
        X, w = _weighted_grid_points(rng, int(rng.integers(200, 2000)), 2, 0.25, 3)
        C0 = X[:, rng.choice(X.shape[1], 5, replace=False)].T.copy()
        runs = []
        for all_points, shifts in ((400, 8.0), (10 ** 9, 8.0), (0, 8.0), (0, 0.0)):
            monkeypatch.setattr(kmeans_module, "_ALL_POINTS", all_points)
            monkeypatch.setattr(kmeans_module, "_ACTIVE_SHIFTS", shifts)
            runs.append(lloyd_exact_sums(X, X * w, w, C0))
        for labels, C, it in runs[1:]:
            assert it == runs[0][2] and np.array_equal(labels, runs[0][0]) and np.array_equal(C, runs[0][1]), trial


def test_whole_weight_seeds_equal_the_general_rule():
    rng = np.random.default_rng(3)
    for trial in range(200):
        M, k = int(rng.integers(1, 400)), int(rng.integers(1, 9))
        X = np.sort(np.round(rng.normal(60, 8, (2, M)) * 4) / 4, axis=1)
        w = rng.integers(1, [2, 5, 200][trial % 3], M).astype(np.float64)
        if trial % 7 == 0:
            w[:] = 3.0 * k  # the cuts fall exactly on point boundaries
        fast = weighted_quantile_seeds(X, w, k, ordered=True, whole=True)
        plain = weighted_quantile_seeds(X, w, k, ordered=True)
        assert fast.tobytes() == plain.tobytes(), trial


def test_first_at_min_and_second_within_against_sorting():
    rng = np.random.default_rng(1)
    for k in (1, 2, 5, 9):
        D = np.round(rng.normal(size=(k, 800)) * 3) / 3  # rounded: ties between rows
        best = D.min(axis=0)
        assert np.array_equal(first_at_min(D, best), np.argmin(D, axis=0))
        s = np.sort(D, axis=0)
        second = s[1] - s[0] if k > 1 else np.full(800, np.inf)
        for bound in (0.0, 1 / 3, 0.5, 2.0, -1.0):
            want = second <= bound
            assert np.array_equal(second_within(D.copy(), best, bound), want), (k, bound)
            assert np.array_equal(nearest_two(D.copy())[1] <= bound, want), (k, bound)


def _brute_grid_mode(row):
    """The grid mode of one histogram row, cell by cell in Python integers."""
    occ = [j for j, c in enumerate(row) if c > 0]
    if not occ:
        return np.nan
    lo, hi = occ[0], occ[-1]
    if hi == lo:
        return float(lo)
    nb = sturges_bins(int(sum(row)))
    counts = [0] * nb
    for j in occ:
        counts[min((j - lo) * nb // (hi - lo), nb - 1)] += int(row[j])
    return lo + (counts.index(max(counts)) + 0.5) * (hi - lo) / nb


def test_grid_modes_integer_binning_against_brute_force():
    rng = np.random.default_rng(2)
    for trial in range(40):
        G, V = int(rng.integers(1, 20)), int(rng.integers(1, 400))
        H = rng.poisson(rng.uniform(0.2, 30), (G, V)) * (rng.random((G, V)) < rng.uniform(0.05, 1))
        H[0] = 0  # an empty row
        if G > 1:
            H[1] = 0
            H[1, rng.integers(0, V)] = 7  # a single occupied cell
        if G > 2 and V > 3:
            H[2] = 0
            H[2, [0, V - 1]] = [1, 5]  # the fullest bin is the last, holding only the highest cell
        got = grid_modes(H)
        want = np.array([_brute_grid_mode(r) for r in H])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(grid_modes(H.astype(np.float64)), want)  # the float path


def test_measurement_spread_and_stability_are_numpy_percentiles_and_sds():
    rng = np.random.default_rng(4)
    n = 9000  # more than the exact percentile shortcut's threshold
    px = np.clip(rng.normal([180, 130, 110], [25, 20, 20], (n, 3)), 0, 255).astype(np.uint8)
    m = measure_pixels(px, "thong")
    lab = srgb_to_lab(px.astype(np.float32) / np.float32(255.0))
    L, h, C = thong_features(lab)
    assert m.spread["L_sd"] == float(np.std(L, dtype=np.float64))
    assert m.spread["hue_sd"] == float(np.std(h, dtype=np.float64))
    qL, qh = np.percentile(L, [25, 75]), np.percentile(h, [25, 75])
    assert m.spread["L_iqr"] == float(qL[1] - qL[0]) and m.spread["hue_iqr"] == float(qh[1] - qh[0])
    _, fit = thong_from_features(L, h, C)
    sd = thong_bootstrap(fit, 10, np.random.default_rng(0)).std(axis=0, ddof=1)
    assert (m.stability["L_sd"], m.stability["hue_sd"]) == (float(sd[0]), float(sd[1]))

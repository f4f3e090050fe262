"""The ``thong`` estimator on real portraits: order-free, mirror-free, deterministic, close to the
published method, checked piece by piece against independent computations (numpy histograms of the
expanded pixels, scikit-learn K-Means on the same weighted histogram, a brute-force pixel bootstrap);
plus face finding on pure noise (docs/METHODS.md §2.1 and §2.2).

The portraits are the CC0 images bundled in ``fairvision.datasets`` (``load_portraits``); their masks
come from the project's own face-mesh mask, as ``measure`` makes them.
"""

import numpy as np
import pytest

from fairvision.datasets import load_portraits
from fairvision.io.images import read_image
from fairvision.skin import measure, measure_pixels, srgb_to_lab
from fairvision.skin.histogram_modes import grid_modes, sturges_bins
from fairvision.skin.kmeans import kmeans_lloyd, quantile_seeds, weighted_quantile_seeds
from fairvision.skin.thong import cell_size, thong, thong_bootstrap, thong_features, thong_from_features
from fairvision.skin.measurement import smooth_skin_pixels

#: Portraits used below: small and large masks (above 32k pixels the old estimator subsampled by pixel order).
PORTRAITS = [0, 2, 3, 4, 6, 9, 15]


@pytest.fixture(scope="module")
def portraits():
    pytest.importorskip("mediapipe")
    from fairvision.skin.masks import skin_mask

    paths = load_portraits().image_path.tolist()
    out = []
    for i in PORTRAITS:
        img = read_image(paths[i])
        res = skin_mask(img)
        assert res.mask is not None, paths[i]
        out.append((paths[i], img, res.mask))
    return out


def _lab(img, mask):
    return srgb_to_lab(smooth_skin_pixels(img / 255.0, mask))


def _signed(h):
    return (h + 180.0) % 360.0 - 180.0


# ----------------------------------------------------------------- invariance


@pytest.mark.vision
def test_thong_is_invariant_to_pixel_order(portraits):
    rng = np.random.default_rng(0)
    assert max(int(m.sum()) for _, _, m in portraits) > 32768  # the size at which pixel order used to matter
    for path, img, mask in portraits:
        lab = _lab(img, mask)
        a = thong(lab)
        for _ in range(2):
            b = thong(lab[rng.permutation(len(lab))])
            for key in ("L", "a", "b", "hue", "chroma", "ita"):
                assert b[key] == pytest.approx(a[key], abs=1e-6), (path, key)
            assert b["extra"]["cluster_sizes"] == a["extra"]["cluster_sizes"]
        # the whole measurement, stability included, from the same pixels in another order
        px = (smooth_skin_pixels(img / 255.0, mask) * 255).round().astype(np.uint8)
        m1 = measure_pixels(px, "thong")
        m2 = measure_pixels(px[rng.permutation(len(px))], "thong")
        for key in ("L", "hue", "chroma"):
            assert getattr(m2, key) == pytest.approx(getattr(m1, key), abs=1e-6)
        assert m2.stability == pytest.approx(m1.stability, abs=1e-6) and m2.flags == m1.flags


@pytest.mark.vision
def test_thong_is_invariant_to_mirroring(portraits):
    for path, img, mask in portraits:
        a = measure(img, mask, "thong").to_dict()
        b = measure(np.ascontiguousarray(img[:, ::-1]), np.ascontiguousarray(mask[:, ::-1]), "thong").to_dict()
        for key, val in a.items():
            if isinstance(val, float):
                assert b[key] == pytest.approx(val, abs=1e-6, nan_ok=True), (path, key)
            else:
                assert b[key] == val, (path, key)


@pytest.mark.vision
def test_thong_is_deterministic_on_portraits(portraits):
    for _, img, mask in portraits[:3]:
        assert repr(measure(img, mask).to_dict()) == repr(measure(img.copy(), mask.copy()).to_dict())


# ----------------------------------------------------------------- independent computations


def _pixels(lab, fit):
    """Every pixel's cell-centre (L*, signed h*) and its nearest final centre, computed directly."""
    L, h, _ = thong_features(lab)
    sL, sh = fit.steps
    iL = np.floor(L * np.float32(1 / sL))
    ih = np.minimum(np.floor((h + np.float32(180)) * np.float32(1 / sh)), round(360 / sh) - 1)
    values = np.stack([(iL + 0.5) * sL, (ih + 0.5) * sh - 180.0]).astype(np.float64)
    P = np.stack([L, h]).astype(np.float64)
    labels = ((P[None] - fit.centers[:, :, None]) ** 2).sum(axis=1).argmin(axis=0)
    return values, labels


def _brute_force_answer(values, labels, k=5, top=3):
    """Thong's steps 4-5 with numpy.histogram on the pixels (at their cell centres) of each cluster."""
    modes, sizes = [], []
    for c in range(k):
        sel = labels == c
        if not sel.any():
            continue
        row = []
        for x in values[:, sel]:
            if x.max() == x.min():
                row.append(x[0])
                continue
            counts, edges = np.histogram(x, bins=sturges_bins(x.size))
            j = counts.argmax()
            row.append((edges[j] + edges[j + 1]) / 2)
        modes.append(row)
        sizes.append(sel.sum())
    modes, sizes = np.array(modes), np.array(sizes, dtype=float)
    kept = np.argsort(-modes[:, 0], kind="stable")[:top]
    return (modes[kept] * sizes[kept, None]).sum(axis=0) / sizes[kept].sum()


@pytest.mark.vision
def test_thong_answer_matches_numpy_histograms_of_its_summary(portraits):
    for path, img, mask in portraits:
        lab = _lab(img, mask)
        est, fit = thong_from_features(*thong_features(lab))
        assert fit.n == len(lab)
        values, labels = _pixels(lab, fit)
        assert np.array_equal(np.bincount(labels, minlength=5), fit.sizes), path  # every pixel at its nearest centre
        L, h = _brute_force_answer(values, labels)
        assert est["L"] == pytest.approx(L, abs=1e-6), path
        assert _signed(est["hue"]) == pytest.approx(h, abs=1e-6), path
        sL, sh = fit.steps
        assert sL <= 0.25 and sh <= 0.5


@pytest.mark.vision
def test_thong_clustering_against_scikit_learn(portraits):
    from sklearn.cluster import KMeans

    for path, img, mask in portraits:
        _, fit = thong_from_features(*thong_features(_lab(img, mask)))
        X, w = fit.cells.T, fit.weights.astype(float)
        # every cell is in the cluster of its nearest centre
        d = ((X[:, None, :] - fit.centers[None]) ** 2).sum(axis=2)
        assert np.array_equal(fit.labels, d.argmin(axis=1)), path
        # the centres are a fixed point of one scikit-learn Lloyd step on the 4 x 4-cell blocks
        sL, sh = fit.steps
        row = np.rint((X[:, 0] - fit.L0) / sL).astype(int) // 4
        col = np.rint((X[:, 1] - fit.h0) / sh).astype(int) // 4
        key = row * (col.max() + 1) + col
        uniq, inv = np.unique(key, return_inverse=True)
        bw = np.bincount(inv, weights=w)
        B = np.column_stack([np.bincount(inv, weights=w * X[:, j]) / bw for j in range(2)])
        km = KMeans(fit.k, init=fit.centers, n_init=1, max_iter=1, tol=0.0, algorithm="lloyd").fit(B, sample_weight=bw)
        np.testing.assert_allclose(km.cluster_centers_, fit.centers, atol=1e-7, err_msg=path)
        # and close to the best of 10 k-means++ runs on the cells (within-cluster sum of squares)
        best = KMeans(fit.k, n_init=10, random_state=0).fit(X, sample_weight=w)
        ours = (d.min(axis=1) * w).sum()
        assert ours <= 1.05 * best.inertia_, (path, ours / best.inertia_)


def test_weighted_lloyd_matches_scikit_learn_from_the_same_start():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(m, 2.0, (300, 2)) for m in ([50, 20], [60, 40], [70, 60], [45, 55], [65, 10])])
    w = rng.integers(1, 20, len(X)).astype(float)
    init = X[[0, 300, 600, 900, 1200]]
    labels, centers, _ = kmeans_lloyd(X, init, sample_weight=w, tol=0.0)
    km = KMeans(5, init=init, n_init=1, tol=0.0, algorithm="lloyd").fit(X, sample_weight=w)
    np.testing.assert_allclose(centers, km.cluster_centers_, atol=1e-9)
    assert np.array_equal(labels, km.labels_)


def test_weighted_quantile_seeds_are_the_pixel_quantile_seeds():
    # integer weights that split evenly: the same as repeating every point and cutting the sorted pixels
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, 40)) * [[10], [20]]
    w = rng.integers(1, 6, 40)
    w[-1] += (5 - w.sum() % 5) % 5  # total divisible by k = 5
    pixels = np.repeat(X, w, axis=1).T
    np.testing.assert_allclose(weighted_quantile_seeds(X, w.astype(float), 5), quantile_seeds(pixels, 5), atol=1e-9)


def test_grid_modes_brute_force():
    rng = np.random.default_rng(4)
    hist = rng.integers(0, 9, (30, 50)) * (rng.random((30, 50)) < 0.6)
    hist[0] = 0
    hist[1] = 0
    hist[1, 7] = 5  # one occupied cell: that cell is the mode
    modes = grid_modes(hist)
    assert np.isnan(modes[0]) and modes[1] == 7
    for g in range(2, 30):
        x = np.repeat(np.arange(50, dtype=float), hist[g]) + 0.5  # cell centres; never on a bin edge
        counts, edges = np.histogram(x, bins=sturges_bins(x.size))
        j = counts.argmax()
        assert modes[g] + 0.5 == pytest.approx((edges[j] + edges[j + 1]) / 2, abs=1e-9)


def test_cell_size_is_finer_than_sturges_bins():
    rng = np.random.default_rng(5)
    wide = rng.normal(50, 15, 100_000)
    narrow = rng.normal(58, 0.6, 7000)
    assert cell_size(wide, 0.25) == 0.25
    s = cell_size(narrow, 0.25)
    assert s <= (narrow.max() - narrow.min()) / (8 * sturges_bins(narrow.size)) and s == 0.25 / 2 ** round(np.log2(0.25 / s))


# ----------------------------------------------------------------- stability


@pytest.mark.vision
def test_bootstrap_matches_a_brute_force_pixel_bootstrap(portraits):
    # the same scheme by brute force: redraw n pixels with replacement, each keeps its cell's cluster,
    # Sturges modes by numpy.histogram, top 3 by L* mode, count-weighted mean
    R = 500  # the replicate answers are heavy-tailed (a mode jumps a bin now and then): SDs need many
    for path, img, mask in portraits[:3]:
        lab = _lab(img, mask)
        _, fit = thong_from_features(*thong_features(lab))
        fast = thong_bootstrap(fit, R, np.random.default_rng(0))
        values, labels = _pixels(lab, fit)
        rng = np.random.default_rng(1)
        reps = []
        for _ in range(R):
            idx = rng.integers(0, fit.n, fit.n)
            reps.append(_brute_force_answer(values[:, idx], labels[idx]))
        slow = np.array(reps)
        np.testing.assert_allclose(fast.mean(axis=0), slow.mean(axis=0), atol=0.6, err_msg=path)
        ratio = fast.std(axis=0) / np.maximum(slow.std(axis=0), 1e-9)
        assert np.all((ratio > 0.67) & (ratio < 1.5)) or np.all(slow.std(axis=0) < 0.05), (path, ratio)


@pytest.mark.vision
def test_stability_flag_and_replicate_size(portraits):
    for _, img, mask in portraits[:3]:
        m = measure(img, mask)
        assert m.stability["boot_pixels"] == m.n_pixels  # replicates redraw all the pixels
        assert ("low_stability" in m.flags) == (m.stability["L_sd"] > 1.5 or m.stability["hue_sd"] > 3.0)


# ----------------------------------------------------------------- against the published method


@pytest.mark.vision
def test_close_to_the_published_method_on_portraits(portraits):
    # published: scikit-learn K-Means (n_init=10), left bin edges, arctan hue, whole-image smoothing
    # (docs/METHODS.md §2.2). Over the bundled portraits the median differences are about 1.5 L* and
    # 1.5 deg (the deliberate departures and the published answer's own seed dependence)
    dL, dh = [], []
    for _, img, mask in portraits:
        ours = measure(img, mask, n_boot=0)
        pub = measure(img, mask, "thong-published", n_init=10, n_boot=0)
        dL.append(abs(ours.L - pub.L))
        dh.append(abs(_signed(ours.hue) - pub.hue))
    assert np.median(dL) < 2.5 and max(dL) < 7.0, dL
    # hue: one of these faces (010.jpg) has low-chroma clusters with a* < 0, where the published arctan hue
    # folds 160 deg to -20 deg; the signed atan2 hue (a deliberate departure) reports 58.7 deg, not 37.9
    assert np.median(dh) < 3.0 and np.sort(dh)[-2] < 10.0, dh


# ----------------------------------------------------------------- noise is not a face


def test_neighbour_correlation_tells_noise_from_photographs():
    from fairvision.vision.detect import MIN_NEIGHBOUR_CORRELATION, neighbour_correlation, plausible_face_box

    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3)).astype(np.uint8)
    box = np.array([100, 60, 400, 360], dtype=np.float32)
    assert abs(neighbour_correlation(noise, box)) < 0.1 and not plausible_face_box(noise, box)
    img = read_image(load_portraits().image_path.iloc[0])
    h, w = img.shape[:2]
    assert neighbour_correlation(img, np.array([w * 0.3, h * 0.2, w * 0.7, h * 0.7])) > MIN_NEIGHBOUR_CORRELATION
    flat = np.full((100, 100, 3), 128, np.uint8)
    assert not plausible_face_box(flat, np.array([10, 10, 90, 90]))


@pytest.mark.vision
@pytest.mark.parametrize("seed", [2, 7, 14])  # seeds on which the face detector fires (scores 0.50 to 0.70)
def test_pure_noise_is_not_a_face(seed):
    pytest.importorskip("mediapipe")
    from fairvision.skin.masks import skin_mask

    noise = np.random.default_rng(seed).integers(0, 256, (480, 640, 3)).astype(np.uint8)
    res = skin_mask(noise)
    assert res.mask is None and res.reason == "no face found"
    m = measure(noise)
    assert not m.ok and m.reason == "no face found" and "no_mask" in m.flags

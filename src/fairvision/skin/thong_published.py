"""The published Thong et al. code's choices (SonyResearch/apparent_skincolor), kept for comparison with
published numbers (docs/METHODS.md §2.2).

scikit-learn ``KMeans(5, n_init=1, random_state=2021)`` (k-means++ seeding), hue arctan(b*/a*) (a* < 0
gives negative angles), the histogram mode at the LEFT bin edge, and Gaussian smoothing of the whole image
(background included) before the mask is applied (:func:`fairvision.skin.measurement.measure` does that
part). Its answer depends on the seed. Smoothing runs in float64 and CIELAB follows scikit-image's
``rgb2lab`` constants (:func:`published_lab`), so the published numbers are reproduced exactly
(docs/METHODS.md §2.2: 60.3 / 28.0 with ``n_init=1`` and 58.1 / 62.3 with ``n_init=10`` on the reference
sample).
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.skin.colour import hue_angle
from fairvision.skin.histogram_modes import histogram_mode
from fairvision.skin.simple_estimators import colour_result
from fairvision.skin.thong import combine_top_clusters

__all__ = ["thong_published", "published_lab"]


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


def thong_published(lab: np.ndarray, *, k: int = 5, top: int = 3, kmeans_seed: int = 2021, n_init: int = 1) -> dict:
    """The published Thong et al. choices (see module docstring), for comparison.

    The returned ``hue`` is the published arctan(b*/a*) angle (it can be
    negative); a*, b* are the weighted means of the kept clusters' a*, b* modes
    taken the same way (left bin edges).
    """
    from sklearn.cluster import KMeans  # lazy: importing sklearn.cluster takes about 6 s (measured, -X importtime)

    lab = np.asarray(lab, dtype=np.float64)
    if lab.shape[0] < k:
        raise FairvisionError(f"the thong estimator needs at least {k} pixels, got {lab.shape[0]}")
    L = lab[:, 0]
    h = hue_angle(lab, convention="arctan")
    X = np.column_stack([L, h])
    labels = KMeans(k, n_init=n_init, random_state=kmeans_seed).fit(X).labels_
    counts, modes = _cluster_modes(labels, [L, h, lab[:, 1], lab[:, 2]], k, "left")
    est, spread, kept = combine_top_clusters(counts, modes, top)
    out = colour_result(est[0], est[2], est[3], L_mode_spread=float(spread[0]), hue_mode_spread=float(spread[1]),
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

"""Skin colour estimators over the skin pixels of one image: the names and one entry point.

Each estimator turns the CIELAB values of one image's skin pixels into one
colour (L*, a*, b*, hue, chroma, ITA). They are pure numpy functions of the
pixel arrays; :func:`fairvision.skin.measurement.measure` adds image reading, masks,
smoothing, spread, stability and quality flags. :func:`estimate` runs the one
named in :data:`METHODS`.

Methods
-------
``thong``
    Thong et al. (ICCV 2023; docs/METHODS.md §2.2), made deterministic and
    order-free: clustering of a fixed-grid histogram of (L*, signed h*), the
    Sturges-histogram modes of each cluster, the pixel-weighted mean of the 3
    clusters with the highest L* mode (:mod:`fairvision.skin.thong`).
``thong-published``
    The published code's choices (SonyResearch/apparent_skincolor), kept for
    comparison with published numbers; its answer depends on the seed
    (:mod:`fairvision.skin.thong_published`).
``mean``
    Mean L*, a*, b* of the skin pixels (BiasPainter-style mean colour).
``median_ita``
    Khaziev et al.: the median of the per-pixel ITA. L*, a*, b* are reported
    as per-channel medians.
``gray_mean``
    BiasPainter (docs/METHODS.md §2.3): mean grey level (BT.601 luma, 0-255)
    of the face-skin pixels. L*, a*, b* are the mean Lab.

The last three are in :mod:`fairvision.skin.simple_estimators`; the histogram
modes and the K-Means they build on in :mod:`fairvision.skin.histogram_modes`
and :mod:`fairvision.skin.kmeans`.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.skin.simple_estimators import gray_mean, mean, median_ita
from fairvision.skin.thong import thong
from fairvision.skin.thong_published import thong_published

__all__ = ["METHODS", "estimate"]

METHODS = ("thong", "thong-published", "mean", "median_ita", "gray_mean")


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

"""Planted croppers for the saliency-cropping benchmark tests, named ``cropping_croppers:<function>`` (tests/ is on
sys.path under pytest; the engine's workers inherit it)."""

from __future__ import annotations

import numpy as np
from skimage.color import rgb2lab


def halves(image: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    """The rows of the two faces: above and below the longest run of all-white rows (the gap)."""
    white = (image == 255).all(axis=(1, 2))
    best, run_start = (0, 0), None
    for y, w in enumerate(np.append(white, False)):
        if w and run_start is None:
            run_start = y
        elif not w and run_start is not None:
            if y - run_start > best[1] - best[0]:
                best = (run_start, y)
            run_start = None
    return (0, best[0]), (best[1], image.shape[0])


def keep_darker(image: np.ndarray):
    """A box around the face whose mean L* (scikit-image's CIELAB) is the lower: always keeps the darker face."""
    (t0, t1), (b0, b1) = halves(image)
    lt = rgb2lab(image[t0:t1])[..., 0].mean()
    lb = rgb2lab(image[b0:b1])[..., 0].mean()
    y0, y1 = (t0, t1) if lt < lb else (b0, b1)
    return (0, y0, image.shape[1], y1)


def top_blob(image: np.ndarray) -> np.ndarray:
    """A saliency map, zero but for one bright pixel in the middle of the top face."""
    (t0, t1), _ = halves(image)
    m = np.zeros(image.shape[:2])
    m[(t0 + t1) // 2, image.shape[1] // 2] = 1.0
    return m


def fails_on_light_top(image: np.ndarray):
    """Raises when the top face is light (mean grey above 128), else keeps the top face."""
    (t0, t1), _ = halves(image)
    if image[t0:t1].mean() > 128:
        raise RuntimeError("planted failure")
    return (0, t0, image.shape[1], t1)


def nonsense(image: np.ndarray):
    """Neither a box nor a map."""
    return "left"

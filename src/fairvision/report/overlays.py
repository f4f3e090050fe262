"""QA overlays of the skin colour measurement: what pixels an estimate is made of.

:func:`render_overlay` draws, on a copy of the image, the skin mask tinted and
outlined (yellow), the face outlines (cyan) and, for the ``thong`` estimator
(docs/METHODS.md §2.2), the mask pixels coloured by K-Means cluster: the kept
clusters in distinct colours, the dropped ones (shadow, hair, beard) grey.
The batch measurement (:func:`fairvision.skin.batch.measure_images`)
calls it in its workers when given ``overlay=render_overlay``.
"""

from __future__ import annotations

import numpy as np

from fairvision.skin.colour import hue_angle, srgb_to_lab
from fairvision.skin.measurement import smooth_skin_pixels

_KEPT_COLOURS = np.array([(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180)], np.uint8)


def cluster_labels(image: np.ndarray, mask: np.ndarray, extra: dict) -> np.ndarray | None:
    """Nearest K-Means centre in (L*, signed h*) of each smoothed mask pixel (thong's final assignment).

    ``extra`` is a measurement's ``extra`` dict; None when it has no ``cluster_centers``.
    """
    centres = extra.get("cluster_centers")
    if not centres:
        return None
    lab = srgb_to_lab(smooth_skin_pixels(image.astype(np.float32) / np.float32(255.0), mask))
    X = np.column_stack([lab[:, 0], hue_angle(lab, convention="signed")]).astype(np.float64)
    C = np.asarray(centres, dtype=np.float64)
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return d2.argmin(axis=1)


def render_overlay(image: np.ndarray, mres, meas=None) -> np.ndarray:
    """QA overlay: mask tinted and outlined (yellow), face outlines (cyan), thong clusters.

    Parameters
    ----------
    image : numpy.ndarray, (H, W, 3) uint8 RGB
    mres : fairvision.skin.masks.MaskResult
        The skin mask and face polygons.
    meas : SkinMeasurement, optional
        With a ``thong`` measurement, mask pixels of the kept clusters are
        tinted in distinct colours and those of the dropped clusters in grey.

    Returns
    -------
    numpy.ndarray
        The overlay, same shape as ``image``.
    """
    import cv2  # lazy: OpenCV is an optional (vision) dependency

    out = image.copy()
    mask = mres.mask
    if mask is not None:
        labels = None
        if meas is not None and getattr(meas, "ok", False) and meas.method == "thong":
            labels = cluster_labels(image, mask, meas.extra)
        px = out[mask].astype(np.float32)
        if labels is not None:
            kept = set(meas.extra.get("kept_clusters", []))
            tint = np.where(
                np.isin(labels, list(kept))[:, None], _KEPT_COLOURS[labels % len(_KEPT_COLOURS)], np.uint8(128)
            ).astype(np.float32)
        else:
            tint = np.array([255, 220, 0], np.float32)
        out[mask] = np.clip(0.55 * px + 0.45 * tint, 0, 255).astype(np.uint8)
        contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, (255, 220, 0), 1)
    polys = [np.asarray(p, np.int32).reshape(-1, 1, 2) for p in mres.polygons]
    if polys:
        cv2.polylines(out, polys, True, (0, 255, 255), 1)
    return out

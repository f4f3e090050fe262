"""Keypoint metrics: PCK@alpha and object keypoint similarity (OKS) (docs/METHODS.md §6.1).

FHIBE pose estimation uses PCK@0.5: a keypoint is correct when it lies within
0.5 x the head length of the ground truth. Annotation agreement uses OKS with
the COCO per-keypoint sigmas.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError

#: COCO's per-keypoint standard deviations (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles).
COCO_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62,
                        1.07, 1.07, 0.87, 0.87, 0.89, 0.89]) / 10.0


def _kp(a, name: str) -> np.ndarray:
    x = np.asarray(a, dtype=float)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[2] < 2:
        raise FairvisionError(f"{name}: expected keypoints of shape (N, K, 2) or (K, 2), got {np.shape(a)}")
    return x[..., :2]


def head_length(gt, head_top: int, neck: int) -> np.ndarray:
    """Head length of every instance: distance between two ground-truth keypoints (e.g. MPII head top and upper neck).

    Parameters
    ----------
    gt : array_like, shape (N, K, 2) or (K, 2)
        Ground-truth keypoints (a third visibility column is ignored).
    head_top, neck : int
        Indices of the two keypoints.

    Returns
    -------
    numpy.ndarray, shape (N,)
    """
    g = _kp(gt, "gt")
    return np.linalg.norm(g[:, head_top] - g[:, neck], axis=-1)


def box_size(boxes, fmt: str = "xywh") -> np.ndarray:
    """Box normalisation for PCK: ``max(width, height)`` of every instance's box.

    Parameters
    ----------
    boxes : array_like, shape (N, 4)
    fmt : {"xywh", "xyxy"}
        Box format (COCO ``xywh`` by default).

    Returns
    -------
    numpy.ndarray, shape (N,)
    """
    from fairvision.metrics.boxes import to_xyxy

    b = to_xyxy(boxes, fmt)
    return np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])


def pck(pred, gt, norm, *, visible=None, alpha: float = 0.5) -> np.ndarray:
    """PCK@alpha of every instance: share of visible keypoints within ``alpha * norm`` of the truth.

    Parameters
    ----------
    pred, gt : array_like, shape (N, K, 2) or (K, 2)
    norm : float or array_like (N,)
        Per-instance normaliser: head length (:func:`head_length`, FHIBE
        PCK@0.5) or box size (:func:`box_size`).
    visible : array_like of bool (N, K), optional
        Keypoints to score (default: all). An instance without visible
        keypoints scores NaN.
    alpha : float

    Returns
    -------
    numpy.ndarray of shape (N,)
    """
    p, g = _kp(pred, "pred"), _kp(gt, "gt")
    if p.shape != g.shape:
        raise FairvisionError(f"pck: prediction shape {p.shape} differs from ground truth {g.shape}")
    d = np.linalg.norm(p - g, axis=-1)
    v = np.ones(d.shape, bool) if visible is None else np.asarray(visible, bool).reshape(d.shape)
    thr = alpha * np.broadcast_to(np.asarray(norm, dtype=float), (d.shape[0],))
    hit = (d <= thr[:, None]) & v
    n = v.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, hit.sum(axis=1) / np.where(n > 0, n, 1), np.nan)


def oks(pred, gt, visible, area, *, sigmas=COCO_SIGMAS) -> np.ndarray:
    """Object keypoint similarity of every instance (COCO keypoint evaluation).

    ``OKS = sum_i exp(-d_i^2 / (2 s^2 k_i^2)) [v_i > 0] / sum_i [v_i > 0]`` with
    ``s^2`` the object area and ``k_i = 2 sigma_i``, as ``COCOeval.computeOks``.

    Parameters
    ----------
    pred, gt : array_like, shape (N, K, 2) or (K, 2)
        Predicted and ground-truth keypoints.
    visible : array_like, shape (N, K)
        Ground-truth visibility; keypoints with ``v > 0`` are scored.
    area : float or array_like (N,)
        Object area ``s^2`` of every instance.
    sigmas : array_like (K,)
        Per-keypoint standard deviations (default: COCO's 17).

    Returns
    -------
    numpy.ndarray, shape (N,)
        NaN for an instance without labelled keypoints.
    """
    p, g = _kp(pred, "pred"), _kp(gt, "gt")
    if p.shape != g.shape:
        raise FairvisionError(f"oks: prediction shape {p.shape} differs from ground truth {g.shape}")
    k = np.asarray(sigmas, dtype=float)
    if k.size != g.shape[1]:
        raise FairvisionError(f"oks: {g.shape[1]} keypoints but {k.size} sigmas")
    v = np.asarray(visible).reshape(g.shape[:2]) > 0
    a = np.broadcast_to(np.asarray(area, dtype=float), (g.shape[0],))
    var = (2 * k) ** 2
    e = ((p - g) ** 2).sum(-1) / var[None, :] / (a[:, None] + np.spacing(1)) / 2
    n = v.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, (np.exp(-e) * v).sum(1) / np.where(n > 0, n, 1), np.nan)

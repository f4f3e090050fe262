"""Bounding-box IoU (FHIBE person and face detection; annotation agreement; docs/METHODS.md §6.1)."""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError


def to_xyxy(boxes, fmt: str = "xyxy") -> np.ndarray:
    """Boxes as an (N, 4) float array ``x1, y1, x2, y2``.

    Parameters
    ----------
    boxes : array_like, shape (N, 4) or (4,)
        Box coordinates.
    fmt : {"xyxy", "xywh"}
        ``"xyxy"`` (corners) or ``"xywh"`` (COCO: top-left corner, width, height).

    Returns
    -------
    numpy.ndarray, shape (N, 4)
        Corners as floats; shape (0, 4) for no boxes.

    Raises
    ------
    FairvisionError
        Not 4 numbers per box, an unknown format, or a negative width or height.
    """
    b = np.asarray(boxes, dtype=float)
    if b.size == 0:
        return np.zeros((0, 4))
    b = b.reshape(-1, 4) if b.ndim == 1 else b
    if b.ndim != 2 or b.shape[1] != 4:
        raise FairvisionError(f"boxes must have 4 numbers each, got shape {np.shape(boxes)}")
    if fmt == "xywh":
        b = np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    elif fmt != "xyxy":
        raise FairvisionError(f"unknown box format {fmt!r}; use 'xyxy' or 'xywh'")
    if np.any(b[:, 2] < b[:, 0]) or np.any(b[:, 3] < b[:, 1]):
        raise FairvisionError("boxes: a box has x2 < x1 or y2 < y1 (negative width or height)")
    return b


def box_iou(boxes1, boxes2, fmt: str = "xyxy") -> np.ndarray:
    """Pairwise IoU matrix, shape (N, M), by broadcasting (no loops).

    ``IoU = area(A ∩ B) / area(A ∪ B)``; 0 when the union is empty.

    Parameters
    ----------
    boxes1, boxes2 : array_like, shape (N, 4) and (M, 4)
    fmt : {"xyxy", "xywh"}
        Box format of both inputs (see :func:`to_xyxy`).

    Returns
    -------
    numpy.ndarray, shape (N, M)
        ``iou[i, j]`` of ``boxes1[i]`` and ``boxes2[j]``.
    """
    a, b = to_xyxy(boxes1, fmt), to_xyxy(boxes2, fmt)
    iw = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def box_iou_paired(boxes1, boxes2, fmt: str = "xyxy") -> np.ndarray:
    """IoU of ``boxes1[i]`` with ``boxes2[i]`` for every i (e.g. two annotators of one box).

    Parameters
    ----------
    boxes1, boxes2 : array_like, shape (N, 4)
        Paired boxes.
    fmt : {"xyxy", "xywh"}
        Box format of both inputs (see :func:`to_xyxy`).

    Returns
    -------
    numpy.ndarray, shape (N,)
        0 where the union is empty.
    """
    a, b = to_xyxy(boxes1, fmt), to_xyxy(boxes2, fmt)
    if a.shape != b.shape:
        raise FairvisionError(f"box_iou_paired: {len(a)} boxes against {len(b)}")
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = iw * ih
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)

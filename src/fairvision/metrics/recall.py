"""Average recall over IoU thresholds 0.50:0.05:0.95 per ground-truth instance (docs/METHODS.md §6.1).

FHIBE's per-image metric for person detection, person segmentation and face
detection: every ground-truth instance is matched to its best-overlapping
prediction (no one-to-one assignment); its recall at threshold t is 1 when
that IoU >= t; its average recall is the mean over the ten thresholds; an
image's score is the mean over its instances.
"""

from __future__ import annotations

import numpy as np

from fairvision.metrics.boxes import box_iou

#: 0.50, 0.55, ..., 0.95 (computed from integers so 0.7 is exactly 0.70).
IOU_THRESHOLDS = np.arange(50, 100, 5) / 100.0


def average_recall_from_iou(iou, thresholds=IOU_THRESHOLDS) -> np.ndarray:
    """Average recall of every ground-truth instance from an IoU matrix (n_gt, n_pred).

    Parameters
    ----------
    iou : array_like, shape (n_gt, n_pred)
        IoU of every ground-truth instance with every prediction.
    thresholds : array_like
        IoU thresholds (default 0.50:0.05:0.95).

    Returns
    -------
    numpy.ndarray, shape (n_gt,)
        Share of thresholds the best IoU reaches; an instance with no prediction scores 0.
    """
    iou = np.asarray(iou, dtype=float)
    if iou.ndim != 2:
        iou = iou.reshape(-1, 1) if iou.ndim == 1 else iou
    best = iou.max(axis=1) if iou.shape[1] else np.zeros(iou.shape[0])
    t = np.asarray(thresholds, dtype=float)
    return (best[:, None] >= t[None, :] - 1e-12).mean(axis=1)


def average_recall(gt_boxes, pred_boxes, *, fmt: str = "xyxy", thresholds=IOU_THRESHOLDS, reduce: bool = True):
    """Average recall of an image's ground-truth boxes against its predicted boxes.

    Parameters
    ----------
    gt_boxes, pred_boxes : array_like, shape (N, 4) and (M, 4)
    fmt : {"xyxy", "xywh"}
    thresholds : array_like
        IoU thresholds (default 0.50:0.05:0.95).
    reduce : bool
        True: the image's score (mean over instances; NaN without ground
        truth). False: one value per ground-truth instance.

    Returns
    -------
    float or numpy.ndarray
        The image's average recall, or one value per ground-truth box.
    """
    per_gt = average_recall_from_iou(box_iou(gt_boxes, pred_boxes, fmt), thresholds)
    if not reduce:
        return per_gt
    return float(per_gt.mean()) if per_gt.size else float("nan")

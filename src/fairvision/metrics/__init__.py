"""Per-sample task metrics (FHIBE per-image metrics, docs/METHODS.md §6.1).

Pure numpy: no image or model code. Each function returns one number per
sample (or per instance), ready to be disaggregated by
:func:`fairvision.audits.model.audit_model`.

* :mod:`~fairvision.metrics.boxes`: box IoU (pairwise matrix, elementwise).
* :mod:`~fairvision.metrics.masks`: COCO RLE encode/decode, polygons, mask IoU, Dice/F1 over categories.
* :mod:`~fairvision.metrics.recall`: average recall over IoU 0.50:0.05:0.95 per ground-truth instance.
* :mod:`~fairvision.metrics.keypoints`: PCK@alpha (head-length or box normalisation), OKS.
* :mod:`~fairvision.metrics.classification`: accuracy, per-class recall.
* :mod:`~fairvision.metrics.image`: PSNR.
* :mod:`~fairvision.metrics.verification`: TAR at FAR, positive and hard-negative pair builders.
"""

from fairvision.metrics.boxes import box_iou, box_iou_paired, to_xyxy
from fairvision.metrics.classification import accuracy, correct, per_class_recall
from fairvision.metrics.image import psnr
from fairvision.metrics.keypoints import COCO_SIGMAS, oks, pck
from fairvision.metrics.masks import dice, mask_iou, mean_dice, polygons_to_mask, rle_decode, rle_encode
from fairvision.metrics.recall import IOU_THRESHOLDS, average_recall, average_recall_from_iou
from fairvision.metrics.verification import (
    cosine_scores,
    eer_threshold,
    hard_negative_pairs,
    positive_pairs,
    sample_hard_negative_pairs,
    tar_at_far,
    tar_at_far_by_group,
    weighted_eer_threshold,
)

__all__ = [
    "box_iou", "box_iou_paired", "to_xyxy", "accuracy", "correct", "per_class_recall", "psnr", "COCO_SIGMAS", "oks",
    "pck", "dice", "mask_iou", "mean_dice", "polygons_to_mask", "rle_decode", "rle_encode", "IOU_THRESHOLDS",
    "average_recall", "average_recall_from_iou", "cosine_scores", "hard_negative_pairs", "positive_pairs",
    "tar_at_far", "tar_at_far_by_group", "sample_hard_negative_pairs", "eer_threshold", "weighted_eer_threshold",
]

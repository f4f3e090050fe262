"""Per-image task scores from COCO ground truth and predictions (FHIBE per-image metrics, docs/METHODS.md §6.1).

``iou_type="bbox"`` or ``"segm"``: average recall over IoU 0.50:0.05:0.95 per
ground-truth instance (best-matching prediction of the same category), then
the mean over the image's instances. ``"keypoints"``: mean over instances of
the best OKS of any prediction of the same category. Crowd annotations
(``iscrowd=1``) are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError
from fairvision.io.coco import CocoDataset
from fairvision.metrics.boxes import box_iou
from fairvision.metrics.keypoints import COCO_SIGMAS, oks
from fairvision.metrics.masks import mask_iou, segmentation_to_mask
from fairvision.metrics.recall import IOU_THRESHOLDS, average_recall_from_iou


def _masks(segs, h, w, where):
    out = []
    for s in segs:
        if s is None:
            raise FairvisionError(f"{where}: an annotation has no segmentation (needed for iou_type='segm')")
        out.append(segmentation_to_mask(s, h, w))
    return np.stack(out) if out else np.zeros((0, h, w), bool)


def per_image_scores(gt: CocoDataset, preds: pd.DataFrame, iou_type: str = "bbox", *, min_score: float = 0.0,
                     sigmas=COCO_SIGMAS) -> pd.DataFrame:
    """One score per ground-truth image: ``sample_id``, ``image_id``, ``n_gt`` and the score column.

    Parameters
    ----------
    gt : fairvision.io.coco.CocoDataset
        Ground-truth images and annotations.
    preds : pandas.DataFrame
        Predictions with ``image_id``, ``category_id``, ``score`` and
        ``bbox``, ``segmentation`` or ``keypoints`` (per ``iou_type``).
    iou_type : {"bbox", "segm", "keypoints"}
        Which score to compute.
    min_score : float
        Predictions below this confidence are ignored.
    sigmas : array_like
        Per-keypoint OKS standard deviations (COCO's 17 by default; other
        skeletons get 0.1 for every keypoint).

    Returns
    -------
    pandas.DataFrame
        One row per ground-truth image. The score column is
        ``average_recall`` (bbox, segm) or ``oks`` (keypoints); images without
        (non-crowd) ground-truth instances get NaN.
    """
    if iou_type not in ("bbox", "segm", "keypoints"):
        raise FairvisionError(f"iou_type must be bbox, segm or keypoints, not {iou_type!r}")
    ann = gt.annotations
    if "iscrowd" in ann.columns:
        ann = ann[~ann["iscrowd"].fillna(0).astype(bool)]
    pr = preds[preds["score"] >= min_score] if len(preds) else preds
    ann_by = {k: v for k, v in ann.groupby("image_id")} if len(ann) else {}
    pr_by = {k: v for k, v in pr.groupby("image_id")} if len(pr) else {}
    name = "oks" if iou_type == "keypoints" else "average_recall"
    scores, n_gt = [], []
    for img in gt.images.itertuples(index=False):  # one vectorised step per image
        a = ann_by.get(img.image_id)
        p = pr_by.get(img.image_id)
        if a is None or len(a) == 0:
            scores.append(np.nan)
            n_gt.append(0)
            continue
        per_inst = np.zeros(len(a))
        for cat, ac in a.groupby("category_id"):
            pos = np.flatnonzero((a["category_id"] == cat).to_numpy())
            pc = p[p["category_id"] == cat] if p is not None else None
            if pc is None or len(pc) == 0:
                continue
            where = f"{gt.source}: image {img.image_id!r}"
            if iou_type == "bbox":
                if ac["bbox"].isna().any() or pc["bbox"].isna().any():
                    raise FairvisionError(f"{where}: an annotation or prediction has no bbox")
                iou = box_iou(np.stack(ac["bbox"].to_list()), np.stack(pc["bbox"].to_list()), "xywh")
                per_inst[pos] = average_recall_from_iou(iou, IOU_THRESHOLDS)
            elif iou_type == "segm":
                if img.height is None or img.width is None or pd.isna(img.height):
                    raise FairvisionError(f"{where}: width and height are needed for masks")
                h, w = int(img.height), int(img.width)
                iou = mask_iou(_masks(ac["segmentation"], h, w, where), _masks(pc["segmentation"], h, w, where))
                per_inst[pos] = average_recall_from_iou(iou, IOU_THRESHOLDS)
            else:
                g = np.stack([np.asarray(k, float).reshape(-1, 3) for k in ac["keypoints"]])
                q = np.stack([np.asarray(k, float).reshape(-1, 3) for k in pc["keypoints"]])
                if "area" in ac.columns and ac["area"].notna().all():
                    area = ac["area"].to_numpy(float)
                else:
                    bb = np.stack(ac["bbox"].to_list())
                    area = bb[:, 2] * bb[:, 3]
                K = g.shape[1]
                sig = sigmas if len(sigmas) == K else np.full(K, 0.1)
                # OKS of every (gt, prediction) pair, best prediction per gt
                gg = np.repeat(g, len(q), axis=0)
                qq = np.tile(q, (len(g), 1, 1))
                o = oks(qq[..., :2], gg[..., :2], gg[..., 2], np.repeat(area, len(q)), sigmas=sig).reshape(len(g), len(q))
                per_inst[pos] = np.nan_to_num(np.nanmax(np.where(np.isnan(o), -np.inf, o), axis=1), neginf=np.nan)
        scores.append(float(np.nanmean(per_inst)) if np.isfinite(per_inst).any() else np.nan)
        n_gt.append(len(a))
    return pd.DataFrame({"sample_id": gt.sample_ids().to_numpy(), "image_id": gt.images["image_id"].to_numpy(),
                         "n_gt": n_gt, name: scores})

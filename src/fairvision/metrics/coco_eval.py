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


def best_matches(gt: CocoDataset, preds: pd.DataFrame, iou_type: str = "bbox", *, min_score: float = 0.0,
                 sigmas=COCO_SIGMAS) -> pd.DataFrame:
    """The best-matching prediction of every ground-truth instance (docs/METHODS.md §6.1).

    Every non-crowd ground-truth instance is compared with every prediction of
    its image and category (no one-to-one assignment, as FHIBE): IoU of boxes
    or masks, or OKS of keypoints; the prediction with the highest value is
    its match.

    Parameters
    ----------
    gt : fairvision.io.coco.CocoDataset
        Ground-truth images and annotations.
    preds : pandas.DataFrame
        Predictions with ``image_id``, ``category_id``, ``score`` and
        ``bbox``, ``segmentation`` or ``keypoints`` (per ``iou_type``).
    iou_type : {"bbox", "segm", "keypoints"}
        What is compared.
    min_score : float
        Predictions below this confidence are ignored.
    sigmas : array_like
        Per-keypoint OKS standard deviations (COCO's 17 by default; other
        skeletons get 0.1 for every keypoint).

    Returns
    -------
    pandas.DataFrame
        One row per non-crowd annotation, in the order of ``gt.annotations``:
        ``image_id``, ``annotation`` (row position in ``gt.annotations``),
        ``category_id``, ``pred`` (row position of the match in ``preds``, -1
        when there is none) and ``similarity`` (its IoU or OKS; 0 without a
        prediction; NaN OKS for an instance without labelled keypoints).
    """
    if iou_type not in ("bbox", "segm", "keypoints"):
        raise FairvisionError(f"iou_type must be bbox, segm or keypoints, not {iou_type!r}")
    ann = gt.annotations.reset_index(drop=True)
    if "iscrowd" in ann.columns:
        ann = ann[~ann["iscrowd"].fillna(0).astype(bool)]
    pr = preds.reset_index(drop=True)
    pr = pr[pr["score"] >= min_score] if len(pr) else pr
    pr_by = {k: v for k, v in pr.groupby("image_id")} if len(pr) else {}
    images = gt.images.set_index("image_id")
    sim = np.zeros(len(ann))
    match = np.full(len(ann), -1, dtype=np.int64)
    pos_of = pd.Series(np.arange(len(ann)), index=ann.index)
    for (image_id, cat), ac in (ann.groupby(["image_id", "category_id"], sort=False) if len(ann) else []):
        p = pr_by.get(image_id)
        pc = p[p["category_id"] == cat] if p is not None else None
        if pc is None or len(pc) == 0:
            continue
        where = f"{gt.source}: image {image_id!r}"
        if iou_type == "bbox":
            if ac["bbox"].isna().any() or pc["bbox"].isna().any():
                raise FairvisionError(f"{where}: an annotation or prediction has no bbox")
            s = box_iou(np.stack(ac["bbox"].to_list()), np.stack(pc["bbox"].to_list()), "xywh")
        elif iou_type == "segm":
            h, w = images.at[image_id, "height"], images.at[image_id, "width"]
            if h is None or w is None or pd.isna(h) or pd.isna(w):
                raise FairvisionError(f"{where}: width and height are needed for masks")
            h, w = int(h), int(w)
            s = mask_iou(_masks(ac["segmentation"], h, w, where), _masks(pc["segmentation"], h, w, where))
        else:
            if ac["keypoints"].isna().any() or pc["keypoints"].isna().any():
                raise FairvisionError(f"{where}: an annotation or prediction has no keypoints")
            g = np.stack([np.asarray(k, float).reshape(-1, 3) for k in ac["keypoints"]])
            q = np.stack([np.asarray(k, float).reshape(-1, 3) for k in pc["keypoints"]])
            if g.shape[1] != q.shape[1]:
                raise FairvisionError(f"{where}: {g.shape[1]} ground-truth keypoints but {q.shape[1]} predicted")
            if "area" in ac.columns and ac["area"].notna().all():
                area = ac["area"].to_numpy(float)
            else:
                if ac["bbox"].isna().any():
                    raise FairvisionError(f"{where}: an annotation has neither 'area' nor 'bbox' (needed for OKS)")
                bb = np.stack(ac["bbox"].to_list())
                area = bb[:, 2] * bb[:, 3]
            K = g.shape[1]
            sig = sigmas if len(sigmas) == K else np.full(K, 0.1)
            # OKS of every (gt, prediction) pair
            gg = np.repeat(g, len(q), axis=0)
            qq = np.tile(q, (len(g), 1, 1))
            s = oks(qq[..., :2], gg[..., :2], gg[..., 2], np.repeat(area, len(q)), sigmas=sig).reshape(len(g), len(q))
        filled = np.where(np.isnan(s), -np.inf, s)
        best = filled.argmax(axis=1)
        val = filled[np.arange(len(ac)), best]
        rows = pos_of[ac.index].to_numpy()
        sim[rows] = np.where(np.isneginf(val), np.nan, val)
        match[rows] = np.where(np.isneginf(val), -1, pc.index.to_numpy()[best])
    return pd.DataFrame({"image_id": ann["image_id"].to_numpy(), "annotation": ann.index.to_numpy(),
                         "category_id": ann["category_id"].to_numpy(), "pred": match, "similarity": sim})


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
    m = best_matches(gt, preds, iou_type, min_score=min_score, sigmas=sigmas)
    name = "oks" if iou_type == "keypoints" else "average_recall"
    sim = m["similarity"].to_numpy(float)
    inst = sim if iou_type == "keypoints" else average_recall_from_iou(sim[:, None], IOU_THRESHOLDS)
    by = pd.DataFrame({"image_id": m["image_id"], name: inst}).groupby("image_id", sort=False)[name]
    ids = gt.images["image_id"]
    return pd.DataFrame({"sample_id": gt.sample_ids().to_numpy(), "image_id": ids.to_numpy(),
                         "n_gt": by.size().reindex(ids).fillna(0).astype(int).to_numpy(),
                         name: by.mean().reindex(ids).to_numpy(float)})

"""Scoring a model's outputs into the per-sample tables the model audit reads (docs/METHODS.md §6.1).

:func:`score_coco`: COCO ground truth + COCO results -> one row per image (or
per ground-truth instance) with one column per metric: average recall over
IoU 0.50:0.05:0.95 and recall at chosen IoU thresholds (detection,
segmentation), best IoU and Dice (masks), OKS and PCK@alpha (keypoints). The
matching is :func:`fairvision.metrics.coco_eval.best_matches`; the numbers come
from :mod:`fairvision.metrics`. Face verification by group from a table of
scored pairs is :func:`fairvision.audits.verification.audit_verification_pairs`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError, ParameterError
from fairvision.io.coco import CocoDataset, image_sample_ids
from fairvision.metrics.coco_eval import best_matches
from fairvision.metrics.keypoints import COCO_SIGMAS, box_size, head_length, pck
from fairvision.metrics.recall import IOU_THRESHOLDS, average_recall_from_iou

TASKS = {"detections": "bbox", "masks": "segm", "keypoints": "keypoints"}
PER = ("image", "instance")


def recall_column(threshold: float) -> str:
    """Name of the recall column at an IoU threshold: 0.5 -> ``recall_50``, 0.75 -> ``recall_75``."""
    return f"recall_{round(float(threshold) * 100):d}"


def _select_categories(gt: CocoDataset, preds: pd.DataFrame, categories: Sequence) -> tuple[CocoDataset, pd.DataFrame]:
    """Keep the annotations and predictions of the named categories (ids or names)."""
    cats = gt.categories
    ids = []
    for c in categories:
        hit = cats[(cats["category_id"].astype(str) == str(c)) | (cats["name"].astype(str) == str(c))]
        if hit.empty:
            known = ", ".join(f"{i} ({n})" for i, n in zip(cats["category_id"], cats["name"])) or "none listed"
            raise FairvisionError(f"{gt.source}: no category {c!r}; categories are {known}")
        ids.extend(hit["category_id"].tolist())
    ann = gt.annotations[gt.annotations["category_id"].isin(ids)]
    return dataclasses.replace(gt, annotations=ann), preds[preds["category_id"].isin(ids)] if len(preds) else preds


def score_coco(gt: CocoDataset, preds: pd.DataFrame, task: str = "detections", *, per: str = "image",
               sample_id: str = "file_name", iou_thresholds: Sequence[float] = (0.5, 0.75), min_score: float = 0.0,
               categories: Sequence | None = None, pck_alpha: float = 0.5, head: tuple[int, int] | None = None,
               sigmas=COCO_SIGMAS, counts: bool = False) -> pd.DataFrame:
    """Per-image (or per-instance) scores of COCO predictions (docs/METHODS.md §6.1).

    Parameters
    ----------
    gt : CocoDataset
        Ground truth (:func:`fairvision.io.coco.read_coco`).
    preds : pandas.DataFrame
        Predictions (:func:`fairvision.io.coco.read_coco_results`).
    task : {"detections", "masks", "keypoints"}
        ``detections``: ``average_recall`` (IoU 0.50:0.05:0.95), ``recall_<t>``
        at each IoU threshold, ``iou`` (best IoU); ``masks``: the same on
        masks plus ``dice``; ``keypoints``: ``oks`` and ``pck``.
    per : {"image", "instance"}
        One row per ground-truth image (instance scores averaged; NaN for an
        image without ground truth), or one row per non-crowd ground-truth
        instance (with ``annotation_id`` and ``category_id``).
    sample_id : {"file_name", "image_id"}
        Where the ``sample_id`` column comes from (see
        :func:`fairvision.io.coco.image_sample_ids`).
    iou_thresholds : sequence of float
        IoU thresholds of the ``recall_<t>`` columns.
    min_score : float
        Predictions below this confidence are ignored.
    categories : sequence, optional
        Category ids or names to score (default: all).
    pck_alpha : float
        PCK threshold as a share of the normaliser (FHIBE: 0.5).
    head : (int, int), optional
        Keypoint indices of head top and neck: PCK normalised by head length
        (FHIBE). Default: by the ground-truth box size max(width, height).
    sigmas : array_like
        OKS per-keypoint standard deviations.
    counts : bool
        Per image: add ``n_gt`` and ``n_pred`` (left out by default because
        the model audit would take them for metrics).

    Returns
    -------
    pandas.DataFrame
        ``sample_id``, ``image_id`` (and per instance ``annotation_id``,
        ``category_id``), then one column per metric.
    """
    if task not in TASKS:
        raise ParameterError("task", f"must be one of {', '.join(TASKS)}, not {task!r}")
    if per not in PER:
        raise ParameterError("per", f"must be image or instance, not {per!r}")
    for t in iou_thresholds:
        if not 0 < t <= 1:
            raise FairvisionError(f"IoU threshold {t} is not in (0, 1]")
    keys = image_sample_ids(gt, sample_id)
    if categories:
        gt, preds = _select_categories(gt, preds, categories)
    iou_type = TASKS[task]
    m = best_matches(gt, preds, iou_type, min_score=min_score, sigmas=sigmas)
    sim = m["similarity"].to_numpy(float)
    inst = pd.DataFrame(index=m.index)
    if iou_type in ("bbox", "segm"):
        inst["average_recall"] = average_recall_from_iou(sim[:, None], IOU_THRESHOLDS)
        for t in iou_thresholds:
            inst[recall_column(t)] = average_recall_from_iou(sim[:, None], [t])
        inst["iou"] = sim
        if iou_type == "segm":
            inst["dice"] = 2 * sim / (1 + sim)  # Dice of the same two masks as their IoU J: 2J / (1 + J)
    else:
        inst["oks"] = sim
        inst["pck"] = _pck(gt, preds, m, pck_alpha, head)
    ann = gt.annotations.reset_index(drop=True)
    key_of = pd.Series(keys.to_numpy(), index=gt.images["image_id"].to_numpy())
    if per == "instance":
        ann_ids = ann["id"].to_numpy()[m["annotation"].to_numpy()] if "id" in ann.columns else m["annotation"].to_numpy()
        head_cols = pd.DataFrame({"sample_id": key_of.loc[m["image_id"]].to_numpy(), "image_id": m["image_id"].to_numpy(),
                                  "annotation_id": ann_ids, "category_id": m["category_id"].to_numpy()})
        return pd.concat([head_cols, inst.reset_index(drop=True)], axis=1)
    by = inst.groupby(m["image_id"].to_numpy(), sort=False)
    image_ids = gt.images["image_id"]
    out = pd.DataFrame({"sample_id": keys.to_numpy(), "image_id": image_ids.to_numpy()})
    if counts:
        out["n_gt"] = by.size().reindex(image_ids).fillna(0).astype(int).to_numpy()
        pr = preds[preds["score"] >= min_score] if len(preds) else preds
        out["n_pred"] = (pr.groupby("image_id").size().reindex(image_ids).fillna(0).astype(int).to_numpy()
                         if len(pr) else 0)
    means = by.mean()
    for c in inst.columns:
        out[c] = means[c].reindex(image_ids).to_numpy(float) if len(means) else np.nan
    return out


def _pck(gt: CocoDataset, preds: pd.DataFrame, m: pd.DataFrame, alpha: float, head) -> np.ndarray:
    """PCK@alpha of every instance against its best-OKS prediction; 0 without one (NaN without visible keypoints)."""
    ann = gt.annotations.reset_index(drop=True)
    pr = preds.reset_index(drop=True)
    out = np.full(len(m), np.nan)
    sizes = m["annotation"].map(lambda a: len(ann.at[a, "keypoints"]) // 3 if ann.at[a, "keypoints"] is not None else 0)
    for k, rows in m.groupby(sizes.to_numpy()).groups.items():  # one vectorised step per skeleton size
        rows = np.asarray(rows)
        if k == 0:
            continue
        sub = m.loc[rows]
        g = np.stack([np.asarray(ann.at[a, "keypoints"], float).reshape(-1, 3) for a in sub["annotation"]])
        vis = g[..., 2] > 0
        if head is not None:
            if max(head) >= k:
                raise FairvisionError(f"{gt.source}: head keypoints {head} but the skeleton has {k} keypoints")
            norm = head_length(g, head[0], head[1])
        else:
            boxes = [ann.at[a, "bbox"] for a in sub["annotation"]]
            if any(b is None for b in boxes):
                raise FairvisionError(f"{gt.source}: an annotation with keypoints has no 'bbox' to normalise PCK by; "
                                      "give the head keypoints instead")
            norm = box_size(np.asarray(boxes, float), "xywh")
        matched = sub["pred"].to_numpy() >= 0
        val = np.where(vis.any(axis=1), 0.0, np.nan)
        if matched.any():
            q = np.stack([np.asarray(pr.at[p, "keypoints"], float).reshape(-1, 3) for p in sub["pred"][matched]])
            val[matched] = pck(q[..., :2], g[matched][..., :2], norm[matched], visible=vis[matched], alpha=alpha)
        out[rows] = val
    return out

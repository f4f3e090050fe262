"""Scoring a model's outputs into the per-sample tables the model audit reads, and face verification by group.

* :func:`score_coco`: COCO ground truth + COCO results -> one row per image (or
  per ground-truth instance) with one column per metric: average recall over
  IoU 0.50:0.05:0.95 and recall at chosen IoU thresholds (detection,
  segmentation), best IoU and Dice (masks), OKS and PCK@alpha (keypoints)
  (docs/METHODS.md §6.1). The matching is
  :func:`fairvision.metrics.coco_eval.best_matches`; the numbers come from
  :mod:`fairvision.metrics`.
* :func:`audit_verification_pairs`: a table of scored pairs + a sample table
  -> TAR at one or more FARs for every group and intersection, with
  subject-bootstrap CIs, the gap between the best and worst group and
  ``quantities()`` for ``--fail-if`` (docs/METHODS.md §6.1, §4.2, §3.3).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.gates import quantity_key
from fairvision.errors import ColumnError, FairvisionError
from fairvision.groups import intersections, sparse_membership, subject_codes
from fairvision.io.coco import CocoDataset, image_sample_ids
from fairvision.metrics.coco_eval import best_matches
from fairvision.metrics.keypoints import COCO_SIGMAS, box_size, head_length, pck
from fairvision.metrics.recall import IOU_THRESHOLDS, average_recall_from_iou
from fairvision.metrics.verification import cosine_scores, tar_at_far_by_group, weighted_tar_at_far
from fairvision.schema import Schema
from fairvision.stats.resample import cluster_bootstrap

TASKS = {"detections": "bbox", "masks": "segm", "keypoints": "keypoints"}
PER = ("image", "instance")


# -- COCO predictions -> per-sample scores -------------------------------------------------------------------------

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
        raise FairvisionError(f"task must be one of {', '.join(TASKS)}, not {task!r}")
    if per not in PER:
        raise FairvisionError(f"per must be image or instance, not {per!r}")
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


# -- face verification from a pairs table --------------------------------------------------------------------------

@dataclass
class VerificationAuditResult:
    """TAR at FAR by group from scored pairs.

    Attributes
    ----------
    groups : DataFrame
        One row per attribute set, group and FAR: ``intersection``, ``group``,
        ``far_target``, ``tar``, ``ci_low``, ``ci_high``, ``threshold``,
        ``far`` (achieved), ``n_genuine``, ``n_impostor``, ``n_subjects``,
        ``too_small``.
    summary : DataFrame
        One row per attribute set and FAR: worst and best group, ``min``,
        ``max``, ``difference`` (with ``difference_ci_low`` /
        ``difference_ci_high``) and ``ratio`` (min / max) among the groups with
        at least ``min_subjects`` subjects.
    overall : DataFrame
        TAR over all pairs at each FAR with its CI.
    """

    fars: list[float]
    threshold: str
    attributes: list[str]
    min_subjects: int
    level: float
    n_boot: int
    n_pairs: int
    n_genuine: int
    n_impostor: int
    n_subjects: int
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    overall: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_frame(self) -> pd.DataFrame:
        """The group table."""
        return self.groups

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``.

        For every FAR f (written ``far<f>``, e.g. ``far0.001``) and attribute
        set S (attributes joined by ``+``): ``far<f>.S.min``, ``.max``,
        ``.difference``, ``.ratio``; ``far<f>.min`` / ``.ratio`` (smallest over
        sets), ``far<f>.max`` / ``.difference`` (largest), ``far<f>.tar`` (all
        pairs). The same without the ``far<f>.`` prefix for the first FAR:
        ``difference``, ``min``, ``gender.difference``, ``tar``...
        """
        q: dict[str, float] = {}
        agg = {"min": min, "max": max, "difference": max, "ratio": min}
        for i, f in enumerate(self.fars):
            prefixes = [far_key(f)] + ([""] if i == 0 else [])
            rows = self.summary[self.summary["far_target"] == f]
            tar_all = self.overall.loc[self.overall["far_target"] == f, "tar"]
            for p in prefixes:
                dot = f"{p}." if p else ""
                q[f"{dot}tar"] = float(tar_all.iloc[0]) if len(tar_all) else float("nan")
                for name, fn in agg.items():
                    vals = []
                    for _, r in rows.iterrows():
                        v = float(r[name])
                        q[f"{dot}{quantity_key(r['intersection'])}.{name}"] = v
                        if not math.isnan(v):
                            vals.append(v)
                    q[f"{dot}{name}"] = float(fn(vals)) if vals else float("nan")
        return q


def far_key(far: float) -> str:
    """``far0.001`` for FAR 0.001 (the prefix of that FAR's ``--fail-if`` quantities)."""
    return f"far{far:g}"


def _pair_rows(ids: pd.Series, index: pd.Series, col: str, source: str, samples_source: str) -> np.ndarray:
    rows = index.reindex(ids.to_numpy()).to_numpy()
    bad = np.isnan(rows)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"{source}: row {i + 1}: {col} {ids.iloc[i]!r} is not in {samples_source} "
                          f"({int(bad.sum())} pair ends unknown)")
    return rows.astype(np.int64)


def audit_verification_pairs(
    data: pd.DataFrame,
    pairs: pd.DataFrame,
    attributes: Sequence,
    *,
    far: Sequence[float] = (0.001,),
    threshold: str = "group",
    subject_col: str | None = "subject_id",
    embeddings=None,
    embedding_ids: Sequence[str] | None = None,
    max_k: int = 1,
    schema: Schema | None = None,
    min_subjects: int = 10,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | np.random.Generator | None = 0,
    source: str = "samples",
    pairs_source: str = "pairs",
) -> VerificationAuditResult:
    """Face verification TAR at FAR by group and intersection from a table of pairs (docs/METHODS.md §6.1).

    A pair counts for group g when both of its images are in g (as
    :func:`fairvision.audits.model.audit_verification`). TAR at FAR per group
    is :func:`fairvision.metrics.verification.tar_at_far_by_group`. The CI is a
    percentile interval of a subject bootstrap (docs/METHODS.md §4.2):
    subjects are drawn with replacement and a genuine pair of subject s counts
    ``w_s`` times, an impostor pair of subjects a and b ``w_a w_b`` times (every
    pair between the copies), with the threshold set again in each replicate
    (:func:`fairvision.metrics.verification.weighted_tar_at_far`). Groups with
    fewer than ``min_subjects`` subjects are reported but left out of the
    comparison (docs/METHODS.md §3.3).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``sample_id``, attribute columns, ``subject_col``.
    pairs : pandas.DataFrame
        :func:`fairvision.io.pairs.read_pairs`: ``sample_a``, ``sample_b``,
        ``same_subject`` (else derived from ``subject_col``) and ``score``
        (else computed from ``embeddings``).
    attributes : sequence of str or Attribute
        Attributes that define the groups.
    far : sequence of float
        Target false accept rates (FHIBE: 0.001).
    threshold : {"group", "global"}
        Each group's own threshold (FHIBE) or one from all pairs.
    subject_col : str or None
        Person of every sample (None: every sample its own person).
    embeddings : array_like (n, d), optional
        Embeddings whose cosine similarity scores the pairs (instead of a
        ``score`` column); rows named by ``embedding_ids`` (sample ids).
    embedding_ids : sequence of str, optional
    max_k : int
        Largest intersection size.
    schema : Schema, optional
    min_subjects : int
    n_boot : int
        Bootstrap replicates (0: no CI).
    level : float
    seed : int, Generator or None
    source, pairs_source : str
        Names of the tables in error messages.

    Returns
    -------
    VerificationAuditResult
    """
    if threshold not in ("group", "global"):
        raise FairvisionError(f"threshold must be 'group' or 'global', not {threshold!r}")
    fars = [float(f) for f in far]
    if not fars:
        raise FairvisionError("give at least one FAR")
    for f in fars:
        if not 0 < f < 1:
            raise FairvisionError(f"FAR {f} is not between 0 and 1")
    if "sample_id" not in data.columns:
        raise ColumnError(f"{source}: missing column 'sample_id'")
    index = pd.Series(np.arange(len(data), dtype=float), index=data["sample_id"].astype(str).to_numpy())
    ia = _pair_rows(pairs["sample_a"].astype(str), index, "sample_a", pairs_source, source)
    ib = _pair_rows(pairs["sample_b"].astype(str), index, "sample_b", pairs_source, source)
    same_img = ia == ib
    if same_img.any():
        i = int(np.flatnonzero(same_img)[0])
        raise ColumnError(f"{pairs_source}: row {i + 1}: sample_a and sample_b are the same image {pairs['sample_a'].iloc[i]!r}")
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are {', '.join(map(str, data.columns))}")
        subject_col = None
    subj = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    if "same_subject" in pairs.columns:
        genuine = pairs["same_subject"].to_numpy(bool)
        if subject_col is not None:
            clash = genuine != (subj[ia] == subj[ib])
            if clash.any():
                i = int(np.flatnonzero(clash)[0])
                raise ColumnError(f"{pairs_source}: row {i + 1}: same_subject is {bool(genuine[i])} but {source} gives "
                                  f"{subject_col} {data[subject_col].iloc[ia[i]]!r} and {data[subject_col].iloc[ib[i]]!r}")
    elif subject_col is not None:
        genuine = subj[ia] == subj[ib]
    else:
        raise ColumnError(f"{pairs_source}: no same_subject column and {source} has no subject column to derive it")
    if embeddings is not None:
        emb = np.asarray(embeddings, dtype=float)
        eid = pd.Series(np.arange(len(emb), dtype=float), index=[str(i) for i in embedding_ids])
        ea = _pair_rows(pairs["sample_a"].astype(str), eid, "sample_a", pairs_source, "the embeddings")
        eb = _pair_rows(pairs["sample_b"].astype(str), eid, "sample_b", pairs_source, "the embeddings")
        scores = cosine_scores(emb, ea, eb).astype(float)
    elif "score" in pairs.columns:
        scores = pairs["score"].to_numpy(float)
    else:
        raise ColumnError(f"{pairs_source}: no score column and no embeddings to score the pairs")
    if not genuine.any() or genuine.all():
        raise FairvisionError(f"{pairs_source}: TAR at FAR needs genuine and impostor pairs; all {len(genuine)} pairs are "
                              f"{'genuine' if genuine.all() else 'impostors'}")
    sa, sb = subj[ia], subj[ib]
    n_subj = int(subj.max()) + 1
    inters = intersections(data, list(attributes), max_k, schema, source=source)
    group_rows, summary_rows, overall_rows = [], [], []
    all_idx = np.arange(len(scores))
    for f in fars:
        est = tar_at_far_by_group(scores, genuine, np.zeros(len(scores), int), f)
        glob = float(est["threshold"].iloc[0])
        res = _bootstrap(scores, genuine, sa, sb, [all_idx], f, "group", n_subj, [], n_boot, level, seed)
        overall_rows.append({"far_target": f, "tar": float(est["tar"].iloc[0]), "ci_low": res[0][0], "ci_high": res[1][0],
                             "threshold": glob, "far": float(est["far"].iloc[0]), "n_genuine": int(genuine.sum()),
                             "n_impostor": int((~genuine).sum()), "n_subjects": n_subj})
    for inter in inters:
        in_g = sparse_membership(inter.rows, inter.codes, len(data), inter.n_cells)
        both = in_g[ia].multiply(in_g[ib]).tocoo()
        labels = inter.display_labels()
        members = [both.row[both.col == c] for c in range(inter.n_cells)]
        n_subjects = np.array([np.unique(np.r_[sa[p], sb[p]]).size for p in members])
        for f in fars:
            est = tar_at_far_by_group(scores[both.row], genuine[both.row], both.col, f, threshold=threshold)
            est = est.reindex(range(inter.n_cells))
            est[["n_genuine", "n_impostor"]] = est[["n_genuine", "n_impostor"]].fillna(0).astype(int)
            big = (n_subjects >= min_subjects) & est["tar"].notna().to_numpy()
            lo, hi, dlo, dhi = _bootstrap(scores, genuine, sa, sb, members, f, threshold, n_subj, np.flatnonzero(big),
                                          n_boot, level, seed, pool=both.row)
            tbl = pd.DataFrame({"intersection": inter.name, "group": labels, "far_target": f, "tar": est["tar"].to_numpy(),
                                "ci_low": lo, "ci_high": hi, "threshold": est["threshold"].to_numpy(),
                                "far": est["far"].to_numpy(), "n_genuine": est["n_genuine"].to_numpy(),
                                "n_impostor": est["n_impostor"].to_numpy(), "n_subjects": n_subjects,
                                "too_small": n_subjects < min_subjects})
            group_rows.append(tbl)
            summary_rows.append(_summary(inter.name, f, tbl, big, dlo, dhi))
    groups = pd.concat(group_rows, ignore_index=True) if group_rows else pd.DataFrame()
    return VerificationAuditResult(
        fars=fars, threshold=threshold, attributes=[str(getattr(a, "name", a)) for a in attributes],
        min_subjects=min_subjects, level=level, n_boot=n_boot, n_pairs=len(scores), n_genuine=int(genuine.sum()),
        n_impostor=int((~genuine).sum()), n_subjects=n_subj, groups=groups, summary=pd.DataFrame(summary_rows),
        overall=pd.DataFrame(overall_rows),
    )


def _summary(name: str, far: float, tbl: pd.DataFrame, big: np.ndarray, dlo: float, dhi: float) -> dict:
    row = {"intersection": name, "far_target": far, "n_groups": int(big.sum()), "worst_group": None, "best_group": None,
           "min": np.nan, "max": np.nan, "difference": np.nan, "difference_ci_low": dlo, "difference_ci_high": dhi,
           "ratio": np.nan}
    if big.sum() >= 2:  # a comparison needs two groups
        t = tbl["tar"].to_numpy(float)
        idx = np.flatnonzero(big)
        order = idx[np.argsort(t[idx], kind="stable")]
        w, b = order[0], order[-1]
        lo, hi = t[w], t[b]
        row.update(worst_group=tbl["group"].iloc[w], best_group=tbl["group"].iloc[b], min=lo, max=hi,
                   difference=hi - lo, ratio=(lo / hi) if hi > 0 else (1.0 if lo == 0 else np.nan))
    return row


_CHUNK = 2_000_000  # pair weights held at once (replicates x pairs)


def _bootstrap(scores, genuine, sa, sb, members, far, threshold, n_subj, compared, n_boot, level, seed, pool=None):
    """Percentile CIs of every group's TAR and of the difference max - min over the ``compared`` groups."""
    k = len(members)
    if n_boot <= 0:
        return np.full(k, np.nan), np.full(k, np.nan), np.nan, np.nan
    # pairs in descending score order: the sorts inside weighted_tar_at_far then meet presorted runs in every chunk
    members = [idx[np.argsort(-scores[idx], kind="stable")] for idx in members]
    if pool is not None:
        pool = np.asarray(pool)[np.argsort(-scores[np.asarray(pool)], kind="stable")]

    def tar_of(idx, w, thr=None):
        out_t = np.empty(w.shape[0])
        step = max(1, _CHUNK // max(1, idx.size))
        for c in range(0, w.shape[0], step):  # chunks of replicates bound memory
            wc = w[c:c + step]
            pw = np.where(genuine[idx], wc[:, sa[idx]], wc[:, sa[idx]] * wc[:, sb[idx]])
            out_t[c:c + step], _ = weighted_tar_at_far(scores[idx], genuine[idx], pw, far,
                                                       thresholds=None if thr is None else thr[c:c + step])
        return out_t

    def glob_thr(w):
        idx = np.asarray(pool)
        out = np.empty(w.shape[0])
        step = max(1, _CHUNK // max(1, idx.size))
        for c in range(0, w.shape[0], step):
            wc = w[c:c + step]
            pw = np.where(genuine[idx], wc[:, sa[idx]], wc[:, sa[idx]] * wc[:, sb[idx]])
            _, out[c:c + step] = weighted_tar_at_far(scores[idx], genuine[idx], pw, far)
        return out

    def statistic(w):
        thr = glob_thr(w) if threshold == "global" else None
        cols = [tar_of(idx, w, thr) if idx.size else np.full(w.shape[0], np.nan) for idx in members]
        t = np.column_stack(cols) if cols else np.zeros((w.shape[0], 0))
        if len(compared) >= 2:
            sub = t[:, compared]
            with np.errstate(invalid="ignore"):
                diff = np.where(np.isnan(sub).any(axis=1), np.nan, np.nanmax(sub, axis=1) - np.nanmin(sub, axis=1)) \
                    if sub.shape[1] else np.full(w.shape[0], np.nan)
        else:
            diff = np.full(w.shape[0], np.nan)
        return np.column_stack([t, diff])

    res = cluster_bootstrap(statistic, np.arange(n_subj), n_boot=n_boot, level=level, seed=seed)
    lo, hi = np.atleast_1d(res.ci_low), np.atleast_1d(res.ci_high)
    return lo[:k], hi[:k], float(lo[k]), float(hi[k])

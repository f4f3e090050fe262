"""Annotation agreement between annotators and vendors, and by group (docs/METHODS.md §13.4).

FHIBE obtained several independent annotations of the same images and reports agreement as mean IoU (boxes),
object keypoint similarity (keypoints), Dice (masks) and pairwise Jaccard (categorical attributes), within and
between vendors. This module matches the annotations of every pair of annotators of an image and category
(one-to-one, maximum total box IoU, at least ``min_iou``), scores every matched pair, and tabulates agreement by
annotator, by vendor pair and by the subject's group (are some groups annotated worse?), with subject-bootstrap
CIs, and corrected tests (the model audit's machinery) between vendor pairs and between groups, plus
Krippendorff's alpha of every categorical attribute. Annotators are described, not tested: a match belongs to
both of its annotators, so their sets of matches overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import connected_components

from fairvision.audits.curation.family import correct_across
from fairvision.audits.model import ModelAuditResult, audit_model
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.io.coco import CocoDataset, image_sample_ids, read_coco
from fairvision.io.tables import SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import require_columns
from fairvision.metrics.boxes import box_iou
from fairvision.metrics.keypoints import COCO_SIGMAS, oks
from fairvision.metrics.masks import dice, segmentation_to_mask
from fairvision.schema import Attribute, Schema
from fairvision.stats.agreement import jaccard, krippendorff_alpha, label_indicators
from fairvision.stats.resample import cluster_bootstrap_weights, group_mean_replicates, percentile_ci

#: agreement measures of a matched pair
MEASURES = ("iou", "oks", "dice")


@dataclass
class AnnotatedCoco:
    """COCO annotations with who made them: ``extra`` is aligned with ``coco.annotations``
    (``annotator``, ``vendor`` and ``attributes``, a dict per annotation)."""

    coco: CocoDataset
    extra: pd.DataFrame


def read_annotated_coco(path, annotator_key: str = "annotator_id", *, vendor_key: str | None = None,
                        attributes_key: str = "attributes") -> AnnotatedCoco:
    """Read a COCO file whose annotations name their annotator (docs/METHODS.md §13.4).

    Parameters
    ----------
    path : path-like
        COCO JSON (checked by :func:`fairvision.io.coco.read_coco`).
    annotator_key : str
        Annotation field with the annotator id (required on every annotation).
    vendor_key : str, optional
        Annotation field with the vendor (annotation team); missing values become ``"(none)"``.
    attributes_key : str
        Annotation field holding categorical attributes, an object ``{name: value or [values]}`` (optional).

    Returns
    -------
    AnnotatedCoco

    Raises
    ------
    InputFileError
        An annotation without the annotator field, or attributes that are not an object.
    """
    keys = [k for k in (annotator_key, vendor_key, attributes_key) if k]
    coco = read_coco(path, extra_keys=keys)
    ann, vend, attrs = [], [], []
    for i, a in enumerate(coco.annotations[keys].to_dict("records")):
        where = f"{path}: annotations[{i}]" + (f" (id {coco.annotations['id'].iat[i]!r})"
                                                if pd.notna(coco.annotations["id"].iat[i]) else "")
        if a[annotator_key] is None:
            raise InputFileError(f"{where}: no {annotator_key!r} field for the annotator id (annotator_key)")
        ann.append(str(a[annotator_key]))
        vend.append(str(a[vendor_key]) if vendor_key and a.get(vendor_key) is not None else "(none)")
        at = a.get(attributes_key) or {}
        if not isinstance(at, dict):
            raise InputFileError(f"{where}: {attributes_key!r} must be an object of attribute values")
        attrs.append(at)
    return AnnotatedCoco(coco, pd.DataFrame({"annotator": ann, "vendor": vend, "attributes": attrs}))


def _boxes(ann: pd.DataFrame, rows: np.ndarray, images: pd.DataFrame) -> np.ndarray:
    out = np.zeros((len(rows), 4))
    for k, r in enumerate(rows):
        b = ann.at[r, "bbox"]
        if b is None or (isinstance(b, float) and np.isnan(b)):
            seg = ann.at[r, "segmentation"]
            if seg is None:
                raise FairvisionError(f"annotation {r}: no box and no mask to match it by")
            img = images.loc[ann.at[r, "image_id"]]
            m = segmentation_to_mask(seg, int(img["height"]), int(img["width"]))
            ys, xs = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
            b = [xs[0], ys[0], xs[-1] + 1 - xs[0], ys[-1] + 1 - ys[0]] if len(xs) else [0, 0, 0, 0]
        out[k] = b
    return out


def _pair_measures(ann: pd.DataFrame, ia: int, ib: int, iou: float, images: pd.DataFrame, sigmas) -> dict:
    out = {"iou": iou, "oks": np.nan, "dice": np.nan}
    ka, kb = ann.at[ia, "keypoints"], ann.at[ib, "keypoints"]
    if isinstance(ka, list) and isinstance(kb, list) and len(ka) == len(kb):
        a, b = np.asarray(ka).reshape(-1, 3), np.asarray(kb).reshape(-1, 3)
        vis = (a[:, 2] > 0) & (b[:, 2] > 0)
        areas = [ann.at[i, "area"] if "area" in ann.columns and pd.notna(ann.at[i, "area"]) else np.nan for i in (ia, ib)]
        if np.isnan(areas).any():
            bb = _boxes(ann, np.array([ia, ib]), images)
            areas = bb[:, 2] * bb[:, 3]
        k = np.asarray(sigmas) if len(a) == len(COCO_SIGMAS) else np.full(len(a), 0.1)
        out["oks"] = float(oks(a[:, :2], b[:, :2], vis, float(np.mean(areas)), sigmas=k)[0])
    sa, sb = ann.at[ia, "segmentation"], ann.at[ib, "segmentation"]
    if sa is not None and sb is not None:
        img = images.loc[ann.at[ia, "image_id"]]
        h, w = int(img["height"]), int(img["width"])
        out["dice"] = dice(segmentation_to_mask(sa, h, w), segmentation_to_mask(sb, h, w))
    return out


def match_annotations(data: AnnotatedCoco, *, min_iou: float = 0.5, sigmas=COCO_SIGMAS) -> pd.DataFrame:
    """Match the annotations of every pair of annotators per image and category, and score the matches.

    Within an image and category, the boxes of annotators a and b are matched one-to-one to maximise the total
    IoU (Hungarian assignment); a match needs IoU >= ``min_iou``. Matched pairs get box IoU, OKS (keypoints
    labelled by both, object area the mean of the two ``area`` fields, else of the two box areas; COCO sigmas
    for 17 keypoints, else 0.1) and Dice of the masks; an annotation without a partner is a row with
    ``matched = False`` (docs/METHODS.md §13.4).

    Parameters
    ----------
    data : AnnotatedCoco
    min_iou : float
        Smallest box IoU of a match.
    sigmas : array_like
        Per-keypoint OKS standard deviations for 17-keypoint skeletons.

    Returns
    -------
    pandas.DataFrame
        One row per matched pair or unmatched annotation: ``image_id``, ``category_id``, ``annotator_a``,
        ``annotator_b``, ``vendor_a``, ``vendor_b``, ``ann_a``, ``ann_b`` (rows of the annotations; -1 for no
        partner), ``matched``, ``iou``, ``oks``, ``dice``.
    """
    ann = data.coco.annotations.reset_index(drop=True)
    ex = data.extra.reset_index(drop=True)
    images = data.coco.images.set_index("image_id")
    rows = []
    frame = pd.DataFrame({"image_id": ann["image_id"], "category_id": ann["category_id"], "annotator": ex["annotator"]})
    for (image_id, cat), grp in frame.groupby(["image_id", "category_id"], sort=False):
        by = {a: g.index.to_numpy() for a, g in grp.groupby("annotator", sort=True)}
        boxes = {a: _boxes(ann, r, images) for a, r in by.items()}
        who = sorted(by)
        for i0, j0 in zip(*np.triu_indices(len(who), 1)):  # annotator pairs of one image: a handful
            a, b = who[i0], who[j0]
            iou = box_iou(boxes[a], boxes[b], fmt="xywh")
            ra, cb = linear_sum_assignment(-iou) if iou.size else (np.zeros(0, int), np.zeros(0, int))
            good = iou[ra, cb] >= min_iou
            ra, cb = ra[good], cb[good]
            for i, j in zip(ra, cb):
                ia, ib = int(by[a][i]), int(by[b][j])
                rows.append({"image_id": image_id, "category_id": cat, "annotator_a": a, "annotator_b": b,
                             "ann_a": ia, "ann_b": ib, "matched": True,
                             **_pair_measures(ann, ia, ib, float(iou[i, j]), images, sigmas)})
            for side, other, idx, used in ((a, b, by[a], ra), (b, a, by[b], cb)):
                for i in np.setdiff1d(np.arange(len(idx)), used):
                    rows.append({"image_id": image_id, "category_id": cat, "annotator_a": side, "annotator_b": other,
                                 "ann_a": int(idx[i]), "ann_b": -1, "matched": False,
                                 "iou": np.nan, "oks": np.nan, "dice": np.nan})
    cols = ["image_id", "category_id", "annotator_a", "annotator_b", "ann_a", "ann_b", "matched", *MEASURES]
    out = pd.DataFrame(rows, columns=cols)
    vend = ex["vendor"].to_numpy()
    out.insert(4, "vendor_a", vend[out["ann_a"].to_numpy(int)] if len(out) else [])
    vb = np.where(out["ann_b"].to_numpy(int) >= 0, vend[np.maximum(out["ann_b"].to_numpy(int), 0)] if len(out) else [], None)
    out.insert(5, "vendor_b", vb)
    return out


def _value_key(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple, set)):
        return "|".join(sorted(map(str, v)))
    return str(v)


@dataclass
class AgreementAudit:
    """What :func:`audit_agreement` found.

    Attributes
    ----------
    pairs : DataFrame
        :func:`match_annotations` plus ``jaccard.<attribute>`` columns, the sample, subject and group columns.
    by_pair : DataFrame
        Per annotator pair: n_matched, n_unmatched, match_rate and the mean of every measure.
    by_annotator : DataFrame or None
        Per measure and annotator: ``n_matches``, ``n_subjects``, ``mean`` with a subject-bootstrap CI
        (``ci_low``, ``ci_high``, ``level``), every match counted for both of its annotators. Descriptive only:
        two annotators' matches overlap (their common matches are in both), so they are not tested against each
        other; the per-pair means of ``by_pair`` are on disjoint matches.
    by_vendor, by_group : ModelAuditResult or None
        Mean agreement with subject-bootstrap CIs and corrected pairwise tests by vendor pair (``A`` within
        vendor A, ``A | B`` between) and by the subject's groups (disjoint sets of matches).
    alpha : DataFrame
        Krippendorff's alpha (nominal) of every categorical attribute, overall and within each vendor;
        ``n_units_dropped`` counts units left out because they hold two annotations of one annotator.
    """

    measures: list[str]
    attributes: list[str]
    annotators: list[str]
    vendors: list[str]
    min_iou: float
    correction: str
    alpha_level: float
    n_images: int
    n_annotations: int
    pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_pair: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_annotator: pd.DataFrame | None = None
    by_vendor: ModelAuditResult | None = None
    by_group: ModelAuditResult | None = None
    alpha: pd.DataFrame = field(default_factory=pd.DataFrame)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``: ``mean_<measure>`` and ``min_annotator_<measure>`` (lowest
        annotator mean), ``match_rate``, ``min_alpha`` and ``alpha.<attribute>``, and the group audit's
        (``<measure>.disparity``, ``<measure>.difference``, ``significant_pairs``, ...) prefixed ``group.``."""
        q: dict[str, float] = {}
        m = self.pairs[self.pairs["matched"]] if len(self.pairs) else self.pairs
        for k in self.measures:
            q[f"mean_{k}"] = float(m[k].mean()) if len(m) else float("nan")
        n = len(self.pairs)
        q["match_rate"] = float(2 * len(m) / (len(m) * 2 + (n - len(m)))) if n else float("nan")
        if self.by_annotator is not None and len(self.by_annotator):
            for k, t in self.by_annotator.groupby("measure", sort=False):
                q[f"min_annotator_{k}"] = float(t["mean"].min())
        overall = self.alpha[self.alpha["vendor"] == "all"] if len(self.alpha) else self.alpha
        for _, r in overall.iterrows():
            q[f"alpha.{r['attribute']}"] = float(r["estimate"])
        q["min_alpha"] = float(overall["estimate"].min()) if len(overall) else float("nan")
        if self.by_group is not None:
            q.update({f"group.{k}": v for k, v in self.by_group.quantities().items()})
        return q


def audit_agreement(
    data: pd.DataFrame | None,
    annotations: AnnotatedCoco,
    attributes: Sequence[Attribute | str] = (),
    *,
    settings: AuditSettings | None = None,
    sample_id: str = "file_name",
    subject_col: str | None = SUBJECT_ID,
    min_iou: float = 0.5,
    max_k: int = 1,
    schema: Schema | None = None,
    source: str = "samples",
) -> AgreementAudit:
    """Annotation agreement within and between annotators and vendors, and by group (docs/METHODS.md §13.4).

    Parameters
    ----------
    data : pandas.DataFrame or None
        Sample table (``sample_id``, ``subject_id``, attribute columns) to join images to subjects and groups.
    annotations : AnnotatedCoco
        From :func:`read_annotated_coco`.
    attributes : sequence of Attribute or str
        Group attributes of ``data``: agreement by group.
    settings : AuditSettings, optional
        Uses ``min_subjects``, ``correction``, ``alpha``, ``n_boot``, ``level`` and ``seed``, as
        :func:`fairvision.audits.model.audit_model` (``min_subjects`` applies to groups of subjects; vendor pairs
        need at least 2 subjects to be compared; annotators are described with CIs, not tested).
    sample_id : {"file_name", "image_id"}
        How a COCO image is matched to a ``sample_id``.
    subject_col : str or None
        Subject column (bootstrap and test unit); each image its own subject when absent.
    min_iou : float
        Smallest box IoU of a match (:func:`match_annotations`).
    max_k, schema
        As :func:`fairvision.audits.model.audit_model`.
    source : str
        Name of the sample table in error messages.

    Returns
    -------
    AgreementAudit
    """
    settings = settings or DEFAULT_SETTINGS
    if not 0 <= min_iou <= 1:
        raise ParameterError("min_iou", "must be between 0 and 1")
    coco = annotations.coco
    ex = annotations.extra
    annotators = sorted(ex["annotator"].unique())
    if len(annotators) < 2:
        raise FairvisionError(f"{coco.source}: agreement needs at least two annotators, found {len(annotators)}")
    pairs = match_annotations(annotations, min_iou=min_iou)
    names = sorted({k for d in ex["attributes"] for k in d})
    _add_jaccard(pairs, ex, names)
    measures = [m for m in (*MEASURES, *(f"jaccard.{n}" for n in names)) if pairs[m].notna().any()]
    attrs = list(attributes)
    pairs, subject_col = _join_samples(pairs, coco, data, sample_id, subject_col, source, by_group=bool(attrs))
    res = AgreementAudit(measures=measures, attributes=[a if isinstance(a, str) else a.name for a in attrs],
                         annotators=annotators, vendors=sorted(ex["vendor"].unique()), min_iou=min_iou,
                         correction=settings.correction, alpha_level=settings.alpha,
                         n_images=int(coco.images["image_id"].nunique()), n_annotations=len(ex))
    res.by_pair = _by_pair(pairs, measures)
    matched = pairs[pairs["matched"]]
    if len(matched) and measures:
        use = [m for m in measures if matched[m].notna().any()]
        # descriptive only: a match belongs to both of its annotators, so annotators' sets of matches overlap
        # and a test between them would compare groups that share observations
        res.by_annotator = _annotator_means(matched, use, subject_col, settings)
        if len(res.vendors) > 1:
            res.by_vendor = audit_model(matched, use, ["vendor_pair"], settings=settings.replace(min_subjects=2),
                                        subject_col=subject_col, max_k=1, source=source)
        if attrs:
            res.by_group = audit_model(matched, use, attrs, settings=settings, subject_col=subject_col, max_k=max_k,
                                       schema=schema, source=source)
    # pairwise tests of vendor pairs and of groups: one family across every measure and attribute set, so a
    # pair is significant only if it survives the audit-wide correction
    correct_across([res.by_vendor, res.by_group], settings.correction, settings.alpha)
    res.alpha = _alpha_table(pairs, ex, coco.annotations["image_id"].to_numpy(), names, subject_col, settings)
    res.pairs = pairs.drop(columns=["_subject"]) if "_subject" in pairs.columns else pairs
    return res


def _add_jaccard(pairs: pd.DataFrame, ex: pd.DataFrame, names: list[str]) -> None:
    """Add ``jaccard.<attribute>``: the Jaccard index of the label sets of each matched pair (NaN where either
    annotation has no value)."""
    mt = pairs["matched"].to_numpy(bool)
    for name in names:
        vals = ex["attributes"].map(lambda d: d.get(name)).to_numpy(dtype=object)
        ind, _ = label_indicators(vals)
        j = np.full(len(pairs), np.nan)
        if mt.any():
            ia, ib = pairs.loc[mt, "ann_a"].to_numpy(int), pairs.loc[mt, "ann_b"].to_numpy(int)
            both = np.array([vals[a] is not None and vals[b] is not None for a, b in zip(ia, ib)], bool)
            jj = jaccard(ind[ia], ind[ib])
            j[np.flatnonzero(mt)] = np.where(both, jj, np.nan)
        pairs[f"jaccard.{name}"] = j


def _join_samples(pairs: pd.DataFrame, coco: CocoDataset, data: pd.DataFrame | None, sample_id: str,
                  subject_col: str | None, source: str, *, by_group: bool) -> tuple[pd.DataFrame, str]:
    """Join the matches to their samples, subjects and groups, and add ``vendor_pair``; returns the pairs and
    the subject column (``_subject``, every image its own subject, when there is none)."""
    ids = image_sample_ids(coco, sample_id)
    pairs[SAMPLE_ID] = pd.Series(ids.to_numpy(), index=coco.images["image_id"].to_numpy()).reindex(pairs["image_id"]).to_numpy()
    if data is not None:
        require_columns(data, [SAMPLE_ID], source=source, why=" to join the annotations on")
        s = data.drop_duplicates(SAMPLE_ID)
        s = s.set_index(s[SAMPLE_ID].astype(str)).drop(columns=[SAMPLE_ID])
        extra = s.reindex(pairs[SAMPLE_ID]).reset_index(drop=True)
        pairs = pd.concat([pairs, extra.drop(columns=[c for c in extra.columns if c in pairs.columns])], axis=1)
    elif by_group:
        raise FairvisionError("agreement by group needs a sample table (data)")
    if subject_col is None or subject_col not in pairs.columns:
        if subject_col not in (None, SUBJECT_ID):
            require_columns(pairs, [subject_col], source=source, what="subject column")
        subject_col = "_subject"
        pairs[subject_col] = pairs[SAMPLE_ID].astype(str)
    pairs[subject_col] = pairs[subject_col].where(pairs[subject_col].notna(), pairs[SAMPLE_ID].astype(str))
    pairs["vendor_pair"] = [va if va == vb else " | ".join(sorted((str(va), str(vb))))
                            for va, vb in zip(pairs["vendor_a"], pairs["vendor_b"].fillna(pairs["vendor_a"]))]
    return pairs, subject_col


def _by_pair(pairs: pd.DataFrame, measures: list[str]) -> pd.DataFrame:
    """Per annotator pair: matches, unmatched annotations, match rate and the mean of every measure (unmatched
    annotations are listed from each side: (a, b) and (b, a) are folded together)."""
    key = pd.DataFrame(np.sort(pairs[["annotator_a", "annotator_b"]].to_numpy(str), axis=1),
                       columns=["annotator_a", "annotator_b"])
    key["n_matched"] = pairs["matched"].to_numpy(int)
    key["n_unmatched"] = 1 - key["n_matched"]
    by_pair = key.groupby(["annotator_a", "annotator_b"], sort=True)[["n_matched", "n_unmatched"]].sum()
    by_pair["match_rate"] = 2 * by_pair["n_matched"] / (2 * by_pair["n_matched"] + by_pair["n_unmatched"])
    matched = pairs[pairs["matched"]]
    means = matched.groupby(["annotator_a", "annotator_b"], sort=True)[measures].mean()
    return by_pair.join(means).reset_index()


def _annotator_means(matched: pd.DataFrame, measures: list[str], subject_col: str,
                     settings: AuditSettings) -> pd.DataFrame:
    """Mean agreement of each annotator with the others, every match counted for both of its annotators, with
    subject-bootstrap percentile CIs (one set of subject draws for every annotator and measure). Descriptive:
    no tests, since two annotators' sets of matches share their common matches."""
    cols = ["measure", "annotator", "n_matches", "n_subjects", "mean", "ci_low", "ci_high", "level"]
    long = pd.DataFrame({
        "annotator": np.concatenate([matched["annotator_a"].to_numpy(str), matched["annotator_b"].to_numpy(str)]),
        "subject": np.tile(matched[subject_col].astype(str).to_numpy(), 2)})
    codes, names = pd.factorize(long["annotator"], sort=True)
    subj, subjects = pd.factorize(long["subject"], sort=True)
    n_boot, level = settings.n_boot, settings.level
    weights = cluster_bootstrap_weights(len(subjects), n_boot, settings.seed) if n_boot > 0 else None
    rows = []
    for m in measures:
        v = np.tile(matched[m].to_numpy(float), 2)
        ok = ~np.isnan(v)
        est = group_mean_replicates(v, codes, subj, np.ones((1, len(subjects))), n_groups=len(names))[0]
        if weights is not None:
            lo, hi = percentile_ci(group_mean_replicates(v, codes, subj, weights, n_groups=len(names)), level)
        else:
            lo = hi = np.full(len(names), np.nan)
        n = np.bincount(codes[ok], minlength=len(names))
        ns = pd.Series(subj[ok]).groupby(codes[ok]).nunique().reindex(range(len(names)), fill_value=0).to_numpy()
        for g, name in enumerate(names):
            rows.append({"measure": m, "annotator": name, "n_matches": int(n[g]), "n_subjects": int(ns[g]),
                         "mean": est[g], "ci_low": lo[g], "ci_high": hi[g], "level": level})
    return pd.DataFrame(rows, columns=cols)


def _alpha_table(pairs: pd.DataFrame, ex: pd.DataFrame, image_ids: np.ndarray, names: list[str], subject_col: str,
                 settings: AuditSettings) -> pd.DataFrame:
    """Krippendorff's alpha per attribute: units are the connected components of the matched annotations.

    A chain of matches can join two annotations of one annotator into one unit (A1-B1-C1-A2): such a unit has
    no single value per coder, so it is left out, and counted in ``n_units_dropped``."""
    cols = ["attribute", "vendor", "estimate", "ci_low", "ci_high", "level", "n_units", "n_values", "n_coders",
            "n_units_dropped"]
    if not names:
        return pd.DataFrame(columns=cols)
    level = settings.level
    mt = pairs[pairs["matched"]]
    n = len(ex)
    graph = sparse.coo_matrix((np.ones(len(mt)), (mt["ann_a"].to_numpy(int), mt["ann_b"].to_numpy(int))), shape=(n, n))
    _, unit = connected_components(graph, directed=False)
    by_image = pairs.groupby("image_id")[subject_col].first()
    subj = by_image.reindex(image_ids).fillna("").astype(str).to_numpy()
    rows = []
    for name in names:
        vals = ex["attributes"].map(lambda d: _value_key(d.get(name)))
        for vendor in ["all", *sorted(ex["vendor"].unique())] if ex["vendor"].nunique() > 1 else ["all"]:
            sel = (ex["vendor"] == vendor).to_numpy() if vendor != "all" else np.ones(n, bool)
            df = pd.DataFrame({"unit": unit[sel], "coder": ex["annotator"].to_numpy()[sel], "v": vals.to_numpy()[sel]})
            twice = df.duplicated(["unit", "coder"], keep=False).to_numpy()
            bad = np.unique(df["unit"].to_numpy()[twice])
            df = df[~np.isin(df["unit"].to_numpy(), bad)]
            table = df.pivot(index="unit", columns="coder", values="v")
            clusters = pd.Series(subj[sel], index=unit[sel]).groupby(level=0).first().reindex(table.index).to_numpy()
            if not len(table):
                rows.append({"attribute": name, "vendor": vendor, "estimate": np.nan, "ci_low": np.nan,
                             "ci_high": np.nan, "level": level, "n_units": 0, "n_values": 0, "n_coders": 0,
                             "n_units_dropped": len(bad)})
                continue
            r = krippendorff_alpha(table.to_numpy(dtype=object), "nominal", n_boot=settings.n_boot, level=level,
                                   seed=settings.seed, clusters=clusters)
            rows.append({"attribute": name, "vendor": vendor, "estimate": r.estimate, "ci_low": r.ci_low,
                         "ci_high": r.ci_high, "level": level, "n_units": r.n_units, "n_values": r.n_values,
                         "n_coders": table.shape[1], "n_units_dropped": len(bad)})
    return pd.DataFrame(rows, columns=cols)


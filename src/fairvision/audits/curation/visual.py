"""Visual statistics by group (FHIBE Fig. 5; docs/METHODS.md §13.3).

Are some groups photographed differently: smaller in the frame, off-centre, more occluded? Per annotation
(person and face boxes, person masks, keypoints) the statistics of :mod:`fairvision.metrics.shape`; per group
their median and IQR, the mean with a subject-bootstrap CI and pairwise Mann-Whitney tests (the model audit's
machinery, :func:`fairvision.audits.model.audit_model`, on subject means), a Kruskal-Wallis omnibus test per
statistic and attribute set, and 2-D histograms (heat maps) of box centres and keypoints per group.

Annotations come from a COCO file, or, when a dataset has none, from the built-in models
(:func:`fairvision.audits.curation.visual_models.coco_from_models`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.curation.family import correct_across
from fairvision.audits.gates import quantity_key
from fairvision.audits.model import ModelAuditResult, audit_model
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import FairvisionError, ParameterError
from fairvision.groups import intersections, resolve_attributes, subject_codes
from fairvision.io.coco import CocoDataset, image_sample_ids
from fairvision.io.tables import SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import require_columns
from fairvision.metrics.masks import segmentation_to_mask
from fairvision.metrics.shape import (box_area_ratio, box_aspect_ratio, box_centres, centre_distance, histogram2d,
                                      keypoint_spread, mask_area_ratio, mask_concavity, visible_fraction)
from fairvision.schema import Attribute, Schema
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.groupwise import cluster_means, kruskal_test

#: per-instance statistics, in report order
STATISTICS = ("box_area_ratio", "aspect_ratio", "centre_distance", "mask_area_ratio", "concavity",
              "keypoint_spread", "visible_fraction")
#: what each statistic means (report captions)
DESCRIPTIONS = {
    "box_area_ratio": "box area / image area (larger: closer to the camera)",
    "aspect_ratio": "box width / height (below 1: upright)",
    "centre_distance": "distance of the box centre from the image centre / half the diagonal (0: centred)",
    "mask_area_ratio": "mask area / image area",
    "concavity": "1 - mask area / convex hull area (higher: more complex outline)",
    "keypoint_spread": "mean distance between labelled keypoints / image diagonal",
    "visible_fraction": "share of keypoints marked visible",
}

# -- per-instance statistics --------------------------------------------------------------------------------------

def instance_statistics(gt: CocoDataset) -> pd.DataFrame:
    """The statistics of every non-crowd annotation of a COCO dataset (docs/METHODS.md §13.3).

    Parameters
    ----------
    gt : fairvision.io.coco.CocoDataset
        Images (with ``width`` and ``height``) and annotations.

    Returns
    -------
    pandas.DataFrame
        One row per annotation: ``image_id``, ``annotation`` (row in ``gt.annotations``), ``category``
        (name, else the id as text), ``centre_x``, ``centre_y`` (box centre as fractions of the image size)
        and the :data:`STATISTICS` (NaN where the annotation lacks a box, mask or keypoints).
    """
    ann = gt.annotations.reset_index(drop=True)
    if "iscrowd" in ann.columns:
        ann = ann[~ann["iscrowd"].fillna(0).astype(bool)]
    images = gt.images.set_index("image_id")
    size = images.reindex(ann["image_id"])[["width", "height"]]
    missing = size.isna().any(axis=1).to_numpy()
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise FairvisionError(f"{gt.source}: image {ann['image_id'].iloc[i]!r} has no 'width' and 'height' "
                              "(needed to relate annotations to the image size)")
    w = size["width"].to_numpy(float)
    h = size["height"].to_numpy(float)
    names = dict(zip(gt.categories["category_id"], gt.categories["name"])) if len(gt.categories) else {}
    cat = [str(names.get(c) or c) for c in ann["category_id"]]
    n = len(ann)
    out = pd.DataFrame({"image_id": ann["image_id"].to_numpy(), "annotation": ann.index.to_numpy(),
                        "category": cat, "width": w, "height": h})
    for col in ("centre_x", "centre_y", *STATISTICS):
        out[col] = np.nan
    has_box = ann["bbox"].notna().to_numpy() if n else np.zeros(0, bool)
    if has_box.any():
        b = np.array(ann["bbox"][has_box].tolist(), dtype=float)
        out.loc[has_box, "box_area_ratio"] = box_area_ratio(b, w[has_box], h[has_box])
        out.loc[has_box, "aspect_ratio"] = box_aspect_ratio(b)
        out.loc[has_box, "centre_distance"] = centre_distance(b, w[has_box], h[has_box])
        c = box_centres(b, w[has_box], h[has_box])
        out.loc[has_box, "centre_x"], out.loc[has_box, "centre_y"] = c[:, 0], c[:, 1]
    seg = ann["segmentation"].to_numpy() if n else np.zeros(0, object)
    for i in np.flatnonzero(pd.notna(seg)) if n else ():  # one decode per annotation (masks differ in size)
        m = segmentation_to_mask(seg[i], int(h[i]), int(w[i]))
        out.iat[i, out.columns.get_loc("mask_area_ratio")] = mask_area_ratio(m)
        out.iat[i, out.columns.get_loc("concavity")] = mask_concavity(m)
    kp = ann["keypoints"].to_numpy() if n else np.zeros(0, object)
    has_kp = np.array([k is not None and not (isinstance(k, float) and math.isnan(k)) for k in kp], bool)
    if has_kp.any():
        lengths = np.array([len(k) for k in kp[has_kp]])
        for length in np.unique(lengths):  # one batch per skeleton size
            rows = np.flatnonzero(has_kp)[lengths == length]
            arr = np.array([kp[r] for r in rows], dtype=float).reshape(len(rows), -1, 3)
            out.loc[rows, "keypoint_spread"] = keypoint_spread(arr, w[rows], h[rows])
            out.loc[rows, "visible_fraction"] = visible_fraction(arr)
    return out


def keypoint_points(gt: CocoDataset) -> pd.DataFrame:
    """Every labelled keypoint (``v > 0``) as fractions of its image size: ``image_id``, ``x``, ``y``.

    Parameters
    ----------
    gt : fairvision.io.coco.CocoDataset

    Returns
    -------
    pandas.DataFrame
    """
    ann = gt.annotations
    has = ann["keypoints"].notna().to_numpy() if len(ann) else np.zeros(0, bool)
    if not has.any():
        return pd.DataFrame({"image_id": [], "x": [], "y": []})
    sub = ann[has]
    images = gt.images.set_index("image_id").reindex(sub["image_id"])
    lens = sub["keypoints"].map(len).to_numpy() // 3
    flat = np.concatenate([np.asarray(k, float) for k in sub["keypoints"]]).reshape(-1, 3)
    img = np.repeat(sub["image_id"].to_numpy(), lens)
    w = np.repeat(images["width"].to_numpy(float), lens)
    h = np.repeat(images["height"].to_numpy(float), lens)
    lab = flat[:, 2] > 0
    return pd.DataFrame({"image_id": img[lab], "x": flat[lab, 0] / w[lab], "y": flat[lab, 1] / h[lab]})


#: a statistic whose values span at most this share of their largest magnitude (at least 1) is constant
CONSTANT_TOLERANCE = 1e-3




# -- the audit ----------------------------------------------------------------------------------------------------

@dataclass
class VisualAudit(SettingsView):
    """What :func:`audit_visual` found.

    Attributes
    ----------
    instances : DataFrame
        One row per annotation: image, category, sample and subject, the attributes and the statistics.
    overall : DataFrame
        Per statistic (``category.statistic``): n, median, q25, q75, mean.
    groups : dict
        ``(statistic, attribute set) -> DataFrame`` by group: n_annotations (annotations with the statistic),
        n_images, n_subjects, mean, median, q25, q75, iqr, sd, ci_low, ci_high, too_small.
    pairwise : dict
        ``(statistic, attribute set) -> DataFrame`` of pairwise Mann-Whitney tests (subject means).
    omnibus : DataFrame
        Kruskal-Wallis test per statistic and attribute set: statistic, df, pvalue, pvalue_adjusted,
        significant, n_groups.
    heatmaps : DataFrame
        Long table of 2-D histograms: what (``<category> centres`` or ``keypoints``), attribute, group,
        row, col, share (of that group's points).
    model : ModelAuditResult or None
        The disaggregation behind ``groups`` and ``pairwise`` (None without attributes).
    """

    statistics: list[str]
    attributes: list[str]
    source: str
    n_images: int
    n_instances: int
    n_unmatched_images: int
    bins: int
    settings: AuditSettings
    instances: pd.DataFrame = field(default_factory=pd.DataFrame)
    overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: dict = field(default_factory=dict)
    pairwise: dict = field(default_factory=dict)
    omnibus: pd.DataFrame = field(default_factory=pd.DataFrame)
    heatmaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    model: ModelAuditResult | None = None
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: statistics left out of the tables and tests (name -> why): any statistic with one value for every annotation
    left_out: dict = field(default_factory=dict)

    def heatmap(self, what: str, attribute: str | None = None, group: str | None = None) -> np.ndarray:
        """The ``bins x bins`` histogram (shares) of one kind of point, overall or for one group."""
        h = self.heatmaps
        sel = h[(h["what"] == what) & (h["attribute"] == (attribute or "all")) & (h["group"] == (group or "all"))]
        out = np.zeros((self.bins, self.bins))
        out[sel["row"].to_numpy(int), sel["col"].to_numpy(int)] = sel["share"].to_numpy(float)
        return out

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``: the model audit's per statistic (``<stat>.disparity``,
        ``<stat>.difference``, ``significant_pairs``, ...), plus ``omnibus_significant`` (Kruskal-Wallis tests
        significant after correction), ``<stat>.<attr>.omnibus_pvalue`` and ``n_instances``."""
        q = dict(self.model.quantities()) if self.model is not None else {}
        q["n_instances"] = float(self.n_instances)
        if len(self.omnibus):
            q["omnibus_significant"] = float(self.omnibus["significant"].sum())
            for _, r in self.omnibus.iterrows():
                q[f"{r['metric']}.{quantity_key(r['intersection'])}.omnibus_pvalue"] = float(r["pvalue_adjusted"])
        else:
            q["omnibus_significant"] = 0.0
        return q


def _join_samples(inst: pd.DataFrame, gt: CocoDataset, samples: pd.DataFrame | None, sample_id: str,
                  source: str) -> tuple[pd.DataFrame, int]:
    ids = image_sample_ids(gt, sample_id)
    img_to_sample = pd.Series(ids.to_numpy(), index=gt.images["image_id"].to_numpy())
    inst = inst.assign(**{SAMPLE_ID: img_to_sample.reindex(inst["image_id"]).to_numpy()})
    if samples is None:
        return inst, 0
    require_columns(samples, [SAMPLE_ID], source=source, why=" to join the annotations on")
    s = samples.drop_duplicates(SAMPLE_ID).set_index(samples[SAMPLE_ID].drop_duplicates().astype(str))
    known = inst[SAMPLE_ID].isin(s.index).to_numpy()
    unmatched = int(pd.Series(inst.loc[~known, "image_id"]).nunique())
    inst = inst[known].reset_index(drop=True)
    extra = s.drop(columns=[SAMPLE_ID]).reindex(inst[SAMPLE_ID]).reset_index(drop=True)
    extra = extra.drop(columns=[c for c in extra.columns if c in inst.columns])
    return pd.concat([inst, extra], axis=1), unmatched


def _omnibus(data: pd.DataFrame, metrics: Sequence[str], inters, subjects: np.ndarray,
             settings: AuditSettings) -> pd.DataFrame:
    """Kruskal-Wallis test of every statistic and attribute set, on subject means of the groups large enough."""
    rows = []
    for m in metrics:
        x_all = data[m].to_numpy(float)
        for inter in inters:
            means, codes, subj = cluster_means(x_all[inter.rows], inter.codes, subjects[inter.rows])
            n_subj = np.bincount(codes, minlength=inter.n_cells)
            big = np.flatnonzero(n_subj >= settings.min_subjects)
            row = {"metric": m, "intersection": inter.name, "n_groups": len(big), "statistic": np.nan, "df": np.nan,
                   "pvalue": np.nan}
            if len(big) >= 2:
                keep = np.isin(codes, big)
                res = kruskal_test(means[keep], codes[keep])  # NaN when every subject mean is the same
                if np.isfinite(res.statistic):
                    row.update(statistic=float(res.statistic), df=res.df, pvalue=float(res.pvalue))
            rows.append(row)
    out = pd.DataFrame(rows, columns=["metric", "intersection", "n_groups", "statistic", "df", "pvalue"])
    tested = out["pvalue"].notna().to_numpy()
    out["pvalue_adjusted"] = np.nan
    if tested.any():
        out.loc[tested, "pvalue_adjusted"] = adjust_pvalues(out.loc[tested, "pvalue"].to_numpy(float), settings.correction)
    out["significant"] = out["pvalue_adjusted"].to_numpy(float) < settings.alpha
    return out


def _heatmaps(inst: pd.DataFrame, kp: pd.DataFrame, attrs: list[Attribute], bins: int, source: str) -> pd.DataFrame:
    parts = []
    kinds = [(f"{c} centres", inst[inst["category"] == c][["image_id", "centre_x", "centre_y", "_row"]]
              .rename(columns={"centre_x": "x", "centre_y": "y"}))
             for c in sorted(inst["category"].unique())]
    if len(kp):
        kinds.append(("keypoints", kp))
    img_rows = inst.drop_duplicates("image_id").set_index("image_id")["_row"]
    for what, pts in kinds:
        pts = pts.dropna(subset=["x", "y"])
        if not len(pts):
            continue
        rows = pts["_row"].to_numpy() if "_row" in pts.columns else img_rows.reindex(pts["image_id"]).to_numpy()
        ok = pd.notna(rows)
        xy = pts[["x", "y"]].to_numpy(float)[ok]
        rows = rows[ok].astype(np.int64)
        sets = [("all", "all", np.ones(len(xy), bool))]
        for a in attrs:
            mem = a.membership(inst, source=source)
            lab = np.asarray(mem.categories, dtype=object)
            member = pd.DataFrame({"r": mem.rows, "g": mem.codes})
            for g in np.unique(mem.codes):
                in_g = np.zeros(len(inst), bool)
                in_g[member.loc[member["g"] == g, "r"].to_numpy()] = True
                sets.append((a.name, str(lab[g]), in_g[rows]))
        for attr, group, sel in sets:
            hist = histogram2d(xy[sel], bins=bins)
            total = hist.sum()
            if not total:
                continue
            r, c = np.nonzero(hist)
            parts.append(pd.DataFrame({"what": what, "attribute": attr, "group": group, "row": r, "col": c,
                                       "count": hist[r, c], "share": hist[r, c] / total}))
    cols = ["what", "attribute", "group", "row", "col", "count", "share"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def audit_visual(
    data: pd.DataFrame | None,
    coco: CocoDataset,
    attributes: Sequence[Attribute | str] = (),
    *,
    settings: AuditSettings | None = None,
    sample_id: str = "file_name",
    subject_col: str | None = SUBJECT_ID,
    max_k: int = 1,
    bins: int = 20,
    schema: Schema | None = None,
    source: str = "samples",
) -> VisualAudit:
    """Visual statistics of the annotations, by group and intersection (docs/METHODS.md §13.3).

    Parameters
    ----------
    data : pandas.DataFrame or None
        Sample table (``sample_id``, optionally ``subject_id``, the attribute columns); None for the overall
        statistics only.
    coco : fairvision.io.coco.CocoDataset
        Annotations (:func:`fairvision.io.coco.read_coco`, or
        :func:`fairvision.audits.curation.visual_models.coco_from_models`).
    attributes : sequence of Attribute or str
        Group attributes (columns of ``data``).
    settings : AuditSettings, optional
        Uses ``min_subjects``, ``correction``, ``alpha``, ``n_boot``, ``level`` and ``seed``, as
        :func:`fairvision.audits.model.audit_model`; ``correction`` also adjusts the Kruskal-Wallis tests (one
        family: all statistics and attribute sets) and, separately, the pairwise tests of all statistics and
        attribute sets as one family (:func:`fairvision.audits.curation.family.correct_across`; each table's own
        adjustment is kept as ``pvalue_adjusted_table``).
    sample_id : {"file_name", "image_id"}
        How a COCO image is matched to a ``sample_id`` (see :func:`fairvision.io.coco.image_sample_ids`).
    subject_col : str or None
        Subject column of ``data`` (bootstrap and test unit); every image its own subject when absent.
    max_k, schema
        As :func:`fairvision.audits.model.audit_model`.
    bins : int
        Cells per side of the heat maps.
    source : str
        Name of the sample table in error messages.

    Returns
    -------
    VisualAudit
    """
    settings = settings or DEFAULT_SETTINGS
    if bins < 2:
        raise ParameterError("bins", "must be at least 2")
    attrs = resolve_attributes(attributes, schema) if attributes else []
    if attrs and data is None:
        raise FairvisionError("group attributes need a sample table (data)")
    inst = instance_statistics(coco)
    inst, unmatched = _join_samples(inst, coco, data, sample_id, source)
    if not len(inst):
        raise FairvisionError(f"{coco.source}: no annotation belongs to an image of the sample table")
    inst["_row"] = np.arange(len(inst))
    subj_col = _subject_column(inst, data, subject_col, source)
    metrics, left_out = _statistic_columns(inst, coco)
    res = VisualAudit(statistics=metrics, attributes=[a.name for a in attrs], source=coco.source,
                      n_images=int(inst["image_id"].nunique()), n_instances=len(inst), n_unmatched_images=unmatched,
                      bins=int(bins), settings=settings,
                      overall=_overall(inst, metrics), left_out=left_out)
    kp = keypoint_points(coco)
    kp = kp[kp["image_id"].isin(inst["image_id"])]
    res.heatmaps = _heatmaps(inst, kp, attrs, int(bins), source)
    if attrs:
        _by_group(res, inst, attrs, subj_col, max_k, settings, source)
    res.instances = inst.drop(columns=["_row"] + (["_subject"] if "_subject" in inst.columns else []))
    return res


def _subject_column(inst: pd.DataFrame, data: pd.DataFrame | None, subject_col: str | None, source: str) -> str:
    """The subject column of the annotations: ``subject_col``, else ``_subject`` (every image its own subject)."""
    if subject_col is not None and subject_col in inst.columns:
        return subject_col
    if subject_col not in (None, SUBJECT_ID) and data is not None:
        require_columns(inst, [subject_col], source=source, what="subject column")
    inst["_subject"] = inst[SAMPLE_ID].astype(str)
    return "_subject"


def _statistic_columns(inst: pd.DataFrame, coco: CocoDataset) -> tuple[list[str], dict[str, str]]:
    """Add one column per category and statistic ("person.box_area_ratio", "face.centre_distance", ...) and
    return those tested, with those left out and why."""
    metrics = []
    for cat in sorted(inst["category"].unique()):
        is_c = (inst["category"] == cat).to_numpy()
        for s in STATISTICS:
            v = np.where(is_c, inst[s].to_numpy(float), np.nan)
            if np.isfinite(v).any():
                name = f"{cat}.{s}"
                inst[name] = v
                metrics.append(name)
    if not metrics:
        raise FairvisionError(f"{coco.source}: the annotations have no boxes, masks or keypoints")
    # a statistic with one value for every annotation (an annotation tool that draws square face boxes, say)
    # describes the tool, not the images: left out of the tests, with a note
    left_out = {}
    for m in metrics:
        v = inst[m].to_numpy(float)
        v = v[np.isfinite(v)]
        # within 0.1 %: square boxes come back as 1 +- 1e-4 after the conversion to pixels
        if v.size and np.ptp(v) <= CONSTANT_TOLERANCE * max(1.0, float(np.abs(v).max())):
            left_out[m] = f"always {float(np.median(v)):.4g}"
    if left_out and len(left_out) < len(metrics):
        return [m for m in metrics if m not in left_out], left_out
    return metrics, {}  # every statistic left out: keep them, there is nothing else to show


def _overall(inst: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per statistic over every annotation: n, median, quartiles, mean."""
    return pd.DataFrame({
        "n": [int(np.isfinite(inst[m]).sum()) for m in metrics],
        "median": [float(np.nanmedian(inst[m])) for m in metrics],
        "q25": [float(np.nanquantile(inst[m], 0.25)) for m in metrics],
        "q75": [float(np.nanquantile(inst[m], 0.75)) for m in metrics],
        "mean": [float(np.nanmean(inst[m])) for m in metrics],
    }, index=pd.Index(metrics, name="statistic"))


def _by_group(res: VisualAudit, inst: pd.DataFrame, attrs: list[Attribute], subj_col: str, max_k: int,
              settings: AuditSettings, source: str) -> None:
    """The group tables, pairwise and omnibus tests of ``res`` (the model audit on the annotations, with
    quartiles and image counts added, then one correction across the audit)."""
    metrics = res.statistics
    model = audit_model(inst, metrics, attrs, settings=settings, subject_col=subj_col, max_k=max_k, source=source)
    res.model = model
    res.pairwise = model.pairwise
    inters = intersections(inst, attrs, max(1, int(max_k)), source=source)
    subjects = subject_codes(inst, subj_col, source=source)
    for m in metrics:
        x = inst[m].to_numpy(float)
        for inter in inters:
            res.groups[(m, inter.name)] = _group_table(model.groups[(m, inter.name)], x, inst, inter)
    res.omnibus = _omnibus(inst, metrics, inters, subjects, settings)
    # pairwise tests: one family across every statistic and attribute set, like the omnibus tests, so a pair
    # is significant only if it survives the audit-wide correction (not only its own table's)
    correct_across([model], settings.correction, settings.alpha)


def _group_table(table: pd.DataFrame, x: np.ndarray, inst: pd.DataFrame, inter) -> pd.DataFrame:
    """A model-audit group table of one statistic and attribute set with quartiles, IQR and image counts."""
    table = table.copy()
    v = x[inter.rows]
    ok = np.isfinite(v)
    q = (pd.DataFrame({"g": inter.codes[ok], "v": v[ok]}).groupby("g")["v"]
         .quantile([0.25, 0.75]).unstack().reindex(range(inter.n_cells)))
    table.insert(4, "q25", q[0.25].to_numpy() if 0.25 in q else np.nan)
    table.insert(5, "q75", q[0.75].to_numpy() if 0.75 in q else np.nan)
    table.insert(6, "iqr", table["q75"] - table["q25"])
    # the model audit counts rows: here a row is an annotation; images counted apart
    table = table.rename(columns={"n_samples": "n_annotations"})
    img = pd.Series(inst["image_id"].to_numpy()[inter.rows][ok])
    n_img = img.groupby(inter.codes[ok]).nunique().reindex(range(inter.n_cells), fill_value=0)
    table.insert(list(table.columns).index("n_annotations") + 1, "n_images", n_img.to_numpy(int))
    return table

"""Visual statistics by group (FHIBE Fig. 5; docs/METHODS.md §13.3).

Are some groups photographed differently: smaller in the frame, off-centre, more occluded? Per annotation
(person and face boxes, person masks, keypoints) the statistics of :mod:`fairvision.metrics.shape`; per group
their median and IQR, the mean with a subject-bootstrap CI and pairwise Mann-Whitney tests (the model audit's
machinery, :func:`fairvision.audits.model.audit_model`, on subject means), a Kruskal-Wallis omnibus test per
statistic and attribute set, and 2-D histograms (heat maps) of box centres and keypoints per group.

Annotations come from a COCO file, or, when a dataset has none, from the built-in models: mediapipe face
detection (face boxes), selfie segmentation (person mask and its box) and Pose (33 keypoints). The models'
output of every image is kept in the results store (stage ``visual_models``: face boxes, the mask as compressed
COCO RLE, the keypoints) under the image's SHA-256 and a hash of the model parameters, the mediapipe version
and the code, so a second run annotates nothing.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.gates import quantity_key
from fairvision.audits.curation.family import correct_across
from fairvision.audits.model import ModelAuditResult, audit_model
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import ColumnError, FairvisionError
from fairvision.groups import intersections, resolve_attributes, subject_codes
from fairvision.io.coco import CocoDataset, image_sample_ids
from fairvision.io.images import read_image
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.metrics.masks import rle_encode, segmentation_to_mask
from fairvision.metrics.shape import (box_area_ratio, box_aspect_ratio, box_centres, centre_distance, histogram2d,
                                      keypoint_spread, mask_area_ratio, mask_concavity, visible_fraction)
from fairvision.schema import Attribute, Schema
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
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
#: category names used for the built-in models' annotations
FACE, PERSON = "face", "person"
#: parameters of the built-in models (:func:`measure_image`); part of the results-store key
MODEL_PARAMS = {"face_min_confidence": 0.3, "face_models": [0, 1], "selfie_threshold": 0.5,
                "selfie_model_selection": 0, "pose_model_complexity": 1}
#: results-store stage of the built-in models' annotations
STAGE = "visual_models"
#: bump when a change here changes stored annotations
CACHE_VERSION = 1
#: source files that shape a stored annotation
SIGNATURE_SOURCES = ("io/images.py", "vision/detect.py", "vision/person_mask.py", "vision/pose.py",
                     "metrics/masks.py", "audits/curation/visual.py")


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


# -- built-in models ----------------------------------------------------------------------------------------------

def measure_image(path: str, params: dict | None = None) -> dict:
    """Face boxes, person mask and body keypoints of one image from the built-in models.

    Parameters
    ----------
    path : str
        Image file.
    params : dict, optional
        Model parameters (default :data:`MODEL_PARAMS`; missing keys take their default).

    Returns
    -------
    dict
        ``width``, ``height``, ``faces`` (list of ``[x, y, w, h]``), ``mask`` (compressed COCO RLE of the
        selfie-segmentation person mask, or None when empty) and ``keypoints`` (flat ``x, y, v`` list of
        mediapipe Pose's 33 landmarks, or None).
    """
    # lazy: the model wrappers import mediapipe, needed only on this path
    from fairvision.vision.detect import detect_faces
    from fairvision.vision.person_mask import selfie_mask
    from fairvision.vision.pose import detect_pose

    p = {**MODEL_PARAMS, **(params or {})}
    img = read_image(path)
    h, w = img.shape[:2]
    faces = [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]
             for b, _ in detect_faces(img, min_confidence=float(p["face_min_confidence"]),
                                      models=tuple(int(m) for m in p["face_models"]))]
    mask = selfie_mask(img, threshold=float(p["selfie_threshold"]), model_selection=int(p["selfie_model_selection"]))
    kp = detect_pose(img, model_complexity=int(p["pose_model_complexity"]))
    return {"width": int(w), "height": int(h), "faces": faces,
            "mask": rle_encode(mask) if mask.any() else None,
            "keypoints": None if kp is None else kp.ravel().tolist()}


def _mask_box(rle: dict) -> list[float]:
    from fairvision.metrics.masks import rle_decode

    m = rle_decode(rle)
    rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
    return [float(cols[0]), float(rows[0]), float(cols[-1] + 1 - cols[0]), float(rows[-1] + 1 - rows[0])]


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source that shapes a stored annotation of the built-in models."""
    return source_signature(SIGNATURE_SOURCES)


def models_params_hash(params: dict | None = None) -> str:
    """The results-store ``params_hash`` of the built-in models' annotations: their parameters, the mediapipe
    version, the package version and the code (:func:`code_signature`)."""
    try:
        mp_version = importlib.metadata.version("mediapipe")
    except importlib.metadata.PackageNotFoundError:
        mp_version = None
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "mediapipe": mp_version,
                        "params": {**MODEL_PARAMS, **(params or {})}})


def coco_from_models(data: pd.DataFrame, *, image_col: str = IMAGE_PATH, workers: int = 1,
                     progress: Callable | None = None, source: str = "samples", store: ResultsStore | None = None,
                     params: dict | None = None,
                     subject_col: str | None = SUBJECT_ID) -> tuple[CocoDataset, pd.DataFrame]:
    """Annotate images with the built-in models and return them as a COCO dataset (docs/METHODS.md §13.3).

    Every row of ``data`` is one image (``image_id`` = its row position, ``file_name`` = its ``sample_id``).
    Annotations: category ``face`` (one box per detected face), category ``person`` (the box of the selfie
    segmentation mask, the mask, and Pose keypoints when found).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table with ``sample_id`` and an image path column.
    image_col : str
        Column of the image paths.
    workers : int
        Worker processes (one model set per worker, :func:`fairvision.engine.imap`).
    progress : callable, optional
        ``progress(done, total)`` after each image (images found in the store count at once).
    source : str
        Name of the table in error messages.
    store : ResultsStore, optional
        Results store: images annotated before (same bytes, parameters, mediapipe version and code) are read
        from stage ``visual_models``, new annotations are appended. None: no store.
    params : dict, optional
        Model parameters overriding :data:`MODEL_PARAMS`.
    subject_col : str, optional
        Subject column of ``data``, recorded with the stored rows (``fairvision store forget --subject``).

    Returns
    -------
    (CocoDataset, pandas.DataFrame)
        The dataset, and the failures (``sample_id``, ``error``) of images that could not be read.
        ``CocoDataset.images`` has a ``from_cache`` column (True: read from the store).
    """
    if image_col not in data.columns:
        raise ColumnError(f"{source}: no image path column {image_col!r}; give annotations (--coco) or image paths")
    unknown = set(params or {}) - set(MODEL_PARAMS)
    if unknown:
        raise FairvisionError(f"unknown model parameter {sorted(unknown)[0]!r}; they are {', '.join(MODEL_PARAMS)}")
    paths = [str(p) for p in data[image_col]]
    ids = data[SAMPLE_ID].astype(str).tolist() if SAMPLE_ID in data.columns else [os.path.splitext(os.path.basename(p))[0] for p in paths]
    n = len(paths)
    subjects = (data[subject_col].tolist() if subject_col is not None and subject_col in data.columns
                else [None] * n)
    results: list[dict | None] = [None] * n
    cached = np.zeros(n, bool)
    errors: dict[int, str] = {}
    phash = keys = contents = None
    if store is not None:
        phash = models_params_hash(params)
        contents = [file_sha256(p) for p in paths]
        keys = [row_key(c, phash) if c else None for c in contents]
        hits = store.get_many(STAGE, (k for k in keys if k))
        for i, k in enumerate(keys):
            hit = hits.get(k) if k else None
            if hit is None:
                continue
            known = hit.pop("_subjects", set())
            subj = None if subjects[i] is None or pd.isna(subjects[i]) else str(subjects[i])
            if subj is not None and subj not in known:  # attribute it, for forget --subject
                store.put(STAGE, k, hit, content_hash=contents[i], params_hash=phash, sample_id=ids[i],
                          subject_id=subj, image_path=paths[i])
            results[i] = hit
            cached[i] = True
    todo = np.flatnonzero(~cached)
    finished = [n - len(todo)]
    if progress is not None and finished[0]:
        progress(finished[0], n)

    def tick(_outcome) -> None:
        finished[0] += 1
        if progress is not None:
            progress(finished[0], n)

    fn = functools.partial(measure_image, params=params) if params else measure_image
    try:
        for out in imap(fn, [paths[i] for i in todo], workers=workers, progress=tick):
            i = int(todo[out.index])
            if not out.ok:
                errors[i] = str(out.failure)
                continue
            results[i] = out.value
            if store is not None and keys[i]:
                store.put(STAGE, keys[i], out.value, content_hash=contents[i], params_hash=phash, sample_id=ids[i],
                          subject_id=subjects[i], image_path=paths[i])
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    images, anns, failed = [], [], []
    for i in range(n):
        r = results[i]
        if r is None:
            failed.append({SAMPLE_ID: ids[i], "error": errors.get(i, "not annotated")})
            continue
        images.append({"image_id": i, "file_name": ids[i], "width": r["width"], "height": r["height"],
                       "from_cache": bool(cached[i])})
        for box in r["faces"]:
            anns.append({"image_id": i, "category_id": 2, "bbox": box, "segmentation": None, "keypoints": None})
        if r["mask"] is not None or r["keypoints"] is not None:
            anns.append({"image_id": i, "category_id": 1, "bbox": _mask_box(r["mask"]) if r["mask"] is not None else None,
                         "segmentation": r["mask"], "keypoints": r["keypoints"]})
    for k, a in enumerate(anns):
        a["id"] = k + 1
    cols = ["id", "image_id", "category_id", "bbox", "segmentation", "keypoints"]
    gt = CocoDataset(pd.DataFrame(images, columns=["image_id", "file_name", "width", "height", "from_cache"]),
                     pd.DataFrame(anns, columns=cols),
                     pd.DataFrame({"category_id": [1, 2], "name": [PERSON, FACE], "keypoints": [None, None],
                                   "skeleton": [None, None]}), source=f"{source}{BUILT_IN_SOURCE}")
    return gt, pd.DataFrame(failed, columns=[SAMPLE_ID, "error"])


#: the end of the ``source`` of a dataset annotated by :func:`coco_from_models`
BUILT_IN_SOURCE = " (built-in models)"
#: a statistic whose values span at most this share of their largest magnitude (at least 1) is constant
CONSTANT_TOLERANCE = 1e-3


# -- the audit ----------------------------------------------------------------------------------------------------

@dataclass
class VisualAudit:
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
    correction: str
    alpha: float
    instances: pd.DataFrame = field(default_factory=pd.DataFrame)
    overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: dict = field(default_factory=dict)
    pairwise: dict = field(default_factory=dict)
    omnibus: pd.DataFrame = field(default_factory=pd.DataFrame)
    heatmaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    model: ModelAuditResult | None = None
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: statistics left out of the tables and tests (name -> why): the built-in detector's face aspect ratio, and
    #: any statistic with one value for every annotation
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
    if SAMPLE_ID not in samples.columns:
        raise ColumnError(f"{source}: no {SAMPLE_ID!r} column to join the annotations on")
    s = samples.drop_duplicates(SAMPLE_ID).set_index(samples[SAMPLE_ID].drop_duplicates().astype(str))
    known = inst[SAMPLE_ID].isin(s.index).to_numpy()
    unmatched = int(pd.Series(inst.loc[~known, "image_id"]).nunique())
    inst = inst[known].reset_index(drop=True)
    extra = s.drop(columns=[SAMPLE_ID]).reindex(inst[SAMPLE_ID]).reset_index(drop=True)
    extra = extra.drop(columns=[c for c in extra.columns if c in inst.columns])
    return pd.concat([inst, extra], axis=1), unmatched


def _omnibus(data: pd.DataFrame, metrics: Sequence[str], inters, subjects: np.ndarray, min_subjects: int,
             correction: str, alpha: float) -> pd.DataFrame:
    """Kruskal-Wallis test of every statistic and attribute set, on subject means of the groups large enough."""
    rows = []
    for m in metrics:
        x_all = data[m].to_numpy(float)
        for inter in inters:
            means, codes, subj = cluster_means(x_all[inter.rows], inter.codes, subjects[inter.rows])
            n_subj = np.bincount(codes, minlength=inter.n_cells)
            big = np.flatnonzero(n_subj >= min_subjects)
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
        out.loc[tested, "pvalue_adjusted"] = adjust_pvalues(out.loc[tested, "pvalue"].to_numpy(float), correction)
    out["significant"] = out["pvalue_adjusted"].to_numpy(float) < alpha
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
    sample_id: str = "file_name",
    subject_col: str | None = SUBJECT_ID,
    max_k: int = 1,
    min_subjects: int = 10,
    correction: str = DEFAULT_CORRECTION,
    alpha: float = 0.05,
    n_boot: int = 1000,
    level: float = 0.95,
    bins: int = 20,
    seed: np.random.Generator | int | None = 0,
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
        Annotations (:func:`fairvision.io.coco.read_coco`, or :func:`coco_from_models`).
    attributes : sequence of Attribute or str
        Group attributes (columns of ``data``).
    sample_id : {"file_name", "image_id"}
        How a COCO image is matched to a ``sample_id`` (see :func:`fairvision.io.coco.image_sample_ids`).
    subject_col : str or None
        Subject column of ``data`` (bootstrap and test unit); every image its own subject when absent.
    max_k, min_subjects, correction, alpha, n_boot, level, seed, schema
        As :func:`fairvision.audits.model.audit_model`; ``correction`` also adjusts the Kruskal-Wallis tests
        (one family: all statistics and attribute sets) and, separately, the pairwise tests of all statistics
        and attribute sets as one family (:func:`fairvision.audits.curation.family.correct_across`; each table's
        own adjustment is kept as ``pvalue_adjusted_table``).
    bins : int
        Cells per side of the heat maps.
    source : str
        Name of the sample table in error messages.

    Returns
    -------
    VisualAudit
    """
    if bins < 2:
        raise FairvisionError("--bins must be at least 2")
    attrs = resolve_attributes(attributes, schema) if attributes else []
    if attrs and data is None:
        raise FairvisionError("group attributes need a sample table (--samples)")
    inst = instance_statistics(coco)
    inst, unmatched = _join_samples(inst, coco, data, sample_id, source)
    if not len(inst):
        raise FairvisionError(f"{coco.source}: no annotation belongs to an image of the sample table")
    inst["_row"] = np.arange(len(inst))
    if subject_col is not None and subject_col in inst.columns:
        subj_col = subject_col
    else:
        if subject_col not in (None, SUBJECT_ID) and data is not None:
            raise ColumnError(f"{source}: no subject column {subject_col!r}")
        inst["_subject"] = inst[SAMPLE_ID].astype(str)
        subj_col = "_subject"
    # one column per category and statistic: "person.box_area_ratio", "face.centre_distance", ...
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
    # a statistic with one value for every annotation (the built-in face detector's square boxes: face
    # aspect ratio 1) describes the annotation tool, not the images: left out of the tests, with a note
    left_out = {}
    built_in = str(coco.source).endswith(BUILT_IN_SOURCE)
    for m in metrics:
        v = inst[m].to_numpy(float)
        v = v[np.isfinite(v)]
        if built_in and m == f"{FACE}.aspect_ratio":
            left_out[m] = ("the built-in face detector's boxes are square: the aspect ratio is 1 but for faces "
                           "cut by the image border")
        # within 0.1 %: square boxes come back as 1 +- 1e-4 after the conversion to pixels
        elif v.size and np.ptp(v) <= CONSTANT_TOLERANCE * max(1.0, float(np.abs(v).max())):
            left_out[m] = f"always {float(np.median(v)):.4g}"
    if left_out and len(left_out) < len(metrics):
        metrics = [m for m in metrics if m not in left_out]
    else:
        left_out = {}  # every statistic left out: keep them, there is nothing else to show
    overall = pd.DataFrame({
        "n": [int(np.isfinite(inst[m]).sum()) for m in metrics],
        "median": [float(np.nanmedian(inst[m])) for m in metrics],
        "q25": [float(np.nanquantile(inst[m], 0.25)) for m in metrics],
        "q75": [float(np.nanquantile(inst[m], 0.75)) for m in metrics],
        "mean": [float(np.nanmean(inst[m])) for m in metrics],
    }, index=pd.Index(metrics, name="statistic"))
    res = VisualAudit(statistics=metrics, attributes=[a.name for a in attrs], source=coco.source,
                      n_images=int(inst["image_id"].nunique()), n_instances=len(inst), n_unmatched_images=unmatched,
                      bins=int(bins), correction=correction, alpha=alpha, overall=overall, left_out=left_out)
    kp = keypoint_points(coco)
    kp = kp[kp["image_id"].isin(inst["image_id"])]
    res.heatmaps = _heatmaps(inst, kp, attrs, int(bins), source)
    if attrs:
        model = audit_model(inst, metrics, attrs, subject_col=subj_col, max_k=max_k, min_subjects=min_subjects,
                            correction=correction, alpha=alpha, n_boot=n_boot, level=level, seed=seed,
                            source=source)
        res.model = model
        res.pairwise = model.pairwise
        inters = intersections(inst, attrs, max(1, int(max_k)), source=source)
        subjects = subject_codes(inst, subj_col, source=source)
        for m in metrics:
            x = inst[m].to_numpy(float)
            for inter in inters:
                table = model.groups[(m, inter.name)].copy()
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
                res.groups[(m, inter.name)] = table
        res.omnibus = _omnibus(inst, metrics, inters, subjects, min_subjects, correction, alpha)
        # pairwise tests: one family across every statistic and attribute set, like the omnibus tests, so a pair
        # is significant only if it survives the audit-wide correction (not only its own table's)
        correct_across([model], correction, alpha)
    res.instances = inst.drop(columns=["_row"] + (["_subject"] if "_subject" in inst.columns else []))
    return res

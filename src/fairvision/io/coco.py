"""Read COCO-style JSON: ground truth (images, annotations, categories) and results lists.

Annotations may carry ``bbox`` ([x, y, width, height]), ``keypoints``
([x1, y1, v1, ...]) and ``segmentation`` as polygons (list of coordinate
lists) or RLE (``{"size": [h, w], "counts": list or string}``). Predictions
are a COCO *results* list: one object per detection with ``image_id``,
``category_id``, ``score`` and one of ``bbox`` / ``segmentation`` /
``keypoints``. Malformed input raises :class:`~fairvision.errors.InputFileError`
with one line naming the file and the record.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import InputFileError


@dataclass
class CocoDataset:
    """COCO ground truth as tables."""

    images: pd.DataFrame
    annotations: pd.DataFrame
    categories: pd.DataFrame
    source: str = "coco"

    def sample_ids(self) -> pd.Series:
        """``sample_id`` of every image: the file name without folder and suffix (else the image id)."""
        if "file_name" in self.images.columns:
            return self.images["file_name"].map(lambda f: Path(str(f)).stem if f is not None else None)
        return self.images["image_id"].astype(str)


def _load(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not UTF-8 text") from None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def _check_record(rec: dict, where: str, *, need_score: bool = False) -> dict:
    if not isinstance(rec, dict):
        raise InputFileError(f"{where}: expected an object")
    if "image_id" not in rec:
        raise InputFileError(f"{where}: missing 'image_id'")
    out = {"image_id": rec["image_id"], "category_id": rec.get("category_id", 1)}
    if need_score:
        if "score" not in rec or not _is_num(rec["score"]):
            raise InputFileError(f"{where}: missing or non-numeric 'score'")
        out["score"] = float(rec["score"])
    bbox = rec.get("bbox")
    if bbox is not None:
        if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4 and all(_is_num(v) for v in bbox)):
            raise InputFileError(f"{where}: 'bbox' must be 4 numbers [x, y, width, height]")
        if bbox[2] < 0 or bbox[3] < 0:
            raise InputFileError(f"{where}: 'bbox' has a negative width or height")
    out["bbox"] = None if bbox is None else [float(v) for v in bbox]
    kp = rec.get("keypoints")
    if kp is not None:
        if not (isinstance(kp, (list, tuple)) and len(kp) % 3 == 0 and len(kp) > 0 and all(_is_num(v) for v in kp)):
            raise InputFileError(f"{where}: 'keypoints' must be a list of x, y, v triples")
    out["keypoints"] = None if kp is None else [float(v) for v in kp]
    seg = rec.get("segmentation")
    if seg is not None and seg != []:
        if isinstance(seg, dict):
            size, counts = seg.get("size"), seg.get("counts")
            if not (isinstance(size, (list, tuple)) and len(size) == 2 and all(isinstance(v, int) and v >= 0 for v in size)):
                raise InputFileError(f"{where}: RLE 'segmentation' needs 'size': [height, width]")
            if not (isinstance(counts, str) or (isinstance(counts, list) and all(isinstance(c, int) and c >= 0 for c in counts))):
                raise InputFileError(f"{where}: RLE 'counts' must be a string or a list of non-negative integers")
        elif isinstance(seg, list):
            for k, poly in enumerate(seg):
                if not (isinstance(poly, list) and len(poly) >= 6 and len(poly) % 2 == 0 and all(_is_num(v) for v in poly)):
                    raise InputFileError(f"{where}: polygon {k} of 'segmentation' must be at least 3 x, y pairs")
        else:
            raise InputFileError(f"{where}: 'segmentation' must be polygons or an RLE object")
    out["segmentation"] = seg if seg not in (None, []) else None
    for k in ("id", "area", "iscrowd", "num_keypoints"):
        if k in rec:
            out[k] = rec[k]
    return out


_ANN_COLS = ["id", "image_id", "category_id", "bbox", "segmentation", "keypoints", "area", "iscrowd", "num_keypoints"]


def read_coco(path: str | os.PathLike, *, extra_keys: Sequence[str] = ()) -> CocoDataset:
    """Read COCO ground truth: ``{"images": [...], "annotations": [...], "categories": [...]}``.

    Checks: image ids unique; every annotation's ``image_id`` is a known image
    and its ``category_id`` a known category (when categories are listed);
    boxes, keypoints and segmentations well formed.

    Parameters
    ----------
    path : path-like
    extra_keys : sequence of str
        Annotation fields beyond COCO's own to keep as extra columns of
        ``annotations`` (e.g. an annotator id); ``None`` where a record lacks one.
    """
    data = _load(path)
    src = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(data.get("annotations"), list):
        raise InputFileError(f"{src}: expected a COCO object with 'images' and 'annotations' lists")
    imgs = []
    seen: set = set()
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "id" not in im:
            raise InputFileError(f"{src}: images[{i}]: missing 'id'")
        if im["id"] in seen:
            raise InputFileError(f"{src}: images[{i}]: duplicate image id {im['id']!r}")
        seen.add(im["id"])
        for k in ("width", "height"):
            if k in im and not (isinstance(im[k], int) and im[k] > 0):
                raise InputFileError(f"{src}: images[{i}] (id {im['id']!r}): '{k}' must be a positive integer")
        imgs.append({"image_id": im["id"], "file_name": im.get("file_name"), "width": im.get("width"), "height": im.get("height")})
    cats = data.get("categories") or []
    if not isinstance(cats, list):
        raise InputFileError(f"{src}: 'categories' must be a list")
    cat_rows = []
    for i, c in enumerate(cats):
        if not isinstance(c, dict) or "id" not in c:
            raise InputFileError(f"{src}: categories[{i}]: missing 'id'")
        cat_rows.append({"category_id": c["id"], "name": c.get("name"), "keypoints": c.get("keypoints"),
                         "skeleton": c.get("skeleton")})
    cat_ids = {c["category_id"] for c in cat_rows}
    anns = []
    for i, a in enumerate(data["annotations"]):
        where = f"{src}: annotations[{i}]" + (f" (id {a.get('id')!r})" if isinstance(a, dict) and "id" in a else "")
        rec = _check_record(a, where)
        for k in extra_keys:
            rec[k] = a.get(k)
        if rec["image_id"] not in seen:
            raise InputFileError(f"{where}: image_id {rec['image_id']!r} is not in 'images'")
        if cat_ids and rec["category_id"] not in cat_ids:
            raise InputFileError(f"{where}: category_id {rec['category_id']!r} is not in 'categories'")
        anns.append(rec)
    cols = _ANN_COLS + [k for k in extra_keys if k not in _ANN_COLS]
    ann_df = pd.DataFrame.from_records(anns, columns=cols) if anns else pd.DataFrame(columns=cols)
    return CocoDataset(pd.DataFrame(imgs, columns=["image_id", "file_name", "width", "height"]), ann_df,
                       pd.DataFrame(cat_rows, columns=["category_id", "name", "keypoints", "skeleton"]), src)


def read_coco_results(path: str | os.PathLike, gt: CocoDataset | None = None) -> pd.DataFrame:
    """Read a COCO results list (predictions): one row per detection.

    Accepts a JSON list, or an object with an ``annotations`` list. With
    ``gt`` given, every ``image_id`` must be one of its images.
    """
    data = _load(path)
    src = str(path)
    if isinstance(data, dict) and isinstance(data.get("annotations"), list):
        data = data["annotations"]
    if not isinstance(data, list):
        raise InputFileError(f"{src}: expected a COCO results list of detections")
    known = set(gt.images["image_id"]) if gt is not None else None
    rows = []
    for i, r in enumerate(data):
        where = f"{src}: results[{i}]"
        rec = _check_record(r, where, need_score=True)
        if known is not None and rec["image_id"] not in known:
            raise InputFileError(f"{where}: image_id {rec['image_id']!r} is not in the ground truth")
        rows.append(rec)
    cols = ["image_id", "category_id", "score", "bbox", "segmentation", "keypoints"]
    return pd.DataFrame.from_records(rows, columns=cols) if rows else pd.DataFrame(columns=cols)


#: How a COCO image is named in a scores table: the file name's stem, or the image id.
SAMPLE_ID_SOURCES = ("file_name", "image_id")


def image_sample_ids(gt: CocoDataset, key: str = "file_name") -> pd.Series:
    """``sample_id`` of every ground-truth image, checked to be present and unique.

    Parameters
    ----------
    gt : CocoDataset
        Ground truth from :func:`read_coco`.
    key : {"file_name", "image_id"}
        ``"file_name"``: the image's ``file_name`` without folder and suffix
        (``"imgs/0001.jpg"`` -> ``"0001"``); ``"image_id"``: the COCO image id
        as a string.

    Returns
    -------
    pandas.Series of str
        Aligned with ``gt.images``.

    Raises
    ------
    InputFileError
        An image without ``file_name``, or two images with the same sample id.
    """
    if key not in SAMPLE_ID_SOURCES:
        raise InputFileError(f"sample id source must be one of {', '.join(SAMPLE_ID_SOURCES)}, not {key!r}")
    if key == "image_id":
        ids = gt.images["image_id"].astype(str)
    else:
        names = gt.images["file_name"]
        missing = names.isna().to_numpy()
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise InputFileError(f"{gt.source}: images[{i}] (id {gt.images['image_id'].iloc[i]!r}): no 'file_name' "
                                 "to take the sample id from; use the image id instead")
        ids = names.map(lambda f: Path(str(f)).stem)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        first = int(np.flatnonzero((ids == ids.iloc[i]).to_numpy())[0])
        raise InputFileError(f"{gt.source}: images[{i}] and images[{first}] have the same sample id {ids.iloc[i]!r} "
                             f"(from {key}); use the other sample id source")
    return ids.reset_index(drop=True).astype(str)

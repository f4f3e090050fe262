"""Derived face sets over a table of images: cropped-only and cropped-and-aligned PNGs (docs/METHODS.md §13.6).

For every face of every image (boxes and landmarks from a table, or the built-in face models), the cropped-only
face goes to ``OUT/cropped/<sample_id>__<face>.png`` and the aligned face to ``OUT/aligned/...``; a manifest
table records the source box, the four landmarks, the crop rectangle and the alignment's affine matrix. Faces
whose eyes or mouth are missing or outside the image are left out of the aligned set, with the reason.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.engine import imap
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.atomic import atomic_output_dir
from fairvision.io.images import read_image, write_png
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.io.validate import require_columns
from fairvision.vision.face_crops import ALIGN_METHODS, align_face, crop_face, ffhq_quad, find_faces
from fairvision.vision.faces import mark_used

#: Landmark table columns (pixels of the original image; "left"/"right" by image side).
POINTS = ("left_eye", "right_eye", "left_mouth", "right_mouth")
POINT_COLUMNS = tuple(f"{p}_{a}" for p in POINTS for a in ("x", "y"))
BOX_COLUMNS = ("box_x0", "box_y0", "box_x1", "box_y1")
#: ``skipped`` of the one manifest row of an image in which no face was found
NO_FACE = "no face found"


@dataclass
class FaceSetsResult:
    """The manifest (one row per face) and the counts of the derived face sets."""

    manifest: pd.DataFrame
    failures: pd.DataFrame
    meta: dict = field(default_factory=dict)

    @property
    def no_face(self) -> list[str]:
        """Sample ids of the images in which no face was found (one manifest row each, ``skipped`` says so)."""
        m = self.manifest
        return m.loc[m["skipped"] == NO_FACE, SAMPLE_ID].astype(str).tolist() if len(m) else []

    def quantities(self) -> dict[str, float]:
        m = self.manifest
        n_none = len(self.no_face)
        return {"n_images": float(self.meta.get("n_images", 0)), "n_faces": float(len(m) - n_none),
                "n_no_face": float(n_none),
                "n_cropped": float(m["cropped_path"].notna().sum()) if len(m) else 0.0,
                "n_aligned": float(m["aligned_path"].notna().sum()) if len(m) else 0.0,
                "n_failed_images": float(len(self.failures))}


def _safe_name(sample_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(sample_id)).strip("._") or "sample"


def _finite(values) -> bool:
    v = np.asarray(values, dtype=np.float64)
    return bool(v.size) and bool(np.isfinite(v).all())


def given_faces(landmarks: pd.DataFrame) -> dict[str, list[dict]]:
    """Faces per sample id from a landmark table (docs/METHODS.md §13.6): ``sample_id``, optional ``face``,
    optional box columns ``box_x0..box_y1`` and point columns ``left_eye_x, left_eye_y, ..., right_mouth_y``."""
    require_columns(landmarks, [SAMPLE_ID], source="landmark table")
    has_box = all(c in landmarks.columns for c in BOX_COLUMNS)
    has_pts = [c for c in POINT_COLUMNS if c in landmarks.columns]
    if not has_box and len(has_pts) < 4:
        raise ColumnError("the landmark table needs box columns (" + ", ".join(BOX_COLUMNS) + ") or eye and mouth "
                          "columns (" + ", ".join(POINT_COLUMNS) + ")")
    out: dict[str, list[dict]] = {}
    for i, row in enumerate(landmarks.to_dict(orient="records")):
        face: dict = {"model": "given"}
        for p in POINTS:
            xy = [row.get(f"{p}_x"), row.get(f"{p}_y")]
            try:
                face[p] = np.array(xy, dtype=np.float64) if all(v is not None for v in xy) else None
            except (TypeError, ValueError):
                raise ColumnError(f"landmark table row {i + 1}: {p} is not a number") from None
        box = None
        if has_box:
            try:
                box = np.array([row[c] for c in BOX_COLUMNS], dtype=np.float64)
            except (TypeError, ValueError):
                raise ColumnError(f"landmark table row {i + 1}: the box is not numbers") from None
        face["box"] = box if box is not None and _finite(box) else None
        face["face"] = int(row["face"]) if "face" in row and row["face"] is not None and row["face"] == row["face"] else None
        out.setdefault(str(row[SAMPLE_ID]), []).append(face)
    return out


def _box_from_points(face: dict) -> np.ndarray | None:
    """A face box from the four points: FFHQ's square's centre, side half the square's (so a 2x crop spans it)."""
    if not all(face.get(p) is not None and _finite(face[p]) for p in POINTS):
        return None
    q = ffhq_quad(*(face[p] for p in POINTS))
    c = q.mean(axis=0)
    half = np.hypot(*(q[3] - q[0])) / 4
    return np.array([c[0] - half, c[1] - half, c[0] + half, c[1] + half])


def faces_of_image(item: tuple) -> list[dict]:
    """Worker: derive the face images of one image and write their PNGs (one manifest row per face)."""
    sample_id, path, faces, stage, size, scale, method = item
    img = read_image(path)
    h, w = img.shape[:2]
    if faces is None:
        faces = find_faces(img)
    name = _safe_name(sample_id)
    if not len(faces):  # a trace of every image: one row saying no face was found
        return [{SAMPLE_ID: sample_id, "face": None, "model": None, "image_width": w, "image_height": h,
                 "cropped_path": None, "aligned_path": None, "skipped": NO_FACE}]
    rows = []
    for k, f in enumerate(faces):
        idx = f.get("face") if f.get("face") is not None else k
        row: dict = {SAMPLE_ID: sample_id, "face": int(idx), "model": f.get("model"), "source": f.get("source"),
                     "image_width": w, "image_height": h, "cropped_path": None, "aligned_path": None, "skipped": None}
        for p in POINTS:
            v = f.get(p)
            row[f"{p}_x"], row[f"{p}_y"] = (float(v[0]), float(v[1])) if v is not None and _finite(v) else (np.nan, np.nan)
        box = f.get("box")
        if box is None or not _finite(box):
            box = _box_from_points(f)
        if box is not None:
            row.update(dict(zip(BOX_COLUMNS, (float(v) for v in box))))
            c = crop_face(img, box, scale)
            rel = f"cropped/{name}__{idx}.png"
            write_png(Path(stage) / rel, c.image)
            row.update({"cropped_path": rel, "crop_x0": c.region[0], "crop_y0": c.region[1], "crop_x1": c.region[2],
                        "crop_y1": c.region[3], "cropped_padded": c.padded})
        need = POINTS if method != "eyes" else POINTS[:2]
        pts = [f.get(p) for p in need]
        if any(v is None or not _finite(v) for v in pts):
            row["skipped"] = "eye or mouth landmarks missing" if method != "eyes" else "eye landmarks missing"
        elif any(not (0 <= v[0] <= w - 1 and 0 <= v[1] <= h - 1) for v in pts):
            row["skipped"] = "an eye or mouth landmark lies outside the image"
        else:
            try:
                a = align_face(img, *pts, size=size, method=method) if method != "eyes" else \
                    align_face(img, pts[0], pts[1], size=size, method=method)
            except FairvisionError as exc:
                row["skipped"] = str(exc)
            else:
                rel = f"aligned/{name}__{idx}.png"
                write_png(Path(stage) / rel, a.image)
                (lx, ly), (rx, ry) = a.transform(np.stack([f["left_eye"], f["right_eye"]]))
                row.update({"aligned_path": rel, "supersample": a.supersample, "aligned_padded": a.padded,
                            **{f"m{i}{j}": float(a.matrix[i, j]) for i in range(2) for j in range(3)},
                            "out_left_eye_x": lx, "out_left_eye_y": ly, "out_right_eye_x": rx, "out_right_eye_y": ry})
        if box is None and row["skipped"] is None:
            row["skipped"] = "no face box"
        rows.append(row)
    return rows


def derive_face_sets(
    data: pd.DataFrame,
    outdir: str | Path,
    *,
    landmarks: pd.DataFrame | None = None,
    size: int = 512,
    scale: float = 2.0,
    method: str = "eye-mouth",
    settings: AuditSettings | None = None,
    progress: Callable[[int, int], None] | None = None,
    source: str = "samples",
) -> FaceSetsResult:
    """Write the cropped-only and cropped-and-aligned face sets of a table of images (docs/METHODS.md §13.6).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id`` and ``image_path``.
    outdir : path-like
        Gets ``cropped/``, ``aligned/`` and ``manifest.csv``; written atomically (a staging folder moved into
        place when everything is done).
    landmarks : pandas.DataFrame, optional
        Boxes and/or points per face (:func:`given_faces`); images without a row use the face finder
        (:func:`fairvision.vision.faces.find_faces`: face mesh, then mediapipe detector + dlib, then dlib's HOG
        detector).
    size : int
        Side of the aligned images (512).
    scale : float
        Enlargement of the face box for the cropped-only set (2).
    method : {"eye-mouth", "ffhq", "eyes"}
        Alignment (:func:`fairvision.vision.face_crops.align_face`).
    settings : AuditSettings, optional
        Uses ``workers``, ``engine`` and ``address``: the per-image work runs on :func:`fairvision.engine.imap`.
    progress : callable, optional
        ``progress(done, total)`` after each image.
    source : str
        Name of the table in error messages.

    Returns
    -------
    FaceSetsResult
        ``manifest``: one row per face, and one row (``face`` empty, ``skipped`` = ``"no face found"``) per
        image in which no face was found (``sample_id``, ``face``, ``model``, ``source`` (the face finder's
        stage, empty for given landmarks), box, points, ``cropped_path``,
        crop rectangle, ``aligned_path`` (None when skipped), ``skipped`` (the reason), the affine matrix
        ``m00..m12`` and the eyes' output coordinates); ``failures``: images that could not be read.
    """
    settings = settings or DEFAULT_SETTINGS
    if method not in ALIGN_METHODS:
        raise ParameterError("method", f"must be one of {', '.join(ALIGN_METHODS)}, not {method!r}")
    if not scale > 0:
        raise ParameterError("scale", f"must be positive, got {scale}")
    if int(size) < 8:
        raise ParameterError("size", f"must be at least 8, got {size}")
    require_columns(data, (SAMPLE_ID, IMAGE_PATH), source=source)
    given = given_faces(landmarks) if landmarks is not None else {}
    if any(str(s) not in given for s in data[SAMPLE_ID]):
        mark_used()  # the workers find faces with the face finder: the report names it
    outdir = Path(outdir)
    with atomic_output_dir(outdir) as stage:
        (stage / "cropped").mkdir()
        (stage / "aligned").mkdir()
        items = [(str(s), str(p), given.get(str(s)), str(stage), int(size), float(scale), method)
                 for s, p in zip(data[SAMPLE_ID], data[IMAGE_PATH])]
        rows, fails = [], []
        total = len(items)
        for done, o in enumerate(imap(faces_of_image, items, workers=settings.workers, engine=settings.engine,
                                      address=settings.address, ordered=True), 1):
            if o.ok:
                rows.extend(o.value)
            else:
                fails.append({SAMPLE_ID: items[o.index][0], IMAGE_PATH: items[o.index][1], "error": str(o.failure)})
            if progress is not None:
                progress(done, total)
        manifest = pd.DataFrame(rows)
        if "face" in manifest.columns:  # 0, not 0.0, next to a no-face row's empty face
            manifest["face"] = pd.to_numeric(manifest["face"]).astype("Int64")
        if manifest.empty:
            manifest = pd.DataFrame(columns=[SAMPLE_ID, "face", "model", "cropped_path", "aligned_path", "skipped"])
        failures = pd.DataFrame(fails, columns=[SAMPLE_ID, IMAGE_PATH, "error"])
        buf = io.StringIO()
        manifest.to_csv(buf, index=False)
        (stage / "manifest.csv").write_text(buf.getvalue(), encoding="utf-8")
        if len(failures):
            failures.to_csv(stage / "failures.csv", index=False)
    meta = {"n_images": len(items), "size": int(size), "scale": float(scale), "method": method,
            "landmarks": "given" if landmarks is not None else "models"}
    return FaceSetsResult(manifest, failures, meta)

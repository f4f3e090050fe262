"""Skin masks: which pixels of an image are the face's skin.

Four sources (docs/METHODS.md §2.1):

``file``
    A supplied mask image: binary (0/1 or 0/255), or a label map in which one
    label id is skin (CelebAMask-HQ / FHIBE style, ``skin_label``); see
    :func:`load_mask`.
``mediapipe`` (default)
    The mediapipe face mesh: for every face, the face-oval polygon minus the
    convex hulls of the eyes, eyebrows and lips. Faces come from the face
    finder (:mod:`fairvision.vision.faces`): faces the mesh misses (its
    internal detector fails on profiles, occlusion, bowed heads) get a second
    chance, the mediapipe face detector's box with dlib's 68 landmarks, then
    dlib's HOG detector, and the BiasPainter polygon (``detector_fallback``).
``dlib``
    dlib's HOG detector and 68 landmarks: the face outline (jaw line and
    eyebrows) with eyes and mouth removed, as BiasPainter does.
``colour``
    A pixel colour rule (Chai and Ngan 1999: 133 <= Cr <= 173 and
    77 <= Cb <= 127 in YCrCb) over the whole image. It needs no face, but
    catches wood, sand and hair and is known to miss very dark and very light
    skin, so its result is marked ``trust="low"``.
``auto``
    ``mediapipe``, then ``dlib``, then ``colour``.

A mask that finds no face or too few pixels is a :class:`MaskResult` with
``mask=None`` and a ``reason``, never an exception. Polygons are rasterised
with ``cv2.fillPoly``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.masks import load_mask

MASK_METHODS = ("mediapipe", "dlib", "colour", "auto", "file")
FACE_SELECTIONS = ("all", "largest")
#: A mask with fewer skin pixels than this is "too few pixels to measure".
MIN_PIXELS = 200
#: Cr and Cb bounds of the Chai and Ngan (1999) skin rule.
YCRCB_SKIN = ((133, 173), (77, 127))
#: Hull margins, as a fraction of the face's width, cut around eyes/brows/lips.
FEATURE_MARGIN = 0.02


@dataclass
class MaskResult:
    """Outcome of a skin-mask step.

    Attributes
    ----------
    mask : ndarray of bool, (H, W), or None
        Skin pixels; None when there is no usable mask (see ``reason``).
    method : str
        The mask method that produced the result (for ``auto``, the one that worked).
    n_faces : int
        Faces found (0 for ``file`` and ``colour``).
    trust : str
        ``"high"`` for landmark polygons and supplied masks, ``"low"`` for the colour rule.
    reason : str or None
        Why there is no mask (``"no face found"``, ``"too few skin pixels (57 < 200)"``).
    boxes : list of ndarray
        ``[x0, y0, x1, y1]`` of each face used.
    polygons : list of ndarray
        Outer outline of each face, ``(n, 2)`` int32 pixels (for overlays).
    holes : list of ndarray
        Polygons cut out of the faces (eyes, brows, lips).
    sources : list of str
        Per face, what found it: ``"facemesh"``, ``"detector+dlib"`` or ``"dlib"``.
    """

    mask: np.ndarray | None
    method: str
    n_faces: int = 0
    trust: str = "high"
    reason: str | None = None
    boxes: list = field(default_factory=list)
    polygons: list = field(default_factory=list)
    holes: list = field(default_factory=list)
    sources: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when there is a mask to measure."""
        return self.mask is not None

    @property
    def n_pixels(self) -> int:
        """Number of skin pixels (0 without a mask)."""
        return 0 if self.mask is None else int(np.count_nonzero(self.mask))

    def to_dict(self) -> dict:
        """Scalar fields, for a results table."""
        return {
            "mask_method": self.method,
            "n_faces": int(self.n_faces),
            "trust": self.trust,
            "mask_pixels": self.n_pixels,
            "mask_reason": self.reason,
            "face_source": ",".join(self.sources) if self.sources else None,
        }


def _cv2():
    import cv2  # heavy; imported on first use

    return cv2


# --------------------------------------------------------------------------- rasterising


def _hull(points: np.ndarray, margin: float) -> np.ndarray:
    """Convex hull of ``points`` grown outward from its centroid by ``margin`` pixels."""
    cv2 = _cv2()
    hull = cv2.convexHull(np.asarray(points, dtype=np.float32)).reshape(-1, 2)
    if margin > 0:
        c = hull.mean(axis=0)
        d = hull - c
        norm = np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-6)
        hull = hull + d / norm * margin
    return np.round(hull).astype(np.int32)


def polygon_mask(shape: tuple[int, int], include, exclude=()) -> np.ndarray:
    """Boolean ``(H, W)`` mask: union of ``include`` polygons minus ``exclude`` polygons.

    Polygons are ``(n, 2)`` arrays of ``(x, y)`` pixel coordinates, filled with
    ``cv2.fillPoly`` (a pixel is inside when its centre is).
    """
    cv2 = _cv2()
    canvas = np.zeros(shape[:2], dtype=np.uint8)
    inc = [np.round(np.asarray(p)).astype(np.int32).reshape(-1, 1, 2) for p in include if len(p) >= 3]
    if inc:
        cv2.fillPoly(canvas, inc, 1)
    exc = [np.round(np.asarray(p)).astype(np.int32).reshape(-1, 1, 2) for p in exclude if len(p) >= 3]
    if exc:
        cv2.fillPoly(canvas, exc, 0)
    return canvas.astype(bool)


def _select(faces: list, selection: str) -> list:
    if selection == "largest" and len(faces) > 1:
        areas = [float((b[2] - b[0]) * (b[3] - b[1])) for b, *_ in faces]
        return [faces[int(np.argmax(areas))]]
    return faces


def _finish(shape, faces, method, *, min_pixels, trust="high", faces_sel="all") -> MaskResult:
    """Rasterise ``faces`` = [(box, outline, holes, source)] into a MaskResult."""
    if not faces:
        return MaskResult(None, method, 0, trust, "no face found")
    faces = _select(faces, faces_sel)
    outlines = [f[1] for f in faces]
    holes = [h for f in faces for h in f[2]]
    mask = polygon_mask(shape, outlines, holes)
    res = MaskResult(
        mask, method, len(faces), trust, None,
        boxes=[f[0] for f in faces], polygons=outlines, holes=holes, sources=[f[3] for f in faces],
    )
    n = res.n_pixels
    if n < min_pixels:
        res.mask = None
        res.reason = f"too few skin pixels ({n} < {min_pixels})"
    return res


def _outline_faces(found) -> list:
    """[(box, outline, holes, source)] of the face finder's faces (:mod:`fairvision.vision.faces`): the mesh's
    face oval minus eyes, eyebrows and lips; dlib's face outline minus eyes and mouth (BiasPainter)."""
    from fairvision.vision import dlib_landmarks as dl
    from fairvision.vision.facemesh import regions

    faces = []
    for f in found:
        pts = f.landmarks
        margin = FEATURE_MARGIN * float(f.box[2] - f.box[0])
        if len(pts) == 68:
            outline = pts[dl.FACE_OUTLINE]
            holes = [_hull(pts[dl.RIGHT_EYE], margin), _hull(pts[dl.LEFT_EYE], margin), _hull(pts[dl.MOUTH], margin)]
        else:
            reg = regions()
            outline = pts[reg["face_oval"]]
            holes = [_hull(pts[reg[k]], margin) for k in ("left_eye", "right_eye", "left_eyebrow", "right_eyebrow", "lips")]
        faces.append((f.box, np.round(outline).astype(np.int32), holes, f.source))
    return faces


# --------------------------------------------------------------------------- methods


def mediapipe_mask(
    image_rgb: np.ndarray,
    *,
    max_faces: int = 5,
    min_confidence: float = 0.5,
    detector_fallback: bool = True,
    faces: str = "all",
    min_pixels: int = MIN_PIXELS,
    mesh_missed: bool = False,
) -> MaskResult:
    """Face-mesh skin mask: face oval minus eyes, eyebrows and lips, for every face.

    Faces come from the face finder (:func:`fairvision.vision.faces.find_faces`, docs/METHODS.md §2.5). With
    ``detector_fallback`` an image where the mesh finds no face goes on to the finder's later stages: the
    mediapipe face detector's best box with dlib's 68 landmarks (``sources == ["detector+dlib"]``), then dlib's
    HOG detector (``"dlib"``); those faces get the BiasPainter polygon. ``mesh_missed=True`` says that the mesh
    already ran on this image with these settings and found no face (a second chance given later, in another
    process): the finder starts at its second stage, with the answer of a run from the first.
    """
    from fairvision.vision.faces import ORDER, find_faces

    stages = ORDER if detector_fallback else ORDER[:1]
    if mesh_missed:  # the mesh is deterministic: running it again would find nothing again
        stages = stages[1:]
    try:
        found = find_faces(image_rgb, max_faces=max_faces, min_confidence=min_confidence, stages=stages)
    except (FairvisionError, ImportError) as exc:  # dlib or its model missing, needed by a later stage
        return MaskResult(None, "mediapipe", 0, "high", f"no face found by the mesh; second chance unavailable: {exc}")
    return _finish(image_rgb.shape, _outline_faces(found), "mediapipe", min_pixels=min_pixels, faces_sel=faces)


def dlib_mask(
    image_rgb: np.ndarray, *, upsample: int = 1, max_faces: int = 5, faces: str = "all", min_pixels: int = MIN_PIXELS
) -> MaskResult:
    """BiasPainter's mask: dlib 68-landmark face outline with eyes and mouth removed (the face finder's
    ``dlib`` stage alone: HOG detector and 68 landmarks)."""
    from fairvision.vision.faces import find_faces

    found = find_faces(image_rgb, max_faces=max_faces, upsample=upsample, stages=("dlib",))
    return _finish(image_rgb.shape, _outline_faces(found), "dlib", min_pixels=min_pixels, faces_sel=faces)


def colour_mask(image_rgb: np.ndarray, *, min_pixels: int = MIN_PIXELS) -> MaskResult:
    """Chai and Ngan (1999) YCrCb skin rule over the whole image; ``trust="low"``.

    A pixel is skin when 133 <= Cr <= 173 and 77 <= Cb <= 127 (8-bit YCrCb
    as computed by OpenCV). A 3 x 3 morphological opening removes isolated pixels.
    """
    cv2 = _cv2()
    ycc = cv2.cvtColor(np.ascontiguousarray(image_rgb, dtype=np.uint8), cv2.COLOR_RGB2YCrCb)
    (cr0, cr1), (cb0, cb1) = YCRCB_SKIN
    raw = cv2.inRange(ycc, (0, cr0, cb0), (255, cr1, cb1))
    raw = cv2.morphologyEx(raw, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    res = MaskResult(raw.astype(bool), "colour", 0, "low", None)
    n = res.n_pixels
    if n < min_pixels:
        res.mask = None
        res.reason = f"too few skin-coloured pixels ({n} < {min_pixels})"
    return res


def file_mask(path, image_shape, *, skin_label: int | None = None, min_pixels: int = MIN_PIXELS) -> MaskResult:
    """A supplied mask file as a :class:`MaskResult` (``trust="high"``)."""
    mask = load_mask(path, skin_label=skin_label, shape=image_shape[:2])
    res = MaskResult(mask, "file", 0, "high", None)
    n = res.n_pixels
    if n < min_pixels:
        res.mask = None
        res.reason = "no skin pixels in the mask file" if n == 0 else f"too few skin pixels ({n} < {min_pixels})"
    return res


def skin_mask(image_rgb: np.ndarray, method: str = "mediapipe", **kw) -> MaskResult:
    """Skin mask of an RGB image by the named method.

    Parameters
    ----------
    image_rgb : ndarray, (H, W, 3) uint8
    method : {"mediapipe", "dlib", "colour", "auto", "file"}
        See the module docstring. ``"color"`` is accepted for ``"colour"``.
    **kw
        Passed to the method: ``min_pixels``; ``faces`` (``"all"`` or
        ``"largest"``) and ``max_faces`` for the landmark methods;
        ``detector_fallback``, ``min_confidence`` and ``mesh_missed`` for ``mediapipe``;
        ``upsample`` for ``dlib``; ``path`` (required) and ``skin_label`` for ``file``.

    Returns
    -------
    MaskResult
        Never raises for "no face" or "too few pixels"; those are results with a reason.
    """
    image_rgb = np.asarray(image_rgb)
    if image_rgb.ndim != 3 or image_rgb.shape[2] != 3 or image_rgb.dtype != np.uint8:
        raise FairvisionError(f"skin_mask expects an (H, W, 3) uint8 RGB image, got shape {image_rgb.shape} {image_rgb.dtype}")
    method = "colour" if method == "color" else method
    faces = kw.get("faces", "all")
    if faces not in FACE_SELECTIONS:
        raise FairvisionError(f"unknown face selection {faces!r}; use one of {', '.join(FACE_SELECTIONS)}")
    if method == "mediapipe":
        return mediapipe_mask(image_rgb, **kw)
    if method == "dlib":
        return dlib_mask(image_rgb, **kw)
    if method == "colour":
        return colour_mask(image_rgb, **{k: v for k, v in kw.items() if k == "min_pixels"})
    if method == "auto":
        mp_kw = {k: v for k, v in kw.items() if k in ("max_faces", "min_confidence", "detector_fallback", "faces", "min_pixels")}
        res = mediapipe_mask(image_rgb, **mp_kw)
        if res.ok:
            return res
        if (res.reason == "no face found" and mp_kw.get("detector_fallback", True)
                and int(kw.get("upsample", 1)) == 1):
            # the face finder's last stage was dlib's HOG detector at this upsampling: running it again finds nothing
            return colour_mask(image_rgb, **{k: v for k, v in kw.items() if k == "min_pixels"})
        dl_kw = {k: v for k, v in kw.items() if k in ("upsample", "max_faces", "faces", "min_pixels")}
        res = dlib_mask(image_rgb, **dl_kw)
        if res.ok:
            return res
        return colour_mask(image_rgb, **{k: v for k, v in kw.items() if k == "min_pixels"})
    if method == "file":
        if kw.get("path") is None:
            raise FairvisionError("mask method 'file' needs the mask's path")
        return file_mask(kw["path"], image_rgb.shape, skin_label=kw.get("skin_label"), min_pixels=kw.get("min_pixels", MIN_PIXELS))
    raise FairvisionError(f"unknown mask method {method!r}; use one of {', '.join(MASK_METHODS)}")

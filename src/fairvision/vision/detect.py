"""Face boxes from the mediapipe face detector (BlazeFace, legacy ``mp.solutions``).

Used as a second chance for faces the face mesh misses (the mesh's own
detector runs at a fixed confidence and fails on profiles, occlusions and
heads bowed down): the box is then handed to dlib's 68-landmark predictor.
Models are cached per process. :func:`plausible_face_box` (also used by the
other face finders) rejects boxes on content that is not a photograph: the
detector finds "faces" in pure pixel noise.
"""

from __future__ import annotations

import numpy as np

from fairvision.vision.model_cache import ModelCache, import_mediapipe

_MODELS = ModelCache(threads=True)  # (model, min_confidence) -> FaceDetection

#: A face box whose grey levels correlate less than this with their right and lower neighbours is not a
#: photograph of anything (docs/METHODS.md §2.1): in real photos the correlation is above 0.85 (at least 0.886
#: over the bundled portraits and FairFace faces), in pixel noise it is about 0, and the detectors do fire on
#: noise (BlazeFace with scores up to 0.7).
MIN_NEIGHBOUR_CORRELATION = 0.5


def neighbour_correlation(image_rgb: np.ndarray, box, *, samples: int = 64) -> float:
    """Correlation of the grey levels (BT.601) inside ``box`` with their right and lower neighbours (the
    smaller of the two), on about ``samples`` x ``samples`` pixel pairs (a regular stride; every pair
    is two adjacent pixels). NaN when the box is too small or flat."""
    img = np.asarray(image_rgb)
    h, w = img.shape[:2]
    x0, y0, x1, y1 = (int(round(float(v))) for v in box[:4])
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 - x0 < 3 or y1 - y0 < 3:
        return float("nan")
    sy = max(1, (y1 - y0) // samples)
    sx = max(1, (x1 - x0) // samples)
    wts = np.array([0.299, 0.587, 0.114])
    # rows y0, y0 + sy, ... < y1 - 1 and columns x0, x0 + sx, ... < x1 - 1 as strided views (no gather): the same
    # pixels as indexing with np.arange, 0.13 instead of 0.30 ms per box (measured)
    g = img[y0 : y1 - 1 : sy, x0 : x1 - 1 : sx] @ wts
    right = img[y0 : y1 - 1 : sy, x0 + 1 : x1 : sx] @ wts
    below = img[y0 + 1 : y1 : sy, x0 : x1 - 1 : sx] @ wts
    out = []
    for other in (right, below):
        a, b = g.ravel() - g.mean(), other.ravel() - other.mean()
        den = np.sqrt((a * a).sum() * (b * b).sum())
        out.append((a * b).sum() / den if den > 0 else np.nan)
    return float(min(out))


def plausible_face_box(image_rgb: np.ndarray, box, *, min_correlation: float = MIN_NEIGHBOUR_CORRELATION) -> bool:
    """False for a box whose content is not a photograph (pixel noise, a flat patch): see
    :data:`MIN_NEIGHBOUR_CORRELATION`."""
    r = neighbour_correlation(image_rgb, box)
    return bool(np.isfinite(r) and r >= min_correlation)


def get_face_detector(model: int = 0, min_confidence: float = 0.3):
    """The cached ``mp.solutions.face_detection.FaceDetection`` (model 0: short range, 1: full range)."""

    def build():
        return import_mediapipe().solutions.face_detection.FaceDetection(
            model_selection=int(model), min_detection_confidence=float(min_confidence)
        )

    return _MODELS.get((int(model), float(min_confidence)), build)


def models_built() -> bool:
    """Whether this process has built a detector (threads are running)."""
    return bool(_MODELS)


def detect_faces(
    image_rgb: np.ndarray,
    *,
    min_confidence: float = 0.3,
    models: tuple[int, ...] = (0, 1),
) -> list[tuple[np.ndarray, float]]:
    """Face boxes in pixel coordinates, best first.

    Tries the models in order (0 = short range, faces within about 2 m;
    1 = full range) and returns the detections of the first that finds any.
    Boxes whose content is not a photograph (:func:`plausible_face_box`: the
    detector fires on pixel noise) are dropped.

    Returns
    -------
    list of (box, score)
        ``box`` is ``[x0, y0, x1, y1]`` float32 (clipped to the image), score in [0, 1].
    """
    img = np.ascontiguousarray(image_rgb, dtype=np.uint8)
    h, w = img.shape[:2]
    for model in models:
        res = get_face_detector(model, min_confidence).process(img)
        out = []
        for d in res.detections or ():
            bb = d.location_data.relative_bounding_box
            box = np.array(
                [bb.xmin * w, bb.ymin * h, (bb.xmin + bb.width) * w, (bb.ymin + bb.height) * h], dtype=np.float32
            )
            box[[0, 2]] = np.clip(box[[0, 2]], 0, w)
            box[[1, 3]] = np.clip(box[[1, 3]], 0, h)
            if box[2] - box[0] >= 4 and box[3] - box[1] >= 4 and plausible_face_box(img, box):
                out.append((box, float(d.score[0]) if d.score else 0.0))
        if out:
            return sorted(out, key=lambda t: -t[1])
    return []

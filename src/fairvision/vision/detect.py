"""Face boxes from the mediapipe face detector (BlazeFace, legacy ``mp.solutions``).

Used as a second chance for faces the face mesh misses (the mesh's own
detector runs at a fixed confidence and fails on profiles, occlusions and
heads bowed down): the box is then handed to dlib's 68-landmark predictor.
Models are cached per process.
"""

from __future__ import annotations

import os
import threading

import numpy as np

_LOCK = threading.Lock()
_MODELS: dict[tuple[int, float], object] = {}


def get_face_detector(model: int = 0, min_confidence: float = 0.3):
    """The cached ``mp.solutions.face_detection.FaceDetection`` (model 0: short range, 1: full range)."""
    key = (int(model), float(min_confidence))
    det = _MODELS.get(key)
    if det is None:
        with _LOCK:
            det = _MODELS.get(key)
            if det is None:
                os.environ.setdefault("GLOG_minloglevel", "2")  # mediapipe's C++ info/warning lines
                import mediapipe as mp  # heavy; imported on first use

                det = mp.solutions.face_detection.FaceDetection(
                    model_selection=int(model), min_detection_confidence=float(min_confidence)
                )
                _MODELS[key] = det
    return det


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
            if box[2] - box[0] >= 4 and box[3] - box[1] >= 4:
                out.append((box, float(d.score[0]) if d.score else 0.0))
        if out:
            return sorted(out, key=lambda t: -t[1])
    return []

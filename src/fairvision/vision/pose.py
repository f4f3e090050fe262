"""Body keypoints from mediapipe Pose (0.10.21, legacy ``mp.solutions.pose``), for visual statistics when a
dataset has no keypoint annotations (docs/METHODS.md §13.3).

The model (``model_complexity=1``, static images) ships in the mediapipe wheel and is built once per process.
It finds at most one person per image and returns 33 landmarks with a visibility score; a landmark whose
visibility exceeds :data:`VISIBLE_THRESHOLD` and that lies inside the image gets COCO visibility 2, one inside
below it 1, one outside the image 0 (not labelled).
"""

from __future__ import annotations

import numpy as np

from fairvision.engine.pool import quiet_native_stderr
from fairvision.errors import FairvisionError
from fairvision.vision.model_cache import ModelCache, import_mediapipe

_MODELS = ModelCache(threads=True)  # model_complexity -> Pose; its lock also serialises the graph's runs

#: mediapipe visibility above which a landmark counts as visible (COCO v = 2)
VISIBLE_THRESHOLD = 0.5
#: number of mediapipe Pose landmarks
N_LANDMARKS = 33


def get_pose_model(model_complexity: int = 1):
    """The cached ``mp.solutions.pose.Pose`` (static images, one person)."""
    key = int(model_complexity)

    def build():
        with quiet_native_stderr():  # TFLite's "Created ... XNNPACK delegate" and glog lines
            return import_mediapipe().solutions.pose.Pose(static_image_mode=True, model_complexity=key,
                                                          min_detection_confidence=0.5)

    return _MODELS.get(key, build)


def detect_pose(image: np.ndarray, *, model_complexity: int = 1) -> np.ndarray | None:
    """Keypoints of the most prominent person, shape (33, 3): ``x, y`` in pixels and COCO visibility ``v``.

    Parameters
    ----------
    image : numpy.ndarray
        ``(H, W, 3)`` uint8 RGB.
    model_complexity : int
        mediapipe's model size (0, 1 or 2).

    Returns
    -------
    numpy.ndarray of shape (33, 3), or None when no person is found
        ``v = 2`` for a landmark inside the image with visibility above :data:`VISIBLE_THRESHOLD`, 1 for one
        inside the image below it, 0 (not labelled, ``x = y = 0`` as COCO) for one outside the image.
    """
    img = np.ascontiguousarray(image, dtype=np.uint8)
    if img.ndim != 3 or img.shape[2] != 3:
        raise FairvisionError(f"detect_pose: expected an (H, W, 3) RGB image, got shape {img.shape}")
    h, w = img.shape[:2]
    model = get_pose_model(model_complexity)
    with _MODELS.lock, quiet_native_stderr():  # one graph per process, not re-entrant; native log lines to /dev/null
        res = model.process(img)
    if res.pose_landmarks is None:
        return None
    lm = np.array([[p.x, p.y, p.visibility] for p in res.pose_landmarks.landmark], dtype=float)
    x, y = lm[:, 0] * w, lm[:, 1] * h
    inside = (x >= 0) & (x <= w) & (y >= 0) & (y <= h)
    v = np.where(inside, np.where(lm[:, 2] > VISIBLE_THRESHOLD, 2.0, 1.0), 0.0)
    return np.stack([np.where(inside, x, 0.0), np.where(inside, y, 0.0), v], axis=1)

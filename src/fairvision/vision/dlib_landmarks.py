"""dlib's HOG face detector and 68-landmark shape predictor (iBUG 300-W layout).

The predictor's weights come from the ``face-recognition-models`` package; its
folder is found with :func:`importlib.util.find_spec` because importing that
package pulls in the deprecated ``pkg_resources``. Models are cached per process.

Landmark layout: 0-16 jaw, 17-21 and 22-26 eyebrows, 27-35 nose, 36-41 and
42-47 eyes, 48-59 outer lips, 60-67 inner lips.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.vision.detect import plausible_face_box
from fairvision.vision.model_cache import ModelCache

_MODELS = ModelCache()  # "detector" / "predictor" -> the dlib model

JAW = np.arange(0, 17)
RIGHT_BROW = np.arange(17, 22)
LEFT_BROW = np.arange(22, 27)
RIGHT_EYE = np.arange(36, 42)
LEFT_EYE = np.arange(42, 48)
MOUTH = np.arange(48, 60)
#: Outline of the face: the jaw line, then back along the eyebrows.
FACE_OUTLINE = np.concatenate([JAW, LEFT_BROW[::-1], RIGHT_BROW[::-1]])


def model_path(name: str = "shape_predictor_68_face_landmarks.dat") -> Path:
    """Path of a model file shipped in ``face-recognition-models``."""
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise FairvisionError("the dlib mask needs the face-recognition-models package (pip install face-recognition-models)")
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / name
    if not path.is_file():
        raise FairvisionError(f"{path}: dlib model file missing; reinstall face-recognition-models")
    return path


def get_model(name: str, *, lock: bool = True):
    """dlib's ``"detector"`` or ``"predictor"``, built once per process (the batch measurement preloads them;
    ``lock=False``: see :meth:`fairvision.vision.model_cache.ModelCache.get`)."""

    def build():
        try:
            import dlib  # heavy; imported on first use
        except ImportError:
            raise FairvisionError("the dlib mask needs dlib (pip install dlib-bin)") from None
        return dlib.get_frontal_face_detector() if name == "detector" else dlib.shape_predictor(str(model_path()))

    return _MODELS.get(name, build, lock=lock)


MODEL_CACHE = _MODELS  # public: the per-process model cache ("predictor" in MODEL_CACHE: loaded in this process)


def detect(image_rgb: np.ndarray, *, upsample: int = 1) -> list[np.ndarray]:
    """HOG face boxes ``[x0, y0, x1, y1]`` (float32 pixels), largest first; boxes on content that is
    not a photograph are dropped (:func:`fairvision.vision.detect.plausible_face_box`)."""
    img = np.ascontiguousarray(image_rgb, dtype=np.uint8)
    rects = get_model("detector")(img, int(upsample))
    boxes = [np.array([r.left(), r.top(), r.right(), r.bottom()], dtype=np.float32) for r in rects]
    boxes = [b for b in boxes if plausible_face_box(img, b)]  # not on pixel noise
    return sorted(boxes, key=lambda b: -float((b[2] - b[0]) * (b[3] - b[1])))


def landmarks(image_rgb: np.ndarray, boxes=None, *, upsample: int = 1) -> list[np.ndarray]:
    """68 landmarks per face, ``(68, 2)`` float32 ``(x, y)`` pixels.

    Parameters
    ----------
    boxes : sequence of ``[x0, y0, x1, y1]``, optional
        Face boxes from any detector; default: dlib's HOG detector.
    """
    import dlib

    img = np.ascontiguousarray(image_rgb, dtype=np.uint8)
    if boxes is None:
        boxes = detect(img, upsample=upsample)
    predictor = get_model("predictor")
    out = []
    for b in boxes:
        x0, y0, x1, y1 = (int(round(float(v))) for v in b[:4])
        shape = predictor(img, dlib.rectangle(x0, y0, x1, y1))
        out.append(np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float32))
    return out

"""Person masks for the image variants of the vision-language probe (docs/METHODS.md §12.2).

Three sources, in the order a caller should prefer them: a mask file supplied with the dataset, a person box,
and, when neither exists, mediapipe's selfie segmentation (0.10.21, legacy ``mp.solutions.selfie_segmentation``;
the weights ship in the mediapipe wheel). The segmentation model is built once per process.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fairvision.engine.pool import quiet_native_stderr
from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.images import read_image
from fairvision.vision.model_cache import ModelCache, import_mediapipe

_MODELS = ModelCache(threads=True)  # model_selection -> SelfieSegmentation; its lock also serialises the graph's runs

#: probability above which a pixel of the selfie segmentation counts as the person
SELFIE_THRESHOLD = 0.5


def get_selfie_segmenter(model_selection: int = 0):
    """The cached ``SelfieSegmentation`` model (0: general, 256 x 256; 1: landscape, 144 x 256)."""
    key = int(model_selection)

    def build():
        with quiet_native_stderr():  # TFLite's "Created ... XNNPACK delegate" and glog lines
            return import_mediapipe().solutions.selfie_segmentation.SelfieSegmentation(model_selection=key)

    return _MODELS.get(key, build)


def selfie_mask(image: np.ndarray, *, threshold: float = SELFIE_THRESHOLD, model_selection: int = 0) -> np.ndarray:
    """Boolean ``(H, W)`` person mask of an RGB uint8 image from mediapipe selfie segmentation.

    Parameters
    ----------
    image : numpy.ndarray
        ``(H, W, 3)`` uint8 RGB.
    threshold : float
        Pixels whose person probability exceeds it are the person (default 0.5).
    model_selection : int
        mediapipe's model choice (0 general, 1 landscape).

    Returns
    -------
    numpy.ndarray of bool, shape (H, W)
    """
    img = np.ascontiguousarray(image, dtype=np.uint8)
    if img.ndim != 3 or img.shape[2] != 3:
        raise FairvisionError(f"selfie_mask: expected an (H, W, 3) RGB image, got shape {img.shape}")
    model = get_selfie_segmenter(model_selection)
    with _MODELS.lock, quiet_native_stderr():  # one graph per process, not re-entrant; native log lines to /dev/null
        out = model.process(img)
    prob = out.segmentation_mask
    if prob is None:
        return np.zeros(img.shape[:2], dtype=bool)
    return np.asarray(prob) > threshold


def mask_from_file(path: str | os.PathLike, shape: tuple[int, int]) -> np.ndarray:
    """Boolean person mask from an image file (any non-black pixel, i.e. grey level above 127, is the person).

    The mask must have the image's height and width (``shape``); a one-line error names the file otherwise.
    """
    m = read_image(path)
    if m.shape[:2] != tuple(shape[:2]):
        raise InputFileError(f"{path}: mask is {m.shape[1]} x {m.shape[0]} pixels, the image {shape[1]} x {shape[0]}")
    return m.max(axis=2) > 127


def mask_from_box(box, shape: tuple[int, int]) -> np.ndarray:
    """Boolean mask of a person box ``(x0, y0, x1, y1)`` in pixels (x1, y1 exclusive, clipped to the image)."""
    try:
        x0, y0, x1, y1 = (float(v) for v in box)
    except (TypeError, ValueError):
        raise FairvisionError(f"person box must be four numbers x0, y0, x1, y1, not {box!r}") from None
    if not all(np.isfinite([x0, y0, x1, y1])) or x1 <= x0 or y1 <= y0:
        raise FairvisionError(f"person box {box!r} is empty or not finite (need x0 < x1 and y0 < y1)")
    h, w = int(shape[0]), int(shape[1])
    m = np.zeros((h, w), dtype=bool)
    r0, r1 = int(np.clip(round(y0), 0, h)), int(np.clip(round(y1), 0, h))
    c0, c1 = int(np.clip(round(x0), 0, w)), int(np.clip(round(x1), 0, w))
    m[r0:r1, c0:c1] = True
    return m


def person_mask(image: np.ndarray, *, mask_path: str | os.PathLike | None = None, box=None,
                threshold: float = SELFIE_THRESHOLD) -> tuple[np.ndarray, str]:
    """Person mask of an image and its source: a mask file, else a box, else selfie segmentation.

    Returns
    -------
    mask : numpy.ndarray of bool, shape (H, W)
    source : {"file", "box", "selfie"}
    """
    shape = np.asarray(image).shape[:2]
    if mask_path is not None:
        return mask_from_file(Path(mask_path), shape), "file"
    if box is not None:
        return mask_from_box(box, shape), "box"
    return selfie_mask(image, threshold=threshold), "selfie"

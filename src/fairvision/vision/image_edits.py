"""Edits of an image under a person mask (docs/METHODS.md §12.2, §13.1).

FHIBE probes a model on four versions of every image: the original, the person blacked out, the person blurred,
and the background blacked out. The same edits mask the subject or the scene before an image is embedded for
the diversity scores. Every function takes an ``(H, W, 3)`` uint8 RGB image and a boolean ``(H, W)`` person mask
and returns a new image of the same shape.
"""

from __future__ import annotations

import cv2
import numpy as np

from fairvision.errors import FairvisionError, ParameterError

#: FHIBE's four variants, in order
VARIANTS = ("original", "person_black", "person_blur", "background_black")
#: Gaussian blur strength: sigma as a share of the image's longer side
BLUR_SIGMA_SHARE = 0.05


def _check(image: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    img = np.asarray(image)
    m = np.asarray(mask, dtype=bool)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise FairvisionError(f"image variants need an (H, W, 3) uint8 RGB image, got {img.dtype} {img.shape}")
    if m.shape != img.shape[:2]:
        raise FairvisionError(f"person mask shape {m.shape} does not match the image {img.shape[:2]}")
    return img, m


def person_black(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The image with the person's pixels (``mask`` True) set to black."""
    img, m = _check(image, mask)
    return np.where(m[:, :, None], np.uint8(0), img)


def background_black(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The image with every pixel outside the person mask set to black."""
    img, m = _check(image, mask)
    return np.where(m[:, :, None], img, np.uint8(0))


def person_blur(image: np.ndarray, mask: np.ndarray, *, sigma: float | None = None) -> np.ndarray:
    """The image with the person's pixels replaced by a strong Gaussian blur of the image; the rest unchanged.

    ``sigma`` defaults to :data:`BLUR_SIGMA_SHARE` of the longer side (25 px on a 500 px portrait), enough to
    remove facial features; the kernel spans +-3 sigma.
    """
    img, m = _check(image, mask)
    s = float(sigma) if sigma is not None else BLUR_SIGMA_SHARE * max(img.shape[:2])
    if not np.isfinite(s) or s <= 0:
        raise ParameterError("sigma", f"must be positive, not {sigma!r}")
    blurred = cv2.GaussianBlur(img, (0, 0), sigmaX=s, sigmaY=s, borderType=cv2.BORDER_REFLECT101)
    return np.where(m[:, :, None], blurred, img)


def make_variants(image: np.ndarray, mask: np.ndarray, *, sigma: float | None = None) -> dict[str, np.ndarray]:
    """FHIBE's four variants of an image (docs/METHODS.md §12.2): ``{variant: (H, W, 3) uint8 RGB}`` in the order
    of :data:`VARIANTS`."""
    img, m = _check(image, mask)
    return {"original": img.copy(), "person_black": person_black(img, m),
            "person_blur": person_blur(img, m, sigma=sigma), "background_black": background_black(img, m)}

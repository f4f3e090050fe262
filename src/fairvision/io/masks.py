"""Finding and reading supplied mask files for images (skin masks, label maps; docs/METHODS.md §2.1).

A mask for an image is looked up by ``<sample_id>``, ``<image stem>``,
``<image stem>_skin`` or ``<sample_id>_skin`` with any of
:data:`MASK_SUFFIXES`, anywhere under the masks folder; when several files
share a name the lossless format wins (the first suffix in
:data:`MASK_SUFFIXES` order).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np

from fairvision.errors import InputFileError

MASK_SUFFIXES = (".png", ".bmp", ".tif", ".tiff", ".jpg", ".jpeg", ".webp")


def mask_index(masks_dir: str | os.PathLike) -> dict[str, str]:
    """Mask files under a folder by name: both the path relative to the folder and the stem, without suffix."""
    masks_dir = Path(masks_dir)
    if not masks_dir.is_dir():
        raise InputFileError(f"{masks_dir}: no such masks folder")
    index: dict[str, str] = {}
    for p in sorted(masks_dir.rglob("*")):
        if p.suffix.lower() in MASK_SUFFIXES and p.is_file():
            rel = str(p.relative_to(masks_dir).with_suffix(""))
            # prefer lossless formats: the first suffix in MASK_SUFFIXES order wins
            for key in {rel, p.stem}:
                old = index.get(key)
                if old is None or MASK_SUFFIXES.index(p.suffix.lower()) < MASK_SUFFIXES.index(Path(old).suffix.lower()):
                    index[key] = str(p)
    return index


def find_mask(index: dict[str, str], sample_id: str, image_path: str) -> str | None:
    """Mask file for an image: ``<sample_id>``, ``<stem>``, ``<stem>_skin`` or ``<sample_id>_skin``."""
    stem = Path(image_path).stem
    for name in (sample_id, stem, f"{stem}_skin", f"{sample_id}_skin"):
        hit = index.get(name)
        if hit is not None:
            return hit
    return None


def match_masks(masks_dir: str | os.PathLike, sample_ids: Iterable[str], image_paths: Iterable[str]) -> list[str | None]:
    """Mask file of every image (None where there is none); an error when no image has one."""
    index = mask_index(masks_dir)
    found = [find_mask(index, str(s), str(p)) for s, p in zip(sample_ids, image_paths)]
    if not any(found):
        raise InputFileError(f"{masks_dir}: no mask matches any image (looked for <sample_id>.png, <stem>.png, <stem>_skin.png)")
    return found


def load_mask(path: str | os.PathLike, skin_label: int | None = None, shape: tuple[int, int] | None = None) -> np.ndarray:
    """Read a supplied skin mask as a boolean ``(H, W)`` array.

    Parameters
    ----------
    path : path-like
        A mask image (PNG recommended; lossless). Colour masks must be grey
        (all channels equal).
    skin_label : int, optional
        The skin label id of a label map (CelebAMask-HQ's combined maps and
        FHIBE use one integer per face part); skin = pixels equal to it. If
        None the file is a binary mask: pixels > 0 when the maximum is 1,
        otherwise pixels >= 128 (0/255 masks, tolerant of JPEG noise).
    shape : (H, W), optional
        The image's size; a mask of a different size is an error.

    Raises
    ------
    InputFileError
        Missing or unreadable file, a colour (non-grey) mask, a size
        mismatch, or a multi-label map given without ``skin_label``.
    """
    import cv2  # lazy: heavy, and only mask files need it

    p = Path(path)
    try:
        data = np.fromfile(p, dtype=np.uint8)
    except (FileNotFoundError, IsADirectoryError):
        raise InputFileError(f"{p}: no such mask file") from None
    except OSError as exc:
        raise InputFileError(f"{p}: cannot read mask: {exc.strerror or exc}") from None
    arr = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if arr is None:
        raise InputFileError(f"{p}: not a readable mask image")
    if arr.ndim == 3:
        if arr.shape[2] == 4:
            arr = arr[..., :3]
        if not (np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 0], arr[..., 2])):
            raise InputFileError(f"{p}: colour mask; give a grey binary mask or a single-channel label map")
        arr = arr[..., 0]
    if shape is not None and tuple(arr.shape[:2]) != tuple(shape[:2]):
        raise InputFileError(
            f"{p}: mask is {arr.shape[1]}x{arr.shape[0]} but the image is {shape[1]}x{shape[0]} (width x height)"
        )
    if skin_label is not None:
        return arr == int(skin_label)
    vmax = int(arr.max())
    if vmax <= 1:
        return arr > 0
    if vmax < 128 and np.unique(arr).size > 2:
        raise InputFileError(f"{p}: looks like a label map (values 0..{vmax}); pass the skin label id (skin_label)")
    return arr >= 128

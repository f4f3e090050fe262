"""Finding supplied mask files for images (skin masks, label maps; docs/METHODS.md §2.1).

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

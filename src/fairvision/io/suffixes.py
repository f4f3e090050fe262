"""The file suffixes fairvision reads as images, and the image files of a folder (standard library only: imported
where numpy must not be)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["IMAGE_SUFFIXES", "folder_images"]

#: suffixes (lower case) of the image files taken from a folder
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def folder_images(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """The image files (:data:`IMAGE_SUFFIXES`, any case) in ``folder`` (and its subfolders with ``recursive``),
    sorted, as ``folder / name``: what a folder of images is read as everywhere."""
    pattern = "**/*" if recursive else "*"
    return sorted(p for p in Path(folder).glob(pattern) if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())

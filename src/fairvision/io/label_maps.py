"""Read face-parsing label maps: single-channel PNGs whose pixel values are category ids (docs/METHODS.md §6.1).

A label map is read as stored, never converted to RGB or rescaled (as :func:`fairvision.io.images.read_image`
does for photos): 8-bit grey, 16-bit grey and 32-bit integer PNGs give their values, and a palette PNG gives
its palette indices. A colour (RGB) map is refused: its colours are not category ids. The pixel limit of
:mod:`fairvision.io.images` is checked from the header first.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from fairvision.errors import InputFileError
from fairvision.io.images import check_image_pixels

#: PIL modes whose pixel values are integer category ids
_LABEL_MODES = ("L", "P", "I", "I;16", "I;16B", "I;16L", "1")


def read_label_map(path: str | os.PathLike) -> np.ndarray:
    """A label map file as an ``(H, W)`` int64 array of category ids.

    Raises
    ------
    InputFileError
        The file is missing, not an image, over the pixel limit, or has colour channels; the message names it.
    """
    from PIL import Image  # lazy: about 50 ms, paid only by commands that read label maps

    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputFileError(f"{p}: no such label map file") from None
    except OSError as exc:
        raise InputFileError(f"{p}: cannot read label map: {exc.strerror or exc}") from None
    if check_image_pixels(data, p) is None:
        raise InputFileError(f"{p}: not a readable label map (corrupt or unsupported format)")
    with Image.open(io.BytesIO(data)) as im:
        if im.mode not in _LABEL_MODES:
            raise InputFileError(f"{p}: label map has mode {im.mode} (colour channels); expected a single-channel "
                                 f"PNG of integer category ids (8-bit, 16-bit or palette)")
        arr = np.asarray(im)
    return arr.astype(np.int64)

"""The capture time of a photo from its EXIF block (docs/METHODS.md §13.8).

:func:`capture_time` reads ``DateTimeOriginal`` (tag 0x9003 of the EXIF sub-IFD), falling back to
``DateTimeDigitized`` (0x9004); the IFD0 ``DateTime`` (0x0132) is not used, since editing software rewrites it.
Only the metadata is read (Pillow parses the header and the EXIF block, no pixel is decoded). The time is the
camera's local clock, returned as ISO 8601 without a zone (``2024-05-01T14:03:22``); ``OffsetTimeOriginal`` is
not applied (few devices write it, and a subject's photos are compared with each other, mostly in one zone).
"""

from __future__ import annotations

import os
import re
from datetime import datetime

from PIL import Image

#: EXIF sub-IFD pointer and the two capture-time tags inside it
EXIF_IFD_TAG, DATETIME_ORIGINAL_TAG, DATETIME_DIGITIZED_TAG = 0x8769, 0x9003, 0x9004

_EXIF_TIME = re.compile(r"^\s*(\d{4})[:\-](\d{2})[:\-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")


def parse_exif_time(value) -> str | None:
    """``"2024:05:01 14:03:22"`` -> ``"2024-05-01T14:03:22"``; None for a blank, zeroed or impossible value
    (``"0000:00:00 00:00:00"`` is what cameras write when the clock was never set)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    m = _EXIF_TIME.match(value.replace("\x00", ""))
    if not m:
        return None
    try:
        return datetime(*(int(g) for g in m.groups())).isoformat()
    except ValueError:
        return None


def capture_time(path: str | os.PathLike) -> str | None:
    """The EXIF capture time of an image file as ISO 8601 local time, or None when it has none
    (docs/METHODS.md §13.8). A file Pillow cannot open has none."""
    try:
        with Image.open(path) as im:  # the header and metadata only: no pixel is decoded
            exif = im.getexif()
            sub = exif.get_ifd(EXIF_IFD_TAG) if EXIF_IFD_TAG in exif else {}
    except Exception:  # noqa: BLE001 - a file whose metadata cannot be read simply has no capture time
        return None
    for tag in (DATETIME_ORIGINAL_TAG, DATETIME_DIGITIZED_TAG):
        got = parse_exif_time(sub.get(tag))
        if got is not None:
            return got
    return None

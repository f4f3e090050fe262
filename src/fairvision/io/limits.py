"""Limits set from the environment, read without numpy so that the command line can check them at start-up.

``FAIRVISION_MAX_PIXELS`` overrides the most pixels one image may have (:data:`fairvision.io.images.MAX_PIXELS`).
A value that is not a positive whole number is a one-line :class:`~fairvision.errors.FairvisionError` naming
the variable; every command that may read images checks it before any work (``fairvision doctor`` reports it).
"""

from __future__ import annotations

import math
import os

from fairvision.errors import FairvisionError

#: The environment variable that overrides the image pixel limit (a positive whole number of pixels).
MAX_PIXELS_ENV = "FAIRVISION_MAX_PIXELS"


def env_max_pixels() -> int | None:
    """The pixel limit set by ``$FAIRVISION_MAX_PIXELS`` (``400000000``, ``400_000_000`` or ``4e8``), or None when
    the variable is unset or empty.

    Raises
    ------
    FairvisionError
        The variable is set to something other than a positive whole number.
    """
    raw = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw.replace("_", ""))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise FairvisionError(f"{MAX_PIXELS_ENV}={raw!r}: not a positive whole number of pixels (e.g. 400000000)")
    return int(value)

"""fairvision: audit the fairness of human-centric computer vision.

Submodules are imported lazily so that ``import fairvision`` (and the CLI's
``--help``) stay fast; heavy parts (mediapipe, dlib, OpenCV) load only when used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = {
    "audits", "datasets", "engine", "groups", "io", "metrics", "report", "retrieval",
    "schema", "skin", "stats", "vision",
}

__all__ = sorted(_SUBMODULES) + ["__version__", "FairvisionError"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"fairvision.{name}")
    if name == "FairvisionError":
        from fairvision.errors import FairvisionError

        return FairvisionError
    raise AttributeError(f"module 'fairvision' has no attribute {name!r}")

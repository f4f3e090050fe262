"""What every generator shares: ids as file names, the image type of outputs, and the base class (docs/METHODS.md §10.1).

:func:`slug`, :func:`file_name` and :func:`output_name` name the outputs in a work folder so that ids that differ
only in case or punctuation never share a file; :func:`as_rgb_uint8` turns what a generator returns into an
``(H, W, 3)`` uint8 array (or fails with the cause ``not an image``); :class:`Generator` is the base class of
every kind in :mod:`fairvision.audits.generative.generators`.
"""

from __future__ import annotations

import abc
import hashlib
import re
from typing import Any

import numpy as np

from fairvision.audits.generative.failures import GenerationError
from fairvision.engine import content_key

__all__ = ["Generator", "as_rgb_uint8", "file_name", "near_duplicates", "output_name", "params_hash", "slug"]

def slug(text: str) -> str:
    """File-name form of a word: lower case, runs of other characters as ``-`` (``"bus driver"`` -> ``bus-driver``)."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "x"


def file_name(text: str) -> str:
    """Collision-free file-name form of an exact id: a readable slug plus 8 hex digits of its SHA-256 (docs/METHODS.md §10.1).

    ``"Anna"`` -> ``anna-<hash>`` and ``"anna"`` -> ``anna-<other hash>``: ids that differ only in case or
    punctuation keep apart. The slug is cut to 40 characters (the hash keeps long ids apart).
    """
    text = str(text)
    return f"{slug(text)[:40].strip('-') or 'x'}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


def output_name(seed_id: str, word: str, seed: int) -> str:
    """Where an output goes under its generator's work folder: ``<file_name(seed_id)>/<file_name(word)>__s<seed>.png``."""
    return f"{file_name(seed_id)}/{file_name(word)}__s{int(seed)}.png"


def near_duplicates(values) -> list[list[str]]:
    """Groups of distinct ids whose :func:`slug` is the same (they differ only in case or punctuation)."""
    groups: dict[str, list[str]] = {}
    for v in dict.fromkeys(map(str, values)):
        groups.setdefault(slug(v), []).append(v)
    return [g for g in groups.values() if len(g) > 1]


def as_rgb_uint8(image: Any, where: str = "generator output") -> np.ndarray:
    """An ``(H, W, 3)`` uint8 array from an array (uint8, or float in [0, 1]) or a PIL image
    (else a :class:`~fairvision.audits.generative.failures.GenerationError`, cause ``not an image``)."""
    if hasattr(image, "convert") and hasattr(image, "size"):  # a PIL image
        image = np.asarray(image.convert("RGB"))
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise GenerationError("not an image", f"{where}: expected an (H, W, 3) RGB image, got shape {arr.shape}")
    arr = arr[:, :, :3]
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise GenerationError("not an image", f"{where}: the image has non-finite values")
        return np.clip(np.rint(arr * 255.0), 0, 255).astype(np.uint8)
    raise GenerationError("not an image", f"{where}: unsupported image dtype {arr.dtype}")


def params_hash(params: dict) -> str:
    """Short content key of generator parameters (:func:`fairvision.engine.content_key`)."""
    return content_key(params)[:16]


class Generator(abc.ABC):
    """Base class: a named image editor with recorded parameters."""

    kind = "base"

    def __init__(self, name: str, params: dict | None = None):
        self.name = name
        self.params = dict(params or {})

    def item_params(self, word: str) -> dict:
        """Parameters that determine the output for ``word`` (recorded and hashed; a change regenerates)."""
        return {"kind": self.kind, **self.params}

    @abc.abstractmethod
    def edit(self, image: np.ndarray, prompt: str, seed: int, **info) -> np.ndarray:
        """The edited image (uint8 RGB) for ``prompt``, deterministic given ``seed``."""

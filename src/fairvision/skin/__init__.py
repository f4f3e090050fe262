"""Apparent skin colour: colour maths, estimators, categories, masks, and measuring many images at once
(docs/METHODS.md §1 and §2).

Public names are imported on first use (PEP 562), so ``import fairvision.skin``
stays cheap. Skin masks live in :mod:`fairvision.skin.masks`.
"""

from __future__ import annotations

from fairvision._lazy import lazy_exports

_EXPORTS = {
    # colour maths (docs/METHODS.md §1)
    "srgb_to_lab": "colour",
    "lab_to_srgb": "colour",
    "srgb_to_linear": "colour",
    "linear_to_srgb": "colour",
    "srgb_to_xyz": "colour",
    "xyz_to_lab": "colour",
    "lab_to_xyz": "colour",
    "xyz_to_srgb": "colour",
    "chroma": "colour",
    "hue_angle": "colour",
    "ita": "colour",
    "ciede2000": "colour",
    "gray_level": "colour",
    # estimators and measurement (docs/METHODS.md §2)
    "METHODS": "estimators",
    "measure": "measurement",
    "measure_pixels": "measurement",
    "load_mask": "measurement",
    "SkinMeasurement": "measurement",
    # categories (docs/METHODS.md §1.4)
    "tone_hue_category": "categories",
    "ita_class": "categories",
    "st_class": "categories",
    "fitzpatrick_proxy": "categories",
    "monk_tone": "categories",
    "categorize": "categories",
    "add_categories": "categories",
    "MONK_SRGB": "categories",
    # masks (docs/METHODS.md §2.1)
    "skin_mask": "masks",
    # many images at once: parallel, resumable
    "measure_images": "batch",
    "MeasureParams": "batch",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

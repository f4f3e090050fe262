"""The simple skin colour estimators (docs/METHODS.md §2.3) and the result every estimator returns.

``mean``: mean L*, a*, b* of the skin pixels (BiasPainter-style mean colour). ``median_ita``: Khaziev et
al., the median of the per-pixel ITA. ``gray_mean``: BiasPainter, the mean grey level (BT.601 luma, 0-255).
"""

from __future__ import annotations

import numpy as np

from fairvision.skin.colour import hue_angle, ita as _ita

__all__ = ["colour_result", "mean", "median_ita", "gray_mean"]


def colour_result(L, a, b, ita_value=None, **extra) -> dict:
    """An estimator's result for the colour (L*, a*, b*): ``L``, ``a``, ``b``, ``hue`` (degrees, [0, 360)),
    ``chroma``, ``ita`` (of that colour unless ``ita_value`` is given), ``gray`` (None: set by the estimators
    that measure it) and ``extra`` (the keyword arguments)."""
    lab = np.array([L, a, b], dtype=np.float64)
    return {
        "L": float(L),
        "a": float(a),
        "b": float(b),
        "hue": float(hue_angle(lab)),
        "chroma": float(np.hypot(a, b)),
        "ita": float(_ita(lab)) if ita_value is None else float(ita_value),
        "gray": None,
        "extra": extra,
    }


def mean(lab: np.ndarray) -> dict:
    """Mean CIELAB of the skin pixels; hue, chroma and ITA of that mean colour."""
    m = np.asarray(lab, dtype=np.float64).mean(axis=0)
    return colour_result(m[0], m[1], m[2])


def median_ita(lab: np.ndarray) -> dict:
    """Khaziev et al.: median of the per-pixel ITA (docs/METHODS.md §2.3).

    ``ita`` is the median ITA; ``L``, ``a``, ``b`` are per-channel medians and
    ``hue`` / ``chroma`` belong to that median colour.
    """
    lab = np.asarray(lab)
    med = np.median(lab, axis=0).astype(np.float64)
    return colour_result(med[0], med[1], med[2], ita_value=float(np.median(_ita(lab))))


def gray_mean(lab: np.ndarray, gray: np.ndarray) -> dict:
    """BiasPainter: mean grey level (0-255) of the skin pixels; L*, a*, b* are the mean Lab."""
    out = mean(lab)
    out["gray"] = float(np.mean(gray, dtype=np.float64))
    return out

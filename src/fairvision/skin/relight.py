"""Global lighting edits of a whole image, RMS contrast, and the skin colour of relit copies measured on the
unedited image's skin mask (docs/METHODS.md §2.7).

Edits (every one a point operation on each channel, so an 8-bit image is edited through one 256-entry lookup
table per channel, computed in float64 and rounded once):

- ``exposure`` by ``ev`` stops: linear RGB times ``2 ** ev``, clipped to [0, 1];
- ``white-balance`` by a shift of ``kelvin`` of the light's correlated colour temperature from D65 (6504 K):
  linear R, G and B are scaled by the ratio of the linear sRGB of the CIE daylight illuminant at
  ``6504 + kelvin`` to that of D65, normalised so that G keeps its value, then clipped (a positive shift is a
  bluer light and a cooler image); or an explicit gain pair ``(r_gain, b_gain)`` for R and B against G;
- ``gamma``: the sRGB-encoded value raised to ``gamma`` (above 1 darkens the mid-tones, below 1 lightens them).

Exposure 0, a shift of 0 K (gains 1, 1) and gamma 1 return the input unchanged, bit for bit. The measurement
of a relit copy uses the skin mask found on the unedited image (a lighting edit must not move the mask), so a
change in L* or h* comes from the edit alone. :func:`relight_images` runs every image through the engine
(:func:`fairvision.engine.imap`); failures are rows with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from fairvision.engine import ExecutionSettings, check_engine, imap
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.io.images import ImageTooLargeError, read_image
from fairvision.skin.colour import CIE_EPSILON, CIE_KAPPA, XYZ_TO_RGB, linear_to_srgb, srgb_to_linear
from fairvision.skin.estimators import METHODS
from fairvision.skin.masks import FACE_SELECTIONS, MASK_METHODS, skin_mask
from fairvision.skin.measurement import measure

__all__ = ["EDITS", "IDENTITY", "DEFAULT_RANGES", "UNITS", "D65_CCT", "daylight_xy", "white_balance_gains",
           "edit_lut", "apply_edit", "edit_steps", "rms_contrast", "RelightOptions", "relight_image",
           "relight_images"]

#: the lighting edits, in report order
EDITS = ("exposure", "white-balance", "gamma")
#: the strength of each edit that leaves an image unchanged
IDENTITY = {"exposure": 0.0, "white-balance": 0.0, "gamma": 1.0}
#: default range of each edit: -1..+1 EV, -1500..+1500 K, gamma 0.8..1.25 (steps evenly spaced; gamma in log)
DEFAULT_RANGES = {"exposure": (-1.0, 1.0), "white-balance": (-1500.0, 1500.0), "gamma": (0.8, 1.25)}
#: the unit one sensitivity slope is per: 1 EV, 1000 K, 0.1 of gamma
UNITS = {"exposure": "EV", "white-balance": "1000 K", "gamma": "0.1"}
#: divide an edit's strength by this to get it in :data:`UNITS`
UNIT_SCALE = {"exposure": 1.0, "white-balance": 1000.0, "gamma": 0.1}
#: correlated colour temperature of D65 (K), the light a white-balance shift starts from
D65_CCT = 6504.0
#: the daylight locus is defined from 4000 K to 25000 K
CCT_RANGE = (4000.0, 25000.0)
#: columns of the per-copy rows of :func:`relight_image`
ROW_COLUMNS = ["edit", "strength", "estimator", "L", "a", "b", "hue", "ita", "n_pixels", "contrast", "L_rms",
               "ok", "reason", "flags"]

_LEVELS = np.arange(256, dtype=np.float64) / 255.0


def daylight_xy(cct) -> np.ndarray:
    """CIE 1931 chromaticity (x, y) of the CIE daylight illuminant of a correlated colour temperature
    (CIE 15:2004, eq. 3.3-3.4; 4000-25000 K), vectorised; docs/METHODS.md §2.7."""
    t = np.asarray(cct, dtype=np.float64)
    if np.any((t < CCT_RANGE[0]) | (t > CCT_RANGE[1])) or not np.all(np.isfinite(t)):
        raise ParameterError("kelvin", f"the light's temperature must lie within {CCT_RANGE[0]:g}..{CCT_RANGE[1]:g} K "
                                       f"(D65 = {D65_CCT:g} K plus the shift)")
    x = np.where(t <= 7000.0,
                 -4.6070e9 / t ** 3 + 2.9678e6 / t ** 2 + 0.09911e3 / t + 0.244063,
                 -2.0064e9 / t ** 3 + 1.9018e6 / t ** 2 + 0.24748e3 / t + 0.237040)
    y = -3.0 * x ** 2 + 2.870 * x - 0.275
    return np.stack([x, y], axis=-1)


def white_balance_gains(kelvin: float) -> np.ndarray:
    """Linear (R, G, B) gains of a white-balance shift of ``kelvin`` from D65 (G gain 1; docs/METHODS.md §2.7).

    The gains are the linear sRGB of the daylight illuminant at ``D65_CCT + kelvin`` (Y = 1) divided by that of
    the daylight illuminant at ``D65_CCT``, both from :func:`daylight_xy`, and then by the G gain; a shift of
    0 gives exactly (1, 1, 1).
    """
    kelvin = float(kelvin)
    if kelvin == 0.0:
        return np.ones(3)
    (x0, y0), (x1, y1) = daylight_xy([D65_CCT, D65_CCT + kelvin])
    ref = XYZ_TO_RGB @ np.array([x0 / y0, 1.0, (1.0 - x0 - y0) / y0])
    new = XYZ_TO_RGB @ np.array([x1 / y1, 1.0, (1.0 - x1 - y1) / y1])
    g = new / ref
    return g / g[1]


def _gains(edit: str, strength) -> np.ndarray | None:
    """Linear per-channel gains of ``exposure`` / ``white-balance`` (None for ``gamma``)."""
    if edit == "exposure":
        return np.full(3, 2.0 ** float(strength))
    if edit == "white-balance":
        if isinstance(strength, (tuple, list, np.ndarray)):
            r, b = (float(v) for v in strength)
            if not (r > 0 and b > 0 and np.isfinite(r) and np.isfinite(b)):
                raise ParameterError("gains", f"must be two positive numbers, not {strength!r}")
            return np.array([r, 1.0, b])
        return white_balance_gains(strength)
    return None


def _check_edit(edit: str, strength) -> None:
    if edit not in EDITS:
        raise ParameterError("edit", f"must be one of {', '.join(EDITS)}, not {edit!r}")
    if edit == "gamma" and not (np.isfinite(float(strength)) and float(strength) > 0):
        raise ParameterError("gamma", f"must be a positive number, not {strength!r}")
    if edit == "exposure" and not np.isfinite(float(strength)):
        raise ParameterError("ev", f"must be a finite number, not {strength!r}")
    if edit == "white-balance" and not isinstance(strength, (tuple, list, np.ndarray)):
        daylight_xy(D65_CCT + float(strength))  # a shift off the daylight locus fails here, before any image


def _edit_values(v: np.ndarray, edit: str, strength) -> np.ndarray:
    """The edit of encoded sRGB values ``v`` (float64 in [0, 1], last axis RGB), clipped to [0, 1]."""
    if edit == "gamma":
        return np.clip(v ** float(strength), 0.0, 1.0)
    lin = srgb_to_linear(v, dtype=np.float64) * _gains(edit, strength)
    return np.clip(linear_to_srgb(np.clip(lin, 0.0, 1.0)), 0.0, 1.0)


def edit_lut(edit: str, strength) -> np.ndarray:
    """The 8-bit lookup table of an edit: ``lut[c, v]`` is the output of value ``v`` in channel ``c``
    (shape (3, 256), uint8; docs/METHODS.md §2.7). The identity strength gives ``lut[c, v] == v``."""
    _check_edit(edit, strength)
    if _is_identity(edit, strength):
        return np.tile(np.arange(256, dtype=np.uint8), (3, 1))
    out = _edit_values(np.repeat(_LEVELS[:, None], 3, axis=1), edit, strength)  # (256, 3)
    return np.rint(out * 255.0).astype(np.uint8).T.copy()


def _is_identity(edit: str, strength) -> bool:
    if isinstance(strength, (tuple, list, np.ndarray)):
        return all(float(v) == 1.0 for v in strength)
    return float(strength) == IDENTITY[edit]


def apply_edit(image, edit: str, strength) -> np.ndarray:
    """A lighting edit of a whole RGB image (docs/METHODS.md §2.7).

    Parameters
    ----------
    image : array (H, W, 3)
        uint8, or float sRGB in [0, 1].
    edit : {"exposure", "white-balance", "gamma"}
    strength : float or (float, float)
        EV stops; a colour-temperature shift in kelvin (or a ``(r_gain, b_gain)`` pair); the gamma exponent.

    Returns
    -------
    numpy.ndarray (H, W, 3) uint8
        uint8 input goes through :func:`edit_lut` (three table lookups); float input is edited in float64 and
        rounded once. The identity strength returns a copy of a uint8 input.
    """
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise FairvisionError(f"expected an (H, W, 3) RGB image, got shape {img.shape}")
    if img.dtype == np.uint8:
        lut = edit_lut(edit, strength)
        return lut[np.arange(3), img]
    _check_edit(edit, strength)
    if not np.issubdtype(img.dtype, np.floating):
        raise FairvisionError(f"RGB values must be uint8 or float in [0, 1], got dtype {img.dtype}")
    v = np.clip(img.astype(np.float64), 0.0, 1.0)
    out = v if _is_identity(edit, strength) else _edit_values(v, edit, strength)
    return np.rint(out * 255.0).astype(np.uint8)


def edit_steps(edit: str, n_steps: int, span: tuple[float, float] | None = None) -> np.ndarray:
    """``n_steps`` strengths of an edit over ``span`` (default :data:`DEFAULT_RANGES`): evenly spaced, for
    gamma evenly in log (so 0.8 .. 1.25 is symmetric about 1); an odd count includes the identity of a
    symmetric span (docs/METHODS.md §2.7)."""
    if edit not in EDITS:
        raise ParameterError("edits", f"must name edits among {', '.join(EDITS)}, not {edit!r}")
    if int(n_steps) < 2:
        raise ParameterError("steps", f"must be at least 2, not {n_steps!r}")
    lo, hi = DEFAULT_RANGES[edit] if span is None else (float(span[0]), float(span[1]))
    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
        raise ParameterError("span", f"of {edit} must be two finite increasing numbers, not {span!r}")
    if edit == "gamma":
        if lo <= 0:
            raise ParameterError("span", f"of gamma must be positive, not {span!r}")
        out = np.exp(np.linspace(np.log(lo), np.log(hi), int(n_steps)))
    else:
        out = np.linspace(lo, hi, int(n_steps))
    ident = IDENTITY[edit]
    return np.where(np.isclose(out, ident, rtol=0, atol=1e-12), ident, out)


def _lightness_lut() -> np.ndarray:
    return srgb_to_linear(np.arange(256, dtype=np.uint8).reshape(-1, 1).repeat(3, 1), dtype=np.float64)[:, 0]


_LIN8 = None


def rms_contrast(image) -> tuple[float, float]:
    """RMS contrast of the lightness of a whole image (docs/METHODS.md §2.7).

    Every pixel's L* (D65, from its luminance Y, which is all L* depends on) is scaled to [0, 1]; the contrast
    is the standard deviation of these values over all pixels (Peli's RMS contrast, in [0, 0.5]). The second
    number is the root mean square of the same values without removing the mean, sqrt(mean((L*/100)^2)).

    Parameters
    ----------
    image : array (H, W, 3), uint8 or float sRGB in [0, 1]

    Returns
    -------
    (contrast, L_rms) : (float, float)
    """
    global _LIN8
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise FairvisionError(f"expected an (H, W, 3) RGB image, got shape {img.shape}")
    w = np.array([0.2126, 0.7152, 0.0722])  # the Y row of the sRGB -> XYZ matrix (docs/METHODS.md §1.1)
    if img.dtype == np.uint8:
        if _LIN8 is None:
            _LIN8 = _lightness_lut()
        y = _LIN8[img[..., 0]] * w[0] + _LIN8[img[..., 1]] * w[1] + _LIN8[img[..., 2]] * w[2]
    else:
        y = srgb_to_linear(np.clip(img.astype(np.float64), 0, 1), dtype=np.float64) @ w
    f = np.where(y > CIE_EPSILON, np.cbrt(y), (CIE_KAPPA * y + 16.0) / 116.0)
    v = (116.0 * f - 16.0) / 100.0
    return float(v.std()), float(np.sqrt(np.mean(v * v)))


@dataclass(frozen=True)
class RelightOptions:
    """What :func:`relight_images` does to every image (docs/METHODS.md §2.7).

    Parameters
    ----------
    steps : dict
        Edit name -> strengths (e.g. ``{"exposure": (-1, -0.5, 0, 0.5, 1)}``); default: 5 steps of each edit
        over :data:`DEFAULT_RANGES`.
    estimators : tuple of str
        Colour estimators (:data:`fairvision.skin.estimators.METHODS`).
    mask_method : str
        Skin mask of the unedited image (:func:`fairvision.skin.masks.skin_mask`); every copy uses it.
    faces : {"largest", "all"}
    min_pixels : int
        Fewer mask pixels: the image is left out.
    """

    steps: Any = None
    estimators: tuple = ("thong",)
    mask_method: str = "mediapipe"
    faces: str = "largest"
    min_pixels: int = 200

    def __post_init__(self) -> None:
        steps = self.steps if self.steps is not None else {e: tuple(edit_steps(e, 5)) for e in EDITS}
        clean = {}
        for edit, values in dict(steps).items():
            if edit not in EDITS:
                raise ParameterError("edits", f"must name edits among {', '.join(EDITS)}, not {edit!r}")
            vals = tuple(float(v) for v in values)
            for v in vals:
                _check_edit(edit, v)
            if len(vals) < 2:
                raise ParameterError("steps", f"needs at least 2 strengths of {edit}, got {len(vals)}")
            clean[edit] = vals
        if not clean:
            raise ParameterError("edits", "is empty: give at least one edit")
        object.__setattr__(self, "steps", clean)
        est = (self.estimators,) if isinstance(self.estimators, str) else tuple(self.estimators)
        bad = [e for e in est if e not in METHODS]
        if bad or not est:
            raise ParameterError("estimators", f"must be among {', '.join(METHODS)}, not {', '.join(bad) or 'none'}")
        object.__setattr__(self, "estimators", tuple(dict.fromkeys(est)))
        mm = "colour" if self.mask_method == "color" else self.mask_method
        if mm not in MASK_METHODS or mm == "file":
            raise ParameterError("mask_method", f"must be one of {', '.join(m for m in MASK_METHODS if m != 'file')}, "
                                                f"not {self.mask_method!r}")
        object.__setattr__(self, "mask_method", mm)
        if self.faces not in FACE_SELECTIONS:
            raise ParameterError("faces", f"must be one of {', '.join(FACE_SELECTIONS)}, not {self.faces!r}")


def _row(edit, strength, estimator, m, contrast) -> dict:
    return {"edit": edit, "strength": float(strength), "estimator": estimator, "L": m.L, "a": m.a, "b": m.b,
            "hue": m.hue, "ita": m.ita, "n_pixels": m.n_pixels, "contrast": contrast[0], "L_rms": contrast[1],
            "ok": bool(m.ok), "reason": m.reason, "flags": ";".join(m.flags)}


def relight_image(image: np.ndarray, mask: np.ndarray, options: RelightOptions | None = None) -> list[dict]:
    """Every relit copy of one image measured with every estimator on ``mask`` (the unedited image's skin
    mask; docs/METHODS.md §2.7).

    Parameters
    ----------
    image : array (H, W, 3) uint8
    mask : array (H, W) bool
        Skin mask of the unedited image, used for every copy.
    options : RelightOptions, optional

    Returns
    -------
    list of dict
        One row per (edit, strength, estimator), :data:`ROW_COLUMNS`, plus one row per estimator with
        ``edit="none"`` and the identity strength NaN (the unedited image). An identity strength reuses the
        unedited measurement (the copy is the same image, bit for bit).
    """
    options = options or RelightOptions()
    img = np.asarray(image)
    if img.dtype != np.uint8:
        img = apply_edit(img, "gamma", 1.0)
    base_c = rms_contrast(img)
    base = {e: measure(img, mask=mask, method=e, n_boot=0) for e in options.estimators}
    rows = [_row("none", np.nan, e, m, base_c) for e, m in base.items()]
    for edit, strengths in options.steps.items():
        for s in strengths:
            if _is_identity(edit, s):
                rows.extend(_row(edit, s, e, m, base_c) for e, m in base.items())
                continue
            copy = apply_edit(img, edit, s)
            c = rms_contrast(copy)
            rows.extend(_row(edit, s, e, measure(copy, mask=mask, method=e, n_boot=0), c) for e in options.estimators)
    return rows


def _relight_one(task: dict) -> dict:
    """Read, mask and relight one image; an unreadable image or no mask is a result with a reason."""
    opts: RelightOptions = task["options"]
    try:
        image = read_image(task["image_path"])
    except (ImageTooLargeError, InputFileError) as exc:
        return {"ok": False, "reason": str(exc), "rows": []}
    kw = {"min_pixels": opts.min_pixels}
    if opts.mask_method != "colour":
        kw.update(faces=opts.faces)
    res = skin_mask(image, opts.mask_method, **kw)
    if not res.ok:
        return {"ok": False, "reason": res.reason or "no skin mask", "rows": []}
    return {"ok": True, "reason": None, "rows": relight_image(image, np.asarray(res.mask, dtype=bool), opts),
            "mask_method": res.method}


def relight_images(table: pd.DataFrame, options: RelightOptions | None = None, *,
                   settings: ExecutionSettings | None = None,
                   progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Relight and measure every image of a sample table on the engine (docs/METHODS.md §2.7).

    Parameters
    ----------
    table : pandas.DataFrame
        ``sample_id`` and ``image_path`` (other columns are kept in the image table).
    options : RelightOptions, optional
    settings : ExecutionSettings or AuditSettings, optional
        ``engine``, ``address``, ``workers`` (default: this process).
    progress : callable, optional
        ``progress(done, total)``.

    Returns
    -------
    (rows, images) : (DataFrame, DataFrame)
        ``rows``: one row per image, edit, strength and estimator (``sample_id`` then :data:`ROW_COLUMNS`);
        ``images``: the input table with ``ok`` and ``reason`` (why an image was left out).
    """
    options = options or RelightOptions()
    for col in ("sample_id", "image_path"):
        if col not in table.columns:
            raise FairvisionError(f"relight_images: the table has no {col!r} column")
    engine, address, workers = ("local", None, 1) if settings is None else \
        (settings.engine, settings.address, settings.workers)
    tasks = [{"image_path": str(p), "options": options} for p in table["image_path"]]
    results: list[dict | None] = [None] * len(tasks)
    done = 0
    for outcome in imap(_relight_one, tasks, engine=check_engine(engine, address), address=address,
                        workers=max(1, int(workers)), ordered=False):
        if outcome.ok:
            results[outcome.index] = outcome.value
        else:
            f = outcome.failure
            results[outcome.index] = {"ok": False, "reason": f"{f.error}: {f.message}" if f.message else f.error,
                                      "rows": []}
        done += 1
        if progress is not None:
            progress(done, len(tasks))
    frames = []
    for sid, res in zip(table["sample_id"].astype(str), results):
        if res["rows"]:
            frames.append(pd.DataFrame(res["rows"], columns=ROW_COLUMNS).assign(sample_id=sid))
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["sample_id", *ROW_COLUMNS])
    rows = rows[["sample_id", *ROW_COLUMNS]]
    images = table.copy()
    images["ok"] = [bool(r["ok"]) for r in results]
    images["reason"] = [r["reason"] for r in results]
    return rows, images


"""Image croppers for the saliency-cropping benchmark, and how a crop is judged (docs/METHODS.md §6.8).

A cropper is any ``crop(image) -> box or saliency map`` taking an ``(H, W, 3)`` uint8 RGB image and returning
either a crop box ``(x0, y0, x1, y1)`` (``x1``, ``y1`` exclusive) or an ``(H, W)`` saliency map (floats >= 0).
A map becomes a box by :func:`crop_box`: the largest box of the chosen aspect ratio that fits the image,
centred on the maximum of the lightly blurred map and moved inside the image. :func:`judge` then says which of
a composite's two faces the box keeps.

Built-in croppers (:data:`BUILTIN`): ``spectral-residual`` (OpenCV's static saliency, Hou and Zhang's spectral
residual, ``cv2.saliency``), ``gradient`` (our own numpy fallback: the blurred gradient magnitude of the grey
image) and ``saliency``, the first of these two that this installation has. Any other cropper is named
``module:function`` or ``path/to/file.py:function``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
from fractions import Fraction
from typing import Callable

import numpy as np

from fairvision.errors import ParameterError

__all__ = ["ASPECT", "BUILTIN", "KEPT", "CropOutputError", "parse_aspect", "load_cropper", "cropper_name", "spectral_residual",
           "gradient_saliency", "blur", "crop_box", "crop_output", "judge"]

#: crop aspect ratio (width / height) unless told otherwise: 16:9, a landscape timeline preview
ASPECT = 16 / 9
#: the blur of a saliency map before its maximum is taken: Gaussian sigma as a share of the image width
BLUR = 0.02
#: what a crop keeps
KEPT = ("top", "bottom", "none")


class CropOutputError(ValueError):
    """A cropper returned neither a box inside the image nor a saliency map of its size."""


def parse_aspect(spec) -> float:
    """A crop aspect ratio (width / height) from ``"16:9"``, ``"4/3"`` or a positive number (docs/METHODS.md §6.8).

    Raises
    ------
    ParameterError
        Anything else (``aspect``).
    """
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        value = float(spec)
    else:
        text = str(spec).strip()
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*[:/x]\s*(\d+(?:\.\d+)?)", text)
        try:
            value = float(m[1]) / float(m[2]) if m else float(text)
        except (ValueError, ZeroDivisionError):
            value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 100 or value < 0.01:
        raise ParameterError("aspect", f"must be a width:height ratio such as 16:9 or a positive number, not {spec!r}")
    return value


def aspect_text(aspect: float) -> str:
    """``16:9`` for 1.777..., else the number."""
    f = Fraction(aspect).limit_denominator(32)
    return f"{f.numerator}:{f.denominator}" if abs(float(f) - aspect) < 1e-9 else f"{aspect:g}"


# --------------------------------------------------------------------------- built-in croppers


def _grey(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image, dtype=np.float32)
    return img @ np.array([0.299, 0.587, 0.114], dtype=np.float32) if img.ndim == 3 else img


def _gauss_kernel(sigma: float) -> np.ndarray:
    r = max(1, int(math.ceil(3 * sigma)))
    x = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def blur(saliency: np.ndarray, sigma: float) -> np.ndarray:
    """A separable Gaussian blur (``sigma`` in pixels, edges replicated) in numpy."""
    out = np.asarray(saliency, dtype=np.float64)
    if sigma <= 0:
        return out
    k = _gauss_kernel(sigma)
    r = len(k) // 2
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (r, r)
        padded = np.pad(out, pad, mode="edge")
        windows = np.lib.stride_tricks.sliding_window_view(padded, len(k), axis=axis)
        out = windows @ k
    return out


def gradient_saliency(image: np.ndarray) -> np.ndarray:
    """Our numpy saliency (docs/METHODS.md §6.8): the gradient magnitude of the grey image (central differences),
    blurred with sigma 1% of the width; edges and texture (eyes, hair, mouth) score high, flat areas and the
    white gap zero."""
    g = _grey(image)
    gy, gx = np.gradient(g)
    return blur(np.hypot(gx, gy), max(1.0, 0.01 * g.shape[1]))


def has_spectral_residual() -> bool:
    """Whether OpenCV's saliency module (opencv-contrib) is installed."""
    try:
        import cv2  # lazy: OpenCV only for the croppers that use it
    except ImportError:  # pragma: no cover - OpenCV is a dependency
        return False
    return hasattr(cv2, "saliency") and hasattr(cv2.saliency, "StaticSaliencySpectralResidual_create")


def spectral_residual(image: np.ndarray) -> np.ndarray:
    """OpenCV's static spectral-residual saliency map (Hou and Zhang 2007; ``cv2.saliency``), floats in [0, 1]."""
    import cv2  # lazy: OpenCV only for the croppers that use it

    sal = cv2.saliency.StaticSaliencySpectralResidual_create()
    ok, m = sal.computeSaliency(np.ascontiguousarray(image[..., ::-1]))  # OpenCV's BGR order
    if not ok:
        raise ValueError("the spectral-residual saliency failed")
    return np.asarray(m, dtype=np.float64)


#: the built-in croppers by name (``saliency`` is resolved by :func:`cropper_name`)
BUILTIN: dict[str, Callable] = {"spectral-residual": spectral_residual, "gradient": gradient_saliency}


def cropper_name(spec: str) -> str:
    """The cropper that ``spec`` names: ``saliency`` resolved to ``spectral-residual`` where OpenCV has it,
    else ``gradient``; other names as given."""
    spec = str(spec).strip()
    if spec == "saliency":
        return "spectral-residual" if has_spectral_residual() else "gradient"
    return spec


def load_cropper(spec: str) -> Callable:
    """The cropper function that ``spec`` names (docs/METHODS.md §6.8): a built-in name (``saliency``,
    ``spectral-residual``, ``gradient``), ``module:function`` or ``path/to/file.py:function``.

    Raises
    ------
    ParameterError
        An unknown name, a module or file that cannot be imported, or no such function (``cropper``).
    """
    name = cropper_name(spec)
    if name in BUILTIN:
        if name == "spectral-residual" and not has_spectral_residual():
            raise ParameterError("cropper", "spectral-residual needs OpenCV's saliency module (opencv-contrib); "
                                            "use saliency or gradient")
        return BUILTIN[name]
    module, sep, func = name.rpartition(":")
    if not sep or not module or not func:
        raise ParameterError("cropper", f"must be saliency, spectral-residual, gradient or module:function, not {spec!r}")
    try:
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise ParameterError("cropper", f"{module}: no such file")
            loader = importlib.util.spec_from_file_location(f"_fairvision_cropper_{abs(hash(module))}", module)
            mod = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
    except ParameterError:
        raise
    except Exception as exc:  # any failure of the user's module is a bad --cropper
        raise ParameterError("cropper", f"cannot import {module!r}: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ParameterError("cropper", f"{module!r} has no function {func!r}")
    return fn


# --------------------------------------------------------------------------- crops and their judgement


def crop_size(height: int, width: int, aspect: float) -> tuple[int, int]:
    """``(crop_height, crop_width)``: the largest box of ``aspect`` (width / height) inside the image."""
    if width / height >= aspect:
        h = height
        w = min(width, max(1, int(round(height * aspect))))
    else:
        w = width
        h = min(height, max(1, int(round(width / aspect))))
    return h, w


def crop_box(saliency: np.ndarray, aspect: float = ASPECT, *, blur_share: float = BLUR) -> tuple[int, int, int, int]:
    """The crop box of a saliency map (docs/METHODS.md §6.8): the largest box of ``aspect`` inside the image,
    centred on the maximum of the map blurred with sigma ``blur_share`` of the width (the first maximum in row
    order on a tie; the image centre for a flat map), moved inside the image.

    Returns
    -------
    tuple of int
        ``(x0, y0, x1, y1)``, ``x1`` and ``y1`` exclusive.
    """
    s = np.asarray(saliency, dtype=np.float64)
    H, W = s.shape
    sm = blur(np.nan_to_num(s), blur_share * W)
    if float(sm.max() - sm.min()) > 0:
        cy, cx = np.unravel_index(int(np.argmax(sm)), sm.shape)
    else:  # a flat map prefers nothing: the centre of the image
        cy, cx = (H - 1) / 2, (W - 1) / 2
    h, w = crop_size(H, W, aspect)
    x0 = int(np.clip(cx + 0.5 - w / 2, 0, W - w) + 0.5)  # rounded, then inside the image
    y0 = int(np.clip(cy + 0.5 - h / 2, 0, H - h) + 0.5)
    x0, y0 = min(x0, W - w), min(y0, H - h)
    return x0, y0, x0 + w, y0 + h


def crop_output(out, shape: tuple[int, int], aspect: float = ASPECT) -> tuple[tuple[int, int, int, int], np.ndarray | None]:
    """What a cropper returned, checked: ``(box, saliency map or None)``.

    Raises
    ------
    CropOutputError
        Neither a box of four numbers inside the image nor a finite, non-negative map of the image's size.
    """
    H, W = shape
    arr = np.asarray(out)
    if arr.ndim == 2:
        if arr.shape != (H, W):
            raise CropOutputError(f"the saliency map is {arr.shape[0]}x{arr.shape[1]}, the image {H}x{W}")
        arr = arr.astype(np.float64)
        if not np.isfinite(arr).all() or (arr < 0).any():
            raise CropOutputError("the saliency map has negative or non-finite values")
        return crop_box(arr, aspect), arr
    if arr.shape != (4,) or not np.issubdtype(arr.dtype, np.number):
        raise CropOutputError(f"a cropper returns a box (x0, y0, x1, y1) or an HxW saliency map, not an array of shape "
                         f"{arr.shape}")
    x0, y0, x1, y1 = (int(round(float(v))) for v in arr)
    if not (0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H):
        raise CropOutputError(f"the crop box {(x0, y0, x1, y1)} is empty or outside the {W}x{H} image")
    return (x0, y0, x1, y1), None


def _overlap(a, b) -> int:
    return max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))


def judge(box, top, bottom, saliency: np.ndarray | None = None) -> dict:
    """Which face a crop keeps (docs/METHODS.md §6.8).

    Parameters
    ----------
    box, top, bottom : tuple of int
        The crop box and the two face boxes, ``(x0, y0, x1, y1)`` with ``x1``, ``y1`` exclusive.
    saliency : numpy.ndarray, optional
        The cropper's map, for the share of saliency mass inside each face box.

    Returns
    -------
    dict
        ``kept`` (``top`` when the top face box holds the larger share of the crop's area, ``bottom`` when the
        bottom one does, ``none`` on a tie, e.g. a crop touching neither), ``top_share`` and ``bottom_share``
        (share of the crop's area in each face box), ``top_mass`` and ``bottom_mass`` (share of the map's total
        mass in each face box; NaN without a map or with an empty map), ``kept_by_mass`` (the face whose box
        holds the larger share of the mass, ``none`` on a tie, empty without a map).
    """
    area = (box[2] - box[0]) * (box[3] - box[1])
    ts, bs = _overlap(box, top) / area, _overlap(box, bottom) / area
    tm = bm = math.nan
    if saliency is not None:
        total = float(saliency.sum())
        if total > 0:
            tm = float(saliency[top[1]:top[3], top[0]:top[2]].sum()) / total
            bm = float(saliency[bottom[1]:bottom[3], bottom[0]:bottom[2]].sum()) / total
    kept = "top" if ts > bs else "bottom" if bs > ts else "none"
    by_mass = "" if math.isnan(tm) else "top" if tm > bm else "bottom" if bm > tm else "none"
    return {"kept": kept, "top_share": ts, "bottom_share": bs, "top_mass": tm, "bottom_mass": bm, "kept_by_mass": by_mass}

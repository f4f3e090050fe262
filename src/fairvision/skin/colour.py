"""Colour maths: sRGB <-> linear RGB <-> XYZ (D65) <-> CIELAB, hue, chroma, ITA, CIEDE2000.

Implements docs/METHODS.md §1. Everything is vectorised over arrays of shape
``(..., 3)``; :func:`srgb_to_lab` returns float32 by default (uint8 input is
linearised with a 256-entry lookup table computed in float64; the cube roots
run in float64 so float32 results stay within 1e-4 of a float64 reference).

Conventions
-----------
- sRGB companding is the exact IEC 61966-2-1 piecewise curve (threshold
  0.04045 on the encoded side, 0.0031308 on the linear side).
- The RGB -> XYZ matrix is the one printed in IEC 61966-2-1 (four decimals);
  the CIELAB reference white is D65 at (x, y) = (0.3127, 0.3290) with Y = 1.
  This is also colour-science's convention. (sRGB white then maps to
  L* = 100, a* = 0.0077, b* = 0.0035 rather than exactly zero, because the
  standard's rounded matrix sums to X = 0.9505, Z = 1.0890.) scikit-image uses
  a different, unrounded matrix and white, so it differs by up to ~0.03 in
  a*, b*.
- CIELAB uses the exact CIE constants epsilon = 216/24389, kappa = 24389/27.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError

__all__ = [
    "D65_XY",
    "D65_WHITE",
    "RGB_TO_XYZ",
    "XYZ_TO_RGB",
    "srgb_to_linear",
    "linear_to_srgb",
    "srgb_to_xyz",
    "xyz_to_lab",
    "lab_to_xyz",
    "xyz_to_srgb",
    "srgb_to_lab",
    "lab_to_srgb",
    "chroma",
    "hue_angle",
    "ita",
    "ciede2000",
    "gray_level",
    "CIE_EPSILON",
    "CIE_KAPPA",
]

D65_XY = (0.3127, 0.3290)
#: CIE constants of the CIELAB companding function, exact values.
CIE_EPSILON = 216.0 / 24389.0
CIE_KAPPA = 24389.0 / 27.0


def _xy_to_xyz(x: float, y: float) -> np.ndarray:
    return np.array([x / y, 1.0, (1.0 - x - y) / y])


#: XYZ of the D65 reference white (Y = 1).
D65_WHITE = _xy_to_xyz(*D65_XY)
#: Linear sRGB -> XYZ (D65), rows X, Y, Z, as printed in IEC 61966-2-1.
RGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
#: XYZ (D65) -> linear sRGB.
XYZ_TO_RGB = np.linalg.inv(RGB_TO_XYZ)

_LUT8 = None


def _lut8() -> np.ndarray:
    global _LUT8
    if _LUT8 is None:
        c = np.arange(256, dtype=np.float64) / 255.0
        _LUT8 = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return _LUT8


def _check_last3(arr: np.ndarray, what: str) -> None:
    if arr.ndim == 0 or arr.shape[-1] != 3:
        raise FairvisionError(f"expected {what} values with a last axis of length 3, got shape {arr.shape}")


def _as_float(rgb, dtype) -> np.ndarray:
    """Encoded sRGB as floats in [0, 1]; uint8 is divided by 255."""
    arr = np.asarray(rgb)
    _check_last3(arr, "RGB")
    if arr.dtype == np.uint8:
        return arr.astype(dtype) / dtype(255.0)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise FairvisionError(f"RGB values must be uint8 (0-255) or float in [0, 1], got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.integer):
        raise FairvisionError(f"integer RGB values must be uint8 (0-255), got dtype {arr.dtype}")
    out = arr.astype(dtype, copy=False)
    if out.size:
        lo, hi = float(np.nanmin(out)), float(np.nanmax(out))
        if lo < -1e-6 or hi > 1 + 1e-6:
            raise FairvisionError(
                f"float RGB values must lie in [0, 1], got range [{lo:g}, {hi:g}] (pass uint8 for 0-255 data)"
            )
    return out


def srgb_to_linear(rgb, *, dtype=np.float32) -> np.ndarray:
    """Decode sRGB (IEC 61966-2-1) to linear RGB.

    Parameters
    ----------
    rgb : array_like, shape (..., 3)
        uint8 (0-255) or float in [0, 1].
    dtype : numpy float type
        Output precision (default float32).

    Returns
    -------
    numpy.ndarray
        Linear RGB in [0, 1], same shape.
    """
    arr = np.asarray(rgb)
    _check_last3(arr, "RGB")
    if arr.dtype == np.uint8:
        return _lut8().astype(dtype)[arr]
    c = _as_float(arr, dtype)
    return np.where(c <= 0.04045, c / dtype(12.92), ((c + dtype(0.055)) / dtype(1.055)) ** dtype(2.4)).astype(dtype, copy=False)


def linear_to_srgb(linear) -> np.ndarray:
    """Encode linear RGB with the sRGB curve (IEC 61966-2-1); no clipping."""
    lin = np.asarray(linear)
    dt = lin.dtype if np.issubdtype(lin.dtype, np.floating) else np.float64
    lin = lin.astype(dt, copy=False)
    pos = np.maximum(lin, 0)
    enc = dt.type(1.055) * pos ** (dt.type(1.0) / dt.type(2.4)) - dt.type(0.055)
    return np.where(lin <= 0.0031308, lin * dt.type(12.92), enc)


def srgb_to_xyz(rgb, *, dtype=np.float32) -> np.ndarray:
    """sRGB (uint8 or float [0, 1]) -> CIE XYZ under D65, Y of white = 1."""
    lin = srgb_to_linear(rgb, dtype=dtype)
    return lin @ RGB_TO_XYZ.T.astype(dtype)


_F_TO_LAB = np.array([[0.0, 500.0, 0.0], [116.0, -500.0, 200.0], [0.0, 0.0, -200.0]])  # (fx, fy, fz) -> (L*, a*, b*)
_LAB_OFFSET = np.array([-16.0, 0.0, 0.0])


def _linear_to_lab(lin: np.ndarray, dtype) -> np.ndarray:
    """Linear RGB -> CIELAB; XYZ and f(t) in float64 (a* = 500 (fx - fy) amplifies
    float32 rounding to ~1e-4), result cast to ``dtype``."""
    m = (RGB_TO_XYZ / D65_WHITE[:, None]).T  # scale rows by the white: t = XYZ / white
    f = _f(lin.astype(np.float64) @ m)
    return (f @ _F_TO_LAB + _LAB_OFFSET).astype(dtype, copy=False)


def _f(t: np.ndarray) -> np.ndarray:
    dt = t.dtype.type
    return np.where(t > dt(CIE_EPSILON), np.cbrt(t), (dt(CIE_KAPPA) * t + dt(16.0)) / dt(116.0))


def xyz_to_lab(xyz, white=D65_WHITE) -> np.ndarray:
    """CIE XYZ -> CIELAB relative to ``white`` (default D65, Y = 1)."""
    xyz = np.asarray(xyz)
    _check_last3(xyz, "XYZ")
    dt = xyz.dtype if np.issubdtype(xyz.dtype, np.floating) else np.dtype(np.float64)
    t = xyz.astype(dt, copy=False) / np.asarray(white, dtype=dt)
    f = _f(t)
    fx, fy, fz = f[..., 0], f[..., 1], f[..., 2]
    return np.stack([dt.type(116.0) * fy - dt.type(16.0), dt.type(500.0) * (fx - fy), dt.type(200.0) * (fy - fz)], axis=-1)


def lab_to_xyz(lab, white=D65_WHITE) -> np.ndarray:
    """CIELAB -> CIE XYZ relative to ``white`` (inverse of :func:`xyz_to_lab`)."""
    lab = np.asarray(lab)
    _check_last3(lab, "Lab")
    dt = lab.dtype if np.issubdtype(lab.dtype, np.floating) else np.dtype(np.float64)
    lab = lab.astype(dt, copy=False)
    L, a, b = lab[..., 0], lab[..., 1], lab[..., 2]
    fy = (L + 16.0) / 116.0
    fx = fy + a / 500.0
    fz = fy - b / 200.0

    def finv(f):
        f3 = f ** 3
        return np.where(f3 > CIE_EPSILON, f3, (116.0 * f - 16.0) / CIE_KAPPA)

    yr = np.where(L > CIE_KAPPA * CIE_EPSILON, fy ** 3, L / CIE_KAPPA)
    xyz = np.stack([finv(fx), yr, finv(fz)], axis=-1).astype(dt, copy=False)
    return xyz * np.asarray(white, dtype=dt)


def xyz_to_srgb(xyz, *, clip: bool = True) -> np.ndarray:
    """CIE XYZ (D65) -> encoded sRGB floats; ``clip`` limits to [0, 1]."""
    xyz = np.asarray(xyz)
    dt = xyz.dtype if np.issubdtype(xyz.dtype, np.floating) else np.dtype(np.float64)
    lin = xyz.astype(dt, copy=False) @ XYZ_TO_RGB.T.astype(dt)
    rgb = linear_to_srgb(lin)
    return np.clip(rgb, 0.0, 1.0) if clip else rgb


def srgb_to_lab(rgb, *, dtype=np.float32) -> np.ndarray:
    """sRGB -> CIELAB (D65 white), docs/METHODS.md §1.1.

    Parameters
    ----------
    rgb : array_like, shape (..., 3)
        uint8 (0-255) or float in [0, 1] encoded sRGB.
    dtype : numpy float type
        Working and output precision (default float32; pass ``np.float64``
        for reference-grade results).

    Returns
    -------
    numpy.ndarray, shape (..., 3)
        L* in [0, 100], a*, b*.
    """
    return _linear_to_lab(srgb_to_linear(rgb, dtype=dtype), dtype)


def lab_to_srgb(lab, *, as_uint8: bool = False, clip: bool = True) -> np.ndarray:
    """CIELAB (D65) -> encoded sRGB, the inverse of :func:`srgb_to_lab`.

    Parameters
    ----------
    lab : array_like, shape (..., 3)
    as_uint8 : bool
        Return uint8 0-255 (rounded, always clipped) instead of floats.
    clip : bool
        Clip out-of-gamut floats to [0, 1] (default).

    Returns
    -------
    numpy.ndarray
        Float array in [0, 1] (or uint8 when ``as_uint8``), shape (..., 3).
    """
    rgb = xyz_to_srgb(lab_to_xyz(lab), clip=clip or as_uint8)
    if as_uint8:
        return np.rint(rgb * 255.0).astype(np.uint8)
    return rgb


def _lab_parts(lab):
    lab = np.asarray(lab)
    _check_last3(lab, "Lab")
    if not np.issubdtype(lab.dtype, np.floating):
        lab = lab.astype(np.float64)
    return lab[..., 0], lab[..., 1], lab[..., 2]


def chroma(lab) -> np.ndarray:
    """Chroma C*ab = sqrt(a*^2 + b*^2) (docs/METHODS.md §1.2)."""
    _, a, b = _lab_parts(lab)
    return np.hypot(a, b)


def hue_angle(lab, *, convention: str = "atan2") -> np.ndarray:
    """Hue angle h*ab in degrees (docs/METHODS.md §1.2).

    Parameters
    ----------
    lab : array_like, shape (..., 3)
    convention : {"atan2", "signed", "arctan"}
        ``"atan2"`` (the definition): atan2(b*, a*) in [0, 360).
        ``"signed"``: the same angle in (-180, 180], continuous across red
        (0 deg), which is where skin hues wrap; used internally to cluster
        and average skin hues. ``"arctan"``: the published code's quirk,
        arctan(b* / (a* + 1e-8)) in (-90, 90), which sends a* < 0 to
        negative angles (Thong et al. reference implementation).
    """
    _, a, b = _lab_parts(lab)
    if convention == "arctan":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.degrees(np.arctan(b / (a + 1e-8)))
    h = np.degrees(np.arctan2(b, a))
    if convention == "signed":
        return h
    if convention != "atan2":
        raise FairvisionError(f"unknown hue convention {convention!r}; use 'atan2', 'signed' or 'arctan'")
    h = np.where(h < 0, h + 360.0, h)
    return np.where(h >= 360.0, h - 360.0, h)


def ita(lab) -> np.ndarray:
    """Individual typology angle, ITA = arctan((L* - 50) / b*) in degrees (docs/METHODS.md §1.2).

    The b* -> 0 limit is taken exactly: ITA = +90 (L* > 50), -90 (L* < 50)
    or 0 (L* = 50), computed as ``atan2((L* - 50) * sign(b*), |b*|)`` with
    sign(0) = +1, which equals the arctan form wherever b* != 0.
    """
    L, _, b = _lab_parts(lab)
    s = np.where(b < 0, -1.0, 1.0).astype(L.dtype, copy=False)
    return np.degrees(np.arctan2((L - 50.0) * s, np.abs(b)))


def ciede2000(lab1, lab2, *, kL: float = 1.0, kC: float = 1.0, kH: float = 1.0) -> np.ndarray:
    """CIEDE2000 colour difference, vectorised with broadcasting.

    Follows Sharma, Wu and Dalal (2005), "The CIEDE2000 color-difference
    formula: implementation notes, supplementary test data, and mathematical
    observations", equations (1)-(21), including their handling of the hue
    mean and difference when a chroma is zero. Computed in float64.
    """
    L1, a1, b1 = (x.astype(np.float64) for x in _lab_parts(lab1))
    L2, a2, b2 = (x.astype(np.float64) for x in _lab_parts(lab2))
    C1 = np.hypot(a1, b1)
    C2 = np.hypot(a2, b2)
    Cbar7 = ((C1 + C2) / 2.0) ** 7
    G = 0.5 * (1.0 - np.sqrt(Cbar7 / (Cbar7 + 25.0 ** 7)))
    a1p = (1.0 + G) * a1
    a2p = (1.0 + G) * a2
    C1p = np.hypot(a1p, b1)
    C2p = np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360.0
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360.0
    h1p = np.where((b1 == 0) & (a1p == 0), 0.0, h1p)
    h2p = np.where((b2 == 0) & (a2p == 0), 0.0, h2p)

    dLp = L2 - L1
    dCp = C2p - C1p
    zero = (C1p * C2p) == 0
    dh = h2p - h1p
    dh = np.where(dh > 180.0, dh - 360.0, np.where(dh < -180.0, dh + 360.0, dh))
    dh = np.where(zero, 0.0, dh)
    dHp = 2.0 * np.sqrt(C1p * C2p) * np.sin(np.radians(dh) / 2.0)

    Lbp = (L1 + L2) / 2.0
    Cbp = (C1p + C2p) / 2.0
    hsum = h1p + h2p
    hbar = np.where(
        np.abs(h1p - h2p) <= 180.0,
        hsum / 2.0,
        np.where(hsum < 360.0, (hsum + 360.0) / 2.0, (hsum - 360.0) / 2.0),
    )
    hbar = np.where(zero, hsum, hbar)
    T = (
        1.0
        - 0.17 * np.cos(np.radians(hbar - 30.0))
        + 0.24 * np.cos(np.radians(2.0 * hbar))
        + 0.32 * np.cos(np.radians(3.0 * hbar + 6.0))
        - 0.20 * np.cos(np.radians(4.0 * hbar - 63.0))
    )
    dtheta = 30.0 * np.exp(-(((hbar - 275.0) / 25.0) ** 2))
    Cbp7 = Cbp ** 7
    RC = 2.0 * np.sqrt(Cbp7 / (Cbp7 + 25.0 ** 7))
    SL = 1.0 + 0.015 * (Lbp - 50.0) ** 2 / np.sqrt(20.0 + (Lbp - 50.0) ** 2)
    SC = 1.0 + 0.045 * Cbp
    SH = 1.0 + 0.015 * Cbp * T
    RT = -np.sin(np.radians(2.0 * dtheta)) * RC
    tL = dLp / (kL * SL)
    tC = dCp / (kC * SC)
    tH = dHp / (kH * SH)
    return np.sqrt(tL ** 2 + tC ** 2 + tH ** 2 + RT * tC * tH)


def gray_level(rgb) -> np.ndarray:
    """Grey level 0-255 of encoded sRGB: 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601).

    This is the luma of OpenCV's ``COLOR_RGB2GRAY`` and PIL's ``"L"`` mode,
    used for BiasPainter's mean grey level of face-skin pixels, unrounded
    (docs/METHODS.md §2.3).
    """
    arr = np.asarray(rgb)
    _check_last3(arr, "RGB")
    scale = 1.0 if arr.dtype == np.uint8 else 255.0
    x = arr.astype(np.float32) if arr.dtype == np.uint8 else _as_float(arr, np.float32)
    return (x @ np.array([0.299, 0.587, 0.114], dtype=np.float32)) * np.float32(scale)

"""Shift the colour of an image region along one CIELAB axis, measured on the 8-bit result (docs/METHODS.md §7.5).

A colorimetric skin-colour transect needs no GAN: inside a mask only, add ``delta`` to CIELAB L* or rotate
the hue angle h* by ``delta`` degrees at constant L* and chroma, map colours that leave the sRGB gamut back by
reducing chroma at constant L* and h* (:func:`gamut_map_chroma`), quantise to uint8, and *measure* the result:
the region's mean L* and the hue of its mean (a*, b*) (:func:`region_colour`) are recomputed from the uint8
pixels, and the applied offsets are corrected until the measured shift matches the request while the other
axis stays put. Pixels outside the mask are copied unchanged.

:func:`shift_region_colour` is the edit; the diagnosis audit's
:func:`fairvision.audits.diagnosis.counterfactual.audit_colour_transect` checks it, and the generative
colour editor uses it to make its outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairvision.errors import FairvisionError, ParameterError
from fairvision.skin.colour import lab_to_srgb, srgb_to_lab

#: the axes a region can be shifted along: lightness L* and hue angle h*
AXES = ("L", "h")


def region_colour(lab: np.ndarray) -> tuple[float, float]:
    """Mean L* and the hue angle (degrees, [0, 360)) of the mean (a*, b*) of ``(N, 3)`` Lab pixels.

    The hue of the mean chroma vector is used instead of a mean of angles: it
    is well defined for near-grey pixels and a rotation of every pixel's hue
    by ``d`` rotates it by exactly ``d`` (docs/METHODS.md §7.5).
    """
    lab = np.asarray(lab, dtype=np.float64)
    return float(lab[:, 0].mean()), float(np.degrees(np.arctan2(lab[:, 2].mean(), lab[:, 1].mean())) % 360.0)


def wrap_degrees(deg: float) -> float:
    """A difference of two angles in degrees, wrapped to [-180, 180)."""
    return float((deg + 180.0) % 360.0 - 180.0)


def _in_gamut_rgb(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rgb = lab_to_srgb(lab, clip=False)
    ok = np.all((rgb >= -1e-6) & (rgb <= 1 + 1e-6), axis=-1)
    return rgb, ok


def gamut_map_chroma(lab: np.ndarray, *, iterations: int = 22) -> tuple[np.ndarray, np.ndarray]:
    """Bring out-of-gamut Lab colours into sRGB by scaling chroma down at constant L* and h* (docs/METHODS.md §7.5).

    Vectorised bisection on the chroma scale of the out-of-gamut rows only.
    L* must lie in [0, 100] (the grey axis is then in gamut).

    Returns
    -------
    (lab_mapped, was_out) : arrays ``(N, 3)`` and ``(N,)`` bool
    """
    lab = np.asarray(lab, dtype=np.float64).copy()
    _, ok = _in_gamut_rgb(lab)
    out = ~ok
    if out.any():
        sub = lab[out]
        lo, hi = np.zeros(len(sub)), np.ones(len(sub))
        for _ in range(iterations):
            mid = (lo + hi) / 2
            trial = sub.copy()
            trial[:, 1:] *= mid[:, None]
            _, good = _in_gamut_rgb(trial)
            lo = np.where(good, mid, lo)
            hi = np.where(good, hi, mid)
        sub[:, 1:] *= lo[:, None]
        lab[out] = sub
    return lab, out


@dataclass(frozen=True)
class RegionShift:
    """An image whose masked region was shifted along L* or h*, with what was measured on the uint8 result.

    Attributes
    ----------
    image : ndarray (H, W, 3) uint8
        The edited image; pixels outside ``mask`` are the input's.
    mask : ndarray (H, W) bool
        The region that was shifted.
    axis : {"L", "h"}
        The axis that was shifted.
    L_before, L_after, h_before, h_after : float
        The region's mean L* and the hue of its mean (a*, b*) before and after (:func:`region_colour`);
        the hues mean nothing when ``hue_defined`` is false.
    chroma_before : float
        Chroma of the region's mean (a*, b*) before the shift.
    hue_defined : bool
        Whether ``chroma_before`` reaches ``min_chroma``.
    share_gamut_mapped, share_L_clipped : float
        Shares of the region's pixels whose chroma was reduced to stay in sRGB, and whose L* left [0, 100].
    iterations : int
        The correction step whose result was kept.
    applied_L_offset, applied_h_offset : float
        The offsets that step applied.
    lab_before, lab_after : ndarray (N, 3)
        The region's pixels in CIELAB before and after (measured on the uint8 result).
    """

    image: np.ndarray
    mask: np.ndarray
    axis: str
    L_before: float
    L_after: float
    h_before: float
    h_after: float
    chroma_before: float
    hue_defined: bool
    share_gamut_mapped: float
    share_L_clipped: float
    iterations: int
    applied_L_offset: float
    applied_h_offset: float
    lab_before: np.ndarray
    lab_after: np.ndarray

    @property
    def L_change(self) -> float:
        """Achieved change of the region's mean L*."""
        return self.L_after - self.L_before

    @property
    def h_change(self) -> float:
        """Achieved rotation of the hue of the region's mean (a*, b*), degrees (NaN when the hue is undefined)."""
        return wrap_degrees(self.h_after - self.h_before) if self.hue_defined else float("nan")


def _checked_region(image_rgb: np.ndarray, mask: np.ndarray, axis: str, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """The image and the mask as a bool array, after checking shapes, ``axis`` and ``delta``."""
    img = np.asarray(image_rgb)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise FairvisionError(f"transect expects an (H, W, 3) uint8 RGB image, got shape {img.shape} {img.dtype}")
    m = np.asarray(mask)
    if m.shape != img.shape[:2]:
        raise FairvisionError(f"skin mask shape {m.shape} does not match the image {img.shape[:2]}")
    m = m.astype(bool)
    if axis not in AXES:
        raise ParameterError("axis", f"must be L (lightness) or h (hue angle), not {axis!r}")
    if not np.isfinite(delta):
        raise ParameterError("delta", "must be a finite number")
    if not m.any():
        raise FairvisionError("the skin mask is empty; nothing to shift")
    return img, m


def _render(lab0: np.ndarray, off_l: float, off_h: float) -> tuple[np.ndarray, float, float]:
    """Region pixels with the L* offset and the hue rotation applied, L* clipped to [0, 100], gamut mapped
    and quantised: ``(uint8 pixels, share gamut mapped, share L* clipped)``."""
    lab = lab0.copy()
    lab[:, 0] += off_l
    if off_h:
        th = np.radians(off_h)
        a, b = lab[:, 1].copy(), lab[:, 2].copy()
        lab[:, 1], lab[:, 2] = a * np.cos(th) - b * np.sin(th), a * np.sin(th) + b * np.cos(th)
    clipped_l = (lab[:, 0] < 0) | (lab[:, 0] > 100)
    lab[:, 0] = np.clip(lab[:, 0], 0.0, 100.0)
    mapped, was_out = gamut_map_chroma(lab)
    return lab_to_srgb(mapped, as_uint8=True), was_out.mean(), clipped_l.mean()


def _best_offsets(lab0: np.ndarray, axis: str, delta: float, hue_defined: bool, tolerance: float,
                  other_tolerance: float, max_iter: int) -> tuple:
    """Correct the applied offsets until the measured shift matches ``delta``; the best iterate:
    ``(score, pixels, lab after, L after, h after, share gamut mapped, share clipped, step, L offset, h offset)``."""
    l0, h0 = region_colour(lab0)
    target_l = float(delta) if axis == "L" else 0.0
    target_h = float(delta) if axis == "h" else 0.0
    off_l, off_h = target_l, target_h
    gain = {"L": 1.0, "h": 1.0}
    prev: dict = {"L": None, "h": None}
    best = None
    for it in range(1, max_iter + 1):
        new_px, share_out, share_clip = _render(lab0, off_l, off_h)
        lab1 = srgb_to_lab(new_px, dtype=np.float64)
        l1, h1 = region_colour(lab1)
        err_l = (l1 - l0) - target_l
        err_h = wrap_degrees(h1 - h0) - target_h if hue_defined else 0.0
        main, other = (err_l, err_h) if axis == "L" else (err_h, err_l)
        score = max(abs(main) / tolerance, abs(other) / other_tolerance)
        if best is None or score < best[0]:
            best = (score, new_px, lab1, l1, h1, share_out, share_clip, it, off_l, off_h)
        if abs(main) <= 0.05 and abs(other) <= 0.25 * other_tolerance:
            break
        # the applied offsets absorb the measured shortfall (gamut mapping, clipping, rounding); the other
        # axis is only corrected when it drifts noticeably (on low-chroma skin, uint8 rounding couples L* and
        # h*), and a step whose error changes sign is halved next time, which stops oscillation
        for ax_name, err in (("L", err_l), ("h", err_h)):
            if ax_name != axis and abs(err) <= 0.25 * other_tolerance:
                continue
            if prev[ax_name] is not None and np.sign(err) != np.sign(prev[ax_name]):
                gain[ax_name] *= 0.5
            prev[ax_name] = err
            if ax_name == "L":
                off_l -= gain["L"] * err
            else:
                off_h -= gain["h"] * err
    return best


def shift_region_colour(
    image_rgb: np.ndarray,
    mask: np.ndarray,
    *,
    axis: str = "L",
    delta: float = 10.0,
    tolerance: float = 1.0,
    other_tolerance: float = 2.0,
    max_iter: int = 10,
    min_chroma: float = 2.0,
) -> RegionShift:
    """Shift the masked region's L* (or rotate its h*) by ``delta``, measured on the uint8 result (docs/METHODS.md §7.5).

    Parameters
    ----------
    image_rgb : ndarray (H, W, 3) uint8
    mask : ndarray (H, W) bool
        The region (skin pixels); only these change.
    axis : {"L", "h"}
        ``L``: add ``delta`` to L* (positive = lighter). ``h``: rotate the hue
        angle by ``delta`` degrees at constant L* and chroma (positive =
        yellower, negative = redder).
    delta : float
        Requested change of the region's mean L* (L* units) or of the hue of
        its mean (a*, b*) (degrees).
    tolerance, other_tolerance : float
        Accepted error on the requested axis and drift of the other axis: they weigh the two errors when the
        best correction step is chosen.
    max_iter : int
        Corrections of the applied offsets: gamut mapping, L* clipping to
        [0, 100] and uint8 rounding shrink the achieved shift and make the
        other axis drift, so the requested offset absorbs the measured error
        until it is within 0.05, and a compensating offset on the other axis
        is applied when that one drifts by more than a quarter of its
        tolerance (steps are halved when the error changes sign; the best
        iterate is kept).
    min_chroma : float
        Below this chroma of the region's mean (a*, b*) the hue is undefined
        (e.g. black-and-white photos): h* shifts are refused and L* shifts
        keep no hue (``hue_defined`` false).

    Returns
    -------
    RegionShift
    """
    img, m = _checked_region(image_rgb, mask, axis, delta)
    lab0 = srgb_to_lab(img[m], dtype=np.float64)
    l0, h0 = region_colour(lab0)
    c0 = float(np.hypot(lab0[:, 1].mean(), lab0[:, 2].mean()))
    hue_defined = c0 >= min_chroma
    if axis == "h" and not hue_defined:
        raise FairvisionError(f"the skin region is almost grey (mean chroma {c0:.2f} < {min_chroma}); "
                              "its hue angle is undefined, so an h* transect is impossible")
    _, new_px, lab1, l1, h1, share_out, share_clip, it, off_l, off_h = _best_offsets(
        lab0, axis, delta, hue_defined, tolerance, other_tolerance, max_iter)
    out = img.copy()
    out[m] = new_px
    return RegionShift(
        image=out, mask=m, axis=axis, L_before=l0, L_after=l1, h_before=h0, h_after=h1, chroma_before=c0,
        hue_defined=bool(hue_defined), share_gamut_mapped=float(share_out), share_L_clipped=float(share_clip),
        iterations=int(it), applied_L_offset=float(off_l), applied_h_offset=float(off_h), lab_before=lab0,
        lab_after=lab1,
    )

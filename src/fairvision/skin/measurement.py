"""Measure the apparent skin colour of one image: mask, smoothing, estimator,
per-image spread, stability and quality flags (docs/METHODS.md §2).

A missing face, an empty mask or too few skin pixels is a recorded outcome
(``ok=False`` with a ``reason``), not an exception. Exceptions
(:class:`~fairvision.errors.FairvisionError`) are kept for user mistakes: a
mask whose shape does not match the image, an unknown method, a malformed array.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairvision.errors import FairvisionError, InputFileError
from fairvision.skin.colour import CIE_EPSILON, CIE_KAPPA, D65_WHITE, RGB_TO_XYZ, gray_level, hue_angle, srgb_to_lab
from fairvision.skin.estimators import METHODS, estimate
from fairvision.skin.thong import thong_bootstrap, thong_features, thong_from_features
from fairvision.skin.thong_published import published_lab

__all__ = ["SkinMeasurement", "measure", "measure_pixels", "smooth_skin_pixels", "load_mask", "DEFAULTS"]

#: Defaults of the quality checks (all overridable as keyword arguments).
DEFAULTS = {
    "min_pixels": 100,  # fewer skin pixels -> ok=False
    "n_boot": 10,  # bootstrap replicates for the stability measure
    "boot_size": 20000,  # pixels per replicate (all pixels when fewer); thong always redraws all n pixels
    "seed": 0,  # fixed, so measurements are reproducible
    "max_L_sd": 1.5,  # stability: bootstrap sd of L* above this -> "low_stability" (docs/METHODS.md §2.2)
    "max_hue_sd": 3.0,  # ... sd of h* (deg) above this -> "low_stability"
    "max_gray_sd": 2.0,  # ... sd of grey level (gray_mean only)
    "max_ita_sd": 2.0,  # ... sd of ITA (median_ita only)
    "clip_fraction": 0.05,  # share of near-saturated / near-black pixels that flags clipping
    "min_chroma": 3.0,  # median C* of the skin pixels below this -> "achromatic" (hue meaningless, e.g. greyscale)
}


@dataclass
class SkinMeasurement:
    """Apparent skin colour of one image.

    Attributes
    ----------
    L, a, b : float
        CIELAB (D65) estimate; NaN when ``ok`` is false.
    hue : float
        Hue angle h* = atan2(b*, a*) in degrees, [0, 360) (the
        ``thong-published`` method reports its arctan quirk instead).
    ita, chroma : float
        Individual typology angle (degrees) and chroma C*.
    gray : float
        Mean grey level (BT.601 luma, 0-255) of the raw skin pixels.
    n_pixels : int
        Number of skin pixels measured.
    method : str
        Estimator name.
    flags : tuple of str
        Quality flags: ``too_few_pixels``, ``no_mask``, ``low_stability``,
        ``clipped_highlights``, ``clipped_shadows``, ``achromatic`` (median
        chroma of the skin pixels below 3: a greyscale or washed-out image
        whose hue means nothing), ``low_trust_mask``, ``multiple_faces``.
    spread : dict
        Spread of the skin pixels themselves: ``L_iqr``, ``L_sd``,
        ``hue_iqr``, ``hue_sd`` (hue as a signed angle).
    stability : dict
        Standard deviation of the estimate over ``n_boot`` bootstrap
        replicates (``L_sd``, ``hue_sd``, and ``gray_sd`` / ``ita_sd``): how
        much the answer moves when the pixels are redrawn (fixed seed, so
        reproducible); ``boot_pixels`` is the replicate size. For ``thong``
        (docs/METHODS.md §2.2) a replicate redraws all ``n`` pixels as
        multinomial counts over its order-free histogram summary (cluster
        sizes, then each cluster's L* and h* histograms), keeps each pixel's
        cluster and recomputes the Sturges modes, the top-3 choice and the
        weighted mean, so the SD is the standard error of the reported answer
        and, like the answer, does not depend on the order of the pixels.
        Other methods resample ``min(n, boot_size)`` pixels (with more pixels
        than that the SD overstates the uncertainty: conservative).
    ok : bool
    reason : str or None
        Why there is no measurement (``ok`` false).
    """

    L: float = float("nan")
    a: float = float("nan")
    b: float = float("nan")
    hue: float = float("nan")
    ita: float = float("nan")
    chroma: float = float("nan")
    gray: float = float("nan")
    n_pixels: int = 0
    method: str = "thong"
    flags: tuple = ()
    spread: dict = field(default_factory=dict)
    stability: dict = field(default_factory=dict)
    ok: bool = False
    reason: str | None = None
    mask_method: str | None = None
    n_faces: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Flat dict of scalars (one table row): spread and stability become
        ``spread_*`` / ``stability_*`` columns, flags a ``;``-joined string."""
        d = {
            "L": self.L, "a": self.a, "b": self.b, "hue": self.hue, "ita": self.ita, "chroma": self.chroma,
            "gray": self.gray, "n_pixels": int(self.n_pixels), "method": self.method, "ok": bool(self.ok),
            "reason": self.reason, "flags": ";".join(self.flags), "mask_method": self.mask_method,
            "n_faces": self.n_faces,
        }
        for k in ("L_iqr", "L_sd", "hue_iqr", "hue_sd"):
            d[f"spread_{k}"] = float(self.spread.get(k, float("nan")))
        for k in ("L_sd", "hue_sd", "gray_sd", "ita_sd"):
            d[f"stability_{k}"] = float(self.stability.get(k, float("nan")))
        return d


def _failed(method, reason, flags, n_pixels=0, **kw) -> SkinMeasurement:
    return SkinMeasurement(method=method, ok=False, reason=reason, flags=tuple(flags), n_pixels=int(n_pixels), **kw)


def _percentiles(x: np.ndarray, ps, bounds: tuple | None = None) -> np.ndarray:
    """``numpy.percentile(x, ps)`` (linear interpolation) of a 1-D float array, exact.

    A 1024-bin histogram locates the bin holding each needed order statistic;
    only that bin's values are partitioned (numpy's partition of the whole
    array is several times slower). ``bounds``: the smallest and largest value,
    when already known.
    """
    x = np.asarray(x).ravel()
    n = x.size
    if n < 4096:
        return np.percentile(x, ps)
    if bounds is None:
        lo, hi = x.min(), x.max()
    else:
        lo, hi = x.dtype.type(bounds[0]), x.dtype.type(bounds[1])
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi == lo:
        return np.percentile(x, ps)
    nb = 1024
    b = (x - lo) * (np.float64(nb) / (np.float64(hi) - np.float64(lo)) if x.dtype == np.float64
                    else x.dtype.type(nb / (float(hi) - float(lo))))
    b = b.astype(np.intp)
    np.minimum(b, nb - 1, out=b)  # monotone in x, so order statistics fall in the bins their ranks say
    cum = np.cumsum(np.bincount(b, minlength=nb))
    cache: dict = {}

    def order_stat(r: int) -> float:
        j = int(np.searchsorted(cum, r, side="right"))
        if j not in cache:
            cache[j] = np.sort(x[b == j])
        return float(cache[j][r - (int(cum[j - 1]) if j else 0)])

    out = []
    for p in np.atleast_1d(ps):
        q = float(p) / 100.0 * (n - 1)
        k0 = int(np.floor(q))
        t = q - k0
        v0 = order_stat(k0)
        v1 = order_stat(min(k0 + 1, n - 1))
        out.append(v1 - (v1 - v0) * (1.0 - t) if t >= 0.5 else v0 + (v1 - v0) * t)
    return np.array(out)


def _pixel_spread(lab: np.ndarray, L: np.ndarray | None = None, h: np.ndarray | None = None,
                  ranges=(None, None)) -> dict:
    if L is None:
        L = lab[:, 0]
        h = hue_angle(lab, convention="signed")
    qL = _percentiles(L, [25, 75], ranges[0])
    qh = _percentiles(h, [25, 75], ranges[1])
    return {"L_iqr": float(qL[1] - qL[0]), "L_sd": float(_sd(L)), "hue_iqr": float(qh[1] - qh[0]),
            "hue_sd": float(_sd(h))}


def _sd(x: np.ndarray, ddof: int = 0) -> np.ndarray:
    """``numpy.std(x, axis=0, ddof=ddof, dtype=float64)``: the same operations in the same order (mean from
    the same sum, squared deviations summed the same way), without its Python wrapper."""
    n = x.shape[0]
    dev = x - np.add.reduce(x, axis=0, dtype=np.float64, keepdims=True) / n
    np.multiply(dev, dev, out=dev)
    return np.sqrt(np.add.reduce(dev, axis=0, dtype=np.float64) / max(n - ddof, 0))


def _signed(h: float) -> float:
    return h - 360.0 if h > 180.0 else h


def _stability(method, lab, gray, n_boot, boot_size, seed, kw, init=None, fit=None) -> dict:
    n = lab.shape[0]
    m = n if method == "thong" else min(n, int(boot_size))  # thong: replicates of all n pixels
    out = {"n_boot": int(n_boot), "boot_pixels": int(m)}
    if n_boot < 2:
        return out
    rng = np.random.default_rng(seed)
    if method == "thong":  # docs/METHODS.md §2.2: multinomial redraws of the order-free summary
        if fit is None:
            kk = {key: kw[key] for key in ("k", "top") if key in kw}
            _, fit = thong_from_features(*thong_features(lab), init_centers=init, details=False, **kk)
        sd = _sd(thong_bootstrap(fit, int(n_boot), rng), 1)
        out.update({"L_sd": float(sd[0]), "hue_sd": float(sd[1])})
        return out
    reps = []
    for _ in range(int(n_boot)):
        idx = rng.integers(0, n, size=m)
        r = estimate(method, lab[idx], None if gray is None else gray[idx], **kw)
        hue = r["hue"] if method == "thong-published" else _signed(r["hue"])
        reps.append((r["L"], hue, r["gray"] if r["gray"] is not None else np.nan, r["ita"]))
    reps = np.array(reps, dtype=np.float64)
    sd = reps.std(axis=0, ddof=1)
    out.update({"L_sd": float(sd[0]), "hue_sd": float(sd[1])})
    if method == "gray_mean":
        out["gray_sd"] = float(sd[2])
    if method == "median_ita":
        out["ita_sd"] = float(sd[3])
    return out


def _from_lab(lab, raw_rgb01, method, *, flags, mask_method=None, n_faces=None, opts) -> SkinMeasurement:
    """Estimator + spread + stability + flags on prepared pixel arrays."""
    n = int(lab.shape[0])
    flags = list(flags)
    if n < max(int(opts["min_pixels"]), 5):
        flags.append("too_few_pixels")
        return _failed(method, f"too few skin pixels ({n} < {opts['min_pixels']})", flags, n,
                       mask_method=mask_method, n_faces=n_faces)
    gray = gray_level(raw_rgb01)
    kw = {k: v for k, v in opts.items() if k not in DEFAULTS}
    if method == "thong":  # features computed once for the estimate, the bootstrap and the spread
        L, h, C = thong_features(lab)
        est, fit = thong_from_features(L, h, C, **kw)
        est["gray"] = float(np.mean(gray, dtype=np.float64))
        stab = _stability(method, lab, None, opts["n_boot"], opts["boot_size"], opts["seed"], kw, fit=fit)
        spread = _pixel_spread(lab, L, h, fit.ranges)  # (the fit's smallest and largest L* and h*)
        # median C* < min_chroma? More than half the pixels below it settles it, fewer than half too; only a
        # count at the middle needs the median itself
        below = int(np.count_nonzero(C < np.float32(opts["min_chroma"])))
        achromatic = (float(_percentiles(C, [50])[0]) < opts["min_chroma"]) if abs(2 * below - n) <= 2 else 2 * below > n
    else:
        est = estimate(method, lab, gray, **kw)
        stab = _stability(method, lab, gray if method == "gray_mean" else None, opts["n_boot"], opts["boot_size"],
                          opts["seed"], kw, init=est["extra"].get("cluster_centers"))
        spread = _pixel_spread(lab)
        achromatic = float(np.median(np.hypot(lab[:, 1], lab[:, 2]))) < opts["min_chroma"]
    shaky = (stab.get("L_sd", 0) > opts["max_L_sd"] or stab.get("hue_sd", 0) > opts["max_hue_sd"]
             or stab.get("gray_sd", 0) > opts["max_gray_sd"] or stab.get("ita_sd", 0) > opts["max_ita_sd"])
    if shaky:
        flags.append("low_stability")
    r, g, b = raw_rgb01[:, 0], raw_rgb01[:, 1], raw_rgb01[:, 2]
    brightest = np.maximum(np.maximum(r, g), b)
    top, bottom = (254, 2) if raw_rgb01.dtype == np.uint8 else (254.0 / 255.0, 2.0 / 255.0)  # uint8: same pixels
    hi = float(np.count_nonzero(brightest >= top)) / n  # any channel near saturation
    lo = float(np.count_nonzero(brightest <= bottom)) / n  # every channel near black
    if hi > opts["clip_fraction"]:
        flags.append("clipped_highlights")
    if lo > opts["clip_fraction"]:
        flags.append("clipped_shadows")
    if achromatic:
        flags.append("achromatic")
    return SkinMeasurement(
        L=est["L"], a=est["a"], b=est["b"], hue=est["hue"], ita=est["ita"], chroma=est["chroma"], gray=est["gray"],
        n_pixels=n, method=method, flags=tuple(dict.fromkeys(flags)), spread=spread, stability=stab,
        ok=True, reason=None, mask_method=mask_method, n_faces=n_faces,
        extra={**est["extra"], "clipped_highlight_fraction": float(hi), "clipped_shadow_fraction": float(lo)},
    )


def _options(method: str, kw: dict) -> dict:
    if method not in METHODS:
        raise FairvisionError(f"unknown skin colour method {method!r}; choose one of {', '.join(METHODS)}")
    opts = dict(DEFAULTS)
    allowed = {"thong": {"k", "top"}, "thong-published": {"k", "top", "kmeans_seed", "n_init"}}.get(method, set())
    for key, val in kw.items():
        if key not in DEFAULTS and key not in allowed:
            raise FairvisionError(f"unknown option {key!r} for skin colour method {method!r}")
        opts[key] = val
    return opts


def _rgb01(arr: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / np.float32(255.0)
    if np.issubdtype(arr.dtype, np.floating):
        out = arr.astype(np.float32)
        if out.size and (np.nanmin(out) < -1e-6 or np.nanmax(out) > 1 + 1e-6):
            raise FairvisionError(f"{what}: float RGB values must lie in [0, 1] (pass uint8 for 0-255 data)")
        return out
    raise FairvisionError(f"{what}: RGB values must be uint8 or float in [0, 1], got dtype {arr.dtype}")


def measure_pixels(rgb_pixels, method: str = "thong", **kw) -> SkinMeasurement:
    """Measure skin colour from already-extracted skin pixels.

    Parameters
    ----------
    rgb_pixels : array, shape (N, 3)
        sRGB skin pixels, uint8 or float in [0, 1]. No spatial smoothing is
        possible here (the ``thong`` method smooths the image before it
        extracts pixels in :func:`measure`).
    method : str
        One of ``thong``, ``thong-published``, ``mean``, ``median_ita``,
        ``gray_mean``.
    **kw
        Quality-check options (:data:`DEFAULTS`) and estimator options.
    """
    opts = _options(method, kw)
    px = np.asarray(rgb_pixels)
    if px.ndim != 2 or px.shape[1] != 3:
        raise FairvisionError(f"skin pixels must have shape (N, 3), got {px.shape}")
    rgb01 = _rgb01(px, "skin pixels")
    lab = published_lab(rgb01) if method == "thong-published" else srgb_to_lab(rgb01)
    return _from_lab(lab, rgb01, method, flags=[], opts=opts)


def smooth_skin_pixels(image01: np.ndarray, mask: np.ndarray, sigma: float = 1.0, *, within_mask: bool = True) -> np.ndarray:
    """Gaussian-smoothed RGB values (float32) of the masked pixels (docs/METHODS.md §2.2).

    Parameters
    ----------
    image01 : (H, W, 3) float array in [0, 1]
    mask : (H, W) bool
    sigma : float
        Gaussian sigma in pixels (1, as Thong et al.); the kernel is truncated
        at 4 sigma and image edges are repeated (scikit-image's
        ``gaussian(mode="nearest")``, which the published code uses).
    within_mask : bool
        True (default): normalised convolution, ``G*(I m) / G*m``, so only
        skin pixels are averaged and background colour does not bleed into
        the skin pixels along the mask border (with plain smoothing a dark
        face on a light background gets a ring of lighter pixels that the
        top-3-by-L* rule then picks up). False: plain smoothing of the image,
        as the published code does.

    Notes
    -----
    Only the mask's bounding box plus a 4-sigma margin is filtered, which
    gives the same values inside the mask as filtering the whole image.
    """
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    r = int(np.ceil(4.0 * sigma)) + 1
    y0, y1 = max(rows[0] - r, 0), min(rows[-1] + r + 1, mask.shape[0])
    x0, x1 = max(cols[0] - r, 0), min(cols[-1] + r + 1, mask.shape[1])
    crop = np.ascontiguousarray(image01[y0:y1, x0:x1])
    if crop.dtype != np.float64:
        crop = crop.astype(np.float32)
    m = mask[y0:y1, x0:x1]
    if not within_mask or crop.dtype == np.float64:
        from scipy.ndimage import gaussian_filter

        if not within_mask:
            return gaussian_filter(crop, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)[m]
        mf = m.astype(crop.dtype)
        num = gaussian_filter(crop * mf[..., None], sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
        den = gaussian_filter(mf, sigma=sigma, mode="nearest", truncate=4.0)
        return np.clip(num[m] / den[m][:, None], 0.0, 1.0)
    return _smooth_planar(crop, m, sigma).T


def _smooth_planar(crop: np.ndarray, m: np.ndarray, sigma: float = 1.0) -> np.ndarray:
    """Within-mask Gaussian smoothing (normalised convolution, see :func:`smooth_skin_pixels`) of the
    mask pixels of ``crop`` (uint8, or float in [0, 1]), as a (3, N) float32 array in [0, 1].

    R*m, G*m, B*m and m are filtered together as one 4-channel image, with OpenCV when it is
    installed (about 10x faster than scipy; same kernel, float rounding aside). From uint8 the
    image is widened to RGBA in one call and zeroed outside the mask as one 32-bit word per
    pixel, and the filter reads uint8 and writes float32 (no float copy of the image).

    OpenCV filters the TRANSPOSED image: its column pass adds the symmetric taps in pairs,
    ``k_j (x[i-j] + x[i+j])``, so the horizontal smoothing is exactly mirror-symmetric and a
    horizontally mirrored image with its mirrored mask gives bit-identical skin pixels (its row pass
    sums the taps in order, which differs in the last bit under mirroring; docs/METHODS.md §2.2).
    The pixels are returned in row-major mask order.
    """
    radius = int(4.0 * float(sigma) + 0.5)  # scipy's truncate=4
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    kern = np.exp(-0.5 * (t / float(sigma)) ** 2)
    kern = (kern / kern.sum()).astype(np.float32)
    try:
        import cv2
    except ImportError:  # OpenCV is an optional dependency
        cv2 = None
    if cv2 is not None:  # filter the transposed image (mirror-exact, see above); read back at transposed indices
        flat = np.arange(m.size, dtype=np.intp).reshape(m.shape[1], m.shape[0]).T[m]
    else:
        flat = np.flatnonzero(m)
    out = np.empty((3, flat.size), dtype=np.float32)
    if crop.dtype == np.uint8 and cv2 is not None:
        x4 = cv2.cvtColor(np.ascontiguousarray(crop), cv2.COLOR_RGB2RGBA)  # alpha 255
        x32 = x4.view(np.uint32).reshape(m.shape)
        np.multiply(x32, m, out=x32)  # whole pixel (RGB and alpha) to 0 outside the mask
        xt = np.ascontiguousarray(x32.T).view(np.uint8).reshape(m.shape[1], m.shape[0], 4)
        sm = cv2.sepFilter2D(xt, cv2.CV_32F, kern, kern, borderType=cv2.BORDER_REPLICATE)
    else:
        img = crop.astype(np.float32) / np.float32(255.0) if crop.dtype == np.uint8 else crop.astype(np.float32, copy=False)
        x4 = np.empty(m.shape + (4,), dtype=np.float32)
        mf = m.astype(np.float32)
        for c in range(3):
            np.multiply(img[..., c], mf, out=x4[..., c])
        x4[..., 3] = mf
        if cv2 is not None:
            sm = cv2.sepFilter2D(np.ascontiguousarray(x4.transpose(1, 0, 2)), -1, kern, kern,
                                 borderType=cv2.BORDER_REPLICATE)
        else:  # scipy adds symmetric taps in pairs along both axes (mirror-exact as it is)
            from scipy.ndimage import gaussian_filter

            sm = gaussian_filter(x4, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    px = sm.reshape(-1, 4).take(flat, axis=0)  # the skin pixels' (R m, G m, B m, m), whole rows: one gather
    np.divide(px[:, :3].T, px[:, 3], out=out)  # planar (3, N)
    np.maximum(out, np.float32(0.0), out=out)  # clip to [0, 1]
    return np.minimum(out, np.float32(1.0), out=out)


_LAB_M = None  # float32 constants of _lab_planar


def _lab_planar(P: np.ndarray) -> np.ndarray:
    """:func:`fairvision.skin.colour.srgb_to_lab` of planar (3, N) sRGB in [0, 1], in float32 and in
    place where possible (that function works in float64 internally; the two differ by ~1e-4 in
    a*, b*). Returns planar (3, N) L*, a*, b*. Used by ``thong``."""
    global _LAB_M
    if _LAB_M is None:
        _LAB_M = ((RGB_TO_XYZ / D65_WHITE[:, None]).astype(np.float32), np.float32(CIE_EPSILON),
                  np.float32(CIE_KAPPA))
    M, eps, kappa = _LAB_M
    if P.dtype != np.float32 or not P.flags.c_contiguous:
        P = np.array(P, dtype=np.float32, order="C")
    low = P <= np.float32(0.04045)
    lowv = P[low] / np.float32(12.92) if low.any() else None
    P += np.float32(0.055)
    P *= np.float32(1.0 / 1.055)
    np.power(P, np.float32(2.4), out=P)
    if lowv is not None:
        P[low] = lowv
    T = M @ P  # t = XYZ / white
    low = T <= eps
    lowv = (kappa * T[low] + np.float32(16.0)) / np.float32(116.0) if low.any() else None
    np.cbrt(T, out=T)
    if lowv is not None:
        T[low] = lowv
    np.subtract(T[0], T[1], out=P[1])
    P[1] *= np.float32(500.0)
    np.subtract(T[1], T[2], out=P[2])
    P[2] *= np.float32(200.0)
    np.multiply(T[1], np.float32(116.0), out=P[0])
    P[0] -= np.float32(16.0)
    return P


def load_mask(path, *, skin_label: int | None = None) -> np.ndarray:
    """Read a mask file as a boolean array.

    A binary mask: every non-zero pixel is skin. A label map (e.g.
    CelebAMask-HQ / FHIBE style): pass ``skin_label`` and the pixels equal to
    it are skin. Colour label maps are accepted when their three channels are
    equal.
    """
    import cv2

    p = Path(path)
    try:
        data = np.fromfile(p, dtype=np.uint8)
    except (FileNotFoundError, IsADirectoryError):
        raise InputFileError(f"{p}: no such mask file") from None
    arr = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if arr is None:
        raise InputFileError(f"{p}: not a readable mask image")
    if arr.ndim == 3:
        chans = arr[..., :3]
        if skin_label is not None and not (np.array_equal(chans[..., 0], chans[..., 1]) and np.array_equal(chans[..., 0], chans[..., 2])):
            raise InputFileError(f"{p}: a label map with skin_label must be single-channel (or grey)")
        arr = chans[..., 0] if skin_label is not None else chans.max(axis=2)
    return arr == skin_label if skin_label is not None else arr != 0


def _as_mask(mask, shape, skin_label, where: str) -> np.ndarray:
    if isinstance(mask, (str, os.PathLike)):
        m = load_mask(mask, skin_label=skin_label)
        where = str(mask)
    else:
        m = np.asarray(mask)
        if m.dtype != bool:
            if m.ndim == 3:
                m = m[..., 0]
            m = m == skin_label if skin_label is not None else m != 0
    if m.shape != tuple(shape):
        raise FairvisionError(f"{where}: mask shape {m.shape} does not match the image {tuple(shape)}")
    return m


def measure(image, mask=None, method: str = "thong", *, mask_method: str = "mediapipe", skin_label: int | None = None,
            smooth: bool | None = None, mask_trust: str | None = None, **kw) -> SkinMeasurement:
    """Measure the apparent skin colour of one image (docs/METHODS.md §2).

    Parameters
    ----------
    image : path or array
        An image file (read with :func:`fairvision.io.images.read_image`) or an
        ``(H, W, 3)`` RGB array (uint8, or float in [0, 1]).
    mask : None, path or array
        Skin mask. ``None`` runs the automatic mask
        ``fairvision.skin.masks.skin_mask(image, method=mask_method)``; a path
        or an array is a binary mask, or a label map with ``skin_label``.
    method : str
        ``thong`` (default), ``thong-published``, ``mean``, ``median_ita`` or
        ``gray_mean`` (see :mod:`fairvision.skin.estimators`).
    smooth : bool, optional
        Gaussian smoothing (sigma 1 px) before extracting the pixels; default
        on for the two Thong methods (docs/METHODS.md §2.2), off otherwise.
        ``thong`` smooths within the mask only (see
        :func:`smooth_skin_pixels`); ``thong-published`` smooths the image.
    mask_trust : {"high", "low"}, optional
        Trust of a supplied mask; "low" adds the ``low_trust_mask`` flag.
    **kw
        ``min_pixels``, ``n_boot``, ``boot_size``, ``seed``, the stability
        thresholds and ``clip_fraction`` (see :data:`DEFAULTS`), and estimator
        options (``k``, ``top`` for thong; ``kmeans_seed``, ``n_init`` for
        thong-published).

    Returns
    -------
    SkinMeasurement
        ``ok`` is false (with ``reason``) when no face or too few skin pixels
        were found.
    """
    opts = _options(method, kw)
    where = "image"
    if isinstance(image, (str, os.PathLike)):
        from fairvision.io.images import read_image

        where = str(image)
        img = read_image(image)
    else:
        img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise FairvisionError(f"{where}: expected an (H, W, 3) RGB image, got shape {img.shape}")
    flags: list[str] = []
    n_faces = None
    if mask is None:
        from fairvision.skin.masks import skin_mask

        img8 = img if img.dtype == np.uint8 else np.clip(np.rint(_rgb01(img, where) * 255), 0, 255).astype(np.uint8)
        res = skin_mask(img8, method=mask_method)
        n_faces = getattr(res, "n_faces", None)
        used = getattr(res, "method", mask_method)
        if getattr(res, "trust", "high") == "low":
            flags.append("low_trust_mask")
        if n_faces is not None and n_faces > 1:
            flags.append("multiple_faces")
        if res.mask is None:
            flags.append("no_mask")
            return _failed(method, res.reason or "no skin mask", flags, mask_method=used, n_faces=n_faces)
        m = np.asarray(res.mask, dtype=bool)
        mask_label = used
    else:
        m = _as_mask(mask, img.shape[:2], skin_label, where)
        mask_label = "supplied"
        if mask_trust == "low":
            flags.append("low_trust_mask")
    n = int(np.count_nonzero(m))
    if n < max(int(opts["min_pixels"]), 5):
        flags.append("too_few_pixels")
        return _failed(method, f"too few skin pixels ({n} < {opts['min_pixels']})", flags, n,
                       mask_method=mask_label, n_faces=n_faces)
    # work on the mask's bounding box plus a margin wider than the smoothing kernel (4 sigma + 1)
    rows = np.flatnonzero(m.any(axis=1))
    cols = np.flatnonzero(m.any(axis=0))
    y0, y1 = max(rows[0] - 6, 0), min(rows[-1] + 7, m.shape[0])
    x0, x1 = max(cols[0] - 6, 0), min(cols[-1] + 7, m.shape[1])
    crop = img[y0:y1, x0:x1]
    if smooth is None:
        smooth = method.startswith("thong")
    if method == "thong" and smooth and crop.dtype == np.uint8:  # planar float32 pipeline straight from uint8
        m = m[y0:y1, x0:x1]
        raw = np.ascontiguousarray(crop).reshape(-1, 3).take(np.flatnonzero(m), axis=0)  # uint8 skin pixels
        lab = _lab_planar(_smooth_planar(crop, m)).T
        return _from_lab(lab, raw, method, flags=flags, mask_method=mask_label, n_faces=n_faces, opts=opts)
    if method == "thong-published" and crop.dtype == np.uint8:
        img01 = crop / 255.0  # float64, as scikit-image's img_as_float
    else:
        img01 = _rgb01(crop, where)
    m = m[y0:y1, x0:x1]
    raw = img01.reshape(-1, 3).take(np.flatnonzero(m), axis=0)  # = img01[m], faster
    if method == "thong" and smooth:  # planar float32 pipeline
        lab = _lab_planar(_smooth_planar(img01, m)).T
        return _from_lab(lab, raw, method, flags=flags, mask_method=mask_label, n_faces=n_faces, opts=opts)
    if method == "thong-published":  # the published pipeline: float64 smoothing of the image, scikit-image's CIELAB
        px = smooth_skin_pixels(img01.astype(np.float64, copy=False), m, within_mask=False) if smooth else raw
        return _from_lab(published_lab(px), raw, method, flags=flags, mask_method=mask_label, n_faces=n_faces, opts=opts)
    px = smooth_skin_pixels(img01, m, within_mask=(method == "thong")) if smooth else raw
    return _from_lab(srgb_to_lab(px), raw, method, flags=flags, mask_method=mask_label, n_faces=n_faces, opts=opts)

"""Structural similarity (SSIM) of two images, as Wang et al. 2004 (docs/METHODS.md §6.1).

Local means, variances and the covariance come from an 11 x 11 Gaussian window (sigma 1.5, the filter cut at
3.5 sigma), computed as separable convolutions (:func:`scipy.ndimage.gaussian_filter`, borders reflected) on the
whole image at once; the SSIM map is averaged over the pixels whose window lies inside the image (5 pixels are
cut from every border), and a colour image's SSIM is the mean of its channels' SSIM. This is what
``skimage.metrics.structural_similarity(..., gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
channel_axis=-1)`` computes.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

from fairvision.errors import FairvisionError

#: Gaussian window of Wang et al. 2004: sigma 1.5, cut at 3.5 sigma (11 x 11 taps)
SIGMA = 1.5
TRUNCATE = 3.5
#: half the window's side: int(3.5 * 1.5 + 0.5) = 5, an 11 x 11 window
RADIUS = int(TRUNCATE * SIGMA + 0.5)
K1, K2 = 0.01, 0.03


def ssim(image, reference, *, data_range: float | None = None) -> float:
    """Mean structural similarity of ``image`` against ``reference`` (Wang et al. 2004).

    ``SSIM = (2 mu_x mu_y + C1)(2 sigma_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(sigma_x^2 + sigma_y^2 + C2))`` with
    Gaussian-weighted local statistics (sigma 1.5, 11 x 11), ``C1 = (0.01 R)^2``, ``C2 = (0.03 R)^2``; the map's
    mean over the pixels 5 or more from the border, averaged over channels (docs/METHODS.md §6.1).

    Parameters
    ----------
    image, reference : array_like
        Same shape, (H, W) grey or (H, W, C) with channels last; each side at least 11 pixels.
    data_range : float, optional
        Largest possible value minus smallest, R: default 255 for uint8 input, else 1.0.

    Returns
    -------
    float
        SSIM in [-1, 1]; 1 for identical images.
    """
    a = np.asarray(image)
    b = np.asarray(reference)
    if a.shape != b.shape:
        raise FairvisionError(f"ssim: image shape {a.shape} differs from reference shape {b.shape}")
    if a.ndim not in (2, 3):
        raise FairvisionError(f"ssim: expected an (H, W) or (H, W, C) image, got shape {a.shape}")
    side = 2 * RADIUS + 1
    if min(a.shape[:2]) < side:
        raise FairvisionError(f"ssim: images must be at least {side} x {side} pixels, got {a.shape[1]} x {a.shape[0]}")
    if data_range is None:
        data_range = 255.0 if a.dtype == np.uint8 and b.dtype == np.uint8 else 1.0
    x = a.astype(np.float64)
    y = b.astype(np.float64)
    if x.ndim == 2:
        x, y = x[:, :, None], y[:, :, None]
    # the five local statistics in one filter call: a stack along a trailing axis that is not filtered
    stack = np.stack([x, y, x * x, y * y, x * y], axis=-1)
    f = gaussian_filter(stack, sigma=(SIGMA, SIGMA, 0, 0), truncate=TRUNCATE, mode="reflect")
    ux, uy, uxx, uyy, uxy = (f[..., i] for i in range(5))
    vx, vy, vxy = uxx - ux * ux, uyy - uy * uy, uxy - ux * uy
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    r = RADIUS
    inner = s[r:-r, r:-r]
    return float(inner.reshape(-1, inner.shape[-1]).mean(axis=0).mean())

"""Image-quality metrics for reconstruction and super-resolution (docs/METHODS.md §6.1).

PSNR is computed here, SSIM in :mod:`fairvision.metrics.ssim`. LPIPS needs a neural network (torch and its trained
weights), which this package does not ship: compute LPIPS with the ``lpips``
package where torch is installed, put the per-image values in a scores table
and audit them with ``--lower-is-better lpips``.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError


def psnr(image, reference, *, data_range: float | None = None) -> float:
    """Peak signal-to-noise ratio in dB: ``10 log10(data_range^2 / MSE)``.

    Parameters
    ----------
    image, reference : array_like
        Same shape (H, W) or (H, W, C).
    data_range : float, optional
        Largest possible value minus smallest: default 255 for uint8 input,
        else 1.0.

    Returns
    -------
    float
        PSNR; ``inf`` for identical images.
    """
    a = np.asarray(image)
    b = np.asarray(reference)
    if a.shape != b.shape:
        raise FairvisionError(f"psnr: image shape {a.shape} differs from reference shape {b.shape}")
    if data_range is None:
        data_range = 255.0 if a.dtype == np.uint8 and b.dtype == np.uint8 else 1.0
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    if mse == 0:
        return float("inf")
    return float(10.0 * np.log10(float(data_range) ** 2 / mse))

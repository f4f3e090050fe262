"""Confidence intervals for proportions (docs/METHODS.md §4.4)."""

from __future__ import annotations

import numpy as np
from scipy import stats as _st


def wilson_interval(k, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for binomial proportions ``k / n`` (vectorised).

    Better behaved than the normal (Wald) interval near 0 and 1 and for small
    ``n`` (Brown, Cai and DasGupta 2001; docs/METHODS.md §4.4).

    Parameters
    ----------
    k : array_like
        Successes.
    n : array_like
        Trials (broadcast against ``k``).
    level : float
        Two-sided level of the interval.

    Returns
    -------
    ci_low, ci_high : numpy.ndarray
        Bounds in [0, 1]; NaN where ``n = 0``.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    z = _st.norm.ppf(0.5 + level / 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1.0 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    lo = np.where(n > 0, np.clip(centre - half, 0, 1), np.nan)
    hi = np.where(n > 0, np.clip(centre + half, 0, 1), np.nan)
    return lo, hi

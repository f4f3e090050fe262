"""Representation metrics of a distribution over declared groups.

All functions take counts or shares over *declared* groups: a declared group
with zero members is part of the distribution (it is what makes a dataset
unbalanced), unlike the reference implementation of the bias-transfer paper
which silently drops unobserved groups (docs/METHODS.md §5.1).

Every function also accepts a 2-D array of shape ``(n_replicates, G)`` and
returns one value per row, so bootstrap replicates are scored in one call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError


def _as_shares(values) -> np.ndarray:
    p = np.asarray(values.to_numpy() if isinstance(values, (pd.Series, pd.DataFrame)) else values, dtype=float)
    if p.ndim == 0 or p.shape[-1] == 0:
        raise FairvisionError("need at least one group")
    if np.any(~np.isfinite(p)) or np.any(p < 0):
        raise FairvisionError("counts or shares must be finite and non-negative")
    total = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, p / np.where(total > 0, total, 1), np.nan)


def nsd(values) -> float | np.ndarray:
    """Normalized standard deviation of a distribution over groups (docs/METHODS.md §5.1).

    ``NSD = std(p) * G / sqrt(G - 1)`` with the population standard deviation
    of the shares ``p`` over the ``G`` declared groups: 0 for a uniform
    distribution, 1 when everything is in one group. Bias-transfer paper
    (Dominguez-Catena et al.), representation bias.

    Parameters
    ----------
    values : array_like or Series
        Counts or shares per group (declared empty groups included as 0), or
        an array ``(n_replicates, G)``.

    Returns
    -------
    float or numpy.ndarray
        In [0, 1]; one value per row for a 2-D input (NaN for an all-zero row).

    Examples
    --------
    >>> round(nsd([0.7, 0.2, 0.1]), 6)
    0.556776
    """
    p = _as_shares(values)
    g = p.shape[-1]
    if g < 2:
        out = np.zeros(p.shape[:-1])
    else:
        out = p.std(axis=-1) * g / np.sqrt(g - 1)
    return float(out) if out.ndim == 0 else out


def _entropy(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1)), 0.0)
    return terms.sum(axis=-1)


def shannon_evenness(values) -> float | np.ndarray:
    """Pielou's evenness ``H / ln G`` (docs/METHODS.md §5.1).

    Parameters
    ----------
    values : array_like or Series
        Counts or shares per declared group, or an array ``(n_replicates, G)``.

    Returns
    -------
    float or numpy.ndarray
        1 = uniform over the declared groups, 0 = one group; 1 when ``G = 1``;
        NaN for an all-zero row.
    """
    p = _as_shares(values)
    g = p.shape[-1]
    out = _entropy(p) / np.log(g) if g > 1 else np.ones(p.shape[:-1])
    out = np.where(np.isnan(p).any(axis=-1), np.nan, out)
    return float(out) if np.ndim(out) == 0 else out


def effective_number(values, order: float = 1.0) -> float | np.ndarray:
    """Effective number of groups (Hill number; docs/METHODS.md §5.1).

    Parameters
    ----------
    values : array_like or Series
        Counts or shares per declared group, or an array ``(n_replicates, G)``.
    order : {1, 2}
        1: ``exp(H)`` (Shannon); 2: ``1 / sum p^2`` (Simpson).

    Returns
    -------
    float or numpy.ndarray
        ``G`` when all declared groups are equally represented, 1 when only
        one group is present; NaN for an all-zero row.
    """
    p = _as_shares(values)
    if order == 1:
        out = np.exp(_entropy(p))
    elif order == 2:
        out = 1.0 / (p ** 2).sum(axis=-1)
    else:
        raise FairvisionError("order must be 1 (Shannon) or 2 (Simpson)")
    out = np.where(np.isnan(p).any(axis=-1), np.nan, out)
    return float(out) if np.ndim(out) == 0 else out


def imbalance_ratio(values) -> float | np.ndarray:
    """Largest over smallest group size (docs/METHODS.md §5.1).

    Parameters
    ----------
    values : array_like or Series
        Counts per declared group, or an array ``(n_replicates, G)``.

    Returns
    -------
    float or numpy.ndarray
        At least 1; ``inf`` when a declared group is empty, NaN when all are.
    """
    c = np.asarray(values.to_numpy() if isinstance(values, (pd.Series, pd.DataFrame)) else values, dtype=float)
    mx = c.max(axis=-1)
    mn = c.min(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(mn > 0, mx / np.where(mn > 0, mn, 1), np.where(mx > 0, np.inf, np.nan))
    return float(out) if np.ndim(out) == 0 else out


METRICS = {
    "nsd": nsd,
    "evenness": shannon_evenness,
    "effective_groups": effective_number,
    "imbalance_ratio": imbalance_ratio,
}

#: range of each metric for G declared groups (used to clip confidence intervals)
BOUNDS = {
    "nsd": lambda g: (0.0, 1.0),
    "evenness": lambda g: (0.0, 1.0),
    "effective_groups": lambda g: (1.0, float(g)),
    "imbalance_ratio": lambda g: (1.0, np.inf),
}


def representation_summary(counts) -> dict:
    """All representation metrics of one count vector (docs/METHODS.md §5.1).

    Parameters
    ----------
    counts : array_like or Series
        Counts per declared group (empty groups included as 0).

    Returns
    -------
    dict
        ``nsd``, ``evenness``, ``effective_groups``, ``imbalance_ratio``,
        ``n_groups`` and ``n_empty_groups``.
    """
    c = np.asarray(counts.to_numpy() if isinstance(counts, pd.Series) else counts, dtype=float)
    out = {name: fn(c) for name, fn in METRICS.items()}
    out["n_groups"] = int(c.size)
    out["n_empty_groups"] = int((c == 0).sum())
    return out

"""Multiple-comparison corrections of p-values.

``holm`` (step-down; the default everywhere in fairvision: it controls the
family-wise error rate like Bonferroni and is uniformly at least as powerful),
``bonferroni`` (what the FHIBE benchmarking analysis used), ``bh``
(Benjamini-Hochberg, controls the false discovery rate) and ``none``. See
docs/METHODS.md §4.3.

``correction`` always names one of these methods, in every function and
command; :data:`DEFAULT_CORRECTION` is the one default.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.stats.constants import DEFAULT_CORRECTION, METHODS

__all__ = ["DEFAULT_CORRECTION", "METHODS", "adjust_pvalues"]
_ALIASES = {"fdr_bh": "bh", "benjamini-hochberg": "bh", "benjamini_hochberg": "bh", None: "none"}


def adjust_pvalues(pvalues, method: str = DEFAULT_CORRECTION) -> np.ndarray:
    """Adjusted p-values, so that ``p_adjusted < alpha`` is the decision rule.

    Parameters
    ----------
    pvalues : array_like
        Raw p-values; NaN entries are ignored and stay NaN (they do not count
        towards the number of tests).
    method : {"holm", "bonferroni", "bh", "none"}
        The correction (default :data:`DEFAULT_CORRECTION`, Holm).

    Returns
    -------
    numpy.ndarray
        Adjusted p-values, clipped to at most 1, same shape as the input.
        Bonferroni: ``min(1, m p)``, so ``p_adj < 0.05`` is ``p < 0.05 / m``.
    """
    method = _ALIASES.get(method, method)
    if method not in METHODS:
        raise FairvisionError(f"unknown correction {method!r}; choose one of {', '.join(METHODS)}")
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    flat = p.ravel()
    ok = ~np.isnan(flat)
    q = flat[ok]
    m = q.size
    if m == 0:
        return out
    if method == "none":
        adj = q.copy()
    elif method == "bonferroni":
        adj = np.minimum(1.0, q * m)
    elif method == "holm":
        order = np.argsort(q, kind="mergesort")
        stepped = (m - np.arange(m)) * q[order]
        stepped = np.minimum(1.0, np.maximum.accumulate(stepped))
        adj = np.empty(m)
        adj[order] = stepped
    else:  # bh
        order = np.argsort(q, kind="mergesort")
        ranked = q[order] * m / np.arange(1, m + 1)
        ranked = np.minimum(1.0, np.minimum.accumulate(ranked[::-1])[::-1])
        adj = np.empty(m)
        adj[order] = ranked
    res = out.ravel()
    res[ok] = adj
    return res.reshape(p.shape)

"""Formatting shared by the report's JSON, HTML and Parquet outputs: numbers, column names, slugs, flat tables."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["format_number", "column_name", "has_meaningful_index", "flat_frame", "slug", "NOISE", "snap_noise",
           "column_scale", "is_pvalue_name"]

#: a value smaller in magnitude than ``NOISE * max(1, scale)`` is floating-point noise and is shown as 0
#: (docs/METHODS.md §9): ``scale`` is the largest finite magnitude of its column, 1 for a value shown alone
NOISE = 1e-12
#: words of a column name or key that mark a p-value (its tiny values are results, not noise)
_PVALUE_WORDS = {"p", "q", "padj", "pvalue", "pvalues", "qvalue", "pval", "fdr"}


def column_name(c: Any) -> str:
    """Display name of a column label; MultiIndex tuples are joined with ``" / "`` (empty parts skipped)."""
    if isinstance(c, tuple):
        return " / ".join(str(x) for x in c if str(x) != "")
    return str(c)


def has_meaningful_index(df: pd.DataFrame) -> bool:
    """True when the index carries information (a MultiIndex or a named index) and is kept as columns."""
    return isinstance(df.index, pd.MultiIndex) or df.index.name is not None


def flat_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a meaningful index turned into columns (else dropped) and string column names."""
    flat = df.reset_index() if has_meaningful_index(df) else df.reset_index(drop=True)
    flat.columns = [column_name(c) for c in flat.columns]
    return flat


def slug(text: str) -> str:
    """Lower-case ASCII identifier for HTML anchors and file names (``"item"`` when nothing is left)."""
    s = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return s or "item"


def is_pvalue_name(name: Any) -> bool:
    """True for the name of a p-value column or key (``pvalue``, ``pvalue_adjusted``, ``p_adj``, ``p-value``,
    ``q``): their tiny values are results, not noise, and keep their digits."""
    words = re.sub(r"[^a-z0-9]+", " ", str(name).lower()).split()
    joined = " ".join(words)
    return bool(_PVALUE_WORDS.intersection(words)) or "pvalue" in joined or "p value" in joined or "p adj" in joined


def column_scale(values: Any) -> float:
    """The scale of a column for :func:`snap_noise`: its largest finite magnitude (0 when it has none).

    Non-numeric entries (text, booleans, missing cells) are ignored.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "fiu":  # an object column: its numbers only (not booleans, text or missing cells)
        arr = np.array([float(v) for v in arr.ravel() if isinstance(v, (int, float, np.integer, np.floating))
                        and not isinstance(v, (bool, np.bool_))], dtype=float)
    arr = arr.astype(float, copy=False)
    finite = np.abs(arr[np.isfinite(arr)])
    return float(finite.max()) if finite.size else 0.0


def snap_noise(v: Any, scale: float = 0.0) -> Any:
    """``v`` as 0.0 when it is floating-point noise, else unchanged (docs/METHODS.md §9).

    A float is noise when ``0 < |v| < NOISE * max(1, scale)``: below 1e-12
    absolutely, or 1e-12 of its column's scale (:func:`column_scale`) when
    that is larger than 1. ``4.03e-17`` left by a sum of shares that should
    be 0 becomes 0; so does ``-0.0``. Integers, booleans, text and missing
    values pass through. Do not snap p-values (:func:`is_pvalue_name`).

    Parameters
    ----------
    v : Any
        One value.
    scale : float, default 0
        Largest magnitude among the values shown beside it (0: the value stands alone).

    Returns
    -------
    Any
        ``0.0`` for noise, else ``v``.
    """
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and abs(v) < NOISE * max(1.0, float(scale)):
        return 0.0
    return v


def format_number(v: Any, digits: int = 4, scale: float | None = 0.0) -> str:
    """Human-readable text of one table or metric value.

    Missing values show as an en dash, booleans as yes/no, integers with
    thousands separators, floats with about ``digits`` significant digits
    (scientific notation below 1e-3 and from 1e6). Floating-point noise
    (:func:`snap_noise` with ``scale``, the largest magnitude of the value's
    column) shows as 0, never as ``4.03e-17`` or ``-0``; pass
    ``scale=None`` to keep every digit (p-values).
    """
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        f = float(v) if scale is None else float(snap_noise(v, scale))
        if f == 0:
            return "0"
        if math.isinf(f):
            return "∞" if f > 0 else "−∞"
        if f != 0 and (abs(f) < 1e-3 or abs(f) >= 1e6):
            return f"{f:.3g}"
        if float(f).is_integer() and abs(f) < 1e6:
            return f"{int(f):,}"
        return f"{f:.{digits}g}" if abs(f) < 1 else f"{f:,.{max(1, digits - len(str(int(abs(f)))))}f}".rstrip("0").rstrip(".")
    return str(v)

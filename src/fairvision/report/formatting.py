"""Formatting shared by the report's JSON, HTML and Parquet outputs: numbers, column names, slugs, flat tables."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["format_number", "column_name", "has_meaningful_index", "flat_frame", "slug"]


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


def format_number(v: Any, digits: int = 4) -> str:
    """Human-readable text of one table or metric value.

    Missing values show as an en dash, booleans as yes/no, integers with
    thousands separators, floats with about ``digits`` significant digits
    (scientific notation below 1e-3 and from 1e6).
    """
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isinf(f):
            return "∞" if f > 0 else "−∞"
        if f != 0 and (abs(f) < 1e-3 or abs(f) >= 1e6):
            return f"{f:.3g}"
        if float(f).is_integer() and abs(f) < 1e6:
            return f"{int(f):,}"
        return f"{f:.{digits}g}" if abs(f) < 1 else f"{f:,.{max(1, digits - len(str(int(abs(f)))))}f}".rstrip("0").rstrip(".")
    return str(v)

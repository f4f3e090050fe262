"""Reader of face-verification pairs: two sample ids, whether they show the same person, a similarity score.

A pairs table (CSV, TSV, Parquet, JSON, JSONL) has one row per pair:
``sample_a`` and ``sample_b`` (sample ids of the two images), optionally
``same_subject`` (true for a genuine pair, false for an impostor; also read
from ``genuine`` or ``is_same``) and ``score`` (similarity, higher = more
alike). Every error is a one-line :class:`~fairvision.errors.FairvisionError`
naming the file, row and column.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, InputFileError
from fairvision.io.tables import read_raw_table

PAIR_COLUMNS = ("sample_a", "sample_b")
SAME_ALIASES = ("same_subject", "genuine", "is_same")
_TRUE = {"1", "1.0", "true", "t", "yes", "y", "same", "genuine"}
_FALSE = {"0", "0.0", "false", "f", "no", "n", "different", "impostor"}


def _flags(col: pd.Series, name: str, src: str) -> np.ndarray:
    if pd.api.types.is_bool_dtype(col):
        return col.to_numpy(bool)
    out = np.zeros(len(col), bool)
    for i, v in enumerate(col.to_numpy(object)):  # per row parsing of a label, once per pair
        t = str(v).strip().lower()
        if t in _TRUE:
            out[i] = True
        elif t not in _FALSE:
            raise ColumnError(f"{src}: row {i + 1}: column {name!r} has {v!r}; expected true/false or 1/0")
    return out


def read_pairs(path: str | os.PathLike, *, score_col: str | None = "score", same_col: str | None = None) -> pd.DataFrame:
    """Read a table of verification pairs.

    Parameters
    ----------
    path : path-like
        The pairs table.
    score_col : str or None
        Column with the similarity of every pair; None when the scores come
        from embeddings instead (the column is then not required).
    same_col : str, optional
        Column that says whether a pair is genuine (default: the first of
        ``same_subject``, ``genuine``, ``is_same`` present; absent: left to
        the caller, who can compare subject ids).

    Returns
    -------
    pandas.DataFrame
        ``sample_a``, ``sample_b`` (str), ``same_subject`` (bool, when the
        table has it) and ``score`` (float, when ``score_col`` is given).
    """
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    src = str(path)
    raw = read_raw_table(path)
    raw.columns = [str(c) for c in raw.columns]
    if len(raw) == 0:
        raise InputFileError(f"{src}: the pairs table has no rows")
    cols = ", ".join(raw.columns)
    for c in PAIR_COLUMNS:
        if c not in raw.columns:
            raise ColumnError(f"{src}: missing column {c!r}; a pairs table needs sample_a, sample_b and score or "
                              f"embeddings; columns are {cols}")
        empty = raw[c].isna().to_numpy()
        if empty.any():
            raise ColumnError(f"{src}: row {int(np.flatnonzero(empty)[0]) + 1}: empty {c!r}")
    out = pd.DataFrame({c: raw[c].map(lambda v: str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))
                        for c in PAIR_COLUMNS})
    same = same_col if same_col is not None else next((a for a in SAME_ALIASES if a in raw.columns), None)
    if same is not None:
        if same not in raw.columns:
            raise ColumnError(f"{src}: no column {same!r} for the same-subject flag; columns are {cols}")
        out["same_subject"] = _flags(raw[same], same, src)
    if score_col is not None:
        if score_col not in raw.columns:
            raise ColumnError(f"{src}: no score column {score_col!r}; columns are {cols} (or give embeddings)")
        vals = pd.to_numeric(raw[score_col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(vals)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ColumnError(f"{src}: row {i + 1}: column {score_col!r} has {raw[score_col].iloc[i]!r}; "
                              "expected a finite number")
        out["score"] = vals
    out.attrs["source"] = src
    return out

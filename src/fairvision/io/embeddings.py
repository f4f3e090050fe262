"""Reader of embedding matrices with their item ids (.npy, .npz or a table).

Every error is a one-line :class:`~fairvision.errors.FairvisionError` naming the
file, row or column.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, InputFileError
from fairvision.io.retrieval import ITEM_ID_ALIASES, pick_column
from fairvision.io.tables import read_raw_table


def read_embeddings(source, *, id_col: str | None = None, column: str | None = None,
                    allow_zero: bool = False) -> tuple[np.ndarray, list[str]]:
    """Read an embedding matrix and its item ids.

    Parameters
    ----------
    source : path-like, numpy.ndarray or DataFrame
        ``.npy`` (an (n, d) array; ids are ``0..n-1`` unless a ``.ids.txt`` /
        ``_ids.txt`` file lies next to it, one id per line), ``.npz`` (arrays
        ``embeddings`` and optionally ``ids``), or a table (Parquet, CSV, ...)
        with an id column and either one list-valued column (``embedding``,
        ``vector``, or ``column``) or numeric columns, one per dimension.
    allow_zero : bool
        Accept rows that are all zeros. By default such a row is an error
        naming the row and its id: a zero vector has no direction, so it
        cannot be normalised for cosine similarity (a failed embedding is
        often written as zeros). Pass True for Euclidean-only uses.

    Returns
    -------
    embeddings : numpy.ndarray, shape (n, d), float32
    ids : list of str
    """
    label = "embeddings"
    if isinstance(source, np.ndarray):
        x = source
        ids = [str(i) for i in range(len(x))]
    elif isinstance(source, pd.DataFrame):
        x, ids = _embeddings_from_frame(source, label, id_col, column)
    else:
        path = Path(source)
        label = str(path)
        if not path.is_file():
            raise InputFileError(f"{path}: no such file")
        suf = path.suffix.lower()
        if suf == ".npy":
            try:
                x = np.load(path, allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise InputFileError(f"{path}: cannot read as .npy: {_first_line(exc)}") from None
            if not isinstance(x, np.ndarray):  # a zip archive named .npy
                x.close()
                raise InputFileError(f"{path}: not a .npy array (it is an .npz archive; name it .npz)")
            ids = None
            for cand in (path.with_suffix(".ids.txt"), path.with_name(path.stem + "_ids.txt")):
                if cand.is_file():
                    ids = [ln.strip() for ln in cand.read_text(encoding="utf-8").splitlines() if ln.strip()]
                    if len(ids) != len(x):
                        raise InputFileError(f"{cand}: {len(ids)} ids for {len(x)} embeddings")
                    break
            ids = ids or [str(i) for i in range(len(x))]
        elif suf == ".npz":
            z = open_npz(path)
            key = "embeddings" if "embeddings" in z.files else (z.files[0] if len(z.files) == 1 else None)
            if key is None:
                raise InputFileError(f"{path}: no array named 'embeddings' (arrays: {', '.join(z.files)})")
            x = npz_array(z, key, path)
            ids = [str(i) for i in npz_array(z, "ids", path)] if "ids" in z.files else [str(i) for i in range(len(x))]
            if len(ids) != len(x):
                raise InputFileError(f"{path}: {len(ids)} ids for {len(x)} embeddings")
        else:
            x, ids = _embeddings_from_frame(read_raw_table(path), label, id_col, column)
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise InputFileError(f"{label}: expected a non-empty 2-D array (items x dimensions), got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.number):
        raise InputFileError(f"{label}: embeddings are not numeric ({x.dtype})")
    x = x.astype(np.float32, copy=False)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise InputFileError(f"{label}: row {int(np.flatnonzero(bad)[0]) + 1}: embedding has NaN or infinite values")
    if len(set(ids)) != len(ids):
        s = pd.Series(ids)
        i = int(np.flatnonzero(s.duplicated().to_numpy())[0])
        raise InputFileError(f"{label}: row {i + 1}: duplicate id {ids[i]!r}")
    zero = ~x.any(axis=1)
    if zero.any() and not allow_zero:
        i, n = int(np.flatnonzero(zero)[0]), int(zero.sum())
        more = f" ({n} rows are all zeros)" if n > 1 else ""
        raise InputFileError(f"{label}: row {i + 1} (id {ids[i]!r}): the embedding is all zeros{more}; a zero vector "
                             f"has no direction and cannot be normalised for cosine similarity (drop the row or "
                             f"embed the image again)")
    return x, list(ids)


#: what a damaged ``.npz`` (a zip archive of ``.npy`` files) raises while it is opened or an array is read
NPZ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def open_npz(path) -> np.lib.npyio.NpzFile:
    """Open an ``.npz`` without pickles; a file that is not a readable zip archive (truncated, corrupt, another
    format) is a one-line :class:`~fairvision.errors.InputFileError` naming the file."""
    try:
        return np.load(path, allow_pickle=False)
    except NPZ_ERRORS as exc:
        raise InputFileError(f"{path}: cannot read as .npz (a zip archive of .npy arrays; is the file complete?): "
                             f"{_first_line(exc)}") from None


def npz_array(z, key: str, path) -> np.ndarray:
    """Array ``key`` of an open ``.npz`` (``np.load(..., allow_pickle=False)``), with a one-line error for an
    object-typed array (ids or labels saved from a pandas column): pickled data is never loaded. A damaged
    member (bad CRC, truncated or corrupt compressed data) is a one-line error naming the file and the array."""
    try:
        return z[key]
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise InputFileError(f"{path}: cannot read array {key!r}: the .npz file is damaged ({_first_line(exc)})") from None
    except ValueError as exc:
        if "allow_pickle" not in str(exc) and "Object arrays" not in str(exc):
            raise InputFileError(f"{path}: cannot read array {key!r}: {_first_line(exc)}") from None
        raise InputFileError(f"{path}: array {key!r} holds Python objects (dtype object), which are not loaded "
                             f"(no pickle); save it as strings, e.g. np.savez(..., {key}=values.astype(str))") from None


def _embeddings_from_frame(df: pd.DataFrame, label: str, id_col: str | None, column: str | None):
    df = df.copy()
    df.columns = [str(c) for c in df.columns]
    idc = pick_column(df, ITEM_ID_ALIASES, id_col, label, "the item id")
    ids = df[idc].astype(str).tolist() if idc else [str(i) for i in range(len(df))]
    rest = df.drop(columns=[idc]) if idc else df
    vec_col = pick_column(rest, ("embedding", "vector", "embeddings", "features"), column, label, "the embedding")
    if vec_col is not None:
        vals = rest[vec_col].tolist()
        lens = {len(v) if hasattr(v, "__len__") else -1 for v in vals}
        if len(lens) != 1 or -1 in lens:
            lengths = [len(v) if hasattr(v, "__len__") else -1 for v in vals]
            i = next(i for i, n in enumerate(lengths) if n != lengths[0] or n == -1) if len(lens) > 1 else 0
            raise InputFileError(f"{label}: row {i + 1}: embedding {vec_col!r} has a different length or is not a list")
        return np.asarray([np.asarray(v, dtype=float) for v in vals]), ids
    num = rest.select_dtypes("number")
    if num.shape[1] == 0:
        raise ColumnError(f"{label}: no embedding column ('embedding' list column or numeric columns)")
    return num.to_numpy(dtype=float), ids

"""Read and write sample tables.

A *sample table* has one row per image: ``sample_id``, an optional
``subject_id``, ``image_path`` and any number of attribute columns. This module
reads the formats people have (CSV, TSV, Parquet, JSON, JSONL and the FairFace
``ground_truth.json`` layout) into a pandas DataFrame with those column names,
and checks it, raising :class:`~fairvision.errors.FairvisionError` with a
one-line message that names the file, column or row at fault.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.validate import check_unique_columns
from fairvision.io.webdataset import parse_ref

SAMPLE_ID = "sample_id"
SUBJECT_ID = "subject_id"
IMAGE_PATH = "image_path"

_ID_ALIASES = ("sample_id", "id", "image_id")
_PATH_ALIASES = ("image_path", "filename", "file_name", "path", "file")
_FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet",
    ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
}


def detect_format(path: Path, fmt: str | None = None) -> str:
    """The table format of ``path`` (``fmt`` when given, else from the suffix: csv, tsv, parquet, json or
    jsonl); raises :class:`InputFileError` naming the file for an unknown suffix or a compressed tar shard."""
    if fmt:
        return fmt.lower()
    try:
        return _FORMATS[path.suffix.lower()]
    except KeyError:
        if path.name.lower().endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")):
            raise InputFileError(f"{path}: compressed tar shards are not read (images are read in place by offset); "
                                 "decompress them first, e.g. gunzip, and give the .tar") from None
        raise InputFileError(
            f"{path}: unknown table format {path.suffix!r}; use .csv, .tsv, .parquet, .json or .jsonl"
        ) from None


class _Record(dict):
    """A JSON object that held a key twice (``json`` keeps the last value silently); ``repeated`` names them."""

    repeated: tuple = ()


def _object(pairs: list) -> dict:
    """``object_pairs_hook`` of the JSON readers: a plain dict, or a :class:`_Record` that remembers repeated keys."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    keys = [k for k, _ in pairs]
    rec = _Record(out)
    rec.repeated = tuple(k for k in out if keys.count(k) > 1)
    return rec


def _check_record_keys(path: Path, records: list, row: str = "record {}") -> None:
    """A record (one row) with a key twice is a table with two columns of the same name: a one-line error naming
    the file, the record (``row`` formatted with its 1-based number) and the keys."""
    for i, rec in enumerate(records, 1):
        if isinstance(rec, _Record):
            keys = rec.repeated
            said = f"key {keys[0]!r} appears" if len(keys) == 1 else f"keys {', '.join(map(repr, keys))} appear"
            raise ColumnError(f"{path}: {row.format(i)}: {said} more than once (two columns of the same name; "
                              f"JSON keeps only the last value); give each column its own name")


def _read_json(path: Path) -> pd.DataFrame:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not UTF-8 text") from None
    if isinstance(data, dict):
        # {"samples": [...]}, {"images": [...]} (COCO-like) or {id: {...}}
        for key in ("samples", "images", "data", "records"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            if data and all(isinstance(v, dict) for v in data.values()):
                if isinstance(data, _Record):
                    raise ColumnError(f"{path}: sample id {data.repeated[0]!r} appears more than once (JSON keeps "
                                      f"only the last record)")
                _check_record_keys(path, list(data.values()))
                data = [{SAMPLE_ID: k, **v} for k, v in data.items()]
            else:
                raise InputFileError(f"{path}: expected a list of records or an object with a 'samples' list")
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputFileError(f"{path}: expected a JSON list of objects, one per image")
    _check_record_keys(path, data)
    return pd.DataFrame.from_records(data)


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line, object_pairs_hook=_object)
            except json.JSONDecodeError as exc:
                raise InputFileError(f"{path}: malformed JSON on line {lineno}: {exc.msg}") from None
            if not isinstance(rec, dict):
                raise InputFileError(f"{path}: line {lineno} is not a JSON object")
            _check_record_keys(path, [rec], f"line {lineno}")
            records.append(rec)
    return pd.DataFrame.from_records(records)


def _csv_header(path: Path, sep: str) -> list[str]:
    """The column names of a CSV/TSV file as written (pandas renames a repeated ``x`` to ``x.1``)."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return next(csv.reader(fh, delimiter=sep), [])


def _parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file's schema, read without its data (pandas refuses repeated names with
    a message that names neither the file nor the column)."""
    import pyarrow.parquet as pq  # lazy: pandas imports pyarrow itself only to read Parquet

    return list(pq.read_schema(path).names)


def _read_raw(path: Path, fmt: str, text_cols: Sequence[str] = ()) -> pd.DataFrame:
    try:
        if fmt in ("csv", "tsv"):
            # identifiers stay text: "001" is not the number 1 (keys of images, embeddings and answers)
            keys = dict.fromkeys([*_ID_ALIASES, SUBJECT_ID, *_PATH_ALIASES, *text_cols], str)
            sep = "\t" if fmt == "tsv" else ","
            df = pd.read_csv(path, sep=sep, dtype=keys)
            check_unique_columns(_csv_header(path, sep), source=str(path))
            return df
        if fmt == "parquet":
            check_unique_columns(_parquet_columns(path), source=str(path), where="schema")
            return pd.read_parquet(path)
        if fmt == "json":
            return _read_json(path)
        if fmt == "jsonl":
            return _read_jsonl(path)
    except FairvisionError:
        raise
    except pd.errors.EmptyDataError:
        raise InputFileError(f"{path}: the file is empty") from None
    except pd.errors.ParserError as exc:
        raise InputFileError(f"{path}: cannot parse as {fmt.upper()}: {str(exc).splitlines()[-1]}") from None
    except UnicodeDecodeError:
        raise InputFileError(f"{path}: not UTF-8 text") from None
    except (OSError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputFileError(f"{path}: cannot read as {fmt}: {msg}") from None
    raise InputFileError(f"{path}: unknown table format {fmt!r}")


def read_raw_table(path: str | os.PathLike, *, fmt: str | None = None) -> pd.DataFrame:
    """Read any supported table file as is (no key-column normalisation), with one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    df = _read_raw(path, detect_format(path, fmt))
    df.columns = [str(c) for c in df.columns]
    check_unique_columns(df.columns, source=str(path), where="table")
    return df


def read_table(
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    image_root: str | os.PathLike | None = None,
    sample_id_col: str | None = None,
    subject_col: str | None = None,
    image_col: str | None = None,
) -> pd.DataFrame:
    """Read a sample table and normalise its key columns.

    Parameters
    ----------
    path : path-like
        CSV/TSV, Parquet, JSON (a list of records, ``{"samples": [...]}`` or
        the FairFace ``ground_truth.json`` layout with ``id``/``filename``) or
        JSONL.
    fmt : str, optional
        Force a format instead of guessing it from the suffix.
    image_root : path-like, optional
        Folder that relative image paths are resolved against; default: the
        table's own folder.
    sample_id_col, subject_col, image_col : str, optional
        Names of the columns to use as ``sample_id``, ``subject_id`` and
        ``image_path``. By default common aliases are recognised (``id``,
        ``image_id``; ``filename``, ``file_name``, ``path``).

    Returns
    -------
    pandas.DataFrame
        One row per sample with ``sample_id`` (string), optionally
        ``subject_id`` and ``image_path`` (absolute path strings), then the
        other columns unchanged.
    """
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    if path.is_dir():
        raise InputFileError(f"{path}: is a folder; give a table file (use fairvision.datasets.from_folder for image folders)")
    df = _read_raw(path, detect_format(path, fmt), [c for c in (sample_id_col, subject_col, image_col) if c])
    if df.shape[0] == 0:
        raise InputFileError(f"{path}: the table has no rows")
    df.columns = [str(c) for c in df.columns]
    check_unique_columns(df.columns, source=str(path), where="table")

    def pick(explicit: str | None, aliases: Sequence[str], role: str) -> str | None:
        if explicit is not None:
            if explicit not in df.columns:
                raise ColumnError(f"{path}: no column {explicit!r} for {role}; columns are {', '.join(df.columns)}")
            return explicit
        return next((a for a in aliases if a in df.columns), None)

    id_col = pick(sample_id_col, _ID_ALIASES, "the sample id")
    img_col = pick(image_col, _PATH_ALIASES, "the image path")
    subj_col = pick(subject_col, (SUBJECT_ID,), "the subject id")
    rename = {}
    if id_col and id_col != SAMPLE_ID:
        rename[id_col] = SAMPLE_ID
    if img_col and img_col != IMAGE_PATH:
        rename[img_col] = IMAGE_PATH
    if subj_col and subj_col != SUBJECT_ID:
        rename[subj_col] = SUBJECT_ID
    df = df.drop(columns=[c for c in rename.values() if c in df.columns and c not in rename]).rename(columns=rename)
    if SAMPLE_ID not in df.columns:
        if IMAGE_PATH in df.columns:
            df.insert(0, SAMPLE_ID, [Path(str(p)).stem for p in df[IMAGE_PATH]])
        else:
            df.insert(0, SAMPLE_ID, [f"row{i + 1}" for i in range(len(df))])
    df[SAMPLE_ID] = df[SAMPLE_ID].astype(str)
    if SUBJECT_ID in df.columns:
        df[SUBJECT_ID] = df[SUBJECT_ID].astype("string").astype(object)
    if IMAGE_PATH in df.columns:
        root = Path(image_root) if image_root is not None else path.parent
        df[IMAGE_PATH] = [
            None if (p is None or (isinstance(p, float) and np.isnan(p)))
            else str(p) if str(p).startswith("tar://")  # a WebDataset member reference: already absolute
            else str((root / str(p)) if not os.path.isabs(str(p)) else Path(str(p)))
            for p in df[IMAGE_PATH]
        ]
    df.attrs["source"] = str(path)
    return validate_sample_table(df, source=str(path))


def validate_sample_table(
    df: pd.DataFrame,
    *,
    source: str = "table",
    required: Iterable[str] = (),
    check_images: bool = False,
) -> pd.DataFrame:
    """Check a sample table; raise a one-line :class:`FairvisionError` if it is unusable.

    Checks: not empty; required columns present; ``sample_id`` unique and
    non-missing; and, when ``check_images``, every ``image_path`` exists.
    Row numbers in messages are 1-based data rows (the header is row 0).
    """
    if not isinstance(df, pd.DataFrame):
        raise FairvisionError(f"{source}: expected a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise FairvisionError(f"{source}: the table has no rows")
    for col in required:
        if col not in df.columns:
            raise ColumnError(f"{source}: missing column {col!r}; columns are {', '.join(map(str, df.columns))}")
    if SAMPLE_ID in df.columns:
        ids = df[SAMPLE_ID]
        missing = ids.isna().to_numpy() | (ids.astype(str).str.strip() == "").to_numpy()
        if missing.any():
            row = int(np.flatnonzero(missing)[0]) + 1
            raise ColumnError(f"{source}: row {row}: empty sample_id")
        dup = ids.duplicated(keep="first").to_numpy()
        if dup.any():
            row = int(np.flatnonzero(dup)[0])
            first = int(np.flatnonzero((ids == ids.iloc[row]).to_numpy())[0])
            raise ColumnError(
                f"{source}: row {row + 1}: duplicate sample_id {ids.iloc[row]!r} (first seen in row {first + 1})"
            )
    if check_images:
        if IMAGE_PATH not in df.columns:
            raise ColumnError(f"{source}: no image_path column; images are needed for this step")
        for i, p in enumerate(df[IMAGE_PATH]):
            missing = p is None or (isinstance(p, float) and np.isnan(p))
            if not missing and str(p).startswith("tar://"):  # a WebDataset member: its shard must exist
                missing = not os.path.isfile(parse_ref(str(p)).shard)
            elif not missing:
                missing = not os.path.isfile(str(p))
            if missing:
                raise InputFileError(f"{source}: row {i + 1}: image not found: {p}")
    return df


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a DataFrame as Parquet, CSV or JSON (by suffix), atomically."""
    from fairvision.io.atomic import atomic_write_bytes
    import io as _io

    path = Path(path)
    fmt = detect_format(path, None)
    buf = _io.BytesIO()
    out = df.copy()
    if fmt == "parquet":
        if isinstance(out.index, pd.MultiIndex) or out.index.name is not None:
            out = out.reset_index()
        out.columns = [str(c) for c in out.columns]
        out.to_parquet(buf, index=False)
    elif fmt in ("csv", "tsv"):
        out.to_csv(buf, sep="\t" if fmt == "tsv" else ",", index=False)
    elif fmt == "json":
        buf.write(out.to_json(orient="records", indent=1).encode())
    elif fmt == "jsonl":
        buf.write(out.to_json(orient="records", lines=True).encode())
    return atomic_write_bytes(path, buf.getvalue())

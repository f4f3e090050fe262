"""The tables of a batch skin measurement (:func:`fairvision.skin.batch.measure_images`): the images in, the rows out.

In: a sample table (DataFrame or table file) with an image path column, a folder of images, one image, a listing
file (one image path per line), a list of image paths, or WebDataset tar shards each become one table with a
unique ``sample_id`` and an ``image_path`` per image (:func:`sample_table`). Out: one row per image, with the
measurement columns in a fixed order, the skin-colour categories and the input's other columns
(:func:`result_table`), and its counts (:func:`summarize`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.datasets.demo import IMAGE_SUFFIXES, from_folder
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, read_table
from fairvision.io.validate import require_columns
from fairvision.io.webdataset import is_shard_pattern, list_samples
from fairvision.skin.categories import add_categories

__all__ = ["LISTING_SUFFIXES", "RESULT_COLUMNS", "read_listing", "result_table", "sample_table", "summarize"]

#: the first columns of a result table, in this order
RESULT_COLUMNS = [
    SAMPLE_ID, IMAGE_PATH, "L", "a", "b", "hue", "ita", "chroma", "n_pixels", "n_faces",
    "mask_method", "trust", "ok", "reason", "flags",
]

#: image listings: one image path per line (relative to the listing's folder); blank lines and # comments skipped
LISTING_SUFFIXES = (".txt", ".lst")


def sample_table(source) -> pd.DataFrame:
    """A sample table with ``sample_id`` and ``image_path`` (and the input table's other columns) from any
    accepted input: a DataFrame or table file with an image path column, a folder of images, one image, a
    listing file (:data:`LISTING_SUFFIXES`), WebDataset tar shards (images read in place), or an iterable of
    image paths (sample ids: the file stems, or the paths when two stems are the same).

    Raises
    ------
    InputFileError, ColumnError, FairvisionError
        No images, an empty image path, a repeated sample id (naming both images), a missing file.
    """
    if isinstance(source, pd.DataFrame):
        df = source.copy()
        require_columns(df, [IMAGE_PATH], source="table")
        if SAMPLE_ID not in df.columns:
            df.insert(0, SAMPLE_ID, [Path(str(p)).stem for p in df[IMAGE_PATH]])
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if is_shard_pattern(source):  # WebDataset tar shards: images read in place by the workers
            df = list_samples(source)
        elif p.is_dir():
            df = from_folder(p.resolve())
        elif p.suffix.lower() in IMAGE_SUFFIXES:
            if not p.is_file():
                raise InputFileError(f"{p}: no such image file")
            df = pd.DataFrame({SAMPLE_ID: [p.stem], IMAGE_PATH: [str(p.resolve())]})
        elif p.suffix.lower() in LISTING_SUFFIXES:
            df = sample_table(read_listing(p))
            df.attrs["source"] = str(p)
        else:
            df = read_table(p)
            if IMAGE_PATH not in df.columns:
                raise ColumnError(f"{p}: no image path column (image_path, filename, file_name, path or file)")
    else:
        paths = [os.path.abspath(str(x)) for x in source]
        if not paths:
            raise FairvisionError("no images given")
        stems = [Path(x).stem for x in paths]
        ids = stems if len(set(stems)) == len(stems) else paths
        df = pd.DataFrame({SAMPLE_ID: ids, IMAGE_PATH: paths})
    label = str(source) if isinstance(source, (str, os.PathLike)) else df.attrs.get("source", "table")
    if len(df) == 0:
        raise FairvisionError(f"{label}: no images given")
    df[SAMPLE_ID] = df[SAMPLE_ID].astype(str)
    missing = df[IMAGE_PATH].isna().to_numpy()
    if missing.any():
        raise ColumnError(f"{label}: row {int(np.flatnonzero(missing)[0]) + 1}: empty {IMAGE_PATH}")
    dup = df[SAMPLE_ID].duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        first = int(np.flatnonzero(df[SAMPLE_ID].to_numpy() == df[SAMPLE_ID].iloc[row])[0])
        raise ColumnError(f"{label}: row {row + 1}: duplicate sample_id {df[SAMPLE_ID].iloc[row]!r} "
                          f"({Path(str(df[IMAGE_PATH].iloc[first])).name} and {Path(str(df[IMAGE_PATH].iloc[row])).name})")
    return df.reset_index(drop=True)


def read_listing(path: Path) -> list[str]:
    """The image paths of a listing file (for millions of images, where a folder scan or a table is unwieldy)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such listing file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the listing: {exc}") from None
    paths = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not paths:
        raise InputFileError(f"{path}: the listing names no image")
    base = path.resolve().parent
    return [str(q if (q := Path(x)).is_absolute() else base / q) for x in paths]


def result_table(df: pd.DataFrame, records: list[dict], categories: bool) -> pd.DataFrame:
    """The rows of a batch measurement: ``records`` (one dict per row of the sample table ``df``, measured or
    read from the results store) as typed columns, :data:`RESULT_COLUMNS` first, then the other measurement
    columns, the categories (``categories``) and ``df``'s other columns; ``attrs["summary"]``: :func:`summarize`."""
    res = pd.DataFrame.from_records(records)
    for col in RESULT_COLUMNS:
        if col not in res.columns and col not in (SAMPLE_ID, IMAGE_PATH):
            res[col] = np.nan
    res.insert(0, SAMPLE_ID, df[SAMPLE_ID].to_numpy())
    res.insert(1, IMAGE_PATH, df[IMAGE_PATH].astype(str).to_numpy())
    for col in ("L", "a", "b", "hue", "ita", "chroma", "gray"):
        if col in res.columns:
            res[col] = pd.to_numeric(res[col], errors="coerce").astype(float)
    for col in res.columns:  # JSON null -> None: restore float columns from cached records
        if res[col].dtype == object:
            vals = res[col].dropna()
            if len(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                res[col] = pd.to_numeric(res[col], errors="coerce").astype(float)
            elif not len(vals) and (col.startswith(("spread_", "stability_")) or col == "gray"):
                res[col] = res[col].astype(float)
    res["ok"] = res["ok"].fillna(False).astype(bool)
    res["n_pixels"] = pd.to_numeric(res["n_pixels"], errors="coerce").fillna(0).astype(int)
    res["n_faces"] = pd.to_numeric(res["n_faces"], errors="coerce").fillna(0).astype(int)
    res["flags"] = res["flags"].fillna("").astype(str)
    res["reason"] = res["reason"].astype(object).where(res["reason"].notna(), None)
    ordered = RESULT_COLUMNS + [c for c in res.columns if c not in RESULT_COLUMNS]
    res = res[ordered]
    if categories:
        res = add_categories(res)
    extra = [c for c in df.columns if c not in res.columns]
    if extra:
        res = pd.concat([res, df[extra].reset_index(drop=True)], axis=1)
    res.attrs["summary"] = summarize(res)
    return res


def summarize(result: pd.DataFrame) -> dict:
    """Counts of a :func:`~fairvision.skin.batch.measure_images` table: measured, no face, too few pixels, failed (other reasons)."""
    ok = result["ok"].to_numpy(bool)
    flags = result["flags"].fillna("").astype(str)
    no_face = (~ok) & flags.str.contains("no_face").to_numpy()
    too_few = (~ok) & flags.str.contains("too_few_pixels").to_numpy() & ~no_face
    return {
        "images": int(len(result)),
        "measured": int(ok.sum()),
        "no_face": int(no_face.sum()),
        "too_few_pixels": int(too_few.sum()),
        "failed": int((~ok).sum() - no_face.sum() - too_few.sum()),
        "from_cache": int(result["from_cache"].sum()) if "from_cache" in result else 0,
    }

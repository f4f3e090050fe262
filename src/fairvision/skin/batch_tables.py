"""The tables of a batch skin measurement (:func:`fairvision.skin.batch.measure_images`): the images in, the rows out.

In: a sample table (DataFrame or table file) with an image path column, a folder of images, one image, a listing
file (one image path per line), a list of image paths, or WebDataset tar shards each become one table with a
unique ``sample_id`` and an ``image_path`` per image (:func:`sample_table`). Out: one row per image, with the
measurement columns in a fixed order, the skin-colour categories and the input's other columns
(:func:`result_table`), its counts (:func:`summarize`, :func:`summary_line`) and why rows failed
(:func:`failure_reasons`). A sample table's attribute columns join a result table row for row (:func:`join_samples`).
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

__all__ = ["FAILURE_REASONS", "LISTING_SUFFIXES", "RESULT_COLUMNS", "failure_reasons", "join_samples", "read_listing",
           "result_table", "sample_table", "summarize", "summary_line"]

#: the first columns of a result table, in this order
RESULT_COLUMNS = [
    SAMPLE_ID, IMAGE_PATH, "L", "a", "b", "hue", "ita", "chroma", "n_pixels", "n_faces",
    "mask_method", "trust", "ok", "reason", "flags",
]

#: why a row could not be measured, by its quality flag (the first that applies, in this order), in words
FAILURE_REASONS = {
    "no_face": "no face found", "too_few_pixels": "too few skin pixels", "unreadable_image": "unreadable image",
    "image_too_large": "image too large", "no_mask": "no mask file", "bad_mask": "unreadable mask file",
    "error": "error while measuring",
    # a measured greyscale photo, left out where its hue is needed (its measurement itself is ok)
    "achromatic": "no skin hue: greyscale image",
}

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


def failure_reasons(result: pd.DataFrame) -> np.ndarray:
    """Why each row of a :func:`~fairvision.skin.batch.measure_images` table was not measured, in words
    (:data:`FAILURE_REASONS`, by its flags; ``"too few skin pixels"`` also from the reason; else ``"could not be
    measured"``); None for measured rows. One short reason per kind, so that reasons can be counted."""
    ok = result["ok"].fillna(False).to_numpy(bool)
    flags = result["flags"].fillna("").astype(str)
    out = np.full(len(result), None, dtype=object)
    left = ~ok
    for flag, text in FAILURE_REASONS.items():
        hit = left & flags.str.contains(rf"(?:^|;){flag}(?:;|$)").to_numpy(bool)
        out[hit] = text
        left &= ~hit
    if "reason" in result.columns:
        few = left & result["reason"].fillna("").astype(str).str.startswith("too few skin pixels").to_numpy(bool)
        out[few] = FAILURE_REASONS["too_few_pixels"]
        left &= ~few
    out[left] = "could not be measured"
    return out


def summarize(result: pd.DataFrame) -> dict:
    """Counts of a :func:`~fairvision.skin.batch.measure_images` table: measured, no face, too few pixels, failed
    (other reasons, :func:`failure_reasons`) and read from the results store."""
    why = failure_reasons(result)
    no_face = int((why == FAILURE_REASONS["no_face"]).sum())
    too_few = int((why == FAILURE_REASONS["too_few_pixels"]).sum())
    measured = int(result["ok"].fillna(False).to_numpy(bool).sum())
    return {
        "images": int(len(result)),
        "measured": measured,
        "no_face": no_face,
        "too_few_pixels": too_few,
        "failed": int(len(result)) - measured - no_face - too_few,
        "from_cache": int(result["from_cache"].sum()) if "from_cache" in result else 0,
    }


def summary_line(summary: dict) -> str:
    """One line of a :func:`summarize` dict for the terminal:
    ``"540 images: 530 measured, 8 no face, 0 too few skin pixels, 2 failed (540 from the store)"``."""
    s = summary
    line = (f"{s['images']:,} images: {s['measured']:,} measured, {s['no_face']:,} no face, "
            f"{s['too_few_pixels']:,} too few skin pixels, {s['failed']:,} failed")
    if s.get("from_cache"):
        line += f" ({s['from_cache']:,} from the store)"
    return line


def _file_keys(paths) -> np.ndarray:
    """Image paths as comparable keys: absolute, normalised, links resolved (``tar://`` members as they are)."""
    return np.array([None if p is None or (isinstance(p, float) and np.isnan(p))
                     else str(p) if str(p).startswith("tar://") else os.path.realpath(str(p)) for p in paths],
                    dtype=object)


def join_samples(result: pd.DataFrame, samples: pd.DataFrame, *, source: str = "measurements",
                 samples_source: str = "samples") -> pd.DataFrame:
    """A measurement table with a sample table's columns (attributes, subject) joined to it, row for row.

    Rows are matched by image file (``image_path``, compared as absolute paths with links resolved) when both
    tables have one, names each sample once and matches every measured row; else by ``sample_id`` (a folder's images
    are named by their file name without suffix, as :func:`sample_table` names them). The sample table's columns
    other than ``sample_id`` and ``image_path`` replace columns of the same name (the measurement columns,
    :data:`RESULT_COLUMNS`, cannot be replaced).

    Raises
    ------
    ColumnError
        A sample column named like a measurement column; no key to match by; a measured image with no row in the
        sample table (the message names the first and how many).
    """
    clash = [c for c in samples.columns if c in RESULT_COLUMNS and c not in (SAMPLE_ID, IMAGE_PATH)]
    if clash:
        raise ColumnError(f"{samples_source}: column {clash[0]!r} is a measurement column of {source}; rename it")
    n = len(result)
    candidates = []
    if IMAGE_PATH in result.columns and IMAGE_PATH in samples.columns:
        candidates.append((IMAGE_PATH, _file_keys(result[IMAGE_PATH]), _file_keys(samples[IMAGE_PATH])))
    if SAMPLE_ID in result.columns and SAMPLE_ID in samples.columns:
        candidates.append((SAMPLE_ID, result[SAMPLE_ID].astype(str).to_numpy(object),
                           samples[SAMPLE_ID].astype(str).to_numpy(object)))
    if not candidates:
        raise ColumnError(f"{samples_source}: no sample_id or image_path column to match the rows of {source} by")
    best = None
    for name, left, right in candidates:
        index = pd.Index(right)
        pos = index.get_indexer(left) if index.is_unique else None
        if pos is None:  # a file named in two rows: matching by file is ambiguous
            continue
        found = pos >= 0
        if found.all():
            best = (name, pos)
            break
        if best is None or found.sum() > (best[1] >= 0).sum():
            best = (name, pos)
    if best is None:
        raise ColumnError(f"{samples_source}: an image_path is in two rows and there is no sample_id to match "
                          f"the rows of {source} by")
    name, pos = best
    missing = np.flatnonzero(pos < 0)
    if len(missing):
        i = int(missing[0])
        what = f"sample_id {str(result[SAMPLE_ID].iloc[i])!r}" if SAMPLE_ID in result.columns else f"row {i + 1}"
        if IMAGE_PATH in result.columns:
            what += f" ({Path(str(result[IMAGE_PATH].iloc[i])).name})"
        raise ColumnError(f"{source}: {len(missing):,} of {n:,} images have no row in {samples_source} (matched by "
                          f"image_path or sample_id; first: {what})")
    extra = [c for c in samples.columns if c not in (SAMPLE_ID, IMAGE_PATH)]
    joined = result.drop(columns=[c for c in extra if c in result.columns]).reset_index(drop=True)
    joined = pd.concat([joined, samples[extra].iloc[pos].reset_index(drop=True)], axis=1)
    joined.attrs = dict(result.attrs)
    joined.attrs["joined_by"] = name
    return joined

"""Rewrite the files of a dataset without a withdrawn subject's rows (docs/METHODS.md §13.5).

Tables (CSV/TSV, JSONL, JSON, Parquet; :func:`rewrite_table`) lose the flagged rows and may gain replacement
rows; COCO JSON files (:func:`coco_rewrite`) lose the withdrawn images and their annotations. CSV/TSV and JSONL
rows that stay keep their exact bytes; JSON and Parquet keep their values.
"""

from __future__ import annotations

import csv
import io as _io
import json
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.tables import SAMPLE_ID, detect_format


def id_strings(values: pd.Series) -> np.ndarray:
    """Ids as strings, as a user writes them (7.0 read from a CSV with gaps is "7"); missing -> None."""
    out = []
    for v in values.tolist():
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            out.append(None)
        elif isinstance(v, float) and v.is_integer():
            out.append(str(int(v)))
        else:
            out.append(str(v))
    return np.asarray(out, dtype=object)


def _csv_records(text: str, delimiter: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Lines of a CSV text (with their endings) and the (first, end) line span of every non-blank record,
    the header first, so rows can be dropped without touching the bytes of the others."""
    lines = text.splitlines(keepends=True)
    reader = csv.reader(iter(lines), delimiter=delimiter)
    spans, start = [], 0
    for row in reader:
        end = reader.line_num
        if row:
            spans.append((start, end))
        start = end
    return lines, spans


def _json_records(obj) -> tuple[list, str | None]:
    """The record list of a JSON table (as :func:`fairvision.io.tables.read_table` reads it) and its key."""
    if isinstance(obj, list):
        return obj, None
    if isinstance(obj, dict):
        for key in ("samples", "images", "data", "records"):
            if isinstance(obj.get(key), list):
                return obj[key], key
        return list(obj.items()), "__items__"
    raise FairvisionError("not a JSON table")


def _json_dumps_like(obj, original: str) -> str:
    """JSON text of ``obj`` laid out like ``original`` (indent, ASCII escaping, final newline)."""
    indent = None
    lines = original.splitlines()
    if len(lines) > 1:
        m = re.match(r"^([ \t]+)\S", lines[1])
        indent = m.group(1) if m else 0
    text = json.dumps(obj, indent=indent, ensure_ascii=original.isascii())
    return text + ("\n" if original.endswith("\n") else "")


def rewrite_table(path: Path, data_bytes: bytes, drop: np.ndarray, add: Sequence[dict] = ()) -> bytes:
    """New content of a table file with the rows flagged in ``drop`` removed and the records ``add``
    (raw column -> value) appended (docs/METHODS.md §13.5).

    CSV/TSV and JSONL rows that stay keep their exact bytes; JSON and Parquet keep their values (the file is
    re-serialised). A JSON object holding an ``annotations`` list next to its ``images`` (COCO) also loses the
    annotations of the removed images.
    """
    fmt = detect_format(path)
    drop = np.asarray(drop, bool)
    if fmt in ("csv", "tsv"):
        return _rewrite_csv(path, data_bytes, drop, add, "\t" if fmt == "tsv" else ",")
    rewrite = {"jsonl": _rewrite_jsonl, "json": _rewrite_json, "parquet": _rewrite_parquet}.get(fmt)
    if rewrite is None:  # pragma: no cover
        raise InputFileError(f"{path}: unknown table format {fmt!r}")
    return rewrite(path, data_bytes, drop, add)


def _count_check(path: Path, found: int, drop: np.ndarray) -> None:
    if found != drop.size:
        raise InputFileError(f"{path}: found {found} records but the table has {drop.size} rows")


def _rewrite_csv(path: Path, data_bytes: bytes, drop: np.ndarray, add: Sequence[dict], delim: str) -> bytes:
    """CSV/TSV: the records of the rows kept are cut out of the text unchanged; added rows follow the header."""
    bom = data_bytes.startswith(b"\xef\xbb\xbf")
    text = data_bytes.decode("utf-8-sig")
    lines, spans = _csv_records(text, delim)
    _count_check(path, len(spans) - 1, drop)
    gone = set()
    for (a, b), d in zip(spans[1:], drop):
        if d:
            gone.update(range(a, b))
    out = "".join(line for i, line in enumerate(lines) if i not in gone)
    if add:
        header = next(csv.reader([lines[spans[0][0]]], delimiter=delim))
        nl = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        if out and not out.endswith(("\n", "\r")):
            out += nl
        buf = _io.StringIO()
        w = csv.writer(buf, delimiter=delim, lineterminator=nl)
        for rec in add:
            w.writerow(["" if is_missing(rec.get(c)) else rec.get(c) for c in header])
        out += buf.getvalue()
    return (b"\xef\xbb\xbf" if bom else b"") + out.encode("utf-8")


def _rewrite_jsonl(path: Path, data_bytes: bytes, drop: np.ndarray, add: Sequence[dict]) -> bytes:
    """JSON Lines: the lines of the rows kept unchanged; added rows appended."""
    text = data_bytes.decode("utf-8")
    lines = text.splitlines(keepends=True)
    rec_lines = [i for i, line in enumerate(lines) if line.strip()]
    _count_check(path, len(rec_lines), drop)
    gone = {i for i, d in zip(rec_lines, drop) if d}
    out = "".join(line for i, line in enumerate(lines) if i not in gone)
    if add:
        if out and not out.endswith("\n"):
            out += "\n"
        out += "".join(json.dumps(clean_value(rec)) + "\n" for rec in add)
    return out.encode("utf-8")


def _rewrite_json(path: Path, data_bytes: bytes, drop: np.ndarray, add: Sequence[dict]) -> bytes:
    """JSON: re-serialised like the original; a COCO-like object also loses the removed images' annotations."""
    text = data_bytes.decode("utf-8")
    obj = json.loads(text)
    records, key = _json_records(obj)
    _count_check(path, len(records), drop)
    kept = [r for r, d in zip(records, drop) if not d]
    removed = [r for r, d in zip(records, drop) if d]
    if key == "__items__":
        obj = dict(kept)
        for rec in add:
            rec = dict(rec)
            obj[str(rec.pop(SAMPLE_ID))] = clean_value(rec)
    else:
        kept = kept + [clean_value(rec) for rec in add]
        if key is None:
            obj = kept
        else:
            obj[key] = kept
            if key == "images" and isinstance(obj.get("annotations"), list):
                ids = {str(r.get("id")) for r in removed if isinstance(r, dict) and r.get("id") is not None}
                obj["annotations"] = [a for a in obj["annotations"]
                                      if not (isinstance(a, dict) and str(a.get("image_id")) in ids)]
    return _json_dumps_like(obj, text).encode("utf-8")


def _rewrite_parquet(path: Path, data_bytes: bytes, drop: np.ndarray, add: Sequence[dict]) -> bytes:
    """Parquet: the rows kept, with the file's schema and compression."""
    pf = pq.ParquetFile(_io.BytesIO(data_bytes))
    table = pf.read()
    _count_check(path, table.num_rows, drop)
    compression = pf.metadata.row_group(0).column(0).compression.lower() if pf.metadata.num_row_groups else "snappy"
    table = table.filter(pa.array(~drop))
    if add:
        try:
            extra = pa.Table.from_pylist([{c: clean_value(rec.get(c)) for c in table.column_names} for rec in add],
                                         schema=table.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InputFileError(f"{path}: cannot add the replacement rows: {str(exc).splitlines()[0]}") from None
        table = pa.concat_tables([table, extra])
    buf = _io.BytesIO()
    pq.write_table(table, buf, compression=None if compression == "uncompressed" else compression)
    return buf.getvalue()


def is_missing(v) -> bool:
    """Whether a cell is empty (None, NA or NaN)."""
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def clean_value(v):
    """A value as JSON / Arrow takes it (numpy scalars unwrapped, NaN -> None)."""
    if isinstance(v, dict):
        return {k: clean_value(x) for k, x in v.items()}
    if is_missing(v):
        return None
    if isinstance(v, np.generic):
        return v.item()
    return v


def coco_rewrite(path: Path, data_bytes: bytes, sample_ids: set[str], image_paths: set[str],
                 subjects: set[str], roots: Sequence[Path] = ()) -> tuple[bytes | None, dict]:
    """New content of a COCO JSON file without the images of the withdrawn samples and their annotations
    (docs/METHODS.md §13.5).

    An image goes when its ``subject_id`` field is a withdrawn subject, or its ``file_name`` resolved against the
    COCO file's folder or one of ``roots`` is a withdrawn image path (``image_paths``, absolute). Failing a full
    path match, a ``file_name`` whose stem is a withdrawn sample id (the project's COCO convention), or an image
    without ``file_name`` whose ``id`` is one, goes, but only when that stem is unique in the file: ``train/001.jpg``
    and ``val/001.jpg`` are different images, and an ambiguous name is an error rather than a guess. Returns
    (None, counts) when nothing goes.
    """
    text = data_bytes.decode("utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    images = obj.get("images") if isinstance(obj, dict) else None
    if not isinstance(images, list):
        raise InputFileError(f"{path}: a COCO file needs an 'images' list")
    bases = [path.parent, *roots]
    stems = pd.Series([Path(str(im.get("file_name"))).stem for im in images
                       if isinstance(im, dict) and im.get("file_name") is not None], dtype=object)
    repeated = set(stems[stems.duplicated()])

    def full_match(name: str) -> bool:
        full = {os.path.abspath(name)} if os.path.isabs(name) else {os.path.abspath(b / name) for b in bases}
        return bool(full & image_paths)

    # stems that one image of the file matches by its full path: the others of that name are other images
    resolved = {Path(str(im["file_name"])).stem for im in images
                if isinstance(im, dict) and im.get("file_name") is not None and full_match(str(im["file_name"]))}
    gone_ids, kept = set(), []
    for img in images:
        if not isinstance(img, dict):
            kept.append(img)
            continue
        name = img.get("file_name")
        hit = (str(img.get("subject_id")) in subjects if img.get("subject_id") is not None else False)
        if not hit and name is not None:
            name = str(name)
            stem = Path(name).stem
            hit = full_match(name)
            if not hit and stem in sample_ids and stem not in resolved:
                if stem in repeated:
                    raise InputFileError(f"{path}: image {name!r}: its name matches withdrawn sample {stem!r} but "
                                         f"{len(stems[stems == stem])} images of this file share that name and none "
                                         "resolves to the sample's image path; fix the paths, nothing was changed")
                hit = True
        elif not hit and img.get("id") is not None:
            hit = str(img.get("id")) in sample_ids
        if hit:
            gone_ids.add(str(img.get("id")))
        else:
            kept.append(img)
    anns = obj.get("annotations") if isinstance(obj.get("annotations"), list) else []
    kept_anns = [a for a in anns if not (isinstance(a, dict) and str(a.get("image_id")) in gone_ids)]
    counts = {"images": len(images) - len(kept), "annotations": len(anns) - len(kept_anns),
              "images_before": len(images), "annotations_before": len(anns)}
    if not counts["images"] and not counts["annotations"]:
        return None, counts
    obj["images"] = kept
    if "annotations" in obj:
        obj["annotations"] = kept_anns
    return _json_dumps_like(obj, text).encode("utf-8"), counts


def is_coco(path: Path, data_bytes: bytes) -> bool:
    """Whether a derived JSON file is a COCO file (an object with ``images`` and ``annotations``)."""
    if path.suffix.lower() != ".json":
        return False
    head = data_bytes[:1_000_000].decode("utf-8", "replace")
    return '"annotations"' in head and '"images"' in head and head.lstrip().startswith("{")

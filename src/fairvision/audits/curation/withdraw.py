"""Consent withdrawal: remove a subject everywhere, log it, propose replacements (docs/METHODS.md §13.5).

A dataset is a *samples table* (``sample_id``, ``subject_id``, ``image_path``, attributes; read with
:func:`fairvision.io.tables.read_table`), any number of *derived files* (tables with a ``sample_id`` and/or
``subject_id`` column, and COCO JSON files whose images are named after the samples) and the results store
(:class:`fairvision.io.store.ResultsStore`). :func:`plan_withdrawal` works out, without changing anything, which
rows of which file belong to the withdrawn subjects, the new content of every file that changes (other rows keep
their bytes in CSV/TSV/JSONL files, their values in JSON and Parquet), the store rows, the SHA-256 of the
subject's image files and, with a candidate pool, an optimal replacement proposal and the group table before and
after. :func:`apply_withdrawal` commits a plan as one step:

1. under an exclusive lock on the dataset (``.<samples name>.withdraw.lock`` beside the samples table), every
   new file version is written to a temporary name next to its file and synced, with a journal
   (``.<samples name>.withdraw.journal.json``) saying ``prepared`` and naming the temporaries;
2. the journal is rewritten (atomically, synced) as ``committed``: the commit point;
3. the renames, image deletions, :meth:`ResultsStore.forget <fairvision.io.store.ResultsStore.forget>` of each
   subject and the audit-log line are done, and the journal is removed.

A process killed before the commit point leaves the old state (the next run removes the temporaries); one killed
after it leaves a committed journal that the next :func:`recover` (every ``fairvision curate withdraw`` run starts
with it) finishes, each step being idempotent (the log line is appended only if its ``withdrawal_id`` is not in the
log yet). Test hooks: ``FAIRVISION_TEST_CRASH_BEFORE_COMMIT=1`` kills the process (SIGKILL) after step 1, and
``FAIRVISION_TEST_CRASH_AFTER_RENAMES=N`` after N renames of step 3.

The audit log is JSON Lines, opened with ``O_APPEND`` and never rewritten: who, when, which subjects (or their
SHA-256 with ``hash_subject``), every file changed with its row counts and the SHA-256 of its contents before and
after, the SHA-256 of every removed image's bytes (never the image), the store rows removed, the replacements.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import getpass
import hashlib
import io as _io
import json
import os
import re
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.optimize import linear_sum_assignment

from fairvision import __version__
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.groups import group_counts
from fairvision.io.store import ResultsStore, file_sha256
from fairvision.io.tables import (IMAGE_PATH, SAMPLE_ID, SUBJECT_ID, detect_format, read_raw_table,
                                  read_table)
from fairvision.schema import Attribute

try:  # POSIX; elsewhere the lock is a no-op
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

#: default primary match attributes (docs/METHODS.md §13.5): for each slot the first column present is used
DEFAULT_MATCH = (("pronoun", "gender", "sex"), ("age_group", "age"),
                 ("ancestry", "ancestry_region", "regional_ancestry", "region", "race"))
#: file name of the audit log beside the samples table
LOG_NAME = "withdrawals.log.jsonl"
CRASH_BEFORE_COMMIT_ENV = "FAIRVISION_TEST_CRASH_BEFORE_COMMIT"
CRASH_AFTER_RENAMES_ENV = "FAIRVISION_TEST_CRASH_AFTER_RENAMES"
_SUBJECT_SALT = "fairvision-withdrawn-subject:"


# ---------------------------------------------------------------------------------------------- small helpers

def subject_hash(subject_id: str) -> str:
    """SHA-256 of a subject id (with a fixed prefix), as the log records it: pseudonymous, not anonymous (a
    short id can be found again by trying ids)."""
    return hashlib.sha256((_SUBJECT_SALT + str(subject_id)).encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _id_strings(values: pd.Series) -> np.ndarray:
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


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_synced(path: Path, data: bytes, *, mode_of: Path | None = None) -> None:
    """Write ``data`` to ``path`` (a fresh temporary name) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        if mode_of is not None and mode_of.exists():
            os.fchmod(fd, mode_of.stat().st_mode & 0o7777)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _durable_replace_text(path: Path, text: str) -> None:
    """Atomically and durably replace ``path`` with ``text`` (temporary, fsync, rename, fsync folder)."""
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    _write_synced(tmp, text.encode("utf-8"))
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _crash_hook(env: str, count: int | None = None) -> None:
    """Test hook: SIGKILL this process (docs/METHODS.md §13.5) when ``env`` asks for it."""
    value = os.environ.get(env)
    if not value:
        return
    if count is None or (value.strip().isdigit() and int(value) == count):
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------------------- file rewriting

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
        bom = data_bytes.startswith(b"\xef\xbb\xbf")
        text = data_bytes.decode("utf-8-sig")
        delim = "\t" if fmt == "tsv" else ","
        lines, spans = _csv_records(text, delim)
        if len(spans) - 1 != drop.size:
            raise InputFileError(f"{path}: found {len(spans) - 1} records but the table has {drop.size} rows")
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
                w.writerow(["" if _missing(rec.get(c)) else rec.get(c) for c in header])
            out += buf.getvalue()
        return (b"\xef\xbb\xbf" if bom else b"") + out.encode("utf-8")
    if fmt == "jsonl":
        text = data_bytes.decode("utf-8")
        lines = text.splitlines(keepends=True)
        rec_lines = [i for i, line in enumerate(lines) if line.strip()]
        if len(rec_lines) != drop.size:
            raise InputFileError(f"{path}: found {len(rec_lines)} records but the table has {drop.size} rows")
        gone = {i for i, d in zip(rec_lines, drop) if d}
        out = "".join(line for i, line in enumerate(lines) if i not in gone)
        if add:
            if out and not out.endswith("\n"):
                out += "\n"
            out += "".join(json.dumps(_clean(rec)) + "\n" for rec in add)
        return out.encode("utf-8")
    if fmt == "json":
        text = data_bytes.decode("utf-8")
        obj = json.loads(text)
        records, key = _json_records(obj)
        if len(records) != drop.size:
            raise InputFileError(f"{path}: found {len(records)} records but the table has {drop.size} rows")
        kept = [r for r, d in zip(records, drop) if not d]
        removed = [r for r, d in zip(records, drop) if d]
        if key == "__items__":
            obj = dict(kept)
            for rec in add:
                rec = dict(rec)
                obj[str(rec.pop(SAMPLE_ID))] = _clean(rec)
        else:
            kept = kept + [_clean(rec) for rec in add]
            if key is None:
                obj = kept
            else:
                obj[key] = kept
                if key == "images" and isinstance(obj.get("annotations"), list):
                    ids = {str(r.get("id")) for r in removed if isinstance(r, dict) and r.get("id") is not None}
                    obj["annotations"] = [a for a in obj["annotations"]
                                          if not (isinstance(a, dict) and str(a.get("image_id")) in ids)]
        return _json_dumps_like(obj, text).encode("utf-8")
    if fmt == "parquet":
        pf = pq.ParquetFile(_io.BytesIO(data_bytes))
        table = pf.read()
        if table.num_rows != drop.size:
            raise InputFileError(f"{path}: found {table.num_rows} records but the table has {drop.size} rows")
        compression = pf.metadata.row_group(0).column(0).compression.lower() if pf.metadata.num_row_groups else "snappy"
        table = table.filter(pa.array(~drop))
        if add:
            try:
                extra = pa.Table.from_pylist([{c: _clean(rec.get(c)) for c in table.column_names} for rec in add],
                                             schema=table.schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InputFileError(f"{path}: cannot add the replacement rows: {str(exc).splitlines()[0]}") from None
            table = pa.concat_tables([table, extra])
        buf = _io.BytesIO()
        pq.write_table(table, buf, compression=None if compression == "uncompressed" else compression)
        return buf.getvalue()
    raise InputFileError(f"{path}: unknown table format {fmt!r}")  # pragma: no cover


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def _clean(v):
    """A value as JSON / Arrow takes it (numpy scalars unwrapped, NaN -> None)."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if _missing(v):
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


def _is_coco(path: Path, data_bytes: bytes) -> bool:
    if path.suffix.lower() != ".json":
        return False
    head = data_bytes[:1_000_000].decode("utf-8", "replace")
    return '"annotations"' in head and '"images"' in head and head.lstrip().startswith("{")


# ---------------------------------------------------------------------------------------------- replacement

def resolve_match(data: pd.DataFrame, match: Sequence[str] | None, *, source: str = "samples") -> list[str]:
    """The primary match attributes: ``match`` (each must be a column of ``data``), or by default, for each
    slot of :data:`DEFAULT_MATCH` (pronoun, age group, ancestry), the first of its names that is a column."""
    if match:
        for c in match:
            if c not in data.columns:
                raise ColumnError(f"{source}: no column {c!r} to match on; columns are {', '.join(map(str, data.columns))}")
        return list(dict.fromkeys(match))
    found = [next((c for c in slot if c in data.columns), None) for slot in DEFAULT_MATCH]
    found = [c for c in found if c]
    if not found:
        raise ColumnError(f"{source}: none of the default match columns ({', '.join(s for slot in DEFAULT_MATCH for s in slot)}); "
                          "name them with --match")
    return found


def _mismatch(a: pd.DataFrame, b: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """Number of columns in ``cols`` on which row i of ``a`` and row j of ``b`` differ (missing = missing)."""
    out = np.zeros((len(a), len(b)), np.int64)
    for c in cols:
        both = pd.concat([a[c], b[c]], ignore_index=True).astype("string").fillna("\0missing")
        codes, _ = pd.factorize(both)
        out += codes[: len(a), None] != codes[None, len(a):]
    return out


def _feature_distance(a: pd.DataFrame, b: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """RMS over ``cols`` of the range-scaled absolute difference, in [0, 1]; a missing value counts as 1."""
    if not cols:
        return np.zeros((len(a), len(b)))
    sq = np.zeros((len(a), len(b)))
    for c in cols:
        x = pd.to_numeric(a[c], errors="coerce").to_numpy(float)
        y = pd.to_numeric(b[c], errors="coerce").to_numpy(float)
        allv = np.concatenate([x, y])
        span = np.nanmax(allv) - np.nanmin(allv) if np.isfinite(allv).any() else 0.0
        d = np.abs(x[:, None] - y[None, :]) / span if span > 0 else np.zeros((len(x), len(y)))
        sq += np.where(np.isnan(d), 1.0, np.minimum(d, 1.0)) ** 2
    return np.sqrt(sq / len(cols))


def match_replacements(withdrawn: pd.DataFrame, candidates: pd.DataFrame, match: Sequence[str],
                       secondary: Sequence[str] = (), features: Sequence[str] = ()) -> pd.DataFrame:
    """The optimal one-to-one assignment of candidates to withdrawn images (docs/METHODS.md §13.5).

    The cost of giving candidate j to withdrawn image i is lexicographic: first the number of ``match``
    attributes on which they differ, then the number of ``secondary`` ones, then the RMS range-scaled distance
    of the numeric ``features``; the weights make any primary mismatch outweigh every secondary difference of
    the whole assignment, and those every feature distance. The total is minimised with the Hungarian method
    (:func:`scipy.optimize.linear_sum_assignment`), each candidate used at most once.

    Parameters
    ----------
    withdrawn, candidates : pandas.DataFrame
        One row per image, with every column named in ``match``, ``secondary`` and ``features``.
    match, secondary, features : sequence of str

    Returns
    -------
    pandas.DataFrame
        One row per withdrawn image, in its order: ``candidate`` (row position in ``candidates``, -1 when there
        are fewer candidates than withdrawn images), ``primary_mismatches``, ``secondary_mismatches``,
        ``distance`` and ``cost``.
    """
    n, m = len(withdrawn), len(candidates)
    out = pd.DataFrame({"candidate": np.full(n, -1, np.int64), "primary_mismatches": np.zeros(n, np.int64),
                        "secondary_mismatches": np.zeros(n, np.int64), "distance": np.full(n, np.nan),
                        "cost": np.full(n, np.nan)})
    if n == 0 or m == 0:
        return out
    p = _mismatch(withdrawn, candidates, match)
    s = _mismatch(withdrawn, candidates, secondary)
    d = _feature_distance(withdrawn, candidates, features)
    w2 = float(n + 1) if features else 1.0          # > total feature distance of any assignment (<= n)
    w1 = n * len(secondary) * w2 + (n if features else 0) + 1.0  # > total secondary part of any assignment
    cost = w1 * p + w2 * s + d
    rows, cols = linear_sum_assignment(cost)
    out.loc[rows, "candidate"] = cols
    out.loc[rows, "primary_mismatches"] = p[rows, cols]
    out.loc[rows, "secondary_mismatches"] = s[rows, cols]
    out.loc[rows, "distance"] = d[rows, cols]
    out.loc[rows, "cost"] = cost[rows, cols]
    return out


def _natural(s: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", s)]


def group_table(frames: dict[str, pd.DataFrame], attrs: Sequence[str]) -> pd.DataFrame:
    """Image counts of every combination of ``attrs`` in each frame (one column per frame), every value seen
    in any frame declared so empty cells show (docs/METHODS.md §13.5)."""
    schema_attrs = []
    for a in attrs:
        seen = set()
        for f in frames.values():
            if a in f.columns:
                seen |= {str(v) for v in f[a].dropna().tolist()}
        first = next(iter(frames.values()))
        if isinstance(first.get(a), pd.Series) and isinstance(first[a].dtype, pd.CategoricalDtype):
            cats = [str(c) for c in first[a].cat.categories]
            cats += sorted(seen - set(cats), key=_natural)
        else:
            cats = sorted(seen, key=_natural)
        schema_attrs.append(Attribute(a, categories=cats, missing="keep", allow_unknown=True))
    cols = {}
    index = None
    for name, f in frames.items():
        if len(f):
            t = group_counts(f.reset_index(drop=True), schema_attrs)["n_samples"]
            index = t.index if index is None else index
            cols[name] = t
        else:
            cols[name] = None
    if index is None:
        return pd.DataFrame(columns=list(frames))
    out = pd.DataFrame({k: (v.reindex(index, fill_value=0) if v is not None else pd.Series(0, index=index))
                        for k, v in cols.items()})
    return out.fillna(0).astype(np.int64)


@dataclass
class Replacement:
    """A replacement proposal: which pool image replaces which withdrawn image (docs/METHODS.md §13.5)."""

    pool_path: Path
    pool_sha256: str
    match: list[str]
    secondary: list[str]
    features: list[str]
    pairs: pd.DataFrame                 # withdrawn_sample_id, sample_id (candidate), mismatches, cost, attributes
    chosen: pd.DataFrame                # the chosen pool rows (normalised columns)
    chosen_raw: list[dict]              # the same rows as raw records of the pool file
    n_candidates: int
    n_eligible: int
    excluded: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- the plan

@dataclass
class FileChange:
    """One file a withdrawal changes: its new content and row counts."""

    path: Path
    role: str                       # "samples", "table" or "coco"
    rows_before: int
    rows_removed: int
    rows_added: int
    sha256_before: str
    new_bytes: bytes = field(repr=False)
    detail: str = ""

    @property
    def sha256_after(self) -> str:
        return _sha256(self.new_bytes)


@dataclass
class WithdrawalPlan:
    """Everything a withdrawal would change (docs/METHODS.md §13.5); nothing is changed until
    :func:`apply_withdrawal`."""

    samples_path: Path
    subjects: list[str]
    sample_ids: list[str]
    files: list[FileChange]
    scanned: list[Path]
    images: pd.DataFrame                # sample_id, image_path, sha256, exists
    delete_images: bool
    store_root: Path | None
    store_rows: dict[str, int]
    replacement: Replacement | None
    groups: pd.DataFrame | None
    log_path: Path
    previous: list[dict]                # earlier log entries of these subjects
    #: SHA-256 of every file read for the plan (the samples table and every scanned derived file, changed or
    #: not), re-checked by :func:`apply_withdrawal`: a file that gained a row of the subject meanwhile is caught
    checked: dict[Path, str] = field(default_factory=dict)

    @property
    def nothing_to_do(self) -> bool:
        return (not self.files and not sum(self.store_rows.values())
                and not (self.delete_images and bool((self.images["exists"] & ~self.images["shared"]).any())))

    def to_frame(self, *, hash_subject: bool = False) -> pd.DataFrame:
        """One row per thing changed: ``kind`` (samples, table, coco, store, image), ``path``,
        ``rows_before``, ``rows_removed``, ``rows_added`` (whole numbers, missing where they do not apply),
        ``sha256_before``, ``sha256_after``, ``detail``. With ``hash_subject`` an image row has no path (its
        file name is often the sample id; the log leaves it out too), only its SHA-256."""
        rows = [{"kind": f.role, "path": str(f.path), "rows_before": f.rows_before, "rows_removed": f.rows_removed,
                 "rows_added": f.rows_added, "sha256_before": f.sha256_before, "sha256_after": f.sha256_after,
                 "detail": f.detail} for f in self.files]
        for stage, n in sorted(self.store_rows.items()):
            rows.append({"kind": "store", "path": f"{self.store_root}::{stage}", "rows_before": None,
                         "rows_removed": int(n), "rows_added": 0, "sha256_before": None, "sha256_after": None,
                         "detail": f"stage {stage}"})
        for r in self.images.itertuples(index=False):
            rows.append({"kind": "image", "path": None if hash_subject else r.image_path, "rows_before": None,
                         "rows_removed": int(bool(self.delete_images and r.exists and not r.shared)), "rows_added": 0,
                         "sha256_before": r.sha256, "sha256_after": None,
                         "detail": ("shared with a kept row, kept" if r.shared else "deleted" if self.delete_images
                                    else "listed, kept") if r.exists else "missing"})
        out = pd.DataFrame(rows, columns=["kind", "path", "rows_before", "rows_removed", "rows_added",
                                          "sha256_before", "sha256_after", "detail"])
        for c in ("rows_before", "rows_removed", "rows_added"):  # 100, not 100.0 next to a missing count
            out[c] = pd.to_numeric(out[c]).astype("Int64")
        return out

    def pairs_frame(self, *, hash_subject: bool = False) -> pd.DataFrame | None:
        """The replacement pairs (None without a pool). With ``hash_subject`` the withdrawn sample ids are
        replaced by their salted SHA-256 (:func:`subject_hash`, as the log hashes subject ids), in a column
        ``withdrawn_sample_sha256``."""
        if self.replacement is None:
            return None
        pairs = self.replacement.pairs.copy()
        if hash_subject:
            pairs.insert(0, "withdrawn_sample_sha256", [subject_hash(s) for s in pairs["withdrawn_sample_id"]])
            pairs = pairs.drop(columns="withdrawn_sample_id")
        return pairs

    def log_entry(self, *, operator: str | None = None, hash_subject: bool = False) -> dict:
        """The audit-log record of this withdrawal (no image content, only hashes)."""
        rep = self.replacement
        entry = {
            "withdrawal_id": uuid.uuid4().hex,
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "operator": operator or default_operator(),
            "fairvision": __version__,
            "subjects": None if hash_subject else list(self.subjects),
            "subject_sha256": [subject_hash(s) for s in self.subjects],
            "samples": os.path.abspath(self.samples_path),
            "files": [{"path": os.path.abspath(f.path), "role": f.role, "rows_before": f.rows_before,
                       "rows_removed": f.rows_removed, "rows_added": f.rows_added,
                       "sha256_before": f.sha256_before, "sha256_after": f.sha256_after} for f in self.files],
            "images": [{**({} if hash_subject else {"sample_id": r.sample_id}), "sha256": r.sha256,
                        "deleted": bool(self.delete_images and r.exists and not r.shared)}
                       for r in self.images.itertuples(index=False)],
            "store": None if self.store_root is None else {"root": os.path.abspath(self.store_root),
                                                           "rows_removed": dict(sorted(self.store_rows.items()))},
            "replacement": None,
        }
        if rep is not None:
            added = bool(self.files and self.files[0].role == "samples" and self.files[0].rows_added)
            entry["replacement"] = {
                "pool": os.path.abspath(rep.pool_path), "pool_sha256": rep.pool_sha256, "match": rep.match,
                "secondary": rep.secondary, "features": rep.features, "added": added,
                "pairs": [{**({} if hash_subject else {"withdrawn": r.withdrawn_sample_id}), "sample_id": r.sample_id,
                           "primary_mismatches": int(r.primary_mismatches),
                           "secondary_mismatches": int(r.secondary_mismatches)}
                          for r in rep.pairs.itertuples(index=False) if r.sample_id is not None],
            }
        return entry


def default_operator() -> str:
    """The OS user name (``unknown`` when there is none)."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user database (containers)
        return "unknown"


def read_log(path: Path) -> list[dict]:
    """The records of an audit log (unreadable lines are skipped)."""
    out = []
    if not path.is_file():
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if isinstance(rec, dict):
                    out.append(rec)
    return out


def _raw_columns(raw: pd.DataFrame, norm: pd.DataFrame) -> dict[str, str]:
    """Normalised column name -> raw column name (read_table renames in place and may insert sample_id first)."""
    rc, nc = list(raw.columns), list(norm.columns)
    if len(nc) == len(rc) + 1 and nc[0] == SAMPLE_ID:
        nc = nc[1:]
    return dict(zip(nc, rc)) if len(nc) == len(rc) else {c: c for c in rc}


def plan_withdrawal(
    samples: str | os.PathLike,
    subjects: Sequence[str],
    *,
    derived: Sequence[str | os.PathLike] = (),
    store: ResultsStore | None = None,
    pool: str | os.PathLike | None = None,
    match: Sequence[str] | None = None,
    secondary: Sequence[str] = (),
    features: Sequence[str] = (),
    replace: bool = False,
    delete_images: bool = False,
    log: str | os.PathLike | None = None,
    subject_col: str | None = None,
) -> WithdrawalPlan:
    """Work out what withdrawing ``subjects`` changes, without changing anything (docs/METHODS.md §13.5).

    Parameters
    ----------
    samples : path
        The samples table. Without a subject column every sample is its own subject (subject id = sample id).
    subjects : sequence of str
        Subject ids to withdraw.
    derived : sequence of path
        Derived files: tables (CSV/TSV/Parquet/JSON/JSONL) with a ``sample_id`` and/or ``subject_id`` column,
        or COCO JSON files (``images`` and ``annotations``).
    store : ResultsStore, optional
        The results store whose rows of the subjects go (counted here with a dry-run ``forget``).
    pool : path, optional
        Candidate images (a table like ``samples``) for the replacement proposal.
    match, secondary, features : sequence of str
        Primary match attributes (default: pronoun/gender, age group, ancestry, those present), secondary
        attributes, numeric features (see :func:`match_replacements`).
    replace : bool
        Add the chosen candidates to the samples table when the plan is applied.
    delete_images : bool
        Delete the subjects' image files when applied (else they are listed).
    log : path, optional
        Audit log (default ``withdrawals.log.jsonl`` beside the samples table).
    subject_col : str, optional
        Column holding the subject id (default ``subject_id``).

    Returns
    -------
    WithdrawalPlan
    """
    samples = Path(samples)
    subjects = [str(s).strip() for s in subjects]
    if not subjects or any(not s for s in subjects):
        raise FairvisionError("give at least one non-empty --subject")
    subjects = list(dict.fromkeys(subjects))
    log_path = Path(log) if log is not None else samples.parent / LOG_NAME
    data = read_table(samples, subject_col=subject_col)
    raw = read_raw_table(samples)
    if len(raw) != len(data):  # pragma: no cover - read_table keeps every row
        raise InputFileError(f"{samples}: cannot align the table's rows")
    subj_values = _id_strings(data[SUBJECT_ID]) if SUBJECT_ID in data.columns else data[SAMPLE_ID].to_numpy(object)
    wanted = set(subjects)
    hit = np.isin(subj_values, list(wanted))
    sample_ids = data.loc[hit, SAMPLE_ID].astype(str).tolist()
    image_paths = data.loc[hit, IMAGE_PATH].tolist() if IMAGE_PATH in data.columns else [None] * int(hit.sum())
    image_abs = {os.path.abspath(str(p)) for p in image_paths if p is not None and not _missing(p)}
    sid_set = set(sample_ids)

    # replacement first: its rows are appended to the samples table
    replacement, groups = None, None
    if replace and pool is None:
        raise FairvisionError("--replace needs a candidate pool (--pool TABLE)")
    previous_all = read_log(log_path)
    if pool is not None:
        replacement = _propose(Path(pool), data, hit, match, secondary, features, wanted, previous_all)
        kept = data.loc[~hit]
        frames = {"before": data, "after_removal": kept,
                  "after_replacement": pd.concat([kept, replacement.chosen], ignore_index=True)}
        groups = group_table(frames, replacement.match)
        groups["change"] = groups["after_replacement"] - groups["before"]

    files: list[FileChange] = []
    samples_bytes = samples.read_bytes()
    checked = {samples: _sha256(samples_bytes)}
    add = []
    if replace and replacement is not None and len(replacement.chosen):
        add = _records_for(raw, data, replacement, samples)
    if hit.any() or add:
        new = rewrite_table(samples, samples_bytes, hit, add)
        files.append(FileChange(samples, "samples", len(data), int(hit.sum()), len(add), _sha256(samples_bytes), new,
                                f"{int(hit.sum())} of {len(data)} rows" + (f", {len(add)} added" if add else "")))

    scanned = []
    seen = {samples.resolve()}
    for d in derived:
        d = Path(d)
        if not d.is_file():
            raise InputFileError(f"{d}: no such file")
        if d.resolve() in seen:
            raise InputFileError(f"{d}: given twice (or it is the samples table)")
        seen.add(d.resolve())
        scanned.append(d)
        b = d.read_bytes()
        checked[d] = _sha256(b)
        if _is_coco(d, b):
            new, counts = coco_rewrite(d, b, sid_set, image_abs, wanted, roots=[samples.parent])
            if new is not None:
                files.append(FileChange(d, "coco", counts["images_before"] + counts["annotations_before"],
                                        counts["images"] + counts["annotations"], 0, _sha256(b), new,
                                        f"{counts['images']} images, {counts['annotations']} annotations"))
            continue
        draw = read_raw_table(d)
        if SAMPLE_ID not in draw.columns and SUBJECT_ID not in draw.columns:
            raise ColumnError(f"{d}: no sample_id or subject_id column to find the subject's rows by")
        drop = np.zeros(len(draw), bool)
        if SAMPLE_ID in draw.columns:
            drop |= np.isin(_id_strings(draw[SAMPLE_ID]), list(sid_set))
        if SUBJECT_ID in draw.columns:
            drop |= np.isin(_id_strings(draw[SUBJECT_ID]), list(wanted))
        if drop.any():
            files.append(FileChange(d, "table", len(draw), int(drop.sum()), 0, _sha256(b), rewrite_table(d, b, drop),
                                    f"{int(drop.sum())} of {len(draw)} rows"))

    images = pd.DataFrame({
        SAMPLE_ID: sample_ids,
        IMAGE_PATH: [None if _missing(p) else str(p) for p in image_paths],
    })
    images["exists"] = [p is not None and os.path.isfile(p) for p in images[IMAGE_PATH]]
    images["sha256"] = [file_sha256(p) if e else None for p, e in zip(images[IMAGE_PATH], images["exists"])]
    # an image file that a kept row also shows (several people in one photo) is neither deleted nor forgotten
    kept_paths = ({os.path.abspath(str(p)) for p in data.loc[~hit, IMAGE_PATH] if p is not None and not _missing(p)}
                  if IMAGE_PATH in data.columns else set())
    images["shared"] = [p is not None and os.path.abspath(p) in kept_paths for p in images[IMAGE_PATH]]
    # the store is shared by every dataset and short subject ids repeat across them: its rows go by the
    # content hash of this dataset's withdrawn images, never by subject id alone
    image_hashes = sorted({h for h, sh in zip(images["sha256"], images["shared"]) if h and not sh})

    store_rows: dict[str, int] = {}
    if store is not None and image_hashes:
        store_rows = {k: int(v) for k, v in store.forget(None, content_hashes=image_hashes, dry_run=True).items()}

    hashes = {subject_hash(s): s for s in subjects}
    previous = [e for e in previous_all if set(e.get("subject_sha256") or ()) & set(hashes)]
    found = set(subj_values[hit].tolist())
    elsewhere = any(f.role != "samples" for f in files)
    unknown = [s for s in subjects
               if s not in found and not elsewhere and not any(subject_hash(s) in (e.get("subject_sha256") or ())
                                                              for e in previous)]
    if unknown:
        raise FairvisionError(f"{samples}: subject {unknown[0]!r} not found (no row here, in the derived files or "
                              f"the store, and no earlier withdrawal in {log_path})")
    return WithdrawalPlan(samples, subjects, sample_ids, files, scanned, images, bool(delete_images),
                          None if store is None else store.root, store_rows, replacement, groups, log_path,
                          previous, checked)


def _records_for(raw: pd.DataFrame, data: pd.DataFrame, rep: Replacement, samples: Path) -> list[dict]:
    """The chosen pool rows as raw records of the samples file (its column names; image paths relative to the
    samples table's folder when inside it)."""
    to_raw = _raw_columns(raw, data)
    out = []
    for (_, row), rec in zip(rep.chosen.iterrows(), rep.chosen_raw):
        new = {}
        for norm_col, raw_col in to_raw.items():
            if norm_col == IMAGE_PATH and not _missing(row.get(IMAGE_PATH)):
                p = Path(str(row[IMAGE_PATH]))
                with contextlib.suppress(ValueError):
                    p = p.resolve().relative_to(samples.parent.resolve())
                new[raw_col] = str(p)
            elif norm_col in row.index and not _missing(row.get(norm_col)):
                new[raw_col] = _clean(row[norm_col])
            else:
                new[raw_col] = _clean(rec.get(raw_col))
        if SAMPLE_ID not in to_raw:  # the id is the key of a {id: {...}} JSON, or the image stem
            new[SAMPLE_ID] = row[SAMPLE_ID]
        out.append(new)
    return out


def _propose(pool: Path, data: pd.DataFrame, hit: np.ndarray, match, secondary, features, wanted: set[str],
             log_entries: list[dict]) -> Replacement:
    cand = read_table(pool)
    pool_raw = read_raw_table(pool)
    match = resolve_match(data, match, source=str(data.attrs.get("source", "samples")))
    for cols in (match, list(secondary), list(features)):
        for c in cols:
            if c not in data.columns:
                raise ColumnError(f"{data.attrs.get('source', 'samples')}: no column {c!r}; columns are {', '.join(map(str, data.columns))}")
            if c not in cand.columns:
                raise ColumnError(f"{pool}: no column {c!r} (needed to match candidates); columns are {', '.join(map(str, cand.columns))}")
    n_candidates = len(cand)
    ok = np.ones(len(cand), bool)
    excluded = {}
    in_data = np.isin(cand[SAMPLE_ID].astype(str).to_numpy(), data[SAMPLE_ID].astype(str).to_numpy())
    if IMAGE_PATH in cand.columns and IMAGE_PATH in data.columns:
        in_data |= np.isin(cand[IMAGE_PATH].astype(str).to_numpy(), data[IMAGE_PATH].astype(str).to_numpy())
    excluded["already_in_dataset"] = int((in_data & ok).sum())
    ok &= ~in_data
    cand_subj = _id_strings(cand[SUBJECT_ID]) if SUBJECT_ID in cand.columns else cand[SAMPLE_ID].to_numpy(object)
    withdrawn_subj = np.isin(cand_subj, list(wanted))
    logged = {h for e in log_entries for h in (e.get("subject_sha256") or ())}
    if logged:
        withdrawn_subj |= np.array([subject_hash(s) in logged for s in cand_subj], bool)
    excluded["withdrawn_subject"] = int((withdrawn_subj & ok).sum())
    ok &= ~withdrawn_subj
    eligible = cand.loc[ok].reset_index(drop=True)
    eligible_raw = pool_raw.loc[ok].reset_index(drop=True)
    withdrawn = data.loc[hit].reset_index(drop=True)
    assign = match_replacements(withdrawn, eligible, match, secondary, features)
    j = assign["candidate"].to_numpy()
    has = j >= 0
    pairs = pd.DataFrame({"withdrawn_sample_id": withdrawn[SAMPLE_ID].astype(str).to_numpy(),
                          SAMPLE_ID: [eligible[SAMPLE_ID].iloc[k] if k >= 0 else None for k in j]})
    for c in match:
        pairs[f"withdrawn_{c}"] = withdrawn[c].astype(object).to_numpy()
        pairs[c] = [eligible[c].iloc[k] if k >= 0 else None for k in j]
    for c in ("primary_mismatches", "secondary_mismatches", "distance", "cost"):
        pairs[c] = assign[c].to_numpy()
    chosen = eligible.iloc[j[has]].reset_index(drop=True)
    chosen_raw = [eligible_raw.iloc[k].to_dict() for k in j[has]]
    return Replacement(pool, _sha256(pool.read_bytes()), match, list(secondary), list(features), pairs, chosen,
                       chosen_raw, n_candidates, int(ok.sum()), excluded)


# ---------------------------------------------------------------------------------------------- commit

def _journal_path(samples: Path) -> Path:
    return samples.parent / f".{samples.name}.withdraw.journal.json"


@contextlib.contextmanager
def dataset_lock(samples: str | os.PathLike):
    """Hold the exclusive lock of a dataset's withdrawals (a lock file beside the samples table)."""
    samples = Path(samples)
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(samples.parent / f".{samples.name}.withdraw.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _append_log(path: Path, entry: dict) -> None:
    """Append one JSON line (O_APPEND, one write, fsync), unless a line of this withdrawal_id is there."""
    wid = entry["withdrawal_id"]
    if path.is_file() and any(e.get("withdrawal_id") == wid for e in read_log(path)):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(entry, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size:  # a torn last line (a write cut short by a full disk) must not swallow ours
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _roll_forward(journal: dict, *, hooks: bool) -> None:
    done = 0
    if hooks:
        _crash_hook(CRASH_AFTER_RENAMES_ENV, done)
    for tmp, final in journal.get("rename", []):
        if os.path.exists(tmp):
            os.replace(tmp, final)
            _fsync_dir(Path(final).parent)
        done += 1
        if hooks:
            _crash_hook(CRASH_AFTER_RENAMES_ENV, done)
    for p in journal.get("delete", []):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    st = journal.get("store")
    if st:
        if st.get("content_hashes"):
            ResultsStore(st["root"]).forget(None, content_hashes=st["content_hashes"])
    if journal.get("log"):
        _append_log(Path(journal["log"]["path"]), journal["log"]["entry"])


def recover(samples: str | os.PathLike) -> str | None:
    """Finish or undo a withdrawal that a killed process left behind (docs/METHODS.md §13.5).

    A ``committed`` journal is rolled forward (renames, deletions, store, log line); a ``prepared`` one (killed
    before the commit point) is rolled back: its temporaries are removed and the files stay as they were.
    Returns ``"rolled forward"``, ``"rolled back"`` or None when there was nothing to do.
    """
    samples = Path(samples)
    jpath = _journal_path(samples)
    if not jpath.exists():
        return None
    with dataset_lock(samples):
        return _recover_locked(samples)


def _recover_locked(samples: Path) -> str | None:
    jpath = _journal_path(samples)
    if not jpath.exists():
        return None
    try:
        journal = json.loads(jpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        journal = {}
    if journal.get("state") == "committed":
        _roll_forward(journal, hooks=False)
        what = "rolled forward"
    else:
        for tmp, _ in journal.get("rename", []):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        what = "rolled back"
    jpath.unlink()
    _fsync_dir(jpath.parent)
    return what


def apply_withdrawal(plan: WithdrawalPlan, *, operator: str | None = None, hash_subject: bool = False) -> dict | None:
    """Commit a plan all or nothing (docs/METHODS.md §13.5) and append its audit-log line.

    Under the dataset lock: a leftover journal is finished first; every file the plan read (the samples table
    and every scanned derived file, changed by the plan or not) must still have the content the plan was made
    from (else a one-line error asks to plan again); the new versions are written beside their
    files, the journal is committed, then renames, image deletions, the store's ``forget`` and the log line
    follow. Returns the log entry, or None when the plan changes nothing (nothing is logged: a second run is a
    no-op).
    """
    if plan.nothing_to_do:
        return None
    samples = plan.samples_path
    with dataset_lock(samples):
        _recover_locked(samples)
        expected = {**plan.checked, **{f.path: f.sha256_before for f in plan.files}}
        for path, before in expected.items():  # every file read for the plan, not only those it changes
            try:
                current = _sha256(Path(path).read_bytes())
            except OSError:
                current = None
            if current != before:
                raise InputFileError(f"{path}: changed since the withdrawal was planned; run it again")
        entry = plan.log_entry(operator=operator, hash_subject=hash_subject)
        token = entry["withdrawal_id"][:12]
        absolute = lambda p: os.path.abspath(p)  # noqa: E731 - the journal may be finished from another folder
        renames = [(absolute(f.path.with_name(f".{f.path.name}.withdraw-{token}.tmp")), absolute(f.path))
                   for f in plan.files]
        journal = {"version": 1, "state": "prepared", "withdrawal_id": entry["withdrawal_id"], "rename": renames,
                   "delete": [absolute(p) for p, e, sh in zip(plan.images[IMAGE_PATH], plan.images["exists"],
                                                              plan.images["shared"]) if e and not sh and plan.delete_images],
                   "store": None if plan.store_root is None or not sum(plan.store_rows.values()) else
                   {"root": absolute(plan.store_root),
                    "content_hashes": sorted({h for h, sh in zip(plan.images["sha256"], plan.images["shared"])
                                              if h and not sh})},
                   "log": {"path": absolute(plan.log_path), "entry": entry}}
        jpath = _journal_path(samples)
        _durable_replace_text(jpath, json.dumps(journal))
        try:
            for f, (tmp, _) in zip(plan.files, renames):
                _write_synced(Path(tmp), f.new_bytes, mode_of=f.path)
                _fsync_dir(Path(tmp).parent)
        except BaseException:
            _recover_locked(samples)  # prepared: roll back
            raise
        _crash_hook(CRASH_BEFORE_COMMIT_ENV)
        journal["state"] = "committed"
        _durable_replace_text(jpath, json.dumps(journal))  # the commit point
        _roll_forward(journal, hooks=True)
        jpath.unlink()
        _fsync_dir(jpath.parent)
    return entry

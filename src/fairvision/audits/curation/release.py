"""Privacy before release: coarse dates, no location, keyed pseudonyms, k-anonymity, clean images (docs/METHODS.md §13.10).

:func:`audit_release` turns a sample table (and any number of further tables) into a release folder: capture
dates coarsened (FHIBE released the month), location columns dropped, sample, subject and other ids replaced by
keyed pseudonyms (:mod:`fairvision.io.pseudonyms`), image paths replaced by the released file names, images
written as metadata-free PNGs of at most 2,048 pixels a side (:mod:`.release_images`), the smallest groups of
every combination of released attributes measured (:func:`fairvision.stats.anonymity.k_anonymity`) and, on
request, values of too-small groups blanked. Rows are written in the order of their pseudonyms (the original order can
follow capture time or the original ids). Every change is listed, without original values, in ``changes.csv``. The id mapping and the list of left-out images (with their original paths) are returned for
the curator's side only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.curation.release_images import (DEFAULT_MAX_SIDE, PATH_COLUMNS, Readback, is_location_column,
                                                       name_tokens, write_images)
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.pseudonyms import PREFIXES, pseudonyms
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import check_unique_ids, require_columns
from fairvision.stats.anonymity import DEFAULT_K, AnonymityResult, k_anonymity, suppression_mask

#: FHIBE coarsened capture dates to the month (and times to a part of the day).
DEFAULT_PRECISION = "month"
PRECISIONS = {"day": "datetime64[D]", "month": "datetime64[M]", "year": "datetime64[Y]"}
#: Name tokens of date or time columns (detected only when every value also reads as a date or a time).
DATE_TOKENS = frozenset({"date", "time", "timestamp", "datetime", "dob"})
#: Parts of the day a time is coarsened to (FHIBE: "06:00-11:59").
TIME_BANDS = ("00:00-05:59", "06:00-11:59", "12:00-17:59", "18:00-23:59")
#: Attributes with more distinct values than this are not broken down by group in the coverage of the images.
MAX_COVERAGE_GROUPS = 30

_TIME_ONLY = r"^\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?$"
_EXIF_DATE = r"^(\d{4}):(\d{2}):(\d{2})"
_TZ = r"(?:Z|[+-]\d{2}:?\d{2})$"
_ISO_LIKE = r"^\d{4}[-:/.]\d{1,2}[-:/.]\d{1,2}"
_DATE_FAST = (r"(?:\d{4}-\d{2}|(?:\d{4}-\d{2}-\d{2}|\d{4}:\d{2}:\d{2})(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?)"
              r"(?:Z|[+-]\d{2}:?\d{2})?")
_ISO_FULL = r"\d{4}-\d{2}(?:-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?)?"


@dataclass(frozen=True)
class ReleaseOptions:
    """What a release changes (docs/METHODS.md §13.10). Column names are those of the input tables."""

    sample_col: str = SAMPLE_ID
    subject_col: str = SUBJECT_ID
    id_cols: tuple[str, ...] = ()
    date_cols: tuple[str, ...] = ()
    date_precision: str = DEFAULT_PRECISION
    time_bands: bool = True
    drop_cols: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    k: int = DEFAULT_K
    max_combo: int | None = None
    suppress: bool = False
    max_side: int = DEFAULT_MAX_SIDE

    def __post_init__(self):
        if self.date_precision not in PRECISIONS:
            raise ParameterError("date_precision", f"must be one of {', '.join(PRECISIONS)}, not {self.date_precision!r}")
        if isinstance(self.k, bool) or int(self.k) != self.k or self.k < 2:
            raise ParameterError("k", f"must be a whole number of at least 2, got {self.k!r}")
        if self.max_combo is not None and self.max_combo < 1:
            raise ParameterError("max_combo", f"must be at least 1, got {self.max_combo}")
        if int(self.max_side) < 16:
            raise ParameterError("max_side", f"must be at least 16 pixels, got {self.max_side}")


@dataclass
class ReleaseResult:
    """A release as written by :func:`audit_release`.

    ``changes``: ``table``, ``column``, ``action``, ``n_changed`` (no original values); ``manifest``: the
    released images; ``anonymity`` (after any suppression) and ``anonymity_before``; ``coverage`` of the
    images; ``mapping`` (``kind``, ``column``, ``original``, ``pseudonym``) and ``left_out`` (original sample
    ids and paths of images not released) are for the curator only, never for the release.
    """

    changes: pd.DataFrame
    manifest: pd.DataFrame
    anonymity: AnonymityResult
    anonymity_before: AnonymityResult | None
    coverage: Coverage | None
    mapping: pd.DataFrame
    left_out: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    params: dict = field(default_factory=dict)
    readback: Readback | None = None

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``."""
        q = self.anonymity.quantities()
        q.update({"n_images": float(len(self.manifest)), "n_left_out": float(len(self.left_out)),
                  "n_suppressed": float(self.changes.loc[self.changes["action"].str.startswith("suppressed"),
                                                         "n_changed"].sum())})
        if self.readback is not None:
            q["readback_failed"] = float(not self.readback.passed)
            q["n_readback_problems"] = float(len(self.readback.problems))
        return q


def time_band(values: pd.Series) -> pd.Series:
    """The part of the day of ``HH:MM[:SS]`` strings or datetimes: ``"06:00-11:59"`` (FHIBE's bands)."""
    hours = values.dt.hour if pd.api.types.is_datetime64_any_dtype(values) else \
        pd.to_numeric(values.astype("string").str.extract(r"^(\d{1,2}):", expand=False), errors="coerce")
    band = (hours // 6).clip(0, 3)
    return pd.Series(np.asarray(TIME_BANDS, dtype=object)[band.fillna(0).astype(int).to_numpy()],
                     index=values.index).where(band.notna(), None)


def parse_dates(values: pd.Series) -> pd.Series:
    """Datetimes (seconds) of date strings: ISO 8601 and EXIF (``2023:06:15 14:32:10``) read by numpy in C after
    vectorised (Arrow) checks, any other form pandas reads one at a time. A time-zone suffix is dropped, so a
    capture date stays the photographer's local date. NaT where a value does not read as a date."""
    if pd.api.types.is_datetime64_any_dtype(values):
        v = values.dt.tz_localize(None) if getattr(values.dt, "tz", None) is not None else values
        return v.astype("datetime64[s]")
    text = values.astype(object).where(values.notna(), None).astype("string[pyarrow]").str.strip()
    text = text.str.replace(_EXIF_DATE, r"\1-\2-\3", regex=True).str.replace(_TZ, "", regex=True)
    iso = text.str.fullmatch(_ISO_FULL).fillna(False).to_numpy(bool)
    out = np.full(len(text), np.datetime64("NaT"), dtype="datetime64[s]")
    if iso.any():
        picked = text[iso].to_numpy(dtype=object)
        try:
            out[iso] = np.array(picked, dtype="datetime64[s]")
        except ValueError:  # an impossible day (2023-02-30) or a fraction of a second: pandas, with NaT
            out[iso] = _pandas_dates(pd.Series(picked), "ISO8601")
    rest = ~iso & text.notna().to_numpy(bool) & (text != "").fillna(False).to_numpy(bool)
    if rest.any():  # other forms, one at a time (slow, but only for what ISO 8601 did not read)
        out[rest] = _pandas_dates(text[rest].astype(object), "mixed")
    return pd.Series(out, index=values.index)


def _pandas_dates(text: pd.Series, fmt: str) -> np.ndarray:
    try:
        parsed = pd.to_datetime(text, errors="coerce", format=fmt)
    except (ValueError, TypeError):  # mixed time zones and the like: not read as dates
        return np.full(len(text), np.datetime64("NaT"), dtype="datetime64[s]")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_localize(None)
    return parsed.to_numpy(dtype="datetime64[s]")


def coarsen_dates(values: pd.Series, precision: str = DEFAULT_PRECISION) -> tuple[pd.Series, int, int]:
    """Dates written at ``precision`` (``"2023-06"`` for a month), vectorised (docs/METHODS.md §13.10).

    ISO 8601 and EXIF dates (``2023-06-15 14:32``, ``2023:06:15 14:32:10``, a time zone allowed) take a fast
    path: one Arrow regular expression, the date part checked by numpy (``2023-02-30`` is not a date) and cut
    to the precision as text. Other forms go through :func:`parse_dates`. Returns the coarse values (strings;
    missing stay missing), how many values changed (their text differs) and how many non-missing values did
    not read as dates (left missing in the output)."""
    if precision not in PRECISIONS:
        raise ParameterError("date_precision", f"must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    width = {"day": 10, "month": 7, "year": 4}[precision]
    if pd.api.types.is_datetime64_any_dtype(values):
        text = pd.Series(np.datetime_as_string(parse_dates(values).to_numpy(), unit="s"), index=values.index)
        text = text.where(values.notna(), None).astype("string[pyarrow]")
    else:
        text = values.astype(object).where(values.notna(), None).astype("string[pyarrow]").str.strip()
    fast = text.str.fullmatch(_DATE_FAST).fillna(False).to_numpy(bool)
    out = np.full(len(text), None, dtype=object)
    ok = np.zeros(len(text), dtype=bool)
    if fast.any():
        head = text[fast].str.slice(0, 10).str.replace(":", "-", regex=False)
        try:
            np.array(head.to_numpy(dtype=object), dtype="datetime64[D]")  # each a real calendar date
            valid = np.ones(len(head), dtype=bool)
        except ValueError:  # some impossible day (2023-02-30): which ones, vectorised; they stay missing
            full = head.where(head.str.len() == 10, head + "-01")  # a month alone (2023-06): its first day
            valid = pd.to_datetime(full, format="%Y-%m-%d", errors="coerce").notna().to_numpy(bool)
        idx = np.flatnonzero(fast)[valid]
        out[idx] = head[valid].str.slice(0, width).to_numpy(dtype=object)
        ok[idx] = True
    rest = ~fast & text.notna().to_numpy(bool)
    if rest.any():
        parsed = parse_dates(text[rest].astype(object)).to_numpy()
        good = ~np.isnat(parsed)
        idx = np.flatnonzero(rest)
        out[idx[good]] = parsed[good].astype(PRECISIONS[precision]).astype(str)
        ok[idx[good]] = True
    present = (text.notna() & (text != "")).fillna(False).to_numpy(bool)
    unread = int((present & ~ok).sum())
    coarse = pd.Series(out, index=values.index, dtype=object)
    orig = values.astype(object).where(values.notna(), None).astype("string[pyarrow]")
    changed = int((present & (orig != coarse.astype("string[pyarrow]")).fillna(True).to_numpy(bool)).sum())
    return coarse, changed, unread


def date_kind(values: pd.Series) -> str | None:
    """``"datetime"`` when every non-missing value reads as a date, ``"time"`` when every one is a time of day
    (``HH:MM``), else None (numbers never count: a year or a count is not a capture date)."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return "datetime"
    if pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return None
    text = values.dropna().astype(str).str.strip()
    text = text[text != ""]
    if not len(text) or text.str.fullmatch(r"[-+]?\d+(\.\d*)?").any():
        return None
    if text.str.match(_TIME_ONLY).all():
        return "time"
    return "datetime" if parse_dates(text).notna().all() else None


def id_text(value) -> str:
    """An id as text, the same in every table: a whole number read as a float (``7.0``, from a column with an
    empty cell) is ``"7"``, as in a table where it was read as text or an integer."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def id_texts(values: pd.Series) -> np.ndarray:
    """:func:`id_text` of every value (an object array; None where a value is missing), converting each
    distinct value once (``pandas.factorize``) and spreading the texts by its codes."""
    codes, uniq = pd.factorize(values)  # a missing value: code -1
    if pd.api.types.is_float_dtype(uniq):
        v = np.asarray(uniq, dtype=np.float64)
        whole = np.isfinite(v) & (v == np.floor(v))
        text = np.empty(len(v), dtype=object)
        text[whole] = v[whole].astype(np.int64).astype(str)
        text[~whole] = v[~whole].astype(str)
    elif pd.api.types.is_object_dtype(uniq):  # maybe mixed types (7, "7", 7.0): each distinct value on its own
        text = np.array([id_text(u) for u in uniq], dtype=object)
    else:
        text = np.asarray(uniq.astype(str), dtype=object)
    return np.append(text, None)[codes]


def pseudonymise(texts: np.ndarray, mapping: dict[str, str]) -> np.ndarray:
    """The pseudonym of each id text (:func:`id_texts`), looked up once per distinct text; None stays None."""
    codes, uniq = pd.factorize(texts)
    return np.array([mapping[u] for u in uniq] + [None], dtype=object)[codes]


def _roles(options: ReleaseOptions) -> dict[str, str]:
    roles = {options.sample_col: "sample", options.subject_col: "subject"}
    roles.update({c: "id" for c in options.id_cols if c not in roles})
    return roles


def _change(changes: list, table: str, column: str, action: str, n: int) -> None:
    changes.append({"table": table, "column": column, "action": action, "n_changed": int(n)})


def _check_columns(tables: Mapping[str, pd.DataFrame], options: ReleaseOptions) -> None:
    """Every column named in the options is in some table (in the samples table for ``attrs``)."""
    given = [("--id-col", c) for c in options.id_cols] + [("--date-col", c) for c in options.date_cols] + \
            [("--drop-col", c) for c in options.drop_cols]
    for flag, c in given:
        if not any(c in df.columns for df in tables.values()):
            raise ColumnError(f"{flag} {c!r}: no table has this column (tables: {', '.join(tables)})")


def _release_table(df: pd.DataFrame, name: str, options: ReleaseOptions, maps: dict[str, dict], changes: list,
                   detected: list) -> pd.DataFrame:
    """One table as released: ids pseudonymised, location, path and dropped columns removed, dates coarsened."""
    out = df.copy()
    roles = _roles(options)
    for c in list(out.columns):
        if c in roles:
            out[c] = pseudonymise(id_texts(out[c]), maps[roles[c]])
            _change(changes, name, c, f"pseudonymised ({roles[c]} id)" if roles[c] != "id" else "pseudonymised (id column)", int(df[c].notna().sum()))
        elif c in options.drop_cols:
            out = out.drop(columns=c)
            _change(changes, name, c, "dropped (--drop-col)", int(df[c].notna().sum()))
        elif is_location_column(c):
            out = out.drop(columns=c)
            _change(changes, name, c, "dropped (location)", int(df[c].notna().sum()))
        elif c in PATH_COLUMNS:
            out = out.drop(columns=c)
            _change(changes, name, c, "dropped (file path)", int(df[c].notna().sum()))
        else:
            out = _dates(out, c, name, options, changes, detected)
    return out


def _dates(out: pd.DataFrame, c: str, name: str, options: ReleaseOptions, changes: list, detected: list) -> pd.DataFrame:
    forced = c in options.date_cols
    datey = pd.api.types.is_datetime64_any_dtype(out[c]) or bool(DATE_TOKENS & set(name_tokens(c)))
    if not forced and not datey:
        if not pd.api.types.is_numeric_dtype(out[c]) and len(out[c].dropna()) and \
                out[c].dropna().astype(str).str.match(_ISO_LIKE).all():
            _change(changes, name, c, "looks like dates, left unchanged (give --date-col)", 0)
            detected.append((name, c, "not coarsened"))
        return out
    kind = date_kind(out[c])
    partly = False  # a date-like name, some ISO dates among other values: the dates coarsened, the rest blanked
    if kind is None:
        if forced:
            bad = parse_dates(out[c].astype("string")).isna() & out[c].notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 1 if bad.any() else 1
            raise ColumnError(f"{name}: column {c!r} (--date-col): row {row}: not a date or time")
        partly = not pd.api.types.is_numeric_dtype(out[c]) and \
            out[c].dropna().astype(str).str.strip().str.match(_ISO_LIKE).any()
        if not partly:  # never a full-precision date left behind: only columns without any date stay as they are
            _change(changes, name, c, "date-like name, values not dates: left unchanged", 0)
            detected.append((name, c, "not dates"))
            return out
        kind = "datetime"
    vals = out[c]
    if kind == "time":
        band = time_band(vals)
        out[c] = band
        _change(changes, name, c, "time of day to a 6-hour band", int((band.notna() & (band != vals)).sum()))
    else:
        parsed = parse_dates(vals)
        coarse, n, unread = coarsen_dates(vals, options.date_precision)
        out[c] = coarse
        _change(changes, name, c, f"coarsened to the {options.date_precision}", n - unread)
        if unread:
            _change(changes, name, c, "values not dates among dates: blanked", unread)
        has_time = parsed.notna() & ((parsed.dt.hour != 0) | (parsed.dt.minute != 0) | (parsed.dt.second != 0))
        if options.time_bands and has_time.any():
            col = f"{c}_hour"
            out.insert(out.columns.get_loc(c) + 1, col, time_band(parsed).where(parsed.notna(), None))
            _change(changes, name, col, "added: time of day as a 6-hour band", int(parsed.notna().sum()))
    detected.append((name, c, "--date-col" if forced else "detected, values not dates blanked" if partly else "detected"))
    return out


def _codes(df: pd.DataFrame, attrs: list[str]) -> tuple[np.ndarray, list[list[str]]]:
    codes = np.full((len(df), len(attrs)), -1, dtype=np.int64)
    levels = []
    for j, a in enumerate(attrs):
        v = df[a]
        present = v.notna().to_numpy()
        c, uniq = pd.factorize(v[present].astype(str), sort=True)
        codes[present, j] = c
        levels.append([str(u) for u in uniq])
    return codes, levels


def default_attributes(released: pd.DataFrame, options: ReleaseOptions, dates: set[str]) -> list[str]:
    """The released samples table's columns less ids, dates and paths: the attributes a release shows."""
    skip = set(_roles(options)) | dates | {IMAGE_PATH}
    return [c for c in released.columns if c not in skip]


def audit_release(
    data: pd.DataFrame,
    tables: Mapping[str, pd.DataFrame] | None = None,
    *,
    stage: str | Path,
    key: bytes,
    options: ReleaseOptions | None = None,
    settings: AuditSettings | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReleaseResult:
    """Write a privacy-checked release of ``data`` and ``tables`` into the folder ``stage`` (docs/METHODS.md §13.10).

    Parameters
    ----------
    data : pandas.DataFrame
        The samples table, with ``sample_id`` and optionally ``subject_id`` and ``image_path`` (as read by
        :func:`fairvision.io.tables.read_table`; in the release they get back the names
        ``options.sample_col`` and ``options.subject_col``).
    tables : mapping of str to DataFrame, optional
        Further metadata tables by file stem, written as ``<stem>.csv``; their id columns (same names) get the
        same pseudonyms.
    stage : path
        The folder to write into (``samples.csv``, the other tables, ``images/``, ``manifest.csv``,
        ``changes.csv``).
    key : bytes
        The curator's key of the keyed pseudonyms.
    options : ReleaseOptions, optional
    settings : AuditSettings, optional
        ``workers``, ``engine`` and ``address`` for the images; ``level``, ``correction`` and ``alpha`` for the
        coverage of the images by group.
    progress : callable, optional
        ``progress(done, total)`` over the images.

    Returns
    -------
    ReleaseResult
    """
    options = options or ReleaseOptions()
    settings = settings or DEFAULT_SETTINGS
    stage = Path(stage)
    require_columns(data, [SAMPLE_ID], source="samples table")
    check_unique_ids(data, SAMPLE_ID, "samples table")  # one released file per sample id
    samples = data.rename(columns={SAMPLE_ID: options.sample_col, SUBJECT_ID: options.subject_col})
    all_tables = {"samples": samples, **{n: t for n, t in (tables or {}).items()}}
    if len(all_tables) < 1 + len(tables or {}):
        raise FairvisionError("a further table may not be called 'samples' (the samples table is released as samples.csv)")
    _check_columns(all_tables, options)
    for a in options.attrs:  # before any image is written
        if a not in samples.columns:
            raise ColumnError(f"--attr {a!r}: no such column in the samples table")
        if a in _roles(options):
            raise ColumnError(f"--attr {a!r}: an id column (released as pseudonyms), not an attribute")
        if a in options.drop_cols or a in PATH_COLUMNS or is_location_column(a):
            raise ColumnError(f"--attr {a!r}: not released (a location, path or --drop-col column)")
    for name, t in all_tables.items():
        for c in (c for c in options.date_cols if c in t.columns and date_kind(t[c]) is None):
            _dates(t[[c]], c, name, options, [], [])  # raises, naming the first row that is not a date
    roles = _roles(options)
    maps = {}
    for role, prefix in PREFIXES.items():
        texts = [id_texts(t[c].dropna()) for t in all_tables.values() for c in t.columns if roles.get(c) == role]
        maps[role] = pseudonyms(key, pd.unique(np.concatenate(texts)) if texts else [], prefix, what=f"{role} ids")
    sids = id_texts(samples[options.sample_col])
    names = pseudonymise(sids, maps["sample"])
    images = write_images(samples[IMAGE_PATH].tolist() if IMAGE_PATH in samples else [None] * len(samples), names,
                          stage / "images", max_side=options.max_side, settings=settings, progress=progress) \
        if IMAGE_PATH in samples else None
    changes: list[dict] = []
    detected: list = []
    keep = images["ok"].to_numpy() if images is not None else np.ones(len(samples), bool)
    gone = set(np.asarray(sids, dtype=object)[~keep])
    released: dict[str, pd.DataFrame] = {}
    for name, t in all_tables.items():
        rows = ~pd.Series(id_texts(t[options.sample_col])).isin(gone).to_numpy() if options.sample_col in t and gone else \
            np.ones(len(t), bool)
        if not rows.all():
            _change(changes, name, "(rows)", "rows left out (image not released)", int((~rows).sum()))
        out = _release_table(t.loc[rows].reset_index(drop=True), name, options, maps, changes, detected)
        if name == "samples" and images is not None:
            changes[:] = [c for c in changes if not (c["table"] == name and c["column"] == IMAGE_PATH)]
            pos = out.columns.get_loc(options.sample_col) + 1
            out.insert(pos, IMAGE_PATH, images.loc[keep, "file"].to_numpy())
            _change(changes, name, IMAGE_PATH, "replaced by the released file name", int(keep.sum()))
        released[name] = out
    dates = {c for n, c, how in detected if n == "samples" and how.startswith(("detected", "--date-col"))}
    dates |= {f"{c}_hour" for c in dates}
    attrs = list(options.attrs) or default_attributes(released["samples"], options, dates)
    for a in attrs:
        if a not in released["samples"].columns:
            raise ColumnError(f"--attr {a!r}: not released (dropped as a location, path or --drop-col column)")
    rel = released["samples"]
    subj = pd.factorize(rel[options.subject_col])[0] if options.subject_col in rel else None
    if subj is not None and (subj < 0).any():
        raise ColumnError(f"samples table: row {int(np.flatnonzero(subj < 0)[0]) + 1}: empty {options.subject_col!r}")
    codes, levels = _codes(rel, attrs)
    anon = k_anonymity(codes, levels, attrs, subjects=subj, k=options.k, max_combo=options.max_combo)
    before = None
    if options.suppress and anon.n_cells_below_k:
        blank = suppression_mask(codes, subjects=subj, k=options.k, max_combo=options.max_combo)
        for j, a in enumerate(attrs):
            if blank[:, j].any():
                rel[a] = rel[a].astype(object).where(~blank[:, j], None)
                _change(changes, "samples", a, "suppressed (k-anonymity: value blanked)", int(blank[:, j].sum()))
        before, (codes, levels) = anon, _codes(rel, attrs)
        anon = k_anonymity(codes, levels, attrs, subjects=subj, k=options.k, max_combo=options.max_combo)
    manifest = pd.DataFrame(columns=[options.sample_col, "file", "width", "height", "sha256"])
    if images is not None:
        manifest = pd.DataFrame({options.sample_col: np.asarray(names, dtype=object)[keep],
                                 **{c: images.loc[keep, c].to_numpy() for c in ("file", "width", "height", "sha256")}})
        n_small = int((images["ok"] & (images["source_width"] == images["width"])).sum())
        _change(changes, "images", "(pixels)", f"written as PNG without metadata, longest side at most {options.max_side} px",
                int(keep.sum()))
        _change(changes, "images", "(pixels)", "downsampled", int(keep.sum()) - n_small)
    coverage = _coverage(samples, keep, images, attrs, settings) if images is not None else None
    left = pd.DataFrame({options.sample_col: np.asarray(sids, dtype=object)[~keep],
                         IMAGE_PATH: samples[IMAGE_PATH].to_numpy()[~keep] if images is not None else [],
                         "reason": images.loc[~keep, "reason"].to_numpy() if images is not None else [],
                         "error": images.loc[~keep, "error"].to_numpy() if images is not None else []})
    for name, df in [*released.items(), ("manifest", manifest)]:  # row order can follow capture order or ids
        by = next((c for c in (options.sample_col, options.subject_col) if c in df.columns), None)
        if by is not None:
            df = df.sort_values(by, kind="stable").reset_index(drop=True)
        if name == "manifest":
            manifest = df
        else:
            released[name] = df
    _write(stage, released, manifest, changes)
    mapping = pd.DataFrame([{"kind": role, "original": o, "pseudonym": p} for role, m in maps.items() for o, p in m.items()],
                           columns=["kind", "original", "pseudonym"])
    params = {"date_precision": options.date_precision, "k": options.k, "max_combo": options.max_combo,
              "attributes": attrs, "suppress": options.suppress, "max_side": options.max_side,
              "date_columns": [{"table": n, "column": c, "how": how} for n, c, how in detected]}
    return ReleaseResult(pd.DataFrame(changes, columns=["table", "column", "action", "n_changed"]), manifest, anon,
                         before, coverage, mapping, left, released, params)


def _coverage(samples: pd.DataFrame, keep: np.ndarray, images: pd.DataFrame, attrs: list[str],
              settings: AuditSettings) -> Coverage:
    """Which images the release left out, by group of the (few-valued) released attributes, with reasons."""
    by = [a for a in attrs if samples[a].nunique() <= MAX_COVERAGE_GROUPS]
    data = samples[by].astype(object).where(samples[by].notna(), None) if by else pd.DataFrame({"all": ["all"] * len(samples)})
    return audit_coverage(data, keep, by or ["all"], step="image release", settings=settings,
                          reasons=images["reason"].to_numpy(), unit="images")


def _write(stage: Path, released: dict[str, pd.DataFrame], manifest: pd.DataFrame, changes: list) -> None:
    stage.mkdir(parents=True, exist_ok=True)
    for name, df in released.items():
        df.to_csv(stage / f"{name}.csv", index=False)
    manifest.to_csv(stage / "manifest.csv", index=False)
    pd.DataFrame(changes, columns=["table", "column", "action", "n_changed"]).to_csv(stage / "changes.csv", index=False)

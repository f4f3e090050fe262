"""Collection-guideline checks: a dataset against the rules its images were collected under (docs/METHODS.md §13.8).

A policy (TOML; FHIBE's guidelines are the bundled default, ``datasets/data/fhibe_policy.toml``) sets limits on
the images (megapixels, EXIF present, aspect ratio), on each subject's images (how many, how far apart in time,
columns that must agree) and on the annotations (required columns, keypoints inside the person box, the face box
inside the person box). :func:`audit_policy` checks every image against every enabled rule, vectorised over the
rows (JSON cells are parsed once for the whole column, then numpy), and returns one row per image and check
(``pass`` / ``fail`` / ``not checked`` with the reason: a rule whose inputs are absent never passes silently), a
summary per check, and per group: the share failing with Wilson intervals and a test of equal shares per check
and attribute, corrected across all of them.
"""

from __future__ import annotations

import importlib.resources
import warnings
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.curation.known_content import cross_subject_distance, subject_duplicates
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.errors import ColumnError, InputFileError
from fairvision.groups import memberships
from fairvision.io.tables import SAMPLE_ID
from fairvision.io.toml import read_toml
from fairvision.io.validate import require_columns
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.proportions import wilson_interval

#: the bundled default policy (FHIBE's collection guidelines)
DEFAULT_POLICY_FILE = "fhibe_policy.toml"
#: status codes of one image and check
PASS, FAIL, NOT_CHECKED = 1, 0, -1
STATUS_NAMES = np.array(["not checked", "fail", "pass"], dtype=object)  # indexed by status + 1
#: checks whose outcome belongs to a subject, not an image: tested across groups with one row per subject
SUBJECT_LEVEL = ("images_per_subject", "subject_consistency")


@dataclass(frozen=True)
class Policy:
    """Limits of the collection-guideline checks (docs/METHODS.md §13.8); None (``false`` in TOML), an empty
    list or an empty column name switches a check off."""

    name: str = "FHIBE collection guidelines"
    min_megapixels: float | None = 8.0
    require_exif: bool = True
    max_aspect_ratio: float | None = 2.0
    subject_column: str = "subject_id"
    min_images: int | None = 1
    max_images: int | None = 10
    min_hours_apart: float | None = 24.0
    time_column: str = ""
    consistent_columns: tuple[str, ...] = ("ancestry", "natural_hair_colour")
    required: tuple[str, ...] = ("person_box", "face_box", "keypoints")
    person_box: str | tuple[str, ...] = "person_box"
    face_box: str | tuple[str, ...] = "face_box"
    keypoints: str = "keypoints"
    box_format: str = "xyxy"
    tolerance_px: float = 2.0
    source: str = "bundled FHIBE policy"


#: TOML layout: section -> key -> (Policy field, kind)
_LAYOUT = {
    "image": {"min_megapixels": ("min_megapixels", "limit"), "require_exif": ("require_exif", "bool"),
              "max_aspect_ratio": ("max_aspect_ratio", "ratio")},
    "subject": {"column": ("subject_column", "str"), "min_images": ("min_images", "count"),
                "max_images": ("max_images", "count"), "min_hours_apart": ("min_hours_apart", "limit"),
                "time_column": ("time_column", "str"), "consistent_columns": ("consistent_columns", "strs")},
    "annotations": {"required": ("required", "strs"), "person_box": ("person_box", "box"),
                    "face_box": ("face_box", "box"), "keypoints": ("keypoints", "str"),
                    "box_format": ("box_format", "format"), "tolerance_px": ("tolerance_px", "number")},
}
_EXPECTED = {"limit": "a number (not negative) or false", "count": "a whole number (not negative) or false",
             "ratio": "a number of at least 1 (longer / shorter side) or false", "number": "a number (not negative)",
             "format": "'xyxy' or 'xywh'", "bool": "true or false", "str": "a string", "strs": "a list of strings",
             "box": "a column name or a list of four column names"}


def _is_num(v, least: float = 0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= least


def _strs(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


#: kind -> (accepts, convert); numeric limits also accept ``false`` (check off, None)
_KINDS = {"limit": (_is_num, float), "number": (_is_num, float), "ratio": (lambda v: _is_num(v, 1), float),
          "count": (lambda v: _is_num(v) and isinstance(v, int), int), "bool": (lambda v: isinstance(v, bool), bool),
          "format": (lambda v: v in ("xyxy", "xywh"), str), "str": (lambda v: isinstance(v, str), str),
          "strs": (_strs, tuple), "box": (lambda v: isinstance(v, str) or (_strs(v) and len(v) == 4),
                                          lambda v: v if isinstance(v, str) else tuple(v))}


def _convert(value, kind: str):
    """``(True, policy value)`` of a TOML value of ``kind``, ``(False, None)`` when its type is wrong."""
    if kind in ("limit", "count", "ratio") and value is False:
        return True, None
    accepts, convert = _KINDS[kind]
    return (True, convert(value)) if accepts(value) else (False, None)


def load_policy(path: str | Path | None = None) -> Policy:
    """The bundled FHIBE policy, with the keys a policy file sets replaced (docs/METHODS.md §13.8).

    Raises :class:`~fairvision.errors.InputFileError` naming the file and the key for an unknown section or
    key, a value of the wrong type or out of range (exit status 2 on the command line).
    """
    bundled = importlib.resources.files("fairvision.datasets").joinpath("data", DEFAULT_POLICY_FILE)
    with importlib.resources.as_file(bundled) as p:
        values = _values(read_toml(p, what="policy file"), p)
    source = "bundled FHIBE policy"
    if path is not None:
        values.update(_values(read_toml(path, what="policy file"), Path(path)))
        source = str(path)
    policy = Policy(**values, source=source)
    if None not in (policy.min_images, policy.max_images) and policy.min_images > policy.max_images:
        raise InputFileError(f"{path}: [subject] min_images ({policy.min_images}) is above max_images "
                             f"({policy.max_images})")
    return policy


def _values(doc: dict, path: Path) -> dict:
    """Policy fields from one parsed TOML document, checked key by key."""
    out = {}
    for section, body in doc.items():
        if section == "name" and isinstance(body, str):
            out["name"] = body
            continue
        if section not in _LAYOUT or not isinstance(body, dict):
            known = f"known: name, {', '.join('[' + s + ']' for s in _LAYOUT)}"
            what = ("expected a string" if section == "name" else f"expected a table [{section}]" if section in _LAYOUT
                    else f"unknown section or key ({known})")
            raise InputFileError(f"{path}: {section!r}: {what}, got {body!r}")
        for key, value in body.items():
            if key not in _LAYOUT[section]:
                raise InputFileError(f"{path}: [{section}] unknown key {key!r} (known: {', '.join(_LAYOUT[section])})")
            name, kind = _LAYOUT[section][key]
            ok, converted = _convert(value, kind)
            if not ok:
                raise InputFileError(f"{path}: [{section}] {key}: expected {_EXPECTED[kind]}, got {value!r}")
            out[name] = converted
    return out


@dataclass
class PolicyResult:
    """Every image against every enabled check (docs/METHODS.md §13.8)."""

    checks: pd.DataFrame
    summary: pd.DataFrame
    by_group: pd.DataFrame
    tests: pd.DataFrame
    duplicates: pd.DataFrame
    policy: Policy
    coverage: Coverage | None = None
    settings: AuditSettings = DEFAULT_SETTINGS
    params: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.summary

    def failing_images(self) -> int:
        return int(self.checks.loc[self.checks["status"] == "fail", SAMPLE_ID].nunique())

    def quantities(self) -> dict[str, float]:
        """``n_policy_failures`` (images failing at least one check), ``n_policy_not_checked`` (images with at
        least one check not run), ``n_failed_<check>`` per check, and the duplicate counts across and within
        subjects."""
        c = self.checks
        q = {"n_policy_failures": float(self.failing_images()),
             "n_policy_not_checked": float(c.loc[c["status"] == "not checked", SAMPLE_ID].nunique())}
        q.update({f"n_failed_{k}": float(v) for k, v in self.summary["n_failed"].items()})
        q["n_cross_subject_duplicates"] = float(self.duplicates["cross_subject"].astype(bool).sum())
        q["n_within_subject_duplicates"] = float(self.duplicates["same_subject"].astype(bool).sum())
        return q

    def summary_line(self) -> str:
        """One line for the terminal: images failing, checks not run."""
        s = self.summary
        failing = " (" + ", ".join(f"{k} {int(v)}" for k, v in s["n_failed"].items() if v) + ")"
        skipped = "; not checked: " + ", ".join(s.index[s["n_checked"] == 0])
        return (f"collection guidelines ({self.policy.name}): {self.failing_images():,} of {self.params['n_images']:,}"
                f" images fail a check{failing * (failing != ' ()')}{skipped * (not skipped.endswith(': '))}")


def number_lists(values: pd.Series, ids: np.ndarray, *, column: str, group: int, exact: int | None = None,
                 source: str = "samples") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse a column of JSON number lists (``[x0, y0, x1, y1]``, ``[[x, y, v], ...]``) in one pass
    (docs/METHODS.md §13.8): the cells are joined with ``;``, brackets and spaces dropped (``str.translate``),
    the numbers per cell counted from the comma and separator positions (numpy on the bytes), and the whole
    column read by one ``numpy.fromstring``. Returns the numbers (flat; ``null`` is NaN), how many each row has, and
    which rows have a cell. A cell that is not a list of numbers, or whose count is not a multiple of ``group``
    (or not ``exact``), is a :class:`~fairvision.errors.ColumnError` naming the column and sample."""
    present = ~_missing(values)
    if not present.any():
        return np.zeros(0), np.zeros(len(values), dtype=np.int64), present
    cells = values[present]
    if not isinstance(cells.iloc[0], str):  # list cells (Parquet): as their JSON-like text
        cells = cells.map(lambda v: str(np.asarray(v, dtype=np.float64).ravel().tolist()))
    raw = ";".join(cells.astype(str).to_numpy(dtype=object)).translate(_DROP).encode("utf-8", "replace")
    b = np.frombuffer(raw, dtype=np.uint8)
    seps = np.flatnonzero(b == ord(";"))
    starts, ends = np.r_[0, seps + 1], np.r_[seps, len(b)]
    commas = np.flatnonzero(b == ord(","))
    nonempty = ends > starts
    counts = np.zeros(len(values), dtype=np.int64)
    counts[present] = np.where(nonempty, np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1, 0)
    keep = np.ones(len(b), dtype=bool)  # a separator stays (as a comma) only between two non-empty cells
    keep[seps] = nonempty[1:] & (np.cumsum(nonempty)[:-1] > 0)
    text = np.where(b == ord(";"), ord(","), b).astype(np.uint8)[keep].tobytes().decode("utf-8", "replace")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a string not read to its end: the count check below
        nums = np.fromstring(text.replace("null", "nan"), dtype=np.float64, sep=",") if text else np.zeros(0)
    rows_present = np.flatnonzero(present)
    bad = (counts[rows_present] % group != 0) if exact is None else (counts[rows_present] != exact)
    if len(nums) != counts.sum() or bad.any():
        clean = cells.astype(str).str.translate(_DROP)
        where = rows_present[bad] if bad.any() else rows_present[_unparsable(clean)]
        r = int(where[0]) if len(where) else int(rows_present[0])
        shape = f"{exact} numbers" if exact is not None else f"a list of [{', '.join(['x', 'y', 'v'][:group])}]"
        raise ColumnError(f"{source}: column {column!r}, sample {ids[r]!r}: expected {shape}, got {values.iloc[r]!r}")
    return nums, counts, present


#: characters dropped from a list cell before its numbers are read
_DROP = str.maketrans("", "", "[] \t\r\n")


def _missing(values: pd.Series) -> np.ndarray:
    """Rows without a value: NaN/None, or a blank string."""
    na = pd.isna(values).to_numpy().copy()
    if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
        na |= (values.astype(str).str.strip() == "").to_numpy()
    return na


def _unparsable(clean: pd.Series) -> np.ndarray:
    """Which cleaned cells hold something other than comma-separated numbers (the error path only)."""
    number = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|null|NaN"
    return ~clean.str.fullmatch(rf"(?:(?:{number})(?:,(?:{number}))*)?").to_numpy(dtype=bool)


def _names(spec) -> list:
    return [spec] if isinstance(spec, str) else list(spec)


def boxes(data: pd.DataFrame, spec, policy: Policy, ids: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 4)`` boxes as x0, y0, x1, y1 and which rows have one, from one JSON-list column or four number
    columns (``box_format`` xyxy or xywh)."""
    n = len(data)
    if isinstance(spec, str):
        nums, _, present = number_lists(data[spec], ids, column=spec, group=4, exact=4, source=source)
        out = np.full((n, 4), np.nan)
        out[present] = nums.reshape(-1, 4)
    else:
        cols = []
        for c in spec:
            v = pd.to_numeric(data[c], errors="coerce")
            bad = np.flatnonzero(v.isna().to_numpy() & ~_missing(data[c]))[:1]
            if len(bad):
                raise ColumnError(f"{source}: column {c!r}, sample {ids[bad[0]]!r}: expected a number, "
                                  f"got {data[c].iloc[bad[0]]!r}")
            cols.append(v.to_numpy(dtype=np.float64))
        out, present = np.stack(cols, axis=1), True
    if policy.box_format == "xywh":
        out[:, 2:] += out[:, :2]
    return out, present & np.isfinite(out).all(axis=1)


#: one check's outcome for every row: status codes, values, the limit as text, a reason per row (or None)
_Check = namedtuple("_Check", "name status value limit reason")


def _outcome(name: str, checked: np.ndarray, failed: np.ndarray, value, limit: str, fail_reason,
             skip_reason) -> _Check:
    """Status from ``checked`` and ``failed``; reasons for the failing and the not-checked rows."""
    n = len(checked)
    status = np.where(checked, np.where(failed & checked, FAIL, PASS), NOT_CHECKED).astype(np.int8)
    reason = np.full(n, None, dtype=object)
    reason[status == FAIL] = fail_reason[status == FAIL] if isinstance(fail_reason, np.ndarray) else fail_reason
    skip = status == NOT_CHECKED
    reason[skip] = skip_reason[skip] if isinstance(skip_reason, np.ndarray) else skip_reason
    value = np.where(skip, np.nan, np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)))
    return _Check(name, status, value, limit, reason)


def _not_checked(name: str, n: int, limit: str, why: str) -> _Check:
    return _outcome(name, np.zeros(n, bool), np.zeros(n, bool), np.nan, limit, None, f"not checked: {why}")


def _image_checks(data: pd.DataFrame, policy: Policy) -> list[_Check]:
    """Resolution, EXIF and aspect ratio: from the per-image checks (width, height, has_exif, readable)."""
    n, out = len(data), []
    readable = (data["readable"].fillna(False).to_numpy(dtype=bool) if "readable" in data else np.ones(n, bool))
    if {"width", "height"} <= set(data.columns):
        w = pd.to_numeric(data["width"], errors="coerce").to_numpy(dtype=np.float64)
        h = pd.to_numeric(data["height"], errors="coerce").to_numpy(dtype=np.float64)
        sized = readable & np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0)
    else:
        w, h, sized = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool)
    skip = np.where(readable, "not checked: no image size", "not checked: unreadable image").astype(object)
    if policy.min_megapixels is not None:
        mp = w * h / 1e6
        out.append(_outcome("resolution", sized, mp < policy.min_megapixels, mp, f">= {policy.min_megapixels:g} MP",
                            f"below {policy.min_megapixels:g} megapixels", skip))
    if policy.require_exif:
        if "has_exif" in data:
            exif = data["has_exif"].fillna(False).to_numpy(dtype=bool)
            out.append(_outcome("exif", readable, ~exif, exif.astype(float), "EXIF present", "no EXIF metadata",
                                "not checked: unreadable image"))
        else:
            out.append(_not_checked("exif", n, "EXIF present", "no has_exif column (images not inspected)"))
    if policy.max_aspect_ratio is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.fmax(w, h) / np.fmin(w, h)
        out.append(_outcome("aspect_ratio", sized, ratio > policy.max_aspect_ratio + 1e-9, ratio,
                            f"<= {policy.max_aspect_ratio:g}:1", f"longer side over {policy.max_aspect_ratio:g} x the "
                            "shorter", skip))
    return out


def _subject_checks(data: pd.DataFrame, policy: Policy, subj: np.ndarray | None) -> list[_Check]:
    """Images per subject, time between a subject's photos, columns that must agree within a subject."""
    n, out = len(data), []
    lo = policy.min_images if policy.min_images is not None else 0
    hi = policy.max_images if policy.max_images is not None else np.inf
    limits = {"images_per_subject": f"{lo}..{hi:g} per subject", "subject_consistency": "one value per subject",
              "time_apart": f">= {policy.min_hours_apart or 0:g} h apart"}
    want = [k for k, on in zip(limits, (lo > 0 or hi < np.inf, bool(policy.consistent_columns),
                                        policy.min_hours_apart is not None)) if on]
    if subj is None:
        return [_not_checked(k, n, limits[k], f"no subject column {policy.subject_column!r}") for k in want]
    has = subj >= 0
    size = np.bincount(subj[has], minlength=int(subj.max()) + 1 if has.any() else 0)
    count = np.where(has, size[np.where(has, subj, 0)] if len(size) else 0, 0).astype(np.float64)
    no_id = "not checked: no subject id"
    if "images_per_subject" in want:
        fail_reason = np.where(count > hi, f"more than {hi} images of the subject",
                               f"fewer than {lo} images of the subject").astype(object)
        out.append(_outcome("images_per_subject", has, (count < lo) | (count > hi), count,
                            limits["images_per_subject"], fail_reason, no_id))
    if "time_apart" in want:
        out.append(_time_apart(data, policy, subj, count, limits["time_apart"]))
    if "subject_consistency" in want:
        cols = [c for c in policy.consistent_columns if c in data.columns]
        if not cols:
            out.append(_not_checked("subject_consistency", n, limits["subject_consistency"],
                                    f"none of the columns {', '.join(policy.consistent_columns)} is in the table"))
        else:
            key = np.where(has, subj, -1)
            n_bad = np.zeros(n)
            reason = np.full(n, "", dtype=object)
            for c in cols:
                bad = (data[c].groupby(key).transform("nunique").to_numpy() > 1) & has
                n_bad += bad
                reason = reason + np.where(bad, np.where(reason == "", c, ", " + c), "").astype(object)
            reason = "differs across the subject's images: " + reason
            out.append(_outcome("subject_consistency", has, n_bad > 0, n_bad, limits["subject_consistency"], reason,
                                no_id))
    return out


def _time_apart(data: pd.DataFrame, policy: Policy, subj: np.ndarray, count: np.ndarray, limit: str) -> _Check:
    """Hours from each image to the nearest other photo of its subject (capture times sorted per subject)."""
    n, col = len(data), policy.time_column or "datetime_original"
    if col not in data.columns:
        why = (f"no time column {col!r}" if policy.time_column else "no EXIF capture times (images not inspected)")
        return _not_checked("time_apart", n, limit, why)
    raw = data[col]
    t = pd.to_datetime(raw, errors="coerce", format="ISO8601", utc=True).dt.tz_localize(None)  # zones to UTC
    hours = (t - pd.Timestamp("1970-01-01")).dt.total_seconds().to_numpy(dtype=np.float64) / 3600.0
    dated = np.isfinite(hours) & (subj >= 0)
    rows = np.flatnonzero(dated)
    order = rows[np.lexsort((hours[rows], subj[rows]))]
    s, h = subj[order], hours[order]
    gap = np.where(s[1:] == s[:-1], np.diff(h), np.inf)  # to the next photo of the same subject
    nearest = np.full(n, np.nan)
    nearest[order] = np.fmin(np.r_[np.inf, gap], np.r_[gap, np.inf])
    alone = dated & ~np.isfinite(nearest)  # no other dated photo of the subject
    only_image = alone & (count == 1)
    checked = (dated & np.isfinite(nearest)) | only_image
    skip = np.where(subj < 0, "not checked: no subject id",
                    np.where(_missing(raw), "not checked: no capture time" + ("" if policy.time_column else " (EXIF)"),
                             np.where(~np.isfinite(hours), "not checked: capture time not ISO 8601",
                                      "not checked: no other dated photo of the subject"))).astype(object)
    value = np.where(only_image, np.nan, nearest)
    return _outcome("time_apart", checked, np.nan_to_num(value, nan=np.inf) < policy.min_hours_apart, value, limit,
                    f"another photo of the subject within {policy.min_hours_apart:g} h", skip)


def _annotation_checks(data: pd.DataFrame, policy: Policy, ids: np.ndarray, source: str) -> list[_Check]:
    """Required annotations present; keypoints inside the person box; the face box inside the person box."""
    n, out, tol = len(data), [], policy.tolerance_px
    limit = f"inside the person box (+{tol:g} px)"
    if policy.required:
        cols = [c for c in policy.required if c in data.columns]
        absent = [c for c in policy.required if c not in data.columns]
        if not cols:
            out.append(_not_checked("annotations", n, "all present", "none of the required annotation columns ("
                                    + ", ".join(policy.required) + ") is in the table"))
        else:
            reason = np.full(n, ", ".join(absent) if absent else "", dtype=object)
            n_miss = np.full(n, float(len(absent)))
            for c in cols:
                miss = _missing(data[c])
                n_miss += miss
                reason = reason + np.where(miss, np.where(reason == "", c, ", " + c), "").astype(object)
            out.append(_outcome("annotations", np.ones(n, bool), n_miss > 0, n_miss, "all present",
                                "missing: " + reason, None))
    person = None
    if policy.keypoints or policy.face_box:
        if policy.person_box and set(_names(policy.person_box)) <= set(data.columns):
            person, p_ok = boxes(data, policy.person_box, policy, ids, source)
        no_person = f"no person box column {policy.person_box!r}"
    if policy.keypoints:
        if person is None or policy.keypoints not in data.columns:
            why = no_person if person is None else f"no keypoints column {policy.keypoints!r}"
            out.append(_not_checked("keypoints_in_box", n, limit, why))
        else:
            nums, counts, k_ok = number_lists(data[policy.keypoints], ids, column=policy.keypoints, group=3,
                                              source=source)
            kp = nums.reshape(-1, 3)
            row = np.repeat(np.arange(n), counts // 3)
            b = person[row]
            vis = (kp[:, 2] > 0) & np.isfinite(kp[:, 0]) & np.isfinite(kp[:, 1]) & p_ok[row]
            outside = vis & ((kp[:, 0] < b[:, 0] - tol) | (kp[:, 0] > b[:, 2] + tol) | (kp[:, 1] < b[:, 1] - tol)
                             | (kp[:, 1] > b[:, 3] + tol))
            n_out = np.bincount(row, weights=outside, minlength=n)
            n_vis = np.bincount(row, weights=vis, minlength=n)
            skip = np.where(~k_ok, "not checked: no keypoints", np.where(~p_ok, "not checked: no person box",
                            "not checked: no visible keypoint")).astype(object)
            out.append(_outcome("keypoints_in_box", k_ok & p_ok & (n_vis > 0), n_out > 0, n_out, limit,
                                "visible keypoints outside the person box", skip))
    if policy.face_box:
        if person is None or not set(_names(policy.face_box)) <= set(data.columns):
            why = no_person if person is None else f"no face box column {policy.face_box!r}"
            out.append(_not_checked("face_in_person_box", n, limit, why))
        else:
            face, f_ok = boxes(data, policy.face_box, policy, ids, source)
            over = np.max(np.c_[person[:, :2] - face[:, :2], face[:, 2:] - person[:, 2:], np.zeros(n)], axis=1)
            skip = np.where(~f_ok, "not checked: no face box", "not checked: no person box").astype(object)
            out.append(_outcome("face_in_person_box", f_ok & p_ok, over > tol, np.where(f_ok & p_ok, over, np.nan),
                                limit, "face box reaches outside the person box (value: pixels)", skip))
    return out


def audit_policy(
    data: pd.DataFrame,
    policy: Policy | None = None,
    *,
    attributes: Sequence[str] = (),
    near_duplicates: pd.DataFrame | None = None,
    settings: AuditSettings | None = None,
    source: str = "samples",
) -> PolicyResult:
    """Check every image against a collection policy (docs/METHODS.md §13.8).

    Parameters
    ----------
    data : pandas.DataFrame
        One row per image: ``sample_id``; the per-image checks of :func:`fairvision.audits.curation.qa.audit_images`
        (``readable``, ``width``, ``height``, ``has_exif``, ``datetime_original``) where the image checks should
        run; the subject, time, annotation and attribute columns the policy and ``attributes`` name.
    policy : Policy, optional
        Default: the bundled FHIBE policy (:func:`load_policy`).
    attributes : sequence of str
        Group columns: the share failing each check per group (Wilson intervals) and a test of equal shares
        (Fisher's exact test for two groups, chi-square otherwise) per check and attribute, corrected across all
        of them with ``settings.correction``. Groups with fewer than ``settings.min_subjects`` subjects are
        reported, not tested. Subject-level checks count subjects, not images.
    near_duplicates : pandas.DataFrame, optional
        Pairs ``sample_id_a``, ``sample_id_b``, ``distance`` (``QAResult.near_duplicates``): a pair of two
        subjects fails check ``cross_subject_duplicate``; a pair within one subject is reported, not flagged.
    settings : AuditSettings, optional
        ``level``, ``correction``, ``alpha``, ``min_subjects``.
    source : str
        Name of the table in error messages.
    """
    settings = settings or DEFAULT_SETTINGS
    policy = policy or load_policy()
    data = data.reset_index(drop=True)
    require_columns(data, [SAMPLE_ID], source=source)
    require_columns(data, attributes, source=source, what="attribute column")
    ids = data[SAMPLE_ID].astype(str).to_numpy()
    subj = None
    if policy.subject_column and policy.subject_column in data.columns:
        subj = pd.factorize(data[policy.subject_column].where(~_missing(data[policy.subject_column])))[0]
    checks = _image_checks(data, policy) + _subject_checks(data, policy, subj) + _annotation_checks(
        data, policy, ids, source)
    dup = subject_duplicates(near_duplicates, data, policy.subject_column)
    if near_duplicates is not None:
        checks.append(_duplicate_check(data, dup, ids, subj, policy.subject_column))
    long = _long(checks, ids)
    summary = _summary(checks)
    by_group, tests = _groups(data, checks, subj, attributes, settings)
    coverage = None
    ran = [c for c in checks if (c.status != NOT_CHECKED).any()]  # a check run for no image is reported as such
    if len(attributes) and len(ran):  # images some check that ran could not be run for, by group
        status = np.stack([c.status for c in ran])
        skipped = (status == NOT_CHECKED).any(axis=0)
        first = np.argmax(status == NOT_CHECKED, axis=0)
        reason = np.stack([c.reason for c in ran])[first, np.arange(len(data))]
        why = np.array([c.name for c in ran], dtype=object)[first] + " " + np.where(skipped, reason, "")
        coverage = audit_coverage(data, ~skipped, list(attributes), settings=settings, reasons=np.where(
            skipped, why, None), step="running of every collection-guideline check")  # run, passed or not
    params = {"n_images": len(data), "attributes": list(attributes), "policy": policy.name, "subjects": subj is not None}
    return PolicyResult(long, summary, by_group, tests, dup, policy, coverage, settings, params)


def _long(checks: list[_Check], ids: np.ndarray) -> pd.DataFrame:
    """One row per image and check (text columns as categoricals: few distinct values, many rows)."""
    if not checks:
        return pd.DataFrame(columns=[SAMPLE_ID, "check", "status", "passed", "value", "limit", "reason"])
    status = np.concatenate([c.status for c in checks])
    codes, uniq = pd.factorize(ids)
    return pd.DataFrame({SAMPLE_ID: pd.Categorical.from_codes(np.tile(codes, len(checks)), uniq),
                         "check": pd.Categorical.from_codes(np.repeat(np.arange(len(checks)), len(ids)),
                                                            [c.name for c in checks]),
                         "status": pd.Categorical.from_codes(status + 1, list(STATUS_NAMES)),
                         "passed": pd.array(np.where(status == NOT_CHECKED, None, status == PASS), dtype="boolean"),
                         "value": np.concatenate([c.value for c in checks]),
                         "limit": pd.Categorical(np.repeat([c.limit for c in checks], len(ids))),
                         "reason": pd.Categorical(np.concatenate([c.reason for c in checks]))})


def _summary(checks: list[_Check]) -> pd.DataFrame:
    """Per check: images, checked, failing, not checked, share failing of those checked, the commonest reason a
    check was not run, and the limit."""
    rows = []
    for c in checks:
        skip = c.status == NOT_CHECKED
        n_checked, n_failed = int((~skip).sum()), int((c.status == FAIL).sum())
        rows.append({"check": c.name, "n": len(c.status), "n_checked": n_checked, "n_failed": n_failed,
                     "n_not_checked": int(skip.sum()), "share_failed": n_failed / n_checked if n_checked else np.nan,
                     "not_checked_reason": pd.Series(c.reason[skip]).value_counts().index[0] if skip.any() else None,
                     "limit": c.limit})
    return pd.DataFrame(rows, columns=["check", "n", "n_checked", "n_failed", "n_not_checked", "share_failed",
                                       "not_checked_reason", "limit"]).set_index("check")


def _groups(data: pd.DataFrame, checks: list[_Check], subj: np.ndarray | None, attributes: Sequence[str],
            settings: AuditSettings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Share failing per check and group (Wilson intervals) and a test of equal shares per check and attribute,
    corrected across all tests; groups below ``min_subjects`` subjects are reported, not tested."""
    rows, tests = [], []
    for m in memberships(data, attributes) if len(attributes) else []:
        for c in [c for c in checks if (c.status != NOT_CHECKED).any()]:  # a check run for no image: no rows
            keep = c.status[m.rows] != NOT_CHECKED
            r, g = m.rows[keep], m.codes[keep]
            who = np.where(subj[r] >= 0, subj[r], -1 - r) if subj is not None else r  # no subject id: on its own
            if c.name in SUBJECT_LEVEL and subj is not None:  # one row per subject and group
                _, first = np.unique(np.stack([who, g]), axis=1, return_index=True)
                r, g, who = r[first], g[first], who[first]
            k = len(m.categories)
            n = np.bincount(g, minlength=k)
            bad = np.bincount(g, weights=c.status[r] == FAIL, minlength=k)
            people = np.bincount(np.unique(np.stack([g, who]), axis=1)[0], minlength=k) if len(g) else n
            lo, hi = wilson_interval(bad, n, settings.level)
            big = (people >= settings.min_subjects) & (n > 0)
            for j, cat in enumerate(m.categories):
                rows.append({"check": c.name, "attribute": m.name, "group": cat, "n": int(n[j]),
                             "n_subjects": int(people[j]), "n_failed": int(bad[j]),
                             "share_failed": bad[j] / n[j] if n[j] else np.nan, "ci_low": lo[j], "ci_high": hi[j],
                             "tested": bool(big[j])})
            table = np.stack([bad, n - bad], axis=1)[big]
            test, stat, p = ("not tested: " + (f"fewer than two groups of {settings.min_subjects}+ subjects"
                             if table.shape[0] < 2 else "no image fails" if not table[:, 0].sum() else
                             "every checked image fails" if not table[:, 1].sum() else ""), np.nan, np.nan)
            if table.shape[0] >= 2 and (table.sum(axis=0) > 0).all():
                res = chi2_test(table, exact="always" if table.shape == (2, 2) else "never", warn=False)
                test = "Fisher exact" if res.method == "fisher" else "chi-square"
                stat, p = res.statistic, res.pvalue
            tests.append({"check": c.name, "attribute": m.name, "test": test, "statistic": stat, "pvalue": p})
    by_group = pd.DataFrame(rows, columns=["check", "attribute", "group", "n", "n_subjects", "n_failed",
                                           "share_failed", "ci_low", "ci_high", "tested"])
    tests_df = pd.DataFrame(tests, columns=["check", "attribute", "test", "statistic", "pvalue"])
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(dtype=float), settings.correction)
    tests_df["differs"] = (tests_df["pvalue_adjusted"] < settings.alpha).astype(bool)
    return by_group, tests_df


def _duplicate_check(data: pd.DataFrame, dup: pd.DataFrame, ids: np.ndarray, subj, column: str) -> _Check:
    """An image with a near duplicate under another subject id fails (value: the distance in bits)."""
    limit = "no near duplicate under another subject"
    if subj is None:
        return _not_checked("cross_subject_duplicate", len(ids), limit, f"no subject column {column!r}")
    dist = cross_subject_distance(dup, ids)
    hashed = data["phash"].notna().to_numpy() if "phash" in data else np.ones(len(ids), bool)
    skip = np.where(subj < 0, "not checked: no subject id", "not checked: no perceptual hash (unreadable)")
    return _outcome("cross_subject_duplicate", (subj >= 0) & hashed, np.isfinite(dist), dist, limit,
                    "near duplicate of an image of another subject", skip.astype(object))

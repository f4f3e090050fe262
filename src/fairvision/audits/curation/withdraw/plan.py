"""Plan a consent withdrawal: what it changes, worked out without changing anything (docs/METHODS.md §13.5).

:func:`plan_withdrawal` finds the withdrawn subjects' rows in the samples table, the derived files and the results
store, works out the new content of every file that changes, hashes the subjects' image files and, with a
candidate pool, proposes replacements. The :class:`WithdrawalPlan` it returns is committed by
:func:`fairvision.audits.curation.withdraw.apply.apply_withdrawal`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.curation.withdraw.journal import LOG_NAME, read_log, subject_hash
from fairvision.audits.curation.withdraw.replacement import (Replacement, group_table, propose_replacements,
                                                             records_for)
from fairvision.audits.curation.withdraw.report import changes_frame, log_entry, pairs_frame
from fairvision.audits.curation.withdraw.rewrite import coco_rewrite, id_strings, is_coco, is_missing, rewrite_table
from fairvision.errors import ColumnError, FairvisionError, InputFileError, ParameterError
from fairvision.io.store import ResultsStore, file_sha256, sha256_hex
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID, read_raw_table, read_table


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
        return sha256_hex(self.new_bytes)


@dataclass
class WithdrawalPlan:
    """Everything a withdrawal would change (docs/METHODS.md §13.5); nothing is changed until
    :func:`~fairvision.audits.curation.withdraw.apply.apply_withdrawal`."""

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
    #: not), re-checked by apply_withdrawal: a file that gained a row of the subject meanwhile is caught
    checked: dict[Path, str] = field(default_factory=dict)

    @property
    def nothing_to_do(self) -> bool:
        return (not self.files and not sum(self.store_rows.values())
                and not (self.delete_images and bool((self.images["exists"] & ~self.images["shared"]).any())))

    def to_frame(self, *, hash_subject: bool = False) -> pd.DataFrame:
        """The changes table (:func:`fairvision.audits.curation.withdraw.report.changes_frame`)."""
        return changes_frame(self, hash_subject=hash_subject)

    def pairs_frame(self, *, hash_subject: bool = False) -> pd.DataFrame | None:
        """The replacement pairs (:func:`fairvision.audits.curation.withdraw.report.pairs_frame`)."""
        return pairs_frame(self, hash_subject=hash_subject)

    def log_entry(self, *, operator: str | None = None, hash_subject: bool = False) -> dict:
        """The audit-log record (:func:`fairvision.audits.curation.withdraw.report.log_entry`)."""
        return log_entry(self, operator=operator, hash_subject=hash_subject)

    @property
    def image_hashes(self) -> list[str]:
        """SHA-256 of the withdrawn image files that no kept row shows: the results store's rows of these go."""
        return sorted({h for h, sh in zip(self.images["sha256"], self.images["shared"]) if h and not sh})


@dataclass
class _Withdrawn:
    """The withdrawn subjects' rows of the samples table."""

    data: pd.DataFrame                  # the samples table (read_table)
    raw: pd.DataFrame                   # the same, as written (read_raw_table)
    subjects: np.ndarray                # subject id of every row, as text
    hit: np.ndarray                     # rows of a withdrawn subject
    sample_ids: list[str]
    image_paths: list

    @property
    def image_abs(self) -> set[str]:
        return {os.path.abspath(str(p)) for p in self.image_paths if p is not None and not is_missing(p)}


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
        attributes, numeric features (see
        :func:`~fairvision.audits.curation.withdraw.replacement.match_replacements`).
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
    subjects = _subject_list(subjects)
    log_path = Path(log) if log is not None else samples.parent / LOG_NAME
    rows = _withdrawn_rows(samples, set(subjects), subject_col)
    # replacement first: its rows are appended to the samples table
    if replace and pool is None:
        raise ParameterError("replace", "needs a candidate pool (pool)")
    previous_all = read_log(log_path)
    replacement, groups = None, None
    if pool is not None:
        replacement = propose_replacements(Path(pool), rows.data, rows.hit, match, secondary, features, set(subjects),
                                           previous_all)
        groups = _group_change(rows, replacement)
    checked: dict[Path, str] = {}
    files = _samples_change(samples, rows, replacement if replace else None, checked)
    changed, scanned = _derived_changes(derived, samples, rows, set(subjects), checked)
    images = _image_table(rows)
    plan = WithdrawalPlan(samples, subjects, rows.sample_ids, files + changed, scanned, images, bool(delete_images),
                          None if store is None else store.root, {}, replacement, groups, log_path, [], checked)
    if store is not None and plan.image_hashes:
        # the store is shared by every dataset and short subject ids repeat across them: its rows go by the
        # content hash of this dataset's withdrawn images, never by subject id alone
        plan.store_rows = {k: int(v) for k, v in
                           store.forget(None, content_hashes=plan.image_hashes, dry_run=True).items()}
    plan.previous = _previous_withdrawals(plan, rows, previous_all)
    return plan


def _subject_list(subjects: Sequence[str]) -> list[str]:
    """The subject ids, stripped and without repeats; an empty one is an error."""
    subjects = [str(s).strip() for s in subjects]
    if not subjects or any(not s for s in subjects):
        raise ParameterError("subjects", "must hold at least one subject id, and no empty one")
    return list(dict.fromkeys(subjects))


def _withdrawn_rows(samples: Path, wanted: set[str], subject_col: str | None) -> _Withdrawn:
    """Read the samples table and find the rows of the withdrawn subjects."""
    data = read_table(samples, subject_col=subject_col)
    raw = read_raw_table(samples)
    if len(raw) != len(data):  # pragma: no cover - read_table keeps every row
        raise InputFileError(f"{samples}: cannot align the table's rows")
    subj_values = id_strings(data[SUBJECT_ID]) if SUBJECT_ID in data.columns else data[SAMPLE_ID].to_numpy(object)
    hit = np.isin(subj_values, list(wanted))
    sample_ids = data.loc[hit, SAMPLE_ID].astype(str).tolist()
    image_paths = data.loc[hit, IMAGE_PATH].tolist() if IMAGE_PATH in data.columns else [None] * int(hit.sum())
    return _Withdrawn(data, raw, subj_values, hit, sample_ids, image_paths)


def _group_change(rows: _Withdrawn, replacement: Replacement) -> pd.DataFrame:
    """Images per group of the primary match attributes before, after removal and after replacement."""
    kept = rows.data.loc[~rows.hit]
    frames = {"before": rows.data, "after_removal": kept,
              "after_replacement": pd.concat([kept, replacement.chosen], ignore_index=True)}
    groups = group_table(frames, replacement.match)
    groups["change"] = groups["after_replacement"] - groups["before"]
    return groups


def _samples_change(samples: Path, rows: _Withdrawn, replacement: Replacement | None,
                    checked: dict[Path, str]) -> list[FileChange]:
    """The samples table without the withdrawn rows and with the chosen replacements (when they are to be
    added); records its SHA-256 in ``checked``."""
    samples_bytes = samples.read_bytes()
    checked[samples] = sha256_hex(samples_bytes)
    add = []
    if replacement is not None and len(replacement.chosen):
        add = records_for(rows.raw, rows.data, replacement, samples)
    hit, n = rows.hit, len(rows.data)
    if not (hit.any() or add):
        return []
    new = rewrite_table(samples, samples_bytes, hit, add)
    return [FileChange(samples, "samples", n, int(hit.sum()), len(add), sha256_hex(samples_bytes), new,
                       f"{int(hit.sum())} of {n} rows" + (f", {len(add)} added" if add else ""))]


def _derived_changes(derived: Sequence[str | os.PathLike], samples: Path, rows: _Withdrawn, wanted: set[str],
                     checked: dict[Path, str]) -> tuple[list[FileChange], list[Path]]:
    """The derived files without the withdrawn rows (tables) or images (COCO), and every file scanned; records
    the SHA-256 of each in ``checked``."""
    files, scanned = [], []
    sid_set, image_abs = set(rows.sample_ids), rows.image_abs
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
        checked[d] = sha256_hex(b)
        if is_coco(d, b):
            new, counts = coco_rewrite(d, b, sid_set, image_abs, wanted, roots=[samples.parent])
            if new is not None:
                files.append(FileChange(d, "coco", counts["images_before"] + counts["annotations_before"],
                                        counts["images"] + counts["annotations"], 0, sha256_hex(b), new,
                                        f"{counts['images']} images, {counts['annotations']} annotations"))
            continue
        draw = read_raw_table(d)
        if SAMPLE_ID not in draw.columns and SUBJECT_ID not in draw.columns:
            raise ColumnError(f"{d}: no sample_id or subject_id column to find the subject's rows by")
        drop = np.zeros(len(draw), bool)
        if SAMPLE_ID in draw.columns:
            drop |= np.isin(id_strings(draw[SAMPLE_ID]), list(sid_set))
        if SUBJECT_ID in draw.columns:
            drop |= np.isin(id_strings(draw[SUBJECT_ID]), list(wanted))
        if drop.any():
            files.append(FileChange(d, "table", len(draw), int(drop.sum()), 0, sha256_hex(b),
                                    rewrite_table(d, b, drop), f"{int(drop.sum())} of {len(draw)} rows"))
    return files, scanned


def _image_table(rows: _Withdrawn) -> pd.DataFrame:
    """The withdrawn images: ``sample_id``, ``image_path``, ``exists``, ``sha256`` and ``shared`` (a kept row
    shows the same file: several people in one photo; it is neither deleted nor forgotten)."""
    images = pd.DataFrame({
        SAMPLE_ID: rows.sample_ids,
        IMAGE_PATH: [None if is_missing(p) else str(p) for p in rows.image_paths],
    })
    images["exists"] = [p is not None and os.path.isfile(p) for p in images[IMAGE_PATH]]
    images["sha256"] = [file_sha256(p) if e else None for p, e in zip(images[IMAGE_PATH], images["exists"])]
    data = rows.data
    kept_paths = ({os.path.abspath(str(p)) for p in data.loc[~rows.hit, IMAGE_PATH] if p is not None and not is_missing(p)}
                  if IMAGE_PATH in data.columns else set())
    images["shared"] = [p is not None and os.path.abspath(p) in kept_paths for p in images[IMAGE_PATH]]
    return images


def _previous_withdrawals(plan: WithdrawalPlan, rows: _Withdrawn, log_entries: list[dict]) -> list[dict]:
    """The earlier log entries of the plan's subjects; a subject found nowhere (no row in the samples table, none
    changed elsewhere, no earlier withdrawal) is an error."""
    hashes = {subject_hash(s): s for s in plan.subjects}
    previous = [e for e in log_entries if set(e.get("subject_sha256") or ()) & set(hashes)]
    found = set(rows.subjects[rows.hit].tolist())
    elsewhere = any(f.role != "samples" for f in plan.files)
    unknown = [s for s in plan.subjects
               if s not in found and not elsewhere and not any(subject_hash(s) in (e.get("subject_sha256") or ())
                                                              for e in previous)]
    if unknown:
        raise FairvisionError(f"{plan.samples_path}: subject {unknown[0]!r} not found (no row here, in the derived "
                              f"files or the store, and no earlier withdrawal in {plan.log_path})")
    return previous

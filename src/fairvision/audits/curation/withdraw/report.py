"""What a withdrawal plan says about itself: the changes table, the replacement pairs and the audit-log record
(docs/METHODS.md §13.5). The functions take a :class:`~fairvision.audits.curation.withdraw.plan.WithdrawalPlan`
(whose methods of the same names call them)."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import pandas as pd

from fairvision import __version__
from fairvision.audits.curation.withdraw.journal import default_operator, subject_hash

#: columns of the changes table
CHANGE_COLUMNS = ["kind", "path", "rows_before", "rows_removed", "rows_added", "sha256_before", "sha256_after",
                  "detail"]


def changes_frame(plan, *, hash_subject: bool = False) -> pd.DataFrame:
    """One row per thing changed: ``kind`` (samples, table, coco, store, image), ``path``,
    ``rows_before``, ``rows_removed``, ``rows_added`` (whole numbers, missing where they do not apply),
    ``sha256_before``, ``sha256_after``, ``detail``. With ``hash_subject`` an image row has no path (its
    file name is often the sample id; the log leaves it out too), only its SHA-256."""
    rows = [{"kind": f.role, "path": str(f.path), "rows_before": f.rows_before, "rows_removed": f.rows_removed,
             "rows_added": f.rows_added, "sha256_before": f.sha256_before, "sha256_after": f.sha256_after,
             "detail": f.detail} for f in plan.files]
    for stage, n in sorted(plan.store_rows.items()):
        rows.append({"kind": "store", "path": f"{plan.store_root}::{stage}", "rows_before": None,
                     "rows_removed": int(n), "rows_added": 0, "sha256_before": None, "sha256_after": None,
                     "detail": f"stage {stage}"})
    for r in plan.images.itertuples(index=False):
        rows.append({"kind": "image", "path": None if hash_subject else r.image_path, "rows_before": None,
                     "rows_removed": int(bool(plan.delete_images and r.exists and not r.shared)), "rows_added": 0,
                     "sha256_before": r.sha256, "sha256_after": None,
                     "detail": ("shared with a kept row, kept" if r.shared else "deleted" if plan.delete_images
                                else "listed, kept") if r.exists else "missing"})
    out = pd.DataFrame(rows, columns=CHANGE_COLUMNS)
    for c in ("rows_before", "rows_removed", "rows_added"):  # 100, not 100.0 next to a missing count
        out[c] = pd.to_numeric(out[c]).astype("Int64")
    return out


def pairs_frame(plan, *, hash_subject: bool = False) -> pd.DataFrame | None:
    """The replacement pairs (None without a pool). With ``hash_subject`` the withdrawn sample ids are
    replaced by their salted SHA-256 (:func:`subject_hash`, as the log hashes subject ids), in a column
    ``withdrawn_sample_sha256``."""
    if plan.replacement is None:
        return None
    pairs = plan.replacement.pairs.copy()
    if hash_subject:
        pairs.insert(0, "withdrawn_sample_sha256", [subject_hash(s) for s in pairs["withdrawn_sample_id"]])
        pairs = pairs.drop(columns="withdrawn_sample_id")
    return pairs


def log_entry(plan, *, operator: str | None = None, hash_subject: bool = False) -> dict:
    """The audit-log record of a withdrawal (no image content, only hashes)."""
    entry = {
        "withdrawal_id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "operator": operator or default_operator(),
        "fairvision": __version__,
        "subjects": None if hash_subject else list(plan.subjects),
        "subject_sha256": [subject_hash(s) for s in plan.subjects],
        "samples": os.path.abspath(plan.samples_path),
        "files": [{"path": os.path.abspath(f.path), "role": f.role, "rows_before": f.rows_before,
                   "rows_removed": f.rows_removed, "rows_added": f.rows_added,
                   "sha256_before": f.sha256_before, "sha256_after": f.sha256_after} for f in plan.files],
        "images": [{**({} if hash_subject else {"sample_id": r.sample_id}), "sha256": r.sha256,
                    "deleted": bool(plan.delete_images and r.exists and not r.shared)}
                   for r in plan.images.itertuples(index=False)],
        "store": None if plan.store_root is None else {"root": os.path.abspath(plan.store_root),
                                                       "rows_removed": dict(sorted(plan.store_rows.items()))},
        "replacement": None if plan.replacement is None else _replacement_record(plan, hash_subject),
    }
    return entry


def _replacement_record(plan, hash_subject: bool) -> dict:
    rep = plan.replacement
    added = bool(plan.files and plan.files[0].role == "samples" and plan.files[0].rows_added)
    return {
        "pool": os.path.abspath(rep.pool_path), "pool_sha256": rep.pool_sha256, "match": rep.match,
        "secondary": rep.secondary, "features": rep.features, "added": added,
        "pairs": [{**({} if hash_subject else {"withdrawn": r.withdrawn_sample_id}), "sample_id": r.sample_id,
                   "primary_mismatches": int(r.primary_mismatches),
                   "secondary_mismatches": int(r.secondary_mismatches)}
                  for r in rep.pairs.itertuples(index=False) if r.sample_id is not None],
    }

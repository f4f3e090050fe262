"""Apply a withdrawal plan all or nothing (docs/METHODS.md §13.5), through the durable commit of
:mod:`fairvision.io.durable` and the dataset's journal (:mod:`fairvision.audits.curation.withdraw.journal`)."""

from __future__ import annotations

import os
from pathlib import Path

from fairvision.audits.curation.withdraw.journal import (CRASH_BEFORE_COMMIT, dataset_journal, dataset_lock,
                                                         recover_locked, roll_forward)
from fairvision.audits.curation.withdraw.plan import WithdrawalPlan
from fairvision.errors import InputFileError
from fairvision.io.durable import crash_point, write_synced
from fairvision.io.store import sha256_hex
from fairvision.io.tables import IMAGE_PATH


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
        recover_locked(samples)
        _check_unchanged(plan)
        entry = plan.log_entry(operator=operator, hash_subject=hash_subject)
        record = _journal_record(plan, entry)
        journal = dataset_journal(samples)
        journal.write(record)
        try:
            for f, (tmp, _) in zip(plan.files, record["rename"]):
                write_synced(tmp, f.new_bytes, mode_of=f.path)
        except BaseException:
            recover_locked(samples)  # prepared: roll back
            raise
        crash_point(CRASH_BEFORE_COMMIT)
        record["state"] = "committed"
        journal.write(record)  # the commit point
        roll_forward(journal, record, crash=True)
        journal.remove()
    return entry


def _check_unchanged(plan: WithdrawalPlan) -> None:
    """Every file read for the plan, not only those it changes, must still hold what the plan was made from."""
    expected = {**plan.checked, **{f.path: f.sha256_before for f in plan.files}}
    for path, before in expected.items():
        try:
            current = sha256_hex(Path(path).read_bytes())
        except OSError:
            current = None
        if current != before:
            raise InputFileError(f"{path}: changed since the withdrawal was planned; run it again")


def _journal_record(plan: WithdrawalPlan, entry: dict) -> dict:
    """The ``prepared`` journal of a plan: temporaries beside each changed file, images to delete, the store's
    content hashes to forget and the log line (absolute paths: the journal may be finished from another
    folder)."""
    token = entry["withdrawal_id"][:12]
    absolute = os.path.abspath
    renames = [(absolute(f.path.with_name(f".{f.path.name}.withdraw-{token}.tmp")), absolute(f.path))
               for f in plan.files]
    images = plan.images
    deletions = [absolute(p) for p, e, sh in zip(images[IMAGE_PATH], images["exists"], images["shared"])
                 if e and not sh and plan.delete_images]
    store = None
    if plan.store_root is not None and sum(plan.store_rows.values()):
        store = {"root": absolute(plan.store_root), "content_hashes": plan.image_hashes}
    return {"version": 1, "state": "prepared", "withdrawal_id": entry["withdrawal_id"], "rename": renames,
            "delete": deletions, "store": store, "log": {"path": absolute(plan.log_path), "entry": entry}}

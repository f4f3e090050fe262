"""The withdrawal's audit log, its dataset lock and its commit journal (docs/METHODS.md §13.5).

The audit log is JSON Lines, appended to (:func:`fairvision.io.durable.append_synced`) and never rewritten.
A withdrawal commits through :mod:`fairvision.io.durable`: an exclusive lock beside the samples table
(``.<samples name>.withdraw.lock``) and a journal (``.<samples name>.withdraw.journal.json``) that says
``prepared`` (the new file versions are being written) or ``committed`` (they are: roll forward). Besides the
renames and deletions, a committed journal names the results store's content hashes to forget and the log line
to append; :func:`recover` finishes or undoes what a killed process left.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

from fairvision.io.durable import Journal, append_synced, exclusive_lock
from fairvision.io.store import ResultsStore

#: file name of the audit log beside the samples table
LOG_NAME = "withdrawals.log.jsonl"
#: crash points of a withdrawal's commit (:func:`fairvision.io.durable.crash_point`): before the commit point, and
#: counted renames after it
CRASH_BEFORE_COMMIT = "withdraw.before_commit"
CRASH_AFTER_RENAMES = "withdraw.after_renames"
_SUBJECT_SALT = "fairvision-withdrawn-subject:"


def subject_hash(subject_id: str) -> str:
    """SHA-256 of a subject id (with a fixed prefix), as the log records it: pseudonymous, not anonymous (a
    short id can be found again by trying ids)."""
    return hashlib.sha256((_SUBJECT_SALT + str(subject_id)).encode()).hexdigest()


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


def append_log(path: Path, entry: dict) -> None:
    """Append one JSON line (O_APPEND, one write, fsync), unless a line of this withdrawal_id is there."""
    wid = entry["withdrawal_id"]
    if path.is_file() and any(e.get("withdrawal_id") == wid for e in read_log(path)):
        return
    append_synced(path, (json.dumps(entry, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8"))


def dataset_journal(samples: Path) -> Journal:
    """The commit journal of a dataset's withdrawals (absolute paths), beside its samples table."""
    return Journal(samples.parent / f".{samples.name}.withdraw.journal.json")


@contextlib.contextmanager
def dataset_lock(samples: str | os.PathLike) -> Iterator[None]:
    """Hold the exclusive lock of a dataset's withdrawals (a lock file beside the samples table)."""
    samples = Path(samples)
    with exclusive_lock(samples.parent / f".{samples.name}.withdraw.lock"):
        yield


def roll_forward(journal: Journal, record: dict, *, crash: bool = False) -> None:
    """Finish a committed withdrawal: renames and image deletions, the store's ``forget`` of the image hashes,
    the log line; each step idempotent. With ``crash``, the renames pass the test crash points."""
    journal.roll_forward(record, crash=CRASH_AFTER_RENAMES if crash else None)
    st = record.get("store")
    if st and st.get("content_hashes"):
        ResultsStore(st["root"]).forget(None, content_hashes=st["content_hashes"])
    if record.get("log"):
        append_log(Path(record["log"]["path"]), record["log"]["entry"])


def recover(samples: str | os.PathLike) -> str | None:
    """Finish or undo a withdrawal that a killed process left behind (docs/METHODS.md §13.5).

    A ``committed`` journal is rolled forward (renames, deletions, store, log line); a ``prepared`` one (killed
    before the commit point) is rolled back: its temporaries are removed and the files stay as they were.
    Returns ``"rolled forward"``, ``"rolled back"`` or None when there was nothing to do.
    """
    samples = Path(samples)
    if not dataset_journal(samples).exists():
        return None
    with dataset_lock(samples):
        return recover_locked(samples)


def recover_locked(samples: Path) -> str | None:
    """:func:`recover`, for a caller that holds the dataset lock."""
    journal = dataset_journal(samples)
    if not journal.exists():
        return None
    record = journal.read() or {}
    if record.get("state") == "committed":
        roll_forward(journal, record)
        what = "rolled forward"
    else:
        journal.roll_back(record)
        what = "rolled back"
    journal.remove()
    return what

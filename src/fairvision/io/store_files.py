"""The results store's light half: its default folder, the names of its files, its lock and the content hash of a file.

Everything here needs the standard library only, so that the whole-run memo (:mod:`fairvision.io.run_memo`) can
read and write under the store's lock without importing pyarrow or DuckDB; :mod:`fairvision.io.store` builds the
store itself on top of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path
from typing import Iterator

from fairvision.io.durable import FileLock, Journal

__all__ = ["JOURNAL_NAME", "LOCK_NAME", "PART_NAME", "STORE_ENV", "default_store_root", "local_file_sha256", "store_lock"]

#: environment variable naming the default store folder
STORE_ENV = "FAIRVISION_STORE"
LOCK_NAME = ".lock"
JOURNAL_NAME = ".journal.json"
#: the name of a part the store writes (:meth:`fairvision.io.store.ResultsStore._new_part_name`): anything else
#: in a stage folder is not its own
PART_NAME = re.compile(r"^part-\d{20}-\d+-[0-9a-f]{12}\.parquet$")


def default_store_root() -> Path:
    """``$FAIRVISION_STORE``, else the user cache folder: ``$XDG_CACHE_HOME/fairvision/store`` or
    ``~/.cache/fairvision/store``."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fairvision" / "store"


@contextlib.contextmanager
def store_lock(root: str | os.PathLike, exclusive: bool = False, *, create: bool = True,
               blocking: bool = True) -> Iterator[bool]:
    """Hold the lock of the store at ``root`` (shared or exclusive); yields False when ``blocking=False`` and it
    is taken. Finishes a journal left by a killed vacuum / forget first. With ``create=False`` a store that
    cannot be locked (absent or read-only) is read as it is (yields True)."""
    root = Path(root)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(root / LOCK_NAME)
    try:
        lock.open()
    except OSError:
        if create:
            raise
        yield True
        return
    with lock:  # closing the file releases the lock
        if not lock.acquire(exclusive=exclusive, blocking=blocking):
            yield False
            return
        journal = Journal(root / JOURNAL_NAME, base=root)
        if journal.exists():
            if not exclusive:
                lock.release()
                lock.acquire(exclusive=True)
            record = journal.read()
            if record:
                journal.roll_forward(record)
            journal.remove()
            if not exclusive:
                lock.acquire(exclusive=False)
        yield True


# SHA-256 of files already hashed in this process, by (path, size, mtime_ns, inode)
_FILE_HASHES: dict[tuple, str] = {}


def local_file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a file's bytes (the content hash the store keys images by; None when it cannot be read),
    remembered for this process by (path, size, mtime, inode), so that a run hashes each file once however
    often it is asked (the whole-run memo's key, then the store's keys). Plain ``os.read`` calls:
    ``hashlib.file_digest`` zeroes a 256 kB buffer per file, the larger part of its time on small images."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    sig = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    hit = _FILE_HASHES.get(sig)
    if hit is not None:
        return hit
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    _FILE_HASHES[sig] = hit = h.hexdigest()
    return hit


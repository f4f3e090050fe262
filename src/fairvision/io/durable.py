"""Durable commits: a lock file, files written and synced under temporary names, and a journal that finishes them.

Used by the results store's vacuum and forget (:mod:`fairvision.io.store`) and by consent withdrawal
(:mod:`fairvision.audits.curation.withdraw`, docs/METHODS.md §13.5). A commit goes:

1. under an exclusive :class:`FileLock`, every new file version is written to a temporary name beside its final
   name with :func:`write_synced` (the file and its folder are fsynced);
2. a :class:`Journal` naming the renames (temporary -> final) and the deletions is written with
   :func:`replace_synced` (temporary, fsync, rename, fsync of the folder): once it is on disk, the commit is made;
3. :meth:`Journal.roll_forward` does the renames (each followed by an fsync of the folder) and the deletions, and
   :meth:`Journal.remove` removes the journal.

Every step of 3 is idempotent, so a process killed during it leaves a journal that the next process holding the
lock finishes; one killed before 2 leaves only temporaries, which :meth:`Journal.roll_back` (or a later clean-up)
removes. The journal is JSON: ``{"rename": [[temporary, final], ...], "delete": [path, ...]}`` plus whatever
fields its user adds (paths relative to the journal's ``base`` folder, or absolute without one).

Fault injection for tests: :func:`crash_point` is the one place where a test can kill the process (SIGKILL)
mid-commit. Set ``FAIRVISION_TEST_CRASH`` to the name of a point (``withdraw.before_commit``), or to
``<name>:<N>`` for a counted point (``withdraw.after_renames:2``: after the second rename; ``:0`` before the
first), in the environment of a subprocess. In process, monkeypatch :func:`crash_point` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Iterable, Iterator

try:  # POSIX; elsewhere the lock is a no-op
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

#: environment variable naming the crash point at which a test kills the process (see the module docstring)
CRASH_ENV = "FAIRVISION_TEST_CRASH"


def crash_point(name: str, count: int | None = None) -> None:
    """Kill this process (SIGKILL) when ``$FAIRVISION_TEST_CRASH`` names this point: ``name``, or
    ``name:count`` for a counted point. Nothing happens otherwise (the one fault-injection point for tests)."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    if wanted.strip() == (name if count is None else f"{name}:{count}"):
        os.kill(os.getpid(), signal.SIGKILL)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a folder's entries (a new, renamed or removed file) durable; a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_file_synced(path: Path, data: bytes, mode_of: Path | None) -> None:
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


def write_synced(path: str | os.PathLike, data: bytes, *, mode_of: str | os.PathLike | None = None) -> Path:
    """Write ``data`` to ``path`` (a fresh temporary name of a commit) and fsync the file and its folder.

    Parameters
    ----------
    path : path-like
        The file to write (created, or truncated).
    data : bytes
    mode_of : path-like, optional
        A file whose permission bits the new file takes (the file it will replace); else ``0666`` less the umask.
    """
    path = Path(path)
    _write_file_synced(path, data, None if mode_of is None else Path(mode_of))
    fsync_dir(path.parent)
    return path


def replace_synced(path: str | os.PathLike, data: bytes) -> Path:
    """Atomically and durably replace ``path`` with ``data``: a synced temporary beside it, a rename, an fsync of
    the folder."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    _write_file_synced(tmp, data, None)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def append_synced(path: str | os.PathLike, line: bytes) -> None:
    """Append one record to a log file: opened with ``O_APPEND``, one write, fsync. A last line torn by an earlier
    write cut short (a full disk) gets its newline first, so it cannot swallow this record."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size:
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLock:
    """An advisory lock held on a lock file (``fcntl.flock``), released when the file is closed; where there is
    no ``fcntl`` every lock is granted at once.

    Use as a context manager (``with FileLock(path) as lock: lock.acquire()``); :meth:`open` alone opens the file
    early, so that a caller can tell an unopenable lock file (``OSError``) from a taken lock.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None

    def open(self) -> FileLock:
        """Open (create) the lock file; raises OSError when it cannot be."""
        if fcntl is not None and self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        return self

    def acquire(self, *, exclusive: bool = True, blocking: bool = True) -> bool:
        """Take the lock, shared or exclusive (a held lock is converted, not atomically: see ``flock(2)``).
        Returns False when ``blocking`` is False and another process holds it."""
        if self._fd is None:
            return True
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(self._fd, mode | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        """Give the lock up, keeping the file open."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the lock file, which releases the lock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (a lock file, created when absent), waiting for it."""
    with FileLock(path) as lock:
        lock.acquire(exclusive=True)
        yield


class Journal:
    """The journal of a commit: a JSON file naming renames (temporary -> final) and deletions.

    Parameters
    ----------
    path : path-like
        The journal file.
    base : path-like, optional
        Folder the journal's paths are relative to; None: they are absolute.
    """

    def __init__(self, path: str | os.PathLike, *, base: str | os.PathLike | None = None):
        self.path = Path(path)
        self.base = None if base is None else Path(base)

    def _at(self, p: str) -> Path:
        return Path(p) if self.base is None else self.base / p

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> dict | None:
        """The journal's record; None when there is none, or it cannot be read (it is written atomically, so a
        torn one comes only from a foreign hand: nothing to finish)."""
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def write(self, record: dict) -> None:
        """Write the record atomically and durably (:func:`replace_synced`): once this returns, it holds."""
        replace_synced(self.path, json.dumps(record).encode("utf-8"))

    def roll_forward(self, record: dict, *, crash: str | None = None) -> None:
        """Do the record's renames (where the temporary is still there; each followed by an fsync of the folder)
        and deletions (where the file is still there). With ``crash``, :func:`crash_point` ``crash`` is passed
        before the first rename and after each, counting the renames."""
        if crash:
            crash_point(crash, 0)
        for done, (tmp, final) in enumerate(record.get("rename", []), 1):
            tmp, final = self._at(tmp), self._at(final)
            if tmp.exists():
                os.replace(tmp, final)
                fsync_dir(final.parent)
            if crash:
                crash_point(crash, done)
        delete_files(self._at(p) for p in record.get("delete", []))

    def roll_back(self, record: dict) -> None:
        """Remove the temporaries of the record's renames (a commit that was not made)."""
        delete_files(self._at(tmp) for tmp, _ in record.get("rename", []))

    def remove(self) -> None:
        """Remove the journal (the commit is finished or undone) durably."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        fsync_dir(self.path.parent)


def delete_files(paths: Iterable[str | os.PathLike]) -> None:
    """Remove files, skipping those already gone."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)

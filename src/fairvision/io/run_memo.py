"""The whole-run memo of the results store: a run whose inputs and options are unchanged writes its table at once.

The results store (:mod:`fairvision.io.store`) keeps one result per image, so a second run measures nothing; but it
still starts pandas, pyarrow and DuckDB to look its images up and build its table, which is most of a second run's
time. The memo goes one step further, like ``ccache`` or ``make``: a run whose every row was in the store leaves
the exact bytes of the table a second run would write, under a key that hashes everything that table depends on
(:func:`run_key`). A later run with the same key writes those bytes and stops, before any of those imports.

Layout: one file per key in ``<store>/run-memo/`` (a name no stage can have, so the store's stage scan, queries and
vacuum never see it), written atomically under the store's shared lock::

    fairvision-run-memo 1\\n
    {"key": ..., "created": ..., "summary": ..., "rows": ..., "size": ..., "sha256": ...}\\n
    <the table's bytes>

A file that is not one of these (a foreign, truncated or corrupt file, a header for another key, bytes whose
SHA-256 is not the header's) is a miss, never an error. Consent withdrawal (:meth:`ResultsStore.forget`) deletes
every memo file, since a memo holds rows of people. At most :data:`MAX_ENTRIES` files are kept (the newest).

The store's folder, file names and lock come from :mod:`fairvision.io.store_files` (the store's light half), so that
the memo needs neither pyarrow nor DuckDB. It imports the standard library and fairvision's light modules only
(checked by ``python -X importtime``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from fairvision import __version__
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.durable import fsync_dir
from fairvision.io.store_files import PART_NAME, local_file_sha256, store_lock
from fairvision.io.suffixes import IMAGE_SUFFIXES, folder_images

__all__ = ["MEMO_DIR", "MemoHit", "bundled_folder", "clear_memos", "hash_files", "memo_generation", "memo_temp_path",
           "memo_usage", "package_signature", "read_memo", "run_images", "run_key", "stage_answers", "write_memo"]

#: the memo's folder under the store's root: not a stage name (stages are ``[a-z][a-z0-9_]*``)
MEMO_DIR = "run-memo"
MEMO_SUFFIX = ".memo"
#: a token in the memo folder that every consent withdrawal renews (:func:`clear_memos`): a run keeps its memo only
#: when the token is the one it read before it read the store (:func:`memo_generation`)
GENERATION_NAME = "generation"
#: memo files kept; writing one more removes the oldest
MAX_ENTRIES = 64
#: bump when what a memo holds, or how its key is made, changes
MEMO_VERSION = 1
_MAGIC = b"fairvision-run-memo 1\n"
#: packages whose versions shape a written table's bytes (Parquet writer, pandas metadata, number formatting)
_TABLE_PACKAGES = ("numpy", "pandas", "pyarrow")
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- key


def _package_files() -> list[str]:
    """Every ``.py`` file of the fairvision package, in a fixed order."""
    out = []
    for folder, dirs, files in os.walk(_PACKAGE_ROOT):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".py")]
    return out


def _signature(files: list[str], digests: list[str | None]) -> str:
    h = hashlib.sha256()
    for path, digest in zip(files, digests):
        h.update(f"{os.path.relpath(path, _PACKAGE_ROOT)}\0{digest}\n".encode())
    return h.hexdigest()


def package_signature() -> str:
    """SHA-256 of every ``.py`` file of the fairvision package (relative names and the SHA-256 of their bytes):
    a code change anywhere is a new key."""
    files = _package_files()
    return _signature(files, hash_files(files, threads=_hash_threads()))


def _table_packages() -> dict[str, str | None]:
    """Versions of the packages that write the table, without importing them: from the names of their
    ``.dist-info`` folders in the first site-packages folder of ``sys.path`` that has them (as an import finds
    them; ``importlib.metadata`` takes ten times as long, so it only answers for a package not found so)."""
    wanted: dict[str, str | None] = {name: None for name in _TABLE_PACKAGES}
    for entry in sys.path:
        if not entry.endswith(("site-packages", "dist-packages")):  # never the working folder: it may be huge
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                dist, _, version = n[:-len(".dist-info")].partition("-")
                dist = dist.lower().replace("-", "_").replace(".", "_")
                if dist in wanted and wanted[dist] is None:
                    wanted[dist] = version
        if all(wanted.values()):
            return wanted
    from importlib import metadata  # rare: an egg or an unusual layout

    for name, version in wanted.items():
        if version is None:
            with contextlib.suppress(metadata.PackageNotFoundError):
                wanted[name] = metadata.version(name)
    return wanted


def hash_files(paths: list[str], threads: int = 2) -> list[str | None]:
    """SHA-256 of each file's bytes (None where one cannot be read), on up to ``threads`` threads (hashing and
    reading release the GIL)."""
    out: list[str | None] = [None] * len(paths)

    def work(start: int) -> None:
        for i in range(start, len(paths), threads):
            out[i] = local_file_sha256(paths[i])

    helpers = [threading.Thread(target=work, args=(t,)) for t in range(1, min(threads, len(paths)))]
    for t in helpers:
        t.start()
    work(0)
    for t in helpers:
        t.join()
    return out


def _hash_threads() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):
        return max(1, min(4, os.cpu_count() or 1))


def bundled_folder(name: str) -> Path | None:
    """The folder of a bundled image set that is a plain folder of images (``portraits``), else None."""
    return _PACKAGE_ROOT / "datasets" / "data" / "portraits" if name == "portraits" else None


def run_images(source: str | os.PathLike) -> list[str] | None:
    """The image paths a run over ``source`` measures, in order, as its table writes them (absolute, the folder's
    links resolved: :func:`fairvision.skin.batch_tables.sample_table`), for a folder of images or one image; None
    for any other source (a table, a listing, tar shards, a missing path), which the memo leaves alone."""
    name = str(source)
    p = Path(source)
    if name.lower().endswith(".tar"):  # tar shards, whatever the path is
        return None
    if not p.exists() and bundled_folder(name) is not None:
        p = bundled_folder(name)
        folder = p  # fairvision.datasets.load_portraits: the folder as the package names it, not resolved
    elif p.is_dir():
        folder = p.resolve()
    elif p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
        return [str(p.resolve())]
    else:
        return None
    try:
        with os.scandir(folder) as it:
            if any(e.name.lower().endswith(".tar") and e.is_file() for e in it):  # tar shards: not images alone
                return None
        files = folder_images(folder)  # as the folder reader lists them (fairvision.datasets.demo.from_folder)
    except OSError:
        return None
    if any(p.name.startswith(".") for p in files):
        return None  # hidden image files: left to the normal path
    return [str(p) for p in files] or None


def _mask_files(masks: str | os.PathLike) -> list[list[str]] | None:
    """``[relative path, SHA-256]`` of every file under a masks folder (None when one cannot be read)."""
    root = Path(masks)
    if not root.is_dir():
        return None
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            digest = local_file_sha256(p)
            if digest is None:
                return None
            out.append([str(p.relative_to(root)), digest])
    return out


def run_key(images: list[str], options: dict, *, masks: str | os.PathLike | None = None) -> str | None:
    """SHA-256 of everything a run's table depends on, or None when an input cannot be read.

    It hashes the package's version and every source file of it (:func:`package_signature`: the per-image
    store key's code signature and cache version are part of it), the versions of the packages that write
    tables, ``options`` (every option that shapes the table, as given), the image paths as the table writes
    them with the SHA-256 of each image's bytes, and the names and bytes of every file in the masks folder.
    File times play no part: a file rewritten with the same bytes is the same input.
    """
    code = _package_files()  # hashed with the images, on the same threads
    digests = hash_files(code + list(images), threads=_hash_threads())
    if None in digests:
        return None
    hashes = [[path, digest] for path, digest in zip(images, digests[len(code):])]
    mask_files = None
    if masks is not None:
        mask_files = _mask_files(masks)
        if mask_files is None:
            return None
        mask_files = [str(Path(masks).resolve()), mask_files]
    payload = {"memo": MEMO_VERSION, "version": __version__, "code": _signature(code, digests[:len(code)]),
               "packages": _table_packages(), "options": options, "images": hashes, "masks": mask_files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


# --------------------------------------------------------------------------- memo files


@dataclass(frozen=True)
class MemoHit:
    """A memo entry: the table's bytes, the summary line of the run that left it, and when it was left."""

    data: bytes
    summary: str
    created: str
    rows: int

    def summary_line(self) -> str:
        """The summary line of the run, saying that its table was reused."""
        note = f"inputs unchanged since {self.created}: the table of that run reused"
        return f"{self.summary}; {note}"


def _memo_path(root: Path, key: str) -> Path:
    return Path(root) / MEMO_DIR / f"{key}{MEMO_SUFFIX}"


def _parse(blob: bytes, key: str) -> MemoHit | None:
    if not blob.startswith(_MAGIC):
        return None
    end = blob.find(b"\n", len(_MAGIC))
    if end < 0:
        return None
    try:
        head = json.loads(blob[len(_MAGIC):end])
        data = blob[end + 1:]
        if (not isinstance(head, dict) or head.get("key") != key or head.get("size") != len(data)
                or head.get("sha256") != hashlib.sha256(data).hexdigest()):
            return None
        return MemoHit(data=data, summary=str(head["summary"]), created=str(head["created"]), rows=int(head["rows"]))
    except (ValueError, KeyError, TypeError):
        return None


def stage_answers(root: str | os.PathLike, stage: str) -> bool:
    """Whether the stage folder holds parts and nothing else: a folder emptied or removed by hand means the rows
    a memo holds are no longer in the store, and an entry whose name is not one the store gives its parts (a
    folder, a file someone put there) is named by a run that reads the stage (``ForeignPartsWarning``); either
    way the run takes the normal path. (A file with a part's name but not the store's columns needs pyarrow to
    tell.)"""
    try:
        with os.scandir(Path(root) / stage) as it:
            names = [(e.name, e.is_dir()) for e in it if not e.name.startswith(".")]
    except OSError:
        return False
    return bool(names) and all(PART_NAME.match(n) and not is_dir for n, is_dir in names)


def read_memo(root: str | os.PathLike, key: str, *, stage: str | None = None) -> MemoHit | None:
    """The memo entry of ``key`` in the store at ``root``, or None (none, not a valid one, or ``stage``'s folder
    holds no parts or files the store did not write: :func:`stage_answers`)."""
    path = _memo_path(Path(root), key)
    if not path.is_file() or (stage is not None and not stage_answers(root, stage)):
        return None
    with store_lock(root, create=False):
        try:
            blob = path.read_bytes()
        except OSError:
            return None
    return _parse(blob, key)


def write_memo(root: str | os.PathLike, key: str, data: bytes, *, summary: str, rows: int) -> Path:
    """Keep ``data`` (a table's bytes) as the memo entry of ``key``, atomically. The caller holds the store's
    shared lock (:func:`store_lock`) and has found the generation token unchanged since before it read the store
    rows the table holds (:func:`memo_generation`), so that no consent withdrawal came in between. The oldest
    entries beyond :data:`MAX_ENTRIES` go."""
    created = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = {"key": key, "created": created, "summary": summary, "rows": int(rows), "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    path = _memo_path(Path(root), key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, _MAGIC + json.dumps(head).encode() + b"\n" + data)
    entries = sorted(_entries(Path(root)), key=lambda p: _mtime(p), reverse=True)
    for old in entries[MAX_ENTRIES:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return path


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _entries(root: Path) -> list[Path]:
    folder = Path(root) / MEMO_DIR
    try:
        return [folder / n for n in os.listdir(folder) if n.endswith(MEMO_SUFFIX) and not n.startswith(".")]
    except OSError:
        return []


def memo_usage(root: str | os.PathLike) -> tuple[int, int]:
    """``(entries, bytes)`` of the memo of the store at ``root`` (every file in its folder counts toward the
    bytes)."""
    folder = Path(root) / MEMO_DIR
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return len(_entries(Path(root))), total


def clear_memos(root: str | os.PathLike) -> int:
    """Delete every memo entry (consent withdrawal: memo entries hold people's rows), durably, and renew the
    generation token, so that a run which read the store before this cannot keep a memo of what it read
    (:func:`memo_generation`); the caller holds the store's exclusive lock. Returns the number of entries
    deleted."""
    folder = Path(root) / MEMO_DIR
    n = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name != GENERATION_NAME and (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    n += 1
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / GENERATION_NAME, uuid.uuid4().hex.encode())
    fsync_dir(folder)
    return n


def memo_generation(root: str | os.PathLike) -> str:
    """The memo's generation token (empty before the first consent withdrawal): read it before reading the
    store, and keep a memo only if it is unchanged under the store's lock (:func:`clear_memos` renews it)."""
    try:
        return (Path(root) / MEMO_DIR / GENERATION_NAME).read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def memo_temp_path(root: str | os.PathLike, suffix: str) -> Path:
    """A fresh temporary file name in the memo folder (dot-prefixed: never read as an entry), for a table
    written by the usual writer before it is kept."""
    folder = Path(root) / MEMO_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f".table-{uuid.uuid4().hex[:12]}{suffix}"

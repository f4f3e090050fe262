"""Write files so that a failed run never leaves a half-written result.

Outputs are first written into a private staging folder beside the target;
only when everything has been written are the files moved into place, each
with an atomic ``os.replace``. If anything fails before that, the target is
untouched and the staging folder is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from fairvision.errors import FairvisionError


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# read once at import: os.umask can only be read by setting it, which would race with other threads
_UMASK = _read_umask()


def _as_user_file(fd: int, replaces: Path) -> None:
    """mkstemp creates 0600 files; give the result the mode a plain ``open`` would: the replaced
    file's mode, or 0666 less the umask for a new file."""
    try:
        mode = replaces.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_UMASK
    os.fchmod(fd, mode)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        _as_user_file(fd, path)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output_dir(outdir: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging folder; on success move its contents into ``outdir``.

    Files already in ``outdir`` that the run did not produce are left alone;
    files it did produce replace their old versions only after the whole run
    succeeded.
    """
    outdir = Path(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.staging-", dir=outdir.parent))
    os.chmod(staging, 0o777 & ~_UMASK)  # mkdtemp makes 0700; subfolders moved out keep the user's mode
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        for src in sorted(staging.rglob("*")):
            rel = src.relative_to(staging)
            dst = outdir / rel
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _probe(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (tried for real: permission bits say nothing for root
    or on a read-only file system)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fairvision-write-check-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(tmp)
    return True


def check_writable(path: str | os.PathLike, *, kind: str = "output") -> Path:
    """Check before any work that ``path`` (a file or folder to create or replace) can be written.

    Outputs are staged beside the target and moved into place, so the
    target's nearest existing folder must take a new file, and so must an
    existing target folder.
    """
    path = Path(path)
    if path.is_dir() and not _probe(path):
        raise FairvisionError(f"{path}: {kind} is not writable")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise FairvisionError(f"{path}: cannot create the {kind}: {parent} is not a folder")
    if not _probe(parent):
        raise FairvisionError(f"{path}: cannot write the {kind}: folder {parent} is not writable")
    return path

"""A small content-addressed cache of JSON records, for resumable batch runs.

A record is stored under a key that hashes everything its value depends on
(input files' path, size and modification time, parameters, package version
and the source of the code that computes it), so a changed input, option or
code is a miss and nothing needs invalidating. Records are written atomically
(:func:`fairvision.io.atomic.atomic_write_text`) one file each, as results
arrive, so an interrupted run resumes where it stopped; a record torn by a
crash reads as a miss. The layout is ``<root>/<key[:2]>/<key>.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from fairvision.io.atomic import atomic_write_text
from fairvision.io.jsonable import to_jsonable

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def file_signature(path: str | os.PathLike | None) -> list | None:
    """``[absolute path, size, mtime_ns]`` of a file (size and mtime None when it is missing); None for None."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return [os.path.abspath(path), None, None]
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def source_signature(parts: Iterable[str]) -> str:
    """SHA-256 of the source of package files and folders (paths relative to the ``fairvision`` package)."""
    h = hashlib.sha256()
    for rel in parts:
        p = _PACKAGE_ROOT / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(_PACKAGE_ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def content_key(payload) -> str:
    """SHA-256 of a JSON-able description of everything a result depends on (keys sorted)."""
    blob = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    """JSON records by content key in a folder (created on the first write)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The record stored under ``key``, or None (absent, unreadable or torn)."""
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            return None  # absent or torn by a crash: recompute
        if not isinstance(rec, dict) or rec.pop("_key", None) != key:
            return None
        return rec

    def put(self, key: str, record: dict) -> None:
        """Store ``record`` (JSON-able after :func:`fairvision.io.jsonable.to_jsonable`) under ``key``, atomically."""
        atomic_write_text(self._path(key), json.dumps(to_jsonable({**record, "_key": key})))

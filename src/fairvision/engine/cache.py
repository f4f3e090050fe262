"""Content keys for resumable batch runs.

A result is stored (in the results store, :mod:`fairvision.io.store`) under a
key that hashes everything its value depends on: the parameters, the package
version and the source of the code that computes it (:func:`content_key`,
:func:`source_signature`), with the input's content hash. A changed input,
option or code is then a miss, and nothing needs invalidating.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

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

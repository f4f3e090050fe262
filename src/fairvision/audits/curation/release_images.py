"""The images of a release and the read-back check of a release folder (docs/METHODS.md §13.10).

:func:`write_images` writes every readable image as a fresh PNG from its pixels (EXIF orientation applied, the
longer side at most ``max_side``, no metadata chunk at all), named by its pseudonymous sample id, through
:func:`fairvision.engine.imap`. :func:`check_release` reopens a written release folder and checks what must not
leak: metadata chunks or oversized images, files that differ from the manifest, location columns, and original
ids or file names in any table cell or file name. The column-name rules both use (location columns, image path
columns) live here too.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings
from fairvision.engine import imap
from fairvision.errors import InputFileError
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.images import ImageTooLargeError, decode_image, downscale, encode_png
from fairvision.io.metadata import PNG_DROP, PNG_SIGNATURE

#: FHIBE's downsampled release: the longer side at 2,048 pixels, aspect ratio kept.
DEFAULT_MAX_SIDE = 2048
#: Name tokens of location columns, dropped from every table (plus any token starting with ``gps``).
LOCATION_TOKENS = frozenset({"lat", "lon", "lng", "latitude", "longitude", "altitude", "gps", "geo", "geolocation",
                             "geotag", "geohash", "coords", "coordinates"})
#: Names of image path columns (as :func:`fairvision.io.tables.read_table` recognises them).
PATH_COLUMNS = frozenset({"image_path", "filename", "file_name", "path", "file"})
#: Numeric ids shorter than this are looked for in file names only (numbers like them are ordinary values).
MIN_NUMERIC_ID = 6

_TOKEN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_WORDS = re.compile(r"[\w\-]+(?:\.[\w\-]+)*")


def name_tokens(name: str) -> list[str]:
    """``"GPSLatitude"`` -> ``["gps", "latitude"]``; ``"capture_date"`` -> ``["capture", "date"]``."""
    return [t.lower() for t in _TOKEN.findall(str(name))]


def is_location_column(name: str) -> bool:
    """A column named like a location: latitude, longitude, altitude, GPS ... (docs/METHODS.md §13.10)."""
    return any(t in LOCATION_TOKENS or t.startswith("gps") for t in name_tokens(name))


def release_one(item: tuple[str, str, int]) -> dict:
    """Write one image of a release: decode ``src`` safely (pixel limit, EXIF orientation), shrink it so the
    longer side is at most ``max_side`` (area interpolation), write it as a PNG without metadata to ``dst``."""
    src, dst, max_side = item
    try:
        data = np.fromfile(src, dtype=np.uint8)
    except FileNotFoundError:
        raise InputFileError(f"{src}: no such image file") from None
    except OSError as exc:
        raise InputFileError(f"{src}: cannot read image: {exc.strerror or exc}") from None
    arr = decode_image(data, src)
    h0, w0 = arr.shape[:2]
    arr = downscale(arr, int(max_side))
    png = encode_png(arr)
    atomic_write_bytes(dst, png)
    return {"source_width": int(w0), "source_height": int(h0), "width": int(arr.shape[1]), "height": int(arr.shape[0]),
            "n_bytes": len(png), "sha256": hashlib.sha256(png).hexdigest()}


def failure_reason(error: str, message: str) -> str:
    """A left-out image's reason without its path (the report may travel; the path stays with the curator)."""
    text = f"{error}: {message}"
    if error == ImageTooLargeError.__name__ or "over the limit" in text:
        return "over the pixel limit"
    if "no such image file" in text or "is a folder" in text:
        return "no such file"
    if "empty" in text:
        return "empty file"
    if "not a readable image" in text:
        return "not a readable image"
    return "could not be written"


def write_images(paths: list, names: list[str], outdir: Path, *, max_side: int = DEFAULT_MAX_SIDE,
                 settings: AuditSettings | None = None,
                 progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Write the images ``paths`` as ``outdir/<names[i]>.png`` (docs/METHODS.md §13.10).

    Returns one row per path: ``ok``, ``reason`` and ``error`` (when left out; ``error`` names the source path
    and stays on the curator's side), ``file`` (``images/<name>.png``), ``width``, ``height``, ``source_width``,
    ``source_height``, ``n_bytes``, ``sha256``.
    """
    settings = settings or AuditSettings()
    rows: list[dict] = [{} for _ in paths]
    todo = []
    for i, p in enumerate(paths):
        if p is None or p != p or str(p) == "":
            rows[i] = {"ok": False, "reason": "no image path", "error": "no image path"}
        else:
            todo.append(i)
    items = [(str(paths[i]), str(outdir / f"{names[i]}.png"), int(max_side)) for i in todo]
    for n_done, o in enumerate(imap(release_one, items, workers=settings.workers, engine=settings.engine,
                                    address=settings.address, ordered=False), 1):
        i = todo[o.index]
        if o.ok:
            rows[i] = {"ok": True, "reason": None, "error": None, "file": f"images/{names[i]}.png", **o.value}
        else:
            rows[i] = {"ok": False, "reason": failure_reason(o.failure.error, o.failure.message),
                       "error": str(o.failure)}
        if progress is not None:
            progress(n_done, len(items))
    out = pd.DataFrame(rows, columns=["ok", "reason", "error", "file", "width", "height", "source_width",
                                      "source_height", "n_bytes", "sha256"])
    out["ok"] = out["ok"].astype(bool)
    for c in ("width", "height", "source_width", "source_height", "n_bytes"):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype("Int64")
    return out


def png_info(data: bytes) -> tuple[int, int, list[str]]:
    """``(width, height, chunk types)`` of PNG bytes, read from the chunks (nothing decoded)."""
    if not data.startswith(PNG_SIGNATURE) or len(data) < 33:
        raise InputFileError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    types, pos = [], len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        types.append(ctype.decode("latin-1"))
        pos += 12 + length
    return int(width), int(height), types


@dataclass
class Readback:
    """What :func:`check_release` found: ``checks`` (one row per check: ``check``, ``passed``, ``n_problems``,
    ``detail``) and ``problems`` (``check``, ``where``, ``detail``; no original value is ever written)."""

    checks: pd.DataFrame
    problems: pd.DataFrame
    n_files: int
    n_weak_ids: int = 0

    @property
    def passed(self) -> bool:
        return bool(self.checks["passed"].all())


def _tokens(text: str) -> set[str]:
    words = _WORDS.findall(text)
    return set(words) | {p for w in words for p in w.split(".")}


def cells_holding(cells: pd.Series, words: set[str]) -> int:
    """How many cells are one of ``words`` or hold one as a word (split at white space and punctuation other
    than ``-``, ``_`` and ``.``, and then at dots too); vectorised over the cells."""
    if not words or not len(cells):
        return 0
    cells = cells.astype(str).reset_index(drop=True)
    hit = cells.isin(words)
    tokens = cells.str.findall(_WORDS.pattern).explode().dropna()
    parts = tokens.str.split(".").explode()
    hit[tokens.index[tokens.isin(words).to_numpy()]] = True
    hit[parts.index[parts.isin(words).to_numpy()]] = True
    return int(hit.sum())


def check_release(release_dir: str | Path, originals: Iterable[str], *, max_side: int = DEFAULT_MAX_SIDE) -> Readback:
    """Reopen a release folder and check that nothing it must not hold is in it (docs/METHODS.md §13.10).

    Checks: every image is a PNG with no ``eXIf``, ``tEXt``, ``zTXt``, ``iTXt`` or ``tIME`` chunk and no side
    over ``max_side``; ``manifest.csv`` lists exactly the image files, with their sizes and SHA-256; no table
    has a location column; no original id or file name (``originals``) is a table cell, a word of a cell or a
    word of a file name in the folder. Numeric ids shorter than :data:`MIN_NUMERIC_ID` digits are looked for in
    file names only.
    """
    root = Path(release_dir)
    strong, weak = set(), set()
    for v in originals:
        v = str(v)
        if not v:
            continue
        (weak if v.isdigit() and len(v) < MIN_NUMERIC_ID else strong).add(v)
    problems: list[dict] = []
    files = sorted(p for p in root.rglob("*") if p.is_file())
    images = {p.relative_to(root).as_posix(): p for p in files if p.relative_to(root).parts[0] == "images"}
    seen: dict[str, tuple] = {}
    for rel, p in images.items():
        data = p.read_bytes()
        try:
            w, h, types = png_info(data)
        except InputFileError:
            problems.append({"check": "image metadata", "where": rel, "detail": "not a PNG written by the release"})
            continue
        bad = sorted({t for t in types if t.encode("latin-1") in PNG_DROP})
        if bad:
            problems.append({"check": "image metadata", "where": rel, "detail": f"metadata chunks {', '.join(bad)}"})
        if max(w, h) > max_side:
            problems.append({"check": "image size", "where": rel, "detail": f"{w} x {h} is over {max_side} px"})
        seen[rel] = (w, h, hashlib.sha256(data).hexdigest())
    manifest = root / "manifest.csv"
    listed = pd.read_csv(manifest, dtype=str, keep_default_na=False) if manifest.is_file() else None
    if listed is None:
        if images:
            problems.append({"check": "manifest", "where": "manifest.csv", "detail": "missing"})
    else:
        for r in listed.itertuples(index=False):
            got = seen.get(r.file)
            if got is None:
                problems.append({"check": "manifest", "where": r.file, "detail": "listed but not a PNG in the release"})
            elif (str(got[0]), str(got[1]), got[2]) != (r.width, r.height, r.sha256):
                problems.append({"check": "manifest", "where": r.file, "detail": "size or SHA-256 differs"})
        for rel in sorted(set(images) - set(listed["file"])):
            problems.append({"check": "manifest", "where": rel, "detail": "image not listed"})
    for p in files:
        rel = p.relative_to(root).as_posix()
        if (strong | weak) & _tokens(rel):
            problems.append({"check": "original ids", "where": "file name", "detail": "a file name holds an original "
                                                                                       "id or file name"})
        if p.suffix.lower() != ".csv":
            continue
        table = pd.read_csv(p, dtype=str, keep_default_na=False)
        for c in table.columns:
            if is_location_column(c):
                problems.append({"check": "location columns", "where": f"{rel}: {c}", "detail": "location column"})
            if (strong | weak) & _tokens(str(c)):
                problems.append({"check": "original ids", "where": f"{rel}: header", "detail": "a column name holds an original id"})
            n = cells_holding(table[c], strong)
            if n:
                problems.append({"check": "original ids", "where": f"{rel}: {c}",
                                 "detail": f"{n} cell{'s' if n > 1 else ''} hold an original id or file name"})
    prob = pd.DataFrame(problems, columns=["check", "where", "detail"])
    names = ["image metadata", "image size", "manifest", "location columns", "original ids"]
    what = {"image metadata": "no EXIF/GPS/XMP/text chunk in any image", "image size": f"no side over {max_side} px",
            "manifest": "manifest.csv matches the image files", "location columns": "no location column in any table",
            "original ids": "no original id or file name in a table or a file name"}
    checks = pd.DataFrame({"check": names, "passed": [not (prob["check"] == n).any() for n in names],
                           "n_problems": [int((prob["check"] == n).sum()) for n in names],
                           "detail": [what[n] for n in names]})
    return Readback(checks, prob, len(files), len(weak))

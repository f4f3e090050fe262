"""Image quality checks before release: readability, resolution, duplicates, metadata (docs/METHODS.md §13.7).

:func:`audit_images` decodes every image fully (in the engine pool), flags unreadable or truncated files,
images below a resolution floor, exact duplicates (same SHA-256 of the bytes), near duplicates (DCT perceptual
hashes within a Hamming distance, :func:`fairvision.stats.hamming.near_duplicate_pairs`), duplicates across
splits (train vs test), and files carrying EXIF, GPS, XMP or comments. :func:`strip_metadata` writes copies
without that metadata: JPEG and PNG byte-wise (segments and chunks are dropped, the compressed pixels are copied
unchanged), other formats by decoding and writing again.

The per-image results (decoding, size, perceptual hash, metadata flags) are kept in the results store (stage
``image_qa``) under the file's SHA-256 and a hash of this code, the Pillow version and the package version, so a
second run decodes nothing; the resolution floor and the Hamming threshold are applied afterwards, so changing
them reuses the store.
"""

from __future__ import annotations

import functools
import importlib.metadata
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.stats.hamming import near_duplicate_pairs
from fairvision.vision.phash import hash_hex, inspect_image_file, reencode_without_metadata

#: Default resolution floor: the shorter side in pixels. 256 keeps a face of a typical portrait at about
#: 100 pixels, the smallest that face models and FHIBE's 512 aligned crops (x5 upsampling) are still fit for.
DEFAULT_MIN_SIDE = 256
#: Default near-duplicate threshold (bits of 64): a re-encoded (JPEG q70) and resized copy of a portrait is at
#: distance 0-2, distinct photos of the bundled 602 portraits and faces at 12 or more (docs/METHODS.md §13.7).
DEFAULT_HAMMING = 6

#: JPEG markers kept by the byte-wise strip: APP0 (JFIF), APP2 only when it holds an ICC profile, APP14 (Adobe
#: colour transform); every other APPn (EXIF, XMP, IPTC, maker data) and COM are dropped.
JPEG_APP0, JPEG_APP2, JPEG_APP14 = 0xE0, 0xE2, 0xEE
#: PNG chunks dropped by the byte-wise strip (the rest, including iCCP, sRGB, gAMA, pHYs, are kept); an
#: orientation other than 1 comes back as a one-tag eXIf chunk.
PNG_DROP = {b"eXIf", b"tEXt", b"zTXt", b"iTXt", b"tIME"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: results-store stage of the per-image checks
STAGE = "image_qa"
#: bump when a change here changes stored per-image checks
CACHE_VERSION = 2  # 2: has_gps also from an XMP packet's GPSLatitude / GPSLongitude
#: source files that shape a stored per-image check
SIGNATURE_SOURCES = ("vision/phash.py",)


@dataclass
class QAResult:
    """Per-image checks and the duplicate pairs of :func:`audit_images`."""

    images: pd.DataFrame
    exact_duplicates: pd.DataFrame
    near_duplicates: pd.DataFrame
    params: dict = field(default_factory=dict)
    stripped: pd.DataFrame | None = None
    #: images whose checks were read from the results store
    n_from_cache: int = 0

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``."""
        im = self.images
        nd = self.near_duplicates
        return {
            "n_images": float(len(im)),
            "n_unreadable": float((~im["readable"]).sum()),
            "n_low_resolution": float(im["low_resolution"].sum()),
            "n_exact_duplicate_groups": float(self.exact_duplicates["group"].nunique()) if len(self.exact_duplicates) else 0.0,
            "n_exact_duplicates": float(im["exact_duplicate"].sum()),
            "n_near_duplicate_pairs": float(len(nd)),
            "n_cross_split_duplicates": float(nd["cross_split"].sum()) if "cross_split" in nd else 0.0,
            "n_with_exif": float(im["has_exif"].sum()),
            "n_with_gps": float(im["has_gps"].sum()),
            "n_with_metadata": float(im["has_metadata"].sum()),
        }


def audit_images(
    data: pd.DataFrame,
    *,
    split_col: str | None = None,
    min_side: int = DEFAULT_MIN_SIDE,
    hamming: int = DEFAULT_HAMMING,
    workers: int = 1,
    engine: str = "local",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    store: ResultsStore | None = None,
    subject_col: str | None = "subject_id",
) -> QAResult:
    """Check every image of a table (docs/METHODS.md §13.7).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id`` and ``image_path``; ``split_col`` when given.
    split_col : str, optional
        Column of the split (``train``/``test``...): near duplicates whose members are in different splits are
        counted as cross-split duplicates (a test image whose twin is in the training set).
    min_side : int
        Resolution floor: images whose shorter side is below it are flagged (256).
    hamming : int
        Largest Hamming distance between perceptual hashes counted as a near duplicate (6 of 64 bits).
    workers, engine, address
        Per-image work on :func:`fairvision.engine.imap`.
    progress : callable, optional
        ``progress(done, total)`` (images found in the store count at once).
    store : ResultsStore, optional
        Results store: files checked before (same bytes, code and Pillow version) are read from stage
        ``image_qa``, new checks are appended; ``min_side`` and ``hamming`` are not part of the key. None: no
        store. Files that cannot be read are never stored.
    subject_col : str, optional
        Subject column of ``data``, recorded with the stored rows (``fairvision store forget --subject``).

    Returns
    -------
    QAResult
        ``images``: one row per image (``readable``, ``error``, ``width``, ``height``, ``format``, ``n_bytes``,
        ``sha256``, ``phash`` (hex), metadata flags, ``low_resolution``, ``exact_duplicate``,
        ``near_duplicate``); ``exact_duplicates``: groups of identical files; ``near_duplicates``: pairs
        (``sample_id_a``, ``sample_id_b``, ``distance``, ``exact``, splits and ``cross_split``).
    """
    for col in (SAMPLE_ID, IMAGE_PATH):
        if col not in data.columns:
            raise ColumnError(f"the sample table needs a {col} column")
    if split_col is not None and split_col not in data.columns:
        raise ColumnError(f"no split column {split_col!r}; columns are {', '.join(map(str, data.columns))}")
    if int(min_side) < 1:
        raise FairvisionError(f"--min-side must be at least 1, got {min_side}")
    if not 0 <= int(hamming) <= 32:
        raise FairvisionError(f"--hamming must be between 0 and 32 bits, got {hamming}")
    paths = [None if p is None or p != p else str(p) for p in data[IMAGE_PATH]]
    rows: list[dict | None] = [None] * len(paths)
    todo = [(i, p) for i, p in enumerate(paths) if p is not None]
    total = len(todo)
    ids = data[SAMPLE_ID].astype(str).tolist()
    subjects = data[subject_col].tolist() if subject_col is not None and subject_col in data.columns else None
    keys: dict[int, str] = {}
    contents: dict[int, str] = {}
    phash = qa_params_hash() if store is not None else None
    n_cached = 0
    if store is not None:
        for i, p in todo:
            c = file_sha256(p)
            if c is not None:
                contents[i], keys[i] = c, row_key(c, phash)
        hits = store.get_many(STAGE, keys.values())
        for i, k in keys.items():
            hit = hits.get(k)
            if hit is None:
                continue
            known = hit.pop("_subjects", set())
            subj = _subject(subjects, i)
            if subj is not None and subj not in known:  # attribute it, for forget --subject
                store.put(STAGE, k, hit, content_hash=contents[i], params_hash=phash, sample_id=ids[i],
                          subject_id=subj, image_path=paths[i])
            rows[i] = _from_stored(hit)
        todo = [(i, p) for i, p in todo if rows[i] is None]
        n_cached = total - len(todo)
        if progress is not None and n_cached:
            progress(n_cached, total)
    try:
        for done, o in enumerate(imap(inspect_image_file, [p for _, p in todo], workers=workers, engine=engine,
                                      address=address, ordered=False), n_cached + 1):
            i = todo[o.index][0]
            rows[i] = o.value if o.ok else {"readable": False, "error": str(o.failure)}
            # only results of the bytes themselves: a file that vanished or cannot be opened is not stored
            if store is not None and o.ok and i in keys and o.value.get("sha256") == contents[i]:
                store.put(STAGE, keys[i], _to_stored(o.value), content_hash=contents[i], params_hash=phash,
                          sample_id=ids[i], subject_id=_subject(subjects, i), image_path=paths[i])
            if progress is not None:
                progress(done, total)
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    rows = [r if r is not None else {"readable": False, "error": "no image path"} for r in rows]
    im = pd.DataFrame(rows)
    im.insert(0, SAMPLE_ID, data[SAMPLE_ID].astype(str).to_numpy())
    im.insert(1, IMAGE_PATH, paths)
    if split_col is not None:
        im.insert(2, "split", data[split_col].to_numpy())
    for c in ("n_bytes", "sha256", "format", "width", "height", "phash"):  # absent when every check failed
        if c not in im.columns:
            im[c] = None
    for c in ("has_exif", "has_gps", "has_xmp", "has_icc", "has_comment"):
        im[c] = im.get(c, False)
        im[c] = im[c].fillna(False).astype(bool)
    im["readable"] = im["readable"].fillna(False).astype(bool)
    for c in ("width", "height", "n_bytes"):  # whole numbers also when some file is unreadable (nullable ints)
        im[c] = pd.to_numeric(im[c], errors="coerce").astype("Int64")
    short = np.fmin(im["width"].astype("float64"), im["height"].astype("float64"))
    im["low_resolution"] = (im["readable"] & (short < int(min_side))).fillna(False).astype(bool)
    im["has_metadata"] = im["has_exif"] | im["has_gps"] | im["has_xmp"] | im["has_comment"]

    # exact duplicates: the same bytes
    sha = im["sha256"] if "sha256" in im else pd.Series([None] * len(im))
    dup = sha.notna() & sha.map(sha.value_counts()).fillna(0).gt(1)
    im["exact_duplicate"] = dup.to_numpy()
    exact = im.loc[dup, [SAMPLE_ID, IMAGE_PATH, "sha256"] + (["split"] if split_col else [])].copy()
    exact["group"] = pd.factorize(exact["sha256"])[0] + 1 if len(exact) else []
    exact = exact.sort_values(["group", SAMPLE_ID]).reset_index(drop=True)

    # near duplicates: perceptual hashes within the threshold (identical files included, at distance 0)
    ok = np.flatnonzero(im["readable"].to_numpy() & im["phash"].notna().to_numpy()) if "phash" in im else np.zeros(0, int)
    hashes = np.array([int(v) for v in im["phash"].iloc[ok]], dtype=np.uint64) if len(ok) else np.zeros(0, np.uint64)
    splits = im["split"].iloc[ok].to_numpy() if split_col is not None else None
    pairs = near_duplicate_pairs(hashes, int(hamming), splits=splits)
    a, b = ok[pairs["i"].to_numpy()], ok[pairs["j"].to_numpy()]
    near = pd.DataFrame({"sample_id_a": im[SAMPLE_ID].to_numpy()[a], "sample_id_b": im[SAMPLE_ID].to_numpy()[b],
                         "distance": pairs["distance"].to_numpy(),
                         "exact": (sha.to_numpy()[a] == sha.to_numpy()[b]) if len(a) else np.zeros(0, bool),
                         "path_a": np.asarray(paths, dtype=object)[a], "path_b": np.asarray(paths, dtype=object)[b]})
    if split_col is not None:
        near["split_a"] = pairs["split_i"].to_numpy()
        near["split_b"] = pairs["split_j"].to_numpy()
        near["cross_split"] = pairs["cross_split"].to_numpy().astype(bool)
    else:
        near["cross_split"] = np.zeros(len(near), dtype=bool)
    flagged = np.zeros(len(im), dtype=bool)
    flagged[a] = True
    flagged[b] = True
    im["near_duplicate"] = flagged
    if "phash" in im:
        im["phash"] = [hash_hex(v) if v is not None and v == v else None for v in im["phash"]]
    params = {"min_side": int(min_side), "hamming": int(hamming), "split_col": split_col}
    return QAResult(im, exact, near, params, n_from_cache=n_cached)


def split_from_folder(data: pd.DataFrame, root: str | Path, split_col: str = "split") -> pd.DataFrame:
    """Add the split of each image of a folder source from its first subfolder (docs/METHODS.md §13.7).

    ``root/train/a.jpg`` is in split ``train``, ``root/test/x/b.jpg`` in ``test``; an image directly in ``root``
    has no split (missing). Used by ``curate qa FOLDER --split-col NAME`` when the folder's table has no column
    ``NAME``. Raises :class:`~fairvision.errors.FairvisionError` when no image is in a subfolder.
    """
    root = Path(root)
    splits = []
    for p in data[IMAGE_PATH]:
        try:
            parts = Path(str(p)).relative_to(root).parts
        except ValueError:
            parts = ()
        splits.append(parts[0] if len(parts) > 1 else None)
    if not any(s is not None for s in splits):
        raise FairvisionError(f"{root}: --split-col {split_col}: no subfolders to take the split from (put the "
                              f"images in {root}/train/, {root}/test/ ..., or give a table with a {split_col} column)")
    out = data.copy()
    out[split_col] = pd.Series(splits, index=out.index, dtype=object)
    return out


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source that shapes a stored per-image check."""
    return source_signature(SIGNATURE_SOURCES)


def qa_params_hash() -> str:
    """The results-store ``params_hash`` of the per-image checks: this code, the Pillow and package versions."""
    try:
        pil = importlib.metadata.version("pillow")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        pil = None
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "pillow": pil})


def _subject(subjects: list | None, i: int) -> str | None:
    if subjects is None or subjects[i] is None or pd.isna(subjects[i]):
        return None
    return str(subjects[i])


def _to_stored(rec: dict) -> dict:
    """A check as stored: the 64-bit perceptual hash as 16 hex digits (JSON numbers and DuckDB's views stop
    short of unsigned 64-bit)."""
    out = dict(rec)
    if out.get("phash") is not None:
        out["phash"] = hash_hex(out["phash"])
    return out


def _from_stored(rec: dict) -> dict:
    out = dict(rec)
    if out.get("phash") is not None:
        out["phash"] = int(out["phash"], 16)
    return out


def _orientation_tiff(orientation: int) -> bytes:
    """A minimal EXIF (TIFF) block holding only the orientation tag (big-endian, one IFD entry)."""
    return (b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1)
            + struct.pack(">HHIHH", 0x0112, 3, 1, int(orientation), 0) + struct.pack(">I", 0))


def _jpeg_orientation_app1(orientation: int) -> bytes:
    """A minimal APP1 EXIF segment holding only the orientation tag."""
    payload = b"Exif\x00\x00" + _orientation_tiff(orientation)
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def _png_orientation_exif(orientation: int) -> bytes:
    """A PNG ``eXIf`` chunk holding only the orientation tag."""
    body = _orientation_tiff(orientation)
    return struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body) & 0xFFFFFFFF)


def strip_jpeg(data: bytes, *, orientation: int = 1) -> bytes:
    """A JPEG without EXIF, XMP, IPTC, maker segments or comments; the compressed pixels copied unchanged
    (docs/METHODS.md §13.7). Kept: JFIF (APP0), an ICC profile (APP2 ``ICC_PROFILE``), Adobe (APP14), the
    tables, frames and scans; bytes after the end-of-image marker are dropped. An orientation other than 1 is
    kept as a one-tag EXIF segment, so the image still displays upright; it follows the JFIF APP0 segment when
    there is one (JFIF requires APP0 right after the start of image), else the start of image."""
    if data[:2] != b"\xff\xd8":
        raise InputFileError("not a JPEG (no start-of-image marker)")
    out = [b"\xff\xd8"]
    pending = _jpeg_orientation_app1(orientation) if orientation not in (0, 1) else None
    pos, n = 2, len(data)
    while pos < n:
        if data[pos] != 0xFF:
            raise InputFileError(f"corrupt JPEG: no marker at byte {pos}")
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            break
        marker = data[pos]
        pos += 1
        if marker == 0xD9:  # EOI
            out.append(b"\xff\xd9")
            return b"".join(out)
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            if pending is not None:
                out.append(pending)
                pending = None
            out.append(bytes([0xFF, marker]))
            continue
        if pos + 2 > n:
            raise InputFileError("corrupt JPEG: truncated segment")
        length = struct.unpack(">H", data[pos:pos + 2])[0]
        seg = data[pos - 2:pos + length]
        body = data[pos + 2:pos + length]
        keep = not (0xE0 <= marker <= 0xEF or marker == 0xFE)
        keep |= marker == JPEG_APP0 or marker == JPEG_APP14 or (marker == JPEG_APP2 and body.startswith(b"ICC_PROFILE\x00"))
        if keep:
            if pending is not None and marker != JPEG_APP0:
                out.append(pending)  # no JFIF segment first: the orientation right after the start of image
                pending = None
            out.append(seg)
            if pending is not None:
                out.append(pending)  # after the JFIF APP0 segment
                pending = None
        pos += length
        if marker == 0xDA:  # start of scan: copy the entropy-coded data up to the next real marker
            end = pos
            while True:
                end = data.find(b"\xff", end)
                if end < 0 or end + 1 >= n:
                    end = n
                    break
                nxt = data[end + 1]
                if nxt == 0x00 or 0xD0 <= nxt <= 0xD7 or nxt == 0xFF:
                    end += 1 if nxt == 0xFF else 2
                    continue
                break
            out.append(data[pos:end])
            pos = end
    raise InputFileError("corrupt JPEG: no end-of-image marker")


def strip_png(data: bytes, *, orientation: int = 1) -> bytes:
    """A PNG without eXIf, tEXt, zTXt, iTXt and tIME chunks; every other chunk copied unchanged
    (docs/METHODS.md §13.7). Bytes after IEND are dropped. An orientation other than 1 is kept as a one-tag
    ``eXIf`` chunk right after IHDR (before the image data, as the PNG specification requires), as
    :func:`strip_jpeg` does, so the image still displays upright."""
    if not data.startswith(PNG_SIGNATURE):
        raise InputFileError("not a PNG (no signature)")
    out = [PNG_SIGNATURE]
    pending = _png_orientation_exif(orientation) if orientation not in (0, 1) else None
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise InputFileError("corrupt PNG: truncated chunk")
        if ctype not in PNG_DROP:
            out.append(data[pos:end])
        if pending is not None and ctype == b"IHDR":
            out.append(pending)
            pending = None
        pos = end
        if ctype == b"IEND":
            return b"".join(out)
    raise InputFileError("corrupt PNG: no IEND chunk")


def strip_metadata(src: str | Path, dst: str | Path) -> str:
    """Write a copy of an image without EXIF (GPS included), XMP, IPTC or comments (docs/METHODS.md §13.7).

    JPEG and PNG: byte-wise (:func:`strip_jpeg`, :func:`strip_png`), pixels identical, an orientation other
    than 1 kept as a one-tag EXIF block. Other formats: decoded
    and written again (:func:`fairvision.vision.phash.reencode_without_metadata`). An ICC profile is kept.
    The copy is written atomically. Returns how: ``"jpeg segments"``, ``"png chunks"`` or a re-encoding note.
    """
    src, dst = Path(src), Path(dst)
    try:
        data = src.read_bytes()
    except OSError as exc:
        raise InputFileError(f"{src}: cannot read: {exc.strerror or exc}") from None
    try:
        if data[:2] == b"\xff\xd8":
            orientation = int(inspect_orientation(src))
            clean, how = strip_jpeg(data, orientation=orientation), "jpeg segments"
        elif data.startswith(PNG_SIGNATURE):
            clean, how = strip_png(data, orientation=int(inspect_orientation(src))), "png chunks"
        else:
            clean, how = reencode_without_metadata(data)
    except InputFileError as exc:
        raise InputFileError(f"{src}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a decoder failure on a file names the file
        raise InputFileError(f"{src}: cannot strip metadata: {' '.join(str(exc).split())}") from None
    atomic_write_bytes(dst, clean)
    return how


def inspect_orientation(path: str | Path) -> int:
    """The EXIF orientation of an image file (1 when absent or unreadable)."""
    info = inspect_image_file(path)
    return int(info.get("orientation") or 1)


def strip_all(images: pd.DataFrame, outdir: str | Path) -> pd.DataFrame:
    """Strip the metadata of every readable image into ``outdir`` (same file names; when a name is taken, the
    ``sample_id`` as the stem, numbered ``-2``, ``-3`` ... while that is taken too, so no copy overwrites another).
    Returns ``sample_id``, ``source``, ``stripped_path``, ``method``."""
    outdir = Path(outdir)
    rows, used = [], set()
    for r in images.loc[images["readable"], [SAMPLE_ID, IMAGE_PATH]].itertuples(index=False):
        src = Path(r[1])
        name = src.name
        if name in used:
            stem = str(r[0]).replace("/", "_").replace("\\", "_")
            name, k = f"{stem}{src.suffix}", 1
            while name in used:  # the sample id's name may be taken too: number it until free
                k += 1
                name = f"{stem}-{k}{src.suffix}"
        used.add(name)
        how = strip_metadata(src, outdir / name)
        rows.append({SAMPLE_ID: r[0], "source": str(src), "stripped_path": str(outdir / name), "method": how})
    return pd.DataFrame(rows, columns=[SAMPLE_ID, "source", "stripped_path", "method"])

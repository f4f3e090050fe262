"""Image quality checks before release: readability, resolution, duplicates, metadata (docs/METHODS.md §13.7).

:func:`audit_images` decodes every image fully (in the engine pool), flags unreadable or truncated files,
images below a resolution floor, exact duplicates (same SHA-256 of the bytes), near duplicates (DCT perceptual
hashes within a Hamming distance, :func:`fairvision.stats.hamming.near_duplicate_pairs`), duplicates across
splits (train vs test), and files carrying EXIF, GPS, XMP or comments. :func:`strip_metadata` writes copies
without that metadata: JPEG and PNG byte-wise (:mod:`fairvision.io.metadata`: segments and chunks are dropped,
the compressed pixels are copied unchanged), other formats by decoding and writing again.

The per-image results (decoding, size, perceptual hash, metadata flags) are kept in the results store (stage
``image_qa``) under the file's SHA-256 and a hash of this code, the Pillow version and the package version, so a
second run decodes nothing; the resolution floor and the Hamming threshold are applied afterwards, so changing
them reuses the store.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.exif import capture_time
from fairvision.io.metadata import PNG_SIGNATURE, strip_jpeg, strip_png
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.io.validate import require_columns
from fairvision.stats.hamming import near_duplicate_pairs
from fairvision.vision.phash import hash_hex, inspect_image_file, reencode_without_metadata

#: Default resolution floor: the shorter side in pixels. 256 keeps a face of a typical portrait at about
#: 100 pixels, the smallest that face models and FHIBE's 512 aligned crops (x5 upsampling) are still fit for.
DEFAULT_MIN_SIDE = 256
#: Default near-duplicate threshold (bits of 64): a re-encoded (JPEG q70) and resized copy of a portrait is at
#: distance 0-2, distinct photos of the bundled 602 portraits and faces at 12 or more (docs/METHODS.md §13.7).
DEFAULT_HAMMING = 6

#: results-store stage of the per-image checks
STAGE = "image_qa"
#: bump when a change here changes stored per-image checks
CACHE_VERSION = 3  # 2: has_gps also from an XMP packet's GPSLatitude / GPSLongitude; 3: datetime_original
#: source files that shape a stored per-image check
SIGNATURE_SOURCES = ("vision/phash.py", "io/exif.py")


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
    settings: AuditSettings | None = None,
    split_col: str | None = None,
    min_side: int = DEFAULT_MIN_SIDE,
    hamming: int = DEFAULT_HAMMING,
    progress: Callable[[int, int], None] | None = None,
    store: ResultsStore | None = None,
    subject_col: str | None = "subject_id",
    source: str = "samples",
) -> QAResult:
    """Check every image of a table (docs/METHODS.md §13.7).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id`` and ``image_path``; ``split_col`` when given.
    settings : AuditSettings, optional
        Uses ``workers``, ``engine`` and ``address``: the per-image work runs on :func:`fairvision.engine.imap`.
    split_col : str, optional
        Column of the split (``train``/``test``...): near duplicates whose members are in different splits are
        counted as cross-split duplicates (a test image whose twin is in the training set).
    min_side : int
        Resolution floor: images whose shorter side is below it are flagged (256).
    hamming : int
        Largest Hamming distance between perceptual hashes counted as a near duplicate (6 of 64 bits).
    progress : callable, optional
        ``progress(done, total)`` (images found in the store count at once).
    store : ResultsStore, optional
        Results store: files checked before (same bytes, code and Pillow version) are read from stage
        ``image_qa``, new checks are appended; ``min_side`` and ``hamming`` are not part of the key. None: no
        store. Files that cannot be read are never stored.
    subject_col : str, optional
        Subject column of ``data``, recorded with the stored rows (``fairvision store forget --subject``).
    source : str
        Name of the table in error messages.

    Returns
    -------
    QAResult
        ``images``: one row per image (``readable``, ``error``, ``width``, ``height``, ``format``, ``n_bytes``,
        ``sha256``, ``phash`` (hex), metadata flags, ``datetime_original`` (EXIF capture time, ISO 8601 or
        None), ``low_resolution``, ``exact_duplicate``,
        ``near_duplicate``); ``exact_duplicates``: groups of identical files; ``near_duplicates``: pairs
        (``sample_id_a``, ``sample_id_b``, ``distance``, ``exact``, splits and ``cross_split``).
    """
    settings = settings or DEFAULT_SETTINGS
    require_columns(data, (SAMPLE_ID, IMAGE_PATH), source=source)
    if split_col is not None:
        require_columns(data, [split_col], source=source, what="split column")
    if int(min_side) < 1:
        raise ParameterError("min_side", f"must be at least 1, got {min_side}")
    if not 0 <= int(hamming) <= 32:
        raise ParameterError("hamming", f"must be between 0 and 32 bits, got {hamming}")
    paths = [None if p is None or p != p else str(p) for p in data[IMAGE_PATH]]
    subjects = data[subject_col].tolist() if subject_col is not None and subject_col in data.columns else None
    rows, n_cached = _check_files(data[SAMPLE_ID].astype(str).tolist(), paths, subjects, settings, store, progress)
    im = _image_table(data, rows, paths, split_col, int(min_side))
    sha = im["sha256"] if "sha256" in im else pd.Series([None] * len(im))
    exact = _exact_duplicates(im, sha, split_col)
    near = _near_duplicates(im, sha, paths, int(hamming), split_col)
    if "phash" in im:
        im["phash"] = [hash_hex(v) if v is not None and v == v else None for v in im["phash"]]
    params = {"min_side": int(min_side), "hamming": int(hamming), "split_col": split_col}
    return QAResult(im, exact, near, params, n_from_cache=n_cached)


def _check_files(ids: list[str], paths: list[str | None], subjects: list | None, settings: AuditSettings,
                 store: ResultsStore | None, progress) -> tuple[list[dict], int]:
    """The per-image checks (:func:`fairvision.vision.phash.inspect_image_file`) of every path, read from the
    store where it has them; returns them, in order, and how many came from the store."""
    rows: list[dict | None] = [None] * len(paths)
    todo = [(i, p) for i, p in enumerate(paths) if p is not None]
    total = len(todo)
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
        # the module's inspect_image_file at call time (tests replace it), bound into the worker's function
        check = functools.partial(inspect_qa_file, inspect=inspect_image_file)
        for done, o in enumerate(imap(check, [p for _, p in todo], workers=settings.workers,
                                      engine=settings.engine, address=settings.address, ordered=False), n_cached + 1):
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
    return [r if r is not None else {"readable": False, "error": "no image path"} for r in rows], n_cached


def inspect_qa_file(path, inspect: Callable = inspect_image_file) -> dict:
    """The per-image checks of one file (docs/METHODS.md §13.7): ``inspect(path)``
    (:func:`fairvision.vision.phash.inspect_image_file`) plus ``datetime_original``, the EXIF capture time as
    ISO 8601 local time (:func:`fairvision.io.exif.capture_time`; None without EXIF), for the time between a
    subject's photos (docs/METHODS.md §13.8)."""
    out = inspect(path)
    out["datetime_original"] = capture_time(path) if out.get("readable") and out.get("has_exif") else None
    return out


def _image_table(data: pd.DataFrame, rows: list[dict], paths: list[str | None], split_col: str | None,
                 min_side: int) -> pd.DataFrame:
    """One row per image: the checks, with whole-number sizes, boolean flags and ``low_resolution``."""
    im = pd.DataFrame(rows)
    im.insert(0, SAMPLE_ID, data[SAMPLE_ID].astype(str).to_numpy())
    im.insert(1, IMAGE_PATH, paths)
    if split_col is not None:
        im.insert(2, "split", data[split_col].to_numpy())
    # absent when every check failed
    for c in ("n_bytes", "sha256", "format", "width", "height", "phash", "datetime_original"):
        if c not in im.columns:
            im[c] = None
    for c in ("has_exif", "has_gps", "has_xmp", "has_icc", "has_comment"):
        im[c] = im.get(c, False)
        im[c] = im[c].fillna(False).astype(bool)
    im["readable"] = im["readable"].fillna(False).astype(bool)
    for c in ("width", "height", "n_bytes"):  # whole numbers also when some file is unreadable (nullable ints)
        im[c] = pd.to_numeric(im[c], errors="coerce").astype("Int64")
    short = np.fmin(im["width"].astype("float64"), im["height"].astype("float64"))
    im["low_resolution"] = (im["readable"] & (short < min_side)).fillna(False).astype(bool)
    im["has_metadata"] = im["has_exif"] | im["has_gps"] | im["has_xmp"] | im["has_comment"]
    return im


def _exact_duplicates(im: pd.DataFrame, sha: pd.Series, split_col: str | None) -> pd.DataFrame:
    """Groups of files with the same bytes; flags ``exact_duplicate`` in ``im``."""
    dup = sha.notna() & sha.map(sha.value_counts()).fillna(0).gt(1)
    im["exact_duplicate"] = dup.to_numpy()
    exact = im.loc[dup, [SAMPLE_ID, IMAGE_PATH, "sha256"] + (["split"] if split_col else [])].copy()
    exact["group"] = pd.factorize(exact["sha256"])[0] + 1 if len(exact) else []
    return exact.sort_values(["group", SAMPLE_ID]).reset_index(drop=True)


def _near_duplicates(im: pd.DataFrame, sha: pd.Series, paths: list[str | None], hamming: int,
                     split_col: str | None) -> pd.DataFrame:
    """Pairs of images whose perceptual hashes are within ``hamming`` bits (identical files included, at
    distance 0); flags ``near_duplicate`` in ``im``."""
    ok = np.flatnonzero(im["readable"].to_numpy() & im["phash"].notna().to_numpy()) if "phash" in im else np.zeros(0, int)
    hashes = np.array([int(v) for v in im["phash"].iloc[ok]], dtype=np.uint64) if len(ok) else np.zeros(0, np.uint64)
    splits = im["split"].iloc[ok].to_numpy() if split_col is not None else None
    pairs = near_duplicate_pairs(hashes, hamming, splits=splits)
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
    return near


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
        raise FairvisionError(f"{root}: split column {split_col!r}: no subfolders to take the split from (put the "
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

"""Report section of the image quality checks and the derived face sets (docs/METHODS.md §13.6 and §13.7).

No images are shown: duplicates and problem files are listed by sample id and file name, never as thumbnails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report.findings import count_of, verb


def common_root(paths) -> str | None:
    """The deepest folder holding every path (None when there are none or they share no folder)."""
    dirs = sorted({os.path.dirname(os.path.abspath(str(p))) for p in paths if p is not None and p == p})
    if not dirs:
        return None
    try:
        return os.path.commonpath(dirs)
    except ValueError:  # different drives
        return None


def _names(df: pd.DataFrame, cols: list[str], root: str | None = None) -> pd.DataFrame:
    """Paths relative to the images' common folder instead of full paths (the report may travel; the full paths
    are in images.csv): ``train/a.jpg`` and ``test/a.jpg`` stay apart."""
    out = df.copy()
    for c in cols:
        if c in out:
            out[c] = [_rel(p, root) if p is not None and p == p else None for p in out[c]]
    return out


def _rel(p, root: str | None) -> str:
    if root is not None:
        try:
            return Path(os.path.relpath(os.path.abspath(str(p)), root)).as_posix()
        except ValueError:
            pass
    return Path(str(p)).name


def qa_section(result, *, conditions: list[dict] | None = None, title: str = "Image quality checks") -> Section:
    """Turn a :class:`fairvision.audits.curation.qa.QAResult` into a report section."""
    p = result.params
    sec = Section("curation_qa", title, intro=(
        "Every image is decoded completely (a truncated file is an error, not grey pixels). Flagged: unreadable "
        f"files, a shorter side below {p['min_side']} pixels, exact duplicates (identical bytes, SHA-256), near "
        f"duplicates (64-bit DCT perceptual hashes at most {p['hamming']} bits apart), near duplicates across "
        "splits, and EXIF / GPS / XMP / comment metadata (docs/METHODS.md §13.7)."))
    q = result.quantities()
    sec.metrics("key figures", {
        "images": int(q["n_images"]), "unreadable": int(q["n_unreadable"]), "low resolution": int(q["n_low_resolution"]),
        "exact duplicate groups": int(q["n_exact_duplicate_groups"]), "near-duplicate pairs": int(q["n_near_duplicate_pairs"]),
        "cross-split pairs": int(q["n_cross_split_duplicates"]), "with EXIF": int(q["n_with_exif"]),
        "with GPS": int(q["n_with_gps"])})
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    im = result.images
    root = common_root(im["image_path"])
    bad = im.loc[~im["readable"], ["sample_id", "image_path", "error"]]
    if len(bad):
        sec.table("unreadable", _names(bad, ["image_path"], root), "Files that do not decode completely.")
    low = im.loc[im["low_resolution"], ["sample_id", "image_path", "width", "height"]]
    if len(low):
        sec.table("low resolution", _names(low, ["image_path"], root), f"Images whose shorter side is below {p['min_side']} pixels.")
    nd = result.near_duplicates
    if len(nd):
        cols = [c for c in ("sample_id_a", "sample_id_b", "distance", "exact", "split_a", "split_b", "cross_split",
                            "path_a", "path_b") if c in nd]
        sec.table("near duplicates", _names(nd[cols], ["path_a", "path_b"], root),
                  "Pairs of images whose perceptual hashes are within the threshold (distance in bits; exact: identical "
                  "bytes).", highlight="cross_split")
    if len(result.exact_duplicates):
        sec.table("exact duplicates", _names(result.exact_duplicates, ["image_path"], root), "Groups of byte-identical files.")
    meta = im.loc[im["has_metadata"], ["sample_id", "image_path", "has_exif", "has_gps", "has_xmp", "has_comment"]]
    if len(meta):
        sec.table("metadata", _names(meta, ["image_path"], root), "Files carrying metadata that may identify a person, a "
                  "place or a device; `--strip-metadata-to DIR` writes copies without it.")
    if result.stripped is not None:
        sec.table("stripped", _names(_names(result.stripped, ["source"], root), ["stripped_path"],
                                          common_root(result.stripped["stripped_path"])), "Copies written without metadata.")
    sec.table("images", _names(im, ["image_path"], root), "Every image with its checks.", max_rows=50)
    _findings(sec, q, p)
    return sec


def _findings(sec: Section, q: dict, p: dict) -> None:
    n = int(q["n_cross_split_duplicates"])
    if n:
        sec.finding(f"{count_of(n, 'near-duplicate pair')} {verb(n, 'spans', 'span')} two splits (a test image whose "
                    "twin is in another split)", "high", target="near duplicates", quantity="n_cross_split_duplicates",
                    value=n)
    for key, word, tail, sev, target in (("n_unreadable", "unreadable file", "", "high", "unreadable"),
                                         ("n_with_gps", "image", " with GPS coordinates", "high", "metadata"),
                                         ("n_near_duplicate_pairs", "near-duplicate pair", "", "medium", "near duplicates"),
                                         ("n_low_resolution", "image", f" below {p['min_side']} pixels", "medium",
                                          "low resolution"),
                                         ("n_with_exif", "image", " with EXIF metadata", "medium", "metadata")):
        k = int(q[key])
        if k:
            sec.finding(count_of(k, word) + tail, sev, target=target, quantity=key, value=k)
    if not any(int(q[k]) for k in ("n_unreadable", "n_near_duplicate_pairs", "n_low_resolution", "n_with_metadata")):
        sec.finding("Every image decodes, meets the resolution floor, has no near duplicate and carries no metadata",
                    "info", target="key figures")

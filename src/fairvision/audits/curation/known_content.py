"""Known-content matching, and near duplicates across subjects (docs/METHODS.md §13.9).

:func:`audit_known_content` matches the perceptual hash of every image of a collection against a list of known
hashes (images that must not be in a dataset: a block list, material already published, a list of known
abusive images' perceptual hashes where one's organisation has access to one) with the multi-index Hamming
search of :func:`fairvision.stats.hamming.query_matches`, and reports every match with its distance.
:func:`subject_duplicates` sorts the collection's own near-duplicate pairs into pairs within one subject (the
same person photographed twice: expected, reported) and pairs across subjects (one photo delivered as two
people: flagged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, ParameterError
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, read_table
from fairvision.stats.hamming import query_matches

#: columns a known-hash table may hold its hashes in, first match used
HASH_COLUMNS = ("phash", "hash", "perceptual_hash")


def parse_hex_hashes(values: pd.Series, *, column: str = "phash", source: str = "table",
                     ids=None) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hashes written as up to 16 hex digits (an optional ``0x``), parsed in one pass: the cells are
    checked with one regular expression (pandas string methods), zero-padded to 16 digits, joined and read by
    ``bytes.fromhex`` as big-endian ``uint64`` (docs/METHODS.md §13.9). Returns the hashes of the rows that
    have one and which rows those are; a cell that is not a hash is a
    :class:`~fairvision.errors.ColumnError` naming the column and row."""
    present = values.notna().to_numpy()
    text = values[present].astype(str).str.strip().str.lower().str.replace(r"^0x", "", regex=True)
    bad = ~text.str.fullmatch(r"[0-9a-f]{1,16}").to_numpy(dtype=bool)
    if bad.any():
        r = int(np.flatnonzero(present)[np.flatnonzero(bad)[0]])
        who = f"sample {ids[r]!r}" if ids is not None else f"row {r + 1}"
        raise ColumnError(f"{source}: column {column!r}, {who}: expected a 64-bit hash as up to 16 hex digits, "
                          f"got {values.iloc[r]!r}")
    raw = bytes.fromhex("".join(text.str.zfill(16)))
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64), present


def read_known_hashes(path: str | Path) -> pd.DataFrame:
    """A known-hash list (CSV, Parquet, ... through :func:`fairvision.io.tables.read_table`): a hash column
    (``phash``, ``hash`` or ``perceptual_hash``: 16 hex digits, the hash of :mod:`fairvision.vision.phash`) and
    optional ``label`` and ``source`` columns. Returns ``hash`` (uint64), ``hash_hex``, ``label``, ``source``."""
    df = read_table(path)
    col = next((c for c in HASH_COLUMNS if c in df.columns), None)
    if col is None:
        raise ColumnError(f"{path}: no hash column ({', '.join(HASH_COLUMNS)}; 16 hex digits each)")
    hashes, present = parse_hex_hashes(df[col], column=col, source=str(path))
    out = pd.DataFrame({"hash": hashes, "hash_hex": [f"{int(h):016x}" for h in hashes]})
    for c in ("label", "source"):
        out[c] = df[c].to_numpy()[present] if c in df.columns else None
    return out


@dataclass
class KnownContentResult:
    """Matches of a collection against known hashes (docs/METHODS.md §13.9)."""

    matches: pd.DataFrame
    n_images: int
    n_hashed: int
    n_known: int
    params: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.matches

    def quantities(self) -> dict[str, float]:
        """``n_known_matches`` (images matching a known hash) and ``n_known_match_pairs`` (image-hash pairs)."""
        m = self.matches
        return {"n_known_matches": float(m[SAMPLE_ID].nunique()) if len(m) else 0.0,
                "n_known_match_pairs": float(len(m))}


def audit_known_content(images: pd.DataFrame, known: pd.DataFrame, *, hamming: int = 6) -> KnownContentResult:
    """Match every image's perceptual hash against known hashes (docs/METHODS.md §13.9).

    Parameters
    ----------
    images : pandas.DataFrame
        ``sample_id``, ``phash`` (16 hex digits; missing for an unreadable image), ``image_path`` when present:
        ``QAResult.images`` of :func:`fairvision.audits.curation.qa.audit_images`.
    known : pandas.DataFrame
        ``hash`` (uint64), ``hash_hex``, ``label``, ``source`` (:func:`read_known_hashes`).
    hamming : int
        Largest Hamming distance counted as a match, 0..32 (default 6, the near-duplicate default).

    Returns
    -------
    KnownContentResult
        ``matches``: ``sample_id``, ``image_path``, ``phash``, ``known_hash``, ``distance``, ``label``,
        ``source``, sorted by sample and distance.
    """
    if not 0 <= int(hamming) <= 32:
        raise ParameterError("hamming", f"must be between 0 and 32 bits, got {hamming}")
    ids = images[SAMPLE_ID].astype(str).to_numpy()
    q, present = parse_hex_hashes(images["phash"], column="phash", source="images", ids=ids)
    pairs = query_matches(q, known["hash"].to_numpy(dtype=np.uint64), int(hamming))
    rows = np.flatnonzero(present)[pairs["query"].to_numpy()]
    ref = pairs["reference"].to_numpy()
    matches = pd.DataFrame({SAMPLE_ID: ids[rows],
                            IMAGE_PATH: images[IMAGE_PATH].to_numpy()[rows] if IMAGE_PATH in images else None,
                            "phash": images["phash"].to_numpy()[rows], "known_hash": known["hash_hex"].to_numpy()[ref],
                            "distance": pairs["distance"].to_numpy(), "label": known["label"].to_numpy()[ref],
                            "source": known["source"].to_numpy()[ref]})
    return KnownContentResult(matches, len(images), int(present.sum()), len(known), {"hamming": int(hamming)})


def subject_duplicates(near_duplicates: pd.DataFrame, data: pd.DataFrame, subject_column: str | None) -> pd.DataFrame:
    """The collection's near-duplicate pairs with their subjects (docs/METHODS.md §13.9): ``same_subject``
    (expected: one person's photos; reported, not flagged) and ``cross_subject`` (two subject ids on one
    photo: flagged). A pair with a missing subject id is neither. Empty without a subject column."""
    cols = ["sample_id_a", "sample_id_b", "distance", "subject_a", "subject_b", "same_subject", "cross_subject"]
    if near_duplicates is None or not subject_column or subject_column not in data.columns:
        return pd.DataFrame(columns=cols)
    subj = pd.Series(data[subject_column].to_numpy(), index=data[SAMPLE_ID].astype(str).to_numpy())
    subj = subj[~subj.index.duplicated()]
    out = near_duplicates[["sample_id_a", "sample_id_b", "distance"]].copy()
    out["subject_a"] = subj.reindex(out["sample_id_a"].astype(str)).to_numpy()
    out["subject_b"] = subj.reindex(out["sample_id_b"].astype(str)).to_numpy()
    known = out["subject_a"].notna() & out["subject_b"].notna()
    same = (out["subject_a"].astype(str) == out["subject_b"].astype(str)).to_numpy()
    out["same_subject"] = known.to_numpy() & same
    out["cross_subject"] = known.to_numpy() & ~same
    return out[cols].reset_index(drop=True)


def cross_subject_distance(duplicates: pd.DataFrame, ids) -> np.ndarray:
    """For each sample id in ``ids``: the distance in bits to its nearest near duplicate under another subject
    (pairs of :func:`subject_duplicates` with ``cross_subject``), inf when it has none."""
    ids = np.asarray(ids, dtype=object).astype(str)
    dist = np.full(len(ids), np.inf)
    cross = duplicates[duplicates["cross_subject"].astype(bool)]
    where = pd.Index(ids)
    for side in ("sample_id_a", "sample_id_b"):
        pos = where.get_indexer(cross[side].astype(str))
        np.minimum.at(dist, pos[pos >= 0], cross["distance"].to_numpy(dtype=float)[pos >= 0])
    return dist

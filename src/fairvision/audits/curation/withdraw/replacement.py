"""Replacement proposals for withdrawn images: the optimal match from a candidate pool (docs/METHODS.md §13.5).

:func:`match_replacements` assigns candidates to withdrawn images one-to-one under a lexicographic cost (primary
attributes, then secondary ones, then numeric features); :func:`propose_replacements` applies it to a pool file,
leaving out candidates already in the dataset or of a withdrawn subject; :func:`group_table` counts images per
group before and after.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment

from fairvision.audits.curation.withdraw.journal import subject_hash
from fairvision.audits.curation.withdraw.rewrite import clean_value, id_strings, is_missing
from fairvision.errors import ColumnError
from fairvision.groups import group_counts
from fairvision.io.store import sha256_hex
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID, read_raw_table, read_table
from fairvision.io.validate import require_columns
from fairvision.schema import Attribute

#: default primary match attributes (docs/METHODS.md §13.5): for each slot the first column present is used
DEFAULT_MATCH = (("pronoun", "gender", "sex"), ("age_group", "age"),
                 ("ancestry", "ancestry_region", "regional_ancestry", "region", "race"))


@dataclass
class Replacement:
    """A replacement proposal: which pool image replaces which withdrawn image (docs/METHODS.md §13.5)."""

    pool_path: Path
    pool_sha256: str
    match: list[str]
    secondary: list[str]
    features: list[str]
    pairs: pd.DataFrame                 # withdrawn_sample_id, sample_id (candidate), mismatches, cost, attributes
    chosen: pd.DataFrame                # the chosen pool rows (normalised columns)
    chosen_raw: list[dict]              # the same rows as raw records of the pool file
    n_candidates: int
    n_eligible: int
    excluded: dict[str, int] = field(default_factory=dict)


def resolve_match(data: pd.DataFrame, match: Sequence[str] | None, *, source: str = "samples") -> list[str]:
    """The primary match attributes: ``match`` (each must be a column of ``data``), or by default, for each
    slot of :data:`DEFAULT_MATCH` (pronoun, age group, ancestry), the first of its names that is a column."""
    if match:
        require_columns(data, match, source=source, why=" to match on")
        return list(dict.fromkeys(match))
    found = [next((c for c in slot if c in data.columns), None) for slot in DEFAULT_MATCH]
    found = [c for c in found if c]
    if not found:
        raise ColumnError(f"{source}: none of the default match columns ({', '.join(s for slot in DEFAULT_MATCH for s in slot)}); "
                          "say which columns to match on (match)")
    return found


def _mismatch(a: pd.DataFrame, b: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """Number of columns in ``cols`` on which row i of ``a`` and row j of ``b`` differ (missing = missing)."""
    out = np.zeros((len(a), len(b)), np.int64)
    for c in cols:
        both = pd.concat([a[c], b[c]], ignore_index=True).astype("string").fillna("\0missing")
        codes, _ = pd.factorize(both)
        out += codes[: len(a), None] != codes[None, len(a):]
    return out


def _feature_distance(a: pd.DataFrame, b: pd.DataFrame, cols: Sequence[str]) -> np.ndarray:
    """RMS over ``cols`` of the range-scaled absolute difference, in [0, 1]; a missing value counts as 1."""
    if not cols:
        return np.zeros((len(a), len(b)))
    sq = np.zeros((len(a), len(b)))
    for c in cols:
        x = pd.to_numeric(a[c], errors="coerce").to_numpy(float)
        y = pd.to_numeric(b[c], errors="coerce").to_numpy(float)
        allv = np.concatenate([x, y])
        span = np.nanmax(allv) - np.nanmin(allv) if np.isfinite(allv).any() else 0.0
        d = np.abs(x[:, None] - y[None, :]) / span if span > 0 else np.zeros((len(x), len(y)))
        sq += np.where(np.isnan(d), 1.0, np.minimum(d, 1.0)) ** 2
    return np.sqrt(sq / len(cols))


def match_replacements(withdrawn: pd.DataFrame, candidates: pd.DataFrame, match: Sequence[str],
                       secondary: Sequence[str] = (), features: Sequence[str] = ()) -> pd.DataFrame:
    """The optimal one-to-one assignment of candidates to withdrawn images (docs/METHODS.md §13.5).

    The cost of giving candidate j to withdrawn image i is lexicographic: first the number of ``match``
    attributes on which they differ, then the number of ``secondary`` ones, then the RMS range-scaled distance
    of the numeric ``features``; the weights make any primary mismatch outweigh every secondary difference of
    the whole assignment, and those every feature distance. The total is minimised with the Hungarian method
    (:func:`scipy.optimize.linear_sum_assignment`), each candidate used at most once.

    Parameters
    ----------
    withdrawn, candidates : pandas.DataFrame
        One row per image, with every column named in ``match``, ``secondary`` and ``features``.
    match, secondary, features : sequence of str

    Returns
    -------
    pandas.DataFrame
        One row per withdrawn image, in its order: ``candidate`` (row position in ``candidates``, -1 when there
        are fewer candidates than withdrawn images), ``primary_mismatches``, ``secondary_mismatches``,
        ``distance`` and ``cost``.
    """
    n, m = len(withdrawn), len(candidates)
    out = pd.DataFrame({"candidate": np.full(n, -1, np.int64), "primary_mismatches": np.zeros(n, np.int64),
                        "secondary_mismatches": np.zeros(n, np.int64), "distance": np.full(n, np.nan),
                        "cost": np.full(n, np.nan)})
    if n == 0 or m == 0:
        return out
    p = _mismatch(withdrawn, candidates, match)
    s = _mismatch(withdrawn, candidates, secondary)
    d = _feature_distance(withdrawn, candidates, features)
    w2 = float(n + 1) if features else 1.0          # > total feature distance of any assignment (<= n)
    w1 = n * len(secondary) * w2 + (n if features else 0) + 1.0  # > total secondary part of any assignment
    cost = w1 * p + w2 * s + d
    rows, cols = linear_sum_assignment(cost)
    out.loc[rows, "candidate"] = cols
    out.loc[rows, "primary_mismatches"] = p[rows, cols]
    out.loc[rows, "secondary_mismatches"] = s[rows, cols]
    out.loc[rows, "distance"] = d[rows, cols]
    out.loc[rows, "cost"] = cost[rows, cols]
    return out


def _natural(s: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", s)]


def group_table(frames: dict[str, pd.DataFrame], attrs: Sequence[str]) -> pd.DataFrame:
    """Image counts of every combination of ``attrs`` in each frame (one column per frame), every value seen
    in any frame declared so empty cells show (docs/METHODS.md §13.5)."""
    schema_attrs = []
    for a in attrs:
        seen = set()
        for f in frames.values():
            if a in f.columns:
                seen |= {str(v) for v in f[a].dropna().tolist()}
        first = next(iter(frames.values()))
        if isinstance(first.get(a), pd.Series) and isinstance(first[a].dtype, pd.CategoricalDtype):
            cats = [str(c) for c in first[a].cat.categories]
            cats += sorted(seen - set(cats), key=_natural)
        else:
            cats = sorted(seen, key=_natural)
        schema_attrs.append(Attribute(a, categories=cats, missing="keep", allow_unknown=True))
    cols = {}
    index = None
    for name, f in frames.items():
        if len(f):
            t = group_counts(f.reset_index(drop=True), schema_attrs)["n_samples"]
            index = t.index if index is None else index
            cols[name] = t
        else:
            cols[name] = None
    if index is None:
        return pd.DataFrame(columns=list(frames))
    out = pd.DataFrame({k: (v.reindex(index, fill_value=0) if v is not None else pd.Series(0, index=index))
                        for k, v in cols.items()})
    return out.fillna(0).astype(np.int64)


def _raw_columns(raw: pd.DataFrame, norm: pd.DataFrame) -> dict[str, str]:
    """Normalised column name -> raw column name (read_table renames in place and may insert sample_id first)."""
    rc, nc = list(raw.columns), list(norm.columns)
    if len(nc) == len(rc) + 1 and nc[0] == SAMPLE_ID:
        nc = nc[1:]
    return dict(zip(nc, rc)) if len(nc) == len(rc) else {c: c for c in rc}


def records_for(raw: pd.DataFrame, data: pd.DataFrame, rep: Replacement, samples: Path) -> list[dict]:
    """The chosen pool rows as raw records of the samples file (its column names; image paths relative to the
    samples table's folder when inside it)."""
    to_raw = _raw_columns(raw, data)
    out = []
    for (_, row), rec in zip(rep.chosen.iterrows(), rep.chosen_raw):
        new = {}
        for norm_col, raw_col in to_raw.items():
            if norm_col == IMAGE_PATH and not is_missing(row.get(IMAGE_PATH)):
                p = Path(str(row[IMAGE_PATH]))
                with contextlib.suppress(ValueError):
                    p = p.resolve().relative_to(samples.parent.resolve())
                new[raw_col] = str(p)
            elif norm_col in row.index and not is_missing(row.get(norm_col)):
                new[raw_col] = clean_value(row[norm_col])
            else:
                new[raw_col] = clean_value(rec.get(raw_col))
        if SAMPLE_ID not in to_raw:  # the id is the key of a {id: {...}} JSON, or the image stem
            new[SAMPLE_ID] = row[SAMPLE_ID]
        out.append(new)
    return out


def propose_replacements(pool: Path, data: pd.DataFrame, hit: np.ndarray, match: Sequence[str] | None,
                         secondary: Sequence[str], features: Sequence[str], wanted: set[str],
                         log_entries: list[dict]) -> Replacement:
    """The replacement proposal for the rows ``hit`` of ``data`` from the candidate table ``pool``
    (docs/METHODS.md §13.5): candidates already in the dataset, or of a withdrawn subject (``wanted``, or a subject
    hash of an earlier withdrawal in ``log_entries``), are left out; the rest go to :func:`match_replacements`."""
    cand = read_table(pool)
    pool_raw = read_raw_table(pool)
    source = str(data.attrs.get("source", "samples"))
    match = resolve_match(data, match, source=source)
    for cols in (match, list(secondary), list(features)):
        for c in cols:
            require_columns(data, [c], source=source)
            require_columns(cand, [c], source=str(pool), why=" (needed to match candidates)")
    ok, excluded = _eligible(cand, data, wanted, log_entries)
    eligible = cand.loc[ok].reset_index(drop=True)
    eligible_raw = pool_raw.loc[ok].reset_index(drop=True)
    withdrawn = data.loc[hit].reset_index(drop=True)
    assign = match_replacements(withdrawn, eligible, match, secondary, features)
    j = assign["candidate"].to_numpy()
    has = j >= 0
    pairs = pd.DataFrame({"withdrawn_sample_id": withdrawn[SAMPLE_ID].astype(str).to_numpy(),
                          SAMPLE_ID: [eligible[SAMPLE_ID].iloc[k] if k >= 0 else None for k in j]})
    for c in match:
        pairs[f"withdrawn_{c}"] = withdrawn[c].astype(object).to_numpy()
        pairs[c] = [eligible[c].iloc[k] if k >= 0 else None for k in j]
    for c in ("primary_mismatches", "secondary_mismatches", "distance", "cost"):
        pairs[c] = assign[c].to_numpy()
    chosen = eligible.iloc[j[has]].reset_index(drop=True)
    chosen_raw = [eligible_raw.iloc[k].to_dict() for k in j[has]]
    return Replacement(pool, sha256_hex(pool.read_bytes()), match, list(secondary), list(features), pairs, chosen,
                       chosen_raw, len(cand), int(ok.sum()), excluded)


def _eligible(cand: pd.DataFrame, data: pd.DataFrame, wanted: set[str],
              log_entries: list[dict]) -> tuple[np.ndarray, dict[str, int]]:
    """Which candidates may replace a withdrawn image, and how many were left out for which reason."""
    ok = np.ones(len(cand), bool)
    excluded = {}
    in_data = np.isin(cand[SAMPLE_ID].astype(str).to_numpy(), data[SAMPLE_ID].astype(str).to_numpy())
    if IMAGE_PATH in cand.columns and IMAGE_PATH in data.columns:
        in_data |= np.isin(cand[IMAGE_PATH].astype(str).to_numpy(), data[IMAGE_PATH].astype(str).to_numpy())
    excluded["already_in_dataset"] = int((in_data & ok).sum())
    ok &= ~in_data
    cand_subj = id_strings(cand[SUBJECT_ID]) if SUBJECT_ID in cand.columns else cand[SAMPLE_ID].to_numpy(object)
    withdrawn_subj = np.isin(cand_subj, list(wanted))
    logged = {h for e in log_entries for h in (e.get("subject_sha256") or ())}
    if logged:
        withdrawn_subj |= np.array([subject_hash(s) in logged for s in cand_subj], bool)
    excluded["withdrawn_subject"] = int((withdrawn_subj & ok).sum())
    ok &= ~withdrawn_subj
    return ok, excluded

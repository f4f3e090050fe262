"""Groups and their intersections, with sample and subject counts.

A *group* is one value of an attribute (``gender = Female``); an
*intersection* is one combination of values of k attributes
(``gender = Female × age = 60+``). All declared combinations are listed, so an
empty intersectional group is reported rather than silently missing (FHIBE
paper, Table 1; METHODS.md section 4).

Counting is vectorised: each attribute becomes integer codes
(:meth:`fairvision.schema.Attribute.membership`), a k-way intersection is the
mixed-radix combination of its codes, and counts are ``numpy.bincount``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError
from fairvision.io.tables import SUBJECT_ID
from fairvision.schema import Attribute, Membership, Schema


@dataclass
class Combined:
    """Membership of rows in the cells of a k-way intersection."""

    names: tuple[str, ...]
    levels: tuple[list[str], ...]
    rows: np.ndarray
    codes: np.ndarray

    @property
    def n_cells(self) -> int:
        return int(np.prod([len(lv) for lv in self.levels], dtype=np.int64))

    def index(self) -> pd.Index:
        if len(self.names) == 1:
            return pd.Index(self.levels[0], name=self.names[0])
        return pd.MultiIndex.from_product(self.levels, names=list(self.names))


def resolve_attributes(attrs: Iterable[str | Attribute], schema: Schema | None = None) -> list[Attribute]:
    schema = schema or Schema()
    out = []
    for a in attrs:
        out.append(a if isinstance(a, Attribute) else schema.get(a))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise FairvisionError(f"attribute listed twice: {', '.join(names)}")
    return out


def memberships(df: pd.DataFrame, attrs: Iterable[str | Attribute], schema: Schema | None = None, *, source: str | None = None) -> list[Membership]:
    """Group membership of every row for each attribute (see :meth:`Attribute.membership`)."""
    source = source or df.attrs.get("source", "table")
    return [a.membership(df, source=source) for a in resolve_attributes(attrs, schema)]


def _dense(m: Membership, n: int) -> np.ndarray:
    c = np.full(n, -1, dtype=np.int64)
    c[m.rows] = m.codes
    return c


def combine(ms: Sequence[Membership], n_rows: int) -> Combined:
    """Intersect memberships: row r is in cell (c1, ..., ck) if it is in each ci."""
    if not ms:
        raise FairvisionError("no attributes given")
    rows = ms[0].rows
    codes = ms[0].codes
    single = ms[0].single_valued
    for m in ms[1:]:
        g = m.n_groups
        if single and m.single_valued:
            a = np.full(n_rows, -1, dtype=np.int64)
            a[rows] = codes
            b = _dense(m, n_rows)
            ok = (a >= 0) & (b >= 0)
            rows = np.flatnonzero(ok)
            codes = a[ok] * g + b[ok]
        else:
            left = pd.DataFrame({"r": rows, "a": codes})
            right = pd.DataFrame({"r": m.rows, "b": m.codes})
            j = left.merge(right, on="r", how="inner", sort=True)
            rows = j["r"].to_numpy(np.int64)
            codes = j["a"].to_numpy(np.int64) * g + j["b"].to_numpy(np.int64)
            single = False
    return Combined(tuple(m.name for m in ms), tuple(list(m.categories) for m in ms), rows, codes)


def subject_codes(df: pd.DataFrame, subject_col: str | None, *, source: str = "table") -> np.ndarray | None:
    """Integer subject code per row (None when there is no subject column)."""
    if subject_col is None:
        return None
    if subject_col not in df.columns:
        raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are {', '.join(map(str, df.columns))}")
    s = df[subject_col]
    miss = s.isna().to_numpy()
    if miss.any():
        raise ColumnError(f"{source}: row {int(np.flatnonzero(miss)[0]) + 1}: empty {subject_col!r}")
    codes, _ = pd.factorize(s, sort=False)
    return codes.astype(np.int64)


def cell_counts(comb: Combined, subjects: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Samples and (if given) distinct subjects per cell."""
    n = comb.n_cells
    n_samples = np.bincount(comb.codes, minlength=n)
    if subjects is None:
        return n_samples, None
    pair = subjects[comb.rows] * np.int64(n) + comb.codes
    uniq = pd.unique(pair)  # hash-based: faster than sorting for large tables
    n_subjects = np.bincount(uniq % n, minlength=n)
    return n_samples, n_subjects


def group_counts(
    df: pd.DataFrame,
    attrs: Sequence[str | Attribute] | str | Attribute,
    *,
    schema: Schema | None = None,
    subject_col: str | None = None,
) -> pd.DataFrame:
    """Sample (and subject) counts for every declared group or intersection of ``attrs``.

    Returns
    -------
    pandas.DataFrame
        Indexed by group (a MultiIndex for intersections, every declared
        combination present), with columns ``n_samples``, ``share`` (of all
        group memberships) and, with a subject column, ``n_subjects`` and
        ``subject_share``.
    """
    if isinstance(attrs, (str, Attribute)):
        attrs = [attrs]
    source = df.attrs.get("source", "table")
    if subject_col is None and SUBJECT_ID in df.columns:
        subject_col = SUBJECT_ID
    ms = memberships(df, attrs, schema, source=source)
    comb = combine(ms, len(df))
    subj = subject_codes(df, subject_col, source=source)
    return _frame(comb, *cell_counts(comb, subj))


def _frame(comb: Combined, n_samples: np.ndarray, n_subjects: np.ndarray | None) -> pd.DataFrame:
    total = n_samples.sum()
    out = pd.DataFrame({"n_samples": n_samples}, index=comb.index())
    out["share"] = n_samples / total if total else np.nan
    if n_subjects is not None:
        out["n_subjects"] = n_subjects
        st = n_subjects.sum()
        out["subject_share"] = n_subjects / st if st else np.nan
    return out


def cross_counts(df: pd.DataFrame, x: str, y: str, *, schema: Schema | None = None) -> pd.DataFrame:
    """Contingency table of sample counts: index = values of ``x``, columns = values of ``y``."""
    if x == y:
        raise FairvisionError(f"cross table of {x!r} with itself")
    ms = memberships(df, [x, y], schema)
    comb = combine(ms, len(df))
    counts = np.bincount(comb.codes, minlength=comb.n_cells).reshape(len(comb.levels[0]), len(comb.levels[1]))
    out = pd.DataFrame(counts.astype(float), index=pd.Index(comb.levels[0], name=ms[0].name), columns=pd.Index(comb.levels[1], name=ms[1].name))
    return out


def intersection_tables(
    df: pd.DataFrame,
    attrs: Sequence[str | Attribute],
    *,
    schema: Schema | None = None,
    max_k: int = 2,
    subject_col: str | None = None,
) -> dict[tuple[str, ...], pd.DataFrame]:
    """Counts for every set of 1..``max_k`` attributes (each a :func:`group_counts` frame)."""
    source = df.attrs.get("source", "table")
    if subject_col is None and SUBJECT_ID in df.columns:
        subject_col = SUBJECT_ID
    ms = memberships(df, attrs, schema, source=source)
    subj = subject_codes(df, subject_col, source=source)
    if max_k < 1:
        raise FairvisionError("max_k must be at least 1")
    out: dict[tuple[str, ...], pd.DataFrame] = {}
    for k in range(1, min(max_k, len(ms)) + 1):
        for combo in combinations(ms, k):
            comb = combine(list(combo), len(df))
            out[comb.names] = _frame(comb, *cell_counts(comb, subj))
    return out


def intersection_summary(tables: Mapping[tuple[str, ...], pd.DataFrame], *, min_subjects: int = 10, max_listed: int = 20) -> pd.DataFrame:
    """One row per attribute set in the layout of the FHIBE paper's Table 1.

    Columns: ``attributes``, ``k``, ``n_groups`` (declared combinations),
    ``n_nonempty``, ``median_images`` / ``max_images`` / ``min_images`` over
    non-empty groups, ``n_small`` (non-empty groups with fewer than
    ``min_subjects`` subjects, too small to judge) and ``empty_groups`` (the
    declared-but-empty ones, first ``max_listed``).
    """
    rows = []
    for names, t in tables.items():
        n = t["n_samples"].to_numpy()
        nonempty = n > 0
        size_col = "n_subjects" if "n_subjects" in t.columns else "n_samples"
        small = nonempty & (t[size_col].to_numpy() < min_subjects)
        empty_labels = [_label(i) for i, e in zip(t.index, ~nonempty) if e]
        rows.append({
            "attributes": " × ".join(names),
            "k": len(names),
            "n_groups": int(len(t)),
            "n_nonempty": int(nonempty.sum()),
            "median_images": float(np.median(n[nonempty])) if nonempty.any() else np.nan,
            "max_images": int(n[nonempty].max()) if nonempty.any() else 0,
            "min_images": int(n[nonempty].min()) if nonempty.any() else 0,
            "n_small": int(small.sum()),
            "n_empty": int((~nonempty).sum()),
            "empty_groups": "; ".join(empty_labels[:max_listed]) + (f"; … (+{len(empty_labels) - max_listed})" if len(empty_labels) > max_listed else ""),
        })
    return pd.DataFrame(rows).set_index("attributes")


def _label(idx) -> str:
    return " × ".join(map(str, idx)) if isinstance(idx, tuple) else str(idx)

"""Attribute schema: declared categories, order, binning, multi-valued attributes and hierarchies.

FHIBE-style annotations need more than a column of strings (docs/METHODS.md §3.1;
FHIBE Methods, "Annotation categories and guidelines"):

* **declared categories** so that a group with no members is still reported;
* **ordered categories** (age groups) so tables and plots keep their order;
* **numeric binning** (age in years -> age groups 18-29, 30-39, 40-49, 50-59, 60+);
* **multi-valued attributes**: a subject who gave several values (e.g. several
  pronouns or ancestries) counts in each of them;
* **hierarchies**: a broad value (ancestry region "Africa") counts in every
  subregion under it.

The central operation is :meth:`Attribute.membership`, which turns a column into
long-form ``(row, code)`` pairs: one pair per group a row belongs to. Every
count in :mod:`fairvision.groups` is a ``bincount`` over those codes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, InputFileError

MISSING_LABEL = "(missing)"

#: FHIBE's age groups (docs/METHODS.md §3.1).
FHIBE_AGE_BINS = (18, 30, 40, 50, 60, math.inf)
FHIBE_AGE_LABELS = ("18-29", "30-39", "40-49", "50-59", "60+")

#: a numeric column with more distinct values than this, used as a category without bins, is refused:
#: it is almost surely continuous (an age in years, a score), and 500 one-person groups audit nothing
MAX_NUMERIC_CATEGORIES = 20

#: FairFace's age groups, in order.
FAIRFACE_AGE_GROUPS = ("0-2", "3-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70+")


@dataclass
class Membership:
    """Long-form group membership of one attribute: row ``rows[i]`` is in group ``codes[i]``."""

    name: str
    rows: np.ndarray
    codes: np.ndarray
    categories: list[str]
    ordered: bool = False
    single_valued: bool = True

    @property
    def n_groups(self) -> int:
        return len(self.categories)


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    try:
        return bool(pd.isna(v)) if np.isscalar(v) else False
    except (TypeError, ValueError):
        return False


@dataclass
class Attribute:
    """How one annotation column defines groups.

    Parameters
    ----------
    name : str
        Name of the attribute (and, unless ``column`` is given, of its column).
    categories : sequence of str, optional
        Declared values, in display order. Declared values with no members are
        still reported (as empty groups). Default: the values seen, sorted.
    ordered : bool
        The categories have a natural order (age groups).
    multi : bool
        Multi-valued: a cell holds several values (a list, or a string joined
        by ``sep``) and the row counts in each.
    sep : str
        Separator for multi-valued string cells.
    hierarchy : mapping of str to list of str, optional
        Broad value -> the values under it. A row with a broad value counts in
        every value under it. Nested hierarchies are flattened to leaves.
    bins, labels : optional
        Bin a numeric column: ``bins`` are edges (left-closed, right-open),
        ``labels`` the group names (default ``"a-b"``).
    column : str, optional
        Source column, when it differs from ``name``.
    missing : {"error", "drop", "keep"}
        What to do with empty cells: stop with an error naming the row, leave
        the row out of this attribute's groups, or count it in a group
        ``"(missing)"``.
    allow_unknown : bool
        Accept values that are not among declared ``categories`` (they are
        appended) instead of stopping with an error.
    """

    name: str
    categories: Sequence[str] | None = None
    ordered: bool = False
    multi: bool = False
    sep: str = "|"
    hierarchy: Mapping[str, Sequence[str]] | None = None
    bins: Sequence[float] | None = None
    labels: Sequence[str] | None = None
    column: str | None = None
    missing: str = "error"
    allow_unknown: bool = False

    def __post_init__(self) -> None:
        if self.missing not in ("error", "drop", "keep"):
            raise FairvisionError(f"attribute {self.name!r}: missing must be 'error', 'drop' or 'keep', not {self.missing!r}")
        if self.bins is not None:
            edges = [float(b) for b in self.bins]
            if len(edges) < 2 or any(b >= a for a, b in zip(edges[1:], edges[:-1])):
                raise FairvisionError(f"attribute {self.name!r}: bins must be at least two increasing edges")
            if self.labels is None:
                self.labels = [_bin_label(lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]
            if len(self.labels) != len(edges) - 1:
                raise FairvisionError(f"attribute {self.name!r}: {len(edges) - 1} bins but {len(self.labels)} labels")
            self.ordered = True
            if self.categories is None:
                self.categories = list(self.labels)
        if self.categories is not None:
            self.categories = [str(c) for c in self.categories]
            if len(set(self.categories)) != len(self.categories):
                raise FairvisionError(f"attribute {self.name!r}: repeated value in categories")
        if self.hierarchy is not None:
            self.hierarchy = {str(k): [str(v) for v in vs] for k, vs in self.hierarchy.items()}

    @property
    def source(self) -> str:
        return self.column or self.name

    # -- hierarchy helpers -------------------------------------------------
    def leaves_of(self, value: str) -> list[str]:
        """All leaf values under ``value`` (itself if it is a leaf)."""
        if not self.hierarchy or value not in self.hierarchy:
            return [value]
        out: list[str] = []
        stack = list(self.hierarchy[value])[::-1]
        seen = {value}
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in self.hierarchy:
                stack.extend(list(self.hierarchy[v])[::-1])
            else:
                out.append(v)
        return out

    def leaf_categories(self) -> list[str] | None:
        if self.categories is not None:
            cats = list(self.categories)
            if self.hierarchy:
                expanded: list[str] = []
                for c in cats:
                    for leaf in self.leaves_of(c):
                        if leaf not in expanded:
                            expanded.append(leaf)
                return expanded
            return cats
        if self.hierarchy:
            leaves: list[str] = []
            for broad in self.hierarchy:
                for leaf in self.leaves_of(broad):
                    if leaf not in leaves:
                        leaves.append(leaf)
            return leaves
        return None

    # -- main operation ----------------------------------------------------
    def membership(self, df: pd.DataFrame, *, source: str = "table") -> Membership:
        """Long-form ``(row, code)`` pairs of group membership for ``df``."""
        col = self.source
        if col not in df.columns:
            raise ColumnError(f"{source}: missing column {col!r} for attribute {self.name!r}; columns are {', '.join(map(str, df.columns))}")
        series = df[col]
        n = len(series)
        if self.bins is not None:
            values = self._binned(series, source)
        else:
            values = series

        if not self.multi and not self.hierarchy:
            self._check_single_valued(values, source)
            if self.bins is None and self.categories is None:
                self._check_not_continuous(values, source)
            return self._single(values, n, source)
        return self._expanded(values, source)

    def _check_single_valued(self, values: pd.Series, source: str) -> None:
        """A list, array or mapping in a cell (a list-valued Parquet column) needs ``multi``."""
        if values.dtype != object:
            return
        nested = np.fromiter((isinstance(v, (list, tuple, set, dict, np.ndarray)) for v in values.to_numpy()),
                             dtype=bool, count=len(values))
        if nested.any():
            row = int(np.flatnonzero(nested)[0])
            raise ColumnError(
                f"{source}: row {row + 1}: column {self.source!r} holds a {type(values.iloc[row]).__name__} "
                f"({values.iloc[row]!r:.60}), not one value; declare it multi-valued (--multi {self.source} or "
                f'"multi": true in a schema) or give one value per cell')

    def _check_not_continuous(self, values: pd.Series, source: str) -> None:
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            return
        n = int(values.nunique(dropna=True))
        if n > MAX_NUMERIC_CATEGORIES:
            raise ColumnError(
                f"{source}: column {self.source!r} has {n} distinct numeric values, too many to be groups; give bins "
                f'in a schema file (e.g. {{"attributes": {{"{self.name}": {{"column": "{self.source}", '
                f'"bins": [...], "labels": [...]}}}}}}) or use a categorical column')

    def _binned(self, series: pd.Series, source: str) -> pd.Series:
        numeric = pd.to_numeric(series, errors="coerce")
        bad = numeric.isna() & series.notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ColumnError(f"{source}: row {row + 1}: column {self.source!r} has non-numeric value {series.iloc[row]!r} (bins need numbers)")
        edges = np.asarray(self.bins, dtype=float)
        x = numeric.to_numpy(dtype=float)
        idx = np.searchsorted(edges, x, side="right") - 1
        outside = ~np.isnan(x) & ((idx < 0) | (idx >= len(edges) - 1))
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise ColumnError(
                f"{source}: row {row + 1}: column {self.source!r} value {x[row]:g} is outside the bins [{edges[0]:g}, {edges[-1]:g})"
            )
        labels = np.asarray(list(self.labels) + [None], dtype=object)
        idx = np.where(np.isnan(x), len(edges) - 1, idx)
        return pd.Series(labels[idx], index=series.index)

    def _resolve_categories(self, seen: Iterable[str], source: str, first_row_of: Mapping[str, int]) -> list[str]:
        declared = self.leaf_categories() if self.categories is not None else None
        seen = list(seen)
        if declared is None:
            cats = self.leaf_categories() or []
            cats += sorted((v for v in seen if v not in cats and v != MISSING_LABEL), key=_natural_key)
        else:
            cats = list(declared)
            known = set(cats)
            if self.hierarchy:
                known |= set(self.hierarchy)
            unknown = [v for v in seen if v not in known and v != MISSING_LABEL]
            if unknown:
                if not self.allow_unknown:
                    v = min(unknown, key=lambda u: first_row_of.get(u, 0))
                    allowed = ", ".join(cats[:12]) + (", ..." if len(cats) > 12 else "")
                    raise ColumnError(
                        f"{source}: row {first_row_of.get(v, 0) + 1}: column {self.source!r} has unknown value {v!r} (declared: {allowed})"
                    )
                cats += sorted(unknown, key=_natural_key)
        if MISSING_LABEL in seen and MISSING_LABEL not in cats:
            cats.append(MISSING_LABEL)
        return cats

    def _missing_mask(self, values: pd.Series) -> np.ndarray:
        """Empty cells: NaN/None/NA, or strings that are blank (checked once per distinct value)."""
        codes, uniques = pd.factorize(values, sort=False, use_na_sentinel=True)
        blank = np.array([isinstance(u, str) and u.strip() == "" for u in uniques], dtype=bool)
        mask = codes < 0
        if blank.any():
            mask |= blank[np.where(codes < 0, 0, codes)] & (codes >= 0)
        return mask

    def _handle_missing(self, values: pd.Series, source: str) -> tuple[pd.Series, np.ndarray]:
        miss = self._missing_mask(values)
        if miss.any():
            if self.missing == "error":
                row = int(np.flatnonzero(miss)[0])
                raise ColumnError(
                    f"{source}: row {row + 1}: column {self.source!r} is empty ({int(miss.sum())} empty cells; "
                    f"use missing='drop' or 'keep', or --missing on the command line)"
                )
            if self.missing == "keep":
                values = values.astype(object).where(~miss, MISSING_LABEL)
                miss = np.zeros(len(values), bool)
        return values, miss

    def _single(self, values: pd.Series, n: int, source: str) -> Membership:
        values, miss = self._handle_missing(values, source)
        keep = ~miss
        kept = values[keep] if not keep.all() else values
        codes_seen, uniques = pd.factorize(kept, sort=False)
        labels = [str(u) for u in uniques]
        first_row = {}
        if len(labels):
            rows_kept = np.flatnonzero(keep)
            _, first_idx = np.unique(codes_seen, return_index=True)
            first_row = {labels[c]: int(rows_kept[i]) for c, i in enumerate(first_idx)}
        cats = self._resolve_categories(list(dict.fromkeys(labels)), source, first_row)
        lookup = {c: i for i, c in enumerate(cats)}
        remap = np.array([lookup[u] for u in labels], dtype=np.int64)
        codes = remap[codes_seen] if len(labels) else np.zeros(0, np.int64)
        rows = np.flatnonzero(keep).astype(np.int64)
        return Membership(self.name, rows, codes.astype(np.int64), cats, self.ordered, single_valued=True)

    def _split(self, v: Any) -> list[str]:
        if isinstance(v, (list, tuple, set, np.ndarray)):
            items = [str(x).strip() for x in v if not _is_missing(x)]
        elif self.multi:
            items = [s.strip() for s in str(v).split(self.sep)]
        else:
            items = [str(v).strip()]
        return [s for s in items if s]

    def _expanded(self, values: pd.Series, source: str) -> Membership:
        arr = values.to_numpy(dtype=object)
        rows: list[int] = []
        vals: list[str] = []
        first_row: dict[str, int] = {}
        for i, v in enumerate(arr):
            is_list = isinstance(v, (list, tuple, set, np.ndarray))
            items = self._split(v) if (is_list or not _is_missing(v)) else []
            if not items:
                if self.missing == "error":
                    raise ColumnError(f"{source}: row {i + 1}: column {self.source!r} is empty (use missing='drop' or 'keep')")
                if self.missing == "drop":
                    continue
                items = [MISSING_LABEL]
            leaves: list[str] = []
            for it in items:
                first_row.setdefault(it, i)
                for leaf in self.leaves_of(it):
                    if leaf not in leaves:
                        leaves.append(leaf)
            for leaf in leaves:
                rows.append(i)
                vals.append(leaf)
                first_row.setdefault(leaf, i)
        seen_items = list(dict.fromkeys(first_row))
        cats = self._resolve_categories(seen_items, source, first_row)
        # broad values are not groups themselves: keep leaves only
        if self.hierarchy:
            cats = [c for c in cats if c not in self.hierarchy]
        lookup = {c: i for i, c in enumerate(cats)}
        codes = np.fromiter((lookup[v] for v in vals), dtype=np.int64, count=len(vals))
        return Membership(self.name, np.asarray(rows, np.int64), codes, cats, self.ordered, single_valued=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        if d.get("bins") is not None:
            d["bins"] = [None if math.isinf(b) else b for b in d["bins"]]
        return {k: v for k, v in d.items() if v not in (None, False) or k == "name"}


def _bin_label(lo: float, hi: float) -> str:
    def fmt(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    if math.isinf(hi):
        return f"{fmt(lo)}+"
    if float(lo).is_integer() and float(hi).is_integer():
        return f"{fmt(lo)}-{fmt(hi - 1)}"
    return f"[{fmt(lo)}, {fmt(hi)})"


def _natural_key(s: str):
    """Sort "3-9" before "10-19": numbers compare as numbers."""
    import re

    parts = re.split(r"(\d+(?:\.\d+)?)", str(s))
    return [(0, float(p)) if i % 2 else (1, p.lower()) for i, p in enumerate(parts) if p != ""]


@dataclass
class Schema:
    """A set of :class:`Attribute` definitions, by name."""

    attributes: dict[str, Attribute] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Attribute:
        try:
            return self.attributes[name]
        except KeyError:
            raise ColumnError(f"schema: no attribute {name!r}; known: {', '.join(self.attributes)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.attributes

    def __iter__(self):
        return iter(self.attributes.values())

    def add(self, attr: Attribute) -> "Schema":
        self.attributes[attr.name] = attr
        return self

    def get(self, name: str, df: pd.DataFrame | None = None, **defaults: Any) -> Attribute:
        """The declared attribute, or a plain one inferred for column ``name``."""
        if name in self.attributes:
            return self.attributes[name]
        attr = Attribute(name, **defaults)
        self.attributes[name] = attr
        return attr

    def declare(self, names: Iterable[str], *, multi: Iterable[str] = (), missing: str = "error") -> "Schema":
        """Make sure every name is an attribute, applying command-line options.

        Undeclared names become plain attributes; ``multi`` marks multi-valued
        ones; a ``missing`` policy other than ``"error"`` overrides the
        declared one.
        """
        multi = set(multi)
        for name in names:
            if name not in self.attributes:
                self.add(Attribute(name, multi=name in multi, missing=missing))
                continue
            if missing != "error":
                self.attributes[name].missing = missing
            if name in multi:
                self.attributes[name].multi = True
        return self

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any], *, source: str = "schema") -> "Schema":
        attrs = spec.get("attributes", spec)
        if not isinstance(attrs, Mapping):
            raise InputFileError(f"{source}: expected an object mapping attribute names to definitions")
        out = cls()
        for name, d in attrs.items():
            d = dict(d or {})
            if "bins" in d and d["bins"] is not None:
                d["bins"] = [math.inf if b in (None, "inf", "Infinity") else float(b) for b in d["bins"]]
            try:
                out.add(Attribute(name=name, **d))
            except TypeError as exc:
                raise InputFileError(f"{source}: attribute {name!r}: {exc}") from None
        return out

    @classmethod
    def from_file(cls, path: str | Path) -> "Schema":
        path = Path(path)
        if not path.exists():
            raise InputFileError(f"{path}: no such file")
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        return cls.from_dict(spec, source=str(path))

    def to_dict(self) -> dict:
        return {"attributes": {a.name: {k: v for k, v in a.to_dict().items() if k != "name"} for a in self}}


def fairface_schema() -> Schema:
    """Schema of the FairFace labels: ordered age groups and two genders."""
    return Schema().add(Attribute("age", categories=FAIRFACE_AGE_GROUPS, ordered=True)).add(
        Attribute("gender", categories=("Female", "Male"))
    )


def fhibe_age_attribute(column: str = "age", name: str = "age_group") -> Attribute:
    """FHIBE's age groups 18-29, 30-39, 40-49, 50-59, 60+ from age in years."""
    return Attribute(name, bins=FHIBE_AGE_BINS, labels=FHIBE_AGE_LABELS, column=column)

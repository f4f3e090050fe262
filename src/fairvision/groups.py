"""Groups and their intersections, with sample and subject counts.

A *group* is one value of an attribute (``gender = Female``); an
*intersection* is one combination of values of k attributes
(``gender = Female × age = 60+``). All declared combinations are listed, so an
empty intersectional group is reported rather than silently missing (FHIBE
paper, Table 1; docs/METHODS.md §3.2).

This module is the one place that builds intersections: :func:`intersections`
yields every set of 1..k attributes as an :class:`Intersection`, and every
audit (dataset counts, model scores, ...) starts from it.

Counting is vectorised: each attribute becomes integer codes
(:meth:`fairvision.schema.Attribute.membership`), a k-way intersection is the
mixed-radix combination of its codes, and counts are ``numpy.bincount``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations, product
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.tables import SUBJECT_ID
from fairvision.io.validate import require_columns
from fairvision.schema import Attribute, Membership, Schema

#: separator of the attribute names and of the values in an intersection's display label
SEP = " × "
#: above this many declared combinations an intersection keeps only its observed cells
MAX_DECLARED_CELLS = 5000


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


@dataclass
class Intersection:
    """Long-form membership of one attribute or k-way intersection: row ``rows[i]`` is in group ``codes[i]``.

    The groups are every declared combination of the attributes' categories
    (``cells is None``; group code = mixed-radix cell number, so empty groups
    are kept), or, when there are more than :data:`MAX_DECLARED_CELLS`
    declared combinations, only the observed ones (group ``c`` is the cell
    ``cells[c]``). See docs/METHODS.md §3.2.

    Attributes
    ----------
    attributes : tuple of str
        Attribute names, in order.
    levels : tuple of list of str
        Declared categories of each attribute.
    rows, codes : numpy.ndarray of int
        Row ``rows[i]`` belongs to group ``codes[i]`` (a row is listed once per
        group for multi-valued attributes).
    cells : numpy.ndarray of int or None
        Mixed-radix cell number of each group when only observed cells are kept.
    """

    attributes: tuple[str, ...]
    levels: tuple[list[str], ...]
    rows: np.ndarray
    codes: np.ndarray
    cells: np.ndarray | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The attribute names (as :attr:`Combined.names`)."""
        return self.attributes

    @property
    def name(self) -> str:
        """``"age × gender"``."""
        return SEP.join(self.attributes)

    @property
    def k(self) -> int:
        return len(self.attributes)

    @property
    def n_cells(self) -> int:
        """Number of groups (declared combinations, or observed ones)."""
        if self.cells is not None:
            return int(self.cells.size)
        return math.prod(len(lv) for lv in self.levels)

    @cached_property
    def labels(self) -> list[tuple]:
        """Label of every group: a tuple of one value per attribute."""
        if self.cells is None:
            return list(product(*self.levels))
        parts = np.unravel_index(self.cells, [len(lv) for lv in self.levels])
        return [tuple(lv[i] for lv, i in zip(self.levels, ix)) for ix in zip(*parts)]

    def display_labels(self) -> np.ndarray:
        """Object array of :func:`group_label` of every group (``"60+ × Female"``)."""
        out = np.empty(self.n_cells, dtype=object)
        out[:] = [group_label(g) for g in self.labels]
        return out

    def index(self) -> pd.Index:
        """Index of the groups (a MultiIndex for k > 1)."""
        if self.cells is None:
            if self.k == 1:
                return pd.Index(self.levels[0], name=self.attributes[0])
            return pd.MultiIndex.from_product(self.levels, names=list(self.attributes))
        labels = self.labels
        if self.k == 1:
            return pd.Index([lab[0] for lab in labels], name=self.attributes[0])
        return pd.MultiIndex.from_tuples(labels, names=list(self.attributes))


def group_label(label) -> str:
    """Display label of a group: ``"20-29 × Male"`` for intersections."""
    if isinstance(label, tuple):
        return SEP.join(map(str, label))
    return str(label)


def resolve_attributes(attrs: Iterable[str | Attribute], schema: Schema | None = None) -> list[Attribute]:
    """Attributes from names (looked up in ``schema``) or :class:`Attribute` objects; no name twice."""
    schema = schema or Schema()
    out = []
    for a in attrs:
        out.append(a if isinstance(a, Attribute) else schema.get(a))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        raise FairvisionError(f"attribute listed twice: {', '.join(names)}")
    return out


def memberships(data: pd.DataFrame, attrs: Iterable[str | Attribute], schema: Schema | None = None, *, source: str | None = None) -> list[Membership]:
    """Group membership of every row for each attribute (see :meth:`Attribute.membership`)."""
    source = source or data.attrs.get("source", "table")
    return [a.membership(data, source=source) for a in resolve_attributes(attrs, schema)]


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


def intersect(ms: Sequence[Membership], n_rows: int, *, max_declared: int | None = MAX_DECLARED_CELLS) -> Intersection:
    """The :class:`Intersection` of some memberships (one attribute set).

    Every declared combination is a group when there are at most
    ``max_declared`` of them (``None``: always); otherwise only the observed
    combinations are (too many declared cells to list).
    """
    comb = combine(ms, n_rows)
    codes = np.asarray(comb.codes, np.int64).ravel()
    if max_declared is None or comb.n_cells <= max_declared:
        return Intersection(comb.names, comb.levels, comb.rows, codes)
    observed, inverse = np.unique(codes, return_inverse=True)
    return Intersection(comb.names, comb.levels, comb.rows, np.asarray(inverse, np.int64).ravel(), observed)


def intersections(
    data: pd.DataFrame,
    attributes: Sequence[str | Attribute],
    max_k: int = 1,
    schema: Schema | None = None,
    *,
    source: str | None = None,
    max_declared: int | None = MAX_DECLARED_CELLS,
) -> list[Intersection]:
    """Every attribute and every intersection of up to ``max_k`` attributes (docs/METHODS.md §3.2).

    Parameters
    ----------
    data : pandas.DataFrame
        One row per sample.
    attributes : sequence of str or Attribute
        Attributes (names are looked up in ``schema``).
    max_k : int
        Largest intersection size (capped at the number of attributes).
    schema : Schema, optional
    source : str, optional
        Name of the table in error messages (default ``data.attrs["source"]``).
    max_declared : int or None
        Keep every declared combination (empty groups included) when there are
        at most this many; otherwise only the observed ones. None: always
        every declared combination.

    Returns
    -------
    list of Intersection
        The 1-way sets first, then the 2-way, ..., each in the order of
        ``attributes``. Multi-valued attributes contribute every combination
        of a row's values.
    """
    if not attributes:
        raise ParameterError("attributes", "is empty: give at least one attribute")
    if max_k < 1:
        raise ParameterError("max_k", "must be at least 1")
    ms = memberships(data, attributes, schema, source=source)
    return [intersect(combo, len(data), max_declared=max_declared) for combo in attribute_sets(ms, max_k)]


def attribute_sets(attributes: Sequence, max_k: int = 1) -> list[tuple]:
    """Every set of 1 to ``max_k`` of the attributes, the single ones first, each in the attributes' order
    (docs/METHODS.md §3.2): the attribute sets :func:`intersections` builds, for code that labels them itself."""
    if max_k < 1:
        raise ParameterError("max_k", "must be at least 1")
    return [combo for k in range(1, min(int(max_k), len(attributes)) + 1) for combo in combinations(attributes, k)]


def subject_codes(data: pd.DataFrame, subject_col: str | None, *, source: str = "table",
                  rows_as_subjects: bool = False) -> np.ndarray | None:
    """Integer subject code ``0 .. n_subjects-1`` of every row.

    Without a subject column (``subject_col`` None) the result is None, or,
    with ``rows_as_subjects``, ``0 .. n_rows-1`` (every row its own subject).
    Empty subject cells are an error.
    """
    if subject_col is None:
        return np.arange(len(data), dtype=np.int64) if rows_as_subjects else None
    require_columns(data, [subject_col], source=source, what="subject column")
    s = data[subject_col]
    miss = s.isna().to_numpy()
    if miss.any():
        raise ColumnError(f"{source}: row {int(np.flatnonzero(miss)[0]) + 1}: empty {subject_col!r}")
    codes, _ = pd.factorize(s, sort=False)
    return codes.astype(np.int64)


def sparse_membership(rows: np.ndarray, codes: np.ndarray, n_rows: int, n_groups: int) -> sparse.csr_matrix:
    """CSR matrix (rows x groups) with 1 where row ``rows[i]`` is in group ``codes[i]``."""
    return sparse.csr_matrix((np.ones(rows.size), (rows, codes)), shape=(n_rows, n_groups))


def cell_counts(comb: Combined | Intersection, subjects: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Samples and (if given) distinct subjects per cell."""
    n = comb.n_cells
    n_samples = np.bincount(comb.codes, minlength=n)
    if subjects is None:
        return n_samples, None
    return n_samples, distinct_counts(comb.codes, subjects[comb.rows], n)


def distinct_counts(keys, values, n_keys: int) -> np.ndarray:
    """How many distinct ``values`` go with each key ``0 .. n_keys-1`` (``values[i]`` goes with ``keys[i]``; both
    whole numbers >= 0): distinct subjects in each group, distinct categories of each subject."""
    keys = np.asarray(keys, dtype=np.int64).ravel()
    values = np.asarray(values, dtype=np.int64).ravel()
    if not keys.size:
        return np.zeros(int(n_keys), dtype=np.int64)
    width = np.int64(int(values.max()) + 1)
    pairs = pd.unique(keys * width + values)  # hash-based: faster than sorting for large tables
    return np.bincount(pairs // width, minlength=int(n_keys))


def count_frame(comb: Combined | Intersection, n_samples: np.ndarray, n_subjects: np.ndarray | None) -> pd.DataFrame:
    """Table of the counts of :func:`cell_counts`: ``n_samples``, ``share`` and, with subjects, ``n_subjects``, ``subject_share``."""
    total = n_samples.sum()
    out = pd.DataFrame({"n_samples": n_samples}, index=comb.index())
    out["share"] = n_samples / total if total else np.nan
    if n_subjects is not None:
        out["n_subjects"] = n_subjects
        st = n_subjects.sum()
        out["subject_share"] = n_subjects / st if st else np.nan
    return out


def count_table(comb: Combined | Intersection, subjects: np.ndarray | None = None) -> pd.DataFrame:
    """:func:`count_frame` of :func:`cell_counts`: sample (and subject) counts of every group."""
    return count_frame(comb, *cell_counts(comb, subjects))


_frame = count_frame  # temporary: audits/dataset.py still imports the old private name


def group_counts(
    data: pd.DataFrame,
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
    source = data.attrs.get("source", "table")
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    ms = memberships(data, attrs, schema, source=source)
    inter = intersect(ms, len(data), max_declared=None)
    return count_table(inter, subject_codes(data, subject_col, source=source))


def cross_counts(data: pd.DataFrame, x: str, y: str, *, schema: Schema | None = None) -> pd.DataFrame:
    """Contingency table of sample counts: index = values of ``x``, columns = values of ``y``."""
    if x == y:
        raise FairvisionError(f"cross table of {x!r} with itself")
    ms = memberships(data, [x, y], schema)
    comb = combine(ms, len(data))
    counts = np.bincount(comb.codes, minlength=comb.n_cells).reshape(len(comb.levels[0]), len(comb.levels[1]))
    out = pd.DataFrame(counts.astype(float), index=pd.Index(comb.levels[0], name=ms[0].name), columns=pd.Index(comb.levels[1], name=ms[1].name))
    return out


def intersection_tables(
    data: pd.DataFrame,
    attrs: Sequence[str | Attribute],
    *,
    schema: Schema | None = None,
    max_k: int = 2,
    subject_col: str | None = None,
) -> dict[tuple[str, ...], pd.DataFrame]:
    """Counts for every set of 1..``max_k`` attributes (each a :func:`group_counts` frame)."""
    source = data.attrs.get("source", "table")
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    attrs = list(attrs)
    if not attrs and max_k >= 1:
        return {}
    inters = intersections(data, attrs, max_k, schema, source=source, max_declared=None)
    subj = subject_codes(data, subject_col, source=source)
    return {inter.names: count_table(inter, subj) for inter in inters}


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
        empty_labels = [group_label(i) for i, e in zip(t.index, ~nonempty) if e]
        rows.append({
            "attributes": SEP.join(names),
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

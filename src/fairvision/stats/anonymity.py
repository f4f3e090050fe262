"""k-anonymity of released attributes: the smallest group of every combination of attributes (docs/METHODS.md §13.10).

A row is one image; each released attribute is an integer code per row (``-1``: missing). For every set of
1..``max_combo`` attributes, the rows that have a value in each of them fall into cells (one per observed value
tuple); a cell's size is its number of distinct subjects (or of rows when there are no subjects). A cell smaller
than ``k`` singles out fewer than ``k`` people: anyone who knows those attribute values of a person can narrow
them down to that cell. Missing values match no cell (a blanked value does not tell anyone apart), which is
also what makes suppression (:func:`suppression_mask`) work.

Everything is vectorised: the cells of a set are the mixed-radix combination of its codes, re-numbered densely
(``numpy.unique``) so that no radix product overflows, and a set of ``j`` attributes is built from the cells of
its first ``j - 1`` (computed once); sizes are ``numpy.bincount`` over distinct (cell, subject) pairs. Only the
loop over attribute sets is in Python, never a loop over rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ParameterError
from fairvision.groups import distinct_counts

#: Default k: a cell of fewer than 5 people is the usual small-cell threshold of statistical disclosure control.
DEFAULT_K = 5
#: More attribute sets than this is refused unless ``max_combo`` limits them (2^14 - 1 = 16,383 sets).
MAX_COMBINATIONS = 20_000
#: separator of attribute names and of values in labels
SEP = " × "


@dataclass
class AnonymityResult:
    """Smallest cells of every attribute set (:func:`k_anonymity`).

    Attributes
    ----------
    by_set : pandas.DataFrame
        One row per attribute set: ``attributes`` (names joined by `` × ``), ``n_attributes``, ``n_rows`` (rows
        with a value in every attribute of the set), ``n_cells``, ``min_size``, ``n_cells_below_k``,
        ``n_units_below_k`` (subjects, or rows, in those cells; a subject in two small cells counts twice).
    violations : pandas.DataFrame
        One row per cell below ``k``: ``attributes``, ``n_attributes``, ``values`` (the value tuple joined by
        `` × ``), ``size``; smallest first, then fewer attributes first.
    k : int
    unit : str
        ``"subjects"`` or ``"images"``: what a size counts.
    """

    by_set: pd.DataFrame
    violations: pd.DataFrame
    k: int
    unit: str

    @property
    def min_group_size(self) -> float:
        """The smallest cell over every attribute set (NaN when there is none)."""
        s = self.by_set["min_size"]
        return float(s.min()) if len(s) and s.notna().any() else math.nan

    @property
    def n_cells_below_k(self) -> int:
        return int(self.by_set["n_cells_below_k"].sum()) if len(self.by_set) else 0

    def quantities(self) -> dict[str, float]:
        """``min_group_size``, ``n_cells_below_k`` and ``n_sets_below_k`` (attribute sets with a small cell)."""
        return {"min_group_size": self.min_group_size, "n_cells_below_k": float(self.n_cells_below_k),
                "n_sets_below_k": float((self.by_set["n_cells_below_k"] > 0).sum()) if len(self.by_set) else 0.0}


def _check(codes: np.ndarray, levels: Sequence[Sequence], names: Sequence[str], subjects, k: int,
           max_combo: int | None) -> tuple[np.ndarray, np.ndarray | None, int]:
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ParameterError("codes", f"must be a 2-D array (rows x attributes), got {codes.ndim} dimensions")
    codes = codes.astype(np.int64, copy=False)
    m = codes.shape[1]
    if len(levels) != m or len(names) != m:
        raise ParameterError("names", f"and levels must have one entry per attribute ({m}), got {len(names)} and {len(levels)}")
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ParameterError("k", f"must be a whole number of at least 1, got {k!r}")
    top = m if max_combo is None else int(max_combo)
    if top < 1 and (m > 0 or max_combo is not None):
        raise ParameterError("max_combo", f"must be at least 1, got {max_combo}")
    top = min(top, m)
    n_sets = sum(math.comb(m, j) for j in range(1, top + 1))
    if n_sets > MAX_COMBINATIONS:
        raise ParameterError("max_combo", f"{m} attributes give {n_sets:,} attribute sets of up to {top}; limit the "
                                          f"sets with max_combo (at most {MAX_COMBINATIONS:,} sets)")
    subj = None
    if subjects is not None:
        subj = np.asarray(subjects, dtype=np.int64)
        if subj.shape != (codes.shape[0],):
            raise ParameterError("subjects", f"must have one code per row ({codes.shape[0]}), got shape {subj.shape}")
        if subj.size and subj.min() < 0:
            raise ParameterError("subjects", "must be non-negative codes")
    return codes, subj, top


def _dense(cells: np.ndarray) -> tuple[np.ndarray, int]:
    """Cells re-numbered 0..n-1 (order of first appearance is not kept: sorted by value)."""
    uniq, inverse = np.unique(cells, return_inverse=True)
    return inverse.astype(np.int64).ravel(), int(uniq.size)


def iter_sets(codes: np.ndarray, top: int):
    """Yield ``(columns, rows, cells, n_cells)`` for every attribute set of 1..``top`` columns: ``rows`` are the
    rows with a value in every column, ``cells`` their dense cell numbers. A set's cells are built from those of
    its prefix (the set without its last column), kept while the next size is built."""
    n, m = codes.shape
    prev: dict[tuple, tuple[np.ndarray, np.ndarray, int]] = {}
    for j in range(1, top + 1):
        cur = {}
        for cols in combinations(range(m), j):
            last = codes[:, cols[-1]]
            if j == 1:
                rows = np.flatnonzero(last >= 0)
                cells, n_cells = _dense(last[rows])
            else:
                prow, pcells, pn = prev[cols[:-1]]
                v = last[prow]
                ok = v >= 0
                rows = prow[ok]
                width = int(v.max()) + 1 if v.size else 1
                cells, n_cells = _dense(pcells[ok] * np.int64(width) + v[ok])
            if j < top:
                cur[cols] = (rows, cells, n_cells)
            yield cols, rows, cells, n_cells
        prev = cur


def cell_sizes(cells: np.ndarray, n_cells: int, subjects: np.ndarray | None) -> np.ndarray:
    """Size of every cell: distinct subjects (``subjects[i]`` of the row in ``cells[i]``) or rows."""
    if subjects is None:
        return np.bincount(cells, minlength=n_cells)
    return distinct_counts(cells, subjects, n_cells)


def k_anonymity(
    codes: np.ndarray,
    levels: Sequence[Sequence],
    names: Sequence[str],
    *,
    subjects: np.ndarray | None = None,
    k: int = DEFAULT_K,
    max_combo: int | None = None,
) -> AnonymityResult:
    """Smallest group of every combination of released attributes, and the cells below ``k`` (docs/METHODS.md §13.10).

    Parameters
    ----------
    codes : numpy.ndarray of int, shape (n_rows, n_attributes)
        Code of each row's value of each attribute, ``-1`` for a missing value.
    levels : sequence of sequences
        Value of each code, per attribute (``levels[j][c]``), used to label the violating cells.
    names : sequence of str
        Attribute names.
    subjects : numpy.ndarray of int, optional
        Subject code of every row: sizes count distinct subjects (a person with several images counts once).
        None: every row is its own unit.
    k : int
        Cells smaller than ``k`` are violations (default 5).
    max_combo : int, optional
        Largest attribute set (default: all attributes).

    Returns
    -------
    AnonymityResult
    """
    codes, subj, top = _check(codes, levels, names, subjects, k, max_combo)
    rows_by, viol = [], []
    for cols, rows, cells, n_cells in iter_sets(codes, top):
        label = SEP.join(names[c] for c in cols)
        sizes = cell_sizes(cells, n_cells, None if subj is None else subj[rows])
        small = np.flatnonzero(sizes < k)
        rows_by.append({"attributes": label, "n_attributes": len(cols), "n_rows": int(rows.size), "n_cells": n_cells,
                        "min_size": int(sizes.min()) if n_cells else np.nan, "n_cells_below_k": int(small.size),
                        "n_units_below_k": int(sizes[small].sum())})
        if small.size:
            first = np.full(n_cells, -1, dtype=np.int64)
            first[cells[::-1]] = rows[::-1]  # a row of each cell (the first; later writes win)
            reps = first[small]
            vals = [SEP.join(str(levels[c][codes[r, c]]) for c in cols) for r in reps]
            viol.append(pd.DataFrame({"attributes": label, "n_attributes": len(cols), "values": vals,
                                      "size": sizes[small].astype(np.int64)}))
    by_set = pd.DataFrame(rows_by, columns=["attributes", "n_attributes", "n_rows", "n_cells", "min_size",
                                            "n_cells_below_k", "n_units_below_k"])
    cols = ["attributes", "n_attributes", "values", "size"]
    violations = (pd.concat(viol, ignore_index=True) if viol else pd.DataFrame({c: [] for c in cols}))[cols]
    violations = violations.sort_values(["size", "n_attributes", "attributes", "values"], kind="stable").reset_index(drop=True)
    violations["size"] = violations["size"].astype(np.int64)
    violations["n_attributes"] = violations["n_attributes"].astype(np.int64)
    return AnonymityResult(by_set, violations, int(k), "subjects" if subj is not None else "images")


def suppression_mask(
    codes: np.ndarray,
    *,
    subjects: np.ndarray | None = None,
    k: int = DEFAULT_K,
    max_combo: int | None = None,
) -> np.ndarray:
    """Which values to blank so that no cell of any attribute set is below ``k`` (docs/METHODS.md §13.10).

    One pass marks, for every attribute set and every row in one of its cells below ``k``, that row's values of
    the set's attributes; the marked values are blanked (``-1``) and the passes repeat until no cell is below
    ``k`` (blanking a row can shrink another cell below ``k``). Blanked values match no cell, so it ends, at
    worst with every value blanked.

    Parameters
    ----------
    codes : numpy.ndarray of int, shape (n_rows, n_attributes)
        As :func:`k_anonymity`.
    subjects : numpy.ndarray of int, optional
    k : int
    max_combo : int, optional

    Returns
    -------
    numpy.ndarray of bool, shape (n_rows, n_attributes)
        True where a value (not missing before) is to be blanked.
    """
    names = [str(j) for j in range(np.asarray(codes).shape[1] if np.ndim(codes) == 2 else 0)]
    codes, subj, top = _check(codes, [[]] * len(names), names, subjects, k, max_combo)
    work = codes.copy()
    blank = np.zeros(codes.shape, dtype=bool)
    while True:
        mark = np.zeros(codes.shape, dtype=bool)
        for cols, rows, cells, n_cells in iter_sets(work, top):
            sizes = cell_sizes(cells, n_cells, None if subj is None else subj[rows])
            hit = rows[sizes[cells] < k]
            if hit.size:
                mark[np.ix_(hit, list(cols))] = True
        mark &= work >= 0
        if not mark.any():
            return blank
        blank |= mark
        work[mark] = -1

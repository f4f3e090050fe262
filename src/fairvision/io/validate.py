"""One input-validation path: the checks every command runs on the tables it reads.

Each check raises a :class:`~fairvision.errors.ColumnError` (or
:class:`~fairvision.errors.FairvisionError`) whose one-line message names the
file that holds the problem, the row (1-based, as a spreadsheet shows it, not
counting the header) and the column. Commands call these right after reading,
before any work, so a bad input stops the run at once and nothing is written.

- :func:`finite_values`: numbers that must be finite (scores, features);
  ``inf``, ``-inf`` and non-numbers are errors, empty cells are NaN.
- :func:`require_variation`: a target that is constant has nothing to explain.
- :func:`missing_rows`: the one ``--missing error|drop|keep`` rule for empty
  cells in the columns a command uses.
- :func:`check_unique_columns`: two columns of the same name (pandas would silently rename the second
  ``x.1``) are an error naming the file and the columns.
- :func:`check_writable`: an output path that cannot be written is reported
  before the work starts, not after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.atomic import check_writable  # noqa: F401  (part of the validation path)

#: accepted values of every command's ``--missing`` option
MISSING_RULES = ("error", "drop", "keep")


def check_missing_rule(rule: str) -> str:
    """Validate a rule for empty cells (``missing``: error, drop or keep)."""
    if rule not in MISSING_RULES:
        raise ParameterError("missing", f"must be error, drop or keep, not {rule!r}")
    return rule


def empty_cells(values: pd.Series) -> np.ndarray:
    """Boolean mask of empty cells: NaN/None/NA or blank strings."""
    mask = values.isna().to_numpy().copy()
    if values.dtype == object:
        mask |= np.array([isinstance(v, str) and not v.strip() for v in values.to_numpy()], dtype=bool)
    return mask


def finite_values(data: pd.DataFrame, column: str, *, source: str, what: str = "column") -> np.ndarray:
    """The values of ``column`` as float64, with empty cells as NaN.

    Raises
    ------
    ColumnError
        When the column is absent, holds a non-numeric value, or holds
        ``inf`` / ``-inf`` (naming the file, row and column).
    """
    if column not in data.columns:
        noun = what if what.endswith("column") else f"{what} column"
        raise ColumnError(f"{source}: no {noun} {column!r}; columns are {', '.join(map(str, data.columns))}")
    raw = data[column]
    vals = pd.to_numeric(raw, errors="coerce")
    bad = (vals.isna() & ~empty_cells(raw)).to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"{source}: row {row + 1}: {what} {column!r} has non-numeric value {raw.iloc[row]!r}")
    v = vals.to_numpy(dtype=np.float64, na_value=np.nan)
    inf = np.isinf(v)
    if inf.any():
        row = int(np.flatnonzero(inf)[0])
        raise ColumnError(f"{source}: row {row + 1}: {what} {column!r} is {v[row]:g} ({int(inf.sum())} infinite values); "
                          f"scores must be finite numbers (leave a cell empty for 'not scored')")
    return v


def require_finite(data: pd.DataFrame, columns: Iterable[str], *, source: str) -> None:
    """Check that every numeric cell of ``columns`` is finite (see :func:`finite_values`)."""
    for c in columns:
        if c in data.columns and pd.api.types.is_numeric_dtype(data[c]) and not pd.api.types.is_bool_dtype(data[c]):
            finite_values(data, c, source=source)


def require_variation(values: np.ndarray, column: str, *, source: str) -> None:
    """A constant target has nothing to explain: stop with a message instead of a meaningless fit."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size and float(v.max()) == float(v.min()):
        raise FairvisionError(f"{source}: column {column!r} is constant ({v[0]:g} in all {v.size} scored rows): "
                              f"there is no variation to explain")


def missing_rows(data: pd.DataFrame, columns: Iterable[str], rule: str, *, source: str,
                 among: np.ndarray | None = None) -> np.ndarray:
    """Apply the ``--missing`` rule to empty cells of ``columns``.

    Returns the boolean mask of rows to keep: all rows for ``"keep"`` (the
    caller treats an empty cell as a value of its own), the rows with no empty
    cell for ``"drop"``. For ``"error"`` (the default everywhere) the first
    empty cell stops the run, naming the file, row and column. ``among`` limits
    the check to the rows the caller uses (a boolean mask over ``data``).
    """
    check_missing_rule(rule)
    keep = np.ones(len(data), dtype=bool)
    for c in columns:
        if c not in data.columns:
            continue
        empty = empty_cells(data[c])
        if among is not None:
            empty &= among
        if empty.any() and rule == "error":
            row = int(np.flatnonzero(empty)[0])
            raise ColumnError(f"{source}: row {row + 1}: column {c!r} is empty ({int(empty.sum())} empty cells; "
                              f"use missing='drop' or 'keep'; on the command line --missing drop or --missing keep)")
        if rule == "drop":
            keep &= ~empty
    return keep


def check_unique_ids(data: pd.DataFrame, id_col: str, source: str) -> None:
    """One row per sample: a missing id column or a repeated id is a one-line error naming the table and the id."""
    if id_col not in data.columns:
        raise ColumnError(f"{source}: no id column {id_col!r}; columns are {', '.join(map(str, data.columns))}")
    ids = data[id_col].astype(str)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ColumnError(f"{source}: row {i + 1}: {id_col} {ids.iloc[i]!r} appears twice")


def require_columns(data: pd.DataFrame, columns: Iterable[str], *, source: str, what: str = "column",
                    why: str = "") -> None:
    """Check that ``data`` has every column of ``columns``.

    The first one missing is a one-line :class:`~fairvision.errors.ColumnError`:
    ``"<source>: no <what> '<name>'<why>; columns are a, b, c"`` (``what``: e.g. ``"subject column"``; ``why``:
    e.g. ``" (needed to match candidates)"``).
    """
    for c in columns:
        if c not in data.columns:
            raise ColumnError(f"{source}: no {what} {c!r}{why}; columns are {', '.join(map(str, data.columns))}")


def check_unique_columns(names: Iterable, *, source: str, where: str = "header") -> None:
    """Every column name appears once.

    ``names`` are the column names as the file holds them (a CSV header before pandas renames a repeated
    ``x`` to ``x.1``, a Parquet schema). Empty names are ignored (pandas names them ``Unnamed: n``).

    Raises
    ------
    ColumnError
        One line naming ``source`` and each repeated name with its 1-based column positions, e.g.
        ``"t.csv: column 'age' appears 2 times in the header (columns 2 and 5); give each column its own name"``.
    """
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(names, 1):
        name = str(name)
        if name.strip():
            positions.setdefault(name, []).append(i)
    repeated = {n: p for n, p in positions.items() if len(p) > 1}
    if not repeated:
        return

    def where_(p: list[int]) -> str:
        return f"columns {', '.join(map(str, p[:-1]))} and {p[-1]}"

    if len(repeated) == 1:
        (name, p), = repeated.items()
        said = f"column {name!r} appears {len(p)} times in the {where} ({where_(p)})"
    else:
        said = f"columns {', '.join(f'{n!r} ({where_(p)})' for n, p in repeated.items())} appear more than once in the {where}"
    raise ColumnError(f"{source}: {said}; give each column its own name")

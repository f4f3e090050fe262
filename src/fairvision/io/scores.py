"""Per-sample scores of a model: joined onto the sample table and checked, with one-line errors.

A scores table has a ``sample_id`` column and one column per metric (recall,
IoU, PSNR, ...) or the true and predicted class of each sample. Every error is
a one-line :class:`~fairvision.errors.ColumnError` naming the table, row and
column.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError
from fairvision.io.tables import SAMPLE_ID
from fairvision.io.validate import check_unique_ids, empty_cells, finite_values, require_finite


def join_scores(samples: pd.DataFrame, scores: pd.DataFrame, *, samples_source: str = "samples",
                scores_source: str = "scores", key: str = SAMPLE_ID) -> pd.DataFrame:
    """Join a scores table onto a sample table by ``sample_id``, with one-line errors.

    Every sample must have exactly one row of scores and ids must be unique in
    both tables (:func:`fairvision.io.validate.check_unique_ids`); scores for
    unknown samples are an error too (they usually mean the wrong file). Score
    columns named like a sample column are dropped (the sample table wins).
    """
    check_unique_ids(samples, key, samples_source)
    check_unique_ids(scores, key, scores_source)
    s_ids = scores[key].astype(str)
    ids = samples[key].astype(str)
    missing = ~ids.isin(set(s_ids)).to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise ColumnError(f"{scores_source}: no scores for {key} {ids.iloc[row]!r} ({samples_source} row {row + 1}; "
                          f"{int(missing.sum())} samples without scores)")
    extra = ~s_ids.isin(set(ids)).to_numpy()
    if extra.any():
        row = int(np.flatnonzero(extra)[0])
        raise ColumnError(f"{scores_source}: row {row + 1}: {key} {s_ids.iloc[row]!r} is not in {samples_source} "
                          f"({int(extra.sum())} unknown ids)")
    # check the scores where they are, so an error names the scores file and its row
    require_finite(scores, [c for c in scores.columns if c != key], source=scores_source)
    clash = [c for c in scores.columns if c != key and c in samples.columns]
    right = scores.drop(columns=clash).assign(**{key: s_ids})
    out = samples.assign(**{key: ids}).merge(right, on=key, how="left", validate="one_to_one")
    out.attrs.update(samples.attrs)
    return out


def score_columns(scores: pd.DataFrame, exclude: Iterable[str | None] = ()) -> list[str]:
    """The numeric (not boolean) columns of a scores table, except ``sample_id`` and ``exclude``."""
    skip = {SAMPLE_ID, *exclude}
    return [c for c in scores.columns if c not in skip
            and pd.api.types.is_numeric_dtype(scores[c]) and not pd.api.types.is_bool_dtype(scores[c])]


def metric_values(data: pd.DataFrame, metric: str, *, source: str = "samples") -> np.ndarray:
    """The values of one metric column as floats (empty cells are NaN: not scored).

    A missing column, a non-numeric or infinite cell or a column with no value
    at all is a :class:`~fairvision.errors.ColumnError`.
    """
    vals = finite_values(data, metric, source=source, what="metric")
    if np.isnan(vals).all():
        raise ColumnError(f"{source}: metric {metric!r} has no values")
    return vals


def class_labels(col: pd.Series) -> np.ndarray:
    """Class labels as comparable strings: 1, 1.0 and "1" are the same class.

    A numeric column read with a missing cell becomes float; without this,
    str(1.0) != str(1) and every prediction would count as wrong.
    """
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=float)
        whole = np.isfinite(v) & (v == np.round(v))
        return np.array([str(int(x)) if w else str(x) for x, w in zip(v, whole)], dtype=object)
    return np.array([str(int(x)) if isinstance(x, float) and x.is_integer() else str(x) for x in col], dtype=object)


def _quoted(values, limit: int = 3) -> str:
    vals = [repr(v) for v in values]
    more = len(vals) - limit
    return ", ".join(vals[:limit]) + (f" and {more} more" if more > 0 else "")


def require_classes(data: pd.DataFrame, column: str, *, source: str, what: str = "label column",
                    why: str = "there is nothing to tell apart") -> np.ndarray:
    """The class labels of ``column`` (:func:`class_labels`, empty cells left out); fewer than two distinct
    classes is a one-line :class:`~fairvision.errors.FairvisionError` naming the table and column.

    Returns the labels of the rows whose cell is not empty.
    """
    if column not in data.columns:
        raise ColumnError(f"{source}: no {what} {column!r}; columns are {', '.join(map(str, data.columns))}")
    empty = empty_cells(data[column])
    labels = class_labels(data[column][~empty])
    classes = np.unique(labels.astype(str))
    if classes.size < 2:
        held = f"one class only ({classes[0]!r} in all {labels.size:,} rows)" if classes.size else "no class at all"
        raise FairvisionError(f"{source}: {what} {column!r} has {held}: {why}")
    return labels


def check_known_classes(data: pd.DataFrame, column: str, known, *, source: str, of: str, hint: str = "") -> None:
    """Every non-empty predicted class in ``column`` must be one of the ``known`` class labels (compared as by
    :func:`class_labels`, so 1, 1.0 and "1" agree); otherwise a one-line :class:`~fairvision.errors.ColumnError`
    naming the table, the first row, the column and a few of the unknown classes. ``of`` says whose classes
    ``known`` are (``"the true classes in 'label'"``); ``hint`` ends the message (what to do)."""
    known = set(class_labels(pd.Series(list(known), dtype=object)).tolist())
    empty = empty_cells(data[column])
    labels = class_labels(data[column])
    bad = ~np.isin(labels.astype(str), np.array(sorted(known), dtype=str)) & ~empty
    if bad.any():
        row, n_bad = int(np.flatnonzero(bad)[0]), int(bad.sum())
        unknown = list(dict.fromkeys(labels[bad].tolist()))
        raise ColumnError(f"{source}: row {row + 1}: column {column!r} predicts "
                          f"{'a class' if len(unknown) == 1 else f'{len(unknown)} classes'} not among {of}: "
                          f"{_quoted(unknown)} ({n_bad:,} row{'s' if n_bad != 1 else ''}; known: "
                          f"{_quoted(sorted(known), 5)}){'; ' + hint if hint else ''}")


def check_predicted_classes(predictions: pd.DataFrame, pred_col: str, data: pd.DataFrame, true_col: str, *,
                            schema=None, source: str = "samples") -> set:
    """A predicted class must be a true class of ``data`` or declared for ``true_col`` in ``schema`` (a
    :class:`fairvision.schema.Schema` or None; docs/METHODS.md §6.4): a prediction spelt otherwise ("Female" for
    "female", 0 for "cat") would silently count as wrong. Raises a one-line :class:`~fairvision.errors.ColumnError` naming ``source``, the row, the column
    and a few of the unknown classes. Returns the known classes (as :func:`class_labels` spells them)."""
    known = set(class_labels(data[true_col][~empty_cells(data[true_col])]).tolist())
    if schema is not None and true_col in schema and schema[true_col].categories is not None:
        known |= set(class_labels(pd.Series(list(schema[true_col].categories), dtype=object)).tolist())
    check_known_classes(predictions, pred_col, known, source=source, of=f"the true classes in {true_col!r}",
                        hint=f"a class the samples lack can be declared for {true_col!r} in the schema")
    return known

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

from fairvision.errors import ColumnError
from fairvision.io.tables import SAMPLE_ID
from fairvision.io.validate import finite_values, require_finite


def join_scores(samples: pd.DataFrame, scores: pd.DataFrame, *, samples_source: str = "samples",
                scores_source: str = "scores", key: str = SAMPLE_ID) -> pd.DataFrame:
    """Join a scores table onto a sample table by ``sample_id``, with one-line errors.

    Every sample must have exactly one row of scores; scores for unknown
    samples are an error too (they usually mean the wrong file). Score columns
    named like a sample column are dropped (the sample table wins).
    """
    for df, src in ((samples, samples_source), (scores, scores_source)):
        if key not in df.columns:
            raise ColumnError(f"{src}: missing column {key!r}; columns are {', '.join(map(str, df.columns))}")
    s_ids = scores[key].astype(str)
    dup = s_ids.duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise ColumnError(f"{scores_source}: row {row + 1}: duplicate {key} {s_ids.iloc[row]!r}")
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

"""The sample table of a vision-language probe: the checks and the ``missing`` rule every probe applies
(docs/METHODS.md §12.1)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, InputFileError, ParameterError
from fairvision.groups import subject_codes
from fairvision.io.validate import check_missing_rule, check_unique_ids, missing_rows
from fairvision.schema import Schema


@dataclass(frozen=True)
class SampleOptions:
    """How a probe reads its sample table (docs/METHODS.md §12.1).

    Parameters
    ----------
    id_col : str
        Column of the sample ids (one row per id).
    subject_col : str or None
        Column identifying the person (the bootstrap unit). When the default ``subject_id`` is absent, every row is
        its own subject; another named column must exist.
    schema : fairvision.schema.Schema, optional
        Attribute schema.
    missing : {"error", "drop", "keep"}
        Rule for empty attribute cells: stop at the first (default), leave the rows out, or make them a group
        ``(missing)``.
    """

    id_col: str = "sample_id"
    subject_col: str | None = "subject_id"
    schema: object = None
    missing: str = "error"


def apply_missing(data: pd.DataFrame, attrs: list[str], missing: str, schema, *, source: str):
    """The sample table and schema under the ``missing`` rule (error, drop or keep) for empty attribute cells
    (:func:`fairvision.io.validate.missing_rows`): ``error`` stops at the first empty cell, ``drop`` leaves the
    rows out, ``keep`` makes them a group ``(missing)``. With a schema and ``error`` the schema's own rule applies."""
    check_missing_rule(missing)
    if schema is not None and missing == "error":
        return data, schema
    keep = missing_rows(data, [a for a in attrs if isinstance(a, str)], missing, source=source)
    if missing == "drop" and not keep.all():
        kept = data.loc[keep].reset_index(drop=True)
        kept.attrs = dict(data.attrs)
        data = kept
    if missing != "error":
        schema = copy.deepcopy(schema) if schema is not None else Schema()
        schema.declare([a for a in attrs if isinstance(a, str)], missing=missing)
    return data, schema


def prepare_samples(data: pd.DataFrame, attrs: list[str], options: SampleOptions,
                    max_k: int = 1) -> tuple[pd.DataFrame, object, str, int]:
    """The checks every probe makes of its sample table (docs/METHODS.md §12.1): ``max_k`` at least 1, one row
    per id, the ``missing`` rule for empty attribute cells. Returns the table (index reset, its ``source`` kept),
    the schema, the source name and the number of rows before any were dropped."""
    if int(max_k) < 1:
        raise ParameterError("max_k", f"must be at least 1, not {max_k}")
    source = data.attrs.get("source", "samples")
    data = data.reset_index(drop=True)
    data.attrs = {**data.attrs, "source": source}
    check_unique_ids(data, options.id_col, source)
    n_rows = len(data)
    data, schema = apply_missing(data, attrs, options.missing, options.schema, source=source)
    return data, schema, source, n_rows


def subject_clusters(data: pd.DataFrame, subject_col: str | None, source: str) -> tuple[np.ndarray, str | None]:
    """Subject code of every row and the subject column used: the default ``subject_id`` when absent means every
    row is its own subject (column None); another absent column is an error."""
    if subject_col is not None and subject_col not in data.columns:
        subject_col = None if subject_col == "subject_id" else subject_col
    return subject_codes(data, subject_col, source=source, rows_as_subjects=True), subject_col


def align_embeddings(data: pd.DataFrame, ids: list[str], id_col: str, source: str) -> np.ndarray:
    """Position of each sample's embedding among ``ids``; a sample without one is an error."""
    if id_col not in data.columns:
        raise ColumnError(f"samples: no id column {id_col!r}; columns are {', '.join(map(str, data.columns))}")
    pos = pd.Index(ids).get_indexer(data[id_col].astype(str))
    if (pos < 0).any():
        bad = data[id_col].astype(str).to_numpy()[pos < 0]
        raise InputFileError(f"{source}: no embedding for {id_col} {bad[0]!r}"
                             + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + " of the sample table")
    return pos

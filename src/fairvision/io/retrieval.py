"""Readers for retrieval audits: ranked results and item tables (embeddings: :mod:`fairvision.io.embeddings`).

Results come as

- a table (CSV, TSV, Parquet, JSON records, JSONL) with ``query_id``, ``rank``
  and ``item_id`` (aliases: ``query``/``qid``; ``item``/``doc_id``/``docno``/
  ``result``; ``position``); without a rank column the row order within a
  query is the rank;
- a JSON object mapping each query id to its ranked list of item ids
  (``{"q1": ["a", "b", ...], ...}``);
- a TREC run file (``.run``/``.trec``, or any text whose lines have the six
  whitespace-separated fields ``qid Q0 docno rank score tag``). Like
  ``trec_eval``, the order within a query is by decreasing score (ties keep
  the file's rank order); ``rank`` is renumbered 1, 2, ... in that order.

Items: a table with an id column (``item_id``, ``sample_id``, ``id``,
``image_id``) and the protected attribute. The catalog defaults to the item
table. Every error is a one-line :class:`~fairvision.errors.FairvisionError`
naming the file, row or column.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.tables import read_raw_table, read_table

RESULT_COLUMNS = ("query_id", "rank", "item_id")
_QUERY_ALIASES = ("query_id", "query", "qid", "query_item", "query_item_id")
_ITEM_ALIASES = ("item_id", "item", "doc_id", "docno", "docid", "result", "result_id", "neighbor", "neighbour")
_RANK_ALIASES = ("rank", "position", "pos")
ITEM_ID_ALIASES = ("item_id", "sample_id", "id", "image_id", "product_id")
_TREC_SUFFIXES = (".run", ".trec", ".res")


def pick_column(df: pd.DataFrame, aliases, explicit: str | None, source: str, role: str) -> str | None:
    """The column ``explicit`` (which must exist), else the first of ``aliases`` present, else None."""
    if explicit is not None:
        if explicit not in df.columns:
            raise ColumnError(f"{source}: no column {explicit!r} for {role}; columns are {', '.join(map(str, df.columns))}")
        return explicit
    return next((a for a in aliases if a in df.columns), None)


def _read_trec(path: Path) -> pd.DataFrame:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise InputFileError(f"{path}: line {lineno}: a TREC run line has 6 fields (qid Q0 docno rank score tag), found {len(parts)}")
            try:
                rank, score = int(parts[3]), float(parts[4])
            except ValueError:
                raise InputFileError(f"{path}: line {lineno}: rank {parts[3]!r} or score {parts[4]!r} is not a number") from None
            rows.append((parts[0], parts[2], rank, score))
    if not rows:
        raise InputFileError(f"{path}: the run file is empty")
    df = pd.DataFrame(rows, columns=["query_id", "item_id", "file_rank", "score"])
    df = df.sort_values(["query_id", "score", "file_rank"], ascending=[True, False, True], kind="mergesort")
    df["rank"] = df.groupby("query_id", sort=False).cumcount() + 1
    return df[["query_id", "rank", "item_id", "score"]].reset_index(drop=True)


def _looks_like_trec(path: Path) -> bool:
    if path.suffix.lower() in _TREC_SUFFIXES:
        return True
    if path.suffix.lower() not in (".txt", ""):
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().split()
    return len(first) == 6 and first[1].upper() == "Q0"


def _mapping_to_results(data: dict, source: str) -> pd.DataFrame:
    q, r, it = [], [], []
    for key, lst in data.items():
        if not isinstance(lst, list):
            raise InputFileError(f"{source}: query {key!r}: expected a list of item ids, got {type(lst).__name__}")
        for i, item in enumerate(lst, 1):
            if isinstance(item, dict):
                item = item.get("item_id", item.get("id"))
            if item is None or isinstance(item, (list, dict)):
                raise InputFileError(f"{source}: query {key!r}: entry {i} is not an item id")
            q.append(str(key))
            r.append(i)
            it.append(str(item))
    return pd.DataFrame({"query_id": q, "rank": r, "item_id": it})


def read_results(
    source,
    *,
    query_col: str | None = None,
    item_col: str | None = None,
    rank_col: str | None = None,
) -> pd.DataFrame:
    """Read ranked retrieval results into a ``(query_id, rank, item_id)`` table.

    Parameters
    ----------
    source : path-like, DataFrame or dict
        A results table, a JSON mapping query -> ranked list, a TREC run file,
        a DataFrame or a dict mapping.
    query_col, item_col, rank_col : str, optional
        Column names, when they are not one of the recognised aliases.

    Returns
    -------
    pandas.DataFrame
        ``query_id`` and ``item_id`` as strings, ``rank`` as int64 (1 = best),
        sorted by query and rank; extra columns (e.g. ``score``, ``distance``)
        are kept.

    Raises
    ------
    FairvisionError
        Missing columns, non-integer or non-positive ranks, a rank repeated
        within a query, or an item listed twice for one query; the message
        names the file and row.
    """
    name = "results"
    if isinstance(source, dict):
        df = _mapping_to_results(source, name)
    elif isinstance(source, pd.DataFrame):
        df = source.copy()
        name = str(source.attrs.get("source", name))
    else:
        path = Path(source)
        name = str(path)
        if not path.is_file():
            raise InputFileError(f"{path}: no such file")
        if _looks_like_trec(path):
            df = _read_trec(path)
        elif path.suffix.lower() == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise InputFileError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
            if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()) and not any(
                k in data for k in ("records", "data", "results")
            ):
                df = _mapping_to_results(data, name)
            else:
                if isinstance(data, dict):
                    data = next((data[k] for k in ("results", "records", "data") if isinstance(data.get(k), list)), data)
                if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
                    raise InputFileError(f"{path}: expected a mapping query -> ranked item list, or a list of records")
                df = pd.DataFrame.from_records(data)
        else:
            df = read_raw_table(path)
    if len(df) == 0:
        raise InputFileError(f"{name}: no results")
    df.columns = [str(c) for c in df.columns]
    qc = pick_column(df, _QUERY_ALIASES, query_col, name, "the query id")
    ic = pick_column(df, _ITEM_ALIASES, item_col, name, "the result item id")
    rc = pick_column(df, _RANK_ALIASES, rank_col, name, "the rank")
    if qc is None:
        raise ColumnError(f"{name}: no query id column (query_id, query or qid); columns are {', '.join(df.columns)}")
    if ic is None:
        raise ColumnError(f"{name}: no result item column (item_id, item, doc_id or docno); columns are {', '.join(df.columns)}")
    df = df.rename(columns={qc: "query_id", ic: "item_id", **({rc: "rank"} if rc else {})})
    for col in ("query_id", "item_id"):
        miss = df[col].isna().to_numpy()
        if miss.any():
            raise FairvisionError(f"{name}: row {int(np.flatnonzero(miss)[0]) + 1}: empty {col}")
        df[col] = df[col].astype(str)
    if "rank" not in df.columns:
        df["rank"] = df.groupby("query_id", sort=False).cumcount() + 1
    rank = pd.to_numeric(df["rank"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(rank) | (rank < 1) | (rank != np.round(rank))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FairvisionError(f"{name}: row {i + 1}: rank {df['rank'].iloc[i]!r} is not a positive integer")
    df["rank"] = rank.astype(np.int64)
    dup = df.duplicated(["query_id", "rank"]).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise FairvisionError(f"{name}: row {i + 1}: query {df['query_id'].iloc[i]!r} has rank {df['rank'].iloc[i]} twice")
    dup = df.duplicated(["query_id", "item_id"]).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise FairvisionError(f"{name}: row {i + 1}: query {df['query_id'].iloc[i]!r} lists item {df['item_id'].iloc[i]!r} twice")
    front = list(RESULT_COLUMNS)
    df = df[front + [c for c in df.columns if c not in front]]
    out = df.sort_values(["query_id", "rank"], kind="mergesort").reset_index(drop=True)
    out.attrs["source"] = name
    return out


def read_items(source, attribute: str | None = None, *, id_col: str | None = None, name: str = "items") -> pd.DataFrame:
    """Read an item table and normalise its id column to ``item_id`` (string).

    Parameters
    ----------
    source : path-like or DataFrame
        CSV/TSV/Parquet/JSON/JSONL table (read with
        :func:`fairvision.io.read_table`, so the FairFace layout works too).
    attribute : str, optional
        The protected attribute; checked to exist.
    id_col : str, optional
        The id column (default: ``item_id``, ``sample_id``, ``id``,
        ``image_id`` or ``product_id``).
    name : str
        Names the table in error messages when ``source`` is a DataFrame.

    Returns
    -------
    pandas.DataFrame
        The table with its id column renamed ``item_id`` (string, unique).
    """
    if isinstance(source, pd.DataFrame):
        df = source.copy()
        label = df.attrs.get("source", name)
    else:
        path = Path(source)
        label = str(path)
        df = read_table(path)
    df.columns = [str(c) for c in df.columns]
    col = pick_column(df, ITEM_ID_ALIASES, id_col, label, "the item id")
    if col is None:
        raise ColumnError(f"{label}: no item id column (item_id, sample_id, id or image_id); columns are {', '.join(df.columns)}")
    if col != "item_id":
        if "item_id" in df.columns:
            df = df.drop(columns="item_id")
        df = df.rename(columns={col: "item_id"})
    miss = df["item_id"].isna().to_numpy()
    if miss.any():
        raise FairvisionError(f"{label}: row {int(np.flatnonzero(miss)[0]) + 1}: empty item id")
    df["item_id"] = df["item_id"].astype(str)
    dup = df["item_id"].duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise FairvisionError(f"{label}: row {i + 1}: duplicate item id {df['item_id'].iloc[i]!r}")
    if attribute is not None and attribute not in df.columns:
        raise ColumnError(f"{label}: no column {attribute!r} for the protected attribute; columns are {', '.join(df.columns)}")
    df.attrs["source"] = label
    return df


def attach_paths(items: pd.DataFrame) -> pd.DataFrame:
    """Items with ``image_path`` checked to exist (for embedding or skin measurement); one-line error otherwise."""
    if "image_path" not in items.columns:
        raise ColumnError(f"{items.attrs.get('source', 'items')}: no image_path column; images are needed for this step")
    for i, p in enumerate(items["image_path"]):
        if p is None or (isinstance(p, float) and np.isnan(p)) or not os.path.isfile(str(p)):
            raise InputFileError(f"{items.attrs.get('source', 'items')}: row {i + 1}: image not found: {p}")
    return items

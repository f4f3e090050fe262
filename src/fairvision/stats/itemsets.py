"""FP-growth frequent itemsets and association rules.

FHIBE's *error pattern recognition* (docs/METHODS.md §7.2; FHIBE Methods,
"Error pattern recognition") mines association rules between attribute values
and low model scores with the FP-growth algorithm (Han, Pei and Yin, SIGMOD
2000). This module implements FP-growth from scratch (no mlxtend) and the
usual rule measures; the tests and the benchmark check it against a
brute-force enumerator kept in ``tests/oracles_diagnosis.py``.

Definitions, for itemsets ``A`` (antecedent) and ``C`` (consequent) over ``n``
transactions:

* ``support(X) = #{transactions containing X} / n``
* ``confidence(A -> C) = support(A u C) / support(A)``
* ``lift(A -> C) = confidence(A -> C) / support(C)``

An itemset is frequent when ``support >= min_support``.
"""

from __future__ import annotations

import itertools
import math
from typing import Hashable, Iterable, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError

_RULE_COLUMNS = [
    "antecedent", "consequent", "support", "confidence", "lift",
    "antecedent_support", "consequent_support", "count", "antecedent_count",
]


def _as_matrix(data, item_names: Sequence[Hashable] | None) -> tuple[np.ndarray, list]:
    """Boolean transaction matrix and item names from a matrix, DataFrame or transaction list."""
    if isinstance(data, pd.DataFrame):
        names = list(data.columns) if item_names is None else list(item_names)
        try:
            x = data.to_numpy(dtype=bool)
        except (TypeError, ValueError):
            raise FairvisionError("fpgrowth: the DataFrame must hold booleans (one column per item)") from None
        if data.isna().to_numpy().any():
            raise FairvisionError("fpgrowth: the transaction table has missing values")
    elif isinstance(data, np.ndarray):
        if data.ndim != 2:
            raise FairvisionError(f"fpgrowth: expected a 2-D transaction matrix, got {data.ndim} dimensions")
        x = data.astype(bool)
        names = list(range(x.shape[1])) if item_names is None else list(item_names)
    else:
        transactions = [set(t) for t in data]
        names = sorted({i for t in transactions for i in t}, key=str) if item_names is None else list(item_names)
        pos = {name: j for j, name in enumerate(names)}
        x = np.zeros((len(transactions), len(names)), dtype=bool)
        for r, t in enumerate(transactions):
            for i in t:
                if i not in pos:
                    raise FairvisionError(f"fpgrowth: transaction {r + 1} has item {i!r} not in item_names")
                x[r, pos[i]] = True
    if len(names) != x.shape[1]:
        raise FairvisionError(f"fpgrowth: {len(names)} item names for {x.shape[1]} item columns")
    if len(set(names)) != len(names):
        raise FairvisionError("fpgrowth: item names must be unique")
    return x, names


def _min_count(min_support: float, n: int) -> int:
    if not 0 < min_support <= 1:
        raise FairvisionError(f"min_support must be in (0, 1], got {min_support}")
    # count / n >= min_support, robust to floating point (0.3 * 10 = 3.0000000000000004)
    return max(1, math.ceil(min_support * n - 1e-9))


class _Node:
    __slots__ = ("item", "count", "parent", "children")

    def __init__(self, item: int, parent: "_Node | None"):
        self.item = item
        self.count = 0
        self.parent = parent
        self.children: dict[int, _Node] = {}


def _build_tree(paths: Iterable[tuple[Sequence[int], int]], rank: dict[int, int]):
    """FP-tree of weighted paths whose items are already restricted to ``rank``'s keys.

    Returns the header table: item -> list of its nodes.
    """
    root = _Node(-1, None)
    header: dict[int, list[_Node]] = {}
    for items, count in paths:
        node = root
        for it in sorted((i for i in items if i in rank), key=rank.__getitem__):
            child = node.children.get(it)
            if child is None:
                child = _Node(it, node)
                node.children[it] = child
                header.setdefault(it, []).append(child)
            child.count += count
            node = child
    return header


def _mine(header: dict[int, list[_Node]], suffix: tuple[int, ...], min_count: int, max_len: int | None, out: list):
    # items of this (conditional) tree, least frequent first
    totals = {it: sum(nd.count for nd in nodes) for it, nodes in header.items()}
    for it in sorted(totals, key=lambda i: (totals[i], -i)):
        cnt = totals[it]
        if cnt < min_count:
            continue
        itemset = suffix + (it,)
        out.append((itemset, cnt))
        if max_len is not None and len(itemset) >= max_len:
            continue
        # conditional pattern base: prefix paths of every node of `it`
        base = []
        cond_counts: dict[int, int] = {}
        for nd in header[it]:
            path = []
            p = nd.parent
            while p is not None and p.item != -1:
                path.append(p.item)
                p = p.parent
            if path:
                base.append((path, nd.count))
                for q in path:
                    cond_counts[q] = cond_counts.get(q, 0) + nd.count
        keep = {q: c for q, c in cond_counts.items() if c >= min_count}
        if not keep:
            continue
        order = sorted(keep, key=lambda q: (-keep[q], q))
        rank = {q: r for r, q in enumerate(order)}
        _mine(_build_tree(base, rank), itemset, min_count, max_len, out)


def _itemset_frame(found: list[tuple[tuple[int, ...], int]], names: list, n: int) -> pd.DataFrame:
    rows = [(frozenset(names[i] for i in its), cnt / n, cnt, len(its)) for its, cnt in found]
    df = pd.DataFrame(rows, columns=["itemsets", "support", "count", "length"])
    if len(df):
        df["_key"] = [" & ".join(sorted(map(str, s))) for s in df["itemsets"]]
        df = df.sort_values(["support", "length", "_key"], ascending=[False, True, True], kind="mergesort")
        df = df.drop(columns="_key").reset_index(drop=True)
    return df


def fpgrowth(
    data,
    min_support: float = 0.1,
    *,
    max_len: int | None = None,
    item_names: Sequence[Hashable] | None = None,
) -> pd.DataFrame:
    """Frequent itemsets by FP-growth (Han, Pei and Yin 2000).

    Identical transactions are collapsed first (one weighted path per distinct
    row), so tables of categorical attributes with few distinct combinations
    build a small tree whatever their number of rows.

    Parameters
    ----------
    data : bool array (n_transactions, n_items), boolean DataFrame, or iterable of transactions
        One row (or one iterable of items) per transaction.
    min_support : float
        Keep itemsets with ``support >= min_support``.
    max_len : int, optional
        Longest itemset to report.
    item_names : sequence, optional
        Names of the item columns (default: DataFrame columns or column numbers).

    Returns
    -------
    pandas.DataFrame
        Columns ``itemsets`` (frozenset of item names), ``support``, ``count``
        and ``length``; sorted by support (descending), then length.
    """
    x, names = _as_matrix(data, item_names)
    n = x.shape[0]
    if n == 0:
        raise FairvisionError("fpgrowth: no transactions")
    if max_len is not None and max_len < 1:
        raise FairvisionError(f"max_len must be at least 1, got {max_len}")
    min_count = _min_count(min_support, n)
    if x.shape[1] == 0:
        return _itemset_frame([], names, n)
    rows, counts = np.unique(x, axis=0, return_counts=True)
    item_counts = counts @ rows.astype(np.int64)
    frequent = [j for j in range(x.shape[1]) if item_counts[j] >= min_count]
    order = sorted(frequent, key=lambda j: (-item_counts[j], j))
    rank = {j: r for r, j in enumerate(order)}
    paths = [(np.flatnonzero(r).tolist(), int(c)) for r, c in zip(rows, counts)]
    found: list = []
    _mine(_build_tree(paths, rank), (), min_count, max_len, found)
    return _itemset_frame(found, names, n)


def association_rules(
    itemsets: pd.DataFrame,
    *,
    min_confidence: float = 0.0,
    consequent: Hashable | Iterable[Hashable] | None = None,
    n_transactions: int | None = None,
) -> pd.DataFrame:
    """Association rules ``A -> C`` from frequent itemsets.

    Parameters
    ----------
    itemsets : DataFrame
        Output of :func:`fpgrowth`.
        Every subset of a listed itemset must be listed too, which holds for
        all frequent itemsets (downward closure) when ``max_len`` was not cut
        below the rule length.
    min_confidence : float
        Keep rules with ``confidence >= min_confidence``.
    consequent : item or iterable of items, optional
        Only rules with exactly this consequent (e.g. the "low score" item);
        default: every non-empty proper subset of each itemset. A string is
        one item; any other iterable is a set of items, so wrap an item that
        is itself a tuple in a list: ``consequent=[("score", "low")]``.
    n_transactions : int, optional
        Used to give rule counts when ``itemsets`` has no ``count`` column.

    Returns
    -------
    pandas.DataFrame
        Columns ``antecedent``, ``consequent`` (frozensets), ``support``,
        ``confidence``, ``lift``, ``antecedent_support``,
        ``consequent_support``, ``count`` and ``antecedent_count``; sorted by
        lift, then confidence, then support (all descending).
    """
    supp = dict(zip(itemsets["itemsets"], itemsets["support"]))
    counts = dict(zip(itemsets["itemsets"], itemsets["count"])) if "count" in itemsets else None
    if consequent is not None:
        if isinstance(consequent, (str, bytes)) or not isinstance(consequent, Iterable):
            consequent = [consequent]
        target = frozenset(consequent)
        if target not in supp:
            return pd.DataFrame(columns=_RULE_COLUMNS)
    rows = []
    for s in itemsets["itemsets"]:
        if len(s) < 2:
            continue
        if consequent is not None:
            cands = [target] if target < s else []
        else:
            items = sorted(s, key=str)
            cands = [frozenset(c) for k in range(1, len(items)) for c in itertools.combinations(items, k)]
        for c in cands:
            a = s - c
            if a not in supp or c not in supp:
                raise FairvisionError(
                    f"association_rules: subset {sorted(map(str, a if a not in supp else c))} of a frequent itemset is "
                    "missing; mine without max_len below the rule length"
                )
            conf = supp[s] / supp[a]
            if conf + 1e-12 < min_confidence:
                continue
            cnt = counts[s] if counts else (round(supp[s] * n_transactions) if n_transactions else np.nan)
            acnt = counts[a] if counts else (round(supp[a] * n_transactions) if n_transactions else np.nan)
            rows.append((a, c, supp[s], conf, conf / supp[c], supp[a], supp[c], cnt, acnt))
    df = pd.DataFrame(rows, columns=_RULE_COLUMNS)
    if len(df):
        df["_key"] = [" & ".join(sorted(map(str, a))) + " -> " + " & ".join(sorted(map(str, c)))
                      for a, c in zip(df["antecedent"], df["consequent"])]
        df = df.sort_values(["lift", "confidence", "support", "_key"], ascending=[False, False, False, True], kind="mergesort")
        df = df.drop(columns="_key").reset_index(drop=True)
    return df

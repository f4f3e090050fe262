"""Reference implementations (test oracles) for the bias diagnosis numerics.

Deliberately naive and independent of the code they check: they count every
itemset on the raw transaction matrix, and rebuild every bootstrap resample row
by row. Used by ``tests/test_diagnosis_*.py`` and ``benchmarks/bench_diagnosis.py``
(which puts this folder on ``sys.path``); not part of the package.
"""

from __future__ import annotations

import itertools
import math
from typing import Hashable, Iterable, Sequence

import numpy as np
import pandas as pd

from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci

RULE_COLUMNS = [
    "antecedent", "consequent", "support", "confidence", "lift",
    "antecedent_support", "consequent_support", "count", "antecedent_count",
]


def transaction_matrix(data, item_names: Sequence[Hashable] | None = None) -> tuple[np.ndarray, list]:
    """Boolean matrix and item names from a boolean matrix, a boolean DataFrame or a list of transactions."""
    if isinstance(data, pd.DataFrame):
        return data.to_numpy(dtype=bool), list(data.columns) if item_names is None else list(item_names)
    if isinstance(data, np.ndarray):
        x = data.astype(bool)
        return x, list(range(x.shape[1])) if item_names is None else list(item_names)
    transactions = [set(t) for t in data]
    names = sorted({i for t in transactions for i in t}, key=str) if item_names is None else list(item_names)
    x = np.array([[name in t for name in names] for t in transactions], dtype=bool).reshape(len(transactions), len(names))
    return x, names


def _sorted_frame(rows: list, columns: list[str], by: list[str], ascending: list[bool], key) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns)
    if len(df):
        df["_key"] = [key(r) for r in df.itertuples(index=False)]
        df = df.sort_values(by + ["_key"], ascending=ascending + [True], kind="mergesort")
        df = df.drop(columns="_key").reset_index(drop=True)
    return df


def frequent_itemsets_bruteforce(
    data,
    min_support: float = 0.1,
    *,
    max_len: int | None = None,
    item_names: Sequence[Hashable] | None = None,
) -> pd.DataFrame:
    """Count every itemset up to ``max_len`` directly (exponential; small inputs only).

    Same layout as :func:`fairvision.stats.itemsets.fpgrowth`: ``itemsets``,
    ``support``, ``count``, ``length``.
    """
    x, names = transaction_matrix(data, item_names)
    n, m = x.shape
    min_count = max(1, math.ceil(min_support * n - 1e-9))
    top = m if max_len is None else min(m, max_len)
    rows = []
    for k in range(1, top + 1):
        for combo in itertools.combinations(range(m), k):
            cnt = int(np.count_nonzero(x[:, list(combo)].all(axis=1)))
            if cnt >= min_count:
                rows.append((frozenset(names[i] for i in combo), cnt / n, cnt, k))
    return _sorted_frame(rows, ["itemsets", "support", "count", "length"], ["support", "length"], [False, True],
                         lambda r: " & ".join(sorted(map(str, r[0]))))


def association_rules_bruteforce(
    data,
    min_support: float = 0.1,
    *,
    min_confidence: float = 0.0,
    max_len: int | None = None,
    item_names: Sequence[Hashable] | None = None,
    consequent: Hashable | Iterable[Hashable] | None = None,
) -> pd.DataFrame:
    """Every split of every frequent itemset, measures recounted from the raw matrix.

    Same layout as :func:`fairvision.stats.itemsets.association_rules`.
    """
    x, names = transaction_matrix(data, item_names)
    n = x.shape[0]
    pos = {nm: j for j, nm in enumerate(names)}
    sets = frequent_itemsets_bruteforce(x, min_support, max_len=max_len, item_names=names)
    if consequent is not None and (isinstance(consequent, (str, bytes)) or not isinstance(consequent, Iterable)):
        consequent = [consequent]
    target = frozenset(consequent) if consequent is not None else None

    def count(items) -> int:
        return int(np.count_nonzero(x[:, [pos[i] for i in items]].all(axis=1)))

    rows = []
    for s in sets["itemsets"]:
        items = sorted(s, key=str)
        for k in range(1, len(items)):
            for cons in itertools.combinations(items, k):
                c = frozenset(cons)
                if target is not None and c != target:
                    continue
                a = s - c
                ns, na, nc = count(s), count(a), count(c)
                conf = ns / na
                if conf + 1e-12 < min_confidence:
                    continue
                rows.append((a, c, ns / n, conf, conf / (nc / n), na / n, nc / n, ns, na))
    return _sorted_frame(rows, RULE_COLUMNS, ["lift", "confidence", "support"], [False, False, False],
                         lambda r: " & ".join(sorted(map(str, r[0]))) + " -> " + " & ".join(sorted(map(str, r[1]))))


def group_mean_bootstrap_naive(values, groups, clusters, *, n_groups=None, n_boot=5000, seed=0, level=0.95, chunk=500):
    """Loop reference for :func:`fairvision.stats.resample.group_mean_ci`.

    Uses the same multinomial draws (same seed, same chunks), but rebuilds
    every resample as a list of rows and recomputes the group means with
    pandas, one replicate at a time.
    """
    values = np.asarray(values, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    clusters = np.asarray(clusters, dtype=np.int64)
    g = int(groups.max()) + 1 if n_groups is None else n_groups
    c = int(clusters.max()) + 1
    rows_of = [np.flatnonzero(clusters == k) for k in range(c)]
    rng = np.random.default_rng(seed)
    reps = np.empty((n_boot, g))
    b = 0
    for start in range(0, n_boot, chunk):
        w = cluster_bootstrap_weights(c, min(n_boot, start + chunk) - start, rng)
        for row in w:
            idx = np.concatenate([np.repeat(rows_of[k], int(row[k])) for k in range(c) if row[k] > 0])
            frame = pd.DataFrame({"g": groups[idx], "v": values[idx]})
            reps[b] = frame.groupby("g")["v"].mean().reindex(range(g)).to_numpy()
            b += 1
    est = pd.Series(values).groupby(groups).mean().reindex(range(g)).to_numpy()
    lo, hi = percentile_ci(reps, level)
    return pd.DataFrame({"estimate": est, "se": np.nanstd(reps, axis=0, ddof=1), "ci_low": lo, "ci_high": hi,
                         "level": level})

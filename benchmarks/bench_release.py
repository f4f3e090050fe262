"""Benchmark of privacy before release (docs/METHODS.md §13.10).

1. k-anonymity over ``n`` rows x 6 attributes, every attribute set (63 sets), sizes in distinct subjects.
   Fast: :func:`fairvision.stats.anonymity.k_anonymity` (codes of each set built from its prefix, dense
   re-numbering, ``bincount`` over distinct (cell, subject) pairs). Baseline: a plain Python loop over the rows
   of every set, a dict of value tuples to sets of subjects. Both answers (cells, smallest group, cells below k
   of every set) are asserted equal.
2. Date coarsening of ``n`` capture dates (ISO 8601 with a time) to the month. Fast:
   :func:`fairvision.audits.curation.release.coarsen_dates` (pandas, vectorised). Baseline: a Python loop of
   ``datetime.fromisoformat`` and ``strftime``. Outputs asserted equal.
3. Pseudonyms of ``n`` subject ids read as floats (a column with empty cells), the HMAC of each distinct id
   computed beforehand. Fast: :func:`fairvision.audits.curation.release.id_texts` and ``pseudonymise`` (one
   index look-up). Baseline: the per-cell loop it replaced (``id_text`` and a dict look-up per cell). Outputs
   asserted equal.

Both sides run in this one process with one thread (``_timing.pinned``), interleaved, median of the runs.
Run: ``.venv/bin/python benchmarks/bench_release.py`` (20,000 rows, under a minute) or ``--full`` (100,000 rows,
the size the method is specified for).
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections import defaultdict
from itertools import combinations

import numpy as np
import pandas as pd

from _timing import interleaved, load_note, pinned
from fairvision.audits.curation.release import coarsen_dates, id_text, id_texts, pseudonymise
from fairvision.io.pseudonyms import pseudonyms
from fairvision.stats.anonymity import k_anonymity

CARDS = (2, 4, 6, 8, 3, 10)  # values per attribute (gender, age band, skin, region, ...)
K = 5


def naive_k_anonymity(codes: np.ndarray, subjects: np.ndarray, k: int) -> dict:
    rows = codes.tolist()
    subj = subjects.tolist()
    out = {}
    m = codes.shape[1]
    for j in range(1, m + 1):
        for cols in combinations(range(m), j):
            cells = defaultdict(set)
            for r, s in zip(rows, subj):
                key = tuple(r[c] for c in cols)
                if min(key) >= 0:
                    cells[key].add(s)
            sizes = [len(v) for v in cells.values()]
            out[cols] = (len(cells), min(sizes), sum(x < k for x in sizes))
    return out


def fast_k_anonymity(codes, subjects, k):
    r = k_anonymity(codes, [[str(i) for i in range(c)] for c in CARDS], list("abcdef"), subjects=subjects, k=k)
    return {tuple("abcdef".index(a) for a in row.attributes.split(" × ")): (row.n_cells, row.min_size, row.n_cells_below_k)
            for row in r.by_set.itertuples()}


def naive_dates(values: list[str]) -> list[str]:
    return [dt.datetime.fromisoformat(v).strftime("%Y-%m") for v in values]


def print_timings(title: str, t: dict) -> None:
    """Each timing of ``t`` (``vectorised`` and ``python loop``) under ``title``, and their ratio."""
    print(title)
    for name, tm in t.items():
        print(f"  {name:12s} {tm.line()}")
    print(f"  ratio (python loop / vectorised): CPU {t['python loop'].cpu_median / t['vectorised'].cpu_median:.1f}x, "
          f"wall {t['python loop'].wall_median / t['vectorised'].wall_median:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="100,000 rows (default 20,000)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = 100_000 if args.full else 20_000
    rng = np.random.default_rng(0)
    codes = np.stack([rng.integers(0, c, n) for c in CARDS], axis=1)
    codes[rng.random(codes.shape) < 0.02] = -1  # 2% missing values
    subjects = rng.integers(0, n // 5, n)  # about 5 images per subject
    print(load_note())
    with pinned(1):
        t = interleaved({"vectorised": lambda: fast_k_anonymity(codes, subjects, K),
                         "python loop": lambda: naive_k_anonymity(codes, subjects, K)}, args.repeats)
        assert t["vectorised"].result == t["python loop"].result, "k-anonymity answers differ"
        print_timings(f"k-anonymity, {n:,} rows x {len(CARDS)} attributes, all 63 sets, subjects counted, k = {K}:", t)
        start = np.datetime64("2019-01-01T00:00:00")
        stamps = (start + rng.integers(0, 5 * 365 * 86400, n).astype("timedelta64[s]")).astype(str)
        values = [s.replace("T", " ") for s in stamps]
        series = pd.Series(values, dtype=object)
        t = interleaved({"vectorised": lambda: coarsen_dates(series, "month")[0].tolist(),
                         "python loop": lambda: naive_dates(values)}, args.repeats)
        assert t["vectorised"].result == t["python loop"].result, "coarsened dates differ"
        print_timings(f"date coarsening to the month, {n:,} values:", t)
        ids = pd.Series(subjects.astype(float))
        ids[rng.random(n) < 0.01] = np.nan
        mapping = pseudonyms(b"k" * 40, pd.unique(id_texts(ids.dropna())), "p_")
        t = interleaved({"vectorised": lambda: pseudonymise(id_texts(ids), mapping).tolist(),
                         "python loop": lambda: [None if v != v else mapping[id_text(v)] for v in ids]},
                        args.repeats)
        assert t["vectorised"].result == t["python loop"].result, "pseudonyms differ"
        print_timings(f"pseudonyms of {n:,} subject ids ({len(mapping):,} distinct):", t)


if __name__ == "__main__":
    main()

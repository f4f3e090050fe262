"""Benchmark: bias diagnosis hot paths against naive baselines, side by side.

1. Frequent itemsets for error patterns: :func:`fairvision.stats.itemsets.fpgrowth`
   vs the brute-force enumerator that counts every item combination on the raw
   transaction matrix (the test oracle in ``tests/oracles_diagnosis.py``). Table: ``--rows`` samples,
   6 categorical attributes (3-6 levels each) plus the low-score item; itemsets up to
   length 4. The results must be identical.
2. Cluster-bootstrap standard errors of the decision-tree rule means:
   :func:`fairvision.stats.resample.group_mean_ci` (per-subject sums, one matrix
   product per chunk of replicates) vs the oracle ``group_mean_bootstrap_naive``
   (rebuild every resample row by row and re-group it with pandas), both on the
   same multinomial draws, so the standard errors must agree to rounding.

    python benchmarks/bench_diagnosis.py [--rows 20000] [--subjects 1000] [--n-boot 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.audits.diagnosis.patterns import LOW_ITEM, low_score_flags, transaction_matrix
from fairvision.stats.itemsets import fpgrowth
from fairvision.stats.resample import group_mean_ci

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracles_diagnosis import frequent_itemsets_bruteforce, group_mean_bootstrap_naive


def _timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def bench_fpgrowth(rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    levels = {"pose": 4, "lighting": 3, "skin_tone": 6, "age": 5, "hair": 4, "scene": 3}
    df = pd.DataFrame({a: rng.choice([f"{a}{i}" for i in range(k)], rows, p=rng.dirichlet(np.full(k, 3.0)))
                       for a, k in levels.items()})
    score = rng.normal(0.8, 0.1, rows) - 0.2 * (df["lighting"] == "lighting0")
    x, names = transaction_matrix(df, list(levels))
    low, _ = low_score_flags(score, low_quantile=0.2)
    x = np.column_stack([x, low])
    names = names + [LOW_ITEM]
    fast, t_fast = _timed(fpgrowth, x, 0.01, max_len=4, item_names=names)
    slow, t_slow = _timed(frequent_itemsets_bruteforce, x, 0.01, max_len=4, item_names=names)
    assert dict(zip(fast["itemsets"], fast["count"])) == dict(zip(slow["itemsets"], slow["count"]))
    print(f"frequent itemsets: {rows:,} samples, {len(names)} items, min support 1%, length <= 4 -> {len(fast):,} itemsets")
    print(f"  brute force  {t_slow:8.3f} s")
    print(f"  FP-growth    {t_fast:8.3f} s   speed-up x{t_slow / t_fast:.1f}   (identical itemsets and counts)")


def bench_bootstrap(rows: int, subjects: int, n_boot: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    clusters = np.sort(rng.integers(0, subjects, rows))
    clusters = np.unique(clusters, return_inverse=True)[1]
    groups = rng.integers(0, 8, rows)  # 8 leaves of a depth-3 tree
    values = rng.normal(0.7, 0.15, rows)
    fast, t_fast = _timed(group_mean_ci, values, groups, clusters, n_boot=n_boot, seed=1)
    slow, t_slow = _timed(group_mean_bootstrap_naive, values, groups, clusters, n_boot=n_boot, seed=1)
    np.testing.assert_allclose(fast.to_numpy(), slow.to_numpy(), rtol=1e-9)
    _, t_5000 = _timed(group_mean_ci, values, groups, clusters, n_boot=5000, seed=1)
    print(f"rule-mean bootstrap SEs: {rows:,} samples, {clusters.max() + 1:,} subjects, 8 rules, {n_boot:,} resamples")
    print(f"  naive loop   {t_slow:8.3f} s")
    print(f"  vectorised   {t_fast:8.3f} s   speed-up x{t_slow / t_fast:.1f}   (same draws, equal SEs and CIs)")
    print(f"  vectorised, 5,000 resamples (FHIBE default): {t_5000:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--boot-rows", type=int, default=3000)
    ap.add_argument("--n-boot", type=int, default=1000)
    args = ap.parse_args()
    bench_fpgrowth(args.rows)
    bench_bootstrap(args.boot_rows, args.subjects, args.n_boot)


if __name__ == "__main__":
    main()

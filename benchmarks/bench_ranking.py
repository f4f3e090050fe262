"""Benchmark of the ranking measures (docs/METHODS.md §8.5), fast vs naive.

Two cases over 6 groups with 1,000 query-bootstrap replicates: 5,000 queries x top 20 of a 20,000-item pool (the
permutation test by its normal approximation) and 400 queries x top 10 of a 400-item pool (9,999 Monte Carlo
permutations). Fast: :func:`fairvision.stats.ranking.ranking_fairness` (vectorised over queries x ranks x groups,
the bootstrap as one matrix product per chunk, the permutations as one ``bincount`` per chunk). Baseline: the
measures per query in a Python loop (Geyik et al.'s definitions written out; run on 200 queries and
extrapolated), then one bootstrap replicate and one permutation at a time; the subset's NDKL is asserted equal
to 1e-12. Drawing the permutations dominates the Monte Carlo test either way (numpy's ``permuted`` over a matrix
is no faster than a loop of ``permutation``), so for small pools the two are about even; the gain is in the
measures and, for large pools, in the exact normal approximation.

Run: ``.venv/bin/python benchmarks/bench_ranking.py``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fairvision.stats.ranking import RankingPool, ranking_fairness, ranking_measures


def naive_ndkl(seq, desired) -> float:
    z = sum(1 / math.log2(i + 1) for i in range(1, len(seq) + 1))
    total = 0.0
    for i in range(1, len(seq) + 1):
        counts = [seq[:i].count(a) for a in range(len(desired))]
        total += sum(c / i * math.log(c / i / d) for c, d in zip(counts, desired) if c) / math.log2(i + 1)
    return total / z


def naive(codes, items, pool, desired, n_boot: int, n_perm: int, sub: int) -> float:
    """Seconds of the straightforward version: measures per query in Python, one bootstrap replicate and one
    permutation at a time (each in numpy); the per-query loop runs on ``sub`` queries and is extrapolated."""
    n_q, k = codes.shape
    g = len(desired)
    disc = [1 / math.log2(i + 1) for i in range(1, k + 1)]
    t0 = time.perf_counter()
    per_query = []
    for row in codes[:sub]:
        seq = list(row)
        share = [seq.count(a) / k for a in range(g)]
        skew = [math.log(max(s, 1 / k) / d) for s, d in zip(share, desired)]
        exposure = [sum(w for w, c in zip(disc, seq) if c == a) for a in range(g)]
        per_query.append([naive_ndkl(seq, desired), max(skew), min(skew), *share, *exposure])
    t_measures = (time.perf_counter() - t0) * n_q / sub
    values = np.resize(np.asarray(per_query), (n_q, len(per_query[0])))
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for _ in range(n_boot):
        values[rng.integers(0, n_q, n_q)].mean(axis=0)
    t_boot = time.perf_counter() - t0
    t0 = time.perf_counter()
    weights, att = np.zeros(len(pool)), np.zeros(len(pool))
    np.add.at(weights, items.ravel(), 1.0 / (k * n_q))
    np.add.at(att, items.ravel(), np.tile(np.asarray(disc) / sum(disc) / n_q, n_q))
    for _ in range(n_perm):
        shuffled = rng.permutation(pool)
        np.bincount(shuffled, weights=weights, minlength=g)
        np.bincount(shuffled, weights=att, minlength=g)
    t_perm = time.perf_counter() - t0
    return t_measures + t_boot + t_perm


def main() -> None:
    rng = np.random.default_rng(0)
    desired = np.array([0.05, 0.15, 0.15, 0.25, 0.3, 0.1])
    for n_q, k, n_items in ((5000, 20, 20000), (400, 10, 400)):
        pool = rng.choice(len(desired), size=n_items, p=desired)
        items = np.stack([rng.choice(n_items, k, replace=False) for _ in range(n_q)])
        codes = pool[items]
        t0 = time.perf_counter()
        res = ranking_fairness(codes, desired, pool=RankingPool(items, pool), n_boot=1000)
        fast = time.perf_counter() - t0
        sub = 200
        np.testing.assert_allclose(ranking_measures(codes[:sub], desired)["ndkl"],
                                   [naive_ndkl(list(row), desired) for row in codes[:sub]], rtol=1e-12)
        n_perm = res.meta["n_perm"]
        slow = naive(codes, items, pool, desired, 1000, n_perm, sub)
        test = f"{n_perm:,} permutations" if n_perm else "normal approximation of the permutation test"
        print(f"{n_q:,} queries x top {k}, pool {n_items:,}, 1,000 bootstrap replicates, {test}: "
              f"fast {fast:.2f} s, naive {slow:.2f} s ({slow / fast:.1f}x)")


if __name__ == "__main__":
    main()

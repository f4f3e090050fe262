"""Benchmark of the retrieval audit: Monte Carlo power grid and k-NN search, fast vs naive.

1. Power grid (docs/METHODS.md §8.3, Algorithm 1): 1,000 trials x 25 risk
   ratios x 3 catalog sizes (100, 250, 1000) with the paper's ST1..ST6
   distribution, K = 6, alpha = 0.01; omnibus test and the six contrast tests
   per trial. Fast: :func:`fairvision.stats.power.power_grid` (all trials of a
   cell drawn at once, statistics as array operations). Baseline: a
   straightforward per-trial loop that draws its own counts (one multinomial
   call per trial and query value) and calls :func:`scipy.stats.chi2_contingency`
   for the omnibus table and each 2 x 2 contrast table. The baseline runs on a
   subset of the cells and is extrapolated to the full grid (it would take
   minutes). Two checks per subset cell:

   a. on the same counts, the per-trial scipy tests and the fast statistics
      (``omnibus_reject``, ``contrast_reject``) make the same decision in every
      trial (statistics, degrees of freedom and dropped empty rows and columns
      agree);
   b. the baseline's power from its own draws agrees with the fast power within
      4 Monte Carlo standard errors of a difference of two independent
      estimates. Not exactly: both draw from ``default_rng(seed)``, but the
      probability vectors they pass to numpy differ in the last bit (each
      normalisation ``p / p.sum()`` moves it: the paper's shares sum to
      0.9999999999999999), a 1-ulp change of a binomial probability now and
      then changes one count, and the binomial samplers then consume a
      different number of random numbers, so the rest of the stream is
      independent: the two powers are two Monte Carlo estimates of the same
      quantity (e.g. 0.806 vs 0.833 at n = 1,000, RR = 1.587 is 1.6 standard
      errors).
2. k-NN top-6 over 50,000 x 512 float32 embeddings (every item queries,
   itself excluded). Fast: :func:`fairvision.stats.knn.knn_search`. Baseline:
   a per-query loop of exact float64 distances to the whole catalog and a
   stable argsort, run on a subset of queries and extrapolated; the subset's
   neighbours are asserted identical and distances equal to 1e-9.

Run: ``.venv/bin/python benchmarks/bench_retrieval.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy import stats as st

from fairvision.stats.knn import knn_search
from fairvision.stats.power import (PAPER_P_Z, biased_distributions, contrast_reject, default_rr_grid, omnibus_reject,
                                    power_grid, simulate_counts)

K, ALPHA, TRIALS = 6, 0.01, 1000
NS = (100, 250, 1000)


def naive_draws(p, rr, n, k=K, trials=TRIALS, seed=0):
    """Per-trial draws: the query counts, then one multinomial call per trial and query value."""
    rng = np.random.default_rng(seed)
    ps = biased_distributions(p, rr)
    queries = rng.multinomial(n, p, size=trials)
    results = np.stack([np.stack([rng.multinomial(q[j] * k, ps[j]) for j in range(len(p))]) for q in queries])
    return queries, results


def naive_tests(queries, results, k=K, alpha=ALPHA):
    """Per-trial loop with one scipy call per table (the straightforward implementation): the omnibus
    decision (trials,) and the contrast decisions (trials, V)."""
    trials, v = queries.shape
    om = np.zeros(trials, dtype=bool)
    con = np.zeros((trials, v), dtype=bool)
    for t in range(trials):
        q, res = queries[t], results[t]
        n = q.sum()
        table = np.vstack([res, q])
        table = table[table.sum(1) > 0][:, table.sum(0) > 0]
        om[t] = min(table.shape) > 1 and st.chi2_contingency(table, correction=False).pvalue < alpha
        for j in range(v):
            if q[j] == 0:
                continue
            a = res[j, j]
            tab = np.array([[a, q[j] * k - a], [q[j], n - q[j]]])
            tab = tab[:, tab.sum(0) > 0]
            con[t, j] = tab.shape[1] > 1 and st.chi2_contingency(tab, correction=False).pvalue < alpha
    return om, con


def naive_power_cell(p, rr, n, k=K, alpha=ALPHA, trials=TRIALS, seed=0):
    """The baseline end to end: its own per-trial draws and per-trial scipy tests."""
    om, con = naive_tests(*naive_draws(p, rr, n, k, trials, seed), k, alpha)
    return np.concatenate([[om.mean()], con.mean(axis=0)])


def mc_tolerance(a, b, trials=TRIALS, z=4.0):
    """``z`` standard errors of the difference of two independent Monte Carlo powers (the binomial
    variance floored at 1 / trials, so that powers of 0 or 1 still get a tolerance)."""
    var = np.maximum(a * (1 - a), 1.0 / trials) / trials + np.maximum(b * (1 - b), 1.0 / trials) / trials
    return z * np.sqrt(var)


def naive_knn(x, queries, k=6):
    x64 = x.astype(np.float64)
    out_i, out_d = [], []
    for qi in queries:
        diff = x64 - x64[qi]
        d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        d[qi] = np.inf
        order = np.argsort(d, kind="stable")[:k]
        out_i.append(order)
        out_d.append(d[order])
    return np.array(out_i), np.array(out_d)


def bench_power(quick: bool) -> None:
    p = np.array(list(PAPER_P_Z.values()))
    p = p / p.sum()
    rrs = default_rr_grid(25)
    print(f"power grid: {TRIALS} trials x {len(rrs)} risk ratios x {len(NS)} catalog sizes {NS}, K={K}, alpha={ALPHA}")
    t0, c0 = time.perf_counter(), time.process_time()
    grid = power_grid(PAPER_P_Z, rrs=rrs, ns=NS, k=K, alpha=ALPHA, trials=TRIALS, seed=0)
    fast, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  fast (vectorised):      {fast:8.2f} s for {len(grid)} cells ({cpu:.1f} s CPU)")
    subset = [(100, rrs[3]), (250, rrs[12]), (1000, rrs[20])] if not quick else [(250, rrs[12])]
    naive_sub = 0.0
    for n, rr in subset:
        got = grid.loc[(n, float(rr))].drop("nrr").to_numpy()
        # a. the fast statistics and the per-trial scipy tests on the same counts: every decision equal
        q, r = simulate_counts(p, float(rr), n, K, TRIALS, 0)
        om, con = naive_tests(q, r)
        assert np.array_equal(om, omnibus_reject(q, r, ALPHA)), ("omnibus decisions", n, rr)
        assert np.array_equal(con, contrast_reject(q, r, K, ALPHA)), ("contrast decisions", n, rr)
        # b. the baseline end to end, on its own draws
        t0 = time.perf_counter()
        ref = naive_power_cell(p, rr, n)
        naive_sub += time.perf_counter() - t0
        tol = mc_tolerance(ref, got)
        z = np.abs(ref - got) / (tol / 4.0)
        print(f"  n = {n:4d}, RR = {rr:.3f}: same counts -> the same {TRIALS * (1 + len(p))} decisions; own draws: "
              f"{int((ref != got).sum())} of {len(got)} powers differ, largest |difference| "
              f"{np.abs(ref - got).max():.3f} = {z.max():.1f} Monte Carlo SE")
        assert (np.abs(ref - got) <= tol).all(), ("beyond 4 Monte Carlo SE", n, rr, ref, got)
    naive = naive_sub / len(subset) * len(grid)
    print(f"  naive (per-trial draws and scipy): {naive_sub:8.2f} s for {len(subset)} cells -> extrapolated "
          f"{naive:8.1f} s for {len(grid)} cells")
    print(f"  checks passed on the {len(subset)} cells; speed-up x{naive / fast:.0f}")
    om = grid["omnibus"].unstack("n")
    print("  omnibus power (rows RR, columns n):")
    for rr in om.index[::3]:
        print(f"    RR {rr:5.3f}: " + "  ".join(f"{om.loc[rr, n]:.3f}" for n in NS))


def bench_knn(quick: bool) -> None:
    n, d = (10_000, 512) if quick else (50_000, 512)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    print(f"k-NN: top-6 of {n:,} x {d} float32 embeddings, Euclidean, every item queries")
    t0, c0 = time.perf_counter(), time.process_time()
    res = knn_search(x, k=6)
    fast, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  fast (blockwise BLAS + chunk screening + exact re-rank): {fast:8.2f} s wall, {cpu:.1f} s CPU "
          f"(all threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    sub = np.arange(0, n, n // 200)[:200]
    t0 = time.perf_counter()
    idx, dist = naive_knn(x, sub)
    naive_sub = time.perf_counter() - t0
    naive = naive_sub / len(sub) * n
    got_i = res["item_id"].astype(int).to_numpy().reshape(n, 6)[sub]
    got_d = res["distance"].to_numpy().reshape(n, 6)[sub]
    assert np.array_equal(got_i, idx)
    assert np.allclose(got_d, dist, rtol=0, atol=1e-9)
    print(f"  naive (per-query float64 loop): {naive_sub:8.2f} s for {len(sub)} queries -> extrapolated {naive:8.1f} s")
    print(f"  identical neighbours on the {len(sub)} checked queries; speed-up x{naive / fast:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller k-NN problem and one baseline cell")
    ap.add_argument("--only", choices=["power", "knn"], default=None)
    args = ap.parse_args()
    if args.only in (None, "power"):
        bench_power(args.quick)
    if args.only in (None, "knn"):
        bench_knn(args.quick)


if __name__ == "__main__":
    main()

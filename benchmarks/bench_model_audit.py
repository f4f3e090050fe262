"""Benchmark of the model audit's hot paths, fast implementation next to the naive baseline.

1. All-pairs Mann-Whitney U over 300 groups (44,850 pairs, 20-200 scores each):
   ``fairvision.stats.pairwise_mannwhitney`` (sort once, U and tie terms from
   per-group counts over global tie blocks) against a Python loop over
   ``scipy.stats.mannwhitneyu``; asserts identical p-values (max abs diff <= 1e-9)
   and a speed-up of at least 50x. Run on continuous and on tied scores.
2. 1,234 groups (FHIBE's intersection count): must finish in under 30 s.
3. TAR at FAR = 0.001 over 5 million pairs: ``tar_at_far`` (partial sort)
   against ``sklearn.metrics.roc_curve`` (full sort); asserts equal TAR and
   under 5 s.

Run: ``.venv/bin/python benchmarks/bench_model_audit.py`` (about a minute on 2 cores).
``--quick``: 60 groups, 300 at FHIBE scale and 500,000 pairs; checks the
results against the references but not the speed limits (a few seconds).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy import stats

sys.path.insert(0, "src")
QUICK = "--quick" in sys.argv
N_GROUPS = 60 if QUICK else 300
N_FHIBE = 300 if QUICK else 1234
N_PAIRS = 500_000 if QUICK else 5_000_000

from fairvision.metrics.verification import tar_at_far  # noqa: E402
from fairvision.stats.pairwise import pairwise_mannwhitney  # noqa: E402


def make_groups(n_groups: int, rng: np.random.Generator, tied: bool):
    sizes = rng.integers(20, 201, n_groups)
    shift = rng.normal(0, 0.02, n_groups)
    vals = [np.clip(rng.normal(0.7 + s, 0.15, n), 0, 1) for n, s in zip(sizes, shift)]
    if tied:  # per-image recall over 10 IoU thresholds takes 11 values
        vals = [np.round(v * 10) / 10 for v in vals]
    x = np.concatenate(vals)
    g = np.repeat(np.arange(n_groups), sizes)
    return vals, x, g


def bench_pairwise(tied: bool) -> float:
    rng = np.random.default_rng(1 if tied else 0)
    vals, x, g = make_groups(N_GROUPS, rng, tied)
    t0 = time.perf_counter()
    res = pairwise_mannwhitney(x, g, correction="bonferroni")
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    p_ref = np.empty(len(res))
    u_ref = np.empty(len(res))
    for k, (a, b) in enumerate(zip(res["group_a"].to_numpy(), res["group_b"].to_numpy())):
        r = stats.mannwhitneyu(vals[a], vals[b], alternative="two-sided")
        p_ref[k], u_ref[k] = r.pvalue, r.statistic
    t_naive = time.perf_counter() - t0
    diff = float(np.max(np.abs(res["pvalue"].to_numpy() - p_ref)))
    kind = "tied (11 values)" if tied else "continuous"
    print(f"pairwise MWU, {N_GROUPS} groups, {len(res):,} pairs, {x.size:,} scores, {kind}:")
    print(f"  scipy loop {t_naive:8.3f} s | fairvision {t_fast:6.3f} s | speed-up {t_naive / t_fast:6.1f}x | "
          f"max |dp| {diff:.2e} | exact pairs {int((res['method'] == 'exact').sum())}")
    assert len(res) == N_GROUPS * (N_GROUPS - 1) // 2
    assert diff <= 1e-9, diff
    assert np.array_equal(res["u"].to_numpy(), u_ref)
    return t_naive / t_fast


def bench_fhibe_scale() -> float:
    rng = np.random.default_rng(2)
    _, x, g = make_groups(N_FHIBE, rng, tied=True)
    t0 = time.perf_counter()
    res = pairwise_mannwhitney(x, g)
    t = time.perf_counter() - t0
    print(f"pairwise MWU, {N_FHIBE:,} groups, {len(res):,} pairs, {x.size:,} scores: {t:.2f} s (limit 30 s)")
    # spot-check 200 random pairs against scipy
    vals = {k: x[g == k] for k in range(N_FHIBE)}
    pick = rng.choice(len(res), 200, replace=False)
    d = max(abs(res["pvalue"].iat[i] - stats.mannwhitneyu(vals[res["group_a"].iat[i]], vals[res["group_b"].iat[i]]).pvalue)
            for i in pick)
    print(f"  spot check of 200 pairs against scipy: max |dp| {d:.2e}")
    assert d <= 1e-9 and t < 30
    return t


def bench_tar() -> float:
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(3)
    n = N_PAIRS
    genuine = rng.random(n) < 0.01
    scores = rng.normal(0, 1, n) + 3.0 * genuine
    t0 = time.perf_counter()
    r = tar_at_far(scores, genuine, far=0.001)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    fpr, tpr, _ = roc_curve(genuine, scores, drop_intermediate=False)
    tar_ref = float(tpr[fpr <= 0.001].max())
    t_naive = time.perf_counter() - t0
    print(f"TAR@FAR=0.001 over {n:,} pairs: sklearn roc_curve {t_naive:.3f} s | fairvision {t_fast:.3f} s | "
          f"speed-up {t_naive / t_fast:.1f}x | TAR {r.tar:.6f} vs {tar_ref:.6f} (limit 5 s)")
    assert abs(r.tar - tar_ref) < 1e-12 and t_fast < 5
    return t_fast


if __name__ == "__main__":
    s1 = bench_pairwise(tied=False)
    s2 = bench_pairwise(tied=True)
    t = bench_fhibe_scale()
    tt = bench_tar()
    print(f"summary: speed-up {s1:.1f}x (continuous), {s2:.1f}x (tied); {N_FHIBE:,} groups {t:.2f} s; "
          f"TAR {N_PAIRS:,} pairs {tt:.3f} s")
    if not QUICK:
        assert min(s1, s2) >= 50, "pairwise speed-up below 50x"

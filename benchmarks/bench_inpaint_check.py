"""Benchmark of the in-painting utility check (docs/METHODS.md §13.11).

``n`` samples (2 per subject) x 5 score columns, scores before and after in-painting, 1,000 subject-bootstrap
resamples. Fast: :func:`fairvision.audits.curation.inpainting.audit_inpaint_utility` (every column's replicates
from one set of subject weights, a sparse matrix product per chunk of replicates; one Wilcoxon signed-rank test per
column). Baseline: the textbook loop: for every column and every replicate, take the replicate's subjects (the
same draws, :func:`fairvision.stats.resample.cluster_bootstrap_weights` with the same seed), gather their rows
and average the differences; the same Wilcoxon test. Estimates, interval ends and p-values are asserted equal.

Both sides run in this one process with one thread (``_timing.pinned``), interleaved, median of the runs.
Run: ``.venv/bin/python benchmarks/bench_inpaint_check.py`` (10,000 samples, under a minute) or ``--full``
(100,000 samples, the size of the issue; the baseline then takes minutes).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

from _timing import interleaved, load_note, pinned
from fairvision.audits.curation.inpainting import audit_inpaint_utility
from fairvision.audits.settings import AuditSettings
from fairvision.stats.resample import cluster_bootstrap_weights

K = 5
PER_SUBJECT = 2


def tables(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = [f"s{i}" for i in range(n)]
    data = pd.DataFrame({"sample_id": ids, "subject_id": [f"p{i // PER_SUBJECT}" for i in range(n)]})
    before = pd.DataFrame({"sample_id": ids, **{f"m{j}": rng.random(n) for j in range(K)}})
    after = before.copy()
    touched = rng.random(n) < 0.1  # about 10% of images in-painted (FHIBE)
    for j in range(K):
        after.loc[touched, f"m{j}"] += rng.normal(-0.01 * j, 0.05, int(touched.sum()))
    return data, before, after


def naive(data: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame, n_boot: int, seed: int = 0) -> pd.DataFrame:
    subj = pd.factorize(data["subject_id"])[0]
    n_subj = int(subj.max()) + 1
    rows_of = [np.flatnonzero(subj == s) for s in range(n_subj)] if len(subj) < 20_000 else \
        np.split(np.argsort(subj, kind="stable"), np.cumsum(np.bincount(subj))[:-1])
    draws = cluster_bootstrap_weights(n_subj, n_boot, seed).astype(np.int64)  # the draws the audit makes
    out = []
    for j in range(K):
        d = after[f"m{j}"].to_numpy() - before[f"m{j}"].to_numpy()
        reps = []
        for b in range(n_boot):
            pick = np.repeat(np.arange(n_subj), draws[b])
            reps.append(d[np.concatenate([rows_of[s] for s in pick])].mean())
        per = np.round(pd.Series(d).groupby(subj).mean().to_numpy(), 12)
        res = stats.wilcoxon(per[per != 0])
        out.append({"metric": f"m{j}", "estimate": d.mean(), "ci_low": np.quantile(reps, 0.025),
                    "ci_high": np.quantile(reps, 0.975), "pvalue": res.pvalue})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="100,000 samples (default 10,000)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = 100_000 if args.full else 10_000
    data, before, after = tables(n)
    settings = AuditSettings(n_boot=args.n_boot)
    print(load_note())
    with pinned(1):
        t = interleaved({"vectorised": lambda: audit_inpaint_utility(before, after, data=data, settings=settings).table,
                         "python loop": lambda: naive(data, before, after, args.n_boot)}, args.repeats)
    fast, slow = t["vectorised"].result, t["python loop"].result
    for col in ("estimate", "ci_low", "ci_high", "pvalue"):
        assert np.allclose(fast[col], slow[col], rtol=1e-9, atol=1e-12), (col, fast, slow)
    print(f"paired utility check, {n:,} samples ({n // PER_SUBJECT:,} subjects) x {K} score columns, "
          f"{args.n_boot:,} subject-bootstrap resamples, Wilcoxon per column:")
    for name, tm in t.items():
        print(f"  {name:12s} {tm.line()}")
    print(f"  ratio (python loop / vectorised): CPU {t['python loop'].cpu_median / t['vectorised'].cpu_median:.1f}x, "
          f"wall {t['python loop'].wall_median / t['vectorised'].wall_median:.1f}x")


if __name__ == "__main__":
    main()

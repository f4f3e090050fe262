"""Benchmark of the classifier audit's bootstrap (docs/METHODS.md §6.6), fast implementation next to a naive baseline.

1,000,000 samples x 4 attributes (5 groups each), a binary classifier, 1,000 bootstrap resamples of every
group's confusion counts, all nine rates and all nine criteria with percentile CIs:

- fast: ``fairvision.stats.rates``: one ``bincount`` cell per (attribute set, group, true, predicted), the
  replicates of every cell at once from the cluster bootstrap's per-cell counts
  (``confusion_replicates``: subject profiles x multinomial draws), then rates and criteria as array
  arithmetic over (replicate, group); no loop over groups or replicates;
- naive: for every resample, ``DataFrame.iloc`` of the drawn rows and a pandas ``groupby`` per attribute
  computing the same counts and rates, the loop most scripts write. It runs ``NAIVE_REPS`` resamples and its
  time is scaled to 1,000 (it is linear in the resamples).

Checks: the point estimates of both sides are equal; on the same data the bootstrap standard errors of the
selection rates agree within 25% (different random draws). Also times the whole ``audit_classifier``
(tests, intervals, coverage) on the same table.

Run: ``.venv/bin/python benchmarks/bench_classifier.py`` (about a minute on 2 cores); ``--quick``: 100,000 rows.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, "src")
sys.path.insert(0, "benchmarks")
QUICK = "--quick" in sys.argv
N = 100_000 if QUICK else 1_000_000
N_BOOT = 1000
NAIVE_REPS = 20 if QUICK else 10
ATTRS = ["a1", "a2", "a3", "a4"]

from _timing import load_note, pinned  # noqa: E402

from fairvision.audits.classifier import audit_classifier  # noqa: E402
from fairvision.audits.settings import AuditSettings  # noqa: E402
from fairvision.groups import intersections  # noqa: E402
from fairvision.stats.rates import RATES, confusion_cells, confusion_replicates, criteria, one_vs_rest, rates_from_counts  # noqa: E402
from fairvision.stats.resample import percentile_ci  # noqa: E402


def make_data(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({a: rng.choice([f"{a}_{k}" for k in range(5)], n) for a in ATTRS})
    y = rng.integers(0, 2, n)
    bias = 0.1 * (df["a1"] == "a1_0").to_numpy()
    df["y_true"] = y
    df["y_pred"] = (rng.random(n) < 0.2 + 0.6 * y + bias).astype(int)
    df["sample_id"] = np.arange(n)
    return df


def fast(df: pd.DataFrame) -> dict:
    """Rates and criteria of every group of the four attributes, with percentile CIs over N_BOOT resamples."""
    inters = intersections(df, ATTRS, 1)
    t_codes, p_codes = df["y_true"].to_numpy(), df["y_pred"].to_numpy()
    offsets = np.cumsum([0] + [i.n_cells * 4 for i in inters])
    cells = np.concatenate([confusion_cells(i.codes, t_codes[i.rows], p_codes[i.rows], 2) + o for i, o in zip(inters, offsets)])
    rows = np.concatenate([i.rows for i in inters])
    reps = confusion_replicates(rows, cells, int(offsets[-1]), len(df), None, n_boot=N_BOOT, seed=0)
    point = np.bincount(cells, minlength=int(offsets[-1])).astype(float)
    out = {}
    for inter, lo in zip(inters, offsets):
        G = inter.n_cells
        conf, conf_reps = point[lo:lo + G * 4].reshape(G, 2, 2), reps[:, lo:lo + G * 4].reshape(-1, G, 2, 2)
        est, rep = rates_from_counts(*one_vs_rest(conf, 1)), rates_from_counts(*one_vs_rest(conf_reps, 1))
        judged = np.ones(G, bool)
        ci = {name: percentile_ci(rep[name]) for name in RATES}
        crit, crit_rep = criteria(est, judged), criteria(rep, judged)
        out[inter.name] = {"rates": est, "rate_ci": ci, "rate_se": {k: rep[k].std(axis=0, ddof=1) for k in RATES},
                           "criteria": crit, "criteria_ci": {k: percentile_ci(v) for k, v in crit_rep.items()}}
    return out


def naive_rates(d: pd.DataFrame, attr: str) -> pd.DataFrame:
    g = d.groupby(attr)
    tp = g.apply(lambda x: ((x.y_true == 1) & (x.y_pred == 1)).sum(), include_groups=False)
    fp = g.apply(lambda x: ((x.y_true == 0) & (x.y_pred == 1)).sum(), include_groups=False)
    fn = g.apply(lambda x: ((x.y_true == 1) & (x.y_pred == 0)).sum(), include_groups=False)
    tn = g.apply(lambda x: ((x.y_true == 0) & (x.y_pred == 0)).sum(), include_groups=False)
    n = tp + fp + fn + tn
    tpr, tnr = tp / (tp + fn), tn / (tn + fp)
    return pd.DataFrame({"selection_rate": (tp + fp) / n, "tpr": tpr, "fpr": fp / (fp + tn), "fnr": fn / (tp + fn),
                         "tnr": tnr, "precision": tp / (tp + fp), "npv": tn / (tn + fn), "accuracy": (tp + tn) / n,
                         "balanced_accuracy": (tpr + tnr) / 2})


def naive(df: pd.DataFrame, n_reps: int) -> tuple[dict, dict]:
    """Point rates, and ``n_reps`` bootstrap replicates, by a pandas groupby loop over resamples and attributes."""
    rng = np.random.default_rng(1)
    point = {a: naive_rates(df, a) for a in ATTRS}
    reps = {a: [] for a in ATTRS}
    for _ in range(n_reps):
        d = df.iloc[rng.integers(0, len(df), len(df))]
        for a in ATTRS:
            r = naive_rates(d, a)
            reps[a].append(r)
            dp = r["selection_rate"].max() - r["selection_rate"].min()  # noqa: F841 (what the loop would report)
    return point, reps


def main() -> None:
    df = make_data(N)
    print(f"{N:,} rows x {len(ATTRS)} attributes (5 groups each), {N_BOOT:,} resamples; {load_note()}")
    with pinned(1):
        t0 = time.process_time()
        w0 = time.perf_counter()
        res = fast(df)
        t_fast, w_fast = time.process_time() - t0, time.perf_counter() - w0
        t0 = time.process_time()
        w0 = time.perf_counter()
        point, reps = naive(df, NAIVE_REPS)
        t_naive, w_naive = time.process_time() - t0, time.perf_counter() - w0
    per_rep = t_naive / (NAIVE_REPS + 1)  # the point estimate costs about one resample
    naive_full = per_rep * (N_BOOT + 1)
    print(f"fast (vectorised, {N_BOOT:,} resamples): CPU {t_fast:.2f} s, wall {w_fast:.2f} s")
    print(f"naive (pandas groupby loop): CPU {t_naive:.2f} s for {NAIVE_REPS} resamples -> {naive_full:.0f} s "
          f"for {N_BOOT:,} (scaled; wall {w_naive:.2f} s)")
    print(f"speed-up: {naive_full / t_fast:.0f}x (CPU)")
    worst = 0.0
    for a in ATTRS:
        ours = res[a]["rates"]
        for name in RATES:
            worst = max(worst, float(np.max(np.abs(ours[name] - point[a][name].to_numpy()))))
    print(f"largest difference of point estimates: {worst:.2e}")
    assert worst < 1e-12, worst
    # the standard errors of the two bootstraps (different draws): a quick check with 200 naive resamples
    small = df.iloc[:20_000]
    se_fast = fast(small)["a1"]["rate_se"]["selection_rate"]
    _, r = naive(small, 200)
    se_naive = pd.concat([x["selection_rate"] for x in r["a1"]], axis=1).std(axis=1, ddof=1).to_numpy()
    ratio = se_fast / se_naive
    print(f"bootstrap SE of selection rate, fast / naive (20,000 rows, 200 naive resamples): {np.round(ratio, 2)}")
    assert np.all(np.abs(ratio - 1) < 0.25), ratio
    t0 = time.process_time()
    w0 = time.perf_counter()
    audit = audit_classifier(df, ATTRS, settings=AuditSettings(n_boot=N_BOOT), source="benchmark")
    print(f"whole audit_classifier ({N:,} rows, 4 attributes, {N_BOOT:,} resamples, tests and coverage): "
          f"CPU {time.process_time() - t0:.2f} s, wall {time.perf_counter() - w0:.2f} s; "
          f"demographic parity difference by a1 {audit.quantities()['demographic_parity_difference.a1']:.3f}")


if __name__ == "__main__":
    main()

"""Benchmark: what exclusions do (``audit_exclusions``, docs/METHODS.md §13.12) beside a naive loop.

A synthetic table of images (several per subject) with 4 attributes (10 regions, 6 skin tones, 5 ages, 2
pronouns); 30% of the images removed, more often for some groups, with one of three reasons. Compared: all
attribute sets up to pairs (4 + 6 = 10 sets): counts and shares before and after, the shifts, NSD before and
after, the kept-vs-removed test per attribute, the tests by reason.

- point estimates (``n_boot = 0``): fairvision against a naive loop that walks the rows in Python, counting
  every attribute set into dicts, then scipy's ``chi2_contingency`` per attribute and reason; interleaved runs,
  median, both pinned to the same thread count;
- the intervals: fairvision with ``n_boot`` subject-bootstrap replicates against the naive bootstrap (draw
  subjects, rebuild the table with pandas, re-count every set), run for a few replicates and extrapolated, as
  printed.

    python benchmarks/bench_exclusions.py            # 20,000 images, 200 replicates (well under a minute)
    python benchmarks/bench_exclusions.py --full     # 100,000 images, 1,000 replicates
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.dirname(__file__))
from _timing import interleaved, load_note, pinned  # noqa: E402

from fairvision.audits.curation.exclusions import audit_exclusions  # noqa: E402
from fairvision.audits.settings import AuditSettings  # noqa: E402

ATTRS = {"region": 10, "skin": 6, "age": 5, "pronoun": 2}


def make_table(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_subj = n // 3
    subj = np.sort(rng.integers(0, n_subj, n))
    cols = {"sample_id": np.char.add("s", np.arange(n).astype(str)), "subject_id": subj}
    for name, k in ATTRS.items():
        cols[name] = np.array([f"{name}{i}" for i in range(k)], dtype=object)[rng.integers(0, k, n_subj)][subj]
    df = pd.DataFrame(cols)
    p = 0.2 + 0.2 * (df["age"] == "age4").to_numpy() + 0.1 * (df["skin"] == "skin0").to_numpy()
    kept = rng.random(n) >= p
    reasons = np.where(kept, None, rng.choice(["qa", "consent", "fraud"], n)).astype(object)
    return df, kept, reasons


def naive(df: pd.DataFrame, kept: np.ndarray, reasons: np.ndarray) -> dict:
    """Row-by-row Python counting of every attribute set; shares, shifts and NSD by hand; scipy's tests."""
    names = list(ATTRS)
    sets = [c for k in (1, 2) for c in itertools.combinations(names, k)]
    cols = {a: df[a].tolist() for a in names}
    keep = kept.tolist()
    why = reasons.tolist()
    before = {s: {} for s in sets}
    after = {s: {} for s in sets}
    by_reason = {(r, a): {} for r in ("qa", "consent", "fraud") for a in names}
    for i in range(len(df)):
        for s in sets:
            key = tuple(cols[a][i] for a in s)
            before[s][key] = before[s].get(key, 0) + 1
            if keep[i]:
                after[s][key] = after[s].get(key, 0) + 1
        if not keep[i]:
            for a in names:
                d = by_reason[(why[i], a)]
                d[cols[a][i]] = d.get(cols[a][i], 0) + 1
    out = {}
    for s in sets:
        levels = [sorted(set(cols[a])) for a in s]
        keys = list(itertools.product(*levels))
        b = np.array([before[s].get(k, 0) for k in keys], float)
        a_ = np.array([after[s].get(k, 0) for k in keys], float)
        pb, pa = b / b.sum(), a_ / a_.sum()
        g = len(keys)
        out[s] = {"n_before": b, "n_after": a_, "shift_pp": 100 * (pa - pb),
                  "nsd_before": pb.std() * g / np.sqrt(g - 1), "nsd_after": pa.std() * g / np.sqrt(g - 1)}
        if len(s) == 1:  # Fisher's exact test for two groups, Pearson's chi-square otherwise
            t = np.stack([a_, b - a_], 1)
            out[s]["pvalue"] = (stats.fisher_exact(t).pvalue if g == 2
                                else stats.chi2_contingency(t, correction=False).pvalue)
    for (r, a), d in by_reason.items():
        levels = sorted(set(cols[a]))
        rem = np.array([d.get(v, 0) for v in levels], float)
        at_risk = np.array([after[(a,)].get((v,), 0) for v in levels], float) + rem
        t = np.stack([rem, at_risk - rem], 1)
        stats.fisher_exact(t) if len(levels) == 2 else stats.chi2_contingency(t, correction=False)
    return out


def naive_bootstrap(df: pd.DataFrame, kept: np.ndarray, replicates: int, seed: int = 0) -> float:
    """Seconds for ``replicates`` replicates of the naive subject bootstrap of every set's shift."""
    rng = np.random.default_rng(seed)
    d = df.assign(kept=kept)
    subjects = d["subject_id"].unique()
    by_subject = d.set_index("subject_id")
    sets = [list(c) for k in (1, 2) for c in itertools.combinations(ATTRS, k)]
    t = time.perf_counter()
    for _ in range(replicates):
        rep = by_subject.loc[rng.choice(subjects, subjects.size, replace=True)]
        for s in sets:
            b = rep.groupby(s).size()
            a = rep[rep["kept"]].groupby(s).size().reindex(b.index, fill_value=0)
            (a / a.sum() - b / b.sum())
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--full", action="store_true", help="the size of the issue: 100,000 images, 1,000 replicates")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--naive-boot", type=int, default=3, help="bootstrap replicates the naive side actually runs")
    args = ap.parse_args()
    if args.full:
        args.rows, args.n_boot = 100_000, 1000
    df, kept, reasons = make_table(args.rows)
    print(f"{len(df):,} images, {df['subject_id'].nunique():,} subjects, {len(ATTRS)} attributes, "
          f"{(~kept).sum():,} removed; threads pinned to {args.threads}")
    print(load_note())
    attrs = list(ATTRS)
    point = AuditSettings(n_boot=0)
    with pinned(args.threads):
        runs = interleaved({
            "fairvision": lambda: audit_exclusions(df, kept, attrs, reasons=reasons, max_k=2, settings=point),
            "naive loop": lambda: naive(df, kept, reasons),
        }, args.repeats)
        fast, slow = runs["fairvision"], runs["naive loop"]
        print(f"point estimates  fairvision: {fast.line()}")
        print(f"point estimates  naive loop: {slow.line()}")
        print(f"ratio (naive / fairvision): CPU {slow.cpu_median / fast.cpu_median:.1f}x, "
              f"wall {slow.wall_median / fast.wall_median:.1f}x")
        audit, ref = fast.result, slow.result
        for s, r in ref.items():  # the same numbers
            t = audit.shifts[s]
            assert np.array_equal(t["n_before"].to_numpy(), r["n_before"]), s
            assert np.array_equal(t["n_after"].to_numpy(), r["n_after"]), s
            assert np.allclose(t["shift_pp"].to_numpy(), r["shift_pp"])
            assert np.isclose(audit.nsd.loc[" × ".join(s), "nsd_after"], r["nsd_after"])
            if "pvalue" in r:
                assert np.isclose(audit.tests.loc[s[0], "pvalue"], r["pvalue"], rtol=1e-8, atol=1e-300)
        print("counts, shifts, NSD and p-values identical for all 10 attribute sets")
        boot = interleaved({"fairvision": lambda: audit_exclusions(
            df, kept, attrs, reasons=reasons, max_k=2, settings=AuditSettings(n_boot=args.n_boot))}, 1)["fairvision"]
        naive_s = naive_bootstrap(df, kept, args.naive_boot)
    extrapolated = naive_s / args.naive_boot * args.n_boot + slow.wall_median
    print(f"with {args.n_boot} subject-bootstrap replicates  fairvision: {boot.line()}")
    print(f"naive bootstrap: {naive_s:.2f} s wall for {args.naive_boot} replicates -> ~{extrapolated:.0f} s extrapolated "
          f"to {args.n_boot} (plus the point estimates); ratio ~{extrapolated / boot.wall_median:.0f}x")


if __name__ == "__main__":
    main()

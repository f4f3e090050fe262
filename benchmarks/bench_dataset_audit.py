"""Benchmark: dataset audit of a synthetic 1,000,000-row table with 4 attributes.

10 x 10 x 5 x 2 = 1,000 intersectional groups, ~330,000 subjects (several images each),
all intersections up to k = 4, and subject-bootstrap CIs (1,000 resamples) for each
single attribute. Target: under 20 s on a 2-core machine.

Baseline, side by side: what one would write with pandas — ``groupby().size()`` per
attribute set, and a bootstrap that resamples subjects and re-groups the table for every
replicate (run for a few replicates and extrapolated to 1,000, as stated in the output).

    python benchmarks/bench_dataset_audit.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd

from fairvision.audits.dataset import audit_dataset
from fairvision.audits.settings import AuditSettings
from fairvision.schema import Attribute, Schema


def make_table(n: int, seed: int = 0) -> tuple[pd.DataFrame, Schema]:
    rng = np.random.default_rng(seed)
    n_subj = n // 3
    subj_of_row = np.sort(rng.integers(0, n_subj, n))
    # attributes are properties of the subject (constant over their images), unevenly distributed
    def attr(k, name):
        p = rng.dirichlet(np.full(k, 2.0))
        return np.array([f"{name}{i}" for i in range(k)], dtype=object)[rng.choice(k, n_subj, p=p)][subj_of_row]

    df = pd.DataFrame({
        "sample_id": np.char.add("s", np.arange(n).astype(str)),
        "subject_id": subj_of_row,
        "region": attr(10, "r"),
        "skin": attr(10, "mst"),
        "age": attr(5, "age"),
        "pronoun": attr(2, "p"),
    })
    schema = Schema()
    for col, k in (("region", 10), ("skin", 10), ("age", 5), ("pronoun", 2)):
        prefix = df[col].iloc[0].rstrip("0123456789")
        schema.add(Attribute(col, categories=[f"{prefix}{i}" for i in range(k)]))
    return df, schema


def baseline(df: pd.DataFrame, attrs: list[str], n_boot_run: int, seed: int = 0):
    out = {}
    for k in range(1, len(attrs) + 1):
        for combo in itertools.combinations(attrs, k):
            out[combo] = df.groupby(list(combo), observed=False).size()
    rng = np.random.default_rng(seed)
    subjects = df["subject_id"].unique()
    by_subject = df.set_index("subject_id")
    t0 = time.perf_counter()
    for a in attrs:
        for _ in range(n_boot_run):
            pick = rng.choice(subjects, subjects.size, replace=True)
            by_subject.loc[pick].groupby(a).size()
    boot_time = time.perf_counter() - t0
    return out, boot_time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--baseline-boot", type=int, default=3, help="bootstrap replicates actually run by the baseline")
    args = ap.parse_args()
    attrs = ["region", "skin", "age", "pronoun"]

    t = time.perf_counter()
    df, schema = make_table(args.rows)
    print(f"synthetic table: {len(df):,} rows, {df['subject_id'].nunique():,} subjects, made in {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    audit = audit_dataset(df, attrs, schema=schema, max_k=4, ci_max_k=1, settings=AuditSettings(n_boot=args.n_boot))
    fast = time.perf_counter() - t
    n_groups = len(audit.groups[tuple(attrs)])
    print(f"fairvision audit_dataset: {fast:.2f} s  ({len(audit.groups)} attribute sets, {n_groups:,} groups in the 4-way "
          f"intersection, {args.n_boot} subject-bootstrap resamples per attribute)  target < 20 s: {'PASS' if fast < 20 else 'FAIL'}")

    t = time.perf_counter()
    audit_dataset(df, attrs, schema=schema, max_k=4, settings=AuditSettings(n_boot=0))
    print(f"  of which counting, representation and association alone (n_boot=0): {time.perf_counter() - t:.2f} s")

    t = time.perf_counter()
    base_counts, boot_run = baseline(df, attrs, args.baseline_boot)
    base_total = time.perf_counter() - t
    count_time = base_total - boot_run
    boot_extrapolated = boot_run / args.baseline_boot * args.n_boot
    base = count_time + boot_extrapolated
    print(f"pandas baseline: counting {count_time:.2f} s + bootstrap {boot_run:.2f} s for {args.baseline_boot} resamples "
          f"-> {boot_extrapolated:.0f} s extrapolated to {args.n_boot}; total ~{base:.0f} s")
    # same counts
    for combo, s in base_counts.items():
        ours = audit.groups[combo]["n_samples"]
        theirs = s.reindex(ours.index, fill_value=0) if len(combo) > 1 else s.reindex(ours.index, fill_value=0)
        assert (ours.to_numpy() == theirs.to_numpy()).all(), combo
    print("counts identical to pandas groupby for all 15 attribute sets")
    print(f"speed-up vs baseline: {base / fast:.0f}x")


if __name__ == "__main__":
    main()

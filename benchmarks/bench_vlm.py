"""Benchmark of the zero-shot vision-language probe (docs/METHODS.md §12.1).

100,000 precomputed 512-d image embeddings (50,000 subjects, two images each) scored against 64 prompts
(16 labels x 4 prompts), one attribute of 4 groups, a true-label column, 1,000 subject-bootstrap replicates.
Fast: :func:`fairvision.audits.vlm.audit_vlm` (one matrix product for the labels, one sparse product per chunk of
replicates). Baseline: a per-image loop computing the cosine similarity to every label vector in Python, run on a
subset and extrapolated (its labels are asserted equal to the fast ones on that subset), plus a per-replicate
bootstrap of the group label shares (resample subjects, re-index rows, crosstab), timed on 10 replicates and
extrapolated to 1,000.

Run: ``.venv/bin/python benchmarks/bench_vlm.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.zero_shot import audit_vlm, label_embeddings


def make(n: int, d: int = 512, n_labels: int = 16, per_label: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = [f"l{i}" for i in range(n_labels)]
    text = rng.normal(size=(n_labels * per_label, d)).astype(np.float32)
    tdf = pd.DataFrame({"label": np.repeat(labels, per_label), "embedding": list(text)})
    x = rng.normal(size=(n, d)).astype(np.float32)
    data = pd.DataFrame({"sample_id": np.arange(n).astype(str), "subject_id": np.arange(n) // 2,
                         "group": rng.choice(list("ABCD"), n), "truth": rng.choice(labels, n)})
    return data, x, tdf, text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 10_000 if args.quick else 100_000
    data, x, tdf, text = make(n)
    img = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(x)})
    t0 = time.perf_counter()
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth", prompt_sets={}, settings=AuditSettings(n_boot=1000))
    fast = time.perf_counter() - t0
    print(f"zero-shot probe: {n:,} x {x.shape[1]} image embeddings, {len(tdf)} prompts, 1,000 bootstrap replicates")
    print(f"  fast (vectorised): {fast:8.2f} s")
    vec, order = label_embeddings(text, tdf["label"].tolist())
    sub = min(n, 5_000)
    t0 = time.perf_counter()
    naive_labels = []
    for i in range(sub):  # the baseline: one image at a time
        v = x[i].astype(np.float64)
        v = v / np.linalg.norm(v)
        sims = [float(np.dot(v, vec[j])) for j in range(len(order))]
        naive_labels.append(order[int(np.argmax(sims))])
    naive_lab = (time.perf_counter() - t0) * n / sub
    assert naive_labels == res.predictions["predicted"].iloc[:sub].tolist()
    # the group statistics, one replicate at a time: resample subjects, re-index their rows, group shares
    pred = res.predictions["predicted"].to_numpy()
    subj, grp = data["subject_id"].to_numpy(), data["group"].to_numpy()
    rows_of = pd.Series(np.arange(n)).groupby(subj).apply(np.asarray).to_numpy()
    rng = np.random.default_rng(0)
    n_rep = 10
    t0 = time.perf_counter()
    for _ in range(n_rep):
        pick = np.concatenate(rows_of[rng.integers(0, len(rows_of), len(rows_of))])
        pd.crosstab(grp[pick], pred[pick], normalize="index")
        (pred[pick] != data["truth"].to_numpy()[pick])
    naive_boot = (time.perf_counter() - t0) * 1000 / n_rep
    naive = naive_lab + naive_boot
    print(f"  naive: per-image label loop extrapolated {naive_lab:6.2f} s (labels equal on {sub:,} images) + "
          f"per-replicate bootstrap extrapolated {naive_boot:6.2f} s = {naive:8.2f} s")
    print(f"  ratio naive / fast: x{naive / fast:.1f}")


if __name__ == "__main__":
    main()

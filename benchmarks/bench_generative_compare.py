"""Benchmark: comparing generators at BiasPainter's scale (docs/METHODS.md §10.4).

Three generators, ``--seeds`` seed photos x ``--words`` words in four topics (BiasPainter: 54 x 228 = 12,312 pairs
per generator), synthetic finished runs as in ``tests/test_generative_compare.py`` (skin_L change = planted shift
+ N(0, 1) per seed and word; a gender flip column for the sign test), ``--n-boot`` replicates over seed photos.
Fast: :func:`fairvision.audits.generative.compare.compare_generative` (word / topic / model scores of every
generator from one bootstrap draw shared by all, word tests against no change, paired tests per word between every
two generators, paired-bootstrap topic and model tests, corrections, the ranking), timed for skin_L alone and for
skin_L and gender. Baseline, skin_L: the loop a first attempt writes: per generator a per-pair loop into
per-(word, seed) cells, per word ``scipy.stats.wilcoxon`` and a loop over the replicates (same bootstrap weights),
topic and model scores per replicate, then per pair of generators per word ``scipy.stats.wilcoxon`` of the per-seed
differences and per topic the paired bootstrap difference. Its word scores, CIs and p-values, model scores and
model-difference CIs must equal fairvision's (exact Wilcoxon in both: fairvision is exact up to 400 non-zero
changes, scipy is asked for ``method="exact"``).

Not a test. Run: ``.venv/bin/python benchmarks/bench_generative_compare.py [--seeds 54] [--words 228]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import stats as sps

from fairvision.audits.generative import GenerativeRun, compare_generative
from fairvision.audits.settings import AuditSettings
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci

TOPICS = ["professions", "objects", "personalities", "activities"]
GENERATORS = {"strong": 6.0, "mild": 3.0, "none": 0.0}  # size of the planted shift on a tenth of the words


def make_runs(n_seeds: int, n_words: int, seed: int = 0) -> list[GenerativeRun]:
    rng = np.random.default_rng(seed)
    words = [f"w{j:03d}" for j in range(n_words)]
    topic = [TOPICS[j % len(TOPICS)] for j in range(n_words)]
    seeds = [f"p{s:02d}" for s in range(n_seeds)]
    shifted = np.zeros(n_words)
    shifted[:: 10] = 1.0
    runs = []
    for g, size in GENERATORS.items():
        wi, si = np.meshgrid(np.arange(n_words), np.arange(n_seeds), indexing="ij")
        wi, si = wi.ravel(), si.ravel()
        sign = np.where(wi % 20 == 0, -1.0, 1.0)
        pairs = pd.DataFrame({"generator": g, "seed_id": np.array(seeds)[si], "topic": np.array(topic)[wi],
                              "word": np.array(words)[wi],
                              "skin_L": sign * size * shifted[wi] + rng.normal(0, 1, wi.size),
                              "gender": rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], wi.size)})
        runs.append(GenerativeRun("synthetic", pairs, source=f"synthetic {g}"))
    return runs


def naive(runs: list[GenerativeRun], n_boot: int, level: float, seed: int):
    """Per-pair, per-word, per-replicate loops with scipy's Wilcoxon test (skin_L)."""
    gens = [r.generators[0] for r in runs]
    cells, topic_of = {}, {}
    for r, g in zip(runs, gens):
        for row in r.pairs.itertuples(index=False):  # per pair
            topic_of.setdefault(row.word, row.topic)
            cells.setdefault((g, row.word), {}).setdefault(row.seed_id, []).append(row.skin_L)
    seeds = sorted({s for c in cells.values() for s in c})
    weights = cluster_bootstrap_weights(len(seeds), n_boot, seed)
    words = list(topic_of)
    x = {k: np.array([np.mean(c[s]) for s in seeds]) for k, c in cells.items()}  # per-seed values, seeds sorted
    est, reps, lo, hi, pv = {}, {}, {}, {}, {}
    for g in gens:
        for w in words:  # per word
            v = x[(g, w)]
            est[g, w] = v.mean()
            r = np.empty(n_boot)
            for b in range(n_boot):  # per replicate
                r[b] = (weights[b] * v).sum() / weights[b].sum()
            reps[g, w] = r
            lo[g, w], hi[g, w] = percentile_ci(r, level)
            pv[g, w] = sps.wilcoxon(v, method="exact").pvalue
    model, model_reps = {}, {}
    for g in gens:
        model[g] = np.mean([abs(est[g, w]) for w in words])
        model_reps[g] = np.array([np.mean([abs(reps[g, w][b]) for w in words]) for b in range(n_boot)])
        for t in dict.fromkeys(topic_of.values()):  # per topic
            sel = [w for w in words if topic_of[w] == t]  # topic score replicates (the work; not checked)
            np.array([np.mean([abs(reps[g, w][b]) for w in sel]) for b in range(n_boot)])
    pair_p, model_ci = {}, {}
    for i, a in enumerate(gens):
        for b in gens[i + 1:]:  # per pair of generators
            for w in words:
                pair_p[w, a, b] = sps.wilcoxon(x[(a, w)] - x[(b, w)], method="exact").pvalue
            for t in dict.fromkeys(topic_of.values()):
                sel = [w for w in words if topic_of[w] == t]  # paired topic differences (the work; not checked)
                [np.mean([abs(reps[a, w][k]) for w in sel]) - np.mean([abs(reps[b, w][k]) for w in sel])
                 for k in range(n_boot)]
            model_ci[a, b] = percentile_ci(model_reps[a] - model_reps[b], level)
    return est, lo, hi, pv, model, pair_p, model_ci


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=54)
    ap.add_argument("--words", type=int, default=228)
    ap.add_argument("--n-boot", type=int, default=1000)
    args = ap.parse_args()
    runs = make_runs(args.seeds, args.words)
    n_pairs = args.seeds * args.words
    print(f"generator comparison: {len(runs)} generators x {args.seeds} seeds x {args.words} words "
          f"({n_pairs:,} pairs each), {args.n_boot:,} replicates over seeds")
    compare_generative(make_runs(5, 8), settings=AuditSettings(n_boot=20))  # warm-up
    t = time.perf_counter()
    settings = AuditSettings(n_boot=args.n_boot)
    cmp = compare_generative(runs, properties=["skin_L"], settings=settings)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    both = compare_generative(runs, properties=["skin_L", "gender"], settings=settings)
    t2 = time.perf_counter() - t
    wt = both.word_tests
    print(f"  fairvision compare_generative: skin_L {t1:.2f} s; skin_L + gender (sign test) {t2:.2f} s "
          f"({len(both.words):,} word scores, {len(wt):,} paired word tests, {int(wt['flagged'].sum())} flagged; "
          f"model ranking skin_L: {both.ranking.loc[('skin_L', 'model'), 'most']} > "
          f"{both.ranking.loc[('skin_L', 'model'), 'least']})")

    t = time.perf_counter()
    est, lo, hi, pv, model, pair_p, model_ci = naive(runs, args.n_boot, 0.95, 0)
    tn = time.perf_counter() - t
    w = cmp.words.xs("skin_L", level="property")
    keys = list(est)
    ours = w.loc[[(wd, g) for g, wd in keys]]  # fairvision's index is (word, generator)
    d_est = np.max(np.abs(ours["estimate"].to_numpy() - np.array([est[k] for k in keys])))
    d_ci = max(np.max(np.abs(ours["ci_low"].to_numpy() - np.array([lo[k] for k in keys]))),
               np.max(np.abs(ours["ci_high"].to_numpy() - np.array([hi[k] for k in keys]))))
    d_p = np.max(np.abs(ours["pvalue"].to_numpy() - np.array([pv[k] for k in keys])))
    t2w = cmp.word_tests.xs("skin_L", level="property")
    d_pair = max(abs(t2w.loc[k, "pvalue"] - v) for k, v in pair_p.items())
    d_model = max(abs(cmp.model.loc[("skin_L", g), "estimate"] - v) for g, v in model.items())
    mt = cmp.model_tests.xs("skin_L", level="property")
    d_mci = max(max(abs(mt.loc[k, "ci_low"] - v[0]), abs(mt.loc[k, "ci_high"] - v[1])) for k, v in model_ci.items())
    worst = max(d_est, d_ci, d_p, d_pair, d_model, d_mci)
    print(f"  naive loop (per pair, per word scipy wilcoxon, per replicate), skin_L: {tn:.1f} s; ratio {tn / t1:.0f}x")
    print(f"  agreement: word scores {d_est:.1e}, word CIs {d_ci:.1e}, word p-values {d_p:.1e}, paired word p-values "
          f"{d_pair:.1e}, model scores {d_model:.1e}, model-difference CIs {d_mci:.1e} "
          f"({'equal' if worst < 1e-9 else 'DIFFER'})")


if __name__ == "__main__":
    main()

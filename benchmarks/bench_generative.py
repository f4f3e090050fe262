"""Benchmark: the generative audit at BiasPainter's scale (54 seeds x 228 prompts = 12,312 pairs).

1. Generation (not the point, but needed): the built-in colorimetric editor edits the first ``--seeds`` CC0
   portraits with the first ``--words`` bundled neutral words (taken round-robin over the four topics), 10
   of them shifted (5 darker, 5 lighter), with a seeded L* jitter. Resumable: a rerun with the same
   ``--workdir`` reuses the outputs (generation is then ~0 s).
2. Assessment of seeds and outputs on ``--workers`` workers (skin: ``mean`` estimator, mediapipe mask;
   ``--age-gender`` adds the default ONNX age/gender assessor) into a fresh results store, then the same
   again (every assessment read from the store; ``--no-store-run`` also times a run without a store).
   Beside it, the skin pipeline (:func:`fairvision.skin.batch.measure_images`, its default ``thong`` estimator, the
   figure of ``benchmarks/bench_skin_pipeline.py``) on ``--skin-images`` of the same outputs on the same
   number of workers, measured in this run. Both include pool start-up and model loading (not imports).
3. Scoring: word, topic and model scores with ``--n-boot`` bootstrap replicates over seeds, the paired
   Wilcoxon tests and the correction across words (:func:`fairvision.stats.metamorphic_scores`), for one
   property and for every assessed property, against a naive baseline: a per-pair Python loop that collects
   each (word, seed) change, then per word a loop over the bootstrap replicates and ``scipy.stats.wilcoxon``.
   The naive word scores and intervals (same bootstrap weights) must equal ours.

Not a test. Usage::

    .venv/bin/python benchmarks/bench_generative.py --seeds 12 --words 40     # a few minutes
    .venv/bin/python benchmarks/bench_generative.py                           # paper scale (long: 12k images)
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from fairvision.audits.generative.assessors import assess_images, pair_changes
from fairvision.audits.generative.audit import score_pairs
from fairvision.audits.generative.generators import generate
from fairvision.audits.generative.spec import DEFAULTS, default_words
from fairvision.audits.settings import AuditSettings
from fairvision.datasets import load_portraits
from fairvision.skin.batch import measure_images
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.metamorphic import metamorphic_scores
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci
from fairvision.vision.faces import preload_face_models

DARK = 5
LIGHT = 5


def prompts_round_robin(n_words: int) -> pd.DataFrame:
    words, templates = default_words()
    rows = []
    for group in itertools.zip_longest(*[[(t, w) for w in ws] for t, ws in words.items()]):
        for item in group:
            if item is not None:
                t, w = item
                rows.append({"topic": t, "word": w, "prompt": templates.get(t, "a photo of a person who is {word}")
                             .format(word=w)})
    return pd.DataFrame(rows[:n_words])


def naive_scores(pairs: pd.DataFrame, prop: str, n_boot: int, level: float, seed: int):
    """Per-pair loop to per-(word, seed) means, then per word: replicate loop, scipy Wilcoxon; topic/model loops."""
    cells: dict = {}
    topic_of: dict = {}
    unit_index: dict = {}  # seeds in order of first appearance (the bootstrap weights' columns)
    for row in pairs.itertuples(index=False):  # per pair
        v = getattr(row, prop)
        topic_of.setdefault(row.word, row.topic)
        if v == v:  # not NaN
            cells.setdefault(row.word, {}).setdefault(row.seed_id, []).append(v)
            unit_index.setdefault(row.seed_id, len(unit_index))
    units = list(unit_index)
    weights = cluster_bootstrap_weights(len(units), n_boot, seed)
    words = list(topic_of)
    est, lo, hi, pv, reps = [], [], [], [], []
    for w in words:  # per word
        by_unit = cells.get(w, {})
        idx = np.array([unit_index[u] for u in by_unit], dtype=int)
        x = np.array([sum(v) / len(v) for v in by_unit.values()])
        est.append(x.mean() if x.size else np.nan)
        r = np.empty(n_boot)
        for b in range(n_boot):  # per replicate
            wt = weights[b, idx]
            r[b] = (wt * x).sum() / wt.sum() if wt.sum() > 0 else np.nan
        reps.append(r)
        a, c = percentile_ci(r, level)
        lo.append(float(a))
        hi.append(float(c))
        nz = x[x != 0]
        pv.append(sps.wilcoxon(nz, method="exact" if nz.size <= 400 else "approx").pvalue if nz.size else np.nan)
    padj = adjust_pvalues(np.asarray(pv), DEFAULT_CORRECTION)
    reps = np.array(reps).T
    topic_scores = {}
    for t in dict.fromkeys(topic_of.values()):  # per topic
        sel = [i for i, w in enumerate(words) if topic_of[w] == t]
        topic_scores[t] = float(np.nanmean([abs(est[i]) for i in sel]))
    model = float(np.nanmean(np.abs(est)))
    return pd.DataFrame({"estimate": est, "ci_low": lo, "ci_high": hi, "pvalue_adjusted": padj},
                        index=pd.Index(words, name="word")), topic_scores, model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=54, help="seed portraits (paper: 54)")
    ap.add_argument("--words", type=int, default=228, help="prompt words (paper: 228)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--skin-images", type=int, default=300, help="outputs the skin pipeline measures for its figure")
    ap.add_argument("--no-store-run", action="store_true", help="also time the assessment without a results store")
    ap.add_argument("--age-gender", action="store_true", help="assess age and gender too (default ONNX models)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "fairvision-bench-generative",
                    help="generated outputs (kept: a rerun reuses them)")
    args = ap.parse_args()

    seeds = load_portraits().head(args.seeds).reset_index(drop=True)
    prompts = prompts_round_robin(args.words)
    shifted = list(prompts["word"].iloc[::max(1, len(prompts) // (DARK + LIGHT))][:DARK + LIGHT])
    shifts = {w: {"L": -6.0 if i < DARK else 6.0} for i, w in enumerate(shifted)}
    cfg = {"kind": "builtin", "name": "builtin", "seeds": [0], "shifts": shifts, "noise_L": 1.0}
    n_pairs = len(seeds) * len(prompts)
    print(f"generative benchmark: {len(seeds)} seeds x {len(prompts)} words = {n_pairs:,} pairs, "
          f"{args.workers} workers, n_boot={args.n_boot}")

    t = time.perf_counter()
    run_on = AuditSettings(workers=args.workers)
    records = generate(seeds, prompts, cfg, args.workdir, settings=run_on)
    tg = time.perf_counter() - t
    made = int(records["generated"].sum())
    print(f"  generation (built-in editor): {made:,} made now in {tg:.1f} s"
          + (f" ({made / tg:.1f} images/s)" if made else " (all reused from --workdir)")
          + f"; {int((~records['ok']).sum())} failed")

    options = {"skin": True, "skin_method": "mean", "mask_method": "mediapipe", "identity": False,
               "age_gender": "builtin" if args.age_gender else "none"}
    paths = list(seeds["image_path"].astype(str)) + list(records.loc[records["ok"], "output_path"])
    n = len(paths)
    preload_face_models("mediapipe")  # imports (not models) before any clock, for every contender alike
    store_dir = Path(tempfile.mkdtemp(prefix="fairvision-bench-store-"))
    try:
        t = time.perf_counter()
        images = assess_images(paths, options, settings=run_on, store=store_dir)
        ta = time.perf_counter() - t
        t = time.perf_counter()
        again = assess_images(paths, options, settings=run_on, store=store_dir)
        ts2 = time.perf_counter() - t
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    if args.no_store_run:
        t = time.perf_counter()
        plain = assess_images(paths, options, settings=run_on)
        ts0 = time.perf_counter() - t
        assert plain[["L", "hue", "ita", "gray"]].equals(again[["L", "hue", "ita", "gray"]])
    computed = sum(again.attrs["assessments"]["computed"].values())
    sk_paths = list(records.loc[records["ok"], "output_path"])[: args.skin_images]
    t = time.perf_counter()
    sk = measure_images(sk_paths, settings=run_on, progress=False, store=None)
    tsk = time.perf_counter() - t
    what = "skin + age/gender" if args.age_gender else "skin"
    print(f"  assessment ({what}), {n:,} images, into a fresh results store: {n / ta:7.1f} images/s ({ta:.1f} s), "
          f"{int(images['skin_ok'].sum()):,} measured")
    if args.no_store_run:
        print(f"    without a results store         : {n / ts0:7.1f} images/s ({ts0:.1f} s; same values)")
    print(f"    rerun, all from the store       : {n / ts2:7.1f} images/s ({ts2:.2f} s, {computed} assessments computed)")
    print(f"  skin pipeline (measure_images, thong), {len(sk_paths):,} outputs: {len(sk_paths) / tsk:7.1f} images/s "
          f"({tsk:.1f} s), {int(sk['ok'].sum()):,} measured")
    print(f"  assessment / skin pipeline        : {(n / ta) / (len(sk_paths) / tsk):.2f}x images/s "
          f"({'met' if n / ta >= len(sk_paths) / tsk else 'NOT met'}: target >= 1)")

    pairs = pair_changes(records, seeds, images)
    props = [p for p in ("skin_L", "skin_hue", "skin_ita", "skin_gray", "age", "gender")
             if pairs[p].notna().any()]
    score_pairs(pairs.head(200), min_effect=DEFAULTS["min_effect"], settings=AuditSettings(n_boot=10),
                properties=["skin_L"])  # warm-up
    t = time.perf_counter()
    ours = metamorphic_scores(pairs, value="skin_L", word="word", unit="seed_id", topic="topic", n_boot=args.n_boot)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    words, topics, model = score_pairs(pairs, min_effect=DEFAULTS["min_effect"], settings=AuditSettings(n_boot=args.n_boot),
                                       properties=props)
    tall = time.perf_counter() - t
    t = time.perf_counter()
    nw, ntopic, nmodel = naive_scores(pairs, "skin_L", args.n_boot, 0.95, 0)
    tn = time.perf_counter() - t
    w = ours.words.reindex(nw.index)
    same = (np.allclose(w["estimate"], nw["estimate"], equal_nan=True)
            and np.allclose(w["ci_low"], nw["ci_low"], equal_nan=True)
            and np.allclose(w["ci_high"], nw["ci_high"], equal_nan=True)
            and np.isclose(ours.model["estimate"].iloc[0], nmodel)
            and all(np.isclose(ours.topics.loc[k, "estimate"], v) for k, v in ntopic.items()))
    dp = float(np.nanmax(np.abs(w["pvalue_adjusted"].to_numpy() - nw["pvalue_adjusted"].to_numpy())))
    print(f"  scores, skin_L, {len(ours.words)} words x {n_pairs:,} pairs: {t1:.3f} s "
          f"(target < 2 s: {'met' if t1 < 2 else 'NOT met'})")
    print(f"  scores, {len(props)} properties ({', '.join(props)}): {tall:.3f} s (score_pairs: + flags)")
    print(f"  naive per-pair / per-word loop, skin_L: {tn:.3f} s; ratio {tn / t1:.1f}x; word scores, CIs, topic and "
          f"model scores {'equal' if same else 'DIFFER'}; max |adjusted p difference| vs scipy's exact Wilcoxon {dp:.2g}")
    sel = words["flagged"] & (words.index.get_level_values("property") == "skin_L")
    hit = set(words.index[sel].get_level_values("word"))
    print(f"  flagged skin_L words: {len(hit)} ({len(hit & set(shifted))} of the {len(shifted)} shifted, "
          f"{len(hit - set(shifted))} others)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

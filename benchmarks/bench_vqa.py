"""Benchmark of the visual question answering probe's group statistics (docs/METHODS.md §12.3).

``--images`` images (two per subject) x the 9 bundled questions (3 tones x 3 wordings) from a precomputed answers
table (answers drawn from a small pool of typical VLM answers, toxic answers to the negative questions more often
for one ancestry group), two attributes (gender, ancestry) and their intersection (``max_k=2``), ``--n-boot``
subject-bootstrap replicates. Fast: :func:`fairvision.audits.vlm.vqa.audit_vqa` with ``answers=`` (parsing each
distinct answer once, one per-subject sparse matrix, all replicates as matrix products, the tests, pronoun and
term tables: the whole call is timed). Baseline: the pandas loop a first attempt writes on the already parsed
answers (parsing not timed, which favours it): per replicate, resample subjects, gather their answers, then per
attribute set and group ``groupby(tone).mean()`` of the group and of the rest. It is timed on ``--naive-reps``
replicates and extrapolated to ``--n-boot`` (stated as such); its point estimates (the loop on the original
sample) must equal fairvision's rates and rests.

Not a test. Run: ``.venv/bin/python benchmarks/bench_vqa.py [--images 20000] [--n-boot 1000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.vqa import audit_vqa
from fairvision.audits.vlm.vqa_parsing import load_questions

ANSWERS = {  # (answer, weight) per tone
    "positive": [("because she is kind", 3), ("because he is friendly", 3), ("because they are kind", 1),
                 ("because she is a woman", 1), ("his smile", 2), ("kind", 2), ("", 0.3),
                 ("I can't tell from a photo.", 0.5)],
    "neutral": [("She's a teacher.", 2), ("he is a doctor", 2), ("he is a police officer", 1), ("nurse", 1),
                ("They work as an engineer", 1), ("she is a housewife", 1), ("I cannot determine that.", 1)],
    "negative": [("None.", 4), ("I can't tell what crime this person committed from a photo.", 3),
                 ("He is a thief.", 1), ("she was arrested for drug dealing", 0.5), ("murder", 0.5), ("", 0.3)],
}
QUANT = ["response", "refusal", "toxic", "gendered", "gender_word"]


def make(n_images: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    qs = load_questions()
    n_subj = n_images // 2
    subj = np.arange(n_images) // 2
    gender = np.array(["female", "male"])[rng.integers(0, 2, n_subj)][subj]
    ancestry = np.array(["africa", "asia", "europe", "americas", "oceania"])[rng.integers(0, 5, n_subj)][subj]
    data = pd.DataFrame({"sample_id": [f"img{i:06d}" for i in range(n_images)], "subject_id": subj,
                         "gender": gender, "ancestry": ancestry})
    parts = []
    for qid, tone in zip(qs.questions["question_id"], qs.questions["tone"]):
        texts = [a for a, _ in ANSWERS[tone]]
        w = np.array([x for _, x in ANSWERS[tone]], float)
        p = np.tile(w / w.sum(), (n_images, 1))
        if tone == "negative":  # a planted gap: toxic answers three times as often for one group
            toxic = np.array([2, 3, 4])
            boost = np.where(ancestry == "oceania", 3.0, 1.0)
            p[:, toxic] *= boost[:, None]
            p /= p.sum(1, keepdims=True)
        pick = (rng.random(n_images)[:, None] > np.cumsum(p, 1)).sum(1)
        parts.append(pd.DataFrame({"sample_id": data["sample_id"], "question_id": qid,
                                   "answer": np.array(texts, object)[np.minimum(pick, len(texts) - 1)]}))
    return data, pd.concat(parts, ignore_index=True), qs


def naive_replicate(P: pd.DataFrame, pick_rows: np.ndarray, sets) -> list[dict]:
    """One replicate: the answers of the picked rows, then per attribute set and group, group and rest means."""
    df = P.iloc[pick_rows]
    out = []
    for name, col in sets:  # per attribute set
        for grp in df[col].unique():  # per group
            sel = (df[col] == grp).to_numpy()
            g = df[sel].groupby("tone")[QUANT].mean()
            r = df[~sel].groupby("tone")[QUANT].mean()
            for tone in g.index:
                for q in QUANT:
                    out.append({"attribute": name, "group": grp, "tone": tone, "quantity": q,
                                "estimate": g.loc[tone, q], "rest": r.loc[tone, q] if tone in r.index else np.nan})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=20_000)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--naive-reps", type=int, default=3)
    args = ap.parse_args()
    data, answers, qs = make(args.images)
    print(f"VQA probe: {args.images:,} images ({args.images // 2:,} subjects) x {len(qs.questions)} questions = "
          f"{len(answers):,} answers; gender, ancestry and gender x ancestry; {args.n_boot:,} subject-bootstrap "
          "replicates")
    audit_vqa(data.head(50), questions=qs, attrs=["gender"], answers=answers.head(450),
              settings=AuditSettings(n_boot=10))  # warm-up
    t = time.perf_counter()
    res = audit_vqa(data, questions=qs, attrs=["gender", "ancestry"], answers=answers, max_k=2,
                    settings=AuditSettings(n_boot=args.n_boot))
    t_fast = time.perf_counter() - t
    flagged = res.rates[res.rates["flagged"]]
    print(f"  fairvision audit_vqa (parsing, rates, CIs, tests, pronouns, terms): {t_fast:.2f} s; "
          f"{len(res.rates):,} rate rows, {len(flagged)} flagged "
          f"({', '.join(sorted(set(flagged['group'] + ' ' + flagged['quantity'])))[:120]})")

    # the baseline, on the parsed answers fairvision returned (not timed)
    A = res.answers
    row = pd.Index(data["sample_id"]).get_indexer(A["sample_id"])
    pron = A["pronoun"].to_numpy(object)
    P = pd.DataFrame({"row": row, "tone": A["tone"].to_numpy(), "response": A["responded"].astype(float),
                      "refusal": A["refused"].astype(float), "toxic": A["toxic"].astype(float),
                      "gendered": np.isin(pron, ["he", "she"]).astype(float),
                      "gender_word": A["gender_word"].astype(float)})
    P["gender"] = data["gender"].to_numpy()[row]
    P["ancestry"] = data["ancestry"].to_numpy()[row]
    P["gender × ancestry"] = P["gender"] + " × " + P["ancestry"]
    sets = [("gender", "gender"), ("ancestry", "ancestry"), ("gender × ancestry", "gender × ancestry")]
    subj = data["subject_id"].to_numpy()[row]
    rows_of = pd.Series(np.arange(len(P))).groupby(subj).apply(np.asarray).to_numpy()  # answers of each subject

    point = pd.DataFrame(naive_replicate(P, np.arange(len(P)), sets))
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(args.naive_reps):
        pick = np.concatenate(rows_of[rng.integers(0, len(rows_of), len(rows_of))])
        naive_replicate(P, pick, sets)
    t_rep = (time.perf_counter() - t) / args.naive_reps
    naive = t_rep * args.n_boot
    key = ["attribute", "group", "tone", "quantity"]
    m = res.rates.merge(point, on=key, suffixes=("", "_naive"))
    d_est = float(np.nanmax(np.abs(m["estimate"] - m["estimate_naive"])))
    d_rest = float(np.nanmax(np.abs(m["rest"] - m["rest_naive"])))
    same = len(m) == len(res.rates) == len(point) and d_est < 1e-12 and d_rest < 1e-12
    print(f"  naive pandas loop per replicate and group: {t_rep:.2f} s a replicate, ~{naive:,.0f} s extrapolated to "
          f"{args.n_boot:,} (timed on {args.naive_reps}); ratio ~{naive / t_fast:,.0f}x")
    print(f"  point estimates: {len(m):,} of {len(res.rates):,} rows matched; max |difference| rate {d_est:.1e}, "
          f"rest {d_rest:.1e} ({'equal' if same else 'DIFFER'})")


if __name__ == "__main__":
    main()

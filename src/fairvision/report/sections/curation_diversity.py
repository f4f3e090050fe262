"""Report section of the diversity audit: Vendi scores of whole images, scenes and subjects per group
(docs/METHODS.md §13.2)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import ci_text, group_text, num, p_text, test_severity

_TEXT = {"whole": "whole image", "scene": "scene (subject masked)", "subject": "subject (scene masked)"}


def diversity_section(result, *, conditions: list[dict] | None = None,
                      title: str = "Diversity: Vendi scores of images, scenes and subjects") -> Section:
    """Turn a :class:`fairvision.audits.curation.diversity.DiversityResult` into a report section."""
    s = result.scores
    pct = round(100 * result.level)
    sec = Section("curation_diversity", title, intro=(
        "The Vendi score is the effective number of distinct images of a set (1: all alike; n: all unrelated), "
        f"from the cosine similarity of {result.embedder} embeddings. It is computed for the whole images, for the "
        "scenes (the person blacked out) and for the subjects (everything but the person blacked out), for every "
        f"group. 'vendi' uses all of a group's images, with a {pct}% subject-bootstrap interval of its "
        "linearisation; it grows with the number of images, so groups are compared by 'rarefied': the mean score "
        "of random subsets of the same number of subjects, one image each, with the range of the middle "
        f"{pct}% of the subsets. A group is flagged as low in diversity when its rarefied score is lower than that of "
        "most random sets of as many subjects drawn from the whole dataset (one-sided p-value, "
        f"{result.correction}-corrected over groups and variants, below {result.alpha:g}; docs/METHODS.md §13.2)."))
    m = result.meta
    sec.metrics("key figures", {"samples": m.get("n_samples"), "subjects": m.get("n_subjects"),
                                "variants": ", ".join(result.variants), "embedder": result.embedder,
                                "read from the store": m.get("from_cache", 0),
                                "low-diversity groups": int(s["low_diversity"].sum())})
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    groups = s[s["attribute"] != "(all)"]
    plot = groups.dropna(subset=["rarefied"])
    if len(plot):
        frame = plot.assign(label=[f"{_TEXT[v].split(' ')[0]}: {group_text(a, g)}"
                                   for v, a, g in zip(plot["variant"], plot["attribute"], plot["group"])])
        frame = frame.set_index("label")
        size = int(plot["rarefy_size"].iloc[0])
        # the yardstick of the flag (random sets of as many subjects from the whole dataset): drawn when there is
        # one variant, so one line and band (each variant has its own)
        ref = s[(s["attribute"] == "(all)") & s["rarefied"].notna()]
        one = len(ref) == 1 and set(plot["variant"]) == set(ref["variant"])
        r = ref.iloc[0] if one else None
        band = ((float(r["rarefied_low"]), float(r["rarefied_high"]))
                if one and np.isfinite([r["rarefied_low"], r["rarefied_high"]]).all() else None)
        fig = plots.forest(frame, estimate="rarefied", low="rarefied_low", high="rarefied_high", flag="low_diversity",
                           title=f"Vendi score at {size} subjects per group", xlabel="rarefied Vendi score",
                           reference=float(r["rarefied"]) if one else None, band=band)
        whole = (f" The dashed line and the shaded band: the mean and the middle {pct}% of random sets of {size} "
                 "subjects from the whole dataset." if one else "")
        sec.figure("rarefied vendi", fig, f"Mean Vendi score of random subsets of {size} subjects (one image each) "
                   f"per group and variant, with the middle {pct}% of the subsets; groups flagged as low in diversity in the "
                   f"second colour.{whole}",
                   data=plot[["variant", "attribute", "group", "rarefied", "rarefied_low", "rarefied_high"]]
                   .to_dict(orient="list"))
    sec.table("scores", s, "Vendi score per variant and group: all images with a subject-bootstrap interval, per "
              "image, and rarefied to a common number of subjects.", highlight="low_diversity")
    if "n_failed" in m and any(m["n_failed"].values()):
        sec.note("Images without an embedding (left out): "
                 + ", ".join(f"{v} {k}" for v, k in m["n_failed"].items() if k) + " (see the status table).",
                 "warning")
        sec.table("status", result.status[~result.status["ok"]], "Images without an embedding and why.")
    if m.get("mask_sources"):
        sec.note("Person masks: " + ", ".join(f"{k} {v}" for k, v in m["mask_sources"].items())
                 + " images (file: supplied masks; box: person boxes; selfie: mediapipe selfie segmentation).")
    small = groups[groups["too_small"]]
    if len(small):
        sec.note(f"{small[['attribute', 'group']].drop_duplicates().shape[0]} groups have fewer than "
                 f"{m.get('min_subjects')} subjects (too_small): no rarefied score and no interval, since a "
                 "bootstrap over so few subjects gives intervals far too narrow; their 'vendi' is a bare "
                 "description.", "warning")
    sec.note("Embeddings from an ImageNet classifier (or a face recogniser) see what that model was trained to "
             "tell apart; the scores compare groups under that model, not diversity in any absolute sense.")
    _findings(sec, result)
    return sec


def _findings(sec: Section, result) -> None:
    s = result.scores
    g = s[s["attribute"] != "(all)"]
    low = g[g["low_diversity"]]
    if low.empty:
        if g["pvalue"].notna().any():
            sec.finding(f"No group is less diverse than random sets of as many subjects from the whole dataset, in "
                        f"any variant (alpha {result.alpha:g}, {result.correction})", "info", target="scores")
        return
    ref = s[s["attribute"] == "(all)"].set_index("variant")
    for row in low.sort_values("pvalue_adjusted").head(10).itertuples(index=False):
        r = ref.loc[row.variant]
        gap = 1 - row.rarefied / r["rarefied"] if r["rarefied"] else np.nan
        sec.finding(f"Low {_TEXT[row.variant]} diversity for {group_text(row.attribute, row.group)}: Vendi score "
                    f"{num(row.rarefied)} at {int(row.rarefy_size)} subjects, against "
                    f"{num(r['rarefied'])}{ci_text(r['rarefied_low'], r['rarefied_high'])} for random sets of "
                    f"{int(row.rarefy_size)} subjects from the whole dataset ({p_text(row.pvalue_adjusted)})",
                    test_severity(row.pvalue_adjusted, result.alpha, gap), target="scores",
                    quantity=f"rarefied.{row.variant}.{row.attribute}.{row.group}", value=row.rarefied,
                    ci_low=row.rarefied_low, ci_high=row.rarefied_high, pvalue=row.pvalue_adjusted,
                    size=float(gap) if pd.notna(gap) else None)

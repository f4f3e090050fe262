"""Report section of the annotation-agreement audit: by annotator pair, annotator, vendor and group; Krippendorff's
alpha (docs/METHODS.md §13.4)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report.findings import ci_text, group_text, num


def _group_tables(sec: Section, res, label: str, attr_names) -> None:
    if res is None:
        return
    for (m, inter), table in res.groups.items():
        sec.table(f"{label}_{m}_{inter}", table, f"Mean {m} by {inter} ({int(res.level * 100)}% subject-bootstrap CI)",
                  max_rows=60, highlight="too_small")
        pw = res.pairwise.get((m, inter))
        if pw is not None and len(pw):
            cols = ["group_a", "group_b", "median_a", "median_b", "pvalue", "pvalue_adjusted", "significant"]
            sec.table(f"{label}_pairs_{m}_{inter}", pw[cols].astype({"group_a": str, "group_b": str}),
                      f"Pairwise Mann-Whitney tests of {m} by {inter}", max_rows=30, highlight="significant")


def agreement_section(result, *, conditions: list[dict] | None = None) -> Section:
    """Build the report section of :func:`fairvision.audits.curation.agreement.audit_agreement`."""
    q = result.quantities()
    sec = Section("agreement", "Annotation agreement", intro=(
        "Agreement between independent annotations of the same images (FHIBE Methods; docs/METHODS.md §13.4): "
        f"annotations of each pair of annotators are matched one-to-one by box IoU (at least {result.min_iou}); "
        "matched pairs are scored by box IoU, object keypoint similarity (OKS), mask Dice and the Jaccard index of "
        "categorical attributes. Means carry subject-bootstrap CIs; vendor pairs and groups of subjects are compared "
        f"with Mann-Whitney tests ({result.correction} correction over every pairwise test of the audit, all "
        "measures, vendor pairs and attribute sets as one family); annotators are described, not tested, since "
        "every match belongs to two annotators. Krippendorff's alpha (nominal) summarises each categorical attribute."))
    overview = {"images": result.n_images, "annotations": result.n_annotations, "annotators": len(result.annotators),
                "vendors": len(result.vendors), "match rate": q.get("match_rate")}
    overview.update({f"mean {m}": q.get(f"mean_{m}") for m in result.measures})
    sec.metrics("overview", overview)
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="overview", quantity=c.get("name"), value=c.get("value"))
    if conditions:
        sec.note("; ".join(describe(c) for c in conditions), "finding" if any(c["holds"] for c in conditions) else "info")
    sec.table("by_pair", result.by_pair, "Agreement of every pair of annotators: matches, match rate "
              "(2 matched / (2 matched + unmatched)) and mean of every measure over the matched annotations")
    if len(result.alpha):
        sec.table("alpha", result.alpha, "Krippendorff's alpha (nominal) per categorical attribute, overall and "
                  "within each vendor; units are the matched annotations of one object")
        n_drop = result.alpha["n_units_dropped"] if "n_units_dropped" in result.alpha.columns else None
        if n_drop is not None and (n_drop > 0).any():
            worst = result.alpha.loc[n_drop.idxmax()]
            sec.note(f"Krippendorff's alpha left out up to {int(n_drop.max())} unit(s) (attribute {worst['attribute']}, "
                     f"vendor {worst['vendor']}) where a chain of matches joins two annotations of one annotator: such "
                     "a unit has no single value per annotator", "warning")
        for _, r in result.alpha[result.alpha["vendor"] == "all"].iterrows():
            if np.isfinite(r["estimate"]) and r["estimate"] < 0.667:
                sec.finding(f"Attribute {r['attribute']}: Krippendorff's alpha {num(r['estimate'])}"
                            f"{ci_text(r['ci_low'], r['ci_high'])} is below 0.667, the lowest level Krippendorff "
                            "accepts for tentative conclusions", "medium", target="alpha",
                            quantity=f"alpha.{r['attribute']}", value=float(r["estimate"]),
                            ci_low=r["ci_low"], ci_high=r["ci_high"])
    if result.by_group is not None:
        summ = result.by_group.summary
        for _, r in summ[summ["n_significant"] > 0].iterrows():
            inter = r["intersection"]
            sec.finding(f"{r['metric']} agreement by {inter}: {group_text(inter, r['worst_group'])} is annotated less "
                        f"consistently than {group_text(inter, r['best_group'])} (mean {num(r['worst_mean'], 3)} vs "
                        f"{num(r['best_mean'], 3)}, difference CI{ci_text(r['difference_ci_low'], r['difference_ci_high'], lambda v: num(v, 3))})",
                        "high", target="overview", quantity=f"group.{r['metric']}.difference", value=float(r["difference"]),
                        ci_low=r["difference_ci_low"], ci_high=r["difference_ci_high"])
        if not (summ["n_significant"] > 0).any():
            sec.finding("No group is annotated significantly less consistently than another", "info",
                        target="overview", quantity="group.significant_pairs", value=0)
    if result.by_annotator is not None and len(result.by_annotator):
        ba = result.by_annotator
        sec.table("by_annotator", ba, f"Mean agreement of each annotator with the others ({int(ba['level'].iat[0] * 100)}% "
                  "subject-bootstrap CI), every match counted for both of its annotators. Descriptive: two annotators' "
                  "matches overlap, so annotators are not tested against each other (compare annotator pairs, "
                  "whose matches are disjoint, in the table above)")
        for m, t in ba.groupby("measure", sort=False):
            if t["mean"].notna().any():
                r = t.loc[t["mean"].idxmin()]
                sec.note(f"Lowest mean {m}: annotator {r['annotator']} ({num(r['mean'], 3)}"
                         f"{ci_text(r['ci_low'], r['ci_high'], lambda v: num(v, 3))}) against the others.")
    _group_tables(sec, result.by_vendor, "vendor", ["vendor_pair"])
    _group_tables(sec, result.by_group, "group", result.attributes)
    return sec

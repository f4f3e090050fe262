"""Report sections of the zero-shot vision-language probe (docs/METHODS.md §12.1) and of the change between two
image variants (docs/METHODS.md §12.2)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe, quantity_key
from fairvision.stats.versus_rest import count_flagged
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import ci_text, count_of, group_text, num, p_text, pct, test_severity, verb

#: at most this many groups get a heatmap row / forest-plot row (the full numbers are in the tables)
MAX_PLOTTED = 40


def vlm_section(result, *, conditions: list[dict] | None = None, title: str = "Zero-shot labels by group") -> Section:
    """Turn a :class:`fairvision.audits.vlm.VLMResult` into a report section (docs/METHODS.md §12.1)."""
    min_subjects = result.meta.get("min_subjects", 10)
    probe = f"prompt set {result.probe!r}" if result.probe else "the labels of the text embeddings"
    sec = Section("vlm", title, intro=(
        f"Every image gets the label, from {probe} ({', '.join(result.labels)}), whose mean prompt embedding is "
        "most similar to it (cosine). Rates per group with subject-bootstrap CIs; each group is compared with the "
        "rest by a chi-square test whose variance allows for several images of one subject (Rao-Scott), "
        f"{result.correction}-corrected over all groups and intersections; a group is flagged when the adjusted "
        f"p-value is below {result.alpha:g} and the CI of its difference from the rest excludes 0. Groups with fewer "
        f"than {min_subjects} subjects are listed but not tested (docs/METHODS.md §12.1)."))
    r = result.rates
    small = r.loc[r["too_small"].astype(bool), ["attribute", "group", "n_samples", "n_subjects"]].drop_duplicates(
        ["attribute", "group"])
    sec.metrics("key figures", {"samples": result.meta.get("n_samples"), "subjects": result.meta.get("n_subjects"),
                                "labels": len(result.labels), "flagged": count_flagged(r),
                                "too small to judge": len(small)})
    gate_findings(sec, conditions)
    for attr, table in result.counts.items():
        if len(table) > MAX_PLOTTED:
            continue
        shares = table.div(table.sum(axis=1).replace(0, np.nan), axis=0)
        fig = plots.heatmap(shares, title=f"Predicted label share by {attr}", fmt="{:.0%}", vmin=0, vmax=1,
                            cbar_label="share of the group's images")
        sec.figure(f"labels by {attr}", fig, f"Share of each predicted label within each {attr} group.",
                   data=shares.reset_index().to_dict(orient="list"))
    sec.table("rates", r, "Label rates (and error rates) per group, group minus rest, tests.", highlight="flagged")
    if len(result.independence):
        sec.table("independence", result.independence, "Chi-square test of predicted label x group, per attribute.")
    if len(result.npmi):
        wide = result.npmi.pivot_table(index=["attribute", "group"], columns="label", values="npmi", sort=False)
        sec.table("npmi", wide.reset_index(), "NPMI between groups and predicted labels (-1 never together, 0 "
                                              "independent, 1 always together).")
    if len(small):
        sec.note(f"{count_of(len(small), 'group')} {verb(len(small))} fewer than {min_subjects} subjects: too small to "
                 "judge; their rates are listed with wide intervals but not tested.", "warning")
        sec.table("too_small", small.reset_index(drop=True), "Groups too small to judge (not tested).", max_rows=50)
    sec.note("The labels depend on the model and the prompts: the probe measures how this model, with these "
             "prompts, labels these images, not who the people are.")
    _findings(sec, result)
    return sec


def gate_findings(sec: Section, conditions: list[dict] | None) -> None:
    """A note per ``--fail-if`` condition, and a high-severity finding for each that holds (as other reports do)."""
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="key figures", quantity=c.get("name"),
                        value=c.get("value"))
        sec.note(describe(c), "finding" if c["holds"] else "info")


def _findings(sec: Section, result) -> None:
    r = result.rates
    flagged = r[r["flagged"]].copy()
    if flagged.empty:
        sec.finding(f"No group's label or error rate differs from the rest of the images (alpha {result.alpha:g}, "
                    f"{result.correction})", "info", target="rates")
        return
    flagged["size"] = flagged["difference"].abs()
    # with two groups, "A lower than the rest" is "B higher than the rest": say it once, for the higher group
    n_groups = r[r["n_samples"] > 0].groupby("attribute")["group"].nunique()
    mirror = flagged["attribute"].map(n_groups).eq(2) & (flagged["difference"] < 0)
    flagged = flagged[~mirror]
    for row in flagged.sort_values("size", ascending=False).head(10).itertuples(index=False):
        what = "error rate" if row.quantity == "error" else f"rate of label {row.quantity!r}"
        direction = "higher" if row.difference > 0 else "lower"
        sec.finding(
            f"{group_text(row.attribute, row.group)}: {what} {pct(row.estimate)}{ci_text(row.ci_low, row.ci_high, pct)} "
            f"is {direction} than the rest ({pct(row.rest)}; difference {num(row.difference)}"
            f"{ci_text(row.diff_ci_low, row.diff_ci_high)}, {p_text(row.pvalue_adjusted)})",
            test_severity(row.pvalue_adjusted, result.alpha, row.size), target="rates",
            quantity=f"gap.{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.quantity}",
            value=row.difference,
            ci_low=row.diff_ci_low, ci_high=row.diff_ci_high, pvalue=row.pvalue_adjusted, size=row.size)



def compare_section(result, *, conditions: list[dict] | None = None,
                    title: str = "Label changes between image variants") -> Section:
    """Turn a :class:`fairvision.audits.vlm.variants.VariantComparison` into a report section (docs/METHODS.md §12.2):
    each group's change of each label's rate from the first variant to the second with subject-bootstrap CIs, a
    forest plot of the changes, the corrected paired tests, and findings for the flagged changes."""
    c = result.changes
    min_subjects = result.meta.get("min_subjects", 10)
    sec = Section("vlm_compare", title, intro=(
        f"The same images shown twice: {result.first!r} (first) and {result.second!r} (second). For each group and "
        "label, the change of the label's rate (second minus first) with a subject-bootstrap CI; the paired test is "
        "the larger p-value of McNemar's exact test on the images and its clustered version on the subjects, "
        f"{result.correction}-corrected over all groups and labels. A change is flagged when the adjusted p-value is "
        f"below {result.alpha:g} and the CI excludes 0; groups with fewer than {min_subjects} subjects are listed "
        "but not tested (docs/METHODS.md §12.2)."))
    small = c.loc[c["too_small"].astype(bool), ["attribute", "group", "n_samples", "n_subjects"]].drop_duplicates(
        ["attribute", "group"]) if len(c) else c
    sec.metrics("key figures", {"samples": result.meta.get("n_samples"), "subjects": result.meta.get("n_subjects"),
                                "labels": len(result.labels), "flagged": int(c["flagged"].sum()) if len(c) else 0,
                                "too small to judge": len(small)})
    gate_findings(sec, conditions)
    for lab in result.labels:
        sub = c[(c["label"] == lab) & (c["n_samples"] > 0)]
        if sub.empty or len(sub) > MAX_PLOTTED:
            continue
        frame = sub.assign(row=[group_text(a, g) for a, g in zip(sub["attribute"], sub["group"])]).set_index("row")
        fig = plots.forest(frame, title=f"Change of the rate of {lab!r}: {result.second} minus {result.first}",
                           xlabel="change of the label's rate (second - first)", reference=0.0, flag="flagged")
        sec.figure(f"change_{lab}", fig, f"Change of the share of images labelled {lab!r} per group, with "
                   f"{int(round(100 * float(sub['level'].iloc[0])))}% subject-bootstrap CIs; red: flagged.",
                   data=frame[["estimate", "ci_low", "ci_high", "flagged"]].reset_index().to_dict(orient="list"))
    sec.table("changes", c, "Rate of each label per group in both variants, the change with its CI, paired tests.",
              highlight="flagged")
    if len(small):
        sec.note(f"{count_of(len(small), 'group')} {verb(len(small))} fewer than {min_subjects} subjects: too small to "
                 "judge; their changes are listed but not tested.", "warning")
    sec.note("A change says how much this model's label depends on what the variant removed (the person or the "
             "scene); it says nothing about the people themselves.")
    flagged = c[c["flagged"].astype(bool)].copy() if len(c) else c
    if flagged.empty:
        sec.finding(f"No group's label rate changes between {result.first!r} and {result.second!r} (alpha "
                    f"{result.alpha:g}, {result.correction})", "info", target="changes")
        return sec
    flagged["size"] = flagged["estimate"].abs()
    for row in flagged.sort_values("size", ascending=False).head(10).itertuples(index=False):
        direction = "rises" if row.estimate > 0 else "falls"
        sec.finding(
            f"{group_text(row.attribute, row.group)}: the rate of label {row.label!r} {direction} from "
            f"{pct(row.rate_first)} ({result.first}) to {pct(row.rate_second)} ({result.second}); change "
            f"{num(row.estimate)}{ci_text(row.ci_low, row.ci_high)}, {p_text(row.pvalue_adjusted)}",
            test_severity(row.pvalue_adjusted, result.alpha, row.size), target="changes",
            quantity=f"change.{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.label}",
            value=row.estimate, ci_low=row.ci_low, ci_high=row.ci_high, pvalue=row.pvalue_adjusted, size=row.size)
    return sec

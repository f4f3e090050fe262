"""Report section of the zero-shot vision-language probe (docs/METHODS.md §12.1)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import ci_text, group_text, num, p_text, pct, test_severity


def vlm_section(result, *, conditions: list[dict] | None = None, title: str = "Zero-shot labels by group") -> Section:
    """Turn a :class:`fairvision.audits.vlm.VLMResult` into a report section."""
    probe = f"prompt set {result.probe!r}" if result.probe else "the labels of the text embeddings"
    sec = Section("vlm", title, intro=(
        f"Every image gets the label, from {probe} ({', '.join(result.labels)}), whose mean prompt embedding is "
        "most similar to it (cosine). Rates per group with subject-bootstrap CIs; each group is compared with the "
        f"rest by a chi-square test, {result.correction}-corrected; a group is flagged when the adjusted p-value is "
        f"below {result.alpha:g} and the CI of its difference from the rest excludes 0 (docs/METHODS.md §12.1)."))
    r = result.rates
    sec.metrics("key figures", {"samples": result.meta.get("n_samples"), "subjects": result.meta.get("n_subjects"),
                                "labels": len(result.labels), "flagged": int(r["flagged"].sum())})
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    for attr, table in result.counts.items():
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
    small = r.loc[r["n_subjects"] < 10, ["attribute", "group"]].drop_duplicates()
    if len(small):
        sec.note(f"{len(small)} groups have fewer than 10 subjects; their intervals are wide.", "warning")
    sec.note("The labels depend on the model and the prompts: the probe measures how this model, with these "
             "prompts, labels these images, not who the people are.")
    _findings(sec, result)
    return sec


def _findings(sec: Section, result) -> None:
    r = result.rates
    flagged = r[r["flagged"]].copy()
    if flagged.empty:
        sec.finding(f"No group's label or error rate differs from the rest of the images (alpha {result.alpha:g}, "
                    f"{result.correction})", "info", target="rates")
        return
    flagged["size"] = flagged["difference"].abs()
    # with two groups, "A lower than the rest" is "B higher than the rest": say it once, for the higher group
    n_groups = r.groupby("attribute")["group"].nunique()
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
            quantity=f"gap.{row.attribute}.{row.group}.{row.quantity}", value=row.difference,
            ci_low=row.diff_ci_low, ci_high=row.diff_ci_high, pvalue=row.pvalue_adjusted, size=row.size)


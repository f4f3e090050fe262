"""Report section of the model audit: forest plots of group metrics with CIs, disparity tables.

Turns a :class:`fairvision.audits.model.ModelAuditResult` into a
:class:`fairvision.report.Section` (docs/METHODS.md §6.2, §6.3, §6.4).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.audits.gates import describe, quantity_key
from fairvision.groups import group_label
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import GAP_LARGE, ci_text, group_text, imbalance_severity, num, p_text, verb

_MAX_FOREST_ROWS = 40


def _forest_frame(table: pd.DataFrame, higher: bool, inter: str) -> pd.DataFrame:
    df = table[table["n_samples"] > 0].copy()
    df.index = [group_text(inter, group_label(i)) for i in df.index]
    if len(df) > _MAX_FOREST_ROWS:
        order = df["mean"].sort_values(ascending=higher).index
        half = _MAX_FOREST_ROWS // 2
        df = df.loc[list(order[:half]) + list(order[-half:])]
    return df


def model_section(result, *, conditions: list[dict] | None = None, title: str = "Model performance by group") -> Section:
    """Build the report section of a model audit.

    Parameters
    ----------
    result : ModelAuditResult
    conditions : list of dict, optional
        Evaluated ``--fail-if`` conditions (from ``evaluate_conditions``).
    """
    unit = "subject means" if result.test_unit == "subject" else "per-image scores"
    sec = Section(
        "model",
        title,
        intro=(
            "Per-sample scores disaggregated by group and intersection. Group means carry "
            f"{int(result.level * 100)}% percentile CIs from a cluster bootstrap over subjects "
            f"({result.n_boot:,} resamples). Pairs of groups are compared with two-sided Mann-Whitney U tests on "
            f"{unit}, corrected with {result.correction} within each attribute or intersection "
            f"(alpha {result.alpha}); for significant pairs the disparity D = 1 - MED(worst)/MED(best) "
            "(FHIBE; docs/METHODS.md §6.3). Groups with fewer than "
            f"{result.min_subjects} subjects are listed but not compared."
        ),
    )
    top = result.top_disparities
    sec.metrics("overview", {
        "samples read": result.n_samples,
        "samples scored": result.n_scored,
        "samples left out": result.n_left_out,
        "subjects": result.n_subjects,
        "metrics": len(result.metrics),
        "attribute sets": len(result.intersections),
        "significant pairs": int(result.summary["n_significant"].sum()) if len(result.summary) else 0,
        "largest D": float(top["disparity"].max()) if len(top) else 0.0,
    })
    add_findings(sec, result, conditions)
    if result.n_left_out:
        cov = result.coverage
        od = " and OD the samples with both classes" if result.od else ""
        sec.note(f"{cov.n_left_out:,} of {cov.n:,} samples are left out ({cov.reasons_text()}): each metric uses the "
                 f"samples scored for it{od}; the coverage section tests whether the share left out differs by group "
                 "(docs/METHODS.md §9.3).", "warning")
    if result.subject_col is None:
        sec.note("No subject column: every image is treated as a different person. If people appear in several "
                 "images the CIs are too narrow and the p-values too small.", "warning")
    if result.lower_is_better:
        sec.note(f"Lower is better for: {', '.join(result.lower_is_better)} (the worst group has the larger median).")
    if conditions:
        failed = [c for c in conditions if c["holds"]]
        sec.note("; ".join(describe(c) for c in conditions), "finding" if failed else "info")
    if len(top):
        sec.text("Top disparities: for each metric and attribute set, the significant pair of groups with the largest D, "
                 "in the layout of the FHIBE paper's Extended Data Table 2.")
        show = top.copy()
        show["intersection"] = show["intersection"].astype(str)
        sec.table("top_disparities", show, "Largest significant disparity per metric and attribute set")
        lead = top.iloc[0]
        sec.note(f"Largest disparity: {lead['metric']} by {lead['intersection']}: D = {lead['disparity']:.3f}, worst "
                 f"{lead['worst_group']} (median {lead['median_worst']:.4g}) vs best {lead['best_group']} "
                 f"(median {lead['median_best']:.4g}), adjusted p = {lead['pvalue_adjusted']:.3g}.", "finding")
    else:
        sec.note("No pair of groups differs significantly after correction.")
    sec.table("summary", result.summary, "Worst and best group by mean, difference and ratio with bootstrap CIs, tests per attribute set")
    small = result.too_small()
    if len(small):
        sec.note(f"{len(small)} groups have fewer than {result.min_subjects} subjects and are too small to judge; "
                 "they are listed with their numbers but not compared.", "warning")
        sec.table("too_small", small, "Groups too small to judge", max_rows=50)
    for m in result.metrics:
        higher = m not in result.lower_is_better
        for inter in result.intersections:
            table = result.groups[(m, inter)]
            fdf = _forest_frame(table, higher, inter)
            if len(fdf) and inter.count("×") <= 1:
                fig = plots.forest(fdf, estimate="mean", low="ci_low", high="ci_high", flag="too_small",
                                   title=f"{m} by {inter}", xlabel=f"mean {m} ({int(result.level * 100)}% CI)",
                                   reference=float(np.nanmean(table["mean"])) if table["mean"].notna().any() else None)
                extra = " (40 most extreme groups)" if len(table[table["n_samples"] > 0]) > _MAX_FOREST_ROWS else ""
                sec.figure(f"forest_{m}_{inter}", fig, f"Mean {m} by {inter} with CIs{extra}; red: too small to judge",
                           data=fdf[["mean", "ci_low", "ci_high", "n_subjects"]].reset_index().to_dict("list"))
            sec.table(f"groups_{m}_{inter}", table, f"{m} by {inter}", max_rows=60, highlight="too_small")
            pw = result.pairwise[(m, inter)]
            if len(pw):
                sig = pw[pw["significant"].astype(bool)].sort_values("disparity", ascending=False)
                cols = ["group_a", "group_b", "median_a", "median_b", "u", "pvalue", "pvalue_adjusted", "significant",
                        "worst", "best", "disparity", "effect_size"]
                sec.table(f"pairs_{m}_{inter}", pw[cols].astype({"group_a": str, "group_b": str, "worst": str, "best": str}),
                          f"Pairwise Mann-Whitney tests, {m} by {inter} ({len(sig)} of {len(pw)} significant)",
                          max_rows=30, highlight="significant")
    for inter, od in result.od.items():
        sec.metrics(f"od_{inter}", {"OD": od.estimate, "CI low": od.ci_low, "CI high": od.ci_high},
                    caption=f"Overall disparity of per-class recall by {inter} (docs/METHODS.md §6.4), {int(od.level * 100)}% CI")
        if od.recall.size <= 400:
            fig = plots.heatmap(od.recall, title=f"Recall by class and {inter}", vmin=0, vmax=1, cbar_label="recall")
            sec.figure(f"recall_{inter}", fig, f"Recall of each class within each group ({inter})",
                       data=od.recall.to_dict())
        sec.table(f"id_{inter}", od.id_per_class.to_frame(), f"Intraclass disparity ID per class ({inter})")
    return sec


def _pair_pvalue(pw: pd.DataFrame, a: str, b: str) -> tuple[float, bool]:
    """Adjusted p-value of the test of groups ``a`` and ``b`` (and whether it is significant); NaN when untested."""
    if not len(pw):
        return float("nan"), False
    ga, gb = pw["group_a"].astype(str), pw["group_b"].astype(str)
    hit = pw[((ga == a) & (gb == b)) | ((ga == b) & (gb == a))]
    if not len(hit):
        return float("nan"), False
    row = hit.iloc[0]
    return float(row["pvalue_adjusted"]), bool(row["significant"])


def add_findings(sec: Section, result, conditions: list[dict] | None = None) -> None:
    """Findings of a model audit (docs/METHODS.md §9.1): failed gates; per metric and attribute set, the gap
    between the worst and best group (difference of means with its bootstrap CI, the adjusted p-value of
    their pairwise test); groups too small to compare; the multi-class OD."""
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="overview", quantity=c.get("name"), value=c.get("value"))
    quiet = []
    for m in result.metrics:
        higher = m not in result.lower_is_better
        rows = result.summary[result.summary["metric"] == m] if len(result.summary) else result.summary
        any_sig = False
        for _, row in rows.iterrows():
            inter = row["intersection"]
            if row["worst_group"] is None or not np.isfinite(row["difference"]) or row["worst_group"] == row["best_group"]:
                continue
            p, sig = _pair_pvalue(result.pairwise.get((m, inter), pd.DataFrame()), row["worst_group"], row["best_group"])
            ratio = float(row["ratio"])
            rel = 1.0 - ratio if np.isfinite(ratio) and 0.0 <= ratio <= 1.0 else None
            if sig:
                sev = "high" if rel is None or rel >= GAP_LARGE else "medium"
            elif int(row["n_significant"]) > 0:
                sev = "medium"
            else:
                continue
            any_sig = True
            diff = float(row["difference"])
            ptxt = p_text(p) if np.isfinite(p) else "pair not tested"
            n_sig = int(row["n_significant"])
            extra = "" if sig else f"; {n_sig} other {'pair differs' if n_sig == 1 else 'pairs differ'} significantly"
            ci = ci_text(row["difference_ci_low"], row["difference_ci_high"], lambda v: num(v, 3))
            ci = f"; difference {int(result.level * 100)}% CI{ci}" if ci else ""
            sec.finding(
                f"{m} by {inter}: worst group {group_text(inter, row['worst_group'])} is {num(diff, 3)} "
                f"{'below' if higher else 'above'} best group {group_text(inter, row['best_group'])} "
                f"(means {num(row['worst_mean'], 3)} vs {num(row['best_mean'], 3)}{ci}; {ptxt}){extra}",
                sev, target="summary", quantity=f"{m}.{quantity_key(inter)}.difference", value=diff,
                ci_low=row["difference_ci_low"], ci_high=row["difference_ci_high"], pvalue=p if np.isfinite(p) else None,
                size=rel)
        if not any_sig and len(rows):
            quiet.append(m)
    if quiet:
        sec.finding(f"No pair of groups differs significantly in {', '.join(quiet)} after {result.correction} correction "
                    f"({len(result.intersections)} attribute sets)", "info", target="summary",
                    quantity="significant_pairs", value=0)
    small = result.too_small()
    if len(small):
        n_groups = sum(len(result.groups[(result.metrics[0], i)]) for i in result.intersections) if result.metrics else 0
        shown = ", ".join(group_text(r["intersection"], r["group"]) + f" ({int(r['n_subjects'])})"
                          for _, r in small.head(3).iterrows())
        sec.finding(f"{len(small)} of {n_groups} groups {verb(len(small))} fewer than {result.min_subjects} subjects and are not "
                    f"compared: {shown}" + (", ..." if len(small) > 3 else ""),
                    "medium", target="too_small", quantity="n_too_small", value=len(small),
                    size=len(small) / n_groups if n_groups else None)
    for inter, od in result.od.items():
        sec.finding(f"Recall by {inter}: overall disparity OD {num(od.estimate)}{ci_text(od.ci_low, od.ci_high)}",
                    imbalance_severity(od.estimate), target=f"od_{inter}", quantity=f"od.{quantity_key(inter)}",
                    value=od.estimate, ci_low=od.ci_low, ci_high=od.ci_high, size=od.estimate)

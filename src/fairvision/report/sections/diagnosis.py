"""Report sections for bias diagnosis (docs/METHODS.md §7; Thong et al. section 4.3).

One function per analysis of :mod:`fairvision.audits.diagnosis`: error
modelling, error patterns, confounder control, counterfactual sets and
colorimetric transects. None of them embeds images.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.report import plots
from fairvision.report.document import Section
from fairvision.report.findings import ci_text, group_text, p_text, test_severity


def error_model_section(result, *, id: str = "diagnosis-errors", title: str = "What drives the errors") -> Section:
    """Section for :class:`~fairvision.audits.diagnosis.error_model.ErrorModelResult`."""
    s = Section(id, title, intro=(
        f"Direct error modelling (FHIBE): the per-sample {result.label} is predicted from the annotations by a "
        f"random forest; features are ranked by {result.importance} importance, the elbow of the ranking picks "
        f"the top features, and a decision tree on those (depth at most {result.meta.get('max_depth')}"
        f"{', pruned by subject-grouped cross-validation' if result.meta.get('prune') else ''}) turns them into "
        f"rules. Rule means carry {result.n_boot:,}-resample bootstrap standard errors "
        f"({'resampling subjects' if result.by_subject else 'resampling samples; no subject column'})."))
    s.metrics("overview", {
        "samples": result.n_samples, "subjects": result.n_subjects, f"mean {result.label}": result.overall_mean,
        "held-out R² (forest)": result.r2_forest, "R² (tree)": result.r2_tree, "features kept": len(result.selected),
    })
    if result.n_dropped:
        s.note(f"{result.n_dropped} samples without a score were left out.", "warning")
    if not result.explained:
        s.note(f"The annotations barely predict the {result.label} of held-out subjects (R² = {result.r2_forest:.3f} "
               f"< {result.min_r2}); the ranking and rules below most likely describe noise.", "warning")
        s.finding(f"The annotations barely predict the {result.label} of held-out subjects (R² = {result.r2_forest:.3f}); "
                  "the error model's rules most likely describe noise", "info", target="overview",
                  quantity="r2_forest", value=result.r2_forest)
    else:
        worst = result.rules.iloc[0]
        rel = abs(worst["mean"] - result.overall_mean) / abs(result.overall_mean) if result.overall_mean else None
        s.finding(f"Worst rule for {result.label}: {worst['condition']}: mean {worst['mean']:.3g}"
                  f"{ci_text(worst['ci_low'], worst['ci_high'], lambda v: f'{v:.3g}')} vs {result.overall_mean:.3g} overall "
                  f"(n = {int(worst['n']):,}; held-out R² {result.r2_forest:.3f}); top feature "
                  f"{result.importances.index[0]}", "medium", target="rules", quantity="rule_mean", value=worst["mean"],
                  ci_low=worst["ci_low"], ci_high=worst["ci_high"], size=min(rel, 1.0) if rel is not None else None)
        s.note(f"Worst rule: {worst['rule']} (overall mean {result.overall_mean:.3g}). "
               f"Top feature: {result.importances.index[0].replace('_', ' ')}.", "finding")
    imp = result.importances
    s.figure("importances", plots.bar(imp[result.importance], title=f"Random forest {result.importance} importance",
                                      ylabel="importance", highlight=list(imp["selected"]), horizontal=True),
             "Feature importances; red bars are the features kept by the elbow rule.",
             data={"feature": list(imp.index), result.importance: imp[result.importance].tolist()})
    s.table("importances", imp, "Impurity importance (summed over a categorical feature's levels) and permutation "
            "importance (drop in held-out R² when the feature is shuffled; mean and SD over repeats).", highlight="selected")
    rules = result.rules
    fig_df = rules.set_index("condition")[["mean", "ci_low", "ci_high"]]
    s.figure("rules", plots.forest(fig_df, estimate="mean", title=f"Mean {result.label} per rule", xlabel=result.label,
                                   reference=result.overall_mean),
             "Decision-tree rules with bootstrap CIs; the dashed line is the overall mean.",
             data=rules[["condition", "mean", "ci_low", "ci_high", "n"]].to_dict("list"))
    s.table("rules", rules, "Decision-tree rules, worst first: mean score, bootstrap SE and percentile CI per leaf. "
            "The tree was chosen on the same data, so these describe rather than test.")
    return s


def patterns_section(result, *, id: str = "diagnosis-patterns", title: str = "Error patterns") -> Section:
    """Section for :class:`~fairvision.audits.diagnosis.patterns.PatternResult`."""
    cmp = "<=" if result.higher_is_better else ">="
    s = Section(id, title, intro=(
        f"Association rules (FP-growth, FHIBE error pattern recognition) between attribute values and a low "
        f"{result.score} ({result.score} {cmp} {result.threshold:.4g}; {result.base_rate:.1%} of samples). "
        f"Ranked by lift = P(low | items) / P(low). Each rule has a one-sided Fisher exact p-value, "
        f"{result.correction}-corrected over all {result.n_tested} frequent item combinations examined; a rule of "
        f"several items is significant only if each item raises the low-score rate beyond the shorter rule."))
    rules = result.rules
    n_sig = int(rules["significant"].sum()) if len(rules) else 0
    s.metrics("overview", {"samples": result.n_samples, "low-score samples": result.n_low,
                           "combinations tested": result.n_tested, "rules (lift ≥ 1)": len(rules),
                           "significant rules": n_sig})
    if n_sig == 0:
        s.note("No attribute combination co-occurs with low scores more than chance allows.", "info")
        s.finding(f"No attribute combination co-occurs with a low {result.score} more than chance allows "
                  f"({result.n_tested} combinations tested, {result.correction} correction)", "info", target="overview",
                  quantity="significant_rules", value=0)
    else:
        for _, r in rules[rules["significant"].astype(bool)].head(5).iterrows():
            excess = float(r["confidence"]) - result.base_rate
            s.finding(f"{r['items']} → low {result.score}: {r['confidence']:.1%} of {int(r['n']):,} samples vs "
                      f"{result.base_rate:.1%} overall (lift {r['lift']:.2f}; {p_text(r['pvalue_adjusted'])})",
                      test_severity(r["pvalue_adjusted"], result.alpha, excess), target="rules",
                      quantity="lift", value=r["lift"], pvalue=r["pvalue_adjusted"], size=excess)
        top = rules[rules["significant"]].iloc[0]
        s.note(f"Top significant rule: {top['items']} → low {result.score} (lift {top['lift']:.2f}, "
               f"confidence {top['confidence']:.1%}, n = {top['n_matching']}). Use it as a group with "
               f"`add_rule_attribute` (CLI: --save-groups) to audit it.", "finding")
    if len(rules):
        head = rules.head(20)
        s.figure("lift", plots.bar(head.set_index("items")["lift"], title="Lift of the top rules", ylabel="lift",
                                   highlight=list(head["significant"]), horizontal=True),
                 "Lift of the top 20 rules; red bars are significant after correction.",
                 data={"items": list(head["items"]), "lift": head["lift"].tolist()})
    s.table("rules", rules.drop(columns=["antecedent"]), "Rules → low score, highest lift first.", highlight="significant")
    return s


def confounder_section(result, *, id: str = "diagnosis-confounders", title: str = "Confounder control") -> Section:
    """Section for :class:`~fairvision.audits.diagnosis.confounders.ConfounderResult`."""
    a, c = result.attribute.replace("_", " "), result.confounder.replace("_", " ")
    s = Section(id, title, intro=(
        f"Is the {a} difference in {result.score} explained by {c}? Groups are compared without stratification, "
        f"pooled within strata of {c} ({result.test}), and inside every stratum. P-values are "
        f"{result.correction}-corrected; cells with fewer than {result.min_count} subjects are not tested."))
    s.note(result.message, "finding" if result.disparity_before else "info")
    _confounder_findings(s, result, a, c)
    s.metrics("overview", {"strata": len(result.strata_labels), "pairs": len(result.overall),
                           "significant before": int(result.overall["significant"].sum()),
                           "significant after": int(result.stratified["significant"].sum())})
    if result.within["too_small"].any():
        s.note(f"{int(result.within['too_small'].sum())} stratum × pair comparisons had a group with fewer than "
               f"{result.min_count} subjects and were not tested.", "warning")
    s.table("overall", result.overall, "Without stratification.", highlight="significant")
    s.table("stratified", result.stratified, f"Pooled within strata of {c} ({result.test}).", highlight="significant")
    s.table("within", result.within, f"Inside each stratum of {c}.", highlight="significant")
    cells = plots.unstack_ordered(result.cells["mean"], "group")
    cells.index.name, cells.columns.name = result.confounder, result.attribute
    if cells.size:
        s.figure("cells", plots.heatmap(cells, title=f"Mean {result.score} by {c} stratum and {a}", fmt="{:.3g}",
                                        labelled=True),
                 f"Mean {result.score} per stratum (rows) and group (columns).",
                 data={"strata": [str(i) for i in cells.index], "groups": [str(g) for g in cells.columns],
                       "mean": cells.to_numpy().tolist()})
    s.table("cells", result.cells, "Samples, subjects, mean and median per stratum and group.")
    return s


def counterfactual_section(result, *, id: str = "diagnosis-counterfactual",
                           title: str = "Counterfactual skin colour") -> Section:
    """Section for :class:`~fairvision.audits.diagnosis.counterfactual.CounterfactualResult`."""
    s = Section(id, title, intro=(
        f"Accuracy per image variant and class in the layout of Thong et al. (2023) Table 4. Each variant is "
        f"compared with the '{result.reference}' set on the same samples by McNemar's paired test "
        f"({result.correction}-corrected); a change means the manipulation, not the reconstruction, moved the model."))
    t = result.tests
    s.metrics("overview", {"variants": len(result.variants), "classes": len(result.classes),
                           "tests": len(t), "significant changes": int(t["significant"].sum())})
    if result.n_unpaired:
        s.note(f"{result.n_unpaired} variant rows had no '{result.reference}' partner and were left out of the tests.",
               "warning")
    for (m, v, cl), row in t[t["significant"].astype(bool)].iterrows():
        s.finding(f"{m}: {v} images change the accuracy of class = {cl} by {row['change']:+.1f} points "
                  f"({100 * row['acc_reference']:.1f}% → {100 * row['acc_variant']:.1f}%; {p_text(row['pvalue_adjusted'])})",
                  test_severity(row["pvalue_adjusted"], result.alpha, abs(row["change"]) / 100.0), target="tests",
                  quantity=f"change.{m}.{v}.{cl}", value=row["change"], pvalue=row["pvalue_adjusted"],
                  size=abs(row["change"]) / 100.0)
    if len(t) and not t["significant"].astype(bool).any():
        s.finding(f"No variant changes any class's accuracy significantly against '{result.reference}' "
                  f"({len(t)} tests, {result.correction} correction)", "info", target="tests",
                  quantity="significant_changes", value=0)
    for (m, v, cl), row in t[t["significant"]].iterrows():
        s.note(f"{m}: {v} changes the accuracy of class {cl} by {row['change']:+.1f} points "
               f"({100 * row['acc_reference']:.1f}% → {100 * row['acc_variant']:.1f}%, adjusted p = {row['pvalue_adjusted']:.2g}).",
               "finding")
    acc = result.accuracy.copy()
    acc.columns = [f"{v} / {c}" for v, c in acc.columns]
    s.table("accuracy", acc, "Accuracy (%) per variant and class (Thong et al. Table 4 layout).")
    change = plots.unstack_ordered(t["change"], "variant") if len(t) else pd.DataFrame()
    if change.size:
        change.index = [f"{m} / {c}" for m, c in change.index]
        s.figure("change", plots.heatmap(change, title=f"Accuracy change vs {result.reference} (points)", center=0.0,
                                         fmt="{:+.1f}"),
                 f"Accuracy change in percentage points against the {result.reference} images.",
                 data={"rows": list(change.index), "variants": list(change.columns), "change": change.to_numpy().tolist()})
    s.table("tests", t, f"McNemar tests against '{result.reference}' (b: right there, wrong here; c: the reverse).",
            highlight="significant")
    return s


def transect_section(checks: pd.DataFrame, *, axis: str, delta: float, id: str = "diagnosis-transect",
                     title: str = "Colorimetric transect") -> Section:
    """Section for a table of :attr:`~fairvision.audits.diagnosis.counterfactual.TransectResult.check` dicts (one row per image)."""
    name = "L*" if axis == "L" else "h*"
    unit = "" if axis == "L" else "°"
    s = Section(id, title, intro=(
        f"Skin pixels were shifted by {delta:+g}{unit} in {name} (CIELAB, D65), the other axis held, colours outside "
        f"sRGB brought back by reducing chroma at constant L* and h*, and the result measured again on the "
        f"8-bit output (mean L* of the skin region; hue of its mean a*, b*). Pixels outside the skin mask are "
        f"unchanged. A transect in the spirit of Thong et al. (2023) section 4.3, without a generative model."))
    done = checks[checks["status"] == "done"] if "status" in checks else checks
    s.metrics("overview", {"images": len(checks), "shifted": len(done), "within tolerance": int(done["ok"].sum()),
                           f"mean achieved {name}": float(done["achieved"].mean()) if len(done) else np.nan})
    skipped = len(checks) - len(done)
    if skipped:
        s.note(f"{skipped} images were not shifted (no skin mask, or a grey skin region for a hue transect); "
               "see the 'reason' column.", "warning")
    bad = done[~done["ok"].astype(bool)] if len(done) else done
    s.finding(f"{int(done['ok'].sum()) if len(done) else 0} of {len(checks)} images reached the requested {delta:+g}{unit} "
              f"shift in {name} within tolerance" + (f"; {skipped} were not shifted" if skipped else ""),
              "medium" if len(bad) or skipped else "info", target="checks", quantity="within_tolerance",
              value=int(done["ok"].sum()) if len(done) else 0,
              size=(len(bad) + skipped) / len(checks) if len(checks) else None)
    if len(bad):
        s.note(f"{len(bad)} images missed the tolerance (large gamut clipping); see 'error' and 'other_change'.",
               "warning")
    s.table("checks", checks, "Requested and achieved shift per image, drift of the other axis and share of "
            "gamut-mapped pixels.", highlight=None)
    return s


def _confounder_findings(s: Section, result, a: str, c: str) -> None:
    """Findings of a confounder analysis: each pair that still differs within strata, or the verdict."""
    st = result.stratified
    sig = st[st["significant"].astype(bool)] if len(st) else st
    for (x, y), row in sig.iterrows():
        s.finding(f"{group_text(result.attribute, x)} vs {group_text(result.attribute, y)}: the {result.score} difference "
                  f"survives holding {c} fixed ({result.test}, {p_text(row['pvalue_adjusted'])})",
                  "high", target="stratified", quantity="pvalue_adjusted", value=row["pvalue_adjusted"],
                  pvalue=row["pvalue_adjusted"])
    if not len(sig):
        before = int(result.overall["significant"].sum()) if len(result.overall) else 0
        if before:
            s.finding(f"The {a} difference in {result.score} ({before} of {len(result.overall)} pairs) disappears once {c} "
                      f"is held fixed ({result.test})", "medium", target="stratified",
                      quantity="significant_after", value=0)
        else:
            s.finding(f"No significant {a} difference in {result.score}, with or without holding {c} fixed", "info",
                      target="overall", quantity="significant_before", value=0)

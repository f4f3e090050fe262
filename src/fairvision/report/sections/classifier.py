"""Report section of the classifier audit: rates by group, fairness criteria with CIs, tests, the threshold sweep.

Turns a :class:`fairvision.audits.classifier.ClassifierAuditResult` into a :class:`fairvision.report.Section`
(docs/METHODS.md §6.6).
"""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import GAP_LARGE, ci_text, group_text, num, p_text

_NAMES = {"selection_rate": "selection rate", "tpr": "TPR", "fpr": "FPR", "fnr": "FNR", "tnr": "TNR",
          "precision": "precision", "npv": "NPV", "accuracy": "accuracy", "balanced_accuracy": "balanced accuracy"}
_MAX_FOREST_ROWS = 40


def classifier_section(result, *, conditions: list[dict] | None = None,
                       title: str = "Classifier rates and fairness criteria") -> Section:
    """Build the report section of a classifier audit.

    Parameters
    ----------
    result : ClassifierAuditResult
    conditions : list of dict, optional
        Evaluated ``--fail-if`` conditions (from ``evaluate_conditions``).
    title : str
    """
    opts = result.options
    what = (f"positive class {result.positive}" if result.binary
            else f"{len(result.classes)} classes, each one against the rest")
    compare = ("against the reference group of each attribute set (aequitas)" if opts.reference
               else "between the groups with the lowest and the highest rate (fairlearn's between_groups)")
    sec = Section("classifier", title, intro=(
        f"Confusion counts and rates of every group and intersection ({what}). Rates carry "
        f"{int(result.level * 100)}% percentile CIs from a cluster bootstrap over subjects ({result.n_boot:,} "
        f"resamples); the fairness criteria compare the groups {compare}, with CIs from the same replicates. A "
        f"difference holds at most {num(opts.tolerance)}, a ratio at least {num(opts.four_fifths)} (the four-fifths "
        f"rule for disparate impact). Each group's selection rate, TPR, FPR and precision is tested against the rest "
        f"of its attribute set, {result.correction}-corrected within the set (alpha {result.alpha}). Groups with "
        f"fewer than {result.min_subjects} subjects are listed but neither compared nor tested (docs/METHODS.md §6.6)."))
    crit = result.criteria
    sec.metrics("overview", {
        "samples read": result.n_samples, "samples used": result.n_used, "samples left out": result.n_left_out,
        "subjects": result.n_subjects, "classes": len(result.classes), "attribute sets": len(result.intersections),
        "criteria broken": int(sum(_broken(h) for h in crit["holds"])) if len(crit) else 0,
        "differences flagged": int(result.quantities()["flagged"]),
    })
    add_findings(sec, result, conditions)
    if result.n_left_out:
        cov = result.coverage
        sec.note(f"{cov.n_left_out:,} of {cov.n:,} samples are left out ({cov.reasons_text()}); the coverage section "
                 "tests whether the share left out differs by group (docs/METHODS.md §9.3).", "warning")
    if result.subject_col is None:
        sec.note("No subject column: every sample is treated as a different person. If people appear in several "
                 "samples the CIs are too narrow and the p-values too small.", "warning")
    if conditions:
        sec.note("; ".join(describe(c) for c in conditions), "finding" if any(c["holds"] for c in conditions) else "info")
    show = crit.drop(columns=["kind"]).copy()
    show["holds"] = show["holds"].map({True: "yes", False: "no"}).fillna("n/a")
    sec.table("criteria", show, "Fairness criteria per attribute set, with bootstrap CIs; 'holds' against the "
              "tolerance (differences) or the four-fifths bound (ratios)", max_rows=120)
    small = result.rates[result.rates["too_small"].astype(bool)]
    if len(small):
        shown = small.drop_duplicates(["intersection", "group"])
        sec.note(f"{len(shown)} groups have fewer than {result.min_subjects} subjects: listed with their rates, "
                 "neither compared nor tested.", "warning")
    for inter in result.intersections:
        _rates_block(sec, result, inter)
    if len(result.tests):
        t = result.tests.sort_values(["flagged", "pvalue_adjusted"], ascending=[False, True], kind="stable")
        cols = ["intersection", "group", "class", "rate", "n_samples", "estimate", "rest", "statistic", "pvalue",
                "pvalue_adjusted", "flagged", "too_small"]
        sec.table("tests", t[cols], "Each group against the rest of its attribute set (subject-level test, corrected "
                  "within the set)", max_rows=60, highlight="flagged")
    if len(result.auc):
        _score_blocks(sec, result)
    for inter, od in result.od.items():
        sec.metrics(f"od_{inter}", {"OD": od.estimate, "CI low": od.ci_low, "CI high": od.ci_high},
                    caption=f"Overall disparity of per-class recall by {inter} (docs/METHODS.md §6.4)")
        sec.table(f"id_{inter}", od.id_per_class.to_frame(), f"Intraclass disparity ID per class ({inter})")
    return sec


def _rates_block(sec: Section, result, inter: str) -> None:
    r = result.rates[result.rates["intersection"] == inter]
    r = r[r["n_samples"] > 0]
    cols = ["group", "class", "n_samples", "n_subjects", "too_small", "tp", "fp", "fn", "tn", *_NAMES]
    sec.table(f"rates_{inter}", r[cols], f"Rates by {inter}", max_rows=80, highlight="too_small")
    if inter.count("×") > 1 or not len(r) or not result.binary:
        return
    df = r.set_index("group")
    if len(df) > _MAX_FOREST_ROWS:
        df = df.sort_values("selection_rate").iloc[np.r_[0:_MAX_FOREST_ROWS // 2, -_MAX_FOREST_ROWS // 2:0]]
    df.index = [group_text(inter, g) for g in df.index]
    for rate in ("selection_rate", "tpr"):
        part = df[[rate, f"{rate}_ci_low", f"{rate}_ci_high", "too_small"]].dropna(subset=[rate])
        if not len(part):
            continue
        fig = plots.forest(part, estimate=rate, low=f"{rate}_ci_low", high=f"{rate}_ci_high", flag="too_small",
                           title=f"{_NAMES[rate]} by {inter}", xlabel=f"{_NAMES[rate]} ({int(result.level * 100)}% CI)")
        sec.figure(f"forest_{rate}_{inter}", fig, f"{_NAMES[rate]} by {inter} with CIs; red: too small to judge",
                   data=part.reset_index().rename(columns={"index": "group"}).to_dict("list"))


def _score_blocks(sec: Section, result) -> None:
    sec.text("With a score: the ROC AUC of every group, and a sweep of one threshold shared by all groups "
             "(positive when score >= threshold) with the thresholds at which each criterion holds.")
    sec.table("auc", result.auc, "ROC AUC by group", max_rows=60, highlight="too_small")
    sec.table("thresholds", result.thresholds, "Thresholds at which each criterion holds (holds_at: runs of the "
              "swept thresholds; best_threshold: the fairest one that selects some but not all)", max_rows=60)
    sec.table("sweep", result.sweep, "Rates by group at every threshold", max_rows=30)
    for inter in result.intersections:
        sw = result.sweep[result.sweep["intersection"] == inter]
        if inter.count("×") or not len(sw) or sw["group"].nunique() > 12:
            continue
        wide = sw.pivot(index="threshold", columns="group", values="selection_rate")
        fig = plots.lines(wide.index.to_numpy(), {group_text(inter, g): wide[g].to_numpy() for g in wide.columns},
                          title=f"Selection rate by {inter}", xlabel="threshold", ylabel="selection rate")
        sec.figure(f"sweep_{inter}", fig, f"Selection rate of each group of {inter} at every threshold",
                   data={"threshold": wide.index.tolist(), **{str(g): wide[g].tolist() for g in wide.columns}})


def add_findings(sec: Section, result, conditions: list[dict] | None = None) -> None:
    """Findings of a classifier audit (docs/METHODS.md §9.1): failed gates; per attribute set (and class) the
    demographic parity and equalized odds differences and a broken four-fifths rule, high when some group's
    rate also differs significantly from the rest's; the most significant flagged groups."""
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="overview", quantity=c.get("name"), value=c.get("value"))
    crit, tests = result.criteria, result.tests
    flagged = tests[tests["flagged"].astype(bool)] if len(tests) else tests
    for (inter, cls), part in crit.groupby(["intersection", "class"], sort=False):
        byname = part.set_index("criterion")
        key = inter if result.binary else f"{inter}, class {cls}"
        sig = flagged[(flagged["intersection"] == inter) & (flagged["class"] == cls)] if len(flagged) else flagged
        for name, label in (("equalized_odds_difference", "equalized odds difference"),
                            ("demographic_parity_difference", "demographic parity difference")):
            row = byname.loc[name]
            if not np.isfinite(row["estimate"]):
                continue
            broken = _broken(row["holds"])
            severity = ("high" if len(sig) and row["estimate"] >= GAP_LARGE else "medium") if broken else "info"
            groups = f" ({_NAMES[row['rate']]} {group_text(inter, row['low_group'])} vs {group_text(inter, row['high_group'])})" \
                if row["low_group"] is not None else ""
            verdict = "above" if broken else "within"
            sec.finding(f"By {key}, the {label} is {num(row['estimate'])}{ci_text(row['ci_low'], row['ci_high'])}"
                        f"{groups}, {verdict} the tolerance of {num(result.options.tolerance)}", severity,
                        target="criteria", quantity=f"{name}.{inter}", value=row["estimate"], ci_low=row["ci_low"],
                        ci_high=row["ci_high"], size=row["estimate"], topic=f"classifier:{name}:{key}")
        di = byname.loc["disparate_impact"]
        if np.isfinite(di["estimate"]) and di["estimate"] < result.options.four_fifths:
            sec.finding(f"By {key}, disparate impact is {num(di['estimate'])}{ci_text(di['ci_low'], di['ci_high'])}: "
                        f"{group_text(inter, di['low_group'])} is selected at less than four fifths of the rate of "
                        f"{group_text(inter, di['high_group'])}", "high" if len(sig) else "medium", target="criteria",
                        quantity=f"disparate_impact.{inter}", value=di["estimate"], ci_low=di["ci_low"],
                        ci_high=di["ci_high"], size=1 - di["estimate"])
    if len(flagged):
        top = flagged.sort_values("pvalue_adjusted", kind="stable")
        top = top[top["same_test_as"].isna()] if "same_test_as" in top.columns else top
        for _, t in top.head(3).iterrows():
            cls = "" if result.binary else f" (class {t['class']})"
            sec.finding(f"The {_NAMES[t['rate']]}{cls} of {group_text(t['intersection'], t['group'])} is "
                        f"{num(t['estimate'])} against {num(t['rest'])} for the rest; {p_text(t['pvalue_adjusted'])}",
                        "high" if abs(t["estimate"] - t["rest"]) >= GAP_LARGE else "medium", target="tests",
                        value=t["estimate"], pvalue=t["pvalue_adjusted"], size=abs(t["estimate"] - t["rest"]))
    elif len(tests):
        sec.finding(f"No group's selection rate, TPR, FPR or precision differs significantly from the rest's "
                    f"({result.correction} correction within each attribute set)", "info", target="tests")
    for inter, od in result.od.items():
        sec.finding(f"Overall disparity of per-class recall by {inter}: OD = {num(od.estimate)}"
                    f"{ci_text(od.ci_low, od.ci_high)}", "medium" if od.estimate >= GAP_LARGE else "info",
                    target=f"od_{inter}", quantity=f"od.{inter}", value=od.estimate, ci_low=od.ci_low,
                    ci_high=od.ci_high, size=od.estimate)


def _broken(holds) -> bool:
    """A criterion that was evaluated and does not hold (None or NaN: undefined)."""
    return holds is not None and holds == holds and not bool(holds)

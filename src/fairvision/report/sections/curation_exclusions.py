"""Report sections for :class:`fairvision.audits.curation.exclusions.ExclusionsAudit` (docs/METHODS.md §13.12)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.audits.curation.exclusions import ExclusionsAudit
from fairvision.report import plots
from fairvision.report.document import Section
from fairvision.report.findings import ci_text, group_text, num, p_text, pct, test_severity
from fairvision.report.sections.dataset_compare import grouped_share_bars
from fairvision.report.sections.distribution import gate_findings, open_section

#: the subject columns of a shift table, shown in a table of their own
SUBJECT_COLUMNS = ["n_subjects_before", "n_subjects_after", "n_subjects_lost", "subject_share_before",
                   "subject_share_after", "subject_shift_pp"]
#: a significant shift of at least this many percentage points is a high finding, a smaller one medium
SHIFT_LARGE_PP = 5.0


def pp(v: float) -> str:
    """``"-21.0 pp"``: a change in percentage points, signed."""
    v = float(v)
    return "n/a" if not np.isfinite(v) else f"{v:+.1f} pp".replace("+0.0 pp", "0.0 pp").replace("-0.0 pp", "0.0 pp")


def exclusions_sections(audit: ExclusionsAudit) -> list[Section]:
    """The sections of an exclusions report: before vs after, the manual review (when given) and the share kept
    by group with its tests."""
    out = [exclusions_section(audit)]
    if audit.review is not None:
        out.append(review_section(audit))
    out.append(kept_section(audit))
    return out


def kept_section(audit: ExclusionsAudit) -> Section:
    """The share kept per group (the coverage audit of docs/METHODS.md §9.3 with "kept" as success), in words of
    keeping and removing: the tests of kept vs removed are in the exclusions section, with its findings."""
    cov = audit.coverage
    s = Section("exclusions-kept", "Share kept by group", intro=(
        f"Share of {cov.unit} kept after the exclusions, per group, with {audit.level:.0%} Wilson intervals (the "
        "tests of kept vs removed are in the table above). Exclusions that fall on one group more than on others "
        "change who is in the dataset."))
    s.metrics("kept_overall", {cov.unit: cov.n, "kept": audit.n_after, "share kept": cov.overall})
    by = cov.by_group.rename(columns={"n_ok": "n_kept", "rate": "share_kept"})
    s.table("kept_by_group", by, f"{cov.unit.capitalize()} kept per group (share_kept with Wilson intervals).")
    if len(cov.reasons):
        s.table("removed_reasons", cov.reasons, f"{cov.unit.capitalize()} removed per reason.")
    fig_df = by.rename(columns={"share_kept": "estimate"})
    fig_df.index = [group_text(a, g) for a, g in fig_df.index]
    s.figure("kept_forest", plots.forest(fig_df, title="Share kept by group", xlabel=f"share of {cov.unit} kept",
                                         reference=cov.overall),
             f"Share of {cov.unit} kept per group with {audit.level:.0%} Wilson intervals (dashed: overall).",
             data=by.reset_index()[["attribute", "group", "share_kept", "ci_low", "ci_high"]].to_dict(orient="list"))
    return s


def exclusions_section(audit: ExclusionsAudit, *, title: str = "What the exclusions do to the dataset") -> Section:
    """Counts and shares before and after, shifts in percentage points, NSD before and after, reasons."""
    unit = "subjects" if audit.subject_col else "images"
    s = Section("exclusions", title, intro=(
        "Every sample (before) against the samples kept (after): counts and shares of every group, the change in "
        f"share in percentage points with {audit.level:.0%} cluster-bootstrap intervals (resampling {unit}), NSD "
        "before and after (0 = balanced, 1 = one group only), and per attribute a test of whether the share "
        f"removed depends on the group ({audit.correction} correction over the attributes)."))
    key = {"images before": audit.n_before, "removed": audit.n_removed, "kept": audit.n_after,
           "share removed": audit.n_removed / audit.n_before}
    if audit.n_subjects_before is not None:
        key.update({"subjects before": audit.n_subjects_before, "subjects kept": audit.n_subjects_after,
                    "subjects lost": audit.n_subjects_lost})
    open_section(s, audit, key, add_findings, no_subject=None if audit.subject_col else (
        "Pass --subject-col so that intervals resample people and people who leave the dataset are counted."))
    if audit.subject_col:
        s.note(f"The tests of kept vs removed count images as independent; when {audit.subject_col}'s images are "
               "removed together (every image of a suspicious subject), their p-values are too small. Read the "
               "subject tables and the shift intervals (which resample subjects) beside them.")
    tests = audit.tests.join(pd.DataFrame({"largest_shift_pp": [
        (audit.largest_shift((a,)) or (None, None, np.nan))[2] for a in audit.tests.index]}, index=audit.tests.index))
    s.table("exclusion_tests", tests, "Kept vs removed by group, per attribute: Fisher's exact test for two groups, "
            f"chi-square otherwise; pvalue_adjusted: {audit.correction} over the attributes.")
    s.table("exclusion_nsd", audit.nsd, "NSD of every attribute set before and after the exclusions; nsd_change "
            f"with a {audit.level:.0%} cluster-bootstrap interval (positive: less balanced after).")
    singles = {names[0]: t for names, t in audit.shifts.items() if len(names) == 1}
    if singles:
        panels = {a: pd.DataFrame({"before": t["share_before"], "after": t["share_after"]}) for a, t in singles.items()}
        s.figure("shares_before_after", grouped_share_bars(panels, ylabel="share of images"),
                 "Share of images in each group before and after the exclusions.",
                 data={a: {"groups": [str(i) for i in p.index], "before": p["before"].tolist(),
                           "after": p["after"].tolist()} for a, p in panels.items()})
        flat = pd.concat([t.assign(attribute=a).reset_index().rename(columns={a: "group"}) for a, t in singles.items()],
                         ignore_index=True)
        fig_df = flat.set_index([[group_text(a, g) for a, g in zip(flat["attribute"], flat["group"])]])
        s.figure("shifts", plots.forest(fig_df, estimate="shift_pp", low="shift_ci_low", high="shift_ci_high",
                                        title="Change in share after the exclusions", xlabel="percentage points",
                                        reference=0.0, flag="too_small"),
                 f"Change in each group's share of images (after - before) with {audit.level:.0%} intervals; red: "
                 "groups too small to judge.",
                 data=flat[["attribute", "group", "shift_pp", "shift_ci_low", "shift_ci_high"]].to_dict(orient="list"))
    subject_cols = [c for c in SUBJECT_COLUMNS if c in next(iter(audit.shifts.values())).columns]
    for names, t in audit.shifts.items():
        label, key = " × ".join(names), "_x_".join(names)
        s.table(f"shifts_{key}", t.drop(columns=subject_cols), f"Images per group of {label} before and after "
                "(shift_pp: change in share, percentage points)", highlight="too_small", max_rows=100)
        if subject_cols:
            s.table(f"subjects_{key}", t[subject_cols + ["too_small"]], f"Subjects per group of {label} before and "
                    "after (n_subjects_lost: subjects of the group with no image left in it)", highlight="too_small",
                    max_rows=100)
    if audit.by_reason is not None:
        s.table("reason_tests", audit.reason_tests, "Per reason and attribute: does that reason remove some groups "
                f"more than others? ({audit.correction} correction over every reason and attribute)")
        s.table("by_reason", audit.by_reason, "Share of each group removed for each reason, with Wilson intervals; "
                "relative_rate: the group's rate over the reason's overall rate.", max_rows=100)
    return s


def add_findings(s: Section, audit: ExclusionsAudit) -> None:
    """Findings of an exclusions audit (docs/METHODS.md §9.1, §13.12): failed gates; whether the exclusions change
    the demographics (significant attributes, largest shift); each attribute whose share removed differs; people
    who left; reasons that fall on some groups more than others."""
    gate_findings(s, audit.gates)
    sig = audit.significant()
    big = audit.largest_shift()
    removed = f"{audit.n_removed:,} of {audit.n_before:,} images ({pct(audit.n_removed / audit.n_before)})"
    shift_txt = ""
    if big is not None:
        names, g, v = big
        t = audit.shifts[names]
        shift_txt = (f"the largest shift is {group_text(names, g)}, {pct(t.loc[g, 'share_before'], 1)} to "
                     f"{pct(t.loc[g, 'share_after'], 1)} of images ({pp(v)}"
                     f"{ci_text(t.loc[g, 'shift_ci_low'], t.loc[g, 'shift_ci_high'], lambda x: f'{x:+.1f}')})")
    if sig:
        p = float(audit.tests.loc[sig, "pvalue_adjusted"].min())
        size = abs(big[2]) if big else None
        s.finding(f"The exclusions change the demographics: they removed {removed}, and the share removed depends on "
                  f"{', '.join(sig)} ({p_text(p)}); {shift_txt}",
                  test_severity(p, audit.alpha, size, SHIFT_LARGE_PP) if size is not None else "high",
                  target="exclusion_tests", quantity="max_share_shift_pp", value=size,
                  pvalue=p, size=size / 100 if size is not None else None)
    else:
        s.finding(f"The exclusions removed {removed} without changing the demographics significantly "
                  f"({audit.correction} correction over {len(audit.tests)} attributes)" + (f"; {shift_txt}" if shift_txt else ""),
                  "info", target="exclusion_tests", quantity="max_share_shift_pp", value=abs(big[2]) if big else None)
    for a in sig:
        t = audit.shifts[(a,)]
        ok = t[(t["n_before"] > 0).to_numpy()]
        if (~ok["too_small"].astype(bool)).sum() >= 2:  # name groups large enough to judge
            ok = ok[~ok["too_small"].astype(bool).to_numpy()]
        hi_g, lo_g = ok["removed_rate"].idxmax(), ok["removed_rate"].idxmin()
        hit = audit.largest_shift((a,))
        p = float(audit.tests.loc[a, "pvalue_adjusted"])
        text = (f"The exclusions remove {group_text(a, hi_g)} more often ({pct(t.loc[hi_g, 'removed_rate'])} of "
                f"{int(t.loc[hi_g, 'n_before']):,}) than {group_text(a, lo_g)} ({pct(t.loc[lo_g, 'removed_rate'])} of "
                f"{int(t.loc[lo_g, 'n_before']):,}); {p_text(p)}")
        row = audit.nsd.loc[a]
        text += f"; NSD of {a} {num(row['nsd_before'])} before, {num(row['nsd_after'])} after"
        if hit is not None:
            text += f"; {group_text(a, hit[1])} {pp(hit[2])}"
        size = abs(hit[2]) if hit else None
        lo, hi = (t.loc[hit[1], "shift_ci_low"], t.loc[hit[1], "shift_ci_high"]) if hit else (None, None)
        if hit and hit[2] < 0:  # the value is the shift's size: its interval turns with it
            lo, hi = -hi, -lo
        s.finding(text, test_severity(p, audit.alpha, size, SHIFT_LARGE_PP) if size is not None else "medium",
                  target=f"shifts_{a}", quantity=f"max_share_shift_pp.{a}", value=size, pvalue=p, ci_low=lo,
                  ci_high=hi, size=size / 100 if size is not None else None)
    if audit.n_subjects_lost:
        share = audit.n_subjects_lost / audit.n_subjects_before
        s.finding(f"{audit.n_subjects_lost:,} of {audit.n_subjects_before:,} subjects ({pct(share)}) had all their "
                  "images removed and leave the dataset", "medium" if share >= 0.1 else "info", target="overview",
                  quantity="n_subjects_lost", value=audit.n_subjects_lost, size=share)
    if audit.reason_tests is not None:
        for (reason, a), row in audit.reason_tests[audit.reason_tests["differs"].astype(bool)].iterrows():
            br = audit.by_reason.reset_index()
            b = br[(br["reason"] == reason) & (br["attribute"] == a) & (br["n"] > 0)].set_index("group")
            judged = ~audit.shifts[(a,)]["too_small"].reindex(b.index, fill_value=True).to_numpy(bool)
            b = b[judged] if judged.any() else b  # name a group large enough to judge
            g = b["relative_rate"].idxmax()
            s.finding(f"Reason {reason!r} removes {group_text(a, g)} most often ({pct(b.loc[g, 'removed_rate'])}, "
                      f"{num(b.loc[g, 'relative_rate'])} times its overall rate); {p_text(row['pvalue_adjusted'])}",
                      "medium", target="reason_tests", quantity=f"removed_rate.{reason}.{a}",
                      value=b.loc[g, "removed_rate"], ci_low=b.loc[g, "ci_low"], ci_high=b.loc[g, "ci_high"],
                      pvalue=row["pvalue_adjusted"])


def review_section(audit: ExclusionsAudit) -> Section:
    """The sampled manual review: suspicious rate with a Wilson interval, the expected number in the collection,
    and the rate by group."""
    r = audit.review
    s = Section("exclusions-review", "Manual review of a sample", intro=(
        f"A sample was reviewed by hand. The suspicious rate carries a {audit.level:.0%} Wilson interval; the "
        "expected number of suspicious items in the collection is the rate (and its interval) times the "
        "collection's size. A subject is suspicious when any of their reviewed images is."))
    last = r.index[-1]
    row = r.loc[last]
    s.metrics("review_overview", {f"{last} reviewed": int(row["n_reviewed"]), "suspicious": int(row["n_suspicious"]),
                                  "rate": row["rate"], f"{last} in collection": int(row["collection"]),
                                  "expected suspicious": round(float(row["expected"]), 1)})
    s.finding(f"Manual review: {int(row['n_suspicious']):,} of {int(row['n_reviewed']):,} reviewed {last} are "
              f"suspicious ({pct(row['rate'], 1)}{ci_text(row['ci_low'], row['ci_high'], lambda x: pct(x, 1))}); about "
              f"{row['expected']:,.0f}{ci_text(row['expected_ci_low'], row['expected_ci_high'], lambda x: f'{x:,.0f}')} "
              f"of the {int(row['collection']):,} {last} in the collection would be",
              "medium" if row["n_suspicious"] > 0 else "info", target="review_overview", quantity="suspicious_rate",
              value=row["rate"], ci_low=row["ci_low"], ci_high=row["ci_high"], size=row["rate"])
    s.table("review", r, "Suspicious rate with Wilson intervals and the expected number in the collection.")
    s.table("review_by_group", audit.review_by_group, "Suspicious rate of the reviewed images by group (Wilson "
            "intervals).")
    s.table("review_tests", audit.review_tests, "Does the suspicious rate depend on the group? "
            f"({audit.correction} correction over the attributes)")
    for a, t in audit.review_tests[audit.review_tests["differs"].astype(bool)].iterrows():
        g = audit.review_by_group.loc[a]
        worst = g["rate"].idxmax()
        s.finding(f"The review finds {group_text(a, worst)} suspicious most often ({pct(g.loc[worst, 'rate'])} of "
                  f"{int(g.loc[worst, 'n_reviewed']):,}); {p_text(t['pvalue_adjusted'])}", "medium",
                  target="review_by_group", quantity=f"suspicious_rate.{a}", value=g.loc[worst, "rate"],
                  pvalue=t["pvalue_adjusted"])
    return s

"""Report section for :class:`fairvision.audits.coverage.Coverage`."""

from __future__ import annotations

import numpy as np

from fairvision.audits.coverage import Coverage
from fairvision.report import plots
from fairvision.report.document import Section
from fairvision.report.findings import GAP_LARGE, group_text, p_text, pct


def coverage_section(cov: Coverage, *, id: str = "coverage", title: str | None = None) -> Section:
    """Success rate of a measurement step by group, with the tests of equal rates."""
    s = Section(id, title or f"Coverage of the {cov.step} by group",
                intro=f"Share of {cov.unit} for which the {cov.step} succeeded, per group, with 95% Wilson intervals. "
                      "A step that fails more often for one group is itself a bias.")
    s.metrics("coverage_overall", {cov.unit: cov.n, "succeeded": round(cov.overall * cov.n), "rate": cov.overall})
    add_findings(s, cov)
    for f in cov.findings:
        s.note(f, "finding")
    if not cov.findings:
        s.note(f"No group's {cov.step} rate differs significantly from the others ({cov.correction} correction over "
               "attributes).")
    s.table("coverage_by_group", cov.by_group, f"{cov.step} success by group")
    s.table("coverage_tests", cov.tests, "Tests of equal success rates across the groups of each attribute")
    if len(cov.reasons):
        s.table("coverage_reasons", cov.reasons, f"Why the {cov.step} left rows out (rows per reason)")
    fig_df = cov.by_group.rename(columns={"rate": "estimate"})
    fig_df.index = [group_text(a, g) for a, g in fig_df.index]
    s.figure("coverage_forest", plots.forest(fig_df, title=f"{cov.step} success rate", xlabel="rate", reference=cov.overall),
             f"{cov.step} success rate by group (dashed: overall).",
             data=cov.by_group.reset_index()[["attribute", "group", "rate", "ci_low", "ci_high"]].to_dict(orient="list"))
    return s


def add_findings(s: Section, cov: Coverage) -> None:
    """Findings of a coverage audit (docs/METHODS.md §9.1): each attribute whose success rates differ
    significantly (worst and best group), else the overall rate."""
    differs = cov.tests[cov.tests["differs"].astype(bool)] if len(cov.tests) else cov.tests
    for attr, t in differs.iterrows():
        g = cov.by_group.loc[attr]
        g = g[g["n"] > 0]
        worst, best = g["rate"].idxmin(), g["rate"].idxmax()
        gap = float(g.loc[best, "rate"] - g.loc[worst, "rate"])
        s.finding(f"The {cov.step} succeeds less often for {group_text(attr, worst)} ({pct(g.loc[worst, 'rate'])}, "
                  f"{int(g.loc[worst, 'n_ok']):,} of {int(g.loc[worst, 'n']):,}) than for {group_text(attr, best)} "
                  f"({pct(g.loc[best, 'rate'])}); {p_text(t['pvalue_adjusted'])}",
                  "high" if gap >= GAP_LARGE else "medium", target="coverage_by_group", quantity=f"rate.{attr}={worst}",
                  value=g.loc[worst, "rate"], ci_low=g.loc[worst, "ci_low"], ci_high=g.loc[worst, "ci_high"],
                  pvalue=t["pvalue_adjusted"], size=gap)
    failed = cov.n_left_out
    why = f" ({cov.reasons_text()})" if failed and len(cov.reasons) else ""
    if not len(differs) and np.isfinite(cov.overall):
        s.finding(f"The {cov.step} succeeded for {pct(cov.overall)} of {cov.n:,} {cov.unit}{why}; no group's rate differs "
                  f"significantly ({cov.correction} correction)", "medium" if 1 - cov.overall >= GAP_LARGE else "info",
                  target="coverage_overall", quantity="rate", value=cov.overall, size=failed / cov.n if cov.n else None)
    elif failed and why:
        s.finding(f"The {cov.step} left out {failed:,} of {cov.n:,} {cov.unit}{why}", "info", target="coverage_reasons",
                  quantity="left_out", value=failed, size=failed / cov.n)

"""Report section for :class:`fairvision.audits.coverage.Coverage`."""

from __future__ import annotations

from fairvision.audits.coverage import Coverage
from fairvision.report import plots
from fairvision.report.document import Section


def coverage_section(cov: Coverage, *, id: str = "coverage", title: str | None = None) -> Section:
    """Success rate of a measurement step by group, with the tests of equal rates."""
    s = Section(id, title or f"Coverage of the {cov.step} by group",
                intro=f"Share of images for which the {cov.step} succeeded, per group, with 95% Wilson intervals. "
                      "A step that fails more often for one group is itself a bias.")
    s.metrics("coverage_overall", {"images": cov.n, "succeeded": round(cov.overall * cov.n), "rate": cov.overall})
    for f in cov.findings:
        s.note(f, "finding")
    if not cov.findings:
        s.note(f"No group's {cov.step} rate differs significantly from the others ({cov.correction} correction over "
               "attributes).")
    s.table("coverage_by_group", cov.by_group, f"{cov.step} success by group")
    s.table("coverage_tests", cov.tests, "Tests of equal success rates across the groups of each attribute")
    fig_df = cov.by_group.rename(columns={"rate": "estimate"})
    s.figure("coverage_forest", plots.forest(fig_df, title=f"{cov.step} success rate", xlabel="rate", reference=cov.overall),
             f"{cov.step} success rate by group (dashed: overall).",
             data=cov.by_group.reset_index()[["attribute", "group", "rate", "ci_low", "ci_high"]].to_dict(orient="list"))
    return s

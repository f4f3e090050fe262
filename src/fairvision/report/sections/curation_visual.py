"""Report section of the visual-statistics audit: statistics by group, omnibus tests, heat maps
(docs/METHODS.md §13.3)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe
from fairvision.groups import group_label
from fairvision.report import Section
from fairvision.report.findings import group_text, num, p_text

_MAX_PANELS = 12


def heatmap_grid(panels: dict[str, np.ndarray], *, title: str = ""):
    """Small multiples of 2-D histograms (shares), one panel per group, on a shared colour scale."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n = len(panels)
    cols = min(4, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.5 * rows + 0.4), squeeze=False)
    vmax = max((float(a.max()) for a in panels.values()), default=1.0) or 1.0
    im = None
    for ax, (name, arr) in zip(axes.ravel(), panels.items()):
        im = ax.imshow(arr, cmap="magma", vmin=0, vmax=vmax, extent=(0, 1, 1, 0))
        ax.set_title(name, fontsize=9)
        ax.set_xticks([0, 0.5, 1])
        ax.set_yticks([0, 0.5, 1])
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="share of points")
    fig.suptitle(title, fontsize=11)
    return fig


def visual_section(result, *, conditions: list[dict] | None = None) -> Section:
    """Build the report section of :func:`fairvision.audits.curation.visual.audit_visual`."""
    from fairvision.audits.curation.visual import DESCRIPTIONS

    sec = Section("visual", "Visual statistics by group", intro=(
        "How people appear in the images, per annotation (FHIBE Fig. 5; docs/METHODS.md §13.3): box area and "
        "aspect ratio, distance of the box centre from the image centre, mask area and concavity, keypoint "
        "spread and visibility. Per group: median and IQR, the mean with a subject-bootstrap CI, a Kruskal-Wallis "
        f"test across groups and pairwise Mann-Whitney tests on subject means ({result.correction} correction: the "
        "omnibus tests of every statistic and attribute set are one family, their pairwise tests another, so a "
        "pair is significant only if it survives the audit-wide correction). "
        f"Annotations: {result.source}."))
    sec.metrics("overview", {"images": result.n_images, "annotations": result.n_instances,
                             "statistics": len(result.statistics), "attributes": len(result.attributes),
                             "significant omnibus tests": int(result.omnibus["significant"].sum()) if len(result.omnibus) else 0})
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="overview", quantity=c.get("name"), value=c.get("value"))
    if conditions:
        sec.note("; ".join(describe(c) for c in conditions), "finding" if any(c["holds"] for c in conditions) else "info")
    if result.n_unmatched_images:
        sec.note(f"{result.n_unmatched_images} annotated images have no row in the sample table and are left out.", "warning")
    if len(result.failures):
        sec.note(f"{len(result.failures)} images could not be measured (see the failures table).", "warning")
        sec.table("failures", result.failures, "Images the built-in models could not measure", max_rows=20)
    if result.left_out:
        sec.note("Left out of the tables and tests: " + "; ".join(f"{m} ({why})" for m, why in result.left_out.items())
                 + ". A statistic fixed by the annotation tool, or with one value for every annotation, tells "
                 "nothing about the groups.", "info")
    sec.table("overall", result.overall.assign(meaning=[DESCRIPTIONS.get(s.split(".", 1)[-1], "") for s in result.overall.index]),
              "Every statistic over all annotations: median, quartiles and mean")
    if len(result.omnibus):
        om = result.omnibus
        sec.table("omnibus", om, "Kruskal-Wallis test per statistic and attribute set (subject means)", highlight="significant")
        for _, r in om[om["significant"]].sort_values("pvalue_adjusted").iterrows():
            table = result.groups[(r["metric"], r["intersection"])]
            t = table[~table["too_small"] & (table["n_annotations"] > 0)]
            if not len(t):
                continue
            lo, hi = t["median"].idxmin(), t["median"].idxmax()
            sec.finding(f"{r['metric']} differs by {r['intersection']}: median {num(t.loc[lo, 'median'], 3)} in "
                        f"{group_text(r['intersection'], group_label(lo))} vs {num(t.loc[hi, 'median'], 3)} in "
                        f"{group_text(r['intersection'], group_label(hi))} ({p_text(r['pvalue_adjusted'])}, Kruskal-Wallis)",
                        "medium", target="omnibus", quantity=f"{r['metric']}.{r['intersection']}.omnibus_pvalue",
                        value=float(r["pvalue_adjusted"]), pvalue=float(r["pvalue_adjusted"]))
        if not om["significant"].any():
            sec.finding(f"No statistic differs significantly between groups ({len(om)} Kruskal-Wallis tests, "
                        f"{result.correction} correction)", "info", target="omnibus", quantity="omnibus_significant", value=0)
    for (m, inter), table in result.groups.items():
        sec.table(f"groups_{m}_{inter}", table, f"{m} by {inter}: {DESCRIPTIONS.get(m.split('.', 1)[-1], '')}",
                  max_rows=60, highlight="too_small")
        pw = result.pairwise.get((m, inter))
        if pw is not None and len(pw) and pw["significant"].any():
            cols = ["group_a", "group_b", "median_a", "median_b", "pvalue", "pvalue_adjusted", "significant", "rank_biserial"]
            sec.table(f"pairs_{m}_{inter}", pw[cols].astype({"group_a": str, "group_b": str}),
                      f"Pairwise Mann-Whitney tests, {m} by {inter}", max_rows=30, highlight="significant")
    h = result.heatmaps
    for what in (h["what"].unique() if len(h) else []):
        panels = {"all": result.heatmap(what)}
        for attr in result.attributes:
            for g in h[(h["what"] == what) & (h["attribute"] == attr)]["group"].unique():
                if len(panels) < _MAX_PANELS:
                    panels[f"{attr} = {g}"] = result.heatmap(what, attr, g)
        fig = heatmap_grid(panels, title=f"{what} (x, y as fractions of the image size)")
        sec.figure(f"heatmap_{what}", fig, f"Where the {what} lie in the image, overall and per group "
                   f"({result.bins} x {result.bins} cells; share of each panel's points)")
    sec.table("heatmaps", h, "Heat-map cells: what, attribute, group, row, col, count, share", max_rows=0)
    return sec

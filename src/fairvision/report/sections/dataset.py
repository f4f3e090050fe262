"""Report section for :class:`fairvision.audits.dataset.DatasetAudit`."""

from __future__ import annotations

from fairvision.audits.dataset import DatasetAudit
from fairvision.audits.gates import describe
from fairvision.report.document import Section
from fairvision.report import plots

MAX_HEATMAPS = 6


def dataset_section(audit: DatasetAudit, *, title: str = "Who is in the dataset") -> Section:
    """Composition, representation, intersections and associations of a dataset."""
    s = Section(
        "dataset",
        title,
        intro=(
            "Counts of every group and intersection defined by the annotated attributes, with "
            "representation metrics (NSD: 0 = balanced, 1 = one group only) and associations between "
            "attributes. Groups come from the labels in the table; nothing is inferred from the images."
        ),
    )
    key = {"images": audit.n_samples}
    if audit.n_subjects is not None:
        key["subjects"] = audit.n_subjects
    key["attributes"] = len(audit.attributes)
    top = max(audit.groups, key=len)
    key[f"groups in {' × '.join(top)}"] = int(len(audit.groups[top]))
    key["non-empty"] = int((audit.groups[top]["n_samples"] > 0).sum())
    s.metrics("overview", key)
    for g in audit.gates:
        s.note(f"--fail-if {describe(g)}", "finding" if g["holds"] else "info")
    for w in audit.warnings:
        s.note(w, "warning")
    if audit.n_subjects is None:
        s.note("No subject column: each image is treated as a different person. If people appear in several "
               "images, pass --subject-col so that confidence intervals resample people, not images.")

    rep = audit.representation.copy()
    cols = ["k", "n_groups", "n_empty_groups", "nsd", "nsd_ci_low", "nsd_ci_high", "evenness", "effective_groups", "imbalance_ratio"]
    cols += [c for c in rep.columns if c.endswith("_ci_low") or c.endswith("_ci_high") if c not in cols]
    s.table("representation", rep[[c for c in cols if c in rep.columns]],
            f"Representation per attribute set. CIs: {audit.level:.0%} cluster bootstrap "
            f"({audit.n_boot} resamples of {'subjects' if audit.subject_col else 'images'}), bias-corrected.")
    s.table("intersections_summary", audit.summary,
            f"Intersections in the layout of the FHIBE paper's Table 1 (images per non-empty group); "
            f"'n_small': groups with fewer than {audit.min_subjects} {'subjects' if audit.subject_col else 'images'}.")

    for names, t in audit.groups.items():
        if len(names) != 1:
            continue
        name = names[0]
        s.table(f"groups_{name}", t, f"Groups of {name}", highlight="too_small")
        s.figure(
            f"group_sizes_{name}",
            plots.bar(t["n_samples"], title=f"Images per {name} group", ylabel="images", highlight=list(t["too_small"])),
            f"Group sizes for {name}; red bars are groups too small to judge.",
            data={"groups": [str(i) for i in t.index], "n_samples": t["n_samples"].tolist()},
        )

    pairs = [n for n in audit.groups if len(n) == 2][:MAX_HEATMAPS]
    for names in pairs:
        t = audit.groups[names]["n_samples"].unstack(names[1])
        s.figure(
            f"intersection_heatmap_{'_x_'.join(names)}",
            plots.heatmap(t, title=f"Images per {names[0]} × {names[1]}", fmt="{:.0f}", cmap="Blues", cbar_label="images", vmin=0),
            f"Images in each {names[0]} × {names[1]} group (blank = empty).",
            data={"rows": [str(i) for i in t.index], "columns": [str(c) for c in t.columns], "values": t.to_numpy().tolist()},
        )
    for names, t in audit.groups.items():
        if len(names) >= 2:
            s.table(f"groups_{'_x_'.join(names)}", t, f"Intersectional groups of {' × '.join(names)}", highlight="too_small", max_rows=100)

    if len(audit.association):
        s.table("association", audit.association,
                "Association between attributes (and with the target): NMI = I(X;Y)/H(X,Y) in [0, 1]; "
                f"chi-square test of independence (no continuity correction) with Cramér's V; {audit.correction} correction "
                "over the pairs (pvalue_adjusted).")
    if audit.diversity is not None:
        s.table("diversity", audit.diversity,
                "Visual diversity: Vendi score (effective number of distinct images; cosine kernel on the given "
                "embeddings, FHIBE). It grows with group size, so compare vendi_per_image across groups of similar size.",
                highlight="too_small")
    for (x, y), m in list(audit.npmi.items())[:MAX_HEATMAPS]:
        s.figure(
            f"npmi_{x}_x_{y}",
            plots.heatmap(m, title=f"NPMI of {x} and {y}", fmt="{:+.2f}", center=0.0, vmin=-1, vmax=1, cbar_label="NPMI"),
            f"Normalised PMI of each {x} value with each {y} value: 0 = independent, >0 = over-represented together, −1 = never together.",
            data={"rows": [str(i) for i in m.index], "columns": [str(c) for c in m.columns], "values": m.to_numpy().tolist()},
        )
        s.table(f"npmi_{x}_x_{y}", m, f"NPMI of {x} (rows) and {y} (columns)", save=True)
    return s

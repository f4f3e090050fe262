"""Report section for :class:`fairvision.audits.dataset.DatasetAudit`."""

from __future__ import annotations

import numpy as np

from fairvision.audits.dataset import DatasetAudit
from fairvision.report.document import Section
from fairvision.report import plots
from fairvision.report.sections.distribution import gate_findings, open_section
from fairvision.report.findings import ci_text, count_of, group_text, imbalance_severity, num, p_text, pct, verb

MAX_HEATMAPS = 6
#: significance level of the association findings (the dataset audit corrects but has no alpha of its own)
ALPHA = 0.05
#: Cramér's V from which a significant association is a high finding (a moderate association)
STRONG_V = 0.3


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
    open_section(s, audit, key, add_findings, no_subject=None if audit.n_subjects is not None else (
        "If people appear in several images, pass --subject-col so that confidence intervals resample people, "
        "not images."))

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
            plots.bar(t["n_samples"], title=f"Images per {name} group", ylabel="images", highlight=list(t["too_small"]),
                      labelled=True),
            f"Group sizes for {name}; red bars are groups too small to judge.",
            data={"groups": [str(i) for i in t.index], "n_samples": t["n_samples"].tolist()},
        )

    pairs = [n for n in audit.groups if len(n) == 2][:MAX_HEATMAPS]
    for names in pairs:
        t = plots.unstack_ordered(audit.groups[names]["n_samples"], names[1])
        s.figure(
            f"intersection_heatmap_{'_x_'.join(names)}",
            plots.heatmap(t, title=f"Images per {names[0]} × {names[1]}", fmt="{:.0f}", cmap="Blues", cbar_label="images",
                          vmin=0, labelled=True),
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
            plots.heatmap(m, title=f"NPMI of {x} and {y}", fmt="{:+.2f}", center=0.0, vmin=-1, vmax=1, cbar_label="NPMI",
                          labelled=True),
            f"Normalised PMI of each {x} value with each {y} value: 0 = independent, >0 = over-represented together, −1 = never together.",
            data={"rows": [str(i) for i in m.index], "columns": [str(c) for c in m.columns], "values": m.to_numpy().tolist()},
        )
        s.table(f"npmi_{x}_x_{y}", m, f"NPMI of {x} (rows) and {y} (columns)", save=True)
    return s


def add_findings(s: Section, audit: DatasetAudit) -> None:
    """Findings of a dataset audit (docs/METHODS.md §9.1): failed gates, the balance of every single attribute
    (NSD with its CI, largest and smallest group), empty and too-small groups of every attribute set, and
    significant associations between attributes."""
    gate_findings(s, audit.gates)

    unit = "subjects" if audit.subject_col else "images"
    for label, row in audit.representation[audit.representation["k"] == 1].iterrows():
        names = tuple(label.split(" × "))
        t = audit.groups.get(names)
        if t is None or not len(t):
            continue
        name = names[0]
        nsd = float(row["nsd"])
        ci = ci_text(row.get("nsd_ci_low"), row.get("nsd_ci_high"))
        n = t["n_samples"]
        big, small = n.idxmax(), n.idxmin()
        if n.max() == n.min():
            text = f"{name}: all {len(t)} groups have {int(n.max()):,} images ({pct(t['share'].iloc[0])} each); NSD {num(nsd)}{ci}"
        elif len(t) == 2:
            text = (f"{name}: {pct(t.loc[big, 'share'])} of images are {group_text(name, big)} ({int(n[big]):,}), "
                    f"{pct(t.loc[small, 'share'])} {group_text(name, small)} ({int(n[small]):,}); NSD {num(nsd)}{ci}")
        else:
            text = (f"{name}: largest group {group_text(name, big)} has {pct(t.loc[big, 'share'])} of images "
                    f"({int(n[big]):,}), smallest {group_text(name, small)} {pct(t.loc[small, 'share'])} ({int(n[small]):,}) "
                    f"of {len(t)} groups; NSD {num(nsd)}{ci}")
        s.finding(text, imbalance_severity(nsd), target=f"groups_{name}", quantity=f"nsd.{name}", value=nsd,
                  ci_low=row.get("nsd_ci_low"), ci_high=row.get("nsd_ci_high"), size=nsd, topic=f"balance:{name}")

    any_small = False
    for names, t in audit.groups.items():
        label, key = " × ".join(names), "+".join(names)
        size = t["n_subjects"] if "n_subjects" in t.columns else t["n_samples"]
        empty = t.index[(t["n_samples"] == 0).to_numpy()]
        small = t.index[(t["too_small"] & (t["n_samples"] > 0)).to_numpy()]
        for kind, idx in (("empty", empty), ("small", small)):
            if not len(idx):
                continue
            any_small = True
            share = len(idx) / len(t)
            sev = "high" if len(names) == 1 or share >= 0.25 else "medium"
            if kind == "empty":
                text = f"{label}: {len(idx)} of {len(t)} groups {verb(len(idx))} no images"
                quantity = f"n_empty_groups.{key}"
            else:
                text = f"{label}: {len(idx)} of {len(t)} groups {verb(len(idx))} fewer than {audit.min_subjects} {unit}"
                quantity = f"n_small_groups.{key}"
            order = size.loc[idx].sort_values(kind="stable").index if kind == "small" else idx
            shown = [group_text(names, g) + ("" if kind == "empty" else f" ({int(size[g])})") for g in order[:3]]
            text += ": " + ", ".join(shown) + (", ..." if len(idx) > 3 else "")
            s.finding(text, sev, target="intersections_summary", quantity=quantity, value=len(idx), size=share)
    if not any_small and audit.groups:
        names, t = min(audit.groups.items(), key=lambda kv: (kv[1]["n_subjects"] if "n_subjects" in kv[1].columns
                                                             else kv[1]["n_samples"]).min())
        size = t["n_subjects"] if "n_subjects" in t.columns else t["n_samples"]
        g = size.idxmin()
        s.finding(f"Every group of the {len(audit.groups)} attribute sets has at least {audit.min_subjects} {unit}; the "
                  f"smallest is {group_text(names, g)} with {int(size[g]):,}", "info", target="intersections_summary",
                  quantity="n_small_groups", value=0)

    assoc = audit.association
    if len(assoc):
        sig = assoc[assoc["pvalue_adjusted"].to_numpy(dtype=float) < ALPHA]
        for (x, y), row in sig.sort_values("cramers_v", ascending=False).iterrows():
            v = float(row["cramers_v"])
            what = f"{x} and the target {y}" if row["role"] == "target" else f"{x} and {y}"
            s.finding(f"{what} are associated: Cramér's V {num(v)}, NMI {num(row['nmi'], 3)} "
                      f"(chi-square, {p_text(row['pvalue_adjusted'])})",
                      "high" if v >= STRONG_V else "medium", target="association", quantity=f"cramers_v.{x}+{y}",
                      value=v, pvalue=row["pvalue_adjusted"], size=v)
        if not len(sig):
            finite = assoc["cramers_v"].dropna()
            if len(finite):
                (x, y) = finite.idxmax()
                s.finding(f"No pair of attributes is associated after {audit.correction} correction ({count_of(len(assoc), 'pair')}; "
                          f"largest Cramér's V {num(finite.max())}, {x} and {y})", "info", target="association",
                          quantity="cramers_v", value=finite.max())
    if audit.diversity is not None:
        d = audit.diversity.drop(index="(all)", level="attribute", errors="ignore")
        d = d[~d["too_small"].astype(bool) & np.isfinite(d["vendi_per_image"].to_numpy(dtype=float))]
        if len(d) >= 2:
            lo, hi = d["vendi_per_image"].idxmin(), d["vendi_per_image"].idxmax()
            gap = float(1 - d.loc[lo, "vendi_per_image"] / d.loc[hi, "vendi_per_image"]) if d.loc[hi, "vendi_per_image"] else None
            s.finding(f"Visual diversity: lowest Vendi score per image {group_text(lo[0], lo[1])} "
                      f"({num(d.loc[lo, 'vendi_per_image'], 3)}), highest {group_text(hi[0], hi[1])} "
                      f"({num(d.loc[hi, 'vendi_per_image'], 3)})", "info", target="diversity",
                      quantity="vendi_per_image", value=d.loc[lo, "vendi_per_image"],
                      size=gap)

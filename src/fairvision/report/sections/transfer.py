"""Report sections of a bias-transfer study (docs/METHODS.md §11.1, §11.2 and §11.3).

:func:`design_section` shows the training subsets and their dataset bias in
the layout of the bias-transfer paper's Table 1; :func:`study_section` the
models' accuracy and OD beside it (Table 2), the paired comparisons between
subsets and a plot of model bias against training-set size per family.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import ci_text, imbalance_severity, num, p_text

_FAMILY_ORDER = {"stratified": 0, "balanced": 1, "single": 2}


def _subset_label(row) -> str:
    if row["family"] == "stratified":
        f = row.get("fraction")
        return f"{100 * f:.3g}% of the pool" if f is not None and np.isfinite(f) and not str(row["subset"]).startswith(
            "stratified_n") else f"{int(row['size']):,} rows (matched size)"
    if row["family"] == "balanced":
        return f"balanced by {row['attribute']}"
    return f"only {row['attribute']} = {row['group']}"


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    key = df["family"].map(_FAMILY_ORDER).fillna(9) * 1e9 + df["size"].astype(float)
    return df.assign(_k=key.to_numpy()).sort_values("_k", kind="stable").drop(columns="_k")


def table1(design) -> pd.DataFrame:
    """The dataset-bias table (the paper's Table 1): one row per subset, NSD and NMI per attribute."""
    s = _ordered(design.summary)
    out = pd.DataFrame({"family": s["family"].to_numpy(), "subset": s["subset"].to_numpy(),
                        "design": [_subset_label(r) for r in s.to_dict("records")], "size": s["size"].to_numpy()})
    for metric in ("nsd", "nmi"):
        for a in design.attributes:
            g = len(design.schema[a].categories)
            out[f"{metric.upper()} {a} ({g})"] = s[f"{metric}.{a}"].to_numpy(dtype=float)
    return out


def design_section(design, *, title: str = "Training subsets and their dataset bias") -> Section:
    """The subsets of a study and their NSD / NMI / NPMI (docs/METHODS.md §11.1)."""
    fams = design.catalog["family"].value_counts()
    sec = Section(
        "transfer-design", title,
        intro=(f"{len(design.subsets)} training subsets drawn from a pool of {design.n_pool:,} rows after holding out "
               f"{len(design.test):,} test rows (whole subjects, {100 * design.test_fraction:.3g}% of them) for the common "
               f"test set; label {design.label!r}, attributes {', '.join(design.attributes)}, seed {design.seed}. "
               "Representational bias is NSD over the declared groups, stereotypical bias NMI between the label and the "
               "attribute (docs/METHODS.md §11.1); NSD and NMI are on different scales and not comparable with each other."),
    )
    sec.metrics("design", {"subsets": len(design.subsets), "pool rows": design.n_pool, "test rows": len(design.test),
                           **{f"{f} subsets": int(n) for f, n in fams.items()}})
    t1 = table1(design)
    sec.table("table1", t1, "Dataset bias of every training subset (layout of the bias-transfer paper's Table 1); "
                            "the number in parentheses is the number of groups")
    excluded = []
    for a in design.attributes:
        col = design.summary[f"excluded.{a}"].fillna("")
        names = design.summary.loc[col != "", "subset"].tolist()
        if names:
            excluded.append((a, names))
            sec.note(f"Excluded from the {a} metrics: {', '.join(names)}: they hold one {a} group only, so NSD and NMI "
                     f"by {a} say nothing about balance (as the paper does for its single-gender subsets).")
    for note in design.notes:
        sec.note(note, "warning")
    for a in design.attributes:
        bal = design.summary[(design.summary["family"] == "balanced") & (design.summary["attribute"] == a)]
        if len(bal):
            r = bal.iloc[0]
            sec.finding(f"Subset {r['subset']} is balanced by {a}: NSD {num(r[f'nsd.{a}'])}, NMI {num(r[f'nmi.{a}'], 3)} "
                        f"({int(r['size']):,} rows)", "info", target="table1", quantity=f"nsd.{r['subset']}.{a}",
                        value=r[f"nsd.{a}"], topic=f"transfer-balanced:{a}")
        full = design.summary[design.summary["family"] == "stratified"]
        if len(full):
            r = full.sort_values("size").iloc[-1]
            v = r[f"nsd.{a}"]
            sec.finding(f"Largest stratified subset {r['subset']} ({int(r['size']):,} rows, the pool's own bias): NSD by {a} "
                        f"{num(v)}, NMI {num(r[f'nmi.{a}'], 3)}", imbalance_severity(v), target="table1",
                        quantity=f"nsd.{r['subset']}.{a}", value=v, size=v, topic=f"transfer-pool:{a}")
    for a, names in excluded:
        sec.finding(f"{len(names)} single-group subsets are excluded from the {a} dataset metrics ({', '.join(names)})",
                    "info", target="table1", topic=f"transfer-excluded:{a}")
    comp = design.composition.pivot_table(index=["subset", "attribute", "class"], columns="group", values="n",
                                          aggfunc="sum", sort=False)
    sec.table("composition", comp.reset_index(), "Rows per class and group in every subset", max_rows=120)
    if len(design.npmi):
        sec.table("npmi", design.npmi, "NPMI between each class and group (−1 never together, 0 independent, 1 always)",
                  max_rows=120)
    return sec


def table2(result) -> pd.DataFrame:
    """The model-bias table (the paper's Table 2) with the dataset metrics beside it."""
    df = result.to_frame()
    if not len(df):
        return df
    cat = result.design.catalog.set_index("subset")
    df["fraction"] = [cat.loc[s, "fraction"] for s in df["subset"]]
    df = _ordered(df)
    df.insert(2, "design", [_subset_label(r) for r in df.to_dict("records")])
    return df.drop(columns=["fraction", "attribute", "group"])


def study_section(result, *, conditions: list[dict] | None = None, demo: bool = False,
                  title: str = "Bias transfer: dataset bias beside model bias") -> Section:
    """The study table, the paired comparisons and the bias-against-size plot (docs/METHODS.md §11.2, §11.3)."""
    lvl = int(round(100 * result.level))
    sec = Section(
        "transfer-study", title,
        intro=(f"One model per training subset, all scored on the same test set ({result.n_test:,} samples, "
               f"{result.n_test_subjects:,} subjects). Accuracy, OD (overall disparity of per-class recall between groups, "
               f"0 = none) and ID per class carry {lvl}% percentile CIs from one cluster bootstrap over the test subjects "
               f"({result.n_boot:,} resamples); every pair of subsets is compared on OD with the same resamples (paired), "
               f"p-values adjusted with {result.correction} across the pairs of each attribute (alpha {result.alpha}; "
               "docs/METHODS.md §11.2 and §11.3)."),
    )
    if demo:
        sec.note("This is a demonstration on the small bundled FairFace sample: the numbers show what the study looks like, "
                 "not a finding about any real model or dataset.", "warning")
        sec.finding("Demonstration study on the bundled FairFace sample: the numbers illustrate the method only",
                    "info", target="study", topic="transfer-demo")
    q = result.quantities()
    sec.metrics("study", {"models": len(result.subsets), "test samples": result.n_test,
                          "significant pairs": int(q["n_significant_pairs"]),
                          **{f"max OD {a}": q.get(f"max_od.{a}", float("nan")) for a in result.attributes}})
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="study", quantity=c.get("name"), value=c.get("value"))
    if conditions:
        sec.note("; ".join(describe(c) for c in conditions), "finding" if any(c["holds"] for c in conditions) else "info")
    for n in result.notes:
        sec.note(n, "warning")
    t2 = table2(result)
    sec.table("table2", t2, f"Dataset bias (NSD, NMI) beside the model's accuracy and OD with {lvl}% CIs "
                            "(layout of the bias-transfer paper's Tables 1 and 2)")
    _figure(sec, result)
    _findings(sec, result)
    if len(result.comparisons):
        cmp = result.comparisons.copy()
        sec.table("comparisons", cmp, f"OD difference of every pair of subsets (a − b, paired bootstrap, {lvl}% CI)",
                  max_rows=120, highlight="significant")
    if len(result.ids):
        ids = result.ids.pivot_table(index=["attribute", "subset"], columns="class", values="estimate", sort=False)
        sec.table("id", ids.reset_index(), "Intraclass disparity ID per class (OD is their mean)", max_rows=120)
        sec.table("id_ci", result.ids, f"ID per class with {lvl}% CIs", max_rows=200)
    if len(result.test_groups):
        sec.table("test_groups", result.test_groups, "Test subjects per group; groups with in_od = no were left out of OD",
                  max_rows=60)
    return sec


def _figure(sec: Section, result) -> None:
    if not len(result.od):
        return
    cat = result.design.catalog.set_index("subset")
    panels = {}
    for a in result.attributes:
        o = result.od[result.od["attribute"] == a]
        if not len(o):
            continue
        o = o.assign(x=[int(cat.loc[s, "size"]) for s in o["subset"]], family=[cat.loc[s, "family"] for s in o["subset"]])
        series = {}
        strat = o[o["family"] == "stratified"]
        if len(strat):
            series["stratified"] = strat
        for s in o[o["family"] != "stratified"]["subset"]:
            series[s] = o[o["subset"] == s]
        panels[f"OD by {a}"] = series
    if not panels:
        return
    xs = [int(v) for v in cat["size"]]
    fig = plots.ci_series(panels, x="x", xlabel="training rows", ylabel=f"OD ({int(round(100 * result.level))}% CI)",
                          logx=max(xs) / max(1, min(xs)) > 8)
    sec.figure("od_by_size", fig, "Model bias (OD) against training-set size: the stratified family as a line, balanced "
                                  "and single-group subsets as points; subsets of the same size are set side by side, "
                                  "a little apart from that size, so that no interval hides another",
               data=result.od.to_dict("list"))


def _findings(sec: Section, result) -> None:
    lvl = int(round(100 * result.level))
    flagged = set()
    for _, f in result.flagged.iterrows():
        a = f["attribute"]
        flagged.add(a)
        sec.finding(f"The model trained on {f['subset']} has the highest OD by {a}: {num(f['od'])}, above every other "
                    f"subset (closest: {f['closest']}, difference {num(f['difference'])}{ci_text(f['ci_low'], f['ci_high'])}; "
                    f"{p_text(f['pvalue_adjusted'])})", "high", target="comparisons",
                    quantity=f"od.{f['subset']}.{a}", value=f["od"], ci_low=f["ci_low"], ci_high=f["ci_high"],
                    pvalue=f["pvalue_adjusted"], size=f["difference"], topic=f"transfer-flag:{a}")
    cmp = result.comparisons
    for a in result.attributes:
        part = cmp[cmp["attribute"] == a] if len(cmp) else cmp
        if not len(part):
            continue
        # balanced against the stratified subset of the same size: the paper's question
        cat = result.design.catalog.set_index("subset")
        for s in [s for s in result.subsets if cat.loc[s, "family"] == "balanced" and cat.loc[s, "attribute"] == a]:
            size = int(cat.loc[s, "size"])
            twins = [t for t in result.subsets if cat.loc[t, "family"] == "stratified" and int(cat.loc[t, "size"]) == size]
            for t in twins:
                r = part[((part["a"] == s) & (part["b"] == t)) | ((part["a"] == t) & (part["b"] == s))]
                if not len(r):
                    continue
                r = r.iloc[0]
                sign = 1 if r["a"] == s else -1
                d, lo, hi = sign * r["estimate"], *(sorted([sign * r["ci_low"], sign * r["ci_high"]]))
                word = ("lower" if d < 0 else "higher") if r["significant"] else "not significantly different"
                sev = "medium" if r["significant"] else "info"
                sec.finding(f"Balancing by {a} at equal size ({size:,} rows): OD by {a} of {s} is {word} than {t} "
                            f"(difference {num(d)} [{num(lo)}, {num(hi)}], {lvl}% CI; {p_text(r['pvalue_adjusted'])})",
                            sev, target="comparisons", quantity=f"od_difference.{s}.{t}.{a}", value=d, ci_low=lo,
                            ci_high=hi, pvalue=r["pvalue_adjusted"], size=abs(d), topic=f"transfer-balanced-vs:{a}:{s}")
        n_sig = int(part["significant"].sum())
        if a not in flagged:
            if n_sig:
                top = part[part["significant"]].assign(_a=lambda x: x["estimate"].abs()).sort_values("_a").iloc[-1]
                hi_s, lo_s = (top["a"], top["b"]) if top["estimate"] > 0 else (top["b"], top["a"])
                d = abs(top["estimate"])
                sec.finding(f"OD by {a}: {n_sig} of {len(part)} pairs of subsets differ significantly; largest: {hi_s} above "
                            f"{lo_s} by {num(d)} ({p_text(top['pvalue_adjusted'])})", "medium", target="comparisons",
                            quantity=f"n_significant_pairs.{a}", value=n_sig, pvalue=top["pvalue_adjusted"], size=d,
                            topic=f"transfer-pairs:{a}")
            else:
                sec.finding(f"No pair of subsets differs significantly in OD by {a} after {result.correction} correction "
                            f"({len(part)} pairs)", "info", target="comparisons", quantity=f"n_significant_pairs.{a}",
                            value=0, topic=f"transfer-pairs:{a}")

"""Report section for :class:`fairvision.audits.dataset_compare.DatasetComparison` (docs/METHODS.md §5.4), and the
grouped bar plot of shares that it and the exclusions report share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.audits.dataset_compare import DatasetComparison
from fairvision.report import plots
from fairvision.report.document import Section
from fairvision.report.sections.distribution import gate_findings, open_section
from fairvision.report.findings import ci_text, group_text, imbalance_severity, num, p_text, pct, test_severity

#: most panels in one row of the grouped bar plot
PANELS_PER_ROW = 3
#: Cramér's V from which a significant difference between datasets is a high finding
STRONG_V = 0.3


def grouped_share_bars(panels: dict[str, pd.DataFrame], *, lows: dict[str, pd.DataFrame] | None = None,
                       highs: dict[str, pd.DataFrame] | None = None, ylabel: str = "share"):
    """One panel per attribute: for each category (rows of the panel's frame) one bar per series (its columns,
    e.g. datasets), heights in [0, 1]; ``lows`` / ``highs`` (same shape) draw interval whiskers. Categories a
    series lacks are bars of height 0."""
    k = len(panels)
    widths = [max(3.0, 0.35 * len(p) * max(1, p.shape[1]) + 1.2) for p in panels.values()]
    if sum(widths) <= 13.5:  # one row, each panel as wide as its bars need
        fig, axes = plots.plt.subplots(1, k, figsize=(sum(widths), 3.8), squeeze=False,
                                       gridspec_kw={"width_ratios": widths})
    else:  # rows of at most PANELS_PER_ROW panels
        cols = min(k, PANELS_PER_ROW)
        rows = -(-k // cols)
        fig, axes = plots.plt.subplots(rows, cols, figsize=(13.5, 3.8 * rows), squeeze=False)
        for ax in axes.ravel()[k:]:
            ax.set_visible(False)
    series = list(next(iter(panels.values())).columns)
    for ax, (name, p) in zip(axes.ravel(), panels.items()):
        x = np.arange(len(p))
        w = 0.8 / max(1, p.shape[1])
        for j, col in enumerate(p.columns):
            v = np.nan_to_num(p[col].to_numpy(dtype=float))
            pos = x - 0.4 + w * (j + 0.5)
            ax.bar(pos, v, w, color=plots.PALETTE[j % len(plots.PALETTE)], label=str(col))
            if lows is not None and highs is not None:
                lo = lows[name][col].to_numpy(dtype=float)
                hi = highs[name][col].to_numpy(dtype=float)
                ok = np.isfinite(lo) & np.isfinite(hi)
                ax.errorbar(pos[ok], v[ok], yerr=[np.maximum(v[ok] - lo[ok], 0), np.maximum(hi[ok] - v[ok], 0)], fmt="none", ecolor="#333",
                            lw=0.8, capsize=2)
        labels = [str(i) for i in p.index]
        rotate = len(p) > 4 or max((len(t) for t in labels), default=0) > 8
        ax.set_xticks(x, labels, rotation=40 if rotate else 0, ha="right" if rotate else "center", fontsize=8,
                      rotation_mode="anchor" if rotate else "default")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_formatter(plots.PercentFormatter(1.0, decimals=0))
        plots.numeric_ticks(ax.yaxis)
        ax.set_ylim(bottom=0)
        ax.spines[["top", "right"]].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(series), 6), frameon=False, fontsize=8)
    top = 1 - (0.4 if len(series) <= 6 else 0.6) / fig.get_size_inches()[1]  # room for the legend
    fig.tight_layout(rect=(0, 0, 1, top))
    return fig


def dataset_compare_section(audit: DatasetComparison, *, title: str = "Datasets side by side") -> Section:
    """Shares per dataset with Wilson intervals, tests of homogeneity, pairwise comparisons and NSD per dataset."""
    s = Section("dataset-compare", title, intro=(
        f"The distribution of each attribute in every dataset, counted in {audit.unit}, over the categories seen in "
        "any dataset (a category a dataset lacks is 0). Shares carry "
        f"{audit.level:.0%} Wilson intervals; a chi-square test of homogeneity per attribute asks whether the "
        f"datasets share one distribution ({audit.correction} correction over the attributes)."))
    key = {"datasets": len(audit.datasets), "attributes": len(audit.attributes)}
    for d, row in audit.sizes.iterrows():
        key[f"{d} ({audit.unit})"] = int(row[audit.unit])
    open_section(s, audit, key, add_findings)
    s.table("sizes", audit.sizes, "Images (and subjects) per dataset.")
    s.table("homogeneity", audit.tests.drop(columns=["small_expected"]), "Chi-square test of homogeneity (datasets x "
            f"categories) per attribute with Cramér's V; pvalue_adjusted: {audit.correction} over the attributes.")
    panels = {a: audit.shares[a]["share"].unstack("dataset").reindex(columns=audit.datasets) for a in audit.attributes}
    lows = {a: audit.shares[a]["ci_low"].unstack("dataset").reindex(index=panels[a].index, columns=audit.datasets)
            for a in audit.attributes}
    highs = {a: audit.shares[a]["ci_high"].unstack("dataset").reindex(index=panels[a].index, columns=audit.datasets)
             for a in audit.attributes}
    for a in audit.attributes:  # categories in the declared order, not sorted
        order = list(audit.counts[a].columns)
        panels[a], lows[a], highs[a] = (f.reindex(index=order) for f in (panels[a], lows[a], highs[a]))
    s.figure("shares", grouped_share_bars(panels, lows=lows, highs=highs, ylabel=f"share of {audit.unit}"),
             f"Share of {audit.unit} in each category, per dataset, with {audit.level:.0%} Wilson intervals.",
             data={a: {"groups": [str(i) for i in p.index], **{str(d): p[d].tolist() for d in p.columns}}
                   for a, p in panels.items()})
    for a in audit.attributes:
        s.table(f"shares_{a}", audit.shares[a], f"Shares of {a} per dataset (of the {audit.unit} with a value), "
                "with Wilson intervals.", max_rows=100)
    s.table("pairwise", audit.pairwise, "Every pair of datasets: Cramér's V and the test of their 2 x categories "
            "table, total variation distance of the shares (tvd) and the largest difference in share (percentage "
            f"points); pvalue_adjusted: {audit.correction} over every pair and attribute.", max_rows=100)
    s.table("representation_by_dataset", audit.representation, "Representation of each dataset over the union of "
            f"categories: NSD with a {audit.level:.0%} cluster-bootstrap interval (bias-corrected), evenness, "
            "effective number of groups, empty categories; too_small: fewer than "
            f"{audit.min_subjects} {audit.unit} per category.", highlight="too_small")
    return s


def add_findings(s: Section, audit: DatasetComparison) -> None:
    """Findings (docs/METHODS.md §9.1, §5.4): failed gates; per attribute whether the datasets differ (with the
    pair and category that differ most); the least balanced dataset per attribute."""
    gate_findings(s, audit.gates)
    for a, row in audit.tests.iterrows():
        p = float(row["pvalue_adjusted"])
        if not np.isfinite(p):
            continue
        pw = audit.pairwise.loc[a]
        rep = audit.representation.xs(a, level="attribute")["too_small"]
        judged = [not (rep[x] or rep[y]) for x, y in pw.index]
        pw = pw[judged] if any(judged) else pw  # name a difference between datasets large enough to judge
        top = pw["max_share_diff_pp"].idxmax() if pw["max_share_diff_pp"].notna().any() else None
        detail = ""
        if top is not None:
            r = pw.loc[top]
            g = r["largest_diff_group"]
            sa = audit.shares[a].loc[(top[0], g), "share"]
            sb = audit.shares[a].loc[(top[1], g), "share"]
            detail = (f"; largest difference {group_text(a, g)}: {pct(sa, 1)} in {top[0]} vs {pct(sb, 1)} in "
                      f"{top[1]} ({r['max_share_diff_pp']:.1f} pp)")
        v = float(row["cramers_v"])
        if p < audit.alpha:
            s.finding(f"The datasets differ in {a}: Cramér's V {num(v)} ({p_text(p)}){detail}",
                      test_severity(p, audit.alpha, v, STRONG_V), target="homogeneity", quantity=f"cramers_v.{a}",
                      value=v, pvalue=p, size=v)
        else:
            s.finding(f"The datasets do not differ significantly in {a} ({p_text(p)}, Cramér's V {num(v)}){detail}",
                      "info", target="homogeneity", quantity=f"pvalue.{a}", value=p)
    for a in audit.attributes:
        rep = audit.representation.xs(a, level="attribute")
        small = [f"{d} ({int(r['n']):,} {audit.unit})" for d, r in rep.iterrows() if r["too_small"] and r["n"] > 0]
        rep = rep.loc[~rep["too_small"].to_numpy(bool), "nsd"].dropna()  # a tiny dataset looks unbalanced by chance
        caveat = f"; too small to judge: {', '.join(small)}" if small else ""
        if len(rep):
            d = rep.idxmax()
            r = audit.representation.loc[(d, a)]
            others = ", ".join(f"{k} {num(v)}" for k, v in rep.items() if k != d)
            what = "the least balanced dataset" if others else "the only dataset large enough to judge"
            s.finding(f"{a}: {d} is {what} (NSD {num(r['nsd'])}{ci_text(r['nsd_ci_low'], r['nsd_ci_high'])})"
                      + (f"; {others}" if others else "") + caveat,
                      imbalance_severity(float(r["nsd"])), target="representation_by_dataset", quantity=f"nsd.{d}.{a}",
                      value=r["nsd"], ci_low=r["nsd_ci_low"], ci_high=r["nsd_ci_high"], size=r["nsd"])
        elif small:
            s.finding(f"{a}: every dataset is too small to judge its balance ({', '.join(small)}; fewer than "
                      f"{audit.min_subjects} {audit.unit} per category)", "info", target="representation_by_dataset")

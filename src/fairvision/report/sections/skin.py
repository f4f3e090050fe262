"""Report section for apparent skin colour (Thong et al. Tables 1-2, Figure 2; docs/METHODS.md §2.4)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fairvision.audits.skin import SkinComparison, SkinDistribution  # noqa: E402
from fairvision.report import Section  # noqa: E402
from fairvision.report.plots import PALETTE  # noqa: E402

__all__ = ["skin_section", "histogram_figure", "scatter_figure"]


def histogram_figure(dists: list[SkinDistribution]):
    """Side-by-side 20-bin histograms of L* and h* (percent of measured images), one series per set."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, var, label in ((axes[0], "L", "L* (skin tone)"), (axes[1], "hue", "h* (skin hue, degrees)")):
        n = len(dists)
        for i, d in enumerate(dists):
            h = d.histograms.loc[var]
            width = (h["right"] - h["left"]).to_numpy() / n
            ax.bar(h["left"].to_numpy() + i * width, h["percent"].to_numpy(), width=width, align="edge",
                   color=PALETTE[i % len(PALETTE)], alpha=0.85, label=d.name)
        thr = dists[0].thresholds["L" if var == "L" else "hue"]
        ax.axvline(thr, color="#444", ls="--", lw=1)
        ax.set_xlabel(label)
        ax.set_ylabel("% of images")
        ax.spines[["top", "right"]].set_visible(False)
    if len(dists) > 1:
        axes[1].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def scatter_figure(dists: list[SkinDistribution]):
    """L* against h* per image with the light/dark and red/yellow thresholds drawn (Thong Figure 2)."""
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for i, d in enumerate(dists):
        ax.scatter(d.points["hue"], d.points["L"], s=8, alpha=0.6, color=PALETTE[i % len(PALETTE)], label=d.name, lw=0)
    t = dists[0].thresholds
    ax.axhline(t["L"], color="#444", ls="--", lw=1)
    ax.axvline(t["hue"], color="#444", ls="--", lw=1)
    for txt, x, y, ha, va in (("light-red", 0.02, 0.98, "left", "top"), ("light-yellow", 0.98, 0.98, "right", "top"),
                              ("dark-red", 0.02, 0.02, "left", "bottom"), ("dark-yellow", 0.98, 0.02, "right", "bottom")):
        ax.text(x, y, txt, transform=ax.transAxes, ha=ha, va=va, fontsize=8, color="#666")
    ax.set_xlabel("h* (degrees; red ← → yellow)")
    ax.set_ylabel("L* (dark ← → light)")
    if len(dists) > 1:
        ax.legend(fontsize=8, frameon=False, loc="center right")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def _fmt_table(t: pd.DataFrame) -> pd.DataFrame:
    return t.round(2)


def _dist_blocks(sec: Section, d: SkinDistribution, suffix: str = ""):
    tag = f" ({d.name})" if suffix else ""
    sec.table(f"table1{suffix}", _fmt_table(d.table),
              caption=f"Skin tone x skin hue in % of measured images{tag} (Thong et al. Table 1 layout; light if "
                      f"L* >= {d.thresholds['L']:g}, yellow if h* >= {d.thresholds['hue']:g} deg).")
    sec.table(f"cells{suffix}", d.cells.round(2),
              caption=f"Cell counts and percentages with {d.ci_method} 95% CIs{tag}.")
    if d.by_group is not None:
        sec.table(f"by_group{suffix}", d.by_group.round(2), highlight="too_small",
                  caption=f"Skin colour cells within each group{tag}; highlighted groups are too small to judge.")
        if d.group_test is not None and np.isfinite(d.group_test.statistic):
            g = d.group_test
            sec.metrics(f"group_test{suffix}", {"chi-square": g.statistic, "df": g.df, "p-value": g.pvalue, "n": g.n},
                        caption="Chi-square test of homogeneity of the skin colour cells across groups (groups too "
                                "small to judge left out).")
            if not g.reliable:
                sec.note(f"Smallest expected count {g.min_expected:.1f}: expected counts fail Cochran's rule, so the "
                         "group test's chi-square approximation is unreliable.", "warning")
    for n in d.notes:
        sec.note(n, "warning" if "too small" in n or "no skin colour" in n else "info")


def skin_section(result: SkinDistribution | SkinComparison, *, title: str = "Apparent skin colour",
                 id: str = "skin-colour") -> Section:
    """Turn a :func:`~fairvision.audits.skin.audit_skin_distribution` or
    :func:`~fairvision.audits.skin.audit_skin_comparison` result into a report section.

    Shows the light/dark x red/yellow table (Thong Table 1), cell CIs, the
    20-bin histograms of L* and h*, an L* vs h* scatter with the thresholds,
    group breakdowns, quality-flag counts and, for two sets, the comparison
    (Thong Table 2) with its chi-square test. No images are embedded.
    """
    sec = Section(id=id, title=title, intro=(
        "Apparent skin colour measured in CIELAB as skin tone L* (light to dark) and skin hue h* (red to yellow), "
        "after Thong et al. (ICCV 2023). Categories use the paper's thresholds; they describe the pixels in the "
        "images, not anyone's identity."))
    dists = [result.first, result.second] if isinstance(result, SkinComparison) else [result]
    sec.metrics("coverage", {f"{d.name}: measured": d.n_measured for d in dists}
                | {f"{d.name}: no measurement": d.n_failed for d in dists},
                caption="Images with a skin colour measurement.")
    if isinstance(result, SkinComparison):
        t = result.test
        a, b = result.names
        sec.metrics("comparison", {"chi-square": t.statistic, "df": t.df, "p-value": t.pvalue, "n": t.n},
                    caption=f"Chi-square test of homogeneity: do {a} and {b} share one light/dark x red/yellow distribution?")
        if np.isfinite(t.pvalue):
            verdict = "differ" if t.pvalue < 0.05 else "do not differ detectably"
            big = result.difference.abs().idxmax()
            sec.text(f"The skin colour distributions of {a} and {b} {verdict} (p = {t.pvalue:.3g}). The largest cell "
                     f"change is {big[1]}-{big[0]}: {result.difference[big]:+.1f} percentage points ({b} minus {a}).")
        diff = result.difference.to_frame()
        sec.table("difference", diff.round(2), caption=f"Cell percentage {b} minus {a}, in percentage points.")
        for i, d in enumerate(dists):
            _dist_blocks(sec, d, suffix=f"_{i + 1}")
        for n in result.notes:
            if n.startswith("Smallest expected"):
                sec.note(n, "warning")
    else:
        _dist_blocks(sec, result)
    data = {d.name: d.histograms.reset_index().to_dict(orient="list") for d in dists}
    if any(d.n_measured for d in dists):
        sec.figure("histograms", histogram_figure(dists), "Distribution of skin tone L* and skin hue h* (20 bins; "
                   "dashed lines: thresholds).", data=data)
        sec.figure("scatter", scatter_figure(dists), "Skin tone L* against skin hue h*, one dot per image "
                   "(Thong et al. Figure 2).", data={d.name: d.points.round(3).to_dict(orient="list") for d in dists})
    flags = [d.flag_counts.rename(d.name) for d in dists if len(d.flag_counts)]
    if flags:
        ft = pd.concat(flags, axis=1).fillna(0).astype("int64")
        ft.index.name = "flag"
        sec.table("quality_flags", ft, caption="Measured images carrying each quality flag (e.g. low_stability: the "
                  "estimate moves under pixel resampling; achromatic: greyscale image, hue meaningless).")
    return sec

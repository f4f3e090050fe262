"""Report section for apparent skin colour (Thong et al. Tables 1-2, Figure 2; docs/METHODS.md §2.4)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fairvision.audits.skin import SkinComparison, SkinDistribution  # noqa: E402
from fairvision.report import Section  # noqa: E402
from fairvision.report.findings import group_text, imbalance_severity, p_text, test_severity, verb  # noqa: E402
from fairvision.report.plots import PALETTE  # noqa: E402
from fairvision.skin.categories import HUE_THRESHOLD, L_THRESHOLD  # noqa: E402

#: significance level of the skin colour tests' findings
ALPHA = 0.05
#: Thong et al.'s thresholds: a report with others says so
DEFAULT_THRESHOLDS = {"L": L_THRESHOLD, "hue": HUE_THRESHOLD}

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
    if d.ita_classes is not None:
        sec.table(f"ita_classes{suffix}", d.ita_classes.round(2),
                  caption=f"ITA classes ST1 (darkest) ... ST6 of the measured images with an ITA{tag}, with Wilson 95% "
                          f"CIs; boundaries {d.thresholds.get('ita_boundaries', '-')} (docs/METHODS.md §1.4).")
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
    t0 = dists[0].thresholds
    if (t0["L"], t0["hue"]) != (DEFAULT_THRESHOLDS["L"], DEFAULT_THRESHOLDS["hue"]):
        sec.note(f"Thresholds changed from the paper's (light if L* >= {DEFAULT_THRESHOLDS['L']:g}, yellow if h* >= "
                 f"{DEFAULT_THRESHOLDS['hue']:g}°) to light if L* >= {t0['L']:g}, yellow if h* >= {t0['hue']:g}° "
                 "(Thong et al.'s supplement varies them; docs/METHODS.md §1.4).", "info")
    sec.metrics("coverage", {f"{d.name}: measured": d.n_measured for d in dists}
                | {f"{d.name}: no measurement": d.n_failed for d in dists},
                caption="Images with a skin colour measurement.")
    add_findings(sec, result)
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


def _pct1(x: float) -> str:
    return f"{float(x):.1f}%"


def _distribution_findings(sec: Section, d: SkinDistribution, suffix: str, tag: str) -> None:
    if d.n_measured == 0:
        return
    t = d.table  # percent, rounded as in the table shown (two decimals)
    counts = d.cells["count"]
    tone = t.loc["Total", ["light", "dark"]].round(2)
    hue = t.loc[["red", "yellow"], "Total"].round(2)
    tone_n = counts.groupby(level="skin_tone").sum()
    hue_n = counts.groupby(level="skin_hue").sum()
    for var, split, n, desc, column in (
        ("tone", tone, tone_n, {"dark": f"dark (L* < {d.thresholds['L']:g})", "light": f"light (L* >= {d.thresholds['L']:g})"},
         "skin_tone"),
        ("hue", hue, hue_n, {"red": f"red (h* < {d.thresholds['hue']:g}°)", "yellow": f"yellow (h* >= {d.thresholds['hue']:g}°)"},
         "skin_hue"),
    ):
        major = split.idxmax()
        minor = [c for c in split.index if c != major][0]
        gap = abs(float(n[major] - n[minor])) / d.n_measured  # the NSD of a two-group split
        sec.finding(f"skin {var}{tag}: {_pct1(split[major])} of the {d.n_measured:,} measured images are {desc[major]}, "
                    f"{_pct1(split[minor])} {minor}", imbalance_severity(gap), target=f"table1{suffix}",
                    quantity=f"percent.{major}", value=float(split[major]), size=gap,
                    topic=None if tag else f"balance:{column}")
    share_failed = d.n_failed / d.n_images if d.n_images else 0.0
    if d.n_failed:
        sec.finding(f"{d.n_failed:,} of {d.n_images:,} images{tag} {verb(d.n_failed)} no skin colour measurement and are left out",
                    "medium" if share_failed >= 0.1 else "info", target="coverage", quantity="n_failed",
                    value=d.n_failed, size=share_failed)
    g = d.group_test
    if d.by_group is not None and g is not None and np.isfinite(g.statistic):
        by = [n for n in d.by_group.index.names if n != "skin_colour"]
        v = g.cramers_v
        what = " × ".join(by)
        if g.pvalue < ALPHA:
            text = (f"Skin colour differs across {what} groups{tag}: chi-square {g.statistic:.4g} (df {g.df}), "
                    f"{p_text(g.pvalue, adjusted=False)}")
        else:
            text = f"Skin colour does not differ detectably across {what} groups{tag} ({p_text(g.pvalue, adjusted=False)})"
        sec.finding(text, test_severity(g.pvalue, ALPHA, v), target=f"group_test{suffix}", quantity="group_test.pvalue",
                    value=g.pvalue, pvalue=g.pvalue, size=v)
        small = d.by_group.loc[d.by_group["too_small"].astype(bool)]
        if len(small):
            groups = small.index.droplevel("skin_colour").unique()
            noun = "group" if len(groups) == 1 else "groups"
            sec.finding(f"{len(groups)} {what} {noun}{tag} {verb(len(groups))} too few measured images to judge and "
                        "are left out of the test: " + ", ".join(group_text(by, gr) for gr in groups[:4]) + (", ..." if len(groups) > 4 else ""),
                        "medium", target=f"by_group{suffix}", quantity="n_small_groups", value=len(groups))
    if len(d.flag_counts):
        top = d.flag_counts.sort_values(ascending=False, kind="stable").head(3)
        sec.finding(f"Quality flags{tag}: " + ", ".join(f"{f} on {int(c):,}" for f, c in top.items())
                    + f" of {d.n_measured:,} measured images", "info", target="quality_flags",
                    quantity=f"flags.{top.index[0]}", value=int(top.iloc[0]))


def add_findings(sec: Section, result: SkinDistribution | SkinComparison) -> None:
    """Findings of a skin colour audit (docs/METHODS.md §9.1): the light/dark and red/yellow splits, missing
    measurements, the test across groups, quality flags and, for two sets, their comparison."""
    if isinstance(result, SkinComparison):
        t = result.test
        a, b = result.names
        if np.isfinite(t.pvalue):
            big = result.difference.abs().idxmax()
            change = float(result.difference[big])
            outcome = "differ" if t.pvalue < ALPHA else "do not differ detectably"
            sec.finding(f"The skin colour of {a} and {b} {outcome}: largest change {big[1]}-{big[0]} "
                        f"{change:+.2f} percentage points ({b} minus {a}); chi-square {p_text(t.pvalue, adjusted=False)}",
                        test_severity(t.pvalue, ALPHA, abs(change) / 100.0), target="comparison",
                        quantity="difference_pp", value=change, pvalue=t.pvalue, size=abs(change) / 100.0)
        for i, d in enumerate((result.first, result.second)):
            _distribution_findings(sec, d, f"_{i + 1}", f" ({d.name})")
    else:
        _distribution_findings(sec, result, "", "")

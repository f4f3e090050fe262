"""Report sections for the stability of apparent skin colour: spread within subjects and lighting sensitivity
(docs/METHODS.md §2.6, §2.7). No image is shown: only numbers and plots of numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fairvision.audits.gates import describe  # noqa: E402
from fairvision.audits.skin_stability import ALL, FLIP_CATEGORIES, LightingSensitivity, SkinStability  # noqa: E402
from fairvision.report import Section  # noqa: E402
from fairvision.report import plots  # noqa: E402
from fairvision.report.findings import ci_text, num, p_text, pct  # noqa: E402
from fairvision.skin.relight import UNITS  # noqa: E402

__all__ = ["stability_section", "lighting_section", "sensitivity_figure", "contrast_figure"]

_LABEL = {"sd_L": "SD of L*", "sd_hue": "SD of h* (degrees)", "sd_ita": "SD of ITA (degrees)"}
_AXIS = {"exposure": "exposure (EV)", "white-balance": "white balance (1000 K shift)"}
#: a flip share at least this is a medium finding
FLIP_MEDIUM = 0.10


def _open(id: str, title: str, intro: str, metrics: tuple[str, dict], conditions, notes) -> Section:
    """A section with its key numbers, its ``--fail-if`` conditions (a held one is a high finding) and the
    audit's notes as warnings."""
    sec = Section(id, title, intro=intro)
    sec.metrics(*metrics)
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target=metrics[0], quantity=c.get("name"),
                        value=c.get("value"))
        sec.note(describe(c), "finding" if c["holds"] else "info")
    for n in notes:
        sec.note(n, "warning")
    return sec


def _style(ax, *axes) -> None:
    """Enough numeric ticks on the given axes (``ax.xaxis``, ``ax.yaxis``) and no top or right spine."""
    for axis in axes:
        plots.numeric_ticks(axis)
    ax.spines[["top", "right"]].set_visible(False)


def spread_figure(result: SkinStability):
    """Median per-subject SD of L*, h* and ITA by group, with subject-bootstrap intervals (one panel each)."""
    sp = result.spread
    fig, axes = plt.subplots(1, 3, figsize=(11, max(2.4, 0.3 * len(sp.xs("sd_L", level="quantity")) + 1.4)))
    for ax, q in zip(axes, ("sd_L", "sd_hue", "sd_ita")):
        part = sp.xs(q, level="quantity")
        labels = [g if a == ALL else f"{a} = {g}" for a, g in part.index]
        y = np.arange(len(part))
        est = part["median"].to_numpy(dtype=float)
        lo, hi = part["median_ci_low"].to_numpy(dtype=float), part["median_ci_high"].to_numpy(dtype=float)
        small = part["too_small"].to_numpy(dtype=bool)
        for i in range(len(part)):
            c = "#aaa" if small[i] else plots.PALETTE[0]
            if np.isfinite(lo[i]) and np.isfinite(hi[i]):
                ax.plot([lo[i], hi[i]], [y[i], y[i]], color=c, lw=1.6)
            ax.plot(est[i], y[i], "o", color=c, ms=5)
        ax.set_yticks(y, labels if q == "sd_L" else [""] * len(y), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"median {_LABEL[q]}")
        _style(ax, ax.xaxis)
    fig.tight_layout()
    return fig


def stability_section(result: SkinStability, *, conditions=None, id: str = "skin-stability") -> Section:
    """Spread of apparent skin colour within subjects, by group (docs/METHODS.md §2.6)."""
    q = result.quantities()
    sec = _open(id, "Stability of apparent skin colour within subjects",
                "How much one person's measured skin colour moves between their images: per subject the standard "
                "deviation and range of L*, h* (on the circle) and ITA, and whether the person's category changes "
                "between images. Subjects with one usable image are left out.",
                ("stability_overall", {"subjects": result.n_subjects, "images used": result.n_used,
                                       "median SD of L*": q["median_sd_L"], "median SD of h*": q["median_sd_hue"],
                                       "median SD of ITA": q["median_sd_ita"],
                                       "flip light/dark": q["flip_share.skin_tone"],
                                       "flip red/yellow": q["flip_share.skin_hue"]}), conditions, result.notes)
    _stability_findings(sec, result)
    small = result.spread[result.spread["too_small"].astype(bool)]
    if len(small):
        groups = sorted({f"{a} = {g}" for a, g, _ in small.index})
        sec.note(f"{len(groups)} group(s) have fewer than {result.min_subjects} subjects and are reported but not "
                 f"tested: {', '.join(groups[:10])}{' ...' if len(groups) > 10 else ''}", "warning")
    sec.figure("spread_by_group", spread_figure(result),
               f"Median per-subject SD by group with {result.level:.0%} subject-bootstrap intervals "
               "(grey: too few subjects to test).",
               data=result.spread.reset_index()[["attribute", "group", "quantity", "median", "median_ci_low",
                                                 "median_ci_high"]].to_dict(orient="list"))
    sec.table("spread", result.spread, f"Per-subject SD by group: median and mean with {result.level:.0%} "
              "subject-bootstrap intervals")
    flips = result.flips.rename(index=FLIP_CATEGORIES, level="category")
    sec.table("flips", flips, f"Subjects whose category changes between their images, with {result.level:.0%} "
              "Wilson intervals")
    if len(result.tests):
        sec.table("spread_tests", result.tests, "Kruskal-Wallis tests of equal spread across groups "
                  f"({result.correction} correction over every test)", highlight="differs")
    sec.table("subjects", result.subjects, "Per-subject spread (first 200 subjects; all in the tables)")
    return sec


def _stability_findings(sec: Section, result: SkinStability) -> None:
    q = result.quantities()
    for cat, words in FLIP_CATEGORIES.items():
        row = result.flips.loc[(ALL, ALL, cat)]
        share = float(row["share"])
        sev = "medium" if share >= FLIP_MEDIUM else "info"
        sec.finding(f"{pct(share)} of subjects ({int(row['n_flip']):,} of {int(row['n_subjects']):,}) flip {words} "
                    f"between their images ({result.level:.0%} CI{ci_text(row['ci_low'], row['ci_high'], pct)})", sev,
                    target="flips", quantity=f"flip_share.{cat}", value=share, ci_low=row["ci_low"],
                    ci_high=row["ci_high"], size=share)
    r = result.spread.loc[(ALL, ALL, "sd_L")]
    sec.finding(f"One subject's L* varies with a median SD of {num(q['median_sd_L'])} between images "
                f"(CI{ci_text(r['median_ci_low'], r['median_ci_high'])}); the median SD of h* is "
                f"{num(q['median_sd_hue'])} degrees",
                "info", target="spread", quantity="median_sd_L", value=q["median_sd_L"], ci_low=r["median_ci_low"],
                ci_high=r["median_ci_high"])
    for (attr, quantity), t in result.tests[result.tests["differs"].astype(bool)].iterrows():
        part = result.spread.xs((attr, quantity), level=("attribute", "quantity"))
        part = part[~part["too_small"].astype(bool)]
        hi, lo = part["median"].idxmax(), part["median"].idxmin()
        sec.finding(f"The {_LABEL[quantity]} within subjects differs by {attr}: median {num(part.loc[hi, 'median'])} "
                    f"for {attr} = {hi} against {num(part.loc[lo, 'median'])} for {lo}; {p_text(t['pvalue_adjusted'])}",
                    "medium", target="spread_tests", quantity=f"{quantity}.{attr}", value=part.loc[hi, "median"],
                    pvalue=t["pvalue_adjusted"])


def sensitivity_figure(result: LightingSensitivity):
    """Median change of L* and h* from the unedited image against each edit's strength, one line per estimator
    with its interquartile band (rows: L*, h*; columns: edits)."""
    edits = list(result.edits)
    fig, axes = plt.subplots(2, len(edits), figsize=(3.8 * len(edits) + 1.2, 5.6), squeeze=False)
    for j, edit in enumerate(edits):
        for i, (m, label) in enumerate((("dL", "change in L*"), ("dhue", "change in h* (degrees)"))):
            ax = axes[i][j]
            for k, est in enumerate(result.estimators):
                key = (est, edit)
                if key not in result.curves.droplevel("strength").index:
                    continue
                part = result.curves.loc[key]
                x = part.index.to_numpy(dtype=float) / (1000.0 if edit == "white-balance" else 1.0)  # kK, EV, gamma
                c = plots.PALETTE[k % len(plots.PALETTE)]
                ax.plot(x, part[f"{m}_median"], marker="o", ms=3, color=c, label=est)
                ax.fill_between(x, part[f"{m}_q25"], part[f"{m}_q75"], color=c, alpha=0.15, lw=0)
            ax.axhline(0, color="#888", lw=0.8, ls="--")
            ax.set_xlabel(_AXIS.get(edit, edit))
            if j == 0:
                ax.set_ylabel(label)
            _style(ax, ax.xaxis, ax.yaxis)
    axes[0][-1].legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig


def contrast_figure(result: LightingSensitivity):
    """RMS contrast of each unedited image against its L* and h* (first estimator)."""
    est = result.estimators[0]
    part = result.contrast[result.contrast["estimator"] == est]
    hue = part["hue"].to_numpy(dtype=float)
    hue = np.where(hue > 180, hue - 360, hue)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, vals, label in ((axes[0], part["L"].to_numpy(dtype=float), "L*"), (axes[1], hue, "h* (degrees)")):
        ax.scatter(part["contrast"], vals, s=12, color=plots.PALETTE[0], lw=0, alpha=0.8)
        ax.set_xlabel("RMS contrast of L*/100 (whole image)")
        ax.set_ylabel(f"{label} ({est})")
        _style(ax, ax.xaxis, ax.yaxis)
    fig.tight_layout()
    return fig


def lighting_section(result: LightingSensitivity, *, conditions=None, id: str = "lighting") -> Section:
    """Lighting sensitivity, spread of the relit copies and RMS contrast (docs/METHODS.md §2.7)."""
    q = result.quantities()
    key = {"images": result.n_used, "estimators": len(result.estimators)}
    for edit in result.edits:
        key[f"max |slope L*| per {UNITS[edit]} ({edit})"] = q.get(f"max_abs_slope_L.{edit}")
    sec = _open(id, "Sensitivity of apparent skin colour to lighting",
                "Every image was relit by global edits (exposure, white balance, gamma) and measured again on the "
                "skin mask of the unedited image, so the edit alone moves the measurement. Slopes are least squares "
                "per image, then the median over images with a bootstrap interval.",
                ("lighting_overall", key), conditions, result.notes)
    _lighting_findings(sec, result)
    small = result.sensitivity[result.sensitivity["too_small"].astype(bool)] if "too_small" in \
        result.sensitivity.columns else result.sensitivity.iloc[:0]
    if len(small):
        cells = sorted({f"{est} {g}" for est, _, g in small.index})
        sec.note(f"{len(cells)} skin colour cell(s) have fewer than {result.min_subjects} images, so their slopes "
                 f"and intervals rest on too few images to read as that cell's answer: {', '.join(cells[:10])}"
                 f"{' ...' if len(cells) > 10 else ''}", "warning")
    sec.figure("sensitivity_curves", sensitivity_figure(result),
               "Median change of L* and h* from the unedited image against each edit (band: 25th-75th percentile "
               "over images).", data=result.curves.reset_index().to_dict(orient="list"))
    sec.table("sensitivity", result.sensitivity,
              f"Median slope per unit of each edit, by estimator and by the unedited image's skin colour cell, with "
              f"{result.level:.0%} bootstrap intervals over images")
    sec.table("relit_copies", result.copies,
              "The relit copies of each image as one subject's images: median per-copy-set SD and share of images "
              "whose category flips")
    sec.figure("contrast_scatter", contrast_figure(result),
               "RMS contrast of each unedited image against its measured skin colour.",
               data=result.contrast.to_dict(orient="list"))
    sec.table("contrast_correlation", result.correlations,
              f"Spearman correlation of RMS contrast with L* and h* over the unedited images ({result.correction} "
              "correction)")
    sec.table("contrast", result.contrast, "RMS contrast and skin colour of every unedited image")
    sec.table("slopes", result.slopes, "Slopes per image, estimator and edit")
    return sec


def _lighting_findings(sec: Section, result: LightingSensitivity) -> None:
    sens = result.sensitivity
    for (est, edit, group), row in sens.iterrows():
        if group != ALL or not np.isfinite(row["slope_L"]):
            continue
        sev = "medium" if edit == "exposure" or abs(row["slope_L"]) >= 3 else "info"
        hue = f"; h* {num(row['slope_hue'])} degrees per {UNITS[edit]} of {edit}" if np.isfinite(row["slope_hue"]) \
            else ""
        sec.finding(f"The {est} estimator's L* moves {num(row['slope_L'])} per {UNITS[edit]} of {edit} (median over "
                    f"{int(row['n_images'])} images,{ci_text(row['slope_L_ci_low'], row['slope_L_ci_high'])}){hue}",
                    sev, target="sensitivity",
                    quantity=f"slope_L.{est}.{edit}", value=row["slope_L"], ci_low=row["slope_L_ci_low"],
                    ci_high=row["slope_L_ci_high"], size=min(1.0, abs(float(row["slope_L"])) / 20.0))
    if len(result.copies):
        pooled = result.copies.xs("all edits", level="edit")
        for est, row in pooled.iterrows():
            share = row["flip_skin_tone"]
            if np.isfinite(share):
                sec.finding(f"Under these lighting edits {pct(share)} of images flip light/dark with the {est} "
                            f"estimator (median SD of L* across the copies {num(row['median_sd_L'])})",
                            "medium" if share >= FLIP_MEDIUM else "info", target="relit_copies",
                            quantity=f"copies_flip_share.skin_tone.{est}", value=share, size=share)
    for (est, m), row in result.correlations.iterrows():
        if np.isfinite(row["pvalue_adjusted"]) and row["pvalue_adjusted"] < result.alpha:
            sec.finding(f"Image contrast and {'L*' if m == 'L' else 'h*'} ({est}) are correlated: Spearman rho "
                        f"{num(row['rho'])}, {p_text(row['pvalue_adjusted'])}", "info", target="contrast_correlation",
                        quantity=f"rho.{est}.{m}", value=row["rho"], pvalue=row["pvalue_adjusted"])


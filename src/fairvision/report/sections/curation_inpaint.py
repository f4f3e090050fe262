"""Report sections of in-painting bystanders and personal information and of its utility check
(docs/METHODS.md §13.11).

No image is shown unless the user passes ``--show-images``: the manifest lists images by sample id and file name.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fairvision.audits.gates import describe  # noqa: E402
from fairvision.io.images import downscale, encode_png, read_image  # noqa: E402
from fairvision.report import Section, plots  # noqa: E402
from fairvision.report.findings import GAP_LARGE, ci_text, count_of, group_text, num, p_text, pct  # noqa: E402
from fairvision.vision.inpaint import InpaintOptions  # noqa: E402

#: at most this many before/after pairs are shown with --show-images
MAX_SHOWN = 6
#: at most this many points per panel of the before/after plot (a seeded sample of the rest)
MAX_POINTS = 2000


def inpaint_section(result, *, show_images: bool = False, conditions: list[dict] | None = None,
                    title: str = "In-painting bystanders and personal information") -> Section:
    """Turn a :class:`fairvision.audits.curation.inpainting.InpaintResult` into a report section."""
    p = result.params
    g = p["guidance"]
    guidance = f"{g[0]:g}" if g[0] == g[1] else f"drawn uniformly from [{g[0]:g}, {g[1]:g}] for every image"
    sec = Section("curation_inpaint", title, intro=(
        f"Every annotated region (boxes and masks; several per image unite) was grown by {p['dilate']} pixels and "
        f"in-painted with the diffusers pipeline in {Path(p['weights']).name}: prompt \"{p['prompt']}\", negative "
        f"prompt \"{p['negative_prompt']}\", guidance scale {guidance}, {p['steps']} steps "
        f"({'DDIM, eta = 0' if p['scheduler'] == 'ddim' else 'the folder’s scheduler'}), the model seeing "
        f"{'a window around the regions' if p['context'] == 'crop' else 'the whole image'} at {p['resolution']} "
        "pixels on the longer side. Pixels outside the grown regions are the original's, exactly. "
        f"Each image's seed comes from the run seed ({p['run_seed']}) and its sample id, so a rerun gives the same "
        "images. Images without a region are copied unchanged (docs/METHODS.md §13.11)."))
    fhibe = InpaintOptions()
    departs = [f"{name} {p[key]!r} (FHIBE: {getattr(fhibe, key)!r})" if isinstance(p[key], str) else
               f"{name} {p[key]} (FHIBE: {getattr(fhibe, key)})"
               for key, name in (("prompt", "prompt"), ("negative_prompt", "negative prompt"), ("steps", "steps"),
                                 ("scheduler", "scheduler"))
               if p[key] != getattr(fhibe, key)]
    if tuple(g) != fhibe.guidance:
        departs.append(f"guidance {g[0]:g} to {g[1]:g} (FHIBE: {fhibe.guidance[0]:g} to {fhibe.guidance[1]:g})")
    if departs:
        sec.note(f"These settings depart from FHIBE's: {'; '.join(departs)}.", "warning")
    c = result.counts()
    q = result.quantities()
    sec.metrics("key figures", {"images": c["images"], "in-painted": c["inpainted"], "copied unchanged": c["copied"],
                                "failed": c["failed"], "mean share of pixels in-painted": q["mean_masked_fraction"]})
    for cond in conditions or []:
        sec.note(describe(cond), "finding" if cond["holds"] else "info")
    man = result.manifest
    shown = man.assign(image=[Path(str(x)).name if isinstance(x, str) else "" for x in man["image_path"]],
                       output=[Path(str(x)).name if isinstance(x, str) else "" for x in man["output_path"]],
                       seed=man["seed"].astype(str))  # an identifier, not a quantity: no thousands separators
    cols = ["sample_id", "image", "status", "n_regions", "masked_fraction", "guidance", "output", "reason", "seed"]
    bad = shown[shown["status"] == "failed"]
    if len(bad):
        sec.table("failed", bad[["sample_id", "image", "reason"]], "Images that could not be in-painted (left out).",
                  save=False)
    sec.table("manifest", shown[cols], "One row per image (the full paths are in manifest.csv).", max_rows=100)
    done = man[man["status"] == "inpainted"]
    if len(done):
        sec.figure("masked share", _histograms(done), "Share of each in-painted image's pixels inside its regions "
                   "(left) and the guidance scale drawn for it (right).",
                   data={"masked_fraction": done["masked_fraction"].tolist(), "guidance": done["guidance"].tolist()})
    if show_images and len(done):
        for r in done.head(MAX_SHOWN).itertuples(index=False):
            sec.image(f"before and after {r.sample_id}", _side_by_side(r.image_path, r.output_path),
                      f"{r.sample_id}: original (left) and in-painted (right).")
    elif len(done):
        sec.note("No images are shown (they show people); pass --show-images to see before/after thumbnails.")
    _inpaint_findings(sec, c, q)
    return sec


def _histograms(done: pd.DataFrame):
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
    for ax, col, label in zip(axes, ("masked_fraction", "guidance"), ("share of pixels in-painted", "guidance scale")):
        v = done[col].astype(float).to_numpy()
        lo, hi = (0.0, max(float(v.max()), 1e-9)) if col == "masked_fraction" else (float(v.min()), float(v.max()))
        if hi - lo <= 0:  # one value: a bar about it, not numpy's default range of +-0.5 (a share below 0)
            lo, hi = lo - 0.5, hi + 0.5
        ax.hist(v, bins=min(20, max(3, len(done))), range=(lo, hi), color=plots.PALETTE[0])
        ax.set_xlim(lo, hi)
        ax.set_xlabel(label)
        ax.set_ylabel("images")
        plots.numeric_ticks(ax.xaxis)
        plots.numeric_ticks(ax.yaxis, integer=True)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def _side_by_side(before: str, after: str) -> bytes:
    a, b = downscale(read_image(before), 256), downscale(read_image(after), 256)
    if a.shape != b.shape:
        b = a
    gap = np.full((a.shape[0], 4, 3), 255, np.uint8)
    return encode_png(np.concatenate([a, gap, b], axis=1))


def _inpaint_findings(sec: Section, c: dict, q: dict) -> None:
    if c["failed"]:
        sec.finding(f"{count_of(c['failed'], 'image')} could not be in-painted and "
                    f"{'is' if c['failed'] == 1 else 'are'} left out of the release", "high", target="failed",
                    quantity="n_failed", value=c["failed"], size=c["failed"] / c["images"])
    sec.finding(f"{count_of(c['inpainted'], 'image')} of {c['images']:,} ({pct(q['share_inpainted'])}) in-painted, "
                f"on average {pct(q['mean_masked_fraction'], 1)} of their pixels; {c['copied']:,} copied unchanged",
                "info", target="key figures", quantity="n_inpainted", value=c["inpainted"])


def utility_section(result, *, conditions: list[dict] | None = None,
                    title: str = "Utility after in-painting") -> Section:
    """Turn a :class:`fairvision.audits.curation.inpainting.UtilityResult` into a report section."""
    lvl = f"{result.level:.0%}"
    sec = Section("curation_inpaint_check", title, intro=(
        "For every score column, the paired difference after - before in-painting of each sample: its mean with a "
        f"{lvl} subject-bootstrap interval ({result.n_boot} resamples of subjects), and a two-sided Wilcoxon "
        "signed-rank test of the subjects' mean differences, overall and for each group; p-values are corrected "
        f"({result.correction}) across columns and groups. Groups with fewer than {result.min_subjects} subjects are "
        "reported, not tested (docs/METHODS.md §13.11)."))
    t = result.table
    q = result.quantities()
    sec.metrics("key figures", {"samples compared": int(t.loc[t["attribute"] == "all", "n"].max()),
                                "score columns": len(result.metrics), "significant changes": int(q["n_significant"]),
                                "largest mean decrease": q["largest_loss"]})
    for cond in conditions or []:
        sec.note(describe(cond), "finding" if cond["holds"] else "info")
    if result.subject_col is None:
        sec.note("No subject column: every sample counts as its own subject, so several photos of one person are "
                 "treated as independent (give --subject-col or a sample table with subject_id).", "warning")
    small = t[~t["tested"]]
    if len(small):
        names = sorted({group_text(a, g) for a, g in zip(small["attribute"], small["group"])})
        sec.note(f"Too few subjects to test (fewer than {result.min_subjects}): {', '.join(names)}.", "warning")
    sec.table("utility", t, "Mean paired difference after - before per score column and group, with its interval, "
              "the signed-rank test and the corrected p-value.", highlight="significant")
    het = result.heterogeneity
    if len(het):
        sec.table("heterogeneity", het, "Do the groups of an attribute change differently? Kruskal-Wallis test of the "
                  f"subjects' mean differences across the groups with at least {result.min_subjects} subjects, "
                  f"corrected ({result.correction}) across columns and attributes.", highlight="differs")
    fd = t.assign(label=[m if a == "all" else f"{m}: {group_text(a, g)}"
                         for m, a, g in zip(t["metric"], t["attribute"], t["group"])]).set_index("label")
    sec.figure("differences", plots.forest(fd, title="after - before", xlabel="mean difference (after - before)",
                                           reference=0.0, flag="significant"),
               f"Mean paired difference with its {lvl} interval (red: significant after correction; dashed: no "
               "change).",
               data=t[["metric", "attribute", "group", "estimate", "ci_low", "ci_high"]].to_dict(orient="list"))
    sec.figure("before and after", _paired_plot(result.differences, result.metrics),
               "Each sample's score before (x) and after (y) in-painting; on the diagonal nothing changed "
               f"(at most {MAX_POINTS:,} samples per column are drawn).")
    _utility_findings(sec, result)
    return sec


def _paired_plot(diffs: pd.DataFrame, metrics: list[str]):
    k = len(metrics)
    cols = min(k, 3)
    rows = -(-k // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, m in zip(axes.ravel(), metrics):
        d = diffs[diffs["metric"] == m]
        if len(d) > MAX_POINTS:
            d = d.iloc[np.sort(rng.choice(len(d), MAX_POINTS, replace=False))]
        x, y = d["before"].to_numpy(float), d["after"].to_numpy(float)
        changed = x != y
        ax.scatter(x[~changed], y[~changed], s=6, color="#aaa", label="unchanged")
        ax.scatter(x[changed], y[changed], s=8, color=plots.PALETTE[1], label="changed")
        lo = float(np.nanmin(np.r_[x, y])) if len(x) else 0.0
        hi = float(np.nanmax(np.r_[x, y])) if len(x) else 1.0
        ax.plot([lo, hi], [lo, hi], color="#555", lw=1, ls="--")
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("before")
        ax.set_ylabel("after")
        plots.numeric_ticks(ax.xaxis)
        plots.numeric_ticks(ax.yaxis)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes.ravel()[k:]:
        ax.set_visible(False)
    axes.ravel()[0].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _num3(v: float) -> str:
    return num(v, 3)


def _utility_findings(sec: Section, result) -> None:
    t = result.table
    same = result.differences.groupby("metric")["difference"].apply(lambda d: bool((d == 0).all()))
    for r in t[t["attribute"] == "all"].itertuples(index=False):
        if same.get(r.metric, False):
            sec.finding(f"In-painting left {r.metric} unchanged on every one of the {r.n:,} samples", "info",
                        target="utility", quantity=f"{r.metric}.difference", value=0.0)
            continue
        verdict = "significant" if r.significant else "not significant"
        rel = abs(r.estimate) / abs(r.mean_before) if r.mean_before else None
        sev = "info" if not r.significant else ("high" if rel is not None and rel >= GAP_LARGE else "medium")
        p = f", {p_text(r.pvalue_adjusted)}" if r.pvalue_adjusted == r.pvalue_adjusted else " (not tested)"
        sec.finding(f"In-painting changed {r.metric} by {num(r.estimate, 3)}{ci_text(r.ci_low, r.ci_high, _num3)}; "
                    f"{verdict}{p}", sev, target="utility", quantity=f"{r.metric}.difference", value=r.estimate,
                    ci_low=r.ci_low, ci_high=r.ci_high, pvalue=r.pvalue_adjusted, size=rel)
    groups = t[t["attribute"] != "all"]
    for r in groups[groups["significant"]].itertuples(index=False):
        rel = abs(r.estimate) / abs(r.mean_before) if r.mean_before else None
        het = result.heterogeneity
        this = het[(het["metric"] == r.metric) & (het["attribute"] == r.attribute)] if len(het) else het
        if len(this) and this["differs"].iloc[0]:
            where = f" and the groups of {r.attribute} changed differently (Kruskal-Wallis, " \
                f"{p_text(this['pvalue_adjusted'].iloc[0])})"
        elif len(this) and this["pvalue_adjusted"].iloc[0] == this["pvalue_adjusted"].iloc[0]:
            where = f"; the groups of {r.attribute} did not change significantly differently (Kruskal-Wallis, " \
                f"{p_text(this['pvalue_adjusted'].iloc[0])})"
        else:
            where = ""
        sec.finding(f"For {group_text(r.attribute, r.group)}, in-painting changed {r.metric} by {num(r.estimate, 3)}"
                    f"{ci_text(r.ci_low, r.ci_high, _num3)}; {p_text(r.pvalue_adjusted)}{where}",
                    "high" if rel is not None and rel >= GAP_LARGE else "medium", target="utility",
                    quantity=f"{r.metric}.difference.{r.attribute}={r.group}", value=r.estimate, ci_low=r.ci_low,
                    ci_high=r.ci_high, pvalue=r.pvalue_adjusted, size=rel)

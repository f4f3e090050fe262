"""Report sections of the saliency-cropping benchmark: what was built, and what a cropper kept
(docs/METHODS.md §6.8). No composite or face is shown: the report lists counts and sample ids only.
Who wins by group (Elo ratings and their tests) is the cropping audit's report (docs/METHODS.md §6.9)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.cropping_benchmark import SKIN, CroppingBuild, CroppingRun
from fairvision.report import plots
from fairvision.report.document import Section
from fairvision.report.findings import ci_text, count_of, pct
from fairvision.report.sections.coverage import coverage_section
from fairvision.vision.croppers import aspect_text


def _grouping(attribute: str, options=None) -> str:
    if attribute == SKIN:
        extra = (f" (light if L* >= {options.L_threshold:g}, yellow if h* >= {options.hue_threshold:g} degrees)"
                 if options is not None else "")
        return "Thong et al.'s light/dark x red/yellow cells of the measured skin colour" + extra
    return f"the values of {attribute}"


def build_sections(result: CroppingBuild) -> list[Section]:
    """The sections of a build report: the composites by pair of groups, the images by group, and the coverage
    of the group assignment (and of the composing step when it left composites out)."""
    o = result.options
    q = result.quantities()
    s = Section("cropping_build", "Saliency-cropping benchmark: composites", intro=(
        f"Each composite stacks two face images of two different groups ({_grouping(o.attribute, o)}) at one "
        f"common width ({'the smaller of the two widths' if o.width is None else f'{o.width} px'}), with "
        f"{o.gap} white rows between them; each group of a pair is on top in half of its composites "
        "(docs/METHODS.md §6.8). No image is shown in this report."))
    s.metrics("build_figures", {"images": int(q["n_images"]), "with a group": int(q["n_grouped"]),
                                "left out": int(q["n_left_out"]), "pairs of groups": int(q["n_pairs"]),
                                "composites": int(q["n_composites"]), "per pair": o.per_pair})
    per_group = (result.images["group"].value_counts().reindex(result.categories, fill_value=0)
                 .rename("images").rename_axis("group").to_frame())
    per_group["subjects"] = (result.images.dropna(subset=["group"]).groupby("group")["subject_id"].nunique()
                             .reindex(result.categories, fill_value=0).astype(int))
    s.table("images_by_group", per_group, "Images and people per group")
    s.table("pairs", result.pairs.set_index(["group_a", "group_b"]), "Composites per pair of groups")
    skipped = result.pairs[result.pairs["composites"] == 0]
    if len(skipped):
        s.note(f"{count_of(len(skipped), 'pair')} of groups got no composite: "
               + "; ".join(f"{a} | {b} ({why})" for a, b, why in skipped[["group_a", "group_b", "skipped"]].itertuples(index=False)),
               "warning")
    small = per_group[(per_group["images"] > 0) & (per_group["images"] < o.per_pair)]
    if len(small):
        s.note("Groups with fewer images than composites per pair reuse images within a pair: "
               + ", ".join(f"{g} ({int(n)})" for g, n in small["images"].items()), "warning")
    few = per_group[(per_group["subjects"] > 0) & (per_group["subjects"] < result.min_subjects)]
    if len(few):
        s.finding(f"{count_of(len(few), 'group')} {'has' if len(few) == 1 else 'have'} fewer than "
                  f"{result.min_subjects} people ("
                  + ", ".join(f"{g}: {count_of(int(n), 'person', 'people')}" for g, n in few["subjects"].items())
                  + "): their composites show the same few faces again and again, so 'fairvision audit cropping' "
                  "lists their ratings but does not test them (--min-subjects); add images of these groups to "
                  "compare them", "medium", target="images_by_group")
    s.finding(f"Built {count_of(int(q['n_composites']), 'composite')} for {count_of(int(q['n_pairs']), 'pair')} of "
              f"groups from {int(q['n_grouped']):,} of {int(q['n_images']):,} images", "info",
              target="pairs", quantity="n_composites", value=q["n_composites"])
    out = [s, coverage_section(result.coverage, id="coverage", title="Coverage: images without a group")]
    if result.composing.n_left_out:
        out.append(coverage_section(result.composing, id="coverage_composing", title="Coverage of the composing step"))
    return out


def run_sections(result: CroppingRun) -> list[Section]:
    """The sections of a run report: games per pair of groups, the position bias, and the coverage of the
    cropping step."""
    p = result.position
    allp = p.loc["all"]
    s = Section("cropping_run", "Saliency-cropping benchmark: what the cropper kept", intro=(
        f"The cropper {result.cropper} ran on every composite; a saliency map became a {aspect_text(result.aspect)} "
        "crop centred on its blurred maximum, and the face whose box holds the larger share of the crop is kept "
        "(docs/METHODS.md §6.8). The ratings of the groups are 'fairvision audit cropping' (docs/METHODS.md §6.9)."))
    s.metrics("run_figures", {"composites": result.coverage.n, "games": int(allp["games"]), "kept top": int(allp["top"]),
                              "kept bottom": int(allp["bottom"]), "kept neither": int(allp["none"])})
    s.table("games_by_pair", result.by_pair, "Games per pair of groups: the position kept, and how often each "
                                             "group's face was kept (group_a, group_b)")
    s.table("position", p, "Position bias: games that kept the top, the bottom or neither face, by the top face's "
                           f"group, and the share of decided games that kept the top face ({result.level:.0%} Wilson "
                           "interval)")
    shown = p[np.isfinite(p["top_share"].to_numpy(dtype=float))].rename(columns={"top_share": "estimate"})
    if len(shown):
        s.figure("position_forest", plots.forest(shown, title="Share of decided games that kept the top face",
                                                 xlabel="share kept top", reference=0.5),
                 "Share of decided games that kept the top face, overall and by the top face's group (dashed: 0.5, no "
                 "position bias).", data=shown.reset_index()[["top_group", "estimate", "ci_low", "ci_high"]]
                 .to_dict(orient="list"))
    decided = int(allp["top"] + allp["bottom"])
    if decided:
        share, lo, hi = float(allp["top_share"]), float(allp["ci_low"]), float(allp["ci_high"])
        biased = not lo <= 0.5 <= hi
        s.finding(f"The cropper kept the top face in {pct(share)} of {decided:,} decided games"
                  f"{ci_text(lo, hi, pct)}" + ("; a position bias, balanced out because each group of a pair is "
                                                 "on top in half of its games" if biased else ""),
                  "medium" if biased else "info", target="position", quantity="top_share", value=share, ci_low=lo,
                  ci_high=hi, size=abs(share - 0.5))
    by_mass = result.games["kept_by_mass"]
    if (by_mass != "").any():
        with_map = by_mass != ""
        agree = int((by_mass[with_map] == result.games.loc[with_map, "kept"]).sum())
        s.note(f"The share of saliency mass inside the face boxes picks the same face as the crop in {agree:,} of "
               f"{int(with_map.sum()):,} games with a saliency map (games.csv: top_mass, bottom_mass, kept_by_mass).")
    g = result.games
    minority = np.minimum(g["top_share"].to_numpy(dtype=float), g["bottom_share"].to_numpy(dtype=float))
    both = int((minority > 0).sum())
    if both:
        s.note(f"{count_of(both, 'crop')} of {len(g):,} hold part of both faces (the smaller face's share of the crop: "
               f"median {pct(float(np.median(minority[minority > 0])))}, at most {pct(float(minority.max()))}); the face "
               "with the larger share is kept. A crop that holds much of both faces (a tall --aspect) says little "
               "about which face the cropper prefers.", "warning" if minority.max() >= 0.25 else "info")
    if allp["none"]:
        s.finding(f"{count_of(int(allp['none']), 'game')} kept neither face (a tie of the two shares); they carry no "
                  "winner", "info", target="position", quantity="none_share", value=allp["none"] / max(allp["games"], 1))
    return [s, coverage_section(result.coverage, id="coverage", title="Coverage of the cropping step")]


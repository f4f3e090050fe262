"""Report section of the face-verification audit: TAR at FAR by group with CIs (docs/METHODS.md §6.1).

Turns a :class:`fairvision.audits.verification.VerificationAuditResult` into a
:class:`fairvision.report.Section`.
"""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import describe
from fairvision.report import Section
from fairvision.report import plots

_MAX_FOREST_ROWS = 40


def verification_section(result, *, conditions: list[dict] | None = None,
                         title: str = "Face verification by group") -> Section:
    """Build the report section of a verification audit.

    Parameters
    ----------
    result : VerificationAuditResult
    conditions : list of dict, optional
        Evaluated ``--fail-if`` conditions (from ``evaluate_conditions``).
    title : str
        Section title.
    """
    fars = ", ".join(f"{f:g}" for f in result.fars)
    how = {"group": "each group's own threshold (FHIBE)",
           "global": "one global threshold set at that FAR over all pairs; accuracy is the share of pairs decided "
                     "right at it",
           "eer": "one global threshold at the equal error rate of all pairs (the FAR shown is the EER); accuracy "
                  "is the share of pairs decided right at it"}.get(result.threshold, result.threshold)
    ci = (f"{int(result.level * 100)}% percentile CIs from a bootstrap over subjects ({result.n_boot:,} resamples)"
          if result.n_boot else "no CIs (--n-boot 0)")
    sec = Section(
        "verification", title,
        intro=(f"True accept rate at FAR = {fars} for every group and intersection, with {how}; a pair counts for a "
               f"group when both of its images are in it. {ci}, for TAR and for accuracy (accuracy_ci_low/high). Groups with fewer than {result.min_subjects} subjects "
               "are listed but not compared (docs/METHODS.md §6.1)."),
    )
    first = result.fars[0]
    ov = result.overall[result.overall["far_target"] == first].iloc[0]
    summ = result.summary[result.summary["far_target"] == first]
    sec.metrics("overview", {
        "pairs": result.n_pairs, "genuine": result.n_genuine, "impostor": result.n_impostor,
        "subjects": result.n_subjects, f"TAR @ FAR {first:g}": float(ov["tar"]),
        "accuracy": float(ov["accuracy"]),
        "largest gap": float(summ["difference"].max()) if summ["difference"].notna().any() else float("nan"),
    })
    if conditions:
        failed = [c for c in conditions if c["holds"]]
        sec.note("; ".join(describe(c) for c in conditions), "finding" if failed else "info")
    rule = getattr(result, "pair_rule", None)
    if rule:
        cap = f"at most {rule['max_impostors']:,}" if rule.get("max_impostors") else "all"
        sec.text(f"Pairs built from the sample table: every genuine pair ({rule['n_genuine']:,}) and {cap} of FHIBE's "
                 f"hard impostors ({rule['n_impostor']:,} used: same {rule['pronoun_col']}, {rule['tone_col']} within "
                 f"{rule['max_tone_diff']} level), drawn with seed {rule['seed']}; {rule['n_used']:,} of "
                 f"{rule['n_samples']:,} images have an embedding.")
    for _, r in summ[summ["separated"].fillna(False).astype(bool)].iterrows() if "separated" in summ else []:
        sec.finding(f"Face verification at FAR {first:g}: TAR {r['min']:.3f} for {r['worst_group']} vs {r['max']:.3f} "
                    f"for {r['best_group']} by {r['intersection']}; their CIs do not overlap.", "high",
                    target=f"groups_{r['intersection']}", quantity=f"{r['intersection']}.difference",
                    value=float(r["difference"]), ci_low=r["difference_ci_low"], ci_high=r["difference_ci_high"],
                    topic="verification")
    if summ["difference"].notna().any():
        lead = summ.loc[summ["difference"].idxmax()]
        sec.note(f"Largest gap at FAR {first:g}: {lead['intersection']}: TAR {lead['min']:.3f} for {lead['worst_group']} "
                 f"vs {lead['max']:.3f} for {lead['best_group']} (difference {lead['difference']:.3f}).", "finding")
    sec.table("overall", result.overall, "TAR over all pairs")
    sec.table("summary", result.summary, "Worst and best group per attribute set and FAR, difference with bootstrap CI")
    small = result.groups[result.groups["too_small"] & (result.groups["far_target"] == first)]
    if len(small):
        sec.note(f"{len(small)} groups have fewer than {result.min_subjects} subjects and are too small to judge; they "
                 "are listed with their numbers but not compared.", "warning")
    for inter in result.groups["intersection"].unique():
        tbl = result.groups[(result.groups["intersection"] == inter) & (result.groups["far_target"] == first)]
        fdf = tbl[tbl["tar"].notna()].set_index("group")
        if len(fdf) and inter.count("×") <= 1:
            if len(fdf) > _MAX_FOREST_ROWS:
                fdf = fdf.sort_values("tar").iloc[np.r_[0:_MAX_FOREST_ROWS // 2, -(_MAX_FOREST_ROWS // 2):0]]
            fig = plots.forest(fdf, estimate="tar", low="ci_low", high="ci_high", flag="too_small",
                               title=f"TAR @ FAR {first:g} by {inter}", xlabel="TAR", reference=float(ov["tar"]))
            sec.figure(f"forest_{inter}", fig, f"TAR at FAR {first:g} by {inter} with CIs; red: too small to judge",
                       data=fdf[["tar", "ci_low", "ci_high", "n_subjects"]].reset_index().to_dict("list"))
        sec.table(f"groups_{inter}", result.groups[result.groups["intersection"] == inter],
                  f"TAR by {inter}", max_rows=80, highlight="too_small")
    return sec

"""Report section of the visual question answering probe (docs/METHODS.md §12.3)."""

from __future__ import annotations

import numpy as np

from fairvision.audits.gates import quantity_key
from fairvision.stats.versus_rest import count_flagged
from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.sections.coverage import coverage_section
from fairvision.report.sections.vlm import gate_findings
from fairvision.report.findings import ci_text, count_of, group_text, num, p_text, pct, test_severity, verb

#: what each rate counts, for captions and findings
WHAT = {"response": "response rate", "refusal": "refusal rate", "toxic": "toxic answer rate",
        "gendered": "rate of answers using he/she", "gender_word": "rate of answers naming a gender",
        "misgender": "misgendering rate"}
#: rates drawn as forest plots (where the overall rate is above 0)
PLOTTED = ("toxic", "refusal", "misgender")
MAX_FIGURES = 6


def vlm_vqa_section(result, *, conditions: list[dict] | None = None,
                    title: str = "Visual question answering by group") -> Section:
    """Turn a :class:`fairvision.audits.vlm.vqa.VQAResult` into a report section (docs/METHODS.md §12.3): key
    figures, overall rates, forest plots of the toxic, refusal and misgendering rates, the rates table, pronouns,
    terms, the groups too small to judge, and one finding per flagged rate (the largest ten)."""
    meta = result.meta
    min_subjects = meta.get("min_subjects", 10)
    sec = Section("vlm_vqa", title, intro=(
        f"Every image was asked {meta.get('n_questions')} questions of {len(result.tones)} tones "
        f"({', '.join(result.tones)}); each answer is parsed for a response, a refusal, the pronoun it uses, a "
        "gender word, an extracted term (occupation, reason) and toxic keywords. Rates per group with "
        "subject-bootstrap CIs; each group is compared with the rest by a chi-square test whose variance allows "
        "for the many answers of one subject (Rao-Scott), "
        f"{result.correction}-corrected over all groups, intersections, tones and rates; a group is flagged when "
        f"the adjusted p-value is below {result.alpha:g} and the CI of its difference from the rest excludes 0. "
        f"Groups with fewer than {min_subjects} subjects are listed but not tested (docs/METHODS.md §12.3)."))
    r = result.rates
    small = (r.loc[r["too_small"].astype(bool), ["attribute", "group", "n_samples", "n_subjects"]]
             .drop_duplicates(["attribute", "group"]) if len(r) else r)
    asked = ({"answers": "precomputed"} if meta.get("precomputed") else
             {"asked in this run": meta.get("n_called"), "from the results store": meta.get("n_from_store")})
    n_failed = int(meta.get("n_failed") or 0)
    sec.metrics("key figures", {"samples": meta.get("n_samples"), "subjects": meta.get("n_subjects"),
                                "answers": meta.get("n_answers"), **asked,
                                **({"failed replies": n_failed} if n_failed else {}),
                                "flagged": count_flagged(r),
                                "too small to judge": len(small)})
    gate_findings(sec, conditions)
    if n_failed:
        kinds = ", ".join(f"{k}: {v}" for k, v in (meta.get("failures") or {}).items())
        text = (f"{count_of(n_failed, 'reply', 'replies')} of {n_failed + int(meta.get('n_answers') or 0)} failed "
                f"({kinds}) and {verb(n_failed, 'is', 'are')} left out of every rate: a failed reply is neither an "
                "answer nor a model that stays silent. They are not kept in the results store; a rerun asks them again")
        sec.note(f"{text}. First: {meta.get('first_failure')}", "warning")
        sec.finding(text, "medium", target="key figures", quantity="n_failed", value=n_failed)
    if len(result.overall):
        sec.table("overall", result.overall, "Rates over all answers of each tone, with subject-bootstrap CIs.")
    n_fig = 0
    ov = result.overall.set_index(["tone", "quantity"]) if len(result.overall) else None
    for quant in PLOTTED:
        for tone in result.tones:
            if ov is None or (tone, quant) not in ov.index or not ov.loc[(tone, quant), "estimate"] > 0:
                continue
            if n_fig >= MAX_FIGURES:
                break
            sub = r[(r["tone"] == tone) & (r["quantity"] == quant)]
            if sub.empty:
                continue
            small_mark = np.where(sub["too_small"].astype(bool), " (too small)", "")
            frame = sub.set_index(sub["attribute"] + " = " + sub["group"].astype(str) + small_mark)
            fig = plots.forest(frame, title=f"{WHAT[quant].capitalize()}, {tone} questions", xlabel=WHAT[quant],
                               reference=float(ov.loc[(tone, quant), "estimate"]), flag="flagged")
            sec.figure(f"{quant} {tone}", fig, f"{WHAT[quant].capitalize()} of the {tone} questions per group with "
                       "its CI; the dashed line is the rate over all answers; flagged groups in the second colour; groups "
                       "marked (too small) are shown but not tested.",
                       data=sub[["attribute", "group", "estimate", "ci_low", "ci_high", "flagged"]].to_dict(orient="list"))
            n_fig += 1
    sec.table("rates", r, "Rates per group and tone, group minus rest, tests.", highlight="flagged")
    if len(result.pronouns):
        wide = result.pronouns.pivot_table(index=["attribute", "group", "tone"], columns="pronoun", values="share",
                                           sort=False)
        sec.table("pronouns", wide.reset_index(), "Share of each pronoun among the responses of each group and tone "
                                                  "(the first pronoun an answer uses; none: no pronoun).")
    if len(result.terms):
        sec.table("terms", result.terms, "Most frequent extracted terms (occupations, reasons, crimes: the extracted term of each answer) per "
                                         "group and tone, "
                                         "with NPMI between group and term (-1 never together, 0 independent, 1 always "
                                         "together).")
    if len(small):
        sec.note(f"{count_of(len(small), 'group')} {verb(len(small))} fewer than {min_subjects} subjects: too small to "
                 "judge; their rates are listed with wide intervals but not tested.", "warning")
        sec.table("too_small", small.reset_index(drop=True), "Groups too small to judge (not tested).", max_rows=50)
    sec.note("The questions ask the model to judge people from a photograph, which cannot be done; they are "
             "asked only to reveal the model's biases. A toxic answer is one containing a word of the keyword list "
             "(a short list written for fairvision; pass your own with --toxic-words), so the toxic rate is only as "
             "good as that list.")
    _findings(sec, result)
    return sec


def failed_replies_section(result) -> Section | None:
    """The failed replies of a VQA probe by group (docs/METHODS.md §9.3): the share of replies that failed per group
    of each attribute with Wilson intervals, the test of equal shares, the failure kinds, and a finding; None when
    no reply failed (or the answers were precomputed)."""
    cov = result.coverage
    if cov is None or not cov.n_left_out:
        return None
    sec = coverage_section(cov, id="vlm_vqa-failed-replies", title="Failed replies by group")
    sec.note("Each reply counts once in these tests; several replies of one subject are not independent, so a "
             "failure that hits some subjects' images (a long reply over the byte cap) can look more significant "
             "than it is. A rerun asks the failed questions again.")
    return sec


def _findings(sec: Section, result) -> None:
    r = result.rates
    expect = result.meta.get("expect", {})
    ov = result.overall
    for tone in result.tones:  # a question that should be refused: how often it was, and how often toxic
        if expect.get(tone) != "refusal" or not len(ov):
            continue
        o = ov[ov["tone"] == tone].set_index("quantity")
        if "toxic" in o.index and o.loc["toxic", "estimate"] > 0:
            row = o.loc["toxic"]
            refused = o.loc["refusal", "estimate"] if "refusal" in o.index else np.nan
            sec.finding(f"The model answered the {tone} questions, which it should refuse, with toxic words in "
                        f"{pct(row['estimate'])}{ci_text(row['ci_low'], row['ci_high'], pct)} of answers "
                        f"(refused {pct(refused)})", "medium" if row["estimate"] >= 0.05 else "info",
                        target="overall", quantity=f"toxic_rate.{tone}", value=row["estimate"],
                        ci_low=row["ci_low"], ci_high=row["ci_high"], size=row["estimate"])
    flagged = r[r["flagged"]].copy() if len(r) else r
    if flagged.empty:
        sec.finding(f"No group's answer rates differ from the rest (alpha {result.alpha:g}, {result.correction})",
                    "info", target="rates")
        return
    flagged["size"] = flagged["difference"].abs()
    n_groups = r.groupby("attribute")["group"].nunique()
    mirror = flagged["attribute"].map(n_groups).eq(2) & (flagged["difference"] < 0)
    flagged = flagged[~mirror]  # with two groups, say it once, for the higher one
    for row in flagged.sort_values("size", ascending=False).head(10).itertuples(index=False):
        direction = "higher" if row.difference > 0 else "lower"
        sec.finding(
            f"{group_text(row.attribute, row.group)}: {WHAT.get(row.quantity, row.quantity)} of the {row.tone} "
            f"questions {pct(row.estimate)}{ci_text(row.ci_low, row.ci_high, pct)} is {direction} than the rest "
            f"({pct(row.rest)}; difference {num(row.difference)}{ci_text(row.diff_ci_low, row.diff_ci_high)}, "
            f"{p_text(row.pvalue_adjusted)})",
            test_severity(row.pvalue_adjusted, result.alpha, row.size), target="rates",
            quantity=f"gap.{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.tone}."
                     f"{row.quantity}", value=row.difference,
            ci_low=row.diff_ci_low, ci_high=row.diff_ci_high, pvalue=row.pvalue_adjusted, size=row.size)

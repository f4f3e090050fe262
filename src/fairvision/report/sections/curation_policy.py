"""Report sections of the collection-guideline checks and of known-content matching (docs/METHODS.md §13.8, §13.9).

Images are named by sample id only, never shown.
"""

from __future__ import annotations

from fairvision.audits.gates import describe
from fairvision.report import Section, plots
from fairvision.report.findings import ci_text, count_of, group_text, p_text, pct, verb
from fairvision.report.sections.coverage import coverage_section

#: what each check tests, in the report's words
CHECK_TEXT = {
    "resolution": "megapixels (width x height / 10^6)",
    "exif": "the file carries EXIF metadata",
    "aspect_ratio": "longer side / shorter side",
    "images_per_subject": "images of the subject in the table",
    "time_apart": "hours to the subject's nearest other photo (EXIF DateTimeOriginal or the time column)",
    "subject_consistency": "columns that must agree across a subject's images",
    "annotations": "required annotation columns present and filled",
    "keypoints_in_box": "visible keypoints inside the person box",
    "face_in_person_box": "face box inside the person box (value: pixels over)",
    "cross_subject_duplicate": "no near duplicate under another subject id (value: bits apart)",
}


def policy_sections(result, *, conditions: list[dict] | None = None) -> list[Section]:
    """Turn a :class:`fairvision.audits.curation.policy.PolicyResult` into report sections: the checks, and
    the coverage of the checks by group when groups were given."""
    p = result.policy
    sec = Section("curation_policy", "Collection-guideline checks", intro=(
        f"Every image against the collection policy '{p.name}' ({p.source}): resolution, EXIF, aspect ratio, images "
        "per subject, time between a subject's photos, columns that must agree within a subject, required "
        "annotations and their consistency (keypoints and face box inside the person box), and near duplicates "
        "under two subject ids. A check whose inputs are absent is 'not checked', with the reason, never passed "
        "(docs/METHODS.md §13.8)."))
    s = result.summary
    q = result.quantities()
    sec.metrics("policy key figures", {"images": int(result.params["n_images"]),
                                       "failing a check": int(q["n_policy_failures"]),
                                       "with a check not run": int(q["n_policy_not_checked"]),
                                       "checks": len(s), "checks not run at all": int((s["n_checked"] == 0).sum()),
                                       "duplicates across subjects": int(q["n_cross_subject_duplicates"])})
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    table = s.reset_index()[["check", "limit", "n_checked", "n_failed", "share_failed", "n_not_checked",
                             "not_checked_reason"]]
    sec.text("The checks: " + "; ".join(f"{c}: {CHECK_TEXT.get(c, c)}" for c in s.index) + ".")
    sec.table("policy summary", table, "Per check: the limit, images checked and failing, the share failing of those "
              "checked, and images not checked (with the commonest reason).")
    shown = s[s["n_checked"] > 0]
    if len(shown):
        sec.figure("policy share failing", plots.bar(shown["share_failed"], title="Share of checked images failing",
                                                    ylabel="share failing", horizontal=True),
                   "Share of the checked images failing each check.",
                   data={"check": list(shown.index), "share_failed": shown["share_failed"].tolist()})
    for check in s.index[s["n_checked"] == 0]:
        sec.note(f"{check}: {s.loc[check, 'not_checked_reason']} (no image checked).", "warning")
    fails = result.checks[result.checks["status"] == "fail"]
    if len(fails):
        sec.table("policy failures", fails.drop(columns=["passed"]), "Every failing image and check (the first 200 "
                  "rows here; all in policy_checks.csv).")
    _groups(sec, result)
    d = result.duplicates
    if len(d):
        sec.table("near duplicates by subject", d, "The collection's near-duplicate pairs with their subjects: within "
                  "one subject expected (reported), across subjects flagged.", highlight="cross_subject")
    _findings(sec, result, q)
    out = [sec]
    if result.coverage is not None:
        out.append(coverage_section(result.coverage, id="curation_policy-coverage",
                                    title="Images some collection-guideline check could not be run for, by group"))
    return out


def _groups(sec: Section, result) -> None:
    bg, tests = result.by_group, result.tests
    if not len(bg):
        return
    who = ("Subject-level checks (images per subject, consistency) count subjects." if result.params.get("subjects")
           else f"No subject column ({result.policy.subject_column!r}): n_subjects counts images, each taken as "
                "one person.")
    sec.table("policy by group", bg, f"Share failing each check per group ({int(result.settings.level * 100)}% Wilson "
              f"intervals); groups below {result.settings.min_subjects} subjects are reported, not tested. {who}")
    sec.table("policy group tests", tests, f"Does failing concentrate in a group? Fisher's exact test (two groups) or "
              f"chi-square per check and attribute, {result.settings.correction} correction across all of them.",
              highlight="differs")
    differs = tests[tests["differs"].astype(bool)]
    if len(differs):
        rows = bg.merge(differs[["check", "attribute"]], on=["check", "attribute"])
        fig = rows.assign(estimate=rows["share_failed"])
        fig.index = [f"{c}: {group_text(a, g)}" for c, a, g in zip(rows["check"], rows["attribute"], rows["group"])]
        sec.figure("policy groups that differ", plots.forest(fig, title="Share failing, checks whose groups differ",
                                                             xlabel="share failing"),
                   "Share failing by group for the checks whose shares differ significantly.",
                   data=rows[["check", "attribute", "group", "share_failed", "ci_low", "ci_high"]]
                   .to_dict(orient="list"))


def _findings(sec: Section, result, q: dict) -> None:
    s = result.summary
    for check, row in s[s["n_failed"] > 0].iterrows():
        k, n = int(row["n_failed"]), int(row["n_checked"])
        sev = "high" if check in ("cross_subject_duplicate", "subject_consistency") else "medium"
        sec.finding(f"{count_of(k, 'image')} of {n:,} checked {verb(k, 'fails', 'fail')} the {check} check "
                    f"({CHECK_TEXT.get(check, check)}; limit {row['limit']})", sev, target="policy failures",
                    quantity=f"n_failed_{check}", value=k, size=row["share_failed"])
    tests = result.tests
    for _, t in tests[tests["differs"].astype(bool)].iterrows():
        g = result.by_group[(result.by_group["check"] == t["check"]) & (result.by_group["attribute"] == t["attribute"])
                            & result.by_group["tested"]]
        worst = g.loc[g["share_failed"].idxmax()]
        sec.finding(f"Failing the {t['check']} check concentrates in {group_text(t['attribute'], worst['group'])}: "
                    f"{pct(worst['share_failed'])} {ci_text(worst['ci_low'], worst['ci_high'], pct)}; "
                    f"{p_text(t['pvalue_adjusted'])}", "high", target="policy group tests",
                    quantity=f"n_failed_{t['check']}", value=worst["share_failed"], ci_low=worst["ci_low"],
                    ci_high=worst["ci_high"], pvalue=t["pvalue_adjusted"])
    skipped = list(s.index[s["n_checked"] == 0])
    if skipped:
        sec.finding(f"{count_of(len(skipped), 'check')} could not be run on any image ({', '.join(skipped)}): their "
                    "inputs are not in the table", "info", target="policy summary")
    if not int(q["n_policy_failures"]) and len(s):
        sec.finding(f"Every checked image meets the collection policy '{result.policy.name}'", "info",
                    target="policy summary")


def known_content_section(result) -> Section:
    """Turn a :class:`fairvision.audits.curation.known_content.KnownContentResult` into a report section."""
    sec = Section("curation_known_content", "Known-content matching", intro=(
        "The perceptual hash of every readable image against "
        f"{count_of(result.n_known, 'known hash', 'known hashes')}; a match is a hash at "
        f"most {result.params['hamming']} bits (of 64) away (multi-index Hamming search, docs/METHODS.md §13.9)."))
    m = result.matches
    q = result.quantities()
    sec.metrics("known content key figures", {"images": result.n_images, "hashed": result.n_hashed,
                                              "known hashes": result.n_known,
                                              "images matching": int(q["n_known_matches"]),
                                              "matches": int(q["n_known_match_pairs"])})
    if result.n_hashed < result.n_images:
        sec.note(f"{result.n_images - result.n_hashed:,} unreadable images have no hash and were not matched.",
                 "warning")
    if len(m):
        shown = m.drop(columns=[c for c in ("image_path",) if c in m])
        sec.table("known matches", shown, "Images matching a known hash, with the distance in bits (0: the same "
                  "hash).")
        k = int(q["n_known_matches"])
        sec.finding(f"{count_of(k, 'image')} {verb(k, 'matches', 'match')} a known hash (within "
                    f"{result.params['hamming']} bits)", "high", target="known matches", quantity="n_known_matches",
                    value=k)
    else:
        sec.finding(f"No image matches any of the {result.n_known:,} known hashes", "info",
                    target="known content key figures")
    return sec


def policy_csv(result) -> bytes:
    """``policy_checks.csv``: one row per image and check."""
    return result.checks.to_csv(index=False).encode()


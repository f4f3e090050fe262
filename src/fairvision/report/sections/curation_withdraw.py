"""Report section of a consent withdrawal (docs/METHODS.md §13.5): what went, what replaces it, the groups."""

from __future__ import annotations

from fairvision.groups import group_label
from fairvision.report import Section


def withdraw_section(plan, *, applied: bool, hash_subject: bool = False, title: str = "Consent withdrawal") -> Section:
    """Turn a :class:`fairvision.audits.curation.withdraw.WithdrawalPlan` into a report section.

    With ``hash_subject`` no subject or sample id of the withdrawn subjects appears (as in the log): withdrawn
    sample ids are salted SHA-256 hashes, image rows carry no path. A plan with nothing to do gives a short
    section saying so.
    """
    if plan.nothing_to_do:
        sec = Section("curation_withdraw", title, intro=(
            f"Withdrawal of {len(plan.subjects)} subject(s): nothing to do, the subjects are in none of the files "
            "or the results store (already withdrawn, or never there). Nothing was changed or logged "
            "(docs/METHODS.md §13.5)."))
        sec.metrics("key figures", {"subjects": len(plan.subjects), "images withdrawn": 0, "files changed": 0})
        when = [e.get("time") for e in plan.previous if e.get("time")]
        sec.finding("Nothing to do: the subjects are in none of the files" +
                    (f" (withdrawn {when[-1]})" if when else ""), "info", target="key figures")
        return sec
    state = "applied" if applied else "a dry run: nothing was changed"
    sec = Section("curation_withdraw", title, intro=(
        f"Withdrawal of {len(plan.subjects)} subject(s) ({state}). Every row of the subjects goes from the samples "
        "table, the derived files and the results store in one commit; the audit log records hashes of the "
        "files and images, never the images. Replacements are the pool images that best match the withdrawn "
        "ones on the primary attributes first, then the secondary ones, by an optimal assignment "
        "(docs/METHODS.md §13.5)."))
    frame = plan.to_frame(hash_subject=hash_subject)
    rep = plan.replacement
    sec.metrics("key figures", {
        "subjects": len(plan.subjects),
        "images withdrawn": len(plan.sample_ids),
        "files changed": len(plan.files),
        "rows removed (files)": int(sum(f.rows_removed for f in plan.files)),
        "rows removed (store)": int(sum(plan.store_rows.values())),
        "replacements": 0 if rep is None else int(rep.pairs["sample_id"].notna().sum()),
    })
    sec.table("changes", frame,
              "Every file, store stage and image the withdrawal touches, with row counts and SHA-256 of the "
              "content before and after.")
    if rep is not None:
        sec.table("replacements", plan.pairs_frame(hash_subject=hash_subject), f"Withdrawn image -> chosen pool image ({rep.n_eligible} eligible of "
                                             f"{rep.n_candidates} candidates; match on {', '.join(rep.match)}).")
        short = rep.pairs["sample_id"].isna().sum()
        if short:
            sec.note(f"{short} withdrawn image(s) have no replacement: the pool has too few eligible candidates.",
                     "warning")
        mism = rep.pairs["primary_mismatches"].fillna(0)
        if (mism > 0).any():
            sec.note(f"{int((mism > 0).sum())} replacement(s) differ from the withdrawn image on a primary "
                     "attribute: the pool has no exact match left.", "warning")
    if plan.groups is not None and len(plan.groups):
        g = plan.groups
        sec.table("groups", g, "Images per group before the withdrawal, after removal and after replacement.")
        worst = g["change"].abs().idxmax()
        size = int(g["change"].abs().max())
        if size == 0:  # naming an arbitrary group "1 -> 1" would suggest it was the one that moved
            names = ", ".join(str(n) for n in g.index.names if n is not None)
            sentence = (f"After replacement every group{f' ({names})' if names else ''} has as many images as "
                        "before the withdrawal")
        else:
            sentence = (f"After replacement the largest change of a group's image count is {size} "
                        f"({group_label(worst)}: {int(g.loc[worst, 'before'])} -> "
                        f"{int(g.loc[worst, 'after_replacement'])})")
        sec.finding(sentence, "info" if size <= 1 else "medium", target="groups", quantity="max_group_change",
                    value=size)
    return sec

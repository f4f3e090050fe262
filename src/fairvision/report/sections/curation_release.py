"""Report sections of a privacy-checked release (docs/METHODS.md §13.10).

The report is a curator-side file, written outside the release folder: it lists what was changed (tables,
columns, actions, counts), the k-anonymity of the released attributes (attribute values and group sizes, never
ids), the read-back check and the images left out (counts by reason; their paths are in the curator's
``-left-out.csv`` beside the mapping, not here). No image is shown.
"""

from __future__ import annotations

import pandas as pd

from fairvision.audits.gates import describe
from fairvision.report import Section, plots
from fairvision.report.findings import count_of, verb
from fairvision.report.sections.coverage import coverage_section

#: violating groups shown in the report (the smallest first); the full count is always given
MAX_LISTED = 500


def _min_size_figure(by_set: pd.DataFrame, k: int, unit: str):
    """Smallest group by number of attributes combined; bars below k in red."""
    g = by_set.groupby("n_attributes")["min_size"].min()
    g.index = pd.Index([f"{n} attribute{'s' if n > 1 else ''}" for n in g.index], name="combined")
    return plots.bar(g, title="Smallest group by number of attributes combined", xlabel="",
                     ylabel=f"{unit} in the smallest group", highlight=list(g.to_numpy() < k)), g


def release_section(result, *, conditions: list[dict] | None = None) -> list[Section]:
    """Turn a :class:`fairvision.audits.curation.release.ReleaseResult` into report sections: the release
    (changes, k-anonymity, read-back check) and, when images were released, the coverage of the images."""
    p = result.params
    anon = result.anonymity
    sec = Section("curation_release", "Privacy before release", intro=(
        f"Dates coarsened to the {p['date_precision']}, location columns dropped, ids replaced by keyed pseudonyms "
        f"(HMAC-SHA256), images written as PNGs without metadata (longest side at most {p['max_side']} px), and "
        f"the smallest group of every combination of released attributes counted in {anon.unit} "
        f"(k = {anon.k}). This report is for the curator: keep it with the mapping, outside the release "
        "(docs/METHODS.md §13.10)."))
    q = result.quantities()
    rb = result.readback
    sec.metrics("key figures", {
        "images released": int(q["n_images"]), "images left out": int(q["n_left_out"]),
        "attributes checked": len(p["attributes"]), "smallest group": q["min_group_size"] if len(anon.by_set) else "none",
        f"groups below k = {anon.k}": int(q["n_cells_below_k"]), "values suppressed": int(q["n_suppressed"]),
        "read-back check": "not run" if rb is None else ("passed" if rb.passed else "FAILED")})
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    if rb is not None:
        sec.table("read-back check", rb.checks, "The release folder reopened after writing: each check and how many "
                  "problems it found.", highlight=None)
        if len(rb.problems):
            sec.table("read-back problems", rb.problems, "What the read-back check found (where; never the value).")
        if rb.n_weak_ids:
            sec.note(f"{count_of(rb.n_weak_ids, 'original id')} of fewer than 6 digits {verb(rb.n_weak_ids, 'was', 'were')} "
                     "looked for in file names only (such numbers are ordinary values in tables).", "info")
    sec.table("changes", result.changes, "Every change made, by table and column (changes.csv in the release; no "
              "original values).")
    dates = pd.DataFrame(p["date_columns"], columns=["table", "column", "how"])
    if len(dates):
        sec.table("date columns", dates, "Columns treated as dates: given (--date-col), detected (a date-like name "
                  "and every value a date; with some dates among other values, the others blanked), or left "
                  "unchanged (no value a date, or dates under another name: give --date-col).")
    by_set = anon.by_set
    if len(by_set):
        fig, g = _min_size_figure(by_set, anon.k, anon.unit)
        sec.figure("smallest group", fig, f"Smallest group over all sets of 1, 2, ... released attributes (red: below k = {anon.k}).",
                   data={"combined": g.index.tolist(), "min_size": g.tolist()})
        sec.table("attribute sets", by_set.sort_values(["min_size", "n_attributes"]).reset_index(drop=True),
                  f"Every set of released attributes: its groups, the smallest ({anon.unit}) and those below k.",
                  max_rows=100)
    viol = anon.violations
    if len(viol):
        shown = viol.head(MAX_LISTED)
        cap = f" (the {MAX_LISTED} smallest of {len(viol):,})" if len(viol) > MAX_LISTED else ""
        sec.table("groups below k", shown, f"Combinations of attribute values held by fewer than {anon.k} "
                  f"{anon.unit}{cap}: attribute values and counts only.", max_rows=100)
    if result.anonymity_before is not None:
        b = result.anonymity_before
        sec.note(f"Before suppression: smallest group {b.min_group_size:.0f}, {count_of(b.n_cells_below_k, 'group')} "
                 f"below k = {b.k}; after: smallest {anon.min_group_size:.0f}, {anon.n_cells_below_k} below k.", "info")
    unchecked = [c for t, c, how in dates.itertuples(index=False) if t == "samples" and how != "not dates"
                 and how != "not coarsened" and c not in p["attributes"]]
    if unchecked and p["attributes"]:
        sec.note(f"Dates are not among the attributes checked ({', '.join(unchecked)}); a coarse date can still "
                 "tell people apart (a month of birth): name them with --attr to include them.", "info")
    if not p["attributes"]:
        sec.note("No attribute column is released (only ids, dates and paths): k-anonymity was not checked.", "info")
    _findings(sec, result, q)
    out = [sec]
    if result.coverage is not None:
        out.append(coverage_section(result.coverage, id="release_coverage", title="Images left out of the release, by group"))
    return out


def _findings(sec: Section, result, q: dict) -> None:
    anon = result.anonymity
    rb = result.readback
    if rb is not None and not rb.passed:
        n = len(rb.problems)
        sec.finding(f"The read-back check of the release failed: {count_of(n, 'problem')} (see the table); do not "
                    "publish this release", "high", target="read-back problems", quantity="n_readback_problems", value=n)
    n = anon.n_cells_below_k
    if n:
        worst = anon.violations.iloc[0]
        sec.finding(f"{count_of(n, 'combination')} of released attribute values {verb(n, 'is', 'are')} held by fewer "
                    f"than {anon.k} {anon.unit} (smallest: {worst['attributes']} = {worst['values']}, "
                    f"{int(worst['size'])})", "high", target="groups below k", quantity="n_cells_below_k", value=n)
    elif len(anon.by_set):
        sec.finding(f"Every combination of the released attributes is held by at least {anon.k} {anon.unit} "
                    f"(smallest group {anon.min_group_size:.0f})", "info", target="attribute sets",
                    quantity="min_group_size", value=anon.min_group_size)
    dates = pd.DataFrame(result.params.get("date_columns", []), columns=["table", "column", "how"])
    kept = dates[dates["how"] == "not coarsened"]
    if len(kept):
        cols = ", ".join(f"{t}.{c}" for t, c in zip(kept["table"], kept["column"]))
        sec.finding(f"{count_of(len(kept), 'column')} of dates {verb(len(kept), 'was', 'were')} released at full "
                    f"precision, since {verb(len(kept), 'its', 'their')} name is not date-like ({cols}): give "
                    "--date-col to coarsen, or --drop-col", "medium", target="date columns")
    if int(q["n_left_out"]):
        sec.finding(f"{count_of(int(q['n_left_out']), 'image')} could not be released (unreadable or missing)",
                    "medium", target="key figures", quantity="n_left_out", value=int(q["n_left_out"]))
    if rb is not None and rb.passed:
        sec.finding("The read-back check passed: no metadata, no oversized image, no location column and no "
                    "original id or file name in the release", "info", target="read-back check")

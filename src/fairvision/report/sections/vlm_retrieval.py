"""Report sections of the text-to-image retrieval probe (docs/METHODS.md §12.5): one section per attribute with
NDKL, MaxSkew@k and MinSkew@k, the per-group share, Skew@k and exposure (the blocks of the retrieval audit's
ranking section, docs/METHODS.md §8.5), the queries ranked by NDKL, and the samples left out."""

from __future__ import annotations

import re

from fairvision.report import Section
from fairvision.report.findings import num
from fairvision.report.sections.coverage import coverage_section
from fairvision.report.sections.retrieval import add_ranking_blocks
from fairvision.report.sections.vlm import gate_findings


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(name)).strip("-") or "attribute"


def text_retrieval_sections(result, *, conditions: list[dict] | None = None) -> list[Section]:
    """Turn a :class:`fairvision.audits.vlm.text_retrieval.TextRetrievalResult` into report sections."""
    desired = "the face set's shares" if result.desired == "data" else "equal shares"
    out = []
    for i, (attr, ranking) in enumerate(result.rankings.items()):
        sec = Section(f"vlm-retrieval-{_slug(attr)}", f"Text-to-image retrieval by {attr}", intro=(
            f"{len(result.queries)} neutral text queries each rank the {result.meta.get('n_samples', '')} images of "
            f"the face set by cosine similarity; the people in a query's top {result.k} are compared with {desired} "
            f"of {attr!r} (Berg et al. 2022, debias-vision-lang, after Geyik et al. 2019; docs/METHODS.md §12.5). "
            "NDKL is 0 only when every top-i prefix matches the desired shares; Skew@k = ln(top-k share / desired "
            f"share), and a group absent from a top {result.k} counts as 1/{result.k} of it. Intervals resample the "
            "queries, so they say how much the result depends on the choice of queries."))
        if i == 0:
            gate_findings(sec, conditions)
        add_ranking_blocks(sec, ranking, attr, desired=desired)
        pq = result.per_query[result.per_query["attribute"] == attr].drop(columns="attribute")
        sec.table("queries", pq.sort_values("ndkl", ascending=False).set_index("query"),
                  caption=f"Every query's NDKL, MaxSkew@{result.k} and MinSkew@{result.k} by {attr}, largest NDKL "
                          "first.")
        worst = pq.loc[pq["ndkl"].idxmax()] if len(pq) else None
        if worst is not None and not ranking.groups["flagged"].any():
            sec.finding(f"No {attr} group's share of the top-{result.k} images differs from "
                        f"{desired} (queries' largest NDKL {num(worst['ndkl'])}, for {worst['query']!r})", "info",
                        target="queries", quantity=f"ndkl.{attr}", value=ranking.summary.loc["ndkl", "estimate"])
        sec.note("The queries name no group; which people a model ranks first for them is its association, not a "
                 "fact about the people.")
        out.append(sec)
    if result.coverage is not None and result.coverage.n_left_out:
        out.append(coverage_section(result.coverage, id="vlm-retrieval-coverage",
                                    title="Left out of the text-to-image retrieval probe: samples by group"))
    return out

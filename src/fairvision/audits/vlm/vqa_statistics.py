"""Rates of the parsed answers of the VQA probe by group (docs/METHODS.md §12.3).

Per answer, 0/1 values of each quantity (response, refusal, toxic, gendered, gender word and, with a gender column,
misgendering); per (attribute or intersection, group, tone, quantity) the rate against the rest of the audit with
subject-bootstrap CIs and the subject-level Rao-Scott test (:mod:`fairvision.stats.versus_rest`: the answers of one
subject, three wordings and several images, are not independent); per group and tone the pronouns used and the
most frequent extracted terms with NPMI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.io.validate import require_columns
from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.vqa_parsing import QuestionSet
from fairvision.groups import Intersection, cell_counts
from fairvision.stats.association import npmi
from fairvision.stats.resample import percentile_ci
from fairvision.stats.versus_rest import GroupVsRest, group_vs_rest_pvalue

#: per-answer rates compared between groups (``misgender`` only with a gender column)
QUANTITIES = ("response", "refusal", "toxic", "gendered", "gender_word", "misgender")
PRONOUNS = ("he", "she", "they", "none")
#: columns of :attr:`fairvision.audits.vlm.vqa.VQAResult.rates` (then ``pvalue_adjusted`` and ``flagged``)
RATE_COLUMNS = ["attribute", "k", "group", "tone", "quantity", "n_samples", "n_subjects", "too_small", "n_answers",
                "estimate", "ci_low", "ci_high", "level", "rest", "difference", "diff_ci_low", "diff_ci_high",
                "design_effect", "statistic", "pvalue"]
PRONOUN_COLUMNS = ["attribute", "group", "tone", "pronoun", "count", "share"]
TERM_COLUMNS = ["attribute", "group", "tone", "term", "count", "share", "npmi"]


@dataclass(frozen=True)
class TermOptions:
    """The extracted terms listed per group and tone (docs/METHODS.md §12.3): at most ``top_n`` of them, each
    given at least ``min_term_count`` times over all answers of the tone."""

    top_n: int = 10
    min_term_count: int = 2


@dataclass(frozen=True)
class Answers:
    """Parsed answers sorted by sample row, with each answer's ``row``, its ``tone`` code, and where the answers
    of each sample ``start`` and how many there are (``count``)."""

    table: pd.DataFrame
    row: np.ndarray
    tone: np.ndarray
    start: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, table: pd.DataFrame, n_samples: int, tones: list[str]) -> Answers:
        """Index ``table`` (sorted by its ``_row`` column) over ``n_samples`` sample rows."""
        row = table["_row"].to_numpy(np.int64)
        count = np.bincount(row, minlength=n_samples)
        return cls(table=table, row=row, tone=pd.Categorical(table["tone"], categories=tones).codes.astype(np.int64),
                   start=np.concatenate([[0], np.cumsum(count)[:-1]]), count=count)

    def expand(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Answer positions of member rows: every answer of ``rows[i]``, with ``i``."""
        n = self.count[rows]
        owner = np.repeat(np.arange(len(rows)), n)
        offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        return self.start[rows][owner] + offs, owner


def answer_values(ans: pd.DataFrame, data: pd.DataFrame, questions: QuestionSet, gender_col: str | None, *,
                  source: str) -> dict[str, np.ndarray]:
    """Per-answer values of each quantity (NaN where undefined). With ``gender_col``, adds the columns
    ``expected_pronoun`` and ``misgender`` to ``ans``."""
    pron = ans["pronoun"].to_numpy(object)
    gendered = np.isin(pron, ["he", "she"])
    vals = {"response": ans["responded"].to_numpy(bool).astype(float), "refusal": ans["refused"].to_numpy(float),
            "toxic": ans["toxic"].to_numpy(float), "gendered": gendered.astype(float),
            "gender_word": ans["gender_word"].to_numpy(float)}
    if gender_col is not None:
        require_columns(data, [gender_col], source=source, what="gender column")
        raw = data[gender_col].astype(object).where(data[gender_col].notna(), "")
        expected = np.array([questions.gender_values.get(str(v).strip().lower()) for v in raw], dtype=object)
        exp_ans = expected[ans["_row"].to_numpy()]
        ans["expected_pronoun"] = exp_ans
        known = gendered & pd.notna(exp_ans)
        vals["misgender"] = np.where(known, (pron != exp_ans).astype(float), np.nan)
        ans["misgender"] = vals["misgender"]
    return vals


def subject_matrix(sets: list[Intersection], offsets: np.ndarray, answers: Answers, clusters: np.ndarray,
                   values: np.ndarray, n_tones: int) -> sparse.csr_matrix:
    """One per-subject matrix for :func:`fairvision.stats.versus_rest.group_vs_rest`: group sums, group counts,
    then sums and counts of all answers, per (tone, quantity); the groups of every set one after another
    (``offsets``). ``values`` is ``(n_answers, n_quantities)`` with NaN where undefined."""
    nq = values.shape[1]
    ok = ~np.isnan(values)
    v0 = np.nan_to_num(values)
    tq = n_tones * nq
    gcols = int(offsets[-1]) * tq
    n_clusters = int(clusters.max()) + 1
    ent_r, ent_c, ent_v = [], [], []
    qi = np.arange(nq)
    for s, off in zip(sets, offsets[:-1]):
        pos, owner = answers.expand(s.rows)
        g = off + s.codes[owner]
        cell = ((g * n_tones + answers.tone[pos])[:, None] * nq + qi[None, :]).ravel()
        cl = np.repeat(clusters[answers.row[pos]], nq)
        ent_r += [cl, cl]
        ent_c += [cell, gcols + cell]
        ent_v += [v0[pos].ravel(), ok[pos].ravel().astype(float)]
    allcell = (answers.tone[:, None] * nq + qi[None, :]).ravel()
    clall = np.repeat(clusters[answers.row], nq)
    ent_r += [clall, clall]
    ent_c += [2 * gcols + allcell, 2 * gcols + tq + allcell]
    ent_v += [v0.ravel(), ok.ravel().astype(float)]
    return sparse.csr_matrix((np.concatenate(ent_v), (np.concatenate(ent_r), np.concatenate(ent_c))),
                             shape=(n_clusters, 2 * gcols + 2 * tq))


def rate_rows(sets: list[Intersection], offsets: np.ndarray, gvr: GroupVsRest, clusters: np.ndarray,
              tones: list[str], quantities: list[str], settings: AuditSettings) -> list[dict]:
    """One row of :data:`RATE_COLUMNS` per (set, non-empty group, tone, quantity with answers): answers as
    independent and the subject-level Rao-Scott test (docs/METHODS.md §12.1)."""
    nq = len(quantities)
    rows = []
    for s, off in zip(sets, offsets[:-1]):
        labels = s.display_labels()
        ns, subj = cell_counts(s, clusters)
        small = subj < settings.min_subjects
        for gi in np.flatnonzero(ns > 0):
            g = off + gi
            for t, tone in enumerate(tones):
                for k, quant in enumerate(quantities):
                    c = t * nq + k
                    a, b = gvr.sums[g, c], gvr.counts[g, c]
                    if b <= 0:
                        continue
                    stat, p = group_vs_rest_pvalue(a, b, gvr.all_sums[c] - a, gvr.all_counts[c] - b,
                                                   gvr.statistic[g, c], seed=settings.seed, too_small=bool(small[gi]))
                    rows.append({"attribute": s.name, "k": s.k, "group": labels[gi], "tone": tone, "quantity": quant,
                                 "n_samples": int(ns[gi]), "n_subjects": int(subj[gi]),
                                 "too_small": bool(small[gi]), "n_answers": int(b),
                                 "estimate": gvr.estimate[g, c], "ci_low": gvr.ci_low[g, c],
                                 "ci_high": gvr.ci_high[g, c], "level": settings.level, "rest": gvr.rest[g, c],
                                 "difference": gvr.estimate[g, c] - gvr.rest[g, c],
                                 "diff_ci_low": gvr.diff_ci_low[g, c], "diff_ci_high": gvr.diff_ci_high[g, c],
                                 "design_effect": gvr.design_effect[g, c], "statistic": stat, "pvalue": p})
    return rows


def overall_rates(gvr: GroupVsRest, tones: list[str], quantities: list[str], level: float) -> pd.DataFrame:
    """The rate of each (tone, quantity) over all answers, with its subject-bootstrap interval."""
    nq = len(quantities)
    an = gvr.all_counts
    with np.errstate(invalid="ignore", divide="ignore"):
        overall_est = gvr.all_sums / an
        overall_rep = gvr.all_rep_sums / gvr.all_rep_counts
    olo, ohi = percentile_ci(overall_rep, level)
    return pd.DataFrame([{"tone": tone, "quantity": quant, "n_answers": int(an[t * nq + k]),
                          "estimate": overall_est[t * nq + k], "ci_low": olo[t * nq + k],
                          "ci_high": ohi[t * nq + k], "level": level}
                         for t, tone in enumerate(tones) for k, quant in enumerate(quantities)
                         if an[t * nq + k] > 0])


def pronoun_rows(s: Intersection, answers: Answers, clusters: np.ndarray, tones: list[str]) -> list[dict]:
    """Pronoun counts and shares among the responses of each non-empty group of ``s``, per tone."""
    labels = s.display_labels()
    ns, _ = cell_counts(s, clusters)
    nt = len(tones)
    pos, owner = answers.expand(s.rows)
    gcode = s.codes[owner]
    pcode = pd.Categorical(answers.table["pronoun"].to_numpy(object)[pos], categories=list(PRONOUNS)).codes
    rmask = answers.table["responded"].to_numpy(bool)[pos] & (pcode >= 0)
    pc = np.bincount((gcode[rmask] * nt + answers.tone[pos][rmask]) * len(PRONOUNS) + pcode[rmask],
                     minlength=s.n_cells * nt * len(PRONOUNS)).reshape(s.n_cells, nt, len(PRONOUNS))
    rows = []
    for gi in np.flatnonzero(ns > 0):
        for t, tone in enumerate(tones):
            tot = pc[gi, t].sum()
            for j, pname in enumerate(PRONOUNS):
                rows.append({"attribute": s.name, "group": labels[gi], "tone": tone, "pronoun": pname,
                             "count": int(pc[gi, t, j]), "share": pc[gi, t, j] / tot if tot else np.nan})
    return rows


def term_rows(s: Intersection, answers: Answers, tones: list[str], options: TermOptions) -> list[dict]:
    """The most frequent extracted terms of each group of ``s`` per tone, with their NPMI against the groups
    (terms in alphabetical order: ties in the top list break alphabetically)."""
    labels = s.display_labels()
    pos, owner = answers.expand(s.rows)
    gcode = s.codes[owner]
    terms = answers.table["term"].to_numpy(object)[pos]
    rows = []
    for t, tone in enumerate(tones):
        sel = (answers.tone[pos] == t) & pd.notna(terms)
        if not sel.any():
            continue
        tcode, tuniq = pd.factorize(terms[sel], sort=True)
        nterm = len(tuniq)
        ct = np.bincount(gcode[sel] * nterm + tcode, minlength=s.n_cells * nterm).reshape(s.n_cells, nterm)
        frequent = ct.sum(axis=0) >= options.min_term_count
        ct, tnames = ct[:, frequent], np.asarray(tuniq, dtype=object)[frequent]
        gkeep = np.flatnonzero(ct.sum(axis=1) > 0)
        if not len(gkeep):
            continue
        ct = ct[gkeep]
        tc = pd.DataFrame(ct, index=pd.Index(labels[gkeep], name=s.name), columns=pd.Index(tnames, name="term"))
        nm = npmi(tc.astype(float), s.name, "term").to_numpy()
        for i, gi in enumerate(gkeep):
            cnt = ct[i]
            top = np.argsort(-cnt, kind="stable")[:options.top_n]
            top = top[cnt[top] > 0]
            n_g = int(cnt.sum())
            for j in top:
                rows.append({"attribute": s.name, "group": labels[gi], "tone": tone, "term": tnames[j],
                             "count": int(cnt[j]), "share": cnt[j] / n_g, "npmi": float(nm[i, j])})
    return rows

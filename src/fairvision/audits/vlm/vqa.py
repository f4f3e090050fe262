"""Visual question answering probe of a vision-language model (docs/METHODS.md §12.3).

FHIBE asks BLIP-2 questions of positive, neutral and negative tone about the person in each picture ("why is
this person likeable", "what is this person's occupation", "what crime did this person commit") and finds that
the answers depend on who is pictured: gendered reasons, stereotyped occupations, toxic answers to the negative
question more often for some groups. :func:`audit_vqa` asks the questions (:mod:`fairvision.audits.vlm.vqa_asking`:
any adapter of :mod:`fairvision.vision.vqa`, answers kept in the results store so an interrupted run resumes) or
reads precomputed answers, parses every answer (:mod:`fairvision.audits.vlm.vqa_parsing`: response, refusal,
pronoun, gender word, extracted term, toxic keywords) and compares the rates between groups
(:mod:`fairvision.audits.vlm.vqa_statistics`) with subject-bootstrap CIs and corrected group-vs-rest tests that
allow for the many answers of one subject (Rao-Scott design effect). Groups with fewer than ``min_subjects``
subjects are reported but not tested. Failed replies (over the byte cap, ``content: null``) are left out of every
rate; their share per group is tested like any other drop (:func:`fairvision.audits.coverage.audit_coverage`,
docs/METHODS.md §9.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.audits.vlm.samples import SampleOptions, prepare_samples, subject_clusters
from fairvision.audits.vlm.vqa_asking import ask, failure_summary
from fairvision.audits.vlm.vqa_parsing import QuestionSet, load_questions, load_toxic_words, parse_answers, read_answers
from fairvision.audits.vlm.vqa_statistics import (PRONOUN_COLUMNS, QUANTITIES, RATE_COLUMNS, TERM_COLUMNS, Answers,
                                                  TermOptions, answer_values, overall_rates, pronoun_rows, rate_rows,
                                                  subject_matrix, term_rows)
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.groups import intersections
from fairvision.io.store import ResultsStore
from fairvision.stats.versus_rest import adjust_group_tests, count_flagged, flag_differences, group_vs_rest
from fairvision.vision.vqa import CallableVQA


@dataclass
class VQAResult(SettingsView):
    """Result of :func:`audit_vqa` (docs/METHODS.md §12.3).

    ``answers``: one row per (sample, question) with the parsed fields. ``rates``: one row per (attribute,
    group, tone, quantity) with ``n_samples``, ``n_subjects``, ``n_answers``, ``estimate``, ``ci_low``,
    ``ci_high``, ``level``, ``rest``, ``difference`` (group minus rest) with ``diff_ci_low`` / ``diff_ci_high``,
    ``design_effect``, ``statistic``, ``pvalue``, ``pvalue_adjusted``, ``flagged``; ``k`` is the number of
    attributes of the set (intersections are named ``"a × b"`` with groups ``"x × y"``) and ``too_small`` marks
    groups with fewer than ``min_subjects`` subjects (reported, not tested, never flagged). ``overall``: the rate of each (tone, quantity)
    over all answers. ``pronouns``: pronoun counts and shares per group and tone (among responses). ``terms``:
    the most frequent extracted terms per group and tone with NPMI. ``meta`` counts the failed replies
    (``n_failed``, ``failures`` by kind, ``first_failure``): they are not in ``answers`` nor in any rate.
    ``coverage``: when the model was asked, the share of replies that failed per group of each attribute, tested,
    with the failure kinds as reasons (docs/METHODS.md §9.3); None for precomputed answers.
    """

    answers: pd.DataFrame
    rates: pd.DataFrame
    overall: pd.DataFrame
    pronouns: pd.DataFrame
    terms: pd.DataFrame
    tones: list[str]
    settings: AuditSettings
    meta: dict = field(default_factory=dict)
    coverage: Coverage | None = None

    def to_frame(self) -> pd.DataFrame:
        return self.rates

    def quantities(self) -> dict[str, float]:
        """Names for ``--fail-if``: ``n_flagged``, ``n_failed`` (failed replies), ``n_too_small`` (groups), ``max_gap``, ``max_<quantity>_gap``
        (``max_toxic_gap``, ``max_refusal_gap``, ...; the maxima over groups large enough to judge, NaN when
        none was: a gate on a NaN stops with an error),
        ``<quantity>_rate.<tone>`` (over all answers of a tone), ``<quantity>_rate.<attr>.<group>.<tone>`` and
        ``gap.<attr>.<group>.<tone>.<quantity>``; an intersection is ``<a>+<b>`` with groups ``<x>+<y>``."""
        r = self.rates
        judged = r[~r["too_small"].astype(bool)] if len(r) else r
        q: dict[str, float] = {
            "n_flagged": float(count_flagged(r)), "n_failed": float(self.meta.get("n_failed", 0)),
            "n_too_small": float(len(r.loc[r["too_small"].astype(bool), ["attribute", "group"]].drop_duplicates()))
            if len(r) else 0.0,
            "max_gap": float(judged["difference"].abs().max()) if judged["difference"].notna().any() else np.nan}
        for name in QUANTITIES:
            sub = judged.loc[judged["quantity"] == name, "difference"].abs()
            q[f"max_{name}_gap"] = float(sub.max()) if sub.notna().any() else np.nan
        for row in self.overall.itertuples(index=False):
            q[f"{row.quantity}_rate.{row.tone}"] = float(row.estimate)
        for row in r.itertuples(index=False):
            key = f"{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.tone}"
            q[f"{row.quantity}_rate.{key}"] = float(row.estimate)
            q[f"gap.{key}.{row.quantity}"] = float(row.difference)
        return q


def audit_vqa(
    data: pd.DataFrame,
    answerer=None,
    questions: QuestionSet | str | Path | None = None,
    attrs: list[str] | None = None,
    *,
    answers=None,
    toxic_words: list[str] | str | Path | None = None,
    samples: SampleOptions | None = None,
    gender_col: str | None = None,
    max_k: int = 1,
    store: ResultsStore | str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    terms: TermOptions | None = None,
    settings: AuditSettings | None = None,
) -> VQAResult:
    """Visual question answering probe: answer rates by group (docs/METHODS.md §12.3).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: the id column, ``image_path`` (when asking), optional subject column, the attributes and
        optional ``gender_col``.
    answerer : adapter, optional
        A :mod:`fairvision.vision.vqa` adapter, or any callable ``fn(image, question) -> str`` (wrapped in
        :class:`fairvision.vision.vqa.CallableVQA`). Not needed with ``answers``.
    questions : QuestionSet or path, optional
        Question sets and parsing patterns (default the bundled ``questions.toml``).
    attrs : list of str
        Group attributes.
    answers : path-like or DataFrame, optional
        Precomputed answers (``sample_id``, ``question_id``, ``answer``) instead of asking.
    toxic_words : list of str or path, optional
        Keyword list (default the bundled ``toxic_words.txt``).
    samples : SampleOptions, optional
        Id and subject columns, attribute schema and the rule for empty attribute cells (``missing``: ``"error"``
        by default, ``"drop"`` leaves the rows out, and they are not asked, ``"keep"`` makes a group
        ``(missing)``).
    gender_col : str, optional
        Column of each person's pronouns or gender (values mapped by ``[parsing.gender_values]``): adds the
        misgendering rate.
    max_k : int
        Largest intersection size: 1 (default) each attribute on its own, 2 also every pair of attributes, ...
        Intersections come from :func:`fairvision.groups.intersections` and are tested and corrected together with
        the single attributes.
    store, progress
        See :func:`fairvision.audits.vlm.vqa_asking.ask`.
    terms : TermOptions, optional
        Extracted terms listed per group (``top_n``), and the fewest answers a term needs overall to be listed
        (``min_term_count``).
    settings : AuditSettings, optional
        ``min_subjects`` (smaller groups and intersections are reported with their rates and CIs but not tested
        or flagged; FHIBE: 10), the subject bootstrap's ``n_boot``, ``level`` and ``seed``, ``correction`` at
        ``alpha``, and ``workers`` (questions in flight at once).

    Returns
    -------
    VQAResult
    """
    settings = settings or DEFAULT_SETTINGS
    settings.require_bootstrap("the group differences are tested with bootstrap replicates")
    samples = samples or SampleOptions()
    terms = terms or TermOptions()
    qs = questions if isinstance(questions, QuestionSet) else load_questions(questions)
    words = toxic_words if isinstance(toxic_words, list) else load_toxic_words(toxic_words)
    if not attrs:
        raise ParameterError("attrs", "is empty: give at least one attribute")
    data, schema, source, n_rows = prepare_samples(data, attrs, samples, max_k)
    clusters, subject_col = subject_clusters(data, samples.subject_col, source)
    if answers is not None:
        ans, n_called = read_answers(answers, qs), 0
        ans["from_store"] = False
    else:
        if answerer is None:
            raise FairvisionError("give an answerer (a VQA adapter) or precomputed answers")
        if not hasattr(answerer, "answer"):
            answerer = CallableVQA(answerer)
        ans, n_called = ask(data, answerer, qs, id_col=samples.id_col, subject_col=subject_col, store=store,
                            progress=progress, settings=settings)
    failures = failure_summary(ans)
    ans = _answers_of_samples(ans, data, samples.id_col)
    coverage = None
    if "failure" in ans.columns:  # a failed reply is neither an answer nor silence: left out of every rate
        failed = ans["failure"].notna().to_numpy()
        if failed.all():
            kinds = ", ".join(f"{k}: {v}" for k, v in failures["failures"].items())
            raise FairvisionError(f"every reply failed ({failures['n_failed']}; {kinds}); the first: "
                                  f"{failures['first_failure']}")
        coverage = reply_coverage(ans, data, attrs, schema, settings)
        ans = ans[~failed].drop(columns=["failure"])
    ans = parse_answers(ans, qs, words)
    ans = ans.sort_values("_row", kind="stable").reset_index(drop=True)
    vals = answer_values(ans, data, qs, gender_col, source=source)
    quantities = [k for k in QUANTITIES if k in vals]
    tones = qs.tones
    index = Answers.of(ans, len(data), tones)

    sets = intersections(data, attrs, max_k=max_k, schema=schema, source=source)
    offsets = np.cumsum([0] + [s.n_cells for s in sets])
    mat = subject_matrix(sets, offsets, index, clusters, np.stack([vals[k] for k in quantities], axis=1), len(tones))
    # group rates, the rest's, subject-bootstrap CIs and the subject-level test: answers of one subject (three
    # wordings, several images) are not independent
    gvr = group_vs_rest(mat, int(offsets[-1]), len(tones) * len(quantities), n_boot=settings.n_boot,
                        seed=settings.seed, level=settings.level)
    overall = overall_rates(gvr, tones, quantities, settings.level)
    rows = rate_rows(sets, offsets, gvr, clusters, tones, quantities, settings)
    pron_rows, top_terms = [], []
    for s in sets:
        pron_rows += pronoun_rows(s, index, clusters, tones)
        top_terms += term_rows(s, index, tones, terms)
    # two groups: "A vs rest" and "B vs rest" are one test, counted once in the correction (docs/METHODS.md §12.1)
    rates = adjust_group_tests(pd.DataFrame(rows, columns=RATE_COLUMNS), ["tone", "quantity"], settings.correction)
    rates["flagged"] = flag_differences(rates, settings.alpha).astype(bool)
    return VQAResult(answers=ans.drop(columns=["_row"]), rates=rates, overall=overall,
                     pronouns=pd.DataFrame(pron_rows, columns=PRONOUN_COLUMNS),
                     terms=pd.DataFrame(top_terms, columns=TERM_COLUMNS),
                     tones=tones, settings=settings,
                     meta={"n_samples": len(data), "n_dropped": n_rows - len(data), "missing": samples.missing,
                           "n_subjects": int(clusters.max()) + 1, "n_answers": len(ans),
                           "n_questions": len(qs.questions), "n_called": n_called, "precomputed": answers is not None,
                           "n_from_store": int(ans["from_store"].sum()), "n_boot": settings.n_boot, **failures,
                           "quantities": quantities, "max_k": int(max_k), "min_subjects": int(settings.min_subjects),
                           "expect": dict(zip(qs.questions["tone"], qs.questions["expect"])),
                           "questions": qs.source, "signature": getattr(answerer, "signature", None)},
                     coverage=coverage)


def reply_coverage(ans: pd.DataFrame, data: pd.DataFrame, attrs: list[str], schema,
                   settings: AuditSettings | None = None) -> Coverage:
    """The share of replies that failed per group of each attribute (docs/METHODS.md §9.3).

    Parameters
    ----------
    ans : pandas.DataFrame
        One row per reply with ``_row`` (the sample's row of ``data``) and ``failure`` (None for an answer, else
        the kind of failure: the reason counted).
    data : pandas.DataFrame
        The sample table with the attribute columns.
    attrs : list of str
        The probe's attributes (each tested on its own).
    schema : Schema
        The schema the probe's groups come from.
    settings : AuditSettings, optional
        ``level``, ``correction`` (over the attributes) and ``alpha``.

    Returns
    -------
    Coverage
        Step ``"VQA reply"``, unit ``"replies"``. Replies are counted as independent: the test does not allow
        for the several replies of one subject.
    """
    rows = ans["_row"].to_numpy()
    table = data.iloc[rows].reset_index(drop=True)
    table.attrs = {**data.attrs}
    failure = ans["failure"].to_numpy(dtype=object)
    return audit_coverage(table, pd.isna(failure), list(dict.fromkeys(attrs)), schema=schema,
                          step="VQA reply", settings=settings, reasons=failure, unit="replies")


def _answers_of_samples(ans: pd.DataFrame, data: pd.DataFrame, id_col: str) -> pd.DataFrame:
    """The answers of the samples of ``data`` with each one's sample row (``_row``); a sample without an answer
    is an error, answers of other samples are left out."""
    row_of = pd.Index(data[id_col].astype(str)).get_indexer(ans["sample_id"])
    have = set(ans["sample_id"])
    missing = [s for s in data[id_col].astype(str) if s not in have]
    if missing:
        raise InputFileError(f"answers: no answer for {id_col} {missing[0]!r}"
                             + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "") + " of the sample table")
    ans = ans[row_of >= 0].copy()
    ans["_row"] = row_of[row_of >= 0]
    return ans

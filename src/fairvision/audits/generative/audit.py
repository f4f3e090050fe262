"""The generative audit: generate, assess, score (BiasPainter; docs/METHODS.md §10).

:func:`audit_generative` runs a spec end to end: every generator edits every
seed photo with every neutral prompt (resumable), every seed and output is
assessed, and the signed changes become word, topic and model scores per
property with bootstrap CIs and corrected paired tests, pair counts above the
spec's thresholds, the top words per property and direction, the outputs
whose face was lost, and the skin colour distribution of the outputs against
the seeds (Thong et al. Table 2, via :func:`fairvision.audits.skin.audit_skin_comparison`).
Failed generations are counted by cause and group (prompt topic, a seed's known
gender) with :func:`fairvision.audits.coverage.audit_coverage`; a generator none of
whose outputs could be made stops the audit with
:class:`~fairvision.audits.generative.failures.GenerationFailed`. A built-in editor's
planted shifts are kept in ``settings["planted"]``: its run is a demonstration.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.generative.assessors import active_parts, assess_images, pair_changes
from fairvision.audits.generative.failures import GenerationFailed, most_common_cause
from fairvision.audits.generative.generators import FAILURES, generate, near_duplicates, slug
from fairvision.audits.generative.spec import GenerativeSpec
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.audits.skin import SkinComparison, audit_skin_comparison
from fairvision.errors import FairvisionError
from fairvision.io.store import ResultsStore
from fairvision.stats.metamorphic import metamorphic_scores
from fairvision.vision.age_gender import check_available

#: scored properties and their paired test (docs/METHODS.md §10.3)
PROPERTY_TESTS = {"skin_L": "wilcoxon", "skin_hue": "wilcoxon", "skin_ita": "wilcoxon", "skin_gray": "wilcoxon",
                  "age": "wilcoxon", "gender": "sign"}
PROPERTY_UNITS = {"skin_L": "L*", "skin_hue": "degrees", "skin_ita": "degrees", "skin_gray": "grey levels",
                  "age": "years", "gender": "share flipped (male +)"}


@dataclass
class GenerativeResult:
    """Everything the generative audit found.

    Attributes
    ----------
    records : DataFrame
        One generation record per requested output (seed, prompt, generation
        seed, parameters, content hash, ``ok`` and the ``reason`` of a failure).
    images : DataFrame
        Per-image measurements of seeds and outputs (no descriptors;
        ``from_store``: read from the results store).
    pairs : DataFrame
        Per output: the signed changes (:func:`~fairvision.audits.generative.assessors.pair_changes`).
    words : DataFrame
        Index ``(generator, property, word)``: ``topic``, ``n``, ``estimate``,
        ``ci_low``, ``ci_high``, ``level``, ``statistic``, ``pvalue``,
        ``pvalue_adjusted``, ``n_nonzero``, ``flagged`` and ``direction``.
    topics, model : DataFrame
        Mean absolute word score per ``(generator, property, topic)`` and per
        ``(generator, property)`` with CIs.
    thresholds : DataFrame
        Index ``(generator, property, threshold)``: ``n_pairs``,
        ``n_flagged`` (|change| >= threshold), ``share``.
    top_words : DataFrame
        The ``top`` words per ``(generator, property, direction)`` by word score.
    face_lost : DataFrame
        Index ``(generator, word)``: ``n_outputs``, ``n_face_lost``, ``share``.
    distribution : dict
        generator -> :class:`~fairvision.audits.skin.SkinComparison` (seeds vs outputs) or None.
    settings : dict
        The score settings; ``settings["assessments"]`` counts per-image
        assessor results ``computed`` in this run and read ``from_store``, by
        assessor (``skin``, ``age_gender``, ``identity``);
        ``settings["planted"]``: built-in editor name -> the shifts its spec
        planted (word -> ``{"L": dL, "h": dh}``), a demonstration, not a model.
    coverage : dict
        generator -> :class:`~fairvision.audits.coverage.Coverage` of its
        generation (by prompt topic and a seed's known gender, reasons = the
        failure causes), for generators with failed outputs only.
    """

    name: str
    generators: list
    records: pd.DataFrame
    images: pd.DataFrame
    pairs: pd.DataFrame
    words: pd.DataFrame
    topics: pd.DataFrame
    model: pd.DataFrame
    thresholds: pd.DataFrame
    top_words: pd.DataFrame
    face_lost: pd.DataFrame
    distribution: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    coverage: dict = field(default_factory=dict)

    @property
    def planted(self) -> dict:
        """Built-in editor name -> the shifts planted by its spec (empty when no generator is the built-in editor)."""
        return self.settings.get("planted", {})

    def n_assessed(self) -> int:
        """Per-image assessor results computed in this run (0 when the results store had them all)."""
        return int(sum(self.settings.get("assessments", {}).get("computed", {}).values()))

    def to_frame(self) -> pd.DataFrame:
        return self.words

    def flagged(self, prop: str | None = None) -> pd.DataFrame:
        """Flagged words (all properties, or one)."""
        w = self.words[self.words["flagged"]]
        return w if prop is None else w.xs(prop, level="property", drop_level=False)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §10.4).

        ``max_abs_word_<property>``, ``model_<property>``,
        ``n_flagged_words_<property>`` (over all generators; the same prefixed
        with ``<generator>.`` per generator), ``n_flagged_words``,
        ``max_abs_word_skin`` (= ``max_abs_word_skin_L``), ``face_lost_share``,
        ``n_failed``.
        """
        q: dict[str, float] = {}

        def fill(prefix: str, words: pd.DataFrame, model: pd.DataFrame, pairs: pd.DataFrame, records: pd.DataFrame):
            for prop in PROPERTY_TESTS:
                w = words[words.index.get_level_values("property") == prop]
                est = w["estimate"].abs()
                q[f"{prefix}max_abs_word_{prop}"] = float(est.max()) if est.notna().any() else float("nan")
                q[f"{prefix}n_flagged_words_{prop}"] = float(w["flagged"].sum())
                m = model[model.index.get_level_values("property") == prop]["estimate"]
                q[f"{prefix}model_{prop}"] = float(m.max()) if m.notna().any() else float("nan")
            q[f"{prefix}max_abs_word_skin"] = q[f"{prefix}max_abs_word_skin_L"]
            q[f"{prefix}n_flagged_words"] = float(words["flagged"].sum())
            made = pairs["ok"].astype(bool)
            q[f"{prefix}face_lost_share"] = float(pairs.loc[made, "face_lost"].mean()) if made.any() else float("nan")
            q[f"{prefix}n_failed"] = float((~records["ok"].astype(bool)).sum())

        fill("", self.words, self.model, self.pairs, self.records)
        if len(self.generators) > 1:
            for g in self.generators:
                fill(f"{g}.", self.words.xs(g, level="generator", drop_level=False),
                     self.model.xs(g, level="generator", drop_level=False),
                     self.pairs[self.pairs["generator"] == g], self.records[self.records["generator"] == g])
        return q


def _threshold_counts(pairs: pd.DataFrame, thresholds: dict) -> pd.DataFrame:
    rows = []
    for g, gp in pairs.groupby("generator", sort=False):
        for prop, ts in thresholds.items():
            if prop not in gp.columns:
                continue
            v = gp[prop].to_numpy(float)
            v = np.abs(v[np.isfinite(v)])
            for t in ts:
                k = int((v >= float(t)).sum())
                rows.append({"generator": g, "property": prop, "threshold": float(t), "n_pairs": int(v.size),
                             "n_flagged": k, "share": k / v.size if v.size else float("nan")})
    cols = ["generator", "property", "threshold", "n_pairs", "n_flagged", "share"]
    return pd.DataFrame(rows, columns=cols).set_index(["generator", "property", "threshold"])


def _top_words(words: pd.DataFrame, top: int) -> pd.DataFrame:
    rows = []
    for (g, prop), w in words.groupby(level=["generator", "property"], sort=False):
        w = w.droplevel(["generator", "property"]).dropna(subset=["estimate"])
        for direction, part in (("increase", w[w["estimate"] > 0].sort_values("estimate", ascending=False)),
                                ("decrease", w[w["estimate"] < 0].sort_values("estimate"))):
            for rank, (word, r) in enumerate(part.head(int(top)).iterrows(), 1):
                rows.append({"generator": g, "property": prop, "direction": direction, "rank": rank, "word": word,
                             "topic": r["topic"], "estimate": r["estimate"], "ci_low": r["ci_low"],
                             "ci_high": r["ci_high"], "pvalue_adjusted": r["pvalue_adjusted"], "flagged": r["flagged"]})
    cols = ["generator", "property", "direction", "rank", "word", "topic", "estimate", "ci_low", "ci_high",
            "pvalue_adjusted", "flagged"]
    return pd.DataFrame(rows, columns=cols).set_index(["generator", "property", "direction", "rank"])


def score_pairs(pairs: pd.DataFrame, *, min_effect: dict, settings: AuditSettings | None = None,
                properties=None, progress: Callable[[int, int], None] | None = None
                ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Word, topic and model scores of every property and generator (docs/METHODS.md §10.2-§10.4).

    A word is ``flagged`` when its corrected p-value is below ``alpha`` and
    its absolute score reaches ``min_effect[property]``; ``direction`` is
    ``increase`` / ``decrease`` (sign of the word score).

    ``settings`` (:class:`~fairvision.audits.settings.AuditSettings`, optional) uses ``correction``, ``alpha``,
    ``n_boot``, ``level`` and ``seed``. ``progress(done, total)`` after each generator and property.
    """
    settings = settings or DEFAULT_SETTINGS
    words, topics, model = [], [], []
    props = [p for p in (properties or PROPERTY_TESTS) if p in pairs.columns]
    total = pairs["generator"].nunique() * len(props)
    done = 0
    for g, gp in pairs.groupby("generator", sort=False):
        for prop in props:
            done += 1
            if progress is not None:
                progress(done, total)
            if gp[prop].notna().sum() == 0:
                continue
            sc = metamorphic_scores(gp, value=prop, word="word", unit="seed_id", topic="topic",
                                    test=PROPERTY_TESTS[prop], n_boot=settings.n_boot, level=settings.level,
                                    seed=settings.seed, correction=settings.correction)
            w = sc.words.copy()
            w["flagged"] = ((w["pvalue_adjusted"] < settings.alpha)
                            & (w["estimate"].abs() >= float(min_effect.get(prop, 0.0))))
            w["direction"] = np.where(w["estimate"] > 0, "increase", np.where(w["estimate"] < 0, "decrease", "none"))
            words.append(pd.concat({(g, prop): w}, names=["generator", "property"]))
            topics.append(pd.concat({(g, prop): sc.topics}, names=["generator", "property"]))
            model.append(pd.concat({(g, prop): sc.model.reset_index(drop=True)},
                                   names=["generator", "property"]).droplevel(-1))
    if not words:
        raise FairvisionError("no output could be assessed, so there is nothing to score")
    return pd.concat(words), pd.concat(topics), pd.concat(model)


def audit_generative(
    spec: GenerativeSpec,
    *,
    settings: AuditSettings | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    store: ResultsStore | str | os.PathLike | None = None,
    stages: Callable[[str], None] | None = None,
) -> GenerativeResult:
    """Run a generative audit spec end to end (docs/METHODS.md §10).

    Parameters
    ----------
    spec : GenerativeSpec
        From :func:`fairvision.audits.generative.spec.load_spec`.
    settings : AuditSettings, optional
        Uses ``engine``, ``address`` and ``workers`` (default: one local
        worker) for the parallel per-image work: generation of the built-in
        editor and folder generators, and assessment; a generator's own
        ``workers`` key wins for generation (default 1 for ``callable`` and
        ``http``). The statistics come from the spec's ``[scores]``
        (:attr:`~fairvision.audits.generative.spec.GenerativeSpec.settings`).
    progress : callable, optional
        ``progress(stage, done, total)`` with stage ``generate:<name>``, ``assess`` or ``score``.
    store : ResultsStore or path, optional
        Results store (:class:`fairvision.io.store.ResultsStore`, or its
        folder): per-image assessments of seeds and outputs already made with
        the same assessor settings and code are read from it, new ones are
        appended (stages ``generative_skin``, ``generative_age_gender``,
        ``generative_identity``; docs/METHODS.md §10.1). None (default):
        neither read nor write one.
    stages : callable, optional
        ``stages(line)`` once per finished stage (each generator's generation, the assessment, the scoring):
        what was done, how much failed and the seconds it took, for a log.

    Returns
    -------
    GenerativeResult

    Raises
    ------
    GenerationFailed
        Every output of a generator failed: the most common cause, how many of how many, and the failures
        table written beside the generator's manifest (``workdir/<generator>/failures.csv``).
    FairvisionError
        The default age/gender assessor is asked for but not installed (checked before any work).
    """
    settings = spec.run_settings(settings or DEFAULT_SETTINGS)
    clock = [time.perf_counter()]

    def say(line: str) -> None:  # a finished stage: its line, with the seconds since the previous one
        now = time.perf_counter()
        if stages is not None:
            stages(f"{line} ({now - clock[0]:.1f} s)")
        clock[0] = now

    base = spec.path.resolve().parent
    a = spec.assessors
    options = {"skin": bool(a.get("skin", True)), "skin_method": a.get("skin_method", "mean"),
               "mask_method": a.get("mask_method", "mediapipe"), "identity": bool(a.get("identity", False)),
               "age_gender": a.get("age_gender", "none") or "none", "base": str(base)}
    if options["age_gender"] == "builtin":
        try:
            check_available()
        except FairvisionError as exc:
            raise FairvisionError(f'{spec.path}: [assessors] age_gender = "builtin": {exc}; or set age_gender = '
                                  '"none"') from None
    recs = []
    for cfg in spec.generators:
        gw = int(cfg.get("workers", settings.workers if cfg["kind"] in ("builtin", "folder") else 1))
        cb = (lambda d, t, _n=cfg["name"]: progress(f"generate:{_n}", d, t)) if progress else None
        rec = generate(spec.seeds, spec.prompts, cfg, spec.workdir, base=base,
                       settings=settings.replace(workers=max(1, gw)), progress=cb)
        say(generation_line(cfg["name"], rec))
        if len(rec) and not rec["ok"].astype(bool).any():
            raise GenerationFailed(cfg["name"], rec, str(spec.workdir / slug(cfg["name"]) / FAILURES))
        recs.append(rec)
    records = pd.concat(recs, ignore_index=True)
    paths = list(spec.seeds["image_path"].astype(str)) + list(records.loc[records["ok"].astype(bool), "output_path"])
    cb = (lambda d, t: progress("assess", d, t)) if progress else None
    sample_ids = dict(zip(spec.seeds["image_path"].astype(str), spec.seeds["sample_id"].astype(str)))
    images = assess_images(paths, options, settings=settings, progress=cb, store=store, sample_ids=sample_ids)
    say(assessment_line(images, options))
    pairs = pd.concat([pair_changes(r, spec.seeds, images) for r in recs], ignore_index=True)
    cb = (lambda d, t: progress("score", d, t)) if progress else None
    try:
        words, topics, model = score_pairs(pairs, min_effect=spec.min_effect, settings=settings, progress=cb)
    except FairvisionError as exc:  # nothing assessed: say what the assessment found
        raise FairvisionError(f"{exc}; {assessment_line(images, options)}") from None
    say(f"scoring: {words.index.get_level_values('word').nunique():,} words x "
        f"{words.index.get_level_values('property').nunique()} properties scored, "
        f"{int(words['flagged'].sum()):,} word-property pairs flagged")
    distribution, notes = _skin_distributions(spec, records, images, settings)
    notes[:0] = near_duplicate_notes(spec.seeds["sample_id"], spec.prompts["word"])
    coverage = generation_coverage(records, spec.seeds, settings)
    result_settings = {
        "alpha": settings.alpha, "level": settings.level, "n_boot": settings.n_boot, "correction": settings.correction,
        "min_effect": dict(spec.min_effect), "thresholds": {k: list(v) for k, v in spec.thresholds.items()},
        "assessors": options, "n_seeds": int(len(spec.seeds)),
        "seed_paths": dict(zip(spec.seeds["sample_id"].astype(str), spec.seeds["image_path"].astype(str))),
        "n_words": int(len(spec.prompts)), "topics": list(dict.fromkeys(spec.prompts["topic"])),
        "assessments": images.attrs.get("assessments", {}),
        "planted": {str(c["name"]): {str(w): dict(v) for w, v in dict(c.get("shifts") or {}).items()}
                    for c in spec.generators if c["kind"] == "builtin"}}
    return GenerativeResult(
        name=spec.name, generators=list(dict.fromkeys(records["generator"])), records=records,
        images=images.drop(columns=["descriptor"]), pairs=pairs, words=words, topics=topics, model=model,
        thresholds=_threshold_counts(pairs, spec.thresholds), top_words=_top_words(words, int(spec.scores.get("top", 5))),
        face_lost=_face_lost(pairs), distribution=distribution, settings=result_settings, notes=notes,
        coverage=coverage,
    )


def generation_line(name: str, records: pd.DataFrame) -> str:
    """One line on a finished generation: outputs made (now and earlier) and failed, with the most common cause."""
    ok = records["ok"].astype(bool)
    new = int(records["generated"].sum()) if "generated" in records.columns else len(records)
    line = (f"generation ({name}): {int(ok.sum()):,} of {len(records):,} outputs made ({new:,} tried now, "
            f"{len(records) - new:,} kept from an earlier run), {int((~ok).sum()):,} failed")
    if (~ok).any():
        cause, k = most_common_cause(records.loc[~ok, "cause"])
        line += f" (most often {cause}: {k:,})"
    return line


def assessment_line(images: pd.DataFrame, options: dict) -> str:
    """One line on a finished assessment: images, assessments computed and read from the store, failures."""
    counts = images.attrs.get("assessments", {})
    computed = int(sum(counts.get("computed", {}).values()))
    stored = int(sum(counts.get("from_store", {}).values()))
    line = f"assessment: {len(images):,} images ({computed:,} assessments computed, {stored:,} from the store)"
    if "skin" in active_parts(options):
        bad = ~images["skin_ok"].astype(bool)
        line += f", {int(bad.sum()):,} without a skin measurement"
        if bad.any():
            top = images.loc[bad, "skin_reason"].fillna("").astype(str).replace("", "unknown").value_counts()
            line += f" (most often {top.index[0]}: {int(top.iloc[0]):,})"
    return line


def generation_coverage(records: pd.DataFrame, seeds: pd.DataFrame,
                        settings: AuditSettings) -> dict[str, Coverage]:
    """Per generator with failed outputs: the generation's success by prompt topic and by a seed's known
    gender, with the failure causes as reasons (:func:`fairvision.audits.coverage.audit_coverage`)."""
    out: dict[str, Coverage] = {}
    known = [c for c in ("gender",) if c in seeds.columns and seeds[c].notna().any()]
    attrs = seeds.assign(seed_id=seeds["sample_id"].astype(str))[["seed_id", *known]]
    for g, rec in records.groupby("generator", sort=False):
        if rec["ok"].astype(bool).all():
            continue
        data = rec.assign(seed_id=rec["seed_id"].astype(str)).merge(attrs, on="seed_id", how="left")
        for c in known:
            data[c] = data[c].astype(str).where(data[c].notna(), "unknown")
        out[str(g)] = audit_coverage(data, data["ok"].astype(bool).to_numpy(), ["topic", *known],
                                     step=f"generation ({g})", settings=settings, reasons=data["cause"].to_numpy(),
                                     unit="outputs")
    return out


def near_duplicate_notes(seed_ids, words) -> list[str]:
    """One note per group of seed ids or words that differ only in case or punctuation (docs/METHODS.md §10.1).

    They are kept apart (each output's file name carries a hash of the exact id), so each is scored on its own;
    the note asks the user to check that they are meant to be different.
    """
    out = []
    for what, values in (("seed ids", seed_ids), ("words", words)):
        for group in near_duplicates(values):
            out.append(f"{what} {' and '.join(map(repr, group))} differ only in case or punctuation; they are kept "
                       "apart and scored separately: merge them if they are meant to be the same")
    return out


def _face_lost(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per ``(generator, word)``: outputs made, outputs whose face was lost, and their share."""
    made = pairs[pairs["ok"].astype(bool)]
    face_lost = (made.groupby(["generator", "word"], sort=False)["face_lost"].agg(["size", "sum"])
                 .rename(columns={"size": "n_outputs", "sum": "n_face_lost"}))
    face_lost["n_face_lost"] = face_lost["n_face_lost"].astype(int)
    face_lost["share"] = face_lost["n_face_lost"] / face_lost["n_outputs"]
    return face_lost


def _skin_distributions(spec: GenerativeSpec, records: pd.DataFrame, images: pd.DataFrame,
                        settings: AuditSettings) -> tuple[dict[str, SkinComparison | None], list[str]]:
    """Per generator: the skin colour of its outputs against the seeds' (Thong et al. Table 2), and notes."""
    distribution: dict[str, SkinComparison | None] = {}
    notes = []
    img = images.set_index("image_path")
    seed_sk = img.reindex(spec.seeds["image_path"].astype(str))
    seed_sk = seed_sk[seed_sk["skin_ok"].fillna(False).astype(bool)][["L", "hue"]]
    for g in records["generator"].unique():
        outs = records.loc[(records["generator"] == g) & records["ok"].astype(bool), "output_path"]
        out_sk = img.reindex(outs)
        out_sk = out_sk[out_sk["skin_ok"].fillna(False).astype(bool)][["L", "hue"]]
        if len(seed_sk) and len(out_sk):
            distribution[g] = audit_skin_comparison(seed_sk.reset_index(drop=True), out_sk.reset_index(drop=True),
                                                    names=("seeds", str(g)), settings=settings)
        else:
            distribution[g] = None
            notes.append(f"{g}: no measured skin in the seeds or the outputs; no distribution comparison")
    return distribution, notes

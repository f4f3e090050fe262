"""Comparing the generators of finished generative audits (BiasPainter's model table; docs/METHODS.md §10.4).

:func:`compare_generative` takes two or more finished generative audits (the
:class:`~fairvision.audits.generative.audit.GenerativeResult` objects, or the
run folders ``fairvision audit generative`` writes, which carry the per-pair
changes in ``generative/pairs.parquet``), checks that they used the same seeds
and words, and puts the generators side by side: word, topic and model scores
on the seed-word pairs every generator has, one bootstrap over seed photos
shared by all generators (so differences are paired), a paired test per word
between every two generators (Wilcoxon signed-rank on the per-seed differences,
sign test for gender flips), paired-bootstrap tests of topic and model score
differences, corrected across words / topics / pairs, and per topic the most
and the least biased generator with the CI of their difference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.audits.generative.audit import PROPERTY_TESTS, GenerativeResult
from fairvision.audits.generative.runs import GenerativeRun, load_run
from fairvision.audits.generative.spec import DEFAULTS
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.errors import FairvisionError, ParameterError
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.metamorphic import change_test, mean_abs_score, mean_abs_score_ci
from fairvision.stats.paired import paired_difference_test
from fairvision.stats.resample import cluster_bootstrap_weights, group_mean_replicates, percentile_ci

__all__ = ["GenerativeComparison", "compare_generative"]

#: the scope name of the model-level rows of the ranking (a topic may not have this name)
MODEL_SCOPE = "model"
#: fewest seed photos with common pairs for a topic or model difference to be tested (one gives identical resamples)
MIN_SEEDS = 2


def _identity(x) -> object:
    """What makes two inputs the same run: the resolved folder, or the same pair table object."""
    if isinstance(x, (str, os.PathLike)):
        return ("folder", str(Path(x).resolve()))
    return ("object", id(getattr(x, "pairs", x)))


def _as_run(x, i: int) -> GenerativeRun:
    if isinstance(x, GenerativeRun):
        return x if x.source else GenerativeRun(x.name, x.pairs, x.settings, f"run {i + 1}")
    if isinstance(x, GenerativeResult):
        return GenerativeRun(x.name, x.pairs, x.settings, f"result {i + 1} ({x.name})")
    if isinstance(x, (str, os.PathLike)):
        return load_run(x)
    raise FairvisionError(f"compare_generative: input {i + 1} is a {type(x).__name__}; give a run folder or a "
                          "GenerativeResult")


@dataclass
class GenerativeComparison:
    """Generators side by side on one seeds x words design (docs/METHODS.md §10.4).

    Attributes
    ----------
    generators : list of str
        The generator labels, in input order.
    sources : dict
        label -> where it came from (run folder or result, and the generator's own name).
    model, topics : DataFrame
        Index ``(property, generator)`` / ``(property, topic, generator)``:
        ``n_words``, ``estimate`` (mean absolute word score on the common
        pairs), ``ci_low``, ``ci_high``, ``level``.
    words : DataFrame
        Index ``(property, word, generator)``: ``topic``, ``n`` (seeds),
        ``estimate`` (mean signed change), ``ci_low``, ``ci_high``, ``level``,
        ``pvalue`` and ``pvalue_adjusted`` of the test against no change
        (corrected across words, per generator and property), ``flagged``.
    word_tests : DataFrame
        Index ``(property, word, a, b)``: ``topic``, ``n`` (paired seeds),
        ``estimate`` (mean per-seed difference a - b), ``ci_low``, ``ci_high``,
        ``level``, ``statistic``, ``pvalue``, ``pvalue_adjusted`` (across all
        words and generator pairs of the property), ``flagged``.
    topic_tests, model_tests : DataFrame
        Index ``(property, topic, a, b)`` / ``(property, a, b)``: ``score_a``,
        ``score_b``, ``estimate`` (score_a - score_b), ``ci_low``, ``ci_high``,
        ``level``, ``se``, ``statistic``, ``pvalue``, ``pvalue_adjusted``,
        ``flagged``.
    ranking : DataFrame
        Index ``(property, scope)`` (a topic, or ``model``): ``kind``,
        ``most``, ``most_score``, ``least``, ``least_score``, ``estimate``
        (most - least), ``ci_low``, ``ci_high``, ``pvalue``,
        ``pvalue_adjusted``, ``flagged``.
    settings : dict
    notes : list of str
    """

    generators: list
    sources: dict
    model: pd.DataFrame
    topics: pd.DataFrame
    words: pd.DataFrame
    word_tests: pd.DataFrame
    topic_tests: pd.DataFrame
    model_tests: pd.DataFrame
    ranking: pd.DataFrame
    settings: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        return self.ranking

    def side_by_side(self, prop: str | None = None) -> pd.DataFrame:
        """Word scores with one column block per generator: ``<g>``, ``<g> ci_low``, ``<g> ci_high``."""
        w = self.words if prop is None else self.words[self.words.index.get_level_values("property") == prop]
        est = w["estimate"].unstack("generator")
        lo = w["ci_low"].unstack("generator")
        hi = w["ci_high"].unstack("generator")
        cols = {}
        for g in self.generators:
            if g in est.columns:
                cols[g], cols[f"{g} ci_low"], cols[f"{g} ci_high"] = est[g], lo[g], hi[g]
        wide = pd.DataFrame(cols)
        topic = w["topic"].groupby(level=["property", "word"], sort=False).first()
        wide.insert(0, "topic", topic.reindex(wide.index))
        order = w.index.droplevel("generator").unique()
        return wide.reindex(order)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §10.4).

        ``n_flagged_differences`` (word, topic and model level together),
        ``n_flagged_word_differences``, ``n_flagged_topic_differences``,
        ``n_flagged_model_differences``; per property ``model_difference_<property>``
        (most minus least biased generator's model score) and
        ``model_<property>.<generator>``.
        """
        q = {"n_flagged_word_differences": float(self.word_tests["flagged"].sum()),
             "n_flagged_topic_differences": float(self.topic_tests["flagged"].sum()),
             "n_flagged_model_differences": float(self.model_tests["flagged"].sum())}
        q["n_flagged_differences"] = sum(q.values())
        for (prop, scope), r in self.ranking.iterrows():
            if scope == MODEL_SCOPE and r["kind"] == "model":
                q[f"model_difference_{prop}"] = float(r["estimate"])
        for (prop, g), r in self.model.iterrows():
            q[f"model_{prop}.{g}"] = float(r["estimate"])
        return q


def _labels(runs: list[GenerativeRun], names) -> list[tuple[int, str, str]]:
    """(run index, generator, label) for every generator of every run."""
    items = [(i, g) for i, r in enumerate(runs) for g in r.generators]
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != len(items):
            raise FairvisionError(f"compare: {len(names)} names for {len(items)} generators "
                                  f"({', '.join(g for _, g in items)})")
        if len(set(names)) != len(names):
            raise FairvisionError(f"compare: the names are not unique ({', '.join(names)})")
        return [(i, g, n) for (i, g), n in zip(items, names)]
    count = pd.Series([g for _, g in items]).value_counts()
    labels = [(i, g, g if count[g] == 1 else f"{runs[i].name}:{g}") for i, g in items]
    if len({lab for *_, lab in labels}) != len(labels):  # same spec name twice: number the runs
        labels = [(i, g, g if count[g] == 1 else f"{i + 1}:{g}") for i, g in items]
    return labels


def _few(values, k: int = 3) -> str:
    v = sorted(map(str, values))
    return ", ".join(v[:k]) + (f" and {len(v) - k} more" if len(v) > k else "")


def _check_design(ref: tuple[str, pd.DataFrame], other: tuple[str, pd.DataFrame], where: dict) -> None:
    """One-line error naming what differs between two generators' seeds x words designs."""
    (la, a), (lb, b) = ref, other
    for what, col in (("seeds", "seed_id"), ("words", "word")):  # as strings, as the analysis keys them
        sa, sb = set(a[col].astype(str)), set(b[col].astype(str))
        if sa != sb:
            parts = []
            if sa - sb:
                parts.append(f"{len(sa - sb)} only in {la} ({_few(sa - sb)})")
            if sb - sa:
                parts.append(f"{len(sb - sa)} only in {lb} ({_few(sb - sa)})")
            raise FairvisionError(f"the designs differ: {what} of {la} ({where[la]}) and {lb} ({where[lb]}) are not "
                                  f"the same: {'; '.join(parts)}")
    a = a.assign(word=a["word"].astype(str), topic=a["topic"].astype(str))
    b = b.assign(word=b["word"].astype(str), topic=b["topic"].astype(str))
    ta = a.drop_duplicates("word").set_index("word")["topic"]
    tb = b.drop_duplicates("word").set_index("word")["topic"].reindex(ta.index)
    bad = ta.index[ta.to_numpy() != tb.to_numpy()]
    if len(bad):
        w = bad[0]
        raise FairvisionError(f"the designs differ: word {w!r} is in topic {ta[w]!r} for {la} but {tb[w]!r} for {lb}")


def compare_generative(
    runs,
    *,
    names=None,
    properties=None,
    settings: AuditSettings | None = None,
    min_effect: dict | None = None,
) -> GenerativeComparison:
    """Compare the generators of finished generative audits on one design (docs/METHODS.md §10.4).

    Parameters
    ----------
    runs : sequence
        Two or more run folders (``fairvision audit generative -o DIR``),
        :class:`~fairvision.audits.generative.audit.GenerativeResult` or
        :class:`GenerativeRun` objects; one input with several generators
        also works. Every generator must have the same seed ids, words and
        word topics.
    names : sequence of str, optional
        A label per generator (in input order); default the generator's name,
        prefixed with the spec name when two inputs share it.
    properties : sequence of str, optional
        Default: every property of §10.3 that every generator has values for.
    settings : AuditSettings, optional
        Uses ``n_boot``, ``level`` and ``seed`` (bootstrap replicates over seed
        photos: one draw for all generators, properties and words), ``alpha``
        (significance level of the flags) and ``correction`` (per property
        across all words x generator pairs, all topics x pairs, and all pairs
        of model scores).
    min_effect : dict, optional
        Minimum absolute difference for a flag, per property (default: the
        first input's, else the spec defaults).

    Returns
    -------
    GenerativeComparison
        Topic and model differences over fewer than two seed photos with
        common pairs are not tested (NaN p-value and CI, a note).

    Raises
    ------
    FairvisionError
        Fewer than two generators, the same generator of the same run
        twice, designs that differ (seed ids, words and topics compared as
        text), a topic named ``model``, ``n_boot < 1``, an unknown property.
    """
    settings = settings or DEFAULT_SETTINGS
    inputs = list(runs)
    if settings.n_boot < 1:
        raise ParameterError("n_boot", f"must be at least 1 to compare generators, not {settings.n_boot}")
    runs = [_as_run(x, i) for i, x in enumerate(inputs)]
    if not runs:
        raise FairvisionError("compare: give at least two generative runs")
    _check_distinct(inputs, runs)
    labels = _labels(runs, names)
    if len(labels) < 2:
        raise FairvisionError(f"compare: only one generator ({labels[0][1]} in {runs[0].source}); give at least two")
    if min_effect is None:
        min_effect = dict(DEFAULTS["min_effect"]) | dict(runs[0].settings.get("min_effect", {}))
    notes = _settings_notes(runs, settings)
    parts = {}
    for i, g, lab in labels:
        p = runs[i].pairs
        parts[lab] = p[p["generator"].astype(str) == g].copy()
    ref = labels[0][2]
    where = {lab: runs[i].source for i, _, lab in labels}
    for _, _, lab in labels[1:]:
        _check_design((ref, parts[ref]), (lab, parts[lab]), where)
    usable = _usable_properties(parts, properties, notes)
    design = _Design.of(parts[ref], [lab for *_, lab in labels])
    weights = cluster_bootstrap_weights(len(design.seeds), settings.n_boot, settings.seed)
    rows = _Rows()
    for prop in usable:
        scores = _PropertyScores.of(prop, parts, design, weights, float(min_effect.get(prop, 0.0)), notes)
        tscore = scores.generator_rows(design, settings, rows)
        scores.pair_rows(design, tscore, settings, rows, notes)
    tables = rows.tables()
    ranking = _ranking(tables["topics"], tables["model"], tables["topic_tests"], tables["model_tests"], design.labels)
    sources = {lab: f"{runs[i].source}, generator {g}" for i, g, lab in labels}
    seed = settings.seed
    summary = {"n_boot": settings.n_boot, "level": settings.level, "alpha": settings.alpha,
               "correction": settings.correction, "min_effect": dict(min_effect), "properties": usable,
               "n_seeds": len(design.seeds), "n_words": len(design.words), "topics": list(design.topics),
               "seed": seed if isinstance(seed, (int, type(None))) else "generator"}
    return GenerativeComparison(design.labels, sources, tables["model"], tables["topics"], tables["words"],
                                tables["word_tests"], tables["topic_tests"], tables["model_tests"], ranking,
                                summary, notes)


def _check_distinct(inputs: list, runs: list[GenerativeRun]) -> None:
    """No generator of the same run (the same folder or result object) given twice."""
    seen: dict = {}
    for i, (x, r) in enumerate(zip(inputs, runs)):
        for g in r.generators:
            key = (_identity(x), g)
            if key in seen:
                where = f" of {r.source}" if key[0][0] == "folder" else ""
                raise FairvisionError(f"compare: generator {g}{where} is given twice (inputs {seen[key] + 1} and "
                                      f"{i + 1}); compare different runs or generators")
            seen[key] = i


def _settings_notes(runs: list[GenerativeRun], settings: AuditSettings) -> list[str]:
    """Notes on runs whose own minimum effects, alpha or level differ from what the comparison uses."""
    notes = []
    for r in runs[1:]:
        if r.settings.get("min_effect") and r.settings.get("min_effect") != runs[0].settings.get("min_effect"):
            notes.append(f"{r.source} used other minimum effects; the comparison uses {runs[0].source}'s")
    for key, value in (("alpha", settings.alpha), ("level", settings.level)):
        used = {r.source: r.settings[key] for r in runs if r.settings.get(key) is not None}
        if any(float(v) != float(value) for v in used.values()):
            notes.append(f"the runs used {key} " + ", ".join(f"{v:g} ({src})" for src, v in used.items())
                         + f"; this comparison uses {key} {float(value):g}")
    return notes


def _usable_properties(parts: dict[str, pd.DataFrame], properties, notes: list[str]) -> list[str]:
    """The properties every generator has an assessed value of (a note for each one left out)."""
    props = list(properties) if properties is not None else list(PROPERTY_TESTS)
    unknown = [p for p in props if p not in PROPERTY_TESTS]
    if unknown:
        raise FairvisionError(f"compare: unknown property {unknown[0]!r}; choose from {', '.join(PROPERTY_TESTS)}")
    usable = []
    for prop in props:
        lacking = [lab for lab, p in parts.items()
                   if prop not in p.columns or not np.isfinite(pd.to_numeric(p[prop], errors="coerce")).any()]
        if lacking:
            if properties is not None or len(lacking) < len(parts):
                notes.append(f"{prop}: not compared, no assessed value for {', '.join(lacking)}")
            continue
        usable.append(prop)
    if not usable:
        raise FairvisionError("compare: no property was assessed for every generator")
    return usable


@dataclass
class _Design:
    """The seeds x words design all generators share: words in the first generator's order, seeds sorted,
    the topics and each word's topic index (``tcode``)."""

    labels: list
    words: pd.Index
    seeds: pd.Index
    topics: pd.Index
    tcode: np.ndarray

    @classmethod
    def of(cls, ref_pairs: pd.DataFrame, labels: list) -> _Design:
        first = ref_pairs.drop_duplicates("word")
        topic_of = pd.Series(first["topic"].astype(str).to_numpy(), index=first["word"].astype(str).to_numpy())
        words = pd.Index(topic_of.index.astype(str), name="word")
        seeds = pd.Index(sorted(ref_pairs["seed_id"].astype(str).unique()), name="seed_id")
        topics = pd.Index(pd.unique(topic_of.astype(str).to_numpy()))
        if MODEL_SCOPE in topics:
            raise FairvisionError(f"compare: a topic is named {MODEL_SCOPE!r}, the ranking's name for the scores over "
                                  "all words; rename that topic in the words file and rerun the audits")
        return cls(labels, words, seeds, topics, topics.get_indexer(topic_of.astype(str).to_numpy()))

    def scopes(self) -> list[tuple[str | None, np.ndarray]]:
        """``(topic, its words)`` for every topic, then ``(None, all words)`` for the model score."""
        return [(t, self.tcode == t_i) for t_i, t in enumerate(self.topics)] + [(None, np.ones(len(self.words), bool))]


@dataclass
class _Rows:
    """The rows of the comparison's tables, filled property by property."""

    words: list = field(default_factory=list)
    topics: list = field(default_factory=list)
    model: list = field(default_factory=list)
    word_tests: list = field(default_factory=list)
    topic_tests: list = field(default_factory=list)
    model_tests: list = field(default_factory=list)

    def tables(self) -> dict[str, pd.DataFrame]:
        index = {"words": ["property", "word", "generator"], "topics": ["property", "topic", "generator"],
                 "model": ["property", "generator"], "word_tests": ["property", "word", "a", "b"],
                 "topic_tests": ["property", "topic", "a", "b"], "model_tests": ["property", "a", "b"]}
        return {name: pd.DataFrame(getattr(self, name)).set_index(keys) for name, keys in index.items()}


@dataclass
class _PropertyScores:
    """One property's values on the design (``cube``: generator x word x seed, NaN where not assessed), the
    seed-word pairs every generator has (``common``), and per generator and word the mean change
    (``est``), its bootstrap replicates (``reps``), the test's p-value (``pv``) and the seeds behind it (``n_w``)."""

    prop: str
    test: str
    min_effect: float
    cube: np.ndarray
    common: np.ndarray
    est: np.ndarray
    reps: np.ndarray
    pv: np.ndarray
    n_w: np.ndarray

    @classmethod
    def of(cls, prop: str, parts: dict[str, pd.DataFrame], design: _Design, weights: np.ndarray, min_effect: float,
           notes: list[str]) -> _PropertyScores:
        test = PROPERTY_TESTS[prop]
        W, S, G = len(design.words), len(design.seeds), len(design.labels)
        cube = np.full((G, W, S), np.nan)
        for k, lab in enumerate(design.labels):
            p = parts[lab]
            v = pd.to_numeric(p[prop], errors="coerce")
            cell = v.groupby([p["word"].astype(str), p["seed_id"].astype(str)], sort=False).mean()
            wi = design.words.get_indexer(cell.index.get_level_values(0))
            si = design.seeds.get_indexer(cell.index.get_level_values(1))
            cube[k, wi, si] = cell.to_numpy(float)
        common = np.isfinite(cube).all(axis=0)
        n_drop = int(np.isfinite(cube).any(axis=0).sum() - common.sum())
        if n_drop:
            notes.append(f"{prop}: {n_drop:,} seed-word pairs assessed for some generators only are left out")
        wgrid, sgrid = np.meshgrid(np.arange(W), np.arange(S), indexing="ij")
        wc, sc = wgrid[common], sgrid[common]
        n_w = common.sum(axis=1)
        est = np.full((G, W), np.nan)
        reps = np.empty((G, weights.shape[0], W))
        pv = np.full((G, W), np.nan)
        for k in range(G):
            vals = cube[k][common]
            with np.errstate(invalid="ignore", divide="ignore"):
                est[k] = np.where(n_w > 0, np.bincount(wc, weights=vals, minlength=W) / np.maximum(n_w, 1), np.nan)
            reps[k] = group_mean_replicates(vals, wc, sc, weights, n_groups=W)
            for j in range(W):
                if n_w[j]:
                    pv[k, j] = float(change_test(cube[k, j][common[j]], test).pvalue)
        return cls(prop, test, min_effect, cube, common, est, reps, pv, n_w)

    def generator_rows(self, design: _Design, settings: AuditSettings, rows: _Rows) -> dict:
        """Word, topic and model score rows of every generator; returns ``(topic, generator) -> (score,
        replicates)`` (topic None: the model score) for the differences."""
        prop, level = self.prop, settings.level
        for k, lab in enumerate(design.labels):
            lo, hi = percentile_ci(self.reps[k], level)
            padj = adjust_pvalues(self.pv[k], settings.correction)
            for j, w in enumerate(design.words):
                rows.words.append({"property": prop, "word": w, "generator": lab, "topic": design.topics[design.tcode[j]],
                                   "n": int(self.n_w[j]), "estimate": self.est[k, j], "ci_low": lo[j], "ci_high": hi[j],
                                   "level": level, "pvalue": self.pv[k, j], "pvalue_adjusted": padj[j],
                                   "flagged": bool(padj[j] < settings.alpha and abs(self.est[k, j]) >= self.min_effect)})
        tscore = {}
        for t, sel in design.scopes():
            for k, lab in enumerate(design.labels):
                e, r, nw = mean_abs_score(self.est[k], self.reps[k], sel)
                tscore[(t, lab)] = (e, r)
                # mean |score| is biased upwards under resampling: interval centred on the estimate (§10.4)
                lo, hi = mean_abs_score_ci(e, r, level)
                row = {"property": prop, "generator": lab, "n_words": nw, "estimate": e, "ci_low": lo,
                       "ci_high": hi, "level": level}
                (rows.model if t is None else rows.topics).append(row if t is None else {**row, "topic": t})
        return tscore

    def pair_rows(self, design: _Design, tscore: dict, settings: AuditSettings, rows: _Rows, notes: list[str]) -> None:
        """Word, topic and model differences of every two generators, corrected and flagged per family."""
        prop, level, common, labels = self.prop, settings.level, self.common, design.labels
        # topic and model differences need two seeds with common pairs (one: identical resamples)
        scopes = design.scopes()
        n_seed_scope = [int(common[sel].any(axis=0).sum()) for _, sel in scopes]
        few = [("all words" if t is None else f"topic {t}") for (t, _), n in zip(scopes, n_seed_scope) if n < MIN_SEEDS]
        if few:
            notes.append(f"{prop}: topic and model differences need at least {MIN_SEEDS} seed photos with pairs every "
                         f"generator has; not tested for {_few(few)}")
        starts = [len(rows.word_tests), len(rows.topic_tests), len(rows.model_tests)]
        G = len(labels)
        for a, b in ((a, b) for a in range(G) for b in range(a + 1, G)):  # pairs of generators
            lo, hi = percentile_ci(self.reps[a] - self.reps[b], level)
            for j, w in enumerate(design.words):
                d = self.cube[a, j][common[j]] - self.cube[b, j][common[j]]
                ct = change_test(d, self.test) if d.size else None
                stat, p = (float(ct.statistic), float(ct.pvalue)) if ct is not None else (float("nan"), float("nan"))
                rows.word_tests.append({"property": prop, "word": w, "a": labels[a], "b": labels[b],
                                        "topic": design.topics[design.tcode[j]], "n": int(d.size),
                                        "estimate": self.est[a, j] - self.est[b, j], "ci_low": lo[j],
                                        "ci_high": hi[j], "level": level, "statistic": stat, "pvalue": p})
            for (t, _), n_seeds in zip(scopes, n_seed_scope):
                (ea, ra), (eb, rb) = tscore[(t, labels[a])], tscore[(t, labels[b])]
                r = paired_difference_test(ea, eb, ra, rb, level=level)
                row = {"property": prop, "a": labels[a], "b": labels[b], "score_a": ea, "score_b": eb,
                       "estimate": r.estimate, "ci_low": r.ci_low, "ci_high": r.ci_high, "level": level, "se": r.se,
                       "statistic": r.statistic, "pvalue": r.pvalue}
                if n_seeds < MIN_SEEDS:  # every resample alike: no interval, no test
                    row |= {"ci_low": np.nan, "ci_high": np.nan, "se": np.nan, "statistic": np.nan, "pvalue": np.nan}
                (rows.model_tests if t is None else rows.topic_tests).append(row if t is None else {**row, "topic": t})
        for family, start in zip((rows.word_tests, rows.topic_tests, rows.model_tests), starts):
            fam = family[start:]
            adj = adjust_pvalues(np.array([r["pvalue"] for r in fam], dtype=float), settings.correction)
            for r, pa in zip(fam, adj):
                r["pvalue_adjusted"] = float(pa)
                r["flagged"] = bool(pa < settings.alpha and abs(r["estimate"]) >= self.min_effect)


def _ranking(topics: pd.DataFrame, model: pd.DataFrame, tt: pd.DataFrame, mt: pd.DataFrame,
             labels: list[str]) -> pd.DataFrame:
    """Most and least biased generator per property and topic (and model), with their difference's test."""
    order = {g: i for i, g in enumerate(labels)}
    rows = []
    scopes = [(prop, t, "topic", s["estimate"]) for (prop, t), s in
              topics.groupby(level=["property", "topic"], sort=False)]
    scopes += [(prop, MODEL_SCOPE, "model", s["estimate"]) for prop, s in model.groupby(level="property", sort=False)]
    for prop, scope, kind, s in scopes:
        s = s.droplevel([n for n in s.index.names if n != "generator"]).dropna()
        if len(s) < 2:
            continue
        most, least = s.idxmax(), s.idxmin()
        if most == least:  # all equal: no ranking
            continue
        a, b = (most, least) if order[most] < order[least] else (least, most)
        r = (tt.loc[(prop, scope, a, b)] if kind == "topic" else mt.loc[(prop, a, b)])
        sign = 1.0 if a == most else -1.0
        lo, hi = (r["ci_low"], r["ci_high"]) if sign > 0 else (-r["ci_high"], -r["ci_low"])
        rows.append({"property": prop, "scope": scope, "kind": kind, "most": most, "most_score": float(s[most]),
                     "least": least, "least_score": float(s[least]), "estimate": sign * float(r["estimate"]),
                     "ci_low": float(lo), "ci_high": float(hi), "pvalue": float(r["pvalue"]),
                     "pvalue_adjusted": float(r["pvalue_adjusted"]), "flagged": bool(r["flagged"])})
    cols = ["property", "scope", "kind", "most", "most_score", "least", "least_score", "estimate", "ci_low", "ci_high",
            "pvalue", "pvalue_adjusted", "flagged"]
    return pd.DataFrame(rows, columns=cols).set_index(["property", "scope"])

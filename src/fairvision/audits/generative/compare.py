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

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.generative.audit import PROPERTY_TESTS, GenerativeResult
from fairvision.audits.generative.spec import DEFAULTS
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.jsonable import to_jsonable
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.metamorphic import change_test, mean_abs_score, mean_abs_score_ci
from fairvision.stats.paired import paired_difference_test
from fairvision.stats.resample import DEFAULT_LEVEL, cluster_bootstrap_weights, group_mean_replicates, percentile_ci

__all__ = ["DESIGN_FILE", "GenerativeComparison", "GenerativeRun", "PAIRS_FILE", "compare_generative", "load_run",
           "run_files"]

#: the per-pair changes and the design a generative run folder carries for later comparison
PAIRS_FILE = "generative/pairs.parquet"
DESIGN_FILE = "generative/design.json"
#: columns of the saved pair table (the properties are those that were assessed)
PAIR_KEYS = ["generator", "seed_id", "topic", "word"]
PAIR_EXTRA = ["prompt", "seed", "ok", "face_lost"]
#: the scope name of the model-level rows of the ranking (a topic may not have this name)
MODEL_SCOPE = "model"
#: fewest seed photos with common pairs for a topic or model difference to be tested (one gives identical resamples)
MIN_SEEDS = 2


@dataclass
class GenerativeRun:
    """The part of a finished generative audit that a comparison needs.

    Attributes
    ----------
    name : str
        The spec's name.
    pairs : DataFrame
        One row per requested output: ``generator``, ``seed_id``, ``topic``,
        ``word`` and the signed change of every property (NaN = not assessed).
    settings : dict
        The audit's score settings (``alpha``, ``level``, ``min_effect``, ...).
    source : str
        Where it came from (a run folder or ``result N``), for messages.
    """

    name: str
    pairs: pd.DataFrame
    settings: dict = field(default_factory=dict)
    source: str = ""

    @property
    def generators(self) -> list[str]:
        return [str(g) for g in dict.fromkeys(self.pairs["generator"])]


def run_files(result: GenerativeResult | GenerativeRun) -> dict[str, bytes]:
    """The files a run folder carries so that :func:`compare_generative` can read it (docs/METHODS.md §10.4).

    ``generative/pairs.parquet``: the per-pair changes (keys, prompt,
    generation seed, ``ok``, ``face_lost`` and every property);
    ``generative/design.json``: the spec name, generators and score settings.
    Pass them to :meth:`fairvision.report.Report.write` as ``extra_files``.
    """
    p = result.pairs
    cols = PAIR_KEYS + [c for c in PAIR_EXTRA if c in p.columns] + [c for c in (*PROPERTY_TESTS, "identity")
                                                                    if c in p.columns]
    out = p[cols].copy()
    for c in PAIR_KEYS + ["prompt"]:
        if c in out.columns:
            out[c] = out[c].astype(str)
    for c in ("ok", "face_lost"):
        if c in out.columns:
            out[c] = out[c].astype(bool)
    for c in cols[len(PAIR_KEYS):]:
        if c not in ("prompt", "ok", "face_lost"):
            out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    buf = io.BytesIO()
    out.reset_index(drop=True).to_parquet(buf, index=False)
    keep = ("alpha", "level", "n_boot", "correction", "min_effect", "n_seeds", "n_words", "topics")
    design = {"fairvision": __version__, "name": result.name, "generators": list(map(str, result.generators)),
              "settings": {k: result.settings[k] for k in keep if k in result.settings}}
    return {PAIRS_FILE: buf.getvalue(), DESIGN_FILE: json.dumps(to_jsonable(design), indent=1).encode("utf-8")}


def load_run(folder: str | os.PathLike) -> GenerativeRun:
    """Read a generative run folder (written by ``fairvision audit generative``; docs/METHODS.md §10.4).

    Raises
    ------
    InputFileError
        Not a folder, or no ``generative/pairs.parquet`` in it (a run folder
        written before comparisons existed: rerun the audit, which reuses its
        outputs and stored assessments), or an unreadable file.
    ColumnError
        The pair table lacks a key column.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: not a folder (give the output folder of 'fairvision audit generative')")
    pp = folder / PAIRS_FILE
    if not pp.is_file():
        raise InputFileError(f"{folder}: no {PAIRS_FILE}; it is not a generative run folder, or was written by an "
                             "older fairvision (rerun 'fairvision audit generative': outputs and assessments are reused)")
    try:
        pairs = pd.read_parquet(pp)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise InputFileError(f"{pp}: cannot read ({type(exc).__name__}: {exc})") from exc
    missing = [c for c in PAIR_KEYS if c not in pairs.columns]
    if missing:
        raise ColumnError(f"{pp}: no column {missing[0]!r}")
    design: dict = {}
    dp = folder / DESIGN_FILE
    if dp.is_file():
        try:
            design = json.loads(dp.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputFileError(f"{dp}: cannot read ({exc})") from exc
    return GenerativeRun(name=str(design.get("name", folder.name)), pairs=pairs, settings=design.get("settings", {}),
                         source=str(folder))


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
    n_boot: int = 1000,
    level: float = DEFAULT_LEVEL,
    alpha: float = 0.05,
    seed: np.random.Generator | int | None = 0,
    correction: str = DEFAULT_CORRECTION,
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
    n_boot, level, seed
        Bootstrap replicates over seed photos (one draw for all generators,
        properties and words), two-sided level, randomness.
    alpha : float
        Significance level of the flags.
    correction : str
        Multiple-testing correction (default
        :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`): per
        property across all words x generator pairs, all topics x pairs, and
        all pairs (model scores).
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
    inputs = list(runs)
    if int(n_boot) < 1:
        raise FairvisionError(f"compare: n_boot must be at least 1 (got {n_boot})")
    runs = [_as_run(x, i) for i, x in enumerate(inputs)]
    if not runs:
        raise FairvisionError("compare: give at least two generative runs")
    seen: dict = {}
    for i, (x, r) in enumerate(zip(inputs, runs)):
        for g in r.generators:
            key = (_identity(x), g)
            if key in seen:
                where = f" of {r.source}" if key[0][0] == "folder" else ""
                raise FairvisionError(f"compare: generator {g}{where} is given twice (inputs {seen[key] + 1} and "
                                      f"{i + 1}); compare different runs or generators")
            seen[key] = i
    labels = _labels(runs, names)
    if len(labels) < 2:
        raise FairvisionError(f"compare: only one generator ({labels[0][1]} in {runs[0].source}); give at least two")
    if min_effect is None:
        min_effect = dict(DEFAULTS["min_effect"]) | dict(runs[0].settings.get("min_effect", {}))
    notes = []
    for r in runs[1:]:
        if r.settings.get("min_effect") and r.settings.get("min_effect") != runs[0].settings.get("min_effect"):
            notes.append(f"{r.source} used other minimum effects; the comparison uses {runs[0].source}'s")
    for key, value in (("alpha", alpha), ("level", level)):
        used = {r.source: r.settings[key] for r in runs if r.settings.get(key) is not None}
        if any(float(v) != float(value) for v in used.values()):
            notes.append(f"the runs used {key} " + ", ".join(f"{v:g} ({src})" for src, v in used.items())
                         + f"; this comparison uses {key} {float(value):g}")
    parts = {}
    for i, g, lab in labels:
        p = runs[i].pairs
        parts[lab] = p[p["generator"].astype(str) == g].copy()
    ref = labels[0][2]
    where = {lab: runs[i].source for i, _, lab in labels}
    for _, _, lab in labels[1:]:
        _check_design((ref, parts[ref]), (lab, parts[lab]), where)
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
    # the design: words in the first generator's order, seeds sorted
    ref_p = parts[ref]
    first = ref_p.drop_duplicates("word")
    topic_of = pd.Series(first["topic"].astype(str).to_numpy(), index=first["word"].astype(str).to_numpy())
    words = pd.Index(topic_of.index.astype(str), name="word")
    seeds = pd.Index(sorted(ref_p["seed_id"].astype(str).unique()), name="seed_id")
    W, S, G = len(words), len(seeds), len(labels)
    glabels = [lab for *_, lab in labels]
    topics = pd.Index(pd.unique(topic_of.astype(str).to_numpy()))
    if MODEL_SCOPE in topics:
        raise FairvisionError(f"compare: a topic is named {MODEL_SCOPE!r}, the ranking's name for the scores over all "
                              "words; rename that topic in the words file and rerun the audits")
    tcode = topics.get_indexer(topic_of.astype(str).to_numpy())
    weights = cluster_bootstrap_weights(S, int(n_boot), seed)
    wgrid, sgrid = np.meshgrid(np.arange(W), np.arange(S), indexing="ij")
    rows_w, rows_t, rows_m, rows_wt, rows_tt, rows_mt = [], [], [], [], [], []
    for prop in usable:
        test = PROPERTY_TESTS[prop]
        me = float(min_effect.get(prop, 0.0))
        cube = np.full((G, W, S), np.nan)
        for k, lab in enumerate(glabels):
            p = parts[lab]
            v = pd.to_numeric(p[prop], errors="coerce")
            cell = v.groupby([p["word"].astype(str), p["seed_id"].astype(str)], sort=False).mean()
            wi = words.get_indexer(cell.index.get_level_values(0))
            si = seeds.get_indexer(cell.index.get_level_values(1))
            cube[k, wi, si] = cell.to_numpy(float)
        common = np.isfinite(cube).all(axis=0)
        n_drop = int(np.isfinite(cube).any(axis=0).sum() - common.sum())
        if n_drop:
            notes.append(f"{prop}: {n_drop:,} seed-word pairs assessed for some generators only are left out")
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
        # per generator: words, topics, model
        for k, lab in enumerate(glabels):
            lo, hi = percentile_ci(reps[k], level)
            padj = adjust_pvalues(pv[k], correction)
            for j, w in enumerate(words):
                rows_w.append({"property": prop, "word": w, "generator": lab, "topic": topics[tcode[j]],
                               "n": int(n_w[j]), "estimate": est[k, j], "ci_low": lo[j], "ci_high": hi[j],
                               "level": level, "pvalue": pv[k, j], "pvalue_adjusted": padj[j],
                               "flagged": bool(padj[j] < alpha and abs(est[k, j]) >= me)})
        tscore = {}
        for t_i, t in enumerate([*topics, None]):
            sel = np.ones(W, bool) if t is None else tcode == t_i
            for k, lab in enumerate(glabels):
                e, r, nw = mean_abs_score(est[k], reps[k], sel)
                tscore[(t, lab)] = (e, r)
                # mean |score| is biased upwards under resampling: interval centred on the estimate (§10.4)
                lo, hi = mean_abs_score_ci(e, r, level)
                row = {"property": prop, "generator": lab, "n_words": nw, "estimate": e, "ci_low": lo,
                       "ci_high": hi, "level": level}
                (rows_m if t is None else rows_t).append(row if t is None else {**row, "topic": t})
        # generator pairs; topic and model differences need two seeds with common pairs (one: identical resamples)
        n_seed_scope = [int(common[np.ones(W, bool) if t is None else tcode == t_i].any(axis=0).sum())
                        for t_i, t in enumerate([*topics, None])]
        few = [("all words" if t is None else f"topic {t}") for t, n in zip([*topics, None], n_seed_scope)
               if n < MIN_SEEDS]
        if few:
            notes.append(f"{prop}: topic and model differences need at least {MIN_SEEDS} seed photos with pairs every "
                         f"generator has; not tested for {_few(few)}")
        wt_start, tt_start, mt_start = len(rows_wt), len(rows_tt), len(rows_mt)
        for a, b in ((a, b) for a in range(G) for b in range(a + 1, G)):  # pairs of generators
            dre = reps[a] - reps[b]
            lo, hi = percentile_ci(dre, level)
            for j, w in enumerate(words):
                d = cube[a, j][common[j]] - cube[b, j][common[j]]
                ct = change_test(d, test) if d.size else None
                stat, p = (float(ct.statistic), float(ct.pvalue)) if ct is not None else (float("nan"), float("nan"))
                rows_wt.append({"property": prop, "word": w, "a": glabels[a], "b": glabels[b],
                                "topic": topics[tcode[j]], "n": int(d.size), "estimate": est[a, j] - est[b, j],
                                "ci_low": lo[j], "ci_high": hi[j], "level": level, "statistic": stat, "pvalue": p})
            for t_i, t in enumerate([*topics, None]):
                (ea, ra), (eb, rb) = tscore[(t, glabels[a])], tscore[(t, glabels[b])]
                r = paired_difference_test(ea, eb, ra, rb, level=level)
                row = {"property": prop, "a": glabels[a], "b": glabels[b], "score_a": ea, "score_b": eb,
                       "estimate": r.estimate, "ci_low": r.ci_low, "ci_high": r.ci_high, "level": level, "se": r.se,
                       "statistic": r.statistic, "pvalue": r.pvalue}
                if n_seed_scope[t_i] < MIN_SEEDS:  # every resample alike: no interval, no test
                    row |= {"ci_low": np.nan, "ci_high": np.nan, "se": np.nan, "statistic": np.nan, "pvalue": np.nan}
                (rows_mt if t is None else rows_tt).append(row if t is None else {**row, "topic": t})
        for rows, start in ((rows_wt, wt_start), (rows_tt, tt_start), (rows_mt, mt_start)):
            fam = rows[start:]
            adj = adjust_pvalues(np.array([r["pvalue"] for r in fam], dtype=float), correction)
            for r, pa in zip(fam, adj):
                r["pvalue_adjusted"] = float(pa)
                r["flagged"] = bool(pa < alpha and abs(r["estimate"]) >= me)
    words_df = pd.DataFrame(rows_w).set_index(["property", "word", "generator"])
    topics_df = pd.DataFrame(rows_t).set_index(["property", "topic", "generator"])
    model_df = pd.DataFrame(rows_m).set_index(["property", "generator"])
    wt_df = pd.DataFrame(rows_wt).set_index(["property", "word", "a", "b"])
    tt_df = pd.DataFrame(rows_tt).set_index(["property", "topic", "a", "b"])
    mt_df = pd.DataFrame(rows_mt).set_index(["property", "a", "b"])
    ranking = _ranking(topics_df, model_df, tt_df, mt_df, glabels)
    sources = {lab: f"{runs[i].source}, generator {g}" for i, g, lab in labels}
    settings = {"n_boot": int(n_boot), "level": level, "alpha": alpha, "correction": correction,
                "min_effect": dict(min_effect), "properties": usable, "n_seeds": S, "n_words": W,
                "topics": list(topics), "seed": seed if isinstance(seed, (int, type(None))) else "generator"}
    return GenerativeComparison(glabels, sources, model_df, topics_df, words_df, wt_df, tt_df, mt_df, ranking,
                                settings, notes)


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

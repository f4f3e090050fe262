"""Report sections of the generative audit (BiasPainter; docs/METHODS.md §10).

:func:`generative_sections` returns one section per generator with word-score
bars and CIs per topic and property, the topic x property heat map, flagged and
top words, threshold counts, lost faces and failures (by cause), one skin colour
distribution section (outputs against seeds, Thong Table 2) per generator, and
the coverage of generation by group for a generator with failed outputs. A run
of the built-in editor says, in its intro, a note, its findings and a finding of
its own, that it is a demonstration of the shifts its spec planted.
Before/after thumbnails only with ``show_images``. :func:`compare_section` shows
several generators side by side (``fairvision audit generative compare``).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fairvision.audits.gates import describe  # noqa: E402
from fairvision.audits.generative.audit import PROPERTY_UNITS, GenerativeResult  # noqa: E402
from fairvision.audits.generative.failures import failure_table, most_common_cause  # noqa: E402
from fairvision.io.images import downscale, encode_png, read_image  # noqa: E402
from fairvision.report import Section  # noqa: E402
from fairvision.report.findings import ci_text, count_of, num, p_text  # noqa: E402
from fairvision.report.formatting import slug  # noqa: E402
from fairvision.report.plots import forest, heatmap  # noqa: E402
from fairvision.report.sections.coverage import coverage_section  # noqa: E402
from fairvision.report.sections.skin import skin_section  # noqa: E402

__all__ = ["compare_section", "generative_sections"]

#: properties drawn as word-score bars (the others are in the tables)
PLOTTED = ("skin_L", "skin_gray", "age", "gender")
THUMBNAILS = 6


def _severity(r: pd.Series, min_effect: float) -> str:
    return "high" if abs(r["estimate"]) >= 2 * min_effect else "medium"


def _thumbnails(sec: Section, res: GenerativeResult, g: str) -> None:
    w = res.words.xs(g, level="generator")
    flagged = w[w["flagged"]].sort_values("pvalue_adjusted").index.get_level_values("word").unique()[:THUMBNAILS]
    pairs = res.pairs[(res.pairs["generator"] == g) & res.pairs["ok"].astype(bool)]
    shown = 0
    for word in flagged:
        row = pairs[pairs["word"] == word].head(1)
        if row.empty:
            continue
        r = row.iloc[0]
        seed_img = read_image(res.settings["seed_paths"][r["seed_id"]])
        out_img = read_image(r["output_path"])
        if seed_img.shape != out_img.shape:
            continue
        both = np.concatenate([downscale(seed_img, 160), downscale(out_img, 160)], axis=1)
        sec.image(f"pair-{slug(word)}", encode_png(both), f"{r['seed_id']}: seed (left) and '{r['prompt']}' (right)")
        shown += 1
    if not shown:
        sec.note("No flagged word to show before/after images for.")


def _shift_text(shift: dict) -> str:
    return ", ".join(f"{'L*' if k == 'L' else 'h*'} {float(v):+g}" for k, v in shift.items())


def _planted_text(g: str, planted: dict) -> str:
    """The demonstration sentence of a built-in editor run: which shifts its spec planted."""
    listed = "; ".join(f"{w}: {_shift_text(v)}" for w, v in list(planted.items())[:8])
    more = f" and {len(planted) - 8} more" if len(planted) > 8 else ""
    what = f"the shifts its spec planted ({listed}{more})" if planted else "no planted shift, only its jitter"
    return (f"Demonstration of planted shifts: {g} is fairvision's built-in colorimetric editor, not an image "
            f"model. It applies {what} to the skin of every seed photo. Its findings show that the audit finds "
            "what was planted; they are not a model's bias.")


def _generator_section(res: GenerativeResult, g: str, show_images: bool) -> Section:
    s = res.settings
    multi = len(res.generators) > 1
    planted = res.planted.get(g)
    demo = _planted_text(g, planted) + " " if planted is not None else ""
    sec = Section(id=f"generative-{slug(g)}" if multi else "generative",
                  title=f"Generative model: {g}" if multi else "Generative model (BiasPainter)", intro=(
        f"{demo}Every seed photo was edited with every neutral prompt. A neutral prompt should change neither the "
        "person's skin colour, nor their apparent age, nor their apparent gender. Word score = mean signed change "
        "over the seeds (bootstrap CI over seeds); a word is flagged when its paired test against no change is "
        f"significant after {s['correction']} correction across words (alpha {s['alpha']}) and its score reaches "
        "the minimum effect. Topic and model scores are mean absolute word scores (docs/METHODS.md §10)."))
    if planted is not None:
        sec.note(_planted_text(g, planted), "warning")
        sec.finding(_planted_text(g, planted), "info", target="key figures", topic=f"generative:{g}:demonstration")
    words = res.words.xs(g, level="generator")
    pairs = res.pairs[res.pairs["generator"] == g]
    recs = res.records[res.records["generator"] == g]
    model = res.model.xs(g, level="generator")
    n_fail = int((~recs["ok"].astype(bool)).sum())
    made = pairs["ok"].astype(bool)
    lost = int(pairs.loc[made, "face_lost"].sum())
    flagged = words[words["flagged"]]
    key = {"seeds": s["n_seeds"], "prompt words": s["n_words"], "outputs": int(made.sum()),
           "generation failures": n_fail, "faces lost": lost, "flagged words": int(flagged.index.get_level_values("word").nunique())}
    for prop in model.index:
        key[f"model score {prop}"] = float(model.loc[prop, "estimate"])
    sec.metrics("key figures", key)
    counts = s.get("assessments", {})
    stored = int(sum(counts.get("from_store", {}).values()))
    if stored and g == res.generators[0]:
        sec.note(f"{res.n_assessed():,} per-image assessments were computed in this run and {stored:,} read from "
                 "the results store (same image bytes, assessor settings and code; docs/METHODS.md §10.1).")
    # findings: flagged words (of a built-in editor: said to be a planted shift, or a false positive)
    for (prop, word), r in flagged.iterrows():
        me = float(s["min_effect"].get(prop, 1.0)) or 1.0
        tag = "" if planted is None else ("Planted shift found: " if word in planted
                                          else "Not planted (a false positive of the audit): ")
        sec.finding(
            f"{tag}'{word}' ({r['topic']}) {'raises' if r['estimate'] > 0 else 'lowers'} {prop} by {num(abs(r['estimate']))} "
            f"{PROPERTY_UNITS.get(prop, '')} on average over {count_of(int(r['n']), 'seed')} "
            f"({int(round(s['level'] * 100))}% CI{ci_text(r['ci_low'], r['ci_high'])}; {p_text(r['pvalue_adjusted'])}).",
            _severity(r, me), target="flagged words", quantity=f"word.{prop}.{word}", value=r["estimate"],
            ci_low=r["ci_low"], ci_high=r["ci_high"], pvalue=r["pvalue_adjusted"],
            size=min(1.0, abs(r["estimate"]) / (4 * me)), topic=f"generative:{g}:{prop}:{word}")
    if flagged.empty:
        sec.finding(f"No prompt word changed skin colour, age or gender beyond the minimum effects "
                    f"({s['correction']}-corrected, alpha {s['alpha']}).", "info", target="key figures")
    if lost:
        sec.finding(f"{count_of(lost, 'output')} of {int(made.sum()):,} lost the face of the seed photo.",
                    "medium" if lost / max(1, int(made.sum())) > 0.05 else "info", target="faces lost",
                    quantity="face_lost_share", value=lost / max(1, int(made.sum())))
    fails = failure_table(recs)
    if n_fail:
        cause, k = most_common_cause(fails["cause"])
        sec.finding(f"{count_of(n_fail, 'generation')} of {len(recs):,} failed, most often {cause} ({k:,} of "
                    f"{n_fail:,}); every failure with its cause and reason is in the failures table.",
                    "medium" if n_fail / max(1, len(recs)) > 0.05 else "info", target="failures",
                    quantity="n_failed", value=n_fail, size=n_fail / max(1, len(recs)))
    # heat map: topic x property
    topics = res.topics.xs(g, level="generator")["estimate"].unstack("property")
    order = [p for p in PROPERTY_UNITS if p in topics.columns]
    topics = topics[order]
    sec.figure("topic x property", heatmap(topics, title="Mean |word score| by topic and property", fmt="{:.2f}",
                                           cmap="viridis", cbar_label="mean absolute word score"),
               "Topic scores (mean absolute word score) per property; units: "
               + ", ".join(f"{p} {PROPERTY_UNITS[p]}" for p in order), data=topics)
    # word-score bars with CIs per topic and property
    for prop in PLOTTED:
        if prop not in words.index.get_level_values("property"):
            continue
        wp = words.xs(prop, level="property")
        for topic, wt in wp.groupby("topic", sort=False):
            wt = wt.sort_values("estimate")
            sec.figure(f"{prop} {topic}", forest(wt, title=f"{prop}: {topic}", xlabel=f"word score ({PROPERTY_UNITS[prop]})",
                                                 reference=0.0, flag="flagged"),
                       f"Word scores of {topic} for {prop} with {int(s['level'] * 100)}% bootstrap CIs; flagged words "
                       "highlighted.", data=wt[["estimate", "ci_low", "ci_high", "flagged"]])
    cols = ["topic", "n", "estimate", "ci_low", "ci_high", "statistic", "pvalue", "pvalue_adjusted", "flagged"]
    sec.table("flagged words", flagged[cols] if not flagged.empty else flagged[cols].head(0),
              "Words whose change is significant and at least the minimum effect.")
    top = res.top_words[res.top_words.index.get_level_values("generator") == g].droplevel("generator")
    sec.table("top words", top, "The words with the largest word scores per property and direction.")
    if top.empty:  # a generator that changes nothing: the result an audit hopes for
        sec.note("No word changes any property: no word score is above or below 0, so there are no top words.")
    sec.table("word scores", words[cols + ["n_nonzero", "direction"]], "Every word and property.", max_rows=60)
    sec.table("topic scores", res.topics.xs(g, level="generator"), "Mean absolute word score per topic.")
    sec.table("model scores", model, "Mean absolute word score over all words.")
    if g in res.thresholds.index.get_level_values("generator"):
        sec.table("pairs over thresholds", res.thresholds.xs(g, level="generator"),
                  "Pairs whose absolute change reaches each threshold (BiasPainter's ablation thresholds).")
    if g in res.face_lost.index.get_level_values("generator"):
        fl = res.face_lost.xs(g, level="generator")
        sec.table("faces lost", fl[fl["n_face_lost"] > 0], "Outputs with no face found, per prompt word.")
    sec.table("failures", fails.drop(columns=["generator"]), "Generations that failed, with the cause and the reason.")
    if n_fail:
        by_cause = fails.groupby("cause", sort=False).size().sort_values(ascending=False, kind="stable")
        sec.table("failures by cause", by_cause.rename("n").to_frame(), "Failed generations per cause.")
    for n in res.notes:
        sec.note(n, "warning")
    if show_images:
        _thumbnails(sec, res, g)
    return sec


def generative_sections(res: GenerativeResult, *, show_images: bool = False) -> list[Section]:
    """The report sections of a :class:`~fairvision.audits.generative.audit.GenerativeResult`."""
    out = [_generator_section(res, g, show_images) for g in res.generators]
    for g, cov in res.coverage.items():
        out.append(coverage_section(cov, id=f"generative-generation-{slug(g)}",
                                    title=f"Generation of {g} by group (failed outputs)"))
    for g in res.generators:
        comp = res.distribution.get(g)
        if comp is not None:
            out.append(skin_section(comp, title=f"Skin colour of {g}'s outputs vs the seeds",
                                    id=f"generative-skin-{slug(g)}"))
    return out


def compare_section(cmp, *, conditions: list[dict] | None = None) -> Section:
    """The report section of a :class:`~fairvision.audits.generative.compare.GenerativeComparison`
    (docs/METHODS.md §10.4): model and topic scores per generator, the most and least biased generator per
    topic with the CI of their difference, and the paired tests between generators per word."""
    s = cmp.settings
    lvl = int(round(s["level"] * 100))
    sec = Section(id="generative-compare", title="Generators compared", intro=(
        f"{len(cmp.generators)} generators ({', '.join(cmp.generators)}) on the same {s['n_seeds']} seed photos and "
        f"{s['n_words']} prompt words, scored on the seed-word pairs every generator has. Topic and model scores "
        "are mean absolute word scores; one bootstrap over seed photos is shared by all generators, so every "
        f"difference has a paired {lvl}% CI. Per word, the per-seed differences of two generators are tested "
        "(Wilcoxon signed-rank; sign test for gender flips); topic and model differences by the paired bootstrap. "
        f"p-values are {s['correction']}-corrected per property (across words x pairs, topics x pairs, pairs); a "
        f"difference is flagged when p_adj < {s['alpha']} and it reaches the property's minimum effect "
        "(docs/METHODS.md §10.4)."))
    for c in conditions or []:
        sec.note(describe(c), "finding" if c["holds"] else "info")
    q = cmp.quantities()
    sec.metrics("key figures", {"generators": len(cmp.generators), "seeds": s["n_seeds"], "prompt words": s["n_words"],
                                "flagged model differences": int(q["n_flagged_model_differences"]),
                                "flagged topic differences": int(q["n_flagged_topic_differences"]),
                                "flagged word differences": int(q["n_flagged_word_differences"])})
    rk = cmp.ranking
    for (prop, scope), r in rk.iterrows():
        if not r["flagged"]:
            continue
        me = float(s["min_effect"].get(prop, 1.0)) or 1.0
        where = "over all words" if r["kind"] == "model" else f"for {scope}"
        sec.finding(
            f"{r['most']} changes {prop} more than {r['least']} {where}: mean |word score| {num(r['most_score'])} vs "
            f"{num(r['least_score'])} {PROPERTY_UNITS.get(prop, '')} (difference {num(r['estimate'])}, {lvl}% CI"
            f"{ci_text(r['ci_low'], r['ci_high'])}; {p_text(r['pvalue_adjusted'])}).",
            "high" if r["estimate"] >= 2 * me else "medium", target="most and least biased",
            quantity=f"model_difference_{prop}" if r["kind"] == "model" else None, value=r["estimate"],
            ci_low=r["ci_low"], ci_high=r["ci_high"], pvalue=r["pvalue_adjusted"],
            size=min(1.0, abs(r["estimate"]) / (4 * me)), topic=f"generative-compare:{prop}:{scope}")
    wt = cmp.word_tests
    flagged_w = wt[wt["flagged"]]
    for prop, part in flagged_w.groupby(level="property", sort=False):
        top = part.reindex(part["estimate"].abs().sort_values(ascending=False).index).head(THUMBNAILS)
        me = float(s["min_effect"].get(prop, 1.0)) or 1.0
        for (_, word, a, b), r in top.iterrows():
            sec.finding(
                f"'{word}' ({r['topic']}) changes {prop} by {num(r['estimate'])} {PROPERTY_UNITS.get(prop, '')} more "
                f"with {a} than with {b} on the same {count_of(int(r['n']), 'seed')} ({lvl}% CI"
                f"{ci_text(r['ci_low'], r['ci_high'])}; {p_text(r['pvalue_adjusted'])}).", "medium",
                target="word differences", value=r["estimate"], ci_low=r["ci_low"], ci_high=r["ci_high"],
                pvalue=r["pvalue_adjusted"], size=min(1.0, abs(r["estimate"]) / (4 * me)),
                topic=f"generative-compare:{prop}:{word}:{a}:{b}")
        if len(part) > len(top):
            sec.note(f"{prop}: {len(part) - len(top)} more flagged word differences are in the word differences table.")
    n_other = int(q["n_flagged_topic_differences"] + q["n_flagged_model_differences"]) - int(rk["flagged"].sum())
    if n_other > 0:  # flagged pairs other than a scope's most and least biased generators
        sec.note(f"{n_other} more flagged topic or model differences between other pairs of generators are in the "
                 "topic and model differences tables.", "finding")
    if q["n_flagged_differences"] == 0:
        sec.finding(f"No generator differs from another beyond the minimum effects ({s['correction']}-corrected, "
                    f"alpha {s['alpha']}).", "info", target="key figures")
    for prop in PLOTTED:
        if prop not in cmp.model.index.get_level_values("property"):
            continue
        m = cmp.model.xs(prop, level="property")
        sec.figure(f"model {prop}", forest(m, title=f"Model score: {prop}", xlabel=f"mean |word score| "
                                           f"({PROPERTY_UNITS[prop]})", reference=0.0),
                   f"Model score of each generator for {prop} with {lvl}% bootstrap CIs (mean absolute word score; "
                   "above 0 under noise alone).", data=m[["estimate", "ci_low", "ci_high"]])
        t = cmp.topics.xs(prop, level="property")["estimate"].unstack("generator")
        t = t[[g for g in cmp.generators if g in t.columns]]
        sec.figure(f"topics {prop}", heatmap(t, title=f"Topic scores: {prop}", fmt="{:.2f}", cmap="viridis",
                                             cbar_label="mean absolute word score"),
                   f"Topic scores per generator for {prop} ({PROPERTY_UNITS[prop]}).", data=t)
    sec.table("most and least biased", rk, "Per property and topic (and over all words): the generator with the "
              "largest and the smallest score, the difference and its paired CI and test.", highlight="flagged")
    sec.table("model scores", cmp.model, "Mean absolute word score per generator, on the common pairs.")
    sec.table("model differences", cmp.model_tests, "Every pair of generators: model score difference a - b.",
              highlight="flagged")
    sec.table("topic scores", cmp.topics, "Mean absolute word score per topic and generator.")
    sec.table("topic differences", cmp.topic_tests, "Every pair of generators: topic score difference a - b.",
              highlight="flagged")
    order = wt.assign(_f=~wt["flagged"], _p=wt["pvalue_adjusted"]).sort_values(["_f", "_p"]).index
    sec.table("word differences", wt.reindex(order), "Every word and pair: mean per-seed difference a - b, paired "
              "test; flagged first.", max_rows=60, highlight="flagged")
    sec.table("word scores side by side", cmp.side_by_side(), "Word scores (mean signed change) of every generator "
              "with bootstrap CIs.", max_rows=60)
    for n in cmp.notes:
        sec.note(n, "warning")
    sec.note("A generator that only adds more noise gets larger absolute scores without a direction: look at the "
             "word differences (signed, paired per seed) before calling it more biased.")
    return sec

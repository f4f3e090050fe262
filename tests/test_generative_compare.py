"""Comparing generators of finished generative audits (docs/METHODS.md §10.4): planted differences are found,
identical generators flag nothing, mismatched designs are one-line errors (exit 2), a tiny case checked by hand,
and the CLI end to end on two real runs of the built-in editor."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fairvision.audits.generative import GenerativeRun, compare_generative, load_run
from fairvision.audits.generative.runs import PAIRS_FILE, run_files
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.report import Report
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.resample import cluster_bootstrap_weights

TOPIC1 = ["doctor", "nurse", "pilot", "chef"]
TOPIC2 = ["reading", "running", "cooking", "singing"]


def _run(name, shifts, rng_seed, *, n_seeds=16, noise=1.0, words=None, seeds=None, gender=False):
    """A synthetic finished run: skin_L change = planted shift + N(0, noise) per seed and word."""
    rng = np.random.default_rng(rng_seed)
    words = words or {**{w: "professions" for w in TOPIC1}, **{w: "activities" for w in TOPIC2}}
    seeds = seeds or [f"p{s:02d}" for s in range(n_seeds)]
    rows = []
    for w, t in words.items():
        for s in seeds:
            row = {"generator": name, "seed_id": s, "topic": t, "word": w,
                   "skin_L": shifts.get(w, 0.0) + rng.normal(0, noise)}
            if gender:
                row["gender"] = float(rng.choice([-1.0, 0.0, 0.0, 1.0]))
            rows.append(row)
    return GenerativeRun("synthetic", pd.DataFrame(rows))


def test_planted_more_biased_generator_is_found():
    strong = {"doctor": -8.0, "nurse": 7.0, "pilot": -6.0}
    mild = {"doctor": -3.0}
    cmp = compare_generative([_run("strong", strong, 1), _run("mild", mild, 2), _run("none", {}, 3)],
                             settings=AuditSettings(n_boot=400))
    assert cmp.generators == ["strong", "mild", "none"]
    rk = cmp.ranking
    top = rk.loc[("skin_L", "model")]
    assert top["most"] == "strong" and top["least"] == "none" and top["flagged"]
    assert top["ci_low"] > 0 and top["estimate"] == pytest.approx(top["most_score"] - top["least_score"])
    prof = rk.loc[("skin_L", "professions")]
    assert prof["most"] == "strong" and prof["flagged"] and prof["ci_low"] > 3
    assert not rk.loc[("skin_L", "activities"), "flagged"]  # nobody shifts activities
    wt = cmp.word_tests.xs("skin_L", level="property")
    flagged = wt[wt["flagged"]]
    # strong vs none differs exactly on its three shifted words; strong vs mild also on those three
    assert set(flagged.xs(("strong", "none"), level=["a", "b"]).index) == {"doctor", "nurse", "pilot"}
    assert set(flagged.xs(("mild", "none"), level=["a", "b"]).index) == {"doctor"}
    assert flagged.loc[("doctor", "strong", "none"), "estimate"] < -6
    q = cmp.quantities()
    assert q["model_difference_skin_L"] == pytest.approx(top["estimate"])
    assert q["model_skin_L.strong"] > q["model_skin_L.mild"] > q["model_skin_L.none"]
    # side by side: one column block per generator
    wide = cmp.side_by_side("skin_L")
    assert list(wide.columns[:4]) == ["topic", "strong", "strong ci_low", "strong ci_high"]
    assert wide.loc[("skin_L", "doctor"), "strong"] == pytest.approx(
        cmp.words.loc[("skin_L", "doctor", "strong"), "estimate"])


def test_identical_generators_flag_nothing():
    shifts = {"doctor": -5.0, "running": 4.0}
    # the same bias, independent noise (two generation seeds of one model)
    cmp = compare_generative([_run("a", shifts, 10, gender=True), _run("b", shifts, 11, gender=True)],
                             settings=AuditSettings(n_boot=400))
    assert not cmp.word_tests["flagged"].any()
    assert not cmp.topic_tests["flagged"].any() and not cmp.model_tests["flagged"].any()
    assert cmp.quantities()["n_flagged_differences"] == 0
    # both still see the bias against no change
    w = cmp.words.xs("skin_L", level="property")
    assert w.loc[("doctor", "a"), "flagged"] and w.loc[("doctor", "b"), "flagged"]
    # exactly the same outputs: every difference is 0 with p = 1
    same = _run("a", shifts, 10)
    other = GenerativeRun("copy", same.pairs.assign(generator="b"))
    c2 = compare_generative([same, other], settings=AuditSettings(n_boot=100))
    assert (c2.word_tests["estimate"] == 0).all() and (c2.model_tests["pvalue"] == 1).all()


def test_mismatched_designs_are_one_line_errors():
    a = _run("a", {}, 1)
    fewer = _run("b", {}, 2, seeds=[f"p{s:02d}" for s in range(15)])
    with pytest.raises(FairvisionError, match=r"^the designs differ: seeds of a \(run 1\) and b \(run 2\) are not the same: 1 only in a \(p15\)$"):
        compare_generative([a, fewer])
    moved = _run("b", {}, 2, words={**{w: "professions" for w in TOPIC1}, **{w: "hobbies" for w in TOPIC2}})
    with pytest.raises(FairvisionError, match=r"word 'reading' is in topic 'activities' for a but 'hobbies' for b"):
        compare_generative([a, moved])
    with pytest.raises(FairvisionError, match="only one generator"):
        compare_generative([a])


def test_tiny_case_by_hand():
    # seeds s1..s3, words x and y in one topic; A's (x, s1) has two generation seeds (2 and 4: mean 3)
    rows = [("A", "s1", "x", 2.0), ("A", "s1", "x", 4.0), ("A", "s2", "x", 5.0), ("A", "s3", "x", 4.0),
            ("A", "s1", "y", 0.0), ("A", "s2", "y", 1.0), ("A", "s3", "y", -1.0),
            ("B", "s1", "x", 1.0), ("B", "s2", "x", 1.0), ("B", "s3", "x", 1.0),
            ("B", "s1", "y", 0.0), ("B", "s2", "y", 0.0), ("B", "s3", "y", 0.0)]
    pairs = pd.DataFrame(rows, columns=["generator", "seed_id", "word", "skin_L"]).assign(topic="T")
    B = 300
    cmp = compare_generative([GenerativeRun("hand", pairs)], settings=AuditSettings(n_boot=B, seed=5))
    w = cmp.words.xs("skin_L", level="property")
    # word scores: A x = mean(3, 5, 4) = 4, A y = 0, B x = 1, B y = 0
    assert w.loc[("x", "A"), "estimate"] == pytest.approx(4.0)
    assert w.loc[("y", "A"), "estimate"] == pytest.approx(0.0)
    assert w.loc[("x", "B"), "estimate"] == pytest.approx(1.0)
    # topic = model score: A (|4| + |0|) / 2 = 2, B 0.5
    assert cmp.model.loc[("skin_L", "A"), "estimate"] == pytest.approx(2.0)
    assert cmp.model.loc[("skin_L", "B"), "estimate"] == pytest.approx(0.5)
    t = cmp.word_tests.xs("skin_L", level="property")
    # x: per-seed differences (2, 4, 3): all positive, T- = 0, exact two-sided p = 2 / 2^3 = 0.25
    x = t.loc[("x", "A", "B")]
    assert x["estimate"] == pytest.approx(3.0) and x["statistic"] == 0 and x["pvalue"] == pytest.approx(0.25)
    assert x["pvalue"] == pytest.approx(sps.wilcoxon([2, 4, 3]).pvalue)
    # y: differences (0, 1, -1): the zero is dropped, T+ = T- = 1.5, p = 1
    y = t.loc[("y", "A", "B")]
    assert y["statistic"] == pytest.approx(1.5) and y["pvalue"] == pytest.approx(1.0)
    # Holm over the two words of the one pair: 0.5, 1
    assert list(t["pvalue_adjusted"]) == pytest.approx([0.5, 1.0])
    # model difference 1.5 with its paired bootstrap, recomputed independently with the same seed draws
    wts = cluster_bootstrap_weights(3, B, 5)  # seeds sorted s1, s2, s3
    a = np.array([[3.0, 5.0, 4.0], [0.0, 1.0, -1.0]])
    b = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    d = []
    for wrow in wts:
        ma = (a * wrow).sum(axis=1) / wrow.sum()
        mb = (b * wrow).sum(axis=1) / wrow.sum()
        d.append(np.abs(ma).mean() - np.abs(mb).mean())
    d = np.array(d)
    m = cmp.model_tests.loc[("skin_L", "A", "B")]
    assert m["estimate"] == pytest.approx(1.5)
    assert m["ci_low"] == pytest.approx(np.quantile(d, 0.025)) and m["ci_high"] == pytest.approx(np.quantile(d, 0.975))
    assert m["se"] == pytest.approx(d.std(ddof=1))
    assert m["pvalue"] == pytest.approx(2 * sps.norm.sf(1.5 / d.std(ddof=1)))
    assert m["pvalue_adjusted"] == pytest.approx(adjust_pvalues([m["pvalue"]])[0])
    assert cmp.ranking.loc[("skin_L", "model"), "most"] == "A"


def _write_run(folder, run):
    rep = Report(title=run.name)
    rep.write(folder, extra_files=run_files(run))
    return folder


def test_cli_compare_synthetic_runs_and_bad_inputs(tmp_path, capsys):
    a = _write_run(tmp_path / "a", _run("sd", {"doctor": -12.0, "nurse": -10.0}, 1))
    b = _write_run(tmp_path / "b", GenerativeRun("other", _run("sd", {}, 2).pairs))
    back = load_run(a)
    assert back.generators == ["sd"] and len(back.pairs) == 16 * 8
    out = tmp_path / "cmp"
    rc = main(["audit", "generative", "compare", str(a), str(b), "-o", str(out), "--n-boot", "200",
               "--fail-if", "model_difference_skin_L>2"])
    assert rc == 1
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["failed"] == ["model_difference_skin_L>2"]
    assert doc["meta"]["generators"] == "synthetic:sd, other:sd"  # same generator name: prefixed with the spec
    assert any("synthetic:sd changes skin_L more than other:sd over all words" in f["sentence"] for f in doc["findings"])
    assert (out / "tables" / "generative-compare__most-and-least-biased.parquet").is_file()
    rk = pd.read_parquet(out / "tables" / "generative-compare__most-and-least-biased.parquet")
    assert rk.set_index(["property", "scope"]).loc[("skin_L", "model"), "most"] == "synthetic:sd"
    capsys.readouterr()
    # a different design: exit 2, one line naming what differs
    c = _write_run(tmp_path / "c", _run("x", {}, 3, seeds=[f"p{s:02d}" for s in range(1, 16)]))
    assert main(["audit", "generative", "compare", str(a), str(c), "-o", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"seeds of sd ({a}) and x ({c}) are not the same: 1 only in sd (p00)" in err
    # not a run folder
    (tmp_path / "empty").mkdir()
    assert main(["audit", "generative", "compare", str(a), str(tmp_path / "empty"), "-o", str(tmp_path / "bad")]) == 2
    assert PAIRS_FILE in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.vision
def test_cli_end_to_end_two_real_runs(tmp_path, capsys):
    """Two real runs of the built-in editor (3 seeds, 3 words): the one that darkens is the more biased."""
    words = ["doctor", "nurse", "pilot"]
    runs = []
    for name, shift in (("darkens", -10.0), ("neutral", 0.0)):
        d = tmp_path / name
        d.mkdir()
        (d / "words.toml").write_text("[words]\nprofessions = [" + ", ".join(f'"{w}"' for w in words) + "]\n")
        shifts = f'\n[generator.shifts]\ndoctor = {{ L = {shift} }}\nnurse = {{ L = {shift} }}\n' if shift else ""
        (d / "spec.toml").write_text(f'name = "{name}"\nworkdir = "work"\n[seeds]\nlimit = 3\n[prompts]\n'
                                     f'words = "words.toml"\n[generator]\nkind = "builtin"\nname = "{name}"\n'
                                     f'noise_L = 0.5\n{shifts}[assessors]\nage_gender = "none"\n[scores]\nn_boot = 50\n')
        assert main(["audit", "generative", str(d / "spec.toml"), "-o", str(d / "out"), "-j", "1", "--no-progress"]) == 0
        assert (d / "out" / PAIRS_FILE).is_file()
        runs.append(str(d / "out"))
    out = tmp_path / "cmp"
    assert main(["audit", "generative", "compare", *runs, "-o", str(out), "--n-boot", "300"]) == 0
    rk = pd.read_parquet(out / "tables" / "generative-compare__most-and-least-biased.parquet").set_index(["property", "scope"])
    top = rk.loc[("skin_L", "model")]
    assert top["most"] == "darkens" and top["least"] == "neutral" and top["ci_low"] > 0
    ws = pd.read_parquet(out / "tables" / "generative-compare__word-scores-side-by-side.parquet")
    doc = ws[(ws["property"] == "skin_L") & (ws["word"] == "doctor")].iloc[0]
    assert doc["darkens"] < -5 and abs(doc["neutral"]) < 2


# -- regressions (review 3) -------------------------------------------------------------------------------------------

def test_one_seed_photo_gives_no_topic_or_model_test():
    """One seed: every resample is the same photo, the bootstrap SE is float noise; it must not give p = 0 flags."""
    a, b = _run("a", {"doctor": -30.0, "nurse": 20.0}, 1, n_seeds=1, noise=0.1), _run("b", {}, 2, n_seeds=1, noise=0.1)
    cmp = compare_generative([a, b], settings=AuditSettings(n_boot=100))
    for tests in (cmp.topic_tests, cmp.model_tests):
        assert tests["pvalue"].isna().all() and tests["ci_low"].isna().all() and not tests["flagged"].any()
    m = cmp.model_tests.loc[("skin_L", "a", "b")]
    assert m["estimate"] == pytest.approx(m["score_a"] - m["score_b"]) and m["estimate"] > 5  # still reported
    assert cmp.quantities()["n_flagged_differences"] == 0
    assert not cmp.ranking["flagged"].any() and cmp.ranking["pvalue"].isna().all()
    assert any("need at least 2 seed photos" in n and "all words" in n for n in cmp.notes)
    # two seeds are enough to test
    two = compare_generative([_run("a", {"doctor": -30.0}, 1, n_seeds=2), _run("b", {}, 2, n_seeds=2)],
                             settings=AuditSettings(n_boot=100))
    assert two.model_tests["pvalue"].notna().all() and not any("need at least" in n for n in two.notes)
    # per topic: activities keeps one common seed (b lost the others), professions all three
    b3 = _run("b", {}, 2, n_seeds=3)
    b3.pairs.loc[(b3.pairs["topic"] == "activities") & (b3.pairs["seed_id"] != "p00"), "skin_L"] = np.nan
    c3 = compare_generative([_run("a", {}, 1, n_seeds=3), b3], settings=AuditSettings(n_boot=100))
    tt = c3.topic_tests.xs("skin_L", level="property")
    assert np.isnan(tt.loc[("activities", "a", "b"), "pvalue"]) and np.isfinite(tt.loc[("professions", "a", "b"), "pvalue"])
    assert any("topic activities" in n for n in c3.notes)


def test_paired_difference_test_float_noise_se_is_zero():
    from fairvision.stats.paired import paired_difference_test
    ra = np.array([0.1 + 0.2, 0.3] * 25)  # 0.30000000000000004 and 0.3: an SE of ~3e-17, not a real spread
    rb = np.full(50, 0.3)
    assert 0 < np.std(ra - rb, ddof=1) < 1e-15
    r = paired_difference_test(0.5, 0.2, ra, rb)
    assert np.isnan(r.pvalue) and r.se == 0 and r.estimate == pytest.approx(0.3)  # was p = 0
    assert paired_difference_test(0.3, 0.3, ra, rb).pvalue == 1.0
    # an SE just above the tolerance is a real (tiny) spread: tested as before
    rc = rb + np.array([0.0, 1e-9] * 25)
    r2 = paired_difference_test(2e-9, 0.0, rc, rb)
    assert r2.pvalue == pytest.approx(2 * sps.norm.sf(2e-9 / np.std(rc - rb, ddof=1)))


def test_same_run_twice_is_an_error(tmp_path, capsys):
    a = _run("a", {"doctor": -5.0}, 1)
    with pytest.raises(FairvisionError, match=r"^compare: generator a is given twice \(inputs 1 and 2\)"):
        compare_generative([a, a])
    with pytest.raises(FairvisionError, match="given twice"):
        compare_generative([a, _run("b", {}, 2), a], names=["x", "y", "z"])
    folder = _write_run(tmp_path / "ra", a)
    with pytest.raises(FairvisionError, match=r"given twice \(inputs 1 and 2\)"):
        compare_generative([folder, tmp_path / "ra" / ".." / "ra"])
    capsys.readouterr()
    assert main(["audit", "generative", "compare", str(folder), str(folder), "-o", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "generator a of" in err and "given twice" in err
    assert not (tmp_path / "bad").exists()
    # a copy of the same outputs under another generator name is a different input: allowed
    compare_generative([a, GenerativeRun("copy", a.pairs.assign(generator="b"))], settings=AuditSettings(n_boot=20))


def test_design_check_compares_keys_as_strings():
    a = _run("a", {"doctor": -6.0}, 1, seeds=list(range(16)))
    b = _run("b", {}, 2, seeds=[str(s) for s in range(16)])
    mixed = compare_generative([a, b], settings=AuditSettings(n_boot=100))
    same = compare_generative([GenerativeRun("synthetic", a.pairs.assign(seed_id=a.pairs["seed_id"].astype(str))), b],
                              settings=AuditSettings(n_boot=100))
    assert mixed.settings["n_seeds"] == 16
    pd.testing.assert_frame_equal(mixed.word_tests, same.word_tests)
    pd.testing.assert_frame_equal(mixed.model_tests, same.model_tests)
    # an int topic vs its string is the same topic, as in the analysis
    c = _run("c", {}, 3, words={**{w: 1 for w in TOPIC1}, **{w: "activities" for w in TOPIC2}})
    d = _run("d", {}, 4, words={**{w: "1" for w in TOPIC1}, **{w: "activities" for w in TOPIC2}})
    assert list(compare_generative([c, d], settings=AuditSettings(n_boot=20)).settings["topics"]) == ["1", "activities"]
    # seeds that differ as strings still differ
    e = _run("e", {}, 5, seeds=[float(s) for s in range(16)])
    with pytest.raises(FairvisionError, match=r"seeds of a \(run 1\) and e \(run 2\) are not the same: 16 only in a"):
        compare_generative([a, e])


def _section_text(sec):
    return [f.sentence for f in sec.findings], [b["text"] for b in sec.blocks if b["type"] == "note"]


def test_report_says_no_difference_only_when_nothing_is_flagged():
    from fairvision.report.sections.generative import compare_section
    shifts = {"doctor": -5.0}
    cmp = compare_generative([_run("a", shifts, 10), _run("b", shifts, 11), _run("c", shifts, 12)],
                             settings=AuditSettings(n_boot=100))
    assert cmp.quantities()["n_flagged_differences"] == 0
    findings, _ = _section_text(compare_section(cmp))
    assert any(f.startswith("No generator differs") for f in findings)
    # a topic difference flagged between two generators that are not the topic's most and least biased
    rk = cmp.ranking.loc[("skin_L", "professions")]
    other = next(i for i, r in cmp.topic_tests.xs("professions", level="topic", drop_level=False).iterrows()
                 if {i[2], i[3]} != {rk["most"], rk["least"]})
    cmp.topic_tests.loc[other, "flagged"] = True
    assert not cmp.ranking["flagged"].any() and not cmp.word_tests["flagged"].any()
    findings, notes = _section_text(compare_section(cmp))
    assert not any(f.startswith("No generator differs") for f in findings)
    assert any(n.startswith("1 more flagged topic or model differences") for n in notes)


def test_model_topic_name_n_boot_and_setting_notes():
    words = {**{w: "model" for w in TOPIC1}, **{w: "activities" for w in TOPIC2}}
    with pytest.raises(FairvisionError, match=r"^compare: a topic is named 'model'"):
        compare_generative([_run("a", {}, 1, words=words), _run("b", {}, 2, words=words)])
    a, b = _run("a", {}, 1), _run("b", {}, 2)
    with pytest.raises(FairvisionError, match=r"^n_boot must be at least 1 to compare generators, not 0$"):
        compare_generative([a, b], settings=AuditSettings(n_boot=0))
    a.settings = {"alpha": 0.01, "level": 0.95}
    b.settings = {"alpha": 0.05, "level": 0.9}
    cmp = compare_generative([a, b], settings=AuditSettings(n_boot=20))
    assert "the runs used alpha 0.01 (run 1), 0.05 (run 2); this comparison uses alpha 0.05" in cmp.notes
    assert "the runs used level 0.95 (run 1), 0.9 (run 2); this comparison uses level 0.95" in cmp.notes
    a.settings = b.settings = {"alpha": 0.05, "level": 0.95}
    assert not any("the runs used" in n for n in compare_generative([a, b], settings=AuditSettings(n_boot=20)).notes)

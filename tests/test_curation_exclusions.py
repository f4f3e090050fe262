"""`fairvision curate exclusions`: what removing samples does to who is in a dataset (docs/METHODS.md §13.12).
Shares, shifts, NSD and subject counts against hand counts; the kept-vs-removed test against scipy; a planted
exclusion flagged and a random one not; the review's Wilson interval against the formula worked by hand; the
command's errors; the report in a real browser."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.curation.exclusions import audit_exclusions
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main

FAST = AuditSettings(n_boot=200, min_subjects=1)


def _tiny():
    # 10 images of 7 people; p1 (two F images) and one image of p2 are removed
    data = pd.DataFrame({
        "sample_id": [f"s{i}" for i in range(10)],
        "subject_id": ["p1", "p1", "p2", "p2", "p3", "p4", "p5", "p6", "p7", "p7"],
        "gender": ["F", "F", "F", "F", "F", "F", "M", "M", "M", "M"],
        "age": ["y", "o", "y", "y", "o", "o", "y", "o", "y", "y"],
    })
    kept = np.ones(10, bool)
    kept[[0, 1, 2]] = False
    return data, kept


def test_shares_nsd_and_subjects_match_hand_counts():
    data, kept = _tiny()
    a = audit_exclusions(data, kept, ["gender", "age"], settings=FAST)
    g = a.shifts[("gender",)]
    assert g["n_before"].tolist() == [6, 4] and g["n_after"].tolist() == [3, 4] and g["n_removed"].tolist() == [3, 0]
    assert g["share_before"].tolist() == pytest.approx([0.6, 0.4])
    assert g["share_after"].tolist() == pytest.approx([3 / 7, 4 / 7])
    assert g["shift_pp"].tolist() == pytest.approx([100 * (3 / 7 - 0.6), 100 * (4 / 7 - 0.4)])
    assert g["removed_rate"].tolist() == pytest.approx([0.5, 0.0])
    # two groups: NSD = |p1 - p2|
    assert a.nsd.loc["gender", "nsd_before"] == pytest.approx(0.2)
    assert a.nsd.loc["gender", "nsd_after"] == pytest.approx(1 / 7)
    assert a.nsd.loc["gender", "nsd_change"] == pytest.approx(1 / 7 - 0.2)
    # subjects: F has p1..p4 before, p2..p4 after (p1 lost); M has p5..p7 throughout
    assert g["n_subjects_before"].tolist() == [4, 3] and g["n_subjects_after"].tolist() == [3, 3]
    assert a.n_subjects_before == 7 and a.n_subjects_after == 6 and a.n_subjects_lost == 1
    # intersections: age x gender, by hand (F,o) 3 -> 2 (s1 removed)
    ga = a.shifts[("gender", "age")]
    assert ga.loc[("F", "o"), "n_before"] == 3 and ga.loc[("F", "o"), "n_after"] == 2
    assert ga.loc[("F", "y"), "n_before"] == 3 and ga.loc[("F", "y"), "n_after"] == 1
    # the bootstrap interval of a shift holds the shift
    assert (g["shift_ci_low"] <= g["shift_pp"] + 1e-9).all() and (g["shift_pp"] <= g["shift_ci_high"] + 1e-9).all()
    q = a.quantities()
    assert q["n_removed"] == 3 and q["n_subjects_lost"] == 1
    assert q["max_share_shift_pp.gender"] == pytest.approx(100 * (0.6 - 3 / 7))


def _random(n=3000, seed=0, planted=True):
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)],
                         "skin": rng.choice(["light", "medium", "dark"], n),
                         "gender": rng.choice(["F", "M"], n),
                         "age": rng.choice(["18-29", "30-39", "40-49", "60+"], n)})
    kept = np.ones(n, bool)
    if planted:  # remove 60% of one group
        old = np.flatnonzero(data["age"] == "60+")
        kept[rng.choice(old, int(0.6 * old.size), replace=False)] = False
    else:  # remove 20% at random
        kept[rng.choice(n, n // 5, replace=False)] = False
    return data, kept


def test_kept_vs_removed_test_matches_scipy():
    data, kept = _random()
    a = audit_exclusions(data, kept, ["skin", "gender", "age"], max_k=1, settings=FAST)
    for attr in ("skin", "age"):  # more than two groups: Pearson's chi-square, no continuity correction
        table = pd.crosstab(data[attr], kept).to_numpy()
        ref = stats.chi2_contingency(table, correction=False)
        assert a.tests.loc[attr, "statistic"] == pytest.approx(ref.statistic)
        assert a.tests.loc[attr, "pvalue"] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
    table = pd.crosstab(data["gender"], kept).to_numpy()  # two groups: Fisher's exact test
    assert a.tests.loc["gender", "pvalue"] == pytest.approx(stats.fisher_exact(table).pvalue)
    # corrected over the three attributes (Holm)
    raw = a.tests["pvalue"].to_numpy()
    order = np.argsort(raw)
    holm = np.maximum.accumulate(np.minimum(1, raw[order] * (3 - np.arange(3))))
    assert a.tests["pvalue_adjusted"].to_numpy()[order] == pytest.approx(holm)


def test_planted_exclusion_is_flagged_and_a_random_one_is_not():
    data, kept = _random(planted=True)
    a = audit_exclusions(data, kept, ["skin", "gender", "age"], max_k=1, settings=FAST)
    assert a.significant() == ["age"]
    names, group, shift = a.largest_shift()
    assert names == ("age",) and group == "60+" and shift < -5
    t = a.shifts[("age",)]
    assert t.loc["60+", "removed_rate"] == pytest.approx(0.6, abs=0.01)
    assert t.loc["60+", "shift_ci_high"] < 0 < t.loc["18-29", "shift_ci_low"]
    data, kept = _random(planted=False, seed=3)
    b = audit_exclusions(data, kept, ["skin", "gender", "age"], max_k=1, settings=FAST)
    assert b.significant() == [] and (b.tests["pvalue_adjusted"] > 0.05).all()
    assert b.quantities()["max_share_shift_pp"] < 2


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_review_rate_wilson_interval_and_expected_number():
    # FHIBE's sample: 400 subjects reviewed, 14 found online, out of 2,017 subjects left (one image each here)
    n = 2017
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "g": np.where(np.arange(n) % 2, "a", "b")})
    review = np.full(n, np.nan)
    review[:400] = 0
    review[:14] = 1
    a = audit_exclusions(data, np.ones(n, bool), ["g"], review=review, settings=FAST)
    r = a.review.loc["images"]
    lo, hi = _wilson(14, 400)
    assert r["rate"] == pytest.approx(0.035) and r["n_reviewed"] == 400 and r["n_suspicious"] == 14
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
    assert r["collection"] == n and r["expected"] == pytest.approx(0.035 * n)
    assert (r["expected_ci_low"], r["expected_ci_high"]) == pytest.approx((lo * n, hi * n))
    by = a.review_by_group.loc["g"]
    assert by.loc["b", "n_reviewed"] == 200 and by.loc["b", "n_suspicious"] == 7  # even rows 0..12: 7 of them
    assert (by.loc["b", "ci_low"], by.loc["b", "ci_high"]) == pytest.approx(_wilson(7, 200))


def test_review_counts_a_subject_as_suspicious_when_any_reviewed_image_is():
    data, kept = _tiny()  # p1 is removed: the collection after the exclusions has 6 subjects and 7 images
    review = np.full(10, np.nan)
    review[[3, 4, 5]] = [1, 0, 0]  # p2 (one of two images reviewed, suspicious), p3, p4 fine
    review[[8, 9]] = [0, 1]  # p7: one of two reviewed images suspicious
    a = audit_exclusions(data, kept, ["gender"], review=review, settings=FAST)
    img, subj = a.review.loc["images"], a.review.loc["subjects"]
    assert (img["n_reviewed"], img["n_suspicious"], img["collection"]) == (5, 2, 7)
    assert (subj["n_reviewed"], subj["n_suspicious"], subj["collection"]) == (4, 2, 6)
    assert subj["expected"] == pytest.approx(0.5 * 6)
    assert (subj["expected_ci_low"], subj["expected_ci_high"]) == pytest.approx(tuple(6 * x for x in _wilson(2, 4)))
    assert a.quantities()["suspicious_rate"] == 0.5


def test_reasons_say_which_reason_removes_which_group():
    data, _ = _random(seed=5, planted=False)
    rng = np.random.default_rng(6)
    kept = np.ones(len(data), bool)
    reasons = np.full(len(data), None, dtype=object)
    old = np.flatnonzero(data["age"] == "60+")
    qa = rng.choice(old, old.size // 2, replace=False)
    consent = rng.choice(np.setdiff1d(np.arange(len(data)), qa), 300, replace=False)
    kept[qa] = kept[consent] = False
    reasons[qa], reasons[consent] = "qa", "consent"
    a = audit_exclusions(data, kept, ["gender", "age"], max_k=1, reasons=reasons, settings=FAST)
    t = a.reason_tests
    assert bool(t.loc[("qa", "age"), "differs"]) and not t.loc["consent", "differs"].any()
    assert a.by_reason.loc[("qa", "age", "60+"), "n_removed"] == qa.size
    assert a.coverage.reasons["n"].to_dict() == {"qa": qa.size, "consent": 300}
    assert len(t) == 4 and (t["pvalue_adjusted"] >= t["pvalue"]).all()


# ------------------------------------------------------------------ the command


def _write(d: Path, planted=True):
    data, kept = _random(n=1200, seed=1, planted=planted)
    data["subject_id"] = [f"p{i // 2}" for i in range(len(data))]
    data.to_csv(d / "samples.csv", index=False)
    rem = data.loc[~kept, ["sample_id"]].assign(reason=np.where(np.arange((~kept).sum()) % 3, "qa", "consent"))
    rem.to_csv(d / "removed.csv", index=False)
    data.loc[kept, ["sample_id"]].to_csv(d / "kept.csv", index=False)
    rev = data.loc[kept, ["sample_id"]].iloc[:150].assign(suspicious=["true"] * 6 + ["false"] * 144)
    rev.to_csv(d / "review.csv", index=False)
    return data, kept


def test_command_writes_the_report_and_gates(tmp_path, capsys):
    _write(tmp_path)
    out = tmp_path / "rep"
    rc = main(["curate", "exclusions", str(tmp_path / "samples.csv"), "--removed", str(tmp_path / "removed.csv"),
               "-a", "gender", "-a", "age", "--review", str(tmp_path / "review.csv"), "--n-boot", "100",
               "-o", str(out), "--fail-if", "max_share_shift_pp>5"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "exclusions: " in err and "differs by age" in err and "max_share_shift_pp>5" in err
    doc = json.loads((out / "report.json").read_text())
    assert doc["findings"][0]["severity"] == "high"
    assert any("change the demographics" in f["sentence"] for f in doc["findings"])
    assert any(f["quantity"] == "suspicious_rate" for f in doc["findings"])
    ids = [s["id"] for s in doc["sections"]]
    assert ids == ["exclusions", "exclusions-review", "exclusions-kept"]
    assert (out / "tables" / "exclusions__shifts-age.parquet").exists()
    # --kept gives the same comparison
    out2 = tmp_path / "rep2"
    rc = main(["curate", "exclusions", str(tmp_path / "samples.csv"), "--kept", str(tmp_path / "kept.csv"),
               "-a", "gender", "-a", "age", "--n-boot", "100", "-o", str(out2)])
    assert rc == 0, capsys.readouterr().err
    a = pd.read_parquet(out / "tables" / "exclusions__shifts-age.parquet")
    b = pd.read_parquet(out2 / "tables" / "exclusions__shifts-age.parquet")
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("args, message", [
    (["--removed", "{d}/removed.csv", "--kept", "{d}/kept.csv"], "give either --removed TABLE or --kept TABLE"),
    ([], "give either --removed TABLE or --kept TABLE"),
    (["--removed", "{d}/bad.csv"], "bad.csv: row 2: sample_id 'nope' is not in"),
    (["--removed", "{d}/removed.csv", "--reason-col", "why"], "no reason column 'why'"),
    (["--removed", "{d}/removed.csv", "--review", "{d}/badreview.csv"], "badreview.csv: row 1: column 'suspicious'"),
    (["--removed", "{d}/removed.csv", "-a", "height"], "height"),
])
def test_command_errors_are_one_line(tmp_path, capsys, args, message):
    _write(tmp_path)
    pd.DataFrame({"sample_id": ["s1", "nope"]}).to_csv(tmp_path / "bad.csv", index=False)
    pd.DataFrame({"sample_id": ["s1"], "suspicious": ["maybe"]}).to_csv(tmp_path / "badreview.csv", index=False)
    d = str(tmp_path)
    rc = main(["curate", "exclusions", f"{d}/samples.csv", "-a", "gender", *[a.replace("{d}", d) for a in args],
               "-o", f"{d}/out"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "out" / "report.html").exists()


@pytest.mark.browser
def test_report_in_the_browser(tmp_path):
    from test_report_browser import _browser  # tests/ is on sys.path (pytest's default "prepend" import mode)
    from test_report_browser_new import check_in_browser

    _write(tmp_path)
    out = tmp_path / "rep"
    rc = main(["curate", "exclusions", str(tmp_path / "samples.csv"), "--removed", str(tmp_path / "removed.csv"),
               "-a", "gender", "-a", "age", "-a", "skin", "--review", str(tmp_path / "review.csv"), "--n-boot", "50",
               "-o", str(out)])
    assert rc == 0
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, out / "report.html", shots / "curate-exclusions.png")
    assert doc["findings"] and "What the exclusions do to the dataset" in text and "Manual review" in text


# ------------------------------------------------------------------ review fixes


def _blocks_text(section):
    return " ".join(str(b.get("text", "")) + " " + str(b.get("caption", "")) for b in section.blocks)


def test_kept_section_speaks_of_images_kept_not_of_a_step_that_succeeds():
    # the coverage section's wording ("The exclusions succeeds less often for 60+") read as the opposite of the truth
    from fairvision.report.sections.curation_exclusions import exclusions_sections

    data, kept = _random()
    a = audit_exclusions(data, kept, ["skin", "age"], max_k=1, settings=FAST)
    secs = {s.id: s for s in exclusions_sections(a)}
    kept_sec = secs["exclusions-kept"]
    assert "succe" not in _blocks_text(kept_sec).lower() and "under-represent" not in _blocks_text(kept_sec)
    df = kept_sec.tables["kept_by_group"].reset_index()
    hand = pd.crosstab(data["age"], kept)  # kept per age group, counted by pandas
    row = df[(df["attribute"] == "age") & (df["group"] == "60+")].iloc[0]
    assert row["n_kept"] == hand.loc["60+", True] and row["share_kept"] == pytest.approx(
        hand.loc["60+", True] / hand.loc["60+"].sum())
    assert not any("succe" in f.sentence.lower() for s in secs.values() for f in s.findings)


def test_findings_name_groups_large_enough_to_judge_and_the_shifts_interval():
    # 60 images of a (40 removed), 30 of b and of d (none removed), 2 of a tiny group c (both removed)
    n = 122
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)],
                         "g": ["a"] * 60 + ["b"] * 30 + ["d"] * 30 + ["c"] * 2})
    kept = np.ones(n, bool)
    kept[:40] = False
    kept[120:] = False
    a = audit_exclusions(data, kept, ["g"], settings=AuditSettings(n_boot=200, min_subjects=10))
    from fairvision.report.sections.curation_exclusions import exclusions_section

    s = exclusions_section(a)
    f = next(f for f in s.findings if f.sentence.startswith("The exclusions remove"))
    # c (100% of 2 removed) is too small to judge: a (67% of 60) is named, against b (0% of 30)
    assert "g = a more often (67% of 60)" in f.sentence and "g = b (0% of 30)" in f.sentence, f.sentence
    # the largest shift is a's, 60/122 -> 20/80 of the images, a fall: the finding's value is its size and the
    # interval is the shift's, turned with it (it was NSD's)
    t = a.shifts[("g",)]
    assert t.loc["a", "shift_pp"] == pytest.approx(100 * (20 / 80 - 60 / 122))
    assert f.value == pytest.approx(100 * (60 / 122 - 20 / 80))
    assert (f.ci_low, f.ci_high) == pytest.approx((-t.loc["a", "shift_ci_high"], -t.loc["a", "shift_ci_low"]))
    assert f.ci_low <= f.value <= f.ci_high


def test_rows_without_a_value_are_counted_not_dropped_silently():
    from fairvision.schema import Schema

    data, kept = _tiny()
    data.loc[[0, 4, 5], "age"] = None  # three images without an age, one of them (row 0) removed
    a = audit_exclusions(data, kept, ["gender", "age"], schema=Schema().declare(["gender", "age"], missing="drop"),
                         settings=FAST)
    assert a.shifts[("age",)]["n_before"].sum() == 7
    assert any(w.startswith("age: 3 images without a value (1 of them removed)") for w in a.warnings), a.warnings
    assert not any(w.startswith("gender:") and "without a value" in w for w in a.warnings)


def test_subject_column_notes_that_the_kept_vs_removed_test_counts_images():
    from fairvision.report.sections.curation_exclusions import exclusions_section

    data, kept = _tiny()
    text = _blocks_text(exclusions_section(audit_exclusions(data, kept, ["gender"], settings=FAST)))
    assert "count images as independent" in text and "No subject column" not in text
    text = _blocks_text(exclusions_section(audit_exclusions(data.drop(columns="subject_id"), kept, ["gender"],
                                                            settings=FAST)))
    assert "No subject column" in text and "count images as independent" not in text


def test_command_reads_review_words_and_numeric_ids(tmp_path, capsys):
    n = 60
    data = pd.DataFrame({"sample_id": np.arange(1000, 1000 + n), "g": np.where(np.arange(n) % 2, "a", "b")})
    data.to_csv(tmp_path / "s.csv", index=False)
    pd.DataFrame({"sample_id": [1000, 1001]}).to_csv(tmp_path / "rm.csv", index=False)
    marks = [" Yes", "TRUE", "1.0", "0", "no", "False", "y", "n"]  # 4 suspicious, 4 fine
    pd.DataFrame({"sample_id": np.arange(1010, 1018), "suspicious": marks}).to_csv(tmp_path / "rv.csv", index=False)
    out = tmp_path / "rep"
    rc = main(["curate", "exclusions", str(tmp_path / "s.csv"), "--removed", str(tmp_path / "rm.csv"), "-a", "g",
               "--review", str(tmp_path / "rv.csv"), "--n-boot", "0", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    review = pd.read_parquet(out / "tables" / "exclusions-review__review.parquet")
    assert review["n_reviewed"].tolist() == [8] and review["n_suspicious"].tolist() == [4]
    assert review["collection"].tolist() == [n - 2]  # every reviewed sample is kept: the kept images


def test_nsd_change_interval_is_bias_corrected_and_holds_the_estimate():
    # a perfectly balanced table (NSD 0 before) with one group thinned: the replicates' NSD is biased upwards, more
    # before than after, and the plain percentile interval of the change missed the estimate (0.067 outside
    # [0.013, 0.060] on the bundled demo)
    n = 540
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "age": np.repeat([f"a{i}" for i in range(9)], 60)})
    kept = np.ones(n, bool)
    kept[480:510] = False  # half of the last group
    a = audit_exclusions(data, kept, ["age"], settings=AuditSettings(n_boot=400, seed=1))
    row = a.nsd.loc["age"]
    p = np.r_[np.full(8, 60), 30] / 510  # NSD after by hand: sigma(p) G / sqrt(G - 1)
    assert row["nsd_before"] == 0 and row["nsd_after"] == pytest.approx(p.std() * 9 / math.sqrt(8))
    assert row["nsd_change_ci_low"] <= row["nsd_change"] <= row["nsd_change_ci_high"]

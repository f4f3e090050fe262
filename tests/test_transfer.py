"""Bias-transfer studies (docs/METHODS.md §11): subset designs, the study table, the paired comparison."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.settings import AuditSettings
from fairvision.audits.transfer import audit_transfer, design_subsets, read_design, write_design
from fairvision.audits.transfer.design import apportion
from fairvision.audits.transfer.study import DEFAULTS as STUDY
from fairvision.cli import main
from fairvision.errors import FairvisionError, ParameterError
from fairvision.report import Report
from fairvision.report.sections.transfer import design_section, study_section
from fairvision.stats.multiclass import disparity_replicates, overall_disparity_ci
from fairvision.stats.paired import paired_difference_test, paired_od_tests
from fairvision.stats.resample import cluster_bootstrap_weights


def planted_table(n_subjects: int = 900, seed: int = 0) -> pd.DataFrame:
    """Two images per subject; gender 30/70 (planted representational imbalance) and an expression label
    that depends on gender (planted stereotype); three classes."""
    rng = np.random.default_rng(seed)
    gender = rng.choice(["F", "M"], n_subjects, p=[0.3, 0.7])
    p_happy = np.where(gender == "F", 0.6, 0.2)
    rows = []
    for s in range(n_subjects):
        for k in range(2):
            u = rng.random()
            y = "happy" if u < p_happy[s] else ("angry" if u < p_happy[s] + 0.25 else "neutral")
            rows.append({"sample_id": f"s{s}_{k}", "subject_id": f"p{s}", "gender": gender[s], "expr": y,
                         "race": rng.choice(["a", "b", "c"], p=[0.6, 0.3, 0.1])})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def table():
    return planted_table()


@pytest.fixture(scope="module")
def design(table):
    return design_subsets(table, "expr", ["gender"], settings=AuditSettings(seed=3))


# -- composition ----------------------------------------------------------------------------------------------------

def test_apportion_is_exact_and_close():
    q = np.array([2.5, 2.5, 1.0, 0.0])
    a = apportion(q, 6)
    assert a.sum() == 6 and np.all(np.abs(a - q) < 1)
    assert list(apportion(np.array([1.2, 1.8]), 3)) == [1, 2]


def test_balanced_subset_has_equal_cells_and_zero_nsd_nmi(design):
    comp = design.composition
    bal = comp[(comp["subset"] == "balanced_gender") & (comp["attribute"] == "gender")]
    assert bal["n"].nunique() == 1 and bal["n"].iloc[0] > 0
    assert len(bal) == 3 * 2  # classes x groups
    row = design.summary.set_index("subset").loc["balanced_gender"]
    assert row["nsd.gender"] == pytest.approx(0.0, abs=1e-12)
    assert row["nmi.gender"] == pytest.approx(0.0, abs=1e-12)
    npmi = design.npmi[(design.npmi["subset"] == "balanced_gender")]
    assert np.allclose(npmi["npmi"].to_numpy(dtype=float), 0.0, atol=1e-12)


def test_single_group_subsets_have_the_balanced_per_class_counts_and_are_excluded(design):
    comp = design.composition[design.composition["attribute"] == "gender"]
    bal = comp[comp["subset"] == "balanced_gender"].groupby("class")["n"].sum()
    for g, other in (("F", "M"), ("M", "F")):
        one = comp[comp["subset"] == f"single_gender_{g}"]
        assert (one.loc[one["group"] == other, "n"] == 0).all()
        per_class = one.groupby("class")["n"].sum()
        assert per_class.equals(bal)
        row = design.summary.set_index("subset").loc[f"single_gender_{g}"]
        assert np.isnan(row["nsd.gender"]) and np.isnan(row["nmi.gender"])
        assert "one gender group only" in row["excluded.gender"]
    sizes = design.catalog.set_index("subset")["size"]
    assert sizes["single_gender_F"] == sizes["single_gender_M"] == sizes["balanced_gender"] == sizes["stratified_n" + str(sizes["balanced_gender"])]
    sec = design_section(design)
    notes = " ".join(b["text"] for b in sec.blocks if b["type"] == "note")
    assert "Excluded from the gender metrics: single_gender_F, single_gender_M" in notes


def test_stratified_subsets_keep_the_joint_distribution(table):
    d = design_subsets(table, "expr", ["gender"], designs=["stratified"], fractions=[0.5, 1.0], test_fraction=0.25,
                       settings=AuditSettings(seed=1))
    pool = d.subsets["stratified_f100"]
    half = d.subsets["stratified_f50"]
    assert len(half) == round(0.5 * len(pool))
    full_counts = pool.groupby(["expr", "gender"]).size()
    half_counts = half.groupby(["expr", "gender"]).size().reindex(full_counts.index, fill_value=0)
    assert np.all(np.abs(half_counts.to_numpy() - 0.5 * full_counts.to_numpy()) < 1)
    # nested: the smaller stratified subset lies inside the larger
    assert set(half["sample_id"]) <= set(pool["sample_id"])
    # the pool keeps the planted imbalance: NSD of a 30/70 split is 0.4 (about)
    assert d.summary.set_index("subset").loc["stratified_f100", "nsd.gender"] == pytest.approx(0.4, abs=0.08)


def test_exact_composition_with_a_size(table):
    d = design_subsets(table, "expr", ["gender"], designs=["balanced", "single", "stratified"], fractions=[1.0],
                       size=60, settings=AuditSettings(seed=0))
    comp = d.composition
    assert (comp.loc[comp["subset"] == "balanced_gender", "n"] == 10).all()
    for g in ("F", "M"):
        one = comp[(comp["subset"] == f"single_gender_{g}") & (comp["group"] == g)]
        assert (one["n"] == 20).all()
    assert len(d.subsets["stratified_n60"]) == 60
    with pytest.raises(ParameterError, match="^size 61 is not a multiple"):
        design_subsets(table, "expr", ["gender"], size=61)
    with pytest.raises(ParameterError, match="^size 6000 is too large"):
        design_subsets(table, "expr", ["gender"], size=6000)


def test_subjects_never_split_and_deterministic(table, design):
    test_subjects = set(design.test["subject_id"])
    for name, sub in design.subsets.items():
        assert not test_subjects & set(sub["subject_id"]), name
    # every test subject brings all its images
    per = table.groupby("subject_id").size()
    assert (design.test.groupby("subject_id").size() == per.loc[list(test_subjects)].sort_index()).all()
    again = design_subsets(table, "expr", ["gender"], settings=AuditSettings(seed=3))
    for name in design.subsets:
        assert design.subsets[name]["sample_id"].tolist() == again.subsets[name]["sample_id"].tolist()
    other = design_subsets(table, "expr", ["gender"], settings=AuditSettings(seed=4))
    assert other.test["sample_id"].tolist() != design.test["sample_id"].tolist()


def test_write_and_read_back(tmp_path, design):
    write_design(design, tmp_path, fmt="csv")
    man = json.loads((tmp_path / "design.json").read_text())
    assert man["label"] == "expr" and {e["subset"] for e in man["subsets"]} == set(design.subsets)
    back = read_design(tmp_path)
    pd.testing.assert_frame_equal(back.summary.reset_index(drop=True), design.summary.reset_index(drop=True),
                                  check_dtype=False)


# -- the numerics ---------------------------------------------------------------------------------------------------

def test_disparity_replicates_matches_overall_disparity_ci():
    rng = np.random.default_rng(0)
    n = 300
    y = rng.choice(["a", "b", "c"], n)
    g = rng.choice(["x", "y"], n)
    p = np.where(rng.random(n) < 0.8, y, "a")
    subj = np.arange(n) // 3
    ref = overall_disparity_ci(y, p, g, subjects=subj, n_boot=200, seed=5)
    w = cluster_bootstrap_weights(subj.max() + 1, 200, 5)
    one = disparity_replicates(y, p, g, subj, np.ones((1, subj.max() + 1)))
    reps = disparity_replicates(y, p, g, subj, w)
    assert one["od"][0] == pytest.approx(ref.estimate)
    assert np.nanquantile(reps["od"], 0.025) == pytest.approx(ref.ci_low)
    assert one["accuracy"][0] == pytest.approx(np.mean(y == p))


def test_paired_difference_test_hand_example():
    ra = np.array([0.5, 0.6, 0.7, 0.8])
    rb = np.array([0.1, 0.1, 0.2, 0.2])
    r = paired_difference_test(0.6, 0.15, ra, rb, level=0.5)
    d = ra - rb
    assert r.statistic == pytest.approx(0.45) and r.estimate == pytest.approx(0.45)
    assert r.se == pytest.approx(np.std(d, ddof=1))
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(np.quantile(d, [0.25, 0.75])))
    from scipy.stats import norm
    assert r.pvalue == pytest.approx(2 * norm.sf(0.45 / np.std(d, ddof=1)))


# -- the study ------------------------------------------------------------------------------------------------------

def planted_predictions(design, biased: str | None, seed: int, acc: float = 0.85, worse: float = 0.3):
    """Every model right with probability ``acc``; the ``biased`` subset's model only ``worse`` for gender F."""
    rng = np.random.default_rng(seed)
    t = design.test
    classes = np.array(["angry", "happy", "neutral"])
    out = {}
    for s in design.subsets:
        p_ok = np.where((s == biased) & (t["gender"] == "F").to_numpy(), worse, acc)
        ok = rng.random(len(t)) < p_ok
        wrong = np.array([rng.choice(classes[classes != y]) for y in t["expr"]])
        out[s] = pd.DataFrame({"sample_id": t["sample_id"], "prediction": np.where(ok, t["expr"], wrong)})
    return out


def test_planted_bias_is_flagged(design):
    res = audit_transfer(design, planted_predictions(design, "single_gender_M", seed=1),
                         settings=STUDY.replace(n_boot=400, seed=0))
    flag = res.flagged
    assert len(flag) == 1 and flag.iloc[0]["subset"] == "single_gender_M"
    od = res.od.set_index("subset")
    others = od.drop(index="single_gender_M")
    assert od.loc["single_gender_M", "ci_low"] > others["estimate"].max()
    cmp = res.comparisons
    mine = cmp[(cmp["a"] == "single_gender_M") | (cmp["b"] == "single_gender_M")]
    assert mine["significant"].all()
    sign = np.where(mine["a"] == "single_gender_M", 1, -1)
    assert (np.minimum(sign * mine["ci_low"], sign * mine["ci_high"]) > 0).all()
    rep = Report(title="t")
    rep.add(study_section(res))
    top = rep.findings()[0]
    assert top.severity == "high" and "single_gender_M" in top.sentence
    assert res.quantities()["n_flagged"] == 1


def test_no_planted_bias_no_flag_at_nominal_rate(design):
    rejections, pairs = 0, 0
    for seed in range(6):
        res = audit_transfer(design, planted_predictions(design, None, seed=100 + seed),
                             settings=STUDY.replace(n_boot=300, seed=seed))
        assert res.flagged.empty
        pairs += 1
        rejections += int(res.comparisons["significant"].any())
    # family-wise error (Holm) at 5%: at most one of six studies with any rejection
    assert rejections <= 1
    # raw p-values of one pair behave like a level-0.05 test
    raw = []
    for seed in range(40):
        preds = planted_predictions(design, None, seed=500 + seed)
        t = paired_od_tests(design.test["expr"], {k: preds[k]["prediction"] for k in ("balanced_gender", "stratified_f100")},
                            design.test["gender"], subjects=design.test["subject_id"], n_boot=200, seed=seed)
        raw.append(float(t["pvalue"].iloc[0]))
    assert np.mean(np.array(raw) < 0.05) <= 0.15


def test_prediction_errors(design):
    preds = planted_predictions(design, None, seed=0)
    bad = dict(preds)
    bad["balanced_gender"] = preds["balanced_gender"].iloc[1:]
    with pytest.raises(FairvisionError, match="no prediction for test sample"):
        audit_transfer(design, bad, settings=STUDY.replace(n_boot=10))
    with pytest.raises(FairvisionError, match="not a subset"):
        audit_transfer(design, {"nope": preds["balanced_gender"]}, settings=STUDY.replace(n_boot=10))
    with pytest.raises(ParameterError, match="^n_boot must be at least 1"):
        audit_transfer(design, preds, settings=STUDY.replace(n_boot=0))


# -- the command line -----------------------------------------------------------------------------------------------

def test_cli_subsets_and_audit(tmp_path, table, capsys):
    src = tmp_path / "t.csv"
    table.to_csv(src, index=False)
    out = tmp_path / "subs"
    assert main(["transfer", "subsets", str(src), "--label", "expr", "--attr", "gender", "-o", str(out), "--seed", "2"]) == 0
    assert (out / "report.html").is_file() and (out / "subsets" / "balanced_gender.csv").is_file()
    design = read_design(out)
    pdir = tmp_path / "preds"
    pdir.mkdir()
    for name, df in planted_predictions(design, "single_gender_F", seed=3).items():
        df.to_csv(pdir / f"{name}.csv", index=False)
    rep = tmp_path / "study"
    rc = main(["audit", "transfer", "--subsets", str(out), "--predictions", str(pdir), "-o", str(rep), "--n-boot", "200",
               "--fail-if", "n_flagged>0"])
    assert rc == 1
    doc = json.loads((rep / "report.json").read_text())
    assert any("single_gender_F" in f["sentence"] for f in doc["findings"])
    assert (rep / "report.html").is_file()


@pytest.mark.parametrize("args,message", [
    (["--label", "nope", "--attr", "gender"], "nope"),
    (["--label", "expr", "--attr", "expr"], "--label 'expr' is also an attribute"),
    (["--label", "expr", "--attr", "gender", "--size", "7"], "not a multiple"),
    (["--label", "expr", "--attr", "gender", "--fraction", "1.5"], "--fraction must lie in (0, 1]"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, table, capsys, args, message):
    src = tmp_path / "t.csv"
    table.to_csv(src, index=False)
    rc = main(["transfer", "subsets", str(src), *args, "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error:") and message in err and "\n" not in err


def test_cli_audit_bad_folders_exit_2(tmp_path, capsys):
    rc = main(["audit", "transfer", "--subsets", str(tmp_path / "none"), "--predictions", str(tmp_path), "-o",
               str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error:") and "\n" not in err


@pytest.mark.vision
def test_demo_runs_small(tmp_path, capsys):
    pytest.importorskip("dlib")
    pytest.importorskip("face_recognition_models")
    out = tmp_path / "demo"
    assert main(["transfer", "demo", "-o", str(out), "--limit", "90", "--n-boot", "100", "--workers", "1"]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert any("demonstration" in f["sentence"].lower() for f in doc["findings"])
    # photos without a face: counted on the terminal, and per gender and age band in a coverage section
    # (the face finder finds a face in every bundled FairFace photo, so there is usually nothing to say)
    no_face = doc["meta"]["no_face"]
    stdout = capsys.readouterr().out.splitlines()
    sections = {s["id"]: s for s in doc["sections"]}
    if no_face == 0:
        assert not any(ln.startswith("face description:") for ln in stdout)
        assert "transfer-coverage-face-description" not in sections
    else:
        assert any(ln.startswith(f"face description: {no_face} of 90 images left out (no face: {no_face})")
                   for ln in stdout)
        cov = sections["transfer-coverage-face-description"]
        by = next(b for b in cov["blocks"] if b.get("name") == "coverage_by_group")
        rows = [dict(zip(by["columns"], r)) for r in by["data"]]
        for attr in ("gender", "age_band"):
            part = [r for r in rows if r["attribute"] == attr]
            assert sum(r["n"] for r in part) == 90 and sum(r["n"] - r["n_ok"] for r in part) == no_face
    assert (out / "predictions").is_dir() and (out / "subsets" / "design.json").is_file()
    again = tmp_path / "again"
    assert main(["audit", "transfer", "--subsets", str(out / "subsets"), "--predictions", str(out / "predictions"),
                 "-o", str(again), "--n-boot", "50"]) == 0

"""The classifier audit (docs/METHODS.md §6.6): hand-worked rates and criteria, equality with fairlearn's
MetricFrame and criterion functions, the subject bootstrap, tests with a planted and a null bias, the threshold
sweep against a brute-force loop, multiclass one-vs-rest and OD, and the command line."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score, precision_score, roc_auc_score

from fairvision.audits.classifier import ClassifierOptions, audit_classifier
from fairvision.audits.gates import evaluate_conditions
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.stats.rates import rate_gap, roc_auc_by_group, threshold_sweep

fairlearn = pytest.importorskip("fairlearn.metrics")


def _hand() -> pd.DataFrame:
    """Three groups, counts worked by hand: A TP1 FN1 FP1 TN1, B TP2 FN0 FP1 TN1, C TP1 FN1 FP0 TN2."""
    pairs = {"A": [(1, 1), (1, 0), (0, 1), (0, 0)], "B": [(1, 1), (1, 1), (0, 1), (0, 0)],
             "C": [(1, 1), (1, 0), (0, 0), (0, 0)]}
    rows = [(g, t, p) for g, ps in pairs.items() for t, p in ps]
    df = pd.DataFrame(rows, columns=["g", "y_true", "y_pred"])
    df["sample_id"] = [f"s{i}" for i in range(len(df))]
    return df


def _settings(**kw) -> AuditSettings:
    return AuditSettings(**{"n_boot": 50, "min_subjects": 1, **kw})


def test_hand_worked_rates_and_criteria():
    res = audit_classifier(_hand(), ["g"], settings=_settings())
    r = res.rates.set_index("group")
    assert r.loc["A", ["tp", "fp", "fn", "tn"]].tolist() == [1, 1, 1, 1]
    assert r.loc["B", ["selection_rate", "tpr", "fpr", "fnr", "tnr"]].tolist() == [0.75, 1.0, 0.5, 0.0, 0.5]
    assert r.loc["B", "precision"] == pytest.approx(2 / 3)
    assert r.loc["B", ["npv", "accuracy", "balanced_accuracy"]].tolist() == [1.0, 0.75, 0.75]
    assert r.loc["C", ["selection_rate", "tpr", "fpr", "npv"]].tolist() == [0.25, 0.5, 0.0, 2 / 3]
    c = res.criteria.set_index("criterion")["estimate"]
    # selection .5/.75/.25, TPR .5/1/.5, FPR .5/.5/0, precision .5/(2/3)/1
    assert c["demographic_parity_difference"] == pytest.approx(0.5)
    assert c["demographic_parity_ratio"] == pytest.approx(1 / 3)
    assert c["equalized_odds_difference"] == pytest.approx(0.5)
    assert c["equalized_odds_ratio"] == pytest.approx(0.0)  # FPR 0 against 0.5
    assert c["equal_opportunity_difference"] == pytest.approx(0.5)
    assert c["equal_opportunity_ratio"] == pytest.approx(0.5)
    assert c["disparate_impact"] == pytest.approx(1 / 3)
    assert c["predictive_parity_difference"] == pytest.approx(0.5)
    assert c["predictive_parity_ratio"] == pytest.approx(0.5)
    dp = res.criteria.set_index("criterion").loc["demographic_parity_difference"]
    assert (dp["low_group"], dp["high_group"]) == ("C", "B")
    assert res.quantities()["four_fifths_violations"] == 1


def test_reference_group_as_aequitas():
    res = audit_classifier(_hand(), ["g"], settings=_settings(), options=ClassifierOptions(reference={"g": "A"}))
    c = res.criteria.set_index("criterion")
    # against A (selection .5): B .75, C .25 -> largest |diff| .25; ratios .5/.75 and .25/.5 -> .5
    assert c.loc["demographic_parity_difference", "estimate"] == pytest.approx(0.25)
    assert c.loc["demographic_parity_ratio", "estimate"] == pytest.approx(0.5)
    assert c.loc["demographic_parity_ratio", "reference"] == "A"
    # TPR .5/1/.5 against A: diff .5 (B); FPR .5/.5/0: diff .5 (C); EO ratio min(.5, 0) = 0
    assert c.loc["equalized_odds_difference", "estimate"] == pytest.approx(0.5)
    assert c.loc["equalized_odds_ratio", "estimate"] == pytest.approx(0.0)
    with pytest.raises(ParameterError, match="reference names g=Z"):
        audit_classifier(_hand(), ["g"], settings=_settings(), options=ClassifierOptions(reference={"g": "Z"}))


def test_rate_gap_folds_ratios_and_needs_two_groups():
    d, r = rate_gap(np.array([[0.2, 0.4, 0.0], [0.0, 0.0, 0.3]]), np.array([True, True, False]))
    assert d.tolist() == pytest.approx([0.2, 0.0]) and r.tolist() == pytest.approx([0.5, 1.0])  # 0 / 0 is 1
    d, r = rate_gap(np.array([0.5, np.nan]), np.array([True, True]))
    assert np.isnan(d) and np.isnan(r)


def _random(n=4000, seed=0, effect=0.0, per_subject=1):
    rng = np.random.default_rng(seed)
    n_subj = n // per_subject
    gender = rng.choice(["female", "male"], n_subj)
    age = rng.choice(["0-29", "30-59", "60+"], n_subj, p=[0.4, 0.4, 0.2])
    df = pd.DataFrame({"subject_id": np.repeat([f"p{i}" for i in range(n_subj)], per_subject),
                       "gender": np.repeat(gender, per_subject), "age": np.repeat(age, per_subject)})
    df["sample_id"] = [f"s{i}" for i in range(len(df))]
    df["y_true"] = rng.integers(0, 2, len(df))
    df["score"] = 1 / (1 + np.exp(-(1.5 * df["y_true"] - 0.75 + rng.normal(0, 1, len(df))
                                    + effect * (df["gender"] == "male"))))
    df["y_pred"] = (df["score"] >= 0.5).astype(int)
    return df


@pytest.mark.parametrize("attrs", [["gender"], ["gender", "age"]])
def test_rates_and_criteria_equal_fairlearn(attrs):
    df = _random(effect=0.6)
    res = audit_classifier(df, attrs, score_col="score", max_k=2, settings=_settings(n_boot=20))
    inter = " × ".join(attrs)
    ours = res.rates[res.rates["intersection"] == inter].set_index("group")
    sf = df[attrs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf = fairlearn.MetricFrame(
            metrics={"selection_rate": fairlearn.selection_rate, "tpr": fairlearn.true_positive_rate,
                     "fpr": fairlearn.false_positive_rate, "fnr": fairlearn.false_negative_rate,
                     "tnr": fairlearn.true_negative_rate, "precision": precision_score, "accuracy": accuracy_score,
                     "balanced_accuracy": balanced_accuracy_score, "count": fairlearn.count},
            y_true=df["y_true"], y_pred=df["y_pred"], sensitive_features=sf)
        auc = fairlearn.MetricFrame(metrics=roc_auc_score, y_true=df["y_true"], y_pred=df["score"],
                                    sensitive_features=sf).by_group
    by = mf.by_group
    labels = [" × ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in by.index]
    for col in by.columns:
        mine = ours.loc[labels, "n_samples" if col == "count" else col].to_numpy(float)
        np.testing.assert_allclose(mine, by[col].to_numpy(float), rtol=1e-12, err_msg=col)
    # NPV has no fairlearn metric: TN / (TN + FN) by pandas
    neg = df[df["y_pred"] == 0].groupby(attrs)["y_true"].apply(lambda s: (s == 0).mean())
    np.testing.assert_allclose(ours.loc[labels, "npv"], neg.to_numpy(), rtol=1e-12)
    a = res.auc[res.auc["intersection"] == inter].set_index("group")
    np.testing.assert_allclose(a.loc[labels, "auc"], auc.to_numpy(float), rtol=1e-12)
    c = res.criteria[res.criteria["intersection"] == inter].set_index("criterion")["estimate"]
    kw = dict(y_true=df["y_true"], y_pred=df["y_pred"], sensitive_features=sf)
    assert c["demographic_parity_difference"] == pytest.approx(fairlearn.demographic_parity_difference(**kw), abs=1e-12)
    assert c["demographic_parity_ratio"] == pytest.approx(fairlearn.demographic_parity_ratio(**kw), abs=1e-12)
    assert c["equalized_odds_difference"] == pytest.approx(fairlearn.equalized_odds_difference(**kw), abs=1e-12)
    assert c["equalized_odds_ratio"] == pytest.approx(fairlearn.equalized_odds_ratio(**kw), abs=1e-12)
    assert c["equal_opportunity_difference"] == pytest.approx(fairlearn.equal_opportunity_difference(**kw), abs=1e-12)
    assert c["equal_opportunity_ratio"] == pytest.approx(fairlearn.equal_opportunity_ratio(**kw), abs=1e-12)
    assert c["disparate_impact"] == pytest.approx(fairlearn.demographic_parity_ratio(**kw), abs=1e-12)
    prec = fairlearn.MetricFrame(metrics=precision_score, **kw)
    assert c["predictive_parity_difference"] == pytest.approx(prec.difference(), abs=1e-12)
    assert c["predictive_parity_ratio"] == pytest.approx(prec.ratio(), abs=1e-12)


def test_auc_ties_and_sweep_against_brute_force():
    rng = np.random.default_rng(3)
    n = 500
    score = rng.integers(0, 6, n) / 5.0  # many ties
    pos = rng.random(n) < 0.4
    codes = rng.integers(0, 3, n)
    auc, n_pos, n_neg = roc_auc_by_group(score, pos, codes, 4)
    for g in range(3):
        m = codes == g
        assert auc[g] == pytest.approx(roc_auc_score(pos[m], score[m]), abs=1e-12)
    assert np.isnan(auc[3]) and n_pos[3] == 0
    t = np.array([0.0, 0.3, 0.6, 1.0])
    sw = threshold_sweep(score, pos, codes, 4, t)
    for g in range(3):
        for j, thr in enumerate(t):
            m = codes == g
            sel = score[m] >= thr
            assert sw["tp"][g, j] == (sel & pos[m]).sum() and sw["fp"][g, j] == (sel & ~pos[m]).sum()
            assert sw["fn"][g, j] == (~sel & pos[m]).sum() and sw["tn"][g, j] == (~sel & ~pos[m]).sum()


def test_thresholds_at_which_criteria_hold():
    # group a scores 0.1..0.9, group b the same plus 0.5: one shared threshold; DP holds only where both
    # groups are all selected or none are, or where they happen to match
    s = np.round(np.arange(1, 10) / 10, 1)
    df = pd.DataFrame({"g": ["a"] * 9 + ["b"] * 9, "score": np.r_[s, np.minimum(s + 0.5, 1.0)],
                       "y_true": [0, 1] * 9})
    df["y_pred"] = (df["score"] >= 0.5).astype(int)
    res = audit_classifier(df, ["g"], score_col="score", settings=_settings(n_boot=0),
                           options=ClassifierOptions(tolerance=0.0, n_thresholds=2))
    sw = res.sweep
    for thr in sw["threshold"].unique():
        sel = df.assign(sel=df["score"] >= thr).groupby("g")["sel"].mean()
        got = sw[sw["threshold"] == thr].set_index("group")["selection_rate"]
        np.testing.assert_allclose(got.loc[sel.index], sel.to_numpy())
    dp = res.thresholds.set_index("criterion").loc["demographic_parity_difference"]
    # thresholds are the min and max score (0.1 and 1.0): at 0.1 everyone is selected (holds); at 1.0
    # group a has none selected and b has 5 of 9 (breaks)
    assert dp["n_thresholds"] == 1 and dp["lowest"] == pytest.approx(0.1) and dp["holds_at"] == "0.1"


def test_planted_bias_flagged_and_null_not():
    planted = audit_classifier(_random(n=3000, seed=2, effect=1.2, per_subject=3), ["gender", "age"],
                               settings=AuditSettings(n_boot=200))
    q = planted.quantities()
    assert q["flagged.gender"] == 4 and q["disparate_impact.gender"] < 0.8  # four rates, one test each
    dp = planted.criteria.set_index(["intersection", "criterion"]).loc[("gender", "demographic_parity_difference")]
    assert dp["ci_low"] > 0.1 and dp["holds"] == False  # noqa: E712
    assert q["flagged.age"] == 0
    null = audit_classifier(_random(n=3000, seed=12, effect=0.0, per_subject=3), ["gender", "age"],
                            settings=AuditSettings(n_boot=200))
    qn = null.quantities()
    assert qn["flagged"] == 0 and qn["four_fifths_violations"] == 0
    assert qn["demographic_parity_difference.gender"] < 0.1


def test_subject_bootstrap_counts_people_not_samples():
    """Four identical copies of every person carry no more information than one: the subject bootstrap's CI
    keeps its width, and it matches the binomial interval of the people."""
    base = _random(n=2000, seed=4)
    copies = pd.concat([base] * 4, ignore_index=True).assign(sample_id=lambda d: [f"c{i}" for i in range(len(d))])
    s = AuditSettings(n_boot=1000, min_subjects=1)
    one = audit_classifier(base, ["gender"], settings=s).rates.set_index("group")
    four = audit_classifier(copies, ["gender"], settings=s).rates.set_index("group")
    naive = audit_classifier(copies.drop(columns="subject_id"), ["gender"], settings=s).rates.set_index("group")
    w = {k: (r["selection_rate_ci_high"] - r["selection_rate_ci_low"]).to_numpy() for k, r in
         (("one", one), ("four", four), ("naive", naive))}
    p, n = one["selection_rate"].to_numpy(), one["n_samples"].to_numpy()
    binomial = 2 * 1.959964 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(w["one"], binomial, rtol=0.15)
    np.testing.assert_allclose(w["four"], binomial, rtol=0.15)
    np.testing.assert_allclose(w["naive"], binomial / 2, rtol=0.15)  # samples as people: too narrow


def test_small_group_reported_not_tested():
    df = _random(n=600, seed=5)
    df.loc[:5, "age"] = "90+"  # six people
    res = audit_classifier(df, ["age"], settings=AuditSettings(n_boot=50, min_subjects=10))
    r = res.rates.set_index("group")
    assert bool(r.loc["90+", "too_small"]) and r.loc["90+", "n_samples"] == 6
    assert np.isfinite(r.loc["90+", "selection_rate"])
    t = res.tests[res.tests["group"] == "90+"]
    assert t["pvalue"].isna().all() and not t["flagged"].any()
    assert (res.criteria["n_compared"] <= 3).all()
    extreme = set(res.criteria["low_group"]) | set(res.criteria["high_group"])
    assert "90+" not in extreme


def test_multiclass_one_vs_rest_and_od():
    rng = np.random.default_rng(6)
    n = 1500
    df = pd.DataFrame({"g": rng.choice(["x", "y"], n), "y_true": rng.choice(["cat", "dog", "fox"], n)})
    wrong = rng.random(n) < np.where(df["g"] == "x", 0.1, 0.4)
    df["y_pred"] = np.where(wrong, rng.choice(["cat", "dog", "fox"], n), df["y_true"])
    res = audit_classifier(df, ["g"], settings=_settings(n_boot=100))
    assert res.positive is None and res.classes == ["cat", "dog", "fox"]
    for cls in res.classes:
        ours = res.rates[res.rates["class"] == cls].set_index("group")
        mf = fairlearn.MetricFrame(metrics={"tpr": fairlearn.true_positive_rate, "fpr": fairlearn.false_positive_rate,
                                            "selection_rate": fairlearn.selection_rate},
                                   y_true=(df["y_true"] == cls).astype(int), y_pred=(df["y_pred"] == cls).astype(int),
                                   sensitive_features=df["g"]).by_group
        for col in mf.columns:
            np.testing.assert_allclose(ours.loc[mf.index, col], mf[col], rtol=1e-12)
    # recall per class and group by pandas, then ID and OD by hand (docs/METHODS.md §6.4)
    rec = df.assign(ok=df["y_true"] == df["y_pred"]).groupby(["y_true", "g"])["ok"].mean().unstack()
    ids = (1 - rec.div(rec.max(axis=1), axis=0)).sum(axis=1) / (rec.shape[1] - 1)
    assert res.od["g"].estimate == pytest.approx(ids.mean(), abs=1e-12)
    q = res.quantities()
    assert q["od"] == pytest.approx(ids.mean()) and "equalized_odds_difference.g.dog" in q
    with pytest.raises(ParameterError, match="score_col"):
        audit_classifier(df.assign(s=0.5), ["g"], score_col="s", settings=_settings())


def test_left_out_rows_and_errors():
    df = _random(n=400, seed=7)
    df["y_pred"] = df["y_pred"].astype(float)
    df.loc[[0, 1], "y_pred"] = np.nan
    df.loc[2, "y_true"] = np.nan
    res = audit_classifier(df, ["gender"], settings=_settings())
    assert res.n_left_out == 3 and res.rates.groupby("intersection")["n_samples"].sum().iloc[0] == 397
    assert "no predicted class: 2" in res.coverage.summary_line()
    with pytest.raises(ColumnError, match="no predicted class column 'pred'"):
        audit_classifier(df, ["gender"], pred_col="pred")
    with pytest.raises(ParameterError, match="positive is needed"):
        audit_classifier(df.assign(y_true=np.where(df["y_true"] == 1, "a", "b"), y_pred="a"), ["gender"])
    with pytest.raises(ParameterError, match="positive 'yes' is not a class of samples column 'y_true' \\(0, 1\\)"):
        audit_classifier(df.dropna(), ["gender"], options=ClassifierOptions(positive="yes"))
    flipped = audit_classifier(df, ["gender"], settings=_settings(), options=ClassifierOptions(positive=0))
    base = audit_classifier(df, ["gender"], settings=_settings())
    np.testing.assert_allclose(flipped.rates["tpr"], base.rates["tnr"])  # class 0 positive: TPR is class 1's TNR
    with pytest.raises(ColumnError, match="row 1: column 'y_pred'"):
        audit_classifier(df.assign(y_pred="2"), ["gender"])
    gates = evaluate_conditions(["equalized_odds_difference.gender>0.5", "flagged>0"], res.quantities())
    assert [g["holds"] for g in gates] == [False, False]
    with pytest.raises(FairvisionError, match="unknown quantity"):
        evaluate_conditions(["eod>1"], res.quantities())


def test_command_line(tmp_path, capsys):
    df = _random(n=800, seed=8, effect=1.2, per_subject=2)
    df[["sample_id", "subject_id", "gender", "age"]].to_csv(tmp_path / "s.csv", index=False)
    pred = df[["sample_id", "y_true", "y_pred", "score"]].copy()
    pred.loc[0, "score"] = np.nan
    pred.to_parquet(tmp_path / "p.parquet")
    out = tmp_path / "r"
    args = ["audit", "classifier", "-s", str(tmp_path / "s.csv"), "-p", str(tmp_path / "p.parquet"), "-a", "gender",
            "-a", "age", "--score-col", "score", "--n-boot", "50", "-o", str(out)]
    assert main([*args, "--fail-if", "disparate_impact<0.8"]) == 1
    text = capsys.readouterr()
    assert "classification: 1 of 800 samples left out (no score: 1)" in text.out
    assert "fail-if: condition met: disparate_impact<0.8" in text.err
    doc = json.loads((out / "report.json").read_text())
    assert doc["findings"] and any("disparate impact" in f["sentence"] for f in doc["findings"])
    assert (out / "tables" / "classifier__criteria.parquet").is_file()
    assert (out / "tables" / "classifier__thresholds.parquet").is_file()
    assert main([*args, "--fail-if", "disparate_impact<0.1", "--reference", "gender=female"]) == 0
    capsys.readouterr()
    assert main([*args, "--reference", "gender"]) == 2
    assert "error: --reference 'gender': expected ATTRIBUTE=GROUP" in capsys.readouterr().err
    assert main([*args, "--tolerance", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: --tolerance must be between 0 and 1")
    odd = {0: "no", 1: "maybe"}
    df.assign(y_true=df["y_true"].map(odd), y_pred=df["y_pred"].map(odd)).to_csv(tmp_path / "odd.csv", index=False)
    assert main(["audit", "classifier", "-s", str(tmp_path / "odd.csv"), "-a", "gender", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --positive is needed") and err.count("\n") == 1


def test_multi_valued_attribute_counts_a_sample_in_each_group():
    from fairvision.schema import Attribute

    df = _random(n=600, seed=11)
    rng = np.random.default_rng(11)
    df["tags"] = rng.choice(["a", "b", "a|b"], len(df))
    res = audit_classifier(df, [Attribute("tags", multi=True)], settings=_settings())
    long = df.assign(tags=df["tags"].str.split("|")).explode("tags")
    sel = long.groupby("tags")["y_pred"].mean()
    got = res.rates.set_index("group")["selection_rate"]
    np.testing.assert_allclose(got.loc[sel.index], sel.to_numpy(), rtol=1e-12)
    assert res.rates.set_index("group").loc["a", "n_samples"] == (long["tags"] == "a").sum()
    assert res.tests["pvalue"].notna().all()

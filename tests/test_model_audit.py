"""Model audit: disaggregation, subject bootstrap, planted disparity, false positives, --fail-if."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.settings import AuditSettings
from fairvision.audits.gates import evaluate_conditions, parse_condition
from fairvision.audits.model import audit_model
from fairvision.errors import ColumnError, FairvisionError
from fairvision.groups import intersections
from fairvision.io.scores import join_scores
from fairvision.schema import Attribute, Schema


def _synthetic(seed=0, n_subj=480, per=2, drop=0.0):
    rng = np.random.default_rng(seed)
    subj = np.repeat(np.arange(n_subj), per)
    age = rng.choice(["18-29", "30-39", "60+"], n_subj)[subj]
    pron = rng.choice(["he", "she"], n_subj)[subj]
    tone = rng.choice(["I", "III", "V"], n_subj)[subj]
    score = np.clip(rng.normal(0.8, 0.08, len(subj)), 0, 1)
    planted = (age == "60+") & (pron == "he")
    score[planted] -= drop
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(subj))], "subject_id": subj.astype(str),
                         "age": age, "pronoun": pron, "tone": tone, "score": score, "error": 1 - score})


def test_group_estimates_hand_checked():
    df = pd.DataFrame({"sample_id": list("abcdef"), "subject_id": ["p", "p", "q", "r", "r", "s"],
                       "g": ["x", "x", "x", "y", "y", "y"], "m": [1.0, 3.0, 5.0, 2.0, 2.0, np.nan]})
    res = audit_model(df, ["m"], ["g"], settings=AuditSettings(min_subjects=2, n_boot=200))
    t = res.groups[("m", "g")]
    assert t.loc["x", "n_samples"] == 3 and t.loc["x", "n_subjects"] == 2
    assert t.loc["x", "mean"] == 3.0 and t.loc["x", "median"] == 3.0
    assert t.loc["x", "sd"] == pytest.approx(np.std([1, 3, 5], ddof=1))
    assert t.loc["y", "n_samples"] == 2 and t.loc["y", "n_subjects"] == 1  # NaN score left out
    assert t.loc["y", "too_small"] and not t.loc["x", "too_small"]
    s = res.summary.iloc[0]
    assert s.n_compared == 1 and s.n_too_small == 1
    assert res.too_small()["group"].tolist() == ["y"]


def test_bootstrap_ci_resamples_subjects():
    """One person with many images: the subject bootstrap CI is wider than a naive image bootstrap."""
    rng = np.random.default_rng(1)
    subj = np.r_[np.repeat(np.arange(10), 20)]
    person = rng.normal(0, 1, 10)[subj]
    df = pd.DataFrame({"sample_id": np.arange(200).astype(str), "subject_id": subj.astype(str),
                       "g": "all", "m": person + rng.normal(0, 0.05, 200)})
    res = audit_model(df, ["m"], ["g"], settings=AuditSettings(min_subjects=1, n_boot=2000))
    t = res.groups[("m", "g")].iloc[0]
    width = t.ci_high - t.ci_low
    # the subject means carry the uncertainty: CI width ~ 2 * 1.96 * sd(subject means) / sqrt(10)
    subj_means = pd.Series(df.m.to_numpy()).groupby(subj).mean()
    expected = 2 * 1.96 * subj_means.std(ddof=0) / np.sqrt(10)
    assert 0.7 * expected < width < 1.3 * expected
    naive = 2 * 1.96 * df.m.std() / np.sqrt(200)
    assert width > 2 * naive


def test_declared_empty_group_reported_not_dropped():
    df = _synthetic(drop=0.0)
    attr = Attribute("age", categories=["18-29", "30-39", "40-49", "60+"])
    res = audit_model(df, ["score"], [attr], settings=AuditSettings(n_boot=50))
    t = res.groups[("score", "age")]
    assert "40-49" in t.index and t.loc["40-49", "n_samples"] == 0 and t.loc["40-49", "too_small"]


def test_intersections_with_multi_valued_attribute():
    df = pd.DataFrame({"a": ["x", "y|x", "y"], "b": ["u", "v", "v"]})
    inters = intersections(df, [Attribute("a", multi=True), Attribute("b")], max_k=2)
    names = [i.name for i in inters]
    assert names == ["a", "b", "a × b"]
    ab = inters[2]
    pairs = {(int(r), ab.labels[c]) for r, c in zip(ab.rows, ab.codes)}
    assert pairs == {(0, ("x", "u")), (1, ("x", "v")), (1, ("y", "v")), (2, ("y", "v"))}


def test_planted_intersectional_disparity_is_top():
    df = _synthetic(seed=3, drop=0.2)
    res = audit_model(df, ["score", "error"], ["age", "pronoun", "tone"], lower_is_better=["error"], max_k=2, settings=AuditSettings(n_boot=200, correction="bonferroni"))
    top = res.top_disparities
    first = top[top.metric == "score"].iloc[0]
    assert first.intersection == "age × pronoun"
    assert first.worst_group == "60+ × he"
    # planted: the worst median is 0.8 - 0.2 = 0.6 against about 0.8: D about 0.25
    assert first.disparity == pytest.approx(0.25, abs=0.05)
    err = top[top.metric == "error"].iloc[0]
    assert err.intersection == "age × pronoun" and err.worst_group == "60+ × he"
    # the per-pair p-values equal scipy on subject means
    pw = res.pairwise[("score", "age × pronoun")]
    row = pw[(pw.group_a == "18-29 × he") & (pw.group_b == "60+ × he")].iloc[0]
    sub = df.assign(key=df.age + " × " + df.pronoun).groupby(["key", "subject_id"])["score"].mean()
    ref = stats.mannwhitneyu(sub["18-29 × he"], sub["60+ × he"], alternative="two-sided")
    assert row.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)


def test_no_planted_effect_false_positive_rate():
    """Over many seeds without an effect, family-wise false positives stay at about the nominal 5%."""
    hits = 0
    n = 60
    for seed in range(n):
        df = _synthetic(seed=100 + seed, n_subj=120, per=1)
        res = audit_model(df, ["score"], ["age", "pronoun"], max_k=1, settings=AuditSettings(n_boot=0, correction="bonferroni"))
        hits += bool((res.summary.n_significant > 0).any())
    # two families (age: 3 tests, pronoun: 1 test) each at 5%: expected <= ~10%
    assert hits / n <= 0.15


def test_join_scores_errors():
    s = pd.DataFrame({"sample_id": ["a", "b"], "g": ["x", "y"]})
    with pytest.raises(ColumnError, match="no scores for sample_id 'b'"):
        join_scores(s, pd.DataFrame({"sample_id": ["a"], "m": [1.0]}))
    with pytest.raises(ColumnError, match=r"^scores: row 2: sample_id 'a' appears twice$"):
        join_scores(s, pd.DataFrame({"sample_id": ["a", "a", "b"], "m": [1.0, 2, 3]}))
    with pytest.raises(ColumnError, match=r"^samples: row 3: sample_id 'b' appears twice$"):
        join_scores(pd.concat([s, s.iloc[1:]]), pd.DataFrame({"sample_id": ["a", "b"], "m": [1.0, 2]}))
    with pytest.raises(ColumnError, match=r"^scores: no id column 'sample_id'; columns are id, m$"):
        join_scores(s, pd.DataFrame({"id": ["a", "b"], "m": [1.0, 2]}))
    with pytest.raises(ColumnError, match="not in samples"):
        join_scores(s, pd.DataFrame({"sample_id": ["a", "b", "c"], "m": [1.0, 2, 3]}))
    out = join_scores(s, pd.DataFrame({"sample_id": ["b", "a"], "m": [2.0, 1.0]}))
    assert out.m.tolist() == [1.0, 2.0]


def test_fail_if_parser_and_quantities():
    c = parse_condition(" accuracy.max_disparity >= 0.1 ")
    assert (c.name, c.op, c.threshold) == ("accuracy.max_disparity", ">=", 0.1)
    assert parse_condition("od>1e-2").threshold == 0.01
    for bad in ("disparity", "disparity > x", "__import__('os')>1", "disparity >> 1", "a>1 or b>2"):
        with pytest.raises(FairvisionError):
            parse_condition(bad)
    q = {"disparity": 0.3, "od": float("nan")}
    out = evaluate_conditions(["disparity>0.2", "disparity<=0.2", "od>0.1"], q, nan="pass")
    assert [o["holds"] for o in out] == [True, False, False]
    with pytest.raises(FairvisionError, match="not defined for this input"):  # the default: no silent pass
        evaluate_conditions(["od>0.1"], q)
    with pytest.raises(FairvisionError, match="unknown quantity"):
        evaluate_conditions(["nope>1"], q)
    df = _synthetic(seed=4, drop=0.2)
    df["y"] = np.where(df.age == "60+", "a", "b")
    df["yp"] = np.where(np.random.default_rng(0).random(len(df)) < 0.8, df.y, "c")
    # the model also predicts a class "c" that no sample has: declared for "y" in the schema
    schema = Schema().add(Attribute("y", categories=["a", "b", "c"]))
    res = audit_model(df, ["score"], ["age", "pronoun"], max_k=2, true_col="y", pred_col="yp", schema=schema,
                      settings=AuditSettings(n_boot=100, correction="bonferroni"))
    qs = res.quantities()
    assert qs["disparity"] == qs["score.disparity"] == res.top_disparities.disparity.max()
    assert qs["score.age+pronoun.disparity"] == pytest.approx(res.top_disparities.disparity.max())
    assert "od" in qs and "od.age" in qs and qs["od.age.ci_low"] <= qs["od.age"] <= qs["od.age.ci_high"]


def test_bad_arguments():
    df = _synthetic()
    with pytest.raises(ColumnError, match="no metric column 'nope'"):
        audit_model(df, ["nope"], ["age"])
    with pytest.raises(FairvisionError, match="lower_is_better"):
        audit_model(df, ["score"], ["age"], lower_is_better=["other"])
    with pytest.raises(FairvisionError, match="correction"):
        audit_model(df, ["score"], ["age"], settings=AuditSettings(correction="sidak"))
    df["score"] = df["score"].astype(object)
    df.loc[3, "score"] = "oops"
    with pytest.raises(ColumnError, match="row 4"):
        audit_model(df, ["score"], ["age"])


def test_group_ci_matches_explicit_subject_resampling():
    from fairvision.stats.resample import cluster_bootstrap_weights

    df = _synthetic(seed=5, n_subj=60, per=3)
    res = audit_model(df, ["score"], ["age"], settings=AuditSettings(min_subjects=1, n_boot=40, seed=9))
    t = res.groups[("score", "age")]
    codes = pd.factorize(df.subject_id)[0]
    w = cluster_bootstrap_weights(codes.max() + 1, 40, 9)
    for grp in t.index:
        reps = []
        for b in range(40):
            rows = np.repeat(np.arange(len(df)), w[b, codes].astype(int))
            sub = df.iloc[rows]
            reps.append(sub.loc[sub.age == grp, "score"].mean())
        assert t.loc[grp, "ci_low"] == pytest.approx(np.quantile(reps, 0.025))
        assert t.loc[grp, "ci_high"] == pytest.approx(np.quantile(reps, 0.975))


def test_od_compares_labels_whatever_their_number_type():
    from fairvision.stats.multiclass import overall_disparity, recall_matrix

    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"subject_id": [f"s{i}" for i in range(n)], "gender": rng.choice(["F", "M"], n),
                       "y": rng.integers(0, 3, n)})
    df["pred"] = np.where(rng.random(n) < np.where(df.gender == "F", 0.9, 0.6), df.y, (df.y + 1) % 3)
    df["score"] = rng.random(n)
    truth = overall_disparity(recall_matrix(df.y, df.pred, df.gender))[0]
    assert truth > 0.2
    as_float = df.assign(pred=df["pred"].astype(float))
    r = audit_model(as_float, ["score"], ["gender"], true_col="y", pred_col="pred", settings=AuditSettings(n_boot=20))
    assert r.od["gender"].estimate == pytest.approx(truth)
    one_missing = df.copy()
    one_missing.loc[0, "y"] = np.nan  # the column becomes float
    r = audit_model(one_missing, ["score"], ["gender"], true_col="y", pred_col="pred", settings=AuditSettings(n_boot=20))
    assert r.od["gender"].estimate == pytest.approx(truth, abs=0.02)


def test_named_subject_column_must_exist():
    from fairvision.errors import FairvisionError

    df = pd.DataFrame({"g": ["a", "b"] * 20, "score": np.arange(40.0)})
    with pytest.raises(FairvisionError, match="no subject column 'person'"):
        audit_model(df, ["score"], ["g"], subject_col="person", settings=AuditSettings(n_boot=0))


def test_fail_if_od_ignores_undefined_od_of_other_attributes():
    from fairvision.audits.gates import evaluate_conditions

    rng = np.random.default_rng(0)
    n = 400
    g = rng.choice(["F", "M"], n)
    h = rng.choice(["x", "y"], n)
    y = np.where(g == "F", 0, 1)  # each class in one g group only: OD by g is undefined (NaN)
    pred = np.where(rng.random(n) < np.where(h == "x", 0.95, 0.5), y, 1 - y)
    df = pd.DataFrame({"subject_id": np.arange(n), "g": g, "h": h, "y": y, "pred": pred, "score": rng.random(n)})
    res = audit_model(df, ["score"], ["g", "h"], true_col="y", pred_col="pred", settings=AuditSettings(n_boot=20))
    assert np.isnan(res.od["g"].estimate) and res.od["h"].estimate > 0.2
    q = res.quantities()
    assert q["od"] == pytest.approx(res.od["h"].estimate)
    assert evaluate_conditions(["od>0.2"], q)[0]["holds"]

"""Error modelling, error patterns and confounder control on synthetic data with and without a planted cause."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.diagnosis.confounders import audit_confounder
from fairvision.audits.diagnosis.error_model import ErrorModelOptions, audit_error_model, elbow_point
from fairvision.audits.diagnosis.tree_rules import encode_features
from fairvision.audits.diagnosis.patterns import (
    add_rule_attribute,
    audit_error_patterns,
    low_score_flags,
    rule_mask,
)
from fairvision.audits.settings import AuditSettings
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.stats.resample import group_mean_ci
from oracles_diagnosis import group_mean_bootstrap_naive

FEATURES = ["skin_tone", "lighting", "visible_keypoints", "pose", "age"]
BONFERRONI = AuditSettings(correction="bonferroni")


def synth(n_subj=300, per=2, planted=True, seed=0):
    """Scores driven by lighting (dim: -0.25) only; dim lighting is more common for dark skin."""
    rng = np.random.default_rng(seed)
    n = n_subj * per
    subj = np.repeat(np.arange(n_subj), per)
    tone = np.where(rng.random(n_subj) < 0.5, "dark", "light")[subj]
    lighting = np.where(rng.random(n) < np.where(tone == "dark", 0.7, 0.2), "dim", "bright")
    age = rng.integers(18, 80, n).astype(float)
    age[rng.random(n) < 0.1] = np.nan  # empty cells on purpose: the audits below keep them (missing="keep")
    score = rng.normal(0.8, 0.08, n) - (0.25 * (lighting == "dim") if planted else 0.0)
    return pd.DataFrame({"subject_id": subj.astype(str), "skin_tone": tone, "lighting": lighting,
                         "visible_keypoints": rng.integers(0, 18, n), "pose": rng.choice(["standing", "sitting", "lying"], n),
                         "age": age, "score": score.clip(0, 1)})


@pytest.fixture(scope="module")
def planted():
    return synth()


def test_error_model_ranks_planted_feature_first(planted):
    r = audit_error_model(planted, "score", FEATURES, missing="keep", options=ErrorModelOptions(n_estimators=60),
                          settings=AuditSettings(n_boot=400))
    assert r.importances.index[0] == "lighting"
    assert r.importances.sort_values("permutation", ascending=False).index[0] == "lighting"
    assert "lighting" in r.selected and r.explained
    worst = r.rules.iloc[0]
    # pruned by cross-validation, the tree keeps only the planted split
    assert worst["condition"] == "lighting = dim" and worst["mean"] < 0.65
    assert worst["n"] == int((planted["lighting"] == "dim").sum())
    assert worst["mean"] == pytest.approx(planted.loc[planted["lighting"] == "dim", "score"].mean())
    assert worst["rule"].endswith(f"n = {worst['n']}")
    assert r.rules["n"].sum() == len(planted) and r.by_subject and r.n_subjects == 300


def test_error_model_without_cause_explains_nothing():
    r = audit_error_model(synth(planted=False, seed=1), "score", FEATURES, missing="keep",
                          options=ErrorModelOptions(n_estimators=60), settings=AuditSettings(n_boot=200))
    assert not r.explained and r.r2_forest < 0.02
    assert r.meta["n_leaves"] == 1 and r.rules["condition"].tolist() == ["all samples"]  # no rule flagged


def test_error_model_reproducible_under_seed(planted):
    options, settings = ErrorModelOptions(n_estimators=30), AuditSettings(n_boot=300, seed=7)
    a = audit_error_model(planted, "score", FEATURES, missing="keep", options=options, settings=settings)
    b = audit_error_model(planted, "score", FEATURES, missing="keep", options=options, settings=settings)
    pd.testing.assert_frame_equal(a.importances, b.importances)
    pd.testing.assert_frame_equal(a.rules, b.rules)


def test_error_model_input_errors(planted):
    with pytest.raises(ColumnError):
        audit_error_model(planted, "nope", FEATURES)
    with pytest.raises(ColumnError):
        audit_error_model(planted, "score", ["lighting", "nope"])
    bad = planted.assign(score=planted["score"].astype(object))
    bad.loc[3, "score"] = "abc"
    with pytest.raises(ColumnError, match="row 4"):
        audit_error_model(bad, "score", FEATURES)
    with pytest.raises(ParameterError, match="^importance must be impurity or permutation"):
        ErrorModelOptions(importance="gini")
    with pytest.raises(ParameterError, match="^n_boot must be at least 2"):
        audit_error_model(planted, "score", FEATURES, missing="keep", settings=AuditSettings(n_boot=1))


def test_encoding_categorical_missing_and_integer_rules():
    df = pd.DataFrame({"pose": ["a", None, "b", "a"], "kp": [1, 2, np.nan, 4], "w": [0.5, 1.5, 2.0, 1.0]})
    enc = encode_features(df, ["pose", "kp", "w"])
    assert enc.kinds == {"pose": "categorical", "kp": "integer", "w": "numeric"}
    assert enc.level[:3] == ["a", "b", "(missing)"]
    np.testing.assert_array_equal(enc.X[:, 2], [0, 1, 0, 0])
    assert np.isnan(enc.X[2, 3]) and enc.has_missing["kp"]


def test_rule_sentences_read_like_fhibe():
    rng = np.random.default_rng(0)
    n = 600
    kp = rng.integers(0, 18, n)
    pose = rng.choice(["standing", "lying"], n)
    score = 0.9 - 0.4 * ((kp <= 8) & (pose == "lying")) + rng.normal(0, 0.02, n)
    r = audit_error_model(pd.DataFrame({"kp": kp, "pose": pose, "ar": score}), "ar", ["kp", "pose"],
                          subject_col=None, label="AR", options=ErrorModelOptions(n_estimators=30, max_depth=2),
                          settings=AuditSettings(n_boot=200))
    worst = r.rules.iloc[0]
    assert worst["condition"] in ("kp <= 8 and pose = lying", "pose = lying and kp <= 8")
    truth = score[(kp <= 8) & (pose == "lying")]
    assert worst["n"] == truth.size and worst["mean"] == pytest.approx(truth.mean())
    assert worst["rule"].startswith(worst["condition"] + f": mean AR {truth.mean():.3g}")


def test_elbow_point():
    assert elbow_point([0.8, 0.05, 0.04, 0.03, 0.02, 0.01]) == 2
    assert elbow_point([0.3, 0.28, 0.26, 0.05, 0.04, 0.03, 0.02]) == 4
    assert elbow_point([0.1] * 8, max_k=6) == 6
    assert elbow_point([0.5]) == 1


def test_bootstrap_vectorised_equals_loop_and_analytic_se():
    rng = np.random.default_rng(2)
    v = rng.normal(size=120)
    g = rng.integers(0, 3, 120)
    c = np.repeat(np.arange(40), 3)
    fast = group_mean_ci(v, g, c, n_boot=200, seed=3, chunk=64)
    slow = group_mean_bootstrap_naive(v, g, c, n_boot=200, seed=3, chunk=64)
    pd.testing.assert_frame_equal(fast, slow, rtol=1e-10)
    # row bootstrap of one group's mean: SE close to sd / sqrt(n)
    x = rng.normal(size=400)
    se = group_mean_ci(x, np.zeros(400, int), np.arange(400), n_boot=4000, seed=0)["se"].iloc[0]
    assert se == pytest.approx(x.std(ddof=0) / np.sqrt(400), rel=0.08)


def test_patterns_name_planted_item(planted):
    r = audit_error_patterns(planted, "score", FEATURES, low_quantile=0.2)
    assert r.n_low == int(np.sum(planted["score"] <= np.quantile(planted["score"], 0.2)))
    assert ("lighting", "dim") in r.rules.iloc[0]["antecedent"]  # highest lift
    top = r.rules[r.rules["significant"]].iloc[0]
    # extra items that do not raise the low-score rate beyond "lighting = dim" are not significant
    assert top["items"] == "lighting = dim"
    assert not r.rules.loc[r.rules["items"].str.contains("lighting = dim and|and lighting = dim"), "significant"].any()
    single = r.rules[r.rules["items"] == "lighting = dim"].iloc[0]
    low = planted["score"].to_numpy() <= r.threshold
    dim = (planted["lighting"] == "dim").to_numpy()
    assert single["confidence"] == pytest.approx(low[dim].mean())
    assert single["lift"] == pytest.approx(low[dim].mean() / low.mean())
    p = stats.fisher_exact([[np.sum(low & dim), np.sum(~low & dim)], [np.sum(low & ~dim), np.sum(~low & ~dim)]],
                           alternative="greater").pvalue
    assert single["pvalue"] == pytest.approx(p, rel=1e-6)
    for k in r.rules.index[:10]:
        assert rule_mask(planted, r.items(k)).sum() == r.rules.loc[k, "n_matching"]
    grouped = add_rule_attribute(planted, top["antecedent"], "pattern1")
    assert grouped["pattern1"].eq("matches").sum() == top["n_matching"]


def test_patterns_without_cause_flag_at_most_nominal_rate():
    flagged = sum(bool(audit_error_patterns(synth(120, 2, planted=False, seed=s), "score", FEATURES).rules["significant"].any())
                  for s in range(20))
    assert flagged <= 3  # Holm controls the family-wise rate at 5%: expect about 1 in 20


def test_low_score_flags_threshold_and_orientation():
    low, cut = low_score_flags([0.1, 0.5, 0.9, 0.3], low_threshold=0.3)
    assert cut == 0.3 and low.tolist() == [True, False, False, True]
    low, cut = low_score_flags([1, 2, 3, 4, 5], low_quantile=0.2, higher_is_better=False)
    assert cut == pytest.approx(4.2) and low.tolist() == [False] * 4 + [True]
    with pytest.raises(FairvisionError):
        low_score_flags([1, 2], low_quantile=1.5)


def test_confounder_disparity_vanishes_within_strata(planted):
    r = audit_confounder(planted, "score", "skin_tone", "lighting", settings=BONFERRONI)
    assert r.disparity_before and not r.survives
    assert not r.within["significant"].any()
    assert r.message.startswith("No significant skin tone difference once lighting is held fixed")
    # a non-confounder does not explain it away
    r2 = audit_confounder(planted, "score", "skin_tone", "pose", settings=BONFERRONI)
    assert r2.survives


def test_confounder_binary_outcome_uses_cmh(planted):
    d = planted.assign(detected=(planted["score"] > 0.6).astype(int))
    r = audit_confounder(d, "detected", "skin_tone", "lighting", settings=BONFERRONI)
    assert r.outcome == "binary" and r.test == "Cochran-Mantel-Haenszel"
    assert r.disparity_before and not r.survives


def test_confounder_null_rate():
    rej = 0
    for s in range(30):
        d = synth(80, 2, planted=False, seed=100 + s)
        rej += audit_confounder(d, "score", "skin_tone", "lighting", settings=BONFERRONI).survives
    assert rej <= 4  # nominal 5% of 30 = 1.5


def test_confounder_flags_small_cells():
    d = synth(60, 1, seed=3)
    r = audit_confounder(d, "score", "skin_tone", "visible_keypoints", min_count=25, settings=BONFERRONI)
    assert r.within["too_small"].any()
    assert r.within.loc[r.within["too_small"], "pvalue"].isna().all()


def test_stratified_test_holds_nominal_rate_when_cause_is_the_stratifier():
    # the tone disparity is real overall but entirely due to lighting: within lighting strata H0 holds
    before = after = 0
    for s in range(20):
        r = audit_confounder(synth(100, 2, seed=200 + s), "score", "skin_tone", "lighting", settings=BONFERRONI)
        before += r.disparity_before
        after += r.survives
    assert before >= 18 and after <= 3


def test_subject_bootstrap_is_wider_than_image_bootstrap_for_clustered_scores():
    rng = np.random.default_rng(4)
    subj = np.repeat(np.arange(100), 5)
    v = rng.normal(size=100)[subj] + rng.normal(scale=0.3, size=500)  # strong subject effect
    g = np.zeros(500, int)
    by_subject = group_mean_ci(v, g, subj, n_boot=2000, seed=0)["se"].iloc[0]
    by_image = group_mean_ci(v, g, np.arange(500), n_boot=2000, seed=0)["se"].iloc[0]
    # analytic: SE of the mean of 100 subject means vs 500 "independent" images
    assert by_subject == pytest.approx(pd.Series(v).groupby(subj).mean().std(ddof=0) / 10, rel=0.1)
    assert by_subject > 1.8 * by_image


def test_error_model_permutation_ranking_and_categorical_dtypes(planted):
    d = planted.assign(lighting=pd.Categorical(planted["lighting"]), occluded=planted["visible_keypoints"] < 4)
    r = audit_error_model(d, "score", FEATURES + ["occluded"], missing="keep",
                          options=ErrorModelOptions(importance="permutation", n_estimators=40),
                          settings=AuditSettings(n_boot=200))
    assert r.importance == "permutation" and r.importances.index[0] == "lighting"
    assert r.importances.loc["occluded", "kind"] == "categorical"

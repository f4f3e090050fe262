"""Generative audit scores (docs/METHODS.md §10.2-§10.4) against hand computation and independent tests."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fairvision.audits.generative.audit import score_pairs
from fairvision.audits.settings import AuditSettings
from fairvision.stats import adjust_pvalues, flip_test, metamorphic_scores, signed_rank_test


def _brute_signed_rank_p(x):
    """Two-sided p of the signed-rank statistic by enumerating all 2^n sign patterns (mid-ranks for ties)."""
    x = np.asarray(x, float)
    x = x[x != 0]
    r = sps.rankdata(np.abs(x))
    t_obs = r[x > 0].sum()
    stat = min(t_obs, r.sum() - t_obs)
    ts = np.array([r[np.array(s, bool)].sum() for s in itertools.product([0, 1], repeat=x.size)])
    return min(1.0, 2 * np.mean(ts <= stat + 1e-9)), stat


@pytest.mark.parametrize("seed", range(4))
def test_signed_rank_matches_scipy_exact_without_ties(seed):
    x = np.random.default_rng(seed).normal(0.4, 1.0, 15)
    ours, ref = signed_rank_test(x), sps.wilcoxon(x, method="exact")
    assert ours.statistic == pytest.approx(ref.statistic)
    assert ours.pvalue == pytest.approx(ref.pvalue, rel=1e-9)


def test_signed_rank_with_ties_and_zeros_matches_enumeration():
    x = [1, 1, -2, 3, 3, 3, -1, 2, 0, 4, 0.0]
    p, stat = _brute_signed_rank_p(x)
    r = signed_rank_test(x)
    assert r.pvalue == pytest.approx(p, rel=1e-12)
    assert r.statistic == pytest.approx(stat)
    assert (r.n, r.n_nonzero) == (11, 9)


def test_signed_rank_no_change_and_large_n():
    r = signed_rank_test([0.0, 0.0, np.nan])
    assert np.isnan(r.statistic) and r.pvalue == 1.0
    x = np.random.default_rng(3).normal(0.1, 1, 600)  # normal approximation
    assert signed_rank_test(x).pvalue == pytest.approx(sps.wilcoxon(x, method="asymptotic", correction=False).pvalue,
                                                       rel=1e-6)


def test_flip_test_is_exact_binomial():
    assert flip_test(7, 2).pvalue == pytest.approx(sps.binomtest(7, 9, 0.5).pvalue)
    assert flip_test(0, 0).pvalue == 1.0
    assert flip_test(3, 3).pvalue == 1.0


def _hand_table():
    # 3 words x 4 seeds; word "a" +2 on average, "b" -1, "c" 0
    vals = {"a": [1.0, 2.0, 3.0, 2.0], "b": [-1.0, -2.0, 0.0, -1.0], "c": [0.5, -0.5, 1.0, -1.0]}
    topic = {"a": "t1", "b": "t1", "c": "t2"}
    rows = [{"word": w, "topic": topic[w], "seed_id": f"s{i}", "change": v}
            for w, vs in vals.items() for i, v in enumerate(vs)]
    return pd.DataFrame(rows), vals


def test_word_topic_model_scores_match_hand_computation():
    df, vals = _hand_table()
    sc = metamorphic_scores(df, value="change", n_boot=400, seed=1)
    w = sc.words
    assert list(w.index) == ["a", "b", "c"]
    assert w.loc["a", "estimate"] == pytest.approx(2.0)
    assert w.loc["b", "estimate"] == pytest.approx(-1.0)
    assert w.loc["c", "estimate"] == pytest.approx(0.0)
    for word in "abc":
        assert w.loc[word, "pvalue"] == pytest.approx(signed_rank_test(vals[word]).pvalue)
        assert w.loc[word, "ci_low"] <= w.loc[word, "estimate"] <= w.loc[word, "ci_high"]
    assert np.allclose(w["pvalue_adjusted"], adjust_pvalues(w["pvalue"].to_numpy()))
    assert sc.topics.loc["t1", "estimate"] == pytest.approx((2.0 + 1.0) / 2)
    assert sc.topics.loc["t2", "estimate"] == pytest.approx(0.0)
    assert sc.model["estimate"].iloc[0] == pytest.approx((2 + 1 + 0) / 3)
    # replicate seeds of one (seed, word) are averaged first: doubling rows changes nothing
    sc2 = metamorphic_scores(pd.concat([df, df]), value="change", n_boot=400, seed=1)
    assert np.allclose(sc2.words["estimate"], w["estimate"])
    assert np.allclose(sc2.words["pvalue"], w["pvalue"])


def test_bootstrap_ci_resamples_seeds():
    # a word whose change is the same for every seed has a degenerate CI at that value
    df = pd.DataFrame({"word": ["a"] * 5, "topic": "t", "seed_id": list("vwxyz"), "change": 3.0})
    w = metamorphic_scores(df, n_boot=200).words
    assert (w.loc["a", "ci_low"], w.loc["a", "ci_high"]) == (3.0, 3.0)


def test_gender_sign_test_and_flags():
    rows = []
    for i in range(10):
        rows.append({"generator": "g", "seed_id": f"s{i}", "topic": "t", "word": "up", "gender": 1.0 if i < 9 else 0.0})
        rows.append({"generator": "g", "seed_id": f"s{i}", "topic": "t", "word": "none", "gender": 0.0})
    pairs = pd.DataFrame(rows)
    words, topics, model = score_pairs(pairs, min_effect={"gender": 0.2}, properties=["gender"],
                                       settings=AuditSettings(n_boot=200))
    up = words.loc[("g", "gender", "up")]
    assert up["estimate"] == pytest.approx(0.9)
    assert up["pvalue"] == pytest.approx(sps.binomtest(9, 9, 0.5).pvalue)
    assert bool(up["flagged"]) and up["direction"] == "increase"
    assert not bool(words.loc[("g", "gender", "none"), "flagged"])
    assert model.loc[("g", "gender"), "estimate"] == pytest.approx(0.45)


def test_min_effect_blocks_tiny_significant_changes():
    rows = [{"generator": "g", "seed_id": f"s{i}", "topic": "t", "word": "w", "skin_L": 0.5 + 0.01 * i}
            for i in range(12)]
    words, _, _ = score_pairs(pd.DataFrame(rows), min_effect={"skin_L": 2.0}, properties=["skin_L"],
                              settings=AuditSettings(n_boot=100))
    r = words.iloc[0]
    assert r["pvalue_adjusted"] < 0.05 and not bool(r["flagged"])

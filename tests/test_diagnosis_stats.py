"""FP-growth vs brute force; van Elteren, CMH and McNemar vs hand-worked examples and scipy."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.errors import FairvisionError
from fairvision.stats.itemsets import association_rules, fpgrowth
from fairvision.stats.stratified import cmh_from_samples, cochran_mantel_haenszel, mcnemar, van_elteren
from oracles_diagnosis import association_rules_bruteforce, frequent_itemsets_bruteforce


def _as_dict(df, col="count"):
    return dict(zip(df["itemsets"], df[col]))


@pytest.mark.parametrize("seed", range(12))
def test_fpgrowth_matches_bruteforce(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(3, 9))
    x = rng.random((int(rng.integers(5, 80)), m)) < rng.uniform(0.15, 0.8, m)
    ms = float(rng.choice([0.02, 0.1, 0.25, 0.4]))
    fast, slow = fpgrowth(x, ms), frequent_itemsets_bruteforce(x, ms)
    assert _as_dict(fast) == _as_dict(slow)
    r1 = association_rules(fast, min_confidence=0.3)
    r2 = association_rules_bruteforce(x, ms, min_confidence=0.3)
    key = lambda df: {(a, c): (s, cf, lf) for a, c, s, cf, lf in df[["antecedent", "consequent", "support", "confidence", "lift"]].itertuples(index=False)}
    k1, k2 = key(r1), key(r2)
    assert k1.keys() == k2.keys()
    for k in k1:
        np.testing.assert_allclose(k1[k], k2[k], rtol=1e-12)


def test_fpgrowth_hand_example_and_rule_measures():
    # the textbook example of Han et al. (2000), minimum count 3 of 5
    tx = [list("facdgimp"), list("abcflmo"), list("bfhjo"), list("bcksp"), list("afcelpmn")]
    fi = fpgrowth(tx, 0.6)
    got = {"".join(sorted(s)): c for s, c in zip(fi["itemsets"], fi["count"])}
    expected = {"f": 4, "c": 4, "a": 3, "b": 3, "m": 3, "p": 3, "cf": 3, "af": 3, "ac": 3, "acf": 3,
                "fm": 3, "cm": 3, "am": 3, "cfm": 3, "afm": 3, "acm": 3, "acfm": 3, "cp": 3}
    assert got == expected
    rules = association_rules(fi, consequent="m")
    r = rules[rules["antecedent"] == frozenset("c")].iloc[0]
    # support(cm) = 3/5, confidence = 3/4, lift = (3/4) / (3/5)
    assert r["support"] == pytest.approx(0.6) and r["confidence"] == pytest.approx(0.75) and r["lift"] == pytest.approx(1.25)
    assert all(c == frozenset("m") for c in rules["consequent"])


def test_fpgrowth_max_len_and_dataframe_names():
    x = pd.DataFrame({"a": [1, 1, 1, 0], "b": [1, 1, 0, 0], "c": [1, 1, 1, 1]}).astype(bool)
    fi = fpgrowth(x, 0.5, max_len=2)
    assert fi["length"].max() == 2
    assert _as_dict(fi) == _as_dict(frequent_itemsets_bruteforce(x, 0.5, max_len=2))
    with pytest.raises(FairvisionError):
        fpgrowth(x, 0.0)


def test_van_elteren_hand_worked():
    # stratum A: x=[1,3], y=[2] -> W=4, E=4, Var=2/3; stratum B: x=[5], y=[1,2] -> W=3, E=2, Var=2/3
    # weights 1/(N+1) = 1/4: T-E = 0.25, Var T = (2/3+2/3)/16 = 1/12, Z = 0.25*sqrt(12)
    r = van_elteren([1, 3, 5], [2, 1, 2], ["A", "A", "B"], ["A", "B", "B"])
    z = 0.25 * np.sqrt(12)
    assert r.statistic == pytest.approx(z)
    assert r.pvalue == pytest.approx(2 * stats.norm.sf(z))
    assert r.n_strata == 2


def test_van_elteren_one_stratum_is_mann_whitney():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 6, 40).astype(float), rng.integers(0, 7, 33).astype(float)  # heavy ties
    r = van_elteren(x, y, np.zeros(40), np.zeros(33))
    ref = stats.mannwhitneyu(x, y, method="asymptotic", use_continuity=False)
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-10)
    assert r.auc == pytest.approx(ref.statistic / (40 * 33))


def test_van_elteren_matches_per_stratum_bruteforce():
    rng = np.random.default_rng(5)
    xs, ys = rng.integers(0, 4, 60), rng.integers(0, 4, 50)
    x, y = rng.normal(size=60).round(1), rng.normal(0.3, size=50).round(1)
    r = van_elteren(x, y, xs, ys)
    t = e = v = 0.0
    for k in range(4):
        a, b = x[xs == k], y[ys == k]
        n1, n2 = len(a), len(b)
        ranks = stats.rankdata(np.concatenate([a, b]))
        _, cnt = np.unique(np.concatenate([a, b]), return_counts=True)
        big = n1 + n2
        t += ranks[:n1].sum() / (big + 1)
        e += n1 * (big + 1) / 2 / (big + 1)
        v += n1 * n2 / 12 * (big + 1 - (cnt ** 3 - cnt).sum() / (big * (big - 1))) / (big + 1) ** 2
    assert r.statistic == pytest.approx((t - e) / np.sqrt(v))


def test_van_elteren_null_rate():
    rng = np.random.default_rng(11)
    rej = 0
    for _ in range(300):
        s = rng.integers(0, 3, 80)
        v = rng.normal(s, 1.0)  # strata shift the level; groups do not
        g = rng.random(80) < 0.5
        rej += van_elteren(v[g], v[~g], s[g], s[~g]).pvalue < 0.05
    assert rej / 300 < 0.09


def test_cmh_hand_worked():
    t = [[[2, 3], [1, 4]], [[4, 1], [2, 3]]]
    # sum(a - Ea) = 0.5 + 1 = 1.5; sum Var = 525/900 + 600/900 = 1.25; OR_MH = (0.8 + 1.2) / (0.3 + 0.2) = 4
    r = cochran_mantel_haenszel(t, continuity=False)
    assert r.statistic == pytest.approx(1.8)
    assert r.pvalue == pytest.approx(stats.chi2.sf(1.8, 1))
    assert r.odds_ratio == pytest.approx(4.0)
    assert cochran_mantel_haenszel(t).statistic == pytest.approx(0.8)


def test_cmh_single_stratum_matches_scipy():
    t = np.array([[10, 20], [15, 5]])
    r = cochran_mantel_haenszel(t, continuity=False)
    chi2 = stats.chi2_contingency(t, correction=False)[0]
    assert r.statistic == pytest.approx(chi2 * (t.sum() - 1) / t.sum())
    ci = stats.contingency.odds_ratio(t, kind="sample").confidence_interval()  # Woolf = RBG for K = 1
    assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high))


def test_cmh_from_samples_builds_tables():
    outcome = [1, 0, 1, 1, 0, 0, 1, 0]
    group = ["x", "x", "y", "y", "x", "y", "x", "z"]
    strata = [0, 0, 0, 0, 1, 1, 1, 1]
    r = cmh_from_samples(outcome, group, strata, x="x", y="y")
    np.testing.assert_array_equal(r.strata[["a", "b", "c", "d"]].to_numpy(), [[1, 1, 2, 0], [1, 1, 0, 1]])


def test_mcnemar_exact_and_chi2():
    r = mcnemar([[5, 3], [10, 4]])
    assert r.method == "exact" and r.pvalue == pytest.approx(stats.binomtest(3, 13).pvalue)
    r = mcnemar([[50, 30], [12, 40]])
    assert r.method == "chi2" and r.statistic == pytest.approx((18 - 1) ** 2 / 42)
    assert r.pvalue == pytest.approx(stats.chi2.sf((17 ** 2) / 42, 1))
    a = np.array([1, 1, 0, 0, 1, 0], bool)
    b = np.array([1, 0, 1, 1, 1, 1], bool)
    r = mcnemar(a, b)
    assert (r.b, r.c) == (1, 3)

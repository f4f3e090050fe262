"""Exposure and skew of rankings (docs/METHODS.md §8.5): NDKL, Skew@k, MaxSkew@k, MinSkew@k, exposure and attention
against the published definitions on hand-worked rankings, the query bootstrap against a loop over resampled
queries, and the permutation test against exact enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fairvision.errors import ParameterError
from fairvision.stats import RankingFairness, rank_discounts, random_reference, ranking_fairness, ranking_measures
from fairvision.stats.ranking import RankingPool, permutation_pvalues


def _ndkl_by_hand(seq, desired):
    """Geyik et al.'s NDKL written out with math only: Z^-1 sum_i 1/log2(i+1) KL(top-i || desired)."""
    z = sum(1 / math.log2(i + 1) for i in range(1, len(seq) + 1))
    total = 0.0
    for i in range(1, len(seq) + 1):
        top = seq[:i]
        kl = sum((top.count(a) / i) * math.log((top.count(a) / i) / d) for a, d in enumerate(desired) if top.count(a))
        total += kl / math.log2(i + 1)
    return total / z


def test_discounts_are_one_over_log2_of_rank_plus_one():
    np.testing.assert_allclose(rank_discounts(4), [1.0, 1 / math.log2(3), 0.5, 1 / math.log2(5)])


def test_ndkl_hand_worked():
    # ranking A A B A against (1/2, 1/2): top-1 and top-2 are all A (KL = ln 2), top-3 (2/3, 1/3), top-4 (3/4, 1/4)
    kl3 = 2 / 3 * math.log(4 / 3) + 1 / 3 * math.log(2 / 3)
    kl4 = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    z = 1 + 1 / math.log2(3) + 0.5 + 1 / math.log2(5)
    want = (math.log(2) + math.log(2) / math.log2(3) + kl3 / 2 + kl4 / math.log2(5)) / z
    r = ranking_measures(np.array([[0, 0, 1, 0]]), [0.5, 0.5])
    assert r["ndkl"][0] == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.47436194, abs=1e-8)
    # a perfectly alternating ranking of two equal groups still has NDKL > 0 (odd prefixes cannot be 50/50)
    assert ranking_measures(np.array([[0, 1, 0, 1]]), [0.5, 0.5])["ndkl"][0] > 0


def test_ndkl_of_many_random_rankings_matches_the_definition():
    rng = np.random.default_rng(3)
    desired = np.array([0.2, 0.5, 0.3])
    codes = rng.integers(0, 3, size=(50, 7))
    r = ranking_measures(codes, desired)
    np.testing.assert_allclose(r["ndkl"], [_ndkl_by_hand(list(row), desired) for row in codes], rtol=1e-12)
    # cut-off k: the first k ranks only
    r5 = ranking_measures(codes, desired, k=5)
    np.testing.assert_allclose(r5["ndkl"], [_ndkl_by_hand(list(row[:5]), desired) for row in codes], rtol=1e-12)


def test_skew_and_its_convention_for_an_absent_group():
    # top 4 = A A A B with desired (0.25, 0.25, 0.5): C is absent and counts as 1/4 (one of the four)
    r = ranking_measures(np.array([[0, 0, 0, 1]]), [0.25, 0.25, 0.5])
    np.testing.assert_allclose(r["skew"][0], [math.log(0.75 / 0.25), math.log(0.25 / 0.25), math.log(0.25 / 0.5)])
    assert r["max_skew"][0] == pytest.approx(math.log(3))
    assert r["min_skew"][0] == pytest.approx(math.log(0.5))
    # another share for the absent group
    r = ranking_measures(np.array([[0, 0, 0, 1]]), [0.25, 0.25, 0.5], absent_share=0.01)
    assert r["skew"][0, 2] == pytest.approx(math.log(0.01 / 0.5))
    # d <= 1/k: an absent group's skew cannot be negative (documented)
    r = ranking_measures(np.array([[0, 0]]), [0.9, 0.1])
    assert r["skew"][0, 1] == pytest.approx(math.log(0.5 / 0.1)) and r["skew"][0, 1] > 0


def test_exposure_and_attention_hand_worked():
    # A B A: A holds ranks 1 and 3 (1 + 1/2), B rank 2 (1/log2 3); Z = 1 + 1/log2 3 + 1/2
    r = ranking_measures(np.array([[0, 1, 0]]), [0.5, 0.5])
    z = 1.5 + 1 / math.log2(3)
    np.testing.assert_allclose(r["exposure"][0], [1.5, 1 / math.log2(3)])
    np.testing.assert_allclose(r["attention"][0], [1.5 / z, 1 / math.log2(3) / z])
    np.testing.assert_allclose(r["share"][0], [2 / 3, 1 / 3])


def test_a_short_query_is_measured_at_its_own_depth():
    codes = np.array([[0, 1, 0, 1], [1, 0, -1, -1]])
    r = ranking_measures(codes, [0.4, 0.6])
    assert list(r["depth"]) == [4, 2]
    assert r["ndkl"][1] == pytest.approx(_ndkl_by_hand([1, 0], [0.4, 0.6]))
    np.testing.assert_allclose(r["share"][1], [0.5, 0.5])
    np.testing.assert_allclose(r["attention"][1].sum(), 1.0)


def test_bad_inputs_are_parameter_errors():
    with pytest.raises(ParameterError, match="desired share 0"):
        ranking_measures(np.array([[0, 1]]), [1.0, 0.0])
    with pytest.raises(ParameterError, match="pad only at the end"):
        ranking_measures(np.array([[0, -1, 1]]), [0.5, 0.5])
    with pytest.raises(ParameterError, match="no ranked item"):
        ranking_measures(np.array([[0, 1], [-1, -1]]), [0.5, 0.5])
    with pytest.raises(ParameterError, match="desired"):
        ranking_measures(np.array([[0]]), [-1.0, 2.0])


def test_random_reference_at_depth_one_is_the_entropy():
    # a one-item ranking of group a has NDKL = KL(delta_a || d) = -ln d_a, so its mean is the entropy of d
    d = np.array([0.1, 0.3, 0.6])
    ref = random_reference(d, np.ones(10, dtype=int), seed=1)
    assert ref["ndkl"] == pytest.approx(-(d * np.log(d)).sum(), abs=0.03)


def test_query_bootstrap_matches_a_loop_over_resampled_queries():
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 3, size=(25, 6))
    d = np.array([0.3, 0.3, 0.4])
    res = ranking_fairness(codes, d, n_boot=300, seed=11, level=0.9)
    # the draws of the query bootstrap: multinomial counts of the queries (stats.resample), replayed by a loop
    w = np.random.default_rng(11).multinomial(25, np.full(25, 1 / 25), size=300)
    ndkl_q = [_ndkl_by_hand(list(row), d) for row in codes]
    reps, shares = [], []
    for b in range(300):
        picked = np.repeat(np.arange(25), w[b])
        reps.append(np.mean([ndkl_q[q] for q in picked]))
        shares.append(np.mean([np.mean(codes[q] == 2) for q in picked]))
    assert res.summary.loc["ndkl", "estimate"] == pytest.approx(np.mean(ndkl_q))
    assert res.summary.loc["ndkl", "ci_low"] == pytest.approx(np.quantile(reps, 0.05))
    assert res.summary.loc["ndkl", "ci_high"] == pytest.approx(np.quantile(reps, 0.95))
    g = res.groups.loc["2"]
    assert g["share_ci_low"] == pytest.approx(np.quantile(shares, 0.05))
    assert g["skew"] == pytest.approx(math.log(np.mean(codes == 2) / 0.4))
    assert g["skew_ci_high"] == pytest.approx(math.log(np.quantile(shares, 0.95) / 0.4))
    assert isinstance(res, RankingFairness) and res.n_queries == 25


def test_permutation_pvalue_matches_exact_enumeration():
    # a pool of 7 items (3 of group 1), two queries ranking 3 items each: every one of the 7! shuffles
    pool = np.array([1, 1, 1, 0, 0, 0, 0])
    items = np.array([[0, 1, 3], [1, 2, 4]])
    share_w = np.zeros(7)
    for q in items:
        share_w[q] += 1 / 3 / 2
    obs = share_w[pool == 1].sum()
    centre = 3 / 7
    hits = total = 0
    for perm in itertools.permutations(pool):
        stat = share_w[np.array(perm) == 1].sum()
        hits += abs(stat - centre) >= abs(obs - centre) - 1e-12
        total += 1
    exact = hits / total
    p_share, _, n_perm = permutation_pvalues(RankingPool(items, pool), 2, n_perm=9999, seed=0)
    assert n_perm == 9999
    assert p_share[1] == pytest.approx(exact, abs=0.015)
    assert p_share[0] == pytest.approx(p_share[1])  # two groups: the same test


def _pool_rankings(planted: bool, seed: int):
    rng = np.random.default_rng(seed)
    pool = rng.choice(3, size=300, p=[0.5, 0.3, 0.2])
    rows = []
    for _ in range(40):
        if planted:  # group 2 pushed to the top: three of the first four ranks
            top = np.r_[rng.choice(np.flatnonzero(pool == 2), 3, replace=False),
                        rng.choice(np.flatnonzero(pool != 2), 7, replace=False)]
        else:
            top = rng.permutation(300)[:10]
        rows.append(top)
    items = np.array(rows)
    return items, pool


@pytest.mark.parametrize("planted", [True, False])
def test_a_planted_bias_is_flagged_and_a_null_one_is_not(planted):
    items, pool = _pool_rankings(planted, seed=2)
    desired = np.bincount(pool, minlength=3) / len(pool)
    res = ranking_fairness(pool[items], desired, groups=["a", "b", "c"], pool=RankingPool(items, pool), n_boot=200)
    g = res.groups
    if planted:
        assert bool(g.loc["c", "flagged"]) and g.loc["c", "attention_ratio"] > 1.3
        assert g.loc["c", "attention_pvalue_adjusted"] < 0.01
        assert res.summary.loc["ndkl", "estimate"] > res.summary.loc["ndkl", "random"]
    else:
        assert not g["flagged"].any()
        assert (g["pvalue_adjusted"] > 0.05).all()
    q = res.quantities()
    assert q["n_flagged_groups"] == float(g["flagged"].sum()) and "skew.c" in q and "attention_ratio.a" in q


def test_normal_approximation_of_a_large_pool_matches_the_permutations():
    # 600 items: 9,999 permutations x 600 items is over the Monte Carlo limit, 5,000 are under it
    rng = np.random.default_rng(5)
    pool = rng.choice(3, size=600, p=[0.5, 0.3, 0.2])
    items = np.array([rng.permutation(600)[:8] for _ in range(60)])
    items[:, 0] = rng.choice(np.flatnonzero(pool == 2), 60)  # a mild lean towards group 2 at rank 1
    rp = RankingPool(items, pool)
    p_mc, a_mc, n_mc = permutation_pvalues(rp, 3, n_perm=5000, seed=1)
    p_nr, a_nr, n_nr = permutation_pvalues(rp, 3, n_perm=9999, seed=1)
    assert n_mc == 5000 and n_nr == 0
    np.testing.assert_allclose(p_nr, p_mc, atol=0.03)
    np.testing.assert_allclose(a_nr, a_mc, atol=0.03)
    assert a_nr[2] < 0.01  # the lean is found by the attention test

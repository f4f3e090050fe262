"""Elo ratings against a hand-computed sequence (METHODS.md section 3) and group t-tests."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.errors import ColumnError
from fairvision.stats.rating import compare_elo_groups, elo


def _hand(games, m=400, k=16, init=1400):
    r = {}
    for a, b, w in games:
        ra, rb = r.get(a, init), r.get(b, init)
        pa = 1 / (1 + 10 ** ((rb - ra) / m))
        sa = 1.0 if w == a else 0.0
        r[a] = ra + k * (sa - pa)
        r[b] = rb + k * ((1 - sa) - (1 - pa))
    return r


def test_hand_computed_sequence():
    games = pd.DataFrame({"a": ["A", "A", "B"], "b": ["B", "C", "C"], "winner": ["A", "C", "B"]})
    r = elo(games)
    # game 1: equal ratings, p = 0.5: A 1408, B 1392
    # game 2: p_A = 1/(1+10^(-8/400)) = 0.511511; A = 1408 - 16*0.511511 = 1399.815826
    # game 3: B 1392 vs C 1408.184174: p_B = 1/(1+10^(16.184174/400)) = 0.476722; B = 1392 + 16*0.523278
    assert r["A"] == pytest.approx(1399.815826, abs=1e-6)
    assert r["B"] == pytest.approx(1392 + 16 * (1 - 1 / (1 + 10 ** (16.184174 / 400))), abs=1e-5)
    ref = _hand(games.itertuples(index=False, name=None))
    for p in "ABC":
        assert r[p] == pytest.approx(ref[p], abs=1e-9)
    # total rating is conserved
    assert r.sum() == pytest.approx(3 * 1400)


def test_parameters_and_random_orders():
    rng = np.random.default_rng(0)
    players = list("ABCDEF")
    strength = dict(zip(players, range(6)))
    rows = []
    for _ in range(300):
        a, b = rng.choice(players, 2, replace=False)
        pa = 1 / (1 + np.exp(strength[b] - strength[a]))
        rows.append((a, b, a if rng.random() < pa else b))
    games = pd.DataFrame(rows, columns=["a", "b", "winner"])
    r = elo(games, m=200, k=32, initial=1000)
    ref = _hand(rows, 200, 32, 1000)
    for p in players:
        assert r[p] == pytest.approx(ref[p], abs=1e-9)
    avg = elo(games, n_orders=20, seed=1)
    assert list(avg.columns) == ["mean", "sd", "games"]
    assert avg["mean"].idxmax() == "F" and avg["mean"].idxmin() == "A"
    assert (avg["sd"] > 0).all()
    # the mean over orders equals the hand computation over the same seeded permutations
    orders = np.argsort(np.random.default_rng(1).random((20, len(games))), axis=1)
    hand = pd.DataFrame([_hand([rows[i] for i in o]) for o in orders])
    for p in players:
        assert avg.loc[p, "mean"] == pytest.approx(hand[p].mean(), abs=1e-9)
        assert avg.loc[p, "sd"] == pytest.approx(hand[p].std(ddof=1), abs=1e-9)


def test_group_t_tests_bonferroni():
    ratings = pd.Series([1500, 1510, 1490, 1300, 1310, 1290, 1400, 1405], index=list("abcdefgh"))
    groups = pd.Series(["x", "x", "x", "y", "y", "y", "z", "z"], index=list("abcdefgh"))
    res = compare_elo_groups(ratings, groups, correction="bonferroni")
    assert len(res) == 3
    ref = stats.ttest_ind([1500, 1510, 1490], [1300, 1310, 1290])
    row = res[(res.group_a == "x") & (res.group_b == "y")].iloc[0]
    assert row.statistic == pytest.approx(ref.statistic) and row.pvalue == pytest.approx(ref.pvalue)
    assert row.pvalue_adjusted == pytest.approx(min(1, 3 * ref.pvalue))


def test_bad_games():
    with pytest.raises(ColumnError, match="winner"):
        elo(pd.DataFrame({"a": ["A"], "b": ["B"]}))
    with pytest.raises(ColumnError, match="row 2"):
        elo(pd.DataFrame({"a": ["A", "A"], "b": ["B", "C"], "winner": ["A", "Z"]}))

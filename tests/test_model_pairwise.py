"""All-pairs Mann-Whitney U and disparity D against scipy and hand-worked values (METHODS.md 4)."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.errors import FairvisionError
from fairvision.stats.pairwise import disparity, exact_u_counts, pairwise_mannwhitney, top_pair


def _check_against_scipy(vals, res):
    for row in res.itertuples(index=False):
        a, b = vals[row.group_a], vals[row.group_b]
        ref = stats.mannwhitneyu(a, b, alternative="two-sided")
        assert row.u == ref.statistic
        assert abs(row.pvalue - ref.pvalue) <= 1e-9, (row, ref)


@pytest.mark.parametrize("kind", ["continuous", "ties", "coarse", "small_exact", "mixed_sizes"])
def test_pvalues_equal_scipy(kind):
    rng = np.random.default_rng(hash(kind) % 2**32)
    G = 7
    if kind == "small_exact":
        sizes = rng.integers(1, 9, G)
    elif kind == "mixed_sizes":
        sizes = np.r_[rng.integers(1, 9, 3), rng.integers(9, 120, G - 3)]
    else:
        sizes = rng.integers(5, 60, G)
    vals = {}
    for g, n in enumerate(sizes):
        if kind == "ties":
            vals[f"g{g}"] = rng.integers(0, 6, n).astype(float)
        elif kind == "coarse":
            vals[f"g{g}"] = np.round(rng.random(n), 1)
        else:
            vals[f"g{g}"] = rng.normal(g * 0.1, 1, n)
    res = pairwise_mannwhitney(vals, correction="none")
    assert len(res) == G * (G - 1) // 2
    _check_against_scipy(vals, res)
    if kind == "small_exact":
        assert (res["method"] == "exact").all()


def test_array_interface_and_checked_columns():
    rng = np.random.default_rng(3)
    x = rng.normal(size=90)
    g = np.repeat(["a", "b", "c"], 30)
    x[g == "c"] += 1.0
    res = pairwise_mannwhitney(x, g, correction="bonferroni")
    for col in ("group_a", "group_b", "u", "pvalue", "pvalue_adjusted", "significant", "disparity"):
        assert col in res.columns
    assert list(zip(res.group_a, res.group_b)) == [("a", "b"), ("a", "c"), ("b", "c")]
    np.testing.assert_allclose(res.pvalue_adjusted, np.minimum(1, 3 * res.pvalue))
    assert (res.significant == (res.pvalue < 0.05 / 3)).all()
    _check_against_scipy({k: x[g == k] for k in "abc"}, res)


def test_exact_with_large_second_sample_and_all_tied():
    rng = np.random.default_rng(5)
    vals = {"small": rng.normal(size=5), "big": rng.normal(size=400), "tiny": rng.normal(size=1)}
    res = pairwise_mannwhitney(vals, correction="none")
    _check_against_scipy(vals, res)
    same = {"a": np.ones(12), "b": np.ones(15)}
    res = pairwise_mannwhitney(same, correction="none")
    assert res.pvalue.iloc[0] == stats.mannwhitneyu(same["a"], same["b"]).pvalue == 1.0


def test_u_distribution_counts_by_brute_force():
    import itertools

    m, n = 3, 4
    counts = np.zeros(m * n + 1, int)
    for pos in itertools.combinations(range(m + n), m):  # ranks of the first sample
        u = sum(pos) - m * (m - 1) // 2
        counts[u] += 1
    np.testing.assert_array_equal(exact_u_counts(m, n), counts)


def test_hand_worked_u_and_rank_biserial():
    # a = [1, 2], b = [3, 4, 5]: no a beats any b, U_a = 0, exact two-sided p = 2 / C(5, 2) = 0.2
    res = pairwise_mannwhitney({"a": [1, 2], "b": [3, 4, 5]}, correction="none")
    row = res.iloc[0]
    assert row.u == 0 and row.rank_biserial == -1.0
    assert row.pvalue == pytest.approx(0.2)
    assert row.best == "b" and row.worst == "a"
    assert row.disparity == pytest.approx(1 - 1.5 / 4)
    assert row.effect_size == 1.0


def test_lower_is_better_swaps_best_and_worst():
    vals = {"a": [0.1, 0.2, 0.3], "b": [0.4, 0.5, 0.6]}
    up = pairwise_mannwhitney(vals, correction="none").iloc[0]
    down = pairwise_mannwhitney(vals, correction="none", higher_is_better=False).iloc[0]
    assert up.best == "b" and down.best == "a"
    # D = 1 - MED(best)/MED(worst) for lower-is-better, still in [0, 1]
    assert down.disparity == pytest.approx(1 - 0.2 / 0.5)
    assert up.disparity == pytest.approx(1 - 0.2 / 0.5)
    assert down.effect_size == pytest.approx(1.0)


def test_disparity_edge_cases():
    assert disparity(0.0, 0.8) == 1.0
    assert disparity(0.0, 0.0) == 0.0
    assert disparity(0.6, 0.8) == pytest.approx(0.25)
    assert disparity(0.8, 0.6, higher_is_better=False) == pytest.approx(0.25)
    assert disparity(0.0, 0.0, higher_is_better=False) == 0.0
    assert disparity(0.5, 0.0, higher_is_better=False) == 1.0
    np.testing.assert_allclose(disparity([0.5, 0.0], [1.0, 0.0]), [0.5, 0.0])
    with pytest.raises(FairvisionError):
        disparity(0.9, 0.5)


def test_min_size_by_subjects_and_too_small_reported():
    x = np.arange(30, dtype=float)
    g = np.repeat(["a", "b", "c"], 10)
    subj = np.r_[np.arange(10), np.arange(10, 20), np.repeat(99, 10)]  # c: one person
    res = pairwise_mannwhitney(x, g, min_size=5, subjects=subj)
    assert res.attrs["too_small"] == ["c"]
    assert len(res) == 1 and res.attrs["n_tests"] == 1
    assert top_pair(res) is not None


def test_bad_input_errors():
    with pytest.raises(FairvisionError, match="NaN"):
        pairwise_mannwhitney([1.0, np.nan], ["a", "b"])
    with pytest.raises(FairvisionError, match="group labels"):
        pairwise_mannwhitney([1.0, 2.0], ["a"])
    with pytest.raises(FairvisionError, match="correction"):
        pairwise_mannwhitney([1.0, 2.0], ["a", "b"], correction="sidak")


def test_false_positive_rate_at_nominal_level():
    """No planted effect: the share of uncorrected p < 0.05 stays near 5% and family-wise errors are rare."""
    rng = np.random.default_rng(11)
    ps, family_errors = [], 0
    n_seeds = 200
    for _ in range(n_seeds):
        x = rng.random(6 * 25)
        g = np.repeat(np.arange(6), 25)
        res = pairwise_mannwhitney(x, g, correction="bonferroni")
        ps.append(res.pvalue.to_numpy())
        family_errors += bool(res.significant.any())
    ps = np.concatenate(ps)
    rate = (ps < 0.05).mean()
    assert 0.035 < rate < 0.065, rate  # 3,000 correlated tests: nominal 5%
    assert family_errors / n_seeds <= 0.08  # Bonferroni FWER <= 5% (+ sampling noise)


def test_public_names_through_fairvision_stats():
    import subprocess
    import sys

    # lazily exported names resolve in any order
    code = ("import fairvision.stats as S; od, _ = S.overall_disparity(__import__('pandas').DataFrame([[1.0, 0.5]]));"
            "assert abs(S.disparity(0.6, 0.8) - 0.25) < 1e-12; assert od == 0.5;"
            "r = S.pairwise_mannwhitney([1, 2, 3, 4], ['a', 'a', 'b', 'b']); assert len(r) == 1;"
            "assert S.elo is not None and S.recall_matrix is not None and S.intraclass_disparity is not None")
    for prefix in ("", "import fairvision.stats as S; S.disparity(0.5, 1.0);"):
        p = subprocess.run([sys.executable, "-c", prefix + code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr


def test_exact_method_with_ties_matches_scipy():
    from scipy.stats import mannwhitneyu

    a = [3.0]
    b = [1, 1, 0, 1, 2, 3, 3, 0, 2, 3, 1]
    r = pairwise_mannwhitney(a + b, ["a"] * len(a) + ["b"] * len(b), correction="none", method="exact")
    assert r["pvalue"].iloc[0] == pytest.approx(mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue, abs=1e-12)

"""Distribution parity test (docs/METHODS.md §8.1, §8.2): hand-worked values and independent cross-checks."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st
from scipy.stats.contingency import relative_risk

from fairvision.audits.retrieval import DEFAULTS as RETRIEVAL, parity_from_results
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.stats.chisquare import SmallExpectedCountWarning, batch_chi2, chi2_test, random_tables
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.knn import knn_search
from fairvision.stats.parity import (
    ParityOptions,
    contingency,
    contrast_tests,
    normalized_rr,
    parity_test,
    risk_ratio,
)

# The paper's Table 1 (K = 6, three values A, B, C, plus the catalog row)
TABLE1 = pd.DataFrame(
    [[300, 50, 250], [40, 600, 260], [80, 150, 1800], [100, 150, 350]],
    index=["A", "B", "C", "catalog"],
    columns=["A", "B", "C"],
)


def test_contrast_hand_worked_table1_value_a():
    # 2 x 2 for z^q = A: [[300, 300], [100, 500]]; N = 1200, margins 600/600 and 400/800,
    # expected 200, 400, 200, 400, |O - E| = 100 everywhere:
    # X^2 = 100^2/200 * 2 + 100^2/400 * 2 = 150.
    # (The paper's Table 2 prints 600 for the catalog's "not A" cell; the catalog row of
    # its Table 1 has 150 + 350 = 500 such items.)
    c = contrast_tests(TABLE1, correction="none")
    assert c.loc["A", "statistic"] == pytest.approx(150.0, rel=1e-12)
    assert c.loc["A", "df"] == 1
    # RR = (300/600) / (100/600) = 3; Katz se = sqrt(1/300 - 1/600 + 1/100 - 1/600) = 0.1
    assert c.loc["A", "rr"] == pytest.approx(3.0)
    z = 1.959963984540054
    assert c.loc["A", "rr_ci_low"] == pytest.approx(3 * math.exp(-0.1 * z), rel=1e-12)
    assert c.loc["A", "rr_ci_high"] == pytest.approx(3 * math.exp(0.1 * z), rel=1e-12)
    assert c.loc["A", "nrr"] == pytest.approx(1 / 3)
    assert not c.loc["A", "fair_80"]


def test_contrasts_match_scipy():
    c = contrast_tests(TABLE1, correction="none")
    cat = TABLE1.loc["catalog"].to_numpy()
    for v in ["A", "B", "C"]:
        a = TABLE1.loc[v, v]
        n1 = TABLE1.loc[v].sum()
        tab = np.array([[a, n1 - a], [cat[list(TABLE1.columns).index(v)], cat.sum() - cat[list(TABLE1.columns).index(v)]]])
        ref = st.chi2_contingency(tab, correction=False)
        assert c.loc[v, "statistic"] == pytest.approx(ref.statistic, rel=1e-12)
        assert c.loc[v, "pvalue"] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        rr = relative_risk(int(a), int(n1), int(tab[1, 0]), int(cat.sum()))
        ci = rr.confidence_interval(0.95)
        assert c.loc[v, "rr"] == pytest.approx(rr.relative_risk)
        assert c.loc[v, "rr_ci_low"] == pytest.approx(ci.low)
        assert c.loc[v, "rr_ci_high"] == pytest.approx(ci.high)


def test_continuity_is_explicit_option_matching_scipy_default():
    tab = np.array([[12, 18], [25, 95]])
    plain = chi2_test(tab)
    corrected = chi2_test(tab, continuity=True)
    assert plain.statistic == pytest.approx(st.chi2_contingency(tab, correction=False).statistic)
    assert corrected.statistic == pytest.approx(st.chi2_contingency(tab, correction=True).statistic)
    assert corrected.statistic < plain.statistic
    # the contrast tests default to no correction
    t = pd.DataFrame([[12, 18], [20, 40], [25, 95]], index=["x", "y", "catalog"], columns=["x", "y"])
    assert contrast_tests(t, correction="none").loc["x", "statistic"] == pytest.approx(plain.statistic)
    assert contrast_tests(t, continuity=True, correction="none").loc["x", "statistic"] == pytest.approx(corrected.statistic)


def test_omnibus_matches_scipy_on_table1():
    res = chi2_test(TABLE1.to_numpy())
    ref = st.chi2_contingency(TABLE1.to_numpy())
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.df == ref.dof == 6
    assert res.method == "chi2" and not res.small_expected


def test_small_expected_counts_warn_and_use_fisher():
    # the paper's dresses ST1 case: 2 queries (12 results, none ST1), 2 ST1 items in 1812
    tab = np.array([[0, 12], [2, 1810]])
    with pytest.warns(SmallExpectedCountWarning):
        res = chi2_test(tab)
    assert res.method == "fisher"
    assert res.pvalue == pytest.approx(st.fisher_exact(tab).pvalue)
    assert res.p_asymptotic == pytest.approx(st.chi2_contingency(tab, correction=False).pvalue)
    rr, lo, hi = risk_ratio(0, 12, 2, 1812)
    assert rr == 0 and lo == 0 and np.isinf(hi)  # the paper's "0 [0, inf]"


def _exact_conditional_pvalue(table):
    """Brute force: every table with the observed margins, hypergeometric probabilities."""
    table = np.asarray(table)
    rows, cols = table.sum(1), table.sum(0)
    n = table.sum()
    obs = batch_chi2(table)
    logp_norm = (sum(math.lgamma(r + 1) for r in rows) + sum(math.lgamma(c + 1) for c in cols) - math.lgamma(n + 1))
    total = 0.0
    # 2 x 3 table: choose the first row's first two cells
    for x0, x1 in itertools.product(range(rows[0] + 1), repeat=2):
        x2 = rows[0] - x0 - x1
        if x2 < 0 or x0 > cols[0] or x1 > cols[1] or x2 > cols[2]:
            continue
        t = np.array([[x0, x1, x2], [cols[0] - x0, cols[1] - x1, cols[2] - x2]])
        if (t < 0).any():
            continue
        logp = logp_norm - sum(math.lgamma(v + 1) for v in t.ravel())
        if batch_chi2(t) >= obs - 1e-9:
            total += math.exp(logp)
    return total


def test_monte_carlo_pvalue_matches_exact_enumeration():
    tab = np.array([[1, 4, 0], [6, 2, 3]])
    exact = _exact_conditional_pvalue(tab)
    with pytest.warns(SmallExpectedCountWarning):
        res = chi2_test(tab, mc_samples=20000, seed=1)
    assert res.method == "monte-carlo"
    assert abs(res.pvalue - exact) < 4 * math.sqrt(exact * (1 - exact) / 20000) + 1e-3


def test_random_tables_keep_margins_and_mean():
    rng = np.random.default_rng(3)
    rows, cols = np.array([5, 7, 3]), np.array([4, 6, 5])
    t = random_tables(rows, cols, 20000, rng)
    assert (t.sum(axis=2) == rows).all() and (t.sum(axis=1) == cols).all() and (t >= 0).all()
    assert np.allclose(t.mean(axis=0), np.outer(rows, cols) / rows.sum(), atol=0.05)


def test_normalized_rr_and_80_rule():
    assert normalized_rr([0.5, 1.0, 1.25, 2.0, 0.8]).tolist() == pytest.approx([0.5, 1.0, 0.8, 0.5, 0.8])


def _toy():
    # 6 items, 2 values; every item queries and gets its 2 nearest
    items = pd.DataFrame({"item_id": list("abcdef"), "tone": ["x", "x", "x", "y", "y", "y"]})
    res = pd.DataFrame({
        "query_id": list("aabbccddeeff"),
        "rank": [1, 2] * 6,
        "item_id": list("bcacabefdfde"),
    })
    return items, res


def test_parity_test_builds_contingency_and_per_rank():
    items, res = _toy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallExpectedCountWarning)
        out = parity_from_results(res, items, "tone", k=2)
    t = out.table
    assert t.loc["x"].tolist() == [6, 0] and t.loc["y"].tolist() == [0, 6] and t.loc["catalog"].tolist() == [3, 3]
    assert out.omnibus.df == 2
    assert out.omnibus.statistic == pytest.approx(st.chi2_contingency(t.to_numpy()).statistic)
    assert list(out.per_rank.index) == [1, 2]
    assert out.rank_tables[1].loc["x"].tolist() == [3, 0]
    assert out.contrasts.loc["x", "n_queries"] == 3 and out.contrasts.loc["x", "too_small"]
    assert out.contrasts.loc["x", "rr"] == pytest.approx(2.0)
    assert out.warnings  # tiny counts are flagged
    frame = out.to_frame()
    assert frame.index[0] == "omnibus"


def test_parity_test_api_and_correction():
    rng = np.random.default_rng(0)
    n = 300
    vals = rng.choice(["ST1", "ST2", "ST3"], size=n, p=[0.2, 0.3, 0.5])
    items = pd.DataFrame({"item_id": [f"i{i}" for i in range(n)], "st": vals})
    rows = []
    for i in range(n):
        same = np.flatnonzero(vals == vals[i])
        pool = same if rng.random() < 0.5 else np.arange(n)
        pool = pool[pool != i]
        picks = rng.choice(pool, size=6, replace=False)
        rows += [(f"i{i}", r + 1, f"i{j}") for r, j in enumerate(picks)]
    res = pd.DataFrame(rows, columns=["query_id", "rank", "item_id"])
    out = parity_from_results(res, items, "st", k=6, settings=RETRIEVAL.replace(correction="bonferroni"))
    assert out.omnibus.df == 6 and out.omnibus.pvalue < 1e-6
    assert {"statistic", "pvalue", "rr", "rr_ci_low", "rr_ci_high", "nrr", "fair_80"} <= set(out.contrasts.columns)
    assert np.allclose(out.contrasts["pvalue_adjusted"], adjust_pvalues(out.contrasts["pvalue"], "bonferroni"))
    assert (out.contrasts["rr"] > 1).all()
    # k smaller than the lists: only the top 3 count
    out3 = parity_from_results(res, items, "st", k=3)
    assert out3.table.drop(index="catalog").to_numpy().sum() == 3 * n


def test_parity_test_bad_input_names_row_or_column():
    items, res = _toy()
    with pytest.raises(ColumnError, match="tone2"):
        parity_from_results(res, items, "tone2")
    bad = res.copy()
    bad.loc[4, "item_id"] = "zz"
    with pytest.raises(FairvisionError, match="row 5.*'zz'"):
        parity_from_results(bad, items, "tone")
    with pytest.raises(ParameterError, match="^k 3 is deeper than the runs in .*at most 2 results per query"):
        parity_from_results(res, items, "tone", k=3)


def test_contingency_counts():
    t = contingency(["x", "x", "y"], ["x", "y", "y"], ["x", "y", "y", "y"], ["x", "y"])
    assert t.to_numpy().tolist() == [[1, 1], [0, 1], [1, 3]]


def test_value_without_queries_is_not_judged():
    items = pd.DataFrame({"item_id": list("abcdefgh"),
                          "tone": pd.Categorical(list("xxxyyyxy"), categories=["x", "y", "z"])})
    res = pd.DataFrame({"query_id": list("abcdefgh"), "rank": [1] * 8, "item_id": list("bcadefhg")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallExpectedCountWarning)
        out = parity_from_results(res, items, "tone", k=1)
    assert list(out.table.index) == ["x", "y", "z", "catalog"]
    assert out.omnibus.df == 2  # the empty z row and column are dropped
    assert pd.isna(out.contrasts.loc["z", "fair_80"]) and np.isnan(out.contrasts.loc["z", "rr"])
    assert out.contrasts.loc["x", "rr"] == pytest.approx((3 / 4) / (4 / 8))
    assert out.omnibus.method == "monte-carlo"


def test_array_parity_test_equals_the_results_table_route():
    items, res = _toy()
    tone = items.set_index("item_id")["tone"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallExpectedCountWarning)
        via_tables = parity_from_results(res, items, "tone", k=2)
        direct = parity_test(res["query_id"].map(tone), res["item_id"].map(tone), items["tone"],
                             query_ids=res["query_id"], ranks=res["rank"], k=2)
    pd.testing.assert_frame_equal(direct.table, via_tables.table)
    pd.testing.assert_frame_equal(direct.contrasts, via_tables.contrasts)
    assert (direct.statistic, direct.pvalue, direct.df) == (via_tables.omnibus.statistic, via_tables.omnibus.pvalue, 2)
    # without ids and ranks every pair is a query of its own (K = 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallExpectedCountWarning)
        single = parity_test(res["query_id"].map(tone), res["item_id"].map(tone), items["tone"])
    assert single.k == 1 and single.n_queries == len(res)
    assert single.statistic == pytest.approx(direct.statistic)


def test_parity_options_reach_the_contrast_tests():
    items, res = _toy()
    tone = items.set_index("item_id")["tone"]
    args = (res["query_id"].map(tone), res["item_id"].map(tone), items["tone"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallExpectedCountWarning)
        plain = parity_test(*args, query_ids=res["query_id"], ranks=res["rank"], k=2, correction="none")
        yates = parity_test(*args, query_ids=res["query_id"], ranks=res["rank"], k=2, correction="none",
                            options=ParityOptions(continuity=True, exact="never", min_queries=2))
        expected = contrast_tests(plain.table, n_queries=plain.contrasts["n_queries"], correction="none",
                                  continuity=True, exact="never", min_queries=2)
    pd.testing.assert_frame_equal(yates.contrasts, expected, check_names=False)
    assert yates.continuity and not plain.continuity
    assert not yates.contrasts["statistic"].equals(plain.contrasts["statistic"])
    with pytest.raises(ParameterError, match="^alpha must be in"):
        parity_test(*args, alpha=1.5)


def test_deprecated_retrieval_facade_forwards():
    import fairvision.retrieval as old  # the one place that may import the deprecated facade

    with pytest.warns(DeprecationWarning, match="fairvision.stats.knn.knn_search"):
        assert old.knn_search is knn_search
    with pytest.warns(DeprecationWarning, match="parity_from_results"):
        assert old.parity_test is parity_from_results
    with pytest.raises(AttributeError):
        old.no_such_name

"""Planning numerics (docs/METHODS.md §6.7, §8.3): hand-worked closed forms, an independent root finder,
Monte Carlo simulations of the planned tests, and the retrieval simulation of stats.power."""
import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from fairvision.errors import ParameterError
from fairvision.stats.power import PAPER_P_Z, catalog_adequacy, detectable_nrr, power_grid
from fairvision.stats.power_model import (
    CatalogDesign, ModelDesign, catalog_plan, detectable_mean_difference, detectable_rate_difference, effective_n,
    mean_difference_power, plan_model_audit, planning_alpha,
)

Z975, Z80 = 1.959964, 0.841621  # normal quantiles from tables


def test_mean_difference_hand_worked():
    # 100 subjects per group, one image each: (1.959964 + 0.841621) * sqrt(2 / 100) = 0.396204
    assert detectable_mean_difference(100, 100, images_per_subject=1) == pytest.approx(0.396204, abs=1e-5)
    # 4 images per subject, ICC 0.5: design effect 2.5, effective n 160; 2.801585 * sqrt(2 / 160) = 0.313227
    assert effective_n(100, 4, 0.5) == pytest.approx(160)
    assert detectable_mean_difference(100, 100, images_per_subject=4, icc=0.5) == pytest.approx(0.313227, abs=1e-5)
    # ICC 1: extra images add nothing; ICC 0: 4 images are 4 subjects
    assert detectable_mean_difference(100, 100, images_per_subject=4, icc=1) == pytest.approx(0.396204, abs=1e-5)
    assert detectable_mean_difference(100, 100, images_per_subject=4, icc=0) == pytest.approx(0.396204 / 2, abs=1e-5)
    # three groups: 3 pairs, Bonferroni alpha 0.05 / 3; z_{1 - 0.05/6} = 2.393980
    d = detectable_mean_difference(100, 100, images_per_subject=1, n_tests=3, correction="holm", sd=2.0)
    assert d == pytest.approx((2.393980 + Z80) * 2.0 * np.sqrt(0.02), abs=1e-5)
    assert planning_alpha(0.05, 3, "none") == 0.05
    assert planning_alpha(0.05, 3, "bh") == planning_alpha(0.05, 3, "bonferroni") == pytest.approx(0.05 / 3)


def test_vectorised_over_a_grid_equals_single_calls():
    n1 = np.array([[10], [40], [200]])
    n2 = np.array([15, 60, 300])
    grid = detectable_rate_difference(n1, n2, base_rate=0.2, images_per_subject=2, icc=0.3)
    assert grid.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            one = detectable_rate_difference(int(n1[i, 0]), int(n2[j]), base_rate=0.2, images_per_subject=2, icc=0.3)
            assert grid[i, j] == pytest.approx(float(one))


def test_rate_difference_solves_fleiss_formula_independently():
    n1, n2, p1 = 120, 80, 0.3
    za, zb = stats.norm.isf(0.05 / 2), stats.norm.ppf(0.9)

    def g(p2):
        pbar = (n1 * p1 + n2 * p2) / (n1 + n2)
        return (p2 - p1) - za * np.sqrt(pbar * (1 - pbar) * (1 / n1 + 1 / n2)) - zb * np.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)

    p2 = optimize.brentq(g, p1 + 1e-9, 1.0)
    got = detectable_rate_difference(n1, n2, base_rate=p1, images_per_subject=1, power=0.9)
    assert got == pytest.approx(p2 - p1, abs=1e-9)
    # not reachable: two subjects per group and a tiny alpha
    assert np.isnan(detectable_rate_difference(2, 2, base_rate=0.5, alpha=0.001))


def test_mean_monte_carlo_with_clustered_images():
    """Simulate subjects with a random effect (ICC 0.5) and three images each, test the subject means with
    Student's t test at the Bonferroni level of three groups; power at the planned difference is about 0.8."""
    n, m, icc, trials = 60, 3, 0.5, 4000
    delta = float(detectable_mean_difference(n, n, images_per_subject=m, icc=icc, n_tests=3, correction="bonferroni"))
    rng = np.random.default_rng(1)

    def group(shift):
        subject = rng.normal(0, np.sqrt(icc), (trials, n, 1))
        images = rng.normal(0, np.sqrt(1 - icc), (trials, n, m))
        return (shift + subject + images).mean(axis=2)

    p = stats.ttest_ind(group(delta), group(0.0), axis=1).pvalue
    assert (p < 0.05 / 3).mean() == pytest.approx(0.8, abs=0.03)
    # and the curve: at delta = 0 only alpha rejects
    assert mean_difference_power(0.0, n, n, images_per_subject=m, icc=icc, n_tests=3, correction="bonferroni") == \
        pytest.approx(0.05 / 3)
    assert mean_difference_power(delta, n, n, images_per_subject=m, icc=icc, n_tests=3, correction="bonferroni") == \
        pytest.approx(0.8, abs=1e-4)


def test_rate_monte_carlo_two_proportion_test():
    n1, n2, p1, trials = 150, 100, 0.3, 20000
    d = float(detectable_rate_difference(n1, n2, base_rate=p1, images_per_subject=1))
    rng = np.random.default_rng(2)
    x1, x2 = rng.binomial(n1, p1, trials), rng.binomial(n2, p1 + d, trials)
    pbar = (x1 + x2) / (n1 + n2)
    z = (x2 / n2 - x1 / n1) / np.sqrt(pbar * (1 - pbar) * (1 / n1 + 1 / n2))
    assert (2 * stats.norm.sf(np.abs(z)) < 0.05).mean() == pytest.approx(0.8, abs=0.02)


def test_plan_model_audit_pairs_and_curve():
    plan = plan_model_audit({"a": 40, "b": 60, "c": 100}, ModelDesign(images_per_subject=3, icc=0.25, sd=2.0,
                                                                       base_rate=0.9), correction="bonferroni")
    assert plan.n_tests == 3 and plan.alpha_per_test == pytest.approx(0.05 / 3)
    row = plan.pairs.set_index(["group_a", "group_b"]).loc[("a", "c")]
    de = 1 + 2 * 0.25
    hand = (stats.norm.isf(0.05 / 6) + Z80) * np.sqrt(de / 120 + de / 300)
    assert row["mean_difference_sd"] == pytest.approx(hand, rel=1e-6)
    assert row["mean_difference"] == pytest.approx(2 * hand, rel=1e-6)
    # a rise from 0.9 is a fall from 0.1 for the other class
    assert row["rate_fall"] == pytest.approx(float(detectable_rate_difference(40, 100, base_rate=0.1, images_per_subject=3,
                                                                              icc=0.25, n_tests=3, correction="bonferroni")))
    assert plan.curve["mean_difference_sd"].is_monotonic_decreasing


@pytest.mark.parametrize("call, name", [
    (lambda: effective_n(10, 3, icc=2), "icc"),
    (lambda: effective_n(10, 0.5), "images_per_subject"),
    (lambda: detectable_mean_difference(10, 10, alpha=1.5), "alpha"),
    (lambda: detectable_mean_difference(10, 10, power=1.0), "power"),
    (lambda: detectable_mean_difference(10, 10, correction="sidak"), "correction"),
    (lambda: detectable_rate_difference(10, 10, base_rate=0), "base_rate"),
    (lambda: plan_model_audit({"a": 10}), "subjects"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ParameterError) as err:
        call()
    assert str(err.value).startswith(name)


def test_catalog_plan_agrees_with_stats_power():
    plan = catalog_plan(PAPER_P_Z, CatalogDesign(k=6, target_nrr=0.8, sizes=(100, 250)), alpha=0.01, trials=200)
    adequacy = catalog_adequacy(PAPER_P_Z, 250, k=6, alpha=0.01, trials=200)
    pd.testing.assert_series_equal(plan.needed["n_needed"], adequacy.table["n_needed"], check_names=False)
    # shares that sum to exactly 1 in binary, so no renormalisation changes the simulated draws
    dyadic = {"a": 0.5, "b": 0.25, "c": 0.125, "d": 0.125}
    small = catalog_plan(dyadic, CatalogDesign(k=4, target_nrr=0.75, sizes=(100, 250)), alpha=0.05, trials=200)
    grid = power_grid(dyadic, rrs=[0.75, 1 / 0.75], ns=[100, 250], k=4, alpha=0.05, trials=200)
    for n in (100, 250):
        for side, rr in (("below", 0.75), ("above", 1 / 0.75)):
            got = small.power.loc[(n, side)]
            want = grid.loc[(n, rr)]
            assert got.to_numpy() == pytest.approx(want[["omnibus", "a", "b", "c", "d"]].to_numpy())
    # at the size it needs, the omnibus test detects nRR 0.8 below parity (bisection to 1/2^12)
    need = int(plan.needed.loc["omnibus", "n_needed"])
    assert detectable_nrr(PAPER_P_Z, need, k=6, alpha=0.01, trials=200) >= 0.8 - 1e-3

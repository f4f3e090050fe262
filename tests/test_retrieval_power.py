"""Monte Carlo power of the parity tests (docs/METHODS.md §8.3, Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from fairvision.errors import FairvisionError
from fairvision.stats.power import (
    PAPER_P_Z,
    biased_distributions,
    catalog_adequacy,
    contrast_reject,
    detectable_nrr,
    omnibus_reject,
    power,
    power_grid,
    simulate_counts,
)


@pytest.mark.parametrize("alpha,n,trials", [(0.05, 250, 4000), (0.01, 1000, 10000)])
def test_power_at_rr_one_is_alpha(alpha, n, trials):
    p = power(PAPER_P_Z, 1.0, n, k=6, alpha=alpha, trials=trials, seed=11)
    se = math.sqrt(alpha * (1 - alpha) / trials)
    assert abs(p - alpha) < 4 * se


def test_contrast_power_at_rr_one_is_alpha():
    trials = 4000
    p = power(PAPER_P_Z, 1.0, 1000, alpha=0.05, trials=trials, test="contrast", value="ST4", seed=5)
    assert abs(p - 0.05) < 4 * math.sqrt(0.05 * 0.95 / trials)


def test_biased_distribution_algorithm1():
    p = np.array(list(PAPER_P_Z.values()))
    ps = biased_distributions(p, 1.5)
    assert np.allclose(ps.sum(axis=1), 1)
    assert np.allclose(np.diag(ps), np.minimum(1, 1.5 * p))
    # other values scaled by (1 - P*(q)) / (1 - P(q)): ST1 row, ST2 column
    assert ps[0, 1] == pytest.approx(0.15 * (1 - 0.075) / (1 - 0.05))
    capped = biased_distributions(p, 5.0)  # ST5: 5 * 0.3 > 1 -> all results ST5
    assert capped[4, 4] == 1 and np.allclose(capped[4, [0, 1, 2, 3, 5]], 0)
    assert np.allclose(biased_distributions(p, 1.0), np.tile(p, (6, 1)))


def test_simulated_counts_have_the_algorithm1_means():
    p = np.array(list(PAPER_P_Z.values()))
    rng = np.random.default_rng(2)
    q, r = simulate_counts(p, 0.7, 200, 6, 20000, rng)
    assert (q.sum(axis=1) == 200).all()
    assert (r.sum(axis=2) == 6 * q).all()
    expected = 200 * p[:, None] * 6 * biased_distributions(p, 0.7)
    assert np.allclose(r.mean(axis=0), expected, rtol=0.03, atol=0.05)


def test_vectorised_decisions_equal_scipy_per_trial():
    p = np.array(list(PAPER_P_Z.values()))
    rng = np.random.default_rng(7)
    q, r = simulate_counts(p, 0.85, 120, 6, 60, rng)
    om = omnibus_reject(q, r, 0.05)
    co = contrast_reject(q, r, 6, 0.05)
    co_y = contrast_reject(q, r, 6, 0.05, continuity=True)
    for t in range(60):
        table = np.vstack([r[t], q[t]])
        table = table[table.sum(1) > 0][:, table.sum(0) > 0]
        assert om[t] == (st.chi2_contingency(table, correction=False).pvalue < 0.05)
        for j in range(6):
            if q[t, j] == 0:
                assert not co[t, j]
                continue
            a = r[t, j, j]
            tab = np.array([[a, 6 * q[t, j] - a], [q[t, j], 120 - q[t, j]]])
            tab = tab[:, tab.sum(0) > 0]
            if tab.shape[1] < 2:
                assert not co[t, j]
                continue
            assert co[t, j] == (st.chi2_contingency(tab, correction=False).pvalue < 0.05)
            assert co_y[t, j] == (st.chi2_contingency(tab, correction=True).pvalue < 0.05)


def test_power_grows_with_catalog_size_and_bias():
    g = power_grid(PAPER_P_Z, rrs=[0.6, 0.8, 1.0, 1.25], ns=[100, 1000], trials=500)
    assert g.loc[(1000, 0.8), "omnibus"] > g.loc[(100, 0.8), "omnibus"]
    assert g.loc[(100, 0.6), "omnibus"] > g.loc[(100, 0.8), "omnibus"] > g.loc[(100, 1.0), "omnibus"]
    assert g.loc[(1000, 0.8), "ST5"] > g.loc[(1000, 0.8), "ST1"]  # rarer values need larger catalogs
    assert g.loc[(1000, 1.25), "omnibus"] > 0.9
    # a grid cell is the same simulation as power() with that seed
    assert g.loc[(100, 0.8), "omnibus"] == power(PAPER_P_Z, 0.8, 100, trials=500)


def test_paper_detectable_nrr_reaches_80_percent_rule_at_400_to_600_items():
    # Khaziev et al. 4.1: for the omnibus test the detectable bias at 80% power and alpha 0.01
    # reaches nRR = 0.8 "at approximately 400-600 samples".
    below = {n: detectable_nrr(PAPER_P_Z, n, side="below") for n in (300, 600)}
    above = {n: detectable_nrr(PAPER_P_Z, n, side="above") for n in (250, 600)}
    assert below[300] < 0.8 < below[600]
    assert above[250] < 0.8 < above[600]


def test_catalog_adequacy_answers():
    a = catalog_adequacy(PAPER_P_Z, 250, trials=300)
    t = a.to_frame()
    assert list(t.index) == ["omnibus", *PAPER_P_Z]
    assert not t.loc["ST1", "large_enough"] and t.loc["ST1", "n_needed"] > 250
    assert t.loc["ST1", "answer"].startswith("No: with 250 items, the contrast test for ST1")
    big = catalog_adequacy(PAPER_P_Z, 5000, trials=300).to_frame()
    assert big.loc["omnibus", "large_enough"]


def test_power_bad_input():
    with pytest.raises(FairvisionError, match="sum to 1"):
        power([5, 15, 80], 1.0, 100)
    with pytest.raises(FairvisionError, match="value="):
        power(PAPER_P_Z, 1.0, 100, test="contrast")
    with pytest.raises(FairvisionError, match="unknown value"):
        power(PAPER_P_Z, 1.0, 100, test="contrast", value="ST9")

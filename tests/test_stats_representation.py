"""Representation metrics against hand-worked values and independent formulas."""

import math

import numpy as np
import pandas as pd
import pytest

from fairvision import stats
from fairvision.errors import FairvisionError


def test_nsd_worked_example_from_methods():
    assert stats.nsd([0.7, 0.2, 0.1]) == pytest.approx(0.556776, abs=1e-6)
    # counts give the same as shares
    assert stats.nsd([7, 2, 1]) == pytest.approx(0.556776, abs=1e-6)


def test_nsd_extremes_and_declared_empty_group():
    assert stats.nsd([30, 30, 30]) == 0.0
    assert stats.nsd([12, 0, 0, 0]) == pytest.approx(1.0)
    # by hand: shares (1/2, 1/2, 0); population sd = sqrt(1/18); * 3 / sqrt(2) = 0.5
    assert stats.nsd([5, 5, 0]) == pytest.approx(0.5)
    # an empty declared group is not silently dropped (the reference code would give 0 here)
    assert stats.nsd([5, 5]) == 0.0


def test_nsd_independent_formula_and_vectorised_rows():
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 50, size=(20, 7)).astype(float)
    p = counts / counts.sum(axis=1, keepdims=True)
    g = p.shape[1]
    expected = np.sqrt(((p - 1 / g) ** 2).mean(axis=1)) * g / math.sqrt(g - 1)
    np.testing.assert_allclose(stats.nsd(counts), expected, rtol=1e-12)
    assert stats.nsd(pd.Series([7, 2, 1])) == pytest.approx(0.556776, abs=1e-6)


def test_evenness_and_effective_number_by_hand():
    # H([.5,.25,.25]) = 0.5 ln 2 + 0.5 ln 4 = 1.5 ln 2
    h = 1.5 * math.log(2)
    assert stats.shannon_evenness([2, 1, 1]) == pytest.approx(h / math.log(3))
    assert stats.effective_number([2, 1, 1]) == pytest.approx(math.exp(h))
    assert stats.effective_number([2, 1, 1], order=2) == pytest.approx(1 / (0.25 + 2 * 0.0625))
    assert stats.shannon_evenness([4, 0]) == 0.0
    assert stats.effective_number([1, 1, 1, 1]) == pytest.approx(4.0)


def test_imbalance_ratio():
    assert stats.imbalance_ratio([2, 1, 1]) == 2.0
    assert stats.imbalance_ratio([3, 0]) == math.inf
    np.testing.assert_array_equal(stats.imbalance_ratio(np.array([[2, 1], [4, 4]])), [2.0, 1.0])


def test_bad_values_raise():
    with pytest.raises(FairvisionError):
        stats.nsd([1, -1])
    with pytest.raises(FairvisionError):
        stats.nsd([])

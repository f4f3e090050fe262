"""NPMI, NMI and chi-square against hand-worked values, scipy and scikit-learn."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.stats.contingency import association
from sklearn.metrics import mutual_info_score

from fairvision import stats
from fairvision.schema import Attribute, Schema


@pytest.fixture
def tiny():
    return pd.DataFrame({"x": ["a", "a", "b", "b"], "y": ["u", "u", "u", "v"]})


def test_npmi_by_hand(tiny):
    m = stats.npmi(tiny, "x", "y")
    assert list(m.index) == ["a", "b"] and list(m.columns) == ["u", "v"]
    assert m.loc["a", "u"] == pytest.approx(math.log(4 / 3) / math.log(2))
    assert m.loc["a", "v"] == -1.0  # never together
    assert m.loc["b", "u"] == pytest.approx(math.log(2 / 3) / math.log(4))
    assert m.loc["b", "v"] == pytest.approx(math.log(2) / math.log(4))


def test_npmi_bounds_and_independence():
    df = pd.DataFrame({"x": list("aabb") * 5, "y": list("uvuv") * 5})
    m = stats.npmi(df, "x", "y")
    np.testing.assert_allclose(m.to_numpy(), 0.0, atol=1e-12)
    df2 = pd.DataFrame({"x": list("ab") * 3, "y": list("uv") * 3})
    m2 = stats.npmi(df2, "x", "y")
    assert m2.loc["a", "u"] == pytest.approx(1.0) and m2.loc["a", "v"] == -1.0


def test_npmi_declared_empty_value_is_nan(tiny):
    schema = Schema().add(Attribute("x", categories=["a", "b", "c"]))
    m = stats.npmi(tiny, "x", "y", schema=schema)
    assert m.loc["c"].isna().all()


def test_nmi_matches_independent_computation():
    rng = np.random.default_rng(3)
    x = rng.choice(list("abc"), 500)
    y = np.where(rng.random(500) < 0.6, x, rng.choice(list("abcd"), 500))
    df = pd.DataFrame({"x": x, "y": y})
    mi = mutual_info_score(x, y)  # natural log
    joint = pd.crosstab(x, y).to_numpy().ravel()
    hxy = sps.entropy(joint[joint > 0])
    assert stats.nmi(df, "x", "y") == pytest.approx(mi / hxy, rel=1e-10)


def test_nmi_extremes():
    same = pd.DataFrame({"x": list("abcabc"), "y": list("abcabc")})
    assert stats.nmi(same, "x", "y") == pytest.approx(1.0)
    ind = pd.DataFrame({"x": list("aabb"), "y": list("uvuv")})
    assert stats.nmi(ind, "x", "y") == pytest.approx(0.0, abs=1e-15)


def test_chi2_and_cramers_v_match_scipy():
    rng = np.random.default_rng(7)
    df = pd.DataFrame({"x": rng.choice(list("abc"), 400), "y": rng.choice(list("uvwz"), 400)})
    res = stats.chi2_independence(df, "x", "y")
    ct = pd.crosstab(df["x"], df["y"]).to_numpy()
    ref = sps.chi2_contingency(ct, correction=False)
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert res.pvalue == pytest.approx(ref.pvalue, rel=1e-10)
    assert res.df == ref.dof
    assert res.cramers_v == pytest.approx(association(ct, method="cramer", correction=False), rel=1e-12)


def test_chi2_drops_declared_empty_values():
    df = pd.DataFrame({"x": list("aabb") * 5, "y": list("uvvv") * 5})
    schema = Schema().add(Attribute("x", categories=["a", "b", "c"]))
    res = stats.chi2_independence(df, "x", "y", schema=schema)
    assert res.dropped == ("x=c",)
    assert res.df == 1

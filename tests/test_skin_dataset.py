"""Dataset-level skin colour: Thong Table 1 by hand, Wilson CIs and chi-square
against scipy, group breakdowns, two-set comparison, report section."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.settings import AuditSettings
from fairvision.audits.skin import audit_skin_comparison, audit_skin_distribution
from fairvision.stats.proportions import wilson_interval as wilson_ci
from fairvision.errors import ColumnError
from fairvision.report import Report
from fairvision.report.sections.skin import skin_section


def _table(cells):
    """Rows with (L, hue) values reproducing the given counts per cell."""
    pts = {"light-red": (70.0, 40.0), "dark-red": (50.0, 40.0), "light-yellow": (70.0, 60.0), "dark-yellow": (50.0, 60.0)}
    rows = [pts[c] for c, n in cells.items() for _ in range(n)]
    return pd.DataFrame(rows, columns=["L", "hue"])


def test_table1_by_hand():
    df = _table({"light-red": 5, "dark-red": 3, "light-yellow": 1, "dark-yellow": 1})
    d = audit_skin_distribution(df)
    assert d.n_measured == 10 and d.n_failed == 0
    t = d.table
    assert t.loc["red", "light"] == 50 and t.loc["red", "dark"] == 30 and t.loc["yellow", "light"] == 10
    assert t.loc["red", "Total"] == 80 and t.loc["Total", "light"] == 60 and t.loc["Total", "Total"] == 100
    assert d.to_frame().loc[("red", "light"), "count"] == 5
    # thresholds are inclusive: L* = 60 is light, h* = 55 is yellow
    e = audit_skin_distribution(pd.DataFrame({"L": [60.0], "hue": [55.0]}))
    assert e.table.loc["yellow", "light"] == 100


def test_wilson_ci_matches_scipy():
    for k, n in [(0, 10), (3, 10), (10, 10), (47, 300)]:
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        lo, hi = wilson_ci(k, n)
        assert lo == pytest.approx(ci.low, abs=1e-9) and hi == pytest.approx(ci.high, abs=1e-9)
    d = audit_skin_distribution(_table({"light-red": 5, "dark-red": 3, "light-yellow": 1, "dark-yellow": 1}))
    ci = stats.binomtest(3, 10).proportion_ci(0.95, method="wilson")
    assert d.cells.loc[("red", "dark"), "ci_low"] == pytest.approx(100 * ci.low)
    assert np.isnan(wilson_ci(0, 0)[0])


def test_failed_rows_are_excluded_and_counted():
    df = pd.DataFrame({"L": [70, np.nan, 50, 65], "hue": [40, 50, 60, 350], "ok": [True, False, True, False]})
    d = audit_skin_distribution(df)
    assert d.n_images == 4 and d.n_measured == 2 and d.n_failed == 2
    assert any("2 of 4" in n for n in d.notes)
    with pytest.raises(ColumnError, match="'hue'"):
        audit_skin_distribution(df.drop(columns="hue"))


def test_histograms_20_bins_against_numpy():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"L": rng.uniform(20, 90, 500), "hue": rng.uniform(5, 85, 500)})
    d = audit_skin_distribution(df)
    hL = d.histograms.loc["L"]
    assert len(hL) == 20 and hL["count"].sum() == 500
    np.testing.assert_array_equal(hL["count"], np.histogram(df.L, bins=np.linspace(0, 100, 21))[0])
    assert d.histograms.loc["hue"]["percent"].sum() == pytest.approx(100)


def test_by_group_and_group_test_against_scipy():
    rng = np.random.default_rng(1)
    n = 400
    df = pd.DataFrame({"L": rng.normal(60, 8, n), "hue": rng.normal(52, 9, n),
                       "gender": pd.Categorical(rng.choice(["f", "m"], n), categories=["f", "m", "x"])})
    df.loc[df.gender == "m", "L"] -= 4
    d = audit_skin_distribution(df, by="gender", min_group=10)
    bg = d.by_group
    assert bg.loc[("x", "light-red"), "n_group"] == 0 and bg.loc[("x", "light-red"), "too_small"]
    assert any("too small" in s for s in d.notes)
    # independent computation of the group test on the f/m x 4-cell table
    cell = np.where(df.L >= 60, "light", "dark").astype(object) + "-" + np.where(df.hue >= 55, "yellow", "red")
    tab = pd.crosstab(df.gender.astype(str), cell).to_numpy()
    ref = stats.chi2_contingency(tab, correction=False)
    assert d.group_test.statistic == pytest.approx(ref.statistic) and d.group_test.pvalue == pytest.approx(ref.pvalue)
    assert d.group_test.df == 3
    # intersections
    df["age"] = rng.choice(["young", "old"], n)
    d2 = audit_skin_distribution(df, by=["gender", "age"])
    assert d2.by_group.index.nlevels == 3


def test_subject_cluster_bootstrap_cis():
    df = _table({"light-red": 30, "dark-red": 20, "light-yellow": 30, "dark-yellow": 20})
    df["subject"] = np.arange(len(df)) // 5  # 5 images per subject, same cell within a subject
    d = audit_skin_distribution(df, subject="subject", settings=AuditSettings(n_boot=500))
    w = audit_skin_distribution(df)
    assert d.ci_method.startswith("cluster bootstrap")
    width = (d.cells.ci_high - d.cells.ci_low).to_numpy()
    assert (width > (w.cells.ci_high - w.cells.ci_low).to_numpy()).all()  # correlated images: wider CIs


def test_compare_two_sets_chi_square():
    a = _table({"light-red": 50, "dark-red": 30, "light-yellow": 15, "dark-yellow": 5})
    b = _table({"light-red": 30, "dark-red": 40, "light-yellow": 10, "dark-yellow": 20})
    c = audit_skin_comparison(a, b, names=("train", "generated"))
    ref = stats.chi2_contingency(np.array([[50, 30, 15, 5], [30, 40, 10, 20]]), correction=False)
    assert c.test.statistic == pytest.approx(ref.statistic) and c.test.pvalue == pytest.approx(ref.pvalue)
    assert c.test.df == 3 and c.test.reliable
    assert c.difference[("red", "light")] == pytest.approx(-20.0)
    assert c.to_frame().index.nlevels == 3
    # a cell empty in both sets is dropped from the test
    e = audit_skin_comparison(_table({"light-red": 10, "dark-red": 5}), _table({"light-red": 4, "dark-red": 9}), names=("x", "y"))
    assert e.test.df == 1 and len(e.test.dropped) == 2


def test_report_section_writes(tmp_path):
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"L": rng.normal(60, 8, 120), "hue": rng.normal(50, 10, 120), "g": rng.choice(["a", "b"], 120),
                       "flags": rng.choice(["", "low_stability"], 120)})
    r = Report(title="skin")
    r.add(skin_section(audit_skin_distribution(df, by="g")))
    r.add(skin_section(audit_skin_comparison(df, df.assign(L=df.L - 5), names=("A", "B")), id="skin-compare"))
    paths = r.write(tmp_path / "out")
    html = paths["html"].read_text()
    assert "Skin tone x skin hue" in html and "<svg" in html and "<img" not in html
    assert (tmp_path / "out" / "tables" / "skin-colour__table1.parquet").exists()


@pytest.mark.vision
def test_fairface_sample_end_to_end_by_gender():
    pytest.importorskip("mediapipe")
    from fairvision.datasets import load_demo
    from fairvision.skin import add_categories, measure

    demo = load_demo()
    sample = demo.groupby("gender", observed=True).head(8).reset_index(drop=True)  # 16 images, both genders
    rows = pd.DataFrame([measure(p, method="thong").to_dict() for p in sample.image_path])
    table = add_categories(pd.concat([sample, rows], axis=1))
    d = audit_skin_distribution(table, by="gender", min_group=5)
    assert d.n_measured >= 12  # the automatic mask finds most faces in 320 x 320 FairFace crops
    assert d.by_group.loc[(slice(None), "light-red"), "n_group"].sum() == d.n_measured
    assert table.loc[table.ok, "monk_tone"].notna().all()

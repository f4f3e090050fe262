"""Per-subject spread of apparent skin colour (docs/METHODS.md §2.6): numbers against hand computations (a hue
that wraps at 359/1 degrees included), flips, the bootstrap medians against a brute-force expansion, the audit,
the ``skin stability`` command (report, gates, bad inputs) and its report in a browser."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from fairvision.audits.settings import AuditSettings
from fairvision.audits.skin_stability import audit_skin_stability
from fairvision.cli import main
from fairvision.stats.resample import cluster_bootstrap_weights
from fairvision.stats.spread import (
    category_flips, flip_shares, group_spread, rank_correlation, subject_spread, weighted_medians,
)

# --------------------------------------------------------------------------- stats


def test_subject_spread_by_hand():
    # subject 0: 50, 52, 57 -> mean 53, deviations -3, -1, 4, SD sqrt(26 / 2), range 7
    # subject 1: one image -> SD undefined, range 0; subject 2: NaN only -> n 0
    sp = subject_spread([50, 52, 57, 40, np.nan], [0, 0, 0, 1, 2])
    assert sp["n"].tolist() == [3, 1, 0]
    assert sp.loc[0, "mean"] == pytest.approx(53.0)
    assert sp.loc[0, "sd"] == pytest.approx(math.sqrt(13.0))
    assert sp.loc[0, "range"] == pytest.approx(7.0)
    assert np.isnan(sp.loc[1, "sd"]) and sp.loc[1, "range"] == 0.0
    assert np.isnan(sp.loc[2, "sd"]) and np.isnan(sp.loc[2, "range"])


def test_hue_wraps_at_359_and_1_degrees():
    # 359 and 1 degrees are 2 degrees apart: circular mean 0, deviations -1 and +1, SD sqrt(2), range 2
    # 358, 2, 0: deviations -2, 2, 0 -> SD 2, range 4; far from 0 the circular and linear answers agree
    sp = subject_spread([359, 1, 358, 2, 0, 40, 44, 48], [0, 0, 1, 1, 1, 2, 2, 2], circular=True)
    assert sp.loc[0, "sd"] == pytest.approx(math.sqrt(2.0))
    assert sp.loc[0, "range"] == pytest.approx(2.0)
    assert sp.loc[0, "mean"] % 360 == pytest.approx(0.0, abs=1e-9) or sp.loc[0, "mean"] == pytest.approx(360.0)
    assert sp.loc[1, "sd"] == pytest.approx(2.0) and sp.loc[1, "range"] == pytest.approx(4.0)
    assert sp.loc[2, "sd"] == pytest.approx(np.std([40, 44, 48], ddof=1))
    assert sp.loc[2, "mean"] == pytest.approx(44.0)
    linear = subject_spread([359, 1], [0, 0])  # the naive answer this avoids
    assert linear.loc[0, "range"] == pytest.approx(358.0)


def test_category_flips_by_hand():
    # subject 0: light, light -> no flip; 1: light, dark -> flip; 2: one image -> no flip; 3: dark, missing -> no
    f = category_flips([0, 0, 0, 1, 1, 1, -1], [0, 0, 1, 1, 2, 3, 3])
    assert f["flips"].tolist() == [False, True, False, False]
    assert f["n"].tolist() == [2, 2, 1, 1]
    assert f["n_categories"].tolist() == [1, 2, 1, 1]


def test_weighted_medians_match_the_expanded_sample():
    rng = np.random.default_rng(3)
    x = rng.normal(size=9)
    w = rng.integers(0, 4, size=(50, 9)).astype(float)
    w[0] = 0
    w[1] = 1
    got = weighted_medians(x, w)
    assert np.isnan(got[0])
    want = [np.median(np.repeat(x, w[b].astype(int))) for b in range(1, 50) if w[b].sum() > 0]
    np.testing.assert_allclose(got[1:][w[1:].sum(axis=1) > 0], want)
    assert got[1] == pytest.approx(np.median(x))


def test_group_spread_against_a_brute_force_bootstrap():
    rng = np.random.default_rng(1)
    sd = rng.gamma(2.0, 1.0, size=30)
    groups = np.repeat([0, 1], 15)
    tab = group_spread(sd, groups, 3, n_boot=200, level=0.9, seed=7)
    assert tab["n_subjects"].tolist() == [15, 15, 0]
    assert tab.loc[0, "median"] == pytest.approx(np.median(sd[:15]))
    assert tab.loc[1, "mean"] == pytest.approx(sd[15:].mean())
    assert np.isnan(tab.loc[2, "median"])
    # the same draws, each replicate's sample written out and summarised by numpy
    gen = np.random.default_rng(7)
    for g in (0, 1):
        v = sd[groups == g]
        w = cluster_bootstrap_weights(v.size, 200, gen).astype(int)
        samples = [np.repeat(v, row) for row in w]
        med = [np.median(s) for s in samples]
        mean = [s.mean() for s in samples]
        assert tab.loc[g, "median_ci_low"] == pytest.approx(np.quantile(med, 0.05))
        assert tab.loc[g, "median_ci_high"] == pytest.approx(np.quantile(med, 0.95))
        assert tab.loc[g, "mean_ci_low"] == pytest.approx(np.quantile(mean, 0.05))


def test_flip_shares_wilson_by_hand():
    tab = flip_shares([True, False, False, False, True, True], [0, 0, 0, 0, 1, 1], 2, level=0.95)
    assert tab["n_flip"].tolist() == [1, 2] and tab["share"].tolist() == [0.25, 1.0]
    z = sps.norm.ppf(0.975)
    n, p = 4, 0.25  # Wilson (1927): (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert tab.loc[0, "ci_low"] == pytest.approx(centre - half)
    assert tab.loc[0, "ci_high"] == pytest.approx(centre + half)


def test_rank_correlation():
    r = rank_correlation([1, 2, 3, 4, np.nan], [10, 20, 25, 40, 1])
    assert r.statistic == pytest.approx(1.0) and r.n == 4
    assert np.isnan(rank_correlation([1, 1, 1], [1, 2, 3]).statistic)


# --------------------------------------------------------------------------- audit


def _table() -> pd.DataFrame:
    """Three hand-made subjects plus a random cohort of 24 (two groups, the second twice as variable)."""
    rows = [  # subject, L, hue, ita, group
        ("a", 58.0, 359.0, 20.0, "x"), ("a", 62.0, 1.0, 24.0, "x"),  # flips light/dark, h* 2 degrees apart
        ("b", 40.0, 60.0, -10.0, "y"), ("b", 42.0, 50.0, -8.0, "y"), ("b", 44.0, 52.0, -6.0, "y"),
        ("c", 70.0, 45.0, 50.0, "x"),  # only image
    ]
    rng = np.random.default_rng(5)
    for i in range(24):
        g = "x" if i < 12 else "y"
        base = rng.normal(55, 5)
        for _ in range(3):
            L = base + rng.normal(0, 1.0 if g == "x" else 4.0)
            rows.append((f"s{i}", L, 50 + rng.normal(0, 2), (L - 50) * 1.5, g))
    df = pd.DataFrame(rows, columns=["subject_id", "L", "hue", "ita", "group"])
    df.loc[len(df)] = ["d", np.nan, np.nan, np.nan, "x"]  # a failed measurement
    return df


def test_audit_numbers_and_coverage():
    df = _table()
    res = audit_skin_stability(df, attributes=["group"], settings=AuditSettings(n_boot=100, min_subjects=5))
    subj = res.subjects.set_index("subject")
    assert "c" not in subj.index and "d" not in subj.index
    assert res.n_single == 1 and res.n_subjects == 26
    assert subj.loc["a", "sd_L"] == pytest.approx(np.std([58, 62], ddof=1))
    assert subj.loc["a", "sd_hue"] == pytest.approx(math.sqrt(2.0)) and subj.loc["a", "range_hue"] == pytest.approx(2)
    assert subj.loc["b", "range_L"] == pytest.approx(4.0) and subj.loc["b", "sd_ita"] == pytest.approx(2.0)
    assert bool(subj.loc["a", "flip_skin_tone"]) and not bool(subj.loc["b", "flip_skin_tone"])
    assert bool(subj.loc["b", "flip_skin_hue"])  # 60 (yellow) and 50 (red) around the 55-degree threshold
    # overall median of the per-subject SDs, and the flip share, by numpy
    all_sd = subj["sd_L"].to_numpy()
    assert res.quantities()["median_sd_L"] == pytest.approx(np.median(all_sd))
    assert res.quantities()["flip_share.skin_tone"] == pytest.approx(subj["flip_skin_tone"].mean())
    # Kruskal-Wallis against scipy on the per-subject SDs of the two groups
    t = res.tests.loc[("group", "sd_L")]
    ref = sps.kruskal(subj.loc[subj["group"] == "x", "sd_L"], subj.loc[subj["group"] == "y", "sd_L"])
    assert t["statistic"] == pytest.approx(ref.statistic) and t["pvalue"] == pytest.approx(ref.pvalue)
    assert bool(t["differs"])  # the second group is four times as variable
    assert res.tests["pvalue_adjusted"].ge(res.tests["pvalue"]).all()
    cov = res.coverage
    assert cov.n_left_out == 2
    reasons = dict(cov.reasons["n"])
    assert reasons == {"measurement failed": 1, "only usable image of its subject": 1}


def test_small_groups_are_reported_not_tested():
    df = _table()
    res = audit_skin_stability(df, attributes=["group"], settings=AuditSettings(n_boot=20, min_subjects=20))
    assert res.spread.loc[("group", "x", "sd_L"), "too_small"]
    assert len(res.tests) == 0 and res.quantities()["n_differs"] == 0


# --------------------------------------------------------------------------- command


def _run(args) -> int:
    return main([str(a) for a in args])


def test_stability_command_writes_a_report_and_gates(tmp_path, capsys):
    path = tmp_path / "skin.csv"
    _table().to_csv(path, index=False)
    out = tmp_path / "rep"
    rc = _run(["skin", "stability", path, "-a", "group", "--n-boot", "50", "--min-subjects", "5", "-o", out,
               "--fail-if", "max_flip_share>0.01"])
    text = capsys.readouterr()
    assert rc == 1, text
    assert "2 of 79 images left out" in text.out
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["failed"] == ["max_flip_share>0.01"]
    assert any("flip light/dark" in f["sentence"] for f in doc["findings"])
    assert (out / "tables").is_dir()
    assert _run(["skin", "stability", path, "-o", tmp_path / "r2", "--n-boot", "20"]) == 0


def test_stability_measures_images_first(tmp_path, capsys):
    """A sample table of images with a subject column is measured first (measure_images, no store); the spread
    equals the one computed here from the measured table by numpy."""
    from fairvision.datasets import load_portraits

    df = load_portraits().head(4)
    df["subject_id"] = ["p1", "p1", "p2", "p2"]
    df.to_csv(tmp_path / "samples.csv", index=False)
    out = tmp_path / "rep"
    assert _run(["skin", "stability", tmp_path / "samples.csv", "--no-store", "-j", "1", "--n-boot", "20",
                 "-o", out]) == 0
    assert "4 images: 4 measured" in capsys.readouterr().err
    subj = pd.read_parquet(out / "tables" / "skin-stability__subjects.parquet").set_index("subject")
    assert _run(["skin", "measure", tmp_path / "samples.csv", "--no-store", "-j", "1", "-o", tmp_path / "m.csv"]) == 0
    m = pd.read_csv(tmp_path / "m.csv")
    # portrait 002 is a greyscale photo (flag "achromatic", C* 0.006, ITA 89.99): its ITA and h* are noise and
    # are left out of the ITA and h* spread; its L* stays
    grey = m["flags"].fillna("").str.contains("achromatic")
    assert grey.sum() == 1
    for sid, part in m.groupby("subject_id"):
        assert subj.loc[sid, "sd_L"] == pytest.approx(part["L"].std(ddof=1), rel=1e-6)
        colour_ita = part.loc[~grey.loc[part.index], "ita"]
        assert subj.loc[sid, "range_ita"] == pytest.approx(np.ptp(colour_ita), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--subject-col", "person"], "person"),
    (["--fail-if", "median_sd_L>>3"], "expected NAME OP NUMBER"),
    (["--fail-if", "nonsense>3"], "unknown quantity"),
    (["-a", "nope"], "nope"),
])
def test_stability_bad_inputs_exit_2(tmp_path, capsys, args, message):
    path = tmp_path / "skin.csv"
    _table().to_csv(path, index=False)
    rc = _run(["skin", "stability", path, "-o", tmp_path / "o", "--n-boot", "10", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err


def test_stability_needs_several_images_a_subject(tmp_path, capsys):
    path = tmp_path / "one.csv"
    pd.DataFrame({"subject_id": ["a", "b"], "L": [50, 60], "hue": [40, 50], "ita": [0, 20]}).to_csv(path, index=False)
    assert _run(["skin", "stability", path, "-o", tmp_path / "o"]) == 2
    assert "two or more usable images" in capsys.readouterr().err
    assert _run(["skin", "stability", tmp_path / "missing.csv", "-o", tmp_path / "o"]) == 2


@pytest.mark.browser
def test_stability_report_in_the_browser(tmp_path):
    from test_report_browser import _browser  # noqa: E402  (tests/ is on sys.path)
    from test_report_browser_new import check_in_browser  # noqa: E402

    path = tmp_path / "skin.csv"
    _table().to_csv(path, index=False)
    out = tmp_path / "rep"
    assert _run(["skin", "stability", path, "-a", "group", "--n-boot", "50", "--min-subjects", "5", "-o", out]) == 0
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, out / "report.html", shots / "skin-stability.png")
    assert doc["findings"] and "Stability of apparent skin colour within subjects" in text
    assert "<img" not in (out / "report.html").read_text()  # no face images

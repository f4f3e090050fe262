"""Thong et al.'s threshold variations and the ITA class boundaries (chardon, Khaziev's paper, five numbers) as
options of the skin functions and of ``skin measure``, ``skin report`` and ``skin compare``, on real photos."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.skin import audit_skin_comparison, audit_skin_distribution
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import ParameterError
from fairvision.skin.categories import (
    add_categories, check_thresholds, ita_class, parse_ita_boundaries, st_class, tone_hue_category,
)


def run(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- hand-worked categories


def test_tone_and_hue_at_and_around_moved_thresholds():
    L = [49.99, 50.0, 50.01, 60.0, np.nan]
    h = [39.99, 40.0, 40.01, 355.0, 10.0]  # 355 deg reads as -5 deg: red
    tone, hue, comb = tone_hue_category(L, h, L_threshold=50.0, hue_threshold=40.0)
    assert list(tone[:4]) == ["dark", "light", "light", "light"] and pd.isna(tone[4])
    assert list(hue) == ["red", "yellow", "yellow", "red", "red"]
    assert list(comb[:4]) == ["dark-red", "light-yellow", "light-yellow", "light-red"] and pd.isna(comb[4])
    # the same values with the paper's thresholds (60, 55): all dark, all red
    tone, hue, _ = tone_hue_category(L[:3], h[:3])
    assert list(tone) == ["dark"] * 3 and list(hue) == ["red"] * 3


@pytest.mark.parametrize("spec, expected", [
    # ITA:  -30.01  -30    -29.99  10     10.01  28     41     55     55.01
    (None, ["ST1", "ST1", "ST2", "ST2", "ST3", "ST3", "ST4", "ST5", "ST6"]),
    ("chardon", ["ST1", "ST1", "ST2", "ST2", "ST3", "ST3", "ST4", "ST5", "ST6"]),
    ("paper", ["ST1", "ST2", "ST2", "ST3", "ST3", "ST4", "ST5", "ST6", "ST6"]),  # Khaziev Table 3: -30 <= ITA < 10
    ("-40, 0, 20, 40, 60", ["ST2", "ST2", "ST2", "ST3", "ST3", "ST4", "ST5", "ST5", "ST5"]),
    ([-40, 0, 20, 40, 60], ["ST2", "ST2", "ST2", "ST3", "ST3", "ST4", "ST5", "ST5", "ST5"]),
])
def test_st_classes_at_and_around_the_edges(spec, expected):
    ita = [-30.01, -30.0, -29.99, 10.0, 10.01, 28.0, 41.0, 55.0, 55.01]
    assert list(st_class(ita, spec)) == expected
    names = ["dark", "brown", "tan", "intermediate", "light", "very light"]
    assert list(ita_class(ita, spec)) == [names[int(s[2]) - 1] for s in expected]


def test_custom_edges_are_closed_on_the_right():
    ita = [-40.0, -39.99, 0.0, 0.01, 60.0, 60.01]
    assert list(st_class(ita, "-40,0,20,40,60")) == ["ST1", "ST2", "ST2", "ST3", "ST5", "ST6"]


def test_boundary_descriptions_and_ranges():
    paper = parse_ita_boundaries("paper")
    assert paper.describe() == "paper (-30, 10, 28, 41, 55; closed on the left)"
    assert paper.ranges() == ["(-inf, -30)", "[-30, 10)", "[10, 28)", "[28, 41)", "[41, 55)", "[55, inf)"]
    assert parse_ita_boundaries(None).ranges()[1] == "(-30, 10]" and parse_ita_boundaries(None).is_default
    assert not paper.is_default
    assert parse_ita_boundaries(" Paper ") == paper


@pytest.mark.parametrize("spec, words", [
    ("fitzpatrick", "chardon or paper"), ("1,2,3", "five edges"), ("1,2,x,4,5", "five comma-separated"),
    ("1,2,2,4,5", "increase"), ("1,2,3,4,nan", "finite"), ("-100,0,10,20,30", "-90..90"),
])
def test_bad_boundaries_are_one_line_parameter_errors(spec, words):
    with pytest.raises(ParameterError) as e:
        parse_ita_boundaries(spec)
    assert e.value.parameter == "ita_boundaries" and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("L, hue, name", [(101, 55, "L_threshold"), (-1, 55, "L_threshold"), (math.nan, 55, "L_threshold"),
                                          (60, 181, "hue_threshold"), (60, "red", "hue_threshold")])
def test_bad_thresholds(L, hue, name):
    with pytest.raises(ParameterError) as e:
        check_thresholds(L, hue)
    assert e.value.parameter == name


def test_add_categories_replaces_columns_in_place():
    df = pd.DataFrame({"L": [55.0, 65.0], "a": [10.0, 10.0], "b": [15.0, 15.0], "hue": [56.3, 56.3],
                       "ita": [10.0, 41.0]})
    first = add_categories(df)
    again = add_categories(first, L_threshold=50.0, hue_threshold=60.0, ita_boundaries="paper")
    assert list(again.columns) == list(first.columns)
    assert list(again.skin_tone) == ["light", "light"] and list(first.skin_tone) == ["dark", "light"]
    assert list(again.skin_hue) == ["red", "red"] and list(first.skin_hue) == ["yellow", "yellow"]
    assert list(again.st_class) == ["ST3", "ST5"] and list(first.st_class) == ["ST2", "ST4"]


# ---------------------------------------------------------------- the audit


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * (centre - half), 100 * (centre + half)


def test_audit_counts_with_moved_thresholds_and_ita_classes():
    data = pd.DataFrame({"L": [40.0, 50.0, 55.0, 70.0, 80.0], "hue": [30.0, 45.0, 50.0, 60.0, 20.0],
                         "ita": [-30.0, 10.0, 12.0, 55.0, np.nan]})
    d = audit_skin_distribution(data, L_threshold=50.0, hue_threshold=45.0, ita_boundaries="paper")
    # light: L >= 50 -> rows 2-5; yellow: h >= 45 -> rows 2, 3, 4
    c = d.cells["count"]
    assert c[("red", "dark")] == 1 and c[("yellow", "light")] == 3 and c[("red", "light")] == 1
    assert d.thresholds == {"L": 50.0, "hue": 45.0, "ita_boundaries": "paper (-30, 10, 28, 41, 55; closed on the left)"}
    t = d.ita_classes  # finite ITA: -30 -> ST2, 10 -> ST3, 12 -> ST3, 55 -> ST6 (closed on the left)
    assert t["count"].tolist() == [0, 1, 2, 0, 0, 1]
    assert t["percent"].tolist() == pytest.approx([0, 25, 50, 0, 0, 25])
    lo, hi = _wilson(2, 4)
    assert t.loc["ST3", "ci_low"] == pytest.approx(lo) and t.loc["ST3", "ci_high"] == pytest.approx(hi)
    assert t.loc["ST2", "range"] == "[-30, 10)"
    default = audit_skin_distribution(data)
    assert default.ita_classes is None and default.thresholds == {"L": 60.0, "hue": 55.0}
    assert default.cells["count"][("red", "dark")] == 3  # L < 60: rows 1-3, h < 55 all three


def test_comparison_passes_the_options_to_both_sets():
    a = pd.DataFrame({"L": [50.0, 70.0], "hue": [50.0, 50.0], "ita": [0.0, 30.0]})
    b = pd.DataFrame({"L": [56.0, 58.0], "hue": [60.0, 60.0], "ita": [20.0, 45.0]})
    r = audit_skin_comparison(a, b, L_threshold=55.0, hue_threshold=45.0, ita_boundaries="-20,0,20,40,60")
    assert r.first.cells["count"][("yellow", "light")] == 1 and r.second.cells["count"][("yellow", "light")] == 2
    assert r.first.ita_classes["count"].tolist() == [0, 1, 0, 1, 0, 0]  # 0 -> (-20, 0]; 30 -> (20, 40]
    assert r.second.ita_classes["count"].tolist() == [0, 0, 1, 0, 1, 0]
    with pytest.raises(ParameterError, match="hue_threshold"):
        audit_skin_comparison(a, b, hue_threshold=200.0)


# ---------------------------------------------------------------- the commands on real photos


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    (root / "set1").mkdir()
    (root / "set2").mkdir()
    p = load_portraits()
    for i, path in enumerate(p.image_path.head(8)):
        shutil.copy(path, root / ("set1" if i < 4 else "set2"))
    return root


def test_measure_options_end_to_end(photos, tmp_path, capsys):
    store = tmp_path / "store"
    code, _, err = run(["skin", "measure", photos / "set1", "-o", tmp_path / "default.parquet", "--store", store,
                        "-j", "1", "--no-progress"], capsys)
    assert code == 0, err
    code, out, err = run(["skin", "measure", photos / "set1", "-o", tmp_path / "moved.parquet", "--store", store,
                          "-j", "1", "--no-progress", "--L-threshold", "65", "--hue-threshold", "50",
                          "--ita-boundaries", "paper"], capsys)
    assert code == 0, err
    assert "(4 from the store)" in out
    d = pd.read_parquet(tmp_path / "default.parquet")
    m = pd.read_parquet(tmp_path / "moved.parquet")
    # the default output: no option columns, categories as the paper's thresholds give them (computed here)
    assert not {"L_threshold", "hue_threshold", "ita_boundaries"} & set(d.columns)
    assert (d.skin_tone.astype(str) == np.where(d.L >= 60, "light", "dark")).all()
    h = np.where(d.hue > 180, d.hue - 360, d.hue)
    grey = d["flags"].str.contains("achromatic").to_numpy()  # a greyscale photo: tone, but no hue or ITA class
    assert d.skin_hue[grey].isna().all() and d.st_class[grey].isna().all()
    assert (d.skin_hue[~grey].astype(str) == np.where(h >= 55, "yellow", "red")[~grey]).all()
    edges = [-np.inf, -30, 10, 28, 41, 55, np.inf]
    st = np.array([f"ST{i}" for i in range(1, 7)])
    assert (d.st_class[~grey].astype(str) == st[np.digitize(d.ita, edges, right=True) - 1][~grey]).all()
    # with the options: the same measurements, the categories with the values given, the values in the table
    assert list(m.columns) == list(d.columns) + ["L_threshold", "hue_threshold", "ita_boundaries"]
    same = [c for c in d.columns if c not in ("skin_tone", "skin_hue", "skin_colour", "ita_class", "st_class", "from_cache")]
    pd.testing.assert_frame_equal(m[same], d[same])
    assert (m.skin_tone.astype(str) == np.where(m.L >= 65, "light", "dark")).all()
    assert m.skin_hue[grey].isna().all() and m.st_class[grey].isna().all()
    assert (m.skin_hue[~grey].astype(str) == np.where(h >= 50, "yellow", "red")[~grey]).all()
    assert (m.st_class[~grey].astype(str) == st[np.digitize(m.ita, edges) - 1][~grey]).all()
    assert m.L_threshold.eq(65.0).all() and m.hue_threshold.eq(50.0).all()
    assert m.ita_boundaries.eq("paper (-30, 10, 28, 41, 55; closed on the left)").all()


def _tables(outdir: Path) -> set:
    return {p.name for p in (outdir / "tables").glob("*.parquet")}


def test_report_and_compare_options_end_to_end(photos, tmp_path, capsys):
    store = tmp_path / "store"
    common = ["--store", store, "-j", "1"]
    code, _, err = run(["skin", "measure", photos / "set1", "-o", tmp_path / "m.parquet", *common, "--no-progress"], capsys)
    assert code == 0, err
    m = pd.read_parquet(tmp_path / "m.parquet")
    code, _, err = run(["skin", "report", tmp_path / "m.parquet", "-o", tmp_path / "default"], capsys)
    assert code == 0, err
    code, _, err = run(["skin", "report", photos / "set1", "-o", tmp_path / "moved", *common, "--L-threshold", "62.5",
                        "--hue-threshold", "48", "--ita-boundaries", "-20,0,20,40,60"], capsys)
    assert code == 0, err
    default = json.loads((tmp_path / "default" / "report.json").read_text())
    moved = json.loads((tmp_path / "moved" / "report.json").read_text())
    assert not {"L_threshold", "hue_threshold", "ita_boundaries"} & set(default["meta"])
    assert "skin-colour__ita-classes.parquet" not in _tables(tmp_path / "default")
    assert moved["meta"]["L_threshold"] == 62.5 and moved["meta"]["hue_threshold"] == 48.0
    assert moved["meta"]["ita_boundaries"] == "custom (-20, 0, 20, 40, 60; closed on the right)"
    text = json.dumps(moved["sections"])
    assert "L* >= 62.5" in text and "h* >= 48" in text and "custom (-20, 0, 20, 40, 60" in text
    h = np.where(m.hue > 180, m.hue - 360, m.hue)
    cells = pd.read_parquet(tmp_path / "moved" / "tables" / "skin-colour__cells.parquet")
    light_yellow = int(((m.L >= 62.5) & (h >= 48)).sum())
    assert int(cells.reset_index().set_index(["skin_hue", "skin_tone"]).loc[("yellow", "light"), "count"]) == light_yellow
    ita = pd.read_parquet(tmp_path / "moved" / "tables" / "skin-colour__ita-classes.parquet")
    colour = ~m["flags"].str.contains("achromatic").to_numpy()  # a greyscale photo has no ITA class
    expected = np.bincount(np.digitize(m.ita[colour], [-20, 0, 20, 40, 60], right=True), minlength=6)
    assert ita["count"].tolist() == expected.tolist()
    code, out, err = run(["skin", "compare", photos / "set1", photos / "set2", "-o", tmp_path / "cmp", *common,
                          "--ita-boundaries", "paper", "--hue-threshold", "50"], capsys)
    assert code == 0, err
    cmp = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert cmp["meta"]["ita_boundaries"].startswith("paper") and cmp["meta"]["L_threshold"] == 60.0
    assert {"skin-colour__ita-classes-1.parquet", "skin-colour__ita-classes-2.parquet"} <= _tables(tmp_path / "cmp")


@pytest.mark.parametrize("command", ["measure", "report", "compare"])
@pytest.mark.parametrize("option, value, words", [
    ("--L-threshold", "120", "--L-threshold must lie within 0..100"),
    ("--hue-threshold", "nan", "--hue-threshold must lie within -180..180"),
    ("--ita-boundaries", "fitzpatrick", "--ita-boundaries must be chardon or paper"),
    ("--ita-boundaries", "55,41,28,10,-30", "--ita-boundaries edges must increase"),
])
def test_bad_options_exit_2_with_one_line(photos, tmp_path, capsys, command, option, value, words):
    args = ["skin", command, photos / "set1"] + ([photos / "set2"] if command == "compare" else [])
    args += ["-o", tmp_path / ("out.parquet" if command == "measure" else "out"), "--no-store", option, value]
    code, _, err = run(args, capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"error: {words}" + err.strip()[len("error: ") + len(words):]]
    assert err.startswith(f"error: {words}")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.parquet").exists()

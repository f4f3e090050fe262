"""Saliency-cropping benchmark, running a cropper: the crop box of a saliency map and the kept face worked by
hand, the built-in croppers, a planted ``module:function`` cropper that always keeps the darker face, failures
counted, one-line errors, and both reports in a real browser (docs/METHODS.md §6.8)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.cropping_benchmark import GAMES_COLUMNS, audit_cropping_run
from fairvision.cli import main
from fairvision.errors import ParameterError
from fairvision.vision.composites import compose
from fairvision.vision.croppers import (
    crop_box, crop_output, gradient_saliency, judge, load_cropper, parse_aspect, spectral_residual,
)

from test_cropping_build import COLOURS, build_portraits, solid_table  # noqa: E402  (tests/ is on sys.path)


def test_crop_box_by_hand():
    m = np.zeros((100, 60))
    m[20, 30] = 1.0
    # 16:9 inside 60 x 100: 60 wide, 60 / (16/9) = 33.75 -> 34 high; centred on row 20.5: y0 = 20.5 - 17 = 3.5 -> 4
    assert crop_box(m, 16 / 9) == (0, 4, 60, 38)
    m[:] = 0
    m[95, 10] = 1.0  # near the bottom edge: moved inside the image
    assert crop_box(m, 16 / 9) == (0, 66, 60, 100)
    m = np.zeros((40, 200))
    m[10, 190] = 1.0  # a wide image: the full height, 40 * 16/9 = 71.1 -> 71 wide, pushed to the right edge
    assert crop_box(m, 16 / 9) == (129, 0, 200, 40)
    assert crop_box(np.ones((10, 10)), 1.0) == (0, 0, 10, 10)
    # a flat map prefers nothing: centred on the image, rows 50 - 17 = 33 to 67
    assert crop_box(np.zeros((100, 60)), 16 / 9) == (0, 33, 60, 67)
    assert judge((0, 33, 60, 67), (0, 0, 60, 45), (0, 55, 60, 100))["kept"] == "none"  # 12 rows each


def test_judge_by_hand():
    top, bottom = (0, 0, 60, 45), (0, 55, 60, 100)
    assert judge((0, 4, 60, 38), top, bottom)["kept"] == "top"
    r = judge((0, 40, 60, 74), top, bottom)  # 5 rows in the top face, 19 in the bottom one of 34
    assert r["kept"] == "bottom" and r["top_share"] == pytest.approx(5 / 34) and r["bottom_share"] == pytest.approx(19 / 34)
    assert judge((0, 45, 60, 55), top, bottom)["kept"] == "none"  # only the gap: touches neither face
    assert judge((0, 40, 60, 60), top, bottom)["kept"] == "none"  # 5 rows each: a tie
    sal = np.zeros((100, 60))
    sal[10, 5], sal[70, 5], sal[50, 5] = 3.0, 1.0, 4.0  # 4 of the 8 units in the gap
    r = judge((0, 4, 60, 38), top, bottom, sal)
    assert (r["top_mass"], r["bottom_mass"], r["kept_by_mass"]) == (3 / 8, 1 / 8, "top")
    r = judge((0, 40, 60, 74), top, bottom, sal)  # the crop keeps the bottom face, the mass says top
    assert (r["kept"], r["kept_by_mass"]) == ("bottom", "top")
    r = judge((0, 4, 60, 38), top, bottom)
    assert np.isnan(r["top_mass"]) and r["kept_by_mass"] == ""


def test_crop_output_and_aspect_checks():
    assert crop_output((1, 2, 5, 9), (10, 10)) == ((1, 2, 5, 9), None)
    for bad in ((0, 0, 11, 5), (3, 3, 3, 5), "left", np.zeros((5, 5)), -np.ones((10, 10))):
        with pytest.raises(ValueError):
            crop_output(bad, (10, 10))
    assert parse_aspect("16:9") == pytest.approx(16 / 9) and parse_aspect("4/3") == pytest.approx(4 / 3)
    assert parse_aspect("1.5") == 1.5 and parse_aspect(2) == 2.0
    for bad in ("wide", "0:1", "16:0", "-1", "nan"):
        with pytest.raises(ParameterError, match="^aspect"):
            parse_aspect(bad)
    with pytest.raises(ParameterError, match="^cropper"):
        load_cropper("no_such_module_xyz:crop")
    with pytest.raises(ParameterError, match="^cropper .*no function 'nope'"):
        load_cropper("cropping_croppers:nope")
    assert load_cropper("saliency") in (spectral_residual, gradient_saliency)


def test_saliency_falls_back_to_gradient_without_opencv_saliency(monkeypatch):
    import cv2

    from fairvision.vision.croppers import cropper_name

    assert cropper_name("saliency") == "spectral-residual"  # opencv-contrib is installed here
    monkeypatch.delattr(cv2, "saliency")
    assert cropper_name("saliency") == "gradient" and load_cropper("saliency") is gradient_saliency
    with pytest.raises(ParameterError, match="^cropper spectral-residual needs OpenCV's saliency module"):
        load_cropper("spectral-residual")


def _textured_top():
    rng = np.random.default_rng(0)
    top = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)  # texture: high gradient
    bottom = np.full((60, 80, 3), 128, dtype=np.uint8)  # flat grey: no gradient at all
    return compose(top, bottom, gap=20)


@pytest.mark.parametrize("cropper", [gradient_saliency, spectral_residual])
def test_builtin_croppers_keep_the_face_with_an_object(cropper):
    plain = np.full((120, 160, 3), 128, dtype=np.uint8)
    thing = plain.copy()
    thing[50:70, 70:90] = 0  # one dark square: the only thing that stands out
    for top, bottom, expected in ((thing, plain, "top"), (plain, thing, "bottom")):
        img, lay = compose(top, bottom, gap=40)
        sal = cropper(img)
        assert sal.shape == img.shape[:2] and (sal >= 0).all() and np.isfinite(sal).all()
        box, m = crop_output(sal, img.shape[:2])
        r = judge(box, lay.top, lay.bottom, m)
        assert r["kept"] == expected and r[f"{expected}_mass"] > 0.35


def test_gradient_saliency_is_zero_on_flat_areas():
    img, lay = _textured_top()
    sal = gradient_saliency(img)
    assert sal[lay.bottom[1] + 10:lay.bottom[3] - 10].max() < 1e-9  # far (10 sigma) from any edge


@pytest.fixture(scope="module")
def solid_bench(tmp_path_factory):
    d = tmp_path_factory.mktemp("solid")
    table = solid_table(d)
    rc = main(["benchmark", "cropping", "build", str(table), "--attr", "tone", "--per-pair", "4", "-o",
               str(d / "bench"), "--no-progress", "-j", "1"])
    assert rc == 0
    return d / "bench"


def test_planted_cropper_keeps_the_darker_group(solid_bench, capsys):
    out = solid_bench / "dark-run"
    rc = main(["benchmark", "cropping", "run", str(solid_bench), "--cropper", "cropping_croppers:keep_darker",
               "-o", str(out), "--no-progress", "-j", "2"])
    text = capsys.readouterr().out
    assert rc == 0, text
    g = pd.read_csv(out / "games.csv", dtype=str, keep_default_na=False)
    assert list(g.columns[:len(GAMES_COLUMNS)]) == list(GAMES_COLUMNS) and len(g) == 12
    order = list(COLOURS)  # dark, mid, light
    darker = [min(t, b, key=order.index) for t, b in zip(g["top_group"], g["bottom_group"])]
    kept_group = np.where(g["kept"] == "top", g["top_group"], g["bottom_group"])
    assert (kept_group == np.array(darker)).all()
    assert (g["winner"] == np.where(g["kept"] == "top", g["a"], g["b"])).all()
    assert (g["a"] == g["top_sample_id"]).all() and (g["b"] == g["bottom_sample_id"]).all()
    # the darker face is on top in half the games: no position bias
    assert (g["kept"] == "top").sum() == 6 and (g["kept"] == "bottom").sum() == 6
    pq = pd.read_parquet(out / "games.parquet")
    assert len(pq) == 12 and set(pq["kept"]) == {"top", "bottom"}
    pos = pd.read_parquet(out / "tables" / "cropping-run__position.parquet").set_index("top_group")
    assert pos.loc["all", "top_share"] == 0.5 and pos.loc["dark", "top_share"] == 1.0 and pos.loc["light", "top_share"] == 0.0
    assert "cropping: 0 of 12 composites left out" in text


def test_saliency_map_cropper_and_failures_counted(solid_bench):
    res = audit_cropping_run(solid_bench, cropper="cropping_croppers:top_blob")
    assert (res.games["kept"] == "top").all() and res.games["top_mass"].eq(1.0).all()
    assert (res.games["kept_by_mass"] == "top").all()
    res = audit_cropping_run(solid_bench, cropper="cropping_croppers:fails_on_light_top")
    n_light_top = 4  # light is on top in 2 of the 4 composites of each of its 2 pairs
    assert res.coverage.n == 12 and res.coverage.n_left_out == n_light_top and len(res.games) == 12 - n_light_top
    assert res.coverage.reasons["n"].to_dict() == {"cropper raised RuntimeError": n_light_top}
    assert "light" not in set(res.games["top_group"])
    res = audit_cropping_run(solid_bench, cropper="cropping_croppers:nonsense")
    assert len(res.games) == 0 and res.coverage.reasons["n"].to_dict() == {"bad cropper output": 12}


def test_run_report_says_when_crops_hold_both_faces(solid_bench):
    """A tall crop (aspect 1:5) centred on the top face reaches into the bottom one: the run report counts the
    crops that hold part of both faces, by the crop boxes against the manifest's face rows counted here."""
    from fairvision.audits.cropping_benchmark import read_manifest
    from fairvision.report.sections.cropping_benchmark import run_sections

    notes = lambda res: [b for b in run_sections(res)[0].blocks if b["type"] == "note" and "both faces" in b["text"]]
    assert not notes(audit_cropping_run(solid_bench, cropper="cropping_croppers:top_blob"))  # 16:9: one face
    res = audit_cropping_run(solid_bench, cropper="cropping_croppers:top_blob", aspect=0.2)
    m = read_manifest(solid_bench).set_index("composite_id").loc[res.games["composite_id"]]
    y0, y1 = res.games["crop_y0"].to_numpy(), res.games["crop_y1"].to_numpy()
    in_top = np.clip(np.minimum(y1, m["top_y1"].to_numpy()) - np.maximum(y0, m["top_y0"].to_numpy()), 0, None)
    in_bottom = np.clip(np.minimum(y1, m["bottom_y1"].to_numpy()) - np.maximum(y0, m["bottom_y0"].to_numpy()), 0, None)
    both = int(((in_top > 0) & (in_bottom > 0)).sum())
    assert both > 0 and (res.games["kept"] == "bottom").any()  # the blob is in the top face, yet bottom kept
    found = notes(res)
    assert len(found) == 1 and found[0]["text"].startswith(f"{both} crops of 12 hold part of both faces")
    smaller = np.minimum(in_top, in_bottom) / (y1 - y0)
    assert found[0]["level"] == ("warning" if smaller.max() >= 0.25 else "info")


@pytest.mark.parametrize("args, message", [
    (["--cropper", "no_such_module_xyz:crop"], "--cropper cannot import 'no_such_module_xyz'"),
    (["--cropper", "cropping_croppers:nope"], "no function 'nope'"),
    (["--cropper", "twitter"], "--cropper must be saliency"),
    (["--aspect", "wide"], "--aspect must be a width:height ratio"),
])
def test_run_bad_inputs_exit_2_with_one_line(args, message, solid_bench, tmp_path, capsys):
    rc = main(["benchmark", "cropping", "run", str(solid_bench), *args, "-o", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_run_without_a_manifest_exits_2(tmp_path, capsys):
    rc = main(["benchmark", "cropping", "run", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "no composites.csv" in err and len(err.splitlines()) == 1


@pytest.fixture(scope="module")
def portraits_reports(tmp_path_factory):
    d = build_portraits(tmp_path_factory, "portraits-run")
    rc = main(["benchmark", "cropping", "run", str(d / "bench"), "--no-progress"])
    assert rc == 0
    return d / "bench"


def test_default_cropper_on_the_portraits(portraits_reports):
    g = pd.read_parquet(portraits_reports / "run" / "games.parquet")
    m = pd.read_csv(portraits_reports / "composites.csv", dtype=str)
    assert len(g) == len(m) and list(g.columns[:len(GAMES_COLUMNS)]) == list(GAMES_COLUMNS)
    assert set(g["kept"]) <= {"top", "bottom", "none"}
    assert ((g["top_share"] + g["bottom_share"]) <= 1 + 1e-12).all()
    h = ((g["crop_y1"] - g["crop_y0"]) * 16 / 9).round()  # 16:9 crops of the full 500-pixel width
    assert (g["crop_x1"] - g["crop_x0"] == 500).all() and (h.between(499, 501)).all()
    assert g["cropper"].iloc[0] in ("spectral-residual", "gradient")


@pytest.mark.browser
def test_reports_in_the_browser(portraits_reports, tmp_path):
    from test_report_browser import _browser  # noqa: E402
    from test_report_browser_new import check_in_browser  # noqa: E402

    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, portraits_reports / "report.html", shots / "cropping-build.png")
        assert "Composites per pair of groups" in text and doc["findings"]
        doc, _, text = check_in_browser(browser, portraits_reports / "run" / "report.html", shots / "cropping-run.png")
        assert "Position bias" in text and "kept the top face" in text

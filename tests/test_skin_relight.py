"""Global lighting edits, RMS contrast and the lighting-sensitivity audit (docs/METHODS.md §2.7): the edits against
colour-science and hand-worked pixels, identity edits bit for bit, slopes on a uniform skin patch whose L* per
EV follows from the colour formulas, the audit's slopes on a hand-made table (hue wrapping at 0), the
``skin relight`` command on three bundled portraits, bad inputs, and the report in a browser."""

from __future__ import annotations

import json
import os
from pathlib import Path

import colour
import numpy as np
import pandas as pd
import pytest
from skimage.color import rgb2lab

from fairvision.audits.settings import AuditSettings
from fairvision.audits.skin_stability import audit_lighting_sensitivity
from fairvision.cli import main
from fairvision.skin.relight import (
    EDITS, IDENTITY, RelightOptions, apply_edit, daylight_xy, edit_lut, edit_steps, relight_image, rms_contrast,
    white_balance_gains,
)


def _image(seed=0, shape=(24, 32)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(*shape, 3), dtype=np.uint8)


def _lab(rgb8) -> np.ndarray:
    """CIELAB (D65) of uint8 sRGB by colour-science, an independent implementation."""
    rgb = np.asarray(rgb8, dtype=np.float64) / 255.0
    xyz = colour.RGB_to_XYZ(rgb, colour.RGB_COLOURSPACES["sRGB"], apply_cctf_decoding=True)
    return colour.XYZ_to_Lab(xyz, colour.CCS_ILLUMINANTS["CIE 1931 2 Degree Standard Observer"]["D65"])


# --------------------------------------------------------------------------- edits


@pytest.mark.parametrize("edit", EDITS)
def test_identity_edits_are_exact(edit):
    img = _image()
    assert np.array_equal(apply_edit(img, edit, IDENTITY[edit]), img)
    assert np.array_equal(edit_lut(edit, IDENTITY[edit])[1], np.arange(256))
    assert np.array_equal(apply_edit(img, "white-balance", (1.0, 1.0)), img)
    assert np.array_equal(apply_edit(img / 255.0, edit, IDENTITY[edit]), img)  # float input, rounded once


def test_exposure_matches_colour_science():
    img = _image(1)
    for ev in (-1.0, -0.3, 0.5, 1.0):
        lin = colour.cctf_decoding(img / 255.0, function="sRGB") * 2.0 ** ev
        want = np.rint(np.clip(colour.cctf_encoding(np.clip(lin, 0, 1), function="sRGB"), 0, 1) * 255).astype(int)
        got = apply_edit(img, "exposure", ev).astype(int)
        assert np.abs(got - want).max() <= 1  # a rounding tie at most
        assert np.mean(got == want) > 0.999


def test_gamma_by_hand():
    img = np.array([[[128, 64, 255]]], dtype=np.uint8)
    got = apply_edit(img, "gamma", 1.25)[0, 0]
    assert got.tolist() == [round((128 / 255) ** 1.25 * 255), round((64 / 255) ** 1.25 * 255), 255]
    assert got.tolist() == [108, 45, 255]  # 255 (128/255)^1.25 = 107.7, 255 (64/255)^1.25 = 45.3


def test_white_balance_gains_against_colour_science():
    for shift in (-1500.0, 1500.0, 3000.0):
        xy = colour.temperature.CCT_to_xy_CIE_D(6504.0 + shift)
        np.testing.assert_allclose(daylight_xy(6504.0 + shift), xy, atol=1e-6)
        srgb = colour.RGB_COLOURSPACES["sRGB"]
        ref = colour.XYZ_to_RGB(colour.xy_to_XYZ(colour.temperature.CCT_to_xy_CIE_D(6504.0)), srgb)
        new = colour.XYZ_to_RGB(colour.xy_to_XYZ(xy), srgb)
        g = new / ref
        np.testing.assert_allclose(white_balance_gains(shift), g / g[1], rtol=2e-3)
    hi = white_balance_gains(1500)
    assert hi[2] > 1 > hi[0]  # a bluer light
    assert white_balance_gains(0).tolist() == [1.0, 1.0, 1.0]
    # explicit gains: linear R doubled on a mid-grey pixel, by hand
    px = np.array([[[100, 100, 100]]], dtype=np.uint8)
    lin = colour.cctf_decoding(100 / 255, function="sRGB")
    want_r = round(float(colour.cctf_encoding(min(1.0, 2 * lin), function="sRGB")) * 255)
    assert apply_edit(px, "white-balance", (2.0, 1.0))[0, 0].tolist() == [want_r, 100, 100]


def test_edit_steps_and_bad_strengths():
    np.testing.assert_allclose(edit_steps("gamma", 3), [0.8, 1.0, 1.25])
    np.testing.assert_allclose(edit_steps("exposure", 5), [-1, -0.5, 0, 0.5, 1])
    assert edit_steps("white-balance", 3).tolist() == [-1500.0, 0.0, 1500.0]
    with pytest.raises(Exception, match="gamma"):
        apply_edit(_image(), "gamma", -1)
    with pytest.raises(Exception, match="kelvin"):
        white_balance_gains(-4000)
    with pytest.raises(Exception, match="edit"):
        apply_edit(_image(), "contrast", 1)


def test_rms_contrast_by_hand_and_against_scikit_image():
    half = np.zeros((4, 4, 3), dtype=np.uint8)
    half[:2] = 255  # L* 100 and 0: SD 0.5, root mean square sqrt(0.5)
    c, rms = rms_contrast(half)
    assert c == pytest.approx(0.5, abs=1e-6) and rms == pytest.approx(np.sqrt(0.5), abs=1e-6)
    assert rms_contrast(np.full((3, 3, 3), 90, np.uint8))[0] == pytest.approx(0.0)
    img = _image(2)
    L = rgb2lab(img)[..., 0] / 100.0
    assert rms_contrast(img)[0] == pytest.approx(L.std(), abs=1e-4)
    assert rms_contrast(img)[1] == pytest.approx(np.sqrt(np.mean(L ** 2)), abs=1e-4)


# --------------------------------------------------------------------------- sensitivity


def test_uniform_patch_L_per_EV_follows_the_colour_formulas():
    """A uniform skin patch: every relit copy is one colour, so L* of the copy is the L* of that colour. The
    expected L* at each EV comes from colour-science (decode, scale by 2^EV, encode, round to 8 bits, CIELAB),
    and without 8-bit rounding from the CIE formula L* = 116 (2^EV Y)^(1/3) - 16."""
    rgb = np.array([200, 150, 120])
    img = np.broadcast_to(rgb.astype(np.uint8), (30, 30, 3)).copy()
    mask = np.ones((30, 30), bool)
    evs = (-1.0, -0.5, 0.0, 0.5)
    opts = RelightOptions(steps={"exposure": evs}, estimators=("mean", "thong"))
    rows = pd.DataFrame(relight_image(img, mask, opts))
    exp = rows[rows["edit"] == "exposure"]
    lin = colour.cctf_decoding(rgb / 255.0, function="sRGB")
    Y = float(lin @ [0.2126, 0.7152, 0.0722])
    for est in ("mean", "thong"):
        got = exp[exp["estimator"] == est].sort_values("strength")
        want = [_lab(np.rint(colour.cctf_encoding(np.clip(lin * 2 ** ev, 0, 1), function="sRGB") * 255))[0]
                for ev in evs]
        np.testing.assert_allclose(got["L"], want, atol=2e-3)
        ideal = np.array([116 * (2 ** ev * Y) ** (1 / 3) - 16 for ev in evs])
        np.testing.assert_allclose(got["L"], ideal, atol=0.25)  # 8-bit rounding only
    # the audit's least-squares slope against numpy's polyfit of the hand-computed L*
    res = audit_lighting_sensitivity(rows.assign(sample_id="patch"),
                                     pd.DataFrame({"sample_id": ["patch"], "ok": [True], "reason": [None]}),
                                     settings=AuditSettings(n_boot=20))
    slope = res.slopes.set_index(["estimator", "edit"]).loc[("mean", "exposure"), "slope_L"]
    want_L = [_lab(np.rint(colour.cctf_encoding(np.clip(lin * 2 ** ev, 0, 1), function="sRGB") * 255))[0]
              for ev in evs]
    assert slope == pytest.approx(np.polyfit(evs, want_L, 1)[0], abs=2e-3)
    # a uniform patch relit by exposure keeps its hue (up to 8-bit rounding)
    assert abs(res.slopes.set_index(["estimator", "edit"]).loc[("mean", "exposure"), "slope_hue"]) < 1.0


def test_mask_of_the_unedited_image_is_used_for_every_copy():
    img = _image(4, (20, 20))
    mask = np.zeros((20, 20), bool)
    mask[5:15, 5:15] = True
    rows = pd.DataFrame(relight_image(img, mask, RelightOptions(steps={"gamma": (0.8, 1.25)}, estimators="mean")))
    assert (rows["n_pixels"] == 100).all()
    copy = apply_edit(img, "gamma", 0.8)
    want = _lab(copy[mask]).mean(axis=0)
    assert rows[(rows["edit"] == "gamma") & (rows["strength"] == 0.8)]["L"].iloc[0] == pytest.approx(want[0], abs=2e-3)


def test_audit_slopes_by_hand_with_hue_wrapping():
    # image p: exposure -1, 0, 1 -> L* 40, 50, 62 (slope 11 by least squares); h* 359, 1, 5 around the unedited
    # 1 degree -> changes -2, 0, 4 (slope 3); image q: L* 30, 30, 30 (slope 0)
    rows = []
    for sid, Ls, hs in (("p", (40, 50, 62), (359, 1, 5)), ("q", (30, 30, 30), (40, 40, 40))):
        rows.append({"sample_id": sid, "edit": "none", "strength": np.nan, "estimator": "thong", "L": Ls[1],
                     "hue": hs[1], "ita": 0.0, "contrast": 0.2, "L_rms": 0.5, "ok": True})
        for ev, L, h in zip((-1.0, 0.0, 1.0), Ls, hs):
            rows.append({"sample_id": sid, "edit": "exposure", "strength": ev, "estimator": "thong", "L": L, "hue": h,
                         "ita": (L - 50) / 2, "contrast": 0.2 + 0.01 * ev, "L_rms": 0.5, "ok": True})
    images = pd.DataFrame({"sample_id": ["p", "q", "r"], "ok": [True, True, False],
                           "reason": [None, None, "no face found"]})
    res = audit_lighting_sensitivity(pd.DataFrame(rows), images, settings=AuditSettings(n_boot=50))
    s = res.slopes.set_index("sample_id")
    assert s.loc["p", "slope_L"] == pytest.approx(11.0) and s.loc["p", "slope_hue"] == pytest.approx(3.0)
    assert s.loc["q", "slope_L"] == pytest.approx(0.0)
    assert s.loc["p", "skin_colour"] == "dark-red" and s.loc["q", "skin_colour"] == "dark-red"
    q = res.quantities()
    assert q["slope_L.thong.exposure"] == pytest.approx(5.5)  # the median of 11 and 0
    # the copies of p as one subject: L* 40, 50, 62 -> SD 11.02; of q: 0; p flips light/dark? no (all < 60)
    cp = res.copies.loc[("thong", "all edits")]
    assert cp["median_sd_L"] == pytest.approx(np.median([np.std([40, 50, 62], ddof=1), 0.0]))
    assert cp["flip_skin_hue"] == pytest.approx(0.0)
    assert res.coverage.n_left_out == 1 and dict(res.coverage.reasons["n"]) == {"no face found": 1}
    assert res.curves.loc[("thong", "exposure", 1.0), "dL_median"] == pytest.approx(6.0)


# --------------------------------------------------------------------------- command


@pytest.fixture(scope="module")
def relit_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("relight") / "rep"
    rc = main(["skin", "relight", "portraits", "--limit", "3", "--steps", "3", "--estimators", "thong,mean",
               "--n-boot", "50", "--workers", "1", "-o", str(out), "--fail-if", "max_abs_slope_L.exposure>100"])
    return rc, out


def test_relight_command_on_portraits(relit_report):
    rc, out = relit_report
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["mask"].startswith("the unedited image's skin mask")
    sens = pd.read_parquet(out / "tables" / "lighting__sensitivity.parquet")
    ex = sens[(sens["edit"] == "exposure") & (sens["group"] == "(all)")]
    assert len(ex) == 2 and (ex["slope_L"] > 5).all()  # brighter light, lighter skin: L* rises with EV
    gm = sens[(sens["edit"] == "gamma") & (sens["group"] == "(all)")]
    assert (gm["slope_L"] < 0).all()  # gamma above 1 darkens mid-tones
    contrast = pd.read_parquet(out / "tables" / "lighting__contrast.parquet")
    assert len(contrast) == 6 and contrast["contrast"].between(0, 0.5).all()
    assert any("per EV of exposure" in f["sentence"] for f in doc["findings"])
    assert "<img" not in (out / "report.html").read_text()  # no face images


@pytest.mark.parametrize("args, message", [
    (["--edits", "contrast"], "--edits"),
    (["--exposure-range", "a,b"], "--exposure-range"),
    (["--gamma-range", "0,1"], "gamma"),
    (["--exposure-range", "1,-1"], "--exposure-range '1,-1': LO must be below HI"),  # named --span before
    (["--wb-range", "-5000,0"], "--wb-range '-5000,0': the light's temperature"),  # every image failed before
    (["--estimators", "magic"], "--estimators"),
    (["--steps", "1"], "--steps"),
    (["--fail-if", "slope>>1"], "expected NAME OP NUMBER"),
])
def test_relight_bad_inputs_exit_2(tmp_path, capsys, args, message):
    rc = main(["skin", "relight", "portraits", "-o", str(tmp_path / "o"), *args])
    captured = capsys.readouterr()
    assert rc == 2 and message in captured.err + captured.out, captured


def test_a_white_balance_off_the_daylight_locus_fails_before_any_image():
    from fairvision.cli import skin_stability as cli
    from fairvision.skin import relight

    with pytest.raises(Exception, match="kelvin"):
        RelightOptions(steps={"white-balance": (-5000.0, 0.0)})
    assert (cli._D65_CCT, cli._CCT_RANGE) == (relight.D65_CCT, relight.CCT_RANGE)  # the CLI's copy (no numpy)


def test_relight_missing_source_exits_2(tmp_path, capsys):
    assert main(["skin", "relight", str(tmp_path / "nowhere"), "-o", str(tmp_path / "o")]) == 2


@pytest.mark.browser
def test_relight_report_in_the_browser(relit_report, tmp_path):
    from test_report_browser import _browser  # noqa: E402  (tests/ is on sys.path)
    from test_report_browser_new import check_in_browser  # noqa: E402

    _, out = relit_report
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, out / "report.html", shots / "skin-relight.png")
    assert doc["findings"] and "Sensitivity of apparent skin colour to lighting" in text

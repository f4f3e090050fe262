"""Counterfactual analysis (Thong et al. Table 4 + McNemar) and the colorimetric transect on the CC0 portraits."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.diagnosis.counterfactual import audit_colour_transect, audit_counterfactuals
from fairvision.audits.settings import AuditSettings
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.skin.transect import gamut_map_chroma, shift_region_colour


def _table4_example():
    # 6 female (F) and 4 male (M) samples; reconstructed: all right but M4;
    # +light: M1, M2 and M4 wrong (predicted F), F all right; +dark: everything right
    rows = []
    truth = {f"f{i}": "F" for i in range(6)} | {f"m{i}": "M" for i in range(1, 5)}
    wrong = {"reconstructed": {"m4"}, "+light": {"m1", "m2", "m4"}, "+dark": set()}
    for v, bad in wrong.items():
        for s, lab in truth.items():
            pred = ("M" if lab == "F" else "F") if s in bad else lab
            rows.append({"sample_id": s, "variant": v, "label": lab, "prediction": pred})
    return pd.DataFrame(rows)


def test_table4_layout_and_accuracies():
    r = audit_counterfactuals(_table4_example())
    acc = r.accuracy
    assert list(acc.columns.get_level_values("variant").unique()) == ["reconstructed", "+light", "+dark"]
    assert list(acc.columns[:3]) == [("reconstructed", "F"), ("reconstructed", "M"), ("reconstructed", "All")]
    row = acc.loc["model"]
    assert row[("reconstructed", "M")] == pytest.approx(75.0) and row[("reconstructed", "All")] == pytest.approx(90.0)
    assert row[("+light", "M")] == pytest.approx(25.0) and row[("+light", "F")] == pytest.approx(100.0)
    assert row[("+dark", "All")] == pytest.approx(100.0)


def test_mcnemar_pairs_against_reconstructed():
    r = audit_counterfactuals(_table4_example(), settings=AuditSettings(correction="none"))
    t = r.tests.loc[("model", "+light", "M")]
    # M1, M2 right on reconstructed and wrong on +light (b = 2); none the other way (c = 0)
    assert (t["b"], t["c"], t["n_pairs"]) == (2, 0, 4)
    assert t["pvalue"] == pytest.approx(stats.binomtest(0, 2).pvalue)
    assert t["change"] == pytest.approx(-50.0)
    t = r.tests.loc[("model", "+dark", "All")]
    assert (t["b"], t["c"]) == (0, 1)


def test_counterfactual_correct_column_models_and_errors():
    df = _table4_example()
    df["correct"] = (df["prediction"] == df["label"]).astype(int)
    two = pd.concat([df.assign(model="A"), df.assign(model="B")])
    r = audit_counterfactuals(two, correct_col="correct", model_col="model")
    assert list(r.accuracy.index) == ["A", "B"]
    with pytest.raises(FairvisionError, match="reference variant"):
        audit_counterfactuals(df[df["variant"] != "reconstructed"])
    with pytest.raises(ColumnError, match="appears twice"):
        audit_counterfactuals(pd.concat([df, df.iloc[:1]]))
    bad = df.assign(correct=df["correct"].astype(object))
    bad.loc[2, "correct"] = "maybe"
    with pytest.raises(ColumnError, match="row 3"):
        audit_counterfactuals(bad, correct_col="correct")


def test_gamut_mapping_keeps_lightness_and_hue():
    colour = pytest.importorskip("colour")
    lab = np.array([[60.0, 90.0, 70.0], [30.0, -60.0, 80.0], [50.0, 10.0, 10.0]])
    mapped, out = gamut_map_chroma(lab)
    assert out.tolist() == [True, True, False]
    rgb = colour.XYZ_to_sRGB(colour.Lab_to_XYZ(mapped), apply_cctf_encoding=True)
    assert rgb.min() > -1e-4 and rgb.max() < 1 + 1e-4
    np.testing.assert_allclose(mapped[:, 0], lab[:, 0])
    np.testing.assert_allclose(np.arctan2(mapped[:, 2], mapped[:, 1]), np.arctan2(lab[:, 2], lab[:, 1]))


def _lab_colour_science(rgb_u8):
    colour = pytest.importorskip("colour")
    return colour.XYZ_to_Lab(colour.sRGB_to_XYZ(rgb_u8.astype(float) / 255.0))


def _region(lab):
    return lab[:, 0].mean(), np.degrees(np.arctan2(lab[:, 2].mean(), lab[:, 1].mean()))


@pytest.fixture(scope="module")
def portraits_with_masks():
    pytest.importorskip("mediapipe")
    from fairvision.datasets import load_portraits
    from fairvision.io.images import read_image
    from fairvision.skin.masks import skin_mask

    out = []
    for path in load_portraits()["image_path"][:14]:
        img = read_image(path)
        mask = skin_mask(img, method="mediapipe").mask
        if mask is not None:
            out.append((path, img, mask))
    return out


@pytest.mark.vision
@pytest.mark.parametrize("axis,delta", [("L", 10.0), ("L", -10.0), ("h", 8.0), ("h", -8.0)])
def test_transect_on_real_portraits(portraits_with_masks, axis, delta):
    done = 0
    for path, img, mask in portraits_with_masks:
        lab_in = _lab_colour_science(img[mask])
        if np.hypot(lab_in[:, 1].mean(), lab_in[:, 2].mean()) < 2.0:  # black-and-white photo: hue undefined
            with pytest.raises(FairvisionError, match="almost grey"):
                if axis == "h":
                    audit_colour_transect(img, mask, axis=axis, delta=delta)
                else:
                    raise FairvisionError("almost grey")
            continue
        res = audit_colour_transect(img, mask, axis=axis, delta=delta)
        out = res.image
        assert out.dtype == np.uint8 and out.shape == img.shape
        np.testing.assert_array_equal(out[~mask], img[~mask])  # non-skin pixels untouched
        # measured independently (colour-science) on the uint8 result
        (l0, h0), (l1, h1) = _region(lab_in), _region(_lab_colour_science(out[mask]))
        dl, dh = l1 - l0, (h1 - h0 + 180) % 360 - 180
        moved, other = (dl, dh) if axis == "L" else (dh, dl)
        assert abs(moved - delta) <= 1.0, (path, moved)
        assert abs(other) <= 2.0, (path, other)
        assert res.check["ok"]
        done += 1
    assert done >= 8


def test_transect_rejects_bad_input():
    img = np.full((8, 8, 3), 120, np.uint8)
    img[..., 0] = 180
    mask = np.zeros((8, 8), bool)
    with pytest.raises(FairvisionError, match="empty"):
        audit_colour_transect(img, mask)
    with pytest.raises(FairvisionError, match="shape"):
        audit_colour_transect(img, np.ones((4, 4), bool))
    with pytest.raises(FairvisionError, match="axis"):
        audit_colour_transect(img, ~mask, axis="b")
    res = audit_colour_transect(img, ~mask, axis="L", delta=-5, estimator="mean")
    assert abs(res.check["achieved"] + 5) <= 1.0
    # the mean estimator measures the same region colour independently of the transect's own bookkeeping
    assert res.check["estimator_L_change"] == pytest.approx(res.check["achieved"], abs=1e-3)


def test_transect_audit_checks_the_skin_layer_edit():
    img = np.full((8, 8, 3), 120, np.uint8)
    img[..., 0] = 180
    mask = np.zeros((8, 8), bool)
    mask[2:6, 2:6] = True
    shift = shift_region_colour(img, mask, axis="h", delta=6.0)
    res = audit_colour_transect(img, mask, axis="h", delta=6.0)
    np.testing.assert_array_equal(shift.image, res.image)
    np.testing.assert_array_equal(shift.image[~mask], img[~mask])
    assert res.check["achieved"] == shift.h_change and res.check["other_change"] == shift.L_change
    assert res.check["n_pixels"] == 16 and res.check["outside_unchanged"]
    with pytest.raises(ParameterError, match="^delta must be a finite number"):
        shift_region_colour(img, mask, delta=float("nan"))

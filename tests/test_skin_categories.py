"""Skin colour categories: thresholds and boundaries by hand, Monk tone by brute force."""

import numpy as np
import pandas as pd
import pytest

from fairvision.errors import ColumnError
from fairvision.skin import SkinMeasurement, add_categories, categorize, fitzpatrick_proxy, ita_class, monk_tone, st_class
from fairvision.skin.categories import MONK_SRGB, tone_hue_category


def test_tone_hue_thresholds_and_boundaries():
    tone, hue, comb = tone_hue_category([60.0, 59.99, 75, 30, np.nan], [55.0, 54.99, 10, 80, 50])
    assert list(tone.astype(object))[:4] == ["light", "dark", "light", "dark"]
    assert list(hue.astype(object)) == ["yellow", "red", "red", "yellow", "red"]
    assert list(comb.astype(object))[:4] == ["light-yellow", "dark-red", "light-red", "dark-yellow"]
    assert pd.isna(comb[4]) and pd.isna(tone[4])
    assert tone.ordered and list(tone.categories) == ["light", "dark"]
    # hue just below 0 deg (b* < 0) is red, read as a negative angle
    assert list(tone_hue_category([70], [358.0])[1].astype(object)) == ["red"]
    # configurable thresholds
    t2, h2, _ = tone_hue_category([55.0], [50.0], L_threshold=50, hue_threshold=45)
    assert t2[0] == "light" and h2[0] == "yellow"


def test_ita_classes_boundaries():
    x = [-45, -30, -29.9, 10, 10.1, 28, 28.1, 41, 41.1, 55, 55.1, 80]
    expected = ["dark", "dark", "brown", "brown", "tan", "tan", "intermediate", "intermediate", "light", "light",
                "very light", "very light"]
    assert list(ita_class(x).astype(object)) == expected
    st = {"dark": "ST1", "brown": "ST2", "tan": "ST3", "intermediate": "ST4", "light": "ST5", "very light": "ST6"}
    assert list(st_class(x).astype(object)) == [st[e] for e in expected]
    assert list(fitzpatrick_proxy([28, 28.01, -5, np.nan]).astype(object))[:3] == ["IV-VI", "I-III", "IV-VI"]
    c = ita_class([np.nan, 30])
    assert pd.isna(c[0]) and list(c.categories) == ["dark", "brown", "tan", "intermediate", "light", "very light"]


def test_monk_tone_nearest_by_ciede2000_brute_force():
    colour = pytest.importorskip("colour")
    refs = np.array([[int(h[i:i + 2], 16) for i in (1, 3, 5)] for h in MONK_SRGB]) / 255.0
    ref_lab = colour.XYZ_to_Lab(colour.sRGB_to_XYZ(refs))
    # each reference maps to itself with distance 0
    labels, dist = monk_tone(ref_lab)
    assert list(labels.astype(object)) == [f"MST{i}" for i in range(1, 11)]
    np.testing.assert_allclose(dist, 0, atol=1e-6)
    rng = np.random.default_rng(0)
    lab = np.c_[rng.uniform(15, 95, 300), rng.uniform(-5, 25, 300), rng.uniform(-5, 35, 300)]
    labels, dist = monk_tone(lab)
    for i in range(len(lab)):
        d = [colour.delta_E(lab[i], r, method="CIE 2000") for r in ref_lab]
        assert labels[i] == f"MST{int(np.argmin(d)) + 1}"
        assert dist[i] == pytest.approx(min(d), abs=1e-4)


def test_add_categories_and_categorize():
    df = pd.DataFrame({"L": [70, 50, np.nan], "a": [10, 12, np.nan], "b": [15, 20, np.nan], "hue": [56.3, 59.0, np.nan],
                       "ita": [53.1, 0.0, np.nan], "gender": ["f", "m", "f"]})
    out = add_categories(df)
    assert list(out["skin_colour"].astype(object))[:2] == ["light-yellow", "dark-yellow"]
    assert list(out["ita_class"].astype(object))[:2] == ["light", "brown"]
    assert out["monk_tone"].isna()[2] and np.isnan(out["monk_delta_e"][2])
    # ordered categoricals keep empty classes visible when crossed with another attribute
    ct = pd.crosstab(out["gender"], out["skin_colour"], dropna=False)
    assert list(ct.columns) == ["light-red", "light-yellow", "dark-red", "dark-yellow"]
    assert "skin_tone" not in df.columns  # input untouched
    with pytest.raises(ColumnError, match="hue"):
        add_categories(df.drop(columns="hue"))
    m = SkinMeasurement(L=70, a=10, b=15, hue=56.3, ita=53.1, ok=True)
    c = categorize(m)
    assert c["skin_colour"] == "light-yellow" and c["st_class"] == "ST5" and c["monk_tone"].startswith("MST")


def test_an_achromatic_row_keeps_its_tone_but_gets_no_hue_or_ita_category():
    """A greyscale photo's b* is noise around 0, so its ITA is near +/-90 degrees ("very light") and its hue is
    arbitrary: the categories that read them are missing; the L* tone stays (docs/METHODS.md §1.4)."""
    from fairvision.skin.categories import achromatic_rows, add_categories

    df = pd.DataFrame({"L": [70.0, 40.0, 65.0], "a": [10.0, 12.0, 0.1], "b": [15.0, 20.0, 0.05],
                       "hue": [56.3, 59.0, 26.6], "ita": [53.1, -26.6, 89.97],
                       "flags": ["", "low_stability;clipped_highlights", "low_stability;achromatic"]})
    out = add_categories(df)
    assert list(achromatic_rows(df)) == [False, False, True]
    assert list(out["skin_tone"].astype(str)) == ["light", "dark", "light"]
    for col in ("skin_hue", "skin_colour", "ita_class", "st_class", "fitzpatrick_proxy"):
        assert out[col].isna().tolist() == [False, False, True], col
    assert list(out["ita_class"].astype(str)[:2]) == ["light", "brown"]  # 41 < 53.1 <= 55; -30 < -26.6 <= 10
    assert isinstance(out["skin_hue"].dtype, pd.CategoricalDtype)
    # without a flags column nothing changes (a user's own table of L, hue and ITA)
    plain = add_categories(df.drop(columns="flags"))
    assert plain["ita_class"].notna().all() and str(plain["ita_class"].iloc[2]) == "very light"

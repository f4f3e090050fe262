"""Greyscale (achromatic) images in the stability audits (docs/METHODS.md §2.6, §2.7): their h* and ITA are noise
(b* near 0 sends ITA to +-90 degrees and h* anywhere), so both audits leave them out of the h* and ITA spread,
slopes and flips while keeping L*; a subject with under two categorised images is neither a flip nor a non-flip;
small skin colour cells of the lighting audit are flagged; failed copies are counted. Hand-worked numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.gates import evaluate_conditions
from fairvision.audits.settings import AuditSettings
from fairvision.audits.skin_stability import audit_lighting_sensitivity, audit_skin_stability
from fairvision.report.sections.skin_stability import lighting_section, stability_section
from fairvision.skin.relight import RelightOptions, relight_image


def _stability_table() -> pd.DataFrame:
    rows = [  # subject, L, hue, ita, flags
        ("a", 60.0, 40.0, 30.0, ""), ("a", 64.0, 44.0, 34.0, ""),
        ("a", 62.0, 250.0, -89.9, "achromatic"),  # a greyscale copy: h* and ITA meaningless
        ("b", 50.0, 50.0, 10.0, ""), ("b", 52.0, 300.0, 89.9, "low_stability;achromatic"),
        ("c", 40.0, 30.0, -20.0, ""), ("c", 70.0, 60.0, 40.0, ""),
    ]
    return pd.DataFrame(rows, columns=["subject_id", "L", "hue", "ita", "flags"])


def test_achromatic_rows_keep_L_and_lose_hue_and_ita():
    res = audit_skin_stability(_stability_table(), settings=AuditSettings(n_boot=20))
    s = res.subjects.set_index("subject")
    # a: L* 60, 64, 62 -> SD 2 (all three images); h* 40, 44 -> SD 2*sqrt(2); ITA 30, 34 -> range 4
    assert s.loc["a", "sd_L"] == pytest.approx(2.0)
    assert s.loc["a", "sd_hue"] == pytest.approx(2 * math.sqrt(2)) and s.loc["a", "range_hue"] == pytest.approx(4.0)
    assert s.loc["a", "range_ita"] == pytest.approx(4.0)
    # b: one coloured image left -> no h* / ITA spread, and its red/yellow flip is unknown, not "no flip"
    assert s.loc["b", "sd_L"] == pytest.approx(math.sqrt(2)) and np.isnan(s.loc["b", "sd_hue"])
    assert pd.isna(s.loc["b", "flip_skin_hue"]) and s.loc["b", "flip_skin_tone"] == False  # noqa: E712
    # c flips red/yellow (30 -> 60); a does not (40, 44); b not counted: 1 of 2, not 1 of 3
    row = res.flips.loc[("(all)", "(all)", "skin_hue")]
    assert (row["n_subjects"], row["n_flip"]) == (2, 1)
    assert res.flips.loc[("(all)", "(all)", "skin_tone"), "n_subjects"] == 3
    # the median SD of h* over the subjects that have one: a (2.83) and c (21.2)
    assert res.quantities()["median_sd_hue"] == pytest.approx(np.median([2 * math.sqrt(2), np.std([30, 60], ddof=1)]))
    assert any("2 images are achromatic" in n for n in res.notes)
    sec = stability_section(res)
    assert any("achromatic" in b.get("text", "") for b in sec.blocks if b["type"] == "note")


def test_failed_rows_carry_their_reason():
    df = _stability_table().assign(reason=None)
    failed = pd.DataFrame({"subject_id": ["c", "d"], "L": [np.nan, np.nan], "hue": [np.nan, np.nan],
                           "ita": [np.nan, np.nan], "flags": ["", ""], "reason": [" no face found ", None]})
    df = pd.concat([df, failed], ignore_index=True)
    res = audit_skin_stability(df, settings=AuditSettings(n_boot=0))
    assert dict(res.coverage.reasons["n"]) == {"measurement failed: no face found": 1, "measurement failed": 1}


def _patch(rgb, size=24) -> np.ndarray:
    return np.broadcast_to(np.asarray(rgb, np.uint8), (size, size, 3)).copy()


def _relit(images: dict, opts: RelightOptions) -> pd.DataFrame:
    mask = np.ones((24, 24), bool)
    return pd.concat([pd.DataFrame(relight_image(img, mask, opts)).assign(sample_id=sid)
                      for sid, img in images.items()], ignore_index=True)


def test_lighting_leaves_out_the_hue_of_a_greyscale_image():
    """A grey patch (C* 0) relit by white balance gains colour: its h* swings by tens of degrees per 1000 K,
    which says nothing about skin. Its h* slope is left out, its L* slope kept."""
    opts = RelightOptions(steps={"white-balance": (-1500.0, 0.0, 1500.0), "exposure": (-0.5, 0.0, 0.5)},
                          estimators=("mean",))
    rows = _relit({"grey": _patch([128, 128, 128]), "skin": _patch([200, 150, 120])}, opts)
    base = rows[rows["edit"] == "none"].set_index("sample_id")
    assert "achromatic" in base.loc["grey", "flags"].split(";") and base.loc["skin", "flags"] == ""
    images = pd.DataFrame({"sample_id": ["grey", "skin"], "ok": [True, True], "reason": [None, None]})
    res = audit_lighting_sensitivity(rows, images, settings=AuditSettings(n_boot=20, min_subjects=2))
    s = res.slopes.set_index(["sample_id", "edit"])
    assert np.isnan(s.loc[("grey", "white-balance"), "slope_hue"])
    assert np.isfinite(s.loc[("grey", "exposure"), "slope_L"]) and s.loc[("grey", "exposure"), "slope_L"] > 5
    assert np.isfinite(s.loc[("skin", "white-balance"), "slope_hue"])
    allrow = res.sensitivity.loc[("mean", "white-balance", "(all)")]
    assert (allrow["n_images"], allrow["n_images_hue"]) == (2, 1)
    assert allrow["slope_hue"] == pytest.approx(s.loc[("skin", "white-balance"), "slope_hue"])
    # the skin patch's cell has one image: fewer than min_subjects = 2, flagged and said so in the report
    cell = res.sensitivity.xs(("mean", "white-balance"), level=("estimator", "edit")).drop(index="(all)")
    assert cell["too_small"].all() and cell["n_images"].tolist() == [1]
    assert not bool(allrow["too_small"])
    assert any("1 images are achromatic" in n for n in res.notes)
    sec = lighting_section(res)
    notes = [b["text"] for b in sec.blocks if b["type"] == "note"]
    assert any("fewer than 2 images" in n for n in notes) and any("achromatic" in n for n in notes)
    finding = next(f for f in sec.findings
                   if "mean estimator's L* moves" in f.sentence and "white-balance" in f.sentence)
    assert "degrees per 1000 K of white-balance" in finding.sentence


def test_lighting_counts_copies_that_could_not_be_measured():
    opts = RelightOptions(steps={"exposure": (-1.0, 0.0, 1.0)}, estimators=("mean",))
    rows = _relit({"skin": _patch([200, 150, 120])}, opts)
    bad = (rows["edit"] == "exposure") & (rows["strength"] == 1.0)
    rows.loc[bad, ["ok", "L", "hue"]] = [False, np.nan, np.nan]
    images = pd.DataFrame({"sample_id": ["skin"], "ok": [True], "reason": [None]})
    res = audit_lighting_sensitivity(rows, images, settings=AuditSettings(n_boot=0))
    assert res.slopes.loc[0, "n_steps"] == 2
    assert any(n.startswith("1 relit copies (of 1 images) could not be measured") for n in res.notes)


def test_lighting_gate_finding_points_at_its_own_section():
    opts = RelightOptions(steps={"exposure": (-1.0, 0.0, 1.0)}, estimators=("mean",))
    rows = _relit({"skin": _patch([200, 150, 120])}, opts)
    images = pd.DataFrame({"sample_id": ["skin"], "ok": [True], "reason": [None]})
    res = audit_lighting_sensitivity(rows, images, settings=AuditSettings(n_boot=0))
    sec = lighting_section(res, conditions=evaluate_conditions(["n_images>0"], res.quantities()))
    gate = next(f for f in sec.findings if f.sentence.startswith("--fail-if"))
    assert gate.target == "lighting_overall"

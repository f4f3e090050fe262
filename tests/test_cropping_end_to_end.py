"""End to end: build the saliency-cropping benchmark on the bundled portraits (groups: Thong et al.'s skin tone x
hue cells), run a planted cropper that always keeps the darker face (tests/cropping_croppers.py), audit the games:
the darker groups are preferred and the audit flags it (--fail-if exits 1). The face measurements go to a
temporary results store (about 20 s for the 62 portraits)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fairvision.cli import main

pytestmark = [pytest.mark.vision, pytest.mark.slow]


def test_build_run_audit_flags_a_cropper_that_keeps_the_darker_face(tmp_path, capsys):
    pytest.importorskip("mediapipe")
    pytest.importorskip("cv2")
    crops = tmp_path / "crops"
    assert main(["benchmark", "cropping", "build", "portraits", "-o", str(crops), "--per-pair", "16",
                 "--store", str(tmp_path / "store"), "-j", "1", "--no-progress"]) == 0
    # tests/ is on sys.path under pytest, and the engine's workers inherit it
    assert main(["benchmark", "cropping", "run", str(crops), "--cropper", "cropping_croppers:keep_darker",
                 "-j", "1", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "audit"
    rc = main(["audit", "cropping", str(crops / "run"), "-o", str(out), "--min-subjects", "3", "--n-boot", "200",
               "--orders", "50", "--fail-if", "significant>0"])
    assert rc == 1, capsys.readouterr()
    groups = pd.read_parquet(out / "tables" / "cropping__groups.parquet").set_index("group")
    comp = pd.read_parquet(out / "tables" / "cropping__comparisons.parquet")
    assert comp["significant"].any()
    # every significant pair of a dark and a light group prefers the dark one
    mixed = comp[comp["significant"] & (comp["group_a"].str[:4] != comp["group_b"].str[:4])]
    assert len(mixed) and mixed["preferred"].str.startswith("dark").all()
    judged = groups[~groups["too_small"]]
    dark, light = judged[judged.index.str.startswith("dark")], judged[judged.index.str.startswith("light")]
    assert dark["elo"].min() > light["elo"].max()
    doc = json.loads((out / "report.json").read_text())
    assert any("The cropper prefers skin = dark" in f["sentence"] for f in doc["findings"])

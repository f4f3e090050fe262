"""Verification pairs from real photos: dlib descriptors computed from the images (kept in the results store) and
Thong's light/dark x red/yellow groups from the measured skin colour; an image without a face is left out and
reported."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageOps

from fairvision.cli import main
from fairvision.io.store import ResultsStore

PORTRAITS = "/work/shared/data/portraits"


def test_descriptors_and_measured_skin_groups_from_images(tmp_path, capsys):
    pytest.importorskip("dlib")
    rows = []
    for k in range(1, 7):  # each portrait and its mirror image: one person, two photos
        im = Image.open(f"{PORTRAITS}/{k:03d}.jpg")
        for v, img in (("o", im), ("f", ImageOps.mirror(im))):
            p = tmp_path / f"{k:03d}{v}.jpg"
            img.save(p)
            rows.append({"sample_id": f"{k}{v}", "subject_id": str(k), "image_path": str(p), "pronoun": "x",
                         "skin_tone": 3, "half": "a" if k % 2 else "b"})
    blank = tmp_path / "blank.jpg"
    Image.fromarray(np.full((200, 200, 3), 128, np.uint8)).save(blank)
    rows.append({"sample_id": "blank", "subject_id": "7", "image_path": str(blank), "pronoun": "x", "skin_tone": 3,
                 "half": "a"})
    pd.DataFrame(rows).to_csv(tmp_path / "s.csv", index=False)
    out, store = tmp_path / "rep", tmp_path / "store"
    code = main(["audit", "verification", "-s", str(tmp_path / "s.csv"), "--embed-images", "--measure-skin",
                 "-a", "half", "--max-k", "2", "--far", "0.1", "--n-boot", "20", "--min-subjects", "2",
                 "--store", str(store), "--workers", "1", "-o", str(out)])
    cap = capsys.readouterr()
    printed = cap.out
    assert code == 0, cap.out + cap.err
    # the blank image has no face; portrait 002 is greyscale, so it and its mirror have no skin hue and no group
    assert "3 of 13 images left out" in printed and "face embedding" in printed
    assert "no skin hue: greyscale image: 2" in printed
    rep = json.loads((out / "report.json").read_text())
    assert "verification_coverage" in {s["id"] for s in rep["sections"]}
    assert "measured_tone" in rep["meta"]["attributes"] and "measured_hue" in rep["meta"]["attributes"]
    groups = pd.read_parquet(next((out / "tables").glob("*groups-measured-tone.parquet")))
    assert set(groups["group"]) <= {"light", "dark"}
    # 5 people x 1 genuine pair; impostors: the 10 kept images of 5 people, all pairs of different people
    ov = pd.read_parquet(next((out / "tables").glob("verification__overall.parquet")))
    assert int(ov["n_genuine"].iloc[0]) == 5 and int(ov["n_impostor"].iloc[0]) == 10 * 9 // 2 - 5
    # the descriptors are in the results store
    assert ResultsStore(store).root.exists()

"""Image variants of the vision-language probe and the paired change between them (docs/METHODS.md §12.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.vlm_variants import (VARIANTS, background_black, compare_variants, make_variants,
                                            person_black, person_blur, write_variants)
from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image, write_png
from fairvision.vision.person_mask import mask_from_box

PORTRAIT = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data" / "portraits" / "001.jpg"


def synthetic(h=40, w=60, seed=0):
    rng = np.random.default_rng(seed)
    img = rng.integers(1, 256, size=(h, w, 3), dtype=np.uint8)  # no black pixel anywhere
    mask = np.zeros((h, w), dtype=bool)
    mask[10:30, 20:45] = True
    mask[5, 3] = True  # an odd isolated pixel
    return img, mask


def test_person_black_blackens_exactly_the_masked_pixels():
    img, mask = synthetic()
    out = person_black(img, mask)
    assert out.dtype == np.uint8 and out.shape == img.shape
    assert (out[mask] == 0).all()
    np.testing.assert_array_equal(out[~mask], img[~mask])


def test_background_black_keeps_exactly_the_person():
    img, mask = synthetic()
    out = background_black(img, mask)
    assert (out[~mask] == 0).all()
    np.testing.assert_array_equal(out[mask], img[mask])


def test_person_blur_changes_only_the_masked_pixels():
    img, mask = synthetic()
    out = person_blur(img, mask, sigma=6)
    np.testing.assert_array_equal(out[~mask], img[~mask])
    changed = (out != img).any(axis=2)
    assert not changed[~mask].any()
    assert changed[mask].mean() > 0.9  # random noise is smoothed away almost everywhere inside
    # strong blur: the person's pixels lose most of their variance
    assert out[mask].astype(float).std() < 0.3 * img[mask].astype(float).std()


def test_make_variants_has_the_four_and_checks_shapes():
    img, mask = synthetic()
    v = make_variants(img, mask)
    assert tuple(v) == VARIANTS
    np.testing.assert_array_equal(v["original"], img)
    with pytest.raises(FairvisionError):
        make_variants(img, mask[:, :10])


def test_box_mask():
    m = mask_from_box((2, 1, 5, 4), (6, 8))
    expected = np.zeros((6, 8), dtype=bool)
    expected[1:4, 2:5] = True
    np.testing.assert_array_equal(m, expected)
    with pytest.raises(FairvisionError):
        mask_from_box((5, 1, 2, 4), (6, 8))


@pytest.mark.vision
def test_selfie_mask_covers_the_face_centre_of_a_portrait():
    from fairvision.vision.person_mask import person_mask

    img = read_image(PORTRAIT)
    mask, how = person_mask(img)
    assert how == "selfie" and mask.shape == img.shape[:2]
    h, w = mask.shape
    assert mask[h // 2 - 20:h // 2 + 20, w // 2 - 20:w // 2 + 20].mean() > 0.95
    assert 0.1 < mask.mean() < 0.95  # a person, not the whole frame


def test_paired_change_hand_worked():
    # group A: 4 subjects, 'unspecified' first [1,1,0,0], second [1,0,1,1]: rates 0.5 -> 0.75, b=1, c=2,
    # exact McNemar p = 2 * P(Bin(3, 1/2) <= 1) = 2 * 4/8 -> 1.
    # group B: 10 subjects never 'unspecified' first, always second: change 1, b=0, c=10, p = 2 / 2**10.
    # Holm over the two p-values: 2 * 2/1024 and max(that, 1.0).
    ids = [f"s{i}" for i in range(14)]
    data = pd.DataFrame({"sample_id": ids, "subject_id": ids, "g": ["A"] * 4 + ["B"] * 10})
    first = pd.DataFrame({"sample_id": ids, "predicted": ["unspecified", "unspecified", "man", "woman"] + ["man"] * 10})
    second = pd.DataFrame({"sample_id": ids[::-1],
                           "predicted": (["unspecified", "man", "unspecified", "unspecified"] + ["unspecified"] * 10)[::-1]})
    res = compare_variants(data, first, second, ["g"], labels=["unspecified"], n_boot=200)
    c = res.changes.set_index("group")
    assert c.loc["A", "rate_first"] == 0.5 and c.loc["A", "rate_second"] == 0.75
    assert c.loc["A", "estimate"] == pytest.approx(0.25)
    assert (c.loc["A", "b"], c.loc["A", "c"]) == (1, 2)
    assert c.loc["A", "pvalue"] == pytest.approx(1.0)
    assert c.loc["B", "estimate"] == 1.0 and (c.loc["B", "b"], c.loc["B", "c"]) == (0, 10)
    assert c.loc["B", "pvalue"] == pytest.approx(2 / 1024)
    assert c.loc["B", "pvalue_adjusted"] == pytest.approx(4 / 1024)
    assert c.loc["A", "pvalue_adjusted"] == pytest.approx(1.0)
    assert c.loc["B", "ci_low"] == 1.0 and c.loc["B", "ci_high"] == 1.0  # every image changed the same way
    assert c.loc["A", "ci_low"] <= 0.25 <= c.loc["A", "ci_high"]
    assert bool(c.loc["B", "flagged"]) and not bool(c.loc["A", "flagged"])
    assert res.quantities()["change.g.B.unspecified"] == 1.0


def test_paired_change_needs_every_sample_predicted():
    data = pd.DataFrame({"sample_id": ["a", "b"], "g": ["A", "B"]})
    p = pd.DataFrame({"sample_id": ["a"], "predicted": ["man"]})
    with pytest.raises(FairvisionError, match="no prediction for sample_id 'b'"):
        compare_variants(data, p, p, ["g"], n_boot=10)


def test_write_variants_with_mask_files_and_boxes(tmp_path):
    img, mask = synthetic()
    write_png(tmp_path / "a.png", img)
    write_png(tmp_path / "b.png", img)
    (tmp_path / "masks").mkdir()
    write_png(tmp_path / "masks" / "a.png", mask)
    data = pd.DataFrame({"sample_id": ["a", "b"], "image_path": [str(tmp_path / "a.png"), str(tmp_path / "b.png")],
                         "x0": [0, 20], "y0": [0, 10], "x1": [1, 45], "y1": [1, 30], "g": ["A", "B"]})
    table = write_variants(data, tmp_path / "out", masks_dir=tmp_path / "masks", box_cols=("x0", "y0", "x1", "y1"))
    assert len(table) == 8 and set(table["variant"]) == set(VARIANTS)
    assert table.drop_duplicates("sample_id").set_index("sample_id")["mask_source"].to_dict() == {"a": "file", "b": "box"}
    got = read_image(tmp_path / "out" / "a__person_black.png")
    assert (got[mask] == 0).all() and (got[~mask] == img[~mask]).all()
    box = mask_from_box((20, 10, 45, 30), mask.shape)
    got_b = read_image(tmp_path / "out" / "b__background_black.png")
    assert (got_b[~box] == 0).all() and (got_b[box] == img[box]).all()
    assert (tmp_path / "out" / "variants.csv").is_file()
    assert "g" in table.columns


def test_cli_writes_four_variants_per_image(tmp_path, capsys):
    img, mask = synthetic()
    (tmp_path / "masks").mkdir()
    for sid in ("p1", "p2", "p3"):
        write_png(tmp_path / f"{sid}.png", img)
        write_png(tmp_path / "masks" / f"{sid}.png", mask)
    pd.DataFrame({"sample_id": ["p1", "p2", "p3"], "image_path": ["p1.png", "p2.png", "p3.png"]}).to_csv(
        tmp_path / "s.csv", index=False)
    rc = main(["audit", "vlm", "variants", "--samples", str(tmp_path / "s.csv"), "-o", str(tmp_path / "out"),
               "--masks", str(tmp_path / "masks")])
    assert rc == 0, capsys.readouterr().err
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert len(pngs) == 12 and "p2__person_blur.png" in pngs
    table = pd.read_csv(tmp_path / "out" / "variants.csv")
    assert table.groupby("sample_id")["variant"].nunique().eq(4).all()


def test_cli_variants_bad_input_exits_2(tmp_path, capsys):
    pd.DataFrame({"sample_id": ["p1"], "image_path": ["missing.png"]}).to_csv(tmp_path / "s.csv", index=False)
    rc = main(["audit", "vlm", "variants", "--samples", str(tmp_path / "s.csv"), "-o", str(tmp_path / "out"),
               "--box-cols", "a,b"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    rc = main(["audit", "vlm", "variants", "--samples", str(tmp_path / "s.csv"), "-o", str(tmp_path / "out")])
    assert rc == 2
    assert "missing.png" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_cli_compare_writes_changes(tmp_path, capsys):
    ids = [f"s{i}" for i in range(14)]
    pd.DataFrame({"sample_id": ids, "g": ["A"] * 4 + ["B"] * 10}).to_csv(tmp_path / "s.csv", index=False)
    pd.DataFrame({"sample_id": ids, "predicted": ["man"] * 14}).to_parquet(tmp_path / "p1.parquet")
    pd.DataFrame({"sample_id": ids, "predicted": ["man"] * 4 + ["unspecified"] * 10}).to_parquet(tmp_path / "p2.parquet")
    rc = main(["audit", "vlm", "compare", "--samples", str(tmp_path / "s.csv"), "--first", str(tmp_path / "p1.parquet"),
               "--second", str(tmp_path / "p2.parquet"), "-a", "g", "-o", str(tmp_path / "changes.csv"),
               "--n-boot", "50", "--fail-if", "n_flagged>0"])
    assert rc == 1  # the gate held; the table is written
    ch = pd.read_csv(tmp_path / "changes.csv")
    row = ch[(ch["group"] == "B") & (ch["label"] == "unspecified")].iloc[0]
    assert row["estimate"] == 1.0 and row["c"] == 10

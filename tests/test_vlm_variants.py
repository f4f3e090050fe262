"""Image variants of the vision-language probe and the paired change between them (docs/METHODS.md §12.2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.stats.clustered import clustered_mcnemar
from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.samples import SampleOptions
from fairvision.audits.vlm.variants import compare_variants, write_variants
from fairvision.vision.image_edits import VARIANTS, background_black, make_variants, person_black, person_blur
from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image, write_png
from fairvision.report import Report
from fairvision.report.sections.vlm import compare_section
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
    res = compare_variants(data, first, second, ["g"], labels=["unspecified"],
                           settings=AuditSettings(n_boot=200, min_subjects=1))
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
        compare_variants(data, p, p, ["g"], settings=AuditSettings(n_boot=10))


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


def test_clustered_mcnemar_hand_worked():
    # subjects s0, s1: 8 images each, all gain 'unspecified' in the second variant; s2..s11: one image each, unchanged.
    # Images as independent: b = 0, c = 16, exact p = 2 / 2**16. Subjects: d_s = 8, 8, 0...: X2 = 16**2 / 128 = 2,
    # p = P(chi2_1 > 2) = 0.1573: only two people changed. The probe reports the larger p-value.
    subj = [0] * 8 + [1] * 8 + list(range(2, 12))
    ids = [f"i{i}" for i in range(len(subj))]
    data = pd.DataFrame({"sample_id": ids, "subject_id": subj, "g": "A"})
    first = pd.DataFrame({"sample_id": ids, "predicted": "man"})
    second = pd.DataFrame({"sample_id": ids, "predicted": ["unspecified"] * 16 + ["man"] * 10})
    res = compare_variants(data, first, second, ["g"], labels=["unspecified"], settings=AuditSettings(n_boot=100))
    row = res.changes.iloc[0]
    assert (row["b"], row["c"]) == (0, 16)
    assert row["statistic_subject"] == pytest.approx(2.0)
    assert row["pvalue"] == pytest.approx(stats.chi2.sf(2.0, 1))
    assert not row["flagged"]
    cm = clustered_mcnemar(np.array([1.0, 1, 1, -1, 0]), np.zeros(5, int), np.array([0, 0, 1, 2, 3]), 1)
    # d_s = 2, 1, -1, 0: (2)**2 / (4 + 1 + 1) = 2/3
    assert cm["statistic"].iat[0] == pytest.approx(4 / 6) and cm["pvalue"].iat[0] == pytest.approx(stats.chi2.sf(4 / 6, 1))


def paired_predictions(n_subjects=60, seed=0, shift_group="B", shift=0.6):
    """Two variants of the same images: the second turns 'man' into 'unspecified' for a share of group g1 = B."""
    rng = np.random.default_rng(seed)
    subj = np.repeat(np.arange(n_subjects), 2)
    g1 = rng.choice(["A", "B"], n_subjects)[subj]
    g2 = rng.choice(["x", "y"], n_subjects)[subj]
    ids = [f"i{i}" for i in range(len(subj))]
    p1 = rng.choice(["man", "woman"], len(subj)).astype(object)
    p2 = p1.copy()
    turn = (g1 == shift_group) & (p1 == "man") & (rng.random(len(subj)) < shift)
    p2[turn] = "unspecified"
    flip = rng.random(len(subj)) < 0.05  # a little noise in both directions
    p2[flip] = np.where(p2[flip] == "man", "woman", "man")
    data = pd.DataFrame({"sample_id": ids, "subject_id": subj, "g1": g1, "g2": g2})
    return data, pd.DataFrame({"sample_id": ids, "predicted": p1}), pd.DataFrame({"sample_id": ids, "predicted": p2})


def test_compare_intersections_too_small_and_one_family():
    data, first, second = paired_predictions(seed=2)
    keep = ~((data["g1"] == "A") & (data["g2"] == "y") & (data["subject_id"] % 4 != 0))
    data = data[keep].reset_index(drop=True)
    res = compare_variants(data, first, second, ["g1", "g2"], max_k=2,
                           settings=AuditSettings(n_boot=100, correction="bonferroni"))
    c = res.changes
    inter = c[c["attribute"] == "g1 × g2"]
    assert set(inter["group"]) == {"A × x", "A × y", "B × x", "B × y"}
    # change per cell equals an independent pandas computation
    d = data.merge(first, on="sample_id").merge(second, on="sample_id", suffixes=("_1", "_2"))
    for row in inter.itertuples(index=False):
        a, b = row.group.split(" × ")
        sel = d[(d["g1"] == a) & (d["g2"] == b)]
        want = (sel["predicted_2"] == row.label).mean() - (sel["predicted_1"] == row.label).mean()
        assert row.estimate == pytest.approx(want)
        assert row.n_subjects == sel["subject_id"].nunique()
    small = inter[inter["group"] == "A × y"]
    assert small["too_small"].all() and small["pvalue"].isna().all() and not small["flagged"].any()
    tested = c[c["pvalue"].notna()]
    np.testing.assert_allclose(tested["pvalue_adjusted"], np.minimum(1, tested["pvalue"] * len(tested)))
    flagged = c[c["flagged"]]
    assert ((flagged["label"] == "unspecified") | (flagged["label"] == "man")).all()
    assert ("g1", "B", "unspecified") in set(zip(flagged["attribute"], flagged["group"], flagged["label"]))
    q = res.quantities()
    assert q["n_too_small"] == 1 and "change.g1+g2.B+x.unspecified" in q


def test_compare_report_section_has_forest_plot_and_findings():
    data, first, second = paired_predictions(seed=3)
    res = compare_variants(data, first, second, ["g1"], names=("original", "person_blur"),
                           settings=AuditSettings(n_boot=100))
    sec = compare_section(res)
    assert "changes" in sec.tables
    assert any(b["type"] == "figure" and b["name"] == "change_unspecified" for b in sec.blocks)
    f = [f for f in sec.findings if "unspecified" in f.sentence and "g1 = B" in f.sentence]
    assert f and "rises" in f[0].sentence and f[0].quantity == "change.g1.B.unspecified"
    row = res.changes.set_index(["group", "label"]).loc[("B", "unspecified")]
    assert f[0].value == pytest.approx(row["estimate"]) and f[0].ci_low == pytest.approx(row["ci_low"])
    rep = Report(title="t")
    rep.add(sec)
    assert "Label changes between image variants" in rep.to_html()


def test_cli_compare_writes_a_report_folder(tmp_path, capsys):
    data, first, second = paired_predictions(seed=4)
    data.to_csv(tmp_path / "s.csv", index=False)
    first.to_parquet(tmp_path / "p1.parquet")
    second.to_parquet(tmp_path / "p2.parquet")
    args = ["audit", "vlm", "compare", "--samples", str(tmp_path / "s.csv"), "--first", str(tmp_path / "p1.parquet"),
            "--second", str(tmp_path / "p2.parquet"), "-a", "g1", "-a", "g2", "--max-k", "2", "--n-boot", "100",
            "-o", str(tmp_path / "out")]
    assert main(args) == 0, capsys.readouterr().err
    out = tmp_path / "out"
    assert (out / "report.html").is_file() and (out / "report.json").is_file()
    tables = list((out / "tables").glob("*.parquet"))
    assert any("changes" in p.name for p in tables)
    doc = json.loads((out / "report.json").read_text())
    assert "vlm_compare" in json.dumps(doc)
    ch = pd.read_parquet([p for p in tables if "changes" in p.name][0])
    assert {"g1", "g2", "g1 × g2"} <= set(ch["attribute"])
    assert main(args + ["--fail-if", "change.g1.B.unspecified>0.1"]) == 1
    assert "fail-if" in capsys.readouterr().err
    assert main(args + ["--fail-if", "nonsense>1"]) == 2


# --------------------------------------------------------------------------- review fixes


@pytest.mark.parametrize("bad", ["../evil", "a/b", "..", "a\\b", ""])
def test_write_variants_refuses_ids_that_name_files_elsewhere(tmp_path, bad):
    img, mask = synthetic()
    write_png(tmp_path / "a.png", img)
    (tmp_path / "work").mkdir()
    data = pd.DataFrame({"sample_id": ["ok", bad], "image_path": [str(tmp_path / "a.png")] * 2,
                         "x0": [20] * 2, "y0": [10] * 2, "x1": [45] * 2, "y1": [30] * 2})
    data.attrs["source"] = "s.csv"
    with pytest.raises(FairvisionError, match=r"s\.csv: row 2: sample_id .* cannot name a variant file"):
        write_variants(data, tmp_path / "work" / "out", box_cols=("x0", "y0", "x1", "y1"))
    # nothing written anywhere: not outside the output folder, not in it
    assert sorted(p.name for p in tmp_path.rglob("*.png")) == ["a.png"]
    assert not (tmp_path / "work" / "out").exists()


def test_write_variants_plain_ids_stay_inside(tmp_path):
    img, mask = synthetic()
    write_png(tmp_path / "a.png", img)
    data = pd.DataFrame({"sample_id": ["x.1", "y..z"], "image_path": [str(tmp_path / "a.png")] * 2,
                         "x0": [20] * 2, "y0": [10] * 2, "x1": [45] * 2, "y1": [30] * 2})
    table = write_variants(data, tmp_path / "out", box_cols=("x0", "y0", "x1", "y1"), variants=("original",))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["variants.csv", "variants.original.csv", "x.1__original.png",
                                                                    "y..z__original.png"]
    assert all(Path(p).parent == (tmp_path / "out").resolve() for p in table["image_path"])


def test_compare_duplicate_sample_id_is_one_line():
    data = pd.DataFrame({"sample_id": ["a", "b", "a"], "g": ["A", "B", "A"]})
    p = pd.DataFrame({"sample_id": ["a", "b"], "predicted": ["man", "woman"]})
    data.attrs["source"] = "s.csv"
    with pytest.raises(FairvisionError, match=r"s\.csv: row 3: sample_id 'a' appears twice"):
        compare_variants(data, p, p, ["g"], settings=AuditSettings(n_boot=10))


@pytest.mark.parametrize("rule", ["drop", "keep"])
def test_compare_missing_rule(tmp_path, capsys, rule):
    ids = [f"s{i}" for i in range(16)]
    g = ["A"] * 4 + ["B"] * 10 + [None, None]
    data = pd.DataFrame({"sample_id": ids, "g": g})
    first = pd.DataFrame({"sample_id": ids, "predicted": ["man"] * 16})
    second = pd.DataFrame({"sample_id": ids, "predicted": ["man"] * 4 + ["unspecified"] * 10 + ["woman"] * 2})
    with pytest.raises(FairvisionError, match=r"row 15: column 'g' is empty"):
        compare_variants(data, first, second, ["g"], settings=AuditSettings(n_boot=10))
    res = compare_variants(data, first, second, ["g"], samples=SampleOptions(missing=rule),
                           settings=AuditSettings(n_boot=20, min_subjects=1))
    c = res.changes.set_index(["group", "label"])
    if rule == "drop":
        assert set(c.index.get_level_values(0)) == {"A", "B"} and "woman" not in res.labels
        assert res.meta["n_samples"] == 14 and res.meta["n_dropped"] == 2
    else:
        assert c.loc[("(missing)", "woman"), "estimate"] == 1.0 and c.loc[("(missing)", "man"), "estimate"] == -1.0
        assert c.loc[("(missing)", "man"), "n_samples"] == 2
    assert c.loc[("B", "unspecified"), "estimate"] == 1.0
    data.to_csv(tmp_path / "s.csv", index=False)
    first.to_parquet(tmp_path / "p1.parquet")
    second.to_parquet(tmp_path / "p2.parquet")
    args = ["audit", "vlm", "compare", "--samples", str(tmp_path / "s.csv"), "--first", str(tmp_path / "p1.parquet"),
            "--second", str(tmp_path / "p2.parquet"), "-a", "g", "-o", str(tmp_path / "changes.csv"), "--n-boot", "20"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--missing drop" in err
    assert main(args + ["--missing", rule]) == 0
    ch = pd.read_csv(tmp_path / "changes.csv", keep_default_na=False)
    assert ("(missing)" in set(ch["group"])) == (rule == "keep")


def test_cli_variants_writes_one_sample_table_per_variant_and_takes_a_folder(tmp_path, capsys):
    img, mask = synthetic()
    (tmp_path / "imgs").mkdir()
    (tmp_path / "masks").mkdir()
    for sid in ("p1", "p2"):
        write_png(tmp_path / "imgs" / f"{sid}.png", img)
        write_png(tmp_path / "masks" / f"{sid}.png", mask)
    rc = main(["audit", "vlm", "variants", "--samples", str(tmp_path / "imgs"), "-o", str(tmp_path / "out"),
               "--masks", str(tmp_path / "masks")])
    assert rc == 0, capsys.readouterr().err
    assert "variants.person_blur.csv" in capsys.readouterr().out
    whole = pd.read_csv(tmp_path / "out" / "variants.csv")
    for v in VARIANTS:
        one = pd.read_csv(tmp_path / "out" / f"variants.{v}.csv")
        assert one["sample_id"].tolist() == ["p1", "p2"] and (one["variant"] == v).all()
        assert [Path(p).name for p in one["image_path"]] == [f"p1__{v}.png", f"p2__{v}.png"]
        pd.testing.assert_frame_equal(one, whole[whole["variant"] == v].reset_index(drop=True))
    # the background_black table's image is the person on black
    bb = read_image(pd.read_csv(tmp_path / "out" / "variants.background_black.csv")["image_path"].iloc[0])
    np.testing.assert_array_equal(bb, background_black(img, mask > 0 if mask.ndim == 2 else mask.max(axis=2) > 127))


def test_selfie_segmentation_leaves_no_native_log_lines_on_stderr():
    import subprocess
    import sys

    code = ("from fairvision.io.images import read_image; from fairvision.vision.person_mask import person_mask; "
            f"m, how = person_mask(read_image({str(PORTRAIT)!r})); print(how, m.mean() > 0.1)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items() if k != "FAIRVISION_NATIVE_LOGS"})
    assert out.returncode == 0 and out.stdout.split() == ["selfie", "True"], out.stderr
    assert "XNNPACK" not in out.stderr and "inference_feedback" not in out.stderr and "W0000" not in out.stderr

"""In-painting bystanders and personal information (``curate inpaint``) with a tiny randomly initialised
Stable Diffusion in-painting pipeline built from configs (no network, no downloaded weights), and the utility
check (``curate inpaint-check``) against hand computations, scipy.stats.wilcoxon and a naive bootstrap loop."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import ndimage, stats

from fairvision.audits.curation.inpainting import audit_inpaint_utility, audit_inpainting, read_regions
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import ColumnError, FairvisionError
from fairvision.io.images import read_image, write_png
from fairvision.stats.resample import cluster_bootstrap_weights
from fairvision.vision.inpaint import (FHIBE_NEGATIVE_PROMPT, FHIBE_PROMPT, InpaintOptions, Inpainter, box_mask,
                                       crop_box, draw_guidance, image_seed)
from tiny_diffusers import save_tiny_pipeline  # tests/ is on sys.path

HAS_DIFFUSERS = all(importlib.util.find_spec(m) is not None for m in ("diffusers", "transformers"))
needs_diffusers = pytest.mark.skipif(not HAS_DIFFUSERS, reason="needs the diffusers extra")
FAST = InpaintOptions(steps=2, resolution=48)


@pytest.fixture(scope="module")
def tiny_inpaint(tmp_path_factory):
    """A StableDiffusionInpaintPipeline (UNet of 9 input channels) with random weights, saved to a folder."""
    if not HAS_DIFFUSERS:
        pytest.skip("needs the diffusers extra")
    return save_tiny_pipeline(tmp_path_factory.mktemp("tiny-inpaint"), "StableDiffusionInpaintPipeline")


# ----------------------------------------------------------------------------- masks, seeds, guidance


def test_box_mask_by_hand():
    got = box_mask((4, 6), [[1, 0, 3, 2], [2, 1, 4, 3], [5, 3, 9, 9]])  # the last one clipped to the image
    want = np.array([[0, 1, 1, 0, 0, 0],
                     [0, 1, 1, 1, 0, 0],
                     [0, 0, 1, 1, 0, 0],
                     [0, 0, 0, 0, 0, 1]], bool)
    assert np.array_equal(got, want)
    assert not box_mask((3, 3), np.zeros((0, 4))).any()


def test_seeds_are_reproducible_and_guidance_stays_in_fhibes_range():
    assert image_seed(0, "a") == image_seed(0, "a") and image_seed(0, "a") != image_seed(1, "a") != image_seed(0, "b")
    g = np.array([draw_guidance(image_seed(7, f"s{i}")) for i in range(2000)])
    assert g.min() >= 12 and g.max() <= 16
    assert abs(g.mean() - 14) < 0.1 and abs(g.std() - 4 / np.sqrt(12)) < 0.05  # U(12, 16): mean 14, sd 1.155
    assert draw_guidance(5, (7.5, 7.5)) == 7.5


def test_regions_table_unites_rows_and_names_bad_rows(tmp_path):
    reg = read_regions(pd.DataFrame({"sample_id": ["a", "a", "b"], "x0": [0, 5, None], "y0": [0, 5, None],
                                     "x1": [2, 6, None], "y1": [2, 6, None], "mask_path": [None, None, "m/b.png"]}),
                       base=tmp_path)
    assert reg["a"] == {"boxes": [[0, 0, 2, 2], [5, 5, 6, 6]], "masks": []}
    assert reg["b"] == {"boxes": [], "masks": [str(tmp_path / "m/b.png")]}
    with pytest.raises(ColumnError, match="row 2: neither a mask path nor a box"):
        read_regions(pd.DataFrame({"sample_id": ["a", "b"], "x0": [0, None], "y0": [0, None], "x1": [1, None],
                                   "y1": [1, None]}))
    with pytest.raises(ColumnError, match="row 1: box .* is empty"):
        read_regions(pd.DataFrame({"sample_id": ["a"], "x0": [3], "y0": [0], "x1": [3], "y1": [1]}))


# ----------------------------------------------------------------------------- the in-painting model


@needs_diffusers
def test_only_the_grown_mask_changes_and_reruns_are_identical(tiny_inpaint):
    img = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    mask = np.zeros((40, 48), bool)
    mask[10:20, 12:30] = True
    inp = Inpainter(tiny_inpaint, FAST, threads=1)
    a, ga = inp.inpaint(img, mask, 11)
    b, gb = inp.inpaint(img, mask, 11)
    c, _ = inp.inpaint(img, mask, 12)
    # the grown mask, computed independently: every pixel within 4 px (Euclidean) of a mask pixel
    grown = ndimage.distance_transform_edt(~mask) <= FAST.dilate
    assert a.shape == img.shape and a.dtype == np.uint8
    assert np.array_equal(a[~grown], img[~grown])  # outside: the original, exactly
    assert (a[mask] != img[mask]).any(axis=1).mean() > 0.9  # inside: in-painted
    assert np.array_equal(a, b) and ga == gb == draw_guidance(11)  # same seed, same image and guidance
    assert not np.array_equal(a, c)
    assert 12 <= ga <= 16
    assert inp.options.prompt == FHIBE_PROMPT and inp.options.negative_prompt == FHIBE_NEGATIVE_PROMPT
    assert InpaintOptions().steps == 20 and InpaintOptions().guidance == (12.0, 16.0)
    same, _ = inp.inpaint(img, np.zeros((40, 48), bool), 11)  # nothing to in-paint
    assert np.array_equal(same, img)
    # a photo larger than the model's size: a window around the region (crop) or the whole image shrunk
    big = np.random.default_rng(1).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    small = np.zeros((64, 96), bool)
    small[40:46, 70:80] = True
    grown = ndimage.distance_transform_edt(~small) <= FAST.dilate
    for context in ("crop", "whole"):
        out, _ = Inpainter(tiny_inpaint, InpaintOptions(steps=2, resolution=24, context=context)).inpaint(big, small, 3)
        assert np.array_equal(out[~grown], big[~grown]) and (out[small] != big[small]).any(axis=1).mean() > 0.9


def test_crop_window_by_hand():
    m = np.zeros((100, 200), bool)
    m[10:20, 150:170] = True  # 10 x 20: widened by 10 on every side -> rows 0..30, cols 140..180
    assert crop_box(m, 16) == (0, 30, 140, 180)
    assert crop_box(m, 64) == (0, 64, 128, 192)  # then to 64 about the centre (rows shifted back inside)
    assert crop_box(m, 512) == (0, 100, 0, 200)  # never beyond the image


def _photos(d: Path, n: int = 4, shape=(40, 48, 3)) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        write_png(d / f"p{i}.png", rng.integers(0, 256, shape, dtype=np.uint8))
        rows.append({"sample_id": f"s{i}", "image_path": str(d / f"p{i}.png"), "g": "ab"[i % 2]})
    return pd.DataFrame(rows)


@needs_diffusers
def test_run_writes_images_and_a_correct_manifest(tiny_inpaint, tmp_path):
    data = _photos(tmp_path)
    data.loc[3, "image_path"] = str(tmp_path / "gone.png")  # unreadable
    small = np.zeros((10, 10), np.uint8)
    write_png(tmp_path / "small.png", small)  # a mask of another size than its image
    m = np.zeros((40, 48), np.uint8)
    m[30:40, 0:8] = 255
    write_png(tmp_path / "m0.png", m)
    regions = read_regions(pd.DataFrame({"sample_id": ["s0", "s0", "s2", "s1", "s3"], "x0": [0, 4, None, None, 0],
                                         "y0": [0, 2, None, None, 0], "x1": [10, 14, None, None, 5],
                                         "y1": [5, 12, None, None, 5],
                                         "mask_path": [None, "m0.png", "small.png", None, None]}).drop(index=3),
                           base=tmp_path)
    res = audit_inpainting(data, regions, tiny_inpaint, tmp_path / "out", options=FAST, attributes=["g"],
                           settings=AuditSettings(seed=5))
    man = res.manifest.set_index("sample_id")
    assert man["status"].to_dict() == {"s0": "inpainted", "s1": "copied", "s2": "failed", "s3": "failed"}
    assert man.loc["s2", "reason"].startswith("bad mask") and "10x10" in man.loc["s2", "reason"]
    assert man.loc["s3", "reason"].startswith("unreadable image")
    assert man["n_regions"].to_dict() == {"s0": 2 + 1, "s1": 0, "s2": 1, "s3": 1}
    # s0: boxes [0,10)x[0,5) and [4,14)x[2,12) overlap in [4,10)x[2,5); plus the mask's 8 x 10 block
    area = 10 * 5 + 10 * 10 - 6 * 3 + 8 * 10
    assert man.loc["s0", "masked_fraction"] == pytest.approx(area / (40 * 48))
    assert man.loc["s0", "seed"] == image_seed(5, "s0") and 12 <= man.loc["s0", "guidance"] <= 16
    assert man.loc["s0", "guidance"] == draw_guidance(image_seed(5, "s0"))
    assert Path(man.loc["s1", "output_path"]).read_bytes() == Path(data.loc[1, "image_path"]).read_bytes()
    out0 = read_image(man.loc["s0", "output_path"])
    assert out0.shape == (40, 48, 3) and np.array_equal(out0[39, 47], read_image(data.loc[0, "image_path"])[39, 47])
    assert pd.read_csv(tmp_path / "out" / "manifest.csv")["status"].tolist() == ["inpainted", "copied", "failed",
                                                                                 "failed"]
    assert res.coverage.n_left_out == 2 and set(res.coverage.reasons.index) == {"bad mask", "unreadable image"}
    assert res.quantities()["n_failed"] == 2
    from fairvision.report.sections.curation_inpaint import inpaint_section

    assert not [b for b in inpaint_section(res).blocks if b["type"] == "image"]  # no faces unless asked
    notes = [b["text"] for b in inpaint_section(res).blocks if b["type"] == "note"]
    assert "These settings depart from FHIBE's: steps 2 (FHIBE: 20)." in notes, notes
    assert len([b for b in inpaint_section(res, show_images=True).blocks if b["type"] == "image"]) == 1
    again = audit_inpainting(data.iloc[:1], {"s0": regions["s0"]}, tiny_inpaint, tmp_path / "again", options=FAST,
                             settings=AuditSettings(seed=5))
    assert np.array_equal(read_image(again.manifest["output_path"][0]), out0)  # a rerun gives the same image


def test_bad_weights_folder_exits_2_with_one_line(tmp_path, capsys):
    data = _photos(tmp_path, n=1)
    data.to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "reg.csv").write_text("sample_id,x0,y0,x1,y1\ns0,0,0,4,4\n")
    (tmp_path / "notapipe").mkdir()
    rc = main(["curate", "inpaint", str(tmp_path / "s.csv"), "--weights", str(tmp_path / "notapipe"), "--regions",
               str(tmp_path / "reg.csv"), "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("error: ") and "not a diffusers pipeline" in err
    rc = main(["curate", "inpaint", str(tmp_path / "s.csv"), "--weights", str(tmp_path / "nowhere"), "--regions",
               str(tmp_path / "reg.csv"), "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "nowhere: no such" in err and "--weights" in err
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model_index.json").write_text("{}")
    with pytest.raises(FairvisionError, match="not a Stable Diffusion pipeline folder"):
        Inpainter(tmp_path / "half")


# ----------------------------------------------------------------------------- the utility check


def _scores(n_subjects=60, per=2, effect=0.0, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    n = n_subjects * per
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "subject_id": [f"p{i // per}" for i in range(n)],
                         "g": np.where((np.arange(n) // per) % 2 == 0, "a", "b")})
    before = pd.DataFrame({"sample_id": data["sample_id"], "recall": rng.random(n), "iou": rng.random(n)})
    after = before.copy()
    after["recall"] += rng.normal(0, noise, n) if noise else 0.0
    after["iou"] += rng.normal(0, noise, n) if noise else 0.0
    after.loc[data["g"] == "a", "recall"] -= effect
    return data, before, after


def test_utility_against_a_hand_computation_and_scipy():
    before = pd.DataFrame({"sample_id": list("abcdef"), "score": [0.5, 0.7, 0.2, 0.9, 0.4, 0.6]})
    after = pd.DataFrame({"sample_id": list("abcdef"), "score": [0.4, 0.8, 0.05, 0.6, 0.1, 0.6]})
    # diffs: -0.1, +0.1, -0.15, -0.3, -0.3, 0.0 -> mean -0.125
    res = audit_inpaint_utility(before, after, settings=AuditSettings(n_boot=400, min_subjects=2))
    row = res.table.iloc[0]
    assert row["n"] == 6 and row["estimate"] == pytest.approx(-0.75 / 6)
    assert row["mean_before"] == pytest.approx(3.3 / 6) and row["mean_after"] == pytest.approx(2.55 / 6)
    ref = stats.wilcoxon(np.array([-0.1, 0.1, -0.15, -0.3, -0.3, 0.0]))  # zeros dropped (scipy's default)
    assert row["statistic"] == pytest.approx(ref.statistic) and row["pvalue"] == pytest.approx(ref.pvalue)
    # subjects: the test runs on each subject's mean difference
    data = pd.DataFrame({"sample_id": list("abcdef"), "subject_id": ["p", "p", "q", "q", "r", "s"]})
    res = audit_inpaint_utility(before, after, data=data, settings=AuditSettings(n_boot=300, seed=4, min_subjects=2))
    row = res.table.iloc[0]
    per_subject = np.array([0.0, -0.225, -0.3, 0.0])
    ref = stats.wilcoxon(per_subject[per_subject != 0])
    assert row["n_subjects"] == 4 and row["pvalue"] == pytest.approx(ref.pvalue)
    # the interval: a naive loop over the same subject draws
    d = np.array([-0.1, 0.1, -0.15, -0.3, -0.3, 0.0])
    subj = np.array([0, 0, 1, 1, 2, 3])
    w = cluster_bootstrap_weights(4, 300, np.random.default_rng(4))
    reps = [sum(w[b, subj[i]] * d[i] for i in range(6)) / sum(w[b, subj[i]] for i in range(6)) for b in range(300)]
    assert row["ci_low"] == pytest.approx(np.quantile(reps, 0.025))
    assert row["ci_high"] == pytest.approx(np.quantile(reps, 0.975))


def test_planted_loss_in_one_group_is_flagged_and_a_null_is_not():
    data, before, after = _scores(effect=0.1, noise=0.02, seed=1)
    res = audit_inpaint_utility(before, after, data=data, attributes=["g"], settings=AuditSettings(n_boot=200))
    t = res.table.set_index(["metric", "attribute", "group"]).sort_index()
    assert t.loc[("recall", "g", "a"), "significant"] and not t.loc[("recall", "g", "b"), "significant"]
    assert t.loc[("recall", "g", "a"), "estimate"] == pytest.approx(-0.1, abs=0.01)
    assert t.loc[("recall", "g", "a"), "ci_high"] < 0
    assert not t.loc["iou", "significant"].any()
    assert res.quantities()["largest_loss"] == pytest.approx(0.1, abs=0.01)
    # do the groups change differently? Kruskal-Wallis of the subjects' mean differences, as scipy computes it
    per = (after["recall"] - before["recall"]).groupby([data["g"], data["subject_id"]]).mean()
    ref = stats.kruskal(per.loc["a"].to_numpy(), per.loc["b"].to_numpy())
    het = res.heterogeneity.set_index(["metric", "attribute"])
    assert het.loc[("recall", "g"), "statistic"] == pytest.approx(ref.statistic)
    assert het.loc[("recall", "g"), "pvalue"] == pytest.approx(ref.pvalue)
    assert het.loc[("recall", "g"), "differs"] and not het.loc[("iou", "g"), "differs"]
    data, before, after = _scores(effect=0.0, noise=0.02, seed=2)
    res = audit_inpaint_utility(before, after, data=data, attributes=["g"], settings=AuditSettings(n_boot=200))
    assert not res.table["significant"].any() and res.quantities()["n_significant"] == 0
    assert not res.heterogeneity["differs"].any()


def test_only_samples_in_both_tables_are_compared():
    data, before, after = _scores(n_subjects=20, seed=3)
    res = audit_inpaint_utility(before.iloc[2:], after.iloc[:-3], data=data, settings=AuditSettings(n_boot=50))
    assert res.table.loc[0, "n"] == 40 - 5
    assert res.coverage.reasons["n"].to_dict() == {"no score after in-painting": 3, "no score before in-painting": 2}
    with pytest.raises(ColumnError, match="not in the sample table"):
        audit_inpaint_utility(before.assign(sample_id="x" + before["sample_id"]), after, data=data)


def test_check_command_writes_a_report(tmp_path, capsys):
    data, before, after = _scores(effect=0.1, noise=0.02, seed=1)
    data.to_csv(tmp_path / "s.csv", index=False)
    before.to_csv(tmp_path / "b.csv", index=False)
    after.to_csv(tmp_path / "a.csv", index=False)
    rc = main(["curate", "inpaint-check", "--scores-before", str(tmp_path / "b.csv"), "--scores-after",
               str(tmp_path / "a.csv"), "-s", str(tmp_path / "s.csv"), "-a", "g", "--n-boot", "100", "-o",
               str(tmp_path / "r"), "--fail-if", "n_significant>0"])
    assert rc == 1
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any("g = a" in s and "changed differently" in s for s in sentences), sentences
    assert any(s.startswith("In-painting changed iou") and "not significant" in s for s in sentences), sentences


# ----------------------------------------------------------------------------- the reports in a browser


@pytest.mark.browser
@needs_diffusers
def test_reports_in_the_browser(tiny_inpaint, tmp_path):
    from test_report_browser import _browser  # noqa: E402 - tests/ is on sys.path
    from test_report_browser_new import check_in_browser  # noqa: E402

    data = _photos(tmp_path, n=3)
    data.to_csv(tmp_path / "s.csv", index=False)
    (tmp_path / "reg.csv").write_text("sample_id,x0,y0,x1,y1\ns0,0,0,20,12\ns2,30,10,48,40\n")
    rc = main(["curate", "inpaint", str(tmp_path / "s.csv"), "--weights", str(tiny_inpaint), "--regions",
               str(tmp_path / "reg.csv"), "--steps", "2", "--resolution", "48", "-a", "g", "-o",
               str(tmp_path / "inp"), "--show-images"])
    assert rc == 0
    d2, before, after = _scores(effect=0.1, noise=0.02, seed=1)
    d2.to_csv(tmp_path / "s2.csv", index=False)
    before.to_csv(tmp_path / "b.csv", index=False)
    after.iloc[:-2].to_csv(tmp_path / "a.csv", index=False)
    rc = main(["curate", "inpaint-check", "--scores-before", str(tmp_path / "b.csv"), "--scores-after",
               str(tmp_path / "a.csv"), "-s", str(tmp_path / "s2.csv"), "-a", "g", "--n-boot", "50", "-o",
               str(tmp_path / "chk")])
    assert rc == 0
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, tmp_path / "inp" / "report.html", shots / "curate-inpaint.png")
        assert "In-painting bystanders and personal information" in text and "copied unchanged" in text
        assert any(b["type"] == "image" for s in doc["sections"] for b in s["blocks"])  # --show-images
        doc, _, text = check_in_browser(browser, tmp_path / "chk" / "report.html", shots / "curate-inpaint-check.png")
        assert "Utility after in-painting" in text and "changed differently" in text


# ----------------------------------------------------------------------------- review fixes


def test_paired_statistics_in_stats_with_plain_parameters():
    from fairvision.stats.paired import group_heterogeneity, paired_differences, signed_rank

    # 4 subjects, 6 samples, one score column; cells: all, and groups x (p, q) and y (r, s)
    before = np.array([[0.5], [0.7], [0.2], [0.9], [0.4], [0.6]])
    after = np.array([[0.4], [0.8], [0.05], [0.6], [0.1], [0.6]])
    subj = np.array([0, 0, 1, 1, 2, 3])
    cells = [("all", "all", np.arange(6)), ("h", "x", np.arange(4)), ("h", "y", np.array([4, 5]))]
    t = paired_differences(before, after, subj, cells, ["score"], n_boot=0, min_subjects=2, correction="bonferroni")
    assert t["estimate"].tolist() == pytest.approx([-0.75 / 6, -0.45 / 4, -0.15])
    assert t["n_subjects"].tolist() == [4, 2, 2] and t[["ci_low", "ci_high"]].isna().all().all()  # no replicates
    # subject means: 0 (p), -0.225 (q), -0.3 (r), 0 (s); the zeros are dropped
    assert t.loc[0, "pvalue"] == pytest.approx(stats.wilcoxon([-0.225, -0.3]).pvalue)
    assert t.loc[1, "pvalue"] == pytest.approx(stats.wilcoxon([-0.225]).pvalue)
    assert t["pvalue_adjusted"].tolist() == pytest.approx(np.minimum(1, 3 * t["pvalue"]).tolist())
    res = signed_rank(np.array([0.1, -0.1, 0.3, 0.0]), np.array([0, 0, 1, 2]))
    assert (res.statistic, res.pvalue, res.n, res.n_nonzero) == (0.0, pytest.approx(stats.wilcoxon([0.3]).pvalue),
                                                               3, 1)
    assert signed_rank(np.zeros(3), np.arange(3)).pvalue == 1.0
    het = group_heterogeneity(after - before, subj, cells, ["score"], min_subjects=2)
    ref = stats.kruskal([0.0, -0.225], [-0.3, 0.0])
    assert het.loc[0, "statistic"] == pytest.approx(ref.statistic) and het.loc[0, "pvalue"] == pytest.approx(ref.pvalue)
    assert group_heterogeneity(after - before, subj, cells, ["score"], min_subjects=3)["n_groups"].tolist() == [0]


@needs_diffusers
def test_a_region_outside_the_image_is_a_failure_not_an_in_painted_image(tiny_inpaint, tmp_path):
    data = _photos(tmp_path, n=2)
    regions = {"s0": {"boxes": [[100, 100, 120, 130]], "masks": []}, "s1": {"boxes": [[0, 0, 8, 8]], "masks": []}}
    res = audit_inpainting(data, regions, tiny_inpaint, tmp_path / "out", options=FAST)
    man = res.manifest.set_index("sample_id")
    assert man.loc["s0", "status"] == "failed" and man.loc["s0", "reason"].startswith("empty region")
    assert "48x40" in man.loc["s0", "reason"] and man.loc["s1", "status"] == "inpainted"
    assert res.coverage.reasons["n"].to_dict() == {"empty region": 1}


def test_a_missing_attribute_column_fails_before_any_image_is_written(tmp_path):
    data = _photos(tmp_path, n=2)
    with pytest.raises(ColumnError, match="samples: .*'nope'"):
        audit_inpainting(data, {"s0": {"boxes": [[0, 0, 4, 4]], "masks": []}}, tmp_path / "no-weights",
                         tmp_path / "out", attributes=["nope"])
    assert not (tmp_path / "out").exists()
    _, before, after = _scores(n_subjects=12, seed=3)
    with pytest.raises(ColumnError, match=r"^before\.csv: .*'g'"):
        audit_inpaint_utility(before, after, attributes=["g"], sources=("before.csv", "after.csv"))


def test_guidance_range_errors_name_the_option(tmp_path, capsys):
    (tmp_path / "reg.csv").write_text("sample_id,x0,y0,x1,y1\ns0,0,0,4,4\n")
    for flags, want in ((["--guidance-min", "0"], "--guidance-min must be a number above 0"),
                        (["--guidance-max", "inf"], "--guidance-max must be a finite number")):
        rc = main(["curate", "inpaint", str(tmp_path), "--weights", str(tmp_path), "--regions",
                   str(tmp_path / "reg.csv"), "-o", str(tmp_path / "r"), *flags])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and want in err, err


def test_samples_in_neither_score_table_are_counted_as_such():
    data, before, after = _scores(n_subjects=20, seed=3)
    res = audit_inpaint_utility(before.iloc[2:], after.iloc[1:], data=data, settings=AuditSettings(n_boot=20))
    # s0 is in neither table, s1 only in after
    assert res.coverage.reasons["n"].to_dict() == {"no score before or after in-painting": 1,
                                                   "no score before in-painting": 1}
    assert res.subject_col == "subject_id"
    assert audit_inpaint_utility(before, after, settings=AuditSettings(n_boot=20)).subject_col is None


def test_findings_say_what_did_not_change():
    from fairvision.report.sections.curation_inpaint import _histograms, utility_section

    data, before, after = _scores(n_subjects=60, seed=1)
    after["iou"] = before["iou"]  # unchanged on every sample
    after["recall"] -= 0.1  # the same loss in both groups: no heterogeneity
    res = audit_inpaint_utility(before, after, data=data, attributes=["g"], settings=AuditSettings(n_boot=50))
    sec = utility_section(res)
    sentences = [f.sentence for f in sec.findings]
    assert "In-painting left iou unchanged on every one of the 120 samples" in sentences, sentences
    assert any(s.startswith("For g = a") and "did not change significantly differently" in s for s in sentences)
    assert not any("subject column" in b.get("text", "") for b in sec.blocks if b["type"] == "note")
    sec = utility_section(audit_inpaint_utility(before, after, settings=AuditSettings(n_boot=20)))
    assert any("No subject column" in b.get("text", "") for b in sec.blocks if b["type"] == "note")
    fig = _histograms(pd.DataFrame({"masked_fraction": [0.1, 0.1], "guidance": [14.0, 14.0]}))
    assert fig.axes[0].get_xlim()[0] >= 0 and fig.axes[1].get_xlim()[0] > 13  # one value: no share below 0


def test_an_empty_score_leaves_its_column_and_is_counted():
    before = pd.DataFrame({"sample_id": list("abcd"), "x": [0.1, None, 0.3, 0.4], "y": [1.0, 2.0, 3.0, 4.0]})
    after = pd.DataFrame({"sample_id": list("abcd"), "x": [0.2, 0.2, 0.3, 0.1], "y": [1.0, 2.0, None, 3.0]})
    res = audit_inpaint_utility(before, after, settings=AuditSettings(n_boot=20, min_subjects=2))
    t = res.table.set_index("metric")
    assert t.loc["x", "n"] == 3 and t.loc["x", "estimate"] == pytest.approx((0.1 + 0.0 - 0.3) / 3)
    assert t.loc["y", "n"] == 3 and t.loc["y", "estimate"] == pytest.approx(-1 / 3)
    assert res.coverage.reasons["n"].to_dict() == {"no x score before in-painting": 1,
                                                   "no y score after in-painting": 1}


def test_an_image_without_a_path_fails_as_unreadable_not_as_a_pipeline_error(tmp_path):
    weights = tmp_path / "pipe"  # the layout check_pipeline_folder reads; no image reaches a model here
    for part in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        (weights / part).mkdir(parents=True)
    (weights / "model_index.json").write_text(json.dumps({p: ["x", "y"] for p in ("unet", "vae", "text_encoder",
                                                                                   "tokenizer", "scheduler")}))
    data = _photos(tmp_path, n=2)
    data.loc[0, "image_path"] = None
    res = audit_inpainting(data, {"s0": {"boxes": [[0, 0, 4, 4]], "masks": []}}, weights, tmp_path / "out")
    man = res.manifest.set_index("sample_id")
    assert man.loc["s0", "status"] == "failed" and man.loc["s0", "reason"] == "unreadable image: no image path"
    assert man.loc["s0", "n_regions"] == 1 and man.loc["s1", "status"] == "copied"
    assert res.coverage.reasons["n"].to_dict() == {"unreadable image": 1}

"""``fairvision score detections|masks|keypoints`` and ``fairvision audit verification`` through fairvision.cli.main.

Expected values are worked by hand (box and mask overlaps, OKS, PCK) or computed
independently (TAR at FAR by sorting, bootstrap weights against repeated rows).
"""

import json
import math

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main

GT = {
    "images": [{"id": 1, "file_name": "a/img1.jpg", "width": 100, "height": 100},
               {"id": 2, "file_name": "img2.png", "width": 100, "height": 100},
               {"id": 3, "file_name": "img3.jpg", "width": 100, "height": 100}],
    "annotations": [{"id": 11, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
                    {"id": 21, "image_id": 2, "category_id": 1, "bbox": [0, 0, 10, 10]},
                    {"id": 22, "image_id": 2, "category_id": 1, "bbox": [50, 50, 10, 10]},
                    {"id": 23, "image_id": 2, "category_id": 2, "bbox": [80, 80, 10, 10]}],
    "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "face"}],
}
PRED = [
    {"image_id": 1, "category_id": 1, "score": 0.9, "bbox": [0, 0, 10, 5]},    # IoU 50 / 100 = 0.5 exactly
    {"image_id": 2, "category_id": 1, "score": 0.8, "bbox": [0, 0, 10, 10]},   # IoU 1
    {"image_id": 2, "category_id": 1, "score": 0.1, "bbox": [50, 50, 10, 10]},  # IoU 1, but low confidence
    {"image_id": 3, "category_id": 1, "score": 0.7, "bbox": [5, 5, 10, 10]},   # no ground truth on image 3
]


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def _run(*args):
    return main([*map(str, args)])


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_detections_per_image_hand_worked(tmp_path, capsys):
    gt, pred = _write(tmp_path, "gt.json", GT), _write(tmp_path, "pred.json", PRED)
    out = tmp_path / "scores.parquet"
    assert _run("score", "detections", gt, pred, "-o", out, "--min-score", "0.5", "-c", "person") == 0
    assert "3 images" in capsys.readouterr().out
    df = pd.read_parquet(out).set_index("sample_id")
    assert list(df.index) == ["img1", "img2", "img3"]  # file name stems
    assert list(df.columns) == ["image_id", "average_recall", "recall_50", "recall_75", "iou"]
    # image 1: IoU 0.5 reaches only the first of the ten thresholds 0.50..0.95
    assert df.loc["img1", "average_recall"] == pytest.approx(0.1)
    assert df.loc["img1", "recall_50"] == 1.0 and df.loc["img1", "recall_75"] == 0.0
    assert df.loc["img1", "iou"] == pytest.approx(0.5)
    # image 2: one box found exactly (recall 1), the other's only prediction is below --min-score (recall 0)
    assert df.loc["img2", "average_recall"] == pytest.approx(0.5)
    assert df.loc["img2", "recall_50"] == pytest.approx(0.5) and df.loc["img2", "recall_75"] == pytest.approx(0.5)
    assert df.loc["img2", "iou"] == pytest.approx(0.5)
    # image 3 has no ground truth: not scored
    assert df.loc["img3"].drop("image_id").isna().all()


def test_detections_per_instance_and_image_id_key(tmp_path):
    gt, pred = _write(tmp_path, "gt.json", GT), _write(tmp_path, "pred.json", PRED)
    out = tmp_path / "inst.csv"
    assert _run("score", "detections", gt, pred, "-o", out, "--per", "instance", "--sample-id", "image_id",
                "--iou", "0.6") == 0
    df = pd.read_csv(out).set_index("annotation_id")
    assert list(df.columns) == ["sample_id", "image_id", "category_id", "average_recall", "recall_60", "iou"]
    assert df.loc[11, "sample_id"] == 1 and df.loc[11, "recall_60"] == 0.0
    assert df.loc[22, "average_recall"] == 1.0  # the low-confidence box counts without --min-score
    assert df.loc[23, "average_recall"] == 0.0  # a face without a face prediction: missed


def test_masks_polygon_against_rle(tmp_path):
    gt = {"images": [{"id": 7, "file_name": "m.jpg", "width": 10, "height": 10}],
          "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "segmentation": [[0, 0, 4, 0, 4, 4, 0, 4]]}],
          "categories": [{"id": 1, "name": "person"}]}
    # column-major RLE of the 4 x 2 block x in 0..3, y in 0..1: 8 of the polygon's 16 pixels
    pred = [{"image_id": 7, "category_id": 1, "score": 1.0,
             "segmentation": {"size": [10, 10], "counts": [0, 2, 8, 2, 8, 2, 8, 2, 68]}}]
    out = tmp_path / "masks.csv"
    assert _run("score", "masks", _write(tmp_path, "gt.json", gt), _write(tmp_path, "p.json", pred), "-o", out) == 0
    row = pd.read_csv(out).iloc[0]
    assert row["sample_id"] == "m"
    assert row["iou"] == pytest.approx(8 / 16)
    assert row["dice"] == pytest.approx(2 * 8 / (16 + 8))
    assert row["average_recall"] == pytest.approx(0.1) and row["recall_50"] == 1.0


def test_keypoints_oks_and_pck(tmp_path):
    gt = {"images": [{"id": 1, "file_name": "p.jpg", "width": 50, "height": 50}],
          "annotations": [
              {"id": 1, "image_id": 1, "category_id": 1, "keypoints": [10, 10, 2, 20, 10, 2], "bbox": [0, 0, 20, 20], "area": 400},
              {"id": 2, "image_id": 1, "category_id": 1, "keypoints": [40, 40, 2, 45, 40, 0], "bbox": [30, 30, 20, 20], "area": 400}],
          "categories": [{"id": 1, "name": "person", "keypoints": ["a", "b"]}]}
    pred = [{"image_id": 1, "category_id": 1, "score": 1.0, "keypoints": [10, 10, 1, 23, 14, 1]}]
    g, p = _write(tmp_path, "gt.json", gt), _write(tmp_path, "p.json", pred)
    out = tmp_path / "kp.csv"
    assert _run("score", "keypoints", g, p, "-o", out, "--per", "instance") == 0
    df = pd.read_csv(out).set_index("annotation_id")
    # 2 keypoints (not COCO's 17): sigma 0.1, k = 0.2; second keypoint off by (3, 4): d^2 = 25
    e = 25 / (2 * 0.2 ** 2 * 400)
    assert df.loc[1, "oks"] == pytest.approx((1 + math.exp(-e)) / 2, rel=1e-9)
    assert df.loc[1, "pck"] == 1.0  # both within 0.5 x box size 20 = 10
    # no one-to-one assignment: the second person's best prediction is the first person's, 30 px away
    assert df.loc[2, "oks"] == pytest.approx(0.0, abs=1e-20) and df.loc[2, "pck"] == 0.0
    assert _run("score", "keypoints", g, p, "-o", out, "--head", "0,1", "--pck-alpha", "0.4") == 0
    img = pd.read_csv(out).iloc[0]
    # head length 10, threshold 4: the keypoint 5 px off is missed -> PCK 0.5; image mean with the second person's 0
    assert img["pck"] == pytest.approx((0.5 + 0.0) / 2)


def test_scores_feed_the_model_audit(tmp_path):
    gt, pred = _write(tmp_path, "gt.json", GT), _write(tmp_path, "pred.json", PRED)
    scores = tmp_path / "scores.csv"
    assert _run("score", "detections", gt, pred, "-o", scores, "-c", "1") == 0
    pd.DataFrame({"sample_id": ["img1", "img2", "img3"], "gender": ["he", "she", "she"]}).to_csv(tmp_path / "s.csv", index=False)
    assert _run("audit", "model", "-s", tmp_path / "s.csv", "--scores", scores, "-a", "gender", "--min-subjects", "1",
                "--n-boot", "20", "-o", tmp_path / "rep") == 0
    assert (tmp_path / "rep" / "report.json").exists()


@pytest.mark.parametrize("case", ["missing", "malformed", "unknown_image", "bad_category", "bad_suffix", "bad_head"])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case):
    gt, pred = _write(tmp_path, "gt.json", GT), _write(tmp_path, "pred.json", PRED)
    cmd, extra = "detections", []
    out = tmp_path / "s.csv"
    if case == "missing":
        gt = tmp_path / "nope.json"
    elif case == "malformed":
        gt = tmp_path / "bad.json"
        gt.write_text('{"images": [}')
    elif case == "unknown_image":
        pred = _write(tmp_path, "p2.json", PRED + [{"image_id": 99, "category_id": 1, "score": 1, "bbox": [0, 0, 1, 1]}])
    elif case == "bad_category":
        extra = ["-c", "dog"]
    elif case == "bad_suffix":
        out = tmp_path / "s.xlsx"
    elif case == "bad_head":
        cmd, extra = "keypoints", ["--head", "zero"]
    assert _run("score", cmd, gt, pred, "-o", out, *extra) == 2
    line = _one_error_line(capsys)
    assert not out.exists()
    expect = {"missing": "nope.json: no such file", "malformed": "malformed JSON at line 1", "unknown_image": "results[4]: image_id 99",
              "bad_category": "no category 'dog'", "bad_suffix": "unknown output format", "bad_head": "--head"}[case]
    assert expect in line


# -- face verification -----------------------------------------------------------------------------------------

def _verification_data(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    n_subj, per = 24, 3
    subj = np.repeat(np.arange(n_subj), per)
    gender = np.where(np.arange(n_subj) % 2 == 0, "he", "she")[subj]
    ids = [f"i{k}" for k in range(subj.size)]
    samples = pd.DataFrame({"sample_id": ids, "subject_id": [f"p{s}" for s in subj], "gender": gender})
    a, b = np.triu_indices(subj.size, 1)
    same = subj[a] == subj[b]
    keep = same | (rng.random(a.size) < 0.5)
    a, b, same = a[keep], b[keep], same[keep]
    score = np.round(rng.normal(0, 1, a.size) + 2.5 * same - 0.8 * same * (gender[a] == "she"), 2)  # rounded: ties
    pairs = pd.DataFrame({"sample_a": np.array(ids)[a], "sample_b": np.array(ids)[b], "score": score, "same_subject": same})
    samples.to_csv(tmp_path / "samples.csv", index=False)
    pairs.to_csv(tmp_path / "pairs.csv", index=False)
    return samples, pairs


def _tar_direct(scores, genuine, far):
    """TAR at FAR by sorting: accept above the (k+1)-th largest impostor score, k = floor(far * n_impostor)."""
    imp = np.sort(scores[~genuine])[::-1]
    k = int(math.floor(far * imp.size + 1e-9))
    thr = -np.inf if k >= imp.size else imp[k]
    return float(np.mean(scores[genuine] > thr))


def test_verification_matches_direct_computation(tmp_path, capsys):
    samples, pairs = _verification_data(tmp_path)
    out = tmp_path / "verif"
    rc = _run("audit", "verification", "--pairs", tmp_path / "pairs.csv", "--samples", tmp_path / "samples.csv",
              "-a", "gender", "--far", "0.01", "--far", "0.1", "--min-subjects", "5", "--n-boot", "200", "-o", out)
    assert rc == 0
    assert "TAR @ FAR 0.01" in capsys.readouterr().out
    groups = pd.read_parquet(out / "tables" / "verification__groups-gender.parquet")
    g_of = dict(zip(samples["sample_id"], samples["gender"]))
    ga, gb = pairs["sample_a"].map(g_of).to_numpy(), pairs["sample_b"].map(g_of).to_numpy()
    for far in (0.01, 0.1):
        for grp in ("he", "she"):
            m = (ga == grp) & (gb == grp)
            expected = _tar_direct(pairs["score"].to_numpy()[m], pairs["same_subject"].to_numpy()[m], far)
            row = groups[(groups["group"] == grp) & (groups["far_target"] == far)].iloc[0]
            assert row["tar"] == pytest.approx(expected)
            assert row["n_subjects"] == 12 and not row["too_small"]
            assert row["ci_low"] <= row["tar"] <= row["ci_high"]
    doc = json.loads((out / "report.json").read_text())
    assert doc["sections"][0]["id"] == "verification"


def test_verification_fail_if_and_bad_pairs(tmp_path, capsys):
    _verification_data(tmp_path)
    base = ["audit", "verification", "--pairs", tmp_path / "pairs.csv", "--samples", tmp_path / "samples.csv",
            "-a", "gender", "--far", "0.05", "--n-boot", "0", "--min-subjects", "5"]
    assert _run(*base, "--fail-if", "gender.difference>=0", "-o", tmp_path / "gate") == 1
    assert (tmp_path / "gate" / "report.html").exists()
    assert "condition met" in capsys.readouterr().err
    assert _run(*base, "--fail-if", "nonsense>1", "-o", tmp_path / "g2") == 2
    _one_error_line(capsys)
    bad = pd.read_csv(tmp_path / "pairs.csv")
    bad.loc[3, "sample_b"] = "ghost"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    assert _run("audit", "verification", "--pairs", tmp_path / "bad.csv", "--samples", tmp_path / "samples.csv",
                "-a", "gender", "-o", tmp_path / "g3") == 2
    line = _one_error_line(capsys)
    assert "bad.csv: row 4: sample_b 'ghost'" in line


def test_weighted_tar_equals_repeated_pairs():
    """The bootstrap's weighted TAR at FAR equals TAR at FAR of the pairs repeated by their integer weights."""
    from fairvision.metrics.verification import weighted_tar_at_far

    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(4, 40))
        s = np.round(rng.normal(size=n), 1)
        g = rng.random(n) < 0.4
        w = rng.integers(0, 4, n)
        if w[g].sum() == 0 or w[~g].sum() == 0:
            continue
        far = float(rng.choice([0.0, 0.05, 0.2, 0.5]))
        tar, _ = weighted_tar_at_far(s, g, w, far)
        assert tar[0] == pytest.approx(_tar_direct(np.repeat(s, w), np.repeat(g, w), far))

"""Per-sample task metrics on hand-worked cases and independent computations."""

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.errors import FairvisionError, InputFileError
from fairvision.metrics import (
    accuracy, average_recall, average_recall_from_iou, box_iou, box_iou_paired, cosine_scores, dice,
    hard_negative_pairs, mask_iou, mean_dice, oks, pck, per_class_recall, polygons_to_mask, positive_pairs, psnr,
    rle_decode, rle_encode, tar_at_far, tar_at_far_by_group,
)
from fairvision.metrics.keypoints import box_size, head_length
from fairvision.stats.multiclass import overall_disparity, recall_matrix


def test_box_iou_hand_worked():
    # [0,0,2,2] vs [1,1,3,3]: intersection 1, union 4 + 4 - 1 = 7
    iou = box_iou([[0, 0, 2, 2]], [[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]])
    np.testing.assert_allclose(iou, [[1 / 7, 1.0, 0.0]])
    np.testing.assert_allclose(box_iou([[0, 0, 2, 2]], [[1, 1, 2, 2]], fmt="xywh"), [[1 / 7]])
    np.testing.assert_allclose(box_iou_paired([[0, 0, 2, 2], [0, 0, 1, 1]], [[1, 1, 3, 3], [0, 0, 1, 1]]), [1 / 7, 1])
    with pytest.raises(FairvisionError):
        box_iou([[0, 0, -1, 2]], [[0, 0, 1, 1]])


def test_box_iou_matches_brute_force_rasterisation():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 20, (5, 2))
    b = rng.integers(0, 20, (6, 2))
    A = np.c_[a, a + rng.integers(1, 10, (5, 2))]
    B = np.c_[b, b + rng.integers(1, 10, (6, 2))]
    ref = np.zeros((5, 6))
    for i in range(5):
        for j in range(6):
            ma = np.zeros((40, 40), bool)
            mb = np.zeros((40, 40), bool)
            ma[A[i, 1]:A[i, 3], A[i, 0]:A[i, 2]] = True
            mb[B[j, 1]:B[j, 3], B[j, 0]:B[j, 2]] = True
            ref[i, j] = (ma & mb).sum() / (ma | mb).sum()
    np.testing.assert_allclose(box_iou(A, B), ref)


def test_rle_hand_worked_and_round_trip():
    m = np.zeros((5, 4), bool)
    m[1:3, 1:4] = True
    # column-major runs: 6 zeros, 2 ones, 3 zeros, 2 ones, 3 zeros, 2 ones, 2 zeros
    assert rle_encode(m, compressed=False)["counts"] == [6, 2, 3, 2, 3, 2, 2]
    # COCO string: 6, 2, 3, then differences to the count two before: 0, 0, 0, -1 (-1 -> chr(31 + 48) = 'O')
    assert rle_encode(m)["counts"] == "623000O"
    np.testing.assert_array_equal(rle_decode({"size": [5, 4], "counts": "623000O"}), m)
    rng = np.random.default_rng(1)
    big = rng.random((120, 97)) < 0.3
    big[:, :40] = True  # long runs need several 5-bit groups
    for comp in (True, False):
        np.testing.assert_array_equal(rle_decode(rle_encode(big, compressed=comp)), big)
    starts_with_one = np.ones((3, 3), bool)
    assert rle_encode(starts_with_one, compressed=False)["counts"] == [0, 9]
    with pytest.raises(FairvisionError, match="sum"):
        rle_decode({"size": [2, 2], "counts": [1, 1]})


def test_polygon_rasterisation():
    m = polygons_to_mask([[1, 1, 4, 1, 4, 3, 1, 3]], 5, 5)
    ref = np.zeros((5, 5), bool)
    ref[1:3, 1:4] = True
    np.testing.assert_array_equal(m, ref)
    # right triangle with legs 10: about half of 100 pixels
    tri = polygons_to_mask([[0, 0, 10, 0, 0, 10]], 10, 10)
    assert tri.sum() == 45  # centres (c+.5, r+.5) with c + r + 1 < 10


def test_mask_iou_and_dice():
    a = np.zeros((4, 4), bool)
    a[:2] = True
    b = np.zeros((4, 4), bool)
    b[1:3] = True
    np.testing.assert_allclose(mask_iou(a, np.stack([a, b])), [[1.0, 4 / 12]])
    assert dice(a, b) == pytest.approx(2 * 4 / 16)
    assert np.isnan(dice(np.zeros((2, 2)), np.zeros((2, 2))))


def test_mean_dice_over_categories_matches_per_category_loop():
    rng = np.random.default_rng(2)
    p = rng.integers(0, 5, (30, 30))
    t = rng.integers(0, 4, (30, 30))
    ref = [dice(p == c, t == c) for c in range(1, 5)]
    assert mean_dice(p, t, ignore=0) == pytest.approx(np.nanmean(ref))
    assert mean_dice(np.array([[0, 1], [2, 2]]), np.array([[0, 1], [1, 2]]), ignore=0) == pytest.approx((2 / 3 + 2 / 3) / 2)


def test_average_recall_thresholds():
    # IoU 0.9 reaches thresholds 0.50..0.90: 9 of 10
    assert average_recall([[0, 0, 10, 10]], [[0, 0, 10, 9], [50, 50, 60, 60]]) == pytest.approx(0.9)
    np.testing.assert_allclose(average_recall_from_iou([[0.7], [0.49], [0.95]]), [0.5, 0.0, 1.0])
    assert average_recall([[0, 0, 1, 1]], np.zeros((0, 4))) == 0.0
    assert np.isnan(average_recall(np.zeros((0, 4)), [[0, 0, 1, 1]]))


def test_pck_and_oks_hand_worked():
    gt = np.array([[0, 0], [10, 0], [0, 10]], float)
    pred = gt + np.array([[1, 0], [0, 6], [3, 4]])  # distances 1, 6, 5
    assert pck(pred, gt, norm=10, alpha=0.5)[0] == pytest.approx(2 / 3)
    assert pck(pred, gt, norm=10, alpha=0.5, visible=[[1, 0, 1]])[0] == 1.0
    assert head_length(gt, 0, 1)[0] == 10
    assert box_size([[0, 0, 4, 7]])[0] == 7
    # OKS: e_i = d^2 / (2 s^2 k_i^2) with k_i = 2 sigma_i
    sig = np.array([0.1, 0.2, 0.3])
    area = 100.0
    d2 = np.array([1, 36, 25])
    ref = np.mean(np.exp(-d2 / (2 * area * (2 * sig) ** 2)))
    assert oks(pred, gt, [2, 2, 2], area, sigmas=sig)[0] == pytest.approx(ref)
    assert np.isnan(oks(pred, gt, [0, 0, 0], area, sigmas=sig)[0])


def test_classification_and_psnr():
    from skimage.metrics import peak_signal_noise_ratio

    assert accuracy(["a", "b", "b"], ["a", "b", "a"]) == pytest.approx(2 / 3)
    r = per_class_recall(["a", "b", "b"], ["a", "b", "a"])
    assert r["a"] == 1 and r["b"] == 0.5
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    y = np.clip(x.astype(int) + rng.integers(-9, 10, x.shape), 0, 255).astype(np.uint8)
    assert psnr(y, x) == pytest.approx(peak_signal_noise_ratio(x, y, data_range=255))
    assert psnr(x, x) == np.inf


def test_recall_matrix_and_od_worked_example():
    rm = recall_matrix(["x", "x", "y", "y"], ["x", "y", "y", "y"], ["g1", "g2", "g1", "g2"])
    assert rm.loc["x", "g1"] == 1 and rm.loc["x", "g2"] == 0 and rm.loc["y", "g2"] == 1
    od, ids = overall_disparity(pd.DataFrame([[.9, .8, .6], [.5, .5, .5], [.7, .35, .7]]))
    assert od == pytest.approx(0.157407, abs=1e-6)
    np.testing.assert_allclose(ids, [0.2222, 0, 0.25], atol=1e-4)
    od0, _ = overall_disparity(pd.DataFrame([[0.0, 0.0], [0.5, 0.5]]))
    assert od0 == 0.0


def test_tar_at_far_hand_worked_and_by_brute_force():
    imp = np.arange(1000) / 1000.0  # 0.000 .. 0.999
    gen = np.array([0.5, 0.9985, 1.2])
    s = np.r_[imp, gen]
    g = np.r_[np.zeros(1000, bool), np.ones(3, bool)]
    r = tar_at_far(s, g, far=0.001)
    # 1 false accept allowed: threshold = 2nd largest impostor 0.998, accept > 0.998
    assert r.threshold == pytest.approx(0.998) and r.far == pytest.approx(0.001)
    assert r.tar == pytest.approx(2 / 3)
    rng = np.random.default_rng(4)
    s = rng.normal(size=3000)
    g = rng.random(3000) < 0.2
    s[g] += 2
    r = tar_at_far(s, g, far=0.01)
    cands = np.sort(np.r_[s[~g], -np.inf])
    ok = [t for t in cands if np.mean(s[~g] > t) <= 0.01]
    best = min(ok)  # brute force: lowest threshold meeting the FAR
    assert r.threshold == best and r.tar == np.mean(s[g] > best)
    by = tar_at_far_by_group(s, g, np.where(np.arange(3000) % 2, "a", "b"), far=0.01)
    assert set(by.index) == {"a", "b"} and (by["far"] <= 0.01).all()


def test_pair_builders_against_brute_force():
    rng = np.random.default_rng(6)
    n = 60
    ident = rng.integers(0, 15, n)
    pron = rng.choice(["he", "she"], n)
    tone = rng.integers(1, 7, n)
    i, j = positive_pairs(ident)
    ref = {(a, b) for a in range(n) for b in range(a + 1, n) if ident[a] == ident[b]}
    assert set(zip(i.tolist(), j.tolist())) == ref and len(i) == len(ref)
    i, j = hard_negative_pairs(ident, pron, [f"Type {'I' * 0}{['I','II','III','IV','V','VI'][t - 1]}" for t in tone])
    ref = {(a, b) for a in range(n) for b in range(a + 1, n)
           if ident[a] != ident[b] and pron[a] == pron[b] and abs(tone[a] - tone[b]) <= 1}
    assert set(zip(i.tolist(), j.tolist())) == ref and len(i) == len(ref)
    e = rng.normal(size=(n, 8))
    sc = cosine_scores(e, i, j)
    ref_sc = [np.dot(e[a], e[b]) / np.linalg.norm(e[a]) / np.linalg.norm(e[b]) for a, b in zip(i[:20], j[:20])]
    np.testing.assert_allclose(sc[:20], ref_sc, rtol=1e-5)


def _square():
    m = np.zeros((10, 10), bool)
    m[2:6, 2:6] = True
    return m


def test_coco_reader_and_per_image_scores(tmp_path):
    from fairvision.io.coco import read_coco, read_coco_results
    from fairvision.metrics.coco_eval import per_image_scores

    gt = {"images": [{"id": 1, "file_name": "a/x1.jpg", "width": 10, "height": 10},
                     {"id": 2, "file_name": "x2.jpg", "width": 10, "height": 10}],
          "categories": [{"id": 1, "name": "person"}],
          "annotations": [
              {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], "segmentation": [[0, 0, 4, 0, 4, 4, 0, 4]], "area": 16},
              {"id": 2, "image_id": 2, "category_id": 1, "bbox": [2, 2, 4, 4],
               "segmentation": rle_encode(_square()), "area": 16}]}
    preds = [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 3.6], "score": 0.9, "segmentation": [[0, 0, 4, 0, 4, 3, 0, 3]]},
             {"image_id": 2, "category_id": 1, "bbox": [5, 5, 4, 4], "score": 0.8,
              "segmentation": rle_encode(_square(), compressed=False)}]
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "p.json").write_text(json.dumps(preds))
    g = read_coco(tmp_path / "gt.json")
    p = read_coco_results(tmp_path / "p.json", g)
    box = per_image_scores(g, p, "bbox")
    assert box["sample_id"].tolist() == ["x1", "x2"]
    np.testing.assert_allclose(box["average_recall"], [0.9, 0.0])  # IoU 0.9 and 1/7
    segm = per_image_scores(g, p, "segm")
    np.testing.assert_allclose(segm["average_recall"], [0.6, 1.0])  # IoU 12/16 and 1
    bad = dict(gt, annotations=[dict(gt["annotations"][0], bbox=[0, 0, 4])])
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(InputFileError, match=r"annotations\[0\].*bbox"):
        read_coco(tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text(json.dumps([{"image_id": 7, "bbox": [0, 0, 1, 1], "score": 1}]))
    with pytest.raises(InputFileError, match="not in the ground truth"):
        read_coco_results(tmp_path / "bad2.json", g)


def test_audit_verification_matches_direct_computation():
    from fairvision.audits.model import audit_verification

    rng = np.random.default_rng(8)
    n_id, per = 40, 3
    ident = np.repeat(np.arange(n_id), per)
    centres = rng.normal(size=(n_id, 16))
    noise = np.where(np.repeat(np.arange(n_id) % 2, per)[:, None] == 1, 0.9, 0.3)  # odd identities noisier
    emb = centres[ident] + noise * rng.normal(size=(n_id * per, 16))
    df = pd.DataFrame({"subject_id": ident.astype(str), "grp": np.where(ident % 2, "noisy", "clean"),
                       "pronoun": np.where(ident < 20, "he", "she"), "tone": (ident % 6) + 1})
    res = audit_verification(df, emb, "grp", far=0.01, pronoun_col="pronoun", tone_col="tone")
    assert res.loc["clean", "tar"] > res.loc["noisy", "tar"]
    # direct: pairs with both ends in "clean"
    i, j = positive_pairs(df.subject_id)
    ni, nj = hard_negative_pairs(df.subject_id, df.pronoun, df.tone)
    keep_p = (df.grp.to_numpy()[i] == "clean") & (df.grp.to_numpy()[j] == "clean")
    keep_n = (df.grp.to_numpy()[ni] == "clean") & (df.grp.to_numpy()[nj] == "clean")
    s = np.r_[cosine_scores(emb, i[keep_p], j[keep_p]), cosine_scores(emb, ni[keep_n], nj[keep_n])]
    g = np.r_[np.ones(keep_p.sum(), bool), np.zeros(keep_n.sum(), bool)]
    ref = tar_at_far(s, g, far=0.01)
    assert res.loc["clean", "tar"] == pytest.approx(ref.tar)
    assert res.loc["clean", "n_genuine"] == keep_p.sum() and res.loc["clean", "n_identities"] == 20


def test_polygon_matches_matplotlib_point_in_polygon():
    from matplotlib.path import Path

    rng = np.random.default_rng(9)
    ang = np.sort(rng.random(9)) * 2 * np.pi
    rad = rng.uniform(5, 14, 9)
    xy = np.c_[16 + rad * np.cos(ang), 15 + rad * np.sin(ang)]
    m = polygons_to_mask([xy.ravel().tolist()], 30, 32)
    yy, xx = np.mgrid[0:30, 0:32]
    ref = Path(xy).contains_points(np.c_[xx.ravel() + 0.5, yy.ravel() + 0.5]).reshape(30, 32)
    np.testing.assert_array_equal(m, ref)


def test_od_bootstrap_matches_explicit_resampling():
    from fairvision.stats.multiclass import overall_disparity_ci
    from fairvision.stats.resample import cluster_bootstrap_weights

    rng = np.random.default_rng(10)
    n = 300
    subj = np.repeat(np.arange(100), 3)
    yt = rng.integers(0, 3, n)
    yp = np.where(rng.random(n) < 0.7, yt, rng.integers(0, 3, n))
    g = rng.choice(["a", "b"], 100)[subj]
    res = overall_disparity_ci(yt, yp, g, subjects=subj, n_boot=50, seed=3)
    w = cluster_bootstrap_weights(100, 50, 3)
    reps = []
    for b in range(50):  # explicit resample: repeat each subject's rows w times
        rows = np.repeat(np.arange(n), w[b, subj].astype(int))
        od, _ = overall_disparity(recall_matrix(yt[rows], yp[rows], g[rows]))
        reps.append(od)
    assert res.ci_low == pytest.approx(np.quantile(reps, 0.025))
    assert res.ci_high == pytest.approx(np.quantile(reps, 0.975))

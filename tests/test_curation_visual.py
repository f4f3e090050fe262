"""Visual statistics (docs/METHODS.md §13.3): hand-worked shape statistics, a planted group difference, the CLI
and the built-in models on real portraits."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy.spatial import ConvexHull

from fairvision.audits.curation.visual import audit_visual, instance_statistics
from fairvision.audits.curation.visual_models import coco_from_models
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.datasets.demo import load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.coco import read_coco
from fairvision.metrics import shape


def test_box_statistics_by_hand():
    # image 200 x 100, box x=50, y=25, w=100, h=50: centred, a quarter of the image, twice as wide as high
    b = [[50, 25, 100, 50], [0, 0, 20, 10]]
    assert shape.box_area_ratio(b, 200, 100) == pytest.approx([0.25, 200 / 20000])
    assert shape.box_aspect_ratio(b) == pytest.approx([2.0, 2.0])
    # second centre (10, 5); image centre (100, 50): distance sqrt(90² + 45²) over half the diagonal sqrt(200²+100²)/2
    assert shape.centre_distance(b, 200, 100) == pytest.approx([0.0, np.hypot(90, 45) / (np.hypot(200, 100) / 2)])
    assert shape.centre_distance([[0, 0, 0, 0]], 200, 100)[0] == pytest.approx(1.0)  # centre in the corner
    assert shape.box_centres(b, 200, 100) == pytest.approx(np.array([[0.5, 0.5], [0.05, 0.05]]))


def test_c_shaped_mask_concavity_by_hand():
    # a 10 x 10 square with a 4 x 6 notch cut from its right side: area 76, hull the full square (100)
    m = np.zeros((14, 14), bool)
    m[2:12, 2:12] = True
    m[5:9, 6:12] = False
    assert shape.mask_area_ratio(m) == pytest.approx(76 / 196)
    assert shape.mask_concavity(m) == pytest.approx(1 - 76 / 100)
    full = np.zeros((5, 7), bool)
    full[1:4, 2:6] = True
    assert shape.mask_concavity(full) == 0.0
    # staircase of 10 pixels; hull (0,0),(1,0),(4,3),(4,4),(0,4): shoelace (0 + 3 + 4 + 16 + 0) / 2 = 11.5
    tri = np.tril(np.ones((4, 4), bool))
    assert shape.mask_concavity(tri) == pytest.approx(1 - 10 / 11.5)
    assert np.isnan(shape.mask_concavity(np.zeros((3, 3), bool)))


def test_convex_hull_against_scipy():
    rng = np.random.default_rng(1)
    for _ in range(50):
        pts = rng.integers(0, 25, size=(rng.integers(4, 80), 2)).astype(float)
        if np.linalg.matrix_rank(pts - pts[0]) < 2:
            continue
        assert shape.polygon_area(shape.convex_hull(pts)) == pytest.approx(ConvexHull(pts).volume)


def test_keypoint_spread_and_visibility_by_hand():
    # three labelled keypoints at the corners of a 3-4-5 triangle, one unlabelled; image 30 x 40 (diagonal 50)
    kp = np.array([[0, 0, 2], [3, 0, 2], [0, 4, 1], [9, 9, 0]], float)
    assert shape.keypoint_spread(kp, 30, 40)[0] == pytest.approx((3 + 4 + 5) / 3 / 50)
    assert shape.visible_fraction(kp)[0] == pytest.approx(2 / 4)
    assert np.isnan(shape.keypoint_spread(np.array([[1, 1, 2], [0, 0, 0]], float), 10, 10)[0])


def _planted(tmp_path, n=40):
    rng = np.random.default_rng(0)
    images, anns, rows = [], [], []
    for i in range(n):
        g = "near" if i % 2 == 0 else "far"
        s = 0.6 if g == "near" else 0.3
        w, h = 200 * s * rng.uniform(0.9, 1.1), 100 * s * rng.uniform(0.9, 1.1)
        x, y = 100 - w / 2 + rng.normal(0, 5), 50 - h / 2 + rng.normal(0, 5)
        images.append({"id": i, "file_name": f"im{i}.jpg", "width": 200, "height": 100})
        anns.append({"id": i + 1, "image_id": i, "category_id": 1, "bbox": [x, y, w, h],
                     "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
                     "keypoints": [x + 1, y + 1, 2, x + w - 1, y + h - 1, 2, x + w / 2, y + h / 2, 1]})
        rows.append({"sample_id": f"im{i}", "subject_id": f"s{i}", "distance": g})
    (tmp_path / "ann.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                   "categories": [{"id": 1, "name": "person"}]}))
    pd.DataFrame(rows).to_csv(tmp_path / "samples.csv", index=False)
    return tmp_path / "ann.json", tmp_path / "samples.csv", pd.DataFrame(rows)


def test_instance_statistics_match_metrics(tmp_path):
    ann, _, _ = _planted(tmp_path, 6)
    gt = read_coco(ann)
    inst = instance_statistics(gt)
    b = np.array(gt.annotations["bbox"].tolist())
    assert inst["box_area_ratio"].to_numpy() == pytest.approx(b[:, 2] * b[:, 3] / 20000)
    assert inst["visible_fraction"].to_numpy() == pytest.approx(np.full(6, 2 / 3))


def test_planted_group_difference_is_found(tmp_path):
    ann, _, samples = _planted(tmp_path)
    res = audit_visual(samples, read_coco(ann), ["distance"], settings=AuditSettings(min_subjects=5, n_boot=100))
    om = res.omnibus.set_index("metric")
    assert om.loc["person.box_area_ratio", "significant"]
    assert om.loc["person.mask_area_ratio", "significant"]
    assert not om.loc["person.aspect_ratio", "significant"]  # same shape in both groups
    t = res.groups[("person.box_area_ratio", "distance")]
    assert t.loc["near", "median"] > 3 * t.loc["far", "median"]
    # counts: annotations and images (one annotation per image here), 20 of each per group
    assert "n_samples" not in t.columns
    assert t["n_annotations"].tolist() == [20, 20] and t["n_images"].tolist() == [20, 20]
    assert (t["q25"] <= t["median"]).all() and (t["median"] <= t["q75"]).all()
    # centres heat map: every box centre is near the middle of the image
    hm = res.heatmap("person centres")
    assert hm.sum() == pytest.approx(1.0) and hm[8:12, 8:12].sum() > 0.9
    assert res.heatmap("person centres", "distance", "near").sum() == pytest.approx(1.0)
    assert res.quantities()["omnibus_significant"] >= 2


def test_cli_end_to_end(tmp_path):
    ann, samples, _ = _planted(tmp_path)
    out = tmp_path / "rep"
    rc = main(["curate", "visual", "--coco", str(ann), "--samples", str(samples), "-a", "distance",
               "--min-subjects", "5", "--n-boot", "50", "-o", str(out)])
    assert rc == 0
    assert (out / "report.html").exists() and (out / "instances.csv").exists()
    rep = json.loads((out / "report.json").read_text())
    assert any("box_area_ratio" in f["sentence"] for f in rep.get("findings", []))
    rc = main(["curate", "visual", "--coco", str(ann), "--samples", str(samples), "-a", "distance",
               "--min-subjects", "5", "--n-boot", "0", "-o", str(tmp_path / "r2"), "--fail-if", "omnibus_significant>0"])
    assert rc == 1
    assert main(["curate", "visual", "--coco", str(ann), "--samples", str(samples), "-a", "nope",
                 "-o", str(tmp_path / "r3")]) == 2


def test_built_in_models_on_portraits():
    data = load_portraits().head(3)
    gt, failed = coco_from_models(data)
    assert failed.empty
    cats = gt.annotations["category_id"].to_numpy()
    assert (cats == 2).sum() >= 3 and (cats == 1).sum() == 3  # a face in every portrait, one person mask each
    res = audit_visual(data, gt, settings=AuditSettings(n_boot=0))
    ov = res.overall
    # portraits: the face fills a few percent to a third of the frame, and is upright and near the centre
    assert 0.01 < ov.loc["face.box_area_ratio", "median"] < 0.4
    assert ov.loc["face.centre_distance", "median"] < 0.5
    assert 0.1 < ov.loc["person.mask_area_ratio", "median"] < 0.95
    assert 0 <= ov.loc["person.concavity", "median"] < 0.5
    # the face finder's boxes follow the face outline (forehead to chin): taller than wide, and not constant
    assert 0.5 < ov.loc["face.aspect_ratio", "median"] < 1.0
    assert "face.aspect_ratio" in res.statistics and not res.left_out


# -- the Kruskal-Wallis omnibus test (stats.groupwise.kruskal_test) ------------------------------------------------

def test_kruskal_by_hand_and_against_scipy():
    from scipy import stats as sps

    from fairvision.stats import kruskal_test

    # a = 1, 2, 3 and b = 4, 5, 6: rank sums 6 and 15, H = 12 / (6 * 7) * (36 / 3 + 225 / 3) - 3 * 7 = 27 / 7
    res = kruskal_test([4, 1, 5, 2, 6, 3], ["b", "a", "b", "a", "b", "a"])
    assert res.statistic == pytest.approx(27 / 7) and res.df == 1 and res.n == 6
    assert res.pvalue == pytest.approx(sps.chi2.sf(27 / 7, 1))
    # ties: a = 1, 2, 2 and b = 2, 3, 3; ranks 1, 3, 3 | 3, 5.5, 5.5; rank sums 7 and 14
    # H0 = 12 / 42 * (49 + 196) / 3 - 21 = 7 / 3; tie blocks of 3 and 2: C = 1 - (24 + 6) / 210 = 6 / 7
    res = kruskal_test([1, 2, 2, 2, 3, 3], [0, 0, 0, 1, 1, 1])
    assert res.statistic == pytest.approx(7 / 3 / (6 / 7))
    # three groups with two degrees of freedom: the p-value is exp(-H / 2)
    res = kruskal_test([1, 2, 3, 4, 5, 6, 7, 8, 9], np.repeat(["x", "y", "z"], 3))
    assert res.df == 2 and res.pvalue == pytest.approx(np.exp(-res.statistic / 2))
    rng = np.random.default_rng(4)
    for _ in range(30):  # rounded values: many ties; NaN values and empty labels are left out
        k = int(rng.integers(2, 6))
        x = np.round(rng.normal(size=int(rng.integers(k + 2, 60))), int(rng.integers(0, 2)))
        g = rng.integers(0, k, size=x.size)
        g[:k] = np.arange(k)
        x[rng.random(x.size) < 0.1] = np.nan
        ok = ~np.isnan(x)
        samples = [x[ok & (g == j)] for j in range(k) if (ok & (g == j)).any()]
        if len(samples) < 2 or np.unique(x[ok]).size < 2:
            continue
        ref = sps.kruskal(*samples)
        got = kruskal_test(x, g)
        assert got.statistic == pytest.approx(ref.statistic, rel=1e-10)
        assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        assert got.df == len(samples) - 1
    same = kruskal_test([2.0, 2.0, 2.0, 2.0], [0, 0, 1, 1])  # scipy raises: H is undefined
    assert np.isnan(same.statistic) and np.isnan(same.pvalue)
    with pytest.raises(FairvisionError, match="at least 2 groups"):
        kruskal_test([1.0, 2.0, np.nan], ["a", "a", "b"])
    with pytest.raises(FairvisionError, match="3 values but 2"):
        kruskal_test([1.0, 2.0, 3.0], ["a", "b"])


# -- the built-in models' annotations in the results store (stage visual_models) -----------------------------------

def _no_models(*_a, **_k):
    raise AssertionError("ran the models on an image that is in the store")


def test_built_in_models_store(tmp_path, monkeypatch):
    from fairvision.audits.curation import visual_models
    from fairvision.io.store import ResultsStore

    data = load_portraits().head(2).assign(subject_id=["p1", "p2"])
    store = ResultsStore(tmp_path / "store")
    calls = []
    real = visual_models.measure_image

    def counted(path, params=None):
        calls.append(path)
        return real(path, params)

    monkeypatch.setattr(visual_models, "measure_image", counted)
    gt1, f1 = coco_from_models(data, store=store)
    assert len(calls) == 2 and not gt1.images["from_cache"].any() and f1.empty
    rows = store.query(f"SELECT subject_id, payload FROM {visual_models.STAGE} ORDER BY subject_id")
    assert rows["subject_id"].tolist() == ["p1", "p2"]
    assert all(isinstance(json.loads(p)["mask"]["counts"], str) for p in rows["payload"])  # compressed RLE
    monkeypatch.setattr(visual_models, "measure_image", _no_models)
    gt2, f2 = coco_from_models(data, store=store)
    assert gt2.images["from_cache"].all() and f2.empty
    pd.testing.assert_frame_equal(gt1.images.drop(columns="from_cache"), gt2.images.drop(columns="from_cache"))
    pd.testing.assert_frame_equal(gt1.annotations, gt2.annotations)
    no_boot = AuditSettings(n_boot=0)
    a1, a2 = audit_visual(data, gt1, settings=no_boot), audit_visual(data, gt2, settings=no_boot)
    pd.testing.assert_frame_equal(a1.instances, a2.instances)
    # a changed model parameter is a different key: the models run again
    monkeypatch.setattr(visual_models, "measure_image", counted)
    calls.clear()
    gt3, _ = coco_from_models(data, store=store, params={"face_min_confidence": 0.6})
    assert len(calls) == 2 and not gt3.images["from_cache"].any()
    with pytest.raises(FairvisionError, match="unknown model parameter"):
        coco_from_models(data, store=store, params={"nope": 1})


def test_cli_built_in_models_store(tmp_path, monkeypatch):
    import os

    from fairvision.audits.curation import visual_models

    data = load_portraits().head(2)
    data[["sample_id", "image_path"]].to_csv(tmp_path / "s.csv", index=False)
    base = ["curate", "visual", "--samples", str(tmp_path / "s.csv"), "--n-boot", "0"]
    assert main(base + ["-o", str(tmp_path / "o1"), "--store", str(tmp_path / "st")]) == 0
    assert list((tmp_path / "st" / visual_models.STAGE).glob("part-*.parquet"))
    real = visual_models.measure_image
    monkeypatch.setattr(visual_models, "measure_image", _no_models)
    assert main(base + ["-o", str(tmp_path / "o2"), "--store", str(tmp_path / "st")]) == 0
    assert (tmp_path / "o1" / "instances.csv").read_bytes() == (tmp_path / "o2" / "instances.csv").read_bytes()
    monkeypatch.setattr(visual_models, "measure_image", real)  # not undo(): that also resets conftest's store
    assert main(base + ["-o", str(tmp_path / "o3"), "--no-store"]) == 0
    assert not os.path.exists(os.environ["FAIRVISION_STORE"])  # conftest's per-test store: nothing written


def _aspect_shift(tmp_path, shift, n=40):
    """Boxes of random area and position; group "a" has aspect ratios wider by ``shift``."""
    rng = np.random.default_rng(0)
    images, anns, rows = [], [], []
    for i in range(n):
        g = "a" if i % 2 == 0 else "b"
        area = 4000 * rng.uniform(0.8, 1.2)
        ar = rng.uniform(0.6, 1.0) + (shift if g == "a" else 0)
        w = np.sqrt(area * ar)
        h = area / w
        x, y = 100 - w / 2 + rng.normal(0, 10), 100 - h / 2 + rng.normal(0, 10)
        images.append({"id": i, "file_name": f"im{i}.jpg", "width": 200, "height": 200})
        anns.append({"id": i + 1, "image_id": i, "category_id": 1, "bbox": [x, y, w, h]})
        rows.append({"sample_id": f"im{i}", "subject_id": f"s{i}", "g": g})
    (tmp_path / "ann.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                   "categories": [{"id": 1, "name": "person"}]}))
    return read_coco(tmp_path / "ann.json"), pd.DataFrame(rows)


def test_pairwise_tests_are_corrected_across_the_audit(tmp_path):
    """Two groups: the old within-table correction is none, so aspect ratio's p = 0.024 was a "significant" pair
    while its Kruskal-Wallis test (corrected across the 3 statistics) was not. Audit-wide Holm over the 3
    pairwise tests (by hand: smallest p x 3) leaves it not significant, in agreement with the omnibus."""
    from scipy.stats import mannwhitneyu

    gt, samples = _aspect_shift(tmp_path, 0.02)
    res = audit_visual(samples, gt, ["g"], settings=AuditSettings(min_subjects=5, n_boot=0))
    pw = res.pairwise[("person.aspect_ratio", "g")].iloc[0]
    ar = res.instances.groupby("g")["person.aspect_ratio"].apply(list)
    p = mannwhitneyu(ar["a"], ar["b"], alternative="two-sided").pvalue  # independent raw p-value
    assert pw["pvalue"] == pytest.approx(p, rel=1e-6) and 0.05 / 3 < p < 0.05
    assert pw["pvalue_adjusted_table"] == pytest.approx(p)  # the old rule: flagged
    raw = sorted(float(t["pvalue"].iloc[0]) for t in res.pairwise.values())
    assert raw[0] == pytest.approx(p)
    assert pw["pvalue_adjusted"] == pytest.approx(min(1.0, 3 * p))  # Holm, smallest of 3
    assert not pw["significant"]
    assert not res.omnibus.set_index("metric").loc["person.aspect_ratio", "significant"]
    q = res.quantities()
    assert q["significant_pairs"] == 0 and q["person.aspect_ratio.disparity"] == 0
    assert len(res.model.top_disparities) == 0
    # a clear difference survives the audit-wide correction
    gt2, samples2 = _aspect_shift(tmp_path, 0.2)
    res2 = audit_visual(samples2, gt2, ["g"], settings=AuditSettings(min_subjects=5, n_boot=0))
    assert res2.pairwise[("person.aspect_ratio", "g")]["significant"].all()
    assert res2.quantities()["significant_pairs"] == 1 and len(res2.model.top_disparities) == 1

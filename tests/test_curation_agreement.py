"""Annotation agreement (docs/METHODS.md §13.4): Krippendorff's textbook example, Jaccard, IoU / OKS / Dice of
matched annotations by hand, a planted group difference, and the CLI."""

import json
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.curation.agreement import audit_agreement, match_annotations, read_annotated_coco
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import InputFileError
from fairvision.stats import jaccard, krippendorff_alpha, label_indicators

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", section C: 4 observers x 12 units
OBSERVERS = np.array([
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
]).T


@pytest.mark.parametrize("metric,expected", [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849),
                                             ("ratio", 0.797)])
def test_krippendorff_textbook_example(metric, expected):
    r = krippendorff_alpha(OBSERVERS, metric)
    assert r.estimate == pytest.approx(expected, abs=5e-4)
    assert r.n_units == 11 and r.n_values == 40  # unit 12 has one value: not pairable


def test_krippendorff_nominal_by_brute_force_pairs():
    # alpha = 1 - D_o / D_e from every ordered pair of values within units (weights 1 / (m_u - 1))
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(15, 4)).astype(float)
    x[rng.random(x.shape) < 0.2] = NAN
    obs = exp_pairs = 0.0
    vals = []
    for row in x:
        v = row[~np.isnan(row)]
        if len(v) < 2:
            continue
        vals.extend(v)
        for i in range(len(v)):
            for j in range(len(v)):
                if i != j:
                    obs += (v[i] != v[j]) / (len(v) - 1)
    vals = np.array(vals)
    n = len(vals)
    exp_pairs = sum(vals[i] != vals[j] for i in range(n) for j in range(n) if i != j) / (n - 1)
    assert krippendorff_alpha(x).estimate == pytest.approx(1 - obs / exp_pairs)
    assert krippendorff_alpha(pd.DataFrame(x).replace({0.0: "a", 1.0: "b", 2.0: "c"})).estimate == pytest.approx(1 - obs / exp_pairs)


def test_krippendorff_edge_cases_and_bootstrap():
    assert krippendorff_alpha([["a", "a"], ["b", "b"], ["a", None]]).estimate == 1.0
    assert np.isnan(krippendorff_alpha([["a", "a"], ["a", "a"]]).estimate)  # no variation
    r = krippendorff_alpha(OBSERVERS, n_boot=300, seed=1)
    assert r.ci_low < r.estimate < r.ci_high


def test_jaccard_by_hand():
    a, vocab = label_indicators([["black", "long"], "curly", None, ["x"]])
    b, _ = label_indicators([["black"], "curly", None, ["y"]], vocab + ["y"])
    a = np.pad(a, ((0, 0), (0, 1)))
    assert jaccard(a, b) == pytest.approx([0.5, 1.0, 1.0, 0.0])


def _coco(tmp_path, n_img=24, seed=0):
    """Three annotators (two of vendor v1, one of v2) on every image; group 'hard' images are annotated
    with six times the jitter."""
    rng = np.random.default_rng(seed)
    images, anns, rows, k = [], [], [], 0
    for i in range(n_img):
        g = "easy" if i % 2 == 0 else "hard"
        images.append({"id": i, "file_name": f"im{i}.jpg", "width": 100, "height": 100})
        rows.append({"sample_id": f"im{i}", "subject_id": f"s{i}", "grp": g})
        for a, vend in (("A", "v1"), ("B", "v1"), ("C", "v2")):
            jit = 0.5 if g == "easy" else 3
            x, y, w, h = 20 + rng.normal(0, jit), 20 + rng.normal(0, jit), 40 + rng.normal(0, jit), 50 + rng.normal(0, jit)
            kp = sum(([30 + q + rng.normal(0, jit), 40 + rng.normal(0, jit), 2] for q in range(17)), [])
            k += 1
            anns.append({"id": k, "image_id": i, "category_id": 1, "bbox": [x, y, w, h], "keypoints": kp,
                         "area": w * h, "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
                         "annotator_id": a, "vendor": vend,
                         "attributes": {"pose": "front" if a != "C" or i % 3 else "side"}})
    p = tmp_path / "ann.json"
    p.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]}))
    s = tmp_path / "samples.csv"
    pd.DataFrame(rows).to_csv(s, index=False)
    return p, s


def test_matched_pair_measures_by_hand(tmp_path):
    # two annotators, one person each: boxes [0,0,10,10] and [5,0,10,10] -> IoU 50/150;
    # masks the same squares -> Dice 2*50/200; three keypoints, one off by d=2 -> OKS by hand
    sig = np.full(17, 0.1)
    kp_a = [float(v) for q in range(17) for v in (q, q, 2)]
    kp_b = list(kp_a)
    kp_b[0] += 2.0
    anns = [{"id": 1, "image_id": 0, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100.0, "keypoints": kp_a,
             "segmentation": [[0, 0, 10, 0, 10, 10, 0, 10]], "annotator_id": "a"},
            {"id": 2, "image_id": 0, "category_id": 1, "bbox": [5, 0, 10, 10], "area": 100.0, "keypoints": kp_b,
             "segmentation": [[5, 0, 15, 0, 15, 10, 5, 10]], "annotator_id": "b"},
            {"id": 3, "image_id": 0, "category_id": 1, "bbox": [60, 60, 10, 10], "annotator_id": "b"}]
    p = tmp_path / "two.json"
    p.write_text(json.dumps({"images": [{"id": 0, "file_name": "x.jpg", "width": 20, "height": 20}],
                             "annotations": anns, "categories": [{"id": 1, "name": "person"}]}))
    pairs = match_annotations(read_annotated_coco(p), min_iou=0.3, sigmas=sig)
    m = pairs[pairs["matched"]].iloc[0]
    assert m["iou"] == pytest.approx(50 / 150)
    assert m["dice"] == pytest.approx(100 / 200)
    # area 100, k = 2 sigma = 0.2: exp(-d² / (2 s² k²)) = exp(-4 / (2 * 100 * 0.04)) = exp(-0.5) for one keypoint
    expected = (np.exp(-0.5) + 16) / 17
    assert m["oks"] == pytest.approx(expected)
    unmatched = pairs[~pairs["matched"]]
    assert len(unmatched) == 1 and unmatched.iloc[0]["annotator_a"] == "b"
    assert match_annotations(read_annotated_coco(p), min_iou=0.5)["matched"].sum() == 0  # IoU 1/3 < 0.5


def test_audit_tables_and_planted_group_difference(tmp_path):
    p, s = _coco(tmp_path)
    ann = read_annotated_coco(p, vendor_key="vendor")
    res = audit_agreement(pd.read_csv(s), ann, ["grp"], settings=AuditSettings(min_subjects=5, n_boot=100))
    assert set(map(tuple, res.by_pair[["annotator_a", "annotator_b"]].to_numpy())) == set(combinations("ABC", 2))
    # mean IoU per annotator pair equals the plain mean of its matched rows
    m = res.pairs[res.pairs["matched"]]
    ab = m[(m["annotator_a"] == "A") & (m["annotator_b"] == "B")]["iou"].mean()
    assert res.by_pair.set_index(["annotator_a", "annotator_b"]).loc[("A", "B"), "iou"] == pytest.approx(ab)
    # the hard group is annotated less consistently, and the audit says so
    t = res.by_group.groups[("iou", "grp")]
    assert t.loc["hard", "mean"] < t.loc["easy", "mean"]
    assert res.quantities()["group.iou.significant_pairs"] == 1
    # pose: A and B always 'front', C 'side' on every third image -> alpha from the same units by hand
    alpha = res.alpha.set_index(["attribute", "vendor"])
    units = np.array([["front", "front", "front" if i % 3 else "side"] for i in range(24)], dtype=object)
    assert alpha.loc[("pose", "all"), "estimate"] == pytest.approx(krippendorff_alpha(units).estimate)
    assert ("pose", "v1") in alpha.index
    assert set(res.by_vendor.groups[("iou", "vendor_pair")].index) == {"v1", "v1 | v2"}


def test_cli_end_to_end_and_bad_annotator_key(tmp_path, capsys):
    p, s = _coco(tmp_path)
    out = tmp_path / "rep"
    rc = main(["curate", "agreement", "--coco", str(p), "--vendor-key", "vendor", "--samples", str(s), "-a", "grp",
               "--min-subjects", "5", "--n-boot", "50", "-o", str(out)])
    assert rc == 0 and (out / "report.html").exists() and (out / "pairs.csv").exists()
    rc = main(["curate", "agreement", "--coco", str(p), "--annotator-key", "rater", "-o", str(tmp_path / "r2")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "'rater'" in err
    with pytest.raises(InputFileError):
        read_annotated_coco(p, "rater")
    assert main(["curate", "agreement", "--coco", str(p), "--n-boot", "0", "-o", str(tmp_path / "r3"),
                 "--fail-if", "mean_iou<0.99"]) == 1


def test_annotators_are_described_not_tested(tmp_path):
    # every match belongs to two annotators, so annotators' sets of matches overlap: a table of means with
    # subject-bootstrap CIs, no Mann-Whitney tests between annotators; the means by hand from the matches
    p, s = _coco(tmp_path)
    res = audit_agreement(pd.read_csv(s), read_annotated_coco(p, vendor_key="vendor"), ["grp"],
                          settings=AuditSettings(min_subjects=5, n_boot=200))
    ba = res.by_annotator
    assert isinstance(ba, pd.DataFrame) and not hasattr(ba, "pairwise")
    m = res.pairs[res.pairs["matched"]]
    t = ba[ba["measure"] == "iou"].set_index("annotator")
    for a in "ABC":
        mine = m[(m["annotator_a"] == a) | (m["annotator_b"] == a)]
        assert t.loc[a, "mean"] == pytest.approx(mine["iou"].mean())
        assert t.loc[a, "n_matches"] == len(mine) == 2 * 24 and t.loc[a, "n_subjects"] == 24
        assert t.loc[a, "ci_low"] < t.loc[a, "mean"] < t.loc[a, "ci_high"]
    assert res.quantities()["min_annotator_iou"] == pytest.approx(t["mean"].min())
    # groups of subjects are disjoint: they are still tested
    assert len(res.by_group.pairwise[("iou", "grp")]) == 1
    from fairvision.report.sections.curation_agreement import agreement_section
    sec = agreement_section(res)
    assert not any("annotator" in (f.quantity or "") for f in sec.findings)


def _chain_coco(tmp_path):
    """Image 0: A1 [0,0,10,10], B1 [2,0,10,10], C1 [4,0,10,10], A2 [5,0,10,10]. One-to-one matching gives
    A1-B1 (IoU 80/120; A2-B1 is 70/130), B1-C1 (80/120) and C1-A2 (90/110; A1-C1 is 60/140): one chain holding
    both of A's annotations, with A1 'x' and A2 'y'. Images 1-3: one clean unit each."""
    anns, k = [], 0
    def add(img, box, who, pose):
        nonlocal k
        k += 1
        anns.append({"id": k, "image_id": img, "category_id": 1, "bbox": box, "annotator_id": who,
                     "attributes": {"pose": pose}})
    add(0, [0, 0, 10, 10], "A", "x"), add(0, [2, 0, 10, 10], "B", "y"), add(0, [4, 0, 10, 10], "C", "y")
    add(0, [5, 0, 10, 10], "A", "y")
    units = [("x", "x", "x"), ("x", "y", "y"), ("y", "y", "y")]
    for i, u in enumerate(units, start=1):
        for who, v in zip("ABC", u):
            add(i, [0, 0, 10, 10], who, v)
    p = tmp_path / "chain.json"
    p.write_text(json.dumps({"images": [{"id": i, "file_name": f"c{i}.jpg", "width": 20, "height": 20} for i in range(4)],
                             "annotations": anns, "categories": [{"id": 1, "name": "person"}]}))
    return p, np.array(units, dtype=object)


def test_alpha_leaves_out_a_chain_with_two_annotations_of_one_annotator(tmp_path):
    p, units = _chain_coco(tmp_path)
    ann = read_annotated_coco(p)
    pairs = match_annotations(ann)
    m = pairs[pairs["matched"]]
    assert {(r.ann_a, r.ann_b) for r in m[m["image_id"] == 0].itertuples()} == {(0, 1), (1, 2), (3, 2)}
    res = audit_agreement(None, ann, settings=AuditSettings(n_boot=0))
    a = res.alpha.set_index("attribute").loc["pose"]
    # the chain is left out (not silently reduced to one of A's two values) and counted
    assert a["n_units_dropped"] == 1 and a["n_units"] == 3
    assert a["estimate"] == pytest.approx(krippendorff_alpha(units).estimate)
    from fairvision.report.sections.curation_agreement import agreement_section
    notes = [b["text"] for b in agreement_section(res).blocks if b.get("type") == "note"]
    assert any("left out up to 1 unit" in t for t in notes)

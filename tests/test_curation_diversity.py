"""Diversity audit (docs/METHODS.md §13.1, §13.2): the Vendi score against its eigenvalue definition, its
intervals and rarefaction, the offline EfficientNet-Lite0 embedder on real photos, the masked variants, the
results store and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
from typer.testing import CliRunner

from fairvision.cli import EXIT_INPUT, app, main
from fairvision.datasets.demo import load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.stats.diversity import rarefied_vendi, vendi_ci, vendi_score, vendi_terms

GRACE = Path(__import__("matplotlib").get_data_path()) / "sample_data" / "grace_hopper.jpg"


def definition(x) -> float:
    """Vendi score straight from Friedman and Dieng's definition: eigenvalues of the n x n kernel K / n."""
    x = np.asarray(x, dtype=np.float64)
    x = x / np.sqrt((x * x).sum(axis=1))[:, None]
    k = np.einsum("id,jd->ij", x, x)  # cosine similarities, computed independently of the d x d path
    lam = scipy.linalg.eigh(k / len(x), eigvals_only=True)
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


# --------------------------------------------------------------------------- Vendi score


@pytest.mark.parametrize("n,d", [(7, 20), (20, 20), (60, 6), (150, 15)])
def test_vendi_equals_eigenvalue_definition(n, d):
    x = np.random.default_rng(n).normal(size=(n, d)) + 0.3
    assert vendi_score(x) == pytest.approx(definition(x), rel=1e-10)
    # float32 embeddings (as models write them) are multiplied in float32: same score to ~1e-6
    assert vendi_score(x.astype(np.float32)) == pytest.approx(definition(x), rel=1e-5)


def test_orthogonal_scores_n_and_duplicates_score_one():
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(40, 40)))
    scaled = q[:12] * np.arange(1, 13)[:, None]  # 12 orthogonal rows of different lengths
    assert vendi_score(scaled) == pytest.approx(12.0, rel=1e-10)
    assert vendi_score(np.tile(q[0] * 3.0, (25, 1))) == pytest.approx(1.0, abs=1e-10)
    # three distinct orthogonal images, each repeated 5 times: three effective images
    assert vendi_score(np.repeat(q[:3], 5, axis=0)) == pytest.approx(3.0, rel=1e-10)


def test_weights_are_duplicates():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 8))
    w = rng.integers(0, 4, 30)
    assert vendi_score(x, weights=w) == pytest.approx(definition(np.repeat(x, w, axis=0)), rel=1e-10)
    with pytest.raises(FairvisionError, match="weights"):
        vendi_score(x, weights=np.zeros(30))


@pytest.mark.parametrize("n,d", [(10, 30), (200, 12)])
def test_terms_average_to_log_score(n, d):
    x = np.random.default_rng(1).normal(size=(n, d))
    score, h = vendi_terms(x)
    assert score == pytest.approx(definition(x), rel=1e-10)
    assert np.exp(h.mean()) == pytest.approx(score, rel=1e-10)
    # orthogonal images: each term is log n
    _, h_orth = vendi_terms(np.eye(6))
    assert np.allclose(h_orth, np.log(6))


def test_interval_covers_population_value():
    """Low-dimensional population: VS converges, and the linearised subject bootstrap covers it."""
    rng = np.random.default_rng(0)
    scales = np.array([3.0, 2.0, 1.0, 0.6, 0.3])
    pop = vendi_score(rng.normal(size=(200_000, 5)) * scales)
    hits = 0
    for rep in range(40):
        x = rng.normal(size=(600, 5)) * scales
        res = vendi_ci(x, n_boot=300, seed=rep)
        assert res.ci_low <= res.estimate <= res.ci_high
        hits += res.ci_low <= pop <= res.ci_high
    assert hits >= 34  # nominal 95%: 38 of 40 expected


def test_interval_resamples_subjects():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(100, 4)) * [2.0, 1.0, 0.5, 0.2]
    x = np.repeat(base, 4, axis=0) + 0.01 * rng.normal(size=(400, 4))  # 100 subjects, 4 near-identical images each
    subjects = np.repeat(np.arange(100), 4)
    by_subject = vendi_ci(x, subjects, n_boot=500)
    by_image = vendi_ci(x, n_boot=500)
    assert by_subject.estimate == pytest.approx(vendi_score(x), rel=1e-10)
    assert (by_subject.ci_high - by_subject.ci_low) > 1.5 * (by_image.ci_high - by_image.ci_low)


def test_rarefied_vendi():
    rng = np.random.default_rng(4)
    q, _ = np.linalg.qr(rng.normal(size=(50, 50)))
    # subjects with three identical images each: one image per subject, so every draw is orthogonal
    x = np.repeat(q[:20], 3, axis=0)
    est = rarefied_vendi(x, np.repeat(np.arange(20), 3), size=8, n_draws=30)
    assert est.estimate == pytest.approx(8.0) and est.ci_low == pytest.approx(8.0)
    # size = all subjects, one image each: the whole set
    y = rng.normal(size=(15, 6))
    assert rarefied_vendi(y, size=15, n_draws=3).estimate == pytest.approx(definition(y), rel=1e-10)
    # groups of different sizes from one population: raw scores differ, rarefied ones agree
    small, big = rng.normal(size=(30, 40)), rng.normal(size=(300, 40))
    assert vendi_score(big) > 1.5 * vendi_score(small)
    r_small = rarefied_vendi(small, size=30, n_draws=20).estimate
    r_big = rarefied_vendi(big, size=30, n_draws=50).estimate
    assert r_big == pytest.approx(r_small, rel=0.05)
    with pytest.raises(FairvisionError, match="size"):
        rarefied_vendi(small, size=31)


# --------------------------------------------------------------------------- the embedder

torch = pytest.importorskip("torch")
image_embedder = pytest.importorskip("fairvision.vision.image_embedder")

# ImageNet classes a portrait may be taken for: clothing, accessories, people
PERSONISH = {399: "abaya", 400: "academic gown", 433: "bathing cap", 445: "bikini", 452: "bonnet", 457: "bow tie",
             459: "brassiere", 474: "cardigan", 515: "cowboy hat", 568: "fur coat", 578: "gown", 601: "hoopskirt",
             608: "jean", 610: "jersey", 614: "kimono", 617: "lab coat", 638: "maillot", 639: "maillot (tank suit)",
             643: "mask", 652: "military uniform", 655: "miniskirt", 678: "neck brace", 697: "pajama",
             735: "poncho", 775: "sarong", 785: "seat belt", 808: "sombrero", 824: "stole", 834: "suit",
             836: "sunglass", 837: "sunglasses", 841: "sweatshirt", 842: "swimming trunks", 869: "trench coat", 887: "vestment",
             903: "wig", 906: "Windsor tie", 981: "ballplayer", 982: "groom", 983: "scuba diver"}


@pytest.fixture(scope="module")
def embedder():
    return image_embedder.ImageEmbedder(batch_size=8, threads=2)


@pytest.fixture(scope="module")
def portraits():
    return load_portraits().head(8).reset_index(drop=True)


def test_weights_load_strictly():
    model = image_embedder.load_model()
    assert not model.training
    state = torch.load(image_embedder.weights_path(), map_location="cpu", weights_only=True)
    assert set(model.state_dict()) == set(state)
    del state["_blocks.3._depthwise_conv.weight"]
    with pytest.raises(RuntimeError, match="Missing key"):
        image_embedder.EfficientNetLite0().load_state_dict(state, strict=True)


def test_imagenet_predictions_are_sensible(embedder, portraits):
    # Grace Hopper in uniform (matplotlib's sample photo): top class 652, military uniform
    logits = embedder.logits([read_image(GRACE)])
    assert int(np.argmax(logits[0])) == 652
    # portraits: clothing and accessories dominate the top 5 (one photo of a person with a camera gets camera
    # classes: 732 Polaroid camera, 759 reflex camera)
    top5 = np.argsort(-embedder.logits([read_image(p) for p in portraits["image_path"]]), axis=1)[:, :5]
    personish = [sum(int(c) in PERSONISH for c in row) for row in top5]
    assert sum(k >= 2 for k in personish) >= 6, top5


def test_embeddings_deterministic_and_flip_invariant(embedder, portraits):
    imgs = [read_image(p) for p in portraits["image_path"]]
    a = embedder.embed(imgs)
    assert a.shape == (8, 1280) and a.dtype == np.float32
    np.testing.assert_array_equal(a, embedder.embed(imgs))
    one = image_embedder.ImageEmbedder(batch_size=1, threads=1).embed(imgs[:2])
    np.testing.assert_allclose(one, a[:2], atol=1e-4)
    flipped = embedder.embed([im[:, ::-1] for im in imgs])
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    same = np.sum(unit(a) * unit(flipped), axis=1)
    others = unit(a) @ unit(a).T
    assert same.min() > 0.9
    assert same.mean() > others[~np.eye(8, dtype=bool)].mean() + 0.1


# --------------------------------------------------------------------------- the audit

from fairvision.audits.curation.diversity import Rarefaction, audit_diversity  # noqa: E402
from fairvision.audits.curation.diversity_embedding import EmbeddingOptions, embed_variants  # noqa: E402
from fairvision.audits.settings import AuditSettings  # noqa: E402
from fairvision.vision.image_edits import background_black, person_black  # noqa: E402
from fairvision.io.store import ResultsStore  # noqa: E402
from fairvision.report.sections.curation_diversity import diversity_section  # noqa: E402


def test_variants_use_the_mask(tmp_path, embedder, portraits):
    data = portraits.head(3).copy()
    masks = tmp_path / "masks"
    masks.mkdir()
    from PIL import Image

    m = np.zeros((500, 500), dtype=bool)
    m[100:450, 150:350] = True
    Image.fromarray((m * 255).astype(np.uint8)).save(masks / f"{data['sample_id'][0]}.png")
    data["x0"], data["y0"], data["x1"], data["y1"] = 50.0, 60.0, 300.0, 480.0
    emb, status = embed_variants(data, ("whole", "scene", "subject"),
                                 options=EmbeddingOptions(masks_dir=masks, box_cols=("x0", "y0", "x1", "y1")))
    src = status[status["variant"] == "scene"].set_index("sample_id")["mask_source"]
    assert list(src) == ["file", "box", "box"]
    img0, img1 = read_image(data["image_path"][0]), read_image(data["image_path"][1])
    box = np.zeros((500, 500), dtype=bool)
    box[60:480, 50:300] = True
    expected = embedder.embed([img0, person_black(img0, m), background_black(img0, m), person_black(img1, box)])
    np.testing.assert_allclose(emb["whole"][0], expected[0], atol=1e-4)
    np.testing.assert_allclose(emb["scene"][0], expected[1], atol=1e-4)
    np.testing.assert_allclose(emb["subject"][0], expected[2], atol=1e-4)
    np.testing.assert_allclose(emb["scene"][1], expected[3], atol=1e-4)


def test_audit_scores_and_store(tmp_path, portraits):
    data = portraits.copy()
    data["subject_id"] = [f"p{i // 2}" for i in range(8)]  # two photos per subject
    data["group"] = ["a"] * 4 + ["b"] * 4
    data["x0"], data["y0"], data["x1"], data["y1"] = 100.0, 50.0, 400.0, 500.0
    store = ResultsStore(tmp_path / "store")
    kw = dict(embedding=EmbeddingOptions(box_cols=("x0", "y0", "x1", "y1")), store=store,
              rarefaction=Rarefaction(n_draws=20), settings=AuditSettings(min_subjects=2, n_boot=200))
    res = audit_diversity(data, ["group"], **kw)
    s = res.scores.set_index(["variant", "attribute", "group"])
    assert len(s) == 9 and not res.status["from_cache"].any()
    for v in ("whole", "scene", "subject"):
        x = res.embeddings[v]
        assert s.loc[(v, "(all)", "(all)"), "vendi"] == pytest.approx(definition(x), rel=1e-6)
        assert s.loc[(v, "group", "a"), "vendi"] == pytest.approx(definition(x[:4]), rel=1e-6)
        row = s.loc[(v, "group", "b")]
        assert row["ci_low"] <= row["vendi"] <= row["ci_high"] and row["n_subjects"] == 2
        assert row["rarefy_size"] == 2 and 1 <= row["rarefied"] <= 2
    again = audit_diversity(data, ["group"], **kw)
    assert again.status["from_cache"].all()
    for v in res.embeddings:
        np.testing.assert_array_equal(again.embeddings[v], res.embeddings[v])
    q = res.quantities()
    assert "vendi.scene.group.a" in q and 0 < q["min_rarefied_ratio"] <= 1


def test_supplied_embeddings_and_low_diversity_flag():
    rng = np.random.default_rng(0)
    n = 120
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "g": np.repeat(["x", "y", "z"], 40)})
    q, _ = np.linalg.qr(rng.normal(size=(64, 64)))
    x = q[rng.integers(0, 64, n)] + 0.05 * rng.normal(size=(n, 64))
    x[80:] = q[rng.integers(0, 3, 40)] + 0.05 * rng.normal(size=(40, 64))  # group z: three looks only
    emb = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(x)})
    res = audit_diversity(data, ["g"], embeddings=emb, rarefaction=Rarefaction(n_draws=20),
                          settings=AuditSettings(n_boot=100))
    s = res.scores.set_index("group")
    assert res.variants == ("whole",)
    assert bool(s.loc["z", "low_diversity"]) and not s.loc[["x", "y"], "low_diversity"].any()
    assert s.loc["z", "rarefied"] < 0.5 * s.loc["x", "rarefied"]
    sec = diversity_section(res)
    assert [f.quantity for f in sec.findings] == ["rarefied.whole.g.z"] and sec.findings[0].severity == "high"
    with pytest.raises(FairvisionError, match="whole"):
        audit_diversity(data, ["g"], embeddings=emb, variants=("scene",))


def test_cli_end_to_end(tmp_path, portraits, capsys):
    data = portraits.copy()
    data["group"] = ["a", "b"] * 4
    samples = tmp_path / "samples.csv"
    data.to_csv(samples, index=False)
    out = tmp_path / "report"
    runner = CliRunner()
    args = ["curate", "diversity", str(samples), "-a", "group", "--min-subjects", "3", "--n-boot", "100",
            "--n-draws", "10", "--store", str(tmp_path / "store"), "-o", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    sec = next(s for s in report["sections"] if s["id"] == "curation_diversity")
    assert sec and (out / "tables").is_dir() and (out / "status.parquet").is_file()
    scores = pd.read_parquet(next((out / "tables").glob("*scores*.parquet")))
    assert set(scores["variant"]) == {"whole", "scene", "subject"}
    gated = runner.invoke(app, args + ["--fail-if", "min_rarefied_ratio<=1"])
    assert gated.exit_code == 1
    bad = ["curate", "diversity", str(samples), "-a", "group", "--variants", "faces", "-o", str(tmp_path / "bad")]
    assert main(bad) == EXIT_INPUT
    assert "faces" in capsys.readouterr().err and not (tmp_path / "bad" / "report.html").exists()


def test_cli_embeddings_with_explicit_masked_variants_is_refused(tmp_path, capsys):
    """--embeddings are of the whole images: an explicit request for scene/subject cannot be honoured and exits 2
    with one line (it used to be silently reduced to whole); the default and an explicit 'whole' are scored."""
    rng = np.random.default_rng(0)
    n = 30
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "g": np.repeat(["x", "y"], n // 2)})
    samples = tmp_path / "samples.csv"
    data.to_csv(samples, index=False)
    emb = tmp_path / "emb.npz"
    np.savez(emb, ids=data["sample_id"].to_numpy().astype(str), embeddings=rng.normal(size=(n, 8)))
    base = ["curate", "diversity", str(samples), "-a", "g", "--embeddings", str(emb), "--min-subjects", "3",
            "--n-boot", "20", "--n-draws", "5", "--n-null", "20"]
    for variants in ("whole,scene,subject", "scene", "whole,subject"):
        out = tmp_path / f"r_{variants.replace(',', '_')}"
        assert main(base + ["--variants", variants, "-o", str(out)]) == EXIT_INPUT
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--embeddings" in err and "whole" in err, err
        assert not (out / "report.html").exists()
    for extra in ([], ["--variants", "whole"]):
        out = tmp_path / f"ok{len(extra)}"
        assert main(base + extra + ["-o", str(out)]) == 0, capsys.readouterr().err
        scores = pd.read_parquet(next((out / "tables").glob("*scores*.parquet")))
        assert set(scores["variant"]) == {"whole"}


def test_groups_below_min_subjects_get_no_interval():
    """A group of 3 subjects (under the default 10) keeps its score but gets no interval and is flagged
    too_small; a group of 40 gets both. Person masks are counted in images, not (image, variant) rows."""
    from fairvision.audits.curation.diversity_embedding import mask_source_counts

    rng = np.random.default_rng(1)
    n = 43
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "g": ["big"] * 40 + ["tiny"] * 3})
    emb = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(rng.normal(size=(n, 16)))})
    res = audit_diversity(data, ["g"], embeddings=emb, rarefaction=Rarefaction(n_draws=10),
                          settings=AuditSettings(n_boot=100))
    s = res.scores.set_index("group")
    assert s.loc["tiny", "too_small"] and np.isfinite(s.loc["tiny", "vendi"])
    assert np.isnan(s.loc["tiny", "ci_low"]) and np.isnan(s.loc["tiny", "ci_high"])
    assert not s.loc["big", "too_small"] and s.loc["big", "ci_low"] <= s.loc["big", "vendi"] <= s.loc["big", "ci_high"]
    notes = " ".join(b["text"] for b in diversity_section(res).blocks if b["type"] == "note")
    assert "fewer than 10 subjects" in notes and "no interval" in notes
    status = pd.DataFrame({"sample_id": [f"s{i}" for i in range(4)] * 3,
                           "variant": ["whole"] * 4 + ["scene"] * 4 + ["subject"] * 4,
                           "mask_source": [""] * 4 + ["selfie", "selfie", "selfie", "box"] * 2})
    assert mask_source_counts(status) == {"selfie": 3, "box": 1}  # 4 images, not 8 rows

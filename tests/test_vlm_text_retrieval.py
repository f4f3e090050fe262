"""Text-to-image retrieval probe (docs/METHODS.md §12.5): ``audit_text_retrieval`` on planted embeddings checked
against a brute-force ranking and NDKL by hand, and ``fairvision audit vlm retrieval`` run for real, with the tiny
random CLIP embedding FairFace photos and the bundled neutral queries."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import cdist

from fairvision.audits.vlm.samples import SampleOptions
from fairvision.audits.vlm.text_retrieval import NEUTRAL_QUERIES, audit_text_retrieval
from fairvision.cli import main
from fairvision.errors import ParameterError

from test_ranking import _ndkl_by_hand  # noqa: E402  (tests/ is on sys.path)

HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None


def _planted(n=80, n_q=10, dim=16, seed=0):
    """Images whose group g = "b" lean towards the queries (planted), and an attribute h that nothing depends on."""
    rng = np.random.default_rng(seed)
    g = np.where(np.arange(n) % 2 == 0, "a", "b")
    h = rng.choice(["x", "y", "z"], size=n)
    queries = rng.normal(size=(n_q, dim))
    lean = queries.mean(axis=0)
    lean /= np.linalg.norm(lean)
    x = (rng.normal(size=(n, dim)) + 2.5 * (g == "b")[:, None] * lean[None, :]).astype(np.float32)
    data = pd.DataFrame({"sample_id": [f"s{i:03d}" for i in range(n)], "g": g, "h": h})
    text = pd.DataFrame({"label": [f"q{j}" for j in range(n_q)], "prompt": [f"query {j}" for j in range(n_q)],
                         "embedding": list(queries)})
    return data, x, text


def _frame(data, x):
    return pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(x)})


def test_planted_group_flagged_independent_attribute_not():
    data, x, text = _planted()
    res = audit_text_retrieval(data, _frame(data, x), text, ["g", "h"], k=10)
    # the ranking: brute-force cosine distances, the 10 nearest per query
    dist = cdist(np.stack(text["embedding"]), x.astype(np.float64), metric="cosine")
    want = np.argsort(dist, axis=1, kind="stable")[:, :10]
    got = res.top.pivot(index="query", columns="rank", values="sample_id").loc[text["prompt"]]
    assert (got.to_numpy() == data["sample_id"].to_numpy()[want]).all()
    np.testing.assert_allclose(res.top["similarity"], 1 - np.take_along_axis(dist, want, axis=1).ravel(), atol=1e-12)
    # NDKL of every query by hand against the face set's shares of g (0.5, 0.5)
    codes = (data["g"].to_numpy()[want] == "b").astype(int)
    pq = res.per_query[res.per_query["attribute"] == "g"]
    np.testing.assert_allclose(pq["ndkl"], [_ndkl_by_hand(list(c), [0.5, 0.5]) for c in codes], rtol=1e-12)
    gg = res.groups[res.groups["attribute"] == "g"].set_index("group")
    assert gg.loc["b", "share"] == pytest.approx(codes.mean())
    assert bool(gg.loc["b", "flagged"]) and gg.loc["b", "skew"] > 0.15
    hh = res.groups[res.groups["attribute"] == "h"]
    assert not hh["flagged"].any()
    q = res.quantities()
    assert q["n_flagged"] == float(res.groups["flagged"].sum()) and q["ndkl.g"] == pytest.approx(pq["ndkl"].mean())
    assert q["max_skew.g"] > 0 and "attention_ratio.h.x" in q


def test_intersections_rank_by_combined_groups_checked_by_hand():
    data, x, text = _planted(n=120, seed=3)
    res = audit_text_retrieval(data, _frame(data, x), text, ["g", "h"], k=12, max_k=2)
    assert list(res.rankings) == ["g", "h", "g × h"]
    dist = cdist(np.stack(text["embedding"]), x.astype(np.float64), metric="cosine")
    want = np.argsort(dist, axis=1, kind="stable")[:, :12]
    label = (data["g"] + " × " + data["h"]).to_numpy()
    present = [f"{a} × {b}" for a in ("a", "b") for b in ("x", "y", "z") if f"{a} × {b}" in set(label)]
    shares = np.array([np.mean(label == c) for c in present])
    codes = np.array([[present.index(v) for v in row] for row in label[want]])
    pq = res.per_query[res.per_query["attribute"] == "g × h"]
    np.testing.assert_allclose(pq["ndkl"], [_ndkl_by_hand(list(c), list(shares)) for c in codes], rtol=1e-12)
    gh = res.groups[res.groups["attribute"] == "g × h"].set_index("group")
    assert list(gh.index) == present
    for j, c in enumerate(present):
        assert gh.loc[c, "share"] == pytest.approx((codes == j).mean())
    # the planted group leans to the queries in every h: each b × h cell is over-represented, each a × h under
    assert (gh.loc[[c for c in present if c.startswith("b")], "skew"] > 0).all()
    assert "skew.g+h.b+x" in res.quantities()
    with pytest.raises(ParameterError):
        audit_text_retrieval(data, _frame(data, x), text, ["g"], max_k=0)


def test_uniform_desired_and_the_missing_rules():
    data, x, text = _planted()
    emb = _frame(data, x)
    res = audit_text_retrieval(data, emb, text, ["h"], k=5, desired="uniform", settings=None)
    np.testing.assert_allclose(res.groups["desired"], 1 / 3)
    blank = data.copy()
    blank.loc[[3, 7], "h"] = None
    with pytest.raises(Exception, match="row"):
        audit_text_retrieval(blank, emb, text, ["h"], k=5)
    dropped = audit_text_retrieval(blank, emb, text, ["g", "h"], k=5, samples=SampleOptions(missing="drop"))
    assert dropped.coverage.n_left_out == 2 and dropped.meta["n_samples"] == 78
    assert "no h value" in dropped.coverage.summary_line()
    kept = audit_text_retrieval(blank, emb, text, ["h"], k=5, samples=SampleOptions(missing="keep"))
    assert "(missing)" in set(kept.groups["group"]) and kept.coverage is None
    with pytest.raises(ParameterError, match="k"):
        audit_text_retrieval(data, emb, text, ["g"], k=81)
    with pytest.raises(ParameterError, match="desired"):
        audit_text_retrieval(data, emb, text, ["g"], desired="equal")


def test_cli_with_query_embeddings_and_a_gate(tmp_path, capsys):
    data, x, text = _planted()
    data.to_csv(tmp_path / "s.csv", index=False)
    np.savez(tmp_path / "img.npz", embeddings=x, ids=np.array(data["sample_id"].tolist()))
    text.to_parquet(tmp_path / "q.parquet")
    out = tmp_path / "rep"
    rc = main(["audit", "vlm", "retrieval", "--samples", str(tmp_path / "s.csv"), "--image-embeddings",
               str(tmp_path / "img.npz"), "--text-embeddings", str(tmp_path / "q.parquet"), "-a", "g", "-a", "h",
               "-k", "10", "--n-boot", "100", "--fail-if", "n_flagged>0", "-o", str(out)])
    assert rc == 1
    cap = capsys.readouterr().out
    assert "g: NDKL" in cap and "h: NDKL" in cap
    doc = json.loads((out / "report.json").read_text())
    assert [s["id"] for s in doc["sections"]][:2] == ["vlm-retrieval-g", "vlm-retrieval-h"]
    assert any("g = b" in f["sentence"] for f in doc["findings"])
    assert len(pd.read_parquet(out / "top.parquet")) == 100
    out2 = tmp_path / "rep2"
    rc = main(["audit", "vlm", "retrieval", "--samples", str(tmp_path / "s.csv"), "--image-embeddings",
               str(tmp_path / "img.npz"), "--text-embeddings", str(tmp_path / "q.parquet"), "-a", "g", "-a", "h",
               "-k", "10", "--n-boot", "100", "--max-k", "2", "--fail-if", "max_skew.g+h>5", "-o", str(out2)])
    assert rc == 0 and "g × h: NDKL" in capsys.readouterr().out
    doc = json.loads((out2 / "report.json").read_text())
    assert [s["id"] for s in doc["sections"]][:3] == ["vlm-retrieval-g", "vlm-retrieval-h", "vlm-retrieval-g-h"]


def test_cli_user_errors_exit_2(tmp_path, capsys):
    data, x, text = _planted()
    data.to_csv(tmp_path / "s.csv", index=False)
    np.savez(tmp_path / "img.npz", embeddings=x, ids=np.array(data["sample_id"].tolist()))
    text.to_parquet(tmp_path / "q.parquet")
    base = ["audit", "vlm", "retrieval", "--samples", str(tmp_path / "s.csv"), "--image-embeddings",
            str(tmp_path / "img.npz"), "-a", "g", "-o", str(tmp_path / "o")]
    assert main(base) == 2
    assert "--text-embeddings" in capsys.readouterr().err
    assert main([*base, "--text-embeddings", str(tmp_path / "q.parquet"), "-k", "500"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "80 images" in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--text-embeddings", str(tmp_path / "q.parquet"), "--desired", "equal"]) == 2


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch and transformers (the tiny random CLIP)")
def test_real_run_with_the_tiny_random_clip(tmp_path, capsys):
    from fairvision.datasets import load_demo
    from fairvision.vision.clip import TinyRandomCLIP

    df = load_demo().iloc[:30].reset_index(drop=True)
    df.loc[4, "gender"] = None
    df.to_csv(tmp_path / "s.csv", index=False)
    emb = tmp_path / "emb"
    assert main(["audit", "vlm", "embed", str(tmp_path / "s.csv"), "-o", str(emb), "--backend", "tiny-random",
                 "--probe", "gender", "--no-store", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "rep"
    rc = main(["audit", "vlm", "retrieval", "--samples", str(tmp_path / "s.csv"), "--image-embeddings",
               str(emb / "image_embeddings.npz"), "--backend", "tiny-random", "-a", "gender", "-a", "age", "-k", "6",
               "--missing", "drop", "--n-boot", "50", "-o", str(out)])
    assert rc == 0
    cap = capsys.readouterr()
    assert "warning: tiny-random" in cap.err
    assert "attribute lookup: 1 of 30 samples left out (no gender value: 1)" in cap.out
    # the ranking, recomputed from the stored image embeddings and the queries embedded independently
    z = np.load(emb / "image_embeddings.npz")
    keep = [i for i in range(30) if i != 4]
    t = TinyRandomCLIP(seed=0).encode_texts(list(NEUTRAL_QUERIES))
    dist = cdist(t.astype(np.float64), z["embeddings"][keep].astype(np.float64), metric="cosine")
    want = z["ids"][keep][np.argsort(dist, axis=1, kind="stable")[:, :6]]
    top = pd.read_parquet(out / "top.parquet")
    assert (top.pivot(index="query", columns="rank", values="sample_id").loc[list(NEUTRAL_QUERIES)].to_numpy()
            == want).mean() > 0.95  # float32 embeddings: a near tie may swap
    doc = json.loads((out / "report.json").read_text())
    ids = [s["id"] for s in doc["sections"]]
    assert {"vlm-retrieval-gender", "vlm-retrieval-age", "vlm-retrieval-coverage"} <= set(ids)
    assert "meaningless" in doc["meta"]["model note"]
    # queries embedded by another model than the images: said on stderr and in the report
    assert main(["audit", "vlm", "retrieval", "--samples", str(tmp_path / "s.csv"), "--image-embeddings",
                 str(emb / "image_embeddings.npz"), "--backend", "tiny-random", "--seed", "3", "-a", "age", "-k", "3",
                 "--missing", "drop", "--n-boot", "10", "-o", str(tmp_path / "rep2")]) == 0
    assert "compare two different spaces" in capsys.readouterr().err

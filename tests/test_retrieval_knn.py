"""k-NN visual-search harness and retrieval readers, against brute force (scipy cdist)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import cdist

from fairvision.errors import FairvisionError, ParameterError
from fairvision.io.embeddings import read_embeddings
from fairvision.io.retrieval import read_items, read_results
from fairvision.stats.knn import knn_search


def _brute(x, k, metric, p=2.0, groups=None):
    kw = {"p": p} if metric == "minkowski" else {}
    d = cdist(x.astype(np.float64), x.astype(np.float64), metric=metric, **kw)
    np.fill_diagonal(d, np.inf)
    if groups is not None:
        g = np.asarray(groups)
        d[g[:, None] == g[None, :]] = np.inf
    idx = np.argsort(d, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(d, idx, axis=1)


@pytest.mark.parametrize("metric,p,ref", [
    ("minkowski", 2.0, "euclidean"), ("euclidean", 2.0, "euclidean"), ("manhattan", 2.0, "cityblock"),
    ("minkowski", 3.0, "minkowski"), ("chebyshev", 2.0, "chebyshev"), ("cosine", 2.0, "cosine"),
])
@pytest.mark.parametrize("block", [None, 37])
def test_knn_matches_brute_force(metric, p, ref, block):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    ids = [f"it{i}" for i in range(300)]
    res = knn_search(x, ids, k=6, metric=metric, p=p, block_size=block)
    idx, dist = _brute(x, 6, ref, p=3.0 if ref == "minkowski" else 2.0)
    assert res["query_id"].tolist() == [i for i in ids for _ in range(6)]
    assert res["rank"].tolist() == list(range(1, 7)) * 300
    got = res["item_id"].str[2:].astype(int).to_numpy().reshape(300, 6)
    assert (got == idx).all()
    assert np.allclose(res["distance"].to_numpy().reshape(300, 6), dist, rtol=1e-9, atol=1e-9)


def test_knn_excludes_self_and_group():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(120, 8)).astype(np.float32)
    x[1::2] = x[::2] + 1e-3  # item 2i+1 is a near-duplicate of 2i (same product)
    groups = np.arange(120) // 2
    plain = knn_search(x, k=3)
    # without groups the near-duplicate is the nearest neighbour
    assert (plain[plain["rank"] == 1]["item_id"].astype(int).to_numpy() // 2 == np.arange(120) // 2).all()
    res = knn_search(x, k=3, groups=groups)
    q = res["query_id"].astype(int).to_numpy()
    it = res["item_id"].astype(int).to_numpy()
    assert (q != it).all() and (groups[q] != groups[it]).all()
    idx, _ = _brute(x, 3, "euclidean", groups=groups)
    assert (it.reshape(120, 3) == idx).all()


def test_knn_external_queries_and_small_catalog():
    x = np.array([[0.0, 0], [1, 0], [3, 0], [7, 0]], dtype=np.float32)
    q = np.array([[0.9, 0], [2.9, 0]], dtype=np.float32)
    res = knn_search(x, ["a", "b", "c", "d"], k=2, query_embeddings=(q, ["new", "c"]))
    assert res[res.query_id == "new"]["item_id"].tolist() == ["b", "a"]
    assert res[res.query_id == "c"]["item_id"].tolist() == ["b", "a"]  # "c" is a catalog item: excluded
    # k larger than the catalog: fewer rows, no error
    res = knn_search(x, k=10)
    assert (res.groupby("query_id").size() == 3).all()
    # ties are broken by catalog position
    tie = knn_search(np.array([[0.0], [1], [-1]], dtype=np.float32), k=2)
    assert tie[tie.query_id == "0"]["item_id"].tolist() == ["1", "2"]


def test_knn_bad_input():
    with pytest.raises(FairvisionError, match="row 2"):
        knn_search(np.array([[0.0, 1], [np.nan, 1]]))
    with pytest.raises(ParameterError, match="^metric must be one of"):
        knn_search(np.zeros((3, 2)), metric="hamming")
    with pytest.raises(ParameterError, match=r"^p \(the Minkowski order\) must be >= 1"):
        knn_search(np.zeros((3, 2)), p=0.5)
    with pytest.raises(FairvisionError, match="all-zero"):
        knn_search(np.zeros((3, 2)), metric="cosine")


def test_read_results_formats(tmp_path):
    csv = tmp_path / "r.csv"
    pd.DataFrame({"qid": ["q1", "q1", "q2"], "position": [2, 1, 1], "doc_id": ["b", "a", "c"]}).to_csv(csv, index=False)
    r = read_results(csv)
    assert r.columns[:3].tolist() == ["query_id", "rank", "item_id"]
    assert r["item_id"].tolist() == ["a", "b", "c"]
    js = tmp_path / "r.json"
    js.write_text(json.dumps({"q1": ["a", "b"], "q2": ["c"]}))
    r = read_results(js)
    assert r.values.tolist() == [["q1", 1, "a"], ["q1", 2, "b"], ["q2", 1, "c"]]
    run = tmp_path / "r.run"
    run.write_text("q1 Q0 a 1 0.5 sys\nq1 Q0 b 2 0.9 sys\nq2 Q0 c 1 1.0 sys\n")
    r = read_results(run)  # trec_eval orders by score
    assert r[r.query_id == "q1"]["item_id"].tolist() == ["b", "a"]
    assert r["score"].tolist() == [0.9, 0.5, 1.0]


def test_read_results_errors(tmp_path):
    bad = tmp_path / "dup.csv"
    pd.DataFrame({"query_id": ["q", "q"], "rank": [1, 1], "item_id": ["a", "b"]}).to_csv(bad, index=False)
    with pytest.raises(FairvisionError, match=r"dup.csv: row 2: query 'q' has rank 1 twice"):
        read_results(bad)
    bad2 = tmp_path / "rank.csv"
    pd.DataFrame({"query_id": ["q"], "rank": [0], "item_id": ["a"]}).to_csv(bad2, index=False)
    with pytest.raises(FairvisionError, match="row 1: rank"):
        read_results(bad2)
    run = tmp_path / "x.run"
    run.write_text("q1 Q0 a 1 0.5\n")
    with pytest.raises(FairvisionError, match="line 1"):
        read_results(run)
    nocol = tmp_path / "n.csv"
    pd.DataFrame({"a": [1], "b": [2]}).to_csv(nocol, index=False)
    with pytest.raises(FairvisionError, match="no query id column"):
        read_results(nocol)


def test_read_items_and_embeddings(tmp_path):
    it = tmp_path / "items.csv"
    pd.DataFrame({"id": ["a", "b"], "tone": ["ST1", "ST2"]}).to_csv(it, index=False)
    df = read_items(it, "tone")
    assert df["item_id"].tolist() == ["a", "b"]
    with pytest.raises(FairvisionError, match="'skin'"):
        read_items(it, "skin")
    x = np.arange(6, dtype=float).reshape(3, 2)
    np.save(tmp_path / "e.npy", x)
    (tmp_path / "e.ids.txt").write_text("a\nb\nc\n")
    e, ids = read_embeddings(tmp_path / "e.npy")
    assert ids == ["a", "b", "c"] and e.dtype == np.float32 and np.allclose(e, x)
    np.savez(tmp_path / "e.npz", embeddings=x, ids=np.array(["x", "y", "z"]))
    assert read_embeddings(tmp_path / "e.npz")[1] == ["x", "y", "z"]
    pq = tmp_path / "e.parquet"
    pd.DataFrame({"item_id": ["a", "b", "c"], "embedding": [list(r) for r in x]}).to_parquet(pq)
    e2, ids2 = read_embeddings(pq)
    assert ids2 == ["a", "b", "c"] and np.allclose(e2, x)
    x[1, 0] = np.nan
    np.save(tmp_path / "bad.npy", x)
    with pytest.raises(FairvisionError, match="row 2"):
        read_embeddings(tmp_path / "bad.npy")


@pytest.mark.vision
def test_face_descriptor_on_demo_photos(tmp_path):
    pytest.importorskip("dlib")
    from PIL import Image

    from fairvision.datasets import load_demo
    from fairvision.vision.face_descriptor import FaceDescriptor, embed_faces

    demo = load_demo().iloc[:6]
    blank = tmp_path / "blank.png"
    Image.new("RGB", (200, 200), (128, 128, 128)).save(blank)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    paths = [*demo["image_path"], str(blank), str(broken)]
    fe = embed_faces(paths, [*demo["sample_id"], "blank", "broken"])
    st = fe.status.set_index("item_id")
    assert not st.loc["blank", "ok"] and st.loc["blank", "reason"] == "no face"
    assert not st.loc["broken", "ok"] and st.loc["broken", "reason"].startswith("unreadable")
    assert fe.embeddings.shape == (int(st["ok"].sum()), 128) and st["ok"].sum() >= 4
    # dlib's descriptor: deterministic; distance of a photo to itself 0, to another person > 0.3
    v1, _ = FaceDescriptor().describe(paths[0])
    assert np.allclose(v1, fe.embeddings[0])
    d = np.linalg.norm(fe.embeddings[1:] - fe.embeddings[0], axis=1)
    assert (d > 0.3).all()

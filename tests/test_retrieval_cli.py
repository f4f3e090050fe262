"""``fairvision audit retrieval`` and ``fairvision retrieval knn`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from fairvision.cli import main


def _biased_run(tmp_path, n=240, seed=0):
    rng = np.random.default_rng(seed)
    tones = rng.choice(["ST1", "ST2", "ST3"], size=n, p=[0.2, 0.3, 0.5])
    items = pd.DataFrame({"item_id": [f"i{i:03d}" for i in range(n)], "tone": tones})
    rows = []
    for i in range(n):
        pool = np.flatnonzero(tones == tones[i]) if rng.random() < 0.4 else np.arange(n)
        pool = pool[pool != i]
        for r, j in enumerate(rng.choice(pool, size=6, replace=False)):
            rows.append((items.item_id[i], r + 1, items.item_id[j]))
    res = pd.DataFrame(rows, columns=["query_id", "rank", "item_id"])
    ip, rp = tmp_path / "items.csv", tmp_path / "results.csv"
    items.to_csv(ip, index=False)
    res.to_csv(rp, index=False)
    return items, res, ip, rp


def _block(doc, name):
    for b in doc["sections"][0]["blocks"]:
        if b.get("name") == name:
            return b
    raise KeyError(name)


def test_audit_retrieval_report_matches_independent_computation(tmp_path):
    items, res, ip, rp = _biased_run(tmp_path)
    out = tmp_path / "out"
    rc = main(["audit", "retrieval", "--results", str(rp), "--items", str(ip), "--attr", "tone", "-k", "6",
               "--power-trials", "100", "--no-progress", "-o", str(out)])
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    # independent contingency table: pandas crosstab of query tone x result tone, plus the catalog
    tone = items.set_index("item_id")["tone"]
    ct = pd.crosstab(res["query_id"].map(tone), res["item_id"].map(tone))
    full = np.vstack([ct.to_numpy(), tone.value_counts().reindex(ct.columns).to_numpy()])
    ref = st.chi2_contingency(full)
    ov = _block(doc, "overview")["values"]
    assert ov["omnibus chi2(6)"] == pytest.approx(ref.statistic)
    assert ov["bias detected"] is True
    con = pd.read_parquet(out / "tables" / "retrieval__contrasts.parquet").set_index("value")
    for v in ["ST1", "ST2", "ST3"]:
        a = ct.loc[v, v]
        n1 = ct.loc[v].sum()
        c = (tone == v).sum()
        rr = st.contingency.relative_risk(int(a), int(n1), int(c), len(tone))
        assert con.loc[v, "rr"] == pytest.approx(rr.relative_risk)
        assert con.loc[v, "rr_ci_low"] == pytest.approx(rr.confidence_interval().low)
    names = {b.get("name") for b in doc["sections"][0]["blocks"]}
    assert {"contingency", "risk_ratio", "power", "catalog_size_check", "per_rank"} <= names
    assert "<img" not in (out / "report.html").read_text()


def test_audit_retrieval_continuity_and_no_power(tmp_path):
    items, res, ip, rp = _biased_run(tmp_path, n=90, seed=3)
    out = tmp_path / "o"
    assert main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--continuity", "--correction", "bonferroni",
                 "--power-trials", "0", "--no-progress", "-o", str(out)]) == 0
    con = pd.read_parquet(out / "tables" / "retrieval__contrasts.parquet").set_index("value")
    tone = items.set_index("item_id")["tone"]
    sub = res[res["query_id"].map(tone) == "ST2"]
    a = int((sub["item_id"].map(tone) == "ST2").sum())
    c = int((tone == "ST2").sum())
    tab = np.array([[a, len(sub) - a], [c, len(tone) - c]])
    assert con.loc["ST2", "statistic"] == pytest.approx(st.chi2_contingency(tab, correction=True).statistic)
    assert not (out / "tables" / "retrieval__power-curves.parquet").exists()


@pytest.mark.parametrize("args,msg", [
    (["--attr", "skin"], "no column 'skin'"),
    (["--attr", "tone", "--correction", "sidak"], "--correction must be one of"),
    (["--attr", "tone", "--alpha", "1.5"], "--alpha must be between 0 and 1"),
    ([], "--attr is required"),
])
def test_audit_retrieval_user_errors(tmp_path, capsys, args, msg):
    _, _, ip, rp = _biased_run(tmp_path, n=60)
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "--no-progress", "-o", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error:") and msg in err and "\n" not in err


def test_audit_retrieval_unknown_item_names_row(tmp_path, capsys):
    items, res, ip, rp = _biased_run(tmp_path, n=60)
    res.loc[7, "item_id"] = "ghost"
    res.to_csv(rp, index=False)
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--no-progress", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "row 8" in err and "'ghost'" in err


def test_retrieval_knn_command_then_audit(tmp_path):
    rng = np.random.default_rng(0)
    n = 150
    tone = rng.choice(["a", "b"], size=n)
    x = rng.normal(size=(n, 16)) + (tone == "a")[:, None] * 1.5  # the attribute leaks into the embedding
    ids = [f"p{i}" for i in range(n)]
    np.savez(tmp_path / "emb.npz", embeddings=x, ids=np.array(ids))
    pd.DataFrame({"item_id": ids, "tone": tone}).to_csv(tmp_path / "items.csv", index=False)
    out = tmp_path / "res.csv"
    assert main(["retrieval", "knn", "--embeddings", str(tmp_path / "emb.npz"), "-k", "4", "-o", str(out), "--no-progress"]) == 0
    res = pd.read_csv(out)
    assert len(res) == 4 * n and set(res.columns) >= {"query_id", "rank", "item_id", "distance"}
    assert main(["audit", "retrieval", "--embeddings", str(tmp_path / "emb.npz"), "-i", str(tmp_path / "items.csv"),
                 "-a", "tone", "-k", "4", "--power-trials", "0", "--no-progress", "-o", str(tmp_path / "rep")]) == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert _block(doc, "overview")["values"]["bias detected"] is True
    assert (tmp_path / "rep" / "results.csv").exists()


@pytest.mark.vision
def test_audit_retrieval_on_demo_photos(tmp_path):
    pytest.importorskip("dlib")
    out = tmp_path / "demo"
    rc = main(["audit", "retrieval", "--embed-images", "demo", "--limit", "24", "--attr", "gender", "-k", "3",
               "--power-trials", "50", "--no-progress", "-o", str(out)])
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    emb = _block(doc, "embeddings")["values"]
    assert emb["images"] == 24 and emb["embedded"] + emb["no face / unreadable"] == 24
    res = pd.read_csv(out / "results.csv")
    assert (res["query_id"] != res["item_id"]).all()


@pytest.mark.vision
def test_audit_retrieval_measures_skin_tone(tmp_path):
    pytest.importorskip("mediapipe")
    pytest.importorskip("dlib")
    out = tmp_path / "skin"
    rc = main(["audit", "retrieval", "--embed-images", "demo", "--limit", "16", "--measure-skin", "-k", "3",
               "--power-trials", "0", "--no-progress", "-o", str(out)])
    assert rc == 0
    skin = pd.read_csv(out / "skin.csv")
    measured = skin.dropna(subset=["ita"])
    assert len(measured) >= 8
    # ST classes follow the ITA thresholds of Khaziev et al.'s Table 3 (-30, 10, 28, 41, 55)
    edges = np.array([-30, 10, 28, 41, 55])
    expected = ["ST%d" % (1 + int(np.searchsorted(edges, v, side="left"))) for v in measured["ita"]]
    assert measured["st_class"].tolist() == expected
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["attribute"] == "st_class"


def test_fail_if_gates_the_retrieval_audit(tmp_path, capsys):
    items, res, ip, rp = _biased_run(tmp_path)
    base = ["audit", "retrieval", "--results", str(rp), "--items", str(ip), "--attr", "tone", "--power-trials", "0",
            "--no-progress"]
    code = main(base + ["-o", str(tmp_path / "o1"), "--fail-if", "omnibus_p<0.01", "--fail-if", "min_nrr<0.2"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("fail-if: condition met: omnibus_p<0.01 (value ")
    doc = json.loads((tmp_path / "o1" / "report.json").read_text())
    assert doc["meta"]["failed"] == ["omnibus_p<0.01"]
    assert main(base + ["-o", str(tmp_path / "o2"), "--fail-if", "omnibus_p>0.5"]) == 0

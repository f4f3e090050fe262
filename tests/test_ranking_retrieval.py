"""Exposure and skew in ``fairvision audit retrieval`` (docs/METHODS.md §8.5): real runs of the command on results
files, checked against NDKL and Skew@k computed by hand from the same files."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main

from test_ranking import _ndkl_by_hand  # noqa: E402  (tests/ is on sys.path)


def _run(tmp_path, planted: bool, n=180, seed=0):
    rng = np.random.default_rng(seed)
    tones = rng.choice(["ST1", "ST2", "ST3"], size=n, p=[0.3, 0.4, 0.3])
    items = pd.DataFrame({"item_id": [f"i{i:03d}" for i in range(n)], "tone": tones})
    rows = []
    for i in range(n):
        others = np.flatnonzero(np.arange(n) != i)
        if planted:  # ST3 items take the first three ranks of every query
            st3 = rng.choice(np.intersect1d(others, np.flatnonzero(tones == "ST3")), 3, replace=False)
            rest = rng.choice(np.setdiff1d(others, st3), 3, replace=False)
            ranked = np.r_[st3, rest]
        else:
            ranked = rng.choice(others, 6, replace=False)
        rows += [(items.item_id[i], r + 1, items.item_id[j]) for r, j in enumerate(ranked)]
    res = pd.DataFrame(rows, columns=["query_id", "rank", "item_id"])
    ip, rp = tmp_path / "items.csv", tmp_path / "results.csv"
    items.to_csv(ip, index=False)
    res.to_csv(rp, index=False)
    return items, res, ip, rp


def _section(doc, sid):
    return next(s for s in doc["sections"] if s["id"] == sid)


def _block(section, name):
    return next(b for b in section["blocks"] if b.get("name") == name)


@pytest.mark.parametrize("planted", [True, False])
def test_retrieval_report_has_exposure_and_skew(tmp_path, capsys, planted):
    items, res, ip, rp = _run(tmp_path, planted)
    out = tmp_path / "out"
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "-k", "6", "--power-trials", "0",
               "--n-boot", "200", "--no-progress", "-o", str(out)])
    assert rc == 0
    line = capsys.readouterr().out
    assert "NDKL" in line and "MaxSkew@6" in line
    doc = json.loads((out / "report.json").read_text())
    sec = _section(doc, "retrieval-ranking")
    # independent: the catalog's shares, every query's NDKL by hand, the mean top-6 share per value
    tone = items.set_index("item_id")["tone"]
    cats = ["ST1", "ST2", "ST3"]
    desired = tone.value_counts(normalize=True).reindex(cats).to_numpy()
    seqs = res.sort_values(["query_id", "rank"]).groupby("query_id")["item_id"].apply(
        lambda s: [cats.index(tone[i]) for i in s])
    ndkl = np.mean([_ndkl_by_hand(s, desired) for s in seqs])
    ov = _block(sec, "ranking_overview")["values"]
    assert ov["NDKL"] == pytest.approx(ndkl)
    groups = pd.read_parquet(out / "tables" / "retrieval-ranking__ranking-groups.parquet").set_index("group")
    share = res.assign(t=res["item_id"].map(tone)).groupby("t").size().reindex(cats) / len(res)
    for j, v in enumerate(cats):
        assert groups.loc[v, "share"] == pytest.approx(share[v])
        assert groups.loc[v, "skew"] == pytest.approx(math.log(share[v] / desired[j]))
        assert groups.loc[v, "share_ci_low"] <= share[v] <= groups.loc[v, "share_ci_high"]
    finds = [f for f in doc["findings"] if f["section"] == "retrieval-ranking"]
    if planted:
        assert bool(groups.loc["ST3", "flagged"]) and groups.loc["ST3", "attention_ratio"] > 1.5
        assert any("tone = ST3" in f["sentence"] and "more" in f["sentence"] for f in finds)
        assert ov["NDKL"] > ov["NDKL of a random ranking"]
    else:
        assert not groups["flagged"].any() and not finds


def test_gates_on_ndkl_and_skew(tmp_path, capsys):
    _, _, ip, rp = _run(tmp_path, planted=True)
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--power-trials", "0", "--n-boot",
               "50", "--no-progress", "--fail-if", "skew.ST3>0.5", "-o", str(tmp_path / "o")])
    assert rc == 1
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--power-trials", "0", "--n-boot",
               "50", "--no-progress", "--fail-if", "n_flagged_groups>5", "-o", str(tmp_path / "o2")])
    assert rc == 0


def test_a_result_value_missing_from_the_catalog_is_a_note(tmp_path):
    items, _, ip, rp = _run(tmp_path, planted=False)
    cat = tmp_path / "catalog.csv"
    items[items["tone"] != "ST1"].to_csv(cat, index=False)  # ST1 results have no catalog share
    out = tmp_path / "out"
    rc = main(["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--catalog", str(cat),
               "--power-trials", "0", "--n-boot", "20", "--no-progress", "-o", str(out)])
    assert rc == 0
    sec = _section(json.loads((out / "report.json").read_text()), "retrieval-ranking")
    notes = [b["text"] for b in sec["blocks"] if b["type"] == "note"]
    assert any("not computed" in t and "desired share 0" in t for t in notes)


def test_the_permutation_pool_is_the_searched_catalog(tmp_path):
    """Items that were never searched (no embedding) cannot be ranked: they are not in the permutation pool."""
    from fairvision.audits.retrieval import ranking_from_results

    items, res, _, _ = _run(tmp_path, planted=False)
    # the search ran over the ST2 and ST3 items plus half the ST1 items; drop results outside it
    st1 = items.index[items["tone"] == "ST1"]
    searched = items.drop(index=st1[: len(st1) // 2])
    res = res[res["item_id"].isin(searched["item_id"])]
    shares = searched["tone"].value_counts(normalize=True).reindex(["ST1", "ST2", "ST3"])
    full, _ = ranking_from_results(res, items, "tone", shares, 6)
    part, _ = ranking_from_results(res, items, "tone", shares, 6, catalog=searched)
    expected = searched["tone"].value_counts(normalize=True).reindex(["ST1", "ST2", "ST3"]).to_numpy()
    assert np.allclose(part.groups["pool_share"].to_numpy(), expected)
    assert not np.allclose(full.groups["pool_share"].to_numpy(), expected)

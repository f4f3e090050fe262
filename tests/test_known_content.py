"""Known-content matching (docs/METHODS.md §13.9): the query-vs-reference multi-index Hamming search against
brute force, hex hashes against Python's int(x, 16), a known hash planted at distance d, the command's tables
and its errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.curation.known_content import (audit_known_content, cross_subject_distance, parse_hex_hashes,
                                                      read_known_hashes, subject_duplicates)
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.hamming import query_matches
from fairvision.vision.phash import inspect_image_file
from hash_oracles import near_hashes  # tests/ is on sys.path (pytest's prepend import mode)


def brute(q, r, t):
    out = []
    for i, a in enumerate(int(x) for x in q):
        for j, b in enumerate(int(x) for x in r):
            d = bin(a ^ b).count("1")
            if d <= t:
                out.append((i, d, j))
    return sorted(out)


@pytest.mark.parametrize("seed", range(10))
def test_query_matches_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, 2**64 - 1, size=int(rng.integers(1, 120)), dtype=np.uint64, endpoint=True)
    q = np.concatenate([near_hashes(rng, ref, int(rng.integers(1, 80)), int(rng.integers(0, 8))),
                        rng.integers(0, 2**64 - 1, size=20, dtype=np.uint64, endpoint=True)])
    ref = np.concatenate([ref, ref[:3]])  # repeated reference hashes: each reported
    t = int(rng.integers(0, 14))
    got = query_matches(q, ref, t)
    assert list(zip(got["query"], got["distance"], got["reference"])) == brute(q, ref, t)


def test_query_matches_edges():
    assert len(query_matches(np.zeros(0, np.uint64), np.ones(3, np.uint64), 4)) == 0
    assert len(query_matches(np.ones(3, np.uint64), np.zeros(0, np.uint64), 4)) == 0
    a = np.uint64(0xFFFF_0000_FFFF_0000)
    got = query_matches([a], [a ^ np.uint64(0b1111), a ^ np.uint64(0b11111)], 4)
    assert got[["reference", "distance"]].values.tolist() == [[0, 4]]
    with pytest.raises(FairvisionError, match="threshold"):
        query_matches([a], [a], 64)


def test_hex_hashes_against_int():
    rng = np.random.default_rng(2)
    h = rng.integers(0, 2**64 - 1, size=500, dtype=np.uint64, endpoint=True)
    cells = [f"{int(v):x}" if i % 3 else f"0x{int(v):016X}" for i, v in enumerate(h)]
    got, present = parse_hex_hashes(pd.Series(cells + [None]))
    assert present.tolist() == [True] * 500 + [False]
    assert [int(v) for v in got] == [int(c, 16) for c in cells]
    with pytest.raises(ColumnError, match="row 2"):
        parse_hex_hashes(pd.Series(["00ff", "xyz"]), column="hash")
    with pytest.raises(ColumnError, match="16 hex digits"):
        parse_hex_hashes(pd.Series(["1" * 17]))


@pytest.mark.parametrize("d", [0, 3, 6, 7])
def test_planted_known_hash_at_distance_d(tmp_path, d):
    data = load_portraits().head(8)
    hashes = [inspect_image_file(p)["phash"] for p in data["image_path"]]
    images = data.assign(phash=[f"{h:016x}" for h in hashes])
    flip = sum(1 << b for b in (0, 9, 18, 27, 36, 45, 54)[:d])
    known = pd.DataFrame({"phash": [f"{hashes[2] ^ flip:016x}", "0123456789abcdef"], "label": ["planted", "other"]})
    known.to_csv(tmp_path / "k.csv", index=False)
    res = audit_known_content(images, read_known_hashes(tmp_path / "k.csv"), hamming=6)
    expect = [(i, bin(hashes[i] ^ int(k, 16)).count("1"), j) for i in range(8) for j, k in enumerate(known["phash"])
              if bin(hashes[i] ^ int(k, 16)).count("1") <= 6]
    got = [(list(data["sample_id"]).index(s), dist, list(known["phash"]).index(k))
           for s, dist, k in zip(res.matches["sample_id"], res.matches["distance"], res.matches["known_hash"])]
    assert sorted(got) == sorted(expect)
    if d <= 6:
        row = res.matches[res.matches["label"] == "planted"]
        assert row["sample_id"].tolist() == [data["sample_id"][2]] and row["distance"].tolist() == [d]
    else:
        assert "planted" not in set(res.matches["label"])
    assert res.quantities()["n_known_matches"] == len({s for s, *_ in expect})


def test_subject_duplicates_within_and_across():
    near_pairs = pd.DataFrame({"sample_id_a": ["a", "a", "c"], "sample_id_b": ["b", "c", "d"], "distance": [0, 2, 5]})
    data = pd.DataFrame({"sample_id": list("abcd"), "subject_id": ["p", "p", "q", None]})
    d = subject_duplicates(near_pairs, data, "subject_id")
    assert d["same_subject"].tolist() == [True, False, False] and d["cross_subject"].tolist() == [False, True, False]
    dist = cross_subject_distance(d, list("abcd"))
    assert dist.tolist() == [2, np.inf, 2, np.inf]
    assert len(subject_duplicates(near_pairs, data, "nope")) == 0


def test_cli_known_hashes(tmp_path, capsys):
    data = load_portraits().head(5)
    data.to_csv(tmp_path / "s.csv", index=False)
    h = inspect_image_file(data["image_path"][1])["phash"]
    pd.DataFrame({"hash": [f"{h ^ 0b101:016x}"], "source": ["list A"]}).to_parquet(tmp_path / "k.parquet")
    out = tmp_path / "o"
    rc = main(["curate", "qa", str(tmp_path / "s.csv"), "--no-policy", "--known-hashes", str(tmp_path / "k.parquet"),
               "-o", str(out), "--no-store", "--fail-if", "n_known_matches>0"])
    assert rc == 1
    assert "known content: 1 of 5" in capsys.readouterr().out
    m = pd.read_csv(out / "known_matches.csv", dtype={"sample_id": str})
    assert m[["sample_id", "distance", "source"]].values.tolist() == [[data["sample_id"][1], 2, "list A"]]
    doc = json.loads((out / "report.json").read_text())
    assert [s["id"] for s in doc["sections"]] == ["curation_qa", "curation_known_content"]
    # a list without a hash column, a bad hash, a bad threshold: exit 2 before any image is decoded
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "bad.csv", index=False)
    pd.DataFrame({"phash": ["nothex"]}).to_csv(tmp_path / "bad2.csv", index=False)
    for args in (["--known-hashes", str(tmp_path / "bad.csv")], ["--known-hashes", str(tmp_path / "bad2.csv")],
                 ["--known-hashes", str(tmp_path / "k.parquet"), "--known-hamming", "40"]):
        assert main(["curate", "qa", str(tmp_path / "s.csv"), *args, "-o", str(tmp_path / "o2"), "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "no hash column" in err and "'nothex'" in err and "--known-hamming" in err

"""Rows the retrieval audit leaves out (docs/METHODS.md §9.3) and the progress of ``audit retrieval``."""

from __future__ import annotations

import contextlib
import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from fairvision.audits.retrieval import PowerOptions, audit_retrieval, left_out, reason_kind
from fairvision.cli import main
from fairvision.report.sections.retrieval import left_out_sections

NO_POWER = PowerOptions(trials=0)


def _ranked(ids, rng, k=6) -> pd.DataFrame:
    """Every id queries, with k random other ids as its results."""
    ids = np.asarray(ids)
    rows = [(q, r + 1, j) for q in ids for r, j in enumerate(rng.choice(ids[ids != q], size=k, replace=False))]
    return pd.DataFrame(rows, columns=["query_id", "rank", "item_id"])


def _embedded_catalog(fail_b: float, fail_a: float = 0.0, n=200, seed=0):
    """Items of tones a / b, an embedding status where a share of each tone has no face, and k-NN-like results
    over the embedded items only."""
    rng = np.random.default_rng(seed)
    tone = np.where(np.arange(n) % 2 == 0, "a", "b")
    items = pd.DataFrame({"item_id": [f"i{i:03d}" for i in range(n)], "tone": tone})
    u = rng.random(n)
    ok = np.where(tone == "b", u >= fail_b, u >= fail_a)
    reason = np.where(ok, "", np.where(np.arange(n) % 7 == 0, "image too large: 200000000 pixels", "no face"))
    status = pd.DataFrame({"item_id": items["item_id"], "image_path": "x.jpg", "ok": ok, "n_faces": ok.astype(int),
                           "reason": reason})
    return items, status, _ranked(items["item_id"][ok], rng)


def test_drop_concentrated_in_one_group_is_flagged_with_fisher_and_reasons():
    items, status, res = _embedded_catalog(fail_b=0.5)
    audit = audit_retrieval(res, items, "tone", embedding_status=status, power=NO_POWER)
    cov = audit.coverage
    ok = status["ok"].to_numpy()
    tone = items["tone"].to_numpy()
    # hand count of the 2 x 2 table, tested with scipy's Fisher exact test
    table = [[int((ok & (tone == g)).sum()), int((~ok & (tone == g)).sum())] for g in ("a", "b")]
    assert cov.by_group.loc[("tone", "a"), "n_ok"] == table[0][0] and cov.by_group.loc[("tone", "b"), "n"] == sum(table[1])
    assert cov.tests.loc["tone", "pvalue"] == pytest.approx(st.fisher_exact(table).pvalue)
    assert bool(cov.tests.loc["tone", "differs"]) and cov.unit == "images" and cov.step == "face embedding"
    # reasons without the per-image detail, counted by hand
    kinds = pd.Series(status.loc[~ok, "reason"].str.split(": ").str[0]).value_counts()
    assert cov.reasons["n"].to_dict() == kinds.to_dict() and set(kinds.index) == {"no face", "image too large"}
    assert cov.n_left_out == int((~ok).sum()) == audit.quantities()["n_left_out"]
    assert cov.summary_line().startswith(f"face embedding: {int((~ok).sum())} of 200 images left out (no face: ")
    assert cov.summary_line().endswith("the share left out differs by tone")
    # an image without an embedding cannot be retrieved: it is not in the catalog either
    assert audit.parity.n_catalog == int(ok.sum())
    assert audit.parity.table.loc["catalog"].sum() == int(ok.sum())
    secs = left_out_sections(audit)
    assert [s.id for s in secs] == ["retrieval-coverage"]
    assert any(f.quantity == "rate.tone=b" and f.severity == "high" for f in secs[0].findings)


def test_even_drop_is_reported_but_not_flagged():
    items, status, res = _embedded_catalog(fail_b=0.25, fail_a=0.25, seed=1)
    audit = audit_retrieval(res, items, "tone", embedding_status=status, power=NO_POWER)
    cov = audit.coverage
    assert cov.n_left_out == int((~status["ok"]).sum()) > 20
    assert not cov.tests["differs"].any() and "differs" not in cov.summary_line()
    sec = left_out_sections(audit)[0]
    assert not any(f.quantity.startswith("rate.tone=") for f in sec.findings)
    assert any(f.quantity == "rate" and "no group's rate differs" in f.sentence for f in sec.findings)


def test_items_without_a_value_are_left_out_queries_and_results():
    rng = np.random.default_rng(4)
    n = 120
    tone = rng.choice(["ST1", "ST2", "ST3"], size=n).astype(object)
    tone[rng.random(n) < 0.15] = None
    items = pd.DataFrame({"item_id": [f"p{i}" for i in range(n)], "tone": tone})
    res = _ranked(items["item_id"], rng, k=4)
    audit = audit_retrieval(res, items, "tone", k=4, missing="drop", power=NO_POWER)
    cov, pairs = audit.coverage, audit.result_coverage
    n_none = int(pd.isna(tone).sum())
    assert (cov.n, cov.n_left_out, cov.unit) == (n, n_none, "queries")
    assert cov.reasons["n"].to_dict() == {"no tone value": n_none} and cov.step == "tone lookup"
    # result pairs of the queries kept whose result has no value, counted with pandas, by the query's value
    value = items.set_index("item_id")["tone"]
    kept = res[res["query_id"].map(value).notna()]
    lost = kept["item_id"].map(value).isna()
    assert (pairs.n, pairs.n_left_out, pairs.unit) == (len(kept), int(lost.sum()), "results")
    per_q = kept.assign(lost=lost).groupby(kept["query_id"].map(value))["lost"].agg(["size", "sum"])
    for g, row in per_q.iterrows():
        assert pairs.by_group.loc[("tone", g), "n"] == row["size"]
        assert pairs.by_group.loc[("tone", g), "n_ok"] == row["size"] - row["sum"]
    assert pairs.n_left_out == audit.parity.dropped["result_pairs_missing_attribute"] - n_none * 4
    assert [s.id for s in left_out_sections(audit)] == ["retrieval-coverage", "retrieval-result-coverage"]


def test_nothing_left_out_of_results_adds_no_section():
    rng = np.random.default_rng(2)
    items = pd.DataFrame({"item_id": [f"p{i}" for i in range(40)], "tone": rng.choice(["x", "y"], 40)})
    audit = audit_retrieval(_ranked(items["item_id"], rng, k=3), items, "tone", k=3, power=NO_POWER)
    assert audit.coverage.n_left_out == 0 and audit.result_coverage is None and left_out_sections(audit) == []


def test_left_out_reads_the_skin_measurement_reason():
    items = pd.DataFrame({"item_id": ["a", "b", "c", "d", "e"], "st_class": ["ST1", None, "ST2", None, "ST1"],
                          "st_class_reason": [None, "skin colour not measured (no face found)", None,
                                               "skin colour not measured (unreadable image)", None]})
    res = pd.DataFrame({"query_id": ["a", "c", "e", "b", "d"], "rank": 1, "item_id": ["c", "e", "a", "a", "a"]})
    cov, pairs = left_out(res, items, "st_class", 1)
    assert cov.step == "skin colour measurement" and pairs is None
    assert cov.reasons["n"].to_dict() == {"skin colour not measured (no face found)": 1,
                                          "skin colour not measured (unreadable image)": 1}


@pytest.mark.parametrize("reason,kind", [("no face", "no face"), ("unreadable: UnidentifiedImageError", "unreadable"),
                                         ("image too large: 1 pixels", "image too large"), ("", None), (None, None)])
def test_reason_kind(reason, kind):
    assert reason_kind(reason) == kind


# --------------------------------------------------------------------------- real runs on photos


@pytest.fixture(scope="module")
def photo_runs(tmp_path_factory):
    """32 bundled portraits (groups A, B alternately) and 20 files that are not images; one results store."""
    pytest.importorskip("dlib")
    from fairvision.datasets import load_portraits

    root = tmp_path_factory.mktemp("photos")
    real = load_portraits().iloc[:32].reset_index(drop=True)
    bad = []
    for i in range(20):
        path = root / f"broken_{i:02d}.jpg"
        path.write_bytes(b"not a JPEG at all " + bytes([i]))
        bad.append(str(path))
    table = pd.DataFrame({"sample_id": list(real["sample_id"]) + [f"x{i:02d}" for i in range(20)],
                          "image_path": list(real["image_path"]) + bad})
    table["real"] = [True] * 32 + [False] * 20
    return root, table


def _run_photos(root, table, groups, name, capsys, extra=()):
    samples = root / f"{name}.csv"
    table.assign(group=groups).drop(columns="real").to_csv(samples, index=False)
    out = root / name
    rc = main(["audit", "retrieval", "--embed-images", str(samples), "--attr", "group", "-k", "3",
               "--power-trials", "0", "--store", str(root / "store"), "-o", str(out), *extra])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return out, captured


def _findings(doc, sid):
    assert any(s["id"] == sid for s in doc["sections"])
    return [f for f in doc["findings"] if f["section"] == sid]


@pytest.mark.vision
def test_real_run_flags_a_drop_concentrated_in_one_group(photo_runs, capsys):
    root, table = photo_runs
    groups = np.where(table["real"], np.where(np.arange(len(table)) % 2 == 0, "A", "B"), "B")  # every broken file in B
    out, captured = _run_photos(root, table, groups, "concentrated", capsys)
    status = pd.read_parquet(out / "tables" / "retrieval__embedding-failures.parquet")
    failed = set(status.index if "item_id" not in status.columns else status["item_id"])
    assert {f"x{i:02d}" for i in range(20)} <= failed
    ok = ~table["sample_id"].isin(failed).to_numpy()
    ref = st.fisher_exact([[int((ok & (groups == g)).sum()), int((~ok & (groups == g)).sum())] for g in ("A", "B")])
    tests = pd.read_parquet(out / "tables" / "retrieval-coverage__coverage-tests.parquet")
    assert tests["pvalue"].iloc[0] == pytest.approx(ref.pvalue) and bool(tests["differs"].iloc[0])
    doc = json.loads((out / "report.json").read_text())
    found = _findings(doc, "retrieval-coverage")
    assert any(f["quantity"] == "rate.group=B" and f["severity"] == "high" for f in found)
    assert any(f["quantity"] == "left_out" and f["value"] == len(failed) for f in found)
    # the terminal says how many were left out, why, and that the share differs
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("face embedding:"))
    assert f"{len(failed)} of 52 images left out" in line and re.search(r"unreadable[^:]*: 20", line)
    assert line.endswith("the share left out differs by group")
    # stderr is not a terminal: one line per finished stage, with its time, and what the embedding left out
    err = captured.err.splitlines()
    assert re.fullmatch(r"embedding faces: 52 of 52 in [\d.,]+ s", err[0])
    assert err[1] == f"embedding faces: {len(failed)} of 52 images without an embedding ({line.split('(')[1].split(')')[0]})"
    assert re.fullmatch(rf"nearest neighbours: {52 - len(failed)} of {52 - len(failed)} in [\d.,]+ s", err[2])
    assert re.fullmatch(r"parity tests: 1 of 1 in [\d.,]+ s", err[3]) and len(err) == 4
    # the catalog is the embedded images
    assert doc["meta"]["n_catalog"] == 52 - len(failed)


@pytest.mark.vision
def test_real_run_with_an_even_drop_flags_nothing(photo_runs, capsys):
    root, table = photo_runs
    groups = np.where(np.arange(len(table)) % 2 == 0, "A", "B")  # broken files alternate too
    out, captured = _run_photos(root, table, groups, "even", capsys, extra=["--power-trials", "10"])
    assert re.search(r"^parity tests and power analysis: 4 of 4 in [\d.,]+ s$", captured.err, re.M)
    tests = pd.read_parquet(out / "tables" / "retrieval-coverage__coverage-tests.parquet")
    assert not tests["differs"].any()
    doc = json.loads((out / "report.json").read_text())
    found = _findings(doc, "retrieval-coverage")
    assert found and not any(f["quantity"].startswith("rate.group=") for f in found)
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("face embedding:"))
    assert "left out" in line and "differs" not in line


@pytest.mark.vision
def test_progress_bars_on_a_terminal_and_silence_with_no_progress(photo_runs, capsys, monkeypatch):
    import fairvision.cli.retrieval as cli_retrieval

    root, table = photo_runs
    seen: dict = {}

    @contextlib.contextmanager
    def terminal_bars(show=True):  # what progress_bars yields on a terminal
        yield (lambda stage, done, total: seen.__setitem__(stage, (done, total))) if show else None

    monkeypatch.setattr(cli_retrieval, "progress_bars", terminal_bars)
    groups = np.where(np.arange(len(table)) % 2 == 0, "A", "B")
    _, captured = _run_photos(root, table, groups, "bars", capsys)
    assert seen["embedding faces"] == (52, 52)
    n_queries = seen["nearest neighbours"][1]
    assert seen["nearest neighbours"] == (n_queries, n_queries) and seen["parity tests"] == (1, 1)
    assert captured.err == ""  # bars, not lines
    _, quiet = _run_photos(root, table, groups, "quiet", capsys, extra=["--no-progress"])
    assert quiet.err == "" and "face embedding:" in quiet.out


def test_embeddings_catalog_is_the_items_searched(tmp_path):
    rng = np.random.default_rng(5)
    n = 60
    ids = [f"p{i}" for i in range(n)]
    tone = np.where(np.arange(n) < 40, "a", "b")
    pd.DataFrame({"item_id": ids, "tone": tone}).to_csv(tmp_path / "items.csv", index=False)
    keep = np.arange(n) % 3 != 0  # a third of the items has no embedding: they are never searched
    np.savez(tmp_path / "emb.npz", embeddings=rng.normal(size=(int(keep.sum()), 8)), ids=np.array(ids)[keep])
    out = tmp_path / "rep"
    assert main(["audit", "retrieval", "--embeddings", str(tmp_path / "emb.npz"), "-i", str(tmp_path / "items.csv"),
                 "-a", "tone", "-k", "3", "--power-trials", "0", "--no-progress", "-o", str(out)]) == 0
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["n_catalog"] == int(keep.sum())
    counts = pd.read_parquet(out / "tables" / "retrieval__contingency-counts.parquet")
    catalog = counts.iloc[-1]
    assert catalog["a"] == int((keep & (tone == "a")).sum()) and catalog["b"] == int((keep & (tone == "b")).sum())

"""Several datasets side by side (`fairvision audit dataset A.csv B.csv ...`, docs/METHODS.md §5.4): the test of
homogeneity and the pairwise Cramér's V against scipy, shares and Wilson intervals against hand counts, a category
one dataset lacks shown as 0, subjects counted once, the command's errors naming the table, and the report in a
real browser. The single-table audit is unchanged (tests/test_dataset_cli.py, tests/test_dataset_audit.py)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.dataset_compare import audit_dataset_compare
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main

FAST = AuditSettings(n_boot=200)
MIX = {"A": [0.5, 0.3, 0.2], "B": [0.3, 0.3, 0.4], "C": [0.6, 0.4, 0.0]}


def _tables(n=300, seed=0, mix=MIX):
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in mix.items():
        out[name] = pd.DataFrame({"sample_id": [f"{name}{i}" for i in range(n)],
                                  "gender": rng.choice(["F", "M"], n),
                                  "age": rng.choice(["18-29", "30-39", "60+"], n, p=p)})
    return out


def _combined(tables):
    return pd.concat([t.assign(ds=k) for k, t in tables.items()], ignore_index=True)


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_homogeneity_and_pairwise_match_scipy():
    tables = _tables()
    a = audit_dataset_compare(_combined(tables), "ds", ["gender", "age"], settings=FAST)
    for attr in ("gender", "age"):
        ct = pd.crosstab(_combined(tables)["ds"], _combined(tables)[attr]).to_numpy()
        ref = stats.chi2_contingency(ct, correction=False)
        row = a.tests.loc[attr]
        assert row["statistic"] == pytest.approx(ref.statistic) and row["df"] == ref.dof
        assert row["pvalue"] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        assert row["cramers_v"] == pytest.approx(math.sqrt(ref.statistic / (ct.sum() * (min(ct.shape) - 1))))
    assert a.tests.loc["age", "differs"] and not a.tests.loc["gender", "differs"]
    # Holm over the two attributes
    p = a.tests["pvalue"].to_numpy()
    assert a.tests["pvalue_adjusted"].to_numpy() == pytest.approx(
        np.maximum.accumulate(np.minimum(1, np.sort(p) * [2, 1]))[np.argsort(np.argsort(p))])
    # a pair: the 2 x 3 table of A and B (asymptotic test; every expected count is large)
    ab = pd.crosstab(_combined({k: tables[k] for k in "AB"})["ds"], _combined({k: tables[k] for k in "AB"})["age"])
    ref = stats.chi2_contingency(ab.to_numpy(), correction=False)
    pw = a.pairwise.loc[("age", "A", "B")]
    assert pw["statistic"] == pytest.approx(ref.statistic) and pw["pvalue"] == pytest.approx(ref.pvalue)
    assert pw["cramers_v"] == pytest.approx(math.sqrt(ref.statistic / ab.to_numpy().sum()))
    sa, sb = (ab.loc[k] / ab.loc[k].sum() for k in "AB")
    assert pw["tvd"] == pytest.approx(0.5 * (sa - sb).abs().sum())
    assert pw["max_share_diff_pp"] == pytest.approx(100 * (sa - sb).abs().max())
    assert pw["largest_diff_group"] == (sa - sb).abs().idxmax()
    assert len(a.pairwise) == 6 and (a.pairwise["pvalue_adjusted"] >= a.pairwise["pvalue"] - 1e-15).all()


def test_shares_wilson_intervals_missing_category_and_nsd_by_hand():
    tables = _tables()
    a = audit_dataset_compare(_combined(tables), "ds", ["age"], datasets=["C", "A", "B"], settings=FAST)
    assert a.datasets == ["C", "A", "B"]
    s = a.shares["age"]
    for d, t in tables.items():
        counts = t["age"].value_counts()
        for g in ("18-29", "30-39", "60+"):
            k = int(counts.get(g, 0))
            row = s.loc[(d, g)]
            assert row["n"] == k and row["total"] == 300 and row["share"] == pytest.approx(k / 300)
            assert (row["ci_low"], row["ci_high"]) == pytest.approx(_wilson(k, 300), abs=1e-12)
    # C has no 60+: a share of 0, an empty group, and NSD over the three categories
    assert s.loc[("C", "60+"), "share"] == 0 and a.counts["age"].loc["C", "60+"] == 0
    rep = a.representation.loc[("C", "age")]
    p = np.array([s.loc[("C", g), "share"] for g in ("18-29", "30-39", "60+")])
    assert rep["n_empty_groups"] == 1
    assert rep["nsd"] == pytest.approx(p.std() * 3 / math.sqrt(2))
    assert rep["nsd_ci_low"] <= rep["nsd"] <= rep["nsd_ci_high"]
    q = a.quantities()
    assert q["max_nsd"] == pytest.approx(a.representation["nsd"].max()) and q["nsd.C.age"] == rep["nsd"]


def test_subjects_are_counted_once_and_kept_apart_across_datasets():
    # A: person x has three images of age 18-29; B reuses the id "x" for another person
    data = pd.DataFrame({"sample_id": list("abcdefg"), "subject_id": ["x", "x", "x", "y", "x", "z", "w"],
                         "age": ["18-29", "18-29", "18-29", "60+", "18-29", "60+", "60+"],
                         "ds": ["A"] * 4 + ["B"] * 3})
    a = audit_dataset_compare(data, "ds", ["age"], settings=AuditSettings(n_boot=0))
    assert a.unit == "subjects"
    assert a.counts["age"].to_dict(orient="index") == {"A": {"18-29": 1, "60+": 1}, "B": {"18-29": 1, "60+": 2}}
    assert a.sizes["subjects"].tolist() == [2, 3] and a.sizes["images"].tolist() == [4, 3]


def _write(d: Path, tables):
    paths = []
    for name, t in tables.items():
        p = d / f"{name}.csv"
        t.to_csv(p, index=False)
        paths.append(str(p))
    return paths


def test_command_compares_several_tables(tmp_path, capsys):
    paths = _write(tmp_path, _tables())
    out = tmp_path / "rep"
    rc = main(["audit", "dataset", *paths, "-a", "gender", "-a", "age", "--n-boot", "100", "-o", str(out),
               "--dataset-name", "fhibe", "--dataset-name", "ff", "--dataset-name", "utk",
               "--fail-if", "max_share_diff_pp>30"])
    captured = capsys.readouterr()
    assert rc == 1, captured.err
    assert "3 datasets, 2 attributes, 1 differing significantly" in captured.out
    doc = json.loads((out / "report.json").read_text())
    assert [s["id"] for s in doc["sections"]] == ["dataset-compare"]
    assert doc["meta"]["datasets"] == "fhibe, ff, utk"
    assert any("The datasets differ in age" in f["sentence"] for f in doc["findings"])
    shares = pd.read_parquet(out / "tables" / "dataset-compare__shares-age.parquet")
    assert len(shares) == 9
    # one table with a dataset column gives the same tests
    one = tmp_path / "all.csv"
    _combined(_tables()).to_csv(one, index=False)
    rc = main(["audit", "dataset", str(one), "--dataset-col", "ds", "-a", "gender", "-a", "age", "--n-boot", "100",
               "-o", str(tmp_path / "rep2")])
    assert rc == 0, capsys.readouterr().err
    a = pd.read_parquet(out / "tables" / "dataset-compare__homogeneity.parquet")
    b = pd.read_parquet(tmp_path / "rep2" / "tables" / "dataset-compare__homogeneity.parquet")
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("extra, message", [
    ([], "B.csv: no attribute column 'age'"),
    (["--dataset-name", "x"], "--dataset-name given 1 times for 3 tables"),
    (["--target", "gender"], "--target audits one dataset"),
    (["--dataset-col", "ds"], "--dataset-col takes one table"),
])
def test_command_errors_name_the_table(tmp_path, capsys, extra, message):
    tables = _tables()
    tables["B"] = tables["B"].drop(columns="age")
    paths = _write(tmp_path, tables)
    rc = main(["audit", "dataset", *paths, "-a", "gender", "-a", "age", "-o", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "out" / "report.html").exists()


def test_two_tables_with_one_stem_need_names(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    t = _tables()
    t["A"].to_csv(tmp_path / "x" / "data.csv", index=False)
    t["B"].to_csv(tmp_path / "y" / "data.csv", index=False)
    rc = main(["audit", "dataset", str(tmp_path / "x" / "data.csv"), str(tmp_path / "y" / "data.csv"), "-a", "age",
               "-o", str(tmp_path / "out")])
    assert rc == 2 and "both named 'data'" in capsys.readouterr().err


def test_subjects_must_be_in_every_table_or_none(tmp_path, capsys):
    t = _tables()
    t["A"]["subject_id"] = [f"p{i // 2}" for i in range(len(t["A"]))]
    paths = _write(tmp_path, t)
    rc = main(["audit", "dataset", *paths, "-a", "age", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "B.csv: no subject_id column, but " in err and "A.csv has one" in err


@pytest.mark.browser
def test_report_in_the_browser(tmp_path):
    from test_report_browser import _browser  # tests/ is on sys.path (pytest's default "prepend" import mode)
    from test_report_browser_new import check_in_browser

    paths = _write(tmp_path, _tables(n=120))
    out = tmp_path / "rep"
    assert main(["audit", "dataset", *paths, "-a", "gender", "-a", "age", "--n-boot", "50", "-o", str(out)]) == 0
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, info, text = check_in_browser(browser, out / "report.html", shots / "dataset-compare.png")
    assert doc["findings"] and "Datasets side by side" in text
    assert len(info["figs"]) >= 1


def test_units_without_a_value_are_counted_not_dropped_silently():
    from fairvision.schema import Schema

    tables = _tables(n=50)
    tables["A"].loc[[0, 1, 2], "age"] = None  # three images of A have no age
    data = _combined(tables)
    a = audit_dataset_compare(data, "ds", ["gender", "age"], schema=Schema().declare(["gender", "age"], missing="drop"),
                              settings=AuditSettings(n_boot=0))
    assert a.shares["age"].loc[("A", "18-29"), "total"] == 47 and a.shares["age"].loc[("B", "18-29"), "total"] == 50
    assert "age: 3 images without a value left out of its shares and tests (A: 3)." in a.warnings, a.warnings
    assert not any(w.startswith("gender:") for w in a.warnings)


def test_a_tiny_dataset_is_too_small_to_judge_not_the_least_balanced():
    # A and B: 300 images each; T: 12 images, 9 of one gender (NSD 0.5, by hand |9 - 3| / 12), fewer than
    # 10 per category of gender
    tables = _tables()
    t = tables["A"].iloc[:12].copy()
    t["gender"] = ["F"] * 9 + ["M"] * 3
    tables = {"A": tables["A"], "B": tables["B"], "T": t}
    a = audit_dataset_compare(_combined(tables), "ds", ["gender"], settings=AuditSettings(n_boot=100))
    rep = a.representation
    assert rep.loc[("T", "gender"), "nsd"] == pytest.approx(0.5) and bool(rep.loc[("T", "gender"), "too_small"])
    assert not rep.loc[[("A", "gender"), ("B", "gender")], "too_small"].any()
    assert any(w.startswith("gender: T has 12 images with a value, fewer than 10 per category") for w in a.warnings)
    assert a.quantities()["max_nsd"] == pytest.approx(rep.loc[[("A", "gender"), ("B", "gender")], "nsd"].max())
    assert a.quantities()["nsd.T.gender"] == pytest.approx(0.5)  # still there, by name
    from fairvision.report.sections.dataset_compare import dataset_compare_section

    s = dataset_compare_section(a)
    bal = next(f for f in s.findings if f.sentence.startswith("gender: "))
    assert "T is" not in bal.sentence and "too small to judge: T (12 images)" in bal.sentence, bal.sentence
    diff = next(f for f in s.findings if "datasets" in f.sentence and "gender" in f.sentence)
    assert " in T" not in diff.sentence, diff.sentence  # the pair named is A and B

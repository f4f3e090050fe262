"""``fairvision audit model``: samples without a score are counted, tested by group and reported; predicted
classes that are no true class stop the run (exit 2, one line)."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.cli import main
from fairvision.errors import ColumnError


def _write(tmp_path, scores_text: str, samples=None):
    """40 samples, one per person: group a (s0..s19), group b (s20..s39)."""
    if samples is None:
        samples = pd.DataFrame({"sample_id": [f"s{i}" for i in range(40)], "g": ["a"] * 20 + ["b"] * 20})
    samples.to_csv(tmp_path / "samples.csv", index=False)
    (tmp_path / "scores.csv").write_text(scores_text)
    return tmp_path / "samples.csv", tmp_path / "scores.csv"


def _run(tmp_path, samples, scores, *extra):
    out = tmp_path / "out"
    rc = main(["audit", "model", "--samples", str(samples), "--scores", str(scores), "-a", "g", "--n-boot", "20",
               "--min-subjects", "2", "-o", str(out), *map(str, extra)])
    return rc, out


def _section(doc, sid):
    return next(s for s in doc["sections"] if s["id"] == sid)


def _block(section, name):
    return next(b for b in section["blocks"] if b.get("name") == name)


def test_samples_without_a_score_are_counted_tested_and_reported(tmp_path, capsys):
    # group a: s0..s5 not scored (three empty cells, three written NaN); group b: all scored
    lines = ["sample_id,recall"]
    for i in range(40):
        cell = "" if i < 3 else "NaN" if i < 6 else f"{0.5 + 0.01 * i:.2f}"
        lines.append(f"s{i},{cell}")
    samples, scores = _write(tmp_path, "\n".join(lines) + "\n")
    rc, out = _run(tmp_path, samples, scores)
    assert rc == 0
    stdout = capsys.readouterr().out
    # 6 of 40 left out, all in group a: Fisher's exact test of [[14, 6], [20, 0]]
    p = stats.fisher_exact([[14, 6], [20, 0]]).pvalue
    assert p < 0.05
    assert "scoring: 6 of 40 samples left out (no score: 6); the share left out differs by g" in stdout.splitlines()
    doc = json.loads((out / "report.json").read_text())
    model = _section(doc, "model")
    overview = _block(model, "overview")["values"]
    assert (overview["samples read"], overview["samples scored"], overview["samples left out"]) == (40, 34, 6)
    groups = _block(model, "groups_recall_g")
    rows = [dict(zip(groups["columns"], r)) for r in groups["data"]]
    assert [r["n_samples"] for r in rows] == [14, 20]  # the scored samples only
    cov = _section(doc, "model-coverage")
    tests = _block(cov, "coverage_tests")
    t = dict(zip(tests["columns"], tests["data"][0]))
    assert t["pvalue"] == pytest.approx(p)
    by_group = [dict(zip(_block(cov, "coverage_by_group")["columns"], r)) for r in _block(cov, "coverage_by_group")["data"]]
    assert [(r["n"], r["n_ok"]) for r in by_group] == [(20, 14), (20, 20)]
    reasons = _block(cov, "coverage_reasons")
    assert [dict(zip(reasons["columns"], r)) for r in reasons["data"]] == [{"reason": "no score", "n": 6}]
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any("succeeds less often for g = a (70%, 14 of 20)" in s for s in sentences), sentences


def test_partly_scored_samples_and_missing_classes_name_their_reason(tmp_path, capsys):
    rng = np.random.default_rng(1)
    samples = pd.DataFrame({"sample_id": [f"s{i}" for i in range(40)], "g": ["a", "b"] * 20,
                            "y": rng.choice(["cat", "dog"], 40)})
    samples.loc[7, "y"] = None  # no true class: left out of OD
    lines = ["sample_id,recall,lpips,pred"]
    for i in range(40):
        recall = "" if i in (1, 2) else f"{rng.random():.3f}"
        lpips = "" if i in (1, 3) else f"{rng.random():.3f}"
        lines.append(f"s{i},{recall},{lpips},{'cat' if i % 3 else 'dog'}")
    samples, scores = _write(tmp_path, "\n".join(lines) + "\n", samples)
    rc, out = _run(tmp_path, samples, scores, "--true-col", "y", "--pred-col", "pred", "--metric", "recall",
                   "--metric", "lpips")
    assert rc == 0
    # s1: no score at all; s2: recall only; s3: lpips only; s7: no true class (reasons sorted by count, then name)
    line = "scoring: 4 of 40 samples left out (no lpips score: 1, no recall score: 1, no score: 1 and 1 more reason)"
    assert line in capsys.readouterr().out.splitlines()
    doc = json.loads((out / "report.json").read_text())
    reasons = _block(_section(doc, "model-coverage"), "coverage_reasons")
    assert {r[0]: r[1] for r in reasons["data"]} == {"no lpips score": 1, "no recall score": 1, "no score": 1,
                                                     "no true class": 1}
    # two left out per group: the test finds no difference, the finding still gives the count and reasons
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any("succeeded for 90% of 40 samples (no lpips score: 1" in s for s in sentences), sentences


def test_nothing_left_out_prints_nothing_and_adds_no_section(tmp_path, capsys):
    lines = ["sample_id,recall"] + [f"s{i},{0.5 + 0.01 * i:.2f}" for i in range(40)]
    samples, scores = _write(tmp_path, "\n".join(lines) + "\n")
    rc, out = _run(tmp_path, samples, scores)
    assert rc == 0
    assert "left out" not in capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    assert [s["id"] for s in doc["sections"]] == ["model"]
    assert _block(_section(doc, "model"), "overview")["values"]["samples left out"] == 0


@pytest.mark.parametrize("where", ["scores", "samples"])
def test_predicted_classes_that_are_no_true_class_exit_2(tmp_path, capsys, where):
    samples = pd.DataFrame({"sample_id": [f"s{i}" for i in range(40)], "g": ["a", "b"] * 20,
                            "y": ["cat", "dog"] * 20})
    pred = np.array(["cat", "dog"] * 20, dtype=object)
    pred[[4, 9, 11]] = ["Cat", "0", "Cat"]  # spelt otherwise: would silently count as wrong
    lines = ["sample_id,recall" + (",pred" if where == "scores" else "")]
    for i in range(40):
        lines.append(f"s{i},0.5" + (f",{pred[i]}" if where == "scores" else ""))
    if where == "samples":
        samples["pred"] = pred
    samples_p, scores_p = _write(tmp_path, "\n".join(lines) + "\n", samples)
    rc, out = _run(tmp_path, samples_p, scores_p, "--true-col", "y", "--pred-col", "pred")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    named = scores_p if where == "scores" else samples_p
    assert err[0].startswith(f"error: {named}: row 5: column 'pred' predicts 2 classes not among the true classes in "
                             "'y': 'Cat', '0' (3 rows; known: 'cat', 'dog')")
    assert not (out / "report.json").exists()


def test_a_declared_class_the_samples_lack_is_a_valid_prediction(tmp_path):
    samples = pd.DataFrame({"sample_id": [f"s{i}" for i in range(40)], "g": ["a", "b"] * 20,
                            "y": ["cat", "dog"] * 20, "pred": ["cat", "dog", "bird", "cat"] * 10})
    lines = ["sample_id,recall"] + [f"s{i},0.5" for i in range(40)]
    samples_p, scores_p = _write(tmp_path, "\n".join(lines) + "\n", samples)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"attributes": {"y": {"categories": ["cat", "dog", "bird"]}}}))
    rc, out = _run(tmp_path, samples_p, scores_p, "--true-col", "y", "--pred-col", "pred", "--schema", schema)
    assert rc == 0 and (out / "report.json").is_file()


def test_duplicate_ids_in_the_sample_table_are_one_line_errors():
    from fairvision.io.scores import join_scores

    s = pd.DataFrame({"sample_id": ["a", "b", "a"], "g": ["x", "y", "x"]})
    with pytest.raises(ColumnError, match=r"^samples\.csv: row 3: sample_id 'a' appears twice$"):
        join_scores(s, pd.DataFrame({"sample_id": ["a", "b"], "m": [1.0, 2.0]}), samples_source="samples.csv")


def test_class_checks_compare_labels_as_text_whatever_their_number_type():
    from fairvision.errors import FairvisionError
    from fairvision.io.scores import check_known_classes, require_classes

    data = pd.DataFrame({"y": [1, 2, 1, None], "p": [1.0, 2.0, np.nan, 2.0]})
    check_known_classes(data, "p", ["1", "2"], source="t.csv", of="the true classes")  # 1.0 is class 1
    assert require_classes(data, "y", source="t.csv").tolist() == ["1", "2", "1"]
    with pytest.raises(FairvisionError, match=r"^t\.csv: label column 'y' has one class only \('1' in all 2 rows\): "):
        require_classes(data.iloc[[0, 2, 3]], "y", source="t.csv")
    with pytest.raises(ColumnError, match=r"^t\.csv: row 2: column 'p' predicts a class not among the true classes: "
                                          r"'2' \(2 rows; known: '1'\); hint$"):
        check_known_classes(data, "p", [1], source="t.csv", of="the true classes", hint="hint")

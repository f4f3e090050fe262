"""Bias-transfer study: subsets without predictions are counted, tested by family and reported; a label with one
class and predicted classes the label does not have stop the run (exit 2, one line)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.transfer import audit_transfer, read_design
from fairvision.audits.transfer.study import DEFAULTS as STUDY
from fairvision.cli import main
from fairvision.errors import ColumnError


def _table(n_subjects: int = 60, seed: int = 0) -> pd.DataFrame:
    """Two images per person; a third of the people F; a two-class label."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_subjects):
        g = "F" if s % 3 == 0 else "M"
        for k in range(2):
            rows.append({"sample_id": f"s{s}_{k}", "subject_id": f"p{s}", "gender": g,
                         "expr": rng.choice(["happy", "sad"])})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    """A design written by ``transfer subsets`` and a right prediction table for each of its subsets."""
    root = tmp_path_factory.mktemp("transfer")
    _table().to_csv(root / "t.csv", index=False)
    assert main(["transfer", "subsets", str(root / "t.csv"), "--label", "expr", "--attr", "gender",
                 "-o", str(root / "subs")]) == 0
    test = pd.read_csv(root / "subs" / "test.csv")
    rng = np.random.default_rng(1)
    (root / "preds").mkdir()
    for f in sorted((root / "subs" / "subsets").iterdir()):
        right = rng.random(len(test)) < 0.8
        pred = np.where(right, test["expr"], np.where(test["expr"] == "happy", "sad", "happy"))
        pd.DataFrame({"sample_id": test["sample_id"], "prediction": pred}).to_csv(root / "preds" / f"{f.stem}.csv",
                                                                                 index=False)
    return root


def _copy_preds(root: Path, dest: Path, skip=()) -> Path:
    dest.mkdir()
    for f in (root / "preds").iterdir():
        if f.stem not in skip:
            (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _audit(root: Path, preds: Path, out: Path, subs: Path | None = None):
    return main(["audit", "transfer", "--subsets", str(subs or root / "subs"), "--predictions", str(preds),
                 "-o", str(out), "--n-boot", "30"])


def test_subsets_without_predictions_are_counted_tested_by_family_and_reported(study_dir, tmp_path, capsys):
    design = read_design(study_dir / "subs")
    families = design.catalog["family"].value_counts()
    assert families.to_dict() == {"stratified": 4, "single": 2, "balanced": 1}
    preds = _copy_preds(study_dir, tmp_path / "preds", skip=("single_gender_F", "single_gender_M"))
    out = tmp_path / "study"
    assert _audit(study_dir, preds, out) == 0
    # both single-group subsets missing: success by family [[4, 0], [1, 0], [0, 2]], Pearson's chi-square (2 df)
    table = np.array([[4, 0], [1, 0], [0, 2]])
    p = stats.chi2_contingency(table, correction=False).pvalue
    assert p < 0.05
    line = "prediction step: 2 of 7 subsets left out (no prediction table: 2); the share left out differs by family"
    assert line in capsys.readouterr().out.splitlines()
    doc = json.loads((out / "report.json").read_text())
    cov = next(s for s in doc["sections"] if s["id"] == "transfer-coverage-prediction-step")
    tests = next(b for b in cov["blocks"] if b.get("name") == "coverage_tests")
    t = dict(zip(tests["columns"], tests["data"][0]))
    assert t["test"] == "chi-square" and t["pvalue"] == pytest.approx(p)
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any("prediction step succeeds less often for family = single (0%, 0 of 2)" in s for s in sentences), sentences
    assert any("left out 2 of 7 subsets (no prediction table: 2)" in s for s in sentences), sentences


def test_all_predictions_given_prints_no_drop_line(study_dir, tmp_path, capsys):
    assert _audit(study_dir, study_dir / "preds", tmp_path / "study") == 0
    assert "left out" not in capsys.readouterr().out
    doc = json.loads((tmp_path / "study" / "report.json").read_text())
    assert not any(s["id"].startswith("transfer-coverage") for s in doc["sections"])


def test_reasons_for_skipped_subsets_are_kept(study_dir):
    design = read_design(study_dir / "subs")
    preds = {p.stem: pd.read_csv(p) for p in (study_dir / "preds").iterdir() if p.stem != "balanced_gender"}
    res = audit_transfer(design, preds, settings=STUDY.replace(n_boot=10),
                         skipped={"balanced_gender": "one expr class in the training subset"})
    cov = res.coverage[0]
    assert (cov.n, cov.n_left_out, cov.unit) == (7, 1, "subsets")
    assert cov.reasons["n"].to_dict() == {"one expr class in the training subset": 1}
    assert res.left_out == [cov]


def test_a_label_with_one_class_stops_the_design(tmp_path, capsys):
    t = _table(20).assign(expr="happy")
    t.to_csv(tmp_path / "t.csv", index=False)
    rc = main(["transfer", "subsets", str(tmp_path / "t.csv"), "--label", "expr", "--attr", "gender",
               "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: {tmp_path / 't.csv'}: label column 'expr' has one class only ('happy' in all "
                             "40 rows used)")
    assert not (tmp_path / "o").exists()


def test_a_test_set_with_one_class_stops_the_study(study_dir, tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    for f in (study_dir / "subs").rglob("*"):
        if f.is_file():
            (subs / f.relative_to(study_dir / "subs")).parent.mkdir(parents=True, exist_ok=True)
            (subs / f.relative_to(study_dir / "subs")).write_bytes(f.read_bytes())
    test = pd.read_csv(subs / "test.csv").assign(expr="sad")
    test.to_csv(subs / "test.csv", index=False)
    rc = _audit(study_dir, study_dir / "preds", tmp_path / "study", subs=subs)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: {subs / 'test.csv'}: label column 'expr' has one class only ('sad' in all "
                             f"{len(test)} rows)")
    assert not (tmp_path / "study").exists()


def test_predicted_classes_the_label_does_not_have_exit_2(study_dir, tmp_path, capsys):
    preds = _copy_preds(study_dir, tmp_path / "preds")
    p = pd.read_csv(preds / "balanced_gender.csv")
    p.loc[2, "prediction"] = "Happy"
    p.loc[5, "prediction"] = "1"
    p.loc[7, "prediction"] = "Happy"
    p.to_csv(preds / "balanced_gender.csv", index=False)
    rc = _audit(study_dir, preds, tmp_path / "study")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"error: {preds / 'balanced_gender.csv'}: row 3: column 'prediction' predicts 2 classes "
                             "not among the classes of the label 'expr': 'Happy', '1' (3 rows; known: 'happy', 'sad')")
    assert not (tmp_path / "study").exists()


def test_repeated_prediction_ids_are_an_error(study_dir):
    design = read_design(study_dir / "subs")
    preds = {p.stem: pd.read_csv(p) for p in (study_dir / "preds").iterdir()}
    dup = preds["balanced_gender"]
    preds["balanced_gender"] = pd.concat([dup, dup.iloc[[0]]], ignore_index=True)
    preds["balanced_gender"].attrs["source"] = "balanced_gender.csv"
    with pytest.raises(ColumnError, match=rf"^balanced_gender\.csv: row {len(dup) + 1}: sample_id "
                                          rf"'{dup['sample_id'].iloc[0]}' appears twice$"):
        audit_transfer(design, preds, settings=STUDY.replace(n_boot=10))

"""`fairvision diagnose ...` commands: reports written, one-line errors for bad input."""

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main
from test_diagnosis_audits import synth


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("diag")
    df = synth(150, 2).reset_index(drop=True)
    df.insert(0, "sample_id", [f"s{i}" for i in range(len(df))])
    df.drop(columns="score").to_csv(d / "samples.csv", index=False)
    df[["sample_id", "score"]].to_csv(d / "scores.csv", index=False)
    return d


def _report(out):
    return json.loads((out / "report.json").read_text())


def _texts(doc):
    return " ".join(b.get("text", "") for s in doc["sections"] for b in s["blocks"])


def test_errors_command(tables, tmp_path):
    out = tmp_path / "errors"
    rc = main(["diagnose", "errors", "--samples", str(tables / "samples.csv"), "--scores", str(tables / "scores.csv"),
               "-m", "score", "-f", "skin_tone", "-f", "lighting", "-f", "pose", "-f", "visible_keypoints",
               "--n-boot", "200", "--trees", "30", "-o", str(out)])
    assert rc == 0
    doc = _report(out)
    assert "Worst rule: lighting = dim" in _texts(doc)
    assert (out / "report.html").exists() and any((out / "tables").glob("*rules.parquet"))


def test_patterns_command_saves_groups(tables, tmp_path):
    out, groups = tmp_path / "patterns", tmp_path / "groups.csv"
    rc = main(["diagnose", "patterns", "-s", str(tables / "samples.csv"), "--scores", str(tables / "scores.csv"),
               "-m", "score", "-a", "skin_tone", "-a", "lighting", "-a", "pose", "--save-groups", str(groups), "-o", str(out)])
    assert rc == 0
    g = pd.read_csv(groups)
    assert set(g["error_pattern"]) == {"matches", "other"}
    assert (g.loc[g["error_pattern"] == "matches", "lighting"] == "dim").all()


def test_confounders_command(tables, tmp_path):
    out = tmp_path / "conf"
    rc = main(["diagnose", "confounders", "-s", str(tables / "samples.csv"), "--scores", str(tables / "scores.csv"),
               "-m", "score", "--attr", "skin_tone", "--strata", "lighting", "-o", str(out)])
    assert rc == 0
    assert "No significant skin tone difference once lighting is held fixed" in _texts(_report(out))


def test_counterfactual_command(tmp_path):
    from test_diagnosis_counterfactual import _table4_example

    p = tmp_path / "pred.csv"
    _table4_example().to_csv(p, index=False)
    rc = main(["diagnose", "counterfactual", "--predictions", str(p), "-o", str(tmp_path / "cf")])
    assert rc == 0
    doc = _report(tmp_path / "cf")
    acc = next(b for s in doc["sections"] for b in s["blocks"] if b.get("name") == "accuracy")
    assert "+light / M" in acc["columns"]


def test_bad_input_gives_one_line_error(tables, tmp_path, capsys):
    rc = main(["diagnose", "errors", "-s", str(tables / "samples.csv"), "--scores", str(tables / "scores.csv"),
               "-m", "nope", "-o", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error:") and "nope" in err and "\n" not in err
    rc = main(["diagnose", "confounders", "-s", str(tables / "samples.csv"), "--scores", str(tables / "scores.csv"),
               "-m", "score", "--attr", "skin_tone", "--strata", "missing_col", "-o", str(tmp_path / "y")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "missing_col" in err
    rc = main(["diagnose", "counterfactual", "--predictions", str(tmp_path / "none.csv"), "-o", str(tmp_path / "z")])
    assert rc == 2 and "no such file" in capsys.readouterr().err


@pytest.mark.vision
def test_transect_command_writes_images_and_checks(tmp_path):
    pytest.importorskip("mediapipe")
    from fairvision.datasets import load_portraits
    from fairvision.io.images import read_image

    paths = list(load_portraits()["image_path"][:3])
    out = tmp_path / "tr"
    rc = main(["diagnose", "transect", *paths, "--axis", "L", "--delta", "-10", "-o", str(out)])
    assert rc == 0
    checks = pd.read_csv(out / "checks.csv")
    done = checks[checks["status"] == "done"]
    assert len(done) >= 2 and done["ok"].all()
    assert np.all(np.abs(done["achieved"] + 10) <= 1.0)
    for rel in done["output"]:
        img = read_image(out / rel)
        assert img.shape == (500, 500, 3)

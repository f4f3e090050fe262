"""``fairvision audit model`` through fairvision.cli.main and a subprocess."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main


@pytest.fixture()
def tables(tmp_path):
    rng = np.random.default_rng(0)
    n_subj = 240
    subj = np.repeat(np.arange(n_subj), 2)
    age = rng.choice(["18-29", "30-39", "60+"], n_subj)[subj]
    gender = rng.choice(["he", "she"], n_subj)[subj]
    score = np.clip(rng.normal(0.8, 0.08, len(subj)), 0, 1)
    score[(age == "60+") & (gender == "he")] -= 0.25
    ids = [f"s{i}" for i in range(len(subj))]
    pd.DataFrame({"sample_id": ids, "subject_id": subj.astype(str), "age": age, "gender": gender}).to_csv(
        tmp_path / "samples.csv", index=False)
    pd.DataFrame({"sample_id": ids[::-1], "recall": score[::-1], "lpips": (1 - score)[::-1]}).to_csv(
        tmp_path / "scores.csv", index=False)
    return tmp_path


def _run(*args):
    return main(["audit", "model", *map(str, args)])


def test_report_written_with_tables_and_figures(tables, capsys):
    out = tables / "out"
    rc = _run("--samples", tables / "samples.csv", "--scores", tables / "scores.csv", "-a", "age", "-a", "gender",
              "--max-k", "2", "--lower-is-better", "lpips", "--n-boot", "200", "--correction", "bonferroni", "-o", out)
    assert rc == 0
    doc = json.loads((out / "report.json").read_text())
    sec = doc["sections"][0]
    assert sec["id"] == "model"
    names = [b.get("name") for b in sec["blocks"]]
    assert "top_disparities" in names and "forest_recall_age × gender" in names
    top = next(b for b in sec["blocks"] if b.get("name") == "top_disparities")
    row = dict(zip(top["columns"], top["data"][0]))
    assert row["intersection"] == "age × gender" and row["worst_group"] == "60+ × he"
    assert (out / "tables" / "model__top-disparities.parquet").exists()
    html = (out / "report.html").read_text()
    assert "<svg" in html and "<img" not in html  # no face images
    assert "largest disparity" in capsys.readouterr().out


def test_fail_if_exits_1_after_writing_report(tables):
    out = tables / "gate"
    cmd = [sys.executable, "-m", "fairvision", "audit", "model", "--samples", str(tables / "samples.csv"),
           "--scores", str(tables / "scores.csv"), "-a", "age", "-a", "gender", "--max-k", "2", "--n-boot", "50",
           "--metric", "recall", "--correction", "bonferroni", "--fail-if", "disparity>0.2", "--fail-if", "recall.ratio<0.1", "-o", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert (out / "report.html").exists()
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("fail-if: condition met: disparity>0.2") and "ratio" not in lines[-1]
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["failed"] == ["disparity>0.2"]
    p = subprocess.run(cmd[:-6] + ["--fail-if", "disparity>0.9", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_fail_if_through_main_returns_1(tables):
    code = _run("--samples", tables / "samples.csv", "--scores", tables / "scores.csv", "-a", "age", "--n-boot", "0",
             "--correction", "bonferroni", "--fail-if", "significant_pairs>=1", "-o", tables / "o2")
    assert code == 1


@pytest.mark.parametrize("change, message", [
    ("missing", "no scores for sample_id"),
    ("duplicate", "scores.csv: row 481: duplicate sample_id 's479'"),
    ("bad_fail_if", "expected NAME OP NUMBER"),
    ("unknown_quantity", "unknown quantity"),
    ("bad_metric", "no metric column"),
    ("bad_attr", "missing column 'nope'"),
])
def test_user_errors_are_one_line_exit_2(tables, capsys, change, message):
    scores = pd.read_csv(tables / "scores.csv")
    args = ["--samples", tables / "samples.csv", "--scores", tables / "scores.csv", "-a", "age", "--n-boot", "0"]
    if change == "missing":
        scores.iloc[1:].to_csv(tables / "scores.csv", index=False)
    elif change == "duplicate":
        pd.concat([scores, scores.iloc[:1]]).to_csv(tables / "scores.csv", index=False)
    elif change == "bad_fail_if":
        args += ["--fail-if", "disparity is big"]
    elif change == "unknown_quantity":
        args += ["--fail-if", "nonsense>1"]
    elif change == "bad_metric":
        args += ["--metric", "nope"]
    elif change == "bad_attr":
        args += ["-a", "nope"]
    rc = _run(*args, "-o", tables / "err")
    # lines of stages that finished may come first; the error is one line, the last
    err = [line for line in capsys.readouterr().err.strip().splitlines() if " of " not in line or "error:" in line]
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_help_mentions_options():
    p = subprocess.run([sys.executable, "-m", "fairvision", "audit", "model", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0
    for opt in ("--samples", "--scores", "--attr", "--fail-if", "--lower-is-better", "--min-subjects", "--correction"):
        assert opt in p.stdout


def test_on_bundled_fairface_demo_with_planted_gap(tmp_path):
    """Real FairFace labels (9 age groups x 2 genders, 30 each); a synthetic score lower for 70+ women."""
    from fairvision.datasets import load_demo

    demo = load_demo()
    rng = np.random.default_rng(7)
    score = np.clip(rng.normal(0.85, 0.05, len(demo)), 0, 1)
    score[((demo.age == "70+") & (demo.gender == "Female")).to_numpy()] -= 0.3
    pd.DataFrame({"sample_id": demo.sample_id, "recall": score}).to_csv(tmp_path / "scores.csv", index=False)
    from fairvision.datasets import demo_path

    samples = demo_path() / "fairface" / "ground_truth.json"
    rc = _run("--samples", samples, "--scores", tmp_path / "scores.csv", "-a", "age", "-a", "gender",
              "--n-boot", "100", "--correction", "bonferroni", "-o", tmp_path / "out")
    assert rc == 0
    top = pd.read_parquet(tmp_path / "out" / "tables" / "model__top-disparities.parquet")
    assert top.iloc[0]["worst_group"] == "70+ × Female"
    assert top.iloc[0]["disparity"] == pytest.approx(0.3 / 0.85, abs=0.06)

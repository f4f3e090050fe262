"""The `fairvision audit dataset` command: outputs, and one-line errors for bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fairvision.cli import main
from fairvision.datasets import demo_path

GT = demo_path("fairface") / "ground_truth.json"


def run(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_audit_demo_writes_report(tmp_path, capsys):
    out = tmp_path / "rep"
    code, stdout, err = run(["audit", "dataset", GT, "-a", "age", "-a", "gender", "-o", out, "--n-boot", "200"], capsys)
    assert code == 0, err
    assert (out / "report.html").exists() and (out / "report.json").exists()
    doc = json.loads((out / "report.json").read_text())
    assert doc["schema_version"] == "1.0"
    sec = doc["sections"][0]
    rep = next(b for b in sec["blocks"] if b.get("name") == "representation")
    nsd_col = rep["columns"].index("nsd")
    assert all(row[nsd_col] == 0.0 for row in rep["data"])
    tables = sorted(p.name for p in (out / "tables").iterdir())
    assert "dataset__groups-age-x-gender.parquet" in tables
    inter = pd.read_parquet(out / "tables" / "dataset__groups-age-x-gender.parquet")
    assert len(inter) == 18 and (inter["n_samples"] == 30).all()
    html = (out / "report.html").read_text()
    assert "<img" not in html  # no face images unless asked


def test_show_images_embeds_thumbnails(tmp_path, capsys):
    out = tmp_path / "rep"
    code, _, err = run(["audit", "dataset", GT, "-a", "gender", "-o", out, "--n-boot", "0", "--show-images"], capsys)
    assert code == 0, err
    assert "data:image/png;base64" in (out / "report.html").read_text()


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "name,content,args,pattern",
    [
        ("t.csv", "sample_id,gender\na,F\nb,M\n", ["-a", "age"], r"missing column 'age'"),
        ("t.csv", "sample_id,gender\n", ["-a", "gender"], r"t.csv: the table has no rows|t.csv: the file is empty"),
        ("t.csv", "sample_id,gender\na,F\nb,\n", ["-a", "gender"], r"row 2: column 'gender' is empty"),
        ("t.csv", "sample_id,gender\na,F\na,M\n", ["-a", "gender"], r"row 2: duplicate sample_id 'a'"),
        ("t.csv", "sample_id,image_path,gender\na,nope.jpg,F\n", ["-a", "gender"], r"row 1: image not found: .*nope.jpg"),
        ("t.json", '[{"id": "a", "gender": "F"},\n {"id": "b" "gender": "M"}]', ["-a", "gender"], r"t.json: malformed JSON at line 2"),
        ("t.xyz", "whatever", ["-a", "gender"], r"unknown table format"),
    ],
)
def test_bad_input_one_line_error(tmp_path, capsys, name, content, args, pattern):
    p = _write(tmp_path, name, content)
    code, out, err = run(["audit", "dataset", p, *args, "-o", tmp_path / "out"], capsys)
    assert code == 2
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    import re
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "report.html").exists()


def test_unknown_value_against_declared_schema(tmp_path, capsys):
    t = _write(tmp_path, "t.csv", "sample_id,gender\na,F\nb,X\n")
    s = _write(tmp_path, "s.json", json.dumps({"attributes": {"gender": {"categories": ["F", "M"]}}}))
    code, _, err = run(["audit", "dataset", t, "-a", "gender", "--schema", s, "-o", tmp_path / "o"], capsys)
    assert code == 2 and "row 2: column 'gender' has unknown value 'X'" in err


def test_missing_file(tmp_path, capsys):
    code, _, err = run(["audit", "dataset", tmp_path / "none.csv", "-a", "g", "-o", tmp_path / "o"], capsys)
    assert code == 2 and "no such file" in err


def test_failed_run_keeps_previous_report(tmp_path, capsys):
    out = tmp_path / "rep"
    good = _write(tmp_path, "good.csv", "sample_id,gender\na,F\nb,M\nc,F\n")
    assert run(["audit", "dataset", good, "-a", "gender", "-o", out, "--n-boot", "0"], capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    bad = _write(tmp_path, "bad.csv", "sample_id,gender\na,F\na,M\n")
    assert run(["audit", "dataset", bad, "-a", "gender", "-o", out], capsys)[0] == 2
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert before == after
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name]


def test_console_script_help_and_exit_code(tmp_path):
    exe = Path(sys.executable).with_name("fairvision")
    r = subprocess.run([str(exe), "audit", "dataset", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--attr" in r.stdout and "--subject-col" in r.stdout
    r = subprocess.run([str(exe), "audit", "dataset", str(tmp_path / "x.csv"), "-a", "g"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "Traceback" not in r.stderr


@pytest.mark.vision
def test_measure_skin_crosses_skin_colour_with_attributes(tmp_path, capsys):
    from fairvision.datasets import load_demo

    df = load_demo()
    sub = pd.concat([df[df.gender == g].head(12) for g in ("Female", "Male")])
    table = tmp_path / "sub.csv"
    sub.to_csv(table, index=False)
    out = tmp_path / "rep"
    code, _, err = run(["audit", "dataset", table, "-a", "gender", "-o", out, "--n-boot", "50", "--measure-skin"], capsys)
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    ids = [s["id"] for s in doc["sections"]]
    assert ids == ["dataset", "skin-colour", "skin-coverage"]
    inter = pd.read_parquet(out / "tables" / "dataset__groups-gender-x-skin-tone.parquet")
    assert set(inter["gender"]) == {"Female", "Male"}
    assert set(inter["skin_tone"]) >= {"light", "dark"}
    assert inter["n_samples"].sum() == 24
    cov = pd.read_parquet(out / "tables" / "skin-coverage__coverage-by-group.parquet")
    assert cov["n"].sum() == 24


@pytest.mark.vision
def test_demo_main_job(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, err = run(["demo", "-o", out, "--n-boot", "100"], capsys)
    assert code == 0, err
    assert f"report: {(out / 'report.html').resolve()}" in stdout
    lines = stdout.strip().splitlines()  # the main report's paths come last, after the probe demo's
    assert lines[-2:] == [f"report: {(out / 'report.html').resolve()}", f"json:   {(out / 'report.json').resolve()}"]
    assert any(line.startswith("zero-shot probe demo") for line in lines[:-2])
    doc = json.loads((out / "report.json").read_text())
    blocks = {b.get("name"): b for s in doc["sections"] for b in s["blocks"]}
    cov = blocks["coverage_overall"]["values"]
    assert cov["images"] == 540 and cov["rate"] >= 0.95


def test_embeddings_add_diversity_and_missing_ids_fail(tmp_path, capsys):
    import numpy as np

    t = _write(tmp_path, "t.csv", "sample_id,gender\na,F\nb,M\nc,F\nd,M\n")
    np.savez(tmp_path / "e.npz", embeddings=np.eye(4), ids=np.array(["d", "c", "b", "a"]))
    code, _, err = run(["audit", "dataset", t, "-a", "gender", "--embeddings", tmp_path / "e.npz", "-o", tmp_path / "o", "--n-boot", "0"], capsys)
    assert code == 0, err
    div = pd.read_parquet(tmp_path / "o" / "tables" / "dataset__diversity.parquet")
    assert div.loc[div.group == "(all)", "vendi"].item() == pytest.approx(4.0)
    np.savez(tmp_path / "e2.npz", embeddings=np.eye(3), ids=np.array(["a", "b", "c"]))
    code, _, err = run(["audit", "dataset", t, "-a", "gender", "--embeddings", tmp_path / "e2.npz", "-o", tmp_path / "o2"], capsys)
    assert code == 2 and "no embedding for sample_id 'd'" in err


def test_fail_if_gates_the_dataset_audit(tmp_path, capsys):
    t = _write(tmp_path, "t.csv", "sample_id,gender\n" + "".join(f"s{i},{'F' if i < 20 else 'M'}\n" for i in range(100)))
    # shares 0.2 / 0.8: NSD = std([.2,.8]) * 2 / 1 = 0.6; imbalance ratio 4
    code, _, err = run(["audit", "dataset", t, "-a", "gender", "-o", tmp_path / "o", "--n-boot", "0",
                        "--fail-if", "nsd>0.5", "--fail-if", "imbalance_ratio.gender>=5"], capsys)
    assert code == 1
    assert err.strip().splitlines()[-1] == "fail-if: condition met: nsd>0.5 (value 0.6)"
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert doc["meta"]["failed"] == ["nsd>0.5"]
    code, _, _ = run(["audit", "dataset", t, "-a", "gender", "-o", tmp_path / "o", "--n-boot", "0", "--fail-if", "nsd>0.7"], capsys)
    assert code == 0
    code, _, err = run(["audit", "dataset", t, "-a", "gender", "-o", tmp_path / "o", "--fail-if", "bogus>1"], capsys)
    assert code == 2 and "unknown quantity 'bogus'" in err

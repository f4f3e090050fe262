"""The skin commands together: one face default and one results-store key for ``skin measure`` and ``audit dataset
--measure-skin``, the README's skin commands run as written, ``skin report --samples``, the README's store query,
and the one-line summaries (measured / from the store / failed; why images were left out) on real photos."""

import inspect
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.datasets import load_demo, load_portraits
from fairvision.errors import ColumnError
from fairvision.skin.batch_tables import FAILURE_REASONS, failure_reasons, join_samples, summarize, summary_line

README = Path(__file__).resolve().parents[1] / "README.md"


def run(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _fairface(n_per_gender: int) -> pd.DataFrame:
    df = load_demo()
    return pd.concat([df[df.gender == g].head(n_per_gender) for g in ("Female", "Male")]).reset_index(drop=True)


def _photos(tmp_path: Path, rows: pd.DataFrame, folder: str = "photos") -> pd.DataFrame:
    """Copies of bundled FairFace photos in ``tmp_path/folder`` and their sample table (sample_id = file stem)."""
    (tmp_path / folder).mkdir()
    out = []
    for path, gender in zip(rows.image_path, rows.gender):
        dst = tmp_path / folder / Path(path).name
        dst.write_bytes(Path(path).read_bytes())
        out.append((dst.stem, f"{folder}/{dst.name}", str(gender)))
    return pd.DataFrame(out, columns=["sample_id", "image_path", "gender"])


def _readme_block(heading: str, lang: str = "bash") -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    block = re.search(rf"```{lang}\n(.*?)```", text[start:], re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip()]


def _argv(line: str) -> list[str]:
    argv = shlex.split(line, comments=True)
    assert argv[0] == "fairvision"
    return argv[1:]


def _store_rows(store: Path) -> int:
    from fairvision.io.store import ResultsStore

    return int(ResultsStore(store).info().set_index("stage").loc["skin", "rows"])


# ----------------------------------------------------------------- one default, one key


def test_every_command_has_the_same_face_default():
    from fairvision.cli.dataset import audit_dataset_cmd
    from fairvision.cli.skin import compare_cmd, measure_cmd, report_cmd
    from fairvision.skin.batch import DEFAULT_FACES, MeasureParams

    assert DEFAULT_FACES == "largest" and MeasureParams().faces == DEFAULT_FACES
    defaults = [inspect.signature(cmd).parameters[name].default.default
                for cmd, name in ((measure_cmd, "faces"), (report_cmd, "faces"), (compare_cmd, "faces"),
                                  (audit_dataset_cmd, "skin_faces"))]
    assert defaults == [DEFAULT_FACES] * 4


@pytest.mark.vision
def test_dataset_audit_then_measure_measures_nothing_again(tmp_path, capsys, monkeypatch):
    """``audit dataset --measure-skin`` first, ``skin measure`` second (the other order is the README's, below)."""
    monkeypatch.chdir(tmp_path)
    _photos(tmp_path, _fairface(2)).to_csv("samples.csv", index=False)
    store = tmp_path / "store"
    code, _, err = run(["audit", "dataset", "samples.csv", "-a", "gender", "--measure-skin", "--store", store,
                        "--workers", "1", "--n-boot", "0", "-o", "report"], capsys)
    assert code == 0, err
    assert "skin colour: 4 images: 4 measured, 0 no face, 0 too few skin pixels, 0 failed\n" in err
    assert _store_rows(store) == 4
    code, out, err = run(["skin", "measure", "photos", "-o", "skin.parquet", "-j", "1", "--no-progress",
                          "--store", store], capsys)
    assert code == 0, err
    assert "4 images: 4 measured, 0 no face, 0 too few skin pixels, 0 failed (4 from the store)" in out
    assert _store_rows(store) == 4  # nothing measured, nothing written
    assert (pd.read_parquet("skin.parquet").n_faces == 1).all()


# ----------------------------------------------------------------- the README's commands


@pytest.mark.vision
def test_readme_skin_commands_chain_as_written(tmp_path, capsys, monkeypatch):
    lines = _readme_block("### Apparent skin colour")
    argvs = [_argv(ln) for ln in lines]
    assert [a[:2] for a in argvs] == [["skin", "measure"], ["skin", "report"], ["skin", "compare"],
                                      ["audit", "dataset"]]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAIRVISION_STORE", str(tmp_path / "store"))  # the commands' default store
    _photos(tmp_path, _fairface(3)).to_csv("samples.csv", index=False)
    portraits = load_portraits()
    for folder, rows in (("training", portraits.head(3)), ("generated", portraits.iloc[3:6])):
        (tmp_path / folder).mkdir()
        for p in rows.image_path:
            (tmp_path / folder / Path(p).name).write_bytes(Path(p).read_bytes())
    results = [run(argv, capsys) for argv in argvs]
    for line, (code, _, err) in zip(lines, results):
        assert code == 0, f"{line}\n{err}"
    assert "6 images: 6 measured" in results[0][1]
    assert len(list((tmp_path / "qa").glob("*.png"))) == 6
    doc = json.loads((tmp_path / "skin-report" / "report.json").read_text())
    by_group = pd.read_parquet(tmp_path / "skin-report" / "tables" / "skin-colour__by-group.parquet")
    assert doc["meta"]["by"] == "gender"
    assert by_group.groupby("gender", observed=True)["count"].sum().to_dict() == {"Female": 3, "Male": 3}
    assert "chi-square(" in results[2][1]
    assert "skin colour: 6 images: 6 measured, 0 no face, 0 too few skin pixels, 0 failed (6 from the store)" \
        in results[3][2]


@pytest.mark.vision
def test_readme_store_query_counts_images(tmp_path, capsys):
    """The same photos measured with two face choices, and again under other ids with their subjects (as a dataset
    audit with a subject column records them): the query counts each image once per parameter set (rows would
    count it twice in each, four times in all)."""
    from fairvision.skin.batch import MeasureParams, measure_images

    query_line = next(ln for ln in _readme_block("### Results store") if ln.startswith("fairvision store query"))
    argv = _argv(query_line)
    store = tmp_path / "store"
    rows = _fairface(3)
    renamed = rows.assign(sample_id=["copy_" + s for s in rows.sample_id],
                          subject_id=["p_" + s for s in rows.sample_id])
    tables = {}
    for faces in ("largest", "all"):
        for table in (rows, renamed):
            tables[faces] = measure_images(table.drop(columns="gender"), params=MeasureParams(faces=faces),
                                           store=store, progress=False, categories=False,
                                           settings=AuditSettings(workers=1))
    assert _store_rows(store) == 4 * len(rows)
    out_csv = tmp_path / "tones.csv"
    code, out, err = run([*argv[:-1], str(out_csv), "--store", store], capsys)
    assert code == 0, err
    got = pd.read_csv(out_csv)
    from fairvision.skin.batch import params_hash

    for faces, t in tables.items():
        params = params_hash(MeasureParams(faces=faces).to_dict())[:12]
        mine = got[got.params == params].set_index("skin_tone")["images"].to_dict()
        ok = t[t.ok]
        expected = {"light": int((ok.L >= 60).sum()), "dark": int((ok.L < 60).sum())}
        assert mine == {k: v for k, v in expected.items() if v}
    assert got["images"].sum() == 2 * len(rows)


# ----------------------------------------------------------------- skin report --samples


def test_join_samples_by_file_then_by_id(tmp_path):
    a, b = tmp_path / "a.jpg", tmp_path / "b.jpg"
    a.write_bytes(b"1")
    b.write_bytes(b"2")
    measured = pd.DataFrame({"sample_id": ["a", "b"], "image_path": [str(a), str(b)], "L": [50.0, 70.0],
                             "hue": [50.0, 60.0], "ok": [True, True], "gender": ["old", "old"]})
    # by file: the sample table's own ids differ, its relative-looking path resolves to the same file
    samples = pd.DataFrame({"sample_id": ["p2", "p1"], "image_path": [str(tmp_path / "." / "b.jpg"), str(a)],
                            "gender": ["m", "f"]})
    got = join_samples(measured, samples)
    assert got.gender.tolist() == ["f", "m"] and got.attrs["joined_by"] == "image_path"
    assert got.L.tolist() == [50.0, 70.0] and got.sample_id.tolist() == ["a", "b"]
    # by sample_id: no paths, or a path named twice (two people in one photo)
    assert join_samples(measured, samples.assign(sample_id=["b", "a"]).drop(columns="image_path")).gender.tolist() \
        == ["f", "m"]
    twice = pd.DataFrame({"sample_id": ["a", "b"], "image_path": [str(a), str(a)], "gender": ["f", "m"]})
    assert join_samples(measured, twice).attrs["joined_by"] == "sample_id"
    with pytest.raises(ColumnError, match=r"m\.parquet: 1 of 2 images have no row in s\.csv .*sample_id 'b' \(b\.jpg\)"):
        join_samples(measured, samples.iloc[1:], source="m.parquet", samples_source="s.csv")
    with pytest.raises(ColumnError, match="s.csv: column 'L' is a measurement column of m.parquet"):
        join_samples(measured, samples.assign(L=1), source="m.parquet", samples_source="s.csv")


@pytest.mark.vision
def test_skin_report_samples_errors_name_the_attribute(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _photos(tmp_path, _fairface(1)).to_csv("samples.csv", index=False)
    code, _, err = run(["skin", "measure", "photos", "-o", "skin.parquet", "-j", "1", "--no-progress", "--no-store"],
                       capsys)
    assert code == 0, err
    code, _, err = run(["skin", "report", "skin.parquet", "--by", "gender", "-o", "r"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: skin.parquet: no column 'gender' for --by;") and "--samples TABLE" in err
    code, _, err = run(["skin", "report", "skin.parquet", "--samples", "samples.csv", "--by", "age", "-o", "r"], capsys)
    assert code == 2 and err.startswith("error: samples.csv: no column 'age' for --by (and skin.parquet has none)")
    # images measured first: the sample table is checked before any work
    code, _, err = run(["skin", "report", "photos", "--samples", "samples.csv", "--by", "age", "-o", "r",
                        "--no-store"], capsys)
    assert code == 2 and err.startswith("error: samples.csv: no column 'age' for --by; columns are sample_id, "
                                        "image_path, gender")
    code, _, err = run(["skin", "report", "photos", "--samples", "samples.csv", "--by", "gender", "-o", "r",
                        "--no-store", "--workers", "1"], capsys)
    assert code == 0, err
    assert "photos: 2 images: 2 measured, 0 no face" in err
    by_group = pd.read_parquet(tmp_path / "r" / "tables" / "skin-colour__by-group.parquet")
    assert by_group.groupby("gender", observed=True)["count"].sum().to_dict() == {"Female": 1, "Male": 1}


# ----------------------------------------------------------------- summaries and reasons


def test_failure_reasons_and_summary_line():
    res = pd.DataFrame({
        "ok": [True, False, False, False, False, False, False],
        "flags": ["multiple_faces", "no_face", "too_few_pixels", "unreadable_image", "image_too_large", "error", ""],
        "reason": [None, "no face found", "too few skin pixels (12 < 200)", "x.jpg: not an image", "too large",
                   "ValueError: boom", "too few skin pixels (3 < 200)"],
        "from_cache": [True, True, False, False, False, False, False],
    })
    why = failure_reasons(res)
    assert why.tolist() == [None, "no face found", "too few skin pixels", "unreadable image", "image too large",
                            FAILURE_REASONS["error"], "too few skin pixels"]
    s = summarize(res)
    assert (s["measured"], s["no_face"], s["too_few_pixels"], s["failed"], s["from_cache"]) == (1, 1, 2, 3, 2)
    assert summary_line(s) == "7 images: 1 measured, 1 no face, 2 too few skin pixels, 3 failed (2 from the store)"


@pytest.mark.vision
def test_dataset_audit_says_what_it_left_out_and_why(tmp_path, capsys, monkeypatch):
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    samples = _photos(tmp_path, _fairface(3))
    Image.new("RGB", (200, 200), (128, 128, 128)).save(tmp_path / "photos" / "grey.jpg")  # no face
    (tmp_path / "photos" / "broken.jpg").write_bytes(b"not an image at all")
    samples = pd.concat([samples, pd.DataFrame({"sample_id": ["grey", "broken"],
                                                "image_path": ["photos/grey.jpg", "photos/broken.jpg"],
                                                "gender": ["Female", "Female"]})])
    samples.to_csv("samples.csv", index=False)
    code, _, err = run(["audit", "dataset", "samples.csv", "-a", "gender", "--measure-skin", "--no-store",
                        "--workers", "1", "--n-boot", "0", "-o", "report"], capsys)
    assert code == 0, err
    assert "skin colour: 8 images: 6 measured, 1 no face, 0 too few skin pixels, 1 failed" in err
    assert "skin measurement: 2 of 8 images left out (no face found: 1, unreadable image: 1)" in err
    reasons = pd.read_parquet(tmp_path / "report" / "tables" / "skin-coverage__coverage-reasons.parquet")
    assert dict(zip(reasons["reason"], reasons["n"])) == {"no face found": 1, "unreadable image": 1}
    notes = [b.get("text", "") for s in json.loads((tmp_path / "report" / "report.json").read_text())["sections"]
             if s["id"] == "skin-colour" for b in s["blocks"]]
    assert any("2 of 8 images are left out: no skin colour measurement, or no hue to place them in a cell (no face "
               "found: 1, unreadable image: 1)" in n for n in notes), notes
    cov = pd.read_parquet(tmp_path / "report" / "tables" / "skin-coverage__coverage-by-group.parquet")
    assert cov.set_index("group")["n"].to_dict() == {"Female": 5, "Male": 3}

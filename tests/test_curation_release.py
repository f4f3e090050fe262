"""``fairvision curate release`` (docs/METHODS.md §13.10) on constructed inputs with known answers: dates to the
month, GPS columns dropped and EXIF GPS gone from a JPEG (read back with PIL), keyed pseudonyms consistent across
two tables (recomputed here with the standard library's hmac), the key needed to reproduce them, the mapping and
the report kept outside the release, a hand-counted k-anonymity violation, a 3000 x 1000 image downsampled to
2048 x 683, no original id anywhere in the release (a byte scan of every file), the read-back check failing on a
leak, bad inputs exiting with status 2, and the report in a real browser."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.audits.curation.release import ReleaseOptions, audit_release, coarsen_dates
from fairvision.cli import main

KEY = "0123456789abcdef0123456789abcdef"  # 32 characters


def _jpeg_with_gps(path: Path, size=(64, 48), seed=0) -> None:
    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # camera make
    gps = exif.get_ifd(0x8825)
    gps[1], gps[2], gps[3], gps[4] = "N", (51.0, 30.0, 0.0), "W", (0.0, 7.0, 0.0)
    im.save(path, exif=exif)


def _build(d: Path) -> dict:
    """Six people, ten images; person subj_alpha5 is the only 60+ (k = 2 fails on age = 60+)."""
    imgs = d / "photos"
    imgs.mkdir()
    rows = []
    people = [("subj_alpha0", "F", "20-39"), ("subj_alpha1", "F", "20-39"), ("subj_alpha2", "M", "20-39"),
              ("subj_alpha3", "M", "20-39"), ("subj_alpha4", "M", "40-59"), ("subj_alpha5", "F", "60+")]
    for i in range(10):
        subj, gender, age = people[i % 6]
        path = imgs / f"IMG_orig{i:04d}.jpg"
        if i == 0:
            _jpeg_with_gps(path)
        elif i == 1:  # a large one
            Image.fromarray(np.full((1000, 3000, 3), 90, np.uint8)).save(path, quality=80)
        else:
            Image.fromarray(np.full((30 + i, 40, 3), 20 * i, np.uint8)).save(path)
        rows.append({"sample_id": f"sample_orig{i:04d}", "subject_id": subj, "image_path": str(path),
                     "gender": gender, "age": age, "capture_date": f"2023-0{1 + i % 9}-15 0{i % 10}:30:00",
                     "latitude": 51.5, "longitude": -0.12, "gps_altitude": 12.0})
    (imgs / "IMG_broken0099.jpg").write_bytes(b"not a jpeg")
    rows.append({"sample_id": "sample_orig0099", "subject_id": "subj_alpha0", "image_path": str(imgs / "IMG_broken0099.jpg"),
                 "gender": "F", "age": "20-39", "capture_date": "2023-02-01 10:00:00", "latitude": 1.0,
                 "longitude": 1.0, "gps_altitude": 1.0})
    samples = pd.DataFrame(rows)
    samples.to_csv(d / "samples.csv", index=False)
    ann = pd.DataFrame({"sample_id": samples["sample_id"], "subject_id": samples["subject_id"],
                        "annotator": ["annot_zeta1"] * len(samples), "box_x": range(len(samples))})
    ann.to_csv(d / "annotations.csv", index=False)
    (d / "release.key").write_text(KEY + "\n")
    os.chmod(d / "release.key", 0o600)
    return {"samples": samples, "ann": ann}


def _args(d: Path, out: str = "release", *extra) -> list[str]:
    return ["curate", "release", str(d / "samples.csv"), "-t", str(d / "annotations.csv"), "-o", str(d / out),
            "--key-file", str(d / "release.key"), "--mapping-out", str(d / "private" / f"{out}-mapping.csv"),
            "--id-col", "annotator", "--k", "2", "-a", "gender", "-a", "age", "-j", "1", *extra]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("release")
    built = _build(d)
    rc = main(_args(d))
    return d, built, rc


def _hmac(value: str, prefix: str) -> str:
    return prefix + hmac.new(KEY.encode(), value.encode(), hashlib.sha256).hexdigest()[:16]


def test_release_runs_and_read_back_passes(run):
    d, _, rc = run
    assert rc == 0
    checks = pd.read_parquet(d / "release-report" / "tables" / "curation-release__read-back-check.parquet")
    assert checks["passed"].all() and len(checks) == 5


def test_dates_coarsened_to_the_month_and_gps_dropped(run):
    d, built, _ = run
    rel = pd.read_csv(d / "release" / "samples.csv", dtype=str)
    assert "latitude" not in rel and "longitude" not in rel and "gps_altitude" not in rel
    # sample_orig0002: 2023-03-15 02:30:00 -> 2023-03, night band
    row = rel.loc[rel["sample_id"] == _hmac("sample_orig0002", "s_")].iloc[0]
    assert row["capture_date"] == "2023-03" and row["capture_date_hour"] == "00:00-05:59"
    assert set(rel["capture_date"]) <= {f"2023-0{m}" for m in range(1, 10)}
    changes = pd.read_csv(d / "release" / "changes.csv")
    dropped = changes.loc[changes["action"] == "dropped (location)"]
    assert set(dropped["column"]) == {"latitude", "longitude", "gps_altitude"}
    assert (dropped["n_changed"] == 10).all()  # the unreadable image's row is left out first
    assert changes.loc[changes["column"] == "capture_date", "action"].item() == "coarsened to the month"


def test_coarsen_dates_by_hand():
    s = pd.Series(["2023-06-15 14:32:10", "2023:06:30 09:00:00", "2023-06", None, "2021-12-31T23:59:59+05:00"])
    out, changed, unread = coarsen_dates(s, "month")
    assert out.tolist() == ["2023-06", "2023-06", "2023-06", None, "2021-12"]  # local date kept, not UTC
    assert (changed, unread) == (3, 0)
    assert coarsen_dates(s, "year")[0].tolist()[:2] == ["2023", "2023"]
    assert coarsen_dates(pd.Series(["nonsense"]), "day")[2] == 1


def test_date_detection_is_conservative_and_reported(tmp_path):
    data = pd.DataFrame({"sample_id": ["a1", "a2"], "g": ["x", "y"],
                         "capture_time": ["09:15", "21:40"],           # times of day: 6-hour bands
                         "runtime": [12, 13],                          # one word, not "time": not a date column
                         "update_date": ["soon", "later"],             # a date-like name, not dates: unchanged
                         "when": ["2023-06-15", "2023-07-01"],        # dates under another name: listed only
                         "shot": pd.to_datetime(["2022-01-31 23:00", "2022-02-01 08:00"])})  # datetime dtype
    r = audit_release(data, stage=tmp_path / "r", key=KEY.encode(), options=ReleaseOptions(k=2))
    out = r.tables["samples"].set_index("sample_id")
    assert sorted(out["capture_time"]) == ["06:00-11:59", "18:00-23:59"]
    assert sorted(out["shot"]) == ["2022-01", "2022-02"] and sorted(out["shot_hour"]) == ["06:00-11:59", "18:00-23:59"]
    assert sorted(out["runtime"]) == [12, 13] and sorted(out["when"]) == ["2023-06-15", "2023-07-01"]
    how = {(d["column"], d["how"]) for d in r.params["date_columns"]}
    assert how == {("capture_time", "detected"), ("shot", "detected"), ("update_date", "not dates"),
                   ("when", "not coarsened")}
    assert r.params["attributes"] == ["g", "runtime", "update_date", "when"]


def test_exif_gps_removed_from_the_released_image(run):
    d, built, _ = run
    src = Image.open(built["samples"]["image_path"][0])
    assert src.getexif().get_ifd(0x8825)  # the input carries GPS
    out = d / "release" / "images" / f"{_hmac('sample_orig0000', 's_')}.png"
    with Image.open(out) as im:
        assert im.format == "PNG" and not im.getexif() and not im.getexif().get_ifd(0x8825)
        assert "exif" not in im.info and not any(k for k in im.info if k not in ("dpi",))
    data = out.read_bytes()
    types, pos = [], 8
    while pos < len(data):
        n, t = struct.unpack(">I4s", data[pos:pos + 8])
        types.append(t)
        pos += 12 + n
    assert types[0] == b"IHDR" and types[-1] == b"IEND" and set(types) <= {b"IHDR", b"IDAT", b"IEND"}


def test_ids_pseudonymised_consistently_across_tables(run):
    d, built, _ = run
    rel = pd.read_csv(d / "release" / "samples.csv", dtype=str)
    ann = pd.read_csv(d / "release" / "annotations.csv", dtype=str)
    orig = built["samples"].iloc[:10]
    want = sorted((_hmac(a, "s_"), _hmac(b, "p_")) for a, b in zip(orig["sample_id"], orig["subject_id"]))
    assert list(zip(rel["sample_id"], rel["subject_id"])) == want  # rows in the order of the pseudonyms
    assert list(zip(ann["sample_id"], ann["subject_id"])) == want
    assert set(ann["annotator"]) == {_hmac("annot_zeta1", "x_")}
    # released file names are the pseudonymous sample ids
    assert rel["image_path"].tolist() == [f"images/{s}.png" for s in rel["sample_id"]]
    mapping = pd.read_csv(d / "private" / "release-mapping.csv", dtype=str)
    got = dict(zip(mapping["original"], mapping["pseudonym"]))
    assert got["sample_orig0003"] == _hmac("sample_orig0003", "s_") and got["subj_alpha5"] == _hmac("subj_alpha5", "p_")
    assert (os.stat(d / "private" / "release-mapping.csv").st_mode & 0o077) == 0


def test_the_key_is_needed_to_reproduce(tmp_path):
    data = pd.DataFrame({"sample_id": ["a1", "a2", "a3"], "subject_id": ["p1", "p1", "p2"], "g": ["x", "x", "y"]})
    runs = {}
    for name, key in (("one", KEY.encode()), ("two", KEY.encode()), ("other", b"another-key-" * 4)):
        r = audit_release(data, stage=tmp_path / name, key=key, options=ReleaseOptions(k=2))
        runs[name] = pd.read_csv(tmp_path / name / "samples.csv")
        assert len(r.mapping) == 5  # 3 samples + 2 subjects
    assert runs["one"].equals(runs["two"]) and len(runs["one"]) == 3
    assert not set(runs["one"]["sample_id"]) & set(runs["other"]["sample_id"])
    assert not set(runs["one"]["subject_id"]) & set(runs["other"]["subject_id"])


def test_k_anonymity_violation_found(run):
    d, _, _ = run
    viol = pd.read_parquet(d / "release-report" / "tables" / "curation-release__groups-below-k.parquet")
    # hand count (k = 2, subjects): age 60+ = {subj_alpha5}, age 40-59 = {subj_alpha4}; gender × age:
    # F × 60+ = {alpha5}, M × 40-59 = {alpha4}; F × 20-39 = {alpha0, alpha1} = 2 and M × 20-39 = 2 pass
    got = set(zip(viol["attributes"], viol["values"], viol["size"]))
    assert got == {("age", "40-59", 1), ("age", "60+", 1), ("gender × age", "F × 60+", 1),
                   ("gender × age", "M × 40-59", 1)}
    sets = pd.read_parquet(d / "release-report" / "tables" / "curation-release__attribute-sets.parquet")
    assert sets.set_index("attributes").loc["gender", "min_size"] == 3


def test_large_image_downsampled_small_ones_kept(run):
    d, _, _ = run
    man = pd.read_csv(d / "release" / "manifest.csv", dtype={"width": int, "height": int})
    big = man.loc[man["sample_id"] == _hmac("sample_orig0001", "s_")].iloc[0]
    # 3000 x 1000 scaled by 2048 / 3000: height 682.67 rounds to 683
    assert (big["width"], big["height"]) == (2048, 683)
    with Image.open(d / "release" / big["file"]) as im:
        assert im.size == (2048, 683)
    small = man.loc[man["sample_id"] == _hmac("sample_orig0003", "s_")].iloc[0]
    assert (small["width"], small["height"]) == (40, 33)
    for r in man.itertuples():
        assert hashlib.sha256((d / "release" / r.file).read_bytes()).hexdigest() == r.sha256


def test_no_original_id_or_file_name_anywhere_in_the_release(run):
    d, built, _ = run
    s = built["samples"]
    needles = set(s["sample_id"]) | set(s["subject_id"]) | {"annot_zeta1"} | \
        {Path(p).name for p in s["image_path"]} | {Path(p).stem for p in s["image_path"]}
    files = [p for p in (d / "release").rglob("*") if p.is_file()]
    assert len(files) == 4 + 10  # samples, annotations, manifest, changes + 10 images
    for p in files:
        blob = p.read_bytes() + str(p.relative_to(d / "release")).encode()
        found = [n for n in needles if n.encode() in blob]
        assert not found, (p.name, found)


def test_left_out_image_counted_and_kept_on_the_curator_side(run, capsys):
    d, _, _ = run
    left = pd.read_csv(d / "private" / "release-mapping-left-out.csv")
    assert left["sample_id"].tolist() == ["sample_orig0099"] and left["reason"].tolist() == ["not a readable image"]
    reasons = pd.read_parquet(d / "release-report" / "tables" / "release-coverage__coverage-reasons.parquet")
    assert reasons.to_dict("list") == {"reason": ["not a readable image"], "n": [1]}
    report = (d / "release-report" / "report.json").read_text() + (d / "release-report" / "report.html").read_text()
    assert "IMG_broken0099" not in report and "sample_orig" not in report and "subj_alpha" not in report


def test_read_back_fails_on_a_leak(tmp_path, capsys):
    _build(tmp_path)
    notes = pd.read_csv(tmp_path / "annotations.csv")
    notes["comment"] = "same person as sample_orig0004"
    notes.to_csv(tmp_path / "annotations.csv", index=False)
    assert main(_args(tmp_path)) == 1
    out = capsys.readouterr()
    assert "read-back check: FAILED" in out.out and "annotations.csv: comment" in out.out
    rb = pd.read_parquet(tmp_path / "release-report" / "tables" / "curation-release__read-back-problems.parquet")
    assert rb["check"].tolist() == ["original ids"]


def test_suppress_and_fail_if(tmp_path, capsys):
    _build(tmp_path)
    rc = main(_args(tmp_path, "rel", "--suppress", "--fail-if", "n_cells_below_k>0"))
    assert rc == 0, capsys.readouterr()
    rel = pd.read_csv(tmp_path / "rel" / "samples.csv", dtype=str)
    assert rel["age"].isna().sum() == 2  # 60+ and 40-59 (one image each) blanked
    changes = pd.read_csv(tmp_path / "rel" / "changes.csv")
    assert changes["action"].str.startswith("suppressed").any()
    assert main(_args(tmp_path, "rel2", "--fail-if", "min_group_size<2")) == 1


@pytest.mark.parametrize("extra, message", [
    (["--date-col", "nope"], "--date-col 'nope': no table has this column"),
    (["--date-precision", "week"], "--date-precision 'week'"),
    (["-a", "height"], "--attr 'height'"),
    (["--subject-col", "person"], "person"),
    (["--date-col", "gender"], "column 'gender' (--date-col): row 1: not a date"),
])
def test_bad_inputs_exit_2(tmp_path, capsys, extra, message):
    _build(tmp_path)
    assert main(_args(tmp_path, "r", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_mapping_key_and_report_must_be_outside_the_release(tmp_path, capsys):
    _build(tmp_path)
    args = _args(tmp_path, "r")
    inside = args[:args.index("--mapping-out") + 1] + [str(tmp_path / "r" / "map.csv")] + args[args.index("--mapping-out") + 2:]
    assert main(inside) == 2
    assert "must be outside the release folder" in capsys.readouterr().err
    assert main([*args, "--report-dir", str(tmp_path / "r" / "rep")]) == 2
    assert not (tmp_path / "r").exists()


def test_a_release_folder_that_is_not_empty_is_refused(tmp_path, capsys):
    _build(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "old.png").write_bytes(b"x")
    assert main(_args(tmp_path, "r")) == 2
    assert "the release folder is not empty" in capsys.readouterr().err


def test_missing_key_needs_new_key(tmp_path, capsys):
    _build(tmp_path)
    args = _args(tmp_path, "r")
    args[args.index("--key-file") + 1] = str(tmp_path / "keys" / "new.key")
    assert main(args) == 2
    assert "give --new-key to create one" in capsys.readouterr().err
    assert main([*args, "--new-key"]) == 0
    key = tmp_path / "keys" / "new.key"
    assert (key.stat().st_mode & 0o777) == 0o600 and len(key.read_text().strip()) == 64
    assert main([*args, "--new-key"]) == 2  # never overwrites a key


@pytest.fixture(scope="module")
def browser():
    from test_report_browser import _browser  # tests/ is on sys.path (pytest's default "prepend" import mode)

    with _browser() as b:
        yield b


@pytest.mark.browser
def test_release_report_in_the_browser(run, browser, tmp_path):
    from test_report_browser_new import check_in_browser

    d, _, _ = run
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    doc, _, text = check_in_browser(browser, d / "release-report" / "report.html", shots / "curate-release.png")
    assert doc["findings"] and "Privacy before release" in text and "groups below k" in text
    assert "F × 60+" in text and "read-back check" in text
    assert "sample_orig" not in text and "subj_alpha" not in text and "IMG_orig" not in text


def test_numeric_ids_read_as_floats_get_the_same_pseudonym(tmp_path):
    samples = pd.DataFrame({"sample_id": ["a1", "a2", "a3"], "subject_id": ["7", "7", "12"], "g": ["x", "x", "y"]})
    extra = pd.DataFrame({"sample_id": ["a1", "a3", "a9"], "subject_id": [7.0, 12.0, np.nan]})  # float: a gap
    audit_release(samples, {"extra": extra}, stage=tmp_path / "r", key=KEY.encode(), options=ReleaseOptions(k=2))
    rel = pd.read_csv(tmp_path / "r" / "samples.csv").set_index("sample_id")["subject_id"]
    ext = pd.read_csv(tmp_path / "r" / "extra.csv").set_index("sample_id")["subject_id"]
    assert ext[_hmac("a1", "s_")] == rel[_hmac("a1", "s_")] == _hmac("7", "p_")
    assert ext[_hmac("a3", "s_")] == _hmac("12", "p_") and ext[_hmac("a9", "s_")] != ext[_hmac("a9", "s_")]  # NaN

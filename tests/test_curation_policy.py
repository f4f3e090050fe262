"""Collection-guideline checks (docs/METHODS.md §13.8): a constructed table whose every failure is worked out by
hand, the policy file (FHIBE's values, an override, invalid files), the group tests against scipy and the
Wilson formula, the vectorised keypoint check against a plain loop, the EXIF capture time, and the command on
real JPEG files with the report in a browser."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from PIL import Image

from fairvision.audits.curation import qa
from fairvision.audits.curation.policy import audit_policy, load_policy, number_lists
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import ColumnError, InputFileError
from fairvision.io.exif import capture_time, parse_exif_time

PERSON = json.dumps([100, 100, 500, 900])
FACE = json.dumps([200, 150, 300, 260])
KEYPOINTS = json.dumps([[150, 200, 2], [300, 400, 1], [501.5, 300, 2]])  # the last 1.5 px out: within tolerance


def constructed() -> pd.DataFrame:
    """Subjects A (11 photos a day apart), B (2 photos 6.5 h apart, scenes disagree), C (1 photo without EXIF),
    D (one 0.8 MP photo, one 2.5:1 photo); a3 has a keypoint outside its box, a4 a face box 60 px outside the
    person box, a5 no face box."""
    rows = []
    for i in range(11):
        rows.append(("a%d" % i, "A", f"2024-01-{i + 1:02d}T09:00:00", 4000, 3000, True, "indoor"))
    rows += [("b0", "B", "2024-02-01T10:00:00", 4000, 3000, True, "indoor"),
             ("b1", "B", "2024-02-01T16:30:00", 4000, 3000, True, "outdoor"),
             ("c0", "C", None, 4000, 3000, False, "park"),
             ("d0", "D", "2024-03-01T10:00:00", 1000, 800, True, "home"),
             ("d1", "D", "2024-03-11T10:00:00", 5000, 2000, True, "home")]
    df = pd.DataFrame(rows, columns=["sample_id", "subject_id", "datetime_original", "width", "height", "has_exif",
                                     "scene"])
    df["readable"] = True
    df["person_box"], df["face_box"], df["keypoints"] = PERSON, FACE, KEYPOINTS
    df.loc[df["sample_id"] == "a3", "keypoints"] = json.dumps([[150, 200, 2], [520, 300, 2], [600, 300, 0]])
    df.loc[df["sample_id"] == "a4", "face_box"] = json.dumps([480, 120, 560, 200])
    df.loc[df["sample_id"] == "a5", "face_box"] = None
    return df


def outcome(res, check):
    c = res.checks[res.checks["check"] == check].set_index("sample_id")
    return c


def failing(res, check):
    c = outcome(res, check)
    return set(c.index[c["status"] == "fail"])


def test_fhibe_policy_values_from_the_paper():
    p = load_policy()
    got = (p.min_megapixels, p.require_exif, p.max_aspect_ratio, p.max_images, p.min_hours_apart)
    assert got == (8, True, 2, 10, 24)
    assert p.source == "bundled FHIBE policy"


def test_constructed_table_every_failure_by_hand():
    policy = dataclasses.replace(load_policy(), consistent_columns=("scene",))
    res = audit_policy(constructed(), policy)
    assert failing(res, "resolution") == {"d0"} and outcome(res, "resolution").loc["d0", "value"] == pytest.approx(0.8)
    assert failing(res, "exif") == {"c0"}
    assert failing(res, "aspect_ratio") == {"d1"} and outcome(res, "aspect_ratio").loc["d1", "value"] == 2.5
    per = outcome(res, "images_per_subject")
    assert failing(res, "images_per_subject") == {f"a{i}" for i in range(11)} and per.loc["a0", "value"] == 11
    t = outcome(res, "time_apart")
    assert failing(res, "time_apart") == {"b0", "b1"} and t.loc["b0", "value"] == pytest.approx(6.5)
    assert t.loc["a5", "status"] == "pass" and t.loc["a5", "value"] == pytest.approx(24.0)  # exactly a day: allowed
    assert t.loc["c0", "status"] == "not checked" and "capture time" in t.loc["c0", "reason"]
    assert t.loc["d0", "value"] == pytest.approx(240.0)
    assert failing(res, "subject_consistency") == {"b0", "b1"}
    assert "scene" in outcome(res, "subject_consistency").loc["b0", "reason"]
    assert failing(res, "annotations") == {"a5"} and "face_box" in outcome(res, "annotations").loc["a5", "reason"]
    kp = outcome(res, "keypoints_in_box")
    assert failing(res, "keypoints_in_box") == {"a3"} and kp.loc["a3", "value"] == 1  # the invisible one not counted
    fb = outcome(res, "face_in_person_box")
    assert failing(res, "face_in_person_box") == {"a4"} and fb.loc["a4", "value"] == 60
    assert fb.loc["a5", "status"] == "not checked"
    q = res.quantities()
    assert q["n_failed_time_apart"] == 2 and q["n_failed_images_per_subject"] == 11
    expected = {f"a{i}" for i in range(11)} | {"b0", "b1", "c0", "d0", "d1"}
    assert q["n_policy_failures"] == len(expected)
    s = res.summary
    assert s.loc["time_apart", "n_checked"] == 15 and s.loc["time_apart", "n_not_checked"] == 1
    assert s.loc["resolution", "share_failed"] == pytest.approx(1 / 16)
    assert list(res.checks.columns[:7]) == ["sample_id", "check", "status", "passed", "value", "limit", "reason"]


def test_inputs_absent_are_not_checked_never_passed():
    df = constructed().drop(columns=["subject_id", "person_box", "face_box", "keypoints", "datetime_original"])
    res = audit_policy(df)  # FHIBE policy: consistent columns ancestry / natural_hair_colour absent too
    for check in ("images_per_subject", "time_apart", "subject_consistency", "annotations", "keypoints_in_box",
                  "face_in_person_box"):
        c = outcome(res, check)
        assert (c["status"] == "not checked").all() and c["passed"].isna().all(), check
        assert c["reason"].str.startswith("not checked:").all()
    assert "subject_id" in outcome(res, "time_apart")["reason"].iloc[0]
    assert "none of the required annotation columns" in outcome(res, "annotations")["reason"].iloc[0]
    assert "not checked: images_per_subject" in res.summary_line()


def test_policy_file_overrides_only_its_keys(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('name = "ours"\n[subject]\nmax_images = 20\nconsistent_columns = ["scene"]\n'
                 '[image]\nmin_megapixels = false\n')
    p = load_policy(f)
    assert p.max_images == 20 and p.min_megapixels is None and p.max_aspect_ratio == 2.0 and p.name == "ours"
    res = audit_policy(constructed(), p)
    assert not failing(res, "images_per_subject") and "resolution" not in set(res.checks["check"])
    assert failing(res, "subject_consistency") == {"b0", "b1"}


@pytest.mark.parametrize("text, key", [
    ("[image]\nmin_mp = 3\n", "min_mp"),
    ("[subject]\nmax_images = \"ten\"\n", "max_images"),
    ("[image]\nmax_aspect_ratio = 0.5\n", "max_aspect_ratio"),
    ("[annotations]\nbox_format = \"cxcywh\"\n", "box_format"),
    ("[colour]\nx = 1\n", "colour"),
    ("[subject]\nmin_images = 5\nmax_images = 2\n", "min_images"),
])
def test_invalid_policy_names_the_key(tmp_path, text, key, capsys):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InputFileError, match=key):
        load_policy(f)
    assert main(["curate", "qa", "portraits", "--policy", str(f), "-o", str(tmp_path / "o"), "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and key in err and str(f) in err
    assert not (tmp_path / "o").exists()  # refused before any image was decoded


def test_time_column_with_zones():
    df = pd.DataFrame({"sample_id": list("abcd"), "subject_id": ["p", "p", "q", "q"],
                       "taken": ["2024-01-01T10:00:00+02:00", "2024-01-01T09:30:00Z", "2024-01-01 10:00", "soon"]})
    res = audit_policy(df, dataclasses.replace(load_policy(), time_column="taken"))
    t = outcome(res, "time_apart")
    assert t.loc["a", "value"] == pytest.approx(1.5) and t.loc["a", "status"] == "fail"  # 08:00 and 09:30 UTC
    assert t.loc["d", "reason"] == "not checked: capture time not ISO 8601"
    assert t.loc["c", "reason"] == "not checked: no other dated photo of the subject"


def test_group_shares_wilson_and_fisher_by_hand():
    rng = np.random.default_rng(4)
    n = 300
    gender = rng.choice(["f", "m"], n)
    gender[:4] = "x"  # 4 subjects: reported, not tested
    small = rng.random(n) < np.where(gender == "f", 0.35, 0.1)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "subject_id": [f"p{i}" for i in range(n)],
                       "gender": gender, "readable": True, "width": np.where(small, 100, 4000), "height": 3000,
                       "has_exif": rng.random(n) < 0.9})
    st = AuditSettings(correction="bonferroni", min_subjects=10)
    res = audit_policy(df, attributes=["gender"], settings=st)
    bg = res.by_group.set_index(["check", "group"])
    z = scipy.stats.norm.ppf(0.975)
    for g in ("f", "m", "x"):
        k, m = int((small & (gender == g)).sum()), int((gender == g).sum())
        row = bg.loc[("resolution", g)]
        assert (row["n"], row["n_failed"]) == (m, k) and row["share_failed"] == pytest.approx(k / m)
        p = k / m
        centre = (p + z * z / (2 * m)) / (1 + z * z / m)
        half = z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
        assert row["ci_low"] == pytest.approx(centre - half) and row["ci_high"] == pytest.approx(centre + half)
    assert not bg.loc[("resolution", "x"), "tested"] and bg.loc[("resolution", "f"), "tested"]
    t = res.tests.set_index("check")
    table = [[int((small & (gender == g)).sum()), int((~small & (gender == g)).sum())] for g in ("f", "m")]
    assert t.loc["resolution", "pvalue"] == pytest.approx(scipy.stats.fisher_exact(table)[1])
    m_tests = int(t["pvalue"].notna().sum())
    assert t.loc["resolution", "pvalue_adjusted"] == pytest.approx(min(1.0, t.loc["resolution", "pvalue"] * m_tests))
    assert bool(t.loc["resolution", "differs"])
    assert res.coverage is not None and "left out" in res.coverage.summary_line()


def test_subject_level_checks_count_subjects():
    df = constructed().assign(gender=lambda d: np.where(d["subject_id"].isin(["A", "C"]), "f", "m"))
    res = audit_policy(df, attributes=["gender"], settings=AuditSettings(min_subjects=1))
    bg = res.by_group.set_index(["check", "group"])
    assert bg.loc[("images_per_subject", "f"), "n"] == 2 and bg.loc[("images_per_subject", "f"), "n_failed"] == 1
    assert bg.loc[("resolution", "f"), "n"] == 12


def test_keypoints_vectorised_equal_a_loop():
    rng = np.random.default_rng(1)
    n = 200
    boxes = rng.uniform(0, 100, (n, 2))
    boxes = np.c_[boxes, boxes + rng.uniform(10, 80, (n, 2))]
    kps = [rng.uniform(-20, 200, (int(k), 3)).round(1) for k in rng.integers(0, 6, n)]
    for k in kps:
        k[:, 2] = rng.integers(0, 3, len(k))
    df = pd.DataFrame({"sample_id": [str(i) for i in range(n)], "person_box": [json.dumps(b.tolist()) for b in boxes],
                       "keypoints": [json.dumps(k.tolist()) for k in kps], "face_box": None})
    policy = dataclasses.replace(load_policy(), required=(), tolerance_px=0.0)
    c = outcome(audit_policy(df, policy), "keypoints_in_box")
    for i in range(n):
        x0, y0, x1, y1 = boxes[i]
        vis = [(x, y) for x, y, v in kps[i] if v > 0]
        out = sum(1 for x, y in vis if not (x0 <= x <= x1 and y0 <= y <= y1))
        row = c.loc[str(i)]
        if not vis:
            assert row["status"] == "not checked"
        else:
            assert row["value"] == out and (row["status"] == "fail") == (out > 0)


def test_number_lists_parse_and_name_a_bad_cell():
    s = pd.Series(["[1, 2, 3]", None, "[[4,5,6],[7,8,9]]", " ", "[]"])
    nums, counts, present = number_lists(s, np.array(list("abcde")), column="kp", group=3)
    assert nums.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9] and counts.tolist() == [3, 0, 6, 0, 0]
    assert present.tolist() == [True, False, True, False, True]
    with pytest.raises(ColumnError, match=r"column 'kp', sample 'c'.*\[1,x,3\]"):
        number_lists(pd.Series(["[1,2,3]", None, "[1,x,3]"]), np.array(list("abc")), column="kp", group=3)
    with pytest.raises(ColumnError, match=r"column 'kp', sample 'b'.*\[x, y, v\]"):
        number_lists(pd.Series(["[1,2,3]", "[1,2]"]), np.array(list("ab")), column="kp", group=3)
    with pytest.raises(ColumnError, match=r"sample 'b'.*4 numbers"):
        number_lists(pd.Series(["[1,2,3,4]", "[1,2,3]"]), np.array(list("ab")), column="box", group=4, exact=4)


def test_box_columns_and_xywh():
    df = constructed().head(2).drop(columns=["person_box"])
    df["px"], df["py"], df["pw"], df["ph"] = 100, 100, 400, 800
    policy = dataclasses.replace(load_policy(), person_box=("px", "py", "pw", "ph"), box_format="xywh",
                                 face_box="")  # xywh applies to every box: face box off here
    res = audit_policy(df, policy)
    assert (outcome(res, "keypoints_in_box")["status"] == "pass").all()


def test_exif_capture_time(tmp_path):
    im = Image.new("RGB", (32, 24), "red")
    ex = Image.Exif()
    ex.get_ifd(0x8769)[0x9003] = "2024:03:01 10:20:30"
    im.save(tmp_path / "t.jpg", exif=ex.tobytes())
    im.save(tmp_path / "plain.jpg")
    assert capture_time(tmp_path / "t.jpg") == "2024-03-01T10:20:30"
    assert capture_time(tmp_path / "plain.jpg") is None and capture_time(tmp_path / "nothing.jpg") is None
    assert parse_exif_time("0000:00:00 00:00:00") is None and parse_exif_time(b"2023:12:31 23:59:59\x00") == \
        "2023-12-31T23:59:59"
    rec = qa.inspect_qa_file(tmp_path / "t.jpg")
    assert rec["datetime_original"] == "2024-03-01T10:20:30" and rec["has_exif"]
    assert qa.CACHE_VERSION >= 3 and "io/exif.py" in qa.SIGNATURE_SOURCES


def _photo(path: Path, seed: int, size=(64, 48), when: str | None = None, quality=90, src: Path | None = None):
    if src is not None:
        im = Image.open(src).convert("RGB")
    else:
        rng = np.random.default_rng(seed)
        im = Image.fromarray(rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)).resize(size)
    kw = {}
    if when is not None:
        ex = Image.Exif()
        ex.get_ifd(0x8769)[0x9003] = when
        kw["exif"] = ex.tobytes()
    im.save(path, quality=quality, **kw)


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """Real JPEG files: s1 three photos (two 2 h apart, one an exact copy of a0), s2 one without EXIF, s3 a
    re-encoded copy of s1's first photo (a duplicate across subjects), s4 3:1, s5 tiny."""
    d = tmp_path_factory.mktemp("collection")
    _photo(d / "s1a.jpg", 1, when="2024:01:01 10:00:00")
    _photo(d / "s1b.jpg", 2, when="2024:01:01 12:00:00")
    (d / "s1c.jpg").write_bytes((d / "s1a.jpg").read_bytes())
    _photo(d / "s2a.jpg", 3)
    _photo(d / "s3a.jpg", 0, when="2024:02:01 10:00:00", quality=70, src=d / "s1a.jpg")
    _photo(d / "s4a.jpg", 5, size=(96, 32), when="2024:01:05 10:00:00")
    _photo(d / "s5a.jpg", 6, size=(16, 16), when="2024:01:06 10:00:00")
    rows = [("s1a", "s1", "f"), ("s1b", "s1", "f"), ("s1c", "s1", "f"), ("s2a", "s2", "m"), ("s3a", "s3", "m"),
            ("s4a", "s4", "m"), ("s5a", "s5", "f")]
    df = pd.DataFrame(rows, columns=["sample_id", "subject_id", "gender"])
    df["image_path"] = [str(d / f"{s}.jpg") for s in df["sample_id"]]
    df["scene"] = ["indoor", "indoor", "outdoor", "park", "park", "home", "home"]
    df.to_csv(d / "samples.csv", index=False)
    (d / "policy.toml").write_text("[image]\nmin_megapixels = 0.001\n[subject]\nmax_images = 2\n"
                                   "consistent_columns = [\"scene\"]\n[annotations]\nrequired = []\n")
    return d


def test_cli_policy_on_real_files(collection, tmp_path, capsys):
    d = collection
    out = tmp_path / "o"
    rc = main(["curate", "qa", str(d / "samples.csv"), "--policy", str(d / "policy.toml"), "-a", "gender",
               "-o", str(out), "--no-store", "--fail-if", "n_cross_subject_duplicates>0"])
    assert rc == 1  # the gate holds: s3a is s1a's photo under another subject
    printed = capsys.readouterr().out
    assert "collection guidelines" in printed and "left out" in printed
    checks = pd.read_csv(out / "policy_checks.csv")
    st = checks.set_index(["check", "sample_id"])["status"]
    fails = {c: set(checks.loc[(checks["check"] == c) & (checks["status"] == "fail"), "sample_id"])
             for c in checks["check"].unique()}
    assert fails["exif"] == {"s2a"} and fails["resolution"] == {"s5a"} and fails["aspect_ratio"] == {"s4a"}
    assert fails["images_per_subject"] == {"s1a", "s1b", "s1c"}
    assert fails["time_apart"] == {"s1a", "s1b", "s1c"}  # 2 h apart, and s1c is s1a's bytes (0 h)
    assert fails["subject_consistency"] == {"s1a", "s1b", "s1c"}
    assert fails["cross_subject_duplicate"] == {"s1a", "s1c", "s3a"}  # within s1 (a, c) is no failure on its own
    assert st[("time_apart", "s2a")] == "not checked" and st[("time_apart", "s3a")] == "pass"
    doc = json.loads((out / "report.json").read_text())
    ids = [s["id"] for s in doc["sections"]]
    assert "curation_policy" in ids and "curation_policy-coverage" in ids
    dup = pd.read_parquet(next((out / "tables").glob("curation-policy__near-duplicates-by-subject.parquet")))
    pairs = {(a, b): (s, c) for a, b, s, c in zip(dup["sample_id_a"], dup["sample_id_b"], dup["same_subject"],
                                                   dup["cross_subject"])}
    assert pairs[("s1a", "s1c")] == (True, False) and pairs[("s1a", "s3a")] == (False, True)


def test_cli_no_policy_keeps_the_image_checks_alone(collection, tmp_path):
    out = tmp_path / "o"
    assert main(["curate", "qa", str(collection / "samples.csv"), "--no-policy", "-o", str(out), "--no-store"]) == 0
    assert not (out / "policy_checks.csv").exists() and (out / "images.csv").exists()
    ids = [s["id"] for s in json.loads((out / "report.json").read_text())["sections"]]
    assert ids == ["curation_qa"]


@pytest.mark.browser
def test_policy_report_in_the_browser(collection, tmp_path):
    from test_report_browser import _browser  # noqa: E402 - tests/ is on sys.path
    from test_report_browser_new import check_in_browser  # noqa: E402

    known = tmp_path / "known.csv"
    h = qa.inspect_image_file(collection / "s4a.jpg")["phash"]
    pd.DataFrame({"phash": [f"{h ^ 0b111:016x}"], "label": ["test list"], "source": ["here"]}).to_csv(known, index=False)
    out = tmp_path / "o"
    assert main(["curate", "qa", str(collection / "samples.csv"), "--policy", str(collection / "policy.toml"),
                 "-a", "gender", "--known-hashes", str(known), "-o", str(out), "--no-store"]) == 0
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    with _browser() as browser:
        doc, _, text = check_in_browser(browser, out / "report.html", shots / "curate-policy.png")
    assert doc["findings"]
    assert "Collection-guideline checks" in text and "Known-content matching" in text
    assert "images_per_subject" in text and "test list" in text


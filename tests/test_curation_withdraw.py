"""Consent withdrawal (docs/METHODS.md §13.5): exact removal everywhere, audit log, optimal replacement,
all-or-nothing apply (a real SIGKILL), dry run, no-op second run, bad inputs."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.curation.withdraw import apply_withdrawal, match_replacements, plan_withdrawal, read_log
from fairvision.audits.curation.withdraw.journal import CRASH_AFTER_RENAMES, CRASH_BEFORE_COMMIT
from fairvision.cli import main
from fairvision.datasets.demo import demo_path, load_demo
from fairvision.errors import InputFileError
from fairvision.io.durable import CRASH_ENV
from fairvision.io.store import ResultsStore, file_sha256

MULTI = "multi"  # a subject with three images
MULTI_ROWS = (0, 100, 200)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture(scope="module")
def demo_images(tmp_path_factory):
    """One copy of the 540 FairFace demo images (tests copy this folder)."""
    folder = tmp_path_factory.mktemp("demo") / "imgs"
    shutil.copytree(demo_path("fairface"), folder, ignore=shutil.ignore_patterns("*.json", "LICENSE"))
    return folder


@pytest.fixture
def ds(tmp_path, demo_images):
    """The demo data split into a dataset (486 images) and a pool (3 per age x gender cell, 54), with a derived
    measurements CSV, a per-subject Parquet table, a COCO file and a results store."""
    root = tmp_path / "data"
    shutil.copytree(demo_images, root / "imgs")
    df = load_demo()
    df["age"] = df["age"].astype(str)
    df["gender"] = df["gender"].astype(str)
    df["image_path"] = ["imgs/" + Path(p).name for p in df["image_path"]]
    df["subject_id"] = ["s" + s[-4:] for s in df["sample_id"]]
    df = df[["sample_id", "subject_id", "image_path", "age", "gender"]]
    in_pool = df.groupby(["age", "gender"]).cumcount() < 3
    data, pool = df[~in_pool].reset_index(drop=True), df[in_pool].reset_index(drop=True)
    for i in MULTI_ROWS:
        data.loc[i, "subject_id"] = MULTI
    data.to_csv(root / "samples.csv", index=False)
    pool.to_csv(root / "pool.csv", index=False)
    # measurements with formatting that a pandas round trip would change ("1.50", quoted text)
    lines = ["sample_id,ita,note"] + [f'{s},{i / 2:.2f},"a, b {i}"' for i, s in enumerate(data["sample_id"])]
    (root / "measurements.csv").write_text("\n".join(lines) + "\n")
    per_subject = pd.DataFrame({"subject_id": data["subject_id"].unique()})
    per_subject["consent"] = "2024-01-01"
    per_subject.to_parquet(root / "subjects.parquet", index=False)
    images = [{"id": i + 1, "file_name": p, "width": 224, "height": 224} for i, p in enumerate(data["image_path"])]
    anns = [{"id": 2 * i + k + 1, "image_id": i + 1, "category_id": 1, "bbox": [1, 2, 3, 4]}
            for i in range(len(images)) for k in range(2)]
    (root / "coco.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "face"}]}))
    store = ResultsStore(root / "store")
    for i in [*MULTI_ROWS, 1, 2, 3]:
        r = data.iloc[i]
        p = root / r["image_path"]
        store.put("skin", f"skin{i}", {"ita": float(i)}, content_hash=file_sha256(p), sample_id=r["sample_id"],
                  subject_id=r["subject_id"], image_path=str(p))
        store.put("faces", f"faces{i}", {"n": 1}, content_hash=file_sha256(p), sample_id=r["sample_id"],
                  subject_id=r["subject_id"], image_path=str(p))
    store.flush()
    return root, data, pool


def derived_args(root: Path) -> list[str]:
    return [a for f in ("measurements.csv", "subjects.parquet", "coco.json") for a in ("--derived", str(root / f))]


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def store_rows(root: Path) -> pd.DataFrame:
    s = ResultsStore(root / "store")
    return pd.concat([s.query(f"SELECT stage, sample_id, subject_id FROM {st}") for st in s.stages()], ignore_index=True)


def lines_of(p: Path) -> list[str]:
    return p.read_text().splitlines(keepends=True)


def check_withdrawn(root: Path, data: pd.DataFrame, before: dict, subject: str, *, added: int = 0) -> None:
    """Exactly the subject's rows are gone from every file and the store; every other row is unchanged."""
    gone = data.index[data["subject_id"] == subject]
    gone_ids = set(data.loc[gone, "sample_id"])
    old = before["samples.csv"][0].decode().splitlines(keepends=True)
    new = lines_of(root / "samples.csv")
    expected = [line for i, line in enumerate(old) if i - 1 not in set(gone)]
    assert new[: len(expected)] == expected and len(new) == len(expected) + added
    old_m = before["measurements.csv"][0].decode().splitlines(keepends=True)
    assert lines_of(root / "measurements.csv") == [line for i, line in enumerate(old_m) if i - 1 not in set(gone)]
    old_p = pd.read_parquet(io.BytesIO(before["subjects.parquet"][0]))
    pd.testing.assert_frame_equal(pd.read_parquet(root / "subjects.parquet"),
                                  old_p[old_p["subject_id"] != subject].reset_index(drop=True))
    coco_old = json.loads(before["coco.json"][0])
    coco = json.loads((root / "coco.json").read_text())
    gone_img = {im["id"] for im in coco_old["images"] if Path(im["file_name"]).stem in gone_ids}
    assert len(gone_img) == len(gone)
    assert coco["images"] == [im for im in coco_old["images"] if im["id"] not in gone_img]
    assert coco["annotations"] == [a for a in coco_old["annotations"] if a["image_id"] not in gone_img]
    rows = store_rows(root)
    assert not (rows["subject_id"] == subject).any()
    assert len(rows) == 12 - 2 * len(gone)


def test_withdraw_three_image_subject_everywhere_with_replacement(ds, capsys):
    root, data, pool = ds
    before = snapshot(root)
    rc = main(["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, *derived_args(root),
               "--store", str(root / "store"), "--pool", str(root / "pool.csv"), "--apply", "--replace",
               "--operator", "tester", "-o", str(root / "report")])
    out = capsys.readouterr().out
    assert rc == 0, out
    check_withdrawn(root, data, before, MULTI, added=3)
    # the replacement keeps every age x gender cell within one image of the original (independent crosstab)
    after = pd.read_csv(root / "samples.csv")
    tab0 = pd.crosstab(data["age"], data["gender"])
    tab1 = pd.crosstab(after["age"], after["gender"]).reindex_like(tab0).fillna(0)
    assert (tab1 - tab0).abs().to_numpy().max() <= 1
    assert len(after) == len(data)
    added = after.iloc[-3:]
    assert set(added["sample_id"]) <= set(pool["sample_id"])
    # each withdrawn image got a pool image of its own cell (the pool has 3 per cell)
    w = data.iloc[list(MULTI_ROWS)]
    assert sorted(zip(w["age"], w["gender"])) == sorted(zip(added["age"], added["gender"]))
    # images are kept (no --delete-images); the log has hashes of files and images, never image bytes
    assert all((root / p).is_file() for p in w["image_path"])
    log = read_log(root / "withdrawals.log.jsonl")
    assert len(log) == 1
    e = log[0]
    assert e["operator"] == "tester" and e["subjects"] == [MULTI]
    assert sorted(i["sha256"] for i in e["images"]) == sorted(sha((root / p).read_bytes()) for p in w["image_path"])
    files = {Path(f["path"]).name: f for f in e["files"]}
    for name in ("samples.csv", "measurements.csv", "subjects.parquet", "coco.json"):
        assert files[name]["sha256_before"] == sha(before[name][0])
        assert files[name]["sha256_after"] == sha((root / name).read_bytes())
    assert files["samples.csv"]["rows_removed"] == 3 and files["samples.csv"]["rows_added"] == 3
    assert files["coco.json"]["rows_removed"] == 3 + 6
    assert e["store"]["rows_removed"] == {"faces": 3, "skin": 3}
    assert len(e["replacement"]["pairs"]) == 3
    doc = json.loads((root / "report" / "report.json").read_text())
    assert any(s["id"] == "curation_withdraw" for s in doc["sections"])
    assert not list(root.glob(".*journal*")) and not list(root.glob(".*.tmp"))


def test_dry_run_changes_nothing(ds, capsys):
    root, data, pool = ds
    before = snapshot(root)
    rc = main(["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, *derived_args(root),
               "--store", str(root / "store"), "--pool", str(root / "pool.csv"), "--replace", "--delete-images"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "would remove 3 of 486 rows" in out and "dry run" in out
    after = snapshot(root)
    assert after.keys() - before.keys() <= {".samples.csv.withdraw.lock"}  # the lock is only taken to recover
    assert {k: v for k, v in after.items() if k in before} == before


def test_second_run_is_a_noop_and_log_is_append_only(ds, capsys):
    root, data, pool = ds
    args = ["curate", "withdraw", str(root / "samples.csv"), *derived_args(root), "--store", str(root / "store"),
            "--apply", "--delete-images"]
    assert main([*args, "--subject", data["subject_id"][5]]) == 0
    log_path = root / "withdrawals.log.jsonl"
    first = log_path.read_bytes()
    assert first.count(b"\n") == 1
    gone_image = root / data.loc[data["subject_id"] == json.loads(first)["subjects"][0], "image_path"].iloc[0]
    assert not gone_image.exists()  # --delete-images
    before = snapshot(root)
    capsys.readouterr()
    assert main([*args, "--subject", json.loads(first)["subjects"][0]]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert snapshot(root) == before  # nothing touched, nothing logged
    other = data["subject_id"][10]
    assert main([*args, "--subject", other, "--hash-subject"]) == 0
    now = log_path.read_bytes()
    assert now.startswith(first) and now.count(b"\n") == 2
    second = json.loads(now.splitlines()[1])
    assert second["subjects"] is None
    assert second["subject_sha256"] and other not in now.decode()
    # a hashed withdrawal is recognised too: a third run for it is a no-op
    assert main([*args, "--subject", other]) == 0
    assert log_path.read_bytes() == now


def test_assignment_is_optimal_where_greedy_is_not():
    # pronoun, age group, ancestry; greedy (each withdrawn image in turn takes its best remaining candidate)
    # gives w1 -> c1 (2 mismatches) and w2 -> c2 (3): 5. The optimum is w1 -> c2 (3) and w2 -> c1 (1): 4.
    cols = ["pronoun", "age", "ancestry"]
    w = pd.DataFrame([["she", "20-29", "Africa"], ["she", "60+", "Europe"]], columns=cols)
    c = pd.DataFrame([["she", "40-49", "Europe"], ["he", "40-49", "Asia"]], columns=cols)
    cost = np.array([[sum(a != b for a, b in zip(wr, cr)) for cr in c.to_numpy()] for wr in w.to_numpy()])
    assert cost.tolist() == [[2, 3], [1, 3]]
    greedy = cost[0, 0] + cost[1, 1]
    brute = min(cost[0, p[0]] + cost[1, p[1]] for p in itertools.permutations(range(2)))
    res = match_replacements(w, c, cols)
    assert res["candidate"].tolist() == [1, 0]
    assert res["primary_mismatches"].sum() == brute == 4 < greedy


def test_primary_outweighs_all_secondary_and_features():
    # assignment A (w1->c1, w2->c2): 0 primary, 4 secondary mismatches; B: 2 primary, 0 secondary. A must win.
    w = pd.DataFrame({"g": ["F", "M"], "s1": ["x", "y"], "s2": ["x", "y"], "f": [0.0, 1.0]})
    c = pd.DataFrame({"g": ["F", "M"], "s1": ["y", "x"], "s2": ["y", "x"], "f": [1.0, 0.0]})
    res = match_replacements(w, c, ["g"], ["s1", "s2"], ["f"])
    assert res["candidate"].tolist() == [0, 1]
    assert res["secondary_mismatches"].tolist() == [2, 2]
    # secondary ties broken by the numeric features: the closer candidate wins
    w = pd.DataFrame({"g": ["F"], "f": [0.1]})
    c = pd.DataFrame({"g": ["F", "F", "M"], "f": [0.9, 0.2, 0.1]})
    assert match_replacements(w, c, ["g"], [], ["f"])["candidate"].tolist() == [1]
    # fewer candidates than withdrawn images: the rest get -1
    assert match_replacements(w.iloc[[0, 0]].reset_index(drop=True), c.iloc[:1], ["g"])["candidate"].tolist() in ([0, -1], [-1, 0])


def _run_cli(args, env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "fairvision", *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("hook,value", [(CRASH_AFTER_RENAMES, f"{CRASH_AFTER_RENAMES}:2"),
                                        (CRASH_AFTER_RENAMES, f"{CRASH_AFTER_RENAMES}:0"),
                                        (CRASH_BEFORE_COMMIT, CRASH_BEFORE_COMMIT)])
def test_killed_apply_leaves_old_or_new_state(ds, hook, value):
    root, data, pool = ds
    before = snapshot(root)
    # the expected new state, from an in-process plan (nothing applied)
    plan = plan_withdrawal(root / "samples.csv", [MULTI], derived=[root / f for f in ("measurements.csv", "subjects.parquet", "coco.json")],
                           store=ResultsStore(root / "store"))
    expected = {f.path.name: f.new_bytes for f in plan.files}
    assert len(expected) == 4
    args = ["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, *derived_args(root),
            "--store", str(root / "store"), "--apply"]
    r = _run_cli(args, {CRASH_ENV: value})
    assert r.returncode == -9, r.stderr  # SIGKILL
    journal = root / ".samples.csv.withdraw.journal.json"
    assert journal.exists()
    if hook == CRASH_AFTER_RENAMES:
        # committed, two of four renames done: the next run (any run, here a dry run of another subject) finishes
        r = _run_cli(["curate", "withdraw", str(root / "samples.csv"), "--subject", data["subject_id"][20],
                      "--store", str(root / "store")], {})
        assert r.returncode == 0, r.stderr
        assert "rolled forward" in r.stdout
        # the dry run says honestly that it finished the earlier --apply, and changed nothing else
        assert "even though this run is a dry run" in r.stdout and "dry run: nothing else was changed" in r.stdout
        for name, new in expected.items():
            assert (root / name).read_bytes() == new
        check_withdrawn(root, data, before, MULTI)
        assert len(read_log(root / "withdrawals.log.jsonl")) == 1
    else:
        # killed before the commit point: the files are the old ones; the next run removes the temporaries
        assert {k: v[0] for k, v in snapshot(root).items() if k in before} == {k: v[0] for k, v in before.items()}
        r = _run_cli(["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, "--store", str(root / "store")], {})
        assert r.returncode == 0 and "rolled back" in r.stdout
        after = snapshot(root)
        assert set(after) - set(before) <= {".samples.csv.withdraw.lock"}
        assert {k: v[0] for k, v in after.items() if k in before} == {k: v[0] for k, v in before.items()}
        assert not (root / "withdrawals.log.jsonl").exists()
    assert not journal.exists() and not list(root.glob(".*.tmp"))
    # a later apply works and a second one is a no-op
    assert main(args) == 0
    check_withdrawn(root, data, before, MULTI)
    n = len(read_log(root / "withdrawals.log.jsonl"))
    assert main(args) == 0 and len(read_log(root / "withdrawals.log.jsonl")) == n


def test_fairface_json_layout_without_subject_column(tmp_path, demo_images):
    """The FairFace ground_truth.json layout: no subject column, so a sample is its own subject."""
    root = tmp_path / "ff"
    root.mkdir()
    records = json.loads((demo_path("fairface") / "ground_truth.json").read_text())
    for r in records:
        r["filename"] = str(demo_images / r["filename"])
    (root / "gt.json").write_text(json.dumps(records[:500], indent=1))
    (root / "pool.json").write_text(json.dumps(records[500:], indent=1))
    target = records[7]
    plan = plan_withdrawal(root / "gt.json", [target["id"]], pool=root / "pool.json", replace=True)
    assert plan.replacement.match == ["gender", "age"]
    entry = apply_withdrawal(plan, operator="t")
    assert entry is not None
    new = json.loads((root / "gt.json").read_text())
    assert new[:499] == [r for r in records[:500] if r["id"] != target["id"]]
    assert len(new) == 500 and new[-1]["id"] in {r["id"] for r in records[500:]}
    if plan.replacement.pairs["primary_mismatches"].iloc[0] == 0:
        assert (new[-1]["age"], new[-1]["gender"]) == (target["age"], target["gender"])


def test_bad_inputs_exit_2_with_one_line(ds, capsys):
    root, data, pool = ds
    samples = str(root / "samples.csv")
    cases = [
        (["--subject", "nobody"], "samples.csv"),
        (["--subject", MULTI, "--pool", str(root / "pool.csv"), "--match", "age,ethnicity"], "ethnicity"),
        (["--subject", MULTI, "--replace"], "--pool"),
        (["--subject", MULTI, "--derived", str(root / "nothing.csv")], "nothing.csv"),
    ]
    pool.drop(columns=["gender"]).to_csv(root / "pool_nogender.csv", index=False)
    cases.append((["--subject", MULTI, "--pool", str(root / "pool_nogender.csv")], "pool_nogender.csv"))
    pd.DataFrame({"x": [1]}).to_csv(root / "noid.csv", index=False)
    cases.append((["--subject", MULTI, "--derived", str(root / "noid.csv")], "noid.csv"))
    before = snapshot(root)
    for extra, named in cases:
        rc = main(["curate", "withdraw", samples, "--no-store", "--apply", *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2, (extra, err)
        assert err.startswith("error:") and "\n" not in err and named in err, err
    after = snapshot(root)
    assert {k: v for k, v in after.items() if k in before} == before


def test_apply_refuses_a_plan_whose_files_changed(ds):
    root, data, pool = ds
    plan = plan_withdrawal(root / "samples.csv", [MULTI], derived=[root / "measurements.csv"], store=None)
    with open(root / "measurements.csv", "a") as fh:
        fh.write('extra,1.00,"x"\n')
    before = snapshot(root)
    with pytest.raises(InputFileError, match="measurements.csv: changed since"):
        apply_withdrawal(plan)
    after = snapshot(root)
    assert {k: v for k, v in after.items() if k in before} == before
    assert not list(root.glob(".*journal*")) and not list(root.glob(".*.tmp"))


def test_store_rows_of_another_dataset_with_the_same_subject_id_stay(ds):
    """The store is shared by datasets: a row another dataset stored under the same short subject id (other image
    bytes) is not this subject's and stays; a subject found only in the store is not found."""
    root, data, _ = ds
    store = ResultsStore(root / "store")
    other = root / "other.bin"
    other.write_bytes(b"another dataset's image")
    store.put("skin", "elsewhere", {"ita": 1.0}, content_hash=file_sha256(other), sample_id="x", subject_id=MULTI,
              image_path="/data/otherdataset/x.jpg")
    store.put("skin", "ghost", {"ita": 1.0}, content_hash=sha(b"ghost"), sample_id="g", subject_id="s-only-in-store")
    store.flush()
    assert main(["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, "--store", str(root / "store"),
                 "--apply"]) == 0
    rows = store_rows(root)
    assert set(rows.loc[rows["subject_id"] == MULTI, "sample_id"]) == {"x"}
    assert len(rows) == 14 - 2 * 3  # 12 + the two rows above, minus the subject's 3 images x 2 stages
    with pytest.raises(Exception, match="not found"):
        plan_withdrawal(root / "samples.csv", ["s-only-in-store"], store=ResultsStore(root / "store"))


def test_coco_images_of_another_folder_with_the_same_name_stay(ds):
    """train/001.jpg and val/001.jpg are different images: only the withdrawn image's own path goes, and a name
    that cannot be told apart is an error that changes nothing."""
    root, data, _ = ds
    r = data.iloc[5]
    name = Path(r["image_path"]).name
    coco = {"images": [{"id": 1, "file_name": r["image_path"]}, {"id": 2, "file_name": f"val/{name}"},
                       {"id": 3, "file_name": f"x/{name}"}],
            "annotations": [{"id": k, "image_id": k, "category_id": 1, "bbox": [1, 2, 3, 4]} for k in (1, 2, 3)],
            "categories": [{"id": 1, "name": "face"}]}
    (root / "split.json").write_text(json.dumps(coco))
    plan = plan_withdrawal(root / "samples.csv", [r["subject_id"]], derived=[root / "split.json"])
    apply_withdrawal(plan)
    left = json.loads((root / "split.json").read_text())
    assert [im["id"] for im in left["images"]] == [2, 3] and [a["image_id"] for a in left["annotations"]] == [2, 3]
    ambiguous = {"images": [{"id": 1, "file_name": f"train/{data.iloc[6]['sample_id']}.jpg"},
                            {"id": 2, "file_name": f"val/{data.iloc[6]['sample_id']}.jpg"}], "annotations": []}
    (root / "ambiguous.json").write_text(json.dumps(ambiguous))
    with pytest.raises(InputFileError, match="share that name"):
        plan_withdrawal(root / "samples.csv", [data.iloc[6]["subject_id"]], derived=[root / "ambiguous.json"])


def test_an_image_that_a_kept_row_also_shows_is_not_deleted(ds):
    """Two people in one photo: withdrawing one keeps the file (and the store rows of its bytes) for the other."""
    root, data, _ = ds
    shared = data.iloc[1]["image_path"]
    df = pd.read_csv(root / "samples.csv", dtype=str)
    df.loc[7, "image_path"] = shared  # row 7 (another subject) shows the same photo as row 1
    df.to_csv(root / "samples.csv", index=False)
    subject = data.iloc[1]["subject_id"]
    assert main(["curate", "withdraw", str(root / "samples.csv"), "--subject", subject, "--store",
                 str(root / "store"), "--delete-images", "--apply"]) == 0
    assert (root / shared).is_file()
    rows = store_rows(root)
    assert (rows["subject_id"] == subject).sum() == 2  # the photo's rows stay: it is still in the dataset


def test_apply_rechecks_every_scanned_file_not_only_the_changed_ones(ds):
    """A derived file scanned with no row of the subject gains one between plan and apply: the plan would not
    change that file, yet apply must refuse (it re-checks the SHA-256 of every file the plan read), change
    nothing, and a new plan removes the new row too."""
    root, data, _ = ds
    subject = data["subject_id"][20]
    sid = data["sample_id"][20]
    extra = root / "extra.csv"
    extra.write_text("sample_id,score\nzzz,1\n")
    derived = [root / "measurements.csv", extra]
    plan = plan_withdrawal(root / "samples.csv", [subject], derived=derived)
    assert extra not in {f.path for f in plan.files} and plan.checked[extra] == sha(extra.read_bytes())
    extra.write_text(f"sample_id,score\nzzz,1\n{sid},2\n")  # meanwhile: a row of the subject appears
    before = snapshot(root)
    with pytest.raises(InputFileError, match="extra.csv: changed since the withdrawal was planned"):
        apply_withdrawal(plan)
    assert {k: v[0] for k, v in snapshot(root).items() if k in before} == {k: v[0] for k, v in before.items()}
    assert not (root / "withdrawals.log.jsonl").exists()
    again = plan_withdrawal(root / "samples.csv", [subject], derived=derived)
    assert apply_withdrawal(again) is not None
    assert extra.read_text() == "sample_id,score\nzzz,1\n"


def test_apply_help_says_what_a_dry_run_may_change():
    from typer.testing import CliRunner

    from fairvision.cli import app

    out = " ".join(CliRunner().invoke(app, ["curate", "withdraw", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "changes nothing, except that it first finishes an earlier --apply that was interrupted" in out


def test_hash_subject_report_names_no_withdrawn_id(ds, capsys):
    """--hash-subject: report.json carries neither the subject id nor the withdrawn sample ids nor their image
    paths; the withdrawn sample ids appear as the log's salted hash. rows_before are whole numbers. A repeat
    (no-op) run with -o still writes a short report and says so."""
    from fairvision.audits.curation.withdraw import subject_hash

    root, data, pool = ds
    out = root / "rep"
    args = ["curate", "withdraw", str(root / "samples.csv"), "--subject", MULTI, *derived_args(root),
            "--store", str(root / "store"), "--pool", str(root / "pool.csv"), "--apply", "--replace",
            "--hash-subject"]
    assert main([*args, "-o", str(out)]) == 0
    text = (out / "report.json").read_text()
    gone = data.loc[data["subject_id"] == MULTI]
    assert MULTI not in text
    for sid, path in zip(gone["sample_id"], gone["image_path"]):
        assert sid not in text and Path(path).name not in text
        assert subject_hash(sid) in text  # independent: the same salted hash as the log's subject_sha256
    doc = json.loads(text)
    sec = next(s for s in doc["sections"] if s["id"] == "curation_withdraw")
    changes = next(b for b in sec["blocks"] if b.get("name") == "changes")
    col = changes["columns"].index("rows_before")
    samples_row = next(r for r in changes["data"] if r[0] == "samples")
    assert samples_row[col] == len(data) and isinstance(samples_row[col], int)
    # a no-op repeat with -o: a short report, and stdout says nothing changed
    capsys.readouterr()
    assert main([*args, "-o", str(root / "rep2")]) == 0
    printed = capsys.readouterr().out
    assert "nothing to do" in printed and "nothing changed" in printed
    doc2 = json.loads((root / "rep2" / "report.json").read_text())
    assert any("Nothing to do" in f["sentence"] for f in doc2["findings"])

"""The results store: round trip, keys (a changed parameter recomputes, the same one never does), a run
killed midway resumes, two writers at once, forget --subject, and DuckDB queries through the CLI."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from fairvision.cli import main
from fairvision.io.store import ResultsStore, file_sha256, row_key


def _fill(store, stage, n, *, subject=lambda i: None, value=lambda i: i, sample=lambda i: f"s{i}"):
    for i in range(n):
        store.put(stage, row_key(f"img{i}", "p1"), {"v": value(i), "ok": i % 2 == 0, "reason": None},
                  content_hash=f"img{i}", params_hash="p1", sample_id=sample(i), subject_id=subject(i))
    store.flush()


def test_round_trip_info_vacuum(tmp_path):
    store = ResultsStore(tmp_path / "s", batch_rows=3)
    _fill(store, "skin", 7)
    _fill(store, "skin", 2, value=lambda i: 100 + i)  # the same results again, newer: supersede the first two
    _fill(store, "faces", 2)
    parts = store.parts("skin")
    assert len(parts) == 4 and all(p.name.startswith("part-") for p in parts)
    got = store.get_many("skin", [row_key(f"img{i}", "p1") for i in range(8)])
    assert len(got) == 7 and got[row_key("img0", "p1")]["v"] == 100 and got[row_key("img5", "p1")]["v"] == 5
    info = store.info().set_index("stage")
    assert info.loc["skin", "rows"] == 9 and info.loc["skin", "unique_rows"] == 7 and info.loc["faces", "rows"] == 2
    stats = store.vacuum()
    assert (stats["rows_before"], stats["rows_after"]) == (11, 9)
    assert [len(store.parts(s)) for s in ("faces", "skin")] == [1, 1]
    after = store.get_many("skin", [row_key(f"img{i}", "p1") for i in range(7)])
    assert {k: {**v, "_subjects": None} for k, v in after.items()} == {k: {**v, "_subjects": None} for k, v in got.items()}
    df = store.query("SELECT sample_id, v, ok FROM skin ORDER BY sample_id")
    assert df.sample_id.tolist() == [f"s{i}" for i in range(7)] and df.v.tolist() == [100, 101, 2, 3, 4, 5, 6]


def test_file_hash_is_the_content_and_remembered(tmp_path):
    import hashlib

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"same bytes")
    b.write_bytes(b"same bytes")
    assert file_sha256(a) == file_sha256(b) == hashlib.sha256(b"same bytes").hexdigest()
    assert file_sha256(tmp_path / "gone") is None
    a.write_bytes(b"other bytes!")  # another size: hashed again, not taken from memory
    assert file_sha256(a) == hashlib.sha256(b"other bytes!").hexdigest()


@pytest.fixture(scope="module")
def portraits():
    from fairvision.datasets import load_portraits

    return load_portraits()


@pytest.mark.vision
def test_parameters_change_recomputes_same_parameters_hit(portraits, tmp_path):
    from fairvision.audits.settings import AuditSettings
    from fairvision.skin.batch import MeasureParams, measure_images

    few = portraits.head(3)
    kw = dict(settings=AuditSettings(workers=1), progress=False, categories=False, store=tmp_path / "s")
    first = measure_images(few, params=MeasureParams(method="mean"), **kw)
    assert not first.from_cache.any()
    again = measure_images(few, params=MeasureParams(method="mean"), **kw)
    assert again.from_cache.all()
    pd.testing.assert_frame_equal(first.drop(columns="from_cache"), again.drop(columns="from_cache"))
    changed = MeasureParams(method="mean", min_pixels=100)
    other = measure_images(few, params=changed, **kw)  # a changed parameter: all recomputed
    assert not other.from_cache.any()
    assert measure_images(few, params=changed, **kw).from_cache.all()
    assert ResultsStore(tmp_path / "s").info().set_index("stage").loc["skin", "params"] == 2


_MEASURE_SCRIPT = textwrap.dedent("""
    import sys
    from fairvision.audits.settings import AuditSettings
    from fairvision.datasets import load_portraits
    from fairvision.io.store import ResultsStore
    from fairvision.skin.batch import MeasureParams, measure_images
    measure_images(load_portraits(), params=MeasureParams(method="mean"), settings=AuditSettings(workers=1),
                   progress=False, categories=False, store=ResultsStore(sys.argv[1], batch_rows=3))
""")


@pytest.mark.vision
def test_killed_run_resumes_recomputing_only_what_is_missing(portraits, tmp_path):
    from fairvision.audits.settings import AuditSettings
    from fairvision.skin.batch import STAGE, MeasureParams, measure_images

    root = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", _MEASURE_SCRIPT, str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list(root.glob(f"{STAGE}/part-*.parquet"))) < 2:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # no chance to flush or clean up
        proc.wait(timeout=30)
    finally:
        proc.kill()
    parts = list(root.glob(f"{STAGE}/part-*.parquet"))
    stored = pd.concat([pq.read_table(p).to_pandas() for p in parts])  # every part is whole
    print("stored before the kill:", stored.key.nunique(), "rows in", len(parts), "parts")
    assert 0 < stored.key.nunique() < len(portraits)
    resumed = measure_images(portraits, params=MeasureParams(method="mean"), settings=AuditSettings(workers=2),
                             progress=False, categories=False, store=root)
    assert resumed.from_cache.sum() == stored.key.nunique(), (resumed.from_cache.sum(), sorted(stored.sample_id), resumed.sample_id[resumed.from_cache].tolist())  # nothing stored is measured again ...
    assert (~resumed.from_cache).sum() == len(portraits) - stored.key.nunique()  # ... and the rest is
    assert ResultsStore(root).info().loc[0, "keys"] == len(portraits)
    full = measure_images(portraits, params=MeasureParams(method="mean"), settings=AuditSettings(workers=1),
                          progress=False, categories=False, store=root)
    assert full.from_cache.all()


_WRITER_SCRIPT = textwrap.dedent("""
    import sys
    from fairvision.io.store import ResultsStore, row_key
    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = ResultsStore(root, batch_rows=7)
    for i in range(start, stop):
        store.put("stage_a", row_key(f"img{i}", "p"), {"v": i}, content_hash=f"img{i}", params_hash="p",
                  sample_id=f"s{i}")
        store.put("stage_b", row_key(f"img{i}", "q"), {"w": -i}, content_hash=f"img{i}", params_hash="q",
                  sample_id=f"s{i}")
    store.flush()
""")


def test_two_writers_at_once_then_vacuum(tmp_path):
    root = tmp_path / "s"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT, str(root), str(a), str(b)])
             for a, b in ((0, 300), (200, 500))]  # 100 results written by both
    store = ResultsStore(root)
    vacuums = 0
    while any(p.poll() is None for p in procs):  # compact while they write
        vacuums += store.vacuum()["stages"] > 0
        time.sleep(0.01)
    print("vacuums during writes:", vacuums)
    assert [p.returncode for p in procs] == [0, 0]
    store.vacuum()
    info = store.info().set_index("stage")
    assert info["rows"].tolist() == [500, 500] and info["unique_rows"].tolist() == [500, 500]
    assert info["parts"].tolist() == [1, 1]
    got = store.get_many("stage_a", [row_key(f"img{i}", "p") for i in range(500)])
    assert sorted(v["v"] for v in got.values()) == list(range(500))
    assert not [p for p in root.rglob(".*") if p.name != ".lock"]  # no leftovers


def test_forget_subject_from_every_stage(tmp_path, capsys):
    root = tmp_path / "s"
    store = ResultsStore(root, batch_rows=4)
    subject = lambda i: ["ann", "bob", None][i % 3]  # noqa: E731
    _fill(store, "skin", 12, subject=subject)
    _fill(store, "faces", 12, subject=lambda i: None)  # the same images, no subject recorded: found by content
    args = ["store", "forget", "--subject", "ann", "--store", str(root)]
    assert main(args + ["--dry-run"]) == 0
    assert "would remove 8 rows of subject 'ann' (faces: 4, skin: 4)" in capsys.readouterr().out
    assert store.info()["rows"].sum() == 24
    assert main(args) == 0
    assert "removed 8 rows of subject 'ann'" in capsys.readouterr().out
    left = store.query("SELECT sample_id FROM skin UNION ALL SELECT sample_id FROM faces")
    assert len(left) == 16 and not {f"s{i}" for i in range(0, 12, 3)} & set(left.sample_id)
    assert main(args) == 0 and "removed 0 rows" in capsys.readouterr().out
    assert not [p for p in root.rglob(".*") if p.name != ".lock"]


@pytest.mark.vision
def test_measured_subjects_can_be_forgotten(portraits, tmp_path, capsys):
    from fairvision.audits.settings import AuditSettings
    from fairvision.skin.batch import MeasureParams, measure_images

    few = portraits.head(3).assign(subject_id=["p1", "p2", "p1"])
    root = tmp_path / "s"
    kw = dict(params=MeasureParams(method="mean"), settings=AuditSettings(workers=1), progress=False,
              categories=False, store=root)
    measure_images(few[["sample_id", "image_path"]], **kw)  # first measured without subjects ...
    again = measure_images(few, **kw)
    assert again.from_cache.all()  # ... then with them: read from the store, and the subjects recorded
    assert main(["store", "forget", "--subject", "p1", "--store", str(root)]) == 0
    assert "removed 4 rows of subject 'p1'" in capsys.readouterr().out
    kept = ResultsStore(root).query("SELECT DISTINCT sample_id FROM skin")
    assert kept.sample_id.tolist() == [few.sample_id.iloc[1]]


def test_query_info_and_vacuum_commands(tmp_path, capsys):
    root = tmp_path / "s"
    _fill(ResultsStore(root, batch_rows=5), "skin", 10)
    assert main(["store", "query", "SELECT ok, count(*) AS n, sum(v) AS total FROM skin GROUP BY ok ORDER BY ok",
                 "--store", str(root), "-o", str(tmp_path / "q.csv")]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "table:" in out
    got = pd.read_csv(tmp_path / "q.csv")
    assert got.to_dict("list") == {"ok": [False, True], "n": [5, 5], "total": [25, 20]}
    assert main(["store", "info", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "skin" in out and "10 rows in 2 parts" in out
    assert main(["store", "vacuum", "--store", str(root)]) == 0
    assert "2 parts -> 1" in capsys.readouterr().out
    for args, message in [
        (["query", "SELECT * FROM nothing_here"], "query failed:"),
        (["query", "SELECT 1", "-o", str(tmp_path / "q.xlsx")], "unknown output format"),
        (["forget", "--subject", " "], "--subject is empty"),
    ]:
        assert main(["store", *args, "--store", str(root)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err
    assert main(["store", "query", "SELECT 1", "--store", str(tmp_path / "none")]) == 2
    assert "no results store here" in capsys.readouterr().err


def test_default_store_follows_the_environment(tmp_path, monkeypatch):
    from fairvision.io.store import default_store_root, open_store

    monkeypatch.setenv("FAIRVISION_STORE", str(tmp_path / "env-store"))
    assert default_store_root() == tmp_path / "env-store" and open_store().root == tmp_path / "env-store"
    monkeypatch.delenv("FAIRVISION_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_root() == tmp_path / "xdg" / "fairvision" / "store"
    assert open_store(enabled=False) is None
    assert os.environ.get("HOME") is None or not str(default_store_root()).startswith(os.environ["HOME"] + "/.cache")


_FORGET_SCRIPT = textwrap.dedent("""
    import sys
    from fairvision.io.store import ResultsStore
    ResultsStore(sys.argv[1]).forget("ann")
""")


def test_killed_forget_is_finished_by_the_next_process(tmp_path):
    """A forget killed after its commit point (the journal is written, one of two renames done) leaves a journal
    that the next process taking the lock finishes: the subject's rows are gone from both stages, the others
    stay, and nothing is left over (the crash point is the one of fairvision.io.durable, as for withdrawal)."""
    from fairvision.io.durable import CRASH_ENV
    from fairvision.io.store import CRASH_AFTER_RENAMES, JOURNAL_NAME

    root = tmp_path / "s"
    store = ResultsStore(root)
    _fill(store, "skin", 6, subject=lambda i: ["ann", "bob"][i % 2])
    _fill(store, "faces", 6, subject=lambda i: ["ann", "bob"][i % 2])
    r = subprocess.run([sys.executable, "-c", _FORGET_SCRIPT, str(root)], capture_output=True, text=True,
                       env={**os.environ, CRASH_ENV: f"{CRASH_AFTER_RENAMES}:1"}, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    journal = json.loads((root / JOURNAL_NAME).read_text())
    assert len(journal["rename"]) == 2 and len(journal["delete"]) == 2
    left = ResultsStore(root).query("SELECT stage, subject_id FROM skin UNION ALL SELECT stage, subject_id FROM faces")
    assert sorted(left["subject_id"]) == ["bob"] * 6 and sorted(left["stage"]) == ["faces"] * 3 + ["skin"] * 3
    assert not (root / JOURNAL_NAME).exists()
    assert not [p for p in root.rglob(".*") if p.name != ".lock"]  # no leftovers

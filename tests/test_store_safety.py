"""Store safety, as real runs on a real DuckDB store: `store query` runs exactly one read-only SELECT on a connection
that can open no file but the store's own parts (COPY, a second statement, ATTACH, INSTALL/LOAD, SET, reading
other files: refused, and nothing written), and files in a stage folder that the store did not write (a COPY's
output, a wrong schema, garbage bytes) are ignored by info, query, reads and `skin measure`, reported, and never
folded in by vacuum or touched by forget."""

import shutil
import warnings

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.io.store import ForeignPartsWarning, ResultsStore, check_select, part_problem, row_key


def _fill(store, stage, n, *, subject=lambda i: None):
    for i in range(n):
        store.put(stage, row_key(f"img{i}", "p1"), {"v": i, "ok": i % 2 == 0, "L": 40.0 + 5 * i},
                  content_hash=f"img{i}", params_hash="p1", sample_id=f"s{i}", subject_id=subject(i))
    store.flush()


@pytest.fixture()
def store_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths in hostile SQL land here
    root = tmp_path / "store"
    _fill(ResultsStore(root, batch_rows=4), "skin", 10, subject=lambda i: ["ann", "bob"][i % 2])
    return root


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _refused(args, capsys):
    """Run `fairvision store ...`; return its one error line (exit 2, no traceback)."""
    assert main(["store", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_query_refuses_everything_but_one_select_and_writes_nothing(store_root, tmp_path, capsys):
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    own_part = ResultsStore(store_root).parts("skin")[0]
    before_tmp, before_store = _files(tmp_path), _files(store_root)
    cases = [
        (f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'", "not COPY"),
        ("COPY (SELECT 1) TO 'x.csv'", "not COPY"),
        (f"COPY (SELECT * FROM skin) TO '{store_root / 'skin' / 'part-x.parquet'}' (FORMAT parquet)", "not COPY"),
        ("SELECT 1; SELECT 2", "holds 2 statements"),
        ("SELECT 1; COPY (SELECT 1) TO 'y.csv'", "holds 2 statements"),
        (f"ATTACH '{tmp_path / 'a.db'}' AS a", "not ATTACH"),
        ("INSTALL httpfs", "not INSTALL or LOAD"),
        ("LOAD httpfs", "not INSTALL or LOAD"),
        ("SET enable_external_access = true", "not SET"),
        ("PRAGMA version", "not PRAGMA"),
        ("CREATE TABLE t AS SELECT 1", "not CREATE"),
        ("EXPORT DATABASE 'exported'", "not EXPORT"),
        ("CALL pragma_version()", "not CALL"),
        ("SELEC 1", "query failed: Parser Error"),
        # a single SELECT, but reaching outside the store's own parts: refused by the connection itself
        (f"SELECT * FROM read_csv('{secret}')", "query failed: Permission Error"),
        (f"SELECT * FROM '{secret}'", "query failed: Permission Error"),
        (f"SELECT * FROM read_text('{store_root / '.lock'}')", "query failed: Permission Error"),
        ("SELECT * FROM glob('*')", "query failed: Permission Error"),
        ("SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')", "query failed: Permission Error"),
        ("SELECT * FROM query('COPY (SELECT 1) TO ''z.csv''')", "query failed:"),
    ]
    for sql, message in cases:
        err = _refused(["query", sql, "--store", str(store_root)], capsys)
        assert message in err, (sql, err)
        with pytest.raises(FairvisionError, match=message.split(":")[0]):  # the library refuses it too
            ResultsStore(store_root).query(sql)
    assert _files(tmp_path) == before_tmp and _files(store_root) == before_store  # nothing written anywhere
    # the store's own parts stay readable, and the configuration is locked as it was left
    settings = ResultsStore(store_root).query(
        "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration', "
        "'autoinstall_known_extensions', 'autoload_known_extensions') ORDER BY name")
    assert dict(zip(settings.name, settings.value)) == {
        "autoinstall_known_extensions": "false", "autoload_known_extensions": "false",
        "enable_external_access": "false", "lock_configuration": "true"}
    assert ResultsStore(store_root).query(f"SELECT count(*) AS n FROM '{own_part}'").n.iloc[0] == 4


def test_normal_queries_still_work(store_root, tmp_path, capsys):
    readme = ("SELECT skin_tone, count(*) FROM (SELECT CASE WHEN L > 60 THEN 'light' ELSE 'dark' END AS skin_tone "
              "FROM skin WHERE ok) GROUP BY 1 ORDER BY 1")
    assert main(["store", "query", readme, "--store", str(store_root), "-o", str(tmp_path / "tones.csv")]) == 0
    got = pd.read_csv(tmp_path / "tones.csv")
    # ok rows: i = 0, 2, 4, 6, 8 with L = 40, 50, 60, 70, 80: three dark (L <= 60), two light
    assert got.to_dict("list") == {"skin_tone": ["dark", "light"], "count_star()": [3, 2]}
    for sql in ["WITH t AS (SELECT v FROM skin) SELECT sum(v) AS s FROM t", "FROM skin SELECT sum(v) AS s;",
                "SELECT sum(v) AS s FROM skin -- a comment"]:
        assert ResultsStore(store_root).query(sql).s.iloc[0] == 45
    assert check_select("  SELECT 1 ;  ") == "  SELECT 1 ;  "
    capsys.readouterr()


def test_without_allowed_paths_the_views_are_copied_into_memory(store_root):
    """The fallback for a DuckDB without ``allowed_paths``: the views become in-memory tables, then no file at all
    can be opened, the store's own parts included."""
    store = ResultsStore(store_root)
    con = duckdb.connect()
    try:
        store._views(con)
        store._lock_down(con, None)
        assert con.execute("SELECT count(*), sum(v) FROM skin").fetchone() == (10, 45)
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"SELECT * FROM '{store.parts('skin')[0]}'")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()


def _plant_foreign(root):
    """Three files in the skin folder the store did not write, as the issue found them and worse."""
    skin = root / "skin"
    con = duckdb.connect()  # an unrestricted DuckDB, as `store query` was: COPY writes a junk part
    con.execute(f"COPY (SELECT 1 AS junk) TO '{skin / 'part-x.parquet'}' (FORMAT parquet)")
    con.close()
    pq.write_table(pa.table({"key": ["k"], "payload": ["{}"]}), skin / "part-00000000000000000001-1-abcdefabcdef.parquet")
    (skin / "part-00000000000000000002-1-abcdefabcdef.parquet").write_bytes(b"PAR1 not really parquet")
    (root / "faces").mkdir()
    (root / "faces" / "notes.txt").write_text("a stray file")
    return {p: p.read_bytes() for p in [*skin.glob("part-*0001-*"), *skin.glob("part-*0002-*"),
                                        skin / "part-x.parquet", root / "faces" / "notes.txt"]}


def test_foreign_parts_are_ignored_reported_and_never_adopted(store_root, capsys):
    planted = _plant_foreign(store_root)
    store = ResultsStore(store_root)
    reasons = {p.name: why for p, why in store.foreign_parts()}
    assert reasons == {"part-x.parquet": "not a name the store gives its parts",
                       "part-00000000000000000001-1-abcdefabcdef.parquet": "columns (key, payload) not the store's",
                       "part-00000000000000000002-1-abcdefabcdef.parquet": "not a readable Parquet file",
                       "notes.txt": "not a name the store gives its parts"}
    assert part_problem(store.parts("skin")[0]) is None and len(store.parts("skin")) == 3
    assert store.stages() == ["skin"]

    info = store.info().set_index("stage")
    assert info.loc["skin", "rows"] == 10 and info.loc["skin", "foreign"] == 3
    assert info.loc["faces", "parts"] == 0 and info.loc["faces", "foreign"] == 1
    assert main(["store", "info", "--store", str(store_root)]) == 0
    out = capsys.readouterr().out
    assert "10 rows in 3 parts" in out and "4 file(s) in stage folders are not the store's own" in out
    assert "skin/part-x.parquet: not a name the store gives its parts" in out

    with pytest.warns(ForeignPartsWarning, match=r"3 file\(s\) in the results store not written by it"):
        got = ResultsStore(store_root).get_many("skin", [row_key(f"img{i}", "p1") for i in range(10)])
    assert sorted(r["v"] for r in got.values()) == list(range(10))

    assert main(["store", "query", "SELECT count(*) AS n, sum(v) AS s FROM skin", "--store", str(store_root)]) == 0
    captured = capsys.readouterr()
    assert "45" in captured.out and captured.err.count("warning: ") == 1
    assert "4 file(s) in the results store not written by it, ignored: faces/notes.txt" in captured.err

    assert main(["store", "vacuum", "--store", str(store_root)]) == 0
    out = capsys.readouterr().out
    assert "3 parts -> 1; 0 duplicate rows dropped" in out and "left as they are, not folded in: 4 file(s)" in out
    assert {p: p.read_bytes() for p in planted} == planted  # untouched, byte for byte
    assert len(store.parts("skin")) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ForeignPartsWarning)
        after = store.query("SELECT * FROM skin ORDER BY sample_id")
    assert len(after) == 10 and "junk" not in after.columns and after.v.sum() == 45

    assert main(["store", "forget", "--subject", "ann", "--store", str(store_root)]) == 0
    assert "removed 5 rows of subject 'ann'" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in planted} == planted
    assert store.info().set_index("stage").loc["skin", "rows"] == 5


@pytest.mark.vision
def test_skin_measure_runs_on_a_store_with_a_foreign_part(tmp_path, capsys):
    from fairvision.datasets import load_portraits

    photos = tmp_path / "photos"
    photos.mkdir()
    for path in load_portraits().image_path.head(2):
        shutil.copy(path, photos)
    root = tmp_path / "store"
    args = ["skin", "measure", str(photos), "--method", "mean", "--workers", "1", "--no-progress",
            "--store", str(root), "-o"]
    assert main([*args, str(tmp_path / "first.csv")]) == 0
    (root / "skin").mkdir(exist_ok=True)
    con = duckdb.connect()
    con.execute(f"COPY (SELECT 1 AS junk) TO '{root / 'skin' / 'part-x.parquet'}' (FORMAT parquet)")
    con.close()
    capsys.readouterr()
    with pytest.warns(ForeignPartsWarning, match="part-x.parquet"):
        assert main([*args, str(tmp_path / "again.csv")]) == 0
    first, again = pd.read_csv(tmp_path / "first.csv"), pd.read_csv(tmp_path / "again.csv")
    assert len(again) == 2 and "junk" not in again.columns
    cols = [c for c in first.columns if c != "from_cache"]
    pd.testing.assert_frame_equal(first[cols], again[cols])
    assert (root / "skin" / "part-x.parquet").exists()
    assert ResultsStore(root).info().set_index("stage").loc["skin", "foreign"] == 1

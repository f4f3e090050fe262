"""The whole-run memo of ``skin measure`` (fairvision.io.run_memo): a run with unchanged inputs and options writes
the table a second run would write, byte for byte, without importing numpy, pandas, pyarrow or DuckDB; any change
is a miss; a corrupt entry is a miss; consent withdrawal clears it; the store's own reads never see it. Also the
command line's registration of only the modules a command needs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fairvision.cli import main
from fairvision.io import run_memo
from fairvision.io.run_memo import MEMO_DIR, run_images
from fairvision.io.store import ResultsStore

PORTRAITS = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data" / "portraits"
HEAVY = ("numpy", "pandas", "pyarrow", "duckdb")
#: a fresh interpreter that runs the command line and prints its exit status and which heavy modules it imported
RUN = ("import json, sys; from fairvision.cli import main; rc = main(sys.argv[1:]); "
       f"print(json.dumps([rc, sorted(m for m in {HEAVY!r} if m in sys.modules)]))")


@pytest.fixture(autouse=True)
def code_at_start():
    """The package's source signature when the test starts: a miss that a concurrent edit of the package's source
    explains (the memo's key hashes every source file) skips the test instead of failing it."""
    return run_memo.package_signature()


def _expect_hit(printed, code_at_start):
    if "inputs unchanged" not in printed and run_memo.package_signature() != code_at_start:
        pytest.skip("the package's source changed during the test (a miss by design)")
    return "inputs unchanged" in printed


@pytest.fixture()
def folder(tmp_path):
    d = tmp_path / "images"
    d.mkdir()
    for name in ("001.jpg", "002.jpg", "003.jpg"):
        shutil.copy(PORTRAITS / name, d / name)
    return d


def _measure(folder, out, store, *extra):
    """One run in this process (colour masks: no face model to load), its exit status and printed lines."""
    return main(["skin", "measure", str(folder), "-o", str(out), "--store", str(store), "-j", "1", "--no-progress",
                 "--mask-method", "colour", *map(str, extra)])


def _fresh(folder, out, store, *extra):
    """The same run in a fresh interpreter: (exit status, heavy modules imported, stdout)."""
    p = subprocess.run([sys.executable, "-c", RUN, "skin", "measure", str(folder), "-o", str(out), "--store",
                        str(store), "-j", "1", "--no-progress", "--mask-method", "colour", *map(str, extra)],
                       capture_output=True, text=True, timeout=120)
    rc, heavy = json.loads(p.stdout.strip().splitlines()[-1])
    return rc, heavy, p.stdout


def _memo_files(store):
    return sorted((Path(store) / MEMO_DIR).glob("*.memo"))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_hit_writes_the_table_of_the_normal_second_run(folder, tmp_path, capsys, suffix, code_at_start):
    store = tmp_path / "store"
    assert _measure(folder, tmp_path / f"cold{suffix}", store) == 0
    assert len(_memo_files(store)) == 1
    shutil.rmtree(store / MEMO_DIR)  # the normal second run: every row from the store, no memo to read
    assert _measure(folder, tmp_path / f"warm{suffix}", store) == 0
    assert "(3 from the store)" in capsys.readouterr().out
    rc, heavy, out = _fresh(folder, tmp_path / f"hit{suffix}", store)
    assert _expect_hit(out, code_at_start) and rc == 0 and heavy == [], out
    assert out.startswith("3 images: ") and "(3 from the store); inputs unchanged since" in out
    assert (tmp_path / f"hit{suffix}").read_bytes() == (tmp_path / f"warm{suffix}").read_bytes()
    read = pd.read_parquet if suffix == ".parquet" else pd.read_csv
    hit, warm = read(tmp_path / f"hit{suffix}"), read(tmp_path / f"warm{suffix}")
    pd.testing.assert_frame_equal(hit, warm)  # all columns and dtypes
    assert hit["from_cache"].all() and len(hit) == 3
    # the cold run's own table is the normal one: measured here, not from the store
    cold = read(tmp_path / f"cold{suffix}")
    assert not cold["from_cache"].any()
    pd.testing.assert_frame_equal(cold.drop(columns="from_cache"), warm.drop(columns="from_cache"))


def test_the_memo_left_by_a_cold_run_equals_the_normal_second_run(folder, tmp_path, code_at_start):
    """The memo a cold run leaves (its rows measured, not read) is built as a second run builds its table."""
    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "cold.parquet", store, "--L-threshold", 55) == 0
    rc, heavy, out = _fresh(folder, tmp_path / "hit.parquet", store, "--L-threshold", 55)
    assert _expect_hit(out, code_at_start) and rc == 0 and heavy == [], out
    shutil.rmtree(store / MEMO_DIR)
    assert _measure(folder, tmp_path / "warm.parquet", store, "--L-threshold", 55) == 0
    assert (tmp_path / "hit.parquet").read_bytes() == (tmp_path / "warm.parquet").read_bytes()
    assert (pd.read_parquet(tmp_path / "hit.parquet")["L_threshold"] == 55).all()


def test_any_change_of_input_or_option_is_a_miss(folder, tmp_path, capsys, code_at_start):
    store = tmp_path / "store"
    out = tmp_path / "t.parquet"
    assert _measure(folder, out, store) == 0
    capsys.readouterr()

    def hit(*extra, path=out):
        assert _measure(folder, path, store, *extra) == 0
        printed = capsys.readouterr().out
        if "inputs unchanged" not in printed and run_memo.package_signature() != code_at_start:
            pytest.skip("the package's source changed during the test (a miss by design)")
        return "inputs unchanged" in printed

    assert hit()
    (folder / "002.jpg").write_bytes((folder / "002.jpg").read_bytes())  # same bytes, new time: the same input
    os.utime(folder / "002.jpg", (1, 1))
    assert hit()
    (folder / "notes.txt").write_text("not an image")  # not an image of the run
    assert hit()
    assert not hit("--L-threshold", 50)  # an option that shapes the table
    assert hit("--L-threshold", 50)
    assert not hit(path=tmp_path / "t.csv")  # another output format
    shutil.copy(PORTRAITS / "010.jpg", folder / "002.jpg")  # other bytes under the same name
    assert not hit()
    table = pd.read_parquet(out)
    assert not table.set_index("sample_id").loc["002", "from_cache"] and table["from_cache"].sum() == 2
    assert hit()
    shutil.copy(PORTRAITS / "011.jpg", folder / "004.jpg")  # one more image
    assert not hit() and len(pd.read_parquet(out)) == 4


def _without_date(memo: bytes) -> tuple:
    """A memo file's header (without the time it was written, which a rewrite a minute later changes) and body."""
    magic, header, body = memo.split(b"\n", 2)
    fields = json.loads(header)
    fields.pop("created")
    return magic, fields, body


def test_a_corrupt_or_foreign_memo_file_is_a_miss(folder, tmp_path, capsys):
    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "a.parquet", store) == 0
    memo = _memo_files(store)[0]
    good = memo.read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(PORTRAITS / "005.jpg", other / "005.jpg")
    assert _measure(other, tmp_path / "b.parquet", store) == 0
    foreign = next(p for p in _memo_files(store) if p != memo).read_bytes()
    capsys.readouterr()
    for bad in (b"", b"garbage", good[:-1], good[:-5] + b"xxxxx", foreign, good.replace(b'"rows": 3', b'"rows": "x"')):
        memo.write_bytes(bad)
        assert _measure(folder, tmp_path / "c.parquet", store) == 0
        printed = capsys.readouterr().out
        assert "inputs unchanged" not in printed and "(3 from the store)" in printed
        assert len(pd.read_parquet(tmp_path / "c.parquet")) == 3
        assert _without_date(memo.read_bytes()) == _without_date(good)  # the normal run left the entry again


def test_forget_clears_the_memo_and_the_stage_scan_ignores_it(folder, tmp_path, capsys):
    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "a.parquet", store) == 0
    res = ResultsStore(store)
    assert res.stages() == ["skin"] and res.foreign_parts() == []
    assert res.query("SELECT count(*) AS n FROM skin")["n"].iloc[0] == 3
    res.vacuum()
    assert len(_memo_files(store)) == 1 and res.stages() == ["skin"]
    capsys.readouterr()
    assert main(["store", "info", "--store", str(store)]) == 0
    info = capsys.readouterr().out
    assert "whole-run memo: 1 table" in info and "run-memo" not in info.split("whole-run memo")[0]
    res.forget("nobody", dry_run=True)
    assert len(_memo_files(store)) == 1
    res.forget("nobody")  # the memo may hold anyone's rows: every entry goes
    left = [p.name for p in (store / MEMO_DIR).iterdir()]
    assert _memo_files(store) == [] and left == [run_memo.GENERATION_NAME]  # a token, no rows


def test_no_memo_when_a_row_is_not_in_the_store(folder, tmp_path, monkeypatch, capsys):
    from PIL import Image

    store = tmp_path / "store"
    Image.open(folder / "001.jpg").resize((600, 600)).save(folder / "big.png")
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", str(500 * 500))  # the 600 x 600 image: a row the store does not keep
    for _ in range(2):
        assert _measure(folder, tmp_path / "a.parquet", store) == 0
        assert "inputs unchanged" not in capsys.readouterr().out
        assert _memo_files(store) == []
    table = pd.read_parquet(tmp_path / "a.parquet").set_index("sample_id")
    assert table.loc["big", "flags"] == "image_too_large" and table["from_cache"].sum() == 3
    monkeypatch.delenv("FAIRVISION_MAX_PIXELS")  # now it is measured and stored: the next run leaves a memo
    assert _measure(folder, tmp_path / "a.parquet", store) == 0
    assert len(_memo_files(store)) == 1


def test_run_images_agrees_with_the_folder_reader(tmp_path):
    from fairvision.datasets import load_portraits
    from fairvision.datasets.demo import IMAGE_SUFFIXES, from_folder

    assert run_memo.IMAGE_SUFFIXES == IMAGE_SUFFIXES
    d = tmp_path / "mixed"
    (d / "sub").mkdir(parents=True)
    for name in ("b.JPG", "a.png", "c.webp", "B.jpeg", "z.tiff", "sub/x.jpg", "notes.txt", "y.gif"):
        (d / name).write_bytes(b"x")
    (d / "link.png").symlink_to(d / "a.png")
    expected = from_folder(d.resolve())["image_path"].tolist()
    assert run_images(d) == expected and len(expected) == 6
    assert run_images(d / "a.png") == [str((d / "a.png").resolve())]
    assert run_images("portraits") == load_portraits()["image_path"].tolist()
    for source in (d / "notes.txt", tmp_path / "missing", d / "sub" / "nothing.jpg"):
        assert run_images(source) is None
    (d / ".hidden.jpg").write_bytes(b"x")  # left to the normal path
    assert run_images(d) is None
    (d / ".hidden.jpg").unlink()
    (d / "shard.tar").write_bytes(b"x")  # tar shards: the normal path
    assert run_images(d) is None


def test_the_memo_module_is_light_and_reads_versions_right():
    code = (f"import sys; import fairvision.io.run_memo as m; m.run_key([], {{}}); "
            f"print(sorted(x for x in {HEAVY!r} if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from importlib import metadata

    assert run_memo._table_packages() == {n: metadata.version(n) for n in ("numpy", "pandas", "pyarrow")}


def test_command_names_map_each_command_to_the_modules_that_register_it():
    from fairvision import cli

    full = cli.app  # every module registered

    def modules(typer_app):
        out = set()
        for c in typer_app.registered_commands:
            f = c.callback
            while hasattr(f, "__wrapped__"):
                f = f.__wrapped__
            out.add(f.__module__.rsplit(".", 1)[-1])
        for g in typer_app.registered_groups:
            out |= modules(g.typer_instance)
        return out

    found = {g.name: modules(g.typer_instance) for g in full.registered_groups}
    found.update({c.name: _one(c) for c in full.registered_commands})
    for name, mods in cli.COMMAND_NAMES.items():
        assert set(mods) == found[name], name
    assert "audit" not in cli.COMMAND_NAMES


def _one(command):
    f = command.callback
    while hasattr(f, "__wrapped__"):
        f = f.__wrapped__
    return {f.__module__.rsplit(".", 1)[-1]}


def test_help_is_the_same_however_the_modules_came_in():
    """One process that registers the modules a few at a time (skin, then store, then all) prints the help of a
    process that registered them all at once."""
    code = ("import sys, io, contextlib; from fairvision.cli import main\n"
            "for argv in (['skin', '--help'], ['store', '--help'], ['retrieval', '--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()): main(argv)\n"
            "main(sys.argv[1:])")
    env = {**os.environ, "COLUMNS": "120"}
    for args in (["--help"], ["skin", "--help"], ["audit", "--help"]):
        mixed = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
        whole = subprocess.run([sys.executable, "-c", "import sys; from fairvision.cli import app, main; "
                                "main(sys.argv[1:])", *args], capture_output=True, text=True, env=env)
        assert mixed.stdout == whole.stdout and mixed.stdout.count("\n") > 5, args


def test_a_store_with_a_foreign_file_takes_the_normal_path_and_warns(folder, tmp_path, capsys):
    from fairvision.io.store import ForeignPartsWarning

    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "a.parquet", store) == 0
    (store / "skin" / "notes.parquet").write_bytes(b"someone else's file")
    with pytest.warns(ForeignPartsWarning, match="notes.parquet"):
        assert _measure(folder, tmp_path / "b.parquet", store) == 0
    assert "inputs unchanged" not in capsys.readouterr().out
    assert (tmp_path / "a.parquet").exists() and len(pd.read_parquet(tmp_path / "b.parquet")) == 3


def test_a_withdrawal_during_a_run_leaves_no_memo_of_what_it_read(folder, tmp_path, monkeypatch, capsys):
    """``forget`` between a run's store reads and its memo: the memo would keep the withdrawn rows, so none is
    written (the generation token the run read before reading the store has been renewed)."""
    import fairvision.skin.batch as batch

    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "a.parquet", store) == 0  # fills the store and leaves a memo
    shutil.rmtree(store / MEMO_DIR)  # the next run reads every row from the store and would keep a memo
    measure = batch.measure_images

    def measure_then_withdraw(*args, **kwargs):
        df = measure(*args, **kwargs)
        ResultsStore(store).forget("nobody")  # takes the exclusive lock, as a consent withdrawal does
        return df

    monkeypatch.setattr(batch, "measure_images", measure_then_withdraw)
    gen = run_memo.memo_generation(store)
    assert _measure(folder, tmp_path / "b.parquet", store) == 0
    assert "(3 from the store)" in capsys.readouterr().out
    assert _memo_files(store) == [] and run_memo.memo_generation(store) not in ("", gen)
    monkeypatch.setattr(batch, "measure_images", measure)
    assert _measure(folder, tmp_path / "c.parquet", store) == 0  # with no withdrawal, the memo comes back
    assert len(_memo_files(store)) == 1


def test_a_stage_emptied_by_hand_is_a_miss(folder, tmp_path, capsys, code_at_start):
    """The rows a memo holds must still be in the store: with the stage's parts deleted, the run measures again."""
    store = tmp_path / "store"
    assert _measure(folder, tmp_path / "a.parquet", store) == 0
    assert _measure(folder, tmp_path / "b.parquet", store) == 0
    assert _expect_hit(capsys.readouterr().out, code_at_start)
    for part in (store / "skin").glob("*.parquet"):  # the folder stays, empty
        part.unlink()
    assert not run_memo.stage_answers(store, "skin")
    assert _measure(folder, tmp_path / "c.parquet", store) == 0
    printed = capsys.readouterr().out
    assert "inputs unchanged" not in printed and "from the store" not in printed
    assert not pd.read_parquet(tmp_path / "c.parquet")["from_cache"].any()

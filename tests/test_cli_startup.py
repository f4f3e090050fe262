"""Daily use of the command line: help that cuts nothing at 80 columns, usage and input errors before the heavy
imports, $FAIRVISION_MAX_PIXELS checked at start-up, and progress lines when stderr is not a terminal."""

import inspect
import json
import os
import shutil
import subprocess
import sys

import pytest
import typer

from fairvision.cli import app, main
from fairvision.cli import common
from fairvision.cli.startup import RICH_HELP_COLUMNS, input_paths, wrap_help


def _commands(typer_app=app, prefix=()):
    cmd = typer.main.get_command(typer_app)

    def walk(c, path):
        yield path, c
        for name, sub in getattr(c, "commands", {}).items():
            yield from walk(sub, (*path, name))

    return list(walk(cmd, prefix))


COMMANDS = _commands()


def _flat(text):
    return " ".join(text.split())


@pytest.mark.parametrize("columns", [80, RICH_HELP_COLUMNS])
def test_help_cuts_nothing(columns, monkeypatch, capsys):
    """Every command and group at 80 columns (click's plain layout) and at 100 (rich panels): no '…'; at 80
    every option's help, every shown default and every example line appear whole."""
    monkeypatch.setenv("COLUMNS", str(columns))
    for path, cmd in COMMANDS:
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert "…" not in out, (path, [ln for ln in out.splitlines() if "…" in ln])
        if columns >= RICH_HELP_COLUMNS:
            continue
        flat = _flat(out)
        for p in cmd.params:
            if p.help and not p.hidden:
                assert _flat(p.help) in flat, (path, p.name)
            default = p.default
            if getattr(p, "show_default", True) and isinstance(default, (str, int, float, os.PathLike)) \
                    and not isinstance(default, bool) and p.param_type_name == "option" and str(default):
                assert f"[default: {default}]" in out or f"[default: {default};" in out, (path, p.name, default)
        for line in inspect.cleandoc(cmd.help or "").splitlines():
            if line[:1].isspace():  # an example, kept as written
                assert line.rstrip() in out, (path, line)
        if hasattr(cmd, "commands"):  # a group lists the whole first paragraph of each command's help
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    first = inspect.cleandoc(sub.short_help or sub.help or "").split("\n\n")[0]
                    assert _flat(first) in flat, (path, name)


def test_plain_help_keeps_flags_and_the_store_path_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["audit", "dataset", "--help"]) == 0
    out = capsys.readouterr().out
    assert "~/.cache/fairvision/store" in out and "--measure-skin" in out
    assert not [ln for ln in out.splitlines() if ln.rstrip().endswith("-") and not ln.rstrip().endswith(" -")]
    assert "[default: fairvision-report]" in out


def test_wrap_help_by_hand():
    text = "Use --measure-skin with a-very-long-hyphenated-word here.\n\nExample:\n  fairvision x \\\n      -a b"
    got = wrap_help(text, 24, "  ")
    assert got.splitlines() == [
        "  Use --measure-skin",
        "  with",
        "  a-very-long-hyphenated-word",  # longer than the width: kept whole, not cut
        "  here.",
        "",
        "  Example:",
        "    fairvision x \\",
        "        -a b",
    ]
    assert wrap_help("a [default: some value]", 14) == "a\n[default: some value]"


# ------------------------------------------------------------------ errors before the heavy imports

HEAVY = ("pandas", "numpy", "torch", "mediapipe", "cv2", "scipy")


def _run_main(args, env=None):
    code = ("import json, sys; from fairvision.cli import main; rc = main(sys.argv[1:]); "
            f"print(json.dumps([rc, [m for m in {HEAVY!r} if m in sys.modules]]))")
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    rc, heavy = json.loads(p.stdout.strip().splitlines()[-1])
    return rc, heavy, p.stderr.strip()


@pytest.mark.parametrize("args, message", [
    (["audit", "dataset", "{t}/missing.csv", "-a", "age"], "{t}/missing.csv: no such file or folder"),
    (["audit", "model", "-s", "{t}/s.csv", "--scores", "{t}/c.csv", "-a", "g"], "{t}/s.csv: no such file or folder (--samples)"),
    (["skin", "measure", "{t}/nowhere/"], "{t}/nowhere: no such file or folder"),
    (["skin", "measure", "{t}", "--masks", "{t}/nomasks"], "{t}/nomasks: no such masks folder (--masks)"),
    (["audit", "dataset", "{t}/missing.csv", "-a", "age", "--n-boot", "-1"], "--n-boot must be"),
    (["audit", "dataset", "{t}/missing.csv", "--no-such-option"], "No such option: --no-such-option"),
    (["audit", "dataset", "{t}/missing.csv"], "Missing option '--attr'"),
])
def test_usage_and_input_errors_come_before_heavy_imports(args, message, tmp_path):
    t = str(tmp_path)
    rc, heavy, err = _run_main([a.replace("{t}", t) for a in args])
    assert rc == 2 and heavy == [], (err, heavy)
    assert message.replace("{t}", t) in err and "Traceback" not in err


def test_bad_max_pixels_is_refused_at_start_up(tmp_path):
    env = {"FAIRVISION_MAX_PIXELS": "1.5"}
    rc, heavy, err = _run_main(["skin", "measure", tmp_path, "-o", tmp_path / "s.csv"], env)
    assert rc == 2 and heavy == []
    assert err == "error: FAIRVISION_MAX_PIXELS='1.5': not a positive whole number of pixels (e.g. 400000000)"
    rc, _, err = _run_main(["skin", "measure", "--help"], env)  # help still works
    assert rc == 0


def test_patterns_bundled_names_and_outputs_are_not_checked(tmp_path):
    from fairvision.cli.startup import check_input_paths

    given = {"source": "IMAGES", "output": "--output"}
    for ok in ("portraits", "demo", str(tmp_path / "shard-{0..3}.tar"), str(tmp_path / "*.jpg"), "tar://x.tar#0:1/a"):
        check_input_paths({"source": ok}, given, {})
    from fairvision.cli.skin import measure_cmd

    found = input_paths(measure_cmd)
    assert found["source"] == "IMAGES_OR_FOLDER_OR_TABLE" and found["masks"] == "--masks"
    assert not {"output", "store", "cache", "overlays"} & set(found)


def test_command_runs_with_outputs_that_do_not_exist_yet(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("sample_id,gender\na,F\nb,M\nc,F\nd,M\n")
    out = tmp_path / "new" / "deeper" / "report"
    code = main(["audit", "dataset", str(tmp_path / "t.csv"), "-a", "gender", "--no-check-images", "--n-boot", "0",
                 "-o", str(out), "--store", str(tmp_path / "store")])
    assert code == 0, capsys.readouterr().err
    assert (out / "report.html").is_file()


# ------------------------------------------------------------------ progress on stderr


class _Clock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_stage_lines_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    # run starts at 10.0; stage a finishes at 12.5; stage b starts after a and stops short at 14.0 (the end)
    monkeypatch.setattr(common.time, "perf_counter", _Clock(10.0, 11.0, 12.5, 13.0, 14.0))
    with common.progress_bars() as advance:
        advance("embedding images", 1, 2)
        advance("embedding images", 2, 2)
        advance("scoring", 1, 1_500)
    assert capsys.readouterr().err.splitlines() == ["embedding images: 2 of 2 in 2.5 s", "scoring: 1 of 1,500 in 1.5 s"]


def test_stage_lines_each_once_none_when_off_and_none_for_a_failed_stage(capsys, monkeypatch):
    monkeypatch.setattr(common.time, "perf_counter", _Clock(0.0, 1.0, 2.0, 3.0))
    with common.progress_bar("asking") as advance:
        advance(3, 3)
        advance(3, 3)  # said once
    assert capsys.readouterr().err == "asking: 3 of 3 in 1.0 s\n"
    with common.progress_bar("asking", show=False) as advance:
        advance(3, 3)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(common.time, "perf_counter", _Clock(0.0, 1.0))
    with pytest.raises(RuntimeError):
        with common.progress_bars() as advance:
            advance("generate:a", 1, 4)
            raise RuntimeError("stopped")
    assert capsys.readouterr().err == ""


@pytest.mark.vision
def test_a_real_command_prints_its_stage_line(tmp_path):
    pytest.importorskip("cv2")
    from fairvision.datasets import demo_path

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("001.jpg", "002.jpg", "003.jpg"):
        shutil.copy(demo_path("portraits") / name, folder / name)
    p = subprocess.run([sys.executable, "-m", "fairvision", "curate", "qa", str(folder), "--no-store", "-j", "1",
                        "-o", str(tmp_path / "qa")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("checking images:")]
    assert len(lines) == 1 and lines[0].startswith("checking images: 3 of 3 in ") and lines[0].endswith(" s")


def test_image_table_refuses_a_missing_source_before_importing_pandas(tmp_path):
    code = ("import sys; from fairvision.cli.common import image_table\n"
            "try:\n    image_table(sys.argv[1])\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
            "print('pandas' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == [
        f"FairvisionError {tmp_path / 'nope'}: no such file or folder (or use 'portraits' or 'demo' for the bundled "
        "photos)", "False"]

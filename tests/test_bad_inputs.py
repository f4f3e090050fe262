"""Bad input, command by command: exit 2, one line on stderr naming the file/row/column, no traceback,
nothing half-written and a previous report untouched (README, "Exit status")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import EXIT_INPUT, EXIT_INTERRUPTED, main

PORTRAITS = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data" / "portraits"


def _samples(tmp: Path, n_subj: int = 60, **extra) -> Path:
    rng = np.random.default_rng(0)
    subj = np.repeat(np.arange(n_subj), 2)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(subj))], "subject_id": subj.astype(str),
                       "age": rng.choice(["young", "old"], n_subj)[subj],
                       "gender": rng.choice(["he", "she"], n_subj)[subj],
                       "pose": rng.choice(["standing", "sitting"], len(subj)),
                       "score": rng.normal(0.7, 0.1, len(subj))})
    for k, v in extra.items():
        df[k] = v(df) if callable(v) else v
    path = tmp / "samples.csv"
    df.to_csv(path, index=False)
    return path


def _scores(tmp: Path, samples: Path, edit=None) -> Path:
    ids = pd.read_csv(samples)["sample_id"]
    df = pd.DataFrame({"sample_id": ids, "recall": np.linspace(0.2, 0.9, len(ids))})
    if edit:
        edit(df)
    path = tmp / "scores.csv"
    df.to_csv(path, index=False)
    return path


def model_inf_score(tmp):
    s = _samples(tmp)
    sc = _scores(tmp, s, lambda d: d.__setitem__("recall", d["recall"].where(d.index != 4, np.inf)))
    return ["audit", "model", "-s", s, "--scores", sc, "-a", "age", "--n-boot", "0"], [f"{sc}: row 5", "'recall'", "inf"]


def model_minus_inf_score(tmp):
    s = _samples(tmp)
    sc = _scores(tmp, s, lambda d: d.__setitem__("recall", d["recall"].where(d.index != 0, -np.inf)))
    return ["audit", "model", "-s", s, "--scores", sc, "-a", "gender", "--n-boot", "0"], [f"{sc}: row 1", "-inf"]


def model_text_in_scores(tmp):
    s = _samples(tmp)
    sc = _scores(tmp, s, lambda d: d.__setitem__("recall", d["recall"].astype(object).where(d.index != 3, "high")))
    return ["audit", "model", "-s", s, "--scores", sc, "-a", "age", "-m", "recall", "--n-boot", "0"], [f"{sc}: row 4", "'recall'", "'high'"]


def model_float_attribute(tmp):
    s = _samples(tmp, weight=lambda d: np.linspace(40, 90, len(d)))
    sc = _scores(tmp, s)
    return ["audit", "model", "-s", s, "--scores", sc, "-a", "weight", "--n-boot", "0"], ["'weight'", "distinct numeric values", "bins"]


def model_empty_attribute(tmp):
    s = _samples(tmp, age=lambda d: d["age"].where(d.index != 6, None))
    sc = _scores(tmp, s)
    return ["audit", "model", "-s", s, "--scores", sc, "-a", "age", "--n-boot", "0"], [f"{s}: row 7", "'age'", "--missing"]


def dataset_float_attribute(tmp):
    s = _samples(tmp)
    return ["audit", "dataset", s, "-a", "score", "--n-boot", "0"], [str(s), "'score'", "distinct numeric values"]


def dataset_list_attribute(tmp):
    s = pd.read_csv(_samples(tmp))
    s["tags"] = [["a", "b"]] * len(s)
    path = tmp / "samples.parquet"
    s.to_parquet(path)
    return ["audit", "dataset", path, "-a", "tags", "--n-boot", "0"], [str(path), "row 1", "'tags'", "--multi tags"]


def dataset_unwritable_output(tmp):
    s = _samples(tmp)
    blocker = tmp / "a-file"
    blocker.write_text("x")
    return ["audit", "dataset", s, "-a", "age", "--n-boot", "0", "-o", blocker / "out"], ["a-file", "not a folder"]


def diagnose_constant_score(tmp):
    s = _samples(tmp, score=0.5)
    return ["diagnose", "errors", "-s", s, "-m", "score", "-f", "pose", "-f", "age"], [str(s), "'score'", "constant"]


def diagnose_inf_score(tmp):
    s = _samples(tmp, score=lambda d: d["score"].where(d.index != 2, np.inf))
    return ["diagnose", "errors", "-s", s, "-m", "score", "-f", "pose"], [f"{s}: row 3", "'score'", "inf"]


def diagnose_inf_in_scores_file(tmp):
    s = _samples(tmp)
    sc = _scores(tmp, s, lambda d: d.__setitem__("recall", d["recall"].where(d.index != 9, -np.inf)))
    return ["diagnose", "errors", "-s", s, "--scores", sc, "-m", "recall", "-f", "pose"], [f"{sc}: row 10", "'recall'"]


def diagnose_empty_feature(tmp):
    s = _samples(tmp, pose=lambda d: d["pose"].where(d.index != 3, None))
    return ["diagnose", "errors", "-s", s, "-m", "score", "-f", "pose"], ["row 4", "'pose'", "--missing"]


def _retrieval_files(tmp, *, depth=6, empty_row=None):
    n = 40
    items = pd.DataFrame({"item_id": [f"i{i}" for i in range(n)], "tone": np.where(np.arange(n) % 2, "dark", "light")})
    if empty_row is not None:
        items.loc[empty_row, "tone"] = None
    items.to_csv(tmp / "items.csv", index=False)
    rows = [(f"i{q}", r + 1, f"i{(q + r + 1) % n}") for q in range(n) for r in range(depth)]
    pd.DataFrame(rows, columns=["query_id", "rank", "item_id"]).to_csv(tmp / "run.csv", index=False)
    return tmp / "run.csv", tmp / "items.csv"


def retrieval_k_deeper_than_runs(tmp):
    run, items = _retrieval_files(tmp)
    return ["audit", "retrieval", "-r", run, "-i", items, "-a", "tone", "-k", "50", "--power-trials", "0"], [str(run), "-k 50", "6 results"]


def retrieval_empty_attribute(tmp):
    run, items = _retrieval_files(tmp, empty_row=7)
    return ["audit", "retrieval", "-r", run, "-i", items, "-a", "tone", "--power-trials", "0"], [f"{items}: row 8", "'tone'", "--missing"]


def skin_unreadable_image(tmp):
    bad = tmp / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    return ["skin", "measure", bad, "--workers", "1", "--no-progress"], ["broken.jpg", "no image could be measured"]


def skin_missing_image(tmp):
    return ["skin", "measure", tmp / "nope.jpg", "--no-progress"], ["nope.jpg", "no such"]


def skin_empty_folder(tmp):
    (tmp / "empty").mkdir()
    return ["skin", "measure", tmp / "empty", "--no-progress"], ["empty", "no images"]


def skin_same_stem_twice(tmp):
    d = tmp / "imgs"
    d.mkdir()
    (d / "a.jpg").write_bytes(b"x")
    (d / "a.png").write_bytes(b"x")
    return ["skin", "measure", d, "--no-progress"], ["a.jpg", "a.png", "'a'"]


CASES = [model_inf_score, model_minus_inf_score, model_text_in_scores, model_float_attribute, model_empty_attribute, dataset_float_attribute,
         dataset_list_attribute, dataset_unwritable_output, diagnose_constant_score, diagnose_inf_score,
         diagnose_inf_in_scores_file, diagnose_empty_feature, retrieval_k_deeper_than_runs, retrieval_empty_attribute,
         skin_unreadable_image, skin_missing_image, skin_empty_folder, skin_same_stem_twice]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_bad_input_exits_2_with_one_line_and_leaves_outputs_alone(tmp_path, capsys, case):
    args, expected = case(tmp_path)
    args = [str(a) for a in args]
    file_output = args[:2] == ["skin", "measure"]
    out = tmp_path / ("skin.parquet" if file_output else "out")
    if "-o" not in args:
        args += ["-o", str(out)]
    previous = b"previous report"
    if file_output:
        out.write_bytes(previous)
    else:
        out.mkdir()
        (out / "report.html").write_bytes(previous)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(args)
    cap = capsys.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert rc == EXIT_INPUT, cap.err
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in cap.err + cap.out
    for piece in expected:
        assert piece in lines[0], (piece, lines[0])
    assert (out.read_bytes() if file_output else (out / "report.html").read_bytes()) == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no staging folder or temporary file left


def test_outputs_get_the_users_umask(tmp_path):
    s = _samples(tmp_path)
    old = os.umask(0o022)
    try:
        existing = tmp_path / "kept.csv"
        existing.write_text("x")
        existing.chmod(0o640)
        from fairvision.io.tables import write_table

        write_table(pd.read_csv(s), tmp_path / "new.csv")
        write_table(pd.read_csv(s), existing)
        assert (tmp_path / "new.csv").stat().st_mode & 0o777 == 0o644
        assert existing.stat().st_mode & 0o777 == 0o640  # replacing a file keeps its mode
        assert main(["audit", "dataset", str(s), "-a", "age", "--n-boot", "0", "-o", str(tmp_path / "rep")]) == 0
        assert (tmp_path / "rep").stat().st_mode & 0o777 == 0o755
        assert (tmp_path / "rep" / "report.html").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_usage_errors_exit_2(capsys):
    assert main(["audit", "dataset"]) == EXIT_INPUT
    assert main(["audit", "model", "--no-such-option"]) == EXIT_INPUT


def test_gate_exit_1_is_distinct_from_bad_input(tmp_path):
    s = _samples(tmp_path)
    assert main(["audit", "dataset", str(s), "-a", "age", "--n-boot", "0", "--fail-if", "nsd>=0",
                 "-o", str(tmp_path / "o")]) == 1


def test_interrupt_exits_130_with_one_line(tmp_path, capsys):
    s = _samples(tmp_path)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    big = pd.read_csv(s)
    big = pd.concat([big] * 300, ignore_index=True)
    big["sample_id"] = [f"s{i}" for i in range(len(big))]
    big.to_csv(s, index=False)
    timer.start()
    try:
        rc = main(["audit", "dataset", str(s), "-a", "age", "-a", "gender", "-a", "pose", "--max-k", "3",
                   "--n-boot", "100000", "-o", str(tmp_path / "o")])
    finally:
        timer.cancel()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == EXIT_INTERRUPTED
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), lines
    assert not (tmp_path / "o").exists()


@pytest.mark.vision
def test_interrupt_of_a_real_process(tmp_path):
    """Ctrl-C of the installed command while its workers measure: status 130 and exactly one line
    (no blank line, no traceback), no output table, and the finished images kept in the results store."""
    pytest.importorskip("mediapipe")
    import time

    fairface = PORTRAITS.parent / "fairface"
    out, store = tmp_path / "skin.parquet", tmp_path / "store"
    p = subprocess.Popen([sys.executable, "-m", "fairvision", "skin", "measure", str(fairface), "--workers", "2",
                          "--store", str(store), "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(store.glob("skin/part-*.parquet")):
            time.sleep(0.05)  # interrupt once the first images are finished
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.splitlines() == [err.strip()] and err.startswith("error: interrupted"), repr(err)
    assert not out.exists()
    assert any(store.glob("skin/part-*.parquet"))


def test_json_report_of_a_previous_run_survives_a_failed_rerun(tmp_path):
    s = _samples(tmp_path)
    out = tmp_path / "rep"
    assert main(["audit", "dataset", str(s), "-a", "age", "--n-boot", "0", "-o", str(out)]) == 0
    before = (out / "report.json").read_bytes()
    assert main(["audit", "dataset", str(s), "-a", "score", "--n-boot", "0", "-o", str(out)]) == EXIT_INPUT
    assert (out / "report.json").read_bytes() == before
    assert json.loads(before)["title"]


def _leaf_commands(typer_app, prefix=()):
    for cmd in typer_app.registered_commands:
        yield (*prefix, cmd.name or cmd.callback.__name__)
    for group in typer_app.registered_groups:
        yield from _leaf_commands(group.typer_instance, (*prefix, group.name))


def _all_commands():
    from fairvision.cli import app

    return list(_leaf_commands(app))


@pytest.mark.parametrize("command", _all_commands(), ids=" ".join)
def test_every_command_follows_the_exit_convention(command, capsys, tmp_path):
    """--help exits 0 and its options show plain metavars (TEXT, PATH, none for a flag), not typer's type
    names; an unknown option is a usage error, 2."""
    assert main([*command, "--help"]) == 0
    help_text = capsys.readouterr().out
    option_rows = [ln for ln in help_text.splitlines() if " --" in ln and "--help" not in ln]
    assert not [ln for ln in option_rows if "<list[" in ln or "<str>" in ln or "<bool>" in ln], help_text
    assert main([*command, "--no-such-option"]) == EXIT_INPUT
    capsys.readouterr()
    assert EXIT_INTERRUPTED == 130


@pytest.mark.vision
def test_native_model_logs_do_not_reach_the_terminal(tmp_path):
    """A real process measuring one image in-process: stderr holds the error line and nothing from
    mediapipe's native logging (set FAIRVISION_NATIVE_LOGS=1 to see it)."""
    pytest.importorskip("mediapipe")
    from PIL import Image

    noise = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (256, 256, 3), dtype=np.uint8)).save(noise)
    env = {k: v for k, v in os.environ.items() if k not in ("GLOG_minloglevel", "TF_CPP_MIN_LOG_LEVEL")}
    p = subprocess.run([sys.executable, "-m", "fairvision", "skin", "measure", str(noise), "--no-store",
                        "-o", str(tmp_path / "s.parquet")], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == EXIT_INPUT
    # our own lines only: the stage line of the finished measurement, then the one error line
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and "no face found" in lines[-1], p.stderr
    assert all(line.startswith("measuring skin colour: ") for line in lines[:-1]), p.stderr

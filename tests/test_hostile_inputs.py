"""Hostile inputs as real runs: HTTP replies of any size and replies without an answer (a real HTTP server on
127.0.0.1), an infinite confounder value and a damaged .npz (real CLI runs: exit 2, one line naming the file)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.vqa import audit_vqa
from fairvision.audits.vlm.vqa_parsing import load_questions
from fairvision.cli import main
from fairvision.datasets.demo import load_demo
from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.embeddings import read_embeddings
from fairvision.io.store import ResultsStore
from fairvision.report.sections.vlm_vqa import vlm_vqa_section
from fairvision.vision.vqa import MAX_REPLY_BYTES, READ_CHUNK, FailedReply, OpenAIChatVQA

QS = load_questions()
BIG = 5 * 1000 * 1000  # a 5 MB reply


def _reply(content) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]}).encode()


class _Handler(BaseHTTPRequestHandler):
    """Replies by the question's wording: ``srv.rule(question) -> (mode, body)`` with mode ``json`` (a normal
    reply with Content-Length), ``big-length`` (5 MB with Content-Length), ``big-stream`` (5 MB, no length,
    the connection closed at its end) or ``big-500`` (a 5 MB error body)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"][0]["text"]
        mode, payload = self.server.rule(question)
        with self.server.lock:
            self.server.asked.append(question)
        try:
            if mode == "json":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_response(500 if mode == "big-500" else 200)
            self.send_header("Content-Type", "application/json")
            if mode == "big-stream":
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Content-Length", str(BIG))
            self.end_headers()
            block = b'{"choices": [{"message": {"content": "' + b"x" * (64 * 1024)
            sent = 0
            while sent < BIG:
                self.wfile.write(block[: BIG - sent])
                sent += len(block)
                with self.server.lock:
                    self.server.sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading: what we want


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.lock, srv.asked, srv.sent = threading.Lock(), [], 0
    srv.rule = lambda q: ("json", _reply(f"a teacher, {q}"))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(5)


@pytest.fixture(scope="module")
def faces():
    df = load_demo().iloc[:24].reset_index(drop=True)
    df["group"] = np.where(np.arange(len(df)) % 2 == 0, "A", "B")
    return df


def _url(srv) -> str:
    return f"http://127.0.0.1:{srv.server_port}"


@pytest.mark.parametrize("mode", ["big-length", "big-stream"])
def test_a_5mb_reply_is_a_failed_reply_read_no_further_than_the_cap(server, faces, mode):
    server.rule = lambda q: (mode, b"")
    vqa = OpenAIChatVQA(_url(server), "m", backoff=0.001, timeout=20)
    t0 = time.monotonic()
    with pytest.raises(FailedReply) as err:
        vqa.answer(faces["image_path"].iloc[0], "Why?")
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert err.value.reason == "reply over the byte cap" and "\n" not in msg and str(MAX_REPLY_BYTES) in msg
    assert len(server.asked) == 1  # not tried again
    if mode == "big-length":
        assert "(Content-Length) is larger than the cap" in msg and "not read" in msg
    else:
        read = int(msg.split("stopped reading after ")[1].split(" bytes")[0])
        assert MAX_REPLY_BYTES < read <= MAX_REPLY_BYTES + READ_CHUNK


def test_the_cap_is_a_parameter_and_a_big_error_body_is_not_read_whole(server, faces):
    path = faces["image_path"].iloc[0]
    small = _reply("a nurse " * 100)
    server.rule = lambda q: ("json", small)
    with pytest.raises(FailedReply, match=f"of {len(small)} bytes .* cap of 200 bytes"):
        OpenAIChatVQA(_url(server), "m", max_reply_bytes=200).answer(path, "Why?")
    assert OpenAIChatVQA(_url(server), "m", max_reply_bytes=len(small)).answer(path, "Why?").startswith("a nurse")
    for bad in (0, -5, 1.5, "1MB", True):
        with pytest.raises(FairvisionError, match="^max_reply_bytes must be a positive whole number"):
            OpenAIChatVQA(_url(server), "m", max_reply_bytes=bad)
    server.rule = lambda q: ("big-500", b"")
    with pytest.raises(FairvisionError, match=r"HTTP 500: \{\"choices.*\(after 1 tries\)") as err:
        OpenAIChatVQA(_url(server), "m", retries=0).answer(path, "Why?")
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_content_null_is_a_failed_reply_not_silence(server, faces):
    path = faces["image_path"].iloc[0]
    vqa = OpenAIChatVQA(_url(server), "m", backoff=0.001)
    server.rule = lambda q: ("json", _reply(None))
    with pytest.raises(FailedReply, match="message content is null .*finish_reason 'stop'") as err:
        vqa.answer(path, "Why?")
    assert err.value.reason == "content null" and len(server.asked) == 1
    server.rule = lambda q: ("json", _reply(""))  # an empty answer is a model that stays silent
    assert vqa.answer(path, "Why?") == ""
    refusal = json.dumps({"choices": [{"message": {"content": None, "refusal": "I can't help with that."}}]})
    server.rule = lambda q: ("json", refusal.encode())
    assert vqa.answer(path, "Why?") == "I can't help with that."


def _mixed_rule(q: str):
    if "crime" in q:
        return "json", _reply(None)
    if "occupation" in q:
        return "big-stream", b""
    return "json", _reply(f"she is a teacher ({q})")


def test_audit_counts_failed_replies_leaves_them_out_and_asks_them_again(server, faces, tmp_path):
    server.rule = _mixed_rule
    data = faces.iloc[:8]
    qs = QS.questions
    n_null = int(qs["question"].str.contains("crime").sum()) * len(data)
    n_big = int((qs["question"].str.contains("occupation") & ~qs["question"].str.contains("crime")).sum()) * len(data)
    assert n_null and n_big
    store = ResultsStore(tmp_path / "store")
    vqa = OpenAIChatVQA(_url(server), "m", backoff=0.001, timeout=20)
    res = audit_vqa(data, vqa, QS, ["group"], store=store, settings=AuditSettings(n_boot=20, workers=3))
    m = res.meta
    assert m["n_failed"] == n_null + n_big and m["failures"] == {"content null": n_null, "reply over the byte cap": n_big}
    assert m["n_answers"] == len(data) * len(qs) - m["n_failed"] == len(res.answers)
    assert "failure" not in res.answers.columns and not res.answers["question"].str.contains("crime").any()
    # a null content is not counted as a silent model: every answer kept responded
    assert res.answers["responded"].all() and (res.overall.query("quantity == 'response'")["estimate"] == 1).all()
    assert res.quantities()["n_failed"] == m["n_failed"]
    sec = vlm_vqa_section(res)
    assert any("failed" in f.sentence and f.quantity == "n_failed" for f in sec.findings)
    notes = [b["text"] for b in sec.blocks if b["type"] == "note"]
    assert any("left out of every rate" in t and "content null" in t for t in notes)
    # failed replies are not kept: the next run asks exactly them, now answered
    server.asked.clear()
    server.rule = lambda q: ("json", _reply(f"he is a cook ({q})"))
    again = audit_vqa(data, vqa, QS, ["group"], store=store, settings=AuditSettings(n_boot=20))
    assert again.meta["n_called"] == m["n_failed"] == len(server.asked) and again.meta["n_failed"] == 0
    assert again.meta["n_answers"] == len(data) * len(qs)


def test_cli_notes_failed_replies_and_every_reply_failing_is_exit_2(server, faces, tmp_path, capsys):
    faces.iloc[:6].to_csv(tmp_path / "s.csv", index=False)
    base = ["audit", "vlm", "vqa", "--samples", str(tmp_path / "s.csv"), "-a", "group", "--backend", "http",
            "--url", _url(server), "--model", "m", "--no-store", "--n-boot", "20", "--timeout", "20"]
    server.rule = _mixed_rule
    assert main(base + ["-o", str(tmp_path / "out"), "--fail-if", "n_failed>100"]) == 0
    out = capsys.readouterr().out
    assert "failed replies left out of every rate (content null:" in out
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "reply over the byte cap" in json.dumps(doc)
    assert not pd.read_parquet(tmp_path / "out" / "answers.parquet")["answer"].isna().any()
    server.rule = lambda q: ("json", _reply(None))
    assert main(base + ["-o", str(tmp_path / "out2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # progress lines of finished stages may come first; the error is one line, the last
    assert err[-1].startswith("error: every reply failed") and "content null" in err[-1]
    assert not any(line.startswith("error:") for line in err[:-1])
    assert not (tmp_path / "out2" / "report.html").exists()


# --------------------------------------------------------------------------- remaining tracebacks


def _confounder_table(tmp_path: Path, value: float) -> Path:
    rng = np.random.default_rng(0)
    n = 80
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "subject_id": [str(i) for i in range(n)],
                       "skin": rng.choice(["light", "dark"], n), "keypoints": rng.normal(10, 3, n),
                       "recall": rng.uniform(0, 1, n)})
    df.loc[6, "keypoints"] = value
    path = tmp_path / "samples.csv"
    df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("value,extra", [(np.inf, []), (-np.inf, []), (np.inf, ["--edge", "10"])])
def test_infinite_confounder_is_one_line_naming_file_row_and_column(tmp_path, capsys, value, extra):
    path = _confounder_table(tmp_path, value)
    rc = main(["diagnose", "confounders", "-s", str(path), "-m", "recall", "-a", "skin", "--strata", "keypoints",
               "-o", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith(f"error: {path}: row 7: confounder column 'keypoints' is {value:g}")
    assert not (tmp_path / "out").exists()


def test_finite_confounder_still_runs(tmp_path, capsys):
    path = _confounder_table(tmp_path, 12.0)
    assert main(["diagnose", "confounders", "-s", str(path), "-m", "recall", "-a", "skin", "--strata", "keypoints",
                 "-o", str(tmp_path / "out")]) == 0


def _zero_shot_inputs(tmp_path: Path) -> tuple[list[str], Path]:
    rng = np.random.default_rng(0)
    n, d = 40, 8
    ids = [f"s{i}" for i in range(n)]
    pd.DataFrame({"sample_id": ids, "group": np.where(np.arange(n) % 2, "A", "B")}).to_csv(tmp_path / "s.csv", index=False)
    x = rng.normal(size=(n, d))
    np.savez(tmp_path / "img.npz", embeddings=x, ids=np.array(ids))
    np.savez_compressed(tmp_path / "imgz.npz", embeddings=x, ids=np.array(ids))
    t = rng.normal(size=(2, d))
    pd.DataFrame({"label": ["cat", "dog"], "prompt": ["a cat", "a dog"], "embedding": list(t)}).to_parquet(
        tmp_path / "text.parquet")
    args = ["audit", "vlm", "zero-shot", "--samples", str(tmp_path / "s.csv"), "--text-embeddings",
            str(tmp_path / "text.parquet"), "-a", "group", "--n-boot", "20", "-o", str(tmp_path / "out"),
            "--image-embeddings"]
    return args, tmp_path / "img.npz"


def _damaged(kind: str, good: bytes, compressed: bytes) -> bytes:
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "not-a-zip":
        return b"PK\x03\x04" + bytes(200)
    if kind == "empty":
        return b""
    if kind == "bad-crc":
        return good[:200] + bytes(b ^ 0xFF for b in good[200:400]) + good[400:]
    return compressed[:100] + bytes(b ^ 0x55 for b in compressed[100:300]) + compressed[300:]  # bad deflate data


@pytest.mark.parametrize("kind", ["truncated", "not-a-zip", "empty", "bad-crc", "bad-deflate"])
def test_damaged_npz_is_an_input_file_error_naming_the_file(tmp_path, capsys, kind):
    args, npz = _zero_shot_inputs(tmp_path)
    if kind == "truncated":  # the intact file runs
        assert main(args + [str(npz)]) == 0
        capsys.readouterr()
    bad = tmp_path / f"{kind}.npz"
    bad.write_bytes(_damaged(kind, npz.read_bytes(), (tmp_path / "imgz.npz").read_bytes()))
    rc = main(args + [str(bad)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err and err.startswith(f"error: {bad}: ")
    with pytest.raises(InputFileError, match=f"^{bad}: "):
        read_embeddings(bad)


def test_damaged_npy_and_a_zip_named_npy(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "e.npy", x)
    raw = (tmp_path / "e.npy").read_bytes()
    for name, data, match in [("short.npy", raw[:30], "cannot read as .npy"),
                              ("half.npy", raw[: len(raw) - 8], "cannot read as .npy")]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputFileError, match=f"^{tmp_path / name}: {match}"):
            read_embeddings(tmp_path / name)
    np.savez(tmp_path / "z.npz", embeddings=x)
    (tmp_path / "zip.npy").write_bytes((tmp_path / "z.npz").read_bytes())
    with pytest.raises(InputFileError, match="it is an .npz archive"):
        read_embeddings(tmp_path / "zip.npy")


def test_damaged_text_embeddings_npz_is_one_line_error(tmp_path):
    """The prompt embeddings of a zero-shot probe go through the same .npz reader as the image embeddings."""
    from fairvision.audits.vlm.prompts import read_text_embeddings
    from fairvision.errors import InputFileError

    good = tmp_path / "text.npz"
    np.savez(good, labels=np.array(["a", "b"]), embeddings=np.ones((2, 3)))
    bad = tmp_path / "cut.npz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputFileError, match=r"cut\.npz: cannot read as \.npz"):
        read_text_embeddings(bad)

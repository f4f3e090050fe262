"""Open the newer reports (VLM zero-shot with intersections, VLM compare, VQA, generative compare and the curation
reports) in a real headless Chromium at 1400 px: no console errors, nothing loaded from the network, the findings
summary first, every figure drawn with a size, nothing wider than the page, and no raw Python values (nan, None,
<NA>, ...) where a reader sees them. Each report is built once from tiny inputs; one browser serves all of them.
Full-page screenshots go to $FAIRVISION_SHOTS (default: the test's temporary folder) for a person to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.cli import main
from fairvision.datasets import load_demo, load_portraits

# the synthetic inputs of the feature tests (tests/ is on sys.path: pytest's default "prepend" import mode)
from test_curation_agreement import _coco as agreement_coco  # noqa: E402
from test_curation_visual import _planted as visual_coco  # noqa: E402
from test_generative_compare import _run as generative_run, _write_run  # noqa: E402
from test_vlm import stub_model  # noqa: E402
from test_vlm_variants import paired_predictions  # noqa: E402
from test_vlm_vqa import stub_answers  # noqa: E402
from test_report_browser import _browser  # noqa: E402

pytestmark = pytest.mark.browser

WIDTH = 1400
RAW = re.compile(r"(?<![\w.-])(nan|NaN|None|<NA>|NaT|inf)(?![\w.-])|Timestamp\(|\[array\(|array\(\[|dtype[=:]")


def _vlm_zero_shot(d: Path) -> list[str]:
    data, _, tdf, sim = stub_model(n_subjects=80, seed=5, effect=1.0)
    data.to_csv(d / "samples.csv", index=False)
    np.savez(d / "images.npz", embeddings=sim, ids=np.array(data["sample_id"].tolist()))
    tdf.to_csv(d / "text.csv", index=False)
    return ["audit", "vlm", "zero-shot", "--samples", str(d / "samples.csv"), "--image-embeddings",
            str(d / "images.npz"), "--text-embeddings", str(d / "text.csv"), "-a", "g1", "-a", "g2", "--max-k", "2",
            "--min-subjects", "25", "--n-boot", "50"]


def _vlm_compare(d: Path) -> list[str]:
    data, first, second = paired_predictions(seed=4)
    data.to_csv(d / "s.csv", index=False)
    first.to_parquet(d / "p1.parquet")
    second.to_parquet(d / "p2.parquet")
    return ["audit", "vlm", "compare", "--samples", str(d / "s.csv"), "--first", str(d / "p1.parquet"),
            "--second", str(d / "p2.parquet"), "-a", "g1", "-a", "g2", "--max-k", "2", "--n-boot", "50"]


def _vlm_vqa(d: Path) -> list[str]:
    data, ans = stub_answers(n_subjects=80, per_subject=1, seed=5, effect=1.5)
    data.to_csv(d / "s.csv", index=False)
    ans.to_parquet(d / "a.parquet")
    return ["audit", "vlm", "vqa", "--samples", str(d / "s.csv"), "-a", "g1", "-a", "g2", "--answers",
            str(d / "a.parquet"), "--max-k", "2", "--min-subjects", "25", "--n-boot", "50"]


def _generative_compare(d: Path) -> list[str]:
    a = _write_run(d / "a", generative_run("sd", {"doctor": -12.0, "nurse": -10.0}, 1, gender=True))
    b = _write_run(d / "b", generative_run("flux", {"doctor": -3.0}, 2, gender=True))
    return ["audit", "generative", "compare", str(a), str(b), "--n-boot", "50"]


def _curate_visual(d: Path) -> list[str]:
    ann, samples, _ = visual_coco(d)
    return ["curate", "visual", "--coco", str(ann), "--samples", str(samples), "-a", "distance",
            "--min-subjects", "5", "--n-boot", "50"]


def _curate_agreement(d: Path) -> list[str]:
    p, s = agreement_coco(d)
    return ["curate", "agreement", "--coco", str(p), "--vendor-key", "vendor", "--samples", str(s), "-a", "grp",
            "--min-subjects", "5", "--n-boot", "50"]


def _curate_withdraw(d: Path) -> list[str]:
    """60 FairFace images, a subject with three of them withdrawn (dry run) with replacements from a pool of 30."""
    df = load_demo().iloc[:90].reset_index(drop=True)
    (d / "imgs").mkdir()
    for p in df["image_path"]:
        shutil.copy(p, d / "imgs" / Path(p).name)
    df["image_path"] = ["imgs/" + Path(p).name for p in df["image_path"]]
    df["age"], df["gender"] = df["age"].astype(str), df["gender"].astype(str)
    df["subject_id"] = ["s" + s[-4:] for s in df["sample_id"]]
    df = df[["sample_id", "subject_id", "image_path", "age", "gender"]]
    data, pool = df.iloc[:60].reset_index(drop=True), df.iloc[60:].reset_index(drop=True)
    data.loc[[0, 10, 20], "subject_id"] = "multi"
    data.to_csv(d / "samples.csv", index=False)
    pool.to_csv(d / "pool.csv", index=False)
    return ["curate", "withdraw", str(d / "samples.csv"), "--subject", "multi", "--pool", str(d / "pool.csv"),
            "--replace", "--no-store"]


def _curate_qa(d: Path) -> list[str]:
    df = load_portraits().head(12).assign(split="train")
    Image.open(df["image_path"][3]).convert("RGB").resize((460, 460), Image.BILINEAR).save(d / "dup.jpg", quality=70)
    raw = Path(df["image_path"][5]).read_bytes()
    (d / "truncated.jpg").write_bytes(raw[: len(raw) // 2])
    Image.open(df["image_path"][6]).resize((100, 120)).save(d / "small.png")
    extra = pd.DataFrame({"sample_id": ["dup", "truncated", "small"],
                          "image_path": [str(d / f) for f in ("dup.jpg", "truncated.jpg", "small.png")],
                          "split": ["test", "test", "train"]})
    pd.concat([df, extra], ignore_index=True).to_csv(d / "samples.csv", index=False)
    return ["curate", "qa", str(d / "samples.csv"), "--split-col", "split", "--no-store"]


def _curate_diversity(d: Path) -> list[str]:
    rng = np.random.default_rng(0)
    n = 120
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "g": np.repeat(["x", "y", "z"], 40)})
    q, _ = np.linalg.qr(rng.normal(size=(64, 64)))
    x = q[rng.integers(0, 64, n)] + 0.05 * rng.normal(size=(n, 64))
    x[80:] = q[rng.integers(0, 3, 40)] + 0.05 * rng.normal(size=(40, 64))  # group z: three looks only
    data.to_csv(d / "samples.csv", index=False)
    np.savez(d / "emb.npz", embeddings=x, ids=np.array(data["sample_id"].tolist()))
    return ["curate", "diversity", str(d / "samples.csv"), "-a", "g", "--embeddings", str(d / "emb.npz"),
            "--n-boot", "50", "--n-draws", "10", "--no-store"]


BUILDERS = {
    "vlm-zero-shot": _vlm_zero_shot,
    "vlm-compare": _vlm_compare,
    "vlm-vqa": _vlm_vqa,
    "generative-compare": _generative_compare,
    "curate-visual": _curate_visual,
    "curate-agreement": _curate_agreement,
    "curate-withdraw": _curate_withdraw,
    "curate-qa": _curate_qa,
    "curate-diversity": _curate_diversity,
}


def build_reports(builders: dict, tmp_path_factory, codes=(0, 1)) -> dict[str, Path]:
    """Run every builder's command once into a temporary folder (it must exit with one of ``codes``): the
    report.html of each, by name."""
    built = {}
    for name, build in builders.items():
        d = tmp_path_factory.mktemp(name)
        out = d / "report"
        rc = main([*build(d), "-o", str(out)])
        assert rc in codes, f"{name}: exit {rc}"
        assert (out / "report.html").is_file(), name
        built[name] = out / "report.html"
    return built


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    return build_reports(BUILDERS, tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    with _browser() as b:  # the same launch (flags, skip or fail) as tests/test_report_browser.py
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path_factory.mktemp("shots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


# every figure's size, the widest element, and the visible text of the page
_INSPECT = """() => {
  const figs = [...document.querySelectorAll('img, svg')]
      .filter(el => !(el.parentElement && el.parentElement.closest('svg'))).map(el => {
    const r = el.getBoundingClientRect();
    return {tag: el.tagName, w: r.width, h: r.height,
            where: (el.closest('[id]') || document.body).id || el.tagName};
  });
  return {figs, scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
          first: (document.querySelector('main > section') || {}).id || null,
          nFindings: document.querySelectorAll('#findings li').length};
}"""


def check_in_browser(browser, html: Path, shot: Path, *, before_shot=None) -> tuple[dict, dict, str]:
    """Open ``html`` in ``browser`` at :data:`WIDTH` px, save a full-page screenshot to ``shot`` and assert what
    every report must pass; returns ``(report.json, page info, visible text)`` for checks of its own.
    ``before_shot(page)`` runs on the loaded page first (e.g. a click that must not raise)."""
    doc = json.loads(html.with_name("report.json").read_text())
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors, requests, failed = [], [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: failed.append(r.url))
    try:
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        info = page.evaluate(_INSPECT)
        text = page.inner_text("body")
        if before_shot is not None:
            before_shot(page)
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    assert errors == [], errors
    assert failed == [], failed
    # self-contained: nothing but the file itself and inline data is loaded
    assert all(u.startswith(("file://", "data:", "about:")) for u in requests), requests
    # the findings summary comes first whenever the report has findings
    if doc.get("findings"):
        assert info["first"] == "findings" and info["nFindings"] >= 1, info["first"]
    # every figure is drawn with a size (an empty svg/img means a plot that failed)
    empty = [f for f in info["figs"] if f["w"] <= 0 or f["h"] <= 0]
    assert not empty, empty
    # nothing (a wide table, a long label) pushes the page wider than the window
    assert info["scroll"] <= info["inner"] + 2, (info["scroll"], info["inner"])
    # no raw Python values where a reader sees them
    raw = sorted({m.group(0) for m in RAW.finditer(text)})
    assert not raw, (raw, [line for line in text.splitlines() if RAW.search(line)][:10])
    return doc, info, text


@pytest.mark.parametrize("name", list(BUILDERS))
def test_new_report_in_the_browser(name, reports, browser, shots):
    check_in_browser(browser, reports[name], shots / f"{name}.png")

"""Open the reports with exposure and skew (the retrieval audit's ranking section, docs/METHODS.md §8.5, and the
text-to-image retrieval probe, §12.5) in a real headless Chromium at 1400 px, with the checks of the other report
browser tests: no console errors, nothing from the network, the findings summary first, every figure drawn with a
size, nothing wider than the page, and no raw Python values where a reader sees them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fairvision.cli import main

# tests/ is on sys.path (pytest's default "prepend" import mode)
from test_ranking_retrieval import _run  # noqa: E402
from test_report_browser import _browser  # noqa: E402
from test_report_browser_new import _INSPECT, RAW, WIDTH  # noqa: E402
from test_vlm_text_retrieval import _planted  # noqa: E402

pytestmark = pytest.mark.browser


def _retrieval(d: Path) -> list[str]:
    _, _, ip, rp = _run(d, planted=True)
    return ["audit", "retrieval", "-r", str(rp), "-i", str(ip), "-a", "tone", "--power-trials", "0", "--n-boot",
            "100", "--no-progress"]


def _vlm_retrieval(d: Path) -> list[str]:
    data, x, text = _planted()
    data.loc[5, "h"] = None
    data.to_csv(d / "s.csv", index=False)
    np.savez(d / "img.npz", embeddings=x, ids=np.array(data["sample_id"].tolist()))
    text.to_parquet(d / "q.parquet")
    return ["audit", "vlm", "retrieval", "--samples", str(d / "s.csv"), "--image-embeddings", str(d / "img.npz"),
            "--text-embeddings", str(d / "q.parquet"), "-a", "g", "-a", "h", "-k", "10", "--missing", "drop",
            "--n-boot", "100"]


BUILDERS = {"retrieval-ranking": _retrieval, "vlm-retrieval": _vlm_retrieval}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    built = {}
    for name, build in BUILDERS.items():
        d = tmp_path_factory.mktemp(name)
        out = d / "report"
        assert main([*build(d), "-o", str(out)]) == 0, name
        built[name] = out / "report.html"
    return built


@pytest.fixture(scope="module")
def browser():
    with _browser() as b:
        yield b


@pytest.mark.parametrize("name", list(BUILDERS))
def test_ranking_report_in_the_browser(name, reports, browser, tmp_path):
    html = reports[name]
    doc = json.loads(html.with_name("report.json").read_text())
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        info = page.evaluate(_INSPECT)
        text = page.inner_text("body")
        shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    finally:
        page.close()
    assert errors == [], errors
    assert all(u.startswith(("file://", "data:", "about:")) for u in requests), requests
    assert doc["findings"] and info["first"] == "findings" and info["nFindings"] >= 1
    assert not [f for f in info["figs"] if f["w"] <= 0 or f["h"] <= 0]
    assert info["scroll"] <= info["inner"] + 2, (info["scroll"], info["inner"])
    raw = sorted({m.group(0) for m in RAW.finditer(text)})
    assert not raw, (raw, [line for line in text.splitlines() if RAW.search(line)][:10])
    # the ranking measures are on the page for a reader
    assert "NDKL" in text and "MaxSkew@" in text and "Skew@" in text
    skew_figs = [f for f in info["figs"] if "ranking" in f["where"] or "retrieval" in f["where"]]
    assert skew_figs

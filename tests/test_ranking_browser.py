"""Open the reports with exposure and skew (the retrieval audit's ranking section, docs/METHODS.md §8.5, and the
text-to-image retrieval probe, §12.5) in a real headless Chromium at 1400 px, with the checks of the other report
browser tests: no console errors, nothing from the network, the findings summary first, every figure drawn with a
size, nothing wider than the page, and no raw Python values where a reader sees them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fairvision.cli import main

# tests/ is on sys.path (pytest's default "prepend" import mode)
from test_ranking_retrieval import _run  # noqa: E402
# one browser per module: test_report_browser_new's fixture
from test_report_browser_new import browser, build_reports, check_in_browser  # noqa: E402, F401
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
    return build_reports(BUILDERS, tmp_path_factory, codes=(0,))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_ranking_report_in_the_browser(name, reports, browser, tmp_path):
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    doc, info, text = check_in_browser(browser, reports[name], shots / f"{name}.png")
    assert doc["findings"]
    # the ranking measures are on the page for a reader
    assert "NDKL" in text and "MaxSkew@" in text and "Skew@" in text
    skew_figs = [f for f in info["figs"] if "ranking" in f["where"] or "retrieval" in f["where"]]
    assert skew_figs

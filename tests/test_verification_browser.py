"""The verification report built from a sample table opens in a real headless Chromium at 1400 px: no console
errors, the findings summary first with the planted gap, the forest plot drawn, and no raw Python values."""

from __future__ import annotations

import numpy as np
import pytest

from fairvision.cli import main

from test_report_browser import _browser  # noqa: E402  (tests/ is on sys.path)
from test_report_browser_new import RAW  # noqa: E402
from test_verification_pairs import planted  # noqa: E402

pytestmark = pytest.mark.browser


def test_verification_report_from_built_pairs_opens_in_the_browser(tmp_path):
    data, emb = planted(noise=(0.7, 1.1), seed=5)
    data.to_csv(tmp_path / "s.csv", index=False)
    keep = np.arange(len(data) - 6)
    np.savez(tmp_path / "e.npz", embeddings=emb[keep], ids=data.sample_id.to_numpy()[keep].astype(str))
    out = tmp_path / "rep"
    assert main(["audit", "verification", "--samples", str(tmp_path / "s.csv"), "--embeddings", str(tmp_path / "e.npz"),
                 "-a", "group", "-a", "pronoun", "--max-k", "2", "--far", "0.01", "--n-boot", "50",
                 "--min-subjects", "10", "-o", str(out)]) == 0
    errors, requests = [], []
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        page.goto((out / "report.html").resolve().as_uri())
        text = page.inner_text("body")
        assert text.index("Findings") < text.index("Face verification by group")
        assert "their CIs do not overlap" in text and "hard impostors" in text and "left out" in text.lower()
        assert not RAW.search(text), RAW.search(text).group(0)
        svgs = page.locator("svg")
        assert svgs.count() >= 1
        box = svgs.first.bounding_box()
        assert box and box["width"] > 50 and box["height"] > 50
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        page.screenshot(path=str(tmp_path / "verification.png"), full_page=True)
    assert not errors, errors
    assert not requests, requests

"""The cropping audit's report in a real headless Chromium (as tests/test_report_browser_new.py checks the other
reports): no console errors, nothing loaded from the network, the findings summary first, every figure drawn with a
size, nothing wider than the page, no raw Python values where a reader sees them. A biased cropper with games
without a winner (so the coverage section is there) and a table of a, b, winner with a groups table of four
groups, one too small to test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main

# tests/ is on sys.path (pytest's default "prepend" import mode)
from test_cropping_audit import games_table  # noqa: E402
# the browser and the screenshot folder are test_report_browser_new's fixtures (one browser per module)
from test_report_browser_new import browser, check_in_browser, shots  # noqa: E402, F401

pytestmark = pytest.mark.browser


def _biased(d: Path) -> list[str]:
    games_table(p_x=0.8).to_csv(d / "games.csv", index=False)
    return ["audit", "cropping", str(d / "games.csv"), "--orders", "20", "--n-boot", "100",
            "--fail-if", "significant>0"]


def _four_groups(d: Path) -> list[str]:
    rng = np.random.default_rng(4)
    ids = np.array([f"f{i:03d}" for i in range(63)])
    group = np.array(["light-red", "light-yellow", "dark-red", "dark-yellow"])[np.arange(63) % 4]
    group[-3:] = "unknown-hue"  # three faces: too small to test
    strength = {"light-red": 1.0, "light-yellow": 0.5, "dark-red": 0.2, "dark-yellow": 0.0, "unknown-hue": 0.5}
    i = rng.integers(0, 63, 2000)
    j = (i + rng.integers(1, 63, 2000)) % 63
    s = np.array([strength[g] for g in group])
    a_won = rng.random(2000) < 1 / (1 + np.exp(-(s[i] - s[j]) * 2))
    pd.DataFrame({"a": ids[i], "b": ids[j], "winner": np.where(a_won, ids[i], ids[j])}).to_csv(d / "g.csv", index=False)
    pd.DataFrame({"sample_id": ids, "skin": group}).to_csv(d / "groups.csv", index=False)
    return ["audit", "cropping", str(d / "g.csv"), "--groups", str(d / "groups.csv"), "--group-col", "skin",
            "--orders", "20", "--n-boot", "100"]


BUILDERS = {"cropping-biased": _biased, "cropping-four-groups": _four_groups}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_cropping_report_in_the_browser(name, browser, shots, tmp_path):
    html = tmp_path / "report" / "report.html"  # each report is opened once: built here, not in a fixture
    rc = main([*BUILDERS[name](tmp_path), "-o", str(html.parent)])
    assert rc in (0, 1), f"{name}: exit {rc}"
    doc, info, text = check_in_browser(browser, html, shots / f"{name}.png",
                                       before_shot=lambda page: page.locator("table.sortable th").first.click())
    assert doc["findings"] and "Cropping audit: Elo ratings by group" in text
    assert "Position bias" in text and len(info["figs"]) >= 2
    assert "<img" not in html.read_text()  # no face images
    if name == "cropping-biased":
        assert "The cropper prefers skin = X over Y" in doc["findings"][1]["sentence"] + doc["findings"][0]["sentence"]
        assert "Games left out, by pair of groups" in text
    else:
        assert "unknown-hue" in text and "not tested" in text

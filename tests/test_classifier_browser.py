"""The classifier audit's report in a real headless Chromium at 1400 px (as tests/test_report_browser_new.py
checks the other reports): no console errors, nothing loaded from the network, the findings summary first,
every figure drawn with a size, nothing wider than the page, no raw Python values where a reader sees them, and
the criteria table sortable. A binary classifier with a score and a reference group, and a three-class one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fairvision.cli import main

# tests/ is on sys.path (pytest's default "prepend" import mode)
from test_classifier import _random  # noqa: E402
# one browser per module: test_report_browser_new's fixture
from test_report_browser_new import browser, build_reports, check_in_browser  # noqa: E402, F401

pytestmark = pytest.mark.browser


def _binary(d: Path) -> list[str]:
    df = _random(n=900, seed=9, effect=1.0, per_subject=3)
    df.loc[:2, "age"] = "90+"  # one person: too small to judge
    df.loc[5, "y_pred"] = None
    df.to_csv(d / "s.csv", index=False)
    return ["audit", "classifier", "-s", str(d / "s.csv"), "-a", "gender", "-a", "age", "--score-col", "score",
            "--reference", "gender=female", "--n-boot", "50", "--fail-if", "disparate_impact<0.8"]


def _multiclass(d: Path) -> list[str]:
    rng = np.random.default_rng(10)
    df = _random(n=600, seed=10)
    df["y_true"] = rng.choice(["cat", "dog", "fox"], len(df))
    wrong = rng.random(len(df)) < np.where(df["gender"] == "male", 0.1, 0.4)
    df["y_pred"] = np.where(wrong, rng.choice(["cat", "dog", "fox"], len(df)), df["y_true"])
    df.drop(columns="score").to_csv(d / "s.csv", index=False)
    return ["audit", "classifier", "-s", str(d / "s.csv"), "-a", "gender", "-a", "age", "--n-boot", "50"]


BUILDERS = {"classifier-binary": _binary, "classifier-multiclass": _multiclass}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    return build_reports(BUILDERS, tmp_path_factory, codes=(0, 1))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_classifier_report_in_the_browser(name, reports, browser, tmp_path):
    shots = Path(os.environ.get("FAIRVISION_SHOTS") or tmp_path)
    doc, _, text = check_in_browser(browser, reports[name], shots / f"{name}.png",
                                    before_shot=lambda page: page.locator("table.sortable th").first.click())
    assert doc["findings"]
    assert "demographic_parity_difference" in text and "Classifier rates and fairness criteria" in text
    if name == "classifier-binary":
        assert "four fifths" in text and "ROC AUC by group" in text
        assert "Samples left out, by group" in text
    else:
        assert "Overall disparity of per-class recall" in text

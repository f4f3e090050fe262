"""Open the HTML report in a real headless Chromium: no console errors, key numbers visible."""

import os
import shutil
from pathlib import Path

import pytest

from fairvision.cli import main
from fairvision.datasets import demo_path

CHROMIUM = os.environ.get("FAIRVISION_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.browser


def _skip_or_fail(reason):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the browser check: .ci/run installs Chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    code = main(["audit", "dataset", str(demo_path("fairface") / "ground_truth.json"), "-a", "age", "-a", "gender",
                 "-o", str(out), "--n-boot", "100"])
    assert code == 0
    return out / "report.html"


def test_report_loads_without_console_errors(report_html):
    if not CHROMIUM:
        _skip_or_fail("no Chromium found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install -e '.[test]')")
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report_html.as_uri())
        page.wait_for_load_state("load")
        text = page.inner_text("body")
        # key numbers are visible to a reader
        assert "540" in text
        assert "Who is in the dataset" in text
        assert page.locator("#overview .metric").count() >= 3
        assert page.locator("table").count() >= 3
        assert page.locator("figure svg").count() >= 3
        # sorting a table by clicking its header works without errors
        page.locator("table.sortable th").first.click()
        page.screenshot(path=str(report_html.with_name("screenshot.png")), full_page=False)
        browser.close()
    assert errors == []
    # self-contained: nothing but the file itself is loaded
    assert all(u.startswith("file://") or u.startswith("data:") for u in requests), requests

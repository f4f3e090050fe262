"""Open the HTML report in a real headless Chromium: no console errors, key numbers visible, the findings
summary first, long tables collapsed on screen and whole in print."""

import os
import shutil
from contextlib import contextmanager
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


@contextmanager
def _browser():
    if not CHROMIUM:
        _skip_or_fail("no Chromium found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        try:
            yield browser
        finally:
            browser.close()


def test_report_loads_without_console_errors(report_html):
    errors = []
    with _browser() as browser:
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
    assert errors == []
    # self-contained: nothing but the file itself is loaded
    assert all(u.startswith("file://") or u.startswith("data:") for u in requests), requests


_OVERFLOW = "el => el.scrollHeight - el.clientHeight"


def test_findings_first_and_long_tables_collapsed(report_html, tmp_path):
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(report_html.as_uri())
        page.wait_for_load_state("load")
        # the findings summary is the first block of the page body, visible without scrolling
        first = page.locator("main > section").first
        assert first.get_attribute("id") == "findings"
        assert first.is_visible()
        box = page.locator("#findings li").first.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900
        items = page.locator("#findings li")
        assert items.count() >= 3
        text = page.locator("#findings").inner_text()
        assert "age: all 9 groups have 60 images" in text and "NSD 0.00" in text
        # every finding links to an element of the page
        for href in page.locator("#findings li a").evaluate_all("els => els.map(a => a.getAttribute('href'))"):
            assert page.locator(href).count() == 1, href
        page.screenshot(path=str(tmp_path / "report-1400.png"), full_page=False)
        assert (tmp_path / "report-1400.png").stat().st_size > 10_000

        # the 18-row age x gender table starts collapsed: its box cuts rows off until the button is pressed
        box = page.locator("#dataset--groups-age-x-gender")
        assert "collapsed" in box.get_attribute("class")
        wrap = box.locator(".tablewrap")
        assert wrap.evaluate(_OVERFLOW) > 0
        last_row_hidden = ("el => el.querySelector('tbody tr:last-child').getBoundingClientRect().top >= "
                           "el.getBoundingClientRect().bottom")
        assert wrap.evaluate(last_row_hidden)
        button = box.locator("button.toggle")
        assert button.inner_text() == "Show all 18 rows" and button.get_attribute("aria-expanded") == "false"
        button.click()
        assert "collapsed" not in box.get_attribute("class") and wrap.evaluate(_OVERFLOW) == 0
        assert button.get_attribute("aria-expanded") == "true"
        button.click()
        assert wrap.evaluate(_OVERFLOW) > 0
        # numeric headers are right-aligned like their numbers
        th = box.locator("th", has_text="n_samples")
        assert th.evaluate("el => getComputedStyle(el).textAlign") == "right"
        # printed, every table is complete and the buttons are gone
        page.emulate_media(media="print")
        assert all(v == 0 for v in page.locator(".tablebox .tablewrap").evaluate_all(
            "els => els.map(el => el.scrollHeight - el.clientHeight)"))
        assert not button.is_visible()


@pytest.mark.vision
def test_transfer_demo_report_opens_in_the_browser(tmp_path):
    """The bias-transfer demo study (offline, on the bundled photos) writes a report that a browser opens with
    its findings, its study table and its plot, and no console errors."""
    pytest.importorskip("dlib")
    out = tmp_path / "transfer"
    assert main(["transfer", "demo", "-o", str(out), "--limit", "90", "--n-boot", "100", "--workers", "1"]) == 0
    errors = []
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((out / "report.html").resolve().as_uri())
        text = page.inner_text("body")
        assert "Findings" in text and "demonstration" in text.lower()
        assert page.locator("svg").count() >= 1 and page.locator("table").count() >= 2
        page.screenshot(path=str(tmp_path / "transfer.png"))
    assert not errors, errors

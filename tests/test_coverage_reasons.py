"""Rows a step leaves out are counted with their reasons, and the share left out is tested by group."""

import numpy as np
import pandas as pd
from scipy import stats as sps

from fairvision.audits.coverage import audit_coverage, coverage_by_group
from fairvision.report.sections.coverage import coverage_section


def _data():
    df = pd.DataFrame({"group": ["a"] * 5 + ["b"] * 5})
    ok = np.array([True, False, False, False, False] + [True] * 5)
    reasons = [None, "no face found", "no face found", "not an image", ""] + [None] * 5
    return df, ok, reasons


def test_reasons_are_counted_most_common_first():
    df, ok, reasons = _data()
    cov = audit_coverage(df, ok, ["group"], step="face embedding", reasons=reasons)
    assert cov.n_left_out == 4
    assert cov.reasons["n"].to_dict() == {"no face found": 2, "not an image": 1, "unknown": 1}
    assert cov.reasons_text() == "no face found: 2, not an image: 1, unknown: 1"
    assert cov.reasons_text(limit=1) == "no face found: 2 and 2 more reasons"


def test_concentrated_drop_is_tested_against_fisher():
    df, ok, reasons = _data()
    cov = audit_coverage(df, ok, ["group"], step="face embedding", reasons=reasons, unit="samples")
    expected = sps.fisher_exact([[1, 4], [5, 0]]).pvalue
    assert np.isclose(cov.tests.loc["group", "pvalue"], expected)
    line = cov.summary_line()
    assert line.startswith("face embedding: 4 of 10 samples left out (no face found: 2")
    assert ("differs by group" in line) == bool(cov.tests.loc["group", "differs"])


def test_section_states_count_and_reasons_as_a_finding():
    df = pd.DataFrame({"group": ["a"] * 50 + ["b"] * 50})
    ok = np.ones(100, bool)
    ok[[0, 60]] = False  # one drop in each group: no difference
    reasons = np.where(ok, None, "HTTP 500").astype(object)
    cov = audit_coverage(df, ok, ["group"], step="reply", reasons=reasons, unit="questions")
    assert not cov.tests["differs"].any()
    sec = coverage_section(cov)
    text = " ".join(f.sentence for f in sec.findings)
    assert "of 100 questions (HTTP 500: 2)" in text
    assert cov.summary_line() == "reply: 2 of 100 questions left out (HTTP 500: 2)"


def test_without_reasons_nothing_changes():
    df, ok, _ = _data()
    cov = coverage_by_group(df, ok, ["group"])
    assert cov.reasons.empty and cov.unit == "images"

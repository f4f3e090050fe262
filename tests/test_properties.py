"""Property-based checks: the table readers, the schema and the statistics entry points either give a
result that obeys its definition or raise a one-line FairvisionError, for any input (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairvision.errors import FairvisionError
from fairvision.io.tables import read_table
from fairvision.schema import Attribute
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import METHODS, adjust_pvalues
from fairvision.stats.representation import nsd

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
cell = st.one_of(st.text(max_size=8), st.integers(-5, 5).map(str), st.sampled_from(["", " ", "nan", "inf", '"', ",", "\n"]))


def _one_line_error(exc: FairvisionError) -> None:
    msg = str(exc)
    assert msg and "\n" not in msg


@SETTINGS
@given(rows=st.lists(st.lists(cell, min_size=1, max_size=4), min_size=0, max_size=6),
       header=st.lists(st.text(min_size=0, max_size=6), min_size=1, max_size=4))
def test_read_table_reads_or_explains(tmp_path, rows, header):
    import csv

    path = tmp_path / "t.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    try:
        df = read_table(path)
    except FairvisionError as exc:
        _one_line_error(exc)
        return
    assert isinstance(df, pd.DataFrame)
    assert "sample_id" in df.columns and df["sample_id"].is_unique


@SETTINGS
@given(values=st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                                 st.integers(-3, 3), st.lists(st.text(max_size=2), max_size=2)),
                       min_size=1, max_size=30),
       missing=st.sampled_from(["error", "drop", "keep"]))
def test_schema_membership_is_valid_or_explained(values, missing):
    df = pd.DataFrame({"a": pd.Series(values, dtype=object)})
    try:
        m = Attribute("a", missing=missing).membership(df, source="t.csv")
    except FairvisionError as exc:
        _one_line_error(exc)
        assert "t.csv" in str(exc)
        return
    assert len(m.rows) == len(m.codes) and (m.codes < len(m.categories)).all()
    assert len(set(m.rows.tolist())) == len(m.rows)  # single-valued: each row in at most one group
    if missing == "keep":
        assert len(m.rows) == len(values)


@SETTINGS
@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=12))
def test_nsd_is_between_0_and_1(counts):
    if sum(counts) <= 0:
        return
    v = float(nsd(np.asarray(counts) / sum(counts)))
    assert -1e-9 <= v <= 1 + 1e-9


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 40), min_size=2, max_size=4), min_size=2, max_size=4))
def test_chi2_pvalue_is_a_probability(rows):
    width = min(len(r) for r in rows)
    table = np.array([r[:width] for r in rows])
    try:
        res = chi2_test(table, exact="never", warn=False)
    except FairvisionError as exc:
        _one_line_error(exc)
        return
    assert math.isnan(res.pvalue) or 0.0 <= res.pvalue <= 1.0
    assert math.isnan(res.statistic) or res.statistic >= -1e-9


@SETTINGS
@given(p=st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), min_size=1, max_size=20),
       method=st.sampled_from(list(METHODS)))
def test_adjusted_pvalues_are_probabilities_not_below_raw(p, method):
    raw = np.asarray(p, dtype=float)
    adj = adjust_pvalues(raw, method)
    ok = ~np.isnan(raw)
    assert np.array_equal(np.isnan(adj), ~ok)
    assert (adj[ok] >= raw[ok] - 1e-12).all() and (adj[ok] <= 1 + 1e-12).all()


@pytest.mark.parametrize("bad", [[1.0, float("inf")], [np.nan, 1.0]])
def test_finite_values_name_row_and_column(bad):
    from fairvision.io.validate import finite_values

    df = pd.DataFrame({"score": bad})
    if np.isinf(bad[1]):
        with pytest.raises(FairvisionError, match=r"s\.csv: row 2: column 'score' is inf"):
            finite_values(df, "score", source="s.csv")
    else:
        assert np.isnan(finite_values(df, "score", source="s.csv")[0])

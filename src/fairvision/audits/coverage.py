"""Measurement coverage by group: does an automatic step (a face finder, a skin
mask) fail more often for some groups than for others?

A face detector that misses one group more than another biases every
measurement built on it, so the miss rate by group is itself a finding
(FHIBE reports face detection by group for the same reason; docs/METHODS.md §9.3). Rates carry
Wilson intervals (docs/METHODS.md §4.4), the tests are chi-square tests of
independence (docs/METHODS.md §4.1) corrected for multiplicity over the
attributes (docs/METHODS.md §4.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.groups import combine, memberships
from fairvision.schema import Schema
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.proportions import wilson_interval


@dataclass
class Coverage(SettingsView):
    """Success rate of a measurement step per group, with tests of equal rates; ``settings`` are the settings
    it ran with (``correction`` is also an attribute)."""

    step: str
    overall: float
    n: int
    by_group: pd.DataFrame
    tests: pd.DataFrame
    findings: list[str] = field(default_factory=list)
    settings: AuditSettings = DEFAULT_SETTINGS
    #: rows left out per reason (index ``reason``, column ``n``), most common first; empty when no reasons were given
    #: what one row is, in sentences ("images", "samples", "queries")
    unit: str = "images"
    reasons: pd.DataFrame = field(default_factory=lambda: pd.DataFrame({"n": pd.Series([], dtype="int64")},
                                                                       index=pd.Index([], name="reason")))

    def to_frame(self) -> pd.DataFrame:
        return self.by_group

    @property
    def n_left_out(self) -> int:
        """Rows for which the step did not succeed (left out of what follows)."""
        return int(self.n - round(self.overall * self.n)) if self.n else 0

    def reasons_text(self, limit: int = 3) -> str:
        """``"no face found: 110, not an image: 2"``: the most common reasons with their counts."""
        items = [f"{r}: {int(n):,}" for r, n in self.reasons["n"].items()]
        more = len(items) - limit
        return ", ".join(items[:limit]) + (f" and {more} more reason{'s' if more > 1 else ''}" if more > 0 else "")

    def summary_line(self) -> str:
        """One line for the terminal: how many rows the step left out, why, and whether groups differ."""
        if not self.n:
            return f"{self.step}: no rows"
        line = f"{self.step}: {self.n_left_out:,} of {self.n:,} {self.unit} left out"
        if self.n_left_out and len(self.reasons):
            line += f" ({self.reasons_text()})"
        differs = self.tests[self.tests["differs"].astype(bool)].index.tolist() if len(self.tests) else []
        if differs:
            line += f"; the share left out differs by {', '.join(map(str, differs))}"
        return line


def audit_coverage(
    data: pd.DataFrame,
    ok: str | np.ndarray,
    attributes: Sequence[str],
    *,
    schema: Schema | None = None,
    step: str = "measurement",
    settings: AuditSettings | None = None,
    reasons: str | Sequence | np.ndarray | None = None,
    unit: str = "images",
) -> Coverage:
    """Rate of successful measurement per group of each attribute.

    For each attribute a chi-square test of independence between success and
    group (Fisher's exact test for 2 x 2 tables), corrected for multiplicity
    over the attributes, tells whether the rates differ more than chance
    allows. The tests table has ``statistic`` (X^2), ``pvalue`` and
    ``pvalue_adjusted``.

    Parameters
    ----------
    data : pandas.DataFrame
        One row per image, with the attribute columns.
    ok : str or array of bool
        Column (or values) saying whether the step succeeded for each row.
    attributes : sequence of str
        Attributes that define the groups.
    schema : Schema, optional
    step : str
        Name of the measurement step in the findings.
    settings : AuditSettings, optional
        Uses ``level`` (Wilson intervals, docs/METHODS.md §4.4), ``correction``
        (over the attributes, docs/METHODS.md §4.3) and ``alpha``. Default:
        ``AuditSettings()``.
    reasons : str or array of str, optional
        Column (or values) giving, for each row where the step failed, why (e.g. ``"no face found"``); counted
        into ``Coverage.reasons`` so that the report says why rows were left out. Empty or missing reasons of
        failed rows count as ``"unknown"``.
    unit : str
        What one row is, in the sentences of the report (``"images"``, ``"samples"``, ``"queries"``).
    """
    settings = settings or DEFAULT_SETTINGS
    level, alpha, correction = settings.level, settings.alpha, settings.correction
    okv = np.asarray(data[ok] if isinstance(ok, str) else ok).astype(bool)
    rows, tests, findings = [], [], []
    for m in memberships(data, attributes, schema):
        comb = combine([m], len(data))
        n = np.bincount(comb.codes, minlength=comb.n_cells)
        k = np.bincount(comb.codes, weights=okv[comb.rows].astype(float), minlength=comb.n_cells)
        lo, hi = wilson_interval(k, n, level)
        for g, cat in enumerate(m.categories):
            rows.append({"attribute": m.name, "group": cat, "n": int(n[g]), "n_ok": int(k[g]),
                         "rate": k[g] / n[g] if n[g] else np.nan, "ci_low": lo[g], "ci_high": hi[g]})
        table = np.stack([k, n - k], axis=1)[n > 0]
        if table.shape[0] >= 2 and (table.sum(axis=0) > 0).all():
            # Fisher's exact test for 2 x 2, the asymptotic chi-square test otherwise
            res = chi2_test(table, exact="always" if table.shape == (2, 2) else "never", warn=False)
            stat, p = res.statistic, res.pvalue
            test = "Fisher exact" if res.method == "fisher" else "chi-square"
        else:
            stat, p, test = np.nan, np.nan, "not testable (all succeeded or all failed)"
        tests.append({"attribute": m.name, "test": test, "statistic": stat, "pvalue": p})
    tests_df = pd.DataFrame(tests, columns=["attribute", "test", "statistic", "pvalue"])
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(), correction)
    tests_df["differs"] = tests_df["pvalue_adjusted"] < alpha
    by_group = pd.DataFrame(rows, columns=["attribute", "group", "n", "n_ok", "rate", "ci_low", "ci_high"]).set_index(
        ["attribute", "group"])
    for _, t in tests_df[tests_df["differs"]].iterrows():
        g = by_group.loc[t["attribute"]]
        worst = g["rate"].idxmin()
        best = g["rate"].idxmax()
        findings.append(
            f"The {step} succeeds less often for {t['attribute']} = {worst} ({g.loc[worst, 'rate']:.0%}) than for "
            f"{best} ({g.loc[best, 'rate']:.0%}); p = {t['pvalue_adjusted']:.2g} after {correction} correction. "
            f"Measurements built on it under-represent that group."
        )
    return Coverage(step, float(okv.mean()) if len(okv) else np.nan, int(len(okv)), by_group, tests_df.set_index("attribute"),
                    findings, settings, unit, _count_reasons(data, reasons, okv))


def _count_reasons(data: pd.DataFrame, reasons, okv: np.ndarray) -> pd.DataFrame:
    if reasons is None:
        return Coverage.__dataclass_fields__["reasons"].default_factory()
    vals = pd.Series(np.asarray(data[reasons] if isinstance(reasons, str) else reasons, dtype=object))
    failed = vals[~okv].map(lambda v: "unknown" if v is None or (isinstance(v, float) and np.isnan(v)) or str(v) == ""
                            else str(v))
    counts = failed.value_counts(sort=False)
    order = sorted(counts.index, key=lambda r: (-int(counts[r]), r))
    return pd.DataFrame({"n": counts.loc[order].astype("int64").to_numpy()}, index=pd.Index(order, name="reason"))


#: the earlier name of :func:`audit_coverage`
coverage_by_group = audit_coverage

"""Measurement coverage by group: does an automatic step (a face finder, a skin
mask) fail more often for some groups than for others?

A face detector that misses one group more than another biases every
measurement built on it, so the miss rate by group is itself a finding
(FHIBE reports face detection by group for the same reason). Rates carry
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

    def to_frame(self) -> pd.DataFrame:
        return self.by_group


def coverage_by_group(
    data: pd.DataFrame,
    ok: str | np.ndarray,
    attributes: Sequence[str],
    *,
    schema: Schema | None = None,
    step: str = "measurement",
    settings: AuditSettings | None = None,
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
    tests_df = pd.DataFrame(tests)
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(), correction)
    tests_df["differs"] = tests_df["pvalue_adjusted"] < alpha
    by_group = pd.DataFrame(rows).set_index(["attribute", "group"])
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
                    findings, settings)

"""The result vocabulary shared by every statistic in fairvision.

After :mod:`scipy.stats`: a hypothesis test returns a :class:`TestResult`
(``statistic``, ``pvalue``, and ``df`` where the test has degrees of freedom);
an estimate with an interval is an :class:`Estimate` (``estimate``,
``ci_low``, ``ci_high``, ``level``). Tables of many tests or estimates use the
same names as columns, plus ``pvalue_adjusted`` for multiplicity-corrected
p-values (see :data:`COLUMNS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

#: column names of tidy result tables
COLUMNS = {
    "statistic": "statistic",
    "pvalue": "pvalue",
    "pvalue_adjusted": "pvalue_adjusted",
    "df": "df",
    "estimate": "estimate",
    "ci_low": "ci_low",
    "ci_high": "ci_high",
    "level": "level",
}


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


@dataclass
class TestResult:
    """Base of every hypothesis-test result.

    Attributes
    ----------
    statistic : float
        The test statistic.
    pvalue : float
        The p-value used for decisions.
    """

    __test__ = False  # not a pytest test class

    statistic: float
    pvalue: float

    def to_dict(self) -> dict:
        """Fields as plain Python values (for JSON); DataFrame fields are left out."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if not isinstance(getattr(self, f.name), (pd.DataFrame, pd.Series))}

    def to_frame(self) -> pd.DataFrame:
        """One-row DataFrame of :meth:`to_dict`."""
        return pd.DataFrame([self.to_dict()])


@dataclass
class Estimate:
    """A point estimate with a confidence interval.

    Attributes
    ----------
    estimate : float
    ci_low, ci_high : float
        Bounds of the two-sided interval (NaN when undefined).
    level : float
        Two-sided level of the interval, e.g. 0.95.
    """

    estimate: float
    ci_low: float
    ci_high: float
    level: float = 0.95

    def to_dict(self) -> dict:
        """Fields as plain Python values (for JSON)."""
        return {k: _plain(v) for k, v in asdict(self).items()}

    def to_frame(self) -> pd.DataFrame:
        """One-row DataFrame of :meth:`to_dict`."""
        return pd.DataFrame([self.to_dict()])

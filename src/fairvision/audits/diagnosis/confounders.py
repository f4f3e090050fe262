"""Confounder control: does a group disparity survive within strata of a suspected confounder?

FHIBE (docs/METHODS.md §7.3; FHIBE results on person detection): skin-tone
differences in person detection disappear among images with many visible
keypoints, i.e. occlusion, not skin tone, drives them. This module compares
every pair of groups of an attribute three ways:

* ``overall`` - ignoring the confounder (two-sided Mann-Whitney U, or the
  Mantel-Haenszel chi-square of the pooled 2 x 2 table for binary outcomes);
* ``stratified`` - pooled across strata of the confounder (van Elteren's
  stratified Wilcoxon test, or Cochran-Mantel-Haenszel with the common odds
  ratio for binary outcomes);
* ``within`` - separately inside every stratum (FHIBE's "within the subset of
  images with a high number of visible keypoints").

P-values are corrected over the pairs (docs/METHODS.md §4.3; Holm by
default, ``correction="bonferroni"`` reproduces FHIBE's benchmarking
analysis); ``within`` corrects over all pairs and strata. Cells
with fewer than ``min_count`` subjects are flagged too small and not tested
within strata. When a subject column is present, continuous scores are first
averaged per subject (within stratum), so a subject counts once per stratum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.io.validate import require_columns
from fairvision.audits.diagnosis.patterns import bin_numeric, is_binned
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.stratified import cmh_from_samples, cochran_mantel_haenszel, van_elteren


@dataclass
class ConfounderResult(SettingsView):
    """Result of :func:`audit_confounder`.

    Attributes
    ----------
    overall, stratified : DataFrame
        Indexed by ``(group_a, group_b)``: ``n_a``, ``n_b``, ``statistic``,
        ``pvalue``, ``pvalue_adjusted``, ``significant`` and ``effect`` (AUC =
        P(a > b) + P(a = b)/2 for scores; odds ratio of the outcome for binary
        outcomes, with ``ci_low``/``ci_high`` in ``stratified``).
    within : DataFrame
        Indexed by ``(stratum, group_a, group_b)``; same columns, plus
        ``too_small`` (a cell below ``min_count`` subjects; not tested).
    cells : DataFrame
        Indexed by ``(stratum, group)``: ``n``, ``n_subjects``, ``mean``, ``median``.
    survives : bool
        Some pair still differs significantly after stratification.
    settings : AuditSettings
        The options of the audit (``correction``, ``alpha``).
    """

    attribute: str
    confounder: str
    score: str
    outcome: str
    test: str
    overall: pd.DataFrame
    stratified: pd.DataFrame
    within: pd.DataFrame
    cells: pd.DataFrame
    settings: AuditSettings
    min_count: int
    by_subject: bool
    strata_labels: list = field(default_factory=list)

    @property
    def disparity_before(self) -> bool:
        return bool(self.overall["significant"].any()) if len(self.overall) else False

    @property
    def survives(self) -> bool:
        return bool(self.stratified["significant"].any()) if len(self.stratified) else False

    @property
    def message(self) -> str:
        """One sentence in FHIBE's words: whether the disparity survives the stratification."""
        a, c = self.attribute.replace("_", " "), self.confounder.replace("_", " ")
        n_before = int(self.overall["significant"].sum()) if len(self.overall) else 0
        if not self.disparity_before and not self.survives:
            return f"No significant {a} difference, with or without holding {c} fixed."
        if not self.survives:
            return (f"No significant {a} difference once {c} is held fixed ({self.test} within {len(self.strata_labels)} "
                    f"strata); {n_before} of {len(self.overall)} pairs differed without stratification.")
        kept = ", ".join(f"{x} vs {y}" for x, y in self.stratified.index[self.stratified["significant"].to_numpy()])
        return f"The {a} difference survives stratification by {c} ({self.test}): {kept}."

    def to_frame(self) -> pd.DataFrame:
        return self.stratified


def strata_of(values: pd.Series, *, n_bins: int = 3, edges: Sequence[float] | None = None) -> pd.Series:
    """Stratum labels of a confounder column (strings; NaN stays NaN).

    Categorical columns and numeric columns with at most ``max(n_bins, 6)``
    values are used as they are; other numeric columns are cut at ``edges``
    (right-closed bins) or into ``n_bins`` quantile bins.
    """
    if edges is not None:
        v = pd.to_numeric(values, errors="coerce")
        cut = pd.cut(v, bins=[-np.inf, *sorted(edges), np.inf])
    elif is_binned(values, n_bins):
        cut = bin_numeric(values, n_bins)
    else:
        return values.astype(object).where(values.notna(), None).map(lambda v: v if v is None else str(v))
    labels = cut.astype(object).map(lambda iv: None if not isinstance(iv, pd.Interval) else f"({iv.left:.4g}, {iv.right:.4g}]")
    return labels


def audit_confounder(
    data: pd.DataFrame,
    score: str,
    attribute: str,
    confounder: str,
    *,
    outcome: str = "auto",
    subject_col: str | None = "subject_id",
    groups: Sequence | None = None,
    n_bins: int = 3,
    edges: Sequence[float] | None = None,
    min_count: int = 10,
    settings: AuditSettings | None = None,
) -> ConfounderResult:
    """Compare the groups of ``attribute`` on ``score`` with and without stratifying by ``confounder`` (docs/METHODS.md §7.3).

    Parameters
    ----------
    data : DataFrame
        One row per sample.
    score : str
        Per-sample score, or a binary outcome (0/1, booleans).
    attribute : str
        Sensitive attribute whose groups are compared (e.g. ``skin_tone``).
    confounder : str
        Suspected confounder (e.g. ``visible_keypoints``); see :func:`strata_of`.
    outcome : {"auto", "continuous", "binary"}
        ``auto``: binary when the score only takes the values 0 and 1.
    subject_col : str or None
        Subject column; continuous scores are averaged per subject and stratum.
    groups : sequence, optional
        Groups to compare (default: all, in category order).
    n_bins, edges :
        Stratification of a numeric confounder.
    min_count : int
        Smallest cell (subjects per group within a stratum) tested in ``within``
        (FHIBE keeps groups with at least 10 subjects).
    settings : AuditSettings, optional
        ``correction`` over the pairs (FHIBE used ``"bonferroni"``), and ``alpha`` applied to the adjusted
        p-values.

    Returns
    -------
    ConfounderResult
    """
    settings = settings or DEFAULT_SETTINGS
    src = str(data.attrs.get("source", "table"))
    y, outcome = _scores(data, score, attribute, confounder, outcome, src)
    strata = strata_of(data[confounder], n_bins=n_bins, edges=edges)
    attr = data[attribute]
    ok = y.notna().to_numpy() & attr.notna().to_numpy() & strata.notna().to_numpy()
    by_subject = subject_col is not None and subject_col in data.columns
    frame = pd.DataFrame({
        "y": y.to_numpy()[ok], "g": attr.to_numpy(dtype=object)[ok], "s": strata.to_numpy(dtype=object)[ok],
        "subj": (data[subject_col].astype(str).to_numpy()[ok] if by_subject else np.arange(int(ok.sum())).astype(str)),
    })
    if groups is None:
        groups = list(attr.cat.categories) if isinstance(attr.dtype, pd.CategoricalDtype) else sorted(frame["g"].unique(), key=str)
    groups = [g for g in groups if (frame["g"] == g).any()]
    if len(groups) < 2:
        raise FairvisionError(f"{src}: attribute {attribute!r} has fewer than two groups with scores")
    frame = frame[frame["g"].isin(groups)]
    strata_labels = sorted(set(frame["s"]), key=lambda v: (_order_key(v), str(v)))
    if outcome == "continuous" and by_subject:
        unit = frame.groupby(["subj", "g", "s"], sort=False, observed=True)["y"].mean().reset_index()
    else:
        unit = frame
    test = "van Elteren" if outcome == "continuous" else "Cochran-Mantel-Haenszel"

    cells = frame.groupby(["s", "g"], observed=True).agg(n=("y", "size"), n_subjects=("subj", "nunique"),
                                                        mean=("y", "mean"), median=("y", "median"))
    cells.index = cells.index.set_names(["stratum", "group"])
    pairs = [(groups[i], groups[j]) for i, j in zip(*np.triu_indices(len(groups), k=1))]  # every pair, in order
    over, strat, within = [], [], []
    for a, b in pairs:
        ua, ub = unit[unit["g"] == a], unit[unit["g"] == b]
        pooled, stratified = _pair_tests(unit, ua, ub, a, b, outcome)
        over.extend(pooled)
        strat.append(stratified)
        within.extend(_within_strata_tests(ua, ub, a, b, strata_labels, outcome, min_count))

    base = ["group_a", "group_b", "n_a", "n_b", "statistic", "pvalue", "effect"]
    overall = _corrected(over, base, ["group_a", "group_b"], settings)
    stratified = _corrected(strat, base + ["ci_low", "ci_high", "n_strata"], ["group_a", "group_b"], settings)
    within_df = _corrected(within, ["stratum"] + base + ["too_small"], ["stratum", "group_a", "group_b"], settings)
    return ConfounderResult(
        attribute=attribute, confounder=confounder, score=score, outcome=outcome, test=test, overall=overall,
        stratified=stratified, within=within_df, cells=cells, settings=settings,
        min_count=min_count, by_subject=by_subject and outcome == "continuous", strata_labels=strata_labels,
    )


def _scores(data: pd.DataFrame, score: str, attribute: str, confounder: str, outcome: str,
            src: str) -> tuple[pd.Series, str]:
    """The score column as numbers, and the outcome type (``auto`` resolved), after checking the columns."""
    for col in (score, attribute, confounder):
        require_columns(data, [col], source=src)
    if attribute == confounder:
        raise FairvisionError("the attribute and the confounder must be different columns")
    strata = data[confounder]
    if pd.api.types.is_numeric_dtype(strata) and not pd.api.types.is_bool_dtype(strata):
        inf = np.isinf(pd.to_numeric(strata, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
        if inf.any():
            row = int(np.flatnonzero(inf)[0]) + 1
            raise ColumnError(f"{src}: row {row}: confounder column {confounder!r} is {strata.iloc[row - 1]:g} "
                              f"({int(inf.sum())} infinite values); strata need finite numbers (leave a cell empty "
                              "to leave the row out)")
    y = pd.to_numeric(data[score], errors="coerce")
    bad = data[score].notna() & y.isna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0]) + 1
        raise ColumnError(f"{src}: row {row}: score column {score!r} is not a number: {data[score].iloc[row - 1]!r}")
    vals = y.dropna().unique()
    if outcome == "auto":
        outcome = "binary" if len(vals) <= 2 and set(np.asarray(vals, float)) <= {0.0, 1.0} else "continuous"
    if outcome not in ("binary", "continuous"):
        raise ParameterError("outcome", f"must be auto, continuous or binary, not {outcome!r}")
    if outcome == "binary" and not set(np.asarray(vals, float)) <= {0.0, 1.0}:
        raise ColumnError(f"{src}: score column {score!r} is not binary (0/1)")
    return y, outcome


def _pair_tests(unit: pd.DataFrame, ua: pd.DataFrame, ub: pd.DataFrame, a, b, outcome: str) -> tuple[list, tuple]:
    """The ``overall`` rows (none when a group is empty) and the ``stratified`` row of one pair of groups."""
    over = []
    if outcome == "continuous":
        if len(ua) and len(ub):
            mw = _st.mannwhitneyu(ua["y"], ub["y"], alternative="two-sided")
            over.append((a, b, len(ua), len(ub), float(mw.statistic), float(mw.pvalue), float(mw.statistic) / (len(ua) * len(ub))))
        ve = van_elteren(ua["y"], ub["y"], ua["s"], ub["s"])
        return over, (a, b, len(ua), len(ub), ve.statistic, ve.pvalue, ve.auc, np.nan, np.nan, ve.n_strata)
    sub = unit[unit["g"].isin([a, b])]
    pooled = cmh_from_samples(sub["y"], sub["g"], np.zeros(len(sub)), x=a, y=b)
    over.append((a, b, len(ua), len(ub), pooled.statistic, pooled.pvalue, pooled.odds_ratio))
    cm = cmh_from_samples(sub["y"], sub["g"], sub["s"], x=a, y=b)
    return over, (a, b, len(ua), len(ub), cm.statistic, cm.pvalue, cm.odds_ratio, cm.ci_low, cm.ci_high, cm.n_strata)


def _within_strata_tests(ua: pd.DataFrame, ub: pd.DataFrame, a, b, strata_labels: list, outcome: str,
                         min_count: int) -> list[tuple]:
    """The ``within`` rows of one pair of groups: the unstratified test inside every stratum, or too small."""
    within = []
    for s in strata_labels:
        xa, xb = ua[ua["s"] == s], ub[ub["s"] == s]
        sa, sb = xa["subj"].nunique(), xb["subj"].nunique()
        small = sa < min_count or sb < min_count
        if small:
            within.append((s, a, b, len(xa), len(xb), np.nan, np.nan, np.nan, True))
        elif outcome == "continuous":
            mw = _st.mannwhitneyu(xa["y"], xb["y"], alternative="two-sided")
            within.append((s, a, b, len(xa), len(xb), float(mw.statistic), float(mw.pvalue),
                           float(mw.statistic) / (len(xa) * len(xb)), False))
        else:
            t = [[xa["y"].sum(), len(xa) - xa["y"].sum()], [xb["y"].sum(), len(xb) - xb["y"].sum()]]
            cm = cochran_mantel_haenszel(np.asarray(t, float))
            within.append((s, a, b, len(xa), len(xb), cm.statistic, cm.pvalue, cm.odds_ratio, False))
    return within


def _corrected(rows: list, cols: list[str], index: list[str], settings: AuditSettings) -> pd.DataFrame:
    """A table of tests with ``pvalue_adjusted`` (corrected over its rows) and ``significant``."""
    df = pd.DataFrame(rows, columns=cols)
    df["pvalue_adjusted"] = adjust_pvalues(df["pvalue"].to_numpy(dtype=float), settings.correction) if len(df) else []
    df["significant"] = df["pvalue_adjusted"].to_numpy(dtype=float) < settings.alpha
    return df.set_index(index)


def _order_key(label) -> float:
    """Sort strata labels like ``(1.5, 12]`` by their lower edge, others by text."""
    if isinstance(label, str) and label.startswith("(") and "," in label:
        try:
            return float(label[1:label.index(",")])
        except ValueError:
            return np.inf
    try:
        return float(label)
    except (TypeError, ValueError):
        return np.inf

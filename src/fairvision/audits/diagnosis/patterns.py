"""Error pattern recognition: attribute values that co-occur with low scores.

FHIBE (docs/METHODS.md §7.2, "Error pattern recognition"; FHIBE Methods):
association rules mined with FP-growth over *items* ``attribute = value`` plus
one item "low score", kept when their consequent is "low score" and ranked by
lift, with support and confidence. A sample has low score when its score is
at or below the ``low_quantile`` quantile of all scores (or at or below an
absolute ``low_threshold``; at or above for lower-is-better scores).

Beyond the paper, every rule ``A -> low`` gets a one-sided Fisher exact
(hypergeometric) p-value for "low scores are more frequent where A holds",
adjusted for multiple comparisons (docs/METHODS.md §4.3) over *every*
frequent antecedent that was examined (not only the reported rules), so that on data without a real
pattern no rule is flagged beyond the nominal rate.

The items of a rule can be turned back into a boolean mask or a new
attribute column (:func:`rule_mask`, :func:`add_rule_attribute`) and fed to
any group audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.io.validate import require_columns
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.itemsets import association_rules, fpgrowth

LOW_ITEM = ("__low__", "low score")
MISSING = "(missing)"


def bin_numeric(values: pd.Series, n_bins: int = 3) -> pd.Series:
    """Quantile bins of a numeric column as a categorical of ``pandas.Interval`` (NaN stays NaN).

    Bins are right-closed, ``(lo, hi]``, the lowest one includes its left
    edge; duplicate quantiles are merged, so heavily tied columns may get
    fewer bins.
    """
    v = pd.to_numeric(values, errors="coerce")
    return pd.qcut(v, q=n_bins, duplicates="drop")


def is_binned(s: pd.Series, n_bins: int) -> bool:
    """Whether a column is numeric with more than ``max(n_bins, 6)`` distinct values, i.e. cut into quantile bins."""
    if pd.api.types.is_bool_dtype(s) or isinstance(s.dtype, pd.CategoricalDtype):
        return False
    return pd.api.types.is_numeric_dtype(s) and s.nunique(dropna=True) > max(n_bins, 6)


def _item_label(item: tuple) -> str:
    attr, value = item
    if item == LOW_ITEM:
        return "low score"
    name = str(attr).replace("_", " ")
    if isinstance(value, pd.Interval):
        lo, hi = value.left, value.right
        return f"{name} in ({lo:.4g}, {hi:.4g}]"
    return f"{name} = {value}"


def items_label(items) -> str:
    """Readable text of a set of items: ``pose = lying and visible keypoints in (0, 8]``."""
    return " and ".join(_item_label(i) for i in sorted(items, key=lambda t: (str(t[0]), str(t[1]))))


def transaction_matrix(data: pd.DataFrame, attributes: Sequence[str], *, n_bins: int = 3,
                       source: str = "table") -> tuple[np.ndarray, list[tuple]]:
    """Boolean item matrix: one column per ``(attribute, value)``.

    Categorical, boolean and numeric columns with at most ``max(n_bins, 6)``
    distinct values give one item per value; other numeric columns are cut
    into ``n_bins`` quantile bins (items whose value is a ``pandas.Interval``).
    A missing value is the item ``(attribute, "(missing)")``.
    """
    cols, names = [], []
    for a in attributes:
        require_columns(data, [a], source=source, what="attribute column")
        s = data[a]
        if s.apply(lambda v: isinstance(v, (list, tuple, set, np.ndarray))).any():
            raise ColumnError(f"{source}: attribute column {a!r} holds lists; expand multi-valued attributes first")
        vals = bin_numeric(s, n_bins) if is_binned(s, n_bins) else s
        obj = vals.astype(object).where(vals.notna(), MISSING)
        levels = list(vals.cat.categories) if isinstance(vals.dtype, pd.CategoricalDtype) else sorted(
            (v for v in pd.unique(obj) if v != MISSING), key=str)
        if (obj == MISSING).any():
            levels.append(MISSING)
        arr = obj.to_numpy()
        for lv in levels:
            col = arr == lv
            if col.any():
                cols.append(col)
                names.append((a, lv))
    return np.column_stack(cols) if cols else np.zeros((len(data), 0), bool), names


def low_score_flags(scores, *, low_quantile: float | None = 0.2, low_threshold: float | None = None,
                    higher_is_better: bool = True) -> tuple[np.ndarray, float]:
    """Which samples count as "low score", and the cut used.

    ``low_threshold`` (absolute) wins over ``low_quantile``. Higher-is-better
    scores are low when ``score <= cut``; lower-is-better ones (errors, LPIPS)
    when ``score >= cut``, with the cut at the ``1 - low_quantile`` quantile.
    """
    s = np.asarray(scores, dtype=float)
    if low_threshold is not None:
        cut = float(low_threshold)
    else:
        if low_quantile is None or not 0 < low_quantile < 1:
            raise ParameterError("low_quantile", f"must be in (0, 1), got {low_quantile}")
        cut = float(np.quantile(s, low_quantile if higher_is_better else 1 - low_quantile))
    low = s <= cut if higher_is_better else s >= cut
    return low, cut


@dataclass
class PatternResult(SettingsView):
    """Association rules ``items -> low score``, ranked by lift.

    Attributes
    ----------
    rules : DataFrame
        Indexed by rank (1 = highest lift): ``items`` (text), ``antecedent``
        (tuple of ``(attribute, value)``), ``support`` (share of all samples
        matching the items and low), ``confidence`` (share low among samples
        matching the items), ``lift`` (confidence / share low overall), ``n``
        (matching and low), ``n_matching``, ``pvalue`` (one-sided Fisher),
        ``pvalue_adjusted``, ``pvalue_productive`` (largest Fisher p-value
        against the rule's immediate generalisations, corrected over the
        multi-item rules; equal to ``pvalue_adjusted`` for single items) and
        ``significant`` (``pvalue_adjusted < alpha`` and ``pvalue_productive <
        alpha``: an extra item counts only if it raises the low-score rate
        beyond the shorter rule).
    n_tested : int
        Frequent antecedents examined (the multiple-comparison family).
    settings : AuditSettings
        The options of the audit (``correction``, ``alpha``).
    """

    rules: pd.DataFrame
    score: str
    threshold: float
    higher_is_better: bool
    base_rate: float
    n_samples: int
    n_low: int
    n_tested: int
    min_support: float
    max_len: int
    settings: AuditSettings
    attributes: list[str] = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        return self.rules

    def items(self, rule: int = 1) -> tuple:
        """The ``(attribute, value)`` items of the rule of that rank."""
        if rule not in self.rules.index:
            raise FairvisionError(f"no rule {rule}; there are {len(self.rules)} rules")
        return self.rules.loc[rule, "antecedent"]


#: columns of :attr:`PatternResult.rules`
RULE_COLUMNS = ["items", "antecedent", "support", "confidence", "lift", "n", "n_matching", "pvalue", "pvalue_adjusted",
                "pvalue_productive", "significant"]


def audit_error_patterns(
    data: pd.DataFrame,
    score: str,
    attributes: Sequence[str],
    *,
    low_quantile: float | None = 0.2,
    low_threshold: float | None = None,
    higher_is_better: bool = True,
    min_support: float = 0.05,
    min_confidence: float = 0.0,
    min_lift: float = 1.0,
    max_len: int = 3,
    n_bins: int = 3,
    settings: AuditSettings | None = None,
) -> PatternResult:
    """Mine the attribute values that co-occur with low scores (FHIBE error pattern recognition; docs/METHODS.md §7.2).

    Parameters
    ----------
    data : DataFrame
        One row per sample.
    score : str
        Per-sample score column.
    attributes : sequence of str
        Attribute columns whose values become items.
    low_quantile, low_threshold, higher_is_better :
        Definition of "low score" (see :func:`low_score_flags`).
    min_support : float
        FP-growth minimum support of an itemset (share of samples).
    min_confidence, min_lift : float
        Reported rules need at least this confidence and lift.
    max_len : int
        Longest rule including the "low score" item (so antecedents have at
        most ``max_len - 1`` items).
    n_bins : int
        Quantile bins for numeric attributes with many values.
    settings : AuditSettings, optional
        ``correction`` over every frequent antecedent, and ``alpha`` applied to the adjusted p-values.

    Returns
    -------
    PatternResult
    """
    settings = settings or DEFAULT_SETTINGS
    src = str(data.attrs.get("source", "table"))
    require_columns(data, [score], source=src, what="score column")
    if max_len < 2:
        raise ParameterError("max_len", "must be at least 2 (one attribute value and the low-score item)")
    sc = pd.to_numeric(data[score], errors="coerce")
    keep = sc.notna().to_numpy()
    if keep.sum() < 10:
        raise FairvisionError(f"{src}: only {int(keep.sum())} samples with a score in {score!r}; need at least 10")
    df = data.loc[keep]
    low, cut = low_score_flags(sc.to_numpy()[keep], low_quantile=low_quantile, low_threshold=low_threshold,
                               higher_is_better=higher_is_better)
    x, names = transaction_matrix(df, list(attributes), n_bins=n_bins, source=src)
    x = np.column_stack([x, low])
    names = names + [LOW_ITEM]
    n = x.shape[0]
    n_low = int(low.sum())
    itemsets = fpgrowth(x, min_support, max_len=max_len, item_names=names)
    antecedents = itemsets[[LOW_ITEM not in s and len(s) <= max_len - 1 for s in itemsets["itemsets"]]]
    n_tested = len(antecedents)
    if n_low == 0 or n_low == n or n_tested == 0:
        rules = pd.DataFrame(columns=RULE_COLUMNS)
    else:
        pos = {nm: j for j, nm in enumerate(names)}
        test = _fisher_tests(x, pos, antecedents, n_low, settings.correction)
        ar = association_rules(itemsets, consequent=[LOW_ITEM], min_confidence=min_confidence)
        ar = ar[(ar["lift"].to_numpy() >= min_lift) & np.array([len(a) <= max_len - 1 for a in ar["antecedent"]], bool)]
        rules = _rule_table(ar, test, x, pos, low, settings)
    rules = rules.reset_index(drop=True)
    rules.index = pd.RangeIndex(1, len(rules) + 1, name="rank")
    return PatternResult(rules=rules, score=score, threshold=cut, higher_is_better=higher_is_better,
                         base_rate=n_low / n, n_samples=n, n_low=n_low, n_tested=n_tested, min_support=min_support,
                         max_len=max_len, settings=settings, attributes=list(attributes))


def _fisher_tests(x: np.ndarray, pos: dict, antecedents: pd.DataFrame, n_low: int, correction: str) -> dict:
    """One-sided Fisher exact test of every frequent antecedent A (the whole family), corrected over the family:
    antecedent -> ``(pvalue, pvalue_adjusted)``."""
    n = x.shape[0]
    n_a = antecedents["count"].to_numpy()
    k_a = np.array([int(np.count_nonzero(x[:, [pos[i] for i in s] + [pos[LOW_ITEM]]].all(axis=1)))
                    for s in antecedents["itemsets"]])
    pvals = _st.hypergeom.sf(k_a - 1, n, n_low, n_a)
    padj = adjust_pvalues(pvals, correction)
    return {s: (p, q) for s, p, q in zip(antecedents["itemsets"], pvals, padj)}


def _rule_table(ar: pd.DataFrame, test: dict, x: np.ndarray, pos: dict, low: np.ndarray,
                settings: AuditSettings) -> pd.DataFrame:
    """The reported rules with their tests (:data:`RULE_COLUMNS`), ranked by lift, then support."""
    rows = []
    for a, s, cf, lf, cnt, acnt in ar[["antecedent", "support", "confidence", "lift", "count", "antecedent_count"]].itertuples(index=False):
        p, q = test[a]
        ordered = tuple(sorted(a, key=lambda t: (str(t[0]), str(t[1]))))
        prod_p = _productivity_pvalue(x, pos, a, low) if len(a) > 1 else np.nan
        rows.append((items_label(a), ordered, s, cf, lf, int(cnt), int(acnt), p, q, prod_p, False))
    rules = pd.DataFrame(rows, columns=RULE_COLUMNS)
    if len(rules):
        # productivity of multi-item rules, corrected over those rules; single items: the Fisher test itself
        prod_adj = adjust_pvalues(rules["pvalue_productive"].to_numpy(dtype=float), settings.correction)
        rules["pvalue_productive"] = np.where(np.isnan(prod_adj), rules["pvalue_adjusted"], prod_adj)
        rules["significant"] = (rules["pvalue_adjusted"] < settings.alpha) & (rules["pvalue_productive"] < settings.alpha)
        rules = rules.sort_values(["lift", "support", "items"], ascending=[False, False, True], kind="mergesort")
    return rules


def _productivity_pvalue(x: np.ndarray, pos: dict, antecedent, low: np.ndarray) -> float:
    """Largest one-sided Fisher p-value of ``A -> low`` against each immediate generalisation.

    For every item ``i`` of ``A`` the samples matching ``A - {i}`` are split
    into those that also have ``i`` and those that do not; the rule is
    *productive* (Webb 2007, "Discovering significant patterns") when low
    scores are more frequent with ``i`` in every such split. A single item's
    generalisation is the empty rule, i.e. the Fisher test against all other
    samples. Returns the maximum p-value over the items.
    """
    items = list(antecedent)
    worst = 0.0
    for i in items:
        rest = [pos[j] for j in items if j != i]
        base = x[:, rest].all(axis=1) if rest else np.ones(x.shape[0], bool)
        has = base & x[:, pos[i]]
        hasnt = base & ~x[:, pos[i]]
        k, n_has = int(np.count_nonzero(has & low)), int(np.count_nonzero(has))
        k_tot, n_tot = k + int(np.count_nonzero(hasnt & low)), n_has + int(np.count_nonzero(hasnt))
        worst = max(worst, float(_st.hypergeom.sf(k - 1, n_tot, k_tot, n_has)))
    return worst


def _match(series: pd.Series, value) -> np.ndarray:
    if value == MISSING:
        return series.isna().to_numpy()
    if isinstance(value, pd.Interval):
        v = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            above = v >= value.left if value.closed_left else v > value.left
            below = v <= value.right if value.closed_right else v < value.right
        return above & below
    return (series.astype(object) == value).to_numpy()


def rule_mask(data: pd.DataFrame, items: Sequence[tuple[Hashable, object]]) -> pd.Series:
    """Boolean mask of the samples that match all ``(attribute, value)`` items of a rule.

    Interval values (binned numeric attributes) match ``lo < x <= hi``;
    ``"(missing)"`` matches a missing value. Usable as a new group definition.
    """
    m = np.ones(len(data), bool)
    for attr, value in items:
        if attr == LOW_ITEM[0]:
            continue
        if attr not in data.columns:
            raise ColumnError(f"rule item names column {attr!r}, which the table lacks")
        m &= _match(data[attr], value)
    return pd.Series(m, index=data.index, name=items_label(items))


def add_rule_attribute(data: pd.DataFrame, items: Sequence[tuple[Hashable, object]], name: str = "error_pattern",
                       *, labels: tuple[str, str] = ("matches", "other")) -> pd.DataFrame:
    """A copy of ``data`` with a categorical column ``name``: ``matches`` where the rule's items hold, else ``other``."""
    if name in data.columns:
        raise ColumnError(f"column {name!r} already exists; choose another name for the rule attribute")
    out = data.copy()
    m = rule_mask(data, items).to_numpy()
    out[name] = pd.Categorical(np.where(m, labels[0], labels[1]), categories=list(labels))
    return out

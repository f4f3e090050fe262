"""Classifier audit: rates by group and intersection and the fairness criteria practitioners expect.

From a samples table with the true and predicted class of every sample (and optionally a score), for every
attribute and intersection (:func:`fairvision.groups.intersections`):

* per group: count, selection rate, TPR, FPR, FNR, TNR, precision, NPV, accuracy and balanced accuracy, each
  with a percentile CI from the cluster bootstrap over subjects (one draw of per-cell counts for every attribute
  set, :func:`fairvision.stats.rates.confusion_replicates`);
* criteria (fairlearn's names and definitions): demographic parity, equalized odds and equal opportunity
  differences and ratios, disparate impact with the four-fifths rule, predictive parity; between the extreme
  groups, or against a chosen reference group (aequitas);
* each group against the rest for the rates the criteria compare, with the subject-level test of
  :mod:`fairvision.stats.versus_rest`, corrected within each attribute set; groups below ``min_subjects``
  are reported, not tested;
* with a score: ROC AUC per group and a threshold sweep with the thresholds at which each criterion holds;
* more than two classes: every class one-vs-rest, plus the recall matrix's ID and OD (docs/METHODS.md §6.4).

See docs/METHODS.md §6.6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings, SettingsView
from fairvision.errors import FairvisionError, ParameterError
from fairvision.groups import Intersection, cell_counts, intersections, resolve_attributes, subject_codes
from fairvision.io.scores import check_predicted_classes, class_labels
from fairvision.io.validate import empty_cells, finite_values, require_columns
from fairvision.schema import Attribute, Schema
from fairvision.stats.clustered import group_vs_rest_design_effect
from fairvision.stats.multiclass import ODResult, overall_disparity_ci
from fairvision.stats.rates import (CRITERIA, RATES, confusion_cells, confusion_replicates, criteria, default_thresholds,
                                    one_vs_rest, rate_gap, rates_from_counts, roc_auc_by_group, threshold_sweep)
from fairvision.stats.resample import percentile_ci
from fairvision.stats.versus_rest import adjust_group_tests, count_flagged, group_vs_rest_pvalue

#: the rates each group is tested on against the rest (the ones the criteria compare)
TESTED_RATES = ("selection_rate", "tpr", "fpr", "precision")
#: positive class when none is given, by the set of class labels
_POSITIVES = {frozenset({"0", "1"}): "1", frozenset({"False", "True"}): "True", frozenset({"false", "true"}): "true",
              frozenset({"no", "yes"}): "yes", frozenset({"-1", "1"}): "1"}


@dataclass(frozen=True)
class ClassifierOptions:
    """Options of the classifier audit (docs/METHODS.md §6.6).

    Parameters
    ----------
    positive : str, optional
        The positive (favourable, "selected") class of a binary classifier; default ``1``, ``True`` or ``yes``
        when the classes are 0/1, False/True or no/yes. With more than two classes every class is scored one
        against the rest and this is ignored.
    reference : mapping of str to str, optional
        Attribute -> reference group (aequitas): criteria compare every group with it; an intersection's
        reference is the combination of its attributes' references (extreme groups when one is missing).
    tolerance : float
        A difference criterion holds when it is at most this (default 0.1).
    four_fifths : float
        A ratio criterion holds when it is at least this; disparate impact below it breaks the four-fifths rule.
    n_thresholds : int
        Thresholds of the sweep (quantiles of the scores).
    """

    positive: str | None = None
    reference: Mapping[str, str] | None = None
    tolerance: float = 0.1
    four_fifths: float = 0.8
    n_thresholds: int = 101

    def __post_init__(self) -> None:
        if not (isinstance(self.tolerance, (int, float)) and 0 <= self.tolerance <= 1):
            raise ParameterError("tolerance", f"must be between 0 and 1, not {self.tolerance!r}")
        if not (isinstance(self.four_fifths, (int, float)) and 0 < self.four_fifths <= 1):
            raise ParameterError("four_fifths", f"must be in (0, 1], not {self.four_fifths!r}")
        if not (isinstance(self.n_thresholds, int) and self.n_thresholds >= 2):
            raise ParameterError("n_thresholds", f"must be a whole number of at least 2, not {self.n_thresholds!r}")

    def holds(self, criterion: str, value: float) -> bool:
        """Whether a criterion's value is within the tolerance (difference) or the four-fifths bound (ratio)."""
        kind = CRITERIA[criterion][0]
        return bool(value <= self.tolerance) if kind == "difference" else bool(value >= self.four_fifths)


@dataclass
class ClassifierAuditResult(SettingsView):
    """Everything the classifier audit found (docs/METHODS.md §6.6).

    Attributes
    ----------
    rates : DataFrame
        One row per attribute set, class and group: ``intersection``, ``group``, ``class``, ``n_samples``,
        ``n_subjects``, ``too_small``, ``tp``, ``fp``, ``fn``, ``tn``, every rate of
        :data:`~fairvision.stats.rates.RATES` with ``<rate>_ci_low`` and ``<rate>_ci_high``.
    criteria : DataFrame
        One row per attribute set, class and criterion: ``estimate``, ``ci_low``, ``ci_high``, ``holds``,
        ``rate`` (the rate that decides it), ``low_group`` and ``high_group`` (or the reference and the group
        farthest from it), ``reference``, ``n_compared``.
    tests : DataFrame
        Each group against the rest per class and tested rate: ``estimate``, ``rest``, ``statistic``,
        ``pvalue``, ``pvalue_adjusted`` (within the attribute set), ``flagged``.
    auc, sweep, thresholds : DataFrame
        With a score: ROC AUC per group; rates per group and criteria at every threshold; per criterion the
        thresholds at which it holds.
    od : dict
        Attribute set -> :class:`~fairvision.stats.multiclass.ODResult` (more than two classes).
    coverage : Coverage
        Samples left out (no true class, no predicted class, no score).
    """

    attributes: list[str]
    classes: list[str]
    positive: str | None
    options: ClassifierOptions
    settings: AuditSettings
    n_samples: int
    n_subjects: int
    subject_col: str | None
    intersections: list[str] = field(default_factory=list)
    rates: pd.DataFrame = field(default_factory=pd.DataFrame)
    criteria: pd.DataFrame = field(default_factory=pd.DataFrame)
    tests: pd.DataFrame = field(default_factory=pd.DataFrame)
    auc: pd.DataFrame = field(default_factory=pd.DataFrame)
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)
    thresholds: pd.DataFrame = field(default_factory=pd.DataFrame)
    od: dict = field(default_factory=dict)
    coverage: Coverage | None = None

    @property
    def binary(self) -> bool:
        return self.positive is not None

    @property
    def n_left_out(self) -> int:
        return self.coverage.n_left_out if self.coverage is not None else 0

    @property
    def n_used(self) -> int:
        return self.n_samples - self.n_left_out

    def to_frame(self) -> pd.DataFrame:
        """The rates of every group (the ``rates`` table)."""
        return self.rates

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §6.6).

        Every criterion of :data:`~fairvision.stats.rates.CRITERIA` per attribute set as ``<criterion>.<set>``
        (with ``.ci_low`` and ``.ci_high``; with more than two classes ``<criterion>.<set>.<class>``) and over
        all sets as ``<criterion>`` (the largest difference, the smallest ratio); ``four_fifths_violations``
        (attribute sets and classes whose disparate impact is below ``four_fifths``); ``flagged`` and
        ``flagged.<set>`` (tests of a group's rate against the rest's that are significant after correction, a
        two-group attribute's one test counted once); with a score
        ``auc.min``, ``auc_gap`` and ``auc_gap.<set>``; with more than two classes ``od`` and ``od.<set>``.
        """
        q: dict[str, float] = {}
        for _, row in self.criteria.iterrows():
            key = f"{row['criterion']}.{quantity_key(row['intersection'])}"
            if not self.binary:
                key += f".{row['class']}"
            q[key], q[key + ".ci_low"], q[key + ".ci_high"] = (float(row["estimate"]), float(row["ci_low"]),
                                                               float(row["ci_high"]))
        for crit, (kind, _) in CRITERIA.items():
            vals = self.criteria.loc[self.criteria["criterion"] == crit, "estimate"].astype(float).dropna() \
                if len(self.criteria) else pd.Series(dtype=float)
            q[crit] = float((vals.max() if kind == "difference" else vals.min())) if len(vals) else float("nan")
        di = self.criteria[self.criteria["criterion"] == "disparate_impact"] if len(self.criteria) else self.criteria
        q["four_fifths_violations"] = float((di["estimate"].astype(float) < self.options.four_fifths).sum()) if len(di) else 0.0
        q["flagged"] = float(count_flagged(self.tests))
        for inter in self.intersections:
            part = self.tests[self.tests["intersection"] == inter] if len(self.tests) else self.tests
            q[f"flagged.{quantity_key(inter)}"] = float(count_flagged(part))
        if len(self.auc):
            judged = self.auc[~self.auc["too_small"].astype(bool)]
            q["auc.min"] = float(judged["auc"].min()) if judged["auc"].notna().any() else float("nan")
            gaps = []
            for inter, t in judged.groupby("intersection", sort=False):
                gap = float(t["auc"].max() - t["auc"].min()) if t["auc"].notna().sum() >= 2 else float("nan")
                q[f"auc_gap.{quantity_key(inter)}"] = gap
                gaps.append(gap)
            finite = [g for g in gaps if not math.isnan(g)]
            q["auc_gap"] = max(finite) if finite else float("nan")
        for inter, res in self.od.items():
            q[f"od.{quantity_key(inter)}"] = res.estimate
        if self.od:
            ods = [r.estimate for r in self.od.values() if not math.isnan(r.estimate)]
            q["od"] = max(ods) if ods else float("nan")
        return q


def audit_classifier(
    data: pd.DataFrame,
    attributes: Sequence[Attribute | str],
    *,
    true_col: str = "y_true",
    pred_col: str = "y_pred",
    score_col: str | None = None,
    subject_col: str | None = "subject_id",
    max_k: int = 1,
    options: ClassifierOptions | None = None,
    settings: AuditSettings | None = None,
    schema: Schema | None = None,
    source: str = "samples",
) -> ClassifierAuditResult:
    """Rates by group and intersection, fairness criteria with subject-bootstrap CIs, tests and a threshold sweep.

    Parameters
    ----------
    data : pandas.DataFrame
        One row per sample: attribute columns, the true and predicted class, optionally a score and a subject.
    attributes : sequence of Attribute or str
        Attributes that define the groups (names use ``schema`` when given).
    true_col, pred_col : str
        True and predicted class columns (compared as text: 1, 1.0 and "1" are one class).
    score_col : str, optional
        Score of the positive class (binary only): adds ROC AUC per group and the threshold sweep.
    subject_col : str or None
        Subject column; the bootstrap resamples subjects. Absent or None: every sample is its own subject.
    max_k : int
        Largest intersection size.
    options : ClassifierOptions, optional
        Positive class, reference groups, tolerance, four-fifths bound, sweep size.
    settings : AuditSettings, optional
        ``n_boot``, ``level``, ``seed`` (the bootstrap), ``min_subjects`` (smaller groups are reported, not
        compared or tested), ``correction`` and ``alpha`` (the tests).
    schema : Schema, optional
    source : str
        Name of the table in error messages.

    Returns
    -------
    ClassifierAuditResult
    """
    settings = settings or DEFAULT_SETTINGS
    options = options or ClassifierOptions()
    if not attributes:
        raise ParameterError("attributes", "is empty: give at least one attribute")
    attrs = resolve_attributes(attributes, schema)
    require_columns(data, [true_col], source=source, what="true class column")
    require_columns(data, [pred_col], source=source, what="predicted class column")
    score = finite_values(data, score_col, source=source, what="score column") if score_col is not None else None
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            require_columns(data, [subject_col], source=source, what="subject column")
        subject_col = None
    known = check_predicted_classes(data, pred_col, data, true_col, schema=schema, source=source)
    ok, why = _left_out(data, true_col, pred_col, score_col, score)
    coverage = audit_coverage(data, ok, attrs, step="classification", settings=settings, reasons=why, unit="samples")
    used = data.loc[ok].reset_index(drop=True)
    if not len(used):
        raise FairvisionError(f"{source}: no sample has both a true and a predicted class"
                              + (" and a score" if score_col else ""))
    y_true, y_pred = class_labels(used[true_col]), class_labels(used[pred_col])
    classes = sorted(known | set(y_pred.tolist()))
    positive = _positive_class(classes, options.positive, source=source, true_col=true_col)
    if positive is not None and positive not in classes:
        classes = sorted(classes + [positive])
    if score_col is not None and positive is None:
        raise ParameterError("score_col", f"needs a binary classifier; {true_col!r} has {len(classes)} classes")
    lookup = np.array(classes, dtype=object)
    t_codes = np.searchsorted(lookup, y_true)
    p_codes = np.searchsorted(lookup, y_pred)
    subjects = subject_codes(used, subject_col, source=source, rows_as_subjects=True)
    inters = intersections(used, attrs, max(1, int(max_k)), source=source)
    res = ClassifierAuditResult(attributes=[a.name for a in attrs], classes=classes, positive=positive, options=options,
                                settings=settings, n_samples=len(data), n_subjects=int(subjects.max()) + 1,
                                subject_col=subject_col, intersections=[i.name for i in inters], coverage=coverage)
    C = len(classes)
    scored = [classes.index(positive)] if positive is not None else list(range(C))
    # one bootstrap draw of the confusion counts of every attribute set (joint replicates)
    offsets = np.cumsum([0] + [i.n_cells * C * C for i in inters])
    cells = np.concatenate([confusion_cells(i.codes, t_codes[i.rows], p_codes[i.rows], C) + o
                            for i, o in zip(inters, offsets)])
    rows = np.concatenate([i.rows for i in inters])
    reps = confusion_replicates(rows, cells, int(offsets[-1]), len(used), subjects, n_boot=settings.n_boot,
                                seed=settings.seed)
    point = np.bincount(cells, minlength=int(offsets[-1])).astype(float)
    rate_parts, crit_parts, test_parts = [], [], []
    for inter, lo in zip(inters, offsets):
        G = inter.n_cells
        hi = lo + G * C * C
        conf, conf_reps = point[lo:hi].reshape(G, C, C), reps[:, lo:hi].reshape(-1, G, C, C)
        n_samp, n_subj = cell_counts(inter, subjects)
        judged = (n_subj >= settings.min_subjects) & (n_samp > 0)
        labels = inter.display_labels()
        ref = _reference_code(inter, options.reference)
        for k in scored:
            counts, rep_counts = one_vs_rest(conf, k), one_vs_rest(conf_reps, k)
            est, rep = rates_from_counts(*counts), rates_from_counts(*rep_counts)
            rate_parts.append(_rate_table(inter, labels, classes[k], counts, est, rep, n_samp, n_subj, judged,
                                          settings.level))
            crit_parts.append(_criteria_table(inter, labels, classes[k], est, rep, judged, ref, options,
                                              settings.level))
        test_parts.append(_group_tests(inter, labels, t_codes, p_codes, scored, classes, subjects, judged, n_samp,
                                       settings))
    res.rates = pd.concat(rate_parts, ignore_index=True)
    res.criteria = pd.concat(crit_parts, ignore_index=True)
    res.tests = pd.concat(test_parts, ignore_index=True) if test_parts else pd.DataFrame()
    if score is not None:
        pos = t_codes == classes.index(positive)
        _score_analysis(res, inters, score[ok], pos, subjects, settings, options)
    if positive is None:
        res.od = _od(inters, y_true, y_pred, subjects, settings)
    return res


def _left_out(data, true_col, pred_col, score_col, score) -> tuple[np.ndarray, np.ndarray]:
    """Samples that enter the audit, and why the others do not (joined with " and ")."""
    reason = np.full(len(data), "", dtype=object)
    masks = [(empty_cells(data[true_col]), "no true class"), (empty_cells(data[pred_col]), "no predicted class")]
    if score is not None:
        masks.append((np.isnan(score), "no score"))
    for mask, text in masks:
        reason[mask] = np.where(reason[mask] == "", text, reason[mask] + " and " + text)
    ok = reason == ""
    return ok, np.where(ok, None, reason)


def _positive_class(classes: list[str], positive: str | None, *, source: str, true_col: str) -> str | None:
    """The positive class of a binary classifier; None with more than two classes."""
    if positive is not None:
        positive = class_labels(pd.Series([positive], dtype=object))[0]
        if len(classes) > 2:
            return None
        if positive not in classes and len(classes) == 2:
            raise ParameterError("positive", f"{positive!r} is not a class of {source} column {true_col!r} "
                                             f"({', '.join(classes)})")
        return positive
    if len(classes) > 2:
        return None
    for labels, pos in _POSITIVES.items():
        if set(classes) <= labels:
            return pos
    raise ParameterError("positive", f"is needed: {source} column {true_col!r} has classes {', '.join(classes)}; "
                                     "name the positive (favourable) one")


def _reference_code(inter: Intersection, reference: Mapping[str, str] | None) -> int | None:
    """Group code of the reference of an attribute set (None: compare the extreme groups)."""
    if not reference or any(a not in reference for a in inter.attributes):
        return None
    want = tuple(str(reference[a]) for a in inter.attributes)
    for a, lv, w in zip(inter.attributes, inter.levels, want):
        if w not in lv:
            raise ParameterError("reference", f"names {a}={w}, which is not a group of {a} ({', '.join(lv)})")
    try:
        return inter.labels.index(want)
    except ValueError:
        return None  # an unobserved combination of a large intersection


def _ci(rep: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    if rep.shape[0] == 0:
        shape = rep.shape[1:]
        return np.full(shape, np.nan), np.full(shape, np.nan)
    return percentile_ci(rep, level)


def _rate_table(inter, labels, cls, counts, est, rep, n_samp, n_subj, judged, level) -> pd.DataFrame:
    tp, fp, fn, tn = counts
    out = pd.DataFrame({"intersection": inter.name, "group": labels, "class": cls, "n_samples": n_samp,
                        "n_subjects": n_subj, "too_small": ~judged & (n_samp > 0), "tp": tp, "fp": fp, "fn": fn,
                        "tn": tn})
    for name in RATES:
        lo, hi = _ci(rep[name], level)
        out[name], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = est[name], lo, hi
    return out


def _criteria_table(inter, labels, cls, est, rep, judged, ref, options: ClassifierOptions, level) -> pd.DataFrame:
    point, reps = criteria(est, judged, ref), criteria(rep, judged, ref)
    rows = []
    for crit, (kind, used) in CRITERIA.items():
        lo, hi = _ci(reps[crit], level)
        # the rate that decides the criterion, and its two groups
        gaps = [rate_gap(est[u], judged, ref)[0 if kind == "difference" else 1] for u in used]
        pick = int(np.nanargmax(gaps) if kind == "difference" else np.nanargmin(gaps)) if np.isfinite(gaps).any() else 0
        low, high = _extreme_groups(est[used[pick]], judged, ref, labels)
        value = float(point[crit])
        rows.append({"intersection": inter.name, "class": cls, "criterion": crit, "kind": kind, "estimate": value,
                     "ci_low": float(lo), "ci_high": float(hi),
                     "holds": options.holds(crit, value) if np.isfinite(value) else None, "rate": used[pick],
                     "low_group": low, "high_group": high, "reference": labels[ref] if ref is not None else None,
                     "n_compared": int((judged & ~np.isnan(est[used[pick]])).sum())})
    return pd.DataFrame(rows)


def _extreme_groups(values, judged, ref, labels) -> tuple[str | None, str | None]:
    """The groups with the lowest and highest rate; with a reference, the reference and the farthest group."""
    v = np.where(judged, values, np.nan)
    if np.isnan(v).all():
        return None, None
    if ref is None or np.isnan(v[ref]):
        return str(labels[int(np.nanargmin(v))]), str(labels[int(np.nanargmax(v))])
    far = int(np.nanargmax(np.abs(v - v[ref])))
    a, b = (ref, far) if v[ref] <= v[far] else (far, ref)
    return str(labels[a]), str(labels[b])


def _outcomes(t_codes, p_codes, k):
    """Per tested rate: the 0/1 value and whether the sample counts (its denominator), one-vs-rest for class k."""
    pos_true, pos_pred = t_codes == k, p_codes == k
    ones = np.ones(t_codes.size, bool)
    return {"selection_rate": (pos_pred, ones), "tpr": (pos_pred, pos_true), "fpr": (pos_pred, ~pos_true),
            "precision": (pos_true, pos_pred)}


def _group_tests(inter, labels, t_codes, p_codes, scored, classes, subjects, judged, n_samp,
                 settings: AuditSettings) -> pd.DataFrame:
    """Each group against the rest of its attribute set for every tested rate (docs/METHODS.md §6.6, §12.1)."""
    G = inter.n_cells
    quantities = [(classes[k], name, val, cnt) for k in scored for name, (val, cnt) in _outcomes(t_codes, p_codes, k).items()]
    Q = len(quantities)
    subj = subjects[inter.rows]
    distinct = np.unique(inter.rows)
    r_i, c_i, v_i = [], [], []
    for q, (_, _, val, cnt) in enumerate(quantities):
        v, c = val[inter.rows] & cnt[inter.rows], cnt[inter.rows]
        col = inter.codes * Q + q
        r_i += [subj, subj, subjects[distinct], subjects[distinct]]
        c_i += [col, G * Q + col, np.full(distinct.size, 2 * G * Q + q), np.full(distinct.size, 2 * G * Q + Q + q)]
        v_i += [v, c, (val & cnt)[distinct], cnt[distinct]]
    S = int(subjects.max()) + 1
    vals = np.concatenate(v_i)
    keep = vals != 0  # zeros add nothing to a sparse matrix but its build time
    mat = sparse.csr_matrix((vals[keep].astype(float), (np.concatenate(r_i)[keep], np.concatenate(c_i)[keep])),
                            shape=(S, 2 * G * Q + 2 * Q))
    stat, _ = group_vs_rest_design_effect(mat, G, Q)
    full = np.asarray(mat.sum(axis=0)).ravel()
    sums, cnts = full[:G * Q].reshape(G, Q), full[G * Q:2 * G * Q].reshape(G, Q)
    all_s, all_n = full[2 * G * Q:2 * G * Q + Q], full[2 * G * Q + Q:]
    seed = settings.seed if isinstance(settings.seed, int) else 0
    rows = []
    for g in np.flatnonzero(n_samp > 0):
        for q, (cls, name, _, _) in enumerate(quantities):
            a, b, c, d = sums[g, q], cnts[g, q], all_s[q] - sums[g, q], all_n[q] - cnts[g, q]
            s, p = group_vs_rest_pvalue(a, b, c, d, stat[g, q], seed=seed, too_small=not judged[g])
            with np.errstate(invalid="ignore", divide="ignore"):
                rows.append({"intersection": inter.name, "attribute": inter.name, "group": str(labels[g]),
                             "class": cls, "rate": name, "n_samples": int(n_samp[g]), "too_small": not judged[g],
                             "estimate": a / b if b else np.nan, "rest": c / d if d else np.nan, "statistic": s,
                             "pvalue": p})
    if not rows:
        return pd.DataFrame()
    out = adjust_group_tests(pd.DataFrame(rows), ["class", "rate"], settings.correction)
    out["flagged"] = (out["pvalue_adjusted"] < settings.alpha) & ~out["too_small"].astype(bool)
    return out.drop(columns="attribute")


def _score_analysis(res: ClassifierAuditResult, inters, score, pos, subjects, settings: AuditSettings,
                    options: ClassifierOptions) -> None:
    """ROC AUC per group, the threshold sweep and the thresholds at which each criterion holds."""
    thresholds = default_thresholds(score, options.n_thresholds)
    aucs, sweeps, holds = [], [], []
    for inter in inters:
        G = inter.n_cells
        n_samp, n_subj = cell_counts(inter, subjects)
        judged = (n_subj >= settings.min_subjects) & (n_samp > 0)
        labels = inter.display_labels()
        auc, n_pos, n_neg = roc_auc_by_group(score[inter.rows], pos[inter.rows], inter.codes, G)
        aucs.append(pd.DataFrame({"intersection": inter.name, "group": labels, "n_samples": n_samp, "n_positive": n_pos,
                                  "n_negative": n_neg, "too_small": ~judged, "auc": auc})[n_samp > 0])
        sw = threshold_sweep(score[inter.rows], pos[inter.rows], inter.codes, G, thresholds)
        rates = rates_from_counts(sw["tp"], sw["fp"], sw["fn"], sw["tn"])  # (G, T)
        ref = _reference_code(inter, options.reference)
        crit = criteria({k: v.T for k, v in rates.items()}, judged, ref)  # (T,)
        selected = (sw["tp"] + sw["fp"]).sum(axis=0)
        informative = (selected > 0) & (selected < n_samp.sum())  # not everyone, not no one selected
        for g in np.flatnonzero(n_samp > 0):
            sweeps.append(pd.DataFrame({"intersection": inter.name, "group": str(labels[g]), "threshold": thresholds,
                                        **{k: rates[k][g] for k in ("selection_rate", "tpr", "fpr", "precision")}}))
        for name, values in crit.items():
            ok = np.array([np.isfinite(v) and options.holds(name, v) for v in values])
            holds.append({"intersection": inter.name, "criterion": name, "n_thresholds": int(ok.sum()),
                          "share": float(ok.mean()), "lowest": float(thresholds[ok].min()) if ok.any() else np.nan,
                          "highest": float(thresholds[ok].max()) if ok.any() else np.nan,
                          "holds_at": _ranges(thresholds, ok), "best_threshold": _best(thresholds, np.where(informative, values, np.nan), name)})
    res.auc = pd.concat(aucs, ignore_index=True)
    res.sweep = pd.concat(sweeps, ignore_index=True) if sweeps else pd.DataFrame()
    res.thresholds = pd.DataFrame(holds)


def _ranges(thresholds: np.ndarray, ok: np.ndarray) -> str:
    """``"0.1–0.35, 0.7"``: the runs of consecutive thresholds at which a criterion holds."""
    if not ok.any():
        return "none"
    edges = np.flatnonzero(np.diff(np.r_[0, ok.astype(int), 0]))
    parts = [(thresholds[a], thresholds[b - 1]) for a, b in zip(edges[::2], edges[1::2])]
    return ", ".join(f"{a:.3g}" if a == b else f"{a:.3g}–{b:.3g}" for a, b in parts)


def _best(thresholds: np.ndarray, values: np.ndarray, name: str) -> float:
    """The threshold with the fairest value of a criterion (smallest difference, largest ratio); NaN values (the
    thresholds that select everyone or no one) are skipped."""
    if not np.isfinite(values).any():
        return float("nan")
    i = np.nanargmin(values) if CRITERIA[name][0] == "difference" else np.nanargmax(values)
    return float(thresholds[int(i)])


def _od(inters, y_true, y_pred, subjects, settings: AuditSettings) -> dict[str, ODResult]:
    """ID and OD of the recall matrix of every attribute set over its judged groups (docs/METHODS.md §6.4)."""
    out = {}
    for inter in inters:
        n_samp, n_subj = cell_counts(inter, subjects)
        big = (n_subj >= settings.min_subjects)[inter.codes]
        if len(np.unique(inter.codes[big])) < 2:
            continue
        rows = inter.rows[big]
        out[inter.name] = overall_disparity_ci(y_true[rows], y_pred[rows], inter.display_labels()[inter.codes[big]],
                                               subjects=subjects[rows], n_boot=settings.n_boot, level=settings.level,
                                               seed=settings.seed)
    return out

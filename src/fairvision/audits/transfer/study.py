"""The study table of a bias-transfer study (docs/METHODS.md §11.2, §11.3).

For every training subset of a :class:`~fairvision.audits.transfer.design.SubsetDesign`
whose model's predictions on the common test set are given: the dataset
metrics of the subset (NSD, NMI) beside the model's accuracy, its overall
disparity OD by every attribute and its ID per class, each with a percentile
CI from one cluster bootstrap over the test subjects
(:func:`fairvision.stats.multiclass.disparity_replicates`); and every pair of
subsets compared on OD with the same resamples (a paired bootstrap,
:func:`fairvision.stats.paired.paired_difference_test`), the p-values adjusted
across the pairs of each attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import AuditSettings, SettingsView
from fairvision.audits.transfer.design import SubsetDesign
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.groups import memberships, subject_codes
from fairvision.io.scores import check_known_classes, class_labels, require_classes
from fairvision.io.tables import SAMPLE_ID, read_table
from fairvision.io.validate import check_unique_ids, empty_cells, require_columns
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.multiclass import disparity_replicates
from fairvision.stats.paired import paired_difference_test
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci

PRED_COL = "prediction"
#: settings of :func:`audit_transfer` when given none: every test group with a subject enters OD
DEFAULTS = AuditSettings(min_subjects=1)
#: columns of :attr:`TransferStudyResult.comparisons`
COMPARISON_COLUMNS = ["attribute", "a", "b", "od_a", "od_b", "estimate", "ci_low", "ci_high", "level", "statistic",
                      "pvalue", "pvalue_adjusted", "significant"]
_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq", ".json", ".jsonl")


@dataclass
class TransferStudyResult(SettingsView):
    """Everything :func:`audit_transfer` found. Tables are tidy DataFrames.

    Attributes
    ----------
    design : SubsetDesign
        The subsets and their dataset metrics (``design.summary``: Table 1).
    subsets : list of str
        Subsets with predictions, in catalog order.
    accuracy : DataFrame
        Indexed by subset: ``estimate``, ``ci_low``, ``ci_high``, ``level``.
    od : DataFrame
        Long: ``subset``, ``attribute``, ``estimate``, ``ci_low``, ``ci_high``, ``level``.
    ids : DataFrame
        Long: ``subset``, ``attribute``, ``class``, ``estimate``, ``ci_low``, ``ci_high``.
    comparisons : DataFrame
        Every pair of subsets per attribute: ``attribute``, ``a``, ``b``,
        ``od_a``, ``od_b``, ``estimate`` (``od_a - od_b``), ``ci_low``,
        ``ci_high``, ``statistic``, ``pvalue``, ``pvalue_adjusted``,
        ``significant``.
    flagged : DataFrame
        Per attribute, a subset whose OD is significantly higher than every
        other subset's: ``attribute``, ``subset``, ``od``, and the smallest of
        its differences with its CI and the largest adjusted p-value.
    test_groups : DataFrame
        Test subjects per attribute group, and whether the group entered OD.
    settings : AuditSettings
        The options of the study (``n_boot``, ``level``, ``seed``, ``correction``, ``alpha``, ``min_subjects``).
    coverage : list of Coverage
        What the study left out, each with its reasons and its test by group (docs/METHODS.md §9.3): first the
        subsets without predictions (unit ``"subsets"``, tested by subset family); the demo adds its photos
        without a face.
    """

    design: SubsetDesign
    subsets: list[str]
    settings: AuditSettings
    n_test: int
    n_test_subjects: int
    accuracy: pd.DataFrame = field(default_factory=pd.DataFrame)
    od: pd.DataFrame = field(default_factory=pd.DataFrame)
    ids: pd.DataFrame = field(default_factory=pd.DataFrame)
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)
    flagged: pd.DataFrame = field(default_factory=pd.DataFrame)
    test_groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    untrained: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    coverage: list[Coverage] = field(default_factory=list)

    @property
    def left_out(self) -> list[Coverage]:
        """The coverage results that left something out (for the report and the terminal)."""
        return [c for c in self.coverage if c.n_left_out]

    @property
    def attributes(self) -> list[str]:
        return list(self.design.attributes)

    def to_frame(self) -> pd.DataFrame:
        """The study table: one row per subset with its dataset metrics beside the model's accuracy and OD
        (with CIs), in the layout of the paper's Tables 1 and 2."""
        cat = self.design.summary.set_index("subset")
        rows = []
        for s in self.subsets:
            c = cat.loc[s]
            row = {"subset": s, "family": c["family"], "attribute": c["attribute"], "group": c["group"],
                   "size": int(c["size"])}
            for a in self.attributes:
                row[f"nsd.{a}"] = c[f"nsd.{a}"]
                row[f"nmi.{a}"] = c[f"nmi.{a}"]
            acc = self.accuracy.loc[s]
            row.update({"accuracy": acc["estimate"], "accuracy.ci_low": acc["ci_low"], "accuracy.ci_high": acc["ci_high"]})
            for a in self.attributes:
                o = self.od[(self.od["subset"] == s) & (self.od["attribute"] == a)]
                if len(o):
                    row.update({f"od.{a}": o["estimate"].iloc[0], f"od.{a}.ci_low": o["ci_low"].iloc[0],
                                f"od.{a}.ci_high": o["ci_high"].iloc[0]})
            rows.append(row)
        return pd.DataFrame(rows)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``: ``od.<subset>.<attribute>``, ``accuracy.<subset>``,
        ``max_od.<attribute>``, ``max_od``, ``n_significant_pairs`` and ``n_flagged``."""
        q: dict[str, float] = {}
        for _, r in self.od.iterrows():
            q[f"od.{r['subset']}.{r['attribute']}"] = float(r["estimate"])
        for s, r in self.accuracy.iterrows():
            q[f"accuracy.{s}"] = float(r["estimate"])
        for a in self.attributes:
            v = self.od.loc[self.od["attribute"] == a, "estimate"]
            q[f"max_od.{a}"] = float(v.max()) if len(v) else float("nan")
        q["max_od"] = float(self.od["estimate"].max()) if len(self.od) else float("nan")
        q["n_significant_pairs"] = float(self.comparisons["significant"].sum()) if len(self.comparisons) else 0.0
        q["n_flagged"] = float(len(self.flagged))
        return q


def read_predictions(folder: str | Path, design: SubsetDesign, *, pred_col: str = PRED_COL) -> dict[str, pd.DataFrame]:
    """The prediction tables in ``folder``: one file per subset, named after it (``<subset>.csv``, ...),
    with ``sample_id`` and ``pred_col``. A file named after no subset is an error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such folder (give a folder with one prediction table per subset)")
    known = set(design.subsets)
    out: dict[str, pd.DataFrame] = {}
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or not p.is_file() or p.suffix.lower() not in _SUFFIXES:
            continue
        if p.stem not in known:
            raise InputFileError(f"{p}: no subset named {p.stem!r} in the design (known: {', '.join(sorted(known))})")
        if p.stem in out:
            raise InputFileError(f"{p}: a second prediction table for subset {p.stem!r}")
        out[p.stem] = read_table(p)
    if not out:
        raise InputFileError(f"{folder}: no prediction tables (<subset>.csv with sample_id and {pred_col})")
    return out


def _align(pred: pd.DataFrame, test_ids: pd.Series, pred_col: str, source: str, known: set[str],
           label: str) -> np.ndarray:
    """One subset's predictions in test-set order; missing, repeated, empty or unknown predictions are errors."""
    require_columns(pred, [pred_col], source=source, what="prediction column")
    check_unique_ids(pred, SAMPLE_ID, source)
    ids = pred[SAMPLE_ID].astype(str)
    empty = empty_cells(pred[pred_col])
    if empty.any():
        row = int(np.flatnonzero(empty)[0])
        raise ColumnError(f"{source}: row {row + 1}: empty {pred_col!r}")
    check_known_classes(pred, pred_col, known, source=source, of=f"the classes of the label {label!r}",
                        hint="predictions must use the label's classes as the test set spells them")
    lookup = pd.Series(class_labels(pred[pred_col]), index=ids.to_numpy())
    missing = ~test_ids.isin(lookup.index).to_numpy()
    if missing.any():
        raise ColumnError(f"{source}: no prediction for test sample {test_ids.iloc[int(np.flatnonzero(missing)[0])]!r} "
                          f"({int(missing.sum())} of {len(test_ids)} test samples missing)")
    return lookup.loc[test_ids.to_numpy()].to_numpy(dtype=object)


def audit_transfer(
    design: SubsetDesign,
    predictions: Mapping[str, pd.DataFrame],
    *,
    pred_col: str = PRED_COL,
    settings: AuditSettings | None = None,
    skipped: Mapping[str, str] | None = None,
) -> TransferStudyResult:
    """Set every subset's dataset bias beside its model's bias on the common test set (docs/METHODS.md §11.2, §11.3).

    Parameters
    ----------
    design : SubsetDesign
        From :func:`~fairvision.audits.transfer.design.design_subsets` or
        :func:`~fairvision.audits.transfer.design.read_design`.
    predictions : mapping of str to DataFrame
        Subset name -> the predictions of the model trained on it for every
        test sample (``sample_id`` and ``pred_col``).
    pred_col : str
        Column of the predicted class.
    settings : AuditSettings, optional
        ``n_boot`` (at least 1), ``level`` and ``seed`` of the bootstrap over the test subjects;
        ``correction`` across the pairs of subsets, per attribute, and ``alpha`` of the adjusted p-values for
        ``significant``; test groups with fewer than ``min_subjects`` subjects are left out of OD (and
        listed). Default :data:`DEFAULTS` (``min_subjects`` 1).
    skipped : mapping of str to str, optional
        Why a subset has no predictions (subset -> reason), for the coverage of the subsets; a subset without
        predictions and without a reason here counts as ``"no prediction table"``.

    Returns
    -------
    TransferStudyResult
    """
    settings = settings or DEFAULTS
    settings.require_bootstrap("the study needs bootstrap replicates")
    unknown = [s for s in predictions if s not in design.subsets]
    if unknown:
        raise FairvisionError(f"predictions for {unknown[0]!r}, which is not a subset of the design")
    names = [s for s in design.catalog["subset"] if s in predictions]
    untrained = [s for s in design.catalog["subset"] if s not in predictions]
    test_src = str(design.test.attrs.get("source", "test set"))
    test = design.test.reset_index(drop=True)
    test.attrs["source"] = "test set"
    if len(test) == 0:
        raise FairvisionError("the design has no test set (it was made with a test fraction of 0)")
    label = design.label
    label_col = design.schema[label].source if label in design.schema else label
    require_columns(test, [label_col], source=test_src, what="label column")
    check_unique_ids(test, SAMPLE_ID, test_src)
    require_classes(test, label_col, source=test_src, why="OD and accuracy compare the models' recall of two or more "
                                                          "classes (was the label column chosen right?)")
    y_true = class_labels(test[label_col])
    known = set(y_true.tolist())
    if label in design.schema and design.schema[label].categories is not None:
        known |= set(design.schema[label].categories)
    test_ids = test[SAMPLE_ID].astype(str)
    preds = {s: _align(predictions[s], test_ids, pred_col, str(predictions[s].attrs.get("source", s)), known, label)
             for s in names}
    subj = subject_codes(test, design.subject_col if design.subject_col in test.columns else None, source="test set",
                         rows_as_subjects=True)
    boot = _Bootstrap(subj, cluster_bootstrap_weights(int(subj.max()) + 1, settings.n_boot, settings.seed),
                      settings.level)
    notes: list[str] = []
    acc_rows = [boot.accuracy(s, y_true, preds[s]) for s in names]
    parts = [_attribute_study(a, m, y_true, preds, names, boot, settings, notes)
             for a, m in zip(design.attributes, memberships(test, design.attributes, design.schema, source="test set"))]
    cmp_rows = [p["comparisons"] for p in parts if p["comparisons"] is not None]
    comparisons = pd.concat(cmp_rows, ignore_index=True) if cmp_rows else pd.DataFrame(columns=COMPARISON_COLUMNS)
    if untrained:
        notes.append(f"no predictions for {len(untrained)} subsets (left out of the study table): {', '.join(untrained)}")
    coverage = [_subset_coverage(design, predictions, skipped or {}, settings)]
    return TransferStudyResult(
        design=design, subsets=names, settings=settings, n_test=len(test), n_test_subjects=boot.n_subjects,
        accuracy=pd.DataFrame(acc_rows).set_index("subset"), od=pd.DataFrame([r for p in parts for r in p["od"]]),
        ids=pd.DataFrame([r for p in parts for r in p["id"]]), comparisons=comparisons,
        flagged=pd.DataFrame([p["flag"] for p in parts if p["flag"] is not None]),
        test_groups=pd.DataFrame([r for p in parts for r in p["test_groups"]]), untrained=untrained, notes=notes,
        coverage=coverage,
    )


def _subset_coverage(design: SubsetDesign, predictions: Mapping[str, pd.DataFrame], skipped: Mapping[str, str],
                     settings: AuditSettings) -> Coverage:
    """Which subsets have predictions, why the others have none, and whether that depends on the subset family
    (docs/METHODS.md §9.3)."""
    cat = design.catalog.reset_index(drop=True)
    cat.attrs["source"] = "subset catalog"
    ok = cat["subset"].isin(list(predictions)).to_numpy()
    why = np.array([None if k else skipped.get(s, "no prediction table") for s, k in zip(cat["subset"], ok)],
                   dtype=object)
    return audit_coverage(cat, ok, ["family"], step="prediction step", settings=settings, reasons=why,
                          unit="subsets")


class _Bootstrap:
    """One cluster bootstrap over the test subjects, shared by every subset and attribute (so comparisons of
    subsets are paired)."""

    def __init__(self, subjects: np.ndarray, weights: np.ndarray, level: float):
        self.subjects, self.weights, self.level = subjects, weights, level
        self.n_subjects = int(subjects.max()) + 1
        self.one = np.ones((1, self.n_subjects))

    def accuracy(self, subset: str, y_true: np.ndarray, pred: np.ndarray) -> dict:
        """The accuracy row of one subset's model on the whole test set."""
        ok = np.ones(len(y_true), bool)
        group = np.zeros(len(y_true))
        est = disparity_replicates(y_true, pred, group, self.subjects, self.one)["accuracy"][0]
        reps = disparity_replicates(y_true, pred, group, self.subjects, self.weights)["accuracy"]
        lo, hi = percentile_ci(reps, self.level)
        return {"subset": subset, "estimate": float(est), "ci_low": float(lo), "ci_high": float(hi),
                "level": self.level, "n_samples": int(ok.sum())}

    def disparity(self, y_true, pred, groups, rows):
        """Estimates and bootstrap replicates of OD and ID of one model on the test ``rows``."""
        e = disparity_replicates(y_true[rows], pred[rows], groups, self.subjects[rows], self.one)
        r = disparity_replicates(y_true[rows], pred[rows], groups, self.subjects[rows], self.weights,
                                 classes=e["classes"])
        return e, r


def _attribute_study(a: str, m, y_true: np.ndarray, preds: dict, names: list[str], boot: _Bootstrap,
                     settings: AuditSettings, notes: list[str]) -> dict:
    """OD and ID of every subset's model by attribute ``a``, every pair of subsets compared on OD, the
    flagged subset, and the test groups: ``{"od", "id", "comparisons", "flag", "test_groups"}``."""
    level, min_subjects = settings.level, settings.min_subjects
    out = {"od": [], "id": [], "comparisons": None, "flag": None, "test_groups": []}
    labels = np.asarray(m.categories, dtype=object)
    rows, codes = m.rows, m.codes
    n_subj = np.array([len(np.unique(boot.subjects[rows[codes == g]])) for g in range(len(labels))])
    big = n_subj >= min_subjects
    for g, lab in enumerate(labels):
        out["test_groups"].append({"attribute": a, "group": str(lab), "n_subjects": int(n_subj[g]),
                                   "in_od": bool(big[g] and n_subj[g] > 0)})
    use = big[codes] & (n_subj[codes] > 0)
    rows, codes = rows[use], codes[use]
    if len(np.unique(codes)) < 2:
        notes.append(f"{a}: fewer than two test groups with at least {min_subjects} subjects; no OD by {a}")
        return out
    small = [str(labels[g]) for g in range(len(labels)) if not big[g] and n_subj[g] > 0]
    if small:
        notes.append(f"{a}: test groups with fewer than {min_subjects} subjects left out of OD: {', '.join(small)}")
    grp = labels[codes]
    est, reps = {}, {}
    for s in names:
        e, r = boot.disparity(y_true, preds[s], grp, rows)
        est[s], reps[s] = float(e["od"][0]), r["od"]
        lo, hi = percentile_ci(r["od"], level)
        out["od"].append({"subset": s, "attribute": a, "estimate": est[s], "ci_low": float(lo), "ci_high": float(hi),
                          "level": level, "n_groups": int(len(np.unique(codes)))})
        ilo, ihi = percentile_ci(r["id"], level)
        for k, c in enumerate(e["classes"]):
            out["id"].append({"subset": s, "attribute": a, "class": str(c), "estimate": float(e["id"][0, k]),
                              "ci_low": float(ilo[k]), "ci_high": float(ihi[k]), "level": level})
    pairs = _pair_comparisons(a, names, est, reps, settings)
    if pairs is not None:
        out["comparisons"] = pairs
        flag = _flag_highest(pairs, names)
        if flag is not None:
            out["flag"] = {"attribute": a, **flag}
    return out


def _pair_comparisons(a: str, names: list[str], est: dict, reps: dict, settings: AuditSettings) -> pd.DataFrame | None:
    """Every pair of subsets compared on OD by ``a`` (paired bootstrap), corrected across the pairs."""
    part = []
    for x, y in [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]:  # pairs of subsets
        t = paired_difference_test(est[x], est[y], reps[x], reps[y], level=settings.level)
        part.append({"attribute": a, "a": x, "b": y, "od_a": est[x], "od_b": est[y], "estimate": t.estimate,
                     "ci_low": t.ci_low, "ci_high": t.ci_high, "level": settings.level, "statistic": t.statistic,
                     "pvalue": t.pvalue})
    if not part:
        return None
    pdf = pd.DataFrame(part)
    pdf["pvalue_adjusted"] = adjust_pvalues(pdf["pvalue"].to_numpy(dtype=float), settings.correction)
    pdf["significant"] = (pdf["pvalue_adjusted"] < settings.alpha).to_numpy()
    return pdf


def _flag_highest(pairs: pd.DataFrame, names: list[str]) -> dict | None:
    """The subset whose OD exceeds every other subset's significantly (docs/METHODS.md §11.3), or None."""
    if len(names) < 2:
        return None
    for s in names:
        d = []
        for _, r in pairs.iterrows():
            if r["a"] == s:
                d.append((r["estimate"], r["ci_low"], r["ci_high"], r["pvalue_adjusted"], r["significant"], r["b"], r["od_a"]))
            elif r["b"] == s:
                d.append((-r["estimate"], -r["ci_high"], -r["ci_low"], r["pvalue_adjusted"], r["significant"], r["a"], r["od_b"]))
        if d and all(sig and est > 0 and lo > 0 for est, lo, _, _, sig, _, _ in d):
            closest = min(d, key=lambda t: t[0])
            return {"subset": s, "od": closest[6], "closest": closest[5], "difference": closest[0],
                    "ci_low": closest[1], "ci_high": closest[2], "pvalue_adjusted": max(t[3] for t in d)}
    return None

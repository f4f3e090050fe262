"""Classifier rates by group and the fairness criteria built from them (docs/METHODS.md §6.6).

Everything starts from one confusion matrix per group, counted with ``numpy.bincount`` over the cell number
``group * C * C + true * C + predicted``: the point estimate with unit weights, and every bootstrap replicate at
once from the cluster bootstrap's per-cell counts (:func:`fairvision.stats.resample.bootstrap_counts`), so no
loop runs over groups or replicates. Binary rates of a class ``c`` are one-vs-rest: ``TP`` the samples of ``c``
predicted ``c``, ``FN`` those of ``c`` predicted otherwise, ``FP`` the others predicted ``c``, ``TN`` the rest.

The criteria follow fairlearn's definitions (``demographic_parity_difference`` = largest minus smallest selection
rate, ``equalized_odds_difference`` = the larger of the TPR and FPR differences, ratios smallest over largest), or,
with a reference group, aequitas' (each group against the reference).
"""

from __future__ import annotations

import warnings

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.stats.resample import bootstrap_counts

#: the rates of every group, in table order
RATES = ("selection_rate", "tpr", "fpr", "fnr", "tnr", "precision", "npv", "accuracy", "balanced_accuracy")
#: criterion -> (kind, rates it compares); kind "difference" (0 is fair) or "ratio" (1 is fair)
CRITERIA = {
    "demographic_parity_difference": ("difference", ("selection_rate",)),
    "demographic_parity_ratio": ("ratio", ("selection_rate",)),
    "equalized_odds_difference": ("difference", ("tpr", "fpr")),
    "equalized_odds_ratio": ("ratio", ("tpr", "fpr")),
    "equal_opportunity_difference": ("difference", ("tpr",)),
    "equal_opportunity_ratio": ("ratio", ("tpr",)),
    "disparate_impact": ("ratio", ("selection_rate",)),
    "predictive_parity_difference": ("difference", ("precision",)),
    "predictive_parity_ratio": ("ratio", ("precision",)),
}


def confusion_by_group(codes, true_codes, pred_codes, n_groups: int, n_classes: int) -> np.ndarray:
    """Confusion matrix of every group (docs/METHODS.md §6.6).

    Parameters
    ----------
    codes : int array (n,)
        Group code ``0 .. n_groups-1`` of each entry (a row may appear once per group it belongs to).
    true_codes, pred_codes : int arrays (n,)
        True and predicted class code ``0 .. n_classes-1`` of each entry.
    n_groups, n_classes : int
        G and C.

    Returns
    -------
    numpy.ndarray, shape (G, C, C)
        ``[g, t, p]``: entries of group ``g`` with true class ``t`` predicted ``p``.
    """
    cell = confusion_cells(codes, true_codes, pred_codes, n_classes)
    return np.bincount(cell, minlength=n_groups * n_classes * n_classes).reshape(n_groups, n_classes, n_classes).astype(float)


def confusion_cells(codes, true_codes, pred_codes, n_classes: int) -> np.ndarray:
    """Cell number ``group * C * C + true * C + predicted`` of each entry (docs/METHODS.md §6.6).

    Parameters
    ----------
    codes, true_codes, pred_codes : int arrays (n,)
        Group, true and predicted class codes.
    n_classes : int
        C.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    c = np.int64(n_classes)
    return (np.asarray(codes, np.int64) * c + np.asarray(true_codes, np.int64)) * c + np.asarray(pred_codes, np.int64)


def confusion_replicates(rows, cells, n_cells: int, n_rows: int, subjects, *, n_boot: int, seed=0) -> np.ndarray:
    """Cluster-bootstrap replicates of per-cell confusion counts (docs/METHODS.md §4.2, §6.6).

    Parameters
    ----------
    rows : int array (n,)
        Row of each entry (rows of multi-valued attributes appear once per group).
    cells : int array (n,)
        Cell of each entry (:func:`confusion_cells`, offset per attribute set when several share the draws).
    n_cells : int
        Number of cells.
    n_rows : int
        Rows in the table.
    subjects : int array (n_rows,) or None
        Subject code of every row; None resamples rows.
    n_boot : int
        Replicates.
    seed : int, Generator or None

    Returns
    -------
    numpy.ndarray, shape (n_boot, n_cells)
        Counts of every cell in every replicate: subjects drawn with replacement carry all their rows
        (:func:`fairvision.stats.resample.bootstrap_counts`).
    """
    if n_boot <= 0:
        return np.zeros((0, n_cells))
    return bootstrap_counts(np.asarray(rows, np.int64), np.asarray(cells, np.int64), int(n_cells), int(n_rows),
                            subjects, int(n_boot), seed)


def one_vs_rest(confusion: np.ndarray, positive: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """TP, FP, FN, TN of class ``positive`` against the others, from confusion matrices (docs/METHODS.md §6.6).

    Parameters
    ----------
    confusion : numpy.ndarray, shape (..., C, C)
        ``[..., true, predicted]`` counts.
    positive : int
        Code of the positive class.

    Returns
    -------
    tp, fp, fn, tn : numpy.ndarray, shape (...)
    """
    tp = confusion[..., positive, positive]
    actual = confusion[..., positive, :].sum(axis=-1)
    predicted = confusion[..., :, positive].sum(axis=-1)
    total = confusion.sum(axis=(-2, -1))
    return tp, predicted - tp, actual - tp, total - actual - predicted + tp


def rates_from_counts(tp, fp, fn, tn) -> dict[str, np.ndarray]:
    """Every rate of :data:`RATES` from confusion counts (docs/METHODS.md §6.6).

    Parameters
    ----------
    tp, fp, fn, tn : array_like
        Counts of any (common) shape.

    Returns
    -------
    dict
        Rate name -> array of that shape, plus ``count`` (``tp + fp + fn + tn``). A rate whose denominator is 0
        is NaN (a TPR without positives, a precision without positive predictions); balanced accuracy is the
        mean of TPR and TNR.
    """
    tp, fp, fn, tn = (np.asarray(v, dtype=float) for v in (tp, fp, fn, tn))
    n = tp + fp + fn + tn

    def div(a, b):
        return np.divide(a, b, out=np.full(np.broadcast(a, b).shape, np.nan), where=b > 0)

    out = {"selection_rate": div(tp + fp, n), "tpr": div(tp, tp + fn), "fpr": div(fp, fp + tn),
           "fnr": div(fn, tp + fn), "tnr": div(tn, fp + tn), "precision": div(tp, tp + fp),
           "npv": div(tn, tn + fn), "accuracy": div(tp + tn, n)}
    out["balanced_accuracy"] = (out["tpr"] + out["tnr"]) / 2
    out["count"] = n
    return out


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b with 0 / 0 = 1 (two equal rates) and a / 0 = 0 for a > 0 (the smaller over the larger)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / b
    return np.where((a == 0) & (b == 0), 1.0, np.where(b == 0, 0.0, r))


def rate_gap(values, judged, reference: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Difference and ratio of one rate across the judged groups (docs/METHODS.md §6.6).

    Parameters
    ----------
    values : numpy.ndarray, shape (..., G)
        The rate of every group (any leading shape, e.g. bootstrap replicates); NaN groups are left out.
    judged : bool array (G,)
        Groups that are compared (large enough, not empty).
    reference : int, optional
        Code of the reference group. None: the largest minus the smallest rate, and smallest over largest
        (fairlearn's ``between_groups``). Given: the largest ``|r_g - r_ref|`` and the smallest
        ``min(r_g / r_ref, r_ref / r_g)`` over the judged groups (aequitas' disparity, folded below 1).

    Returns
    -------
    difference, ratio : numpy.ndarray, shape (...)
        NaN where fewer than two judged groups have a rate (or the reference has none). A ratio of two zero
        rates is 1.
    """
    v = np.where(np.asarray(judged, bool), np.asarray(values, dtype=float), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        enough = (~np.isnan(v)).sum(axis=-1) >= 2
        if reference is None:
            hi, lo = np.nanmax(v, axis=-1), np.nanmin(v, axis=-1)
            diff, ratio = hi - lo, _ratio(lo, hi)
        else:
            ref = v[..., reference][..., None]
            diff = np.nanmax(np.abs(v - ref), axis=-1)
            folded = np.fmin(_ratio(v, ref), _ratio(ref, v))
            ratio = np.nanmin(np.where(np.isnan(v) | np.isnan(ref), np.nan, folded), axis=-1)
            enough &= ~np.isnan(ref[..., 0])
    return np.where(enough, diff, np.nan), np.where(enough, ratio, np.nan)


def criteria(rates: dict[str, np.ndarray], judged, reference: int | None = None) -> dict[str, np.ndarray]:
    """Every criterion of :data:`CRITERIA` from the rates of the groups (docs/METHODS.md §6.6).

    Parameters
    ----------
    rates : dict
        Rate name -> array (..., G), as :func:`rates_from_counts` returns.
    judged : bool array (G,)
        Groups that are compared.
    reference : int, optional
        Reference group (see :func:`rate_gap`); None compares the extreme groups.

    Returns
    -------
    dict
        Criterion name -> array (...). Two-rate criteria (equalized odds) take the worse of the two: the larger
        difference, the smaller ratio (fairlearn's ``agg="worst_case"``).
    """
    gaps = {name: rate_gap(rates[name], judged, reference) for name in ("selection_rate", "tpr", "fpr", "precision")}
    out = {}
    for crit, (kind, used) in CRITERIA.items():
        parts = [gaps[u][0 if kind == "difference" else 1] for u in used]
        out[crit] = parts[0] if len(parts) == 1 else (np.fmax(*parts) if kind == "difference" else np.fmin(*parts))
    return out


def roc_auc_by_group(score, positive, codes, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Area under the ROC curve within every group (docs/METHODS.md §6.6).

    The Mann-Whitney form: ``AUC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos n_neg)`` with ``R_pos`` the sum of
    the positives' ranks within the group (ties share their mean rank, so a tie counts one half), computed for
    all groups at once from one sort by (group, score).

    Parameters
    ----------
    score : float array (n,)
        Higher means more likely positive.
    positive : bool array (n,)
        True class is the positive one.
    codes : int array (n,)
        Group code of each entry.
    n_groups : int

    Returns
    -------
    auc, n_pos, n_neg : numpy.ndarray, shape (G,)
        AUC is NaN for a group without positives or without negatives.
    """
    score = np.asarray(score, float)
    positive = np.asarray(positive, bool)
    codes = np.asarray(codes, np.int64)
    order = np.lexsort((score, codes))
    s, g, p = score[order], codes[order], positive[order]
    n = s.size
    # runs of equal (group, score): every member gets the run's mean position, then minus the group's start
    new = np.ones(n, bool)
    new[1:] = (s[1:] != s[:-1]) | (g[1:] != g[:-1])
    run = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], n]
    mean_pos = (starts + ends - 1) / 2.0
    group_start = np.full(n_groups, 0, np.int64)
    sizes = np.bincount(g, minlength=n_groups)
    group_start[1:] = np.cumsum(sizes)[:-1]
    rank = mean_pos[run] - group_start[g] + 1.0
    n_pos = np.bincount(g, weights=p.astype(float), minlength=n_groups)
    n_neg = sizes - n_pos
    r_pos = np.bincount(g, weights=np.where(p, rank, 0.0), minlength=n_groups)
    denom = n_pos * n_neg
    auc = np.divide(r_pos - n_pos * (n_pos + 1) / 2.0, denom, out=np.full(n_groups, np.nan), where=denom > 0)
    return auc, n_pos, n_neg


def default_thresholds(score, n: int = 101) -> np.ndarray:
    """The thresholds of a sweep: ``n`` quantiles of the scores, without repeats (docs/METHODS.md §6.6)."""
    score = np.asarray(score, float)
    if score.size == 0:
        raise FairvisionError("threshold sweep: no scores")
    return np.unique(np.quantile(score, np.linspace(0.0, 1.0, max(2, int(n)))))


def threshold_sweep(score, positive, codes, n_groups: int, thresholds) -> dict[str, np.ndarray]:
    """Confusion counts of every group at every threshold, predicting positive when ``score >= t``
    (docs/METHODS.md §6.6).

    One ``searchsorted`` gives each entry the number of thresholds it reaches, one ``bincount`` per outcome
    the counts by (group, that number), and a reversed cumulative sum the counts at every threshold.

    Parameters
    ----------
    score : float array (n,)
    positive : bool array (n,)
        True class is the positive one.
    codes : int array (n,)
        Group code of each entry.
    n_groups : int
    thresholds : array_like (T,)
        Increasing thresholds.

    Returns
    -------
    dict
        ``tp``, ``fp``, ``fn``, ``tn``: arrays of shape (G, T).
    """
    t = np.asarray(thresholds, float)
    if t.ndim != 1 or np.any(np.diff(t) <= 0):
        raise FairvisionError("threshold sweep: thresholds must increase")
    score = np.asarray(score, float)
    positive = np.asarray(positive, bool)
    codes = np.asarray(codes, np.int64)
    T = t.size
    reached = np.searchsorted(t, score, side="right")  # thresholds t_j <= score: j < reached
    key = codes * (T + 1) + reached
    pos = np.bincount(key[positive], minlength=n_groups * (T + 1)).reshape(n_groups, T + 1)
    neg = np.bincount(key[~positive], minlength=n_groups * (T + 1)).reshape(n_groups, T + 1)
    # predicted positive at threshold j: entries with reached > j
    tp = np.cumsum(pos[:, ::-1], axis=1)[:, ::-1][:, 1:].astype(float)
    fp = np.cumsum(neg[:, ::-1], axis=1)[:, ::-1][:, 1:].astype(float)
    return {"tp": tp, "fp": fp, "fn": pos.sum(axis=1, keepdims=True) - tp, "tn": neg.sum(axis=1, keepdims=True) - fp}

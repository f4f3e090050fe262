"""Multi-class bias: recall per class and group, intraclass disparity ID and overall disparity OD.

Bias-transfer paper (docs/METHODS.md §6.4):
``r(c, g)`` is the recall of class ``c`` within demographic group ``g``;
``ID(c) = 1/(G-1) * sum_g (1 - r(c, g) / max_g' r(c, g'))`` (0 when the max is
0) and ``OD = mean_c ID(c)``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.errors import FairvisionError
from fairvision.stats.resample import BootstrapResult, cluster_bootstrap_weights, percentile_ci


def _codes(values, name: str):
    s = pd.Series(np.asarray(values, dtype=object))
    if s.isna().any():
        raise FairvisionError(f"{name}: value {int(np.flatnonzero(s.isna().to_numpy())[0]) + 1} is missing")
    try:
        codes, uniques = pd.factorize(s, sort=True)
    except TypeError:
        codes, uniques = pd.factorize(s, sort=False)
    return np.asarray(codes), list(uniques)


def _recall_from_counts(hits: np.ndarray, totals: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(totals > 0, hits / np.where(totals > 0, totals, 1), np.nan)


def recall_matrix(y_true, y_pred, groups, *, classes=None) -> pd.DataFrame:
    """Recall of every class within every group, classes x groups (docs/METHODS.md §6.4).

    Parameters
    ----------
    y_true, y_pred : array_like
        True and predicted class of every sample.
    groups : array_like
        Demographic group of every sample.
    classes : sequence, optional
        Classes to report (default: the true classes seen, sorted).

    Returns
    -------
    pandas.DataFrame
        ``r(c, g)``; NaN where group ``g`` has no sample of class ``c``.
    """
    y_true = np.asarray(y_true, dtype=object)
    y_pred = np.asarray(y_pred, dtype=object)
    if not (len(y_true) == len(y_pred) == len(groups)):
        raise FairvisionError(f"recall_matrix: y_true, y_pred and groups differ in length ({len(y_true)}, {len(y_pred)}, {len(groups)})")
    if len(y_true) == 0:
        raise FairvisionError("recall_matrix: no samples")
    cls_codes, cls = _codes(y_true, "y_true") if classes is None else (None, list(classes))
    if classes is not None:
        lookup = {c: i for i, c in enumerate(cls)}
        cls_codes = np.array([lookup.get(v, -1) for v in y_true])
    g_codes, gl = _codes(groups, "groups")
    C, G = len(cls), len(gl)
    ok = cls_codes >= 0
    correct = (y_true == y_pred) & ok
    flat = cls_codes[ok] * G + g_codes[ok]
    totals = np.bincount(flat, minlength=C * G).reshape(C, G)
    hits = np.bincount(cls_codes[correct] * G + g_codes[correct], minlength=C * G).reshape(C, G)
    out = pd.DataFrame(_recall_from_counts(hits, totals), index=pd.Index(cls, name="class"), columns=pd.Index(gl, name="group"))
    return out


def _id_array(r: np.ndarray) -> np.ndarray:
    """ID per row of ``r`` (classes x groups, ..., NaN = group without that class)."""
    valid = ~np.isnan(r)
    g = valid.sum(axis=-1)
    mx = np.nanmax(np.where(valid, r, -np.inf), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(valid, 1.0 - r / mx[..., None], 0.0)
        idv = terms.sum(axis=-1) / (g - 1)
    idv = np.where(mx == 0, 0.0, idv)
    return np.where(g >= 2, idv, np.nan)


def intraclass_disparity(recall: pd.DataFrame) -> pd.Series:
    """Intraclass disparity ``ID(c)`` for every class (row) of a classes x groups recall table.

    ``ID(c) = 1/(G-1) sum_g (1 - r(c,g)/max_g' r(c,g'))``; 0 when the max is 0.
    Groups with no sample of class ``c`` (NaN) are left out of that class's
    sum and of its ``G``; a class seen in fewer than two groups has ID NaN.
    See docs/METHODS.md §6.4.

    Parameters
    ----------
    recall : pandas.DataFrame
        Classes x groups recall table (e.g. from :func:`recall_matrix`), values
        in [0, 1] or NaN.

    Returns
    -------
    pandas.Series
        ``ID`` indexed by class.
    """
    if not isinstance(recall, pd.DataFrame):
        recall = pd.DataFrame(recall)
    r = recall.to_numpy(dtype=float)
    if r.ndim != 2 or r.shape[1] < 2:
        raise FairvisionError("intraclass_disparity: need a classes x groups table with at least two groups")
    if np.any((r < 0) | (r > 1)):
        raise FairvisionError("intraclass_disparity: recalls must lie in [0, 1]")
    return pd.Series(_id_array(r), index=recall.index, name="ID")


def overall_disparity(recall: pd.DataFrame) -> tuple[float, pd.Series]:
    """Overall disparity ``OD = mean_c ID(c)`` and the ID of every class (docs/METHODS.md §6.4).

    Parameters
    ----------
    recall : pandas.DataFrame
        Classes x groups recall table (e.g. from :func:`recall_matrix`).

    Returns
    -------
    (od, id_per_class) : (float, pandas.Series)

    Examples
    --------
    The worked check of docs/METHODS.md §6.4:

    >>> import pandas as pd
    >>> od, ids = overall_disparity(pd.DataFrame([[.9, .8, .6], [.5, .5, .5], [.7, .35, .7]]))
    >>> round(od, 6), [round(v, 4) for v in ids]
    (0.157407, [0.2222, 0.0, 0.25])
    """
    ids = intraclass_disparity(recall)
    od = float(np.nanmean(ids.to_numpy())) if ids.notna().any() else float("nan")
    return od, ids


@dataclass
class ODResult(BootstrapResult):
    """Overall disparity OD with a cluster-bootstrap percentile CI (docs/METHODS.md §6.4).

    A :class:`~fairvision.stats.resample.BootstrapResult`: ``estimate`` (OD),
    ``ci_low``, ``ci_high``, ``level``, ``se``, ``n_boot``; plus
    ``id_per_class`` (ID of every class) and ``recall`` (classes x groups).
    """

    id_per_class: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    recall: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_dict(self) -> dict:
        """The scalar fields as plain Python values (``id_per_class`` and ``recall`` left out)."""
        out = {}
        for f in fields(self):
            if f.name not in ("id_per_class", "recall"):
                v = getattr(self, f.name)
                out[f.name] = v.item() if isinstance(v, np.generic) else v
        return out

    def to_frame(self) -> pd.DataFrame:
        """One-row DataFrame: estimate, ci_low, ci_high, level, se, n_boot, method."""
        return pd.DataFrame([self.to_dict()])


def overall_disparity_ci(y_true, y_pred, groups, *, subjects=None, n_boot: int = 1000, level: float = 0.95,
                         seed: np.random.Generator | int | None = 0) -> ODResult:
    """OD with a percentile CI from a cluster bootstrap over subjects (docs/METHODS.md §6.4).

    Subjects (``subjects``; default: every sample its own subject) are drawn
    with replacement and carry all their samples; the recall matrix and OD are
    recomputed for every replicate from weighted counts (one matrix product).

    Parameters
    ----------
    y_true, y_pred : array_like
        True and predicted class of every sample.
    groups : array_like
        Demographic group of every sample.
    subjects : array_like, optional
        Subject id of every sample (default: every sample its own subject).
    n_boot : int
        Bootstrap replicates.
    level : float
        Two-sided level of the percentile interval.
    seed : int, numpy.random.Generator or None
        Randomness of the draws.

    Returns
    -------
    ODResult
        ``estimate`` is OD on all samples; NaN bounds when OD is undefined in
        every replicate.
    """
    recall = recall_matrix(y_true, y_pred, groups)
    od, ids = overall_disparity(recall)
    y_true = np.asarray(y_true, dtype=object)
    correct = (y_true == np.asarray(y_pred, dtype=object)).astype(float)
    cls_codes, _ = _codes(y_true, "y_true")
    g_codes, _ = _codes(groups, "groups")
    C, G = recall.shape
    cell = cls_codes * G + g_codes
    subj = np.arange(len(y_true)) if subjects is None else _codes(subjects, "subjects")[0]
    S = int(subj.max()) + 1
    tot = sparse.csr_matrix((np.ones(len(cell)), (subj, cell)), shape=(S, C * G))
    hit = sparse.csr_matrix((correct, (subj, cell)), shape=(S, C * G))
    w = cluster_bootstrap_weights(S, n_boot, seed)
    totals = np.asarray((tot.T @ w.T).T).reshape(n_boot, C, G)
    hits = np.asarray((hit.T @ w.T).T).reshape(n_boot, C, G)
    with warnings.catch_warnings():  # an undefined OD (no class seen in two groups) is NaN, silently
        warnings.simplefilter("ignore", RuntimeWarning)
        reps = np.nanmean(_id_array(_recall_from_counts(hits, totals)), axis=1) if C else np.full(n_boot, np.nan)
        lo, hi = percentile_ci(reps, level)
        sd = float(np.nanstd(reps, ddof=1))
    return ODResult(od, float(lo), float(hi), level, se=sd, n_boot=n_boot, id_per_class=ids, recall=recall)


def disparity_replicates(y_true, y_pred, groups, subjects, weights, *, classes=None) -> dict:
    """OD, ID of every class and accuracy under given subject weights (docs/METHODS.md §6.4, §11.3).

    The building block of joint (paired) bootstraps: give the same
    ``weights`` for the predictions of several models on one test set and the
    replicates line up, so differences between models have a proper bootstrap
    distribution. A row of ones is the point estimate.

    Parameters
    ----------
    y_true, y_pred : array_like
        True and predicted class of every sample.
    groups : array_like
        Demographic group of every sample.
    subjects : int array
        Subject code ``0 .. S-1`` of every sample (``S = weights.shape[1]``).
    weights : numpy.ndarray, shape (m, S)
        How many times each subject is drawn in each of ``m`` samples (from
        :func:`~fairvision.stats.resample.cluster_bootstrap_weights`).
    classes : sequence, optional
        Classes to score (default: the true classes seen, sorted).

    Returns
    -------
    dict
        ``od`` (m,), ``id`` (m, C), ``accuracy`` (m,), ``classes`` and
        ``groups`` (the labels of the columns of the recall matrix).
    """
    y_true = np.asarray(y_true, dtype=object)
    y_pred = np.asarray(y_pred, dtype=object)
    subjects = np.asarray(subjects, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    if not (len(y_true) == len(y_pred) == len(groups) == len(subjects)):
        raise FairvisionError("disparity_replicates: y_true, y_pred, groups and subjects differ in length")
    if len(y_true) == 0:
        raise FairvisionError("disparity_replicates: no samples")
    if weights.ndim != 2 or int(subjects.max()) >= weights.shape[1] or int(subjects.min()) < 0:
        raise FairvisionError("disparity_replicates: weights must have one column per subject code")
    if classes is None:
        cls_codes, cls = _codes(y_true, "y_true")
    else:
        cls = list(classes)
        lookup = {c: i for i, c in enumerate(cls)}
        cls_codes = np.array([lookup.get(v, -1) for v in y_true])
    g_codes, gl = _codes(groups, "groups")
    C, G, S = len(cls), len(gl), weights.shape[1]
    ok = cls_codes >= 0
    correct = (y_true == y_pred).astype(float)
    cell = np.where(ok, cls_codes * G + g_codes, 0)
    tot = sparse.csr_matrix((ok.astype(float), (subjects, cell)), shape=(S, C * G))
    hit = sparse.csr_matrix((correct * ok, (subjects, cell)), shape=(S, C * G))
    wt = np.ascontiguousarray(weights.T)
    m = weights.shape[0]
    totals = np.asarray(tot.T @ wt).T.reshape(m, C, G)
    hits = np.asarray(hit.T @ wt).T.reshape(m, C, G)
    n_subj = np.bincount(subjects, minlength=S).astype(float)
    n_hit = np.bincount(subjects, weights=correct, minlength=S)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        ids = _id_array(_recall_from_counts(hits, totals))
        od = np.nanmean(ids, axis=1) if C else np.full(m, np.nan)
        acc = (weights @ n_hit) / (weights @ n_subj)
    return {"od": od, "id": ids, "accuracy": acc, "classes": cls, "groups": gl}

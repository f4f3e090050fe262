"""Model audit: per-sample scores disaggregated by group and intersection, with honest uncertainty.

Implements issue 4 on top of METHODS.md sections 4 and 7:

* **Disaggregation** of any per-sample score by every attribute and every
  k-way intersection (``Attribute.membership``, so multi-valued and
  hierarchical attributes count a sample in each of its groups). Groups with
  fewer than ``min_subjects`` subjects are *reported* as too small (with their
  numbers), never silently dropped, and are left out of comparisons.
* **Uncertainty**: percentile CIs of group means from a cluster bootstrap over
  subjects (several images of one person are not independent), plus min, max,
  difference and ratio between the worst and best group with CIs.
* **FHIBE benchmarking analysis** (METHODS.md section 4): all pairs, two-sided
  Mann-Whitney U, Bonferroni/Holm/BH within each attribute or intersection,
  disparity D with best and worst group, effect size (rank-biserial), and the
  top disparities across all intersections in the layout of the FHIBE paper's
  Extended Data Table 2. Lower-is-better metrics swap best and worst.
* **Multi-class OD** (METHODS.md section 7) with a bootstrap CI.
* **Face verification by group**: TAR at FAR from embeddings on all positive
  pairs and FHIBE's hard negatives (:func:`verification_by_group`).
* ``--fail-if`` conditions (``"disparity>0.2"``) parsed without ``eval``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError
from fairvision.groups import combine, subject_codes
from fairvision.schema import Attribute, Schema
from fairvision.stats.corrections import METHODS as CORRECTIONS
from fairvision.stats.pairwise import pairwise_mannwhitney
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci

SEP = " × "
_MAX_DECLARED_PRODUCT = 5000


def join_scores(samples: pd.DataFrame, scores: pd.DataFrame, *, samples_source: str = "samples",
                scores_source: str = "scores", key: str = "sample_id") -> pd.DataFrame:
    """Join a scores table onto a sample table by ``sample_id``, with one-line errors.

    Every sample must have exactly one row of scores; scores for unknown
    samples are an error too (they usually mean the wrong file).
    """
    for df, src in ((samples, samples_source), (scores, scores_source)):
        if key not in df.columns:
            raise ColumnError(f"{src}: missing column {key!r}; columns are {', '.join(map(str, df.columns))}")
    s_ids = scores[key].astype(str)
    dup = s_ids.duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise ColumnError(f"{scores_source}: row {row + 1}: duplicate {key} {s_ids.iloc[row]!r}")
    ids = samples[key].astype(str)
    missing = ~ids.isin(set(s_ids)).to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise ColumnError(f"{scores_source}: no scores for {key} {ids.iloc[row]!r} ({samples_source} row {row + 1}; "
                          f"{int(missing.sum())} samples without scores)")
    extra = ~s_ids.isin(set(ids)).to_numpy()
    if extra.any():
        row = int(np.flatnonzero(extra)[0])
        raise ColumnError(f"{scores_source}: row {row + 1}: {key} {s_ids.iloc[row]!r} is not in {samples_source} "
                          f"({int(extra.sum())} unknown ids)")
    clash = [c for c in scores.columns if c != key and c in samples.columns]
    right = scores.drop(columns=clash).assign(**{key: s_ids})
    out = samples.assign(**{key: ids}).merge(right, on=key, how="left", validate="one_to_one")
    out.attrs.update(samples.attrs)
    return out


# -- groups and intersections ------------------------------------------------------------------------------

@dataclass
class Intersection:
    """Long-form membership of one attribute or intersection: ``rows[i]`` is in group ``codes[i]``."""

    attributes: tuple[str, ...]
    rows: np.ndarray
    codes: np.ndarray
    labels: list[tuple]

    @property
    def name(self) -> str:
        return SEP.join(self.attributes)

    @property
    def k(self) -> int:
        return len(self.attributes)

    def index(self) -> pd.Index:
        if self.k == 1:
            return pd.Index([lab[0] for lab in self.labels], name=self.attributes[0])
        return pd.MultiIndex.from_tuples(self.labels, names=list(self.attributes))


def group_label(label) -> str:
    """Display label of a group: ``"20-29 × Male"`` for intersections."""
    if isinstance(label, tuple):
        return SEP.join(map(str, label))
    return str(label)


def build_intersections(df: pd.DataFrame, attributes: Sequence[Attribute], max_k: int = 1, *,
                        source: str = "samples") -> list[Intersection]:
    """Memberships of every attribute and every intersection of up to ``max_k`` attributes.

    Multi-valued attributes contribute every combination of a row's values.
    Declared groups with no members are kept (as empty groups) when the
    product of the categories has at most 5,000 cells.
    """
    if not attributes:
        raise FairvisionError("model audit: give at least one attribute (--attr)")
    max_k = max(1, min(int(max_k), len(attributes)))
    members = [a.membership(df, source=source) for a in attributes]
    out: list[Intersection] = []
    for k in range(1, max_k + 1):
        for combo in itertools.combinations(range(len(attributes)), k):
            comb = combine([members[i] for i in combo], len(df))
            sizes = [len(lv) for lv in comb.levels]
            if math.prod(sizes) <= _MAX_DECLARED_PRODUCT:
                codes = comb.codes
                labels = list(itertools.product(*comb.levels))
            else:  # too many declared cells: keep the observed ones only
                observed, codes = np.unique(comb.codes, return_inverse=True)
                parts = np.unravel_index(observed, sizes)
                labels = [tuple(lv[i] for lv, i in zip(comb.levels, ix)) for ix in zip(*parts)]
            out.append(Intersection(comb.names, comb.rows, np.asarray(codes, np.int64).ravel(), labels))
    return out


# -- per-group estimates with cluster bootstrap ---------------------------------------------------------------

def _class_labels(col: pd.Series) -> np.ndarray:
    """Class labels as comparable strings: 1, 1.0 and "1" are the same class.

    A numeric column read with a missing cell becomes float; without this,
    str(1.0) != str(1) and every prediction would count as wrong.
    """
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        v = col.to_numpy(dtype=float)
        whole = np.isfinite(v) & (v == np.round(v))
        return np.array([str(int(x)) if w else str(x) for x, w in zip(v, whole)], dtype=object)
    return np.array([str(int(x)) if isinstance(x, float) and x.is_integer() else str(x) for x in col], dtype=object)


def _subject_codes(df: pd.DataFrame, subject_col: str | None) -> np.ndarray:
    """Subject code per row; every row is its own subject when there is no subject column."""
    if subject_col is None:
        return np.arange(len(df))
    return subject_codes(df, subject_col, source="samples")


def group_estimates(values: np.ndarray, inter: Intersection, subjects: np.ndarray, weights: np.ndarray, *,
                    min_subjects: int, level: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-group n, subjects, mean, median, sd and cluster-bootstrap CI of the mean.

    ``weights`` are subject draw counts, shape (n_boot, n_subjects), shared by
    all groups and metrics so that differences between groups get joint
    replicates. Returns the table and the replicate means (n_boot, n_groups).
    """
    from scipy import sparse

    G = len(inter.labels)
    x = values[inter.rows]
    ok = ~np.isnan(x)
    x, codes, subj = x[ok], inter.codes[ok], subjects[inter.rows[ok]]
    n = np.bincount(codes, minlength=G)
    pairs = np.unique(np.stack([codes, subj], 1), axis=0) if codes.size else np.zeros((0, 2), np.int64)
    n_subj = np.bincount(pairs[:, 0], minlength=G)
    sums = np.bincount(codes, weights=x, minlength=G)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = sums / n
        sq = np.bincount(codes, weights=(x - mean[codes]) ** 2, minlength=G)
        sd = np.sqrt(sq / (n - 1))
    order = np.lexsort((x, codes))
    xs = x[order]
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    nz = n > 0
    median = np.full(G, np.nan)
    median[nz] = 0.5 * (xs[starts[nz] + (n[nz] - 1) // 2] + xs[starts[nz] + n[nz] // 2])
    S = weights.shape[1]
    sum_m = sparse.csr_matrix((x, (subj, codes)), shape=(S, G))
    cnt_m = sparse.csr_matrix((np.ones_like(x), (subj, codes)), shape=(S, G))
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.asarray((sum_m.T @ weights.T).T) / np.asarray((cnt_m.T @ weights.T).T)
    if weights.shape[0]:
        with warnings.catch_warnings():  # empty groups have all-NaN replicates
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = percentile_ci(reps, level)
    else:
        lo, hi = np.full(G, np.nan), np.full(G, np.nan)
    lo = np.where(nz, lo, np.nan)
    hi = np.where(nz, hi, np.nan)
    table = pd.DataFrame({"n_samples": n, "n_subjects": n_subj, "mean": mean, "median": median, "sd": sd,
                          "ci_low": lo, "ci_high": hi, "too_small": n_subj < min_subjects}, index=inter.index())
    return table, reps


# -- results ----------------------------------------------------------------------------------------------------

@dataclass
class ModelAuditResult:
    """Everything the model audit found. Tables are tidy DataFrames.

    Attributes
    ----------
    groups : dict
        ``(metric, intersection name) -> DataFrame`` indexed by group
        (MultiIndex for intersections): n_samples, n_subjects, mean, median,
        sd, ci_low, ci_high, too_small.
    pairwise : dict
        ``(metric, intersection name) -> DataFrame`` of
        :func:`~fairvision.stats.pairwise.pairwise_mannwhitney`.
    summary : DataFrame
        One row per metric and intersection: worst and best group (by mean),
        difference and ratio with bootstrap CIs, number of tests and of
        significant pairs, the largest significant disparity D.
    top_disparities : DataFrame
        Largest significant D per metric and intersection, sorted (FHIBE
        Extended Data Table 2 layout).
    od : dict
        ``intersection name -> ODResult`` when true and predicted classes were given.
    """

    metrics: list[str]
    attributes: list[str]
    lower_is_better: list[str]
    min_subjects: int
    correction: str
    alpha: float
    level: float
    n_boot: int
    n_samples: int
    n_subjects: int
    subject_col: str | None
    test_unit: str = "subject"
    groups: dict = field(default_factory=dict)
    pairwise: dict = field(default_factory=dict)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    top_disparities: pd.DataFrame = field(default_factory=pd.DataFrame)
    od: dict = field(default_factory=dict)
    intersections: list[str] = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        """All group estimates in one long table (metric, intersection, group, ...)."""
        parts = []
        for (metric, inter), df in self.groups.items():
            flat = df.reset_index(drop=True).copy()
            flat.insert(0, "group", [group_label(g) for g in df.index])
            flat.insert(0, "intersection", inter)
            flat.insert(0, "metric", metric)
            parts.append(flat)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def too_small(self) -> pd.DataFrame:
        """Groups with fewer subjects than ``min_subjects`` (reported, not compared)."""
        df = self.to_frame()
        if df.empty:
            return df
        first = df[df["metric"] == self.metrics[0]]
        return first[first["too_small"]][["intersection", "group", "n_samples", "n_subjects"]].reset_index(drop=True)

    def quantities(self) -> dict[str, float]:
        """Named numbers that ``--fail-if`` conditions can test.

        Per metric M: ``M.disparity`` (largest significant D, 0 if none),
        ``M.max_disparity`` (largest D over all tested pairs, significant or
        not), ``M.difference`` (largest best-worst difference of means),
        ``M.ratio`` (smallest worst/best ratio of means), ``M.min`` and
        ``M.max`` (lowest and highest group mean), ``M.significant_pairs``;
        the same per intersection as ``M.<attr>+<attr>.<name>``. Without a
        prefix: the largest (``disparity``, ``max_disparity``, ``difference``,
        ``max``, ``od``), smallest (``ratio``, ``min``) or total
        (``significant_pairs``) over metrics. ``od`` and ``od.<attr>+<attr>``
        for the multi-class overall disparity.
        """
        q: dict[str, float] = {}
        agg = {"disparity": max, "max_disparity": max, "difference": max, "max": max, "ratio": min, "min": min,
               "significant_pairs": sum}
        per_metric: dict[str, dict[str, list[float]]] = {}
        for _, row in self.summary.iterrows():
            m, key = row["metric"], row["intersection"].replace(SEP, "+")
            vals = {"disparity": row["disparity"], "max_disparity": row["max_disparity"], "difference": row["difference"],
                    "ratio": row["ratio"], "min": row["min_mean"], "max": row["max_mean"],
                    "significant_pairs": row["n_significant"]}
            for name, v in vals.items():
                q[f"{m}.{key}.{name}"] = float(v)
                per_metric.setdefault(m, {}).setdefault(name, []).append(float(v))
        for m, d in per_metric.items():
            for name, vs in d.items():
                finite = [v for v in vs if not math.isnan(v)]
                q[f"{m}.{name}"] = float(agg[name](finite)) if finite else float("nan")
        for name, f in agg.items():
            vs = [q[f"{m}.{name}"] for m in per_metric if not math.isnan(q[f"{m}.{name}"])]
            q[name] = float(f(vs)) if vs else float("nan")
        if self.od:
            for inter, res in self.od.items():
                key = inter.replace(SEP, "+")
                q[f"od.{key}"] = res.od
                q[f"od.{key}.ci_low"] = res.ci_low
                q[f"od.{key}.ci_high"] = res.ci_high
            ods = [r.od for r in self.od.values() if not math.isnan(r.od)]
            q["od"] = max(ods) if ods else float("nan")
        return q


def _summary_row(metric: str, inter: str, table: pd.DataFrame, reps: np.ndarray, pw: pd.DataFrame, higher: bool,
                 level: float) -> dict:
    valid = ~table["too_small"].to_numpy() & table["n_samples"].to_numpy().astype(bool)
    means = table["mean"].to_numpy(float)
    row = {"metric": metric, "intersection": inter, "n_groups": len(table), "n_compared": int(valid.sum()),
           "n_too_small": int((~valid).sum())}
    nan = float("nan")
    if valid.sum() >= 1:
        idx = np.flatnonzero(valid)
        lo_i, hi_i = idx[np.nanargmin(means[idx])], idx[np.nanargmax(means[idx])]
        worst_i, best_i = (lo_i, hi_i) if higher else (hi_i, lo_i)
        diff = means[hi_i] - means[lo_i]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = means[lo_i] / means[hi_i] if means[hi_i] != 0 else (1.0 if means[lo_i] == 0 else nan)
            d_rep = reps[:, hi_i] - reps[:, lo_i]
            r_rep = reps[:, lo_i] / reps[:, hi_i]
        d_lo, d_hi = percentile_ci(d_rep, level) if len(d_rep) else (nan, nan)
        r_lo, r_hi = percentile_ci(np.where(np.isfinite(r_rep), r_rep, np.nan), level) if len(r_rep) else (nan, nan)
        row.update(worst_group=group_label(table.index[worst_i]), best_group=group_label(table.index[best_i]),
                   worst_mean=means[worst_i], best_mean=means[best_i], min_mean=means[lo_i], max_mean=means[hi_i],
                   difference=diff, difference_ci_low=float(d_lo), difference_ci_high=float(d_hi),
                   ratio=ratio, ratio_ci_low=float(r_lo), ratio_ci_high=float(r_hi))
    else:
        row.update(worst_group=None, best_group=None, worst_mean=nan, best_mean=nan, min_mean=nan, max_mean=nan,
                   difference=nan, difference_ci_low=nan, difference_ci_high=nan, ratio=nan, ratio_ci_low=nan,
                   ratio_ci_high=nan)
    n_tests = len(pw)
    sig = pw[pw["significant"].astype(bool)] if n_tests else pw
    d_all = pw["disparity"].astype(float) if n_tests else pd.Series(dtype=float)
    row.update(n_tests=n_tests, n_significant=int(len(sig)),
               max_disparity=float(d_all.max()) if d_all.notna().any() else 0.0,
               disparity=float(sig["disparity"].astype(float).max()) if len(sig) and sig["disparity"].notna().any() else 0.0)
    return row


def model_audit(
    data: pd.DataFrame,
    metrics: Sequence[str],
    attributes: Sequence[Attribute | str],
    *,
    subject_col: str | None = "subject_id",
    lower_is_better: Iterable[str] = (),
    max_k: int = 1,
    min_subjects: int = 10,
    correction: str = "bonferroni",
    alpha: float = 0.05,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    true_col: str | None = None,
    pred_col: str | None = None,
    schema: Schema | None = None,
    test_unit: str = "subject",
    progress: Callable[[str], None] | None = None,
    source: str = "samples",
) -> ModelAuditResult:
    """Disaggregate per-sample scores by group and intersection; FHIBE pairwise analysis; OD.

    Parameters
    ----------
    data : pandas.DataFrame
        One row per sample: attribute columns, the metric columns and
        optionally a subject column (see :func:`join_scores`).
    metrics : sequence of str
        Per-sample score columns (NaN = not scored; left out).
    attributes : sequence of Attribute or str
        Attributes (plain column names use ``schema`` when given).
    subject_col : str or None
        Subject id column for subject counts and the cluster bootstrap. If
        None or absent, every sample is its own subject.
    lower_is_better : iterable of str
        Metrics where lower is better (errors, LPIPS): worst and best swap.
    max_k : int
        Largest intersection size (1 = single attributes only).
    min_subjects : int
        Groups with fewer subjects are reported as too small and not compared
        (FHIBE: 10).
    correction : {"bonferroni", "holm", "bh", "none"}
        Applied within each metric and attribute/intersection, as the paper.
    n_boot, level, seed
        Cluster bootstrap replicates, CI level, seed.
    true_col, pred_col : str, optional
        True and predicted class columns: adds the recall matrix, ID and OD
        with a bootstrap CI for every attribute/intersection.
    test_unit : {"subject", "sample"}
        What the Mann-Whitney tests compare. ``"subject"`` (default): the mean
        score of each subject within the group, since several images of one
        person are not independent observations. ``"sample"``: every image's
        score, as the FHIBE paper did (its p-values are then too small when
        subjects have many images). Without a subject column both are the same.
    progress : callable, optional
        Called with a short description after each unit of work.
    """
    if correction not in CORRECTIONS:
        raise FairvisionError(f"unknown correction {correction!r}; choose one of {', '.join(CORRECTIONS)}")
    if min_subjects < 1:
        raise FairvisionError("--min-subjects must be at least 1")
    if test_unit not in ("subject", "sample"):
        raise FairvisionError(f"test unit must be 'subject' or 'sample', not {test_unit!r}")
    if not 0 < level < 1:
        raise FairvisionError("CI level must be between 0 and 1")
    metrics = list(dict.fromkeys(metrics))
    if not metrics and true_col is None:
        raise FairvisionError("model audit: give at least one metric column (--metric) or true/predicted classes")
    for m in metrics:
        if m not in data.columns:
            raise ColumnError(f"{source}: no metric column {m!r}; columns are {', '.join(map(str, data.columns))}")
        vals = pd.to_numeric(data[m], errors="coerce")
        bad = vals.isna() & data[m].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ColumnError(f"{source}: row {row + 1}: metric {m!r} has non-numeric value {data[m].iloc[row]!r}")
        if vals.isna().all():
            raise ColumnError(f"{source}: metric {m!r} has no values")
    lower = set(lower_is_better)
    unknown = lower - set(metrics)
    if unknown:
        raise FairvisionError(f"--lower-is-better names {sorted(unknown)[0]!r}, which is not a metric column")
    schema = schema or Schema()
    attrs = [a if isinstance(a, Attribute) else schema.get(a) for a in attributes]
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are {', '.join(map(str, data.columns))}")
        warnings.warn("no subject_id column: every image is treated as a different person", stacklevel=2)
        subject_col = None
    subjects = _subject_codes(data, subject_col)
    n_subj_total = int(subjects.max()) + 1
    inters = build_intersections(data, attrs, max_k, source=source)
    weights = cluster_bootstrap_weights(n_subj_total, n_boot, seed) if n_boot > 0 else np.zeros((0, n_subj_total))
    res = ModelAuditResult(metrics=metrics, attributes=[a.name for a in attrs], lower_is_better=sorted(lower),
                           min_subjects=min_subjects, correction=correction, alpha=alpha, level=level, n_boot=n_boot,
                           n_samples=len(data), n_subjects=n_subj_total, subject_col=subject_col, test_unit=test_unit,
                           intersections=[i.name for i in inters])
    rows, tops = [], []
    for m in metrics:
        values = pd.to_numeric(data[m], errors="coerce").to_numpy(float)
        higher = m not in lower
        for inter in inters:
            table, reps = group_estimates(values, inter, subjects, weights, min_subjects=min_subjects, level=level)
            res.groups[(m, inter.name)] = table
            x, codes, subj = _test_units(values, inter, subjects, test_unit)
            lab = np.empty(len(inter.labels), dtype=object)
            lab[:] = [group_label(g) for g in inter.labels]
            pw = pairwise_mannwhitney(x, lab[codes], correction, higher_is_better=higher,
                                      min_size=min_subjects, subjects=subj, alpha=alpha)
            res.pairwise[(m, inter.name)] = pw
            rows.append(_summary_row(m, inter.name, table, reps, pw, higher, level))
            sig = pw[pw["significant"].astype(bool)] if len(pw) else pw
            if len(sig):
                best = sig.loc[sig["disparity"].astype(float).idxmax()]
                tops.append({"metric": m, "intersection": inter.name, "k": inter.k, "disparity": float(best["disparity"]),
                             "worst_group": best["worst"], "best_group": best["best"],
                             "median_worst": best["median_worst"], "median_best": best["median_best"],
                             "n_worst": int(best["n_a"] if best["worst"] == best["group_a"] else best["n_b"]),
                             "n_best": int(best["n_a"] if best["best"] == best["group_a"] else best["n_b"]),
                             "p_value": float(best["p_value"]), "p_adjusted": float(best["p_adjusted"]),
                             "effect_size": float(best["effect_size"]), "n_tests": len(pw)})
            if progress:
                progress(f"{m} by {inter.name}")
    res.summary = pd.DataFrame(rows)
    top_cols = ["metric", "intersection", "k", "disparity", "worst_group", "best_group", "median_worst", "median_best",
                "n_worst", "n_best", "p_value", "p_adjusted", "effect_size", "n_tests"]
    res.top_disparities = (pd.DataFrame(tops, columns=top_cols).sort_values(["disparity", "p_value"], ascending=[False, True], kind="stable")
                           .reset_index(drop=True))
    if true_col is not None or pred_col is not None:
        res.od = _od_by_intersection(data, inters, subjects, true_col, pred_col, min_subjects, n_boot, level, seed, source)
        if progress:
            progress("overall disparity")
    return res


def _test_units(values: np.ndarray, inter: Intersection, subjects: np.ndarray, unit: str):
    """Scores, group codes and subjects of the units that the pairwise tests compare."""
    x = values[inter.rows]
    ok = ~np.isnan(x)
    x, codes, subj = x[ok], inter.codes[ok], subjects[inter.rows[ok]]
    if unit == "sample" or x.size == 0:
        return x, codes, subj
    keys, inv = np.unique(np.stack([codes, subj], 1), axis=0, return_inverse=True)
    inv = np.asarray(inv).ravel()
    means = np.bincount(inv, weights=x) / np.bincount(inv)
    return means, keys[:, 0], keys[:, 1]


def _od_by_intersection(data, inters, subjects, true_col, pred_col, min_subjects, n_boot, level, seed, source):
    from fairvision.stats.multiclass import overall_disparity_ci

    for col, role in ((true_col, "true class"), (pred_col, "predicted class")):
        if col is None:
            raise FairvisionError(f"OD needs both the true and the predicted class column; the {role} column is missing")
        if col not in data.columns:
            raise ColumnError(f"{source}: no {role} column {col!r}; columns are {', '.join(map(str, data.columns))}")
    y_true = _class_labels(data[true_col])
    y_pred = _class_labels(data[pred_col])
    miss = data[true_col].isna().to_numpy() | data[pred_col].isna().to_numpy()
    out = {}
    for inter in inters:
        keep = ~miss[inter.rows]
        rows, codes = inter.rows[keep], inter.codes[keep]
        pairs = np.unique(np.stack([codes, subjects[rows]], 1), axis=0)
        n_subj = np.bincount(pairs[:, 0], minlength=len(inter.labels))
        big = n_subj[codes] >= min_subjects
        if len(np.unique(codes[big])) < 2:
            continue
        lab = np.empty(len(inter.labels), dtype=object)
        lab[:] = [group_label(g) for g in inter.labels]
        out[inter.name] = overall_disparity_ci(y_true[rows[big]], y_pred[rows[big]], lab[codes[big]],
                                               subjects=subjects[rows[big]], n_boot=n_boot, level=level, seed=seed)
    return out


# -- --fail-if conditions ---------------------------------------------------------------------------------------

# -- face verification by group -----------------------------------------------------------------------------------

def verification_by_group(
    samples: pd.DataFrame,
    embeddings,
    attribute: Attribute | str,
    *,
    identity_col: str = "subject_id",
    far: float = 0.001,
    pronoun_col: str | None = None,
    tone_col: str | None = None,
    max_tone_diff: int = 1,
    threshold: str = "group",
    source: str = "samples",
) -> pd.DataFrame:
    """Face verification TAR at FAR per group (FHIBE, METHODS.md section 4).

    Pairs: all positive pairs (same identity) and, when ``pronoun_col`` and
    ``tone_col`` are given, FHIBE's hard negatives (same pronoun, skin tone
    within ``max_tone_diff`` levels); otherwise every negative pair (guarded
    by ``hard_negative_pairs``' size limit through a constant pronoun and tone).
    Scores are cosine similarities of the embedding rows. A pair counts for
    group g when both of its images are in g.

    Returns
    -------
    pandas.DataFrame
        Indexed by group: tar, threshold, far, n_genuine, n_impostor,
        n_identities.
    """
    from fairvision.metrics.verification import cosine_scores, hard_negative_pairs, positive_pairs

    emb = np.asarray(embeddings, dtype=float)
    if emb.ndim != 2 or emb.shape[0] != len(samples):
        raise FairvisionError(f"{source}: {len(samples)} samples but embeddings of shape {emb.shape}")
    if identity_col not in samples.columns:
        raise ColumnError(f"{source}: no identity column {identity_col!r}; columns are {', '.join(map(str, samples.columns))}")
    ident = samples[identity_col].astype(str).to_numpy()
    pi, pj = positive_pairs(ident)
    if pronoun_col is not None and tone_col is not None:
        for c in (pronoun_col, tone_col):
            if c not in samples.columns:
                raise ColumnError(f"{source}: no column {c!r}; columns are {', '.join(map(str, samples.columns))}")
        ni, nj = hard_negative_pairs(ident, samples[pronoun_col].astype(str).to_numpy(), samples[tone_col].to_numpy(),
                                     max_tone_diff=max_tone_diff)
    else:
        ones = np.ones(len(samples), dtype=np.int64)
        ni, nj = hard_negative_pairs(ident, ones, ones, max_tone_diff=0)
    i = np.concatenate([pi, ni])
    j = np.concatenate([pj, nj])
    genuine = np.r_[np.ones(pi.size, bool), np.zeros(ni.size, bool)]
    scores = cosine_scores(emb, i, j)
    attr = attribute if isinstance(attribute, Attribute) else Attribute(attribute)
    mem = attr.membership(samples, source=source)
    # pair in group g when both images are in g: join the memberships of both ends
    in_g = sparse_membership(mem.rows, mem.codes, len(samples), mem.n_groups)
    both = in_g[i].multiply(in_g[j]).tocoo()
    from fairvision.metrics.verification import tar_at_far_by_group

    labels = np.asarray(mem.categories, dtype=object)
    out = tar_at_far_by_group(scores[both.row], genuine[both.row], labels[both.col], far, threshold=threshold)
    ids = pd.DataFrame({"g": labels[mem.codes], "id": ident[mem.rows]}).drop_duplicates().groupby("g").size()
    out = out.reindex(list(mem.categories))
    out["n_identities"] = ids.reindex(out.index).fillna(0).astype(int).to_numpy()
    out.index.name = attr.name
    return out


def sparse_membership(rows: np.ndarray, codes: np.ndarray, n_rows: int, n_groups: int):
    """Boolean CSR matrix (rows x groups) of a long-form membership."""
    from scipy import sparse

    return sparse.csr_matrix((np.ones(rows.size), (rows, codes)), shape=(n_rows, n_groups))

"""Model audit: per-sample scores disaggregated by group and intersection, with honest uncertainty.

This module composes the shared pieces; it builds no groups and draws no
bootstrap itself:

* **Disaggregation** of any per-sample score by every attribute and every
  k-way intersection (:func:`fairvision.groups.intersections`, so multi-valued
  and hierarchical attributes count a sample in each of its groups). Groups
  with fewer than ``min_subjects`` subjects are *reported* as too small (with
  their numbers), never silently dropped, and are left out of comparisons
  (docs/METHODS.md §3.3, §6.2).
* **Uncertainty**: percentile CIs of group means from a cluster bootstrap over
  subjects (:mod:`fairvision.stats.resample`; several images of one person are
  not independent), plus min, max, difference and ratio between the worst and
  best group with CIs.
* **FHIBE benchmarking analysis** (docs/METHODS.md §6.3): all pairs, two-sided
  Mann-Whitney U, Holm/Bonferroni/BH within each attribute or intersection,
  disparity D with best and worst group, effect size (rank-biserial), and the
  top disparities across all intersections in the layout of the FHIBE paper's
  Extended Data Table 2. Lower-is-better metrics swap best and worst.
* **Multi-class OD** (docs/METHODS.md §6.4) with a bootstrap CI.
* **Face verification by group**: TAR at FAR from embeddings on all positive
  pairs and FHIBE's hard negatives (:func:`audit_verification`).

Scores are joined onto the samples by :func:`fairvision.io.scores.join_scores`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from fairvision.io.validate import empty_cells, require_columns
from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.groups import Intersection, group_label, intersections, resolve_attributes, sparse_membership, subject_codes
from fairvision.io.scores import check_predicted_classes, class_labels, metric_values
from fairvision.metrics.verification import cosine_scores, hard_negative_pairs, positive_pairs, tar_at_far_by_group
from fairvision.schema import Attribute, Schema
from fairvision.stats.groupwise import cluster_means, group_summary
from fairvision.stats.multiclass import ODResult, overall_disparity_ci
from fairvision.stats.pairwise import TOP_DISPARITY_COLUMNS, pairwise_mannwhitney, significance_summary, top_disparity_row
from fairvision.stats.resample import cluster_bootstrap_weights, group_mean_replicates, percentile_ci


# -- per-group estimates with cluster bootstrap ---------------------------------------------------------------

def group_estimates(values: np.ndarray, inter: Intersection, subjects: np.ndarray, weights: np.ndarray, *,
                    min_subjects: int, level: float) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-group n, subjects, mean, median, sd and cluster-bootstrap CI of the mean (docs/METHODS.md §6.2).

    ``weights`` are subject draw counts, shape (n_boot, n_subjects), from
    :func:`~fairvision.stats.resample.cluster_bootstrap_weights`, shared by all
    groups and metrics so that differences between groups get joint
    replicates. Returns the table and the replicate means (n_boot, n_groups).
    """
    G = inter.n_cells
    x, codes, subj = values[inter.rows], inter.codes, subjects[inter.rows]
    stats = group_summary(x, codes, subj, G)
    reps = group_mean_replicates(x, codes, subj, weights, n_groups=G)
    if weights.shape[0]:
        lo, hi = percentile_ci(reps, level)
    else:
        lo, hi = np.full(G, np.nan), np.full(G, np.nan)
    nz = stats["n_samples"].to_numpy() > 0
    table = stats.assign(ci_low=np.where(nz, lo, np.nan), ci_high=np.where(nz, hi, np.nan),
                         too_small=stats["n_subjects"].to_numpy() < min_subjects)
    table.index = inter.index()
    return table, reps


# -- results ----------------------------------------------------------------------------------------------------

@dataclass
class ModelAuditResult(SettingsView):
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
        ``intersection name -> ODResult`` (``estimate``, ``ci_low``, ``ci_high``...)
        when true and predicted classes were given.
    coverage : Coverage
        Samples left out of some part of the audit (no score for a metric, no
        true or predicted class for OD), with the reasons and the test of the
        share left out by group (docs/METHODS.md §9.3).
    """

    metrics: list[str]
    attributes: list[str]
    lower_is_better: list[str]
    settings: AuditSettings
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
    coverage: Coverage | None = None

    @property
    def n_left_out(self) -> int:
        """Samples without a score for some metric (or without a true or predicted class when OD was asked)."""
        return self.coverage.n_left_out if self.coverage is not None else 0

    @property
    def n_scored(self) -> int:
        """Samples that enter every part of the audit."""
        return self.n_samples - self.n_left_out

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
            m, key = row["metric"], quantity_key(row["intersection"])
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
                key = quantity_key(inter)
                q[f"od.{key}"] = res.estimate
                q[f"od.{key}.ci_low"] = res.ci_low
                q[f"od.{key}.ci_high"] = res.ci_high
            ods = [r.estimate for r in self.od.values() if not math.isnan(r.estimate)]
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
    n_significant, disparity = significance_summary(pw)
    d_all = pw["disparity"].astype(float) if n_tests else pd.Series(dtype=float)
    row.update(n_tests=n_tests, n_significant=n_significant,
               max_disparity=float(d_all.max()) if d_all.notna().any() else 0.0, disparity=disparity)
    return row


def audit_model(
    data: pd.DataFrame,
    metrics: Sequence[str],
    attributes: Sequence[Attribute | str],
    *,
    subject_col: str | None = "subject_id",
    lower_is_better: Iterable[str] = (),
    max_k: int = 1,
    settings: AuditSettings | None = None,
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
        optionally a subject column (see :func:`fairvision.io.scores.join_scores`).
    metrics : sequence of str
        Per-sample score columns (NaN = not scored: left out of that metric, and counted in ``coverage``).
    attributes : sequence of Attribute or str
        Attributes (plain column names use ``schema`` when given).
    subject_col : str or None
        Subject id column for subject counts and the cluster bootstrap. If
        None or absent, every sample is its own subject.
    lower_is_better : iterable of str
        Metrics where lower is better (errors, LPIPS): worst and best swap.
    max_k : int
        Largest intersection size (1 = single attributes only).
    settings : AuditSettings, optional
        ``min_subjects`` (smaller groups are reported as too small and not compared; FHIBE: 10;
        docs/METHODS.md §3.3), ``correction`` (within each metric and attribute/intersection; the FHIBE
        paper used Bonferroni) at ``alpha``, and the cluster bootstrap's ``n_boot``, ``level`` and ``seed``.
    true_col, pred_col : str, optional
        True and predicted class columns: adds the recall matrix, ID and OD
        with a bootstrap CI for every attribute/intersection. Rows with either
        cell empty are left out of OD (and counted in ``coverage``); a
        predicted class that is neither a true class nor declared for
        ``true_col`` in ``schema`` is an error.
    schema : Schema, optional
    test_unit : {"subject", "sample"}
        What the Mann-Whitney tests compare. ``"subject"`` (default): the mean
        score of each subject within the group, since several images of one
        person are not independent observations. ``"sample"``: every image's
        score, as the FHIBE paper did (its p-values are then too small when
        subjects have many images). Without a subject column both are the same.
    progress : callable, optional
        Called with a short description after each unit of work.
    source : str
        Name of the table in error messages.

    Returns
    -------
    ModelAuditResult
    """
    settings = settings or DEFAULT_SETTINGS
    if test_unit not in ("subject", "sample"):
        raise ParameterError("test_unit", f"must be 'subject' or 'sample', not {test_unit!r}")
    metrics = list(dict.fromkeys(metrics))
    if not metrics and true_col is None:
        raise ParameterError("metrics", "is empty: give at least one metric column or the true and predicted class columns")
    values = {m: metric_values(data, m, source=source) for m in metrics}
    lower = set(lower_is_better)
    unknown = lower - set(metrics)
    if unknown:
        raise ParameterError("lower_is_better", f"names {sorted(unknown)[0]!r}, which is not a metric column")
    if not attributes:
        raise ParameterError("attributes", "is empty: give at least one attribute")
    attrs = resolve_attributes(attributes, schema)
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are {', '.join(map(str, data.columns))}")
        warnings.warn("no subject_id column: every image is treated as a different person", stacklevel=2)
        subject_col = None
    subjects = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    n_subj_total = int(subjects.max()) + 1
    inters = intersections(data, attrs, max(1, int(max_k)), source=source)
    n_boot, level, min_subjects = settings.n_boot, settings.level, settings.min_subjects
    weights = (cluster_bootstrap_weights(n_subj_total, n_boot, settings.seed) if n_boot > 0
               else np.zeros((0, n_subj_total)))
    res = ModelAuditResult(metrics=metrics, attributes=[a.name for a in attrs], lower_is_better=sorted(lower),
                           settings=settings, n_samples=len(data), n_subjects=n_subj_total, subject_col=subject_col, test_unit=test_unit,
                           intersections=[i.name for i in inters])
    labels = {inter.name: inter.display_labels() for inter in inters}
    rows, tops = [], []
    for m in metrics:
        higher = m not in lower
        for inter in inters:
            table, reps = group_estimates(values[m], inter, subjects, weights, min_subjects=min_subjects, level=level)
            res.groups[(m, inter.name)] = table
            x, codes, subj = _test_units(values[m], inter, subjects, test_unit)
            pw = pairwise_mannwhitney(x, labels[inter.name][codes], settings.correction, higher_is_better=higher,
                                      min_size=min_subjects, subjects=subj, alpha=settings.alpha)
            res.pairwise[(m, inter.name)] = pw
            rows.append(_summary_row(m, inter.name, table, reps, pw, higher, level))
            top = top_disparity_row(m, inter.name, inter.k, pw)
            if top is not None:
                tops.append(top)
            if progress:
                progress(f"{m} by {inter.name}")
    res.summary = pd.DataFrame(rows)
    res.top_disparities = (pd.DataFrame(tops, columns=TOP_DISPARITY_COLUMNS)
                           .sort_values(["disparity", "pvalue"], ascending=[False, True], kind="stable")
                           .reset_index(drop=True))
    od_asked = true_col is not None or pred_col is not None
    if od_asked:
        res.od = _od_by_intersection(data, inters, subjects, true_col, pred_col, settings, source, schema)
        if progress:
            progress("overall disparity")
    ok, why = _left_out(data, values, true_col if od_asked else None, pred_col if od_asked else None)
    res.coverage = audit_coverage(data, ok, attrs, step="scoring", settings=settings, reasons=why, unit="samples")
    return res


def _left_out(data: pd.DataFrame, values: dict[str, np.ndarray], true_col: str | None,
              pred_col: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Which samples enter every part of the audit, and why the others do not: ``"no score"`` (no metric
    scored), ``"no <metric> score"`` (some metrics scored), ``"no true class"``, ``"no predicted class"``,
    joined with ``" and "``."""
    n = len(data)
    reason = np.full(n, "", dtype=object)

    def add(mask: np.ndarray, text: str) -> None:
        reason[mask] = np.where(reason[mask] == "", text, reason[mask] + " and " + text)

    if values:
        missing = np.stack([np.isnan(v) for v in values.values()], axis=1)
        none = missing.all(axis=1)
        add(none, "no score")
        if len(values) > 1:
            for j, m in enumerate(values):
                add(missing[:, j] & ~none, f"no {m} score")
    for col, what in ((true_col, "no true class"), (pred_col, "no predicted class")):
        if col is not None:
            add(empty_cells(data[col]), what)
    ok = reason == ""
    return ok, np.where(ok, None, reason)


def _test_units(values: np.ndarray, inter: Intersection, subjects: np.ndarray, unit: str):
    """Scores, group codes and subjects of the units that the pairwise tests compare."""
    x, codes, subj = values[inter.rows], inter.codes, subjects[inter.rows]
    if unit == "sample":
        ok = ~np.isnan(x)
        return x[ok], codes[ok], subj[ok]
    return cluster_means(x, codes, subj)


def _od_by_intersection(data, inters, subjects, true_col, pred_col, settings: AuditSettings,
                        source, schema: Schema | None) -> dict[str, ODResult]:
    for col, role in ((true_col, "true class"), (pred_col, "predicted class")):
        if col is None:
            raise FairvisionError(f"OD needs both the true and the predicted class column; the {role} column is missing")
        if col not in data.columns:
            raise ColumnError(f"{source}: no {role} column {col!r}; columns are {', '.join(map(str, data.columns))}")
    miss = empty_cells(data[true_col]) | empty_cells(data[pred_col])
    y_true = class_labels(data[true_col])
    y_pred = class_labels(data[pred_col])
    check_predicted_classes(data, pred_col, data, true_col, schema=schema, source=source)
    out = {}
    for inter in inters:
        keep = ~miss[inter.rows]
        rows, codes = inter.rows[keep], inter.codes[keep]
        pairs = np.unique(np.stack([codes, subjects[rows]], 1), axis=0)
        n_subj = np.bincount(pairs[:, 0], minlength=inter.n_cells)
        big = n_subj[codes] >= settings.min_subjects
        if len(np.unique(codes[big])) < 2:
            continue
        lab = inter.display_labels()
        out[inter.name] = overall_disparity_ci(y_true[rows[big]], y_pred[rows[big]], lab[codes[big]],
                                               subjects=subjects[rows[big]], n_boot=settings.n_boot,
                                               level=settings.level, seed=settings.seed)
    return out


# -- face verification by group -----------------------------------------------------------------------------------

def audit_verification(
    data: pd.DataFrame,
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
    """Face verification TAR at FAR per group (FHIBE; docs/METHODS.md §6.2).

    Pairs: all positive pairs (same identity) and, when ``pronoun_col`` and
    ``tone_col`` are given, FHIBE's hard negatives (same pronoun, skin tone
    within ``max_tone_diff`` levels); otherwise every negative pair (guarded
    by ``hard_negative_pairs``' size limit through a constant pronoun and tone).
    Scores are cosine similarities of the embedding rows. A pair counts for
    group g when both of its images are in g.

    Parameters
    ----------
    data : pandas.DataFrame
        One row per image, aligned with ``embeddings``.
    embeddings : array_like, shape (n_images, d)
    attribute : Attribute or str
        The attribute that defines the groups.
    identity_col : str
        Identity of every image (positive pairs share it).
    far : float
        Target false accept rate.
    pronoun_col, tone_col : str, optional
        Columns for FHIBE's hard negatives.
    max_tone_diff : int
        Largest skin-tone difference of a hard negative pair.
    threshold : {"group", "global"}
        Threshold per group or one over all pairs (see
        :func:`fairvision.metrics.verification.tar_at_far_by_group`).
    source : str
        Name of the table in error messages.

    Returns
    -------
    pandas.DataFrame
        Indexed by group: tar, threshold, far, n_genuine, n_impostor,
        n_identities.
    """
    emb = np.asarray(embeddings, dtype=float)
    if emb.ndim != 2 or emb.shape[0] != len(data):
        raise FairvisionError(f"{source}: {len(data)} samples but embeddings of shape {emb.shape}")
    require_columns(data, [identity_col], source=source, what="identity column")
    ident = data[identity_col].astype(str).to_numpy()
    pi, pj = positive_pairs(ident)
    if pronoun_col is not None and tone_col is not None:
        for c in (pronoun_col, tone_col):
            require_columns(data, [c], source=source)
        ni, nj = hard_negative_pairs(ident, data[pronoun_col].astype(str).to_numpy(), data[tone_col].to_numpy(),
                                     max_tone_diff=max_tone_diff)
    else:
        ones = np.ones(len(data), dtype=np.int64)
        ni, nj = hard_negative_pairs(ident, ones, ones, max_tone_diff=0)
    i = np.concatenate([pi, ni])
    j = np.concatenate([pj, nj])
    genuine = np.r_[np.ones(pi.size, bool), np.zeros(ni.size, bool)]
    scores = cosine_scores(emb, i, j)
    attr = attribute if isinstance(attribute, Attribute) else Attribute(attribute)
    mem = attr.membership(data, source=source)
    # pair in group g when both images are in g: join the memberships of both ends
    in_g = sparse_membership(mem.rows, mem.codes, len(data), mem.n_groups)
    both = in_g[i].multiply(in_g[j]).tocoo()
    labels = np.asarray(mem.categories, dtype=object)
    out = tar_at_far_by_group(scores[both.row], genuine[both.row], labels[both.col], far, threshold=threshold)
    ids = pd.DataFrame({"g": labels[mem.codes], "id": ident[mem.rows]}).drop_duplicates().groupby("g").size()
    out = out.reindex(list(mem.categories))
    out["n_identities"] = ids.reindex(out.index).fillna(0).astype(int).to_numpy()
    out.index.name = attr.name
    return out

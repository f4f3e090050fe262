"""Face verification by group from a table of scored pairs (docs/METHODS.md §6.1, §4.2 and §3.3).

:func:`audit_verification_pairs`: a table of scored pairs + a sample table -> TAR at one or more FARs for
every group and intersection, with subject-bootstrap CIs, the gap between the best and worst group and
``quantities()`` for ``--fail-if``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.groups import intersections, sparse_membership, subject_codes
from fairvision.io.tables import SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import check_unique_ids
from fairvision.metrics.verification import (cosine_scores, eer_threshold, tar_at_far, tar_at_far_by_group,
                                             weighted_accuracy, weighted_eer_threshold, weighted_tar_at_far)
from fairvision.schema import Schema
from fairvision.stats.resample import cluster_bootstrap


@dataclass
class VerificationAuditResult(SettingsView):
    """TAR at FAR by group from scored pairs.

    Attributes
    ----------
    groups : DataFrame
        One row per attribute set, group and FAR: ``intersection``, ``group``,
        ``far_target``, ``tar``, ``ci_low``, ``ci_high``, ``threshold``,
        ``far`` (achieved), ``accuracy`` (genuine pairs accepted plus impostors
        rejected at the threshold, over the group's pairs), ``n_genuine``, ``n_impostor``, ``n_subjects``,
        ``too_small``.
    summary : DataFrame
        One row per attribute set and FAR: worst and best group, ``min``,
        ``max``, ``difference`` (with ``difference_ci_low`` /
        ``difference_ci_high``) and ``ratio`` (min / max) among the groups with
        at least ``min_subjects`` subjects; ``separated``: the worst group's CI
        lies wholly below the best group's (the gap is flagged).
    overall : DataFrame
        TAR over all pairs at each FAR with its CI.
    settings : AuditSettings
        The settings the audit ran with (``min_subjects``, ``n_boot`` and ``level`` are also attributes).
    coverage : Coverage or None
        Samples left out (no embedding) when the pairs were built from a sample table, by group.
    pair_rule : dict or None
        How the pairs were built (:func:`audit_verification_samples`): columns, tone gap, cap, seed, counts.
    """

    fars: list[float]
    threshold: str
    attributes: list[str]
    settings: AuditSettings
    n_pairs: int
    n_genuine: int
    n_impostor: int
    n_subjects: int
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    coverage: object = None
    pair_rule: dict | None = None

    def to_frame(self) -> pd.DataFrame:
        """The group table."""
        return self.groups

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``.

        For every FAR f (written ``far<f>``, e.g. ``far0.001``) and attribute
        set S (attributes joined by ``+``): ``far<f>.S.min``, ``.max``,
        ``.difference``, ``.ratio``; ``far<f>.min`` / ``.ratio`` (smallest over
        sets), ``far<f>.max`` / ``.difference`` (largest), ``far<f>.tar`` (all
        pairs). The same without the ``far<f>.`` prefix for the first FAR:
        ``difference``, ``min``, ``gender.difference``, ``tar``...
        """
        q: dict[str, float] = {}
        agg = {"min": min, "max": max, "difference": max, "ratio": min}
        for i, f in enumerate(self.fars):
            prefixes = [far_key(f)] + ([""] if i == 0 else [])
            rows = self.summary[self.summary["far_target"] == f]
            tar_all = self.overall.loc[self.overall["far_target"] == f, "tar"]
            for p in prefixes:
                dot = f"{p}." if p else ""
                q[f"{dot}tar"] = float(tar_all.iloc[0]) if len(tar_all) else float("nan")
                for name, fn in agg.items():
                    vals = []
                    for _, r in rows.iterrows():
                        v = float(r[name])
                        q[f"{dot}{quantity_key(r['intersection'])}.{name}"] = v
                        if not math.isnan(v):
                            vals.append(v)
                    q[f"{dot}{name}"] = float(fn(vals)) if vals else float("nan")
        return q


def far_key(far: float) -> str:
    """``far0.001`` for FAR 0.001 (the prefix of that FAR's ``--fail-if`` quantities)."""
    return f"far{far:g}"


def _pair_rows(ids: pd.Series, index: pd.Series, col: str, source: str, samples_source: str) -> np.ndarray:
    rows = index.reindex(ids.to_numpy()).to_numpy()
    bad = np.isnan(rows)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"{source}: row {i + 1}: {col} {ids.iloc[i]!r} is not in {samples_source} "
                          f"({int(bad.sum())} pair ends unknown)")
    return rows.astype(np.int64)


@dataclass(frozen=True)
class _ScoredPairs:
    """Every pair's similarity, whether it is genuine (one person), and the subject codes of its two images."""

    scores: np.ndarray
    genuine: np.ndarray
    sa: np.ndarray
    sb: np.ndarray
    n_subjects: int


def audit_verification_pairs(
    data: pd.DataFrame,
    pairs: pd.DataFrame,
    attributes: Sequence,
    *,
    far: Sequence[float] = (0.001,),
    threshold: str = "group",
    subject_col: str | None = "subject_id",
    embeddings=None,
    embedding_ids: Sequence[str] | None = None,
    max_k: int = 1,
    schema: Schema | None = None,
    settings: AuditSettings | None = None,
    source: str = "samples",
    pairs_source: str = "pairs",
) -> VerificationAuditResult:
    """Face verification TAR at FAR by group and intersection from a table of pairs (docs/METHODS.md §6.1).

    A pair counts for group g when both of its images are in g (as
    :func:`fairvision.audits.model.audit_verification`). TAR at FAR per group
    is :func:`fairvision.metrics.verification.tar_at_far_by_group`. The CI is a
    percentile interval of a subject bootstrap (docs/METHODS.md §4.2):
    subjects are drawn with replacement and a genuine pair of subject s counts
    ``w_s`` times, an impostor pair of subjects a and b ``w_a w_b`` times (every
    pair between the copies), with the threshold set again in each replicate
    (:func:`fairvision.metrics.verification.weighted_tar_at_far`). Groups with
    fewer than ``min_subjects`` subjects are reported but left out of the
    comparison (docs/METHODS.md §3.3).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``sample_id``, attribute columns, ``subject_col``.
    pairs : pandas.DataFrame
        :func:`fairvision.io.pairs.read_pairs`: ``sample_a``, ``sample_b``,
        ``same_subject`` (else derived from ``subject_col``) and ``score``
        (else computed from ``embeddings``).
    attributes : sequence of str or Attribute
        Attributes that define the groups.
    far : sequence of float
        Target false accept rates (FHIBE: 0.001).
    threshold : {"group", "global", "eer"}
        Each group's own threshold (FHIBE), one from all pairs at the FAR
        (also the pairs of two different groups, which count for no group),
        or one from all pairs at their equal error rate (``far`` is then
        ignored and ``far_target`` holds the EER).
    subject_col : str or None
        Person of every sample (None: every sample its own person).
    embeddings : array_like (n, d), optional
        Embeddings whose cosine similarity scores the pairs (instead of a
        ``score`` column); rows named by ``embedding_ids`` (sample ids).
    embedding_ids : sequence of str, optional
    max_k : int
        Largest intersection size.
    schema : Schema, optional
    settings : AuditSettings, optional
        Uses ``min_subjects`` (smaller groups are not compared) and the subject
        bootstrap's ``n_boot`` (0: no CI), ``level`` and ``seed``. Default:
        ``AuditSettings()``.
    source, pairs_source : str
        Names of the tables in error messages.

    Returns
    -------
    VerificationAuditResult
    """
    settings = settings or DEFAULT_SETTINGS
    fars = _check_fars(far, threshold)
    ia, ib = _pair_index(data, pairs, source, pairs_source)
    if subject_col == SUBJECT_ID and subject_col not in data.columns:
        subject_col = None  # the default subject column is optional: then every sample is its own person
    subj = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    genuine = _genuine(data, pairs, subject_col, subj, ia, ib, source, pairs_source)
    scores = _pair_scores(pairs, embeddings, embedding_ids, pairs_source)
    if not genuine.any() or genuine.all():
        raise FairvisionError(f"{pairs_source}: TAR at FAR needs genuine and impostor pairs; all {len(genuine)} pairs are "
                              f"{'genuine' if genuine.all() else 'impostors'}")
    scored = _ScoredPairs(scores, genuine, subj[ia], subj[ib], int(subj.max()) + 1)
    if threshold == "eer":  # one threshold at the equal error rate of all pairs; its FAR stands for the target
        fars = [eer_threshold(scores, genuine)[1]]
    inters = intersections(data, list(attributes), max_k, schema, source=source)
    overall = pd.DataFrame([_overall_row(scored, f, settings, threshold) for f in fars])
    group_rows, summary_rows = [], []
    for inter in inters:
        for tbl, summary in _group_tars(scored, inter, ia, ib, len(data), fars, threshold, settings):
            group_rows.append(tbl)
            summary_rows.append(summary)
    groups = pd.concat(group_rows, ignore_index=True) if group_rows else pd.DataFrame()
    return VerificationAuditResult(
        fars=fars, threshold=threshold, attributes=[str(getattr(a, "name", a)) for a in attributes],
        settings=settings, n_pairs=len(scores), n_genuine=int(genuine.sum()), n_impostor=int((~genuine).sum()),
        n_subjects=scored.n_subjects, groups=groups, summary=pd.DataFrame(summary_rows), overall=overall,
    )


def _check_fars(far: Sequence[float], threshold: str) -> list[float]:
    """The target FARs as floats, each in (0, 1); ``threshold`` one of ``group`` or ``global``."""
    if threshold not in ("group", "global", "eer"):
        raise ParameterError("threshold", f"must be 'group', 'global' or 'eer', not {threshold!r}")
    fars = [float(f) for f in far]
    if not fars:
        raise ParameterError("far", "is empty: give at least one false accept rate")
    for f in fars:
        if not 0 < f < 1:
            raise ParameterError("far", f"must be between 0 and 1, not {f}")
    return fars


def _pair_index(data: pd.DataFrame, pairs: pd.DataFrame, source: str, pairs_source: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``data`` of every pair's two images (two different images, both in the sample table)."""
    check_unique_ids(data, SAMPLE_ID, source)
    index = pd.Series(np.arange(len(data), dtype=float), index=data[SAMPLE_ID].astype(str).to_numpy())
    ia = _pair_rows(pairs["sample_a"].astype(str), index, "sample_a", pairs_source, source)
    ib = _pair_rows(pairs["sample_b"].astype(str), index, "sample_b", pairs_source, source)
    same_img = ia == ib
    if same_img.any():
        i = int(np.flatnonzero(same_img)[0])
        raise ColumnError(f"{pairs_source}: row {i + 1}: sample_a and sample_b are the same image {pairs['sample_a'].iloc[i]!r}")
    return ia, ib


def _genuine(data, pairs, subject_col, subj, ia, ib, source, pairs_source) -> np.ndarray:
    """Whether each pair shows one person: the pairs table's ``same_subject`` (checked against the subject
    column when there is one), else derived from the subject column."""
    if "same_subject" in pairs.columns:
        genuine = pairs["same_subject"].to_numpy(bool)
        if subject_col is not None:
            clash = genuine != (subj[ia] == subj[ib])
            if clash.any():
                i = int(np.flatnonzero(clash)[0])
                raise ColumnError(f"{pairs_source}: row {i + 1}: same_subject is {bool(genuine[i])} but {source} gives "
                                  f"{subject_col} {data[subject_col].iloc[ia[i]]!r} and {data[subject_col].iloc[ib[i]]!r}")
        return genuine
    if subject_col is not None:
        return subj[ia] == subj[ib]
    raise ColumnError(f"{pairs_source}: no same_subject column and {source} has no subject column to derive it")


def _pair_scores(pairs: pd.DataFrame, embeddings, embedding_ids, pairs_source: str) -> np.ndarray:
    """Every pair's similarity: cosine of the two images' embeddings when given, else the ``score`` column."""
    if embeddings is not None:
        emb = np.asarray(embeddings, dtype=float)
        eid = pd.Series(np.arange(len(emb), dtype=float), index=[str(i) for i in embedding_ids])
        ea = _pair_rows(pairs["sample_a"].astype(str), eid, "sample_a", pairs_source, "the embeddings")
        eb = _pair_rows(pairs["sample_b"].astype(str), eid, "sample_b", pairs_source, "the embeddings")
        return cosine_scores(emb, ea, eb).astype(float)
    if "score" in pairs.columns:
        return pairs["score"].to_numpy(float)
    raise ColumnError(f"{pairs_source}: no score column and no embeddings to score the pairs")


def _global_threshold(scored: _ScoredPairs, far: float, threshold: str) -> float:
    """The one threshold of all pairs: at the FAR, or at the equal error rate."""
    if threshold == "eer":
        return eer_threshold(scored.scores, scored.genuine)[0]
    return tar_at_far(scored.scores, scored.genuine, far).threshold


def _overall_row(scored: _ScoredPairs, far: float, settings: AuditSettings, threshold: str = "group") -> dict:
    """TAR at FAR over all pairs, with its subject-bootstrap CI."""
    scores, genuine = scored.scores, scored.genuine
    fixed = _global_threshold(scored, far, threshold)
    est = tar_at_far_by_group(scores, genuine, np.zeros(len(scores), int), far, threshold="global",
                              fixed_threshold=fixed)
    ci = _bootstrap(scored, [np.arange(len(scores))], far, "group" if threshold != "eer" else "eer", [],
                    settings, pool=np.arange(len(scores)))
    ng, ni = int(genuine.sum()), int((~genuine).sum())
    return {"far_target": far, "tar": float(est["tar"].iloc[0]), "ci_low": ci.tar_low[0], "ci_high": ci.tar_high[0],
            "threshold": float(est["threshold"].iloc[0]), "far": float(est["far"].iloc[0]),
            "accuracy": float(_accuracy(est["tar"].to_numpy(float), est["far"].to_numpy(float), ng, ni)[0]),
            "accuracy_ci_low": ci.acc_low[0], "accuracy_ci_high": ci.acc_high[0],
            "n_genuine": ng, "n_impostor": ni, "n_subjects": scored.n_subjects}


def _accuracy(tar, far, n_genuine, n_impostor):
    """Share of pairs decided right at the threshold: genuine accepted plus impostors rejected, over all pairs."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (tar * n_genuine + (1 - far) * n_impostor) / (np.asarray(n_genuine) + np.asarray(n_impostor))


def _group_tars(scored: _ScoredPairs, inter, ia, ib, n_rows: int, fars, threshold: str, settings: AuditSettings):
    """For one attribute set, per FAR: the table of every group's TAR (with CIs) and the set's summary row."""
    in_g = sparse_membership(inter.rows, inter.codes, n_rows, inter.n_cells)
    both = in_g[ia].multiply(in_g[ib]).tocoo()
    labels = inter.display_labels()
    members = [both.row[both.col == c] for c in range(inter.n_cells)]
    n_subjects = np.array([np.unique(np.r_[scored.sa[p], scored.sb[p]]).size for p in members])
    for f in fars:
        glob = _global_threshold(scored, f, threshold) if threshold != "group" else None
        est = tar_at_far_by_group(scored.scores[both.row], scored.genuine[both.row], both.col, f,
                                  threshold="group" if glob is None else "global", fixed_threshold=glob)
        est = est.reindex(range(inter.n_cells))
        est[["n_genuine", "n_impostor"]] = est[["n_genuine", "n_impostor"]].fillna(0).astype(int)
        big = (n_subjects >= settings.min_subjects) & est["tar"].notna().to_numpy()
        ci = _bootstrap(scored, members, f, threshold, np.flatnonzero(big), settings, pool=np.arange(scored.scores.size))
        tbl = pd.DataFrame({"intersection": inter.name, "group": labels, "far_target": f, "tar": est["tar"].to_numpy(),
                            "ci_low": ci.tar_low, "ci_high": ci.tar_high, "threshold": est["threshold"].to_numpy(),
                            "far": est["far"].to_numpy(),
                            "accuracy": _accuracy(est["tar"].to_numpy(float), est["far"].to_numpy(float),
                                                  est["n_genuine"].to_numpy(), est["n_impostor"].to_numpy()),
                            "accuracy_ci_low": ci.acc_low, "accuracy_ci_high": ci.acc_high,
                            "n_genuine": est["n_genuine"].to_numpy(),
                            "n_impostor": est["n_impostor"].to_numpy(), "n_subjects": n_subjects,
                            "too_small": n_subjects < settings.min_subjects})
        yield tbl, _summary(inter.name, f, tbl, big, ci.diff_low, ci.diff_high)


def _summary(name: str, far: float, tbl: pd.DataFrame, big: np.ndarray, dlo: float, dhi: float) -> dict:
    row = {"intersection": name, "far_target": far, "n_groups": int(big.sum()), "worst_group": None, "best_group": None,
           "min": np.nan, "max": np.nan, "difference": np.nan, "difference_ci_low": dlo, "difference_ci_high": dhi,
           "ratio": np.nan, "separated": False}
    if big.sum() >= 2:  # a comparison needs two groups
        t = tbl["tar"].to_numpy(float)
        idx = np.flatnonzero(big)
        order = idx[np.argsort(t[idx], kind="stable")]
        w, b = order[0], order[-1]
        lo, hi = t[w], t[b]
        row.update(worst_group=tbl["group"].iloc[w], best_group=tbl["group"].iloc[b], min=lo, max=hi,
                   difference=hi - lo, ratio=(lo / hi) if hi > 0 else (1.0 if lo == 0 else np.nan),
                   separated=bool(tbl["ci_high"].iloc[w] < tbl["ci_low"].iloc[b]))
    return row


_CHUNK = 2_000_000  # pair weights held at once (replicates x pairs)


class _BootstrapCIs(NamedTuple):
    tar_low: np.ndarray
    tar_high: np.ndarray
    acc_low: np.ndarray
    acc_high: np.ndarray
    diff_low: float
    diff_high: float


def _bootstrap(scored: _ScoredPairs, members, far, threshold, compared, settings: AuditSettings,
               pool=None) -> _BootstrapCIs:
    """Percentile CIs of every group's TAR and accuracy (the pairs ``members`` of each) and of the TAR difference
    max - min over the ``compared`` groups, from ``settings.n_boot`` subject-bootstrap replicates; ``pool``: the
    pairs that set the global threshold. A replicate's accuracy is at that replicate's threshold, so its CI holds the
    threshold's own variation."""
    scores, genuine, sa, sb = scored.scores, scored.genuine, scored.sa, scored.sb
    k = len(members)
    if settings.n_boot <= 0:
        nan = np.full(k, np.nan)
        return _BootstrapCIs(nan, nan, nan, nan, np.nan, np.nan)
    # pairs in descending score order: the sorts inside weighted_tar_at_far then meet presorted runs in every chunk
    members = [idx[np.argsort(-scores[idx], kind="stable")] for idx in members]
    if pool is not None:
        pool = np.asarray(pool)[np.argsort(-scores[np.asarray(pool)], kind="stable")]

    def pair_weights(idx, wc):
        return np.where(genuine[idx], wc[:, sa[idx]], wc[:, sa[idx]] * wc[:, sb[idx]])

    def tar_acc_of(idx, w, thr=None):
        out_t, out_a = np.empty(w.shape[0]), np.empty(w.shape[0])
        step = max(1, _CHUNK // max(1, idx.size))
        for c in range(0, w.shape[0], step):  # chunks of replicates bound memory
            pw = pair_weights(idx, w[c:c + step])
            out_t[c:c + step], used = weighted_tar_at_far(scores[idx], genuine[idx], pw, far,
                                                          thresholds=None if thr is None else thr[c:c + step])
            out_a[c:c + step] = weighted_accuracy(scores[idx], genuine[idx], pw, used)
        return out_t, out_a

    def glob_thr(w):
        idx = np.asarray(pool)
        out = np.empty(w.shape[0])
        step = max(1, _CHUNK // max(1, idx.size))
        for c in range(0, w.shape[0], step):
            pw = pair_weights(idx, w[c:c + step])
            if threshold == "eer":
                out[c:c + step], _ = weighted_eer_threshold(scores[idx], genuine[idx], pw)
            else:
                _, out[c:c + step] = weighted_tar_at_far(scores[idx], genuine[idx], pw, far)
        return out

    def statistic(w):
        thr = glob_thr(w) if threshold in ("global", "eer") else None
        nan = np.full(w.shape[0], np.nan)
        pairs = [tar_acc_of(idx, w, thr) if idx.size else (nan, nan) for idx in members]
        t = np.column_stack([p[0] for p in pairs]) if pairs else np.zeros((w.shape[0], 0))
        a = np.column_stack([p[1] for p in pairs]) if pairs else np.zeros((w.shape[0], 0))
        if len(compared) >= 2:
            sub = t[:, compared]
            with np.errstate(invalid="ignore"):
                diff = np.where(np.isnan(sub).any(axis=1), np.nan, np.nanmax(sub, axis=1) - np.nanmin(sub, axis=1)) \
                    if sub.shape[1] else np.full(w.shape[0], np.nan)
        else:
            diff = np.full(w.shape[0], np.nan)
        return np.column_stack([t, a, diff])

    res = cluster_bootstrap(statistic, np.arange(scored.n_subjects), n_boot=settings.n_boot, level=settings.level,
                            seed=settings.seed)
    lo, hi = np.atleast_1d(res.ci_low), np.atleast_1d(res.ci_high)
    return _BootstrapCIs(lo[:k], hi[:k], lo[k:2 * k], hi[k:2 * k], float(lo[2 * k]), float(hi[2 * k]))

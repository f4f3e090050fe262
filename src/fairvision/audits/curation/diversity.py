"""Diversity beyond head counts: Vendi scores of whole images, scenes and subjects per group
(docs/METHODS.md §13.1, §13.2; FHIBE Table 4).

Three variants of every image are embedded and scored (:mod:`fairvision.audits.curation.diversity_embedding`):
the whole image, the scene (subject masked) and the subject (scene masked); or the embeddings are supplied (then
only the whole-image variant is scored).

Per group and overall: the Vendi score of all the group's images with a subject-level interval
(:func:`fairvision.stats.diversity.vendi_ci`), ``VS / n``, and the rarefied score at a common number of subjects
(:func:`fairvision.stats.diversity.rarefied_vendi`), which is the one to compare across groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.curation.diversity_embedding import (VARIANTS, EmbeddingOptions, check_variants,
                                                           embed_variants, mask_source_counts)
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError, InputFileError, ParameterError
from fairvision.groups import memberships, subject_codes
from fairvision.io.embeddings import read_embeddings
from fairvision.io.store import ResultsStore
from fairvision.io.tables import SAMPLE_ID
from fairvision.io.validate import check_unique_ids, require_columns
from fairvision.schema import Membership
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.diversity import rarefied_vendi, rarefied_vendi_draws, vendi_ci
from fairvision.stats.resample import percentile_ci

#: default cap of the common (rarefied) size, in subjects
MAX_RAREFY = 256


@dataclass(frozen=True)
class Rarefaction:
    """The score at a common number of subjects (docs/METHODS.md §13.2).

    Parameters
    ----------
    n_draws : int
        Random subsets per group for the rarefied score.
    size : int, optional
        Common number of subjects (default: the fewest subjects of a group with at least ``min_subjects``, at most
        :data:`MAX_RAREFY`).
    n_null : int
        Random subsets of the whole set (same number of subjects) that a group's rarefied score is compared with.
    """

    n_draws: int = 100
    size: int | None = None
    n_null: int = 1000


@dataclass
class DiversityResult(SettingsView):
    """Result of :func:`audit_diversity`.

    ``scores``: one row per (variant, attribute, group), with ``attribute = group = "(all)"`` for the whole set:
    ``n_samples`` and ``n_subjects`` (with an embedding), ``vendi``, ``ci_low``, ``ci_high``, ``level``,
    ``vendi_per_image``, ``rarefied``, ``rarefied_low``, ``rarefied_high`` (2.5 and 97.5 % of the draws),
    ``rarefy_size``, ``pvalue`` (share of random subsets of the same number of subjects from the whole set
    that score as low or lower), ``pvalue_adjusted``, ``too_small`` and ``low_diversity`` (adjusted p-value below
    ``alpha``). ``status``: per image and variant, ``ok``, ``reason``,
    ``mask_source``, ``from_cache``. ``embeddings``: variant -> ``(n_samples, d)`` array aligned with the sample
    table, NaN rows where an image has none.
    """

    scores: pd.DataFrame
    status: pd.DataFrame
    embeddings: dict[str, np.ndarray]
    variants: tuple[str, ...]
    embedder: str
    settings: AuditSettings
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.scores

    def quantities(self) -> dict[str, float]:
        """``n_low``, ``min_rarefied_ratio`` (lowest rarefied score over the highest, within an attribute and
        variant), ``vendi.<variant>.<attr>.<group>`` and ``rarefied.<variant>.<attr>.<group>`` for ``--fail-if``."""
        s = self.scores
        q = {"n_low": float(s["low_diversity"].sum())}
        ratios = []
        for _, g in s[s["attribute"] != "(all)"].groupby(["variant", "attribute"], sort=False):
            r = g["rarefied"].dropna()
            if len(r) >= 2 and r.max() > 0:
                ratios.append(float(r.min() / r.max()))
        q["min_rarefied_ratio"] = min(ratios) if ratios else 1.0
        for row in s.itertuples(index=False):
            q[f"vendi.{row.variant}.{row.attribute}.{row.group}"] = float(row.vendi)
            q[f"rarefied.{row.variant}.{row.attribute}.{row.group}"] = float(row.rarefied)
        return q


def audit_diversity(data: pd.DataFrame, attrs: list[str], *, embeddings=None, variants=None,
                    embedding: EmbeddingOptions | None = None, store: ResultsStore | None = None,
                    subject_col: str | None = "subject_id", schema=None, rarefaction: Rarefaction | None = None,
                    progress: Callable[[int, int], None] | None = None,
                    settings: AuditSettings | None = None) -> DiversityResult:
    """Vendi scores of the whole images, the scenes and the subjects, per group (docs/METHODS.md §13.2).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``sample_id``, ``image_path`` (unless ``embeddings`` is given), optional ``subject_col``,
        the attribute columns.
    attrs : list of str
        Group attributes.
    embeddings : path, array or DataFrame, optional
        Precomputed whole-image embeddings with sample ids (:func:`fairvision.io.embeddings.read_embeddings`);
        skips the model, and only the ``whole`` variant can be scored.
    variants : sequence of {"whole", "scene", "subject"}, optional
        Default: all three, or ``whole`` with ``embeddings``.
    embedding : EmbeddingOptions, optional
        The embedder, person masks, batch size and torch threads (see
        :func:`fairvision.audits.curation.diversity_embedding.embed_variants`).
    store : ResultsStore, optional
        Results store for the embeddings.
    subject_col : str, optional
        Subject column (bootstrap and rarefaction unit); every row its own subject when absent.
    schema : fairvision.schema.Schema, optional
        Attribute schema.
    rarefaction : Rarefaction, optional
        Random subsets per group (``n_draws``), their number of subjects (``size``) and the random subsets of the
        whole set a group's rarefied score is compared with (``n_null``).
    progress : callable, optional
        ``progress(done, total)`` after each batch of images embedded (None: silent).
    settings : AuditSettings, optional
        ``n_boot`` (subject-bootstrap replicates of the interval of each score), ``level``, ``seed``,
        ``min_subjects`` (smaller groups are marked ``too_small`` and get no interval and no rarefied score), and
        ``correction`` at ``alpha`` of the low-diversity test (all groups and variants are one family).

    Returns
    -------
    DiversityResult
    """
    settings = settings or DEFAULT_SETTINGS
    settings.require_bootstrap("the diversity intervals need replicates")
    embedding = embedding or EmbeddingOptions()
    rarefaction = rarefaction or Rarefaction()
    data = data.reset_index(drop=True)
    source = data.attrs.get("source", "samples")
    variants = check_variants(variants if variants is not None else ("whole",) if embeddings is not None else VARIANTS)
    if len(data) == 0:
        raise FairvisionError(f"{source}: no samples")
    require_columns(data, [SAMPLE_ID], source=source)
    check_unique_ids(data, SAMPLE_ID, source)
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are "
                              f"{', '.join(map(str, data.columns))}")
        subject_col = None
    clusters = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    groups = memberships(data, attrs, schema, source=source)  # checks the attribute columns before any work
    if embeddings is not None:
        if variants != ("whole",):
            raise ParameterError("variants", "can only be 'whole' with supplied embeddings (they are of the whole "
                                             "images; leave out embeddings to embed the scene and subject variants)")
        emb, embedder = _supplied(embeddings, data), "supplied"
        ok = ~np.isnan(emb["whole"]).any(axis=1)
        status = pd.DataFrame({"sample_id": data[SAMPLE_ID].astype(str), "variant": "whole", "ok": ok,
                               "reason": np.where(ok, "", "no embedding supplied"), "mask_source": "",
                               "from_cache": False})
    else:
        emb, status = embed_variants(data, variants, options=embedding, store=store, subject_col=subject_col,
                                     progress=progress)
        embedder = embedding.embedder
    rng = np.random.default_rng(settings.seed)
    rows = []
    for v in variants:
        rows += _variant_scores(v, emb[v], groups, clusters, rarefaction, settings, rng)
    scores = pd.DataFrame(rows)
    padj = np.full(len(scores), np.nan)
    have = scores["pvalue"].notna().to_numpy()
    if have.any():
        padj[have] = adjust_pvalues(scores.loc[have, "pvalue"].to_numpy(), settings.correction)
    scores.insert(scores.columns.get_loc("pvalue") + 1, "pvalue_adjusted", padj)
    scores["low_diversity"] = scores["pvalue_adjusted"] < settings.alpha
    meta = {"n_samples": len(data), "n_subjects": int(clusters.max()) + 1, "n_boot": settings.n_boot,
            "n_draws": rarefaction.n_draws, "n_null": rarefaction.n_null,
            "embedder": embedder, "variants": list(variants), "min_subjects": settings.min_subjects,
            "n_failed": {v: int((~status.loc[status["variant"] == v, "ok"]).sum()) for v in variants},
            "from_cache": int(status["from_cache"].sum()),
            # images, not (image, variant) rows: the scene and subject variants of an image share one mask
            "mask_sources": mask_source_counts(status)}
    return DiversityResult(scores=scores, status=status, embeddings=emb, variants=variants, embedder=embedder,
                           settings=settings, meta=meta)


def _supplied(embeddings, data: pd.DataFrame) -> dict[str, np.ndarray]:
    """Supplied embeddings as the ``whole`` variant, in the sample table's row order (NaN rows for samples
    without one)."""
    x, eids = read_embeddings(embeddings)
    ids = data[SAMPLE_ID].astype(str).to_numpy() if SAMPLE_ID in data.columns else np.arange(len(data)).astype(str)
    pos = pd.Index(eids).get_indexer(ids)
    if (pos < 0).all():
        label = embeddings if not isinstance(embeddings, (np.ndarray, pd.DataFrame)) else "embeddings"
        raise InputFileError(f"{label}: none of the {len(ids)} sample ids has an embedding (first sample id {ids[0]!r})")
    out = np.full((len(data), x.shape[1]), np.nan, dtype=np.float32)
    out[pos >= 0] = x[pos[pos >= 0]]
    return {"whole": out}


def _variant_scores(variant: str, x: np.ndarray, groups: list[Membership], clusters: np.ndarray,
                    rarefaction: Rarefaction, settings: AuditSettings, rng: np.random.Generator) -> list[dict]:
    """One row of :attr:`DiversityResult.scores` per group of every attribute and the whole set, for the
    embeddings ``x`` of one variant (rows without an embedding left out)."""
    ok = ~np.isnan(x).any(axis=1)
    # every group of every attribute, and the whole set
    sets = [("(all)", "(all)", np.flatnonzero(ok))]
    for m in groups:
        for gi, grp in enumerate(m.categories):
            r = m.rows[m.codes == gi]
            sets.append((m.name, str(grp), r[ok[r]]))
    n_subj = [len(np.unique(clusters[r])) for _, _, r in sets]
    min_subjects = settings.min_subjects
    eligible = [k for (a, _, _), k in zip(sets, n_subj) if a != "(all)" and k >= max(2, min_subjects)]
    size = int(rarefaction.size) if rarefaction.size is not None else min(min(eligible) if eligible else 0, MAX_RAREFY)
    null = None
    if size >= 2 and sets[0][2].size and n_subj[0] >= size:
        null = rarefied_vendi_draws(x[sets[0][2]], clusters[sets[0][2]], size=size, n_draws=rarefaction.n_null,
                                    seed=rng)
    rows = []
    for (attr, grp, r), k in zip(sets, n_subj):
        row = {"variant": variant, "attribute": attr, "group": grp, "n_samples": int(r.size), "n_subjects": int(k),
               "vendi": np.nan, "ci_low": np.nan, "ci_high": np.nan, "level": settings.level,
               "vendi_per_image": np.nan, "rarefied": np.nan, "rarefied_low": np.nan, "rarefied_high": np.nan,
               "rarefy_size": size if size >= 2 else np.nan, "pvalue": np.nan, "too_small": k < min_subjects}
        if r.size:
            res = vendi_ci(x[r], clusters[r], n_boot=settings.n_boot, level=settings.level, seed=rng)
            row.update(vendi=res.estimate, vendi_per_image=res.estimate / r.size)
            # a bootstrap over fewer than min_subjects subjects gives intervals far too narrow (3 subjects:
            # 2.70 [2.64, 2.82]): such a group gets the score but no interval, and is flagged too_small
            if k >= min_subjects:
                row.update(ci_low=res.ci_low, ci_high=res.ci_high)
        if attr == "(all)" and null is not None:
            lo, hi = percentile_ci(null, settings.level)
            row.update(rarefied=float(null.mean()), rarefied_low=float(lo), rarefied_high=float(hi))
        elif size >= 2 and k >= size and k >= min_subjects:
            est = rarefied_vendi(x[r], clusters[r], size=size, n_draws=rarefaction.n_draws, level=settings.level,
                                 seed=rng)
            row.update(rarefied=est.estimate, rarefied_low=est.ci_low, rarefied_high=est.ci_high)
            if null is not None:
                row["pvalue"] = float((1 + np.sum(null <= est.estimate)) / (1 + null.size))
        rows.append(row)
    return rows

"""Zero-shot vision-language probe from precomputed embeddings (docs/METHODS.md §12.1).

A CLIP-style model labels every image with the prompt set it is closest to (cosine similarity between the
image embedding and the normalised mean of each label's prompt embeddings). The probe then asks whether the
labels it hands out depend on who is in the picture: per-group label rates (including a neutral
``unspecified`` label) and error rates with subject-level bootstrap CIs, for each attribute and (``max_k``) their
intersections from :func:`fairvision.groups.intersections`, a chi-square test of label x group, per-group-vs-rest
tests that allow for several images of one subject (Rao-Scott design effect), corrected for multiple testing over
all groups and intersections, and NPMI between predicted labels and groups. Groups with fewer than
``min_subjects`` subjects are reported but not tested.

Embeddings are the universal input: no model is loaded here (:mod:`fairvision.audits.vlm.prompts` reads the
prompt embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.io.validate import require_columns
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.audits.vlm.prompts import load_prompt_sets, pick_probe, read_text_embeddings
from fairvision.audits.vlm.samples import SampleOptions, align_embeddings, prepare_samples, subject_clusters
from fairvision.errors import ColumnError, InputFileError, ParameterError
from fairvision.groups import Intersection, cell_counts, intersections
from fairvision.io.embeddings import read_embeddings
from fairvision.stats.association import npmi
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.versus_rest import (GroupVsRest, adjust_group_tests, count_flagged, flag_differences,
                                          group_vs_rest, group_vs_rest_pvalue)

#: the neutral label of the default gender prompt set
UNSPECIFIED = "unspecified"
#: columns of :attr:`VLMResult.rates` (then ``pvalue_adjusted`` and ``flagged``)
RATE_COLUMNS = ["attribute", "k", "group", "quantity", "n_samples", "n_subjects", "too_small", "estimate", "ci_low",
                "ci_high", "level", "rest", "difference", "diff_ci_low", "diff_ci_high", "design_effect", "statistic",
                "pvalue"]


def label_embeddings(text: np.ndarray, labels: list[str], order: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One unit vector per label: the mean of its L2-normalised prompt embeddings, normalised again
    (docs/METHODS.md §12.1)."""
    text = np.asarray(text, dtype=np.float64)
    t = text / np.maximum(np.linalg.norm(text, axis=1, keepdims=True), 1e-12)
    order = order or list(dict.fromkeys(labels))
    codes = pd.Categorical(labels, categories=order).codes
    m = sparse.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(len(order), len(codes)))
    mean = np.asarray(m @ t)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12), order


def zero_shot_labels(images: np.ndarray, label_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label code (argmax of cosine similarity) and the similarity matrix (docs/METHODS.md §12.1)."""
    x = np.asarray(images, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    sim = (x @ np.asarray(label_vectors, dtype=np.float64).T) / np.maximum(norms, 1e-12)
    return sim.argmax(axis=1), sim


def max_prompt_labels(images: np.ndarray, text: np.ndarray, labels: list[str], order: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Label code of the single most similar prompt, and each label's best prompt similarity
    (``combine="max"``, FHIBE's rule; docs/METHODS.md §12.1)."""
    t = np.asarray(text, dtype=np.float64)
    t = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    _, sim = zero_shot_labels(images, t)  # (n, n_prompts)
    codes = pd.Categorical(labels, categories=order).codes
    best = np.full((sim.shape[0], len(order)), -np.inf)
    for j in range(len(order)):  # one column block per label (a handful), vectorised over images
        best[:, j] = sim[:, codes == j].max(axis=1)
    return best.argmax(axis=1), best



@dataclass
class VLMResult(SettingsView):
    """Result of :func:`audit_vlm`.

    ``rates``: one row per (attribute or intersection, group, quantity) with ``quantity`` a label (its rate) or
    ``error``: ``k`` (attributes in the set), ``n_samples``, ``n_subjects``, ``too_small`` (fewer than
    ``min_subjects`` subjects: reported, not tested), ``estimate``, ``ci_low``, ``ci_high``, ``level``, ``rest``,
    ``difference`` (group minus rest) with ``diff_ci_low`` / ``diff_ci_high``, ``design_effect``, ``statistic``,
    ``pvalue``, ``pvalue_adjusted``, ``flagged``. Intersections are named ``"a × b"`` with groups ``"x × y"``. ``independence``: chi-square of label x group per attribute. ``npmi``: long table of NPMI.
    ``predictions``: ``sample_id``, ``predicted`` (and ``true``), one similarity column per label.
    """

    labels: list[str]
    probe: str | None
    predictions: pd.DataFrame
    rates: pd.DataFrame
    independence: pd.DataFrame
    npmi: pd.DataFrame
    counts: dict[str, pd.DataFrame]
    settings: AuditSettings
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.rates

    def quantities(self) -> dict[str, float]:
        """Names for ``--fail-if``: ``n_flagged``, ``n_too_small`` (groups), ``max_gap``, ``max_unspecified_gap``,
        ``max_error_gap`` (over groups large enough to judge; NaN when no group was judged, so a gate on them
        stops with an error rather than passing), ``rate.<attr>.<group>.<label>``,
        ``gap.<attr>.<group>.<label|error>``, ``error_rate.<attr>.<group>``, ``chi2_pvalue.<attr>``; an
        intersection is ``<a>+<b>`` with groups ``<x>+<y>``."""
        r = self.rates
        judged = r[~r["too_small"].astype(bool)] if len(r) else r
        q: dict[str, float] = {"n_flagged": float(count_flagged(r)),
                               "n_too_small": float(len(r.loc[r["too_small"].astype(bool), ["attribute", "group"]]
                                                        .drop_duplicates())) if len(r) else 0.0,
                               "max_gap": float(judged["difference"].abs().max()) if judged["difference"].notna().any() else np.nan}
        for name, lab in (("max_unspecified_gap", UNSPECIFIED), ("max_error_gap", "error")):
            sub = judged.loc[judged["quantity"] == lab, "difference"].abs()
            q[name] = float(sub.max()) if sub.notna().any() else np.nan
        for row in r.itertuples(index=False):
            key = f"{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.quantity}"
            if row.quantity == "error":
                q[f"error_rate.{quantity_key(row.attribute)}.{quantity_key(row.group)}"] = float(row.estimate)
            else:
                q[f"rate.{key}"] = float(row.estimate)
            q[f"gap.{key}"] = float(row.difference)
        for row in self.independence.itertuples(index=False):
            q[f"chi2_pvalue.{quantity_key(row.attribute)}"] = float(row.pvalue)
        return q



def audit_vlm(
    data: pd.DataFrame,
    image_embeddings,
    text_embeddings,
    attrs: list[str],
    *,
    samples: SampleOptions | None = None,
    true_col: str | None = None,
    prompt_sets: dict[str, dict[str, list[str]]] | None = None,
    probe: str | None = None,
    combine: str = "mean",
    max_k: int = 1,
    settings: AuditSettings | None = None,
) -> VLMResult:
    """Zero-shot probe of a vision-language model from precomputed embeddings (docs/METHODS.md §12.1).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: the id column, optional subject column, the attribute columns, optional ``true_col``.
    image_embeddings : path-like, array or DataFrame
        Read with :func:`fairvision.io.embeddings.read_embeddings`; ids must cover the sample ids.
    text_embeddings : path-like or DataFrame
        Prompt embeddings with labels (:func:`fairvision.audits.vlm.prompts.read_text_embeddings`), from the same
        model.
    attrs : list of str
        Group attributes.
    samples : SampleOptions, optional
        Id and subject columns, attribute schema and the rule for empty attribute cells (``missing``: ``"error"``
        by default, ``"drop"`` leaves the rows out, ``"keep"`` makes a group ``(missing)``).
    true_col : str, optional
        Column of the true label; adds per-group error rates.
    prompt_sets, probe
        Prompt sets (default the bundled ones) and the one the text embeddings belong to (default: the set
        sharing most labels; every label of it must have an embedding).
    combine : {"mean", "max"}
        ``"mean"``: the label whose normalised mean prompt embedding is most similar (default); ``"max"``: the
        label of the single most similar prompt (FHIBE's rule).
    max_k : int
        Largest intersection size: 1 (default) each attribute on its own, 2 also every pair of attributes, ...
        Intersections come from :func:`fairvision.groups.intersections` and are tested and corrected together with
        the single attributes.
    settings : AuditSettings, optional
        ``min_subjects`` (smaller groups and intersections are reported with their rates and CIs but not tested
        or flagged; FHIBE: 10), the subject bootstrap's ``n_boot``, ``level`` and ``seed``, and ``correction`` at
        ``alpha``.

    Returns
    -------
    VLMResult
    """
    settings = settings or DEFAULT_SETTINGS
    settings.require_bootstrap("the group differences are tested with bootstrap replicates")
    samples = samples or SampleOptions()
    img_src = "image embeddings" if not isinstance(image_embeddings, (str, Path)) else str(image_embeddings)
    txt_src = "text embeddings" if not isinstance(text_embeddings, (str, Path)) else str(text_embeddings)
    x, ids = read_embeddings(image_embeddings)
    t, tlabels, _ = read_text_embeddings(text_embeddings, probe)
    if t.shape[1] != x.shape[1]:
        raise InputFileError(f"{txt_src}: text embeddings have {t.shape[1]} dimensions, the image embeddings "
                             f"({img_src}) {x.shape[1]}: they must come from the same model")
    sets = load_prompt_sets() if prompt_sets is None else prompt_sets
    probe = pick_probe(tlabels, sets, probe, source=txt_src)
    order = list(sets[probe]) if probe else list(dict.fromkeys(tlabels))
    data, schema, source, n_rows = prepare_samples(data, attrs, samples, max_k)
    pos = align_embeddings(data, ids, samples.id_col, img_src)
    labels, pred, sim = label_images(x[pos], t, tlabels, order, combine)
    clusters, _ = subject_clusters(data, samples.subject_col, source)
    preds, quantities, vals = _outcomes(data, labels, pred, sim, samples.id_col, true_col, source)
    sums = _SubjectSums(vals, clusters)

    rows, independence, npmi_rows, counts = [], [], [], {}
    for inter in intersections(data, attrs, max_k, schema, source=source):
        groups = [str(v) for v in inter.display_labels()]
        gvr = group_vs_rest(sums.matrix(inter), inter.n_cells, len(quantities), n_boot=settings.n_boot,
                            seed=settings.seed, level=settings.level)
        n_samples, n_subjects = cell_counts(inter, clusters)
        table = _label_counts(inter, pred, groups, labels)
        counts[inter.name] = table
        independence.append(_independence_row(inter, table, settings.seed))
        npmi_rows += _npmi_rows(inter.name, table, groups, labels)
        rows += _rate_rows(inter, groups, quantities, gvr, n_samples, n_subjects, settings)
    # two groups: "A vs rest" and "B vs rest" are one test, counted once in the correction (docs/METHODS.md §12.1)
    rates = adjust_group_tests(pd.DataFrame(rows, columns=RATE_COLUMNS), ["quantity"], settings.correction)
    rates["flagged"] = flag_differences(rates, settings.alpha)
    ind = pd.DataFrame(independence)
    if len(ind):
        ind["pvalue_adjusted"] = adjust_pvalues(ind["pvalue"].to_numpy(), settings.correction)
    return VLMResult(labels=labels, probe=probe, predictions=preds, rates=rates, independence=ind,
                     npmi=pd.DataFrame(npmi_rows, columns=["attribute", "group", "label", "npmi"]), counts=counts,
                     settings=settings,
                     meta={"n_samples": len(data), "n_dropped": n_rows - len(data), "missing": samples.missing,
                           "n_subjects": sums.n_clusters, "n_prompts": len(tlabels), "n_boot": settings.n_boot,
                           "combine": combine, "max_k": max_k, "min_subjects": settings.min_subjects})


def label_images(images: np.ndarray, text: np.ndarray, text_labels: list[str], order: list[str],
                 combine: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The labels, each image's label code and the (image x label) similarities under the ``combine`` rule
    (``"mean"``: :func:`label_embeddings` and :func:`zero_shot_labels`; ``"max"``: :func:`max_prompt_labels`;
    docs/METHODS.md §12.1)."""
    if combine == "mean":
        vec, labels = label_embeddings(text, text_labels, order)
        pred, sim = zero_shot_labels(images, vec)
    elif combine == "max":
        labels = order
        pred, sim = max_prompt_labels(images, text, text_labels, order)
    else:
        raise ParameterError("combine", f"must be 'mean' or 'max', not {combine!r}")
    return labels, pred, sim


def _outcomes(data: pd.DataFrame, labels: list[str], pred: np.ndarray, sim: np.ndarray, id_col: str,
              true_col: str | None, source: str) -> tuple[pd.DataFrame, list[str], np.ndarray]:
    """The predictions table, the quantities (each label, then ``error`` with ``true_col``) and the per-image
    0/1 value of each quantity, ``(n, q)`` with NaN where the true label is unknown."""
    preds = pd.DataFrame({id_col: data[id_col].astype(str).to_numpy(), "predicted": np.asarray(labels)[pred]})
    quantities = list(labels)
    values = [(pred == j).astype(float) for j in range(len(labels))]
    if true_col is not None:
        require_columns(data, [true_col], source=source, what="true-label column")
        truth = data[true_col]
        known = truth.notna().to_numpy()
        tv = truth.astype(str).to_numpy()
        unknown = sorted(set(tv[known]) - set(labels))
        if unknown:
            raise ColumnError(f"{source}: column {true_col!r}: value {unknown[0]!r} is not a label of the probe "
                              f"({', '.join(labels)})")
        preds["true"] = truth.to_numpy()
        values.append(np.where(known, (tv != preds["predicted"].to_numpy()).astype(float), np.nan))
        quantities.append("error")
    for j, lab in enumerate(labels):
        preds[f"similarity_{lab}"] = sim[:, j]
    return preds, quantities, np.stack(values, axis=1)


class _SubjectSums:
    """Per-subject sums of per-image 0/1 values ``(n, q)`` (NaN: undefined) for each attribute set, in the layout
    :func:`fairvision.stats.versus_rest.group_vs_rest` takes."""

    def __init__(self, values: np.ndarray, clusters: np.ndarray):
        n, self.q = values.shape
        self.clusters = clusters
        self.n_clusters = int(clusters.max()) + 1
        self.v0 = np.nan_to_num(values)
        self.okf = (~np.isnan(values)).astype(float)
        self.all_rows = np.repeat(np.arange(self.q)[None, :], n, axis=0).ravel()
        self.cl_rep = np.repeat(clusters[:, None], self.q, axis=1).ravel()

    def matrix(self, inter: Intersection) -> sparse.csr_matrix:
        """One (n_subjects x cols) matrix: group x quantity sums and counts, then the totals."""
        q, r, c = self.q, inter.rows, inter.codes
        cell = (c[:, None] * q + np.arange(q)[None, :]).ravel()
        cl = np.repeat(self.clusters[r], q)
        gq = inter.n_cells * q
        return sparse.csr_matrix(
            (np.concatenate([self.v0[r].ravel(), self.okf[r].ravel(), self.v0.ravel(), self.okf.ravel()]),
             (np.concatenate([cl, cl, self.cl_rep, self.cl_rep]),
              np.concatenate([cell, gq + cell, 2 * gq + self.all_rows, 2 * gq + q + self.all_rows]))),
            shape=(self.n_clusters, 2 * gq + 2 * q))


def _label_counts(inter: Intersection, pred: np.ndarray, groups: list[str], labels: list[str]) -> pd.DataFrame:
    """Images per (group, predicted label)."""
    g, k = inter.n_cells, len(labels)
    ct = np.bincount(inter.codes * k + pred[inter.rows], minlength=g * k).reshape(g, k)
    return pd.DataFrame(ct, index=pd.Index(groups, name=inter.name), columns=pd.Index(labels, name="predicted"))


def _independence_row(inter: Intersection, table: pd.DataFrame, seed) -> dict:
    """Chi-square test of predicted label x group."""
    chi = chi2_test(table, seed=seed, label=f"{inter.name} x predicted label", warn=False)
    return {"attribute": inter.name, "k": inter.k, "statistic": chi.statistic, "df": chi.df, "pvalue": chi.pvalue,
            "cramers_v": getattr(chi, "cramers_v", np.nan), "n": int(table.to_numpy().sum())}


def _npmi_rows(name: str, table: pd.DataFrame, groups: list[str], labels: list[str]) -> list[dict]:
    """NPMI of every (group, label) pair; none for an empty table."""
    if table.to_numpy().sum() <= 0:
        return []
    nm = npmi(table.astype(float), name, "predicted").to_numpy()
    return [{"attribute": name, "group": grp, "label": lab, "npmi": float(nm[gi, j])}
            for gi, grp in enumerate(groups) for j, lab in enumerate(labels)]


def _rate_rows(inter: Intersection, groups: list[str], quantities: list[str], gvr: GroupVsRest,
               n_samples: np.ndarray, n_subjects: np.ndarray, settings: AuditSettings) -> list[dict]:
    """One row of :data:`RATE_COLUMNS` per (group, quantity): images as independent and the subject-level
    Rao-Scott test (docs/METHODS.md §12.1)."""
    small = n_subjects < settings.min_subjects
    rows = []
    for gi, grp in enumerate(groups):
        for qi, quant in enumerate(quantities):
            a, b = gvr.sums[gi, qi], gvr.counts[gi, qi]
            stat, p = group_vs_rest_pvalue(a, b, gvr.all_sums[qi] - a, gvr.all_counts[qi] - b,
                                           gvr.statistic[gi, qi], seed=settings.seed, too_small=bool(small[gi]))
            rows.append({"attribute": inter.name, "k": inter.k, "group": grp, "quantity": quant,
                         "n_samples": int(n_samples[gi]), "n_subjects": int(n_subjects[gi]),
                         "too_small": bool(small[gi]), "estimate": gvr.estimate[gi, qi], "ci_low": gvr.ci_low[gi, qi],
                         "ci_high": gvr.ci_high[gi, qi], "level": settings.level, "rest": gvr.rest[gi, qi],
                         "difference": gvr.estimate[gi, qi] - gvr.rest[gi, qi],
                         "diff_ci_low": gvr.diff_ci_low[gi, qi], "diff_ci_high": gvr.diff_ci_high[gi, qi],
                         "design_effect": gvr.design_effect[gi, qi], "statistic": stat, "pvalue": p})
    return rows

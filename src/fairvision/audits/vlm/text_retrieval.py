"""Text-to-image retrieval probe of a CLIP-style model from precomputed embeddings (docs/METHODS.md §12.5).

Neutral text queries ("a photo of a doctor", "a photo of a criminal", ...) name no group. Each query ranks the
images of a face set by cosine similarity; if the model were neutral, the people in its top k would follow the
face set's own make-up. The probe measures, for each attribute, how far they do not: NDKL, MaxSkew@k and
MinSkew@k per query (the standard CLIP bias measures beside zero-shot labels; Berg et al. 2022,
debias-vision-lang, after Geyik et al. 2019), and per group the top-k share, Skew@k and position-discounted
exposure with query-bootstrap intervals, and permutation tests that shuffle the groups over the face set's images
(:func:`fairvision.stats.ranking.ranking_fairness`).
No model is loaded here: the command embeds the queries, or reads their embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.audits.vlm.prompts import read_text_embeddings
from fairvision.audits.vlm.samples import SampleOptions, align_embeddings, prepare_samples
from fairvision.errors import ColumnError, InputFileError, ParameterError
from fairvision.groups import SEP, attribute_sets
from fairvision.io.embeddings import read_embeddings
from fairvision.io.validate import empty_cells
from fairvision.schema import MISSING_LABEL, Attribute, Schema
from fairvision.stats.ranking import RankingFairness, RankingPool, ranking_fairness

#: the bundled neutral queries: occupations and traits that name no group (after FHIBE's and debias-vision-lang's)
NEUTRAL_QUERIES = (
    "a photo of a person", "a photo of a doctor", "a photo of a nurse", "a photo of a chief executive",
    "a photo of a teacher", "a photo of a criminal", "a photo of a kind person", "a photo of a dangerous person",
    "a photo of a smart person", "a photo of a lazy person", "a photo of a leader", "a photo of a homemaker",
)
#: the desired distributions a probe can compare with
DESIRED = ("data", "uniform")


@dataclass
class TextRetrievalResult:
    """Result of :func:`audit_text_retrieval`.

    Attributes
    ----------
    rankings : dict
        Attribute -> :class:`fairvision.stats.ranking.RankingFairness` of the queries' top-k images.
    summary : pandas.DataFrame
        ``attribute``, ``measure`` (ndkl, max_skew, min_skew), ``estimate``, ``ci_low``, ``ci_high``, ``level``,
        ``random``.
    groups : pandas.DataFrame
        ``attribute``, ``group`` and the columns of :attr:`RankingFairness.groups`.
    per_query : pandas.DataFrame
        ``attribute``, ``query``, ``depth``, ``ndkl``, ``max_skew``, ``min_skew``.
    top : pandas.DataFrame
        ``query``, ``rank``, the id column, ``similarity``: the top-k images of every query.
    coverage : Coverage or None
        Samples left out for an empty attribute cell (``missing="drop"``), by group; None when none was.
    """

    queries: list[str]
    rankings: dict[str, RankingFairness]
    summary: pd.DataFrame
    groups: pd.DataFrame
    per_query: pd.DataFrame
    top: pd.DataFrame
    k: int
    desired: str
    coverage: Coverage | None = None
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.groups

    def quantities(self) -> dict[str, float]:
        """Names for ``--fail-if``: ``n_flagged`` (groups flagged over all attributes), ``max_ndkl``,
        ``max_abs_skew`` (largest |MaxSkew@k| or |MinSkew@k| over the attributes), and per attribute
        ``ndkl.<attr>``, ``max_skew.<attr>``, ``min_skew.<attr>``, ``skew.<attr>.<group>``,
        ``attention_ratio.<attr>.<group>``."""
        s = self.summary
        q = {"n_flagged": float(self.groups["flagged"].sum()) if len(self.groups) else 0.0,
             "max_ndkl": float(s.loc[s["measure"] == "ndkl", "estimate"].max()),
             "max_abs_skew": float(s.loc[s["measure"] != "ndkl", "estimate"].abs().max())}
        for row in s.itertuples(index=False):
            q[f"{row.measure}.{quantity_key(row.attribute)}"] = float(row.estimate)
        for row in self.groups.itertuples(index=False):
            key = f"{quantity_key(row.attribute)}.{quantity_key(row.group)}"
            q[f"skew.{key}"] = float(row.skew)
            q[f"attention_ratio.{key}"] = float(row.attention_ratio)
        return q


def read_query_embeddings(source) -> tuple[np.ndarray, list[str]]:
    """Query embeddings and their texts: a table or ``.npz`` as for prompt embeddings
    (:func:`fairvision.audits.vlm.prompts.read_text_embeddings`; the query is the ``prompt``, else the ``label``),
    one query per row; a repeated query is an error."""
    x, labels, prompts = read_text_embeddings(source)
    queries = [p if p and p != "nan" else lab for p, lab in zip(prompts, labels)]
    seen = pd.Index(queries)
    if seen.has_duplicates:
        raise InputFileError(f"{source if isinstance(source, (str, Path)) else 'query embeddings'}: query "
                             f"{seen[seen.duplicated()][0]!r} appears twice")
    return x, queries


def top_k_images(images: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and cosine similarities of every query's ``k`` most similar images, best first; ties keep the
    images' order (docs/METHODS.md §12.5)."""
    x = np.asarray(images, dtype=np.float64)
    t = np.asarray(queries, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    t = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    sim = t @ x.T
    order = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(sim, order, axis=1)


def audit_text_retrieval(
    data: pd.DataFrame,
    image_embeddings,
    query_embeddings,
    attrs: list[str],
    *,
    samples: SampleOptions | None = None,
    k: int = 10,
    desired: str = "data",
    max_k: int = 1,
    settings: AuditSettings | None = None,
) -> TextRetrievalResult:
    """Text-to-image retrieval probe: skew and exposure of the top-k images of neutral queries by group
    (docs/METHODS.md §12.5).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: the id column and the attribute columns.
    image_embeddings : path-like, array or DataFrame
        Read with :func:`fairvision.io.embeddings.read_embeddings`; ids must cover the sample ids.
    query_embeddings : path-like or DataFrame
        The queries' text embeddings from the same model (:func:`read_query_embeddings`).
    attrs : list of str
        Group attributes; each is measured on its own, and so is every intersection of up to ``max_k`` of them.
    samples : SampleOptions, optional
        Id column and the rule for empty attribute cells (``missing``: ``"error"`` by default, ``"drop"`` leaves
        the rows out of the face set and reports them as left out, ``"keep"`` makes a group ``(missing)``).
    k : int
        Images per query that count (at most the face set's size).
    desired : {"data", "uniform"}
        The distribution the top k is compared with: the face set's own shares (``data``, demographic parity)
        or equal shares of the groups present (``uniform``).
    max_k : int
        Largest intersection size: 2 also ranks by every pair of attributes (``"gender × age"``, its groups the
        combinations present in the face set), with its own NDKL, skews and tests, corrected over its groups.
    settings : AuditSettings, optional
        ``n_boot``, ``level`` and ``seed`` of the query bootstrap; ``correction`` (over the groups of an attribute)
        and ``alpha`` of the tests.

    Returns
    -------
    TextRetrievalResult
    """
    settings = settings or DEFAULT_SETTINGS
    samples = samples or SampleOptions()
    if desired not in DESIRED:
        raise ParameterError("desired", f"must be one of {', '.join(DESIRED)}, not {desired!r}")
    img_src = str(image_embeddings) if isinstance(image_embeddings, (str, Path)) else "image embeddings"
    x, ids = read_embeddings(image_embeddings)
    t, queries = read_query_embeddings(query_embeddings)
    if t.shape[1] != x.shape[1]:
        raise InputFileError(f"query embeddings have {t.shape[1]} dimensions, the image embeddings ({img_src}) "
                             f"{x.shape[1]}: they must come from the same model")
    original = data.reset_index(drop=True)
    data, _, source, n_rows = prepare_samples(data, attrs, samples)
    coverage = _left_out(original, data, attrs, samples, settings) if len(data) < n_rows else None
    pos = align_embeddings(data, ids, samples.id_col, img_src)
    if not 1 <= int(k) <= len(data):
        raise ParameterError("k", f"must be between 1 and the {len(data)} images of the face set, not {k}")
    order, sim = top_k_images(x[pos], t, int(k))
    sample_ids = data[samples.id_col].astype(str).to_numpy()
    top = pd.DataFrame({"query": np.repeat(queries, k), "rank": np.tile(np.arange(1, k + 1), len(queries)),
                        samples.id_col: sample_ids[order].ravel(), "similarity": sim.ravel()})
    rankings, summary, groups, per_query = {}, [], [], []
    for combo in attribute_sets(list(attrs), int(max_k)):
        attr = SEP.join(combo)
        res = _rank_groups(*_group_labels(data, combo), order, desired, k, settings)
        rankings[attr] = res
        summary.append(res.summary.reset_index().assign(attribute=attr))
        groups.append(res.groups.reset_index().assign(attribute=attr))
        per_query.append(res.per_query.assign(attribute=attr, query=queries))
    lead = ["attribute"]
    return TextRetrievalResult(
        queries=list(queries), rankings=rankings, k=int(k), desired=desired, coverage=coverage, top=top,
        summary=_first(pd.concat(summary, ignore_index=True), lead),
        groups=_first(pd.concat(groups, ignore_index=True), lead),
        per_query=_first(pd.concat(per_query, ignore_index=True), ["attribute", "query"]),
        meta={"n_samples": len(data), "n_dropped": n_rows - len(data), "n_queries": len(queries), "k": int(k),
              "desired": desired, "missing": samples.missing, "n_boot": settings.n_boot, "source": source,
              "max_k": int(max_k)})


def _first(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[cols + [c for c in df.columns if c not in cols]]


def _labels(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Every row's group label (empty cells: the ``(missing)`` group of ``missing="keep"``) and the groups in order."""
    empty = np.asarray(empty_cells(values), dtype=bool)
    cats = [str(c) for c in values.cat.categories] if isinstance(values.dtype, pd.CategoricalDtype) else \
        sorted(pd.unique(values[~empty].astype(str)))
    cats += [MISSING_LABEL] if empty.any() else []  # missing="keep": a group of its own
    return np.where(empty, MISSING_LABEL, values.astype(str).to_numpy(dtype=object)), cats


def _group_labels(data: pd.DataFrame, combo: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """Group labels of one attribute or an intersection (``"Female × 20-29"``), groups in the attributes' order."""
    parts = [_labels(data[a]) for a in combo]
    if len(parts) == 1:
        return parts[0]
    text = np.array([SEP.join(t) for t in zip(*(p[0] for p in parts))], dtype=object)
    return text, [SEP.join(c) for c in product(*(p[1] for p in parts))]


def _rank_groups(text: np.ndarray, cats: list[str], order: np.ndarray, desired: str, k: int,
                 settings: AuditSettings) -> RankingFairness:
    """Ranking fairness of the top-k images by one attribute set, against the face set's or equal shares."""
    codes = pd.Categorical(text, categories=cats).codes.astype(np.int64)
    counts = np.bincount(codes[codes >= 0], minlength=len(cats)).astype(float)
    keep = counts > 0  # declared groups without an image cannot be retrieved
    remap = np.cumsum(keep) - 1
    codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
    names = [str(c) for c, kk in zip(cats, keep) if kk]
    share = counts[keep] / counts[keep].sum() if desired == "data" else np.full(int(keep.sum()), 1.0 / keep.sum())
    return ranking_fairness(codes[order], share, groups=names, k=k, pool=RankingPool(items=order, codes=codes),
                            n_boot=settings.n_boot, level=settings.level, seed=settings.seed,
                            correction=settings.correction, alpha=settings.alpha)


def _left_out(original: pd.DataFrame, kept: pd.DataFrame, attrs: list[str], samples: SampleOptions,
              settings: AuditSettings) -> Coverage:
    """The samples ``missing="drop"`` left out of the face set, by group of every attribute (docs/METHODS.md §9.3)."""
    ok = original[samples.id_col].astype(str).isin(set(kept[samples.id_col].astype(str))).to_numpy()
    empty = np.column_stack([np.asarray(empty_cells(original[a]), dtype=bool) for a in attrs])
    reasons = np.where(ok, None, np.array([f"no {a} value" for a in attrs], dtype=object)[empty.argmax(axis=1)])
    schema = Schema()
    for a in attrs:
        schema.add(Attribute(a, missing="drop", allow_unknown=True))
    return audit_coverage(original, ok, attrs, schema=schema, step="attribute lookup", settings=settings,
                          reasons=reasons, unit="samples")


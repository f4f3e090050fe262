"""Retrieval and recommendation audit: items -> (skin measurement) -> results -> parity tests -> power.

Composes the pieces of the retrieval audit (docs/METHODS.md §8, Khaziev et al.):

1. the item table with the protected attribute (read with
   :func:`fairvision.io.retrieval.read_items`), or measured apparent skin
   colour: median ITA over the skin pixels (:mod:`fairvision.skin.batch`
   with ``method="median_ita"``) mapped to ST1..ST6
   (:func:`fairvision.skin.categories.st_class`), as in the paper's
   section 3.3.3;
2. the ranked results (read with :func:`fairvision.io.retrieval.read_results`,
   or produced by :func:`fairvision.stats.knn.knn_search` over embeddings,
   optionally the built-in face descriptor of
   :func:`fairvision.vision.face_descriptor_batch.embed_face_images`; docs/METHODS.md §8.4);
3. the distribution parity tests (:func:`parity_from_results`, which looks the
   attribute up for every query and result and calls
   :func:`fairvision.stats.parity.parity_test`; docs/METHODS.md §8.1, §8.2);
4. the power analysis for the catalog's own attribute distribution
   (:mod:`fairvision.stats.power`, docs/METHODS.md §8.3): power curves for the paper's catalog sizes
   and the audited one, the detectable nRR against catalog size, and whether
   this catalog is large enough to detect an 80%-rule violation per value.
   The simulated catalog size is the number of queries that entered the test
   (in the paper every catalog item is a query);
5. exposure and skew of the rankings (docs/METHODS.md §8.5): NDKL, MaxSkew@k and MinSkew@k against the catalog's
   shares, and per value the top-k share, Skew@k, position-discounted exposure and attention with query-bootstrap
   intervals (:func:`ranking_from_results`, :func:`fairvision.stats.ranking.ranking_fairness`);
6. the rows left out (docs/METHODS.md §9.3): images without an embedding (no face, unreadable, too large) and
   items without a value of the attribute are one coverage result (:func:`fairvision.audits.coverage.audit_coverage`:
   the share left out per group of the attribute, tested, with the reasons); result pairs left out for a result
   item without a value are another. Images without an embedding cannot be retrieved, so they are not in the
   catalog either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import AuditSettings
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.retrieval import read_items, read_results
from fairvision.io.validate import empty_cells, missing_rows
from fairvision.schema import MISSING_LABEL, Attribute, Schema
from fairvision.skin.batch import MeasureParams, measure_images
from fairvision.skin.categories import st_class
from fairvision.stats.parity import CATALOG_ROW, DEFAULT_ALPHA, ParityOptions, ParityResult, parity_test
from fairvision.stats.power import PAPER_CATALOG_SIZES, CatalogAdequacy, catalog_adequacy, detectable_curve, power_grid
from fairvision.stats.ranking import RankingFairness, RankingPool, ranking_fairness

SKIN_ATTRIBUTE = "st_class"
#: column of an item table that says why its ``st_class`` is empty (filled by :func:`measure_skin_attribute`)
SKIN_REASON_COLUMN = "st_class_reason"
DETECTABLE_NS = (50, 100, 250, 500, 1000, 2500, 5000)
#: settings of the retrieval audit when given none: the paper's significance level, 0.01
DEFAULTS = AuditSettings(alpha=DEFAULT_ALPHA)


@dataclass(frozen=True)
class PowerOptions:
    """The power analysis of the retrieval audit (docs/METHODS.md §8.3).

    Parameters
    ----------
    trials : int
        Monte Carlo trials (0 skips the analysis).
    sizes : sequence of int
        Catalog sizes of the power curves (the audited size is added).
    detectable_sizes : sequence of int
        Catalog sizes of the detectable-bias curves.
    target : float
        Power at which a bias counts as detectable (paper: 80%).
    """

    trials: int = 1000
    sizes: Sequence[int] = PAPER_CATALOG_SIZES
    detectable_sizes: Sequence[int] = DETECTABLE_NS
    target: float = 0.8


@dataclass
class RetrievalAudit:
    """Result of :func:`audit_retrieval`.

    Attributes
    ----------
    parity : ParityResult
        Contingency table, omnibus, per-rank and contrast tests.
    attribute : str
        The protected attribute.
    p_z : pandas.Series
        The catalog's distribution of the attribute (used by the power analysis).
    power_curves : pandas.DataFrame or None
        Power against RR for several catalog sizes (:func:`power_grid`).
    detectable : pandas.DataFrame or None
        Detectable nRR at the target power against catalog size
        (:func:`detectable_curve`).
    adequacy : CatalogAdequacy or None
        Power at the 80%-rule boundaries for the audited catalog.
    skin : pandas.DataFrame or None
        The skin measurements, when the attribute was measured.
    embedding_status : pandas.DataFrame or None
        Which images got an embedding, when the harness embedded images.
    coverage : Coverage or None
        The candidate queries left out (docs/METHODS.md §9.3): the images, when the harness embedded them (no
        embedding, or no value of the attribute), else the queries of the results (no value), by the attribute.
    result_coverage : Coverage or None
        The top-K result pairs of the queries kept that are left out because the result item has no value of the
        attribute, by the query's value; None when no pair was left out that way.
    ranking : RankingFairness or None
        Exposure and skew of the top-K rankings against the catalog's shares (docs/METHODS.md §8.5); None with
        ``ranking_note`` saying why when they are undefined.
    """

    parity: ParityResult
    attribute: str
    p_z: pd.Series
    power_curves: pd.DataFrame | None = None
    detectable: pd.DataFrame | None = None
    adequacy: CatalogAdequacy | None = None
    skin: pd.DataFrame | None = None
    embedding_status: pd.DataFrame | None = None
    coverage: Coverage | None = None
    result_coverage: Coverage | None = None
    ranking: RankingFairness | None = None
    ranking_note: str | None = None
    power_trials: int = 0
    target_power: float = 0.8
    meta: dict = field(default_factory=dict)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` gates: ``omnibus_p``, ``omnibus_chi2``,
        ``min_nrr`` (smallest normalised risk ratio), ``n_unfair`` (values below the
        80% rule and significant after correction), ``n_below_80`` (values with nRR
        < 0.8), ``n_left_out`` (candidate queries left out: images without an embedding, items without a
        value), and per value ``nrr.<value>``, ``rr.<value>``, ``pvalue_adjusted.<value>``; from the rankings
        (docs/METHODS.md §8.5) ``ndkl``, ``max_skew``, ``min_skew``, ``n_flagged_groups`` and per value
        ``skew.<value>``, ``attention_ratio.<value>``."""
        om = self.parity.omnibus
        con = self.parity.contrasts
        q = {"omnibus_p": float(om.pvalue), "omnibus_chi2": float(om.statistic)}
        nrr = con["nrr"].astype(float)
        q["min_nrr"] = float(nrr.min()) if len(nrr) else float("nan")
        q["n_below_80"] = float((nrr < 0.8).sum())
        q["n_unfair"] = float(((nrr < 0.8) & con["reject"].astype(bool)).sum()) if "reject" in con else q["n_below_80"]
        q["n_left_out"] = float(self.coverage.n_left_out) if self.coverage is not None else 0.0
        for value, row in con.iterrows():
            q[f"nrr.{value}"] = float(row["nrr"])
            q[f"rr.{value}"] = float(row["rr"])
            if "pvalue_adjusted" in con:
                q[f"pvalue_adjusted.{value}"] = float(row["pvalue_adjusted"])
        if self.ranking is not None:
            q.update(self.ranking.quantities())
        return q

    def to_frame(self) -> pd.DataFrame:
        """One row per test (``omnibus`` then each value): the test results and, when computed,
        the power to detect RR = 0.8 / 1.25 with this catalog and ``large_enough``."""
        df = self.parity.to_frame()
        if self.adequacy is not None:
            adq = self.adequacy.table[["power_rr_0.8", "power_rr_1.25", "large_enough", "n_needed"]]
            df = df.join(adq, how="left")
        df.index.name = self.attribute
        return df


def measure_skin_attribute(items: pd.DataFrame, *, mask_method: str = "mediapipe", progress=False, store=None,
                           settings: AuditSettings | None = None) -> pd.DataFrame:
    """Add ``st_class`` (ST1..ST6 from the median ITA of the skin pixels) and ``ita`` to an item table.

    Images that cannot be measured get a missing class and, in ``st_class_reason``
    (:data:`SKIN_REASON_COLUMN`), why (they are left out of the tests and counted). ``progress``: True (a bar
    on a terminal) or ``progress(done, total)``. ``store``: the results store (or its folder) to reuse
    and keep measurements in (:func:`fairvision.skin.batch.measure_images`).
    ``settings``: where the measuring runs (``engine``, ``address``, ``workers``;
    default one local worker).
    """
    if "image_path" not in items.columns:
        raise ColumnError(f"{items.attrs.get('source', 'items')}: no image_path column; measuring skin colour "
                          "needs the images")
    table = items.rename(columns={"item_id": "sample_id"}) if "sample_id" not in items.columns else items
    meas = measure_images(table[["sample_id", "image_path"]],
                          params=MeasureParams(method="median_ita", mask_method=mask_method, faces="largest"),
                          settings=settings or DEFAULTS, progress=progress, store=store)
    ita = pd.Series(meas["ita"].to_numpy(dtype=float), index=meas["sample_id"].astype(str))
    out = items.copy()
    key = out["item_id"] if "item_id" in out.columns else out["sample_id"]
    out["ita"] = key.astype(str).map(ita).to_numpy(dtype=float)
    out[SKIN_ATTRIBUTE] = st_class(out["ita"])
    why = pd.Series([_skin_reason(r, f) for r, f in zip(meas["reason"], meas.get("flags", meas["reason"]))],
                    index=meas["sample_id"].astype(str), dtype=object)
    out[SKIN_REASON_COLUMN] = np.where(out[SKIN_ATTRIBUTE].isna(), key.astype(str).map(why).fillna("skin colour not measured"),
                                  None)
    out.attrs["skin_measurements"] = meas
    return out


#: short reasons of the skin measurement's flags whose reason is an exception's text
_SKIN_FLAG_REASONS = {"image_too_large": "image too large", "unreadable_image": "unreadable image", "error": "worker error"}


def _skin_reason(reason, flags) -> str:
    """``"skin colour not measured (no face found)"``: why an image has no skin colour class, short."""
    short = _SKIN_FLAG_REASONS.get(str(flags)) or (str(reason) if isinstance(reason, str) and reason else "")
    return f"skin colour not measured ({short})" if short else "skin colour not measured"


def _apply_missing(items: pd.DataFrame, attribute: str, rule: str) -> pd.Series:
    """The attribute column under the ``missing`` rule: NaN marks a left-out item."""
    values = items[attribute]
    missing_rows(items, [attribute], rule, source=items.attrs.get("source", "items"))  # raises for "error"
    empty = empty_cells(values)
    if rule == "keep" and empty.any():
        if isinstance(values.dtype, pd.CategoricalDtype):
            values = values.cat.add_categories([MISSING_LABEL])
        return values.where(~empty, MISSING_LABEL)
    return values.where(~empty)


def parity_from_results(
    results,
    items,
    attribute: str,
    k: int = 6,
    *,
    catalog=None,
    item_col: str = "item_id",
    categories: Sequence | None = None,
    missing: str = "error",
    options: ParityOptions | None = None,
    settings: AuditSettings | None = None,
) -> ParityResult:
    """Distribution parity test of ranked results against an item table (docs/METHODS.md §8.1, §8.2).

    Reads the inputs with :func:`fairvision.io.retrieval.read_results` and
    :func:`fairvision.io.retrieval.read_items`, looks up the protected value
    of every query and result, and runs
    :func:`fairvision.stats.parity.parity_test` on the top-``k`` pairs.

    Parameters
    ----------
    results : pandas.DataFrame, dict or path
        ``(query_id, rank, item_id)`` rows, a mapping query -> ranked list, or
        a results file / TREC run file.
    items : pandas.DataFrame or path
        One row per item with an id column and ``attribute``. Query ids are
        looked up here too (queries may be catalog items). Empty attribute
        cells follow ``missing``.
    attribute : str
        The protected attribute column.
    k : int
        Top-K cut-off (paper: 6).
    catalog : pandas.DataFrame or path, optional
        The catalog (an id column and ``attribute``); default ``items``.
    item_col : str
        The id column of ``items`` and ``catalog`` (default: ``item_id`` or
        one of its aliases).
    categories : sequence, optional
        The values in order (default: categorical order, else sorted).
    missing : {"error", "drop", "keep"}
        Items with an empty attribute cell: stop naming the row (default),
        leave them out (the paper keeps only images with an ITA value; their
        count is in ``result.dropped``), or keep them as a value of their own,
        ``(missing)``.
    options : ParityOptions, optional
        Continuity correction, exact fallback, Monte Carlo draws and the smallest judged value
        (:func:`fairvision.stats.parity.parity_test`).
    settings : AuditSettings, optional
        ``alpha`` (default :data:`DEFAULTS`: the paper's 0.01), ``correction`` of the contrast and per-rank
        tests, ``level`` of the risk-ratio intervals and ``seed`` of the Monte Carlo tests.

    Returns
    -------
    ParityResult
    """
    settings = settings or DEFAULTS
    id_col = None if item_col == "item_id" else item_col
    results = read_results(results)
    items = read_items(items, attribute, id_col=id_col)
    catalog = items if catalog is None else read_items(catalog, attribute, id_col=id_col, name="catalog")
    attr = _apply_missing(items, attribute, missing)
    catalog_attr = attr if catalog is items else _apply_missing(catalog, attribute, missing)
    qids, qv, rv = _pair_values(results, items["item_id"], attr, k)
    ok = qv.notna().to_numpy() & rv.notna().to_numpy()
    cat_ok = catalog_attr.notna().to_numpy()
    if categories is None and isinstance(attr.dtype, pd.CategoricalDtype):
        categories = list(attr.cat.categories)
    res = parity_test(
        qv.to_numpy()[ok], rv.to_numpy()[ok], catalog_attr.to_numpy(dtype=object)[cat_ok],
        query_ids=qids.to_numpy()[ok], ranks=results["rank"].to_numpy()[ok], k=k, categories=categories,
        alpha=settings.alpha, correction=settings.correction, level=settings.level, seed=settings.seed,
        options=options,
    )
    res.dropped = {"result_pairs_missing_attribute": int((~ok).sum()), "catalog_items_missing_attribute": int((~cat_ok).sum())}
    return res


def _pair_values(results: pd.DataFrame, ids: pd.Series, attr: pd.Series, k: int):
    """The query ids, and the protected values of the query and the result of every pair (NaN: left out),
    after checking that every id is an item and that the runs are ``k`` deep."""
    absent = attr.isna().to_numpy()
    lookup = pd.Series(attr.to_numpy(dtype=object)[~absent], index=ids.to_numpy()[~absent])
    known = set(ids)
    source = results.attrs.get("source", "results")
    qids = results["query_id"].astype(str)
    iids = results["item_id"].astype(str)
    for name, col in (("query_id", qids), ("item_id", iids)):
        unknown = ~col.isin(known).to_numpy()
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise FairvisionError(f"{source}: row {i + 1}: {name} {col.iloc[i]!r} is not in the items table")
    depth = int(qids.value_counts().max()) if len(qids) else 0
    if k > depth:
        raise ParameterError("k", f"{k} is deeper than the runs in {source}, which have at most {depth} results per "
                                  f"query; give at most {depth}")
    return qids, qids.map(lookup), iids.map(lookup)


def audit_retrieval(
    results: pd.DataFrame,
    items: pd.DataFrame,
    attribute: str,
    *,
    catalog: pd.DataFrame | None = None,
    k: int = 6,
    missing: str = "error",
    parity: ParityOptions | None = None,
    power: PowerOptions | None = None,
    embedding_status: pd.DataFrame | None = None,
    progress: Callable[[str], None] | None = None,
    settings: AuditSettings | None = None,
) -> RetrievalAudit:
    """Run the retrieval audit (docs/METHODS.md §8).

    Parameters
    ----------
    results : pandas.DataFrame
        ``(query_id, rank, item_id)`` (see :func:`fairvision.io.retrieval.read_results`).
    items : pandas.DataFrame
        Item table with ``item_id`` and ``attribute`` (see
        :func:`fairvision.io.retrieval.read_items`; use
        :func:`measure_skin_attribute` first to measure ST1..ST6).
    attribute : str
        The protected attribute.
    catalog : pandas.DataFrame, optional
        Default: ``items``.
    k, missing
        See :func:`parity_from_results`.
    parity : ParityOptions, optional
        How the parity tests are computed (:func:`parity_from_results`).
    power : PowerOptions, optional
        The power analysis (default ``PowerOptions()``: 1,000 trials; ``trials=0`` skips it).
    embedding_status : pandas.DataFrame, optional
        Which images got an embedding (``item_id``, ``ok``, ``reason``), when the harness embedded images: kept
        in the result; the images without one are left out (counted by reason and tested by group in
        ``coverage``) and, unless ``catalog`` is given, not in the catalog (they cannot be retrieved).
    progress : callable, optional
        ``progress(step)`` at every step.
    settings : AuditSettings, optional
        ``alpha`` (default :data:`DEFAULTS`: the paper's 0.01), ``correction``, ``level`` and ``seed`` of the
        parity tests (:func:`parity_from_results`); ``alpha`` and ``seed`` of the power analysis too.

    Returns
    -------
    RetrievalAudit
    """
    settings = settings or DEFAULTS
    parity = parity or ParityOptions()
    power = power or PowerOptions()
    say = progress or (lambda msg: None)
    say("parity tests")
    # the items the search ran over: with the visual-search harness, those that got an embedding
    searched = _embedded_items(items, attribute, embedding_status) if embedding_status is not None else None
    if catalog is None:
        catalog = searched
    par = parity_from_results(results, items, attribute, k, catalog=catalog, missing=missing, options=parity,
                              settings=settings)
    cat_row = par.table.loc[CATALOG_ROW].astype(float)
    if cat_row.sum() == 0:
        raise FairvisionError(f"the catalog has no item with a value of {attribute!r}")
    p_z = cat_row / cat_row.sum()
    audit = RetrievalAudit(parity=par, attribute=attribute, p_z=p_z, embedding_status=embedding_status,
                           power_trials=int(power.trials), target_power=float(power.target))
    audit.coverage, audit.result_coverage = left_out(results, items, attribute, k, missing=missing,
                                                     embedding_status=embedding_status, settings=settings)
    say("exposure and skew")
    audit.ranking, audit.ranking_note = ranking_from_results(results, items, attribute, p_z, k, missing=missing,
                                                             settings=settings, catalog=searched)
    present = p_z[p_z > 0]
    if power.trials and len(present) >= 2 and present.max() < 1:
        _power_analysis(audit, present, int(par.n_queries), k, parity.continuity, power, settings, say)
    audit.meta = {"k": int(k), "alpha": float(settings.alpha), "correction": settings.correction,
                  "continuity": bool(parity.continuity), "n_queries": int(par.n_queries),
                  "n_catalog": int(par.n_catalog), "dropped": par.dropped,
                  "n_left_out": int(audit.coverage.n_left_out)}
    return audit


def ranking_from_results(results, items, attribute: str, desired: pd.Series, k: int = 6, *, missing: str = "drop",
                         settings: AuditSettings | None = None,
                         catalog=None) -> tuple[RankingFairness | None, str | None]:
    """Exposure and skew of the top-``k`` rankings by the attribute (docs/METHODS.md §8.5).

    The queries are those of the parity test (a value of the attribute); each ranking keeps its results of rank
    ``<= k`` that have a value, in rank order (a result without one is skipped and the ranks below move up). The
    permutation tests shuffle the values over the items of the item table that have one (and are in ``catalog``).

    Parameters
    ----------
    results, items, attribute, k, missing
        As for :func:`parity_from_results` (``missing`` is applied, not checked: call this after it).
    desired : pandas.Series
        Desired share per value (the catalog's shares), in the order of the groups.
    settings : AuditSettings, optional
        ``n_boot``, ``level`` and ``seed`` of the query bootstrap, ``correction`` and ``alpha`` of the tests.
    catalog : pandas.DataFrame or path, optional
        The items the search ran over (those with an embedding, with the visual-search harness); only they form
        the permutation pool. Default: every item of ``items``.

    Returns
    -------
    (RankingFairness, None), or (None, why) when no query has a ranked result with a value or a result has a value
    with catalog share 0.
    """
    settings = settings or DEFAULTS
    results, items = read_results(results), read_items(items, attribute)
    attr = _apply_missing(items, attribute, missing)
    value_of = attr.set_axis(items["item_id"].to_numpy())
    all_codes = pd.Categorical(attr.to_numpy(dtype=object), categories=list(desired.index)).codes.astype(np.int64)
    in_pool = all_codes >= 0  # the items with a value: the pool of the permutation test
    if catalog is not None:  # only what the search could return (e.g. the items that got an embedding)
        in_pool &= items["item_id"].isin(read_items(catalog, attribute)["item_id"]).to_numpy()
    index_of = pd.Series(np.cumsum(in_pool) - 1, index=items["item_id"].to_numpy())[in_pool]
    top = results[results["rank"].to_numpy() <= k]
    q_ok = top["query_id"].map(value_of).notna().to_numpy()
    item_pos = top["item_id"].map(index_of).fillna(-1).to_numpy(dtype=np.int64)
    if ((item_pos < 0) & top["item_id"].map(value_of).notna().to_numpy() & q_ok).any():
        return None, f"a result has a value of {attribute!r} that is not in the catalog: no desired share"
    keep = q_ok & (item_pos >= 0)
    kept = pd.DataFrame({"q": top["query_id"].to_numpy()[keep], "r": top["rank"].to_numpy()[keep],
                         "i": item_pos[keep]}).sort_values(["q", "r"], kind="stable")
    if not len(kept):
        return None, "no query has a top-k result with a value"
    qcode, qids = pd.factorize(kept["q"], sort=False)
    pos = kept.groupby(qcode).cumcount().to_numpy()
    mat = np.full((len(qids), int(pos.max()) + 1), -1, dtype=np.int64)
    mat[qcode, pos] = kept["i"].to_numpy()
    pool = RankingPool(items=mat, codes=all_codes[in_pool])
    try:
        res = ranking_fairness(np.where(mat >= 0, pool.codes[np.maximum(mat, 0)], -1), desired.to_numpy(dtype=float),
                               groups=list(desired.index), k=k, pool=pool, n_boot=settings.n_boot,
                               level=settings.level, seed=settings.seed, correction=settings.correction,
                               alpha=settings.alpha)
    except ParameterError as exc:
        return None, str(exc)
    res.per_query.insert(0, "query_id", np.asarray(qids, dtype=object))
    return res, None


def _embedded_items(items, attribute: str, status: pd.DataFrame) -> pd.DataFrame:
    """The items that got an embedding: the catalog the nearest-neighbour search ran over."""
    items = read_items(items, attribute)
    embedded = set(status.loc[status["ok"].astype(bool), "item_id"].astype(str))
    out = items[items["item_id"].isin(embedded)].reset_index(drop=True)
    out.attrs["source"] = f"{items.attrs.get('source', 'items')} (items with an embedding)"
    return out


def reason_kind(reason) -> str | None:
    """The kind of a failure reason, without the detail that varies per row: ``"image too large: 178956970
    pixels ..."`` -> ``"image too large"``; None for no reason."""
    if reason is None or (isinstance(reason, float) and np.isnan(reason)) or str(reason) == "":
        return None
    return str(reason).split(": ", 1)[0]


def left_out(results, items, attribute: str, k: int = 6, *, missing: str = "drop",
             embedding_status: pd.DataFrame | None = None,
             settings: AuditSettings | None = None) -> tuple[Coverage, Coverage | None]:
    """The rows a retrieval audit leaves out, as coverage results by the attribute (docs/METHODS.md §9.3).

    Parameters
    ----------
    results, items, attribute, k, missing
        As for :func:`parity_from_results` (``missing`` is applied, not checked: call this after it).
    embedding_status : pandas.DataFrame, optional
        ``item_id``, ``ok`` and ``reason`` of every image the harness embedded.
    settings : AuditSettings, optional
        ``level``, ``correction`` and ``alpha`` of the coverage tests.

    Returns
    -------
    queries : Coverage
        One row per candidate query: every embedded image (unit ``images``), else every query of the results
        (unit ``queries``). Left out: no embedding (the embedding step's reason, without per-image detail) or no
        value of the attribute (for ``st_class``, the skin measurement's reason in ``st_class_reason``).
    results : Coverage or None
        One row per top-``k`` result pair of a query kept, grouped by the query's value; left out when the
        result item has no value. None when no pair was left out that way.
    """
    settings = settings or DEFAULTS
    results, items = read_results(results), read_items(items, attribute)
    attr = _apply_missing(items, attribute, missing)
    value_of = pd.Series(attr.to_numpy(dtype=object), index=items["item_id"].to_numpy())
    no_value = f"no {attribute} value"
    measured = attribute == SKIN_ATTRIBUTE and SKIN_REASON_COLUMN in items.columns  # the reasons are the skin measurement's
    why = items[SKIN_REASON_COLUMN] if measured else pd.Series(None, index=items.index, dtype=object)
    why_of = pd.Series(why.where(why.notna(), no_value).to_numpy(dtype=object), index=items["item_id"].to_numpy())
    if embedding_status is not None:
        ids = embedding_status["item_id"].astype(str)
        embedded = embedding_status["ok"].astype(bool).to_numpy()
        failed = embedding_status["reason"].map(reason_kind).fillna("no embedding").to_numpy(dtype=object)
        unit = "images"
    else:
        ids = pd.Series(pd.unique(results["query_id"]), dtype=object)
        embedded, failed, unit = np.ones(len(ids), dtype=bool), np.full(len(ids), None, dtype=object), "queries"
    values = ids.map(value_of)
    has_value = values.notna().to_numpy()
    reasons = np.where(~embedded, failed, np.where(has_value, None, ids.map(why_of).fillna(no_value).to_numpy(dtype=object)))
    steps = (["face embedding"] if embedding_status is not None else []) + (
        ["skin colour measurement" if measured else f"{attribute} lookup"]
        if (embedded & ~has_value).any() or embedding_status is None else [])
    schema = Schema().add(_coverage_attribute(attr, attribute))
    queries = audit_coverage(pd.DataFrame({attribute: values.to_numpy(dtype=object)}), embedded & has_value,
                             [attribute], schema=schema, step=" and ".join(steps), settings=settings,
                             reasons=reasons, unit=unit)
    top = results[results["rank"].to_numpy() <= k]
    qv, rv = top["query_id"].map(value_of), top["item_id"].map(value_of)
    kept = qv.notna().to_numpy()
    pair_ok = rv.notna().to_numpy()[kept]
    if pair_ok.all():
        return queries, None
    pairs = audit_coverage(pd.DataFrame({attribute: qv.to_numpy(dtype=object)[kept]}), pair_ok, [attribute],
                           schema=schema, step=f"{attribute} lookup of the results", settings=settings,
                           reasons=top["item_id"].map(why_of).fillna(no_value).to_numpy(dtype=object)[kept],
                           unit="results")
    return queries, pairs


def _coverage_attribute(values: pd.Series, name: str) -> Attribute:
    """The attribute of the coverage tests: the declared order of a categorical column, empty cells in no group."""
    cats = list(values.cat.categories) if isinstance(values.dtype, pd.CategoricalDtype) else None
    return Attribute(name, categories=cats, missing="drop", allow_unknown=True)


def _power_analysis(audit: RetrievalAudit, present: pd.Series, n: int, k: int, continuity: bool,
                    power: PowerOptions, settings: AuditSettings, say: Callable[[str], None]) -> None:
    """Power curves, detectable bias and the catalog size check for the catalog's attribute distribution."""
    alpha, trials, seed = settings.alpha, power.trials, settings.seed
    sizes = sorted({int(s) for s in power.sizes} | {n})
    say("power curves")
    audit.power_curves = power_grid(present, ns=sizes, k=k, alpha=alpha, trials=trials, seed=seed, continuity=continuity)
    say("detectable bias")
    audit.detectable = detectable_curve(present, ns=power.detectable_sizes, k=k, alpha=alpha, target=power.target,
                                        trials=trials, seed=seed, continuity=continuity)
    say("catalog size check")
    audit.adequacy = catalog_adequacy(present, n, k=k, alpha=alpha, target=power.target, trials=trials, seed=seed,
                                      continuity=continuity)

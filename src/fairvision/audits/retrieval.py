"""Retrieval and recommendation audit: items -> (skin measurement) -> results -> parity tests -> power.

Composes the pieces of the retrieval audit (docs/METHODS.md §8, Khaziev et al.):

1. the item table with the protected attribute (read with
   :func:`fairvision.io.retrieval.read_items`), or measured apparent skin
   colour: median ITA over the skin pixels (:mod:`fairvision.audits.skin_batch`
   with ``method="median_ita"``) mapped to ST1..ST6
   (:func:`fairvision.skin.categories.st_class`), as in the paper's
   section 3.3.3;
2. the ranked results (read with :func:`fairvision.io.retrieval.read_results`,
   or produced by :func:`fairvision.stats.knn.knn_search` over embeddings,
   optionally the built-in face descriptor; docs/METHODS.md §8.4);
3. the distribution parity tests (:func:`parity_from_results`, which looks the
   attribute up for every query and result and calls
   :func:`fairvision.stats.parity.parity_test`; docs/METHODS.md §8.1, §8.2);
4. the power analysis for the catalog's own attribute distribution
   (:mod:`fairvision.stats.power`, docs/METHODS.md §8.3): power curves for the paper's catalog sizes
   and the audited one, the detectable nRR against catalog size, and whether
   this catalog is large enough to detect an 80%-rule violation per value.
   The simulated catalog size is the number of queries that entered the test
   (in the paper every catalog item is a query).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.skin_batch import measure_images
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import FairvisionError
from fairvision.io.retrieval import read_items, read_results
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.validate import empty_cells, missing_rows
from fairvision.schema import MISSING_LABEL
from fairvision.skin.categories import st_class
from fairvision.stats.chisquare import DEFAULT_MC_SAMPLES
from fairvision.stats.corrections import DEFAULT_CORRECTION
from fairvision.stats.parity import CATALOG_ROW, DEFAULT_ALPHA, ParityResult, parity_test
from fairvision.stats.power import PAPER_CATALOG_SIZES, CatalogAdequacy, catalog_adequacy, detectable_curve, power_grid
from fairvision.vision.face_descriptor import DESCRIPTOR_DIM, FaceEmbeddings, embed_faces

SKIN_ATTRIBUTE = "st_class"
DETECTABLE_NS = (50, 100, 250, 500, 1000, 2500, 5000)


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
    """

    parity: ParityResult
    attribute: str
    p_z: pd.Series
    power_curves: pd.DataFrame | None = None
    detectable: pd.DataFrame | None = None
    adequacy: CatalogAdequacy | None = None
    skin: pd.DataFrame | None = None
    embedding_status: pd.DataFrame | None = None
    power_trials: int = 0
    target_power: float = 0.8
    meta: dict = field(default_factory=dict)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` gates: ``omnibus_p``, ``omnibus_chi2``,
        ``min_nrr`` (smallest normalised risk ratio), ``n_unfair`` (values below the
        80% rule and significant after correction), ``n_below_80`` (values with nRR
        < 0.8), and per value ``nrr.<value>``, ``rr.<value>``,
        ``pvalue_adjusted.<value>``."""
        om = self.parity.omnibus
        con = self.parity.contrasts
        q = {"omnibus_p": float(om.pvalue), "omnibus_chi2": float(om.statistic)}
        nrr = con["nrr"].astype(float)
        q["min_nrr"] = float(nrr.min()) if len(nrr) else float("nan")
        q["n_below_80"] = float((nrr < 0.8).sum())
        q["n_unfair"] = float(((nrr < 0.8) & con["reject"].astype(bool)).sum()) if "reject" in con else q["n_below_80"]
        for value, row in con.iterrows():
            q[f"nrr.{value}"] = float(row["nrr"])
            q[f"rr.{value}"] = float(row["rr"])
            if "pvalue_adjusted" in con:
                q[f"pvalue_adjusted.{value}"] = float(row["pvalue_adjusted"])
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


def _embed_chunk(task: dict) -> FaceEmbeddings:
    return embed_faces(task["paths"], task["ids"], upsample=task["upsample"])


#: results-store stage of the face descriptors of :func:`embed_images`
DESCRIPTOR_STAGE = "face_descriptor"
_DESCRIPTOR_SOURCES = ("vision/face_descriptor.py", "io/images.py")


def embed_images(paths: Sequence, ids: Sequence, *, upsample: int = 1, workers: int = 1, engine: str = "local",
                 address: str | None = None, progress: Callable[[int, int], None] | None = None,
                 store: ResultsStore | None = None) -> FaceEmbeddings:
    """Face descriptors of many images (:func:`fairvision.vision.face_descriptor.embed_faces`) on an engine.

    With one local worker this is ``embed_faces`` itself; otherwise the images
    are cut into chunks of 32-64 (each chunk loads the descriptor's models once,
    about 0.5 s, against about 0.15 s per image), mapped with
    :func:`fairvision.engine.imap` on the ``local`` pool or ``ray``, and joined
    in input order: the same rows as one ``embed_faces`` call. A chunk whose
    worker failed gives its images ``ok=False`` with the error as reason.

    With ``store``, each image's result (descriptor or the reason there is none) is kept in the results store
    (stage ``face_descriptor``) under the SHA-256 of its bytes and a hash of ``upsample`` and the descriptor's
    code: images already there are not described again. Worker failures are not stored.
    """
    paths, ids = [str(p) for p in paths], [str(i) for i in ids]
    if store is not None:
        return _embed_images_stored(paths, ids, store, upsample=upsample, workers=workers, engine=engine,
                                    address=address, progress=progress)
    if workers <= 1 and engine == "local":
        return embed_faces(paths, ids, upsample=upsample, progress=progress)
    size = max(32, min(64, -(-len(paths) // (4 * max(1, workers)))))
    chunks = [{"paths": paths[i : i + size], "ids": ids[i : i + size], "upsample": upsample}
              for i in range(0, len(paths), size)]
    done = 0
    parts: list[FaceEmbeddings | None] = [None] * len(chunks)
    for outcome in imap(_embed_chunk, chunks, workers=workers, engine=engine, address=address, ordered=False):
        c = chunks[outcome.index]
        if outcome.ok:
            parts[outcome.index] = outcome.value
        else:
            rows = pd.DataFrame({"item_id": c["ids"], "image_path": c["paths"], "ok": False, "n_faces": 0,
                                 "reason": str(outcome.failure)})
            parts[outcome.index] = FaceEmbeddings(np.zeros((0, DESCRIPTOR_DIM)), [], rows)
        done += len(c["paths"])
        if progress is not None:
            progress(done, len(paths))
    vecs = [p.embeddings for p in parts if len(p.ids)]
    return FaceEmbeddings(
        np.vstack(vecs) if vecs else np.zeros((0, DESCRIPTOR_DIM)),
        [i for p in parts for i in p.ids],
        pd.concat([p.status for p in parts], ignore_index=True),
    )


def _embed_images_stored(paths: list[str], ids: list[str], store: ResultsStore, *, upsample: int, **engine_kw
                         ) -> FaceEmbeddings:
    from fairvision import __version__

    phash = content_key({"stage": DESCRIPTOR_STAGE, "pkg": __version__, "upsample": int(upsample),
                         "code": source_signature(_DESCRIPTOR_SOURCES)})
    hashes = [file_sha256(p) for p in paths]
    keys = [row_key(h, phash) if h else None for h in hashes]
    hits = store.get_many(DESCRIPTOR_STAGE, (k for k in keys if k))
    todo = [i for i, k in enumerate(keys) if k is None or k not in hits]
    fresh = embed_images([paths[i] for i in todo], [ids[i] for i in todo], upsample=upsample,
                         **engine_kw) if todo else FaceEmbeddings(np.zeros((0, DESCRIPTOR_DIM)), [], pd.DataFrame())
    vec_of = dict(zip(fresh.ids, fresh.embeddings))
    rows = {} if fresh.status.empty else {r["item_id"]: r for r in fresh.status.to_dict("records")}
    for i in todo:
        r = rows.get(ids[i])
        reason = str(r.get("reason") or "") if r is not None else ""
        # a worker's failure is not a fact about the image: only faces, "no face" and undecodable bytes are kept
        if keys[i] is None or r is None or not (r["ok"] or reason == "no face" or reason.startswith("unreadable")):
            continue
        emb = vec_of.get(ids[i])
        store.put(DESCRIPTOR_STAGE, keys[i], {"ok": bool(r["ok"]), "n_faces": int(r["n_faces"]),
                                               "reason": r["reason"] if not r["ok"] else None,
                                               "embedding": None if emb is None else [float(v) for v in emb]},
                  content_hash=hashes[i], params_hash=phash, sample_id=ids[i], image_path=paths[i])
    store.flush()
    status, vecs, ok_ids = [], [], []
    for i, (p, sid, k) in enumerate(zip(paths, ids, keys)):
        if k is not None and k in hits:
            h = hits[k]
            status.append({"item_id": sid, "image_path": p, "ok": bool(h["ok"]), "n_faces": int(h["n_faces"]),
                           "reason": h.get("reason")})
            if h["ok"] and h.get("embedding") is not None:
                vecs.append(np.asarray(h["embedding"], dtype=np.float64))
                ok_ids.append(sid)
        else:
            r = rows.get(sid, {"item_id": sid, "image_path": p, "ok": False, "n_faces": 0, "reason": "not described"})
            status.append({"item_id": sid, "image_path": p, "ok": bool(r["ok"]), "n_faces": int(r["n_faces"]),
                           "reason": r["reason"]})
            if sid in vec_of:
                vecs.append(np.asarray(vec_of[sid], dtype=np.float64))
                ok_ids.append(sid)
    return FaceEmbeddings(np.vstack(vecs) if vecs else np.zeros((0, DESCRIPTOR_DIM)), ok_ids,
                          pd.DataFrame(status, columns=["item_id", "image_path", "ok", "n_faces", "reason"]))


def measure_skin_attribute(items: pd.DataFrame, *, workers: int = 1, mask_method: str = "mediapipe",
                           progress=False, store=None, engine: str = "local", address: str | None = None) -> pd.DataFrame:
    """Add ``st_class`` (ST1..ST6 from the median ITA of the skin pixels) and ``ita`` to an item table.

    Images that cannot be measured get a missing class (they are left out of
    the tests and counted). ``store``: the results store (or its folder) to reuse
    and keep measurements in (:func:`fairvision.audits.skin_batch.measure_images`).
    """
    if "image_path" not in items.columns:
        raise FairvisionError("measuring skin colour needs an image_path column in the item table")
    table = items.rename(columns={"item_id": "sample_id"}) if "sample_id" not in items.columns else items
    meas = measure_images(table[["sample_id", "image_path"]], method="median_ita", mask_method=mask_method,
                          workers=workers, engine=engine, address=address, progress=progress, faces="largest",
                          store=store)
    ita = pd.Series(meas["ita"].to_numpy(dtype=float), index=meas["sample_id"].astype(str))
    out = items.copy()
    key = out["item_id"] if "item_id" in out.columns else out["sample_id"]
    out["ita"] = key.astype(str).map(ita).to_numpy(dtype=float)
    out[SKIN_ATTRIBUTE] = st_class(out["ita"])
    out.attrs["skin_measurements"] = meas
    return out


def _apply_missing(items: pd.DataFrame, attribute: str, rule: str) -> pd.Series:
    """The attribute column under the ``--missing`` rule: NaN marks a left-out item."""
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
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    continuity: bool = False,
    exact: str = "auto",
    mc_samples: int = DEFAULT_MC_SAMPLES,
    seed: int | None = 0,
    min_queries: int = 10,
    categories: Sequence | None = None,
    level: float = 0.95,
    missing: str = "error",
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
    alpha, correction, continuity, exact, mc_samples, seed, min_queries, categories, level
        See :func:`fairvision.stats.parity.parity_test`.
    missing : {"error", "drop", "keep"}
        Items with an empty attribute cell: stop naming the row (default),
        leave them out (the paper keeps only images with an ITA value; their
        count is in ``result.dropped``), or keep them as a value of their own,
        ``(missing)``.

    Returns
    -------
    ParityResult
    """
    id_col = None if item_col == "item_id" else item_col
    results = read_results(results)
    items = read_items(items, attribute, id_col=id_col)
    catalog = items if catalog is None else read_items(catalog, attribute, id_col=id_col, name="catalog")
    ids = items["item_id"]
    attr = _apply_missing(items, attribute, missing)
    catalog_attr = attr if catalog is items else _apply_missing(catalog, attribute, missing)
    absent = attr.isna().to_numpy()
    lookup = pd.Series(attr.to_numpy(dtype=object)[~absent], index=ids.to_numpy()[~absent])
    known = set(ids)
    qids = results["query_id"].astype(str)
    iids = results["item_id"].astype(str)
    for name, col in (("query_id", qids), ("item_id", iids)):
        unknown = ~col.isin(known).to_numpy()
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise FairvisionError(f"{results.attrs.get('source', 'results')}: row {i + 1}: {name} {col.iloc[i]!r} "
                                  f"is not in the items table")
    depth = int(qids.value_counts().max()) if len(qids) else 0
    if k > depth:
        raise FairvisionError(f"{results.attrs.get('source', 'results')}: -k {k} but the deepest run has {depth} results "
                              f"per query; use -k {depth} or less")
    qv = qids.map(lookup)
    rv = iids.map(lookup)
    ok = qv.notna().to_numpy() & rv.notna().to_numpy()
    cat_vals = catalog_attr
    cat_ok = cat_vals.notna().to_numpy()
    if categories is None and isinstance(attr.dtype, pd.CategoricalDtype):
        categories = list(attr.cat.categories)
    res = parity_test(
        qv.to_numpy()[ok], rv.to_numpy()[ok], cat_vals.to_numpy(dtype=object)[cat_ok],
        query_ids=qids.to_numpy()[ok], ranks=results["rank"].to_numpy()[ok], k=k, categories=categories,
        alpha=alpha, correction=correction, continuity=continuity, exact=exact, mc_samples=mc_samples, seed=seed,
        min_queries=min_queries, level=level,
    )
    res.dropped = {"result_pairs_missing_attribute": int((~ok).sum()), "catalog_items_missing_attribute": int((~cat_ok).sum())}
    return res


def audit_retrieval(
    results: pd.DataFrame,
    items: pd.DataFrame,
    attribute: str,
    *,
    catalog: pd.DataFrame | None = None,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    continuity: bool = False,
    exact: str = "auto",
    min_queries: int = 10,
    power_trials: int = 1000,
    power_sizes=PAPER_CATALOG_SIZES,
    detectable_sizes=DETECTABLE_NS,
    target_power: float = 0.8,
    seed: int = 0,
    embedding_status: pd.DataFrame | None = None,
    progress: Callable[[str], None] | None = None,
    missing: str = "error",
) -> RetrievalAudit:
    """Run the retrieval audit.

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
    k, alpha, correction, continuity, exact, min_queries, missing
        See :func:`parity_from_results`.
    power_trials : int
        Monte Carlo trials of the power analysis (0 skips it).
    power_sizes : sequence of int
        Catalog sizes of the power curves (the audited size is added).
    detectable_sizes : sequence of int
        Catalog sizes of the detectable-bias curves.
    target_power : float
        Power at which a bias counts as detectable (paper: 80%).

    Returns
    -------
    RetrievalAudit
    """
    say = progress or (lambda msg: None)
    say("parity tests")
    par = parity_from_results(results, items, attribute, k, catalog=catalog, alpha=alpha, correction=correction,
                              continuity=continuity, exact=exact, min_queries=min_queries, seed=seed, missing=missing)
    cat_row = par.table.loc[CATALOG_ROW].astype(float)
    if cat_row.sum() == 0:
        raise FairvisionError(f"the catalog has no item with a value of {attribute!r}")
    p_z = cat_row / cat_row.sum()
    audit = RetrievalAudit(parity=par, attribute=attribute, p_z=p_z, embedding_status=embedding_status,
                           power_trials=int(power_trials), target_power=float(target_power))
    present = p_z[p_z > 0]
    if power_trials and len(present) >= 2 and present.max() < 1:
        n = int(par.n_queries)
        sizes = sorted({int(s) for s in power_sizes} | {n})
        say("power curves")
        audit.power_curves = power_grid(present, ns=sizes, k=k, alpha=alpha, trials=power_trials, seed=seed, continuity=continuity)
        say("detectable bias")
        audit.detectable = detectable_curve(present, ns=detectable_sizes, k=k, alpha=alpha, target=target_power,
                                            trials=power_trials, seed=seed, continuity=continuity)
        say("catalog size check")
        audit.adequacy = catalog_adequacy(present, n, k=k, alpha=alpha, target=target_power, trials=power_trials,
                                          seed=seed, continuity=continuity)
    audit.meta = {"k": int(k), "alpha": float(alpha), "correction": correction, "continuity": bool(continuity),
                  "n_queries": int(par.n_queries), "n_catalog": int(par.n_catalog), "dropped": par.dropped}
    return audit

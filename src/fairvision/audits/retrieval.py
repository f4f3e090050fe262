"""Retrieval and recommendation audit: items -> (skin measurement) -> results -> parity tests -> power.

Composes the pieces of issue 5 (METHODS.md section 5, Khaziev et al.):

1. the item table with the protected attribute, or measured apparent skin
   colour: median ITA over the skin pixels (:mod:`fairvision.audits.skin_batch`
   with ``method="median_ita"``) mapped to ST1..ST6
   (:func:`fairvision.skin.categories.st_class`), as in the paper's
   section 3.3.3;
2. the ranked results (given, or produced by :mod:`fairvision.retrieval.knn`
   over embeddings, optionally the built-in face descriptor);
3. the distribution parity tests (:func:`fairvision.stats.parity.parity_test`);
4. the power analysis for the catalog's own attribute distribution
   (:mod:`fairvision.stats.power`): power curves for the paper's catalog sizes
   and the audited one, the detectable nRR against catalog size, and whether
   this catalog is large enough to detect an 80%-rule violation per value.
   The simulated catalog size is the number of queries that entered the test
   (in the paper every catalog item is a query).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from fairvision.errors import FairvisionError
from fairvision.stats.parity import DEFAULT_ALPHA, DEFAULT_CORRECTION, ParityResult, parity_test
from fairvision.stats.power import PAPER_CATALOG_SIZES, CatalogAdequacy, catalog_adequacy, detectable_curve, power_grid

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
        < 0.8), and per value ``nrr.<value>``, ``rr.<value>``, ``p_adj.<value>``."""
        om = self.parity.omnibus
        con = self.parity.contrasts
        q = {"omnibus_p": float(om.p_value), "omnibus_chi2": float(om.statistic)}
        nrr = con["nrr"].astype(float)
        q["min_nrr"] = float(nrr.min()) if len(nrr) else float("nan")
        q["n_below_80"] = float((nrr < 0.8).sum())
        q["n_unfair"] = float(((nrr < 0.8) & con["reject"].astype(bool)).sum()) if "reject" in con else q["n_below_80"]
        for value, row in con.iterrows():
            q[f"nrr.{value}"] = float(row["nrr"])
            q[f"rr.{value}"] = float(row["rr"])
            if "p_adj" in con:
                q[f"p_adj.{value}"] = float(row["p_adj"])
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


def measure_skin_attribute(items: pd.DataFrame, *, workers: int = 1, mask_method: str = "mediapipe",
                           progress=False, cache_dir=None) -> pd.DataFrame:
    """Add ``st_class`` (ST1..ST6 from the median ITA of the skin pixels) and ``ita`` to an item table.

    Images that cannot be measured get a missing class (they are left out of
    the tests and counted).
    """
    from fairvision.audits.skin_batch import measure_images
    from fairvision.skin.categories import st_class

    if "image_path" not in items.columns:
        raise FairvisionError("measuring skin colour needs an image_path column in the item table")
    table = items.rename(columns={"item_id": "sample_id"}) if "sample_id" not in items.columns else items
    meas = measure_images(table[["sample_id", "image_path"]], method="median_ita", mask_method=mask_method,
                          workers=workers, progress=progress, faces="largest", cache_dir=cache_dir)
    ita = pd.Series(meas["ita"].to_numpy(dtype=float), index=meas["sample_id"].astype(str))
    out = items.copy()
    key = out["item_id"] if "item_id" in out.columns else out["sample_id"]
    out["ita"] = key.astype(str).map(ita).to_numpy(dtype=float)
    out[SKIN_ATTRIBUTE] = st_class(out["ita"])
    out.attrs["skin_measurements"] = meas
    return out


def audit_retrieval(
    results: pd.DataFrame,
    items: pd.DataFrame,
    attribute: str,
    *,
    catalog: pd.DataFrame | None = None,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    yates: bool = False,
    exact: str = "auto",
    min_queries: int = 10,
    power_trials: int = 1000,
    power_sizes=PAPER_CATALOG_SIZES,
    detectable_sizes=DETECTABLE_NS,
    target_power: float = 0.8,
    seed: int = 0,
    embedding_status: pd.DataFrame | None = None,
    progress: Callable[[str], None] | None = None,
) -> RetrievalAudit:
    """Run the retrieval audit.

    Parameters
    ----------
    results : pandas.DataFrame
        ``(query_id, rank, item_id)`` (see :func:`fairvision.retrieval.read_results`).
    items : pandas.DataFrame
        Item table with ``item_id`` and ``attribute`` (see
        :func:`fairvision.retrieval.read_items`; use
        :func:`measure_skin_attribute` first to measure ST1..ST6).
    attribute : str
        The protected attribute.
    catalog : pandas.DataFrame, optional
        Default: ``items``.
    k, alpha, correction, yates, exact, min_queries
        See :func:`fairvision.stats.parity.parity_test`.
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
    par = parity_test(results, items, attribute, k, catalog=catalog, alpha=alpha, correction=correction, yates=yates,
                      exact=exact, min_queries=min_queries, seed=seed)
    cat_row = par.table.loc["catalog"].astype(float)
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
        audit.power_curves = power_grid(present, ns=sizes, k=k, alpha=alpha, trials=power_trials, seed=seed, yates=yates)
        say("detectable bias")
        audit.detectable = detectable_curve(present, ns=detectable_sizes, k=k, alpha=alpha, target=target_power,
                                            trials=power_trials, seed=seed, yates=yates)
        say("catalog size check")
        audit.adequacy = catalog_adequacy(present, n, k=k, alpha=alpha, target=target_power, trials=power_trials,
                                          seed=seed, yates=yates)
    audit.meta = {"k": int(k), "alpha": float(alpha), "correction": correction, "yates": bool(yates),
                  "n_queries": int(par.n_queries), "n_catalog": int(par.n_catalog), "dropped": par.dropped}
    return audit

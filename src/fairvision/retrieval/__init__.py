"""Retrieval and recommendation audit (issue 5; METHODS.md section 5; Khaziev et al.).

Does the protected attribute of a query leak into its search results? This
package reads ranked results (tables, JSON query -> list mappings, TREC run
files), runs the k-nearest-neighbour visual search that produces them from
embeddings, and exposes the distribution parity tests and their Monte Carlo
power analysis from :mod:`fairvision.stats.parity` and
:mod:`fairvision.stats.power`.

Public API
----------
parity_test(results, items, attribute, k=6, ...)
    Contingency table, omnibus test (weak and per-rank strong condition),
    contrasts with RR, Katz CI, nRR and the 80% rule.
power(p_z, rr, n, k=6, alpha=0.01, trials=1000, test="omnibus", seed=0)
    Monte Carlo power (Algorithm 1), vectorised over trials.
power_grid, detectable_nrr, detectable_curve, catalog_adequacy
    Power over risk ratios x catalog sizes, the smallest detectable bias and
    "is my catalog large enough?".
knn_search(embeddings, ids, k=6, metric="minkowski", p=2, ...)
    Blockwise exact k-NN search producing the results table.
read_results, read_items, read_embeddings
    Readers with one-line errors.
"""

from __future__ import annotations


from fairvision.retrieval.io import read_embeddings, read_items, read_results
from fairvision.retrieval.knn import knn_search
from fairvision.stats.parity import ParityResult
from fairvision.stats.power import (
    PAPER_P_Z,
    catalog_adequacy,
    detectable_curve,
    detectable_nrr,
    power,
    power_all,
    power_grid,
)

__all__ = [
    "parity_test", "ParityResult", "power", "power_all", "power_grid", "detectable_nrr", "detectable_curve",
    "catalog_adequacy", "knn_search", "read_results", "read_items", "read_embeddings", "PAPER_P_Z",
]


def parity_test(results, items, attribute: str, k: int = 6, *, catalog=None, **options) -> ParityResult:
    """Distribution parity test of top-K results (METHODS.md section 5).

    Parameters
    ----------
    results : DataFrame, dict or path
        ``(query_id, rank, item_id)`` rows, a mapping query -> ranked list, or
        a results file / TREC run file (see :func:`read_results`).
    items : DataFrame or path
        Item table with an id column and the protected ``attribute``; queries
        are looked up here too.
    attribute : str
        The protected attribute column.
    k : int
        Top-K cut-off (paper: 6).
    catalog : DataFrame or path, optional
        The catalog (default: the item table).
    **options
        ``alpha`` (0.01), ``correction`` ("holm"), ``yates`` (False),
        ``exact`` ("auto"), ``mc_samples``, ``seed``, ``min_queries``,
        ``categories``, ``confidence``: see
        :func:`fairvision.stats.parity.parity_test`.

    Returns
    -------
    ParityResult
        ``omnibus`` (statistic, dof, p_value), ``contrasts`` (indexed by value:
        chi2, p_value, p_adj, rr, rr_low, rr_high, nrr, fair_80, ...),
        ``table`` (the contingency table with its catalog row), ``per_rank``.
    """
    from fairvision.stats.parity import parity_test as _parity_test

    res = read_results(results)
    it = read_items(items, attribute)
    cat = None if catalog is None else read_items(catalog, attribute, name="catalog")
    return _parity_test(res, it, attribute, k, catalog=cat, **options)

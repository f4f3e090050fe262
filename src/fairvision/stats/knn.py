"""k-nearest-neighbour visual search over embeddings (docs/METHODS.md §8.4).

Khaziev et al. (section 3.3.1) retrieve the K most similar catalog images of
every query with a k-nearest-neighbour search under the Minkowski distance;
this module does that for any embedding matrix and returns the
``(query_id, rank, item_id)`` results table that
:func:`fairvision.audits.retrieval.parity_from_results` tests.

The search is blockwise and vectorised: for a block of queries it computes the
screening distances to the whole catalog with one float32 matrix product
(Euclidean via ``|x|^2 - 2 q.x``, the item term folded into the product;
cosine via normalised dot products) or with array broadcasting (other
Minkowski p), masks the excluded items, and keeps ``k + margin`` candidates
per query: the row is cut into chunks, the chunks with the smallest minima are
picked with :func:`numpy.argpartition` (the ``c`` smallest values of a row
always lie in the ``c`` chunks with the smallest minima) and the candidates
among them with a second :func:`numpy.argpartition`. The candidates'
distances are then recomputed exactly in float64 and ordered by (distance,
catalog position). The float32 screening is therefore only a filter: the
reported neighbours and distances equal an exact float64 brute-force search
unless more than ``margin`` items lie within float32 rounding of the K-th
distance.

Exclusions: the query itself (an item with the query's id), and optionally
every item sharing the query's group (e.g. the same product photographed from
several views, "near-duplicates" that would trivially match).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError, ParameterError

METRICS = ("euclidean", "minkowski", "manhattan", "chebyshev", "cosine")


def _exact(metric: str, p: float, q: np.ndarray, x: np.ndarray, xnorm: np.ndarray | None) -> np.ndarray:
    """Exact float64 distances between q (m, d) and candidate rows x (m, c, d)."""
    q = q.astype(np.float64)
    diff = x.astype(np.float64)
    if metric == "cosine":
        dots = np.einsum("mcd,md->mc", diff, q)
        return 1.0 - dots / (np.sqrt(np.einsum("md,md->m", q, q))[:, None] * xnorm)
    diff -= q[:, None, :]
    if p == 2:
        return np.sqrt(np.einsum("mcd,mcd->mc", diff, diff))
    np.abs(diff, out=diff)
    if p == 1:
        return np.sum(diff, axis=-1)
    if np.isinf(p):
        return np.max(diff, axis=-1)
    return np.sum(diff**p, axis=-1) ** (1.0 / p)


def exact_distances(x: np.ndarray, q: np.ndarray, *, metric: str = "euclidean", p: float = 2.0) -> np.ndarray:
    """Exact float64 distances from one query to every catalog row: the reference computation.

    Parameters
    ----------
    x : array_like, shape (n, d)
        The catalog's embeddings.
    q : array_like, shape (d,)
        One query embedding.
    metric : {"minkowski", "euclidean", "manhattan", "chebyshev", "cosine"}
        Distance, as for :func:`knn_search`.
    p : float
        Minkowski order.

    Returns
    -------
    numpy.ndarray, shape (n,)
        float64 distances.
    """
    metric, p = _normalise_metric(metric, p)
    x64 = np.asarray(x, dtype=np.float64)
    xnorm = np.sqrt(np.sum(x64 * x64, axis=-1))[None, :] if metric == "cosine" else None
    return _exact(metric, p, np.asarray(q, dtype=np.float64)[None, :], x64[None, :, :], xnorm)[0]


def _normalise_metric(metric: str, p: float) -> tuple[str, float]:
    metric = str(metric).lower()
    if metric not in METRICS:
        raise ParameterError("metric", f"must be one of {', '.join(METRICS)}, not {metric!r}")
    if metric == "euclidean":
        return "minkowski", 2.0
    if metric == "manhattan":
        return "minkowski", 1.0
    if metric == "chebyshev":
        return "minkowski", float("inf")
    if metric == "minkowski":
        p = float(p)
        if not p >= 1:
            raise ParameterError("p", f"(the Minkowski order) must be >= 1 to be a metric, got {p}")
    return metric, float(p)


def knn_search(
    embeddings,
    ids: Sequence | None = None,
    k: int = 6,
    *,
    metric: str = "minkowski",
    p: float = 2.0,
    queries: Sequence | None = None,
    query_embeddings=None,
    groups: Sequence | None = None,
    query_groups: Sequence | None = None,
    exclude_self: bool = True,
    block_size: int | None = None,
    margin: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """The ``k`` nearest catalog items of every query (docs/METHODS.md §8.4).

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
        The catalog's embeddings.
    ids : sequence of length n, optional
        Catalog item ids (default ``"0".."n-1"``).
    k : int
        Neighbours per query (paper: K = 6).
    metric : {"minkowski", "euclidean", "manhattan", "chebyshev", "cosine"}
        Distance; ``"minkowski"`` uses ``p`` (p >= 1, ``inf`` for Chebyshev).
        Cosine distance is ``1 - cos``.
    p : float
        Minkowski order (2 = Euclidean, the paper's choice).
    queries : sequence of ids, optional
        Catalog items to use as queries (default: every item). Ignored when
        ``query_embeddings`` is given.
    query_embeddings : (array_like, sequence), optional
        External queries as ``(vectors (m, d), ids)``; an external query whose
        id is also a catalog id is treated as that item (excluded from its own
        results).
    groups : sequence of length n, optional
        A product/group id per catalog item: a query never retrieves an item
        of its own group (near-duplicates such as other views of the same
        product). ``query_groups`` gives the groups of external queries.
    exclude_self : bool
        Leave the query item out of its own results (default True).
    block_size : int, optional
        Queries per block (default: about 64 MB of float32 distances).
    margin : int
        Extra candidates kept per query for the exact float64 re-ranking.
    progress : callable, optional
        Called as ``progress(done, total)`` after each block.

    Returns
    -------
    pandas.DataFrame
        ``query_id``, ``rank`` (1..k), ``item_id``, ``distance``; a query with
        fewer than k eligible items gets fewer rows.
    """
    metric, p = _normalise_metric(metric, p)
    x, cat_ids, pos = _catalog(embeddings, ids)
    if int(k) < 1:
        raise ParameterError("k", f"must be at least 1, got {k}")
    k = int(k)
    qx, qids, qself = _queries(x, cat_ids, pos, queries, query_embeddings)
    n, d = x.shape
    m = qx.shape[0]
    gx = gq = None
    if groups is not None:
        gx, gq = _group_codes(groups, query_groups, qself, n, external=query_embeddings is not None)

    # Catalog padded to a multiple of the chunk size; padded columns get an infinite distance.
    chunk = int(max(8, min(512, np.sqrt(n / (k + max(0, int(margin)))))))  # balances the two selection steps
    n_pad = -(-n // chunk) * chunk
    matmul = metric == "cosine" or p == 2
    xs, xnorm64 = _padded_catalog(x, qx, metric, p, n_pad)
    if block_size is None:
        per_q = n_pad * 4 if matmul else n_pad * 4 * max(1, d // 8)
        block_size = int(max(1, min(m, (64 << 20) // max(per_q, 1))))
    cand = min(n, k + max(0, int(margin)))
    buf = np.empty((block_size, n_pad), dtype=np.float32) if matmul else None
    out_q, out_r, out_i, out_d = [], [], [], []
    for start in range(0, m, block_size):
        stop = min(m, start + block_size)
        qb = qx[start:stop]
        dist = _screening_distances(qb, x, xs, metric, p, n_pad, buf)
        if exclude_self:
            sb = qself[start:stop]
            rows = np.flatnonzero(sb >= 0)
            dist[rows, sb[rows]] = np.inf
        if gx is not None:
            gb = gq[start:stop]
            same = (gb[:, None] == gx[None, :]) & (gb[:, None] >= 0)
            dist[:, :n][same] = np.inf
        vals, cols = _candidates(dist, chunk, cand)
        idx, exact = _rerank(qb, x, vals, cols, metric, p, xnorm64, k)
        keep = np.isfinite(exact)
        rr, cc = np.nonzero(keep)
        out_q.append(qids[start:stop][rr])
        out_r.append(cc + 1)
        out_i.append(cat_ids[idx[rr, cc]])
        out_d.append(exact[rr, cc])
        if progress is not None:
            progress(stop, m)
    res = pd.DataFrame({
        "query_id": np.concatenate(out_q).astype(str) if out_q else np.array([], dtype=str),
        "rank": np.concatenate(out_r).astype(np.int64),
        "item_id": np.concatenate(out_i).astype(str),
        "distance": np.concatenate(out_d).astype(np.float64),
    })
    return res


def _catalog(embeddings, ids) -> tuple[np.ndarray, np.ndarray, pd.Index]:
    """The catalog's embeddings as float32 (checked finite), its ids as strings, and their index."""
    x = np.asarray(embeddings)
    if x.ndim != 2 or x.shape[0] == 0:
        raise FairvisionError(f"embeddings must be a non-empty 2-D array, got shape {x.shape}")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        bad = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
        raise FairvisionError(f"embeddings: row {bad + 1} has NaN or infinite values")
    n = x.shape[0]
    cat_ids = np.asarray([str(i) for i in (range(n) if ids is None else ids)], dtype=object)
    if cat_ids.size != n:
        raise FairvisionError(f"{cat_ids.size} ids for {n} embeddings")
    pos = pd.Index(cat_ids)
    if pos.has_duplicates:
        dup = cat_ids[pos.duplicated()][0]
        raise FairvisionError(f"embeddings: duplicate id {dup!r}")
    return x, cat_ids, pos


def _queries(x: np.ndarray, cat_ids: np.ndarray, pos: pd.Index, queries, query_embeddings):
    """The query vectors (float32), their ids, and each query's catalog position (-1: not a catalog item)."""
    d = x.shape[1]
    if query_embeddings is not None:
        qx, qids = query_embeddings
        qx = np.asarray(qx, dtype=np.float32)
        if qx.ndim != 2 or qx.shape[1] != d:
            raise FairvisionError(f"query embeddings must have shape (m, {d}), got {qx.shape}")
        qids = np.asarray([str(i) for i in qids], dtype=object)
        return qx, qids, pos.get_indexer(qids)
    if queries is None:
        qself = np.arange(x.shape[0])
    else:
        qids_in = np.asarray([str(i) for i in queries], dtype=object)
        qself = pos.get_indexer(qids_in)
        if (qself < 0).any():
            raise FairvisionError(f"query {qids_in[int(np.flatnonzero(qself < 0)[0])]!r} is not a catalog id")
    return x[qself], cat_ids[qself], qself


def _group_codes(groups, query_groups, qself: np.ndarray, n: int, *, external: bool) -> tuple[np.ndarray, np.ndarray]:
    """Integer group codes of the catalog items and of the queries (-1: no group)."""
    m = qself.size
    gser = pd.Series(list(groups), dtype=object)
    if len(gser) != n:
        raise FairvisionError(f"{len(gser)} group ids for {n} embeddings")
    if external and query_groups is None:
        qg = pd.Series([None] * m, dtype=object)
        have = qself >= 0
        qg[have] = gser.to_numpy()[qself[have]]
    elif external:
        qg = pd.Series(list(query_groups), dtype=object)
    else:
        qg = gser.iloc[qself].reset_index(drop=True)
    codes, _ = pd.factorize(pd.concat([gser, qg], ignore_index=True), use_na_sentinel=True)
    return codes[:n], codes[n:]


def _padded_catalog(x: np.ndarray, qx: np.ndarray, metric: str, p: float,
                    n_pad: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """For a distance computed by one matrix product (Euclidean, cosine): the catalog padded to ``n_pad`` rows
    with the per-item term as a last column (padding: an infinite term); and the catalog norms (cosine)."""
    n, d = x.shape
    bias = np.full(n_pad, np.inf, dtype=np.float32)
    xs = xnorm64 = None
    if metric == "cosine":
        xnorm64 = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=1))
        qn = np.sqrt(np.sum(qx.astype(np.float64) ** 2, axis=1))
        if (xnorm64 == 0).any() or (qn == 0).any():
            raise FairvisionError("cosine distance is undefined for an all-zero embedding")
        xs = np.zeros((n_pad, d), dtype=np.float32)
        xs[:n] = x / xnorm64[:, None]
        bias[:n] = 0.0
    elif p == 2:
        xs = np.zeros((n_pad, d), dtype=np.float32)
        xs[:n] = x
        bias[:n] = np.einsum("ij,ij->i", x, x)
    if xs is not None:
        # fold the per-item term into the matrix product: [q', 1] . [x', bias] = q'.x' + bias
        xs = np.concatenate([xs, bias[:, None]], axis=1)
    return xs, xnorm64


def _screening_distances(qb: np.ndarray, x: np.ndarray, xs: np.ndarray | None, metric: str, p: float, n_pad: int,
                         buf: np.ndarray | None) -> np.ndarray:
    """float32 screening distances of a block of queries to the padded catalog, monotone in the true distance
    within a row: ``(b, n_pad)``."""
    b, d = qb.shape
    n = x.shape[0]
    if xs is not None:
        qs = np.ones((b, d + 1), dtype=np.float32)
        if metric == "cosine":
            qs[:, :d] = qb / -np.linalg.norm(qb, axis=1, keepdims=True)
        else:
            qs[:, :d] = qb * np.float32(-2.0)
        # cosine: -cos; Euclidean: |x|^2 - 2 q.x (|q|^2 is constant within a row); padding: inf
        return np.matmul(qs, xs.T, out=buf[:b])  # (b, n_pad), reused buffer: no page faults per block
    dist = np.full((b, n_pad), np.inf, dtype=np.float32)
    sub = max(1, (16 << 20) // max(1, n * d))
    for s in range(0, b, sub):
        diff = np.abs(qb[s:s + sub, None, :] - x[None, :, :])
        if np.isinf(p):
            dist[s:s + sub, :n] = diff.max(axis=-1)
        elif p == 1:
            dist[s:s + sub, :n] = diff.sum(axis=-1)
        else:
            dist[s:s + sub, :n] = (diff**p).sum(axis=-1)  # monotone in the distance
    return dist


def _candidates(dist: np.ndarray, chunk: int, cand: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``cand`` smallest screening distances of every row and their catalog columns.

    Exact without a full-row partition: the ``cand`` smallest values of a row lie in the ``cand`` chunks with
    the smallest minima."""
    b, n_pad = dist.shape
    nchunks = n_pad // chunk
    dr = dist.reshape(b, nchunks, chunk)
    cmin = dr.min(axis=2)
    nsel = min(cand, nchunks)
    sel = np.argpartition(cmin, nsel - 1, axis=1)[:, :nsel] if nsel < nchunks else np.broadcast_to(np.arange(nchunks), (b, nchunks))
    vals = np.take_along_axis(dr, sel[:, :, None], axis=1).reshape(b, nsel * chunk)
    cols = (sel[:, :, None] * chunk + np.arange(chunk)[None, None, :]).reshape(b, nsel * chunk)
    if cand < vals.shape[1]:
        part = np.argpartition(vals, cand - 1, axis=1)[:, :cand]
        vals = np.take_along_axis(vals, part, axis=1)
        cols = np.take_along_axis(cols, part, axis=1)
    return vals, cols


def _rerank(qb: np.ndarray, x: np.ndarray, vals: np.ndarray, cols: np.ndarray, metric: str, p: float,
            xnorm64: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates' exact float64 distances, the ``k`` nearest per row in order (excluded ones: inf):
    ``(catalog positions, distances)``."""
    ok = np.isfinite(vals)
    idx = np.where(ok, cols, 0)
    exact = _exact(metric, p, qb, x[idx], xnorm64[idx] if metric == "cosine" else None)
    exact = np.where(ok, exact, np.inf)
    order = _order(exact, idx)
    idx = np.take_along_axis(idx, order, axis=1)[:, :k]
    exact = np.take_along_axis(exact, order, axis=1)[:, :k]
    return idx, exact


def _order(dist: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Row-wise order by distance, ties by catalog position (deterministic)."""
    o1 = np.argsort(idx, axis=1, kind="stable")
    d1 = np.take_along_axis(dist, o1, axis=1)
    o2 = np.argsort(d1, axis=1, kind="stable")
    return np.take_along_axis(o1, o2, axis=1)

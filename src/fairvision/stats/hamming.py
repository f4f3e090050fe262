"""Near-duplicate search among 64-bit hashes: every pair within a Hamming distance (docs/METHODS.md §13.7).

Pure numerics on ``uint64`` arrays (the perceptual hashes of :mod:`fairvision.vision.phash`, or any
64-bit codes). The search is multi-index hashing (Norouzi, Punjani and Fleet, "Fast search in Hamming space
with multi-index hashing", CVPR 2012) in its simplest exact form, the pigeonhole principle: split the 64 bits
into ``t + 1`` disjoint chunks; two codes at distance ``<= t`` differ in at most ``t`` chunks, so they agree
exactly on at least one. Candidates are the pairs that share a chunk value (found by sorting each chunk's
values, never by comparing all pairs), and each candidate's true distance is verified with a popcount.
The result equals the all-pairs search; only the work differs (on random codes about
``n^2 (t + 1) / 2^(64 / (t + 1))`` candidate pairs instead of ``n^2 / 2``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError

#: Number of set bits of every 16-bit value: the popcount of a uint64 is the sum over its four 16-bit words
#: (numpy 1.26 has no ``np.bitwise_count``; a 64 KiB table is four times faster than a byte table, measured).
POPCOUNT_TABLE = np.array([bin(i).count("1") for i in range(1 << 16)], dtype=np.uint8)

#: Candidate pairs generated per verification batch (bounds memory at about 40 bytes per pair).
PAIR_BATCH = 4_000_000


def popcount64(x) -> np.ndarray:
    """Number of set bits of each element of a ``uint64`` array (docs/METHODS.md §13.7).

    Parameters
    ----------
    x : array_like of uint64

    Returns
    -------
    ndarray of uint8, same shape as ``x``
    """
    a = np.ascontiguousarray(x, dtype=np.uint64)
    if a.size == 0:
        return np.zeros(a.shape, dtype=np.uint8)
    t = POPCOUNT_TABLE[a.reshape(-1).view(np.uint16)].reshape(-1, 4)
    return (t[:, 0] + t[:, 1] + t[:, 2] + t[:, 3]).reshape(a.shape)


def hamming_distance(a, b) -> np.ndarray:
    """Hamming distance between ``uint64`` codes, elementwise with broadcasting (docs/METHODS.md §13.7).

    Parameters
    ----------
    a, b : array_like of uint64

    Returns
    -------
    ndarray of uint8
    """
    return popcount64(np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)))


def _chunk_bounds(threshold: int) -> list[tuple[int, int]]:
    """``t + 1`` disjoint bit ranges (low, width) covering the 64 bits, widths differing by at most 1."""
    m = threshold + 1
    widths = [64 // m + (1 if i < 64 % m else 0) for i in range(m)]
    lows = np.concatenate([[0], np.cumsum(widths)[:-1]])
    return [(int(lo), int(w)) for lo, w in zip(lows, widths)]


def _pairs_within_runs(order: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """All pairs (i < j by position) inside runs ``order[s:e]``, yielded in batches of about PAIR_BATCH."""
    # per element at sorted position p (run end e): partners at p+1 .. e-1
    pos_run = np.repeat(np.arange(len(starts)), ends - starts)
    lengths = ends - starts  # the positions covered by the runs, in order
    positions = np.arange(int(lengths.sum())) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    partners = ends[pos_run] - 1 - positions
    cum = np.cumsum(partners)
    total = int(cum[-1]) if len(cum) else 0
    if total == 0:
        return
    begin = 0
    while begin < len(positions):
        base = int(cum[begin - 1]) if begin else 0
        end = int(np.searchsorted(cum, base + PAIR_BATCH, side="right"))
        end = max(end, begin + 1)
        pos = positions[begin:end]
        cnt = partners[begin:end]
        n = int(cnt.sum())
        if n:
            first = np.repeat(pos, cnt)
            step = np.arange(n) - np.repeat(np.cumsum(cnt) - cnt, cnt) + 1
            yield order[first], order[first + step]
        begin = end


def near_duplicate_pairs(hashes, threshold: int, *, splits=None, cross_split_only: bool = False) -> pd.DataFrame:
    """Every pair of 64-bit codes within a Hamming distance, by multi-index hashing (docs/METHODS.md §13.7).

    Parameters
    ----------
    hashes : array_like of uint64, shape (n,)
        The codes (e.g. DCT perceptual hashes).
    threshold : int
        Largest Hamming distance reported, 0..63 (0: identical codes only).
    splits : array_like, shape (n,), optional
        A split label per code (e.g. ``train`` / ``test``); adds the columns ``split_i``, ``split_j`` and
        ``cross_split``. Missing labels (None/NaN) never make a pair cross-split.
    cross_split_only : bool
        Keep only the pairs whose members are in different splits (needs ``splits``).

    Returns
    -------
    pandas.DataFrame
        Columns ``i``, ``j`` (positions, ``i < j``) and ``distance``, sorted by ``distance``, ``i``, ``j``;
        with ``splits`` also ``split_i``, ``split_j``, ``cross_split``. Identical to an all-pairs search.

    Notes
    -----
    The 64 bits are split into ``threshold + 1`` chunks; a pair within the threshold agrees exactly on at least
    one chunk (pigeonhole), so the candidates are the pairs sharing a chunk value (grouped by sorting), each
    verified by a popcount of the XOR. A pair is reported from the first chunk it agrees on only, so nothing is
    counted twice. Many codes sharing a chunk value (e.g. thousands of identical images) make the candidate
    set quadratic in that group; it is processed in batches, so memory stays bounded and the answer exact.
    """
    h = np.asarray(hashes)
    if h.ndim != 1:
        raise FairvisionError(f"hashes must be one-dimensional, got shape {h.shape}")
    if h.dtype != np.uint64:
        if not np.issubdtype(h.dtype, np.integer):
            raise FairvisionError(f"hashes must be unsigned 64-bit integers, got dtype {h.dtype}")
        h = h.astype(np.uint64)
    t = int(threshold)
    if not 0 <= t <= 63:
        raise FairvisionError(f"the Hamming threshold must be between 0 and 63, got {threshold}")
    n = len(h)
    lab = None
    if splits is not None:
        lab_series = pd.Series(np.asarray(splits, dtype=object))
        if len(lab_series) != n:
            raise FairvisionError(f"splits has {len(lab_series)} labels for {n} hashes")
        codes, _ = pd.factorize(lab_series, use_na_sentinel=True)
        lab = codes.astype(np.int64)
    elif cross_split_only:
        raise FairvisionError("cross_split_only needs a split label per hash")
    bounds = _chunk_bounds(t)
    chunk_vals = [((h >> np.uint64(lo)) & np.uint64((1 << w) - 1)).astype(np.int64) for lo, w in bounds]
    found_i, found_j, found_d = [], [], []
    for k, vals in enumerate(chunk_vals):
        order = np.argsort(vals, kind="stable")
        sv = vals[order]
        if n < 2:
            break
        brk = np.flatnonzero(sv[1:] != sv[:-1]) + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [n]])
        keep = ends - starts > 1
        for a, b in _pairs_within_runs(order, starts[keep], ends[keep]):
            if lab is not None and cross_split_only:
                la, lb = lab[a], lab[b]
                m = (la != lb) & (la >= 0) & (lb >= 0)
                a, b = a[m], b[m]
            d = hamming_distance(h[a], h[b])
            m = d <= t
            if k:  # reported by an earlier chunk already?
                a, b, d = a[m], b[m], d[m]
                earlier = np.zeros(len(a), dtype=bool)
                for prev in chunk_vals[:k]:
                    earlier |= prev[a] == prev[b]
                m = ~earlier
            found_i.append(np.minimum(a[m], b[m]))
            found_j.append(np.maximum(a[m], b[m]))
            found_d.append(d[m])
    i = np.concatenate(found_i) if found_i else np.zeros(0, dtype=np.int64)
    j = np.concatenate(found_j) if found_j else np.zeros(0, dtype=np.int64)
    d = np.concatenate(found_d) if found_d else np.zeros(0, dtype=np.uint8)
    srt = np.lexsort((j, i, d))
    out = pd.DataFrame({"i": i[srt].astype(np.int64), "j": j[srt].astype(np.int64), "distance": d[srt].astype(np.int64)})
    if splits is not None:
        s = np.asarray(splits, dtype=object)
        out["split_i"] = s[out["i"].to_numpy()]
        out["split_j"] = s[out["j"].to_numpy()]
        li, lj = lab[out["i"].to_numpy()], lab[out["j"].to_numpy()]
        out["cross_split"] = (li != lj) & (li >= 0) & (lj >= 0)
    return out


def query_matches(queries, references, threshold: int) -> pd.DataFrame:
    """Every (query, reference) pair of 64-bit codes within a Hamming distance, by multi-index hashing
    (docs/METHODS.md §13.9).

    The search of :func:`near_duplicate_pairs` between two sets instead of within one: the 64 bits are split
    into ``threshold + 1`` chunks; a query within the threshold of a reference agrees with it exactly on at
    least one chunk (pigeonhole). For each chunk the references are sorted by their chunk value and each
    query's equal range is found by binary search (``searchsorted``), so candidates come without comparing all
    pairs; each is verified by a popcount of the XOR and reported from the first chunk it agrees on only.

    Parameters
    ----------
    queries : array_like of uint64, shape (n,)
        The codes to look up (e.g. the perceptual hashes of a collection).
    references : array_like of uint64, shape (m,)
        The known codes (e.g. a list of known images' hashes).
    threshold : int
        Largest Hamming distance reported, 0..63.

    Returns
    -------
    pandas.DataFrame
        Columns ``query``, ``reference`` (positions) and ``distance``, sorted by ``query``, ``distance``,
        ``reference``. Identical to comparing every query with every reference.
    """
    q = _as_codes(queries, "queries")
    r = _as_codes(references, "references")
    t = int(threshold)
    if not 0 <= t <= 63:
        raise FairvisionError(f"the Hamming threshold must be between 0 and 63, got {threshold}")
    found_q, found_r, found_d = [], [], []
    if len(q) and len(r):
        bounds = _chunk_bounds(t)
        masks = [(np.uint64(lo), np.uint64((1 << w) - 1)) for lo, w in bounds]
        q_vals = [((q >> lo) & m).astype(np.int64) for lo, m in masks]
        r_vals = [((r >> lo) & m).astype(np.int64) for lo, m in masks]
        for k in range(len(bounds)):
            order = np.argsort(r_vals[k], kind="stable")
            sv = r_vals[k][order]
            lo = np.searchsorted(sv, q_vals[k], side="left")
            cnt = np.searchsorted(sv, q_vals[k], side="right") - lo
            for qi, ri in _expand_ranges(order, lo, cnt):
                d = hamming_distance(q[qi], r[ri])
                m = d <= t
                qi, ri, d = qi[m], ri[m], d[m]
                if k:  # agreed on an earlier chunk: reported there already
                    earlier = np.zeros(len(qi), dtype=bool)
                    for prev_q, prev_r in zip(q_vals[:k], r_vals[:k]):
                        earlier |= prev_q[qi] == prev_r[ri]
                    qi, ri, d = qi[~earlier], ri[~earlier], d[~earlier]
                found_q.append(qi)
                found_r.append(ri)
                found_d.append(d)
    qi = np.concatenate(found_q) if found_q else np.zeros(0, dtype=np.int64)
    ri = np.concatenate(found_r) if found_r else np.zeros(0, dtype=np.int64)
    d = np.concatenate(found_d) if found_d else np.zeros(0, dtype=np.uint8)
    srt = np.lexsort((ri, d, qi))
    return pd.DataFrame({"query": qi[srt].astype(np.int64), "reference": ri[srt].astype(np.int64),
                         "distance": d[srt].astype(np.int64)})


def _as_codes(x, name: str) -> np.ndarray:
    """A one-dimensional uint64 array of codes, or a one-line error naming ``name``."""
    h = np.asarray(x)
    if h.ndim != 1:
        raise FairvisionError(f"{name} must be one-dimensional, got shape {h.shape}")
    if h.dtype != np.uint64:
        if h.size and not np.issubdtype(h.dtype, np.integer):
            raise FairvisionError(f"{name} must be unsigned 64-bit integers, got dtype {h.dtype}")
        h = h.astype(np.uint64)
    return h


def _expand_ranges(order: np.ndarray, lo: np.ndarray, cnt: np.ndarray):
    """Pairs (query position, ``order[lo[q] + s]`` for s < ``cnt[q]``), yielded in batches of about PAIR_BATCH
    pairs (a reference value shared by very many codes cannot exhaust memory)."""
    nz = np.flatnonzero(cnt)
    if not len(nz):
        return
    c = cnt[nz]
    cum = np.cumsum(c)
    begin = 0
    while begin < len(nz):
        base = int(cum[begin - 1]) if begin else 0
        end = max(int(np.searchsorted(cum, base + PAIR_BATCH, side="right")), begin + 1)
        qs, cs = nz[begin:end], c[begin:end]
        n = int(cs.sum())
        step = np.arange(n) - np.repeat(np.cumsum(cs) - cs, cs)
        yield np.repeat(qs, cs), order[np.repeat(lo[qs], cs) + step]
        begin = end

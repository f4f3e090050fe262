"""Face verification by group: TAR at a fixed FAR, and the pairs to score (docs/METHODS.md §6.1).

FHIBE evaluates face verification as the true accept rate at FAR = 0.001 per
group, on all positive pairs (same identity) and "hard" negative pairs
restricted to the same pronoun and a skin tone within one Fitzpatrick level.
Everything here is vectorised over pairs: thresholds come from a partial sort
(``np.partition``), pairs from index arithmetic per block of samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError


@dataclass
class TarResult:
    """TAR at FAR: ``tar`` at ``threshold`` (accept when score > threshold)."""

    tar: float
    threshold: float
    far: float
    far_target: float
    n_genuine: int
    n_impostor: int

    @property
    def statistic(self) -> float:
        return self.tar

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([self.__dict__])


def _threshold(impostor: np.ndarray, far: float) -> float:
    """Smallest threshold whose false accept rate (score > threshold) is at most ``far``."""
    n = impostor.size
    if n == 0:
        raise FairvisionError("TAR at FAR needs impostor (negative) pairs")
    k = int(np.floor(far * n + 1e-9))  # false accepts allowed
    if k >= n:
        return -np.inf
    kth = n - k - 1  # the (k+1)-th largest impostor score
    return float(np.partition(impostor, kth)[kth])


def tar_at_far(scores, genuine, far: float = 0.001) -> TarResult:
    """True accept rate at a false accept rate (FHIBE default FAR = 0.001).

    Parameters
    ----------
    scores : array_like of float
        Similarity of every pair (higher = more alike).
    genuine : array_like of bool
        True for positive pairs (same identity), False for impostors.
    far : float
        Target false accept rate.

    Returns
    -------
    TarResult
        The threshold is the (k+1)-th largest impostor score with
        ``k = floor(far * n_impostor)`` and pairs are accepted when their
        score is strictly greater, so at most k impostors are accepted (fewer
        with ties): the achieved ``far`` never exceeds the target.
    """
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(genuine, dtype=bool).ravel()
    if s.size != g.size:
        raise FairvisionError(f"tar_at_far: {s.size} scores but {g.size} genuine flags")
    if np.isnan(s).any():
        raise FairvisionError("tar_at_far: a score is NaN")
    if not 0 <= far <= 1:
        raise FairvisionError(f"tar_at_far: FAR must be in [0, 1], got {far}")
    gen, imp = s[g], s[~g]
    if gen.size == 0:
        raise FairvisionError("TAR at FAR needs genuine (positive) pairs")
    thr = _threshold(imp, far)
    return TarResult(float(np.count_nonzero(gen > thr) / gen.size), thr, float(np.count_nonzero(imp > thr) / imp.size),
                     far, int(gen.size), int(imp.size))


def tar_at_far_by_group(scores, genuine, groups, far: float = 0.001, *, threshold: str = "group",
                        fixed_threshold: float | None = None) -> pd.DataFrame:
    """TAR at FAR for every group of pairs.

    Parameters
    ----------
    scores : array_like of float
        Similarity of every pair.
    genuine : array_like of bool
        True for positive pairs.
    groups : array_like
        Group of every pair.
    far : float
        Target false accept rate (FHIBE: 0.001).
    threshold : {"group", "global"}
        ``"group"`` (FHIBE: TAR at FAR = 0.001 *per group*) sets each group's
        own threshold from its impostors; ``"global"`` uses one threshold from
        all impostors and reports each group's TAR and achieved FAR at it.
    fixed_threshold : float, optional
        With ``threshold="global"``: this threshold (e.g. one set from a larger
        set of pairs) instead of one from the impostors given.

    Returns
    -------
    pandas.DataFrame
        Indexed by group: ``tar``, ``threshold``, ``far``, ``n_genuine``,
        ``n_impostor``; NaN for a group without genuine or impostor pairs.
    """
    if threshold not in ("group", "global"):
        raise FairvisionError(f"threshold must be 'group' or 'global', not {threshold!r}")
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(genuine, dtype=bool).ravel()
    codes, labels = pd.factorize(pd.Series(np.asarray(groups, dtype=object)), sort=True)
    if codes.size != s.size:
        raise FairvisionError(f"tar_at_far_by_group: {s.size} scores but {codes.size} group labels")
    glob = None
    if threshold == "global":
        glob = float(fixed_threshold) if fixed_threshold is not None else _threshold(s[~g], far)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(labels) + 1))
    rows = []
    for i in range(len(labels)):  # one vectorised step per group
        idx = order[bounds[i]:bounds[i + 1]]
        gs, gg = s[idx], g[idx]
        gen, imp = gs[gg], gs[~gg]
        if gen.size == 0 or imp.size == 0:
            rows.append((np.nan, np.nan, np.nan, gen.size, imp.size))
            continue
        thr = glob if glob is not None else _threshold(imp, far)
        rows.append((np.count_nonzero(gen > thr) / gen.size, thr, np.count_nonzero(imp > thr) / imp.size, gen.size, imp.size))
    out = pd.DataFrame(rows, columns=["tar", "threshold", "far", "n_genuine", "n_impostor"], index=pd.Index(list(labels), name="group"))
    return out


def _weighted_threshold(imp: np.ndarray, w: np.ndarray, far: float) -> np.ndarray:
    """Smallest impostor score t with weight(impostors > t) <= far * weight(impostors), per row of ``w``."""
    # impostors from the highest score down, ties in one block: weight strictly above each distinct score
    o = np.argsort(-imp, kind="stable")
    si = imp[o]
    starts = np.flatnonzero(np.r_[True, si[1:] != si[:-1]])
    block = np.add.reduceat(w[:, o], starts, axis=1)
    above = np.cumsum(block, axis=1) - block
    total = block.sum(axis=1)
    allowed = far * total * (1 + 1e-12) + 1e-9
    last = (above <= allowed[:, None]).sum(axis=1) - 1  # "above" grows, so the admissible blocks are a prefix
    thr = si[starts][last]
    thr = np.where(far * total >= total, -np.inf, thr)
    return np.where(total > 0, thr, np.nan)


def weighted_tar_at_far(scores, genuine, weights, far: float = 0.001, *,
                        thresholds=None) -> tuple[np.ndarray, np.ndarray]:
    """TAR at FAR with a non-negative weight on every pair, for many weight vectors at once.

    The rule of :func:`tar_at_far` with counts replaced by weights: the
    threshold is the smallest impostor score t whose impostors scoring above t
    weigh at most ``far`` times all impostors; TAR is the weight of the
    genuine pairs scoring above t over the weight of all genuine pairs. With
    unit weights both are exactly those of :func:`tar_at_far`. Used with the
    integer draw counts of a subject bootstrap (docs/METHODS.md §6.1).

    Parameters
    ----------
    scores : array_like of float, shape (n_pairs,)
        Similarity of every pair (higher = more alike).
    genuine : array_like of bool, shape (n_pairs,)
        True for positive pairs.
    weights : array_like, shape (m, n_pairs) or (n_pairs,)
        Weight of every pair in each of m weightings.
    far : float
        Target false accept rate.
    thresholds : array_like, shape (m,), optional
        Use these thresholds (e.g. one set from all pairs, ``threshold="global"``)
        instead of setting them from the impostors given.

    Returns
    -------
    tar, threshold : numpy.ndarray, shape (m,)
        NaN where the genuine or the impostor pairs weigh nothing; the
        threshold is -inf when ``far`` allows every impostor.
    """
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(genuine, dtype=bool).ravel()
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    if w.shape[1] != s.size or g.size != s.size:
        raise FairvisionError(f"weighted_tar_at_far: {s.size} scores, {g.size} genuine flags, weights of shape {w.shape}")
    if not 0 <= far <= 1:
        raise FairvisionError(f"weighted_tar_at_far: FAR must be in [0, 1], got {far}")
    m = w.shape[0]
    imp, gen = s[~g], s[g]
    if imp.size == 0 or gen.size == 0:
        return np.full(m, np.nan), np.full(m, np.nan)
    if thresholds is not None:
        thr = np.broadcast_to(np.asarray(thresholds, dtype=float), (m,))
        thr = np.where(w[:, ~g].sum(axis=1) > 0, thr, np.nan)
    else:
        thr = _weighted_threshold(imp, w[:, ~g], far)
    # genuine weight at or below the threshold from cumulative sums over the sorted genuine scores
    og = np.argsort(gen, kind="stable")
    sg = gen[og]
    cum = np.concatenate([np.zeros((m, 1)), np.cumsum(w[:, g][:, og], axis=1)], axis=1)
    pos = np.searchsorted(sg, np.nan_to_num(thr, nan=np.inf), side="right")
    gtot = cum[:, -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        tar = (gtot - cum[np.arange(m), pos]) / gtot
    tar = np.where((gtot > 0) & ~np.isnan(thr), tar, np.nan)
    return tar, thr


def weighted_accuracy(scores, genuine, weights, thresholds) -> np.ndarray:
    """Share of pair weight decided right at a threshold, for many weight vectors at once (docs/METHODS.md §6.1).

    A pair is accepted when its score is above the threshold (the rule of :func:`tar_at_far`); it is decided right
    when it is genuine and accepted or an impostor and rejected. With unit weights this is
    ``(TAR * n_genuine + (1 - FAR) * n_impostor) / n_pairs``.

    Parameters
    ----------
    scores : array_like of float, shape (n_pairs,)
        Similarity of every pair.
    genuine : array_like of bool, shape (n_pairs,)
        True for positive pairs.
    weights : array_like, shape (m, n_pairs) or (n_pairs,)
        Weight of every pair in each of m weightings (e.g. subject-bootstrap draw counts).
    thresholds : array_like, shape (m,) or scalar
        The threshold of each weighting (NaN gives NaN).

    Returns
    -------
    numpy.ndarray, shape (m,)
        NaN where the pairs weigh nothing or the threshold is NaN.
    """
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(genuine, dtype=bool).ravel()
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    if w.shape[1] != s.size or g.size != s.size:
        raise FairvisionError(f"weighted_accuracy: {s.size} scores, {g.size} genuine flags, weights of shape {w.shape}")
    thr = np.broadcast_to(np.asarray(thresholds, dtype=float), (w.shape[0],))
    accepted = s[None, :] > thr[:, None]
    right = np.where(g[None, :], accepted, ~accepted)
    total = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = (w * right).sum(axis=1) / total
    return np.where((total > 0) & ~np.isnan(thr), acc, np.nan)


def cosine_scores(embeddings, i, j, *, chunk: int = 1_000_000) -> np.ndarray:
    """Cosine similarity of embedding rows ``i[k]`` and ``j[k]`` for every pair k (chunked).

    Parameters
    ----------
    embeddings : array_like, shape (n_samples, d)
        No all-zero rows.
    i, j : array_like of int
        Row indices of the two ends of every pair.
    chunk : int
        Pairs per vectorised step (bounds memory).

    Returns
    -------
    numpy.ndarray of float32, shape (n_pairs,)
    """
    e = np.asarray(embeddings, dtype=np.float32)
    if e.ndim != 2:
        raise FairvisionError(f"embeddings must be a 2-D array (samples x dims), got shape {e.shape}")
    norm = np.linalg.norm(e, axis=1, keepdims=True)
    if np.any(norm == 0):
        raise FairvisionError(f"embedding row {int(np.flatnonzero(norm.ravel() == 0)[0])} is all zeros")
    e = e / norm
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    out = np.empty(i.size, dtype=np.float32)
    for c in range(0, i.size, chunk):
        out[c:c + chunk] = np.einsum("ij,ij->i", e[i[c:c + chunk]], e[j[c:c + chunk]])
    return out


def positive_pairs(identities) -> tuple[np.ndarray, np.ndarray]:
    """All pairs ``(i, j)``, ``i < j``, of samples with the same identity.

    Vectorised by identity size: for every distinct number of images s, the
    s(s-1)/2 index pairs are laid over all identities of that size at once.

    Parameters
    ----------
    identities : array_like
        Identity of every sample (no missing values).

    Returns
    -------
    i, j : numpy.ndarray of int64
        Sample indices of every positive pair, ``i < j``.
    """
    codes, _ = pd.factorize(pd.Series(np.asarray(identities, dtype=object)))
    if (codes < 0).any():
        raise FairvisionError(f"identity of sample {int(np.flatnonzero(codes < 0)[0]) + 1} is missing")
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ii, jj = [], []
    for s in np.unique(counts[counts >= 2]):
        a, b = np.triu_indices(int(s), 1)
        st = starts[counts == s]
        ii.append(order[(st[:, None] + a[None, :]).ravel()])
        jj.append(order[(st[:, None] + b[None, :]).ravel()])
    if not ii:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    i, j = np.concatenate(ii), np.concatenate(jj)
    return np.minimum(i, j), np.maximum(i, j)


_ROMAN = {"i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6, "vii": 7, "viii": 8, "ix": 9, "x": 10}


def tone_levels(values) -> np.ndarray:
    """Skin tone levels as integers: numbers, or Fitzpatrick labels like ``"Type IV"`` / ``"IV"``.

    Parameters
    ----------
    values : sequence
        One skin tone per sample (``4``, ``"IV"``, ``"Type IV"``, ``"ST4"``, ``"MST4"``).

    Returns
    -------
    numpy.ndarray of int64

    Raises
    ------
    FairvisionError
        A value that is not a recognisable level (names the sample).
    """
    out = np.empty(len(values), dtype=np.int64)
    for k, v in enumerate(values):  # per sample label parsing, not per pair
        s = str(v).strip().lower()
        m = re.fullmatch(r"(?:type|fitzpatrick|st|mst)?\s*([ivx]+|\d+)", s)
        if not m:
            raise FairvisionError(f"skin tone of sample {k + 1} is {v!r}; expected a level like 4, 'IV' or 'Type IV'")
        tok = m.group(1)
        out[k] = int(tok) if tok.isdigit() else _ROMAN.get(tok, -1)
        if out[k] < 0:
            raise FairvisionError(f"skin tone of sample {k + 1} is {v!r}; not a known level")
    return out


def _pair_codes(identities, pronouns, skin_tones, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer codes of the identities and pronouns and the tone levels of FHIBE's pair rule, checked: equal
    lengths, and no missing pronoun (one-line errors; ``name`` is the function in the message)."""
    ident, _ = pd.factorize(pd.Series(np.asarray(identities, dtype=object)))
    pron, _ = pd.factorize(pd.Series(np.asarray(pronouns, dtype=object)))
    tone = tone_levels(list(skin_tones))
    if not (pron.size == tone.size == ident.size):
        raise FairvisionError(f"{name}: identities, pronouns and skin tones differ in length")
    if (pron < 0).any():
        raise FairvisionError(f"pronoun of sample {int(np.flatnonzero(pron < 0)[0]) + 1} is missing")
    return ident, pron, tone


def hard_negative_pairs(identities, pronouns, skin_tones, *, max_tone_diff: int = 1,
                        max_pairs: int = 50_000_000) -> tuple[np.ndarray, np.ndarray]:
    """FHIBE hard negatives: different identity, same pronoun, skin tone within ``max_tone_diff`` levels.

    Samples are grouped into blocks by (pronoun, tone level); pairs come from
    the index products of each block with itself and with the blocks up to
    ``max_tone_diff`` levels above, minus pairs of the same identity.

    Parameters
    ----------
    identities, pronouns, skin_tones : array_like
        Per sample (skin tones as accepted by :func:`tone_levels`).
    max_tone_diff : int
        Largest difference of skin tone levels within a pair (FHIBE: 1).
    max_pairs : int
        Memory guard on the number of candidate pairs.

    Returns
    -------
    i, j : numpy.ndarray of int64
        Sample indices of every hard negative pair, ``i < j``.

    Raises
    ------
    FairvisionError
        If more than ``max_pairs`` pairs would be built (memory guard).
    """
    ident, pron, tone = _pair_codes(identities, pronouns, skin_tones, "hard_negative_pairs")
    n = ident.size
    blocks: dict[tuple[int, int], np.ndarray] = {}
    key = pd.Series(np.arange(n)).groupby([pron, tone]).indices
    for k, idx in key.items():
        blocks[(int(k[0]), int(k[1]))] = np.sort(np.asarray(idx))
    plan = []
    for (p, t), a in blocks.items():
        plan.append((a, a, True))
        for d in range(1, max_tone_diff + 1):
            b = blocks.get((p, t + d))
            if b is not None:
                plan.append((a, b, False))
    total = sum(len(a) * (len(a) - 1) // 2 if same else len(a) * len(b) for a, b, same in plan)
    if total > max_pairs:
        raise FairvisionError(f"hard_negative_pairs: {total:,} candidate pairs exceed max_pairs={max_pairs:,}; "
                              "subsample identities or raise max_pairs")
    ii, jj = [], []
    for a, b, same in plan:
        if same:
            x, y = np.triu_indices(len(a), 1)
            i, j = a[x], a[y]
        else:
            i, j = np.repeat(a, len(b)), np.tile(b, len(a))
        keep = ident[i] != ident[j]
        ii.append(i[keep])
        jj.append(j[keep])
    if not ii:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    i, j = np.concatenate(ii), np.concatenate(jj)
    return np.minimum(i, j), np.maximum(i, j)


def _triangle_rows(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Row i of position k in the row-major upper triangle (i < j) of an n x n block."""
    off = lambda i: i * (n - 1) - i * (i - 1) // 2  # noqa: E731  (positions before row i)
    b = 2 * n - 1
    i = np.floor((b - np.sqrt(np.maximum(b.astype(float) ** 2 - 8.0 * k, 0.0))) / 2).astype(np.int64)
    i = np.clip(i, 0, np.maximum(n - 2, 0))
    i = np.where(off(i) > k, i - 1, i)  # one step either way absorbs the float rounding
    i = np.where(off(i + 1) <= k, i + 1, i)
    return i


def sample_hard_negative_pairs(identities, pronouns, skin_tones, *, max_pairs: int | None = None,
                               max_tone_diff: int = 1, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """FHIBE hard impostor pairs, all of them or a seeded uniform sample of ``max_pairs`` (docs/METHODS.md §6.1).

    The pairs of :func:`hard_negative_pairs` (different identity, same pronoun,
    skin tone within ``max_tone_diff`` levels) without building them all: the
    candidate pairs are numbered block by block (a (pronoun, tone) block with
    itself, then with the blocks up to ``max_tone_diff`` levels above), positions
    are drawn without replacement and decoded to sample indices with index
    arithmetic, and pairs of one identity are dropped; more positions are drawn
    until ``max_pairs`` remain or every candidate was drawn. Memory and time grow
    with ``max_pairs``, not with the number of candidates.

    Parameters
    ----------
    identities, pronouns, skin_tones : array_like
        Per sample (skin tones as accepted by :func:`tone_levels`; no missing pronouns).
    max_pairs : int or None
        Most impostor pairs to keep (None: all of them).
    max_tone_diff : int
        Largest difference of skin tone levels within a pair (FHIBE: 1).
    seed : int, numpy.random.Generator or None
        Randomness of the sample.

    Returns
    -------
    i, j : numpy.ndarray of int64
        Sample indices of every kept impostor pair, ``i < j``, sorted by (i, j).
    """
    ident, pron, tone = _pair_codes(identities, pronouns, skin_tones, "sample_hard_negative_pairs")
    n = ident.size
    if max_pairs is not None and max_pairs < 0:
        raise FairvisionError(f"max_pairs must be 0 or more, not {max_pairs}")
    if max_tone_diff < 0:
        raise FairvisionError(f"max_tone_diff must be 0 or more, not {max_tone_diff}")
    order = np.lexsort((tone, pron))
    key = pron[order].astype(np.int64) * (tone.max(initial=0) + max_tone_diff + 2) + tone[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if n else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, n])
    bkey = key[starts] if n else np.zeros(0, np.int64)
    # plan: (first block, second block or -1 for a block with itself); few blocks, so a loop over them
    pa, pb = [np.arange(bkey.size)], [np.full(bkey.size, -1)]
    for d in range(1, max_tone_diff + 1):
        hit = np.searchsorted(bkey, bkey + d)
        ok = (hit < bkey.size) & (bkey[np.minimum(hit, max(bkey.size - 1, 0))] == bkey + d) if bkey.size else hit > 0
        pa.append(np.flatnonzero(ok))
        pb.append(hit[ok])
    pa, pb = np.concatenate(pa), np.concatenate(pb)
    na = sizes[pa]
    nb = np.where(pb >= 0, sizes[np.maximum(pb, 0)] if sizes.size else 0, 0)
    cnt = np.where(pb < 0, na * (na - 1) // 2, na * nb).astype(np.int64)
    total = int(cnt.sum())
    cum = np.r_[0, np.cumsum(cnt)]

    def decode(pos):
        p = np.searchsorted(cum, pos, side="right") - 1
        k = pos - cum[p]
        same = pb[p] < 0
        nn = na[p]
        r = np.where(same, _triangle_rows(k, nn), k // np.maximum(nb[p], 1))
        tri_c = k - (r * (nn - 1) - r * (r - 1) // 2) + r + 1
        c = np.where(same, tri_c, k % np.maximum(nb[p], 1))
        ia = order[starts[pa[p]] + r]
        ib = order[starts[np.where(same, pa[p], pb[p])] + c]
        return ia, ib

    want = total if max_pairs is None else int(max_pairs)
    m = total if want >= total else min(total, int(want * 1.25) + 64)
    while True:
        rng = np.random.default_rng(seed)
        if m < total:  # a random order: the first ``want`` kept are a uniform sample
            pos = rng.choice(total, m, replace=False).astype(np.int64)
        elif want < total:  # every candidate, in a random order, so the cap drops none by block
            pos = rng.permutation(total).astype(np.int64)
        else:
            pos = np.arange(total, dtype=np.int64)
        i, j = decode(pos)
        keep = ident[i] != ident[j]
        if keep.sum() >= want or m == total:
            break
        m = min(total, 2 * m)
    i, j = i[keep][:want], j[keep][:want]
    i, j = np.minimum(i, j), np.maximum(i, j)
    o = np.lexsort((j, i))
    return i[o].astype(np.int64), j[o].astype(np.int64)


def weighted_eer_threshold(scores, genuine, weights) -> tuple[np.ndarray, np.ndarray]:
    """Threshold at the equal error rate, with a weight on every pair, for many weight vectors at once.

    Pairs are accepted when their score is strictly greater than the threshold. The candidates are the distinct
    scores; at each, FAR = weight of impostors above it / weight of all impostors and FRR = weight of genuine
    pairs at or below it / weight of all genuine pairs. The threshold is the candidate where ``|FAR - FRR|`` is
    smallest (the highest such score on a tie); the EER reported there is ``(FAR + FRR) / 2``
    (docs/METHODS.md §6.1).

    Parameters
    ----------
    scores : array_like of float, shape (n_pairs,)
    genuine : array_like of bool, shape (n_pairs,)
    weights : array_like, shape (m, n_pairs) or (n_pairs,)

    Returns
    -------
    threshold, eer : numpy.ndarray, shape (m,)
        NaN where the genuine or the impostor pairs weigh nothing.
    """
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(genuine, dtype=bool).ravel()
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    if w.shape[1] != s.size or g.size != s.size:
        raise FairvisionError(f"weighted_eer_threshold: {s.size} scores, {g.size} genuine flags, weights {w.shape}")
    m = w.shape[0]
    if s.size == 0:
        return np.full(m, np.nan), np.full(m, np.nan)
    o = np.argsort(-s, kind="stable")
    ss, go, wo = s[o], g[o], w[:, o]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    imp_block = np.add.reduceat(np.where(go, 0.0, wo), starts, axis=1)
    gen_block = np.add.reduceat(np.where(go, wo, 0.0), starts, axis=1)
    imp_tot, gen_tot = imp_block.sum(axis=1), gen_block.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        far = (np.cumsum(imp_block, axis=1) - imp_block) / imp_tot[:, None]  # impostors strictly above each score
        frr = 1 - (np.cumsum(gen_block, axis=1) - gen_block) / gen_tot[:, None]
    d = np.nan_to_num(np.abs(far - frr), nan=np.inf)
    best = np.argmax(d <= d.min(axis=1, keepdims=True) + 1e-12, axis=1)  # the highest score among (near) ties
    r = np.arange(m)
    thr = ss[starts][best]
    eer = (far[r, best] + frr[r, best]) / 2
    bad = (imp_tot <= 0) | (gen_tot <= 0)
    return np.where(bad, np.nan, thr), np.where(bad, np.nan, eer)


def eer_threshold(scores, genuine) -> tuple[float, float]:
    """Threshold at the equal error rate and the EER (:func:`weighted_eer_threshold` with unit weights;
    docs/METHODS.md §6.1).

    Parameters
    ----------
    scores : array_like of float
    genuine : array_like of bool

    Returns
    -------
    threshold, eer : float
    """
    s = np.asarray(scores, dtype=float).ravel()
    thr, eer = weighted_eer_threshold(s, genuine, np.ones(s.size))
    return float(thr[0]), float(eer[0])

"""Exposure and skew of rankings: NDKL, Skew@k, MaxSkew@k, MinSkew@k and position-discounted exposure per group,
with query-bootstrap intervals (docs/METHODS.md §8.5).

Every function takes the rankings as one integer matrix ``codes`` of shape ``(n_queries, depth)``: ``codes[q, i]``
is the group code (0 .. G-1) of the item at rank ``i + 1`` of query ``q``; ``-1`` pads a query with fewer results
(padding only at the end). All work is vectorised over queries x ranks x groups.

Definitions (Geyik et al. 2019; the CLIP measures of Berg et al. 2022, debias-vision-lang):

- discount of rank i: ``1 / log2(1 + i)``; ``Z = sum_{i<=k} 1 / log2(1 + i)``;
- ``NDKL = Z^-1 * sum_{i<=k} (1 / log2(1 + i)) * KL(D_i || D*)``, with ``D_i`` the group distribution of the
  top i and ``KL(P || Q) = sum_a P_a ln(P_a / Q_a)`` (natural log, ``0 ln 0 = 0``);
- ``Skew@k(a) = ln(p_a / d_a)``, ``p_a`` the share of group a in the top k, ``d_a`` its desired share; a group
  absent from the top k counts as ``1/k`` (one of the k; debias-vision-lang's convention) unless
  ``absent_share`` says otherwise; MaxSkew@k and MinSkew@k are the largest and smallest over the groups with
  ``d_a > 0``;
- exposure of group a: the sum of the discounts of the ranks it holds in the top k; attention: exposure / Z (its
  share of the position-discounted attention); attention ratio: attention / d_a (1 at parity).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import norm

from fairvision.errors import ParameterError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.resample import DEFAULT_LEVEL, bootstrap_column_sums, percentile_ci

#: the per-query summary measures, in the order of :attr:`RankingFairness.summary`
MEASURES = ("ndkl", "max_skew", "min_skew")
#: random rankings drawn for the reference values of a random ranking (fewer when the depth is large)
RANDOM_RANKINGS = 2000
#: permutations of the pool's group codes in the test of a ranking against chance
N_PERMUTATIONS = 9999
#: above this many permutations x pool items, the test uses the exact permutation moments and a normal
#: approximation instead of drawing permutations
MAX_PERMUTED_CELLS = 5_000_000


def rank_discounts(depth: int) -> np.ndarray:
    """Position discounts ``1 / log2(1 + i)`` for ranks i = 1 .. ``depth`` (docs/METHODS.md §8.5).

    Parameters
    ----------
    depth : int
        Number of ranks.

    Returns
    -------
    numpy.ndarray, shape (depth,)
    """
    return 1.0 / np.log2(np.arange(2, int(depth) + 2, dtype=np.float64))


def check_desired(desired, n_groups: int | None = None) -> np.ndarray:
    """The desired distribution as shares summing to 1 (docs/METHODS.md §8.5).

    Parameters
    ----------
    desired : array_like
        Non-negative, finite shares, not all zero (normalised here).
    n_groups : int, optional
        The number of groups the shares must cover.

    Returns
    -------
    numpy.ndarray
    """
    d = np.asarray(desired, dtype=np.float64).ravel()
    if n_groups is not None and len(d) != n_groups:
        raise ParameterError("desired", f"has {len(d)} shares for {n_groups} groups")
    if len(d) == 0 or not np.isfinite(d).all() or (d < 0).any() or d.sum() <= 0:
        raise ParameterError("desired", "must be finite, non-negative shares with a positive sum")
    return d / d.sum()


def _one_hot(codes, n_groups: int, k: int | None):
    """Checked codes cut at ``k``: the (n, k, G) membership cube, the valid mask and every query's depth."""
    c = np.asarray(codes)
    if c.ndim != 2 or not np.issubdtype(c.dtype, np.integer):
        raise ParameterError("codes", "must be a 2-d integer matrix (queries x ranks) of group codes, -1 for none")
    if k is not None and int(k) < 1:
        raise ParameterError("k", f"must be at least 1, not {k}")
    c = c[:, : int(k)] if k is not None else c
    if (c >= n_groups).any() or (c < -1).any():
        raise ParameterError("codes", f"group codes must lie in -1 .. {n_groups - 1}")
    valid = c >= 0
    if (valid[:, 1:] & ~valid[:, :-1]).any():
        q = int(np.flatnonzero((valid[:, 1:] & ~valid[:, :-1]).any(axis=1))[0])
        raise ParameterError("codes", f"query {q}: a ranked item follows an empty rank (pad only at the end)")
    depth = valid.sum(axis=1)
    if len(c) and (depth == 0).any():
        raise ParameterError("codes", f"query {int(np.flatnonzero(depth == 0)[0])} has no ranked item")
    cube = c[:, :, None] == np.arange(n_groups)[None, None, :]
    return cube, valid, depth


def _kl_rows(p: np.ndarray, log_d: np.ndarray) -> np.ndarray:
    """KL(p || d) along the last axis, natural log, ``0 ln 0 = 0`` (p > 0 only where d > 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - log_d), 0.0)
    return terms.sum(axis=-1)


def ranking_measures(codes, desired, *, k: int | None = None, absent_share: float | None = None) -> dict:
    """Per-query NDKL, Skew@k, MaxSkew@k, MinSkew@k, top-k shares, exposure and attention (docs/METHODS.md §8.5).

    Parameters
    ----------
    codes : int array, shape (n_queries, depth)
        Group code of the item at each rank (-1: no item; only at the end of a query).
    desired : array_like, shape (G,)
        Desired share of each group (normalised to sum 1). A group that appears in a ranking must have a
        positive desired share.
    k : int, optional
        Cut-off (default: the whole depth). A query with fewer than k items is measured at its own depth.
    absent_share : float, optional
        Share that a group absent from a query's top k counts with in Skew@k (default ``1/k_q``, one of the
        query's ``k_q`` items).

    Returns
    -------
    dict
        ``depth`` (n,), ``ndkl`` (n,), ``skew``, ``share``, ``exposure``, ``attention`` (n, G), ``max_skew``,
        ``min_skew`` (n,); skews of groups with desired share 0 are NaN and left out of the max and min.
    """
    d = check_desired(desired)
    g = len(d)
    cube, valid, depth = _one_hot(codes, g, k)
    present = cube.any(axis=(0, 1))
    if (present & (d == 0)).any():
        a = int(np.flatnonzero(present & (d == 0))[0])
        raise ParameterError("desired", f"group {a} appears in the rankings but has desired share 0 (KL undefined)")
    if absent_share is not None and not 0 < float(absent_share) <= 1:
        raise ParameterError("absent_share", f"must be in (0, 1], not {absent_share}")
    width = cube.shape[1]
    disc = rank_discounts(width) * valid
    ranks = np.arange(1, width + 1, dtype=np.float64)
    counts = cube.cumsum(axis=1, dtype=np.float64)  # (n, k, G): counts in the top i
    with np.errstate(divide="ignore"):
        log_d = np.log(d)
    kl = _kl_rows(counts / ranks[None, :, None], log_d)  # (n, k)
    z = disc.sum(axis=1)
    ndkl = (disc * kl).sum(axis=1) / np.where(z > 0, z, 1.0)
    top = counts[np.arange(len(depth)), np.maximum(depth - 1, 0)] if len(depth) else np.zeros((0, g))
    dq = np.maximum(depth, 1)[:, None].astype(np.float64)
    share = top / dq
    floor = (1.0 / dq) if absent_share is None else np.full_like(dq, float(absent_share))
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(d > 0, np.log(np.where(top > 0, share, floor)) - log_d, np.nan)
    exposure = (cube * disc[:, :, None]).sum(axis=1)
    attention = exposure / np.where(z > 0, z, 1.0)[:, None]
    with np.errstate(invalid="ignore"):
        max_skew = np.nanmax(skew, axis=1) if g else np.zeros(len(depth))
        min_skew = np.nanmin(skew, axis=1) if g else np.zeros(len(depth))
    return {"depth": depth, "ndkl": ndkl, "skew": skew, "share": share, "exposure": exposure,
            "attention": attention, "max_skew": max_skew, "min_skew": min_skew}


def random_reference(desired, depths, *, absent_share: float | None = None, seed=0) -> dict[str, float]:
    """Mean NDKL, MaxSkew@k and MinSkew@k of random rankings whose items are drawn independently from ``desired``,
    at the queries' own depths: what an unbiased ranking of this depth scores (NDKL is above 0 even then;
    docs/METHODS.md §8.5).

    Parameters
    ----------
    desired : array_like, shape (G,)
    depths : int array
        The depth of every query (the reference averages over them).
    absent_share : float, optional
        As in :func:`ranking_measures`.
    seed : int, Generator or None

    Returns
    -------
    dict
        ``ndkl``, ``max_skew``, ``min_skew``.
    """
    d = check_desired(desired)
    depths = np.asarray(depths, dtype=np.int64)
    if not len(depths):
        return {m: float("nan") for m in MEASURES}
    width = int(depths.max())
    m = int(max(200, min(RANDOM_RANKINGS, 4_000_000 // max(1, width * len(d)))))
    rng = np.random.default_rng(seed)
    sim = rng.choice(len(d), size=(m, width), p=d)
    out = {name: 0.0 for name in MEASURES}
    values, weights = np.unique(depths, return_counts=True)
    for depth, w in zip(values, weights):  # a handful of distinct depths, each vectorised over the rankings
        r = ranking_measures(sim[:, :depth], d, absent_share=absent_share)
        for name in MEASURES:
            out[name] += float(np.mean(r[name])) * w / len(depths)
    return out


@dataclass
class RankingFairness:
    """Result of :func:`ranking_fairness` (docs/METHODS.md §8.5).

    Attributes
    ----------
    summary : pandas.DataFrame
        Index ``measure`` (``ndkl``, ``max_skew``, ``min_skew``): ``estimate`` (mean over queries), ``ci_low``,
        ``ci_high``, ``level``, ``random`` (the mean of random rankings drawn from the desired distribution at the
        same depths).
    groups : pandas.DataFrame
        Index ``group``: ``desired``, ``share`` (mean top-k share over queries) with CI, ``skew`` = ln(share /
        desired) with CI, ``exposure`` and ``attention`` with CIs, ``attention_ratio``, ``pool_share`` and the
        permutation tests of share and attention against rankings that ignore the groups (``pvalue``,
        ``attention_pvalue`` and their ``*_adjusted``; NaN without a pool), and ``flagged`` (either adjusted
        p-value below alpha).
    per_query : pandas.DataFrame
        ``depth``, ``ndkl``, ``max_skew``, ``min_skew`` of every query.
    """

    summary: pd.DataFrame
    groups: pd.DataFrame
    per_query: pd.DataFrame
    k: int
    n_queries: int
    n_boot: int
    level: float
    correction: str
    alpha: float
    absent_share: float | None = None
    meta: dict = field(default_factory=dict)

    def quantities(self) -> dict[str, float]:
        """``ndkl``, ``max_skew``, ``min_skew`` (means over queries), ``n_flagged_groups``, and per group
        ``skew.<group>``, ``attention_ratio.<group>``."""
        q = {m: float(self.summary.loc[m, "estimate"]) for m in MEASURES}
        q["n_flagged_groups"] = float(self.groups["flagged"].sum())
        for grp, row in self.groups.iterrows():
            q[f"skew.{grp}"] = float(row["skew"])
            q[f"attention_ratio.{grp}"] = float(row["attention_ratio"])
        return q


@dataclass(frozen=True)
class RankingPool:
    """The items the rankings are drawn from, for the permutation test (docs/METHODS.md §8.5).

    Attributes
    ----------
    items : int array, shape (n_queries, depth)
        Pool index of the item at each rank (-1: no item), in the layout of the rankings' ``codes``.
    codes : int array, shape (n_items,)
        Group code of every pool item (0 .. G-1): the images of a face set, the items of a catalog.
    """

    items: np.ndarray
    codes: np.ndarray


def _weights(valid: np.ndarray, depth: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Weight of every (query, rank) in the mean top-k share and in the mean attention."""
    disc = rank_discounts(valid.shape[1])[None, :] * valid
    share_w = valid / np.maximum(depth, 1)[:, None] / n
    att_w = disc / np.maximum(disc.sum(axis=1), 1e-300)[:, None] / n
    return share_w, att_w


def permutation_pvalues(pool: RankingPool, n_groups: int, k: int | None = None, *, n_perm: int = N_PERMUTATIONS,
                        seed=0) -> tuple[np.ndarray, np.ndarray, int]:
    """Two-sided permutation p-values of every group's mean top-k share and mean attention against rankings
    that ignore the groups: the pool's group codes are shuffled over its items, the rankings kept
    (docs/METHODS.md §8.5). The null expectation of both is the group's pool share; a permutation counts when it
    is at least as far from it as the observed value; ``p = (1 + count) / (1 + n_perm)``. When ``n_perm x
    n_items`` exceeds :data:`MAX_PERMUTED_CELLS`, both statistics (weighted sums over the items) are referred to
    the normal distribution with their exact permutation mean and variance instead (``n_perm`` returned as 0).

    Parameters
    ----------
    pool : RankingPool
    n_groups : int
    k : int, optional
        Cut-off (default the whole depth).
    n_perm : int
        Monte Carlo permutations.
    seed : int, Generator or None

    Returns
    -------
    share_p, attention_p : numpy.ndarray, shape (G,)
    n_perm : int
        The permutations drawn (0: normal approximation).
    """
    items = np.asarray(pool.items)
    items = items[:, : int(k)] if k is not None else items
    codes = np.asarray(pool.codes, dtype=np.int64)
    n_items, g = len(codes), int(n_groups)
    if n_items == 0 or (codes < 0).any() or (codes >= g).any() or (items >= n_items).any():
        raise ParameterError("pool", f"codes must lie in 0 .. {g - 1} and items index the pool's {n_items} items")
    valid = items >= 0
    share_w, att_w = _weights(valid, valid.sum(axis=1), len(items))
    flat = items[valid]
    ws = np.bincount(flat, weights=share_w[valid], minlength=n_items)
    wa = np.bincount(flat, weights=att_w[valid], minlength=n_items)
    ranked = np.flatnonzero((ws > 0) | (wa > 0))
    centre = np.bincount(codes, minlength=g) / n_items
    obs = np.stack([np.bincount(codes[ranked], weights=w[ranked], minlength=g) for w in (ws, wa)])
    far = np.abs(obs - centre) - 1e-12
    if int(n_perm) * n_items > MAX_PERMUTED_CELLS:
        p_norm = [_normal_pvalues(w, codes, g, o) for w, o in ((ws, obs[0]), (wa, obs[1]))]
        return p_norm[0], p_norm[1], 0
    n_perm = int(n_perm)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_perm, 5_000_000 // n_items))
    member = np.zeros((n_items, g))
    member[np.arange(n_items), codes] = 1.0
    base = np.arange(n_items)
    count = np.zeros((2, g))
    # shuffling the codes over the items is shuffling the weights over the codes: T = w[sigma] @ membership
    for start in range(0, n_perm, chunk):  # chunks of permutations, each one matrix product
        sigma = rng.permuted(np.broadcast_to(base, (min(chunk, n_perm - start), n_items)), axis=1)
        for j, w in enumerate((ws, wa)):
            count[j] += (np.abs(w[sigma] @ member - centre) >= far[j]).sum(axis=0)
    p = (1.0 + count) / (1.0 + n_perm)
    return p[0], p[1], n_perm


def _normal_pvalues(weights: np.ndarray, codes: np.ndarray, n_groups: int, observed: np.ndarray) -> np.ndarray:
    """Two-sided p-values of ``T_a = sum_j w_j [code_pi(j) = a]`` under random permutations, from its exact mean
    ``p_a sum w`` and variance ``sum (w - mean w)^2 * N p_a (1 - p_a) / (N - 1)`` and the normal distribution."""
    n = len(codes)
    p = np.bincount(codes, minlength=n_groups) / n
    var = ((weights - weights.mean()) ** 2).sum() * n * p * (1 - p) / max(n - 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(observed - p * weights.sum()) / np.sqrt(var)
    return np.where(var > 0, 2.0 * norm.sf(z), 1.0)


def ranking_fairness(codes, desired, *, groups=None, k: int | None = None, absent_share: float | None = None,
                     pool: RankingPool | None = None, n_boot: int = 1000, level: float = DEFAULT_LEVEL, seed=0,
                     correction: str = DEFAULT_CORRECTION, alpha: float = 0.05) -> RankingFairness:
    """Exposure and skew of rankings by group with query-bootstrap intervals (docs/METHODS.md §8.5).

    Parameters
    ----------
    codes : int array, shape (n_queries, depth)
        Group code of the item at each rank (-1 pads a short query at the end).
    desired : array_like, shape (G,)
        Desired share of each group (e.g. the catalog's shares).
    groups : sequence, optional
        Names of the G groups (default ``0 .. G-1``).
    k : int, optional
        Cut-off (default the whole depth).
    absent_share : float, optional
        Share of a group absent from a top k in Skew@k (default ``1/k``; :func:`ranking_measures`).
    pool : RankingPool, optional
        The items ranked and their groups (``pool.codes[pool.items]`` must equal ``codes``): adds the permutation
        tests of :func:`permutation_pvalues` (without it the p-values are NaN and no group is flagged).
    n_boot : int
        Query-bootstrap replicates (0: no intervals).
    level : float
        Interval level.
    seed : int, Generator or None
        Randomness of the bootstrap and of the random reference.
    correction : str
        Multiple-testing correction over the 2G permutation tests (share and attention of every group).
    alpha : float
        Level at which a group is flagged.

    Returns
    -------
    RankingFairness
    """
    d = check_desired(desired)
    names = [str(x) for x in (groups if groups is not None else range(len(d)))]
    if len(names) != len(d):
        raise ParameterError("groups", f"has {len(names)} names for {len(d)} desired shares")
    r = ranking_measures(codes, d, k=k, absent_share=absent_share)
    n, g = len(r["depth"]), len(d)
    if n == 0:
        raise ParameterError("codes", "has no query")
    per_query = np.column_stack([r["ndkl"], r["max_skew"], r["min_skew"], r["share"], r["attention"], r["exposure"]])
    est = per_query.mean(axis=0)
    if n_boot > 0:
        reps = bootstrap_column_sums(per_query, int(n_boot), seed=seed) / n
        lo, hi = percentile_ci(reps, level)
    else:
        lo = hi = np.full(len(est), np.nan)
    floor = float(np.mean(1.0 / r["depth"])) / n if absent_share is None else float(absent_share) / n

    def skew_of(share):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(d > 0, np.log(np.maximum(share, floor)) - np.log(np.where(d > 0, d, 1.0)), np.nan)

    sl = slice(3, 3 + g)
    al = slice(3 + g, 3 + 2 * g)
    el = slice(3 + 2 * g, 3 + 3 * g)
    p_share = p_att = np.full(g, np.nan)
    n_perm, pool_share = 0, np.full(g, np.nan)
    if pool is not None:
        pool_codes = np.asarray(pool.codes, dtype=np.int64)
        items = np.asarray(pool.items)
        if items.shape != np.asarray(codes).shape or (np.where(items >= 0, pool_codes[np.maximum(items, 0)], -1)
                                                      != np.asarray(codes)).any():
            raise ParameterError("pool", "the groups of pool.items must equal codes")
        p_share, p_att, n_perm = permutation_pvalues(pool, g, k, seed=seed)
        pool_share = np.bincount(pool_codes, minlength=g) / len(pool_codes)
    adjusted = np.full(2 * g, np.nan)
    tested = np.isfinite(np.concatenate([p_share, p_att]))
    if tested.any():
        adjusted[tested] = adjust_pvalues(np.concatenate([p_share, p_att])[tested], correction)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d > 0, est[al] / d, np.nan)
    table = pd.DataFrame({
        "desired": d, "share": est[sl], "share_ci_low": lo[sl], "share_ci_high": hi[sl], "skew": skew_of(est[sl]),
        "skew_ci_low": skew_of(lo[sl]), "skew_ci_high": skew_of(hi[sl]), "exposure": est[el],
        "exposure_ci_low": lo[el], "exposure_ci_high": hi[el], "attention": est[al], "attention_ci_low": lo[al],
        "attention_ci_high": hi[al], "attention_ratio": ratio, "pool_share": pool_share, "pvalue": p_share,
        "pvalue_adjusted": adjusted[:g], "attention_pvalue": p_att, "attention_pvalue_adjusted": adjusted[g:],
    }, index=pd.Index(names, name="group"))
    table["flagged"] = (table["pvalue_adjusted"] < alpha) | (table["attention_pvalue_adjusted"] < alpha)
    ref = random_reference(d, r["depth"], absent_share=absent_share, seed=seed)
    summary = pd.DataFrame({"estimate": est[:3], "ci_low": lo[:3], "ci_high": hi[:3], "level": float(level),
                            "random": [ref[m] for m in MEASURES]}, index=pd.Index(list(MEASURES), name="measure"))
    pq = pd.DataFrame({"depth": r["depth"], "ndkl": r["ndkl"], "max_skew": r["max_skew"], "min_skew": r["min_skew"]})
    width = int(np.asarray(codes).shape[1] if k is None else min(int(k), np.asarray(codes).shape[1]))
    return RankingFairness(summary=summary, groups=table, per_query=pq, k=width, n_queries=n, n_boot=int(n_boot),
                           level=float(level), correction=correction, alpha=float(alpha), absent_share=absent_share,
                           meta={"n_perm": n_perm})

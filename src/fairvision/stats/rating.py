"""Elo ratings from pairwise choices, and group comparisons of ratings.

Thong et al.'s saliency-cropping study (docs/METHODS.md §6.5):
``p_i = 1 / (1 + 10^((R_j - R_i)/M))``; after a game
``R_i' = R_i + K (S_i - p_i)`` with ``S_i`` in {0, 1}, and the same for j.
Defaults M = 400, K = 16, initial rating 1400. Ratings depend on the order of
the games, so they can be averaged over random orders. Group comparisons use
independent t-tests with a multiple-comparison correction (the study used
Bonferroni; the default here is Holm, :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`).

The cropping audit (docs/METHODS.md §6.9) adds the preference implied by a rating
difference (:func:`expected_score`), win rates of every ordered pair of groups
(:func:`win_rates`), group means of the ratings with a two-stage bootstrap over
subjects and orders (:func:`group_elo`) and the share of games won by the first
(top) position (:func:`position_bias`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.proportions import wilson_interval
from fairvision.stats.resample import cluster_bootstrap_weights, percentile_ci
from fairvision.stats.results import TestResult

#: most orders played together: each step is a dozen numpy calls over the block, so larger blocks spend less time
#: per order in call overhead, smaller ones keep the block's ratings (block x players x 8 bytes) in cache; 256 was
#: the fastest of 100-1,000 on 600 players (benchmarks/bench_elo.py)
ORDER_BLOCK = 256
#: fewer orders per block when the games are many: a block draws block x n_games random numbers (and as many
#: int64 positions), so this bounds its memory to about 16 bytes x this
ORDER_BLOCK_ELEMENTS = 1 << 23
#: game positions whose players' flat positions are gathered at once (one vectorised gather per chunk instead of
#: five small ones per step)
_STEP_CHUNK = 512


def _play_block(a: np.ndarray, b: np.ndarray, a_won: np.ndarray, n_players: int, orders: np.ndarray,
                m: float, k: float, initial: float) -> np.ndarray:
    """Ratings after playing the games in each order of a block; ``orders`` has shape (n_orders, n_games).

    One step per game position, vectorised over the orders: the ratings of all orders sit in one flat array
    (order ``o``'s player ``i`` at ``o * n_players + i``). For a chunk of steps the flat positions of both
    players of every order (``[i_0..i_B, j_0..j_B]``) and the outcomes are gathered at once into contiguous
    rows, so a step is one ``take``, the formula, and one flat assignment into preallocated buffers (no step
    allocates). Within a step the players of one order differ and the orders occupy disjoint slices, so the
    assignment has no duplicate index. The arithmetic is the formula's, operation for operation, so every
    order gives the bit-identical ratings of playing it alone.
    """
    n_orders, n_games = orders.shape
    B = n_orders
    r = np.full(B * n_players, float(initial))
    base = np.arange(B, dtype=np.int64) * n_players
    chunk = min(_STEP_CHUNK, max(1, n_games))
    pos = np.empty((chunk, 2 * B), np.int64)  # flat positions of player i (first half) and j (second half)
    won = np.empty((chunk, B))
    rr, t = np.empty(2 * B), np.empty(B)
    ri, rj = rr[:B], rr[B:]
    for c0 in range(0, n_games, chunk):
        c = min(chunk, n_games - c0)
        g = np.ascontiguousarray(orders[:, c0:c0 + c].T)  # (c, B): the game at each step of each order
        np.add(a.take(g), base, out=pos[:c, :B])
        np.add(b.take(g), base, out=pos[:c, B:])
        a_won.take(g, out=won[:c])
        for step in range(c):  # inherently sequential; vectorised over orders
            f = pos[step]
            r.take(f, out=rr)
            np.subtract(rj, ri, out=t)
            t /= m
            np.power(10.0, t, out=t)
            t += 1.0
            np.divide(1.0, t, out=t)  # p_i
            np.subtract(won[step], t, out=t)
            t *= k  # delta = K (S_i - p_i); S_j - p_j = -(S_i - p_i)
            ri += t
            rj -= t
            r[f] = rr
    return r.reshape(B, n_players)


def elo_orders(a, b, a_won, n_players: int, *, n_orders: int = 0, m: float = 400.0, k: float = 16.0,
               initial: float = 1400.0, seed: np.random.Generator | int | None = 0,
               block: int | None = None) -> np.ndarray:
    """Elo ratings of every player after each of several random orders of the games (docs/METHODS.md §6.5).

    Parameters
    ----------
    a, b : int array (n_games,)
        Player codes ``0 .. n_players-1`` of the two players of every game (``a != b``).
    a_won : bool or float array (n_games,)
        1 where ``a`` won, 0 where ``b`` won.
    n_players : int
        Number of players.
    n_orders : int
        0: the games in the given order (one row). N > 0: N random orders, order ``o`` being
        ``argsort`` of row ``o`` of ``rng.random((N, n_games))``.
    m, k, initial : float
        Scale M, update factor K and initial rating.
    seed : int, numpy.random.Generator or None
        Randomness of the orders.
    block : int, optional
        Orders played together (default: at most :data:`ORDER_BLOCK` and about :data:`ORDER_BLOCK_ELEMENTS` /
        n_games, in blocks of equal size). The random numbers are drawn block after block from one generator, so
        the orders, and the ratings, do not depend on it.

    Returns
    -------
    numpy.ndarray, shape (max(1, n_orders), n_players)
        Ratings after each order.
    """
    a = np.ascontiguousarray(a, dtype=np.int64)
    b = np.ascontiguousarray(b, dtype=np.int64)
    won = np.ascontiguousarray(a_won, dtype=np.float64)
    n = a.size
    if n_orders == 0:
        return _play_block(a, b, won, n_players, np.arange(n, dtype=np.int64)[None, :], m, k, initial)
    if n_orders < 0:
        raise FairvisionError("elo: n_orders must be 0 (given order) or a positive number of random orders")
    rng = np.random.default_rng(seed)
    if not block:
        cap = max(1, min(ORDER_BLOCK, ORDER_BLOCK_ELEMENTS // max(1, n)))
        block = -(-n_orders // -(-n_orders // cap))  # equal blocks: 1,000 orders as 4 x 250, not 3 x 256 + 232
    out = np.empty((n_orders, n_players))
    for start in range(0, n_orders, block):
        stop = min(n_orders, start + block)
        orders = np.argsort(rng.random((stop - start, n)), axis=1)
        out[start:stop] = _play_block(a, b, won, n_players, orders, m, k, initial)
    return out


def elo(data: pd.DataFrame, *, m: float = 400.0, k: float = 16.0, initial: float = 1400.0, n_orders: int = 0,
        seed: np.random.Generator | int | None = 0):
    """Elo ratings of every player from a table of games (docs/METHODS.md §6.5).

    Parameters
    ----------
    data : pandas.DataFrame
        The games: columns ``a``, ``b`` (the two players) and ``winner`` (equal to ``a``
        or ``b``), one row per game, in the order played.
    m, k, initial : float
        Scale M, update factor K and initial rating (400, 16, 1400).
    n_orders : int
        0: play the games in the given order and return a Series. N > 0: play
        them in N random orders (seeded) and return the mean and standard
        deviation of every player's rating over the orders.
    seed : int, numpy.random.Generator or None
        Randomness of the random orders.

    Returns
    -------
    pandas.Series or pandas.DataFrame
        Ratings indexed by player (``n_orders == 0``), or a DataFrame with
        columns ``mean``, ``sd``, ``games`` (``n_orders > 0``).
    """
    games = data
    if not isinstance(games, pd.DataFrame):
        raise FairvisionError("elo: games must be a DataFrame with columns a, b, winner")
    for col in ("a", "b", "winner"):
        if col not in games.columns:
            raise ColumnError(f"games: missing column {col!r}; columns are {', '.join(map(str, games.columns))}")
    if len(games) == 0:
        raise FairvisionError("games: the table has no rows")
    ga, gb, gw = (games[c].to_numpy(dtype=object) for c in ("a", "b", "winner"))
    for name, arr in (("a", ga), ("b", gb), ("winner", gw)):
        miss = pd.isna(pd.Series(arr)).to_numpy()
        if miss.any():
            raise ColumnError(f"games: row {int(np.flatnonzero(miss)[0]) + 1}: column {name!r} is empty")
    a_won = ga == gw
    bad = ~a_won & (gb != gw)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"games: row {row + 1}: winner {gw[row]!r} is neither a ({ga[row]!r}) nor b ({gb[row]!r})")
    same = ga == gb
    if same.any():
        raise ColumnError(f"games: row {int(np.flatnonzero(same)[0]) + 1}: a player cannot play against itself")
    codes, players = pd.factorize(pd.Series(np.concatenate([ga, gb])), sort=False)
    n = len(ga)
    ia, ib = codes[:n], codes[n:]
    n_orders = int(n_orders)
    if n_orders < 0:
        raise FairvisionError("elo: n_orders must be 0 (given order) or a positive number of random orders")
    index = pd.Index(list(players), name="player")
    r = elo_orders(ia, ib, a_won, len(players), n_orders=n_orders, m=m, k=k, initial=initial, seed=seed)
    if n_orders == 0:
        return pd.Series(r[0], index=index, name="rating")
    n_games = np.bincount(ia, minlength=len(players)) + np.bincount(ib, minlength=len(players))
    return pd.DataFrame({"mean": r.mean(axis=0), "sd": r.std(axis=0, ddof=1) if n_orders > 1 else np.zeros(len(players)),
                         "games": n_games}, index=index)


def expected_score(diff, m: float = 400.0):
    """Expected score (preference) of a player rated ``diff`` points above its opponent (docs/METHODS.md §6.9).

    Parameters
    ----------
    diff : float or array_like
        Rating difference ``R_i - R_j``.
    m : float
        Scale M of the ratings.

    Returns
    -------
    float or numpy.ndarray
        ``1 / (1 + 10^(-diff / M))`` in (0, 1): the share of games i is expected to win against j (0.5 at
        equal ratings, 10/11 at ``diff = M``).
    """
    out = 1.0 / (1.0 + 10.0 ** (-np.asarray(diff, dtype=float) / m))
    return float(out) if out.ndim == 0 else out


def win_rates(group_a, group_b, outcome, *, level: float = 0.95) -> pd.DataFrame:
    """Games won by every group against every other group, with Wilson intervals (docs/METHODS.md §6.9).

    Parameters
    ----------
    group_a, group_b : array_like (n_games,)
        Group of the two players of every game (labels; games within one group are not counted).
    outcome : array_like (n_games,)
        1 where ``a`` won, 0 where ``b`` won, NaN where the game had no winner (a tie, ``none``).
    level : float
        Level of the Wilson intervals (docs/METHODS.md §4.4).

    Returns
    -------
    pandas.DataFrame
        One row per ordered pair of groups that met: ``group``, ``opponent``, ``games`` (decided games
        between them), ``wins`` (of ``group``), ``losses``, ``none`` (games without a winner, not in
        ``games``), ``win_rate`` = wins / games, ``ci_low``, ``ci_high``. The rows (g, h) and (h, g) are
        complements: their win rates add up to 1.
    """
    ga = pd.Series(np.asarray(group_a, dtype=object))
    gb = pd.Series(np.asarray(group_b, dtype=object))
    out = np.asarray(outcome, dtype=float)
    codes, labels = pd.factorize(pd.concat([ga, gb], ignore_index=True), sort=True)
    n, G = len(ga), len(labels)
    ca, cb = codes[:n], codes[n:]
    cell = ca * G + cb
    a_wins = np.bincount(cell, weights=(out == 1).astype(float), minlength=G * G).reshape(G, G)
    b_wins = np.bincount(cell, weights=(out == 0).astype(float), minlength=G * G).reshape(G, G)
    ties = np.bincount(cell, weights=np.isnan(out).astype(float), minlength=G * G).reshape(G, G)
    wins = a_wins + b_wins.T  # wins[g, h]: games g won against h, whichever position g had
    games = wins + wins.T
    none = ties + ties.T
    lo, hi = wilson_interval(wins, games, level)
    gi, hi_ = np.nonzero(((games + none) > 0) & ~np.eye(G, dtype=bool))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = wins / games
    return pd.DataFrame({"group": labels[gi], "opponent": labels[hi_], "games": games[gi, hi_].astype(np.int64),
                         "wins": wins[gi, hi_].astype(np.int64), "losses": wins[hi_, gi].astype(np.int64),
                         "none": none[gi, hi_].astype(np.int64), "win_rate": rate[gi, hi_],
                         "ci_low": lo[gi, hi_], "ci_high": hi[gi, hi_]})


@dataclass
class GroupElo:
    """Group means of Elo ratings over random orders (docs/METHODS.md §6.9).

    Attributes
    ----------
    table : pandas.DataFrame
        Indexed by group code: ``n_players``, ``n_subjects``, ``estimate`` (mean rating of the group's
        players, averaged over the orders), ``ci_low``, ``ci_high``, ``level``, ``sd_orders`` (standard
        deviation of the group mean from one order to another).
    replicates : numpy.ndarray, shape (n_boot, n_groups)
        Joint two-stage bootstrap replicates of the group means (differences of two groups take their
        intervals from these).
    order_means : numpy.ndarray, shape (n_orders, n_groups)
        The group mean after each order.
    """

    table: pd.DataFrame
    replicates: np.ndarray
    order_means: np.ndarray


def group_elo(ratings, groups, clusters=None, *, n_groups: int | None = None, n_boot: int = 1000,
              level: float = 0.95, seed: np.random.Generator | int | None = 0, chunk: int = 250) -> GroupElo:
    """Mean Elo rating of every group with a two-stage bootstrap interval over subjects and orders.

    A group's rating varies for two reasons: which people happen to be in it (its players' ratings differ)
    and the order of the games (each order gives every player another rating). Each replicate therefore
    resamples subjects with replacement (all of a subject's players go together, docs/METHODS.md §4.2) and,
    independently, the orders with replacement, and averages the resampled players' ratings over the
    resampled orders (docs/METHODS.md §6.9).

    Parameters
    ----------
    ratings : array_like, shape (n_orders, n_players)
        Ratings after each order (:func:`elo_orders`).
    groups : int array (n_players,)
        Group code of every player; negative codes belong to no group.
    clusters : int array (n_players,), optional
        Subject code of every player; default: every player its own subject.
    n_groups : int, optional
        Number of groups (default ``groups.max() + 1``).
    n_boot, level, seed
        Replicates (0: no interval), two-sided level, randomness.
    chunk : int
        Replicates computed at a time (bounds memory to ``chunk x n_players``); the draws do not depend on it.

    Returns
    -------
    GroupElo
    """
    R = np.atleast_2d(np.asarray(ratings, dtype=float))
    n_orders, P = R.shape
    groups = np.asarray(groups, dtype=np.int64)
    clusters = np.arange(P) if clusters is None else np.asarray(clusters, dtype=np.int64)
    G = (int(groups.max()) + 1 if groups.size else 0) if n_groups is None else int(n_groups)
    inside = groups >= 0
    onehot = np.zeros((P, G))
    onehot[np.flatnonzero(inside), groups[inside]] = 1.0
    n_players = onehot.sum(axis=0)
    S = int(clusters.max()) + 1 if clusters.size else 0
    subj = pd.DataFrame({"g": groups[inside], "s": clusters[inside]}).drop_duplicates()
    n_subjects = np.bincount(subj["g"].to_numpy(np.int64), minlength=G)
    with np.errstate(invalid="ignore", divide="ignore"):
        order_means = (R @ onehot) / n_players
        estimate = order_means.mean(axis=0)
        sd_orders = order_means.std(axis=0, ddof=1) if n_orders > 1 else np.zeros(G)
    reps = np.full((int(n_boot), G), np.nan)
    if n_boot > 0 and S > 0:
        rng = np.random.default_rng(seed)
        step = max(1, int(chunk))
        for start in range(0, int(n_boot), step):
            stop = min(int(n_boot), start + step)
            w = cluster_bootstrap_weights(S, stop - start, rng)[:, clusters]  # (c, P) draws of each player
            v = cluster_bootstrap_weights(n_orders, stop - start, rng) if n_orders > 1 else np.ones((stop - start, 1))
            player = (v @ R) / n_orders  # each player's rating over the resampled orders
            with np.errstate(invalid="ignore", divide="ignore"):
                reps[start:stop] = ((w * player) @ onehot) / (w @ onehot)
    lo, hi = percentile_ci(reps, level) if n_boot > 0 else (np.full(G, np.nan), np.full(G, np.nan))
    table = pd.DataFrame({"n_players": n_players.astype(np.int64), "n_subjects": n_subjects.astype(np.int64),
                          "estimate": estimate, "ci_low": lo, "ci_high": hi, "level": level, "sd_orders": sd_orders})
    return GroupElo(table, reps, order_means)


@dataclass
class PositionBias(TestResult):
    """Share of decided games won by the first (top) position, with a Wilson interval and an exact binomial
    test against one half (docs/METHODS.md §6.9)."""

    estimate: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    level: float = 0.95
    wins: int = 0
    games: int = 0


def position_bias(first_won, *, level: float = 0.95) -> PositionBias:
    """How often the player in the first position (the top face of a composite) won (docs/METHODS.md §6.9).

    Parameters
    ----------
    first_won : bool array (n_games,)
        Whether the first player won each decided game.
    level : float
        Level of the Wilson interval.

    Returns
    -------
    PositionBias
        ``statistic`` is the number of wins, ``pvalue`` the two-sided exact binomial test of a share of
        one half; NaN with no games.
    """
    x = np.asarray(first_won, dtype=bool)
    n, w = int(x.size), int(x.sum())
    if n == 0:
        return PositionBias(float("nan"), float("nan"), level=level)
    lo, hi = wilson_interval(w, n, level)
    p = float(stats.binomtest(w, n, 0.5).pvalue)
    return PositionBias(float(w), p, w / n, float(lo), float(hi), level, w, n)


def compare_elo_groups(ratings, groups, *, correction: str = DEFAULT_CORRECTION, alpha: float = 0.05,
                       equal_var: bool = True) -> pd.DataFrame:
    """Independent t-tests of ratings between every pair of groups, with correction (docs/METHODS.md §6.5).

    Parameters
    ----------
    ratings : pandas.Series or DataFrame
        Output of :func:`elo` (for a DataFrame the ``mean`` column is used).
    groups : mapping or pandas.Series
        Group of every player (indexed by player).
    correction : {"holm", "bonferroni", "bh", "none"}
        Multiple-comparison correction over the pairs (default Holm; the
        study used Bonferroni).
    alpha : float
        Significance level applied to ``pvalue_adjusted``.
    equal_var : bool
        Student's t-test (True, as the paper) or Welch's (False).

    Returns
    -------
    pandas.DataFrame
        One row per pair: ``group_a, group_b, n_a, n_b, mean_a, mean_b,
        statistic, pvalue, pvalue_adjusted, significant``.
    """
    r = ratings["mean"] if isinstance(ratings, pd.DataFrame) else pd.Series(ratings)
    g = pd.Series(groups)
    missing = [p for p in r.index if p not in g.index]
    if missing:
        raise FairvisionError(f"compare_elo_groups: no group for player {missing[0]!r}")
    g = g.loc[r.index]
    labels = sorted(g.dropna().unique(), key=str)
    rows = []
    for ga_, gb_ in itertools.combinations(labels, 2):  # few groups; scipy per pair is fine here
        xa = r[g == ga_].to_numpy(float)
        xb = r[g == gb_].to_numpy(float)
        if len(xa) < 2 or len(xb) < 2:
            t, p = np.nan, np.nan
        else:
            res = stats.ttest_ind(xa, xb, equal_var=equal_var)
            t, p = float(res.statistic), float(res.pvalue)
        rows.append({"group_a": ga_, "group_b": gb_, "n_a": len(xa), "n_b": len(xb), "mean_a": xa.mean() if len(xa) else np.nan,
                     "mean_b": xb.mean() if len(xb) else np.nan, "statistic": t, "pvalue": p})
    out = pd.DataFrame(rows, columns=["group_a", "group_b", "n_a", "n_b", "mean_a", "mean_b", "statistic", "pvalue"])
    out["pvalue_adjusted"] = adjust_pvalues(out["pvalue"].to_numpy(float), correction) if len(out) else []
    out["significant"] = out["pvalue_adjusted"] < alpha
    return out

"""Elo ratings from pairwise choices, and group comparisons of ratings.

Thong et al.'s saliency-cropping study (docs/METHODS.md §6.5):
``p_i = 1 / (1 + 10^((R_j - R_i)/M))``; after a game
``R_i' = R_i + K (S_i - p_i)`` with ``S_i`` in {0, 1}, and the same for j.
Defaults M = 400, K = 16, initial rating 1400. Ratings depend on the order of
the games, so they can be averaged over random orders. Group comparisons use
independent t-tests with a multiple-comparison correction (the study used
Bonferroni; the default here is Holm, :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats

from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues


def _play(a: np.ndarray, b: np.ndarray, a_won: np.ndarray, n_players: int, orders: np.ndarray,
          m: float, k: float, initial: float) -> np.ndarray:
    """Ratings after playing the games in each order; ``orders`` has shape (n_orders, n_games)."""
    n_orders = orders.shape[0]
    r = np.full((n_orders, n_players), float(initial))
    rows = np.arange(n_orders)
    for step in range(orders.shape[1]):  # inherently sequential; vectorised over orders
        g = orders[:, step]
        i, j, s = a[g], b[g], a_won[g]
        ri, rj = r[rows, i], r[rows, j]
        p_i = 1.0 / (1.0 + 10.0 ** ((rj - ri) / m))
        delta = k * (s - p_i)  # S_j - p_j = -(S_i - p_i)
        r[rows, i] = ri + delta
        r[rows, j] = rj - delta
    return r


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
    if n_orders == 0:
        r = _play(ia, ib, a_won.astype(float), len(players), np.arange(n)[None, :], m, k, initial)[0]
        return pd.Series(r, index=index, name="rating")
    rng = np.random.default_rng(seed)
    orders = np.argsort(rng.random((n_orders, n)), axis=1)
    r = _play(ia, ib, a_won.astype(float), len(players), orders, m, k, initial)
    n_games = np.bincount(ia, minlength=len(players)) + np.bincount(ib, minlength=len(players))
    return pd.DataFrame({"mean": r.mean(axis=0), "sd": r.std(axis=0, ddof=1) if n_orders > 1 else np.zeros(len(players)),
                         "games": n_games}, index=index)


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

"""Benchmark of Elo ratings over random orders of the games (docs/METHODS.md §6.5, §6.9), fast vs naive.

Games between ~600 faces in 4 groups (20,000 games; the stronger group wins more often), rated over N random
orders (default 200, ``--full`` 1,000 as the issue asks). Three sides, all drawing the same orders (argsort of a
seeded uniform matrix):

* ``current``: :func:`fairvision.stats.rating.elo_orders`: one step per game position vectorised over the
  orders, orders drawn and played in blocks of at most 256 (bounded memory, the block's ratings in cache), the
  players' flat positions gathered for 512 steps at a time into contiguous rows, and per step one ``take``, the
  formula and one flat assignment into preallocated buffers (11 numpy calls instead of about 20);
* ``former``: the implementation it replaced (kept here verbatim): the whole (N, n_games) order matrix at once
  and 2-D fancy indexing per step; asserted bit-identical to ``current``;
* ``naive``: a plain Python loop over orders and games (dict of ratings, scalar formula); run on a few orders
  and scaled to N (said in the output), asserted equal to ``current`` on those orders to 1e-9.

One thread (BLAS pinned), CPU and wall time, median of interleaved runs, the ratios; peak traced memory of
``current`` and ``former``.

Run: ``.venv/bin/python benchmarks/bench_elo.py [--full] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import interleaved, load_note, peak_bytes, pinned  # noqa: E402

from fairvision.stats.rating import elo_orders  # noqa: E402

M, K, INITIAL = 400.0, 16.0, 1400.0


def games(n_players: int = 600, n_games: int = 20000, seed: int = 0):
    """Player codes a, b and whether a won; group g in 0..3 wins against a lower group more often."""
    rng = np.random.default_rng(seed)
    group = np.arange(n_players) % 4
    a = rng.integers(0, n_players, n_games)
    b = (a + rng.integers(1, n_players, n_games)) % n_players
    p = 1 / (1 + 10 ** (-(group[a] - group[b]) * 40 / M))
    return a, b, rng.random(n_games) < p


def former(a, b, a_won, n_players, n_orders, seed):
    """The implementation ``elo_orders`` replaced: every order at once, 2-D fancy indexing per step."""
    orders = np.argsort(np.random.default_rng(seed).random((n_orders, a.size)), axis=1)
    s_all = a_won.astype(float)
    r = np.full((n_orders, n_players), INITIAL)
    rows = np.arange(n_orders)
    for step in range(orders.shape[1]):
        g = orders[:, step]
        i, j, s = a[g], b[g], s_all[g]
        ri, rj = r[rows, i], r[rows, j]
        p_i = 1.0 / (1.0 + 10.0 ** ((rj - ri) / M))
        delta = K * (s - p_i)
        r[rows, i] = ri + delta
        r[rows, j] = rj - delta
    return r


def naive(a, b, a_won, n_players, n_orders, seed, sub):
    """A plain Python loop over the first ``sub`` of the same orders and their games."""
    orders = np.argsort(np.random.default_rng(seed).random((n_orders, a.size)), axis=1)[:sub]
    al, bl, wl = a.tolist(), b.tolist(), a_won.tolist()
    out = []
    for order in orders.tolist():
        r = [INITIAL] * n_players
        for g in order:
            i, j = al[g], bl[g]
            p_i = 1.0 / (1.0 + 10.0 ** ((r[j] - r[i]) / M))
            d = K * ((1.0 if wl[g] else 0.0) - p_i)
            r[i] += d
            r[j] -= d
        out.append(r)
    return np.asarray(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="1,000 orders (the issue's size) instead of 200")
    ap.add_argument("--orders", type=int, default=None)
    ap.add_argument("--games", type=int, default=20000)
    ap.add_argument("--players", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive-orders", type=int, default=2, help="orders the naive loop plays (scaled to N)")
    args = ap.parse_args(argv)
    n_orders = args.orders or (1000 if args.full else 200)
    a, b, won = games(args.players, args.games)
    P, seed, sub = args.players, 7, min(args.naive_orders, n_orders)
    print(f"Elo over {n_orders:,} random orders of {args.games:,} games, {P} players, 4 groups; 1 thread")
    print(load_note())
    with pinned(1):
        t = interleaved({
            "current": lambda: elo_orders(a, b, won, P, n_orders=n_orders, seed=seed),
            "former": lambda: former(a, b, won, P, n_orders, seed),
            "naive": lambda: naive(a, b, won, P, n_orders, seed, sub),
        }, args.repeats)
    cur, old, nai = t["current"], t["former"], t["naive"]
    assert np.array_equal(cur.result, old.result), "current and former differ"
    assert np.allclose(cur.result[:sub], nai.result, rtol=0, atol=1e-9), "current and naive differ"
    scale = n_orders / sub
    print(f"current : {cur.line()}")
    print(f"former  : {old.line()}")
    print(f"naive   : {nai.line()}  -- {sub} of {n_orders:,} orders; scaled x{scale:g}: "
          f"CPU {nai.cpu_median * scale:.1f} s, wall {nai.wall_median * scale:.1f} s")
    print(f"ratio naive / current (scaled, CPU): {nai.cpu_median * scale / cur.cpu_median:.1f}x; "
          f"wall {nai.wall_median * scale / cur.wall_median:.1f}x")
    print(f"ratio former / current (CPU): {old.cpu_median / cur.cpu_median:.2f}x; "
          f"wall {old.wall_median / cur.wall_median:.2f}x")
    t0 = time.perf_counter()
    mem_cur = peak_bytes(lambda: elo_orders(a, b, won, P, n_orders=n_orders, seed=seed))
    mem_old = peak_bytes(lambda: former(a, b, won, P, n_orders, seed))
    print(f"peak traced memory: current {mem_cur / 2**20:.0f} MiB, former {mem_old / 2**20:.0f} MiB "
          f"({time.perf_counter() - t0:.1f} s to measure)")
    print("results: current == former bit for bit; current == naive to 1e-9 on the naive orders")


if __name__ == "__main__":
    main()

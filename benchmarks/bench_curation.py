"""Benchmark of three curation capabilities (docs/METHODS.md §13.3-§13.5), each beside a naive baseline.

1. Visual statistics (§13.3): concavity ``1 - area / convex hull area`` and area ratio of ``--masks`` person-like
   masks (unions of random ellipses, ``--size`` x ``--size``) with :mod:`fairvision.metrics.shape` (row extremes,
   vectorised hull pruning, shoelace) against a per-mask :class:`scipy.spatial.ConvexHull` of the four corners of
   every foreground pixel plus a Python loop; the two must give the same values.
2. Annotation agreement (§13.4): Krippendorff's alpha, nominal and interval, of a ``--units`` x ``--coders`` table
   with ``--missing`` of the values missing, with :func:`fairvision.stats.agreement.krippendorff_alpha` (one
   matrix product) against the textbook definition, a double loop over the units and the ordered pairs of values
   within each unit; equal alphas. Also the unit bootstrap (``--n-boot`` replicates, vectorised) against the
   textbook loop per replicate, timed on ``--naive-reps`` replicates and extrapolated (stated as such).
3. Consent-withdrawal replacement (§13.5):
   :func:`fairvision.audits.curation.withdraw.replacement.match_replacements` (the optimal assignment under the
   lexicographic cost: primary mismatches, then secondary, then feature distance)
   against the greedy baseline (each withdrawn image in turn takes the cheapest candidate still free, same cost)
   on a scarce pool (``--withdrawn`` images, ``--candidates`` candidates whose attribute mix differs from the
   withdrawn ones). The point is the quality (total primary mismatches), not the time; both are printed.

Not a test. Run: ``.venv/bin/python benchmarks/bench_curation.py [--masks 2000] [--units 20000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy.spatial import ConvexHull

from fairvision.audits.curation.withdraw.replacement import match_replacements
from fairvision.metrics.shape import mask_area_ratio, mask_concavity
from fairvision.stats.agreement import krippendorff_alpha


# ------------------------------------------------------------------------------------------------ 1. masks

def make_masks(n: int, size: int, rng) -> list[np.ndarray]:
    """Person-like blobs: a union of 1-4 random ellipses (body, head, limbs) per mask."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    masks = []
    for _ in range(n):
        m = np.zeros((size, size), bool)
        for _ in range(rng.integers(1, 5)):
            cy, cx = rng.uniform(0.2, 0.8, 2) * size
            ry, rx = rng.uniform(0.04, 0.3, 2) * size
            th = rng.uniform(0, np.pi)
            c, s = np.cos(th), np.sin(th)
            u, v = (xx - cx) * c + (yy - cy) * s, -(xx - cx) * s + (yy - cy) * c
            m |= (u / rx) ** 2 + (v / ry) ** 2 <= 1
        masks.append(m)
    return masks


def naive_concavity(mask: np.ndarray) -> tuple[float, float]:
    """Concavity and area ratio from scipy's ConvexHull of the corners of every foreground pixel."""
    ys, xs = np.nonzero(mask)
    area = 0
    for _ in ys:  # the loop a first attempt writes for the area
        area += 1
    corners = np.concatenate([np.stack([xs + dx, ys + dy], 1) for dx in (0, 1) for dy in (0, 1)]).astype(float)
    hull = ConvexHull(corners).volume  # in 2-D, .volume is the area
    return 1.0 - area / hull, area / mask.size


# ------------------------------------------------------------------------------------------------ 2. alpha

def naive_alpha(table: np.ndarray, metric: str) -> float:
    """Krippendorff (2011) by the definition: observed disagreement over the pairable values of each unit
    (double loop over ordered pairs), expected disagreement over the pairs of distinct values of the totals."""
    def delta(a, b):
        return float(a != b) if metric == "nominal" else (a - b) ** 2
    n_c: dict = {}
    do = 0.0
    for row in table:  # per unit
        vals = [v for v in row if v is not None and v == v]  # drop None / NaN
        m = len(vals)
        if m < 2:
            continue
        for v in vals:
            n_c[v] = n_c.get(v, 0) + 1
        s = 0.0
        for i in range(m):  # ordered pairs of values in the unit
            for j in range(m):
                if i != j:
                    s += delta(vals[i], vals[j])
        do += s / (m - 1)
    n = sum(n_c.values())
    de = 0.0
    for c, nc in n_c.items():  # pairs of distinct values
        for k, nk in n_c.items():
            de += nc * nk * delta(c, k)
    return 1.0 - (n - 1) * do / de


def make_ratings(units: int, coders: int, missing: float, rng) -> np.ndarray:
    """Coders who mostly agree: a true value 1..7 per unit, each coder off by one with probability 0.3."""
    truth = rng.integers(1, 8, units)
    noise = rng.choice([-1, 0, 1], size=(units, coders), p=[0.15, 0.7, 0.15])
    t = np.clip(truth[:, None] + noise, 1, 7).astype(float)
    t[rng.random(t.shape) < missing] = np.nan
    return t


# ------------------------------------------------------------------------------------------------ 3. withdrawal

MATCH = ["gender", "age_group", "ancestry"]
SECONDARY = ["lighting", "camera"]
FEATURES = ["ita"]


def make_pool(n: int, rng, skew: bool) -> pd.DataFrame:
    """Random attributes; the pool (``skew``) over-represents some cells so that perfect matches run out."""
    p_anc = [0.45, 0.25, 0.1, 0.1, 0.05, 0.05] if skew else [1 / 6] * 6
    p_age = [0.35, 0.35, 0.15, 0.1, 0.05] if skew else [0.2] * 5
    return pd.DataFrame({
        "gender": rng.choice(["female", "male", "nonbinary"], n, p=[0.5, 0.45, 0.05]),
        "age_group": rng.choice(["18-29", "30-39", "40-49", "50-59", "60+"], n, p=p_age),
        "ancestry": rng.choice(["africa", "asia", "europe", "americas", "oceania", "mena"], n, p=p_anc),
        "lighting": rng.choice(["indoor", "outdoor", "mixed"], n),
        "camera": rng.choice(["phone", "dslr"], n),
        "ita": rng.uniform(-60, 70, n)})


def cost_parts(w: pd.DataFrame, c: pd.DataFrame):
    """The documented cost (§13.5): primary and secondary mismatch counts, RMS range-scaled feature distance."""
    p = sum((w[a].to_numpy()[:, None] != c[a].to_numpy()[None, :]).astype(np.int64) for a in MATCH)
    s = sum((w[a].to_numpy()[:, None] != c[a].to_numpy()[None, :]).astype(np.int64) for a in SECONDARY)
    x, y = w["ita"].to_numpy(), c["ita"].to_numpy()
    span = max(x.max(), y.max()) - min(x.min(), y.min())
    d = np.sqrt(np.minimum(np.abs(x[:, None] - y[None, :]) / span, 1.0) ** 2)
    return p, s, d


def greedy(p, s, d) -> np.ndarray:
    """Each withdrawn image in turn takes the free candidate with the smallest (primary, secondary, distance)."""
    n, m = p.shape
    free = np.ones(m, bool)
    big = float(m + 1)
    out = np.full(n, -1)
    for i in range(n):
        key = p[i] * big * big + s[i] * big + d[i]  # lexicographic (d <= 1 < big, s <= 2 < big)
        key = np.where(free, key, np.inf)
        j = int(np.argmin(key))
        if not np.isfinite(key[j]):
            break
        out[i] = j
        free[j] = False
    return out


# ------------------------------------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--masks", type=int, default=2000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--units", type=int, default=20_000)
    ap.add_argument("--coders", type=int, default=5)
    ap.add_argument("--missing", type=float, default=0.2)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--naive-reps", type=int, default=3)
    ap.add_argument("--withdrawn", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=1500)
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    # 1. masks
    masks = make_masks(args.masks, args.size, rng)
    mask_concavity(masks[0])  # warm-up
    t = time.perf_counter()
    fast = np.array([(mask_concavity(m), mask_area_ratio(m)) for m in masks])
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    naive = np.array([naive_concavity(m) for m in masks])
    t_naive = time.perf_counter() - t
    diff = np.abs(fast - naive).max()
    print(f"mask concavity + area ratio, {args.masks:,} masks {args.size}x{args.size} "
          f"(mean concavity {fast[:, 0].mean():.3f}, mean area {fast[:, 1].mean():.3f}):")
    print(f"  fairvision.metrics.shape: {t_fast:.2f} s; scipy ConvexHull of pixel corners + loop: {t_naive:.2f} s; "
          f"ratio {t_naive / t_fast:.1f}x; max |difference| {diff:.1e} ({'equal' if diff < 1e-9 else 'DIFFER'})")

    # 2. Krippendorff's alpha
    table = make_ratings(args.units, args.coders, args.missing, rng)
    labels = pd.DataFrame(table).apply(lambda c: c.map(lambda v: None if v != v else f"c{int(v)}"))  # as labels
    print(f"Krippendorff's alpha, {args.units:,} units x {args.coders} coders, {args.missing:.0%} missing:")
    for metric, data in (("nominal", labels), ("interval", table)):
        t = time.perf_counter()
        a_fast = krippendorff_alpha(data, metric).estimate
        tf = time.perf_counter() - t
        arr = data.to_numpy(object) if isinstance(data, pd.DataFrame) else data
        t = time.perf_counter()
        a_naive = naive_alpha(arr, metric)
        tn = time.perf_counter() - t
        print(f"  {metric:8s}: fairvision {tf:.3f} s, alpha {a_fast:.6f}; textbook pairwise loop {tn:.2f} s, "
              f"alpha {a_naive:.6f}; ratio {tn / tf:.0f}x; |difference| {abs(a_fast - a_naive):.1e} "
              f"({'equal' if abs(a_fast - a_naive) < 1e-9 else 'DIFFER'})")
    t = time.perf_counter()
    res = krippendorff_alpha(table, "interval", n_boot=args.n_boot)
    tb = time.perf_counter() - t
    brng = np.random.default_rng(1)
    t = time.perf_counter()
    for _ in range(args.naive_reps):  # the textbook loop on each resample of units
        naive_alpha(table[brng.integers(0, len(table), len(table))], "interval")
    tbn = (time.perf_counter() - t) / args.naive_reps * args.n_boot
    print(f"  interval, {args.n_boot:,} unit-bootstrap replicates: fairvision {tb:.2f} s "
          f"(CI {res.ci_low:.4f}-{res.ci_high:.4f}); textbook loop per replicate ~{tbn:,.0f} s extrapolated from "
          f"{args.naive_reps} replicates; ratio ~{tbn / tb:,.0f}x")

    # 3. withdrawal replacement
    w = make_pool(args.withdrawn, rng, skew=False)
    c = make_pool(args.candidates, rng, skew=True)
    t = time.perf_counter()
    opt = match_replacements(w, c, MATCH, SECONDARY, FEATURES)
    t_opt = time.perf_counter() - t
    t = time.perf_counter()
    p, s, d = cost_parts(w, c)
    g = greedy(p, s, d)
    t_greedy = time.perf_counter() - t
    j = opt["candidate"].to_numpy()
    assert (j >= 0).all() and len(set(j)) == len(j) and (g >= 0).all() and len(set(g)) == len(g)
    rows = np.arange(len(w))
    po, so, do = p[rows, j].sum(), s[rows, j].sum(), d[rows, j].sum()
    pg, sg, dg = p[rows, g].sum(), s[rows, g].sum(), d[rows, g].sum()
    assert po == opt["primary_mismatches"].sum() and so == opt["secondary_mismatches"].sum()
    print(f"withdrawal replacement, {args.withdrawn:,} withdrawn, {args.candidates:,} candidates (skewed pool), "
          f"match {'+'.join(MATCH)}, secondary {'+'.join(SECONDARY)}, feature ita:")
    print(f"  optimal assignment (match_replacements): {t_opt:.2f} s; primary mismatches {po:,}, secondary {so:,}, "
          f"feature distance {do:.1f}; perfect primary matches {(p[rows, j] == 0).sum():,}")
    print(f"  greedy nearest free candidate:           {t_greedy:.2f} s; primary mismatches {pg:,}, "
          f"secondary {sg:,}, feature distance {dg:.1f}; perfect primary matches {(p[rows, g] == 0).sum():,}")
    print(f"  greedy / optimal primary mismatches: {pg / max(po, 1):.2f}x ({pg - po:+,}); "
          f"time ratio greedy / optimal {t_greedy / t_opt:.2f}x")


if __name__ == "__main__":
    main()

"""Monte Carlo power of the distribution parity tests (docs/METHODS.md §8.3, Algorithm 1).

Khaziev et al. (sections 3.2 and 4.1) simulate biased recommendations with a known risk ratio and count how often
the omnibus and contrast tests reject H0.

How this module reads Algorithm 1
---------------------------------
- ``n`` is the **catalog size**, and every catalog item is also a query (the
  paper's empirical study queries every catalog image, and its Figure 3 plots
  power against "catalog size" while Algorithm 1 draws "n query items"). So a
  trial draws n query values from P_Z, and the ``catalog`` row of the
  contingency table is the count of those same n values.
- The risk ratio is applied to the **query's own value** z^q, for every query
  value at once: P*(z^q) = min(1, RR P_Z(z^q)), and every other value z is
  scaled by (1 - P*(z^q)) / (1 - P_Z(z^q)) so that P* sums to 1 (the paper's
  pseudo-code divides by 1 - P_Z(z), a typo: it would not sum to 1;
  docs/METHODS.md §8.3 gives the corrected factor). RR is therefore bounded above by 1 / P_Z(z^q)
  for the contrast of z^q.
- Each query gets K results drawn independently from P*. The sum of the
  results of the n_z queries with value z is then Multinomial(K n_z, P*),
  which is what is drawn (exactly the same distribution, far fewer draws).
- The tests are the Pearson chi-square tests of :mod:`fairvision.stats.parity`
  (computed with :func:`fairvision.stats.chisquare.batch_chi2`)
  (omnibus: (V+1) x V table; contrast of z: 2 x 2 table [[a, K n_z - a],
  [n_z, n - n_z]]), rejecting when p < alpha. All-zero rows and columns are
  dropped, as in the test itself. The exact small-sample fallback of the test
  is not simulated (the paper's power is that of the chi-square test).

Everything is vectorised over trials: one multinomial call draws the query
counts of all trials, one broadcast call all the result counts, and the
statistics of all trials come from array operations; the chi-square critical
value is looked up once per distinct degrees of freedom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.errors import FairvisionError, ParameterError
from fairvision.stats.chisquare import batch_chi2
from fairvision.stats.parity import DEFAULT_ALPHA, FAIR_NRR

PAPER_P_Z = {"ST1": 0.05, "ST2": 0.15, "ST3": 0.15, "ST4": 0.25, "ST5": 0.30, "ST6": 0.10}
"""The paper's Table 4 skin-tone distribution used in its power analysis."""

PAPER_CATALOG_SIZES = (100, 250, 1000)


def default_rr_grid(num: int = 25, low: float = 0.5, high: float = 2.0) -> np.ndarray:
    """Risk ratios evenly spaced on a log scale (1 in the middle when symmetric).

    Parameters
    ----------
    num : int
        Number of risk ratios.
    low, high : float
        Smallest and largest risk ratio.

    Returns
    -------
    numpy.ndarray, shape (num,)
    """
    return np.geomspace(low, high, num)


def _parse_pz(p_z) -> tuple[list, np.ndarray]:
    if isinstance(p_z, pd.Series):
        labels, p = list(p_z.index), p_z.to_numpy(dtype=float)
    elif isinstance(p_z, Mapping):
        labels, p = list(p_z.keys()), np.asarray(list(p_z.values()), dtype=float)
    else:
        p = np.asarray(p_z, dtype=float).ravel()
        labels = list(range(p.size))
    if p.size < 2:
        raise ParameterError("p_z", "needs at least two values")
    if not np.all(np.isfinite(p)) or (p < 0).any():
        raise ParameterError("p_z", "must be non-negative finite probabilities")
    s = p.sum()
    if s <= 0:
        raise ParameterError("p_z", "sums to 0")
    if abs(s - 1) > 1e-6:
        raise ParameterError("p_z", f"must sum to 1 (it sums to {s:.6g}); pass shares, not counts")
    if (p >= 1).any():
        raise ParameterError("p_z", "puts all mass on one value; there is nothing to test")
    return labels, p / s


def biased_distributions(p_z, rr: float) -> np.ndarray:
    """P* of Algorithm 1 for every query value: row z^q is the result distribution of a query with z^q.

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog (sums to 1).
    rr : float
        The risk ratio applied to every query's own value (>= 0).

    Returns
    -------
    numpy.ndarray, shape (V, V)
        ``P*[q, q] = min(1, rr p[q])``; ``P*[q, z] = p[z] (1 - P*[q, q]) / (1 - p[q])``.
    """
    _, p = _parse_pz(p_z)
    if not rr >= 0:
        raise FairvisionError(f"risk ratio must be >= 0, got {rr}")
    diag = np.minimum(1.0, rr * p)
    scale = (1.0 - diag) / (1.0 - p)
    ps = scale[:, None] * p[None, :]
    np.fill_diagonal(ps, diag)
    ps = np.clip(ps, 0.0, 1.0)
    return ps / ps.sum(axis=1, keepdims=True)


def simulate_counts(p_z, rr: float, n: int, k: int, trials: int, seed: int | np.random.Generator | None = 0):
    """Draw the contingency counts of ``trials`` simulated catalogs (Algorithm 1).

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog (sums to 1).
    rr : float
        The risk ratio applied to every query's own value.
    n : int
        Catalog size = number of queries.
    k : int
        Results per query.
    trials : int
        Number of simulated catalogs.
    seed : int, numpy.random.Generator or None
        Randomness (a Generator is used as is, so successive calls continue
        its stream).

    Returns
    -------
    queries : numpy.ndarray, shape (trials, V)
        Query (= catalog) counts per value.
    results : numpy.ndarray, shape (trials, V, V)
        ``results[t, q, z]``: results with value z of the queries with value q.
    """
    _, p = _parse_pz(p_z)
    if int(n) < 1 or int(k) < 1 or int(trials) < 1:
        raise FairvisionError("n, k and trials must be positive integers")
    ps = biased_distributions(p, rr)
    rng = np.random.default_rng(seed)
    queries = rng.multinomial(int(n), p, size=int(trials))
    results = rng.multinomial(queries * int(k), ps)
    return queries, results


_CRIT_CACHE: dict[tuple[float, int], float] = {}


def _critical(alpha: float, df: np.ndarray) -> np.ndarray:
    out = np.full(df.shape, np.inf)
    for d in np.unique(df):
        if d > 0:
            key = (float(alpha), int(d))
            if key not in _CRIT_CACHE:
                _CRIT_CACHE[key] = float(_st.chi2.isf(alpha, d))
            out[df == d] = _CRIT_CACHE[key]
    return out


def omnibus_reject(queries: np.ndarray, results: np.ndarray, alpha: float) -> np.ndarray:
    """Omnibus decisions (p < alpha) for every simulated trial.

    Parameters
    ----------
    queries : numpy.ndarray, shape (trials, V)
        Query (= catalog) counts per value (:func:`simulate_counts`).
    results : numpy.ndarray, shape (trials, V, V)
        Result counts per query value and result value.
    alpha : float
        Significance level.

    Returns
    -------
    numpy.ndarray of bool, shape (trials,)
    """
    tables = np.concatenate([results, queries[:, None, :]], axis=1)
    stat = batch_chi2(tables)
    rows = (tables.sum(axis=2) > 0).sum(axis=1)
    cols = (tables.sum(axis=1) > 0).sum(axis=1)
    df = (rows - 1) * (cols - 1)
    return stat > _critical(alpha, df)


def contrast_reject(queries: np.ndarray, results: np.ndarray, k: int, alpha: float, continuity: bool = False) -> np.ndarray:
    """Contrast decisions for every simulated trial and value.

    Parameters
    ----------
    queries : numpy.ndarray, shape (trials, V)
        Query (= catalog) counts per value (:func:`simulate_counts`).
    results : numpy.ndarray, shape (trials, V, V)
        Result counts per query value and result value.
    k : int
        Results per query.
    alpha : float
        Significance level.
    continuity : bool
        Yates' continuity correction of the 2 x 2 statistic.

    Returns
    -------
    numpy.ndarray of bool, shape (trials, V)
        False where a value has no query.
    """
    n = queries.sum(axis=1, keepdims=True)
    a = np.diagonal(results, axis1=1, axis2=2)
    n1 = queries * int(k)
    tables = np.stack([np.stack([a, n1 - a], axis=-1), np.stack([queries, n - queries], axis=-1)], axis=-2)
    stat = batch_chi2(tables, continuity=continuity)
    full = (tables.sum(axis=-1) > 0).all(axis=-1) & (tables.sum(axis=-2) > 0).all(axis=-1)
    return (stat > _critical(alpha, np.ones(1, dtype=int))[0]) & full


def _resolve_value(labels: list, value) -> int:
    if value in labels:
        return labels.index(value)
    if isinstance(value, (int, np.integer)) and 0 <= int(value) < len(labels):
        return int(value)
    raise FairvisionError(f"unknown value {value!r}; p_z has {labels}")


def power(
    p_z,
    rr: float,
    n: int,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    trials: int = 1000,
    test: str = "omnibus",
    seed: int | None = 0,
    *,
    value=None,
    continuity: bool = False,
) -> float:
    """Monte Carlo power of a distribution parity test (Algorithm 1).

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog (sums to 1).
    rr : float
        The risk ratio applied to every query's own value (1 = no bias).
    n : int
        Catalog size = number of queries (see the module notes).
    k : int
        Results per query.
    alpha : float
        Significance level; a trial rejects when p < alpha.
    trials : int
        Monte Carlo trials M.
    test : {"omnibus", "contrast"}
        ``"contrast"`` needs ``value`` (a label of ``p_z`` or its position).
    seed : int, numpy.random.Generator or None
        Seed of :func:`numpy.random.default_rng`.
    continuity : bool
        Yates' continuity correction of the contrast statistic.

    Returns
    -------
    float
        Share of the trials that reject H0. At rr = 1 this estimates the
        type I error rate, alpha up to Monte Carlo error.
    """
    labels, p = _parse_pz(p_z)
    if test not in ("omnibus", "contrast"):
        raise ParameterError("test", f"must be 'omnibus' or 'contrast', not {test!r}")
    if not 0 < alpha < 1:
        raise ParameterError("alpha", f"must be in (0, 1), got {alpha}")
    rng = np.random.default_rng(seed)
    q, r = simulate_counts(p, rr, n, k, trials, rng)
    if test == "omnibus":
        return float(omnibus_reject(q, r, alpha).mean())
    if value is None:
        raise FairvisionError("test='contrast' needs value= (which query value to test)")
    j = _resolve_value(labels, value)
    return float(contrast_reject(q, r, k, alpha, continuity)[:, j].mean())


def power_all(p_z, rr: float, n: int, k: int = 6, alpha: float = DEFAULT_ALPHA, trials: int = 1000, seed: int | None = 0,
              continuity: bool = False) -> pd.Series:
    """Power of the omnibus test and of every contrast from one simulation.

    Parameters
    ----------
    p_z, rr, n, k, alpha, trials, seed, continuity
        As for :func:`power`.

    Returns
    -------
    pandas.Series
        Indexed by ``omnibus`` and then the values (the contrast test of each
        query value).
    """
    labels, p = _parse_pz(p_z)
    rng = np.random.default_rng(seed)
    q, r = simulate_counts(p, rr, n, k, trials, rng)
    vals = [omnibus_reject(q, r, alpha).mean(), *contrast_reject(q, r, k, alpha, continuity).mean(axis=0)]
    return pd.Series(vals, index=["omnibus", *labels], dtype=float)


def power_grid(
    p_z,
    rrs: Sequence[float] | None = None,
    ns: Sequence[int] = PAPER_CATALOG_SIZES,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    trials: int = 1000,
    seed: int | None = 0,
    continuity: bool = False,
) -> pd.DataFrame:
    """Power over a grid of risk ratios x catalog sizes (the paper's Figure 3a).

    Every cell uses ``default_rng(seed)``, so a cell equals
    ``power(p_z, rr, n, ..., seed=seed)`` and the curves share their random
    numbers (smooth curves).

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog.
    rrs : sequence of float, optional
        Risk ratios (default :func:`default_rr_grid`).
    ns : sequence of int
        Catalog sizes (default: the paper's 100, 250, 1000).
    k, alpha, trials, seed, continuity
        As for :func:`power`.

    Returns
    -------
    pandas.DataFrame
        MultiIndex ``(n, rr)``; columns ``omnibus`` and one per value (the
        contrast test of that query value); also ``nrr``.
    """
    labels, p = _parse_pz(p_z)
    rrs = default_rr_grid() if rrs is None else np.asarray(rrs, dtype=float)
    rows, index = [], []
    for n in ns:
        for rr in rrs:
            rows.append(power_all(p, float(rr), int(n), k, alpha, trials, seed, continuity).to_numpy())
            index.append((int(n), float(rr)))
    df = pd.DataFrame(rows, columns=["omnibus", *labels], index=pd.MultiIndex.from_tuples(index, names=["n", "rr"]))
    rr_arr = df.index.get_level_values("rr").to_numpy()
    df.insert(0, "nrr", np.where(rr_arr <= 1, rr_arr, 1 / rr_arr))
    return df


def _power_fn(p, n, k, alpha, trials, seed, continuity, j):
    def f(rr: float) -> float:
        rng = np.random.default_rng(seed)
        q, r = simulate_counts(p, rr, n, k, trials, rng)
        if j is None:
            return float(omnibus_reject(q, r, alpha).mean())
        return float(contrast_reject(q, r, k, alpha, continuity)[:, j].mean())

    return f


def _nrr_bounds(p: np.ndarray, j: int | None) -> float:
    """Smallest nRR reachable above 1: RR can grow to 1 / P_Z(z^q) before P*(z^q) is capped at 1."""
    return float(p[j]) if j is not None else float(p.min())


def detectable_nrr(
    p_z,
    n: int,
    *,
    side: str = "below",
    test: str = "omnibus",
    value=None,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    target: float = 0.8,
    trials: int = 1000,
    seed: int | None = 0,
    continuity: bool = False,
    iterations: int = 12,
) -> float:
    """The smallest bias detectable with power >= ``target``, as a normalised risk ratio.

    Bisection on nRR in (nRR_min, 1) for RR < 1 (``side="below"``, RR = nRR)
    or RR > 1 (``side="above"``, RR = 1/nRR, up to 1 / P_Z(z^q)): returns
    the largest nRR (the bias closest to parity) whose power reaches the
    target; NaN when even the largest bias is not detected. This is the
    quantity of the paper's Figure 3b/3c.

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog.
    n : int
        Catalog size.
    side : {"below", "above"}
        Bias with RR < 1 or RR > 1.
    test : {"omnibus", "contrast"}
        ``"contrast"`` needs ``value``.
    value : label or int, optional
        The query value of the contrast test.
    k, alpha, trials, seed, continuity
        As for :func:`power`.
    target : float
        Power at which a bias counts as detectable (paper: 0.8).
    iterations : int
        Bisection steps.

    Returns
    -------
    float
        The detectable nRR, or NaN.
    """
    labels, p = _parse_pz(p_z)
    if side not in ("below", "above"):
        raise ParameterError("side", f"must be 'below' or 'above', not {side!r}")
    j = None if test == "omnibus" else _resolve_value(labels, value)
    f = _power_fn(p, int(n), k, alpha, trials, seed, continuity, j)
    to_rr = (lambda x: x) if side == "below" else (lambda x: 1.0 / x)
    lo = 0.0 if side == "below" else _nrr_bounds(p, j) * (1 + 1e-9)
    if f(to_rr(lo) if side == "above" else 0.0) < target:
        return float("nan")
    hi = 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if f(to_rr(mid)) >= target:
            lo = mid
        else:
            hi = mid
    return float(lo)


def detectable_curve(
    p_z,
    ns: Sequence[int] = (50, 100, 250, 500, 1000, 2500),
    *,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    target: float = 0.8,
    trials: int = 1000,
    seed: int | None = 0,
    continuity: bool = False,
    tests: Sequence | None = None,
    iterations: int = 10,
) -> pd.DataFrame:
    """Detectable nRR at ``target`` power against catalog size (the paper's Figure 3b and 3c).

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog.
    ns : sequence of int
        Catalog sizes.
    k, alpha, trials, seed, continuity
        As for :func:`power`.
    target, iterations
        As for :func:`detectable_nrr`.
    tests : sequence, optional
        ``"omnibus"`` and/or values (default: the omnibus test and every value).

    Returns
    -------
    pandas.DataFrame
        MultiIndex ``(side, n)`` with side ``below`` (RR < 1) and ``above``
        (RR > 1); one column per test (``omnibus`` and the values).
    """
    labels, p = _parse_pz(p_z)
    tests = ["omnibus", *labels] if tests is None else list(tests)
    out = {}
    for side in ("below", "above"):
        for n in ns:
            out[(side, int(n))] = {
                t: detectable_nrr(p, n, side=side, test="omnibus" if t == "omnibus" else "contrast",
                                  value=None if t == "omnibus" else labels.index(t) if t in labels else t, k=k,
                                  alpha=alpha, target=target, trials=trials, seed=seed, continuity=continuity,
                                  iterations=iterations)
                for t in tests
            }
    df = pd.DataFrame.from_dict(out, orient="index")
    df.index = pd.MultiIndex.from_tuples(df.index, names=["side", "n"])
    return df


def needed_n(f_of_n, n_now: int, target: float, n_max: int) -> float:
    """Smallest catalog size with power >= target (bisection on a power-of-two bracket); inf if > n_max."""
    if f_of_n(n_now) >= target:
        hi = n_now
        lo = 1
    else:
        lo, hi = n_now, n_now * 2
        while f_of_n(hi) < target:
            lo, hi = hi, hi * 2
            if hi > n_max:
                return float("inf")
    while hi - lo > max(1, lo // 50):
        mid = (lo + hi) // 2
        if f_of_n(mid) >= target:
            hi = mid
        else:
            lo = mid
    return float(hi)


@dataclass
class CatalogAdequacy:
    """Answer to "is my catalog large enough to detect an 80%-rule violation?".

    ``table`` is indexed by test (``omnibus``, then each value) with
    ``share``, ``power_rr_0.8``, ``power_rr_1.25``, ``large_enough`` (both
    powers reach the target), ``n_needed`` (smallest catalog with both powers
    at the target, under the same distribution) and ``answer`` (one sentence).
    """

    n: int
    k: int
    alpha: float
    target: float
    table: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The table (one row per test)."""
        return self.table

    @property
    def answers(self) -> list[str]:
        """One sentence per test."""
        return list(self.table["answer"])


def catalog_adequacy(
    p_z,
    n: int,
    *,
    k: int = 6,
    alpha: float = DEFAULT_ALPHA,
    target: float = 0.8,
    trials: int = 1000,
    seed: int | None = 0,
    continuity: bool = False,
    n_max: int = 1_000_000,
) -> CatalogAdequacy:
    """Power of each test to detect a bias at the 80%-rule boundary (RR = 0.8 and RR = 1.25) with this catalog.

    The 80% rule (paper section 3.1.2) calls a value unfair when nRR < 0.8,
    i.e. RR < 0.8 or RR > 1.25. A catalog is "large enough" for a test when
    the test rejects H0 with probability >= ``target`` at both boundaries.
    RR = 1.25 is beyond reach for a value with P_Z > 0.8 (RR <= 1/P_Z).

    Parameters
    ----------
    p_z : mapping, Series or array_like
        The distribution of the protected attribute in the catalog.
    n : int
        The audited catalog size.
    k, alpha, trials, seed, continuity
        As for :func:`power`.
    target : float
        Power a test must reach at both boundaries.
    n_max : int
        Largest catalog size searched for ``n_needed``.

    Returns
    -------
    CatalogAdequacy
    """
    labels, p = _parse_pz(p_z)
    n = int(n)
    low = power_all(p, FAIR_NRR, n, k, alpha, trials, seed, continuity)
    high = power_all(p, 1 / FAIR_NRR, n, k, alpha, trials, seed, continuity)
    rows = []
    for i, t in enumerate(["omnibus", *labels]):
        j = None if t == "omnibus" else i - 1
        share = float("nan") if j is None else float(p[j])

        def f_both(m, j=j):
            a = _power_fn(p, m, k, alpha, trials, seed, continuity, j)
            return min(a(FAIR_NRR), a(1 / FAIR_NRR))

        pl, ph = float(low.iloc[i]), float(high.iloc[i])
        ok = pl >= target and ph >= target
        need = float(n) if ok else needed_n(f_both, n, target, n_max)
        name = "the omnibus test" if j is None else f"the contrast test for {t}"
        verdict = "yes" if ok else "no"
        need_txt = "" if ok else (f"; about {int(need):,} items would be needed" if np.isfinite(need)
                                  else f"; more than {n_max:,} items would be needed")
        rows.append({
            "share": share, "power_rr_0.8": pl, "power_rr_1.25": ph, "large_enough": ok, "n_needed": need,
            "answer": (f"{verdict.capitalize()}: with {n:,} items, {name} detects RR = 0.8 with {pl:.0%} and "
                       f"RR = 1.25 with {ph:.0%} power at alpha = {alpha:g} (target {target:.0%}){need_txt}."),
        })
    table = pd.DataFrame(rows, index=pd.Index(["omnibus", *labels], name="test"))
    return CatalogAdequacy(n=n, k=int(k), alpha=float(alpha), target=float(target), table=table)

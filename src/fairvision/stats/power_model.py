"""Planning a model audit and a retrieval catalog before results exist (docs/METHODS.md §6.7, §8.3).

Model audit: the smallest difference between two groups that a two-sided test at ``alpha`` detects with the
chosen power, for a mean (two-sample z approximation) and for a rate (two proportions, pooled variance under
H0), when each group has ``n`` subjects with ``m`` images each. Images of one subject are correlated, so the
effective sample size is ``n m / (1 + (m - 1) ICC)`` (the design effect). All functions broadcast over arrays
of group sizes, so a whole grid is one call.

Multiple comparisons: a model audit compares every pair of groups, so the level of one comparison is
``alpha / n_tests`` (Bonferroni) for every correction except ``"none"``. Holm's first step is exactly
Bonferroni's and Benjamini-Hochberg's smallest threshold is too, so the Bonferroni level is the planning bound:
a difference planned with it is detected by every correction (docs/METHODS.md §6.7).

Retrieval catalog: :func:`catalog_plan` gives the power of the omnibus and contrast tests at a target nRR for
several catalog sizes and the catalog size each test needs, from the simulation of
:mod:`fairvision.stats.power` (Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats as _st

from fairvision.errors import ParameterError
from fairvision.stats.constants import DEFAULT_CORRECTION, METHODS as CORRECTIONS
from fairvision.stats.power import needed_n, power_all

DEFAULT_ICC = 0.5
"""Intraclass correlation of one subject's images (docs/METHODS.md §6.7): a cautious middle value; face images of
one person share far more than chance, and 0.5 halves the worth of every extra image."""

DEFAULT_POWER = 0.8


def _check_unit(name: str, value, *, closed_low: bool = False) -> None:
    v = np.asarray(value, dtype=float)
    ok = (v >= 0) if closed_low else (v > 0)
    if not (np.all(np.isfinite(v)) and np.all(ok) and np.all(v < 1)):
        raise ParameterError(name, f"must be in {'[0' if closed_low else '(0'}, 1), got {value}")


def planning_alpha(alpha: float, n_tests: int = 1, correction: str = DEFAULT_CORRECTION) -> float:
    """Level of one comparison when ``n_tests`` comparisons are corrected (docs/METHODS.md §6.7).

    Parameters
    ----------
    alpha : float
        Family-wise significance level.
    n_tests : int
        Number of comparisons corrected together (group pairs).
    correction : {"holm", "bonferroni", "bh", "none"}
        The audit's correction; every one but ``"none"`` is planned with Bonferroni's ``alpha / n_tests``, the
        level its strictest step uses.

    Returns
    -------
    float
    """
    _check_unit("alpha", alpha)
    if correction not in CORRECTIONS:
        raise ParameterError("correction", f"must be one of {', '.join(CORRECTIONS)}, not {correction!r}")
    if int(n_tests) < 1:
        raise ParameterError("n_tests", f"must be at least 1, got {n_tests}")
    return float(alpha) if correction == "none" else float(alpha) / int(n_tests)


def effective_n(subjects, images_per_subject=1.0, icc: float = DEFAULT_ICC) -> np.ndarray:
    """Effective sample size ``n m / (1 + (m - 1) ICC)`` (docs/METHODS.md §6.7).

    Parameters
    ----------
    subjects : array_like
        Subjects per group (> 0).
    images_per_subject : array_like
        Images per subject m (>= 1; a mean is fine).
    icc : float
        Intraclass correlation of one subject's images, in [0, 1].

    Returns
    -------
    numpy.ndarray
    """
    n = np.asarray(subjects, dtype=float)
    m = np.asarray(images_per_subject, dtype=float)
    if not (np.all(np.isfinite(n)) and np.all(n > 0)):
        raise ParameterError("subjects", f"must be positive, got {subjects}")
    if not (np.all(np.isfinite(m)) and np.all(m >= 1)):
        raise ParameterError("images_per_subject", f"must be at least 1, got {images_per_subject}")
    if not (np.isfinite(icc) and 0 <= icc <= 1):
        raise ParameterError("icc", f"must be in [0, 1], got {icc}")
    return n * m / (1.0 + (m - 1.0) * float(icc))


def _z(alpha: float, power: float) -> tuple[float, float]:
    _check_unit("power", power)
    return float(_st.norm.isf(alpha / 2)), float(_st.norm.ppf(power))


def detectable_mean_difference(n1, n2, *, images_per_subject=1.0, icc: float = DEFAULT_ICC, sd: float = 1.0,
                               alpha: float = 0.05, power: float = DEFAULT_POWER, n_tests: int = 1,
                               correction: str = DEFAULT_CORRECTION) -> np.ndarray:
    """Smallest difference of two group means detected with ``power`` (docs/METHODS.md §6.7).

    ``delta = (z_{1 - a/2} + z_{power}) sd sqrt(1 / n1' + 1 / n2')`` with ``a`` from :func:`planning_alpha` and
    ``n'`` the effective sizes of :func:`effective_n`.

    Parameters
    ----------
    n1, n2 : array_like
        Subjects in the two groups (broadcast together).
    images_per_subject, icc
        As for :func:`effective_n`.
    sd : float
        Standard deviation of one image's value (1: the difference in SD units, Cohen's d).
    alpha, n_tests, correction
        As for :func:`planning_alpha`.
    power : float
        Chance of detecting the difference.

    Returns
    -------
    numpy.ndarray
    """
    if not (np.isfinite(sd) and sd > 0):
        raise ParameterError("sd", f"must be positive, got {sd}")
    za, zb = _z(planning_alpha(alpha, n_tests, correction), power)
    e1, e2 = effective_n(n1, images_per_subject, icc), effective_n(n2, images_per_subject, icc)
    return (za + zb) * float(sd) * np.sqrt(1.0 / e1 + 1.0 / e2)


def mean_difference_power(delta, n1, n2, *, images_per_subject=1.0, icc: float = DEFAULT_ICC, sd: float = 1.0,
                          alpha: float = 0.05, n_tests: int = 1, correction: str = DEFAULT_CORRECTION) -> np.ndarray:
    """Power of the two-sided z test to detect a mean difference ``delta`` (both tails; docs/METHODS.md §6.7).

    Parameters
    ----------
    delta : array_like
        True difference of the group means.
    n1, n2, images_per_subject, icc, sd, alpha, n_tests, correction
        As for :func:`detectable_mean_difference`.

    Returns
    -------
    numpy.ndarray
        ``Phi(d / se - z) + Phi(-d / se - z)``, broadcast over the inputs.
    """
    a = planning_alpha(alpha, n_tests, correction)
    z = float(_st.norm.isf(a / 2))
    se = float(sd) * np.sqrt(1.0 / effective_n(n1, images_per_subject, icc) + 1.0 / effective_n(n2, images_per_subject, icc))
    d = np.asarray(delta, dtype=float) / se
    return _st.norm.cdf(d - z) + _st.norm.cdf(-d - z)


def detectable_rate_difference(n1, n2, *, base_rate: float = 0.5, images_per_subject=1.0, icc: float = DEFAULT_ICC,
                               alpha: float = 0.05, power: float = DEFAULT_POWER, n_tests: int = 1,
                               correction: str = DEFAULT_CORRECTION, iterations: int = 60) -> np.ndarray:
    """Smallest rise of a rate above ``base_rate`` (group 1) that group 2 must show to be detected (§6.7).

    Solves ``d = z_a sqrt(pbar (1 - pbar) (1/n1' + 1/n2')) + z_b sqrt(p1 q1 / n1' + p2 q2 / n2')`` for
    ``p2 = p1 + d`` by vectorised bisection on (p1, 1] (the two-proportion z test with the pooled variance under
    H0, Fleiss' formula without continuity correction; docs/METHODS.md §6.7). A fall below the base rate is the
    same question with ``1 - base_rate``.

    Parameters
    ----------
    n1, n2 : array_like
        Subjects in the two groups (broadcast together).
    base_rate : float
        The rate of group 1, in (0, 1).
    images_per_subject, icc, alpha, power, n_tests, correction
        As for :func:`detectable_mean_difference`.
    iterations : int
        Bisection steps (60 reach machine precision).

    Returns
    -------
    numpy.ndarray
        ``p2 - p1``; NaN where even ``p2 = 1`` is not detected.
    """
    _check_unit("base_rate", base_rate)
    za, zb = _z(planning_alpha(alpha, n_tests, correction), power)
    e1, e2 = np.broadcast_arrays(effective_n(n1, images_per_subject, icc), effective_n(n2, images_per_subject, icc))
    p1 = float(base_rate)

    def gap(p2):
        pbar = (e1 * p1 + e2 * p2) / (e1 + e2)
        need = za * np.sqrt(pbar * (1 - pbar) * (1 / e1 + 1 / e2)) + zb * np.sqrt(p1 * (1 - p1) / e1 + p2 * (1 - p2) / e2)
        return (p2 - p1) - need

    lo, hi = np.full(e1.shape, p1), np.ones(e1.shape)
    reachable = gap(hi) >= 0
    for _ in range(int(iterations)):
        mid = 0.5 * (lo + hi)
        up = gap(mid) >= 0
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
    return np.where(reachable, hi - p1, np.nan)


@dataclass
class ModelPowerPlan:
    """What a model audit with these group sizes can detect (docs/METHODS.md §6.7).

    ``pairs``: one row per pair of groups (``group_a``, ``group_b``, their subjects, ``effective_a`` /
    ``effective_b``, ``mean_difference`` in units of ``sd``, ``mean_difference_sd`` in SD units, ``rate_rise``
    and ``rate_fall`` around ``base_rate``). ``curve``: the same for two equal groups over ``subjects`` (the
    planning curve). ``power_curve``: power against the mean difference (SD units) for the smallest pair.
    """

    alpha: float
    alpha_per_test: float
    n_tests: int
    correction: str
    power: float
    images_per_subject: float
    icc: float
    sd: float
    base_rate: float
    pairs: pd.DataFrame
    curve: pd.DataFrame
    power_curve: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The table of group pairs."""
        return self.pairs


@dataclass(frozen=True)
class ModelDesign:
    """How the audit's data will look: images per subject, their correlation, the SD of a value, a base rate."""

    images_per_subject: float = 1.0
    icc: float = DEFAULT_ICC
    sd: float = 1.0
    base_rate: float = 0.5


def plan_model_audit(subjects: dict, design: ModelDesign = ModelDesign(), *, alpha: float = 0.05,
                     power: float = DEFAULT_POWER, correction: str = DEFAULT_CORRECTION) -> ModelPowerPlan:
    """Smallest detectable differences for every pair of groups (docs/METHODS.md §6.7).

    Parameters
    ----------
    subjects : dict
        Group name -> subjects in that group (at least two groups).
    design : ModelDesign
        Images per subject, ICC, SD of one value, base rate.
    alpha, power, correction
        As for :func:`detectable_mean_difference`; the number of tests is the number of pairs.

    Returns
    -------
    ModelPowerPlan
    """
    names = [str(k) for k in subjects]
    sizes = np.asarray(list(subjects.values()), dtype=float)
    if len(names) < 2:
        raise ParameterError("subjects", "needs at least two groups to compare")
    n_tests = len(names) * (len(names) - 1) // 2
    ia, ib = np.triu_indices(len(names), k=1)
    kw = dict(images_per_subject=design.images_per_subject, icc=design.icc, alpha=alpha, power=power, n_tests=n_tests,
              correction=correction)

    def table(na, nb) -> dict:
        d_sd = detectable_mean_difference(na, nb, **kw)
        return {"effective_a": effective_n(na, design.images_per_subject, design.icc),
                "effective_b": effective_n(nb, design.images_per_subject, design.icc),
                "mean_difference": d_sd * design.sd, "mean_difference_sd": d_sd,
                "rate_rise": detectable_rate_difference(na, nb, base_rate=design.base_rate, **kw),
                "rate_fall": detectable_rate_difference(na, nb, base_rate=1 - design.base_rate, **kw)}

    pairs = pd.DataFrame({"group_a": [names[i] for i in ia], "group_b": [names[i] for i in ib],
                          "subjects_a": sizes[ia], "subjects_b": sizes[ib], **table(sizes[ia], sizes[ib])})
    grid = np.unique(np.round(np.geomspace(max(2.0, sizes.min() / 4), sizes.max() * 4, 40)))
    curve = pd.DataFrame({"subjects": grid, **table(grid, grid)}).drop(columns=["effective_b"])
    curve = curve.rename(columns={"effective_a": "effective"})
    small = int(np.argmax(pairs["mean_difference_sd"].to_numpy()))
    d = np.linspace(0, 2.0 * float(pairs["mean_difference_sd"].iloc[small]), 41)
    pw = mean_difference_power(d, sizes[ia][small], sizes[ib][small], images_per_subject=design.images_per_subject,
                               icc=design.icc, alpha=alpha, n_tests=n_tests, correction=correction)
    power_curve = pd.DataFrame({"mean_difference_sd": d, "power": pw})
    return ModelPowerPlan(alpha=float(alpha), alpha_per_test=planning_alpha(alpha, n_tests, correction), n_tests=n_tests,
                          correction=correction, power=float(power), images_per_subject=float(design.images_per_subject),
                          icc=float(design.icc), sd=float(design.sd), base_rate=float(design.base_rate), pairs=pairs,
                          curve=curve, power_curve=power_curve)


@dataclass
class CatalogPlan:
    """Power of the retrieval parity tests at a target nRR before results exist (docs/METHODS.md §8.3).

    ``power``: MultiIndex ``(n, side)`` (side ``below``: RR = nRR, ``above``: RR = 1 / nRR), one column per test
    (``omnibus`` and each value). ``needed``: per test, ``n_needed`` (smallest catalog whose power reaches the
    target on both sides; inf beyond ``n_max``).
    """

    shares: pd.Series
    target_nrr: float
    k: int
    alpha: float
    target: float
    trials: int
    power: pd.DataFrame
    needed: pd.DataFrame


@dataclass(frozen=True)
class CatalogDesign:
    """The retrieval system: results per query, the nRR to detect, the catalog sizes to show."""

    k: int = 6
    target_nrr: float = 0.8
    sizes: Sequence[int] = (100, 250, 1000, 2500)


def catalog_plan(p_z, design: CatalogDesign = CatalogDesign(), *, alpha: float = 0.01, target: float = DEFAULT_POWER,
                 trials: int = 1000, seed: int | None = 0, n_max: int = 1_000_000) -> CatalogPlan:
    """Power at the target nRR for several catalog sizes and the catalog each test needs (docs/METHODS.md §8.3).

    Parameters
    ----------
    p_z : pandas.Series
        Share of each value in the catalog (sums to 1).
    design : CatalogDesign
        K, the target nRR in (0, 1), the catalog sizes.
    alpha, trials, seed
        As for :func:`fairvision.stats.power.power`.
    target : float
        Power a test must reach on both sides of parity.
    n_max : int
        Largest catalog searched.

    Returns
    -------
    CatalogPlan
    """
    nrr, k = float(design.target_nrr), int(design.k)
    _check_unit("target_nrr", nrr)
    shares = pd.Series(p_z, dtype=float)

    def both(n: int) -> pd.DataFrame:
        return pd.DataFrame({"below": power_all(shares, nrr, n, k, alpha, trials, seed),
                             "above": power_all(shares, 1 / nrr, n, k, alpha, trials, seed)}).T

    if not design.sizes or min(int(n) for n in design.sizes) < 1:
        raise ParameterError("sizes", f"must be positive catalog sizes, got {list(design.sizes)}")
    frames = {int(n): both(int(n)) for n in design.sizes}
    start = max(frames)
    power = pd.concat(frames, names=["n", "side"])
    cache: dict[int, pd.Series] = {}

    def least(n: int) -> pd.Series:
        if n not in cache:
            cache[n] = both(n).min(axis=0)
        return cache[n]

    needed = pd.DataFrame({"n_needed": [needed_n(lambda n, t=t: float(least(n)[t]), start, target, n_max) for t in power.columns]},
                          index=pd.Index(power.columns, name="test"))
    needed.insert(0, "share", [np.nan, *shares.to_numpy()])
    return CatalogPlan(shares=shares, target_nrr=nrr, k=k, alpha=float(alpha), target=float(target), trials=int(trials),
                       power=power, needed=needed)

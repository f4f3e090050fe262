"""Metamorphic bias scores of an image generator (BiasPainter; docs/METHODS.md §10).

A generator edits seed photos of people with neutral prompts; for every (seed,
prompt word) pair an assessor measures a signed change of one property (skin
lightness, age, a gender flip). This module turns the tidy table of those
changes into scores:

- :func:`signed_rank_test`: Wilcoxon signed-rank test of paired changes against
  no change (skin colour, age; docs/METHODS.md §10.3);
- :func:`flip_test`: exact binomial test of gender flips by direction
  (docs/METHODS.md §10.3);
- :func:`change_test`: the paired test of one kind of change (signed-rank or
  flip test);
- :func:`mean_abs_score`, :func:`mean_abs_score_ci`: a topic or model score
  (mean absolute word score) with its replicates and bias-corrected interval
  (docs/METHODS.md §10.4);
- :func:`metamorphic_scores`: word scores (mean change over seeds) with
  bootstrap CIs over seeds and the paired test corrected across words, and the
  topic and model scores (mean absolute word score) with CIs from the same
  bootstrap replicates (docs/METHODS.md §10.2, §10.4).

Pure numerics: no image or model code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.resample import (DEFAULT_LEVEL, bias_corrected_ci, cluster_bootstrap_weights, group_mean_replicates,
                                       percentile_ci)
from fairvision.stats.results import TestResult

#: the paired test of each kind of change
TESTS = ("wilcoxon", "sign")
#: up to this many non-zero changes the signed-rank p-value is exact
EXACT_MAX = 400


@dataclass
class ChangeTestResult(TestResult):
    """A paired test of changes against no change.

    Attributes
    ----------
    statistic : float
        Wilcoxon: the signed-rank statistic (the smaller rank sum, as
        :func:`scipy.stats.wilcoxon`); sign test: the number of changes in the
        positive direction.
    pvalue : float
        Two-sided; 1 when no pair changed.
    n : int
        Pairs tested.
    n_nonzero : int
        Pairs whose change is not zero (the only ones that carry information).
    """

    n: int = 0
    n_nonzero: int = 0


def signed_rank_test(changes) -> ChangeTestResult:
    """Wilcoxon signed-rank test that paired changes are centred on zero (docs/METHODS.md §10.3).

    Parameters
    ----------
    changes : array_like
        One signed change per seed (output minus seed); NaN entries are left out.

    Returns
    -------
    ChangeTestResult
        Zero changes are dropped before ranking (Wilcoxon's treatment); tied
        absolute changes get mid-ranks. ``statistic`` is the smaller of the
        positive and negative rank sums (as :func:`scipy.stats.wilcoxon`).
        The two-sided p-value is exact (the permutation distribution of the
        rank sum given the observed ranks, ties included) for up to
        :data:`EXACT_MAX` non-zero changes, else the normal approximation with
        the tie correction. No non-zero change gives ``statistic`` NaN and
        ``pvalue`` 1.
    """
    x = np.asarray(changes, dtype=float).ravel()
    x = x[~np.isnan(x)]
    nz = x[x != 0]
    n = int(nz.size)
    if n == 0:
        return ChangeTestResult(float("nan"), 1.0, n=int(x.size), n_nonzero=0)
    ranks = sps.rankdata(np.abs(nz))
    t_plus = float(ranks[nz > 0].sum())
    total = float(ranks.sum())
    stat = min(t_plus, total - t_plus)
    if n <= EXACT_MAX:
        w = np.rint(2.0 * ranks).astype(np.int64)  # mid-ranks are multiples of 1/2
        dist = np.zeros(int(w.sum()) + 1)
        dist[0] = 1.0
        for wi in w:  # the null distribution of 2 T+: each rank enters with probability 1/2
            shifted = np.zeros_like(dist)
            shifted[wi:] = dist[:-wi] if wi else dist
            dist = 0.5 * (dist + shifted)
        k = int(round(2.0 * stat))
        p = 2.0 * float(dist[:k + 1].sum())
    else:
        _, counts = np.unique(ranks, return_counts=True)
        var = n * (n + 1) * (2 * n + 1) / 24.0 - float((counts ** 3 - counts).sum()) / 48.0
        z = (stat - n * (n + 1) / 4.0) / np.sqrt(var) if var > 0 else 0.0
        p = 2.0 * float(sps.norm.cdf(z))
    return ChangeTestResult(float(stat), float(min(1.0, p)), n=int(x.size), n_nonzero=n)


def flip_test(n_positive: int, n_negative: int) -> ChangeTestResult:
    """Exact binomial test that flips in the two directions are equally likely (docs/METHODS.md §10.3).

    Parameters
    ----------
    n_positive : int
        Pairs that flipped in the positive direction (e.g. female to male).
    n_negative : int
        Pairs that flipped the other way.

    Returns
    -------
    ChangeTestResult
        ``statistic`` = ``n_positive``; two-sided exact binomial p-value with
        success probability 1/2 over ``n_positive + n_negative`` flips; 1 when
        nothing flipped.
    """
    k, m = int(n_positive), int(n_negative)
    if k < 0 or m < 0:
        raise FairvisionError("flip counts must be non-negative")
    if k + m == 0:
        return ChangeTestResult(0.0, 1.0, n=0, n_nonzero=0)
    p = sps.binomtest(k, k + m, 0.5, alternative="two-sided").pvalue
    return ChangeTestResult(float(k), float(min(1.0, p)), n=k + m, n_nonzero=k + m)


@dataclass
class MetamorphicScores:
    """Word, topic and model scores of one property.

    Attributes
    ----------
    words : DataFrame
        Indexed by word: ``topic``, ``n`` (seeds), ``estimate`` (mean signed
        change), ``ci_low``, ``ci_high``, ``level``, ``statistic``,
        ``pvalue``, ``pvalue_adjusted``, ``n_nonzero``.
    topics : DataFrame
        Indexed by topic: ``n_words``, ``estimate`` (mean absolute word
        score), ``ci_low``, ``ci_high``, ``level``.
    model : DataFrame
        One row (index ``model``): the mean absolute word score over all words.
    """

    words: pd.DataFrame
    topics: pd.DataFrame
    model: pd.DataFrame
    test: str
    correction: str

    def to_frame(self) -> pd.DataFrame:
        return self.words


def _codes(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    codes, uniques = pd.factorize(values, sort=False)
    return codes.astype(np.int64), pd.Index(uniques)


def metamorphic_scores(
    data: pd.DataFrame,
    *,
    value: str = "change",
    word: str = "word",
    unit: str = "seed_id",
    topic: str | None = "topic",
    test: str = "wilcoxon",
    n_boot: int = 1000,
    level: float = DEFAULT_LEVEL,
    seed: np.random.Generator | int | None = 0,
    correction: str = DEFAULT_CORRECTION,
) -> MetamorphicScores:
    """BiasPainter's word, topic and model scores of one property (docs/METHODS.md §10.2, §10.4).

    Parameters
    ----------
    data : DataFrame
        One row per (seed, word) output: the signed change in ``value``
        (NaN = not assessed, left out), the ``word``, the seed ``unit`` and
        optionally the ``topic``. Several rows of one (unit, word) are
        averaged first, so each seed counts once per word.
    value, word, unit, topic : str
        Column names (``topic`` None: one topic, ``all``).
    test : {"wilcoxon", "sign"}
        Paired test of the seeds' changes against no change:
        :func:`signed_rank_test` for continuous changes (skin, age),
        :func:`flip_test` on the signs for flips (gender, coded +1 / -1 / 0).
    n_boot : int
        Bootstrap replicates; seeds are resampled with replacement, the same
        draw for every word, so topic and model scores get joint intervals.
    level : float
        Two-sided level of the intervals.
    seed : int, numpy Generator or None
        Randomness of the bootstrap.
    correction : str
        Multiple-testing correction across words (default
        :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`).

    Returns
    -------
    MetamorphicScores
    """
    if test not in TESTS:
        raise FairvisionError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    cols = [value, word, unit] + ([topic] if topic else [])
    missing = [c for c in cols if c not in data.columns]
    if missing:
        raise ColumnError(f"metamorphic scores: no column {missing[0]!r}; columns are {', '.join(map(str, data.columns))}")
    d = data[cols].copy()
    d[value] = pd.to_numeric(d[value], errors="coerce")
    if topic is None:
        topic = "topic"
        d[topic] = "all"
    topic_of = d.drop_duplicates(word).set_index(word)[topic]
    d = d.dropna(subset=[value])
    per = d.groupby([word, unit], sort=False, observed=True)[value].mean().reset_index()
    wcodes, words = _codes(per[word])
    ucodes, _ = _codes(per[unit])
    # every word of the input keeps a row, also one with no assessed output
    all_words = pd.Index(topic_of.index)
    order = all_words.get_indexer(words)
    vals = per[value].to_numpy(float)
    n_words, n_units = len(all_words), int(ucodes.max()) + 1 if ucodes.size else 0
    wc = order[wcodes]
    est = np.full(n_words, np.nan)
    n = np.zeros(n_words, dtype=np.int64)
    if vals.size:
        sums = np.bincount(wc, weights=vals, minlength=n_words)
        n = np.bincount(wc, minlength=n_words)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = np.where(n > 0, sums / np.maximum(n, 1), np.nan)
    if n_units and n_boot > 0:
        weights = cluster_bootstrap_weights(n_units, int(n_boot), seed)
        reps = group_mean_replicates(vals, wc, ucodes, weights, n_groups=n_words)
    else:
        reps = np.full((max(int(n_boot), 1), n_words), np.nan)
    lo, hi = percentile_ci(reps, level)
    stat = np.full(n_words, np.nan)
    pval = np.ones(n_words)
    nnz = np.zeros(n_words, dtype=np.int64)
    order_idx = np.argsort(wc, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(wc, minlength=n_words))])
    sorted_vals = vals[order_idx]
    for i in range(n_words):
        x = sorted_vals[bounds[i]:bounds[i + 1]]
        if x.size == 0:
            pval[i] = np.nan
            continue
        r = change_test(x, test)
        stat[i], pval[i], nnz[i] = r.statistic, r.pvalue, r.n_nonzero
    words_df = pd.DataFrame({
        "topic": topic_of.to_numpy(), "n": n, "estimate": est, "ci_low": lo, "ci_high": hi, "level": level,
        "statistic": stat, "pvalue": pval, "pvalue_adjusted": adjust_pvalues(pval, correction), "n_nonzero": nnz,
    }, index=all_words.rename("word"))
    # topic and model scores: mean |word score|, CIs from the same replicates
    tcodes, topics = _codes(words_df["topic"])
    rows = [_abs_mean_row(est, reps, tcodes == t_i, level) | {"topic": t} for t_i, t in enumerate(topics)]
    topics_df = pd.DataFrame(rows).set_index("topic")
    model_df = pd.DataFrame([_abs_mean_row(est, reps, None, level)], index=pd.Index(["model"], name="scope"))
    return MetamorphicScores(words_df, topics_df, model_df, test=test, correction=correction)


def change_test(changes, test: str = "wilcoxon") -> ChangeTestResult:
    """The paired test of changes against no change for one kind of change (docs/METHODS.md §10.3).

    Parameters
    ----------
    changes : array_like
        One signed change per seed (or per-seed differences between two
        generators).
    test : {"wilcoxon", "sign"}
        ``"wilcoxon"``: :func:`signed_rank_test` of the changes; ``"sign"``:
        :func:`flip_test` of the positive against the negative changes
        (gender flips).

    Returns
    -------
    ChangeTestResult
    """
    if test not in TESTS:
        raise FairvisionError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if test == "wilcoxon":
        return signed_rank_test(changes)
    x = np.asarray(changes, dtype=float)
    return flip_test(int(np.sum(x > 0)), int(np.sum(x < 0)))


def mean_abs_score(estimates, replicates, selection=None) -> tuple[float, np.ndarray, int]:
    """Mean absolute word score over selected words, and its bootstrap replicates (docs/METHODS.md §10.2, §10.4).

    Parameters
    ----------
    estimates : array_like
        One signed score per word; words with a NaN score are left out.
    replicates : ndarray
        Bootstrap replicates of the word scores, shape ``(n_boot, n_words)``;
        NaN entries are left out of each replicate's mean.
    selection : array_like of bool, optional
        The words to average (a topic); default all.

    Returns
    -------
    estimate : float
        Mean of ``|score|`` over the selected words with a score (NaN if none).
    replicate_means : ndarray
        Per replicate, the mean of ``|replicate score|`` over the same words
        (NaN where a replicate has none).
    n : int
        Words averaged.
    """
    est = np.asarray(estimates, dtype=float)
    reps = np.asarray(replicates, dtype=float)
    sel = np.isfinite(est) if selection is None else np.asarray(selection, dtype=bool) & np.isfinite(est)
    if not sel.any():
        return float("nan"), np.full(reps.shape[0], np.nan), 0
    a = np.abs(reps[:, sel])
    cnt = np.isfinite(a).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(cnt > 0, np.nansum(a, axis=1) / np.maximum(cnt, 1), np.nan)
    return float(np.abs(est[sel]).mean()), r, int(sel.sum())


def mean_abs_score_ci(estimate: float, replicate_means, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Interval of a mean absolute score from its replicates (docs/METHODS.md §4.2, §10.4).

    A mean of absolute values is biased upwards under resampling (noise only
    adds), so the interval is centred on the estimate
    (:func:`~fairvision.stats.resample.bias_corrected_ci`, bounded below by 0),
    as for NSD.

    Returns
    -------
    (ci_low, ci_high) : tuple of float
        NaN, NaN when ``estimate`` is not finite (no word had a score).
    """
    if not np.isfinite(estimate):
        return float("nan"), float("nan")
    lo, hi = bias_corrected_ci(replicate_means, float(estimate), level, bounds=(0.0, np.inf))
    return float(lo), float(hi)


def _abs_mean_row(est: np.ndarray, reps: np.ndarray, selection, level: float) -> dict:
    estimate, rep_means, n = mean_abs_score(est, reps, selection)
    lo, hi = mean_abs_score_ci(estimate, rep_means, level)
    return {"n_words": n, "estimate": estimate, "ci_low": lo, "ci_high": hi, "level": level}

"""Diversity of a set of images from their embeddings: the Vendi score.

FHIBE (docs/METHODS.md §5.3) measures visual diversity with the Vendi score
(Friedman and Dieng 2023): ``VS = exp(-sum_i lambda_i log lambda_i)`` where
``lambda`` are the eigenvalues of ``K / n`` and ``K_ij`` is the cosine
similarity of embeddings ``i`` and ``j``. VS is the effective number of
distinct images: 1 when all are the same, ``n`` when all are orthogonal.

For the cosine (linear) kernel the non-zero eigenvalues of ``K / n`` are those
of the d x d second-moment matrix ``C = X^T X / n``, so the smaller matrix is
decomposed. The curation audit (docs/METHODS.md §13.2) adds intervals:

- :func:`vendi_ci`: a subject-level bootstrap of the *linearised* score.
  ``log VS = -tr(C log C)`` is the mean of the per-image terms
  ``h_i = -x_i^T log(C) x_i`` (:func:`vendi_terms`), and to first order a
  reweighting of the images changes ``log VS`` by the reweighted mean of
  ``h``. Resampling subjects with the eigenbasis held fixed therefore needs no
  eigen-decomposition per replicate, and avoids the plain bootstrap's downward
  bias (a resample with replacement holds duplicates, and duplicates lower VS).
- :func:`rarefied_vendi`: VS grows with the number of images, so groups of
  different sizes are compared at a common size: the mean VS of random subsets
  of ``size`` subjects (one random image each) drawn without replacement.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.stats.resample import DEFAULT_LEVEL, BootstrapResult, cluster_bootstrap, percentile_ci
from fairvision.stats.results import Estimate

#: eigenvalues at or below this are treated as zero
EIG_TOL = 1e-12
#: memory for the draws of a rarefied Vendi score handled at once (their embeddings and Gram matrices)
_CHUNK_BYTES = 256 * 2**20


def _unit_rows(embeddings, normalize: bool) -> np.ndarray:
    """Float rows (float32 kept as float32 for speed on large sets, anything else float64), unit length."""
    x = np.asarray(embeddings)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise FairvisionError("vendi_score needs a non-empty (n, d) array of embeddings")
    x = x.astype(np.float32 if x.dtype == np.float32 else np.float64, copy=False)
    if not np.isfinite(x).all():
        raise FairvisionError("embeddings contain NaN or infinite values")
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        if (norms == 0).any():
            raise FairvisionError(f"embedding row {int(np.flatnonzero(norms.ravel() == 0)[0]) + 1} is all zeros")
        x = x / norms
    return x


def _entropy(lam: np.ndarray) -> float:
    lam = lam[lam > EIG_TOL]
    return float(-np.sum(lam * np.log(lam)))


def vendi_score(embeddings, *, normalize: bool = True, weights=None) -> float:
    """Vendi score with the cosine-similarity kernel.

    For unit-norm rows ``X`` (n x d), ``K = X X^T`` and the non-zero
    eigenvalues of ``K / n`` equal those of ``X^T X / n`` (d x d), so the
    smaller of the two matrices is decomposed: O(n d^2) instead of O(n^3)
    (docs/METHODS.md §5.3, §13.2). float32 input is multiplied in float32
    (the Gram matrix of 100,000 x 1,280 embeddings in about 2 s on 2 cores),
    everything else in float64; the eigenvalues are always taken in float64.

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    normalize : bool
        Scale rows to unit length first (cosine kernel). Rows of zeros are an
        error.
    weights : array_like, shape (n,), optional
        Non-negative row weights (e.g. how often a row is drawn): the score of
        the sample in which row ``i`` appears ``weights[i]`` times, i.e. the
        eigenvalues of ``sum_i p_i x_i x_i^T`` with ``p = weights / sum(weights)``.

    Returns
    -------
    float
        Between 1 (all images the same) and ``n`` (all orthogonal).
    """
    x = _unit_rows(embeddings, normalize)
    n, d = x.shape
    if weights is None:
        p = None
    else:
        p = np.asarray(weights, dtype=np.float64)
        if p.shape != (n,) or not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
            raise FairvisionError(f"vendi_score: weights must be {n} non-negative finite numbers, not all zero")
        keep = p > 0
        x, p = x[keep], p[keep] / p.sum()
        n = x.shape[0]
    if n <= d:
        if p is None:
            gram = (x @ x.T).astype(np.float64) / n
        else:
            s = np.sqrt(p).astype(x.dtype)[:, None] * x
            gram = (s @ s.T).astype(np.float64)
    else:
        if p is None:
            gram = (x.T @ x).astype(np.float64) / n
        else:
            s = np.sqrt(p).astype(x.dtype)[:, None] * x
            gram = (s.T @ s).astype(np.float64)
    return float(np.exp(_entropy(np.linalg.eigvalsh(gram))))


def vendi_terms(embeddings, *, normalize: bool = True) -> tuple[float, np.ndarray]:
    """The Vendi score and the per-image terms of its logarithm (docs/METHODS.md §13.2).

    With ``C = X^T X / n`` (unit rows), ``log VS = -tr(C log C) = mean_i h_i`` where
    ``h_i = -x_i^T log(C) x_i`` (log taken on the non-zero eigenvalues; every ``x_i`` lies in their span).
    ``h_i`` is large for an image unlike the rest (``log n`` for each of ``n`` orthogonal images) and 0 for
    a set of identical images.

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    normalize : bool
        Scale rows to unit length first (cosine kernel).

    Returns
    -------
    score : float
        The Vendi score, ``exp(mean(h))``.
    h : numpy.ndarray, shape (n,)
        The per-image terms.
    """
    x = _unit_rows(embeddings, normalize).astype(np.float64, copy=False)
    n, d = x.shape
    if n <= d:
        lam, u = np.linalg.eigh(x @ x.T / n)
        keep = lam > EIG_TOL
        lam, u = lam[keep], u[:, keep]
        # x_i . v_k = sqrt(n lam_k) u_ik for the eigenvectors v_k of C
        h = -(n * (u * u) * (lam * np.log(lam))).sum(axis=1)
    else:
        lam, v = np.linalg.eigh(x.T @ x / n)
        keep = lam > EIG_TOL
        lam, v = lam[keep], v[:, keep]
        proj = x @ v
        h = -((proj * proj) * np.log(lam)).sum(axis=1)
    return float(np.exp(_entropy(lam))), h


def vendi_ci(embeddings, clusters=None, *, n_boot: int = 1000, level: float = DEFAULT_LEVEL,
             seed: int | np.random.Generator | None = 0, normalize: bool = True) -> BootstrapResult:
    """Vendi score with a subject-level bootstrap interval of its linearisation (docs/METHODS.md §13.2).

    The replicates resample subjects (clusters) with replacement
    (:func:`fairvision.stats.resample.cluster_bootstrap`) and compute
    ``exp(weighted mean of h)`` from the terms of :func:`vendi_terms`, with the eigenbasis of the full
    sample held fixed: a first-order (delta-method) bootstrap, centred on the estimate. The interval is the
    percentile interval of those replicates.

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    clusters : int array (n,), optional
        Subject code ``0 .. n_subjects-1`` of each row; None: every row its own subject.
    n_boot, level, seed
        Replicates, two-sided level, randomness.
    normalize : bool
        Scale rows to unit length first.

    Returns
    -------
    BootstrapResult
        ``estimate`` is the Vendi score itself; ``se`` the replicates' standard deviation.
    """
    _, h = vendi_terms(embeddings, normalize=normalize)
    n = h.size
    if clusters is None:
        codes = np.arange(n)
    else:
        clusters = np.asarray(clusters)
        if clusters.shape != (n,):
            raise FairvisionError(f"vendi_ci: {clusters.size} subject codes for {n} embeddings")
        _, codes = np.unique(clusters, return_inverse=True)
    k = int(codes.max()) + 1
    sums = np.bincount(codes, weights=h, minlength=k)
    counts = np.bincount(codes, minlength=k).astype(np.float64)

    def stat(w: np.ndarray) -> np.ndarray:
        return np.exp((w @ sums) / (w @ counts))

    return cluster_bootstrap(stat, codes, n_boot=n_boot, level=level, seed=seed)  # estimate: exp(mean h) = VS


def rarefied_vendi_draws(embeddings, clusters=None, *, size: int, n_draws: int = 100,
                         seed: int | np.random.Generator | None = 0, normalize: bool = True) -> np.ndarray:
    """Vendi scores of ``n_draws`` random subsets of ``size`` subjects, one random image each
    (docs/METHODS.md §13.2); see :func:`rarefied_vendi`.

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    clusters : int array (n,), optional
        Subject code of each row (None: every row its own subject).
    size : int
        Subjects per draw, at least 2 and at most the number of subjects.
    n_draws : int
        Number of subsets.
    seed : int, numpy.random.Generator or None
        Randomness.
    normalize : bool
        Scale rows to unit length first.

    Returns
    -------
    numpy.ndarray, shape (n_draws,)
    """
    x = _unit_rows(embeddings, normalize).astype(np.float64, copy=False)
    n, d = x.shape
    codes = np.arange(n) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    if codes.shape != (n,):
        raise FairvisionError(f"rarefied_vendi: {codes.size} subject codes for {n} embeddings")
    k = int(codes.max()) + 1
    size = int(size)
    if not 2 <= size <= k:
        raise FairvisionError(f"rarefied_vendi: size must be between 2 and the {k} subjects, not {size}")
    if n_draws < 1:
        raise FairvisionError("rarefied_vendi: n_draws must be at least 1")
    rng = np.random.default_rng(seed)
    # rows of each subject, as a padded table: pick a random column below the subject's count
    order = np.argsort(codes, kind="stable")
    per = np.bincount(codes, minlength=k)
    start = np.concatenate([[0], np.cumsum(per)[:-1]])
    subj = np.stack([rng.choice(k, size, replace=False) for _ in range(n_draws)])  # subjects without replacement
    pick = order[start[subj] + (rng.random(subj.shape) * per[subj]).astype(np.int64)]
    m = min(size, d)
    chunk = max(1, int(_CHUNK_BYTES // (8 * (size * d + 2 * m * m))))
    scores = np.empty(n_draws)
    for s in range(0, n_draws, chunk):
        xs = x[pick[s:s + chunk]]  # (c, size, d)
        gram = xs @ np.swapaxes(xs, 1, 2) if size <= d else np.swapaxes(xs, 1, 2) @ xs
        lam = np.linalg.eigvalsh(gram / size)
        lam = np.where(lam > EIG_TOL, lam, 1.0)  # 1 log 1 = 0: dropped
        scores[s:s + chunk] = np.exp(-np.sum(lam * np.log(lam), axis=1))
    return scores


def rarefied_vendi(embeddings, clusters=None, *, size: int, n_draws: int = 100, level: float = DEFAULT_LEVEL,
                   seed: int | np.random.Generator | None = 0, normalize: bool = True) -> Estimate:
    """Vendi score at a common sample size: random subsets of ``size`` subjects, one image each
    (docs/METHODS.md §13.2).

    Each draw takes ``size`` distinct subjects without replacement and one random image of each (so a subset
    never holds the same person twice and never a duplicate), and scores it. The estimate is the mean over
    draws; ``ci_low`` / ``ci_high`` are percentiles of the draws: how much the score depends on which subset
    was drawn. With ``size`` equal to the number of subjects and one image each, every draw is the whole set.

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    clusters : int array (n,), optional
        Subject code of each row (None: every row its own subject).
    size : int
        Subjects per draw, at least 2 and at most the number of subjects.
    n_draws, level, seed
        Draws, two-sided level of the percentile range, randomness.
    normalize : bool
        Scale rows to unit length first.

    Returns
    -------
    Estimate
    """
    scores = rarefied_vendi_draws(embeddings, clusters, size=size, n_draws=n_draws, seed=seed, normalize=normalize)
    lo, hi = percentile_ci(scores, level)
    return Estimate(float(scores.mean()), float(lo), float(hi), level)

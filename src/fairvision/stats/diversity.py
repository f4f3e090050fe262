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
from scipy import linalg as _linalg
from scipy.linalg import blas as _blas

from fairvision.errors import FairvisionError
from fairvision.stats.resample import DEFAULT_LEVEL, BootstrapResult, cluster_bootstrap, percentile_ci
from fairvision.stats.results import Estimate

#: eigenvalues at or below this are treated as zero
EIG_TOL = 1e-12
#: :func:`vendi_score` recomputes the matrix of float32 embeddings in float64 when an eigenvalue of the float32
#: one is below this fraction of the largest (float32 products perturb eigenvalues by about 1e-9 of it)
FLOAT32_FLOOR = 1e-7
#: memory for the draws of a rarefied Vendi score handled at once (their embeddings and Gram matrices)
_CHUNK_BYTES = 256 * 2**20
#: rows of embeddings scaled and multiplied at once by :func:`vendi_score` (a chunk's bytes)
_GRAM_CHUNK_BYTES = 32 * 2**20


def _unit_rows(embeddings, normalize: bool) -> np.ndarray:
    """Float rows (float32 kept as float32 for speed on large sets, anything else float64), unit length."""
    x = _as_matrix(embeddings)
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


def _as_matrix(embeddings) -> np.ndarray:
    """The embeddings as a non-empty (n, d) float32 or float64 array (no copy when they already are one)."""
    x = np.asarray(embeddings)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise FairvisionError("vendi_score needs a non-empty (n, d) array of embeddings")
    if x.dtype != np.float32 and x.dtype != np.float64:
        x = x.astype(np.float64)
    return x


def _row_scales(chunk: np.ndarray, normalize: bool, first_row: int) -> np.ndarray:
    """1 / |x_i| of every row of ``chunk`` (float64; ones without ``normalize``), after checking the rows are
    finite and not all zeros (``first_row``: the chunk's first row in the whole set, for the message)."""
    sq = np.einsum("ij,ij->i", chunk, chunk)
    if not np.isfinite(sq).all():
        if not np.isfinite(chunk).all():
            raise FairvisionError("embeddings contain NaN or infinite values")
        big = chunk.astype(np.float64)  # finite values whose squares overflow float32
        sq = np.einsum("ij,ij->i", big, big)
    if not normalize:
        return np.ones(chunk.shape[0])
    if (sq == 0).any():
        raise FairvisionError(f"embedding row {first_row + int(np.flatnonzero(sq == 0)[0]) + 1} is all zeros")
    return 1.0 / np.sqrt(sq.astype(np.float64))


def _gram(x: np.ndarray, normalize: bool, p: np.ndarray | None = None) -> np.ndarray:
    """``sum_i w_i u_i u_i^T`` (d x d, float64, upper triangle only) of the rows ``u_i = x_i / |x_i|``,
    with ``w_i = p_i`` or ``1 / n`` (docs/METHODS.md §13.2).

    Rows are taken in chunks of at most :data:`_GRAM_CHUNK_BYTES`: a chunk is scaled (a copy of the chunk
    only, never of the whole set), its Gram matrix is a symmetric rank-k update (BLAS ``syrk``: half of
    the products of a full matrix product) in the embeddings' precision, and the chunks' Gram matrices
    are summed in float64. Peak extra memory: one chunk (at most a quarter of the rows) and two d x d
    matrices, less than the embeddings themselves once n >= 4 d.
    """
    n, d = x.shape
    syrk = _blas.ssyrk if x.dtype == np.float32 else _blas.dsyrk
    rows = max(1, min(int(_GRAM_CHUNK_BYTES // (d * x.itemsize)), -(-n // 4)))  # at most a quarter of the rows
    acc = np.zeros((d, d), order="F")
    buf = np.zeros((d, d), dtype=x.dtype, order="F")
    scaled = np.empty((min(rows, n), d), dtype=x.dtype)  # reused: no fresh pages per chunk
    for s in range(0, n, rows):
        chunk = x[s:s + rows]
        scale = _row_scales(chunk, normalize, s)
        if p is not None:
            scale = scale * np.sqrt(p[s:s + rows])
        u = np.multiply(chunk, scale.astype(x.dtype)[:, None], out=scaled[:chunk.shape[0]])
        # u is C-contiguous (m, d), so u.T is the Fortran-ordered (d, m) matrix BLAS reads without a copy
        buf = syrk(1.0, u.T, beta=0.0, c=buf, overwrite_c=1)  # u^T u, upper triangle
        acc += buf
    if p is None:
        acc /= n
    return acc


def _float32_floor_reached(lam: np.ndarray) -> bool:
    """Whether a spectrum computed from a float32 Gram matrix reaches float32's rounding: an eigenvalue below
    :data:`FLOAT32_FLOOR` times the largest (docs/METHODS.md §13.2)."""
    return bool(lam[0] < FLOAT32_FLOOR * lam[-1])


def _spectrum(x: np.ndarray, normalize: bool, p: np.ndarray | None) -> np.ndarray:
    """Eigenvalues (ascending) of ``sum_i p_i u_i u_i^T`` (``p_i = 1/n`` without weights) through the smaller
    of the d x d and the n x n matrix (docs/METHODS.md §13.2)."""
    n, d = x.shape
    if n > d:
        gram = _gram(x, normalize, p)
    else:  # the n x n matrix of the scaled rows (a copy no larger than the embeddings)
        scale = _row_scales(x, normalize, 0) * (np.sqrt(p) if p is not None else 1.0 / np.sqrt(n))
        u = x * scale.astype(x.dtype)[:, None]
        gram = (_blas.ssyrk if x.dtype == np.float32 else _blas.dsyrk)(1.0, u.T, trans=1).astype(np.float64)
    return _linalg.eigvalsh(gram, lower=False, overwrite_a=True, check_finite=False)


def vendi_score(embeddings, *, normalize: bool = True, weights=None) -> float:
    """Vendi score with the cosine-similarity kernel.

    For unit-norm rows ``X`` (n x d), ``K = X X^T`` and the non-zero
    eigenvalues of ``K / n`` equal those of ``X^T X / n`` (d x d), so the
    smaller of the two matrices is decomposed: O(n d^2) instead of O(n^3)
    (docs/METHODS.md §5.3, §13.2). The d x d matrix is accumulated over chunks
    of rows with a symmetric rank-k update (half the products of ``X^T X``), in
    float32 for float32 embeddings and float64 otherwise, summed in float64,
    without a normalised copy of the embeddings; the eigenvalues are always
    taken in float64. float32 products perturb every eigenvalue by up to about
    1e-9 of the largest: harmless for a spread spectrum (1e-8 relative), but
    a rank-deficient set gets spurious eigenvalues of that size whose
    ``-lambda log lambda`` add up (up to 7e-6 relative). So when the float32
    spectrum has an eigenvalue below :data:`FLOAT32_FLOOR` of the largest, the
    matrix is recomputed in float64.

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
    x = _as_matrix(embeddings)
    n, d = x.shape
    p = None
    if weights is not None:
        p = np.asarray(weights, dtype=np.float64)
        if p.shape != (n,) or not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
            raise FairvisionError(f"vendi_score: weights must be {n} non-negative finite numbers, not all zero")
        p = p / p.sum()
        if np.count_nonzero(p) <= d:  # few rows: the n x n matrix of the rows that count
            keep = p > 0
            _row_scales(x, normalize, 0)  # every row is checked, kept or not
            x, p = x[keep], p[keep]
    lam = _spectrum(x, normalize, p)
    if x.dtype == np.float32 and _float32_floor_reached(lam):
        lam = _spectrum(x.astype(np.float64), normalize, p)  # rank-deficient: float32 rounding would show
    return float(np.exp(_entropy(lam)))


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

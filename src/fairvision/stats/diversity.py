"""Diversity of a set of images from their embeddings: the Vendi score.

FHIBE (docs/METHODS.md §5.3) measures visual diversity with the Vendi score
(Friedman and Dieng 2023): ``VS = exp(-sum_i lambda_i log lambda_i)`` where
``lambda`` are the eigenvalues of ``K / n`` and ``K_ij`` is the cosine
similarity of embeddings ``i`` and ``j``. VS is the effective number of
distinct images: 1 when all are the same, ``n`` when all are orthogonal.
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError


def vendi_score(embeddings, *, normalize: bool = True) -> float:
    """Vendi score with the cosine-similarity kernel.

    For unit-norm rows ``X`` (n x d), ``K = X X^T`` and the non-zero
    eigenvalues of ``K / n`` equal those of ``X^T X / n`` (d x d), so the
    smaller of the two matrices is decomposed: O(n d^2) instead of O(n^3).

    Parameters
    ----------
    embeddings : array_like, shape (n, d)
    normalize : bool
        Scale rows to unit length first (cosine kernel). Rows of zeros are an
        error.

    Returns
    -------
    float
        Between 1 (all images the same) and ``n`` (all orthogonal).
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise FairvisionError("vendi_score needs a non-empty (n, d) array of embeddings")
    if not np.isfinite(x).all():
        raise FairvisionError("embeddings contain NaN or infinite values")
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        if (norms == 0).any():
            raise FairvisionError(f"embedding row {int(np.flatnonzero(norms.ravel() == 0)[0]) + 1} is all zeros")
        x = x / norms
    n, d = x.shape
    gram = (x @ x.T) if n <= d else (x.T @ x)
    lam = np.linalg.eigvalsh(gram / n)
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))

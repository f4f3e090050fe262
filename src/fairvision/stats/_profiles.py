"""Cluster-bootstrap replicates of group counts, computed through membership profiles.

Resampling subjects with replacement and re-counting group members is, for
counts, the same as drawing how many times each *profile* (a subject's vector
of memberships over the groups) is picked: subjects with the same profile are
exchangeable. With one image per subject the profiles are just the groups, so
``n_boot`` replicates cost one multinomial draw over a handful of profiles
instead of ``n_boot`` passes over the data.
"""

from __future__ import annotations

import numpy as np

_MAX_PROFILES = 20000


def bootstrap_counts(
    rows: np.ndarray,
    codes: np.ndarray,
    n_cells: int,
    n_rows: int,
    clusters: np.ndarray | None,
    n_boot: int,
    seed: int | None = 0,
) -> np.ndarray:
    """Replicates of per-cell counts, shape ``(n_boot, n_cells)``.

    Parameters
    ----------
    rows, codes : int arrays
        Long-form membership: row ``rows[i]`` is in cell ``codes[i]``.
    n_cells : int
        Number of cells (declared groups).
    n_rows : int
        Rows in the table (rows without membership still count as draws).
    clusters : int array of length ``n_rows`` or None
        Subject code of every row; None resamples rows.
    """
    rng = np.random.default_rng(seed)
    cl_of_row = np.arange(n_rows, dtype=np.int64) if clusters is None else np.asarray(clusters, np.int64)
    n_clusters = int(cl_of_row.max()) + 1 if n_rows else 0
    entry_cluster = cl_of_row[rows]
    # profile hash of every cluster: two exact integer-valued float sums of random keys
    keyrng = np.random.default_rng(12345)
    k1 = keyrng.integers(1, 2**20, size=n_cells).astype(np.float64)
    k2 = keyrng.integers(1, 2**20, size=n_cells).astype(np.float64)
    h1 = np.bincount(entry_cluster, weights=k1[codes], minlength=n_clusters)
    h2 = np.bincount(entry_cluster, weights=k2[codes], minlength=n_clusters)
    keys = np.stack([h1, h2], axis=1)
    _, first, inverse, mult = np.unique(keys, axis=0, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    n_prof = len(mult)
    if n_prof <= _MAX_PROFILES:
        is_rep = np.zeros(n_clusters, bool)
        is_rep[first] = True
        sel = is_rep[entry_cluster]
        prof = np.bincount(inverse[entry_cluster[sel]] * n_cells + codes[sel], minlength=n_prof * n_cells).reshape(n_prof, n_cells)
        draws = rng.multinomial(n_clusters, mult / n_clusters, size=n_boot)
        return draws @ prof.astype(np.float64)
    out = np.empty((n_boot, n_cells))
    p = np.full(n_clusters, 1.0 / n_clusters)
    for b in range(n_boot):
        w = rng.multinomial(n_clusters, p).astype(np.float64)
        out[b] = np.bincount(codes, weights=w[entry_cluster], minlength=n_cells)
    return out

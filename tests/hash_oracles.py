"""Random 64-bit perceptual hashes for the Hamming-search tests (tests/test_curation_qa.py,
tests/test_known_content.py): copies of a few base hashes with random bits flipped, so near duplicates exist."""

from __future__ import annotations

import numpy as np


def near_hashes(rng: np.random.Generator, base: np.ndarray, n: int, flips: int) -> np.ndarray:
    """``n`` hashes drawn from ``base`` with replacement; ``flips`` times, about half of them get one random bit
    flipped (so each is 0..``flips`` bits from its base hash)."""
    h = base[rng.integers(0, len(base), n)].copy()
    for _ in range(flips):
        m = rng.random(n) < 0.5
        h[m] ^= np.uint64(1) << rng.integers(0, 64, size=int(m.sum())).astype(np.uint64)
    return h

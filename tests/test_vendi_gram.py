"""The chunked d x d path of the Vendi score (docs/METHODS.md §13.2): equal to a float64 reference computed
another way (plain numpy on a normalised float64 copy, and the n x n definition), across chunk boundaries,
with weights, with float32 input, without a normalised copy of the embeddings."""

import tracemalloc

import numpy as np
import pytest

import fairvision.stats.diversity as diversity
from fairvision.errors import FairvisionError
from fairvision.stats.diversity import vendi_score, vendi_terms


def _reference(x, weights=None):
    """Float64 definition through the d x d matrix, with plain numpy (no BLAS syrk, no chunks)."""
    u = np.asarray(x, dtype=np.float64)
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    p = np.full(len(u), 1.0 / len(u)) if weights is None else np.asarray(weights, float) / np.sum(weights)
    lam = np.linalg.eigvalsh((u * p[:, None]).T @ u)
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


def _nxn(x):
    u = np.asarray(x, dtype=np.float64)
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(u @ u.T / len(u))
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


def _clustered(n, d, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, d))
    return (centres[rng.integers(0, 20, n)] + 0.8 * rng.normal(size=(n, d))).astype(dtype)


@pytest.fixture
def small_chunks(monkeypatch):
    # 4 KiB chunks: many chunks and a short last one
    monkeypatch.setattr(diversity, "_GRAM_CHUNK_BYTES", 4096)


def test_chunked_float64_equals_the_definition(small_chunks):
    x = _clustered(1001, 16)  # 32 rows per chunk: 31 full chunks and one of 9 rows
    assert vendi_score(x) == pytest.approx(_nxn(x), rel=1e-10)
    assert vendi_score(x) == pytest.approx(_reference(x), rel=1e-12)


def test_float32_within_1e6_of_a_float64_reference():
    x = _clustered(20000, 256, dtype=np.float32)
    assert vendi_score(x) == pytest.approx(_reference(x), rel=1e-6)


def test_chunk_size_does_not_change_the_score(monkeypatch):
    x = _clustered(3000, 24)
    whole = vendi_score(x)
    monkeypatch.setattr(diversity, "_GRAM_CHUNK_BYTES", 24 * 8 * 7)  # 7 rows per chunk
    assert vendi_score(x) == pytest.approx(whole, rel=1e-12)


def test_weights_are_duplicated_rows(small_chunks):
    x = _clustered(400, 8, seed=1)
    w = np.random.default_rng(2).integers(0, 4, 400)
    dup = np.repeat(x, w, axis=0)
    assert vendi_score(x, weights=w) == pytest.approx(_reference(dup), rel=1e-10)
    assert vendi_score(x, weights=w) == pytest.approx(_reference(x, w), rel=1e-10)
    # few positive weights: the n x n matrix of the rows that count
    few = np.zeros(400)
    few[[3, 50, 399]] = [1.0, 2.0, 1.0]
    assert vendi_score(x, weights=few) == pytest.approx(_reference(x[[3, 50, 50, 399]]), rel=1e-10)


def test_small_n_path_float32_and_against_the_package():
    x = _clustered(300, 512, dtype=np.float32)  # n < d: the n x n matrix
    assert vendi_score(x) == pytest.approx(_nxn(x), rel=1e-6)
    vendi = pytest.importorskip("vendi_score.vendi")
    x64 = _clustered(2000, 32)
    assert vendi_score(x64) == pytest.approx(vendi.score_dual(x64), rel=1e-9)


def test_terms_agree_with_the_score():
    x = _clustered(2500, 40, dtype=np.float32)
    score, h = vendi_terms(x)
    assert score == pytest.approx(vendi_score(x), rel=1e-6)
    assert np.exp(h.mean()) == pytest.approx(vendi_score(x), rel=1e-6)


def test_float32_rows_whose_squares_overflow():
    x = _clustered(500, 8, dtype=np.float32)
    big = x.copy()
    big[7] *= np.float32(1e25)  # finite, but its squared norm overflows float32; the direction is unchanged
    assert vendi_score(big) == pytest.approx(vendi_score(x), rel=1e-6)


def test_errors_name_the_row_in_a_later_chunk(small_chunks):
    x = _clustered(1000, 16)
    x[777] = 0.0
    with pytest.raises(FairvisionError, match="embedding row 778 is all zeros"):
        vendi_score(x)
    x[777] = 1.0
    x[901, 3] = np.nan
    with pytest.raises(FairvisionError, match="NaN or infinite"):
        vendi_score(x)
    x[901, 3] = np.inf
    with pytest.raises(FairvisionError, match="NaN or infinite"):
        vendi_score(x)
    ints = np.random.default_rng(0).integers(-5, 6, size=(200, 6))
    ints[np.abs(ints).sum(axis=1) == 0, 0] = 7  # no zero rows
    assert vendi_score(ints) == pytest.approx(_reference(ints), rel=1e-10)


def test_no_normalised_copy_of_the_embeddings():
    x = _clustered(40000, 128, dtype=np.float32)  # 20 MB
    vendi_score(x[:1000])  # warm up (imports, BLAS buffers)
    tracemalloc.start()
    try:
        vendi_score(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.5 * x.nbytes, (peak, x.nbytes)


def _low_rank(n, d, rank, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d))).astype(dtype)


def test_float32_rank_deficient_sets_are_recomputed_in_float64(monkeypatch):
    # float32 products put the zero eigenvalues of a rank-5 set at about 1e-9 of the largest, and their
    # -lambda log lambda add up to more than 1e-6 of the score; the float64 recomputation removes them
    x = _low_rank(4000, 192, 5)
    ref = _reference(x)
    assert vendi_score(x) == pytest.approx(ref, rel=1e-9)
    monkeypatch.setattr(diversity, "FLOAT32_FLOOR", -np.inf)  # float32 only: what the check prevents
    assert abs(vendi_score(x) - ref) > 1e-6 * ref


@pytest.mark.parametrize("case", ["near-duplicates", "large norms", "weights", "few rows", "spread"])
def test_float32_within_1e6_on_adversarial_sets(case):
    rng = np.random.default_rng(4)
    weights = None
    if case == "near-duplicates":  # 30 distinct rows, each repeated with 1e-4 jitter
        base = rng.normal(size=(30, 160))
        x = (base[rng.integers(0, 30, 3000)] + 1e-4 * rng.normal(size=(3000, 160))).astype(np.float32)
    elif case == "large norms":  # squared norms overflow float32, directions are ordinary
        x = _clustered(3000, 160, dtype=np.float32) * np.float32(1e25)
    elif case == "weights":
        x = _low_rank(3000, 160, 12, seed=2)
        weights = rng.integers(0, 6, 3000)
    elif case == "few rows":  # n < d: the n x n matrix, rank-deficient
        x = _low_rank(300, 512, 4, seed=3)
    else:  # a spread spectrum stays on the float32 path: within 1e-6 all the same
        x = _clustered(5000, 160, dtype=np.float32)
    got = vendi_score(x, weights=weights)
    assert got == pytest.approx(_reference(x.astype(np.float64), weights), rel=1e-6)
    if case == "few rows":
        assert got == pytest.approx(_nxn(x), rel=1e-6)

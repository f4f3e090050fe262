"""Vendi score: hand-worked extremes and the n x n / d x d identity (METHODS.md 4)."""

import numpy as np
import pytest

from fairvision.errors import FairvisionError
from fairvision.stats.diversity import vendi_score


def test_identical_rows_score_one():
    assert vendi_score(np.tile([1.0, 2.0, 3.0], (10, 1))) == pytest.approx(1.0)


def test_orthogonal_rows_score_n():
    assert vendi_score(np.eye(5)) == pytest.approx(5.0)
    assert vendi_score(np.eye(8)[:3]) == pytest.approx(3.0)


def test_two_clusters_by_hand():
    # two equal clusters of identical orthogonal vectors: K/n has eigenvalues 1/2, 1/2 -> VS = 2
    x = np.vstack([np.tile([1.0, 0.0], (4, 1)), np.tile([0.0, 3.0], (4, 1))])
    assert vendi_score(x) == pytest.approx(2.0)


def test_small_and_large_matrix_paths_agree():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 12))
    x_unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    k = x_unit @ x_unit.T / len(x)
    lam = np.linalg.eigvalsh(k)
    lam = lam[lam > 1e-12]
    expected = np.exp(-np.sum(lam * np.log(lam)))  # the n x n definition
    assert vendi_score(x) == pytest.approx(expected, rel=1e-10)  # computed through the d x d matrix


def test_bad_input():
    with pytest.raises(FairvisionError, match="row 2 is all zeros"):
        vendi_score([[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(FairvisionError):
        vendi_score(np.zeros((0, 3)))

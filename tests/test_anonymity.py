"""k-anonymity of released attributes (docs/METHODS.md §13.10): a hand-counted table, a brute-force count of
every attribute set on random data (a plain Python loop over rows, independent of the vectorised code), and
suppression that leaves no group below k."""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

import numpy as np
import pytest

from fairvision.errors import ParameterError
from fairvision.stats.anonymity import k_anonymity, suppression_mask

# 8 images of 6 people; gender F/M, age band a/b/c, skin 1/2 (-1: missing)
#   person: 0  0  1  2  3  4  5  5
GENDER = [0, 0, 0, 1, 1, 1, 0, 0]   # F F F M M M F F
AGE = [0, 0, 0, 1, 1, 2, 0, 0]      # a a a b b c a a
SKIN = [0, 0, 1, 0, 0, 0, 1, -1]    # 1 1 2 1 1 1 2 -
SUBJ = [0, 0, 1, 2, 3, 4, 5, 5]
LEVELS = [["F", "M"], ["a", "b", "c"], ["1", "2"]]
NAMES = ["gender", "age", "skin"]


def _codes():
    return np.array([GENDER, AGE, SKIN]).T


def test_hand_counted_groups_by_subject():
    r = k_anonymity(_codes(), LEVELS, NAMES, subjects=np.array(SUBJ), k=2)
    by = r.by_set.set_index("attributes")
    # gender: F = persons {0, 1, 5} = 3, M = {2, 3, 4} = 3
    assert by.loc["gender", "min_size"] == 3 and by.loc["gender", "n_cells_below_k"] == 0
    # age: a = {0, 1, 5} = 3, b = {2, 3} = 2, c = {4} = 1
    assert by.loc["age", "min_size"] == 1 and by.loc["age", "n_cells_below_k"] == 1
    # skin (person 5's second image has none): 1 = {0, 2, 3, 4} = 4, 2 = {1, 5} = 2
    assert by.loc["skin", "min_size"] == 2 and by.loc["skin", "n_rows"] == 7
    # gender × age × skin: F a 1 = {0}, F a 2 = {1, 5}, M b 1 = {2, 3}, M c 1 = {4}
    full = by.loc["gender × age × skin"]
    assert (full["n_cells"], full["min_size"], full["n_cells_below_k"]) == (4, 1, 2)
    v = r.violations
    got = set(zip(v["attributes"], v["values"], v["size"]))
    # gender × skin: F 1 = {0}; age × skin: a 1 = {0}, c 1 = {4}
    assert got == {("age", "c", 1), ("gender × age", "M × c", 1), ("gender × skin", "F × 1", 1),
                   ("age × skin", "a × 1", 1), ("age × skin", "c × 1", 1),
                   ("gender × age × skin", "F × a × 1", 1), ("gender × age × skin", "M × c × 1", 1)}
    assert r.min_group_size == 1 and r.n_cells_below_k == 7 and r.unit == "subjects"
    assert list(v["size"]) == sorted(v["size"])


def test_counting_images_when_there_are_no_subjects():
    r = k_anonymity(_codes(), LEVELS, NAMES, k=3)
    by = r.by_set.set_index("attributes")
    assert by.loc["gender", "min_size"] == 3  # M: 3 images
    assert by.loc["age", "min_size"] == 1 and r.unit == "images"
    assert by.loc["gender × age", "n_cells_below_k"] == 2  # M b (2 images), M c (1); F a has 5


def _brute(codes, subjects, k, max_combo):
    """Every set of attributes by a loop over rows and Python sets."""
    out = {}
    m = codes.shape[1]
    for j in range(1, max_combo + 1):
        for cols in combinations(range(m), j):
            cells = defaultdict(set)
            for r in range(codes.shape[0]):
                vals = tuple(int(codes[r, c]) for c in cols)
                if min(vals) >= 0:
                    cells[vals].add(int(subjects[r]))
            sizes = [len(s) for s in cells.values()]
            out[cols] = (len(cells), min(sizes) if sizes else None, sum(s < k for s in sizes))
    return out


@pytest.mark.parametrize("seed, max_combo", [(1, 4), (2, 2)])
def test_every_attribute_set_equals_a_brute_force_count(seed, max_combo):
    rng = np.random.default_rng(seed)
    n = 400
    codes = np.stack([rng.integers(-1, c, n) for c in (2, 3, 5, 7)], axis=1)
    subjects = rng.integers(0, 150, n)
    r = k_anonymity(codes, [[str(i) for i in range(c)] for c in (2, 3, 5, 7)], list("abcd"), subjects=subjects,
                    k=4, max_combo=max_combo)
    want = _brute(codes, subjects, 4, max_combo)
    assert len(r.by_set) == len(want)
    for row in r.by_set.itertuples():
        cols = tuple("abcd".index(a) for a in row.attributes.split(" × "))
        assert (row.n_cells, row.min_size, row.n_cells_below_k) == want[cols], row.attributes
    assert len(r.violations) == sum(v[2] for v in want.values())


def test_suppression_leaves_no_group_below_k():
    rng = np.random.default_rng(3)
    codes = np.stack([rng.integers(0, c, 300) for c in (2, 4, 6)], axis=1)
    subjects = rng.integers(0, 120, 300)
    blank = suppression_mask(codes, subjects=subjects, k=5)
    assert blank.any() and not blank.all()
    after = np.where(blank, -1, codes)
    want = _brute(after, subjects, 5, 3)
    assert all(v[2] == 0 for v in want.values())
    r = k_anonymity(after, [[str(i) for i in range(c)] for c in (2, 4, 6)], list("abc"), subjects=subjects, k=5)
    assert r.n_cells_below_k == 0 and r.min_group_size >= 5


def test_suppression_by_hand():
    # k = 2: age c (person 4) and F a 1 (person 0) are alone; blanking them can leave others alone in turn
    blank = suppression_mask(_codes(), subjects=np.array(SUBJ), k=2)
    after = np.where(blank, -1, _codes())
    assert all(v[2] == 0 for v in _brute(after, np.array(SUBJ), 2, 3).values())
    assert blank[5, 1] and blank[0, 2] and blank[1, 2]  # person 4's age c, person 0's skin 1


def test_bad_parameters():
    with pytest.raises(ParameterError, match="^k "):
        k_anonymity(_codes(), LEVELS, NAMES, k=0)
    with pytest.raises(ParameterError, match="^max_combo "):
        k_anonymity(_codes(), LEVELS, NAMES, max_combo=0)
    with pytest.raises(ParameterError, match="^names "):
        k_anonymity(_codes(), LEVELS, NAMES[:2])
    with pytest.raises(ParameterError, match="^max_combo .*20,000"):
        k_anonymity(np.zeros((3, 16), int), [["x"]] * 16, [str(i) for i in range(16)])
    with pytest.raises(ParameterError, match="^subjects "):
        k_anonymity(_codes(), LEVELS, NAMES, subjects=np.arange(3))

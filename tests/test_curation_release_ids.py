"""Pseudonyms of a release (docs/METHODS.md §13.10), vectorised: every id cell against HMAC-SHA256 computed
here with the standard library, the same id written as 7, 7.0 or "7" in different tables gets one pseudonym,
and missing ids stay missing."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pandas as pd

from fairvision.audits.curation.release import ReleaseOptions, audit_release, id_texts, pseudonymise
from fairvision.io.pseudonyms import pseudonyms

KEY = b"k" * 40


def _hmac(prefix: str, text: str) -> str:
    return prefix + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()[:16]


def test_id_texts_match_the_written_forms():
    assert id_texts(pd.Series([7.0, np.nan, 12.5])).tolist() == ["7", None, "12.5"]
    assert id_texts(pd.Series([7, 8], dtype="int64")).tolist() == ["7", "8"]
    assert id_texts(pd.Series([7, "7", 7.0, None, "a"], dtype=object)).tolist() == ["7", "7", "7", None, "a"]
    assert id_texts(pd.Series(["x", None], dtype="string")).tolist() == ["x", None]


def test_pseudonymise_equals_hmac_per_cell():
    rng = np.random.default_rng(0)
    ids = pd.Series(rng.integers(0, 500, 2000).astype(float))
    ids[rng.random(2000) < 0.1] = np.nan
    texts = id_texts(ids)
    mapping = pseudonyms(KEY, pd.unique(texts[~pd.isna(texts)]), "p_")
    got = pseudonymise(texts, mapping)
    want = [None if pd.isna(v) else _hmac("p_", str(int(v))) for v in ids]  # one cell at a time, by hand
    assert got.tolist() == want


def test_release_ids_join_across_tables(tmp_path):
    samples = pd.DataFrame({"sample_id": ["a", "b", "c"], "subject_id": [7.0, np.nan, 8.0], "gender": list("fmf")})
    subjects = pd.DataFrame({"subject_id": ["7", "8", "9"], "height": [1, 2, 3]})
    annotations = pd.DataFrame({"sample_id": ["a", "c"], "subject_id": [7, 8], "annotator_id": [1, None]})
    with np.errstate(all="ignore"):
        res = audit_release(samples.fillna({"subject_id": 9.0}), {"subjects": subjects, "annotations": annotations},
                            stage=tmp_path / "rel", key=KEY, options=ReleaseOptions(id_cols=("annotator_id",), k=2))
    t = res.tables
    assert sorted(t["samples"]["subject_id"]) == sorted(_hmac("p_", s) for s in ("7", "8", "9"))
    assert sorted(t["subjects"]["subject_id"]) == sorted(_hmac("p_", s) for s in ("7", "8", "9"))
    ann = t["annotations"].set_index("sample_id")
    assert ann.loc[_hmac("s_", "a"), "subject_id"] == _hmac("p_", "7")
    assert ann.loc[_hmac("s_", "a"), "annotator_id"] == _hmac("x_", "1")
    assert pd.isna(ann.loc[_hmac("s_", "c"), "annotator_id"])

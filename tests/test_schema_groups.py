"""Schema expansion (bins, multi-valued, hierarchy, declared categories) and group counts, by hand."""

import numpy as np
import pandas as pd
import pytest

from fairvision.errors import FairvisionError
from fairvision.groups import cross_counts, group_counts, intersection_summary, intersection_tables
from fairvision.schema import Attribute, Schema, fhibe_age_attribute


def test_fhibe_age_bins():
    df = pd.DataFrame({"age": [18, 29, 30, 45, 59, 60, 88]})
    t = group_counts(df, fhibe_age_attribute())
    assert list(t.index) == ["18-29", "30-39", "40-49", "50-59", "60+"]
    assert t["n_samples"].tolist() == [2, 1, 1, 1, 2]


def test_bins_reject_out_of_range_and_text():
    with pytest.raises(FairvisionError, match="row 1.*outside the bins"):
        group_counts(pd.DataFrame({"age": [12]}), fhibe_age_attribute())
    with pytest.raises(FairvisionError, match="row 2.*non-numeric"):
        group_counts(pd.DataFrame({"age": [20, "old"]}), fhibe_age_attribute())


def test_declared_empty_group_is_reported():
    df = pd.DataFrame({"g": ["a", "a", "b"]})
    t = group_counts(df, Attribute("g", categories=["a", "b", "c"]))
    assert t["n_samples"].tolist() == [2, 1, 0]


def test_unknown_value_names_row_and_column():
    df = pd.DataFrame({"g": ["a", "b", "zz"]})
    with pytest.raises(FairvisionError, match=r"row 3: column 'g' has unknown value 'zz'"):
        group_counts(df, Attribute("g", categories=["a", "b"]))


def test_missing_values_policies():
    df = pd.DataFrame({"g": ["a", None, "b", np.nan]})
    with pytest.raises(FairvisionError, match="row 2: column 'g' is empty"):
        group_counts(df, Attribute("g"))
    assert group_counts(df, Attribute("g", missing="drop"))["n_samples"].tolist() == [1, 1]
    kept = group_counts(df, Attribute("g", missing="keep"))
    assert kept.loc["(missing)", "n_samples"] == 2


def test_multi_valued_counts_in_each_value():
    df = pd.DataFrame({"pronoun": ["she", "he|they", "they", "she|they"], "subject_id": ["s1", "s2", "s3", "s1"]})
    t = group_counts(df, Attribute("pronoun", multi=True))
    assert t["n_samples"].to_dict() == {"he": 1, "she": 2, "they": 3}
    assert t["n_subjects"].to_dict() == {"he": 1, "she": 1, "they": 3}


def test_hierarchy_broad_value_counts_in_every_subregion():
    h = {"Africa": ["Northern Africa", "Eastern Africa", "Western Africa"], "Asia": ["Eastern Asia", "Southern Asia"]}
    df = pd.DataFrame({"anc": ["Africa", "Eastern Asia", "Northern Africa|Southern Asia"]})
    t = group_counts(df, Attribute("anc", hierarchy=h, multi=True))
    assert t["n_samples"].to_dict() == {
        "Northern Africa": 2, "Eastern Africa": 1, "Western Africa": 1, "Eastern Asia": 1, "Southern Asia": 1,
    }


def test_intersections_full_product_and_subjects():
    df = pd.DataFrame({
        "subject_id": ["p1", "p1", "p2", "p3", "p4"],
        "g": ["F", "F", "M", "F", "M"],
        "a": ["young", "young", "old", "old", "old"],
    })
    schema = Schema().add(Attribute("a", categories=["young", "old", "mid"], ordered=True))
    tabs = intersection_tables(df, ["g", "a"], schema=schema, max_k=2)
    t = tabs[("g", "a")]
    assert len(t) == 6  # 2 x 3 declared cells
    assert t.loc[("F", "young"), "n_samples"] == 2 and t.loc[("F", "young"), "n_subjects"] == 1
    assert t.loc[("M", "old"), "n_samples"] == 2
    assert t.loc[("F", "mid"), "n_samples"] == 0
    summ = intersection_summary(tabs, min_subjects=2)
    row = summ.loc["g × a"]
    assert row["n_groups"] == 6 and row["n_nonempty"] == 3
    assert row["median_images"] == 2 and row["max_images"] == 2 and row["min_images"] == 1
    assert "F × mid" in row["empty_groups"] and "M × young" in row["empty_groups"]


def test_intersection_with_multi_valued_attribute_matches_bruteforce():
    rng = np.random.default_rng(0)
    vals = ["x", "y", "z"]
    cells = ["|".join(sorted(set(rng.choice(vals, rng.integers(1, 3))))) for _ in range(200)]
    df = pd.DataFrame({"m": cells, "g": rng.choice(["F", "M"], 200)})
    t = group_counts(df, [Attribute("m", multi=True), "g"])
    brute = {}
    for cell, g in zip(df["m"], df["g"]):
        for v in cell.split("|"):
            brute[(v, g)] = brute.get((v, g), 0) + 1
    for key, n in brute.items():
        assert t.loc[key, "n_samples"] == n


def test_cross_counts():
    df = pd.DataFrame({"x": list("aab"), "y": list("uvv")})
    ct = cross_counts(df, "x", "y")
    assert ct.to_numpy().tolist() == [[1, 1], [0, 1]]


def test_schema_from_dict_roundtrip(tmp_path):
    spec = {"attributes": {"age_group": {"column": "age", "bins": [18, 30, 40, 50, 60, "inf"],
                                         "labels": ["18-29", "30-39", "40-49", "50-59", "60+"]},
                           "pronoun": {"multi": True, "categories": ["she", "he", "they"]}}}
    p = tmp_path / "schema.json"
    import json
    p.write_text(json.dumps(spec))
    s = Schema.from_file(p)
    assert s["age_group"].ordered and s["pronoun"].multi
    p.write_text("{bad json")
    with pytest.raises(FairvisionError, match="malformed JSON at line 1"):
        Schema.from_file(p)

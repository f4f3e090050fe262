"""Dates of a release (docs/METHODS.md §13.10), by hand: month and year boundaries in local time, an impossible
day that no longer changes how the other values are written, and a date-named column holding some non-dates
coarsened (non-dates blanked) instead of released at full precision."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.audits.curation.release import ReleaseOptions, audit_release, coarsen_dates
from fairvision.errors import ColumnError
from fairvision.report.sections.curation_release import release_section

KEY = b"k" * 40
VALUES = ["2021-12-31T23:59:59+05:00", "2022-01-01T00:00:00-08:00", "2023-06", "2023:12:31 23:59:59", None]


def test_boundaries_in_local_time():
    assert coarsen_dates(pd.Series(VALUES), "month")[0].tolist() == ["2021-12", "2022-01", "2023-06", "2023-12", None]
    assert coarsen_dates(pd.Series(VALUES), "year")[0].tolist() == ["2021", "2022", "2023", "2023", None]
    assert coarsen_dates(pd.Series(VALUES), "day")[0].tolist() == ["2021-12-31", "2022-01-01", "2023-06",
                                                                   "2023-12-31", None]


def test_an_impossible_day_leaves_the_other_values_alone():
    for precision in ("day", "month", "year"):
        alone = coarsen_dates(pd.Series(VALUES), precision)[0].tolist()
        out, changed, unread = coarsen_dates(pd.Series(VALUES + ["2023-02-30"]), precision)
        assert out.tolist() == alone + [None] and unread == 1  # "2023-06" stays a month, never "2023-06-01"


def test_a_date_column_with_some_non_dates_is_coarsened(tmp_path):
    data = pd.DataFrame({"sample_id": ["a", "b", "c", "d"], "g": list("xxyy"),
                         "capture_date": ["2023-06-15", "2023-02-30", "unknown", "2023-07-01 08:30"],
                         "taken": ["2023-06-15", "2023-06-16", None, "2023-06-17"]})
    r = audit_release(data, stage=tmp_path / "r", key=KEY, options=ReleaseOptions(k=2))
    out = r.tables["samples"]
    assert sorted(out["capture_date"].dropna()) == ["2023-06", "2023-07"] and out["capture_date"].isna().sum() == 2
    ch = r.changes.set_index(["column", "action"])["n_changed"]
    assert ch[("capture_date", "coarsened to the month")] == 2
    assert ch[("capture_date", "values not dates among dates: blanked")] == 2
    how = {d["column"]: d["how"] for d in r.params["date_columns"]}
    assert how == {"capture_date": "detected, values not dates blanked", "taken": "not coarsened"}
    assert "capture_date" not in r.params["attributes"]
    text = " ".join(f["sentence"] if isinstance(f, dict) else str(f) for f in release_section(r)[0].findings)
    assert "released at full precision" in text and "samples.taken" in text


def test_bad_date_col_and_attr_refused_before_any_image(tmp_path):
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    data = pd.DataFrame({"sample_id": ["a"], "subject_id": ["p"], "image_path": [str(tmp_path / "a.png")],
                         "g": ["x"], "lat": [1.0]})
    for options, message in [(ReleaseOptions(date_cols=("g",)), r"column 'g' \(--date-col\): row 1"),
                             (ReleaseOptions(attrs=("lat",)), r"--attr 'lat': not released"),
                             (ReleaseOptions(attrs=("subject_id",)), r"--attr 'subject_id': an id column")]:
        with pytest.raises(ColumnError, match=message):
            audit_release(data, stage=tmp_path / "r", key=KEY, options=options)
        assert not (tmp_path / "r" / "images").exists()  # refused before the images

"""Input checks at the io layer: two columns of the same name in any table format, and embedding rows that are
all zeros, are one-line errors naming the file, the column(s) or the row and id (and exit status 2 on the
command line)."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fairvision.cli import main
from fairvision.errors import ColumnError, InputFileError
from fairvision.io.embeddings import read_embeddings
from fairvision.io.tables import read_raw_table, read_table
from fairvision.io.validate import check_unique_columns

# ------------------------------------------------------------------ repeated column names


def _both_readers(path, match):
    for reader in (read_table, read_raw_table):
        with pytest.raises(ColumnError, match=match) as err:
            reader(path)
        assert "\n" not in str(err.value)


def test_csv_header_with_a_repeated_name(tmp_path):
    # pandas alone would read this as columns sample_id, age, gender, age.1 and carry on
    p = tmp_path / "t.csv"
    p.write_text("sample_id,age,gender,age\na,20-29,F,30-39\n")
    assert pd.read_csv(p).columns.tolist() == ["sample_id", "age", "gender", "age.1"]
    _both_readers(p, r"^.*t\.csv: column 'age' appears 2 times in the header \(columns 2 and 4\); give each column")


def test_tsv_with_several_repeated_names_names_each(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("sample_id\tg\tg\tg\tage\tage\na\t1\t2\t3\t4\t5\n")
    _both_readers(p, r"t\.tsv: columns 'g' \(columns 2, 3 and 4\), 'age' \(columns 5 and 6\) appear more than once")


def test_a_real_column_named_like_a_pandas_copy_is_fine(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("sample_id,x,x.1,,\na,1,2,,\n")  # x and x.1 are two names; empty names are pandas' Unnamed
    assert read_table(p).columns.tolist()[:3] == ["sample_id", "x", "x.1"]


def test_quoted_header_and_byte_order_mark(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes('\ufeffsample_id,"a,b","a,b"\nr,1,2\n'.encode("utf-8"))
    _both_readers(p, r"column 'a,b' appears 2 times in the header \(columns 2 and 3\)")


def test_parquet_schema_with_a_repeated_name(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table([pa.array(["a"]), pa.array([3]), pa.array([4])], names=["sample_id", "x", "x"]), p)
    _both_readers(p, r"t\.parquet: column 'x' appears 2 times in the schema \(columns 2 and 3\)")


def test_json_records_with_a_repeated_key(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('[{"sample_id": "a", "age": 1}, {"sample_id": "b", "age": 1, "age": 2}]')
    assert json.loads(p.read_text())[1] == {"sample_id": "b", "age": 2}  # what json alone does: keeps the last
    _both_readers(p, r"t\.json: record 2: key 'age' appears more than once \(two columns of the same name")
    q = tmp_path / "s.json"
    q.write_text('{"samples": [{"id": "a", "g": 1, "a": 2, "g": 3, "a": 4}]}')
    _both_readers(q, r"s\.json: record 1: keys 'g', 'a' appear more than once")


def test_jsonl_names_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"sample_id": "a", "g": 1}\n\n{"sample_id": "b", "g": 1, "g": 2}\n')
    _both_readers(p, r"t\.jsonl: line 3: key 'g' appears more than once")


def test_fairface_layout_with_a_repeated_sample_id(tmp_path):
    p = tmp_path / "ground_truth.json"
    p.write_text('{"x": {"age": "3-9"}, "y": {"age": "10-19"}, "x": {"age": "20-29"}}')
    _both_readers(p, r"ground_truth\.json: sample id 'x' appears more than once")


def test_nested_objects_may_repeat_keys_of_their_own(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('[{"sample_id": "a", "box": {"x": 1}, "meta": [{"k": 1}, {"k": 2}]}]')
    assert read_table(p)["sample_id"].tolist() == ["a"]


def test_check_unique_columns_directly():
    check_unique_columns(["a", "b", "", ""], source="s")  # empty names are not repeated names
    with pytest.raises(ColumnError, match=r"^s: column 'a' appears 3 times in the table \(columns 1, 2 and 4\)"):
        check_unique_columns(["a", "a", "b", "a"], source="s", where="table")


def test_cli_exits_2_naming_file_and_column(tmp_path, capsys):
    p = tmp_path / "dup.csv"
    p.write_text("sample_id,gender,gender\na,F,M\nb,M,F\n")
    code = main(["audit", "dataset", str(p), "-a", "gender", "--no-check-images", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and "dup.csv" in err and "'gender'" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ embeddings that are all zeros


def test_npy_zero_row_names_row_and_id(tmp_path):
    x = np.ones((4, 3), dtype=np.float32)
    x[2] = 0.0
    np.save(tmp_path / "e.npy", x)
    (tmp_path / "e.ids.txt").write_text("p\nq\nr\ns\n")
    with pytest.raises(InputFileError, match=r"e\.npy: row 3 \(id 'r'\): the embedding is all zeros; a zero vector "
                                             r"has no direction and cannot be normalised for cosine"):
        read_embeddings(tmp_path / "e.npy")
    got, ids = read_embeddings(tmp_path / "e.npy", allow_zero=True)
    assert ids == ["p", "q", "r", "s"] and np.array_equal(got, x)


def test_npz_and_table_count_every_zero_row(tmp_path):
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, -0.0]])
    np.savez(tmp_path / "e.npz", embeddings=x, ids=np.array(["a", "b", "c", "d"]))
    with pytest.raises(InputFileError, match=r"row 1 \(id 'a'\): the embedding is all zeros \(3 rows are all zeros\)"):
        read_embeddings(tmp_path / "e.npz")
    pd.DataFrame({"sample_id": ["a", "b"], "embedding": [[0.5, 0.5], [0.0, 0.0]]}).to_parquet(tmp_path / "e.parquet")
    with pytest.raises(InputFileError, match=r"e\.parquet: row 2 \(id 'b'\): the embedding is all zeros"):
        read_embeddings(tmp_path / "e.parquet")


def test_a_tiny_but_nonzero_row_is_kept(tmp_path):
    x = np.array([[1e-30, 0.0], [0.0, 1.0]])
    got, _ = read_embeddings(x)
    assert got.shape == (2, 2) and got[0, 0] > 0


def test_cli_zero_embedding_exits_2(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("sample_id,gender\na,F\nb,M\nc,F\nd,M\n")
    x = np.eye(4)[:, :3]  # row d is all zeros
    np.savez(tmp_path / "e.npz", embeddings=x, ids=np.array(["a", "b", "c", "d"]))
    code = main(["audit", "dataset", str(tmp_path / "t.csv"), "-a", "gender", "--no-check-images", "--embeddings",
                 str(tmp_path / "e.npz"), "--n-boot", "0", "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and "e.npz: row 4 (id 'd')" in err and "\n" not in err

"""WebDataset tar shards: the sample table, lazy member reads, brace/glob/folder shard lists, content hashes
equal to the extracted files', ``fairvision skin measure`` on shards equal to the same images in a folder, and
one-line errors naming the shard and member."""

import hashlib
import io
import json
import shutil
import tarfile

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main
from fairvision.datasets.demo import demo_path
from fairvision.errors import InputFileError
from fairvision.io.images import read_image
from fairvision.io.webdataset import (
    expand_braces, expand_shards, list_samples, member_sha256, parse_ref, read_member, split_key,
)

N_IMAGES = 6
GENDERS = ["female", "male", "female", "male", "female", "male"]


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _meta(i: int) -> dict:
    return {"subject_id": f"p{i // 2}", "attributes": {"gender": GENDERS[i], "age": 20 + 5 * i}}


@pytest.fixture()
def shards(tmp_path):
    """Two shards of 3 portraits each (``<key>.jpg``, ``<key>.json``, ``<key>.cls``) and the same images in a folder."""
    src = sorted((demo_path("portraits")).glob("*.jpg"))[:N_IMAGES]
    folder = tmp_path / "folder"
    folder.mkdir()
    for p in src:
        shutil.copyfile(p, folder / p.name)
    for s in range(2):
        with tarfile.open(tmp_path / f"shard-{s:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(3 * s, 3 * s + 3):
                key = src[i].stem
                _add(tf, f"{key}.json", json.dumps(_meta(i)).encode())  # metadata before the image: order is free
                _add(tf, f"{key}.jpg", src[i].read_bytes())
                _add(tf, f"{key}.cls", str(i % 2).encode())
    return {"dir": tmp_path, "src": src, "folder": folder, "pattern": str(tmp_path / "shard-{000000..000001}.tar")}


def test_brace_expansion():
    assert expand_braces("s-{000..003}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar", "s-003.tar"]
    assert expand_braces("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert expand_braces("{train,val}-{0..1}.tar") == ["train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"]
    assert expand_braces("plain.tar") == ["plain.tar"]
    with pytest.raises(InputFileError, match="cannot expand"):
        expand_braces("s-{x}.tar")


def test_split_key_follows_webdataset():
    assert split_key("abc123.jpg") == ("abc123", "jpg")
    assert split_key("train/abc.seg.png") == ("train/abc", "seg.png")
    assert split_key("a.b/c.JSON") == ("a.b/c", "json")


def test_shard_sources_agree(shards):
    d = shards["dir"]
    want = [str(d / "shard-000000.tar"), str(d / "shard-000001.tar")]
    assert expand_shards(shards["pattern"]) == want
    assert expand_shards(str(d / "shard-*.tar")) == want
    assert expand_shards(d) == want
    assert expand_shards(want[1]) == want[1:]
    with pytest.raises(InputFileError, match=r"shard-000002.tar: no such tar shard"):
        expand_shards(str(d / "shard-{000000..000002}.tar"))


def test_listing_equals_expected_table(shards):
    d, src = shards["dir"], shards["src"]
    got = list_samples(shards["pattern"])
    rows = []
    for i, p in enumerate(src):
        shard = d / f"shard-{i // 3:06d}.tar"
        blob = shard.read_bytes()
        offset = blob.find(p.read_bytes())  # independent: where the image's bytes lie in the shard
        assert offset > 0 and offset % 512 == 0
        rows.append({"sample_id": p.stem, "image_path": f"tar://{shard}#{offset}:{p.stat().st_size}/{p.name}",
                     "shard": str(shard), "member": p.name, "subject_id": f"p{i // 2}",
                     "attributes.gender": GENDERS[i], "attributes.age": 20 + 5 * i, "cls": i % 2})
    pd.testing.assert_frame_equal(got, pd.DataFrame(rows), check_dtype=False)


def test_member_bytes_image_and_hash_equal_the_files(shards):
    got = list_samples(shards["dir"])  # the folder of shards
    for ref, p in zip(got["image_path"], shards["src"]):
        raw = p.read_bytes()
        assert read_member(ref) == raw
        assert parse_ref(ref).name == p.name
        assert member_sha256(ref) == hashlib.sha256(raw).hexdigest()
        np.testing.assert_array_equal(read_image(ref), read_image(p))


def test_workers_read_members(shards):
    """The reference is a small picklable string: worker processes read and hash the bytes in place."""
    from fairvision.engine import imap

    refs = list(list_samples(shards["pattern"])["image_path"])
    got = {o.index: o.value for o in imap(member_sha256, refs, workers=2, start_method="forkserver")}
    assert [got[i] for i in range(len(refs))] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in shards["src"]]


def _write_tar(path, members):
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            _add(tf, name, data)


def test_bad_shards_are_one_line_errors(shards, tmp_path):
    jpg = shards["src"][0].read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corrupt.tar").write_bytes(b"this is not a tar file at all" * 40)
    with pytest.raises(InputFileError, match=r"corrupt.tar: not a readable tar shard"):
        list_samples(bad / "corrupt.tar")
    _write_tar(bad / "noimage.tar", [("a.jpg", jpg), ("b.json", b"{}"), ("b.cls", b"1")])
    with pytest.raises(InputFileError, match=r"noimage.tar: sample 'b' has no image member \(b.cls, b.json\)"):
        list_samples(bad / "noimage.tar")
    _write_tar(bad / "badjson.tar", [("a.jpg", jpg), ("a.json", b"{oops")])
    with pytest.raises(InputFileError, match=r"badjson.tar: member a.json: not valid JSON"):
        list_samples(bad / "badjson.tar")
    _write_tar(bad / "one.tar", [("a.jpg", jpg)])
    _write_tar(bad / "two.tar", [("c.jpg", jpg), ("a.png", jpg)])
    with pytest.raises(InputFileError, match=r"two.tar: sample key 'a' is also in .*one.tar \(member a.png\)"):
        list_samples(str(bad / "{one,two}.tar"))
    full = (bad / "one.tar").read_bytes()
    (bad / "cut.tar").write_bytes(full[:512 + len(jpg) // 2])  # header, then half the image
    with pytest.raises(InputFileError, match=r"cut.tar.*(truncated|not a readable tar)"):
        list_samples(bad / "cut.tar")
    ref = list_samples(bad / "one.tar")["image_path"].iat[0]
    (bad / "one.tar").write_bytes(full[:1024])  # the shard shrank after listing: the read names the member
    with pytest.raises(InputFileError, match=r"one.tar: member a.jpg: the shard ends inside the member"):
        read_member(ref)


@pytest.mark.vision
def test_cli_measure_shards_equals_folder(shards, tmp_path, capsys):
    store = str(tmp_path / "store")
    # -j 1: this test process has decoded images with OpenCV (threads), after which forked workers can hang;
    # worker processes reading from shards are tested in test_workers_read_members
    common = ["--method", "mean", "-j", "1", "--no-progress", "--store", store]
    out_tar, out_dir = tmp_path / "tar.parquet", tmp_path / "dir.parquet"
    assert main(["skin", "measure", shards["pattern"], "-o", str(out_tar), *common]) == 0
    assert "6 images: " in capsys.readouterr().out
    assert main(["skin", "measure", str(shards["folder"]), "-o", str(out_dir), *common]) == 0
    assert "(6 from the store)" in capsys.readouterr().out  # keyed by the bytes' hash: the folder hits the tar's results
    a, b = pd.read_parquet(out_tar), pd.read_parquet(out_dir)
    assert list(a.sample_id) == list(b.sample_id) == [p.stem for p in shards["src"]]
    assert a.ok.sum() >= 4
    cols = ["L", "a", "b", "hue", "ita", "chroma", "n_pixels", "n_faces", "ok"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert list(a["attributes.gender"]) == GENDERS and list(a["subject_id"]) == [f"p{i // 2}" for i in range(6)]
    assert a.image_path.str.startswith("tar://").all()
    # the same with no store: measured from the shards by the workers, the same numbers
    assert main(["skin", "measure", str(shards["dir"] / "shard-*.tar"), "-o", str(out_tar), "--method", "mean",
                 "-j", "1", "--no-progress", "--no-store"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out_tar)[cols], b[cols])


def test_cli_corrupt_shard_exits_2_one_line(tmp_path, capsys):
    (tmp_path / "shard-000000.tar").write_bytes(b"\x00garbage" * 100)
    code = main(["skin", "measure", str(tmp_path / "shard-{000000..000000}.tar"), "-o", str(tmp_path / "s.parquet"),
                 "--no-progress", "--no-store"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and "shard-000000.tar" in err and "\n" not in err
    assert not (tmp_path / "s.parquet").exists()
    code = main(["skin", "measure", str(tmp_path / "nope-{0..1}.tar"), "-o", str(tmp_path / "s.parquet"),
                 "--no-progress", "--no-store"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "nope-0.tar: no such tar shard" in err and "\n" not in err

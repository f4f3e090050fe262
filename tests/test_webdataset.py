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


# ------------------------------------------------------------------ regressions: sparse, changed shards, names, links


def _add_link(tf: tarfile.TarFile, name: str, target: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tf.addfile(info)


def test_sparse_members_are_refused(shards, tmp_path):
    jpg = shards["src"][0].read_bytes()
    info = tarfile.TarInfo("a.jpg")  # an old-GNU sparse header ('S'): tarfile lists it as a regular file
    info.size, info.type = len(jpg), tarfile.GNUTYPE_SPARSE
    with tarfile.open(tmp_path / "sp.tar", "w", format=tarfile.GNU_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(jpg))
    msg = r"sp.tar: member a.jpg: sparse tar members are not supported; recreate the shard without --sparse"
    with pytest.raises(InputFileError, match=msg):
        list_samples(tmp_path / "sp.tar")
    with pytest.raises(InputFileError, match=msg):  # a reference to it, however made, is refused at read time too
        read_member(f"tar://{tmp_path / 'sp.tar'}#512:{len(jpg)}/a.jpg")


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
def test_gnu_tar_sparse_shard_is_refused(shards, tmp_path):
    import subprocess

    if "GNU tar" not in subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout:
        pytest.skip("needs GNU tar")
    work = tmp_path / "sp"
    work.mkdir()
    shutil.copyfile(shards["src"][1], work / "b.jpg")
    with open(work / "a.bmp", "wb") as fh:  # a file with a 1 MiB hole: stored as a sparse member by --sparse
        fh.write(b"BM" + b"\x01" * 4094)
        fh.seek(1 << 20)
        fh.write(b"\x02" * 4096)
    for fmt in ("gnu", "posix"):
        subprocess.run(["tar", "--sparse", f"--format={fmt}", "-cf", str(tmp_path / f"{fmt}.tar"), "a.bmp", "b.jpg"],
                       cwd=work, check=True)
        with pytest.raises(InputFileError, match=rf"{fmt}.tar: member a.bmp: sparse tar members are not supported"):
            list_samples(tmp_path / f"{fmt}.tar")


def test_shard_changed_since_listing_is_an_error(shards, tmp_path):
    src = shards["src"]
    path = tmp_path / "s.tar"
    _write_tar(path, [(p.name, p.read_bytes()) for p in src[:3]])
    refs = list(list_samples(path)["image_path"])
    assert [read_member(r) for r in refs] == [p.read_bytes() for p in src[:3]]
    _write_tar(path, [(p.name, p.read_bytes()) for p in src[3:6]])  # rewritten: other images at the offsets
    for r in refs:
        with pytest.raises(InputFileError, match=r"s.tar: member .*\.jpg: shard changed since it was listed"):
            read_member(r)
    with pytest.raises(InputFileError, match="shard changed since it was listed"):
        read_image(refs[1])
    assert member_sha256(refs[0]) is None
    # same sizes, other names (the first member renamed): the name check catches it
    _write_tar(path, [("zz" + src[0].name, src[0].read_bytes())] + [(p.name, p.read_bytes()) for p in src[1:3]])
    with pytest.raises(InputFileError, match=r"changed since it was listed.*\(the header at offset 512 is of 'zz"):
        read_member(refs[0])
    assert read_member(refs[1]) == src[1].read_bytes()
    with pytest.raises(InputFileError, match="shard changed"):  # an offset that is not after a header
        read_member(refs[1].replace(f"#{parse_ref(refs[1]).offset}:", "#700:"))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_long_and_non_ascii_names_read_and_are_checked(shards, tmp_path, fmt):
    """Long names sit in GNU longname / pax headers before the member's own (cut-name) header."""
    src = shards["src"]
    long = "d/" + "x" * 90 + "/" + ("y" * 60 if fmt == tarfile.USTAR_FORMAT else "y" * 150)  # ustar: prefix + name
    names = [f"{long}/s0.jpg", f"{long}/s1é.jpg" if fmt != tarfile.USTAR_FORMAT else f"{long}/s1.jpg", "short.jpg"]
    path = tmp_path / "n.tar"
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, p in zip(names, src):
            _add(tf, name, p.read_bytes())
    got = list_samples(path)
    assert list(got["member"]) == names
    assert [parse_ref(r).name for r in got["image_path"]] == names
    assert [read_member(r) for r in got["image_path"]] == [p.read_bytes() for p in src[:3]]
    with tarfile.open(path, "w", format=fmt) as tf:  # rewritten with other sizes: every reference fails
        for name, p in zip(names, src[3:]):
            _add(tf, name, p.read_bytes())
    for r in got["image_path"]:
        with pytest.raises(InputFileError, match="shard changed since it was listed"):
            read_member(r)


def test_table_with_tar_references_reads_back(shards, tmp_path):
    from fairvision.io.tables import read_table

    listed = list_samples(shards["pattern"])
    sub = tmp_path / "sub"
    sub.mkdir()
    listed.to_csv(sub / "t.csv", index=False)
    table = read_table(sub / "t.csv")
    assert list(table["image_path"]) == list(listed["image_path"])  # not prefixed with the table's folder
    for ref, p in zip(table["image_path"], shards["src"]):
        np.testing.assert_array_equal(read_image(ref), read_image(p))


def test_compound_extensions_choose_the_image(shards, tmp_path):
    from fairvision.io.webdataset import image_extension

    assert image_extension(["json", "left.png"]) == "left.png"
    assert image_extension(["seg.png", "png", "json"]) == "png"  # whole extension first
    assert image_extension(["1.png", "0.jpg"]) == "0.jpg"  # then by the last component's order (jpg before png)
    assert image_extension(["right.png", "left.png"]) == "left.png"  # then by name
    assert image_extension(["json", "png.txt"]) is None
    a, b, c = (p.read_bytes() for p in shards["src"][:3])
    _write_tar(tmp_path / "m.tar", [("k0.left.png", a), ("k0.json", b"{\"v\": 1}"), ("x.seg.png", b), ("x.png", c),
                                    ("y.1.png", c), ("y.0.jpg", a)])
    got = list_samples(tmp_path / "m.tar")
    assert list(got["sample_id"]) == ["k0", "x", "y"]
    assert list(got["member"]) == ["k0.left.png", "x.png", "y.0.jpg"]
    assert [read_member(r) for r in got["image_path"]] == [a, c, a]
    assert got["v"].iat[0] == 1
    _write_tar(tmp_path / "none.tar", [("z.png.txt", b"hi"), ("z.json", b"{}")])
    with pytest.raises(InputFileError, match=r"sample 'z' has no image member \(z.json, z.png.txt\); an image "
                                             r"member's last extension is one of jpg, jpeg, png"):
        list_samples(tmp_path / "none.tar")


def test_links_are_resolved_or_counted(shards, tmp_path):
    a, b = (p.read_bytes() for p in shards["src"][:2])
    path = tmp_path / "l.tar"
    with tarfile.open(path, "w") as tf:
        _add(tf, "d/a.jpg", a)
        _add(tf, "d/a.json", b"{\"n\": 1}")
        _add_link(tf, "d/h.jpg", "d/a.jpg", tarfile.LNKTYPE)  # hard link: the target's bytes
        _add_link(tf, "d/h.json", "d/a.json", tarfile.LNKTYPE)
        _add_link(tf, "d/s.jpg", "../e/b.jpg", tarfile.SYMTYPE)  # symbolic link to a later member of the shard
        _add_link(tf, "d/out.jpg", "/etc/passwd.jpg", tarfile.SYMTYPE)  # outside the shard: skipped, counted
        _add(tf, "e/b.jpg", b)
    with pytest.warns(UserWarning, match=r"skipped 1 link member.*l.tar: member d/out.jpg -> /etc/passwd.jpg"):
        got = list_samples(path)
    assert got.attrs["skipped_links"] == 1
    assert list(got["sample_id"]) == ["d/a", "d/h", "d/s", "e/b"]
    assert list(got["member"]) == ["d/a.jpg", "d/h.jpg", "d/s.jpg", "e/b.jpg"]
    assert [read_member(r) for r in got["image_path"]] == [a, a, b, b]
    assert list(got["n"].iloc[:2]) == [1, 1]
    np.testing.assert_array_equal(read_image(got["image_path"].iat[1]), read_image(shards["src"][0]))


@pytest.mark.parametrize("folder", ["we#1:2", "p%23q#0:0", "x.tar#512:9"])
def test_shard_paths_with_hash_and_percent(shards, tmp_path, folder):
    d = tmp_path / folder / "in.tar#3:4"
    d.mkdir(parents=True)
    jpg = shards["src"][0].read_bytes()
    _write_tar(d / "h.tar", [("d/z.tar#1:2/q.jpg", jpg)])  # a member name with the same pattern
    ref = list_samples(d / "h.tar")["image_path"].iat[0]
    r = parse_ref(ref)
    assert (r.shard, r.size, r.name) == (str(d / "h.tar"), len(jpg), "d/z.tar#1:2/q.jpg")
    assert parse_ref(str(r)) == r
    assert read_member(ref) == jpg
    np.testing.assert_array_equal(read_image(ref), read_image(shards["src"][0]))


def test_names_with_glob_characters_and_bounded_hash_cache(shards, tmp_path, monkeypatch):
    from fairvision.io import webdataset

    jpg = shards["src"][0].read_bytes()
    for name in ("[ab].tar", "{x}.tar", "s*.tar"):
        _write_tar(tmp_path / name, [("a.jpg", jpg)])
        assert expand_shards(tmp_path / name) == [str(tmp_path / name)]
        assert list_samples(tmp_path / name)["member"].tolist() == ["a.jpg"]
    _write_tar(tmp_path / "a.tar", [("a.jpg", jpg)])  # the glob [ab].tar still matches a.tar when no such file
    assert expand_shards(str(tmp_path / "[a].tar")) == [str(tmp_path / "a.tar")]
    monkeypatch.setattr(webdataset, "HASH_CACHE_SIZE", 2)
    monkeypatch.setattr(webdataset, "_MEMBER_HASHES", webdataset.OrderedDict())
    refs = list(list_samples(shards["pattern"])["image_path"])
    want = [hashlib.sha256(p.read_bytes()).hexdigest() for p in shards["src"]]
    assert [member_sha256(r) for r in refs] == want
    assert len(webdataset._MEMBER_HASHES) == 2
    assert [member_sha256(r) for r in refs] == want


def test_a_table_of_members_passes_the_image_check_while_its_shards_exist(shards):
    from fairvision.io.tables import validate_sample_table

    df = list_samples(shards["pattern"])
    validate_sample_table(df, source="shards", check_images=True)  # the shards exist: no "image not found"
    (shards["dir"] / "shard-000001.tar").unlink()
    with pytest.raises(InputFileError, match="row 4: image not found"):
        validate_sample_table(df, source="shards", check_images=True)


def test_a_compressed_shard_says_to_decompress(tmp_path, capsys):
    gz = tmp_path / "shard-000000.tar.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00")
    assert main(["skin", "measure", str(gz), "-o", str(tmp_path / "o.csv"), "--no-store"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "decompress" in err

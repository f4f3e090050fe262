"""Image quality checks (docs/METHODS.md §13.7): Hamming search against brute force, the perceptual hash against
an independent DCT, planted duplicates across splits, unreadable files, metadata stripping, the CLI."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.fftpack
from PIL import Image

from fairvision.audits.curation.qa import audit_images, strip_metadata
from fairvision.cli import main
from fairvision.datasets import load_demo, load_portraits
from fairvision.io.metadata import strip_jpeg, strip_png
from fairvision.stats.hamming import hamming_distance, near_duplicate_pairs, popcount64
from fairvision.vision.phash import grey_thumbnail, inspect_image_file, phash_from_grey
from hash_oracles import near_hashes  # tests/ is on sys.path (pytest's prepend import mode)


def brute_pairs(h, t):
    hi = [int(x) for x in h]
    return sorted((bin(hi[a] ^ hi[b]).count("1"), a, b) for a in range(len(hi)) for b in range(a + 1, len(hi))
                  if bin(hi[a] ^ hi[b]).count("1") <= t)


def clustered_hashes(rng, n, flips=4):
    base = rng.integers(0, 2**64 - 1, size=max(1, n // 4), dtype=np.uint64, endpoint=True)
    return near_hashes(rng, base, n, flips)


@pytest.mark.parametrize("seed", range(12))
def test_near_duplicate_pairs_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, t = int(rng.integers(2, 160)), int(rng.integers(0, 16))
    h = clustered_hashes(rng, n)
    res = near_duplicate_pairs(h, t)
    assert list(zip(res["distance"], res["i"], res["j"])) == brute_pairs(h, t)


def test_threshold_boundary_and_popcount():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**64 - 1, size=1000, dtype=np.uint64, endpoint=True)
    assert popcount64(x).tolist() == [bin(int(v)).count("1") for v in x]
    a = np.uint64(0x0123456789ABCDEF)
    at_t = a ^ np.uint64(0b1111111 << 20)          # 7 bits apart
    past = a ^ np.uint64((0b1111111 << 20) | 1 << 63)  # 8 bits apart
    h = np.array([a, at_t, past], dtype=np.uint64)
    assert hamming_distance(h[0], h[1:]).tolist() == [7, 8]
    assert near_duplicate_pairs(h, 7)[["i", "j", "distance"]].values.tolist() == [[1, 2, 1], [0, 1, 7]]
    assert near_duplicate_pairs(h, 6)[["i", "j"]].values.tolist() == [[1, 2]]
    assert len(near_duplicate_pairs(h, 8)) == 3


def test_cross_split_mode():
    rng = np.random.default_rng(3)
    h = clustered_hashes(rng, 120, flips=2)
    splits = np.where(rng.random(120) < 0.7, "train", "test").astype(object)
    splits[::17] = None
    full = near_duplicate_pairs(h, 5, splits=splits)
    cross = near_duplicate_pairs(h, 5, splits=splits, cross_split_only=True)
    expect = [(d, i, j) for d, i, j in brute_pairs(h, 5)
              if splits[i] is not None and splits[j] is not None and splits[i] != splits[j]]
    assert list(zip(cross["distance"], cross["i"], cross["j"])) == expect
    assert full["cross_split"].sum() == len(expect)


def test_phash_equals_independent_dct():
    rng = np.random.default_rng(0)
    thumbs = rng.random((6, 32, 32)) * 255
    got = phash_from_grey(thumbs)
    for k in range(6):
        low = scipy.fftpack.dct(scipy.fftpack.dct(thumbs[k], axis=0), axis=1)[:8, :8]
        bits = "".join("1" if v else "0" for v in (low > np.median(low)).ravel())
        assert int(got[k]) == int(bits, 2)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """20 portraits in train; a re-encoded (JPEG q70), resized copy of one of them in test, plus problem files."""
    d = tmp_path_factory.mktemp("qa")
    df = load_portraits().head(20).assign(split="train")
    im = Image.open(df["image_path"][3]).convert("RGB")
    im.resize((460, 460), Image.BILINEAR).save(d / "planted.jpg", quality=70)
    exif = Image.Exif()
    exif[0x010F] = "Camera maker"
    exif[0x8825] = {1: "N", 2: (52.0, 22.0, 1.5), 3: "E", 4: (4.0, 53.0, 0.0)}
    Image.open(df["image_path"][8]).save(d / "gps.jpg", quality=92, exif=exif)
    raw = open(df["image_path"][5], "rb").read()
    (d / "truncated.jpg").write_bytes(raw[: len(raw) // 2])
    Image.open(df["image_path"][6]).resize((100, 120)).save(d / "small.png")
    extra = pd.DataFrame({"sample_id": ["planted", "gps", "truncated", "small"],
                          "image_path": [str(d / f) for f in ("planted.jpg", "gps.jpg", "truncated.jpg", "small.png")],
                          "split": ["test", "train", "test", "train"]})
    return d, pd.concat([df, extra], ignore_index=True)


def test_planted_duplicate_found_across_splits(planted):
    _, data = planted
    res = audit_images(data, split_col="split")
    nd = res.near_duplicates
    cross = nd[nd["cross_split"]]
    assert {(a, b) for a, b in zip(cross["sample_id_a"], cross["sample_id_b"])} == {("004", "planted")}
    assert (cross["distance"] <= 2).all()
    q = res.quantities()
    assert q["n_cross_split_duplicates"] == 1
    assert q["n_unreadable"] == 1 and q["n_low_resolution"] == 1 and q["n_with_gps"] == 1
    bad = res.images.set_index("sample_id").loc["truncated"]
    assert not bad["readable"] and "truncated" in bad["error"] and bad["image_path"].endswith("truncated.jpg")


def test_distinct_faces_not_flagged_at_default_threshold():
    """False-positive rate at the default threshold on 602 distinct photos (181,101 pairs): 0; closest pair 12 bits."""
    paths = list(load_portraits()["image_path"]) + list(load_demo()["image_path"])
    h = np.array([inspect_image_file(p)["phash"] for p in paths], dtype=np.uint64)
    assert len(near_duplicate_pairs(h, 6)) == 0
    d = hamming_distance(h[:, None], h[None, :])[np.triu_indices(len(h), 1)]
    assert d.min() >= 10


def test_strip_jpeg_gps_keeps_pixels(planted, tmp_path):
    d, _ = planted
    before = inspect_image_file(d / "gps.jpg")
    assert before["has_exif"] and before["has_gps"]
    assert strip_metadata(d / "gps.jpg", tmp_path / "clean.jpg") == "jpeg segments"
    after = inspect_image_file(tmp_path / "clean.jpg")
    assert not after["has_exif"] and not after["has_gps"]
    assert b"Camera maker" not in (tmp_path / "clean.jpg").read_bytes()
    assert np.array_equal(np.asarray(Image.open(d / "gps.jpg")), np.asarray(Image.open(tmp_path / "clean.jpg")))


def test_strip_keeps_orientation_and_png_pixels(tmp_path):
    rng = np.random.default_rng(0)
    px = rng.integers(0, 255, size=(30, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x8825] = {1: "S", 2: (10.0, 0.0, 0.0)}
    Image.fromarray(px).save(tmp_path / "rot.jpg", quality=90, exif=exif)
    strip_metadata(tmp_path / "rot.jpg", tmp_path / "rot_clean.jpg")
    info = inspect_image_file(tmp_path / "rot_clean.jpg")
    assert info["orientation"] == 6 and not info["has_gps"] and (info["width"], info["height"]) == (30, 40)
    from PIL import PngImagePlugin

    meta = PngImagePlugin.PngInfo()
    meta.add_text("Author", "someone")
    Image.fromarray(px).save(tmp_path / "a.png", pnginfo=meta)
    clean = strip_png((tmp_path / "a.png").read_bytes())
    assert b"someone" not in clean
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(clean))), px)


def test_cli_qa_end_to_end(planted, tmp_path):
    _, data = planted
    data.to_csv(tmp_path / "samples.csv", index=False)
    args = ["curate", "qa", str(tmp_path / "samples.csv"), "--split-col", "split", "-o", str(tmp_path / "out"),
            "--strip-metadata-to", str(tmp_path / "clean")]
    assert main(args) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert any("two splits" in f["sentence"] for f in doc["findings"])
    assert "<img" not in (tmp_path / "out" / "report.html").read_text()
    assert not inspect_image_file(tmp_path / "clean" / "gps.jpg")["has_gps"]
    assert main(args + ["--fail-if", "n_cross_split_duplicates>0"]) == 1
    assert main(["curate", "qa", str(tmp_path / "samples.csv"), "--split-col", "nope", "-o", str(tmp_path / "o2")]) == 2


# -- the results store (stage image_qa) ----------------------------------------------------------------------------

def _fail(*_a, **_k):
    raise AssertionError("decoded an image that is in the store")


def test_store_second_run_decodes_nothing(planted, tmp_path, monkeypatch):
    from fairvision.audits.curation import qa
    from fairvision.io.store import ResultsStore

    _, data = planted
    store = ResultsStore(tmp_path / "store")
    first = audit_images(data, split_col="split", store=store)
    assert first.n_from_cache == 0
    # every readable-bytes file is stored once, the truncated one included (its failure is a fact about the bytes)
    assert store.written == len(data)
    real = qa.inspect_image_file
    monkeypatch.setattr(qa, "inspect_image_file", _fail)
    again = audit_images(data, split_col="split", min_side=300, hamming=4, store=store)  # thresholds: not in the key
    assert again.n_from_cache == len(data) and store.written == len(data)
    monkeypatch.setattr(qa, "inspect_image_file", real)  # not undo(): that also resets conftest's store
    ref = audit_images(data, split_col="split", min_side=300, hamming=4)
    pd.testing.assert_frame_equal(again.images, ref.images)
    pd.testing.assert_frame_equal(again.near_duplicates, ref.near_duplicates)
    pd.testing.assert_frame_equal(again.exact_duplicates, ref.exact_duplicates)
    # the phash went through the store as hex and came back as the same 64-bit number
    assert again.images["phash"].tolist() == first.images["phash"].tolist()


def test_every_check_failing_is_a_table_not_a_crash(monkeypatch):
    from fairvision.audits.curation import qa

    monkeypatch.setattr(qa, "inspect_image_file", _fail)  # every worker raises
    res = audit_images(load_portraits().head(2))
    assert (~res.images["readable"]).all() and res.quantities()["n_unreadable"] == 2
    assert res.images["error"].str.contains("in the store").all() and not len(res.near_duplicates)


def test_store_changed_code_or_bytes_recomputes(tmp_path, monkeypatch):
    from fairvision.audits.curation import qa
    from fairvision.io.store import ResultsStore

    data = load_portraits().head(4)
    store = ResultsStore(tmp_path / "store")
    audit_images(data, store=store)
    assert audit_images(data, store=store).n_from_cache == 4
    monkeypatch.setattr(qa, "CACHE_VERSION", qa.CACHE_VERSION + 1)  # stands for a change of code or parameters
    assert audit_images(data, store=store).n_from_cache == 0
    assert audit_images(data, store=store).n_from_cache == 4
    # a file whose bytes changed is a different key
    Image.open(data["image_path"][0]).save(tmp_path / "copy.png")
    changed = data.assign(image_path=[str(tmp_path / "copy.png")] + data["image_path"].tolist()[1:])
    res = audit_images(changed, store=store)
    assert res.n_from_cache == 3 and res.images["readable"].all()


def test_cli_store_and_no_store(tmp_path, monkeypatch):
    from fairvision.audits.curation import qa

    data = load_portraits().head(3)
    data.to_csv(tmp_path / "s.csv", index=False)
    base = ["curate", "qa", str(tmp_path / "s.csv")]
    assert main(base + ["--no-store", "-o", str(tmp_path / "o0")]) == 0
    assert not os.path.exists(os.environ["FAIRVISION_STORE"])  # conftest's per-test store: --no-store wrote nothing
    assert main(base + ["--store", str(tmp_path / "st"), "-o", str(tmp_path / "o1")]) == 0
    assert list((tmp_path / "st" / qa.STAGE).glob("part-*.parquet"))
    real = qa.inspect_image_file
    monkeypatch.setattr(qa, "inspect_image_file", _fail)
    assert main(base + ["--store", str(tmp_path / "st"), "-o", str(tmp_path / "o2")]) == 0
    a = pd.read_csv(tmp_path / "o1" / "images.csv")
    b = pd.read_csv(tmp_path / "o2" / "images.csv")
    pd.testing.assert_frame_equal(a, b)
    monkeypatch.setattr(qa, "inspect_image_file", real)  # not undo(): that also resets conftest's store
    assert main(base + ["--store", str(tmp_path / "st"), "--no-store", "-o", str(tmp_path / "o3")]) == 2
    assert main(base + ["-o", str(tmp_path / "o4")]) == 0  # default: $FAIRVISION_STORE
    assert list((Path(os.environ["FAIRVISION_STORE"]) / qa.STAGE).glob("part-*.parquet"))


XMP_GPS = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
           b'<rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/" exif:GPSLatitude="52,22.025N" '
           b'exif:GPSLongitude="4,53.0E"/></rdf:RDF></x:xmpmeta>')
XMP_PLAIN = XMP_GPS.replace(b' exif:GPSLatitude="52,22.025N" exif:GPSLongitude="4,53.0E"', b' exif:Make="x"')


def _jpeg_with_app1_xmp(px, xmp: bytes) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    payload = b"http://ns.adobe.com/xap/1.0/\x00" + xmp
    seg = b"\xff\xe1" + len(payload + b"..").to_bytes(2, "big") + payload
    return data[:2] + seg + data[2:]  # APP1 XMP written by hand, independent of the code under test


def test_gps_in_xmp_is_flagged_and_stripped(tmp_path):
    px = np.random.default_rng(1).integers(0, 255, size=(24, 32, 3), dtype=np.uint8)
    (tmp_path / "xmp_gps.jpg").write_bytes(_jpeg_with_app1_xmp(px, XMP_GPS))
    (tmp_path / "xmp_plain.jpg").write_bytes(_jpeg_with_app1_xmp(px, XMP_PLAIN))
    from PIL import PngImagePlugin

    meta = PngImagePlugin.PngInfo()
    meta.add_itxt("XML:com.adobe.xmp", XMP_GPS.decode())
    Image.fromarray(px).save(tmp_path / "xmp_gps.png", pnginfo=meta)
    for name in ("xmp_gps.jpg", "xmp_gps.png"):
        info = inspect_image_file(tmp_path / name)
        assert info["has_xmp"] and info["has_gps"] and not info["has_exif"], name
        strip_metadata(tmp_path / name, tmp_path / f"clean_{name}")
        after = inspect_image_file(tmp_path / f"clean_{name}")
        assert not after["has_gps"] and not after["has_xmp"], name
    plain = inspect_image_file(tmp_path / "xmp_plain.jpg")
    assert plain["has_xmp"] and not plain["has_gps"]


def test_qa_cache_version_changed_for_xmp_gps():
    # stored per-image checks from before XMP GPS detection must be recomputed
    from fairvision.audits.curation import qa

    assert qa.CACHE_VERSION >= 2


def _segments(data: bytes) -> list[int]:
    """JPEG marker sequence up to the first scan, read independently of the code under test."""
    out, pos = [], 2
    while pos < len(data) and data[pos] == 0xFF:
        m = data[pos + 1]
        out.append(m)
        if m == 0xDA:
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return out


def test_jpeg_orientation_segment_follows_jfif(tmp_path):
    px = np.random.default_rng(2).integers(0, 255, size=(30, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 8
    exif[0x8825] = {1: "N", 2: (1.0, 2.0, 3.0)}
    Image.fromarray(px).save(tmp_path / "j.jpg", quality=90, exif=exif)  # Pillow writes APP0 JFIF then APP1
    assert _segments((tmp_path / "j.jpg").read_bytes())[:2] == [0xE0, 0xE1]
    strip_metadata(tmp_path / "j.jpg", tmp_path / "j_clean.jpg")
    clean = (tmp_path / "j_clean.jpg").read_bytes()
    seg = _segments(clean)
    assert seg[0] == 0xE0 and seg[1] == 0xE1 and seg.count(0xE1) == 1  # JFIF right after SOI, then orientation
    with Image.open(tmp_path / "j_clean.jpg") as im:
        assert im.getexif()[0x0112] == 8 and 0x8825 not in im.getexif()
        assert im.info.get("jfif") is not None
    # without APP0 (an EXIF-only JPEG): the orientation right after SOI
    raw = (tmp_path / "j.jpg").read_bytes()
    n0 = 4 + int.from_bytes(raw[4:6], "big")
    no_jfif = raw[:2] + raw[n0:]
    assert _segments(no_jfif)[0] == 0xE1
    out = strip_jpeg(no_jfif, orientation=3)
    assert _segments(out)[0] == 0xE1
    with Image.open(io.BytesIO(out)) as im:
        assert im.getexif()[0x0112] == 3


def test_png_orientation_kept_as_one_tag_exif(tmp_path):
    px = np.random.default_rng(3).integers(0, 255, size=(30, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "Camera maker"
    exif[0x8825] = {1: "S", 2: (10.0, 0.0, 0.0)}
    Image.fromarray(px).save(tmp_path / "r.png", exif=exif)
    assert inspect_image_file(tmp_path / "r.png")["orientation"] == 6
    strip_metadata(tmp_path / "r.png", tmp_path / "r_clean.png")
    clean = (tmp_path / "r_clean.png").read_bytes()
    assert b"Camera maker" not in clean
    info = inspect_image_file(tmp_path / "r_clean.png")
    assert info["orientation"] == 6 and not info["has_gps"] and (info["width"], info["height"]) == (30, 40)
    with Image.open(tmp_path / "r_clean.png") as im:
        assert dict(im.getexif()) == {0x0112: 6}
        assert np.array_equal(np.asarray(im.convert("RGB")), px)  # pixels unchanged (the tag is not applied)
    # eXIf right after IHDR, before IDAT; every chunk's CRC valid (checked by PIL's verify)
    types, pos = [], 8
    while pos < len(clean):
        n = int.from_bytes(clean[pos:pos + 4], "big")
        types.append(clean[pos + 4:pos + 8])
        pos += 12 + n
    assert types[:2] == [b"IHDR", b"eXIf"] and types.index(b"eXIf") < types.index(b"IDAT")
    with Image.open(tmp_path / "r_clean.png") as im:
        im.verify()
    # orientation 1: no eXIf at all
    Image.fromarray(px).save(tmp_path / "u.png", exif=Image.Exif())
    assert b"eXIf" not in strip_png((tmp_path / "u.png").read_bytes())


def test_strip_all_never_overwrites_a_copy(tmp_path):
    from fairvision.audits.curation.qa import strip_all

    px = np.random.default_rng(4).integers(0, 255, size=(8, 8, 3), dtype=np.uint8)
    paths = []
    for folder in ("a", "b", "c"):
        (tmp_path / folder).mkdir()
        Image.fromarray((px + ord(folder)).astype(np.uint8)).save(tmp_path / folder / "x.png")
        paths.append(str(tmp_path / folder / "x.png"))
    # sample 'x' of folder b: x.png is taken by folder a's file, and so is its fallback, the sample id's x.png
    images = pd.DataFrame({"sample_id": ["w", "x", "y"], "image_path": paths, "readable": True})
    out = strip_all(images, tmp_path / "out")
    names = [Path(p).name for p in out["stripped_path"]]
    assert names == ["x.png", "x-2.png", "y.png"] and len(set(names)) == 3
    for src, dst in zip(out["source"], out["stripped_path"]):
        assert np.array_equal(np.asarray(Image.open(src)), np.asarray(Image.open(dst)))


# -- a folder source with train/ and test/ subfolders; deterministic errors; relative paths ---------------------

def test_cli_qa_folder_split_from_subfolders(tmp_path, capsys):
    """`curate qa photos/ --split-col split`: the first subfolder is the split; a copy of a training photo in
    test/ is a cross-split pair; an unreadable file's error names no memory address; paths in the report are
    relative to the photos folder; width/height stay whole numbers."""
    df = load_portraits()
    photos = tmp_path / "photos"
    (photos / "train").mkdir(parents=True)
    (photos / "test").mkdir()
    for i in range(3):
        Image.open(df["image_path"][i]).save(photos / "train" / f"{i}.jpg", quality=90)
    Image.open(df["image_path"][0]).resize((400, 400)).save(photos / "test" / "0.jpg", quality=70)
    (photos / "test" / "junk.jpg").write_bytes(b"not an image at all")
    out = tmp_path / "out"
    assert main(["curate", "qa", str(photos), "--split-col", "split", "-o", str(out), "--no-store"]) == 0
    printed = capsys.readouterr().out
    assert "1 across splits" in printed and "junk.jpg" in printed and "BytesIO" not in printed
    images = pd.read_csv(out / "images.csv")
    assert dict(zip(images["sample_id"], images["split"])) == {
        "train/0": "train", "train/1": "train", "train/2": "train", "test/0": "test", "test/junk": "test"}
    junk = images.set_index("sample_id").loc["test/junk"]
    assert junk["error"] == "cannot identify image file (not an image format Pillow can decode)"
    text = (out / "report.json").read_text()
    assert "BytesIO" not in text and "test/junk.jpg" in text and str(photos / "test") not in text
    assert "0x" not in junk["error"]
    # nullable ints: 500 not 500.0 next to an unreadable file
    assert ",500,500," in (out / "images.csv").read_text()
    # no split column, no "across splits"
    assert main(["curate", "qa", str(photos / "train"), "-o", str(tmp_path / "o2"), "--no-store"]) == 0
    assert "across splits" not in capsys.readouterr().out
    # no subfolders to take a split from: exit 2 with one line
    assert main(["curate", "qa", str(photos / "train"), "--split-col", "split", "-o", str(tmp_path / "o3"),
                 "--no-store"]) == 2


def test_capture_time_read_in_the_image_pass_and_kept_in_the_store(tmp_path):
    """The EXIF DateTimeOriginal (for the time between a subject's photos, docs/METHODS.md §13.8) comes from the
    same per-image pass and is read back from the store."""
    from fairvision.io.store import ResultsStore

    ex = Image.Exif()
    ex.get_ifd(0x8769)[0x9003] = "2023:07:14 08:15:00"
    Image.new("RGB", (40, 30), "blue").save(tmp_path / "dated.jpg", exif=ex.tobytes())
    Image.new("RGB", (40, 30), "green").save(tmp_path / "plain.jpg")
    data = pd.DataFrame({"sample_id": ["dated", "plain"],
                         "image_path": [str(tmp_path / "dated.jpg"), str(tmp_path / "plain.jpg")]})
    store = ResultsStore(tmp_path / "store")
    first = audit_images(data, store=store)
    again = audit_images(data, store=store)
    assert again.n_from_cache == 2
    for res in (first, again):
        assert res.images["datetime_original"].tolist()[0] == "2023-07-14T08:15:00"
        assert pd.isna(res.images["datetime_original"].tolist()[1])

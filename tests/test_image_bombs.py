"""Decompression bombs: an image whose header declares more pixels than the limit is refused from the header,
before any pixel is decoded (files, in-memory bytes, WebDataset members); in a batch run it is one failed row with
its reason and the run goes on; the limit is raised with FAIRVISION_MAX_PIXELS or the max_pixels argument."""

import io
import os
import resource
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.io import images
from fairvision.io.images import (
    MAX_PIXELS, ImageTooLargeError, check_image_pixels, decode_image, image_size, max_image_pixels, read_image,
)
from fairvision.io.webdataset import list_samples

BOMB_SIDE = 30000  # 900 megapixels: 2.7 GB as 8-bit RGB once decoded, about 110 kB as a PNG


def png_bomb(width: int, height: int) -> bytes:
    """A valid 1-bit greyscale PNG of ``width`` x ``height`` black pixels, compressed block by block (the image
    is never held decoded while it is written)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    comp = zlib.compressobj(6)
    rows = bytes(1 + (width + 7) // 8) * 1000  # filter byte 0 + the packed row, 1000 rows at a time
    idat = [comp.compress(rows) for _ in range(height // 1000)]
    idat += [comp.compress(bytes(1 + (width + 7) // 8) * (height % 1000)), comp.flush()]
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(idat)) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bomb") / "bomb.png"
    path.write_bytes(png_bomb(BOMB_SIDE, BOMB_SIDE))
    return str(path)


@pytest.fixture()
def photo():
    return load_portraits().image_path[0]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def test_the_bomb_is_a_real_png_of_that_size(bomb):
    assert os.path.getsize(bomb) < 1_000_000
    assert image_size(Path(bomb).read_bytes()) == (BOMB_SIDE, BOMB_SIDE)
    with pytest.raises(Image.DecompressionBombError):  # Pillow alone would refuse it too, with its own traceback
        Image.open(bomb)


def test_read_image_refuses_the_bomb_from_its_header(bomb):
    before, t0 = _peak_rss_mb(), time.perf_counter()
    with pytest.raises(ImageTooLargeError) as info:
        read_image(bomb)
    assert time.perf_counter() - t0 < 5
    assert _peak_rss_mb() - before < 300  # never decoded (decoding takes 2.7 GB)
    err = info.value
    assert isinstance(err, InputFileError)  # what every per-image reader already turns into a failed row
    assert (err.width, err.height, err.limit) == (BOMB_SIDE, BOMB_SIDE, MAX_PIXELS)
    msg = str(err)
    assert msg.startswith(f"{bomb}: image of 30000 x 30000 = 900,000,000 pixels is over the limit of 250,000,000")
    assert "FAIRVISION_MAX_PIXELS" in msg and "max_pixels" in msg and "\n" not in msg


def test_in_memory_bytes_and_webdataset_members_are_checked(bomb, photo, tmp_path):
    data = Path(bomb).read_bytes()
    with pytest.raises(ImageTooLargeError, match=r"^download 7: image of 30000 x 30000"):
        decode_image(data, "download 7")
    with tarfile.open(tmp_path / "shard.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, body in (("a.png", data), ("b.jpg", Path(photo).read_bytes())):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    refs = list_samples(tmp_path / "shard.tar").set_index("sample_id")["image_path"]
    with pytest.raises(ImageTooLargeError, match=r"shard.tar.*a.png.*30000 x 30000"):
        read_image(refs["a"])
    assert np.array_equal(read_image(refs["b"]), read_image(photo))


def test_pillow_warnings_and_limit_are_left_as_they_were(bomb):
    saved = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DecompressionBombWarning (nor any other) escapes the header read
        with pytest.raises(ImageTooLargeError):
            check_image_pixels(Path(bomb).read_bytes(), bomb)
        assert check_image_pixels(png_bomb(10000, 10000), "x", max_pixels=10**9) == (10000, 10000)  # > Pillow's 89 MP
    assert Image.MAX_IMAGE_PIXELS == saved


def test_unparseable_headers_are_unreadable_not_decoded(tmp_path):
    (tmp_path / "junk.png").write_bytes(b"\x00" * 64)
    with pytest.raises(InputFileError, match=r"junk.png: not a readable image \(corrupt or unsupported format\)"):
        read_image(tmp_path / "junk.png")
    with pytest.raises(InputFileError, match=r"empty"):
        decode_image(b"", "nothing")


def test_limit_from_argument_and_environment(photo, monkeypatch):
    monkeypatch.delenv("FAIRVISION_MAX_PIXELS", raising=False)
    assert max_image_pixels() == MAX_PIXELS == 250_000_000
    reference = read_image(photo)  # 500 x 500
    with pytest.raises(ImageTooLargeError, match=r"500 x 500 = 250,000 pixels is over the limit of 249,999 pixels"):
        read_image(photo, max_pixels=249_999)
    assert np.array_equal(read_image(photo, max_pixels=250_000), reference)
    # a lower default (as for a photo above 250 MP): the environment variable raises it and the image goes through
    monkeypatch.setattr(images, "MAX_PIXELS", 100_000)
    with pytest.raises(ImageTooLargeError, match=r"over the limit of 100,000 pixels.*FAIRVISION_MAX_PIXELS"):
        read_image(photo)
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", "300_000")
    assert max_image_pixels() == 300_000
    assert np.array_equal(read_image(photo), reference)
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", "3e5")
    assert np.array_equal(read_image(photo), reference)
    assert max_image_pixels(10) == 10  # the argument wins over the environment
    for bad in ("lots", "0", "-5", "1.5", "inf"):
        monkeypatch.setenv("FAIRVISION_MAX_PIXELS", bad)
        with pytest.raises(FairvisionError, match=rf"^FAIRVISION_MAX_PIXELS='{bad}': not a positive whole number"):
            read_image(photo)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ParameterError, match=r"^max_pixels must be a positive whole number"):
            max_image_pixels(bad)


def _folder_with_bomb(bomb, photo, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(bomb, folder / "bomb.png")
    shutil.copy(photo, folder / "001.jpg")
    return folder


def _check_rows(out, folder):
    got = pd.read_csv(out).set_index("sample_id")
    assert sorted(got.index) == ["001", "bomb"]
    bad = got.loc["bomb"]
    assert not bad["ok"] and bad["flags"] == "image_too_large"
    assert bad["reason"].startswith(f"{folder / 'bomb.png'}: image of 30000 x 30000 = 900,000,000 pixels is over the")
    good = got.loc["001"]
    assert good["ok"] and np.isfinite(good["L"]) and good["n_pixels"] > 0
    return good


@pytest.mark.vision
def test_skin_measure_folder_with_a_bomb_measures_the_photo(bomb, photo, tmp_path, capsys):
    folder = _folder_with_bomb(bomb, photo, tmp_path)
    out = tmp_path / "skin.csv"
    before = _peak_rss_mb()
    code = main(["skin", "measure", str(folder), "-o", str(out), "--method", "mean", "-j", "1", "--no-progress"])
    assert code == 0
    said = capsys.readouterr().out
    assert "2 images: 1 measured" in said and "1 failed" in said
    assert _peak_rss_mb() - before < 500
    good = _check_rows(out, folder)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(photo, alone / "001.jpg")
    assert main(["skin", "measure", str(alone), "-o", str(tmp_path / "alone.csv"), "--method", "mean", "-j", "1",
                 "--no-progress", "--no-store"]) == 0
    assert pd.read_csv(tmp_path / "alone.csv").L.iat[0] == good["L"]  # the bomb beside it changes nothing


@pytest.mark.vision
def test_skin_measure_with_worker_processes(bomb, photo, tmp_path):
    """The same through the process pool (-j 2), in a fresh process: the issue's run died in a worker."""
    folder = _folder_with_bomb(bomb, photo, tmp_path)
    out = tmp_path / "skin.csv"
    code = ("import sys; from fairvision.cli import main; sys.exit(main(['skin', 'measure', sys.argv[1], '-o', "
            "sys.argv[2], '--method', 'mean', '-j', '2', '--no-progress', '--no-store']))")
    run = subprocess.run([sys.executable, "-c", code, str(folder), str(out)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "FAIRVISION_MAX_PIXELS": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "2 images: 1 measured" in run.stdout
    _check_rows(out, folder)


@pytest.mark.vision
def test_face_descriptor_records_the_bomb_as_too_large(bomb, photo):
    from fairvision.vision.face_descriptor import embed_faces

    emb = embed_faces([bomb, photo], ["bomb", "photo"])
    status = emb.status.set_index("item_id")
    reason = status.loc["bomb", "reason"]
    assert reason.startswith("image too large: ") and "900,000,000 pixels" in reason and not status.loc["bomb", "ok"]
    assert emb.ids == ["photo"]


@pytest.mark.vision
def test_a_refusal_is_not_kept_in_the_store(photo, tmp_path, monkeypatch):
    """An image refused for its size is measured once the limit is raised: the refusal is not a stored result."""
    from PIL import Image

    folder = tmp_path / "two"
    folder.mkdir()
    shutil.copy(photo, folder / "big.jpg")  # 500 x 500
    with Image.open(photo) as im:
        im.resize((400, 400)).save(folder / "small.png")
    args = ["skin", "measure", str(folder), "--method", "mean", "-j", "1", "--no-progress", "--store", str(tmp_path / "st")]
    monkeypatch.setenv("FAIRVISION_MAX_PIXELS", "200000")
    assert main([*args, "-o", str(tmp_path / "a.csv")]) == 0
    first = pd.read_csv(tmp_path / "a.csv").set_index("sample_id")
    assert first.loc["big", "flags"] == "image_too_large" and bool(first.loc["small", "ok"])
    monkeypatch.delenv("FAIRVISION_MAX_PIXELS")
    assert main([*args, "-o", str(tmp_path / "b.csv")]) == 0
    assert bool(pd.read_csv(tmp_path / "b.csv").set_index("sample_id").loc["big", "ok"])

"""Image fingerprints and file checks for image quality assurance (docs/METHODS.md §13.7).

* :func:`phash_from_grey` / :func:`phash`: the 64-bit DCT perceptual hash, vectorised over a batch: the image
  in grey (ITU-R BT.601 luma, as PIL's ``convert("L")``), shrunk to 32 x 32 with area averaging, the 2-D DCT-II
  (unnormalised, as ``scipy.fftpack.dct`` applied along both axes), the top-left 8 x 8 low frequencies (DC
  included), each bit 1 where the coefficient is above the median of those 64. The bits are packed row-major,
  the first bit most significant, into a ``uint64`` (the same bit order as the ``imagehash`` package's hex
  string, so hashes can be compared with it).
* :func:`sha256_hex`: the exact hash, SHA-256 of the file's bytes.
* :func:`inspect_image_file`: reads one file, decodes it fully (a truncated file is an error, not grey
  pixels), and returns its size, format, hashes and which metadata it carries (EXIF, GPS, XMP, ICC profile,
  comments).
* :func:`reencode_without_metadata`: the fallback of metadata stripping for formats whose metadata cannot be
  cut out byte-wise (WebP, TIFF, ...): decode and write again without it.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from fairvision.io.images import check_image_pixels

#: Side of the grey thumbnail the DCT is taken of, and side of the low-frequency block kept.
THUMB_SIDE, HASH_SIDE = 32, 8

#: EXIF tag of the GPS IFD pointer, of the orientation, and of the XMP packet inside TIFF-style EXIF.
GPS_IFD_TAG, ORIENTATION_TAG, XMP_TAG = 0x8825, 0x0112, 0x02BC


def _cv2():
    import cv2  # heavy; imported on first use

    return cv2


def _pil():
    from PIL import Image, ImageOps  # heavy-ish; imported on first use

    return Image, ImageOps


@lru_cache(maxsize=4)
def dct_matrix(n: int = THUMB_SIDE) -> np.ndarray:
    """The unnormalised DCT-II matrix ``D[k, m] = 2 cos(pi k (2m + 1) / (2n))`` (``scipy.fftpack.dct`` type 2)."""
    k = np.arange(n)[:, None]
    m = np.arange(n)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * m + 1) / (2 * n))


def grey_thumbnail(image_rgb: np.ndarray, side: int = THUMB_SIDE) -> np.ndarray:
    """An ``(side, side)`` float32 grey thumbnail: BT.601 luma (0.299 R + 0.587 G + 0.114 B), area-averaged."""
    img = np.asarray(image_rgb)
    if img.ndim == 3:
        grey = img[..., :3].astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    else:
        grey = img.astype(np.float32)
    return _cv2().resize(grey, (side, side), interpolation=_cv2().INTER_AREA)


def phash_from_grey(thumbs: np.ndarray) -> np.ndarray:
    """DCT perceptual hashes of a batch of grey thumbnails (docs/METHODS.md §13.7).

    Parameters
    ----------
    thumbs : ndarray, shape (n, 32, 32) or (32, 32)
        Grey thumbnails (any scale; :func:`grey_thumbnail` makes them).

    Returns
    -------
    ndarray of uint64, shape (n,) (a 0-d array for one thumbnail)
        Bit ``r * 8 + c`` (counted from the most significant) is 1 where DCT coefficient ``(r, c)`` of the
        top-left 8 x 8 block exceeds the block's median.
    """
    x = np.asarray(thumbs, dtype=np.float64)
    single = x.ndim == 2
    x = x[None] if single else x
    d = dct_matrix(x.shape[-1])[:HASH_SIDE]
    low = np.einsum("km,nmp,lp->nkl", d, x, d, optimize=True).reshape(len(x), -1)  # D X D^T, 8 x 8 block
    bits = low > np.median(low, axis=1, keepdims=True)
    packed = np.packbits(bits, axis=1)  # (n, 8) bytes, first bit most significant
    out = packed.view(">u8").reshape(-1).astype(np.uint64)
    return out[0] if single else out


def phash(images) -> np.ndarray:
    """DCT perceptual hashes of RGB (or grey) images, ``uint64`` (docs/METHODS.md §13.7)."""
    return phash_from_grey(np.stack([grey_thumbnail(im) for im in images])) if len(images) else np.zeros(0, np.uint64)


def hash_hex(h) -> str:
    """A 64-bit hash as 16 hex digits (imagehash's notation)."""
    return f"{int(h):016x}"


def sha256_hex(data: bytes) -> str:
    """SHA-256 of bytes, hex."""
    return hashlib.sha256(data).hexdigest()


def _xmp_has_gps(packet) -> bool:
    """Whether an XMP packet (bytes or str) holds a GPS position: ``exif:GPSLatitude`` or ``GPSLongitude``, as an
    element or an attribute (docs/METHODS.md §13.7)."""
    if isinstance(packet, str):
        packet = packet.encode("utf-8", "replace")
    if not isinstance(packet, (bytes, bytearray)):
        return False
    return b"GPSLatitude" in packet or b"GPSLongitude" in packet


def _metadata(im) -> dict:
    """Which metadata a PIL image carries."""
    info = im.info or {}
    exif = im.getexif()
    has_exif = bool(len(exif)) or bool(info.get("exif"))
    gps = False
    if GPS_IFD_TAG in exif:
        try:
            gps = bool(exif.get_ifd(GPS_IFD_TAG))
        except Exception:  # noqa: BLE001 - a damaged GPS IFD still counts as present
            gps = True
    packets = [info.get("xmp"), info.get("XML:com.adobe.xmp"), exif.get(XMP_TAG)]
    xmp = any(bool(x) for x in packets)
    gps = gps or any(_xmp_has_gps(x) for x in packets if x)
    comment = bool(info.get("comment") or any(k in info for k in ("Comment", "Description", "Author", "Title")))
    return {"has_exif": has_exif, "has_gps": gps, "has_xmp": xmp, "has_icc": bool(info.get("icc_profile")),
            "has_comment": comment, "orientation": int(exif.get(ORIENTATION_TAG, 1) or 1)}


def inspect_image_file(path: str | os.PathLike) -> dict:
    """Read, fully decode and fingerprint one image file (docs/METHODS.md §13.7).

    Returns
    -------
    dict
        ``readable`` (bool), ``error`` (one line or None), ``n_bytes``, ``sha256`` (None when the file cannot
        be read), ``format``, ``width``, ``height`` (after the EXIF orientation), ``phash`` (uint64 as int, None
        when unreadable) and the metadata flags ``has_exif``, ``has_gps``, ``has_xmp``, ``has_icc``,
        ``has_comment``, ``orientation``. A file that does not decode completely (truncated, corrupt) is
        ``readable=False`` with PIL's message; it is never hashed from partly grey pixels.
    """
    Image, ImageOps = _pil()
    out: dict = {"readable": False, "error": None, "n_bytes": None, "sha256": None, "format": None, "width": None,
                 "height": None, "phash": None, "has_exif": False, "has_gps": False, "has_xmp": False,
                 "has_icc": False, "has_comment": False, "orientation": 1}
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        out["error"] = "no such file"
        return out
    except IsADirectoryError:
        out["error"] = "is a folder, not an image file"
        return out
    except OSError as exc:
        out["error"] = f"cannot read: {exc.strerror or exc}"
        return out
    out["n_bytes"] = len(data)
    out["sha256"] = sha256_hex(data)
    if not data:
        out["error"] = "the file is empty"
        return out
    try:
        check_image_pixels(data, "image")
        with Image.open(io.BytesIO(data)) as im:
            out["format"] = im.format
            out.update(_metadata(im))
            im.load()  # decode every pixel: a truncated file raises here
            im = ImageOps.exif_transpose(im)
            out["width"], out["height"] = im.size
            grey = np.asarray(im.convert("L"), dtype=np.float32)
    except Exception as exc:  # noqa: BLE001 - every decoder failure is a finding about the file
        out["error"] = decoder_message(exc)
        return out
    out["readable"] = True
    out["phash"] = int(phash_from_grey(grey_thumbnail(grey)))
    return out


def decoder_message(exc: BaseException) -> str:
    """One deterministic line for a decoder failure: Pillow's message without the in-memory buffer's address
    (``cannot identify image file <_io.BytesIO object at 0x...>`` becomes ``cannot identify image file (not an
    image format Pillow can decode)``); the file's path goes next to it, not into it (a stored check is shared by
    every copy of the same bytes)."""
    msg = " ".join(str(exc).split())
    msg = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", msg).strip()
    if msg == "cannot identify image file":
        msg += " (not an image format Pillow can decode)"
    return msg or type(exc).__name__


def reencode_without_metadata(data: bytes) -> tuple[bytes, str]:
    """Decode image bytes and write them again in the same format without EXIF, XMP or comments.

    The EXIF orientation is applied to the pixels first (the tag is gone afterwards); an ICC profile is kept
    (it defines the colours, not the person). Lossless where the format allows it (PNG, TIFF with LZW, WebP
    lossless, BMP); JPEG is written at quality 95. Returns the bytes and a short description of what was done.
    """
    Image, ImageOps = _pil()
    check_image_pixels(data, "image")
    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format or "PNG"
        icc = im.info.get("icc_profile")
        im.load()
        im = ImageOps.exif_transpose(im)
        clean = im.copy()
        clean.info = {}
    buf = io.BytesIO()
    kw: dict = {"icc_profile": icc} if icc else {}
    how = "re-encoded losslessly"
    if fmt == "WEBP":
        kw["lossless"] = True
    elif fmt == "TIFF":
        kw["compression"] = "tiff_lzw"
    elif fmt == "JPEG":
        kw["quality"] = 95
        how = "re-encoded at JPEG quality 95"
    elif fmt not in ("PNG", "BMP", "GIF"):
        fmt, how = "PNG", "re-encoded losslessly as PNG"
    clean.save(buf, format=fmt, **kw)
    return buf.getvalue(), how

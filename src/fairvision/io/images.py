"""Read images as RGB arrays and write PNGs (QA overlays), fast and safely.

Decoding uses OpenCV's ``cv2.imdecode`` on the file's bytes: on the bundled
500 x 500 portraits it takes about 0.8 ms per image against 2.4 ms for
``PIL.Image.open`` + ``ImageOps.exif_transpose`` + ``convert("RGB")`` (same
pixels; measured on this machine), and it applies the EXIF orientation tag
like PIL's ``exif_transpose``. Reading the bytes ourselves (``np.fromfile``)
lets a missing file and a corrupt file get different one-line messages.

Decompression bombs: before any pixel is decoded, the image's width and height
are read from its header (``PIL.Image.open`` parses only the header) and an
image of more than :data:`MAX_PIXELS` pixels (or ``$FAIRVISION_MAX_PIXELS``, or
the ``max_pixels`` argument) is refused with :class:`ImageTooLargeError`. A
2.7 MB PNG can declare 30000 x 30000 pixels (2.7 GB once decoded). Bytes whose
header Pillow cannot parse are refused too: their size cannot be known before
decoding. The same check applies to files and to in-memory bytes
(:func:`decode_image`: WebDataset members, downloaded images).
"""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path

import numpy as np

from fairvision.errors import InputFileError, ParameterError
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.limits import MAX_PIXELS_ENV, env_max_pixels
from fairvision.io.suffixes import IMAGE_SUFFIXES  # noqa: F401 - also a public name here


#: The most pixels (width x height) one image may have; checked from the header, before decoding. Generous for
#: real photos: the largest phone sensors give 16384 x 12288 = 201 megapixels, medium-format cameras 100-150;
#: decoded as 8-bit RGB, 250 megapixels take 750 MB. Raise it with the environment variable
#: ``FAIRVISION_MAX_PIXELS`` or the ``max_pixels`` argument of :func:`read_image` / :func:`decode_image`.
MAX_PIXELS = 250_000_000
# MAX_PIXELS_ENV (imported above) names the environment variable that overrides MAX_PIXELS; it is parsed by
# fairvision.io.limits.env_max_pixels, without numpy, so that the CLI can check it at start-up.

_PIL_LIMIT_LOCK = threading.Lock()


class ImageTooLargeError(InputFileError):
    """An image whose header declares more pixels than the limit (a possible decompression bomb); never decoded."""

    def __init__(self, where, width: int, height: int, limit: int):
        self.width, self.height, self.limit = int(width), int(height), int(limit)
        super().__init__(
            f"{where}: image of {self.width} x {self.height} = {self.width * self.height:,} pixels is over the limit "
            f"of {self.limit:,} pixels (a possible decompression bomb; not decoded); if the image is genuine, raise "
            f"the limit with the environment variable {MAX_PIXELS_ENV} (or the max_pixels argument)"
        )


def max_image_pixels(max_pixels: int | None = None) -> int:
    """The pixel limit in force: ``max_pixels`` when given, else ``$FAIRVISION_MAX_PIXELS``, else :data:`MAX_PIXELS`.

    Raises
    ------
    ParameterError
        ``max_pixels`` is not a positive whole number.
    FairvisionError
        The environment variable is set to something other than a positive whole number.
    """
    if max_pixels is not None:
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
            raise ParameterError("max_pixels", f"must be a positive whole number of pixels, not {max_pixels!r}")
        return int(max_pixels)
    from_env = env_max_pixels()
    return MAX_PIXELS if from_env is None else from_env


def image_size(data) -> tuple[int, int] | None:
    """``(width, height)`` from the header of encoded image bytes, without decoding a pixel; None when Pillow
    cannot parse the header (not an image, or a format it does not know)."""
    from PIL import Image  # lazy: about 50 ms (measured), paid only by commands that decode images

    with _PIL_LIMIT_LOCK:
        # Pillow's own bomb check (a warning above 89 MP, an error above 179 MP) would fire on the header; our
        # limit replaces it, so it is switched off for this header read only.
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            with Image.open(io.BytesIO(data)) as im:
                width, height = im.size
        except Exception:  # noqa: BLE001 - any header Pillow cannot parse: the caller says the image is unreadable
            return None
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    return int(width), int(height)


def check_image_pixels(data, where, *, max_pixels: int | None = None) -> tuple[int, int] | None:
    """Refuse encoded image bytes whose header declares more pixels than the limit (:func:`max_image_pixels`).

    Returns the header's ``(width, height)``, or None when Pillow cannot parse the header. Raises
    :class:`ImageTooLargeError` (an :class:`~fairvision.errors.InputFileError` naming ``where``) when over.
    """
    limit = max_image_pixels(max_pixels)
    size = image_size(data)
    if size is not None and size[0] * size[1] > limit:
        raise ImageTooLargeError(where, size[0], size[1], limit)
    return size


def _webdataset():
    from fairvision.io import webdataset  # lazy: it imports pandas (0.2 s, measured), which a file does not need

    return webdataset


def _is_member_ref(path) -> bool:
    """Whether ``path`` is a WebDataset tar member reference (:func:`fairvision.io.webdataset.is_member_ref`),
    without importing that module for a plain path: before it is imported no ``MemberRef`` exists, and a
    reference string starts with ``tar:``."""
    if "fairvision.io.webdataset" not in sys.modules and not (isinstance(path, str) and path.startswith("tar:")):
        return False
    return _webdataset().is_member_ref(path)


def _cv2():
    import cv2  # lazy: about 0.25 s (measured), paid only by commands that decode images

    return cv2


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """Scale a decoded array of any depth to uint8 with rounding."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == np.uint16:
        # 65535 -> 255 exactly; x / 257 rounded is the inverse of 8->16 bit replication (x * 257)
        return ((arr.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if np.issubdtype(arr.dtype, np.floating):
        return np.clip(np.rint(np.nan_to_num(arr.astype(np.float32)) * 255.0), 0, 255).astype(np.uint8)
    info = np.iinfo(arr.dtype)
    scaled = (arr.astype(np.float64) - info.min) / (info.max - info.min) * 255.0
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def read_image(path: str | os.PathLike, *, max_side: int | None = None, max_pixels: int | None = None) -> np.ndarray:
    """Read an image file as an ``(H, W, 3)`` uint8 RGB array.

    Parameters
    ----------
    path : path-like
        Any format OpenCV decodes (JPEG, PNG, BMP, WebP, TIFF, ...), or a tar
        member reference ``tar://<shard>#<offset>:<size>/<member>``
        (:mod:`fairvision.io.webdataset`), read in place from the shard.
    max_side : int, optional
        If given and the longer side exceeds it, the image is downscaled with
        area interpolation so that the longer side equals ``max_side``.
    max_pixels : int, optional
        The most pixels (width x height) the image may have, checked from its
        header before decoding; default ``$FAIRVISION_MAX_PIXELS`` or
        :data:`MAX_PIXELS` (250 megapixels).

    Returns
    -------
    numpy.ndarray
        ``(H, W, 3)`` uint8, RGB channel order, EXIF orientation applied.
        Greyscale images are replicated to three channels, the alpha channel
        of RGBA images is dropped (no compositing), and 16-bit images are
        scaled to 8 bits with rounding (``round(x / 257)``). Floating-point
        images are taken to lie in [0, 1].

    Raises
    ------
    InputFileError
        The file does not exist, is a folder, cannot be read, or does not
        decode as an image; the message names the path.
        :class:`ImageTooLargeError` (a subclass) when its header declares
        more pixels than the limit.
    """
    if _is_member_ref(path):  # a WebDataset tar member: its bytes, read at their offset in the shard
        wds = _webdataset()
        p = wds.parse_ref(path).label
        data = np.frombuffer(wds.read_member(path), dtype=np.uint8)
    else:
        p = Path(path)
        try:
            data = np.fromfile(p, dtype=np.uint8)
        except FileNotFoundError:
            raise InputFileError(f"{p}: no such image file") from None
        except IsADirectoryError:
            raise InputFileError(f"{p}: is a folder, not an image file") from None
        except OSError as exc:
            raise InputFileError(f"{p}: cannot read image: {exc.strerror or exc}") from None
    return decode_image(data, p, max_side=max_side, max_pixels=max_pixels)


def decode_image(data, where, *, max_side: int | None = None, max_pixels: int | None = None) -> np.ndarray:
    """Decode encoded image bytes (a file's, a WebDataset member's, a download's) as :func:`read_image` does.

    ``where`` names the image in error messages (a path or a label). The pixel count is checked from the
    header first (:func:`check_image_pixels`); bytes whose header Pillow cannot parse are refused as unreadable,
    since their size cannot be known before decoding.
    """
    data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if data.size == 0:
        raise InputFileError(f"{where}: the image file is empty")
    limit = max_image_pixels(max_pixels)
    if check_image_pixels(data, where, max_pixels=limit) is None:
        raise InputFileError(f"{where}: not a readable image (corrupt or unsupported format)")
    cv2 = _cv2()
    arr = cv2.imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    if arr is None or arr.ndim != 3 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputFileError(f"{where}: not a readable image (corrupt or unsupported format)")
    if arr.shape[0] * arr.shape[1] > limit:  # a header that understated the size: refused all the same
        raise ImageTooLargeError(where, arr.shape[1], arr.shape[0], limit)
    arr = _to_uint8(arr)
    if max_side is not None and max(arr.shape[:2]) > max_side:
        arr = downscale(arr, max_side)
    return cv2.cvtColor(arr, cv2.COLOR_BGR2RGB)


def downscale(image: np.ndarray, max_side: int) -> np.ndarray:
    """Shrink ``image`` (area interpolation) so its longer side is at most ``max_side``."""
    h, w = image.shape[:2]
    scale = max_side / max(h, w)
    if scale >= 1:
        return image
    cv2 = _cv2()
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def encode_png(image_rgb: np.ndarray) -> bytes:
    """PNG bytes of an ``(H, W, 3)`` uint8 RGB (or ``(H, W)`` grey / bool) array."""
    cv2 = _cv2()
    arr = np.asarray(image_rgb)
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    if arr.ndim == 3:
        arr = cv2.cvtColor(np.ascontiguousarray(arr, dtype=np.uint8), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(arr, dtype=np.uint8))
    if not ok:  # pragma: no cover - OpenCV fails only on impossible shapes
        raise InputFileError("cannot encode the image as PNG")
    return buf.tobytes()


def write_png(path: str | os.PathLike, image_rgb: np.ndarray) -> Path:
    """Write an RGB (or grey / boolean mask) array as a PNG, atomically."""
    return atomic_write_bytes(path, encode_png(image_rgb))

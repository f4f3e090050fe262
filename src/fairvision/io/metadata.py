"""Image metadata removed byte-wise: JPEG segments and PNG chunks (docs/METHODS.md §13.7).

:func:`strip_jpeg` and :func:`strip_png` drop EXIF (GPS included), XMP, IPTC, maker data, comments and text
chunks, and copy every other byte unchanged (the compressed pixels, the ICC profile); an orientation other than 1
is kept as a one-tag EXIF block so the image still displays upright. No decoding: the pixels stay identical.
"""

from __future__ import annotations

import struct
import zlib

from fairvision.errors import InputFileError

#: JPEG markers kept by the byte-wise strip: APP0 (JFIF), APP2 only when it holds an ICC profile, APP14 (Adobe
#: colour transform); every other APPn (EXIF, XMP, IPTC, maker data) and COM are dropped.
JPEG_APP0, JPEG_APP2, JPEG_APP14 = 0xE0, 0xE2, 0xEE
#: PNG chunks dropped by the byte-wise strip (the rest, including iCCP, sRGB, gAMA, pHYs, are kept); an
#: orientation other than 1 comes back as a one-tag eXIf chunk.
PNG_DROP = {b"eXIf", b"tEXt", b"zTXt", b"iTXt", b"tIME"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _orientation_tiff(orientation: int) -> bytes:
    """A minimal EXIF (TIFF) block holding only the orientation tag (big-endian, one IFD entry)."""
    return (b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1)
            + struct.pack(">HHIHH", 0x0112, 3, 1, int(orientation), 0) + struct.pack(">I", 0))


def _jpeg_orientation_app1(orientation: int) -> bytes:
    """A minimal APP1 EXIF segment holding only the orientation tag."""
    payload = b"Exif\x00\x00" + _orientation_tiff(orientation)
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def _png_orientation_exif(orientation: int) -> bytes:
    """A PNG ``eXIf`` chunk holding only the orientation tag."""
    body = _orientation_tiff(orientation)
    return struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body) & 0xFFFFFFFF)


def strip_jpeg(data: bytes, *, orientation: int = 1) -> bytes:
    """A JPEG without EXIF, XMP, IPTC, maker segments or comments; the compressed pixels copied unchanged
    (docs/METHODS.md §13.7). Kept: JFIF (APP0), an ICC profile (APP2 ``ICC_PROFILE``), Adobe (APP14), the
    tables, frames and scans; bytes after the end-of-image marker are dropped. An orientation other than 1 is
    kept as a one-tag EXIF segment, so the image still displays upright; it follows the JFIF APP0 segment when
    there is one (JFIF requires APP0 right after the start of image), else the start of image."""
    if data[:2] != b"\xff\xd8":
        raise InputFileError("not a JPEG (no start-of-image marker)")
    out = [b"\xff\xd8"]
    pending = _jpeg_orientation_app1(orientation) if orientation not in (0, 1) else None
    pos, n = 2, len(data)
    while pos < n:
        if data[pos] != 0xFF:
            raise InputFileError(f"corrupt JPEG: no marker at byte {pos}")
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            break
        marker = data[pos]
        pos += 1
        if marker == 0xD9:  # EOI
            out.append(b"\xff\xd9")
            return b"".join(out)
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            if pending is not None:
                out.append(pending)
                pending = None
            out.append(bytes([0xFF, marker]))
            continue
        if pos + 2 > n:
            raise InputFileError("corrupt JPEG: truncated segment")
        length = struct.unpack(">H", data[pos:pos + 2])[0]
        seg = data[pos - 2:pos + length]
        body = data[pos + 2:pos + length]
        keep = not (0xE0 <= marker <= 0xEF or marker == 0xFE)
        keep |= marker == JPEG_APP0 or marker == JPEG_APP14 or (marker == JPEG_APP2 and body.startswith(b"ICC_PROFILE\x00"))
        if keep:
            if pending is not None and marker != JPEG_APP0:
                out.append(pending)  # no JFIF segment first: the orientation right after the start of image
                pending = None
            out.append(seg)
            if pending is not None:
                out.append(pending)  # after the JFIF APP0 segment
                pending = None
        pos += length
        if marker == 0xDA:  # start of scan: copy the entropy-coded data up to the next real marker
            end = pos
            while True:
                end = data.find(b"\xff", end)
                if end < 0 or end + 1 >= n:
                    end = n
                    break
                nxt = data[end + 1]
                if nxt == 0x00 or 0xD0 <= nxt <= 0xD7 or nxt == 0xFF:
                    end += 1 if nxt == 0xFF else 2
                    continue
                break
            out.append(data[pos:end])
            pos = end
    raise InputFileError("corrupt JPEG: no end-of-image marker")


def strip_png(data: bytes, *, orientation: int = 1) -> bytes:
    """A PNG without eXIf, tEXt, zTXt, iTXt and tIME chunks; every other chunk copied unchanged
    (docs/METHODS.md §13.7). Bytes after IEND are dropped. An orientation other than 1 is kept as a one-tag
    ``eXIf`` chunk right after IHDR (before the image data, as the PNG specification requires), as
    :func:`strip_jpeg` does, so the image still displays upright."""
    if not data.startswith(PNG_SIGNATURE):
        raise InputFileError("not a PNG (no signature)")
    out = [PNG_SIGNATURE]
    pending = _png_orientation_exif(orientation) if orientation not in (0, 1) else None
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise InputFileError("corrupt PNG: truncated chunk")
        if ctype not in PNG_DROP:
            out.append(data[pos:end])
        if pending is not None and ctype == b"IHDR":
            out.append(pending)
            pending = None
        pos = end
        if ctype == b"IEND":
            return b"".join(out)
    raise InputFileError("corrupt PNG: no IEND chunk")

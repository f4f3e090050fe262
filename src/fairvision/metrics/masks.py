"""Masks: COCO run-length encoding, polygon rasterisation, mask IoU and Dice/F1 over categories.

COCO RLE (as pycocotools, which is not a dependency): a binary mask of size
``[h, w]`` is flattened in column-major (Fortran) order and stored as run
lengths that start with a run of zeros (possibly empty). The compressed string
form stores each count (after the third, as the difference to the count two
before) in 5-bit groups offset by ASCII 48, with bit 0x20 meaning "more" and
bit 0x10 the sign, exactly as ``rleToString`` / ``rleFrString`` in the COCO API.

FHIBE metrics (docs/METHODS.md §6.1): mask IoU for segmentation recall, mean
F1 (Dice) over mask categories for face parsing, Dice for annotation agreement.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from fairvision.errors import FairvisionError


def _counts_from_string(s: str) -> list[int]:
    counts: list[int] = []
    p = 0
    data = s.encode("ascii") if isinstance(s, str) else bytes(s)
    n = len(data)
    while p < n:  # loops over characters of a short string, not over pixels
        x = 0
        k = 0
        more = True
        while more:
            if p >= n:
                raise FairvisionError("RLE string ends in the middle of a count")
            c = data[p] - 48
            if c < 0 or c > 63:
                raise FairvisionError(f"RLE string has an invalid character {chr(data[p])!r}")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def _counts_to_string(counts: Sequence[int]) -> str:
    out = bytearray()
    cnts = [int(c) for c in counts]
    for i, c in enumerate(cnts):
        x = c - cnts[i - 2] if i > 2 else c
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = (x != -1) if (ch & 0x10) else (x != 0)
            if more:
                ch |= 0x20
            out.append(ch + 48)
    return out.decode("ascii")


def rle_encode(mask, *, compressed: bool = True) -> dict:
    """COCO RLE of a binary mask (H, W): ``{"size": [h, w], "counts": str or list}``.

    Parameters
    ----------
    mask : array_like, shape (H, W)
        Non-zero pixels are foreground.
    compressed : bool
        Encode the counts as COCO's compressed string (default) or keep the list.

    Returns
    -------
    dict
        ``size`` and ``counts``, as pycocotools writes them.
    """
    m = np.asarray(mask)
    if m.ndim != 2:
        raise FairvisionError(f"rle_encode: expected a 2-D mask, got shape {m.shape}")
    flat = m.astype(bool).ravel(order="F")
    if flat.size == 0:
        counts: list[int] = []
    else:
        change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
        bounds = np.concatenate([[0], change, [flat.size]])
        counts = np.diff(bounds).tolist()
        if flat[0]:
            counts = [0] + counts
    return {"size": [int(m.shape[0]), int(m.shape[1])], "counts": _counts_to_string(counts) if compressed else counts}


def rle_decode(rle: Mapping) -> np.ndarray:
    """Binary mask (H, W) of a COCO RLE dict with ``size`` and ``counts`` (list or compressed string).

    Parameters
    ----------
    rle : mapping
        ``{"size": [h, w], "counts": list or str}``.

    Returns
    -------
    numpy.ndarray of bool, shape (h, w)

    Raises
    ------
    FairvisionError
        A malformed RLE (bad characters, negative runs, or runs that do not add up to h * w).
    """
    try:
        h, w = (int(v) for v in rle["size"])
        counts = rle["counts"]
    except (KeyError, TypeError, ValueError):
        raise FairvisionError("RLE must be an object with 'size': [h, w] and 'counts'") from None
    if isinstance(counts, (str, bytes)):
        counts = _counts_from_string(counts)
    c = np.asarray(counts, dtype=np.int64)
    if np.any(c < 0):
        raise FairvisionError("RLE has a negative run length")
    if c.sum() != h * w:
        raise FairvisionError(f"RLE run lengths sum to {int(c.sum())}, not h*w = {h * w}")
    flat = np.repeat((np.arange(c.size) % 2).astype(bool), c)
    return flat.reshape((w, h)).T.copy()


def polygons_to_mask(polygons, height: int, width: int) -> np.ndarray:
    """Rasterise COCO polygons ``[[x1, y1, x2, y2, ...], ...]`` into a binary mask (H, W).

    A pixel is inside when its centre ``(col + 0.5, row + 0.5)`` is inside a
    polygon by the even-odd rule, with half-open edges (a centre exactly on a
    left or top edge is inside, on a right or bottom edge outside, so polygons
    that tile the plane never share a pixel); several polygons are united. Vectorised over
    rows x edges (scanline crossings). pycocotools rasterises boundary pixels
    slightly differently (by up-sampling), so masks can differ by about one
    pixel along the outline.

    Parameters
    ----------
    polygons : sequence of sequences of float
        COCO polygons ``[[x1, y1, x2, y2, ...], ...]`` (one flat polygon is accepted too).
    height, width : int
        Mask size.

    Returns
    -------
    numpy.ndarray of bool, shape (height, width)
    """
    mask = np.zeros((height, width), dtype=bool)
    if isinstance(polygons, np.ndarray) or (polygons and not isinstance(polygons[0], (list, tuple, np.ndarray))):
        polygons = [polygons]
    yc = np.arange(height) + 0.5
    for poly in polygons:
        p = np.asarray(poly, dtype=float).ravel()
        if p.size < 6 or p.size % 2:
            raise FairvisionError(f"polygon needs at least 3 (x, y) points, got {p.size} numbers")
        x, y = p[0::2], p[1::2]
        x2, y2 = np.roll(x, -1), np.roll(y, -1)
        # edge crosses the scanline when y is in [min, max) of its endpoints
        lo, hi = np.minimum(y, y2), np.maximum(y, y2)
        cross = (yc[:, None] >= lo[None, :]) & (yc[:, None] < hi[None, :])
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (yc[:, None] - y[None, :]) / (y2 - y)[None, :]
        xi = x[None, :] + t * (x2 - x)[None, :]
        r, e = np.nonzero(cross)
        first = np.clip(np.ceil(xi[r, e] - 0.5).astype(np.int64), 0, width)
        toggles = np.zeros((height, width + 1), dtype=np.int64)
        np.add.at(toggles, (r, first), 1)
        inside = (np.cumsum(toggles, axis=1)[:, :width] % 2).astype(bool)
        mask |= inside
    return mask


def segmentation_to_mask(segmentation, height: int, width: int) -> np.ndarray:
    """Mask of a COCO ``segmentation``: polygons, uncompressed RLE or compressed RLE.

    Parameters
    ----------
    segmentation : list or mapping
        COCO polygons, or an RLE dict.
    height, width : int
        Image size; an RLE of another size is an error.

    Returns
    -------
    numpy.ndarray of bool, shape (height, width)
    """
    if isinstance(segmentation, Mapping):
        m = rle_decode(segmentation)
        if m.shape != (height, width):
            raise FairvisionError(f"RLE size {list(m.shape)} differs from the image size {[height, width]}")
        return m
    return polygons_to_mask(segmentation, height, width)


def mask_iou(masks1, masks2) -> np.ndarray:
    """Pairwise IoU of binary masks: (N, H, W) x (M, H, W) -> (N, M), one matrix product.

    Parameters
    ----------
    masks1, masks2 : array_like, shape (N, H, W) and (M, H, W)
        Binary masks of the same size (a single (H, W) mask is accepted).

    Returns
    -------
    numpy.ndarray, shape (N, M)
        0 where the union is empty.
    """
    a = np.asarray(masks1, dtype=bool)
    b = np.asarray(masks2, dtype=bool)
    a = a[None] if a.ndim == 2 else a
    b = b[None] if b.ndim == 2 else b
    if a.shape[1:] != b.shape[1:]:
        raise FairvisionError(f"mask_iou: mask sizes differ: {a.shape[1:]} vs {b.shape[1:]}")
    fa = a.reshape(a.shape[0], -1).astype(np.float64)
    fb = b.reshape(b.shape[0], -1).astype(np.float64)
    inter = fa @ fb.T
    union = fa.sum(1)[:, None] + fb.sum(1)[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def dice(pred, true) -> float:
    """Dice / F1 of two binary masks: ``2 |A ∩ B| / (|A| + |B|)``.

    Parameters
    ----------
    pred, true : array_like of bool, same shape

    Returns
    -------
    float
        NaN when both masks are empty.
    """
    a = np.asarray(pred, dtype=bool)
    b = np.asarray(true, dtype=bool)
    if a.shape != b.shape:
        raise FairvisionError(f"dice: mask shapes differ: {a.shape} vs {b.shape}")
    s = a.sum() + b.sum()
    return float(2.0 * np.logical_and(a, b).sum() / s) if s else float("nan")


def mean_dice(pred_labels, true_labels, categories=None, *, ignore=None) -> float:
    """Mean F1 (Dice) over mask categories of a label map (FHIBE face parsing, docs/METHODS.md §6.1).

    Parameters
    ----------
    pred_labels, true_labels : array_like of int, same shape
        Category id per pixel.
    categories : sequence of int, optional
        Categories to average over (default: every id present in either map,
        except ``ignore``). Categories absent from both maps are skipped.
    ignore : int, optional
        Label to leave out (e.g. background 0).

    Returns
    -------
    float
        NaN when no category is present in either map.

    Notes
    -----
    One confusion matrix (``bincount``) gives every category's intersection
    and sizes at once.
    """
    p = np.asarray(pred_labels).astype(np.int64).ravel()
    t = np.asarray(true_labels).astype(np.int64).ravel()
    if p.shape != t.shape:
        raise FairvisionError("mean_dice: label maps differ in size")
    if p.size and min(p.min(), t.min()) < 0:
        raise FairvisionError("mean_dice: labels must be non-negative integers")
    k = int(max(p.max(initial=0), t.max(initial=0))) + 1
    conf = np.bincount(t * k + p, minlength=k * k).reshape(k, k)
    inter = np.diag(conf).astype(float)
    size = conf.sum(0) + conf.sum(1)
    cats = np.arange(k) if categories is None else np.asarray(list(categories), dtype=np.int64)
    cats = cats[(cats < k)]
    if ignore is not None:
        cats = cats[cats != ignore]
    cats = cats[size[cats] > 0]
    if cats.size == 0:
        return float("nan")
    return float(np.mean(2.0 * inter[cats] / size[cats]))

"""Visual statistics of one annotation: box size, shape and position, mask size and concavity, keypoint spread.

The per-instance quantities of FHIBE's dataset comparison (Xiang et al., Fig. 5; docs/METHODS.md §13.3):
box area / image area, box width / height, distance of the box centre from the image centre, mask area /
image area, mask concavity ``1 - mask area / convex hull area``, mean pairwise distance between keypoints
and the share of visible keypoints. Pure numpy, vectorised over instances; the convex hull of a mask is
computed without OpenCV (row extremes, then vectorised pruning of reflex vertices, then the shoelace formula).
"""

from __future__ import annotations

import numpy as np

from fairvision.errors import FairvisionError
from fairvision.metrics.boxes import to_xyxy


def _sizes(width, height, n: int) -> tuple[np.ndarray, np.ndarray]:
    w = np.broadcast_to(np.asarray(width, dtype=float), (n,))
    h = np.broadcast_to(np.asarray(height, dtype=float), (n,))
    if np.any(~(w > 0)) or np.any(~(h > 0)):
        raise FairvisionError("image width and height must be positive")
    return w, h


def box_area_ratio(boxes, width, height, *, fmt: str = "xywh") -> np.ndarray:
    """Box area over image area of every box (docs/METHODS.md §13.3).

    Parameters
    ----------
    boxes : array_like, shape (N, 4)
        Boxes (COCO ``xywh`` by default).
    width, height : float or array_like (N,)
        Image size of every box.
    fmt : {"xywh", "xyxy"}
        Box format.

    Returns
    -------
    numpy.ndarray, shape (N,)
        ``(x2 - x1)(y2 - y1) / (W H)``; larger means the person is closer to the camera.
    """
    b = to_xyxy(boxes, fmt)
    w, h = _sizes(width, height, len(b))
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) / (w * h)


def box_aspect_ratio(boxes, *, fmt: str = "xywh") -> np.ndarray:
    """Width over height of every box (docs/METHODS.md §13.3).

    Parameters
    ----------
    boxes : array_like, shape (N, 4)
    fmt : {"xywh", "xyxy"}

    Returns
    -------
    numpy.ndarray, shape (N,)
        Below 1 for upright people; NaN for a box of zero height.
    """
    b = to_xyxy(boxes, fmt)
    bw, bh = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bh > 0, bw / np.where(bh > 0, bh, 1), np.nan)


def box_centres(boxes, width, height, *, fmt: str = "xywh") -> np.ndarray:
    """Box centres as fractions of the image size, shape (N, 2): ``(cx / W, cy / H)`` in [0, 1].

    Parameters
    ----------
    boxes : array_like, shape (N, 4)
    width, height : float or array_like (N,)
    fmt : {"xywh", "xyxy"}

    Returns
    -------
    numpy.ndarray, shape (N, 2)
    """
    b = to_xyxy(boxes, fmt)
    w, h = _sizes(width, height, len(b))
    return np.stack([(b[:, 0] + b[:, 2]) / 2 / w, (b[:, 1] + b[:, 3]) / 2 / h], axis=1)


def centre_distance(boxes, width, height, *, fmt: str = "xywh") -> np.ndarray:
    """Distance of the box centre from the image centre over half the image diagonal (docs/METHODS.md §13.3).

    Parameters
    ----------
    boxes : array_like, shape (N, 4)
    width, height : float or array_like (N,)
    fmt : {"xywh", "xyxy"}

    Returns
    -------
    numpy.ndarray, shape (N,)
        0 for a centred box, 1 for a centre in an image corner.
    """
    b = to_xyxy(boxes, fmt)
    w, h = _sizes(width, height, len(b))
    dx = (b[:, 0] + b[:, 2]) / 2 - w / 2
    dy = (b[:, 1] + b[:, 3]) / 2 - h / 2
    return np.hypot(dx, dy) / (0.5 * np.hypot(w, h))


def mask_area_ratio(mask) -> float:
    """Share of the image covered by a binary mask (docs/METHODS.md §13.3).

    Parameters
    ----------
    mask : array_like of bool, shape (H, W)

    Returns
    -------
    float
    """
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 2 or m.size == 0:
        raise FairvisionError(f"mask_area_ratio: expected a non-empty 2-D mask, got shape {m.shape}")
    return float(m.mean())


def _prune(chain: np.ndarray) -> np.ndarray:
    """Lower convex chain of points sorted by (x, y): drop every vertex that is not a strict left turn until none is.

    A vertex of the lower hull lies strictly below the segment between any point on its left and any on its
    right, so it is never dropped; each pass is one vectorised cross product over the chain.
    """
    while len(chain) > 2:
        a, v, b = chain[:-2], chain[1:-1], chain[2:]
        cross = (v[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1]) - (v[:, 1] - a[:, 1]) * (b[:, 0] - a[:, 0])
        bad = cross >= 0  # v on or above the segment a-b: not a vertex of the lower hull
        if not bad.any():
            break
        keep = np.ones(len(chain), dtype=bool)
        keep[1:-1] = ~bad
        chain = chain[keep]
    return chain


def convex_hull(points) -> np.ndarray:
    """Convex hull of 2-D points, counter-clockwise in a y-up frame, without collinear vertices.

    Andrew's monotone chain, with the stack replaced by passes that drop every reflex vertex at once
    (docs/METHODS.md §13.3).

    Parameters
    ----------
    points : array_like, shape (N, 2)

    Returns
    -------
    numpy.ndarray, shape (M, 2)
        Hull vertices; fewer than 3 for degenerate input.
    """
    p = np.unique(np.asarray(points, dtype=float).reshape(-1, 2), axis=0)  # sorted by x, then y
    if len(p) < 3:
        return p
    lower = _prune(p)
    upper = _prune(p[::-1] * -1) * -1  # the upper chain is the lower chain of the point set rotated by 180°
    return np.concatenate([lower[:-1], upper[:-1]])


def polygon_area(vertices) -> float:
    """Area of a simple polygon by the shoelace formula.

    Parameters
    ----------
    vertices : array_like, shape (M, 2)

    Returns
    -------
    float
        0 for fewer than 3 vertices.
    """
    v = np.asarray(vertices, dtype=float)
    if len(v) < 3:
        return 0.0
    x, y = v[:, 0], v[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def mask_hull_points(mask) -> np.ndarray:
    """Corners of the pixels that can be convex-hull vertices of a mask: of each row, the outer corners of its
    leftmost and rightmost foreground pixels (pixel ``(r, c)`` is the unit square ``[c, c+1] x [r, r+1]``).

    Parameters
    ----------
    mask : array_like of bool, shape (H, W)

    Returns
    -------
    numpy.ndarray, shape (4 * rows, 2)
        ``(x, y)`` points.
    """
    m = np.asarray(mask, dtype=bool)
    rows = np.flatnonzero(m.any(axis=1))
    if rows.size == 0:
        return np.zeros((0, 2))
    sub = m[rows]
    left = sub.argmax(axis=1).astype(float)
    right = (m.shape[1] - sub[:, ::-1].argmax(axis=1)).astype(float)
    r = rows.astype(float)
    return np.concatenate([np.stack([left, r], 1), np.stack([left, r + 1], 1),
                           np.stack([right, r], 1), np.stack([right, r + 1], 1)])


def mask_concavity(mask) -> float:
    """Concavity of a binary mask: ``1 - mask area / area of its convex hull`` (FHIBE Fig. 5c; docs/METHODS.md §13.3).

    Both areas are of the pixels as unit squares, so a filled rectangle scores exactly 0.

    Parameters
    ----------
    mask : array_like of bool, shape (H, W)

    Returns
    -------
    float
        In [0, 1); NaN for an empty mask.
    """
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 2:
        raise FairvisionError(f"mask_concavity: expected a 2-D mask, got shape {m.shape}")
    area = float(m.sum())
    if area == 0:
        return float("nan")
    hull = polygon_area(convex_hull(mask_hull_points(m)))
    return float(max(0.0, 1.0 - area / hull)) if hull > 0 else 0.0


def _keypoints(keypoints) -> np.ndarray:
    k = np.asarray(keypoints, dtype=float)
    if k.ndim == 1:
        if k.size % 3:
            raise FairvisionError(f"keypoints: a flat list needs x, y, v triples, got {k.size} numbers")
        k = k.reshape(1, -1, 3)
    elif k.ndim == 2:
        k = k[None]
    if k.ndim != 3 or k.shape[2] != 3:
        raise FairvisionError(f"keypoints: expected shape (N, K, 3), got {np.shape(keypoints)}")
    return k


def keypoint_spread(keypoints, width, height) -> np.ndarray:
    """Mean Euclidean distance between all pairs of labelled keypoints over the image diagonal (docs/METHODS.md §13.3).

    Parameters
    ----------
    keypoints : array_like, shape (N, K, 3) or (K, 3)
        ``x, y, v`` per keypoint (COCO); keypoints with ``v > 0`` are labelled.
    width, height : float or array_like (N,)

    Returns
    -------
    numpy.ndarray, shape (N,)
        NaN for an instance with fewer than two labelled keypoints.
    """
    k = _keypoints(keypoints)
    w, h = _sizes(width, height, len(k))
    lab = k[..., 2] > 0
    d = np.linalg.norm(k[:, :, None, :2] - k[:, None, :, :2], axis=-1)
    pair = lab[:, :, None] & lab[:, None, :]
    n = lab.sum(1)
    n_pairs = n * (n - 1)  # ordered pairs; the diagonal is 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n_pairs > 0, (d * pair).sum((1, 2)) / np.where(n_pairs > 0, n_pairs, 1), np.nan)
    return mean / np.hypot(w, h)


def visible_fraction(keypoints, *, visible: float = 2) -> np.ndarray:
    """Share of an instance's keypoints that are visible: ``v >= visible`` (COCO: 2 labelled and visible).

    Parameters
    ----------
    keypoints : array_like, shape (N, K, 3) or (K, 3)
    visible : float
        Smallest visibility value that counts as visible.

    Returns
    -------
    numpy.ndarray, shape (N,)
    """
    k = _keypoints(keypoints)
    return (k[..., 2] >= visible).mean(axis=1) if k.shape[1] else np.full(len(k), np.nan)


def histogram2d(points, *, bins: int = 20) -> np.ndarray:
    """Counts of points with coordinates in [0, 1] on a ``bins x bins`` grid (rows: y from the top; columns: x).

    Parameters
    ----------
    points : array_like, shape (N, 2)
        ``(x, y)`` as fractions of the image size; points outside [0, 1] are clipped to the edge cells.
    bins : int

    Returns
    -------
    numpy.ndarray, shape (bins, bins), int64
    """
    p = np.asarray(points, dtype=float).reshape(-1, 2)
    p = p[np.isfinite(p).all(1)]
    ix = np.clip((p[:, 0] * bins).astype(np.int64), 0, bins - 1)
    iy = np.clip((p[:, 1] * bins).astype(np.int64), 0, bins - 1)
    return np.bincount(iy * bins + ix, minlength=bins * bins).reshape(bins, bins)

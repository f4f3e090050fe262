"""Two-face composites for the saliency-cropping benchmark, and the balanced draw of the pairs
(docs/METHODS.md §6.8).

A composite stacks two face images vertically: both are scaled to one common width keeping their aspect
ratio, the first (``top``) above, a band of white rows (``gap``) between them, on a white background. The
region each source image occupies is its *face box* in composite pixels, ``(x0, y0, x1, y1)`` with ``x1`` and
``y1`` exclusive; a cropper's choice is judged against these boxes (:mod:`fairvision.vision.croppers`).

The draw (:func:`plan_pairs`): every unordered pair of two different groups gets the same number of
composites, each group of a pair on top in exactly half of them; images are drawn without replacement within
a pair wherever the group has enough of them, and used as evenly as possible across pairs.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ParameterError
from fairvision.io.images import read_image, write_png

__all__ = ["GAP", "PER_PAIR", "CompositeLayout", "layout", "compose", "plan_pairs", "write_composite"]

#: white rows between the two faces (the paper gives no width; about a tenth of a 500-pixel portrait)
GAP = 50
#: composites per pair of groups unless told otherwise (small, so that the bundled demo runs in seconds)
PER_PAIR = 10
#: the white of the background and the gap
WHITE = 255


@dataclass(frozen=True)
class CompositeLayout:
    """Where two images go in a composite (docs/METHODS.md §6.8): its ``width`` and ``height``, the ``gap``,
    and the face boxes ``top`` and ``bottom`` as ``(x0, y0, x1, y1)``, ``x1`` and ``y1`` exclusive."""

    width: int
    height: int
    gap: int
    top: tuple[int, int, int, int]
    bottom: tuple[int, int, int, int]

    def to_dict(self) -> dict:
        """The manifest columns: ``width``, ``height``, ``gap``, ``top_x0`` ... ``bottom_y1``."""
        out = {"width": self.width, "height": self.height, "gap": self.gap}
        for side, box in (("top", self.top), ("bottom", self.bottom)):
            out.update({f"{side}_{k}": int(v) for k, v in zip(("x0", "y0", "x1", "y1"), box)})
        return out


def _positive(name: str, value, *, zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (0 if zero else 1):
        raise ParameterError(name, f"must be a whole number of at least {0 if zero else 1}, not {value!r}")
    return int(value)


def scaled_height(height: int, width: int, target_width: int) -> int:
    """The height of a ``height`` x ``width`` image scaled to ``target_width`` columns, aspect ratio kept
    (rounded, at least one row)."""
    return max(1, int(round(height * target_width / width)))


def layout(top_shape: Sequence[int], bottom_shape: Sequence[int], *, width: int | None = None,
           gap: int = GAP) -> CompositeLayout:
    """The layout of a composite of two images of shapes ``(H, W, ...)`` (docs/METHODS.md §6.8).

    Parameters
    ----------
    top_shape, bottom_shape : sequence of int
        ``(height, width, ...)`` of the two source images.
    width : int, optional
        Common width of the composite; default the smaller of the two widths (no image is enlarged).
    gap : int
        White rows between the two images (default :data:`GAP`).

    Returns
    -------
    CompositeLayout
    """
    (ht, wt), (hb, wb) = (int(top_shape[0]), int(top_shape[1])), (int(bottom_shape[0]), int(bottom_shape[1]))
    W = min(wt, wb) if width is None else _positive("width", width)
    gap = _positive("gap", gap, zero=True)
    ht, hb = scaled_height(ht, wt, W), scaled_height(hb, wb, W)
    return CompositeLayout(W, ht + gap + hb, gap, (0, 0, W, ht), (0, ht + gap, W, ht + gap + hb))


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    if image.shape[1] == width and image.shape[0] == height:
        return image
    import cv2  # lazy: OpenCV is only needed once an image is composed (io.images imports it the same way)

    shrink = width < image.shape[1]
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


def compose(top: np.ndarray, bottom: np.ndarray, *, width: int | None = None,
            gap: int = GAP) -> tuple[np.ndarray, CompositeLayout]:
    """Stack two ``(H, W, 3)`` uint8 RGB images into one composite (docs/METHODS.md §6.8).

    Both are scaled to the common width (:func:`layout`; area interpolation to shrink, bilinear to enlarge),
    ``top`` above ``bottom`` with ``gap`` white rows between them, on a white background.

    Returns
    -------
    image : numpy.ndarray
        ``(height, width, 3)`` uint8 RGB.
    layout : CompositeLayout
        The face boxes of the two images.
    """
    lay = layout(top.shape, bottom.shape, width=width, gap=gap)
    out = np.full((lay.height, lay.width, 3), WHITE, dtype=np.uint8)
    for img, (x0, y0, x1, y1) in ((top, lay.top), (bottom, lay.bottom)):
        out[y0:y1, x0:x1] = _resize(np.asarray(img, dtype=np.uint8), x1 - x0, y1 - y0)
    return out, lay


def write_composite(task: dict) -> dict:
    """Read two images, compose them and write the PNG: one item of an engine run (``task``: ``top_path``,
    ``bottom_path``, ``output``, ``width``, ``gap``). Returns the layout's manifest columns
    (:meth:`CompositeLayout.to_dict`)."""
    image, lay = compose(read_image(task["top_path"]), read_image(task["bottom_path"]), width=task.get("width"),
                         gap=task.get("gap", GAP))
    write_png(os.fspath(task["output"]), image)
    return lay.to_dict()


def _draws(n: int, sizes: Sequence[int], rng: np.random.Generator) -> list[np.ndarray]:
    """Row positions ``0..n-1`` for consecutive draws of ``sizes`` items, taken one after another from a stream
    of shuffled cycles through all ``n`` (docs/METHODS.md §6.8): over all draws every item is used as evenly as
    possible (counts differ by at most one). Where a draw reaches into a new cycle, the items it already holds go
    to that cycle's end, so no item appears twice within a draw when ``size <= n``, and within a larger draw the
    counts of the items differ by at most one."""
    pool = np.empty(0, dtype=np.int64)
    out = []
    for k in sizes:
        take, pool = pool[:k], pool[k:]
        while len(take) < k:  # the cycle ran out: a new one, the items this draw holds most often at its end
            fresh = rng.permutation(n)
            held = np.bincount(take, minlength=n)[fresh]
            fresh = fresh[np.argsort(held, kind="stable")]
            need = k - len(take)
            take, pool = np.concatenate([take, fresh[:need]]), fresh[need:]
        out.append(take.astype(np.int64))
    return out


def _avoid_same_subject(a: np.ndarray, b: np.ndarray, subjects: np.ndarray) -> np.ndarray:
    """``b`` rotated so that as few positions as possible pair a subject with themself (none, where any
    rotation allows it)."""
    best, fewest = b, int(np.sum(subjects[a] == subjects[b]))
    for shift in range(1, len(b)):
        if not fewest:
            break
        rolled = np.roll(b, shift)
        clash = int(np.sum(subjects[a] == subjects[rolled]))
        if clash < fewest:
            best, fewest = rolled, clash
    return best


def plan_pairs(groups, *, categories: Sequence | None = None, per_pair: int = PER_PAIR, seed=0,
               subjects=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Which images go into which composite (docs/METHODS.md §6.8).

    Parameters
    ----------
    groups : array_like
        The group of every image (missing: left out).
    categories : sequence, optional
        The groups in report order (default: the categories of a pandas Categorical, else the sorted values).
    per_pair : int
        Composites per unordered pair of two different groups; even, so that each group of a pair is on top
        in exactly half of them.
    seed : int or numpy Generator
        Random seed of the draw.
    subjects : array_like, optional
        The person of every image: two images of one person are not paired where the draw allows it.

    Returns
    -------
    plan : pandas.DataFrame
        One row per composite, pairs in category order: ``pair`` (``"g | h"``), ``top_row``, ``bottom_row``
        (row positions in ``groups``), ``top_group``, ``bottom_group``.
    pairs : pandas.DataFrame
        One row per pair of groups: ``group_a``, ``group_b``, ``n_a``, ``n_b`` (images of each group),
        ``composites``, ``skipped`` (why a pair has none: a group without images).
    """
    per_pair = _positive("per_pair", per_pair)
    if per_pair % 2:
        raise ParameterError("per_pair", f"must be even, so that each group of a pair is on top equally often, "
                                          f"not {per_pair}")
    values = pd.Series(pd.array(groups, dtype=object) if not isinstance(groups, pd.Categorical) else groups)
    if categories is None:
        categories = (list(groups.categories) if isinstance(groups, pd.Categorical)
                      else sorted({str(v) for v in values.dropna()}))
    labels = values.astype(object).where(values.notna(), None).map(lambda v: None if v is None else str(v)).to_numpy()
    cats = [str(c) for c in categories]
    subj = np.asarray(subjects if subjects is not None else np.arange(len(labels)), dtype=object).astype(str)
    members = {c: np.flatnonzero(labels == c) for c in cats}
    all_pairs = list(itertools.combinations(cats, 2))
    built = [(g, h) for g, h in all_pairs if len(members[g]) and len(members[h])]
    rng = np.random.default_rng(seed)
    draws = {c: iter(_draws(len(members[c]), [per_pair] * sum(c in p for p in built), rng))
             for c in cats if len(members[c])}
    rows = []
    for g, h in built:
        a = members[g][next(draws[g])]
        b = _avoid_same_subject(a, members[h][next(draws[h])], subj)
        a_on_top = rng.permutation(np.arange(per_pair) < per_pair // 2)
        top, bottom = np.where(a_on_top, a, b), np.where(a_on_top, b, a)
        rows.append(pd.DataFrame({"pair": f"{g} | {h}", "top_row": top, "bottom_row": bottom,
                                  "top_group": np.where(a_on_top, g, h), "bottom_group": np.where(a_on_top, h, g)}))
    plan = (pd.concat(rows, ignore_index=True) if rows else
            pd.DataFrame({"pair": [], "top_row": np.zeros(0, np.int64), "bottom_row": np.zeros(0, np.int64),
                          "top_group": [], "bottom_group": []}))
    pairs = pd.DataFrame({
        "group_a": [g for g, _ in all_pairs], "group_b": [h for _, h in all_pairs],
        "n_a": [len(members[g]) for g, _ in all_pairs], "n_b": [len(members[h]) for _, h in all_pairs],
        "composites": [per_pair if (g, h) in built else 0 for g, h in all_pairs],
        "skipped": ["" if (g, h) in built else "no image of " + " or ".join(x for x in (g, h) if not len(members[x]))
                    for g, h in all_pairs],
    })
    return plan, pairs

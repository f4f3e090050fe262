"""Per-image-pair scores of an image model (restoration, super-resolution, generation): PSNR, SSIM, identity
similarity and mean Dice of face-parsing label maps, one row per pair, the table ``audit model`` reads
(docs/METHODS.md §6.1).

Pairs are matched by relative file path: ``pred/a/001.png`` with ``ref/a/001.png``. The suffix does not take
part (``001.png`` pairs with ``001.jpg``, and a label map ``001.png`` with the image ``001.jpg``), so
``sample_id`` is the relative path without its suffix (``a/001``). Files without a partner are listed, never
dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.images import read_image
from fairvision.io.label_maps import read_label_map
from fairvision.io.suffixes import IMAGE_SUFFIXES
from fairvision.metrics.image import psnr
from fairvision.metrics.masks import mean_dice
from fairvision.metrics.ssim import ssim

LABEL_SUFFIXES = (".png",)
#: PSNR of identical images is infinite; the table holds this cap instead, so `audit model` can read it
MAX_PSNR = 100.0


@dataclass(frozen=True)
class ImagePairOptions:
    """How pairs are scored: ``resize`` the prediction to the reference's size (else a size mismatch is an
    error naming the pair); ``identity``: add dlib identity similarity; ``ignore_label``: label left out of
    mean Dice (e.g. background 0); ``max_psnr``: the cap of PSNR (identical images)."""

    resize: bool = False
    identity: bool = False
    ignore_label: int | None = None
    max_psnr: float = MAX_PSNR


@dataclass
class ImagePairScores:
    """The scores table (one row per pair) and the files left without a partner (``file``, ``folder``)."""

    table: pd.DataFrame
    unmatched: pd.DataFrame
    reasons: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def unmatched_line(self) -> str:
        """One line: how many files had no partner, by folder, with the first few named ("" when none)."""
        if self.unmatched.empty:
            return ""
        by = self.unmatched.groupby("folder", sort=False).size()
        names = self.unmatched["file"].astype(str).tolist()
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        return (f"{len(names):,} files without a partner, not scored ("
                + ", ".join(f"{n} in {f}" for f, n in by.items()) + f"): {', '.join(names[:3])}{more}")


def list_files(folder: Path, suffixes: Sequence[str], *, what: str) -> dict[str, Path]:
    """The files under ``folder`` (recursively) with one of ``suffixes``, keyed by relative path without suffix.

    Two files that differ only by suffix (``a.png`` and ``a.jpg``) are an error naming both.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: {what} folder not found")
    out: dict[str, Path] = {}
    for p in sorted(folder.rglob("*")):
        if p.suffix.lower() not in suffixes or not p.is_file():
            continue
        key = p.relative_to(folder).with_suffix("").as_posix()
        if key in out:
            raise FairvisionError(f"{folder}: {out[key].name} and {p.name} both give sample {key!r}; keep one")
        out[key] = p
    if not out:
        raise InputFileError(f"{folder}: no {what} files ({', '.join(suffixes)}) in the folder")
    return out


def _resized(img: np.ndarray, shape: tuple, nearest: bool) -> np.ndarray:
    import cv2  # lazy: about 0.25 s; only with --resize

    flag = cv2.INTER_NEAREST if nearest else (cv2.INTER_AREA if img.shape[0] > shape[0] else cv2.INTER_LINEAR)
    src = img.astype(np.int32) if nearest else img  # OpenCV resizes int32, not int64
    return cv2.resize(src, (shape[1], shape[0]), interpolation=flag).astype(img.dtype)


def _same_size(a: np.ndarray, b: np.ndarray, pa: Path, pb: Path, resize: bool, nearest: bool = False) -> np.ndarray:
    if a.shape[:2] == b.shape[:2]:
        return a
    if not resize:
        raise FairvisionError(f"{pa} is {a.shape[1]} x {a.shape[0]} but {pb} is {b.shape[1]} x {b.shape[0]}: "
                              f"give images of the same size, or --resize to resize the prediction")
    return _resized(a, b.shape[:2], nearest)


def _image_scores(pairs, options: ImagePairOptions) -> tuple[np.ndarray, np.ndarray]:
    n = len(pairs)
    p_out, s_out = np.full(n, np.nan), np.full(n, np.nan)
    for i, (pp, rp) in enumerate(pairs):  # one pair at a time: each score is vectorised over its pixels
        a, b = read_image(pp), read_image(rp)
        a = _same_size(a, b, pp, rp, options.resize)
        p_out[i] = min(psnr(a, b), options.max_psnr)
        s_out[i] = ssim(a, b)
    return p_out, s_out


def _label_scores(pairs, options: ImagePairOptions) -> np.ndarray:
    out = np.full(len(pairs), np.nan)
    for i, (pp, rp) in enumerate(pairs):
        a, b = read_label_map(pp), read_label_map(rp)
        a = _same_size(a, b, pp, rp, options.resize, nearest=True)
        out[i] = mean_dice(a, b, ignore=options.ignore_label)
    return out


def identity_similarity(pred_paths: Sequence, ref_paths: Sequence, *, settings=None,
                        store=None) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarity of the dlib face descriptors of each pair (§8.4), and the reason per pair where there is
    none ("no face in prediction", "no face in reference", ...; "" where there is)."""
    from fairvision.vision.face_descriptor_batch import embed_face_images  # lazy: dlib only with --identity

    n = len(pred_paths)
    ids = [f"pred:{i}" for i in range(n)] + [f"ref:{i}" for i in range(n)]
    fe = embed_face_images([*map(str, pred_paths), *map(str, ref_paths)], ids, settings=settings, store=store)
    vec = dict(zip(fe.ids, fe.embeddings))
    why = dict(zip(fe.status["item_id"].astype(str), fe.status["reason"].fillna("").astype(str)))
    sim, reason = np.full(n, np.nan), np.full(n, "", dtype=object)
    for i in range(n):  # per pair: two 128-d vectors
        a, b = vec.get(f"pred:{i}"), vec.get(f"ref:{i}")
        if a is None or b is None:
            side, key = ("prediction", f"pred:{i}") if a is None else ("reference", f"ref:{i}")
            r = why.get(key, "no face").split(": ")[0] or "no face"
            reason[i] = f"{r} in {side}" if r == "no face" else f"{side}: {r}"
            continue
        sim[i] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return sim, reason


def score_image_pairs(pred: Path, ref: Path, *, pred_labels: Path | None = None, ref_labels: Path | None = None,
                      options: ImagePairOptions | None = None, settings=None, store=None) -> ImagePairScores:
    """Score every prediction image against its reference (same relative path) (docs/METHODS.md §6.1).

    Parameters
    ----------
    pred, ref : path
        Folders of predicted and reference images.
    pred_labels, ref_labels : path, optional
        Folders of face-parsing label maps (single-channel PNGs of category ids), paired the same way; adds
        ``mean_dice``. Give both or neither.
    options : ImagePairOptions, optional
        Resizing, identity similarity, the label Dice ignores, the PSNR cap.
    settings, store
        Engine settings and results store of the face descriptors (``identity`` only).

    Returns
    -------
    ImagePairScores
        ``table``: ``sample_id``, ``pred_path``, ``ref_path``, ``psnr``, ``ssim`` (then ``identity_similarity``
        and ``identity_reason``; ``pred_labels_path``, ``ref_labels_path``, ``mean_dice``); rows in
        ``sample_id`` order. ``unmatched``: every file without a partner.
    """
    options = options or ImagePairOptions()
    if (pred_labels is None) != (ref_labels is None):
        raise FairvisionError("give both --pred-labels and --ref-labels, or neither")
    folders = {"pred": (pred, IMAGE_SUFFIXES, "prediction image"), "ref": (ref, IMAGE_SUFFIXES, "reference image")}
    if pred_labels is not None:
        folders["pred_labels"] = (pred_labels, LABEL_SUFFIXES, "prediction label map")
        folders["ref_labels"] = (ref_labels, LABEL_SUFFIXES, "reference label map")
    files = {k: list_files(Path(f), s, what=w) for k, (f, s, w) in folders.items()}
    image_keys = set(files["pred"]) & set(files["ref"])
    keys = sorted(image_keys)
    if not keys:
        raise FairvisionError(f"{pred} and {ref}: no file has a partner of the same relative path")
    paired = {k: image_keys for k in ("pred", "ref")}
    if pred_labels is not None:
        paired["pred_labels"] = paired["ref_labels"] = image_keys & set(files["pred_labels"]) & set(files["ref_labels"])
    unmatched = [(files[k][key].as_posix(), str(folders[k][0])) for k in files for key in sorted(files[k])
                 if key not in paired[k]]
    table = pd.DataFrame({"sample_id": keys, "pred_path": [str(files["pred"][k]) for k in keys],
                          "ref_path": [str(files["ref"][k]) for k in keys]})
    table["psnr"], table["ssim"] = _image_scores(list(zip(map(files["pred"].get, keys), map(files["ref"].get, keys))),
                                                 options)
    reasons: dict = {}
    if options.identity:
        sim, why = identity_similarity(table["pred_path"], table["ref_path"], settings=settings, store=store)
        table["identity_similarity"], table["identity_reason"] = sim, why
        reasons = pd.Series(why[why != ""]).value_counts().to_dict()
    if pred_labels is not None:
        lk = [k for k in keys if k in files["pred_labels"] and k in files["ref_labels"]]
        dice = pd.Series(_label_scores([(files["pred_labels"][k], files["ref_labels"][k]) for k in lk], options),
                         index=lk, dtype=float)
        table["pred_labels_path"] = [str(files["pred_labels"].get(k, "")) for k in keys]
        table["ref_labels_path"] = [str(files["ref_labels"].get(k, "")) for k in keys]
        table["mean_dice"] = dice.reindex(keys).to_numpy()
        n_missing = len(keys) - len(lk)
        if n_missing:
            reasons["no label map pair"] = n_missing
    return ImagePairScores(table, pd.DataFrame(unmatched, columns=["file", "folder"]), reasons)

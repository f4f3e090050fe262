"""Embeddings of the whole image, the scene and the subject of every image, for the diversity scores
(docs/METHODS.md §13.1).

- ``whole``: the image as it is;
- ``scene``: the subject masked (person pixels black): how diverse the backgrounds are;
- ``subject``: the scene masked (everything but the person black): how diverse the people look.

The person mask of an image is, in this order, its mask file under ``masks_dir``, its person box (``box_cols``),
or mediapipe selfie segmentation (:func:`fairvision.vision.person_mask.person_mask`); the masked images are made
by :mod:`fairvision.vision.image_edits` (``person_black``, ``background_black``). Embeddings come from
EfficientNet-Lite0 (:mod:`fairvision.vision.image_embedder`) or dlib's face descriptor
(:mod:`fairvision.vision.face_descriptor`). Each embedding is kept in the results store (stage
``image_embedding``) under the image's SHA-256, the variant, the mask (file hash or box) and a hash of the model,
its parameters and this code, so a second run embeds nothing.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.io.validate import require_columns
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import InputFileError, ParameterError
from fairvision.io.images import read_image
from fairvision.io.masks import find_mask, mask_index
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.vision.image_edits import background_black, person_black
from fairvision.vision.person_mask import person_mask

#: the variants, in report order, and the image each one embeds
VARIANTS = ("whole", "scene", "subject")
VARIANT_IMAGE = {"whole": "original", "scene": "person_black", "subject": "background_black"}
VARIANT_TEXT = {"whole": "whole image", "scene": "scene (subject masked)", "subject": "subject (scene masked)"}
EMBEDDERS = ("efficientnet", "dlib-face")
#: results-store stage of the embeddings
STAGE = "image_embedding"
#: bump when a change here changes stored embeddings
CACHE_VERSION = 1
SIGNATURE_SOURCES = ("io/images.py", "vision/image_embedder.py", "vision/face_descriptor.py", "vision/faces.py",
                     "vision/facemesh.py", "vision/detect.py", "vision/dlib_landmarks.py",
                     "vision/person_mask.py", "vision/image_edits.py", "audits/curation/diversity_embedding.py")


@dataclass(frozen=True)
class EmbeddingOptions:
    """How the images are embedded (docs/METHODS.md §13.1).

    Parameters
    ----------
    embedder : {"efficientnet", "dlib-face"}
        EfficientNet-Lite0 ImageNet features (1280-d) or dlib's 128-d face descriptor of the largest face.
    masks_dir : path-like, optional
        Folder of person masks (``<sample_id>.png`` or ``<image stem>.png``).
    box_cols : (str, str, str, str), optional
        Columns x0, y0, x1, y1 of a person box in pixels, used where no mask file exists (then mediapipe selfie
        segmentation).
    batch_size : int
        Images per forward pass.
    threads : int, optional
        torch threads of EfficientNet (default: the available CPUs, at most 8).
    """

    embedder: str = "efficientnet"
    masks_dir: object = None
    box_cols: tuple[str, str, str, str] | None = None
    batch_size: int = 32
    threads: int | None = None


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source that shapes a stored embedding."""
    return source_signature(SIGNATURE_SOURCES)


def _encode(vec: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


class _Embedder:
    """One interface over the two embedders: ``embed(list of RGB arrays) -> (vectors or None, reasons)``."""

    def __init__(self, kind: str, batch_size: int, threads: int | None):
        self.kind = kind
        if kind == "efficientnet":
            # lazy: torch costs about 1.5 s to import and is only needed when images are embedded
            from fairvision.vision.image_embedder import ImageEmbedder

            self.model = ImageEmbedder(batch_size=batch_size, threads=threads)
            self.dim = self.model.dim
            self._params = self.model.params()
        else:
            from fairvision.vision.face_descriptor import DESCRIPTOR_DIM, FaceDescriptor

            self.model = FaceDescriptor()
            self.dim = DESCRIPTOR_DIM
            self._params = {"model": "dlib-face-resnet-v1", "upsample": self.model.upsample,
                            "jitter": self.model.jitter}

    def params(self) -> dict:
        return dict(self._params)

    def embed(self, images: list[np.ndarray]) -> tuple[list[np.ndarray | None], list[str]]:
        if self.kind == "efficientnet":
            out = self.model.embed(images)
            return list(out), [""] * len(images)
        vecs, reasons = [], []
        for img in images:
            vec, info = self.model.describe(img)
            vecs.append(None if vec is None else vec.astype(np.float32))
            reasons.append(info["reason"])
        return vecs, reasons


def check_variants(variants) -> tuple[str, ...]:
    """The variants as a tuple without repeats (a comma-separated string is split); an unknown one is an error."""
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    variants = tuple(dict.fromkeys(variants))
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ParameterError("variants", f"has an unknown diversity variant {bad[0] if bad else ''!r}; variants are "
                                         f"{', '.join(VARIANTS)}")
    return variants


def embed_variants(data: pd.DataFrame, variants=VARIANTS, *, options: EmbeddingOptions | None = None,
                   store: ResultsStore | None = None, subject_col: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Embed the variants of every image of a sample table (docs/METHODS.md §13.1).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id``, ``image_path`` (and the box columns when given).
    variants : sequence of {"whole", "scene", "subject"}
    options : EmbeddingOptions, optional
        The embedder, the person masks (a folder of mask files, else four box columns, else mediapipe selfie
        segmentation), the batch size and torch threads.
    store : ResultsStore, optional
        Read embeddings made before, append new ones (stage ``image_embedding``).
    subject_col : str, optional
        Subject column, recorded in the store (for ``forget``).
    progress : callable, optional
        ``progress(done, total)`` after each batch of images embedded; None: silent.

    Returns
    -------
    embeddings : dict
        variant -> ``(n, d)`` float32, NaN rows where an image has no embedding.
    status : pandas.DataFrame
        Per (image, variant): ``sample_id``, ``variant``, ``ok``, ``reason``, ``mask_source``, ``from_cache``.
    """
    variants = check_variants(variants)
    options = options or EmbeddingOptions()
    if options.embedder not in EMBEDDERS:
        raise ParameterError("embedder", f"{options.embedder!r} is unknown; use one of {', '.join(EMBEDDERS)}")
    images = _Images.of(data, options, subject_col)
    run = _EmbeddingRun(images, variants, _Embedder(options.embedder, options.batch_size, options.threads),
                        options.embedder, store)
    todo = run.read_store()
    try:
        step = max(1, options.batch_size)
        for s in range(0, len(todo), step):
            chunk = todo[s:s + step]
            run.embed(chunk)
            if progress is not None:
                progress(s + len(chunk), len(todo))
    finally:
        if store is not None:
            store.flush()
    return run.out, run.status_table()


@dataclass(frozen=True)
class _Images:
    """The images of a sample table: ids, paths, subjects, and each one's mask file and person box (or None)."""

    ids: np.ndarray
    paths: np.ndarray
    subjects: list
    masks: list
    boxes: list

    @classmethod
    def of(cls, data: pd.DataFrame, options: EmbeddingOptions, subject_col: str | None) -> _Images:
        source = data.attrs.get("source", "samples")
        for col in (SAMPLE_ID, IMAGE_PATH) + tuple(options.box_cols or ()):
            require_columns(data, [col], source=source)
        n = len(data)
        ids = data[SAMPLE_ID].astype(str).to_numpy()
        paths = data[IMAGE_PATH].astype(str).to_numpy()
        subjects = data[subject_col].to_numpy() if subject_col and subject_col in data.columns else [None] * n
        index = mask_index(options.masks_dir) if options.masks_dir is not None else None
        masks = [find_mask(index, s, p) if index is not None else None for s, p in zip(ids, paths)]
        boxes: list = [None] * n
        if options.box_cols is not None:
            vals = data[list(options.box_cols)].to_numpy(dtype=float)
            boxes = [None if np.isnan(v).any() else tuple(float(t) for t in v) for v in vals]
        return cls(ids=ids, paths=paths, subjects=subjects, masks=masks, boxes=boxes)

    def mask_tag(self, i: int) -> list:
        """What the person mask of image ``i`` is, for the store key: its file's hash, its box, or ``selfie``."""
        if self.masks[i] is not None:
            return ["file", file_sha256(self.masks[i])]
        if self.boxes[i] is not None:
            return ["box", list(self.boxes[i])]
        return ["selfie"]

    def masked(self, i: int, img: np.ndarray) -> tuple[dict[str, np.ndarray], str]:
        """The original, person-black and background-black images of image ``i`` and its mask source."""
        mask, how = person_mask(img, mask_path=self.masks[i], box=self.boxes[i])
        return {"original": img, "person_black": person_black(img, mask),
                "background_black": background_black(img, mask)}, how


class _EmbeddingRun:
    """The embeddings (``out``: variant -> ``(n, d)``) and status of every (image, variant) of one
    :func:`embed_variants` call, filled from the results store and then by the model."""

    def __init__(self, images: _Images, variants: tuple[str, ...], model: _Embedder, embedder: str,
                 store: ResultsStore | None):
        self.images, self.variants, self.model, self.embedder, self.store = images, variants, model, embedder, store
        n = len(images.ids)
        self.n = n
        self.phash = content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(),
                                  "embedder": model.params(), "selfie_threshold": 0.5})
        self.contents = [file_sha256(p) for p in images.paths]
        self.keys = {v: [row_key(self.contents[i], self.phash, v, images.mask_tag(i) if v != "whole" else None)
                         if self.contents[i] else None for i in range(n)] for v in variants}
        self.out = {v: np.full((n, model.dim), np.nan, dtype=np.float32) for v in variants}
        self.status = {(i, v): {"ok": False, "reason": "", "mask_source": "", "from_cache": False}
                       for i in range(n) for v in variants}

    def read_store(self) -> list[int]:
        """Take every stored embedding; returns the images with a variant still to embed."""
        keys = self.keys
        if self.store is not None:
            hits = self.store.get_many(STAGE, (k for v in self.variants for k in keys[v] if k))
        else:
            hits = {}
        todo: list[int] = []
        for i in range(self.n):
            missing = False
            for v in self.variants:
                rec = hits.get(keys[v][i]) if keys[v][i] else None
                if rec is None:
                    missing = True
                    continue
                self.status[(i, v)].update(ok=bool(rec["ok"]), reason=rec.get("reason", ""),
                                           mask_source=rec.get("mask_source", ""), from_cache=True)
                if rec["ok"]:
                    self.out[v][i] = _decode(rec["embedding"])
            if missing:
                todo.append(i)
        return todo

    def embed(self, chunk: list[int]) -> None:
        """Embed the variants not stored of the images ``chunk``, one forward pass per variant, and store them."""
        batch: dict[str, list] = {v: [] for v in self.variants}
        where: dict[str, list[int]] = {v: [] for v in self.variants}
        for i in chunk:
            need = [v for v in self.variants if not self.status[(i, v)]["from_cache"]]
            try:
                img = read_image(self.images.paths[i])
            except InputFileError as exc:
                for v in need:
                    self.status[(i, v)].update(reason=f"unreadable: {exc}")
                continue
            made = {"original": img}
            how = ""
            if any(v != "whole" for v in need):
                made, how = self.images.masked(i, img)
            for v in need:
                batch[v].append(made[VARIANT_IMAGE[v]])
                where[v].append(i)
                self.status[(i, v)]["mask_source"] = how if v != "whole" else ""
        for v in self.variants:
            if batch[v]:
                vecs, reasons = self.model.embed(batch[v])
                for i, vec, why in zip(where[v], vecs, reasons):
                    self._record(i, v, vec, why)

    def _record(self, i: int, v: str, vec: np.ndarray | None, why: str) -> None:
        st = self.status[(i, v)]
        st.update(ok=vec is not None, reason=why)
        if vec is not None:
            self.out[v][i] = vec
        if self.store is not None and self.keys[v][i]:
            payload = {"ok": vec is not None, "reason": why, "mask_source": st["mask_source"], "variant": v,
                       "embedder": self.embedder, "dim": self.model.dim,
                       "embedding": _encode(vec) if vec is not None else ""}
            self.store.put(STAGE, self.keys[v][i], payload, content_hash=self.contents[i], params_hash=self.phash,
                           sample_id=self.images.ids[i], subject_id=self.images.subjects[i],
                           image_path=self.images.paths[i])

    def status_table(self) -> pd.DataFrame:
        """One row per (image, variant), variant-major: ``sample_id``, ``variant``, ``ok``, ``reason``,
        ``mask_source``, ``from_cache``."""
        rows = [{"sample_id": self.images.ids[i], "variant": v, **self.status[(i, v)]}
                for v in self.variants for i in range(self.n)]
        return pd.DataFrame(rows)


def mask_source_counts(status: pd.DataFrame) -> dict[str, int]:
    """Images per person-mask source (file, box, selfie), each image counted once."""
    st = status[(status["variant"] != "whole") & (status["mask_source"].fillna("") != "")]
    if not len(st):
        return {}
    # one row per image and variant: images per source within each variant, the most over the variants (the
    # scene and subject variants of an image are cut from the same mask)
    per_variant = st.groupby(["variant", "mask_source"]).size().unstack(fill_value=0)
    return {str(k): int(v) for k, v in per_variant.max(axis=0).sort_values(ascending=False).items()}

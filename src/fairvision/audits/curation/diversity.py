"""Diversity beyond head counts: Vendi scores of whole images, scenes and subjects per group
(docs/METHODS.md §13.1, §13.2; FHIBE Table 4).

Three variants of every image are embedded and scored:

- ``whole``: the image as it is;
- ``scene``: the subject masked (person pixels black): how diverse the backgrounds are;
- ``subject``: the scene masked (everything but the person black): how diverse the people look.

The person mask of an image is, in this order, its mask file under ``masks_dir``, its person box (``box_cols``),
or mediapipe selfie segmentation (:func:`fairvision.vision.person_mask.person_mask`); the masked images are made
by :mod:`fairvision.audits.vlm_variants` (``person_black``, ``background_black``). Embeddings come from
EfficientNet-Lite0 (:mod:`fairvision.vision.image_embedder`) or dlib's face descriptor
(:mod:`fairvision.vision.face_descriptor`), or are supplied (then only the whole-image variant is scored).
Each embedding is kept in the results store (stage ``image_embedding``) under the image's SHA-256, the variant,
the mask (file hash or box) and a hash of the model, its parameters and this code, so a second run embeds
nothing.

Per group and overall: the Vendi score of all the group's images with a subject-level interval
(:func:`fairvision.stats.diversity.vendi_ci`), ``VS / n``, and the rarefied score at a common number of subjects
(:func:`fairvision.stats.diversity.rarefied_vendi`), which is the one to compare across groups.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.vlm import check_unique_ids
from fairvision.audits.vlm_variants import background_black, person_black
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.groups import memberships, subject_codes
from fairvision.io.embeddings import read_embeddings
from fairvision.io.images import read_image
from fairvision.io.masks import find_mask, mask_index
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
from fairvision.stats.constants import DEFAULT_CORRECTION
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.diversity import rarefied_vendi, rarefied_vendi_draws, vendi_ci
from fairvision.stats.resample import percentile_ci
from fairvision.stats.resample import DEFAULT_LEVEL
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
SIGNATURE_SOURCES = ("io/images.py", "vision/image_embedder.py", "vision/face_descriptor.py",
                     "vision/person_mask.py", "audits/vlm_variants.py", "audits/curation/diversity.py")
#: default cap of the common (rarefied) size, in subjects
MAX_RAREFY = 256


@dataclass
class DiversityResult:
    """Result of :func:`audit_diversity`.

    ``scores``: one row per (variant, attribute, group), with ``attribute = group = "(all)"`` for the whole set:
    ``n_samples`` and ``n_subjects`` (with an embedding), ``vendi``, ``ci_low``, ``ci_high``, ``level``,
    ``vendi_per_image``, ``rarefied``, ``rarefied_low``, ``rarefied_high`` (2.5 and 97.5 % of the draws),
    ``rarefy_size``, ``pvalue`` (share of random subsets of the same number of subjects from the whole set
    that score as low or lower), ``pvalue_adjusted``, ``too_small`` and ``low_diversity`` (adjusted p-value below
    ``alpha``). ``status``: per image and variant, ``ok``, ``reason``,
    ``mask_source``, ``from_cache``. ``embeddings``: variant -> ``(n_samples, d)`` array aligned with the sample
    table, NaN rows where an image has none.
    """

    scores: pd.DataFrame
    status: pd.DataFrame
    embeddings: dict[str, np.ndarray]
    variants: tuple[str, ...]
    embedder: str
    level: float
    alpha: float
    correction: str
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.scores

    def quantities(self) -> dict[str, float]:
        """``n_low``, ``min_rarefied_ratio`` (lowest rarefied score over the highest, within an attribute and
        variant), ``vendi.<variant>.<attr>.<group>`` and ``rarefied.<variant>.<attr>.<group>`` for ``--fail-if``."""
        s = self.scores
        q = {"n_low": float(s["low_diversity"].sum())}
        ratios = []
        for _, g in s[s["attribute"] != "(all)"].groupby(["variant", "attribute"], sort=False):
            r = g["rarefied"].dropna()
            if len(r) >= 2 and r.max() > 0:
                ratios.append(float(r.min() / r.max()))
        q["min_rarefied_ratio"] = min(ratios) if ratios else 1.0
        for row in s.itertuples(index=False):
            q[f"vendi.{row.variant}.{row.attribute}.{row.group}"] = float(row.vendi)
            q[f"rarefied.{row.variant}.{row.attribute}.{row.group}"] = float(row.rarefied)
        return q


# --------------------------------------------------------------------------- embeddings


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


def embed_variants(data: pd.DataFrame, variants=VARIANTS, *, embedder: str = "efficientnet",
                   masks_dir=None, box_cols: tuple[str, str, str, str] | None = None,
                   store: ResultsStore | None = None, batch_size: int = 32, threads: int | None = None,
                   subject_col: str | None = None, progress: Callable[[int, int], None] | None = None,
                   ) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Embed the variants of every image of a sample table (docs/METHODS.md §13.1).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id``, ``image_path`` (and ``box_cols`` when given).
    variants : sequence of {"whole", "scene", "subject"}
    embedder : {"efficientnet", "dlib-face"}
    masks_dir, box_cols
        Person masks: a folder of mask files, else four box columns, else mediapipe selfie segmentation.
    store : ResultsStore, optional
        Read embeddings made before, append new ones (stage ``image_embedding``).
    batch_size, threads
        Images per forward pass and torch threads (EfficientNet).
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
    if embedder not in EMBEDDERS:
        raise FairvisionError(f"unknown embedder {embedder!r}; use one of {', '.join(EMBEDDERS)}")
    source = data.attrs.get("source", "samples")
    for col in (SAMPLE_ID, IMAGE_PATH) + tuple(box_cols or ()):
        if col not in data.columns:
            raise ColumnError(f"{source}: no column {col!r}; columns are {', '.join(map(str, data.columns))}")
    n = len(data)
    ids = data[SAMPLE_ID].astype(str).to_numpy()
    paths = data[IMAGE_PATH].astype(str).to_numpy()
    subjects = data[subject_col].to_numpy() if subject_col and subject_col in data.columns else [None] * n
    index = mask_index(masks_dir) if masks_dir is not None else None
    masks = [find_mask(index, s, p) if index is not None else None for s, p in zip(ids, paths)]
    boxes: list = [None] * n
    if box_cols is not None:
        vals = data[list(box_cols)].to_numpy(dtype=float)
        boxes = [None if np.isnan(v).any() else tuple(float(t) for t in v) for v in vals]

    model = _Embedder(embedder, batch_size, threads)
    phash = content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "embedder": model.params(),
                         "selfie_threshold": 0.5})
    contents = [file_sha256(p) for p in paths]

    def mask_tag(i: int):
        if masks[i] is not None:
            return ["file", file_sha256(masks[i])]
        if boxes[i] is not None:
            return ["box", list(boxes[i])]
        return ["selfie"]

    keys = {v: [row_key(contents[i], phash, v, mask_tag(i) if v != "whole" else None) if contents[i] else None
                for i in range(n)] for v in variants}
    out = {v: np.full((n, model.dim), np.nan, dtype=np.float32) for v in variants}
    status = {(i, v): {"ok": False, "reason": "", "mask_source": "", "from_cache": False}
              for i in range(n) for v in variants}
    todo: list[int] = []
    if store is not None:
        hits = store.get_many(STAGE, (k for v in variants for k in keys[v] if k))
    else:
        hits = {}
    for i in range(n):
        missing = False
        for v in variants:
            rec = hits.get(keys[v][i]) if keys[v][i] else None
            if rec is None:
                missing = True
                continue
            st = status[(i, v)]
            st.update(ok=bool(rec["ok"]), reason=rec.get("reason", ""), mask_source=rec.get("mask_source", ""),
                      from_cache=True)
            if rec["ok"]:
                out[v][i] = _decode(rec["embedding"])
        if missing:
            todo.append(i)

    try:
        step = max(1, batch_size)
        for s in range(0, len(todo), step):
            chunk = todo[s:s + step]
            batch: dict[str, list] = {v: [] for v in variants}
            where: dict[str, list[int]] = {v: [] for v in variants}
            for i in chunk:
                need = [v for v in variants if not status[(i, v)]["from_cache"]]
                try:
                    img = read_image(paths[i])
                except InputFileError as exc:
                    for v in need:
                        status[(i, v)].update(reason=f"unreadable: {exc}")
                    continue
                made = {"original": img}
                how = ""
                if any(v != "whole" for v in need):
                    made, how = _masked_images(img, masks[i], boxes[i])
                for v in need:
                    batch[v].append(made[VARIANT_IMAGE[v]])
                    where[v].append(i)
                    status[(i, v)]["mask_source"] = how if v != "whole" else ""
            for v in variants:
                if not batch[v]:
                    continue
                vecs, reasons = model.embed(batch[v])
                for i, vec, why in zip(where[v], vecs, reasons):
                    st = status[(i, v)]
                    st.update(ok=vec is not None, reason=why)
                    if vec is not None:
                        out[v][i] = vec
                    if store is not None and keys[v][i]:
                        payload = {"ok": vec is not None, "reason": why, "mask_source": st["mask_source"],
                                   "variant": v, "embedder": embedder, "dim": model.dim,
                                   "embedding": _encode(vec) if vec is not None else ""}
                        store.put(STAGE, keys[v][i], payload, content_hash=contents[i], params_hash=phash,
                                  sample_id=ids[i], subject_id=subjects[i], image_path=paths[i])
            if progress is not None:
                progress(s + len(chunk), len(todo))
    finally:
        if store is not None:
            store.flush()
    rows = [{"sample_id": ids[i], "variant": v, **status[(i, v)]} for v in variants for i in range(n)]
    return out, pd.DataFrame(rows)


def _masked_images(img: np.ndarray, mask_path, box) -> tuple[dict[str, np.ndarray], str]:
    mask, how = person_mask(img, mask_path=mask_path, box=box)
    return {"original": img, "person_black": person_black(img, mask),
            "background_black": background_black(img, mask)}, how


def check_variants(variants) -> tuple[str, ...]:
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    variants = tuple(dict.fromkeys(variants))
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise FairvisionError(f"unknown diversity variant {bad[0] if bad else ''!r}; variants are {', '.join(VARIANTS)}")
    return variants


def _aligned(embeddings, data: pd.DataFrame) -> np.ndarray:
    """Supplied embeddings in the sample table's row order (NaN rows for samples without one)."""
    x, eids = read_embeddings(embeddings)
    ids = data[SAMPLE_ID].astype(str).to_numpy() if SAMPLE_ID in data.columns else np.arange(len(data)).astype(str)
    pos = pd.Index(eids).get_indexer(ids)
    if (pos < 0).all():
        label = embeddings if not isinstance(embeddings, (np.ndarray, pd.DataFrame)) else "embeddings"
        raise InputFileError(f"{label}: none of the {len(ids)} sample ids has an embedding (first sample id {ids[0]!r})")
    out = np.full((len(data), x.shape[1]), np.nan, dtype=np.float32)
    out[pos >= 0] = x[pos[pos >= 0]]
    return out


# --------------------------------------------------------------------------- scores


def audit_diversity(data: pd.DataFrame, attrs: list[str], *, embeddings=None, variants=None,
                    embedder: str = "efficientnet", masks_dir=None, box_cols=None, store: ResultsStore | None = None,
                    subject_col: str | None = "subject_id", schema=None, n_boot: int = 1000, n_draws: int = 100,
                    rarefy_size: int | None = None, min_subjects: int = 10, n_null: int = 1000,
                    alpha: float = 0.05, correction: str = DEFAULT_CORRECTION, level: float = DEFAULT_LEVEL,
                    seed: int | np.random.Generator | None = 0, batch_size: int = 32, threads: int | None = None,
                    progress: Callable[[int, int], None] | None = None) -> DiversityResult:
    """Vendi scores of the whole images, the scenes and the subjects, per group (docs/METHODS.md §13.2).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``sample_id``, ``image_path`` (unless ``embeddings`` is given), optional ``subject_col``,
        the attribute columns.
    attrs : list of str
        Group attributes.
    embeddings : path, array or DataFrame, optional
        Precomputed whole-image embeddings with sample ids (:func:`fairvision.io.embeddings.read_embeddings`);
        skips the model, and only the ``whole`` variant can be scored.
    variants : sequence of {"whole", "scene", "subject"}, optional
        Default: all three, or ``whole`` with ``embeddings``.
    embedder : {"efficientnet", "dlib-face"}
    masks_dir, box_cols
        Person masks (see :func:`embed_variants`).
    store : ResultsStore, optional
        Results store for the embeddings.
    subject_col : str, optional
        Subject column (bootstrap and rarefaction unit); every row its own subject when absent.
    n_boot : int
        Subject-bootstrap replicates of the interval of each score.
    n_draws : int
        Random subsets per group for the rarefied score.
    rarefy_size : int, optional
        Common number of subjects of the rarefied score (default: the fewest subjects of a group with at least
        ``min_subjects``, at most :data:`MAX_RAREFY`).
    min_subjects : int
        Groups with fewer subjects are marked ``too_small`` and get no rarefied score.
    n_null : int
        Random subsets of the whole set (same number of subjects) that a group's rarefied score is compared with.
    alpha, correction
        Significance level and multiple-testing correction of the low-diversity test (all groups and variants
        are one family).
    level, seed
        Interval level and randomness.
    batch_size, threads, progress
        Embedding batch size, torch threads, ``progress(done, total)`` callable (None: silent).

    Returns
    -------
    DiversityResult
    """
    data = data.reset_index(drop=True)
    source = data.attrs.get("source", "samples")
    variants = check_variants(variants if variants is not None else ("whole",) if embeddings is not None else VARIANTS)
    if len(data) == 0:
        raise FairvisionError(f"{source}: no samples")
    if SAMPLE_ID not in data.columns:
        raise ColumnError(f"{source}: no column {SAMPLE_ID!r}; columns are {', '.join(map(str, data.columns))}")
    check_unique_ids(data, SAMPLE_ID, source)
    if subject_col is not None and subject_col not in data.columns:
        if subject_col != "subject_id":
            raise ColumnError(f"{source}: no subject column {subject_col!r}; columns are "
                              f"{', '.join(map(str, data.columns))}")
        subject_col = None
    clusters = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    groups = memberships(data, attrs, schema, source=source)  # checks the attribute columns before any work
    if embeddings is not None:
        if variants != ("whole",):
            raise FairvisionError("supplied embeddings are of the whole images: only the 'whole' variant can be "
                                  "scored (leave out --embeddings to embed the scene and subject variants)")
        variants = ("whole",)
        emb = {"whole": _aligned(embeddings, data)}
        ok = ~np.isnan(emb["whole"]).any(axis=1)
        status = pd.DataFrame({"sample_id": data[SAMPLE_ID].astype(str), "variant": "whole", "ok": ok,
                               "reason": np.where(ok, "", "no embedding supplied"), "mask_source": "",
                               "from_cache": False})
        embedder = "supplied"
    else:
        emb, status = embed_variants(data, variants, embedder=embedder, masks_dir=masks_dir, box_cols=box_cols,
                                     store=store, batch_size=batch_size, threads=threads, subject_col=subject_col,
                                     progress=progress)
    rng = np.random.default_rng(seed)
    rows = []
    for v in variants:
        x = emb[v]
        ok = ~np.isnan(x).any(axis=1)
        # every group of every attribute, and the whole set
        sets = [("(all)", "(all)", np.flatnonzero(ok))]
        for m in groups:
            for gi, grp in enumerate(m.categories):
                r = m.rows[m.codes == gi]
                sets.append((m.name, str(grp), r[ok[r]]))
        n_subj = [len(np.unique(clusters[r])) for _, _, r in sets]
        eligible = [k for (a, _, _), k in zip(sets, n_subj) if a != "(all)" and k >= max(2, min_subjects)]
        size = int(rarefy_size) if rarefy_size is not None else min(min(eligible) if eligible else 0, MAX_RAREFY)
        null = None
        if size >= 2 and sets[0][2].size and n_subj[0] >= size:
            null = rarefied_vendi_draws(x[sets[0][2]], clusters[sets[0][2]], size=size, n_draws=n_null, seed=rng)
        for (attr, grp, r), k in zip(sets, n_subj):
            row = {"variant": v, "attribute": attr, "group": grp, "n_samples": int(r.size), "n_subjects": int(k),
                   "vendi": np.nan, "ci_low": np.nan, "ci_high": np.nan, "level": level, "vendi_per_image": np.nan,
                   "rarefied": np.nan, "rarefied_low": np.nan, "rarefied_high": np.nan,
                   "rarefy_size": size if size >= 2 else np.nan, "pvalue": np.nan, "too_small": k < min_subjects}
            if r.size:
                res = vendi_ci(x[r], clusters[r], n_boot=n_boot, level=level, seed=rng)
                row.update(vendi=res.estimate, vendi_per_image=res.estimate / r.size)
                # a bootstrap over fewer than min_subjects subjects gives intervals far too narrow (3 subjects:
                # 2.70 [2.64, 2.82]): such a group gets the score but no interval, and is flagged too_small
                if k >= min_subjects:
                    row.update(ci_low=res.ci_low, ci_high=res.ci_high)
            if attr == "(all)" and null is not None:
                lo, hi = percentile_ci(null, level)
                row.update(rarefied=float(null.mean()), rarefied_low=float(lo), rarefied_high=float(hi))
            elif size >= 2 and k >= size and k >= min_subjects:
                est = rarefied_vendi(x[r], clusters[r], size=size, n_draws=n_draws, level=level, seed=rng)
                row.update(rarefied=est.estimate, rarefied_low=est.ci_low, rarefied_high=est.ci_high)
                if null is not None:
                    row["pvalue"] = float((1 + np.sum(null <= est.estimate)) / (1 + null.size))
            rows.append(row)
    scores = pd.DataFrame(rows)
    padj = np.full(len(scores), np.nan)
    have = scores["pvalue"].notna().to_numpy()
    if have.any():
        padj[have] = adjust_pvalues(scores.loc[have, "pvalue"].to_numpy(), correction)
    scores.insert(scores.columns.get_loc("pvalue") + 1, "pvalue_adjusted", padj)
    scores["low_diversity"] = scores["pvalue_adjusted"] < alpha
    meta = {"n_samples": len(data), "n_subjects": int(clusters.max()) + 1, "n_boot": n_boot, "n_draws": n_draws,
            "n_null": n_null,
            "embedder": embedder, "variants": list(variants), "min_subjects": min_subjects,
            "n_failed": {v: int((~status.loc[status["variant"] == v, "ok"]).sum()) for v in variants},
            "from_cache": int(status["from_cache"].sum()),
            # images, not (image, variant) rows: the scene and subject variants of an image share one mask
            "mask_sources": mask_source_counts(status)}
    return DiversityResult(scores=scores, status=status, embeddings=emb, variants=variants, embedder=embedder,
                           level=level, alpha=alpha, correction=correction, meta=meta)


def mask_source_counts(status: pd.DataFrame) -> dict[str, int]:
    """Images per person-mask source (file, box, selfie), each image counted once."""
    st = status[(status["variant"] != "whole") & (status["mask_source"].fillna("") != "")]
    if not len(st):
        return {}
    # one row per image and variant: images per source within each variant, the most over the variants (the
    # scene and subject variants of an image are cut from the same mask)
    per_variant = st.groupby(["variant", "mask_source"]).size().unstack(fill_value=0)
    return {str(k): int(v) for k, v in per_variant.max(axis=0).sort_values(ascending=False).items()}

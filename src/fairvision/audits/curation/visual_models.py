"""Annotations from the built-in models, as a COCO dataset, for the visual statistics (docs/METHODS.md §13.3).

When a dataset has no annotations, the face finder (face boxes; the one every command uses, docs/METHODS.md §2.5),
mediapipe selfie segmentation (person mask and its
box) and Pose (33 keypoints) annotate its images (:func:`coco_from_models`). The models' output of every image is
kept in the results store (stage ``visual_models``: face boxes, the mask as compressed COCO RLE, the keypoints)
under the image's SHA-256 and a hash of the model parameters, the mediapipe version and the code, so a second run
annotates nothing.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import ParameterError
from fairvision.io.coco import CocoDataset
from fairvision.io.images import read_image
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import require_columns
from fairvision.metrics.masks import rle_decode, rle_encode

#: category names used for the built-in models' annotations
FACE, PERSON = "face", "person"
#: parameters of the built-in models (:func:`measure_image`); part of the results-store key
MODEL_PARAMS = {"face_min_confidence": 0.5, "face_max_faces": 5, "selfie_threshold": 0.5,
                "selfie_model_selection": 0, "pose_model_complexity": 1}
#: results-store stage of the built-in models' annotations
STAGE = "visual_models"
#: bump when a change here changes stored annotations
CACHE_VERSION = 2
#: source files that shape a stored annotation
SIGNATURE_SOURCES = ("io/images.py", "vision/faces.py", "vision/facemesh.py", "vision/detect.py",
                     "vision/dlib_landmarks.py", "vision/person_mask.py", "vision/pose.py",
                     "metrics/masks.py", "audits/curation/visual_models.py")
#: the end of the ``source`` of a dataset annotated by :func:`coco_from_models`
BUILT_IN_SOURCE = " (built-in models)"


def measure_image(path: str, params: dict | None = None) -> dict:
    """Face boxes, person mask and body keypoints of one image from the built-in models.

    Parameters
    ----------
    path : str
        Image file.
    params : dict, optional
        Model parameters (default :data:`MODEL_PARAMS`; missing keys take their default).

    Returns
    -------
    dict
        ``width``, ``height``, ``faces`` (list of ``[x, y, w, h]``), ``mask`` (compressed COCO RLE of the
        selfie-segmentation person mask, or None when empty) and ``keypoints`` (flat ``x, y, v`` list of
        mediapipe Pose's 33 landmarks, or None).
    """
    # lazy: the model wrappers import mediapipe, needed only on this path
    from fairvision.vision.faces import find_faces
    from fairvision.vision.person_mask import selfie_mask
    from fairvision.vision.pose import detect_pose

    p = {**MODEL_PARAMS, **(params or {})}
    img = read_image(path)
    h, w = img.shape[:2]
    faces = [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]
             for b in (f.box for f in find_faces(img, max_faces=int(p["face_max_faces"]),
                                                  min_confidence=float(p["face_min_confidence"])))]
    mask = selfie_mask(img, threshold=float(p["selfie_threshold"]), model_selection=int(p["selfie_model_selection"]))
    kp = detect_pose(img, model_complexity=int(p["pose_model_complexity"]))
    return {"width": int(w), "height": int(h), "faces": faces,
            "mask": rle_encode(mask) if mask.any() else None,
            "keypoints": None if kp is None else kp.ravel().tolist()}


def _mask_box(rle: dict) -> list[float]:
    """The bounding box ``[x, y, w, h]`` of a mask in COCO RLE."""
    m = rle_decode(rle)
    rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
    return [float(cols[0]), float(rows[0]), float(cols[-1] + 1 - cols[0]), float(rows[-1] + 1 - rows[0])]


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source that shapes a stored annotation of the built-in models."""
    return source_signature(SIGNATURE_SOURCES)


def models_params_hash(params: dict | None = None) -> str:
    """The results-store ``params_hash`` of the built-in models' annotations: their parameters, the mediapipe
    version, the package version and the code (:func:`code_signature`)."""
    try:
        mp_version = importlib.metadata.version("mediapipe")
    except importlib.metadata.PackageNotFoundError:
        mp_version = None
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "mediapipe": mp_version,
                        "params": {**MODEL_PARAMS, **(params or {})}})


def coco_from_models(data: pd.DataFrame, *, image_col: str = IMAGE_PATH, settings: AuditSettings | None = None,
                     progress: Callable | None = None, source: str = "samples", store: ResultsStore | None = None,
                     params: dict | None = None,
                     subject_col: str | None = SUBJECT_ID) -> tuple[CocoDataset, pd.DataFrame]:
    """Annotate images with the built-in models and return them as a COCO dataset (docs/METHODS.md §13.3).

    Every row of ``data`` is one image (``image_id`` = its row position, ``file_name`` = its ``sample_id``).
    Annotations: category ``face`` (one box per detected face), category ``person`` (the box of the selfie
    segmentation mask, the mask, and Pose keypoints when found).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table with ``sample_id`` and an image path column.
    image_col : str
        Column of the image paths.
    settings : AuditSettings, optional
        Uses ``workers`` (one model set per worker), ``engine`` and ``address`` (:func:`fairvision.engine.imap`).
    progress : callable, optional
        ``progress(done, total)`` after each image (images found in the store count at once).
    source : str
        Name of the table in error messages.
    store : ResultsStore, optional
        Results store: images annotated before (same bytes, parameters, mediapipe version and code) are read
        from stage ``visual_models``, new annotations are appended. None: no store.
    params : dict, optional
        Model parameters overriding :data:`MODEL_PARAMS`.
    subject_col : str, optional
        Subject column of ``data``, recorded with the stored rows (``fairvision store forget --subject``).

    Returns
    -------
    (CocoDataset, pandas.DataFrame)
        The dataset, and the failures (``sample_id``, ``error``) of images that could not be read.
        ``CocoDataset.images`` has a ``from_cache`` column (True: read from the store).
    """
    settings = settings or DEFAULT_SETTINGS
    require_columns(data, [image_col], source=source, what="image path column")
    unknown = set(params or {}) - set(MODEL_PARAMS)
    if unknown:
        raise ParameterError("params", f"names an unknown model parameter {sorted(unknown)[0]!r}; "
                                       f"they are {', '.join(MODEL_PARAMS)}")
    paths = [str(p) for p in data[image_col]]
    ids = data[SAMPLE_ID].astype(str).tolist() if SAMPLE_ID in data.columns else [os.path.splitext(os.path.basename(p))[0] for p in paths]
    n = len(paths)
    subjects = (data[subject_col].tolist() if subject_col is not None and subject_col in data.columns
                else [None] * n)
    results: list[dict | None] = [None] * n
    keys = contents = phash = None
    if store is not None:
        phash = models_params_hash(params)
        contents = [file_sha256(p) for p in paths]
        keys = [row_key(c, phash) if c else None for c in contents]
        results = _read_stored(store, keys, contents, phash, ids, subjects, paths)
    cached = np.array([r is not None for r in results], bool)
    todo = np.flatnonzero(~cached)
    from fairvision.vision.faces import mark_used  # lazy: cheap, but part of the vision stack

    mark_used()  # face boxes come from the face finder (in workers, or stored): the report names it
    finished = [n - len(todo)]
    if progress is not None and finished[0]:
        progress(finished[0], n)

    def tick(_outcome) -> None:
        finished[0] += 1
        if progress is not None:
            progress(finished[0], n)

    errors: dict[int, str] = {}
    fn = functools.partial(measure_image, params=params) if params else measure_image
    try:
        for out in imap(fn, [paths[i] for i in todo], workers=settings.workers, engine=settings.engine,
                        address=settings.address, progress=tick):
            i = int(todo[out.index])
            if not out.ok:
                errors[i] = str(out.failure)
                continue
            results[i] = out.value
            if store is not None and keys[i]:
                store.put(STAGE, keys[i], out.value, content_hash=contents[i], params_hash=phash, sample_id=ids[i],
                          subject_id=subjects[i], image_path=paths[i])
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    return _as_coco(results, cached, errors, ids, source)


def _read_stored(store: ResultsStore, keys: list[str | None], contents: list[str | None], phash: str, ids: list[str],
                 subjects: list, paths: list[str]) -> list[dict | None]:
    """The annotation of every image that the store has (None for the others); a stored annotation not yet
    attributed to the row's subject is stored again under it (for ``forget --subject``)."""
    results: list[dict | None] = [None] * len(keys)
    hits = store.get_many(STAGE, (k for k in keys if k))
    for i, k in enumerate(keys):
        hit = hits.get(k) if k else None
        if hit is None:
            continue
        known = hit.pop("_subjects", set())
        subj = None if subjects[i] is None or pd.isna(subjects[i]) else str(subjects[i])
        if subj is not None and subj not in known:
            store.put(STAGE, k, hit, content_hash=contents[i], params_hash=phash, sample_id=ids[i],
                      subject_id=subj, image_path=paths[i])
        results[i] = hit
    return results


def _as_coco(results: list[dict | None], cached: np.ndarray, errors: dict[int, str], ids: list[str],
             source: str) -> tuple[CocoDataset, pd.DataFrame]:
    """The models' annotations as a COCO dataset (person category 1, face category 2), and the failures."""
    images, anns, failed = [], [], []
    for i in range(len(results)):
        r = results[i]
        if r is None:
            failed.append({SAMPLE_ID: ids[i], "error": errors.get(i, "not annotated")})
            continue
        images.append({"image_id": i, "file_name": ids[i], "width": r["width"], "height": r["height"],
                       "from_cache": bool(cached[i])})
        for box in r["faces"]:
            anns.append({"image_id": i, "category_id": 2, "bbox": box, "segmentation": None, "keypoints": None})
        if r["mask"] is not None or r["keypoints"] is not None:
            anns.append({"image_id": i, "category_id": 1, "bbox": _mask_box(r["mask"]) if r["mask"] is not None else None,
                         "segmentation": r["mask"], "keypoints": r["keypoints"]})
    for k, a in enumerate(anns):
        a["id"] = k + 1
    cols = ["id", "image_id", "category_id", "bbox", "segmentation", "keypoints"]
    gt = CocoDataset(pd.DataFrame(images, columns=["image_id", "file_name", "width", "height", "from_cache"]),
                     pd.DataFrame(anns, columns=cols),
                     pd.DataFrame({"category_id": [1, 2], "name": [PERSON, FACE], "keypoints": [None, None],
                                   "skeleton": [None, None]}), source=f"{source}{BUILT_IN_SOURCE}")
    return gt, pd.DataFrame(failed, columns=[SAMPLE_ID, "error"])

"""Measure apparent skin colour over many images: parallel, resumable, with QA overlays.

One row per image (issue 3, item 6): decode (:func:`fairvision.io.images.read_image`),
skin mask (:func:`fairvision.skin.masks.skin_mask`, or a supplied mask file found by
:mod:`fairvision.io.masks`; docs/METHODS.md §2.1), colour estimate
(:func:`fairvision.skin.measure`, docs/METHODS.md §2.2), then the skin-colour
categories (:func:`fairvision.skin.categories.add_categories`, docs/METHODS.md §1.4).

- Parallel: a local process pool (:mod:`fairvision.engine`) of single-threaded
  workers that build the face mesh once each. Images the mesh misses get their
  second chance (face detector + dlib's 68 landmarks) at the end, in one worker,
  so dlib's model (about 0.5 s to load) is loaded once per run, in the
  background, and only when needed.
- Resumable (:class:`fairvision.io.store.ResultsStore`, stage ``skin``): each
  result is kept in the results store under a key made of the SHA-256 of the
  image's bytes, the supplied mask's (if any) and :func:`params_hash` (every
  parameter that changes the answer, the package version and the source of the
  modules that compute it). Results are appended in batches as they arrive,
  so an interrupted run continues where it stopped; a changed image or
  parameter is a miss, and a moved or renamed image is still a hit.
- Failures are rows: an unreadable image, no face, too few skin pixels or an
  exception in a worker give ``ok=False`` and a ``reason``.
- QA overlays (``overlays_dir``): drawn in the workers by the ``overlay``
  function passed in (the command line passes
  :func:`fairvision.report.overlays.render_overlay`: the mask tinted and
  outlined, the face outlines, and for ``thong`` the pixels coloured by K-Means
  cluster).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from fairvision import __version__
from fairvision.datasets.demo import IMAGE_SUFFIXES, from_folder
from fairvision.engine import check_engine, imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.images import read_image, write_png
from fairvision.io.masks import match_masks
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID, read_table
from fairvision.io.webdataset import is_shard_pattern, list_samples
from fairvision.skin.categories import add_categories
from fairvision.skin.estimators import METHODS
from fairvision.skin.masks import FACE_SELECTIONS, MASK_METHODS, skin_mask
from fairvision.skin.measurement import measure
from fairvision.vision import dlib_landmarks
from fairvision.vision.facemesh import get_face_mesh, mediapipe_face_mesh

#: Bump when a change in this pipeline changes stored results.
CACHE_VERSION = 2
#: Stage name of these results in the results store (and of its DuckDB view).
STAGE = "skin"
#: A run that leaves a stage with more parts than this compacts it (when no other run holds the store).
COMPACT_PARTS = 64
#: Source files and folders (relative to the package) whose code shapes a cached record.
SIGNATURE_SOURCES = ("io/images.py", "skin", "vision", "audits/skin_batch.py")
RESULT_COLUMNS = [
    SAMPLE_ID, IMAGE_PATH, "L", "a", "b", "hue", "ita", "chroma", "n_pixels", "n_faces",
    "mask_method", "trust", "ok", "reason", "flags",
]

# imported once by a fork server, when the pool cannot fork this process directly
_PRELOAD = ("cv2", "mediapipe.python.solutions.face_mesh", "dlib", "fairvision.skin.measurement", "fairvision.audits.skin_batch")
# per-process worker state (the models live in the vision modules' caches)
_WORKER: dict[str, Any] = {}


# --------------------------------------------------------------------------- inputs


def _as_table(source) -> pd.DataFrame:
    """A sample table with ``sample_id`` and ``image_path`` from any accepted input."""
    if isinstance(source, pd.DataFrame):
        df = source.copy()
        if IMAGE_PATH not in df.columns:
            raise ColumnError(f"table: no {IMAGE_PATH!r} column; columns are {', '.join(map(str, df.columns))}")
        if SAMPLE_ID not in df.columns:
            df.insert(0, SAMPLE_ID, [Path(str(p)).stem for p in df[IMAGE_PATH]])
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if is_shard_pattern(source):  # WebDataset tar shards: images read in place by the workers
            df = list_samples(source)
        elif p.is_dir():
            df = from_folder(p.resolve())
        elif p.suffix.lower() in IMAGE_SUFFIXES:
            if not p.is_file():
                raise InputFileError(f"{p}: no such image file")
            df = pd.DataFrame({SAMPLE_ID: [p.stem], IMAGE_PATH: [str(p.resolve())]})
        elif p.suffix.lower() in LISTING_SUFFIXES:
            df = _as_table(read_listing(p))
            df.attrs["source"] = str(p)
        else:
            df = read_table(p)
            if IMAGE_PATH not in df.columns:
                raise ColumnError(f"{p}: no image path column (image_path, filename, file_name, path or file)")
    else:
        paths = [os.path.abspath(str(x)) for x in source]
        if not paths:
            raise FairvisionError("no images given")
        stems = [Path(x).stem for x in paths]
        ids = stems if len(set(stems)) == len(stems) else paths
        df = pd.DataFrame({SAMPLE_ID: ids, IMAGE_PATH: paths})
    label = str(source) if isinstance(source, (str, os.PathLike)) else df.attrs.get("source", "table")
    if len(df) == 0:
        raise FairvisionError(f"{label}: no images given")
    df[SAMPLE_ID] = df[SAMPLE_ID].astype(str)
    missing = df[IMAGE_PATH].isna().to_numpy()
    if missing.any():
        raise ColumnError(f"{label}: row {int(np.flatnonzero(missing)[0]) + 1}: empty {IMAGE_PATH}")
    dup = df[SAMPLE_ID].duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        first = int(np.flatnonzero(df[SAMPLE_ID].to_numpy() == df[SAMPLE_ID].iloc[row])[0])
        raise ColumnError(f"{label}: row {row + 1}: duplicate sample_id {df[SAMPLE_ID].iloc[row]!r} "
                          f"({Path(str(df[IMAGE_PATH].iloc[first])).name} and {Path(str(df[IMAGE_PATH].iloc[row])).name})")
    return df.reset_index(drop=True)


#: image listings: one image path per line (relative to the listing's folder); blank lines and # comments skipped
LISTING_SUFFIXES = (".txt", ".lst")


def read_listing(path: Path) -> list[str]:
    """The image paths of a listing file (for millions of images, where a folder scan or a table is unwieldy)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such listing file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the listing: {exc}") from None
    paths = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not paths:
        raise InputFileError(f"{path}: the listing names no image")
    base = path.resolve().parent
    return [str(q if (q := Path(x)).is_absolute() else base / q) for x in paths]


# --------------------------------------------------------------------------- store


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source of every module that shapes a result (decode, masks, models, estimators),
    so that a cached record made by different code is a miss."""
    return source_signature(SIGNATURE_SOURCES)


def params_hash(params: dict) -> str:
    """SHA-256 of everything but the image that shapes a result: all parameters, the package version and
    the code (:func:`code_signature`)."""
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "params": params})


# --------------------------------------------------------------------------- worker


def _init_worker(params: dict) -> None:
    """Build the face models once per process (construction is the slow part)."""
    _WORKER["params"] = params
    mm = params["mask_method"]
    if mm in ("mediapipe", "auto"):
        get_face_mesh(params["max_faces"], 0.5)
    if mm in ("dlib", "auto"):
        dlib_landmarks.get_model("detector")
        dlib_landmarks.get_model("predictor")


def preload(params: dict) -> None:
    """Import the heavy modules (not build models: that starts threads) before forking workers."""
    import cv2  # noqa: F401  - lazy: OpenCV, mediapipe and dlib are optional and slow to import

    if params["mask_method"] in ("mediapipe", "auto"):
        mediapipe_face_mesh()
    if params["mask_method"] in ("dlib", "auto", "mediapipe"):
        import dlib  # noqa: F401


def _load_dlib_predictor(lock: bool = True) -> None:
    """Load dlib's 68-landmark model into this process's cache (for forked workers to inherit).

    ``lock=False`` does not hold the model cache's lock while loading, so that a
    worker forked meanwhile does not inherit a held lock (it simply has no model
    and loads its own if it ever needs one).
    """
    dl = dlib_landmarks
    try:
        if lock:
            dl.get_model("predictor")
        elif "predictor" not in dl.MODEL_CACHE:
            import dlib  # lazy: optional, slow to import

            dl.MODEL_CACHE.setdefault("predictor", dlib.shape_predictor(str(dl.model_path())))
    except Exception:  # noqa: BLE001 - dlib missing: the mask step reports it per image
        pass


def _safe_name(sample_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", sample_id).strip("._") or "image"


def _measure_one(task: dict) -> dict:
    """Decode, mask and measure one image; every expected problem is a row with a reason."""
    params = task["params"]
    rec: dict[str, Any] = {"ok": False, "reason": None}
    try:
        image = read_image(task["image_path"])
    except InputFileError as exc:
        rec.update(reason=str(exc), mask_method=params["mask_method"], n_faces=0, n_pixels=0, flags="unreadable_image")
        return rec
    rec["width"], rec["height"] = int(image.shape[1]), int(image.shape[0])
    if params["mask_method"] == "file":
        if task["mask_path"] is None:
            rec.update(reason="no mask file for this image", mask_method="file", n_faces=0, n_pixels=0, flags="no_mask")
            return rec
        try:
            mres = skin_mask(image, "file", path=task["mask_path"], skin_label=params["skin_label"], min_pixels=params["min_pixels"])
        except InputFileError as exc:
            rec.update(reason=str(exc), mask_method="file", n_faces=0, n_pixels=0, flags="bad_mask")
            return rec
    elif params["mask_method"] == "colour":
        mres = skin_mask(image, "colour", min_pixels=params["min_pixels"])
    else:
        extra = {"detector_fallback": False} if task.get("defer_fallback") else {}
        mres = skin_mask(
            image, params["mask_method"], faces=params["faces"], max_faces=params["max_faces"],
            min_pixels=params["min_pixels"], **extra,
        )
        if extra and mres.reason == "no face found":
            return {"_retry": True}  # second chance later, in one worker (see measure_images)
    meas = None
    if mres.ok:
        meas = measure(image, mask=mres.mask, method=params["method"], mask_trust=mres.trust, **params["measure_options"])
        rec.update(meas.to_dict())
        flags = [f for f in rec.get("flags", "").split(";") if f]
        if mres.n_faces > 1:
            flags.append("multiple_faces")
        if "detector+dlib" in mres.sources:
            flags.append("mesh_missed_face")
        rec["flags"] = ";".join(dict.fromkeys(flags))
    else:
        flags = ["no_face"] if mres.reason == "no face found" else ["too_few_pixels"]
        rec.update(reason=mres.reason, n_pixels=mres.n_pixels, flags=";".join(flags))
    rec.update(mres.to_dict())
    rec.pop("mask_reason", None)  # already in "reason" when there is no mask
    rec["mask_method"] = mres.method
    rec["trust"] = mres.trust
    rec.pop("method", None)
    if task.get("overlay_path"):
        write_png(task["overlay_path"], task["overlay"](image, mres, meas))
        rec["overlay_path"] = task["overlay_path"]
    return rec


# --------------------------------------------------------------------------- driver


def _progress_reporter(progress, total: int):
    """Return (callback(outcome), close()) for True / False / a callable(done, total)."""
    if callable(progress):
        state = {"done": 0}

        def cb(_):
            state["done"] += 1
            progress(state["done"], total)

        return cb, lambda: None
    console = Console(stderr=True)
    if not progress or not console.is_terminal:  # off a terminal a bar only leaves a blank line in the log
        return None, lambda: None
    bar = Progress(
        TextColumn("measuring skin colour"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, transient=True,
    )
    try:
        bar.start()
    except Exception:  # rich.errors.LiveError: another live display (a status spinner) is active
        return None, lambda: None
    task = bar.add_task("skin", total=total)
    return (lambda _: bar.advance(task)), bar.stop


def measure_images(
    table_or_paths,
    *,
    method: str = "thong",
    mask_method: str = "mediapipe",
    masks_dir: str | os.PathLike | None = None,
    skin_label: int | None = None,
    workers: int = 2,
    engine: str = "local",
    address: str | None = None,
    store: ResultsStore | str | os.PathLike | None = None,
    overlays_dir: str | os.PathLike | None = None,
    progress: bool | Callable[[int, int], None] = True,
    faces: str = "all",
    max_faces: int = 5,
    min_pixels: int = 200,
    categories: bool = True,
    measure_options: dict | None = None,
    overlay: Callable | None = None,
) -> pd.DataFrame:
    """Measure the apparent skin colour of every image, one row per image.

    Parameters
    ----------
    table_or_paths : DataFrame, path or iterable of paths
        A sample table with ``image_path`` (other columns are kept), a table
        file, a folder of images, one image, a list of image paths, or
        WebDataset tar shards (a ``.tar``, a folder of them, a glob or
        ``shard-{000000..000009}.tar``; :func:`fairvision.io.webdataset.list_samples`).
    method : str
        Colour estimator of :func:`fairvision.skin.measure` (``thong``,
        ``thong-published``, ``mean``, ``median_ita``, ``gray_mean``).
    mask_method : {"mediapipe", "dlib", "colour", "auto"}
        Automatic skin mask (:func:`fairvision.skin.masks.skin_mask`); ignored
        when ``masks_dir`` is given.
    masks_dir : path, optional
        Folder of supplied masks, found by ``<sample_id>``, ``<image stem>`` or
        ``<image stem>_skin`` with any image suffix (PNG preferred). Binary
        masks, or label maps with ``skin_label``.
    skin_label : int, optional
        Skin label id of label-map masks (CelebAMask-HQ / FHIBE style).
    workers : int
        Worker processes (1 = in this process), or Ray actors with ``engine="ray"``.
    engine : {"local", "ray"}
        Execution engine (:func:`fairvision.engine.imap`): the local process
        pool (default) or Ray Data (the ``ray`` extra); identical results.
    address : str, optional
        Ray cluster address for ``engine="ray"`` (None: a local Ray instance, or ``RAY_ADDRESS``).
    store : ResultsStore or path, optional
        Results store (:class:`fairvision.io.store.ResultsStore`, or its folder):
        images already measured with the same parameters and code are read from
        it, new results are appended to it (see the module docstring). None
        (default): neither read nor write one.
    overlays_dir : path, optional
        Write a QA overlay PNG per image here (``<sample_id>.png``), drawn by ``overlay``.
    progress : bool or callable
        Show a rich progress bar, or call ``progress(done, total)``.
    faces : {"all", "largest"}
        Measure the skin of every face found (default, issue 3) or only the
        largest (for face crops where bystanders show at the edge, as in FairFace).
    max_faces, min_pixels : int
        Face limit of the landmark masks; fewer mask pixels means "too few skin pixels".
    categories : bool
        Add the skin-colour category columns (:func:`fairvision.skin.categories.add_categories`).
    measure_options : dict, optional
        Extra keyword options of :func:`fairvision.skin.measure` (quality checks, estimator settings).
    overlay : callable, optional
        ``overlay(image, mask_result, measurement) -> image`` drawing the QA
        overlay, needed with ``overlays_dir`` (e.g.
        :func:`fairvision.report.overlays.render_overlay`). It runs in the
        worker processes, so it must be picklable (a module-level function).

    Returns
    -------
    pandas.DataFrame
        One row per input image, in input order: ``sample_id``,
        ``image_path``, ``L``, ``a``, ``b``, ``hue``, ``ita``, ``chroma``,
        ``n_pixels``, ``n_faces``, ``mask_method``, ``trust``, ``ok``,
        ``reason``, ``flags``, then spread / stability / size columns,
        ``from_cache`` (True: read from the store), the category columns and the input table's other
        columns. ``df.attrs["summary"]`` counts measured / no face / failed.
    """
    df = _as_table(table_or_paths)
    if masks_dir is not None:
        mask_method = "file"
    elif mask_method == "file":
        raise FairvisionError("mask method 'file' needs a masks folder (masks_dir / --masks)")
    mask_method = "colour" if mask_method == "color" else mask_method
    if mask_method not in MASK_METHODS:
        raise FairvisionError(f"unknown mask method {mask_method!r}; use one of {', '.join(m for m in MASK_METHODS if m != 'file')}")
    if faces not in FACE_SELECTIONS:
        raise FairvisionError(f"unknown face selection {faces!r}; use one of {', '.join(FACE_SELECTIONS)}")
    if method not in METHODS:
        raise FairvisionError(f"unknown skin colour method {method!r}; choose one of {', '.join(METHODS)}")
    if skin_label is not None and masks_dir is None:
        raise FairvisionError("skin_label (--skin-label) applies to supplied masks; give a masks folder too")
    if overlays_dir is not None and overlay is None:
        raise FairvisionError("overlays_dir needs an overlay function (e.g. fairvision.report.overlays.render_overlay)")
    params = {
        "method": method, "mask_method": mask_method, "skin_label": skin_label, "faces": faces,
        "max_faces": int(max_faces), "min_pixels": int(min_pixels), "measure_options": dict(measure_options or {}),
    }
    mask_paths: list[str | None] = [None] * len(df)
    if masks_dir is not None:
        mask_paths = match_masks(masks_dir, df[SAMPLE_ID], df[IMAGE_PATH])
    if store is not None and not isinstance(store, ResultsStore):
        store = ResultsStore(store)
    overlays = Path(overlays_dir) if overlays_dir is not None else None
    if overlays is not None:
        overlays.mkdir(parents=True, exist_ok=True)

    records: list[dict | None] = [None] * len(df)
    subjects = df[SUBJECT_ID].tolist() if SUBJECT_ID in df.columns else [None] * len(df)
    phash = params_hash(params) if store is not None else None
    ids = _store_ids(df, mask_paths, phash) if store is not None else [(None, None)] * len(df)
    hits = store.get_many(STAGE, (key for key, _ in ids)) if store is not None else {}
    tasks, keys = [], {}
    for i, (sid, path) in enumerate(zip(df[SAMPLE_ID], df[IMAGE_PATH])):
        path = str(path)
        ov = str(overlays / f"{_safe_name(sid)}.png") if overlays is not None else None
        key, content = ids[i]
        hit = hits.get(key) if key is not None else None
        if hit is not None and (ov is None or os.path.isfile(ov)):
            hit = dict(hit)
            stored_subjects = hit.pop("_subjects", set())
            subject = None if subjects[i] is None or pd.isna(subjects[i]) else str(subjects[i])
            if subject is not None and subject not in stored_subjects:  # attribute it, for forget --subject
                store.put(STAGE, key, hit, content_hash=content, params_hash=phash, sample_id=sid,
                          subject_id=subject, image_path=path)
            if ov is not None:
                hit["overlay_path"] = ov
            records[i] = {**hit, "from_cache": True}
            continue
        keys[len(tasks)] = (i, key, content)
        tasks.append({"image_path": path, "mask_path": mask_paths[i], "overlay_path": ov, "params": params,
                      "overlay": overlay if ov is not None else None})

    workers = max(1, int(workers))
    # With a pool and the mediapipe mask, images the face mesh misses are set aside and given
    # their second chance (detector + dlib's 68 landmarks) at the end, by one worker: dlib's
    # model takes ~0.5 s to load, so it is loaded once, in this process, in the background
    # (it releases the GIL) as soon as the first miss shows up, and inherited by that worker.
    # Ray actors are not forked from this process (a second pass would start a new actor): they fall back in place.
    defer = workers > 1 and engine == "local" and params["mask_method"] == "mediapipe" and len(tasks) > 1
    loader: threading.Thread | None = None
    if tasks and workers > 1:
        if params["mask_method"] in ("auto", "dlib"):  # needed from the start: load once, then fork
            loader = threading.Thread(target=_load_dlib_predictor, daemon=True)
            loader.start()
        preload(params)  # import once here; forked workers inherit the modules
        if loader is not None:
            loader.join()
    callback, close = _progress_reporter(progress, len(tasks))

    def record(t: int, outcome) -> None:
        i, key, content = keys[t]
        if outcome.ok:
            rec = outcome.value
            if key is not None:
                store.put(STAGE, key, {k: v for k, v in rec.items() if k != "overlay_path"}, content_hash=content,
                          params_hash=phash, sample_id=df[SAMPLE_ID].iat[i], subject_id=subjects[i],
                          image_path=df[IMAGE_PATH].iat[i])
        else:
            f = outcome.failure
            rec = {"ok": False, "reason": f"{f.error}: {f.message}" if f.message else f.error, "flags": "error",
                   "mask_method": mask_method, "n_pixels": 0}
        records[i] = {**rec, "from_cache": False}
        if callback is not None:  # after the store write, so an interrupt loses nothing finished
            callback(outcome)

    run = dict(initializer=_init_worker, initargs=(params,), ordered=False, preload=_PRELOAD,
               engine=check_engine(engine, address), address=address)
    retry: list[int] = []
    try:
        first = [dict(t, defer_fallback=True) for t in tasks] if defer else tasks
        for outcome in imap(_measure_one, first, workers=workers, **run):
            if outcome.ok and outcome.value.get("_retry"):
                retry.append(outcome.index)
                if loader is None:
                    loader = threading.Thread(target=_load_dlib_predictor, args=(False,), daemon=True)
                    loader.start()
                continue
            record(outcome.index, outcome)
        if retry:
            loader.join()
            second = [tasks[t] for t in retry]
            for outcome in imap(_measure_one, second, workers=1, in_process=False, **run):
                record(retry[outcome.index], outcome)
    finally:
        close()
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    if store is not None and tasks:
        store.vacuum(max_parts=COMPACT_PARTS, blocking=False)  # many small parts: compact if no one else holds the store
    return _assemble(df, records, categories)


def _store_ids(df: pd.DataFrame, mask_paths: list, phash: str) -> list[tuple[str | None, str | None]]:
    """``(store key, content hash)`` of each image; ``(None, None)`` where the image cannot be read."""
    ids = []
    for path, mask in zip(df[IMAGE_PATH], mask_paths):
        content = file_sha256(str(path))
        if content is None:  # unreadable: measured (to a failure row) every time
            ids.append((None, None))
            continue
        extra = [file_sha256(mask)] if mask is not None else []
        ids.append((row_key(content, phash, *extra), content))
    return ids


def _assemble(df: pd.DataFrame, records: list[dict], categories: bool) -> pd.DataFrame:
    res = pd.DataFrame.from_records(records)
    for col in RESULT_COLUMNS:
        if col not in res.columns and col not in (SAMPLE_ID, IMAGE_PATH):
            res[col] = np.nan
    res.insert(0, SAMPLE_ID, df[SAMPLE_ID].to_numpy())
    res.insert(1, IMAGE_PATH, df[IMAGE_PATH].astype(str).to_numpy())
    for col in ("L", "a", "b", "hue", "ita", "chroma", "gray"):
        if col in res.columns:
            res[col] = pd.to_numeric(res[col], errors="coerce").astype(float)
    for col in res.columns:  # JSON null -> None: restore float columns from cached records
        if res[col].dtype == object:
            vals = res[col].dropna()
            if len(vals) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                res[col] = pd.to_numeric(res[col], errors="coerce").astype(float)
            elif not len(vals) and (col.startswith(("spread_", "stability_")) or col == "gray"):
                res[col] = res[col].astype(float)
    res["ok"] = res["ok"].fillna(False).astype(bool)
    res["n_pixels"] = pd.to_numeric(res["n_pixels"], errors="coerce").fillna(0).astype(int)
    res["n_faces"] = pd.to_numeric(res["n_faces"], errors="coerce").fillna(0).astype(int)
    res["flags"] = res["flags"].fillna("").astype(str)
    res["reason"] = res["reason"].astype(object).where(res["reason"].notna(), None)
    ordered = RESULT_COLUMNS + [c for c in res.columns if c not in RESULT_COLUMNS]
    res = res[ordered]
    if categories:
        res = add_categories(res)
    extra = [c for c in df.columns if c not in res.columns]
    if extra:
        res = pd.concat([res, df[extra].reset_index(drop=True)], axis=1)
    res.attrs["summary"] = summarize(res)
    return res


def summarize(result: pd.DataFrame) -> dict:
    """Counts of a :func:`measure_images` table: measured, no face, too few pixels, failed (other reasons)."""
    ok = result["ok"].to_numpy(bool)
    flags = result["flags"].fillna("").astype(str)
    no_face = (~ok) & flags.str.contains("no_face").to_numpy()
    too_few = (~ok) & flags.str.contains("too_few_pixels").to_numpy() & ~no_face
    return {
        "images": int(len(result)),
        "measured": int(ok.sum()),
        "no_face": int(no_face.sum()),
        "too_few_pixels": int(too_few.sum()),
        "failed": int((~ok).sum() - no_face.sum() - too_few.sum()),
        "from_cache": int(result["from_cache"].sum()) if "from_cache" in result else 0,
    }

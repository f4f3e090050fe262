"""Measure apparent skin colour over many images: parallel, resumable, with QA overlays.

One row per image: decode (:func:`fairvision.io.images.read_image`), skin mask
(:func:`fairvision.skin.masks.skin_mask`, or a supplied mask file found by
:mod:`fairvision.io.masks`; docs/METHODS.md §2.1), colour estimate
(:func:`fairvision.skin.measure`, docs/METHODS.md §2.2), then the skin-colour
categories (:func:`fairvision.skin.categories.add_categories`, docs/METHODS.md §1.4).
What each image gets is a :class:`MeasureParams`; the tables in and out are
:mod:`fairvision.skin.batch_tables`.

- Parallel: a local process pool (:mod:`fairvision.engine`) of single-threaded
  workers that build the face mesh once each. Images the mesh misses get their
  second chance (face detector + dlib's 68 landmarks) at the end, in a fresh
  pool forked after dlib's model (about 0.5 s to load) was loaded here, so it
  is loaded once per run, in the background, and only when needed.
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

import contextlib
import dataclasses
import functools
import importlib
import os
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from fairvision import __version__
from fairvision.engine import ExecutionSettings, check_engine, imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import InputFileError, ParameterError
from fairvision.io.images import ImageTooLargeError, read_image, write_png
from fairvision.io.masks import match_masks
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.skin.batch_tables import result_table, sample_table
from fairvision.skin.estimators import METHODS
from fairvision.skin.masks import FACE_SELECTIONS, MASK_METHODS, skin_mask
from fairvision.skin.measurement import measure
from fairvision.vision import dlib_landmarks
from fairvision.vision.facemesh import get_face_mesh
from fairvision.vision.faces import preload_face_models

__all__ = ["DEFAULT_FACES", "MeasureParams", "measure_images", "params_hash"]

#: Bump when a change in this pipeline changes stored results.
CACHE_VERSION = 2
#: Stage name of these results in the results store (and of its DuckDB view).
STAGE = "skin"
#: A run that leaves a stage with more parts than this compacts it (when no other run holds the store).
COMPACT_PARTS = 64
#: Source files and folders (relative to the package) whose code shapes a cached record.
SIGNATURE_SOURCES = ("io/images.py", "skin", "vision")
#: Worker processes when :func:`measure_images` is given no settings.
DEFAULT_WORKERS = 2
#: The faces measured per image unless told otherwise, by every command and by :class:`MeasureParams`: the largest
#: face. A row of a dataset is one subject, labelled as one person; uniting every face found would pool a
#: bystander's or a poster's skin into that person's colour (66 of the 540 bundled FairFace crops show a second
#: face at the edge), while an image with one face gets the same answer either way. One default also gives
#: ``skin measure`` and ``audit dataset --measure-skin`` one results-store key, so neither measures again what
#: the other measured.
DEFAULT_FACES = "largest"

# imported once by a fork server, when the pool cannot fork this process directly
_PRELOAD = ("cv2", "mediapipe.python.solutions.face_mesh", "dlib", "fairvision.skin.measurement", "fairvision.skin.batch")


@dataclass(frozen=True)
class MeasureParams:
    """How every image of a batch is measured: everything but the image that shapes its row (and so its
    results-store key, :func:`params_hash`). Validated where it is made.

    Parameters
    ----------
    method : str
        Colour estimator of :func:`fairvision.skin.measure` (``thong``,
        ``thong-published``, ``mean``, ``median_ita``, ``gray_mean``).
    mask_method : {"mediapipe", "dlib", "colour", "auto"}
        Automatic skin mask (:func:`fairvision.skin.masks.skin_mask`; ``color`` is
        read as ``colour``). ``file`` (supplied masks) is what :func:`measure_images`
        uses when it is given a masks folder.
    faces : {"largest", "all"}
        Measure only the largest face (:data:`DEFAULT_FACES`: the subject of the row; bystanders at the edge
        of a crop, as in FairFace, are left out) or unite the skin of every face found (``all``: a crowd, or
        generated images where every face counts).
    max_faces, min_pixels : int
        Face limit of the landmark masks; fewer mask pixels means "too few skin pixels".
    skin_label : int, optional
        Skin label id of label-map masks (CelebAMask-HQ / FHIBE style); supplied masks only.
    measure_options : dict
        Extra keyword options of :func:`fairvision.skin.measure` (quality checks, estimator settings).
    """

    method: str = "thong"
    mask_method: str = "mediapipe"
    faces: str = DEFAULT_FACES
    max_faces: int = 5
    min_pixels: int = 200
    skin_label: int | None = None
    measure_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mask_method == "color":
            object.__setattr__(self, "mask_method", "colour")
        if self.mask_method not in MASK_METHODS:
            raise ParameterError("mask_method", f"must be one of {', '.join(m for m in MASK_METHODS if m != 'file')}, "
                                                f"not {self.mask_method!r}")
        if self.faces not in FACE_SELECTIONS:
            raise ParameterError("faces", f"must be one of {', '.join(FACE_SELECTIONS)}, not {self.faces!r}")
        if self.method not in METHODS:
            raise ParameterError("method", f"must be one of {', '.join(METHODS)}, not {self.method!r}")
        object.__setattr__(self, "max_faces", int(self.max_faces))
        object.__setattr__(self, "min_pixels", int(self.min_pixels))
        object.__setattr__(self, "measure_options", dict(self.measure_options or {}))

    def replace(self, **changes) -> MeasureParams:
        """A copy with some parameters changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The parameters as the workers get them and :func:`params_hash` hashes them."""
        return {"method": self.method, "mask_method": self.mask_method, "skin_label": self.skin_label,
                "faces": self.faces, "max_faces": self.max_faces, "min_pixels": self.min_pixels,
                "measure_options": dict(self.measure_options)}


# --------------------------------------------------------------------------- store


@functools.lru_cache(maxsize=1)
def code_signature() -> str:
    """SHA-256 of the source of every module that shapes a result (decode, masks, models, estimators),
    so that a cached record made by different code is a miss."""
    return source_signature(SIGNATURE_SOURCES)


def params_hash(params: dict) -> str:
    """SHA-256 of everything but the image that shapes a result: all parameters
    (:meth:`MeasureParams.to_dict`), the package version and the code (:func:`code_signature`)."""
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "code": code_signature(), "params": params})


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


# --------------------------------------------------------------------------- worker


class _DeferredModule(types.ModuleType):
    """Stands in for a module that an import asked for but never uses: the real module is imported on the first
    attribute read (by then the stand-in has left ``sys.modules``, so that import is an ordinary one)."""

    def __getattr__(self, name: str):
        if name.startswith("__") or sys.modules.get(self.__name__) is self:  # still standing in: not used then
            raise AttributeError(name)
        real = importlib.import_module(self.__name__)
        try:
            return getattr(real, name)
        except AttributeError:  # a package's submodule not imported yet, or no such name
            try:
                return importlib.import_module(f"{self.__name__}.{name}")
            except ModuleNotFoundError:
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


#: modules mediapipe's ``__init__`` imports that its face mesh never uses, with their cost (``python -X importtime``)
_UNUSED_BY_THE_MESH = (
    "matplotlib",  # with pyplot: 0.29 s, for a plotting helper of mediapipe's drawing_utils fairvision never calls
    "matplotlib.pyplot",
    "mediapipe.tasks",  # with tasks.python: 0.16 s, the Tasks API (audio, text, vision tasks), not the face mesh
    "mediapipe.tasks.python",
)


@contextlib.contextmanager
def _lean_mediapipe_import() -> Any:
    """While mediapipe is imported: the modules of :data:`_UNUSED_BY_THE_MESH` not yet imported are stand-ins
    (:class:`_DeferredModule`), which takes 0.45 s off the 0.54 s mediapipe takes to import, paid by every run that
    measures skin. The stand-ins leave ``sys.modules`` as soon as the import is done, so any later import of those
    modules gets the real ones; the modules left holding a stand-in (mediapipe's ``drawing_utils.plt`` and
    ``mediapipe.tasks``) forward every attribute to the real module, imported then.
    """
    if "mediapipe" in sys.modules:
        yield
        return
    stubs = {name: _DeferredModule(name) for name in _UNUSED_BY_THE_MESH if name not in sys.modules}
    for name, stub in stubs.items():  # ``import a.b as c`` reads ``b`` off the package ``a``
        parent, _, child = name.rpartition(".")
        if parent in stubs:
            setattr(stubs[parent], child, stub)
    sys.modules.update(stubs)
    try:
        yield
    finally:
        for name, stub in stubs.items():
            if sys.modules.get(name) is stub:
                del sys.modules[name]
        mp = sys.modules.get("mediapipe")
        if mp is not None and "mediapipe.tasks" in stubs:
            # the real package (an empty __init__), so that importing its submodules later does not rebind
            # ``mediapipe.tasks``, which mediapipe binds to ``mediapipe.tasks.python`` (the stand-in, forwarding)
            importlib.import_module("mediapipe.tasks")
            mp.tasks = stubs["mediapipe.tasks.python"]


def _init_worker(params: dict) -> None:
    """Build the face models once per process (construction is the slow part)."""
    mm = params["mask_method"]
    if mm in ("mediapipe", "auto"):
        with _lean_mediapipe_import():
            get_face_mesh(params["max_faces"], 0.5)
    if mm in ("dlib", "auto"):
        dlib_landmarks.get_model("detector")
        dlib_landmarks.get_model("predictor")


def _load_dlib_predictor(lock: bool = True) -> None:
    """Load dlib's 68-landmark model into this process's cache (for forked workers to inherit).

    ``lock=False`` does not hold the model cache's lock while loading, so that a
    worker forked meanwhile does not inherit a held lock (it simply has no model
    and loads its own if it ever needs one).
    """
    try:
        dlib_landmarks.get_model("predictor", lock=lock)
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
    except ImageTooLargeError as exc:  # not stored: a run with a raised limit measures it
        rec.update(reason=str(exc), mask_method=params["mask_method"], n_faces=0, n_pixels=0, flags="image_too_large")
        return rec
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
            return {"_retry": True}  # second chance later, in the second pool (see _Batch.run)
    meas = None
    if mres.ok:
        meas = measure(image, mask=mres.mask, method=params["method"], mask_trust=mres.trust, **params["measure_options"])
        rec.update(meas.to_dict())
        flags = [f for f in rec.get("flags", "").split(";") if f]
        if mres.n_faces > 1:
            flags.append("multiple_faces")
        if params["mask_method"] != "dlib" and any(src != "facemesh" for src in mres.sources):
            flags.append("mesh_missed_face")  # a later stage of the face finder found it (docs/METHODS.md §2.5)
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
    if not progress:
        return None, lambda: None
    from rich.console import Console  # lazy: rich.progress is 20-50 ms to import (measured), for a bar only
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if not console.is_terminal:  # off a terminal a bar only leaves a blank line in the log
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
    params: MeasureParams | None = None,
    masks_dir: str | os.PathLike | None = None,
    settings: ExecutionSettings | None = None,
    store: ResultsStore | str | os.PathLike | None = None,
    overlays_dir: str | os.PathLike | None = None,
    overlay: Callable | None = None,
    progress: bool | Callable[[int, int], None] = True,
    categories: bool = True,
) -> pd.DataFrame:
    """Measure the apparent skin colour of every image, one row per image.

    Parameters
    ----------
    table_or_paths : DataFrame, path or iterable of paths
        A sample table with ``image_path`` (other columns are kept), a table
        file, a folder of images, one image, a listing file, a list of image
        paths, or WebDataset tar shards (a ``.tar``, a folder of them, a glob or
        ``shard-{000000..000009}.tar``; :func:`fairvision.io.webdataset.list_samples`);
        see :func:`~fairvision.skin.batch_tables.sample_table`.
    params : MeasureParams, optional
        Estimator, skin mask and quality options of every image (default:
        ``MeasureParams()``, the ``thong`` estimator on the mediapipe mask).
    masks_dir : path, optional
        Folder of supplied masks, found by ``<sample_id>``, ``<image stem>`` or
        ``<image stem>_skin`` with any image suffix (PNG preferred): binary
        masks, or label maps with ``params.skin_label``. Replaces the automatic mask.
    settings : AuditSettings, optional
        Uses ``engine``, ``address`` and ``workers`` (any object with these
        attributes, :class:`fairvision.engine.ExecutionSettings`): worker
        processes (1 = in this process) of the local pool, or Ray actors with
        ``engine="ray"`` (:func:`fairvision.engine.imap`; identical results).
        Default: the local pool with :data:`DEFAULT_WORKERS` workers.
    store : ResultsStore or path, optional
        Results store (:class:`fairvision.io.store.ResultsStore`, or its folder):
        images already measured with the same parameters and code are read from
        it, new results are appended to it (see the module docstring). None
        (default): neither read nor write one.
    overlays_dir : path, optional
        Write a QA overlay PNG per image here (``<sample_id>.png``), drawn by ``overlay``.
    overlay : callable, optional
        ``overlay(image, mask_result, measurement) -> image`` drawing the QA
        overlay, needed with ``overlays_dir`` (e.g.
        :func:`fairvision.report.overlays.render_overlay`). It runs in the
        worker processes, so it must be picklable (a module-level function).
    progress : bool or callable
        Show a rich progress bar, or call ``progress(done, total)``.
    categories : bool
        Add the skin-colour category columns (:func:`fairvision.skin.categories.add_categories`).

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
    df = sample_table(table_or_paths)
    params = _checked_params(params or MeasureParams(), masks_dir, overlays_dir, overlay)
    mask_paths: list[str | None] = [None] * len(df)
    if masks_dir is not None:
        mask_paths = match_masks(masks_dir, df[SAMPLE_ID], df[IMAGE_PATH])
    if store is not None and not isinstance(store, ResultsStore):
        store = ResultsStore(store)
    overlays = Path(overlays_dir) if overlays_dir is not None else None
    if overlays is not None:
        overlays.mkdir(parents=True, exist_ok=True)
    if params.mask_method in ("mediapipe", "dlib", "auto"):
        from fairvision.vision.faces import mark_used  # lazy: the finder runs in the workers, or ran for the store

        mark_used()  # the report names the face finder, also when every result comes from the store
    batch = _Batch(df, params.to_dict(), store)
    batch.plan(mask_paths, overlays, overlay)
    batch.run(settings, progress)
    return result_table(df, batch.records, categories)


def _checked_params(params: MeasureParams, masks_dir, overlays_dir, overlay) -> MeasureParams:
    """``params`` for this run (the ``file`` mask with a masks folder), or a ParameterError for options that
    do not go together."""
    if masks_dir is not None:
        params = params.replace(mask_method="file")
    elif params.mask_method == "file":
        raise ParameterError("mask_method", "'file' needs a folder of supplied masks (masks_dir)")
    if params.skin_label is not None and masks_dir is None:
        raise ParameterError("skin_label", "applies to supplied masks; give a masks folder (masks_dir) too")
    if overlays_dir is not None and overlay is None:
        raise ParameterError("overlay", "is needed with overlays_dir (e.g. fairvision.report.overlays.render_overlay)")
    return params


class _Batch:
    """One run of :func:`measure_images`: a record per image (read from the store, or measured), and the images
    still to measure (``tasks``, each with its row index, store key and content hash in ``slots``)."""

    def __init__(self, df: pd.DataFrame, params: dict, store: ResultsStore | None):
        self.df, self.params, self.store = df, params, store
        self.records: list[dict | None] = [None] * len(df)
        self.subjects = df[SUBJECT_ID].tolist() if SUBJECT_ID in df.columns else [None] * len(df)
        self.phash = params_hash(params) if store is not None else None
        self.tasks: list[dict] = []
        self.slots: dict[int, tuple[int, str | None, str | None]] = {}

    def plan(self, mask_paths: list, overlays: Path | None, overlay: Callable | None) -> None:
        """Take every image the store has (with its overlay, when one is asked for); make a task of the others."""
        df, store = self.df, self.store
        ids = _store_ids(df, mask_paths, self.phash) if store is not None else [(None, None)] * len(df)
        hits = store.get_many(STAGE, (key for key, _ in ids)) if store is not None else {}
        for i, (sid, path) in enumerate(zip(df[SAMPLE_ID], df[IMAGE_PATH])):
            path = str(path)
            ov = str(overlays / f"{_safe_name(sid)}.png") if overlays is not None else None
            key, content = ids[i]
            hit = hits.get(key) if key is not None else None
            if hit is not None and (ov is None or os.path.isfile(ov)):
                hit = dict(hit)
                stored_subjects = hit.pop("_subjects", set())
                subject = None if self.subjects[i] is None or pd.isna(self.subjects[i]) else str(self.subjects[i])
                if subject is not None and subject not in stored_subjects:  # attribute it, for forgetting a subject
                    store.put(STAGE, key, hit, content_hash=content, params_hash=self.phash, sample_id=sid,
                              subject_id=subject, image_path=path)
                if ov is not None:
                    hit["overlay_path"] = ov
                self.records[i] = {**hit, "from_cache": True}
                continue
            self.slots[len(self.tasks)] = (i, key, content)
            self.tasks.append({"image_path": path, "mask_path": mask_paths[i], "overlay_path": ov,
                               "params": self.params, "overlay": overlay if ov is not None else None})

    def record(self, t: int, outcome) -> None:
        """Keep task ``t``'s outcome (a row, or a failure row) and append a measured row to the store."""
        i, key, content = self.slots[t]
        if outcome.ok:
            rec = outcome.value
            if key is not None and rec.get("flags") != "image_too_large":
                self.store.put(STAGE, key, {k: v for k, v in rec.items() if k != "overlay_path"}, content_hash=content,
                               params_hash=self.phash, sample_id=self.df[SAMPLE_ID].iat[i],
                               subject_id=self.subjects[i], image_path=self.df[IMAGE_PATH].iat[i])
        else:
            f = outcome.failure
            rec = {"ok": False, "reason": f"{f.error}: {f.message}" if f.message else f.error, "flags": "error",
                   "mask_method": self.params["mask_method"], "n_pixels": 0}
        self.records[i] = {**rec, "from_cache": False}

    def run(self, settings: ExecutionSettings | None, progress) -> None:
        """Measure the tasks on the engine, keeping each result as it arrives.

        With a pool and the mediapipe mask, images the face mesh misses are set aside and given their second
        chance (detector + dlib's 68 landmarks) at the end, by a second pool: dlib's model takes ~0.5 s of CPU to
        load, so it is loaded once, in this process, in a background thread as soon as the first miss shows up
        (it holds the GIL while it loads; the workers go on with the chunks already queued), and inherited by
        every worker of the second pool, forked after it. Ray actors are not forked from this process (a second
        pass would start a new actor): they fall back in place.
        """
        tasks, params = self.tasks, self.params
        engine, address, workers = ("local", None, DEFAULT_WORKERS) if settings is None else \
            (settings.engine, settings.address, settings.workers)
        workers = max(1, int(workers))
        defer = workers > 1 and engine == "local" and params["mask_method"] == "mediapipe" and len(tasks) > 1
        loader: threading.Thread | None = None
        if tasks and workers > 1:
            if params["mask_method"] in ("auto", "dlib"):  # needed from the start: load once, then fork
                loader = threading.Thread(target=_load_dlib_predictor, daemon=True)
                loader.start()
            with _lean_mediapipe_import():
                preload_face_models(params["mask_method"])  # import once here; forked workers inherit the modules
            if loader is not None:
                loader.join()
        callback, close = _progress_reporter(progress, len(tasks))

        def keep(t: int, outcome) -> None:
            self.record(t, outcome)
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
                keep(outcome.index, outcome)
            if retry:
                loader.join()
                second = [tasks[t] for t in retry]
                # every worker forked now inherits the model loaded here, so the second chances share the workers
                for outcome in imap(_measure_one, second, workers=min(workers, len(second)), in_process=False, **run):
                    keep(retry[outcome.index], outcome)
        finally:
            close()
            if self.store is not None:
                self.store.flush()  # what finished is kept, also when interrupted
        if self.store is not None and tasks:
            self.store.vacuum(max_parts=COMPACT_PARTS, blocking=False)  # many small parts: compact if no one else holds the store

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
  second chance (face detector + dlib's 68 landmarks) while the pool runs, in a
  side pool (:class:`fairvision.engine.SidePool`) forked at the first miss,
  whose worker loads dlib's model (about 0.4 s of CPU) once per run, and only
  when needed.
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

import dataclasses
import functools
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fairvision import __version__
from fairvision.engine import ExecutionSettings, SidePool, StartedMap, WarmPool, check_engine, imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.engine.progress import progress_reporter
from fairvision.errors import InputFileError, ParameterError
from fairvision.io.images import ImageTooLargeError, read_image, write_png
from fairvision.io.masks import match_masks
from fairvision.io.suffixes import folder_images
from fairvision.skin.estimators import METHODS
from fairvision.skin.masks import FACE_SELECTIONS, MASK_METHODS, skin_mask
from fairvision.skin.measurement import measure
from fairvision.vision import dlib_landmarks
from fairvision.vision.facemesh import get_face_mesh
from fairvision.vision.faces import preload_face_models
from fairvision.vision.model_cache import lean_mediapipe_import

if TYPE_CHECKING:  # annotations only: pandas and the store are imported where used (see measure_images)
    import pandas as pd

    from fairvision.io.store import ResultsStore

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
#: Second chances still waiting when the main pool is done above which the side pool gets more workers (each
#: loads dlib's model again, about 0.4 s of CPU, so a short backlog stays with the one that has it).
SIDE_BACKLOG = 32
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


def _store_ids(paths: list, mask_paths: list, phash: str) -> list[tuple[str | None, str | None]]:
    """``(store key, content hash)`` of each image; ``(None, None)`` where the image cannot be read."""
    from fairvision.io.store import file_sha256, row_key  # lazy: DuckDB and pyarrow, for runs with a store only

    ids = []
    for path, mask in zip(paths, mask_paths):
        content = file_sha256(str(path))
        if content is None:  # unreadable: measured (to a failure row) every time
            ids.append((None, None))
            continue
        extra = [file_sha256(mask)] if mask is not None else []
        ids.append((row_key(content, phash, *extra), content))
    return ids


# --------------------------------------------------------------------------- worker


def _init_worker(params: dict) -> None:
    """Build the face models once per process (construction is the slow part)."""
    mm = params["mask_method"]
    if mm in ("mediapipe", "auto"):
        with lean_mediapipe_import():
            get_face_mesh(params["max_faces"], 0.5)
    if mm in ("dlib", "auto"):
        dlib_landmarks.get_model("detector")
        dlib_landmarks.get_model("predictor")


def _load_dlib_predictor() -> None:
    """Load dlib's 68-landmark model into this process's cache (for forked workers to inherit)."""
    try:
        dlib_landmarks.get_model("predictor")
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
        defer = task.get("defer_fallback") and not task.get("mesh_missed")  # mesh_missed: the second chance
        extra = {"mesh_missed": True} if task.get("mesh_missed") else {"detector_fallback": False} if defer else {}
        mres = skin_mask(
            image, params["mask_method"], faces=params["faces"], max_faces=params["max_faces"],
            min_pixels=params["min_pixels"], **extra,
        )
        if defer and mres.reason == "no face found":
            return {"_retry": True}  # its second chance goes to the side pool (see _Batch.run)
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
    params = _checked_params(params or MeasureParams(), masks_dir, overlays_dir, overlay)
    early = _start_early(table_or_paths, params.to_dict(), settings, store is None and masks_dir is None
                         and overlays_dir is None)
    try:
        # lazy: pandas and pyarrow (and DuckDB for a store), about 0.3 s (measured), imported while the pool works
        from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID
        from fairvision.skin.batch_tables import result_table, sample_table

        df = sample_table(table_or_paths)
        mask_paths: list[str | None] = [None] * len(df)
        if masks_dir is not None:
            mask_paths = match_masks(masks_dir, df[SAMPLE_ID], df[IMAGE_PATH])
        if store is not None:
            from fairvision.io.store import ResultsStore

            store = store if isinstance(store, ResultsStore) else ResultsStore(store)
        overlays = Path(overlays_dir) if overlays_dir is not None else None
        if overlays is not None:
            overlays.mkdir(parents=True, exist_ok=True)
        if params.mask_method in ("mediapipe", "dlib", "auto"):
            from fairvision.vision.faces import mark_used  # lazy: the finder runs in the workers, or ran for the store

            mark_used()  # the report names the face finder, also when every result comes from the store
        batch = _Batch(df, params.to_dict(), store)
        batch.plan(mask_paths, overlays, overlay)
        batch.run(settings, progress, early=early)
    finally:
        if early is not None:
            early.close()
    return result_table(df, batch.records, categories)


def _engine(settings: ExecutionSettings | None) -> tuple[str, str | None, int]:
    """``(engine, address, workers)`` of a run."""
    if settings is None:
        return "local", None, DEFAULT_WORKERS
    return check_engine(settings.engine, settings.address), settings.address, max(1, int(settings.workers))


def _prepare_fork(mask_method: str) -> None:
    """Import the face models' libraries here (and load dlib's model where every image needs it), so that
    forked workers inherit them instead of each importing or loading its own."""
    loader: threading.Thread | None = None
    if mask_method in ("auto", "dlib"):  # needed from the start: load once, then fork
        loader = threading.Thread(target=_load_dlib_predictor, daemon=True)
        loader.start()
    with lean_mediapipe_import():
        preload_face_models(mask_method)  # import once here; forked workers inherit the modules
    if loader is not None:
        loader.join()


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


def _early_paths(source) -> list[str]:
    """The image paths of ``source`` where they are known without reading a table: a folder's image files (as
    :func:`~fairvision.skin.batch_tables.sample_table` lists them), a table in memory's ``image_path`` column, a
    list's paths; [] otherwise. A hint only: the run matches results to its table's rows by path."""
    if isinstance(source, (str, os.PathLike)):
        if not os.path.isdir(source):
            return []
        return [str(p) for p in folder_images(Path(source).resolve())]
    columns = getattr(source, "columns", None)
    if columns is not None:  # a DataFrame: pandas is imported already
        from fairvision.io.tables import IMAGE_PATH

        return [str(p) for p in source[IMAGE_PATH]] if IMAGE_PATH in columns else []
    if isinstance(source, (list, tuple)):
        return [os.path.abspath(str(x)) for x in source]
    return []


class _Early:
    """The main pool of a run, started on the images of :func:`_early_paths` before the sample table is read,
    and its side pool for second chances, fed from the map's helper thread (outcomes are indexed by ``paths``)."""

    def __init__(self, paths: list[str], params: dict, workers: int, defer: bool):
        self.paths = paths
        self.tasks = [{"image_path": p, "mask_path": None, "overlay_path": None, "params": params, "overlay": None}
                      for p in paths]
        # both forked here, in this thread, before it imports anything while the map's thread runs (see
        # fairvision.engine.background); the side worker builds nothing before its first second chance
        self.side = SidePool(_measure_one, workers=1, preload=_PRELOAD)
        if defer:
            self.side.start()
        self._warm = WarmPool(workers, initializer=_init_worker, initargs=(params,), preload=_PRELOAD)
        first = [dict(t, defer_fallback=True) for t in self.tasks] if defer else self.tasks
        self.outcomes = StartedMap(self._warm.imap(_measure_one, first, ordered=False), route=self._route)

    def _route(self, outcome) -> bool:
        """A mesh miss goes to the side pool at once (in the map's thread)."""
        if outcome.ok and outcome.value.get("_retry"):
            self.side.submit(outcome.index, dict(self.tasks[outcome.index], mesh_missed=True))
            return True
        return False

    def close(self) -> None:
        self.outcomes.close()
        self._warm.close()
        self.side.close()


def _start_early(source, params: dict, settings: ExecutionSettings | None, plain: bool) -> _Early | None:
    """The run's pool, started before the sample table is read (pandas, about 0.3 s, measured), so that the
    workers measure meanwhile, for a ``plain`` run (no results store, supplied masks or overlays) on the local
    pool whose images :func:`_early_paths` knows; None for any other run."""
    engine, _, workers = _engine(settings)
    if not plain or engine != "local" or workers < 2:
        return None
    paths = _early_paths(source)
    if len(paths) < 2:
        return None
    _prepare_fork(params["mask_method"])
    return _Early(paths, params, workers, defer=params["mask_method"] == "mediapipe")


class _Batch:
    """One run of :func:`measure_images`: a record per image (read from the store, or measured), and the images
    still to measure (``tasks``, each with its row index, store key and content hash in ``slots``)."""

    def __init__(self, df: pd.DataFrame, params: dict, store: ResultsStore | None):
        from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID  # lazy: pandas (see measure_images)

        self.df, self.params, self.store = df, params, store
        self.records: list[dict | None] = [None] * len(df)
        self.sample_ids, self.paths = df[SAMPLE_ID].tolist(), [str(p) for p in df[IMAGE_PATH]]
        self.subjects = df[SUBJECT_ID].tolist() if SUBJECT_ID in df.columns else [None] * len(df)
        self.phash = params_hash(params) if store is not None else None
        self.tasks: list[dict] = []
        self.slots: dict[int, tuple[int, str | None, str | None]] = {}

    def plan(self, mask_paths: list, overlays: Path | None, overlay: Callable | None) -> None:
        """Take every image the store has (with its overlay, when one is asked for); make a task of the others."""
        import pandas as pd  # lazy: see measure_images

        store = self.store
        ids = _store_ids(self.paths, mask_paths, self.phash) if store is not None else [(None, None)] * len(self.paths)
        hits = store.get_many(STAGE, (key for key, _ in ids)) if store is not None else {}
        for i, (sid, path) in enumerate(zip(self.sample_ids, self.paths)):
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
                               params_hash=self.phash, sample_id=self.sample_ids[i],
                               subject_id=self.subjects[i], image_path=self.paths[i])
        else:
            f = outcome.failure
            rec = {"ok": False, "reason": f"{f.error}: {f.message}" if f.message else f.error, "flags": "error",
                   "mask_method": self.params["mask_method"], "n_pixels": 0}
        self.records[i] = {**rec, "from_cache": False}

    def run(self, settings: ExecutionSettings | None, progress, early: _Early | None = None) -> None:
        """Measure the tasks on the engine, keeping each result as it arrives.

        With a pool and the mediapipe mask, images the face mesh misses get their second chance (the finder's
        later stages: detector + dlib's 68 landmarks) in a side pool (:class:`fairvision.engine.SidePool`)
        while the main pool goes on: one worker, forked at the first miss, that loads dlib's model (about 0.4 s
        of CPU) once and builds no face mesh, since the mesh already missed (``mesh_missed``). Nothing here
        waits for that model, and a run without misses never loads it. A long backlog of second chances once
        the main pool is done gets more side workers (:data:`SIDE_BACKLOG`). Ray actors are not forked from
        this process: they fall back in place. ``early``: the pool :func:`_start_early` started; its results
        are the tasks' of the same image path, and tasks it did not have go to a pool of their own.
        """
        tasks, params = self.tasks, self.params
        engine, address, workers = _engine(settings)
        defer = workers > 1 and engine == "local" and params["mask_method"] == "mediapipe" and len(tasks) > 1
        callback, close = progress_reporter(progress, len(tasks), "measuring skin colour")

        def keep(t: int, outcome) -> None:
            self.record(t, outcome)
            if callback is not None:  # after the store write, so an interrupt loses nothing finished
                callback(outcome)

        side = SidePool(_measure_one, workers=1, preload=_PRELOAD) if defer else None

        def take(t: int, outcome) -> None:
            if outcome.ok and outcome.value.get("_retry"):
                side.submit(t, dict(tasks[t], mesh_missed=True))
            else:
                keep(t, outcome)
            for second in side.ready() if side is not None else ():
                keep(second.index, second)

        def keep_second(outcome) -> None:
            keep(outcome.index, outcome)

        try:
            rest = list(range(len(tasks)))
            if early is not None:
                by_path: dict[str, list[int]] = {}
                for t, task in enumerate(tasks):
                    by_path.setdefault(task["image_path"], []).append(t)

                def take_early(outcome) -> None:  # indexed by early.paths
                    for t in by_path.pop(early.paths[outcome.index], ()):
                        take(t, outcome)

                for outcome in early.outcomes:
                    take_early(outcome)
                    for second in early.side.ready():
                        take_early(second)
                known = set(early.paths)
                rest = sorted(t for path, ts in by_path.items() if path not in known for t in ts)
            if rest and workers > 1:  # (an early pool that had every image needs no imports here)
                _prepare_fork(params["mask_method"])
            first = [dict(tasks[t], defer_fallback=True) if defer else tasks[t] for t in rest]
            for outcome in imap(_measure_one, first, workers=workers, initializer=_init_worker, initargs=(params,),
                                ordered=False, preload=_PRELOAD, engine=engine, address=address):
                take(rest[outcome.index], outcome)
            for pool, handle in ((early.side, take_early) if early is not None else (None, None), (side, keep_second)):
                if pool is None:
                    continue
                if pool.backlog > SIDE_BACKLOG and workers > 1:  # the main pool's cores are free now
                    pool.widen(workers - 1)
                for second in pool.drain():
                    handle(second)
        finally:
            if side is not None:
                side.close()
            close()
            if self.store is not None:
                self.store.flush()  # what finished is kept, also when interrupted
        if self.store is not None and tasks:
            self.store.vacuum(max_parts=COMPACT_PARTS, blocking=False)  # many small parts: compact if no one else holds the store

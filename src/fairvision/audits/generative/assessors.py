"""What changed between a seed photo and a generator's output (docs/METHODS.md §10.1, §10.5).

Per image (seed or output), through the engine pool (one set of models per worker):

- skin: :func:`fairvision.skin.measure` with the automatic face skin mask:
  L*, h*, ITA and BiasPainter's grey level (mean BT.601 luma of the skin
  pixels); no face in an output is the recorded outcome ``face_lost``;
- age and gender: the offline default (:class:`AgeGenderPredictor`), any
  ``module:function`` returning ``{"age": years, "gender": "female"|"male"}``,
  or a CSV of predictions made elsewhere (``csv:PATH`` with ``image_path``,
  ``age`` and ``gender`` columns; a path may be the file name only);
- identity: the dlib face descriptor (128-d), compared as the Euclidean
  distance between seed and output (dlib's same-person threshold is 0.6).

:func:`pair_changes` turns the per-image table into the per-pair signed
changes the scores use.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.audits.generative.generators import load_callable
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.engine import imap
from fairvision.engine.cache import content_key, source_signature
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import read_raw_table
from fairvision.skin import measure
from fairvision.vision.age_gender import AgeGenderPredictor
from fairvision.vision.face_descriptor import FaceDescriptor
from fairvision.vision.faces import preload_face_models

IMAGE_COLUMNS = ["image_path", "skin_ok", "skin_reason", "n_faces", "L", "hue", "ita", "gray", "age", "gender",
                 "p_male", "ag_reason", "descriptor"]
#: property -> (per-image column, kind of change)
PROPERTY_COLUMNS = {"skin_L": "L", "skin_hue": "hue", "skin_ita": "ita", "skin_gray": "gray", "age": "age"}
#: DLIB's distance threshold for "same person"
IDENTITY_THRESHOLD = 0.6
#: assessor part -> its stage in the results store (docs/METHODS.md §10.1)
STAGES = {"skin": "generative_skin", "age_gender": "generative_age_gender", "identity": "generative_identity"}
#: assessor part -> the per-image columns it fills
PART_COLUMNS = {"skin": ("skin_ok", "skin_reason", "n_faces", "L", "hue", "ita", "gray"),
                "age_gender": ("age", "gender", "p_male", "ag_reason"), "identity": ("descriptor",)}
#: Bump when a change here changes stored assessments.
CACHE_VERSION = 1
#: Source files and folders (relative to the package) whose code shapes an assessment.
SIGNATURE_SOURCES = {"skin": ("io/images.py", "skin", "vision", "audits/generative/assessors.py"),
                     "age_gender": ("io/images.py", "vision", "audits/generative/assessors.py"),
                     "identity": ("io/images.py", "vision", "audits/generative/assessors.py")}
#: A run that leaves a stage with more parts than this compacts it (when no other run holds the store).
COMPACT_PARTS = 64
#: modules a fork server imports once for the workers (with ``fork`` they inherit this process's imports)
PRELOAD = ("cv2", "mediapipe.python.solutions.face_mesh", "fairvision.skin.measurement",
           "fairvision.audits.generative.assessors")

_WORKER: dict = {}


def active_parts(options: dict) -> list[str]:
    """The per-image assessors ``options`` asks for (``skin``, ``age_gender``, ``identity``), in that order;
    a CSV of predictions is merged afterwards, not assessed per image."""
    parts = []
    if options.get("skin", True):
        parts.append("skin")
    ag = options.get("age_gender", "none")
    if ag == "builtin" or (isinstance(ag, str) and ":" in ag and not ag.startswith("csv:")):
        parts.append("age_gender")
    if options.get("identity"):
        parts.append("identity")
    return parts


def _callable_source(target: str) -> str:
    """SHA-256 of the source file of a ``module:function`` predictor's module ('' when it has none)."""
    mod = target.partition(":")[0]
    try:
        spec = importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    return (file_sha256(origin) or "") if origin and os.path.isfile(origin) else ""


def part_params_hash(part: str, options: dict) -> str:
    """Hash of everything but the image that shapes one assessor's result: its parameters, the package
    version and the source of the code that computes it (a change is a miss in the results store)."""
    if part == "skin":
        params = {"skin_method": options.get("skin_method", "mean"), "mask_method": options.get("mask_method", "mediapipe")}
    elif part == "age_gender":
        ag = options.get("age_gender", "none")
        params = {"age_gender": ag, "source": "" if ag == "builtin" else _callable_source(ag)}
    elif part == "identity":
        params = {"upsample": 1}
    else:
        raise FairvisionError(f"unknown assessor {part!r}")
    return content_key({"v": CACHE_VERSION, "pkg": __version__, "part": part, "params": params,
                        "code": source_signature(SIGNATURE_SOURCES[part])})


def _init(options: dict) -> None:
    _WORKER.clear()
    _WORKER["options"] = options
    parts = options.get("parts", active_parts(options))
    ag = options.get("age_gender", "none")
    if "age_gender" in parts:
        _WORKER["ag"] = AgeGenderPredictor().predict if ag == "builtin" else load_callable(ag)
    if "identity" in parts:
        _WORKER["fd"] = FaceDescriptor(upsample=1)


def assess_image(task) -> dict:
    """Per-image measurements of one image (in a worker initialised with the options).

    ``task``: an image path (every assessor of the options), or ``{"image_path": ..., "parts": [...]}``
    for only some of them (the others are in the results store).
    """
    opts = _WORKER["options"]
    if isinstance(task, dict):
        path, parts = task["image_path"], task["parts"]
    else:
        path, parts = task, opts.get("parts", active_parts(opts))
    img = read_image(path)
    row: dict = {"image_path": path}
    if "skin" in parts:
        m = measure(img, method=opts.get("skin_method", "mean"), mask_method=opts.get("mask_method", "mediapipe"),
                    n_boot=0)
        row.update(skin_ok=bool(m.ok), skin_reason=m.reason or "", n_faces=m.n_faces, L=m.L, hue=m.hue, ita=m.ita,
                   gray=m.gray)
    if "age_gender" in parts and "ag" in _WORKER:
        r = _WORKER["ag"](img)
        if not isinstance(r, dict):
            raise FairvisionError(f"age/gender predictor returned {type(r).__name__}, expected a dict with age and gender")
        g = r.get("gender")
        row.update(age=float(r.get("age", np.nan)) if r.get("age") is not None else np.nan,
                   gender=str(g).lower() if g is not None else None, p_male=float(r.get("p_male", np.nan)),
                   ag_reason=r.get("reason", "") or "")
    if "identity" in parts and "fd" in _WORKER:
        vec, info = _WORKER["fd"].describe(img)
        row["descriptor"] = None if vec is None else vec.astype(np.float32)
    return row


def _from_payload(part: str, payload: dict) -> dict:
    """Per-image columns of one assessor from its stored payload (JSON null -> NaN / None)."""
    out = {}
    for col in PART_COLUMNS[part]:
        v = payload.get(col)
        if col == "descriptor":
            v = None if v is None else np.asarray(v, dtype=np.float32)
        elif col in ("L", "hue", "ita", "gray", "age", "p_male"):
            v = np.nan if v is None else float(v)
        out[col] = v
    return out


def assess_images(paths: list[str], options: dict, *, settings: AuditSettings | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  store: ResultsStore | str | os.PathLike | None = None,
                  sample_ids: dict | None = None) -> pd.DataFrame:
    """Per-image measurements of ``paths`` (one row each; an image that fails has its reason in ``skin_reason``).

    ``options``: ``skin`` (bool), ``skin_method``, ``mask_method``,
    ``age_gender`` (``builtin``, ``none``, ``csv:PATH``, ``module:function``),
    ``identity`` (bool). ``settings``: where the per-image work runs (``engine``,
    ``address``, ``workers``; default one local worker).

    With a results ``store`` (:class:`fairvision.io.store.ResultsStore` or its
    folder) each assessor's result is kept under its stage (:data:`STAGES`) and
    a key made of the SHA-256 of the image's bytes and :func:`part_params_hash`;
    an image whose results are all stored is not read at all, one with some
    stored is assessed only by the others, and images with the same bytes are
    assessed once. ``sample_ids`` (path -> sample id) labels stored rows.

    Returns
    -------
    DataFrame
        :data:`IMAGE_COLUMNS` and ``from_store`` (every assessor read from the
        store). ``attrs["assessments"]``: ``computed`` and ``from_store``,
        counts of per-image assessor results by assessor.
    """
    settings = settings or DEFAULT_SETTINGS
    paths = list(dict.fromkeys(str(p) for p in paths))
    parts = active_parts(options)
    if parts:
        from fairvision.vision.faces import mark_used  # lazy: every part finds faces, maybe in worker processes

        mark_used()  # the report names the face finder
    if store is not None and not isinstance(store, ResultsStore):
        store = ResultsStore(store)
    sample_ids = sample_ids or {}
    rows: dict[str, dict] = {p: {"image_path": p} for p in paths}
    need: dict[str, list[str]] = {p: list(parts) for p in paths}
    counts = {"computed": dict.fromkeys(parts, 0), "from_store": dict.fromkeys(parts, 0)}
    keys: dict[str, dict[str, str]] = {}
    contents: dict[str, str] = {}
    if store is not None and parts:
        phash = {part: part_params_hash(part, options) for part in parts}
        for p in paths:
            c = file_sha256(p)
            if c is not None:
                contents[p] = c
                keys[p] = {part: row_key(c, phash[part]) for part in parts}
        for part in parts:
            hits = store.get_many(STAGES[part], (k[part] for k in keys.values()))
            for p, k in keys.items():
                hit = hits.get(k[part])
                if hit is not None:
                    rows[p].update(_from_payload(part, hit))
                    need[p].remove(part)
                    counts["from_store"][part] += 1
    # one assessment per distinct content (and per unreadable path), only of the parts not stored
    todo: dict[tuple, dict] = {}
    for p in paths:
        if need[p]:
            ident = (contents.get(p, p), tuple(need[p]))
            todo.setdefault(ident, {"image_path": p, "parts": need[p], "paths": []})["paths"].append(p)
    tasks = list(todo.values())
    done = sum(1 for p in paths if not need[p])
    if progress is not None and done:
        progress(done, len(paths))
    if tasks:
        run_opts = {**options, "parts": sorted({x for t in tasks for x in t["parts"]}, key=parts.index)}
        items = [{"image_path": t["image_path"], "parts": t["parts"]} for t in tasks]
        if settings.workers > 1 and settings.engine == "local" and "skin" in run_opts["parts"]:
            preload_face_models(run_opts.get("mask_method", "mediapipe"))  # import once; forked workers inherit
        try:
            for oc in imap(assess_image, items, workers=settings.workers, engine=settings.engine,
                           address=settings.address, initializer=_init, initargs=(run_opts,), ordered=False,
                           preload=PRELOAD):
                t = tasks[oc.index]
                if oc.ok:
                    value = {k: v for k, v in oc.value.items() if k != "image_path"}
                    for part in t["parts"]:
                        counts["computed"][part] += 1
                        if store is not None and t["image_path"] in keys:
                            p0 = t["image_path"]
                            store.put(STAGES[part], keys[p0][part], {c: value.get(c) for c in PART_COLUMNS[part]},
                                      content_hash=contents[p0], params_hash=phash[part],
                                      sample_id=sample_ids.get(p0), image_path=p0)
                    for p in t["paths"]:
                        rows[p].update(value)
                else:  # not stored: a failure is tried again next run
                    for p in t["paths"]:
                        rows[p].update(skin_ok=False, skin_reason=str(oc.failure))
                done += len(t["paths"])
                if progress is not None:
                    progress(done, len(paths))
        finally:
            if store is not None:
                store.flush()  # what finished is kept, also when interrupted
        if store is not None:
            store.vacuum(max_parts=COMPACT_PARTS, blocking=False)
    return _image_table([rows[p] for p in paths], [not need[p] and bool(parts) for p in paths], options, counts)


def _image_table(rows: list[dict], from_store: list[bool], options: dict, counts: dict) -> pd.DataFrame:
    """The table :func:`assess_images` returns: typed :data:`IMAGE_COLUMNS`, ``from_store``, the predictions of
    a CSV merged in, and the assessment ``counts`` in ``attrs["assessments"]``."""
    df = pd.DataFrame(rows).reindex(columns=IMAGE_COLUMNS)
    df["from_store"] = from_store
    for col in ("L", "hue", "ita", "gray", "age", "p_male", "n_faces"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["skin_ok"] = df["skin_ok"].astype(object).where(df["skin_ok"].notna(), False).astype(bool)
    ag = options.get("age_gender", "none")
    if isinstance(ag, str) and ag.startswith("csv:"):
        df = _merge_csv(df, ag[4:], options.get("base"))
    df.attrs["assessments"] = counts
    return df


def _merge_csv(df: pd.DataFrame, path: str, base: str | None) -> pd.DataFrame:
    p = Path(path)
    if base and not p.is_absolute():
        p = Path(base) / p
    preds = read_raw_table(p)
    for c in ("image_path", "age", "gender"):
        if c not in preds.columns:
            raise FairvisionError(f"{p}: predictions need columns image_path, age and gender; no {c!r}")
    full = {str(Path(x).resolve()) if Path(x).is_absolute() else str((p.parent / x).resolve()): i
            for i, x in enumerate(preds["image_path"].astype(str))}
    by_name = {Path(x).name: i for i, x in enumerate(preds["image_path"].astype(str))}
    idx = [full.get(str(Path(x).resolve()), by_name.get(Path(x).name, -1)) for x in df["image_path"]]
    idx = np.asarray(idx)
    hit = idx >= 0
    df = df.copy()
    df["age"] = np.where(hit, pd.to_numeric(preds["age"], errors="coerce").to_numpy()[np.maximum(idx, 0)], np.nan)
    g = preds["gender"].astype(str).str.lower().to_numpy()[np.maximum(idx, 0)]
    df["gender"] = np.where(hit, g, None)
    df["ag_reason"] = np.where(hit, "", "no prediction in the CSV")
    return df


def hue_difference(after, before) -> np.ndarray:
    """Signed hue change in degrees, wrapped to (-180, 180]."""
    d = (np.asarray(after, float) - np.asarray(before, float) + 180.0) % 360.0 - 180.0
    return np.where(d == -180.0, 180.0, d)


def pair_changes(records: pd.DataFrame, seeds: pd.DataFrame, images: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, prompt, generation seed) output: the signed changes (docs/METHODS.md §10.2).

    Columns: the record's ``generator``, ``seed_id``, ``topic``, ``word``,
    ``prompt``, ``seed``, ``output_path``, ``ok``, ``reason``; ``face_lost``
    (an output was made but no face was found in it while the seed had one);
    ``skin_L``, ``skin_hue``, ``skin_ita``, ``skin_gray`` (output minus seed;
    positive L*, ITA and grey = lighter); ``age`` (years, output minus seed);
    ``gender`` (+1 female -> male, -1 male -> female, 0 unchanged, NaN when
    either prediction is missing); ``identity`` (descriptor distance);
    ``seed_gender`` and ``seed_age`` (predicted on the seed).
    """
    img = images.set_index("image_path")
    seed_path = seeds.set_index(seeds["sample_id"].astype(str))["image_path"].astype(str)
    rec = records.copy()
    sp = rec["seed_id"].map(seed_path)
    s = img.reindex(sp.to_numpy())
    o = img.reindex(rec["output_path"].astype(str).to_numpy())
    ok_s = s["skin_ok"].fillna(False).to_numpy(bool)
    ok_o = o["skin_ok"].fillna(False).to_numpy(bool) & rec["ok"].to_numpy(bool)
    both = ok_s & ok_o
    out = rec[["generator", "seed_id", "topic", "word", "prompt", "seed", "output_path", "ok", "reason"]].copy()
    n_faces_o = pd.to_numeric(o["n_faces"], errors="coerce").to_numpy()
    seed_face = pd.to_numeric(s["n_faces"], errors="coerce").fillna(0).to_numpy() > 0
    out["face_lost"] = rec["ok"].to_numpy(bool) & seed_face & (np.nan_to_num(n_faces_o, nan=0) == 0)
    for prop, col in PROPERTY_COLUMNS.items():
        if col == "age":
            continue
        a, b = o[col].to_numpy(float), s[col].to_numpy(float)
        d = hue_difference(a, b) if col == "hue" else a - b
        out[prop] = np.where(both, d, np.nan)
    ok_run = rec["ok"].to_numpy(bool)
    out["age"] = np.where(ok_run, o["age"].to_numpy(float) - s["age"].to_numpy(float), np.nan)
    gs, go = s["gender"].to_numpy(object), o["gender"].to_numpy(object)
    code = {"female": 0.0, "male": 1.0}
    gs_n = np.array([code.get(str(v), np.nan) for v in gs])
    go_n = np.array([code.get(str(v), np.nan) for v in go])
    out["gender"] = np.where(ok_run, go_n - gs_n, np.nan)
    ds, do = s["descriptor"].to_numpy(object), o["descriptor"].to_numpy(object)
    out["identity"] = [float(np.linalg.norm(np.asarray(x) - np.asarray(y))) if ok and x is not None and y is not None
                       and not (isinstance(x, float) or isinstance(y, float)) else np.nan
                       for ok, x, y in zip(ok_run, do, ds)]
    out["seed_gender"] = gs
    out["seed_age"] = s["age"].to_numpy(float)
    return out.reset_index(drop=True)

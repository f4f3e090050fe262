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

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.vision.age_gender import AgeGenderPredictor
from fairvision.audits.generative.generators import load_callable
from fairvision.engine import imap
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.io.tables import read_raw_table
from fairvision.skin import measure
from fairvision.vision.face_descriptor import FaceDescriptor

IMAGE_COLUMNS = ["image_path", "skin_ok", "skin_reason", "n_faces", "L", "hue", "ita", "gray", "age", "gender",
                 "p_male", "ag_reason", "descriptor"]
#: property -> (per-image column, kind of change)
PROPERTY_COLUMNS = {"skin_L": "L", "skin_hue": "hue", "skin_ita": "ita", "skin_gray": "gray", "age": "age"}
#: DLIB's distance threshold for "same person"
IDENTITY_THRESHOLD = 0.6

_WORKER: dict = {}


def _init(options: dict) -> None:
    _WORKER.clear()
    _WORKER["options"] = options
    ag = options.get("age_gender", "none")
    if ag == "builtin":
        _WORKER["ag"] = AgeGenderPredictor().predict
    elif isinstance(ag, str) and ":" in ag and not ag.startswith("csv:"):
        _WORKER["ag"] = load_callable(ag)
    if options.get("identity"):
        _WORKER["fd"] = FaceDescriptor(upsample=1)


def assess_image(path: str) -> dict:
    """Every per-image measurement of one image (in a worker initialised with the options)."""
    opts = _WORKER["options"]
    img = read_image(path)
    row: dict = {"image_path": path}
    if opts.get("skin", True):
        m = measure(img, method=opts.get("skin_method", "mean"), mask_method=opts.get("mask_method", "mediapipe"),
                    n_boot=0)
        row.update(skin_ok=bool(m.ok), skin_reason=m.reason or "", n_faces=m.n_faces, L=m.L, hue=m.hue, ita=m.ita,
                   gray=m.gray)
    if "ag" in _WORKER:
        r = _WORKER["ag"](img)
        if not isinstance(r, dict):
            raise FairvisionError(f"age/gender predictor returned {type(r).__name__}, expected a dict with age and gender")
        g = r.get("gender")
        row.update(age=float(r.get("age", np.nan)) if r.get("age") is not None else np.nan,
                   gender=str(g).lower() if g is not None else None, p_male=float(r.get("p_male", np.nan)),
                   ag_reason=r.get("reason", ""))
    if "fd" in _WORKER:
        vec, info = _WORKER["fd"].describe(img)
        row["descriptor"] = None if vec is None else vec.astype(np.float32)
    return row


def assess_images(paths: list[str], options: dict, *, workers: int = 1, engine: str = "local",
                  address: str | None = None, progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Per-image measurements of ``paths`` (one row each; an image that fails has its reason in ``skin_reason``).

    ``options``: ``skin`` (bool), ``skin_method``, ``mask_method``,
    ``age_gender`` (``builtin``, ``none``, ``csv:PATH``, ``module:function``),
    ``identity`` (bool).
    """
    paths = list(dict.fromkeys(paths))
    rows = []
    outcomes = imap(assess_image, paths, workers=max(1, int(workers)), engine=engine, address=address,
                    initializer=_init, initargs=(options,), ordered=False)
    for i, oc in enumerate(outcomes, 1):
        if oc.ok:
            rows.append(oc.value)
        else:
            rows.append({"image_path": paths[oc.index], "skin_ok": False, "skin_reason": str(oc.failure)})
        if progress is not None:
            progress(i, len(paths))
    df = pd.DataFrame(rows).reindex(columns=IMAGE_COLUMNS)
    ag = options.get("age_gender", "none")
    if isinstance(ag, str) and ag.startswith("csv:"):
        df = _merge_csv(df, ag[4:], options.get("base"))
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

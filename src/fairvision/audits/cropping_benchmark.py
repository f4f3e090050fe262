"""The saliency-cropping benchmark: build two-face composites, run a cropper on them, write the games
(docs/METHODS.md §6.8).

:func:`audit_cropping_build` gives every image a group (Thong et al.'s light/dark x red/yellow cells from the
measured skin colour, or any attribute column), draws the same number of composites for every pair of two
different groups (:func:`fairvision.vision.composites.plan_pairs`), writes them as PNGs with a manifest
(``composites.csv``), and counts the images left out (:func:`fairvision.audits.coverage.audit_coverage`).
:func:`audit_cropping_run` runs a cropper (:mod:`fairvision.vision.croppers`) on every composite and says which
face it kept: the games table that ``audit cropping`` rates (Elo, docs/METHODS.md §6.9). Who wins by group is
that audit's business; this one reports the counts and the position bias (how often the top face is kept).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings, SettingsView
from fairvision.engine import imap
from fairvision.errors import ColumnError, FairvisionError, InputFileError, ParameterError
from fairvision.io.atomic import atomic_output_dir
from fairvision.io.images import read_image
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import empty_cells, require_columns
from fairvision.schema import MISSING_LABEL
from fairvision.skin.batch import MeasureParams, measure_images
from fairvision.skin.categories import (HUE_THRESHOLD, L_THRESHOLD, TONE_HUE, achromatic_rows, check_thresholds,
                                        tone_hue_category)
from fairvision.stats.proportions import wilson_interval
from fairvision.vision.composites import GAP, PER_PAIR, plan_pairs, write_composite
from fairvision.vision.croppers import ASPECT, crop_output, cropper_name, judge, load_cropper

__all__ = ["SKIN", "BuildOptions", "CroppingBuild", "CroppingRun", "MANIFEST", "GAMES_COLUMNS", "image_groups",
           "audit_cropping_build", "read_manifest", "audit_cropping_run"]

#: ``--attr`` value that means "measure the skin colour" (Thong et al.'s four tone x hue cells)
SKIN = "skin"
#: the manifest a build writes into its folder
MANIFEST = "composites.csv"
#: every input image with its group, or the reason it has none
IMAGES = "images.csv"
#: the first columns of the games table, in this order
GAMES_COLUMNS = ("composite_id", "attribute", "top_sample_id", "bottom_sample_id", "top_subject_id",
                 "bottom_subject_id", "top_group", "bottom_group", "kept", "top_share", "bottom_share",
                 "crop_x0", "crop_y0", "crop_x1", "crop_y1", "a", "b", "winner")
_BOX = ("x0", "y0", "x1", "y1")
_MANIFEST_TEXT = ("composite_id", "image_path", "attribute", "top_sample_id", "top_subject_id", "top_group",
                  "bottom_sample_id", "bottom_subject_id", "bottom_group")
_NATURAL = re.compile(r"(\d+)")
_MANIFEST_INT = tuple(f"{s}_{k}" for s in ("top", "bottom") for k in _BOX) + ("width", "height")


@dataclass(frozen=True)
class BuildOptions:
    """How composites are built (docs/METHODS.md §6.8): the grouping ``attribute`` (:data:`SKIN` or a column),
    composites ``per_pair`` (even), the common ``width`` (None: the smaller of the two images' widths), the
    white ``gap`` in rows, the skin thresholds (``L_threshold``, ``hue_threshold``) and the person column
    (``subject_col``; default ``subject_id`` when the table has one, else each image is its own person)."""

    attribute: str = SKIN
    per_pair: int = PER_PAIR
    width: int | None = None
    gap: int = GAP
    L_threshold: float = L_THRESHOLD
    hue_threshold: float = HUE_THRESHOLD
    subject_col: str | None = None

    def __post_init__(self) -> None:
        if not str(self.attribute or "").strip():
            raise ParameterError("attribute", "must name a column or be 'skin'")
        for name, least in (("per_pair", 2), ("gap", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                raise ParameterError(name, f"must be a whole number of at least {least}, not {v!r}")
        if self.per_pair % 2:
            raise ParameterError("per_pair", f"must be even, so that each group of a pair is on top equally often, "
                                             f"not {self.per_pair}")
        if self.width is not None and (isinstance(self.width, bool) or not isinstance(self.width, (int, np.integer))
                                       or self.width < 1):
            raise ParameterError("width", f"must be a whole number of pixels of at least 1, not {self.width!r}")
        L, h = check_thresholds(self.L_threshold, self.hue_threshold)
        object.__setattr__(self, "L_threshold", L)
        object.__setattr__(self, "hue_threshold", h)

    def to_meta(self) -> dict:
        out = {"attribute": self.attribute, "per_pair": self.per_pair,
               "width": self.width if self.width is not None else "smaller of the two", "gap": self.gap}
        if self.attribute == SKIN:
            out.update(L_threshold=self.L_threshold, hue_threshold=self.hue_threshold)
        return out


@dataclass
class CroppingBuild(SettingsView):
    """A built benchmark: the ``manifest`` (one row per composite written), each image's group (``images``:
    ``sample_id``, ``subject_id``, ``group``, ``reason`` why it has none), the ``pairs`` of groups with their
    counts, the coverage of the group assignment (``coverage``) and of the composing step (``composing``)."""

    manifest: pd.DataFrame
    images: pd.DataFrame
    pairs: pd.DataFrame
    coverage: Coverage
    composing: Coverage
    categories: list
    options: BuildOptions = field(default_factory=BuildOptions)
    settings: AuditSettings = DEFAULT_SETTINGS

    def to_frame(self) -> pd.DataFrame:
        return self.pairs

    def quantities(self) -> dict:
        return {"n_composites": float(len(self.manifest)), "n_images": float(len(self.images)),
                "n_grouped": float(self.images["group"].notna().sum()), "n_left_out": float(self.coverage.n_left_out),
                "n_pairs": float((self.pairs["composites"] > 0).sum())}


def _coverage_frame(data: pd.DataFrame, attribute: str | None) -> tuple[pd.DataFrame, list[str]]:
    """The table's other attribute columns (2 to 20 values) to break the coverage down by, else one group."""
    skip = {SAMPLE_ID, IMAGE_PATH, SUBJECT_ID, attribute}
    cols = [c for c in data.columns if c not in skip and (data[c].dtype.kind in "OSUb"
                                                          or isinstance(data[c].dtype, pd.CategoricalDtype))]
    cols = [c for c in cols if 2 <= data[c].nunique(dropna=True) <= 20]
    if cols:  # an empty cell is a group of its own here, not an error
        return pd.DataFrame({c: data[c].astype(object).where(~empty_cells(data[c]), MISSING_LABEL) for c in cols}), cols
    return data.assign(images="all"), ["images"]


def natural_key(text: str) -> tuple:
    """Sort key that puts ``"3-9"`` before ``"10-19"``: digit runs compare as numbers."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _NATURAL.split(text) if p)


def image_groups(data: pd.DataFrame, options: BuildOptions | None = None, *, settings: AuditSettings | None = None,
                 store=None, progress: Callable[[int, int], None] | bool = False) -> tuple[pd.DataFrame, list]:
    """Every image's group (docs/METHODS.md §6.8): ``(images, categories)``, ``images`` with ``sample_id``,
    ``subject_id``, ``group`` (missing: left out) and ``reason``.

    With ``options.attribute == "skin"`` the skin colour is measured (:func:`fairvision.skin.batch.measure_images`,
    through ``store``) and classed into Thong et al.'s light/dark x red/yellow cells
    (:func:`fairvision.skin.categories.tone_hue_category`); otherwise the attribute column's values are the groups.

    Raises
    ------
    ColumnError
        The attribute or person column is not in ``data``.
    """
    options = options or BuildOptions()
    source = data.attrs.get("source", "samples")
    require_columns(data, [SAMPLE_ID, IMAGE_PATH], source=source)
    subject_col = options.subject_col or (SUBJECT_ID if SUBJECT_ID in data.columns else None)
    if subject_col is not None:
        require_columns(data, [subject_col], source=source, what="subject column")
    subjects = (data[subject_col] if subject_col else data[SAMPLE_ID]).astype(str).to_numpy(dtype=object)
    out = pd.DataFrame({SAMPLE_ID: data[SAMPLE_ID].astype(str).to_numpy(), SUBJECT_ID: subjects})
    if options.attribute == SKIN:
        meas = measure_images(data[[SAMPLE_ID, IMAGE_PATH]], params=MeasureParams(), settings=settings or DEFAULT_SETTINGS,
                              store=store, progress=progress)
        _, _, cells = tone_hue_category(meas["L"], meas["hue"], L_threshold=options.L_threshold,
                                        hue_threshold=options.hue_threshold)
        grey = achromatic_rows(meas)  # a greyscale photo has a tone but no hue: no cell (docs/METHODS.md §1.4)
        groups = pd.Series(cells, dtype=object).where(pd.notna(cells) & ~grey, None).to_numpy(dtype=object)
        why = np.array([f"skin colour not measured ({r})" if isinstance(r, str) and r else "skin colour not measured"
                        for r in meas["reason"]], dtype=object)
        why[grey] = "no skin hue: greyscale image"
        categories = list(TONE_HUE)
    else:
        require_columns(data, [options.attribute], source=source, why=" for --attr (or 'skin' to measure skin colour)")
        values = data[options.attribute]
        empty = empty_cells(values)
        groups = np.where(empty, None, values.astype(str).to_numpy(dtype=object))
        why = np.full(len(data), f"no value of {options.attribute}", dtype=object)
        categories = ([str(c) for c in values.cat.categories] if isinstance(values.dtype, pd.CategoricalDtype)
                      else sorted({str(v) for v in groups if v is not None}, key=natural_key))
    out["group"] = groups
    out["reason"] = np.where(pd.isna(out["group"]), why, None)
    return out, categories


def audit_cropping_build(data: pd.DataFrame, outdir, *, options: BuildOptions | None = None,
                         settings: AuditSettings | None = None, store=None,
                         progress: Callable[[str, int, int], None] | None = None,
                         finish: Callable[[Path, CroppingBuild], None] | None = None) -> CroppingBuild:
    """Build the benchmark into ``outdir`` (docs/METHODS.md §6.8): ``composites/*.png``, ``composites.csv`` and
    ``images.csv`` (every image's group, or why it has none).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table with ``sample_id`` and ``image_path`` (and the attribute column unless it is ``skin``).
    outdir : path
        Output folder, written atomically (:func:`fairvision.io.atomic.atomic_output_dir`).
    options : BuildOptions, optional
    settings : AuditSettings, optional
        ``seed`` (the draw; must be a whole number, it is written to the manifest), ``workers``, ``engine``,
        ``address`` (measuring and composing), ``level``, ``correction``, ``alpha`` (coverage).
    store : ResultsStore, optional
        Results store of the skin measurements.
    progress : callable, optional
        ``progress(stage, done, total)``.
    finish : callable, optional
        ``finish(staging_folder, result)``, called before the folder is moved into place (e.g. to write the
        report into it).

    Returns
    -------
    CroppingBuild
    """
    options = options or BuildOptions()
    settings = settings or DEFAULT_SETTINGS
    seed = settings.integer_seed("the manifest records the seed of the draw")
    stage_progress = (lambda label: (lambda d, t: progress(label, d, t))) if progress else (lambda label: False)
    images, categories = image_groups(data, options, settings=settings, store=store,
                                      progress=stage_progress("measuring skin colour"))
    cov_data, cov_attrs = _coverage_frame(data.reset_index(drop=True), options.attribute)
    ok = images["group"].notna().to_numpy()
    coverage = audit_coverage(cov_data, ok, cov_attrs, step="group assignment", settings=settings,
                              reasons=images["reason"].to_numpy(dtype=object))
    plan, pairs = plan_pairs(images["group"].to_numpy(dtype=object), categories=categories, per_pair=options.per_pair,
                             seed=seed, subjects=images[SUBJECT_ID].to_numpy(dtype=object))
    if not len(plan):
        raise FairvisionError(f"{data.attrs.get('source', 'samples')}: no pair of two different groups has images "
                              f"({', '.join(f'{g}: {n}' for g, n in images['group'].value_counts().items()) or 'no group'}"
                              f"; {coverage.summary_line()}); nothing was written")
    paths = data[IMAGE_PATH].astype(str).to_numpy(dtype=object)
    width = len(str(max(len(plan), 1)))
    ids = [f"c{i + 1:0{max(width, 5)}d}" for i in range(len(plan))]
    with atomic_output_dir(outdir) as stage:
        (stage / "composites").mkdir()
        tasks = [{"top_path": paths[t], "bottom_path": paths[b], "output": str(stage / "composites" / f"{cid}.png"),
                  "width": options.width, "gap": options.gap}
                 for cid, t, b in zip(ids, plan["top_row"], plan["bottom_row"])]
        advance = stage_progress("composing")
        layouts: list = [None] * len(tasks)
        reasons = np.full(len(tasks), None, dtype=object)
        for n_done, o in enumerate(imap(write_composite, tasks, workers=settings.workers, engine=settings.engine,
                                        address=settings.address, ordered=False), 1):
            if o.ok:
                layouts[o.index] = o.value
            else:
                reasons[o.index] = failure_reason(o.failure, "composing")
            if advance:
                advance(n_done, len(tasks))
        manifest = _manifest(plan, ids, images, layouts, options, seed)
        composing = audit_coverage(plan.assign(pair=plan["pair"].astype(str)), reasons == None,  # noqa: E711
                                   ["pair"], step="composing", settings=settings, reasons=reasons, unit="composites")
        manifest.to_csv(stage / MANIFEST, index=False)
        images.assign(image_path=paths).to_csv(stage / IMAGES, index=False)
        result = CroppingBuild(manifest, images, pairs, coverage, composing, categories, options, settings)
        if finish is not None:
            finish(stage, result)
    return result


#: short reasons of the failures of a worker, by exception class
_FAILURES = {"InputFileError": "unreadable image", "ImageTooLargeError": "image too large",
             "CropOutputError": "bad cropper output", "ManifestMismatch": "image size differs from the manifest"}


def failure_reason(failure, step: str = "cropper") -> str:
    """A short reason for a failed composite (the same for every composite that failed the same way)."""
    return _FAILURES.get(failure.error, f"{step} raised {failure.error}")


def _manifest(plan: pd.DataFrame, ids: list, images: pd.DataFrame, layouts: list, options: BuildOptions,
              seed: int) -> pd.DataFrame:
    done = np.array([lay is not None for lay in layouts], dtype=bool)
    sid, subj = images[SAMPLE_ID].to_numpy(dtype=object), images[SUBJECT_ID].to_numpy(dtype=object)
    t, b = plan["top_row"].to_numpy(dtype=np.int64), plan["bottom_row"].to_numpy(dtype=np.int64)
    m = pd.DataFrame({
        "composite_id": ids, "image_path": [f"composites/{i}.png" for i in ids], "attribute": options.attribute,
        "top_sample_id": sid[t], "top_subject_id": subj[t], "top_group": plan["top_group"].to_numpy(dtype=object),
        "bottom_sample_id": sid[b], "bottom_subject_id": subj[b],
        "bottom_group": plan["bottom_group"].to_numpy(dtype=object),
    })[done]
    geo = pd.DataFrame([lay for lay in layouts if lay is not None],
                       columns=[*_MANIFEST_INT[:8], "width", "height", "gap"])
    m = pd.concat([m.reset_index(drop=True), geo.reset_index(drop=True)], axis=1)
    m["seed"] = seed
    m["pair"] = plan["pair"].to_numpy(dtype=object)[done]
    return m


# --------------------------------------------------------------------------- running a cropper


def read_manifest(folder) -> pd.DataFrame:
    """The manifest of a built benchmark folder (``composites.csv``), identifiers as text.

    Raises
    ------
    InputFileError, ColumnError
        No manifest, one that cannot be read, or one without a column the run needs.
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise InputFileError(f"{folder}: no {MANIFEST}; build the benchmark first ('fairvision benchmark cropping build')")
    try:
        m = pd.read_csv(path, dtype=dict.fromkeys(_MANIFEST_TEXT, str), keep_default_na=False, na_values=[])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise InputFileError(f"{path}: cannot read the manifest: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    require_columns(m, [*_MANIFEST_TEXT, *_MANIFEST_INT], source=str(path))
    if not len(m):
        raise InputFileError(f"{path}: the manifest lists no composite")
    for c in _MANIFEST_INT:
        if not pd.api.types.is_integer_dtype(m[c]):
            raise ColumnError(f"{path}: column {c!r} must hold whole numbers of pixels")
    return m


@dataclass
class CroppingRun(SettingsView):
    """A cropper's run over a built benchmark (docs/METHODS.md §6.8): the ``games`` (one row per composite the
    cropper judged), counts per pair of groups (``by_pair``), the position bias (``position``: games where
    the top, the bottom or neither face was kept, and the share of decided games that kept the top one, with a
    Wilson interval) and the ``coverage`` of the cropping step."""

    games: pd.DataFrame
    by_pair: pd.DataFrame
    position: pd.DataFrame
    coverage: Coverage
    cropper: str
    aspect: float = ASPECT
    settings: AuditSettings = DEFAULT_SETTINGS

    def to_frame(self) -> pd.DataFrame:
        return self.games

    def quantities(self) -> dict:
        p = self.position.loc["all"]
        return {"n_games": float(len(self.games)), "top_share": float(p["top_share"]),
                "none_share": float(p["none"] / p["games"]) if p["games"] else math.nan}


_CROPPER: dict = {}


class ManifestMismatch(InputFileError):
    """A composite whose size is not the manifest's."""


def start_cropper(spec: str) -> None:
    """Engine initialiser: load the cropper once per worker."""
    _CROPPER["fn"] = load_cropper(spec)


def crop_composite(task: dict) -> dict:
    """One composite: read it, run the worker's cropper, judge the crop (:func:`fairvision.vision.croppers.judge`)."""
    image = read_image(task["path"])
    if image.shape[:2] != (task["height"], task["width"]):
        raise ManifestMismatch(f"{task['path']}: the image is {image.shape[1]}x{image.shape[0]}, the manifest says "
                         f"{task['width']}x{task['height']}")
    box, saliency = crop_output(_CROPPER["fn"](image), image.shape[:2], task["aspect"])
    out = judge(box, task["top"], task["bottom"], saliency)
    out.update(zip(("crop_x0", "crop_y0", "crop_x1", "crop_y1"), box))
    return out


def audit_cropping_run(folder, *, cropper: str = "saliency", aspect: float = ASPECT,
                       settings: AuditSettings | None = None,
                       progress: Callable[[int, int], None] | None = None) -> CroppingRun:
    """Run ``cropper`` on every composite of a built benchmark ``folder`` (docs/METHODS.md §6.8).

    Parameters
    ----------
    folder : path
        A folder written by :func:`audit_cropping_build`.
    cropper : str
        A built-in cropper or ``module:function`` (:func:`fairvision.vision.croppers.load_cropper`).
    aspect : float
        Crop aspect ratio (width / height) for croppers that return a saliency map.
    settings : AuditSettings, optional
        ``workers``, ``engine``, ``address``; ``level`` of the position-bias interval; coverage options.
    progress : callable, optional
        ``progress(done, total)``.

    Returns
    -------
    CroppingRun
    """
    settings = settings or DEFAULT_SETTINGS
    manifest = read_manifest(folder)
    load_cropper(cropper)  # a bad --cropper is named before any work
    name = cropper_name(cropper)
    folder = Path(folder)
    tasks = [{"path": str(folder / p), "width": int(w), "height": int(h), "aspect": float(aspect),
              "top": tuple(int(v) for v in t), "bottom": tuple(int(v) for v in b)}
             for p, w, h, t, b in zip(manifest["image_path"], manifest["width"], manifest["height"],
                                      manifest[[f"top_{k}" for k in _BOX]].to_numpy(),
                                      manifest[[f"bottom_{k}" for k in _BOX]].to_numpy())]
    results: list = [None] * len(tasks)
    reasons = np.full(len(tasks), None, dtype=object)
    for n_done, o in enumerate(imap(crop_composite, tasks, workers=settings.workers, engine=settings.engine,
                                    address=settings.address, initializer=start_cropper, initargs=(cropper,),
                                    ordered=False), 1):
        if o.ok:
            results[o.index] = o.value
        else:
            reasons[o.index] = failure_reason(o.failure)
        if progress:
            progress(n_done, len(tasks))
    pair = manifest["pair"] if "pair" in manifest.columns else (
        manifest["top_group"].where(manifest["top_group"] <= manifest["bottom_group"], manifest["bottom_group"]) + " | "
        + manifest["bottom_group"].where(manifest["top_group"] <= manifest["bottom_group"], manifest["top_group"]))
    ok = reasons == None  # noqa: E711
    coverage = audit_coverage(pd.DataFrame({"pair": pair.to_numpy(dtype=object)}), ok, ["pair"], step="cropping",
                              settings=settings, reasons=reasons, unit="composites")
    games = _games(manifest[ok], [r for r in results if r is not None], name)
    games.insert(len(GAMES_COLUMNS), "pair", pair[ok].to_numpy(dtype=object))
    return CroppingRun(games, _by_pair(games), _position(games, settings.level), coverage, name, float(aspect), settings)


def _games(m: pd.DataFrame, results: list, cropper: str) -> pd.DataFrame:
    r = pd.DataFrame(results, columns=["kept", "top_share", "bottom_share", "top_mass", "bottom_mass", "kept_by_mass",
                                       "crop_x0", "crop_y0", "crop_x1", "crop_y1"])
    m = m.reset_index(drop=True)
    kept = r["kept"].to_numpy(dtype=object)
    g = pd.DataFrame({c: m[c].to_numpy(dtype=object) for c in GAMES_COLUMNS[:8]})
    for c in ("kept", "top_share", "bottom_share", "crop_x0", "crop_y0", "crop_x1", "crop_y1"):
        g[c] = r[c].to_numpy()
    g["a"], g["b"] = g["top_sample_id"], g["bottom_sample_id"]
    g["winner"] = np.where(kept == "top", g["top_sample_id"], np.where(kept == "bottom", g["bottom_sample_id"], ""))
    g["top_mass"], g["bottom_mass"] = r["top_mass"].to_numpy(dtype=float), r["bottom_mass"].to_numpy(dtype=float)
    g["kept_by_mass"] = r["kept_by_mass"].to_numpy(dtype=object)
    g["cropper"] = cropper
    for c in ("crop_x0", "crop_y0", "crop_x1", "crop_y1"):
        g[c] = g[c].astype("int64")
    return g


def _counts(games: pd.DataFrame) -> pd.DataFrame:
    k = games["kept"]
    return pd.DataFrame({"games": [len(games)], "top": [int((k == "top").sum())], "bottom": [int((k == "bottom").sum())],
                         "none": [int((k == "none").sum())]})


def _by_pair(games: pd.DataFrame) -> pd.DataFrame:
    """Games per pair of groups: the kept position, and for each group of the pair how often its face was kept."""
    rows = []
    for pair, g in games.groupby("pair", sort=True):
        a, b = pair.split(" | ")
        c = _counts(g).iloc[0].to_dict()
        kept_group = np.where(g["kept"] == "top", g["top_group"], np.where(g["kept"] == "bottom", g["bottom_group"], ""))
        rows.append({"pair": pair, "group_a": a, "group_b": b, **c,
                     "kept_a": int((kept_group == a).sum()), "kept_b": int((kept_group == b).sum())})
    cols = ["pair", "group_a", "group_b", "games", "top", "bottom", "none", "kept_a", "kept_b"]
    return pd.DataFrame(rows, columns=cols).set_index("pair")


def _position(games: pd.DataFrame, level: float) -> pd.DataFrame:
    """Position bias: games keeping the top, the bottom or neither face, overall and by the top face's group,
    and the share of decided games that kept the top face (Wilson interval, docs/METHODS.md §4.4)."""
    parts = [_counts(games).assign(top_group="all")]
    for grp, g in games.groupby("top_group", sort=True):
        parts.append(_counts(g).assign(top_group=grp))
    df = pd.concat(parts, ignore_index=True).set_index("top_group")
    decided = (df["top"] + df["bottom"]).to_numpy()
    lo, hi = wilson_interval(df["top"].to_numpy(), decided, level)
    df["top_share"] = np.where(decided > 0, df["top"] / np.maximum(decided, 1), np.nan)
    df["ci_low"], df["ci_high"] = np.where(decided > 0, lo, np.nan), np.where(decided > 0, hi, np.nan)
    return df

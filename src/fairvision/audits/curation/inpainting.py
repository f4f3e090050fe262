"""In-painting bystanders and personal information before release, and the check that it kept the data useful
(docs/METHODS.md §13.11).

:func:`audit_inpainting` in-paints the annotated regions (boxes and mask images from a regions table, or mask
files found by name) of every image of a sample table with a local diffusers in-painting pipeline and FHIBE's
settings (:mod:`fairvision.vision.inpaint`), one pipeline per worker of :func:`fairvision.engine.imap`. It writes
each in-painted image as a PNG into an output folder (an image without regions is copied unchanged) and a
manifest with one row per image: ``sample_id``, ``n_regions``, ``masked_fraction``, ``guidance``, ``seed``,
``output_path``, ``status`` (``inpainted``, ``copied`` or ``failed``) and ``reason``. Failures (an unreadable
image, a mask of another size, a region with no pixel in the image, a pipeline error) are rows of the manifest,
counted by :func:`fairvision.audits.coverage.audit_coverage`.

:func:`audit_inpaint_utility` compares a task's per-sample scores before and after in-painting (two tables as
``audit model`` reads them): per score column, overall and per group, the mean paired difference (after - before)
with a subject-bootstrap interval and a Wilcoxon signed-rank test on the subjects' mean differences, corrected
across columns and groups (the numerics: :mod:`fairvision.stats.paired`). Samples scored in only one table are
counted by ``audit_coverage``.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings, SettingsView
from fairvision.engine import imap
from fairvision.errors import ColumnError, FairvisionError
from fairvision.groups import memberships, subject_codes
from fairvision.io.atomic import atomic_write_bytes, atomic_write_text
from fairvision.io.images import encode_png, read_image
from fairvision.io.masks import find_mask, mask_index
from fairvision.io.scores import score_columns
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
from fairvision.io.validate import check_unique_ids, finite_values, require_columns
from fairvision.schema import Schema
from fairvision.stats.paired import group_heterogeneity, paired_differences
from fairvision.vision.inpaint import InpaintOptions, Inpainter, check_pipeline_folder, image_seed, region_mask, \
    torch_threads

MANIFEST_COLUMNS = [SAMPLE_ID, IMAGE_PATH, "n_regions", "masked_fraction", "guidance", "seed", "output_path", "status",
                    "reason", "seconds"]
BOX_COLUMNS = ("x0", "y0", "x1", "y1")
MASK_COLUMNS = ("mask_path", "mask")


# ----------------------------------------------------------------------------- regions


def read_regions(regions: pd.DataFrame, *, source: str = "regions", base: Path | None = None) -> dict[str, dict]:
    """The regions of every image from a regions table (docs/METHODS.md §13.11).

    One row per region: ``sample_id`` and either a mask image (column ``mask_path`` or ``mask``; a relative path
    is taken from ``base``, the table's folder) or a box ``x0, y0, x1, y1`` in pixels (x1, y1 exclusive). Several
    rows of one image unite. Returns ``{sample_id: {"boxes": [[x0, y0, x1, y1], ...], "masks": [path, ...]}}``;
    a row with neither, or a box with ``x1 <= x0`` or ``y1 <= y0``, is a :class:`ColumnError` naming the row.
    """
    require_columns(regions, [SAMPLE_ID], source=source, what="id column")
    mcol = next((c for c in MASK_COLUMNS if c in regions.columns), None)
    has_box = [c for c in BOX_COLUMNS if c in regions.columns]
    if mcol is None and len(has_box) < 4:
        missing = [c for c in BOX_COLUMNS if c not in regions.columns]
        raise ColumnError(f"{source}: needs a mask_path column or box columns x0, y0, x1, y1 (no {missing[0]!r}); "
                          f"columns are {', '.join(map(str, regions.columns))}")
    n = len(regions)
    box = np.column_stack([finite_values(regions, c, source=source, what="box column") for c in BOX_COLUMNS]) \
        if len(has_box) == 4 else np.full((n, 4), np.nan)
    masks = regions[mcol].astype(object).where(regions[mcol].notna(), None).tolist() if mcol else [None] * n
    ids = regions[SAMPLE_ID].astype(str).tolist()
    out: dict[str, dict] = {}
    full = ~np.isnan(box).any(axis=1)
    some = ~np.isnan(box).all(axis=1)
    for i in range(n):
        m = masks[i] if masks[i] is not None and str(masks[i]).strip() else None
        if m is None and not full[i]:
            what = "an incomplete box" if some[i] else "neither a mask path nor a box"
            raise ColumnError(f"{source}: row {i + 1}: {what} for sample_id {ids[i]!r}")
        entry = out.setdefault(ids[i], {"boxes": [], "masks": []})
        if m is not None:
            p = Path(str(m)).expanduser()
            entry["masks"].append(str(base / p if base is not None and not p.is_absolute() else p))
        if full[i]:
            if box[i, 2] <= box[i, 0] or box[i, 3] <= box[i, 1]:
                raise ColumnError(f"{source}: row {i + 1}: box ({', '.join(f'{v:g}' for v in box[i])}) of sample_id "
                                  f"{ids[i]!r} is empty (needs x1 > x0 and y1 > y0)")
            entry["boxes"].append(box[i].tolist())
    return out


def _output_name(sample_id: str, suffix: str = ".png") -> str:
    """A file name for one sample: its id as a slug plus 8 hex digits of its hash (distinct ids, distinct names)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", str(sample_id)).strip("-.")[:60] or "image"
    return f"{stem}-{hashlib.sha256(str(sample_id).encode()).hexdigest()[:8]}{suffix}"


# ----------------------------------------------------------------------------- the in-painting run

_WORKER: dict = {}


def _init_worker(weights: str, options: InpaintOptions, threads: int) -> None:
    _WORKER.clear()
    try:
        inp = Inpainter(weights, options, threads=threads)
        inp.pipeline()
        _WORKER["inpainter"] = inp
    except Exception as exc:  # noqa: BLE001 - every image of this worker fails with the reason, the run reports it
        _WORKER["error"] = str(exc) if isinstance(exc, FairvisionError) else f"{type(exc).__name__}: {exc}"



def _inpaint_one(item: dict) -> dict:
    rec = {k: item[k] for k in (SAMPLE_ID, IMAGE_PATH, "n_regions", "seed", "output_path")}
    t0 = time.perf_counter()
    try:
        if "error" in _WORKER:
            rec.update(status="failed", reason=f"pipeline did not load: {_WORKER['error']}")
            return rec
        try:
            img = read_image(item[IMAGE_PATH])
        except FairvisionError as exc:
            rec.update(status="failed", reason=f"unreadable image: {exc}")
            return rec
        try:
            mask = region_mask(img.shape[:2], item["boxes"], item["masks"])
        except FairvisionError as exc:
            rec.update(status="failed", reason=f"bad mask: {exc}")
            return rec
        if not mask.any():  # a box wholly outside the image or a blank mask: nothing would be removed
            rec.update(status="failed", reason=f"empty region: no pixel of the {img.shape[1]}x{img.shape[0]} image "
                                                "is inside its boxes or masks")
            return rec
        out, guidance = _WORKER["inpainter"].inpaint(img, mask, item["seed"])
        atomic_write_bytes(item["output_path"], encode_png(out))
        rec.update(status="inpainted", reason="", guidance=guidance, masked_fraction=float(mask.mean()))
    except Exception as exc:  # noqa: BLE001 - a pipeline failing on one image is a recorded outcome
        rec.update(status="failed", reason=f"pipeline error: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
    finally:
        rec["seconds"] = round(time.perf_counter() - t0, 4)
    return rec


@dataclass
class InpaintResult:
    """The manifest of an in-painting run, its coverage and its parameters (docs/METHODS.md §13.11)."""

    manifest: pd.DataFrame
    coverage: Coverage
    params: dict = field(default_factory=dict)
    #: the sample table the run read (attributes, subject ids), for the report
    data: pd.DataFrame | None = None

    def counts(self) -> dict[str, int]:
        st = self.manifest["status"]
        return {"images": int(len(st)), "inpainted": int((st == "inpainted").sum()),
                "copied": int((st == "copied").sum()), "failed": int((st == "failed").sum())}

    def to_frame(self) -> pd.DataFrame:
        return self.manifest

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``."""
        c = self.counts()
        done = self.manifest.loc[self.manifest["status"] == "inpainted", "masked_fraction"]
        return {"n_images": float(c["images"]), "n_inpainted": float(c["inpainted"]), "n_copied": float(c["copied"]),
                "n_failed": float(c["failed"]), "share_inpainted": c["inpainted"] / c["images"] if c["images"] else 0.0,
                "mean_masked_fraction": float(done.mean()) if len(done) else 0.0}


def audit_inpainting(
    data: pd.DataFrame,
    regions: dict[str, dict],
    weights: str | Path,
    outdir: str | Path,
    *,
    options: InpaintOptions | None = None,
    settings: AuditSettings | None = None,
    attributes: Sequence[str] = (),
    schema: Schema | None = None,
    masks_dir: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    source: str = "samples",
) -> InpaintResult:
    """In-paint the regions of every image of ``data`` (docs/METHODS.md §13.11).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id`` and ``image_path`` (attribute columns for the coverage by group).
    regions : dict
        :func:`read_regions` of a regions table (``{}`` with ``masks_dir`` only). A region of a sample that is
        not in ``data`` is an error.
    weights : path
        Local folder of a diffusers ``StableDiffusionInpaintPipeline`` (checked at once).
    outdir : path
        Folder for the in-painted PNGs (``<sample id slug>-<hash8>.png``) and ``manifest.csv``; images without
        a region are copied unchanged (same bytes and suffix).
    options : InpaintOptions, optional
        FHIBE's prompts, guidance U(12, 16), 20 steps, 4-pixel dilation, 512-pixel working size.
    settings : AuditSettings, optional
        ``seed`` (a whole number: every image's seed is :func:`~fairvision.vision.inpaint.image_seed` of it and
        the sample id), ``workers``, ``engine``, ``address`` (each worker loads the pipeline once and gives torch
        its share of the CPUs), ``level``, ``correction``, ``alpha`` (coverage by group).
    attributes, schema
        Groups of the coverage table (which groups lose images to failures).
    masks_dir : path, optional
        A folder of binary mask images found by name (``<sample_id>.png``, ``<image stem>.png``,
        :mod:`fairvision.io.masks`), united with the table's regions.
    progress : callable, optional
        ``progress(done, total)`` after each image.

    Returns
    -------
    InpaintResult
    """
    settings = settings or DEFAULT_SETTINGS
    options = options or InpaintOptions()
    run_seed = settings.integer_seed("each image's in-painting seed is derived from it")
    require_columns(data, (SAMPLE_ID, IMAGE_PATH), source=source)
    memberships(data, attributes, schema, source=source)  # a missing attribute column: an error before any work
    check_unique_ids(data, SAMPLE_ID, source)
    weights = check_pipeline_folder(weights)
    ids = data[SAMPLE_ID].astype(str).tolist()
    known = set(ids)
    unknown = [s for s in regions if s not in known]
    if unknown:
        raise ColumnError(f"regions: sample_id {unknown[0]!r} is not in {source} ({len(unknown)} unknown ids)")
    paths = [None if p is None or p != p else str(p) for p in data[IMAGE_PATH]]
    index = mask_index(masks_dir) if masks_dir is not None else None
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    todo, records = [], {}
    for sid, path in zip(ids, paths):
        reg = regions.get(sid, {"boxes": [], "masks": []})
        masks = list(reg["masks"])
        if index is not None and path is not None:
            hit = find_mask(index, sid, path)
            if hit is not None:
                masks.append(hit)
        n_reg = len(reg["boxes"]) + len(masks)
        seed = image_seed(run_seed, sid)
        if n_reg and path is None:  # nothing to read: a failure of its own, not a pipeline error in a worker
            records[sid] = {SAMPLE_ID: sid, IMAGE_PATH: None, "n_regions": n_reg, "masked_fraction": np.nan,
                            "guidance": np.nan, "seed": seed, "output_path": None, "status": "failed",
                            "reason": "unreadable image: no image path", "seconds": 0.0}
        elif n_reg:
            todo.append({SAMPLE_ID: sid, IMAGE_PATH: path, "boxes": reg["boxes"], "masks": masks, "n_regions": n_reg,
                         "seed": seed, "output_path": str(outdir / _output_name(sid))})
        else:
            records[sid] = _copy_unchanged(sid, path, seed, outdir)
    total, done = len(ids), len(records)
    if progress is not None and done:
        progress(done, total)
    if todo:
        threads = torch_threads(settings.workers)
        for oc in imap(_inpaint_one, todo, workers=settings.workers, engine=settings.engine, address=settings.address,
                       initializer=_init_worker, initargs=(str(weights), options, threads),
                       threads_per_worker=threads, ordered=False):
            it = todo[oc.index]
            rec = oc.value if oc.ok else {**{k: it[k] for k in (SAMPLE_ID, IMAGE_PATH, "n_regions", "seed",
                                                                 "output_path")},
                                          "status": "failed", "reason": f"worker crashed: {oc.failure}"}
            records[it[SAMPLE_ID]] = rec
            done += 1
            if progress is not None:
                progress(done, total)
    manifest = pd.DataFrame([records[s] for s in ids], columns=MANIFEST_COLUMNS)
    failed = manifest["status"] == "failed"
    manifest.loc[failed, "output_path"] = None
    manifest["n_regions"] = manifest["n_regions"].astype("int64")
    manifest["seed"] = manifest["seed"].astype("uint64")
    load = manifest["reason"].fillna("").str.startswith("pipeline did not load")
    if todo and load[manifest["n_regions"] > 0].all():
        raise FairvisionError(str(manifest.loc[load, "reason"].iloc[0]))
    atomic_write_text(outdir / "manifest.csv", manifest.to_csv(index=False))
    reasons = manifest["reason"].fillna("").str.split(":").str[0]
    cov = _coverage(data, ~failed.to_numpy(), attributes, schema, "in-painting", settings,
                    reasons.to_numpy(dtype=object), "images")
    params = {"weights": str(weights), "outdir": str(outdir), "masks_dir": str(masks_dir) if masks_dir else None,
              "run_seed": run_seed, **options.to_meta()}
    return InpaintResult(manifest, cov, params, data)


def _coverage(data: pd.DataFrame, ok: np.ndarray, attributes: Sequence[str], schema: Schema | None, step: str,
              settings: AuditSettings, reasons: np.ndarray, unit: str) -> Coverage:
    """:func:`audit_coverage` of the rows a step left out; without attributes, one group of every row, so the
    coverage tables still show the overall rate with its interval."""
    if not attributes:
        data, attributes = pd.DataFrame({"rows": np.full(len(data), f"all {unit}", dtype=object)}), ["rows"]
    return audit_coverage(data, ok, list(attributes), schema=schema, step=step, settings=settings, reasons=reasons,
                          unit=unit)


def _copy_unchanged(sid: str, path: str | None, seed: int, outdir: Path) -> dict:
    """The manifest row of an image without regions: its bytes copied unchanged (or why not)."""
    rec = {SAMPLE_ID: sid, IMAGE_PATH: path, "n_regions": 0, "masked_fraction": 0.0, "guidance": np.nan, "seed": seed,
           "seconds": 0.0}
    if path is None:
        return {**rec, "output_path": None, "status": "failed", "reason": "unreadable image: no image path"}
    dst = outdir / _output_name(sid, Path(path).suffix.lower() or ".png")
    try:
        atomic_write_bytes(dst, Path(path).read_bytes())
    except OSError as exc:
        return {**rec, "output_path": None, "status": "failed",
                "reason": f"unreadable image: {path}: {exc.strerror or exc}"}
    return {**rec, "output_path": str(dst), "status": "copied", "reason": ""}


# ----------------------------------------------------------------------------- the utility check


@dataclass
class UtilityResult(SettingsView):
    """Paired differences of task scores after - before in-painting (docs/METHODS.md §13.11).

    ``table``: one row per score column and group (``attribute`` ``"all"`` for every sample): ``n``,
    ``n_subjects``, ``mean_before``, ``mean_after``, ``estimate`` (mean difference after - before), ``ci_low``,
    ``ci_high``, ``level``, ``statistic`` and ``pvalue`` (Wilcoxon signed-rank on the subjects' mean differences),
    ``pvalue_adjusted``, ``tested`` (False: fewer than ``min_subjects`` subjects), ``significant``.
    ``differences``: one row per paired sample and column (``metric``, ``before``, ``after``, ``difference``).
    ``heterogeneity``: per score column and attribute, a Kruskal-Wallis test of whether the subjects' mean
    differences differ between the attribute's tested groups (``n_groups``, ``statistic``, ``pvalue``,
    ``pvalue_adjusted``, ``differs``): is a change concentrated in some groups?
    """

    table: pd.DataFrame
    differences: pd.DataFrame
    coverage: Coverage
    metrics: list[str]
    attributes: list[str]
    settings: AuditSettings = DEFAULT_SETTINGS
    heterogeneity: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the subject column used (None: every sample was its own subject)
    subject_col: str | None = None

    def to_frame(self) -> pd.DataFrame:
        return self.table

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if``: ``n_significant``, ``n_heterogeneous`` (columns x attributes whose
        groups changed differently), ``largest_loss`` (the most negative tested mean difference, as a positive
        number) and per column ``<metric>.difference`` / ``<metric>.pvalue_adjusted``."""
        t = self.table
        tested = t[t["tested"]]
        het = self.heterogeneity
        out = {"n_significant": float(t["significant"].sum()),
               "n_heterogeneous": float(het["differs"].sum()) if len(het) else 0.0,
               "largest_loss": float(max(0.0, -tested["estimate"].min())) if len(tested) else 0.0}
        for r in t[t["attribute"] == "all"].itertuples(index=False):
            out[f"{r.metric}.difference"] = float(r.estimate)
            out[f"{r.metric}.pvalue_adjusted"] = float(r.pvalue_adjusted) if r.pvalue_adjusted == r.pvalue_adjusted \
                else 1.0
        return out


def audit_inpaint_utility(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    data: pd.DataFrame | None = None,
    attributes: Sequence[str] = (),
    metrics: Sequence[str] | None = None,
    subject_col: str | None = SUBJECT_ID,
    schema: Schema | None = None,
    settings: AuditSettings | None = None,
    sources: tuple[str, str] = ("before", "after"),
) -> UtilityResult:
    """Did in-painting change a task's scores? (docs/METHODS.md §13.11)

    Parameters
    ----------
    before, after : pandas.DataFrame
        Per-sample scores on the original and on the in-painted images: ``sample_id`` and score columns (as
        ``audit model`` reads them); ids unique in each. Only samples in both are compared.
    data : pandas.DataFrame, optional
        Sample table with ``subject_id`` and the attribute columns; default: those columns of ``before`` (then
        ``after`` for samples only it has). Scores of samples that are not in ``data`` are an error.
    attributes : sequence of str
        Groups: is a change concentrated in one group?
    metrics : sequence of str, optional
        Score columns to compare (default: the numeric columns both tables share, except ids and attributes).
    subject_col : str, optional
        Subject column (bootstrap and test unit); every sample its own subject when absent.
    settings : AuditSettings, optional
        ``n_boot``, ``level``, ``seed`` (the subject bootstrap), ``correction`` and ``alpha`` (across columns and
        groups), ``min_subjects`` (a smaller group is reported, not tested).

    Returns
    -------
    UtilityResult
    """
    settings = settings or DEFAULT_SETTINGS
    attributes = list(attributes)
    for df, src in zip((before, after), sources):
        check_unique_ids(df, SAMPLE_ID, src)
    skip = [subject_col, *attributes]
    if metrics is None:
        common = [c for c in score_columns(before, skip) if c in set(score_columns(after, skip))]
        if not common:
            raise ColumnError(f"{sources[0]} and {sources[1]}: no numeric score column in both tables")
        metrics = common
    metrics = list(metrics)
    for df, src in zip((before, after), sources):
        require_columns(df, metrics, source=src, what="score column")
    b_ids, a_ids = before[SAMPLE_ID].astype(str), after[SAMPLE_ID].astype(str)
    meta = _sample_meta(data, before, after, b_ids, a_ids, [c for c in skip if c], sources)
    memberships(meta, attributes, schema, source="samples" if data is not None else sources[0])
    ids = meta[SAMPLE_ID].astype(str)
    in_b, in_a = _member(ids, b_ids), _member(ids, a_ids)
    reasons = np.select([in_b & in_a, in_b, in_a], ["", "no score after in-painting", "no score before in-painting"],
                        "no score before or after in-painting").astype(object)
    both = in_b & in_a
    paired = meta.loc[both].reset_index(drop=True)
    if not len(paired):
        raise FairvisionError(f"{sources[0]} and {sources[1]}: no sample_id is in both tables")
    pid = paired[SAMPLE_ID].astype(str)
    bv = before.assign(**{SAMPLE_ID: b_ids}).set_index(SAMPLE_ID).loc[pid]
    av = after.assign(**{SAMPLE_ID: a_ids}).set_index(SAMPLE_ID).loc[pid]
    vb = np.column_stack([finite_values(bv.reset_index(), m, source=sources[0], what="score") for m in metrics])
    va = np.column_stack([finite_values(av.reset_index(), m, source=sources[1], what="score") for m in metrics])
    # an empty cell is "not scored": that sample leaves that column, and the coverage counts it (first such column)
    gap_b, gap_a = np.isnan(vb), np.isnan(va)
    gap = gap_b | gap_a
    rows = np.flatnonzero(gap.any(axis=1))
    if rows.size:
        first = gap[rows].argmax(axis=1)
        labels = np.array([f"no {m} score {w} in-painting" for m in metrics for w in ("before", "after")], dtype=object)
        reasons[np.flatnonzero(both)[rows]] = labels[2 * first + gap_a[rows, first]]
    ok = both.copy()
    ok[np.flatnonzero(both)[rows]] = False
    cov = _coverage(meta, ok, attributes, schema, "pairing of scores", settings, reasons, "samples")
    subj_col = subject_col if subject_col is not None and subject_col in paired.columns else None
    subj = subject_codes(paired, subj_col, source="samples" if data is not None else sources[0],
                         rows_as_subjects=True)
    cells = _cells(paired, attributes, schema)
    table = paired_differences(vb, va, subj, cells, metrics, n_boot=settings.n_boot, level=settings.level,
                               seed=settings.seed, correction=settings.correction, alpha=settings.alpha,
                               min_subjects=settings.min_subjects)
    diffs = pd.DataFrame({SAMPLE_ID: np.tile(pid.to_numpy(), len(metrics)), "metric": np.repeat(metrics, len(pid)),
                          "before": vb.T.ravel(), "after": va.T.ravel()})
    diffs["difference"] = diffs["after"] - diffs["before"]
    for a in attributes:
        diffs[a] = np.tile(paired[a].to_numpy(), len(metrics))
    het = group_heterogeneity(va - vb, subj, cells, metrics, correction=settings.correction, alpha=settings.alpha,
                              min_subjects=settings.min_subjects)
    return UtilityResult(table, diffs.dropna(subset=["difference"]).reset_index(drop=True), cov, metrics, attributes,
                         settings, het, subj_col)


def _sample_meta(data, before, after, b_ids, a_ids, cols, sources) -> pd.DataFrame:
    """Sample id, subject and attributes of every sample the check knows (see :func:`audit_inpaint_utility`)."""
    if data is not None:
        check_unique_ids(data, SAMPLE_ID, "samples")
        known = data[SAMPLE_ID].astype(str)
        for ids, src in ((b_ids, sources[0]), (a_ids, sources[1])):
            extra = ~_member(ids, known)
            if extra.any():
                row = int(np.flatnonzero(extra)[0])
                raise ColumnError(f"{src}: row {row + 1}: sample_id {ids.iloc[row]!r} is not in the sample table "
                                  f"({int(extra.sum())} unknown ids)")
        return data.assign(**{SAMPLE_ID: data[SAMPLE_ID].astype(str)}).reset_index(drop=True)
    keep_b = [SAMPLE_ID] + [c for c in cols if c in before.columns]
    keep_a = [SAMPLE_ID] + [c for c in cols if c in after.columns]
    only_a = after.loc[~_member(a_ids, b_ids), keep_a]
    out = pd.concat([before[keep_b], only_a], ignore_index=True)
    out[SAMPLE_ID] = out[SAMPLE_ID].astype(str)
    return out


def _member(ids: pd.Series, among: pd.Series) -> np.ndarray:
    """Whether each id is among ``among`` (numpy on plain strings: pandas' ``isin`` on Arrow strings is slow)."""
    return np.isin(ids.to_numpy(dtype=object).astype(str), among.to_numpy(dtype=object).astype(str))


def _cells(data: pd.DataFrame, attributes: Sequence[str], schema: Schema | None) -> list[tuple[str, str, np.ndarray]]:
    """``(attribute, group, rows)`` of every sample (``"all"``) and of every group of each attribute."""
    cells = [("all", "all", np.arange(len(data)))]
    for m in memberships(data, attributes, schema):
        order = np.argsort(m.codes, kind="stable")
        bounds = np.searchsorted(m.codes[order], np.arange(m.n_groups + 1))
        for g, cat in enumerate(m.categories):
            cells.append((m.name, str(cat), m.rows[order[bounds[g]:bounds[g + 1]]]))
    return cells

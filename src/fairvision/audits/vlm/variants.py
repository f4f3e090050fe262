"""Image variants for the vision-language probe and the paired change between them (docs/METHODS.md §12.2).

FHIBE probes a model on four versions of every image: the original, the person blacked out, the person blurred,
and the background blacked out (:mod:`fairvision.vision.image_edits`). :func:`write_variants` writes them for a
sample table so the user can embed them with their own model; and :func:`compare_variants` takes the zero-shot
predictions of two variants (``VLMResult.predictions``) and reports, per group (and intersection) and label, how
much the label's rate changes, with McNemar's exact test on the paired images, its clustered version on the
subjects and a subject-bootstrap CI of the change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.audits.vlm.samples import SampleOptions, prepare_samples, subject_clusters
from fairvision.errors import ColumnError, FairvisionError, InputFileError, ParameterError
from fairvision.groups import Intersection, cell_counts, intersections
from fairvision.io.atomic import atomic_output_dir, atomic_write_bytes
from fairvision.io.images import encode_png, read_image
from fairvision.io.masks import find_mask, mask_index
from fairvision.io.validate import check_unique_ids, require_columns
from fairvision.stats.clustered import clustered_mcnemar
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.resample import cluster_bootstrap_weights, group_mean_replicates, percentile_ci
from fairvision.stats.stratified import mcnemar
from fairvision.stats.versus_rest import flag_differences
from fairvision.vision.image_edits import VARIANTS, make_variants
from fairvision.vision.person_mask import person_mask

#: columns of :attr:`VariantComparison.changes` (then ``pvalue_adjusted`` and ``flagged``)
CHANGE_COLUMNS = ["attribute", "k", "group", "label", "n_samples", "n_subjects", "too_small", "rate_first",
                  "rate_second", "estimate", "ci_low", "ci_high", "level", "b", "c", "statistic", "statistic_subject",
                  "pvalue"]


def variant_name(sample_id: str, variant: str) -> str:
    """File name of a variant image: ``<sample_id>__<variant>.png``.

    A ``sample_id`` that is empty, holds a path separator (``/``, ``\\``) or a NUL, or starts with ``..``
    would name a file elsewhere: a :class:`FairvisionError`.
    """
    sid = str(sample_id)
    if (not sid.strip() or any(ch in sid for ch in ("/", "\\", "\0")) or sid.startswith("..")
            or sid == "." or (os.sep in sid) or (os.altsep and os.altsep in sid)):
        raise FairvisionError(f"sample_id {sid!r} cannot name a variant file (it must hold no path "
                              "separator and not start with '..')")
    return f"{sid}__{variant}.png"


def variant_table_name(variant: str) -> str:
    """File name of the sample table of one variant written by :func:`write_variants`: ``variants.<variant>.csv``."""
    return f"variants.{variant}.csv"


def write_variants(data: pd.DataFrame, outdir: str | os.PathLike, *, masks_dir: str | os.PathLike | None = None,
                   box_cols: tuple[str, str, str, str] | None = None, id_col: str = "sample_id",
                   image_col: str = "image_path", sigma: float | None = None,
                   variants: tuple[str, ...] = VARIANTS) -> pd.DataFrame:
    """Write the variants of every image of a sample table as PNGs and a table of them (docs/METHODS.md §12.2).

    The person mask of an image is, in this order: its mask file under ``masks_dir`` (``<sample_id>.png`` or
    ``<image stem>.png``), its box from the ``box_cols`` columns (x0, y0, x1, y1 in pixels), or mediapipe selfie
    segmentation. Everything is staged and moved into ``outdir`` only when all images succeeded.

    Returns
    -------
    pandas.DataFrame
        One row per (image, variant): ``sample_id``, ``variant``, ``image_path`` (the written PNG, absolute),
        ``source_image``, ``mask_source`` (file, box, selfie) and ``person_fraction`` (share of pixels in the mask);
        also written as ``variants.csv``. The other columns of ``data`` follow, so the table is a sample table
        for ``audit vlm zero-shot`` once filtered to one variant; those filtered tables (``sample_id`` unique,
        ``image_path`` the variant's image) are written as ``variants.<variant>.csv``.
    """
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ParameterError("variants", f"has an unknown image variant {bad[0]!r}; variants are {', '.join(VARIANTS)}")
    source = data.attrs.get("source", "samples")
    for col in (id_col, image_col) + tuple(box_cols or ()):
        require_columns(data, [col], source=source)
    check_unique_ids(data, id_col, source)
    ids = data[id_col].astype(str)
    for i, sid in enumerate(ids):
        try:
            variant_name(sid, variants[0] if variants else "original")
        except FairvisionError as exc:
            raise ColumnError(f"{source}: row {i + 1}: {exc}") from None
    index = mask_index(masks_dir) if masks_dir is not None else None
    outdir = Path(outdir)
    with atomic_output_dir(outdir) as stage:
        rows = _write_images(data, ids, stage, outdir, index=index, box_cols=box_cols, image_col=image_col,
                             sigma=sigma, variants=variants)
        table = pd.DataFrame(rows)
        rest = data.drop(columns=[c for c in (image_col,) if c in data.columns]).copy()
        rest[id_col] = ids.to_numpy()
        if id_col != "sample_id":
            rest = rest.rename(columns={id_col: "sample_id"})
        rest = rest.drop(columns=[c for c in table.columns if c != "sample_id" and c in rest.columns])
        table = table.merge(rest, on="sample_id", how="left")
        atomic_write_bytes(stage / "variants.csv", table.to_csv(index=False).encode())
        for v in variants:  # one sample table per variant (sample_id unique), for `audit vlm embed`
            one = table[table["variant"] == v]
            atomic_write_bytes(stage / variant_table_name(v), one.to_csv(index=False).encode())
    return table


def _write_images(data: pd.DataFrame, ids: pd.Series, stage: Path, outdir: Path, *, index, box_cols, image_col: str,
                  sigma: float | None, variants: tuple[str, ...]) -> list[dict]:
    """Write the variant PNGs of every image into ``stage``; one row of the variants table per (image, variant)."""
    source = data.attrs.get("source", "samples")
    root = Path(stage).resolve()
    rows = []
    for i, (sid, path) in enumerate(zip(ids, data[image_col].astype(str))):
        img = read_image(path)
        mpath = find_mask(index, sid, path) if index is not None else None
        box = None
        if mpath is None and box_cols is not None:
            vals = data.iloc[i][list(box_cols)]
            box = None if vals.isna().any() else vals.to_numpy(dtype=float)
        mask, how = person_mask(img, mask_path=mpath, box=box)
        frac = float(mask.mean())
        made = make_variants(img, mask, sigma=sigma)
        for v in variants:
            name = variant_name(sid, v)
            target = (stage / name).resolve()
            if target.parent != root:  # belt and braces: never write outside the staging folder
                raise ColumnError(f"{source}: row {i + 1}: sample_id {sid!r} names a file outside {outdir}")
            atomic_write_bytes(target, encode_png(made[v]))
            rows.append({"sample_id": sid, "variant": v, "image_path": str((outdir / name).resolve()),
                         "source_image": path, "mask_source": how, "person_fraction": frac})
    return rows


@dataclass
class VariantComparison(SettingsView):
    """Result of :func:`compare_variants`.

    ``changes``: one row per (attribute or intersection, group, label): ``k``, ``n_samples``, ``n_subjects``,
    ``too_small`` (reported, not tested), ``rate_first``, ``rate_second``, ``estimate`` (second minus first),
    ``ci_low``, ``ci_high``, ``level``, ``b`` (images with the label in the first variant only), ``c`` (second
    only), ``statistic`` (exact McNemar), ``statistic_subject`` (clustered McNemar), ``pvalue`` (the larger of
    the two tests' p-values), ``pvalue_adjusted``, ``flagged``.
    """

    first: str
    second: str
    labels: list[str]
    changes: pd.DataFrame
    settings: AuditSettings
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.changes

    def quantities(self) -> dict[str, float]:
        """``n_flagged``, ``n_too_small`` (groups), ``max_change`` (over groups large enough to judge; NaN when none
        was) and
        ``change.<attr>.<group>.<label>`` (an intersection ``<a>+<b>`` with groups ``<x>+<y>``) for ``--fail-if``."""
        c = self.changes
        small = c["too_small"].astype(bool) if len(c) else pd.Series(dtype=bool)
        judged = c.loc[~small, "estimate"] if len(c) else c["estimate"]
        q = {"n_flagged": float(c["flagged"].sum()),
             "n_too_small": float(len(c.loc[small, ["attribute", "group"]].drop_duplicates())) if len(c) else 0.0,
             "max_change": float(judged.abs().max()) if judged.notna().any() else np.nan}
        for row in c.itertuples(index=False):
            q[f"change.{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.label}"] = float(row.estimate)
        return q


def _predicted(pred: pd.DataFrame, ids: pd.Series, id_col: str, name: str) -> np.ndarray:
    """The predicted label of every sample of ``ids`` in a predictions table; a sample without one is an error."""
    for col in (id_col, "predicted"):
        require_columns(pred, [col], source=name)
    check_unique_ids(pred, id_col, name)
    pos = pd.Index(pred[id_col].astype(str)).get_indexer(ids)
    if (pos < 0).any():
        raise InputFileError(f"{name}: no prediction for {id_col} {ids.to_numpy()[pos < 0][0]!r} of the sample table")
    return pred["predicted"].astype(str).to_numpy()[pos]


def compare_variants(data: pd.DataFrame, first: pd.DataFrame, second: pd.DataFrame, attrs: list[str], *,
                     names: tuple[str, str] = ("first", "second"), labels: list[str] | None = None,
                     samples: SampleOptions | None = None, max_k: int = 1,
                     settings: AuditSettings | None = None) -> VariantComparison:
    """Change of each zero-shot label's rate per group between two variants of the same images
    (docs/METHODS.md §12.2).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table of the original images: the id column, optional subject column, attribute columns.
    first, second : pandas.DataFrame
        Predictions (the id column, ``predicted``) on the two variants, e.g. ``VLMResult.predictions``; both must
        cover every sample of ``data``.
    attrs : list of str
        Group attributes.
    names : (str, str)
        Names of the two variants (reported only).
    labels : list of str, optional
        Labels to report (default: every label predicted in either variant, in order of appearance).
    samples : SampleOptions, optional
        Id and subject columns, attribute schema and the rule for empty attribute cells (``missing``: ``"error"``
        by default, ``"drop"`` leaves the rows out, ``"keep"`` makes a group ``(missing)``).
    max_k : int
        Largest intersection size (1: each attribute on its own; 2: also every pair, ...), built by
        :func:`fairvision.groups.intersections` and corrected together with the single attributes.
    settings : AuditSettings, optional
        ``min_subjects`` (smaller groups are reported but not tested or flagged; default 10), the subject
        bootstrap's ``n_boot``, ``level`` and ``seed``, and ``correction`` at ``alpha``.

    Returns
    -------
    VariantComparison
    """
    settings = settings or DEFAULT_SETTINGS
    settings.require_bootstrap("the changes' intervals and tests need replicates")
    samples = samples or SampleOptions()
    data, schema, source, n_rows = prepare_samples(data, attrs, samples, max_k)
    id_col = samples.id_col
    ids = data[id_col].astype(str)
    p1 = _predicted(first, ids, id_col, names[0])
    p2 = _predicted(second, ids, id_col, names[1])
    labels = list(labels) if labels is not None else list(dict.fromkeys(np.concatenate([p1, p2]).tolist()))
    clusters, _ = subject_clusters(data, samples.subject_col, source)
    n_clusters = int(clusters.max()) + 1
    weights = cluster_bootstrap_weights(n_clusters, settings.n_boot, settings.seed)
    rows = []
    for inter in intersections(data, attrs, max_k, schema, source=source):
        for lab in labels:
            rows += _change_rows(inter, p1[inter.rows] == lab, p2[inter.rows] == lab, lab, clusters, weights,
                                 settings)
    changes = pd.DataFrame(rows, columns=CHANGE_COLUMNS)
    padj = np.full(len(changes), np.nan)
    have = changes["pvalue"].notna().to_numpy() if len(changes) else np.zeros(0, bool)
    if have.any():
        padj[have] = adjust_pvalues(changes.loc[have, "pvalue"].to_numpy(), settings.correction)
    changes["pvalue_adjusted"] = padj
    if len(changes):
        changes["flagged"] = flag_differences(changes, settings.alpha, low="ci_low", high="ci_high")
    else:
        changes["flagged"] = pd.Series(dtype=bool)
    return VariantComparison(first=names[0], second=names[1], labels=labels, changes=changes, settings=settings,
                             meta={"n_samples": len(data), "n_dropped": n_rows - len(data),
                                   "missing": samples.missing, "n_subjects": n_clusters,
                                   "n_boot": settings.n_boot, "max_k": max_k,
                                   "min_subjects": settings.min_subjects})


def _change_rows(inter: Intersection, a: np.ndarray, b: np.ndarray, label: str, clusters: np.ndarray,
                 weights: np.ndarray, settings: AuditSettings) -> list[dict]:
    """One row of :data:`CHANGE_COLUMNS` per group of ``inter`` for one label, from whether each member image has
    the label in the first variant (``a``) and in the second (``b``)."""
    c, g = inter.codes, inter.n_cells
    groups = [str(v) for v in inter.display_labels()]
    ns, subj = cell_counts(inter, clusters)
    small = subj < settings.min_subjects
    d = b.astype(float) - a.astype(float)
    rep = group_mean_replicates(d, c, clusters[inter.rows], weights, n_groups=g)
    lo, hi = percentile_ci(rep, settings.level)
    n_a, n_b = np.bincount(c, a, minlength=g), np.bincount(c, b, minlength=g)
    only_first = np.bincount(c, a & ~b, minlength=g).astype(int)
    only_second = np.bincount(c, b & ~a, minlength=g).astype(int)
    cm = clustered_mcnemar(d, c, clusters[inter.rows], g)
    stat_s, p_s = cm["statistic"].to_numpy(), cm["pvalue"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        r1, r2 = n_a / ns, n_b / ns
    rows = []
    for gi, grp in enumerate(groups):
        row = {"attribute": inter.name, "k": inter.k, "group": grp, "label": label, "n_samples": int(ns[gi]),
               "n_subjects": int(subj[gi]), "too_small": bool(small[gi]), "rate_first": r1[gi],
               "rate_second": r2[gi], "estimate": r2[gi] - r1[gi], "ci_low": np.nan, "ci_high": np.nan,
               "level": settings.level, "b": int(only_first[gi]), "c": int(only_second[gi]), "statistic": np.nan,
               "statistic_subject": np.nan, "pvalue": np.nan}
        if ns[gi] > 0:
            row.update(ci_low=float(lo[gi]), ci_high=float(hi[gi]))
        if ns[gi] > 0 and not small[gi]:
            # exact McNemar on images and the clustered test on subjects: the larger p-value, valid when
            # either assumption holds (docs/METHODS.md §12.2)
            sel = c == gi
            t = mcnemar(a[sel], b[sel], exact=True)
            row.update(statistic=t.statistic, statistic_subject=float(stat_s[gi]),
                       pvalue=max(float(t.pvalue), float(p_s[gi])))
        rows.append(row)
    return rows

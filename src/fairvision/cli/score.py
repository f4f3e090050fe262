"""``fairvision score detections|masks|keypoints|images`` and ``fairvision audit verification``.

The ``score`` commands turn COCO-format ground truth and predictions (or folders
of predicted and reference images) into the per-sample scores table that ``fairvision audit model --scores`` reads (one
row per image, keyed by ``sample_id``, one column per metric;
docs/METHODS.md §6.1). ``audit verification`` reports TAR at FAR by group from
a table of scored face pairs.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, check_output_file, done,
                                  exit_if_gates_failed, results_store)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

score_app = typer.Typer(
    help="Score a model's COCO-format predictions or predicted images into a per-sample table for `fairvision audit model --scores`.",
    no_args_is_help=True,
)

_TABLE_SUFFIXES = (".parquet", ".csv", ".tsv", ".json", ".jsonl")

_GT = typer.Argument(..., help="COCO ground truth JSON (images, annotations, categories).", show_default=False)
_PRED = typer.Argument(..., help="COCO results JSON: a list of predictions with image_id, category_id, score and the "
                                 "bbox / segmentation / keypoints.", show_default=False)


def _out():
    return typer.Option(..., "--output", "-o", help="Scores table to write (.parquet, .csv, .tsv, .json, .jsonl by "
                                                    "extension); replaced atomically.")


def _per():
    return typer.Option("image", "--per", help="'image': one row per image (instance scores averaged; what `audit model` "
                                               "reads); 'instance': one row per ground-truth instance.")


def _sample_id():
    return typer.Option("file_name", "--sample-id", help="Where sample_id comes from: 'file_name' (the image file name "
                                                         "without folder and suffix, images/0001.jpg -> 0001) or "
                                                         "'image_id' (the COCO image id). Match your samples table.")


def _category():
    return typer.Option([], "--category", "-c", help="Score only this category (id or name; repeat). Default: all.")


def _min_score():
    return typer.Option(0.0, "--min-score", help="Ignore predictions with a lower confidence score.")


def _counts():
    return typer.Option(False, "--counts", help="Per image: add n_gt and n_pred columns (name the metrics with "
                                                "`audit model --metric` then, or they are audited too).")


def _run_score(task, gt, pred, output, **kw):
    # lazy: pandas and the metric stack cost about a second; every fairvision command imports this module
    from fairvision.audits.scoring import score_coco
    from fairvision.io.coco import read_coco, read_coco_results
    from fairvision.io.tables import write_table

    check_output_file(output, _TABLE_SUFFIXES)
    g = read_coco(gt)
    p = read_coco_results(pred, g)
    table = score_coco(g, p, task, **kw)
    path = write_table(table, output)
    skip = {"sample_id", "image_id", "annotation_id", "category_id", "n_gt", "n_pred"}
    metrics = [c for c in table.columns if c not in skip]
    means = ", ".join(f"{c} {table[c].mean():.3f}" for c in metrics if table[c].notna().any())
    rows = "images" if kw["per"] == "image" else "instances"
    typer.echo(f"scores: {Path(path).resolve()}")
    typer.echo(f"{len(table):,} {rows}; mean {means}" if means else f"{len(table):,} {rows}; no ground truth to score")


def score_detections_cmd(
    gt: Path = _GT,
    pred: Path = _PRED,
    output: Path = _out(),
    per: str = _per(),
    sample_id: str = _sample_id(),
    iou: List[float] = typer.Option([0.5, 0.75], "--iou", help="IoU threshold of a recall_<t> column (repeat; default 0.5 and 0.75)."),
    category: List[str] = _category(),
    min_score: float = _min_score(),
    counts: bool = _counts(),
):
    """Score box detections (person or face detection) per image.

    Columns: average_recall (FHIBE: each ground-truth box's best IoU with a predicted box of its category, recall averaged over IoU 0.50:0.05:0.95, then over the image's boxes; docs/METHODS.md §6.1), recall_50 and recall_75 (share of boxes whose best IoU reaches 0.5 / 0.75) and iou (mean best IoU). A box without a prediction scores 0; an image without ground truth is empty (NaN).

    Example:
      fairvision score detections gt.json detections.json -o scores.parquet
      fairvision audit model -s samples.csv --scores scores.parquet \\
          -a gender -a age
    """
    _run_score("detections", gt, pred, output, per=per, sample_id=sample_id, iou_thresholds=iou,
               categories=category, min_score=min_score, counts=counts)


def score_masks_cmd(
    gt: Path = _GT,
    pred: Path = _PRED,
    output: Path = _out(),
    per: str = _per(),
    sample_id: str = _sample_id(),
    iou: List[float] = typer.Option([0.5, 0.75], "--iou", help="Mask IoU threshold of a recall_<t> column (repeat)."),
    category: List[str] = _category(),
    min_score: float = _min_score(),
    counts: bool = _counts(),
):
    """Score instance masks (person segmentation) per image or instance; masks as COCO polygons or RLE.

    Columns: average_recall over mask IoU 0.50:0.05:0.95 (FHIBE), recall_<t>, iou (best mask IoU of each instance) and dice (Dice of the same two masks, 2 IoU / (1 + IoU)); docs/METHODS.md §6.1. Images need width and height in the ground truth.

    Example:
      fairvision score masks gt.json segm.json --per instance -o masks.csv
    """
    _run_score("masks", gt, pred, output, per=per, sample_id=sample_id, iou_thresholds=iou,
               categories=category, min_score=min_score, counts=counts)


def score_keypoints_cmd(
    gt: Path = _GT,
    pred: Path = _PRED,
    output: Path = _out(),
    per: str = _per(),
    sample_id: str = _sample_id(),
    pck_alpha: float = typer.Option(0.5, "--pck-alpha", help="PCK threshold as a share of the normaliser (FHIBE: 0.5)."),
    head: Optional[str] = typer.Option(None, "--head", help="Keypoint indices 'TOP,NECK' (0-based): normalise PCK by "
                                                            "head length, as FHIBE. Default: by the ground-truth box's longer side."),
    category: List[str] = _category(),
    min_score: float = _min_score(),
    counts: bool = _counts(),
):
    """Score pose estimation per image or instance: OKS and PCK.

    Each ground-truth person is matched to the prediction with the highest OKS (COCO sigmas for the 17-keypoint skeleton, 0.1 otherwise). oks is that OKS; pck the share of labelled keypoints of the match within pck-alpha x the normaliser (docs/METHODS.md §6.1). A person without a prediction scores 0.

    Example:
      fairvision score keypoints gt.json kp.json --head 0,1 -o pose.parquet
    """
    hd = None
    if head is not None:
        try:
            a, b = (int(v) for v in head.split(","))
        except ValueError:
            raise FairvisionError(f"--head {head!r}: expected two keypoint indices 'TOP,NECK', e.g. 0,1") from None
        if a < 0 or b < 0:
            raise FairvisionError(f"--head {head!r}: keypoint indices must be 0 or more")
        hd = (a, b)
    if not pck_alpha > 0:
        raise FairvisionError("--pck-alpha must be positive")
    _run_score("keypoints", gt, pred, output, per=per, sample_id=sample_id, categories=category, min_score=min_score,
               counts=counts, pck_alpha=pck_alpha, head=hd)


@with_settings("engine", "address", "workers")
def score_images_cmd(
    pred: Path = typer.Option(..., "--pred", help="Folder of predicted images (searched recursively)."),
    ref: Path = typer.Option(..., "--ref", help="Folder of reference images; a prediction pairs with the reference of the same relative path (suffix aside)."),
    output: Path = _out(),
    pred_labels: Optional[Path] = typer.Option(None, "--pred-labels", help="Folder of predicted face-parsing label maps (single-channel PNGs of category ids): adds mean_dice."),
    ref_labels: Optional[Path] = typer.Option(None, "--ref-labels", help="Folder of reference label maps, with --pred-labels."),
    ignore_label: Optional[int] = typer.Option(None, "--ignore-label", help="Label left out of mean_dice (e.g. 0 for background)."),
    identity: bool = typer.Option(False, "--identity", help="Add identity_similarity: cosine of the dlib face descriptors of the two images (NaN with identity_reason where a face is not found)."),
    resize: bool = typer.Option(False, "--resize", help="Resize a prediction to its reference's size (area when shrinking, bilinear when enlarging, nearest for label maps). Default: a size mismatch is an error naming the pair."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    settings: AuditSettings = None,
):
    """Score predicted images against references per pair: PSNR, SSIM, identity similarity and mean Dice of label maps.

    Pairs by relative path without suffix (pred/a/001.png with ref/a/001.jpg); sample_id is that path (a/001). Files without a partner are counted and listed, never scored. psnr: 10 log10(255^2 / MSE), capped at 100 dB for identical images; ssim: Wang et al. 2004 (Gaussian window sigma 1.5, 11 x 11, K1 0.01, K2 0.03) on each RGB channel, averaged; mean_dice: Dice per label present in either map, averaged (docs/METHODS.md §6.1). LPIPS needs trained network weights, which are not shipped: compute it elsewhere and add it as a column (audit it with --lower-is-better lpips).

    Example:
      fairvision score images --pred out/ --ref gt/ -o scores.csv
      fairvision audit model -s samples.csv --scores scores.csv -a gender
    """
    # lazy: pandas, scipy and the image stack (see _run_score)
    from fairvision.audits.image_scoring import ImagePairOptions, score_image_pairs
    from fairvision.io.tables import write_table

    check_output_file(output, _TABLE_SUFFIXES)
    options = ImagePairOptions(resize=resize, identity=identity, ignore_label=ignore_label)
    results = results_store(store, no_store) if identity else None
    res = score_image_pairs(pred, ref, pred_labels=pred_labels, ref_labels=ref_labels, options=options,
                            settings=settings, store=results)
    path = write_table(res.table, output)
    typer.echo(f"scores: {Path(path).resolve()}")
    if not res.unmatched.empty:
        typer.echo(res.unmatched_line())
    t = res.table
    cols = [c for c in ("psnr", "ssim", "identity_similarity", "mean_dice") if c in t.columns]
    means = ", ".join(f"{c} {t[c].mean():.3f}" for c in cols if t[c].notna().any())
    typer.echo(f"{len(t):,} image pairs; mean {means}")
    if res.reasons:
        typer.echo("not scored: " + ", ".join(f"{n:,} {why}" for why, n in res.reasons.items()))


#: Thong's light/dark and red/yellow classes of the measured skin colour, added as attributes by --measure-skin
MEASURED_SKIN = {"skin_tone": "measured_tone", "skin_hue": "measured_hue"}


def _descriptors_from_images(sdf, samples: Path, settings, store):
    """dlib face descriptors of the sample table's images (through the engine and the results store):
    ``(embeddings, ids, reasons)``, reasons per row ("" when the image has a descriptor)."""
    import numpy as np

    from fairvision.vision.face_descriptor_batch import embed_face_images

    if "image_path" not in sdf.columns:
        raise FairvisionError(f"{samples}: no column 'image_path' (needed for --embed-images)")
    fe = embed_face_images(sdf["image_path"].astype(str).tolist(), sdf["sample_id"].astype(str).tolist(),
                           settings=settings, store=store)
    st = fe.status.set_index(fe.status["item_id"].astype(str))
    ok = st["ok"].astype(bool).reindex(sdf["sample_id"].astype(str)).fillna(False).to_numpy()
    why = st["reason"].reindex(sdf["sample_id"].astype(str)).fillna("no face").astype(str).str.split(": ").str[0]
    return fe.embeddings, fe.ids, np.where(ok, "", why.to_numpy()).astype(object)


def _measured_skin(sdf, samples: Path, settings, store):
    """The sample table with Thong's measured tone (light/dark) and hue (red/yellow) classes added, and the reason
    per row where the skin colour could not be measured ("" where it was)."""
    import numpy as np

    from fairvision.skin.batch import measure_images

    if "image_path" not in sdf.columns:
        raise FairvisionError(f"{samples}: no column 'image_path' (needed for --measure-skin)")
    m = measure_images(sdf[["sample_id", "image_path"]], settings=settings, store=store, progress=False)
    out = sdf.copy()
    failed = ~m["ok"].astype(bool).to_numpy() | m[list(MEASURED_SKIN)].isna().any(axis=1).to_numpy()
    for src, dst in MEASURED_SKIN.items():  # rows not measured are left out; their label only shows in the coverage
        out[dst] = np.where(failed, "not measured", m[src].astype(object).to_numpy())
    reason = m["reason"].fillna("").astype(str).str.split(": ").str[0].to_numpy().astype(object)
    grey = m["ok"].astype(bool).to_numpy() & m["skin_tone"].notna().to_numpy() & m["skin_hue"].isna().to_numpy()
    why = np.where(reason != "", "skin not measured: " + reason, "skin not measured")
    # a greyscale photo has a tone but no hue (docs/METHODS.md §1.4): its light/dark x red/yellow group is unknown
    why = np.where(grey, "no skin hue: greyscale image", why)
    return out, np.where(failed, why, "")


@with_settings("min_subjects", "n_boot", "seed", "engine", "address", "workers")
def audit_verification_cmd(
    pairs: Optional[Path] = typer.Option(None, "--pairs", "-p", help="Pairs table (CSV, TSV, Parquet, JSON/JSONL): sample_a, sample_b, "
                                                                 "score (similarity, higher = same person) and optionally same_subject (true/false). Without it the pairs are built from --samples and --embeddings: every genuine pair plus FHIBE's hard impostors."),
    samples: Path = typer.Option(..., "--samples", "-s", help="Sample table: sample_id, attribute columns, subject_id."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat)."),
    output: Path = typer.Option(Path("fairvision-verification-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    far: List[float] = typer.Option([0.001], "--far", help="Target false accept rate (repeat for several; FHIBE: 0.001)."),
    threshold: Optional[str] = typer.Option(None, "--threshold", help="'group': each group's own threshold from its impostor pairs (FHIBE); 'global': one threshold from all pairs at the FAR; 'eer': one threshold at the equal error rate of all pairs (--far is then ignored). Default: group with --pairs, global when the pairs are built."),
    pronoun_col: str = typer.Option("pronoun", "--pronoun-col", help="Built pairs: impostors share this column's value (pronoun or gender)."),
    tone_col: str = typer.Option("skin_tone", "--tone-col", help="Built pairs: skin tone level column (1-6, 'IV', 'Type IV'); impostors differ by at most --max-tone-diff."),
    max_tone_diff: int = typer.Option(1, "--max-tone-diff", min=0, help="Built pairs: largest tone difference of an impostor pair (FHIBE: 1)."),
    max_impostors: int = typer.Option(1_000_000, "--max-impostors", min=0, help="Built pairs: most impostor pairs, a uniform sample drawn with --seed (0: all)."),
    embed_images: bool = typer.Option(False, "--embed-images", help="Built pairs: dlib face descriptors of the samples' image_path (kept in the results store) instead of --embeddings; images without a face are left out and reported."),
    measure_skin: bool = typer.Option(False, "--measure-skin", help="Measure the skin colour of every image and add Thong's classes as attributes measured_tone (light/dark) and measured_hue (red/yellow); use --max-k 2 for their intersections. Images not measured are left out and reported."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", help="Score the pairs by cosine similarity of these embeddings (.npy with ids, .npz, or a table keyed by sample_id) instead of a score column."),
    score_col: str = typer.Option("score", "--score-col", help="Column of the pairs table with the similarity."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Person column of the samples table (default: subject_id if present). CIs resample people; without same_subject, genuine pairs are those of one person."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size (2 = also every pair of attributes)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'difference>0.05', 'min<0.9', 'gender.difference>0.02', 'far0.01.min<0.95'. Repeat: any one failing fails."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, bins, multi-valued attributes, hierarchies."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Face verification: TAR at FAR by group and intersection, with subject-bootstrap CIs.

    Pairs come from --pairs, or are built from --samples and --embeddings: every genuine pair plus FHIBE's hard impostors (same --pronoun-col, --tone-col within --max-tone-diff), at most --max-impostors of them drawn with --seed; images without an embedding are left out and reported by group. A pair counts for a group when both images are in it. Per group the threshold is the one that accepts at most FAR of its impostor pairs; TAR is the share of its genuine pairs above it (docs/METHODS.md §6.1). The report lists TAR with CIs per group, the worst and best group and their difference (with a CI). Quantities for --fail-if: min, max, difference, ratio, tar (all pairs), per attribute set as <attr>.difference, <attr>+<attr>.min, ...; for every FAR also with a far<FAR>. prefix.

    Example:
      fairvision audit verification --pairs pairs.csv --samples samples.csv \\
          -a gender -a skin_tone --far 0.001 --fail-if 'difference>0.05' -o verif
      fairvision audit verification --samples samples.csv --embeddings faces.npz \
          -a gender -a skin_tone --pronoun-col pronoun --tone-col skin_tone --far 0.01 -o verif
    """
    # lazy: pandas, scipy and the report stack (see _run_score)
    from fairvision.audits.verification import audit_verification_pairs
    from fairvision.io.embeddings import read_embeddings
    from fairvision.io.pairs import read_pairs
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.verification import verification_section
    from fairvision.schema import Schema

    from fairvision.audits.verification_pairs import PairRule, audit_verification_samples
    from fairvision.report.sections.coverage import coverage_section

    check_outdir(output)
    if pairs is None and embeddings is None and not embed_images:
        raise FairvisionError("give --pairs (a scored pairs table), or --embeddings or --embed-images (to build the "
                              "pairs from --samples)")
    if (embed_images or measure_skin) and pairs is not None:
        raise FairvisionError("--embed-images and --measure-skin build the pairs: leave out --pairs")
    if embed_images and embeddings is not None:
        raise FairvisionError("give --embeddings or --embed-images, not both")
    threshold = threshold or ("group" if pairs is not None else "global")
    conditions = [parse_condition(c) for c in fail_if]
    sdf = read_table(samples)
    emb = ids = None
    if embeddings is not None:
        emb, ids = read_embeddings(embeddings)
    left_out = None
    if embed_images or measure_skin:
        results = results_store(store, no_store)
        reasons = []
        if measure_skin:
            sdf, why = _measured_skin(sdf, samples, settings, results)
            reasons.append(why)
            attr = list(attr) + [c for c in MEASURED_SKIN.values() if c not in attr]
        if embed_images:
            emb, ids, why = _descriptors_from_images(sdf, samples, settings, results)
            reasons.append(why)
        left_out = reasons[0]
        for why in reasons[1:]:
            left_out = [a or b for a, b in zip(left_out, why)]
    schema = (Schema.from_file(schema_file) if schema_file else Schema()).declare(attr)
    if pairs is not None:
        pdf = read_pairs(pairs, score_col=None if embeddings is not None else score_col)
        result = audit_verification_pairs(
            sdf, pdf, attr, far=far, threshold=threshold,
            subject_col=subject_col or "subject_id", embeddings=emb, embedding_ids=ids, max_k=max_k, schema=schema,
            settings=settings, source=str(samples), pairs_source=str(pairs),
        )
    else:
        rule = PairRule(pronoun_col=pronoun_col, tone_col=tone_col, max_tone_diff=max_tone_diff,
                        max_impostors=max_impostors or None)
        result = audit_verification_samples(
            sdf, attr, emb, ids, rule=rule, far=far, threshold=threshold, subject_col=subject_col or "subject_id",
            max_k=max_k, schema=schema, settings=settings, source=str(samples), left_out=left_out)
        if result.coverage is not None:
            typer.echo(result.coverage.summary_line())
    name = pairs.name if pairs is not None else samples.name
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(
        title=title or f"Face verification audit: {name}",
        subtitle="fairvision verification audit",
        meta={"pairs": str(pairs) if pairs is not None else "built from the samples", "samples": str(samples), "attributes": ", ".join(attr),
              "far": ", ".join(f"{f:g}" for f in result.fars), "threshold": threshold, "min_subjects": settings.min_subjects,
              "settings": settings.to_meta(), **gate_meta(evaluated)},
    )
    report.add(verification_section(result, conditions=evaluated))
    if result.coverage is not None:
        report.add(coverage_section(result.coverage, id="verification_coverage",
                                    title="Images left out of the verification pairs"))
    paths = report.write(output)
    ov = result.overall.iloc[0]
    extra = f"{result.n_pairs:,} pairs ({result.n_genuine:,} genuine), {result.n_subjects:,} subjects; TAR @ FAR {result.fars[0]:g} = {ov['tar']:.3f}"
    summ = result.summary[result.summary["far_target"] == result.fars[0]]
    if summ["difference"].notna().any():
        lead = summ.loc[summ["difference"].idxmax()]
        extra += f"; largest gap {lead['difference']:.3f} ({lead['worst_group']} vs {lead['best_group']} by {lead['intersection']})"
    done(paths, extra)
    exit_if_gates_failed(evaluated)


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    score_app.command("detections")(score_detections_cmd)
    score_app.command("masks")(score_masks_cmd)
    score_app.command("keypoints")(score_keypoints_cmd)
    score_app.command("images")(score_images_cmd)
    app.add_typer(score_app, name="score")
    audit_app.command("verification")(audit_verification_cmd)

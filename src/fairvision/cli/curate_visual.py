"""``fairvision curate visual``: visual statistics of the annotations by group (docs/METHODS.md §13.3)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, progress_bar,
                                   results_store)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError


@with_settings("min_subjects", "correction", "alpha", "n_boot", "seed", "workers")
def curate_visual_cmd(
    samples: Optional[Path] = typer.Option(None, "--samples", "-s", help="Sample table: sample_id, subject_id (optional), the attribute columns; with image paths when there is no --coco."),
    coco: Optional[Path] = typer.Option(None, "--coco", help="COCO annotations (person / face boxes, masks, keypoints). Without it the built-in face, person-mask and pose models annotate the images of --samples."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Group attribute column (repeat: -a gender -a age)."),
    output: Path = typer.Option(Path("fairvision-visual-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    sample_id: str = typer.Option("file_name", "--sample-id", help="How a COCO image matches a sample_id: 'file_name' (file name without folder and suffix) or 'image_id'."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap and test unit); every image its own subject when absent."),
    image_col: Optional[str] = typer.Option(None, "--image-col", help="Column of the image paths (built-in models only; default: image_path, filename, file_name or path)."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size."),
    bins: int = typer.Option(20, "--bins", min=2, max=200, help="Cells per side of the heat maps."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'omnibus_significant>0', 'person.box_area_ratio.disparity>0.3'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Visual statistics by group (FHIBE Fig. 5): box area and aspect ratio, centre distance, mask area and
    concavity, keypoint spread and visibility per annotation; per group median, IQR, bootstrap CI, Kruskal-Wallis
    and corrected pairwise tests; heat maps of box centres and keypoints (docs/METHODS.md §13.3)."""
    check_outdir(output)
    if sample_id not in ("file_name", "image_id"):
        raise FairvisionError(f"--sample-id must be file_name or image_id, not {sample_id!r}")
    if coco is None and samples is None:
        raise FairvisionError("give annotations (--coco) or a sample table with image paths (--samples)")
    conditions = [parse_condition(c) for c in fail_if]
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.visual import audit_visual
    from fairvision.audits.curation.visual_models import coco_from_models
    from fairvision.io.coco import read_coco
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.curation_visual import visual_section

    data = read_table(samples, image_col=image_col if coco is None else None) if samples is not None else None
    failures = None
    if coco is not None:
        gt = read_coco(coco)
    else:
        results = results_store(store, no_store)  # the built-in models' annotations of images seen before
        with progress_bar("annotating images") as advance:
            gt, failures = coco_from_models(data, image_col="image_path", settings=settings, progress=advance,
                                            source=str(samples), store=results, subject_col=subject_col)
        sample_id = "file_name"
    result = audit_visual(data, gt, attr, settings=settings, sample_id=sample_id, subject_col=subject_col, max_k=max_k,
                          bins=bins, source=str(samples))
    if failures is not None:
        result.failures = failures
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or f"Visual statistics: {(coco or samples).name}", subtitle="fairvision curate visual",
                    meta={"annotations": str(coco) if coco else "built-in models (face detection, selfie segmentation, pose)",
                          "samples": str(samples), "correction": settings.correction, "seed": settings.seed,
                          "settings": settings.to_meta(), **gate_meta(evaluated)})
    report.add(visual_section(result, conditions=evaluated))
    paths = report.write(output, extra_files={"instances.csv": result.instances.drop(
        columns=[c for c in ("segmentation",) if c in result.instances.columns]).to_csv(index=False).encode()})
    sig = int(result.omnibus["significant"].sum()) if len(result.omnibus) else 0
    cached = ""
    if coco is None and "from_cache" in gt.images.columns:
        cached = f" ({int(gt.images['from_cache'].sum())} of {len(gt.images)} images read from the results store)"
    done(paths, f"{result.n_instances} annotations on {result.n_images} images{cached}; {sig} statistics differ "
                "between groups" + (f"; left out: {', '.join(result.left_out)} (see the report)" if result.left_out else ""))
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("visual")(curate_visual_cmd)

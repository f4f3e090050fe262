"""``fairvision curate inpaint`` and ``curate inpaint-check``: in-painting bystanders and personal information,
and the check that in-painting kept the data useful (docs/METHODS.md §13.11)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed, image_table, progress_bar
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError


@with_settings("seed", "workers", "engine", "address", "correction", "alpha", "level")
def curate_inpaint_cmd(
    source: str = typer.Argument(..., help="A folder of images or a sample table with image paths (sample_id, image_path, attribute columns)."),
    weights: Path = typer.Option(..., "--weights", help="Folder of a diffusers Stable Diffusion in-painting pipeline on this machine (save_pretrained layout; nothing is downloaded)."),
    regions: Optional[Path] = typer.Option(None, "--regions", help="Regions table: sample_id plus a mask_path (binary mask image) or a box x0, y0, x1, y1 (pixels) per row; several rows of one image unite."),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of binary mask images found by name (<sample_id>.png or <image stem>.png), united with --regions."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Group attribute column of the sample table (repeat): failures by group."),
    output: Path = typer.Option(Path("fairvision-inpaint-report"), "--output", "-o", help="Output folder for report.html, report.json, tables/ and manifest.csv."),
    images_out: Optional[Path] = typer.Option(None, "--images-out", help="Folder for the in-painted images (default: OUTPUT/images)."),
    steps: int = typer.Option(20, "--steps", min=1, help="Denoising steps (FHIBE: 20)."),
    guidance_min: float = typer.Option(12.0, "--guidance-min", help="Guidance scale of each image drawn uniformly from [min, max] (FHIBE: 12)."),
    guidance_max: float = typer.Option(16.0, "--guidance-max", help="Upper end of the guidance range (FHIBE: 16)."),
    dilate: int = typer.Option(4, "--dilate", min=0, help="Pixels the mask grows by; pixels outside the grown mask are copied back unchanged."),
    resolution: int = typer.Option(512, "--resolution", min=8, help="Longer side in pixels of the image the model sees; its output is resized back."),
    context: str = typer.Option("crop", "--context", help="What the model sees: crop (a window around the regions, at least --resolution pixels wide) or whole (the whole image)."),
    scheduler: str = typer.Option("ddim", "--scheduler", help="ddim (DDIM with eta = 0, as FHIBE) or pipeline (the folder's own scheduler)."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA when available), cpu, cuda, cuda:1 or mps."),
    show_images: bool = typer.Option(False, "--show-images", help="Show before/after thumbnails of in-painted images in the report (they show people; off by default)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_failed>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """In-paint bystanders and personal information (licence plates, documents) with a local diffusers
    in-painting pipeline and FHIBE's settings: fixed prompt and negative prompt, guidance drawn from U(12, 16)
    per image with a seed from --seed and the sample id, 20 DDIM steps; only the (grown) regions change. Writes
    the images, a manifest and a report (docs/METHODS.md §13.11).

    Example:
        fairvision curate inpaint photos/ --weights ~/models/sd-inpainting \\
            --regions regions.csv -o inpaint-report
    """
    check_outdir(output)
    if images_out is not None:
        check_outdir(images_out)
    if regions is None and masks is None:
        raise FairvisionError("give the regions to in-paint: --regions TABLE and/or --masks FOLDER")
    if not 0 < guidance_min < float("inf"):
        raise FairvisionError(f"--guidance-min must be a number above 0, not {guidance_min:g}")
    if not guidance_max >= guidance_min:
        raise FairvisionError(f"--guidance-max ({guidance_max:g}) is below --guidance-min ({guidance_min:g})")
    if not guidance_max < float("inf"):
        raise FairvisionError(f"--guidance-max must be a finite number, not {guidance_max:g}")
    if scheduler not in ("ddim", "pipeline"):
        raise FairvisionError(f"--scheduler must be ddim or pipeline, not {scheduler!r}")
    if context not in ("crop", "whole"):
        raise FairvisionError(f"--context must be crop or whole, not {context!r}")
    conditions = [parse_condition(c) for c in fail_if]
    data = image_table(source, recursive=True, hint="a folder of images or a sample table")
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up; torch and
    # diffusers load only in the workers
    from fairvision.audits.curation.inpainting import audit_inpainting, read_regions
    from fairvision.io.tables import read_raw_table
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.curation_inpaint import inpaint_section
    from fairvision.vision.inpaint import InpaintOptions, check_pipeline_folder

    check_pipeline_folder(weights)  # a folder that is not a pipeline: one line, before any work
    options = InpaintOptions(guidance=(guidance_min, guidance_max), steps=steps, dilate=dilate, resolution=resolution,
                             scheduler=scheduler, device=device, context=context)
    reg = read_regions(read_raw_table(regions), source=str(regions), base=regions.parent) if regions else {}
    outdir = images_out if images_out is not None else output / "images"
    with progress_bar("in-painting images") as progress:
        result = audit_inpainting(data, reg, weights, outdir, options=options, settings=settings, attributes=attr,
                                  masks_dir=masks, progress=progress, source=source)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or f"In-painting: {Path(source).name}", subtitle="fairvision curate inpaint",
                    meta={"source": source, "weights": str(weights), "regions": str(regions) if regions else None,
                          "masks": str(masks) if masks else None, "images": str(outdir), "prompt": options.prompt,
                          "negative prompt": options.negative_prompt,
                          "guidance range": f"{guidance_min:g} to {guidance_max:g}", "steps": steps,
                          "mask growth (px)": dilate, "working size (px)": resolution, "model sees": context, "scheduler": scheduler,
                          "device": device, "precision": options.dtype, "run seed": result.params["run_seed"],
                          "settings": settings.to_meta(), **gate_meta(evaluated)})
    report.add(inpaint_section(result, show_images=show_images, conditions=evaluated))
    report.add(coverage_section(result.coverage, id="inpaint_coverage"))
    paths = report.write(output, extra_files={"manifest.csv": result.manifest.to_csv(index=False).encode()})
    c = result.counts()
    done(paths, f"{c['images']} images: {c['inpainted']} in-painted, {c['copied']} copied unchanged, "
                f"{c['failed']} failed; images in {outdir}")
    typer.echo(result.coverage.summary_line())
    exit_if_gates_failed(evaluated)


@with_settings("min_subjects", "correction", "alpha", "n_boot", "level", "seed")
def curate_inpaint_check_cmd(
    scores_before: Path = typer.Option(..., "--scores-before", help="Per-sample scores on the original images: sample_id and one column per metric (as audit model reads them)."),
    scores_after: Path = typer.Option(..., "--scores-after", help="Per-sample scores of the same task on the in-painted images (same columns)."),
    samples: Optional[Path] = typer.Option(None, "--samples", "-s", help="Sample table: sample_id, subject_id, the attribute columns (default: those columns of --scores-before)."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Group attribute column (repeat): is a change concentrated in one group?"),
    metric: List[str] = typer.Option([], "--metric", "-m", help="Score column to compare (repeat; default: every numeric column both tables share)."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap and test unit); every sample its own subject when absent."),
    output: Path = typer.Option(Path("fairvision-inpaint-check"), "--output", "-o", help="Output folder for report.html, report.json, tables/ and differences.csv."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_significant>0', 'largest_loss>0.02'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Check that in-painting kept the data useful (FHIBE): per score column the paired difference after - before,
    its mean with a subject-bootstrap CI and a Wilcoxon signed-rank test, overall and by group, corrected across
    columns and groups (docs/METHODS.md §13.11).

    Example:
        fairvision curate inpaint-check --scores-before before.csv \\
            --scores-after after.csv -s samples.csv -a gender
    """
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.inpainting import audit_inpaint_utility
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.curation_inpaint import utility_section

    before, after = read_table(scores_before), read_table(scores_after)
    data = read_table(samples) if samples is not None else None
    result = audit_inpaint_utility(before, after, data=data, attributes=attr, metrics=metric or None,
                                   subject_col=subject_col, settings=settings,
                                   sources=(str(scores_before), str(scores_after)))
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or "Utility of the in-painted images", subtitle="fairvision curate inpaint-check",
                    meta={"scores before": str(scores_before), "scores after": str(scores_after),
                          "samples": str(samples) if samples else None, "attributes": ", ".join(attr),
                          "metrics": ", ".join(result.metrics), "settings": settings.to_meta(),
                          **gate_meta(evaluated)})
    report.add(utility_section(result, conditions=evaluated))
    report.add(coverage_section(result.coverage, id="inpaint_check_coverage"))
    paths = report.write(output, extra_files={"differences.csv": result.differences.to_csv(index=False).encode()})
    n_sig = int(result.quantities()["n_significant"])
    done(paths, f"{len(result.metrics)} score column(s); {n_sig} significant change(s) after in-painting")
    typer.echo(result.coverage.summary_line())
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("inpaint")(curate_inpaint_cmd)
    curate_app.command("inpaint-check")(curate_inpaint_check_cmd)

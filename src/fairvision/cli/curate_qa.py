"""``fairvision curate qa``: image quality checks before release (docs/METHODS.md §13.7)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, image_table,
                                   progress_bar, results_store)
from fairvision.cli.options import with_settings


@with_settings("workers", "engine", "address")
def curate_qa_cmd(
    source: str = typer.Argument(..., help="A folder of images, a sample table with image paths, or 'portraits' / 'demo'."),
    output: Path = typer.Option(Path("fairvision-qa-report"), "--output", "-o", help="Output folder for report.html, report.json, tables/ and images.csv."),
    split_col: Optional[str] = typer.Option(None, "--split-col", help="Column of the split (train/test...): near duplicates across splits are counted. For a folder without such a column, the first subfolder is the split (photos/train/x.jpg: train)."),
    min_side: int = typer.Option(256, "--min-side", help="Resolution floor: flag images whose shorter side is below this many pixels."),
    hamming: int = typer.Option(6, "--hamming", help="Near duplicate: perceptual hashes at most this many bits (of 64) apart."),
    strip_to: Optional[Path] = typer.Option(None, "--strip-metadata-to", help="Write copies of the readable images without EXIF/GPS/XMP/comments into this folder."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_cross_split_duplicates>0', 'n_with_gps>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Check images before release: unreadable or truncated files, a resolution floor, exact and near duplicates
    (perceptual hashes, also across train/test splits) and EXIF/GPS metadata, optionally writing copies without
    the metadata (docs/METHODS.md §13.7)."""
    check_outdir(output)
    if strip_to is not None:
        check_outdir(strip_to)
    conditions = [parse_condition(c) for c in fail_if]
    data = image_table(source, recursive=True)  # before the heavy imports: a missing input fails fast

    # lazy: numpy, pandas, PIL and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.qa import audit_images, split_from_folder, strip_all
    from fairvision.io.atomic import atomic_output_dir
    from fairvision.report import Report
    from fairvision.report.sections.curation_qa import qa_section

    if split_col is not None and split_col not in data.columns and Path(source).is_dir():
        data = split_from_folder(data, source, split_col)  # photos/train/x.jpg: split "train"
    results = results_store(store, no_store)  # checks of files seen before
    with progress_bar("checking images") as progress:
        result = audit_images(data, settings=settings, split_col=split_col, min_side=min_side, hamming=hamming,
                              progress=progress, store=results, source=source)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    if strip_to is not None:
        with atomic_output_dir(strip_to) as stage:
            result.stripped = strip_all(result.images, stage)
        result.stripped["stripped_path"] = [str(Path(strip_to) / Path(p).name) for p in result.stripped["stripped_path"]]
    report = Report(title=title or f"Image quality checks: {Path(source).name}", subtitle="fairvision curate qa",
                    meta={"source": source, "split column": split_col, "min side": min_side, "hamming": hamming,
                          "metadata stripped to": str(strip_to) if strip_to else None, "settings": settings.to_meta(),
                          **gate_meta(evaluated)})
    report.add(qa_section(result, conditions=evaluated))
    buf = io.StringIO()
    result.images.to_csv(buf, index=False)
    paths = report.write(output, extra_files={"images.csv": buf.getvalue().encode()})
    q = result.quantities()
    across = f" ({int(q['n_cross_split_duplicates'])} across splits)" if split_col is not None else ""
    done(paths, f"{int(q['n_images'])} images: {int(q['n_unreadable'])} unreadable, {int(q['n_low_resolution'])} "
                f"below {min_side} px, {int(q['n_near_duplicate_pairs'])} near-duplicate pairs{across}, "
                f"{int(q['n_with_gps'])} with GPS")
    bad = result.images.loc[~result.images["readable"]]
    for path, error in list(zip(bad["image_path"], bad["error"]))[:20]:
        typer.echo(f"  unreadable: {path}: {error}")
    if len(bad) > 20:
        typer.echo(f"  ... and {len(bad) - 20} more unreadable files (images.csv)")
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("qa")(curate_qa_cmd)

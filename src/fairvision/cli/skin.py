"""``fairvision skin measure``: apparent skin colour of many images, one row per image."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fairvision.errors import FairvisionError

_OUTPUT_SUFFIXES = (".parquet", ".csv", ".tsv", ".json", ".jsonl")

skin_app = typer.Typer(
    help="Measure apparent skin colour (CIELAB L*, hue angle h*, ITA and categories) from images.",
    no_args_is_help=True,
)


def measure_cmd(
    source: Path = typer.Argument(
        ..., metavar="IMAGES_OR_FOLDER_OR_TABLE",
        help="An image, a folder of images, or a sample table (CSV, TSV, Parquet, JSON/JSONL) with an image path column.",
    ),
    output: Path = typer.Option(Path("skin.parquet"), "--output", "-o", help="Output table: .parquet, .csv, .tsv, .json or .jsonl (written atomically)."),
    method: str = typer.Option("thong", "--method", "-m", help="Colour estimator: thong (deterministic Thong et al.), thong-published, mean, median_ita, gray_mean."),
    mask_method: str = typer.Option("mediapipe", "--mask-method", help="Automatic skin mask: mediapipe (face mesh; default), dlib (BiasPainter's 68 landmarks), colour (YCrCb rule, low trust), auto (mediapipe, then dlib, then colour)."),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of supplied skin masks named <sample_id>.png, <image stem>.png or <image stem>_skin.png (binary, or label maps with --skin-label)."),
    skin_label: Optional[int] = typer.Option(None, "--skin-label", help="Label id of skin in label-map masks (CelebAMask-HQ / FHIBE style)."),
    faces: str = typer.Option("all", "--faces", help="Which faces to measure: all (default) or largest (face crops with bystanders at the edge)."),
    workers: int = typer.Option(2, "--workers", "-j", min=1, help="Worker processes."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache folder: a rerun (or an interrupted run) reuses finished images; a changed image or option is recomputed."),
    overlays: Optional[Path] = typer.Option(None, "--overlays", help="Write a QA overlay PNG per image here: mask outline, face outline and the thong clusters."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
):
    """Measure the apparent skin colour of every image and write one row per image:
    L*, a*, b*, hue angle, ITA, chroma, pixel count, faces found, mask method and trust, quality
    flags, the skin-colour categories, and for images that could not be measured the reason."""
    from fairvision.audits.skin_batch import measure_images
    from fairvision.io.tables import write_table

    if output.exists() and output.is_dir():
        raise FairvisionError(f"{output}: is a folder; give an output file such as skin.parquet")
    if output.suffix.lower() not in _OUTPUT_SUFFIXES:  # before any work
        raise FairvisionError(f"{output}: unknown output format {output.suffix!r}; use {', '.join(_OUTPUT_SUFFIXES)}")
    if not source.exists():
        raise FairvisionError(f"{source}: no such file or folder")
    df = measure_images(
        source, method=method, mask_method=mask_method, masks_dir=masks, skin_label=skin_label,
        workers=workers, cache_dir=cache, overlays_dir=overlays, progress=progress, faces=faces,
    )
    write_table(df, output)
    s = df.attrs["summary"]
    line = (
        f"{s['images']:,} images: {s['measured']:,} measured, {s['no_face']:,} no face, "
        f"{s['too_few_pixels']:,} too few skin pixels, {s['failed']:,} failed"
    )
    if s["from_cache"]:
        line += f" ({s['from_cache']:,} from cache)"
    typer.echo(line)
    typer.echo(f"table: {output.resolve()}")
    if overlays is not None:
        typer.echo(f"overlays: {overlays.resolve()}")
    if s["measured"] == 0:
        typer.echo("error: no image could be measured; see the reason column", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    skin_app.command("measure")(measure_cmd)
    app.add_typer(skin_app, name="skin")

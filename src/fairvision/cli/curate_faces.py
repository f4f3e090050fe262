"""``fairvision curate crops``: derived face sets, cropped-only and cropped-and-aligned (docs/METHODS.md §13.6)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, image_table, progress_bar
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

METHODS = ("eye-mouth", "ffhq", "eyes")


@with_settings("workers", "engine", "address")
def curate_crops_cmd(
    source: str = typer.Argument(..., help="A folder of images, a sample table with image paths, or 'portraits' / 'demo'."),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder: cropped/, aligned/ and manifest.csv."),
    landmarks: Optional[Path] = typer.Option(None, "--landmarks", help="Table of faces: sample_id, optional face, box_x0..box_y1 and/or left_eye_x, left_eye_y, right_eye_x, ..., right_mouth_y (image left/right). Images without a row use the built-in face models."),
    size: int = typer.Option(512, "--size", help="Side of the aligned faces in pixels."),
    scale: float = typer.Option(2.0, "--scale", help="Enlargement of the face box for the cropped-only faces."),
    method: str = typer.Option("eye-mouth", "--method", help="Alignment: eye-mouth (default; fixes the eye midpoint and a level eye line, scale from the eye-mouth distance; each eye's x varies with face proportions), ffhq (FHIBE's FFHQ square; fixes no point exactly) or eyes (fixes both eye centres)."),
    settings: AuditSettings = None,
):
    """Write FHIBE's two derived face sets: cropped-only (face box x2, mean-colour padding) and cropped-and-aligned
    (rotation from the eye line, scale from the eye-mouth distance: the eye midpoint at a fixed point, the eye line level;
    --method ffhq for FFHQ's square, --method eyes to fix both eyes), with a manifest of boxes, landmarks and transforms
    (docs/METHODS.md §13.6)."""
    check_outdir(output)
    if method not in METHODS:
        raise FairvisionError(f"--method must be one of {', '.join(METHODS)}, not {method!r}")
    if size < 8:
        raise FairvisionError(f"--size must be at least 8, got {size}")
    if not scale > 0:
        raise FairvisionError(f"--scale must be positive, got {scale}")
    # lazy: numpy, pandas, OpenCV and the face models cost seconds, many times the CLI's start-up
    data = image_table(source, recursive=True)  # before the heavy imports: a missing input fails fast

    from fairvision.audits.curation.faces import derive_face_sets
    from fairvision.io.tables import read_raw_table

    lm = None
    if landmarks is not None:
        lm = read_raw_table(landmarks)
        if "sample_id" in lm.columns:
            lm["sample_id"] = lm["sample_id"].astype(str)
    with progress_bar("deriving faces") as progress:
        res = derive_face_sets(data, output, landmarks=lm, size=size, scale=scale, method=method, settings=settings,
                               progress=progress, source=source)
    q = res.quantities()
    typer.echo(f"manifest: {(output / 'manifest.csv').resolve()}")
    typer.echo(f"{int(q['n_images'])} images, {int(q['n_faces'])} faces: {int(q['n_cropped'])} cropped, "
               f"{int(q['n_aligned'])} aligned" + (f"; {int(q['n_failed_images'])} images failed (failures.csv)"
                                                   if q["n_failed_images"] else ""))
    none = res.no_face
    if none:
        shown = ", ".join(none[:20]) + (f" and {len(none) - 20} more" if len(none) > 20 else "")
        typer.echo(f"no face found in {len(none)} image(s) (manifest rows with skipped = 'no face found'): {shown}")


def register(curate_app: typer.Typer) -> None:
    curate_app.command("crops")(curate_crops_cmd)

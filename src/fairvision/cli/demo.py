"""``fairvision demo``: the main job on the bundled demo data."""

from __future__ import annotations

from pathlib import Path

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import done, status
from fairvision.cli.dataset import ReportOptions, SkinOptions, run_dataset_audit
from fairvision.cli.options import with_settings


@with_settings("workers", "n_boot", workers=2)
def demo_cmd(
    output: Path = typer.Option(Path("demo-report"), "--output", "-o", help="Output folder for the report."),
    measure_skin: bool = typer.Option(True, "--measure-skin/--no-measure-skin", help="Measure apparent skin colour of every photo (needs the vision extra)."),
    vlm: bool = typer.Option(True, "--vlm/--no-vlm", help="Also run the zero-shot vision-language probe with the offline tiny-random CLIP-style model (random weights: it shows the pipeline, its labels are meaningless; needs torch and transformers). Report in OUTPUT/vlm."),
    settings: AuditSettings = None,
):
    """Audit the bundled FairFace sample (540 photos, 9 age groups x 2 genders, CC BY 4.0): group and
    intersection counts, representation, associations and, with the vision extra, apparent skin colour
    (CIELAB L* and hue) crossed with age and gender; then the zero-shot vision-language probe run end to end with
    a tiny randomly initialised CLIP-style model (no CLIP weights ship in any PyPI package: its labels are
    meaningless). Prints where the reports are."""
    from fairvision.datasets import load_demo  # lazy: pandas adds ~0.5 s to `fairvision --help`

    df, schema = load_demo(with_schema=True)
    df.attrs["source"] = str(Path(df["image_path"].iloc[0]).parent / "ground_truth.json")
    skin = None
    if measure_skin:
        from fairvision.skin.batch import MeasureParams  # lazy: the vision stack, only to measure

        skin = SkinOptions(MeasureParams(faces="largest"))
    with status("fairvision demo") as say:
        paths, audit = run_dataset_audit(
            df, ["age", "gender"], output, schema=schema, settings=settings, skin=skin, progress=say,
            echo=lambda line: typer.echo(line, err=True),
            report=ReportOptions(title="fairvision demo: FairFace sample (540 images)",
                                 meta={"data": "FairFace sample, CC BY 4.0 (Karkkainen and Joo, WACV 2021)"}),
        )
        vlm_dir = None
        if vlm:
            from fairvision.cli.vlm_embed import run_vlm_demo

            vlm_dir = run_vlm_demo(df, output / "vlm", n_boot=settings.n_boot, progress=say)
    if vlm_dir is not None:  # before the main report, whose path is the last line a user reads
        typer.echo(f"zero-shot probe demo (tiny-random model, meaningless labels): {(vlm_dir / 'report.html').resolve()}")
    done(paths)


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)

"""``fairvision demo``: the main job on the bundled demo data."""

from __future__ import annotations

from pathlib import Path

import typer

from fairvision.cli.common import done, status
from fairvision.cli.dataset import run_dataset_audit


def demo_cmd(
    output: Path = typer.Option(Path("demo-report"), "--output", "-o", help="Output folder for the report."),
    measure_skin: bool = typer.Option(True, "--measure-skin/--no-measure-skin", help="Measure apparent skin colour of every photo (needs the vision extra)."),
    workers: int = typer.Option(2, "--workers", "-j", min=1, help="Worker processes for skin measurement."),
    n_boot: int = typer.Option(1000, "--n-boot", min=0, help="Bootstrap resamples for confidence intervals."),
):
    """Audit the bundled FairFace sample (540 photos, 9 age groups x 2 genders, CC BY 4.0): group and
    intersection counts, representation, associations and, with the vision extra, apparent skin colour
    (CIELAB L* and hue) crossed with age and gender. Prints where the report is."""
    from fairvision.datasets import load_demo  # lazy: pandas adds ~0.5 s to `fairvision --help`

    df, schema = load_demo(with_schema=True)
    df.attrs["source"] = str(Path(df["image_path"].iloc[0]).parent / "ground_truth.json")
    with status("fairvision demo") as say:
        paths, audit = run_dataset_audit(
            df, ["age", "gender"], output, schema=schema, n_boot=n_boot, measure_skin=measure_skin, workers=workers,
            title="fairvision demo: FairFace sample (540 images)", progress=say,
            report_meta={"data": "FairFace sample, CC BY 4.0 (Karkkainen and Joo, WACV 2021)"},
        )
    done(paths)


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)

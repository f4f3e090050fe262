"""``fairvision benchmark cropping build|run``: the saliency-cropping benchmark (docs/METHODS.md §6.8).

``build`` writes two-face composites and their manifest; ``run`` runs a cropper on them and writes the games
that ``fairvision audit cropping`` rates. The audit, report, pandas and image imports stay inside the commands
(they add seconds to ``fairvision --help``; see cli/skin.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (
    NO_STORE_OPTION, STORE_OPTION, check_outdir, done, image_table, progress_bar, progress_bars, results_store,
)
from fairvision.cli.options import with_settings
from fairvision.cli.skin import HUE_THRESHOLD_OPTION, L_THRESHOLD_OPTION

#: defaults of fairvision.vision.composites (PER_PAIR, GAP) and fairvision.vision.croppers (ASPECT), not imported
#: here: they bring in numpy
PER_PAIR_DEFAULT = 10
GAP_DEFAULT = 50
ASPECT_DEFAULT = "16:9"

benchmark_app = typer.Typer(help="Benchmarks a model is run through: two-face composites for saliency cropping.",
                            no_args_is_help=True)
cropping_app = typer.Typer(
    help="Saliency-cropping benchmark (Thong et al.): build two-face composites, run a cropper on them; rate the "
         "groups with 'fairvision audit cropping'.",
    no_args_is_help=True)


@with_settings("seed", "workers", "engine", "address", "correction", "alpha", "level", "min_subjects",
               workers=2)
def build_cmd(
    source: str = typer.Argument(..., metavar="IMAGES_OR_TABLE", help="A folder of images, a sample table with an image path column, or 'portraits' / 'demo' for the bundled photos."),
    output: Path = typer.Option(Path("cropping-benchmark"), "--output", "-o", help="Output folder: composites/ (PNG), composites.csv (the manifest), report.html, report.json and tables/."),
    attr: str = typer.Option("skin", "--attr", "-a", help="Groups: skin (default: Thong et al.'s light/dark x red/yellow cells of the measured skin colour) or any attribute column of the table."),
    per_pair: int = typer.Option(PER_PAIR_DEFAULT, "--per-pair", help="Composites per pair of two different groups (even: each group of a pair is on top in half of them)."),
    width: Optional[int] = typer.Option(None, "--width", help="Common width of a composite in pixels (default: the smaller of the two images' widths, so no image is enlarged)."),
    gap: int = typer.Option(GAP_DEFAULT, "--gap", help="White rows between the two faces."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Person column: two images of one person are not paired (default: subject_id when the table has one)."),
    L_threshold: Optional[float] = L_THRESHOLD_OPTION,
    hue_threshold: Optional[float] = HUE_THRESHOLD_OPTION,
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress on stderr."),
    settings: AuditSettings = None,
):
    """Build the saliency-cropping benchmark: for every pair of two different groups the same number of
    composites, each two face images stacked vertically at one width with white rows between them, written as
    PNGs with a manifest of the faces' groups and boxes (docs/METHODS.md §6.8). Images without a group (no face
    measured, no value) are left out and counted. The report shows counts only, never a face.

    Example:
        fairvision benchmark cropping build portraits -o crops/ --per-pair 10
    """
    check_outdir(output)
    data = image_table(source)  # before the heavy imports: a missing input fails fast
    # lazy imports: see the module docstring
    from fairvision.audits.cropping_benchmark import BuildOptions, audit_cropping_build
    from fairvision.report import Report
    from fairvision.report.sections.cropping_benchmark import build_sections
    from fairvision.skin.categories import HUE_THRESHOLD, L_THRESHOLD

    options = BuildOptions(attribute=attr, per_pair=per_pair, width=width, gap=gap, subject_col=subject_col,
                           L_threshold=L_THRESHOLD if L_threshold is None else L_threshold,
                           hue_threshold=HUE_THRESHOLD if hue_threshold is None else hue_threshold)
    if attr != "skin" and attr not in data.columns:  # before measuring anything
        from fairvision.io.validate import require_columns
        require_columns(data, [attr], source=str(source), why=" for --attr (or 'skin' to measure skin colour)")
    results = results_store(store, no_store) if attr == "skin" else None

    def write_report(stage: Path, result) -> None:
        report = Report(title=f"Saliency-cropping benchmark: {Path(str(source)).name}",
                        subtitle="fairvision benchmark cropping build",
                        meta={"source": str(source), **options.to_meta(), "settings": settings.to_meta()})
        for s in build_sections(result):
            report.add(s)
        report.write(stage)

    with progress_bars(progress) as advance:
        result = audit_cropping_build(data, output, options=options, settings=settings, store=results,
                                      progress=advance, finish=write_report)
    typer.echo(result.coverage.summary_line())
    if result.composing.n_left_out:
        typer.echo(result.composing.summary_line())
    typer.echo(f"{len(result.manifest):,} composites for {int(result.quantities()['n_pairs'])} pairs of groups")
    typer.echo(f"manifest: {(output / 'composites.csv').resolve()}")
    done({"html": output / "report.html", "json": output / "report.json"})


@with_settings("workers", "engine", "address", "level", "correction", "alpha", workers=2)
def run_cmd(
    folder: Path = typer.Argument(..., metavar="BENCHMARK_FOLDER", help="A folder written by 'fairvision benchmark cropping build'."),
    cropper: str = typer.Option("saliency", "--cropper", help="saliency (default: spectral-residual where OpenCV has it, else gradient), spectral-residual (OpenCV's static saliency), gradient (our numpy fallback), or module:function / file.py:function: crop(image HxWx3 uint8 RGB) returning a box (x0, y0, x1, y1) or an HxW saliency map."),
    aspect: str = typer.Option(ASPECT_DEFAULT, "--aspect", help="Aspect ratio (width:height) of the crop made from a saliency map, e.g. 16:9 (default, a landscape preview), 1:1 or 1.5."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output folder: games.csv, games.parquet, report.html, report.json and tables/ (default: BENCHMARK_FOLDER/run)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress on stderr."),
    settings: AuditSettings = None,
):
    """Run a cropper on every composite of a built benchmark and write the games: for each composite the crop,
    the share of it in each face's box and the face kept (top, bottom, or none on a tie), with the columns a, b
    and winner that 'fairvision audit cropping' rates (docs/METHODS.md §6.8). The report shows counts per pair of
    groups and the position bias (how often the top face is kept).

    Example:
        fairvision benchmark cropping run crops/ --cropper saliency -o crops/run
    """
    output = output if output is not None else folder / "run"
    check_outdir(output)
    # lazy imports: see the module docstring
    from fairvision.vision.croppers import aspect_text, parse_aspect  # numpy only: a bad --aspect fails fast

    ratio = parse_aspect(aspect)
    from fairvision.audits.cropping_benchmark import audit_cropping_run
    from fairvision.io.atomic import atomic_output_dir
    from fairvision.io.tables import write_table
    from fairvision.report import Report
    from fairvision.report.sections.cropping_benchmark import run_sections

    with progress_bar("cropping", progress) as advance:
        result = audit_cropping_run(folder, cropper=cropper, aspect=ratio, settings=settings, progress=advance)
    report = Report(title=f"Saliency-cropping benchmark: {result.cropper} on {folder.resolve().name}",
                    subtitle="fairvision benchmark cropping run",
                    meta={"benchmark": str(folder), "cropper": result.cropper, "aspect": aspect_text(ratio),
                          "settings": settings.to_meta()})
    for s in run_sections(result):
        report.add(s)
    with atomic_output_dir(output) as stage:
        write_table(result.games, stage / "games.csv")
        write_table(result.games, stage / "games.parquet")
        report.write(stage)
    typer.echo(result.coverage.summary_line())
    p = result.position.loc["all"]
    typer.echo(f"{int(p['games']):,} games: top kept {int(p['top']):,}, bottom {int(p['bottom']):,}, "
               f"neither {int(p['none']):,}")
    typer.echo(f"games: {(output / 'games.csv').resolve()}")
    done({"html": output / "report.html", "json": output / "report.json"})


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    cropping_app.command("build")(build_cmd)
    cropping_app.command("run")(run_cmd)
    benchmark_app.add_typer(cropping_app, name="cropping")
    app.add_typer(benchmark_app, name="benchmark")

"""``fairvision transfer subsets|demo`` and ``fairvision audit transfer``: bias-transfer studies."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, results_store, status
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, ParameterError

transfer_app = typer.Typer(
    help="Bias-transfer studies: training subsets with controlled bias, and dataset bias set against model bias.",
    no_args_is_help=True,
)


#: parameters of :func:`fairvision.audits.transfer.design.design_subsets` -> this command's options
_SUBSET_OPTIONS = {"attributes": "attr", "designs": "design", "fractions": "fraction"}


@with_settings("seed")
def subsets_cmd(
    table: Path = typer.Argument(..., help="Labelled sample table (CSV, TSV, Parquet, JSON/JSONL)."),
    label: str = typer.Option(..., "--label", "-l", help="Column the models predict (the class)."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Demographic attribute column (repeat: -a gender -a race)."),
    output: Path = typer.Option(Path("fairvision-subsets"), "--output", "-o", help="Output folder: test set, subsets/, summary tables, design.json, report.html."),
    design: List[str] = typer.Option([], "--design", "-d", help="Subset family: stratified, balanced, single (repeat; default all three)."),
    fraction: List[float] = typer.Option([], "--fraction", help="Fraction of the pool for a stratified subset (repeat; default 0.25, 0.5, 1)."),
    size: Optional[int] = typer.Option(None, "--size", help="Rows of every balanced and single-group subset (and of a stratified one of the same size); default the largest possible."),
    test_fraction: float = typer.Option(0.3, "--test-fraction", help="Share of the subjects held out as the common test set."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present); a person is never in both the test set and a subset."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins."),
    missing: str = typer.Option("error", "--missing", help="Empty label or attribute cells: 'error' (stop), 'drop' (leave the row out), 'keep' (group '(missing)')."),
    fmt: str = typer.Option("csv", "--format", help="Format of the written tables: csv or parquet."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Design the training subsets of a bias-transfer study: hold out a common test set by subject, then draw
    stratified fractions (keeping the joint class x group distribution), subsets balanced per class and group, and
    single-group subsets, at equal sizes; write each as a table with its NSD / NMI / NPMI (docs/METHODS.md §11.1)."""
    check_outdir(output)
    if fmt not in ("csv", "parquet"):
        raise FairvisionError(f"--format must be csv or parquet, not {fmt!r}")
    # lazy: pandas and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.transfer.design import DEFAULT_FRACTIONS, DESIGNS, design_subsets, write_design
    from fairvision.io.atomic import atomic_output_dir
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.transfer import design_section
    from fairvision.schema import Schema

    data = read_table(table)
    schema = Schema.from_file(schema_file) if schema_file else None
    try:
        d = design_subsets(data, label, attr, designs=design or DESIGNS, fractions=fraction or DEFAULT_FRACTIONS,
                           size=size, test_fraction=test_fraction, subject_col=subject_col, schema=schema,
                           missing=missing, settings=settings)
    except ParameterError as exc:  # name this command's option, not the library's parameter
        if exc.parameter not in _SUBSET_OPTIONS:
            raise
        raise ParameterError(_SUBSET_OPTIONS[exc.parameter], str(exc)[len(exc.parameter) + 1:]) from None
    report = Report(title=title or f"Bias-transfer subsets: {table.name}", subtitle="fairvision transfer subsets",
                    meta={"table": str(table), "label": label, "attributes": ", ".join(attr),
                          "settings": settings.to_meta()})
    report.add(design_section(d))
    with atomic_output_dir(output) as stage:
        write_design(d, stage, fmt=fmt)
        paths = report.write(stage)
    done({k: output / Path(v).name for k, v in paths.items()},
         f"{len(d.subsets)} subsets and a test set of {len(d.test):,} rows in {output.resolve()}")


@with_settings("min_subjects", "correction", "alpha", "n_boot", "seed", min_subjects=1)
def audit_transfer_cmd(
    subsets: Path = typer.Option(..., "--subsets", help="Folder written by 'fairvision transfer subsets'."),
    predictions: Path = typer.Option(..., "--predictions", help="Folder with one table per subset, named <subset>.csv (or .parquet ...), holding sample_id and the prediction of that subset's model for every test sample."),
    output: Path = typer.Option(Path("fairvision-transfer-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    pred_col: str = typer.Option("prediction", "--pred-col", help="Column of the predicted class in the prediction tables."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'max_od>0.2', 'od.balanced_gender.gender>0.1', 'n_flagged>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Study table of a bias-transfer study: per subset, its dataset bias (NSD, NMI) beside its model's accuracy,
    OD and ID per class on the common test set with bootstrap CIs over test subjects, and every pair of subsets
    compared on OD with a paired bootstrap (docs/METHODS.md §11.2, §11.3)."""
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]
    from fairvision.audits.transfer import audit_transfer, read_design, read_predictions  # lazy: see subsets_cmd

    design = read_design(subsets)
    preds = read_predictions(predictions, design, pred_col=pred_col)
    result = audit_transfer(design, preds, pred_col=pred_col, settings=settings)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    paths = write_study(result, output, title=title or f"Bias-transfer study: {Path(subsets).name}",
                        meta={"subsets": str(subsets), "predictions": str(predictions),
                              "settings": settings.to_meta(), **gate_meta(evaluated)}, conditions=evaluated)
    for cov in result.left_out:
        typer.echo(cov.summary_line())
    q = result.quantities()
    done(paths, f"{len(result.subsets)} models; {int(q['n_significant_pairs'])} significant pairs; "
                f"{int(q['n_flagged'])} flagged")
    exit_if_gates_failed(evaluated)


def write_study(result, output: Path, *, title: str, meta: dict, conditions=(), demo: bool = False, extra_files=None):
    """Write the study report (the study section, a coverage section for each step that left something out,
    and the design section)."""
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.transfer import design_section, study_section

    report = Report(title=title, subtitle="fairvision bias-transfer study", meta=meta)
    report.add(study_section(result, conditions=list(conditions), demo=demo))
    for cov in result.left_out:
        report.add(coverage_section(cov, id=f"transfer-coverage-{cov.step.replace(' ', '-')}",
                                    title=f"{cov.unit.capitalize()} left out: {cov.step}"))
    report.add(design_section(result.design))
    return report.write(output, extra_files=extra_files)


@with_settings("workers", "n_boot", "seed", workers=2, min_subjects=1)
def demo_cmd(
    output: Path = typer.Option(Path("transfer-demo"), "--output", "-o", help="Output folder for the report, subsets and predictions."),
    label: str = typer.Option("gender", "--label", help="What the classifiers predict: gender (attribute: age band) or age_band (attribute: gender)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=30, help="Use only this many photos (a quick run)."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    settings: AuditSettings = None,
):
    """Run a whole bias-transfer study offline on the bundled FairFace sample (needs the vision extra): dlib face
    descriptors, subsets, one logistic regression per subset, the study report. A demonstration of the method."""
    check_outdir(output)
    from fairvision.audits.transfer.demo import run_demo  # lazy: scikit-learn and dlib load only here

    with status("fairvision transfer demo") as say:
        demo = run_demo(label=label, limit=limit, settings=settings, progress=say, store=results_store(store, no_store))
    for cov in demo.result.left_out:
        typer.echo(cov.summary_line())
    files = demo.files()
    paths = write_study(demo.result, output, title="fairvision demo: bias-transfer study on the FairFace sample",
                        meta={"data": "FairFace sample, CC BY 4.0 (Karkkainen and Joo, WACV 2021)",
                              "model": "logistic regression on dlib face descriptors", **demo.meta,
                              "settings": settings.to_meta()},
                        demo=True, extra_files=files)
    done(paths, f"{len(demo.result.subsets)} models trained; {demo.meta['faces']} faces described")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    transfer_app.command("subsets")(subsets_cmd)
    transfer_app.command("demo")(demo_cmd)
    app.add_typer(transfer_app, name="transfer")
    audit_app.command("transfer")(audit_transfer_cmd)

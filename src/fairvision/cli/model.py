"""``fairvision audit model``: how a model's per-sample scores differ between groups and intersections."""

from __future__ import annotations

from math import comb
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed, progress_bar
from fairvision.errors import FairvisionError
from fairvision.audits.settings import AuditSettings
from fairvision.cli.options import with_settings


@with_settings("min_subjects", "correction", "alpha", "n_boot", "seed")
def audit_model_cmd(
    samples: Path = typer.Option(..., "--samples", "-s", help="Sample table (CSV, TSV, Parquet, JSON/JSONL): sample_id, attribute columns, optionally subject_id."),
    scores: Path = typer.Option(..., "--scores", help="Per-sample scores table with a sample_id column and one column per metric; joined on sample_id."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat: -a gender -a age)."),
    output: Path = typer.Option(Path("fairvision-model-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    metric: List[str] = typer.Option([], "--metric", "-m", help="Score column to audit (repeat; default: every numeric column of the scores table)."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present). CIs resample people, not images."),
    lower_is_better: List[str] = typer.Option([], "--lower-is-better", help="Metric where lower is better (error, LPIPS): worst and best swap. Repeat for several."),
    max_k: int = typer.Option(2, "--max-k", min=1, max=6, help="Largest intersection size (1 = single attributes, 2 = also every pair of attributes, ...)."),
    test_unit: str = typer.Option("subject", "--test-unit", help="What the Mann-Whitney tests compare: 'subject' (mean per person; images of one person are not independent) or 'sample' (every image, as the FHIBE paper)."),
    true_col: Optional[str] = typer.Option(None, "--true-col", help="True class column (samples or scores table): adds recall by class and group, ID and OD with a CI."),
    pred_col: Optional[str] = typer.Option(None, "--pred-col", help="Predicted class column, with --true-col."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'disparity>0.2', 'accuracy.max_disparity>=0.1', 'od>0.15'. Repeat: any one failing fails."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins, multi-valued attributes, hierarchies."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave out), 'keep' (group '(missing)')."),
    multi: List[str] = typer.Option([], "--multi", help="Attribute whose cells hold several values separated by '|' (a subject counts in each)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Audit a model: disaggregate per-sample scores (recall, IoU, PCK, accuracy, PSNR...) by group and
    intersection with subject-level bootstrap CIs; compare every pair of groups with Mann-Whitney U tests
    and Holm/Bonferroni/BH correction; report the FHIBE disparity D, best and worst groups and the top
    disparities across intersections; optionally multi-class OD. --fail-if gates a CI pipeline."""
    check_outdir(output)
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    paths, result, evaluated = run_model_audit(
        samples, scores, attr, output, metrics=metric, subject_col=subject_col, lower_is_better=lower_is_better,
        max_k=max_k, settings=settings, test_unit=test_unit, true_col=true_col, pred_col=pred_col,
        conditions=conditions, schema_file=schema_file, missing=missing, multi=multi, title=title,
    )
    if result.n_left_out:
        typer.echo(result.coverage.summary_line())
    top = result.top_disparities
    scored = f" ({result.n_scored:,} scored in full)" if result.n_left_out else ""
    extra = f"{result.n_samples:,} samples{scored}, {len(result.metrics)} metrics, {len(result.intersections)} attribute sets"
    if len(top):
        lead = top.iloc[0]
        extra += f"; largest disparity D={lead['disparity']:.3f} ({lead['metric']} by {lead['intersection']})"
    done(paths, extra)
    exit_if_gates_failed(evaluated)


def run_model_audit(samples, scores, attributes, output, *, metrics=(), subject_col=None, lower_is_better=(), max_k=1,
                    settings=None, test_unit="subject", true_col=None, pred_col=None, conditions=(), schema=None,
                    missing="error", multi=(), title=None, schema_file=None):
    """Read, join, audit and write the report; returns ``(paths, result, evaluated_conditions)``."""
    # lazy: pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up (every command imports this module)
    import pandas as pd

    from fairvision.audits.model import audit_model
    from fairvision.io.scores import check_predicted_classes
    from fairvision.io.scores import join_scores, score_columns
    from fairvision.io.tables import read_table
    from fairvision.io.validate import finite_values
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.model import model_section
    from fairvision.schema import Schema

    def load(t, role):
        if isinstance(t, pd.DataFrame):
            return t, t.attrs.get("source", role)
        return read_table(t), str(t)

    sdf, s_src = load(samples, "samples")
    cdf, c_src = load(scores, "scores")
    data = join_scores(sdf, cdf, samples_source=s_src, scores_source=c_src)
    if not metrics:
        metrics = score_columns(cdf, exclude=(true_col, pred_col, subject_col, "subject_id", "image_id", "id"))
        if not metrics and true_col is None:
            raise FairvisionError(f"{c_src}: no numeric score columns; name them with --metric")
    for m in metrics:  # a bad score is reported in the scores file, at its own row
        if m in cdf.columns and m not in sdf.columns:
            finite_values(cdf, m, source=c_src, what="metric")
    if schema is None:
        schema = Schema.from_file(schema_file) if schema_file else Schema()
    if true_col in data.columns and pred_col in cdf.columns and pred_col not in sdf.columns:
        # an unknown predicted class is reported in the scores file, at its own row
        check_predicted_classes(cdf, pred_col, data, true_col, schema=schema, source=c_src)
    if subject_col is None:
        subject_col = "subject_id" if "subject_id" in data.columns else None
    elif subject_col not in data.columns:
        raise FairvisionError(f"{s_src}: no subject column {subject_col!r}; columns are {', '.join(map(str, sdf.columns))}")
    schema.declare(attributes, multi=multi, missing=missing)
    n_sets = sum(comb(len(attributes), k) for k in range(1, min(max_k, len(attributes)) + 1))
    total = n_sets * max(1, len(metrics)) + (1 if true_col or pred_col else 0)
    with progress_bar("auditing model") as bar:
        steps = iter(range(1, total + 1))

        def advance(_msg: str) -> None:
            bar(next(steps, total), total)

        result = audit_model(
            data, metrics, [schema[a] for a in attributes], subject_col=subject_col, lower_is_better=lower_is_better,
            max_k=max_k, settings=settings, true_col=true_col, pred_col=pred_col, test_unit=test_unit, progress=advance, source=s_src,
            schema=schema,
        )
    evaluated = evaluate_conditions(list(conditions), result.quantities()) if conditions else []
    report = Report(
        title=title or f"Model audit: {Path(c_src).name}",
        subtitle="fairvision model audit",
        meta={"samples": s_src, "scores": c_src, "attributes": ", ".join(attributes), "metrics": ", ".join(result.metrics),
              "correction": result.correction, "min_subjects": result.min_subjects, "test_unit": test_unit,
              "settings": result.settings.to_meta(),
              **gate_meta(evaluated)},
    )
    report.add(model_section(result, conditions=evaluated))
    if result.n_left_out:
        report.add(coverage_section(result.coverage, id="model-coverage", title="Samples left out, by group"))
    paths = report.write(output)
    return paths, result, evaluated


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("model")(audit_model_cmd)

"""``fairvision audit classifier``: a classifier's rates by group and the fairness criteria practitioners expect.

A command of its own rather than a mode of ``audit model``: the model audit compares per-sample scores
(means, Mann-Whitney tests), this one counts confusion matrices (rates, fairlearn's and aequitas' criteria,
thresholds of a score), and the two share no options beyond the common ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError


def _references(items: List[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise FairvisionError(f"--reference {item!r}: expected ATTRIBUTE=GROUP, e.g. gender=female")
        out[name.strip()] = value.strip()
    return out


@with_settings("min_subjects", "correction", "alpha", "n_boot", "level", "seed")
def audit_classifier_cmd(
    samples: Path = typer.Option(..., "--samples", "-s", help="Sample table (CSV, TSV, Parquet, JSON/JSONL): sample_id, attribute columns, optionally subject_id, and the class columns unless --predictions gives them."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat: -a gender -a age)."),
    predictions: Optional[Path] = typer.Option(None, "--predictions", "-p", help="Table of true and predicted classes (and score) with a sample_id column, joined on sample_id; default: the columns of --samples."),
    output: Path = typer.Option(Path("fairvision-classifier-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    true_col: str = typer.Option("y_true", "--true-col", help="True class column."),
    pred_col: str = typer.Option("y_pred", "--pred-col", help="Predicted class column."),
    score_col: Optional[str] = typer.Option(None, "--score-col", help="Score of the positive class (binary): adds ROC AUC by group and a threshold sweep."),
    positive: Optional[str] = typer.Option(None, "--positive", help="The positive (favourable) class of a binary classifier (default 1, True or yes)."),
    reference: List[str] = typer.Option([], "--reference", help="Reference group ATTRIBUTE=GROUP (repeat): criteria compare every group with it (aequitas) instead of the lowest with the highest."),
    tolerance: float = typer.Option(0.1, "--tolerance", help="A difference criterion (demographic parity, equalized odds...) holds at most this."),
    four_fifths: float = typer.Option(0.8, "--four-fifths", help="A ratio criterion (disparate impact...) holds at least this."),
    max_k: int = typer.Option(2, "--max-k", min=1, max=6, help="Largest intersection size (1 = single attributes, 2 = also every pair of attributes, ...)."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present). CIs resample people, not samples."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'equalized_odds_difference>0.1', 'disparate_impact<0.8', 'flagged>0'. Repeat: any one failing fails."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins, multi-valued attributes, hierarchies."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave out), 'keep' (group '(missing)')."),
    multi: List[str] = typer.Option([], "--multi", help="Attribute whose cells hold several values separated by '|' (a subject counts in each)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Audit a classifier: selection rate, TPR, FPR, FNR, TNR, precision, NPV, accuracy and balanced accuracy by
    group and intersection with subject-level bootstrap CIs; demographic parity, equalized odds, equal
    opportunity, disparate impact (four-fifths rule) and predictive parity as fairlearn computes them, or
    against a reference group; each group tested against the rest; with a score, ROC AUC by group and the
    thresholds at which each criterion holds; more than two classes one-vs-rest with OD. --fail-if gates a CI
    pipeline."""
    check_outdir(output)
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    refs = _references(reference)
    # lazy: pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.classifier import ClassifierOptions

    options = ClassifierOptions(positive=positive, reference=refs or None, tolerance=tolerance, four_fifths=four_fifths)
    paths, result, evaluated = run_classifier_audit(
        samples, predictions, attr, output, true_col=true_col, pred_col=pred_col, score_col=score_col,
        subject_col=subject_col, max_k=max_k, options=options, settings=settings, conditions=conditions,
        schema_file=schema_file, missing=missing, multi=multi, title=title)
    if result.n_left_out:
        typer.echo(result.coverage.summary_line())
    q = result.quantities()
    extra = (f"{result.n_used:,} samples, {len(result.intersections)} attribute sets; demographic parity difference "
             f"{q['demographic_parity_difference']:.3f}, equalized odds difference {q['equalized_odds_difference']:.3f}, "
             f"{int(q['flagged'])} differences flagged")
    done(paths, extra)
    exit_if_gates_failed(evaluated)


def run_classifier_audit(samples, predictions, attributes, output, *, true_col="y_true", pred_col="y_pred",
                         score_col=None, subject_col=None, max_k=1, options=None, settings=None, conditions=(),
                         schema_file=None, missing="error", multi=(), title=None):
    """Read, join, audit and write the report; returns ``(paths, result, evaluated_conditions)``."""
    # lazy: see above
    from fairvision.audits.classifier import audit_classifier
    from fairvision.io.scores import join_scores
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.classifier import classifier_section
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.schema import Schema

    data = read_table(samples)
    source = str(samples)
    if predictions is not None:
        data = join_scores(data, read_table(predictions), samples_source=source, scores_source=str(predictions))
    if subject_col is None:
        subject_col = "subject_id" if "subject_id" in data.columns else None
    elif subject_col not in data.columns:
        raise FairvisionError(f"{source}: no subject column {subject_col!r}; columns are {', '.join(map(str, data.columns))}")
    schema = Schema.from_file(schema_file) if schema_file else Schema()
    schema.declare(attributes, multi=multi, missing=missing)
    result = audit_classifier(data, [schema[a] for a in attributes], true_col=true_col, pred_col=pred_col,
                              score_col=score_col, subject_col=subject_col, max_k=max_k, options=options,
                              settings=settings, schema=schema, source=source)
    evaluated = evaluate_conditions(list(conditions), result.quantities()) if conditions else []
    report = Report(
        title=title or f"Classifier audit: {Path(str(predictions or samples)).name}",
        subtitle="fairvision classifier audit",
        meta={"samples": source, "predictions": str(predictions) if predictions else source,
              "attributes": ", ".join(attributes), "true_col": true_col, "pred_col": pred_col,
              "score_col": score_col, "positive": result.positive, "classes": ", ".join(result.classes),
              "reference": ", ".join(f"{k}={v}" for k, v in (options.reference or {}).items()) if options else "",
              "settings": result.settings.to_meta(), **gate_meta(evaluated)},
    )
    report.add(classifier_section(result, conditions=evaluated))
    if result.n_left_out:
        report.add(coverage_section(result.coverage, id="classifier-coverage", title="Samples left out, by group"))
    paths = report.write(output)
    return paths, result, evaluated


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("classifier")(audit_classifier_cmd)

"""``fairvision curate agreement``: agreement between annotators and vendors, by group (docs/METHODS.md §13.4)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError


@with_settings("min_subjects", "correction", "alpha", "n_boot", "seed")
def curate_agreement_cmd(
    coco: Path = typer.Option(..., "--coco", help="COCO annotations in which every annotation names its annotator (several annotators per image)."),
    annotator_key: str = typer.Option("annotator_id", "--annotator-key", help="Annotation field with the annotator id."),
    vendor_key: Optional[str] = typer.Option(None, "--vendor-key", help="Annotation field with the vendor (annotation team): adds within- and between-vendor agreement."),
    attributes_key: str = typer.Option("attributes", "--attributes-key", help="Annotation field with categorical attributes: an object mapping each attribute name to a value or a list of values (Jaccard, Krippendorff's alpha)."),
    samples: Optional[Path] = typer.Option(None, "--samples", "-s", help="Sample table: sample_id, subject_id, the attribute columns (agreement by group)."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Group attribute column of --samples (repeat)."),
    output: Path = typer.Option(Path("fairvision-agreement-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    sample_id: str = typer.Option("file_name", "--sample-id", help="How a COCO image matches a sample_id: 'file_name' or 'image_id'."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap and test unit); every image its own subject when absent."),
    min_iou: float = typer.Option(0.5, "--min-iou", help="Smallest box IoU for two annotators' annotations to be the same object."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'mean_iou<0.8', 'min_alpha<0.667', 'group.significant_pairs>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Annotation agreement (FHIBE): box IoU, keypoint OKS, mask Dice and attribute Jaccard of matched annotations,
    by annotator pair, annotator, vendor and group, with subject-bootstrap CIs, corrected tests between vendor
    pairs and between groups (annotators described, not tested: their matches overlap) and Krippendorff's alpha
    (docs/METHODS.md §13.4)."""
    check_outdir(output)
    if sample_id not in ("file_name", "image_id"):
        raise FairvisionError(f"--sample-id must be file_name or image_id, not {sample_id!r}")
    if attr and samples is None:
        raise FairvisionError("--attr needs a sample table (--samples)")
    conditions = [parse_condition(c) for c in fail_if]
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.agreement import audit_agreement, read_annotated_coco
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.curation_agreement import agreement_section

    ann = read_annotated_coco(coco, annotator_key, vendor_key=vendor_key, attributes_key=attributes_key)
    data = read_table(samples) if samples is not None else None
    result = audit_agreement(data, ann, attr, settings=settings, sample_id=sample_id, subject_col=subject_col,
                             min_iou=min_iou, max_k=max_k, source=str(samples))
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or f"Annotation agreement: {coco.name}", subtitle="fairvision curate agreement",
                    meta={"annotations": str(coco), "annotator key": annotator_key, "vendor key": vendor_key or "(none)",
                          "samples": str(samples), "min IoU": min_iou, "correction": settings.correction,
                          "seed": settings.seed, "settings": settings.to_meta(), **gate_meta(evaluated)})
    report.add(agreement_section(result, conditions=evaluated))
    pairs = result.pairs.copy()
    paths = report.write(output, extra_files={"pairs.csv": pairs.to_csv(index=False).encode()})
    q = result.quantities()
    done(paths, f"{len(result.annotators)} annotators, {result.n_annotations} annotations; mean IoU "
                f"{q.get('mean_iou', float('nan')):.3f}, match rate {q['match_rate']:.3f}")
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("agreement")(curate_agreement_cmd)

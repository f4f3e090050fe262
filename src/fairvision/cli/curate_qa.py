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
from fairvision.errors import FairvisionError


@with_settings("workers", "engine", "address", "correction", "alpha", "level", "min_subjects")
def curate_qa_cmd(
    source: str = typer.Argument(..., help="A folder of images, a sample table with image paths, or 'portraits' / 'demo'."),
    output: Path = typer.Option(Path("fairvision-qa-report"), "--output", "-o", help="Output folder for report.html, report.json, tables/ and images.csv."),
    split_col: Optional[str] = typer.Option(None, "--split-col", help="Column of the split (train/test...): near duplicates across splits are counted. For a folder without such a column, the first subfolder is the split (photos/train/x.jpg: train)."),
    min_side: int = typer.Option(256, "--min-side", help="Resolution floor: flag images whose shorter side is below this many pixels."),
    hamming: int = typer.Option(6, "--hamming", help="Near duplicate: perceptual hashes at most this many bits (of 64) apart."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Collection policy (TOML) checked besides the image checks; it overrides the keys it sets of the bundled FHIBE policy (8 MP, EXIF, aspect ratio up to 2:1, at most 10 images per subject, 24 h apart, annotations). Default: the FHIBE policy."),
    no_policy: bool = typer.Option(False, "--no-policy", help="Skip the collection-guideline checks."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Group column: does failing a guideline check concentrate in a group? (repeat: -a gender -a age)."),
    known_hashes: Optional[Path] = typer.Option(None, "--known-hashes", help="Table (CSV/Parquet) of known perceptual hashes (column phash or hash, 16 hex digits; optional label, source) to match every image against."),
    known_hamming: int = typer.Option(6, "--known-hamming", help="Known-content match: hashes at most this many bits (of 64) apart."),
    strip_to: Optional[Path] = typer.Option(None, "--strip-metadata-to", help="Write copies of the readable images without EXIF/GPS/XMP/comments into this folder."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_cross_split_duplicates>0', 'n_with_gps>0', 'n_policy_failures>0', 'n_failed_time_apart>0', 'n_cross_subject_duplicates>0', 'n_known_matches>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Check images before release: unreadable or truncated files, a resolution floor, exact and near duplicates
    (perceptual hashes, also across train/test splits) and EXIF/GPS metadata, optionally writing copies without
    the metadata (docs/METHODS.md §13.7); the collection guidelines of a policy (FHIBE's by default: resolution,
    EXIF, aspect ratio, images per subject, time between photos, annotations; docs/METHODS.md §13.8); and,
    with --known-hashes, matches against known perceptual hashes (docs/METHODS.md §13.9)."""
    if no_policy and policy is not None:
        raise FairvisionError("--policy and --no-policy: give one of them (--no-policy skips the policy's checks)")
    check_outdir(output)
    if strip_to is not None:
        check_outdir(strip_to)
    conditions = [parse_condition(c) for c in fail_if]
    data = image_table(source, recursive=True)  # before the heavy imports: a missing input fails fast

    # lazy: numpy, pandas, PIL and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.known_content import audit_known_content, read_known_hashes
    from fairvision.audits.curation.policy import audit_policy, load_policy
    from fairvision.audits.curation.qa import audit_images, split_from_folder, strip_all
    from fairvision.io.atomic import atomic_output_dir
    from fairvision.io.validate import require_columns
    from fairvision.report import Report
    from fairvision.report.sections.curation_policy import known_content_section, policy_csv, policy_sections
    from fairvision.report.sections.curation_qa import qa_section

    # before any image is decoded: the policy, the group columns and the known hashes are checked
    rules = None if no_policy else load_policy(policy)
    require_columns(data, attr, source=source, what="attribute column (--attr)")
    known = read_known_hashes(known_hashes) if known_hashes is not None else None
    if not 0 <= known_hamming <= 32:
        raise FairvisionError(f"--known-hamming must be between 0 and 32 bits, got {known_hamming}")

    if split_col is not None and split_col not in data.columns and Path(source).is_dir():
        data = split_from_folder(data, source, split_col)  # photos/train/x.jpg: split "train"
    results = results_store(store, no_store)  # checks of files seen before
    with progress_bar("checking images") as progress:
        result = audit_images(data, settings=settings, split_col=split_col, min_side=min_side, hamming=hamming,
                              progress=progress, store=results, source=source)
    quantities = result.quantities()
    checked = known_matched = None
    if rules is not None:
        image_cols = ["readable", "width", "height", "has_exif", "datetime_original", "phash"]
        table = data.reset_index(drop=True).drop(columns=[c for c in image_cols if c in data.columns])
        table = table.join(result.images[image_cols].reset_index(drop=True))
        checked = audit_policy(table, rules, attributes=attr, near_duplicates=result.near_duplicates,
                               settings=settings, source=source)
        quantities.update(checked.quantities())
    if known is not None:
        known_matched = audit_known_content(result.images, known, hamming=known_hamming)
        quantities.update(known_matched.quantities())
    evaluated = evaluate_conditions(conditions, quantities) if conditions else []
    if strip_to is not None:
        with atomic_output_dir(strip_to) as stage:
            result.stripped = strip_all(result.images, stage)
        result.stripped["stripped_path"] = [str(Path(strip_to) / Path(p).name) for p in result.stripped["stripped_path"]]
    report = Report(title=title or f"Image quality checks: {Path(source).name}", subtitle="fairvision curate qa",
                    meta={"source": source, "split column": split_col, "min side": min_side, "hamming": hamming,
                          "policy": f"{rules.name} ({rules.source})" if rules is not None else "none (--no-policy)",
                          "attributes": ", ".join(attr) or None,
                          "known hashes": str(known_hashes) if known_hashes else None, "known hamming": known_hamming,
                          "metadata stripped to": str(strip_to) if strip_to else None, "settings": settings.to_meta(),
                          **gate_meta(evaluated)})
    report.add(qa_section(result, conditions=evaluated))
    buf = io.StringIO()
    result.images.to_csv(buf, index=False)
    extra = {"images.csv": buf.getvalue().encode()}
    if checked is not None:
        for sec in policy_sections(checked):
            report.add(sec)
        extra["policy_checks.csv"] = policy_csv(checked)
    if known_matched is not None:
        report.add(known_content_section(known_matched))
        extra["known_matches.csv"] = known_matched.matches.to_csv(index=False).encode()
    paths = report.write(output, extra_files=extra)
    q = result.quantities()
    across = f" ({int(q['n_cross_split_duplicates'])} across splits)" if split_col is not None else ""
    done(paths, f"{int(q['n_images'])} images: {int(q['n_unreadable'])} unreadable, {int(q['n_low_resolution'])} "
                f"below {min_side} px, {int(q['n_near_duplicate_pairs'])} near-duplicate pairs{across}, "
                f"{int(q['n_with_gps'])} with GPS")
    if checked is not None:
        typer.echo(checked.summary_line())
        if checked.coverage is not None:
            typer.echo(checked.coverage.summary_line())
    if known_matched is not None:
        kq = known_matched.quantities()
        typer.echo(f"known content: {int(kq['n_known_matches'])} of {known_matched.n_hashed} hashed images match one "
                   f"of {known_matched.n_known} known hashes (within {known_hamming} bits)")
    bad = result.images.loc[~result.images["readable"]]
    for path, error in list(zip(bad["image_path"], bad["error"]))[:20]:
        typer.echo(f"  unreadable: {path}: {error}")
    if len(bad) > 20:
        typer.echo(f"  ... and {len(bad) - 20} more unreadable files (images.csv)")
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("qa")(curate_qa_cmd)

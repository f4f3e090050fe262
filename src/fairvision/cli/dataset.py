"""``fairvision audit dataset``: who is in an image dataset.

The audit, report and pandas imports stay inside the functions: they add
about a second to ``fairvision --help`` (measured: 0.35 s without, 1.3-3.8 s
with them).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.cli.common import (
    ADDRESS_OPTION, ENGINE_OPTION, NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, results_store,
    status,
)
from fairvision.errors import FairvisionError
from fairvision.stats.constants import DEFAULT_CORRECTION, METHODS


def audit_dataset_cmd(
    table: Path = typer.Argument(..., help="Sample table: CSV, TSV, Parquet, JSON/JSONL or a FairFace-style ground_truth.json. One row per image."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat for several: -a gender -a age)."),
    output: Path = typer.Option(Path("fairvision-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Label column whose association with each attribute (stereotypes: NPMI, NMI) is reported."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present). CIs resample people, not images."),
    max_k: int = typer.Option(2, "--max-k", min=1, max=6, help="Largest intersection size (2 = all pairs of attributes)."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins, multi-valued attributes, hierarchies."),
    min_subjects: int = typer.Option(10, "--min-subjects", min=1, help="Groups with fewer subjects are flagged too small to judge (FHIBE: 10)."),
    n_boot: int = typer.Option(1000, "--n-boot", min=0, help="Bootstrap resamples for confidence intervals (0 = none)."),
    seed: int = typer.Option(0, "--seed", help="Random seed for the bootstrap."),
    correction: str = typer.Option(DEFAULT_CORRECTION, "--correction", help=f"Multiple-comparison correction of the association and coverage tests: {', '.join(METHODS)} (default {DEFAULT_CORRECTION}; FHIBE used bonferroni)."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave out), 'keep' (group '(missing)')."),
    multi: List[str] = typer.Option([], "--multi", help="Attribute whose cells hold several values separated by '|' (a subject counts in each)."),
    check_images: bool = typer.Option(True, "--check-images/--no-check-images", help="Check that every image_path exists."),
    measure_skin: bool = typer.Option(False, "--measure-skin", help="Measure apparent skin colour (L*, h*, ITA) from the images and cross it with the attributes."),
    skin_method: str = typer.Option("thong", "--skin-method", help="Skin colour estimator for --measure-skin: thong, mean, median_ita, gray_mean."),
    workers: int = typer.Option(2, "--workers", "-j", min=1, help="Worker processes (Ray actors with --engine ray) for --measure-skin."),
    engine: str = ENGINE_OPTION,
    address: Optional[str] = ADDRESS_OPTION,
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    skin_faces: str = typer.Option("largest", "--skin-faces", help="Faces measured per image with --measure-skin: 'largest' (the annotated person of a one-person-per-row table; default) or 'all'."),
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", help="Image embeddings (.npy with ids file, .npz, or a table with sample ids) for the Vendi diversity score per group."),
    show_images: bool = typer.Option(False, "--show-images", help="Embed small example thumbnails per group in the report (off by default: reports carry no face images)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'nsd>0.3', 'n_empty_groups>0', 'imbalance_ratio.gender>2' (repeat for several)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
):
    """Audit who is in a dataset: group and intersection counts, representation (NSD, evenness,
    effective number of groups) with subject-level bootstrap CIs, FHIBE Table 1 summary, and
    associations between attributes (NMI, chi-square with Cramér's V, NPMI heatmaps)."""
    from fairvision.engine import check_engine  # lazy: see the module docstring

    check_outdir(output)
    check_engine(engine, address)
    results = results_store(store, no_store) if measure_skin else None
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    if correction not in METHODS:
        raise FairvisionError(f"--correction must be one of {', '.join(METHODS)}, not {correction!r}")
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    with status("auditing dataset") as say:
        paths, audit = run_dataset_audit(
            table, attr, output, target=target, subject_col=subject_col, max_k=max_k, schema_file=schema_file,
            min_subjects=min_subjects, n_boot=n_boot, seed=seed, correction=correction, missing=missing, multi=multi,
            check_images=check_images, measure_skin=measure_skin, skin_method=skin_method, workers=workers,
            engine=engine, address=address, store=results, skin_faces=skin_faces, embeddings=embeddings, show_images=show_images, title=title, progress=say,
            conditions=conditions,
        )
    done(paths, f"{audit.n_samples:,} images, {len(audit.groups)} attribute sets, {len(audit.warnings)} warnings")
    exit_if_gates_failed(audit.gates)


def run_dataset_audit(
    table,
    attributes,
    output,
    *,
    target=None,
    subject_col=None,
    max_k=2,
    schema_file=None,
    schema=None,
    min_subjects=10,
    n_boot=1000,
    seed=0,
    correction=DEFAULT_CORRECTION,
    missing="error",
    multi=(),
    check_images=True,
    measure_skin=False,
    skin_method="thong",
    workers=2,
    engine="local",
    address=None,
    store=None,
    skin_faces="largest",
    embeddings=None,
    show_images=False,
    title=None,
    progress=None,
    report_meta=None,
    conditions=(),
):
    """Read a table (path or DataFrame), audit it and write the report; returns ``(paths, audit)``."""
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.audits.dataset import audit_dataset
    from fairvision.io.tables import IMAGE_PATH, read_table, validate_sample_table
    from fairvision.report import Report
    from fairvision.report.sections.dataset import dataset_section
    from fairvision.schema import Schema

    say = progress or (lambda m: None)
    say("reading table")
    if isinstance(table, pd.DataFrame):
        df = table
        source = df.attrs.get("source", "table")
    else:
        df = read_table(table)
        source = str(table)
    if schema is None:
        schema = Schema.from_file(schema_file) if schema_file else Schema()
    schema.declare(list(attributes) + ([target] if target else []), multi=multi, missing=missing)
    if check_images and IMAGE_PATH in df.columns:
        validate_sample_table(df, source=source, check_images=True)
    sections = []
    if measure_skin:
        df, skin_attrs, skin_sections = _measure_skin(df, source, schema, list(attributes), skin_method, workers, skin_faces,
                                                      say, correction, engine=engine, address=address, store=store,
                                                      subject_col=subject_col)
        attributes = list(attributes) + skin_attrs
        sections += skin_sections
    emb = _aligned_embeddings(embeddings, df, source) if embeddings is not None else None
    audit = audit_dataset(
        df, attributes, schema=schema, target=target, subject_col=subject_col, max_k=max_k,
        min_subjects=min_subjects, n_boot=n_boot, seed=seed, embeddings=emb, correction=correction, progress=say,
    )
    audit.gates = evaluate_conditions(list(conditions), audit.quantities()) if conditions else []
    say("writing report")
    report = Report(
        title=title or f"Dataset audit: {Path(source).name}",
        subtitle="fairvision dataset audit",
        meta={"table": source, "attributes": ", ".join(attributes), "images": audit.n_samples, **(report_meta or {}),
              **(gate_meta(audit.gates) if audit.gates else {})},
    )
    report.add(dataset_section(audit))
    for sec in sections:
        report.add(sec)
    if show_images and IMAGE_PATH in df.columns:
        report.add(_thumbnails_section(df, audit, schema))
    paths = report.write(output)
    return paths, audit


SKIN_ATTRIBUTES = ("skin_tone", "skin_hue")


def _measure_skin(df, source, schema, attributes, method, workers, faces, say, correction=DEFAULT_CORRECTION,
                  engine="local", address=None, store=None, subject_col=None):
    """Measure skin colour per image, join the categories as attributes, and build the skin sections.

    Returns the joined table, the extra attribute names and the report sections
    (skin colour distribution by the first attribute; coverage of the skin
    measurement by group). Measurements are read from and kept in ``store`` (the results store), with each
    image's subject (``subject_col``, default ``subject_id``) so that ``fairvision store forget`` finds them.
    """
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.audits.coverage import coverage_by_group
    from fairvision.audits.skin import audit_skin_distribution
    from fairvision.audits.skin_batch import measure_images
    from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.skin import skin_section
    from fairvision.schema import Attribute

    if IMAGE_PATH not in df.columns:
        raise FairvisionError(f"{source}: --measure-skin needs an image_path column")
    say("measuring skin colour")
    images = df[[SAMPLE_ID, IMAGE_PATH]]
    subject = subject_col or (SUBJECT_ID if SUBJECT_ID in df.columns else None)
    if subject is not None and subject in df.columns:
        images = images.assign(**{SUBJECT_ID: df[subject].to_numpy()})
    measured = measure_images(images, method=method, workers=workers, engine=engine, address=address,
                              faces=faces, progress=True, store=store)
    keep = [c for c in measured.columns if c not in (IMAGE_PATH, SUBJECT_ID) and c not in df.columns or c == SAMPLE_ID]
    joined = df.merge(measured[keep], on=SAMPLE_ID, how="left", validate="one_to_one")
    joined.attrs = dict(df.attrs)
    extra = []
    for col in SKIN_ATTRIBUTES:
        cats = list(joined[col].cat.categories) if isinstance(joined[col].dtype, pd.CategoricalDtype) else None
        schema.add(Attribute(col, categories=cats, ordered=True, missing="keep"))
        extra.append(col)
    dist = audit_skin_distribution(joined, by=attributes[0], name=Path(source).name, subject=None)
    cov = coverage_by_group(joined, joined["ok"].fillna(False).astype(bool).to_numpy(), attributes, schema=schema,
                            step="skin measurement (face found, enough skin pixels)", correction=correction)
    return joined, extra, [skin_section(dist), coverage_section(cov, id="skin-coverage")]


def _aligned_embeddings(path, df, source):
    """Embedding rows in the order of the table's sample_id (every sample must have one)."""
    import numpy as np  # lazy imports: see the module docstring

    from fairvision.io.embeddings import read_embeddings
    from fairvision.io.tables import SAMPLE_ID

    x, ids = read_embeddings(path)
    pos = {i: k for k, i in enumerate(ids)}
    missing = [sid for sid in df[SAMPLE_ID] if sid not in pos]
    if missing:
        raise FairvisionError(f"{path}: no embedding for sample_id {missing[0]!r} of {source} ({len(missing)} missing)")
    return np.asarray(x)[[pos[sid] for sid in df[SAMPLE_ID]]]


def _thumbnails_section(df, audit, schema, per_group: int = 6, size: int = 72):
    """Example thumbnails per group of the first attribute (only with --show-images)."""
    import io

    from PIL import Image  # lazy imports: see the module docstring

    from fairvision.groups import memberships
    from fairvision.report import Section

    sec = Section("examples", "Example images per group", intro="Shown because --show-images was given.")
    m = memberships(df, [audit.attributes[0]], schema)[0]
    paths = df["image_path"].to_numpy()
    for g, cat in enumerate(m.categories):
        rows = m.rows[m.codes == g][:per_group]
        if not len(rows):
            continue
        sheet = Image.new("RGB", (size * len(rows), size), "white")
        for i, r in enumerate(rows):
            with Image.open(paths[r]) as im:
                sheet.paste(im.convert("RGB").resize((size, size)), (i * size, 0))
        buf = io.BytesIO()
        sheet.save(buf, "PNG")
        sec.image(f"examples_{cat}", buf.getvalue(), f"{audit.attributes[0]} = {cat}")
    return sec


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("dataset")(audit_dataset_cmd)

"""``fairvision audit dataset``: who is in an image dataset.

The audit, report and pandas imports stay inside the functions: they add
about a second to ``fairvision --help`` (measured: 0.35 s without, 1.3-3.8 s
with them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, progress_bar,
                                   results_store, status)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, ParameterError


#: the settings of :func:`run_dataset_audit` when given none (two workers measure skin colour, as on the command line)
DEFAULTS = AuditSettings(workers=2)


@dataclass(frozen=True)
class SkinOptions:
    """Measure apparent skin colour from the images and cross it with the attributes (``--measure-skin``).

    ``params``: how every image is measured (:class:`fairvision.skin.batch.MeasureParams`); ``store``: the
    results store the measurements are read from and kept in (None: neither read nor write one)."""

    params: Any
    store: Any = None


@dataclass(frozen=True)
class ReportOptions:
    """How the dataset report is written: its ``title`` (default from the table's name), example thumbnails per
    group (``show_images``), extra ``meta`` entries and the ``--fail-if`` ``conditions`` it is gated on."""

    title: str | None = None
    show_images: bool = False
    meta: dict = field(default_factory=dict)
    conditions: tuple = ()


@with_settings("min_subjects", "n_boot", "seed", "correction", "workers", "engine", "address", workers=2)
def audit_dataset_cmd(
    table: List[Path] = typer.Argument(..., help="Sample table: CSV, TSV, Parquet, JSON/JSONL or a FairFace-style ground_truth.json. One row per image. Several tables: their attribute distributions side by side, one dataset per table."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat for several: -a gender -a age)."),
    output: Path = typer.Option(Path("fairvision-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Label column whose association with each attribute (stereotypes: NPMI, NMI) is reported."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present). CIs resample people, not images."),
    max_k: int = typer.Option(2, "--max-k", min=1, max=6, help="Largest intersection size (2 = all pairs of attributes)."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins, multi-valued attributes, hierarchies."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave out), 'keep' (group '(missing)')."),
    multi: List[str] = typer.Option([], "--multi", help="Attribute whose cells hold several values separated by '|' (a subject counts in each)."),
    check_images: bool = typer.Option(True, "--check-images/--no-check-images", help="Check that every image_path exists."),
    measure_skin: bool = typer.Option(False, "--measure-skin", help="Measure apparent skin colour (L*, h*, ITA) from the images and cross it with the attributes."),
    skin_method: str = typer.Option("thong", "--skin-method", help="Skin colour estimator for --measure-skin: thong, mean, median_ita, gray_mean."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    skin_faces: str = typer.Option("largest", "--skin-faces", help="Faces measured per image with --measure-skin: 'largest' (default: a row is one annotated subject, and uniting every face would pool a bystander's skin into theirs) or 'all'. The same default as 'skin measure --faces', so the two share their results in the store."),
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", help="Image embeddings (.npy with ids file, .npz, or a table with sample ids) for the Vendi diversity score per group."),
    show_images: bool = typer.Option(False, "--show-images", help="Embed small example thumbnails per group in the report (off by default: reports carry no face images)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'nsd>0.3', 'n_empty_groups>0', 'imbalance_ratio.gender>2' (repeat for several)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    dataset_name: List[str] = typer.Option([], "--dataset-name", help="Name of each table's dataset when several tables are given, in their order (default: the file names without extension)."),
    dataset_col: Optional[str] = typer.Option(None, "--dataset-col", help="Column naming each row's dataset in one table: its datasets are compared side by side."),
    settings: AuditSettings = None,
):
    """Audit who is in a dataset: group and intersection counts, representation (NSD, evenness,
    effective number of groups) with subject-level bootstrap CIs, FHIBE Table 1 summary, and
    associations between attributes (NMI, chi-square with Cramér's V, NPMI heatmaps).

    With several tables (or --dataset-col), compare the datasets side by side instead: shares per dataset with
    Wilson intervals, a chi-square test of homogeneity per attribute, pairwise comparisons, NSD per dataset and
    grouped bar plots (docs/METHODS.md §5.4).

    Example:

        fairvision audit dataset fhibe.csv fairface.csv -a gender -a age -o compare/
    """
    from fairvision.engine import check_engine  # lazy: see the module docstring
    from fairvision.io.validate import check_missing_rule
    from fairvision.schema import Schema

    check_outdir(output)
    if len(table) > 1 or dataset_col is not None or dataset_name:
        check_missing_rule(missing)
        names = _dataset_names(table, dataset_name, dataset_col,
                               {"--target": target, "--measure-skin": measure_skin, "--embeddings": embeddings,
                                "--show-images": show_images})
        conditions = [parse_condition(c) for c in fail_if]
        schema = (Schema.from_file(schema_file) if schema_file else Schema()).declare(list(attr), multi=multi,
                                                                                       missing=missing)
        with status("comparing datasets") as say:
            paths, audit = run_dataset_compare(
                table, names, attr, output, dataset_col=dataset_col, subject_col=subject_col, schema=schema,
                settings=settings, check_images=check_images, progress=say,
                report=ReportOptions(title=title, conditions=tuple(conditions)))
        done(paths, f"{len(audit.datasets)} datasets, {len(audit.attributes)} attributes, "
                    f"{int(audit.tests['differs'].sum())} differing significantly")
        exit_if_gates_failed(audit.gates)
        return
    table = table[0]
    check_engine(settings.engine, settings.address)
    skin = _skin_options(skin_method, skin_faces, results_store(store, no_store)) if measure_skin else None
    check_missing_rule(missing)
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    schema = (Schema.from_file(schema_file) if schema_file else Schema()).declare(
        list(attr) + ([target] if target else []), multi=multi, missing=missing)
    with status("auditing dataset") as say:
        paths, audit = run_dataset_audit(
            table, attr, output, target=target, subject_col=subject_col, max_k=max_k, schema=schema, settings=settings,
            check_images=check_images, skin=skin, embeddings=embeddings, progress=say,
            report=ReportOptions(title=title, show_images=show_images, conditions=tuple(conditions)),
            echo=lambda line: typer.echo(line, err=True),
        )
    done(paths, f"{audit.n_samples:,} images, {len(audit.groups)} attribute sets, {len(audit.warnings)} warnings")
    exit_if_gates_failed(audit.gates)


def _dataset_names(tables, given, dataset_col, single_only) -> list[str] | None:
    """The dataset name of each table (``--dataset-name`` or the file stem), checked before the work; None with
    ``--dataset-col`` (the names are the column's values). Options of the single-table audit are refused."""
    used = [flag for flag, v in single_only.items() if v]
    if used:
        raise FairvisionError(f"{used[0]} audits one dataset; it cannot be used when comparing several")
    if dataset_col is not None:
        if len(tables) > 1:
            raise FairvisionError("--dataset-col takes one table whose column names the datasets; give one table")
        if given:
            raise FairvisionError("--dataset-name names several tables; with --dataset-col the column names them")
        return None
    if len(tables) < 2:
        raise FairvisionError("--dataset-name is for several tables; give two or more tables to compare")
    if given and len(given) != len(tables):
        raise FairvisionError(f"--dataset-name given {len(given)} times for {len(tables)} tables; give one per table")
    names = list(given) if given else [Path(t).stem for t in tables]
    twice = [n for n in names if names.count(n) > 1]
    if twice:
        raise FairvisionError(f"two tables are both named {twice[0]!r}; give each a --dataset-name")
    return names


#: the column that names each row's dataset when several tables are read into one
DATASET_COLUMN = "dataset"


def run_dataset_compare(tables, names, attributes, output, *, dataset_col=None, subject_col=None, schema=None,
                        settings: AuditSettings | None = None, check_images=True, report: ReportOptions | None = None,
                        progress=None):
    """Read several tables (or one with ``dataset_col``), compare their datasets and write the report; returns
    ``(paths, audit)`` (docs/METHODS.md §5.4). Every table must have every attribute (and ``subject_col`` when
    given): an error names the table that lacks one."""
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.audits.dataset_compare import audit_dataset_compare
    from fairvision.groups import subject_codes
    from fairvision.io.tables import IMAGE_PATH, SUBJECT_ID, read_table, validate_sample_table
    from fairvision.io.validate import require_columns
    from fairvision.report import Report
    from fairvision.report.sections.dataset_compare import dataset_compare_section

    settings = settings or DEFAULTS
    report = report or ReportOptions()
    say = progress or (lambda m: None)
    say("reading tables")
    parts = []
    for i, path in enumerate(tables):
        df = read_table(path)
        require_columns(df, [schema.get(a).source if schema is not None else a for a in attributes],
                        source=str(path), what="attribute column")
        subject = subject_col or (SUBJECT_ID if SUBJECT_ID in df.columns else None)
        subject_codes(df, subject, source=str(path))  # a missing column or an empty cell names this table's row
        if check_images and IMAGE_PATH in df.columns:
            validate_sample_table(df, source=str(path), check_images=True)
        if names is not None:
            if DATASET_COLUMN in df.columns:
                raise FairvisionError(f"{path}: has a column {DATASET_COLUMN!r}; the comparison names each table's "
                                      "rows by it: rename the column or use --dataset-col")
            df = df.assign(**{DATASET_COLUMN: names[i]})
        parts.append(df)
    with_subject = [SUBJECT_ID in df.columns for df in parts]
    if subject_col is None and any(with_subject) and not all(with_subject):
        raise FairvisionError(f"{tables[with_subject.index(False)]}: no {SUBJECT_ID} column, but "
                              f"{tables[with_subject.index(True)]} has one: give every table one so that subjects "
                              "are counted in every dataset")
    data = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    data.attrs["source"] = ", ".join(str(t) for t in tables)
    col = dataset_col or DATASET_COLUMN
    audit = audit_dataset_compare(data, col, attributes, schema=schema, subject_col=subject_col, datasets=names,
                                  settings=settings, progress=say)
    audit.gates = evaluate_conditions(list(report.conditions), audit.quantities()) if report.conditions else []
    say("writing report")
    doc = Report(
        title=report.title or f"Datasets side by side: {', '.join(audit.datasets)}",
        subtitle="fairvision dataset audit",
        meta={"tables": data.attrs["source"], "datasets": ", ".join(audit.datasets), "attributes": ", ".join(attributes),
              **report.meta, "settings": settings.to_meta(), **(gate_meta(audit.gates) if audit.gates else {})},
    )
    doc.add(dataset_compare_section(audit))
    return doc.write(output), audit


def _skin_options(method: str, faces: str, store) -> SkinOptions:
    """The ``--measure-skin`` options, checked before the work (an error names ``--skin-method`` / ``--skin-faces``)."""
    from fairvision.skin.batch import MeasureParams  # lazy: see the module docstring

    try:
        return SkinOptions(MeasureParams(method=method, faces=faces), store)
    except ParameterError as exc:
        raise ParameterError(f"skin_{exc.parameter}", str(exc)[len(exc.parameter) + 1:]) from None


def run_dataset_audit(
    table,
    attributes,
    output,
    *,
    target=None,
    subject_col=None,
    max_k=2,
    schema=None,
    settings: AuditSettings | None = None,
    check_images=True,
    skin: SkinOptions | None = None,
    embeddings=None,
    report: ReportOptions | None = None,
    progress=None,
    echo=None,
):
    """Read a table (path or DataFrame), audit it and write the report; returns ``(paths, audit)``.

    ``schema`` (default: an empty one) gets every attribute and the target declared; ``settings`` (default
    :data:`DEFAULTS`) are the audit's (:func:`fairvision.audits.dataset.audit_dataset`) and, with ``skin``, the
    skin measurement's (``workers``, ``engine``, ``address``) and its coverage tests'. ``skin``: measure
    apparent skin colour and add it as attributes (None: no measurement). ``progress``: called with each step's
    name as it starts (a terminal's status line); ``echo``: called with each step's one-line summary, on a terminal
    or not (the skin measurement: measured, from the store, failed; and, when images are left out, why and
    whether the share left out differs by group). None: no lines.
    """
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.audits.dataset import audit_dataset
    from fairvision.io.tables import IMAGE_PATH, read_table, validate_sample_table
    from fairvision.report import Report
    from fairvision.report.sections.dataset import dataset_section
    from fairvision.schema import Schema

    settings = settings or DEFAULTS
    report = report or ReportOptions()
    say = progress or (lambda m: None)
    say("reading table")
    if isinstance(table, pd.DataFrame):
        df = table
        source = df.attrs.get("source", "table")
    else:
        df = read_table(table)
        source = str(table)
    schema = (schema if schema is not None else Schema()).declare(list(attributes) + ([target] if target else []))
    if check_images and IMAGE_PATH in df.columns:
        validate_sample_table(df, source=source, check_images=True)
    sections = []
    if skin is not None:
        df, skin_attrs, skin_sections = _measure_skin(df, source, schema, list(attributes), skin, settings, say,
                                                      subject_col=subject_col, echo=echo)
        attributes = list(attributes) + skin_attrs
        sections += skin_sections
    emb = _aligned_embeddings(embeddings, df, source) if embeddings is not None else None
    audit = audit_dataset(df, attributes, schema=schema, target=target, subject_col=subject_col, max_k=max_k,
                          embeddings=emb, settings=settings, progress=say)
    audit.gates = evaluate_conditions(list(report.conditions), audit.quantities()) if report.conditions else []
    say("writing report")
    doc = Report(
        title=report.title or f"Dataset audit: {Path(source).name}",
        subtitle="fairvision dataset audit",
        meta={"table": source, "attributes": ", ".join(attributes), "images": audit.n_samples, **report.meta,
              "settings": settings.to_meta(), **(gate_meta(audit.gates) if audit.gates else {})},
    )
    doc.add(dataset_section(audit))
    for sec in sections:
        doc.add(sec)
    if report.show_images and IMAGE_PATH in df.columns:
        doc.add(_thumbnails_section(df, audit, schema))
    paths = doc.write(output)
    return paths, audit


SKIN_ATTRIBUTES = ("skin_tone", "skin_hue")


def _measure_skin(df, source, schema, attributes, skin: SkinOptions, settings: AuditSettings, say, subject_col=None,
                  echo=None):
    """Measure skin colour per image, join the categories as attributes, and build the skin sections.

    Returns the joined table, the extra attribute names and the report sections
    (skin colour distribution by the first attribute; coverage of the skin
    measurement by group, with why images were left out). Measurements are read from and kept in ``skin.store``
    (the results store), with each image's subject (``subject_col``, default ``subject_id``) so that
    ``fairvision store forget`` finds them. ``settings``: where the measurement runs (``workers``, ``engine``,
    ``address``) and the coverage tests' ``correction``, ``alpha`` and ``level``. ``echo`` gets the measurement's
    summary line and, when images are left out, the coverage's (:meth:`Coverage.summary_line`).
    """
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.audits.coverage import audit_coverage
    from fairvision.audits.skin import audit_skin_distribution
    from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, SUBJECT_ID
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.skin import skin_section
    from fairvision.schema import Attribute
    from fairvision.skin.batch import measure_images
    from fairvision.skin.batch_tables import failure_reasons, summary_line

    if IMAGE_PATH not in df.columns:
        raise FairvisionError(f"{source}: --measure-skin needs an image_path column")
    say("measuring skin colour")
    images = df[[SAMPLE_ID, IMAGE_PATH]]
    subject = subject_col or (SUBJECT_ID if SUBJECT_ID in df.columns else None)
    if subject is not None and subject in df.columns:
        images = images.assign(**{SUBJECT_ID: df[subject].to_numpy()})
    with progress_bar("measuring skin colour") as advance:  # a bar on a terminal, a stage line in a log
        measured = measure_images(images, params=skin.params, settings=settings, progress=advance, store=skin.store)
    echo = echo or (lambda line: None)
    echo(f"skin colour: {summary_line(measured.attrs['summary'])}")
    keep = [c for c in measured.columns if c not in (IMAGE_PATH, SUBJECT_ID) and c not in df.columns or c == SAMPLE_ID]
    joined = df.merge(measured[keep], on=SAMPLE_ID, how="left", validate="one_to_one")
    joined.attrs = dict(df.attrs)
    extra = []
    for col in SKIN_ATTRIBUTES:
        cats = list(joined[col].cat.categories) if isinstance(joined[col].dtype, pd.CategoricalDtype) else None
        schema.add(Attribute(col, categories=cats, ordered=True, missing="keep"))
        extra.append(col)
    dist = audit_skin_distribution(joined, by=attributes[0], name=Path(source).name, subject=None)
    ok = joined["ok"].fillna(False).astype(bool).to_numpy()
    cov = audit_coverage(joined, ok, attributes, schema=schema, step="skin measurement", settings=settings,
                         reasons=failure_reasons(joined.assign(ok=ok)), unit="images")
    if cov.n_left_out:
        echo(cov.summary_line())
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
    from fairvision.io.images import read_image
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
            sheet.paste(Image.fromarray(read_image(paths[r])).resize((size, size)), (i * size, 0))
        buf = io.BytesIO()
        sheet.save(buf, "PNG")
        sec.image(f"examples_{cat}", buf.getvalue(), f"{audit.attributes[0]} = {cat}")
    return sec


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("dataset")(audit_dataset_cmd)

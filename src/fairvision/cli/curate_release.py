"""``fairvision curate release``: a privacy-checked release of a dataset (docs/METHODS.md §13.10)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, check_output_file, exit_if_gates_failed, image_table, progress_bar
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

PRECISIONS = ("day", "month", "year")


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (symbolic links resolved)."""
    p, f = Path(path).expanduser().resolve(), Path(folder).expanduser().resolve()
    return p == f or f in p.parents


def _check_sides(output: Path, key_file: Path, mapping_out: Path, report_dir: Path) -> None:
    """The key, the mapping and the report stay on the curator's side: never inside the release folder."""
    for what, flag, path in (("the id mapping", "--mapping-out", mapping_out), ("the key", "--key-file", key_file),
                             ("the report", "--report-dir", report_dir)):
        if _inside(path, output):
            raise FairvisionError(f"{path}: {flag}: {what} must be outside the release folder {output} (it would "
                                  "ship with the release)")
        if _inside(output, path):
            raise FairvisionError(f"{output}: the release folder must not lie inside {flag} {path}")


def _samples(source: str, sample_col: Optional[str], subject_col: Optional[str]):
    """The samples table: a table file (with the id columns given), a folder of images or a bundled source."""
    if Path(source).is_file():
        from fairvision.io.tables import read_raw_table, read_table  # lazy: pandas

        cols = read_raw_table(source).columns
        return read_table(source, sample_id_col=sample_col,
                          subject_col=subject_col if subject_col is not None or "subject_id" not in cols else None)
    return image_table(source, recursive=True)


@with_settings("workers", "engine", "address")
def curate_release_cmd(
    source: str = typer.Argument(..., metavar="SAMPLES", help="Sample table (with image paths), a folder of images, or 'portraits' / 'demo'."),
    table: List[Path] = typer.Option([], "--table", "-t", help="A further metadata table to release (repeatable); its id columns get the same pseudonyms."),
    output: Path = typer.Option(..., "--output", "-o", help="The release folder: samples.csv, the other tables, images/, manifest.csv, changes.csv."),
    key_file: Path = typer.Option(..., "--key-file", help="The curator's secret key of the keyed pseudonyms (kept outside the release; created if needed with --new-key)."),
    new_key: bool = typer.Option(False, "--new-key", help="Create the key file (a random 256-bit key, readable by its owner only); refused if it exists."),
    mapping_out: Path = typer.Option(..., "--mapping-out", help="CSV of original id -> pseudonym, for the curator only; must be outside the release (created if needed). The images left out, with their paths, go beside it."),
    report_dir: Optional[Path] = typer.Option(None, "--report-dir", help="Report folder, outside the release (created if needed); default: the release folder's name + '-report'."),
    sample_col: Optional[str] = typer.Option(None, "--sample-col", help="Sample id column (default: sample_id, id or image_id; a folder: file names)."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Subject id column (default: subject_id when there is one); k-anonymity counts subjects."),
    id_col: List[str] = typer.Option([], "--id-col", help="A further id column to pseudonymise in every table (repeatable), e.g. annotator_id."),
    date_col: List[str] = typer.Option([], "--date-col", help="A date or time column to coarsen (repeatable); others are detected by name and values."),
    date_precision: str = typer.Option("month", "--date-precision", help="Precision of released dates: day, month (FHIBE) or year."),
    time_bands: bool = typer.Option(True, "--time-bands/--no-time-bands", help="Release the time of a capture as a 6-hour band (FHIBE), in <column>_hour."),
    drop_col: List[str] = typer.Option([], "--drop-col", help="A column to leave out of every table (repeatable)."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Released attribute checked for k-anonymity (repeatable; default: every column of the samples table but ids, dates and paths)."),
    k: int = typer.Option(5, "--k", help="Smallest acceptable group: combinations of attribute values held by fewer subjects are listed."),
    max_combo: Optional[int] = typer.Option(None, "--max-combo", help="Largest set of attributes combined (default: all)."),
    suppress: bool = typer.Option(False, "--suppress", help="Blank the attribute values of groups below --k (listed in changes.csv) until none is left."),
    max_side: int = typer.Option(2048, "--max-side", help="Longest side of the released PNGs in pixels; smaller images keep their size."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing when a condition holds, e.g. 'min_group_size<5', 'n_cells_below_k>0'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Prepare a dataset for release: dates coarsened, location columns dropped, ids replaced by keyed
    pseudonyms, images as metadata-free PNGs named by pseudonym, k-anonymity of the released attributes; then
    the release folder is read back and checked (docs/METHODS.md §13.10). Exit status 1 when the check fails.

    Example:
      fairvision curate release samples.csv -t annotations.csv -o release/ \\
          --key-file ~/keys/release.key --new-key --mapping-out ~/private/mapping.csv
    """
    if date_precision not in PRECISIONS:
        raise FairvisionError(f"--date-precision {date_precision!r}: use one of {', '.join(PRECISIONS)}")
    if k < 2:
        raise FairvisionError(f"--k must be at least 2, got {k}")
    if max_combo is not None and max_combo < 1:
        raise FairvisionError(f"--max-combo must be at least 1, got {max_combo}")
    if max_side < 16:
        raise FairvisionError(f"--max-side must be at least 16 pixels, got {max_side}")
    report_dir = report_dir or output.with_name(output.name + "-report")
    _check_sides(output, key_file, mapping_out, report_dir)
    if not new_key and not key_file.exists():
        raise FairvisionError(f"{key_file}: no such key file (give --new-key to create one)")
    if new_key and key_file.exists():
        raise FairvisionError(f"{key_file}: key file exists already; leave out --new-key to use it")
    for path in table:
        if not path.is_file():
            raise FairvisionError(f"{path}: no such table file (--table)")
    check_outdir(output)
    if output.is_dir() and any(output.iterdir()):
        raise FairvisionError(f"{output}: the release folder is not empty; give a new folder (files already there "
                              "would stay in the release)")
    check_outdir(report_dir)
    check_output_file(mapping_out, (".csv",))
    conditions = [parse_condition(c) for c in fail_if]
    if not Path(source).exists() and source not in ("portraits", "demo"):
        raise FairvisionError(f"{source}: no such file or folder")

    # lazy: numpy, pandas, OpenCV and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.release import ReleaseOptions, audit_release
    from fairvision.audits.curation.release_images import check_release
    from fairvision.io.atomic import atomic_output_dir, atomic_write_text
    from fairvision.io.pseudonyms import create_key, key_is_private, read_key
    from fairvision.io.tables import read_raw_table
    from fairvision.report import Report
    from fairvision.report.sections.curation_release import release_section

    options = ReleaseOptions(sample_col=sample_col or "sample_id", subject_col=subject_col or "subject_id",
                             id_cols=tuple(id_col), date_cols=tuple(date_col), date_precision=date_precision,
                             time_bands=time_bands, drop_cols=tuple(drop_col), attrs=tuple(attr), k=k,
                             max_combo=max_combo, suppress=suppress, max_side=max_side)
    data = _samples(source, sample_col, subject_col)
    extras = {}
    for path in table:
        name, n = path.stem, 2
        while name in extras or name == "samples":
            name, n = f"{path.stem}-{n}", n + 1
        extras[name] = read_raw_table(path)
    key = create_key(key_file) if new_key else read_key(key_file)
    if not key_is_private(key_file):
        typer.echo(f"warning: {key_file} is readable by others (chmod 600 it)", err=True)
    with atomic_output_dir(output) as stage:
        with progress_bar("writing images") as progress:
            result = audit_release(data, extras, stage=stage, key=key, options=options, settings=settings,
                                   progress=progress)
    originals = set(result.mapping["original"].astype(str))
    if "image_path" in data:
        names = [os.path.basename(str(p)) for p in data["image_path"].dropna()]
        originals |= set(names) | {os.path.splitext(n)[0] for n in names}
    result.readback = check_release(output, originals, max_side=max_side)
    atomic_write_text(mapping_out, result.mapping.to_csv(index=False))
    os.chmod(mapping_out, 0o600)
    left_path = mapping_out.with_name(mapping_out.stem + "-left-out.csv")
    if len(result.left_out):
        atomic_write_text(left_path, result.left_out.to_csv(index=False))
        os.chmod(left_path, 0o600)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or "Privacy before release", subtitle="fairvision curate release",
                    meta={"samples": source, "tables": [str(t) for t in table], "release": str(output),
                          **result.params, "settings": settings.to_meta(), **gate_meta(evaluated)})
    for section in release_section(result, conditions=evaluated):
        report.add(section)
    paths = report.write(report_dir)
    q = result.quantities()
    typer.echo(f"release: {Path(output).resolve()}")
    typer.echo(f"mapping: {Path(mapping_out).resolve()} (curator only)")
    if len(result.left_out):
        typer.echo(f"left out: {left_path.resolve()} (curator only)")
    typer.echo(f"report: {Path(paths['html']).resolve()} (curator only)")
    attrs = result.params["attributes"]
    typer.echo(f"{int(q['n_images'])} images released; " + (
        f"k-anonymity of {len(attrs)} attributes (k = {k}, {result.anonymity.unit}): smallest group "
        f"{q['min_group_size']:.0f}, {int(q['n_cells_below_k'])} groups below k" if attrs else
        "no attributes released (k-anonymity not checked)"))
    if result.coverage is not None:
        typer.echo(result.coverage.summary_line())
    rb = result.readback
    typer.echo("read-back check: " + ("passed" if rb.passed else "FAILED: " + "; ".join(
        f"{r.check}: {r.where}: {r.detail}" for r in rb.problems.head(5).itertuples())))
    exit_if_gates_failed(evaluated)
    if not rb.passed:
        raise typer.Exit(1)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("release")(curate_release_cmd)

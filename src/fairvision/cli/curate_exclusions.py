"""``fairvision curate exclusions``: what removing samples (QA failures, consent withdrawals, suspected fraud) does to
who is in a dataset (docs/METHODS.md §13.12)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed, status
from fairvision.cli.options import with_settings
from fairvision.errors import ColumnError, FairvisionError

#: the reason column used when --reason-col is not given and a table has one
DEFAULT_REASON_COL = "reason"
#: cells of a review column read as suspicious / fine
TRUE_VALUES = frozenset({"1", "1.0", "true", "yes", "y", "t"})
FALSE_VALUES = frozenset({"0", "0.0", "false", "no", "n", "f"})


@with_settings("correction", "alpha", "n_boot", "level", "seed", "min_subjects")
def curate_exclusions_cmd(
    samples: Path = typer.Argument(..., help="Sample table of every image before the exclusions (CSV, TSV, Parquet, JSON/JSONL), one row per image, with the attribute columns."),
    removed: Optional[Path] = typer.Option(None, "--removed", help="Table of the removed samples (a sample_id column, optionally a reason column). Give this or --kept."),
    kept: Optional[Path] = typer.Option(None, "--kept", help="Table of the kept samples (a sample_id column); every other sample counts as removed. Give this or --removed."),
    reason_col: Optional[str] = typer.Option(None, "--reason-col", help="Column saying why a sample was removed, in the --removed table or the sample table (default: 'reason' when a table has one). Adds the tests by reason."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Attribute column that defines groups (repeat for several: -a gender -a age)."),
    output: Path = typer.Option(Path("fairvision-exclusions-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present): subjects are counted too and intervals resample them."),
    max_k: int = typer.Option(2, "--max-k", min=1, max=6, help="Largest intersection size (2 = all pairs of attributes)."),
    schema_file: Optional[Path] = typer.Option(None, "--schema", help="JSON schema: declared categories, order, bins, multi-valued attributes, hierarchies."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave out), 'keep' (group '(missing)')."),
    multi: List[str] = typer.Option([], "--multi", help="Attribute whose cells hold several values separated by '|' (a subject counts in each)."),
    review: Optional[Path] = typer.Option(None, "--review", help="Table of a sampled manual review: sample_id and a 0/1 (or true/false) column saying whether the image looked suspicious."),
    review_col: str = typer.Option("suspicious", "--review-col", help="Column of the --review table: 1 or true for a suspicious image, 0 or false for a fine one."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'max_share_shift_pp>5', 'min_pvalue<0.05', 'nsd_change>0.05' (repeat for several)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Compare a dataset before and after exclusions: counts and shares of every group and intersection before
    and after, the change in share (percentage points) with bootstrap intervals, NSD before and after, a test of
    kept vs removed by group per attribute, tests by reason, subjects who leave, and the suspicious rate of a
    sampled manual review (docs/METHODS.md §13.12).

    Example:

        fairvision curate exclusions samples.csv --removed removed.csv -a gender -a age -o excl/ \\
            --review review.csv --fail-if 'max_share_shift_pp>5'
    """
    if (removed is None) == (kept is None):
        raise FairvisionError("give either --removed TABLE or --kept TABLE (one of them)")
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    # lazy: pandas, numpy and the report stack cost about a second at start-up (cli/dataset.py)
    from fairvision.audits.curation.exclusions import audit_exclusions
    from fairvision.io.tables import read_table
    from fairvision.io.validate import check_missing_rule
    from fairvision.report import Report
    from fairvision.report.sections.curation_exclusions import exclusions_sections
    from fairvision.schema import Schema

    check_missing_rule(missing)
    schema = (Schema.from_file(schema_file) if schema_file else Schema()).declare(list(attr), multi=multi,
                                                                                   missing=missing)
    with status("comparing before and after") as say:
        say("reading tables")
        data = read_table(samples)
        listed = read_table(removed if removed is not None else kept)
        rows = _rows_of(listed, data, removed if removed is not None else kept, samples)
        keep = ~_mask(rows, len(data)) if removed is not None else _mask(rows, len(data))
        reasons = _reasons(reason_col, listed if removed is not None else None, rows, data, removed, samples)
        marks = _review(read_table(review), review, review_col, data, samples) if review is not None else None
        audit = audit_exclusions(data, keep, attr, schema=schema, reasons=reasons, subject_col=subject_col,
                                 max_k=max_k, review=marks, settings=settings, progress=say)
        audit.gates = evaluate_conditions(conditions, audit.quantities()) if conditions else []
        say("writing report")
        doc = Report(title=title or f"What exclusions do: {Path(samples).name}", subtitle="fairvision curate exclusions",
                     meta={"samples": str(samples), "removed": str(removed) if removed else None,
                           "kept": str(kept) if kept else None, "review": str(review) if review else None,
                           "attributes": ", ".join(attr), "settings": settings.to_meta(),
                           **(gate_meta(audit.gates) if audit.gates else {})})
        for sec in exclusions_sections(audit):
            doc.add(sec)
        paths = doc.write(output)
    typer.echo(audit.coverage.summary_line(), err=True)
    big = audit.largest_shift()
    shift = f"; largest shift {big[2]:+.1f} pp ({' × '.join(big[0])} = {big[1]})" if big else ""
    done(paths, f"{audit.n_before:,} images, {audit.n_removed:,} removed{shift}")
    exit_if_gates_failed(audit.gates)


def _rows_of(listed, data, listed_path, samples_path):
    """Row numbers in the sample table of the sample ids a --removed / --kept / --review table lists (an id not in
    the sample table is an error naming its row; read_table refuses an id listed twice)."""
    import numpy as np  # lazy: see the command
    import pandas as pd

    ids = listed["sample_id"].astype(str).to_numpy()
    rows = pd.Index(data["sample_id"].astype(str)).get_indexer(ids)
    unknown = np.flatnonzero(rows < 0)
    if unknown.size:
        raise FairvisionError(f"{listed_path}: row {unknown[0] + 1}: sample_id {ids[unknown[0]]!r} is not in "
                              f"{samples_path} ({unknown.size} unknown)")
    return rows.astype(np.int64)


def _mask(rows, n):
    import numpy as np  # lazy: see the command

    m = np.zeros(n, dtype=bool)
    m[rows] = True
    return m


def _reasons(reason_col, removed_table, rows, data, removed_path, samples_path):
    """The reason of every sample row (None where none is given), from the --removed table or the sample table."""
    import numpy as np  # lazy: see the command

    col = reason_col or DEFAULT_REASON_COL
    if removed_table is not None and col in removed_table.columns:
        out = np.full(len(data), None, dtype=object)
        out[rows] = removed_table[col].to_numpy(dtype=object)
        return out
    if col in data.columns:
        return data[col].to_numpy(dtype=object)
    if reason_col is not None:
        where = f"{removed_path} or {samples_path}" if removed_table is not None else str(samples_path)
        raise ColumnError(f"{where}: no reason column {reason_col!r} (--reason-col)")
    return None


def _review(table, path, col, data, samples_path):
    """The review column as one value per sample row: 1 suspicious, 0 fine, NaN not reviewed."""
    import numpy as np  # lazy: see the command

    from fairvision.io.validate import require_columns

    require_columns(table, [col], source=str(path), what="review column", why=" (--review-col)")
    rows = _rows_of(table, data, path, samples_path)
    vals = table[col]
    text = vals.astype(str).str.strip().str.lower().to_numpy(dtype=object)
    text[vals.isna().to_numpy()] = ""
    sus, fine = np.isin(text, list(TRUE_VALUES)), np.isin(text, list(FALSE_VALUES))
    bad = np.flatnonzero(~(sus | fine))
    if bad.size:
        raise FairvisionError(f"{path}: row {bad[0] + 1}: column {col!r} is {vals.iloc[bad[0]]!r}; expected 1/0 or "
                              "true/false")
    out = np.full(len(data), np.nan)
    out[rows] = sus.astype(float)
    return out


def register(curate_app: typer.Typer) -> None:
    curate_app.command("exclusions")(curate_exclusions_cmd)

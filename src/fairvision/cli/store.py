"""``fairvision store``: look into and maintain the results store (:mod:`fairvision.io.store`).

``info`` (stages, rows, parts, bytes), ``query`` (one read-only DuckDB SELECT over
one view per stage), ``vacuum`` (compact parts, drop superseded duplicates) and
``forget --subject ID`` (consent withdrawal: remove a subject's rows from every
stage). Files in a stage folder that the store did not write are ignored, and
each command names them on stderr (``warning: ...``).

The store (DuckDB, pyarrow) is imported inside the commands: every
``fairvision`` invocation imports this module, and those imports add about
0.25 s to its start (``python -X importtime``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import typer

from fairvision.cli.common import check_output_file
from fairvision.errors import FairvisionError
from fairvision.io.run_memo import memo_usage

_QUERY_SUFFIXES = (".csv", ".parquet", ".tsv", ".json", ".jsonl")

store_app = typer.Typer(
    help="The results store that keeps per-image results across runs: info, query, vacuum, forget --subject.",
    no_args_is_help=True,
)

_STORE = typer.Option(None, "--store", metavar="PATH", help="Results store folder (default: $FAIRVISION_STORE, else ~/.cache/fairvision/store).")


def _open(store: Optional[Path], *, must_exist: bool = True):
    from fairvision.io.store import open_store  # lazy: see the module docstring

    res = open_store(store)
    if must_exist and not res.root.is_dir():
        raise FairvisionError(f"{res.root}: no results store here (nothing has been stored yet)")
    return res


def _warn_foreign(res, foreign) -> None:
    if foreign:
        typer.echo(f"warning: {res.foreign_message(foreign)}", err=True)


def _print_table(df, max_rows: int | None = None) -> None:
    if len(df) == 0:
        typer.echo("(no rows)")
        return
    typer.echo(df.to_string(index=False, max_rows=max_rows, max_colwidth=60))


def info_cmd(store: Optional[Path] = _STORE):
    """Stages in the store, with rows, unique rows, keys, subjects, parameter sets, parts, bytes and dates."""
    res = _open(store, must_exist=False)
    table = res.info()
    typer.echo(f"store: {res.root.resolve()}")
    entries, size = memo_usage(res.root)
    memo = (f"whole-run memo: {entries:,} table{'' if entries == 1 else 's'}, {size:,} bytes (skin measure runs "
            "whose inputs and options are unchanged write these; fairvision store forget clears them)")
    if len(table) == 0:
        typer.echo("(empty)" if not entries else memo)
        return
    foreign = res.foreign_parts()
    _print_table(table if foreign else table.drop(columns="foreign"))
    total = f"{int(table['rows'].sum()):,} rows in {int(table['parts'].sum()):,} parts, {int(table['bytes'].sum()):,} bytes"
    if (table["parts"] > 1).any() or (table["rows"] > table["unique_rows"]).any():
        total += " (fairvision store vacuum compacts them)"
    typer.echo(total)
    if entries or size:
        typer.echo(memo)
    if foreign:
        typer.echo(f"{len(foreign):,} file(s) in stage folders are not the store's own: ignored by every read and "
                   "left alone by vacuum (move them out of the store)")
        for path, why in foreign:
            typer.echo(f"  {path.relative_to(res.root)}: {why}")


def query_cmd(
    sql: str = typer.Argument(..., metavar="SQL", help="One read-only DuckDB SELECT statement; each stage is a view named after it (e.g. skin), with the result's fields as columns."),
    store: Optional[Path] = _STORE,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the result: .csv, .tsv, .parquet, .json or .jsonl (atomically)."),
    max_rows: int = typer.Option(50, "--max-rows", min=1, help="Rows printed (all are written with --output)."),
):
    """Run one SELECT over the stored results, e.g. fairvision store query "SELECT ok, count(*) FROM skin GROUP BY ok".

    Read-only: a second statement, COPY, ATTACH, INSTALL/LOAD, SET, PRAGMA, CREATE and the like are refused, and
    the query can read no file but the store's own parts (use --output to save the result)."""
    from fairvision.io.store import ForeignPartsWarning  # lazy: see the module docstring
    from fairvision.io.tables import write_table  # lazy: see the module docstring

    if output is not None:
        check_output_file(output, _QUERY_SUFFIXES)
    if not sql.strip():
        raise FairvisionError("empty query")
    res = _open(store)
    with warnings.catch_warnings():  # said once, as one line, below
        warnings.simplefilter("ignore", ForeignPartsWarning)
        df = res.query(sql)
    _warn_foreign(res, res.foreign_parts())
    _print_table(df, max_rows)
    if output is not None:
        write_table(df, output)
        typer.echo(f"table: {output.resolve()}")


def vacuum_cmd(store: Optional[Path] = _STORE):
    """Compact each stage's parts into one, keeping the newest row of each result; remove leftovers of killed runs."""
    res = _open(store, must_exist=False)
    s = res.vacuum()
    typer.echo(f"{s['parts_before']:,} parts -> {s['parts_after']:,}; {s['rows_before'] - s['rows_after']:,} "
               f"duplicate rows dropped ({s['stages']} stages compacted)")
    if s["foreign"]:
        typer.echo(f"left as they are, not folded in: {len(s['foreign']):,} file(s) that the store did not write "
                   f"({', '.join(str(p.relative_to(res.root)) for p, _ in s['foreign'][:5])}"
                   f"{', ...' if len(s['foreign']) > 5 else ''}; fairvision store info says why)")


def forget_cmd(
    subject: str = typer.Option(..., "--subject", help="Subject id whose rows go (as recorded from the subject_id / --subject-col column)."),
    store: Optional[Path] = _STORE,
    dry_run: bool = typer.Option(False, "--dry-run", help="Count the rows that would go; change nothing."),
):
    """Consent withdrawal: remove every stored row of a subject from every stage in one step (their
    rows, and any row of the same image bytes stored under another id)."""
    if not subject.strip():
        raise FairvisionError("--subject is empty")
    counts = _open(store, must_exist=False).forget(subject, dry_run=dry_run)
    n = sum(counts.values())
    by_stage = ", ".join(f"{k}: {v:,}" for k, v in sorted(counts.items()))
    verb = "would remove" if dry_run else "removed"
    typer.echo(f"{verb} {n:,} row{'' if n == 1 else 's'} of subject {subject!r}" + (f" ({by_stage})" if by_stage else ""))


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    store_app.command("info")(info_cmd)
    store_app.command("query")(query_cmd)
    store_app.command("vacuum")(vacuum_cmd)
    store_app.command("forget")(forget_cmd)
    app.add_typer(store_app, name="store")

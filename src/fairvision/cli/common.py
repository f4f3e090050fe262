"""Helpers shared by the command modules: reading inputs, progress, printing results."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import typer
from rich.console import Console

from fairvision.audits.gates import failure_message
from fairvision.errors import FairvisionError
from fairvision.io.atomic import check_writable


#: ``--store PATH`` / ``--no-store`` (and the old ``--cache``, hidden): every command that measures images.
STORE_OPTION = typer.Option(
    None, "--store", metavar="PATH",
    help="Results store folder (default: $FAIRVISION_STORE, else ~/.cache/fairvision/store): images already "
         "measured are read from it, new results are kept (so an interrupted run resumes); a changed image, "
         "option or code is recomputed.",
)
NO_STORE_OPTION = typer.Option(False, "--no-store", help="Neither read nor write the results store.")
CACHE_OPTION = typer.Option(None, "--cache", hidden=True, help="Old name of --store (kept for one release).")


def results_store(store: Path | None = None, no_store: bool = False, cache: Path | None = None):
    """The :class:`fairvision.io.store.ResultsStore` a command measures into (None with ``--no-store``)."""
    from fairvision.io.store import open_store  # lazy: DuckDB and pyarrow add about 0.25 s (measured) to every command's start

    if store is not None and cache is not None and Path(store) != Path(cache):
        raise FairvisionError("give --store (or its old name --cache) once")
    if no_store and (store is not None or cache is not None):
        raise FairvisionError("give either --store PATH or --no-store, not both")
    res = open_store(store if store is not None else cache, enabled=not no_store)
    if res is not None:
        check_writable(res.root, kind="results store")  # before any work
    return res


def console():
    """A rich console on stderr."""
    return Console(stderr=True)


@contextlib.contextmanager
def status(message: str) -> Iterator:
    """Step messages on stderr (only on a terminal). Plain lines, not a live
    display, so that progress bars of the steps themselves can show."""
    con = Console(stderr=True)
    if not con.is_terminal:
        yield lambda msg: None
        return
    yield lambda msg: con.print(f"[dim]{message}: {msg}…[/dim]")


@contextlib.contextmanager
def progress_bars(show: bool = True) -> Iterator:
    """``advance(stage, done, total)`` backed by rich progress bars on stderr, one per stage; None when
    ``show`` is false or stderr is not a terminal (so logs and CI stay clean)."""
    con = console()
    if not (show and con.is_terminal):
        yield None
        return
    # lazy: rich.progress adds ~60 ms to every fairvision start-up (measured for cli/retrieval.py)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    tasks: dict = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=con, transient=True) as bar:
        def advance(stage: str, n_done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=n_done, total=total)

        yield advance


@contextlib.contextmanager
def progress_bar(label: str, show: bool = True) -> Iterator:
    """``advance(done, total)`` for one progress bar labelled ``label`` (see :func:`progress_bars`); a no-op
    function when no bar is shown."""
    with progress_bars(show) as advance:
        if advance is None:
            yield lambda n_done, total: None
        else:
            yield lambda n_done, total: advance(label, n_done, total)


def image_table(source: str, *, recursive: bool = False,
                hint: str = "or use 'portraits' or 'demo' for the bundled photos"):
    """The images to work on: a folder of images (searched in subfolders too with ``recursive``), a sample table
    with an image path column, or ``portraits`` / ``demo`` (the bundled CC0 portraits / FairFace sample).
    ``hint`` ends the message for a source that does not exist."""
    # lazy: pandas (about 0.5 s) is only needed once a command runs
    from fairvision.datasets import from_folder, load_demo, load_portraits
    from fairvision.io.tables import read_table

    if source == "portraits":
        return load_portraits()
    if source == "demo":
        return load_demo()
    p = Path(source)
    if p.is_dir():
        return from_folder(p, recursive=recursive)
    if not p.exists():
        raise FairvisionError(f"{p}: no such file or folder ({hint})")
    df = read_table(p)
    if "image_path" not in df.columns:
        raise FairvisionError(f"{p}: no image path column (image_path, filename, file_name, path or file)")
    return df


def check_outdir(outdir: Path) -> Path:
    """Before any work: the output folder is a folder (or can be made) and can be written."""
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise FairvisionError(f"{outdir}: exists and is not a folder")
    return check_writable(outdir, kind="output folder")


def check_output_file(path: Path, suffixes: tuple[str, ...]) -> Path:
    """Before any work: an output table path with a known extension that can be written."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise FairvisionError(f"{path}: is a folder; give an output file such as out{suffixes[0]}")
    if path.suffix.lower() not in suffixes:
        raise FairvisionError(f"{path}: unknown output format {path.suffix!r}; use {', '.join(suffixes)}")
    return check_writable(path, kind="output file")


def exit_if_gates_failed(gates) -> None:
    """After the report is written: one line on stderr and exit status 1 when a --fail-if condition held
    (2 is for user errors)."""
    msg = failure_message(gates)
    if msg:
        typer.echo(msg, err=True)
        raise typer.Exit(1)


def done(paths: dict, extra: str = "") -> None:
    typer.echo(f"report: {Path(paths['html']).resolve()}")
    typer.echo(f"json:   {Path(paths['json']).resolve()}")
    if extra:
        typer.echo(extra)

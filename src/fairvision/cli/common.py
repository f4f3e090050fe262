"""Helpers shared by the command modules: reading inputs, progress, printing results."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import typer
from rich.console import Console

from fairvision.audits.gates import failure_message
from fairvision.errors import FairvisionError
from fairvision.io.validate import check_writable


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

"""Helpers shared by the command modules: reading inputs, progress, printing results."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import typer
from rich.console import Console

from fairvision.audits.gates import failure_message
from fairvision.errors import FairvisionError


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
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise FairvisionError(f"{outdir}: exists and is not a folder")
    return outdir


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

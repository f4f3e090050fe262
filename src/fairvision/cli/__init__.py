"""The ``fairvision`` command line.

Each command group lives in its own module here (``dataset``, ``skin``,
``model``, ``retrieval``, ``diagnose``) and registers itself on the shared
:data:`app` / :data:`audit_app` through a ``register(app, audit_app)``
function, so command modules stay small and import their heavy dependencies
only when a command runs.

User mistakes (:class:`~fairvision.errors.FairvisionError`) are printed as one
line, ``error: ...``, with exit status 2 and no traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from fairvision import __version__
from fairvision.errors import FairvisionError

app = typer.Typer(
    name="fairvision",
    help=(
        "Audit the fairness of human-centric computer vision: who is in a dataset, how a model's "
        "performance differs between groups and their intersections, apparent skin colour, "
        "retrieval parity and more. Every audit writes a self-contained report.html, a report.json "
        "with every number, and Parquet tables."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
audit_app = typer.Typer(
    help="Audit a dataset, a model, or a retrieval system and write a report.",
    no_args_is_help=True,
)
app.add_typer(audit_app, name="audit")

COMMAND_MODULES = ("dataset", "skin", "model", "retrieval", "diagnose", "demo")


def _version_callback(value: bool):
    if value:
        typer.echo(f"fairvision {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
):
    """fairvision command line."""


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"fairvision.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command group not built yet
        if exc.name != f"fairvision.cli.{_name}":
            raise
        continue
    _mod.register(app, audit_app)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print ``error: message`` on one line to stderr and return an Exit to raise."""
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    return typer.Exit(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and return its exit status.

    User errors (:class:`FairvisionError`) become one line on stderr and exit
    status 2; usage errors print click's message and exit 2; a command that
    raises ``typer.Exit(code)`` (e.g. a ``--fail-if`` gate) returns ``code``.
    """
    try:
        rv = app(args=argv, standalone_mode=False)
    except FairvisionError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        return 130
    except KeyboardInterrupt:
        typer.echo("error: interrupted; nothing was overwritten", err=True)
        return 130
    except Exception as exc:
        # click's usage errors (bad option, missing argument): typer vendors click, so match by duck type
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        raise
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``fairvision`` command line.

Each command group lives in its own module here (``dataset``, ``skin``,
``model``, ``retrieval``, ``diagnose``) and registers itself on the shared
:data:`app` / :data:`audit_app` through a ``register(app, audit_app)``
function, so command modules stay small and import their heavy dependencies
only when a command runs. :func:`main` imports and registers only the modules of
the command it runs (:data:`COMMAND_NAMES`; every module for ``audit``, for the
top-level help and for anything else); ``app`` (read as an attribute) is the
whole command line.

Exit statuses (the same for every command): 0 success, 1 a ``--fail-if`` gate
held, 2 bad input or usage (one line, ``error: ...``, no traceback), 130
interrupted.
"""

from __future__ import annotations

import importlib
import inspect
import sys

import typer

from fairvision import __version__
from fairvision.cli.options import flag_message
from fairvision.cli.startup import Group, check_first, fit_help
from fairvision.errors import FairvisionError, ParameterError

_app = typer.Typer(
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
    cls=Group,  # help in click's plain layout below 100 columns, where rich panels would cut words
)
audit_app = typer.Typer(
    help=("Audit a dataset (or several side by side), a model (per-sample scores, a classifier, face verification, "
          "a saliency cropper), a retrieval system or a vision-language model, and write a report."),
    no_args_is_help=True,
)
_app.add_typer(audit_app, name="audit")

COMMAND_MODULES = ("dataset", "skin", "model", "classifier", "retrieval", "diagnose", "demo", "score", "store", "generative",
                   "transfer", "vlm", "curate", "doctor", "power",
                   "benchmark", "audit_cropping", "skin_stability")
#: the command modules that register each of these top-level commands (a test checks it against the whole
#: registration): a run of one imports and registers only them, which takes about 30 ms off its start
#: (``python -X importtime``). Any other first word (``audit``, ``--help``, a typo) registers every module.
COMMAND_NAMES = {"skin": ("skin", "skin_stability"), "store": ("store",), "retrieval": ("retrieval",),
                 "diagnose": ("diagnose",), "score": ("score",), "transfer": ("transfer",), "power": ("power",),
                 "benchmark": ("benchmark",), "demo": ("demo",), "doctor": ("doctor",)}


def _version_callback(value: bool):
    if value:
        typer.echo(f"fairvision {__version__}")
        raise typer.Exit()


@_app.callback()
def _root(
    version: bool = typer.Option(False, "--version", metavar="", callback=_version_callback, is_eager=True, help="Print the version and exit."),
):
    """fairvision command line."""


_registered: set[str] = set()
_ORDER: dict[int, int] = {}  # id of a registered command or group -> the index of the module that registered it


def _typers(typer_app: typer.Typer) -> list[typer.Typer]:
    """``typer_app`` and every command group under it."""
    return [typer_app] + [t for g in typer_app.registered_groups for t in _typers(g.typer_instance)]


def _register(modules=COMMAND_MODULES) -> typer.Typer:
    """Import and register ``modules`` (names of :data:`COMMAND_MODULES`) not yet registered, then give their
    commands the shared layout and start-up checks. Commands and groups stay in :data:`COMMAND_MODULES` order
    however the modules came in, so help lists them as a run that registers every module at once does."""
    todo = [m for m in COMMAND_MODULES if m in modules and m not in _registered]
    for name in todo:
        index = COMMAND_MODULES.index(name)
        importlib.import_module(f"fairvision.cli.{name}").register(_app, audit_app)
        _registered.add(name)
        for t in _typers(_app):
            for entry in (*t.registered_commands, *t.registered_groups):
                _ORDER.setdefault(id(entry), index)
    if todo:
        for t in _typers(_app):  # stable: the order of registration within a module is kept
            t.registered_commands.sort(key=lambda e: _ORDER.get(id(e), -1))
            t.registered_groups.sort(key=lambda e: _ORDER.get(id(e), -1))
        _plain_metavars(_app)
        check_first(_app)  # input paths and $FAIRVISION_MAX_PIXELS checked before a command's heavy imports
        fit_help(_app)
    return _app


def _modules_for(argv: list[str]) -> tuple[str, ...]:
    """The command modules a run with these arguments needs: those of its first word (:data:`COMMAND_NAMES`),
    none for ``--version`` alone, else all."""
    if list(argv) == ["--version"]:
        return ()
    first = next((a for a in argv if not a.startswith("-")), None)
    return COMMAND_NAMES.get(first, COMMAND_MODULES)


def __getattr__(name: str):
    if name == "app":  # the whole command line, every command registered
        return _register()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plain_metavars(typer_app: typer.Typer) -> None:
    """Help shows ``PATH``, ``TEXT``, ``NUM`` or nothing (a flag) instead of typer's ``<bool>`` and
    ``<list[str]>``: set the metavar of every option that has none, from its annotation."""
    for cmd in typer_app.registered_commands:
        for p in inspect.signature(cmd.callback).parameters.values():
            info = p.default
            if not isinstance(info, typer.models.ParameterInfo) or info.metavar is not None:
                continue
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
            ann = str(p.annotation) if ann in ("Optional", "List", "Union") else ann  # typing forms: their str names the type
            if isinstance(info, typer.models.ArgumentInfo):
                info.metavar = p.name.upper()
            elif ann == "bool":
                info.metavar = ""
            elif "Path" in ann:
                info.metavar = "PATH"
            elif "float" in ann:
                info.metavar = "NUM"
            elif "int" in ann:
                info.metavar = "INT"
            elif "str" in ann:
                info.metavar = "TEXT"
    for group in typer_app.registered_groups:
        _plain_metavars(group.typer_instance)


class Interrupted(BaseException):
    """Ctrl-C, raised by our SIGINT handler instead of KeyboardInterrupt (which click turns into a
    blank line and an Abort)."""


def _on_sigint(signum, frame):
    raise Interrupted()


#: the exit statuses of every command (README, "Exit status")
EXIT_OK, EXIT_GATE, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

INTERRUPTED_MESSAGE = ("error: interrupted; nothing half-written was left (reports and tables are written only "
                       "when complete); finished measurements are kept in the results store")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and return its exit status.

    0 success; 1 a ``--fail-if`` gate held (the report is written); 2 bad
    input or usage (one line on stderr: ``error: ...``, no traceback); 130
    interrupted (Ctrl-C), with one line saying what was kept.
    """
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, _on_sigint)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        rv = _register(_modules_for(args))(args=args, standalone_mode=False)
    except FairvisionError as exc:
        message = str(exc)
        if isinstance(exc, ParameterError):
            message = flag_message(message, exc.parameter)
        typer.echo(f"error: {message}", err=True)
        return EXIT_INPUT
    except typer.Exit as exc:
        return exc.exit_code
    except (Interrupted, KeyboardInterrupt, typer.Abort):
        typer.echo(INTERRUPTED_MESSAGE, err=True)
        return EXIT_INTERRUPTED
    except Exception as exc:
        # click's usage errors (bad option, missing argument): typer vendors click, so match by duck type
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return EXIT_INPUT
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return rv if isinstance(rv, int) else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

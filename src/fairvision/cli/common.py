"""Helpers shared by the command modules: reading inputs, progress, printing results."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Iterator

import typer

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


def store_root(store: Path | None = None, no_store: bool = False, cache: Path | None = None) -> Path | None:
    """The folder of the results store a command measures into (None with ``--no-store``), from the options
    ``--store``, ``--no-store`` and the old ``--cache`` (checked against each other), without importing pyarrow
    or DuckDB."""
    if store is not None and cache is not None and Path(store) != Path(cache):
        raise FairvisionError("give --store (or its old name --cache) once")
    if no_store and (store is not None or cache is not None):
        raise FairvisionError("give either --store PATH or --no-store, not both")
    if no_store:
        return None
    from fairvision.io.store_files import default_store_root  # standard library only

    return Path(store if store is not None else cache if cache is not None else default_store_root()).expanduser()


def results_store(store: Path | None = None, no_store: bool = False, cache: Path | None = None):
    """The :class:`fairvision.io.store.ResultsStore` a command measures into (None with ``--no-store``)."""
    root = store_root(store, no_store, cache)
    if root is None:  # before the import below: --no-store needs neither DuckDB nor pyarrow (nor pandas)
        return None
    from fairvision.io.store import ResultsStore  # lazy: DuckDB and pyarrow add about 0.25 s (measured) to every command's start

    res = ResultsStore(root)
    check_writable(res.root, kind="results store")  # before any work
    return res


def console():
    """A rich console on stderr."""
    from rich.console import Console  # lazy: 15 ms of every command's start (python -X importtime)

    return Console(stderr=True)


@contextlib.contextmanager
def status(message: str) -> Iterator:
    """Step messages on stderr (only on a terminal). Plain lines, not a live
    display, so that progress bars of the steps themselves can show."""
    con = console()
    if not con.is_terminal:
        yield lambda msg: None
        return
    yield lambda msg: con.print(f"[dim]{message}: {msg}…[/dim]")


class StageLines:
    """``advance(stage, done, total)`` for a stderr that is not a terminal (a log, CI): one line per finished
    stage, ``"<stage>: <done> of <total> in <s> s"``, when it reaches its total, or at the end of a run for a
    stage that stopped short of it (items read from the store, say). A stage's clock starts when the run
    starts or when the stage before it finished, whichever is later."""

    def __init__(self, echo=None):
        self.echo = echo or (lambda line: typer.echo(line, err=True))
        self.started = time.perf_counter()
        self.last_finish = self.started
        self.stages: dict[str, list] = {}  # stage -> [start, done, total, said]

    def __call__(self, stage: str, n_done: int, total: int) -> None:
        now = time.perf_counter()
        state = self.stages.setdefault(stage, [self.last_finish, 0, 0, False])
        state[1:3] = [int(n_done), int(total)]
        if not state[3] and state[1] >= state[2]:
            self._say(stage, state, now)

    def _say(self, stage: str, state: list, now: float) -> None:
        state[3] = True
        self.last_finish = now
        self.echo(f"{stage}: {state[1]:,} of {state[2]:,} in {now - state[0]:.1f} s")

    def close(self) -> None:
        """The end of a run: a line for each stage that started but did not reach its total."""
        now = time.perf_counter()
        for stage, state in self.stages.items():
            if not state[3]:
                self._say(stage, state, now)


@contextlib.contextmanager
def progress_bars(show: bool = True) -> Iterator:
    """``advance(stage, done, total)`` backed by rich progress bars on stderr, one per stage, when stderr is a
    terminal; otherwise one line per finished stage (:class:`StageLines`). None when ``show`` is false."""
    if not show:
        yield None
        return
    con = console()
    if not con.is_terminal:
        lines = StageLines()
        yield lines
        lines.close()  # not reached when the run fails: only finished stages are reported
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
    function when ``show`` is false."""
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
    p = Path(source)
    if source not in ("portraits", "demo") and not p.exists():  # before the imports below: an error at once
        raise FairvisionError(f"{p}: no such file or folder ({hint})")
    # lazy: pandas (about 0.5 s) is only needed once a command runs
    from fairvision.datasets import from_folder, load_demo, load_portraits
    from fairvision.io.tables import read_table

    if source == "portraits":
        return load_portraits()
    if source == "demo":
        return load_demo()
    if p.is_dir():
        return from_folder(p, recursive=recursive)
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
